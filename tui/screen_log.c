/*
 * screen_log.c - the recent events as text (the view's log ring, newest at
 * the bottom): time, node, type and the fields after the envelope.  `/`
 * filters by a substring of the line, Enter steps the node filter through
 * the nodes (and back to all), Esc clears both.
 */
#include "tui.h"

#include <string.h>

/* Node and type of a line, and where its fields start (after "type"). */
static void split(const char *line, char *node, size_t nmax, char *type,
		  size_t tmax, const char **rest)
{
	const char *p;
	node[0] = type[0] = 0;
	*rest = line;
	if ((p = strstr(line, "\"node\":\""))) {
		p += 8;
		size_t n = strcspn(p, "\"");
		snprintf(node, nmax, "%.*s", (int)n, p);
	}
	if ((p = strstr(line, "\"type\":\""))) {
		p += 8;
		size_t n = strcspn(p, "\"");
		snprintf(type, tmax, "%.*s", (int)n, p);
		p += n + 1;
		if (*p == ',')
			p++;
		*rest = p;
	}
}

static int keep(struct tui *ui, const char *line, const char *node)
{
	if (*ui->node_filter && strcmp(ui->node_filter, node))
		return 0;
	return !*ui->filter || strstr(line, ui->filter);
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols;
	getmaxyx(w, rows, cols);
	int x = tui_printf(w, 0, 0, cols, tui_attr(ui, ROLE_HEAD),
			   "events (last %zu)", v->nlog);
	if (*ui->node_filter)
		x += tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_WARN),
				"  node %s", ui->node_filter);
	if (*ui->filter || ui->mode == UI_PROMPT)
		x += tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_WARN),
				"  filter /%s", ui->filter);
	int y = rows - 1, skip = ui->scroll;
	for (size_t i = 0; y >= 1; i++) {
		const struct view_line *l = view_log_get(v, i);
		char node[64], type[24], when[32];
		const char *rest;
		if (!l)
			break;
		split(l->line, node, sizeof node, type, sizeof type, &rest);
		if (!keep(ui, l->line, node) || skip-- > 0)
			continue;
		tui_dur(l->ts - v->start, when, sizeof when);
		size_t rl = strlen(rest);
		enum tui_role r = !strcmp(type, "error") ? ROLE_FAIL
				  : strstr(l->line, "\"status\":\"fail\"") ? ROLE_FAIL
				  : !strcmp(type, "marker")		   ? ROLE_MARK
				  : !strcmp(type, "sample")		   ? ROLE_DIM
									   : ROLE_NORMAL;
		tui_printf(w, y--, 0, cols, tui_attr(ui, r), "%9s %-8s %-8s %.*s",
			   when, node, type,
			   (int)(rl && rest[rl - 1] == '}' ? rl - 1 : rl), rest);
	}
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	switch (key) {
	case KEY_UP: ui->scroll++; return 1;
	case KEY_DOWN: if (ui->scroll > 0) ui->scroll--; return 1;
	case KEY_PPAGE: ui->scroll += 10; return 1;
	case KEY_NPAGE: ui->scroll = ui->scroll > 10 ? ui->scroll - 10 : 0; return 1;
	case '/':
		ui->mode = UI_PROMPT;
		ui->input_filter = 1;
		snprintf(ui->input, sizeof ui->input, "%s", ui->filter);
		return 1;
	case 27:
		ui->filter[0] = ui->node_filter[0] = 0;
		return 1;
	case '\r':
	case '\n':
	case KEY_ENTER: {
		/* The next node after the current filter, then all. */
		size_t i = 0;
		if (*ui->node_filter) {
			while (i < v->nnodes &&
			       strcmp(v->nodes[i].name, ui->node_filter) <= 0)
				i++;
		}
		if (i < v->nnodes)
			snprintf(ui->node_filter, sizeof ui->node_filter, "%s",
				 v->nodes[i].name);
		else
			ui->node_filter[0] = 0;
		ui->scroll = 0;
		return 1;
	}
	}
	return 0;
}

const struct tui_screen screen_log = {"Log", draw, on_key};
