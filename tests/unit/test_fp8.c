/*
 * FP8 and packed-int decoding: the float64 reference's decoder (ref.c) and
 * the runtime's table (format_fp8.c) against every one of the 256 e4m3fn
 * and e5m2 codes, listed below as exact values (generated once with
 * Python's fractions from the OCP 8-bit float definition, a third
 * implementation); the encoder's rounding; int4/int8 packing as
 * compressed-tensors' pack_to_int32 lays it out; the formats' config
 * parsing and which tensors they quantise.
 */
#include "engine.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double e4m3fn_table[256] = {
	0.0, 0x1.0000000000000p-9, 0x1.0000000000000p-8, 0x1.8000000000000p-8,
	0x1.0000000000000p-7, 0x1.4000000000000p-7, 0x1.8000000000000p-7, 0x1.c000000000000p-7,
	0x1.0000000000000p-6, 0x1.2000000000000p-6, 0x1.4000000000000p-6, 0x1.6000000000000p-6,
	0x1.8000000000000p-6, 0x1.a000000000000p-6, 0x1.c000000000000p-6, 0x1.e000000000000p-6,
	0x1.0000000000000p-5, 0x1.2000000000000p-5, 0x1.4000000000000p-5, 0x1.6000000000000p-5,
	0x1.8000000000000p-5, 0x1.a000000000000p-5, 0x1.c000000000000p-5, 0x1.e000000000000p-5,
	0x1.0000000000000p-4, 0x1.2000000000000p-4, 0x1.4000000000000p-4, 0x1.6000000000000p-4,
	0x1.8000000000000p-4, 0x1.a000000000000p-4, 0x1.c000000000000p-4, 0x1.e000000000000p-4,
	0x1.0000000000000p-3, 0x1.2000000000000p-3, 0x1.4000000000000p-3, 0x1.6000000000000p-3,
	0x1.8000000000000p-3, 0x1.a000000000000p-3, 0x1.c000000000000p-3, 0x1.e000000000000p-3,
	0x1.0000000000000p-2, 0x1.2000000000000p-2, 0x1.4000000000000p-2, 0x1.6000000000000p-2,
	0x1.8000000000000p-2, 0x1.a000000000000p-2, 0x1.c000000000000p-2, 0x1.e000000000000p-2,
	0x1.0000000000000p-1, 0x1.2000000000000p-1, 0x1.4000000000000p-1, 0x1.6000000000000p-1,
	0x1.8000000000000p-1, 0x1.a000000000000p-1, 0x1.c000000000000p-1, 0x1.e000000000000p-1,
	0x1.0000000000000p+0, 0x1.2000000000000p+0, 0x1.4000000000000p+0, 0x1.6000000000000p+0,
	0x1.8000000000000p+0, 0x1.a000000000000p+0, 0x1.c000000000000p+0, 0x1.e000000000000p+0,
	0x1.0000000000000p+1, 0x1.2000000000000p+1, 0x1.4000000000000p+1, 0x1.6000000000000p+1,
	0x1.8000000000000p+1, 0x1.a000000000000p+1, 0x1.c000000000000p+1, 0x1.e000000000000p+1,
	0x1.0000000000000p+2, 0x1.2000000000000p+2, 0x1.4000000000000p+2, 0x1.6000000000000p+2,
	0x1.8000000000000p+2, 0x1.a000000000000p+2, 0x1.c000000000000p+2, 0x1.e000000000000p+2,
	0x1.0000000000000p+3, 0x1.2000000000000p+3, 0x1.4000000000000p+3, 0x1.6000000000000p+3,
	0x1.8000000000000p+3, 0x1.a000000000000p+3, 0x1.c000000000000p+3, 0x1.e000000000000p+3,
	0x1.0000000000000p+4, 0x1.2000000000000p+4, 0x1.4000000000000p+4, 0x1.6000000000000p+4,
	0x1.8000000000000p+4, 0x1.a000000000000p+4, 0x1.c000000000000p+4, 0x1.e000000000000p+4,
	0x1.0000000000000p+5, 0x1.2000000000000p+5, 0x1.4000000000000p+5, 0x1.6000000000000p+5,
	0x1.8000000000000p+5, 0x1.a000000000000p+5, 0x1.c000000000000p+5, 0x1.e000000000000p+5,
	0x1.0000000000000p+6, 0x1.2000000000000p+6, 0x1.4000000000000p+6, 0x1.6000000000000p+6,
	0x1.8000000000000p+6, 0x1.a000000000000p+6, 0x1.c000000000000p+6, 0x1.e000000000000p+6,
	0x1.0000000000000p+7, 0x1.2000000000000p+7, 0x1.4000000000000p+7, 0x1.6000000000000p+7,
	0x1.8000000000000p+7, 0x1.a000000000000p+7, 0x1.c000000000000p+7, 0x1.e000000000000p+7,
	0x1.0000000000000p+8, 0x1.2000000000000p+8, 0x1.4000000000000p+8, 0x1.6000000000000p+8,
	0x1.8000000000000p+8, 0x1.a000000000000p+8, 0x1.c000000000000p+8, NAN,
	-0.0, -0x1.0000000000000p-9, -0x1.0000000000000p-8, -0x1.8000000000000p-8,
	-0x1.0000000000000p-7, -0x1.4000000000000p-7, -0x1.8000000000000p-7, -0x1.c000000000000p-7,
	-0x1.0000000000000p-6, -0x1.2000000000000p-6, -0x1.4000000000000p-6, -0x1.6000000000000p-6,
	-0x1.8000000000000p-6, -0x1.a000000000000p-6, -0x1.c000000000000p-6, -0x1.e000000000000p-6,
	-0x1.0000000000000p-5, -0x1.2000000000000p-5, -0x1.4000000000000p-5, -0x1.6000000000000p-5,
	-0x1.8000000000000p-5, -0x1.a000000000000p-5, -0x1.c000000000000p-5, -0x1.e000000000000p-5,
	-0x1.0000000000000p-4, -0x1.2000000000000p-4, -0x1.4000000000000p-4, -0x1.6000000000000p-4,
	-0x1.8000000000000p-4, -0x1.a000000000000p-4, -0x1.c000000000000p-4, -0x1.e000000000000p-4,
	-0x1.0000000000000p-3, -0x1.2000000000000p-3, -0x1.4000000000000p-3, -0x1.6000000000000p-3,
	-0x1.8000000000000p-3, -0x1.a000000000000p-3, -0x1.c000000000000p-3, -0x1.e000000000000p-3,
	-0x1.0000000000000p-2, -0x1.2000000000000p-2, -0x1.4000000000000p-2, -0x1.6000000000000p-2,
	-0x1.8000000000000p-2, -0x1.a000000000000p-2, -0x1.c000000000000p-2, -0x1.e000000000000p-2,
	-0x1.0000000000000p-1, -0x1.2000000000000p-1, -0x1.4000000000000p-1, -0x1.6000000000000p-1,
	-0x1.8000000000000p-1, -0x1.a000000000000p-1, -0x1.c000000000000p-1, -0x1.e000000000000p-1,
	-0x1.0000000000000p+0, -0x1.2000000000000p+0, -0x1.4000000000000p+0, -0x1.6000000000000p+0,
	-0x1.8000000000000p+0, -0x1.a000000000000p+0, -0x1.c000000000000p+0, -0x1.e000000000000p+0,
	-0x1.0000000000000p+1, -0x1.2000000000000p+1, -0x1.4000000000000p+1, -0x1.6000000000000p+1,
	-0x1.8000000000000p+1, -0x1.a000000000000p+1, -0x1.c000000000000p+1, -0x1.e000000000000p+1,
	-0x1.0000000000000p+2, -0x1.2000000000000p+2, -0x1.4000000000000p+2, -0x1.6000000000000p+2,
	-0x1.8000000000000p+2, -0x1.a000000000000p+2, -0x1.c000000000000p+2, -0x1.e000000000000p+2,
	-0x1.0000000000000p+3, -0x1.2000000000000p+3, -0x1.4000000000000p+3, -0x1.6000000000000p+3,
	-0x1.8000000000000p+3, -0x1.a000000000000p+3, -0x1.c000000000000p+3, -0x1.e000000000000p+3,
	-0x1.0000000000000p+4, -0x1.2000000000000p+4, -0x1.4000000000000p+4, -0x1.6000000000000p+4,
	-0x1.8000000000000p+4, -0x1.a000000000000p+4, -0x1.c000000000000p+4, -0x1.e000000000000p+4,
	-0x1.0000000000000p+5, -0x1.2000000000000p+5, -0x1.4000000000000p+5, -0x1.6000000000000p+5,
	-0x1.8000000000000p+5, -0x1.a000000000000p+5, -0x1.c000000000000p+5, -0x1.e000000000000p+5,
	-0x1.0000000000000p+6, -0x1.2000000000000p+6, -0x1.4000000000000p+6, -0x1.6000000000000p+6,
	-0x1.8000000000000p+6, -0x1.a000000000000p+6, -0x1.c000000000000p+6, -0x1.e000000000000p+6,
	-0x1.0000000000000p+7, -0x1.2000000000000p+7, -0x1.4000000000000p+7, -0x1.6000000000000p+7,
	-0x1.8000000000000p+7, -0x1.a000000000000p+7, -0x1.c000000000000p+7, -0x1.e000000000000p+7,
	-0x1.0000000000000p+8, -0x1.2000000000000p+8, -0x1.4000000000000p+8, -0x1.6000000000000p+8,
	-0x1.8000000000000p+8, -0x1.a000000000000p+8, -0x1.c000000000000p+8, NAN,
};
static const double e5m2_table[256] = {
	0.0, 0x1.0000000000000p-16, 0x1.0000000000000p-15, 0x1.8000000000000p-15,
	0x1.0000000000000p-14, 0x1.4000000000000p-14, 0x1.8000000000000p-14, 0x1.c000000000000p-14,
	0x1.0000000000000p-13, 0x1.4000000000000p-13, 0x1.8000000000000p-13, 0x1.c000000000000p-13,
	0x1.0000000000000p-12, 0x1.4000000000000p-12, 0x1.8000000000000p-12, 0x1.c000000000000p-12,
	0x1.0000000000000p-11, 0x1.4000000000000p-11, 0x1.8000000000000p-11, 0x1.c000000000000p-11,
	0x1.0000000000000p-10, 0x1.4000000000000p-10, 0x1.8000000000000p-10, 0x1.c000000000000p-10,
	0x1.0000000000000p-9, 0x1.4000000000000p-9, 0x1.8000000000000p-9, 0x1.c000000000000p-9,
	0x1.0000000000000p-8, 0x1.4000000000000p-8, 0x1.8000000000000p-8, 0x1.c000000000000p-8,
	0x1.0000000000000p-7, 0x1.4000000000000p-7, 0x1.8000000000000p-7, 0x1.c000000000000p-7,
	0x1.0000000000000p-6, 0x1.4000000000000p-6, 0x1.8000000000000p-6, 0x1.c000000000000p-6,
	0x1.0000000000000p-5, 0x1.4000000000000p-5, 0x1.8000000000000p-5, 0x1.c000000000000p-5,
	0x1.0000000000000p-4, 0x1.4000000000000p-4, 0x1.8000000000000p-4, 0x1.c000000000000p-4,
	0x1.0000000000000p-3, 0x1.4000000000000p-3, 0x1.8000000000000p-3, 0x1.c000000000000p-3,
	0x1.0000000000000p-2, 0x1.4000000000000p-2, 0x1.8000000000000p-2, 0x1.c000000000000p-2,
	0x1.0000000000000p-1, 0x1.4000000000000p-1, 0x1.8000000000000p-1, 0x1.c000000000000p-1,
	0x1.0000000000000p+0, 0x1.4000000000000p+0, 0x1.8000000000000p+0, 0x1.c000000000000p+0,
	0x1.0000000000000p+1, 0x1.4000000000000p+1, 0x1.8000000000000p+1, 0x1.c000000000000p+1,
	0x1.0000000000000p+2, 0x1.4000000000000p+2, 0x1.8000000000000p+2, 0x1.c000000000000p+2,
	0x1.0000000000000p+3, 0x1.4000000000000p+3, 0x1.8000000000000p+3, 0x1.c000000000000p+3,
	0x1.0000000000000p+4, 0x1.4000000000000p+4, 0x1.8000000000000p+4, 0x1.c000000000000p+4,
	0x1.0000000000000p+5, 0x1.4000000000000p+5, 0x1.8000000000000p+5, 0x1.c000000000000p+5,
	0x1.0000000000000p+6, 0x1.4000000000000p+6, 0x1.8000000000000p+6, 0x1.c000000000000p+6,
	0x1.0000000000000p+7, 0x1.4000000000000p+7, 0x1.8000000000000p+7, 0x1.c000000000000p+7,
	0x1.0000000000000p+8, 0x1.4000000000000p+8, 0x1.8000000000000p+8, 0x1.c000000000000p+8,
	0x1.0000000000000p+9, 0x1.4000000000000p+9, 0x1.8000000000000p+9, 0x1.c000000000000p+9,
	0x1.0000000000000p+10, 0x1.4000000000000p+10, 0x1.8000000000000p+10, 0x1.c000000000000p+10,
	0x1.0000000000000p+11, 0x1.4000000000000p+11, 0x1.8000000000000p+11, 0x1.c000000000000p+11,
	0x1.0000000000000p+12, 0x1.4000000000000p+12, 0x1.8000000000000p+12, 0x1.c000000000000p+12,
	0x1.0000000000000p+13, 0x1.4000000000000p+13, 0x1.8000000000000p+13, 0x1.c000000000000p+13,
	0x1.0000000000000p+14, 0x1.4000000000000p+14, 0x1.8000000000000p+14, 0x1.c000000000000p+14,
	0x1.0000000000000p+15, 0x1.4000000000000p+15, 0x1.8000000000000p+15, 0x1.c000000000000p+15,
	INFINITY, NAN, NAN, NAN,
	-0.0, -0x1.0000000000000p-16, -0x1.0000000000000p-15, -0x1.8000000000000p-15,
	-0x1.0000000000000p-14, -0x1.4000000000000p-14, -0x1.8000000000000p-14, -0x1.c000000000000p-14,
	-0x1.0000000000000p-13, -0x1.4000000000000p-13, -0x1.8000000000000p-13, -0x1.c000000000000p-13,
	-0x1.0000000000000p-12, -0x1.4000000000000p-12, -0x1.8000000000000p-12, -0x1.c000000000000p-12,
	-0x1.0000000000000p-11, -0x1.4000000000000p-11, -0x1.8000000000000p-11, -0x1.c000000000000p-11,
	-0x1.0000000000000p-10, -0x1.4000000000000p-10, -0x1.8000000000000p-10, -0x1.c000000000000p-10,
	-0x1.0000000000000p-9, -0x1.4000000000000p-9, -0x1.8000000000000p-9, -0x1.c000000000000p-9,
	-0x1.0000000000000p-8, -0x1.4000000000000p-8, -0x1.8000000000000p-8, -0x1.c000000000000p-8,
	-0x1.0000000000000p-7, -0x1.4000000000000p-7, -0x1.8000000000000p-7, -0x1.c000000000000p-7,
	-0x1.0000000000000p-6, -0x1.4000000000000p-6, -0x1.8000000000000p-6, -0x1.c000000000000p-6,
	-0x1.0000000000000p-5, -0x1.4000000000000p-5, -0x1.8000000000000p-5, -0x1.c000000000000p-5,
	-0x1.0000000000000p-4, -0x1.4000000000000p-4, -0x1.8000000000000p-4, -0x1.c000000000000p-4,
	-0x1.0000000000000p-3, -0x1.4000000000000p-3, -0x1.8000000000000p-3, -0x1.c000000000000p-3,
	-0x1.0000000000000p-2, -0x1.4000000000000p-2, -0x1.8000000000000p-2, -0x1.c000000000000p-2,
	-0x1.0000000000000p-1, -0x1.4000000000000p-1, -0x1.8000000000000p-1, -0x1.c000000000000p-1,
	-0x1.0000000000000p+0, -0x1.4000000000000p+0, -0x1.8000000000000p+0, -0x1.c000000000000p+0,
	-0x1.0000000000000p+1, -0x1.4000000000000p+1, -0x1.8000000000000p+1, -0x1.c000000000000p+1,
	-0x1.0000000000000p+2, -0x1.4000000000000p+2, -0x1.8000000000000p+2, -0x1.c000000000000p+2,
	-0x1.0000000000000p+3, -0x1.4000000000000p+3, -0x1.8000000000000p+3, -0x1.c000000000000p+3,
	-0x1.0000000000000p+4, -0x1.4000000000000p+4, -0x1.8000000000000p+4, -0x1.c000000000000p+4,
	-0x1.0000000000000p+5, -0x1.4000000000000p+5, -0x1.8000000000000p+5, -0x1.c000000000000p+5,
	-0x1.0000000000000p+6, -0x1.4000000000000p+6, -0x1.8000000000000p+6, -0x1.c000000000000p+6,
	-0x1.0000000000000p+7, -0x1.4000000000000p+7, -0x1.8000000000000p+7, -0x1.c000000000000p+7,
	-0x1.0000000000000p+8, -0x1.4000000000000p+8, -0x1.8000000000000p+8, -0x1.c000000000000p+8,
	-0x1.0000000000000p+9, -0x1.4000000000000p+9, -0x1.8000000000000p+9, -0x1.c000000000000p+9,
	-0x1.0000000000000p+10, -0x1.4000000000000p+10, -0x1.8000000000000p+10, -0x1.c000000000000p+10,
	-0x1.0000000000000p+11, -0x1.4000000000000p+11, -0x1.8000000000000p+11, -0x1.c000000000000p+11,
	-0x1.0000000000000p+12, -0x1.4000000000000p+12, -0x1.8000000000000p+12, -0x1.c000000000000p+12,
	-0x1.0000000000000p+13, -0x1.4000000000000p+13, -0x1.8000000000000p+13, -0x1.c000000000000p+13,
	-0x1.0000000000000p+14, -0x1.4000000000000p+14, -0x1.8000000000000p+14, -0x1.c000000000000p+14,
	-0x1.0000000000000p+15, -0x1.4000000000000p+15, -0x1.8000000000000p+15, -0x1.c000000000000p+15,
	-INFINITY, NAN, NAN, NAN,
};

static int same(double a, double b)
{
	if (isnan(a) || isnan(b))
		return isnan(a) && isnan(b);
	return a == b && signbit(a) == signbit(b);
}

static void table_checks(void)
{
	int bad_ref[2] = {0, 0}, bad_rt[2] = {0, 0}, nan[2] = {0, 0};
	for (int c = 0; c < 256; c++) {
		bad_ref[0] += !same(ref_fp8_value(0, (unsigned)c), e4m3fn_table[c]);
		bad_ref[1] += !same(ref_fp8_value(1, (unsigned)c), e5m2_table[c]);
		bad_rt[0] += !same(fp8_to_f32(DT_F8_E4M3, (uint8_t)c), e4m3fn_table[c]);
		bad_rt[1] += !same(fp8_to_f32(DT_F8_E5M2, (uint8_t)c), e5m2_table[c]);
		nan[0] += fp8_is_nan(DT_F8_E4M3, (uint8_t)c);
		nan[1] += fp8_is_nan(DT_F8_E5M2, (uint8_t)c);
		/* NaN detection agrees with the table */
		if (fp8_is_nan(DT_F8_E4M3, (uint8_t)c) != isnan(e4m3fn_table[c]))
			bad_rt[0]++;
		if (fp8_is_nan(DT_F8_E5M2, (uint8_t)c) != isnan(e5m2_table[c]))
			bad_rt[1]++;
	}
	CHECKN("reference decoder: all 256 e4m3fn codes", bad_ref[0] == 0);
	CHECKN("reference decoder: all 256 e5m2 codes", bad_ref[1] == 0);
	CHECKN("runtime decoder: all 256 e4m3fn codes", bad_rt[0] == 0);
	CHECKN("runtime decoder: all 256 e5m2 codes", bad_rt[1] == 0);
	CHECK(nan[0] == 2 && isnan(e4m3fn_table[0x7f]) && isnan(e4m3fn_table[0xff]));
	CHECK(nan[1] == 6); /* S.11111.{01,10,11} */
	CHECK(e4m3fn_table[0x7e] == 448.0 && fp8_max(DT_F8_E4M3) == 448.0);
	CHECK(e5m2_table[0x7b] == 57344.0 && isinf(e5m2_table[0x7c]));
	CHECK(e4m3fn_table[0x01] == 0x1p-9); /* smallest subnormal */
}

static void encoder_checks(void)
{
	int bad = 0;
	/* every finite code round-trips */
	for (int c = 0; c < 256; c++) {
		if (!isnan(e4m3fn_table[c]) &&
		    f32_to_fp8(DT_F8_E4M3, (float)e4m3fn_table[c]) != c &&
		    !(c == 0x80 && f32_to_fp8(DT_F8_E4M3, -0.0f) == 0x80))
			bad++;
		if (isfinite(e5m2_table[c]) &&
		    f32_to_fp8(DT_F8_E5M2, (float)e5m2_table[c]) != c)
			bad++;
	}
	CHECKN("encoder: every finite code round-trips", bad == 0);
	/* ties to even: 1.0625 is between 1.0 (0x38) and 1.125 (0x39) */
	CHECK(f32_to_fp8(DT_F8_E4M3, 1.0625f) == 0x38);
	CHECK(f32_to_fp8(DT_F8_E4M3, 1.1875f) == 0x3a); /* 1.125|1.25 -> even */
	CHECK(f32_to_fp8(DT_F8_E4M3, 0x1.8p-10f) == 0x01); /* subnormal tie */
	CHECK(f32_to_fp8(DT_F8_E4M3, 1000.0f) == 0x7e);     /* saturates */
	CHECK(f32_to_fp8(DT_F8_E4M3, -1000.0f) == 0xfe);
	CHECK(f32_to_fp8(DT_F8_E4M3, 0x1p-6f * 0.999f) == 0x08); /* rounds up to min normal */
}

/* DAY0_KERNEL=name for what follows; "" unsets it (the CPU's best). */
static void use_kernel(const char *name)
{
	if (*name)
		setenv("DAY0_KERNEL", name, 1);
	else
		unsetenv("DAY0_KERNEL");
}

/*
 * convert's fast FP8 -> bf16/f16 (decode16: AVX2 arithmetic or memoised
 * tables) against decode followed by dtype_convert, bit for bit: every
 * code of both dtypes, runs that end mid-vector (cols 300 = 128+128+44),
 * a slice starting mid-row, and scales whose products go subnormal,
 * overflow to Inf, or are NaN.
 */
static void decode16_checks(void)
{
	enum { R = 5, C = 300, N = R * C };
	static uint8_t codes[N];
	static float f[N];
	static uint16_t want[N], got[N];
	const float scales[] = {1.0f, 0.0037f, 0x1p-140f, 3e35f, -2.5f, NAN,
				1.5e-3f};
	const int nsc = (int)(sizeof scales / sizeof scales[0]);
	const char *modes[] = {"", "portable", "avx2", "avx512"};
	uint32_t x = 12345;
	int bad[2][4][2] = {{{0}}};
	for (int i = 0; i < N; i++) {
		x = x * 1103515245u + 12345u;
		codes[i] = (uint8_t)(i < 256 ? (uint32_t)i : x >> 24);
	}
	for (int e5 = 0; e5 < 2; e5++) {
		struct quant_config q = {.kind = QUANT_FP8_BLOCK,
					 .fp8_dtype = e5 ? DT_F8_E5M2 : DT_F8_E4M3,
					 .block = {2, 128}};
		/* 3 block rows x 3 block columns of scales */
		float sc[9];
		for (int k = 0; k < 9; k++)
			sc[k] = scales[(k + e5) % nsc];
		struct quant_view v = {.rows = R, .cols = C, .values = codes,
				       .scale = sc, .scale_dtype = DT_F32,
				       .scale_cols = 3};
		for (int m = 0; m < 4; m++) {
			use_kernel(modes[m]);
			for (int to16 = 0; to16 < 2; to16++) {
				int to = to16 ? DT_F16 : DT_BF16;
				for (int sl = 0; sl < 2; sl++) { /* whole, or from 77 */
					uint64_t el0 = sl ? 77 : 0;
					size_t n = N - (size_t)el0;
					v.values = codes + el0;
					if (format_fp8.decode(&q, &v, el0, n, f) < 0 ||
					    dtype_convert(DT_F32, f, to, want, n) < 0 ||
					    format_fp8.decode16(&q, &v, el0, n, to, got) < 0 ||
					    memcmp(want, got, n * 2))
						bad[e5][m][to16]++;
				}
			}
		}
	}
	unsetenv("DAY0_KERNEL");
	CHECKN("decode16 e4m3 -> bf16 (the CPU's best: AVX-512 VBMI tables, ...) == decode + convert",
	       bad[0][0][0] == 0);
	CHECKN("decode16 e4m3 -> bf16 (tables) == decode + convert", bad[0][1][0] == 0);
	CHECKN("decode16 e4m3 -> bf16 (DAY0_KERNEL=avx2, avx512) == decode + convert",
	       bad[0][2][0] + bad[0][3][0] == 0);
	CHECKN("decode16 e4m3 -> f16 == decode + convert",
	       bad[0][0][1] + bad[0][1][1] + bad[0][2][1] + bad[0][3][1] == 0);
	CHECKN("decode16 e5m2 -> bf16 (the CPU's best: AVX-512 VBMI tables, ...) == decode + convert",
	       bad[1][0][0] == 0);
	CHECKN("decode16 e5m2 -> bf16 (tables) == decode + convert", bad[1][1][0] == 0);
	CHECKN("decode16 e5m2 -> bf16 (DAY0_KERNEL=avx2, avx512) == decode + convert",
	       bad[1][2][0] + bad[1][3][0] == 0);
	CHECKN("decode16 e5m2 -> f16 == decode + convert",
	       bad[1][0][1] + bad[1][1][1] + bad[1][2][1] + bad[1][3][1] == 0);
}

/*
 * The run-time kernels of decode16 (AVX-512 tables: VBMI's vpermi2b where
 * the CPU has it, else F+BW+VL's vpermt2w; AVX2 arithmetic) against DAY0_KERNEL=portable's scalar tables,
 * bit for bit: runs of every length 1..300 (one scale a row, so each row
 * is one run: the vector loop's tails of 1..31 codes and the short runs
 * below the tables' threshold), codes i * 7 + len (a run of 256 or more
 * holds all 256 codes, each row in other vector positions), both FP8 dtypes,
 * bf16 and f16, and scales whose products are subnormal, overflow or NaN.
 */
static void decode16_kernels_checks(void)
{
	enum { L = 300 };
	static uint8_t codes[L];
	static uint16_t want[L], got[L];
	const float scales[] = {1.0f, 0.0037f, 0x1p-140f, 3e35f, -2.5f, NAN};
	const char *kernels[] = {"", "avx2", "avx512"};
	int bad[2][3] = {{0}}, runs = 0;
	for (int e5 = 0; e5 < 2; e5++)
		for (int len = 1; len <= L; len++) {
			float sc = scales[len % 6];
			struct quant_config q = {.kind = QUANT_FP8_BLOCK,
						 .fp8_dtype = e5 ? DT_F8_E5M2
								 : DT_F8_E4M3,
						 .block = {1, 1024}};
			struct quant_view v = {.rows = 1, .cols = (uint64_t)len,
					       .values = codes, .scale = &sc,
					       .scale_dtype = DT_F32,
					       .scale_cols = 1};
			for (int i = 0; i < len; i++)
				codes[i] = (uint8_t)(i * 7 + len);
			for (int to16 = 0; to16 < 2; to16++) {
				int to = to16 ? DT_F16 : DT_BF16;
				setenv("DAY0_KERNEL", "portable", 1);
				if (format_fp8.decode16(&q, &v, 0, (size_t)len, to,
							want) < 0)
					bad[e5][0]++;
				for (int k = 0; k < 3; k++) {
					use_kernel(kernels[k]);
					memset(got, 0xa5, sizeof got);
					if (format_fp8.decode16(&q, &v, 0, (size_t)len,
								to, got) < 0 ||
					    memcmp(want, got, (size_t)len * 2) ||
					    got[len < L ? len : L - 1] !=
						    (len < L ? 0xa5a5 : got[L - 1]))
						bad[e5][k]++;
				}
				runs++;
			}
		}
	unsetenv("DAY0_KERNEL");
#if defined(__x86_64__) && defined(__GNUC__)
	printf("# decode16 kernels: %d runs compared, the CPU's best kernel: %s\n",
	       runs, __builtin_cpu_supports("avx512vbmi") ? "AVX-512 VBMI tables"
		     : __builtin_cpu_supports("avx512bw") ? "AVX-512 tables"
		     : __builtin_cpu_supports("avx2")   ? "AVX2"
							: "portable");
#else
	printf("# decode16 kernels: %d runs compared (portable only)\n", runs);
#endif
	CHECKN("decode16 e4m3 runs of 1..300: the CPU's best kernel == portable (no write past the run)",
	       bad[0][0] == 0);
	CHECKN("decode16 e4m3 runs of 1..300: DAY0_KERNEL=avx2 == portable", bad[0][1] == 0);
	CHECKN("decode16 e4m3 runs of 1..300: DAY0_KERNEL=avx512 (vpermt2w) == portable",
	       bad[0][2] == 0);
	CHECKN("decode16 e5m2 runs of 1..300: the CPU's best kernel == portable (no write past the run)",
	       bad[1][0] == 0);
	CHECKN("decode16 e5m2 runs of 1..300: DAY0_KERNEL=avx2 == portable", bad[1][1] == 0);
	CHECKN("decode16 e5m2 runs of 1..300: DAY0_KERNEL=avx512 (vpermt2w) == portable",
	       bad[1][2] == 0);
}

/*
 * decode16_rect (convert's writer lanes decode a column slice of a chunk
 * of rows with it) against decode16 row by row, bit for bit: slices that
 * start at block columns 0, 1 and 2 with widths that end mid-block, at the
 * row's end and mid-vector, row ranges that start and end inside block
 * rows, both FP8 dtypes, bf16 and f16, with the CPU's best kernel and
 * DAY0_KERNEL=avx512; blocks of 2 x 1 make 300 column blocks, more than
 * the 256 memoised tables, so the tables come in two groups.  Where it
 * cannot (a column not at a block's start, the AVX2 and portable kernels)
 * it says so (-1) and writes nothing.
 */
static void decode16_rect_checks(void)
{
	enum { R = 9, C = 300 };
	static uint8_t codes[R * C];
	static uint16_t want[R * C], got[R * C];
	const float scales[] = {1.0f, 0.0037f, 0x1p-140f, 3e35f, -2.5f, NAN, 1.5e-3f};
	const char *modes[] = {"", "avx512"};
	const int blocks[][2] = {{2, 128}, {4, 64}, {2, 1}};
	uint32_t x = 4242;
	int bad = 0, cases = 0, refused = 0, wrote = 0;
	float sc[R * C];
	for (int i = 0; i < R * C; i++) {
		x = x * 1103515245u + 12345u;
		codes[i] = (uint8_t)(i < 256 ? (uint32_t)i : x >> 24);
		sc[i] = scales[(uint32_t)i % 7];
	}
	for (int e5 = 0; e5 < 2; e5++)
		for (int bk = 0; bk < 3; bk++) {
			int br = blocks[bk][0], bc = blocks[bk][1];
			struct quant_config q = {.kind = QUANT_FP8_BLOCK,
						 .fp8_dtype = e5 ? DT_F8_E5M2 : DT_F8_E4M3,
						 .block = {br, bc}};
			struct quant_view v = {.rows = R, .cols = C,
					       .scale = sc, .scale_dtype = DT_F32,
					       .scale_cols = (uint64_t)(C + bc - 1) / (uint64_t)bc};
			for (int m = 0; m < 2; m++) {
				use_kernel(modes[m]);
				for (int to16 = 0; to16 < 2; to16++) {
					int to = to16 ? DT_F16 : DT_BF16;
					const uint64_t r0s[] = {0, 1, 3}, nrs[] = {1, 2, 6};
					for (int ri = 0; ri < 3; ri++)
						for (uint64_t cb = 0; cb < 3; cb++) {
							uint64_t r0 = r0s[ri], nr = nrs[ri];
							uint64_t c0 = cb * (uint64_t)bc;
							const uint64_t ws[] = {1, 63, 64, 65, C - c0};
							for (int wi = 0; wi < 5; wi++) {
								uint64_t w = ws[wi];
								if (c0 + w > C)
									continue;
								for (uint64_t r = 0; r < nr; r++) {
									v.values = codes + (r0 + r) * C + c0;
									if (format_fp8.decode16(&q, &v, (r0 + r) * C + c0,
												w, to, want + r * w) < 0)
										bad++;
								}
								memset(got, 0xa5, sizeof got);
								v.values = codes + r0 * C + c0;
								if (format_fp8.decode16_rect(&q, &v, r0, nr, c0, w,
											     to, got) < 0 ||
								    memcmp(want, got, nr * w * 2) ||
								    got[nr * w] != 0xa5a5)
									bad++;
								cases++;
							}
						}
				}
			}
		}
	/* refusals: a column inside a block, the kernels without block lookups */
	{
		struct quant_config q = {.kind = QUANT_FP8_BLOCK, .fp8_dtype = DT_F8_E4M3,
					 .block = {2, 128}};
		struct quant_view v = {.rows = R, .cols = C, .values = codes + 5,
				       .scale = sc, .scale_dtype = DT_F32, .scale_cols = 3};
		const char *none[] = {"avx2", "portable"};
		unsetenv("DAY0_KERNEL");
		memset(got, 0xa5, sizeof got);
		refused += format_fp8.decode16_rect(&q, &v, 0, 2, 5, 100, DT_BF16, got) < 0;
		for (int k = 0; k < 2; k++) {
			setenv("DAY0_KERNEL", none[k], 1);
			v.values = codes;
			refused += format_fp8.decode16_rect(&q, &v, 0, 2, 0, 100, DT_BF16, got) < 0;
		}
		for (int i = 0; i < R * C; i++)
			wrote += got[i] != 0xa5a5;
	}
	unsetenv("DAY0_KERNEL");
	printf("# decode16_rect: %d slices compared\n", cases);
	int has512 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		 __builtin_cpu_supports("avx512vl");
#endif
	if (has512)
		CHECKN("decode16_rect (column slices of row ranges, 300 column blocks too) == decode16 row by row",
		       bad == 0 && cases > 100);
	else
		CHECKN("decode16_rect refuses every slice without AVX-512 (convert decodes row by row)",
		       bad == cases);
	CHECKN("decode16_rect refuses a column inside a block and the AVX2 / portable kernels, writing nothing",
	       refused == 3 && wrote == 0);
}

/*
 * verify's NaN-code count (format check) with the CPU's kernel (AVX-512
 * BW where it has it) against DAY0_KERNEL=portable and a plain loop:
 * lengths 0..300 (every tail of the 64-byte steps) and a 70000-byte
 * buffer (past the SSE2 loop's 255-step fold), e4m3 and e5m2, random
 * codes with the NaN codes (and their neighbours) planted densely.
 */
static void nan_count_checks(void)
{
	enum { BIG = 70000 };
	static uint8_t b[BIG];
	const char *kernels[] = {"", "portable"};
	uint32_t x = 777;
	int bad = 0, cases = 0;
	for (int i = 0; i < BIG; i++) {
		x = x * 1103515245u + 12345u;
		b[i] = (uint8_t)(x >> 24);
		if ((x >> 8) % 5 == 0)
			b[i] = (uint8_t)((x >> 16) & 1 ? 0xfd + (x >> 20) % 3
						       : 0x7c + (x >> 20) % 4);
	}
	for (int e5 = 0; e5 < 2; e5++) {
		int dt = e5 ? DT_F8_E5M2 : DT_F8_E4M3;
		struct quant_config q = {.kind = QUANT_FP8_BLOCK, .fp8_dtype = dt,
					 .block = {128, 128}};
		struct stored_part part = {.kind = PART_VALUES, .dtype = dt};
		for (int len = 0; len <= 301; len++) {
			uint64_t n = len == 301 ? BIG : (uint64_t)len, want = 0;
			const uint8_t *at = b + (len == 301 ? 0 : len % 7);
			for (uint64_t i = 0; i < n; i++)
				want += fp8_is_nan(dt, at[i]);
			for (int k = 0; k < 2; k++) {
				struct part_check c = {0};
				use_kernel(kernels[k]);
				format_fp8.check(&q, &part, dt, at, n, 0, &c);
				bad += c.bad != want;
				cases++;
			}
		}
	}
	unsetenv("DAY0_KERNEL");
	printf("# NaN-code count: %d cases\n", cases);
	CHECKN("verify's NaN-code count (the CPU's kernel and portable) == a plain loop, "
	       "lengths 0..300 and 70000, e4m3 and e5m2", bad == 0);
}

static void packed_checks(void)
{
	struct quant_config q;
	struct quant_view v;
	float in[16], out[16];
	uint16_t scale[2] = {0x3f80, 0x4000}; /* bf16 1.0, 2.0 */
	uint32_t words[2];
	memset(&q, 0, sizeof q);
	q.kind = QUANT_PACKED_INT;
	q.bits = 4;
	q.group = 8;
	for (int i = 0; i < 16; i++)
		in[i] = (float)((i % 16) - 8) * (i < 8 ? 1.0f : 2.0f);
	memset(&v, 0, sizeof v);
	v.rows = 1;
	v.cols = 16;
	v.scale = scale;
	v.scale_dtype = DT_BF16;
	v.scale_cols = 2;
	format_ct.encode(&q, &v, 0, 16, in, words);
	/* offset binary, least significant nibble first: -8..-1 -> 0..7 */
	CHECK(words[0] == 0x76543210u);
	/* 0..7 at scale 2 -> values 0,2,..14 / 2 -> 0..7, + 8 -> 8..15 */
	CHECK(words[1] == 0xfedcba98u);
	v.values = words;
	CHECK(format_ct.decode(&q, &v, 0, 16, out) == 0);
	CHECK(memcmp(in, out, sizeof in) == 0);
	CHECK(format_ct.decode(&q, &v, 3, 5, out) == -1); /* not on a word */
}

static void config_checks(void)
{
	struct model_config c;
	struct d0_err err;
	struct tensor_spec t;
	const char *root = getenv("DAY0_ROOT") ? getenv("DAY0_ROOT") : ".";
	char p[4096];
	snprintf(p, sizeof p, "%s/assets/configs/kimi-k2-thinking.json", root);
	CHECK(model_config_load(p, &c, &err) == 0);
	CHECK(c.qc.kind == QUANT_PACKED_INT && c.qc.bits == 4 && c.qc.group == 32);
	memset(&t, 0, sizeof t);
	t.ndim = 2;
	t.shape[0] = 2048;
	t.shape[1] = 7168;
	t.role = ROLE_COL;
	snprintf(t.name, sizeof t.name, "model.layers.5.mlp.experts.17.gate_proj.weight");
	CHECK(quant_applies(&c.qc, &t));
	snprintf(t.name, sizeof t.name, "model.layers.5.mlp.shared_experts.gate_proj.weight");
	CHECK(!quant_applies(&c.qc, &t)); /* re:.*shared_experts.* */
	snprintf(t.name, sizeof t.name, "model.layers.0.mlp.gate_proj.weight");
	CHECK(!quant_applies(&c.qc, &t)); /* re:.*mlp\.(gate|up|gate_up|down)_proj.* */
	snprintf(t.name, sizeof t.name, "model.layers.3.self_attn.kv_b_proj.weight");
	CHECK(!quant_applies(&c.qc, &t)); /* re:.*self_attn.* */
	model_config_free(&c);
	snprintf(p, sizeof p, "%s/assets/configs/deepseek-v3.json", root);
	CHECK(model_config_load(p, &c, &err) == 0);
	CHECK(c.qc.kind == QUANT_FP8_BLOCK && c.qc.block[0] == 128 &&
	      c.qc.fp8_dtype == DT_F8_E4M3);
	t.role = ROLE_ROUTER;
	CHECK(!quant_applies(&c.qc, &t)); /* routers stay unquantised */
	t.role = ROLE_ROW;
	{
		struct stored_part sp[3];
		t.shape[0] = 7168;
		t.shape[1] = 2049; /* a partial last block */
		snprintf(t.name, sizeof t.name, "model.layers.3.mlp.down_proj.weight");
		CHECK(quant_parts(&c.qc, &t, DT_BF16, sp) == 2);
		CHECK(!strcmp(sp[1].name, "model.layers.3.mlp.down_proj.weight_scale_inv"));
		CHECK(sp[1].shape[0] == 56 && sp[1].shape[1] == 17);
	}
	model_config_free(&c);
	{
		/* fp8's modules_to_not_convert: substrings of module names */
		json_t *doc = json_pack(
			"{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:{s:s, s:s, "
			"s:[i,i], s:[s,s]}}",
			"model_type", "qwen3_moe", "hidden_size", 256,
			"num_hidden_layers", 2, "num_attention_heads", 4,
			"num_key_value_heads", 2, "vocab_size", 512,
			"intermediate_size", 512, "num_experts", 8,
			"quantization_config", "quant_method", "fp8", "fmt", "e4m3",
			"weight_block_size", 128, 128, "modules_to_not_convert",
			"lm_head", "layers.1.self_attn");
		CHECK(model_config_from_json(doc, "cfg", &c, &err) == 0);
		t.role = ROLE_Q;
		snprintf(t.name, sizeof t.name, "model.layers.1.self_attn.q_proj.weight");
		CHECK(!quant_applies(&c.qc, &t));
		snprintf(t.name, sizeof t.name, "model.layers.0.self_attn.q_proj.weight");
		CHECK(quant_applies(&c.qc, &t));
		model_config_free(&c);
		json_decref(doc);
	}
}

int main(void)
{
	table_checks();
	encoder_checks();
	decode16_checks();
	decode16_kernels_checks();
	decode16_rect_checks();
	nan_count_checks();
	packed_checks();
	config_checks();
	return unit_done();
}
