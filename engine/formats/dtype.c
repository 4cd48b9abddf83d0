/*
 * dtype.c - the safetensors dtype table and float conversions.
 *
 * Narrowing conversions round to nearest, ties to even, the way
 * torch.Tensor.to(bfloat16/float16) does; NaN stays NaN (quiet, sign kept)
 * and Inf stays Inf; f16 overflow becomes Inf, f16 underflow a subnormal or
 * a signed zero.
 */
#include "engine.h"

#include <string.h>

static const struct {
	const char *name, *user, *torch;
	size_t size;
} dtypes[DT_COUNT] = {
	[DT_BOOL] = {"BOOL", "bool", "bool", 1},
	[DT_U8] = {"U8", "u8", "uint8", 1},
	[DT_I8] = {"I8", "i8", "int8", 1},
	[DT_F8_E5M2] = {"F8_E5M2", "f8_e5m2", "float8_e5m2", 1},
	[DT_F8_E4M3] = {"F8_E4M3", "f8_e4m3", "float8_e4m3fn", 1},
	[DT_I16] = {"I16", "i16", "int16", 2},
	[DT_U16] = {"U16", "u16", "uint16", 2},
	[DT_F16] = {"F16", "f16", "float16", 2},
	[DT_BF16] = {"BF16", "bf16", "bfloat16", 2},
	[DT_I32] = {"I32", "i32", "int32", 4},
	[DT_U32] = {"U32", "u32", "uint32", 4},
	[DT_F32] = {"F32", "f32", "float32", 4},
	[DT_F64] = {"F64", "f64", "float64", 8},
	[DT_I64] = {"I64", "i64", "int64", 8},
	[DT_U64] = {"U64", "u64", "uint64", 8},
};

enum dtype dtype_from_name(const char *name)
{
	for (int i = 0; i < DT_COUNT; i++)
		if (!strcmp(dtypes[i].name, name))
			return (enum dtype)i;
	return DT_INVALID;
}

const char *dtype_name(enum dtype d)
{
	return d >= 0 && d < DT_COUNT ? dtypes[d].name : "?";
}

size_t dtype_size(enum dtype d)
{
	return d >= 0 && d < DT_COUNT ? dtypes[d].size : 0;
}

enum dtype dtype_from_user(const char *name)
{
	if (!strcmp(name, "f32") || !strcmp(name, "float32"))
		return DT_F32;
	if (!strcmp(name, "bf16") || !strcmp(name, "bfloat16"))
		return DT_BF16;
	if (!strcmp(name, "f16") || !strcmp(name, "float16"))
		return DT_F16;
	return DT_INVALID;
}

const char *dtype_user_name(enum dtype d)
{
	return d >= 0 && d < DT_COUNT ? dtypes[d].user : "?";
}

const char *dtype_torch_name(enum dtype d)
{
	return d >= 0 && d < DT_COUNT ? dtypes[d].torch : "?";
}

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t h)
{
	return u2f((uint32_t)h << 16);
}

uint16_t f32_to_f16(float f)
{
	const uint32_t f32infty = 255u << 23, f16max = (127u + 16) << 23;
	const uint32_t denorm_magic = ((127u - 15) + (23 - 10) + 1) << 23;
	uint32_t x = f2u(f), sign = x & 0x80000000u;
	uint16_t o;
	x ^= sign;
	if (x >= f16max) {
		o = x > f32infty ? 0x7e00 : 0x7c00; /* NaN or overflow to Inf */
	} else if (x < (113u << 23)) {
		/* Subnormal result: let the FPU's round-to-nearest-even do it. */
		float v = u2f(x) + u2f(denorm_magic);
		o = (uint16_t)(f2u(v) - denorm_magic);
	} else {
		uint32_t mant_odd = (x >> 13) & 1;
		x += ((uint32_t)(15 - 127) << 23) + 0xfff;
		x += mant_odd;
		o = (uint16_t)(x >> 13);
	}
	return (uint16_t)(o | (sign >> 16));
}

float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	if (exp == 0x1f)
		return u2f(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24 is exact in f32 */
		float v = (float)mant * 0x1p-24f;
		return u2f(f2u(v) | sign);
	}
	return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

/*
 * The hot path of convert: f32_to_bf16 over an array, written branch-free
 * (the NaN case is a select) so the compiler vectorises it; with AVX-512
 * 16 a step in the same integer arithmetic (so the same bits: not
 * vcvtneps2bf16, which flushes denormals), the source prefetched a page
 * ahead.  convert reads it from the page cache's pages, 4 KiB apart in
 * memory: the hardware prefetcher stops at each page's end, and the
 * baseline SSE2 loop took 0.8 s of CPU for the f32 bench model's 0.5 G
 * values, two thirds of the convert.
 */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#ifndef F2B_PF
#define F2B_PF 4096
#endif
__attribute__((target("avx512f"))) static size_t
f32_to_bf16_avx512(const uint32_t *s, uint16_t *o, size_t n)
{
	const __m512i rnd = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1),
		      abs = _mm512_set1_epi32(0x7fffffff),
		      inf = _mm512_set1_epi32(0x7f800000), quiet = _mm512_set1_epi32(0x40);
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512i u = _mm512_loadu_si512(s + i), hi = _mm512_srli_epi32(u, 16);
		__m512i r = _mm512_srli_epi32(
			_mm512_add_epi32(_mm512_add_epi32(u, rnd), _mm512_and_si512(hi, one)), 16);
		__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
		_mm_prefetch((const char *)(s + i) + F2B_PF, _MM_HINT_T0);
		r = _mm512_mask_or_epi32(r, nan, hi, quiet);
		_mm256_storeu_si256((__m256i *)(o + i), _mm512_cvtepi32_epi16(r));
	}
	return i;
}

/*
 * With AVX512-BF16, vcvtne2ps2bf16 rounds 32 values in one instruction
 * with the same bits as the arithmetic above (ties to even; a NaN keeps
 * its sign and upper payload, quieted) for every input but a denormal,
 * which it flushes to zero: a step with a denormal among its 32 values
 * takes the arithmetic instead.  Half the instructions of the arithmetic
 * path: f32 -> bf16 of bench/weights.sh's model, whose source is read a
 * block at a time into L2 (step_convert.c), spent 85 ms of CPU in it
 * against 46 for the bare instruction (Emerald Rapids).
 */
__attribute__((target("avx512f,avx512bf16"))) static size_t
f32_to_bf16_avx512bf16(const uint32_t *s, uint16_t *o, size_t n)
{
	const __m512i exp = _mm512_set1_epi32(0x7f800000),
		      mant = _mm512_set1_epi32(0x007fffff);
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512i a = _mm512_loadu_si512(s + i), b = _mm512_loadu_si512(s + i + 16);
		/* a denormal: exponent bits all 0, mantissa not */
		__mmask16 da = _mm512_mask_testn_epi32_mask(
			_mm512_test_epi32_mask(a, mant), a, exp);
		__mmask16 db = _mm512_mask_testn_epi32_mask(
			_mm512_test_epi32_mask(b, mant), b, exp);
		_mm_prefetch((const char *)(s + i) + F2B_PF, _MM_HINT_T0);
		_mm_prefetch((const char *)(s + i) + F2B_PF + 64, _MM_HINT_T0);
		if (da | db) {
			f32_to_bf16_avx512(s + i, o + i, 32);
			continue;
		}
		_mm512_storeu_si512(o + i, (__m512i)_mm512_cvtne2ps_pbh(
						   _mm512_castsi512_ps(b),
						   _mm512_castsi512_ps(a)));
	}
	return i;
}
#endif

__attribute__((optimize("O3"))) static void
f32_to_bf16_n(const void *src, uint16_t *o, size_t n)
{
	const uint32_t *s = src;
	size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	if (__builtin_cpu_supports("avx512bf16"))
		i = f32_to_bf16_avx512bf16(s, o, n);
	if (__builtin_cpu_supports("avx512f"))
		i += f32_to_bf16_avx512(s + i, o + i, n - i);
#endif
	for (; i < n; i++) {
		uint32_t u = s[i];
		uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
		uint32_t q = (u >> 16) | 0x40u;
		o[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
	}
}

static float load_f(enum dtype d, const void *src, size_t i)
{
	uint16_t h;
	float f;
	switch (d) {
	case DT_F32:
		memcpy(&f, (const char *)src + 4 * i, 4);
		return f;
	case DT_BF16:
		memcpy(&h, (const char *)src + 2 * i, 2);
		return bf16_to_f32(h);
	default: /* DT_F16 */
		memcpy(&h, (const char *)src + 2 * i, 2);
		return f16_to_f32(h);
	}
}

int dtype_convert(enum dtype from, const void *src, enum dtype to, void *dst,
		  size_t n)
{
	int ok_from = from == DT_F32 || from == DT_BF16 || from == DT_F16;
	int ok_to = to == DT_F32 || to == DT_BF16 || to == DT_F16;
	if (!ok_from || !ok_to)
		return -1;
	if (from == to) {
		memcpy(dst, src, n * dtype_size(to));
		return 0;
	}
	if (from == DT_F32 && to == DT_BF16) {
		f32_to_bf16_n(src, dst, n);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		float f = load_f(from, src, i);
		if (to == DT_F32) {
			memcpy((char *)dst + 4 * i, &f, 4);
		} else {
			uint16_t h = to == DT_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
			memcpy((char *)dst + 2 * i, &h, 2);
		}
	}
	return 0;
}
