/*
 * report_data.c - a session file into the report document (report.h).
 *
 * Everything comes from the store's named queries (store.h: store_query,
 * store_evidence, ...; the SQL is the store's) and the session manifest
 * (docs/store.md): the checklist from the evidence, comm/numerics/perf from
 * their tables, peak memory from the `series`/`sample_points` pair, the
 * command lines from the agent's own stage starts.  The events table is
 * read only through its ts index (first/last event, a plan stage's log
 * lines inside its time range), so a report of a 10-million-event session
 * does not scan it.
 */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "console.h"
#include "fit.h"
#include "store.h"
#include "verdict.h"

struct rctx {
	const char *path;
	struct store *st;
	struct d0_err *err;
	int64_t t0; /* first event's ts: the charts' time origin */
};

/* Rows of one of the store's named queries (store.h); NULL on a
 * database error (err filled). */
static json_t *q_rows(struct rctx *c, enum store_query q, int nb,
		      const char *const *tb, const int64_t *ib)
{
	return store_query(c->st, q, nb, tb, ib, c->err);
}

static int64_t q_int(struct rctx *c, enum store_query q, int64_t dflt)
{
	return store_query_int(c->st, q, dflt);
}

/* A manifest key, or NULL (missing or unreadable: a report still goes on,
 * the section says "not recorded"). */
static json_t *sess(struct rctx *c, const char *key)
{
	struct d0_err e;
	return store_session_get(c->st, key, &e);
}

static int open_ctx(struct rctx *c, const char *path, struct d0_err *err)
{
	struct stat sb;
	memset(c, 0, sizeof *c);
	c->path = path;
	c->err = err;
	/* sqlite's "unable to open database file" does not say why. */
	if (stat(path, &sb) < 0)
		return d0_errf(err, "%s: %s", path, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return d0_errf(err, "%s: not a regular file", path);
	/* The store checks it is a day0 session of a known version. */
	if (store_open(path, STORE_READONLY, &c->st, err) < 0)
		return -1;
	c->t0 = q_int(c, STORE_Q_FIRST_TS, 0);
	return 0;
}

static void close_ctx(struct rctx *c)
{
	if (c->st)
		store_close(c->st, NULL);
}

/* ----------------------------------------------------------------- summary */

static json_t *summary(struct rctx *c)
{
	json_t *s = json_object(), *v, *nodes = json_array();
	const char *base = strrchr(c->path, '/');
	int64_t started, finished, events = 0;
	json_t *rows;
	size_t i;
	json_t *r;
	base = base ? base + 1 : c->path;
	json_object_set_new(s, "file", json_string(c->path));
	v = sess(c, "name");
	json_object_set_new(s, "name",
			    json_is_string(v) ? json_incref(v)
					      : json_string(base));
	json_decref(v);
	v = sess(c, "model");
	json_object_set_new(s, "model", json_is_string(v) ? json_incref(v)
							  : json_null());
	json_decref(v);

	v = sess(c, "started");
	started = json_is_integer(v) ? json_integer_value(v)
				     : q_int(c, STORE_Q_FIRST_TS,
					     0);
	json_decref(v);
	v = sess(c, "finished");
	/* a session that never finished: its last event, said so */
	json_object_set_new(s, "finished_recorded",
			    json_boolean(json_is_integer(v)));
	finished = json_is_integer(v)
		       ? json_integer_value(v)
		       : q_int(c, STORE_Q_LAST_TS, started);
	json_decref(v);
	json_object_set_new(s, "started", json_integer(started));
	json_object_set_new(s, "finished", json_integer(finished));
	json_object_set_new(
	    s, "duration_s",
	    json_real(finished > started ? (double)(finished - started) / 1e9
					 : 0.0));

	rows = q_rows(c, STORE_Q_NODE_EVENTS, 0,
		      NULL, NULL);
	json_array_foreach(rows, i, r)
	{
		const char *n = json_string_value(json_object_get(r, "node"));
		events += json_integer_value(json_object_get(r, "events"));
		if (n && strcmp(n, CONSOLE_NODE))
			json_array_append_new(nodes, json_string(n));
	}
	json_decref(rows);
	json_object_set_new(s, "nodes", nodes);
	json_object_set_new(s, "events", json_integer(events));

	/* go / no-go only from the runner's verdict: a session without one
	 * never reached the end of its playbook. */
	v = sess(c, "verdict");
	if (json_is_object(v) && json_is_boolean(json_object_get(v, "go"))) {
		json_object_set_new(
		    s, "verdict",
		    json_string(json_is_true(json_object_get(v, "go"))
				    ? "go"
				    : "no-go"));
		if (json_is_array(json_object_get(v, "failed")))
			json_object_set(s, "failed",
					json_object_get(v, "failed"));
		if (json_is_array(json_object_get(v, "skipped")))
			json_object_set(s, "skipped",
					json_object_get(v, "skipped"));
		/* nodes whose agents simulated the work (--sim-model) */
		if (json_integer_value(json_object_get(v, "simulated")) > 0)
			json_object_set(s, "simulated",
					json_object_get(v, "simulated"));
	} else {
		json_object_set_new(s, "verdict", json_string("unfinished"));
	}
	json_decref(v);
	return s;
}

json_t *report_summary(const char *path, struct d0_err *err)
{
	struct rctx c;
	json_t *s;
	if (open_ctx(&c, path, err) < 0)
		return NULL;
	s = summary(&c);
	close_ctx(&c);
	return s;
}

/* --------------------------------------------------------------- checklist */

/* The playbook's stages as the fold sees them: from the manifest's
 * playbook (ids, rehearsal, declared checks) and the console's stage
 * events (what became of each). */
static struct verdict_stage *report_stages(json_t *pb, json_t *outcomes,
					    size_t *n)
{
	json_t *stages = json_object_get(pb, "stages"), *st;
	struct verdict_stage *vs = calloc(json_array_size(stages) + 1, sizeof *vs);
	size_t i;
	*n = 0;
	json_array_foreach(stages, i, st)
	{
		const char *id = json_string_value(json_object_get(st, "id"));
		json_t *req = json_object_get(st, "required");
		const char *item;
		json_t *spec;
		if (!id)
			continue;
		vs[*n].id = id;
		vs[*n].rehearsal = json_is_true(json_object_get(st, "rehearsal"));
		vs[*n].outcome = verdict_outcome(
		    json_string_value(json_object_get(outcomes, id)));
		vs[*n].checks = json_object();
		json_object_foreach(json_object_get(st, "checks"), item, spec)
		{
			json_t *r = json_object_get(spec, "required");
			json_object_set_new(
			    vs[*n].checks, item,
			    json_pack("{s:b}", "required",
				      (!r || json_is_true(r)) &&
					  (!req || json_is_true(req))));
		}
		(*n)++;
	}
	return vs;
}

static json_t *checklist(struct rctx *c)
{
	json_t *rows = store_evidence(c->st, c->err), *outcomes, *pb, *out,
	       *thr, *r, *t;
	struct verdict_stage *vs;
	size_t n, i, j;
	if (!rows)
		return NULL;
	outcomes = store_stage_outcomes(c->st, c->err);
	if (!outcomes) {
		json_decref(rows);
		return NULL;
	}
	pb = sess(c, "playbook");
	vs = report_stages(pb, outcomes, &n);
	out = verdict_items(vs, n, rows);
	for (i = 0; i < n; i++)
		json_decref(vs[i].checks);
	free(vs);
	/* The playbook's thresholds, as the manifest recorded them. */
	thr = sess(c, "checks");
	json_array_foreach(out, i, r)
	{
		json_array_foreach(thr, j, t)
		{
			if (!json_is_object(t) ||
			    !json_equal(json_object_get(t, "item"),
					json_object_get(r, "item")))
				continue;
			if (json_object_get(t, "min"))
				json_object_set(r, "min",
						json_object_get(t, "min"));
			if (json_object_get(t, "max"))
				json_object_set(r, "max",
						json_object_get(t, "max"));
		}
	}
	json_decref(thr);
	json_decref(pb);
	json_decref(outcomes);
	json_decref(rows);
	return out;
}

/* -------------------------------------------------------------------- plan */

static json_t *plan(struct rctx *c)
{
	json_t *p = json_object(), *checks, *stages, *r;
	size_t i;
	/* plan: the chosen layout's budget breakdown the check carries
	 * (day0-engine plan --events), as JSON text. */
	checks = q_rows(c,
			STORE_Q_PLAN_CHECKS,
			0, NULL, NULL);
	stages = q_rows(c,
			STORE_Q_PLAN_STAGES,
			0, NULL, NULL);
	json_array_foreach(stages, i, r)
	{
		const char *b[4] = {NULL, NULL,
				    json_string_value(json_object_get(r, "node")),
				    json_string_value(
					json_object_get(r, "stage_id"))};
		int64_t ib[2] = {
		    json_integer_value(json_object_get(r, "t_start")),
		    json_integer_value(json_object_get(r, "t_end"))};
		json_t *out, *end, *o;
		size_t j;
		/* The stage's log lines, through the ts index: only the
		 * stage's own time range is read. */
		out = q_rows(c,
			     STORE_Q_STAGE_LOG,
			     4, b, (int64_t[]){ib[0], ib[1], 0, 0});
		json_t *lines = json_array();
		json_array_foreach(out, j, o)
		{
			json_t *m = json_object_get(o, "msg");
			if (json_is_string(m))
				json_array_append(lines, m);
		}
		json_decref(out);
		json_object_set_new(r, "output", lines);
		end = q_rows(c,
			     STORE_Q_PLAN_END,
			     2, b + 2, NULL);
		if (json_array_size(end)) {
			json_object_set(r, "rc",
					json_object_get(json_array_get(end, 0),
							"rc"));
			json_object_set(r, "msg",
					json_object_get(json_array_get(end, 0),
							"msg"));
		}
		json_decref(end);
	}
	if (!json_array_size(checks) && !json_array_size(stages)) {
		json_decref(checks);
		json_decref(stages);
		json_decref(p);
		return json_null();
	}
	json_object_set_new(p, "checks", checks ? checks : json_null());
	json_object_set_new(p, "stages", stages ? stages : json_null());
	/* The last check's layout, as rows every format draws the same. */
	for (i = json_array_size(checks); i-- > 0;) {
		json_t *lay = json_loads(
		    json_string_value(json_object_get(json_array_get(checks, i),
						      "layout"))
			?: "null",
		    0, NULL);
		static const char *const part[][2] = {
		    {"weights_bytes", "weights"},
		    {"kv_bytes", "KV cache"},
		    {"activation_bytes", "activations"},
		    {"comm_buffer_bytes", "comm buffers"},
		    {"total_bytes", "planned total"},
		    {"usable_bytes", "usable (after margin)"}};
		/* plan --train: the training step's parts (they add up to
		 * the planned total with the comm buffers) */
		static const char *const tpart[][2] = {
		    {"weights_bytes", "weights"},
		    {"grads_bytes", "gradients"},
		    {"optimizer_bytes", "optimizer states"},
		    {"activation_bytes", "activations"},
		    {"backward_bytes", "backward working set"},
		    {"views_bytes", "views"},
		    {"pp_buffer_bytes", "pipeline buffers"},
		    {"buffer_bytes", "other buffers"},
		    {"comm_buffer_bytes", "comm buffers"},
		    {"total_bytes", "planned total"},
		    {"usable_bytes", "usable (after margin)"}};
		json_t *rows, *train;
		const char *const(*parts)[2] = part;
		size_t nparts = sizeof part / sizeof *part;
		if (!json_is_object(lay)) {
			json_decref(lay);
			continue;
		}
		train = json_object_get(lay, "train");
		if (json_is_object(train)) {
			parts = tpart;
			nparts = sizeof tpart / sizeof *tpart;
		}
		rows = json_array();
		for (size_t k = 0; k < nparts; k++) {
			char b[32];
			json_t *x = json_object_get(lay, parts[k][0]);
			if (parts == tpart && k < nparts - 3)
				x = json_object_get(train, parts[k][0]);
			if (parts == tpart && !json_integer_value(x) &&
			    k >= 4 && k < nparts - 3)
				continue; /* a part this plan has none of */
			report_fmt_bytes(json_number_value(x), b, sizeof b);
			json_array_append_new(
			    rows, json_pack("{s:s, s:I, s:s}", "part",
					    parts[k][1], "bytes",
					    (json_int_t)json_integer_value(x),
					    "size", b));
		}
		json_object_set_new(
		    p, "layout",
		    json_sprintf("tp%lld pp%lld ep%lld dp%lld on %s",
				 (long long)json_integer_value(
				     json_object_get(lay, "tp")),
				 (long long)json_integer_value(
				     json_object_get(lay, "pp")),
				 (long long)json_integer_value(
				     json_object_get(lay, "ep")),
				 (long long)json_integer_value(
				     json_object_get(lay, "dp")),
				 json_string_value(json_object_get(
				     json_array_get(checks, i), "node"))
				     ?: "?"));
		json_object_set_new(p, "budget", rows);
		json_decref(lay);
		break;
	}
	return p;
}

/* ------------------------------------------------------------------ memory */

static json_t *cardkey(json_t *o, const char *node, int64_t card)
{
	char key[300];
	json_t *v;
	snprintf(key, sizeof key, "%s\x1f%lld", node, (long long)card);
	if (!(v = json_object_get(o, key))) {
		v = json_pack("{s:s,s:I,s:n,s:n}", "node", node, "card",
			      (json_int_t)card, "peak", "budget");
		json_object_set_new(o, key, v);
	}
	return v;
}

/* At most this many points per card in the memory-over-time series: a
 * bucket keeps its highest value, so peaks survive the thinning. */
#define MEM_POINTS 400

/* The Overview's words for a card (fit.h, the same functions as the
 * screen and the headless table): "used_budget" ("26.2/128 MiB", the last
 * mem.used) and "headroom" ("65%", above the peak). */
static void memory_glance(json_t *card)
{
	json_t *u = json_object_get(card, "used"),
	       *p = json_object_get(card, "peak"),
	       *b = json_object_get(card, "budget");
	double used = json_is_number(u) ? json_number_value(u) : NAN,
	       peak = json_is_number(p) ? json_number_value(p) : NAN,
	       budget = json_is_number(b) ? json_number_value(b) : NAN;
	char ub[48], hr[16];
	if (!json_is_number(u))
		json_object_set_new(card, "used", json_null());
	fit_used_budget(used, budget, ub, sizeof ub);
	fit_headroom(peak, budget, hr, sizeof hr, NULL);
	json_object_set_new(card, "used_budget", json_string(ub));
	json_object_set_new(card, "headroom", json_string(hr));
}

static json_t *memory(struct rctx *c)
{
	json_t *series = q_rows(
	    c,
	    STORE_Q_MEM_SERIES,
	    0, NULL, NULL);
	json_t *cards = json_object(), *timeline = json_array(), *r, *out;
	size_t i;
	const char *k;
	json_t *v;
	if (!series) {
		json_decref(cards);
		json_decref(timeline);
		return NULL;
	}
	json_array_foreach(series, i, r)
	{
		int64_t id = json_integer_value(json_object_get(r, "id"));
		const char *node = json_string_value(json_object_get(r, "node"));
		const char *metric =
		    json_string_value(json_object_get(r, "metric"));
		int64_t card = json_integer_value(json_object_get(r, "card"));
		json_t *ck = cardkey(cards, node ? node : "?", card), *rows;
		int budget = !strcmp(metric, "mem.budget");
		rows = q_rows(
		    c,
		    budget ? STORE_Q_SERIES_LAST : STORE_Q_SERIES_MAX,
		    1, NULL, &id);
		json_t *val = json_object_get(json_array_get(rows, 0), "value");
		if (json_is_number(val)) {
			json_t *cur =
			    json_object_get(ck, budget ? "budget" : "peak");
			if (budget || !json_is_number(cur) ||
			    json_number_value(val) > json_number_value(cur))
				json_object_set_new(
				    ck, budget ? "budget" : "peak",
				    json_real(json_number_value(val)));
		}
		json_decref(rows);
		if (strcmp(metric, "mem.used"))
			continue;
		/* The last mem.used: what the Overview shows at the end. */
		rows = q_rows(c, STORE_Q_SERIES_LAST, 1, NULL, &id);
		val = json_object_get(json_array_get(rows, 0), "value");
		if (json_is_number(val))
			json_object_set_new(ck, "used",
					    json_real(json_number_value(val)));
		json_decref(rows);
		/* mem.used over time, thinned to MEM_POINTS buckets. */
		int64_t b[3] = {id, 0, 1};
		int64_t lo = 0, hi = 0, n;
		json_t *span = q_rows(c,
				      STORE_Q_SERIES_SPAN,
				      1, NULL, &id);
		json_t *s0 = json_array_get(span, 0);
		n = json_integer_value(json_object_get(s0, "n"));
		lo = json_integer_value(json_object_get(s0, "lo"));
		hi = json_integer_value(json_object_get(s0, "hi"));
		json_decref(span);
		b[1] = lo;
		b[2] = n > MEM_POINTS ? (hi - lo) / MEM_POINTS + 1 : 1;
		rows = q_rows(c,
			      n > MEM_POINTS ? STORE_Q_SERIES_THINNED
					     : STORE_Q_SERIES_POINTS,
			      3, NULL, b);
		json_t *pts = json_array(), *p;
		size_t j;
		json_array_foreach(rows, j, p)
		{
			json_t *pv = json_object_get(p, "value");
			if (!json_is_number(pv))
				continue;
			json_array_append_new(
			    pts,
			    json_pack("[f,f]",
				      (double)(json_integer_value(
						   json_object_get(p, "ts")) -
					       c->t0) /
					  1e9,
				      json_number_value(pv)));
		}
		json_decref(rows);
		json_array_append_new(
		    timeline, json_pack("{s:s,s:I,s:o}", "node",
					node ? node : "?", "card",
					(json_int_t)card, "points", pts));
	}
	json_decref(series);
	out = json_array();
	json_object_foreach(cards, k, v)
	{
		double pk = json_number_value(json_object_get(v, "peak"));
		double bu = json_number_value(json_object_get(v, "budget"));
		json_object_set_new(v, "fraction",
				    json_is_number(json_object_get(v, "peak")) &&
					    bu > 0
					? json_real(pk / bu)
					: json_null());
		memory_glance(v);
		json_array_append(out, v);
	}
	json_decref(cards);
	if (!json_array_size(out) && !json_array_size(timeline)) {
		json_decref(out);
		json_decref(timeline);
		return json_null();
	}
	return json_pack("{s:o,s:o}", "cards", out, "series", timeline);
}

/* ---------------------------------------------------------------- manifest */

/* An agent's hello or facts event without its envelope. */
static json_t *strip_envelope(json_t *ev)
{
	static const char *const env[] = {"v", "seq", "ts", "node", "type",
					  NULL};
	json_t *o;
	if (!json_is_object(ev))
		return json_incref(ev);
	o = json_deep_copy(ev);
	for (int i = 0; env[i]; i++)
		json_object_del(o, env[i]);
	return o;
}

static json_t *manifest(struct rctx *c)
{
	static const char *const known[] = {
	    "name",	"playbook",	 "playbook_path", "inventory",
	    "inventory_path", "model",	 "command",	  "versions",
	    "started",	"finished",	 "verdict",	  "stages",
	    "checks",	NULL};
	json_t *m = json_object(), *agents = json_object(),
	       *facts = json_object(), *other = json_object(), *keys, *r,
	       *sums;
	size_t i;
	for (i = 0; known[i]; i++) {
		json_t *v = sess(c, known[i]);
		json_object_set_new(m, known[i], v ? v : json_null());
	}
	keys = q_rows(c, STORE_Q_SESSION_KEYS, 0, NULL,
		      NULL);
	json_array_foreach(keys, i, r)
	{
		const char *k = json_string_value(json_object_get(r, "key"));
		int is_known = 0;
		if (!k)
			continue;
		for (int j = 0; known[j]; j++)
			is_known |= !strcmp(k, known[j]);
		if (is_known)
			continue;
		json_t *v = sess(c, k);
		if (!v)
			continue;
		if (!strncmp(k, "agent/", 6))
			json_object_set_new(agents, k + 6, strip_envelope(v));
		else if (!strncmp(k, "facts/", 6))
			json_object_set_new(facts, k + 6, strip_envelope(v));
		else
			json_object_set(other, k, v);
		json_decref(v);
	}
	json_decref(keys);
	json_object_set_new(m, "agents", agents);
	json_object_set_new(m, "facts", facts);
	json_object_set_new(m, "other", other);

	/* What each node actually ran: the agent's own stage starts (rank
	 * NULL) carry the whole command line. */
	r = q_rows(c,
		   STORE_Q_COMMANDS_RUN,
		   0, NULL, NULL);
	json_object_set_new(m, "commands_run", r ? r : json_null());

	sums = store_checksums(c->st, c->err);
	json_object_set_new(m, "checksums", sums ? sums : json_null());
	json_object_set_new(m, "compat", report_compat(m));
	return m;
}

/* -------------------------------------------------------------------- load */

/* text.generation's texts: fields of validate's check of that item. */
static json_t *text_rows(struct rctx *c)
{
	return q_rows(c, STORE_Q_TEXT_GENERATION, 0, NULL, NULL);
}

static json_t *nonempty(json_t *a)
{
	if (a && json_array_size(a))
		return a;
	json_decref(a);
	return json_null();
}

/* Input the console refused or held back, per (node, reason): the
 * console's `alert` events (the last count, the first example). */
/* load's levels (its perf events with a concurrency): error_classes as
 * an object (the column is its JSON text) and as "http_503 3 timeout 1"
 * in errors_by_class for the tables. */
static json_t *service(struct rctx *c)
{
	json_t *rows = q_rows(c, STORE_Q_SERVICE, 0, NULL, NULL), *r;
	size_t i;
	json_array_foreach(rows, i, r) {
		const char *txt = json_string_value(
		    json_object_get(r, "error_classes"));
		json_t *cl = txt ? json_loads(txt, 0, NULL) : NULL, *n;
		const char *k;
		char buf[512] = "";
		size_t used = 0;
		if (!json_is_object(cl)) {
			json_decref(cl);
			cl = json_object();
		}
		json_object_foreach(cl, k, n) {
			int m;
			if (!json_is_integer(n) || !json_integer_value(n))
				continue;
			m = snprintf(buf + used, sizeof buf - used, "%s%s %lld",
				     used ? " " : "", k,
				     (long long)json_integer_value(n));
			if (m < 0 || (size_t)m >= sizeof buf - used)
				break;
			used += (size_t)m;
		}
		json_object_set_new(r, "error_classes", cl);
		json_object_set_new(r, "errors_by_class", json_string(buf));
	}
	return rows;
}

/* Fine-tuning runs (docs/training.md): per (node, stage_id) the steps of
 * its lowest rank (loss and gradient norm are global), their figures and
 * every step as a point for the charts; in the order the runs started.
 * Step time: forward + backward + optimizer + communication, the means
 * over the steps that report all four; its spread min .. max over them. */
static double num_or_nan(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

static void set_num(json_t *o, const char *k, double x)
{
	json_object_set_new(o, k, isfinite(x) ? json_real(x) : json_null());
}

static json_t *training(struct rctx *c)
{
	static const char *const pt_keys[] = {
	    "step", "loss", "grad_norm", "loss_scale", "skipped", "lr",
	    "tokens", "t_fwd_s", "t_bwd_s", "t_opt_s", "t_comm_s", NULL};
	static const char *const parts[] = {"t_fwd_s", "t_bwd_s", "t_opt_s",
					    "t_comm_s"};
	json_t *rows = q_rows(c, STORE_Q_TRAIN, 0, NULL, NULL), *runs, *r;
	json_t *run = NULL;
	size_t i;
	if (!rows)
		return NULL;
	runs = json_array();
	json_array_foreach(rows, i, r)
	{
		const char *node = json_string_value(json_object_get(r, "node"));
		const char *sid =
		    json_string_value(json_object_get(r, "stage_id"));
		json_t *pt;
		if (!node)
			continue;
		if (!run ||
		    strcmp(node, json_string_value(json_object_get(run, "node"))) ||
		    !json_equal(json_object_get(r, "stage_id"),
				json_object_get(run, "stage_id"))) {
			run = json_pack("{s:s,s:O,s:O,s:O,s:[]}", "node", node,
					"stage_id",
					sid ? json_object_get(r, "stage_id")
					    : json_null(),
					"rank", json_object_get(r, "rank"),
					"ts", json_object_get(r, "ts"),
					"points");
			json_array_append_new(runs, run);
		} else if (!json_equal(json_object_get(r, "rank"),
				       json_object_get(run, "rank"))) {
			continue; /* another rank of the run: the lowest's */
		}
		if (json_is_string(json_object_get(r, "layout")))
			json_object_set(run, "layout",
					json_object_get(r, "layout"));
		pt = json_object();
		for (int k = 0; pt_keys[k]; k++)
			json_object_set(pt, pt_keys[k],
					json_object_get(r, pt_keys[k]));
		json_array_append_new(json_object_get(run, "points"), pt);
	}
	json_decref(rows);
	/* The figures of each run. */
	json_array_foreach(runs, i, run)
	{
		json_t *pts = json_object_get(run, "points"), *pt;
		size_t k;
		double sum[4] = {0, 0, 0, 0}, lo = NAN, hi = NAN;
		double lf = NAN, ll = NAN, gn = NAN, sf = NAN, sl = NAN,
		       smin = NAN;
		int timed = 0, skipped = 0;
		json_int_t tokens = 0, first_skipped = -1;
		if (!json_object_get(run, "layout"))
			json_object_set_new(run, "layout", json_string(""));
		json_array_foreach(pts, k, pt)
		{
			double loss = num_or_nan(pt, "loss"),
			       g = num_or_nan(pt, "grad_norm"),
			       sc = num_or_nan(pt, "loss_scale"), t = 0;
			if (json_integer_value(json_object_get(pt, "skipped")) &&
			    !skipped++)
				first_skipped =
				    json_integer_value(json_object_get(pt, "step"));
			if (isfinite(loss)) {
				if (isnan(lf))
					lf = loss;
				ll = loss;
			}
			/* a skipped step's norm overflowed: no norm (-1) */
			if (isfinite(g) &&
			    !json_integer_value(json_object_get(pt, "skipped")))
				gn = g;
			if (isfinite(sc)) {
				if (isnan(sf))
					sf = sc;
				sl = sc;
				if (isnan(smin) || sc < smin)
					smin = sc;
			}
			if (json_integer_value(json_object_get(pt, "tokens")) > 0)
				tokens += json_integer_value(
				    json_object_get(pt, "tokens"));
			for (int p = 0; p < 4; p++)
				t += num_or_nan(pt, parts[p]);
			if (isfinite(t)) {
				for (int p = 0; p < 4; p++)
					sum[p] += num_or_nan(pt, parts[p]);
				if (isnan(lo) || t < lo)
					lo = t;
				if (isnan(hi) || t > hi)
					hi = t;
				timed++;
			}
		}
		json_object_set_new(run, "steps",
				    json_integer((json_int_t)json_array_size(pts)));
		json_object_set_new(run, "skipped", json_integer(skipped));
		json_object_set_new(run, "first_skipped",
				    first_skipped >= 0 ? json_integer(first_skipped)
						       : json_null());
		if (json_array_size(pts)) {
			json_object_set(run, "first_step",
					json_object_get(json_array_get(pts, 0),
							"step"));
			json_object_set(
			    run, "last_step",
			    json_object_get(
				json_array_get(pts, json_array_size(pts) - 1),
				"step"));
		}
		set_num(run, "loss_first", lf);
		set_num(run, "loss_last", ll);
		set_num(run, "grad_norm_last", gn);
		set_num(run, "loss_scale_first", sf);
		set_num(run, "loss_scale_last", sl);
		set_num(run, "loss_scale_min", smin);
		json_object_set_new(run, "tokens", json_integer(tokens));
		json_object_set_new(run, "timed_steps", json_integer(timed));
		for (int p = 0; p < 4; p++)
			set_num(run, parts[p], timed ? sum[p] / timed : NAN);
		set_num(run, "step_s",
			timed ? (sum[0] + sum[1] + sum[2] + sum[3]) / timed
			      : NAN);
		set_num(run, "step_s_min", lo);
		set_num(run, "step_s_max", hi);
		set_num(run, "tokens_per_s",
			timed && tokens && sum[0] + sum[1] + sum[2] + sum[3] > 0
			    ? tokens / (sum[0] + sum[1] + sum[2] + sum[3])
			    : NAN);
	}
	/* In the order the runs started. */
	{
		size_t n = json_array_size(runs);
		for (size_t a = 1; a < n; a++)
			for (size_t b = a; b > 0; b--) {
				json_t *x = json_array_get(runs, b - 1),
				       *y = json_array_get(runs, b);
				if (json_integer_value(json_object_get(x, "ts")) <=
				    json_integer_value(json_object_get(y, "ts")))
					break;
				json_incref(x);
				json_array_set(runs, b - 1, y);
				json_array_set_new(runs, b, x);
			}
	}
	return runs;
}

/* The image channel's rows are the checks recorded; where a stage that
 * declares one of its items gave none (failed, skipped), the checklist's
 * row saying so joins them, so that the table's statuses are the
 * checklist's (validate's text-only numerics.image pass beside a failed
 * image-check is not the channel passing). */
static void image_unproduced(json_t *rows, json_t *checklist)
{
	static const char *const ids[] = {"image.preprocess", "image.features",
					  "numerics.image", "perf.image", NULL};
	json_t *it, *e;
	size_t i, k;
	if (!json_array_size(rows))
		return;
	json_array_foreach(checklist, i, it)
	{
		const char *item = json_string_value(json_object_get(it, "item"));
		int ours = 0;
		for (int j = 0; ids[j] && item; j++)
			ours |= !strcmp(item, ids[j]);
		if (!ours)
			continue;
		json_array_foreach(json_object_get(it, "evidence"), k, e)
		{
			const char *node =
			    json_string_value(json_object_get(e, "node"));
			if (!node || strcmp(node, "-"))
				continue; /* a recorded check: in rows already */
			json_array_append_new(
			    rows, json_pack("{s:s, s:O, s:O, s:s, s:O}", "item",
					    item, "status",
					    json_object_get(e, "status"), "stage",
					    json_object_get(e, "stage"), "node", "-",
					    "detail", json_object_get(e, "detail")));
		}
	}
}

static json_t *refused(struct rctx *c)
{
	return q_rows(c, STORE_Q_REFUSED, 0, NULL, NULL);
}

json_t *report_load(const char *path, struct d0_err *err)
{
	struct rctx c;
	json_t *doc, *v;
	if (open_ctx(&c, path, err) < 0)
		return NULL;
	doc = json_pack("{s:s,s:i}", "format", "day0-report", "version", 1);
	json_object_set_new(doc, "session", summary(&c));
	if (!(v = checklist(&c)))
		goto fail;
	json_object_set_new(doc, "checklist", v);
	json_object_set_new(doc, "plan", plan(&c));
	if (!(v = q_rows(&c,
			 STORE_Q_COMM_SWEEP,
			 0, NULL, NULL)))
		goto fail;
	/* The sweeps (comm steps: one row per size) and, apart, the
	 * collectives a run timed inside its forward passes (one row per
	 * group and op, totals over "calls"): mixing them would put
	 * totals on a bandwidth-against-size chart. */
	json_object_set_new(doc, "comm", nonempty(v));
	if (!(v = q_rows(&c,
			 STORE_Q_COMM_RUNTIME,
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "comm_runtime", nonempty(v));
	/* comm --pairs: every ordered pair's send/recv bandwidth, slowest
	 * first (the heat map's data). */
	if (!(v = q_rows(&c,
			 STORE_Q_COMM_PAIRS,
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "comm_pairs", nonempty(v));
	if (!(v = q_rows(&c,
			 STORE_Q_NUMERICS,
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "numerics", nonempty(v));
	if (!(v = text_rows(&c)))
		goto fail;
	json_object_set_new(doc, "text", nonempty(v));
	if (!(v = q_rows(&c, STORE_Q_IMAGE, 0, NULL, NULL)))
		goto fail;
	image_unproduced(v, json_object_get(doc, "checklist"));
	json_object_set_new(doc, "image", nonempty(v));
	if (!(v = q_rows(&c,
			 STORE_Q_PERF,
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "perf", nonempty(v));
	if (!(v = service(&c)))
		goto fail;
	json_object_set_new(doc, "service", nonempty(v));
	if (!(v = training(&c)))
		goto fail;
	json_object_set_new(doc, "training", nonempty(v));
	if (!(v = refused(&c)))
		goto fail;
	json_object_set_new(doc, "refused", nonempty(v));
	/* The operator's markers, warnings, cancels, reruns and the stages
	 * that did not end done, with their times (s since the start). */
	if (!(v = q_rows(&c, STORE_Q_TIMELINE, 0, NULL, NULL)))
		goto fail;
	{
		json_t *r;
		size_t i;
		json_int_t t0 = json_integer_value(json_object_get(
		    json_object_get(doc, "session"), "started"));
		json_array_foreach(v, i, r) json_object_set_new(
		    r, "t_s",
		    json_real((double)(json_integer_value(
				       json_object_get(r, "ts")) -
				   t0) /
			      1e9));
	}
	json_object_set_new(doc, "timeline", v);
	if (!(v = memory(&c)))
		goto fail;
	json_object_set_new(doc, "memory", v);
	json_object_set_new(doc, "manifest", manifest(&c));
	close_ctx(&c);
	return doc;
fail:
	json_decref(doc);
	close_ctx(&c);
	return NULL;
}

/* ------------------------------------------------------------- formatting */

void report_fmt_num(json_t *v, char *out, size_t max)
{
	if (json_is_integer(v))
		snprintf(out, max, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(out, max, "%.6g", json_real_value(v));
	else if (json_is_string(v))
		snprintf(out, max, "%s", json_string_value(v));
	else if (json_is_true(v) || json_is_false(v))
		snprintf(out, max, "%s", json_is_true(v) ? "true" : "false");
	else if (!v || json_is_null(v))
		snprintf(out, max, "-");
	else {
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		snprintf(out, max, "%s", s ? s : "?");
		free(s);
	}
}

void report_fmt_bytes(double b, char *out, size_t max)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB",
					   "PiB"};
	int u = 0;
	double x = b;
	while (fabs(x) >= 1024 && u < 5) {
		x /= 1024;
		u++;
	}
	if (x == floor(x))
		snprintf(out, max, "%.0f %s", x, unit[u]);
	else
		snprintf(out, max, "%.1f %s", x, unit[u]);
}
