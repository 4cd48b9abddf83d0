/* Kernels against independent references and the properties they must have. */
#include "engine.h"
#include "unit.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

static float frand(struct rng *r)
{
	return (float)(rng_uniform(r) * 2 - 1);
}

static struct model_config rope_cfg(const char *type, double factor)
{
	struct model_config c;
	memset(&c, 0, sizeof c);
	c.rope_theta = 10000.0;
	c.max_pos = 8192;
	snprintf(c.rope.type, sizeof c.rope.type, "%s", type);
	c.rope.factor = factor;
	c.rope.original_max_pos = 8192;
	c.rope.low_freq_factor = 1;
	c.rope.high_freq_factor = 4;
	c.rope.beta_fast = 32;
	c.rope.beta_slow = 1;
	return c;
}

/* The nearest bf16 to f (ties to even), by comparing the two candidates
 * in double: independent of the kernels' integer rounding. */
static float ref_bf16(float f)
{
	uint32_t u, lo, hi;
	float fl, fh;
	if (!isfinite(f))
		return f;
	memcpy(&u, &f, 4);
	lo = u & 0xffff0000u, hi = lo + 0x10000u;
	memcpy(&fl, &lo, 4);
	memcpy(&fh, &hi, 4);
	/* past the largest finite bf16, the next step is 2^128 (Inf) */
	double dl = fabs((double)f - fl), dh = fabs((isinf(fh) ? ldexp(1, 128) : (double)fh) - f);
	if (dl < dh || (dl == dh && !(lo & 0x10000u)))
		return fl;
	return fh;
}

/* op_parallel_for's items: each counts its visits and checks its slot. */
struct visits {
	atomic_int n[257];
	atomic_int bad_slot;
	int threads;
};

static void visit(void *ctx, int i, int slot)
{
	struct visits *v = ctx;
	atomic_fetch_add(&v->n[i], 1);
	if (slot < 0 || slot >= v->threads)
		atomic_fetch_add(&v->bad_slot, 1);
}

int main(void)
{
	struct rng r;
	rng_seed(&r, 42);

#if defined(__x86_64__)
	{ /* the kernel in use is the best this CPU has, and every kernel the
	   * CPU has can be chosen (the checks below run each of them) */
		int a512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
		int a2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
		const char *best = a512 ? "avx512" : a2 ? "avx2+fma" : "portable";
		printf("# GEMV kernel on this CPU: %s\n", op_bf16_kernel());
		CHECK(!strcmp(op_bf16_kernel(), best));
		CHECK((op_bf16_set_kernel("avx512") == 0) == a512);
		CHECK((op_bf16_set_kernel("avx512-stream") == 0) == a512);
		CHECK(!a512 || !strcmp(op_bf16_kernel(), "avx512-stream"));
		CHECK((op_bf16_set_kernel("avx2") == 0) == a2);
		/* avx512-vbmi: the AVX-512 GEMV (attention asks for its name)
		 * with FP8 e4m3 by the VBMI tables; by GFNI otherwise where the
		 * CPU has it */
		int vbmi = a512 && __builtin_cpu_supports("avx512vbmi");
		int gfni = vbmi && __builtin_cpu_supports("gfni");
		int dp = gfni && __builtin_cpu_supports("avx512bf16");
		CHECK((op_bf16_set_kernel("avx512-vbmi") == 0) == vbmi);
		CHECK(!vbmi || (!strcmp(op_bf16_kernel(), "avx512") && !op_fp8_gfni()));
		CHECK(op_bf16_set_kernel("portable") == 0 && op_bf16_set_kernel(NULL) == 0 &&
		      !strcmp(op_bf16_kernel(), best));
		printf("# FP8 e4m3 decode kernel: %s\n", gfni ? "gfni" : vbmi ? "vbmi" : "f16c");
		CHECK(op_fp8_gfni() == gfni);
		/* the e4m3 kernels by name, each named in perf's kernel field */
		CHECK((op_bf16_set_kernel("avx512-gfx4") == 0) == gfni);
		CHECK(!gfni || (!strcmp(op_fp8_e4m3_kernel(), "gfx4") &&
				!strcmp(op_kernels(), "avx512-gfx4")));
		CHECK((op_bf16_set_kernel("avx512-gf4") == 0) == gfni);
		CHECK(!gfni || (!strcmp(op_fp8_e4m3_kernel(), "gf4") &&
				!strcmp(op_kernels(), "avx512-gf4")));
		CHECK((op_bf16_set_kernel("avx512-dp4") == 0) == dp);
		CHECK(!dp || (!strcmp(op_fp8_e4m3_kernel(), "dp4") &&
			      !strcmp(op_kernels(), "avx512-dp4") && op_fp8_wants_nosub()));
		CHECK(!vbmi || (op_bf16_set_kernel("avx512-vbmi") == 0 &&
				!strcmp(op_fp8_e4m3_kernel(), "vbmi") &&
				!strcmp(op_kernels(), "avx512-vbmi")));
		/* the default: dp (subnormal codes out at load) where the CPU
		 * has AVX512-BF16, else gfx */
		CHECK(op_bf16_set_kernel(NULL) == 0 && op_fp8_wants_nosub() == dp &&
		      !strcmp(op_fp8_e4m3_kernel(), dp ? "dp4" : gfni ? "gfx4" : vbmi ? "vbmi" : a2 ? "f16c" : "portable"));
		CHECK(op_bf16_set_kernel("avx512-gf4") < 0 || op_fp8_wants_nosub());
		op_bf16_set_kernel(NULL);
	}
#endif

	{ /* linear = naive x W^T + b */
		float x[3 * 5], w[4 * 5], b[4], y[3 * 4];
		int bad = 0;
		for (int i = 0; i < 15; i++) x[i] = frand(&r);
		for (int i = 0; i < 20; i++) w[i] = frand(&r);
		for (int i = 0; i < 4; i++) b[i] = frand(&r);
		op_linear(y, x, w, b, 3, 4, 5);
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 4; j++) {
				double s = b[j];
				for (int k = 0; k < 5; k++)
					s += (double)x[i * 5 + k] * w[j * 5 + k];
				bad += fabs(s - y[i * 4 + j]) > 1e-5;
			}
		CHECKN("linear matches the naive product", bad == 0);
	}
	{ /* f32 weights, one row of x (decode): the four-stream kernel over
	   * the pool and its remainders, or sgemv, against float64 */
		static const int shapes[][2] = {{7, 5},    {300, 37},  {64, 1024},
						{513, 200}, {2000, 1030}, {3, 16},
						{1024, 2816}, {9, 4100}};
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream"};
		for (size_t q = 0; q < 4; q++) {
			char name[96];
			int bad = 0;
			if (op_bf16_set_kernel(kern[q]) < 0)
				continue;
			for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
				int n = shapes[z][0], k = shapes[z][1];
				float *x = malloc((size_t)k * 4), *y = malloc((size_t)n * 4);
				float *b = malloc((size_t)n * 4), *w = malloc((size_t)n * k * 4);
				struct wmat wm = {.p = w, .dtype = DT_F32};
				for (int i = 0; i < k; i++) x[i] = frand(&r);
				for (int i = 0; i < n; i++) b[i] = frand(&r);
				for (int i = 0; i < n * k; i++) w[i] = frand(&r);
				op_linear_w(y, x, &wm, b, 1, n, k);
				for (int j = 0; j < n; j++) {
					double sm = b[j], mag = fabs(b[j]);
					for (int c = 0; c < k; c++) {
						sm += (double)x[c] * w[(size_t)j * k + c];
						mag += fabs((double)x[c] * w[(size_t)j * k + c]);
					}
					bad += fabs(sm - y[j]) > 1e-6 * mag + 1e-6;
				}
				free(x); free(y); free(b); free(w);
			}
			snprintf(name, sizeof name, "f32 linear, one row (%s), matches float64", kern[q]);
			CHECKN(name, bad == 0);
		}
	}
	{ /* bf16 weights as stored: every kernel and shape (decode rows, the
	   * GEMV's 4-row blocks, the sgemm panels, tails of k) against the
	   * float64 product of the same bf16 values */
		static const int shapes[][3] = {{1, 7, 5},     {1, 300, 37},
						{3, 64, 1024}, {5, 33, 16},
						{8, 513, 200}, {9, 40, 17},
						{20, 70, 300}, {2, 16, 4100},
						{1, 50, 1000}, {4, 9, 130},
						{16, 3000, 512}, {12, 1, 64},
						/* one row: a last block of 16 after
						 * the 32-wide steps, with and
						 * without a tail, threaded */
						{1, 20, 48},   {1, 9, 57},
						{1, 200, 1040}, {1, 300, 1049},
						/* AVX-512: a last block of 32
						 * after the 64-wide steps, more
						 * rows with a tail of 32 */
						{1, 20, 96},   {1, 33, 160},
						{3, 10, 100},  {4, 17, 65}};
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream"};
		for (size_t q = 0; q < 4; q++) {
			char name[96];
			int bad = 0;
			if (op_bf16_set_kernel(kern[q]) < 0)
				continue;
			for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
				int m = shapes[z][0], n = shapes[z][1], k = shapes[z][2];
				float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4);
				float *b = malloc((size_t)n * 4), *wf = malloc((size_t)n * k * 4);
				uint16_t *w = malloc((size_t)n * k * 2);
				struct wmat wm = {.p = w, .dtype = DT_BF16};
				for (int i = 0; i < m * k; i++) x[i] = frand(&r);
				for (int i = 0; i < n; i++) b[i] = frand(&r);
				for (int i = 0; i < n * k; i++) {
					float f = frand(&r);
					uint32_t u;
					memcpy(&u, &f, 4);
					w[i] = (uint16_t)(u >> 16);
				}
				op_bf16_widen(wf, w, (size_t)n * k);
				op_linear_w(y, x, &wm, b, m, n, k);
				for (int i = 0; i < m; i++)
					for (int j = 0; j < n; j++) {
						double sm = b[j], mag = fabs(b[j]);
						for (int c = 0; c < k; c++) {
							sm += (double)x[i * k + c] * wf[j * k + c];
							mag += fabs((double)x[i * k + c] * wf[j * k + c]);
						}
						bad += fabs(sm - y[i * n + j]) > 1e-6 * mag + 1e-6;
					}
				free(x); free(y); free(b); free(wf); free(w);
			}
			snprintf(name, sizeof name, "bf16 linear (%s) matches the "
				 "float64 product of its bf16 values", kern[q]);
			CHECKN(name, bad == 0);
		}
		{
			uint16_t h[3] = {0x3f80, 0xc000, 0x0000};
			float f[3];
			op_bf16_widen(f, h, 3);
			CHECK(f[0] == 1.0f && f[1] == -2.0f && f[2] == 0.0f);
		}
		for (size_t q = 0; q < 4; q++) {
			/* every bf16 code (NaN, Inf, subnormals too) widens to
			 * the f32 with it as its top half, through each kernel,
			 * from an odd start and with a tail */
			uint16_t *h = malloc(65536 * 2 + 2);
			float *f = malloc(65536 * 4 + 4);
			int bad = 0;
			char name[96];
			if (op_bf16_set_kernel(kern[q]) < 0) {
				free(h);
				free(f);
				continue;
			}
			for (uint32_t c = 0; c < 65536; c++)
				h[c + 1] = (uint16_t)c;
			op_bf16_widen(f + 1, h + 1, 65535);
			for (uint32_t c = 0; c < 65535; c++) {
				uint32_t u;
				memcpy(&u, &f[c + 1], 4);
				bad += u != c << 16;
			}
			snprintf(name, sizeof name, "bf16 widening (%s): all 65535 "
				 "codes exact", kern[q]);
			CHECKN(name, bad == 0);
			free(h);
			free(f);
		}
	}
	{ /* block-scaled FP8 weights as stored (e4m3 and e5m2), every kernel
	   * and shape (one row and the 4-row GEMV blocks, prefill panels,
	   * blocks of 16 and 128, blocks that do not divide the matrix or
	   * are wider than it, tails of k inside a block) against the float64
	   * product of the codes' values times their block's scale */
		static const int shapes[][5] = {
			{1, 7, 5, 128, 128},    {1, 300, 37, 16, 16},  {3, 64, 1024, 128, 128},
			{5, 33, 48, 16, 16},    {8, 513, 200, 128, 128}, {1, 257, 300, 7, 5},
			{20, 70, 300, 16, 16},  {16, 3000, 512, 128, 128}, {12, 1, 64, 16, 16},
			{1, 3000, 2048, 128, 128}, {4, 9, 130, 32, 64}, {2, 40, 33, 3, 33},
			/* one row, blocks of whole 64s (AVX-512 VBMI's table
			 * kernel): a partial last block, a tail past the last
			 * 64, blocks of one 64 */
			{1, 9, 200, 128, 128},  {1, 50, 256, 64, 64},  {1, 33, 136, 64, 64},
			{1, 70, 1024, 128, 128}};
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream",
				      "avx512-vbmi"};
		const int dts[] = {DT_F8_E4M3, DT_F8_E5M2};
		for (size_t q = 0; q < 5; q++)
			for (size_t d = 0; d < 2; d++) {
				char name[128];
				int bad = 0, bad_w = 0, dt = dts[d];
				if (op_bf16_set_kernel(kern[q]) < 0)
					continue;
				for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
					int m = shapes[z][0], n = shapes[z][1], k = shapes[z][2];
					int br = shapes[z][3], bc = shapes[z][4];
					int gr = (n + br - 1) / br, gc = (k + bc - 1) / bc;
					float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4);
					float *b = malloc((size_t)n * 4), *row = malloc((size_t)k * 4);
					float *sraw = malloc((size_t)gr * gc * 4), *sk = malloc((size_t)gr * gc * 4);
					uint8_t *w = malloc((size_t)n * k);
					struct wmat wm = {.p = w, .dtype = dt, .scale = sk, .br = br,
							  .bc = bc, .sc_cols = gc};
					for (int i = 0; i < m * k; i++) x[i] = frand(&r);
					for (int i = 0; i < n; i++) b[i] = frand(&r);
					for (int i = 0; i < gr * gc; i++) {
						sraw[i] = (float)ldexp(0.5 + rng_uniform(&r), -6);
						sk[i] = sraw[i] * op_fp8_scale_factor(dt);
					}
					for (int i = 0; i < n * k; i++) {
						uint8_t c;
						do
							c = (uint8_t)(rng_uniform(&r) * 256);
						while (!isfinite(fp8_to_f32(dt, c)));
						w[i] = c;
					}
					op_linear_w(y, x, &wm, b, m, n, k);
					for (int i = 0; i < m; i++)
						for (int j = 0; j < n; j++) {
							double sm = b[j], mag = fabs(b[j]);
							for (int c = 0; c < k; c++) {
								double wv = (double)fp8_to_f32(dt, w[(size_t)j * k + c]) *
									    sraw[(j / br) * gc + c / bc];
								sm += x[i * k + c] * wv;
								mag += fabs(x[i * k + c] * wv);
							}
							bad += fabs(sm - y[i * n + j]) > 1e-6 * mag + 1e-6;
						}
					/* a row widened (embedding) is each code's value
					 * times its scale rounded once, as load's f32 */
					for (int j = 0; j < n; j += n / 3 + 1) {
						op_embedding_w(row, &wm, j, k);
						for (int c = 0; c < k; c++)
							bad_w += row[c] != (float)((double)fp8_to_f32(dt, w[(size_t)j * k + c]) *
										   sraw[(j / br) * gc + c / bc]);
					}
					free(x); free(y); free(b); free(row); free(sraw); free(sk); free(w);
				}
				snprintf(name, sizeof name, "%s linear (%s) matches the float64 "
					 "product of its scaled codes", dtype_name(dt), kern[q]);
				CHECKN(name, bad == 0);
				snprintf(name, sizeof name, "%s rows widen (%s) to load's f32 exactly",
					 dtype_name(dt), kern[q]);
				CHECKN(name, bad_w == 0);
			}
		op_bf16_set_kernel(NULL);
	}
	{ /* FP8 e4m3 decode by GFNI bit moves (the default where the CPU has
	   * GFNI) against the VBMI tables it replaced: the same bf16 value for
	   * every code, so the same y bit for bit, on rows of every finite code
	   * (zero, the subnormals, every exponent, both signs, each in every
	   * position of a 64-code step), one row of x with a tail past the
	   * last 64, rows past the four streams' quarters; and against
	   * float64 (the shapes test above) */
		int gfni = 0;
#if defined(__x86_64__)
		gfni = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi") &&
		       __builtin_cpu_supports("gfni");
#endif
		if (gfni) {
			static const int shapes[][3] = {{1031, 1024, 128}, {70, 200, 128},
							{9, 2816, 128}, {1, 64, 64}};
			int bad = 0, nonzero = 0;
			for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
				int n = shapes[z][0], k = shapes[z][1], bc = shapes[z][2];
				int gr = (n + 127) / 128, gc = (k + bc - 1) / bc;
				float *x = malloc((size_t)k * 4), *ya = malloc((size_t)n * 4);
				float *yb = malloc((size_t)n * 4), *sc = malloc((size_t)gr * gc * 4);
				uint8_t *w = malloc((size_t)n * k);
				struct wmat wm = {.p = w, .dtype = DT_F8_E4M3, .scale = sc, .br = 128,
						  .bc = bc, .sc_cols = gc};
				const struct wmat *wp = &wm;
				const float *bp = NULL;
				for (int i = 0; i < k; i++) x[i] = frand(&r);
				for (int i = 0; i < gr * gc; i++)
					sc[i] = (float)ldexp(0.5 + rng_uniform(&r), -6) * 256;
				/* codes 0..255 but the NaNs (0x7f, 0xff), in turn,
				 * shifted by one each row */
				for (size_t i = 0; i < (size_t)n * k; i++) {
					uint8_t c = (uint8_t)((i + i / (size_t)k) % 254);
					w[i] = c >= 0x7f ? (uint8_t)(c + 1) : c;
				}
				CHECK(op_bf16_set_kernel("avx512-vbmi") == 0);
				op_linear_many(1, &ya, &wp, &bp, &n, x, 1, k);
				CHECK(op_bf16_set_kernel(NULL) == 0 && op_fp8_gfni());
				op_linear_many(1, &yb, &wp, &bp, &n, x, 1, k);
				for (int j = 0; j < n; j++) {
					bad += memcmp(&ya[j], &yb[j], 4) != 0;
					nonzero += ya[j] != 0;
				}
				free(x); free(ya); free(yb); free(sc); free(w);
			}
			CHECKN("e4m3 decode by GFNI = by the VBMI tables, bit for bit, every code",
			       bad == 0 && nonzero > 1000);
		} else {
			printf("# no GFNI + AVX-512 VBMI on this CPU: the GFNI kernel is not run\n");
		}
	}
	{ /* e4m3 with its subnormal codes taken out at load (the runtime's
	   * op_fp8_take_subnormals: each a zero of its sign in the codes, kept
	   * in a sparse list that every kernel adds back), which the GFNI
	   * kernel gf4 (value x 2^-120, no patch; DAY0_KERNEL=avx512-gf4)
	   * needs: every kernel,
	   * 1..8 and 12/20 (prefill) rows of x, every finite code in every
	   * position, blocks of 128 and 64 (partial last blocks, tails past
	   * the last 64), rows past the four streams' quarters, and a matrix
	   * of subnormals and zeros only (were they dropped, y would be the
	   * bias alone), against float64 of the ORIGINAL codes; rows widen to
	   * load's f32 exactly; gf4 = the tables bit for bit on one row */
		static const int shapes[][5] = {
			{1, 1031, 1024, 128, 128}, {1, 70, 200, 128, 128}, {1, 9, 136, 64, 64},
			{2, 33, 300, 128, 128},    {3, 64, 256, 64, 64},   {4, 130, 1040, 128, 128},
			{5, 17, 64, 64, 64},       {8, 40, 200, 128, 128}, {6, 9, 130, 32, 64},
			{7, 300, 37, 16, 16},      {12, 70, 300, 128, 128}, {20, 257, 512, 128, 128},
			/* subnormals and zeros only: decode, prefill */
			{1, 300, 1024, 128, 128}, {16, 200, 256, 128, 128}, {1, 64, 1040, 128, 128}, {1, 1024, 2816, 128, 128}};
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream",
				      "avx512-vbmi", "avx512-gfx4", "avx512-gf4", "avx512-dp4", NULL};
		int nsub_all = 0, listed_all = 0, left = 0, eq_bad = 0, eq_n = 0;
		for (size_t q = 0; q < sizeof kern / sizeof *kern; q++) {
			char name[160];
			int bad = 0, bad_w = 0, ran = 0;
			if (op_bf16_set_kernel(kern[q]) < 0)
				continue;
			for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
				int m = shapes[z][0], n = shapes[z][1], k = shapes[z][2];
				int br = shapes[z][3], bc = shapes[z][4], only_sub = z == 12 || z == 13;
				int gr = (n + br - 1) / br, gc = (k + bc - 1) / bc;
				float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4);
				float *b = malloc((size_t)n * 4), *row = malloc((size_t)k * 4);
				float *sraw = malloc((size_t)gr * gc * 4), *sk = malloc((size_t)gr * gc * 4);
				uint8_t *w = malloc((size_t)n * k), *orig = malloc((size_t)n * k);
				struct wmat wm = {.p = w, .dtype = DT_F8_E4M3, .scale = sk, .br = br,
						  .bc = bc, .sc_cols = gc};
				uint64_t ns;
				void *sub;
				for (int i = 0; i < m * k; i++) x[i] = frand(&r);
				for (int i = 0; i < n; i++) b[i] = frand(&r);
				for (int i = 0; i < gr * gc; i++) {
					sraw[i] = (float)ldexp(0.5 + rng_uniform(&r), -6);
					sk[i] = sraw[i] * op_fp8_scale_factor(DT_F8_E4M3);
				}
				/* every code but the NaNs in turn, shifted by one a
				 * row; or subnormals and zeros of both signs only */
				for (size_t i = 0; i < (size_t)n * k; i++) {
					uint8_t c = (uint8_t)((i + i / (size_t)k) % 254);
					c = c >= 0x7f ? (uint8_t)(c + 1) : c;
					w[i] = orig[i] = only_sub ? (uint8_t)(c & 0x87) : c;
				}
				ns = op_fp8_subnormals(&wm, n, k);
				sub = ns ? malloc(op_fp8_sub_bytes(n, ns)) : NULL;
				op_fp8_take_subnormals(&wm, n, k, sub);
				if (q == 0) {
					nsub_all += (int)ns;
					listed_all += sub ? (int)wm.sub_row[n] : 0;
					left += (int)op_fp8_subnormals(&wm, n, k);
				}
				op_linear_w(y, x, &wm, b, m, n, k);
				for (int i = 0; i < m; i++)
					for (int j = 0; j < n; j++) {
						double sm = b[j], mag = fabs(b[j]);
						for (int c = 0; c < k; c++) {
							double wv = (double)fp8_to_f32(DT_F8_E4M3, orig[(size_t)j * k + c]) *
								    sraw[(j / br) * gc + c / bc];
							sm += x[i * k + c] * wv;
							mag += fabs(x[i * k + c] * wv);
						}
						/* prefill on oneDNN rounds W and x to bf16
						 * (its own test below); sgemm and the GEMVs
						 * are f32 sums, dp's (one row of x: decode)
						 * of x to 16 bits, hi + lo */
						int dp_row = m == 1 && !strcmp(op_fp8_e4m3_kernel(), "dp4");
						bad += fabs(sm - y[i * n + j]) >
						       (m > 8 && op_onednn_ready() && !kern[q] ? ldexp(mag, -7)
							: dp_row ? ldexp(mag, -16) + 1e-6
								 : 1e-6 * mag + 1e-6);
						ran++;
					}
				for (int j = 0; j < n; j += n / 3 + 1) {
					op_embedding_w(row, &wm, j, k);
					for (int c = 0; c < k; c++)
						bad_w += row[c] != (float)((double)fp8_to_f32(DT_F8_E4M3, orig[(size_t)j * k + c]) *
									   sraw[(j / br) * gc + c / bc]);
				}
				if (kern[q] && !strcmp(kern[q], "avx512-gf4") && m == 1 && n % 4 == 0) {
					/* gf4 against the tables on the same
					 * taken-out codes and list: the same products
					 * (value x 2^-120 times x x 2^64 is value x 2^-8
					 * times x, scaled by 2^-48 exactly), summed in
					 * the same order where every row is in one of
					 * the four streams (n % 4 == 0 and the chunks'
					 * rows multiples of 8; the rows past them are
					 * summed in another order by each) */
					float *ya = malloc((size_t)n * 4);
					const struct wmat *wp = &wm;
					const float *bp = NULL;
					CHECK(op_bf16_set_kernel("avx512-vbmi") == 0);
					op_linear_many(1, &ya, &wp, &bp, &n, x, 1, k);
					CHECK(op_bf16_set_kernel(kern[q]) == 0 && !strcmp(op_fp8_e4m3_kernel(), "gf4"));
					op_linear_many(1, &y, &wp, &bp, &n, x, 1, k);
					for (int j = 0; j < n; j++)
						eq_bad += memcmp(&ya[j], &y[j], 4) != 0, eq_n++;
					free(ya);
				}
				free(x); free(y); free(b); free(row); free(sraw); free(sk); free(w);
				free(orig); free(sub);
			}
			snprintf(name, sizeof name, "e4m3 with subnormals taken out (%s%s%s) matches "
				 "float64 of the original codes (%d outputs)", kern[q] ? kern[q] : "default: ",
				 kern[q] ? "" : op_fp8_e4m3_kernel(), kern[q] ? "" : " + prefill", ran);
			CHECKN(name, bad == 0 && ran > 0);
			snprintf(name, sizeof name, "e4m3 with subnormals taken out (%s): rows widen "
				 "to load's f32 exactly", kern[q] ? kern[q] : "default");
			CHECKN(name, bad_w == 0);
		}
		printf("# subnormal codes taken out: %d, listed %d, left %d\n", nsub_all, listed_all, left);
		CHECKN("every subnormal code listed, none left in the codes",
		       nsub_all > 10000 && listed_all == nsub_all && left == 0);
#if defined(__x86_64__)
		if (__builtin_cpu_supports("gfni") && __builtin_cpu_supports("avx512vbmi"))
			CHECKN("gf4 = the VBMI tables bit for bit on taken-out codes",
			       eq_n > 1000 && eq_bad == 0);
#endif
		op_bf16_set_kernel(NULL);
	}
	{ /* prefill on oneDNN (bf16 and FP8 W): x rounded to bf16 (and FP8's
	   * scaled codes), f32 sums: against the float64 product of those
	   * rounded values (1e-5 of the magnitude: f32 accumulation), and
	   * against the float64 product of x as given within bf16's rounding
	   * of x (2^-8 of the magnitude); decode rows still by the GEMV, exact;
	   * f32 W (oneDNN's f32 matmul) with x as given, no rounding */
		int bf16cpu = 0;
#if defined(__x86_64__)
		bf16cpu = __builtin_cpu_supports("avx512bf16");
#endif
		printf("# prefill kernel: %s (oneDNN %s)\n", op_prefill_kernel(),
		       op_onednn_ready() ? op_onednn_isa() : "without a native kernel here");
		CHECK(!bf16cpu || op_onednn_ready());
		CHECK(!op_onednn_ready() || (op_bf16_set_kernel(NULL) == 0 &&
					     !strncmp(op_prefill_kernel(), "onednn:", 7) &&
					     strstr(op_kernels(), "+onednn:")));
		CHECK(op_onednn_ready() || op_bf16_set_kernel("onednn") == -1);
		CHECK(op_bf16_set_kernel("avx2") < 0 || !strcmp(op_prefill_kernel(), "sgemm"));
		op_bf16_set_kernel(NULL);
		{ /* rounding to bf16: specials, ties, a tail after the vector steps */
			float in[37] = {1.0f, -2.5f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN,
					3.4028235e38f, 1e-40f, 1.00390625f, 1.01171875f,
					1.0078125f + 1e-7f};
			uint16_t out[37];
			int bad = 0;
			for (int i = 12; i < 37; i++)
				in[i] = frand(&r) * 1000;
			op_f32_to_bf16(out, in, 37);
			for (int i = 0; i < 37; i++) {
				uint32_t u = (uint32_t)out[i] << 16;
				float f;
				memcpy(&f, &u, 4);
				if (isnan(in[i]))
					bad += !isnan(f);
				else
					bad += f != ref_bf16(in[i]);
			}
			CHECKN("f32 -> bf16 rounds to nearest even (NaN, Inf, ties, tail)", bad == 0);
		}
		static const int shapes[][5] = {{9, 40, 17, 16, 16},     {16, 3000, 512, 128, 128},
						{20, 70, 300, 16, 16},   {128, 1024, 1024, 128, 128},
						{33, 257, 300, 7, 5},    {64, 2816, 256, 128, 128},
						{3, 64, 1024, 128, 128}, {12, 1, 64, 16, 16}};
		/* every way of taking x: rounded once (within 2^-8 of x as
		 * given), hi + lo (DAY0_PREFILL_X=split), W widened to f32 and x
		 * as given (DAY0_PREFILL_X=f32; the default where the CPU's bf16
		 * matmul is no faster: Intel without AMX) */
		if (op_onednn_ready() && !getenv("DAY0_PREFILL_X")) {
			int dflt = op_prefill_x_default(), amd = 0, x86 = 0;
#if defined(__x86_64__)
			amd = __builtin_cpu_is("amd");
			x86 = 1;
#endif
			printf("# prefill's default: %s (oneDNN bf16 %s, f32 %s)\n",
			       dflt == PREFILL_X_F32 ? "W widened to f32" : "x rounded once to bf16",
			       op_onednn_isa(), op_onednn_isa_f32() ? op_onednn_isa_f32() : "loops");
			CHECKN("prefill's default: x rounded once with AMX or AMD's AVX512-BF16 "
			       "(and off x86), W widened to f32 otherwise (given oneDNN's f32 matmul)",
			       op_prefill_x() == dflt &&
			       (!x86 || strstr(op_onednn_isa(), "amx") ||
				(amd && strstr(op_onednn_isa(), "bf16")) || !op_onednn_isa_f32()
				    ? dflt == PREFILL_X_BF16
				    : dflt == PREFILL_X_F32));
		}
		CHECKN("DAY0_PREFILL_X=f32 is refused without oneDNN's f32 matmul",
		       (op_onednn_isa_f32() != NULL) == (op_set_prefill_x(PREFILL_X_F32) == 0));
		int redone0 = op_onednn_redone();
		for (int xm = PREFILL_X_F32; xm >= 0 && op_onednn_ready(); xm--)
		for (int d = 0; d < 4; d++) {
			int dt = d == 0 ? DT_BF16 : d == 1 ? DT_F8_E4M3 : d == 2 ? DT_F8_E5M2 : DT_F32;
			int bad = 0, bad_x = 0, xs = xm == PREFILL_X_SPLIT, wide = xm == PREFILL_X_F32;
			char name[160];
			if (op_set_prefill_x(xm))
				break;
			if (d == 0)
				CHECKN(xm == PREFILL_X_BF16 ? "x rounded once: the prefill kernel is bf16's, no suffix"
				       : xs ? "DAY0_PREFILL_X=split: the prefill kernel says /x-split"
					    : "DAY0_PREFILL_X=f32: the prefill kernel says /w-f32",
				       (strstr(op_prefill_kernel(), "/x-split") != NULL) == xs &&
				       (strstr(op_kernels(), "/x-split") != NULL) == xs &&
				       (strstr(op_prefill_kernel(), "/w-f32") != NULL) == wide &&
				       (strstr(op_kernels(), "/w-f32") != NULL) == wide);
			for (size_t z = 0; z < sizeof shapes / sizeof *shapes; z++) {
				int m = shapes[z][0], n = shapes[z][1], k = shapes[z][2];
				int br = shapes[z][3], bc = shapes[z][4];
				int gr = (n + br - 1) / br, gc = (k + bc - 1) / bc;
				float *x = malloc((size_t)m * k * 4), *y = malloc((size_t)m * n * 4);
				float *b = malloc((size_t)n * 4), *wf = malloc((size_t)n * k * 4);
				float *sk = malloc((size_t)gr * gc * 4), *we = malloc((size_t)n * k * 4);
				void *w = malloc((size_t)n * k * 4);
				struct wmat wm = {.p = w, .dtype = dt, .scale = sk, .br = br,
						  .bc = bc, .sc_cols = gc};
				for (int i = 0; i < m * k; i++) x[i] = frand(&r);
				for (int i = 0; i < n; i++) b[i] = frand(&r);
				for (int i = 0; i < gr * gc; i++)
					sk[i] = (float)ldexp(0.5 + rng_uniform(&r), -6) * op_fp8_scale_factor(dt);
				for (int i = 0; i < n * k; i++) {
					if (dt == DT_F32) {
						((float *)w)[i] = frand(&r);
					} else if (dt == DT_BF16) {
						float f = frand(&r);
						uint32_t u;
						memcpy(&u, &f, 4);
						((uint16_t *)w)[i] = (uint16_t)(u >> 16);
					} else {
						uint8_t c;
						do
							c = (uint8_t)(rng_uniform(&r) * 256);
						while (!isfinite(fp8_to_f32(dt, c)));
						((uint8_t *)w)[i] = c;
					}
				}
				/* W exact (each row widened as load does: checked
				 * above), and as the product sees it: FP8's rounded
				 * to bf16 on the oneDNN path (m > 8), not the GEMV's */
				for (int j = 0; j < n; j++)
					op_embedding_w(we + (size_t)j * k, &wm, j, k);
				for (int i = 0; i < n * k; i++)
					wf[i] = dt != DT_BF16 && dt != DT_F32 && m > 8 && !wide ? ref_bf16(we[i])
												: we[i];
				op_linear_w(y, x, &wm, b, m, n, k);
				for (int i = 0; i < m; i++)
					for (int j = 0; j < n; j++) {
						double sm = b[j], sx = b[j], mag = fabs(b[j]);
						for (int c = 0; c < k; c++) {
							/* oneDNN's x: hi = bf16(x) plus lo = bf16(x - hi),
							 * or hi alone (x rounded once) */
							float xi = x[i * k + c], hi = ref_bf16(xi);
							double xv = m > 8 && dt != DT_F32 && !wide
									    ? (double)hi + (xs ? ref_bf16(xi - hi) : 0)
									    : xi;
							sm += xv * wf[(size_t)j * k + c];
							sx += (double)x[i * k + c] * we[(size_t)j * k + c];
							mag += fabs((double)x[i * k + c] * we[(size_t)j * k + c]);
						}
						bad += fabs(sm - y[i * n + j]) > 1e-5 * mag + 1e-6;
						/* each bf16 rounding is within 2^-8 of its value:
						 * x and FP8's W both rounded, 2^-7 */
						int e = dt == DT_F32 || wide || (dt == DT_BF16 && xs) ? -16
							: dt != DT_BF16 && !xs && m > 8 ? -7 : -8;
						bad_x += fabs(sx - y[i * n + j]) > ldexp(mag, e) + 1e-5 * mag + 1e-6;
					}
				free(x); free(y); free(b); free(wf); free(sk); free(we); free(w);
			}
			snprintf(name, sizeof name, "%s prefill (oneDNN) matches the float64 product "
				 "of its x as %s and W", dtype_name(dt),
				 dt == DT_F32 || wide ? "given"
				 : xs ? "bf16 hi + lo (DAY0_PREFILL_X=split)" : "bf16");
			CHECKN(name, bad == 0);
			snprintf(name, sizeof name, "%s prefill (oneDNN%s) within %s of the product "
				 "of x as given", dtype_name(dt),
				 wide ? ", W widened to f32" : xs ? "" : ", x rounded once",
				 wide ? "2^-16 (f32 compute)"
				 : xs ? "2^-16 (bf16 W; FP8's W rounded to bf16: 2^-8)"
				      : "2^-8 (FP8's W rounded too: 2^-7; f32 W: 2^-16)");
			CHECKN(name, bad_x == 0);
		}
		CHECKN("every mode's prefill products ran on oneDNN (none redone by an "
		       "older path)", op_onednn_redone() == redone0);
		op_set_prefill_x(PREFILL_X_SPLIT);
	}
	{ /* rms_norm: x / sqrt(mean(x^2) + eps) * w */
		float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f}, y[4];
		double rms = sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
		op_rms_norm(y, x, w, 4, 1e-6);
		CHECK(fabs(y[0] - 1 / rms) < 1e-6 && fabs(y[2] - 2 * 3 / rms) < 1e-6 &&
		      fabs(y[3] - 0.5 * 4 / rms) < 1e-6);
	}
	{ /* softmax */
		float x[3] = {1, 2, 3};
		double e = exp(1) + exp(2) + exp(3);
		op_softmax(x, 3);
		CHECK(fabs(x[2] - exp(3) / e) < 1e-6 && fabs(x[0] + x[1] + x[2] - 1) < 1e-6);
		float big[2] = {1000, 1000};
		op_softmax(big, 2);
		CHECK(big[0] == 0.5f); /* no overflow */
	}
	{ /* swiglu: silu(g) * u */
		float g[2] = {0, 2}, u[2] = {3, 5}, y[2];
		op_swiglu(y, g, u, 2);
		CHECK(y[0] == 0 && fabs(y[1] - 2 / (1 + exp(-2)) * 5) < 1e-5);
	}
	{ /* op_linear_many: three products of one x (q, k, v; gate and up)
	   * as one job, for each dtype and row count (12 rows: one product
	   * at a time), against float64 of each product's weights */
		const int dts[] = {DT_F32, DT_BF16, DT_F8_E4M3};
		const int ms[] = {1, 3, 8, 12};
		const int ns[3] = {1024, 256, 264}, k = 1040;
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream",
				      "avx512-vbmi"};
		for (size_t q = 0; q < 5; q++)
			for (size_t d = 0; d < 3; d++) {
				char name[128];
				int bad = 0, dt = dts[d];
				int gc = (k + 127) / 128;
				if (op_bf16_set_kernel(kern[q]) < 0)
					continue;
				for (size_t mi = 0; mi < 4; mi++) {
					int m = ms[mi];
					float *x = malloc((size_t)m * k * 4), *ys[3], *bs[3], *wf[3];
					struct wmat wm[3];
					const struct wmat *wp[3];
					const float *bp[3];
					for (int i = 0; i < m * k; i++) x[i] = frand(&r);
					for (int t = 0; t < 3; t++) {
						int n = ns[t], gr = (n + 127) / 128;
						size_t nk = (size_t)n * k;
						void *w = malloc(nk * 4);
						float *sc = malloc((size_t)gr * gc * 4);
						ys[t] = malloc((size_t)m * n * 4);
						bs[t] = t == 1 ? NULL : malloc((size_t)n * 4);
						wf[t] = malloc(nk * 4);
						for (int j = 0; bs[t] && j < n; j++) bs[t][j] = frand(&r);
						for (int i = 0; i < gr * gc; i++) sc[i] = 0.01f;
						for (size_t i = 0; i < nk; i++) {
							float f = frand(&r);
							if (dt == DT_F32) {
								((float *)w)[i] = wf[t][i] = f;
							} else if (dt == DT_BF16) {
								uint32_t u;
								memcpy(&u, &f, 4);
								((uint16_t *)w)[i] = (uint16_t)(u >> 16);
								u &= 0xffff0000u;
								memcpy(&wf[t][i], &u, 4);
							} else {
								uint8_t c = (uint8_t)(rng_uniform(&r) * 126);
								((uint8_t *)w)[i] = c;
								wf[t][i] = (float)((double)fp8_to_f32(dt, c) * 0.01f);
							}
						}
						for (int i = 0; dt != DT_F32 && dt != DT_BF16 && i < gr * gc; i++)
							sc[i] *= op_fp8_scale_factor(dt);
						wm[t] = (struct wmat){.p = w, .dtype = dt, .scale = sc,
								      .br = 128, .bc = 128, .sc_cols = gc};
						wp[t] = &wm[t];
						bp[t] = bs[t];
					}
					op_linear_many(3, ys, wp, bp, ns, x, m, k);
					for (int t = 0; t < 3; t++) {
						for (int i = 0; i < m; i++)
							for (int j = 0; j < ns[t]; j++) {
								double sm = bs[t] ? bs[t][j] : 0, mag = fabs(sm);
								for (int c = 0; c < k; c++) {
									double v = (double)x[i * k + c] * wf[t][(size_t)j * k + c];
									sm += v;
									mag += fabs(v);
								}
								bad += fabs(sm - ys[t][(size_t)i * ns[t] + j]) > 1e-6 * mag + 1e-6;
							}
						free(ys[t]); free(bs[t]); free(wf[t]); free(wm[t].p);
						free((void *)wm[t].scale);
					}
					free(x);
				}
				snprintf(name, sizeof name, "op_linear_many (%s, %s): 1, 3, 8, 12 rows "
					 "match float64 of each product", dtype_name(dt), kern[q]);
				CHECKN(name, bad == 0);
			}
		op_bf16_set_kernel(NULL);
	}
	{ /* softmax, swiglu and sigmoid through each kernel (the vector exp
	   * and its tails: lengths 1..70 and 4099) against float64, over
	   * inputs from -100 to 100 (past the vector exp's clamps) */
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream"};
		for (size_t q = 0; q < 4; q++) {
			char name[96];
			double worst_s = 0, worst_g = 0, worst_i = 0;
			if (op_bf16_set_kernel(kern[q]) < 0)
				continue;
			for (int n = 1; n <= 4099; n = n < 70 ? n + 1 : 4099 + (n == 4099)) {
				float *x = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
				float *u = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
				float *sg = malloc((size_t)n * 4);
				double mx = -1e300, sum = 0;
				for (int i = 0; i < n; i++) {
					x[i] = (float)(rng_uniform(&r) * 40 - 20);
					g[i] = (float)(rng_uniform(&r) * 200 - 100);
					u[i] = frand(&r);
					sg[i] = g[i];
					mx = x[i] > mx ? x[i] : mx;
				}
				for (int i = 0; i < n; i++)
					sum += exp((double)x[i] - mx);
				{
					float *x0 = malloc((size_t)n * 4);
					memcpy(x0, x, (size_t)n * 4);
					op_softmax(x, n);
					for (int i = 0; i < n; i++) {
						double want = exp((double)x0[i] - mx) / sum;
						double e = fabs(x[i] - want) / (want + 1e-30);
						if (want > 1e-30 && e > worst_s)
							worst_s = e;
					}
					free(x0);
				}
				op_swiglu(y, g, u, n);
				op_sigmoid(sg, n);
				for (int i = 0; i < n; i++) {
					double sig = 1 / (1 + exp(-(double)g[i]));
					double want = g[i] * sig * u[i];
					double e = fabs(y[i] - want) / (fabs(want) + 1e-30);
					if (fabs(want) > 1e-30 && e > worst_g)
						worst_g = e;
					e = fabs(sg[i] - sig) / (sig + 1e-30);
					if (sig > 1e-30 && e > worst_i)
						worst_i = e;
				}
				free(x); free(g); free(u); free(y); free(sg);
			}
			/* x - max rounds to f32 first: 2^-24 of |x| <= 20 */
			snprintf(name, sizeof name, "softmax (%s) within 4e-6 of float64 (worst %.2g)",
				 kern[q], worst_s);
			CHECKN(name, worst_s < 4e-6);
			snprintf(name, sizeof name, "swiglu (%s) within 1e-6 of float64 (worst %.2g)",
				 kern[q], worst_g);
			CHECKN(name, worst_g < 1e-6);
			snprintf(name, sizeof name, "sigmoid (%s) within 1e-6 of float64 (worst %.2g)",
				 kern[q], worst_i);
			CHECKN(name, worst_i < 1e-6);
		}
		op_bf16_set_kernel(NULL);
	}
	{ /* inverse frequencies */
		double f[64], af;
		struct model_config c = rope_cfg("", 1);
		CHECK(op_rope_inv_freq(&c, 64, 0, f, &af) == 0 && af == 1.0);
		CHECK(f[0] == 1.0 && fabs(f[16] - pow(10000.0, -0.5)) < 1e-15);
		c = rope_cfg("linear", 4);
		op_rope_inv_freq(&c, 64, 0, f, &af);
		CHECK(fabs(f[16] - pow(10000.0, -0.5) / 4) < 1e-15);
		/* llama3: short wavelengths kept, long ones divided by factor,
		 * the band between interpolated and monotone */
		c = rope_cfg("llama3", 8);
		c.rope_theta = 500000;
		{
			double def[64];
			struct model_config d0 = c;
			int mono = 1, kept = 1, scaled = 1;
			d0.rope.type[0] = 0;
			op_rope_inv_freq(&d0, 128, 0, def, &af);
			op_rope_inv_freq(&c, 128, 0, f, &af);
			for (int i = 0; i < 64; i++) {
				double wl = 2 * M_PI / def[i];
				if (wl < 8192.0 / 4) kept &= f[i] == def[i];
				if (wl > 8192.0) scaled &= fabs(f[i] - def[i] / 8) < 1e-18;
				if (i) mono &= f[i] < f[i - 1];
			}
			CHECKN("llama3 keeps high frequencies", kept);
			CHECKN("llama3 divides low frequencies by the factor", scaled);
			CHECKN("llama3 frequencies stay decreasing", mono);
		}
		/* yarn: first dims extrapolated, last interpolated; mscale */
		c = rope_cfg("yarn", 40);
		c.rope.original_max_pos = 4096;
		{
			double def[32];
			struct model_config d0 = c;
			d0.rope.type[0] = 0;
			op_rope_inv_freq(&d0, 64, 0, def, &af);
			op_rope_inv_freq(&c, 64, 0, f, &af);
			CHECK(f[0] == def[0] && fabs(f[31] - def[31] / 40) < 1e-15);
			CHECK(fabs(af - (0.1 * log(40) + 1)) < 1e-12);
			c.rope.mscale = 1;
			c.rope.mscale_all_dim = 1;
			op_rope_inv_freq(&c, 64, 0, f, &af);
			CHECK(af == 1.0); /* DeepSeek-V3: mscale / mscale_all_dim */
		}
		c = rope_cfg("dynamic", 2);
		op_rope_inv_freq(&c, 64, 16384, f, &af);
		CHECK(fabs(f[1] - 1 / pow(10000 * pow(2.0 * 16384 / 8192 - 1, 64.0 / 62), 2.0 / 64)) < 1e-12);
		c = rope_cfg("longrope", 2);
		CHECK(op_rope_inv_freq(&c, 64, 0, f, &af) == -1);
	}
	{ /* rope: position 0 is identity, pairs keep their norm, and the
	   * q.k product depends only on the distance */
		double f[8], af;
		struct model_config c = rope_cfg("", 1);
		float q[16], k[16], q0[16], a[16], b[16];
		double d1 = 0, d2 = 0;
		op_rope_inv_freq(&c, 16, 0, f, &af);
		for (int i = 0; i < 16; i++) q[i] = frand(&r), k[i] = frand(&r);
		memcpy(q0, q, sizeof q);
		op_rope(q0, 1, 16, 16, 0, f, 1.0);
		CHECK(memcmp(q0, q, sizeof q) == 0);
		memcpy(a, q, sizeof q);
		op_rope(a, 1, 16, 16, 7, f, 1.0);
		CHECK(fabs(hypot(a[3], a[11]) - hypot(q[3], q[11])) < 1e-5);
		memcpy(a, q, sizeof q); memcpy(b, k, sizeof k);
		op_rope(a, 1, 16, 16, 10, f, 1.0); op_rope(b, 1, 16, 16, 3, f, 1.0);
		for (int i = 0; i < 16; i++) d1 += (double)a[i] * b[i];
		memcpy(a, q, sizeof q); memcpy(b, k, sizeof k);
		op_rope(a, 1, 16, 16, 107, f, 1.0); op_rope(b, 1, 16, 16, 100, f, 1.0);
		for (int i = 0; i < 16; i++) d2 += (double)a[i] * b[i];
		CHECK(fabs(d1 - d2) < 1e-4);
		/* rotate_half: dim i pairs with dim i + d/2 */
		float e[4] = {1, 0, 0, 0};
		double f1[2] = {1, 1};
		op_rope(e, 1, 4, 4, 1, f1, 1.0);
		CHECK(fabsf(e[0] - cosf(1)) < 1e-6 && fabsf(e[2] - sinf(1)) < 1e-6 && e[1] == 0);
		float il[4] = {0, 1, 2, 3};
		op_rope_deinterleave(il, 1, 4, 4);
		CHECK(il[0] == 0 && il[1] == 2 && il[2] == 1 && il[3] == 3);
	}
	{ /* attention */
		/* 2 query heads sharing 1 kv head; 3 positions */
		float q[3 * 2 * 2], k[3 * 1 * 2], v[3 * 1 * 3], o[3 * 2 * 3];
		for (int i = 0; i < 12; i++) q[i] = frand(&r);
		for (int i = 0; i < 6; i++) k[i] = frand(&r);
		for (int i = 0; i < 9; i++) v[i] = (float)i;
		op_attention(o, q, k, v, 3, 3, 0, 2, 1, 2, 3, 1.0 / sqrt(2), 0);
		CHECK(o[0] == v[0] && o[1] == v[1] && o[2] == v[2]); /* pos 0 sees only kv 0 */
		CHECK(o[3] == v[0]); /* head 1 uses the same kv head */
		{ /* the last query: naive softmax over all three */
			double s[3], m = -1e9, z = 0, want = 0;
			for (int j = 0; j < 3; j++) {
				s[j] = (q[2 * 2 * 2 + 0] * k[j * 2] + q[2 * 2 * 2 + 1] * k[j * 2 + 1]) / sqrt(2);
				if (s[j] > m) m = s[j];
			}
			for (int j = 0; j < 3; j++) z += exp(s[j] - m);
			for (int j = 0; j < 3; j++) want += exp(s[j] - m) / z * v[j * 3 + 1];
			CHECK(fabs(o[2 * 2 * 3 + 1] - want) < 1e-5);
		}
		/* a window of 1 sees only itself */
		op_attention(o, q, k, v, 3, 3, 0, 2, 1, 2, 3, 1.0, 1);
		CHECK(o[2 * 2 * 3] == v[2 * 3] && o[2 * 2 * 3 + 2] == v[2 * 3 + 2]);
		/* decoding one token at position 2 against a 3-entry cache */
		float o1[2 * 3];
		op_attention(o1, q + 2 * 2 * 2, k, v, 1, 3, 2, 2, 1, 2, 3, 1.0 / sqrt(2), 0);
		op_attention(o, q, k, v, 3, 3, 0, 2, 1, 2, 3, 1.0 / sqrt(2), 0);
		CHECK(memcmp(o1, o + 2 * 2 * 3, sizeof o1) == 0);
	}
	{ /* a prefill (heads in turn) against decode steps (heads over the
	   * thread pool): 16 query heads on 4 kv heads, 12 positions */
		enum { T = 12, NH = 16, NKV = 4, D = 8 };
		static float q[T * NH * D], k[T * NKV * D], v[T * NKV * D];
		static float o[T * NH * D], o1[NH * D];
		double worst = 0;
		for (int i = 0; i < T * NH * D; i++) q[i] = frand(&r);
		for (int i = 0; i < T * NKV * D; i++) k[i] = frand(&r), v[i] = frand(&r);
		op_attention(o, q, k, v, T, T, 0, NH, NKV, D, D, 0.35, 0);
		for (int t = 0; t < T; t++) {
			op_attention(o1, q + (size_t)t * NH * D, k, v, 1, t + 1, t, NH, NKV,
				     D, D, 0.35, 0);
			for (int i = 0; i < NH * D; i++) {
				double d = fabs(o1[i] - o[(size_t)t * NH * D + i]);
				worst = d > worst ? d : worst;
			}
		}
		CHECKN("attention: decode steps (heads in parallel) match the prefill", worst < 1e-5);
		{ /* the runtime's cache layout: each kv head's positions
		   * contiguous, in a cache of 20 positions */
			enum { MC = 20 };
			static float kh[NKV * MC * D], vh[NKV * MC * D], o2[T * NH * D];
			for (int t = 0; t < T; t++)
				for (int h = 0; h < NKV; h++)
					for (int d = 0; d < D; d++) {
						kh[(h * MC + t) * D + d] = k[(t * NKV + h) * D + d];
						vh[(h * MC + t) * D + d] = v[(t * NKV + h) * D + d];
					}
			worst = 0;
			op_attention_kv(o2, q, kh, vh, T, T, 0, NH, NKV, D, D, 0.35, 0,
					MC * D, D, MC * D, D);
			for (int i = 0; i < T * NH * D; i++)
				worst = fabs(o2[i] - o[i]) > worst ? fabs(o2[i] - o[i]) : worst;
			for (int t = 0; t < T; t++) {
				op_attention_kv(o1, q + (size_t)t * NH * D, kh, vh, 1, t + 1, t, NH,
						NKV, D, D, 0.35, 0, MC * D, D, MC * D, D);
				for (int i = 0; i < NH * D; i++) {
					double d = fabs(o1[i] - o[(size_t)t * NH * D + i]);
					worst = d > worst ? d : worst;
				}
			}
			CHECKN("attention over a head-contiguous cache matches the interleaved one",
			       worst < 1e-5);
		}
	}
	{ /* decode rows over a head-contiguous cache (the AVX-512 path where
	   * the CPU has it: head dims of whole vectors of 16, one to four
	   * 64-column passes and a part-pass), through each kernel, against
	   * float64; 1 and 3 query rows, with and without a window */
		enum { T = 40, MC = 50, NH = 4, NKV = 2 };
		static const int dims[] = {16, 48, 64, 80, 128, 192};
		const char *kern[] = {"portable", "avx2+fma", "avx512", "avx512-stream"};
		for (size_t kq = 0; kq < 3; kq++) {
			double worst = 0;
			char name[128];
			if (op_bf16_set_kernel(kern[kq]) < 0)
				continue;
			for (size_t z = 0; z < sizeof dims / sizeof *dims; z++) {
				int D = dims[z];
				float *kh = malloc((size_t)NKV * MC * D * 4), *vh = malloc((size_t)NKV * MC * D * 4);
				float *q = malloc((size_t)3 * NH * D * 4), *o = malloc((size_t)3 * NH * D * 4);
				double *sc = malloc((size_t)T * sizeof *sc);
				for (int i = 0; i < NKV * MC * D; i++) kh[i] = frand(&r), vh[i] = frand(&r);
				for (int i = 0; i < 3 * NH * D; i++) q[i] = frand(&r);
				for (int nq = 1; nq <= 3; nq += 2)
					for (int win = 0; win <= 5; win += 5)
						for (int t = nq; t <= T; t += 13) {
							/* rows at positions t-nq .. t-1, t cached */
							op_attention_kv(o, q, kh, vh, nq, t, t - nq, NH, NKV, D, D,
									0.3, win, (size_t)MC * D, D,
									(size_t)MC * D, D);
							for (int i = 0; i < nq; i++)
								for (int h = 0; h < NH; h++) {
									int kv = h / (NH / NKV), pos = t - nq + i;
									int first = win && pos - win + 1 > 0 ? pos - win + 1 : 0;
									double mx = -1e300, sum = 0;
									for (int p2 = first; p2 <= pos; p2++) {
										double d = 0;
										for (int c = 0; c < D; c++)
											d += (double)q[(i * NH + h) * D + c] *
											     kh[((size_t)kv * MC + p2) * D + c];
										sc[p2] = 0.3 * d;
										mx = sc[p2] > mx ? sc[p2] : mx;
									}
									for (int p2 = first; p2 <= pos; p2++)
										sum += (sc[p2] = exp(sc[p2] - mx));
									for (int c = 0; c < D; c++) {
										double ov = 0, e;
										for (int p2 = first; p2 <= pos; p2++)
											ov += sc[p2] / sum *
											      vh[((size_t)kv * MC + p2) * D + c];
										e = fabs(ov - o[(i * NH + h) * D + c]);
										worst = e > worst ? e : worst;
									}
								}
						}
				free(kh); free(vh); free(q); free(o); free(sc);
			}
			snprintf(name, sizeof name, "decode attention (%s), head dims 16-192, "
				 "windows: within 1e-5 of float64 (worst %.2g)", kern[kq], worst);
			CHECKN(name, worst < 1e-5);
		}
		op_bf16_set_kernel(NULL);
	}
	{ /* routers */
		float logits[4] = {0.1f, 2.0f, -1.0f, 1.5f}, w[2];
		int idx[2];
		op_router_softmax_topk(logits, 4, 2, 1, idx, w);
		CHECK(idx[0] == 1 && idx[1] == 3);
		CHECK(fabs(w[0] + w[1] - 1) < 1e-6 && fabs(w[0] / w[1] - exp(0.5)) < 1e-5);
		op_router_softmax_topk(logits, 4, 2, 0, idx, w);
		CHECK(w[0] + w[1] < 1); /* qwen2_moe without norm_topk_prob */
		/* grouped: 4 groups of 2; expert 0 alone is best but its group
		 * (0,1) sums lowest, so with 2 groups kept it is not chosen */
		float lg[8] = {3.0f, -5.0f, 1.0f, 1.0f, 0.9f, 0.9f, -2, -2};
		float bias[8] = {0};
		op_router_sigmoid_group_topk(lg, bias, 8, 2, 4, 2, 1, 2.5, idx, w);
		CHECK((idx[0] == 2 || idx[0] == 3) && idx[1] != 0 && idx[0] != 0);
		CHECK(fabs(w[0] + w[1] - 2.5) < 1e-5); /* renormalised, scaled */
		/* the correction bias steers selection but not the weights */
		bias[6] = 10;
		bias[7] = 10;
		op_router_sigmoid_group_topk(lg, bias, 8, 2, 4, 2, 0, 1.0, idx, w);
		CHECK((idx[0] == 6 || idx[0] == 7) && fabs(w[0] - 1 / (1 + exp(2))) < 1e-6);
	}
	{ /* the registry: every native entry has an implementation, every
	   * fallback is made of native ones */
		int bad = 0;
		for (int i = 0; op_registry[i].name; i++) {
			if (op_registry[i].kind == OP_NATIVE && !op_registry[i].impl) bad++;
			if (op_status(op_registry[i].name) == OP_MISSING) bad++;
		}
		CHECKN("registry entries are all executable", bad == 0);
		CHECK(op_status("attention.mla") == OP_IS_FALLBACK);
		CHECK(op_status("rope.longrope") == OP_MISSING);
	}
	{ /* the pool: each thread takes its own share of a job's chunks, then
	   * what is left of the others' (ops_bf16.c): at every thread count
	   * each item runs exactly once in a slot of its own, and a GEMV's y
	   * is the same bits whoever took which rows */
		int threads0 = openblas_get_num_threads(), counts[] = {1, 2, 3, 5, 8};
		int n = 1536, k = 1024, bad = 0, badbits = 0;
		float *x = malloc((size_t)k * 4), *y0 = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
		float *w = malloc((size_t)n * k * 4);
		struct wmat wm = {.p = w, .dtype = DT_F32};
		for (int i = 0; i < k; i++) x[i] = frand(&r);
		for (int i = 0; i < n * k; i++) w[i] = frand(&r);
		openblas_set_num_threads(1);
		op_linear_w(y0, x, &wm, NULL, 1, n, k);
		for (size_t t = 0; t < sizeof counts / sizeof *counts; t++) {
			openblas_set_num_threads(counts[t]);
			for (int items = 1; items <= 257; items += 37) {
				static struct visits v;
				memset(&v, 0, sizeof v);
				v.threads = op_pool_threads();
				op_parallel_for(items, visit, &v);
				for (int i = 0; i < items; i++)
					bad += atomic_load(&v.n[i]) != 1;
				bad += atomic_load(&v.bad_slot) + (v.threads != counts[t]);
			}
			op_linear_w(y, x, &wm, NULL, 1, n, k);
			badbits += memcmp(y, y0, (size_t)n * 4) != 0;
		}
		openblas_set_num_threads(threads0);
		CHECKN("pool: every item once, in a slot of its own, at 1, 2, 3, 5 and 8 threads", bad == 0);
		CHECKN("pool: a GEMV's y the same bits at 1, 2, 3, 5 and 8 threads", badbits == 0);
		free(x), free(y0), free(y), free(w);
	}
	{ /* node sets */
		char **v;
		size_t n;
		struct d0_err err;
		CHECK(nodeset_expand("n[01-03],x[1,3]", &v, &n, &err) == 0 && n == 5 &&
		      !strcmp(v[0], "n01") && !strcmp(v[2], "n03") && !strcmp(v[4], "x3"));
		for (size_t i = 0; i < n; i++) free(v[i]);
		free(v);
		CHECK(nodeset_expand("r[1-2]c[8-9]", &v, &n, &err) == 0 && n == 4 &&
		      !strcmp(v[1], "r1c9") && !strcmp(v[3], "r2c9"));
		for (size_t i = 0; i < n; i++) free(v[i]);
		free(v);
		CHECK(nodeset_expand("10.0.0.[1-16]", &v, &n, &err) == 0 && n == 16 &&
		      !strcmp(v[15], "10.0.0.16"));
		for (size_t i = 0; i < n; i++) free(v[i]);
		free(v);
		CHECK(nodeset_expand("n[3-1]", &v, &n, &err) == -1 && strstr(err.msg, "ascending"));
		CHECK(nodeset_expand("n[a]", &v, &n, &err) == -1 && strstr(err.msg, "not a number"));
		CHECK(nodeset_expand("a,,b", &v, &n, &err) == -1 && strstr(err.msg, "empty name"));
		CHECK(nodeset_expand("n[1-999999]", &v, &n, &err) == -1);
	}
	return unit_done();
}
