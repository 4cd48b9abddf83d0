/*
 * rt_batch.h - the runtime's batched entry points, for serving: several
 * sequences share one forward pass (continuous batching), each with its
 * KV in blocks of a paged cache (docs/architecture.md, "The runtime's
 * inputs and KV cache"; docs/service.md).
 *
 * The KV cache of each layer is [nblocks][kv head][block tokens][dim].  A
 * segment names its sequence's block table: position p is in block
 * table[p / block_tokens] at offset p % block_tokens.  Who owns which
 * block (free lists, reference counts, shared prefixes) is the caller's:
 * the runtime only reads and writes through the tables it is given.  The
 * contiguous design is the special case without a table: slot s owns
 * blocks s*B .. s*B+B-1, B = ceil(max_ctx / block_tokens); rt_open and
 * rt_open_slots use one block of max_ctx tokens per slot, so run, perf
 * and soak keep the layout of before blocks.  Attention reads the blocks
 * in place with the sums of one contiguous block (op_attention_paged).
 * MLA's cache is one row a position, [block][block tokens][kv_lora_rank +
 * qk_rope_head_dim] (the latent and the rope key, shared by the heads).
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
	int slot;     /* without a table: KV slot of the sequence, 0..slots-1 */
	int64_t pos0; /* position of the segment's first token */
	int len;      /* tokens in the segment */
	/* the sequence's block table: ids covering positions 0..pos0+len-1
	 * (at least ceil((pos0+len)/block_tokens) of them), or NULL */
	const int32_t *table;
	int ntable;
	/* The image channel's inputs (docs/architecture.md, image/vision.h):
	 * rows of the hidden size replacing the embeddings at the image
	 * placeholders (config's image_token_id), one per placeholder of the
	 * segment, in order (read on stage 0); M-RoPE positions [3][len] of
	 * this segment (NULL: pos0 + i + rope_delta on all three axes).
	 * Zero them for text. */
	const float *embeds;
	const int64_t *rope_pos;
	int64_t rope_delta;
};

/* rt_open with a KV cache for `slots` sequences (>= 1), one block each. */
int rt_open_slots(struct rt **r, const char *dir, const struct layout_dims *d,
		  uint64_t card_mem, int64_t max_ctx, int slots,
		  struct d0_err *err);
/* rt_open with a paged KV cache of nblocks blocks of block_tokens tokens
 * (every block allocated up front, through the card's accountant);
 * max_ctx bounds one sequence's positions. */
int rt_open_paged(struct rt **r, const char *dir, const struct layout_dims *d,
		  uint64_t card_mem, int64_t max_ctx, int block_tokens,
		  int nblocks, struct d0_err *err);
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
/*
 * rt_forward (slot 0, at the sequence's next position, optional layer
 * dumps) for one segment carrying the image channel's inputs: sg's len,
 * embeds, rope_pos and rope_delta are used; its slot, pos0 and table are
 * not.  run --image's prefill and decode steps.
 */
int rt_forward_seg(struct rt *r, const int64_t *tokens, const struct rt_seg *sg,
		   float *logits, float **layer_out, struct d0_err *err);
int rt_slots(const struct rt *r);
int rt_kv_blocks(const struct rt *r);
int rt_block_tokens(const struct rt *r);
int64_t rt_max_ctx(const struct rt *r);
/* KV-cache bytes one sequence of max_ctx tokens costs on the most loaded
 * card of layout d (for sizing slots from a budget before opening). */
uint64_t rt_kv_seq_bytes(const struct model_config *c,
			 const struct layout_dims *d, int64_t max_ctx);
/* KV-cache bytes of one block of block_tokens on that card. */
uint64_t rt_kv_block_bytes(const struct model_config *c,
			   const struct layout_dims *d, int block_tokens);

#endif
