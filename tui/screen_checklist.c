/*
 * screen_checklist.c - the checklist: items (rows: the registry's order,
 * any other item seen, then the rehearsal's items in a block of their own)
 * by a verdict column and the nodes (columns, the console's own last).
 * The verdict column is the item's status as the runner decided it (the
 * verdict event: worst over the stages that must produce it, `not run`
 * when they did not run) or, before the verdict, the worst evidence so
 * far; each node's cell is the worst of its stages.  Below: every stage's
 * evidence for the selected item on the selected node, its detail whole
 * (wrapped at words: the Overview's shortened lines point here).
 */
#include "tui.h"

#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "fit.h"

#define MAXITEMS 96

static int seen(const char **out, int n, const char *id)
{
	for (int k = 0; k < n; k++)
		if (!strcmp(out[k], id))
			return 1;
	return 0;
}

static int by_order(const void *pa, const void *pb)
{
	const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
	int c = checklist_order(a) - checklist_order(b);
	return c ? c : strcmp(a, b);
}

/* The rows: the registry's items, then others seen, then rehearsal ones. */
static int items(const struct view *v, const char **out)
{
	int n = 0, first_extra;
	for (int i = 0; i < TUI_NITEMS && n < MAXITEMS; i++)
		out[n++] = tui_items(i);
	first_extra = n;
	for (size_t i = 0; i < v->nchecks && n < MAXITEMS; i++)
		if (!seen(out, n, v->checks[i].item))
			out[n++] = v->checks[i].item;
	for (size_t i = 0; i < v->nitems && n < MAXITEMS; i++)
		if (!seen(out, n, v->items[i].item))
			out[n++] = v->items[i].item;
	qsort(out + first_extra, (size_t)(n - first_extra), sizeof *out,
	      by_order);
	return n;
}

static int has_console(const struct view *v)
{
	for (size_t i = 0; i < v->nchecks; i++)
		if (!strcmp(v->checks[i].node, CONSOLE_NODE))
			return 1;
	return 0;
}

static const char *col_name(const struct view *v, int c)
{
	return c < (int)v->nnodes ? v->nodes[c].name : CONSOLE_NODE;
}

static void cell_text(const char *s, char *cell, size_t n)
{
	if (!strcmp(s, "fail"))
		snprintf(cell, n, "FAIL");
	else if (!strcmp(s, "running"))
		snprintf(cell, n, "run");
	else if (!strcmp(s, "pending"))
		snprintf(cell, n, "pend");
	else
		snprintf(cell, n, "%.5s", s);
}

/* Every stage's evidence for item on node, one line each. */
static void evidence(struct tui *ui, const struct view *v, WINDOW *w, int y,
		     int h, int cols, const char *item, const char *node)
{
	const char *st = view_item_status(v, item);
	int line = 0;
	tui_printf(w, y, 0, cols, tui_attr(ui, tui_status_role(st ? st : "")),
		   "%s: %s   on %s:", item, st ? st : "no result yet", node);
	for (size_t i = 0; i < v->nchecks && line + 1 < h; i++) {
		const struct view_check *k = &v->checks[i];
		char when[32];
		if (strcmp(k->item, item) || strcmp(k->node, node))
			continue;
		char head[512], part[512];
		size_t pos = 0;
		int x;
		tui_dur(k->ts - v->start, when, sizeof when);
		snprintf(head, sizeof head,
			 "  %-14s %-7s at %-8s value %s  threshold %s  ",
			 *k->stage ? k->stage : "-", k->status, when,
			 *k->value ? k->value : "-",
			 *k->threshold ? k->threshold : "-");
		x = tui_put(w, y + 1 + line, 0, cols,
			    tui_attr(ui, tui_status_role(k->status)), head);
		/* The whole evidence, wrapped at words over the lines it
		 * needs (the Overview shortens it: this is its full text). */
		if (!fit_wrap(k->detail, &pos, cols - x, part, sizeof part)) {
			line++;
			continue;
		}
		tui_put(w, y + 1 + line++, x, cols - x, A_NORMAL, part);
		while (line + 1 < h &&
		       fit_wrap(k->detail, &pos, cols - 4, part, sizeof part))
			tui_put(w, y + 1 + line++, 4, cols - 4, A_NORMAL, part);
	}
	if (!line && h > 1)
		tui_printf(w, y + 1, 0, cols, tui_attr(ui, ROLE_DIM),
			   "  no evidence from %s", node);
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols;
	const char *it[MAXITEMS];
	getmaxyx(w, rows, cols);
	int ni = items(v, it);
	int nc = (int)v->nnodes + has_console(v);
	int itemw = cols >= 100 ? 26 : 18, vw = 8, cw = 7;
	if (ui->sel_item >= ni)
		ui->sel_item = ni - 1;
	if (ui->sel_item < 0)
		ui->sel_item = 0;
	if (ui->sel_col >= nc)
		ui->sel_col = nc - 1;
	if (ui->sel_col < 0)
		ui->sel_col = 0;
	int gx = itemw + 1 + vw + 1;
	int fitc = (cols - gx) / cw;
	if (fitc < 1)
		fitc = 1;
	int c0 = ui->sel_col >= fitc ? ui->sel_col - fitc + 1 : 0;
	int evh = 6;
	int gridh = rows - 1 - evh - 1;
	if (gridh < 1)
		gridh = 1, evh = rows - 3 > 0 ? rows - 3 : 0;
	int r0 = ui->sel_item >= gridh ? ui->sel_item - gridh + 1 : 0;
	tui_printf(w, 0, 0, itemw, tui_attr(ui, ROLE_HEAD), "%-*s", itemw,
		   "item \\ node");
	tui_printf(w, 0, itemw + 1, vw, tui_attr(ui, ROLE_HEAD), "%-*s", vw,
		   "verdict");
	for (int c = c0; c < nc && c - c0 < fitc; c++)
		tui_printf(w, 0, gx + (c - c0) * cw, cw - 1,
			   tui_attr(ui, c == ui->sel_col ? ROLE_SEL : ROLE_HEAD),
			   "%-*.*s", cw - 1, cw - 1, col_name(v, c));
	for (int r = r0; r < ni && r - r0 < gridh; r++) {
		int y = 1 + r - r0;
		const char *vs = view_item_status(v, it[r]);
		tui_printf(w, y, 0, itemw,
			   tui_attr(ui, r == ui->sel_item ? ROLE_SEL : ROLE_NORMAL),
			   "%-*s", itemw, it[r]);
		tui_printf(w, y, itemw + 1, vw,
			   vs ? tui_attr(ui, tui_status_role(vs))
			      : tui_attr(ui, ROLE_DIM),
			   "%-*s", vw, vs ? vs : ui->g->empty);
		for (int c = c0; c < nc && c - c0 < fitc; c++) {
			const struct view_check *k =
			    view_check(v, col_name(v, c), it[r]);
			char cell[16];
			if (!k)
				snprintf(cell, sizeof cell, "%s", ui->g->empty);
			else
				cell_text(k->status, cell, sizeof cell);
			attr_t a = k ? tui_attr(ui, tui_status_role(k->status))
				     : tui_attr(ui, ROLE_DIM);
			if (r == ui->sel_item && c == ui->sel_col)
				a |= A_REVERSE;
			tui_put(w, y, gx + (c - c0) * cw, cw - 1, a, cell);
		}
	}
	int ey = rows - evh;
	if (ey < 1 || evh < 1 || !ni)
		return;
	for (int x = 0; x < cols; x++)
		tui_put(w, ey - 1, x, 1, tui_attr(ui, ROLE_DIM), ui->g->hline);
	evidence(ui, v, w, ey, evh, cols, it[ui->sel_item],
		 nc ? col_name(v, ui->sel_col) : "-");
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	switch (key) {
	case KEY_UP: ui->sel_item--; return 1;
	case KEY_DOWN: ui->sel_item++; return 1;
	case KEY_PPAGE: ui->sel_item -= 10; return 1;
	case KEY_NPAGE: ui->sel_item += 10; return 1;
	case 'h': ui->sel_col--; return 1;
	case 'l':
	case '\r':
	case '\n':
	case KEY_ENTER: ui->sel_col++; return 1;
	case KEY_LEFT:
		if (ui->replay)
			return 0;
		ui->sel_col--;
		return 1;
	case KEY_RIGHT:
		if (ui->replay)
			return 0;
		ui->sel_col++;
		return 1;
	}
	return 0;
}

const struct tui_screen screen_checklist = {"Checklist", draw, on_key};
