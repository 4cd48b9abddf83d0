/*
 * fuzz_image.c - libFuzzer target for the image loading wrapper
 * (engine/image/image_decode.c) and the resampler behind it.
 *
 * The input is a file's bytes: image_decode must accept it or refuse it
 * with a message (libpng and libjpeg report through longjmp; a leak or a
 * double free on that path is what this looks for), never crash.  An
 * accepted image must have a plausible size and a pixel buffer, and is
 * resized (PIL's BICUBIC, to a small size the last byte picks, up or down) so
 * the coefficient windows meet odd sizes too.  The pixel limit is small
 * (64 Kpx) so a declared size is refused before it costs memory or time.
 *
 *   make fuzz FUZZ_SECONDS=60    (seeded with tests/fuzz/image-corpus)
 */
#include "image.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct image_rgb im, out;
	struct d0_err err;
	err.msg[0] = 0;
	if (image_decode(data, size, "fuzz", 1u << 16, &im, &err) < 0) {
		if (!err.msg[0] || im.px)
			__builtin_trap();
		return 0;
	}
	if (im.w <= 0 || im.h <= 0 || (uint64_t)im.w * im.h > (1u << 16) ||
	    !im.px)
		__builtin_trap();
	{
		/* up to twice the size, but small: the windows' edges are
		 * what can go wrong, not the area */
		unsigned pick = size ? data[size - 1] : 0;
		int w = 1 + (int)((uint64_t)im.w * (1 + (pick & 15)) / 8);
		int h = 1 + (int)((uint64_t)im.h * (1 + (pick >> 4)) / 8);
		if (w > 97)
			w = 97 - (int)(pick % 7);
		if (h > 89)
			h = 89 - (int)(pick % 5);
		if (
		    image_resize(&im, w, h, IMAGE_BICUBIC, &out, &err) == 0) {
			if (out.w != w || out.h != h || !out.px)
				__builtin_trap();
			image_free(&out);
		}
	}
	image_free(&im);
	return 0;
}
