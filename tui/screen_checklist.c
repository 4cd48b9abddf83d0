/*
 * screen_checklist.c - the checklist: items (rows, contract order, then any
 * other item seen) by nodes (columns, the console's own last), each cell the
 * item's last status on that node; the selected cell's evidence (status,
 * value, threshold, detail, time) below.
 */
#include "tui.h"

#include <string.h>

#include "console.h"

#define MAXITEMS 64

/* The rows: contract items, then others in the order checks sort. */
static int items(const struct view *v, const char **out)
{
	int n = 0;
	for (int i = 0; i < TUI_NITEMS; i++)
		out[n++] = tui_items[i];
	for (size_t i = 0; i < v->nchecks && n < MAXITEMS; i++) {
		int seen = 0;
		for (int k = 0; k < n && !seen; k++)
			seen = !strcmp(out[k], v->checks[i].item);
		if (!seen)
			out[n++] = v->checks[i].item;
	}
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

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols;
	const char *it[MAXITEMS];
	getmaxyx(w, rows, cols);
	int ni = items(v, it);
	int nc = (int)v->nnodes + has_console(v);
	int itemw = 18, cw = 7;
	if (ui->sel_item >= ni)
		ui->sel_item = ni - 1;
	if (ui->sel_item < 0)
		ui->sel_item = 0;
	if (ui->sel_col >= nc)
		ui->sel_col = nc - 1;
	if (ui->sel_col < 0)
		ui->sel_col = 0;
	int fitc = (cols - itemw - 1) / cw;
	if (fitc < 1)
		fitc = 1;
	int c0 = ui->sel_col >= fitc ? ui->sel_col - fitc + 1 : 0;
	int evh = 4;
	int gridh = rows - 1 - evh - 1;
	if (gridh < 1)
		gridh = 1, evh = rows - 3 > 0 ? rows - 3 : 0;
	int r0 = ui->sel_item >= gridh ? ui->sel_item - gridh + 1 : 0;
	tui_printf(w, 0, 0, itemw, tui_attr(ui, ROLE_HEAD), "%-*s", itemw,
		   "item \\ node");
	for (int c = c0; c < nc && c - c0 < fitc; c++)
		tui_printf(w, 0, itemw + 1 + (c - c0) * cw, cw - 1,
			   tui_attr(ui, c == ui->sel_col ? ROLE_SEL : ROLE_HEAD),
			   "%-*.*s", cw - 1, cw - 1, col_name(v, c));
	for (int r = r0; r < ni && r - r0 < gridh; r++) {
		int y = 1 + r - r0;
		tui_printf(w, y, 0, itemw,
			   tui_attr(ui, r == ui->sel_item ? ROLE_SEL : ROLE_NORMAL),
			   "%-*s", itemw, it[r]);
		for (int c = c0; c < nc && c - c0 < fitc; c++) {
			const struct view_check *k =
			    view_check(v, col_name(v, c), it[r]);
			const char *s = k ? k->status : "";
			char cell[16];
			if (!k)
				snprintf(cell, sizeof cell, "%s", ui->g->empty);
			else if (!strcmp(s, "fail"))
				snprintf(cell, sizeof cell, "FAIL");
			else if (!strcmp(s, "running"))
				snprintf(cell, sizeof cell, "run");
			else if (!strcmp(s, "pending"))
				snprintf(cell, sizeof cell, "pend");
			else
				snprintf(cell, sizeof cell, "%.5s", s);
			attr_t a = k ? tui_attr(ui, tui_status_role(s))
				     : tui_attr(ui, ROLE_DIM);
			if (r == ui->sel_item && c == ui->sel_col)
				a |= A_REVERSE;
			tui_put(w, y, itemw + 1 + (c - c0) * cw, cw - 1, a,
				cell);
		}
	}
	/* Evidence of the selected cell. */
	int ey = rows - evh;
	const char *node = nc ? col_name(v, ui->sel_col) : "";
	const struct view_check *k = nc ? view_check(v, node, it[ui->sel_item])
					: NULL;
	if (ey < 1 || evh < 1)
		return;
	for (int x = 0; x < cols; x++)
		tui_put(w, ey - 1, x, 1, tui_attr(ui, ROLE_DIM), ui->g->hline);
	if (!k) {
		tui_printf(w, ey, 0, cols, tui_attr(ui, ROLE_DIM),
			   "%s on %s: no result yet", it[ui->sel_item], node);
		return;
	}
	char when[32];
	tui_dur(k->ts - v->start, when, sizeof when);
	tui_printf(w, ey, 0, cols, tui_attr(ui, tui_status_role(k->status)),
		   "%s on %s: %s (at %s)", k->item, k->node, k->status, when);
	if (evh > 1)
		tui_printf(w, ey + 1, 0, cols, A_NORMAL,
			   "value %s  threshold %s", *k->value ? k->value : "-",
			   *k->threshold ? k->threshold : "-");
	if (evh > 2)
		tui_printf(w, ey + 2, 0, cols, A_NORMAL, "%s", k->detail);
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
