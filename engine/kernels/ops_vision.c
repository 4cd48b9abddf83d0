/*
 * ops_vision.c - the image channel's kernels (ops_vision.h): LayerNorm, the
 * towers' activations, the Qwen vision blocks' 2D rotary and MoonViT's
 * (interleaved pairs), torch's bicubic interpolation of MoonViT's learned
 * positions, the LM's M-RoPE and bidirectional attention within segments
 * (frames or windows).
 *
 * As in ops.c, angles, cos/sin and norm statistics are computed in double
 * and rounded once: they are few, and a float angle at large positions
 * alone costs ~1e-4 relative.  Attention runs one head of one segment at a
 * time as two OpenBLAS sgemm calls over strided views of q, k and v.
 */
#include "ops_vision.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void op_layer_norm(float *y, const float *x, const float *w, const float *b,
		   int n, double eps)
{
	double mu = 0, var = 0;
	float r, m;
	for (int i = 0; i < n; i++)
		mu += x[i];
	mu /= n;
	for (int i = 0; i < n; i++)
		var += (x[i] - mu) * (x[i] - mu);
	r = (float)(1.0 / sqrt(var / n + eps));
	m = (float)mu;
	for (int i = 0; i < n; i++)
		y[i] = (x[i] - m) * r * w[i] + (b ? b[i] : 0.0f);
}

enum act_kind { ACT_GELU, ACT_QUICK_GELU, ACT_GELU_TANH, ACT_SILU, ACT_NONE };

static enum act_kind act_of(const char *name)
{
	if (!strcmp(name, "gelu"))
		return ACT_GELU;
	if (!strcmp(name, "quick_gelu"))
		return ACT_QUICK_GELU;
	if (!strcmp(name, "gelu_pytorch_tanh") || !strcmp(name, "gelu_new"))
		return ACT_GELU_TANH;
	if (!strcmp(name, "silu"))
		return ACT_SILU;
	return ACT_NONE;
}

int op_act_known(const char *name)
{
	return act_of(name) != ACT_NONE;
}

int op_act(const char *name, float *x, int64_t n)
{
	enum act_kind k = act_of(name);
	if (k == ACT_NONE)
		return -1;
	for (int64_t i = 0; i < n; i++) {
		float v = x[i];
		switch (k) {
		case ACT_GELU:
			x[i] = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
			break;
		case ACT_QUICK_GELU:
			x[i] = v / (1.0f + expf(-1.702f * v));
			break;
		case ACT_GELU_TANH:
			x[i] = 0.5f * v *
			       (1.0f + tanhf(0.7978845608028654f *
					     (v + 0.044715f * v * v * v)));
			break;
		case ACT_SILU:
			x[i] = v / (1.0f + expf(-v));
			break;
		case ACT_NONE:
			break;
		}
	}
	return 0;
}

/* rotate_half on x [heads][hd]: slot i (of hd/2) turned by angle a[i] */
static void rotate(float *x, int heads, int hd, const double *a, double af)
{
	int half = hd / 2;
	for (int i = 0; i < half; i++) {
		float cs = (float)(cos(a[i]) * af),
		      sn = (float)(sin(a[i]) * af);
		for (int h = 0; h < heads; h++) {
			float *v = x + (size_t)h * hd;
			float x1 = v[i], x2 = v[i + half];
			v[i] = x1 * cs - x2 * sn;
			v[i + half] = x2 * cs + x1 * sn;
		}
	}
}

void op_rope_2d(float *x, int heads, int hd, int64_t row, int64_t col,
		const double *inv)
{
	double a[512];
	int q = hd / 4;
	for (int j = 0; j < q && j < 256; j++) {
		a[j] = (double)row * inv[j];
		a[q + j] = (double)col * inv[j];
	}
	rotate(x, heads, hd, a, 1.0);
}

void op_rope_2d_pairs(float *x, int heads, int hd, int64_t row, int64_t col,
		      const double *inv)
{
	int q = hd / 4;
	for (int i = 0; i < q; i++)
		for (int ax = 0; ax < 2; ax++) {
			/* pair 2i: the column, pair 2i+1: the row */
			double a = (double)(ax ? row : col) * inv[i];
			float cs = (float)cos(a), sn = (float)sin(a);
			int e = 2 * (2 * i + ax);
			for (int h = 0; h < heads; h++) {
				float *v = x + (size_t)h * hd + e;
				float re = v[0], im = v[1];
				v[0] = re * cs - im * sn;
				v[1] = re * sn + im * cs;
			}
		}
}

/* torch's cubic convolution weights (A = -0.75) at fraction t, and the
 * source pixel i0 - 1 of the four taps, for output index o of n out of
 * in (align_corners=False: src = (o + 0.5) in / n - 0.5, not clamped). */
static void cubic_taps(int o, int in, int n, double w[4], int *i0)
{
	const double A = -0.75;
	double src = ((double)o + 0.5) * (double)in / (double)n - 0.5;
	double f = floor(src), t = src - f, u;
	*i0 = (int)f - 1;
	u = t + 1; /* |x| in (1, 2) */
	w[0] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
	w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
	u = 1 - t;
	w[2] = ((A + 2) * u - (A + 3)) * u * u + 1;
	u = 2 - t;
	w[3] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
}

static int clampi(int i, int n)
{
	return i < 0 ? 0 : i >= n ? n - 1 : i;
}

void op_interp_bicubic(float *out, const float *in, int ih, int iw, int d,
		       int oh, int ow)
{
	double *acc = malloc((size_t)d * sizeof *acc + 8);
	for (int y = 0; y < oh; y++) {
		double wy[4], wx[4];
		int y0, x0;
		cubic_taps(y, ih, oh, wy, &y0);
		for (int x = 0; x < ow; x++) {
			cubic_taps(x, iw, ow, wx, &x0);
			memset(acc, 0, (size_t)d * sizeof *acc);
			for (int a = 0; a < 4; a++)
				for (int b = 0; b < 4; b++) {
					const float *src =
					    in + ((size_t)clampi(y0 + a, ih) * iw +
						  (size_t)clampi(x0 + b, iw)) * d;
					double wt = wy[a] * wx[b];
					for (int c = 0; c < d; c++)
						acc[c] += wt * src[c];
				}
			for (int c = 0; c < d; c++)
				out[((size_t)y * ow + x) * d + c] = (float)acc[c];
		}
	}
	free(acc);
}

void op_mrope(float *x, int n_heads, int head_dim, int rot_dim,
	      const int64_t pos[3], const int64_t section[3],
	      const double *inv_freq, double attn_factor)
{
	int half = rot_dim / 2;
	for (int i = 0; i < half; i++) {
		int ax = i < section[0]		       ? 0
			 : i < section[0] + section[1] ? 1
						       : 2;
		double a = (double)pos[ax] * inv_freq[i];
		float cs = (float)(cos(a) * attn_factor);
		float sn = (float)(sin(a) * attn_factor);
		for (int h = 0; h < n_heads; h++) {
			float *v = x + (size_t)h * head_dim;
			float x1 = v[i], x2 = v[i + half];
			v[i] = x1 * cs - x2 * sn;
			v[i + half] = x2 * cs + x1 * sn;
		}
	}
}

void op_attention_segments(float *out, int64_t out_ld, const float *q,
			   const float *k, const float *v, int64_t ld,
			   int heads, int hd, const int64_t *bounds, int nb,
			   float *scratch)
{
	float scale = (float)(1.0 / sqrt((double)hd));
	for (int s = 1; s < nb; s++) {
		int64_t s0 = bounds[s - 1], n = bounds[s] - s0;
		if (n <= 0)
			continue;
		for (int h = 0; h < heads; h++) {
			const float *qh = q + s0 * ld + (int64_t)h * hd;
			const float *kh = k + s0 * ld + (int64_t)h * hd;
			const float *vh = v + s0 * ld + (int64_t)h * hd;
			/* S = scale q k^T, [n][n] */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    (int)n, (int)n, hd, scale, qh, (int)ld, kh,
				    (int)ld, 0.0f, scratch, (int)n);
			for (int64_t i = 0; i < n; i++) {
				float *row = scratch + i * n, mx = row[0];
				double sum = 0;
				for (int64_t j = 1; j < n; j++)
					if (row[j] > mx)
						mx = row[j];
				for (int64_t j = 0; j < n; j++)
					sum += row[j] = expf(row[j] - mx);
				for (int64_t j = 0; j < n; j++)
					row[j] = (float)(row[j] / sum);
			}
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    (int)n, hd, (int)n, 1.0f, scratch, (int)n,
				    vh, (int)ld, 0.0f,
				    out + s0 * out_ld + (int64_t)h * hd,
				    (int)out_ld);
		}
	}
}

int op_image_splice(float *h, int H, const int64_t *tokens, int T,
		    int64_t image_token, const float *embeds)
{
	int used = 0;
	for (int t = 0; embeds && t < T; t++)
		if (tokens[t] == image_token)
			memcpy(h + (size_t)t * H, embeds + (size_t)used++ * H,
			       (size_t)H * sizeof *h);
	return used;
}
