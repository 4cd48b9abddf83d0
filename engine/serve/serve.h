/*
 * serve.h - `day0-engine serve`: an OpenAI-compatible HTTP endpoint over
 * the parallel runtime, with continuous batching.
 *
 * Two halves meet at one locked queue (struct srv):
 *   serve_http.c   rank 0's HTTP side (libmicrohttpd, one thread per
 *                  connection): parses and validates requests, waits for
 *                  their tokens, writes JSON or server-sent events, keeps
 *                  the metrics; a client that goes away marks its request
 *                  cancelled.
 *   step_serve.c   the scheduler on rank 0's main thread and the step every
 *                  rank runs: each iteration gives running sequences their
 *                  KV blocks (preempting the newest when none are left),
 *                  admits queued requests while blocks are free, builds one
 *                  batch under a token budget (one token per decoding
 *                  sequence, then prompt chunks), broadcasts it with the
 *                  block tables, runs rt_forward_rows on every rank, then
 *                  samples and computes logprobs for each sequence on
 *                  rank 0.
 *   kv_pool.c      the blocks: free list, reference counts, prefix cache.
 * MPI is only ever called from the main threads; the HTTP threads touch
 * nothing but struct srv under its mutex.
 */
#ifndef DAY0_SERVE_H
#define DAY0_SERVE_H

#include <pthread.h>
#include <stdint.h>

#include "engine.h"
#include "kv_pool.h"

#define SRV_MAX_TOP 20 /* top logprobs per position, as OpenAI's limit */

enum srv_state { SRV_QUEUED, SRV_RUNNING, SRV_DONE };

/* One completion request.  Fields under "state" are guarded by srv.lock. */
struct srv_req {
	char id[48];
	int64_t created;
	/* what was asked */
	int64_t *prompt;
	int nprompt;
	int max_tokens;
	double temperature;
	uint64_t seed;
	int has_seed;
	int top_logprobs; /* -1: no logprobs */
	int echo, stream, include_usage;
	/* state */
	enum srv_state state;
	int cancelled; /* the client went away: free its blocks */
	int prefilled; /* produced its first token */
	int64_t pos;   /* tokens of prompt + output in the KV cache */
	int32_t *blocks; /* block table: the blocks of positions 0.. */
	int nblk, cap_blk;
	int nkeyed;        /* leading full blocks whose keys are known */
	uint64_t last_key; /* the key of block nkeyed - 1 (0: none) */
	int preempted;     /* times preempted (blocks freed, recomputed) */
	int recheck;       /* recomputing: check the last emitted token */
	int64_t seq_id;    /* admission order: the newest is preempted */
	uint64_t in_step;  /* the last scheduler step that batched it */
	/* pipeline (PP micro-batches in flight): tokens handed to a forward
	 * (pos .. spos-1 on their way), pieces not yet back */
	int64_t spos;
	int inflight;
	int64_t *out; /* generated token ids */
	int nout;
	float *out_lp;       /* [nout] logprob of each generated token */
	int *out_top_id;     /* [nout][top_logprobs] */
	float *out_top_lp;
	float *p_lp;         /* [nprompt] prompt logprobs (echo; [0] unused) */
	int *p_top_id;       /* [nprompt][top_logprobs] */
	float *p_top_lp;
	const char *finish;  /* "length", NULL while running */
	double t_arrive, t_first, t_last;
	struct rng rng;
	int refs; /* HTTP side + scheduler */
	struct srv_req *next; /* queue / running list */
	/* /v1/chat/completions (serve_chat.c): answer in the chat shapes;
	 * img: the images (features, M-RoPE), never prefix-cached */
	int chat;
	struct srv_chat_img *img;
	const void *tok; /* the tokenizer, for the answer's text */
	pthread_cond_t wake;  /* new tokens or done */
};

/* Metrics (Prometheus text at /metrics). */
#define SRV_HIST_BUCKETS 12
struct srv_hist {
	double le[SRV_HIST_BUCKETS];
	uint64_t count[SRV_HIST_BUCKETS + 1]; /* last: +Inf */
	double sum;
	uint64_t n;
};
void srv_hist_init(struct srv_hist *h, const double *le);
void srv_hist_add(struct srv_hist *h, double v);

struct srv_metrics {
	uint64_t req_ok, req_cancelled, req_rejected[6]; /* 400 404 405 413 503 other */
	uint64_t prompt_tokens, gen_tokens, steps, batch_tokens;
	int kv_peak, queue_peak; /* most sequences holding KV, longest queue */
	int blocks_peak;         /* most blocks in use */
	uint64_t preemptions, preempted_ok, preempted_aborted;
	uint64_t recheck_n, recheck_wrong; /* recomputed tokens checked, differing */
	uint64_t prefix_queries, prefix_hits; /* prompt tokens looked up, found */
	uint64_t recomputed_tokens;
	/* pipeline stages: their compute and their time over the steps */
	double pp_busy_s, pp_span_s;
	uint64_t pp_steps, pp_micro;
	struct srv_hist ttft, tpot, e2e;
};

struct srv {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a request arrived or was cancelled */
	struct srv_req *queue_head, *queue_tail;
	struct srv_req *running;
	int nqueued, nrunning;
	int max_queue;
	/* the paged KV cache (docs/serve.md): blocks of block_tokens */
	struct kv_pool pool;
	int nblocks, block_tokens;
	int slot_policy;  /* reserve a whole context per sequence (the slot
			   * design, for comparison): no growth, no preemption */
	int prefix_cache; /* reuse cached full blocks of equal prefixes */
	int64_t next_seq;
	int pp, micro; /* pipeline stages; micro-batches a step is cut into */
	int max_seqs;    /* sequences a step (a micro-batch) holds at most; the
			  * running set at most max_seqs x micro (vLLM's
			  * max_num_seqs, one per PP virtual engine) */
	int64_t max_ctx, vocab;
	uint64_t kv_seq_bytes;   /* per card, one full-context sequence */
	uint64_t kv_block_bytes; /* per card, one block */
	int local_cards; /* ranks on rank 0's host: its cards 0.. (samples) */
	uint64_t next_id;
	const char *model_name;
	size_t max_body;
	volatile int stopping;
	struct srv_metrics m;
	/* text prompts: set when a tokenizer exists (engine/tokenizer.c);
	 * NULL makes a string prompt a 400 */
	int (*tokenize)(void *ctx, const char *text, int64_t **ids, int *n,
			struct d0_err *err);
	void *tokenize_ctx;
	/* the image channel (serve_chat.c): the model's config when it has
	 * a vision tower, and why images are refused when they are */
	struct model_config *vl;
	const char *vl_dir;
	char vl_why[256];
	struct vis *vis; /* the tower, opened on the first image */
	int64_t *chat_rope; /* scratch: M-RoPE positions of a batch */
	size_t chat_rope_cap;
	struct MHD_Daemon *daemon;
	int port;
	/* HTTP requests begun and not yet completed (their answers not yet
	 * written whole): srv_http_stop waits for them to drain */
	int http_active;
};

int srv_init(struct srv *s);
void srv_destroy(struct srv *s);
/* Start HTTP on host:port (port 0: any); s->port gets the bound port. */
int srv_http_start(struct srv *s, const char *host, int port,
		   struct d0_err *err);
/* Stop HTTP: new requests get 503 while those begun finish writing their
 * answers (at most SRV_DRAIN_S seconds), then the daemon and its
 * connections go.  Call it after every request is answered (abort_all). */
#define SRV_DRAIN_S 2.0
void srv_http_stop(struct srv *s);
/* Drop one reference (under s->lock); frees the request at zero. */
void srv_req_unref(struct srv_req *q);

#endif
