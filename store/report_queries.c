/*
 * report_queries.c - the report's questions to a session file, by name
 * (store.h: enum store_query).  The tables are the store's; the console
 * asks through store_query() and never holds SQL of its own.  Each query
 * reads through an index or a small derived table (docs/store.md), never a
 * scan of events: the stage log by the ts index, series by their primary
 * keys, checks/comm/numerics/perf/train by their (small) tables.
 */
#include "store.h"

#include <math.h>
#include <sqlite3.h>

sqlite3 *store_db__(struct store *s);
int store_flush__(struct store *s, struct d0_err *err);

static const char *const query_sql[STORE_Q_COUNT] = {
    /* The console's own events (its primary key range): markers the
     * operator typed, its warnings and errors (cancels, retries), rerun
     * requests, and stage ends whose result is not done. */
    [STORE_Q_TIMELINE] =
	"SELECT ts, CASE type WHEN 'marker' THEN 'marker' WHEN 'stage' "
	"THEN json_extract(body, '$.result') ELSE "
	"CASE WHEN json_extract(body, '$.msg') LIKE '%rerun%' "
	"THEN 'rerun' WHEN json_extract(body, '$.msg') LIKE '%cancel%' "
	"THEN 'cancel' ELSE json_extract(body, '$.level') END END AS kind, "
	"json_extract(body, '$.stage_id') AS stage_id, "
	"coalesce(json_extract(body, '$.note'), "
	"json_extract(body, '$.msg')) AS text FROM events "
	"WHERE node = 'console' AND (type = 'marker' OR (type = 'log' "
	"AND (json_extract(body, '$.level') IN ('warn', 'error') OR "
	"json_extract(body, '$.msg') LIKE '%rerun%')) OR (type = 'stage' "
	"AND json_extract(body, '$.state') = 'end' AND "
	"json_extract(body, '$.result') IS NOT 'done')) ORDER BY ts, seq",
    [STORE_Q_FIRST_TS] =
	"SELECT min(ts) FROM events",
    [STORE_Q_LAST_TS] =
	"SELECT max(ts) FROM events",
    [STORE_Q_NODE_EVENTS] =
	"SELECT node, events FROM nodes ORDER BY node",
    [STORE_Q_SESSION_KEYS] =
	"SELECT key FROM session ORDER BY key",
    [STORE_Q_PLAN_CHECKS] =
	"SELECT c.node, c.rank, c.stage_id, c.status, c.detail, "
	"c.value, c.threshold, c.ts, json_extract(e.body, "
	"'$.plan') AS layout FROM checks c JOIN events e ON "
	"e.node = c.node AND e.seq = c.seq WHERE c.item = "
	"'memory.plan' ORDER BY c.ts, c.node, c.seq",
    [STORE_Q_PLAN_STAGES] =
	"SELECT node, stage_id, min(ts) AS t_start, "
	"max(ts) AS t_end FROM stages WHERE stage = 'plan' "
	"AND node IS NOT 'console' GROUP BY node, stage_id "
	"ORDER BY t_start",
    [STORE_Q_STAGE_LOG] =
	"SELECT json_extract(body, '$.msg') AS msg FROM "
	"events WHERE ts BETWEEN ?1 AND ?2 AND node = ?3 "
	"AND type = 'log' AND "
	"json_extract(body, '$.stage_id') IS ?4 "
	"ORDER BY ts, seq",
    [STORE_Q_PLAN_END] =
	"SELECT rc, msg FROM stages WHERE node = ?1 AND "
	"stage_id IS ?2 AND stage = 'plan' AND state = "
	"'end' ORDER BY rank IS NOT NULL, seq DESC LIMIT 1",
    [STORE_Q_MEM_SERIES] =
	"SELECT id, node, card, metric FROM series WHERE card >= 0 AND "
	    "metric IN ('mem.used', 'mem.peak', 'mem.budget') "
	    "ORDER BY node, card, metric",
    [STORE_Q_SERIES_LAST] =
	"SELECT value FROM sample_points WHERE series = ?1 "
	"ORDER BY ts DESC, seq DESC LIMIT 1",
    [STORE_Q_SERIES_MAX] =
	"SELECT max(value) AS value FROM sample_points "
	"WHERE series = ?1",
    [STORE_Q_SERIES_SPAN] =
	"SELECT count(*) AS n, min(ts) AS lo, "
	  "max(ts) AS hi FROM sample_points "
	  "WHERE series = ?1",
    [STORE_Q_SERIES_THINNED] =
	"SELECT min(ts) AS ts, max(value) AS value "
	"FROM sample_points WHERE series = ?1 "
	"GROUP BY (ts - ?2) / ?3 ORDER BY 1",
    [STORE_Q_SERIES_POINTS] =
	"SELECT ts, value FROM sample_points WHERE "
	"series = ?1 AND ?2 + ?3 > 0 ORDER BY ts, seq",
    /* image-check's items (docs/multimodal.md): perf.image carries the
     * TTFT split's percentiles as fields of its check event. */
    [STORE_Q_IMAGE] =
	"SELECT c.item, c.status, c.stage, c.node, c.detail, "
	"json_extract(e.body, '$.n') AS n, "
	"json_extract(e.body, '$.preprocess_ms.p50') AS preprocess_p50, "
	"json_extract(e.body, '$.encode_ms.p50') AS encode_p50, "
	"json_extract(e.body, '$.prefill_ms.p50') AS prefill_p50, "
	"json_extract(e.body, '$.ttft_ms.p50') AS ttft_p50, "
	"json_extract(e.body, '$.preprocess_ms.p99') AS preprocess_p99, "
	"json_extract(e.body, '$.encode_ms.p99') AS encode_p99, "
	"json_extract(e.body, '$.prefill_ms.p99') AS prefill_p99, "
	"json_extract(e.body, '$.ttft_ms.p99') AS ttft_p99 FROM checks c "
	"JOIN events e ON e.node = c.node AND e.seq = c.seq WHERE c.item "
	"IN ('image.preprocess', 'image.features', 'numerics.image', "
	"'perf.image') ORDER BY c.ts, c.node, c.seq",
    [STORE_Q_TEXT_GENERATION] =
	"SELECT c.node, json_extract(e.body, '$.prompt_text') AS "
	"prompt, json_extract(e.body, '$.text') AS generated, "
	"json_extract(e.body, '$.ref_text') AS reference, "
	"json_extract(e.body, '$.agree') AS agree, "
	"json_extract(e.body, '$.n') AS n, c.status, c.ts FROM "
	"checks c JOIN events e ON e.node = c.node AND e.seq = "
	"c.seq WHERE c.item = 'text.generation' AND "
	"json_extract(e.body, '$.text') IS NOT NULL ORDER BY "
	"c.ts, c.node, c.seq",
    [STORE_Q_REFUSED] =
	"SELECT json_extract(body, '$.for') AS node, "
	"json_extract(body, '$.kind') AS kind, "
	"json_extract(body, '$.reason') AS reason, "
	"max(json_extract(body, '$.count')) AS count, "
	"json_extract(body, '$.detail') AS detail, "
	"json_extract(body, '$.example') AS example FROM events "
	"WHERE node = 'console' AND type = 'alert' AND "
	"json_extract(body, '$.kind') IN ('protocol', 'rate') "
	"GROUP BY 1, 3 ORDER BY 1, 3",
    [STORE_Q_COMMANDS_RUN] =
	"SELECT node, stage_id, stage, msg AS command, ts FROM "
		   "stages WHERE rank IS NULL AND state = 'start' AND node != "
		   "'" "console" "' ORDER BY ts, node, seq",
    [STORE_Q_COMM_SWEEP] =
	"SELECT c.node, c.stage_id, c.\"group\", c.op, c.bytes, "
			 "c.ranks, c.time_us, c.algbw, c.busbw, c.wrong, c.rank, "
			 "c.ts FROM comm c JOIN events e ON e.node = c.node AND "
			 "e.seq = c.seq WHERE json_extract(e.body, '$.calls') IS "
			 "NULL AND c.\"group\" IS NOT 'pairs' ORDER BY "
			 "c.stage_id, c.\"group\", c.op, c.bytes, c.node, c.rank",
    [STORE_Q_COMM_RUNTIME] =
	"SELECT c.node, c.stage_id, c.\"group\", c.op, c.bytes, "
			 "c.ranks, json_extract(e.body, '$.calls') AS calls, "
			 "json_extract(e.body, '$.step') AS phase, c.time_us, "
			 "c.algbw, c.busbw, c.rank, c.ts FROM comm c JOIN events "
			 "e ON e.node = c.node AND e.seq = c.seq WHERE "
			 "json_extract(e.body, '$.calls') IS NOT NULL AND "
			 "json_extract(e.body, '$.interval_s') IS NULL ORDER BY "
			 "c.stage_id, phase, c.\"group\", c.op, c.node, c.rank",
    [STORE_Q_COMM_PAIRS] =
	"SELECT c.node, c.stage_id, json_extract(e.body, "
			 "'$.from') AS \"from\", json_extract(e.body, '$.to') "
			 "AS \"to\", c.bytes, c.busbw, c.wrong FROM comm c JOIN "
			 "events e ON e.node = c.node AND e.seq = c.seq WHERE "
			 "c.\"group\" = 'pairs' ORDER BY c.busbw, c.node",
    [STORE_Q_NUMERICS] =
	"SELECT node, stage_id, level, name, max_abs, "
			 "max_rel, kl, top1, ppl_ref, ppl, rank, ts FROM "
			 "numerics ORDER BY ts, node, seq",
    /* with the kernels the engine measured with (step perf's event: its
     * GEMV kernel and OpenBLAS's kernel set), so that a baseline from
     * another release day is compared like with like */
    [STORE_Q_PERF] =
	"SELECT p.node, p.stage_id, p.rank, p.ttft_ms, p.tpot_ms, "
	"p.tokens_per_s, p.prompt_tokens, p.gen_tokens, "
	"json_extract(e.body, '$.kernel') AS kernel, "
	"json_extract(e.body, '$.blas_core') AS blas_core, p.ts FROM perf p "
	"LEFT JOIN events e ON e.node = p.node AND e.seq = p.seq "
	"ORDER BY p.ts, p.node, p.seq",
    [STORE_Q_SERVICE] =
	"SELECT p.node, p.stage_id, json_extract(e.body, '$.concurrency') "
	"AS concurrency, json_extract(e.body, '$.requests') AS requests, "
	"json_extract(e.body, '$.ok') AS ok, json_extract(e.body, "
	"'$.errors') AS errors, json_extract(e.body, '$.stalls') AS stalls, "
	"json_extract(e.body, '$.requests_per_s') AS requests_per_s, "
	"p.tokens_per_s, json_extract(e.body, '$.goodput') AS goodput, "
	"json_extract(e.body, '$.ttft_p50_ms') AS ttft_p50_ms, "
	"json_extract(e.body, '$.ttft_p90_ms') AS ttft_p90_ms, "
	"json_extract(e.body, '$.ttft_p99_ms') AS ttft_p99_ms, "
	"json_extract(e.body, '$.tpot_p50_ms') AS tpot_p50_ms, "
	"json_extract(e.body, '$.tpot_p90_ms') AS tpot_p90_ms, "
	"json_extract(e.body, '$.tpot_p99_ms') AS tpot_p99_ms, "
	"json_extract(e.body, '$.e2e_p50_ms') AS e2e_p50_ms, "
	"json_extract(e.body, '$.e2e_p90_ms') AS e2e_p90_ms, "
	"json_extract(e.body, '$.e2e_p99_ms') AS e2e_p99_ms, "
	"json_extract(e.body, '$.error_classes') AS error_classes, p.ts "
	"FROM perf p JOIN events e ON e.node = p.node AND e.seq = p.seq "
	"WHERE json_extract(e.body, '$.concurrency') IS NOT NULL "
	"ORDER BY p.ts, p.node, p.seq",
    /* `day0 diff`: perf's repeat spread (step perf --repeat) and a load
     * level's whole figures (step load: one perf event per concurrency,
     * its `level` object) out of the event bodies. */
    [STORE_Q_DIFF_PERF] =
	"SELECT p.node, p.stage_id, p.ttft_ms, p.tpot_ms, p.tokens_per_s, "
	"json_extract(e.body, '$.ttft_ms_min') AS ttft_ms_min, "
	"json_extract(e.body, '$.ttft_ms_max') AS ttft_ms_max, "
	"json_extract(e.body, '$.tpot_ms_min') AS tpot_ms_min, "
	"json_extract(e.body, '$.tpot_ms_max') AS tpot_ms_max, "
	"json_extract(e.body, '$.tokens_per_s_min') AS tokens_per_s_min, "
	"json_extract(e.body, '$.tokens_per_s_max') AS tokens_per_s_max, "
	"json_extract(e.body, '$.concurrency') AS concurrency, "
	"json_extract(e.body, '$.requests_per_s') AS requests_per_s, "
	"json_extract(e.body, '$.level') AS level FROM perf p JOIN events e "
	"ON e.node = p.node AND e.seq = p.seq ORDER BY p.ts, p.node, p.seq",
    /* fine-tuning steps (docs/training.md): a run is (node, stage_id) */
    [STORE_Q_TRAIN] =
	"SELECT node, stage_id, rank, layout, step, loss, grad_norm, "
	"loss_scale, skipped, lr, tokens, t_fwd_s, t_bwd_s, t_opt_s, "
	"t_comm_s, ts FROM train ORDER BY node, stage_id, rank, ts, seq",
    /* the sweeps of STORE_Q_COMM_SWEEP with step comm's per-call spread */
    [STORE_Q_DIFF_COMM] =
	"SELECT c.node, c.\"group\", c.op, c.bytes, c.busbw, "
	"json_extract(e.body, '$.busbw_min') AS busbw_min, "
	"json_extract(e.body, '$.busbw_max') AS busbw_max FROM comm c "
	"JOIN events e ON e.node = c.node AND e.seq = c.seq WHERE "
	"json_extract(e.body, '$.calls') IS NULL AND c.\"group\" IS NOT "
	"'pairs' ORDER BY c.stage_id, c.\"group\", c.op, c.bytes, c.node, "
	"c.rank",
    /* per (node, card): the peak of mem.used minus its second-highest
     * sample.  A peak held by one sample only (stages overlapping for
     * less than a sample interval) is what another run's sampling misses:
     * its height above the rest is the peak's noise. */
    [STORE_Q_DIFF_MEM_STEP] =
	"SELECT s.node, s.card, max(p.value) - coalesce((SELECT q.value FROM "
	"sample_points q WHERE q.series = s.id ORDER BY q.value DESC LIMIT 1 "
	"OFFSET 1), max(p.value)) AS step FROM series s JOIN sample_points p "
	"ON p.series = s.id WHERE s.card >= 0 AND s.metric = 'mem.used' "
	"GROUP BY s.id ORDER BY s.node, s.card",
};

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

json_t *store_query(struct store *s, enum store_query qn, int nb,
		    const char *const *tb, const int64_t *ib, struct d0_err *err)
{
	sqlite3 *db = store_db__(s);
	sqlite3_stmt *q;
	json_t *rows;
	int rc;
	if (qn >= STORE_Q_COUNT || store_flush__(s, err) < 0)
		return NULL;
	if (sqlite3_prepare_v2(db, query_sql[qn], -1, &q, NULL) != SQLITE_OK) {
		d0_errf(err, "%s: query: %s", store_path(s), sqlite3_errmsg(db));
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
		d0_errf(err, "%s: query: %s", store_path(s), sqlite3_errmsg(db));
		json_decref(rows);
		rows = NULL;
	}
	sqlite3_finalize(q);
	return rows;
}

int64_t store_query_int(struct store *s, enum store_query qn, int64_t dflt)
{
	sqlite3_stmt *q;
	int64_t v = dflt;
	if (qn >= STORE_Q_COUNT ||
	    sqlite3_prepare_v2(store_db__(s), query_sql[qn], -1, &q, NULL) !=
		SQLITE_OK)
		return dflt;
	if (sqlite3_step(q) == SQLITE_ROW &&
	    sqlite3_column_type(q, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return v;
}
