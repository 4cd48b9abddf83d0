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
 * vector units (the vertical pass runs along whole rows) and still give
 * PIL's bytes exactly.
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

/* Rows y0..y0+nrows-1 of src (width sw) into dst (width dw). */
static void pass_h(const uint8_t *src, int sw, int y0, int nrows,
		   uint8_t *dst, int dw, int ksize, const int *bounds,
		   const int32_t *kk)
{
	for (int yy = 0; yy < nrows; yy++) {
		const uint8_t *s = src + (size_t)(y0 + yy) * sw * 3;
		uint8_t *d = dst + (size_t)yy * dw * 3;
		for (int xx = 0; xx < dw; xx++) {
			const int32_t *k = kk + (size_t)xx * ksize;
			const uint8_t *p = s + (size_t)bounds[2 * xx] * 3;
			int n = bounds[2 * xx + 1];
			int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
			for (int x = 0; x < n; x++, p += 3) {
				s0 += p[0] * k[x];
				s1 += p[1] * k[x];
				s2 += p[2] * k[x];
			}
			d[3 * xx] = clip8(s0);
			d[3 * xx + 1] = clip8(s1);
			d[3 * xx + 2] = clip8(s2);
		}
	}
}

/* Whole rows at a time: every byte of an output row has the same taps, so
 * the sums run along the row (and vectorise). */
static void pass_v(const uint8_t *src, int w, uint8_t *dst, int dh,
		   int ksize, const int *bounds, const int32_t *kk,
		   int32_t *acc)
{
	size_t rowlen = (size_t)w * 3;
	for (int yy = 0; yy < dh; yy++) {
		const int32_t *k = kk + (size_t)yy * ksize;
		int ymin = bounds[2 * yy], n = bounds[2 * yy + 1];
		uint8_t *d = dst + (size_t)yy * rowlen;
		for (size_t i = 0; i < rowlen; i++)
			acc[i] = 1 << (PRECISION_BITS - 1);
		for (int y = 0; y < n; y++) {
			const uint8_t *r = src + (size_t)(ymin + y) * rowlen;
			int32_t ky = k[y];
			for (size_t i = 0; i < rowlen; i++)
				acc[i] += r[i] * ky;
		}
		for (size_t i = 0; i < rowlen; i++)
			d[i] = clip8(acc[i]);
	}
}

int image_resize(const struct image_rgb *in, int w, int h, int filter,
		 struct image_rgb *out, struct d0_err *err)
{
	const struct filter *fp;
	int *bh = NULL, *bv = NULL, kh = 0, kv;
	int32_t *kkh = NULL, *kkv = NULL, *acc = NULL;
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
		pass_h(in->px, in->w, ybox_first, ybox_last - ybox_first, tmp,
		       w, kh, bh, kkh);
		src = tmp;
		sw = w;
	}
	if (need_v) {
		dst = malloc((size_t)sw * h * 3);
		acc = malloc((size_t)sw * 3 * sizeof *acc);
		if (!dst || !acc)
			goto oom;
		pass_v(src, sw, dst, h, kv, bv, kkv, acc);
		free(tmp);
	} else {
		/* Only the horizontal pass: its rows are the whole image. */
		dst = tmp;
	}
	free(acc);
	free(bh);
	free(kkh);
	free(bv);
	free(kkv);
	out->w = w;
	out->h = h;
	out->px = dst;
	return 0;
oom:
	free(acc);
	free(dst);
	free(tmp);
	free(bh);
	free(kkh);
	free(bv);
	free(kkv);
	return d0_errf(err, "resize %dx%d to %dx%d: out of memory", in->w,
		       in->h, w, h);
}
