/*
 * pread_eio.c - an LD_PRELOAD shim for tests: pread() of the file named
 * by DAY0_EIO_PATH fails with EIO once it reaches byte DAY0_EIO_AT, as a
 * failing disk's would; every other read goes to libc.  Built by the test
 * that uses it (cc -shared -fPIC), not by the Makefile.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int bad_fd(int fd)
{
	const char *want = getenv("DAY0_EIO_PATH");
	char link[64], path[PATH_MAX];
	ssize_t n;
	if (!want)
		return 0;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof path - 1);
	if (n < 0)
		return 0;
	path[n] = 0;
	return strcmp(path, want) == 0;
}

static ssize_t fault(int fd, size_t count, off_t off)
{
	const char *at = getenv("DAY0_EIO_AT");
	long long from = at ? atoll(at) : 0;
	if (bad_fd(fd) && (long long)off + (long long)count > from) {
		errno = EIO;
		return -1;
	}
	return 0;
}

typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);

/* The fault, or libc's sym (looked up once into *real). */
static ssize_t via(const char *sym, pread_fn *real, int fd, void *buf,
		   size_t count, off_t off)
{
	if (fault(fd, count, off) < 0)
		return -1;
	if (!*real)
		*(void **)real = dlsym(RTLD_NEXT, sym);
	return (*real)(fd, buf, count, off);
}

ssize_t pread(int fd, void *buf, size_t count, off_t off)
{
	static pread_fn real;
	return via("pread", &real, fd, buf, count, off);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t off)
{
	static pread_fn real;
	return via("pread64", &real, fd, buf, count, off);
}
