/*
 * screen_log.c - the recent events as text (the view's log ring, newest at
 * the bottom): time, node, kind and the message as a person reads it (a
 * log's level and text, a stage's state and progress, a check's status
 * and detail, a sample's value in units, else key=value).  The selected
 * line (the newest shown; up/down move it) wraps whole; `j` shows the raw
 * JSON instead.  `/`
 * filters by a substring of the line, Enter steps the node filter through
 * the nodes (and back to all), Esc clears both.  A filter reads on past
 * the ring into the session file (log_search.h): an event of the
 * morning is found in the evening, not only the last VIEW_LOG.
 */
#include "tui.h"

#include <stdlib.h>
#include <string.h>

#include "log_search.h"

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

/* The raw JSON instead of the readable message ('j' toggles). */
static int show_raw;

/* Bytes as B/K/M/G for the metrics that are bytes. */
static void sample_text(json_t *o, char *out, size_t max)
{
	const char *metric = json_string_value(json_object_get(o, "metric"));
	json_t *val = json_object_get(o, "value");
	char v[32];
	double x = json_number_value(val);
	if (!metric)
		metric = "?";
	if (!json_is_number(val))
		snprintf(v, sizeof v, "%s",
			 json_is_array(json_object_get(o, "values")) ? "[...]"
								       : "-");
	else if (strstr(metric, "bps"))
		tui_rate(x, v, sizeof v);
	else if (strstr(metric, "mem") || strstr(metric, "rss") ||
		 strstr(metric, "alloc"))
		tui_bytes(x, v, sizeof v);
	else
		snprintf(v, sizeof v, "%.4g", x);
	snprintf(out, max, "card %lld %s %s",
		 (long long)json_integer_value(json_object_get(o, "card")),
		 metric, v);
}

/* The event as a person reads it: its type's few fields that matter,
 * then the rest as key=value. */
static void message(const char *type, json_t *o, char *out, size_t max)
{
	static const char *const shown[] = {"v", "seq", "ts", "node", "type",
					    NULL};
	size_t off = 0;
	const char *k;
	json_t *x;
#define S(key) (json_string_value(json_object_get(o, key)) ?: "")
#define ADD(...)                                                             \
	do {                                                                 \
		int n_ = snprintf(out + off, max - off, __VA_ARGS__);        \
		if (n_ > 0)                                                  \
			off += (size_t)n_ < max - off ? (size_t)n_           \
						      : max - off - 1;       \
	} while (0)
	out[0] = 0;
	if (!strcmp(type, "log") || !strcmp(type, "error")) {
		ADD("%s %s", S("level"), S("msg"));
		if (!strcmp(type, "error"))
			ADD("%s", S("what"));
	} else if (!strcmp(type, "stage")) {
		ADD("%s %s", *S("stage_id") ? S("stage_id") : S("stage"),
		    S("state"));
		if (json_is_number(json_object_get(o, "progress")) &&
		    !strcmp(S("state"), "progress"))
			ADD(" %.0f%%",
			    json_number_value(json_object_get(o, "progress")) *
				100);
		if (json_is_integer(json_object_get(o, "rc")))
			ADD(" rc %lld",
			    (long long)json_integer_value(json_object_get(o, "rc")));
		if (*S("msg"))
			ADD(": %s", S("msg"));
	} else if (!strcmp(type, "check")) {
		ADD("%s %s", S("item"), S("status"));
		if (*S("for"))
			ADD(" (%s)", S("for"));
		if (*S("detail"))
			ADD(": %s", S("detail"));
	} else if (!strcmp(type, "sample")) {
		sample_text(o, out, max);
		off = strlen(out);
	} else {
		json_object_foreach(o, k, x)
		{
			int skip = 0;
			for (int i = 0; shown[i]; i++)
				skip |= !strcmp(k, shown[i]);
			if (skip)
				continue;
			if (json_is_string(x))
				ADD("%s%s=%s", off ? " " : "", k,
				    json_string_value(x));
			else {
				char *t = json_dumps(x, JSON_COMPACT |
							    JSON_ENCODE_ANY);
				ADD("%s%s=%s", off ? " " : "", k, t ? t : "?");
				free(t);
			}
		}
	}
#undef ADD
#undef S
}

/* The text of line l as shown: readable or raw. */
static void line_text(const struct view_line *l, const char *type,
		      const char *rest, char *out, size_t max)
{
	json_t *o;
	size_t rl = strlen(rest);
	if (show_raw || !(o = json_loads(l->line, 0, NULL))) {
		snprintf(out, max, "%s", show_raw ? l->line : rest);
		if (!show_raw && rl && out[rl - 1] == '}')
			out[rl - 1] = 0;
		return;
	}
	message(type, o, out, max);
	json_decref(o);
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols;
	getmaxyx(w, rows, cols);
	int x = tui_printf(w, 0, 0, cols, tui_attr(ui, ROLE_HEAD),
			   "events (last %zu)  %s", v->nlog,
			   show_raw ? "raw JSON (j: readable)"
			       : "up/down select, j raw JSON");
	if (*ui->node_filter)
		x += tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_WARN),
				"  node %s", ui->node_filter);
	if (*ui->filter || ui->mode == UI_PROMPT)
		x += tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_WARN),
				"  filter /%s", ui->filter);
	int filtering = *ui->filter || *ui->node_filter;
	if (filtering && ui->older && v->nlog >= VIEW_LOG)
		x += tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_DIM),
				"  (and the session file's older events)");
	if (!filtering)
		log_search_clear(ui->older);
	int y = rows - 1, skip = ui->scroll, first = 1;
	const int lead = 9 + 1 + 12 + 1 + 8 + 1; /* time node kind */
	/* the ring, newest first; past its end, with a filter, the older
	 * matches (o counts them) */
	for (size_t i = 0, o = 0; y >= 1; i++) {
		const struct view_line *l = view_log_get(v, i);
		char node[64], type[24], when[32], text[4096];
		const char *rest;
		if (!l && filtering)
			l = log_search_get(ui->older, v, ui->filter,
					   ui->node_filter, o++);
		if (!l)
			break;
		split(l->line, node, sizeof node, type, sizeof type, &rest);
		if (!keep(ui, l->line, node) || skip-- > 0)
			continue;
		tui_dur(l->ts - v->start, when, sizeof when);
		line_text(l, type, rest, text, sizeof text);
		enum tui_role r = !strcmp(type, "error") ? ROLE_FAIL
				  : strstr(l->line, "\"status\":\"fail\"") ? ROLE_FAIL
				  : !strcmp(type, "marker")		   ? ROLE_MARK
				  : !strcmp(type, "sample")		   ? ROLE_DIM
									   : ROLE_NORMAL;
		int width = cols - lead > 10 ? cols - lead : 10;
		int len = (int)strlen(text), nrows = 1;
		/* The selected line (the newest one shown) wraps whole. */
		if (first && len > width) {
			nrows = (len + width - 1) / width;
			if (nrows > y)
				nrows = y;
		}
		attr_t a = tui_attr(ui, first ? ROLE_SEL : r);
		for (int k = nrows - 1; k >= 0; k--) {
			if (k == 0)
				tui_printf(w, y - nrows + 1, 0, cols, a,
					   "%9s %-12.12s %-8.8s %.*s", when,
					   node, type, width, text);
			else
				tui_printf(w, y - nrows + 1 + k, 0, cols, a,
					   "%*s%.*s", lead, "", width,
					   text + (size_t)k * (size_t)width);
		}
		y -= nrows;
		first = 0;
	}
	/* the walk back through the file: where it is, or what stopped it */
	if (filtering && log_search_busy(ui->older)) {
		char at[32];
		tui_dur(log_search_at(ui->older) - v->start, at, sizeof at);
		tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_WARN),
			   "  searching the file: back to %s", at);
	} else if (filtering && ui->older && *log_search_error(ui->older)) {
		tui_printf(w, 0, x, cols - x, tui_attr(ui, ROLE_FAIL), "  %s",
			   log_search_error(ui->older));
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
	case 'j':
		show_raw = !show_raw;
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
