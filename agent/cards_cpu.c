/*
 * cards_cpu.c - CPU "cards": on a machine without accelerators a card is
 * one MPI rank with its own memory budget (--cards N --card-mem BYTES).
 * A card's memory in use is the resident memory of the processes that
 * are rank i of a running stage; its peak includes their high-water marks
 * (VmHWM), so a spike between two samples still shows.
 */
#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cpu_init(struct cards *c, const struct agent_config *cfg,
		    struct d0_err *why)
{
	uint64_t mem = cfg->card_mem;
	if (cfg->cards < 0)
		return d0_errf(why, "negative card count");
	if (!mem && cfg->cards > 0) {
		long pages = sysconf(_SC_PHYS_PAGES),
		     psz = sysconf(_SC_PAGESIZE);
		mem = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz /
						 (uint64_t)cfg->cards
					   : 0;
	}
	c->n = cfg->cards;
	c->card = calloc((size_t)(c->n ? c->n : 1), sizeof *c->card);
	if (!c->card)
		abort();
	for (int i = 0; i < c->n; i++) {
		snprintf(c->card[i].name, sizeof c->card[i].name, "cpu rank %d",
			 i);
		c->card[i].mem_bytes = mem;
	}
	return 0;
}

static void cpu_shutdown(struct cards *c)
{
	(void)c;
}

static int cpu_refresh(struct cards *c, const struct rank_mem *ranks,
		       size_t nranks)
{
	for (int i = 0; i < c->n; i++)
		c->card[i].used = 0;
	for (size_t k = 0; k < nranks; k++) {
		int i = ranks[k].rank;
		if (i < 0 || i >= c->n)
			continue;
		c->card[i].used += ranks[k].rss;
		if (ranks[k].hwm > c->card[i].peak)
			c->card[i].peak = ranks[k].hwm;
	}
	return 0;
}

const struct card_vendor card_vendor_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .refresh = cpu_refresh,
};
