/*
 * store.h - the session store: one sqlite file per session.
 *
 * The console writes every event it receives into the store and draws the
 * screen from it; replay, reports and diffs read the same file.  The table
 * `events(node, seq, ts, type, body)` with PRIMARY KEY(node, seq) is the
 * source of truth; the derived tables (samples, stages, checks, comm,
 * numerics, perf, train) are filled from each event as it is ingested, in the same
 * transaction, so they can never disagree with it.  docs/store.md has the
 * schema and the queries.
 *
 * Guarantees:
 *   - the file is created 0600, in WAL mode, with its schema version in
 *     PRAGMA user_version; opening an older version runs the migrations,
 *     a newer one is refused;
 *   - ingest is batched: events accumulate in one transaction until
 *     store_commit() (or the batch size is reached); a crash or a full disk
 *     loses at most the uncommitted batch, never a committed one;
 *   - an event whose (node, seq) is already stored is dropped (the agent
 *     resends after reconnects); a seq beyond the next expected one opens a
 *     gap, recorded in `gaps` until the missing events arrive.
 *
 * Errors are values: functions return 0 (or a count) and -1 with err
 * filled; messages start with the database path.
 */
#ifndef DAY0_STORE_H
#define DAY0_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util.h"

#define STORE_SCHEMA_VERSION 3

struct store;

enum {
	STORE_CREATE = 1,   /* create the file if it does not exist */
	STORE_READONLY = 2, /* queries only */
};

/* Open (or create) the session file at path. */
int store_open(const char *path, int flags, struct store **out,
	       struct d0_err *err);
/* Commit the open batch (if any) and close; returns -1 if that failed. */
int store_close(struct store *s, struct d0_err *err);
const char *store_path(const struct store *s);

/* ------------------------------------------------------------------ ingest */

enum store_ingest_result {
	STORE_ADDED = 0,     /* new event, in the open batch */
	STORE_DUPLICATE = 1, /* (node, seq) already stored: dropped */
	STORE_CONFLICT = 2,  /* (node, seq) stored with another body: dropped */
};

/* What ingest has seen so far (for the console's status line). */
struct store_ingest_stats {
	uint64_t added, duplicates, rejected;
	uint64_t gaps_opened, gaps_filled;
	uint64_t committed; /* events in committed batches since open */
};

enum {
	STORE_EBAD = -1, /* the line is not an event: refused, batch intact */
	STORE_EDB = -2,	 /* database failure: the open batch was rolled back */
	STORE_EVERSION = -3, /* v is not the protocol's version: refused */
	STORE_ENODE = -4,    /* node is not the one it must be: refused */
};

/*
 * Add one event line (without or with its '\n').  The line must be a JSON
 * object with the protocol envelope (v, seq, ts, node, type); derived
 * fields of a wrong type are stored as NULL.  Returns STORE_ADDED,
 * STORE_DUPLICATE, STORE_EBAD or STORE_EDB (err says why).  Opens a
 * transaction if none is open and commits when the batch size is reached.
 */
int store_ingest(struct store *s, const char *line, size_t len,
		 struct d0_err *err);

/* What ingest saw of a line's envelope (for the caller's bookkeeping). */
struct store_line {
	int64_t seq;   /* 0 when the line has none */
	char node[64]; /* the node it names (truncated), "" when none */
};
/*
 * store_ingest for a line that arrived from node `from` (NULL: any node):
 * a line naming another node is refused with STORE_ENODE and never
 * stored; a (node, seq) stored with a different body gives
 * STORE_CONFLICT (an identical one STORE_DUPLICATE); a v other than the
 * protocol's STORE_EVERSION.  seen (may be NULL) gets the seq and node.
 */
int store_ingest_from(struct store *s, const char *line, size_t len,
		      const char *from, struct store_line *seen,
		      struct d0_err *err);
/*
 * Commit the open batch.  On failure (full disk, I/O error) the batch is
 * rolled back whole, the store stays usable and consistent with its last
 * committed batch, and err names the path and the cause.
 */
int store_commit(struct store *s, struct d0_err *err);
/* Events per automatic commit (default 8192; 0 = only store_commit). */
void store_set_batch(struct store *s, unsigned n);
/* Events in the open batch. */
unsigned store_pending(const struct store *s);
void store_stats(const struct store *s, struct store_ingest_stats *st);

/* ----------------------------------------------------------- audit, nodes */

struct store_node {
	char node[256];
	int64_t next_seq; /* one past the highest seq stored */
	int64_t events;	  /* events stored */
	int64_t gaps;	  /* open gaps (ranges of missing seq) */
	int64_t missing;  /* seqs inside open gaps */
};

/* Per-node summary, from the nodes table (no scan of events). */
int store_nodes(struct store *s, struct store_node **out, size_t *n,
		struct d0_err *err);
/* Committed seq per node: the highest seq with everything before it
 * stored (what the console acks). 0 when none. */
int64_t store_acked_seq(struct store *s, const char *node);
/* Open gaps: callback per range [first, last]; return non-zero to stop. */
int store_gaps(struct store *s,
	       int (*cb)(void *arg, const char *node, int64_t first,
			 int64_t last),
	       void *arg, struct d0_err *err);
/*
 * Full audit (scans events): every node's seqs are 1..max exactly once,
 * the nodes table agrees, and PRAGMA integrity_check is ok.  Returns 0
 * when all hold; -1 with the first disagreement in err.
 */
int store_audit(struct store *s, struct d0_err *err);

/* ----------------------------------------------------------------- session */

/* The reproducibility manifest: key -> JSON value (playbook, inventory,
 * model, versions, hashes).  hello and facts events fill agent/NODE and
 * facts/NODE themselves. */
int store_session_set(struct store *s, const char *key, json_t *value,
		      struct d0_err *err);
/* New reference, or NULL when absent (err empty) or on error. */
json_t *store_session_get(struct store *s, const char *key, struct d0_err *err);

/* ----------------------------------------------------------------- queries */

struct store_event {
	const char *node;
	int64_t seq, ts;
	const char *type;
	const char *body; /* the event line as received */
	size_t body_len;
};

/*
 * Events with from_ts <= ts < to_ts in (ts, node, seq) order, through the
 * ts index; cb returns non-zero to stop (that value is returned).  Replay
 * reads this and waits out the ts differences at its chosen speed.
 */
int store_events(struct store *s, int64_t from_ts, int64_t to_ts,
		 int (*cb)(void *arg, const struct store_event *ev), void *arg,
		 struct d0_err *err);

struct store_sample {
	int64_t ts;
	double value;
};

/* One card's samples of one metric with from_ts <= ts < to_ts, in order
 * (index on (node, card, metric, ts)). */
int store_samples(struct store *s, const char *node, int card,
		  const char *metric, int64_t from_ts, int64_t to_ts,
		  int (*cb)(void *arg, const struct store_sample *smp),
		  void *arg, struct d0_err *err);

/*
 * The state at time t (everything with ts <= t): for every series
 * (node, card, metric) its last sample, for every (node, item) the last
 * check, for every (node, stage_id/stage, rank) the last stage event.
 * Samples come from one index seek per series (the series table lists
 * them), never a scan of samples.  Returns a new object:
 *   {"t":T, "samples":[{"node","card","metric","ts","value"}...],
 *    "checks":[{"node","item","status","detail","ts",...}...],
 *    "stages":[{"node","stage_id","stage","rank","state","progress","rc",
 *               "msg","ts"}...]}
 */
json_t *store_state_at(struct store *s, int64_t t, struct d0_err *err);

/*
 * The checklist's evidence (evidence.c): the last check per (item, stage,
 * subject node, rank), as an array of {"item", "stage", "node", "rank",
 * "status", "detail", "value", "threshold", "ts"} (stage "" when the check
 * names none; value/threshold JSON text back as JSON).  NULL on error.
 */
json_t *store_evidence(struct store *s, struct d0_err *err);
/* What became of each playbook stage, from the console's own stage
 * events: {"STAGE_ID": "running" | its end's result ("done", "failed",
 * "skipped", ...)}.  NULL on error. */
json_t *store_stage_outcomes(struct store *s, struct d0_err *err);
/* The weights' checksums a session recorded: verify's per-shard SHA-256
 * (its weights.integrity check's "sha256") and any weights.* check with a
 * text value, as [{"node", "stage_id", "item" (the shard), "value"}]. */
json_t *store_checksums(struct store *s, struct d0_err *err);

/*
 * The questions the report (and what is built on it: diff, ls) asks a
 * session file, by name: the SQL is the store's (report_queries.c), the
 * console never touches a table.  Rows come back as objects named by the
 * result columns; binds are text (tb[i], NULL: SQL NULL) unless tb is NULL
 * or tb[i] is NULL and ib is given (ib[i] integer).
 */
enum store_query {
	STORE_Q_FIRST_TS, /* first event ts */
	STORE_Q_LAST_TS, /* last event ts */
	STORE_Q_NODE_EVENTS, /* node, events per node */
	STORE_Q_SESSION_KEYS, /* every manifest key */
	STORE_Q_PLAN_CHECKS, /* memory.plan checks with their plan object */
	STORE_Q_PLAN_STAGES, /* plan stages per node: time range */
	STORE_Q_STAGE_LOG, /* ?1..?2 ts, ?3 node, ?4 stage_id: its log lines */
	STORE_Q_PLAN_END, /* ?1 node, ?2 stage_id: the plan stage end */
	STORE_Q_MEM_SERIES, /* the memory series */
	STORE_Q_SERIES_LAST, /* ?1 series: its last value */
	STORE_Q_SERIES_MAX, /* ?1 series: its largest value */
	STORE_Q_SERIES_SPAN, /* ?1 series: count and ts range */
	STORE_Q_SERIES_THINNED, /* ?1 series in ?3-wide buckets from ?2 */
	STORE_Q_SERIES_POINTS, /* ?1 series, every point */
	STORE_Q_COMMANDS_RUN, /* the agents' own stage starts */
	STORE_Q_COMM_SWEEP, /* comm sweep rows */
	STORE_Q_COMM_RUNTIME, /* comm in-run totals */
	STORE_Q_COMM_PAIRS, /* comm pair rows */
	STORE_Q_NUMERICS, /* numerics rows */
	STORE_Q_PERF, /* perf rows */
	STORE_Q_SERVICE, /* load's levels: perf rows with a concurrency */
	STORE_Q_DIFF_PERF, /* perf rows with their spread and load level */
	STORE_Q_DIFF_COMM, /* comm sweep rows with their busbw spread */
	STORE_Q_DIFF_MEM_STEP, /* per card: peak minus the second-highest sample */
	STORE_Q_TEXT_GENERATION, /* text.generation's texts (validate's check) */
	STORE_Q_REFUSED, /* console alerts of kind protocol/rate per (node, reason) */
	STORE_Q_TIMELINE, /* the operator's markers, warnings, cancels, reruns and stages not done, in time order */
	STORE_Q_TRAIN, /* train rows (fine-tuning steps) by run, rank, step */
	STORE_Q_IMAGE, /* the image channel's checks with perf.image's TTFT split */
	STORE_Q_COUNT
};
json_t *store_query(struct store *s, enum store_query q, int nb,
		    const char *const *tb, const int64_t *ib, struct d0_err *err);
/* The first column of the first row as an integer, or dflt. */
int64_t store_query_int(struct store *s, enum store_query q, int64_t dflt);

#endif
