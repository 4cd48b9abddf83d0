/*
 * report_data.c - a session file into the report document (report.h).
 *
 * Everything comes from the derived tables and the session manifest
 * (docs/store.md): the checklist from `checks`, comm/numerics/perf from
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
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "console.h"
#include "store.h"

const char *const report_checklist_ids[] = {
    "facts",	      "weights.integrity", "weights.metadata",
    "ops.coverage",   "memory.plan",	   "comm.groups",
    "comm.bandwidth", "numerics.op",	   "numerics.layer",
    "numerics.e2e",   "resources.peak",	   "perf.baseline",
    "stability.soak", "service.api",
    "service.load",   "numerics.endpoint", "repro.manifest",	   NULL,
};

int report_status_rank(const char *s)
{
	/* skip < pass < pending < running < warn < fail; a missing status
	 * (not recorded) sits with pending: nothing says it passed. */
	static const char *const order[] = {"skip",    "pass", "pending",
					    "running", "warn", "fail"};
	if (!s)
		return 2;
	for (int i = 0; i < 6; i++)
		if (!strcmp(s, order[i]))
			return i;
	return 2;
}

struct rctx {
	const char *path;
	sqlite3 *db;
	struct store *st;
	struct d0_err *err;
	int64_t t0; /* first event's ts: the charts' time origin */
};

static int db_fail(struct rctx *c, const char *what)
{
	return d0_errf(c->err, "%s: %s: %s", c->path, what,
		       sqlite3_errmsg(c->db));
}

static json_t *col_json(sqlite3_stmt *q, int i)
{
	switch (sqlite3_column_type(q, i)) {
	case SQLITE_INTEGER:
		return json_integer(sqlite3_column_int64(q, i));
	case SQLITE_FLOAT: {
		double v = sqlite3_column_double(q, i);
		/* jansson refuses NaN/Inf; a broken number is no number. */
		return isfinite(v) ? json_real(v) : json_null();
	}
	case SQLITE_TEXT:
		return json_stringn((const char *)sqlite3_column_text(q, i),
				    (size_t)sqlite3_column_bytes(q, i));
	default:
		return json_null();
	}
}

/*
 * Rows of sql as an array of objects named by the result columns; binds
 * are text (NULL: SQL NULL) except where ints says integer.  NULL on a
 * database error (err filled).
 */
static json_t *q_rows(struct rctx *c, const char *sql, int nb,
		      const char *const *tb, const int64_t *ib)
{
	sqlite3_stmt *q;
	json_t *rows;
	int rc;
	if (sqlite3_prepare_v2(c->db, sql, -1, &q, NULL) != SQLITE_OK) {
		db_fail(c, "query");
		return NULL;
	}
	for (int i = 0; i < nb; i++) {
		if (tb && tb[i])
			sqlite3_bind_text(q, i + 1, tb[i], -1, SQLITE_STATIC);
		else if (ib)
			sqlite3_bind_int64(q, i + 1, ib[i]);
	}
	rows = json_array();
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		json_t *o = json_object();
		for (int i = 0; i < sqlite3_column_count(q); i++)
			json_object_set_new(o, sqlite3_column_name(q, i),
					    col_json(q, i));
		json_array_append_new(rows, o);
	}
	if (rc != SQLITE_DONE) {
		db_fail(c, "query");
		json_decref(rows);
		rows = NULL;
	}
	sqlite3_finalize(q);
	return rows;
}

static int64_t q_int(struct rctx *c, const char *sql, int64_t dflt)
{
	sqlite3_stmt *q;
	int64_t v = dflt;
	if (sqlite3_prepare_v2(c->db, sql, -1, &q, NULL) != SQLITE_OK)
		return dflt;
	if (sqlite3_step(q) == SQLITE_ROW &&
	    sqlite3_column_type(q, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return v;
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
	if (sqlite3_open_v2(path, &c->db,
			    SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK) {
		d0_errf(err, "%s: %s", path,
			c->db ? sqlite3_errmsg(c->db) : "cannot open");
		sqlite3_close(c->db);
		c->db = NULL;
		store_close(c->st, NULL);
		c->st = NULL;
		return -1;
	}
	sqlite3_busy_timeout(c->db, 5000);
	c->t0 = q_int(c, "SELECT min(ts) FROM events", 0);
	return 0;
}

static void close_ctx(struct rctx *c)
{
	if (c->db)
		sqlite3_close(c->db);
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
				     : q_int(c, "SELECT min(ts) FROM events",
					     0);
	json_decref(v);
	v = sess(c, "finished");
	finished = json_is_integer(v)
		       ? json_integer_value(v)
		       : q_int(c, "SELECT max(ts) FROM events", started);
	json_decref(v);
	json_object_set_new(s, "started", json_integer(started));
	json_object_set_new(s, "finished", json_integer(finished));
	json_object_set_new(
	    s, "duration_s",
	    json_real(finished > started ? (double)(finished - started) / 1e9
					 : 0.0));

	rows = q_rows(c, "SELECT node, events FROM nodes ORDER BY node", 0,
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

/* A check's value/threshold column: JSON text (an object or array the
 * store kept as text) back into JSON. */
static void unpack_json(json_t *row, const char *key)
{
	const char *t = json_string_value(json_object_get(row, key));
	json_t *v;
	if (!t || (t[0] != '{' && t[0] != '['))
		return;
	if ((v = json_loads(t, JSON_DECODE_ANY, NULL)))
		json_object_set_new(row, key, v);
}

static json_t *checklist(struct rctx *c)
{
	/* The last check per (item, node, rank, stage_id): SQLite takes the
	 * bare columns from the row that holds max(seq). */
	json_t *rows = q_rows(
	    c,
	    "SELECT item, node, rank, stage_id, status, detail, value, "
	    "threshold, ts, max(seq) AS seq FROM checks "
	    "GROUP BY item, node, rank, stage_id "
	    "ORDER BY item, node, rank, stage_id",
	    0, NULL, NULL);
	json_t *by_item, *out, *thr, *r;
	const char *k;
	size_t i;
	if (!rows)
		return NULL;
	by_item = json_object();
	json_array_foreach(rows, i, r)
	{
		const char *item = json_string_value(json_object_get(r, "item"));
		json_t *ev;
		if (!item)
			continue;
		unpack_json(r, "value");
		unpack_json(r, "threshold");
		json_object_del(r, "seq");
		if (!(ev = json_object_get(by_item, item))) {
			ev = json_array();
			json_object_set_new(by_item, item, ev);
		}
		json_array_append(ev, r);
		/* item is the row's own string: drop it only after use. */
		json_object_del(r, "item");
	}
	json_decref(rows);

	out = json_array();
	thr = sess(c, "checks");
	/* The contract's items first, in order, then anything else seen. */
	for (int pass = 0; pass < 2; pass++) {
		void *tmp;
		json_t *ev;
		if (pass == 0) {
			for (i = 0; report_checklist_ids[i]; i++) {
				json_t *o = json_object();
				json_object_set_new(
				    o, "item",
				    json_string(report_checklist_ids[i]));
				json_array_append_new(out, o);
			}
			continue;
		}
		json_object_foreach_safe(by_item, tmp, k, ev)
		{
			int known = 0;
			for (i = 0; report_checklist_ids[i]; i++)
				known |= !strcmp(k, report_checklist_ids[i]);
			if (!known) {
				json_t *o = json_object();
				json_object_set_new(o, "item", json_string(k));
				json_array_append_new(out, o);
			}
		}
	}
	json_array_foreach(out, i, r)
	{
		const char *item = json_string_value(json_object_get(r, "item"));
		json_t *ev = json_object_get(by_item, item), *e, *t;
		const char *worst = NULL;
		size_t j;
		json_array_foreach(ev, j, e)
		{
			const char *st =
			    json_string_value(json_object_get(e, "status"));
			if (!worst ||
			    report_status_rank(st) > report_status_rank(worst))
				worst = st ? st : "pending";
		}
		json_object_set_new(r, "status",
				    json_string(worst ? worst : "not recorded"));
		json_object_set(r, "nodes", ev ? ev : json_null());
		json_array_foreach(thr, j, t)
		{
			if (!json_is_object(t) ||
			    !json_equal(json_object_get(t, "item"),
					json_object_get(r, "item")))
				continue;
			json_t *req = json_object_get(t, "required");
			if (req)
				json_object_set(r, "required", req);
			if (json_object_get(t, "min"))
				json_object_set(r, "min",
						json_object_get(t, "min"));
			if (json_object_get(t, "max"))
				json_object_set(r, "max",
						json_object_get(t, "max"));
		}
	}
	json_decref(thr);
	json_decref(by_item);
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
			"SELECT c.node, c.rank, c.stage_id, c.status, c.detail, "
			"c.value, c.threshold, c.ts, json_extract(e.body, "
			"'$.plan') AS layout FROM checks c JOIN events e ON "
			"e.node = c.node AND e.seq = c.seq WHERE c.item = "
			"'memory.plan' ORDER BY c.ts, c.node, c.seq",
			0, NULL, NULL);
	stages = q_rows(c,
			"SELECT node, stage_id, min(ts) AS t_start, "
			"max(ts) AS t_end FROM stages WHERE stage = 'plan' "
			"AND node IS NOT 'console' GROUP BY node, stage_id "
			"ORDER BY t_start",
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
			     "SELECT json_extract(body, '$.msg') AS msg FROM "
			     "events WHERE ts BETWEEN ?1 AND ?2 AND node = ?3 "
			     "AND type = 'log' AND "
			     "json_extract(body, '$.stage_id') IS ?4 "
			     "ORDER BY ts, seq",
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
			     "SELECT rc, msg FROM stages WHERE node = ?1 AND "
			     "stage_id IS ?2 AND stage = 'plan' AND state = "
			     "'end' ORDER BY rank IS NOT NULL, seq DESC LIMIT 1",
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
		json_t *rows;
		if (!json_is_object(lay)) {
			json_decref(lay);
			continue;
		}
		rows = json_array();
		for (size_t k = 0; k < sizeof part / sizeof *part; k++) {
			char b[32];
			json_t *x = json_object_get(lay, part[k][0]);
			report_fmt_bytes(json_number_value(x), b, sizeof b);
			json_array_append_new(
			    rows, json_pack("{s:s, s:I, s:s}", "part",
					    part[k][1], "bytes",
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

static json_t *memory(struct rctx *c)
{
	json_t *series = q_rows(
	    c,
	    "SELECT id, node, card, metric FROM series WHERE card >= 0 AND "
	    "metric IN ('mem.used', 'mem.peak', 'mem.budget') "
	    "ORDER BY node, card, metric",
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
		    budget ? "SELECT value FROM sample_points WHERE series = ?1 "
			     "ORDER BY ts DESC, seq DESC LIMIT 1"
			   : "SELECT max(value) AS value FROM sample_points "
			     "WHERE series = ?1",
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
		/* mem.used over time, thinned to MEM_POINTS buckets. */
		int64_t b[3] = {id, 0, 1};
		int64_t lo = 0, hi = 0, n;
		json_t *span = q_rows(c,
				      "SELECT count(*) AS n, min(ts) AS lo, "
				      "max(ts) AS hi FROM sample_points "
				      "WHERE series = ?1",
				      1, NULL, &id);
		json_t *s0 = json_array_get(span, 0);
		n = json_integer_value(json_object_get(s0, "n"));
		lo = json_integer_value(json_object_get(s0, "lo"));
		hi = json_integer_value(json_object_get(s0, "hi"));
		json_decref(span);
		b[1] = lo;
		b[2] = n > MEM_POINTS ? (hi - lo) / MEM_POINTS + 1 : 1;
		rows = q_rows(c,
			      n > MEM_POINTS
				  ? "SELECT min(ts) AS ts, max(value) AS value "
				    "FROM sample_points WHERE series = ?1 "
				    "GROUP BY (ts - ?2) / ?3 ORDER BY 1"
				  : "SELECT ts, value FROM sample_points WHERE "
				    "series = ?1 AND ?2 + ?3 > 0 ORDER BY ts, seq",
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
	keys = q_rows(c, "SELECT key FROM session ORDER BY key", 0, NULL,
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
		   "SELECT node, stage_id, stage, msg AS command, ts FROM "
		   "stages WHERE rank IS NULL AND state = 'start' AND node != "
		   "'" CONSOLE_NODE "' ORDER BY ts, node, seq",
		   0, NULL, NULL);
	json_object_set_new(m, "commands_run", r ? r : json_null());

	/* Checksums a step recorded as a check value (a string or JSON, not
	 * a count). */
	sums = q_rows(c,
		      "SELECT node, stage_id, item, value FROM checks WHERE "
		      "item LIKE 'weights.%' AND typeof(value) = 'text' "
		      "ORDER BY ts, node, seq",
		      0, NULL, NULL);
	json_array_foreach(sums, i, r) unpack_json(r, "value");
	json_object_set_new(m, "checksums", sums ? sums : json_null());
	return m;
}

/* -------------------------------------------------------------------- load */

static json_t *nonempty(json_t *a)
{
	if (a && json_array_size(a))
		return a;
	json_decref(a);
	return json_null();
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
			 "SELECT c.node, c.stage_id, c.\"group\", c.op, c.bytes, "
			 "c.ranks, c.time_us, c.algbw, c.busbw, c.wrong, c.rank, "
			 "c.ts FROM comm c JOIN events e ON e.node = c.node AND "
			 "e.seq = c.seq WHERE json_extract(e.body, '$.calls') IS "
			 "NULL AND c.\"group\" IS NOT 'pairs' ORDER BY "
			 "c.stage_id, c.\"group\", c.op, c.bytes, c.node, c.rank",
			 0, NULL, NULL)))
		goto fail;
	/* The sweeps (comm steps: one row per size) and, apart, the
	 * collectives a run timed inside its forward passes (one row per
	 * group and op, totals over "calls"): mixing them would put
	 * totals on a bandwidth-against-size chart. */
	json_object_set_new(doc, "comm", nonempty(v));
	if (!(v = q_rows(&c,
			 "SELECT c.node, c.stage_id, c.\"group\", c.op, c.bytes, "
			 "c.ranks, json_extract(e.body, '$.calls') AS calls, "
			 "json_extract(e.body, '$.step') AS phase, c.time_us, "
			 "c.algbw, c.busbw, c.rank, c.ts FROM comm c JOIN events "
			 "e ON e.node = c.node AND e.seq = c.seq WHERE "
			 "json_extract(e.body, '$.calls') IS NOT NULL ORDER BY "
			 "c.stage_id, phase, c.\"group\", c.op, c.node, c.rank",
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "comm_runtime", nonempty(v));
	/* comm --pairs: every ordered pair's send/recv bandwidth, slowest
	 * first (the heat map's data). */
	if (!(v = q_rows(&c,
			 "SELECT c.node, c.stage_id, json_extract(e.body, "
			 "'$.from') AS \"from\", json_extract(e.body, '$.to') "
			 "AS \"to\", c.bytes, c.busbw, c.wrong FROM comm c JOIN "
			 "events e ON e.node = c.node AND e.seq = c.seq WHERE "
			 "c.\"group\" = 'pairs' ORDER BY c.busbw, c.node",
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "comm_pairs", nonempty(v));
	if (!(v = q_rows(&c,
			 "SELECT node, stage_id, level, name, max_abs, "
			 "max_rel, kl, top1, ppl_ref, ppl, rank, ts FROM "
			 "numerics ORDER BY ts, node, seq",
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "numerics", nonempty(v));
	if (!(v = q_rows(&c,
			 "SELECT node, stage_id, rank, ttft_ms, tpot_ms, "
			 "tokens_per_s, prompt_tokens, gen_tokens, ts FROM "
			 "perf ORDER BY ts, node, seq",
			 0, NULL, NULL)))
		goto fail;
	json_object_set_new(doc, "perf", nonempty(v));
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
