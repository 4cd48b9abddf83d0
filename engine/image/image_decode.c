/*
 * image_decode.c - PNG (libpng) and JPEG (libjpeg-turbo) to 8-bit RGB, the
 * way PIL's Image.open(path).convert("RGB") turns each file into RGB
 * (Pillow's PngImagePlugin/JpegImagePlugin modes, then Convert.c):
 *
 *   PNG gray 1/2/4/8   "1"/"L": the value scaled to 8 bits, replicated
 *   PNG gray 16        "I": the 16-bit value clipped at 255 (PIL's i2rgb,
 *                      so most 16-bit gray images come out nearly white)
 *   PNG gray+alpha     "LA" (16-bit: PIL reads it as RGBA from the high
 *                      bytes): gray replicated, alpha dropped
 *   PNG RGB/RGBA 16    the high byte of each sample (PIL's RGB;16B)
 *   PNG RGBA           alpha dropped, not composited onto anything
 *   PNG palette        the PLTE entry; an index past the table reads PIL's
 *                      initial gray ramp (i, i, i); tRNS ignored
 *   JPEG gray / YCbCr  libjpeg's own conversion (the library PIL links)
 *   JPEG CMYK / YCCK   Adobe-inverted CMYK (PIL's "CMYK;I"), then PIL's
 *                      cmyk2rgb: nk - nk*c/255 with its rounding
 *
 * Gamma, ICC profiles and EXIF orientation are ignored, as PIL's
 * convert("RGB") ignores them.  Both libraries report errors through
 * longjmp (never exit); a truncated file, corrupt entropy-coded data, a
 * zero size or a declared size past the pixel limit is an error that names
 * the file.  The limit is checked from the header, before any pixel buffer
 * exists, so a decompression bomb costs nothing.
 */
#include "image.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

void image_free(struct image_rgb *im)
{
	if (!im)
		return;
	free(im->px);
	im->px = NULL;
	im->w = im->h = 0;
}

static int size_check(uint64_t w, uint64_t h, uint64_t max_pixels,
		      const char *name, const char *fmt, struct d0_err *err)
{
	if (w == 0 || h == 0)
		return d0_errf(err, "%s: %s: zero-sized image (%llux%llu)",
			       name, fmt, (unsigned long long)w,
			       (unsigned long long)h);
	if (w * h > max_pixels)
		return d0_errf(err,
			       "%s: %s: %llux%llu is %llu pixels, past the "
			       "limit of %llu (a decompression bomb?  raise it "
			       "with --max-pixels)",
			       name, fmt, (unsigned long long)w,
			       (unsigned long long)h,
			       (unsigned long long)(w * h),
			       (unsigned long long)max_pixels);
	return 0;
}

/* ------------------------------------------------------------------ PNG */

struct png_job {
	const uint8_t *buf;
	size_t len, pos;
	char msg[256], warning[128];
};

static void png_read_mem(png_structp png, png_bytep data, size_t n)
{
	struct png_job *j = png_get_io_ptr(png);
	if (n > j->len - j->pos)
		png_error(png, "truncated: the file ends inside a chunk");
	memcpy(data, j->buf + j->pos, n);
	j->pos += n;
}

static void png_fail(png_structp png, png_const_charp msg)
{
	struct png_job *j = png_get_error_ptr(png);
	/* libpng says why a header is invalid in a warning just before */
	if (j->warning[0])
		snprintf(j->msg, sizeof j->msg, "%s (%s)", msg, j->warning);
	else
		snprintf(j->msg, sizeof j->msg, "%s", msg);
	png_longjmp(png, 1);
}

/* PIL reads past the same warnings; the last is kept for an error. */
static void png_warn(png_structp png, png_const_charp msg)
{
	struct png_job *j = png_get_error_ptr(png);
	snprintf(j->warning, sizeof j->warning, "%s", msg);
}

/* Rows as libpng delivered them (after the transforms chosen below) to
 * RGB, by PIL's rules for the file's mode. */
static void png_rows_to_rgb(const uint8_t *src, size_t rowbytes, int w,
			    int h, int channels, int bits16, int palette,
			    const uint8_t table[256][3], uint8_t *dst)
{
	for (int y = 0; y < h; y++) {
		const uint8_t *s = src + (size_t)y * rowbytes;
		uint8_t *d = dst + (size_t)y * w * 3;
		for (int x = 0; x < w; x++, d += 3) {
			if (palette) {
				memcpy(d, table[s[x]], 3);
			} else if (channels == 1 && bits16) {
				unsigned v = (unsigned)s[2 * x] << 8 | s[2 * x + 1];
				d[0] = d[1] = d[2] = v >= 255 ? 255 : (uint8_t)v;
			} else if (channels <= 2) {
				d[0] = d[1] = d[2] = s[(size_t)x * channels];
			} else {
				memcpy(d, s + (size_t)x * channels, 3);
			}
		}
	}
}

static int decode_png(const uint8_t *buf, size_t len, const char *name,
		      uint64_t max_pixels, struct image_rgb *out,
		      struct d0_err *err)
{
	struct png_job job = {.buf = buf, .len = len};
	png_structp png;
	png_infop info;
	uint8_t *volatile rows = NULL, *volatile rgb = NULL;
	png_bytep *volatile rowp = NULL;
	png_uint_32 w, h;
	int depth, ctype, interlace, channels;
	volatile int bits16 = 0, palette = 0, rc = -1;
	uint8_t table[256][3];
	size_t rowbytes;

	png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_fail,
				     png_warn);
	info = png ? png_create_info_struct(png) : NULL;
	if (!info) {
		png_destroy_read_struct(&png, NULL, NULL);
		return d0_errf(err, "%s: PNG: out of memory", name);
	}
	if (setjmp(png_jmpbuf(png))) {
		d0_errf(err, "%s: PNG: %s", name, job.msg);
		goto done;
	}
	png_set_read_fn(png, &job, png_read_mem);
	/* The pixel limit below is the one that counts, not libpng's
	 * default 1,000,000-pixel side. */
	png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
	png_read_info(png, info);
	png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL,
		     NULL);
	if (size_check(w, h, max_pixels, name, "PNG", err) < 0)
		goto done;

	snprintf(out->format, sizeof out->format, "PNG");
	out->bits = depth;
	out->progressive = interlace != PNG_INTERLACE_NONE;
	switch (ctype) {
	case PNG_COLOR_TYPE_GRAY:
		snprintf(out->mode, sizeof out->mode, "%s",
			 depth == 1 ? "1" : depth == 16 ? "I" : "L");
		if (depth < 8)
			png_set_expand_gray_1_2_4_to_8(png);
		bits16 = depth == 16;
		break;
	case PNG_COLOR_TYPE_GRAY_ALPHA:
		snprintf(out->mode, sizeof out->mode, "LA");
		break;
	case PNG_COLOR_TYPE_RGB:
		snprintf(out->mode, sizeof out->mode, "RGB");
		break;
	case PNG_COLOR_TYPE_RGB_ALPHA:
		snprintf(out->mode, sizeof out->mode, "RGBA");
		break;
	case PNG_COLOR_TYPE_PALETTE: {
		png_colorp plte = NULL;
		int n = 0;
		snprintf(out->mode, sizeof out->mode, "P");
		palette = 1;
		if (depth < 8)
			png_set_packing(png);
		/* PIL's palette starts as a gray ramp; PLTE overwrites its
		 * first entries. */
		for (int i = 0; i < 256; i++)
			table[i][0] = table[i][1] = table[i][2] = (uint8_t)i;
		if (png_get_PLTE(png, info, &plte, &n) & PNG_INFO_PLTE)
			for (int i = 0; i < n && i < 256; i++) {
				table[i][0] = plte[i].red;
				table[i][1] = plte[i].green;
				table[i][2] = plte[i].blue;
			}
		break;
	}
	default:
		d0_errf(err, "%s: PNG: unknown color type %d", name, ctype);
		goto done;
	}
	/* PIL keeps the high byte of 16-bit color samples (RGB;16B, and
	 * LA;16B for gray+alpha); libpng's strip_16 does the same. */
	if (depth == 16 && !bits16)
		png_set_strip_16(png);
	png_set_interlace_handling(png);
	png_read_update_info(png, info);
	rowbytes = png_get_rowbytes(png, info);
	channels = png_get_channels(png, info);

	rgb = malloc((size_t)w * h * 3);
	rowp = malloc((size_t)h * sizeof *rowp);
	if (!rgb || !rowp) {
		d0_errf(err, "%s: PNG: out of memory for %ux%u", name,
			(unsigned)w, (unsigned)h);
		goto done;
	}
	if (channels == 3 && !palette && rowbytes == (size_t)w * 3) {
		for (png_uint_32 y = 0; y < h; y++)
			rowp[y] = rgb + (size_t)y * w * 3;
		png_read_image(png, rowp);
	} else {
		rows = malloc(rowbytes * h);
		if (!rows) {
			d0_errf(err, "%s: PNG: out of memory for %ux%u", name,
				(unsigned)w, (unsigned)h);
			goto done;
		}
		for (png_uint_32 y = 0; y < h; y++)
			rowp[y] = rows + (size_t)y * rowbytes;
		png_read_image(png, rowp);
		png_rows_to_rgb(rows, rowbytes, (int)w, (int)h, channels,
				bits16, palette, (const uint8_t(*)[3])table,
				rgb);
	}
	/* No png_read_end: like PIL, the image is complete once its rows
	 * are; what follows the image data is not checked. */
	out->w = (int)w;
	out->h = (int)h;
	out->px = rgb;
	rgb = NULL;
	rc = 0;
done:
	free(rows);
	free(rowp);
	free(rgb);
	png_destroy_read_struct(&png, &info, NULL);
	return rc;
}

/* ----------------------------------------------------------------- JPEG */

/* A progressive file of thousands of tiny scans is a CPU bomb; real
 * encoders write about ten (libjpeg-turbo's djpeg -maxscans guards the
 * same way). */
#define JPEG_MAX_SCANS 1000

struct jpeg_job {
	struct jpeg_error_mgr pub;
	struct jpeg_progress_mgr progress;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX + 64];
};

static void jpeg_fail(j_common_ptr cinfo)
{
	struct jpeg_job *j = (struct jpeg_job *)cinfo->err;
	char m[JMSG_LENGTH_MAX];
	cinfo->err->format_message(cinfo, m);
	snprintf(j->msg, sizeof j->msg, "%s", m);
	longjmp(j->jb, 1);
}

/*
 * Warnings: corrupt or missing entropy-coded data is an error (libjpeg
 * would fill gray and go on; PIL raises "image file is truncated" for a
 * short file); the rest (unknown JFIF revision, extraneous bytes before a
 * marker) are ignored as PIL ignores them.
 */
static void jpeg_message(j_common_ptr cinfo, int level)
{
	int code = cinfo->err->msg_code;
	if (level >= 0)
		return;
	if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER ||
	    code == JWRN_HUFF_BAD_CODE || code == JWRN_MUST_RESYNC ||
	    code == JWRN_BOGUS_PROGRESSION || code == JWRN_NOT_SEQUENTIAL ||
	    strstr(cinfo->err->jpeg_message_table[code], "Corrupt JPEG")) {
		struct jpeg_job *j = (struct jpeg_job *)cinfo->err;
		char m[JMSG_LENGTH_MAX];
		cinfo->err->format_message(cinfo, m);
		snprintf(j->msg, sizeof j->msg, "%s%s", m,
			 code == JWRN_JPEG_EOF ? " (truncated)" : "");
		longjmp(j->jb, 1);
	}
}

static void jpeg_quiet(j_common_ptr cinfo)
{
	(void)cinfo;
}

static void jpeg_scans(j_common_ptr cinfo)
{
	j_decompress_ptr d = (j_decompress_ptr)cinfo;
	if (cinfo->is_decompressor && d->input_scan_number > JPEG_MAX_SCANS) {
		struct jpeg_job *j = (struct jpeg_job *)cinfo->err;
		snprintf(j->msg, sizeof j->msg,
			 "more than %d scans (a CPU bomb?)", JPEG_MAX_SCANS);
		longjmp(j->jb, 1);
	}
}

/* PIL's cmyk2rgb on Adobe-inverted samples (CMYK;I). */
static void cmyk_to_rgb(const uint8_t *s, int w, uint8_t *d)
{
	for (int x = 0; x < w; x++, s += 4, d += 3) {
		int nk = s[3]; /* 255 - (255 - k): the inversion undone */
		for (int c = 0; c < 3; c++) {
			int v = 255 - s[c], t = v * nk + 128;
			int r = nk - (((t >> 8) + t) >> 8);
			d[c] = r < 0 ? 0 : r > 255 ? 255 : (uint8_t)r;
		}
	}
}

static int decode_jpeg(const uint8_t *buf, size_t len, const char *name,
		       uint64_t max_pixels, struct image_rgb *out,
		       struct d0_err *err)
{
	struct jpeg_decompress_struct cinfo;
	struct jpeg_job job;
	uint8_t *volatile rgb = NULL, *volatile row = NULL;
	volatile int rc = -1;

	memset(&cinfo, 0, sizeof cinfo);
	cinfo.err = jpeg_std_error(&job.pub);
	job.pub.error_exit = jpeg_fail;
	job.pub.emit_message = jpeg_message;
	job.pub.output_message = jpeg_quiet;
	job.msg[0] = 0;
	if (setjmp(job.jb)) {
		d0_errf(err, "%s: JPEG: %s", name, job.msg);
		goto done;
	}
	jpeg_create_decompress(&cinfo);
	job.progress.progress_monitor = jpeg_scans;
	cinfo.progress = &job.progress;
	jpeg_mem_src(&cinfo, buf, (unsigned long)len);
	jpeg_read_header(&cinfo, TRUE);
	if (size_check(cinfo.image_width, cinfo.image_height, max_pixels, name,
		       "JPEG", err) < 0)
		goto done;
	snprintf(out->format, sizeof out->format, "JPEG");
	out->bits = cinfo.data_precision;
	out->progressive = cinfo.progressive_mode;
	switch (cinfo.num_components) {
	case 1:
		cinfo.out_color_space = JCS_GRAYSCALE;
		snprintf(out->mode, sizeof out->mode, "L");
		break;
	case 3:
		cinfo.out_color_space = JCS_RGB;
		snprintf(out->mode, sizeof out->mode, "RGB");
		break;
	case 4:
		cinfo.out_color_space = JCS_CMYK; /* YCCK converted too */
		snprintf(out->mode, sizeof out->mode, "CMYK");
		break;
	default:
		d0_errf(err, "%s: JPEG: %d color components; PIL (and day0) "
			"read 1, 3 or 4", name, cinfo.num_components);
		goto done;
	}
	jpeg_start_decompress(&cinfo);
	{
		int w = (int)cinfo.output_width, h = (int)cinfo.output_height;
		int nc = cinfo.output_components;
		rgb = malloc((size_t)w * h * 3);
		row = nc == 3 ? NULL : malloc((size_t)w * nc);
		if (!rgb || (nc != 3 && !row)) {
			d0_errf(err, "%s: JPEG: out of memory for %dx%d", name,
				w, h);
			goto done;
		}
		while (cinfo.output_scanline < cinfo.output_height) {
			size_t y = cinfo.output_scanline;
			uint8_t *d = rgb + y * w * 3;
			JSAMPROW r = nc == 3 ? d : row;
			if (jpeg_read_scanlines(&cinfo, &r, 1) != 1) {
				d0_errf(err, "%s: JPEG: no data for row %zu "
					"(truncated)", name, y);
				goto done;
			}
			if (nc == 1)
				for (int x = 0; x < w; x++)
					d[3 * x] = d[3 * x + 1] = d[3 * x + 2] =
						row[x];
			else if (nc == 4)
				cmyk_to_rgb(row, w, d);
		}
		out->w = w;
		out->h = h;
	}
	/* No jpeg_finish_decompress: like PIL, the image is complete once
	 * its rows are; what follows is not checked. */
	out->px = rgb;
	rgb = NULL;
	rc = 0;
done:
	free(row);
	free(rgb);
	jpeg_destroy_decompress(&cinfo);
	return rc;
}

/* ------------------------------------------------------------ the entry */

int image_decode(const uint8_t *buf, size_t len, const char *name,
		 uint64_t max_pixels, struct image_rgb *out, struct d0_err *err)
{
	static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G',
					     '\r', '\n', 0x1a, '\n'};
	memset(out, 0, sizeof *out);
	if (!max_pixels)
		max_pixels = IMAGE_DEFAULT_MAX_PIXELS;
	if (len == 0)
		return d0_errf(err, "%s: empty file (0 bytes), expected a PNG "
			       "or JPEG image", name);
	if (len >= 8 && !memcmp(buf, png_magic, 8))
		return decode_png(buf, len, name, max_pixels, out, err);
	if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
		return decode_jpeg(buf, len, name, max_pixels, out, err);
	{
		char hex[40] = "";
		size_t n = len < 8 ? len : 8;
		for (size_t i = 0; i < n; i++)
			snprintf(hex + 3 * i, 4, "%02x ", buf[i]);
		hex[3 * n - 1] = 0;
		return d0_errf(err,
			       "%s: not a PNG or JPEG image (it starts with "
			       "%s; expected 89 50 4e 47 0d 0a 1a 0a or ff d8 "
			       "ff)",
			       name, hex);
	}
}

int image_load(const char *path, uint64_t max_pixels, struct image_rgb *out,
	       struct d0_err *err)
{
	char *data;
	size_t len;
	int rc;
	memset(out, 0, sizeof *out);
	if (file_read_all(path, (size_t)1 << 30, &data, &len, err) < 0)
		return -1;
	rc = image_decode((const uint8_t *)data, len, path, max_pixels, out,
			  err);
	free(data);
	return rc;
}
