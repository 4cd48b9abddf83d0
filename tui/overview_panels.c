/*
 * overview_panels.c - the Overview's lower half: what an operator reads
 * between glances at the node grid.
 *
 *   STAGES     the playbook's stages in order: pending, running (the
 *              agents' progress, a bar and the ETA at the rate so far),
 *              done / failed / skipped with their durations
 *   CHECKLIST  each item of the registry (engine/checklist.h) by name,
 *              its worst status over the nodes and the evidence line
 *   ALERTS     the latest failures and markers, newest first
 *
 * Each panel draws from the view model only (htop's meter shape): a
 * function of (view, window, first row, rows, columns), returning the
 * rows it used.
 */
#include "tui.h"
#include "checklist.h"
#include "console.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct view_stage *console_stage(const struct view *v,
					      const char *id)
{
	for (size_t i = v->nstages; i-- > 0;)
		if (!strcmp(v->stages[i].node, CONSOLE_NODE) &&
		    !strcmp(v->stages[i].id, id))
			return &v->stages[i];
	return NULL;
}

/* The ids the timeline lists: the playbook's, else the console's stages
 * as they started. */
static int timeline_ids(const struct view *v, const char **ids, int max)
{
	int n = 0;
	for (int i = 0; i < v->npb_stages && n < max; i++)
		ids[n++] = v->pb_stages[i];
	if (n)
		return n;
	for (size_t i = 0; i < v->nstages && n < max; i++)
		if (!strcmp(v->stages[i].node, CONSOLE_NODE))
			ids[n++] = v->stages[i].id;
	return n;
}

/* A stage's word and colour. */
static enum tui_role stage_word(const struct view_stage *cs, char *out,
				size_t max)
{
	if (!cs) {
		snprintf(out, max, "pending");
		return ROLE_DIM;
	}
	if (strcmp(cs->state, "end")) {
		snprintf(out, max, "running");
		return ROLE_HEAD;
	}
	snprintf(out, max, "%s",
		 cs->result[0] ? cs->result : cs->has_rc && cs->rc ? "failed"
								   : "done");
	if (!strcmp(out, "done"))
		return ROLE_OK;
	if (!strcmp(out, "skipped"))
		return ROLE_WARN;
	return ROLE_FAIL;
}

int overview_timeline(struct tui *ui, const struct view *v, WINDOW *w, int y,
		      int h, int cols)
{
	const char *ids[VIEW_PB_STAGES];
	int n = timeline_ids(v, ids, VIEW_PB_STAGES), first = 0, cur = -1;
	int idw = 8, ended = 0;
	if (h < 2 || !n)
		return 0;
	for (int i = 0; i < n; i++) {
		const struct view_stage *cs = console_stage(v, ids[i]);
		if ((int)strlen(ids[i]) > idw)
			idw = (int)strlen(ids[i]);
		if (cur < 0 && (!cs || strcmp(cs->state, "end")))
			cur = i;
		ended += cs && !strcmp(cs->state, "end");
	}
	if (idw > 22)
		idw = 22;
	/* Too many for the rows: keep the current one in view. */
	if (n > h - 1 && cur > (h - 1) / 2)
		first = cur - (h - 1) / 2 < n - (h - 1) ? cur - (h - 1) / 2
							 : n - (h - 1);
	tui_printf(w, y, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "STAGES %d of %d ended%s", ended, n,
		   first ? "  (earlier ones above)" : "");
	int barw = cols >= 120 ? 30 : cols >= 90 ? 20 : 10;
	for (int i = first, row = 1; i < n && row < h; i++, row++) {
		const struct view_stage *cs = console_stage(v, ids[i]);
		char word[16], t[32], eta[32];
		enum tui_role role = stage_word(cs, word, sizeof word);
		int64_t left = -1;
		double p = cs ? view_stage_progress(v, cs, &left) : 0;
		int x = 0, yy = y + row;
		x += tui_printf(w, yy, x, cols - x, tui_attr(ui, ROLE_NORMAL),
				"  %-*.*s ", idw, idw, ids[i]);
		x += tui_printf(w, yy, x, cols - x, tui_attr(ui, role), "%-8s ",
				word);
		if (cs && strcmp(cs->state, "end")) {
			int fill = (int)(p * barw + 0.5);
			for (int k = 0; k < barw; k++)
				tui_put(w, yy, x + k, 1,
					tui_attr(ui, k < fill ? ROLE_BAR
							      : ROLE_DIM),
					k < fill ? ui->g->full : ui->g->empty);
			x += barw;
			tui_dur(v->t - cs->first_ts, t, sizeof t);
			if (left >= 0)
				tui_dur(left, eta, sizeof eta);
			x += tui_printf(w, yy, x, cols - x, A_NORMAL,
					" %3.0f%%  %s%s%s", p * 100, t,
					left >= 0 ? "  ETA " : "",
					left >= 0 ? eta : "");
		} else if (cs) {
			tui_dur(cs->ts - cs->first_ts, t, sizeof t);
			x += tui_printf(w, yy, x, cols - x, A_NORMAL, "%8s  ", t);
			if (cs->msg[0] && strcmp(word, "done"))
				tui_put(w, yy, x, cols - x, tui_attr(ui, role),
					cs->msg);
		}
	}
	return n - first + 1 < h ? n - first + 1 : h;
}

/* The worst check of item over the nodes: its status, how many nodes
 * share it, and the latest such check (for its evidence). */
static const struct view_check *item_worst(const struct view *v,
					   const char *item, int *nodes,
					   int *total)
{
	const struct view_check *worst = NULL;
	enum check_status ws = CHECK_PASS;
	*nodes = *total = 0;
	for (size_t i = 0; i < v->nchecks; i++) {
		const struct view_check *c = &v->checks[i];
		enum check_status s;
		if (strcmp(c->item, item))
			continue;
		(*total)++;
		s = check_status_parse(c->status, NULL);
		if (!worst || check_status_worst(s, ws) != ws) {
			worst = c;
			ws = s;
			*nodes = 1;
		} else if (s == ws) {
			(*nodes)++;
			if (c->ts > worst->ts)
				worst = c;
		}
	}
	return worst;
}

int overview_checklist(struct tui *ui, const struct view *v, WINDOW *w, int y,
		       int h, int cols)
{
	size_t shown = 0, with = 0, order[64], n = 0;
	int idw = 17; /* numerics.endpoint */
	if (h < 2)
		return 0;
	/* Items with evidence first (registry order), then the others. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < checklist_n && n < 64; i++) {
			int nodes, total;
			int has = item_worst(v, checklist_items[i].id, &nodes,
					     &total) != NULL;
			if (has == !pass) {
				order[n++] = i;
				with += has;
			}
		}
	tui_printf(w, y, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "CHECKLIST %zu/%zu with evidence  (4: every node)", with,
		   checklist_n);
	for (size_t k = 0; k < n && (int)shown + 1 < h; k++) {
		const struct checklist_item *it = &checklist_items[order[k]];
		int nodes, total, yy = y + 1 + (int)shown, x = 0;
		const struct view_check *c = item_worst(v, it->id, &nodes, &total);
		/* The verdict's status once there is one (a "not run" item
		 * has no evidence), else the worst evidence so far. */
		const char *vs = view_item_status(v, it->id);
		const char *st = vs ? vs : c ? c->status : "";
		const char *g = !*st			   ? ui->g->empty
				: !strcmp(st, "pass") ? ui->g->pass
				: !strcmp(st, "fail") ? ui->g->fail
				: !strcmp(st, "warn") ? "!"
						      : "~";
		enum tui_role role = *st ? tui_status_role(st) : ROLE_DIM;
		char where[128];
		if ((int)shown + 2 == h && k + 1 < n) {
			tui_printf(w, yy, 0, cols, tui_attr(ui, ROLE_DIM),
				   "  ... %zu more items (4 Checklist)",
				   n - k);
			shown++;
			break;
		}
		x += tui_put(w, yy, x, cols - x, tui_attr(ui, role), "  ");
		x += tui_put(w, yy, x, cols - x, tui_attr(ui, role), g);
		x += tui_printf(w, yy, x, cols - x, tui_attr(ui, ROLE_NORMAL),
				" %-*s ", idw, it->id);
		if (!c) {
			tui_put(w, yy, x, cols - x, tui_attr(ui, ROLE_DIM),
				*st ? st : "no evidence yet");
			shown++;
			continue;
		}
		x += tui_printf(w, yy, x, cols - x, tui_attr(ui, role), "%-5s ",
				st);
		/* The node, unless the evidence starts with it already;
		 * how many nodes share the status when there are several. */
		size_t nl = strlen(c->node);
		int named = !strncmp(c->detail, c->node, nl) &&
			    (c->detail[nl] == ' ' || c->detail[nl] == ':');
		char cnt[32] = "";
		if (total > 1)
			snprintf(cnt, sizeof cnt, "%d/%d ", nodes, total);
		snprintf(where, sizeof where, "%s%s%s", cnt,
			 named ? "" : c->node, named ? "" : ": ");
		x += tui_put(w, yy, x, cols - x, tui_attr(ui, ROLE_DIM), where);
		tui_put(w, yy, x, cols - x, A_NORMAL,
			c->detail[0] ? c->detail : it->title);
		shown++;
	}
	return (int)shown + 1;
}

int overview_alerts(struct tui *ui, const struct view *v, WINDOW *w, int y,
		    int h, int cols)
{
	size_t n = v->marks.n;
	if (h < 2)
		return 0;
	tui_printf(w, y, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "FAILURES AND MARKERS%s", n ? "" : "  none");
	for (int row = 1; row < h && (size_t)row <= n; row++) {
		const struct view_mark *m = VIEW_AT(v->marks, n - (size_t)row);
		char t[32];
		int x = 0;
		tui_dur(v->start && m->ts > v->start ? m->ts - v->start : 0, t,
			sizeof t);
		x += tui_printf(w, y + row, x, cols - x, tui_attr(ui, ROLE_DIM),
				"  [%7s] ", t);
		x += tui_printf(w, y + row, x, cols - x,
				tui_attr(ui, ROLE_NORMAL), "%-12s ", m->node);
		tui_put(w, y + row, x, cols - x,
			tui_attr(ui, m->kind == VIEW_FAILURE ? ROLE_FAIL
							    : ROLE_MARK),
			m->text);
	}
	return (size_t)h - 1 < n ? h : (int)n + 1;
}
