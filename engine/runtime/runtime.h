/*
 * runtime.h - the parallel forward pass (runtime.c), the float64 reference (ref.c) and
 * the TP/PP/EP sharding rules (layout.c).
 */
#ifndef DAY0_RUNTIME_H
#define DAY0_RUNTIME_H

#include "model.h"

/* ---------------------------------------------------------------- runtime */

/*
 * The parallel forward pass (runtime.c), one MPI rank per card.  Call
 * after MPI_Init.  Collective statistics per group and op feed `comm`
 * events and perf's communication share.
 */
enum { RT_GROUP_TP, RT_GROUP_PP, RT_GROUP_EP, RT_GROUPS };
enum { RT_OP_ALLREDUCE, RT_OP_ALLGATHER, RT_OP_ALLTOALL, RT_OP_SENDRECV, RT_OPS };
struct rt_stats {
	uint64_t bytes[RT_GROUPS][RT_OPS], calls[RT_GROUPS][RT_OPS];
	double time_s[RT_GROUPS][RT_OPS];
};
struct rt;
struct layout_dims;
/*
 * Open dir (a convert output with layout.json, or a Hugging Face
 * checkpoint sliced in memory) for this rank.  card_mem 0: no budget.
 * Returns -1 with err for a refusal; an exceeded budget is reported by
 * rt_over_budget() instead (so all ranks can stop together).
 */
int rt_open(struct rt **r, const char *dir, const struct layout_dims *d,
	    uint64_t card_mem, int64_t max_ctx, struct d0_err *err);
/* Did start-up fail on another rank (rt_open agreed on its reason)?  Such
 * a rank repeats the reason but is not its cause. */
int rt_peer_failed(const struct rt *r);
const char *rt_over_budget(const struct rt *r);
int rt_check_groups(struct rt *r, char *detail, size_t n);
/*
 * Run T tokens at the next positions (prefill or one decode step).
 * logits [T, vocab] is filled on the last stage's ranks; layer_out[l]
 * (if non-NULL) gets layer l's output [T, hidden] on the ranks holding l.
 */
int rt_forward(struct rt *r, const int64_t *tokens, int T, float *logits,
	       float **layer_out, struct d0_err *err);
/* rt_forward computing the last token's logits only: logits [1, vocab]
 * (perf's prefill, as a server does it; run --dump-logits keeps all). */
int rt_forward_last(struct rt *r, const int64_t *tokens, int T, float *logits,
		    struct d0_err *err);
/* The MoE layers' routing of the forward passes that follow, for
 * validate: idx[l] [T][top_k] gets the experts layer l's router chose
 * for each token (in its order), logits[l] [T][experts] its logits, on the
 * ranks holding layer l (entries may be NULL; NULL arrays: stop). */
void rt_record_routes(struct rt *r, int32_t **idx, float **logits);
int rt_last_stage_root(const struct rt *r);
int rt_stage_root(const struct rt *r, int stage);
int rt_is_stage_root(const struct rt *r);
int rt_first_layer(const struct rt *r, int *count);
int rt_rank(const struct rt *r);
const struct model_config *rt_config(const struct rt *r);
uint64_t rt_mem_used(const struct rt *r);
uint64_t rt_mem_peak(const struct rt *r);
/* Bytes of the weights and KV cache in huge-page chunks (rt_alloc). */
uint64_t rt_chunk_bytes(const struct rt *r);
/* This rank's resident FP8 e4m3 codes, how many of them are subnormal,
 * and the bytes of the sparse lists they went into (the accountant counts
 * them); returns 1 if load took them out of the codes (the dp4 kernel,
 * default where the CPU has AVX512-BF16, or DAY0_KERNEL=avx512-gf4: they
 * meet no denormal; every FP8 kernel adds the lists back), 0 if they stay
 * in place. */
int rt_fp8_subnormals(const struct rt *r, uint64_t *codes, uint64_t *sub,
		      uint64_t *bytes);
const struct rt_stats *rt_stats(const struct rt *r);
/* The collectives so far as `comm` events (rt_comm_events.c), step
 * "prefill", "decode", "soak"...; since non-NULL: only what came after
 * *since (then *since is set to now), with "interval_s". */
void rt_emit_comm(struct rt *r, const struct layout_dims *d, const char *step,
		  struct rt_stats *since, double interval_s);
/* Start a new sequence: forget the KV cache (the weights stay). */
void rt_reset(struct rt *r);
void rt_close(struct rt *r);

/*
 * The float64 reference (ref.c): one process, the whole Hugging Face
 * checkpoint, transformers' semantics written out plainly.  Returns the
 * logits [T, vocab] and, if layers is non-NULL, every layer's output
 * [layers][T][hidden] (malloc'd).
 */
/* The reference's own FP8 decoder (e5m2: 1, e4m3fn: 0), for its tests. */
double ref_fp8_value(int e5m2, unsigned code);
int ref_forward(const char *dir, const int64_t *tokens, int T, double **logits,
		double **layers, struct model_config *cfg, struct d0_err *err);

/* ----------------------------------------------------------------- layout */

struct layout_dims {
	int tp, pp, ep;
};

/* Rank r's coordinates: tp fastest, then ep, then pp (stage). */
int layout_rank(const struct layout_dims *d, int pp, int ep, int tp);
void layout_coords(const struct layout_dims *d, int rank, int *pp, int *ep,
		   int *tp);
/* First layer and layer count of stage s (balanced: the first
 * layers % pp stages hold one more). */
void layout_stage_layers(int64_t layers, int pp, int s, int64_t *first,
			 int64_t *count);
/* Check that dims divide the model; message says which dimension and why. */
int layout_check(const struct model_config *cfg, const struct layout_dims *d,
		 struct d0_err *err);

/* How one tensor is split: parts along axis; rank's part or -1 if absent. */
struct tensor_split {
	const char *kind; /* "column", "row", "vocab", "replicated", "kv_heads" */
	int axis;         /* -1 when replicated */
	int parts;        /* number of distinct slices */
	int replicas;     /* ranks per slice within a tp group (kv_heads) */
};
void layout_split(const struct model_config *cfg, const struct layout_dims *d,
		  const struct tensor_spec *t, struct tensor_split *s);
/* Which slice of t rank holds, or -1 when the rank does not hold it. */
int layout_part_for_rank(const struct model_config *cfg,
			 const struct layout_dims *d,
			 const struct tensor_spec *t,
			 const struct tensor_split *s, int rank);
/* The pipeline stages holding t (1, or 2 for a tied embedding). */
int layout_tensor_stages(const struct model_config *cfg,
			 const struct layout_dims *d,
			 const struct tensor_spec *t, int stages[2]);
/* Elements in one rank's slice of t. */
uint64_t layout_slice_numel(const struct tensor_spec *t,
			    const struct tensor_split *s);
/* Number of experts per ep rank and the owner of expert e. */
int layout_expert_owner(const struct model_config *cfg,
			const struct layout_dims *d, int expert);

#endif
