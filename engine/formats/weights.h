/*
 * weights.h - weights on disk: safetensors dtypes and conversion (dtype.c), the strict
 * safetensors parser and streaming writer (safetensors.c), a Hugging Face
 * checkpoint directory (checkpoint.c), SHA-256 of files (hash.c).
 */
#ifndef DAY0_WEIGHTS_H
#define DAY0_WEIGHTS_H

#include "util.h"

/* ----------------------------------------------------------------- dtypes */

enum dtype {
	DT_BOOL, DT_U8, DT_I8, DT_F8_E5M2, DT_F8_E4M3, DT_I16, DT_U16, DT_F16,
	DT_BF16, DT_I32, DT_U32, DT_F32, DT_F64, DT_I64, DT_U64,
	DT_COUNT,
	DT_INVALID = -1
};

enum dtype dtype_from_name(const char *name); /* "F32" -> DT_F32 */
const char *dtype_name(enum dtype d);          /* DT_F32 -> "F32" */
size_t dtype_size(enum dtype d);
/* Lower-case user-facing names: f32, bf16, f16 (DT_INVALID otherwise). */
enum dtype dtype_from_user(const char *name);
const char *dtype_user_name(enum dtype d);
const char *dtype_torch_name(enum dtype d); /* "float32", "bfloat16", ... */

uint16_t f32_to_bf16(float f); /* round to nearest even, NaN kept NaN */
uint16_t f32_to_f16(float f);  /* round to nearest even, overflow to Inf */
float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);
/*
 * Convert n elements between float dtypes (F32, BF16, F16).  src and dst may
 * not overlap.  Returns -1 for an unsupported pair.
 */
int dtype_convert(enum dtype from, const void *src, enum dtype to, void *dst,
		  size_t n);

/* ------------------------------------------------------------ safetensors */

#define ST_MAX_HEADER 100000000ULL
#define ST_MAX_DIMS 8

struct st_tensor {
	char *name;
	enum dtype dtype;
	int ndim;
	uint64_t shape[ST_MAX_DIMS];
	uint64_t begin, end; /* byte offsets relative to the data buffer */
};

struct st_file {
	char *path;        /* as given (for messages) */
	uint64_t file_size;
	uint64_t header_len; /* N, the JSON header length */
	uint64_t data_off;   /* 8 + N */
	size_t ntensors;
	struct st_tensor *tensors; /* in header order */
	json_t *metadata;          /* __metadata__ object or NULL */
};

/*
 * Parse and strictly validate a safetensors header.  buf holds the first
 * len bytes of a file that is file_size bytes long (len >= 8 + N is needed
 * to succeed; pass the whole header).  Checks every rule the reference
 * parser enforces.  On failure err says what is wrong (and which tensor).
 */
int st_parse(const uint8_t *buf, size_t len, uint64_t file_size,
	     struct st_file *out, struct d0_err *err);
/* Open path, read its header and validate it.  Messages start with path. */
int st_open(const char *path, struct st_file *out, struct d0_err *err);
void st_free(struct st_file *f);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
uint64_t st_numel(const struct st_tensor *t);

/*
 * Streaming writer: declare every tensor first, then st_writer_begin()
 * writes the header, then tensor bytes go in with st_writer_put() at any
 * offset inside a declared tensor (pwrite, so any order works).
 */
struct st_writer;
struct st_writer *st_writer_new(void);
void st_writer_free(struct st_writer *w);
/* Shape is copied.  Tensors are laid out in declaration order. */
int st_writer_add(struct st_writer *w, const char *name, enum dtype dt,
		  int ndim, const uint64_t *shape);
void st_writer_meta(struct st_writer *w, const char *key, const char *value);
int st_writer_begin(struct st_writer *w, const char *path, struct d0_err *err);
/* Write n bytes at byte offset off inside tensor idx (declaration index). */
int st_writer_put(struct st_writer *w, size_t idx, uint64_t off,
		  const void *buf, size_t n, struct d0_err *err);
/*
 * The same for count segments of seg bytes, the i-th read from
 * base + i * stride, written one after another from off (a column slice
 * of a row-major tensor, written without gathering it first).
 */
int st_writer_put_strided(struct st_writer *w, size_t idx, uint64_t off,
			  const void *base, size_t seg, size_t stride,
			  size_t count, struct d0_err *err);
int st_writer_finish(struct st_writer *w, struct d0_err *err);
/*
 * SHA-256 of the finished file, available (return 0) when every write came
 * in file order, so writers that stream need not read their output back.
 */
int st_writer_sha256(const struct st_writer *w, char hex[65]);
/* Skip that hashing (call before st_writer_begin). */
void st_writer_no_hash(struct st_writer *w);
uint64_t st_writer_total(const struct st_writer *w); /* file size */

/* ------------------------------------------------------------- checkpoint */

struct ckpt_shard {
	char *name; /* file name inside the dir */
	char *path;
	struct st_file st; /* parsed header (valid only if parsed == 1) */
	int parsed;
	char *expected_sha; /* from SHA256SUMS, or NULL */
	char sha[65];       /* computed */
};

struct ckpt {
	char *dir;
	int has_index;
	json_t *index;       /* model.safetensors.index.json or NULL */
	size_t nshards;
	struct ckpt_shard *shards;
};

/* Shard list from the index (or model.safetensors), without opening shards. */
int ckpt_open(const char *dir, struct ckpt *c, struct d0_err *err);
void ckpt_close(struct ckpt *c);
/* Parse a sha256sum-format file into a JSON object name -> hex. */
int sums_load(const char *path, json_t **out, struct d0_err *err);

/* ------------------------------------------------------------------- hash */

/*
 * A Hugging Face hub cache snapshot (models--ORG--NAME/snapshots/REV):
 * hf_cache.c.  Shards link to blobs named by their SHA-256.
 */
struct hf_snapshot {
	char *repo;  /* .../models--ORG--NAME (resolved) */
	char *blobs; /* repo/blobs */
	char name[256], revision[128];
};
/* 1 if dir is such a snapshot (s filled; hf_snapshot_close it), else 0. */
int hf_snapshot_open(const char *dir, struct hf_snapshot *s);
void hf_snapshot_close(struct hf_snapshot *s);
/*
 * File name of the snapshot dir: 1 and sha filled when it links to a blob
 * named by a SHA-256; 0 when it is no such link; -1 (err) when the link
 * resolves outside the repository (refused, not read).
 */
int hf_snapshot_blob(const struct hf_snapshot *s, const char *dir,
		     const char *name, char sha[65], struct d0_err *err);

/* SHA-256 of a file, read in bounded chunks; hex written to out[65]. */
/* Stop OpenBLAS's spinning worker threads, where the library has them
 * (verify and convert use no BLAS; hash.c says why). */
void blas_threads_quiet(void);
int sha256_file(const char *path, char out[65], uint64_t *bytes_done,
		struct d0_err *err);

struct hash_job {
	const char *path;
	char hex[65];
	int rc;
	struct d0_err err;
	uint64_t size;
	/* Optional: sees every chunk as it is hashed (file offset, bytes), so
	 * verify checks values in the same single read. */
	void (*on_bytes)(void *arg, uint64_t off, const void *buf, size_t n);
	void *on_bytes_arg;
};
/*
 * Hash jobs with up to `threads` threads.  *progress (if non-NULL) is
 * updated atomically with the bytes hashed so far; tick() is called from
 * the calling thread about every 200 ms while work is in flight.
 */
void hash_files(struct hash_job *jobs, size_t n, int threads,
		uint64_t *progress, void (*tick)(void *), void *arg);

/*
 * How verify and convert read the page-cache bytes they stream once
 * (readpath.c): READ_MAP through a read-only mapping, READ_PREAD with
 * pread() into a reused buffer; measured once per process (a mapping's
 * first touch of a page costs a trip to the host under some
 * hypervisors), DAY0_READ=map|read forces one.  read_path_name() says
 * which and the probe's figures (verify --json's "read").
 */
enum { READ_MAP, READ_PREAD };
int read_path(void);
const char *read_path_name(void);
/* The probe's rule on its best times each way: READ_MAP unless the mapping
 * took more than 1.3x pread's time; READ_PREAD past 2x, or past 1.3x on
 * the full probe (full); else -1, the full probe to decide. */
int read_path_rule(double map_s, double read_s, int full);

#endif
