/*
 * test_glance.c - the Overview's figures (tui/glance.h) from a view built
 * of events: a card's peak and headroom, a node set's worst card, the
 * summed NIC rx/tx and the running collective of a set, and the data
 * moved per sample tick (the collectives' bus bandwidth in the tick they
 * ended, a folded set's line the sum of its nodes' lined up at the newest).
 */
#include "unit.h"
#include "glance.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define T0 1795940000000000000LL
#define SEC 1000000000LL
#define MIB 1048576.0

static long long seq[2];

static void ev(struct view *v, int node, long long ts, const char *type,
	       const char *fields)
{
	char line[512];
	int n = snprintf(line, sizeof line,
			 "{\"v\":1,\"seq\":%lld,\"ts\":%lld,\"node\":\"n0%d\","
			 "\"type\":\"%s\",%s}",
			 ++seq[node], ts, node + 1, type, fields);
	if (view_apply_line(v, line, (size_t)n) < 0)
		printf("FAIL - apply: %s\n", line);
}

static void sample(struct view *v, int node, long long ts, int card,
		   const char *metric, double value)
{
	char f[128];
	snprintf(f, sizeof f, "\"card\":%d,\"metric\":\"%s\",\"value\":%.17g",
		 card, metric, value);
	ev(v, node, ts, "sample", f);
}

int main(void)
{
	struct view v;
	struct glance_card g;
	struct glance_net net;
	double vals[GLANCE_MOVED_MAX];
	view_init(&v);

	/* Memory: n01/0 used 40 MiB, its high-water mark 60 MiB; n01/1 used
	 * 70 MiB above a stale mark of 50 MiB; n02/0 used 30 MiB; budgets
	 * 128 MiB. */
	for (int c = 0; c < 2; c++)
		sample(&v, 0, T0, c, "mem.budget", 128 * MIB);
	sample(&v, 1, T0, 0, "mem.budget", 128 * MIB);
	sample(&v, 0, T0 + 1, 0, "mem.used", 40 * MIB);
	sample(&v, 0, T0 + 2, 0, "mem.peak", 60 * MIB);
	sample(&v, 0, T0 + 3, 1, "mem.used", 70 * MIB);
	sample(&v, 0, T0 + 4, 1, "mem.peak", 50 * MIB);
	sample(&v, 1, T0 + 5, 0, "mem.used", 30 * MIB);
	CHECK(v.nnodes == 2);
	glance_card(&v.nodes[0], 0, &g);
	CHECK(g.used == 40 * MIB && g.peak == 60 * MIB && g.budget == 128 * MIB);
	CHECK(fabs(g.headroom - 68.0 / 128) < 1e-12);
	glance_card(&v.nodes[0], 1, &g);
	CHECK(g.peak == 70 * MIB); /* used above the mark is the peak */
	CHECK(glance_worst(&v, 0, 1, &g) == 3);
	CHECK(!strcmp(g.node, "n01") && g.card == 1);
	CHECK(glance_worst(&v, 1, 1, &g) == 1 && !strcmp(g.node, "n02"));
	CHECK(glance_ncards(&v, 0, 1) == 3);

	/* Network: n01 samples at 1..6 s (rx 1000 + k, tx 2000); n02 at
	 * 4..6 s only (rx 10, tx 20); an allreduce of n01 ends at 2.5 s
	 * (busbw 0.5 GB/s), one at 5.5 s (2 GB/s). */
	for (int k = 1; k <= 6; k++) {
		long long ts = T0 + k * SEC;
		sample(&v, 0, ts, -1, "net.rx_bps", 1000 + k);
		sample(&v, 0, ts, -1, "net.tx_bps", 2000);
		if (k >= 4) {
			sample(&v, 1, ts + 1000, -1, "net.rx_bps", 10);
			sample(&v, 1, ts + 1000, -1, "net.tx_bps", 20);
		}
		if (k == 2 || k == 5)
			ev(&v, 0, ts + SEC / 2, "comm",
			   k == 2 ? "\"op\":\"allreduce\",\"bytes\":4096,"
				    "\"ranks\":4,\"time_us\":10,\"algbw\":0.3,"
				    "\"busbw\":0.5,\"wrong\":0"
				  : "\"op\":\"allgather\",\"bytes\":8192,"
				    "\"ranks\":4,\"time_us\":10,\"algbw\":1.5,"
				    "\"busbw\":2,\"wrong\":0");
	}
	CHECK(glance_has_net(&v, &v.nodes[0]) && glance_has_net(&v, &v.nodes[1]));
	int m = glance_moved(&v, &v.nodes[0], vals, 10);
	CHECK(m == 6);
	/* tick k holds (k-1, k]: the 2.5 s collective is in tick 3, the
	 * 5.5 s one in tick 6 */
	CHECK(vals[0] == 3001 && vals[1] == 3002 && vals[2] == 0.5e9 &&
	      vals[3] == 3004 && vals[4] == 3005 && vals[5] == 2e9);
	CHECK(glance_moved(&v, &v.nodes[0], vals, 3) == 3 && vals[0] == 3004 &&
	      vals[2] == 2e9);
	m = glance_moved(&v, &v.nodes[1], vals, 10);
	CHECK(m == 3 && vals[0] == 30 && vals[2] == 30);
	/* The set's line: n02's three ticks under n01's newest three. */
	m = glance_moved_set(&v, 0, 1, vals, 10);
	CHECK(m == 6);
	CHECK(vals[0] == 3001 && vals[2] == 0.5e9 && vals[3] == 3034 &&
	      vals[4] == 3035 && vals[5] == 2e9 + 30);
	m = glance_moved_set(&v, 0, 1, vals, 2);
	CHECK(m == 2 && vals[0] == 3035 && vals[1] == 2e9 + 30);

	/* The set's rx/tx: the last samples summed; the collective of the
	 * last 3 s (2 GB/s), none for n02 alone. */
	glance_net(&v, 0, 1, &net);
	CHECK(net.rx == 1006 + 10 && net.tx == 2020);
	CHECK(net.bus && net.busbw == 2 && !strcmp(net.op, "allgather") &&
	      net.bytes == 8192 && net.ranks == 4);
	glance_net(&v, 1, 1, &net);
	CHECK(net.rx == 10 && !net.bus);
	/* 3 s after the last collective it no longer runs. */
	sample(&v, 0, T0 + 9 * SEC, -1, "net.rx_bps", 0);
	glance_net(&v, 0, 0, &net);
	CHECK(!net.bus && net.rx == 0);

	view_free(&v);
	return unit_done();
}
