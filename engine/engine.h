/*
 * engine.h - the day0 engine library: everything day0-engine's steps share.
 *
 * The engine is a static library (libday0engine.a) plus a thin main that
 * dispatches to one step per file (step_*.c), tmux-style: each step exports a
 * `const struct step_entry` and steps.c lists them.  Nothing in the library
 * prints and exits; functions return 0 / -1 and fill a `struct d0_err` whose
 * message names the file (and tensor) and what was expected.
 *
 * Pieces, one file each:
 *   util.c         errors, paths, small-file IO, atomic output directories
 *   dtype.c        safetensors dtypes, f32 <-> bf16/f16 conversion (RNE)
 *   safetensors.c  strict header parser and a streaming writer
 *   model.c        config.json families and the expected tensor table
 *   checkpoint.c   a Hugging Face checkpoint directory: index, shards, SUMS
 *   hash.c         SHA-256 of files (OpenSSL EVP), parallel over files
 *   layout.c       TP/PP/EP sharding rules and layout.json
 *   events.c       the --events JSON-lines emitter (ARCHITECTURE.md protocol)
 */
#ifndef DAY0_ENGINE_H
#define DAY0_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#define DAY0_VERSION "0.1.0"
#define DAY0_PROTO_VERSION 1

/* Exit statuses shared by every program. */
enum { EXIT_OK = 0, EXIT_CHECK_FAILED = 1, EXIT_USAGE = 2 };

/* ---------------------------------------------------------------- errors */

struct d0_err {
	char msg[1024];
};

/* Format a message into err (if non-NULL); always returns -1. */
int d0_errf(struct d0_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ steps */

struct step_entry {
	const char *name;
	const char *usage;   /* one line of arguments, after the name */
	const char *summary; /* one line: what it does */
	int (*run)(int argc, char **argv); /* returns an exit status */
};

extern const struct step_entry *const step_table[];
const struct step_entry *step_find(const char *name);
/* Print "usage: day0-engine NAME USAGE" to f. */
void step_usage(const struct step_entry *s, FILE *f);
/* Report a usage error for step s and return EXIT_USAGE. */
int step_usage_error(const struct step_entry *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parse a size such as 4096, 64K, 256M, 2G (binary multiples). */
int parse_size(const char *s, uint64_t *out);
/* Parse a non-negative integer in [min,max]. */
int parse_long(const char *s, long min, long max, long *out);

/* "1.5 GiB" style; buf must hold 32 bytes. */
const char *fmt_bytes(uint64_t n, char *buf);
/* Monotonic seconds, for progress and throughput. */
double now_s(void);

/* ------------------------------------------------------------------ paths */

/* Join dir and name into a malloc'd string. */
char *path_join(const char *dir, const char *name);
/* Read a whole small file (limit bytes at most) into a NUL-terminated buffer. */
int file_read_all(const char *path, size_t limit, char **out, size_t *len,
		  struct d0_err *err);
/* True if path names a directory. */
int path_is_dir(const char *path);
int path_exists(const char *path);
/* A shard name from an index must be a plain file name in the model dir. */
int shard_name_ok(const char *name);

/*
 * Output directories are built under "<dir>.partial-<pid>" and renamed into
 * place only when complete, so a crash or a failure never leaves a
 * half-written checkpoint where a finished one is expected.
 */
struct outdir {
	char *final;   /* requested path */
	char *partial; /* where files are written meanwhile */
};
int outdir_begin(struct outdir *o, const char *path, int force,
		 struct d0_err *err);
int outdir_commit(struct outdir *o, struct d0_err *err);
void outdir_abort(struct outdir *o); /* removes the partial dir */

/* pread/pwrite that loop over short transfers. */
int pread_full(int fd, void *buf, size_t n, uint64_t off);
int pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
int write_full(int fd, const void *buf, size_t n);

/*
 * Write a JSON document to path: indent 2, trailing newline; keys sorted
 * (as Python's json.dumps(sort_keys=True) does for HF files) or in
 * insertion order.
 */
int json_write_file(json_t *doc, const char *path, int sort_keys,
		    struct d0_err *err);

/* ----------------------------------------------------------------- dtypes */

enum dtype {
	DT_BOOL, DT_U8, DT_I8, DT_F8_E5M2, DT_F8_E4M3, DT_I16, DT_U16, DT_F16,
	DT_BF16, DT_I32, DT_U32, DT_F32, DT_F64, DT_I64, DT_U64,
	DT_COUNT,
	DT_INVALID = -1
};

enum dtype dtype_from_name(const char *name); /* "F32" -> DT_F32 */
const char *dtype_name(enum dtype d);          /* DT_F32 -> "F32" */
size_t dtype_size(enum dtype d);
/* Lower-case user-facing names: f32, bf16, f16 (DT_INVALID otherwise). */
enum dtype dtype_from_user(const char *name);
const char *dtype_user_name(enum dtype d);
const char *dtype_torch_name(enum dtype d); /* "float32", "bfloat16", ... */

uint16_t f32_to_bf16(float f); /* round to nearest even, NaN kept NaN */
uint16_t f32_to_f16(float f);  /* round to nearest even, overflow to Inf */
float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);
/*
 * Convert n elements between float dtypes (F32, BF16, F16).  src and dst may
 * not overlap.  Returns -1 for an unsupported pair.
 */
int dtype_convert(enum dtype from, const void *src, enum dtype to, void *dst,
		  size_t n);

/* ------------------------------------------------------------ safetensors */

#define ST_MAX_HEADER 100000000ULL
#define ST_MAX_DIMS 8

struct st_tensor {
	char *name;
	enum dtype dtype;
	int ndim;
	uint64_t shape[ST_MAX_DIMS];
	uint64_t begin, end; /* byte offsets relative to the data buffer */
};

struct st_file {
	char *path;        /* as given (for messages) */
	uint64_t file_size;
	uint64_t header_len; /* N, the JSON header length */
	uint64_t data_off;   /* 8 + N */
	size_t ntensors;
	struct st_tensor *tensors; /* in header order */
	json_t *metadata;          /* __metadata__ object or NULL */
};

/*
 * Parse and strictly validate a safetensors header.  buf holds the first
 * len bytes of a file that is file_size bytes long (len >= 8 + N is needed
 * to succeed; pass the whole header).  Checks every rule the reference
 * parser enforces.  On failure err says what is wrong (and which tensor).
 */
int st_parse(const uint8_t *buf, size_t len, uint64_t file_size,
	     struct st_file *out, struct d0_err *err);
/* Open path, read its header and validate it.  Messages start with path. */
int st_open(const char *path, struct st_file *out, struct d0_err *err);
void st_free(struct st_file *f);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
uint64_t st_numel(const struct st_tensor *t);

/*
 * Streaming writer: declare every tensor first, then st_writer_begin()
 * writes the header, then tensor bytes go in with st_writer_put() at any
 * offset inside a declared tensor (pwrite, so any order works).
 */
struct st_writer;
struct st_writer *st_writer_new(void);
void st_writer_free(struct st_writer *w);
/* Shape is copied.  Tensors are laid out in declaration order. */
int st_writer_add(struct st_writer *w, const char *name, enum dtype dt,
		  int ndim, const uint64_t *shape);
void st_writer_meta(struct st_writer *w, const char *key, const char *value);
int st_writer_begin(struct st_writer *w, const char *path, struct d0_err *err);
/* Write n bytes at byte offset off inside tensor idx (declaration index). */
int st_writer_put(struct st_writer *w, size_t idx, uint64_t off,
		  const void *buf, size_t n, struct d0_err *err);
int st_writer_finish(struct st_writer *w, struct d0_err *err);
/*
 * SHA-256 of the finished file, available (return 0) when every write came
 * in file order, so writers that stream need not read their output back.
 */
int st_writer_sha256(const struct st_writer *w, char hex[65]);
/* Skip that hashing (call before st_writer_begin). */
void st_writer_no_hash(struct st_writer *w);
uint64_t st_writer_total(const struct st_writer *w); /* file size */

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

/* Where a tensor's parameters are counted (inspect's breakdown). */
enum tensor_group {
	GROUP_EMBED, GROUP_ATTN, GROUP_DENSE_MLP, GROUP_EXPERTS, GROUP_SHARED,
	GROUP_ROUTER, GROUP_NORM, GROUP_LM_HEAD, GROUP_COUNT
};

struct tensor_spec {
	char name[160];
	int ndim;
	uint64_t shape[2];
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
	char quant[16]; /* quantization_config.quant_method, "" if none */
};

/* Families gen-model can write and verify/convert understand. */
int model_arch_known(const char *model_type);
/* "llama, mistral, ..." for messages and --help. */
const char *model_arch_list(void);
/* Parse config.json; messages name path and key. */
int model_config_load(const char *path, struct model_config *cfg,
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

/* Parameter counts from the tensor table (inspect). */
struct param_count {
	uint64_t total, active;          /* main model, MTP layers excluded */
	uint64_t group[GROUP_COUNT];     /* total per group */
	uint64_t group_active[GROUP_COUNT];
	uint64_t mtp;                    /* multi-token-prediction layers */
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
void op_attention(float *out, const float *q, const float *k, const float *v,
		  int n_q, int n_kv, int64_t pos0, int nh, int nkv, int dqk,
		  int dv, double scale, int window);
void op_router_softmax_topk(const float *logits, int E, int k, int renorm,
			    int *idx, float *w);
void op_router_sigmoid_group_topk(const float *logits, const float *bias,
				  int E, int k, int n_group, int topk_group,
				  int renorm, double scaling, int *idx, float *w);

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
const char *rt_over_budget(const struct rt *r);
int rt_check_groups(struct rt *r, char *detail, size_t n);
/*
 * Run T tokens at the next positions (prefill or one decode step).
 * logits [T, vocab] is filled on the last stage's ranks; layer_out[l]
 * (if non-NULL) gets layer l's output [T, hidden] on the ranks holding l.
 */
int rt_forward(struct rt *r, const int64_t *tokens, int T, float *logits,
	       float **layer_out, struct d0_err *err);
int rt_last_stage_root(const struct rt *r);
int rt_stage_root(const struct rt *r, int stage);
int rt_is_stage_root(const struct rt *r);
int rt_first_layer(const struct rt *r, int *count);
int rt_rank(const struct rt *r);
const struct model_config *rt_config(const struct rt *r);
uint64_t rt_mem_used(const struct rt *r);
uint64_t rt_mem_peak(const struct rt *r);
const struct rt_stats *rt_stats(const struct rt *r);
/* Start a new sequence: forget the KV cache (the weights stay). */
void rt_reset(struct rt *r);
void rt_close(struct rt *r);

/*
 * The float64 reference (ref.c): one process, the whole Hugging Face
 * checkpoint, transformers' semantics written out plainly.  Returns the
 * logits [T, vocab] and, if layers is non-NULL, every layer's output
 * [layers][T][hidden] (malloc'd).
 */
int ref_forward(const char *dir, const int64_t *tokens, int T, double **logits,
		double **layers, struct model_config *cfg, struct d0_err *err);

/* ------------------------------------------------------------- checkpoint */

struct ckpt_shard {
	char *name; /* file name inside the dir */
	char *path;
	struct st_file st; /* parsed header (valid only if parsed == 1) */
	int parsed;
	char *expected_sha; /* from SHA256SUMS, or NULL */
	char sha[65];       /* computed */
};

struct ckpt {
	char *dir;
	int has_index;
	json_t *index;       /* model.safetensors.index.json or NULL */
	size_t nshards;
	struct ckpt_shard *shards;
};

/* Shard list from the index (or model.safetensors), without opening shards. */
int ckpt_open(const char *dir, struct ckpt *c, struct d0_err *err);
void ckpt_close(struct ckpt *c);
/* Parse a sha256sum-format file into a JSON object name -> hex. */
int sums_load(const char *path, json_t **out, struct d0_err *err);

/* ------------------------------------------------------------------- hash */

/* SHA-256 of a file, read in bounded chunks; hex written to out[65]. */
int sha256_file(const char *path, char out[65], uint64_t *bytes_done,
		struct d0_err *err);

struct hash_job {
	const char *path;
	char hex[65];
	int rc;
	struct d0_err err;
	uint64_t size;
};
/*
 * Hash jobs with up to `threads` threads.  *progress (if non-NULL) is
 * updated atomically with the bytes hashed so far; tick() is called from
 * the calling thread about every 200 ms while work is in flight.
 */
void hash_files(struct hash_job *jobs, size_t n, int threads,
		uint64_t *progress, void (*tick)(void *), void *arg);

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

/* -------------------------------------------------------------- inventory */

/* docs/inventory.md.  Link bandwidths in Gbit/s (0: not stated). */
struct inv_node {
	char name[64], host[256], user[64], identity[256], transport[8];
	char labels[256]; /* comma-separated */
	int port, cards;
	uint64_t card_mem;
	double intra_gbps, inter_gbps;
};
struct inventory {
	char name[128];
	struct inv_node *nodes;
	size_t n;
};
int inventory_load(const char *path, struct inventory *inv,
		   struct d0_err *err);
void inventory_free(struct inventory *inv);
/* "n[01-03],x" -> n01 n02 n03 x (malloc'd array of malloc'd strings). */
int nodeset_expand(const char *set, char ***names, size_t *n,
		   struct d0_err *err);

/* ----------------------------------------------------------------- events */

/*
 * The one emitter every step uses for --events: JSON lines with the
 * envelope of ARCHITECTURE.md (v, seq, ts, node, type).  Disabled emitters
 * drop everything, so steps call these unconditionally.  Thread-safe.
 */
void events_init(FILE *out, int enabled);
int events_enabled(void);
/* Emit obj (stolen) after adding the envelope. */
void events_emit(const char *type, json_t *obj);
void events_stage(const char *stage, const char *state, double progress,
		  int rc, const char *msg);
void events_check(const char *item, const char *status, const char *detail,
		  json_t *value, json_t *threshold);
void events_log(const char *level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------- rng */

/* Deterministic generator (splitmix64 seeding xoshiro256**). */
struct rng {
	uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
double rng_uniform(struct rng *r); /* [0,1) */
uint64_t hash_str64(const char *s); /* FNV-1a, to seed per tensor */

#endif
