/*
 * validate_layer.c - `validate --local`: a float64 reference that scales
 * with the model.
 *
 * The whole-model reference (ref.c alone) costs the full checkpoint in one
 * process and lets errors accumulate, so a 671B model is hours of
 * single-core float64 and a late layer's error is every earlier layer's
 * too.  Here each layer is recomputed by ref.c from the run's OWN input of
 * that layer (the run's dump of the layer before; the embedding rows of
 * the prompt for layer 0), so:
 *   - each layer's error is measured in isolation, nothing accumulates;
 *   - memory is a chunk of weights (--mem, 256 MiB by default): ref.c
 *     reads every matrix a block of rows at a time, computes the experts
 *     the tokens are routed to one at a time, and the lm_head's logits
 *     are folded into the e2e statistics block by block; the embedding
 *     is read by the prompt's rows;
 *   - layers are independent: under mpirun each rank computes every
 *     size-th layer and rank 0 gathers the figures (MPI_Reduce).
 * MoE routing flips: where a router's top-k choice could change within the
 * rounding of the compute dtype (a chosen expert's score minus its
 * spread below an unchosen one's plus its spread; a logit's spread is 4
 * standard deviations of its weights' rounding, 4 eps/sqrt(3) ||w.x||),
 * the run may
 * legitimately pick another expert: that (layer, token) row is reported
 * as a flip with its margin and left out of the layer's error, and the
 * check still fails when flips exceed --max-flips of the routed rows.
 * Where the dumps hold the run's routing (route_follow.h), the reference
 * also follows a choice the run made otherwise that the test above did
 * not foresee (the run's own router input rounded too: prefill's x in
 * bf16) when it is the top-k of the run's router logits within --max-rel
 * of float64's: a flip as well, its row compared like for like; any other
 * choice fails the check.
 */
#include "engine.h"
#include "logit_fold.h"
#include "ref_hooks.h"
#include "route_follow.h"
#include "validate_layer.h"

#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FLIP_LINES 20 /* printed; the rest are counted */

struct flip {
	double layer, token, margin; /* doubles: gathered as one MPI type */
};

struct vl {
	const struct vl_opts *o;
	struct model_config *c; /* ref.c fills it before the first hook */
	int rank, size, T;
	double eps;
	double *max_abs, *max_rel, *max_rel_all, *flips, *routed; /* [layers] */
	unsigned char *flipped; /* [T], the layer being computed */
	struct flip *fl;
	size_t nfl;
	float *dump; /* [T][H] */
	struct rfollow rf; /* the run's routing, where the dumps hold it */
	double unexpl;     /* rows the run routed otherwise, unexplained */
	struct d0_err err;
};

/* ------------------------------------------------------------- reading */

/* n elements of tensor `name` from element offset off, as double. */
static int read_span(const char *dir, const char *name, uint64_t off,
		     size_t n, double *out, struct d0_err *err)
{
	struct ckpt ck;
	int rc = -1;
	if (ckpt_open(dir, &ck, err) < 0)
		return -1;
	for (size_t k = 0; k < ck.nshards && rc < 0; k++) {
		struct st_file f;
		const struct st_tensor *t;
		if (st_open(ck.shards[k].path, &f, err) < 0)
			break;
		t = st_find(&f, name);
		if (t) {
			size_t dsz = dtype_size(t->dtype);
			unsigned char *raw = malloc(n * dsz + 1);
			float *fv = malloc(n * 4 + 4);
			int fd = open(ck.shards[k].path, O_RDONLY | O_CLOEXEC);
			if (off + n > st_numel(t))
				d0_errf(err, "%s: tensor '%s' has %llu elements, "
					"wanted %llu..%llu", ck.shards[k].path,
					name, (unsigned long long)st_numel(t),
					(unsigned long long)off,
					(unsigned long long)(off + n));
			else if (fd < 0 ||
				 pread_full(fd, raw, n * dsz,
					    f.data_off + t->begin + off * dsz) < 0 ||
				 dtype_convert(t->dtype, raw, DT_F32, fv, n) < 0)
				d0_errf(err, "%s: cannot read '%s'",
					ck.shards[k].path, name);
			else {
				for (size_t i = 0; i < n; i++)
					out[i] = fv[i];
				rc = 0;
			}
			if (fd >= 0)
				close(fd);
			free(raw);
			free(fv);
			if (rc < 0) {
				st_free(&f);
				break;
			}
		}
		st_free(&f);
		if (!t && k + 1 == ck.nshards)
			d0_errf(err, "%s: no tensor '%s'", dir, name);
	}
	ckpt_close(&ck);
	return rc;
}

/* The run's dump: tensor `name` F32 [rows][cols] of file path. */
static int read_dump(const char *path, const char *name, int rows, int cols,
		     float *out, struct d0_err *err)
{
	struct st_file f;
	const struct st_tensor *t;
	int fd = -1, rc = -1;
	if (st_open(path, &f, err) < 0)
		return -1;
	t = st_find(&f, name);
	if (!t || t->dtype != DT_F32 || t->ndim != 2 ||
	    t->shape[0] != (uint64_t)rows || t->shape[1] != (uint64_t)cols)
		d0_errf(err, "%s: expected an F32 tensor '%s' of shape [%d, %d]",
			path, name, rows, cols);
	else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
		 pread_full(fd, out, (size_t)rows * cols * 4,
			    f.data_off + t->begin) < 0)
		d0_errf(err, "%s: read failed", path);
	else
		rc = 0;
	if (fd >= 0)
		close(fd);
	st_free(&f);
	return rc;
}

static int read_layer_dump(struct vl *v, int l, struct d0_err *err)
{
	char name[64], *p;
	int rc;
	if (!v->dump) /* ref.c has read the config by now */
		v->dump = malloc((size_t)v->T * v->c->hidden * 4 + 4);
	snprintf(name, sizeof name, "layer-%03d.safetensors", l);
	p = path_join(v->o->layers_dir, name);
	rc = read_dump(p, "hidden", v->T, (int)v->c->hidden, v->dump, err);
	free(p);
	return rc;
}

/* --------------------------------------------------------------- hooks */

static int hook_skip(void *ctx, int l)
{
	const struct vl *v = ctx;
	return l % v->size != v->rank;
}

/* Layer l's input: the prompt's embedding rows, or the run's layer l-1. */
static int hook_layer_in(void *ctx, int l, double *h, struct d0_err *err)
{
	struct vl *v = ctx;
	int H = (int)v->c->hidden;
	memset(v->flipped, 0, (size_t)v->T);
	if (l == 0) {
		for (int t = 0; t < v->T; t++)
			if (read_span(v->o->dir, "model.embed_tokens.weight",
				      (uint64_t)v->o->tokens[t] * (uint64_t)H,
				      (size_t)H, h + (size_t)t * H, err) < 0)
				return -1;
		return 0;
	}
	if (read_layer_dump(v, l - 1, err) < 0)
		return -1;
	for (size_t i = 0; i < (size_t)v->T * H; i++)
		h[i] = v->dump[i];
	return 0;
}

/* Layer l's error over the rows whose routing cannot have flipped. */
static void hook_layer_out(void *ctx, int l, const double *h)
{
	struct vl *v = ctx;
	int H = (int)v->c->hidden;
	double d = 0, dall = 0, s = 0, sall = 0;
	if (read_layer_dump(v, l, &v->err) < 0) {
		v->max_rel[l] = v->max_rel_all[l] = v->max_abs[l] = INFINITY;
		return;
	}
	for (int t = 0; t < v->T; t++)
		for (int i = 0; i < H; i++) {
			size_t k = (size_t)t * H + i;
			double e = fabs((double)v->dump[k] - h[k]);
			if (isnan(e))
				e = INFINITY;
			dall = fmax(dall, e);
			sall = fmax(sall, fabs(h[k]));
			if (!v->flipped[t]) {
				d = fmax(d, e);
				s = fmax(s, fabs(h[k]));
			}
		}
	v->max_abs[l] = d;
	v->max_rel[l] = s > 0 ? d / s : d;
	v->max_rel_all[l] = sall > 0 ? dall / sall : dall;
}

/* Indices of the k largest of x[0..n) (ties: lower index), as ref.c. */
static void top_idx(const double *x, int n, int k, int *idx)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int q = 0; q < j; q++)
				taken |= idx[q] == i;
			if (!taken && (best < 0 || x[i] > x[best]))
				best = i;
		}
		idx[j] = best;
	}
}

/*
 * Can the top-k of s (each within +-b) change?  1 if some chosen score
 * minus its bound falls below some unchosen score plus its bound; margin
 * gets the k-th minus the (k+1)-th score.  mask: only these compete.
 */
static int can_flip(const double *s, const double *b, const unsigned char *mask,
		    int n, int k, double *margin)
{
	double lo = INFINITY, hi = -INFINITY, kth = INFINITY, next = -INFINITY;
	int *idx = malloc((size_t)n * sizeof *idx), m = 0;
	double *v = malloc((size_t)n * sizeof *v);
	for (int i = 0; i < n; i++)
		v[i] = mask && !mask[i] ? -INFINITY : s[i];
	for (int i = 0; i < n; i++)
		m += v[i] > -INFINITY;
	if (k >= m) {
		free(idx);
		free(v);
		*margin = INFINITY;
		return 0;
	}
	top_idx(v, n, k + 1, idx);
	for (int j = 0; j < k; j++) {
		lo = fmin(lo, s[idx[j]] - b[idx[j]]);
		kth = fmin(kth, s[idx[j]]);
	}
	for (int i = 0; i < n; i++) {
		int chosen = 0;
		for (int j = 0; j < k; j++)
			chosen |= idx[j] == i;
		if (!chosen && v[i] > -INFINITY) {
			hi = fmax(hi, s[i] + b[i]);
			next = fmax(next, s[i]);
		}
	}
	*margin = kth - next;
	free(idx);
	free(v);
	return lo < hi;
}

/* DeepSeek's grouped sigmoid router: groups first, then experts. */
static int can_flip_grouped(const struct model_config *c, const double *ch,
			    const double *d, double *margin)
{
	int E = (int)c->experts, G = (int)c->n_group, per = E / G;
	double *gs = malloc((size_t)G * 8), *gb = malloc((size_t)G * 8);
	unsigned char *keep = calloc((size_t)E, 1);
	int *gi = malloc((size_t)G * sizeof *gi), flip = 0;
	double gm = INFINITY, em;
	for (int g = 0; g < G; g++) {
		int two[2];
		int k2 = per >= 2 ? 2 : 1;
		top_idx(ch + g * per, per, k2, two);
		gs[g] = gb[g] = 0;
		for (int j = 0; j < k2; j++) {
			gs[g] += ch[g * per + two[j]];
			gb[g] += d[g * per + two[j]];
		}
		gb[g] *= 2; /* the group's top two could be others, as close */
	}
	if (c->topk_group < G)
		flip = can_flip(gs, gb, NULL, G, (int)c->topk_group, &gm);
	top_idx(gs, G, (int)c->topk_group, gi);
	for (int t = 0; t < c->topk_group; t++)
		for (int e = gi[t] * per; e < (gi[t] + 1) * per; e++)
			keep[e] = 1;
	flip |= can_flip(ch, d, keep, E, (int)c->top_k, &em);
	*margin = fmin(gm, em);
	free(gs);
	free(gb);
	free(keep);
	free(gi);
	return flip;
}

static void hook_route(void *ctx, int l, int t, const double *bias,
		       const double *logits, const double *spread_sq)
{
	struct vl *v = ctx;
	const struct model_config *c = v->c;
	int E = (int)c->experts, flip;
	double *b = malloc((size_t)E * 8), margin;
	/* rounding spread of each logit: the weights rounded to the dtype
	 * are independent errors within +-eps|w|, sd eps/sqrt(3) |w|; 4 sd
	 * of their sum (ref.c gives sum_j (w[e][j] x[j])^2) */
	for (int e = 0; e < E; e++)
		b[e] = 4.0 * v->eps / sqrt(3.0) * sqrt(spread_sq[e]);
	if (!strcmp(c->scoring, "sigmoid") && c->n_group > 0) {
		double *ch = malloc((size_t)E * 8);
		for (int e = 0; e < E; e++) {
			ch[e] = 1.0 / (1.0 + exp(-logits[e])) + (bias ? bias[e] : 0);
			b[e] *= 0.25; /* sigmoid's slope is at most 1/4 */
		}
		flip = can_flip_grouped(c, ch, b, &margin);
		free(ch);
	} else { /* softmax is monotone: the top-k of the logits */
		flip = can_flip(logits, b, NULL, E, (int)c->top_k, &margin);
	}
	v->routed[l] += 1;
	if (flip) {
		v->flipped[t] = 1;
		v->flips[l] += 1;
		v->fl = realloc(v->fl, (v->nfl + 1) * sizeof *v->fl);
		v->fl[v->nfl++] = (struct flip){l, t, margin};
	}
	free(b);
}

/* A choice the run made otherwise, explained: followed, and a flip
 * (counted once: the spread test may have flagged the row already). */
static int hook_follow(void *ctx, int l, int t, const double *bias,
		       const double *logits, int *idx)
{
	struct vl *v = ctx;
	int n0 = v->rf.nfl, r = rfollow_route(&v->rf, l, t, bias, logits, idx);
	if (v->rf.nfl > n0 && !v->rf.fl[n0].explained) {
		char line[320];
		rfollow_line(&v->rf, &v->rf.fl[n0], line, sizeof line);
		fprintf(stderr, "day0-engine: rank %d: %s\n", v->rank, line);
	}
	if (r && !v->flipped[t]) {
		v->flips[l] += 1;
		v->fl = realloc(v->fl, (v->nfl + 1) * sizeof *v->fl);
		v->fl[v->nfl++] = (struct flip){l, t, v->rf.fl[n0].margin};
	}
	return r;
}

/* ---------------------------------------------------------- gathering */

/* Every rank's figures on rank 0: maxima, sums, the flip list. */
static void gather(struct vl *v, int L, struct flip **all, int *nall)
{
	int n = (int)v->nfl * 3, *counts = NULL, *displs = NULL, total = 0;
	double *mine[] = {v->max_abs, v->max_rel, v->max_rel_all};
	*all = NULL;
	*nall = (int)v->nfl;
	if (v->size == 1) {
		*all = v->fl;
		v->fl = NULL;
		return;
	}
	for (int i = 0; i < 3; i++)
		MPI_Reduce(v->rank ? mine[i] : MPI_IN_PLACE, mine[i], L,
			   MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(v->rank ? v->flips : MPI_IN_PLACE, v->flips, L, MPI_DOUBLE,
		   MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(v->rank ? v->routed : MPI_IN_PLACE, v->routed, L,
		   MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(v->rank ? &v->unexpl : MPI_IN_PLACE, &v->unexpl, 1,
		   MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	if (v->rank == 0) {
		counts = malloc((size_t)v->size * sizeof *counts);
		displs = malloc((size_t)v->size * sizeof *displs);
	}
	MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (v->rank == 0)
		for (int r = 0; r < v->size; r++) {
			displs[r] = total;
			total += counts[r];
		}
	if (v->rank == 0)
		*all = malloc((size_t)total * sizeof(double) + 8);
	MPI_Gatherv(v->fl, n, MPI_DOUBLE, *all, counts, displs, MPI_DOUBLE, 0,
		    MPI_COMM_WORLD);
	*nall = total / 3;
	free(counts);
	free(displs);
}

/* ---------------------------------------------------------------- e2e */

struct e2e {
	double max_abs, max_rel, kl_max, top1;
};

/* The final norm and lm_head in float64 on the run's last layer, folded
 * against the run's logits a block of the vocabulary at a time (ref.c's
 * head, logit_fold.c): memory is the chunk, whatever the vocabulary. */
static int e2e_check(struct vl *v, struct e2e *r, struct d0_err *err)
{
	const struct model_config *c = v->c;
	int T = v->T, H = (int)c->hidden;
	struct lfold f;
	struct lfold_result res;
	double *h;
	int rc;
	memset(r, 0, sizeof *r);
	if (read_layer_dump(v, (int)c->layers - 1, err) < 0)
		return -1;
	if (lfold_open(&f, v->o->logits, T, (int)c->vocab, NULL, err) < 0) {
		lfold_close(&f);
		return -1;
	}
	h = malloc((size_t)T * H * 8 + 8);
	for (size_t i = 0; i < (size_t)T * H; i++)
		h[i] = v->dump[i];
	rc = ref_head_logits(v->o->dir, c, h, T, v->o->mem, lfold_block, &f, err);
	if (rc == 0) {
		lfold_finish(&f, &res);
		r->max_abs = res.max_abs;
		r->max_rel = res.max_rel;
		r->kl_max = res.kl_max;
		r->top1 = T ? 100.0 * res.top1 / T : 0;
		free(res.kl);
	}
	free(h);
	lfold_close(&f);
	return rc;
}

/* ------------------------------------------------------------- report */

static int report(struct vl *v, const struct flip *fl, int nfl)
{
	const struct vl_opts *o = v->o;
	int L = (int)v->c->layers, bad = 0, text = !o->json && !events_enabled();
	double flips = 0, routed = 0, worst = 0;
	json_t *doc = json_object(), *a = json_array(), *fa = json_array();
	char d[400];
	if (text)
		printf("%-34s %12s %12s %8s\n", "layer-local (run's input, float64)",
		       "max abs", "max rel", "flips");
	for (int l = 0; l < L; l++) {
		char name[32];
		int fail = !(v->max_rel[l] <= o->max_rel);
		bad |= fail;
		flips += v->flips[l];
		routed += v->routed[l];
		worst = fmax(worst, v->max_rel[l]);
		if (text)
			printf("  layer %-26d %12.3g %12.3g %8.0f%s\n", l,
			       v->max_abs[l], v->max_rel[l], v->flips[l],
			       fail ? "  FAIL" : "");
		snprintf(name, sizeof name, "layer.%d", l);
		events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f}", "level",
						  "layer", "name", name, "max_abs",
						  v->max_abs[l], "max_rel",
						  v->max_rel[l]));
		json_array_append_new(
			a, json_pack("{s:i, s:f, s:f, s:f, s:i}", "layer", l,
				     "max_abs", v->max_abs[l], "max_rel",
				     v->max_rel[l], "max_rel_with_flips",
				     v->max_rel_all[l], "flips",
				     (int)v->flips[l]));
	}
	for (int i = 0; i < nfl; i++) {
		if (text && i < MAX_FLIP_LINES)
			printf("  routing flip at layer %.0f token %.0f, margin "
			       "%.3g\n", fl[i].layer, fl[i].token, fl[i].margin);
		if (i < MAX_FLIP_LINES)
			events_log("info", "routing flip at layer %.0f token %.0f, "
				   "margin %.3g", fl[i].layer, fl[i].token,
				   fl[i].margin);
		json_array_append_new(fa, json_pack("{s:i, s:i, s:f}", "layer",
						    (int)fl[i].layer, "token",
						    (int)fl[i].token, "margin",
						    fl[i].margin));
	}
	if (text && nfl > MAX_FLIP_LINES)
		printf("  (%d more routing flips)\n", nfl - MAX_FLIP_LINES);
	if (routed > 0 && flips > o->max_flips * routed)
		bad = 1;
	if (v->unexpl > 0)
		bad = 1;
	{
		char un[120] = "";
		if (v->unexpl > 0)
			snprintf(un, sizeof un, "%.0f routed rows chose other "
				 "experts than float64 without a near-tie to "
				 "explain it; ", v->unexpl);
		snprintf(d, sizeof d, "%seach layer from the run's own input: "
			 "worst %.3g relative (threshold %g); %.0f routing flips "
			 "of %.0f routed (bound %g)", un, worst, o->max_rel,
			 flips, routed, o->max_flips);
	}
	if (text)
		printf("  %s\n", d);
	events_check("numerics.layer", bad ? "fail" : "pass", d,
		     json_real(worst), json_real(o->max_rel));
	json_object_set_new(doc, "layer", a);
	json_object_set_new(doc, "routing_flips", fa);
	json_object_set_new(doc, "flips", json_integer((json_int_t)flips));
	json_object_set_new(doc, "routed", json_integer((json_int_t)routed));
	if (o->logits) {
		struct e2e r;
		struct d0_err err;
		int fail;
		if (e2e_check(v, &r, &err) < 0) {
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			json_decref(doc);
			return EXIT_USAGE;
		}
		fail = !(r.max_rel <= o->max_rel) || !(r.kl_max <= o->kl_max);
		bad |= fail;
		snprintf(d, sizeof d, "head on the run's last layer: max rel %.3g, "
			 "KL max %.3g, top-1 %.1f%%", r.max_rel, r.kl_max, r.top1);
		if (text)
			printf("e2e (logits vs float64 head)\n  %s\n", d);
		events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f, s:f, s:f}",
						  "level", "e2e", "name", "logits",
						  "max_abs", r.max_abs, "max_rel",
						  r.max_rel, "kl", r.kl_max, "top1",
						  r.top1));
		events_check("numerics.e2e", fail ? "fail" : "pass", d,
			     json_real(r.max_rel), json_real(o->max_rel));
		json_object_set_new(doc, "e2e", json_pack("{s:f, s:f, s:f, s:f}",
							  "max_abs", r.max_abs,
							  "max_rel", r.max_rel,
							  "kl_max", r.kl_max,
							  "top1_pct", r.top1));
	}
	json_object_set_new(doc, "ranks", json_integer(v->size));
	json_object_set_new(doc, "ok", json_boolean(!bad));
	if (o->json) {
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else if (text) {
		printf("%s\n", bad ? "numerics: FAIL" : "numerics: pass");
	}
	json_decref(doc);
	return bad ? EXIT_CHECK_FAILED : EXIT_OK;
}

static int under_mpirun(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK");
}

static double dtype_eps(enum dtype d)
{
	return d == DT_BF16 ? 0x1p-8 : d == DT_F16 ? 0x1p-11 : 0x1p-24;
}

int validate_local(const struct vl_opts *o)
{
	struct vl v;
	struct model_config c;
	struct ref_hooks hk = {.mem = o->mem, .no_embed = 1, .no_head = 1,
			       .skip = hook_skip,
			       .layer_in = hook_layer_in,
			       .layer_out = hook_layer_out, .route = hook_route,
			       .follow = hook_follow};
	struct d0_err err;
	struct flip *all = NULL;
	double *logits = NULL;
	int mpi = under_mpirun(), nall = 0, rc, L;
	char *cp = path_join(o->dir, "config.json");

	memset(&v, 0, sizeof v);
	v.o = o;
	v.c = &c;
	v.T = o->T;
	v.size = 1;
	v.eps = dtype_eps(o->compute);
	if (mpi) {
		MPI_Init(NULL, NULL);
		MPI_Comm_rank(MPI_COMM_WORLD, &v.rank);
		MPI_Comm_size(MPI_COMM_WORLD, &v.size);
	}
	if (model_config_load(cp, &c, &err) < 0) { /* sizes before ref.c */
		free(cp);
		if (v.rank == 0)
			fprintf(stderr, "day0-engine: %s\n", err.msg);
		if (mpi)
			MPI_Finalize();
		return EXIT_USAGE;
	}
	free(cp);
	L = (int)c.layers;
	model_config_free(&c);
	v.max_abs = calloc((size_t)L, 8);
	v.max_rel = calloc((size_t)L, 8);
	v.max_rel_all = calloc((size_t)L, 8);
	v.flips = calloc((size_t)L, 8);
	v.routed = calloc((size_t)L, 8);
	v.flipped = calloc((size_t)o->T, 1);
	rfollow_init(&v.rf, o->layers_dir, o->T, o->max_rel);
	v.rf.c = &c;
	hk.ctx = &v;
	rc = ref_forward_hooked(o->dir, o->tokens, o->T, &logits, NULL, &c, &hk,
				&err);
	if (rc == 0 && v.err.msg[0]) {
		err = v.err;
		rc = -1;
	}
	if (rc == 0 && v.rf.err[0]) { /* a dump's routing unreadable */
		snprintf(err.msg, sizeof err.msg, "%s", v.rf.err);
		rc = -1;
	}
	v.unexpl = v.rf.unexplained;
	/* every rank reaches the collectives, failed or not */
	{
		int mine = rc < 0, any = mine;
		if (mpi)
			MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX,
				      MPI_COMM_WORLD);
		if (mine)
			fprintf(stderr, "day0-engine: rank %d: %s\n", v.rank,
				err.msg);
		if (any)
			rc = EXIT_USAGE;
		else {
			gather(&v, L, &all, &nall);
			rc = v.rank == 0 ? report(&v, all, nall) : EXIT_OK;
		}
	}
	if (mpi) {
		MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
		MPI_Finalize();
	}
	free(all);
	free(v.fl);
	rfollow_free(&v.rf);
	free(v.max_abs);
	free(v.max_rel);
	free(v.max_rel_all);
	free(v.flips);
	free(v.routed);
	free(v.flipped);
	free(v.dump);
	free(logits);
	model_config_free(&c);
	return rc;
}

/* validate_layer.h: shared by the op, layer and image levels */
struct err_stat err_compare(const float *a, const double *b, size_t n)
{
	struct err_stat e = {0, 0};
	double scale = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);
		if (d > e.max_abs || isnan(d))
			e.max_abs = isnan(d) ? INFINITY : d;
		if (fabs(b[i]) > scale)
			scale = fabs(b[i]);
	}
	e.max_rel = scale > 0 ? e.max_abs / scale : e.max_abs;
	return e;
}
