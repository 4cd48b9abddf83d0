/*
 * ref_weights.h - the float64 reference's view of a checkpoint: matrices
 * read from the safetensors shards a block of rows at a time and turned
 * into double per block, so the reference holds at most `mem` bytes of
 * weights (the stored bytes of a block plus its float64 copy) whatever the
 * vocabulary, the expert width or the number of experts a batch hits.
 *
 * The products are plain float64 dot products in index order (y[i] = b[i]
 * + sum_j W[i][j] x[j], j ascending): a row's sum never crosses a block,
 * so the result is bit for bit the one of the whole matrix in memory.
 */
#ifndef DAY0_REF_WEIGHTS_H
#define DAY0_REF_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"
#include "weights.h"

#define REF_MEM_DEFAULT ((size_t)256 << 20) /* validate --mem */
#define REF_MEM_MIN ((size_t)4 << 10)  /* a block is at least a row */

struct ref_w {
	struct ckpt ck;
	int *fd; /* per shard, opened with the checkpoint */
	const struct quant_config *q;
	size_t mem;  /* bytes one block may hold (stored + float64) */
	size_t held; /* the largest block held so far, in bytes */
	unsigned char *scratch; /* the block: float64 rows, then stored bytes */
	size_t scratch_n;
	/* the LM's tensor names sit under this (LLaVA's "language_model."):
	 * a name is looked up with it first, then as given */
	const char *prefix;
};

/* A 2-D weight as stored: plain, FP8 with block scales, or packed int. */
struct ref_mat {
	char name[200];
	enum { RM_PLAIN, RM_FP8, RM_PACKED } kind;
	const struct st_tensor *t, *scale; /* values; FP8 / packed scales */
	int shard, scale_shard;
	uint64_t rows, cols; /* logical */
	uint64_t per;        /* packed: values per 32-bit word */
};

/* Open dir's shards (headers parsed, one descriptor each). */
int ref_w_open(struct ref_w *w, const char *dir, const struct quant_config *q,
	       size_t mem, struct d0_err *err);
void ref_w_close(struct ref_w *w);

/*
 * Find matrix `name` (for packed checkpoints also name_packed and
 * name_scale).  1 found, 0 absent, -1 malformed (err names it).
 */
int ref_mat_find(struct ref_w *w, const char *name, struct ref_mat *m,
		 struct d0_err *err);
/* Rows [r0, r0+n) as double [n][cols]; raw holds ref_mat_raw_bytes(m, n). */
int ref_mat_rows(struct ref_w *w, const struct ref_mat *m, uint64_t r0,
		 uint64_t n, double *out, unsigned char *raw,
		 struct d0_err *err);
size_t ref_mat_raw_bytes(const struct ref_mat *m, uint64_t n);
/* How many rows a block of at most w->mem bytes holds (at least 1), each
 * row costing `extra` bytes beside its stored and float64 copies. */
uint64_t ref_mat_block_rows(const struct ref_w *w, const struct ref_mat *m,
			    size_t extra);

/*
 * y[t][i] = bias[i] + sum_j W[i][j] x[t][j] for t < T, W = matrix `name`
 * of shape [n][k] read by row blocks.  sq (optional) gets
 * sum_j (W[i][j] x[t][j])^2, the router's rounding spread.
 */
int ref_w_linear(struct ref_w *w, const char *name, double *y, const double *x,
		 int T, int n, int k, const double *bias, double *sq,
		 struct d0_err *err);
/*
 * The same with a callback per block instead of y: blk [T][nb] holds the
 * products of rows [r0, r0+nb).  fn returning -1 stops (err set).  The
 * block counts blk and a float copy of it (T x 12 bytes a row) against
 * w->mem too, so a long prompt makes blocks shorter, not memory larger.
 */
typedef int (*ref_block_fn)(void *ctx, int r0, int nb, const double *blk,
			    struct d0_err *err);
int ref_w_linear_blocks(struct ref_w *w, const char *name, const double *x,
			int T, int n, int k, ref_block_fn fn, void *ctx,
			struct d0_err *err);

/* A 1-D tensor of n elements as double (malloc'd); NULL with *absent = 1
 * if the checkpoint has none, NULL with err set if malformed. */
double *ref_w_vector(struct ref_w *w, const char *name, uint64_t n,
		     int *absent, struct d0_err *err);

#endif
