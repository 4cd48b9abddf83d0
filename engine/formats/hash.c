/*
 * hash.c - SHA-256 of files with OpenSSL's EVP interface, in bounded
 * memory, parallel across files.  A regular file is hashed from a
 * read-only mapping, 128 KiB at a time (small enough that SHA-256 and the
 * format's byte checks both read it from L2): read() into a buffer spent
 * as long copying out of the page cache as SHA-256 took (perf, verify
 * --threads 2 of the FP8 bench model: _copy_to_iter 54% of the samples).
 * The mapping is populated a few MiB ahead (MADV_POPULATE_READ: a file cut
 * short meanwhile is a read error, not a SIGBUS) and dropped behind, so
 * resident memory stays a window whatever the file size.  Where mapping
 * fails (or the kernel lacks MADV_POPULATE_READ), read() as before; and
 * where read() is the faster way on this machine (readpath.c: under a
 * hypervisor that charges a mapping's first touch of each page, 3 against
 * 14 GB/s on a Zen 5 PVM guest), read() into a 128 KiB buffer.
 */
#include "engine.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#define HASH_CHUNK (1u << 17)
#define HASH_WINDOW (4u << 20) /* populated ahead, dropped behind */

/*
 * EVP_DigestUpdate of m[off, off + n) a HASH_PIECE at a time, each piece
 * HASH_AHEAD bytes further prefetched first.  SHA-256 takes a block at a
 * time in a chain the core cannot run ahead of, so it reads the mapping's
 * page-cache pages at memory's latency, not its bandwidth: a third of
 * verify's time was its first load of a block waiting (f32 bench model:
 * 0.79x openssl, whose read() copy runs ahead).  Prefetched 16 KiB ahead
 * (4, 32, 64 and 256 KiB, and to L2 or L3 only, were slower), the blocks
 * come from L1 or L2: 0.98-1.03x openssl.  Not where a byte check follows
 * the hashing (FP8 files: format_fp8.check reads each chunk again): its
 * fast pass over the chunk runs the hardware prefetcher into the next
 * one, and prefetching there too cost 6% (1.50 -> 1.60 s on the FP8 bench
 * model).
 */
#define HASH_AHEAD (16u << 10)
#define HASH_PIECE 4096u

static void digest_ahead(EVP_MD_CTX *ctx, const unsigned char *m, uint64_t size,
			 uint64_t off, size_t n)
{
	for (size_t i = 0; i < n; i += HASH_PIECE) {
		size_t k = n - i < HASH_PIECE ? n - i : HASH_PIECE;
		uint64_t a = off + i + HASH_AHEAD;
		for (uint64_t p = a; p < a + HASH_PIECE && p < size; p += 64)
			__builtin_prefetch(m + p, 0, 3);
		EVP_DigestUpdate(ctx, m + off + i, k);
	}
}

/*
 * Hash the file's size bytes from a mapping into ctx.  1: not mapped
 * (the caller reads instead), 0 done, -1 error (err set).
 */
static int sha256_mapped(int fd, const char *path, EVP_MD_CTX *ctx,
			 uint64_t *progress, uint64_t *total,
			 const struct hash_job *job, struct d0_err *err)
{
	struct stat st;
	unsigned char *m;
	uint64_t size, ready = 0, dropped = 0, off;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
		return 1;
	size = (uint64_t)st.st_size;
	m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return 1;
	madvise(m, (size_t)size, MADV_SEQUENTIAL);
	for (off = 0; off < size;) {
		size_t n = size - off < HASH_CHUNK ? (size_t)(size - off) : HASH_CHUNK;
		if (off + n > ready) {
			uint64_t end = off + HASH_WINDOW < size ? off + HASH_WINDOW : size;
			int r;
			if (off > dropped) { /* behind us, page-aligned */
				madvise(m + dropped, (size_t)(off - dropped),
					MADV_DONTNEED);
				dropped = off;
			}
			do
				r = madvise(m + ready, (size_t)(end - ready),
					    MADV_POPULATE_READ);
			while (r < 0 && errno == EINTR);
			if (r < 0 && errno == EINVAL && ready == 0) {
				munmap(m, (size_t)size); /* old kernel: read() */
				return 1;
			}
			if (r < 0) {
				int e = errno;
				munmap(m, (size_t)size);
				return d0_errf(err, "%s: read failed at byte %llu: %s "
					       "(the file changed while hashed?)",
					       path, (unsigned long long)ready,
					       strerror(e));
			}
			ready = end;
		}
		if (job && job->on_bytes) /* the check below streams ahead */
			EVP_DigestUpdate(ctx, m + off, n);
		else
			digest_ahead(ctx, m, size, off, n);
		if (job && job->on_bytes)
			job->on_bytes(job->on_bytes_arg, off, m + off, n);
		off += n;
		if (total)
			*total += n;
		if (progress)
			__atomic_add_fetch(progress, (uint64_t)n, __ATOMIC_RELAXED);
	}
	munmap(m, (size_t)size);
	return 0;
}

static int sha256_fd(int fd, const char *path, char out[65],
		     uint64_t *progress, uint64_t *total,
		     const struct hash_job *job, struct d0_err *err)
{
	uint64_t off = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char *buf = malloc(HASH_CHUNK);
	int rc = 0;
	if (!ctx || !buf)
		abort();
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	rc = read_path() == READ_MAP
		     ? sha256_mapped(fd, path, ctx, progress, total, job, err)
		     : 1;
	if (rc == 1)
		rc = 0;
	else
		goto done;
	for (;;) {
		ssize_t r = read(fd, buf, HASH_CHUNK);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = d0_errf(err, "%s: read failed: %s", path,
				     strerror(errno));
			break;
		}
		if (r == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)r);
		if (job && job->on_bytes)
			job->on_bytes(job->on_bytes_arg, off, buf, (size_t)r);
		off += (uint64_t)r;
		if (total)
			*total += (uint64_t)r;
		if (progress)
			__atomic_add_fetch(progress, (uint64_t)r,
					   __ATOMIC_RELAXED);
	}
done:
	if (rc == 0) {
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		for (unsigned i = 0; i < mdlen; i++)
			snprintf(out + 2 * i, 3, "%02x", md[i]);
	}
	EVP_MD_CTX_free(ctx);
	free(buf);
	return rc;
}

/* Open a regular file for hashing; a FIFO or device is refused at once. */
static int open_regular(const char *path, struct d0_err *err)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return d0_errf(err, "%s: cannot open: %s", path,
			       strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return d0_errf(err, "%s: not a regular file", path);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return fd;
}

int sha256_file(const char *path, char out[65], uint64_t *bytes_done,
		struct d0_err *err)
{
	int fd = open_regular(path, err), rc;
	if (fd < 0)
		return -1;
	rc = sha256_fd(fd, path, out, bytes_done, NULL, NULL, err);
	close(fd);
	return rc;
}

/*
 * OpenBLAS (pthreads build) starts its worker threads when the library
 * is loaded, before main, and each spins on sched_yield for ~0.1 s before
 * it sleeps (strace: ~8000 calls from process start).  On two cores that
 * takes a core's share from verify's hashing threads and convert's
 * writers at their start.  Neither uses BLAS: stop the workers (OpenBLAS
 * starts them again if a BLAS call ever wants them).  The symbol is looked
 * up at run time, as another BLAS (or another OpenBLAS build) lacks it.
 */
void blas_threads_quiet(void)
{
	static int done;
	int (*shutdown)(void);
	if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
		return;
	*(void **)&shutdown = dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
	if (shutdown)
		shutdown();
}

struct pool {
	struct hash_job *jobs;
	size_t n, next;
	uint64_t *progress;
	pthread_mutex_t mu;
	pthread_cond_t done;
	int running;
};

static void *worker(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		struct hash_job *j;
		int fd;
		pthread_mutex_lock(&p->mu);
		j = p->next < p->n ? &p->jobs[p->next++] : NULL;
		pthread_mutex_unlock(&p->mu);
		if (!j)
			break;
		j->size = 0;
		fd = open_regular(j->path, &j->err);
		if (fd < 0) {
			j->rc = -1;
			continue;
		}
		j->rc = sha256_fd(fd, j->path, j->hex, p->progress, &j->size, j,
				  &j->err);
		close(fd);
	}
	pthread_mutex_lock(&p->mu);
	p->running--;
	pthread_cond_signal(&p->done);
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

void hash_files(struct hash_job *jobs, size_t n, int threads,
		uint64_t *progress, void (*tick)(void *), void *arg)
{
	struct pool p = {.jobs = jobs, .n = n, .progress = progress};
	pthread_t *tid;
	int t;
	blas_threads_quiet();
	if (threads < 1)
		threads = 1;
	if ((size_t)threads > n)
		threads = n ? (int)n : 1;
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.done, NULL);
	for (size_t i = 0; i < n; i++) {
		jobs[i].rc = 0;
		jobs[i].hex[0] = 0;
		jobs[i].err.msg[0] = 0;
	}
	tid = calloc((size_t)threads, sizeof *tid);
	p.running = threads;
	for (t = 0; t < threads; t++)
		if (pthread_create(&tid[t], NULL, worker, &p)) {
			pthread_mutex_lock(&p.mu);
			p.running--;
			pthread_mutex_unlock(&p.mu);
			tid[t] = 0;
			if (t == 0) { /* no thread at all: do it here */
				p.running++;
				worker(&p);
			}
		}
	/* Wake on every finished worker, or every 200 ms to report progress. */
	pthread_mutex_lock(&p.mu);
	while (p.running > 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (pthread_cond_timedwait(&p.done, &p.mu, &ts) && tick) {
			pthread_mutex_unlock(&p.mu);
			tick(arg);
			pthread_mutex_lock(&p.mu);
		}
	}
	pthread_mutex_unlock(&p.mu);
	for (t = 0; t < threads; t++)
		if (tid[t])
			pthread_join(tid[t], NULL);
	free(tid);
	pthread_cond_destroy(&p.done);
	pthread_mutex_destroy(&p.mu);
}
