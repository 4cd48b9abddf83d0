/*
 * util.c - small things every step needs: error formatting, number parsing,
 * paths, whole-file reads, full pread/pwrite, and output directories that
 * appear only when complete.
 */
#include "engine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int d0_errf(struct d0_err *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;
	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;
	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': mul = 1ULL << 10; end++; break;
	case 'm': case 'M': mul = 1ULL << 20; end++; break;
	case 'g': case 'G': mul = 1ULL << 30; end++; break;
	case 't': case 'T': mul = 1ULL << 40; end++; break;
	default: return -1;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -1;
	if (v && mul > UINT64_MAX / v)
		return -1;
	*out = v * mul;
	return 0;
}

const char *fmt_bytes(uint64_t n, char *buf)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, 32, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, 32, "%.1f %s", v, unit[u]);
	return buf;
}

const char *fmt_si(double v, char *buf)
{
	static const char *unit[] = {"", " k", " M", " G", " T", " P"};
	int u = 0;
	if (!(v >= 10000) || v != v) { /* small, negative or NaN: as is */
		snprintf(buf, 32, "%.0f", v);
		return buf;
	}
	while (v >= 1000 && u < 5) {
		v /= 1000;
		u++;
	}
	snprintf(buf, 32, "%.*f%s", v < 10 ? 2 : v < 100 ? 1 : 0, v, unit[u]);
	return buf;
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char *path_join(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *p = malloc(a + b + 2);
	if (!p)
		abort();
	memcpy(p, dir, a);
	if (a && dir[a - 1] != '/')
		p[a++] = '/';
	memcpy(p + a, name, b + 1);
	return p;
}

int path_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int path_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

int shard_name_ok(const char *name)
{
	if (!*name || strchr(name, '/') || strchr(name, '\\'))
		return 0;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	for (const char *p = name; *p; p++)
		if ((unsigned char)*p < 0x20)
			return 0;
	return 1;
}

int file_read_all(const char *path, size_t limit, char **out, size_t *len,
		  struct d0_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	if (fd < 0)
		return d0_errf(err, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return d0_errf(err, "%s: not a regular file", path);
	}
	if ((uint64_t)st.st_size > limit) {
		close(fd);
		return d0_errf(err, "%s: %lld bytes, more than the %zu allowed",
			       path, (long long)st.st_size, limit);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		abort();
	if (pread_full(fd, buf, (size_t)st.st_size, 0) < 0) {
		int e = errno;
		free(buf);
		close(fd);
		return d0_errf(err, "%s: read failed: %s", path, strerror(e));
	}
	close(fd);
	buf[st.st_size] = 0;
	*out = buf;
	if (len)
		*len = (size_t)st.st_size;
	return 0;
}

int pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			errno = EIO; /* file shrank under us */
			return -1;
		}
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int pwrite_full(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;
	while (n) {
		ssize_t r = pwrite(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t r = write(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int json_write_file(json_t *doc, const char *path, int sort_keys,
		    struct d0_err *err)
{
	char *s = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15) |
					  (sort_keys ? JSON_SORT_KEYS
						     : JSON_PRESERVE_ORDER));
	int fd, rc = 0;
	if (!s)
		return d0_errf(err, "%s: cannot serialise JSON", path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(s);
		return d0_errf(err, "%s: cannot create: %s", path,
			       strerror(errno));
	}
	if (write_full(fd, s, strlen(s)) < 0 || write_full(fd, "\n", 1) < 0)
		rc = d0_errf(err, "%s: write failed: %s", path, strerror(errno));
	if (close(fd) < 0 && rc == 0)
		rc = d0_errf(err, "%s: close failed: %s", path, strerror(errno));
	free(s);
	return rc;
}

static int dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int empty = 1;
	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	return empty;
}

/* Remove a directory tree of plain files (one level deep is all we make). */
static void rm_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		char *p;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		p = path_join(path, e->d_name);
		if (path_is_dir(p))
			rm_tree(p);
		else
			unlink(p);
		free(p);
	}
	closedir(d);
	rmdir(path);
}

int outdir_begin(struct outdir *o, const char *path, int force,
		 struct d0_err *err)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	memset(o, 0, sizeof *o);
	while (len > 1 && path[len - 1] == '/')
		len--;
	if (len == 0 || len >= sizeof buf - 32)
		return d0_errf(err, "%s: bad output directory", path);
	if (path_exists(path)) {
		if (!path_is_dir(path))
			return d0_errf(err, "%s: exists and is not a directory",
				       path);
		if (!dir_is_empty(path) && !force)
			return d0_errf(err,
				       "%s: directory exists and is not empty "
				       "(use --force to replace it)",
				       path);
	}
	o->final = strndup(path, len);
	/* create missing parents, like mkdir -p */
	for (char *p = o->final + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(o->final, 0755) < 0 && errno != EEXIST) {
				d0_errf(err, "%s: cannot create: %s", o->final,
					strerror(errno));
				free(o->final);
				o->final = NULL;
				return -1;
			}
			*p = '/';
		}
	snprintf(buf, sizeof buf, "%s.partial-%d", o->final, (int)getpid());
	o->partial = strdup(buf);
	rm_tree(o->partial);
	if (mkdir(o->partial, 0755) < 0) {
		d0_errf(err, "%s: cannot create: %s", o->partial,
			strerror(errno));
		free(o->final);
		free(o->partial);
		memset(o, 0, sizeof *o);
		return -1;
	}
	return 0;
}

int outdir_commit(struct outdir *o, struct d0_err *err)
{
	int rc = 0;
	if (path_exists(o->final))
		rm_tree(o->final);
	if (rename(o->partial, o->final) < 0) {
		rc = d0_errf(err, "%s: cannot rename into place: %s", o->final,
			     strerror(errno));
		rm_tree(o->partial);
	}
	free(o->final);
	free(o->partial);
	memset(o, 0, sizeof *o);
	return rc;
}

void outdir_abort(struct outdir *o)
{
	if (o->partial)
		rm_tree(o->partial);
	free(o->final);
	free(o->partial);
	memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------------- rng */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

double rng_uniform(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

uint64_t hash_str64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ULL;
	}
	return h;
}
