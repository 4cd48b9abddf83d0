/*
 * rt_impl.h - the runtime's insides, for the code that extends it inside
 * engine/ (the image channel's tower in image/, training's backward in
 * train/): the per-rank state, the accountant, the timed collectives and
 * the weight loader.  Not an API for steps: they use runtime.h and
 * rt_batch.h.
 */
#ifndef DAY0_RT_IMPL_H
#define DAY0_RT_IMPL_H

#include "engine.h"
#include "rt_batch.h"

#include <mpi.h>

struct rt_layer {
	int moe;
	int64_t window;
	float *in_norm, *post_norm;
	/* weight matrices as stored (bf16 stays bf16); norms, biases f32 */
	struct wmat wq, wk, wv, wo;
	float *bq, *bk, *bv, *bo, *q_norm, *k_norm;
	struct wmat q_a, q_b, kv_a, kv_b; /* MLA */
	float *q_a_norm, *kv_a_norm, *q_a_b, *kv_a_b;
	struct wmat gate, up, down;       /* dense */
	float *gate_b, *up_b, *down_b;
	struct wmat router;
	float *router_bias;
	struct wmat *e_gate, *e_up, *e_down; /* [experts], .p NULL if not ours */
	struct wmat sh_gate, sh_up, sh_down, sh_gate_w;
	float *kc, *vc; /* cache [kv_blocks][nkv_l][kv_bt][kv_dk|kv_dv]: each
			 * kv head's positions inside a block contiguous, as
			 * its attention reads them (rt_batch.h); MLA: kc
			 * alone, one row of latent + rope key a position */
	float *kv_b_f32; /* MLA: kv_b_proj in f32, absorbed into q and out */
};

struct rt {
	struct model_config c;
	struct layout_dims d;
	int rank, world, tp_rank, pp_rank, ep_rank;
	MPI_Comm tp_comm, ep_comm;
	int first, nl; /* this stage's layers */
	struct rt_layer *L;
	struct wmat embed, lm_head;
	float *final_norm;
	int nh_l, nkv_l, dqk, dv, ffn_l, moe_ffn_l, shared_l, vocab_l;
	double scale; /* attention softmax scale */
	double *inv_freq, attn_factor;
	int rot_dim;
	int64_t max_ctx, pos;
	int slots; /* sequences the contiguous design holds (run: 1) */
	/* the KV cache in blocks of kv_bt tokens (rt_batch.h): a segment's
	 * block table, or slot s's kv_sb blocks s*kv_sb.. when it has none */
	int kv_bt, kv_blocks, kv_sb;
	/* a cached position's floats per kv head: key row, value row (MLA:
	 * kv_lora_rank + qk_rope_head_dim, the values the first kv_lora_rank
	 * of the same row, kv_dv 0) */
	int kv_dk, kv_dv;
	/* the batch in flight: token runs of one sequence each */
	const struct rt_seg *seg;
	int nseg;
	/* the batch rows whose logits are wanted (increasing), NULL: all */
	const int *lrows;
	int nlrows;
	uint64_t budget, used, peak;
	char over[256];
	int peer_failed; /* another rank's failure, agreed at start-up */
	/* where weights come from */
	const char *dir;
	int converted;
	struct st_file rank_st;
	int rank_fd;
	struct ckpt ck;
	struct rt_stats stats;
	/* FP8 e4m3 codes resident, the subnormal ones, the bytes of their
	 * lists, and whether load took them out (dp4 or gf4 in use; load_fp8,
	 * rt_fp8_subnormals) */
	uint64_t fp8_codes, fp8_sub, fp8_sub_bytes;
	int fp8_taken;
	/* the weights and the KV cache rt_open loads: from chunks of
	 * transparent huge pages while big is set (rt_alloc; rt_free) */
	struct rt_chunk *chunks;
	int big;
	/* rt_record_routes: per global layer, the router's choice [T][top_k]
	 * and its logits [T][experts] of the next forward pass (NULL: none) */
	int32_t **route_idx;
	float **route_logits;
};

/* bytes for `what`, 64-byte aligned, counted against the card's budget
 * (NULL and r->over set when it does not fit); zeroed when zero is set. */
void *rt_alloc(struct rt *r, size_t bytes, const char *what, int zero);
/* free() for what rt_alloc returned (a no-op inside the huge-page chunks,
 * which rt_close frees). */
void rt_free(struct rt *r, void *p);
/* Count a collective of `bytes` that took t seconds in r->stats. */
void rt_stat_add(struct rt *r, int group, int op, uint64_t bytes, double t);
/* In-place float sum over comm (no-op for MPI_COMM_NULL), timed. */
void rt_allreduce(struct rt *r, float *buf, int n, MPI_Comm comm, int group);
/* This rank's slice of tensor `name` of specs as f32 (FP8 and packed
 * integers dequantised); NULL if the rank holds none.  Errors: r->over. */
float *rt_load_f32(struct rt *r, const struct tensor_spec *specs, size_t ns,
		   const char *name);
/* The same as it stays resident (plain bf16 kept bf16). */
struct wmat rt_load_w(struct rt *r, const struct tensor_spec *specs, size_t ns,
		      const char *name);

#endif
