/*
 * cards.c - the accelerator registry: which vendor unit reports the
 * cards.  Each vendor is one file (cards_nvml.c, cards_cpu.c) filling a
 * `struct card_vendor`, the shape of nvtop's gpu_vendor; `auto` tries them
 * in order and takes the first that finds cards, so one binary runs with
 * or without a GPU driver.
 */
#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	for (int i = 0; i < c->n; i++)
		if (c->card[i].peak > c->card[i].saved)
			c->peak_rose = 1;
}

static void peaks_path(const char *dir, const char *name, char *out,
		       size_t max)
{
	snprintf(out, max, "%s/%s", dir, name);
}

void cards_load_peaks(struct cards *c, const char *dir, int fresh_spool)
{
	char path[4200];
	FILE *f;
	peaks_path(dir, "peaks", path, sizeof path);
	if (fresh_spool) { /* another stream's marks, if any */
		unlink(path);
		return;
	}
	f = fopen(path, "r");
	if (!f)
		return;
	for (int i = 0; i < c->n; i++) {
		unsigned long long v;
		if (fscanf(f, "%llu", &v) != 1)
			break;
		if (v > c->card[i].peak)
			c->card[i].peak = v;
		c->card[i].saved = c->card[i].peak;
	}
	fclose(f);
}

void cards_save_peaks(struct cards *c, const char *dir)
{
	char path[4200], tmp[4200];
	FILE *f;
	if (!c->peak_rose)
		return;
	c->peak_rose = 0;
	peaks_path(dir, "peaks", path, sizeof path);
	peaks_path(dir, "peaks.tmp", tmp, sizeof tmp);
	f = fopen(tmp, "w");
	if (!f)
		return;
	for (int i = 0; i < c->n; i++)
		fprintf(f, "%llu\n", (unsigned long long)c->card[i].peak);
	if (fclose(f) == 0 && rename(tmp, path) == 0)
		for (int i = 0; i < c->n; i++)
			c->card[i].saved = c->card[i].peak;
	else
		unlink(tmp);
}

void cards_shutdown(struct cards *c)
{
	if (c->vendor)
		c->vendor->shutdown(c);
	free(c->card);
	memset(c, 0, sizeof *c);
}
