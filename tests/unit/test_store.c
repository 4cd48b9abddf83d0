/*
 * test_store.c - the session store on real sqlite files: creation (0600,
 * WAL, schema version), refusals (newer schema, foreign files), ingest
 * (duplicates, gaps opened and filled, bad events), the queries (state at
 * t, sample windows, the event stream), the manifest, reopening, and the
 * store's JSON scanner against jansson.
 */
#include "reader.h"
#include "store.h"
#include "unit.h"

#include "json_scan.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/day0-store-XXXXXX";

static char *path_in(const char *name)
{
	static char buf[4][256];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

static int ingest(struct store *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int ingest(struct store *s, const char *fmt, ...)
{
	char line[2048];
	struct d0_err err;
	va_list ap;
	int rc;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	rc = store_ingest(s, line, strlen(line), &err);
	if (rc < 0)
		printf("# %s -> %s\n", line, err.msg);
	return rc;
}

static int sample(struct store *s, const char *node, int64_t seq, int64_t ts,
		  int card, const char *metric, double v)
{
	return ingest(s,
		      "{\"v\":1,\"seq\":%lld,\"ts\":%lld,\"node\":\"%s\","
		      "\"type\":\"sample\",\"card\":%d,\"metric\":\"%s\","
		      "\"value\":%.17g}",
		      (long long)seq, (long long)ts, node, card, metric, v);
}

static int64_t count_sql(const char *db, const char *sql)
{
	sqlite3 *h;
	sqlite3_stmt *st;
	int64_t v = -1;
	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			v = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	} else {
		printf("# %s: %s\n", sql, sqlite3_errmsg(h));
	}
	sqlite3_close(h);
	return v;
}

/* Does the plan of sql mention want (EXPLAIN QUERY PLAN's detail)? */
static int plan_has(const char *db, const char *sql, const char *want)
{
	sqlite3 *h;
	sqlite3_stmt *st;
	char q[1024];
	int found = 0;
	snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", sql);
	if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		return 0;
	if (sqlite3_prepare_v2(h, q, -1, &st, NULL) == SQLITE_OK) {
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *d =
			    (const char *)sqlite3_column_text(st, 3);
			if (d && strstr(d, want))
				found = 1;
			if (!found && d)
				printf("# plan: %s\n", d);
		}
		sqlite3_finalize(st);
	}
	sqlite3_close(h);
	return found;
}

static int collect_events(void *arg, const struct store_event *ev)
{
	char *out = arg;
	char b[64];
	snprintf(b, sizeof b, "%s:%lld ", ev->node, (long long)ev->seq);
	strcat(out, b);
	return 0;
}

static int collect_samples(void *arg, const struct store_sample *smp)
{
	char *out = arg;
	char b[64];
	snprintf(b, sizeof b, "%lld=%g ", (long long)smp->ts, smp->value);
	strcat(out, b);
	return 0;
}

static int collect_gaps(void *arg, const char *node, int64_t first,
			int64_t last)
{
	char *out = arg;
	char b[64];
	snprintf(b, sizeof b, "%s:%lld-%lld ", node, (long long)first,
		 (long long)last);
	strcat(out, b);
	return 0;
}

static void test_create(void)
{
	struct store *s;
	struct d0_err err;
	struct stat st;
	char *p = path_in("a.db");
	CHECK(store_open(p, STORE_CREATE, &s, &err) == 0);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK(sample(s, "n1", 1, 100, 0, "mem.used", 1) == STORE_ADDED);
	CHECK(store_commit(s, &err) == 0);
	CHECKN("the WAL file is 0600 too",
	       stat(path_in("a.db-wal"), &st) == 0 &&
		   (st.st_mode & 0777) == 0600);
	CHECK(store_close(s, &err) == 0);
	CHECK(count_sql(p, "PRAGMA user_version") == STORE_SCHEMA_VERSION);
	CHECK(count_sql(p, "PRAGMA application_id") == 0x64617930);
	{
		sqlite3 *h;
		sqlite3_stmt *q;
		int wal = 0;
		sqlite3_open(p, &h);
		sqlite3_prepare_v2(h, "PRAGMA journal_mode", -1, &q, NULL);
		if (sqlite3_step(q) == SQLITE_ROW)
			wal = !strcmp((const char *)sqlite3_column_text(q, 0),
				      "wal");
		sqlite3_finalize(q);
		CHECKN("the file is in WAL mode", wal);
		/* A newer schema is refused with a clear message. */
		sqlite3_exec(h, "PRAGMA user_version = 99", NULL, NULL, NULL);
		sqlite3_close(h);
	}
	CHECK(store_open(p, 0, &s, &err) < 0 &&
	      strstr(err.msg, "schema version 99 is newer"));
	CHECK(store_open(path_in("missing.db"), 0, &s, &err) < 0 &&
	      strstr(err.msg, "missing.db"));
	{
		FILE *f = fopen(path_in("text.db"), "w");
		fputs(
		    "this is not a database, just text padding it out to a "
		    "page or so of bytes......................................"
		    "...........................................\n",
		    f);
		fclose(f);
		CHECK(store_open(path_in("text.db"), 0, &s, &err) < 0 &&
		      strstr(err.msg, "text.db") &&
		      strstr(err.msg, "not a database"));
	}
	{
		sqlite3 *h;
		sqlite3_open(path_in("other.db"), &h);
		sqlite3_exec(h, "CREATE TABLE t(x)", NULL, NULL, NULL);
		sqlite3_close(h);
		CHECK(store_open(path_in("other.db"), STORE_CREATE, &s, &err) <
			  0 &&
		      strstr(err.msg, "not a day0 session file"));
	}
}

static void test_ingest(void)
{
	struct store *s;
	struct d0_err err;
	struct store_ingest_stats st;
	struct store_node *nodes;
	size_t n;
	char buf[512] = "";
	char *p = path_in("b.db");
	CHECK(store_open(p, STORE_CREATE, &s, &err) == 0);
	CHECK(sample(s, "n1", 1, 10, 0, "mem.used", 1) == STORE_ADDED);
	CHECK(sample(s, "n1", 2, 20, 0, "mem.used", 2) == STORE_ADDED);
	CHECKN("a duplicate (node, seq) is dropped",
	       sample(s, "n1", 2, 20, 0, "mem.used", 2) == STORE_DUPLICATE);
	CHECKN("the same seq of another node is not a duplicate",
	       sample(s, "n2", 2, 20, 0, "mem.used", 5) == STORE_ADDED);
	CHECK(sample(s, "n1", 6, 60, 0, "mem.used", 6) == STORE_ADDED);
	CHECK(store_commit(s, &err) == 0);
	CHECK(store_gaps(s, collect_gaps, buf, &err) == 0);
	CHECKN("gaps: n1 3-5 and n2 1-1", !strcmp(buf, "n1:3-5 n2:1-1 "));
	CHECK(store_acked_seq(s, "n1") == 2 && store_acked_seq(s, "n2") == 0);
	CHECK(sample(s, "n1", 4, 40, 0, "mem.used", 4) == STORE_ADDED);
	CHECK(sample(s, "n1", 3, 30, 0, "mem.used", 3) == STORE_ADDED);
	CHECK(store_commit(s, &err) == 0);
	buf[0] = 0;
	store_gaps(s, collect_gaps, buf, &err);
	CHECKN("filling splits and shrinks gaps",
	       !strcmp(buf, "n1:5-5 n2:1-1 "));
	CHECK(store_acked_seq(s, "n1") == 4);
	CHECK(store_audit(s, &err) < 0 && strstr(err.msg, "missing"));
	CHECK(sample(s, "n1", 5, 50, 0, "mem.used", 5) == STORE_ADDED);
	CHECK(sample(s, "n2", 1, 10, 0, "mem.used", 4) == STORE_ADDED);
	CHECK(store_commit(s, &err) == 0);
	buf[0] = 0;
	store_gaps(s, collect_gaps, buf, &err);
	CHECK(buf[0] == 0);
	CHECK(store_acked_seq(s, "n1") == 6);
	CHECKN("audit: every seq once", store_audit(s, &err) == 0);
	store_stats(s, &st);
	CHECK(st.added == 8 && st.duplicates == 1 && st.gaps_opened == 2 &&
	      st.gaps_filled == 4 && st.committed == 8);
	CHECK(store_nodes(s, &nodes, &n, &err) == 0 && n == 2 &&
	      !strcmp(nodes[0].node, "n1") && nodes[0].next_seq == 7 &&
	      nodes[0].events == 6 && nodes[0].gaps == 0);
	free(nodes);

	/* Bad events are refused; the batch goes on. */
	CHECK(ingest(s, "not json") == STORE_EBAD);
	CHECK(ingest(s, "{\"v\":1,\"seq\":1}") == STORE_EBAD);
	CHECK(ingest(s, "{\"v\":2,\"seq\":7,\"ts\":1,\"node\":\"n1\","
			"\"type\":\"log\"}") == STORE_EVERSION);
	CHECK(ingest(s, "{\"v\":1,\"seq\":0,\"ts\":1,\"node\":\"n1\","
			"\"type\":\"log\"}") == STORE_EBAD);
	CHECK(ingest(s, "{\"v\":1,\"seq\":7,\"ts\":1,\"node\":\"n1\","
			"\"type\":\"log\",\"type\":\"x\"}") == STORE_EBAD);
	{
		static const char nul[] =
		    "{\"v\":1,\"seq\":7,\"ts\":1,\"node\":"
		    "\"n\0\",\"type\":\"log\"}";
		CHECKN("a raw NUL byte is refused",
		       store_ingest(s, nul, sizeof nul - 1, &err) ==
			   STORE_EBAD);
	}
	CHECKN("a wrongly typed derived field is stored as NULL",
	       ingest(s,
		      "{\"v\":1,\"seq\":7,\"ts\":70,\"node\":\"n1\","
		      "\"type\":\"check\",\"item\":5,\"status\":\"pass\"}") ==
		   STORE_ADDED);
	CHECKN("escaped strings are decoded into derived columns",
	       ingest(s, "{\"v\":1,\"seq\":8,\"ts\":80,\"node\":\"n1\","
			 "\"type\":\"check\",\"item\":\"w\\u00e9ights\","
			 "\"status\":\"p\\u0061ss\",\"detail\":\"a\\\"b\","
			 "\"value\":[1,2],\"threshold\":true}") == STORE_ADDED);
	CHECK(store_close(s, &err) == 0);
	CHECK(count_sql(p, "SELECT count(*) FROM checks WHERE item IS NULL") ==
	      1);
	CHECK(count_sql(
		  p, "SELECT count(*) FROM checks WHERE item = "
		     "'w\xc3\xa9ights' AND status = 'pass' AND detail = "
		     "'a\"b' AND value = '[1,2]' AND threshold = 'true'") == 1);
	CHECKN("samples view has the protocol's column names",
	       count_sql(p,
			 "SELECT count(*) FROM samples WHERE node = 'n1' "
			 "AND card = 0 AND metric = 'mem.used' AND value = 6 "
			 "AND ts = 60") == 1);

	/* Reopen: the bookkeeping comes back from the file. */
	CHECK(store_open(p, 0, &s, &err) == 0);
	CHECK(store_acked_seq(s, "n1") == 8);
	/* A stored (node, seq): the same line is a duplicate, another one
	 * under its seq a conflict; neither is stored. */
	CHECK(ingest(s, "{\"v\":1,\"seq\":8,\"ts\":80,\"node\":\"n1\","
			"\"type\":\"check\",\"item\":\"w\\u00e9ights\","
			"\"status\":\"p\\u0061ss\",\"detail\":\"a\\\"b\","
			"\"value\":[1,2],\"threshold\":true}") == STORE_DUPLICATE);
	CHECK(sample(s, "n1", 8, 80, 0, "mem.used", 9) == STORE_CONFLICT);
	{
		struct store_line seen;
		const char *l = "{\"v\":1,\"seq\":1,\"ts\":1,\"node\":\"n3\","
				"\"type\":\"log\",\"level\":\"info\",\"msg\":\"x\"}";
		CHECKN("a line naming another node than its link's is refused",
		       store_ingest_from(s, l, strlen(l), "n1", &seen, &err) ==
			       STORE_ENODE &&
			   !strcmp(seen.node, "n3") && seen.seq == 1);
		CHECKN("... and the same line from its own node is stored",
		       store_ingest_from(s, l, strlen(l), "n3", &seen, &err) ==
			   STORE_ADDED);
	}
	CHECK(sample(s, "n1", 9, 90, 1, "mem.used", 9) == STORE_ADDED);
	CHECK(store_close(s, &err) == 0);
	CHECK(store_open(p, STORE_READONLY, &s, &err) == 0);
	CHECK(store_audit(s, &err) == 0);
	CHECK(store_ingest(s, "{}", 2, &err) < 0 &&
	      strstr(err.msg, "read-only"));
	store_close(s, NULL);
}

static int count_rows(void *arg, const struct store_row *r)
{
	(void)r;
	++*(int *)arg;
	return 0;
}

/* A `train` event fills a row of `train` named after its fields; a file
 * of schema version 2 (before the table) opens read-only (replay, report,
 * diff of an older session) and is upgraded by a read-write open. */
static void test_train(void)
{
	struct store *s;
	struct store_reader *rd;
	struct d0_err err;
	char *p = path_in("train.db");
	int rows = 0;
	int64_t t = 1000;
	CHECK(store_open(p, STORE_CREATE, &s, &err) == 0);
	CHECK(ingest(s, "{\"v\":1,\"seq\":1,\"ts\":10,\"node\":\"n1\","
			"\"type\":\"train\",\"step\":3,\"loss\":2.5,"
			"\"grad_norm\":0.75,\"loss_scale\":65536,"
			"\"skipped\":0,\"lr\":0.001,\"tokens\":128,"
			"\"t_fwd_s\":0.25,\"t_bwd_s\":0.5,\"t_opt_s\":0.125,"
			"\"t_comm_s\":0.0625,\"layout\":\"tp2pp1ep1dp1\","
			"\"rank\":1,\"stage_id\":\"train-tp\"}") == STORE_ADDED);
	CHECKN("an overflowed step: no loss, skipped",
	       ingest(s, "{\"v\":1,\"seq\":2,\"ts\":20,\"node\":\"n1\","
			 "\"type\":\"train\",\"step\":4,\"skipped\":1,"
			 "\"loss_scale\":32768}") == STORE_ADDED);
	CHECK(store_close(s, &err) == 0);
	CHECKN("train row: every field in its column",
	       count_sql(p, "SELECT count(*) FROM train WHERE node = 'n1' AND "
			    "seq = 1 AND ts = 10 AND step = 3 AND loss = 2.5 AND "
			    "grad_norm = 0.75 AND loss_scale = 65536 AND "
			    "skipped = 0 AND lr = 0.001 AND tokens = 128 AND "
			    "t_fwd_s = 0.25 AND t_bwd_s = 0.5 AND t_opt_s = "
			    "0.125 AND t_comm_s = 0.0625 AND layout = "
			    "'tp2pp1ep1dp1' AND rank = 1 AND stage_id = "
			    "'train-tp'") == 1);
	CHECK(count_sql(p, "SELECT count(*) FROM train WHERE step = 4 AND "
			   "skipped = 1 AND loss IS NULL") == 1);
	/* Back to version 2: no train table. */
	{
		sqlite3 *h;
		sqlite3_open(p, &h);
		sqlite3_exec(h, "DROP TABLE train; PRAGMA user_version = 2",
			     NULL, NULL, NULL);
		sqlite3_close(h);
	}
	CHECKN("a version-2 file opens read-only",
	       store_open(p, STORE_READONLY, &s, &err) == 0);
	if (s)
		store_close(s, NULL);
	CHECKN("... and replay's reader finds no training steps in it",
	       store_reader_open(p, &rd, &err) == 0 &&
		   store_reader_each(rd, SRQ_SPARSE, &t, 1, NULL, count_rows,
				     &rows, &err) == 0 &&
		   rows == 0);
	store_reader_close(rd);
	CHECK(count_sql(p, "PRAGMA user_version") == 2);
	CHECKN("a read-write open upgrades it",
	       store_open(p, 0, &s, &err) == 0 && store_close(s, &err) == 0 &&
		   count_sql(p, "PRAGMA user_version") == 3 &&
		   count_sql(p, "SELECT count(*) FROM train") == 0);
}

static void test_queries(void)
{
	struct store *s;
	struct d0_err err;
	char buf[1024] = "";
	json_t *st, *v;
	char *p = path_in("c.db");
	CHECK(store_open(p, STORE_CREATE, &s, &err) == 0);
	store_set_batch(s, 3); /* commits on its own every 3 events */
	for (int i = 1; i <= 10; i++) {
		sample(s, "n1", 4 * i - 3, i * 100, 0, "mem.used", i);
		sample(s, "n1", 4 * i - 2, i * 100, 1, "mem.used", 10 * i);
		sample(s, "n1", 4 * i - 1, i * 100 + 5, -1, "host.mem.used",
		       100 * i);
		ingest(s,
		       "{\"v\":1,\"seq\":%d,\"ts\":%d,\"node\":\"n1\","
		       "\"type\":\"stage\",\"stage\":\"verify\",\"stage_id\":"
		       "\"s\",\"state\":\"%s\",\"progress\":%g%s}",
		       4 * i, i * 100 + 7, i == 10 ? "end" : "progress",
		       i / 10.0, i == 10 ? ",\"rc\":0" : "");
	}
	CHECKN("batches commit on their own", store_pending(s) < 3);
	ingest(
	    s,
	    "{\"v\":1,\"seq\":1,\"ts\":350,\"node\":\"n2\",\"type\":"
	    "\"check\",\"item\":\"weights.integrity\",\"status\":\"running\"}");
	ingest(s,
	       "{\"v\":1,\"seq\":2,\"ts\":650,\"node\":\"n2\",\"type\":"
	       "\"check\",\"item\":\"weights.integrity\",\"status\":\"fail\","
	       "\"detail\":\"bad shard\",\"value\":1,\"threshold\":0}");
	CHECK(store_events(s, 300, 401, collect_events, buf, &err) == 0);
	CHECKN("events from t in ts order (the open batch included)",
	       !strcmp(buf, "n1:9 n1:10 n1:11 n1:12 n2:1 n1:13 n1:14 "));
	buf[0] = 0;
	CHECK(store_samples(s, "n1", 1, "mem.used", 300, 600, collect_samples,
			    buf, &err) == 0);
	CHECK(!strcmp(buf, "300=30 400=40 500=50 "));
	buf[0] = 0;
	CHECK(store_samples(s, "n1", 7, "mem.used", 0, 1000, collect_samples,
			    buf, &err) == 0 &&
	      buf[0] == 0);

	st = store_state_at(s, 460, &err);
	CHECK(st != NULL);
	v = json_object_get(st, "samples");
	CHECK(json_array_size(v) == 3);
	{
		int good = 0;
		size_t i;
		json_t *o;
		json_array_foreach(v, i, o)
		{
			int card =
			    (int)json_integer_value(json_object_get(o, "card"));
			double val =
			    json_number_value(json_object_get(o, "value"));
			good += (card == 0 && val == 4) ||
				(card == 1 && val == 40) ||
				(card == -1 && val == 400);
		}
		CHECKN("state at t: last sample of every series", good == 3);
	}
	v = json_array_get(json_object_get(st, "checks"), 0);
	CHECKN("state at t: a check's status then",
	       v && !strcmp(json_string_value(json_object_get(v, "status")),
			    "running"));
	v = json_array_get(json_object_get(st, "stages"), 0);
	CHECKN("state at t: a stage's progress then",
	       v && json_number_value(json_object_get(v, "progress")) == 0.4);
	json_decref(st);
	st = store_state_at(s, 100000, &err);
	v = json_array_get(json_object_get(st, "checks"), 0);
	CHECK(v &&
	      !strcmp(json_string_value(json_object_get(v, "status")), "fail"));
	v = json_array_get(json_object_get(st, "stages"), 0);
	CHECK(v &&
	      !strcmp(json_string_value(json_object_get(v, "state")), "end"));
	json_decref(st);
	st = store_state_at(s, 50, &err);
	CHECKN("state before anything: empty",
	       json_array_size(json_object_get(st, "samples")) == 0 &&
		   json_array_size(json_object_get(st, "checks")) == 0);
	json_decref(st);

	{
		json_t *m =
		    json_pack("{s:s, s:[i,i]}", "model", "llama", "tp", 2, 4);
		json_t *got;
		CHECK(store_session_set(s, "playbook", m, &err) == 0);
		got = store_session_get(s, "playbook", &err);
		CHECKN("session manifest round trip", json_equal(got, m));
		json_decref(got);
		json_decref(m);
		CHECK(store_session_get(s, "nope", &err) == NULL &&
		      !err.msg[0]);
	}
	ingest(s, "{\"v\":1,\"seq\":3,\"ts\":700,\"node\":\"n2\",\"type\":"
		  "\"hello\",\"agent_version\":\"0.1.0\",\"pid\":1}");
	{
		json_t *h = store_session_get(s, "agent/n2", &err);
		CHECKN("hello events land in the manifest",
		       h && !strcmp(json_string_value(
					json_object_get(h, "agent_version")),
				    "0.1.0"));
		json_decref(h);
	}
	CHECK(store_close(s, &err) == 0);
	CHECK(count_sql(p, "PRAGMA integrity_check") == 0); /* "ok" -> 0 */
	/* The queries' plans: index searches, never a scan. */
	CHECKN("last sample before t: a primary key search",
	       plan_has(p,
			"SELECT ts, value FROM sample_points WHERE series = 1 "
			"AND ts <= 5 ORDER BY ts DESC, seq DESC LIMIT 1",
			"SEARCH sample_points USING PRIMARY KEY"));
	CHECKN("events from t: the ts index",
	       plan_has(p,
			"SELECT node, seq, ts, type, body FROM events WHERE "
			"ts >= 1 AND ts < 2 ORDER BY ts, node, seq",
			"SEARCH events USING INDEX events_ts"));
}

/* The scanner must agree with jansson on what is JSON and what it says. */
static void test_scanner(void)
{
	static const char *const docs[] = {
	    "{}",
	    " {\"a\" : 1 , "
	    "\"b\":[1,{\"c\":null}],\"d\":\"x\\u00e9\\ud83d\\ude00\"} ",
	    "{\"n\":-0,\"r\":1.5e-3,\"i\":-9223372036854775808}",
	    "{\"i\":9223372036854775807}",
	    "{\"i\":9223372036854775808}",
	    "{\"r\":1e999}",
	    "{\"r\":1e-999}",
	    "{\"a\":01}",
	    "{\"a\":1.}",
	    "{\"a\":.5}",
	    "{\"a\":-}",
	    "{\"a\":+1}",
	    "{\"a\":tru}",
	    "{\"a\":truex}",
	    "{\"a\":true,}",
	    "{\"a\" 1}",
	    "{\"a\":\"\\x\"}",
	    "{\"a\":\"\\u12\"}",
	    "{\"a\":\"\\ud800\"}",
	    "{\"a\":\"\\udc00\"}",
	    "{\"a\":\"\\ud800\\u0041\"}",
	    "{\"a\":\"\\u0000\"}",
	    "{\"\\u0000\":1}",
	    "{\"a\":\"tab\there\"}",
	    "{\"a\":\"\xc3\xa9\"}",
	    "{\"a\":\"\xc3\"}",
	    "{\"a\":\"\xed\xa0\x80\"}",
	    "{\"a\":1}x",
	    "[1]",
	    "\"s\"",
	    "",
	    "{",
	    "{\"a\":[1,2,]}",
	    "{\"a\":[}",
	    "{\"a\":1,\"a\":2}",
	    "{\"a\\u0062\":1,\"ab\":2}",
	    "{\"a\":{\"b\":1,\"b\":2}}",
	};
	for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
		struct jscan j;
		json_error_t je;
		size_t n = strlen(docs[i]);
		int ours = json_scan_object(docs[i], n, &j) == 0;
		json_t *ref =
		    json_loadb(docs[i], n, JSON_REJECT_DUPLICATES, &je);
		json_t *loose = json_loadb(docs[i], n, 0, &je);
		/* Top-level duplicates: both refuse; nested ones: jansson
		 * with REJECT_DUPLICATES refuses, the scanner (which records
		 * only the top level) accepts like jansson without it. */
		int agree = ours ? json_is_object(loose) &&
				       (int)json_object_size(loose) == j.total
				 : !json_is_object(ref) ||
				       (int)json_object_size(ref) != j.total;
		char name[160];
		snprintf(name, sizeof name,
			 "scanner agrees with jansson on %.100s", docs[i]);
		CHECKN(name, agree);
		if (ours && json_is_object(loose)) {
			for (int k = 0; k < j.n; k++) {
				char key[256];
				struct jmember *m = &j.m[k];
				jscan_str(&(struct jmember){.val = m->key,
							    .vlen = m->klen,
							    .vesc = m->kesc},
					  key);
				json_t *rv = json_object_get(loose, key);
				int same = 0;
				char val[512];
				switch (m->kind) {
				case J_STR:
					jscan_str(m, val);
					same =
					    json_is_string(rv) &&
					    !strcmp(val, json_string_value(rv));
					break;
				case J_INT:
					same = json_is_integer(rv) &&
					       json_integer_value(rv) ==
						   jscan_int(m);
					break;
				case J_REAL:
					same = json_is_real(rv) &&
					       json_real_value(rv) ==
						   jscan_real(m);
					break;
				case J_TRUE:
					same = json_is_true(rv);
					break;
				case J_FALSE:
					same = json_is_false(rv);
					break;
				case J_NULL:
					same = json_is_null(rv);
					break;
				case J_OBJ:
					same = json_is_object(rv);
					break;
				case J_ARR:
					same = json_is_array(rv);
					break;
				}
				CHECKN("scanner values equal jansson's", same);
			}
		}
		json_decref(ref);
		json_decref(loose);
	}
	{
		/* Depth: jansson's limit is 2048 values deep. */
		char *deep = malloc(5000);
		struct jscan j;
		json_error_t je;
		for (int d = 2046; d <= 2049; d++) {
			size_t n = 0;
			deep[n++] = '{';
			deep[n++] = '"';
			deep[n++] = 'a';
			deep[n++] = '"';
			deep[n++] = ':';
			for (int k = 0; k < d - 1; k++)
				deep[n++] = '[';
			for (int k = 0; k < d - 1; k++)
				deep[n++] = ']';
			deep[n++] = '}';
			json_t *r = json_loadb(deep, n, 0, &je);
			CHECKN("depth limit as jansson's",
			       (json_scan_object(deep, n, &j) == 0) ==
				   (r != NULL));
			json_decref(r);
		}
		free(deep);
	}
}

int main(void)
{
	if (!mkdtemp(dir)) {
		printf("FAIL - mkdtemp\n");
		return 1;
	}
	test_create();
	test_train();
	test_ingest();
	test_queries();
	test_scanner();
	{
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd) != 0)
			printf("# could not remove %s\n", dir);
	}
	return unit_done();
}
