/*
 * inventory.h - inventory files and node-set expansion (inventory.c, docs/inventory.md).
 */
#ifndef DAY0_INVENTORY_H
#define DAY0_INVENTORY_H

#include "util.h"

/* -------------------------------------------------------------- inventory */

/* docs/inventory.md.  Link bandwidths in Gbit/s (0: not stated); one
 * message's latency on each link in microseconds and the straggler factor
 * per extra node a replica spans (the planner's, docs/plan.md; -1: not
 * stated, the planner's defaults apply). */
struct inv_node {
	char name[64], host[256], user[64], identity[256], transport[8];
	char labels[256]; /* comma-separated */
	int port, cards;
	uint64_t card_mem;
	double intra_gbps, inter_gbps;
	double intra_lat_us, inter_lat_us, straggler;
};
struct inventory {
	char name[128];
	struct inv_node *nodes;
	size_t n;
};
int inventory_load(const char *path, struct inventory *inv,
		   struct d0_err *err);
/* The same from text (name is used in messages; the fuzz target's door). */
int inventory_parse(const char *text, size_t len, const char *name,
		    struct inventory *inv, struct d0_err *err);
void inventory_free(struct inventory *inv);
/* "n[01-03],x" -> n01 n02 n03 x (malloc'd array of malloc'd strings). */
int nodeset_expand(const char *set, char ***names, size_t *n,
		   struct d0_err *err);

#endif
