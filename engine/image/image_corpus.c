/*
 * image_corpus.c - the built-in corpus image-check runs the processor on
 * when the release day has no images of its own (`--images builtin`, the
 * release-day playbook's default).
 *
 * Why encoded files and not pixel buffers: image.preprocess is about the
 * whole processor, decode included, so every image is written with libpng
 * or libjpeg-turbo into memory in one of the kinds a release meets (RGB,
 * RGBA, gray, palette, 16-bit PNG; baseline, progressive, gray JPEG; a
 * 1x1, a 40:1 strip, a photo-sized one) and handed to image_decode like a
 * file.  The pixels are deterministic patterns (gradients, a checkerboard,
 * a uniform colour whose normalized values are known in closed form), so
 * two runs see the same bytes.
 */
#include "image_check.h"

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

struct membuf {
	uint8_t *p;
	size_t n, cap;
	int oom;
};

static void mem_write(png_structp png, png_bytep data, png_size_t len)
{
	struct membuf *b = png_get_io_ptr(png);
	if (b->oom)
		return;
	if (b->n + len > b->cap) {
		size_t cap = (b->n + len) * 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q) {
			b->oom = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, len);
	b->n += len;
}

static void mem_flush(png_structp png) { (void)png; }

/* The sample at (x, y) of channel c: a smooth gradient with some texture
 * (so resampling has work to do), in [0, maxv]. */
static unsigned pattern(int x, int y, int c, int w, int h, unsigned maxv)
{
	unsigned g = (unsigned)(((uint64_t)(x * (c + 1) + y * (3 - c)) * maxv) /
				(unsigned)(w * 3 + h * 3 + 1));
	if (((x / 4) + (y / 4)) % 2)
		g = maxv - g;
	return g % (maxv + 1);
}

/* PNG of color_type (PNG_COLOR_TYPE_*) and bit depth 8 or 16, or a
 * palette image of 8 bits. */
static int png_encode(int w, int h, int color, int depth, struct membuf *out)
{
	png_structp png;
	png_infop info;
	int ch = color == PNG_COLOR_TYPE_RGB	     ? 3
		 : color == PNG_COLOR_TYPE_RGB_ALPHA ? 4
		 : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
						      : 1;
	size_t bps = (size_t)depth / 8, row = (size_t)w * ch * bps;
	uint8_t *volatile px = NULL;
	memset(out, 0, sizeof *out);
	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	if (!png)
		return -1;
	info = png_create_info_struct(png);
	if (!info || setjmp(png_jmpbuf(png))) {
		png_destroy_write_struct(&png, &info);
		free(px);
		free(out->p);
		out->p = NULL;
		return -1;
	}
	px = malloc(row * (size_t)h);
	if (!px)
		longjmp(png_jmpbuf(png), 1);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			for (int c = 0; c < ch; c++) {
				unsigned v = pattern(x, y, c, w, h,
						     depth == 16 ? 65535u : 255u);
				uint8_t *s = px + (size_t)y * row +
					     ((size_t)x * ch + c) * bps;
				if (depth == 16) {
					s[0] = (uint8_t)(v >> 8);
					s[1] = (uint8_t)v;
				} else {
					s[0] = (uint8_t)v;
				}
			}
	png_set_write_fn(png, out, mem_write, mem_flush);
	png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color,
		     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
		     PNG_FILTER_TYPE_DEFAULT);
	if (color == PNG_COLOR_TYPE_PALETTE) {
		png_color pal[256];
		for (int i = 0; i < 256; i++) {
			pal[i].red = (png_byte)i;
			pal[i].green = (png_byte)(255 - i);
			pal[i].blue = (png_byte)((i * 7) & 255);
		}
		png_set_PLTE(png, info, pal, 256);
	}
	png_write_info(png, info);
	for (int y = 0; y < h; y++)
		png_write_row(png, px + (size_t)y * row);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	free(px);
	if (out->oom) {
		free(out->p);
		out->p = NULL;
		return -1;
	}
	return 0;
}

struct jpeg_fail {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
};

static void jpeg_fail_exit(j_common_ptr cinfo)
{
	longjmp(((struct jpeg_fail *)cinfo->err)->jb, 1);
}

/* JPEG of 3 (YCbCr 4:2:0) or 1 component, baseline or progressive;
 * uniform: every pixel the colour rgb (for the closed-form check). */
static int jpeg_encode(int w, int h, int comps, int progressive,
		       struct membuf *out)
{
	struct jpeg_compress_struct c;
	struct jpeg_fail jf;
	unsigned char *mem = NULL;
	unsigned long size = 0;
	uint8_t *volatile row = NULL;
	memset(out, 0, sizeof *out);
	c.err = jpeg_std_error(&jf.pub);
	jf.pub.error_exit = jpeg_fail_exit;
	if (setjmp(jf.jb)) {
		jpeg_destroy_compress(&c);
		free(row);
		free(mem);
		return -1;
	}
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &mem, &size);
	c.image_width = (JDIMENSION)w;
	c.image_height = (JDIMENSION)h;
	c.input_components = comps;
	c.in_color_space = comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
	jpeg_set_defaults(&c);
	jpeg_set_quality(&c, 90, TRUE);
	if (progressive)
		jpeg_simple_progression(&c);
	jpeg_start_compress(&c, TRUE);
	row = malloc((size_t)w * comps);
	if (!row)
		longjmp(jf.jb, 1);
	while (c.next_scanline < c.image_height) {
		JSAMPROW r = row;
		for (int x = 0; x < w; x++)
			for (int k = 0; k < comps; k++)
				row[x * comps + k] = (uint8_t)pattern(
				    x, (int)c.next_scanline, k, w, h, 255);
		jpeg_write_scanlines(&c, &r, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	free(row);
	out->p = mem;
	out->n = size;
	return 0;
}

/* A uniform RGB PNG (the closed-form normalization check). */
static int png_uniform(int w, int h, const uint8_t rgb[3], struct membuf *out)
{
	png_structp png;
	png_infop info;
	uint8_t *volatile row = NULL;
	memset(out, 0, sizeof *out);
	png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
	if (!png)
		return -1;
	info = png_create_info_struct(png);
	if (!info || setjmp(png_jmpbuf(png))) {
		png_destroy_write_struct(&png, &info);
		free(row);
		free(out->p);
		out->p = NULL;
		return -1;
	}
	row = malloc((size_t)w * 3);
	if (!row)
		longjmp(png_jmpbuf(png), 1);
	for (int x = 0; x < w; x++)
		memcpy(row + 3 * x, rgb, 3);
	png_set_write_fn(png, out, mem_write, mem_flush);
	png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
		     PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
		     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
	png_write_info(png, info);
	for (int y = 0; y < h; y++)
		png_write_row(png, row);
	png_write_end(png, info);
	png_destroy_write_struct(&png, &info);
	free(row);
	return out->oom ? -1 : 0;
}

const uint8_t image_corpus_uniform_rgb[3] = {128, 64, 200};

int image_corpus_builtin(struct image_file **out, int *n, struct d0_err *err)
{
	static const struct {
		const char *name;
		char kind; /* p: png pattern, j: jpeg, u: uniform png */
		int w, h, color, depth, comps, progressive;
	} spec[] = {
	    {"uniform-rgb.png", 'u', 56, 56, 0, 0, 0, 0},
	    {"rgb-320x240.png", 'p', 320, 240, PNG_COLOR_TYPE_RGB, 8, 0, 0},
	    {"rgba-33x17.png", 'p', 33, 17, PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, 0},
	    {"gray-1x1.png", 'p', 1, 1, PNG_COLOR_TYPE_GRAY, 8, 0, 0},
	    {"gray-alpha-90x20.png", 'p', 90, 20, PNG_COLOR_TYPE_GRAY_ALPHA, 8,
	     0, 0},
	    {"palette-40x40.png", 'p', 40, 40, PNG_COLOR_TYPE_PALETTE, 8, 0, 0},
	    {"rgb16-50x30.png", 'p', 50, 30, PNG_COLOR_TYPE_RGB, 16, 0, 0},
	    {"gray16-20x90.png", 'p', 20, 90, PNG_COLOR_TYPE_GRAY, 16, 0, 0},
	    {"strip-1000x25.png", 'p', 1000, 25, PNG_COLOR_TYPE_RGB, 8, 0, 0},
	    {"photo-800x600.jpg", 'j', 800, 600, 0, 0, 3, 0},
	    {"progressive-300x200.jpg", 'j', 300, 200, 0, 0, 3, 1},
	    {"gray-100x100.jpg", 'j', 100, 100, 0, 0, 1, 0},
	};
	int k = (int)(sizeof spec / sizeof spec[0]);
	struct image_file *f = calloc((size_t)k, sizeof *f);
	if (!f)
		return d0_errf(err, "built-in corpus: out of memory");
	for (int i = 0; i < k; i++) {
		struct membuf b;
		int rc = spec[i].kind == 'u'
			     ? png_uniform(spec[i].w, spec[i].h,
					   image_corpus_uniform_rgb, &b)
			 : spec[i].kind == 'p'
			     ? png_encode(spec[i].w, spec[i].h, spec[i].color,
					  spec[i].depth, &b)
			     : jpeg_encode(spec[i].w, spec[i].h, spec[i].comps,
					   spec[i].progressive, &b);
		if (rc < 0) {
			image_files_free(f, i);
			return d0_errf(err, "built-in corpus: cannot encode %s",
				       spec[i].name);
		}
		snprintf(f[i].name, sizeof f[i].name, "builtin:%s",
			 spec[i].name);
		f[i].bytes = b.p;
		f[i].len = b.n;
		f[i].uniform = spec[i].kind == 'u';
	}
	*out = f;
	*n = k;
	return 0;
}

void image_files_free(struct image_file *f, int n)
{
	for (int i = 0; f && i < n; i++)
		free(f[i].bytes);
	free(f);
}
