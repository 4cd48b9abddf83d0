/*
 * test_view.c - the view model: the view built by seeking (derived tables
 * and indexes) equals the fold of every event from zero, at many t; playing
 * forward from a seek equals seeking there; the fold keeps what the events
 * say (exact values); rings and bounded vectors wrap.
 */
#include "unit.h"
#include "view.h"
#include "store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 1795940000000000000LL
#define MS 1000000LL

static struct store *st;
static int64_t seqs[3];

static void ev(int node, int64_t ts, const char *type, const char *fields)
{
	static const char *names[] = {"n01", "n02", "console"};
	char line[1024];
	struct d0_err err;
	int n = snprintf(line, sizeof line,
			 "{\"v\":1,\"seq\":%lld,\"ts\":%lld,\"node\":\"%s\","
			 "\"type\":\"%s\"%s%s}",
			 (long long)++seqs[node], (long long)ts, names[node],
			 type, *fields ? "," : "", fields);
	if (store_ingest(st, line, (size_t)n, &err) < 0) {
		printf("FAIL - ingest: %s: %s\n", err.msg, line);
		exit(1);
	}
}

/* A session: 2 nodes x 2 cards sampling at 10 Hz for 60 s, stages,
 * checks, comm rows, numerics, perf, markers, a failure. */
static void build(const char *path)
{
	struct d0_err err;
	char f[512];
	if (store_open(path, STORE_CREATE, &st, &err) < 0) {
		printf("FAIL - open: %s\n", err.msg);
		exit(1);
	}
	ev(2, T0, "stage", "\"stage_id\":\"facts\",\"stage\":\"facts\","
			   "\"state\":\"start\",\"nodes\":[\"n01\",\"n02\"]");
	for (int tick = 0; tick < 600; tick++) {
		int64_t ts = T0 + 5 * MS + tick * 100 * MS;
		for (int node = 0; node < 2; node++) {
			/* n02 goes silent after 40 s: stale at the end. */
			if (node == 1 && tick >= 400)
				continue;
			for (int card = 0; card < 2; card++) {
				if (tick == 0) {
					snprintf(f, sizeof f,
						 "\"card\":%d,\"metric\":"
						 "\"mem.budget\",\"value\":"
						 "1000000",
						 card);
					ev(node, ts, "sample", f);
				}
				snprintf(f, sizeof f,
					 "\"card\":%d,\"metric\":\"mem.used\","
					 "\"value\":%d",
					 card, 1000 * tick + 10 * node + card);
				ev(node, ts + node + card, "sample", f);
				snprintf(f, sizeof f,
					 "\"card\":%d,\"metric\":\"mem.peak\","
					 "\"value\":%d",
					 card, 1000 * tick + 500);
				ev(node, ts + node + card, "sample", f);
			}
			snprintf(f, sizeof f,
				 "\"card\":-1,\"metric\":\"net.rx_bps\","
				 "\"value\":%d.5",
				 tick * 3);
			ev(node, ts + 3, "sample", f);
			if (tick % 50 == 0) {
				snprintf(f, sizeof f,
					 "\"stage\":\"comm\",\"stage_id\":"
					 "\"comm-1\",\"state\":\"progress\","
					 "\"progress\":%.2f,\"msg\":\"tick %d\","
					 "\"rank\":0",
					 tick / 600.0, tick);
				ev(node, ts + 4, "stage", f);
				snprintf(f, sizeof f,
					 "\"op\":\"allreduce\",\"bytes\":%d,"
					 "\"ranks\":2,\"time_us\":10,"
					 "\"algbw\":%d.25,\"busbw\":%d.5,"
					 "\"wrong\":0,\"group\":\"world\"",
					 1024 << (tick / 50), tick, tick);
				ev(node, ts + 5, "comm", f);
			}
		}
		if (tick == 100) {
			ev(0, ts + 6, "check",
			   "\"item\":\"facts\",\"status\":\"pass\","
			   "\"detail\":\"ok\",\"value\":0,\"threshold\":0");
			ev(1, ts + 6, "check",
			   "\"item\":\"facts\",\"status\":\"warn\","
			   "\"detail\":\"mpi version unknown\",\"value\":0.5,"
			   "\"threshold\":\"x\"");
			ev(2, ts + 7, "marker", "\"note\":\"first marker\"");
		}
		if (tick == 250) {
			ev(0, ts + 6, "check",
			   "\"item\":\"memory.plan\",\"status\":\"pass\","
			   "\"detail\":\"best tp2 pp1 ep1 dp1 at 1.0 GiB of 2.0 "
			   "GiB per card\",\"value\":{\"tp\":2,\"weights_bytes\":"
			   "5},\"threshold\":1");
			ev(1, ts + 6, "check",
			   "\"item\":\"comm.bandwidth\",\"status\":\"fail\","
			   "\"detail\":\"2 wrong\",\"value\":1.5,"
			   "\"threshold\":10");
			ev(1, ts + 7, "stage",
			   "\"stage\":\"comm\",\"stage_id\":\"comm-1\","
			   "\"state\":\"end\",\"progress\":1,\"rc\":1,"
			   "\"msg\":\"exit 1\"");
			ev(0, ts + 8, "numerics",
			   "\"level\":\"layer\",\"name\":\"model.layers.0\","
			   "\"max_abs\":0.001,\"max_rel\":0.002,\"kl\":1e-6,"
			   "\"top1\":1");
			ev(0, ts + 9, "perf",
			   "\"ttft_ms\":182.5,\"tpot_ms\":41.2,"
			   "\"tokens_per_s\":24.3,\"prompt_tokens\":512,"
			   "\"gen_tokens\":128,\"stage_id\":\"perf\"");
			ev(0, ts + 9, "log",
			   "\"level\":\"info\",\"msg\":\"hello there\"");
		}
		if (tick % 10 == 0 && tick >= 300) { /* load and serve on n01 */
			snprintf(f, sizeof f, "\"card\":-1,\"metric\":"
				 "\"load.tokens_per_s\",\"value\":%d", tick);
			ev(0, ts + 10, "sample", f);
			snprintf(f, sizeof f, "\"card\":-1,\"metric\":"
				 "\"load.ttft_p99_ms\",\"value\":%d.25", tick);
			ev(0, ts + 10, "sample", f);
			snprintf(f, sizeof f, "\"card\":-1,\"metric\":"
				 "\"load.error.http_503\",\"value\":%d",
				 tick / 100);
			ev(0, ts + 10, "sample", f);
			snprintf(f, sizeof f, "\"card\":0,\"metric\":"
				 "\"kv.used\",\"values\":[%d,%d]", tick, tick);
			ev(0, ts + 10, "sample", f);
		}
		if (tick == 350)
			ev(0, ts + 11, "perf",
			   "\"ttft_ms\":5,\"tpot_ms\":1,\"tokens_per_s\":300,"
			   "\"concurrency\":8,\"requests\":64,\"errors\":3,"
			   "\"stalls\":1,\"requests_per_s\":12.5,"
			   "\"ttft_p50_ms\":4,\"ttft_p99_ms\":9.5,"
			   "\"error_classes\":{\"http_503\":2,\"timeout\":1},"
			   "\"stage_id\":\"load\"");
		if (tick >= 200 && tick < 210) {
			/* A fine-tuning run on n01: step 205 overflowed (no
			 * loss or grad norm: not finite), skipped, the scale
			 * halved. */
			int k = tick - 200;
			if (k == 5)
				snprintf(f, sizeof f,
					 "\"step\":%d,\"skipped\":1,"
					 "\"loss_scale\":32768,\"lr\":0.001,"
					 "\"tokens\":64,\"layout\":\"tp2pp1ep1dp1\","
					 "\"rank\":0,\"stage_id\":\"train\"",
					 k);
			else
				snprintf(f, sizeof f,
					 "\"step\":%d,\"loss\":%d.5,"
					 "\"grad_norm\":0.%d,\"loss_scale\":%d,"
					 "\"skipped\":0,\"lr\":0.001,\"tokens\":64,"
					 "\"t_fwd_s\":0.25,\"t_bwd_s\":0.5,"
					 "\"t_opt_s\":0.125,\"t_comm_s\":0.0625,"
					 "\"layout\":\"tp2pp1ep1dp1\",\"rank\":0,"
					 "\"stage_id\":\"train\"",
					 k, 10 - k, k + 1, k < 5 ? 65536 : 32768);
			ev(0, ts + 12, "train", f);
		}
		if (tick == 500)
			ev(2, ts + 7, "marker", "\"note\":\"second\"");
	}
	if (store_commit(st, &err) < 0) {
		printf("FAIL - commit: %s\n", err.msg);
		exit(1);
	}
}

static char *dump(const struct view *v)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);
	view_dump(v, f);
	fclose(f);
	return buf;
}

static void first_diff(const char *a, const char *b)
{
	size_t i = 0, line = 1;
	while (a[i] && a[i] == b[i])
		if (a[i++] == '\n')
			line++;
	printf("# first difference at line %zu:\n# seek: %.160s\n# fold: "
	       "%.160s\n",
	       line, a + i - (i > 40 ? 40 : i), b + i - (i > 40 ? 40 : i));
}

int main(void)
{
	char path[] = "/tmp/test_view.XXXXXX";
	char db[64];
	struct view_src *src;
	struct view a, b;
	struct d0_err err;
	int64_t first, last;
	int fd = mkstemp(path);
	close(fd);
	unlink(path);
	snprintf(db, sizeof db, "%s.db", path);
	build(db);

	CHECK(view_src_open(db, &src, &err) == 0);
	view_src_span(src, &first, &last);
	CHECK(first == T0);
	view_init(&a);
	view_init(&b);

	/* Seek == fold from zero at many t (including before the first
	 * event, between events, on an event's ts, after the last). */
	int64_t ts[] = {T0 - 1,		   T0,		T0 + 5 * MS,
			T0 + 1234 * MS,	   T0 + 10005 * MS, T0 + 25005 * MS + 6,
			T0 + 25005 * MS + 7, T0 + 33333 * MS, T0 + 45000 * MS,
			last,		   last + 10 * 1000 * MS};
	for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
		char name[96];
		CHECK(view_seek(src, &a, ts[i], &err) == 0);
		CHECK(view_fold_to(src, &b, ts[i], &err) == 0);
		char *da = dump(&a), *dbb = dump(&b);
		snprintf(name, sizeof name, "seek == fold at t0%+lld ns",
			 (long long)(ts[i] - T0));
		CHECKN(name, !strcmp(da, dbb));
		if (strcmp(da, dbb))
			first_diff(da, dbb);
		free(da);
		free(dbb);
	}

	/* Play forward from a seek == seek at the end. */
	CHECK(view_seek(src, &a, T0 + 3000 * MS, &err) == 0);
	CHECK(view_forward(src, &a, T0 + 3000 * MS, T0 + 30000 * MS, &err) ==
	      0);
	CHECK(view_seek(src, &b, T0 + 30000 * MS, &err) == 0);
	{
		char *da = dump(&a), *dbb = dump(&b);
		CHECKN("forward from a seek == seek", !strcmp(da, dbb));
		if (strcmp(da, dbb))
			first_diff(da, dbb);
		free(da);
		free(dbb);
	}

	/* What the events say, exactly, at t = tick 300 (+5 ms) of 600. */
	CHECK(view_seek(src, &a, T0 + 5 * MS + 300 * 100 * MS + 10, &err) == 0);
	const struct view_node *n1 = view_node(&a, "n01");
	const struct view_node *n2 = view_node(&a, "n02");
	CHECK(a.nnodes == 2 && n1 && n2);
	CHECK(n1 && n1->ncards == 2 && n1->cards[1].used == 300001);
	CHECK(n2 && n2->cards[0].used == 300010);
	CHECK(n1 && n1->cards[0].peak == 300500);
	CHECK(n1 && n1->cards[0].budget == 1000000);
	CHECK(n1 && n1->cards[0].hist.n == VIEW_HIST &&
	      view_ring_get(&n1->cards[0].hist, VIEW_HIST - 1) == 300000 &&
	      view_ring_get(&n1->cards[0].hist, 0) == 1000 * (301 - VIEW_HIST));
	CHECK(n1 && n1->rx == 900.5);
	const struct view_check *c = view_check(&a, "n02", "facts");
	CHECK(c && !strcmp(c->status, "warn") && !strcmp(c->value, "0.5") &&
	      !strcmp(c->threshold, "x"));
	c = view_check(&a, "n02", "comm.bandwidth");
	CHECK(c && !strcmp(c->status, "fail"));
	CHECK(a.plan && !strcmp(a.plan_status, "pass") &&
	      json_integer_value(json_object_get(a.plan, "tp")) == 2);
	CHECK(a.marks.n == 3); /* marker, check fail, stage fail */
	CHECK(a.comm.n == 14 && VIEW_AT(a.comm, 13)->busbw == 300.5);
	CHECK(a.num.n == 1 && VIEW_AT(a.num, 0)->max_rel == 0.002);
	CHECK(a.perf.n == 1 && VIEW_AT(a.perf, 0)->tokens_per_s == 24.3);
	CHECK(a.perf.n == 1 && VIEW_AT(a.perf, 0)->concurrency == -1);
	CHECK(a.train.n == 10 && VIEW_AT(a.train, 0)->loss == 10.5 &&
	      VIEW_AT(a.train, 9)->step == 9 &&
	      VIEW_AT(a.train, 9)->grad_norm == 0.1 &&
	      !strcmp(VIEW_AT(a.train, 0)->layout, "tp2pp1ep1dp1") &&
	      VIEW_AT(a.train, 0)->t_bwd == 0.5);
	CHECK(a.train.n == 10 && VIEW_AT(a.train, 5)->skipped &&
	      isnan(VIEW_AT(a.train, 5)->loss) &&
	      isnan(VIEW_AT(a.train, 5)->t_fwd) &&
	      VIEW_AT(a.train, 5)->loss_scale == 32768 &&
	      VIEW_AT(a.train, 4)->loss_scale == 65536);
	CHECK(n2 && !n2->has_svc && isnan(n2->svc[SVC_TPS]));
	const struct view_stage *cur = view_current_stage(&a);
	CHECK(cur && !strcmp(cur->node, "console") && !strcmp(cur->id, "facts"));
	CHECK(a.nlog == VIEW_LOG);
	CHECK(strstr(view_log_get(&a, 0)->line, "\"seq\":") != NULL);

	/* Staleness: n02 stopped sampling at 40 s. */
	CHECK(view_seek(src, &a, last, &err) == 0);
	{ /* the service figures at the end */
		const struct view_node *s1 = view_node(&a, "n01");
		const struct view_perf *lp = VIEW_AT(a.perf, a.perf.n - 1);
		CHECK(s1 && s1->has_svc && s1->svc[SVC_TPS] == 590 &&
		      s1->tps_hist.n == 30 &&
		      view_ring_get(&s1->tps_hist, 0) == 300);
		CHECK(s1 && s1->svc[SVC_TTFT_P99] == 590.25 &&
		      isnan(s1->svc[SVC_TTFT_P50]));
		CHECK(s1 && s1->svc[SVC_ERR0 + 5] == 5 &&
		      !strcmp(view_svc_err_class(5), "http_503"));
		CHECK(s1 && s1->cards[1].kv_used == 590 &&
		      isnan(s1->cards[1].kv_budget));
		CHECK(a.perf.n == 2 && lp->concurrency == 8 &&
		      lp->requests == 64 && lp->errors == 3 && lp->stalls == 1 &&
		      lp->requests_per_s == 12.5 && lp->ttft_p[0] == 4 &&
		      isnan(lp->ttft_p[1]) && lp->ttft_p[2] == 9.5 &&
		      !strcmp(lp->classes, "http_503 2 timeout 1"));
	}
	n2 = view_node(&a, "n02");
	int64_t age;
	CHECK(n2 && view_node_stale(&a, n2, &age) && age > 15000 * MS);
	CHECK(!view_node_stale(&a, view_node(&a, "n01"), NULL));

	/* Timeline of the whole file. */
	struct view_mark *marks;
	size_t nm;
	CHECK(view_src_marks(src, &marks, &nm, &err) == 0);
	CHECK(nm == 4 && marks[0].kind == VIEW_MARKER &&
	      !strcmp(marks[0].text, "first marker") &&
	      marks[1].kind == VIEW_FAILURE && marks[3].kind == VIEW_MARKER);
	free(marks);

	/* Lines that are not events are refused, the view unchanged. */
	uint64_t before = a.applied;
	CHECK(view_apply_line(&a, "{\"v\":1}", 7) == -1);
	CHECK(view_apply_line(&a, "not json", 8) == -1);
	CHECK(a.applied == before);

	/* A fleet's stages: 300 nodes x 5 stages, each started then ended
	 * (the stage index grows past its first sizes); a stage id longer
	 * than the field is one stage, not one per event. */
	{
		struct view f;
		char line[512], longid[200];
		int64_t seq = 0, ok_nodes = 0, applied = 0;
		view_init(&f);
		memset(longid, 'x', sizeof longid - 1);
		longid[sizeof longid - 1] = 0;
		for (int pass = 0; pass < 2; pass++)
			for (int nd = 0; nd < 300; nd++)
				for (int k = 0; k < 5; k++) {
					int n = snprintf(
					    line, sizeof line,
					    "{\"v\":1,\"seq\":%lld,\"ts\":%lld,"
					    "\"node\":\"n%03d\",\"type\":\"stage\","
					    "\"stage\":\"run\",\"stage_id\":\"s%d\","
					    "\"state\":\"%s\"%s}",
					    (long long)(seq + 1), (long long)(1001 + seq), nd, k,
					    pass ? "end" : "start",
					    pass ? ",\"rc\":0" : "");
					seq++;
					applied += view_apply_line(
							       &f, line, (size_t)n) == 0;
				}
		for (int i = 0; i < 3; i++) {
			int n = snprintf(line, sizeof line,
					 "{\"v\":1,\"seq\":%lld,\"ts\":%lld,"
					 "\"node\":\"n000\",\"type\":\"stage\","
					 "\"stage\":\"run\",\"stage_id\":\"%s\","
					 "\"state\":\"start\"}",
					 (long long)(seq + 1), (long long)(1001 + seq), longid);
			seq++;
			applied += view_apply_line(&f, line, (size_t)n) == 0;
		}
		CHECK(applied == 3003);
		CHECK(f.nstages == 1501 && f.nnodes == 300);
		for (size_t i = 0; i < f.nnodes; i++) {
			const struct view_node *n = &f.nodes[i];
			int good = n->nstix == (i == 0 ? 6u : 5u);
			for (size_t k = 0; good && k < 5; k++) {
				const struct view_stage *s =
				    VIEW_NODE_STAGE(&f, n, k);
				good = !strcmp(s->node, n->name) &&
				       !strcmp(s->state, "end") &&
				       s->id[0] == 's' && s->id[1] == '0' + (char)k;
			}
			ok_nodes += good;
		}
		CHECK(ok_nodes == 300);
		view_free(&f);
	}

	/* A killed stage and its rerun ("verify" ended rc 143, then
	 * "verify.2" ended 0): the rerun supersedes the failure; a failure
	 * with no later attempt, or another stage's, is not superseded. */
	{
		struct view f;
		const char *lines[] = {
		    "\"stage_id\":\"verify\",\"state\":\"start\"",
		    "\"stage_id\":\"verify\",\"state\":\"end\",\"rc\":143",
		    "\"stage_id\":\"verify.2\",\"state\":\"start\"",
		    "\"stage_id\":\"verify.2\",\"state\":\"end\",\"rc\":0",
		    "\"stage_id\":\"plan\",\"state\":\"end\",\"rc\":1",
		};
		char line[512];
		view_init(&f);
		for (int nd = 0; nd < 2; nd++)
			for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
				/* node r2 has no rerun of verify */
				if (nd == 1 && (i == 2 || i == 3))
					continue;
				int n = snprintf(line, sizeof line,
						 "{\"v\":1,\"seq\":%zu,\"ts\":%zu,"
						 "\"node\":\"n%d\",\"type\":\"stage\","
						 "\"stage\":\"x\",%s}",
						 i + 1, 100 + i, nd + 1, lines[i]);
				view_apply_line(&f, line, (size_t)n);
			}
		const struct view_node *r1 = view_node(&f, "n1"),
				       *r2 = view_node(&f, "n2");
		CHECK(r1 && r2 && r1->nstix == 3 && r2->nstix == 2);
		if (r1 && r2 && r1->nstix == 3 && r2->nstix == 2) {
			CHECK(view_stage_superseded(&f, VIEW_NODE_STAGE(&f, r1, 0)));
			CHECK(!view_stage_superseded(&f, VIEW_NODE_STAGE(&f, r1, 1)));
			CHECK(!view_stage_superseded(&f, VIEW_NODE_STAGE(&f, r1, 2)));
			CHECK(!view_stage_superseded(&f, VIEW_NODE_STAGE(&f, r2, 0)));
		}
		view_free(&f);
	}

	view_free(&a);
	view_free(&b);
	view_src_close(src);
	store_close(st, NULL);
	unlink(db);
	char side[96];
	snprintf(side, sizeof side, "%s-wal", db);
	unlink(side);
	snprintf(side, sizeof side, "%s-shm", db);
	unlink(side);
	return unit_done();
}
