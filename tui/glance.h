/*
 * glance.h - the figures the Overview shows at a glance, computed from
 * the view model once for every place that prints them: the live and
 * replay screens (screen_overview.c, overview_panels.c) and the headless
 * run's closing tables (runner_out.c), so they cannot disagree.
 *
 *   memory     a card's used, peak (the highest of mem.peak and mem.used
 *              seen), budget and headroom ((budget - peak) / budget);
 *              a node set's worst card (least headroom)
 *   checklist  per status, how many registry items have it (the
 *              verdict's status once there is one, else the worst
 *              evidence), and the first item of the worst status among
 *              fail, not run and warn
 *   network    a node set's NIC rx/tx (the last net.* samples, summed),
 *              the running collective's bus bandwidth (the latest comm
 *              event of the set, when it is at most GLANCE_BUS_NS old),
 *              and per NIC sample tick the data moved: rx + tx, or the
 *              bus bandwidth of the collectives that ended in that tick
 *              when it is higher (collectives inside a node go through
 *              shared memory or NVLink, which no NIC counter sees)
 */
#ifndef DAY0_GLANCE_H
#define DAY0_GLANCE_H

#include "view.h"

/* A comm event older than this (ns) is no longer "running". */
#define GLANCE_BUS_NS 3000000000LL

struct glance_card {
	const char *node; /* the node's name (the view's) */
	int card;
	double used, peak, budget; /* bytes, NAN when not reported */
	double headroom;	   /* (budget - peak) / budget, NAN: none */
};

/* The figures of node n's card c (c < n->ncards, present). */
void glance_card(const struct view_node *n, int c, struct glance_card *out);
/* The worst card (least headroom, then most used) of nodes first..last
 * (indexes into v->nodes); returns how many cards they have (0: none,
 * *out untouched). */
int glance_worst(const struct view *v, size_t first, size_t last,
		 struct glance_card *out);
/* Does node n's card c have figures (used or budget)?  A card known only
 * by its ranks' RSS has none: the memory lines leave it out. */
int glance_has(const struct view_node *n, int c);
/* Cards with figures of nodes first..last. */
int glance_ncards(const struct view *v, size_t first, size_t last);
/* Has node n NIC samples or comm events (a network line to show)? */
int glance_has_net(const struct view *v, const struct view_node *n);

/* Statuses in the order the summary counts them; GLANCE_NONE: no
 * evidence yet. */
enum glance_status {
	GLANCE_PASS, GLANCE_WARN, GLANCE_FAIL, GLANCE_NOTRUN, GLANCE_RUNNING,
	GLANCE_PENDING, GLANCE_SKIP, GLANCE_NONE, GLANCE_NSTATUS
};
extern const char *const glance_status_name[GLANCE_NSTATUS];

struct glance_checklist {
	int n[GLANCE_NSTATUS];
	const char *first;	  /* item id, NULL when none fails/warns */
	const char *first_status; /* its status */
	const struct view_check *first_check; /* its worst evidence, or NULL */
};

void glance_checklist(const struct view *v, struct glance_checklist *out);

struct glance_net {
	double rx, tx;	/* bytes/s, NAN when no sample */
	int bus;	/* a collective ran in the last GLANCE_BUS_NS */
	double busbw;	/* GB/s of the latest one */
	char op[24];
	int64_t bytes;
	int ranks;
};

void glance_net(const struct view *v, size_t first, size_t last,
		struct glance_net *out);
/* Data moved by node n per NIC sample tick, oldest first, the last max
 * ticks (bytes/s); returns how many. */
int glance_moved(const struct view *v, const struct view_node *n,
		 double *vals, int max);
/* The same summed over nodes first..last (a folded node set: the line
 * beside the set's summed rx/tx), the nodes' ticks lined up at the
 * newest; max <= GLANCE_MOVED_MAX. */
#define GLANCE_MOVED_MAX 64
int glance_moved_set(const struct view *v, size_t first, size_t last,
		     double *vals, int max);

#endif
