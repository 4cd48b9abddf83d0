/*
 * hash.c - SHA-256 of files with OpenSSL's EVP interface, in bounded
 * memory (one 128 KiB buffer per thread, small enough that SHA-256 and the
 * format's byte checks both read it from L2), parallel across files.
 */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#define HASH_CHUNK (1u << 17)

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
