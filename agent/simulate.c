/*
 * simulate.c - `day0-agent --simulate N`: what a busy node with N cards
 * looks like to the console, without the node.  Every sampler tick emits,
 * for every card i, `mem.used`, `mem.peak` (its high-water mark, as a
 * real agent's card units keep it: the console's "peak" is the last one)
 * and `rank.rss` (and `mem.budget` on the
 * first tick and every 10 s after, since it does not change) as `sample`
 * events of the `values` form (one per metric and 512 cards), plus the
 * host's `net.rx_bps` and `net.tx_bps`.  Events are real events: they go
 * through agent_emit (envelope, seq, spool) like the samplers' own.
 *
 * The patterns are deterministic functions of (card, time) so a replay
 * of a benchmark looks the same every time, and different per card so the
 * screens have something to tell apart:
 *   i % 4 == 0  weights loading: a ramp over 20-40 s to a plateau;
 *   i % 4 == 1  a plateau with noise (a steady server);
 *   i % 4 == 2  a sawtooth (a KV cache filling and being freed);
 *   i % 4 == 3  steps (batches of requests arriving);
 *   card N/2 + 1 (mod N) also leaks slowly: +0.3% of its budget every
 *   second, without bound, so a "memory growth" alarm has a culprit.
 *
 * Stages (--sim-model CONFIG): simulate_stage_args turns an engine step
 * into `day0-engine simulate STEP` with this node's model (cards, card
 * memory, disk and link GB/s, half speed for a straggler, the injected
 * failure rates); stage.c spawns it as it would the step, so the events
 * take the real path.  A cluster stage runs as one process for every rank
 * (no mpirun): it goes at the speed of its slowest node.
 */
#include "agent.h"
#include "simulate.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

int simulate_cards;
struct sim_stages sim_stages = {.disk_gbps = 2, .link_gbps = 25, .scale = 1,
				.seed = 1};

int simulate_on(void)
{
	return simulate_cards > 0 || sim_stages.model[0];
}

/* Is name one of the comma-separated names of list? */
static int in_list(const char *list, const char *name, size_t n)
{
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t k = e ? (size_t)(e - p) : strlen(p);
		if (k == n && !strncmp(p, name, n))
			return 1;
		p = e ? e + 1 : NULL;
	}
	return 0;
}

/* Does a straggler run this stage: this node, or a node of its rank map
 * ("n1:8,n2:8")? */
static int has_straggler(const struct agent *a, const char *ranks)
{
	if (!sim_stages.stragglers[0])
		return 0;
	if (in_list(sim_stages.stragglers, a->cfg.node, strlen(a->cfg.node)))
		return 1;
	for (const char *p = ranks; p && *p;) {
		const char *colon = strchr(p, ':'), *e = strchr(p, ',');
		if (colon && (!e || colon < e) &&
		    in_list(sim_stages.stragglers, p, (size_t)(colon - p)))
			return 1;
		p = e ? e + 1 : NULL;
	}
	return 0;
}

json_t *simulate_stage_args(const struct agent *a, const char *step, int np,
			    const char *ranks, int rehearsal, json_t *args)
{
	json_t *v = json_array(), *x;
	size_t i;
	int cards = a->cfg.cards > 0 ? a->cfg.cards : 1;
	json_array_append_new(v, json_string("simulate"));
	json_array_append_new(v, json_string(step));
	json_array_append_new(v, json_string("--model"));
	json_array_append_new(v, json_string(sim_stages.model));
	json_array_append_new(v, json_sprintf("--np=%d", np));
	json_array_append_new(v, json_sprintf("--cards=%d", cards));
	if (a->cfg.card_mem)
		json_array_append_new(v, json_sprintf("--card-mem=%llu",
						      (unsigned long long)
							  a->cfg.card_mem));
	json_array_append_new(v, json_sprintf("--disk-gbps=%g",
					      sim_stages.disk_gbps));
	json_array_append_new(v, json_sprintf("--link-gbps=%g",
					      sim_stages.link_gbps));
	json_array_append_new(v, json_sprintf("--scale=%g", sim_stages.scale));
	json_array_append_new(v, json_sprintf("--speed=%g",
					      has_straggler(a, ranks) ? 0.5
								      : 1.0));
	if (sim_stages.fail[0])
		json_array_append_new(v, json_sprintf("--fail=%s",
						      sim_stages.fail));
	json_array_append_new(v, json_sprintf("--seed=%lu", sim_stages.seed));
	if (rehearsal)
		json_array_append_new(v, json_string("--rehearsal"));
	json_array_append_new(v, json_string("--"));
	json_array_foreach(args, i, x)
	{
		if (json_is_string(x) && strcmp(json_string_value(x), "--events"))
			json_array_append(v, x);
	}
	return v;
}

/* Cards per `sample` event: 512 byte counts stay far below the 64 KiB
 * line limit. */
#define SIM_BLOCK 512

/* A reproducible value in [0, 1) from two integers (splitmix64). */
static double hash01(uint64_t a, uint64_t b)
{
	uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (double)(z >> 11) / 9007199254740992.0;
}

/* Fraction of the budget card i uses at t seconds (tick k for noise). */
static double used_frac(int i, int n, double t, uint64_t k)
{
	double jitter = (hash01((uint64_t)i, k) - 0.5) * 0.01;
	double base = 0.45 + 0.3 * hash01((uint64_t)i, 1); /* 45-75% */
	double f;
	switch (i % 4) {
	case 0: {
		double ramp = 20 + 20 * hash01((uint64_t)i, 2);
		f = base * (t < ramp ? t / ramp : 1);
		break;
	}
	case 1:
		f = base;
		break;
	case 2: {
		double period = 15 + 15 * hash01((uint64_t)i, 3);
		f = base + 0.15 * fmod(t + period * hash01((uint64_t)i, 4),
				       period) / period;
		break;
	}
	default: {
		double step = 5 + 5 * hash01((uint64_t)i, 5);
		f = base * 0.6 + 0.08 * fmod(floor(t / step), 5);
		break;
	}
	}
	if (n > 1 && i == (n / 2 + 1) % n)
		f += 0.003 * t; /* the leak */
	f += jitter;
	return f < 0 ? 0 : f > 1 ? 1 : f;
}

/* Cards whose high-water mark is kept (past them mem.peak is mem.used). */
#define SIM_PEAK_CARDS 65536

void simulate_tick(struct agent *a)
{
	static double t0 = -1, last_budget = -1e9;
	static double peak[SIM_PEAK_CARDS];
	static uint64_t tick;
	double now = agent_now(), t;
	uint64_t budget = a->cfg.card_mem; /* main.c: 80 GiB by default */
	int n = simulate_cards, budget_now;
	if (t0 < 0)
		t0 = now;
	t = now - t0;
	budget_now = now - last_budget >= 10;
	if (budget_now)
		last_budget = now;
	tick++;
	/* One event per metric and block of SIM_BLOCK cards (the `values`
	 * form): 1024 cards at 10 Hz are 60 lines a second (used, peak, rss), not 30000. */
	for (int first = 0; first < n; first += SIM_BLOCK) {
		int m = n - first < SIM_BLOCK ? n - first : SIM_BLOCK;
		json_t *vu = json_array(), *vr = json_array(), *vb = NULL;
		json_t *vp = json_array();
		if (budget_now)
			vb = json_array();
		for (int i = first; i < first + m; i++) {
			double used = used_frac(i, n, t, tick) * (double)budget;
			if (i < SIM_PEAK_CARDS && used > peak[i])
				peak[i] = used;
			json_array_append_new(
			    vp, json_integer((json_int_t)(i < SIM_PEAK_CARDS
							       ? peak[i]
							       : used)));
			/* the rank's host memory: runtime, pinned staging
			 * buffers */
			double rss = 1.5 * (1 << 30) + 0.04 * used +
				     (double)(64 << 20) * hash01((uint64_t)i, tick);
			json_array_append_new(vu, json_integer((json_int_t)used));
			json_array_append_new(vr, json_integer((json_int_t)rss));
			if (vb)
				json_array_append_new(
				    vb, json_integer((json_int_t)budget));
		}
		if (vb)
			agent_emit(a, "sample",
				   json_pack("{s:i, s:s, s:o}", "card", first,
					     "metric", "mem.budget", "values", vb),
				   0);
		agent_emit(a, "sample",
			   json_pack("{s:i, s:s, s:o}", "card", first, "metric",
				     "mem.used", "values", vu),
			   0);
		agent_emit(a, "sample",
			   json_pack("{s:i, s:s, s:o}", "card", first, "metric",
				     "mem.peak", "values", vp),
			   0);
		agent_emit(a, "sample",
			   json_pack("{s:i, s:s, s:o}", "card", first, "metric",
				     "rank.rss", "values", vr),
			   0);
	}
	/* the host's NIC: all-to-all bursts over a steady stream, GB/s */
	{
		double burst = fmod(t, 4) < 1 ? 1 : 0;
		double rx = (2 + 8 * burst + hash01(7, tick)) * 1e9;
		double tx = (2 + 7.5 * burst + hash01(8, tick)) * 1e9;
		agent_emit(a, "sample",
			   json_pack("{s:i, s:s, s:f}", "card", -1, "metric",
				     "net.rx_bps", "value", rx),
			   0);
		agent_emit(a, "sample",
			   json_pack("{s:i, s:s, s:f}", "card", -1, "metric",
				     "net.tx_bps", "value", tx),
			   0);
	}
}
