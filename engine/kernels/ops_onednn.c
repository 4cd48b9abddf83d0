/*
 * ops_onednn.c - prefill's bf16 x bf16 -> f32 products on oneDNN.
 *
 * A prefill product (many rows of x) with bf16 or FP8 weights is a GEMM,
 * and the CPUs here have bf16 hardware for it: AMX-BF16 tiles on Sapphire
 * Rapids, VDPBF16PS with AVX512-BF16 on Zen 4/5 and Cooper Lake.  Debian's
 * OpenBLAS exports no bf16 GEMM, so oneDNN's matmul primitive does the
 * product: it picks the best of those ISAs at run time (its brgemm
 * kernels), whatever OPENBLAS_CORETYPE forces on OpenBLAS.
 *
 * What this file owns, the callers (ops_bf16.c's panel jobs) do the rest:
 * - one primitive per shape (m rows of x, a panel of n rows of W, k, the
 *   row stride of y), created once and kept (a small cache: a prompt's
 *   length decides m, so a server sees a few shapes again and again);
 * - the weights as stored: W's rows are the matmul's B in oneDNN's "ba"
 *   (k x n, column-major) layout, read in place.  A pre-reordered B
 *   (format_tag any, reordered once at load) measured slower here (AMX,
 *   128 x 2816 x 1024: 1.7 ms against 1.0 ms in place), so the weights are
 *   not copied and the accountant has nothing more to count;
 * - the threads: oneDNN (Debian builds it on OpenMP) is told to use one
 *   thread in the calling thread, and the runtime's own pool hands each of
 *   its threads panels of W, one matmul each, as it does for the sgemm
 *   panels.  So one pool owns the cores: no OpenMP team spinning after a
 *   product while the pool's threads run attention (2 cores here);
 * - a scratchpad per pool slot (scratchpad mode "user"), since several
 *   slots execute primitives at the same time.
 *
 * The activations enter as two bf16 terms (round to nearest even: hi, then
 * the remainder lo; ops_bf16.c stacks them as twice the rows and sums the
 * two products), so x keeps ~16 mantissa bits on this path; accumulation
 * is f32.  op_onednn_ready() says whether oneDNN
 * has a native kernel for this CPU (not its reference loops): CPUs
 * without AVX-512 keep the widened panels through sgemm.
 */
#include "engine.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
/* libgomp's, which libdnnl links: declared here rather than from omp.h
 * so the engine is built without -fopenmp (and by clang for the fuzzers) */
extern void omp_set_num_threads(int n);
extern int omp_get_max_threads(void);
static void one_thread(void)
{
	if (omp_get_max_threads() != 1)
		omp_set_num_threads(1);
}
#else
static void one_thread(void)
{
}
#endif

#define SLOTS 64   /* the pool's POOL_MAX */
#define SHAPES 64  /* primitives kept */

struct onednn_mm {
	int m, n, k, ldy, f32;
	dnnl_primitive_t prim;
	dnnl_memory_desc_t a, b, c;
	size_t scratch;
};

static struct {
	pthread_mutex_t mu;
	int state; /* 0 not tried, 1 ready, -1 not available */
	dnnl_engine_t eng;
	char isa[64];     /* the bf16 matmul's implementation */
	char isa_f32[64]; /* the f32 one's ("" if only loops) */
	struct onednn_mm mm[SHAPES];
	int nmm, evict;
	dnnl_stream_t stream[SLOTS];
	void *scratch[SLOTS];
	size_t scratch_len[SLOTS];
} dn = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void mm_free(struct onednn_mm *e)
{
	if (e->prim)
		dnnl_primitive_destroy(e->prim);
	memset(e, 0, sizeof *e);
}

/* The primitive for y[m, ldy] (n columns) = x[m, k] . W[n, k]^T, x and W
 * bf16 (f32 if f32), or -1. */
static int mm_create(struct onednn_mm *e, int m, int n, int k, int ldy, int f32)
{
	dnnl_data_type_t dt = f32 ? dnnl_f32 : dnnl_bf16;
	dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
	dnnl_dims_t bs = {1, k}, cs = {ldy, 1};
	dnnl_matmul_desc_t md;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	int rc = -1;
	memset(e, 0, sizeof *e);
	if (dnnl_memory_desc_init_by_tag(&e->a, 2, ad, dt, dnnl_ab) ||
	    dnnl_memory_desc_init_by_strides(&e->b, 2, bd, dt, bs) ||
	    dnnl_memory_desc_init_by_strides(&e->c, 2, cd, dnnl_f32, cs) ||
	    dnnl_matmul_desc_init(&md, &e->a, &e->b, NULL, &e->c) ||
	    dnnl_primitive_attr_create(&attr) ||
	    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ||
	    dnnl_primitive_desc_create(&pd, &md, attr, dn.eng, NULL))
		goto out;
	const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
	e->scratch = sp ? dnnl_memory_desc_get_size(sp) : 0;
	if (dnnl_primitive_create(&e->prim, pd))
		goto out;
	e->m = m, e->n = n, e->k = k, e->ldy = ldy, e->f32 = f32;
	rc = 0;
out:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (rc)
		mm_free(e);
	return rc;
}

/* The ISA of the implementation oneDNN picks for a small matmul of dt
 * ("brg:avx512_core_amx_bf16" -> "avx512_core_amx_bf16") into isa; -1 if
 * none, or only its reference loops. */
static int probe_isa(dnnl_data_type_t dt, char *isa, size_t len)
{
	const char *impl = NULL;
	dnnl_primitive_desc_t pd = NULL;
	dnnl_memory_desc_t a, b, c;
	dnnl_dims_t ad = {64, 256}, bd = {256, 64}, cd = {64, 64};
	dnnl_matmul_desc_t md;
	int rc = -1;
	if (!dnnl_memory_desc_init_by_tag(&a, 2, ad, dt, dnnl_ab) &&
	    !dnnl_memory_desc_init_by_tag(&b, 2, bd, dt, dnnl_ba) &&
	    !dnnl_memory_desc_init_by_tag(&c, 2, cd, dnnl_f32, dnnl_ab) &&
	    !dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) &&
	    !dnnl_primitive_desc_create(&pd, &md, NULL, dn.eng, NULL) &&
	    !dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) && impl &&
	    !strstr(impl, "ref")) {
		snprintf(isa, len, "%s", strchr(impl, ':') ? strchr(impl, ':') + 1 : impl);
		rc = 0;
	}
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	return rc;
}

/* oneDNN's engine, and the kernels its bf16 and f32 matmuls pick for this
 * CPU: "ref" ones are loops, not worth taking over widened panels through
 * sgemm. */
static int init_locked(void)
{
	if (dn.state)
		return dn.state;
	dn.state = -1;
	one_thread();
	/* This file keeps its own SHAPES primitives; oneDNN's global cache (1024
	 * by default) would also keep one per batch shape a server ever saw, and
	 * serve's RSS grew with it for many rounds of paged batches. */
	dnnl_set_primitive_cache_capacity(0);
	if (dnnl_engine_create(&dn.eng, dnnl_cpu, 0))
		return dn.state;
	if (probe_isa(dnnl_bf16, dn.isa, sizeof dn.isa))
		return dn.state;
	if (probe_isa(dnnl_f32, dn.isa_f32, sizeof dn.isa_f32))
		dn.isa_f32[0] = 0;
	dn.state = 1;
	return dn.state;
}

int op_onednn_ready(void)
{
	pthread_mutex_lock(&dn.mu);
	int s = init_locked();
	pthread_mutex_unlock(&dn.mu);
	return s == 1;
}

const char *op_onednn_isa(void)
{
	return op_onednn_ready() ? dn.isa : NULL;
}

const char *op_onednn_isa_f32(void)
{
	return op_onednn_ready() && dn.isa_f32[0] ? dn.isa_f32 : NULL;
}

const struct onednn_mm *op_onednn_get(int m, int n, int k, int ldy, int f32, int slots)
{
	struct onednn_mm *e = NULL;
	pthread_mutex_lock(&dn.mu);
	if (init_locked() != 1)
		goto out;
	one_thread(); /* primitives are shaped for the threads they are made with */
	for (int i = 0; i < dn.nmm; i++)
		if (dn.mm[i].m == m && dn.mm[i].n == n && dn.mm[i].k == k && dn.mm[i].ldy == ldy &&
		    dn.mm[i].f32 == f32) {
			e = &dn.mm[i];
			break;
		}
	if (!e) {
		struct onednn_mm *slot = dn.nmm < SHAPES ? &dn.mm[dn.nmm] : &dn.mm[dn.evict];
		if (dn.nmm == SHAPES) {
			mm_free(slot);
			dn.evict = (dn.evict + 1) % SHAPES;
		}
		if (mm_create(slot, m, n, k, ldy, f32)) {
			if (dn.nmm == SHAPES) /* keep the table dense */
				*slot = dn.mm[--dn.nmm];
			goto out;
		}
		if (dn.nmm < SHAPES)
			dn.nmm++;
		e = slot;
	}
	for (int s = 0; s < slots && s < SLOTS; s++)
		if (!dn.stream[s] && dnnl_stream_create(&dn.stream[s], dn.eng, dnnl_stream_default_flags)) {
			e = NULL;
			break;
		}
out:
	pthread_mutex_unlock(&dn.mu);
	return e;
}

int op_onednn_run(const struct onednn_mm *e, float *y, const void *x, const void *w,
		  int slot)
{
	dnnl_memory_t a = NULL, b = NULL, c = NULL, s = NULL;
	int rc = -1;
	if (slot < 0 || slot >= SLOTS || !dn.stream[slot])
		return -1;
	one_thread();
	if (e->scratch > dn.scratch_len[slot]) { /* the slot's own: no lock */
		free(dn.scratch[slot]);
		dn.scratch[slot] = aligned_alloc(64, (e->scratch + 63) & ~(size_t)63);
		dn.scratch_len[slot] = dn.scratch[slot] ? e->scratch : 0;
		if (!dn.scratch[slot])
			return -1;
	}
	dnnl_memory_desc_t sd;
	dnnl_dims_t sdim = {(dnnl_dim_t)e->scratch};
	if (dnnl_memory_create(&a, &e->a, dn.eng, (void *)x) ||
	    dnnl_memory_create(&b, &e->b, dn.eng, (void *)w) ||
	    dnnl_memory_create(&c, &e->c, dn.eng, y))
		goto out;
	if (e->scratch && (dnnl_memory_desc_init_by_tag(&sd, 1, sdim, dnnl_u8, dnnl_a) ||
			   dnnl_memory_create(&s, &sd, dn.eng, dn.scratch[slot])))
		goto out;
	dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b},
				   {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, s}};
	if (dnnl_primitive_execute(e->prim, dn.stream[slot], s ? 4 : 3, args) ||
	    dnnl_stream_wait(dn.stream[slot]))
		goto out;
	rc = 0;
out:
	if (a)
		dnnl_memory_destroy(a);
	if (b)
		dnnl_memory_destroy(b);
	if (c)
		dnnl_memory_destroy(c);
	if (s)
		dnnl_memory_destroy(s);
	return rc;
}

/* Round to the nearest even bf16 (NaN kept a NaN). */
static inline uint16_t f32_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The same, 16 at a time with AVX-512 F (the integer form: finite values
 * and infinities; a NaN lane is fixed up after). */
__attribute__((target("avx512f,avx512bw"))) static void
round_avx512(uint16_t *out, const float *in, size_t n)
{
	size_t i = 0;
	const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
	for (; i + 16 <= n; i += 16) {
		__m512 f = _mm512_loadu_ps(in + i);
		__m512i u = _mm512_castps_si512(f);
		__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(
								     _mm512_srli_epi32(u, 16), one)));
		__mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
		r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
		_mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
	}
	for (; i < n; i++)
		out[i] = f32_bf16(in[i]);
}
#endif

void op_f32_to_bf16(uint16_t *out, const float *in, size_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
		round_avx512(out, in, n);
		return;
	}
#endif
	for (size_t i = 0; i < n; i++)
		out[i] = f32_bf16(in[i]);
}

/* x as hi + lo, both bf16: hi = bf16(x), lo = bf16(x - hi).  hi + lo
 * carries x to about 2^-17 relative (NaN and Inf: lo is NaN, so the sum
 * stays NaN as the f32 product would be). */
void op_f32_to_bf16_split(uint16_t *hi, uint16_t *lo, const float *in, size_t n)
{
	float rest[256];
	op_f32_to_bf16(hi, in, n);
	for (size_t i = 0; i < n; i += 256) {
		size_t len = n - i < 256 ? n - i : 256;
		for (size_t t = 0; t < len; t++) {
			uint32_t u = (uint32_t)hi[i + t] << 16;
			float h;
			memcpy(&h, &u, sizeof h);
			rest[t] = in[i + t] - h;
		}
		op_f32_to_bf16(lo + i, rest, len);
	}
}
