/*
 * safetensors.c - strict reader and streaming writer for the safetensors
 * format (https://github.com/huggingface/safetensors).
 *
 * File: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then
 * the data buffer.  The parser enforces what the reference implementation
 * enforces: N <= 100,000,000 and inside the file; the header is a JSON
 * object (trailing whitespace allowed); known dtypes; shape x dtype size
 * equals each byte range, with overflow checks; ranges are contiguous from
 * 0, never overlap, leave no gap and end exactly at the end of the file;
 * __metadata__ maps strings to strings.  We also reject duplicate names,
 * which the JSON grammar allows but a checkpoint must not have.
 */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/evp.h>

#define IOV_BATCH 1024 /* IOV_MAX on Linux */

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static int get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const struct st_tensor *x = *(const struct st_tensor *const *)a;
	const struct st_tensor *y = *(const struct st_tensor *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	/* qsort is not stable: break ties so messages do not vary by libc */
	return strcmp(x->name, y->name);
}

uint64_t st_numel(const struct st_tensor *t)
{
	uint64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

/* Fill t from one header entry; message names the tensor. */
static int parse_tensor(const char *name, json_t *info, struct st_tensor *t,
			struct d0_err *err)
{
	json_t *dt = json_object_get(info, "dtype");
	json_t *shape = json_object_get(info, "shape");
	json_t *offs = json_object_get(info, "data_offsets");
	uint64_t numel = 1, bytes;
	size_t i;
	json_t *v;

	if (!json_is_object(info))
		return d0_errf(err, "tensor '%s': entry is not a JSON object",
			       name);
	if (!json_is_string(dt))
		return d0_errf(err, "tensor '%s': missing or non-string dtype",
			       name);
	t->dtype = dtype_from_name(json_string_value(dt));
	if (t->dtype == DT_INVALID)
		return d0_errf(err, "tensor '%s': unknown dtype '%s'", name,
			       json_string_value(dt));
	if (!json_is_array(shape))
		return d0_errf(err, "tensor '%s': missing or non-array shape",
			       name);
	if (json_array_size(shape) > ST_MAX_DIMS)
		return d0_errf(err, "tensor '%s': %zu dimensions, at most %d "
			       "supported", name, json_array_size(shape),
			       ST_MAX_DIMS);
	t->ndim = (int)json_array_size(shape);
	json_array_foreach(shape, i, v) {
		if (get_u64(v, &t->shape[i]) < 0)
			return d0_errf(err, "tensor '%s': shape[%zu] is not a "
				       "non-negative integer", name, i);
		if (t->shape[i] && numel > UINT64_MAX / t->shape[i])
			return d0_errf(err, "tensor '%s': shape overflows",
				       name);
		numel *= t->shape[i];
	}
	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    get_u64(json_array_get(offs, 0), &t->begin) < 0 ||
	    get_u64(json_array_get(offs, 1), &t->end) < 0)
		return d0_errf(err, "tensor '%s': data_offsets must be two "
			       "non-negative integers", name);
	if (t->end < t->begin)
		return d0_errf(err, "tensor '%s': data_offsets end %llu before "
			       "begin %llu", name, (unsigned long long)t->end,
			       (unsigned long long)t->begin);
	if (numel > UINT64_MAX / dtype_size(t->dtype))
		return d0_errf(err, "tensor '%s': byte size overflows", name);
	bytes = numel * dtype_size(t->dtype);
	if (bytes != t->end - t->begin)
		return d0_errf(err, "tensor '%s': shape x %s is %llu bytes but "
			       "data_offsets span %llu", name,
			       dtype_name(t->dtype), (unsigned long long)bytes,
			       (unsigned long long)(t->end - t->begin));
	return 0;
}

int st_parse(const uint8_t *buf, size_t len, uint64_t file_size,
	     struct st_file *out, struct d0_err *err)
{
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	struct st_tensor **order = NULL;
	uint64_t n, data_len, pos;
	size_t i, k;

	memset(out, 0, sizeof *out);
	out->file_size = file_size;
	if (file_size < 8 || len < 8)
		return d0_errf(err, "file is %llu bytes, too short for the "
			       "8-byte header length",
			       (unsigned long long)file_size);
	n = le64(buf);
	if (n > ST_MAX_HEADER)
		return d0_errf(err, "header length %llu exceeds the %llu-byte "
			       "limit", (unsigned long long)n,
			       (unsigned long long)ST_MAX_HEADER);
	if (n > file_size - 8)
		return d0_errf(err, "header length %llu runs past the end of "
			       "the file (%llu bytes)", (unsigned long long)n,
			       (unsigned long long)file_size);
	if (n + 8 > len)
		return d0_errf(err, "header truncated: %zu of %llu bytes read",
			       len, (unsigned long long)(n + 8));
	if (n == 0 || buf[8] != '{')
		return d0_errf(err, "header does not start with '{'");
	out->header_len = n;
	out->data_off = 8 + n;
	data_len = file_size - out->data_off;

	root = json_loadb((const char *)buf + 8, (size_t)n,
			  JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return d0_errf(err, "header is not valid JSON: %s (at byte "
			       "%d)", jerr.text, jerr.position);
	if (!json_is_object(root)) {
		json_decref(root);
		return d0_errf(err, "header is not a JSON object");
	}
	out->tensors = calloc(json_object_size(root) + 1, sizeof *out->tensors);
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			const char *mk;
			json_t *mv;
			if (!json_is_object(v)) {
				d0_errf(err, "__metadata__ is not an object");
				goto fail;
			}
			json_object_foreach(v, mk, mv) {
				if (!json_is_string(mv)) {
					d0_errf(err, "__metadata__ value for "
						"'%s' is not a string", mk);
					goto fail;
				}
			}
			out->metadata = json_incref(v);
			continue;
		}
		struct st_tensor *t = &out->tensors[out->ntensors];
		if (parse_tensor(key, v, t, err) < 0)
			goto fail;
		t->name = strdup(key);
		out->ntensors++;
	}
	json_decref(root);
	root = NULL;

	/* Ranges must tile [0, data_len) exactly. */
	order = malloc((out->ntensors + 1) * sizeof *order);
	for (k = 0; k < out->ntensors; k++)
		order[k] = &out->tensors[k];
	qsort(order, out->ntensors, sizeof *order, cmp_range);
	pos = 0;
	for (i = 0; i < out->ntensors; i++) {
		const struct st_tensor *t = order[i];
		if (t->begin < pos) {
			d0_errf(err, "tensor '%s': bytes %llu..%llu overlap "
				"tensor '%s'", t->name,
				(unsigned long long)t->begin,
				(unsigned long long)t->end, order[i - 1]->name);
			goto fail;
		}
		if (t->begin > pos) {
			d0_errf(err, "tensor '%s': gap of %llu bytes before it "
				"(starts at %llu, previous data ends at %llu)",
				t->name, (unsigned long long)(t->begin - pos),
				(unsigned long long)t->begin,
				(unsigned long long)pos);
			goto fail;
		}
		if (t->end > data_len) {
			d0_errf(err, "tensor '%s': data_offsets end %llu beyond "
				"the data buffer (%llu bytes)", t->name,
				(unsigned long long)t->end,
				(unsigned long long)data_len);
			goto fail;
		}
		pos = t->end;
	}
	if (pos != data_len) {
		d0_errf(err, "%llu trailing bytes after the last tensor (data "
			"ends at %llu, buffer is %llu bytes)",
			(unsigned long long)(data_len - pos),
			(unsigned long long)pos, (unsigned long long)data_len);
		goto fail;
	}
	free(order);
	return 0;
fail:
	free(order);
	json_decref(root);
	st_free(out);
	return -1;
}

int st_open(const char *path, struct st_file *out, struct d0_err *err)
{
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; it is then
	 * refused below as not a regular file. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	uint8_t head[8];
	uint8_t *buf;
	uint64_t n, want;
	struct d0_err e;
	int rc;

	memset(out, 0, sizeof *out);
	if (fd < 0)
		return d0_errf(err, "%s: cannot open: %s", path,
			       strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return d0_errf(err, "%s: not a regular file", path);
	}
	/* Read only as much as the header needs, and never more than allowed. */
	want = (uint64_t)st.st_size < 8 ? (uint64_t)st.st_size : 8;
	if (pread_full(fd, head, (size_t)want, 0) < 0) {
		close(fd);
		return d0_errf(err, "%s: read failed: %s", path,
			       strerror(errno));
	}
	n = want == 8 ? le64(head) : 0;
	if (want < 8 || n > ST_MAX_HEADER || n > (uint64_t)st.st_size - 8)
		want = want < 8 ? want : 8; /* st_parse reports the problem */
	else
		want = 8 + n;
	buf = malloc((size_t)want + 1);
	if (!buf)
		abort();
	memcpy(buf, head, want < 8 ? want : 8);
	if (want > 8 && pread_full(fd, buf + 8, (size_t)(want - 8), 8) < 0) {
		free(buf);
		close(fd);
		return d0_errf(err, "%s: read failed: %s", path,
			       strerror(errno));
	}
	close(fd);
	rc = st_parse(buf, (size_t)want, (uint64_t)st.st_size, out, &e);
	free(buf);
	if (rc < 0)
		return d0_errf(err, "%s: %s", path, e.msg);
	out->path = strdup(path);
	return 0;
}

void st_free(struct st_file *f)
{
	for (size_t i = 0; i < f->ntensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	free(f->path);
	json_decref(f->metadata);
	memset(f, 0, sizeof *f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	for (size_t i = 0; i < f->ntensors; i++)
		if (!strcmp(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

/* ----------------------------------------------------------------- writer */

struct st_writer {
	struct st_tensor *t;
	size_t n, cap;
	json_t *meta;
	char *path;
	int fd;
	/* written: data bytes put so far, added atomically (convert's two
	 * writer threads may put into one file at once; pwrite at distinct
	 * offsets needs no lock of ours, the count does) */
	uint64_t data_off, data_len, written;
	/* SHA-256 of the file, kept while writes arrive in file order (a
	 * hashed writer takes its puts from one thread only) */
	EVP_MD_CTX *sha;
	uint64_t sha_pos;
	int sequential, no_hash;
	char hex[65];
};

void st_writer_no_hash(struct st_writer *w)
{
	w->no_hash = 1;
}

struct st_writer *st_writer_new(void)
{
	struct st_writer *w = calloc(1, sizeof *w);
	if (!w)
		abort();
	w->fd = -1;
	return w;
}

void st_writer_free(struct st_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	free(w->t);
	json_decref(w->meta);
	if (w->fd >= 0)
		close(w->fd);
	EVP_MD_CTX_free(w->sha);
	free(w->path);
	free(w);
}

int st_writer_add(struct st_writer *w, const char *name, enum dtype dt,
		  int ndim, const uint64_t *shape)
{
	struct st_tensor *t;
	if (ndim > ST_MAX_DIMS)
		return -1;
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 64;
		w->t = realloc(w->t, w->cap * sizeof *w->t);
		if (!w->t)
			abort();
	}
	t = &w->t[w->n++];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	t->dtype = dt;
	t->ndim = ndim;
	memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
	t->begin = w->data_len;
	t->end = t->begin + st_numel(t) * dtype_size(dt);
	w->data_len = t->end;
	return 0;
}

void st_writer_meta(struct st_writer *w, const char *key, const char *value)
{
	if (!w->meta)
		w->meta = json_object();
	json_object_set_new(w->meta, key, json_string(value));
}

int st_writer_begin(struct st_writer *w, const char *path, struct d0_err *err)
{
	json_t *root = json_object();
	char *hdr;
	size_t hlen, padded;
	uint8_t len8[8];

	if (w->meta)
		json_object_set(root, "__metadata__", w->meta);
	for (size_t i = 0; i < w->n; i++) {
		json_t *shape = json_array();
		for (int d = 0; d < w->t[i].ndim; d++)
			json_array_append_new(shape,
					      json_integer((json_int_t)w->t[i].shape[d]));
		json_object_set_new(
			root, w->t[i].name,
			json_pack("{s:s, s:o, s:[I,I]}", "dtype",
				  dtype_name(w->t[i].dtype), "shape", shape,
				  "data_offsets", (json_int_t)w->t[i].begin,
				  (json_int_t)w->t[i].end));
	}
	hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	hlen = strlen(hdr);
	/* Pad with spaces so the data buffer starts 8-byte aligned. */
	padded = (hlen + 8 + 7) / 8 * 8 - 8;
	hdr = realloc(hdr, padded + 1);
	memset(hdr + hlen, ' ', padded - hlen);
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
	w->data_off = 8 + padded;
	w->path = strdup(path);
	w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		free(hdr);
		return d0_errf(err, "%s: cannot create: %s", path,
			       strerror(errno));
	}
	if (!w->no_hash) {
		w->sha = EVP_MD_CTX_new();
		EVP_DigestInit_ex(w->sha, EVP_sha256(), NULL);
		EVP_DigestUpdate(w->sha, len8, 8);
		EVP_DigestUpdate(w->sha, hdr, padded);
		w->sha_pos = w->data_off;
		w->sequential = 1;
	}
	if (write_full(w->fd, len8, 8) < 0 ||
	    write_full(w->fd, hdr, padded) < 0 ||
	    ftruncate(w->fd, (off_t)(w->data_off + w->data_len)) < 0) {
		free(hdr);
		return d0_errf(err, "%s: write failed: %s", path,
			       strerror(errno));
	}
	free(hdr);
	return 0;
}

/*
 * pwrite count segments of seg bytes, the i-th from base + i * stride, to
 * consecutive file bytes from off: one pwritev per IOV_MAX segments, so
 * a column slice goes from the source's mapped pages to the page cache in
 * one kernel copy (no gather into a buffer first).  Short writes resume.
 */
static int pwrite_strided(int fd, const unsigned char *base, size_t seg,
			  size_t stride, size_t count, uint64_t off)
{
	struct iovec iov[IOV_BATCH];
	size_t i = 0, skip = 0; /* segment i, bytes of it already written */
	while (i < count) {
		int k = 0;
		ssize_t r;
		for (size_t j = i; j < count && k < IOV_BATCH; j++, k++) {
			size_t s0 = j == i ? skip : 0;
			iov[k].iov_base = (void *)(base + j * stride + s0);
			iov[k].iov_len = seg - s0;
		}
		r = pwritev(fd, iov, k, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			errno = EIO;
			return -1;
		}
		off += (uint64_t)r;
		for (size_t left = (size_t)r; left;) {
			size_t in = seg - skip;
			if (left < in) {
				skip += left;
				break;
			}
			left -= in;
			skip = 0;
			i++;
		}
	}
	return 0;
}

int st_writer_put(struct st_writer *w, size_t idx, uint64_t off,
		  const void *buf, size_t n, struct d0_err *err)
{
	return st_writer_put_strided(w, idx, off, buf, n, n, 1, err);
}

int st_writer_put_strided(struct st_writer *w, size_t idx, uint64_t off,
			  const void *base, size_t seg, size_t stride,
			  size_t count, struct d0_err *err)
{
	const struct st_tensor *t;
	uint64_t n = (uint64_t)seg * count;
	const unsigned char *b = base;
	int rc;
	if (idx >= w->n || w->fd < 0)
		return d0_errf(err, "%s: internal: bad tensor index %zu",
			       w->path ? w->path : "?", idx);
	t = &w->t[idx];
	if (off > t->end - t->begin || n > t->end - t->begin - off)
		return d0_errf(err, "%s: tensor '%s': write of %llu bytes at %llu "
			       "outside its %llu bytes", w->path, t->name,
			       (unsigned long long)n, (unsigned long long)off,
			       (unsigned long long)(t->end - t->begin));
	if (count == 1)
		rc = pwrite_full(w->fd, base, seg, w->data_off + t->begin + off);
	else
		rc = pwrite_strided(w->fd, base, seg, stride, count,
				    w->data_off + t->begin + off);
	if (rc < 0)
		return d0_errf(err, "%s: write failed: %s%s", w->path,
			       strerror(errno),
			       errno == EFAULT ? " (the source changed while "
						 "it was read?)" : "");
	if (w->sequential && w->data_off + t->begin + off == w->sha_pos) {
		for (size_t i = 0; i < count; i++)
			EVP_DigestUpdate(w->sha, b + i * stride, seg);
		w->sha_pos += n;
	} else if (w->sequential) {
		w->sequential = 0;
	}
	__atomic_fetch_add(&w->written, n, __ATOMIC_RELAXED);
	return 0;
}

int st_writer_finish(struct st_writer *w, struct d0_err *err)
{
	int rc = 0;
	if (w->fd < 0)
		return d0_errf(err, "internal: writer not started");
	if (w->written != w->data_len)
		rc = d0_errf(err, "%s: internal: %llu of %llu data bytes written",
			     w->path, (unsigned long long)w->written,
			     (unsigned long long)w->data_len);
	if (close(w->fd) < 0 && rc == 0)
		rc = d0_errf(err, "%s: close failed: %s", w->path,
			     strerror(errno));
	w->fd = -1;
	if (rc == 0 && w->sequential && w->sha_pos == w->data_off + w->data_len) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int mdlen = 0;
		EVP_DigestFinal_ex(w->sha, md, &mdlen);
		for (unsigned i = 0; i < mdlen; i++)
			snprintf(w->hex + 2 * i, 3, "%02x", md[i]);
	}
	return rc;
}

int st_writer_sha256(const struct st_writer *w, char hex[65])
{
	if (!w->hex[0])
		return -1;
	memcpy(hex, w->hex, 65);
	return 0;
}

uint64_t st_writer_total(const struct st_writer *w)
{
	uint64_t hlen = 2; /* approximate before begin(); exact after */
	return w->data_off ? w->data_off + w->data_len : hlen + w->data_len;
}
