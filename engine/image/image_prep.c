/*
 * image_prep.c - transformers' slow image processors in C: what
 * Qwen2VLImageProcessor and CLIPImageProcessor do between an RGB image and
 * the pixel values a vision tower takes.
 *
 *   Qwen2-VL  smart_resize (multiples of patch * merge, pixels within
 *             [min_pixels, max_pixels]) -> PIL resize -> x * rescale
 *             (float64, then float32) -> (x - mean) / std in float32 ->
 *             the still image repeated over the temporal pair -> patches
 *             in merge-window order: row (t, h/M, w/M, h%M, w%M), column
 *             (channel, temporal, py, px).
 *   Kimi-VL   past in_token_limit patches, shrink by sqrt(limit/patches)
 *             (PIL BICUBIC) -> pad with zeros to multiples of merge *
 *             patch -> x / 255 in float32 (torchvision's to_tensor) ->
 *             normalize -> patches in raster order, (channel, py, px).
 *   CLIP      shortest edge to size (the long edge int(size*long/short))
 *             or a fixed (height, width) -> PIL resize -> center crop
 *             (zero padding where the crop is larger) -> rescale ->
 *             normalize -> [3][H][W].
 *
 * Rescale and normalize depend only on a byte and its channel, so they are
 * a 3 x 256 table computed with exactly numpy's operations and dtypes;
 * patchifying is then a gather from that table.
 */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

/* transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD, every processor's
 * default here. */
static const double clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
static const double clip_std[3] = {0.26862954, 0.26130258, 0.27577711};

/* ---------------------------------------------------------------- config */

static int get_bool(json_t *doc, const char *key, int def, int *out,
		    const char *path, struct d0_err *err)
{
	json_t *v = json_object_get(doc, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return d0_errf(err, "%s: %s: expected true or false", path, key);
	*out = json_is_true(v);
	return 0;
}

static int get_int(json_t *doc, const char *key, int64_t def, int64_t min,
		   int64_t max, int64_t *out, const char *path,
		   struct d0_err *err)
{
	json_t *v = json_object_get(doc, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min ||
	    json_integer_value(v) > max)
		return d0_errf(err, "%s: %s: expected an integer in [%lld, %lld]",
			       path, key, (long long)min, (long long)max);
	*out = json_integer_value(v);
	return 0;
}

/* image_mean / image_std: a list of 3 numbers or one number for all. */
static int get_triple(json_t *doc, const char *key, const double def[3],
		      double out[3], const char *path, struct d0_err *err)
{
	json_t *v = json_object_get(doc, key);
	if (!v || json_is_null(v)) {
		memcpy(out, def, 3 * sizeof *out);
		return 0;
	}
	if (json_is_number(v)) {
		out[0] = out[1] = out[2] = json_number_value(v);
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) != 3)
		return d0_errf(err, "%s: %s: expected 3 numbers (one per RGB "
			       "channel)", path, key);
	for (int i = 0; i < 3; i++) {
		json_t *e = json_array_get(v, (size_t)i);
		if (!json_is_number(e) || !isfinite(json_number_value(e)))
			return d0_errf(err, "%s: %s[%d]: expected a number",
				       path, key, i);
		out[i] = json_number_value(e);
	}
	return 0;
}

/* {"height": H, "width": W} or one integer for both. */
static int get_hw(json_t *v, const char *key, int *h, int *w,
		  const char *path, struct d0_err *err)
{
	json_t *jh = json_object_get(v, "height"), *jw = json_object_get(v, "width");
	if (json_is_integer(v)) {
		*h = *w = (int)json_integer_value(v);
	} else if (json_is_integer(jh) && json_is_integer(jw)) {
		*h = (int)json_integer_value(jh);
		*w = (int)json_integer_value(jw);
	} else {
		return d0_errf(err, "%s: %s: expected {\"height\": H, \"width\": "
			       "W}", path, key);
	}
	if (*h < 1 || *w < 1 || *h > 65536 || *w > 65536)
		return d0_errf(err, "%s: %s: sizes must be in [1, 65536]", path,
			       key);
	return 0;
}

static int load_qwen(json_t *doc, struct image_prep_config *c,
		     const char *path, struct d0_err *err)
{
	int64_t v;
	json_t *size = json_object_get(doc, "size");
	if (get_int(doc, "patch_size", 14, 1, 1024, &v, path, err) < 0)
		return -1;
	c->patch_size = (int)v;
	if (get_int(doc, "temporal_patch_size", 2, 1, 64, &v, path, err) < 0)
		return -1;
	c->temporal_patch_size = (int)v;
	if (get_int(doc, "merge_size", 2, 1, 64, &v, path, err) < 0)
		return -1;
	c->merge_size = (int)v;
	/* Current transformers: size {shortest_edge, longest_edge} (pixel
	 * counts, despite the names), overridden by min_pixels/max_pixels
	 * where those are given (the older configs' keys). */
	c->min_pixels = 56 * 56;
	c->max_pixels = 28 * 28 * 1280;
	if (size && !json_is_null(size)) {
		json_t *se = json_object_get(size, "shortest_edge");
		json_t *le = json_object_get(size, "longest_edge");
		if (!json_is_integer(se) || !json_is_integer(le))
			return d0_errf(err, "%s: size: expected {\"shortest_edge\": "
				       "MIN_PIXELS, \"longest_edge\": MAX_PIXELS}",
				       path);
		c->min_pixels = json_integer_value(se);
		c->max_pixels = json_integer_value(le);
	}
	if (get_int(doc, "min_pixels", c->min_pixels, 1, INT64_C(1) << 40, &v,
		    path, err) < 0)
		return -1;
	c->min_pixels = v;
	if (get_int(doc, "max_pixels", c->max_pixels, 1, INT64_C(1) << 40, &v,
		    path, err) < 0)
		return -1;
	c->max_pixels = v;
	if (c->min_pixels < 1 || c->max_pixels < c->min_pixels)
		return d0_errf(err, "%s: min_pixels %lld / max_pixels %lld: "
			       "expected 1 <= min_pixels <= max_pixels", path,
			       (long long)c->min_pixels,
			       (long long)c->max_pixels);
	return 0;
}

/* KimiVLImageProcessor's __init__ keys (its defaults where absent). */
static int load_kimi(json_t *doc, struct image_prep_config *c,
		     const char *path, struct d0_err *err)
{
	int64_t v;
	json_t *mk = json_object_get(doc, "merge_kernel_size");
	if (get_int(doc, "patch_size", 14, 1, 1024, &v, path, err) < 0)
		return -1;
	c->patch_size = (int)v;
	c->temporal_patch_size = 1;
	if (get_int(doc, "in_token_limit", 4096, 1, INT64_C(1) << 30,
		    &c->in_token_limit, path, err) < 0 ||
	    get_bool(doc, "pad_input", 0, &c->pad_input, path, err) < 0)
		return -1;
	c->merge_size = 2;
	if (mk && !json_is_null(mk)) {
		json_t *a = json_array_get(mk, 0), *b = json_array_get(mk, 1);
		if (!json_is_array(mk) || json_array_size(mk) != 2 ||
		    !json_is_integer(a) || !json_is_integer(b) ||
		    json_integer_value(a) != json_integer_value(b) ||
		    json_integer_value(a) < 1 || json_integer_value(a) > 64)
			return d0_errf(err, "%s: merge_kernel_size: expected "
				       "[M, M] with M in [1, 64]", path);
		c->merge_size = (int)json_integer_value(a);
	}
	if (!c->pad_input)
		return d0_errf(err, "%s: pad_input false (the processor's "
			       "center crop) is not implemented; Kimi-VL's "
			       "releases pad (pad_input true)", path);
	/* fixed in the processor, whatever the file says */
	c->do_resize = c->do_rescale = c->do_normalize = 1;
	c->resample = IMAGE_BICUBIC;
	c->rescale_factor = 1.0 / 255;
	return 0;
}

static int load_clip(json_t *doc, struct image_prep_config *c, int siglip,
		     const char *path, struct d0_err *err)
{
	json_t *size = json_object_get(doc, "size");
	json_t *crop = json_object_get(doc, "crop_size");
	json_t *se = json_object_get(size, "shortest_edge");
	c->shortest_edge = 224;
	if (siglip) {
		c->shortest_edge = 0;
		c->size_h = c->size_w = 224;
	}
	if (size && !json_is_null(size)) {
		if (json_is_integer(se)) {
			c->shortest_edge = (int)json_integer_value(se);
			if (c->shortest_edge < 1 || c->shortest_edge > 65536)
				return d0_errf(err, "%s: size.shortest_edge: "
					       "expected an integer in [1, "
					       "65536]", path);
		} else {
			c->shortest_edge = 0;
			if (get_hw(size, "size", &c->size_h, &c->size_w, path,
				   err) < 0)
				return -1;
		}
	}
	if (get_bool(doc, "do_center_crop", !siglip, &c->do_center_crop, path,
		     err) < 0)
		return -1;
	c->crop_h = c->crop_w = 224;
	if (crop && !json_is_null(crop) &&
	    get_hw(crop, "crop_size", &c->crop_h, &c->crop_w, path, err) < 0)
		return -1;
	return 0;
}

json_t *image_json_load(const char *path, struct d0_err *err)
{
	json_error_t je;
	struct stat st;
	json_t *doc;
	FILE *f = fopen(path, "rb");
	if (!f) {
		d0_errf(err, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
		d0_errf(err, "%s: not a regular file (expected a JSON file)",
			path);
		fclose(f);
		return NULL;
	}
	doc = json_loadf(f, 0, &je);
	fclose(f);
	if (!doc)
		d0_errf(err, "%s: invalid JSON: %s (line %d, column %d)", path,
			je.text, je.line, je.column);
	return doc;
}

int image_prep_config_load(const char *path, struct image_prep_config *c,
			   struct d0_err *err)
{
	json_t *doc = image_json_load(path, err), *t;
	const char *type;
	int64_t v;
	int rc = -1, siglip = 0;

	memset(c, 0, sizeof *c);
	if (!doc)
		return -1;
	if (!json_is_object(doc)) {
		d0_errf(err, "%s: expected a JSON object", path);
		goto out;
	}
	t = json_object_get(doc, "image_processor_type");
	if (!t) {
		d0_errf(err, "%s: image_processor_type is missing: day0 needs "
			"it to know the processor (Qwen2VLImageProcessor, "
			"CLIPImageProcessor, SiglipImageProcessor, "
			"KimiVLImageProcessor)", path);
		goto out;
	}
	if (!json_is_string(t)) {
		d0_errf(err, "%s: image_processor_type: expected a string (the "
			"processor's class name, e.g. \"Qwen2VLImageProcessor\")",
			path);
		goto out;
	}
	type = json_string_value(t);
	snprintf(c->type_name, sizeof c->type_name, "%s", type);
	/* The Fast variants name the same preprocessing (done by torchvision
	 * instead of PIL); day0 follows the PIL one. */
	if (!strncmp(type, "Qwen2VLImageProcessor", 21) ||
	    !strncmp(type, "Qwen2_5_VLImageProcessor", 24)) {
		c->kind = IMAGE_PROC_QWEN2VL;
	} else if (!strncmp(type, "CLIPImageProcessor", 18)) {
		c->kind = IMAGE_PROC_CLIP;
	} else if (!strncmp(type, "SiglipImageProcessor", 20)) {
		c->kind = IMAGE_PROC_CLIP;
		siglip = 1;
	} else if (!strcmp(type, "KimiVLImageProcessor")) {
		c->kind = IMAGE_PROC_KIMI;
	} else {
		d0_errf(err, "%s: image_processor_type \"%s\" is not one day0 "
			"implements (Qwen2VLImageProcessor, CLIPImageProcessor, "
			"SiglipImageProcessor, KimiVLImageProcessor)", path,
			type);
		goto out;
	}
	if (get_bool(doc, "do_resize", 1, &c->do_resize, path, err) < 0 ||
	    get_bool(doc, "do_rescale", 1, &c->do_rescale, path, err) < 0 ||
	    get_bool(doc, "do_normalize", 1, &c->do_normalize, path, err) < 0 ||
	    get_bool(doc, "do_convert_rgb", 1, &c->do_convert_rgb, path, err) < 0)
		goto out;
	if (get_int(doc, "resample", siglip ? IMAGE_BILINEAR : IMAGE_BICUBIC,
		    0, 5, &v, path, err) < 0)
		goto out;
	c->resample = (int)v;
	if (c->do_resize && c->resample == IMAGE_NEAREST) {
		d0_errf(err, "%s: resample: 0 (NEAREST) is not implemented; "
			"day0 has 1-5 (LANCZOS, BILINEAR, BICUBIC, BOX, "
			"HAMMING)", path);
		goto out;
	}
	t = json_object_get(doc, "rescale_factor");
	c->rescale_factor = 1.0 / 255;
	if (t && !json_is_null(t)) {
		if (!json_is_number(t) || !isfinite(json_number_value(t)) ||
		    json_number_value(t) <= 0) {
			d0_errf(err, "%s: rescale_factor: expected a positive "
				"number (1/255 = 0.00392156862745098)", path);
			goto out;
		}
		c->rescale_factor = json_number_value(t);
	}
	if (get_triple(doc, "image_mean", clip_mean, c->mean, path, err) < 0 ||
	    get_triple(doc, "image_std", clip_std, c->std, path, err) < 0)
		goto out;
	for (int i = 0; i < 3; i++)
		if (!(c->std[i] != 0) || !isfinite(c->std[i])) {
			d0_errf(err, "%s: image_std[%d]: expected a non-zero "
				"number", path, i);
			goto out;
		}
	if (c->kind == IMAGE_PROC_QWEN2VL ? load_qwen(doc, c, path, err)
	    : c->kind == IMAGE_PROC_KIMI  ? load_kimi(doc, c, path, err)
					  : load_clip(doc, c, siglip, path, err))
		goto out;
	rc = 0;
out:
	json_decref(doc);
	return rc;
}

/* ----------------------------------------------------------- the sizes */

int image_smart_resize(int height, int width, int factor, int64_t min_pixels,
		       int64_t max_pixels, int *out_h, int *out_w,
		       struct d0_err *err)
{
	double lo = height < width ? height : width;
	double hi = height < width ? width : height;
	double h_bar, w_bar, f = factor;
	if (height < 1 || width < 1 || factor < 1)
		return d0_errf(err, "smart_resize: %dx%d, factor %d: expected "
			       "positive sizes", width, height, factor);
	if (hi / lo > 200)
		return d0_errf(err, "aspect ratio %.1f is past 200, which "
			       "Qwen2-VL's smart_resize refuses (%dx%d)",
			       hi / lo, width, height);
	/* Python's round(): half to even, as rint in the default mode. */
	h_bar = rint(height / f) * f;
	w_bar = rint(width / f) * f;
	if (h_bar * w_bar > (double)max_pixels) {
		double beta = sqrt((double)((int64_t)height * width) /
				   (double)max_pixels);
		h_bar = fmax(f, floor(height / beta / f) * f);
		w_bar = fmax(f, floor(width / beta / f) * f);
	} else if (h_bar * w_bar < (double)min_pixels) {
		double beta = sqrt((double)min_pixels /
				   (double)((int64_t)height * width));
		h_bar = ceil(height * beta / f) * f;
		w_bar = ceil(width * beta / f) * f;
	}
	if (h_bar < 1 || w_bar < 1 || h_bar > 1e6 || w_bar > 1e6)
		return d0_errf(err, "smart_resize: %dx%d gives %.0fx%.0f", width,
			       height, w_bar, h_bar);
	*out_h = (int)h_bar;
	*out_w = (int)w_bar;
	return 0;
}

/* transformers' get_resize_output_image_size(size, default_to_square=
 * False): the short edge to size, the long one int(size * long / short). */
static void shortest_edge_size(int h, int w, int size, int *oh, int *ow)
{
	int shrt = w <= h ? w : h, lng = w <= h ? h : w;
	int nl = (int)((double)((int64_t)size * lng) / shrt);
	*oh = w <= h ? nl : size;
	*ow = w <= h ? size : nl;
}

/* transformers' center_crop on 8-bit RGB: a plain crop where the image is
 * larger, zeros around it where it is smaller. */
static int center_crop(const struct image_rgb *in, int ch, int cw,
		       struct image_rgb *out, struct d0_err *err)
{
	int sy = 0, dy = 0, ny = in->h, sx = 0, dx = 0, nx = in->w;
	*out = *in;
	out->px = calloc((size_t)ch * cw, 3);
	if (!out->px)
		return d0_errf(err, "center crop: out of memory");
	out->h = ch;
	out->w = cw;
	if (in->h >= ch) {
		sy = (in->h - ch) / 2;
		ny = ch;
	} else {
		dy = (ch - in->h + 1) / 2;
	}
	if (in->w >= cw) {
		sx = (in->w - cw) / 2;
		nx = cw;
	} else {
		dx = (cw - in->w + 1) / 2;
	}
	for (int y = 0; y < ny; y++)
		memcpy(out->px + ((size_t)(dy + y) * cw + dx) * 3,
		       in->px + ((size_t)(sy + y) * in->w + sx) * 3,
		       (size_t)nx * 3);
	return 0;
}

/* ------------------------------------------------------- the processor */

/* rescale then normalize for every byte value, in numpy's dtypes:
 * (float32)(v * rescale_factor as float64), then (x - float32(mean)) /
 * float32(std) in float32. */
static void value_table(const struct image_prep_config *c, float lut[3][256])
{
	for (int ch = 0; ch < 3; ch++) {
		float m = (float)c->mean[ch], s = (float)c->std[ch];
		for (int v = 0; v < 256; v++) {
			/* Kimi-VL: torchvision's to_tensor, a float32
			 * division by 255 */
			float x = c->kind == IMAGE_PROC_KIMI ? (float)v / 255.0f
				  : c->do_rescale ? (float)(v * c->rescale_factor)
						  : (float)v;
			if (c->do_normalize)
				x = (x - m) / s;
			lut[ch][v] = x;
		}
	}
}

void image_pixels_free(struct image_pixels *p)
{
	if (!p)
		return;
	free(p->values);
	image_free(&p->resized);
	memset(p, 0, sizeof *p);
}

static int qwen_pixels(const struct image_prep_config *c, float lut[3][256],
		       struct image_pixels *o, const char *name,
		       struct d0_err *err)
{
	const int P = c->patch_size, T = c->temporal_patch_size;
	const int M = c->merge_size, W = o->width;
	const uint8_t *img = o->resized.px;
	int gh = o->height / P, gw = o->width / P;
	float *dst;
	if (o->height % (P * M) || o->width % (P * M))
		return d0_errf(err, "%s: %dx%d is not a multiple of patch_size "
			       "%d x merge_size %d (do_resize is false?)", name,
			       o->width, o->height, P, M);
	o->grid_t = 1;
	o->grid_h = gh;
	o->grid_w = gw;
	o->rows = (int64_t)gh * gw;
	o->cols = (int64_t)3 * T * P * P;
	o->tokens = o->rows / (M * M);
	o->values = malloc((size_t)(o->rows * o->cols) * sizeof(float));
	if (!o->values)
		return d0_errf(err, "%s: out of memory for %lld x %lld pixel "
			       "values", name, (long long)o->rows,
			       (long long)o->cols);
	dst = o->values;
	for (int bh = 0; bh < gh / M; bh++)
		for (int bw = 0; bw < gw / M; bw++)
			for (int mh = 0; mh < M; mh++)
				for (int mw = 0; mw < M; mw++) {
					int y0 = (bh * M + mh) * P;
					int x0 = (bw * M + mw) * P;
					for (int ch = 0; ch < 3; ch++) {
						float *first = dst;
						for (int py = 0; py < P; py++) {
							const uint8_t *s =
								img + ((size_t)(y0 + py) * W + x0) * 3 + ch;
							for (int px = 0; px < P; px++)
								*dst++ = lut[ch][s[3 * px]];
						}
						/* the still image over the
						 * temporal pair */
						for (int t = 1; t < T; t++, dst += P * P)
							memcpy(dst, first,
							       (size_t)P * P * sizeof *dst);
					}
				}
	return 0;
}

/* KimiVLImageProcessor.patchify: [C, H/P, P, W/P, P] permuted to
 * (H/P, W/P, C, P, P): patches in raster order, each (channel, py, px). */
static int kimi_pixels(const struct image_prep_config *c, float lut[3][256],
		       struct image_pixels *o, const char *name,
		       struct d0_err *err)
{
	const int P = c->patch_size, W = o->width;
	const uint8_t *img = o->resized.px;
	int gh = o->height / P, gw = o->width / P;
	float *dst;
	o->grid_t = 1;
	o->grid_h = gh;
	o->grid_w = gw;
	o->rows = (int64_t)gh * gw;
	o->cols = (int64_t)3 * P * P;
	o->tokens = o->rows / (c->merge_size * c->merge_size);
	o->values = malloc((size_t)(o->rows * o->cols) * sizeof(float) + 4);
	if (!o->values)
		return d0_errf(err, "%s: out of memory for %lld x %lld pixel "
			       "values", name, (long long)o->rows,
			       (long long)o->cols);
	dst = o->values;
	for (int gy = 0; gy < gh; gy++)
		for (int gx = 0; gx < gw; gx++)
			for (int ch = 0; ch < 3; ch++)
				for (int py = 0; py < P; py++) {
					const uint8_t *s =
					    img + ((size_t)(gy * P + py) * W +
						   (size_t)gx * P) * 3 + ch;
					for (int px = 0; px < P; px++)
						*dst++ = lut[ch][s[3 * px]];
				}
	return 0;
}

/*
 * KimiVLImageProcessor.rescale's sizes: past in_token_limit patches the
 * image is shrunk by sqrt(limit / patches) (int() of each side, PIL
 * BICUBIC), then padded (zeros, bottom and right) to multiples of merge x
 * patch.  *rh x *rw the resize (the input size when none), *ph x *pw the
 * padded size.  A grid of 512 patches or more on a side is refused as the
 * processor does ("Exceed pos emb").
 */
static int kimi_sizes(const struct image_prep_config *c, int h, int w,
		      int *rh, int *rw, int *ph, int *pw, const char *name,
		      struct d0_err *err)
{
	int64_t P = c->patch_size, f = (int64_t)c->merge_size * P;
	int64_t patches = (int64_t)(w / P) * (h / P);
	*rh = h;
	*rw = w;
	if (patches > c->in_token_limit) {
		double scale = sqrt((double)c->in_token_limit / (double)patches);
		*rw = (int)((double)w * scale);
		*rh = (int)((double)h * scale);
		if (*rw < 1 || *rh < 1)
			return d0_errf(err, "%s: %dx%d shrinks to %dx%d under "
				       "in_token_limit %lld", name, w, h, *rw,
				       *rh, (long long)c->in_token_limit);
	}
	*ph = (int)((*rh + f - 1) / f * f);
	*pw = (int)((*rw + f - 1) / f * f);
	if (*pw / P >= 512 || *ph / P >= 512)
		return d0_errf(err, "%s: %dx%d gives a grid of %lld x %lld "
			       "patches; MoonViT's positions stop at 511 "
			       "(the processor's \"Exceed pos emb\")", name, w,
			       h, (long long)(*ph / P), (long long)(*pw / P));
	return 0;
}

/* TF.pad(image, (0, 0, pad_w, pad_h)): zeros right and below. */
static int pad_image(struct image_rgb *im, int ph, int pw, const char *name,
		     struct d0_err *err)
{
	uint8_t *px;
	if (im->h == ph && im->w == pw)
		return 0;
	px = calloc((size_t)ph * pw, 3);
	if (!px)
		return d0_errf(err, "%s: out of memory padding to %dx%d", name,
			       pw, ph);
	for (int y = 0; y < im->h; y++)
		memcpy(px + (size_t)y * pw * 3, im->px + (size_t)y * im->w * 3,
		       (size_t)im->w * 3);
	free(im->px);
	im->px = px;
	im->h = ph;
	im->w = pw;
	return 0;
}

static int clip_pixels(float lut[3][256], struct image_pixels *o,
		       const char *name, struct d0_err *err)
{
	size_t n = (size_t)o->height * o->width;
	const uint8_t *img = o->resized.px;
	o->rows = 3;
	o->cols = (int64_t)n;
	o->values = malloc(3 * n * sizeof(float));
	if (!o->values)
		return d0_errf(err, "%s: out of memory for 3 x %zu pixel values",
			       name, n);
	for (int ch = 0; ch < 3; ch++)
		for (size_t i = 0; i < n; i++)
			o->values[ch * n + i] = lut[ch][img[3 * i + ch]];
	return 0;
}

int image_preprocess(const struct image_prep_config *c,
		     const struct image_rgb *in, const char *name,
		     struct image_pixels *o, struct d0_err *err)
{
	float lut[3][256];
	int h = in->h, w = in->w;
	int ph = 0, pw = 0;
	memset(o, 0, sizeof *o);
	o->kind = c->kind;
	if (c->do_resize) {
		if (c->kind == IMAGE_PROC_KIMI) {
			if (kimi_sizes(c, in->h, in->w, &h, &w, &ph, &pw, name,
				       err) < 0)
				return -1;
		} else if (c->kind == IMAGE_PROC_QWEN2VL) {
			if (image_smart_resize(in->h, in->w,
					       c->patch_size * c->merge_size,
					       c->min_pixels, c->max_pixels, &h,
					       &w, err) < 0) {
				char m[sizeof err->msg];
				snprintf(m, sizeof m, "%s", err->msg);
				return d0_errf(err, "%s: %s", name, m);
			}
		} else if (c->shortest_edge) {
			shortest_edge_size(in->h, in->w, c->shortest_edge, &h, &w);
		} else {
			h = c->size_h;
			w = c->size_w;
		}
		/* The resized image is allocated too: hold it to the
		 * decoder's limit (CLIP's shortest edge can blow up a thin
		 * strip: 4000x3 becomes 448000x336). */
		if ((uint64_t)h * w > IMAGE_DEFAULT_MAX_PIXELS)
			return d0_errf(err, "%s: resizing %dx%d gives %dx%d, "
				       "past %llu pixels", name, in->w, in->h,
				       w, h, IMAGE_DEFAULT_MAX_PIXELS);
		if (image_resize(in, w, h, c->resample, &o->resized, err) < 0) {
			char m[sizeof err->msg];
			snprintf(m, sizeof m, "%s", err->msg);
			return d0_errf(err, "%s: %s", name, m);
		}
	} else {
		size_t n = (size_t)w * h * 3;
		o->resized = *in;
		o->resized.px = malloc(n);
		if (!o->resized.px)
			return d0_errf(err, "%s: out of memory", name);
		memcpy(o->resized.px, in->px, n);
	}
	if (c->kind == IMAGE_PROC_CLIP && c->do_center_crop) {
		struct image_rgb cropped;
		if (center_crop(&o->resized, c->crop_h, c->crop_w, &cropped,
				err) < 0) {
			image_pixels_free(o);
			return -1;
		}
		image_free(&o->resized);
		o->resized = cropped;
	}
	o->content_h = o->resized.h;
	o->content_w = o->resized.w;
	if (c->kind == IMAGE_PROC_KIMI &&
	    pad_image(&o->resized, ph, pw, name, err) < 0) {
		image_pixels_free(o);
		return -1;
	}
	o->height = o->resized.h;
	o->width = o->resized.w;
	value_table(c, lut);
	if ((c->kind == IMAGE_PROC_QWEN2VL ? qwen_pixels(c, lut, o, name, err)
	     : c->kind == IMAGE_PROC_KIMI  ? kimi_pixels(c, lut, o, name, err)
					   : clip_pixels(lut, o, name, err)) < 0) {
		image_pixels_free(o);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ npy */

int image_write_npy(const char *path, const void *data, int is_float,
		    const int64_t *shape, int ndim, struct d0_err *err)
{
	char hdr[256], dims[160] = "";
	size_t n = 1, off = 0, hl;
	int fd;
	for (int i = 0; i < ndim; i++) {
		off += (size_t)snprintf(dims + off, sizeof dims - off, "%lld,%s",
					(long long)shape[i],
					i + 1 < ndim ? " " : "");
		n *= (size_t)shape[i];
	}
	if (ndim > 1)
		dims[off - 1] = 0; /* "(3, 4)", but "(3,)" for one axis */
	hl = (size_t)snprintf(hdr + 10, sizeof hdr - 10,
			      "{'descr': '%s', 'fortran_order': False, "
			      "'shape': (%s), }",
			      is_float ? "<f4" : "|u1", dims);
	/* pad with spaces to a multiple of 64, newline last */
	while ((10 + hl + 1) % 64)
		hdr[10 + hl++] = ' ';
	hdr[10 + hl++] = '\n';
	memcpy(hdr, "\x93NUMPY\x01\x00", 8);
	hdr[8] = (char)(hl & 0xff);
	hdr[9] = (char)(hl >> 8);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return d0_errf(err, "%s: cannot create: %s", path,
			       strerror(errno));
	if (write_full(fd, hdr, 10 + hl) < 0 ||
	    write_full(fd, data, n * (is_float ? 4 : 1)) < 0) {
		int e = errno;
		close(fd);
		unlink(path);
		return d0_errf(err, "%s: write failed: %s", path, strerror(e));
	}
	if (close(fd) < 0) {
		int e = errno;
		unlink(path);
		return d0_errf(err, "%s: write failed: %s", path, strerror(e));
	}
	return 0;
}
