/* sgemm_peak - the OpenBLAS sgemm rate on this machine (GFLOP/s), with
 * the BLAS's threads (OPENBLAS_NUM_THREADS): the reference bench/forward.sh
 * measures the forward pass's model FLOP utilisation against.
 *
 *   sgemm_peak [N] [--sbgemm]
 *   sgemm_peak --core        the kernel set OpenBLAS chose (openblas_get_corename)
 *
 * --sbgemm: the bf16 product cblas_sbgemm instead, looked up at run time
 * (older OpenBLAS builds do not export it): prints "none" when absent. */
#include <cblas.h>
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

int main(int argc, char **argv)
{
	int n = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : 2048, reps = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sbgemm"))
			return sbgemm_peak(n, reps);
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
