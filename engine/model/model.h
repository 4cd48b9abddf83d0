/*
 * model.h - config.json families and the one tensor table (model.c), parameter
 * counts, and the operator registry with its kernels (ops.c).
 */
#ifndef DAY0_MODEL_H
#define DAY0_MODEL_H

#include "format.h"
#include "weights.h"

/* ------------------------------------------------------------------ model */

/* What a tensor is, which decides how it is sharded. */
enum tensor_role {
	ROLE_EMBED,    /* [V, H] vocab-parallel on axis 0 */
	ROLE_LM_HEAD,  /* [V, H] vocab-parallel on axis 0 */
	ROLE_NORM,     /* replicated, kept f32 */
	ROLE_Q,        /* column-parallel by heads */
	ROLE_KV,       /* column-parallel by kv heads, replicated below tp */
	ROLE_O,        /* row-parallel (axis 1) */
	ROLE_COL,      /* column-parallel (gate/up, w1/w3) */
	ROLE_ROW,      /* row-parallel (down, w2) */
	ROLE_ROUTER,   /* replicated */
	ROLE_ROUTER_BIAS, /* replicated, kept f32 (e_score_correction_bias) */
	ROLE_REPL,     /* replicated, model dtype (e.g. shared_expert_gate) */
};

/* Where a tensor's parameters are counted (inspect's breakdown).  The
 * vision tower and its projector (Qwen's merger, LLaVA's
 * multi_modal_projector) run once per image, not per token: counted in
 * total, never in active (model_count_params). */
enum tensor_group {
	GROUP_EMBED, GROUP_ATTN, GROUP_DENSE_MLP, GROUP_EXPERTS, GROUP_SHARED,
	GROUP_ROUTER, GROUP_NORM, GROUP_LM_HEAD, GROUP_VISION, GROUP_PROJECTOR,
	GROUP_COUNT
};

#define TENSOR_FILE_DIMS 5
struct tensor_spec {
	char name[160];
	int ndim;
	uint64_t shape[2];
	/* A convolution kernel (a patch embedding: stride = kernel, so a
	 * product with the flattened patches) is the matrix [out, in*kt*kh*kw]
	 * above for every count, split and product; the checkpoint stores it
	 * with file_ndim dims file_shape.  file_ndim 0: stored as ndim/shape. */
	int file_ndim;
	uint64_t file_shape[TENSOR_FILE_DIMS];
	enum tensor_role role;
	enum tensor_group group;
	int layer;  /* -1 for embeddings, final norm, lm_head */
	int expert; /* -1 unless a routed expert's weight */
	int mtp;    /* part of a multi-token-prediction layer */
};

/* Roles whose weights stay f32 whatever the target dtype. */
int role_keeps_f32(enum tensor_role r);

struct rope_scaling {
	char type[16]; /* "" none, linear, dynamic, yarn, llama3, or other */
	double factor;
	double original_max_pos;
	double low_freq_factor, high_freq_factor; /* llama3 */
	double beta_fast, beta_slow;              /* yarn */
	double mscale, mscale_all_dim;            /* yarn (deepseek) */
	double attention_factor;                  /* yarn, 0: derived */
	int truncate;                             /* yarn, default 1 */
};

/*
 * The image channel of a vision-language release (issue #30): config.json's
 * vision_config and the keys around it.  model_config's other fields are
 * the language model's (text_config, or the top level where the release
 * keeps them there), mapped onto a text family, so every text step works
 * on the LM unchanged.
 */
enum vision_kind {
	VISION_NONE,
	VISION_QWEN2_VL,   /* Qwen2-VL: LayerNorm, quick_gelu MLP, full attention */
	VISION_QWEN2_5_VL, /* Qwen2.5-VL: RMSNorm, SwiGLU, window attention */
	VISION_CLIP,       /* LLaVA: CLIP ViT + multi_modal_projector */
	VISION_KIMI,       /* Kimi-VL: MoonViT (2D RoPE, interpolated
			    * learned positions) + pre_norm projector */
	VISION_UNSUPPORTED /* a tower the engine has no table for: named */
};
#define VISION_FULLATT_MAX 64
struct vision_config {
	enum vision_kind kind;
	char vl_type[32];    /* the release's model_type (qwen2_5_vl, llava, ...) */
	char architecture[64];
	char tower_type[32]; /* vision_config.model_type as written */
	/* LM tensor names: "" as a text model, "language_model." (LLaVA) */
	char lm_prefix[32];
	/* what the engine lacks for this release ("" when nothing) */
	char missing[200];
	int64_t depth, hidden, ffn, heads; /* the tower's blocks */
	int64_t patch, temporal_patch, merge, in_chans;
	int64_t out_hidden;  /* the merger's / projector's output (LM hidden) */
	int64_t window_size; /* Qwen2.5-VL: window attention span in pixels */
	int64_t fullatt[VISION_FULLATT_MAX]; /* fullatt_block_indexes */
	int n_fullatt;
	int64_t tokens_per_second;
	double mlp_ratio;     /* Qwen2-VL (ffn = embed_dim * mlp_ratio) */
	char act[32];         /* the tower's hidden_act */
	double norm_eps;      /* 1e-6 (Qwen), layer_norm_eps (CLIP) */
	/* CLIP / LLaVA */
	int64_t image_size, projection_dim;
	int64_t feature_layer;        /* vision_feature_layer (-2) */
	/* Kimi-VL: init_pos_emb_height / width of the learned positions */
	int64_t pos_h, pos_w;
	char select_strategy[16];     /* "default" drops CLS, "full" keeps it */
	char projector_act[32];       /* projector_hidden_act */
	/* placeholder tokens (-1 when the config has none) */
	int64_t image_token_id, video_token_id, vision_start_id, vision_end_id;
	/* M-RoPE in the LM: mrope_section (t, h, w) of head_dim / 2 */
	int64_t mrope_section[3];
	int mrope, mrope_interleaved;
};

struct model_config {
	char model_type[32]; /* the family (kimi_k2 is read as deepseek_v3) */
	int64_t hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
	int64_t experts, top_k, moe_ffn, shared_ffn;
	int64_t decoder_sparse_step;
	int64_t *mlp_only; size_t n_mlp_only;
	int tie_embeddings;
	int attention_bias; /* q/k/v(/o for llama) biases; qwen2_moe: q/k/v */
	int mlp_bias;       /* llama's mlp_bias */
	int norm_topk_prob;
	double rms_eps, rope_theta;
	int64_t max_pos;
	struct rope_scaling rope;
	enum dtype dtype; /* torch_dtype */
	char hidden_act[32];
	int64_t window; /* sliding-window attention span, 0 if none */
	int64_t max_window_layers;      /* qwen: which layers use the window */
	unsigned char *layer_sliding;   /* explicit layer_types, or NULL */
	/* deepseek_v3: MLA and its router */
	int mla;
	int64_t q_lora_rank; /* 0: q_proj without compression */
	int64_t kv_lora_rank, qk_rope_dim, qk_nope_dim, v_head_dim;
	int64_t shared_experts; /* n_shared_experts (sizes: shared_ffn) */
	int64_t first_dense, moe_layer_freq;
	int64_t n_group, topk_group;
	double routed_scaling;
	char scoring[16]; /* softmax | sigmoid */
	int64_t mtp_layers; /* num_nextn_predict_layers */
	int rope_interleave;
	char quant[32]; /* quantization_config.quant_method, "" if none */
	struct quant_config qc; /* format.h: how the weights are stored */
	struct vision_config vision; /* kind VISION_NONE for a text model */
};

/* Families gen-model can write and verify/convert understand. */
int model_arch_known(const char *model_type);
/* "llama, mistral, ..." for messages and --help. */
const char *model_arch_list(void);
/* Parse config.json; messages name path and key. */
int model_config_load(const char *path, struct model_config *cfg,
		      struct d0_err *err);
/* Bounds every config.json dimension is held to (config_check.c). */
#define MODEL_DIM_MAX	 (1LL << 24) /* hidden, ffn, vocab sizes */
#define MODEL_COUNT_MAX	 (1LL << 16) /* layers, heads, experts, head_dim */
#define MODEL_POS_MAX	 (1LL << 27) /* max_position_embeddings, windows */
#define MODEL_PARAMS_MAX (1LL << 50) /* parameters the dimensions imply */
/*
 * The validation table per family (config_check.c): every dimension of the
 * parsed config within its bounds (positive where a zero means nothing),
 * rms_norm_eps and rope_theta positive and finite, and the products the
 * tensor table and the planner form checked for overflow.  The loader
 * calls it, so inspect, plan, gen-model, verify, convert and run refuse
 * the same configs with the same message (path, key, value, bounds).
 */
int model_config_check(const struct model_config *cfg, const char *path,
		       struct d0_err *err);
int model_config_from_json(json_t *root, const char *path,
			   struct model_config *cfg, struct d0_err *err);
void model_config_free(struct model_config *cfg);
/* Sliding-window span of layer l's attention (0: full causal). */
int64_t model_layer_window(const struct model_config *cfg, int64_t l);
/* Is layer l a sparse (MoE) layer? */
int model_layer_is_moe(const struct model_config *cfg, int64_t l);
/* The full tensor table the config implies, in checkpoint order. */
int model_tensors(const struct model_config *cfg, struct tensor_spec **out,
		  size_t *n, struct d0_err *err);
/*
 * A small model with the structure of `real` (gen-model --like): same
 * family and every operator feature (attention kind and GQA ratio, MoE
 * routing kind, shared experts, dense-first layers, MLA, qk-norm, rope
 * scaling, tie, biases), with small dimensions.  scale: "tiny" or "small";
 * layers 0 picks enough layers to show every layer kind.
 */
int model_config_shrink(const struct model_config *real, const char *scale,
			int64_t layers, struct model_config *out,
			struct d0_err *err);
/* Config as transformers writes it (for gen-model). */
json_t *model_config_to_json(const struct model_config *cfg);

/*
 * The image channel's sizes per image of grid_h x grid_w patches (grid_t
 * frames; a still image is 1): patches, the tokens the LM sees (merged
 * patches, or CLIP's grid plus CLS per the select strategy), the widest
 * activation of a vision block in elements (patches x max(3 hidden, ffn))
 * and the LM's KV cache bytes those tokens take (per token: 2 x layers x
 * kv_heads x head_dim x kv_bytes; MLA: its latent).
 */
struct vision_image_cost {
	int64_t patches, tokens;
	uint64_t act_elems, kv_bytes;
};
void vision_image_cost(const struct model_config *c, int64_t grid_t,
		       int64_t grid_h, int64_t grid_w, int kv_bytes,
		       struct vision_image_cost *out);
/* "Qwen2.5-VL tower (RMSNorm, SwiGLU, window attention)" for messages. */
const char *vision_kind_name(enum vision_kind k);
/* An LM tensor's name in the checkpoint (cfg->vision.lm_prefix + name). */
const char *model_lm_name(const struct model_config *cfg, const char *name,
			  char *buf, size_t n);

/* model_vision.c, for model.c: is model_type a vision-language family;
 * its config.json (the LM read as a text family, the tower into
 * cfg->vision); the tower's and projector's rows of the tensor table
 * (appended to v); the release's config.json around the LM's lm (taken);
 * the tower of a gen-model --like model. */
int vision_family_known(const char *model_type);
int vision_parse(json_t *root, const char *path, struct model_config *cfg,
		 struct d0_err *err);
void vision_tensors(const struct model_config *cfg, struct tensor_spec **v,
		    size_t *n, size_t *cap);
json_t *vision_config_json(const struct model_config *cfg, json_t *lm);
int vision_config_shrink(const struct model_config *real,
			 struct model_config *out, struct d0_err *err);

/* Parameter counts from the tensor table (inspect). */
struct param_count {
	uint64_t total, active;          /* main model, MTP layers excluded */
	uint64_t group[GROUP_COUNT];     /* total per group */
	uint64_t group_active[GROUP_COUNT];
	uint64_t mtp;                    /* multi-token-prediction layers */
	uint64_t vision, projector;      /* in total, not in active */
};
void model_count_params(const struct model_config *cfg,
			const struct tensor_spec *t, size_t n,
			struct param_count *out);
const char *tensor_group_name(enum tensor_group g);

/* -------------------------------------------------------------- operators */

enum op_kind { OP_NATIVE, OP_FALLBACK };
struct op_entry {
	const char *name;
	enum op_kind kind;
	const char *uses; /* fallback: comma list of the native ops it composes */
	const char *what;
	void (*impl)(void); /* native: the implementing function */
};
/* The registry: the single declaration of what the runtime can execute. */
extern const struct op_entry op_registry[];
const struct op_entry *op_find(const char *name);
enum op_status { OP_MISSING, OP_IS_NATIVE, OP_IS_FALLBACK };
enum op_status op_status(const char *name);
/*
 * The operators a model needs, in order.  list must hold 32 entries;
 * names built from the config (rope.<type>, glu.<act>) live in scratch
 * (128 bytes or more).  Returns the count.
 */
size_t model_operators(const struct model_config *cfg, const char **list,
		       char *scratch, size_t scratch_len);

/* Kernels (float32, row-major).  y[m,n] = x[m,k] . w[n,k]^T (+ b). */
void op_linear(float *y, const float *x, const float *w, const float *b,
	       int m, int n, int k);
void op_rms_norm(float *y, const float *x, const float *w, int n, double eps);
/*
 * A weight matrix as it is resident: f32, bf16 kept as stored
 * (ops_bf16.c), or block-scaled FP8 kept as stored (ops_fp8.c).  dtype is
 * DT_F32, DT_BF16, DT_F8_E4M3 or DT_F8_E5M2.  FP8: p holds the codes,
 * scale one f32 per br x bc block of the matrix (rows of sc_cols), e4m3's
 * times 2^8 (op_fp8_scale_factor), in the same allocation as p.
 */
struct fp8_sub {
	uint32_t col;
	float w;
};
struct wmat {
	void *p;
	int dtype;
	const float *scale;
	int br, bc, sc_cols;
	/* e4m3 whose subnormal codes load took out (op_fp8_take_subnormals):
	 * nosub 1, each such code a zero of its sign in p, its column and
	 * weight (value times its block's scale, as widened) kept: row j's
	 * are sub_w[sub_row[j]] .. sub_w[sub_row[j + 1] - 1] (sub_row NULL
	 * where there were none; one allocation, the owner frees sub_row).
	 * Every FP8 kernel adds them back. */
	int nosub;
	uint32_t *sub_row;
	const struct fp8_sub *sub_w;
};
/* op_linear for a resident weight of either dtype; products in f32. */
void op_linear_w(float *y, const float *x, const struct wmat *w,
		 const float *b, int m, int n, int k);
/* np (<= 4) products of one x, y[q] = x . w[q]^T (+ b[q]): one job over
 * the pool for a decode step where the dtypes allow, else op_linear_w each. */
void op_linear_many(int np, float *const *y, const struct wmat *const *w,
		    const float *const *b, const int *n, const float *x, int m, int k);
void op_linear_bf16(float *y, const float *x, const uint16_t *w,
		    const float *b, int m, int n, int k);
void op_embedding_w(float *y, const struct wmat *table, int64_t id, int h);
void op_bf16_widen(float *out, const uint16_t *in, size_t n);
/* FP8 kernels (ops_fp8.c; op_linear_w picks them): up to four rows of x
 * times rows [j0, j1) of W, and rows [j0, j0+n) of W widened to f32;
 * vec: 0 the portable loops, 1 the AVX2+FMA+F16C kernels (op_fp8_vector()
 * says the CPU has them), 2 the AVX-512 ones (F and BW: the caller checks),
 * 3 as 2 but one row of x by table lookups (AVX-512 VBMI, op_fp8_vbmi():
 * x permuted by op_fp8_permute_x, every scale block whole steps of 64),
 * 4 as 3 over four streams (e4m3 by GFNI bit moves where op_fp8_gfni()). */
void op_fp8_gemv_rows(float *y, int ldy, const float *x, const struct wmat *w,
		      int m, int j0, int j1, int k, int vec);
void op_fp8_widen_rows(float *out, const struct wmat *w, int j0, int n, int k,
		       int vec);
int op_fp8_vector(void);
int op_fp8_vbmi(void);
/* vec 4's e4m3 kernel: op_fp8_gfni() 1 where it moves the codes' bits by
 * GFNI ("dp4", value x 2^-120 times x as bf16 hi + lo by VDPBF16PS, the
 * default where the CPU has AVX512-BF16 too; "gfx4", value x 2^-8 with the
 * zero-exponent codes patched, the default where it has GFNI but not
 * AVX512-BF16; "gf4", value x 2^-120 by f32 FMAs, by name; dp4 and gf4 on
 * weights whose subnormals load took out), 0 the VBMI tables ("vbmi");
 * op_fp8_e4m3_kernel() names it, op_fp8_wants_nosub() says whether load
 * should take the subnormals out (dp4 or gf4 in use).  op_fp8_named(name):
 * 1 if name is DAY0_KERNEL's name of an e4m3 kernel this CPU has
 * ("avx512-vbmi": the tables, "avx512-gfx4", "avx512-gf4", "avx512-dp4";
 * with the sgemm prefill); op_fp8_select(name)
 * forces it, any other name (or NULL) the best; op_fp8_named_kernel()
 * the name forced, or NULL. */
int op_fp8_gfni(void);
const char *op_fp8_e4m3_kernel(void);
int op_fp8_wants_nosub(void);
int op_fp8_named(const char *name);
void op_fp8_select(const char *name);
const char *op_fp8_named_kernel(void);
/* e4m3's subnormal codes in rows x k codes of w (0 for e5m2), the bytes
 * of their list, and taking them out (w->scale set): each set to a zero
 * of its sign and listed in mem (op_fp8_sub_bytes(rows, count) bytes;
 * NULL when there are none), which becomes w->sub_row; w->nosub set. */
uint64_t op_fp8_subnormals(const struct wmat *w, int rows, int k);
size_t op_fp8_sub_bytes(int rows, uint64_t count);
void op_fp8_take_subnormals(struct wmat *w, int rows, int k, void *mem);
void op_fp8_permute_x(float *xp, const float *x, int k);
/* What the runtime multiplies an FP8 dtype's block scales by (2^8 for
 * e4m3, whose codes the kernels read as f16: the value times 2^-8). */
float op_fp8_scale_factor(int dtype);
/* The GEMV kernel in use (bf16, FP8, one-row f32): "avx512", "avx2+fma" or
 * "portable"; the best the CPU has unless DAY0_KERNEL names another. */
const char *op_bf16_kernel(void);
/* Use kernel name ("avx2" for "avx2+fma"; NULL or "" the best the CPU has)
 * (tests); -1 if this CPU or build lacks it.  "onednn": the best GEMV and
 * prefill's bf16/FP8 products on oneDNN (the default where oneDNN has a
 * native kernel for the CPU); a GEMV named: prefill by sgemm panels. */
int op_bf16_set_kernel(const char *name);
/* Prefill's bf16/FP8 kernel: "onednn:<oneDNN's ISA>" ("/x-split" after it
 * where x is taken as hi + lo, DAY0_PREFILL_X=split; "onednn:<its f32
 * ISA>/w-f32" where W is widened to f32) or "sgemm"; and the GEMV
 * and prefill kernels together, as perf reports them
 * ("avx512+onednn:avx512_core_amx_bf16", or the GEMV's name alone). */
const char *op_prefill_kernel(void);
const char *op_kernels(void);
/* How prefill on oneDNN multiplies x by bf16 and FP8 W (ops_bf16.c):
 * x rounded once to bf16, as bf16 hi + lo (DAY0_PREFILL_X=split), or W
 * widened to f32 and x as given (f32: the default where the CPU's bf16
 * matmul is no faster; DAY0_PREFILL_X forces one). */
enum { PREFILL_X_BF16, PREFILL_X_SPLIT, PREFILL_X_F32 };
int op_prefill_x(void);
int op_prefill_x_default(void); /* this CPU's, whatever is forced */
int op_prefill_x_split(void);   /* op_prefill_x() == PREFILL_X_SPLIT */
/* tests: force a mode (-1: f32 without oneDNN's native f32 matmul) */
int op_set_prefill_x(int mode);
/* oneDNN's matmul (ops_onednn.c): whether its bf16 one has a native
 * kernel for this CPU, and which (NULL if none); the primitive for
 * y[m, ldy] (n columns) = x[m, k] . W[n, k]^T, x and W bf16 (f32 if f32),
 * created once per shape, with streams for slots pool threads (NULL on
 * failure); run in pool slot slot, single-threaded (0, or -1 on failure). */
struct onednn_mm;
int op_onednn_ready(void);
const char *op_onednn_isa(void);
const char *op_onednn_isa_f32(void); /* its f32 matmul's (NULL if loops) */
int op_onednn_redone(void); /* prefill products redone off oneDNN (tests) */
const struct onednn_mm *op_onednn_get(int m, int n, int k, int ldy, int f32, int slots);
int op_onednn_run(const struct onednn_mm *mm, float *y, const void *x, const void *w,
		  int slot);
/* f32 -> bf16, rounded to nearest even (NaN stays NaN). */
void op_f32_to_bf16(uint16_t *out, const float *in, size_t n);
/* x as two bf16 terms hi + lo (prefill on oneDNN: ops_onednn.c). */
void op_f32_to_bf16_split(uint16_t *hi, uint16_t *lo, const float *in, size_t n);
void op_embedding(float *y, const float *table, int64_t id, int h);
void op_softmax(float *x, int n);
void op_sigmoid(float *x, int n);
void op_swiglu(float *y, const float *gate, const float *up, int n);
/* Inverse frequencies for dim rotary dims (dim/2 values) and the factor
 * cos/sin are scaled by; -1 for a rope type the engine lacks. */
int op_rope_inv_freq(const struct model_config *c, int dim, int64_t seq_len,
		     double *inv_freq, double *attn_factor);
/* Rotate the first rot_dim dims of each of n_heads heads of x at pos. */
void op_rope(float *x, int n_heads, int head_dim, int rot_dim, int64_t pos,
	     const double *inv_freq, double attn_factor);
void op_rope_deinterleave(float *x, int n_heads, int head_dim, int rot_dim);
/*
 * Causal attention: q [n_q, nh, dqk] at positions pos0.., k [n_kv, nkv,
 * dqk], v [n_kv, nkv, dv] at positions 0..; out [n_q, nh, dv].  window > 0
 * limits each query to the last `window` positions.
 */
/* each(ctx, i, slot) for i < n, spread over the products' thread pool (as
 * many threads as OpenBLAS uses, op_pool_threads(); OpenBLAS itself
 * single-threaded meanwhile); slot < op_pool_threads() is the thread's
 * own index, for scratch of its own. */
void op_parallel_for(int n, void (*each)(void *ctx, int i, int slot), void *ctx);
int op_pool_threads(void);
void op_attention(float *out, const float *q, const float *k, const float *v,
		  int n_q, int n_kv, int64_t pos0, int nh, int nkv, int dqk,
		  int dv, double scale, int window);
/* The same with the keys and values laid out by the caller: kv head h's
 * position j at k[h*k_hs + j*k_ld] (op_attention: k_hs = dqk,
 * k_ld = nkv*dqk, the heads interleaved; the runtime's cache keeps each
 * head's positions contiguous, k_hs = max_ctx*dqk, k_ld = dqk). */
void op_attention_kv(float *out, const float *q, const float *k, const float *v,
		     int n_q, int n_kv, int64_t pos0, int nh, int nkv, int dqk, int dv,
		     double scale, int window, size_t k_hs, int k_ld, size_t v_hs,
		     int v_ld);
/* Keys and values in blocks (the runtime's paged KV cache): position p of
 * kv head h is row p % block_tokens of block table[p / block_tokens]
 * (table NULL: block p / block_tokens), at k + block*k_bs + h*k_hs +
 * row*k_ld (v likewise; v may point into k's rows, as MLA's latent).
 * The sums run in a fixed order, so the bits do not depend on the blocks
 * (docs/serve.md, "KV blocks"). */
struct kv_view {
	const float *k, *v;
	const int32_t *table;
	int block_tokens;
	size_t k_bs, v_bs, k_hs, v_hs; /* floats: block to block, head to head */
	int k_ld, v_ld;                /* floats: row to row */
};
void op_attention_paged(float *out, const float *q, const struct kv_view *kv, int n_q,
			int n_kv, int64_t pos0, int nh, int nkv, int dqk, int dv,
			double scale, int window);
void op_router_softmax_topk(const float *logits, int E, int k, int renorm,
			    int *idx, float *w);
void op_router_sigmoid_group_topk(const float *logits, const float *bias,
				  int E, int k, int n_group, int topk_group,
				  int renorm, double scaling, int *idx, float *w);

#endif
