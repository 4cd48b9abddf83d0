/* membw - copy bandwidth (GB/s, bytes read + written counted once as the
 * bytes copied), best of several memcpy passes over 512 MiB: the bound a
 * decode step that streams every weight once per token cannot beat. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
	size_t n = (size_t)512 << 20;
	char *a = malloc(n), *b = malloc(n);
	double best = 0;
	memset(a, 1, n);
	memset(b, 2, n);
	for (int r = 0; r < 6; r++) {
		double t = now(), g;
		memcpy(r % 2 ? a : b, r % 2 ? b : a, n);
		g = (double)n / (now() - t) / 1e9;
		if (g > best)
			best = g;
	}
	printf("%.2f\n", best);
	return a[7] + b[9] == 0;
}
