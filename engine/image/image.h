/*
 * image.h - the image channel's preprocessing: what a vision-language
 * model is fed, computed the way Hugging Face transformers' (slow, PIL
 * based) image processors compute it, so the pixel values day0 feeds a
 * vision tower are the ones the release's own processor would produce.
 *
 *   decode     PNG (libpng) and JPEG (libjpeg-turbo) to 8-bit RGB exactly
 *              as PIL's Image.open(...).convert("RGB") does: palette by its
 *              table, gray replicated, alpha dropped (not composited),
 *              16-bit RGB by its high byte, 16-bit gray clipped at 255,
 *              CMYK by PIL's formula.  A declared size past the pixel limit
 *              is refused before any pixel buffer is allocated.
 *   resize     PIL's Image.resize with its separable filters (BICUBIC a =
 *              -0.5, antialiased: the support widens with the scale), the
 *              fixed-point 8-bit path, horizontal pass then vertical.
 *   prep       preprocessor_config.json (Qwen2VLImageProcessor,
 *              CLIPImageProcessor or KimiVLImageProcessor): smart_resize,
 *              shortest edge + center crop, or Kimi's token limit + pad;
 *              rescale, normalize, and the family's patch order.
 *
 * docs/multimodal.md describes each step and what was measured against PIL.
 */
#ifndef DAY0_IMAGE_H
#define DAY0_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* PIL's Image.MAX_IMAGE_PIXELS (89,478,485) times 2: past it PIL raises
 * DecompressionBombError instead of decoding. */
#define IMAGE_DEFAULT_MAX_PIXELS (2ull * 89478485ull)

/* A decoded image: 8-bit RGB, rows top to bottom, 3 bytes a pixel. */
struct image_rgb {
	int w, h;
	uint8_t *px;
	/* What the file held, in PIL's words: format "PNG"/"JPEG", mode
	 * "RGB", "RGBA", "L", "LA", "P", "1", "I" (16-bit gray), "CMYK". */
	char format[8], mode[8];
	int bits;	  /* bits per sample in the file (1..16) */
	int progressive;  /* JPEG progressive / PNG interlaced */
};

void image_free(struct image_rgb *im);

/*
 * Decode a PNG or JPEG held in buf.  name is used in every error message
 * (the file's path).  Refuses images of more than max_pixels pixels (0 =
 * IMAGE_DEFAULT_MAX_PIXELS) from the header alone.  Truncated or corrupt
 * data, a zero size and unknown formats are errors: -1 with err filled.
 */
int image_decode(const uint8_t *buf, size_t len, const char *name,
		 uint64_t max_pixels, struct image_rgb *out, struct d0_err *err);
/* The same for a file (read whole, up to 1 GiB). */
int image_load(const char *path, uint64_t max_pixels, struct image_rgb *out,
	       struct d0_err *err);

/* PIL's resampling filters, by their Image.Resampling numbers. */
enum image_filter {
	IMAGE_NEAREST = 0,
	IMAGE_LANCZOS = 1,
	IMAGE_BILINEAR = 2,
	IMAGE_BICUBIC = 3,
	IMAGE_BOX = 4,
	IMAGE_HAMMING = 5,
};
/* The filter's PIL name ("BICUBIC"), or NULL for an unknown number. */
const char *image_filter_name(int filter);

/*
 * in resized to w x h as PIL's Image.resize(size, filter) does for an RGB
 * image: the same size is a copy; otherwise the horizontal pass (only over
 * the rows the vertical pass reads), then the vertical one, each rounding
 * to 8 bits.  NEAREST is not implemented (-1).
 */
int image_resize(const struct image_rgb *in, int w, int h, int filter,
		 struct image_rgb *out, struct d0_err *err);

/* --------------------------------------------------------- preprocessing */

enum image_processor {
	IMAGE_PROC_QWEN2VL, /* Qwen2VLImageProcessor (Qwen2-VL, Qwen2.5-VL) */
	IMAGE_PROC_CLIP,    /* CLIPImageProcessor (LLaVA-1.5, CLIP) */
	IMAGE_PROC_KIMI,    /* KimiVLImageProcessor (Kimi-VL, MoonViT) */
};

/* preprocessor_config.json, with transformers' defaults where absent. */
struct image_prep_config {
	enum image_processor kind;
	char type_name[64]; /* image_processor_type as written */
	int do_resize, do_rescale, do_normalize, do_convert_rgb;
	int resample;	    /* enum image_filter */
	double rescale_factor;
	double mean[3], std[3];
	/* Qwen2-VL */
	int patch_size, temporal_patch_size, merge_size;
	int64_t min_pixels, max_pixels;
	/* Kimi-VL (patch_size, merge_size = merge_kernel_size too) */
	int64_t in_token_limit; /* patches past it: shrunk (BICUBIC) */
	int pad_input;		/* pad bottom/right to merge x patch */
	/* CLIP */
	int shortest_edge;	  /* size.shortest_edge, or 0 with size_h/w */
	int size_h, size_w;	  /* size.height/width (square resize) */
	int do_center_crop, crop_h, crop_w;
};

/* A JSON file: NULL with err "PATH: cannot open: <errno text>" (or "not a
 * regular file") or "PATH: invalid JSON: ... (line L, column C)". */
json_t *image_json_load(const char *path, struct d0_err *err);

/* Read and check a preprocessor_config.json (errors name the file and the
 * field). */
int image_prep_config_load(const char *path, struct image_prep_config *c,
			   struct d0_err *err);

/*
 * transformers' smart_resize: height and width rounded to multiples of
 * factor, scaled into [min_pixels, max_pixels] keeping the aspect ratio.
 * Fails (as transformers raises) when the aspect ratio is past 200.
 */
int image_smart_resize(int height, int width, int factor, int64_t min_pixels,
		       int64_t max_pixels, int *out_h, int *out_w,
		       struct d0_err *err);

/*
 * What the vision tower is fed for one image.
 *   Qwen2-VL: rows = grid_t*grid_h*grid_w patches, cols = 3 * temporal *
 *     patch * patch, in transformers' merge-window order (a still image
 *     repeated over the temporal pair); tokens = rows / merge^2.
 *   CLIP: pixel_values [3][height][width]: rows = 3, cols = height*width.
 *   Kimi-VL: rows = grid_h*grid_w patches in raster order (grid_t 1),
 *     cols = 3 * patch * patch (channel, py, px); tokens = rows / merge^2.
 */
struct image_pixels {
	enum image_processor kind;
	int height, width;	    /* after resize (and crop or pad) */
	int content_h, content_w;   /* Kimi-VL: the image inside the pad */
	int grid_t, grid_h, grid_w; /* Qwen2-VL; 0 for CLIP */
	int64_t rows, cols;
	int64_t tokens;		    /* placeholder tokens this image takes */
	float *values;		    /* rows * cols */
	struct image_rgb resized;   /* the 8-bit image before rescale */
};

void image_pixels_free(struct image_pixels *p);

/* The whole processor on a decoded image.  name is for error messages. */
int image_preprocess(const struct image_prep_config *c,
		     const struct image_rgb *in, const char *name,
		     struct image_pixels *out, struct d0_err *err);

/* Write a C-order float32 or uint8 array as NumPy's .npy (version 1.0). */
int image_write_npy(const char *path, const void *data, int is_float,
		    const int64_t *shape, int ndim, struct d0_err *err);

#endif
