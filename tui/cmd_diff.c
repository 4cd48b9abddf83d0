/*
 * cmd_diff.c - `day0 diff A.db B.db`: what changed from session A (the
 * baseline, e.g. the last release day) to session B, flagged REGRESSION
 * where B is worse past a threshold.  Exit 0 when nothing regressed, 1
 * when something did (CI gates on it), 2 for usage errors and unreadable
 * sessions.
 *
 * Both sessions go through report_load, so the diff compares exactly
 * what the reports show.  What is compared (docs/reports.md):
 *   checklist  the folded status per item; pass -> anything but pass/skip,
 *              or anything -> fail, is a regression
 *   perf       per (stage, node), the last perf event: ttft_ms and tpot_ms
 *              up, tokens_per_s down, relative, --threshold-perf (0.05)
 *   service    per (stage, node, concurrency), a load level: TTFT, TPOT
 *              and e2e percentiles up, tokens/s and requests/s down,
 *              --threshold-service (0.10); errors and stalls: any rise
 *   busbw      per (op, group, size), mean over ranks and nodes: down,
 *              relative, --threshold-busbw (0.10); sizes below
 *              --small-busbw (1 MiB) are listed, not gated, unless
 *              --gate-small-busbw
 *
 * Noise: a figure measured several times carries its spread (perf
 * --repeat: min and max of the repeats; comm: the slowest and fastest
 * call of both modes; a load level: p90 - p50 of its requests; a card's
 * sampled peak: its height above the second-highest sample).  A relative change is a
 * regression only when it also exceeds the noise, the spreads of A and B
 * added: two runs of the same thing differ by less than that.  Figures
 * without a recorded spread (older sessions) are gated by the threshold
 * alone.
 *   memory     peak per (node, card): up, relative, --threshold-mem (0.05)
 *   numerics   per (level, name), the worst over nodes: max_rel and kl as
 *              ratios B/A, --threshold-numerics (2.0); values both under
 *              NUM_FLOOR are equal (float noise, not a regression)
 *   training   per fine-tuning run (stage, layout; docs/training.md): the
 *              loss at step K, the last step both runs have, up, relative,
 *              --threshold-train (0.02), no noise: a run of a fixed seed
 *              and data repeats to the bit (training.determinism); the
 *              mean step time up, relative, --threshold-train-time (0.10),
 *              its noise the min..max spread of the step times of A and B
 *              added; skipped steps: any rise; the gradient norm at the
 *              last step both applied, as a ratio B/A, --threshold-grad-norm
 *              (2.0)
 */
#include "console.h"
#include "report.h"
#include "checklist.h"
#include "store.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Errors below this are rounding noise of float32 against float64. */
#define NUM_FLOOR 1e-12
/* Service latencies (ms) closer than this are the same: a tiny model's
 * TPOT on a CPU is microseconds, and whether two tokens leave in one
 * write or two moves its p50 by half a millisecond from run to run
 * (0.009 -> 0.42 ms between two identical release days). */
#define SVC_FLOOR_MS_DEFAULT 1.0

enum kind { REL, RATIO, COUNT };

struct diff {
	double thr_perf, thr_busbw, thr_mem, thr_num, thr_svc, small_bytes;
	double thr_train, thr_train_time, thr_grad;
	double svc_floor_ms; /* latency changes below this are not counted */
	int gate_small;
	json_t *out; /* section -> array of rows */
	int regressions;
};

/* A row's recorded noise for one metric: row.spread.METRIC, else 0. */
static double spread_of(json_t *row, const char *metric)
{
	json_t *v = json_object_get(json_object_get(row, "spread"), metric);
	return json_is_number(v) ? fabs(json_number_value(v)) : 0;
}

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "-";
}

static json_t *section(struct diff *d, const char *name)
{
	json_t *a = json_object_get(d->out, name);
	if (!a) {
		a = json_array();
		json_object_set_new(d->out, name, a);
	}
	return a;
}

/*
 * One metric of one key: dir +1 when higher is worse, -1 when lower is.
 * REL: change = (b - a) / |a|, bad past thr in the bad direction.
 * RATIO: change = b / a, bad when above thr.
 */
static void compare(struct diff *d, const char *sec, const char *key,
		    const char *metric, json_t *ra, json_t *rb, int dir,
		    enum kind kind, double thr)
{
	json_t *va = json_object_get(ra, metric), *vb = json_object_get(rb, metric);
	json_t *row;
	int bad = 0;
	double noise = spread_of(ra, metric) + spread_of(rb, metric);
	if (!json_is_number(va) && !json_is_number(vb))
		return;
	if (!strcmp(sec, "service") && kind == REL && strstr(metric, "_ms") &&
	    noise < d->svc_floor_ms)
		noise = d->svc_floor_ms;
	row = json_pack("{s:s,s:s,s:O,s:O}", "key", key, "metric", metric,
			"a", va ? va : json_null(), "b", vb ? vb : json_null());
	if (json_is_number(va) && json_is_number(vb)) {
		double a = json_number_value(va), b = json_number_value(vb);
		double ch = NAN;
		if (kind == REL || kind == COUNT) {
			if (a != 0)
				ch = (b - a) / fabs(a);
			else if (b == 0)
				ch = 0;
			if (kind == COUNT)
				bad = dir * (b - a) > 0;
			else
				bad = (isnan(ch) ? (dir > 0 ? b > 0 : b < 0)
						 : dir * ch > thr) &&
				      dir * (b - a) > noise;
		} else {
			if (fabs(a) < NUM_FLOOR && fabs(b) < NUM_FLOOR)
				ch = 1;
			else
				ch = fabs(b) / fmax(fabs(a), NUM_FLOOR);
			bad = ch > thr;
		}
		json_object_set_new(row, "change",
				    isfinite(ch) ? json_real(ch) : json_null());
	} else {
		json_object_set_new(row, "change", json_null());
		json_object_set_new(row, "note",
				    json_string(json_is_number(va)
						    ? "only in A"
						    : "only in B"));
	}
	if (kind == REL)
		json_object_set_new(row, "noise",
				    noise > 0 && isfinite(noise)
					? json_real(noise)
					: json_null());
	/* a tail percentile of too few requests: listed, not gated */
	if (json_is_true(json_object_get(json_object_get(ra ? ra : rb, "ungated"),
					 metric)) ||
	    json_is_true(json_object_get(json_object_get(rb ? rb : ra, "ungated"),
					 metric))) {
		json_object_set_new(row, "gated", json_false());
		bad = 0;
	}
	/* busbw of small messages: listed, gated only on request */
	if (!strcmp(sec, "busbw") && !d->gate_small) {
		json_t *by = json_object_get(ra ? ra : rb, "bytes");
		if (json_is_number(by) &&
		    json_number_value(by) < d->small_bytes) {
			json_object_set_new(row, "gated", json_false());
			bad = 0;
		}
	}
	json_object_set_new(row, "regression", json_boolean(bad));
	d->regressions += bad;
	json_array_append_new(section(d, sec), row);
}

/* ---------------------------------------------------------------- indexes */

/* rows -> {key: row}, the last row of a key winning (rows are in ts
 * order), or with fold set, each numeric field the worst (max) seen. */
static json_t *index_rows(json_t *rows, const char *const *keyf,
			  const char *const *fold)
{
	json_t *m = json_object(), *r;
	size_t i;
	json_array_foreach(rows, i, r)
	{
		char key[512];
		size_t len = 0;
		key[0] = 0;
		for (int k = 0; keyf[k] && len < sizeof key; k++) {
			json_t *v = json_object_get(r, keyf[k]);
			char b[128];
			report_fmt_num(v, b, sizeof b);
			int w = snprintf(key + len, sizeof key - len, "%s%s",
					 k ? " " : "", b);
			if (w < 0)
				break;
			len += (size_t)w;
		}
		json_t *prev = json_object_get(m, key);
		if (!fold || !prev) {
			json_object_set(m, key, r);
			continue;
		}
		json_t *merged = json_deep_copy(prev);
		for (int k = 0; fold[k]; k++) {
			json_t *a = json_object_get(prev, fold[k]),
			       *b = json_object_get(r, fold[k]);
			if (json_is_number(b) &&
			    (!json_is_number(a) ||
			     json_number_value(b) > json_number_value(a)))
				json_object_set(merged, fold[k], b);
		}
		json_object_set_new(m, key, merged);
	}
	return m;
}

/* Mean busbw per (op, group, bytes); its noise the widest spread of a
 * row (step comm: its calls of both modes, busbw_min to busbw_max). */
static json_t *index_busbw(json_t *comm)
{
	json_t *m = json_object(), *r;
	size_t i;
	json_array_foreach(comm, i, r)
	{
		json_t *bw = json_object_get(r, "busbw"), *acc;
		json_t *lo = json_object_get(r, "busbw_min"),
		       *hi = json_object_get(r, "busbw_max");
		char key[256], op[64], grp[64];
		double n;
		if (!json_is_number(bw))
			continue;
		report_fmt_num(json_object_get(r, "op"), op, sizeof op);
		report_fmt_num(json_object_get(r, "group"), grp, sizeof grp);
		snprintf(key, sizeof key, "%s %s %lld", op, grp,
			 (long long)json_integer_value(json_object_get(r, "bytes")));
		if (!(acc = json_object_get(m, key))) {
			acc = json_pack("{s:f,s:O,s:f,s:{}}", "busbw", 0.0,
					"bytes", json_object_get(r, "bytes"),
					"n", 0.0, "spread");
			json_object_set_new(m, key, acc);
		}
		n = json_number_value(json_object_get(acc, "n"));
		json_object_set_new(
		    acc, "busbw",
		    json_real((json_number_value(json_object_get(acc, "busbw")) * n +
			       json_number_value(bw)) / (n + 1)));
		json_object_set_new(acc, "n", json_real(n + 1));
		if (json_is_number(lo) && json_is_number(hi) &&
		    json_number_value(hi) - json_number_value(lo) >
			spread_of(acc, "busbw"))
			json_object_set_new(
			    json_object_get(acc, "spread"), "busbw",
			    json_real(json_number_value(hi) - json_number_value(lo)));
	}
	return m;
}

/* perf rows (not a load level's): {"stage node": the last row}, each
 * figure's spread max - min of the repeats when recorded. */
static json_t *index_perf(json_t *rows)
{
	static const char *const fig[] = {"ttft_ms", "tpot_ms", "tokens_per_s",
					  NULL};
	json_t *m = json_object(), *r;
	size_t i;
	json_array_foreach(rows, i, r)
	{
		char key[320], st[128], node[128];
		json_t *row, *sp;
		if (!json_is_null(json_object_get(r, "concurrency")) &&
		    json_object_get(r, "concurrency"))
			continue; /* a load level's: index_service */
		sp = json_object();
		report_fmt_num(json_object_get(r, "stage_id"), st, sizeof st);
		report_fmt_num(json_object_get(r, "node"), node, sizeof node);
		snprintf(key, sizeof key, "%s %s", st, node);
		row = json_object();
		for (int k = 0; fig[k]; k++) {
			char lo[64], hi[64];
			json_t *a, *b;
			json_object_set(row, fig[k], json_object_get(r, fig[k]));
			snprintf(lo, sizeof lo, "%s_min", fig[k]);
			snprintf(hi, sizeof hi, "%s_max", fig[k]);
			a = json_object_get(r, lo);
			b = json_object_get(r, hi);
			if (json_is_number(a) && json_is_number(b))
				json_object_set_new(
				    sp, fig[k],
				    json_real(json_number_value(b) -
					      json_number_value(a)));
		}
		json_object_set_new(row, "spread", sp);
		json_object_set_new(m, key, row);
	}
	return m;
}

/* A load level's figures, flat: ttft_ms.p50 ... e2e_ms.p99,
 * output_tokens_per_s, requests_per_s, errors, stalls.  Noise of a
 * latency percentile: p90 - p50 of that latency over the level's
 * requests; of a rate: the rate times e2e's (p90 - p50) / p50. */
static const char *const svc_lat[] = {"ttft_ms", "tpot_ms", "e2e_ms", NULL};
static const char *const svc_pct[] = {"p50", "p90", "p99", NULL};
static const char *const svc_rate[] = {"output_tokens_per_s",
				       "requests_per_s", NULL};

static double pct_of(json_t *lv, const char *lat, const char *p)
{
	json_t *v = json_object_get(json_object_get(lv, lat), p);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static json_t *index_service(json_t *rows)
{
	json_t *m = json_object(), *r;
	size_t i;
	json_array_foreach(rows, i, r)
	{
		char key[320], st[128], node[128], f[64];
		json_t *row, *sp, *lv;
		double rel;
		if (!json_is_number(json_object_get(r, "concurrency")))
			continue;
		lv = json_is_string(json_object_get(r, "level"))
			 ? json_loads(json_string_value(json_object_get(r, "level")),
				      0, NULL)
			 : NULL;
		report_fmt_num(json_object_get(r, "stage_id"), st, sizeof st);
		report_fmt_num(json_object_get(r, "node"), node, sizeof node);
		snprintf(key, sizeof key, "%s %s c=%lld", st, node,
			 (long long)json_number_value(json_object_get(r, "concurrency")));
		row = json_object();
		sp = json_object();
		for (int l = 0; svc_lat[l]; l++) {
			double p50 = pct_of(lv, svc_lat[l], "p50"),
			       p90 = pct_of(lv, svc_lat[l], "p90");
			for (int p = 0; svc_pct[p]; p++) {
				double v = pct_of(lv, svc_lat[l], svc_pct[p]);
				snprintf(f, sizeof f, "%s.%s", svc_lat[l], svc_pct[p]);
				if (!isfinite(v))
					continue;
				json_object_set_new(row, f, json_real(v));
				if (isfinite(p90 - p50))
					json_object_set_new(sp, f, json_real(p90 - p50));
			}
		}
		rel = pct_of(lv, "e2e_ms", "p50") > 0
			  ? (pct_of(lv, "e2e_ms", "p90") - pct_of(lv, "e2e_ms", "p50")) /
				pct_of(lv, "e2e_ms", "p50")
			  : NAN;
		for (int k = 0; svc_rate[k]; k++) {
			json_t *v = json_object_get(lv, svc_rate[k]);
			if (!json_is_number(v) && !strcmp(svc_rate[k], "requests_per_s"))
				v = json_object_get(r, "requests_per_s");
			if (!json_is_number(v) && !strcmp(svc_rate[k], "output_tokens_per_s"))
				v = json_object_get(r, "tokens_per_s");
			if (!json_is_number(v))
				continue;
			json_object_set(row, svc_rate[k], v);
			if (isfinite(rel))
				json_object_set_new(sp, svc_rate[k],
						    json_real(json_number_value(v) * rel));
		}
		/* pXX of n requests: gated from n >= 10 / (1 - XX/100) on
		 * (p90 from 100 requests, p99 from 1000); below, it is a
		 * handful of the slowest requests, listed, not gated. */
		{
			json_t *ng = json_object();
			double nreq = json_number_value(json_object_get(lv, "ok"));
			for (int l = 0; svc_lat[l]; l++)
				for (int p = 1; svc_pct[p]; p++) {
					double q = p == 1 ? 0.90 : 0.99;
					snprintf(f, sizeof f, "%s.%s", svc_lat[l],
						 svc_pct[p]);
					if (nreq < 10 / (1 - q))
						json_object_set_new(ng, f, json_true());
				}
			json_object_set_new(row, "ungated", ng);
		}
		json_object_set(row, "errors", json_object_get(lv, "errors"));
		json_object_set(row, "stalls", json_object_get(lv, "stalls"));
		json_object_set_new(row, "spread", sp);
		json_object_set_new(m, key, row);
		json_decref(lv);
	}
	return m;
}

/* A card's peak is sampled (--sample-hz): its noise is how far it stands
 * above the card's second-highest sample (a one-sample spike another
 * run's sampling can miss; a sustained rise has none). */
static void mem_noise(json_t *cards, json_t *steps)
{
	static const char *const kf[] = {"node", "card", NULL};
	json_t *idx = index_rows(steps, kf, NULL), *r;
	const char *k;
	json_object_foreach(cards, k, r)
	{
		json_t *st = json_object_get(json_object_get(idx, k), "step");
		json_t *c;
		if (!json_is_number(st))
			continue;
		c = json_deep_copy(r);
		json_object_set_new(c, "spread",
				    json_pack("{s:O}", "peak", st));
		json_object_set_new(cards, k, c);
	}
	json_decref(idx);
}

/* Each key of A, then the keys only B has. */
static void compare_maps(struct diff *d, const char *sec, json_t *ma,
			 json_t *mb, const char *const *metrics,
			 const int *dirs, enum kind kind, double thr)
{
	const char *k;
	json_t *ra, *rb;
	json_object_foreach(ma, k, ra)
	{
		rb = json_object_get(mb, k);
		for (int i = 0; metrics[i]; i++)
			compare(d, sec, k, metrics[i], ra, rb, dirs[i], kind,
				thr);
	}
	json_object_foreach(mb, k, rb)
	{
		if (json_object_get(ma, k))
			continue;
		for (int i = 0; metrics[i]; i++)
			compare(d, sec, k, metrics[i], NULL, rb, dirs[i], kind,
				thr);
	}
}

/* ---------------------------------------------------------------- training */

/* A run's key: "stage layout". */
static void train_key(json_t *run, char *out, size_t max)
{
	char st[128], lay[64];
	report_fmt_num(json_object_get(run, "stage_id"), st, sizeof st);
	report_fmt_num(json_object_get(run, "layout"), lay, sizeof lay);
	snprintf(out, max, "%s %s", st, lay);
}

static json_t *train_find(json_t *runs, const char *key)
{
	json_t *r;
	size_t i;
	char k[256];
	json_array_foreach(runs, i, r)
	{
		train_key(r, k, sizeof k);
		if (!strcmp(k, key))
			return r;
	}
	return NULL;
}

/* The point of run at step (NULL: none). */
static json_t *train_point(json_t *run, json_int_t step)
{
	json_t *p;
	size_t i;
	json_array_foreach(json_object_get(run, "points"), i, p)
	    if (json_integer_value(json_object_get(p, "step")) == step) return p;
	return NULL;
}

/* The last step both runs have with a figure (for grad_norm: a step both
 * applied); -1 when none. */
static json_int_t train_common(json_t *a, json_t *b, const char *fig)
{
	json_t *p, *q;
	size_t i;
	json_int_t k = -1;
	json_array_foreach(json_object_get(a, "points"), i, p)
	{
		json_int_t s = json_integer_value(json_object_get(p, "step"));
		int g = !strcmp(fig, "grad_norm");
		q = train_point(b, s);
		if (!q || !json_is_number(json_object_get(p, fig)) ||
		    !json_is_number(json_object_get(q, fig)))
			continue;
		if (g && (json_integer_value(json_object_get(p, "skipped")) ||
			  json_integer_value(json_object_get(q, "skipped"))))
			continue;
		if (s > k)
			k = s;
	}
	return k;
}

/* One side's row for the comparison: the figure at step k (or the run's
 * own last), its step time and spread, its skips. */
static json_t *train_row(json_t *run, json_int_t k)
{
	json_t *row, *p;
	if (!run)
		return NULL;
	p = k >= 0 ? train_point(run, k) : NULL;
	row = json_pack("{s:O?,s:O?,s:O?,s:O?,s:{}}", "loss",
			p ? json_object_get(p, "loss")
			  : json_object_get(run, "loss_last"),
			"grad_norm",
			p ? json_object_get(p, "grad_norm")
			  : json_object_get(run, "grad_norm_last"),
			"step_s", json_object_get(run, "step_s"), "skipped",
			json_object_get(run, "skipped"), "spread");
	if (json_is_number(json_object_get(run, "step_s_max")) &&
	    json_is_number(json_object_get(run, "step_s_min")))
		json_object_set_new(
		    json_object_get(row, "spread"), "step_s",
		    json_real(json_number_value(json_object_get(run, "step_s_max")) -
			      json_number_value(json_object_get(run, "step_s_min"))));
	return row;
}

static void diff_training(struct diff *d, json_t *ta, json_t *tb)
{
	json_t *keys = json_array(), *r, *k;
	size_t i;
	char key[256], kk[300];
	section(d, "training");
	section(d, "training_grad");
	json_array_foreach(ta, i, r)
	{
		train_key(r, key, sizeof key);
		json_array_append_new(keys, json_string(key));
	}
	json_array_foreach(tb, i, r)
	{
		train_key(r, key, sizeof key);
		if (!train_find(ta, key))
			json_array_append_new(keys, json_string(key));
	}
	json_array_foreach(keys, i, k)
	{
		const char *name = json_string_value(k);
		json_t *a = train_find(ta, name), *b = train_find(tb, name);
		json_int_t kl = a && b ? train_common(a, b, "loss") : -1;
		json_int_t kg = a && b ? train_common(a, b, "grad_norm") : -1;
		json_t *ra = train_row(a, kl), *rb = train_row(b, kl);
		json_t *ga = train_row(a, kg), *gb = train_row(b, kg);
		if (kl >= 0)
			snprintf(kk, sizeof kk, "%s @%lld", name, (long long)kl);
		else
			snprintf(kk, sizeof kk, "%s (last)", name);
		compare(d, "training", kk, "loss", ra, rb, 1, REL, d->thr_train);
		compare(d, "training", name, "step_s", ra, rb, 1, REL,
			d->thr_train_time);
		compare(d, "training", name, "skipped", ra, rb, 1, COUNT, 0);
		if (kg >= 0)
			snprintf(kk, sizeof kk, "%s @%lld", name, (long long)kg);
		else
			snprintf(kk, sizeof kk, "%s (last)", name);
		compare(d, "training_grad", kk, "grad_norm", ga, gb, 1, RATIO,
			d->thr_grad);
		json_decref(ra);
		json_decref(rb);
		json_decref(ga);
		json_decref(gb);
	}
	json_decref(keys);
}

/* -------------------------------------------------------------- sections */

static void diff_checklist(struct diff *d, json_t *ca, json_t *cb)
{
	json_t *sa = json_object(), *sb = json_object(), *it, *v;
	size_t i;
	const char *k;
	json_array_foreach(ca, i, it)
	    json_object_set(sa, jstr(it, "item"), json_object_get(it, "status"));
	json_array_foreach(cb, i, it)
	    json_object_set(sb, jstr(it, "item"), json_object_get(it, "status"));
	json_t *items = json_array();
	json_object_foreach(sa, k, v) json_array_append_new(items, json_string(k));
	json_object_foreach(sb, k, v) if (!json_object_get(sa, k))
	    json_array_append_new(items, json_string(k));
	section(d, "checklist");
	json_array_foreach(items, i, it)
	{
		const char *item = json_string_value(it);
		const char *a = json_string_value(json_object_get(sa, item));
		const char *b = json_string_value(json_object_get(sb, item));
		int bad;
		a = a ? a : "not run";
		b = b ? b : "not run";
		if (!strcmp(a, b))
			continue;
		/* Worse than before, past a skip (the registry's one order). */
		bad = check_status_parse(b, NULL) > check_status_parse(a, NULL) &&
		      check_status_parse(b, NULL) > CHECK_SKIP;
		d->regressions += bad;
		json_array_append_new(
		    section(d, "checklist"),
		    json_pack("{s:s,s:s,s:s,s:b}", "item", item, "a", a, "b", b,
			      "regression", bad));
	}
	json_decref(items);
	json_decref(sa);
	json_decref(sb);
}

/* What the reports do not hold: perf's spread and the load levels, comm's
 * per-call spread.  {"perf": rows, "comm": rows} or NULL (err). */
static json_t *load_noise(const char *path, struct d0_err *err)
{
	struct store *st;
	json_t *p, *c, *m;
	if (store_open(path, STORE_READONLY, &st, err) < 0)
		return NULL;
	p = store_query(st, STORE_Q_DIFF_PERF, 0, NULL, NULL, err);
	c = p ? store_query(st, STORE_Q_DIFF_COMM, 0, NULL, NULL, err) : NULL;
	m = c ? store_query(st, STORE_Q_DIFF_MEM_STEP, 0, NULL, NULL, err)
	      : NULL;
	store_close(st, NULL);
	if (!p || !c || !m) {
		json_decref(p);
		json_decref(c);
		return NULL;
	}
	return json_pack("{s:o,s:o,s:o}", "perf", p, "comm", c, "mem_step",
			 m);
}

static json_t *run_diff_docs(struct diff *d, json_t *A, json_t *B,
			     json_t *NA, json_t *NB)
{
	static const char *const perf_m[] = {"ttft_ms", "tpot_ms",
					     "tokens_per_s", NULL};
	static const int perf_dir[] = {1, 1, -1};
	static const char *const mem_key[] = {"node", "card", NULL};
	static const char *const mem_m[] = {"peak", NULL};
	static const int up[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
	static const char *const bw_m[] = {"busbw", NULL};
	static const int down[] = {-1, -1};
	static const char *const num_key[] = {"level", "name", NULL};
	static const char *const num_m[] = {"max_rel", "kl", NULL};
	static const char *const cnt_m[] = {"errors", "stalls", NULL};
	const char *lat_m[10];
	int n = 0;
	json_t *ma, *mb;
	for (int l = 0; svc_lat[l]; l++)
		for (int p = 0; svc_pct[p]; p++) {
			static char names[9][32];
			snprintf(names[n], sizeof names[n], "%s.%s", svc_lat[l],
				 svc_pct[p]);
			lat_m[n] = names[n];
			n++;
		}
	lat_m[n] = NULL;
	d->out = json_object();
	diff_checklist(d, json_object_get(A, "checklist"),
		       json_object_get(B, "checklist"));

	section(d, "perf");
	ma = index_perf(json_object_get(NA, "perf"));
	mb = index_perf(json_object_get(NB, "perf"));
	compare_maps(d, "perf", ma, mb, perf_m, perf_dir, REL, d->thr_perf);
	json_decref(ma);
	json_decref(mb);

	section(d, "service");
	ma = index_service(json_object_get(NA, "perf"));
	mb = index_service(json_object_get(NB, "perf"));
	compare_maps(d, "service", ma, mb, lat_m, up, REL, d->thr_svc);
	compare_maps(d, "service", ma, mb, svc_rate, down, REL, d->thr_svc);
	compare_maps(d, "service", ma, mb, cnt_m, up, COUNT, 0);
	json_decref(ma);
	json_decref(mb);

	section(d, "busbw");
	ma = index_busbw(json_object_get(NA, "comm"));
	mb = index_busbw(json_object_get(NB, "comm"));
	compare_maps(d, "busbw", ma, mb, bw_m, down, REL, d->thr_busbw);
	json_decref(ma);
	json_decref(mb);

	section(d, "memory");
	ma = index_rows(json_object_get(json_object_get(A, "memory"), "cards"),
			mem_key, NULL);
	mb = index_rows(json_object_get(json_object_get(B, "memory"), "cards"),
			mem_key, NULL);
	mem_noise(ma, json_object_get(NA, "mem_step"));
	mem_noise(mb, json_object_get(NB, "mem_step"));
	compare_maps(d, "memory", ma, mb, mem_m, up, REL, d->thr_mem);
	json_decref(ma);
	json_decref(mb);

	section(d, "numerics");
	ma = index_rows(json_object_get(A, "numerics"), num_key, num_m);
	mb = index_rows(json_object_get(B, "numerics"), num_key, num_m);
	compare_maps(d, "numerics", ma, mb, num_m, up, RATIO, d->thr_num);
	json_decref(ma);
	json_decref(mb);

	diff_training(d, json_object_get(A, "training"),
		      json_object_get(B, "training"));
	return d->out;
}

/* ---------------------------------------------------------------- output */

static void print_rows(json_t *rows, const char *title, int ratio)
{
	json_t *r;
	size_t i;
	printf("\n%s\n", title);
	if (!json_array_size(rows)) {
		printf("  (nothing recorded in either session)\n");
		return;
	}
	json_array_foreach(rows, i, r)
	{
		char a[64], b[64], ch[64] = "", nz[64] = "";
		json_t *c = json_object_get(r, "change"),
		       *noise = json_object_get(r, "noise");
		report_fmt_num(json_object_get(r, "a"), a, sizeof a);
		report_fmt_num(json_object_get(r, "b"), b, sizeof b);
		if (json_is_number(c))
			snprintf(ch, sizeof ch,
				 ratio ? "x%.3g" : "%+.1f%%",
				 ratio ? json_number_value(c)
				       : 100 * json_number_value(c));
		else
			snprintf(ch, sizeof ch, "%s",
				 json_is_string(json_object_get(r, "note"))
				     ? jstr(r, "note")
				     : "-");
		if (json_is_number(noise))
			snprintf(nz, sizeof nz, "noise %.3g",
				 json_number_value(noise));
		printf("  %-34s %-19s %14s -> %-14s %16s %10s%s\n", jstr(r, "key"),
		       jstr(r, "metric"), a, b, nz, ch,
		       json_is_true(json_object_get(r, "regression"))
			   ? "  REGRESSION"
			   : json_is_false(json_object_get(r, "gated"))
				 ? (strstr(jstr(r, "metric"), ".p9")
					? "  (too few requests: not gated)"
					: "  (small message: not gated)")
				 : "");
	}
}

static int parse_thr(const char *opt, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || !isfinite(v))
		return console_usage_error(&cmd_diff,
					   "%s: expected a positive number, "
					   "got '%s'",
					   opt, s);
	*out = v;
	return 0;
}

static int run_diff(int argc, char **argv)
{
	struct diff d = {.thr_perf = 0.05,
			 .thr_busbw = 0.10,
			 .thr_mem = 0.05,
			 .thr_num = 2.0,
			 .thr_svc = 0.10,
			 .thr_train = 0.02,
			 .thr_train_time = 0.10,
			 .thr_grad = 2.0,
			 .svc_floor_ms = SVC_FLOOR_MS_DEFAULT,
			 .small_bytes = 1 << 20};
	const char *files[2] = {NULL, NULL}, *baseline = NULL;
	char picked[4096];
	int nf = 0, as_json = 0;
	json_t *A, *B, *NA, *NB, *res;
	struct d0_err err;
	static const struct {
		const char *opt;
		size_t off;
	} thr[] = {
	    {"--threshold-perf", offsetof(struct diff, thr_perf)},
	    {"--threshold-busbw", offsetof(struct diff, thr_busbw)},
	    {"--threshold-mem", offsetof(struct diff, thr_mem)},
	    {"--threshold-numerics", offsetof(struct diff, thr_num)},
	    {"--threshold-service", offsetof(struct diff, thr_svc)},
	    {"--floor-service-ms", offsetof(struct diff, svc_floor_ms)},
	    {"--small-busbw", offsetof(struct diff, small_bytes)},
	    {"--threshold-train", offsetof(struct diff, thr_train)},
	    {"--threshold-train-time", offsetof(struct diff, thr_train_time)},
	    {"--threshold-grad-norm", offsetof(struct diff, thr_grad)},
	};
	for (int i = 1; i < argc; i++) {
		size_t t;
		for (t = 0; t < sizeof thr / sizeof thr[0]; t++)
			if (!strcmp(argv[i], thr[t].opt))
				break;
		if (t < sizeof thr / sizeof thr[0]) {
			if (i + 1 >= argc)
				return console_usage_error(
				    &cmd_diff, "%s needs a value", argv[i]);
			if (parse_thr(argv[i], argv[i + 1],
				      (double *)((char *)&d + thr[t].off)))
				return EXIT_USAGE;
			i++;
		} else if (!strcmp(argv[i], "--json")) {
			as_json = 1;
		} else if (!strcmp(argv[i], "--gate-small-busbw")) {
			d.gate_small = 1;
		} else if (!strcmp(argv[i], "--baseline")) {
			if (i + 1 >= argc)
				return console_usage_error(
				    &cmd_diff, "--baseline needs auto or a "
					       "session file");
			baseline = argv[++i];
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return console_usage_error(&cmd_diff,
						   "unknown option '%s'",
						   argv[i]);
		} else if (nf < 2) {
			files[nf++] = argv[i];
		} else {
			return console_usage_error(&cmd_diff,
						   "two session files only "
						   "('%s')",
						   argv[i]);
		}
	}
	if (baseline) {
		if (nf != 1)
			return console_usage_error(
			    &cmd_diff, "with --baseline: one session file (B)");
		files[1] = files[0];
		if (strcmp(baseline, "auto")) {
			files[0] = baseline;
		} else {
			if (session_baseline_auto(files[1], picked, sizeof picked,
						  &err) < 0) {
				fprintf(stderr, "day0 diff: --baseline auto: %s\n",
					err.msg);
				return EXIT_USAGE;
			}
			fprintf(stderr, "day0 diff: baseline: %s\n", picked);
			files[0] = picked;
		}
		nf = 2;
	}
	if (nf != 2)
		return console_usage_error(&cmd_diff,
					   "needs two session files");
	if (!(A = report_load(files[0], &err))) {
		fprintf(stderr, "day0 diff: %s\n", err.msg);
		return EXIT_USAGE;
	}
	if (!(B = report_load(files[1], &err))) {
		fprintf(stderr, "day0 diff: %s\n", err.msg);
		json_decref(A);
		return EXIT_USAGE;
	}
	NA = load_noise(files[0], &err);
	NB = NA ? load_noise(files[1], &err) : NULL;
	if (!NA || !NB) {
		fprintf(stderr, "day0 diff: %s\n", err.msg);
		json_decref(NA);
		json_decref(A);
		json_decref(B);
		return EXIT_USAGE;
	}
	res = run_diff_docs(&d, A, B, NA, NB);
	json_decref(NA);
	json_decref(NB);
	if (as_json) {
		json_t *doc = json_pack(
		    "{s:s,s:s,s:{s:f,s:f,s:f,s:f,s:f,s:f,s:b,s:f,s:f,s:f},s:O,"
		    "s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:i}",
		    "a", files[0], "b", files[1], "thresholds", "perf",
		    d.thr_perf, "busbw", d.thr_busbw, "mem", d.thr_mem,
		    "numerics", d.thr_num, "service", d.thr_svc,
		    "small_busbw", d.small_bytes, "gate_small_busbw",
		    d.gate_small, "train", d.thr_train, "train_time",
		    d.thr_train_time, "grad_norm", d.thr_grad,
		    "training", json_object_get(res, "training"),
		    "training_grad", json_object_get(res, "training_grad"),
		    "checklist",
		    json_object_get(res, "checklist"), "perf",
		    json_object_get(res, "perf"), "service",
		    json_object_get(res, "service"), "busbw",
		    json_object_get(res, "busbw"), "memory",
		    json_object_get(res, "memory"), "numerics",
		    json_object_get(res, "numerics"), "regressions",
		    d.regressions);
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(doc);
	} else {
		json_t *r;
		size_t i;
		printf("day0 diff: A %s\n           B %s\n", files[0],
		       files[1]);
		printf("\nchecklist (status A -> B)\n");
		if (!json_array_size(json_object_get(res, "checklist")))
			printf("  no changes\n");
		json_array_foreach(json_object_get(res, "checklist"), i, r)
		    printf("  %-34s %s -> %s%s\n", jstr(r, "item"),
			   jstr(r, "a"), jstr(r, "b"),
			   json_is_true(json_object_get(r, "regression"))
			       ? "  REGRESSION"
			       : "");
		char title[160];
		snprintf(title, sizeof title,
			 "perf (stage node; relative change, threshold %g%% "
			 "and the noise)",
			 100 * d.thr_perf);
		print_rows(json_object_get(res, "perf"), title, 0);
		snprintf(title, sizeof title,
			 "service (stage node concurrency; threshold %g%% and "
			 "the noise; errors and stalls: any rise)",
			 100 * d.thr_svc);
		print_rows(json_object_get(res, "service"), title, 0);
		snprintf(title, sizeof title,
			 "busbw GB/s (op group bytes; threshold %g%% and the "
			 "noise%s)",
			 100 * d.thr_busbw,
			 d.gate_small ? "" : "; below --small-busbw not gated");
		print_rows(json_object_get(res, "busbw"), title, 0);
		snprintf(title, sizeof title,
			 "peak memory bytes (node card; threshold %g%%)",
			 100 * d.thr_mem);
		print_rows(json_object_get(res, "memory"), title, 0);
		snprintf(title, sizeof title,
			 "numerics (level name; ratio B/A, threshold x%g)",
			 d.thr_num);
		print_rows(json_object_get(res, "numerics"), title, 1);
		snprintf(title, sizeof title,
			 "fine-tuning (stage layout @step; loss threshold %g%%, "
			 "step time %g%% and the noise, skipped: any rise)",
			 100 * d.thr_train, 100 * d.thr_train_time);
		print_rows(json_object_get(res, "training"), title, 0);
		snprintf(title, sizeof title,
			 "fine-tuning gradient norm (stage layout @step; ratio "
			 "B/A, threshold x%g)",
			 d.thr_grad);
		print_rows(json_object_get(res, "training_grad"), title, 1);
		printf("\n%d regression%s\n", d.regressions,
		       d.regressions == 1 ? "" : "s");
	}
	json_decref(res);
	json_decref(A);
	json_decref(B);
	if (fflush(stdout))
		return EXIT_USAGE;
	return d.regressions ? EXIT_CHECK_FAILED : EXIT_OK;
}

const struct console_cmd cmd_diff = {
    "diff",
    "A.db B.db | --baseline auto|A.db B.db  [--threshold-perf 0.05] "
    "[--threshold-busbw 0.10] [--threshold-mem 0.05] "
    "[--threshold-numerics 2.0] [--threshold-service 0.10] "
    "[--floor-service-ms MS] "
    "[--small-busbw BYTES] [--gate-small-busbw] [--threshold-train 0.02] "
    "[--threshold-train-time 0.10] [--threshold-grad-norm 2.0] [--json]\n\n"
    "What changed from session A (the baseline) to B: perf, service "
    "figures per\nconcurrency, bus bandwidth, peak memory per card, "
    "numerics, fine-tuning runs\n(loss at step K, step time, gradient "
    "norm) and the checklist.\nA measured figure regresses when it is "
    "worse by more than its threshold and by\nmore than its noise (the "
    "spreads of A and B recorded with it).\n\n"
    "  --baseline auto|FILE     A is FILE, or with auto the last GO "
    "session of the same\n"
    "                           playbook and model family in the session "
    "directory\n"
    "  --threshold-perf R       relative TTFT/TPOT/tokens-per-s change "
    "that counts (0.05)\n"
    "  --threshold-service R    relative change of a load level's "
    "figures that counts (0.10)\n"
    "  --threshold-busbw R      relative busbw drop that counts (0.10)\n"
    "  --small-busbw BYTES      busbw below this size is listed, not "
    "gated (1048576)\n"
    "  --gate-small-busbw       gate every size\n"
    "  --threshold-mem R        relative peak memory growth that counts "
    "(0.05)\n"
    "  --threshold-numerics X   error growth factor that counts (2.0)\n"
    "  --floor-service-ms MS    service latency changes smaller than this\n"
    "                           are not regressions (1)\n"
    "  --threshold-train R      relative rise of a fine-tuning run's loss at\n"
    "                           the last step both runs have (0.02)\n"
    "  --threshold-train-time R relative rise of its mean step time (0.10)\n"
    "  --threshold-grad-norm X  growth factor of its gradient norm (2.0)\n"
    "  --json                   the comparison as JSON\n\n"
    "Exit status: 0 no regression, 1 a regression past a threshold, 2 "
    "usage or input error.\n\n"
    "Example:\n  day0 diff last-release.db today.db --threshold-perf 0.1\n"
    "  day0 diff --baseline auto today.db",
    "what changed from session A to B; exit 1 on a regression past the "
    "thresholds and the noise",
    run_diff};
