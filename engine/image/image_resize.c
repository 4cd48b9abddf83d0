/*
 * image_resize.c - PIL's Image.resize for 8-bit RGB, byte for byte.
 *
 * Pillow's libImaging/Resample.c is a separable convolution: for every
 * output column (then row) a window of input pixels centred on
 * (x + 0.5) * scale, weighted by the filter evaluated at the distance
 * divided by max(scale, 1) - so a downscale widens the filter and
 * antialiases.  Weights are computed in double, normalised to sum 1, then
 * turned into 22-bit fixed point (rounded half away from zero); each pass
 * sums pixel * weight in 32-bit integers from 1 << 21 (the rounding half)
 * and clips the top bits to 0..255.  The horizontal pass runs first, over
 * only the rows the vertical pass will read, and is rounded to 8 bits
 * before the vertical pass sees it.
 *
 * Integer sums are associative, so the loops below may be ordered for the
 * vector units and still give PIL's bytes exactly: with AVX2 the vertical
 * pass sums whole rows 32 bytes at a time, the horizontal one eight rows
 * at a time (a gather per tap), in int32 lanes.
 */
#include "image.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

struct filter {
	double (*f)(double x);
	double support;
	const char *name;
};

static double box_f(double x)
{
	return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
}

static double bilinear_f(double x)
{
	x = fabs(x);
	return x < 1.0 ? 1.0 - x : 0.0;
}

static double hamming_f(double x)
{
	x = fabs(x);
	if (x == 0.0)
		return 1.0;
	if (x >= 1.0)
		return 0.0;
	x *= M_PI;
	return sin(x) / x * (0.54f + 0.46f * cos(x));
}

/* Keys' cubic convolution with a = -0.5 (PIL's choice). */
static double bicubic_f(double x)
{
	const double a = -0.5;
	x = fabs(x);
	if (x < 1.0)
		return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
	if (x < 2.0)
		return (((x - 5) * x + 8) * x - 4) * a;
	return 0.0;
}

static double sinc_f(double x)
{
	if (x == 0.0)
		return 1.0;
	x *= M_PI;
	return sin(x) / x;
}

static double lanczos_f(double x)
{
	return -3.0 <= x && x < 3.0 ? sinc_f(x) * sinc_f(x / 3) : 0.0;
}

static const struct filter filters[] = {
	[IMAGE_LANCZOS] = {lanczos_f, 3.0, "LANCZOS"},
	[IMAGE_BILINEAR] = {bilinear_f, 1.0, "BILINEAR"},
	[IMAGE_BICUBIC] = {bicubic_f, 2.0, "BICUBIC"},
	[IMAGE_BOX] = {box_f, 0.5, "BOX"},
	[IMAGE_HAMMING] = {hamming_f, 1.0, "HAMMING"},
};

const char *image_filter_name(int filter)
{
	if (filter == IMAGE_NEAREST)
		return "NEAREST";
	if (filter < 0 || filter > IMAGE_HAMMING)
		return NULL;
	return filters[filter].name;
}

/* One axis: for each output index, the first input index, the count, and
 * ksize fixed-point weights.  Returns ksize, or 0 on overflow / memory. */
static int coeffs(int in_size, int out_size, const struct filter *fp,
		  int **boundsp, int32_t **kkp)
{
	/* PIL passes the box as floats: (0, 0, w, h). */
	float in0 = 0.0f, in1 = (float)in_size;
	double scale = (double)(in1 - in0) / out_size, fscale = scale;
	double support, *pre;
	int ksize, *bounds;
	int32_t *kk;

	if (fscale < 1.0)
		fscale = 1.0;
	support = fp->support * fscale;
	ksize = (int)ceil(support) * 2 + 1;
	if (out_size > INT_MAX / (ksize * (int)sizeof(double)))
		return 0;
	pre = malloc((size_t)ksize * sizeof *pre);
	kk = malloc((size_t)out_size * ksize * sizeof *kk);
	bounds = malloc((size_t)out_size * 2 * sizeof *bounds);
	if (!pre || !kk || !bounds) {
		free(pre);
		free(kk);
		free(bounds);
		return 0;
	}
	for (int xx = 0; xx < out_size; xx++) {
		double center = in0 + (xx + 0.5) * scale, ww = 0.0;
		double ss = 1.0 / fscale;
		int xmin = (int)(center - support + 0.5);
		int xmax = (int)(center + support + 0.5);
		int x;
		int32_t *k = kk + (size_t)xx * ksize;
		if (xmin < 0)
			xmin = 0;
		if (xmax > in_size)
			xmax = in_size;
		xmax -= xmin;
		for (x = 0; x < xmax; x++) {
			double w = fp->f((x + xmin - center + 0.5) * ss);
			pre[x] = w;
			ww += w;
		}
		for (x = 0; x < xmax; x++) {
			double v = ww != 0.0 ? pre[x] / ww : pre[x];
			k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
				     : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
		}
		for (; x < ksize; x++)
			k[x] = 0;
		bounds[2 * xx] = xmin;
		bounds[2 * xx + 1] = xmax;
	}
	free(pre);
	*boundsp = bounds;
	*kkp = kk;
	return ksize;
}

static inline uint8_t clip8(int32_t v)
{
	v >>= PRECISION_BITS;
	return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/*
 * The one loop both passes run: dst[i] = clip8(1/2 + sum_y src[y*stride + i]
 * * k[y]) for i < len, y < n - n rows of bytes weighted alike.  With AVX2,
 * 32 bytes at a time in eight-lane int32 sums (exact, so the order is
 * free); the packs saturate exactly as clip8 clips.
 */
static inline __attribute__((always_inline)) size_t
rows_mac_tail(const uint8_t *src, size_t stride, int n, const int32_t *k,
	      size_t i0, size_t len, uint8_t *dst)
{
	int32_t acc[64];
	while (i0 < len) {
		size_t m = len - i0 < 64 ? len - i0 : 64;
		for (size_t i = 0; i < m; i++)
			acc[i] = 1 << (PRECISION_BITS - 1);
		for (int y = 0; y < n; y++) {
			const uint8_t *r = src + (size_t)y * stride + i0;
			for (size_t i = 0; i < m; i++)
				acc[i] += r[i] * k[y];
		}
		for (size_t i = 0; i < m; i++)
			dst[i0 + i] = clip8(acc[i]);
		i0 += m;
	}
	return i0;
}

static void rows_mac_portable(const uint8_t *src, size_t stride, int n,
			      const int32_t *k, size_t len, uint8_t *dst)
{
	rows_mac_tail(src, stride, n, k, 0, len, dst);
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static void
rows_mac_avx2(const uint8_t *src, size_t stride, int n, const int32_t *k,
	      size_t len, uint8_t *dst)
{
	const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	size_t i = 0;
	for (; i + 32 <= len; i += 32) {
		__m256i a0 = half, a1 = half, a2 = half, a3 = half;
		for (int y = 0; y < n; y++) {
			__m256i kv = _mm256_set1_epi32(k[y]);
			__m256i b = _mm256_loadu_si256(
				(const __m256i *)(src + (size_t)y * stride + i));
			__m128i lo = _mm256_castsi256_si128(b);
			__m128i hi = _mm256_extracti128_si256(b, 1);
			a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(
				_mm256_cvtepu8_epi32(lo), kv));
			a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(
				_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), kv));
			a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(
				_mm256_cvtepu8_epi32(hi), kv));
			a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(
				_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)), kv));
		}
		a0 = _mm256_srai_epi32(a0, PRECISION_BITS);
		a1 = _mm256_srai_epi32(a1, PRECISION_BITS);
		a2 = _mm256_srai_epi32(a2, PRECISION_BITS);
		a3 = _mm256_srai_epi32(a3, PRECISION_BITS);
		/* the packs work per 128-bit lane: put the 4-byte groups
		 * back in order */
		_mm256_storeu_si256((__m256i *)(dst + i),
				    _mm256_permutevar8x32_epi32(
					    _mm256_packus_epi16(
						    _mm256_packs_epi32(a0, a1),
						    _mm256_packs_epi32(a2, a3)),
					    order));
	}
	rows_mac_tail(src, stride, n, k, i, len, dst);
}
#endif

typedef void rows_mac_fn(const uint8_t *src, size_t stride, int n,
			 const int32_t *k, size_t len, uint8_t *dst);

/* AVX2 where the CPU has it, unless DAY0_KERNEL=portable (as for the
 * math kernels) asks for the plain loop. */
static rows_mac_fn *rows_mac_pick(void)
{
	const char *k = getenv("DAY0_KERNEL");
	if (k && !strcmp(k, "portable"))
		return rows_mac_portable;
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		return rows_mac_avx2;
#endif
	return rows_mac_portable;
}

/* One output pixel of the horizontal pass, PIL's loop as written. */
static inline void h_pixel(const uint8_t *row, int xx, int ksize,
			   const int *bounds, const int32_t *kk, uint8_t *d)
{
	const int32_t *k = kk + (size_t)xx * ksize;
	const uint8_t *p = row + (size_t)bounds[2 * xx] * 3;
	int n = bounds[2 * xx + 1];
	int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
	for (int x = 0; x < n; x++, p += 3) {
		s0 += p[0] * k[x];
		s1 += p[1] * k[x];
		s2 += p[2] * k[x];
	}
	d[0] = clip8(s0);
	d[1] = clip8(s1);
	d[2] = clip8(s2);
}

static void h_rows_portable(const uint8_t *src, int sw, int y0, int y1,
			    uint8_t *dst, int dw, int ksize, const int *bounds,
			    const int32_t *kk)
{
	for (int y = y0; y < y1; y++)
		for (int xx = 0; xx < dw; xx++)
			h_pixel(src + (size_t)y * sw * 3, xx, ksize, bounds, kk,
				dst + ((size_t)(y - y0) * dw + xx) * 3);
}

#if defined(__x86_64__)
/*
 * Eight rows at a time: for each tap one gather loads the pixel (as 4
 * bytes, RGB + the next byte) from the eight rows, and the three channels
 * are summed in eight int32 lanes each.  The fourth byte of the very last
 * pixel of the image is past the buffer: a window that reaches it in the
 * block holding the image's last row is done by the scalar loop.
 */
__attribute__((target("avx2"))) static void
h_rows_avx2(const uint8_t *src, int sw, int sh, int y0, int y1, uint8_t *dst,
	    int dw, int ksize, const int *bounds, const int32_t *kk)
{
	const int stride = sw * 3;
	const __m256i idx = _mm256_mullo_epi32(
		_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
		_mm256_set1_epi32(stride));
	const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
	const __m256i m255 = _mm256_set1_epi32(255), zero = _mm256_setzero_si256();
	int y = y0;
	for (; y + 8 <= y1; y += 8) {
		const uint8_t *base = src + (size_t)y * stride;
		int last = y + 8 == sh;
		for (int xx = 0; xx < dw; xx++) {
			int xmin = bounds[2 * xx], n = bounds[2 * xx + 1];
			const int32_t *k = kk + (size_t)xx * ksize;
			const uint8_t *p = base + (size_t)xmin * 3;
			uint8_t *d = dst + ((size_t)(y - y0) * dw + xx) * 3;
			int32_t out[3][8];
			__m256i r = half, g = half, b = half;
			if (last && xmin + n == sw) {
				for (int i = 0; i < 8; i++)
					h_pixel(base + (size_t)i * stride, xx,
						ksize, bounds, kk,
						d + (size_t)i * dw * 3);
				continue;
			}
			for (int t = 0; t < n; t++, p += 3) {
				__m256i v = _mm256_i32gather_epi32((const int *)p,
								   idx, 1);
				__m256i kv = _mm256_set1_epi32(k[t]);
				r = _mm256_add_epi32(r, _mm256_mullo_epi32(
					_mm256_and_si256(v, m255), kv));
				g = _mm256_add_epi32(g, _mm256_mullo_epi32(
					_mm256_and_si256(_mm256_srli_epi32(v, 8), m255), kv));
				b = _mm256_add_epi32(b, _mm256_mullo_epi32(
					_mm256_and_si256(_mm256_srli_epi32(v, 16), m255), kv));
			}
			/* clip8: >> 22, then into 0..255 */
			r = _mm256_min_epi32(_mm256_max_epi32(
				_mm256_srai_epi32(r, PRECISION_BITS), zero), m255);
			g = _mm256_min_epi32(_mm256_max_epi32(
				_mm256_srai_epi32(g, PRECISION_BITS), zero), m255);
			b = _mm256_min_epi32(_mm256_max_epi32(
				_mm256_srai_epi32(b, PRECISION_BITS), zero), m255);
			_mm256_storeu_si256((__m256i *)out[0], r);
			_mm256_storeu_si256((__m256i *)out[1], g);
			_mm256_storeu_si256((__m256i *)out[2], b);
			for (int i = 0; i < 8; i++, d += (size_t)dw * 3) {
				d[0] = (uint8_t)out[0][i];
				d[1] = (uint8_t)out[1][i];
				d[2] = (uint8_t)out[2][i];
			}
		}
	}
	h_rows_portable(src, sw, y, y1, dst + (size_t)(y - y0) * dw * 3, dw,
			ksize, bounds, kk);
}
#endif

/* Horizontal pass over rows y0..y1-1 of src (sw x sh) into dst (width
 * dw). */
static void pass_h(const uint8_t *src, int sw, int sh, int y0, int y1,
		   uint8_t *dst, int dw, int ksize, const int *bounds,
		   const int32_t *kk)
{
#if defined(__x86_64__)
	/* the gather's offsets are int32: eight rows must fit */
	if (rows_mac_pick() == rows_mac_avx2 && (int64_t)sw * 3 * 8 < INT32_MAX) {
		h_rows_avx2(src, sw, sh, y0, y1, dst, dw, ksize, bounds, kk);
		return;
	}
#endif
	h_rows_portable(src, sw, y0, y1, dst, dw, ksize, bounds, kk);
}

/* Whole rows at a time: every byte of an output row has the same taps. */
static void pass_v(const uint8_t *src, int w, uint8_t *dst, int dh,
		   int ksize, const int *bounds, const int32_t *kk)
{
	size_t rowlen = (size_t)w * 3;
	rows_mac_fn *mac = rows_mac_pick();
	for (int yy = 0; yy < dh; yy++)
		mac(src + (size_t)bounds[2 * yy] * rowlen, rowlen,
		    bounds[2 * yy + 1], kk + (size_t)yy * ksize, rowlen,
		    dst + (size_t)yy * rowlen);
}

int image_resize(const struct image_rgb *in, int w, int h, int filter,
		 struct image_rgb *out, struct d0_err *err)
{
	const struct filter *fp;
	int *bh = NULL, *bv = NULL, kh = 0, kv;
	int32_t *kkh = NULL, *kkv = NULL;
	uint8_t *tmp = NULL, *dst = NULL;
	const uint8_t *src = in->px;
	int sw = in->w, need_h = w != in->w, need_v = h != in->h;
	int ybox_first, ybox_last;

	*out = *in;
	out->px = NULL;
	if (w <= 0 || h <= 0)
		return d0_errf(err, "resize to %dx%d: sizes must be positive",
			       w, h);
	if (filter <= IMAGE_NEAREST || filter > IMAGE_HAMMING)
		return d0_errf(err, "resample %d (%s) is not implemented; day0 "
			       "has PIL's LANCZOS (1), BILINEAR (2), BICUBIC "
			       "(3), BOX (4), HAMMING (5)", filter,
			       image_filter_name(filter) ? image_filter_name(filter)
						       : "unknown");
	fp = &filters[filter];
	if (!need_h && !need_v) {
		size_t n = (size_t)w * h * 3;
		out->px = malloc(n);
		if (!out->px)
			return d0_errf(err, "resize: out of memory");
		memcpy(out->px, in->px, n);
		return 0;
	}
	kv = coeffs(in->h, h, fp, &bv, &kkv);
	if (!kv)
		return d0_errf(err, "resize to %dx%d: out of memory", w, h);
	ybox_first = bv[0];
	ybox_last = bv[2 * h - 2] + bv[2 * h - 1];
	if (need_h) {
		kh = coeffs(in->w, w, fp, &bh, &kkh);
		if (!kh)
			goto oom;
		for (int i = 0; i < h; i++)
			bv[2 * i] -= ybox_first;
		tmp = malloc((size_t)w * (ybox_last - ybox_first) * 3);
		if (!tmp)
			goto oom;
		pass_h(in->px, in->w, in->h, ybox_first, ybox_last, tmp, w, kh,
		       bh, kkh);
		src = tmp;
		sw = w;
	}
	if (need_v) {
		dst = malloc((size_t)sw * h * 3);
		if (!dst)
			goto oom;
		pass_v(src, sw, dst, h, kv, bv, kkv);
		free(tmp);
	} else {
		/* Only the horizontal pass: its rows are the whole image. */
		dst = tmp;
	}
	free(bh);
	free(kkh);
	free(bv);
	free(kkv);
	out->w = w;
	out->h = h;
	out->px = dst;
	return 0;
oom:
	free(dst);
	free(tmp);
	free(bh);
	free(kkh);
	free(bv);
	free(kkv);
	return d0_errf(err, "resize %dx%d to %dx%d: out of memory", in->w,
		       in->h, w, h);
}
