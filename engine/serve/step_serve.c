/*
 * step_serve.c - `mpirun -np N day0-engine serve`: the model behind an
 * OpenAI-compatible HTTP endpoint, with continuous batching (serve.h).
 *
 * Every rank runs the same loop: receive one batch description from rank
 * 0 (segments: KV slot, first position, length; then the tokens), run
 * rt_forward_batch, repeat.  Rank 0 builds the batches: at each step it
 * frees the slots of finished or cancelled requests, admits queued
 * requests into free slots (FIFO, never more than the KV budget holds: a
 * full cache means waiting, not failing), and puts each running request's
 * next piece in the batch (its whole prompt when it was just admitted, else
 * its last token).  The last stage's logits come back to rank 0, which
 * picks each sequence's next token (greedy: lowest index on ties, as `run`;
 * or sampled with the request's seed) and its logprobs.
 *
 * Ranks other than 0 wait for the next batch with a non-blocking broadcast
 * and short sleeps, so an idle server does not spin the cores.
 */
#include "rt_batch.h"
#include "serve.h"
#include "tokenizer.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

static int serve(int argc, char **argv);

const struct step_entry step_serve = {
	.name = "serve",
	.usage = "(MODEL_DIR | CONVERTED_DIR) --tp T [--pp P] [--ep E] "
		 "[--host 127.0.0.1] [--port 8000] [--port-file FILE] "
		 "[--max-ctx N] [--kv-seqs N | --kv-mem BYTES] [--card-mem BYTES] "
		 "[--max-queue N] [--max-batch-tokens N] [--max-body BYTES] "
		 "[--served-model-name NAME] [--events]  (under mpirun -np T*P*E)\n"
		 "  --host ADDR           address to listen on (default 127.0.0.1)\n"
		 "  --port N              TCP port, 0 for any free one (default 8000)\n"
		 "  --port-file FILE      write the bound port there once listening\n"
		 "  --max-ctx N           tokens per sequence, prompt + output "
		 "(default min(max_position_embeddings, 2048))\n"
		 "  --kv-seqs N           KV-cache slots: sequences decoded together "
		 "(default 16)\n"
		 "  --kv-mem BYTES        or: the KV-cache budget per card; slots = "
		 "BYTES / one sequence's KV\n"
		 "  --card-mem BYTES      the card budget for weights + KV (as run)\n"
		 "  --max-queue N         requests waiting for a slot before 503 "
		 "(default 1024)\n"
		 "  --max-batch-tokens N  tokens per forward pass (default 4096)\n"
		 "  --max-body BYTES      request bodies above get 413 (default 1M)\n"
		 "  --served-model-name   the model id clients send (default: the "
		 "directory's name)\n"
		 "  --events              JSON-lines events (stage, samples) on "
		 "stdout\n"
		 "example: mpirun -np 2 day0-engine serve /models/m --tp 2 --port 8000 "
		 "--kv-seqs 8\n"
		 "         curl -s localhost:8000/v1/completions -d "
		 "'{\"prompt\":[1,2,3],\"max_tokens\":8,\"temperature\":0}'",
	.summary = "OpenAI-compatible HTTP endpoint over the parallel runtime "
		   "(continuous batching, SSE, logprobs, /metrics)",
	.help =
		 "  --tp/--pp/--ep        the layout (as run); mpirun -np must be T*P*E",
	.run = serve,
};

struct serve_opts {
	const char *dir, *host, *port_file, *name;
	struct layout_dims d;
	int port, kv_seqs, max_queue, max_batch, events;
	int64_t max_ctx;
	uint64_t kv_mem, card_mem, max_body;
};

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { (void)sig; stop_signal = 1; }

static int parse(int argc, char **argv, struct serve_opts *o, int rank)
{
	static const struct option lo[] = {
		{"tp", 1, 0, 't'}, {"pp", 1, 0, 'p'}, {"ep", 1, 0, 'e'},
		{"host", 1, 0, 'H'}, {"port", 1, 0, 'P'}, {"port-file", 1, 0, 'F'},
		{"max-ctx", 1, 0, 'c'}, {"kv-seqs", 1, 0, 's'}, {"kv-mem", 1, 0, 'k'},
		{"card-mem", 1, 0, 'm'}, {"max-queue", 1, 0, 'q'},
		{"max-batch-tokens", 1, 0, 'b'}, {"max-body", 1, 0, 'B'},
		{"served-model-name", 1, 0, 'n'}, {"events", 0, 0, 'E'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_serve;
	int ch;
	long v;
#define BAD(...) return rank ? EXIT_USAGE : step_usage_error(S, __VA_ARGS__)
	memset(o, 0, sizeof *o);
	o->d.pp = o->d.ep = 1;
	o->host = "127.0.0.1";
	o->port = 8000;
	o->max_queue = 1024;
	o->max_batch = 4096;
	o->max_body = 1 << 20;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 't': case 'p': case 'e':
			if (parse_long(optarg, 1, 65536, &v) < 0)
				BAD("--%s: expected an integer >= 1",
				    ch == 't' ? "tp" : ch == 'p' ? "pp" : "ep");
			*(ch == 't' ? &o->d.tp : ch == 'p' ? &o->d.pp : &o->d.ep) = (int)v;
			break;
		case 'H': o->host = optarg; break;
		case 'P':
			if (parse_long(optarg, 0, 65535, &v) < 0)
				BAD("--port: expected 0..65535");
			o->port = (int)v;
			break;
		case 'F': o->port_file = optarg; break;
		case 'c':
			if (parse_long(optarg, 2, 1L << 24, &v) < 0)
				BAD("--max-ctx: expected a token count >= 2");
			o->max_ctx = v;
			break;
		case 's':
			if (parse_long(optarg, 1, 1 << 16, &v) < 0)
				BAD("--kv-seqs: expected a count >= 1");
			o->kv_seqs = (int)v;
			break;
		case 'k':
			if (parse_size(optarg, &o->kv_mem) < 0 || !o->kv_mem)
				BAD("--kv-mem: expected bytes (e.g. 64M)");
			break;
		case 'm':
			if (parse_size(optarg, &o->card_mem) < 0)
				BAD("--card-mem: expected bytes (e.g. 64M, 2G)");
			break;
		case 'q':
			if (parse_long(optarg, 1, 1 << 20, &v) < 0)
				BAD("--max-queue: expected a count >= 1");
			o->max_queue = (int)v;
			break;
		case 'b':
			if (parse_long(optarg, 1, 1 << 24, &v) < 0)
				BAD("--max-batch-tokens: expected a count >= 1");
			o->max_batch = (int)v;
			break;
		case 'B':
			if (parse_size(optarg, &o->max_body) < 0 || !o->max_body)
				BAD("--max-body: expected bytes (e.g. 1M)");
			break;
		case 'n': o->name = optarg; break;
		case 'E': o->events = 1; break;
		case 'h': if (!rank) step_help(S); return -1;
		default: BAD("unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		BAD("expected one MODEL_DIR or CONVERTED_DIR");
	o->dir = argv[optind];
	if (!o->d.tp)
		BAD("--tp is required");
	if (o->kv_seqs && o->kv_mem)
		BAD("--kv-seqs and --kv-mem: give one of them");
#undef BAD
	return 0;
}

static int agree(int rc)
{
	int v = rc;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	return v;
}

/* ------------------------------------------------------- the batch wire */

/* Header broadcast each step: stop flag, segments, tokens. */
struct batch_head {
	int32_t stop, nseg, ntok, pad;
};

/* Wait for rank 0's broadcast without spinning a core while idle. */
static void bcast_wait(void *buf, int n, MPI_Datatype t)
{
	MPI_Request rq;
	int done = 0;
	long spins = 0;
	MPI_Ibcast(buf, n, t, 0, MPI_COMM_WORLD, &rq);
	for (;;) {
		MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
		if (done)
			return;
		if (++spins > 2000) {
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
		}
	}
}

/* ------------------------------------------------------------ sampling */

/* log-softmax of row (n) in double; returns log Z so lp_i = x_i - logZ. */
static double log_norm(const float *row, int n)
{
	double mx = row[0], sum = 0;
	for (int i = 1; i < n; i++)
		if (row[i] > mx)
			mx = row[i];
	for (int i = 0; i < n; i++)
		sum += exp((double)row[i] - mx);
	return mx + log(sum);
}

/* The k most likely ids (ties: lower id first) and their logprobs. */
static void top_k(const float *row, int n, int k, double lz, int *ids,
		  float *lps)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int m = 0; m < j && !taken; m++)
				taken = ids[m] == i;
			if (!taken && (best < 0 || row[i] > row[best]))
				best = i;
		}
		ids[j] = best;
		lps[j] = (float)((double)row[best] - lz);
	}
}

static int64_t pick(struct srv_req *q, const float *row, int n)
{
	int64_t best = 0;
	if (q->temperature <= 0) {
		for (int v = 1; v < n; v++)
			if (row[v] > row[best])
				best = v;
		return best;
	}
	{
		double mx = row[0], sum = 0, u, acc = 0;
		for (int v = 1; v < n; v++)
			if (row[v] > mx)
				mx = row[v];
		for (int v = 0; v < n; v++)
			sum += exp(((double)row[v] - mx) / q->temperature);
		u = rng_uniform(&q->rng) * sum;
		for (int v = 0; v < n; v++) {
			acc += exp(((double)row[v] - mx) / q->temperature);
			if (acc > u)
				return v;
		}
		return n - 1;
	}
}

/* ----------------------------------------------------------- scheduler */

static void finish_req(struct srv *s, struct srv_req *q, const char *why)
{
	double now = now_s();
	q->state = SRV_DONE;
	q->finish = why;
	if (q->slot >= 0)
		s->slot_used[q->slot] = 0;
	q->slot = -1;
	if (q->cancelled) {
		s->m.req_cancelled++;
	} else if (strcmp(why, "abort")) {
		s->m.req_ok++;
		srv_hist_add(&s->m.e2e, now - q->t_arrive);
		if (q->nout > 1)
			srv_hist_add(&s->m.tpot, (q->t_last - q->t_first) / (q->nout - 1));
	}
	pthread_cond_broadcast(&q->wake);
}

/* Drop finished and cancelled requests from the running list (locked). */
static void reap(struct srv *s)
{
	struct srv_req **pp = &s->running;
	while (*pp) {
		struct srv_req *q = *pp;
		if (q->cancelled && q->state != SRV_DONE)
			finish_req(s, q, "abort");
		if (q->state == SRV_DONE) {
			*pp = q->next;
			s->nrunning--;
			srv_req_unref(q);
		} else {
			pp = &q->next;
		}
	}
	/* cancelled while still queued */
	for (struct srv_req **qp = &s->queue_head, *prev = NULL; *qp;) {
		struct srv_req *q = *qp;
		if (q->cancelled) {
			*qp = q->next;
			if (s->queue_tail == q)
				s->queue_tail = prev;
			s->nqueued--;
			finish_req(s, q, "abort");
			srv_req_unref(q);
		} else {
			prev = q;
			qp = &q->next;
		}
	}
}

static int free_slot(struct srv *s)
{
	for (int i = 0; i < s->slots; i++)
		if (!s->slot_used[i])
			return i;
	return -1;
}

/* Admit queued requests into free slots (FIFO) while the batch has room. */
static void admit(struct srv *s, int room)
{
	while (s->queue_head && s->queue_head->nprompt <= room) {
		struct srv_req *q = s->queue_head;
		int slot = free_slot(s);
		if (slot < 0)
			return;
		s->queue_head = q->next;
		if (!s->queue_head)
			s->queue_tail = NULL;
		s->nqueued--;
		s->slot_used[slot] = 1;
		q->slot = slot;
		q->state = SRV_RUNNING;
		q->pos = 0;
		q->next = s->running;
		s->running = q;
		if (++s->nrunning > s->m.kv_peak)
			s->m.kv_peak = s->nrunning;
		room -= q->nprompt;
	}
}

struct batch {
	struct rt_seg *seg;
	struct srv_req **req; /* per segment */
	int64_t *tok;
	int nseg, ntok, cap_seg, cap_tok;
};

static void batch_add(struct batch *b, struct srv_req *q, const int64_t *t,
		      int n)
{
	if (b->nseg == b->cap_seg) {
		b->cap_seg = b->cap_seg ? 2 * b->cap_seg : 64;
		b->seg = realloc(b->seg, (size_t)b->cap_seg * sizeof *b->seg);
		b->req = realloc(b->req, (size_t)b->cap_seg * sizeof *b->req);
	}
	if (b->ntok + n > b->cap_tok) {
		b->cap_tok = (b->ntok + n) * 2;
		b->tok = realloc(b->tok, (size_t)b->cap_tok * sizeof *b->tok);
	}
	b->seg[b->nseg] = (struct rt_seg){.slot = q->slot, .pos0 = q->pos, .len = n};
	b->req[b->nseg++] = q;
	memcpy(b->tok + b->ntok, t, (size_t)n * sizeof *t);
	b->ntok += n;
}

/* Rank 0: the next batch (locked); waits while there is nothing to do. */
static void emit_samples(struct srv *s, int force);

static void plan_batch(struct srv *s, struct batch *b, int max_batch)
{
	struct timespec ts;
	b->nseg = b->ntok = 0;
	reap(s);
	for (;;) {
		int decoding = 0;
		for (struct srv_req *q = s->running; q; q = q->next)
			decoding += q->prefilled;
		admit(s, max_batch - decoding);
		for (struct srv_req *q = s->running; q; q = q->next) {
			if (q->prefilled)
				batch_add(b, q, &q->out[q->nout - 1], 1);
			else if (b->ntok + q->nprompt <= max_batch || !b->ntok)
				batch_add(b, q, q->prompt, q->nprompt);
		}
		if (b->nseg || s->stopping || stop_signal)
			return;
		emit_samples(s, 0);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L)
			ts.tv_sec++, ts.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&s->work, &s->lock, &ts);
		reap(s);
	}
}

static void grow_out(struct srv_req *q)
{
	int k = q->top_logprobs > 0 ? q->top_logprobs : 1;
	size_t n = (size_t)q->max_tokens;
	if (q->out)
		return;
	q->out = calloc(n, sizeof *q->out);
	q->out_lp = calloc(n, sizeof *q->out_lp);
	q->out_top_id = calloc(n * k, sizeof *q->out_top_id);
	q->out_top_lp = calloc(n * k, sizeof *q->out_top_lp);
}

/* Prompt logprobs (echo): row i predicts prompt token i + 1. */
static void prompt_logprobs(struct srv_req *q, const float *rows, int V)
{
	int k = q->top_logprobs;
	q->p_lp = calloc((size_t)q->nprompt, sizeof *q->p_lp);
	q->p_top_id = calloc((size_t)q->nprompt * (k ? k : 1), sizeof(int));
	q->p_top_lp = calloc((size_t)q->nprompt * (k ? k : 1), sizeof(float));
	for (int i = 1; i < q->nprompt; i++) {
		const float *row = rows + (size_t)(i - 1) * V;
		double lz = log_norm(row, V);
		q->p_lp[i] = (float)((double)row[q->prompt[i]] - lz);
		top_k(row, V, k, lz, q->p_top_id + (size_t)i * k,
		      q->p_top_lp + (size_t)i * k);
	}
}

/* Rank 0: take each segment's logits (locked). */
/*
 * Does segment g's request want logits at every row of it (a prompt whose
 * logprobs are echoed), or at its last only?  Rank 0 decides, every rank
 * computes the same rows (batch_rows).
 */
static int wants_all_rows(const struct srv_req *q)
{
	return !q->prefilled && q->echo && q->top_logprobs >= 0;
}

/* The batch rows whose logits are computed: each segment's last, or all
 * of it where all[g]; rows must hold ntok. */
static int batch_rows(const struct batch *b, const int *all, int *rows)
{
	int n = 0, row0 = 0;
	for (int g = 0; g < b->nseg; row0 += b->seg[g].len, g++)
		for (int i = all[g] ? 0 : b->seg[g].len - 1; i < b->seg[g].len; i++)
			rows[n++] = row0 + i;
	return n;
}

/* logits holds batch_rows' rows in order: segment g's are all of it
 * where all[g], else its last. */
static void consume(struct srv *s, struct batch *b, const float *logits, int V,
		    const int *all)
{
	double now = now_s();
	int row0 = 0;
	s->m.steps++;
	s->m.batch_tokens += (uint64_t)b->ntok;
	for (int g = 0; g < b->nseg; row0 += all[g] ? b->seg[g].len : 1, g++) {
		struct srv_req *q = b->req[g];
		const float *last = logits + (size_t)(row0 + (all[g] ? b->seg[g].len - 1 : 0)) * V;
		int64_t next;
		if (!q->prefilled) {
			q->prefilled = 1;
			s->m.prompt_tokens += (uint64_t)q->nprompt;
			if (all[g])
				prompt_logprobs(q, logits + (size_t)row0 * V, V);
		}
		q->pos += b->seg[g].len;
		if (q->cancelled || q->state == SRV_DONE)
			continue;
		grow_out(q);
		next = pick(q, last, V);
		if (q->top_logprobs >= 0) {
			double lz = log_norm(last, V);
			int k = q->top_logprobs;
			q->out_lp[q->nout] = (float)((double)last[next] - lz);
			top_k(last, V, k, lz, q->out_top_id + (size_t)q->nout * k,
			      q->out_top_lp + (size_t)q->nout * k);
		}
		q->out[q->nout++] = next;
		s->m.gen_tokens++;
		if (q->nout == 1) {
			q->t_first = now;
			srv_hist_add(&s->m.ttft, now - q->t_arrive);
		}
		q->t_last = now;
		if (q->nout >= q->max_tokens)
			finish_req(s, q, "length");
		else
			pthread_cond_broadcast(&q->wake);
	}
}

/* Stop: every request still waiting ends with finish_reason "abort". */
static void abort_all(struct srv *s)
{
	s->stopping = 1;
	for (struct srv_req *q = s->running; q; q = q->next)
		if (q->state != SRV_DONE)
			finish_req(s, q, "abort");
	for (struct srv_req *q = s->queue_head; q; q = q->next)
		finish_req(s, q, "abort");
}

/* Rank 0, under the lock: every second; at once when the server falls
 * idle (the figures a run's end leaves on the console: plan_batch calls
 * it while it waits for work) and when stopping (force). */
static void emit_samples(struct srv *s, int force)
{
	static int busy_since; /* busy at some call since the last emission */
	static double last_emit;
	double now = now_s();
	int used = 0, busy = s->nqueued || s->nrunning;
	busy_since |= busy;
	if (!events_enabled() ||
	    (!force && now - last_emit < 1.0 && (busy || !busy_since)))
		return;
	last_emit = now;
	busy_since = busy;
	for (int i = 0; i < s->slots; i++)
		used += s->slot_used[i];
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.queue", "value", s->nqueued));
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.running", "value", s->nrunning));
	events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", -1, "metric",
					"serve.gen_tokens", "value",
					(json_int_t)s->m.gen_tokens));
	/* Every card holds its slice of each sequence, the same bytes per
	 * slot on each (rt_kv_seq_bytes of the layout): one line for the
	 * cards of rank 0's host (other hosts' cards are their agents'). */
	{
		json_t *u = json_array(), *b = json_array();
		for (int i = 0; i < s->local_cards && i < 4096; i++) {
			json_array_append_new(u, json_integer((json_int_t)(
			    s->kv_seq_bytes * (uint64_t)used)));
			json_array_append_new(b, json_integer((json_int_t)(
			    s->kv_seq_bytes * (uint64_t)s->slots)));
		}
		events_emit("sample", json_pack("{s:i, s:s, s:o}", "card", 0,
						"metric", "kv.used", "values", u));
		events_emit("sample", json_pack("{s:i, s:s, s:o}", "card", 0,
						"metric", "kv.budget", "values", b));
	}
}

/* -------------------------------------------------------------- the step */

static int64_t default_ctx(const char *dir)
{
	struct model_config c;
	struct d0_err e;
	char *p = path_join(dir, "config.json");
	int64_t n = 2048;
	if (model_config_load(p, &c, &e) == 0) {
		if (c.max_pos > 0 && c.max_pos < n)
			n = c.max_pos;
		model_config_free(&c);
	}
	free(p);
	return n;
}

static int kv_slots(const struct serve_opts *o, int64_t max_ctx, int rank,
		    uint64_t *seq_bytes)
{
	struct model_config c;
	struct d0_err e;
	char *p = path_join(o->dir, "config.json");
	int slots = o->kv_seqs ? o->kv_seqs : 16;
	*seq_bytes = 0;
	if (model_config_load(p, &c, &e) == 0) {
		*seq_bytes = rt_kv_seq_bytes(&c, &o->d, max_ctx);
		if (o->kv_mem) {
			uint64_t n = *seq_bytes ? o->kv_mem / *seq_bytes : 0;
			slots = n > 65536 ? 65536 : (int)n;
			if (!slots && rank == 0) {
				char a[32], b[32];
				fprintf(stderr, "day0-engine serve: --kv-mem %s holds no "
					"sequence of %lld tokens (%s each per card)\n",
					fmt_bytes(o->kv_mem, a), (long long)max_ctx,
					fmt_bytes(*seq_bytes, b));
			}
		}
		model_config_free(&c);
	}
	free(p);
	return slots;
}

static int listen_rank0(struct srv *s, const struct serve_opts *o)
{
	struct d0_err err = {{0}};
	if (srv_http_start(s, o->host, o->port, &err) < 0) {
		fprintf(stderr, "day0-engine serve: %s\n", err.msg);
		return -1;
	}
	if (o->port_file) {
		FILE *f = fopen(o->port_file, "w");
		if (!f || fprintf(f, "%d\n", s->port) < 0 || fclose(f)) {
			fprintf(stderr, "day0-engine serve: %s: cannot write the port\n",
				o->port_file);
			return -1;
		}
	}
	if (o->events)
		events_emit("log", json_pack("{s:s, s:s, s:s, s:i}", "level", "info",
					     "msg", "serving", "host", o->host,
					     "port", s->port));
	else
		printf("serve: %s on http://%s:%d (%d KV slots of %lld tokens)\n",
		       s->model_name, o->host, s->port, s->slots,
		       (long long)s->max_ctx);
	fflush(stdout);
	return 0;
}

/* Every rank: the serving loop until rank 0 broadcasts stop. */
static int loop(struct srv *s, struct rt *r, const struct serve_opts *o,
		int rank)
{
	struct batch b = {0};
	struct d0_err err = {{0}};
	int V = (int)rt_config(r)->vocab, last = rt_last_stage_root(r), rc = 0;
	float *logits = NULL;
	int *all = NULL, *rows = NULL, nrows, cap_all = 0, cap_rows = 0;
	size_t cap = 0;
	for (;;) {
		struct batch_head h = {0};
		if (rank == 0) {
			pthread_mutex_lock(&s->lock);
			if (stop_signal)
				s->stopping = 1;
			plan_batch(s, &b, o->max_batch);
			h.stop = s->stopping || stop_signal;
			h.nseg = b.nseg;
			h.ntok = b.ntok;
			emit_samples(s, h.stop);
			pthread_mutex_unlock(&s->lock);
			{ /* an Ibcast matches the other ranks' Ibcast */
				MPI_Request rq;
				MPI_Ibcast(&h, 4, MPI_INT32_T, 0, MPI_COMM_WORLD, &rq);
				MPI_Wait(&rq, MPI_STATUS_IGNORE);
			}
		} else {
			bcast_wait(&h, 4, MPI_INT32_T);
		}
		if (h.stop)
			break;
		if (rank) {
			if (h.nseg > b.cap_seg) {
				b.cap_seg = h.nseg;
				b.seg = realloc(b.seg, (size_t)h.nseg * sizeof *b.seg);
			}
			if (h.ntok > b.cap_tok) {
				b.cap_tok = h.ntok;
				b.tok = realloc(b.tok, (size_t)h.ntok * sizeof *b.tok);
			}
			b.nseg = h.nseg;
			b.ntok = h.ntok;
		}
		MPI_Bcast(b.seg, h.nseg * (int)sizeof *b.seg, MPI_BYTE, 0, MPI_COMM_WORLD);
		MPI_Bcast(b.tok, h.ntok, MPI_INT64_T, 0, MPI_COMM_WORLD);
		/* logits where they are used: each segment's last row, every
		 * row of a prompt whose logprobs are echoed */
		if (h.nseg > cap_all) {
			cap_all = h.nseg;
			all = realloc(all, (size_t)cap_all * sizeof *all);
		}
		if (h.ntok > cap_rows) {
			cap_rows = h.ntok;
			rows = realloc(rows, (size_t)cap_rows * sizeof *rows);
		}
		if (!all || !rows)
			abort();
		if (rank == 0)
			for (int g = 0; g < b.nseg; g++)
				all[g] = wants_all_rows(b.req[g]);
		MPI_Bcast(all, h.nseg, MPI_INT, 0, MPI_COMM_WORLD);
		nrows = batch_rows(&b, all, rows);
		if ((size_t)nrows * V > cap) {
			cap = (size_t)nrows * V;
			logits = realloc(logits, cap * sizeof *logits);
		}
		if (rt_forward_rows(r, b.tok, b.seg, b.nseg, rows, nrows, logits,
				    &err) < 0) {
			/* every rank sees the same batch, so the same refusal */
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
			rc = -1;
			break;
		}
		if (rank == last && last != 0)
			MPI_Send(logits, nrows * V, MPI_FLOAT, 0, 21, MPI_COMM_WORLD);
		if (rank == 0) {
			if (last != 0)
				MPI_Recv(logits, nrows * V, MPI_FLOAT, last, 21,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			pthread_mutex_lock(&s->lock);
			consume(s, &b, logits, V, all);
			pthread_mutex_unlock(&s->lock);
		}
	}
	if (rank == 0) {
		pthread_mutex_lock(&s->lock);
		abort_all(s);
		pthread_mutex_unlock(&s->lock);
	}
	free(b.seg);
	free(b.req);
	free(b.tok);
	free(logits);
	free(all);
	free(rows);
	return rc;
}

/* A string prompt, through the model's own tokenizer.json (as vLLM does:
 * the post-processor's special tokens added, Llama's BOS). */
static int serve_tokenize(void *ctx, const char *text, int64_t **ids, int *n,
			  struct d0_err *err)
{
	int32_t *t32 = NULL;
	size_t k = 0;
	if (tokenizer_encode(ctx, text, strlen(text), 1, &t32, &k, err) < 0)
		return -1;
	if (k == 0) {
		free(t32);
		return d0_errf(err, "the text encodes to no tokens");
	}
	*ids = malloc(k * sizeof **ids);
	if (!*ids)
		abort();
	for (size_t i = 0; i < k; i++)
		(*ids)[i] = t32[i];
	*n = (int)k;
	free(t32);
	return 0;
}

static int serve(int argc, char **argv)
{
	struct tokenizer *tok = NULL;
	struct serve_opts o;
	struct srv s = {0};
	struct rt *r = NULL;
	struct d0_err err = {{0}};
	int rank, rc, slots;
	const char *base;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	rc = parse(argc, argv, &o, rank);
	if (agree(rc != 0)) {
		MPI_Finalize();
		return rc < 0 ? EXIT_OK : EXIT_USAGE;
	}
	events_init(stdout, o.events);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	if (!o.max_ctx)
		o.max_ctx = default_ctx(o.dir);
	slots = kv_slots(&o, o.max_ctx, rank, &s.kv_seq_bytes);
	{ /* rank 0's host's ranks are its cards 0..n-1 (the agent's rank map) */
		MPI_Comm host; /* collective: every rank splits */
		int on_host = 1;
		MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
				    MPI_INFO_NULL, &host);
		MPI_Comm_size(host, &on_host);
		s.local_cards = on_host;
		MPI_Comm_free(&host);
	}
	if (rank == 0)
		events_stage("serve", "start", 0, 0, o.dir);
	rc = slots > 0 ? rt_open_slots(&r, o.dir, &o.d, o.card_mem, o.max_ctx,
				       slots, &err)
		       : -1;
	if (agree(rc < 0)) {
		if (rc < 0 && err.msg[0])
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
		if (rank == 0)
			events_stage("serve", "end", 1, EXIT_USAGE, "refused");
		rt_close(r);
		MPI_Finalize();
		return EXIT_USAGE;
	}
	if (agree(rt_over_budget(r) != NULL)) {
		const char *why = rt_over_budget(r);
		if (why) {
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, why);
			events_check("resources.peak", "fail", why,
				     json_integer((json_int_t)rt_mem_peak(r)),
				     json_integer((json_int_t)o.card_mem));
		}
		if (rank == 0)
			events_stage("serve", "end", 1, EXIT_CHECK_FAILED,
				     "card memory budget exceeded");
		rt_close(r);
		MPI_Finalize();
		return EXIT_CHECK_FAILED;
	}
	base = strrchr(o.dir, '/');
	base = base && base[1] ? base + 1 : o.dir;
	s.model_name = o.name ? o.name : base;
	s.slots = slots;
	s.max_queue = o.max_queue;
	s.max_ctx = o.max_ctx;
	s.vocab = rt_config(r)->vocab;
	s.max_body = o.max_body;
	if (rank == 0) {
		/* Text prompts when the model ships a tokenizer; without one a
		 * string prompt is a 400 that says so. */
		char *tj = path_join(o.dir, "tokenizer.json");
		struct d0_err te = {{0}};
		if (path_exists(tj) && tokenizer_open(o.dir, &tok, &te) < 0)
			fprintf(stderr, "day0-engine: %s (text prompts refused)\n",
				te.msg);
		free(tj);
		if (tok) {
			s.tokenize = serve_tokenize;
			s.tokenize_ctx = tok;
		}
	}
	srv_init(&s);
	rc = rank == 0 ? listen_rank0(&s, &o) : 0;
	if (agree(rc != 0)) {
		srv_http_stop(&s);
		srv_destroy(&s);
		tokenizer_free(tok);
		rt_close(r);
		MPI_Finalize();
		return EXIT_USAGE;
	}
	rc = loop(&s, r, &o, rank);
	if (rank == 0) {
		srv_http_stop(&s);
		pthread_mutex_lock(&s.lock);
		reap(&s);
		while (s.queue_head) { /* aborted while queued */
			struct srv_req *q = s.queue_head;
			s.queue_head = q->next;
			srv_req_unref(q);
		}
		pthread_mutex_unlock(&s.lock);
		events_stage("serve", "end", 1, rc ? EXIT_CHECK_FAILED : 0, o.dir);
	}
	srv_destroy(&s);
	tokenizer_free(tok);
	rt_close(r);
	MPI_Finalize();
	return rc ? EXIT_CHECK_FAILED : EXIT_OK;
}
