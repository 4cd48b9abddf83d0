/*
 * rt_batch.h - the runtime's batched entry points, for serving: several
 * sequences share one forward pass (continuous batching), each with its own
 * slot in a KV cache sized for `slots` sequences of max_ctx tokens.
 *
 * A batch is a list of segments: a run of consecutive tokens of one
 * sequence (a prompt being prefilled, or one decode token).  The linear
 * layers, the collectives and the MoE dispatch see all the batch's tokens
 * at once; attention and RoPE see each segment at its own positions in its
 * own slot.  rt_forward (run, perf, soak) is the one-segment case in slot
 * 0, so its numbers are unchanged.
 */
#ifndef DAY0_RT_BATCH_H
#define DAY0_RT_BATCH_H

#include "engine.h"

struct rt_seg {
	int slot;     /* KV cache slot of the sequence, 0..slots-1 */
	int64_t pos0; /* position of the segment's first token */
	int len;      /* tokens in the segment */
};

/* rt_open with a KV cache for `slots` sequences (>= 1). */
int rt_open_slots(struct rt **r, const char *dir, const struct layout_dims *d,
		  uint64_t card_mem, int64_t max_ctx, int slots,
		  struct d0_err *err);
/*
 * Forward the batch: tokens holds every segment's tokens in order; logits
 * [sum of len, vocab] is filled on the last stage's ranks.  Collective:
 * every rank calls it with the same segments.
 */
int rt_forward_batch(struct rt *r, const int64_t *tokens,
		     const struct rt_seg *segs, int nseg, float *logits,
		     struct d0_err *err);
/*
 * The same, computing logits only for the batch rows `rows` (nrows of
 * them, increasing indices into tokens): logits is [nrows, vocab].  A
 * server needs the last row of a prompt (and the rows a request asks
 * logprobs for), not the lm_head over every prompt token.
 */
int rt_forward_rows(struct rt *r, const int64_t *tokens,
		    const struct rt_seg *segs, int nseg, const int *rows,
		    int nrows, float *logits, struct d0_err *err);
int rt_slots(const struct rt *r);
int64_t rt_max_ctx(const struct rt *r);
/* KV-cache bytes one sequence of max_ctx tokens costs on the most loaded
 * card of layout d (for sizing slots from a budget before opening). */
uint64_t rt_kv_seq_bytes(const struct model_config *c,
			 const struct layout_dims *d, int64_t max_ctx);

#endif
