/*
 * glance.c - the Overview's figures from the view model: see glance.h.
 * No drawing here: the screens and the headless tables print these.
 */
#include "glance.h"
#include "checklist.h"

#include <math.h>
#include <string.h>

void glance_card(const struct view_node *n, int c, struct glance_card *out)
{
	const struct view_card *k = &n->cards[c];
	out->node = n->name;
	out->card = c;
	out->used = k->used;
	out->budget = k->budget;
	/* mem.peak is the agent's high-water mark; a used value above it
	 * (a sample between two peaks) is the peak too. */
	out->peak = isnan(k->peak) ? k->used
		    : !isnan(k->used) && k->used > k->peak ? k->used
							   : k->peak;
	out->headroom = !isnan(out->peak) && out->budget > 0
			    ? (out->budget - out->peak) / out->budget
			    : NAN;
}

/* Is a worse than b (less headroom; then more used; a card with a
 * headroom worse than one without)? */
static int worse(const struct glance_card *a, const struct glance_card *b)
{
	if (isnan(a->headroom) != isnan(b->headroom))
		return !isnan(a->headroom);
	if (!isnan(a->headroom) && a->headroom != b->headroom)
		return a->headroom < b->headroom;
	return !isnan(a->used) && (isnan(b->used) || a->used > b->used);
}

int glance_has(const struct view_node *n, int c)
{
	const struct view_card *k = &n->cards[c];
	return k->present && (!isnan(k->used) || !isnan(k->budget));
}

int glance_worst(const struct view *v, size_t first, size_t last,
		 struct glance_card *out)
{
	int n = 0;
	for (size_t i = first; i <= last && i < v->nnodes; i++)
		for (int c = 0; c < v->nodes[i].ncards; c++) {
			struct glance_card g;
			if (!glance_has(&v->nodes[i], c))
				continue;
			glance_card(&v->nodes[i], c, &g);
			if (!n++ || worse(&g, out))
				*out = g;
		}
	return n;
}

int glance_ncards(const struct view *v, size_t first, size_t last)
{
	int n = 0;
	for (size_t i = first; i <= last && i < v->nnodes; i++)
		for (int c = 0; c < v->nodes[i].ncards; c++)
			n += glance_has(&v->nodes[i], c);
	return n;
}

int glance_has_net(const struct view *v, const struct view_node *n)
{
	if (!isnan(n->rx) || !isnan(n->tx))
		return 1;
	for (size_t i = v->comm.n; i-- > 0;)
		if (!strcmp(VIEW_AT(v->comm, i)->node, n->name))
			return 1;
	return 0;
}

/* ---------------------------------------------------------------- checklist */

const char *const glance_status_name[GLANCE_NSTATUS] = {
    [GLANCE_PASS] = "pass",	  [GLANCE_WARN] = "warn",
    [GLANCE_FAIL] = "fail",	  [GLANCE_NOTRUN] = "not run",
    [GLANCE_RUNNING] = "running", [GLANCE_PENDING] = "pending",
    [GLANCE_SKIP] = "skip",	  [GLANCE_NONE] = "no evidence",
};

static enum glance_status status_of(const char *s)
{
	for (int i = 0; i < GLANCE_NONE; i++)
		if (s && !strcmp(s, glance_status_name[i]))
			return (enum glance_status)i;
	return GLANCE_NONE;
}

/* The item's worst evidence over nodes and stages (the latest of the
 * worst status). */
static const struct view_check *worst_check(const struct view *v,
					    const char *item)
{
	const struct view_check *w = NULL;
	for (size_t i = 0; i < v->nchecks; i++) {
		const struct view_check *c = &v->checks[i];
		int d;
		if (strcmp(c->item, item))
			continue;
		d = w ? (int)check_status_parse(c->status, NULL) -
			    (int)check_status_parse(w->status, NULL)
		      : 1;
		if (d > 0 || (d == 0 && c->ts > w->ts))
			w = c;
	}
	return w;
}

void glance_checklist(const struct view *v, struct glance_checklist *out)
{
	/* Which statuses name the first item, worst first. */
	static const enum glance_status bad[] = {GLANCE_FAIL, GLANCE_NOTRUN,
						 GLANCE_WARN};
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < checklist_n; i++)
		out->n[status_of(view_item_status(v, checklist_items[i].id))]++;
	for (size_t b = 0; b < sizeof bad / sizeof *bad && !out->first; b++)
		for (size_t i = 0; i < checklist_n; i++) {
			const char *id = checklist_items[i].id;
			if (status_of(view_item_status(v, id)) != bad[b])
				continue;
			/* not run because nothing required it (a release
			 * day's training.*): no failing item */
			if (bad[b] == GLANCE_NOTRUN && view_item_optional(v, id))
				continue;
			out->first = id;
			out->first_status = glance_status_name[bad[b]];
			out->first_check = worst_check(v, id);
			break;
		}
}

/* ------------------------------------------------------------------ network */

/* Is node in the set first..last (names sorted as the view keeps them)? */
static int in_set(const struct view *v, size_t first, size_t last,
		  const char *node)
{
	return strcmp(node, v->nodes[first].name) >= 0 &&
	       strcmp(node, v->nodes[last].name) <= 0;
}

void glance_net(const struct view *v, size_t first, size_t last,
		struct glance_net *out)
{
	memset(out, 0, sizeof *out);
	out->rx = out->tx = NAN;
	out->busbw = NAN;
	if (first >= v->nnodes)
		return;
	if (last >= v->nnodes)
		last = v->nnodes - 1;
	for (size_t i = first; i <= last; i++) {
		const struct view_node *n = &v->nodes[i];
		if (!isnan(n->rx))
			out->rx = (isnan(out->rx) ? 0 : out->rx) + n->rx;
		if (!isnan(n->tx))
			out->tx = (isnan(out->tx) ? 0 : out->tx) + n->tx;
	}
	for (size_t i = v->comm.n; i-- > 0;) {
		const struct view_comm *c = VIEW_AT(v->comm, i);
		if (c->ts > v->t)
			continue;
		if (c->ts < v->t - GLANCE_BUS_NS)
			break;
		if (!in_set(v, first, last, c->node))
			continue;
		out->bus = 1;
		out->busbw = c->busbw;
		out->bytes = c->bytes;
		out->ranks = c->ranks;
		snprintf(out->op, sizeof out->op, "%s", c->op);
		break;
	}
}

int glance_moved(const struct view *v, const struct view_node *n,
		 double *vals, int max)
{
	int k0 = n->rx_hist.n > max ? n->rx_hist.n - max : 0, m = 0;
	int txok = n->tx_hist.n == n->rx_hist.n;
	size_t ci = v->comm.n; /* comm rows newest first, walked once */
	for (int k = n->rx_hist.n - 1; k >= k0; k--) {
		double x = view_ring_get(&n->rx_hist, k);
		int64_t hi = VIEW_RX_TS(n, k),
			lo = k > 0 ? VIEW_RX_TS(n, k - 1) : hi - 1000000000LL;
		if (isnan(x))
			x = 0;
		if (txok && !isnan(view_ring_get(&n->tx_hist, k)))
			x += view_ring_get(&n->tx_hist, k);
		/* The collectives that ended in (lo, hi]. */
		while (ci > 0) {
			const struct view_comm *c = VIEW_AT(v->comm, ci - 1);
			if (c->ts > hi || strcmp(c->node, n->name)) {
				ci--;
				continue;
			}
			if (c->ts <= lo)
				break;
			if (c->busbw * 1e9 > x)
				x = c->busbw * 1e9;
			ci--;
		}
		vals[n->rx_hist.n - 1 - k] = x;
		m++;
	}
	/* oldest first */
	for (int i = 0; i < m / 2; i++) {
		double t = vals[i];
		vals[i] = vals[m - 1 - i];
		vals[m - 1 - i] = t;
	}
	return m;
}

int glance_moved_set(const struct view *v, size_t first, size_t last,
		     double *vals, int max)
{
	double sum[GLANCE_MOVED_MAX] = {0}, one[GLANCE_MOVED_MAX];
	int m = 0;
	if (max > GLANCE_MOVED_MAX)
		max = GLANCE_MOVED_MAX;
	for (size_t i = first; i <= last && i < v->nnodes; i++) {
		int k = glance_moved(v, &v->nodes[i], one, max);
		for (int j = 0; j < k; j++)
			sum[max - k + j] += one[j];
		if (k > m)
			m = k;
	}
	memcpy(vals, sum + (max - m), (size_t)m * sizeof *vals);
	return m;
}
