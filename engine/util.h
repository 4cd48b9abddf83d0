/*
 * util.h - what every day0 program shares: the version, exit statuses, `struct d0_err`
 * (errors are values with a message naming the file and what was expected),
 * number and size parsing, paths, full-transfer IO, atomic output
 * directories, JSON files, the deterministic rng (util.c).
 */
#ifndef DAY0_UTIL_H
#define DAY0_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#define DAY0_VERSION "0.1.0"
#define DAY0_PROTO_VERSION 1
/* The build id: a hash of the sources, "unknown" outside a make build
 * (build_id.c, docs/compat.md). */
const char *d0_build_id(void);

/* Exit statuses shared by every program. */
enum { EXIT_OK = 0, EXIT_CHECK_FAILED = 1, EXIT_USAGE = 2 };

/* ---------------------------------------------------------------- errors */

struct d0_err {
	char msg[1024];
};

/* Format a message into err (if non-NULL); always returns -1. */
int d0_errf(struct d0_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parse a size such as 4096, 64K, 256M, 2G (binary multiples). */
int parse_size(const char *s, uint64_t *out);
/* Parse a non-negative integer in [min,max]. */
int parse_long(const char *s, long min, long max, long *out);

/* "1.5 GiB" style; buf must hold 32 bytes. */
const char *fmt_bytes(uint64_t n, char *buf);
/* A count or rate in SI: "950", "12.3 k", "3.33 G"; buf holds 32 bytes. */
const char *fmt_si(double v, char *buf);
/* Monotonic seconds, for progress and throughput. */
double now_s(void);

/* ------------------------------------------------------------------ paths */

/* Join dir and name into a malloc'd string. */
char *path_join(const char *dir, const char *name);
/* Read a whole small file (limit bytes at most) into a NUL-terminated buffer. */
int file_read_all(const char *path, size_t limit, char **out, size_t *len,
		  struct d0_err *err);
/* True if path names a directory. */
int path_is_dir(const char *path);
int path_exists(const char *path);
/* A shard name from an index must be a plain file name in the model dir. */
int shard_name_ok(const char *name);

/*
 * Output directories are built under "<dir>.partial-<pid>" and renamed into
 * place only when complete, so a crash or a failure never leaves a
 * half-written checkpoint where a finished one is expected.
 */
struct outdir {
	char *final;   /* requested path */
	char *partial; /* where files are written meanwhile */
};
int outdir_begin(struct outdir *o, const char *path, int force,
		 struct d0_err *err);
int outdir_commit(struct outdir *o, struct d0_err *err);
void outdir_abort(struct outdir *o); /* removes the partial dir */

/* pread/pwrite that loop over short transfers. */
int pread_full(int fd, void *buf, size_t n, uint64_t off);
int pwrite_full(int fd, const void *buf, size_t n, uint64_t off);
int write_full(int fd, const void *buf, size_t n);

/*
 * Write a JSON document to path: indent 2, trailing newline; keys sorted
 * (as Python's json.dumps(sort_keys=True) does for HF files) or in
 * insertion order.
 */
int json_write_file(json_t *doc, const char *path, int sort_keys,
		    struct d0_err *err);

/* ------------------------------------------------------------------- rng */

/* Deterministic generator (splitmix64 seeding xoshiro256**). */
struct rng {
	uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
double rng_uniform(struct rng *r); /* [0,1) */
uint64_t hash_str64(const char *s); /* FNV-1a, to seed per tensor */

#endif
