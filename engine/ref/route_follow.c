/*
 * route_follow.c - the reference follows the run's MoE routing at
 * explained near-ties (route_follow.h says why and when).
 */
#include "engine.h"
#include "route_follow.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_FLIP_LINES 20 /* printed; the rest are counted */
/* Scores the run may have ranked either way: f32's rounding of a sigmoid
 * (its own polynomial) plus a bias, with room (relative, at least 1). */
#define RF_TIE 4e-6

void rfollow_init(struct rfollow *f, const char *layers_dir, int T,
		  double max_rel)
{
	memset(f, 0, sizeof *f);
	f->layers_dir = layers_dir;
	f->T = T;
	f->max_rel = max_rel;
	f->cur = -1;
}

void rfollow_free(struct rfollow *f)
{
	free(f->lg);
	free(f->idx);
	free(f->fl);
	f->lg = NULL;
	f->idx = NULL;
	f->fl = NULL;
}

/* Tensor `name` of file p as n 4-byte elements of dtype dt, shape
 * [rows][cols]: 1 read, 0 absent, -1 present but not that (f->err). */
static int read4(struct rfollow *f, const char *p, const struct st_file *sf,
		 const char *name, enum dtype dt, int rows, int cols, void *out)
{
	const struct st_tensor *t = st_find(sf, name);
	int fd, rc;
	if (!t)
		return 0;
	if (t->dtype != dt || t->ndim != 2 || t->shape[0] != (uint64_t)rows ||
	    t->shape[1] != (uint64_t)cols) {
		snprintf(f->err, sizeof f->err, "%s: expected %s '%s' of shape "
			 "[%d, %d]", p, dtype_name(dt), name, rows, cols);
		return -1;
	}
	fd = open(p, O_RDONLY | O_CLOEXEC);
	rc = fd >= 0 && pread_full(fd, out, (size_t)rows * cols * 4,
				   sf->data_off + t->begin) == 0;
	if (fd >= 0)
		close(fd);
	if (!rc) {
		snprintf(f->err, sizeof f->err, "%s: cannot read '%s'", p, name);
		return -1;
	}
	return 1;
}

/* Load layer l's routing from its dump (f->have: 1 when it has one). */
static void load(struct rfollow *f, int l)
{
	int K = (int)f->c->top_k, E = (int)f->c->experts, a, b;
	char name[64], *p;
	struct st_file sf;
	struct d0_err err;
	f->cur = l;
	f->have = 0;
	if (f->err[0])
		return;
	snprintf(name, sizeof name, "layer-%03d.safetensors", l);
	p = path_join(f->layers_dir, name);
	if (st_open(p, &sf, &err) < 0) { /* the layer level reports it */
		free(p);
		return;
	}
	f->lg = realloc(f->lg, (size_t)f->T * E * 4 + 4);
	f->idx = realloc(f->idx, (size_t)f->T * K * 4 + 4);
	a = read4(f, p, &sf, "router_logits", DT_F32, f->T, E, f->lg);
	b = a < 0 ? 0 : read4(f, p, &sf, "experts", DT_I32, f->T, K, f->idx);
	if (a >= 0 && b >= 0 && a != b)
		snprintf(f->err, sizeof f->err, "%s: has '%s' without '%s'", p,
			 a ? "router_logits" : "experts",
			 a ? "experts" : "router_logits");
	for (int i = 0; a == 1 && b == 1 && i < f->T * K && !f->err[0]; i++) {
		if (f->idx[i] < 0 || f->idx[i] >= E)
			snprintf(f->err, sizeof f->err, "%s: 'experts' holds %d, "
				 "outside the %d experts", p, (int)f->idx[i], E);
		for (int j = i - i % K; j < i && !f->err[0]; j++)
			if (f->idx[j] == f->idx[i])
				snprintf(f->err, sizeof f->err, "%s: 'experts' row %d "
					 "holds expert %d twice", p, i / K,
					 (int)f->idx[i]);
	}
	f->have = a == 1 && b == 1 && !f->err[0];
	st_free(&sf);
	free(p);
}

static int in(const int *v, int k, int e)
{
	for (int j = 0; j < k; j++)
		if (v[j] == e)
			return 1;
	return 0;
}

/* The score a router ranks by: the logit (softmax is monotone), or
 * DeepSeek's sigmoid plus the correction bias. */
static double score(const struct model_config *c, const double *lg,
		    const double *bias, int e)
{
	if (!strcmp(c->scoring, "sigmoid"))
		return 1.0 / (1.0 + exp(-lg[e])) + (bias ? bias[e] : 0);
	return lg[e];
}

/* A grouped router's group scores: the sum of each group's two best
 * scores (ch [E] the biased scores). */
static void group_scores(const struct model_config *c, const double *ch,
			 double *gs)
{
	int G = (int)c->n_group, per = (int)c->experts / G;
	for (int g = 0; g < G; g++) {
		double b1 = -INFINITY, b2 = -INFINITY;
		for (int e = g * per; e < (g + 1) * per; e++)
			if (ch[e] > b1) {
				b2 = b1;
				b1 = ch[e];
			} else if (ch[e] > b2) {
				b2 = ch[e];
			}
		gs[g] = b1 + (per >= 2 ? b2 : 0);
	}
}

static double kth_largest(const double *v, int n, int k)
{
	double *s = malloc((size_t)n * 8), r;
	memcpy(s, v, (size_t)n * 8);
	for (int i = 1; i < n; i++) /* n is a router's width: small */
		for (int j = i; j > 0 && s[j] > s[j - 1]; j--) {
			double x = s[j];
			s[j] = s[j - 1];
			s[j - 1] = x;
		}
	r = s[k - 1];
	free(s);
	return r;
}

static int grouped(const struct model_config *c)
{
	return !strcmp(c->scoring, "sigmoid") && c->n_group > 0;
}

/*
 * Is set [k] a top-k choice of the router on logits lg, up to ties within
 * tol (relative)?  The run ranks f32 scores (its own sigmoid), float64
 * may order two it found equal within f32's rounding the other way: such
 * a choice is still the run's logits' top-k.  Grouped routers: every
 * group holding a chosen expert is among the top topk_group groups (within
 * tol), and no expert of a group that must be kept, or of the chosen ones,
 * scores above the chosen experts (within tol).
 */
static int top_k_of(const struct model_config *c, const double *lg,
		    const double *bias, const int *set, double tol)
{
	int E = (int)c->experts, K = (int)c->top_k, ok = 1;
	double *ch = malloc((size_t)E * 8), m = INFINITY, M = -INFINITY;
	unsigned char *allowed = malloc((size_t)E);
	for (int e = 0; e < E; e++) {
		ch[e] = score(c, lg, bias, e);
		allowed[e] = 1;
	}
	if (grouped(c)) {
		int G = (int)c->n_group, per = E / G, n = 0;
		double *gs = malloc((size_t)G * 8), thr;
		unsigned char *has = calloc((size_t)G, 1);
		group_scores(c, ch, gs);
		thr = kth_largest(gs, G, (int)c->topk_group);
		for (int j = 0; j < K; j++)
			has[set[j] / per] = 1;
		for (int g = 0; g < G; g++) {
			n += has[g];
			if (has[g] && gs[g] < thr - tol * fmax(1, fabs(thr)))
				ok = 0;
			for (int e = g * per; e < (g + 1) * per; e++)
				allowed[e] = has[g] || gs[g] > thr + tol * fmax(1, fabs(thr));
		}
		ok &= n <= c->topk_group;
		free(gs);
		free(has);
	}
	for (int e = 0; e < E; e++) {
		if (in(set, K, e))
			m = fmin(m, ch[e]);
		else if (allowed[e])
			M = fmax(M, ch[e]);
	}
	for (int i = 0; i < K; i++) /* k distinct experts */
		for (int j = 0; j < i; j++)
			ok &= set[i] != set[j];
	ok &= m >= M - tol * fmax(1, fabs(M));
	free(ch);
	free(allowed);
	return ok;
}

/* The reference's margin for its choice idx over the run's run: its
 * groups' where the two chose other groups, else its experts'. */
static double margin_of(const struct model_config *c, const double *lg,
			const double *bias, const int *idx, const int *run)
{
	int E = (int)c->experts, K = (int)c->top_k;
	double lo = INFINITY, hi = -INFINITY;
	if (grouped(c)) {
		int G = (int)c->n_group, per = E / G;
		double *ch = malloc((size_t)E * 8), *gs = malloc((size_t)G * 8);
		unsigned char *gi = calloc((size_t)G, 1), *gr = calloc((size_t)G, 1);
		for (int e = 0; e < E; e++)
			ch[e] = score(c, lg, bias, e);
		group_scores(c, ch, gs);
		for (int j = 0; j < K; j++) {
			gi[idx[j] / per] = 1;
			gr[run[j] / per] = 1;
		}
		for (int g = 0; g < G; g++) {
			if (gi[g] && !gr[g])
				lo = fmin(lo, gs[g]);
			if (gr[g] && !gi[g])
				hi = fmax(hi, gs[g]);
		}
		free(ch);
		free(gs);
		free(gi);
		free(gr);
		if (lo < INFINITY && hi > -INFINITY)
			return lo - hi;
		lo = INFINITY;
		hi = -INFINITY;
	}
	for (int e = 0; e < E; e++) {
		if (in(idx, K, e) && !in(run, K, e))
			lo = fmin(lo, score(c, lg, bias, e));
		if (in(run, K, e) && !in(idx, K, e))
			hi = fmax(hi, score(c, lg, bias, e));
	}
	return lo - hi;
}

static void list(char *out, size_t n, const int *v, int k)
{
	size_t o = 0;
	out[0] = 0;
	for (int j = 0; j < k && o < n; j++)
		o += (size_t)snprintf(out + o, n - o, "%s%d", j ? "," : "", v[j]);
}

int rfollow_route(struct rfollow *f, int l, int t, const double *bias,
		  const double *logits, int *idx)
{
	const struct model_config *c = f->c;
	int K = (int)c->top_k, E = (int)c->experts, same = 1;
	int run[64];
	double *rl, d = 0, scale = 0, rel;
	struct rf_flip fl;
	if (!f->layers_dir || t >= f->T || K > 64)
		return 0;
	if (f->cur != l)
		load(f, l);
	if (!f->have)
		return 0;
	f->routed++;
	for (int j = 0; j < K; j++)
		run[j] = f->idx[(size_t)t * K + j];
	rl = malloc((size_t)E * 8);
	for (int e = 0; e < E; e++) {
		rl[e] = f->lg[(size_t)t * E + e];
		d = fmax(d, fabs(rl[e] - logits[e]));
		scale = fmax(scale, fabs(logits[e]));
		if (isnan(rl[e]))
			d = INFINITY;
	}
	rel = scale > 0 ? d / scale : d;
	if (!(rel <= f->router_rel))
		f->router_rel = rel;
	for (int j = 0; j < K; j++)
		same &= in(idx, K, run[j]);
	if (same) {
		free(rl);
		return 0;
	}
	memset(&fl, 0, sizeof fl);
	fl.layer = l;
	fl.token = t;
	fl.margin = margin_of(c, logits, bias, idx, run);
	fl.router_rel = rel;
	/* the run's choice is the top-k of its own logits (to f32's
	 * rounding), and those are within the bound of float64's */
	fl.explained = rel <= f->max_rel && top_k_of(c, rl, bias, run, RF_TIE);
	list(fl.run, sizeof fl.run, run, K);
	list(fl.ref, sizeof fl.ref, idx, K);
	f->fl = realloc(f->fl, (size_t)(f->nfl + 1) * sizeof *f->fl);
	f->fl[f->nfl++] = fl;
	free(rl);
	if (!fl.explained) {
		f->unexplained++;
		return 0;
	}
	f->flips++;
	for (int j = 0; j < K; j++)
		idx[j] = run[j];
	return 1;
}

void rfollow_line(const struct rfollow *f, const struct rf_flip *x, char *out,
		  size_t n)
{
	snprintf(out, n, "routing %s at layer %d token %d: the run chose "
		 "experts %s, float64 %s (float64's margin %.3g; the run's "
		 "router logits %.3g relative%s)%s",
		 x->explained ? "flip" : "differs", x->layer, x->token, x->run,
		 x->ref, x->margin, x->router_rel,
		 x->explained ? "" : x->router_rel > f->max_rel
					     ? ", above the bound"
					     : ", and not their top-k",
		 x->explained ? ": the reference follows the run" : "");
}

int rfollow_report(const struct rfollow *f, double max_flips, int text,
		   json_t *doc, char *why, size_t n)
{
	json_t *a = json_array();
	int bad = 0, shown = 0;
	for (int i = 0; i < f->nfl; i++) {
		const struct rf_flip *x = &f->fl[i];
		char line[320];
		rfollow_line(f, x, line, sizeof line);
		if (shown < MAX_FLIP_LINES || !x->explained) {
			if (text)
				printf("  %s\n", line);
			events_log(x->explained ? "info" : "error", "%s", line);
			shown++;
		}
		json_array_append_new(a, json_pack(
			"{s:i, s:i, s:s, s:s, s:f, s:f, s:b}", "layer", x->layer,
			"token", x->token, "run", x->run, "reference", x->ref,
			"margin", x->margin, "router_rel", x->router_rel,
			"explained", x->explained));
	}
	if (text && f->nfl > shown)
		printf("  (%d more routing flips)\n", f->nfl - shown);
	json_object_set_new(doc, "routing_flips", a);
	json_object_set_new(doc, "flips", json_integer(f->flips));
	json_object_set_new(doc, "routed", json_integer(f->routed));
	json_object_set_new(doc, "router_max_rel", json_real(f->router_rel));
	if (f->err[0]) {
		snprintf(why, n, "%s", f->err);
		return 1;
	}
	if (f->unexplained) {
		bad = 1;
		snprintf(why, n, "%d of %d routed rows chose other experts than "
			 "float64 without a near-tie to explain it", f->unexplained,
			 f->routed);
	} else if (f->routed && f->flips > max_flips * f->routed) {
		bad = 1;
		snprintf(why, n, "%d routing flips of %d routed rows, above %g",
			 f->flips, f->routed, max_flips);
	} else if (f->flips) {
		snprintf(why, n, "%d routing flip%s of %d routed rows, followed",
			 f->flips, f->flips == 1 ? "" : "s", f->routed);
	} else if (f->routed) {
		snprintf(why, n, "%d routed rows chose float64's experts",
			 f->routed);
	} else {
		why[0] = 0;
	}
	return bad;
}
