/*
 * reader.c - replay's read-only questions to a session file (reader.h).
 * Every statement is prepared once at open; a question is one bind, a
 * step loop and a reset, so seeking (many questions per frame) costs no
 * SQL parsing.
 */
#include "reader.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#define CONSOLE "console"

static const char *const rq_sql[SRQ_COUNT] = {
    /* The start: the earliest event no more than an hour (the view's
     * VIEW_CLOCK_SKEW) before the console's first, so a node clock wrong
     * by years does not stretch the timeline; the earliest of all in a
     * file with no console events. */
    [SRQ_SPAN] = "SELECT coalesce((SELECT min(ts) FROM events WHERE ts >= "
		 "(SELECT ts FROM events WHERE node = '" CONSOLE "' ORDER BY seq "
		 "LIMIT 1) - 3600000000000), (SELECT ts FROM events ORDER BY ts "
		 "LIMIT 1)),"
		 " (SELECT ts FROM events ORDER BY ts DESC LIMIT 1)",
    [SRQ_HISTORY] = "SELECT ts, value FROM sample_points WHERE series = ?1 "
		    "AND ts <= ?2 ORDER BY ts DESC, seq DESC LIMIT ?3",
    /* Rows of the small derived tables (and the console's own events)
     * come back as their event bodies, so seek and fold share one path. */
    [SRQ_SPARSE] =
	"SELECT x.ts, x.node, x.seq, e.body FROM ("
	" SELECT node, seq, ts FROM stages WHERE ts <= ?1 UNION ALL"
	" SELECT node, seq, ts FROM checks WHERE ts <= ?1 UNION ALL"
	" SELECT node, seq, ts FROM comm WHERE ts <= ?1 UNION ALL"
	" SELECT node, seq, ts FROM numerics WHERE ts <= ?1 UNION ALL"
	" SELECT node, seq, ts FROM perf WHERE ts <= ?1 UNION ALL"
	" SELECT node, seq, ts FROM train WHERE ts <= ?1) x"
	" JOIN events e ON e.node = x.node AND e.seq = x.seq "
	"UNION ALL SELECT ts, node, seq, body FROM events WHERE node = '" CONSOLE
	"' AND ts <= ?1 AND type NOT IN ('stage', 'check', 'comm', 'numerics',"
	" 'perf', 'train', 'sample') "
	"ORDER BY 1, 2, 3",
    [SRQ_LOG] = "SELECT ts, body FROM events WHERE ts <= ?1 ORDER BY ts DESC,"
		" node DESC, seq DESC LIMIT ?2",
    [SRQ_FORWARD] = "SELECT body FROM events WHERE ts > ?1 AND ts <= ?2 "
		    "ORDER BY ts, node, seq",
    [SRQ_FIRST_TS] =
	"SELECT ts FROM events WHERE node = ?1 ORDER BY seq LIMIT 1",
    /* CROSS JOIN: checks and stages drive the join.  A plain JOIN let
     * the planner walk every event in ts order for the ORDER BY (83% of
     * `replay --follow`'s CPU on a 128-node session). */
    [SRQ_MARKS] =
	"SELECT ts, node, seq, body FROM events WHERE node = '" CONSOLE
	"' AND type = 'marker' UNION ALL SELECT e.ts, e.node, e.seq,"
	" e.body FROM checks c CROSS JOIN events e ON e.node = c.node AND"
	" e.seq = c.seq WHERE c.status = 'fail' UNION ALL SELECT"
	" e.ts, e.node, e.seq, e.body FROM stages s CROSS JOIN events e ON"
	" e.node = s.node AND e.seq = s.seq WHERE s.state = 'end' AND"
	" s.rc != 0 AND s.rank IS NULL ORDER BY 1, 2, 3",
    [SRQ_MANIFEST] = "SELECT key, value FROM session WHERE key IN"
		     " ('name', 'model', 'playbook', 'labels')",
    [SRQ_SERIES] = "SELECT id, node, card, metric FROM series ORDER BY id",
    [SRQ_FACTS] = "SELECT ts, key, 0, value FROM session WHERE key > 'facts/'"
		  " AND key < 'facts0' AND ts <= ?1 ORDER BY ts, key",
    [SRQ_NODES] = "SELECT node FROM nodes WHERE node != '" CONSOLE
		  "' ORDER BY node",
    /* the row values alone: the planner seeks events_ts (ts, then the
     * key) on both bounds (with `ts <= ?4` besides it sought on ts only
     * and stepped over the ties at a resume point every time) */
    [SRQ_LOG_RANGE] = "SELECT ts, node, seq, CASE WHEN instr(body, ?7) > 0"
		      " AND (?8 = '' OR node = ?8) THEN body END FROM events"
		      " WHERE (ts, node, seq) >= (?1, ?2, ?3)"
		      " AND (ts, node, seq) < (?4, ?5, ?6)"
		      " ORDER BY ts DESC, node DESC, seq DESC",
};

struct store_reader {
	char *path;
	sqlite3 *db;
	sqlite3_stmt *q[SRQ_COUNT];
};

static int rd_err(struct store_reader *rd, struct d0_err *err,
		  const char *what)
{
	return d0_errf(err, "%s: %s: %s", rd->path, what,
		       rd->db ? sqlite3_errmsg(rd->db) : "out of memory");
}

int store_reader_open(const char *path, struct store_reader **out,
		      struct d0_err *err)
{
	struct store_reader *rd = calloc(1, sizeof *rd);
	*out = NULL;
	if (!rd || !(rd->path = strdup(path))) {
		free(rd);
		return d0_errf(err, "%s: out of memory", path);
	}
	if (sqlite3_open_v2(path, &rd->db, SQLITE_OPEN_READONLY, NULL) !=
	    SQLITE_OK) {
		rd_err(rd, err, "opening");
		store_reader_close(rd);
		return -1;
	}
	sqlite3_busy_timeout(rd->db, 2000);
	/* A version-2 file (before `train`; read-only, so not upgraded) has
	 * no training steps: an empty TEMP table stands in for the query
	 * (only then: a TEMP table would shadow the file's own). */
	if (sqlite3_exec(rd->db,
			 "SELECT 1 FROM main.train LIMIT 0", NULL, NULL,
			 NULL) != SQLITE_OK &&
	    sqlite3_exec(rd->db,
			 "CREATE TEMP TABLE train(node TEXT, seq INTEGER,"
			 " ts INTEGER)",
			 NULL, NULL, NULL) != SQLITE_OK) {
		rd_err(rd, err, "preparing a query");
		store_reader_close(rd);
		return -1;
	}
	for (int k = 0; k < SRQ_COUNT; k++)
		if (sqlite3_prepare_v2(rd->db, rq_sql[k], -1, &rd->q[k], NULL) !=
		    SQLITE_OK) {
			rd_err(rd, err, "preparing a query");
			store_reader_close(rd);
			return -1;
		}
	*out = rd;
	return 0;
}

void store_reader_close(struct store_reader *rd)
{
	if (!rd)
		return;
	for (int k = 0; k < SRQ_COUNT; k++)
		sqlite3_finalize(rd->q[k]);
	sqlite3_close(rd->db);
	free(rd->path);
	free(rd);
}

/* The rows of st, bound, to row(); then reset. */
static int rd_rows(struct store_reader *rd, sqlite3_stmt *st,
		   int (*row)(void *arg, const struct store_row *r), void *arg,
		   struct d0_err *err)
{
	struct store_row r;
	int rc;
	r.ncols = sqlite3_column_count(st);
	if (r.ncols > STORE_ROW_COLS)
		r.ncols = STORE_ROW_COLS;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (int c = 0; c < r.ncols; c++) {
			r.null[c] = sqlite3_column_type(st, c) == SQLITE_NULL;
			r.i[c] = sqlite3_column_int64(st, c);
			r.d[c] = sqlite3_column_double(st, c);
			r.s[c] = (const char *)sqlite3_column_text(st, c);
			r.len[c] = (size_t)sqlite3_column_bytes(st, c);
		}
		if (row(arg, &r))
			break;
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return rd_err(rd, err, "reading");
	return 0;
}

int store_reader_each(struct store_reader *rd, enum store_rq q,
		      const int64_t *ib, int nib, const char *text,
		      int (*row)(void *arg, const struct store_row *r),
		      void *arg, struct d0_err *err)
{
	sqlite3_stmt *st = rd->q[q];
	if (text)
		sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
	else
		for (int k = 0; k < nib; k++)
			sqlite3_bind_int64(st, k + 1, ib[k]);
	return rd_rows(rd, st, row, arg, err);
}

int store_reader_log_range(struct store_reader *rd, int64_t lo_ts,
			   const char *lo_node, int64_t lo_seq, int64_t hi_ts,
			   const char *hi_node, int64_t hi_seq,
			   const char *text, const char *only_node,
			   int (*row)(void *arg, const struct store_row *r),
			   void *arg, struct d0_err *err)
{
	sqlite3_stmt *st = rd->q[SRQ_LOG_RANGE];
	sqlite3_bind_int64(st, 1, lo_ts);
	/* SQLITE_TRANSIENT: a caller's row() may rewrite what it passed
	 * while the rows come (log_search.c's walk moves its bound) */
	sqlite3_bind_text(st, 2, lo_node, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, lo_seq);
	sqlite3_bind_int64(st, 4, hi_ts);
	sqlite3_bind_text(st, 5, hi_node, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 6, hi_seq);
	sqlite3_bind_text(st, 7, text ? text : "", -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 8, only_node ? only_node : "", -1, SQLITE_TRANSIENT);
	return rd_rows(rd, st, row, arg, err);
}
