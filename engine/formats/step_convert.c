/*
 * step_convert.c - `day0-engine convert`: reshard a Hugging Face checkpoint
 * into one safetensors file per rank plus layout.json, the manifest the
 * runtime checks before it loads anything.
 *
 * Streaming, in bounded memory: source shards are read in file order,
 * tensor by tensor, a chunk of at most CONV_CHUNK elements at a time; each
 * chunk is converted to the target dtype and written to every rank that
 * holds it.  Writing overlaps converting: the writes of one chunk are
 * handed to writer threads while the next chunk is converted into another
 * buffer (the kernel's copy into the page cache is the largest cost of a
 * convert, as large as dd's writing the same bytes).  FP8 -> bf16/f16 is
 * decoded by the writer threads themselves, each the slices it writes, a
 * piece at a time (lane_decode), so both cores decode and copy.
 *
 * The source is read through a read-only mapping of each shard, not with
 * pread into a buffer: a tensor kept as stored (--dtype keep, or the
 * source's dtype) goes from the mapped page-cache pages straight into the
 * rank files (pwritev; a column slice as one iovec per row), so the only
 * copy is the kernel's into the output's page cache, the copy dd does; a
 * converted one is decoded from the mapping into a buffer.  The mapping
 * is populated a few MiB ahead of use (MADV_POPULATE_READ: one call, not
 * a fault per 64 KiB in the writer threads; a file cut short meanwhile is
 * an error there, not a SIGBUS) and dropped behind (MADV_DONTNEED) once
 * the writes that read it are done, so resident memory stays a few tens
 * of MiB (two chunk buffers plus the mapped window) whatever the shard or
 * model size.  Where a mapping's first touch of each page is the slower
 * way (readpath.c measures it: under some hypervisors it costs a trip to
 * the host, 3 against 14 GB/s for pread's copy on a Zen 5 PVM guest), the
 * chunks are pread instead into their batch's own buffer, which then
 * stands where the mapping did: kept tensors are written from it, the
 * lanes decode from it, and it is reused once its batch is written.
 *
 * Source checksums: layout.json records each source shard's SHA-256.  By
 * default they are taken from SHA256SUMS, which `verify` has just checked
 * (hashing every byte a second time would cost more than the conversion
 * itself); a shard SHA256SUMS does not list, or every shard with
 * --verify-source, is hashed on the way, since we read in file order, and
 * compared with SHA256SUMS.
 *
 * The split of every tensor is layout.c's; the tensor set is model.c's.
 */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

#include <openssl/evp.h>

#define CONV_CHUNK (1u << 20) /* elements */
/* The source mapping: populated this far ahead of the chunk being read,
 * dropped behind in steps of this much; a batch of writes straight from
 * it is handed over once it holds this many bytes. */
#define MAP_AHEAD (2u << 20)
#define MAP_DROP (1u << 20)
#define BATCH_BYTES (2u << 20)

static int run(int argc, char **argv);

const struct step_entry step_convert = {
	.name = "convert",
	.usage = "MODEL_DIR OUT_DIR --dtype bf16|f16|f32|keep --tp T [--pp P] "
		 "[--ep E] [--verify-source] [--force] [--events]",
	.summary = "reshard a checkpoint into per-rank safetensors files plus "
		   "layout.json",
	.help = "  MODEL_DIR OUT_DIR  the Hugging Face checkpoint and a new directory for the\n"
	"                     per-rank files (rank-NNNNN-of-NNNNN.safetensors, layout.json)\n"
	"  --dtype D          bf16, f16 or f32 (dequantised exactly; norms stay f32) or\n"
	"                     keep (the stored format: FP8 blocks with their scales)\n"
	"  --tp/--pp/--ep     the layout the files are cut for (--tp required)\n"
	"  --verify-source    hash every source byte again while converting (default:\n"
	"                     the checksums are taken from SHA256SUMS)\n"
	"  --force            replace OUT_DIR if it exists\n"
	"  --events           day0 protocol events (progress) on stdout\n"
	"environment: DAY0_READ=map|read: read the source through a mapping or with\n"
	"                     pread (default: the mapping, unless a probe at start\n"
	"                     finds it 1.3x slower; the summary says which)\n"
	"example: day0-engine convert /models/m /scratch/m-tp4 --dtype bf16 --tp 4",
	.run = run,
};

/*
 * One source tensor and where its slices go.  A quantised weight kept in
 * its format is one item per stored part (values, scale), each sliced on
 * the weight's split axis; dequantised, it is one item whose values are
 * decoded with the scale tensor held in memory.
 */
struct item {
	const struct st_tensor *src;
	const struct tensor_spec *spec;
	const char *name;   /* the stored tensor written (a part's name) */
	int ndim;
	uint64_t shape[2];  /* the stored tensor's full shape */
	int dequant;        /* decode values x scale (quant_view below) */
	struct quant_view view;
	void *scale;        /* dequant: the whole scale tensor */
	struct tensor_split split;
	enum dtype to;
	size_t shard;     /* source shard index */
	int *slot;        /* per rank: tensor index in its writer, or -1 */
	uint64_t sliced[2]; /* shape of one slice */
	/* a whole tensor of more than 2 dims (a vision tower's Conv3d
	 * patch embedding): streamed as [shape[0], the rest], written with
	 * its own shape */
	int hdr_ndim;
	const uint64_t *hdr_shape;
};

struct conv {
	struct ckpt ck;
	struct model_config cfg;
	struct layout_dims d;
	enum dtype dtype;
	int keep;              /* --dtype keep: the source's stored format */
	int world;
	struct tensor_spec *specs;
	size_t nspecs;
	struct item *items;
	size_t nitems;
	struct st_writer **w; /* per rank */
	char (*src_sha)[65];
	int *src_hashed;       /* per shard: hashed here (1) or from SUMS (0) */
	int verify_source;     /* hash every shard, compare with SHA256SUMS */
	json_t *sums;          /* SHA256SUMS or NULL */
	uint64_t total_bytes, done_bytes;
	/* the current shard's mapping: [drop_end, pop_end) is populated,
	 * pos is where the last chunk read began */
	const unsigned char *map;
	size_t map_len;
	uint64_t pop_end, drop_end, pos;
	/* reading several parts in turn: the lowest offset still to be read
	 * (nothing at or above it is dropped); UINT64_MAX otherwise */
	uint64_t keep_from;
	int no_populate; /* the kernel lacks MADV_POPULATE_READ */
	/* the chunk buffer (set[fill]'s) and the f32 scratch of decode */
	unsigned char *cv_buf;
	float *f32_buf;
	struct write_queue *wq;
	int lane_decode; /* conversions done by the writer lanes */
	/* READ_PREAD: the source is pread from fd into the batch's sbuf,
	 * not mapped (map is NULL); a batch's sbuf holds sbuf_cap bytes */
	int pread_src, fd;
	size_t sbuf_cap;
	int deferred;    /* read_src's result: stored bytes for the lanes */
	/* lane_read (READ_PREAD, two lanes): a chunk the lanes write as
	 * read (kept, or converted by them) is pread by the lane that writes
	 * it, not by the main thread: chunk_rd is its read in the batch (-1:
	 * the chunk was read here), chunk_put0 its first put, chunk_seq
	 * counts chunks shared out in turn */
	int lane_read;
	long chunk_rd;
	size_t chunk_put0;
	unsigned chunk_seq;
	uint64_t lane_bytes; /* source bytes pread by the lanes */
	uint64_t block_bytes; /* ... of them a block at a time (lane_blocks) */
	size_t chunk_bytes; /* each buffer: min(CONV_CHUNK, largest tensor) x 4 */
	const char *shard_path;
};

/*
 * The writer threads.  The main thread adds the writes of one chunk to
 * batch[fill], whose data live in buffer fill or in the source mapping,
 * and hands it over (wq_submit); the batches form a ring of WQ_RING, each
 * lane working through them in order, so a lane can still be writing one
 * batch while the other writes the next and the main thread fills a
 * third.  The main thread waits only for the slot it is about to fill
 * (its buffer is then free again).  Writes straight from the mapping
 * need no buffer: they gather into one batch of up to BATCH_BYTES before
 * it is handed over (a hand-off per 1 MiB chunk cost more than the
 * chunk's copy when the lanes woke for each).  Rank r's file is written
 * by lane r % nlanes (but see lane_read below): ext4 takes a file's inode
 * lock for a buffered write, so two lanes in one file would only take
 * turns; two files at a time is what runs the two copies side by side.
 * Two lanes: the kernel's copy into the page cache is
 * the largest cost of a convert, as large as dd's.  The ring matters when
 * consecutive batches are for one lane each (a tensor split on its first
 * axis sends a run of chunks to one rank): with two batches and a barrier
 * between them (before 2026-12-03) the lanes took turns instead, and with
 * three a lane still waited for work while the main thread waited for the
 * other lane to free the oldest slot (FP8 -> bf16 on bench/weights.sh's
 * model: 1.5 s at three; four, each lane one batch queued behind the one
 * it writes, 1.04-1.48 s, as eight in the same rounds, 1.10-1.55 s, whose
 * mapped window put tests/sh/test_memory.sh's convert over its bound).  A
 * batch counts the source bytes it reads from the mapping; a slot's buffer
 * is allocated when first filled, and the lanes' converted batches use
 * none.  The first write error stops the writing and is returned by the
 * next submit.
 *
 * Reading with pread (READ_PREAD), a chunk that the lanes write as read
 * (kept) or convert themselves is pread by its lane, into the batch's
 * buffer where the main thread would have put it, just before the lane
 * writes it (lane_read; DAY0_CONVERT_LANE_READ=0 reads on the main thread
 * as before).  The kernel's copy out of the source's page cache then runs
 * on both cores instead of one (perf, FP8 keep tp 4 on the Zen 5 guest:
 * the main thread's pread was 43% of the samples against the lanes' 24-27%
 * each; with the lanes reading, 40% and 39%), and the bytes are in the
 * writing core's cache.  All the puts of such a chunk go to its lane:
 * rank r's lane (r % nlanes) where every rank it goes to is that lane's
 * (a part of a tensor split on its first axis, so each file still has one
 * writer), else the lanes take the chunks in turn (column slices for every
 * rank: the two lanes then meet in a file's inode lock at times, 5% of the
 * samples, less than the read they share).
 */
#define WQ_LANES 2
#define WQ_RING 4

struct put { /* count segments of n bytes, buf + i * stride each */
	struct st_writer *w;
	int lane;
	int rd; /* lane_read: the batch's read of the bytes at buf, or -1 */
	size_t slot;
	uint64_t off;
	const void *buf;
	size_t n, stride, count;
	/* it set (a converted put): buf is item it's stored bytes in the
	 * source mapping (FP8 codes, or another dtype), converted by the
	 * lane (lane_decode): count segments of n elements `stride`
	 * elements apart, the first at logical element el; n, stride and
	 * count then count elements, not bytes */
	const struct item *it;
	uint64_t el;
};

/* A chunk's source bytes for a lane to pread (lane_read): a block at a
 * time into the lane's own buffer (lane_blocks), or as its puts need
 * them into dst, its place in the batch's buffer (rd_need). */
struct lane_rd {
	unsigned char *dst;
	size_t n;
	size_t got; /* bytes read so far (rd_need) */
	uint64_t off;
	int fd, lane;
	const struct item *it; /* for the error */
};

struct write_queue;
struct wq_lane {
	struct write_queue *q;
	int id;
	pthread_t th;
	int started;
	unsigned next; /* the next batch (count of handed-over batches) */
	unsigned char *dbuf; /* lane_decode's results, a piece at a time */
	struct lane_rd *rd;  /* the read of the put being written, or NULL */
	unsigned char *lbuf; /* lane_blocks' block of source, LANE_BLOCK bytes */
};

struct write_queue {
	struct wq_lane lane[WQ_LANES];
	int nlanes;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sync_ok;  /* mu and cv initialised */
	struct put *batch[WQ_RING];
	size_t n[WQ_RING], cap[WQ_RING];
	uint64_t bytes[WQ_RING]; /* bytes a batch writes */
	uint64_t lo[WQ_RING];    /* its lowest source offset read from the mapping */
	int left[WQ_RING];       /* lanes still to write a handed-over batch */
	unsigned char *buf[WQ_RING];
	/* READ_PREAD (readpath.c): the source bytes a batch's puts read,
	 * pread into sbuf[b] (sused of them; allocated when first read) */
	unsigned char *sbuf[WQ_RING];
	size_t sused[WQ_RING];
	/* lane_read: the reads of a batch's chunks, each by its lane */
	struct lane_rd *rd[WQ_RING];
	size_t nrd[WQ_RING], caprd[WQ_RING];
	int fill;     /* the batch the main thread adds to */
	unsigned gen; /* batches handed over so far */
	int stop, failed;
	struct d0_err err;
	const struct quant_config *qc;    /* FP8 puts' format */
	const struct ckpt_shard *shards; /* for a converted put's error */
	size_t piece; /* lane_decode's piece: LANE_PIECE bytes */
	uint64_t block_bytes; /* read by lane_blocks (atomic) */
};

/*
 * A converted put (FP8 decoded, or a dtype converted): its stored bytes
 * converted and written piece by piece, each piece of
 * at most LANE_PIECE bytes of results decoded into the lane's buffer and
 * written from there while it is still in this core's L2 (a whole 2 MiB
 * chunk decoded first and then written went through memory twice more).
 * Whole rows are decoded with decode16 (a piece whole rows too where the
 * put is), a column slice of a chunk of rows with decode16_rect (row by
 * row where it cannot).  The lanes decode what they write, each on its
 * own core, so decoding and the kernel's copy into the page cache run
 * side by side without a hand-off between them.
 */
#define LANE_PIECE (256u << 10)

/* n elements of p's item from logical element el (its stored bytes at
 * src) converted into out: FP8 decoded (decode16), else dtype_convert. */
static int lane_conv(struct wq_lane *ln, const struct put *p, const uint8_t *src,
		     uint64_t el, size_t n, void *out)
{
	const struct item *it = p->it;
	struct quant_view v;
	if (!it->dequant)
		return dtype_convert(it->src->dtype, src, it->to, out, n);
	v = it->view;
	v.values = src;
	return format_of(ln->q->qc)->decode16(ln->q->qc, &v, el, n, it->to, out);
}

/* Source bytes of logical elements [0, el) of it (for a count of
 * elements from a whole-byte start: FP8 one a code). */
static uint64_t src_bytes(const struct item *it, uint64_t el)
{
	uint64_t numel = it->shape[0] * it->shape[1];
	uint64_t stored = it->src->end - it->src->begin;
	if (!it->dequant)
		return el * dtype_size(it->src->dtype);
	return numel ? el * stored / numel : 0; /* FP8: 1, int4: 1/2 byte */
}

/* A source read that failed (errno set): the shard, tensor and bytes.
 * pread_full says EIO for a file that ended early as well as for the
 * disk's own error. */
static int read_failed(struct d0_err *err, const char *path,
		       const struct item *it, uint64_t off, uint64_t n)
{
	int e = errno;
	return d0_errf(err, "%s: tensor '%s': cannot read bytes %llu-%llu: %s%s",
		       path, it->src->name, (unsigned long long)off,
		       (unsigned long long)(off + n), strerror(e),
		       e == EIO ? " (a disk error, or the file was cut short "
				  "since it was opened)"
				: "");
}

/*
 * lane_read, a chunk lane_blocks does not take (FP8 decoded, a tensor
 * written as stored): the put being written reads the chunk's source
 * bytes up to end; read them now into the chunk's place in the batch's
 * buffer, and up to RD_STEP past what was read, unless they are in
 * already.  The chunk is read a step at a time as its puts need it, not
 * whole before the first of them starts, so that the bytes are decoded
 * soon after the kernel's copy put them in this core's cache.  end past
 * the chunk is cut to it (the callers ask for a byte more than the
 * elements' src_bytes, in case a count ends inside a byte).
 */
#define RD_STEP (512u << 10)
static int rd_need(struct wq_lane *ln, const uint8_t *end, struct d0_err *err)
{
	struct lane_rd *r = ln->rd;
	size_t want, to;
	if (!r || end <= r->dst + r->got)
		return 0;
	want = (size_t)(end - r->dst);
	to = r->got + RD_STEP > want ? r->got + RD_STEP : want;
	if (to > r->n)
		to = r->n;
	if (pread_full(r->fd, r->dst + r->got, to - r->got, r->off + r->got) < 0)
		return read_failed(err, ln->q->shards[r->it->shard].path, r->it,
				   r->off + r->got, to - r->got);
	r->got = to;
	return 0;
}

/* n contiguous elements from logical element el (stored at src), written
 * at *done bytes past the put's offset, a piece at a time. */
static int lane_run(struct wq_lane *ln, const struct put *p,
		    const uint8_t *src, uint64_t el, size_t n, uint64_t *done,
		    struct d0_err *err)
{
	const struct item *it = p->it;
	uint64_t cols = it->dequant ? it->view.cols : 0;
	size_t es = dtype_size(it->to), max = ln->q->piece / es, step = max;
	if (cols && el % cols == 0 && n % cols == 0 && cols <= max)
		step = max / cols * cols; /* whole rows: decode16's block path */
	for (size_t i = 0; i < n; i += step) {
		size_t k = n - i < step ? n - i : step;
		if (rd_need(ln, src + src_bytes(it, i + k) + 1, err) < 0 ||
		    lane_conv(ln, p, src + src_bytes(it, i), el + i, k, ln->dbuf) < 0)
			return -1;
		if (st_writer_put_strided(p->w, p->slot, p->off + *done, ln->dbuf,
					  k * es, k * es, 1, err) < 0)
			return -1;
		*done += k * es;
	}
	return 0;
}

/* Rows [r0, r1) of a put of count segments (rows), their source from
 * src0 (row r0's), written where they go in the put. */
static int lane_rows(struct wq_lane *ln, const struct put *p,
		     const uint8_t *src0, size_t r0, size_t r1,
		     struct d0_err *err)
{
	const struct item *it = p->it;
	const struct quant_config *qc = ln->q->qc;
	const struct weight_format *f = it->dequant ? format_of(qc) : NULL;
	struct quant_view v = it->view;
	uint64_t cols = v.cols;
	size_t es = dtype_size(it->to), max = ln->q->piece / es, rows;
	size_t sstride = src_bytes(it, p->stride); /* source bytes row to row */
	uint64_t done = (uint64_t)r0 * p->n * es;
	if (p->n > max) { /* a segment larger than a piece: one at a time */
		for (size_t r = r0; r < r1; r++)
			if (lane_run(ln, p, src0 + (r - r0) * sstride,
				     p->el + r * p->stride, p->n, &done, err) < 0)
				return -1;
		return 0;
	}
	/* count segments of n elements, stride (the weight's columns)
	 * apart: as many rows a piece as fit */
	rows = max / p->n;
	for (size_t r = r0; r < r1; r += rows) {
		size_t k = r1 - r < rows ? r1 - r : rows;
		uint64_t el = p->el + r * p->stride;
		const uint8_t *src = src0 + (r - r0) * sstride;
		v.values = src;
		if (rd_need(ln, src + (k - 1) * sstride + src_bytes(it, p->n) + 1,
			    err) < 0)
			return -1;
		if (!f || !f->decode16_rect || p->stride != cols ||
		    f->decode16_rect(qc, &v, el / cols, k, el % cols, p->n,
				     it->to, (uint16_t *)ln->dbuf) < 0)
			for (size_t j = 0; j < k; j++)
				if (lane_conv(ln, p, src + j * sstride,
					      el + j * p->stride, p->n,
					      ln->dbuf + j * p->n * es) < 0)
					return -1;
		if (st_writer_put_strided(p->w, p->slot, p->off + done, ln->dbuf,
					  k * p->n * es, k * p->n * es, 1, err) < 0)
			return -1;
		done += k * p->n * es;
	}
	return 0;
}

static int lane_decode(struct wq_lane *ln, const struct put *p,
		       struct d0_err *err)
{
	uint64_t done = 0;
	if (p->count == 1)
		return lane_run(ln, p, p->buf, p->el, p->n, &done, err);
	return lane_rows(ln, p, p->buf, 0, p->count, err);
}

/*
 * The puts ps[0, np) read one chunk, r, that this lane reads itself, and
 * convert a dtype (f32 -> bf16, ...; not a format's decode): the chunk is
 * read a block at a time into the lane's own buffer, reused block after
 * block so that it stays in this core's L2, and each put converts and
 * writes its part of the block from there (the rows of a block for a
 * column slice).  Read into the chunk's 4 MiB place in the batch's
 * buffer instead, a step at a time (rd_need), the kernel's copy wrote to
 * lines that had left the cache since the last batch, and f32 -> bf16 on
 * bench/weights.sh's model took 0.32-0.38 s against 0.23-0.25 s for a
 * plain pread / convert / write loop over the same files.  0: done, 1:
 * not for this path (the caller writes put by put), -1: an error.
 */
#define LANE_BLOCK (512u << 10)
static int lane_blocks(struct wq_lane *ln, const struct put *ps, size_t np,
		       struct lane_rd *r, struct d0_err *err)
{
	const struct put *p0 = &ps[0];
	int strided = p0->count > 1;
	size_t ses, rowb = 0, step;
	for (size_t i = 0; i < np; i++) {
		const struct put *p = &ps[i];
		if (!p->it || p->it->dequant || (p->count > 1) != strided ||
		    p->it != p0->it ||
		    (strided && (p->stride != p0->stride || p->count != p0->count)))
			return 1;
	}
	ses = dtype_size(p0->it->src->dtype);
	if (strided) { /* whole rows a block */
		rowb = p0->stride * ses;
		if (rowb > LANE_BLOCK || p0->count * rowb != r->n)
			return 1;
		step = LANE_BLOCK / rowb * rowb;
	} else {
		step = LANE_BLOCK / ses * ses;
	}
	if (!ln->lbuf && !(ln->lbuf = malloc(LANE_BLOCK)))
		return 1; /* put by put, then */
	ln->rd = NULL; /* the bytes are in lbuf, not at r->dst */
	for (size_t bs = 0; bs < r->n; bs += step) {
		size_t be = r->n - bs < step ? r->n : bs + step;
		if (pread_full(r->fd, ln->lbuf, be - bs, r->off + bs) < 0)
			return read_failed(err, ln->q->shards[r->it->shard].path,
					   r->it, r->off + bs, be - bs);
		for (size_t i = 0; i < np; i++) {
			/* lane 1 starts half the ranks further on than lane 0
			 * (tp 4: 0 1 2 3 and 2 3 0 1), so that they write
			 * different files at a time (ext4's inode lock: one
			 * buffered writer a file) */
			const struct put *p =
				&ps[(i + (size_t)ln->id * np / (size_t)ln->q->nlanes) % np];
			size_t at = (size_t)((const unsigned char *)p->buf - r->dst);
			size_t es = dtype_size(p->it->to);
			if (strided) { /* at: the slice's first column's byte */
				if (lane_rows(ln, p, ln->lbuf + at, bs / rowb,
					      be / rowb, err) < 0)
					return -1;
				continue;
			}
			size_t a = at > bs ? at : bs, e = at + p->n * ses;
			uint64_t done = (a - at) / ses * es;
			if (e > be)
				e = be;
			if (a < e &&
			    lane_run(ln, p, ln->lbuf + (a - bs), p->el + (a - at) / ses,
				     (e - a) / ses, &done, err) < 0)
				return -1;
		}
	}
	r->got = r->n;
	__atomic_fetch_add(&ln->q->block_bytes, (uint64_t)r->n, __ATOMIC_RELAXED);
	return 0;
}

/* A conversion error (the write's error is st_writer's own). */
static int lane_put_dec(struct wq_lane *ln, const struct put *p,
			struct d0_err *err)
{
	struct d0_err e = {0};
	if (lane_decode(ln, p, &e) == 0)
		return 0;
	if (e.msg[0])
		*err = e;
	else
		d0_errf(err, "%s: tensor '%s': cannot decode elements from %llu",
			ln->q->shards[p->it->shard].path, p->it->src->name,
			(unsigned long long)p->el);
	return -1;
}

static void *wq_main(void *arg)
{
	struct wq_lane *ln = arg;
	struct write_queue *q = ln->q;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		while (ln->next == q->gen && !q->stop)
			pthread_cond_wait(&q->cv, &q->mu);
		if (ln->next == q->gen)
			break;
		int b = (int)(ln->next % WQ_RING), failed = q->failed;
		struct d0_err e = {0};
		pthread_mutex_unlock(&q->mu);
		/* a chunk the lane reads itself is read as its puts need
		 * it (rd_need) */
		for (size_t i = 0; !failed && i < q->n[b]; i++) {
			struct put *p = &q->batch[b][i];
			if (p->lane != ln->id)
				continue;
			ln->rd = p->rd >= 0 ? &q->rd[b][p->rd] : NULL;
			if (ln->rd && ln->rd->got == 0) {
				/* the chunk's puts, all this lane's */
				size_t j = i + 1;
				int rc;
				while (j < q->n[b] && q->batch[b][j].rd == p->rd)
					j++;
				rc = lane_blocks(ln, p, j - i, ln->rd, &e);
				if (rc < 0) {
					failed = 1;
					if (!e.msg[0])
						d0_errf(&e, "%s: tensor '%s': cannot "
							"convert it to %s",
							q->shards[p->it->shard].path,
							p->it->src->name,
							dtype_user_name(p->it->to));
				}
				if (rc <= 0) {
					i = j - 1;
					continue;
				}
			}
			if (p->it) {
				if (lane_put_dec(ln, p, &e) < 0)
					failed = 1;
			} else if (rd_need(ln, (const uint8_t *)p->buf +
						       (p->count - 1) * p->stride +
						       p->n, &e) < 0 ||
				   st_writer_put_strided(p->w, p->slot, p->off,
							 p->buf, p->n, p->stride,
							 p->count, &e) < 0) {
				failed = 1;
			}
		}
		ln->rd = NULL;
		pthread_mutex_lock(&q->mu);
		if (failed && !q->failed) {
			q->failed = 1;
			q->err = e;
		}
		ln->next++;
		if (--q->left[b] == 0)
			pthread_cond_broadcast(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

/* Queue count segments of n bytes (buf + i * stride each) for rank's
 * tensor slot at byte off; with it (a converted put), count segments of n
 * elements, stride elements apart, from logical element el of it, whose
 * stored bytes are at buf, for the lane to convert. */
static int wq_add(struct conv *c, int rank, size_t slot, uint64_t off,
		  const void *buf, size_t n, size_t stride, size_t count,
		  const struct item *it, uint64_t el, struct d0_err *err)
{
	struct write_queue *q = c->wq;
	const unsigned char *b = buf;
	int f = q->fill;
	if (stride == n) { /* contiguous: one segment */
		n *= count;
		count = 1;
	}
	if (c->map && b >= c->map && b < c->map + c->map_len &&
	    (uint64_t)(b - c->map) < q->lo[f])
		q->lo[f] = (uint64_t)(b - c->map);
	q->bytes[f] += it ? src_bytes(it, (uint64_t)n * count) : (uint64_t)n * count;
	if (q->n[f] == q->cap[f]) {
		size_t cap = q->cap[f] ? 2 * q->cap[f] : 64;
		struct put *nb = realloc(q->batch[f], cap * sizeof *nb);
		if (!nb)
			return d0_errf(err, "convert: out of memory");
		q->batch[f] = nb;
		q->cap[f] = cap;
	}
	q->batch[f][q->n[f]++] = (struct put){
		c->w[rank], rank % q->nlanes, -1, slot, off, buf, n, stride,
		count, it, el};
	return 0;
}

/* Wait until the lanes have written batch slot b (every batch when b is
 * -1); the first write error, if any. */
static int wq_wait_slot(struct write_queue *q, int b, struct d0_err *err)
{
	int failed;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		int busy = 0;
		for (int k = 0; k < WQ_RING; k++)
			if ((b < 0 || k == b) && q->left[k])
				busy = 1;
		if (!busy)
			break;
		pthread_cond_wait(&q->cv, &q->mu);
	}
	failed = q->failed;
	pthread_mutex_unlock(&q->mu);
	if (failed)
		*err = q->err;
	return failed ? -1 : 0;
}

static int wq_wait(struct write_queue *q, struct d0_err *err)
{
	return wq_wait_slot(q, -1, err);
}

/* The buffer of the batch being filled (allocated the first time a chunk
 * converted by the main thread needs it); NULL when out of memory. */
static unsigned char *fill_buf(struct conv *c)
{
	struct write_queue *q = c->wq;
	if (!q->buf[q->fill])
		q->buf[q->fill] = malloc(c->chunk_bytes);
	return c->cv_buf = q->buf[q->fill];
}

/* Hand the chunk's writes over; the next chunk goes to the next slot of
 * the ring, once the lanes are done with what it held. */
static int wq_submit(struct conv *c, struct d0_err *err)
{
	struct write_queue *q = c->wq;
	int next, failed;
	if (q->n[q->fill] == 0) { /* nothing to hand over: only the errors */
		q->sused[q->fill] = 0; /* no put reads what was pread there */
		q->nrd[q->fill] = 0;
		pthread_mutex_lock(&q->mu);
		failed = q->failed;
		pthread_mutex_unlock(&q->mu);
		if (failed)
			*err = q->err;
		return failed ? -1 : 0;
	}
	pthread_mutex_lock(&q->mu);
	q->left[q->fill] = q->nlanes;
	q->gen++;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
	next = (q->fill + 1) % WQ_RING;
	if (wq_wait_slot(q, next, err) < 0)
		return -1;
	q->fill = next;
	q->n[next] = 0;
	q->bytes[next] = 0;
	q->sused[next] = 0;
	q->nrd[next] = 0;
	q->lo[next] = UINT64_MAX;
	c->cv_buf = q->buf[next];
	return 0;
}

/*
 * After submit: drop the mapped pages below every batch still being
 * written and the chunk just read, in MAP_DROP steps, so the mapping's
 * resident part stays a window.
 */
static void map_drop_behind(struct conv *c)
{
	struct write_queue *q = c->wq;
	uint64_t safe = c->pos < c->keep_from ? c->pos : c->keep_from;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	pthread_mutex_lock(&q->mu);
	for (int k = 0; k < WQ_RING; k++)
		if (q->left[k] && q->lo[k] < safe)
			safe = q->lo[k];
	pthread_mutex_unlock(&q->mu);
	safe -= safe % page;
	if (!c->map || safe < c->drop_end + MAP_DROP)
		return;
	madvise((void *)(c->map + c->drop_end), safe - c->drop_end,
		MADV_DONTNEED);
	c->drop_end = safe;
}

/*
 * A chunk is queued: hand the batch over when the chunk used the buffer
 * (the next chunk needs another) or the batch is large enough.
 */
static int chunk_done(struct conv *c, int used_buf, struct d0_err *err)
{
	struct write_queue *q = c->wq;
	if (c->chunk_rd >= 0) {
		/* a chunk read by a lane: every put of it goes to that lane,
		 * the one of its ranks' files where they are all one lane's
		 * (a part of a tensor split on its first axis), else the
		 * lanes take such chunks in turn */
		struct put *p = q->batch[q->fill];
		size_t n = q->n[q->fill], i;
		int lane = n > c->chunk_put0 ? p[c->chunk_put0].lane : 0;
		for (i = c->chunk_put0; i < n; i++)
			if (p[i].lane != lane)
				break;
		if (i < n)
			lane = (int)(c->chunk_seq++ % (unsigned)q->nlanes);
		for (i = c->chunk_put0; i < n; i++) {
			p[i].lane = lane;
			p[i].rd = (int)c->chunk_rd;
		}
		if (n == c->chunk_put0) { /* no rank holds it: nothing to read */
			c->lane_bytes -= q->rd[q->fill][c->chunk_rd].n;
			q->nrd[q->fill]--; /* the last read added */
		} else {
			q->rd[q->fill][c->chunk_rd].lane = lane;
		}
		c->chunk_rd = -1;
	}
	if (!used_buf && q->bytes[q->fill] < BATCH_BYTES &&
	    q->sused[q->fill] < BATCH_BYTES)
		return 0;
	if (wq_submit(c, err) < 0)
		return -1;
	map_drop_behind(c);
	return 0;
}

static int wq_start(struct conv *c, struct d0_err *err)
{
	struct write_queue *q = calloc(1, sizeof *q);
	if (!q)
		return d0_errf(err, "convert: out of memory");
	c->wq = q;
	for (int b = 0; b < WQ_RING; b++)
		q->lo[b] = UINT64_MAX; /* buffers: fill_buf, when first needed */
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	q->sync_ok = 1;
	q->nlanes = c->world < WQ_LANES ? c->world : WQ_LANES;
	q->qc = &c->cfg.qc;
	q->shards = c->ck.shards;
	q->piece = LANE_PIECE;
	{ /* DAY0_CONVERT_PIECE=BYTES: smaller pieces (the test's edge cases) */
		const char *pc = getenv("DAY0_CONVERT_PIECE");
		long v = pc ? strtol(pc, NULL, 10) : 0;
		if (v >= 64 && (size_t)v < q->piece)
			q->piece = (size_t)v;
	}
	for (int i = 0; i < q->nlanes; i++) {
		q->lane[i] = (struct wq_lane){.q = q, .id = i};
		if (c->lane_decode && !(q->lane[i].dbuf = malloc(q->piece)))
			return d0_errf(err, "convert: out of memory");
		if (pthread_create(&q->lane[i].th, NULL, wq_main, &q->lane[i]))
			return d0_errf(err, "convert: cannot start a writer thread");
		q->lane[i].started = 1;
	}
	c->cv_buf = q->buf[0];
	return 0;
}

/* Write what is queued (ok), stop the threads, free the queue. */
static int wq_finish(struct conv *c, int ok, struct d0_err *err)
{
	struct write_queue *q = c->wq;
	int rc = 0;
	if (!q)
		return 0;
	if (q->sync_ok) {
		if (ok && q->lane[q->nlanes - 1].started)
			rc = wq_submit(c, err) < 0 || wq_wait(q, err) < 0 ? -1 : 0;
		pthread_mutex_lock(&q->mu);
		q->stop = 1;
		pthread_cond_broadcast(&q->cv);
		pthread_mutex_unlock(&q->mu);
		for (int i = 0; i < q->nlanes; i++)
			if (q->lane[i].started)
				pthread_join(q->lane[i].th, NULL);
		pthread_mutex_destroy(&q->mu);
		pthread_cond_destroy(&q->cv);
	}
	c->block_bytes = q->block_bytes;
	for (int b = 0; b < WQ_RING; b++) {
		free(q->batch[b]);
		free(q->buf[b]);
		free(q->sbuf[b]);
		free(q->rd[b]);
	}
	for (int i = 0; i < WQ_LANES; i++) {
		free(q->lane[i].dbuf);
		free(q->lane[i].lbuf);
	}
	free(q);
	c->wq = NULL;
	c->cv_buf = NULL;
	return rc;
}

static enum dtype target_dtype(const struct conv *c, const struct tensor_spec *t)
{
	return role_keeps_f32(t->role) ? DT_F32 : c->dtype; /* norms stay f32 */
}

/* Read a whole stored tensor (a scale) from shard s. */
static void *read_whole(struct conv *c, const char *name, int *dtype,
			uint64_t *cols, struct d0_err *err)
{
	for (size_t s = 0; s < c->ck.nshards; s++) {
		const struct st_tensor *t = st_find(&c->ck.shards[s].st, name);
		void *b;
		int fd;
		if (!t)
			continue;
		b = malloc(t->end - t->begin + 1);
		fd = open(c->ck.shards[s].path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || pread_full(fd, b, t->end - t->begin,
					 c->ck.shards[s].st.data_off + t->begin) < 0) {
			if (fd >= 0)
				close(fd);
			free(b);
			d0_errf(err, "%s: tensor '%s': read failed",
				c->ck.shards[s].path, name);
			return NULL;
		}
		close(fd);
		*dtype = t->dtype;
		*cols = t->ndim == 2 ? t->shape[1] : 1;
		return b;
	}
	d0_errf(err, "%s: tensor '%s' is in no shard (run verify)", c->ck.dir,
		name);
	return NULL;
}

/* Item for stored tensor t of shard s: part `part` of spec sp. */
static int add_item(struct conv *c, size_t s, const struct st_tensor *t,
		    const struct tensor_spec *sp, int part, struct d0_err *err)
{
	struct stored_part parts[3];
	int np = quant_parts(&c->cfg.qc, sp, t->dtype, parts);
	const struct stored_part *p = &parts[part];
	const char *path = c->ck.shards[s].path;
	struct item *it;
	int ok = t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
		 (p->ndim == 1 || t->shape[1] == p->shape[1]);
	if (!ok)
		return d0_errf(err, "%s: tensor '%s': shape does not match "
			       "config.json (run verify)", path, t->name);
	if (np == 1 && t->dtype != DT_F32 && t->dtype != DT_BF16 &&
	    t->dtype != DT_F16)
		return d0_errf(err, "%s: tensor '%s': dtype %s; convert reads "
			       "F32, BF16 and F16 (and the formats config.json "
			       "declares)", path, t->name, dtype_name(t->dtype));
	if (np > 1 && !(t->dtype == parts[part].dtype ||
			t->dtype == parts[part].alt_dtype))
		return d0_errf(err, "%s: tensor '%s': dtype %s where %s stores "
			       "%s (run verify)", path, t->name,
			       dtype_name(t->dtype), c->cfg.quant,
			       dtype_name(parts[part].dtype));
	it = &c->items[c->nitems++];
	it->src = t;
	it->spec = sp;
	it->shard = s;
	it->name = t->name;
	it->ndim = t->ndim;
	it->shape[0] = t->shape[0];
	it->shape[1] = t->ndim == 2 ? t->shape[1] : 1;
	layout_split(&c->cfg, &c->d, sp, &it->split);
	if (t->ndim > 2) {
		if (it->split.axis >= 0 || np > 1)
			return d0_errf(err, "%s: tensor '%s': %d dimensions; "
				       "convert splits and dequantises 1- and "
				       "2-dimensional tensors only", path, t->name,
				       t->ndim);
		for (int d = 2; d < t->ndim; d++)
			it->shape[1] *= t->shape[d];
		it->shape[1] *= t->shape[1];
		it->ndim = 2;
		it->hdr_ndim = t->ndim;
		it->hdr_shape = t->shape;
	}
	if (np > 1 && c->keep) {
		if (quant_split_ok(&c->cfg.qc, sp, it->split.axis,
				   it->split.parts, err) < 0)
			return -1;
		it->to = t->dtype;
		if (p->kind == PART_SHAPE) { /* whole, on every rank */
			it->split.axis = -1;
			it->split.parts = 1;
		}
	} else if (np > 1) { /* dequantise */
		it->to = target_dtype(c, sp);
		it->dequant = 1;
		it->view.rows = sp->shape[0];
		it->view.cols = sp->shape[1];
		it->scale = read_whole(c, parts[1].name, &it->view.scale_dtype,
				       &it->view.scale_cols, err);
		if (!it->scale)
			return -1;
		it->view.scale = it->scale;
		it->ndim = sp->ndim;
		it->shape[0] = sp->shape[0];
		it->shape[1] = sp->shape[1];
	} else {
		it->to = c->keep ? t->dtype : target_dtype(c, sp);
	}
	it->sliced[0] = it->shape[0];
	it->sliced[1] = it->shape[1];
	if (it->split.axis >= 0)
		it->sliced[it->split.axis] /= (uint64_t)it->split.parts;
	return 0;
}

static int open_source(struct conv *c, const char *dir, struct d0_err *err)
{
	char *p = path_join(dir, "config.json");
	json_t *by_name = json_object();
	json_t *with_weight = json_object(); /* parts read with their weight */
	int rc = -1;

	if (model_config_load(p, &c->cfg, err) < 0)
		goto out;
	if (layout_check(&c->cfg, &c->d, err) < 0)
		goto out;
	if (model_tensors(&c->cfg, &c->specs, &c->nspecs, err) < 0)
		goto out;
	if (ckpt_open(dir, &c->ck, err) < 0)
		goto out;
	/* what is read as an item: every stored part when keeping (or when
	 * a tensor is not quantised), the values part alone when
	 * dequantising; index * 4 + part */
	for (size_t i = 0; i < c->nspecs; i++) {
		struct stored_part sp[3];
		int np = quant_parts(&c->cfg.qc, &c->specs[i], DT_INVALID, sp);
		for (int k = 0; k < np; k++)
			json_object_set_new(k < (c->keep ? np : 1) ? by_name
								    : with_weight,
					    sp[k].name,
					    json_integer((json_int_t)i * 4 + k));
	}
	for (size_t s = 0; s < c->ck.nshards; s++) {
		struct ckpt_shard *sh = &c->ck.shards[s];
		if (st_open(sh->path, &sh->st, err) < 0)
			goto out;
		sh->parsed = 1;
	}
	c->items = calloc(3 * c->nspecs + 1, sizeof *c->items);
	/* Processing order: shards by name, tensors by data offset. */
	for (size_t s = 0; s < c->ck.nshards; s++) {
		struct st_file *st = &c->ck.shards[s].st;
		const struct st_tensor **ord = calloc(st->ntensors + 1,
						      sizeof *ord);
		for (size_t i = 0; i < st->ntensors; i++)
			ord[i] = &st->tensors[i];
		for (size_t i = 1; i < st->ntensors; i++) /* insertion sort */
			for (size_t j = i; j > 0 &&
			     ord[j - 1]->begin > ord[j]->begin; j--) {
				const struct st_tensor *tmp = ord[j];
				ord[j] = ord[j - 1];
				ord[j - 1] = tmp;
			}
		for (size_t i = 0; i < st->ntensors; i++) {
			const struct st_tensor *t = ord[i];
			json_t *ix = json_object_get(by_name, t->name);
			if (!ix) {
				if (json_object_get(with_weight, t->name))
					continue; /* read with its weight */
				d0_errf(err, "%s: tensor '%s': not part of a %s "
					"model per config.json (run verify)",
					c->ck.shards[s].path, t->name,
					c->cfg.model_type);
				free(ord);
				goto out;
			}
			if (add_item(c, s, t, &c->specs[json_integer_value(ix) / 4],
				     (int)(json_integer_value(ix) % 4), err) < 0) {
				free(ord);
				goto out;
			}
			json_object_del(by_name, t->name);
		}
		free(ord);
	}
	if (json_object_size(by_name)) {
		const char *key = json_object_iter_key(json_object_iter(by_name));
		d0_errf(err, "%s: tensor '%s' (and %zu more) expected by "
			"config.json is in no shard (run verify)", dir, key,
			json_object_size(by_name) - 1);
		goto out;
	}
	rc = 0;
out:
	free(p);
	json_decref(by_name);
	json_decref(with_weight);
	return rc;
}

static int open_ranks(struct conv *c, const char *out, struct d0_err *err)
{
	char name[64], val[32];
	c->w = calloc((size_t)c->world, sizeof *c->w);
	for (size_t i = 0; i < c->nitems; i++) {
		c->items[i].slot = malloc((size_t)c->world * sizeof(int));
		for (int r = 0; r < c->world; r++)
			c->items[i].slot[r] = -1;
	}
	for (int r = 0; r < c->world; r++) {
		int pp, ep, tp, k = 0;
		char *p;
		layout_coords(&c->d, r, &pp, &ep, &tp);
		c->w[r] = st_writer_new();
		st_writer_no_hash(c->w[r]); /* rank files: sizes suffice */
		st_writer_meta(c->w[r], "format", "pt");
#define META(key, v)                                                          \
	do {                                                                  \
		snprintf(val, sizeof val, "%d", v);                           \
		st_writer_meta(c->w[r], key, val);                            \
	} while (0)
		META("rank", r);
		META("world_size", c->world);
		META("tp_rank", tp);
		META("pp_rank", pp);
		META("ep_rank", ep);
		META("tp", c->d.tp);
		META("pp", c->d.pp);
		META("ep", c->d.ep);
#undef META
		for (size_t i = 0; i < c->nitems; i++) {
			struct item *it = &c->items[i];
			if (layout_part_for_rank(&c->cfg, &c->d, it->spec,
						 &it->split, r) < 0)
				continue;
			st_writer_add(c->w[r], it->name, it->to,
				      it->hdr_ndim ? it->hdr_ndim : it->ndim,
				      it->hdr_ndim ? it->hdr_shape : it->sliced);
			it->slot[r] = k++;
		}
		snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", r,
			 c->world);
		p = path_join(out, name);
		if (st_writer_begin(c->w[r], p, err) < 0) {
			free(p);
			return -1;
		}
		free(p);
	}
	return 0;
}

/* Part `part` of a chunk: count segments of n elements, stride apart, at
 * element off of the part's slice, to every rank that holds the part.
 * src is the chunk read_src returned and el the logical element of its
 * first element; the part's first segment starts at element first of the
 * chunk. */
static int emit(struct conv *c, struct item *it, int part, uint64_t off,
		const unsigned char *src, uint64_t el, uint64_t first, size_t n,
		size_t stride, size_t count, struct d0_err *err)
{
	size_t es = dtype_size(it->to);
	for (int r = 0; r < c->world; r++) {
		int rc;
		if (it->slot[r] < 0 ||
		    layout_part_for_rank(&c->cfg, &c->d, it->spec, &it->split,
					 r) != part)
			continue;
		if (c->deferred) /* stored bytes: the lane converts */
			rc = wq_add(c, r, (size_t)it->slot[r], off * es,
				    src + src_bytes(it, el + first) -
					    src_bytes(it, el),
				    n, stride, count, it, el + first, err);
		else
			rc = wq_add(c, r, (size_t)it->slot[r], off * es,
				    src + first * es, n * es, stride * es, count,
				    NULL, 0, err);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/*
 * Make source bytes [off, off + n) of the mapping resident (and up to
 * MAP_AHEAD beyond), in one madvise rather than page faults in the
 * writer threads; a shard cut short since it was opened fails here with
 * an error instead of a SIGBUS on the read.
 */
static int map_window(struct conv *c, const struct item *it, uint64_t off,
		      uint64_t n, struct d0_err *err)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), end;
	c->pos = off;
	if (c->no_populate || off + n <= c->pop_end)
		return 0;
	end = off + n + MAP_AHEAD;
	end = end > c->map_len ? c->map_len : (end + page - 1) / page * page;
	while (madvise((void *)(c->map + c->pop_end), end - c->pop_end,
		       MADV_POPULATE_READ) < 0) {
		if (errno == EINTR)
			continue;
		if (errno == EINVAL) { /* before Linux 5.14: fault as we go */
			c->no_populate = 1;
			return 0;
		}
		return d0_errf(err, "%s: tensor '%s': cannot read bytes %llu-%llu "
			       "of the mapped shard: %s (the file changed since "
			       "it was opened?)", c->shard_path, it->src->name,
			       (unsigned long long)c->pop_end,
			       (unsigned long long)end, strerror(errno));
	}
	c->pop_end = end;
	return 0;
}

/*
 * READ_PREAD: source bytes [off, off + n) read into the batch's source
 * buffer, after what earlier chunks of the batch read there (chunk_done
 * hands a batch over once BATCH_BYTES are in, so a chunk always fits:
 * sbuf_cap is BATCH_BYTES plus the largest chunk's source bytes).
 */
static const unsigned char *pread_src(struct conv *c, const struct item *it,
				      uint64_t off, uint64_t n, int defer,
				      struct d0_err *err)
{
	struct write_queue *q = c->wq;
	int f = q->fill;
	unsigned char *b;
	c->pos = off;
	if (!q->sbuf[f] && !(q->sbuf[f] = malloc(c->sbuf_cap))) {
		d0_errf(err, "convert: out of memory");
		return NULL;
	}
	if (q->sused[f] + n > c->sbuf_cap) { /* not reached: see above */
		d0_errf(err, "%s: tensor '%s': a chunk of %llu bytes overflows "
			"the read buffer", c->shard_path, it->src->name,
			(unsigned long long)n);
		return NULL;
	}
	b = q->sbuf[f] + q->sused[f];
	if (defer) { /* the chunk's lane reads it (chunk_done says which) */
		if (q->nrd[f] == q->caprd[f]) {
			size_t cap = q->caprd[f] ? 2 * q->caprd[f] : 8;
			struct lane_rd *nr = realloc(q->rd[f], cap * sizeof *nr);
			if (!nr) {
				d0_errf(err, "convert: out of memory");
				return NULL;
			}
			q->rd[f] = nr;
			q->caprd[f] = cap;
		}
		c->chunk_rd = (long)q->nrd[f];
		c->lane_bytes += n;
		q->rd[f][q->nrd[f]++] = (struct lane_rd){
			b, (size_t)n, 0, off, c->fd, 0, it};
	} else if (pread_full(c->fd, b, (size_t)n, off) < 0) {
		read_failed(err, c->shard_path, it, off, n);
		return NULL;
	}
	q->sused[f] += (size_t)n;
	return b;
}

/*
 * Logical elements [el_off, el_off + n) of it in the target dtype: the
 * mapped source bytes themselves when the tensor is written as stored,
 * else converted into the chunk buffer.  FP8 -> bf16/f16 (decode16) is
 * decoded by the writer lanes, each what it writes (lane_decode): then
 * the mapped codes are returned and c->deferred is set.  NULL on error.
 */
static const unsigned char *read_src(struct conv *c, EVP_MD_CTX *sha,
				     struct item *it, uint64_t el_off, size_t n,
				     struct d0_err *err)
{
	uint64_t b0 = src_bytes(it, el_off), b1 = src_bytes(it, el_off + n);
	uint64_t off = c->ck.shards[it->shard].st.data_off + it->src->begin + b0;
	const unsigned char *sb;
	/* written as stored, or converted by the writer lanes (decode16 to
	 * bf16/f16, a dtype conversion): else by this thread below */
	int as_stored = !it->dequant && it->src->dtype == it->to;
	int lanes_conv = c->lane_decode && !as_stored &&
			 (!it->dequant || (format_of(&c->cfg.qc)->decode16 &&
					   (it->to == DT_BF16 || it->to == DT_F16)));
	c->chunk_put0 = c->wq->n[c->wq->fill];
	if (c->pread_src) {
		/* the lanes read what only they use (not what is hashed
		 * here or converted by this thread) */
		sb = pread_src(c, it, off, b1 - b0,
			       c->lane_read && !sha && (as_stored || lanes_conv),
			       err);
		if (!sb)
			return NULL;
	} else {
		sb = c->map + off;
		if (map_window(c, it, off, b1 - b0, err) < 0)
			return NULL;
	}
	if (sha)
		EVP_DigestUpdate(sha, sb, b1 - b0);
	c->done_bytes += b1 - b0;
	c->deferred = 0;
	if (as_stored)
		return sb; /* stored as written */
	if (it->dequant)
		it->view.values = sb;
	if (lanes_conv) { /* FP8 decode16, or a dtype conversion */
		c->deferred = 1;
		return sb;
	}
	if (!fill_buf(c)) {
		d0_errf(err, "convert: out of memory");
		return NULL;
	}
	if (it->dequant) {
		const struct weight_format *f = format_of(&c->cfg.qc);
		int rc;
		if (f->decode16 && (it->to == DT_BF16 || it->to == DT_F16)) {
			rc = f->decode16(&c->cfg.qc, &it->view, el_off, n, it->to,
					 (uint16_t *)c->cv_buf);
		} else {
			rc = f->decode(&c->cfg.qc, &it->view, el_off, n,
				       c->f32_buf);
			if (rc == 0)
				dtype_convert(DT_F32, c->f32_buf, it->to,
					      c->cv_buf, n);
		}
		if (rc < 0) {
			d0_errf(err, "%s: tensor '%s': cannot decode elements "
				"from %llu", c->shard_path, it->src->name,
				(unsigned long long)el_off);
			return NULL;
		}
	} else {
		dtype_convert(it->src->dtype, sb, it->to, c->cv_buf, n);
	}
	return c->cv_buf;
}

/*
 * Stream one tensor.  View it as [outer, len, inner] around the split
 * axis; a "row" is one outer index: parts consecutive segments of
 * seg = (len / parts) * inner elements, segment p going to part p at
 * element offset row * seg.  Part p of a chunk of rows is written as one
 * strided write (a segment per row), never gathered first.
 */
static int convert_tensor(struct conv *c, EVP_MD_CTX *sha, struct item *it,
			  struct d0_err *err)
{
	uint64_t numel = it->shape[0] * (it->ndim == 2 ? it->shape[1] : 1);
	uint64_t outer = 1, seg, row;
	int parts = it->split.axis < 0 ? 1 : it->split.parts, group;

	for (int a = 0; a < it->split.axis; a++)
		outer *= it->shape[a];
	row = outer ? numel / outer : 0;
	seg = row / (uint64_t)parts;
	if (numel == 0)
		return 0;
	if (row <= CONV_CHUNK) {
		uint64_t rows_per = CONV_CHUNK / row;
		for (uint64_t o = 0; o < outer; o += rows_per) {
			uint64_t nr = outer - o < rows_per ? outer - o : rows_per;
			const unsigned char *src =
				read_src(c, sha, it, o * row, (size_t)(nr * row), err);
			if (!src)
				return -1;
			for (int p = 0; p < parts; p++)
				if (emit(c, it, p, o * seg, src, o * row,
					 (uint64_t)p * seg, (size_t)seg,
					 (size_t)row, (size_t)nr, err) < 0)
					return -1;
			if (chunk_done(c, src == c->cv_buf, err) < 0)
				return -1;
		}
		return 0;
	}
	/*
	 * A row larger than a chunk: outer is 1 (split on axis 0), each
	 * chunk goes to one part.  Parts are taken WQ_LANES at a time, chunk
	 * by chunk in turn (part 0's first, part 1's first, part 0's second,
	 * ...), so that consecutive chunks go to the ranks of different
	 * writer lanes and both copy at once; part after part, one lane
	 * wrote while the other waited.  The source is then read in two
	 * streams (the mapping's window spans the pair's parts); when this
	 * shard is hashed on the way (sha), in file order as before.
	 */
	group = sha ? 1 : WQ_LANES;
	for (uint64_t o = 0; o < outer; o++)
		for (int p0 = 0; p0 < parts; p0 += group)
			for (uint64_t k = 0; k < seg; k += CONV_CHUNK) {
				c->keep_from = c->ck.shards[it->shard].st.data_off +
					       it->src->begin +
					       src_bytes(it, o * row +
							     (uint64_t)p0 * seg + k);
				for (int p = p0; p < p0 + group && p < parts; p++) {
					size_t n = (size_t)(seg - k < CONV_CHUNK
								    ? seg - k
								    : CONV_CHUNK);
					const unsigned char *src = read_src(
						c, sha, it,
						o * row + (uint64_t)p * seg + k, n,
						err);
					if (!src ||
					    emit(c, it, p, o * seg + k, src,
						 o * row + (uint64_t)p * seg + k,
						 0, n, n, 1, err) < 0 ||
					    chunk_done(c, src == c->cv_buf, err) < 0) {
						c->keep_from = UINT64_MAX;
						return -1;
					}
				}
			}
	c->keep_from = UINT64_MAX;
	return 0;
}

/* Source checksums from SHA256SUMS where it lists the shard. */
static int load_source_sums(struct conv *c, const char *dir, struct d0_err *err)
{
	char *p = path_join(dir, "SHA256SUMS");
	int rc = 0;
	c->src_sha = calloc(c->ck.nshards, sizeof *c->src_sha);
	c->src_hashed = calloc(c->ck.nshards, sizeof *c->src_hashed);
	if (path_exists(p))
		rc = sums_load(p, &c->sums, err);
	free(p);
	if (rc < 0)
		return -1;
	for (size_t s = 0; s < c->ck.nshards; s++) {
		json_t *v = c->sums ? json_object_get(c->sums, c->ck.shards[s].name)
				    : NULL;
		if (v && !c->verify_source)
			memcpy(c->src_sha[s], json_string_value(v), 65);
		else
			c->src_hashed[s] = 1;
	}
	return 0;
}

/* Map shard sh (open as fd) read-only for convert_tensor. */
static int map_shard(struct conv *c, const struct ckpt_shard *sh, int fd,
		     struct d0_err *err)
{
	struct stat st;
	void *m;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != sh->st.file_size)
		return d0_errf(err, "%s: the file changed since it was opened "
			       "(%llu bytes, its header says %llu)", sh->path,
			       (unsigned long long)st.st_size,
			       (unsigned long long)sh->st.file_size);
	c->fd = fd;
	c->shard_path = sh->path;
	c->keep_from = UINT64_MAX;
	if (c->pread_src) /* read into the batches' buffers */
		return 0;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		return d0_errf(err, "%s: cannot map: %s", sh->path,
			       strerror(errno));
	madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
	c->map = m;
	c->map_len = (size_t)st.st_size;
	c->pop_end = c->drop_end = c->pos = 0;
	c->keep_from = UINT64_MAX;
	c->shard_path = sh->path;
	return 0;
}

static void unmap_shard(struct conv *c)
{
	if (c->map)
		munmap((void *)c->map, c->map_len);
	c->map = NULL;
	c->map_len = 0;
}

static int convert_shards(struct conv *c, struct d0_err *err)
{
	size_t i = 0;
	double last = 0;
	for (size_t k = 0; k < c->nitems; k++)
		c->total_bytes += c->items[k].src->end - c->items[k].src->begin;
	for (size_t s = 0; s < c->ck.nshards; s++) {
		struct ckpt_shard *sh = &c->ck.shards[s];
		EVP_MD_CTX *sha = NULL;
		unsigned char md[EVP_MAX_MD_SIZE], *hdr;
		unsigned int mdlen = 0;
		int fd = open(sh->path, O_RDONLY | O_CLOEXEC), rc = 0;
		if (fd < 0)
			return d0_errf(err, "%s: cannot open: %s", sh->path,
				       strerror(errno));
		posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
		if (c->src_hashed[s] && !c->keep &&
		    c->cfg.qc.kind != QUANT_NONE) {
			/* scales are read with their weights, out of file
			 * order: hash the shard on its own */
			rc = sha256_file(sh->path, c->src_sha[s], NULL, err);
		} else if (c->src_hashed[s]) {
			/* tensors tile the data buffer, so header + tensors
			 * in offset order is the whole file */
			sha = EVP_MD_CTX_new();
			EVP_DigestInit_ex(sha, EVP_sha256(), NULL);
			hdr = malloc((size_t)sh->st.data_off);
			if (pread_full(fd, hdr, (size_t)sh->st.data_off, 0) < 0)
				rc = d0_errf(err, "%s: read failed: %s",
					     sh->path, strerror(errno));
			else
				EVP_DigestUpdate(sha, hdr,
						 (size_t)sh->st.data_off);
			free(hdr);
		}
		if (rc == 0)
			rc = map_shard(c, sh, fd, err);
		for (; rc == 0 && i < c->nitems && c->items[i].shard == s; i++) {
			rc = convert_tensor(c, sha, &c->items[i], err);
			if (events_enabled() && now_s() - last > 0.2) {
				last = now_s();
				events_stage("convert", "progress",
					     (double)c->done_bytes /
						     (double)(c->total_bytes + 1),
					     0, c->items[i].spec->name);
			}
		}
		/* the last batch reads the mapping: written before the unmap */
		if (rc == 0 && (wq_submit(c, err) < 0 || wq_wait(c->wq, err) < 0)) {
			rc = -1;
		} else if (rc < 0) {
			struct d0_err ignored; /* err already says what failed */
			wq_wait(c->wq, &ignored);
		}
		unmap_shard(c);
		close(fd);
		if (sha) {
			EVP_DigestFinal_ex(sha, md, &mdlen);
			EVP_MD_CTX_free(sha);
			for (unsigned b = 0; b < mdlen; b++)
				snprintf(c->src_sha[s] + 2 * b, 3, "%02x", md[b]);
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int convert_all(struct conv *c, struct d0_err *err)
{
	int rc;
	/* no chunk is larger than CONV_CHUNK or than its tensor: a small
	 * model gets small buffers (three of CONV_CHUNK x 4 bytes are 12 MiB) */
	uint64_t most = 1;
	for (size_t k = 0; k < c->nitems; k++) {
		const struct item *it = &c->items[k];
		uint64_t numel = it->shape[0] * (it->ndim == 2 ? it->shape[1] : 1);
		if (numel > most)
			most = numel;
	}
	c->chunk_bytes = (size_t)(most < CONV_CHUNK ? most : CONV_CHUNK) * 4;
	c->pread_src = read_path() == READ_PREAD;
	c->sbuf_cap = BATCH_BYTES;
	for (size_t k = 0; k < c->nitems; k++) { /* + the largest chunk read */
		const struct item *it = &c->items[k];
		uint64_t numel = it->shape[0] * (it->ndim == 2 ? it->shape[1] : 1);
		uint64_t b = src_bytes(it, numel < CONV_CHUNK ? numel : CONV_CHUNK);
		if (BATCH_BYTES + b > c->sbuf_cap)
			c->sbuf_cap = (size_t)(BATCH_BYTES + b);
	}
	{ /* DAY0_CONVERT_LANE_DECODE=0: decode on the main thread (A/B) */
		const char *ld = getenv("DAY0_CONVERT_LANE_DECODE");
		c->lane_decode = !(ld && !strcmp(ld, "0"));
	}
	blas_threads_quiet(); /* its spinning threads would take a core */
	c->f32_buf = malloc(c->chunk_bytes);
	if (!c->f32_buf)
		return d0_errf(err, "convert: out of memory");
	c->chunk_rd = -1;
	rc = wq_start(c, err);
	{ /* DAY0_CONVERT_LANE_READ=0: the main thread preads every chunk (A/B) */
		const char *lr = getenv("DAY0_CONVERT_LANE_READ");
		c->lane_read = rc == 0 && c->pread_src && c->wq->nlanes > 1 &&
			       !(lr && !strcmp(lr, "0"));
	}
	if (rc == 0)
		rc = convert_shards(c, err);
	if (wq_finish(c, rc == 0, err) < 0)
		rc = -1;
	for (int r = 0; rc == 0 && r < c->world; r++)
		if (st_writer_finish(c->w[r], err) < 0)
			rc = -1;
	return rc;
}

/* Shards hashed here must agree with SHA256SUMS where it lists them. */
static int check_source_sums(struct conv *c, struct d0_err *err)
{
	for (size_t s = 0; s < c->ck.nshards; s++) {
		json_t *want = c->sums ? json_object_get(c->sums,
							 c->ck.shards[s].name)
				       : NULL;
		if (c->src_hashed[s] && want &&
		    strcmp(json_string_value(want), c->src_sha[s]))
			return d0_errf(err, "%s: SHA-256 mismatch: file has %s, "
				       "SHA256SUMS expects %s",
				       c->ck.shards[s].path, c->src_sha[s],
				       json_string_value(want));
	}
	return 0;
}

static json_t *layout_json(struct conv *c, const char *src_dir)
{
	json_t *doc = json_object(), *stages = json_array(), *ranks = json_array();
	json_t *shards = json_array(), *tensors = json_object();
	char *abs = realpath(src_dir, NULL), *cfg_path;
	char cfg_sha[65] = "";

	cfg_path = path_join(src_dir, "config.json");
	sha256_file(cfg_path, cfg_sha, NULL, NULL);
	free(cfg_path);
	json_object_set_new(doc, "format", json_string("day0.layout"));
	json_object_set_new(doc, "version", json_integer(1));
	json_object_set_new(doc, "model_type", json_string(c->cfg.model_type));
	json_object_set_new(doc, "world_size", json_integer(c->world));
	json_object_set_new(doc, "tp", json_integer(c->d.tp));
	json_object_set_new(doc, "pp", json_integer(c->d.pp));
	json_object_set_new(doc, "ep", json_integer(c->d.ep));
	json_object_set_new(doc, "rank_order", json_string("tp fastest, then ep, then pp"));
	json_object_set_new(doc, "dtype", json_string(c->keep ? "keep"
						      : dtype_user_name(c->dtype)));
	{
		char fmt[64];
		json_t *wf = quant_config_to_json(&c->cfg.qc);
		/* the source's storage format, and whether the rank files
		 * keep it (FP8 slices with their scale blocks) */
		json_object_set_new(doc, "weights_format",
				    json_pack("{s:s, s:s, s:b, s:o}", "source",
					      quant_describe(&c->cfg.qc, fmt,
							     sizeof fmt),
					      "method", c->cfg.quant[0] ? c->cfg.quant
								     : "plain",
					      "kept", c->keep || !c->cfg.quant[0],
					      "quantization_config",
					      wf ? wf : json_null()));
	}
	json_object_set_new(doc, "dtype_policy",
			    json_pack("{s:s, s:s, s:s}", "default",
				      dtype_user_name(c->dtype), "norms", "f32",
				      "rounding", "nearest-even"));
	for (int s = 0; s < c->d.pp; s++) {
		int64_t first, count;
		layout_stage_layers(c->cfg.layers, c->d.pp, s, &first, &count);
		json_array_append_new(stages,
				      json_pack("{s:i, s:I, s:I}", "stage", s,
						"first_layer", (json_int_t)first,
						"layers", (json_int_t)count));
	}
	json_object_set_new(doc, "stages", stages);
	for (size_t s = 0; s < c->ck.nshards; s++) {
		struct ckpt_shard *sh = &c->ck.shards[s];
		json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "file", sh->name,
				      "sha256", c->src_sha[s], "sha256_from",
				      c->src_hashed[s] ? "computed" : "SHA256SUMS",
				      "bytes", (json_int_t)sh->st.file_size);
		if (sh->st.metadata)
			json_object_set(o, "metadata", sh->st.metadata);
		json_array_append_new(shards, o);
	}
	json_object_set_new(doc, "source",
			    json_pack("{s:s, s:s, s:o}", "dir", abs ? abs : src_dir,
				      "config_sha256", cfg_sha, "shards", shards));
	free(abs);
	for (int r = 0; r < c->world; r++) {
		int pp, ep, tp;
		char name[64];
		json_t *experts = json_array();
		layout_coords(&c->d, r, &pp, &ep, &tp);
		if (c->cfg.experts > 0 && c->d.ep >= 1)
			for (int e = 0; e < c->cfg.experts; e++)
				if (layout_expert_owner(&c->cfg, &c->d, e) == ep)
					json_array_append_new(experts,
							      json_integer(e));
		snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", r,
			 c->world);
		json_array_append_new(
			ranks, json_pack("{s:i, s:i, s:i, s:i, s:s, s:I, s:o}",
					 "rank", r, "tp_rank", tp, "pp_rank", pp,
					 "ep_rank", ep, "file", name, "bytes",
					 (json_int_t)st_writer_total(c->w[r]),
					 "experts", experts));
	}
	json_object_set_new(doc, "ranks", ranks);
	for (size_t i = 0; i < c->nitems; i++) {
		struct item *it = &c->items[i];
		json_t *shape = json_array(), *rk = json_array();
		for (int d = 0; d < (it->hdr_ndim ? it->hdr_ndim : it->ndim); d++)
			json_array_append_new(shape, json_integer((json_int_t)(
				it->hdr_ndim ? it->hdr_shape[d] : it->shape[d])));
		for (int r = 0; r < c->world; r++)
			if (it->slot[r] >= 0)
				json_array_append_new(
					rk, json_pack("[i,i]", r,
						      layout_part_for_rank(
							      &c->cfg, &c->d,
							      it->spec, &it->split,
							      r)));
		json_object_set_new(
			tensors, it->name,
			json_pack("{s:o, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, "
				  "s:s, s:I, s:s, s:o}",
				  "shape", shape, "dtype", dtype_name(it->to),
				  "source_dtype", dtype_name(it->src->dtype),
				  "split", it->split.kind, "axis", it->split.axis,
				  "parts", it->split.parts, "replicas",
				  it->split.replicas, "layer", it->spec->layer,
				  "expert", it->spec->expert, "source_shard",
				  c->ck.shards[it->shard].name, "source_offset",
				  (json_int_t)it->src->begin, "source_sha256",
				  c->src_sha[it->shard], "ranks", rk));
	}
	json_object_set_new(doc, "tensors", tensors);
	return doc;
}

static void conv_free(struct conv *c)
{
	for (size_t i = 0; i < c->nitems; i++) {
		free(c->items[i].slot);
		free(c->items[i].scale);
	}
	free(c->items);
	for (int r = 0; c->w && r < c->world; r++)
		st_writer_free(c->w[r]);
	free(c->w);
	free(c->src_sha);
	free(c->src_hashed);
	json_decref(c->sums);
	free(c->specs);
	free(c->f32_buf);
	ckpt_close(&c->ck);
	model_config_free(&c->cfg);
}

static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dtype", 1, 0, 'd'}, LAYOUT_LONG_OPTS,
		{"force", 0, 0, 'f'}, {"events", 0, 0, 'E'},
		{"verify-source", 0, 0, 'V'}, {"help", 0, 0, 'h'},
		{0, 0, 0, 0},
	};
	const struct step_entry *S = &step_convert;
	struct conv c;
	struct outdir od;
	struct d0_err err;
	const char *src, *dst;
	struct layout_opts lay;
	char why[256];
	int ch, force = 0, events = 0, rc;
	char *p;
	json_t *doc;
	double t0 = now_s();

	memset(&c, 0, sizeof c);
	c.dtype = DT_INVALID;
	layout_opts_init(&lay);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int took = layout_opts_take(&lay, ch, optarg, why, sizeof why);
		if (took < 0)
			return step_usage_error(S, "%s", why);
		if (took)
			continue;
		switch (ch) {
		case 'd':
			c.keep = !strcmp(optarg, "keep");
			c.dtype = c.keep ? DT_F32 : dtype_from_user(optarg);
			if (c.dtype == DT_INVALID)
				return step_usage_error(S, "--dtype: expected "
							"bf16, f16, f32 or keep, "
							"got '%s'", optarg);
			break;
		case 'f': force = 1; break;
		case 'E': events = 1; break;
		case 'V': c.verify_source = 1; break;
		case 'h': step_help(S); return EXIT_OK;
		default:
			return step_usage_error(S, "unknown or incomplete "
						"option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 2)
		return step_usage_error(S, "expected MODEL_DIR and OUT_DIR");
	if (c.dtype == DT_INVALID)
		return step_usage_error(S, "--dtype is required");
	/* a conversion's layout is never implied: --tp stays required */
	if (!lay.tp_given)
		return step_usage_error(S, "--tp is required");
	c.d = lay.d;
	src = argv[optind];
	dst = argv[optind + 1];
	c.world = c.d.tp * c.d.pp * c.d.ep;
	events_init(stdout, events);
	raise_fd_limit();
	events_stage("convert", "start", 0, 0, src);

	if (!path_is_dir(src)) {
		fprintf(stderr, "day0-engine: %s: not a directory\n", src);
		events_stage("convert", "end", 1, EXIT_USAGE, "no such model");
		return EXIT_USAGE;
	}
	if (open_source(&c, src, &err) < 0 ||
	    load_source_sums(&c, src, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage("convert", "end", 1, EXIT_USAGE, err.msg);
		conv_free(&c);
		return EXIT_USAGE;
	}
	if (outdir_begin(&od, dst, force, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage("convert", "end", 1, EXIT_USAGE, err.msg);
		conv_free(&c);
		return EXIT_USAGE;
	}
	rc = open_ranks(&c, od.partial, &err);
	if (rc == 0)
		rc = convert_all(&c, &err);
	if (rc == 0 && check_source_sums(&c, &err) < 0)
		rc = -2; /* corrupt input: a check failure, not a usage error */
	if (rc == 0) {
		char *cfg = path_join(src, "config.json");
		char *text;
		size_t len;
		doc = layout_json(&c, src);
		p = path_join(od.partial, "layout.json");
		rc = json_write_file(doc, p, 0, &err);
		free(p);
		json_decref(doc);
		/* the runtime reads the model's config beside the layout */
		if (rc == 0 && file_read_all(cfg, 16u << 20, &text, &len,
					     &err) == 0) {
			int fd;
			p = path_join(od.partial, "config.json");
			fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd < 0 || write_full(fd, text, len) < 0)
				rc = d0_errf(&err, "%s: write failed", p);
			if (fd >= 0)
				close(fd);
			free(p);
			free(text);
		} else if (rc == 0) {
			rc = -1;
		}
		free(cfg);
		if (rc == 0)
			rc = tokenizer_copy_files(src, od.partial, &err);
	}
	if (rc == 0)
		rc = outdir_commit(&od, &err);
	else
		outdir_abort(&od);
	if (rc < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage("convert", "end", 1, rc == -2 ? 1 : 2, err.msg);
		conv_free(&c);
		return rc == -2 ? EXIT_CHECK_FAILED : EXIT_USAGE;
	}
	{
		/* The summary: on stdout, and as the end event's msg (the
		 * console's Log screen) */
		char a[32], b[32], d[32], how[120], *line;
		double dt = now_s() - t0;
		/* how the source was read (readpath.c; lane_read) */
		if (!c.pread_src)
			snprintf(how, sizeof how, "mapped");
		else if (c.lane_bytes && c.block_bytes)
			snprintf(how, sizeof how, "pread, %s of it by the writer "
				 "threads, %s of that in %u KiB blocks",
				 fmt_bytes(c.lane_bytes, b), fmt_bytes(c.block_bytes, d),
				 LANE_BLOCK >> 10);
		else if (c.lane_bytes)
			snprintf(how, sizeof how, "pread, %s of it by the writer "
				 "threads", fmt_bytes(c.lane_bytes, b));
		else
			snprintf(how, sizeof how, "pread");
		if (asprintf(&line,
			     "%s: %s, tp=%d pp=%d ep=%d (%d rank%s), %zu tensors, %s "
			     "read (%s) in %.2f s, dtype %s (norms f32)",
			     dst, c.cfg.model_type, c.d.tp, c.d.pp, c.d.ep, c.world,
			     c.world == 1 ? "" : "s", c.nitems, fmt_bytes(c.total_bytes, a),
			     how, dt, c.keep ? "kept as stored" : dtype_user_name(c.dtype)) < 0)
			abort();
		if (!events_enabled())
			printf("converted %s -> %s\n", src, line);
		events_stage("convert", "end", 1, 0, line);
		free(line);
	}
	conv_free(&c);
	return EXIT_OK;
}
