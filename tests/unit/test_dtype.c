/* Float conversions: round-to-nearest-even, NaN/Inf, subnormals. */
#include "engine.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* The f32 -> bf16 rounding spelled out: ties to even, a NaN quieted with
 * its sign and upper payload kept. */
static uint16_t bf16_want(uint32_t u)
{
	return (u & 0x7fffffffu) > 0x7f800000u
		       ? (uint16_t)((u >> 16) | 0x40u)
		       : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* How many of out[0, n) differ from bf16_want of in[]. */
static int bf16_bad(const uint32_t *in, const uint16_t *out, size_t n)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += out[i] != bf16_want(in[i]);
	return bad;
}

/* Reference f32 -> f16 by exhaustive search over finite halves. */
static uint16_t ref_f16(float f)
{
	uint16_t best = 0;
	double bd = INFINITY;
	if (isnan(f))
		return 0x7e00;
	for (uint32_t h = 0; h < 0x7c00; h++) {
		double v = f16_to_f32((uint16_t)h), d = fabs(v - fabs(f));
		if (d < bd || (d == bd && !(h & 1))) {
			bd = d;
			best = (uint16_t)h;
		}
	}
	/* past the largest half (65504) by at least half an ulp: Inf */
	if (fabs(f) >= 65520.0)
		best = 0x7c00;
	return (uint16_t)(best | (signbit(f) ? 0x8000 : 0));
}

int main(void)
{
	/* bf16: ties to even */
	CHECK(f32_to_bf16(1.0f) == 0x3f80);
	CHECK(f32_to_bf16(u2f(0x3f808000)) == 0x3f80); /* tie, even stays */
	CHECK(f32_to_bf16(u2f(0x3f818000)) == 0x3f82); /* tie, odd rounds up */
	CHECK(f32_to_bf16(u2f(0x3f808001)) == 0x3f81); /* above tie */
	CHECK(f32_to_bf16(INFINITY) == 0x7f80);
	CHECK(f32_to_bf16(-INFINITY) == 0xff80);
	CHECK(isnan(bf16_to_f32(f32_to_bf16(NAN))));
	CHECK(isnan(bf16_to_f32(f32_to_bf16(u2f(0x7f800001))))); /* low payload */
	CHECK(f32_to_bf16(u2f(0x7f7fffff)) == 0x7f80); /* max float rounds to Inf */
	CHECK(f32_to_bf16(-0.0f) == 0x8000);
	/* every bf16 survives the round trip through f32 */
	{
		int bad = 0;
		for (uint32_t h = 0; h < 0x10000; h++) {
			float f = bf16_to_f32((uint16_t)h);
			if (!isnan(f) && f32_to_bf16(f) != h)
				bad++;
		}
		CHECKN("bf16 -> f32 -> bf16 is exact for all 65536 values", bad == 0);
	}
	/* dtype_convert f32 -> bf16 over arrays (convert's path: AVX-512 16 a
	 * step where the CPU has it, then the scalar tail) = the scalar
	 * rounding bit for bit: every bf16 pattern with low halves 0, 0x7fff,
	 * 0x8000 (ties), 0x8001 and 0xffff (denormals, Inf, NaN payloads of
	 * both signs), in calls of 1..37 values so every tail length runs */
	{
		static const uint32_t lows[] = {0, 0x7fff, 0x8000, 0x8001, 0xffff};
		enum { N = 0x10000 * 5 };
		uint32_t *in = malloc(N * 4);
		uint16_t *out = malloc(N * 2);
		int nan_bad = 0;
		for (uint32_t i = 0; i < N; i++)
			in[i] = (i / 5) << 16 | lows[i % 5];
		for (size_t i = 0, len = 1; i < N; i += len, len = len % 37 + 1)
			dtype_convert(DT_F32, in + i, DT_BF16, out + i,
				      N - i < len ? N - i : len);
		for (uint32_t i = 0; i < N; i++)
			nan_bad += !isnan(u2f(in[i])) && bf16_want(in[i]) != f32_to_bf16(u2f(in[i]));
		CHECKN("dtype_convert f32 -> bf16 (vector and tail) = the scalar rounding, 327680 patterns",
		       bf16_bad(in, out, N) == 0);
		CHECKN("... and = f32_to_bf16 for every non-NaN pattern", nan_bad == 0);
		/* the same patterns in one call: the 32-a-step path (AVX512-BF16's
		 * instruction, the arithmetic for a step with a denormal) */
		memset(out, 0, N * 2);
		dtype_convert(DT_F32, in, DT_BF16, out, N);
		CHECKN("dtype_convert f32 -> bf16 in one call = the scalar rounding, 327680 patterns",
		       bf16_bad(in, out, N) == 0);
		/* a denormal-free run (the instruction on every step) */
		for (uint32_t i = 0; i < N; i++)
			in[i] = (uint32_t)(i * 2654435761u) | 0x00800000u;
		dtype_convert(DT_F32, in, DT_BF16, out, N);
		CHECKN("dtype_convert f32 -> bf16, no denormals, 327680 values = the scalar rounding",
		       bf16_bad(in, out, N) == 0);
		free(in);
		free(out);
	}
	/* f16 */
	CHECK(f32_to_f16(1.0f) == 0x3c00);
	CHECK(f32_to_f16(65504.0f) == 0x7bff);
	CHECK(f32_to_f16(65519.0f) == 0x7bff);
	CHECK(f32_to_f16(65520.0f) == 0x7c00); /* overflow to Inf */
	CHECK(f32_to_f16(-1e9f) == 0xfc00);
	CHECK(f32_to_f16(0x1p-24f) == 0x0001); /* smallest subnormal */
	CHECK(f32_to_f16(0x1p-25f) == 0x0000); /* tie to even: zero */
	CHECK(f32_to_f16(0x1.8p-24f) == 0x0002); /* tie to even: 2 */
	CHECK(isnan(f16_to_f32(f32_to_f16(NAN))));
	CHECK(f16_to_f32(0x7c00) == INFINITY);
	CHECK(f16_to_f32(0x0001) == 0x1p-24f);
	{
		int bad = 0;
		for (uint32_t h = 0; h < 0x10000; h++) {
			float f = f16_to_f32((uint16_t)h);
			if (!isnan(f) && f32_to_f16(f) != h)
				bad++;
		}
		CHECKN("f16 -> f32 -> f16 is exact for all 65536 values", bad == 0);
	}
	{
		/* random floats in the half range against the exhaustive reference */
		struct rng r;
		int bad = 0;
		rng_seed(&r, 7);
		for (int i = 0; i < 300; i++) {
			float f = (float)((rng_uniform(&r) - 0.5) *
					  pow(2.0, (double)(rng_next(&r) % 40) - 24));
			if (f32_to_f16(f) != ref_f16(f))
				bad++;
		}
		CHECKN("f32 -> f16 matches exhaustive nearest-even reference", bad == 0);
	}
	{
		float src[4] = {1.5f, -2.25f, 3.0e-3f, 1000.0f}, back[4];
		uint16_t mid[4];
		CHECK(dtype_convert(DT_F32, src, DT_BF16, mid, 4) == 0);
		CHECK(dtype_convert(DT_BF16, mid, DT_F32, back, 4) == 0);
		CHECK(back[0] == 1.5f && back[1] == -2.25f && back[3] == 1000.0f);
		CHECK(dtype_convert(DT_I32, src, DT_F32, back, 4) == -1);
	}
	CHECK(dtype_from_name("BF16") == DT_BF16);
	CHECK(dtype_from_name("F8_E4M3") == DT_F8_E4M3);
	CHECK(dtype_from_name("bf16") == DT_INVALID);
	CHECK(dtype_size(DT_F64) == 8 && dtype_size(DT_BOOL) == 1);
	return unit_done();
}
