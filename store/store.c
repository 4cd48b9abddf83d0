/*
 * store.c - the session store (see store.h for the contract and
 * docs/store.md for the schema).
 *
 * How the pieces fit:
 *   - open: the file is created 0600 by us (sqlite would use 0644) before
 *     sqlite opens it; WAL; application_id marks it as a day0 session and
 *     user_version holds the schema version, upgraded by `migrations`;
 *   - ingest: one allocation-free scan of the line (engine/json_scan.c) and
 *     the protocol's one envelope check (proto_envelope_scan), then
 *     prepared statements: the
 *     event row (INSERT OR IGNORE: a stored (node, seq) is a duplicate), the
 *     node's seq bookkeeping (gaps), and the type's derived row; all inside
 *     the open batch transaction;
 *   - commit: the per-node counters are written to `nodes` in the same
 *     transaction; if COMMIT fails the whole batch is rolled back and the
 *     in-memory bookkeeping is reloaded from the file, so memory and disk
 *     never disagree about what is stored.
 */
#include "store.h"
#include "proto.h"
#include "json_scan.h"
#include "checklist.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STORE_APP_ID 0x64617930 /* "day0" */

/* The `train` table's columns (migration 2 -> 3).  A read-only open of a
 * version-2 file, which cannot be upgraded, gets an empty TEMP table of the
 * same shape: the file predates training events, and every query that
 * names the table still runs. */
#define TRAIN_COLUMNS                                                          \
	"(node TEXT NOT NULL, seq INTEGER NOT NULL, ts INTEGER NOT NULL,"      \
	"  stage_id TEXT, rank INTEGER, layout TEXT, step INTEGER, loss REAL," \
	"  grad_norm REAL, loss_scale REAL, skipped INTEGER, lr REAL,"        \
	"  tokens INTEGER, t_fwd_s REAL, t_bwd_s REAL, t_opt_s REAL,"         \
	"  t_comm_s REAL, PRIMARY KEY(node, seq)) WITHOUT ROWID"

/*
 * migrations[i] takes a file from schema version i to i + 1; a new file
 * runs them all.  Never edit a shipped entry: append one.
 */
static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE events(node TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL,"
    "  PRIMARY KEY(node, seq)) WITHOUT ROWID;"
    "CREATE INDEX events_ts ON events(ts);"
    "CREATE TABLE nodes(node TEXT PRIMARY KEY, next_seq INTEGER NOT NULL,"
    "  events INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE gaps(node TEXT NOT NULL, first INTEGER NOT NULL,"
    "  last INTEGER NOT NULL, ts INTEGER NOT NULL,"
    "  PRIMARY KEY(node, first)) WITHOUT ROWID;"
    "CREATE TABLE series(id INTEGER PRIMARY KEY, node TEXT NOT NULL,"
    "  card INTEGER NOT NULL, metric TEXT NOT NULL,"
    "  UNIQUE(node, card, metric));"
    "CREATE TABLE sample_points(series INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, seq INTEGER NOT NULL, value REAL,"
    "  PRIMARY KEY(series, ts, seq)) WITHOUT ROWID;"
    "CREATE VIEW samples(ts, node, card, metric, value, seq) AS"
    "  SELECT p.ts, s.node, s.card, s.metric, p.value, p.seq"
    "  FROM sample_points p JOIN series s ON s.id = p.series;"
    "CREATE TABLE stages(node TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, stage_id TEXT, stage TEXT, rank INTEGER,"
    "  state TEXT, progress REAL, rc INTEGER, msg TEXT,"
    "  PRIMARY KEY(node, seq)) WITHOUT ROWID;"
    "CREATE TABLE checks(node TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, item TEXT, status TEXT, detail TEXT, value,"
    "  threshold, rank INTEGER, stage_id TEXT,"
    "  PRIMARY KEY(node, seq)) WITHOUT ROWID;"
    "CREATE INDEX checks_item ON checks(item, node);"
    "CREATE TABLE comm(node TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, op TEXT, bytes INTEGER, ranks INTEGER,"
    "  time_us REAL, algbw REAL, busbw REAL, wrong INTEGER, \"group\" TEXT,"
    "  rank INTEGER, stage_id TEXT, PRIMARY KEY(node, seq)) WITHOUT ROWID;"
    "CREATE TABLE numerics(node TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, level TEXT, name TEXT, max_abs REAL,"
    "  max_rel REAL, kl REAL, top1 REAL, ppl_ref REAL, ppl REAL,"
    "  rank INTEGER, stage_id TEXT, PRIMARY KEY(node, seq)) WITHOUT ROWID;"
    "CREATE TABLE perf(node TEXT NOT NULL, seq INTEGER NOT NULL,"
    "  ts INTEGER NOT NULL, ttft_ms REAL, tpot_ms REAL, tokens_per_s REAL,"
    "  prompt_tokens INTEGER, gen_tokens INTEGER, rank INTEGER,"
    "  stage_id TEXT, PRIMARY KEY(node, seq)) WITHOUT ROWID;"
    "CREATE TABLE session(key TEXT PRIMARY KEY, value TEXT NOT NULL,"
    "  ts INTEGER NOT NULL) WITHOUT ROWID;",
    /* 1 -> 2: evidence per (item, stage, node).  `stage` is the playbook
     * stage (stage_id without the runner's ".N" attempt suffix), `subject`
     * the node the check is about (the console's `for`, else the node). */
    "ALTER TABLE checks ADD COLUMN stage TEXT;"
    "ALTER TABLE checks ADD COLUMN subject TEXT;"
    "UPDATE checks SET subject = coalesce((SELECT json_extract(e.body,"
    "  '$.for') FROM events e WHERE e.node = checks.node AND"
    "  e.seq = checks.seq), node),"
    "  stage = CASE WHEN substr(rtrim(stage_id, '0123456789'), -1) = '.'"
    "  AND length(rtrim(stage_id, '0123456789')) > 1"
    "  AND CAST(substr(stage_id, length(rtrim(stage_id, '0123456789')) + 1)"
    "  AS INTEGER) >= 2"
    "  THEN substr(stage_id, 1, length(rtrim(stage_id, '0123456789')) - 1)"
    "  ELSE stage_id END;"
    "CREATE INDEX checks_evidence ON checks(item, stage, subject, rank);",
    /* 2 -> 3: fine-tuning steps (`train` events, docs/training.md). */
    "CREATE TABLE train" TRAIN_COLUMNS ";",
};
#define N_MIGRATIONS (sizeof migrations / sizeof migrations[0])
_Static_assert(N_MIGRATIONS == STORE_SCHEMA_VERSION,
	       "one migration per schema version");

/* Prepared statements, by role. */
enum {
	Q_EVENT,
	Q_NODE_PUT,
	Q_GAP_ADD,
	Q_GAP_FIND,
	Q_GAP_DEL,
	Q_GAP_SET_FIRST,
	Q_GAP_SET_LAST,
	Q_SERIES,
	Q_SAMPLE,
	Q_SAMPLE_MANY,
	Q_EVENT_MANY,
	Q_STAGE,
	Q_CHECK,
	Q_COMM,
	Q_NUMERICS,
	Q_PERF,
	Q_TRAIN,
	Q_SESSION_PUT,
	Q_EVENT_BODY,
	Q_COUNT
};

static const char *const query_sql[Q_COUNT] = {
    [Q_EVENT] = "INSERT OR IGNORE INTO events(node, seq, ts, type, body) "
		"VALUES(?1, ?2, ?3, ?4, ?5)",
    [Q_EVENT_BODY] = "SELECT body FROM events WHERE node = ?1 AND seq = ?2",
    [Q_NODE_PUT] = "INSERT OR REPLACE INTO nodes(node, next_seq, events) "
		   "VALUES(?1, ?2, ?3)",
    [Q_GAP_ADD] = "INSERT INTO gaps(node, first, last, ts) "
		  "VALUES(?1, ?2, ?3, ?4)",
    [Q_GAP_FIND] = "SELECT first, last FROM gaps WHERE node = ?1 AND "
		   "first <= ?2 ORDER BY first DESC LIMIT 1",
    [Q_GAP_DEL] = "DELETE FROM gaps WHERE node = ?1 AND first = ?2",
    [Q_GAP_SET_FIRST] = "UPDATE gaps SET first = ?3 WHERE node = ?1 AND "
			"first = ?2",
    [Q_GAP_SET_LAST] = "UPDATE gaps SET last = ?3 WHERE node = ?1 AND "
		       "first = ?2",
    [Q_SERIES] = "INSERT INTO series(node, card, metric) "
		 "VALUES(?1, ?2, ?3)",
    [Q_SAMPLE] = "INSERT OR IGNORE INTO sample_points(series, ts, seq, "
		 "value) VALUES(?1, ?2, ?3, ?4)",
    [Q_SAMPLE_MANY] = NULL, /* built by many_sql() */
    [Q_EVENT_MANY] = NULL,
    [Q_STAGE] = "INSERT OR IGNORE INTO stages(node, seq, ts, stage_id, "
		"stage, rank, state, progress, rc, msg) "
		"VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [Q_CHECK] = "INSERT OR IGNORE INTO checks(node, seq, ts, item, status, "
		"detail, value, threshold, rank, stage_id, stage, subject) "
		"VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [Q_COMM] = "INSERT OR IGNORE INTO comm(node, seq, ts, op, bytes, "
	       "ranks, time_us, algbw, busbw, wrong, \"group\", rank, "
	       "stage_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
	       "?11, ?12, ?13)",
    [Q_NUMERICS] = "INSERT OR IGNORE INTO numerics(node, seq, ts, level, "
		   "name, max_abs, max_rel, kl, top1, ppl_ref, ppl, rank, "
		   "stage_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
		   "?10, ?11, ?12, ?13)",
    [Q_PERF] = "INSERT OR IGNORE INTO perf(node, seq, ts, ttft_ms, "
	       "tpot_ms, tokens_per_s, prompt_tokens, gen_tokens, rank, "
	       "stage_id) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    [Q_TRAIN] = "INSERT OR IGNORE INTO train(node, seq, ts, stage_id, rank, "
		"layout, step, loss, grad_norm, loss_scale, skipped, lr, tokens, "
		"t_fwd_s, t_bwd_s, t_opt_s, t_comm_s) VALUES(?1, ?2, ?3, ?4, ?5, "
		"?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    [Q_SESSION_PUT] = "INSERT OR REPLACE INTO session(key, value, ts) "
		      "VALUES(?1, ?2, ?3)",
};

/* Rows per block insert of samples and of new events. */
#define SAMPLES_PER_INSERT 128
#define EVENTS_PER_INSERT  64

/* "INSERT OR IGNORE INTO table(cols) VALUES (?,..),(?,..)..." */
static char *many_sql(const char *table_cols, int ncols, int rows)
{
	size_t cap =
	    64 + strlen(table_cols) + (size_t)rows * (size_t)(ncols * 2 + 3);
	char *sql = malloc(cap);
	size_t n;
	if (!sql)
		abort();
	n = (size_t)snprintf(sql, cap, "INSERT OR IGNORE INTO %s VALUES ",
			     table_cols);
	for (int r = 0; r < rows; r++) {
		n += (size_t)snprintf(sql + n, cap - n, "%s(", r ? "," : "");
		for (int c = 0; c < ncols; c++)
			n += (size_t)snprintf(sql + n, cap - n, "%s?",
					      c ? "," : "");
		n += (size_t)snprintf(sql + n, cap - n, ")");
	}
	return sql;
}

/* Seq bookkeeping of one node; `c_` fields are the committed values. */
struct node_state {
	char *node;
	int64_t next_seq, events;
	int64_t c_next_seq, c_events;
	int dirty;
};

/* A series (node, card, metric) and its id in the series table. */
struct series {
	uint64_t hash; /* 0: free slot */
	int64_t id, card;
	char *node, *metric;
};

/* A sample waiting for the batch's sorted insert (see flush_samples). */
struct sample_row {
	int64_t series, ts, seq;
	double value;
	int has_value;
};

/* A new event waiting for the block insert (see flush_events). */
struct event_row {
	const char *node; /* the node_state's string */
	int64_t seq, ts;
	size_t type_off, type_len, body_off, body_len; /* in evtext */
};

struct store {
	sqlite3 *db;
	char *path;
	int readonly;
	sqlite3_stmt *q[Q_COUNT];
	int in_txn;
	unsigned pending, batch;
	struct node_state *nodes;
	size_t nnodes, last_node, capnodes;
	/* node name -> index + 1, open addressing, at most half full (a
	 * fleet's lines each look their node up) */
	uint32_t *node_hash;
	size_t node_hcap;
	struct series *series; /* open addressing, power-of-two capacity */
	size_t series_cap, series_n;
	struct event_row *evq; /* new events not yet inserted */
	size_t nevq, capevq;
	char *evtext; /* their type and body text */
	size_t evtext_len, evtext_cap;
	struct sample_row *samp; /* samples of the open batch */
	size_t nsamp, capsamp;
	char *scratch; /* decoded strings of the event being ingested */
	size_t scratch_cap, scratch_len;
	struct store_ingest_stats stats;
};

/* ---------------------------------------------------------------- helpers */

static int db_err(struct store *s, struct d0_err *err, const char *what)
{
	return d0_errf(err, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static int exec_sql(struct store *s, const char *sql, struct d0_err *err)
{
	char *msg = NULL;
	if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		d0_errf(err, "%s: %s", s->path, msg ? msg : "sqlite error");
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

static int64_t pragma_int(struct store *s, const char *sql, int *ok)
{
	sqlite3_stmt *st;
	int64_t v = 0;
	*ok = 0;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
		return 0;
	if (sqlite3_step(st) == SQLITE_ROW) {
		v = sqlite3_column_int64(st, 0);
		*ok = 1;
	}
	sqlite3_finalize(st);
	return v;
}

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* ---------------------------------------------------------- open / close */

static int migrate(struct store *s, struct d0_err *err)
{
	int ok;
	int64_t ver = pragma_int(s, "PRAGMA user_version", &ok);
	int64_t app = pragma_int(s, "PRAGMA application_id", &ok);
	char sql[64];
	if (!ok)
		return db_err(s, err, "reading the schema version");
	if (ver > STORE_SCHEMA_VERSION)
		return d0_errf(err,
			       "%s: schema version %lld is newer than this "
			       "day0 knows (%d): use a newer day0",
			       s->path, (long long)ver, STORE_SCHEMA_VERSION);
	if (ver > 0 && app != STORE_APP_ID)
		return d0_errf(err,
			       "%s: not a day0 session file "
			       "(application_id %lld)",
			       s->path, (long long)app);
	if (ver == STORE_SCHEMA_VERSION)
		return 0;
	if (ver == 0) {
		/* A new file, or a sqlite file someone else made? */
		int64_t tables =
		    pragma_int(s, "SELECT count(*) FROM sqlite_schema", &ok);
		if (!ok)
			return db_err(s, err, "reading the schema");
		if (tables > 0)
			return d0_errf(err,
				       "%s: not a day0 session file (it "
				       "has tables but no day0 schema)",
				       s->path);
	}
	if (s->readonly && ver == 2)
		return exec_sql(s, "CREATE TEMP TABLE train" TRAIN_COLUMNS, err);
	if (s->readonly)
		return d0_errf(err,
			       "%s: schema version %lld needs an upgrade; "
			       "open it read-write once",
			       s->path, (long long)ver);
	if (exec_sql(s, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	for (int64_t v = ver; v < STORE_SCHEMA_VERSION; v++)
		if (exec_sql(s, migrations[v], err) < 0)
			goto fail;
	snprintf(sql, sizeof sql, "PRAGMA application_id = %d", STORE_APP_ID);
	if (exec_sql(s, sql, err) < 0)
		goto fail;
	snprintf(sql, sizeof sql, "PRAGMA user_version = %d",
		 STORE_SCHEMA_VERSION);
	if (exec_sql(s, sql, err) < 0 || exec_sql(s, "COMMIT", err) < 0)
		goto fail;
	return 0;
fail:
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	return -1;
}

static struct node_state *node_get(struct store *s, const char *node,
				   int create);
static int load_series(struct store *s, struct d0_err *err);
static void series_clear(struct store *s);

/* Load the per-node counters (after open and after a rollback). */
static int load_nodes(struct store *s, struct d0_err *err)
{
	sqlite3_stmt *st;
	int rc;
	for (size_t i = 0; i < s->nnodes; i++)
		free(s->nodes[i].node);
	s->nnodes = s->last_node = 0;
	if (s->node_hcap)
		memset(s->node_hash, 0, s->node_hcap * sizeof *s->node_hash);
	if (sqlite3_prepare_v2(s->db,
			       "SELECT node, next_seq, events FROM nodes", -1,
			       &st, NULL) != SQLITE_OK)
		return db_err(s, err, "reading nodes");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct node_state *n =
		    node_get(s, (const char *)sqlite3_column_text(st, 0), 1);
		n->next_seq = n->c_next_seq = sqlite3_column_int64(st, 1);
		n->events = n->c_events = sqlite3_column_int64(st, 2);
		n->dirty = 0;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return db_err(s, err, "reading nodes");
	/* Series inserted by a rolled-back batch are gone: reload them. */
	return load_series(s, err);
}

int store_open(const char *path, int flags, struct store **out,
	       struct d0_err *err)
{
	struct store *s = calloc(1, sizeof *s);
	int oflags;
	*out = NULL;
	if (!s)
		return d0_errf(err, "%s: out of memory", path);
	s->path = strdup(path);
	s->readonly = (flags & STORE_READONLY) != 0;
	s->batch = 8192;
	if (!s->readonly && (flags & STORE_CREATE)) {
		/* sqlite would create it 0644: make it ours, 0600, first. */
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0) {
			d0_errf(err, "%s: %s", path, strerror(errno));
			goto fail;
		}
		close(fd);
	}
	oflags = s->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
	if (sqlite3_open_v2(path, &s->db, oflags | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		d0_errf(err, "%s: %s", path,
			s->db ? sqlite3_errmsg(s->db) : "cannot open");
		goto fail;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, 5000);
	/* Any first statement tells a non-database file apart. */
	if (exec_sql(s, "PRAGMA cache_size = -65536", err) < 0)
		goto fail;
	if (!s->readonly) {
		int ok;
		sqlite3_stmt *st;
		if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1,
				       &st, NULL) != SQLITE_OK) {
			db_err(s, err, "setting WAL mode");
			goto fail;
		}
		ok = sqlite3_step(st) == SQLITE_ROW &&
		     !strcmp((const char *)sqlite3_column_text(st, 0), "wal");
		sqlite3_finalize(st);
		if (!ok) {
			d0_errf(err, "%s: cannot use WAL mode (%s)", path,
				sqlite3_errmsg(s->db));
			goto fail;
		}
		/* WAL + NORMAL: a committed batch survives a process crash;
		 * after power loss at most the last batches roll back, the
		 * file is never corrupt. */
		/* Checkpoints sync the file: one per 64 MiB of WAL rather than
		 * sqlite's 4 MiB keeps ingest from waiting on the disk. */
		if (exec_sql(s, "PRAGMA synchronous = NORMAL", err) < 0 ||
		    exec_sql(s, "PRAGMA wal_autocheckpoint = 16384", err) < 0)
			goto fail;
	}
	if (migrate(s, err) < 0)
		goto fail;
	if (!s->readonly)
		for (int i = 0; i < Q_COUNT; i++) {
			char *sql = NULL;
			int rc;
			if (i == Q_SAMPLE_MANY)
				sql = many_sql("sample_points(series, ts, seq, "
					       "value)",
					       4, SAMPLES_PER_INSERT);
			else if (i == Q_EVENT_MANY)
				sql = many_sql("events(node, seq, ts, type, "
					       "body)",
					       5, EVENTS_PER_INSERT);
			rc = sqlite3_prepare_v3(s->db, sql ? sql : query_sql[i],
						-1, SQLITE_PREPARE_PERSISTENT,
						&s->q[i], NULL);
			free(sql);
			if (rc != SQLITE_OK) {
				db_err(s, err, "preparing statements");
				goto fail;
			}
		}
	if (load_nodes(s, err) < 0)
		goto fail;
	*out = s;
	return 0;
fail:
	store_close(s, NULL);
	return -1;
}

const char *store_path(const struct store *s)
{
	return s->path;
}

int store_close(struct store *s, struct d0_err *err)
{
	int rc = 0;
	if (!s)
		return 0;
	if (s->in_txn)
		rc = store_commit(s, err);
	for (int i = 0; i < Q_COUNT; i++)
		sqlite3_finalize(s->q[i]);
	if (s->db)
		sqlite3_close(s->db);
	for (size_t i = 0; i < s->nnodes; i++)
		free(s->nodes[i].node);
	free(s->nodes);
	free(s->node_hash);
	series_clear(s);
	free(s->series);
	free(s->scratch);
	free(s->samp);
	free(s->evq);
	free(s->evtext);
	free(s->path);
	free(s);
	return rc;
}

/* ------------------------------------------------------------------ ingest */

/* The hash slot of node: its entry, or the empty slot where it goes. */
static uint32_t *node_slot(struct store *s, const char *node)
{
	size_t mask = s->node_hcap - 1, i;
	uint64_t h = fnv1a(0xcbf29ce484222325ULL, node, strlen(node));
	for (i = (size_t)h & mask; s->node_hash[i]; i = (i + 1) & mask)
		if (!strcmp(s->nodes[s->node_hash[i] - 1].node, node))
			break;
	return &s->node_hash[i];
}

static struct node_state *node_get(struct store *s, const char *node,
				   int create)
{
	uint32_t *slot = NULL;
	if (s->last_node < s->nnodes &&
	    !strcmp(s->nodes[s->last_node].node, node))
		return &s->nodes[s->last_node];
	if (s->node_hcap) {
		slot = node_slot(s, node);
		if (*slot) {
			s->last_node = *slot - 1;
			return &s->nodes[s->last_node];
		}
	}
	if (!create)
		return NULL;
	if (s->nnodes == s->capnodes) {
		size_t nc = s->capnodes ? 2 * s->capnodes : 16;
		struct node_state *na = realloc(s->nodes, nc * sizeof *na);
		if (!na)
			abort();
		s->nodes = na;
		s->capnodes = nc;
	}
	memset(&s->nodes[s->nnodes], 0, sizeof *s->nodes);
	s->nodes[s->nnodes].node = strdup(node);
	if (!s->nodes[s->nnodes].node)
		abort();
	s->nodes[s->nnodes].next_seq = s->nodes[s->nnodes].c_next_seq = 1;
	s->last_node = s->nnodes++;
	if (2 * s->nnodes > s->node_hcap) {
		size_t cap = s->node_hcap ? 2 * s->node_hcap : 64;
		free(s->node_hash);
		s->node_hash = calloc(cap, sizeof *s->node_hash);
		if (!s->node_hash)
			abort();
		s->node_hcap = cap;
		for (size_t i = 0; i < s->nnodes; i++)
			*node_slot(s, s->nodes[i].node) = (uint32_t)i + 1;
	} else {
		*slot = (uint32_t)s->nnodes;
	}
	return &s->nodes[s->last_node];
}

void store_set_batch(struct store *s, unsigned n)
{
	s->batch = n;
}

unsigned store_pending(const struct store *s)
{
	return s->pending;
}

void store_stats(const struct store *s, struct store_ingest_stats *st)
{
	*st = s->stats;
}

static int step_done(struct store *s, sqlite3_stmt *st, struct d0_err *err,
		     const char *what)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return db_err(s, err, what);
	return 0;
}

/* Text of a string member: its span, or decoded into the scratch buffer
 * (sized per event so that pointers stay valid until the event is done). */
static const char *member_text(struct store *s, const struct jmember *m,
			       size_t *len)
{
	char *out;
	if (!m->vesc) {
		*len = m->vlen;
		return m->val;
	}
	out = s->scratch + s->scratch_len;
	*len = jscan_str(m, out);
	s->scratch_len += *len + 1;
	return out;
}

static void bind_text(struct store *s, sqlite3_stmt *st, int i,
		      const struct jmember *m)
{
	if (m && m->kind == J_STR) {
		size_t len;
		const char *t = member_text(s, m, &len);
		sqlite3_bind_text(st, i, t, (int)len, SQLITE_STATIC);
	} else {
		sqlite3_bind_null(st, i);
	}
}

static void bind_int(sqlite3_stmt *st, int i, const struct jmember *m)
{
	if (m && m->kind == J_INT)
		sqlite3_bind_int64(st, i, jscan_int(m));
	else
		sqlite3_bind_null(st, i);
}

static void bind_num(sqlite3_stmt *st, int i, const struct jmember *m)
{
	if (m && (m->kind == J_INT || m->kind == J_REAL))
		sqlite3_bind_double(st, i, jscan_real(m));
	else
		sqlite3_bind_null(st, i);
}

/* Any JSON value: numbers and strings as themselves, null as NULL, the
 * rest (true, false, objects, arrays) as their JSON text. */
static void bind_any(struct store *s, sqlite3_stmt *st, int i,
		     const struct jmember *m)
{
	if (!m || m->kind == J_NULL)
		sqlite3_bind_null(st, i);
	else if (m->kind == J_INT)
		sqlite3_bind_int64(st, i, jscan_int(m));
	else if (m->kind == J_REAL)
		sqlite3_bind_double(st, i, jscan_real(m));
	else if (m->kind == J_STR)
		bind_text(s, st, i, m);
	else
		sqlite3_bind_text(st, i, m->val, (int)m->vlen, SQLITE_STATIC);
}

/* ----------------------------------------------------------------- series */

static uint64_t series_hash(const char *node, int64_t card, const char *metric,
			    size_t mlen)
{
	uint64_t h = fnv1a(0xcbf29ce484222325ULL, node, strlen(node) + 1);
	h = fnv1a(h, &card, sizeof card);
	h = fnv1a(h, metric, mlen);
	return h ? h : 1;
}

static struct series *series_slot(struct store *s, uint64_t h, const char *node,
				  int64_t card, const char *metric, size_t mlen)
{
	size_t mask = s->series_cap - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		struct series *e = &s->series[i];
		if (!e->hash)
			return e;
		if (e->hash == h && e->card == card && !strcmp(e->node, node) &&
		    strlen(e->metric) == mlen &&
		    !memcmp(e->metric, metric, mlen))
			return e;
	}
}

static void series_clear(struct store *s)
{
	for (size_t i = 0; i < s->series_cap; i++)
		if (s->series[i].hash) {
			free(s->series[i].node);
			free(s->series[i].metric);
		}
	if (s->series)
		memset(s->series, 0, s->series_cap * sizeof *s->series);
	s->series_n = 0;
}

static void series_put(struct store *s, int64_t id, const char *node,
		       int64_t card, const char *metric, size_t mlen)
{
	uint64_t h = series_hash(node, card, metric, mlen);
	struct series *e;
	if ((s->series_n + 1) * 2 > s->series_cap) {
		struct series *old = s->series;
		size_t oldcap = s->series_cap;
		s->series_cap = oldcap ? oldcap * 2 : 256;
		s->series = calloc(s->series_cap, sizeof *s->series);
		if (!s->series)
			abort();
		for (size_t i = 0; i < oldcap; i++)
			if (old[i].hash)
				*series_slot(s, old[i].hash, old[i].node,
					     old[i].card, old[i].metric,
					     strlen(old[i].metric)) = old[i];
		free(old);
	}
	e = series_slot(s, h, node, card, metric, mlen);
	if (e->hash)
		return;
	e->hash = h;
	e->id = id;
	e->card = card;
	e->node = strdup(node);
	e->metric = strndup(metric, mlen);
	if (!e->node || !e->metric)
		abort();
	s->series_n++;
}

static int load_series(struct store *s, struct d0_err *err)
{
	sqlite3_stmt *st;
	int rc;
	series_clear(s);
	if (sqlite3_prepare_v2(s->db,
			       "SELECT id, node, card, metric FROM series", -1,
			       &st, NULL) != SQLITE_OK)
		return db_err(s, err, "reading series");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		series_put(s, sqlite3_column_int64(st, 0),
			   (const char *)sqlite3_column_text(st, 1),
			   sqlite3_column_int64(st, 2),
			   (const char *)sqlite3_column_text(st, 3),
			   (size_t)sqlite3_column_bytes(st, 3));
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return db_err(s, err, "reading series");
	return 0;
}

/* The series id of (node, card, metric), added to the table when new. */
static int series_id(struct store *s, const char *node, int64_t card,
		     const char *metric, size_t mlen, int64_t *id,
		     struct d0_err *err)
{
	sqlite3_stmt *st;
	if (s->series_cap) {
		struct series *e =
		    series_slot(s, series_hash(node, card, metric, mlen), node,
				card, metric, mlen);
		if (e->hash) {
			*id = e->id;
			return 0;
		}
	}
	st = s->q[Q_SERIES];
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, card);
	sqlite3_bind_text(st, 3, metric, (int)mlen, SQLITE_STATIC);
	if (step_done(s, st, err, "adding a series") < 0)
		return -1;
	*id = sqlite3_last_insert_rowid(s->db);
	series_put(s, *id, node, card, metric, mlen);
	return 0;
}

/* ----------------------------------------------------------------- ingest */

#define F(k) jscan_get(j, k)

/* A check's evidence keys (?11 stage, ?12 subject): the playbook stage
 * its stage_id belongs to, and the node it is about. */
static void bind_evidence(struct store *s, sqlite3_stmt *st,
			  const struct jmember *sid, const struct jmember *who,
			  const char *node)
{
	if (sid && sid->kind == J_STR) {
		char id[256], stage[256];
		size_t len;
		const char *t = member_text(s, sid, &len);
		snprintf(id, sizeof id, "%.*s", (int)len, t);
		checklist_stage_of(id, stage, sizeof stage);
		sqlite3_bind_text(st, 11, stage, -1, SQLITE_TRANSIENT);
	} else {
		sqlite3_bind_null(st, 11);
	}
	if (who && who->kind == J_STR)
		bind_text(s, st, 12, who);
	else
		sqlite3_bind_text(st, 12, node, -1, SQLITE_STATIC);
}

/* The derived row of one new event. */
static int derive(struct store *s, const struct jscan *j, const char *node,
		  int64_t seq, int64_t ts, enum proto_event_kind kind,
		  const char *line, size_t len, struct d0_err *err)
{
	sqlite3_stmt *st;
	int q;
	if (kind == EV_SAMPLE) {
		const struct jmember *card = F("card"), *metric = F("metric");
		const struct jmember *v = F("value"), *vs = F("values");
		static double vals[PROTO_MAX_VALUES];
		const char *mtext;
		size_t mlen;
		int n = 1;
		if (!card || card->kind != J_INT || !metric ||
		    metric->kind != J_STR)
			return 0; /* stays in events; nothing to derive */
		/* `values`: one row per card, card .. card + n - 1. */
		if (!v && vs &&
		    (n = jscan_numbers(vs, vals, PROTO_MAX_VALUES)) < 1)
			return 0;
		mtext = member_text(s, metric, &mlen);
		for (int i = 0; i < n; i++) {
			struct sample_row *r;
			int64_t id;
			if (series_id(s, node, jscan_int(card) + i, mtext, mlen,
				      &id, err) < 0)
				return -1;
			if (s->nsamp == s->capsamp) {
				s->capsamp = s->capsamp ? s->capsamp * 2 : 1024;
				s->samp = realloc(s->samp,
						  s->capsamp * sizeof *s->samp);
				if (!s->samp)
					abort();
			}
			r = &s->samp[s->nsamp++];
			r->series = id;
			r->ts = ts;
			r->seq = seq;
			if (v) {
				r->has_value =
				    v->kind == J_INT || v->kind == J_REAL;
				r->value = r->has_value ? jscan_real(v) : 0;
			} else {
				r->has_value = 1;
				r->value = vals[i];
			}
		}
		return 0;
	}
	if (kind == EV_HELLO || kind == EV_FACTS) {
		char key[300];
		snprintf(key, sizeof key, "%s/%s",
			 kind == EV_HELLO ? "agent" : "facts", node);
		st = s->q[Q_SESSION_PUT];
		sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, line, (int)len, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, ts);
		return step_done(s, st, err, "recording the session");
	}
	switch (kind) {
	case EV_STAGE: q = Q_STAGE; break;
	case EV_CHECK: q = Q_CHECK; break;
	case EV_COMM: q = Q_COMM; break;
	case EV_NUMERICS: q = Q_NUMERICS; break;
	case EV_PERF: q = Q_PERF; break;
	case EV_TRAIN: q = Q_TRAIN; break;
	default: return 0;
	}
	st = s->q[q];
	sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, seq);
	sqlite3_bind_int64(st, 3, ts);
	switch (q) {
	case Q_STAGE:
		bind_text(s, st, 4, F("stage_id"));
		bind_text(s, st, 5, F("stage"));
		bind_int(st, 6, F("rank"));
		bind_text(s, st, 7, F("state"));
		bind_num(st, 8, F("progress"));
		bind_int(st, 9, F("rc"));
		bind_text(s, st, 10, F("msg"));
		break;
	case Q_CHECK:
		bind_text(s, st, 4, F("item"));
		bind_text(s, st, 5, F("status"));
		bind_text(s, st, 6, F("detail"));
		bind_any(s, st, 7, F("value"));
		bind_any(s, st, 8, F("threshold"));
		bind_int(st, 9, F("rank"));
		bind_text(s, st, 10, F("stage_id"));
		bind_evidence(s, st, F("stage_id"), F("for"), node);
		break;
	case Q_COMM:
		bind_text(s, st, 4, F("op"));
		bind_int(st, 5, F("bytes"));
		bind_int(st, 6, F("ranks"));
		bind_num(st, 7, F("time_us"));
		bind_num(st, 8, F("algbw"));
		bind_num(st, 9, F("busbw"));
		bind_int(st, 10, F("wrong"));
		bind_text(s, st, 11, F("group"));
		bind_int(st, 12, F("rank"));
		bind_text(s, st, 13, F("stage_id"));
		break;
	case Q_NUMERICS:
		bind_text(s, st, 4, F("level"));
		bind_text(s, st, 5, F("name"));
		bind_num(st, 6, F("max_abs"));
		bind_num(st, 7, F("max_rel"));
		bind_num(st, 8, F("kl"));
		bind_num(st, 9, F("top1"));
		bind_num(st, 10, F("ppl_ref"));
		bind_num(st, 11, F("ppl"));
		bind_int(st, 12, F("rank"));
		bind_text(s, st, 13, F("stage_id"));
		break;
	case Q_PERF:
		bind_num(st, 4, F("ttft_ms"));
		bind_num(st, 5, F("tpot_ms"));
		bind_num(st, 6, F("tokens_per_s"));
		bind_int(st, 7, F("prompt_tokens"));
		bind_int(st, 8, F("gen_tokens"));
		bind_int(st, 9, F("rank"));
		bind_text(s, st, 10, F("stage_id"));
		break;
	case Q_TRAIN:
		bind_text(s, st, 4, F("stage_id"));
		bind_int(st, 5, F("rank"));
		bind_text(s, st, 6, F("layout"));
		bind_int(st, 7, F("step"));
		bind_num(st, 8, F("loss"));
		bind_num(st, 9, F("grad_norm"));
		bind_num(st, 10, F("loss_scale"));
		bind_int(st, 11, F("skipped"));
		bind_num(st, 12, F("lr"));
		bind_int(st, 13, F("tokens"));
		bind_num(st, 14, F("t_fwd_s"));
		bind_num(st, 15, F("t_bwd_s"));
		bind_num(st, 16, F("t_opt_s"));
		bind_num(st, 17, F("t_comm_s"));
		break;
	}
	return step_done(s, st, err, "adding a derived row");
}

/* seq arrived for node n: advance next_seq, open or fill gaps. */
static int track_seq(struct store *s, struct node_state *n, int64_t seq,
		     int64_t ts, struct d0_err *err)
{
	sqlite3_stmt *st;
	n->dirty = 1;
	n->events++;
	if (seq == n->next_seq) {
		n->next_seq++;
		return 0;
	}
	if (seq > n->next_seq) {
		st = s->q[Q_GAP_ADD];
		sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, n->next_seq);
		sqlite3_bind_int64(st, 3, seq - 1);
		sqlite3_bind_int64(st, 4, ts);
		if (step_done(s, st, err, "recording a gap") < 0)
			return -1;
		s->stats.gaps_opened++;
		n->next_seq = seq + 1;
		return 0;
	}
	/* A new seq below next_seq fills (part of) a gap. */
	int64_t first = 0, last = -1;
	st = s->q[Q_GAP_FIND];
	sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, seq);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		first = sqlite3_column_int64(st, 0);
		last = sqlite3_column_int64(st, 1);
	}
	sqlite3_reset(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return db_err(s, err, "looking up a gap");
	if (rc == SQLITE_DONE || seq > last)
		return 0; /* not in a gap: cannot happen with a sane DB */
	s->stats.gaps_filled++;
	if (first == last) {
		st = s->q[Q_GAP_DEL];
		sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, first);
		return step_done(s, st, err, "closing a gap");
	}
	if (seq == first) {
		st = s->q[Q_GAP_SET_FIRST];
		sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, first);
		sqlite3_bind_int64(st, 3, seq + 1);
		return step_done(s, st, err, "shrinking a gap");
	}
	/* seq == last, or inside: shorten to [first, seq-1], then the rest. */
	st = s->q[Q_GAP_SET_LAST];
	sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, first);
	sqlite3_bind_int64(st, 3, seq - 1);
	if (step_done(s, st, err, "splitting a gap") < 0)
		return -1;
	if (seq == last)
		return 0;
	st = s->q[Q_GAP_ADD];
	sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, seq + 1);
	sqlite3_bind_int64(st, 3, last);
	sqlite3_bind_int64(st, 4, ts);
	return step_done(s, st, err, "splitting a gap");
}

/* Queue a new event for the block insert; its text is copied. */
static void queue_event(struct store *s, const char *node, int64_t seq,
			int64_t ts, const char *type, size_t tlen,
			const char *line, size_t len)
{
	struct event_row *r;
	if (s->nevq == s->capevq) {
		s->capevq = s->capevq ? s->capevq * 2 : EVENTS_PER_INSERT;
		s->evq = realloc(s->evq, s->capevq * sizeof *s->evq);
		if (!s->evq)
			abort();
	}
	if (s->evtext_len + tlen + len > s->evtext_cap) {
		while (s->evtext_len + tlen + len > s->evtext_cap)
			s->evtext_cap =
			    s->evtext_cap ? s->evtext_cap * 2 : 1 << 16;
		s->evtext = realloc(s->evtext, s->evtext_cap);
		if (!s->evtext)
			abort();
	}
	r = &s->evq[s->nevq++];
	r->node = node;
	r->seq = seq;
	r->ts = ts;
	r->type_off = s->evtext_len;
	r->type_len = tlen;
	memcpy(s->evtext + s->evtext_len, type, tlen);
	s->evtext_len += tlen;
	r->body_off = s->evtext_len;
	r->body_len = len;
	memcpy(s->evtext + s->evtext_len, line, len);
	s->evtext_len += len;
}

/* Insert the queued events, EVENTS_PER_INSERT rows per statement. */
static int flush_events(struct store *s, struct d0_err *err)
{
	size_t i = 0;
	while (i < s->nevq) {
		int many = s->nevq - i >= EVENTS_PER_INSERT;
		sqlite3_stmt *st = s->q[many ? Q_EVENT_MANY : Q_EVENT];
		int rows = many ? EVENTS_PER_INSERT : 1;
		for (int r = 0; r < rows; r++, i++) {
			const struct event_row *e = &s->evq[i];
			sqlite3_bind_text(st, 5 * r + 1, e->node, -1,
					  SQLITE_STATIC);
			sqlite3_bind_int64(st, 5 * r + 2, e->seq);
			sqlite3_bind_int64(st, 5 * r + 3, e->ts);
			sqlite3_bind_text(st, 5 * r + 4,
					  s->evtext + e->type_off,
					  (int)e->type_len, SQLITE_STATIC);
			sqlite3_bind_text(st, 5 * r + 5,
					  s->evtext + e->body_off,
					  (int)e->body_len, SQLITE_STATIC);
		}
		if (step_done(s, st, err, "adding events") < 0)
			return -1;
	}
	s->nevq = 0;
	s->evtext_len = 0;
	return 0;
}

static void rollback(struct store *s)
{
	struct d0_err ignored;
	if (!sqlite3_get_autocommit(s->db))
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
	s->in_txn = 0;
	s->pending = 0;
	s->nsamp = 0;
	s->nevq = 0;
	s->evtext_len = 0;
	for (int i = 0; i < Q_COUNT; i++)
		if (s->q[i])
			sqlite3_reset(s->q[i]);
	if (load_nodes(s, &ignored) < 0) {
		/* Cannot even read: fall back to the committed counters. */
		for (size_t i = 0; i < s->nnodes; i++) {
			s->nodes[i].next_seq = s->nodes[i].c_next_seq;
			s->nodes[i].events = s->nodes[i].c_events;
			s->nodes[i].dirty = 0;
		}
		series_clear(s); /* ids are re-read or re-added when needed */
	}
}

/* Roll back after a database failure; err keeps its cause and says so. */
static int batch_failed(struct store *s, unsigned lost, struct d0_err *err)
{
	char msg[sizeof err->msg] = "";
	if (err)
		memcpy(msg, err->msg, sizeof msg);
	rollback(s);
	if (err)
		snprintf(err->msg, sizeof err->msg,
			 "%.900s (the uncommitted batch of %u events was "
			 "rolled back)",
			 msg, lost);
	return STORE_EDB;
}

static int sample_cmp(const void *a, const void *b)
{
	const struct sample_row *x = a, *y = b;
	if (x->series != y->series)
		return x->series < y->series ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/*
 * Samples are inserted per batch, sorted by (series, ts, seq) and
 * SAMPLES_PER_INSERT rows per statement: consecutive rows land on the same
 * leaf pages, and the statement overhead is paid once per block.  This
 * halved the cost of the samples table in bench/store.sh.
 */
int store_flush__(struct store *s, struct d0_err *err);
int store_flush__(struct store *s, struct d0_err *err)
{
	size_t i = 0;
	if (flush_events(s, err) < 0)
		goto fail;
	if (!s->nsamp)
		return 0;
	qsort(s->samp, s->nsamp, sizeof *s->samp, sample_cmp);
	while (i < s->nsamp) {
		int many = s->nsamp - i >= SAMPLES_PER_INSERT;
		sqlite3_stmt *st = s->q[many ? Q_SAMPLE_MANY : Q_SAMPLE];
		int rows = many ? SAMPLES_PER_INSERT : 1;
		for (int r = 0; r < rows; r++, i++) {
			const struct sample_row *x = &s->samp[i];
			sqlite3_bind_int64(st, 4 * r + 1, x->series);
			sqlite3_bind_int64(st, 4 * r + 2, x->ts);
			sqlite3_bind_int64(st, 4 * r + 3, x->seq);
			if (x->has_value)
				sqlite3_bind_double(st, 4 * r + 4, x->value);
			else
				sqlite3_bind_null(st, 4 * r + 4);
		}
		if (step_done(s, st, err, "adding samples") < 0)
			goto fail;
	}
	s->nsamp = 0;
	return 0;
fail:
	batch_failed(s, s->pending, err);
	return -1;
}

int store_commit(struct store *s, struct d0_err *err)
{
	if (!s->in_txn)
		return 0;
	if (store_flush__(s, err) < 0)
		return -1; /* rolled back */
	for (size_t i = 0; i < s->nnodes; i++) {
		struct node_state *n = &s->nodes[i];
		sqlite3_stmt *st = s->q[Q_NODE_PUT];
		if (!n->dirty)
			continue;
		sqlite3_bind_text(st, 1, n->node, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, n->next_seq);
		sqlite3_bind_int64(st, 3, n->events);
		if (step_done(s, st, err, "updating nodes") < 0) {
			batch_failed(s, s->pending, err);
			return -1;
		}
	}
	if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		db_err(s, err, "committing");
		batch_failed(s, s->pending, err);
		return -1;
	}
	s->stats.committed += s->pending;
	s->in_txn = 0;
	s->pending = 0;
	for (size_t i = 0; i < s->nnodes; i++) {
		s->nodes[i].c_next_seq = s->nodes[i].next_seq;
		s->nodes[i].c_events = s->nodes[i].events;
		s->nodes[i].dirty = 0;
	}
	return 0;
}

static int bad_event(struct store *s, struct d0_err *err, const char *fmt,
		     const char *detail)
{
	s->stats.rejected++;
	return d0_errf(err, fmt, detail);
}

int store_ingest(struct store *s, const char *line, size_t len,
		 struct d0_err *err)
{
	return store_ingest_from(s, line, len, NULL, NULL, err);
}

/* A resent (node, seq): the same line, or another one under its seq? */
static int same_body(struct store *s, const char *node, size_t nlen,
		     int64_t seq, const char *line, size_t len)
{
	sqlite3_stmt *st = s->q[Q_EVENT_BODY];
	int same = 1;
	sqlite3_bind_text(st, 1, node, (int)nlen, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, seq);
	if (sqlite3_step(st) == SQLITE_ROW)
		same = (size_t)sqlite3_column_bytes(st, 0) == len &&
		       !memcmp(sqlite3_column_text(st, 0), line, len);
	sqlite3_reset(st);
	return same;
}

int store_ingest_from(struct store *s, const char *line, size_t len,
		      const char *from, struct store_line *seen,
		      struct d0_err *err)
{
	struct jscan j;
	struct proto_envelope env;
	struct d0_err why;
	const char *node, *type;
	size_t nlen, tlen;
	int64_t seq, ts;
	struct node_state *n;
	sqlite3_stmt *st;
	if (seen)
		memset(seen, 0, sizeof *seen);
	if (s->readonly)
		return d0_errf(err, "%s: opened read-only", s->path);
	while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	if (len > INT32_MAX)
		return bad_event(s, err, "event: %s", "line too long");
	if (json_scan_object(line, len, &j) < 0)
		return bad_event(s, err, "event: not a JSON object: %s", j.err);
	if (proto_envelope_scan(&j, &env, &why) < 0) {
		if (env.have_v && env.v != PROTO_VERSION) {
			s->stats.rejected++;
			d0_errf(err, "event: protocol version %lld (this console "
				"speaks %d)", (long long)env.v, PROTO_VERSION);
			return STORE_EVERSION;
		}
		return bad_event(s, err, "%s", why.msg);
	}
	const struct jmember *mnode = jscan_get(&j, "node"),
			     *mtype = jscan_get(&j, "type");
	/* Decoded strings never outgrow the line: one reservation per event
	 * keeps every pointer into the scratch buffer valid. */
	if (s->scratch_cap < len + 2 * JSCAN_MAX_MEMBERS + 2) {
		s->scratch_cap = len + 2 * JSCAN_MAX_MEMBERS + 2;
		free(s->scratch);
		s->scratch = malloc(s->scratch_cap);
		if (!s->scratch)
			abort();
	}
	s->scratch_len = 0;
	node = s->scratch;
	nlen = jscan_str(mnode, s->scratch);
	s->scratch_len = nlen + 1;
	type = s->scratch + s->scratch_len;
	tlen = jscan_str(mtype, s->scratch + s->scratch_len);
	s->scratch_len += tlen + 1;
	if (strlen(node) != nlen || strlen(type) != tlen)
		return bad_event(s, err, "event: %s", "NUL in node or type");
	seq = env.seq;
	ts = env.ts;
	if (env.type_esc) /* its kind from the decoded name, as jansson's */
		env.kind = proto_event_kind_of(type, tlen);
	if (seen) {
		seen->seq = seq;
		snprintf(seen->node, sizeof seen->node, "%s", node);
	}
	if (from && strcmp(from, node)) {
		s->stats.rejected++;
		d0_errf(err, "event: claims node '%.64s' on the link of node '%.64s'",
			node, from);
		return STORE_ENODE;
	}
	if (!s->in_txn) {
		if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) !=
		    SQLITE_OK) {
			db_err(s, err, "starting a batch");
			return STORE_EDB;
		}
		s->in_txn = 1;
	}
	n = node_get(s, node, 1);
	if (seq >= n->next_seq) {
		/* Beyond everything stored for the node: cannot be a
		 * duplicate, so it joins the block insert. */
		queue_event(s, n->node, seq, ts, type, tlen, line, len);
		if (s->nevq >= EVENTS_PER_INSERT && flush_events(s, err) < 0)
			return batch_failed(s, s->pending + 1, err);
	} else {
		/* Maybe a duplicate: ask the table, after the queued rows. */
		if (flush_events(s, err) < 0)
			return batch_failed(s, s->pending + 1, err);
		st = s->q[Q_EVENT];
		sqlite3_bind_text(st, 1, node, (int)nlen, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, seq);
		sqlite3_bind_int64(st, 3, ts);
		sqlite3_bind_text(st, 4, type, (int)tlen, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, line, (int)len, SQLITE_STATIC);
		if (step_done(s, st, err, "adding an event") < 0)
			return batch_failed(s, s->pending + 1, err);
		if (sqlite3_changes(s->db) == 0) {
			if (!same_body(s, node, nlen, seq, line, len)) {
				s->stats.rejected++;
				d0_errf(err, "event: seq %lld of node '%.64s' is "
					"stored with another body",
					(long long)seq, node);
				return STORE_CONFLICT;
			}
			s->stats.duplicates++;
			return STORE_DUPLICATE;
		}
	}
	if (track_seq(s, n, seq, ts, err) < 0 ||
	    derive(s, &j, node, seq, ts, env.kind, line, len, err) < 0)
		return batch_failed(s, s->pending + 1, err);
	s->pending++;
	s->stats.added++;
	if (s->batch && s->pending >= s->batch && store_commit(s, err) < 0)
		return STORE_EDB;
	return STORE_ADDED;
}

#undef F

/* ----------------------------------------------------------- audit, nodes */

int store_nodes(struct store *s, struct store_node **out, size_t *n,
		struct d0_err *err)
{
	sqlite3_stmt *st;
	size_t k = 0;
	int rc;
	*out = NULL;
	*n = 0;
	if (sqlite3_prepare_v2(
		s->db,
		"SELECT n.node, n.next_seq, n.events, "
		"(SELECT count(*) FROM gaps g WHERE g.node = n.node), "
		"(SELECT ifnull(sum(last - first + 1), 0) FROM gaps g "
		" WHERE g.node = n.node) FROM nodes n ORDER BY n.node",
		-1, &st, NULL) != SQLITE_OK)
		return db_err(s, err, "reading nodes");
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_node *a = realloc(*out, (k + 1) * sizeof **out);
		if (!a)
			abort();
		*out = a;
		snprintf(a[k].node, sizeof a[k].node, "%s",
			 (const char *)sqlite3_column_text(st, 0));
		a[k].next_seq = sqlite3_column_int64(st, 1);
		a[k].events = sqlite3_column_int64(st, 2);
		a[k].gaps = sqlite3_column_int64(st, 3);
		a[k].missing = sqlite3_column_int64(st, 4);
		k++;
	}
	sqlite3_finalize(st);
	*n = k;
	if (rc != SQLITE_DONE) {
		free(*out);
		*out = NULL;
		*n = 0;
		return db_err(s, err, "reading nodes");
	}
	return 0;
}

int64_t store_acked_seq(struct store *s, const char *node)
{
	sqlite3_stmt *st;
	int64_t v = 0;
	struct node_state *n = node_get(s, node, 0);
	if (!n)
		return 0;
	/* Below the first open gap, from the committed counters. */
	v = n->c_next_seq - 1;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT min(first) FROM gaps WHERE node = ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, node, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW &&
		    sqlite3_column_type(st, 0) != SQLITE_NULL) {
			int64_t g = sqlite3_column_int64(st, 0) - 1;
			if (g < v)
				v = g;
		}
		sqlite3_finalize(st);
	}
	return v;
}

int store_gaps(struct store *s,
	       int (*cb)(void *arg, const char *node, int64_t first,
			 int64_t last),
	       void *arg, struct d0_err *err)
{
	sqlite3_stmt *st;
	int rc, stop = 0;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT node, first, last FROM gaps "
			       "ORDER BY node, first",
			       -1, &st, NULL) != SQLITE_OK)
		return db_err(s, err, "reading gaps");
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
		stop = cb(arg, (const char *)sqlite3_column_text(st, 0),
			  sqlite3_column_int64(st, 1),
			  sqlite3_column_int64(st, 2));
	sqlite3_finalize(st);
	if (!stop && rc != SQLITE_DONE)
		return db_err(s, err, "reading gaps");
	return stop;
}

int store_audit(struct store *s, struct d0_err *err)
{
	sqlite3_stmt *st;
	int rc, bad = 0;
	if (sqlite3_prepare_v2(s->db, "PRAGMA integrity_check", -1, &st,
			       NULL) != SQLITE_OK)
		return db_err(s, err, "integrity_check");
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW ||
	    strcmp((const char *)sqlite3_column_text(st, 0), "ok")) {
		d0_errf(err, "%s: integrity_check: %s", s->path,
			rc == SQLITE_ROW
			    ? (const char *)sqlite3_column_text(st, 0)
			    : sqlite3_errmsg(s->db));
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	/* Per node from the events themselves: count, min, max. */
	if (sqlite3_prepare_v2(
		s->db,
		"SELECT e.node, count(*), min(e.seq), max(e.seq), "
		"n.next_seq, n.events, "
		"(SELECT count(*) FROM gaps g WHERE g.node = e.node) "
		"FROM events e LEFT JOIN nodes n ON n.node = e.node "
		"GROUP BY e.node",
		-1, &st, NULL) != SQLITE_OK)
		return db_err(s, err, "auditing events");
	while (!bad && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *node = (const char *)sqlite3_column_text(st, 0);
		int64_t cnt = sqlite3_column_int64(st, 1),
			mn = sqlite3_column_int64(st, 2),
			mx = sqlite3_column_int64(st, 3),
			next = sqlite3_column_int64(st, 4),
			evs = sqlite3_column_int64(st, 5),
			gaps = sqlite3_column_int64(st, 6);
		if (sqlite3_column_type(st, 4) == SQLITE_NULL)
			bad = d0_errf(err,
				      "%s: node %s has events but no row "
				      "in nodes",
				      s->path, node);
		else if (mn != 1 || mx != cnt)
			bad = d0_errf(err,
				      "%s: node %s: %lld events with seq "
				      "%lld..%lld: missing seqs",
				      s->path, node, (long long)cnt,
				      (long long)mn, (long long)mx);
		else if (next != mx + 1 || evs != cnt)
			bad = d0_errf(err,
				      "%s: node %s: nodes table says next "
				      "%lld, %lld events; events say "
				      "%lld, %lld",
				      s->path, node, (long long)next,
				      (long long)evs, (long long)mx + 1,
				      (long long)cnt);
		else if (gaps)
			bad = d0_errf(err,
				      "%s: node %s: %lld gaps recorded but "
				      "none found",
				      s->path, node, (long long)gaps);
	}
	if (!bad && rc != SQLITE_DONE)
		bad = db_err(s, err, "auditing events");
	sqlite3_finalize(st);
	return bad ? -1 : 0;
}

/* ----------------------------------------------------------------- session */

int store_session_set(struct store *s, const char *key, json_t *value,
		      struct d0_err *err)
{
	char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY |
					   JSON_PRESERVE_ORDER);
	sqlite3_stmt *st;
	int rc;
	if (s->readonly)
		return d0_errf(err, "%s: opened read-only", s->path);
	if (!text)
		return d0_errf(err, "%s: session %s: value cannot be encoded",
			       s->path, key);
	st = s->q[Q_SESSION_PUT];
	sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, text, -1, free);
	sqlite3_bind_int64(st, 3, now_ns());
	rc = step_done(s, st, err, "writing the session manifest");
	sqlite3_clear_bindings(st);
	return rc;
}

json_t *store_session_get(struct store *s, const char *key, struct d0_err *err)
{
	sqlite3_stmt *st;
	json_t *v = NULL;
	int rc;
	if (err)
		err->msg[0] = 0;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT value FROM session WHERE key = ?1", -1,
			       &st, NULL) != SQLITE_OK) {
		db_err(s, err, "reading the session manifest");
		return NULL;
	}
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		json_error_t je;
		v = json_loads((const char *)sqlite3_column_text(st, 0),
			       JSON_DECODE_ANY, &je);
		if (!v)
			d0_errf(err, "%s: session %s: %s", s->path, key,
				je.text);
	} else if (rc != SQLITE_DONE) {
		db_err(s, err, "reading the session manifest");
	}
	sqlite3_finalize(st);
	return v;
}

/* For query.c: the connection behind the store. */
sqlite3 *store_db__(struct store *s);
sqlite3 *store_db__(struct store *s)
{
	return s->db;
}
