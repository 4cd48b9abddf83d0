/*
 * step_serve.c - `mpirun -np N day0-engine serve`: the model behind an
 * OpenAI-compatible HTTP endpoint, with continuous batching over a paged
 * KV cache (serve.h; the block layout and the scheduler's rules:
 * docs/serve.md).
 *
 * Every rank runs the same loop: receive one batch description from rank
 * 0 (segments: first position, length, the sequence's block table; then
 * the tokens), run rt_forward_rows, repeat.  Rank 0 builds the batches
 * (schedule): at each step it frees the blocks of finished or cancelled
 * requests, gives each running sequence its next piece under a token
 * budget (decodes first, then prompt chunks) with the blocks it needs,
 * preempting the newest sequence when none are left (its blocks freed,
 * recomputed later), and admits queued requests FIFO while their blocks
 * are free (full blocks of a cached prefix shared, kv_pool.c).  A full
 * cache means waiting or preemption, never a failed request.  The last
 * stage's logits come back to rank 0, which picks each sequence's next
 * token (greedy: lowest index on ties, as `run`; or sampled with the
 * request's seed) and its logprobs.
 *
 * Ranks other than 0 wait for the next batch with a non-blocking broadcast
 * and short sleeps, so an idle server does not spin the cores.
 *
 * With --pp the batches are micro-batches kept in flight across the
 * stages (loop_pipe): rank 0 sends each one's description point-to-point
 * and plans the next while the later stages work; a micro-batch's
 * sequences go again as soon as its logits are back.  The decodes are cut
 * only where each micro-batch gets --micro-batch-tokens of them (a stage
 * reads all its weights once per micro-batch, so a few rows more cost
 * little and a second read of the weights a lot), each micro-batch at
 * most --max-seqs sequences (vLLM's max_num_seqs per virtual engine).
 */
#include "rt_batch.h"
#include "serve.h"
#include "serve_chat.h"
#include "tokenizer.h"

#include <getopt.h>
#include <malloc.h>
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
		 "[--max-ctx N] [--kv-seqs N | --kv-mem BYTES | --kv-blocks N] "
		 "[--block-tokens N] [--kv-policy paged|slots] [--no-prefix-cache] "
		 "[--micro-batches M] [--micro-batch-tokens N] [--max-seqs N] "
		 "[--card-mem BYTES] "
		 "[--max-queue N] [--max-batch-tokens N] [--max-body BYTES] "
		 "[--served-model-name NAME] [--events]  (under mpirun -np T*P*E)\n"
		 "  --host ADDR           address to listen on (default 127.0.0.1)\n"
		 "  --port N              TCP port, 0 for any free one (default 8000)\n"
		 "  --port-file FILE      write the bound port there once listening "
		 "(removed when serve stops)\n"
		 "  --max-ctx N           tokens per sequence, prompt + output "
		 "(default min(max_position_embeddings, 2048))\n"
		 "  --kv-seqs N           the KV cache: N full contexts' worth of "
		 "blocks (default 16)\n"
		 "  --kv-mem BYTES        or: the KV-cache budget per card, in "
		 "blocks\n"
		 "  --kv-blocks N         or: N blocks\n"
		 "  --block-tokens N      tokens per KV block (default 16)\n"
		 "  --kv-policy P         paged (default): blocks as sequences grow, "
		 "preemption when they run out; slots: a whole context reserved "
		 "per sequence (for comparison)\n"
		 "  --no-prefix-cache     do not share cached prefix blocks\n"
		 "  --micro-batches M     with --pp: up to M micro-batches in flight "
		 "across the stages, each with an M-th of the decodes (default P; 1: "
		 "one batch at a time)\n"
		 "  --micro-batch-tokens N  the decodes are cut into micro-batches "
		 "only where each gets at least N of them (default 16: fewer rows do "
		 "not pay for a second read of a stage's weights; 1: always cut; "
		 "prompt chunks are cut whatever N)\n"
		 "  --max-seqs N          sequences a step (with --pp: each micro-"
		 "batch) holds at most; at most N x M run at once (default 256, "
		 "vLLM's max_num_seqs)\n"
		 "  --card-mem BYTES      the card budget for weights + KV (as run)\n"
		 "  --max-queue N         requests waiting for a slot before 503 "
		 "(default 1024)\n"
		 "  --max-batch-tokens N  tokens per forward pass, decodes first, "
		 "then prompt chunks (default 4096)\n"
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
	int port, kv_seqs, kv_blocks, block_tokens, slot_policy, no_prefix;
	int max_queue, max_batch, events, micro, micro_tokens, max_seqs;
	int64_t max_ctx;
	uint64_t kv_mem, card_mem, max_body;
};

/* SIGTERM/SIGINT: the serving loop stops at its next step, and the HTTP
 * side (rank 0's s->stopping) at once: a step in flight (a long forward,
 * a rank held) must not leave /health 200 and new requests admitted. */
static volatile sig_atomic_t stop_signal;
static struct srv *volatile signal_srv;
static void on_signal(int sig)
{
	struct srv *s = signal_srv;
	(void)sig;
	stop_signal = 1;
	if (s)
		s->stopping = 1;
}

static int parse(int argc, char **argv, struct serve_opts *o, int rank)
{
	static const struct option lo[] = {
		{"tp", 1, 0, 't'}, {"pp", 1, 0, 'p'}, {"ep", 1, 0, 'e'},
		{"host", 1, 0, 'H'}, {"port", 1, 0, 'P'}, {"port-file", 1, 0, 'F'},
		{"max-ctx", 1, 0, 'c'}, {"kv-seqs", 1, 0, 's'}, {"kv-mem", 1, 0, 'k'},
		{"card-mem", 1, 0, 'm'}, {"max-queue", 1, 0, 'q'},
		{"max-batch-tokens", 1, 0, 'b'}, {"max-body", 1, 0, 'B'},
		{"served-model-name", 1, 0, 'n'}, {"events", 0, 0, 'E'},
		{"kv-blocks", 1, 0, 'K'}, {"block-tokens", 1, 0, 'T'},
		{"kv-policy", 1, 0, 'L'}, {"no-prefix-cache", 0, 0, 'X'},
		{"micro-batches", 1, 0, 'M'}, {"micro-batch-tokens", 1, 0, 'U'},
		{"max-seqs", 1, 0, 'S'},
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
	o->block_tokens = 16;
	o->micro_tokens = 16;
	o->max_seqs = 256;
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
		case 'K':
			if (parse_long(optarg, 1, 1 << 24, &v) < 0)
				BAD("--kv-blocks: expected a count >= 1");
			o->kv_blocks = (int)v;
			break;
		case 'T':
			if (parse_long(optarg, 1, 1 << 16, &v) < 0)
				BAD("--block-tokens: expected a token count >= 1");
			o->block_tokens = (int)v;
			break;
		case 'L':
			if (strcmp(optarg, "paged") && strcmp(optarg, "slots"))
				BAD("--kv-policy: expected paged or slots, not '%s'", optarg);
			o->slot_policy = !strcmp(optarg, "slots");
			break;
		case 'X': o->no_prefix = 1; break;
		case 'M':
			if (parse_long(optarg, 1, 64, &v) < 0)
				BAD("--micro-batches: expected 1..64");
			o->micro = (int)v;
			break;
		case 'U':
			if (parse_long(optarg, 1, 1 << 20, &v) < 0)
				BAD("--micro-batch-tokens: expected a token count >= 1");
			o->micro_tokens = (int)v;
			break;
		case 'S':
			if (parse_long(optarg, 1, 1 << 20, &v) < 0)
				BAD("--max-seqs: expected a sequence count >= 1");
			o->max_seqs = (int)v;
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
	if (!!o->kv_seqs + !!o->kv_mem + !!o->kv_blocks > 1)
		BAD("--kv-seqs, --kv-mem and --kv-blocks: give one of them");
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

/* Header broadcast each step: stop flag, segments, tokens, table entries. */
struct batch_head {
	int32_t stop, nseg, ntok, ntab;
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

/*
 * A sequence is its prompt then its output; the KV cache holds its first
 * q->pos tokens in the blocks of its table.  What the next forward feeds
 * is the rest, tokens pos .. seq_len-1: a whole or chunked prompt, one
 * decode token, or after a preemption the prompt and output again.
 */
static int seq_len(const struct srv_req *q) { return q->nprompt + q->nout; }

static int64_t seq_tok(const struct srv_req *q, int64_t i)
{
	return i < q->nprompt ? q->prompt[i] : q->out[i - q->nprompt];
}

static void seq_tokens(const struct srv_req *q, int64_t from, int n, int64_t *dst)
{
	for (int i = 0; i < n; i++)
		dst[i] = seq_tok(q, from + i);
}

static void push_block(struct srv_req *q, int b)
{
	if (q->nblk == q->cap_blk) {
		q->cap_blk = q->cap_blk ? 2 * q->cap_blk : 16;
		q->blocks = realloc(q->blocks, (size_t)q->cap_blk * sizeof *q->blocks);
		if (!q->blocks)
			abort();
	}
	q->blocks[q->nblk++] = b;
}

static void drop_blocks(struct srv *s, struct srv_req *q)
{
	for (int i = 0; i < q->nblk; i++)
		kv_pool_release(&s->pool, q->blocks[i]);
	q->nblk = q->nkeyed = 0;
	q->last_key = 0;
	q->pos = q->spos = 0;
}

static void note_blocks(struct srv *s)
{
	int used = kv_pool_used(&s->pool);
	if (used > s->m.blocks_peak)
		s->m.blocks_peak = used;
}

static void finish_req(struct srv *s, struct srv_req *q, const char *why)
{
	double now = now_s();
	q->state = SRV_DONE;
	q->finish = why;
	drop_blocks(s, q);
	if (q->cancelled) {
		s->m.req_cancelled++;
	} else if (strcmp(why, "abort")) {
		s->m.req_ok++;
		s->m.preempted_ok += q->preempted > 0;
		srv_hist_add(&s->m.e2e, now - q->t_arrive);
		if (q->nout > 1)
			srv_hist_add(&s->m.tpot, (q->t_last - q->t_first) / (q->nout - 1));
	} else {
		s->m.preempted_aborted += q->preempted > 0;
	}
	pthread_cond_broadcast(&q->wake);
}

/* Drop finished and cancelled requests from the running list (locked).
 * A request with a piece in a micro-batch still in flight stays until
 * that comes back: its batch names it and its blocks are being written. */
static void reap(struct srv *s)
{
	struct srv_req **pp = &s->running;
	while (*pp) {
		struct srv_req *q = *pp;
		if (q->cancelled && q->state != SRV_DONE && !q->inflight)
			finish_req(s, q, "abort");
		if (q->state == SRV_DONE && !q->inflight) {
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

struct batch {
	struct rt_seg *seg;
	struct srv_req **req; /* per segment (rank 0) */
	int *from;            /* per segment: logits for rows from.. len-1 */
	int64_t *tok;
	int32_t *tab; /* every segment's block table, one after the other */
	int nseg, ntok, ntab, cap_seg, cap_tok, cap_tab;
	uint64_t step;
};

static void *grow_to(void *p, int *cap, int need, size_t each)
{
	if (need <= *cap)
		return p;
	*cap = need * 2 > 64 ? need * 2 : 64;
	p = realloc(p, (size_t)*cap * each);
	if (!p)
		abort();
	return p;
}

static void batch_room(struct batch *b, int nseg, int ntok, int ntab, int with_req)
{
	int c = b->cap_seg;
	b->seg = grow_to(b->seg, &c, nseg, sizeof *b->seg);
	c = b->cap_seg;
	b->from = grow_to(b->from, &c, nseg, sizeof *b->from);
	if (with_req) {
		c = b->cap_seg;
		b->req = grow_to(b->req, &c, nseg, sizeof *b->req);
	}
	b->cap_seg = c;
	b->tok = grow_to(b->tok, &b->cap_tok, ntok, sizeof *b->tok);
	b->tab = grow_to(b->tab, &b->cap_tab, ntab, sizeof *b->tab);
}

/*
 * The rows of a segment whose logits are wanted, as the first of them
 * (len: none): the last token of the sequence (the next token comes from
 * it), every row of a prompt whose logprobs are echoed, and after a
 * recompute the row that predicted the last token already sent (checked).
 */
static int first_row(const struct srv_req *q, int64_t pos0, int n)
{
	int64_t end = pos0 + n, L = seq_len(q);
	int from = n;
	if (q->echo && q->top_logprobs >= 0 && pos0 < q->nprompt - 1)
		from = 0;
	if (end == L && n - 1 < from)
		from = n - 1;
	if (q->recheck && pos0 <= L - 2 && L - 2 < end && L - 2 - pos0 < from)
		from = (int)(L - 2 - pos0);
	return from;
}

static void batch_add(struct srv *s, struct batch *b, struct srv_req *q, int n)
{
	batch_room(b, b->nseg + 1, b->ntok + n, b->ntab + q->nblk, 1);
	b->seg[b->nseg] = (struct rt_seg){.pos0 = q->spos, .len = n, .ntable = q->nblk};
	b->from[b->nseg] = first_row(q, q->spos, n);
	b->req[b->nseg++] = q;
	seq_tokens(q, q->spos, n, b->tok + b->ntok);
	b->ntok += n;
	memcpy(b->tab + b->ntab, q->blocks, (size_t)q->nblk * sizeof *b->tab);
	b->ntab += q->nblk;
	q->in_step = b->step;
	q->spos += n;
	q->inflight++;
	(void)s;
}

/* The running list is kept oldest first (by admission order, seq_id). */
static void running_insert(struct srv *s, struct srv_req *q)
{
	struct srv_req **pp = &s->running;
	while (*pp && (*pp)->seq_id < q->seq_id)
		pp = &(*pp)->next;
	q->next = *pp;
	*pp = q;
	if (++s->nrunning > s->m.kv_peak)
		s->m.kv_peak = s->nrunning;
}

/*
 * Out of blocks: the newest running sequence gives back its blocks and
 * waits at the front of the queue; it is recomputed when admitted again
 * (prompt and output so far, the prefix cache serving what it still
 * holds).  Its tokens already sent stand: the recompute checks that the
 * logits still pick the last of them (service.preemption).
 */
static void preempt(struct srv *s, struct srv_req *q)
{
	struct srv_req **pp = &s->running;
	int blocks = q->nblk;
	while (*pp != q)
		pp = &(*pp)->next;
	*pp = q->next;
	s->nrunning--;
	drop_blocks(s, q);
	q->state = SRV_QUEUED;
	q->preempted++;
	q->recheck = q->nout > 0 && q->temperature <= 0;
	q->next = s->queue_head;
	s->queue_head = q;
	if (!s->queue_tail)
		s->queue_tail = q;
	s->nqueued++;
	s->m.preemptions++;
	if (events_enabled())
		events_emit("log", json_pack("{s:s, s:s, s:s, s:i, s:i, s:I}",
					     "level", "warn", "msg",
					     "preempted: out of KV blocks",
					     "request", q->id, "blocks", blocks,
					     "tokens", seq_len(q),
					     "preemptions",
					     (json_int_t)s->m.preemptions));
}

/* The newest running sequence not in this step's batch (q itself last)
 * nor in a micro-batch still in flight (its blocks are being written). */
static struct srv_req *victim(struct srv *s, uint64_t step)
{
	struct srv_req *v = NULL;
	for (struct srv_req *q = s->running; q; q = q->next)
		if (q->state == SRV_RUNNING && q->in_step != step && !q->inflight)
			v = q; /* the list is oldest first */
	return v;
}

/* Give q the blocks for positions up to upto-1, preempting the newest
 * sequences for them; -1 when q itself was the one preempted, or when
 * every other holder is in flight (q waits for them to come back). */
static int grow(struct srv *s, struct srv_req *q, int64_t upto, uint64_t step)
{
	int64_t need = (upto + s->block_tokens - 1) / s->block_tokens;
	while (q->nblk < need) {
		int b = kv_pool_alloc(&s->pool);
		if (b < 0) {
			struct srv_req *v = victim(s, step);
			if (!v)
				return -1;
			preempt(s, v);
			if (v == q)
				return -1;
			continue;
		}
		push_block(q, b);
	}
	note_blocks(s);
	return 0;
}

/*
 * Admit queued requests (FIFO) while the KV blocks their tokens need are
 * there: the full blocks of a prefix already cached are shared, the rest
 * taken from the free list (or evicted from the cache's LRU end).  A few
 * blocks (1%) stay back for the running sequences' growth, except when
 * nothing runs (so a request as large as the cache is admitted).  The
 * slot design reserves a whole context's blocks instead.
 */
static void admit(struct srv *s, struct batch *b, int *budget)
{
	int bt = s->block_tokens;
	int64_t *tk = malloc((size_t)bt * sizeof *tk);
	while (s->queue_head && *budget > 0 && b->nseg < s->max_seqs &&
	       s->nrunning < s->max_seqs * s->micro) {
		struct srv_req *q = s->queue_head;
		int L = seq_len(q), hits = 0, cached = 0, need, reserve;
		uint64_t key = 0;
		/* an image's placeholder ids say nothing of its pixels */
		if (s->prefix_cache && !s->slot_policy && !q->img)
			for (int64_t i = 0; (i + 1) * bt <= L - 1; i++) {
				int x;
				uint64_t k;
				seq_tokens(q, i * bt, bt, tk);
				k = kv_pool_key(key, tk, bt);
				if ((x = kv_pool_find(&s->pool, k, key, tk, 0)) < 0)
					break;
				cached += s->pool.ref[x] == 0;
				key = k;
				hits++;
			}
		need = s->slot_policy ? (int)((s->max_ctx + bt - 1) / bt)
				      : (L + bt - 1) / bt - hits;
		reserve = s->nrunning ? (s->nblocks + 99) / 100 : 0;
		if (need > kv_pool_available(&s->pool) - cached - reserve)
			break;
		s->queue_head = q->next;
		if (!s->queue_head)
			s->queue_tail = NULL;
		s->nqueued--;
		key = 0;
		for (int i = 0; i < hits; i++) {
			seq_tokens(q, (int64_t)i * bt, bt, tk);
			{
				uint64_t k = kv_pool_key(key, tk, bt);
				push_block(q, kv_pool_find(&s->pool, k, key, tk, 1));
				key = k;
			}
		}
		q->nkeyed = hits;
		q->last_key = key;
		q->pos = q->spos = (int64_t)hits * bt;
		if (s->prefix_cache && !s->slot_policy) {
			s->m.prefix_queries += (uint64_t)L;
			s->m.prefix_hits += (uint64_t)hits * bt;
		}
		for (int i = 0; i < need; i++)
			push_block(q, kv_pool_alloc(&s->pool));
		note_blocks(s);
		if (q->preempted)
			s->m.recomputed_tokens += (uint64_t)(L - q->pos);
		if (!q->seq_id)
			q->seq_id = ++s->next_seq;
		q->state = SRV_RUNNING;
		running_insert(s, q);
		{
			int n = L - (int)q->pos < *budget ? L - (int)q->pos : *budget;
			batch_add(s, b, q, n);
			*budget -= n;
		}
	}
	free(tk);
}

/*
 * One step's batch under a budget of max_batch tokens: every decoding
 * sequence's next token first (oldest first; at most dcap of them), then
 * the rest of the prompts being prefilled, in chunks that fit what the
 * budget leaves, then newly admitted requests.  Any of them may need a
 * new block; when none is left the newest sequence not yet in the batch
 * (nor in flight) is preempted.
 *
 * With micro-batches in flight (PP) a step is one micro-batch: what it
 * takes is what is not on its way already (tokens spos.. of each
 * sequence).  A decode waits for its last token to come back; the next
 * chunk of a prompt does not (the stages take micro-batches in order, so
 * the chunk before has written each stage's KV first).
 */
static uint64_t sched_step; /* steps planned: one counter for every batch */

static void schedule(struct srv *s, struct batch *b, int max_batch, int dcap)
{
	int budget = max_batch, n = 0, cap = 0, dec = 0;
	struct srv_req **order = NULL;
	b->step = ++sched_step;
	for (struct srv_req *q = s->running; q; q = q->next) {
		order = grow_to(order, &cap, n + 1, sizeof *order);
		order[n++] = q;
	}
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n && budget > 0; i++) {
			struct srv_req *q = order[i];
			int todo = seq_len(q) - (int)q->spos, k;
			if (q->state != SRV_RUNNING || q->in_step == b->step ||
			    todo <= 0 || (pass == 0) != (todo == 1) ||
			    (pass == 0 && dec >= dcap) || b->nseg >= s->max_seqs)
				continue;
			k = todo < budget ? todo : budget;
			if (grow(s, q, q->spos + k, b->step) < 0)
				continue;
			batch_add(s, b, q, k);
			budget -= k;
			dec += pass == 0;
		}
	free(order);
	admit(s, b, &budget);
}

/* Rank 0: the next batch (locked); waits while there is nothing to do. */
static void emit_samples(struct srv *s, int force);

/* (may_wait 0: return an empty batch instead of waiting, for a pipeline
 * with micro-batches still in flight) */
static void plan_batch(struct srv *s, struct batch *b, int max_batch, int dcap,
		       int may_wait)
{
	struct timespec ts;
	int was_busy = 1;
	b->nseg = b->ntok = b->ntab = 0;
	reap(s);
	for (;;) {
		schedule(s, b, max_batch, dcap);
		if (b->nseg || s->stopping || stop_signal || !may_wait)
			return;
		emit_samples(s, 0);
		/* fallen idle: hand the freed heap back (the HTTP threads'
		 * arenas keep what a burst of requests left, and the resident
		 * size would climb from burst to burst) */
		if (was_busy && !s->nrunning && !s->nqueued)
			malloc_trim(0);
		was_busy = 0;
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

/* Prompt logprobs (echo): the row at prompt position p predicts token
 * p + 1. */
static void prompt_logprob(struct srv_req *q, int64_t p, const float *row, int V)
{
	int k = q->top_logprobs;
	double lz;
	if (!q->p_lp) {
		q->p_lp = calloc((size_t)q->nprompt, sizeof *q->p_lp);
		q->p_top_id = calloc((size_t)q->nprompt * (k ? k : 1), sizeof(int));
		q->p_top_lp = calloc((size_t)q->nprompt * (k ? k : 1), sizeof(float));
	}
	lz = log_norm(row, V);
	q->p_lp[p + 1] = (float)((double)row[q->prompt[p + 1]] - lz);
	top_k(row, V, k, lz, q->p_top_id + (size_t)(p + 1) * k,
	      q->p_top_lp + (size_t)(p + 1) * k);
}

/* The batch rows whose logits are computed: rows from[g].. of each
 * segment; rows must hold ntok. */
static int batch_rows(const struct batch *b, int *rows)
{
	int n = 0, row0 = 0;
	for (int g = 0; g < b->nseg; row0 += b->seg[g].len, g++)
		for (int i = b->from[g]; i < b->seg[g].len; i++)
			rows[n++] = row0 + i;
	return n;
}

/* Keys for q's blocks that the step filled: later prompts find them. */
static void key_blocks(struct srv *s, struct srv_req *q)
{
	int bt = s->block_tokens;
	int64_t *tk;
	if (!s->prefix_cache || s->slot_policy || q->img ||
	    (int64_t)(q->nkeyed + 1) * bt > q->pos)
		return;
	tk = malloc((size_t)bt * sizeof *tk);
	while ((int64_t)(q->nkeyed + 1) * bt <= q->pos) {
		uint64_t k;
		seq_tokens(q, (int64_t)q->nkeyed * bt, bt, tk);
		k = kv_pool_key(q->last_key, tk, bt);
		kv_pool_register(&s->pool, q->blocks[q->nkeyed], k, q->last_key, tk);
		q->last_key = k;
		q->nkeyed++;
	}
	free(tk);
}

/* The next token of q from its last row's logits. */
static void next_token(struct srv *s, struct srv_req *q, const float *last,
		       int V, double now)
{
	int64_t next;
	if (!q->prefilled) {
		q->prefilled = 1;
		s->m.prompt_tokens += (uint64_t)q->nprompt;
	}
	if (q->cancelled || q->state == SRV_DONE)
		return;
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

/* logits holds batch_rows' rows in order. */
static void consume(struct srv *s, struct batch *b, const float *logits, int V)
{
	double now = now_s();
	int row0 = 0;
	s->m.steps++;
	s->m.batch_tokens += (uint64_t)b->ntok;
	for (int g = 0; g < b->nseg; row0 += b->seg[g].len - b->from[g], g++) {
		struct srv_req *q = b->req[g];
		int64_t pos0 = b->seg[g].pos0, L = seq_len(q);
		int n = b->seg[g].len;
		q->pos = pos0 + n;
		q->inflight--;
		key_blocks(s, q);
		for (int i = b->from[g]; i < n; i++) {
			const float *row = logits + (size_t)(row0 + i - b->from[g]) * V;
			int64_t p = pos0 + i;
			if (q->echo && q->top_logprobs >= 0 && p + 1 < q->nprompt)
				prompt_logprob(q, p, row, V);
			if (q->recheck && p == L - 2) {
				/* greedy: the recomputed logits pick the same */
				int64_t best = 0;
				for (int v = 1; v < V; v++)
					if (row[v] > row[best])
						best = v;
				s->m.recheck_n++;
				s->m.recheck_wrong += best != q->out[q->nout - 1];
				q->recheck = 0;
			}
			if (p == L - 1)
				next_token(s, q, row, V, now);
		}
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
	int busy = s->nqueued || s->nrunning;
	int used = kv_pool_used(&s->pool);
	busy_since |= busy;
	if (!events_enabled() ||
	    (!force && now - last_emit < 1.0 && (busy || !busy_since)))
		return;
	last_emit = now;
	busy_since = busy;
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.queue", "value", s->nqueued));
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.running", "value", s->nrunning));
	events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", -1, "metric",
					"serve.gen_tokens", "value",
					(json_int_t)s->m.gen_tokens));
	events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", -1, "metric",
					"serve.preemptions", "value",
					(json_int_t)s->m.preemptions));
	/* the KV gauge: blocks in use (of them shared by several sequences),
	 * cached prefixes (free to evict) and free, of the whole cache */
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.kv_blocks_used", "value", used));
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.kv_blocks_shared", "value",
					kv_pool_shared(&s->pool)));
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.kv_blocks_cached", "value", s->pool.ncached));
	events_emit("sample", json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
					"serve.kv_blocks_total", "value", s->nblocks));
	/* Every card holds its slice of each block, the same bytes per
	 * block on each (rt_kv_block_bytes of the layout): one line for the
	 * cards of rank 0's host (other hosts' cards are their agents'). */
	{
		json_t *u = json_array(), *bb = json_array();
		for (int i = 0; i < s->local_cards && i < 4096; i++) {
			json_array_append_new(u, json_integer((json_int_t)(
			    s->kv_block_bytes * (uint64_t)used)));
			json_array_append_new(bb, json_integer((json_int_t)(
			    s->kv_block_bytes * (uint64_t)s->nblocks)));
		}
		events_emit("sample", json_pack("{s:i, s:s, s:o}", "card", 0,
						"metric", "kv.used", "values", u));
		events_emit("sample", json_pack("{s:i, s:s, s:o}", "card", 0,
						"metric", "kv.budget", "values", bb));
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

/*
 * The KV cache's blocks per card: --kv-blocks as given, --kv-seqs full
 * contexts' worth (the slot design's budget), or as many as --kv-mem
 * holds; 16 full contexts when none is given.  0 with a message on rank
 * 0 when the budget holds no block.
 */
static int kv_blocks(const struct serve_opts *o, int64_t max_ctx, int rank,
		     uint64_t *seq_bytes, uint64_t *block_bytes)
{
	struct model_config c;
	struct d0_err e;
	char *p = path_join(o->dir, "config.json");
	int64_t per_seq = (max_ctx + o->block_tokens - 1) / o->block_tokens;
	int64_t n = o->kv_blocks ? o->kv_blocks
		    : (o->kv_seqs ? o->kv_seqs : 16) * per_seq;
	*seq_bytes = *block_bytes = 0;
	if (model_config_load(p, &c, &e) == 0) {
		*seq_bytes = rt_kv_seq_bytes(&c, &o->d, max_ctx);
		*block_bytes = rt_kv_block_bytes(&c, &o->d, o->block_tokens);
		if (o->kv_mem) {
			n = *block_bytes ? (int64_t)(o->kv_mem / *block_bytes) : 0;
			if (!n && rank == 0) {
				char a[32], b[32];
				fprintf(stderr, "day0-engine serve: --kv-mem %s holds no "
					"KV block of %d tokens (%s each per card)\n",
					fmt_bytes(o->kv_mem, a), o->block_tokens,
					fmt_bytes(*block_bytes, b));
			}
		}
		model_config_free(&c);
	}
	free(p);
	return n > (1 << 24) ? 1 << 24 : (int)n;
}

/* The --port-file was written: it goes when the server stops listening. */
static int port_file_made;

static void port_file_remove(const struct serve_opts *o)
{
	if (port_file_made && o->port_file)
		unlink(o->port_file);
	port_file_made = 0;
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
		port_file_made = f != NULL; /* removed when serve ends */
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
		printf("serve: %s on http://%s:%d (%d KV blocks of %d tokens, "
		       "contexts of %lld tokens%s)\n", s->model_name, o->host,
		       s->port, s->nblocks, s->block_tokens, (long long)s->max_ctx,
		       s->slot_policy ? ", a whole context per sequence" : "");
	fflush(stdout);
	return 0;
}

/* One segment on the wire (rt_seg's pointers are rebuilt on each rank). */
struct seg_wire {
	int64_t pos0;
	int32_t len, ntable, from, pad;
};

/* Every rank without pipeline stages (PP 1): the serving loop until rank
 * 0 broadcasts stop, one batch per step. */
static int loop(struct srv *s, struct rt *r, const struct serve_opts *o,
		int rank)
{
	struct batch b = {0};
	struct seg_wire *w = NULL;
	struct d0_err err = {{0}};
	struct srv_chat_wire cw = {0};
	int V = (int)rt_config(r)->vocab, rc = 0, world = 1;
	int vl_on = rt_config(r)->vision.kind != VISION_NONE;
	float *logits = NULL;
	int *rows = NULL, nrows, cap_rows = 0, cap_w = 0;
	size_t cap = 0;
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	for (;;) {
		struct batch_head h = {0};
		if (rank == 0) {
			pthread_mutex_lock(&s->lock);
			if (stop_signal)
				s->stopping = 1;
			plan_batch(s, &b, o->max_batch, INT32_MAX, 1);
			h.stop = s->stopping || stop_signal;
			h.nseg = b.nseg;
			h.ntok = b.ntok;
			h.ntab = b.ntab;
			/* stopping: the batch just planned never runs; its
			 * requests are not in flight (reap frees them once
			 * aborted: serve.running fell to 0) */
			for (int g = 0; h.stop && g < b.nseg; g++)
				b.req[g]->inflight--;
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
		batch_room(&b, h.nseg, h.ntok, h.ntab, rank == 0);
		w = grow_to(w, &cap_w, h.nseg, sizeof *w);
		for (int g = 0; rank == 0 && g < h.nseg; g++)
			w[g] = (struct seg_wire){b.seg[g].pos0, b.seg[g].len,
						 b.seg[g].ntable, b.from[g], 0};
		MPI_Bcast(w, h.nseg * (int)sizeof *w, MPI_BYTE, 0, MPI_COMM_WORLD);
		MPI_Bcast(b.tok, h.ntok, MPI_INT64_T, 0, MPI_COMM_WORLD);
		MPI_Bcast(b.tab, h.ntab, MPI_INT32_T, 0, MPI_COMM_WORLD);
		for (int g = 0, off = 0; g < h.nseg; off += w[g].ntable, g++) {
			b.seg[g] = (struct rt_seg){.pos0 = w[g].pos0, .len = w[g].len,
						   .table = b.tab + off,
						   .ntable = w[g].ntable};
			b.from[g] = w[g].from;
		}
		b.nseg = h.nseg;
		b.ntok = h.ntok;
		b.ntab = h.ntab;
		/* chat images (serve_chat.c): rank 0 runs the tower and
		 * slices the features and M-RoPE positions per segment, then
		 * sends them to every rank */
		if (vl_on) {
			int bad = rank == 0 && s->vl && !s->vl_why[0] &&
				  srv_chat_segs(s, r, b.req, b.seg, b.nseg, &err) < 0;
			if (bad && rank == 0)
				fprintf(stderr, "day0-engine: rank 0: %s\n", err.msg);
			if (world > 1 &&
			    srv_chat_bcast(&cw, rt_config(r)->vision.image_token_id,
					   rt_config(r)->hidden, b.tok, b.seg, b.nseg,
					   rank, bad) < 0)
				bad = 1;
			if (bad) {
				rc = -1;
				break;
			}
		}
		/* logits where they are used (first_row) */
		rows = grow_to(rows, &cap_rows, h.ntok, sizeof *rows);
		nrows = batch_rows(&b, rows);
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
		if (rank == 0) {
			pthread_mutex_lock(&s->lock);
			consume(s, &b, logits, V);
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
	free(b.from);
	free(b.tok);
	free(b.tab);
	free(w);
	free(logits);
	free(rows);
	srv_chat_wire_free(&cw);
	return rc;
}

/* ------------------------------------------------ pipeline micro-batches */

/*
 * PP: micro-batches kept in flight across the stages (docs/serve.md,
 * "Pipeline micro-batches").  Rank 0 (stage 0) plans a micro-batch from
 * what is not on its way already, sends its description to every other
 * rank, forwards it through stage 0 (the hidden state handed to stage 1
 * by the runtime's send) and, while up to m are in flight, plans and
 * forwards the next; then it waits for the oldest one's logits from the
 * last stage, samples, and that micro-batch's sequences can go again at
 * once, not after the others.  Each stage takes micro-batches in the
 * order rank 0 sent them, so with m >= p micro-batches every stage works
 * on one while the others work on theirs: the bubble is (p-1)/(m+p-1)
 * of the stages' time at the start and end of a busy period, not of
 * every step.  m = 1 is one batch through the stages at a time.
 *
 * Messages (MPI_COMM_WORLD): the description rank 0 -> every rank (tag
 * TAG_DESC, one packed buffer: batch_head, seg_wire[], tokens, tables);
 * hidden states stage to stage (the runtime's); logits last stage root
 * -> rank 0 (TAG_LOGITS, rank 0's receives posted at submission, so the
 * last stage never waits on it); each later stage root's compute time
 * for the micro-batch -> rank 0 (TAG_BUSY: the bubble).
 */
enum { TAG_LOGITS = 21, TAG_BUSY = 22, TAG_DESC = 23 };

struct mbatch {
	struct batch b;
	int *rows, nrows, cap_rows;
	float *logits;
	size_t cap_logits;
	char *wire;
	size_t nwire, cap_wire;
	MPI_Request rq_logits, *rq_desc;
	int in_flight; /* micro-batches in flight when it was sent (itself too) */
};

static void mb_rows(struct mbatch *mb, int V)
{
	mb->rows = grow_to(mb->rows, &mb->cap_rows, mb->b.ntok > 0 ? mb->b.ntok : 1,
			   sizeof *mb->rows);
	mb->nrows = batch_rows(&mb->b, mb->rows);
	if ((size_t)mb->nrows * V > mb->cap_logits) {
		mb->cap_logits = (size_t)mb->nrows * V;
		mb->logits = realloc(mb->logits, mb->cap_logits * sizeof *mb->logits);
		if (!mb->logits)
			abort();
	}
}

/* rank 0: the description of mb (or of a stop) into mb->wire */
static void mb_pack(struct mbatch *mb, int stop)
{
	struct batch *b = &mb->b;
	struct batch_head h = {stop, stop ? 0 : b->nseg, stop ? 0 : b->ntok,
			       stop ? 0 : b->ntab};
	size_t n = sizeof h + (size_t)h.nseg * sizeof(struct seg_wire) +
		   (size_t)h.ntok * sizeof *b->tok + (size_t)h.ntab * sizeof *b->tab;
	char *p;
	if (n > mb->cap_wire) {
		mb->cap_wire = n * 2;
		mb->wire = realloc(mb->wire, mb->cap_wire);
		if (!mb->wire)
			abort();
	}
	p = mb->wire;
	memcpy(p, &h, sizeof h);
	p += sizeof h;
	for (int g = 0; g < h.nseg; g++) {
		struct seg_wire w = {b->seg[g].pos0, b->seg[g].len, b->seg[g].ntable,
				     b->from[g], 0};
		memcpy(p, &w, sizeof w);
		p += sizeof w;
	}
	memcpy(p, b->tok, (size_t)h.ntok * sizeof *b->tok);
	p += (size_t)h.ntok * sizeof *b->tok;
	memcpy(p, b->tab, (size_t)h.ntab * sizeof *b->tab);
	mb->nwire = n;
}

/* other ranks: the next description (waiting without spinning a core
 * while idle); returns its stop flag */
static int mb_recv(struct mbatch *mb)
{
	struct batch *b = &mb->b;
	struct batch_head h;
	MPI_Status st;
	int done = 0, n = 0;
	long spins = 0;
	const char *p;
	for (;;) {
		MPI_Iprobe(0, TAG_DESC, MPI_COMM_WORLD, &done, &st);
		if (done)
			break;
		if (++spins > 2000) {
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
		}
	}
	MPI_Get_count(&st, MPI_BYTE, &n);
	if ((size_t)n > mb->cap_wire) {
		mb->cap_wire = (size_t)n * 2;
		mb->wire = realloc(mb->wire, mb->cap_wire);
		if (!mb->wire)
			abort();
	}
	MPI_Recv(mb->wire, n, MPI_BYTE, 0, TAG_DESC, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	p = mb->wire;
	memcpy(&h, p, sizeof h);
	p += sizeof h;
	if (h.stop)
		return 1;
	batch_room(b, h.nseg, h.ntok, h.ntab, 0);
	for (int g = 0; g < h.nseg; g++) {
		struct seg_wire w;
		memcpy(&w, p, sizeof w);
		p += sizeof w;
		b->seg[g] = (struct rt_seg){.pos0 = w.pos0, .len = w.len,
					    .ntable = w.ntable};
		b->from[g] = w.from;
	}
	memcpy(b->tok, p, (size_t)h.ntok * sizeof *b->tok);
	p += (size_t)h.ntok * sizeof *b->tok;
	memcpy(b->tab, p, (size_t)h.ntab * sizeof *b->tab);
	for (int g = 0, off = 0; g < h.nseg; off += b->seg[g].ntable, g++)
		b->seg[g].table = b->tab + off;
	b->nseg = h.nseg;
	b->ntok = h.ntok;
	b->ntab = h.ntab;
	return 0;
}

/* The forward of mb on this rank; *busy += its compute (less the waits
 * for the pipeline's hidden states). */
static int mb_forward(struct rt *r, struct mbatch *mb, double *busy,
		      struct d0_err *err)
{
	const struct rt_stats *st = rt_stats(r);
	double t = MPI_Wtime(), w = st->time_s[RT_GROUP_PP][RT_OP_SENDRECV];
	int rc = rt_forward_rows(r, mb->b.tok, mb->b.seg, mb->b.nseg, mb->rows,
				 mb->nrows, mb->logits, err);
	*busy += MPI_Wtime() - t - (st->time_s[RT_GROUP_PP][RT_OP_SENDRECV] - w);
	return rc;
}

/* Rank 0: the later stages' compute times that have come (the bubble). */
static void drain_busy(struct srv *s)
{
	for (;;) {
		int got = 0;
		double v;
		MPI_Status st;
		MPI_Iprobe(MPI_ANY_SOURCE, TAG_BUSY, MPI_COMM_WORLD, &got, &st);
		if (!got)
			return;
		MPI_Recv(&v, 1, MPI_DOUBLE, st.MPI_SOURCE, TAG_BUSY, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
		s->m.pp_busy_s += v;
	}
}

static int loop_pipe(struct srv *s, struct rt *r, const struct serve_opts *o,
		     int rank)
{
	int V = (int)rt_config(r)->vocab, last = rt_last_stage_root(r), rc = 0;
	int m = s->micro, world, nin = 0, head = 0, root = 0;
	struct mbatch *mb = calloc((size_t)m, sizeof *mb);
	struct d0_err err = {{0}};
	double t_mark = MPI_Wtime();
	if (!mb)
		abort();
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	for (int k = 0; k < o->d.pp; k++) /* a stage root reports its compute */
		root |= rank == rt_stage_root(r, k);
	if (rank != 0) {
		double busy = 0;
		for (;;) {
			if (mb_recv(&mb[0]))
				break;
			mb_rows(&mb[0], V);
			busy = 0;
			if (mb_forward(r, &mb[0], &busy, &err) < 0) {
				/* every rank sees the same batch, so the same refusal */
				fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
				rc = -1;
				break;
			}
			if (rank == last && mb[0].nrows)
				MPI_Send(mb[0].logits, mb[0].nrows * V, MPI_FLOAT, 0,
					 TAG_LOGITS, MPI_COMM_WORLD);
			if (root)
				MPI_Send(&busy, 1, MPI_DOUBLE, 0, TAG_BUSY, MPI_COMM_WORLD);
		}
		goto out;
	}
	for (int k = 0; k < m; k++) {
		mb[k].rq_desc = malloc((size_t)world * sizeof *mb[k].rq_desc);
		for (int i = 0; i < world; i++)
			mb[k].rq_desc[i] = MPI_REQUEST_NULL;
		mb[k].rq_logits = MPI_REQUEST_NULL;
	}
	for (;;) {
		int stopping;
		/* fill the pipeline: up to m micro-batches in flight */
		while (nin < m) {
			struct mbatch *x = &mb[(head + nin) % m];
			/* a micro-batch's decodes: the running ones cut in
			 * k <= m parts of at least --micro-batch-tokens each
			 * (whole decodes come back together), none above
			 * --max-seqs.  Uncut (k = 1), the decodes go only in a
			 * micro-batch planned with nothing in flight, so
			 * sequences admitted behind it rejoin the one batch
			 * instead of forming a second, smaller one; prompt
			 * chunks still fill the other slots. */
			int dcap, parts;
			MPI_Waitall(world, x->rq_desc, MPI_STATUSES_IGNORE);
			pthread_mutex_lock(&s->lock);
			if (stop_signal)
				s->stopping = 1;
			if (s->stopping) { /* drain what is in flight, send no more */
				pthread_mutex_unlock(&s->lock);
				break;
			}
			parts = s->nrunning / o->micro_tokens;
			if (parts < (s->nrunning + s->max_seqs - 1) / s->max_seqs)
				parts = (s->nrunning + s->max_seqs - 1) / s->max_seqs;
			parts = parts < 1 ? 1 : parts > m ? m : parts;
			dcap = (s->nrunning + parts - 1) / parts;
			if (dcap > s->max_seqs)
				dcap = s->max_seqs;
			if (parts == 1 && nin > 0)
				dcap = 0;
			plan_batch(s, &x->b, o->max_batch, dcap, nin == 0);
			emit_samples(s, 0);
			pthread_mutex_unlock(&s->lock);
			if (!x->b.nseg)
				break;
			for (int g = 0, off = 0; g < x->b.nseg; off += x->b.seg[g].ntable, g++)
				x->b.seg[g].table = x->b.tab + off;
			mb_pack(x, 0);
			for (int i = 1; i < world; i++)
				MPI_Isend(x->wire, (int)x->nwire, MPI_BYTE, i, TAG_DESC,
					  MPI_COMM_WORLD, &x->rq_desc[i]);
			mb_rows(x, V);
			if (x->nrows)
				MPI_Irecv(x->logits, x->nrows * V, MPI_FLOAT, last,
					  TAG_LOGITS, MPI_COMM_WORLD, &x->rq_logits);
			{
				double now = MPI_Wtime();
				if (nin)
					s->m.pp_span_s += (now - t_mark) * o->d.pp;
				t_mark = now;
			}
			x->in_flight = ++nin;
			{
				double busy = 0;
				if (mb_forward(r, x, &busy, &err) < 0) {
					fprintf(stderr, "day0-engine: rank %d: %s\n", rank,
						err.msg);
					rc = -1;
					break;
				}
				pthread_mutex_lock(&s->lock);
				s->m.pp_busy_s += busy;
				pthread_mutex_unlock(&s->lock);
			}
		}
		if (rc < 0)
			break;
		pthread_mutex_lock(&s->lock);
		stopping = s->stopping || stop_signal;
		pthread_mutex_unlock(&s->lock);
		if (!nin) {
			if (stopping)
				break;
			continue;
		}
		/* the oldest micro-batch back: sample; its sequences may go again */
		{
			struct mbatch *x = &mb[head];
			double now;
			MPI_Wait(&x->rq_logits, MPI_STATUS_IGNORE);
			now = MPI_Wtime();
			pthread_mutex_lock(&s->lock);
			drain_busy(s);
			s->m.pp_span_s += (now - t_mark) * o->d.pp;
			t_mark = now;
			s->m.pp_steps++;
			s->m.pp_micro += (uint64_t)nin;
			consume(s, &x->b, x->logits, V);
			pthread_mutex_unlock(&s->lock);
			head = (head + 1) % m;
			nin--;
		}
	}
	if (rc < 0) { /* the refused batch's logits will not come, nor the rest */
		for (int k = 0; k < nin; k++) {
			struct mbatch *x = &mb[(head + k) % m];
			if (x->rq_logits != MPI_REQUEST_NULL) {
				MPI_Cancel(&x->rq_logits);
				MPI_Request_free(&x->rq_logits);
			}
			for (int g = 0; g < x->b.nseg; g++)
				x->b.req[g]->inflight--;
		}
	} else { /* stop: every other rank leaves its loop */
		MPI_Waitall(world, mb[0].rq_desc, MPI_STATUSES_IGNORE);
		mb_pack(&mb[0], 1);
		for (int i = 1; i < world; i++)
			MPI_Send(mb[0].wire, (int)mb[0].nwire, MPI_BYTE, i, TAG_DESC,
				 MPI_COMM_WORLD);
	}
	for (int k = 0; k < m; k++)
		for (int i = 0; i < world; i++)
			if (mb[k].rq_desc[i] != MPI_REQUEST_NULL) {
				MPI_Cancel(&mb[k].rq_desc[i]);
				MPI_Request_free(&mb[k].rq_desc[i]);
			}
	pthread_mutex_lock(&s->lock);
	drain_busy(s);
	emit_samples(s, 1);
	abort_all(s);
	pthread_mutex_unlock(&s->lock);
out:
	for (int k = 0; k < m; k++) {
		free(mb[k].b.seg);
		free(mb[k].b.req);
		free(mb[k].b.from);
		free(mb[k].b.tok);
		free(mb[k].b.tab);
		free(mb[k].rows);
		free(mb[k].logits);
		free(mb[k].wire);
		free(mb[k].rq_desc);
	}
	free(mb);
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
	int rank, rc, nblocks;
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
	nblocks = kv_blocks(&o, o.max_ctx, rank, &s.kv_seq_bytes, &s.kv_block_bytes);
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
	rc = nblocks > 0 ? rt_open_paged(&r, o.dir, &o.d, o.card_mem, o.max_ctx,
					 o.block_tokens, nblocks, &err)
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
	s.nblocks = nblocks;
	s.block_tokens = o.block_tokens;
	s.slot_policy = o.slot_policy;
	s.prefix_cache = !o.no_prefix && !o.slot_policy;
	s.pp = o.d.pp;
	s.micro = o.d.pp > 1 ? (o.micro ? o.micro : o.d.pp) : 1;
	s.max_seqs = o.max_seqs;
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
		{ /* the image channel of /v1/chat/completions */
			int world = 1;
			MPI_Comm_size(MPI_COMM_WORLD, &world);
			if (srv_chat_setup(&s, o.dir, world, o.d.pp, &te) < 0)
				fprintf(stderr, "day0-engine: %s (images "
					"refused)\n", te.msg);
		}
	}
	srv_init(&s);
	if (rank == 0) {
		signal_srv = &s;
		if (stop_signal)
			s.stopping = 1;
	}
	rc = rank == 0 ? listen_rank0(&s, &o) : 0;
	if (agree(rc != 0)) {
		srv_http_stop(&s);
		port_file_remove(&o);
		srv_destroy(&s);
		tokenizer_free(tok);
		rt_close(r);
		MPI_Finalize();
		return EXIT_USAGE;
	}
	rc = o.d.pp > 1 ? loop_pipe(&s, r, &o, rank) : loop(&s, r, &o, rank);
	if (rank == 0) {
		srv_http_stop(&s); /* every answer written first */
		port_file_remove(&o);
		pthread_mutex_lock(&s.lock);
		reap(&s);
		while (s.queue_head) { /* aborted while queued */
			struct srv_req *q = s.queue_head;
			s.queue_head = q->next;
			s.nqueued--;
			srv_req_unref(q);
		}
		s.queue_tail = NULL;
		/* the end state as the last samples: every request answered
		 * (aborted), nothing queued or running, the blocks back */
		emit_samples(&s, 1);
		pthread_mutex_unlock(&s.lock);
		events_stage("serve", "end", 1, rc ? EXIT_CHECK_FAILED : 0, o.dir);
	}
	signal_srv = NULL;
	srv_chat_close(&s);
	srv_destroy(&s);
	tokenizer_free(tok);
	rt_close(r);
	MPI_Finalize();
	return rc ? EXIT_CHECK_FAILED : EXIT_OK;
}
