/* sgemm_peak - the OpenBLAS sgemm rate on this machine (GFLOP/s), with
 * the BLAS's default threads: the reference bench/forward.sh measures the
 * forward pass's model FLOP utilisation against. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2048, reps = 5;
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
