/*
 * simulate.h - `day0-agent --simulate N`: N simulated cards instead of
 * the /proc and vendor samplers (simulate.c); hello and facts report them
 * as CPU cards of --card-mem (80 GiB by default).  For the console's scale
 * benchmark and demos without a cluster: 1024 cards at 10 Hz is ~20k
 * events a second from one agent.
 */
#ifndef DAY0_SIMULATE_H
#define DAY0_SIMULATE_H

#include <jansson.h>

struct agent;
struct stage;

/*
 * Stage simulation (--sim-model): every engine step runs as `day0-engine
 * simulate STEP ... -- ARGS` (engine/step_simulate.c) on a model of this
 * node instead of the step itself, and every event the agent sends says
 * `sim: true`.  The stage machinery (spawn, pipes, forwarding, spool, ack,
 * cancel, timeout) is the real one; only the work is simulated.
 */
struct sim_stages {
	char model[4096];    /* config.json or its directory; "": off */
	double disk_gbps;    /* the node's disk (default 2) */
	double link_gbps;    /* the node's link (default 25) */
	double scale;	     /* durations divided by it (default 1) */
	char fail[512];	     /* STEP:RATE,... ("" none) */
	char stragglers[1024]; /* nodes at half speed, comma-separated */
	unsigned long seed;
};
extern struct sim_stages sim_stages;

/* Is anything simulated (cards or stages)?  Then events say sim: true. */
int simulate_on(void);
/* The arguments after the engine's path for an engine step of st under
 * stage simulation: "simulate STEP --model ... -- ARGS..." (np: the
 * stage's ranks; ranks: a cluster stage's rank map, for the stragglers). */
json_t *simulate_stage_args(const struct agent *a, const char *step, int np,
			    const char *ranks, int rehearsal, json_t *args);

/* Simulated cards (set by main.c from --simulate); 0: off. */
extern int simulate_cards;

/* One sampler tick of simulated samples (called by sampler_tick). */
void simulate_tick(struct agent *a);

#endif
