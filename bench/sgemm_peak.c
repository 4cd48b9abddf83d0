/* sgemm_peak - the OpenBLAS sgemm rate on this machine (GFLOP/s), with
 * the BLAS's threads (OPENBLAS_NUM_THREADS): the reference bench/forward.sh
 * measures the forward pass's model FLOP utilisation against.
 *
 *   sgemm_peak [N] [--sbgemm | --onednn bf16|f32]
 *   sgemm_peak --core        the kernel set OpenBLAS chose (openblas_get_corename)
 *
 * --sbgemm: the bf16 product cblas_sbgemm instead, looked up at run time
 * (older OpenBLAS builds do not export it): prints "none" when absent.
 * --onednn: oneDNN's matmul (bf16 x bf16 -> f32, or f32), N^3 in the
 * layouts the engine's prefill gives it (x row-major, W's rows as stored),
 * on as many OpenMP threads as OPENBLAS_NUM_THREADS says (default 1): the
 * reference for the engine's oneDNN prefill; its ISA on stderr. */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef void (*sbgemm_fn)(int, int, int, int, int, int, float,
			  const uint16_t *, int, const uint16_t *, int, float,
			  float *, int);

static int sbgemm_peak(int n, int reps)
{
	sbgemm_fn f = (sbgemm_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
	uint16_t *a, *b;
	float *c;
	double best = 0;
	if (!f) {
		printf("none\n");
		return 0;
	}
	a = malloc(2 * (size_t)n * n);
	b = malloc(2 * (size_t)n * n);
	c = malloc(4 * (size_t)n * n);
	for (long i = 0; i < (long)n * n; i++) {
		a[i] = 0x3c00 + (uint16_t)(i % 97); /* ~1e-2 */
		b[i] = 0x3c00 + (uint16_t)(i % 89);
	}
	for (int r = 0; r < reps + 1; r++) {
		double t = now(), g;
		f(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n,
		  0, c, n);
		g = 2.0 * n * n * (double)n / (now() - t) / 1e9;
		if (r && g > best)
			best = g;
	}
	printf("%.2f\n", best);
	free(a);
	free(b);
	free(c);
	return 0;
}

extern void omp_set_num_threads(int n);

static int onednn_peak(int n, int reps, int bf16)
{
	dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
	dnnl_engine_t eng;
	dnnl_stream_t st;
	dnnl_memory_desc_t a, b, c;
	dnnl_dims_t d = {n, n};
	dnnl_matmul_desc_t md;
	dnnl_primitive_desc_t pd;
	dnnl_primitive_t p;
	dnnl_memory_t am, bm, cm;
	const char *impl = "?", *t = getenv("OPENBLAS_NUM_THREADS");
	size_t es = bf16 ? 2 : 4;
	double best = 0;
	omp_set_num_threads(t && atoi(t) > 0 ? atoi(t) : 1);
	void *ab = malloc(es * (size_t)n * n), *bb = malloc(es * (size_t)n * n);
	float *cb = malloc(4 * (size_t)n * n);
	for (long i = 0; i < (long)n * n; i++) {
		if (bf16) {
			((uint16_t *)ab)[i] = 0x3c00 + (uint16_t)(i % 97);
			((uint16_t *)bb)[i] = 0x3c00 + (uint16_t)(i % 89);
		} else {
			((float *)ab)[i] = 1e-3f * (float)(i % 97);
			((float *)bb)[i] = 1e-3f * (float)(i % 89);
		}
	}
	if (dnnl_engine_create(&eng, dnnl_cpu, 0) ||
	    dnnl_stream_create(&st, eng, dnnl_stream_default_flags) ||
	    dnnl_memory_desc_init_by_tag(&a, 2, d, dt, dnnl_ab) ||
	    dnnl_memory_desc_init_by_tag(&b, 2, d, dt, dnnl_ba) ||
	    dnnl_memory_desc_init_by_tag(&c, 2, d, dnnl_f32, dnnl_ab) ||
	    dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) ||
	    dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) ||
	    dnnl_primitive_create(&p, pd) || dnnl_memory_create(&am, &a, eng, ab) ||
	    dnnl_memory_create(&bm, &b, eng, bb) || dnnl_memory_create(&cm, &c, eng, cb)) {
		fprintf(stderr, "sgemm_peak: oneDNN's %s matmul could not be made\n",
			bf16 ? "bf16" : "f32");
		return 1;
	}
	dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
	fprintf(stderr, "oneDNN %s matmul: %s\n", bf16 ? "bf16" : "f32", impl);
	dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
	for (int r = 0; r < reps + 1; r++) {
		double t0 = now(), g;
		dnnl_primitive_execute(p, st, 3, args);
		dnnl_stream_wait(st);
		g = 2.0 * n * n * (double)n / (now() - t0) / 1e9;
		if (r && g > best)
			best = g;
	}
	printf("%.2f\n", best);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : 2048, reps = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sbgemm"))
			return sbgemm_peak(n, reps);
		if (!strcmp(argv[i], "--onednn") && i + 1 < argc)
			return onednn_peak(n, reps, strcmp(argv[i + 1], "f32") != 0);
		if (!strcmp(argv[i], "--core")) {
			printf("%s\n", openblas_get_corename());
			return 0;
		}
	}
	float *a = malloc(sizeof(float) * (size_t)n * n);
	float *b = malloc(sizeof(float) * (size_t)n * n);
	float *c = malloc(sizeof(float) * (size_t)n * n);
	double best = 0;
	for (long i = 0; i < (long)n * n; i++) {
		a[i] = 1e-3f * (float)(i % 97);
		b[i] = 1e-3f * (float)(i % 89);
	}
	for (int r = 0; r < reps + 1; r++) {
		double t = now(), g;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a,
			    n, b, n, 0, c, n);
		g = 2.0 * n * n * (double)n / (now() - t) / 1e9;
		if (r && g > best) /* the first run warms up */
			best = g;
	}
	printf("%.2f\n", best);
	free(a);
	free(b);
	free(c);
	return 0;
}
