/*
 * simulate.h - `day0-agent --simulate N`: N simulated cards instead of
 * the /proc and vendor samplers (simulate.c); hello and facts report them
 * as CPU cards of --card-mem (80 GiB by default).  For the console's scale
 * benchmark and demos without a cluster: 1024 cards at 10 Hz is ~20k
 * events a second from one agent.
 */
#ifndef DAY0_SIMULATE_H
#define DAY0_SIMULATE_H

struct agent;

/* Simulated cards (set by main.c from --simulate); 0: off. */
extern int simulate_cards;

/* One sampler tick of simulated samples (called by sampler_tick). */
void simulate_tick(struct agent *a);

#endif
