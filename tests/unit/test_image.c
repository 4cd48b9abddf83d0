/*
 * test_image.c - engine/image/'s pieces on their own: smart_resize against
 * values transformers' Python gives (Python's half-to-even round included),
 * resizing a constant image keeps it constant for every PIL filter (the
 * fixed-point weights sum to one), same size is a copy, NEAREST and bad
 * sizes are refused, bad bytes are refused with the name, the .npy header.
 * The byte-for-byte comparison with PIL is tests/sh/test_image_prep.sh.
 */
#include "image.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void smart(int h, int w, int64_t maxp, int want_h, int want_w)
{
	char name[128];
	int oh = 0, ow = 0;
	struct d0_err err;
	int rc = image_smart_resize(h, w, 28, 3136, maxp, &oh, &ow, &err);
	snprintf(name, sizeof name, "smart_resize(%d, %d, max %lld) = (%d, %d)",
		 h, w, (long long)maxp, want_h, want_w);
	CHECKN(name, rc == 0 && oh == want_h && ow == want_w);
}

int main(void)
{
	struct d0_err err;
	int oh, ow;

	/* values from transformers' smart_resize in Python */
	smart(1, 1, 1003520, 56, 56);
	smart(45, 70, 12845056, 56, 56); /* 70 / 28 = 2.5 rounds to 2 */
	smart(3000, 4000, 12845056, 2996, 4004);
	smart(3000, 4000, 1003520, 840, 1148);
	smart(5, 1000, 1003520, 28, 812);
	CHECK(image_smart_resize(4, 1000, 28, 3136, 1003520, &oh, &ow, &err) < 0 &&
	      strstr(err.msg, "past 200"));

	/* constant images stay constant through every filter, up and down */
	for (int f = IMAGE_LANCZOS; f <= IMAGE_HAMMING; f++)
		for (int v = 0; v < 256; v += 51) {
			struct image_rgb in = {.w = 37, .h = 23}, out;
			int sizes[3][2] = {{5, 7}, {37, 61}, {100, 3}}, same = 1;
			char name[96];
			in.px = malloc(37 * 23 * 3);
			memset(in.px, v, 37 * 23 * 3);
			for (int s = 0; s < 3; s++) {
				if (image_resize(&in, sizes[s][0], sizes[s][1], f,
						 &out, &err) < 0) {
					same = 0;
					continue;
				}
				for (int i = 0; i < out.w * out.h * 3; i++)
					same &= out.px[i] == v;
				image_free(&out);
			}
			snprintf(name, sizeof name, "%s keeps a constant %d",
				 image_filter_name(f), v);
			CHECKN(name, same);
			image_free(&in);
		}
	{
		struct image_rgb in = {.w = 3, .h = 2}, out;
		uint8_t px[18];
		for (int i = 0; i < 18; i++)
			px[i] = (uint8_t)(i * 13);
		in.px = px;
		CHECK(image_resize(&in, 3, 2, IMAGE_BICUBIC, &out, &err) == 0 &&
		      out.px != px && !memcmp(out.px, px, 18));
		image_free(&out);
		CHECK(image_resize(&in, 6, 4, IMAGE_NEAREST, &out, &err) < 0 &&
		      strstr(err.msg, "NEAREST") && !out.px);
		CHECK(image_resize(&in, 0, 4, IMAGE_BICUBIC, &out, &err) < 0);
	}

	/* bad bytes: refused with the name given */
	{
		struct image_rgb im;
		static const uint8_t sig_only[8] = {0x89, 'P', 'N', 'G',
						    '\r', '\n', 0x1a, '\n'};
		static const uint8_t soi_only[3] = {0xff, 0xd8, 0xff};
		CHECK(image_decode(sig_only, 8, "x.png", 0, &im, &err) < 0 &&
		      !strncmp(err.msg, "x.png: PNG: ", 12) && !im.px);
		CHECK(image_decode(soi_only, 3, "y.jpg", 0, &im, &err) < 0 &&
		      !strncmp(err.msg, "y.jpg: JPEG: ", 13) && !im.px);
		CHECK(image_decode((const uint8_t *)"BM", 2, "z.bmp", 0, &im,
				   &err) < 0 &&
		      strstr(err.msg, "z.bmp: not a PNG or JPEG image"));
	}

	/* .npy: NumPy's header, padded to a multiple of 64 bytes */
	{
		char path[] = "/tmp/day0-test-image-XXXXXX";
		int fd = mkstemp(path);
		float v[6] = {1, 2, 3, 4, 5, 6};
		int64_t shape[2] = {2, 3};
		char buf[256];
		FILE *f;
		size_t n;
		close(fd);
		CHECK(image_write_npy(path, v, 1, shape, 2, &err) == 0);
		f = fopen(path, "rb");
		n = f ? fread(buf, 1, sizeof buf, f) : 0;
		if (f)
			fclose(f);
		unlink(path);
		{
			size_t hl = (size_t)(uint8_t)buf[8] |
				    (size_t)(uint8_t)buf[9] << 8;
			CHECK(!memcmp(buf, "\x93NUMPY\x01\x00", 8) &&
			      (10 + hl) % 64 == 0 && n == 10 + hl + 24 &&
			      buf[10 + hl - 1] == '\n');
			buf[10 + hl - 1] = 0;
			CHECK(strstr(buf + 10, "'descr': '<f4'") &&
			      strstr(buf + 10, "'shape': (2, 3)"));
			CHECK(!memcmp(buf + 10 + hl, v, 24));
		}
	}
	return unit_done();
}
