/*
 * screen_cards.c - one node's cards: a row per card (used, peak, budget,
 * headroom, rank RSS, bar, recent history) and the selected card's memory
 * history as a graph with its peak and budget lines (nvtop's shape).
 */
#include "tui.h"

#include <math.h>
#include <string.h>

static const struct view_node *cur_node(struct tui *ui, const struct view *v)
{
	if (!v->nnodes)
		return NULL;
	if (ui->sel_node >= (int)v->nnodes)
		ui->sel_node = (int)v->nnodes - 1;
	if (ui->sel_node < 0)
		ui->sel_node = 0;
	return &v->nodes[ui->sel_node];
}

static void graph(struct tui *ui, WINDOW *w, int y0, int h, int cols,
		  const struct view_card *c, int card)
{
	const struct tui_glyphs *g = ui->g;
	double top = c->budget > 0 ? c->budget : 0;
	int n = cols - 8;
	if (n > c->hist.n)
		n = c->hist.n;
	for (int i = 0; i < c->hist.n; i++) {
		double x = view_ring_get(&c->hist, i);
		if (x > top)
			top = x;
	}
	if (!isnan(c->peak) && c->peak > top)
		top = c->peak;
	if (h < 3 || top <= 0)
		return;
	int gh = h - 1;
	char lab[16];
	tui_printf(w, y0, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "card %d memory, last %d samples (%s peak, %s budget)", card,
		   c->hist.n, g->hline, "=");
	for (int r = 0; r < gh; r++) {
		double lo = top * (gh - 1 - r) / gh, hi = top * (gh - r) / gh;
		int y = y0 + 1 + r;
		if (r == 0 || r == gh - 1 || r == gh / 2) {
			tui_bytes(hi, lab, sizeof lab);
			tui_printf(w, y, 0, 7, tui_attr(ui, ROLE_DIM), "%6s", lab);
		}
		int budget_row = c->budget > 0 && c->budget > lo && c->budget <= hi;
		int peak_row = !isnan(c->peak) && c->peak > lo && c->peak <= hi;
		for (int i = 0; i < n; i++) {
			double x = view_ring_get(&c->hist, c->hist.n - n + i);
			int xx = 8 + i;
			if (!isnan(x) && x > lo)
				tui_put(w, y, xx, 1,
					tui_attr(ui, tui_mem_role(x, c->budget)),
					x >= hi ? g->full : g->spark[(int)((x - lo) / (hi - lo) * 7)]);
			else if (budget_row)
				tui_put(w, y, xx, 1, tui_attr(ui, ROLE_FAIL), "=");
			else if (peak_row)
				tui_put(w, y, xx, 1, tui_attr(ui, ROLE_MARK), g->hline);
		}
	}
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols;
	char a[16], b[16], c_[16], d[16];
	getmaxyx(w, rows, cols);
	const struct view_node *n = cur_node(ui, v);
	if (!n) {
		tui_put(w, 0, 0, cols, tui_attr(ui, ROLE_DIM), "no node yet");
		return;
	}
	const struct view_node *bn = ui->base ? view_node(ui->base, n->name) : NULL;
	int64_t age;
	int stale = view_node_stale(v, n, &age);
	tui_bytes(n->host_used, a, sizeof a);
	tui_rate(n->rx, b, sizeof b);
	tui_rate(n->tx, c_, sizeof c_);
	int x = tui_printf(w, 0, 0, cols, tui_attr(ui, ROLE_HEAD),
			   "node %s (%d/%zu)", n->name, ui->sel_node + 1,
			   v->nnodes);
	if (*view_node_labels(v, n->name))
		x += tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_MARK),
				"  [%s]", view_node_labels(v, n->name));
	if (n->state[0])
		x += tui_printf(w, 0, x, cols - x,
				tui_attr(ui, strcmp(n->state, "done") ? ROLE_FAIL
								     : ROLE_OK),
				"  %s%s%s", n->state, n->why[0] ? ": " : "",
				n->why);
	x += tui_printf(w, 0, x, cols - x, A_NORMAL,
			"  host mem %s  rx %s  tx %s", a, b, c_);
	if (stale) {
		tui_dur(age, d, sizeof d);
		tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_DIM),
			   "  silent for %s", d);
	}
	tui_printf(w, 1, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "%-5s %8s %8s %8s %5s %8s  %s", "card", "used", "peak",
		   "budget", "use", "rss", "memory / history");
	int listh = rows / 2 - 2;
	if (listh < 1)
		listh = 1;
	int shown = 0, first = 0;
	if (ui->sel_card >= n->ncards)
		ui->sel_card = n->ncards - 1;
	if (ui->sel_card < 0)
		ui->sel_card = 0;
	if (ui->sel_card >= listh)
		first = ui->sel_card - listh + 1;
	for (int k = first; k < n->ncards && shown < listh; k++) {
		const struct view_card *c = &n->cards[k];
		int y = 2 + shown++;
		if (!c->present)
			continue;
		tui_bytes(c->used, a, sizeof a);
		tui_bytes(c->peak, b, sizeof b);
		tui_bytes(c->budget, c_, sizeof c_);
		tui_bytes(c->rss, d, sizeof d);
		x = tui_printf(w, y, 0, cols,
			       tui_attr(ui, k == ui->sel_card ? ROLE_SEL : ROLE_NORMAL),
			       "%-5d", k);
		x += tui_printf(w, y, x, cols - x,
				tui_attr(ui, stale ? ROLE_DIM : ROLE_NORMAL),
				" %8s %8s %8s", a, b, c_);
		x += tui_printf(w, y, x, cols - x,
				tui_attr(ui, stale ? ROLE_DIM
					 : tui_mem_role(c->used, c->budget)),
				" %4.0f%%",
				c->budget > 0 ? c->used / c->budget * 100 : 0);
		x += tui_printf(w, y, x, cols - x, A_NORMAL, " %8s  ", d);
		int bw = (cols - x) / 2;
		if (bw > 24)
			bw = 24;
		tui_membar(ui, w, y, x, bw, c->used, c->peak, c->budget, stale);
		x += bw + 1;
		if (bn && k < bn->ncards && bn->cards[k].present) {
			x += tui_put(w, y, x, cols - x, tui_attr(ui, ROLE_DIM), "peak");
			x += tui_delta(ui, w, y, x, cols - x, c->peak,
				       bn->cards[k].peak, 0);
			x++;
		}
		tui_spark(ui, w, y, x, cols - x, &c->hist,
			  tui_attr(ui, stale ? ROLE_DIM : ROLE_BAR));
	}
	if (n->ncards && n->cards[ui->sel_card].present)
		graph(ui, w, 2 + listh + 1, rows - (2 + listh + 1), cols,
		      &n->cards[ui->sel_card], ui->sel_card);
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	switch (key) {
	case KEY_UP: ui->sel_card--; return 1;
	case KEY_DOWN: ui->sel_card++; return 1;
	case KEY_PPAGE: ui->sel_node--; ui->sel_card = 0; return 1;
	case KEY_NPAGE: ui->sel_node++; ui->sel_card = 0; return 1;
	case 'h': ui->sel_node--; return 1;
	case 'l': ui->sel_node++; return 1;
	case KEY_LEFT:
		if (ui->replay)
			return 0;
		ui->sel_node--;
		return 1;
	case KEY_RIGHT:
		if (ui->replay)
			return 0;
		ui->sel_node++;
		return 1;
	}
	return 0;
}

const struct tui_screen screen_cards = {"Cards", draw, on_key};
