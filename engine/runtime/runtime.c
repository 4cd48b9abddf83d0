/*
 * runtime.c - the parallel forward pass: one MPI rank is one card.
 *
 * A rank holds the slices layout.c gives it (the same rules convert
 * writes), either from convert's rank file or cut in memory from a Hugging
 * Face checkpoint.  Tensor parallelism is Megatron's: column-parallel q/k/v
 * and gate/up, row-parallel o and down followed by an all-reduce over the
 * TP group, vocab-parallel embedding (all-reduce) and lm_head (gather).
 * Pipeline stages pass the hidden state point to point.  Experts: each EP
 * rank routes the tokens it owns (t mod ep), sends them to the experts'
 * owners with an all-to-all, gets the weighted outputs back the same way
 * and the EP group all-gathers the result; attention is replicated over EP.
 *
 * The math follows transformers (modeling_llama/mistral/qwen2/qwen3/
 * mixtral/qwen2_moe/qwen3_moe/deepseek_v3): RMSNorm in float with the
 * weight after; RoPE rotate_half (DeepSeek's interleaved layout permuted
 * first); causal softmax attention scaled by head_dim^-0.5 (MLA: qk head
 * dim, times yarn mscale^2); SwiGLU; routers as in ops.c.
 *
 * Every allocation goes through the accountant (rt_alloc), so exceeding
 * --card-mem is a reported failure naming what did not fit.  Collectives
 * are timed (rt->stats) for `comm` events and perf's communication share.
 */
#include "engine.h"
#include "rt_batch.h"
#include "rt_impl.h"
#include "ops_vision.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <cblas.h>
#include <mpi.h>

/* ------------------------------------------------------------ accountant */

/* bytes for `what`, 64-byte aligned, counted against the card's budget;
 * zeroed when zero is set (the KV cache), not for a weight its loader
 * fills whole (a second pass over every weight byte on load). */
/*
 * The weights and the KV cache (rt_open sets r->big while it allocates
 * them): blocks of 256 KiB and more are carved from chunks of 64 MiB (or
 * the block's size), 2 MiB aligned and advised MADV_HUGEPAGE, so a decode
 * step's ~240 MB of reads (the release-day bench model) walk 2 MiB pages
 * instead of 4 KiB ones: TPOT 17.0 -> 15.7 ms at 1 thread, 9.2 -> 8.5 ms
 * at 2 (bench/fp8_decode.sh's model, five alternating rounds; THP is
 * "madvise" on Debian, so nothing was huge before).  A block per
 * allocation rounded up to 2 MiB would waste up to 2 MiB a tensor (an MoE
 * model's experts are thousands of ~14 MiB tensors a card).  Chunks are
 * freed by rt_close; rt_free leaves their blocks alone.
 */
#define RT_BIG_MIN ((size_t)256 << 10)
#define RT_CHUNK ((size_t)64 << 20)
#define RT_HUGE ((size_t)2 << 20)

struct rt_chunk {
	unsigned char *base;
	size_t size, used;
	struct rt_chunk *next;
};

static void *chunk_alloc(struct rt *r, size_t bytes)
{
	size_t need = (bytes + 63) & ~(size_t)63;
	struct rt_chunk *c = r->chunks;
	void *p;
	if (!c || c->size - c->used < need) {
		size_t sz = need > RT_CHUNK ? (need + RT_HUGE - 1) / RT_HUGE * RT_HUGE : RT_CHUNK;
		c = calloc(1, sizeof *c);
		if (!c || posix_memalign(&p, RT_HUGE, sz)) {
			free(c);
			return NULL;
		}
		madvise(p, sz, MADV_HUGEPAGE); /* advice: where THP is off, 4 KiB */
		c->base = p;
		c->size = sz;
		c->next = r->chunks;
		r->chunks = c;
	}
	p = c->base + c->used;
	c->used += need;
	return p;
}

uint64_t rt_chunk_bytes(const struct rt *r)
{
	uint64_t n = 0;
	for (const struct rt_chunk *c = r->chunks; c; c = c->next)
		n += c->used;
	return n;
}

void rt_free(struct rt *r, void *p)
{
	for (struct rt_chunk *c = r->chunks; p && c; c = c->next)
		if ((unsigned char *)p >= c->base && (unsigned char *)p < c->base + c->size)
			return;
	free(p);
}

void *rt_alloc(struct rt *r, size_t bytes, const char *what, int zero)
{
	void *p;
	if (r->over[0])
		return NULL;
	if (r->budget && r->used + bytes > r->budget) {
		char a[32], b[32], c[32];
		snprintf(r->over, sizeof r->over, "card %d: %s (%s) does not fit: "
			 "%s of the %s budget already used", r->rank, what,
			 fmt_bytes(bytes, a),
			 fmt_bytes(r->used, b), fmt_bytes(r->budget, c));
		return NULL;
	}
	/* 64-byte aligned (a cache line, an AVX-512 vector): malloc's 16
	 * put every 64-byte load of a large weight across two lines, and the
	 * AVX-512 GEMV read at 0.55 of its aligned rate */
	if (r->big && bytes >= RT_BIG_MIN) {
		if ((p = chunk_alloc(r, bytes)) && zero)
			memset(p, 0, bytes);
	} else if (posix_memalign(&p, 64, bytes ? bytes : 1)) {
		p = NULL;
	} else if (zero) {
		memset(p, 0, bytes);
	}
	if (!p) {
		snprintf(r->over, sizeof r->over, "%s: out of host memory", what);
		return NULL;
	}
	r->used += bytes;
	if (r->used > r->peak)
		r->peak = r->used;
	return p;
}

uint64_t rt_mem_used(const struct rt *r) { return r->used; }
uint64_t rt_mem_peak(const struct rt *r) { return r->peak; }
int rt_fp8_subnormals(const struct rt *r, uint64_t *codes, uint64_t *sub,
		      uint64_t *bytes)
{
	*codes = r->fp8_codes;
	*sub = r->fp8_sub;
	*bytes = r->fp8_sub_bytes;
	return r->fp8_taken;
}
const struct rt_stats *rt_stats(const struct rt *r) { return &r->stats; }
int rt_rank(const struct rt *r) { return r->rank; }
const struct model_config *rt_config(const struct rt *r) { return &r->c; }

/* ------------------------------------------------------ timed collectives */

void rt_stat_add(struct rt *r, int group, int op, uint64_t bytes, double t)
{
	r->stats.bytes[group][op] += bytes;
	r->stats.time_s[group][op] += t;
	r->stats.calls[group][op]++;
}

void rt_allreduce(struct rt *r, float *buf, int n, MPI_Comm comm, int group)
{
	double t0;
	if (comm == MPI_COMM_NULL || n == 0)
		return;
	t0 = MPI_Wtime();
	MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm);
	rt_stat_add(r, group, RT_OP_ALLREDUCE, (uint64_t)n * 4, MPI_Wtime() - t0);
}

/* ---------------------------------------------------------------- loading */

/*
 * Where the stored parts of t are in an open safetensors file, as
 * quant_read_f32 wants them; the number of parts found (a converted file
 * may hold a quantised weight dequantised: its one plain part).
 */
static int part_refs(const struct st_file *st, int fd,
		     const struct stored_part *sp, int np, struct part_ref *ref)
{
	int found = 0;
	for (int p = 0; p < np; p++) {
		const struct st_tensor *x = st_find(st, sp[p].name);
		if (!x)
			break;
		ref[p].fd = fd;
		ref[p].off = st->data_off + x->begin;
		ref[p].dtype = x->dtype;
		ref[p].numel = st_numel(x);
		ref[p].cols = x->ndim == 2 ? x->shape[1] : 1;
		found++;
	}
	return found;
}

/*
 * The np stored parts sp of a tensor in the HF checkpoint's shards: each
 * ref's fd is opened (-1 where no shard holds it; the caller closes the
 * others); *where is the shard of the first part (for messages).  Returns
 * the number found.
 */
static int shard_refs(struct rt *r, const struct stored_part *sp, int np,
		      struct part_ref *ref, const char **where)
{
	int got = 0;
	*where = r->dir;
	for (int p = 0; p < np; p++) {
		ref[p].fd = -1;
		for (size_t k = 0; k < r->ck.nshards && ref[p].fd < 0; k++) {
			struct ckpt_shard *sh = &r->ck.shards[k];
			if (!st_find(&sh->st, sp[p].name))
				continue;
			ref[p].fd = open(sh->path, O_RDONLY | O_CLOEXEC);
			if (ref[p].fd >= 0 &&
			    part_refs(&sh->st, ref[p].fd, sp + p, 1, ref + p))
				got++;
			if (p == 0)
				*where = sh->path;
		}
	}
	return got;
}

/* This rank's part `part` of t (split as s) from the whole tensor in src,
 * elements of es bytes: the whole of it when t is not split, else each
 * outer row's segment along the split axis. */
static void cut_part(void *dst, const void *src, const struct tensor_spec *t,
		     const struct tensor_split *s, int part, size_t es)
{
	uint64_t full = 1, outer = 1, row, seg;
	for (int a = 0; a < t->ndim; a++)
		full *= t->shape[a];
	if (s->axis < 0) {
		memcpy(dst, src, full * es);
		return;
	}
	for (int a = 0; a < s->axis; a++)
		outer *= t->shape[a];
	row = full / outer;
	seg = row / (uint64_t)s->parts;
	for (uint64_t o = 0; o < outer; o++)
		memcpy((char *)dst + o * seg * es,
		       (const char *)src + (o * row + (uint64_t)part * seg) * es, seg * es);
}

/* Read tensor `name` (this rank's slice) as f32, dequantising FP8 or
 * packed integers on load; NULL if this rank has no part of it.  Errors
 * go to r->over. */
float *rt_load_f32(struct rt *r, const struct tensor_spec *specs, size_t ns,
		   const char *name)
{
	const struct tensor_spec *t = NULL;
	struct tensor_split s;
	struct stored_part sp[3];
	struct part_ref ref[3];
	struct d0_err e;
	uint64_t numel, rows, cols;
	float *out;
	int part, np, quantised;
	for (size_t i = 0; i < ns && !t; i++)
		if (!strcmp(specs[i].name, name))
			t = &specs[i];
	if (!t)
		return NULL;
	layout_split(&r->c, &r->d, t, &s);
	part = layout_part_for_rank(&r->c, &r->d, t, &s, r->rank);
	if (part < 0)
		return NULL;
	numel = layout_slice_numel(t, &s);
	out = rt_alloc(r, numel * 4, name, 0);
	if (!out)
		return NULL;
	quantised = quant_applies(&r->c.qc, t);
	np = quant_parts(&r->c.qc, t, DT_F32, sp);
	rows = t->shape[0];
	cols = t->ndim == 2 ? t->shape[1] : 1;
	if (r->converted) {
		int got = part_refs(&r->rank_st, r->rank_fd, sp, np, ref);
		if (s.axis >= 0)
			*(s.axis == 0 ? &rows : &cols) /= (uint64_t)s.parts;
		if (got == 0 || (got < 2 && ref[0].numel != numel) ||
		    (quantised && got == 1 && ref[0].dtype != DT_F32 &&
		     ref[0].dtype != DT_BF16 && ref[0].dtype != DT_F16)) {
			snprintf(r->over, sizeof r->over, "%s: tensor '%s' missing "
				 "or mis-sized in the rank file", r->rank_st.path, name);
			return NULL;
		}
		if (quant_read_f32(&r->c.qc, quantised && got >= 2, rows, cols,
				   ref, out, r->rank_st.path, name, &e) < 0) {
			snprintf(r->over, sizeof r->over, "%.255s", e.msg);
			return NULL;
		}
		return out;
	}
	/* from the HF checkpoint: decode the whole tensor, keep our part */
	{
		uint64_t full = rows * cols;
		const char *where;
		float *f;
		int got = shard_refs(r, sp, np, ref, &where), rc = 0;
		if (got < (quantised ? 2 : 1)) {
			snprintf(r->over, sizeof r->over, "%s: tensor '%s' %s",
				 where, name, ref[0].fd < 0 ? "is in no shard"
							    : "has no scale tensor");
			rc = -1;
		}
		f = rc == 0 ? malloc(full * 4 + 1) : NULL;
		if (rc == 0 && quant_read_f32(&r->c.qc, quantised, rows, cols, ref,
					      f, where, name, &e) < 0) {
			snprintf(r->over, sizeof r->over, "%.255s", e.msg);
			rc = -1;
		}
		for (int p = 0; p < np; p++)
			if (ref[p].fd >= 0)
				close(ref[p].fd);
		if (rc < 0) {
			free(f);
			return NULL;
		}
		cut_part(out, f, t, &s, part, 4);
		free(f);
		return out;
	}
}

/* FP8 weights stay FP8 unless DAY0_FP8=f32 (A/B runs: the same model
 * dequantised on load, as before the fused product). */
static int fp8_resident(void)
{
	const char *e = getenv("DAY0_FP8");
	return !(e && !strcmp(e, "f32"));
}

static int fp8_nan(int dtype, const uint8_t *b, uint64_t n)
{
	uint8_t lo = dtype == DT_F8_E5M2 ? 0x7d : 0x7f, any = 0;
	for (uint64_t i = 0; i < n; i++)
		any |= (b[i] & 0x7f) >= lo;
	return any;
}

/*
 * e4m3's subnormal codes counted, and with the dp4 or gf4 kernel in use
 * (dp4 the default where the CPU has AVX512-BF16; DAY0_KERNEL=avx512-gf4)
 * taken out of w's resident codes (lr x lc), each into a sparse list the
 * accountant counts (rows + 1 offsets, 8 bytes a code): both read codes
 * as value x 2^-120, which makes a subnormal a denormal: VDPBF16PS (dp4)
 * reads it as zero, gf4's FMA pays a microcode assist each (ops_fp8.c);
 * every FP8 kernel adds the list back.  A real checkpoint
 * has ~1e-4 of its codes subnormal (128 x 128 blocks scaled to 448).
 * Left in place (the kernels patch them) otherwise, for e5m2, or for a
 * list that does not fit.
 */
static void take_subnormals(struct rt *r, const struct tensor_spec *t, struct wmat *w,
			    uint64_t lr, uint64_t lc)
{
	uint64_t ns;
	void *sub = NULL;
	size_t bytes;
	char what[300];
	if (w->dtype != DT_F8_E4M3 || lc >= INT32_MAX || lr >= INT32_MAX)
		return;
	ns = op_fp8_subnormals(w, (int)lr, (int)lc);
	r->fp8_codes += lr * lc;
	r->fp8_sub += ns;
	if (ns >= UINT32_MAX || !op_fp8_wants_nosub())
		return; /* the kernels read them in place (gfx4 patches them) */
	if (ns) {
		bytes = op_fp8_sub_bytes((int)lr, ns);
		snprintf(what, sizeof what, "the subnormal FP8 codes of %s", t->name);
		sub = rt_alloc(r, bytes, what, 0);
		if (!sub)
			return; /* r->over says why */
		r->fp8_sub_bytes += bytes;
	}
	op_fp8_take_subnormals(w, (int)lr, (int)lc, sub);
	r->fp8_taken = 1;
}

/*
 * Block-scaled FP8 weight t kept as stored (ops_fp8.c): this rank's codes
 * and, in the same allocation, the f32 scales of its blocks (times
 * op_fp8_scale_factor).  Returns 1 when *w is settled: filled, this rank
 * holds no part of t, or an error in r->over; 0 to read it through load()
 * as f32 instead: a slice that starts inside a scale block, a rank file
 * that holds it dequantised, NaN codes (the kernels would read them as
 * numbers), a scale that overflows f32 times the factor, or parts that
 * are not as expected (load() names what is wrong).
 */
static int load_fp8(struct rt *r, const struct tensor_spec *t, struct wmat *w)
{
	const struct quant_config *q = &r->c.qc;
	struct tensor_split s;
	struct stored_part sp[3];
	struct part_ref ref[3];
	const char *where = r->rank_st.path;
	uint64_t R = t->shape[0], C = t->shape[1], lr = R, lc = C, r0 = 0, c0 = 0;
	uint64_t br = (uint64_t)q->block[0], bc = (uint64_t)q->block[1];
	uint64_t SR, SC, lbr, lbc, sbc, cbytes, bytes = 0;
	uint8_t *buf = NULL, *tmp = NULL, *sc = NULL;
	float fac = op_fp8_scale_factor(q->fp8_dtype), *ls;
	int part, got, rc = 1;
	layout_split(&r->c, &r->d, t, &s);
	part = layout_part_for_rank(&r->c, &r->d, t, &s, r->rank);
	if (part < 0)
		return 1;
	if (s.axis == 0) {
		lr = R / (uint64_t)s.parts;
		r0 = (uint64_t)part * lr;
	} else if (s.axis == 1) {
		lc = C / (uint64_t)s.parts;
		c0 = (uint64_t)part * lc;
	}
	if (q->block[0] <= 0 || q->block[1] <= 0 || r0 % br || c0 % bc ||
	    quant_parts(q, t, DT_F32, sp) < 2)
		return 0;
	if (r->converted) {
		/* the rank file holds the slice and its own blocks' scales */
		got = part_refs(&r->rank_st, r->rank_fd, sp, 2, ref);
		SR = lr;
		SC = lc;
		r0 = c0 = 0;
	} else {
		got = shard_refs(r, sp, 2, ref, &where);
		SR = R;
		SC = C;
	}
	lbr = (lr + br - 1) / br;
	lbc = (lc + bc - 1) / bc;
	sbc = (SC + bc - 1) / bc;
	if (got < 2 || ref[0].dtype != q->fp8_dtype || ref[0].numel != SR * SC ||
	    (ref[1].dtype != DT_F32 && ref[1].dtype != DT_BF16) ||
	    ref[1].numel != ((SR + br - 1) / br) * sbc) {
		rc = 0;
		goto out;
	}
	cbytes = (lr * lc + 63) & ~(uint64_t)63;
	bytes = cbytes + lbr * lbc * sizeof(float);
	buf = rt_alloc(r, bytes, t->name, 0);
	if (!buf)
		goto out;
	memset(buf + lr * lc, 0, cbytes - lr * lc); /* the pad before the scales */
	if (c0 == 0 && lc == SC) {
		/* whole rows: one read */
		if (pread_full(ref[0].fd, buf, lr * lc, ref[0].off + r0 * SC) < 0)
			snprintf(r->over, sizeof r->over, "%s: tensor '%s': read "
				 "failed", where, t->name);
	} else {
		/* a column slice: the whole tensor, then our part of each row */
		tmp = malloc(SR * SC + 1);
		if (!tmp || pread_full(ref[0].fd, tmp, SR * SC, ref[0].off) < 0)
			snprintf(r->over, sizeof r->over, "%s: tensor '%s': %s",
				 where, t->name, tmp ? "read failed" : "out of memory");
		else
			cut_part(buf, tmp, t, &s, part, 1);
	}
	sc = r->over[0] ? NULL : malloc(ref[1].numel * dtype_size(ref[1].dtype) + 1);
	if (!r->over[0] && (!sc || pread_full(ref[1].fd, sc, ref[1].numel *
					      dtype_size(ref[1].dtype), ref[1].off) < 0))
		snprintf(r->over, sizeof r->over, "%s: tensor '%s': cannot read "
			 "its scales", where, t->name);
	if (r->over[0])
		goto out;
	ls = (float *)(buf + cbytes);
	for (uint64_t i = 0; i < lbr; i++)
		for (uint64_t b = 0; b < lbc; b++) {
			uint64_t at = (r0 / br + i) * sbc + c0 / bc + b;
			float v;
			if (ref[1].dtype == DT_BF16) {
				uint16_t h;
				memcpy(&h, sc + 2 * at, 2);
				v = bf16_to_f32(h);
			} else {
				memcpy(&v, sc + 4 * at, 4);
			}
			ls[i * lbc + b] = v * fac;
			if (!isfinite(ls[i * lbc + b]))
				rc = 0;
		}
	if (rc == 0 || fp8_nan(q->fp8_dtype, buf, lr * lc)) {
		rc = 0;
		r->used -= bytes; /* load() accounts its f32 copy instead */
		rt_free(r, buf);
		buf = NULL;
		goto out;
	}
	w->p = buf;
	buf = NULL;
	w->dtype = q->fp8_dtype;
	w->scale = ls;
	w->br = (int)br;
	w->bc = (int)bc;
	w->sc_cols = (int)lbc;
	take_subnormals(r, t, w, lr, lc);
out:
	if (buf) {
		r->used -= bytes;
		rt_free(r, buf);
	}
	free(tmp);
	free(sc);
	if (!r->converted)
		for (int p = 0; p < 2; p++)
			if (ref[p].fd >= 0)
				close(ref[p].fd);
	return rc;
}

/*
 * Tensor `name` as it stays resident: a plain bf16 matrix (the stored
 * bytes of this rank's slice, half of f32's), anything else f32 through
 * load().  .p is NULL if this rank has no part of it; errors go to
 * r->over, naming the file and the tensor.
 */
struct wmat rt_load_w(struct rt *r, const struct tensor_spec *specs,
			  size_t ns, const char *name)
{
	const struct tensor_spec *t = NULL;
	const struct st_tensor *x = NULL;
	const struct st_file *stf = NULL;
	struct wmat w = {.p = NULL, .dtype = DT_F32};
	struct tensor_split s;
	uint64_t numel, full;
	int part;
	for (size_t i = 0; i < ns && !t; i++)
		if (!strcmp(specs[i].name, name))
			t = &specs[i];
	if (t && t->ndim == 2 && quant_applies(&r->c.qc, t) &&
	    r->c.qc.kind == QUANT_FP8_BLOCK && fp8_resident() && load_fp8(r, t, &w))
		return w;
	if (t && t->ndim == 2 && !quant_applies(&r->c.qc, t) &&
	    !role_keeps_f32(t->role)) {
		if (r->converted) {
			stf = &r->rank_st;
			x = st_find(stf, name);
		} else {
			for (size_t k = 0; k < r->ck.nshards && !x; k++)
				if ((x = st_find(&r->ck.shards[k].st, name)))
					stf = &r->ck.shards[k].st;
		}
	}
	if (!x || x->dtype != DT_BF16) {
		w.p = rt_load_f32(r, specs, ns, name);
		return w;
	}
	layout_split(&r->c, &r->d, t, &s);
	part = layout_part_for_rank(&r->c, &r->d, t, &s, r->rank);
	if (part < 0)
		return w;
	numel = layout_slice_numel(t, &s);
	full = t->shape[0] * t->shape[1];
	if (st_numel(x) != (r->converted ? numel : full)) {
		snprintf(r->over, sizeof r->over, "%s: tensor '%s' is mis-sized "
			 "(%llu elements, expected %llu)", stf->path, name,
			 (unsigned long long)st_numel(x),
			 (unsigned long long)(r->converted ? numel : full));
		return w;
	}
	w.p = rt_alloc(r, numel * 2, name, 0);
	if (!w.p)
		return w;
	w.dtype = DT_BF16;
	if (r->converted) {
		if (pread_full(r->rank_fd, w.p, numel * 2, stf->data_off + x->begin) < 0)
			snprintf(r->over, sizeof r->over, "%s: tensor '%s': read "
				 "failed", stf->path, name);
		return w;
	}
	{
		/* the whole stored tensor, then our rows or columns of it */
		int fd = open(stf->path, O_RDONLY | O_CLOEXEC);
		uint16_t *f = fd >= 0 ? malloc(full * 2 + 1) : NULL;
		if (!f || pread_full(fd, f, full * 2, stf->data_off + x->begin) < 0) {
			snprintf(r->over, sizeof r->over, "%s: tensor '%s': %s",
				 stf->path, name, fd < 0 ? "cannot open"
					 : f ? "read failed" : "out of memory");
		} else {
			cut_part(w.p, f, t, &s, part, 2);
		}
		free(f);
		if (fd >= 0)
			close(fd);
	}
	return w;
}

/* Check layout.json against the runtime; messages say what differs. */
static int check_layout(struct rt *r, struct d0_err *err)
{
	char *lp = path_join(r->dir, "layout.json");
	json_error_t je;
	json_t *lay = json_load_file(lp, 0, &je), *ranks, *me;
	int rc = 0;
	free(lp);
	if (!lay)
		return d0_errf(err, "%s/layout.json: %s", r->dir, je.text);
#define EQ(key, have)                                                         \
	if (rc == 0 && json_integer_value(json_object_get(lay, key)) != (have)) \
		rc = d0_errf(err, "%s/layout.json: converted for %s=%lld but "  \
			     "launched with %s=%d (reconvert, or launch to "    \
			     "match)", r->dir, key,                            \
			     (long long)json_integer_value(                    \
				     json_object_get(lay, key)), key, (int)(have));
	EQ("world_size", r->world);
	EQ("tp", r->d.tp);
	EQ("pp", r->d.pp);
	EQ("ep", r->d.ep);
#undef EQ
	ranks = json_object_get(lay, "ranks");
	me = json_array_get(ranks, (size_t)r->rank);
	if (rc == 0 && (!me || json_integer_value(json_object_get(me, "tp_rank")) != r->tp_rank ||
			json_integer_value(json_object_get(me, "pp_rank")) != r->pp_rank ||
			json_integer_value(json_object_get(me, "ep_rank")) != r->ep_rank))
		rc = d0_errf(err, "%s/layout.json: rank %d's coordinates differ "
			     "from the runtime's (tp %d, pp %d, ep %d)", r->dir,
			     r->rank, r->tp_rank, r->pp_rank, r->ep_rank);
	if (rc == 0) {
		/* the source it was converted from must still be what we think */
		json_t *src = json_object_get(lay, "source");
		const char *sdir = json_string_value(json_object_get(src, "dir"));
		char *sums = sdir ? path_join(sdir, "SHA256SUMS") : NULL;
		json_t *have = NULL, *sh;
		size_t i;
		if (sums && path_exists(sums) && sums_load(sums, &have, NULL) == 0) {
			json_array_foreach(json_object_get(src, "shards"), i, sh) {
				const char *f = json_string_value(json_object_get(sh, "file"));
				json_t *h = json_object_get(have, f ? f : "");
				if (h && strcmp(json_string_value(h),
						json_string_value(json_object_get(sh, "sha256"))))
					rc = d0_errf(err, "%s/layout.json: source shard %s "
						     "has changed since conversion (SHA-256 "
						     "differs from %s)", r->dir, f, sums);
			}
		}
		json_decref(have);
		free(sums);
	}
	if (rc == 0) {
		const char *f = json_string_value(json_object_get(me, "file"));
		char *p = f && shard_name_ok(f) ? path_join(r->dir, f) : NULL;
		json_t *meta;
		if (!p || st_open(p, &r->rank_st, err) < 0)
			rc = p ? -1 : d0_errf(err, "%s/layout.json: bad rank file",
					      r->dir);
		free(p);
		meta = rc == 0 ? r->rank_st.metadata : NULL;
		if (rc == 0 && (!meta || atoi(json_string_value(json_object_get(meta, "rank")) ?: "-1") != r->rank))
			rc = d0_errf(err, "%s: metadata says another rank's file",
				     r->rank_st.path);
		if (rc == 0 && (r->rank_fd = open(r->rank_st.path, O_RDONLY | O_CLOEXEC)) < 0)
			rc = d0_errf(err, "%s: cannot open", r->rank_st.path);
	}
	json_decref(lay);
	return rc;
}

static int load_layers(struct rt *r, struct d0_err *err)
{
	struct tensor_spec *sp = NULL;
	size_t ns = 0;
	char n[200];
	if (model_tensors(&r->c, &sp, &ns, err) < 0)
		return -1;
	/* a vision-language release's LM may sit under a prefix (LLaVA's
	 * language_model.): cfg.vision.lm_prefix, "" for a text model */
#define LD(field, fmt, ...)                                                   \
	do {                                                                  \
		snprintf(n, sizeof n, "%s" fmt, r->c.vision.lm_prefix,        \
			 __VA_ARGS__);                                         \
		field = rt_load_f32(r, sp, ns, n);                                   \
	} while (0)
#define LW(field, fmt, ...)                                                   \
	do {                                                                  \
		snprintf(n, sizeof n, "%s" fmt, r->c.vision.lm_prefix,        \
			 __VA_ARGS__);                                         \
		field = rt_load_w(r, sp, ns, n);                                 \
	} while (0)
	if (r->pp_rank == 0 || (r->c.tie_embeddings && r->pp_rank == r->d.pp - 1))
		LW(r->embed, "%s", "model.embed_tokens.weight");
	if (r->pp_rank == r->d.pp - 1) {
		LD(r->final_norm, "%s", "model.norm.weight");
		if (!r->c.tie_embeddings)
			LW(r->lm_head, "%s", "lm_head.weight");
	}
	r->L = calloc((size_t)r->nl, sizeof *r->L);
	for (int i = 0; i < r->nl && !r->over[0]; i++) {
		struct rt_layer *y = &r->L[i];
		int l = r->first + i;
		const char *p = "model.layers";
		y->moe = model_layer_is_moe(&r->c, l);
		y->window = model_layer_window(&r->c, l);
		LD(y->in_norm, "%s.%d.input_layernorm.weight", p, l);
		LD(y->post_norm, "%s.%d.post_attention_layernorm.weight", p, l);
		if (r->c.mla) {
			if (r->c.q_lora_rank) {
				LW(y->q_a, "%s.%d.self_attn.q_a_proj.weight", p, l);
				LD(y->q_a_b, "%s.%d.self_attn.q_a_proj.bias", p, l);
				LD(y->q_a_norm, "%s.%d.self_attn.q_a_layernorm.weight", p, l);
				LW(y->q_b, "%s.%d.self_attn.q_b_proj.weight", p, l);
			} else {
				LW(y->wq, "%s.%d.self_attn.q_proj.weight", p, l);
			}
			LW(y->kv_a, "%s.%d.self_attn.kv_a_proj_with_mqa.weight", p, l);
			LD(y->kv_a_b, "%s.%d.self_attn.kv_a_proj_with_mqa.bias", p, l);
			LD(y->kv_a_norm, "%s.%d.self_attn.kv_a_layernorm.weight", p, l);
			LW(y->kv_b, "%s.%d.self_attn.kv_b_proj.weight", p, l);
		} else {
			LW(y->wq, "%s.%d.self_attn.q_proj.weight", p, l);
			LW(y->wk, "%s.%d.self_attn.k_proj.weight", p, l);
			LW(y->wv, "%s.%d.self_attn.v_proj.weight", p, l);
			LD(y->bq, "%s.%d.self_attn.q_proj.bias", p, l);
			LD(y->bk, "%s.%d.self_attn.k_proj.bias", p, l);
			LD(y->bv, "%s.%d.self_attn.v_proj.bias", p, l);
			LD(y->q_norm, "%s.%d.self_attn.q_norm.weight", p, l);
			LD(y->k_norm, "%s.%d.self_attn.k_norm.weight", p, l);
		}
		LW(y->wo, "%s.%d.self_attn.o_proj.weight", p, l);
		LD(y->bo, "%s.%d.self_attn.o_proj.bias", p, l);
		if (!y->moe) {
			LW(y->gate, "%s.%d.mlp.gate_proj.weight", p, l);
			LW(y->up, "%s.%d.mlp.up_proj.weight", p, l);
			LW(y->down, "%s.%d.mlp.down_proj.weight", p, l);
			LD(y->gate_b, "%s.%d.mlp.gate_proj.bias", p, l);
			LD(y->up_b, "%s.%d.mlp.up_proj.bias", p, l);
			LD(y->down_b, "%s.%d.mlp.down_proj.bias", p, l);
			continue;
		}
		y->e_gate = calloc((size_t)r->c.experts, sizeof(struct wmat));
		y->e_up = calloc((size_t)r->c.experts, sizeof(struct wmat));
		y->e_down = calloc((size_t)r->c.experts, sizeof(struct wmat));
		if (!strcmp(r->c.model_type, "mixtral")) {
			const char *x = "block_sparse_moe";
			LW(y->router, "%s.%d.%s.gate.weight", p, l, x);
			for (int e = 0; e < r->c.experts; e++) {
				LW(y->e_gate[e], "%s.%d.%s.experts.%d.w1.weight", p, l, x, e);
				LW(y->e_down[e], "%s.%d.%s.experts.%d.w2.weight", p, l, x, e);
				LW(y->e_up[e], "%s.%d.%s.experts.%d.w3.weight", p, l, x, e);
			}
		} else {
			LW(y->router, "%s.%d.mlp.gate.weight", p, l);
			LD(y->router_bias, "%s.%d.mlp.gate.e_score_correction_bias", p, l);
			for (int e = 0; e < r->c.experts; e++) {
				LW(y->e_gate[e], "%s.%d.mlp.experts.%d.gate_proj.weight", p, l, e);
				LW(y->e_up[e], "%s.%d.mlp.experts.%d.up_proj.weight", p, l, e);
				LW(y->e_down[e], "%s.%d.mlp.experts.%d.down_proj.weight", p, l, e);
			}
			if (r->c.mla) {
				LW(y->sh_gate, "%s.%d.mlp.shared_experts.gate_proj.weight", p, l);
				LW(y->sh_up, "%s.%d.mlp.shared_experts.up_proj.weight", p, l);
				LW(y->sh_down, "%s.%d.mlp.shared_experts.down_proj.weight", p, l);
			} else {
				LW(y->sh_gate, "%s.%d.mlp.shared_expert.gate_proj.weight", p, l);
				LW(y->sh_up, "%s.%d.mlp.shared_expert.up_proj.weight", p, l);
				LW(y->sh_down, "%s.%d.mlp.shared_expert.down_proj.weight", p, l);
				LW(y->sh_gate_w, "%s.%d.mlp.shared_expert_gate.weight", p, l);
			}
		}
	}
#undef LD
#undef LW
	free(sp);
	return 0;
}

/*
 * Start-up is collective: a rank that fails alone (a truncated, missing or
 * foreign rank file) must not leave the others waiting in a collective it
 * never reaches.  Every rank's status is all-reduced; when one failed, the
 * lowest failing rank's reason is broadcast, so every rank fails with it.
 */
/*
 * MLA's attention runs on the cached latent with kv_b_proj absorbed
 * (docs/serve.md, "MLA's cache"): q_nope times W_UK and the attention's
 * latent output times W_UV^T, by sgemm over this rank's heads' rows of
 * kv_b in f32.  f32 weights are used as they are; bf16 ones are widened
 * (exactly) and the bf16 copy freed; FP8 ones are widened with their
 * block scales and the codes kept (the accountant counts both).
 */
static void mla_widen_kv_b(struct rt *r)
{
	size_t n = (size_t)r->nh_l * (size_t)(r->c.qk_nope_dim + r->c.v_head_dim);
	size_t k = (size_t)r->c.kv_lora_rank;
	for (int i = 0; i < r->nl && !r->over[0]; i++) {
		struct wmat *w = &r->L[i].kv_b;
		float *f;
		if (!w->p)
			continue;
		if (w->dtype == DT_F32) {
			r->L[i].kv_b_f32 = w->p;
			w->p = NULL;
			continue;
		}
		f = rt_alloc(r, n * k * 4, "MLA kv_b_proj in f32 (absorbed attention)", 0);
		if (!f)
			return;
		if (w->dtype == DT_BF16) {
			op_bf16_widen(f, w->p, n * k);
			rt_free(r, w->p);
			w->p = NULL;
			r->used -= n * k * 2;
		} else {
			op_fp8_widen_rows(f, w, 0, (int)n, (int)k, 0);
		}
		r->L[i].kv_b_f32 = f;
	}
}

static int agree_start(struct rt *r, int rc, struct d0_err *err)
{
	int first = rc < 0 ? r->rank : r->world;
	char msg[sizeof err->msg];
	MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (first == r->world)
		return 0;
	if (r->rank == first)
		memcpy(msg, err->msg, sizeof msg);
	MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
	if (r->rank != first) {
		msg[sizeof msg - 1] = 0;
		d0_errf(err, "rank %d failed: %s", first, msg);
		r->peer_failed = 1;
	}
	return -1;
}

/* The same for the load: a rank over its budget (or missing a tensor)
 * gives every rank the first such reason, so all end together. */
static void agree_load(struct rt *r)
{
	int first = r->over[0] ? r->rank : r->world;
	MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (first == r->world)
		return;
	if (!r->over[0])
		r->peer_failed = 1;
	MPI_Bcast(r->over, (int)sizeof r->over, MPI_CHAR, first, MPI_COMM_WORLD);
}

int rt_peer_failed(const struct rt *r) { return r && r->peer_failed; }

/* The local part of rt_open, before any collective: the config, the
 * layout, this rank's weights opened. */
static int open_local(struct rt *r, const char *dir, const struct layout_dims *d,
		      struct d0_err *err)
{
	char *cfg = path_join(dir, "config.json");
	if (model_config_load(cfg, &r->c, err) < 0) {
		free(cfg);
		return -1;
	}
	free(cfg);
	if (d->tp * d->pp * d->ep != r->world)
		return d0_errf(err, "tp %d x pp %d x ep %d = %d ranks, but mpirun "
			       "started %d", d->tp, d->pp, d->ep,
			       d->tp * d->pp * d->ep, r->world);
	if (layout_check(&r->c, d, err) < 0)
		return -1;
	layout_coords(d, r->rank, &r->pp_rank, &r->ep_rank, &r->tp_rank);
	{
		char *lp = path_join(dir, "layout.json");
		r->converted = path_exists(lp);
		free(lp);
	}
	if (r->converted) {
		if (check_layout(r, err) < 0)
			return -1;
	} else {
		if (ckpt_open(dir, &r->ck, err) < 0)
			return -1;
		for (size_t k = 0; k < r->ck.nshards; k++) {
			if (st_open(r->ck.shards[k].path, &r->ck.shards[k].st, err) < 0)
				return -1;
			r->ck.shards[k].parsed = 1;
		}
	}
	return 0;
}

int rt_open(struct rt **out, const char *dir, const struct layout_dims *d,
	    uint64_t card_mem, int64_t max_ctx, struct d0_err *err)
{
	return rt_open_slots(out, dir, d, card_mem, max_ctx, 1, err);
}

int rt_open_slots(struct rt **out, const char *dir,
		  const struct layout_dims *d, uint64_t card_mem,
		  int64_t max_ctx, int slots, struct d0_err *err)
{
	/* one block of the whole context per slot: the cache is laid out
	 * exactly as before blocks ([slot][kv head][position][dim]), and
	 * attention over one block reads it in place */
	if (slots < 1)
		slots = 1;
	if (max_ctx < 1 || max_ctx > INT32_MAX)
		return d0_errf(err, "max_ctx %lld: expected 1..%d", (long long)max_ctx,
			       INT32_MAX);
	return rt_open_paged(out, dir, d, card_mem, max_ctx, (int)max_ctx, slots, err);
}

int rt_open_paged(struct rt **out, const char *dir,
		  const struct layout_dims *d, uint64_t card_mem,
		  int64_t max_ctx, int block_tokens, int nblocks,
		  struct d0_err *err)
{
	struct rt *r = calloc(1, sizeof *r);
	char *cfg = path_join(dir, "config.json");
	int color;
	*out = r;
	r->rank_fd = -1;
	r->dir = dir;
	r->d = *d;
	r->budget = card_mem;
	r->max_ctx = max_ctx;
	if (block_tokens < 1 || nblocks < 1) {
		*out = NULL;
		free(r);
		free(cfg);
		return d0_errf(err, "KV cache of %d blocks of %d tokens: expected "
			       ">= 1 of each", nblocks, block_tokens);
	}
	r->kv_bt = block_tokens;
	r->kv_blocks = nblocks;
	r->kv_sb = (int)((max_ctx + block_tokens - 1) / block_tokens);
	r->slots = nblocks / r->kv_sb;
	MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &r->world);
	{
		/* share the node's cores between the ranks on it: BLAS threads
		 * of several ranks fighting over the same cores cost more than
		 * they bring */
		MPI_Comm node;
		int local = 1;
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
				    MPI_INFO_NULL, &node);
		MPI_Comm_size(node, &local);
		MPI_Comm_free(&node);
		if (!getenv("OPENBLAS_NUM_THREADS"))
			openblas_set_num_threads(cores / local > 0 ? (int)(cores / local) : 1);
	}
	free(cfg);
	if (agree_start(r, open_local(r, dir, d, err), err) < 0)
		return -1;
	/* TP group: same stage and ep; EP group: same stage and tp */
	color = r->pp_rank * r->d.ep + r->ep_rank;
	MPI_Comm_split(MPI_COMM_WORLD, color, r->tp_rank, &r->tp_comm);
	color = r->pp_rank * r->d.tp + r->tp_rank;
	MPI_Comm_split(MPI_COMM_WORLD, color, r->ep_rank, &r->ep_comm);
	{
		int64_t first, count;
		layout_stage_layers(r->c.layers, d->pp, r->pp_rank, &first, &count);
		r->first = (int)first;
		r->nl = (int)count;
	}
	r->nh_l = (int)(r->c.heads / d->tp);
	/* MLA caches one row a position shared by every head (the latent
	 * and the rope key): one kv head of its own width */
	r->nkv_l = r->c.mla ? 1
		   : (int)(r->c.kv_heads >= d->tp ? r->c.kv_heads / d->tp : 1);
	r->dqk = (int)(r->c.mla ? r->c.qk_nope_dim + r->c.qk_rope_dim : r->c.head_dim);
	r->dv = (int)(r->c.mla ? r->c.v_head_dim : r->c.head_dim);
	r->kv_dk = r->c.mla ? (int)(r->c.kv_lora_rank + r->c.qk_rope_dim) : r->dqk;
	r->kv_dv = r->c.mla ? 0 : r->dv;
	r->rot_dim = (int)(r->c.mla ? r->c.qk_rope_dim : r->c.head_dim);
	r->ffn_l = (int)(r->c.ffn / d->tp);
	r->moe_ffn_l = (int)(r->c.moe_ffn / d->tp);
	r->shared_l = (int)(r->c.shared_ffn / d->tp);
	r->vocab_l = (int)(r->c.vocab / d->tp);
	r->scale = 1.0 / sqrt((double)r->dqk);
	if (r->c.mla && r->c.rope.type[0] && r->c.rope.mscale_all_dim != 0) {
		double m = r->c.rope.factor <= 1 ? 1.0
			   : 0.1 * r->c.rope.mscale_all_dim * log(r->c.rope.factor) + 1.0;
		r->scale *= m * m;
	}
	r->inv_freq = calloc((size_t)r->rot_dim, sizeof(double));
	if (op_rope_inv_freq(&r->c, r->rot_dim, max_ctx, r->inv_freq,
			     &r->attn_factor) < 0)
		return d0_errf(err, "rope type '%s' is not implemented by the "
			       "runtime", r->c.rope.type);
	if (strcmp(r->c.hidden_act, "silu"))
		return d0_errf(err, "activation '%s' is not implemented by the "
			       "runtime (only silu / SwiGLU)", r->c.hidden_act);
	{ /* the weights and the KV cache: huge-page chunks (DAY0_HUGE=0: not,
	   * for an A/B) */
		const char *h = getenv("DAY0_HUGE");
		r->big = !(h && !strcmp(h, "0"));
	}
	load_layers(r, err);
	if (r->c.mla)
		mla_widen_kv_b(r);
	/* the KV cache, every block up front */
	for (int i = 0; i < r->nl && !r->over[0]; i++) {
		size_t per = (size_t)r->kv_blocks * (size_t)r->kv_bt * (size_t)r->nkv_l;
		r->L[i].kc = rt_alloc(r, per * (size_t)r->kv_dk * 4,
				      r->c.mla ? "KV cache (latent + rope keys)"
					       : "KV cache (keys)", 1);
		if (r->kv_dv)
			r->L[i].vc = rt_alloc(r, per * (size_t)r->kv_dv * 4,
					      "KV cache (values)", 1);
	}
	r->big = 0;
	agree_load(r);
	return 0;
}

const char *rt_over_budget(const struct rt *r)
{
	return r->over[0] ? r->over : NULL;
}

/* ---------------------------------------------------------------- forward */

/* y = swiglu MLP of x ([T,H]) with column-parallel gate/up, row-parallel
 * down; adds the partial (pre-all-reduce) result into acc scaled by w[t]. */
static void mlp(int T, int H, int F, const float *x, const struct wmat *g,
		const float *gb, const struct wmat *u, const float *ub,
		const struct wmat *dn, float *acc, const float *w, float *tmp_a,
		float *tmp_b, float *tmp_c)
{
	{
		float *ys[2] = {tmp_a, tmp_b};
		const struct wmat *ws[2] = {g, u};
		const float *bs[2] = {gb, ub};
		int ns[2] = {F, F};
		op_linear_many(2, ys, ws, bs, ns, x, T, H);
	}
	op_swiglu(tmp_a, tmp_a, tmp_b, T * F);
	op_linear_w(tmp_c, tmp_a, dn, NULL, T, H, F);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < H; j++)
			acc[(size_t)t * H + j] += (w ? w[t] : 1.0f) * tmp_c[(size_t)t * H + j];
}

struct scratch {
	float *a, *b, *c, *q, *k, *v, *att, *tmp;
};

/* Position of the batch's token t in its own sequence. */
static int64_t token_pos(const struct rt *r, int t)
{
	for (int g = 0; g < r->nseg; g++) {
		if (t < r->seg[g].len)
			return r->seg[g].pos0 + t;
		t -= r->seg[g].len;
	}
	return -1; /* not reached: the segments cover the batch */
}

/*
 * RoPE of the batch's token t on x [n_heads][dqk]: a model with M-RoPE
 * (mrope_section) takes the segment's rope_pos [3][len], or pos0 + i +
 * rope_delta on all three axes; the others the plain rotation at pos0 + i
 * + rope_delta (rope_delta is 0 for text).
 */
static void rope_token(const struct rt *r, int t, float *x, int n_heads)
{
	for (int g = 0; g < r->nseg; g++) {
		const struct rt_seg *sg = &r->seg[g];
		int64_t p = sg->pos0 + t + sg->rope_delta, p3[3];
		if (t >= sg->len) {
			t -= sg->len;
			continue;
		}
		if (!r->c.vision.mrope) {
			op_rope(x, n_heads, r->dqk, r->rot_dim, p, r->inv_freq,
				r->attn_factor);
			return;
		}
		for (int a = 0; a < 3; a++)
			p3[a] = sg->rope_pos ? sg->rope_pos[(size_t)a * sg->len + t] : p;
		op_mrope(x, n_heads, r->dqk, r->rot_dim, p3,
			 r->c.vision.mrope_section, r->inv_freq, r->attn_factor);
		return;
	}
}

/*
 * The image channel's splice (stage 0, after the vocab-parallel
 * all-reduce, so every TP rank holds the same rows): each segment's embeds
 * replace the embeddings of its image placeholder tokens, a row each in
 * order.  The caller gives exactly one row per placeholder.
 */
static void image_splice(const struct rt *r, const int64_t *tokens, float *h)
{
	int H = (int)r->c.hidden;
	for (int g = 0, t0 = 0; g < r->nseg; t0 += r->seg[g].len, g++)
		op_image_splice(h + (size_t)t0 * H, H, tokens + t0, r->seg[g].len,
				r->c.vision.image_token_id, r->seg[g].embeds);
}

/* Block of segment sg's position p. */
static size_t seg_block(const struct rt *r, const struct rt_seg *sg, int64_t p)
{
	int64_t i = p / r->kv_bt;
	return sg->table ? (size_t)sg->table[i] : (size_t)sg->slot * r->kv_sb + (size_t)i;
}

/*
 * Segment sg (its tokens' k, v, q from batch row t0 in s) into its blocks,
 * then its attention over positions 0..pos0+len-1, read in place through
 * the block table.  The KV cache is [block][kv head][block tokens][dim]
 * (MLA: one row of latent + rope key a position, the values its first
 * kv_lora_rank floats); the kernel's sums run in the same order whatever
 * the blocks, so the scores and outputs are those of the contiguous
 * layout, bit for bit.  q is [len][nh][qd] and the output [len][nh][od]
 * (MLA: the absorbed query and the latent output).
 */
static void attend_seg(struct rt *r, struct rt_layer *y, const struct rt_seg *sg,
		       int t0, struct scratch *s)
{
	int nh = r->nh_l, nkv = r->nkv_l, dk = r->kv_dk, dv = r->kv_dv, bt = r->kv_bt;
	int qd = r->c.mla ? dk : r->dqk, od = r->c.mla ? (int)r->c.kv_lora_rank : r->dv;
	int n = (int)(sg->pos0 + sg->len);
	size_t kbs = (size_t)nkv * bt * dk, vbs = (size_t)nkv * bt * dv;
	size_t base = sg->table ? 0 : (size_t)sg->slot * (size_t)r->kv_sb;
	struct kv_view kv = {y->kc + base * kbs, NULL, sg->table, bt, kbs, vbs,
			     (size_t)bt * dk, (size_t)bt * dv, dk, dv};
	for (int t = 0; t < sg->len; t++) {
		int64_t p = sg->pos0 + t;
		size_t b = seg_block(r, sg, p), off = (size_t)(p % bt);
		for (int h = 0; h < nkv; h++) {
			size_t from = ((size_t)t0 + (size_t)t) * nkv + (size_t)h;
			memcpy(y->kc + b * kbs + ((size_t)h * bt + off) * dk,
			       s->k + from * dk, (size_t)dk * 4);
			if (dv)
				memcpy(y->vc + b * vbs + ((size_t)h * bt + off) * dv,
				       s->v + from * dv, (size_t)dv * 4);
		}
	}
	if (dv) {
		kv.v = y->vc + base * vbs;
	} else { /* MLA: the values are the latent, the keys' first floats */
		kv.v = kv.k;
		kv.v_bs = kbs;
		kv.v_hs = (size_t)bt * dk;
		kv.v_ld = dk;
	}
	op_attention_paged(s->att + (size_t)t0 * nh * od, s->q + (size_t)t0 * nh * qd, &kv,
			   sg->len, n, sg->pos0, nh, nkv, qd, od, r->scale, (int)y->window);
}

/*
 * MLA (DeepSeek-V2/V3) on its compressed cache: each position keeps the
 * kv_a_layernorm'd latent c (kv_lora_rank) and the rotated rope key, one
 * row shared by every head.  kv_b_proj is absorbed as DeepSeek's inference
 * does: head h's scores are (q_nope W_UK_h) . c + q_rope . k_rope (W_UK_h
 * the head's k_nope rows of kv_b, [nope][kvl]), its output the attention
 * over c times W_UV_h^T, so attention is one kv head of kvl + rope floats
 * (values the first kvl of the same row) and no step expands the cache.
 */
static void mla_attention(struct rt *r, struct rt_layer *y, int T, const float *x,
			  float *out, struct scratch *s)
{
	int H = (int)r->c.hidden, nh = r->nh_l, dqk = r->dqk, dv = r->dv, rd = r->rot_dim;
	int nope = (int)r->c.qk_nope_dim, kvl = (int)r->c.kv_lora_rank;
	int ql = (int)r->c.q_lora_rank, dk = r->kv_dk;
	float *q = s->att;   /* [T][nh][dqk], until absorbed into s->q */
	float *ckv = s->k;   /* [T][kvl + rd]: the rows the cache keeps */
	const float *wkv = y->kv_b_f32; /* [nh][nope + dv][kvl] */
	if (ql) {
		op_linear_w(s->a, x, &y->q_a, y->q_a_b, T, ql, H);
		/* q_a_layernorm and kv_a_layernorm use RMSNorm's default eps
		 * (1e-6) in transformers, not rms_norm_eps */
		for (int t = 0; t < T; t++)
			op_rms_norm(s->a + (size_t)t * ql, s->a + (size_t)t * ql, y->q_a_norm,
				    ql, 1e-6);
		op_linear_w(q, s->a, &y->q_b, NULL, T, nh * dqk, ql);
	} else {
		op_linear_w(q, x, &y->wq, NULL, T, nh * dqk, H);
	}
	op_linear_w(ckv, x, &y->kv_a, y->kv_a_b, T, dk, H);
	for (int t = 0; t < T; t++) {
		float *c = ckv + (size_t)t * dk, *kr = c + kvl;
		float *qt = q + (size_t)t * nh * dqk;
		int64_t pos = token_pos(r, t);
		op_rms_norm(c, c, y->kv_a_norm, kvl, 1e-6);
		if (r->c.rope_interleave) {
			op_rope_deinterleave(kr, 1, rd, rd);
			for (int h = 0; h < nh; h++)
				op_rope_deinterleave(qt + (size_t)h * dqk + nope, 1, rd, rd);
		}
		op_rope(kr, 1, rd, rd, pos, r->inv_freq, r->attn_factor);
		for (int h = 0; h < nh; h++) {
			op_rope(qt + (size_t)h * dqk + nope, 1, rd, rd, pos, r->inv_freq,
				r->attn_factor);
			memcpy(s->q + ((size_t)t * nh + h) * dk + kvl, qt + (size_t)h * dqk + nope,
			       (size_t)rd * 4);
		}
	}
	for (int h = 0; h < nh; h++) /* q_nope W_UK_h into the first kvl */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, kvl, nope, 1.0f,
			    q + (size_t)h * dqk, nh * dqk, wkv + (size_t)h * (nope + dv) * kvl,
			    kvl, 0.0f, s->q + (size_t)h * dk, nh * dk);
	for (int g = 0, t0 = 0; g < r->nseg; t0 += r->seg[g].len, g++)
		attend_seg(r, y, &r->seg[g], t0, s); /* s->att: [T][nh][kvl] */
	for (int h = 0; h < nh; h++) /* the latent output times W_UV_h^T */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, dv, kvl, 1.0f,
			    s->att + (size_t)h * kvl, nh * kvl,
			    wkv + ((size_t)h * (nope + dv) + nope) * kvl, kvl, 0.0f,
			    s->b + (size_t)h * dv, nh * dv);
	op_linear_w(out, s->b, &y->wo, NULL, T, H, nh * dv); /* partial: row-parallel */
}

static void attention(struct rt *r, struct rt_layer *y, int T, const float *x,
		      float *out, struct scratch *s)
{
	int H = (int)r->c.hidden, nh = r->nh_l, nkv = r->nkv_l;
	int dqk = r->dqk, dv = r->dv;
	float *q = s->q, *k = s->k, *v = s->v;
	if (r->c.mla) {
		mla_attention(r, y, T, x, out, s);
		return;
	}
	{
		float *ys[3] = {q, k, v};
		const struct wmat *ws[3] = {&y->wq, &y->wk, &y->wv};
		const float *bs[3] = {y->bq, y->bk, y->bv};
		int ns[3] = {nh * dqk, nkv * dqk, nkv * dv};
		op_linear_many(3, ys, ws, bs, ns, x, T, H);
		for (int t = 0; t < T; t++) {
			float *qt = q + (size_t)t * nh * dqk, *kt = k + (size_t)t * nkv * dqk;
			if (y->q_norm) { /* Qwen3: per-head RMSNorm before RoPE */
				for (int h = 0; h < nh; h++)
					op_rms_norm(qt + (size_t)h * dqk, qt + (size_t)h * dqk,
						    y->q_norm, dqk, r->c.rms_eps);
				for (int h = 0; h < nkv; h++)
					op_rms_norm(kt + (size_t)h * dqk, kt + (size_t)h * dqk,
						    y->k_norm, dqk, r->c.rms_eps);
			}
			rope_token(r, t, qt, nh);
			rope_token(r, t, kt, nkv);
		}
	}
	/* each sequence appends to its blocks and attends over everything it
	 * has so far (run: one segment, slot 0) */
	for (int g = 0, t0 = 0; g < r->nseg; t0 += r->seg[g].len, g++)
		attend_seg(r, y, &r->seg[g], t0, s);
	op_linear_w(out, s->att, &y->wo, NULL, T, H, nh * dv); /* partial: row-parallel */
}

/* Route, dispatch to expert owners, compute, combine.  acc += partial. */
static void moe(struct rt *r, struct rt_layer *y, int T, const float *x,
		float *acc, struct scratch *s)
{
	int ly = r->first + (int)(y - r->L); /* the global layer */
	int H = (int)r->c.hidden, E = (int)r->c.experts, K = (int)r->c.top_k;
	int F = r->moe_ffn_l, ep = r->d.ep;
	int *idx = malloc((size_t)T * K * sizeof(int));
	float *w = malloc((size_t)T * K * sizeof(float)), *logits = malloc((size_t)E * 4);
	for (int t = 0; t < T; t++) {
		op_linear_w(logits, x + (size_t)t * H, &y->router, NULL, 1, E, H);
		if (!strcmp(r->c.scoring, "sigmoid"))
			op_router_sigmoid_group_topk(logits, y->router_bias, E, K,
						     (int)r->c.n_group,
						     (int)r->c.topk_group,
						     r->c.norm_topk_prob,
						     r->c.routed_scaling,
						     idx + t * K, w + t * K);
		else
			op_router_softmax_topk(logits, E, K, r->c.norm_topk_prob,
					       idx + t * K, w + t * K);
		if (r->route_idx && r->route_idx[ly])
			for (int j = 0; j < K; j++)
				r->route_idx[ly][(size_t)t * K + j] = idx[t * K + j];
		if (r->route_logits && r->route_logits[ly])
			memcpy(r->route_logits[ly] + (size_t)t * E, logits,
			       (size_t)E * 4);
	}
	if (ep == 1) {
		for (int t = 0; t < T; t++)
			for (int j = 0; j < K; j++) {
				int e = idx[t * K + j];
				mlp(1, H, F, x + (size_t)t * H, &y->e_gate[e], NULL,
				    &y->e_up[e], NULL, &y->e_down[e],
				    acc + (size_t)t * H, w + t * K + j, s->a, s->b, s->c);
			}
	} else {
		/* my tokens: t % ep == ep_rank; send (token, hidden) to owners */
		int *scnt = calloc((size_t)ep, sizeof(int)), *rcnt = calloc((size_t)ep, sizeof(int));
		int *sdis = calloc((size_t)ep, sizeof(int)), *rdis = calloc((size_t)ep, sizeof(int));
		int nsend = 0, nrecv = 0, *sidx, *ridx;
		float *sbuf, *rbuf, *obuf, *back;
		double t0;
		for (int t = r->ep_rank; t < T; t += ep)
			for (int j = 0; j < K; j++)
				scnt[layout_expert_owner(&r->c, &r->d, idx[t * K + j])]++;
		t0 = MPI_Wtime();
		MPI_Alltoall(scnt, 1, MPI_INT, rcnt, 1, MPI_INT, r->ep_comm);
		for (int e = 0; e < ep; e++) {
			sdis[e] = nsend;
			rdis[e] = nrecv;
			nsend += scnt[e];
			nrecv += rcnt[e];
		}
		sidx = malloc((size_t)(nsend + 1) * 2 * sizeof(int));
		ridx = malloc((size_t)(nrecv + 1) * 2 * sizeof(int));
		sbuf = malloc((size_t)(nsend + 1) * H * 4);
		rbuf = malloc((size_t)(nrecv + 1) * H * 4);
		obuf = calloc((size_t)(nrecv + 1) * H, 4);
		back = malloc((size_t)(nsend + 1) * H * 4);
		{
			int *fill = calloc((size_t)ep, sizeof(int));
			for (int t = r->ep_rank; t < T; t += ep)
				for (int j = 0; j < K; j++) {
					int e = idx[t * K + j];
					int o = layout_expert_owner(&r->c, &r->d, e);
					int at = sdis[o] + fill[o]++;
					sidx[2 * at] = t * K + j; /* where the answer goes */
					sidx[2 * at + 1] = e;
					memcpy(sbuf + (size_t)at * H, x + (size_t)t * H, (size_t)H * 4);
				}
			free(fill);
		}
		{
			int *s2 = malloc((size_t)ep * sizeof(int)), *r2 = malloc((size_t)ep * sizeof(int));
			int *d2 = malloc((size_t)ep * sizeof(int)), *e2 = malloc((size_t)ep * sizeof(int));
			for (int e = 0; e < ep; e++) {
				s2[e] = scnt[e] * 2; d2[e] = sdis[e] * 2;
				r2[e] = rcnt[e] * 2; e2[e] = rdis[e] * 2;
			}
			MPI_Alltoallv(sidx, s2, d2, MPI_INT, ridx, r2, e2, MPI_INT, r->ep_comm);
			for (int e = 0; e < ep; e++) {
				s2[e] = scnt[e] * H; d2[e] = sdis[e] * H;
				r2[e] = rcnt[e] * H; e2[e] = rdis[e] * H;
			}
			MPI_Alltoallv(sbuf, s2, d2, MPI_FLOAT, rbuf, r2, e2, MPI_FLOAT, r->ep_comm);
			rt_stat_add(r, RT_GROUP_EP, RT_OP_ALLTOALL,
				 (uint64_t)nsend * H * 4, MPI_Wtime() - t0);
			for (int i = 0; i < nrecv; i++) {
				int e = ridx[2 * i + 1];
				mlp(1, H, F, rbuf + (size_t)i * H, &y->e_gate[e], NULL,
				    &y->e_up[e], NULL, &y->e_down[e], obuf + (size_t)i * H,
				    NULL, s->a, s->b, s->c);
			}
			t0 = MPI_Wtime();
			/* answers travel back along the same routes */
			MPI_Alltoallv(obuf, r2, e2, MPI_FLOAT, back, s2, d2, MPI_FLOAT, r->ep_comm);
			rt_stat_add(r, RT_GROUP_EP, RT_OP_ALLTOALL,
				 (uint64_t)nrecv * H * 4, MPI_Wtime() - t0);
			free(s2); free(r2); free(d2); free(e2);
		}
		/* combine my tokens, then gather everyone's over EP */
		{
			float *mine = calloc((size_t)T * H, 4);
			for (int i = 0; i < nsend; i++) {
				int slot = sidx[2 * i], t = slot / K;
				for (int j = 0; j < H; j++)
					mine[(size_t)t * H + j] += w[slot] * back[(size_t)i * H + j];
			}
			t0 = MPI_Wtime();
			/* tokens are disjoint across EP ranks: a sum gathers them */
			MPI_Allreduce(MPI_IN_PLACE, mine, T * H, MPI_FLOAT, MPI_SUM, r->ep_comm);
			rt_stat_add(r, RT_GROUP_EP, RT_OP_ALLGATHER, (uint64_t)T * H * 4,
				 MPI_Wtime() - t0);
			for (size_t i = 0; i < (size_t)T * H; i++)
				acc[i] += mine[i];
			free(mine);
		}
		free(scnt); free(rcnt); free(sdis); free(rdis);
		free(sidx); free(ridx); free(sbuf); free(rbuf); free(obuf); free(back);
	}
	if (y->sh_gate.p) { /* shared expert(s) */
		float *tmp = calloc((size_t)T * H, 4);
		mlp(T, H, r->shared_l, x, &y->sh_gate, NULL, &y->sh_up, NULL,
		    &y->sh_down, tmp, NULL, s->a, s->b, s->c);
		if (y->sh_gate_w.p) {
			/* Qwen2-MoE: sigmoid(x w) gates the shared expert; the
			 * gate is the same on every TP rank, so it can scale the
			 * partial sums before the all-reduce */
			for (int t = 0; t < T; t++) {
				float gl;
				op_linear_w(&gl, x + (size_t)t * H, &y->sh_gate_w, NULL, 1, 1, H);
				op_sigmoid(&gl, 1);
				for (int j = 0; j < H; j++)
					acc[(size_t)t * H + j] += gl * tmp[(size_t)t * H + j];
			}
		} else {
			for (size_t i = 0; i < (size_t)T * H; i++)
				acc[i] += tmp[i];
		}
		free(tmp);
	}
	free(idx);
	free(w);
	free(logits);
}

/* The forward pass of T tokens laid out as r->seg describes. */
static int forward(struct rt *r, const int64_t *tokens, int T, float *logits,
		   float **layer_out, struct d0_err *err)
{
	int H = (int)r->c.hidden, V = (int)r->c.vocab;
	int maxd = r->dqk > r->dv ? r->dqk : r->dv;
	if (r->kv_dk > maxd) /* MLA: the absorbed query, latent + rope */
		maxd = r->kv_dk;
	size_t big = (size_t)T * (size_t)(r->ffn_l + r->moe_ffn_l + r->shared_l +
					  (int)r->c.kv_lora_rank + (int)r->c.q_lora_rank +
					  r->nh_l * (int)(r->c.qk_nope_dim + r->c.v_head_dim) + H);
	struct scratch s;
	float *h = calloc((size_t)T * H, 4), *xn = malloc((size_t)T * H * 4);
	float *part = malloc((size_t)T * H * 4);
	MPI_Status st;
	int prev = r->pp_rank > 0 ? layout_rank(&r->d, r->pp_rank - 1, r->ep_rank, r->tp_rank) : -1;
	int next = r->pp_rank < r->d.pp - 1 ? layout_rank(&r->d, r->pp_rank + 1, r->ep_rank, r->tp_rank) : -1;

	int64_t longest = 0;
	for (int g = 0; g < r->nseg; g++) {
		const struct rt_seg *sg = &r->seg[g];
		if (sg->len < 0 || sg->pos0 < 0)
			return d0_errf(err, "segment %d: %d tokens at position %lld",
				       g, sg->len, (long long)sg->pos0);
		if (!sg->table && (sg->slot < 0 || sg->slot >= r->slots))
			return d0_errf(err, "sequence slot %d outside the %d the KV "
				       "cache holds", sg->slot, r->slots);
		if (sg->table) {
			int64_t need = (sg->pos0 + sg->len + r->kv_bt - 1) / r->kv_bt;
			if (sg->ntable < need)
				return d0_errf(err, "segment %d: a block table of %d "
					       "blocks for %lld positions (blocks of "
					       "%d tokens)", g, sg->ntable,
					       (long long)(sg->pos0 + sg->len), r->kv_bt);
			for (int i = 0; i < need; i++)
				if (sg->table[i] < 0 || sg->table[i] >= r->kv_blocks)
					return d0_errf(err, "segment %d: block %d outside "
						       "the %d of the KV cache", g,
						       sg->table[i], r->kv_blocks);
		}
		if (sg->pos0 + sg->len > r->max_ctx)
			return d0_errf(err, "context of %lld tokens exceeds the %lld "
				       "allocated", (long long)(sg->pos0 + sg->len),
				       (long long)r->max_ctx);
		if (sg->pos0 + sg->len > longest)
			longest = sg->pos0 + sg->len;
	}
	/* dynamic NTK: transformers recomputes the frequencies whenever the
	 * sequence outgrows max_position_embeddings (keys already cached keep
	 * their rotation), so do the same for positions up to pos + T (a
	 * batch of several sequences uses its longest) */
	if (!strcmp(r->c.rope.type, "dynamic"))
		op_rope_inv_freq(&r->c, r->rot_dim, longest, r->inv_freq,
				 &r->attn_factor);
	s.a = malloc(big * 4 + 64);
	s.b = malloc(big * 4 + 64);
	s.c = malloc((size_t)T * H * 4 + 64);
	s.q = malloc((size_t)T * r->nh_l * maxd * 4 + 64);
	s.k = malloc((size_t)T * r->nkv_l * maxd * 4 + 64);
	s.v = malloc((size_t)T * r->nkv_l * maxd * 4 + 64);
	s.att = malloc((size_t)T * r->nh_l * maxd * 4 + 64);
	s.tmp = malloc((size_t)T * (r->c.kv_lora_rank + r->rot_dim + 1) * 4 + 64);

	if (r->pp_rank == 0) { /* vocab-parallel embedding */
		int64_t lo = (int64_t)r->tp_rank * r->vocab_l;
		for (int t = 0; t < T; t++)
			if (tokens[t] >= lo && tokens[t] < lo + r->vocab_l)
				op_embedding_w(h + (size_t)t * H, &r->embed, tokens[t] - lo, H);
		rt_allreduce(r, h, T * H, r->tp_comm, RT_GROUP_TP);
		image_splice(r, tokens, h);
	} else {
		double t0 = MPI_Wtime();
		MPI_Recv(h, T * H, MPI_FLOAT, prev, 7, MPI_COMM_WORLD, &st);
		rt_stat_add(r, RT_GROUP_PP, RT_OP_SENDRECV, (uint64_t)T * H * 4, MPI_Wtime() - t0);
	}
	for (int i = 0; i < r->nl; i++) {
		struct rt_layer *y = &r->L[i];
		for (int t = 0; t < T; t++)
			op_rms_norm(xn + (size_t)t * H, h + (size_t)t * H, y->in_norm, H,
				    r->c.rms_eps);
		attention(r, y, T, xn, part, &s);
		rt_allreduce(r, part, T * H, r->tp_comm, RT_GROUP_TP);
		for (size_t j = 0; j < (size_t)T * H; j++)
			h[j] += part[j] + (y->bo ? y->bo[j % H] : 0.0f);
		for (int t = 0; t < T; t++)
			op_rms_norm(xn + (size_t)t * H, h + (size_t)t * H, y->post_norm, H,
				    r->c.rms_eps);
		memset(part, 0, (size_t)T * H * 4);
		if (y->moe)
			moe(r, y, T, xn, part, &s);
		else
			mlp(T, H, r->ffn_l, xn, &y->gate, y->gate_b, &y->up, y->up_b,
			    &y->down, part, NULL, s.a, s.b, s.c);
		rt_allreduce(r, part, T * H, r->tp_comm, RT_GROUP_TP);
		for (size_t j = 0; j < (size_t)T * H; j++)
			h[j] += part[j] + (y->down_b ? y->down_b[j % H] : 0.0f);
		if (layer_out && layer_out[r->first + i])
			memcpy(layer_out[r->first + i], h, (size_t)T * H * 4);
	}
	if (next >= 0) {
		double t0 = MPI_Wtime();
		MPI_Send(h, T * H, MPI_FLOAT, next, 7, MPI_COMM_WORLD);
		rt_stat_add(r, RT_GROUP_PP, RT_OP_SENDRECV, (uint64_t)T * H * 4, MPI_Wtime() - t0);
	} else {
		/* final norm, vocab-parallel lm_head, gather the vocab slices;
		 * only for the rows whose logits are wanted (a server's prefill
		 * needs the last one: the lm_head is the largest product) */
		const struct wmat *head = r->c.tie_embeddings ? &r->embed : &r->lm_head;
		int nw = r->lrows ? r->nlrows : T;
		float *loc = malloc((size_t)(nw ? nw : 1) * r->vocab_l * 4), *all = NULL;
		double t0;
		for (int i = 0; i < nw; i++) {
			int t = r->lrows ? r->lrows[i] : i;
			op_rms_norm(xn + (size_t)i * H, h + (size_t)t * H, r->final_norm, H,
				    r->c.rms_eps);
		}
		if (nw)
			op_linear_w(loc, xn, head, NULL, nw, r->vocab_l, H);
		all = malloc((size_t)(nw ? nw : 1) * V * 4);
		t0 = MPI_Wtime();
		MPI_Allgather(loc, nw * r->vocab_l, MPI_FLOAT, all, nw * r->vocab_l,
			      MPI_FLOAT, r->tp_comm);
		rt_stat_add(r, RT_GROUP_TP, RT_OP_ALLGATHER, (uint64_t)nw * V * 4,
			 MPI_Wtime() - t0);
		if (logits) /* all is [tp][nw][V/tp]: reorder to [nw][V] */
			for (int p = 0; p < r->d.tp; p++)
				for (int t = 0; t < nw; t++)
					memcpy(logits + (size_t)t * V + (size_t)p * r->vocab_l,
					       all + ((size_t)p * nw + t) * r->vocab_l,
					       (size_t)r->vocab_l * 4);
		free(loc);
		free(all);
	}
	free(h); free(xn); free(part);
	free(s.a); free(s.b); free(s.c); free(s.q); free(s.k); free(s.v);
	free(s.att); free(s.tmp);
	return 0;
}

int rt_forward(struct rt *r, const int64_t *tokens, int T, float *logits,
	       float **layer_out, struct d0_err *err)
{
	struct rt_seg one = {.slot = 0, .pos0 = r->pos, .len = T};
	int rc;
	r->seg = &one;
	r->nseg = 1;
	rc = forward(r, tokens, T, logits, layer_out, err);
	r->seg = NULL;
	r->nseg = 0;
	if (rc == 0)
		r->pos += T;
	return rc;
}

int rt_forward_seg(struct rt *r, const int64_t *tokens, const struct rt_seg *sg,
		   float *logits, float **layer_out, struct d0_err *err)
{
	struct rt_seg one = *sg;
	int rc;
	one.slot = 0;
	one.pos0 = r->pos;
	one.table = NULL;
	one.ntable = 0;
	r->seg = &one;
	r->nseg = 1;
	rc = forward(r, tokens, one.len, logits, layer_out, err);
	r->seg = NULL;
	r->nseg = 0;
	if (rc == 0)
		r->pos += one.len;
	return rc;
}

int rt_forward_last(struct rt *r, const int64_t *tokens, int T, float *logits,
		    struct d0_err *err)
{
	struct rt_seg one = {.slot = 0, .pos0 = r->pos, .len = T};
	int last = T - 1, rc;
	if (T <= 0)
		return d0_errf(err, "an empty batch");
	r->seg = &one;
	r->nseg = 1;
	r->lrows = &last;
	r->nlrows = 1;
	rc = forward(r, tokens, T, logits, NULL, err);
	r->seg = NULL;
	r->nseg = 0;
	r->lrows = NULL;
	if (rc == 0)
		r->pos += T;
	return rc;
}

int rt_forward_rows(struct rt *r, const int64_t *tokens,
		    const struct rt_seg *segs, int nseg, const int *rows,
		    int nrows, float *logits, struct d0_err *err)
{
	int T = 0, rc;
	for (int g = 0; g < nseg; g++)
		T += segs[g].len;
	if (T <= 0)
		return d0_errf(err, "an empty batch");
	for (int i = 0; rows && i < nrows; i++)
		if (rows[i] < 0 || rows[i] >= T || (i && rows[i] <= rows[i - 1]))
			return d0_errf(err, "logit row %d: outside the batch of %d "
				       "tokens or not increasing", rows[i], T);
	r->seg = segs;
	r->nseg = nseg;
	r->lrows = rows;
	r->nlrows = nrows;
	rc = forward(r, tokens, T, logits, NULL, err);
	r->seg = NULL;
	r->nseg = 0;
	r->lrows = NULL;
	return rc;
}

int rt_forward_batch(struct rt *r, const int64_t *tokens,
		     const struct rt_seg *segs, int nseg, float *logits,
		     struct d0_err *err)
{
	return rt_forward_rows(r, tokens, segs, nseg, NULL, 0, logits, err);
}

int rt_slots(const struct rt *r) { return r->slots; }
int rt_kv_blocks(const struct rt *r) { return r->kv_blocks; }
int rt_block_tokens(const struct rt *r) { return r->kv_bt; }

uint64_t rt_kv_block_bytes(const struct model_config *c,
			   const struct layout_dims *d, int block_tokens)
{
	return rt_kv_seq_bytes(c, d, block_tokens);
}
int64_t rt_max_ctx(const struct rt *r) { return r->max_ctx; }

uint64_t rt_kv_seq_bytes(const struct model_config *c,
			 const struct layout_dims *d, int64_t max_ctx)
{
	/* the same per-rank sizes rt_open uses, on the stage with most layers */
	int64_t first, count, per;
	layout_stage_layers(c->layers, d->pp, 0, &first, &count);
	if (c->mla) /* the latent + rope key, on every tp rank */
		per = c->kv_lora_rank + c->qk_rope_dim;
	else
		per = (c->kv_heads >= d->tp ? c->kv_heads / d->tp : 1) * 2 * c->head_dim;
	return (uint64_t)count * (uint64_t)max_ctx * (uint64_t)per * 4;
}

int rt_last_stage_root(const struct rt *r)
{
	return layout_rank(&r->d, r->d.pp - 1, 0, 0);
}

int rt_stage_root(const struct rt *r, int stage)
{
	return layout_rank(&r->d, stage, 0, 0);
}

int rt_first_layer(const struct rt *r, int *count)
{
	*count = r->nl;
	return r->first;
}

int rt_is_stage_root(const struct rt *r)
{
	return r->tp_rank == 0 && r->ep_rank == 0;
}

void rt_record_routes(struct rt *r, int32_t **idx, float **logits)
{
	r->route_idx = idx;
	r->route_logits = logits;
}

void rt_reset(struct rt *r)
{
	/* The cached keys/values past pos are never read: the next forward
	 * overwrites from 0. */
	r->pos = 0;
}

void rt_close(struct rt *r)
{
	if (!r)
		return;
	for (int i = 0; r->L && i < r->nl; i++) {
		struct rt_layer *y = &r->L[i];
		float **fs[] = {&y->in_norm, &y->post_norm, &y->bq, &y->bk,
				&y->bv, &y->bo, &y->q_norm, &y->k_norm,
				&y->q_a_norm, &y->kv_a_norm, &y->q_a_b, &y->kv_a_b,
				&y->gate_b, &y->up_b, &y->down_b,
				&y->router_bias, &y->kc, &y->vc, &y->kv_b_f32};
		struct wmat *ws[] = {&y->wq, &y->wk, &y->wv, &y->wo, &y->q_a,
				     &y->q_b, &y->kv_a, &y->kv_b, &y->gate,
				     &y->up, &y->down, &y->router, &y->sh_gate,
				     &y->sh_up, &y->sh_down, &y->sh_gate_w};
		for (size_t k = 0; k < sizeof fs / sizeof *fs; k++)
			rt_free(r, *fs[k]);
		for (size_t k = 0; k < sizeof ws / sizeof *ws; k++) {
			rt_free(r, ws[k]->p);
			rt_free(r, ws[k]->sub_row);
		}
		for (int e = 0; y->e_gate && e < r->c.experts; e++) {
			rt_free(r, y->e_gate[e].p);
			rt_free(r, y->e_up[e].p);
			rt_free(r, y->e_down[e].p);
			rt_free(r, y->e_gate[e].sub_row);
			rt_free(r, y->e_up[e].sub_row);
			rt_free(r, y->e_down[e].sub_row);
		}
		free(y->e_gate);
		free(y->e_up);
		free(y->e_down);
	}
	free(r->L);
	rt_free(r, r->embed.p);
	rt_free(r, r->lm_head.p);
	rt_free(r, r->embed.sub_row);
	rt_free(r, r->lm_head.sub_row);
	rt_free(r, r->final_norm);
	free(r->inv_freq);
	if (r->tp_comm != MPI_COMM_NULL && r->tp_comm)
		MPI_Comm_free(&r->tp_comm);
	if (r->ep_comm != MPI_COMM_NULL && r->ep_comm)
		MPI_Comm_free(&r->ep_comm);
	if (r->rank_fd >= 0)
		close(r->rank_fd);
	if (r->rank_st.path)
		st_free(&r->rank_st);
	if (r->ck.dir)
		ckpt_close(&r->ck);
	model_config_free(&r->c);
	while (r->chunks) {
		struct rt_chunk *c = r->chunks;
		r->chunks = c->next;
		free(c->base);
		free(c);
	}
	free(r);
}

/* Verify the groups with a small collective each: comm.groups. */
int rt_check_groups(struct rt *r, char *detail, size_t n)
{
	int ok = 1, v, sz;
	v = 1;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, r->tp_comm);
	MPI_Comm_size(r->tp_comm, &sz);
	ok &= v == sz && sz == r->d.tp;
	v = 1;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, r->ep_comm);
	MPI_Comm_size(r->ep_comm, &sz);
	ok &= v == sz && sz == r->d.ep;
	v = ok;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	snprintf(detail, n, "%d ranks: %d TP groups of %d, %d EP groups of %d, "
		 "%d pipeline stages%s", r->world, r->world / r->d.tp, r->d.tp,
		 r->world / r->d.ep, r->d.ep, r->d.pp,
		 v ? ", each verified with an all-reduce" : ": a group all-reduce "
							     "gave the wrong sum");
	(void)errno;
	return v ? 0 : -1;
}
