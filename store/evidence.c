/*
 * evidence.c - what a checklist verdict is made of, from a session file
 * (store.h): the evidence per (item, stage, node, rank) and what became of
 * each playbook stage.  The report and anything else that tells the
 * verdict of a stored session read these, so the SQL stays here.
 *
 *   evidence  checks by (item, stage, subject, rank) with MAX(seq): the
 *             last check of each, over the small checks table (one row per
 *             check event); the checks_evidence index covers the grouping
 *   stages    the console's own stage events (node 'console'), in order:
 *             the last one per stage_id says running or its end's result
 */
#include "store.h"

#include <math.h>
#include <sqlite3.h>
#include <string.h>

sqlite3 *store_db__(struct store *s);
int store_flush__(struct store *s, struct d0_err *err);

static int eerr(struct store *s, struct d0_err *err, const char *what)
{
	return d0_errf(err, "%s: %s: %s", store_path(s), what,
		       sqlite3_errmsg(store_db__(s)));
}

/* A value/threshold column: a number, or text that may be JSON the store
 * kept as text (an object or array). */
static json_t *value_json(sqlite3_stmt *st, int i)
{
	const char *t;
	json_t *v;
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		return json_integer(sqlite3_column_int64(st, i));
	case SQLITE_FLOAT: {
		double d = sqlite3_column_double(st, i);
		return isfinite(d) ? json_real(d) : json_null();
	}
	case SQLITE_TEXT:
		t = (const char *)sqlite3_column_text(st, i);
		if ((t[0] == '{' || t[0] == '[') &&
		    (v = json_loads(t, JSON_DECODE_ANY, NULL)))
			return v;
		return json_stringn(t, (size_t)sqlite3_column_bytes(st, i));
	default:
		return json_null();
	}
}

static json_t *text_json(sqlite3_stmt *st, int i)
{
	const char *t = (const char *)sqlite3_column_text(st, i);
	return json_string(t ? t : "");
}

json_t *store_evidence(struct store *s, struct d0_err *err)
{
	sqlite3_stmt *st;
	json_t *rows;
	int rc;
	if (store_flush__(s, err) < 0)
		return NULL;
	if (sqlite3_prepare_v2(
		store_db__(s),
		"SELECT item, stage, subject, rank, status, detail, value, "
		"threshold, ts, max(seq) FROM checks WHERE item IS NOT NULL "
		"GROUP BY item, stage, subject, rank "
		"ORDER BY item, stage, subject, rank",
		-1, &st, NULL) != SQLITE_OK) {
		eerr(s, err, "reading the checks");
		return NULL;
	}
	rows = json_array();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *o = json_object();
		json_object_set_new(o, "item", text_json(st, 0));
		json_object_set_new(o, "stage", text_json(st, 1));
		json_object_set_new(o, "node", text_json(st, 2));
		json_object_set_new(o, "rank",
				    sqlite3_column_type(st, 3) == SQLITE_NULL
					? json_null()
					: json_integer(sqlite3_column_int64(st, 3)));
		json_object_set_new(o, "status", text_json(st, 4));
		json_object_set_new(o, "detail", text_json(st, 5));
		json_object_set_new(o, "value", value_json(st, 6));
		json_object_set_new(o, "threshold", value_json(st, 7));
		json_object_set_new(o, "ts",
				    json_integer(sqlite3_column_int64(st, 8)));
		json_array_append_new(rows, o);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_decref(rows);
		eerr(s, err, "reading the checks");
		return NULL;
	}
	return rows;
}

json_t *store_stage_outcomes(struct store *s, struct d0_err *err)
{
	sqlite3_stmt *st;
	json_t *out;
	int rc;
	if (store_flush__(s, err) < 0)
		return NULL;
	if (sqlite3_prepare_v2(
		store_db__(s),
		"SELECT s.stage_id, s.state, json_extract(e.body, '$.result') "
		"FROM stages s JOIN events e ON e.node = s.node AND "
		"e.seq = s.seq WHERE s.node = 'console' AND s.stage_id IS NOT "
		"NULL ORDER BY s.seq",
		-1, &st, NULL) != SQLITE_OK) {
		eerr(s, err, "reading the stages");
		return NULL;
	}
	out = json_object();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		const char *state = (const char *)sqlite3_column_text(st, 1);
		const char *res = (const char *)sqlite3_column_text(st, 2);
		if (!state)
			continue;
		json_object_set_new(out, id,
				    json_string(!strcmp(state, "end")
						    ? (res ? res : "done")
						    : "running"));
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_decref(out);
		eerr(s, err, "reading the stages");
		return NULL;
	}
	return out;
}

json_t *store_checksums(struct store *s, struct d0_err *err)
{
	sqlite3_stmt *st;
	json_t *rows;
	int rc;
	if (store_flush__(s, err) < 0)
		return NULL;
	/* verify's weights.integrity check carries {"sha256": {shard: hex}};
	 * a step may also record a checksum as a weights.* check's text
	 * value. */
	if (sqlite3_prepare_v2(
		store_db__(s),
		"SELECT c.subject, c.stage_id, j.key, j.value, c.ts, c.seq "
		"FROM checks c JOIN events e ON e.node = c.node AND "
		"e.seq = c.seq, json_each(e.body, '$.sha256') j "
		"WHERE c.item = 'weights.integrity' UNION ALL "
		"SELECT subject, stage_id, item, value, ts, seq FROM checks "
		"WHERE item LIKE 'weights.%' AND typeof(value) = 'text' "
		"ORDER BY 5, 1, 6, 3",
		-1, &st, NULL) != SQLITE_OK) {
		eerr(s, err, "reading the checksums");
		return NULL;
	}
	rows = json_array();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		json_array_append_new(
		    rows, json_pack("{s:o, s:o, s:o, s:o}", "node",
				    text_json(st, 0), "stage_id",
				    text_json(st, 1), "item", text_json(st, 2),
				    "value", value_json(st, 3)));
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_decref(rows);
		eerr(s, err, "reading the checksums");
		return NULL;
	}
	return rows;
}
