/*
 * readpath.c - how verify and convert read the page-cache bytes they
 * stream once: through a read-only mapping of the file, or with pread()
 * into a small reused buffer.
 *
 * A mapping saves the kernel's copy out of the page cache (on bare metal
 * and the Sapphire Rapids VMs seen so far, verify hashed 1.03x openssl
 * from it, which reads into a buffer).  But under some hypervisors every
 * page first touched through a new mapping costs a trip to the host: on
 * the Zen 5 PVM guest of 2026-12-04 mapped page-cache pages were read at
 * 3 GB/s (populated ahead or not) against 14-15 GB/s for pread's copy,
 * and verify ran at 0.85x openssl.  Which is faster is a property of the
 * machine, not of the code, so it is measured once per process, like the
 * kernels: 2 MiB of a memfd (shmem pages, touched through a fresh
 * mapping exactly as a file's would be) read both ways, twice each,
 * interleaved, the best time of each taken: the mapping unless it took
 * more than 1.3x pread's time (it saves a copy the probe cannot see,
 * MAP_SLACK below); where it took between 1.3x and 2x, the same again
 * over 16 MiB.  On the Zen 5 guests
 * the mapped reads are the slow ones (1.0 against 4.7 GB/s, 2026-12-06):
 * the 16 MiB probe took ~35 ms there (a verify of a tiny model 0.042 s
 * with DAY0_READ=read, 0.076 s measuring), the 2 MiB one decides it.
 *
 * DAY0_READ=map or =read forces one (an A/B, or a machine where the probe
 * misleads); anything else is warned about once and the probe used.
 */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PROBE_BYTES (16u << 20)
#define PROBE_QUICK (2u << 20)
#define PROBE_BUF (128u << 10)
#define PROBE_WIN (1u << 20)

/* A word of every cache line of p[0, n) summed: the consumer's loads. */
static uint64_t sum_lines(const unsigned char *p, size_t n)
{
	uint64_t s = 0;
	for (size_t i = 0; i < n; i += 64) {
		uint64_t v;
		memcpy(&v, p + i, sizeof v);
		s += v;
	}
	return s;
}

/* Read the file through fresh mappings of PROBE_WIN bytes, populated as
 * the steps populate theirs, every line read (sum_lines); seconds, or -1.
 * A window at a time so that the probe's mapped shmem pages add no more
 * than that to the peak RSS. */
static double time_map(int fd, size_t bytes, volatile uint64_t *sink)
{
	double t0 = now_s();
	uint64_t s = 0;
	for (size_t off = 0; off < bytes; off += PROBE_WIN) {
		unsigned char *m = mmap(NULL, PROBE_WIN, PROT_READ, MAP_PRIVATE,
					fd, (off_t)off);
		if (m == MAP_FAILED)
			return -1;
		(void)madvise(m, PROBE_WIN, MADV_POPULATE_READ);
		s += sum_lines(m, PROBE_WIN);
		munmap(m, PROBE_WIN);
	}
	*sink += s;
	return now_s() - t0;
}

/* pread the file into a PROBE_BUF buffer, every line read; seconds or -1. */
static double time_read(int fd, size_t bytes, unsigned char *buf,
			volatile uint64_t *sink)
{
	double t0 = now_s();
	uint64_t s = 0;
	for (size_t off = 0; off < bytes; off += PROBE_BUF) {
		if (pread(fd, buf, PROBE_BUF, (off_t)off) != (ssize_t)PROBE_BUF)
			return -1;
		s += sum_lines(buf, PROBE_BUF);
	}
	*sink += s;
	return now_s() - t0;
}

static int mode = -1; /* READ_MAP / READ_PREAD once decided */
static double probe_map_s, probe_read_s;
static size_t probe_bytes; /* read each way, each pass */
static const char *why = "";
static pthread_once_t once = PTHREAD_ONCE_INIT;

/*
 * The probe's bytes are a few MiB just written, in the cache, where
 * pread's copy costs little; a step's bytes come from memory, where the
 * copy is a second pass over them that the mapping does not make.  So
 * the mapping is taken unless it reads more than MAP_SLACK times slower
 * than pread here.  On Emerald Rapids (2026-12-07) the probe read mapped
 * pages at 7.5-15 GB/s and pread's at 9-13, and took pread in about half
 * the processes, while every step ran faster mapped, in alternating runs:
 * f32 -> bf16 tp 4 0.24-0.29 s against 0.29-0.31, FP8 -> bf16 1.37-1.45
 * against 1.55-1.60, verify 1.48-1.54 / 0.78-0.81 s against 1.67-1.70 /
 * 0.88-0.91 (1 / 2 threads), FP8 keep even.  The PVM guests' mapped
 * reads (1.0 against 4.7 GB/s) still take pread.
 */
#define MAP_SLACK 1.3

int read_path_rule(double map_s, double read_s, int full)
{
	if (map_s <= MAP_SLACK * read_s)
		return READ_MAP;
	if (full || map_s > 2 * read_s)
		return READ_PREAD;
	return -1; /* the full probe decides */
}

static int probe(void)
{
	volatile uint64_t sink = 0;
	unsigned char *buf = malloc(PROBE_BUF);
	int fd = memfd_create("day0-read-probe", MFD_CLOEXEC);
	double bm = 1e9, br = 1e9;
	if (!buf || fd < 0 || ftruncate(fd, PROBE_BYTES) < 0)
		goto fail;
	memset(buf, 0x5a, PROBE_BUF);
	/* A quick pass of PROBE_QUICK bytes each way first: where one way
	 * takes more than twice the other's time (the PVM guest: mapped 1.0
	 * against pread 4.7 GB/s), it decides, in ~3 ms instead of the full
	 * probe's ~35 ms (a convert's or verify's fixed cost); so it does
	 * where the mapping is no more than MAP_SLACK times slower (below).
	 * In between, the full probe. */
	int m = READ_MAP;
	for (size_t bytes = PROBE_QUICK, filled = 0;; bytes = PROBE_BYTES) {
		for (; filled < bytes; filled += PROBE_BUF)
			if (pwrite(fd, buf, PROBE_BUF, (off_t)filled) !=
			    (ssize_t)PROBE_BUF)
				goto fail;
		bm = br = 1e9;
		for (int r = 0; r < 2; r++) {
			double tm = time_map(fd, bytes, &sink),
			       tr = time_read(fd, bytes, buf, &sink);
			if (tm < 0 || tr < 0)
				goto fail;
			bm = tm < bm ? tm : bm;
			br = tr < br ? tr : br;
		}
		probe_bytes = bytes;
		if ((m = read_path_rule(bm, br, bytes == PROBE_BYTES)) >= 0)
			break;
	}
	close(fd);
	free(buf);
	probe_map_s = bm, probe_read_s = br;
	return m;
fail: /* no memfd (old kernel, seccomp): the mapping, as before */
	why = "no probe";
	if (fd >= 0)
		close(fd);
	free(buf);
	return READ_MAP;
}

static void decide(void)
{
	const char *e = getenv("DAY0_READ");
	if (e && !strcmp(e, "map")) {
		mode = READ_MAP, why = "DAY0_READ";
		return;
	}
	if (e && !strcmp(e, "read")) {
		mode = READ_PREAD, why = "DAY0_READ";
		return;
	}
	if (e && *e && strcmp(e, "auto"))
		fprintf(stderr, "day0-engine: DAY0_READ=%s: expected map, read or "
				"auto (the default); measuring\n", e);
	mode = probe();
}

int read_path(void)
{
	pthread_once(&once, decide);
	return mode;
}

const char *read_path_name(void)
{
	static char name[96];
	int m = read_path();
	if (probe_map_s > 0 && probe_read_s > 0)
		snprintf(name, sizeof name, "%s (mapped %.1f GB/s, pread %.1f GB/s)",
			 m == READ_MAP ? "map" : "pread",
			 probe_bytes / probe_map_s / 1e9, probe_bytes / probe_read_s / 1e9);
	else
		snprintf(name, sizeof name, "%s (%s)", m == READ_MAP ? "map" : "pread", why);
	return name;
}
