/*
 * screen_hosts.c - Hosts: the compatibility matrix across nodes (fields x
 * node sets, docs/compat.md) from each node's facts in the view, the
 * cells that differ from their field's majority highlighted (red on a
 * field that must match, yellow on one only shown), and the runner's
 * facts.compat verdict above it.  The matrix is compat_matrix(), the
 * function the runner, `day0 hosts` and the report use.  < and > (and
 * the arrows, live) scroll the node sets when they do not fit.
 */
#include "tui.h"

#include <stdlib.h>
#include <string.h>

#include "compat_matrix.h"
#include "console.h"

#define CELL_MAX 30 /* a column's widest cell when the sets do not fit */

static const char *cell(json_t *row, size_t k)
{
	return json_string_value(
	    json_array_get(json_object_get(row, "cells"), k));
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, y = 0, tw = 18;
	struct compat_node *cn = calloc(v->nnodes + 1, sizeof *cn);
	size_t n = 0, nc, i, k;
	const struct view_check *c = view_check(v, CONSOLE_NODE,
						"facts.compat");
	json_t *m, *jcols, *r;
	int widths[64];
	getmaxyx(w, rows, cols);
	if (!cn)
		abort();
	for (i = 0; i < v->nnodes; i++)
		if (v->nodes[i].facts) {
			cn[n].name = v->nodes[i].name;
			cn[n++].facts = v->nodes[i].facts;
		}
	if (c)
		tui_printf(w, y++, 0, cols,
			   tui_attr(ui, tui_status_role(c->status)),
			   "facts.compat %s: %s", c->status, c->detail);
	else
		tui_put(w, y++, 0, cols, tui_attr(ui, ROLE_DIM),
			"facts.compat: not evaluated yet (a facts stage that "
			"declares it)");
	if (!n) {
		tui_put(w, y, 0, cols, tui_attr(ui, ROLE_DIM),
			"no facts from any node yet");
		free(cn);
		return;
	}
	/* The family's minimums are the runner's verdict above; the cells
	 * compare nodes with each other, which needs no family. */
	m = compat_matrix(cn, n, NULL);
	jcols = json_object_get(m, "columns");
	nc = json_array_size(jcols);
	if (ui->sel_col >= (int)nc)
		ui->sel_col = (int)nc - 1;
	if (ui->sel_col < 0)
		ui->sel_col = 0;
	for (k = 0; k < nc && k < 64; k++) {
		char head[160];
		int wd = snprintf(head, sizeof head, "%s (%lld)",
				  json_string_value(json_object_get(
				      json_array_get(jcols, k), "nodes")),
				  (long long)json_integer_value(json_object_get(
				      json_array_get(jcols, k), "n")));
		json_array_foreach(json_object_get(m, "rows"), i, r)
		{
			int l = (int)strlen(cell(r, k)) + 1;
			if (l > wd)
				wd = l;
		}
		widths[k] = wd > 150 ? 150 : wd;
	}
	/* Whole values when the node sets in view fit the screen (one set:
	 * the CPU flags, the OpenBLAS line); cut to CELL_MAX when not. */
	{
		int need = tw;
		for (k = (size_t)ui->sel_col; k < nc && k < 64; k++)
			need += widths[k] + 1;
		if (need > cols)
			for (k = 0; k < nc && k < 64; k++)
				if (widths[k] > CELL_MAX)
					widths[k] = CELL_MAX;
	}
	y++;
	if (y >= rows)
		goto out;
	tui_printf(w, y, 0, tw, tui_attr(ui, ROLE_HEAD), "%-*s", tw,
		   nc > 1 ? "field   (* odd)" : "field");
	{
		int x = tw;
		for (k = (size_t)ui->sel_col; k < nc && k < 64 && x < cols;
		     k++) {
			char head[160];
			snprintf(head, sizeof head, "%s (%lld)",
				 json_string_value(json_object_get(
				     json_array_get(jcols, k), "nodes")),
				 (long long)json_integer_value(json_object_get(
				     json_array_get(jcols, k), "n")));
			x += tui_printf(w, y, x, cols - x,
					tui_attr(ui, ROLE_HEAD), " %-*.*s",
					widths[k], widths[k], head);
		}
		if (k < nc)
			tui_printf(w, y, cols - 12 > 0 ? cols - 12 : 0, 12,
				   tui_attr(ui, ROLE_DIM), " +%zu sets >",
				   nc - k);
	}
	y++;
	json_array_foreach(json_object_get(m, "rows"), i, r)
	{
		int must = strcmp(json_string_value(json_object_get(r, "match")),
				  "shown") != 0,
		    x = tw;
		if (y >= rows)
			break;
		tui_printf(w, y, 0, tw, A_NORMAL, "%-*.*s", tw, tw,
			   json_string_value(json_object_get(r, "title")));
		if (must)
			tui_put(w, y, tw - 2, 2, tui_attr(ui, ROLE_DIM), "=");
		for (k = (size_t)ui->sel_col; k < nc && k < 64 && x < cols;
		     k++) {
			int odd = json_is_true(
			    json_array_get(json_object_get(r, "odd"), k));
			char b[192];
			/* the mark survives the cut: the value gives way */
			snprintf(b, sizeof b, "%.*s%s",
				 odd ? widths[k] - 1 : widths[k], cell(r, k),
				 odd ? "*" : "");
			x += tui_printf(w, y, x, cols - x,
					odd ? tui_attr(ui, must ? ROLE_FAIL
								: ROLE_WARN) |
						  A_BOLD
					    : A_NORMAL,
					" %-*.*s", widths[k], widths[k], b);
		}
		y++;
	}
	if (y + 1 < rows)
		tui_put(w, y + 1, 0, cols, tui_attr(ui, ROLE_DIM),
			"=: must match the majority (engine build, Open MPI, "
			"driver major)  *: differs  < >: node sets");
out:
	json_decref(m);
	free(cn);
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	(void)v;
	switch (key) {
	case KEY_LEFT: /* live; replay's arrows seek: < > there */
	case '<':
		if (ui->sel_col > 0)
			ui->sel_col--;
		return 1;
	case KEY_RIGHT:
	case '>':
		ui->sel_col++;
		return 1;
	}
	return 0;
}

const struct tui_screen screen_hosts = {"Hosts", draw, on_key};
