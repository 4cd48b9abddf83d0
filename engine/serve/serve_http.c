/*
 * serve_http.c - rank 0's HTTP side of `serve` (serve.h).
 *
 * libmicrohttpd parses HTTP and runs one thread per connection, so a
 * handler may simply wait on its request's condition variable: a
 * non-streaming completion waits for the end, a streaming one's content
 * callback waits for each new token and writes server-sent events.  When
 * the client goes away libmicrohttpd destroys the response, whose free
 * callback marks the request cancelled; the scheduler then frees its KV
 * slot at the next step.  A client is not left to be found by a failed
 * write (two writes after its FIN, which a fast generation may never
 * make): while a handler waits for tokens it looks at its socket (a
 * zero-byte peek: the peer closed or reset it) every tick and before
 * each chunk, and a stream whose client is gone ends there, a
 * non-streaming request whose client is gone is cancelled and its
 * connection closed.
 *
 * Stopping (srv_http_stop, after the scheduler's abort_all has ended
 * every request): new requests get a 503 while those begun are answered
 * whole (each counted from its first handler call to libmicrohttpd's
 * completion notice), then the daemon and its connections go.
 *
 * Requests are validated field by field before they are queued; every
 * refusal is OpenAI-shaped ({"error": {message, type, param, code}}) with
 * the HTTP status that names its class: 400 (the field), 404 (model or
 * path), 405, 413 (body or prompt too long), 503 (queue full or stopping).
 */
#include "serve.h"
#include "serve_chat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#if MHD_VERSION < 0x00097002
typedef int MHD_RESULT;
#else
typedef enum MHD_Result MHD_RESULT;
#endif

/* ------------------------------------------------------------- metrics */

void srv_hist_init(struct srv_hist *h, const double *le)
{
	memset(h, 0, sizeof *h);
	memcpy(h->le, le, sizeof h->le);
}

void srv_hist_add(struct srv_hist *h, double v)
{
	int i = 0;
	while (i < SRV_HIST_BUCKETS && v > h->le[i])
		i++;
	h->count[i]++;
	h->sum += v;
	h->n++;
}

int srv_init(struct srv *s)
{
	static const double lat[SRV_HIST_BUCKETS] = {
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	srv_hist_init(&s->m.ttft, lat);
	srv_hist_init(&s->m.tpot, lat);
	srv_hist_init(&s->m.e2e, lat);
	return kv_pool_init(&s->pool, s->nblocks, s->block_tokens);
}

void srv_destroy(struct srv *s)
{
	kv_pool_destroy(&s->pool);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->lock);
}

void srv_req_unref(struct srv_req *q)
{
	if (--q->refs > 0)
		return;
	pthread_cond_destroy(&q->wake);
	free(q->prompt);
	free(q->out);
	free(q->out_lp);
	free(q->out_top_id);
	free(q->out_top_lp);
	free(q->p_lp);
	free(q->p_top_id);
	free(q->p_top_lp);
	free(q->blocks);
	srv_chat_img_free(q->img);
	free(q);
}

static void hist_text(char **buf, size_t *len, FILE *f, const char *name,
		      const char *help, const struct srv_hist *h)
{
	uint64_t cum = 0;
	(void)buf, (void)len;
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
		cum += h->count[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i],
			(unsigned long long)cum);
	}
	cum += h->count[SRV_HIST_BUCKETS];
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n",
		name, (unsigned long long)cum, name, h->sum, name,
		(unsigned long long)h->n);
}

static long long block_refs(const struct srv *s)
{
	long long n = 0;
	for (int b = 0; b < s->pool.nblocks; b++)
		n += s->pool.ref[b];
	return n;
}

/* The Prometheus text exposition (format 0.0.4) of s's metrics. */
static char *metrics_text(struct srv *s)
{
	static const char *rej[] = {"400", "404", "405", "413", "503", "other"};
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	const struct srv_metrics *m = &s->m;
	int used = 0, bused = kv_pool_used(&s->pool);
	int full_seqs = s->nblocks / (int)((s->max_ctx + s->block_tokens - 1) / s->block_tokens);
	int64_t kv_tokens = 0;
	for (struct srv_req *q = s->running; q; q = q->next) {
		kv_tokens += q->spos; /* with the forwards in flight: their
				       * tokens hold their blocks, being written */
		used += q->nblk > 0;
	}
	fprintf(f, "# HELP day0_requests_total Completion requests by outcome.\n"
		   "# TYPE day0_requests_total counter\n"
		   "day0_requests_total{status=\"ok\"} %llu\n"
		   "day0_requests_total{status=\"cancelled\"} %llu\n",
		(unsigned long long)m->req_ok, (unsigned long long)m->req_cancelled);
	for (int i = 0; i < 6; i++)
		fprintf(f, "day0_requests_total{status=\"%s\"} %llu\n", rej[i],
			(unsigned long long)m->req_rejected[i]);
	fprintf(f, "# HELP day0_prompt_tokens_total Prompt tokens prefilled.\n"
		   "# TYPE day0_prompt_tokens_total counter\n"
		   "day0_prompt_tokens_total %llu\n"
		   "# HELP day0_generation_tokens_total Tokens generated.\n"
		   "# TYPE day0_generation_tokens_total counter\n"
		   "day0_generation_tokens_total %llu\n"
		   "# HELP day0_batch_steps_total Forward passes (batches) run.\n"
		   "# TYPE day0_batch_steps_total counter\n"
		   "day0_batch_steps_total %llu\n"
		   "# HELP day0_batch_tokens_total Tokens over all batches.\n"
		   "# TYPE day0_batch_tokens_total counter\n"
		   "day0_batch_tokens_total %llu\n",
		(unsigned long long)m->prompt_tokens, (unsigned long long)m->gen_tokens,
		(unsigned long long)m->steps, (unsigned long long)m->batch_tokens);
	fprintf(f, "# HELP day0_requests_waiting Requests queued for a KV slot.\n"
		   "# TYPE day0_requests_waiting gauge\nday0_requests_waiting %d\n"
		   "# HELP day0_requests_running Requests holding a KV slot.\n"
		   "# TYPE day0_requests_running gauge\nday0_requests_running %d\n"
		   "# HELP day0_kv_sequences Sequences holding KV blocks (per card: "
		   "every card holds its slice of each).\n"
		   "# TYPE day0_kv_sequences gauge\nday0_kv_sequences %d\n"
		   "# HELP day0_kv_sequences_max Full-context sequences the KV "
		   "blocks hold.\n"
		   "# TYPE day0_kv_sequences_max gauge\nday0_kv_sequences_max %d\n"
		   "# HELP day0_kv_sequences_peak Most sequences ever holding KV.\n"
		   "# TYPE day0_kv_sequences_peak gauge\nday0_kv_sequences_peak %d\n"
		   "# HELP day0_requests_waiting_peak Longest queue seen.\n"
		   "# TYPE day0_requests_waiting_peak gauge\n"
		   "day0_requests_waiting_peak %d\n"
		   "# HELP day0_kv_tokens Tokens held in the KV cache (those the "
		   "forward in flight writes included).\n"
		   "# TYPE day0_kv_tokens gauge\nday0_kv_tokens %lld\n"
		   "# HELP day0_kv_usage_ratio Share of the KV blocks in use.\n"
		   "# TYPE day0_kv_usage_ratio gauge\nday0_kv_usage_ratio %.6f\n"
		   "# HELP day0_kv_card_bytes KV-cache bytes allocated per card.\n"
		   "# TYPE day0_kv_card_bytes gauge\nday0_kv_card_bytes %llu\n",
		s->nqueued, s->nrunning, used, full_seqs, s->m.kv_peak,
		s->m.queue_peak, (long long)kv_tokens,
		s->nblocks ? (double)bused / s->nblocks : 0.0,
		(unsigned long long)(s->kv_block_bytes * (uint64_t)s->nblocks));
	fprintf(f, "# HELP day0_kv_blocks KV blocks per card by state.\n"
		   "# TYPE day0_kv_blocks gauge\n"
		   "day0_kv_blocks{state=\"used\"} %d\n"
		   "day0_kv_blocks{state=\"shared\"} %d\n"
		   "day0_kv_blocks{state=\"cached\"} %d\n"
		   "day0_kv_blocks{state=\"free\"} %d\n"
		   "# HELP day0_kv_blocks_total KV blocks per card.\n"
		   "# TYPE day0_kv_blocks_total gauge\nday0_kv_blocks_total %d\n"
		   "# HELP day0_kv_block_tokens Tokens per KV block.\n"
		   "# TYPE day0_kv_block_tokens gauge\nday0_kv_block_tokens %d\n"
		   "# HELP day0_kv_blocks_peak Most KV blocks ever in use.\n"
		   "# TYPE day0_kv_blocks_peak gauge\nday0_kv_blocks_peak %d\n"
		   "# HELP day0_kv_block_refs Sum of the blocks' reference counts.\n"
		   "# TYPE day0_kv_block_refs gauge\nday0_kv_block_refs %lld\n"
		   "# HELP day0_kv_evictions_total Cached prefix blocks evicted (LRU).\n"
		   "# TYPE day0_kv_evictions_total counter\n"
		   "day0_kv_evictions_total %llu\n"
		   "# HELP day0_preempted_requests_total Preempted requests by outcome.\n"
		   "# TYPE day0_preempted_requests_total counter\n"
		   "day0_preempted_requests_total{status=\"ok\"} %llu\n"
		   "day0_preempted_requests_total{status=\"aborted\"} %llu\n"
		   "# HELP day0_recompute_checks_total Recomputed sequences whose last "
		   "emitted token was checked against the recomputed logits.\n"
		   "# TYPE day0_recompute_checks_total counter\n"
		   "day0_recompute_checks_total{result=\"same\"} %llu\n"
		   "day0_recompute_checks_total{result=\"different\"} %llu\n"
		   "# HELP day0_recomputed_tokens_total Tokens prefilled again after "
		   "a preemption.\n"
		   "# TYPE day0_recomputed_tokens_total counter\n"
		   "day0_recomputed_tokens_total %llu\n",
		bused, kv_pool_shared(&s->pool), s->pool.ncached, s->pool.nfree,
		s->nblocks, s->block_tokens, s->m.blocks_peak, (long long)block_refs(s),
		(unsigned long long)s->pool.evictions,
		(unsigned long long)s->m.preempted_ok,
		(unsigned long long)s->m.preempted_aborted,
		(unsigned long long)(s->m.recheck_n - s->m.recheck_wrong),
		(unsigned long long)s->m.recheck_wrong,
		(unsigned long long)s->m.recomputed_tokens);
	if (s->pp > 1) {
		double mean_m = m->pp_steps ? (double)m->pp_micro / m->pp_steps : s->micro;
		fprintf(f, "# HELP day0_pp_bubble_fraction Pipeline stages' idle share "
			   "of their time while micro-batches are in flight (measured).\n"
			   "# TYPE day0_pp_bubble_fraction gauge\n"
			   "day0_pp_bubble_fraction %.6f\n"
			   "# HELP day0_pp_bubble_expected (p-1)/(m+p-1) for the mean "
			   "micro-batches in flight.\n"
			   "# TYPE day0_pp_bubble_expected gauge\n"
			   "day0_pp_bubble_expected %.6f\n"
			   "# HELP day0_pp_micro_batches Micro-batches kept in flight across "
			   "the stages (at most), and the mean in flight when one comes back.\n"
			   "# TYPE day0_pp_micro_batches gauge\n"
			   "day0_pp_micro_batches %d\n"
			   "day0_pp_micro_batches_mean %.3f\n",
			m->pp_span_s > 0 ? 1 - m->pp_busy_s / m->pp_span_s : 0.0,
			(s->pp - 1) / (mean_m + s->pp - 1), s->micro, mean_m);
	}
	/* vLLM's names for the same figures (its dashboards read these) */
	fprintf(f, "# HELP vllm:num_requests_running Requests in the running batch.\n"
		   "# TYPE vllm:num_requests_running gauge\n"
		   "vllm:num_requests_running{model_name=\"%s\"} %d\n"
		   "# HELP vllm:num_requests_waiting Requests waiting.\n"
		   "# TYPE vllm:num_requests_waiting gauge\n"
		   "vllm:num_requests_waiting{model_name=\"%s\"} %d\n"
		   "# HELP vllm:gpu_cache_usage_perc KV-cache usage: 1 means 100 "
		   "percent.\n"
		   "# TYPE vllm:gpu_cache_usage_perc gauge\n"
		   "vllm:gpu_cache_usage_perc{model_name=\"%s\"} %.6f\n"
		   "# HELP vllm:num_preemptions_total Cumulative preemptions.\n"
		   "# TYPE vllm:num_preemptions_total counter\n"
		   "vllm:num_preemptions_total{model_name=\"%s\"} %llu\n"
		   "# HELP vllm:gpu_prefix_cache_queries_total Prompt tokens looked "
		   "up in the prefix cache.\n"
		   "# TYPE vllm:gpu_prefix_cache_queries_total counter\n"
		   "vllm:gpu_prefix_cache_queries_total{model_name=\"%s\"} %llu\n"
		   "# HELP vllm:gpu_prefix_cache_hits_total Prompt tokens found in "
		   "the prefix cache.\n"
		   "# TYPE vllm:gpu_prefix_cache_hits_total counter\n"
		   "vllm:gpu_prefix_cache_hits_total{model_name=\"%s\"} %llu\n",
		s->model_name, s->nrunning, s->model_name, s->nqueued, s->model_name,
		s->nblocks ? (double)bused / s->nblocks : 0.0, s->model_name,
		(unsigned long long)s->m.preemptions, s->model_name,
		(unsigned long long)s->m.prefix_queries, s->model_name,
		(unsigned long long)s->m.prefix_hits);
	hist_text(&buf, &len, f, "day0_time_to_first_token_seconds",
		  "Arrival to the first generated token.", &m->ttft);
	hist_text(&buf, &len, f, "day0_time_per_output_token_seconds",
		  "Mean time between generated tokens, per request.", &m->tpot);
	hist_text(&buf, &len, f, "day0_e2e_request_latency_seconds",
		  "Arrival to the last token.", &m->e2e);
	fclose(f);
	return buf;
}

/* ------------------------------------------------------------ responses */

static MHD_RESULT send_text(struct MHD_Connection *c, unsigned status,
			    const char *type, char *body)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		strlen(body), body, MHD_RESPMEM_MUST_FREE);
	MHD_RESULT rc;
	MHD_add_response_header(r, "Content-Type", type);
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static MHD_RESULT send_json(struct MHD_Connection *c, unsigned status,
			    json_t *doc)
{
	char *body = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return send_text(c, status, "application/json", body);
}

static void count_reject(struct srv *s, unsigned status)
{
	int k = status == 400 ? 0 : status == 404 ? 1 : status == 405 ? 2
		: status == 413 ? 3 : status == 503 ? 4 : 5;
	pthread_mutex_lock(&s->lock);
	s->m.req_rejected[k]++;
	pthread_mutex_unlock(&s->lock);
}

/* An OpenAI-shaped error: {"error": {message, type, param, code}}. */
static MHD_RESULT send_error(struct srv *s, struct MHD_Connection *c,
			     unsigned status, const char *param,
			     const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static MHD_RESULT send_error(struct srv *s, struct MHD_Connection *c,
			     unsigned status, const char *param,
			     const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	const char *type = status == 503 ? "service_unavailable"
			   : status == 404 ? "not_found_error"
					   : "invalid_request_error";
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	count_reject(s, status);
	return send_json(c, status, json_pack("{s:{s:s, s:s, s:o, s:i}}", "error",
					      "message", msg, "type", type, "param",
					      param ? json_string(param) : json_null(),
					      "code", (int)status));
}

/* ----------------------------------------------------- request parsing */

struct upload {
	char *body;
	size_t len;
	int too_big;
	int answered; /* refused from the headers alone */
};

static const char *const known_fields[] = {
	"model", "prompt", "max_tokens", "temperature", "seed", "stream",
	"stream_options", "logprobs", "echo", "n", "top_p", "user",
	"return_token_ids", "return_tokens_as_token_ids", "ignore_eos", NULL};

static int field_known(const char *k)
{
	for (int i = 0; known_fields[i]; i++)
		if (!strcmp(known_fields[i], k))
			return 1;
	return 0;
}

/*
 * Fill q from the request body; on a refusal set *status, *param and msg
 * (the field named) and return -1.
 */
static int parse_completion(struct srv *s, json_t *doc, struct srv_req *q,
			    unsigned *status, const char **param, char *msg,
			    size_t n)
{
	const char *k;
	json_t *v, *p;
#define REFUSE(st, field, ...) \
	do { *status = (st); *param = (field); snprintf(msg, n, __VA_ARGS__); \
	     return -1; } while (0)
	*status = 400;
	if (!json_is_object(doc))
		REFUSE(400, NULL, "the request body must be a JSON object");
	json_object_foreach(doc, k, v)
		if (!field_known(k))
			REFUSE(400, k, "unknown field '%s' (this server accepts: "
			       "model, prompt, max_tokens, temperature, seed, stream, "
			       "stream_options, logprobs, echo, n, top_p, user, "
			       "return_token_ids, return_tokens_as_token_ids, "
			       "ignore_eos)", k);
	if ((v = json_object_get(doc, "model")) && !json_is_null(v)) {
		if (!json_is_string(v))
			REFUSE(400, "model", "model: expected a string");
		if (strcmp(json_string_value(v), s->model_name))
			REFUSE(404, "model", "model '%s' does not exist; this server "
			       "serves '%s'", json_string_value(v), s->model_name);
	}
	p = json_object_get(doc, "prompt");
	if (!p)
		REFUSE(400, "prompt", "prompt: required (a list of token ids)");
	if (json_is_array(p) && json_array_size(p) == 1 &&
	    json_is_array(json_array_get(p, 0)))
		p = json_array_get(p, 0); /* [[ids]]: one prompt in a batch */
	if (json_is_string(p)) {
		struct d0_err e = {{0}};
		if (!s->tokenize)
			REFUSE(400, "prompt", "prompt as text needs a tokenizer; "
			       "send a list of token ids");
		if (s->tokenize(s->tokenize_ctx, json_string_value(p), &q->prompt,
				&q->nprompt, &e) < 0)
			REFUSE(400, "prompt", "prompt: %.400s", e.msg);
		/* the refusal a list of ids (and so a chat) gets: 413
		 * naming prompt, before max_tokens is looked at */
		if (q->nprompt > s->max_ctx)
			REFUSE(413, "prompt", "prompt: %d tokens is longer than the "
			       "context (%lld tokens)", q->nprompt,
			       (long long)s->max_ctx);
	} else if (json_is_array(p)) {
		size_t i;
		json_t *t;
		if (json_array_size(p) == 0)
			REFUSE(400, "prompt", "prompt: empty");
		if (json_array_size(p) > (size_t)s->max_ctx)
			REFUSE(413, "prompt", "prompt: %zu tokens is longer than the "
			       "context (%lld tokens)", json_array_size(p),
			       (long long)s->max_ctx);
		q->prompt = calloc(json_array_size(p), sizeof *q->prompt);
		json_array_foreach(p, i, t) {
			json_int_t id;
			if (!json_is_integer(t))
				REFUSE(400, "prompt", "prompt[%zu]: expected a token id "
				       "(integer)", i);
			id = json_integer_value(t);
			if (id < 0 || id >= s->vocab)
				REFUSE(400, "prompt", "prompt[%zu]: token id %lld is "
				       "outside the vocabulary (0..%lld)", i,
				       (long long)id, (long long)s->vocab - 1);
			q->prompt[q->nprompt++] = id;
		}
	} else {
		REFUSE(400, "prompt", "prompt: expected a list of token ids "
		       "(or text, with a tokenizer)");
	}
	q->max_tokens = 16;
	if ((v = json_object_get(doc, "max_tokens")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1)
			REFUSE(400, "max_tokens", "max_tokens: expected an integer "
			       ">= 1");
		if (json_integer_value(v) > s->max_ctx)
			REFUSE(400, "max_tokens", "max_tokens: %lld is more than the "
			       "context (%lld)", (long long)json_integer_value(v),
			       (long long)s->max_ctx);
		q->max_tokens = (int)json_integer_value(v);
	}
	if (q->nprompt + q->max_tokens > s->max_ctx)
		REFUSE(400, "max_tokens", "max_tokens: %d prompt tokens + %d to "
		       "generate exceed the context (%lld tokens)", q->nprompt,
		       q->max_tokens, (long long)s->max_ctx);
	{
		/* a sequence that needs more blocks than the whole cache has
		 * can never run: say so now rather than queue it forever */
		int64_t need = ((int64_t)q->nprompt + q->max_tokens + s->block_tokens - 1) /
			       s->block_tokens;
		int64_t have = s->slot_policy ? (s->nblocks >= (s->max_ctx + s->block_tokens - 1) /
						  s->block_tokens ? need : 0)
					      : s->nblocks;
		if (need > have)
			REFUSE(400, "max_tokens", "max_tokens: %d prompt tokens + %d "
			       "to generate need %lld KV blocks of %d tokens, and the "
			       "KV cache has %d in all: this request can never fit "
			       "(lower max_tokens or shorten the prompt)", q->nprompt,
			       q->max_tokens, (long long)need, s->block_tokens,
			       s->nblocks);
	}
	q->temperature = 1.0;
	if ((v = json_object_get(doc, "temperature")) && !json_is_null(v)) {
		if (!json_is_number(v) || json_number_value(v) < 0 ||
		    json_number_value(v) > 2)
			REFUSE(400, "temperature", "temperature: expected a number "
			       "in [0, 2]");
		q->temperature = json_number_value(v);
	}
	if ((v = json_object_get(doc, "top_p")) && !json_is_null(v))
		if (!json_is_number(v) || json_number_value(v) != 1.0)
			REFUSE(400, "top_p", "top_p: only 1 is supported");
	if ((v = json_object_get(doc, "n")) && !json_is_null(v))
		if (!json_is_integer(v) || json_integer_value(v) != 1)
			REFUSE(400, "n", "n: only 1 is supported");
	if ((v = json_object_get(doc, "seed")) && !json_is_null(v)) {
		if (!json_is_integer(v))
			REFUSE(400, "seed", "seed: expected an integer");
		q->seed = (uint64_t)json_integer_value(v);
		q->has_seed = 1;
	}
	q->top_logprobs = -1;
	if ((v = json_object_get(doc, "logprobs")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > SRV_MAX_TOP)
			REFUSE(400, "logprobs", "logprobs: expected an integer in "
			       "[0, %d]", SRV_MAX_TOP);
		q->top_logprobs = (int)json_integer_value(v);
	}
#define BOOLFIELD(name, dst)                                                  \
	if ((v = json_object_get(doc, name)) && !json_is_null(v)) {           \
		if (!json_is_boolean(v))                                      \
			REFUSE(400, name, name ": expected true or false");   \
		dst = json_is_true(v);                                        \
	}
	BOOLFIELD("stream", q->stream)
	BOOLFIELD("echo", q->echo)
	{
		int dummy = 0;
		BOOLFIELD("return_token_ids", dummy)
		BOOLFIELD("ignore_eos", dummy) /* no EOS stops a day0 sequence */
		BOOLFIELD("return_tokens_as_token_ids", dummy) /* always */
		(void)dummy;
	}
	if ((v = json_object_get(doc, "stream_options")) && !json_is_null(v)) {
		json_t *u;
		if (!json_is_object(v))
			REFUSE(400, "stream_options", "stream_options: expected an "
			       "object");
		json_object_foreach(v, k, u) {
			if (strcmp(k, "include_usage"))
				REFUSE(400, "stream_options", "stream_options: unknown "
				       "field '%s'", k);
			if (!json_is_boolean(u))
				REFUSE(400, "stream_options", "stream_options."
				       "include_usage: expected true or false");
			q->include_usage = json_is_true(u);
		}
	}
	if ((v = json_object_get(doc, "user")) && !json_is_null(v) &&
	    !json_is_string(v))
		REFUSE(400, "user", "user: expected a string");
#undef BOOLFIELD
#undef REFUSE
	return 0;
}

/* ---------------------------------------------------------- rendering */

static json_t *tok_name(int64_t id)
{
	char b[40];
	snprintf(b, sizeof b, "token_id:%lld", (long long)id);
	return json_string(b);
}

static json_t *top_dict(const int *ids, const float *lps, int k)
{
	json_t *d = json_object();
	char b[40];
	for (int j = 0; j < k; j++) {
		snprintf(b, sizeof b, "token_id:%d", ids[j]);
		json_object_set_new(d, b, json_real(lps[j]));
	}
	return d;
}

/*
 * OpenAI's completion logprobs object for tokens [from, to) of the
 * request's echo-prompt + output sequence (tokens named "token_id:N": no
 * tokenizer is needed to read them).
 */
static json_t *logprobs_obj(const struct srv_req *q, int from_prompt,
			    int out_from, int out_to)
{
	json_t *toks = json_array(), *lps = json_array(), *tops = json_array();
	json_t *offs = json_array();
	int k = q->top_logprobs, off = 0;
	if (from_prompt)
		for (int i = 0; i < q->nprompt; i++) {
			json_array_append_new(toks, tok_name(q->prompt[i]));
			json_array_append_new(lps, i ? json_real(q->p_lp[i]) : json_null());
			json_array_append_new(tops, i ? top_dict(q->p_top_id + (size_t)i * k,
								 q->p_top_lp + (size_t)i * k, k)
						      : json_null());
			json_array_append_new(offs, json_integer(off++));
		}
	for (int i = out_from; i < out_to; i++) {
		json_array_append_new(toks, tok_name(q->out[i]));
		json_array_append_new(lps, json_real(q->out_lp[i]));
		json_array_append_new(tops, top_dict(q->out_top_id + (size_t)i * k,
						     q->out_top_lp + (size_t)i * k, k));
		json_array_append_new(offs, json_integer(off++));
	}
	return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs",
			 lps, "top_logprobs", tops, "text_offset", offs);
}

static json_t *ids_array(const int64_t *ids, int from, int to)
{
	json_t *a = json_array();
	for (int i = from; i < to; i++)
		json_array_append_new(a, json_integer(ids[i]));
	return a;
}

static json_t *usage_obj(const struct srv_req *q)
{
	return json_pack("{s:i, s:i, s:i}", "prompt_tokens", q->nprompt,
			 "completion_tokens", q->nout, "total_tokens",
			 q->nprompt + q->nout);
}

/* One choice with output tokens [from, to); echo adds the prompt. */
static json_t *choice_obj(const struct srv_req *q, int from, int to, int echo,
			  const char *finish)
{
	json_t *ch;
	if (q->chat)
		return srv_chat_choice(q, from, to, finish);
	ch = json_pack("{s:i, s:s, s:o, s:o}", "index", 0, "text", "",
			       "token_ids", ids_array(q->out, from, to),
			       "finish_reason",
			       finish ? json_string(finish) : json_null());
	if (echo)
		json_object_set_new(ch, "prompt_token_ids",
				    ids_array(q->prompt, 0, q->nprompt));
	json_object_set_new(ch, "logprobs", q->top_logprobs >= 0
						    ? logprobs_obj(q, echo, from, to)
						    : json_null());
	return ch;
}

static json_t *completion_obj(struct srv *s, const struct srv_req *q,
			      json_t *choice)
{
	json_t *choices;
	if (q->chat)
		return srv_chat_obj(s, q, choice);
	choices = json_array();
	if (choice)
		json_array_append_new(choices, choice);
	return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", q->id, "object",
			 "text_completion", "created", (json_int_t)q->created,
			 "model", s->model_name, "choices", choices);
}

/* ------------------------------------------------------------ streaming */

/* 1 when the client closed or reset its connection: a peek of one byte
 * returns 0 (its FIN) or an error other than "nothing yet".  Bytes it
 * sent (a pipelined request) are left where they are. */
static int peer_gone(int fd)
{
	char b;
	ssize_t r;
	if (fd < 0)
		return 0;
	r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int conn_fd(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? (int)ci->connect_fd : -1;
}

/* Wait (locked) for q's next wake-up or PEER_TICK, whichever first. */
#define PEER_TICK_NS 100000000L
static void wait_tick(struct srv_req *q, pthread_mutex_t *lock)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += PEER_TICK_NS;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&q->wake, lock, &ts);
}

struct stream_ctx {
	struct srv *s;
	struct srv_req *q;
	int fd;        /* the client's socket (peer_gone), -1 unknown */
	int sent;      /* output tokens already written */
	int echo_done, finished;
	char *pend;    /* bytes formatted but not yet handed to MHD */
	size_t pend_len, pend_off;
};

static void pend_event(struct stream_ctx *c, json_t *doc)
{
	char *js = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	const char *body = js ? js : "[DONE]";
	size_t n = strlen(body) + 8;
	c->pend = realloc(c->pend, c->pend_len + n + 1);
	c->pend_len += (size_t)snprintf(c->pend + c->pend_len, n + 1,
					"data: %s\n\n", body);
	free(js);
	json_decref(doc);
}

/*
 * Format what the request has that the client has not seen (locked): one
 * event per generated token, as vLLM streams (the first also carries the
 * echoed prompt), the finish_reason on the last, then usage and [DONE].
 */
static void stream_fill(struct stream_ctx *c)
{
	struct srv *s = c->s;
	struct srv_req *q = c->q;
	while (c->sent < q->nout) {
		int echo = q->echo && !c->echo_done;
		int last = q->state == SRV_DONE && c->sent + 1 == q->nout;
		pend_event(c, completion_obj(s, q, choice_obj(q, c->sent, c->sent + 1,
							      echo,
							      last ? q->finish : NULL)));
		c->sent++;
		c->echo_done = 1;
		if (last)
			c->finished = 1;
	}
	if (q->state == SRV_DONE && !c->finished) {
		pend_event(c, completion_obj(s, q, choice_obj(q, c->sent, c->sent,
							      q->echo && !c->echo_done,
							      q->finish)));
		c->finished = 1;
	}
	if (c->finished == 1) {
		if (q->include_usage) {
			json_t *u = completion_obj(s, q, NULL);
			json_object_set_new(u, "usage", usage_obj(q));
			pend_event(c, u);
		}
		pend_event(c, NULL);
		c->finished = 2;
	}
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream_ctx *c = cls;
	size_t n;
	(void)pos;
	pthread_mutex_lock(&c->s->lock);
	while (c->pend_off == c->pend_len) {
		c->pend_len = c->pend_off = 0;
		if (c->finished == 2) {
			pthread_mutex_unlock(&c->s->lock);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (peer_gone(c->fd)) { /* stream_free marks it cancelled */
			pthread_mutex_unlock(&c->s->lock);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		stream_fill(c);
		if (c->pend_len)
			break;
		wait_tick(c->q, &c->s->lock);
	}
	pthread_mutex_unlock(&c->s->lock);
	n = c->pend_len - c->pend_off;
	if (n > max)
		n = max;
	memcpy(buf, c->pend + c->pend_off, n);
	c->pend_off += n;
	return (ssize_t)n;
}

/* The response is gone: finished, or the client disconnected. */
static void stream_free(void *cls)
{
	struct stream_ctx *c = cls;
	struct srv *s = c->s;
	pthread_mutex_lock(&s->lock);
	if (c->q->state != SRV_DONE) {
		c->q->cancelled = 1;
		pthread_cond_signal(&s->work);
	}
	srv_req_unref(c->q);
	pthread_mutex_unlock(&s->lock);
	free(c->pend);
	free(c);
}

/* ------------------------------------------------------------ handlers */

static void enqueue(struct srv *s, struct srv_req *q)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	q->created = ts.tv_sec;
	q->t_arrive = now_s();
	q->state = SRV_QUEUED;
	q->nblk = 0;
	q->refs = 2;
	snprintf(q->id, sizeof q->id, q->chat ? "chatcmpl-day0-%llu"
					      : "cmpl-day0-%llu",
		 (unsigned long long)++s->next_id);
	rng_seed(&q->rng, q->has_seed ? q->seed
				       : (uint64_t)(q->t_arrive * 1e9) ^ s->next_id);
	if (s->queue_tail)
		s->queue_tail->next = q;
	else
		s->queue_head = q;
	s->queue_tail = q;
	if (++s->nqueued > s->m.queue_peak)
		s->m.queue_peak = s->nqueued;
	pthread_cond_signal(&s->work);
}

static MHD_RESULT completions(struct srv *s, struct MHD_Connection *c,
			      struct upload *u, int chat)
{
	struct srv_chat_img *img = NULL;
	json_error_t je;
	json_t *doc = json_loadb(u->body ? u->body : "", u->len, 0, &je);
	struct srv_req *q;
	unsigned status;
	const char *param = NULL;
	char msg[512];
	if (!doc)
		return send_error(s, c, 400, NULL, "the body is not valid JSON: "
				  "line %d column %d: %s", je.line, je.column,
				  je.text);
	if (chat) { /* the chat body as a completion body (serve_chat.c) */
		json_t *cd = srv_chat_request(s, doc, &img, &status, &param, msg,
					      sizeof msg);
		char field[64];
		json_decref(doc);
		if (!cd) {
			snprintf(field, sizeof field, "%s", param ? param : "");
			return send_error(s, c, status, param ? field : NULL, "%s",
					  msg);
		}
		doc = cd;
	}
	q = calloc(1, sizeof *q);
	pthread_cond_init(&q->wake, NULL);
	q->chat = chat;
	q->img = img;
	q->tok = s->tokenize_ctx;
	if (parse_completion(s, doc, q, &status, &param, msg, sizeof msg) < 0) {
		char field[64];
		snprintf(field, sizeof field, "%s", param ? param : "");
		json_decref(doc);
		q->refs = 1;
		srv_req_unref(q);
		return send_error(s, c, status, param ? field : NULL, "%s", msg);
	}
	json_decref(doc);
	pthread_mutex_lock(&s->lock);
	if (s->stopping || s->nqueued >= s->max_queue) {
		int stopping = s->stopping;
		pthread_mutex_unlock(&s->lock);
		q->refs = 1;
		srv_req_unref(q);
		return send_error(s, c, 503, NULL, stopping ? "the server is stopping"
				  : "overloaded: %d requests already queued",
				  s->max_queue);
	}
	enqueue(s, q);
	if (q->stream) {
		struct stream_ctx *sc = calloc(1, sizeof *sc);
		struct MHD_Response *r;
		MHD_RESULT rc;
		sc->s = s;
		sc->q = q;
		sc->fd = conn_fd(c);
		pthread_mutex_unlock(&s->lock);
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
						      stream_read, sc, stream_free);
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		rc = MHD_queue_response(c, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return rc;
	}
	{
		int fd = conn_fd(c);
		while (q->state != SRV_DONE) {
			if (peer_gone(fd)) { /* nobody to answer: free its KV */
				q->cancelled = 1;
				pthread_cond_signal(&s->work);
				srv_req_unref(q);
				pthread_mutex_unlock(&s->lock);
				return MHD_NO;
			}
			wait_tick(q, &s->lock);
		}
	}
	{
		json_t *doc2 = completion_obj(s, q, choice_obj(q, 0, q->nout, q->echo,
							      q->finish));
		json_object_set_new(doc2, "usage", usage_obj(q));
		srv_req_unref(q);
		pthread_mutex_unlock(&s->lock);
		return send_json(c, MHD_HTTP_OK, doc2);
	}
}

static MHD_RESULT models(struct srv *s, struct MHD_Connection *c)
{
	return send_json(c, MHD_HTTP_OK, json_pack(
		"{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data",
		"id", s->model_name, "object", "model", "created", (json_int_t)0,
		"owned_by", "day0", "max_model_len", (json_int_t)s->max_ctx));
}

static MHD_RESULT handler(void *cls, struct MHD_Connection *c,
			  const char *url, const char *method,
			  const char *version, const char *upload,
			  size_t *upload_len, void **con_cls)
{
	struct srv *s = cls;
	struct upload *u = *con_cls;
	(void)version;
	if (!u) { /* first call: headers only */
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     "Content-Length");
		u = calloc(1, sizeof *u);
		*con_cls = u;
		pthread_mutex_lock(&s->lock);
		s->http_active++; /* until completed(): srv_http_stop drains */
		pthread_mutex_unlock(&s->lock);
		if (cl && strtoull(cl, NULL, 10) > s->max_body) {
			/* refuse before reading it (no 100 Continue) */
			u->answered = 1;
			return send_error(s, c, 413, NULL, "request body of %s bytes "
					  "is larger than %zu", cl, s->max_body);
		}
		return MHD_YES;
	}
	if (u->answered) { /* drop whatever of the body still arrives */
		*upload_len = 0;
		return MHD_YES;
	}
	if (*upload_len) {
		if (!u->too_big && u->len + *upload_len <= s->max_body) {
			u->body = realloc(u->body, u->len + *upload_len + 1);
			memcpy(u->body + u->len, upload, *upload_len);
			u->len += *upload_len;
		} else {
			u->too_big = 1;
		}
		*upload_len = 0;
		return MHD_YES;
	}
	if (u->too_big)
		return send_error(s, c, 413, NULL, "request body larger than %zu "
				  "bytes", s->max_body);
	if (!strcmp(url, "/v1/completions")) {
		if (strcmp(method, "POST"))
			return send_error(s, c, 405, NULL, "%s %s: use POST", method, url);
		return completions(s, c, u, 0);
	}
	if (!strcmp(url, "/v1/chat/completions")) {
		if (strcmp(method, "POST"))
			return send_error(s, c, 405, NULL, "%s %s: use POST", method, url);
		return completions(s, c, u, 1);
	}
	if (!strcmp(url, "/v1/models") || !strcmp(url, "/health") ||
	    !strcmp(url, "/metrics")) {
		if (strcmp(method, "GET"))
			return send_error(s, c, 405, NULL, "%s %s: use GET", method, url);
		if (!strcmp(url, "/v1/models"))
			return models(s, c);
		if (!strcmp(url, "/health"))
			return send_text(c, s->stopping ? 503 : 200, "text/plain",
					 strdup(""));
		pthread_mutex_lock(&s->lock);
		{
			char *t = metrics_text(s);
			pthread_mutex_unlock(&s->lock);
			return send_text(c, 200, "text/plain; version=0.0.4", t);
		}
	}
	return send_error(s, c, 404, NULL, "no such endpoint: %s %s (this server "
			  "has POST /v1/completions, /v1/chat/completions, GET /v1/models, /health, "
			  "/metrics)", method, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode why)
{
	struct srv *s = cls;
	struct upload *u = *con_cls;
	(void)c, (void)why;
	if (u) {
		free(u->body);
		free(u);
		*con_cls = NULL;
		pthread_mutex_lock(&s->lock);
		s->http_active--;
		pthread_mutex_unlock(&s->lock);
	}
}

int srv_http_start(struct srv *s, const char *host, int port,
		   struct d0_err *err)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port)};
	const union MHD_DaemonInfo *info;
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return d0_errf(err, "--host %s: expected an IPv4 address", host);
	s->daemon = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
			MHD_USE_ITC,
		(uint16_t)port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, &a,
		MHD_OPTION_NOTIFY_COMPLETED, completed, s,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
		MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024, MHD_OPTION_END);
	if (!s->daemon)
		return d0_errf(err, "%s:%d: cannot listen (port in use?)", host, port);
	info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : port;
	return 0;
}

void srv_http_stop(struct srv *s)
{
	if (s->daemon) {
		double until = now_s() + SRV_DRAIN_S;
		int busy;
		pthread_mutex_lock(&s->lock);
		s->stopping = 1; /* new requests: 503 */
		busy = s->http_active;
		pthread_mutex_unlock(&s->lock);
		/* MHD_stop_daemon shuts every connection's socket down at once:
		 * a handler woken by abort_all that has not yet written its
		 * answer (a queued request's whole JSON, a stream's abort chunk,
		 * [DONE] and the chunked body's end) would lose it.  So wait
		 * for every request begun to complete first. */
		while (busy > 0 && now_s() < until) {
			struct timespec ts = {0, 5000000};
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&s->lock);
			busy = s->http_active;
			pthread_mutex_unlock(&s->lock);
		}
		MHD_stop_daemon(s->daemon);
		s->daemon = NULL;
	}
}
