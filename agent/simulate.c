/*
 * simulate.c - `day0-agent --simulate N`: what a busy node with N cards
 * looks like to the console, without the node.  Every sampler tick emits,
 * for every card i, `mem.used` and `rank.rss` (and `mem.budget` on the
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
 */
#include "agent.h"
#include "simulate.h"

#include <math.h>
#include <stdint.h>

int simulate_cards;

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

void simulate_tick(struct agent *a)
{
	static double t0 = -1, last_budget = -1e9;
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
	 * form): 1024 cards at 10 Hz are 40 lines a second, not 20000. */
	for (int first = 0; first < n; first += SIM_BLOCK) {
		int m = n - first < SIM_BLOCK ? n - first : SIM_BLOCK;
		json_t *vu = json_array(), *vr = json_array(), *vb = NULL;
		if (budget_now)
			vb = json_array();
		for (int i = first; i < first + m; i++) {
			double used = used_frac(i, n, t, tick) * (double)budget;
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
