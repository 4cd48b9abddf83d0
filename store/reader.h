/*
 * reader.h - a session file opened read-only for replay: the questions the
 * view asks while seeking and folding (store/reader.c owns their SQL; the
 * console never touches a table).  Rows come back through a callback as
 * plain columns, so the view's fold stays in tui/ and the SQL in store/.
 */
#ifndef DAY0_STORE_READER_H
#define DAY0_STORE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum store_rq {
	SRQ_SPAN,     /* first ts, last ts */
	SRQ_HISTORY,  /* ?1 series, ?2 t, ?3 limit: ts, value (newest first) */
	SRQ_SPARSE,   /* ?1 t: ts, node, seq, body of stages, checks, comm,
			 numerics, perf, train and the console's own
			 events */
	SRQ_LOG,      /* ?1 t, ?2 limit: ts, body (newest first) */
	SRQ_FORWARD,  /* ?1 from (excluded), ?2 to: body in order */
	SRQ_FIRST_TS, /* text ?1 node: its first ts */
	SRQ_MARKS,    /* ts, node, seq, body: markers, failed checks and
			 failed stage ends */
	SRQ_MANIFEST, /* key, value of name, model, playbook, labels */
	SRQ_SERIES,   /* id, node, card, metric */
	SRQ_NODES,    /* node (the console excluded) */
	SRQ_FACTS,    /* ?1 t: ts, key, 0, body of each node's last facts
			 event, when at or before t (the session table keeps
			 the last one per node: facts.compat, docs/compat.md) */
	SRQ_LOG_RANGE, /* store_reader_log_range's */
	SRQ_COUNT
};

#define STORE_ROW_COLS 4
struct store_row {
	int ncols;
	int64_t i[STORE_ROW_COLS];
	double d[STORE_ROW_COLS];
	int null[STORE_ROW_COLS];
	const char *s[STORE_ROW_COLS]; /* valid during the callback only */
	size_t len[STORE_ROW_COLS];
};

struct store_reader;
int store_reader_open(const char *path, struct store_reader **out,
		      struct d0_err *err);
void store_reader_close(struct store_reader *rd);
/*
 * Run q with integer binds ib[0..nib) (or, when text is non-NULL, that one
 * text bind) and call row() for each row; row() returning non-zero stops.
 * Returns 0, or -1 with err naming the file and what failed.
 */
int store_reader_each(struct store_reader *rd, enum store_rq q,
		      const int64_t *ib, int nib, const char *text,
		      int (*row)(void *arg, const struct store_row *r),
		      void *arg, struct d0_err *err);

/*
 * The Log screen's filter past its ring: the events in [lo, hi) in
 * (ts, node, seq) order, newest first; row() gets ts, node, seq and the
 * body where the line contains text ("" any) and, when only_node is not
 * "", is that node's, else a NULL body (every row comes back, so that a
 * caller can stop after so many rows and go on later from the last one).
 * row() returning non-zero stops.  0, or -1 with err.
 */
int store_reader_log_range(struct store_reader *rd, int64_t lo_ts,
			   const char *lo_node, int64_t lo_seq, int64_t hi_ts,
			   const char *hi_node, int64_t hi_seq,
			   const char *text, const char *only_node,
			   int (*row)(void *arg, const struct store_row *r),
			   void *arg, struct d0_err *err);
#endif
