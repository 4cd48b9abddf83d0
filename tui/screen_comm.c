/*
 * screen_comm.c - communication: busbw against message size per op as
 * bars (the last result of each op and size; with --baseline its delta),
 * the rank map (ranks in node order, a rank per card), and the pairwise
 * send/recv matrix as a heat map with the slowest pairs named (comm
 * events that carry "from" and "to" ranks).
 */
#include "tui.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The last row of (op, bytes) in the base view, or NULL. */
static const struct view_comm *base_row(const struct view *b, const char *op,
					int64_t bytes)
{
	if (!b)
		return NULL;
	for (size_t i = b->comm.n; i-- > 0;) {
		const struct view_comm *c = VIEW_AT(b->comm, i);
		if (!c->inrun && c->from < 0 && c->bytes == bytes &&
		    !strcmp(c->op, op))
			return c;
	}
	return NULL;
}

static int later_same(const struct view *v, size_t i)
{
	const struct view_comm *c = VIEW_AT(v->comm, i);
	for (size_t k = i + 1; k < v->comm.n; k++) {
		const struct view_comm *d = VIEW_AT(v->comm, k);
		if (!d->inrun && d->from < 0 && d->bytes == c->bytes &&
		    !strcmp(d->op, c->op))
			return 1;
	}
	return 0;
}

static int pcmp(const void *a, const void *b)
{
	double x = (*(const struct view_comm *const *)a)->busbw;
	double y = (*(const struct view_comm *const *)b)->busbw;
	return x < y ? -1 : x > y;
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, y = 0;
	getmaxyx(w, rows, cols);
	double mx = 0;
	int npairs = 0, nranks = 0, nrows = 0;
	/* inrun rows (a stage's own collectives over an interval) are the
	 * Overview's, not a sweep: this screen leaves them out */
	for (size_t i = 0; i < v->comm.n; i++) {
		const struct view_comm *c = VIEW_AT(v->comm, i);
		if (c->inrun)
			continue;
		nrows++;
		if (c->from >= 0 && c->to >= 0) {
			npairs++;
			if (c->from + 1 > nranks)
				nranks = c->from + 1;
			if (c->to + 1 > nranks)
				nranks = c->to + 1;
		} else if (c->busbw > mx)
			mx = c->busbw;
	}
	if (!nrows) {
		tui_put(w, 0, 0, cols, tui_attr(ui, ROLE_DIM),
			"no comm results yet (day0-engine comm --events)");
		return;
	}
	/* Bars, op by op in the order ops first appear. */
	const char *ops[32];
	int nops = 0;
	for (size_t i = 0; i < v->comm.n && nops < 32; i++) {
		const struct view_comm *c = VIEW_AT(v->comm, i);
		int seen = 0;
		if (c->from >= 0 || c->inrun)
			continue;
		for (int k = 0; k < nops && !seen; k++)
			seen = !strcmp(ops[k], c->op);
		if (!seen)
			ops[nops++] = c->op;
	}
	int skip = ui->scroll;
	for (int o = 0; o < nops && y < rows; o++) {
		const struct view_comm *first = NULL;
		for (size_t i = 0; i < v->comm.n && !first; i++)
			if (!VIEW_AT(v->comm, i)->inrun &&
			    !strcmp(VIEW_AT(v->comm, i)->op, ops[o]))
				first = VIEW_AT(v->comm, i);
		if (skip-- <= 0)
			tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
				   "%s (%s, %d ranks)  busbw GB/s", ops[o],
				   first->group, first->ranks);
		for (size_t i = 0; i < v->comm.n && y < rows; i++) {
			const struct view_comm *c = VIEW_AT(v->comm, i);
			char sz[16];
			if (c->from >= 0 || c->inrun || strcmp(c->op, ops[o]) ||
			    later_same(v, i))
				continue;
			if (skip-- > 0)
				continue;
			tui_bytes((double)c->bytes, sz, sizeof sz);
			int x = tui_printf(w, y, 0, cols, A_NORMAL, "  %7s ", sz);
			int bw = cols - x - 26;
			if (bw > 50)
				bw = 50;
			int fill = mx > 0 && bw > 0 ? (int)(c->busbw / mx * bw + 0.5) : 0;
			for (int k = 0; k < bw; k++)
				tui_put(w, y, x + k, 1,
					tui_attr(ui, k < fill ? (c->wrong ? ROLE_FAIL : ROLE_BAR) : ROLE_DIM),
					k < fill ? ui->g->full : ui->g->empty);
			x += bw > 0 ? bw : 0;
			x += tui_printf(w, y, x, cols - x,
					tui_attr(ui, c->wrong ? ROLE_FAIL : ROLE_NORMAL),
					" %8.2f%s", c->busbw,
					c->wrong ? " WRONG" : "");
			const struct view_comm *b = base_row(ui->base, c->op, c->bytes);
			if (b)
				tui_delta(ui, w, y, x, cols - x, c->busbw, b->busbw, 1);
			y++;
		}
	}
	/* Rank map: ranks in node order, one per card. */
	if (y < rows && v->nnodes) {
		int r = 0, x;
		x = tui_put(w, y, 0, cols, tui_attr(ui, ROLE_HEAD), "rank map:");
		for (size_t i = 0; i < v->nnodes && x < cols; i++) {
			int nc = v->nodes[i].ncards;
			if (!nc)
				continue;
			x += tui_printf(w, y, x, cols - x, A_NORMAL,
					" %s %d-%d", v->nodes[i].name, r,
					r + nc - 1);
			r += nc;
		}
		y++;
	}
	if (!npairs || y + 2 >= rows)
		return;
	/* The pair matrix: last bandwidth per (from, to), heat by fraction
	 * of the fastest pair. */
	const struct view_comm **pp = calloc((size_t)npairs, sizeof *pp);
	double *m = calloc((size_t)nranks * (size_t)nranks, sizeof *m);
	double pmax = 0;
	int k = 0;
	if (!pp || !m) {
		free(pp);
		free(m);
		return;
	}
	for (size_t i = 0; i < v->comm.n; i++) {
		const struct view_comm *c = VIEW_AT(v->comm, i);
		if (c->from < 0 || c->to < 0)
			continue;
		pp[k++] = c;
		m[c->from * nranks + c->to] = c->busbw;
		if (c->busbw > pmax)
			pmax = c->busbw;
	}
	tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "pairs (%d ranks, row sends, column receives; darker = slower)",
		   nranks);
	int side = nranks;
	if (side > cols - 6)
		side = cols - 6;
	if (side > rows - y - 2)
		side = rows - y - 2;
	for (int i = 0; i < side && y < rows; i++, y++) {
		tui_printf(w, y, 0, 5, tui_attr(ui, ROLE_DIM), "%4d", i);
		for (int j = 0; j < side; j++) {
			double g = m[i * nranks + j];
			if (i == j || g <= 0) {
				tui_put(w, y, 5 + j, 1, tui_attr(ui, ROLE_DIM), " ");
				continue;
			}
			int lvl = (int)(g / pmax * 7 + 0.5);
			tui_put(w, y, 5 + j, 1,
				tui_attr(ui, lvl <= 3 ? ROLE_FAIL : lvl <= 5 ? ROLE_WARN : ROLE_OK),
				ui->g->spark[lvl]);
		}
	}
	qsort(pp, (size_t)npairs, sizeof *pp, pcmp);
	if (y < rows) {
		int x = tui_put(w, y, 0, cols, tui_attr(ui, ROLE_HEAD), "slowest:");
		for (int i = 0; i < 3 && i < npairs; i++)
			x += tui_printf(w, y, x, cols - x, tui_attr(ui, ROLE_WARN),
					" %d->%d %.2f GB/s", pp[i]->from,
					pp[i]->to, pp[i]->busbw);
	}
	free(pp);
	free(m);
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	switch (key) {
	case KEY_UP: if (ui->scroll > 0) ui->scroll--; return 1;
	case KEY_DOWN: ui->scroll++; return 1;
	case KEY_PPAGE: ui->scroll = ui->scroll > 10 ? ui->scroll - 10 : 0; return 1;
	case KEY_NPAGE: ui->scroll += 10; return 1;
	}
	return 0;
}

const struct tui_screen screen_comm = {"Comm", draw, on_key};
