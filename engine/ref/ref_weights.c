/*
 * ref_weights.c - the checkpoint read a block of rows at a time for the
 * float64 reference (ref_weights.h says why).  The stored bytes of a block
 * are pread into one buffer and decoded into another, both freed when the
 * product is done: the reference never holds a whole lm_head, embedding
 * or expert, only w->mem bytes of one of them.  The decoding is the
 * reference's own (FP8 from the OCP definition, packed ints by hand), not
 * the runtime's.
 */
#include "engine.h"
#include "ref_weights.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ref_w_open(struct ref_w *w, const char *dir, const struct quant_config *q,
	       size_t mem, struct d0_err *err)
{
	memset(w, 0, sizeof *w);
	w->q = q;
	w->mem = mem ? mem : REF_MEM_DEFAULT;
	if (ckpt_open(dir, &w->ck, err) < 0)
		return -1;
	w->fd = malloc((w->ck.nshards + 1) * sizeof *w->fd);
	for (size_t k = 0; k < w->ck.nshards; k++)
		w->fd[k] = -1;
	for (size_t k = 0; k < w->ck.nshards; k++) {
		if (st_open(w->ck.shards[k].path, &w->ck.shards[k].st, err) < 0) {
			ref_w_close(w);
			return -1;
		}
		w->ck.shards[k].parsed = 1;
		w->fd[k] = open(w->ck.shards[k].path, O_RDONLY | O_CLOEXEC);
		if (w->fd[k] < 0) {
			d0_errf(err, "%s: cannot open", w->ck.shards[k].path);
			ref_w_close(w);
			return -1;
		}
	}
	return 0;
}

void ref_w_close(struct ref_w *w)
{
	for (size_t k = 0; w->fd && k < w->ck.nshards; k++)
		if (w->fd[k] >= 0)
			close(w->fd[k]);
	free(w->fd);
	w->fd = NULL;
	free(w->scratch);
	w->scratch = NULL;
	w->scratch_n = 0;
	ckpt_close(&w->ck);
}

static const struct st_tensor *find(struct ref_w *w, const char *name,
				    int *shard)
{
	if (w->prefix && w->prefix[0]) {
		char pn[256];
		const struct st_tensor *t;
		snprintf(pn, sizeof pn, "%s%s", w->prefix, name);
		for (size_t k = 0; k < w->ck.nshards; k++)
			if ((t = st_find(&w->ck.shards[k].st, pn))) {
				*shard = (int)k;
				return t;
			}
	}
	for (size_t k = 0; k < w->ck.nshards; k++) {
		const struct st_tensor *t = st_find(&w->ck.shards[k].st, name);
		if (t) {
			*shard = (int)k;
			return t;
		}
	}
	return NULL;
}

static int plain_dtype(enum dtype d)
{
	return d == DT_F32 || d == DT_BF16 || d == DT_F16;
}

static double scalar(const unsigned char *b, enum dtype dt, uint64_t i)
{
	float f;
	uint16_t h;
	if (dt == DT_F32) {
		memcpy(&f, b + 4 * i, 4);
		return f;
	}
	memcpy(&h, b + 2 * i, 2);
	return dt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

/* The scale tensor of m: 2-D, a plain dtype, at least rows x cols. */
static int find_scale(struct ref_w *w, struct ref_mat *m, const char *suffix,
		      uint64_t rows, uint64_t cols, struct d0_err *err)
{
	char sn[240];
	snprintf(sn, sizeof sn, "%s%s", m->name, suffix);
	m->scale = find(w, sn, &m->scale_shard);
	if (!m->scale)
		return d0_errf(err, "%s: no tensor '%s' (the scales of '%s')",
			       w->ck.dir, sn, m->name);
	if (m->scale->ndim != 2 || !plain_dtype(m->scale->dtype) ||
	    m->scale->shape[0] < rows || m->scale->shape[1] < cols)
		return d0_errf(err, "%s: tensor '%s': expected a float scale "
			       "tensor of at least [%llu, %llu]", w->ck.dir, sn,
			       (unsigned long long)rows, (unsigned long long)cols);
	return 0;
}

int ref_mat_find(struct ref_w *w, const char *name, struct ref_mat *m,
		 struct d0_err *err)
{
	memset(m, 0, sizeof *m);
	snprintf(m->name, sizeof m->name, "%s", name);
	m->t = find(w, name, &m->shard);
	if (!m->t && w->q->kind == QUANT_PACKED_INT) {
		char pn[240];
		uint64_t g;
		snprintf(pn, sizeof pn, "%s_packed", name);
		if (!(m->t = find(w, pn, &m->shard)))
			return 0;
		if (m->t->ndim != 2 || dtype_size(m->t->dtype) != 4 ||
		    (w->q->bits != 4 && w->q->bits != 8))
			return d0_errf(err, "%s: tensor '%s': expected 32-bit "
				       "words [rows, cols / %d] of %d-bit values",
				       w->ck.dir, pn, w->q->bits ? 32 / w->q->bits : 0,
				       w->q->bits);
		m->kind = RM_PACKED;
		m->per = 32 / (uint64_t)w->q->bits;
		m->rows = m->t->shape[0];
		m->cols = m->t->shape[1] * m->per;
		g = w->q->group ? (uint64_t)w->q->group : m->cols;
		return find_scale(w, m, "_scale", m->rows, ceil_div(m->cols, g),
				  err) < 0 ? -1 : 1;
	}
	if (!m->t)
		return 0;
	if (m->t->ndim != 2)
		return d0_errf(err, "%s: tensor '%s': expected a matrix, has %d "
			       "dimensions", w->ck.dir, name, m->t->ndim);
	m->rows = m->t->shape[0];
	m->cols = m->t->shape[1];
	if (plain_dtype(m->t->dtype)) {
		m->kind = RM_PLAIN;
		return 1;
	}
	if (m->t->dtype == DT_F8_E4M3 || m->t->dtype == DT_F8_E5M2) {
		if (w->q->block[0] <= 0 || w->q->block[1] <= 0)
			return d0_errf(err, "%s: tensor '%s' is FP8 but config.json "
				       "has no weight_block_size", w->ck.dir, name);
		m->kind = RM_FP8;
		return find_scale(w, m, "_scale_inv", ceil_div(m->rows,
				  (uint64_t)w->q->block[0]), ceil_div(m->cols,
				  (uint64_t)w->q->block[1]), err) < 0 ? -1 : 1;
	}
	return d0_errf(err, "%s: tensor '%s': dtype %s is not one the float64 "
		       "reference decodes", w->ck.dir, name,
		       dtype_name(m->t->dtype));
}

/* Scale rows a block of n rows from r0 spans (FP8: whole row blocks). */
static uint64_t scale_rows(const struct ref_w *w, const struct ref_mat *m,
			   uint64_t r0, uint64_t n)
{
	uint64_t b = (uint64_t)w->q->block[0];
	if (m->kind == RM_PACKED)
		return n;
	return (r0 + n - 1) / b - r0 / b + 1;
}

static size_t value_bytes(const struct ref_mat *m, uint64_t n)
{
	if (m->kind == RM_PACKED)
		return (size_t)(n * m->t->shape[1] * 4);
	return (size_t)(n * m->cols * dtype_size(m->t->dtype));
}

size_t ref_mat_raw_bytes(const struct ref_mat *m, uint64_t n)
{
	size_t v = value_bytes(m, n);
	if (m->kind == RM_PLAIN)
		return v;
	/* any n rows span at most n + 1 FP8 scale rows */
	return v + (size_t)((n + 1) * m->scale->shape[1] *
			    dtype_size(m->scale->dtype));
}

uint64_t ref_mat_block_rows(const struct ref_w *w, const struct ref_mat *m,
			    size_t extra)
{
	uint64_t per_row = m->cols * 8 + ref_mat_raw_bytes(m, 1) + extra, n;
	n = w->mem / per_row;
	if (n < 1)
		n = 1;
	return n < m->rows ? n : m->rows;
}

static int read_at(struct ref_w *w, int shard, const struct st_tensor *t,
		   uint64_t off, size_t n, void *buf, struct d0_err *err)
{
	const struct st_file *f = &w->ck.shards[shard].st;
	if (pread_full(w->fd[shard], buf, n, f->data_off + t->begin + off) < 0)
		return d0_errf(err, "%s: cannot read tensor '%s'", f->path,
			       t->name);
	return 0;
}

int ref_mat_rows(struct ref_w *w, const struct ref_mat *m, uint64_t r0,
		 uint64_t n, double *out, unsigned char *raw,
		 struct d0_err *err)
{
	size_t vb = value_bytes(m, n);
	unsigned char *sc = raw + vb;
	uint64_t C = m->cols;
	if (r0 + n > m->rows)
		return d0_errf(err, "%s: tensor '%s': rows %llu..%llu of %llu",
			       w->ck.dir, m->name, (unsigned long long)r0,
			       (unsigned long long)(r0 + n),
			       (unsigned long long)m->rows);
	if (read_at(w, m->shard, m->t, r0 * (vb / n), vb, raw, err) < 0)
		return -1;
	if (m->kind == RM_PLAIN) {
		for (uint64_t i = 0; i < n * C; i++)
			out[i] = scalar(raw, m->t->dtype, i);
		return 0;
	}
	{ /* the scale rows this block uses */
		uint64_t s0 = m->kind == RM_FP8 ? r0 / (uint64_t)w->q->block[0] : r0;
		size_t row = (size_t)(m->scale->shape[1] * dtype_size(m->scale->dtype));
		if (read_at(w, m->scale_shard, m->scale, s0 * row,
			    (size_t)scale_rows(w, m, r0, n) * row, sc, err) < 0)
			return -1;
	}
	if (m->kind == RM_FP8) {
		/* W = fp8(q) * scale_inv[i / block_rows][j / block_cols] */
		uint64_t b0 = (uint64_t)w->q->block[0], b1 = (uint64_t)w->q->block[1];
		uint64_t sc_cols = m->scale->shape[1];
		double lut[256];
		for (unsigned c = 0; c < 256; c++)
			lut[c] = ref_fp8_value(m->t->dtype == DT_F8_E5M2, c);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t srow = ((r0 + i) / b0 - r0 / b0) * sc_cols;
			for (uint64_t j = 0; j < C; j++)
				out[i * C + j] = lut[raw[i * C + j]] *
						 scalar(sc, m->scale->dtype,
							srow + j / b1);
		}
		return 0;
	}
	{ /* W = (value - 2^(bits-1)) * scale[i][j / group], little-endian words */
		int bits = w->q->bits;
		uint64_t per = m->per, words = m->t->shape[1];
		uint64_t g = w->q->group ? (uint64_t)w->q->group : C;
		uint64_t sc_cols = m->scale->shape[1];
		for (uint64_t i = 0; i < n; i++)
			for (uint64_t j = 0; j < C; j++) {
				const unsigned char *p = raw + 4 * (i * words + j / per);
				uint32_t word = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
						(uint32_t)p[2] << 16 |
						(uint32_t)p[3] << 24;
				long v = (long)((word >> (bits * (j % per))) &
						((1u << bits) - 1)) -
					 (1L << (bits - 1));
				out[i * C + j] = (double)v *
						 scalar(sc, m->scale->dtype,
							i * sc_cols + j / g);
			}
	}
	return 0;
}

/*
 * Rows [0, nb) of W (double, [nb][k]) times every x[t]: each sum in index
 * order from the bias, so blocks do not change a bit of the result.  Four
 * tokens share a pass over a row (four independent chains, each in order).
 */
static void block_products(const double *W, int nb, int k, const double *x,
			   int T, const double *bias, double *sq, int sq_ld,
			   double *y, int ld)
{
	for (int r = 0; r < nb; r++) {
		const double *wr = W + (size_t)r * k;
		double b = bias ? bias[r] : 0;
		int t = 0;
		for (; t + 4 <= T; t += 4) {
			const double *x0 = x + (size_t)t * k, *x1 = x0 + k;
			const double *x2 = x1 + k, *x3 = x2 + k;
			double s0 = b, s1 = b, s2 = b, s3 = b;
			for (int j = 0; j < k; j++) {
				s0 += wr[j] * x0[j];
				s1 += wr[j] * x1[j];
				s2 += wr[j] * x2[j];
				s3 += wr[j] * x3[j];
			}
			y[(size_t)t * ld + r] = s0;
			y[(size_t)(t + 1) * ld + r] = s1;
			y[(size_t)(t + 2) * ld + r] = s2;
			y[(size_t)(t + 3) * ld + r] = s3;
		}
		for (; t < T; t++) {
			const double *xt = x + (size_t)t * k;
			double s = b;
			for (int j = 0; j < k; j++)
				s += wr[j] * xt[j];
			y[(size_t)t * ld + r] = s;
		}
		for (t = 0; sq && t < T; t++) {
			const double *xt = x + (size_t)t * k;
			double s = 0;
			for (int j = 0; j < k; j++) {
				double p = wr[j] * xt[j];
				s += p * p;
			}
			sq[(size_t)t * sq_ld + r] = s;
		}
	}
}

static int linear(struct ref_w *w, const char *name, const double *x, int T,
		  int n, int k, const double *bias, double *sq, double *y,
		  ref_block_fn fn, void *ctx, struct d0_err *err)
{
	struct ref_mat m;
	int found = ref_mat_find(w, name, &m, err);
	uint64_t nb;
	size_t need;
	unsigned char *raw;
	double *W, *blk = NULL;
	int rc = 0;
	if (found < 0)
		return -1;
	if (!found)
		return d0_errf(err, "%s: no tensor '%s'", w->ck.dir, name);
	if (m.rows != (uint64_t)n || m.cols != (uint64_t)k)
		return d0_errf(err, "%s: tensor '%s' is [%llu, %llu], the config "
			       "implies [%d, %d]", w->ck.dir, name,
			       (unsigned long long)m.rows,
			       (unsigned long long)m.cols, n, k);
	nb = ref_mat_block_rows(w, &m, y ? 0 : (size_t)T * 12);
	need = (size_t)nb * m.cols * 8 + ref_mat_raw_bytes(&m, nb);
	if (need > w->scratch_n) { /* one buffer for every block: no heap
				    * fragments beside the chunk */
		free(w->scratch);
		w->scratch = malloc(need);
		w->scratch_n = w->scratch ? need : 0;
	}
	if (!y)
		blk = malloc((size_t)T * nb * 8 + 8);
	if (!w->scratch || (!y && !blk)) {
		rc = d0_errf(err, "%s: out of memory for a block of %llu rows of "
			     "'%s'", w->ck.dir, (unsigned long long)nb, name);
		goto out;
	}
	W = (double *)w->scratch;
	raw = w->scratch + (size_t)nb * m.cols * 8;
	if (need > w->held)
		w->held = need;
	for (uint64_t r0 = 0; r0 < m.rows && rc == 0; r0 += nb) {
		int cnt = (int)(m.rows - r0 < nb ? m.rows - r0 : nb);
		if ((rc = ref_mat_rows(w, &m, r0, (uint64_t)cnt, W, raw, err)) < 0)
			break;
		if (y) {
			block_products(W, cnt, k, x, T, bias ? bias + r0 : NULL,
				       sq ? sq + r0 : NULL, n, y + r0, n);
		} else {
			block_products(W, cnt, k, x, T, bias ? bias + r0 : NULL,
				       NULL, 0, blk, cnt);
			rc = fn(ctx, (int)r0, cnt, blk, err);
		}
	}
out:
	free(blk);
	return rc;
}

int ref_w_linear(struct ref_w *w, const char *name, double *y, const double *x,
		 int T, int n, int k, const double *bias, double *sq,
		 struct d0_err *err)
{
	return linear(w, name, x, T, n, k, bias, sq, y, NULL, NULL, err);
}

int ref_w_linear_blocks(struct ref_w *w, const char *name, const double *x,
			int T, int n, int k, ref_block_fn fn, void *ctx,
			struct d0_err *err)
{
	return linear(w, name, x, T, n, k, NULL, NULL, NULL, fn, ctx, err);
}

double *ref_w_vector(struct ref_w *w, const char *name, uint64_t n,
		     int *absent, struct d0_err *err)
{
	int shard;
	const struct st_tensor *t = find(w, name, &shard);
	unsigned char *b;
	double *d;
	*absent = !t;
	if (!t)
		return NULL;
	if (st_numel(t) != n || !plain_dtype(t->dtype)) {
		d0_errf(err, "%s: tensor '%s': expected %llu f32/bf16/f16 "
			"values, has %llu of %s", w->ck.dir, name,
			(unsigned long long)n, (unsigned long long)st_numel(t),
			dtype_name(t->dtype));
		return NULL;
	}
	b = malloc((size_t)n * dtype_size(t->dtype) + 8);
	d = malloc((size_t)n * 8 + 8);
	if (read_at(w, shard, t, 0, (size_t)n * dtype_size(t->dtype), b, err) < 0) {
		free(b);
		free(d);
		return NULL;
	}
	for (uint64_t i = 0; i < n; i++)
		d[i] = scalar(b, t->dtype, i);
	free(b);
	return d;
}
