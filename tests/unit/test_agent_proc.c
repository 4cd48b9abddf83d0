/*
 * test_agent_proc.c - the agent's /proc readers on text shaped like the
 * kernel's (and on this machine's real files), and the CPU card vendor.
 */
#include "agent.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	uint64_t total = 0, avail = 0, rx = 0, tx = 0, rss = 0, hwm = 0;
	pid_t sid = 0;
	unsigned long long start = 0;
	char buf[8192];
	FILE *f;
	size_t n;

	CHECK(proc_meminfo("MemTotal:       24683508 kB\nMemFree:  100 kB\n"
			   "MemAvailable:   23000000 kB\n",
			   &total, &avail) == 0 &&
	      total == 24683508ULL * 1024 && avail == 23000000ULL * 1024);
	CHECKN("meminfo without MemAvailable (old kernels)",
	       proc_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 "
			    "kB\nCached: 20 kB\n",
			    &total, &avail) == 0 &&
		   avail == 130 * 1024);
	CHECK(proc_meminfo("garbage", &total, &avail) < 0);

	CHECK(proc_netdev("Inter-|   Receive |  Transmit\n"
			  " face |bytes    packets errs drop fifo frame "
			  "compressed multicast|bytes\n"
			  "    lo: 500 5 0 0 0 0 0 0 500 5 0 0 0 0 0 0\n"
			  "  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
			  "  eth1:3000 10 0 0 0 0 0 0 4000 20 0 0 0 0 0 0\n",
			  &rx, &tx) == 0 &&
	      rx == 4000 && tx == 6000);

	CHECK(proc_stat_session("1234 (a b) c) S 1 1234 99 0 -1 4194304 101 0 "
				"0 0 0 0 0 0 20 0 1 0 364507 3133440 389\n",
				&sid, &start) == 0 &&
	      sid == 99 && start == 364507);
	CHECK(proc_stat_session("1 (x) S 1", &sid, &start) < 0);

	CHECK(
	    proc_status_mem("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n",
			    &rss, &hwm) == 0 &&
	    rss == 1024 * 1024 && hwm == 2048 * 1024);
	CHECK(proc_status_mem("Name:\tkthreadd\n", &rss, &hwm) < 0);

	CHECK(proc_environ_rank("A=1\0OMPI_COMM_WORLD_RANK=3\0B=2", 31) == 3);
	CHECK(proc_environ_rank("A=1\0B=2", 7) == -1);
	CHECK(proc_environ_rank("OMPI_COMM_WORLD_RANK=x", 22) == -1);
	/* The rank map of a cluster stage: (node, local index). */
	CHECKN("rank 0 is n1's card 0", rank_card("n1:2,n2:2", 0, "n1") == 0);
	CHECKN("rank 3 is n2's card 1", rank_card("n1:2,n2:2", 3, "n2") == 1);
	CHECKN("rank 2 is not n1's", rank_card("n1:2,n2:2", 2, "n1") == RANK_ELSEWHERE);
	CHECKN("past the map", rank_card("n1:2,n2:2", 4, "n2") == RANK_UNMAPPED);
	CHECKN("a name that only starts the same", rank_card("n1:2,n10:2", 2, "n1") == RANK_ELSEWHERE);
	CHECKN("no map", rank_card("", 0, "n1") == RANK_UNMAPPED);
	CHECKN("a malformed map", rank_card("n1:x", 0, "n1") == RANK_UNMAPPED);
	{
		char v[16];
		CHECK(proc_environ_get("A=1\0DAY0_RANKS=n1:2\0", 20, "DAY0_RANKS", v, sizeof v) == 0 && !strcmp(v, "n1:2"));
		CHECK(proc_environ_get("A=1\0DAY0_RANKSX=1\0", 18, "DAY0_RANKS", v, sizeof v) < 0);
	}
	{
		const char *dev = "Inter-|   Receive |  Transmit\n face |bytes\n"
				  "    lo: 100 0 0 0 0 0 0 0 200 0 0 0 0 0 0 0\n"
				  "  eth0: 7 0 0 0 0 0 0 0 9 0 0 0 0 0 0 0\n";
		CHECKN("all but lo by default", proc_netdev_if(dev, NULL, &rx, &tx) == 0 && rx == 7 && tx == 9);
		CHECKN("--net-if lo: loopback nodes", proc_netdev_if(dev, "lo", &rx, &tx) == 0 && rx == 100 && tx == 200);
	}

	/* This process's own files parse. */
	f = fopen("/proc/self/stat", "r");
	n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	CHECKN("/proc/self/stat parses, session is ours",
	       proc_stat_session(buf, &sid, &start) == 0 && sid == getsid(0));
	f = fopen("/proc/self/status", "r");
	n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	CHECKN("/proc/self/status parses",
	       proc_status_mem(buf, &rss, &hwm) == 0 && rss > 0 && hwm >= rss);

	{
		struct agent_config cfg = {0};
		struct cards c;
		struct d0_err err;
		struct rank_mem r[] = {
		    {0, 100, 150}, {1, 200, 250}, {0, 10, 10}, {5, 999, 999}};
		cfg.cards = 2;
		cfg.card_mem = 1 << 20;
		snprintf(cfg.vendor, sizeof cfg.vendor, "cpu");
		CHECK(cards_init(&c, &cfg, &err) == 0 && c.n == 2 &&
		      c.card[1].mem_bytes == 1 << 20);
		cards_refresh(&c, r, 4);
		CHECKN("CPU cards: a card's memory is its rank's",
		       c.card[0].used == 110 && c.card[1].used == 200);
		CHECKN("CPU cards: peaks include high-water marks",
		       c.card[0].peak == 150 && c.card[1].peak == 250);
		cards_refresh(&c, NULL, 0);
		CHECK(c.card[0].used == 0 && c.card[0].peak == 150);
		cards_shutdown(&c);
		snprintf(cfg.vendor, sizeof cfg.vendor, "tpu");
		CHECK(cards_init(&c, &cfg, &err) < 0 &&
		      strstr(err.msg, "no such vendor"));
	}
	return unit_done();
}
