/*
 * query.c - what the console asks the store: the event stream from t (for
 * replay), one card's samples in a window (for charts) and the state at
 * time t (for the screens).  Each query is answered from an index:
 *   events   events_ts (ts; node and seq ride along in the index)
 *   samples  series (node, card, metric) -> id, then the sample_points
 *            primary key (series, ts, seq)
 *   state    one "last before t" seek per series in the series table;
 *            checks and stages by (node, key, rank) with MAX(seq), over
 *            their own small tables (one row per check/stage event).
 * The store's handle is shared with ingest: reads see committed batches
 * and the open one.
 */
#include "store.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

/* store.c keeps struct store opaque even to us: reach the db through a
 * tiny accessor so query.c depends only on what it uses. */
sqlite3 *store_db__(struct store *s);
/* Inserts the open batch's queued rows so that reads see them. */
int store_flush__(struct store *s, struct d0_err *err);

static int qerr(struct store *s, struct d0_err *err, const char *what)
{
	return d0_errf(err, "%s: %s: %s", store_path(s), what,
		       sqlite3_errmsg(store_db__(s)));
}

int store_events(struct store *s, int64_t from_ts, int64_t to_ts,
		 int (*cb)(void *arg, const struct store_event *ev), void *arg,
		 struct d0_err *err)
{
	sqlite3_stmt *st;
	int rc, stop = 0;
	if (store_flush__(s, err) < 0)
		return -1;
	if (sqlite3_prepare_v2(store_db__(s),
			       "SELECT node, seq, ts, type, body FROM events "
			       "WHERE ts >= ?1 AND ts < ?2 "
			       "ORDER BY ts, node, seq",
			       -1, &st, NULL) != SQLITE_OK)
		return qerr(s, err, "reading events");
	sqlite3_bind_int64(st, 1, from_ts);
	sqlite3_bind_int64(st, 2, to_ts);
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_event ev = {
		    .node = (const char *)sqlite3_column_text(st, 0),
		    .seq = sqlite3_column_int64(st, 1),
		    .ts = sqlite3_column_int64(st, 2),
		    .type = (const char *)sqlite3_column_text(st, 3),
		    .body = (const char *)sqlite3_column_text(st, 4),
		    .body_len = (size_t)sqlite3_column_bytes(st, 4),
		};
		stop = cb(arg, &ev);
	}
	sqlite3_finalize(st);
	if (!stop && rc != SQLITE_DONE)
		return qerr(s, err, "reading events");
	return stop;
}

int store_samples(struct store *s, const char *node, int card,
		  const char *metric, int64_t from_ts, int64_t to_ts,
		  int (*cb)(void *arg, const struct store_sample *smp),
		  void *arg, struct d0_err *err)
{
	sqlite3_stmt *st;
	int rc, stop = 0;
	if (store_flush__(s, err) < 0)
		return -1;
	if (sqlite3_prepare_v2(store_db__(s),
			       "SELECT p.ts, p.value FROM series s "
			       "JOIN sample_points p ON p.series = s.id "
			       "WHERE s.node = ?1 AND s.card = ?2 AND "
			       "s.metric = ?3 AND p.ts >= ?4 AND p.ts < ?5 "
			       "ORDER BY p.ts, p.seq",
			       -1, &st, NULL) != SQLITE_OK)
		return qerr(s, err, "reading samples");
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 2, card);
	sqlite3_bind_text(st, 3, metric, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, from_ts);
	sqlite3_bind_int64(st, 5, to_ts);
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_sample smp = {
		    .ts = sqlite3_column_int64(st, 0),
		    .value = sqlite3_column_double(st, 1),
		};
		stop = cb(arg, &smp);
	}
	sqlite3_finalize(st);
	if (!stop && rc != SQLITE_DONE)
		return qerr(s, err, "reading samples");
	return stop;
}

/* A column as JSON: integers, reals, text (NULL -> null). */
static json_t *col_json(sqlite3_stmt *st, int i)
{
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		return json_integer(sqlite3_column_int64(st, i));
	case SQLITE_FLOAT:
		return json_real(sqlite3_column_double(st, i));
	case SQLITE_TEXT:
		return json_stringn((const char *)sqlite3_column_text(st, i),
				    (size_t)sqlite3_column_bytes(st, i));
	default:
		return json_null();
	}
}

/* Rows of a query as objects named by the statement's columns. */
static int rows_json(struct store *s, sqlite3_stmt *st, json_t *arr,
		     struct d0_err *err)
{
	int rc, n = sqlite3_column_count(st);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *o = json_object();
		for (int i = 0; i < n; i++) {
			json_t *v = col_json(st, i);
			json_object_set_new(o, sqlite3_column_name(st, i),
					    v ? v : json_null());
		}
		json_array_append_new(arr, o);
	}
	if (rc != SQLITE_DONE)
		return qerr(s, err, "reading the state");
	return 0;
}

json_t *store_state_at(struct store *s, int64_t t, struct d0_err *err)
{
	sqlite3 *db = store_db__(s);
	sqlite3_stmt *series = NULL, *last = NULL, *st = NULL;
	json_t *doc = json_object(), *samples = json_array(),
	       *checks = json_array(), *stages = json_array();
	int rc;
	if (store_flush__(s, err) < 0) {
		json_decref(doc);
		return NULL;
	}
	json_object_set_new(doc, "t", json_integer(t));
	json_object_set_new(doc, "samples", samples);
	json_object_set_new(doc, "checks", checks);
	json_object_set_new(doc, "stages", stages);
	if (sqlite3_prepare_v2(db,
			       "SELECT node, card, metric, id FROM series "
			       "ORDER BY node, card, metric",
			       -1, &series, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
			       "SELECT ts, value FROM sample_points "
			       "WHERE series = ?1 AND ts <= ?2 "
			       "ORDER BY ts DESC, seq DESC LIMIT 1",
			       -1, &last, NULL) != SQLITE_OK) {
		qerr(s, err, "reading the state");
		goto fail;
	}
	while ((rc = sqlite3_step(series)) == SQLITE_ROW) {
		sqlite3_bind_int64(last, 1, sqlite3_column_int64(series, 3));
		sqlite3_bind_int64(last, 2, t);
		rc = sqlite3_step(last);
		if (rc == SQLITE_ROW) {
			json_t *o = json_object();
			json_object_set_new(o, "node", col_json(series, 0));
			json_object_set_new(o, "card", col_json(series, 1));
			json_object_set_new(o, "metric", col_json(series, 2));
			json_object_set_new(o, "ts", col_json(last, 0));
			json_object_set_new(o, "value", col_json(last, 1));
			json_array_append_new(samples, o);
		}
		sqlite3_reset(last);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
			qerr(s, err, "reading the state");
			goto fail;
		}
	}
	if (rc != SQLITE_DONE) {
		qerr(s, err, "reading the state");
		goto fail;
	}
	/* SQLite takes bare columns from the row holding MAX(seq). */
	if (sqlite3_prepare_v2(db,
			       "SELECT node, item, rank, stage_id, status, "
			       "detail, value, threshold, ts, MAX(seq) AS seq "
			       "FROM checks WHERE ts <= ?1 "
			       "GROUP BY node, item, rank ORDER BY node, item, "
			       "rank",
			       -1, &st, NULL) != SQLITE_OK) {
		qerr(s, err, "reading the state");
		goto fail;
	}
	sqlite3_bind_int64(st, 1, t);
	if (rows_json(s, st, checks, err) < 0)
		goto fail;
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(db,
			       "SELECT node, stage_id, stage, rank, state, "
			       "progress, rc, msg, ts, MAX(seq) AS seq "
			       "FROM stages WHERE ts <= ?1 "
			       "GROUP BY node, stage_id, stage, rank "
			       "ORDER BY node, stage_id, stage, rank",
			       -1, &st, NULL) != SQLITE_OK) {
		st = NULL;
		qerr(s, err, "reading the state");
		goto fail;
	}
	sqlite3_bind_int64(st, 1, t);
	if (rows_json(s, st, stages, err) < 0)
		goto fail;
	sqlite3_finalize(st);
	sqlite3_finalize(series);
	sqlite3_finalize(last);
	return doc;
fail:
	sqlite3_finalize(st);
	sqlite3_finalize(series);
	sqlite3_finalize(last);
	json_decref(doc);
	return NULL;
}
