/*
 * tui_feed.c - bench/tui.sh's simulated cluster: NODES nodes of CARDS cards
 * sampling at HZ for SECONDS, paced on the wall clock, as agents would send
 * them (mem.used and mem.peak per card, host memory and NIC rates per node,
 * mem.budget once, a stage progress and a check per node every 10 s).
 * Event lines on stdout.  Stands in for `day0-agent --simulate N` until
 * that lands.
 *
 *   tui_feed NODES CARDS HZ SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: tui_feed NODES CARDS HZ SECONDS\n");
		return 2;
	}
	int nodes = atoi(argv[1]), cards = atoi(argv[2]);
	double hz = atof(argv[3]), secs = atof(argv[4]);
	long long *seq = calloc((size_t)nodes, sizeof *seq);
	long long t0 = now_ns(), period = (long long)(1e9 / hz);
	long long ticks = (long long)(secs * hz);
	static char buf[1 << 20];
	setvbuf(stdout, buf, _IOFBF, sizeof buf);
	for (long long k = 0; k < ticks; k++) {
		long long due = t0 + k * period, ts;
		struct timespec d;
		while ((ts = now_ns()) < due) {
			d.tv_sec = 0;
			d.tv_nsec = due - ts;
			nanosleep(&d, NULL);
		}
		for (int n = 0; n < nodes; n++) {
#define EV(fmt, ...)                                                         \
	printf("{\"v\":1,\"seq\":%lld,\"ts\":%lld,\"node\":\"n%03d\"," fmt   \
	       "}\n",                                                        \
	       ++seq[n], ts, n + 1, __VA_ARGS__)
			for (int c = 0; c < cards; c++) {
				double used = 40e9 + 30e9 * ((k + n * 7 + c * 3) % 100) / 100.0;
				if (k == 0)
					EV("\"type\":\"sample\",\"card\":%d,\"metric\":\"mem.budget\",\"value\":%lld", c, 85899345920LL);
				EV("\"type\":\"sample\",\"card\":%d,\"metric\":\"mem.used\",\"value\":%.1f", c, used);
				EV("\"type\":\"sample\",\"card\":%d,\"metric\":\"mem.peak\",\"value\":%.1f", c, 70e9);
			}
			EV("\"type\":\"sample\",\"card\":-1,\"metric\":\"host.mem.used\",\"value\":%.1f", 1e11 + k);
			EV("\"type\":\"sample\",\"card\":-1,\"metric\":\"net.rx_bps\",\"value\":%.1f", 1e9 * ((k + n) % 17));
			EV("\"type\":\"sample\",\"card\":-1,\"metric\":\"net.tx_bps\",\"value\":%.1f", 1e9 * ((k + 3 * n) % 13));
			if (k % (long long)(10 * hz) == 0) {
				EV("\"type\":\"stage\",\"stage\":\"soak\",\"stage_id\":\"soak\",\"state\":\"progress\",\"progress\":%.3f,\"msg\":\"tick %lld\"", k / (secs * hz), k);
				EV("\"type\":\"check\",\"item\":\"stability.soak\",\"status\":\"%s\",\"detail\":\"tick %lld\",\"value\":0,\"threshold\":0", "running", k);
			}
		}
		fflush(stdout);
	}
	return 0;
}
