/*
 * cards.c - the accelerator registry: which vendor unit reports the
 * cards.  Each vendor is one file (cards_nvml.c, cards_cpu.c) filling a
 * `struct card_vendor`, the shape of nvtop's gpu_vendor; `auto` tries them
 * in order and takes the first that finds cards, so one binary runs with
 * or without a GPU driver.
 */
#include "agent.h"

#include <stdlib.h>
#include <string.h>

static const struct card_vendor *const vendors[] = {
    &card_vendor_nvml,
    &card_vendor_cpu,
    NULL,
};

int cards_init(struct cards *c, const struct agent_config *cfg,
	       struct d0_err *err)
{
	struct d0_err why;
	memset(c, 0, sizeof *c);
	for (int i = 0; vendors[i]; i++) {
		const struct card_vendor *v = vendors[i];
		if (strcmp(cfg->vendor, "auto") && strcmp(cfg->vendor, v->name))
			continue;
		why.msg[0] = 0;
		if (v->init(c, cfg, &why) == 0) {
			c->vendor = v;
			return 0;
		}
		if (strcmp(cfg->vendor, "auto"))
			return d0_errf(err, "--vendor %s: %s", v->name,
				       why.msg);
	}
	return d0_errf(err, "--vendor %s: no such vendor (auto, nvml, cpu)",
		       cfg->vendor);
}

void cards_refresh(struct cards *c, const struct rank_mem *ranks, size_t nranks)
{
	if (!c->vendor || c->n == 0)
		return;
	c->vendor->refresh(c, ranks, nranks);
	for (int i = 0; i < c->n; i++)
		if (c->card[i].used > c->card[i].peak)
			c->card[i].peak = c->card[i].used;
}

void cards_shutdown(struct cards *c)
{
	if (c->vendor)
		c->vendor->shutdown(c);
	free(c->card);
	memset(c, 0, sizeof *c);
}
