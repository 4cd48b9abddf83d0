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
 * and the glance block above them (docs/screens.md):
 *
 *   SUMMARY    the verdict line and the checklist's counts with the
 *              first failing item (always drawn, 80x24 included)
 *   MEMORY     per card a bar with used/budget, peak and headroom;
 *              per node (its worst card), or per node set, when the
 *              cards outnumber the rows
 *   NET        per node (or node set) the NIC rx/tx, the running
 *              collective's bus bandwidth and a sparkline of the data
 *              moved (glance.h)
 *
 * Text that does not fit is shortened at a word or number boundary
 * (fit.h); the full text is on the Checklist screen (4) and in the report.
 *
 * Each panel draws from the view model only (htop's meter shape): a
 * function of (view, window, first row, rows, columns), returning the
 * rows it used.
 */
#include "tui.h"
#include "checklist.h"
#include "console.h"
#include "fit.h"
#include "glance.h"

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
				overview_put_fit(ui, w, yy, x, cols - x,
						 tui_attr(ui, role), cs->msg);
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
				: !strcmp(st, "not run") ? "!"
				: !strcmp(st, "skip") ? "-"
						      : "~";
		enum tui_role role = *st ? tui_status_role(st) : ROLE_DIM;
		char where[128];
		if ((int)shown + 2 == h && k + 1 < n && h >= 3) {
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
		overview_put_fit(ui, w, yy, x, cols - x, A_NORMAL,
				 c->detail[0] ? c->detail : it->title);
		shown++;
	}
	return (int)shown + 1;
}

int overview_alerts(struct tui *ui, const struct view *v, WINDOW *w, int y,
		    int h, int cols)
{
	size_t n = v->marks.n;
	if (h < 1 || (h < 2 && n))
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
		overview_put_fit(ui, w, y + row, x, cols - x,
				 tui_attr(ui, m->kind == VIEW_FAILURE
						  ? ROLE_FAIL
						  : ROLE_MARK),
				 m->text);
	}
	return (size_t)h - 1 < n ? h : (int)n + 1;
}

/* ------------------------------------------------------------ glance block */

int overview_put_fit(struct tui *ui, WINDOW *w, int y, int x, int n, attr_t a,
		     const char *s)
{
	char b[1024];
	fit_text(s, n, ui->ascii ? "..." : "\u2026", b, sizeof b);
	return tui_put(w, y, x, n, a, b);
}

int overview_summary(struct tui *ui, const struct view *v, WINDOW *w, int y,
		     int h, int cols)
{
	struct glance_checklist g;
	int x = 0;
	char b[512];
	if (h < 1)
		return 0;
	/* The verdict line. */
	if (v->verdict >= 0) {
		x += tui_put(w, y, x, cols - x,
			     tui_attr(ui, v->verdict ? ROLE_OK : ROLE_FAIL),
			     v->verdict ? "VERDICT GO" : "VERDICT NO-GO");
		if (!v->verdict && v->verdict_failed[0]) {
			snprintf(b, sizeof b, "  failed: %s", v->verdict_failed);
			overview_put_fit(ui, w, y, x, cols - x,
					 tui_attr(ui, ROLE_FAIL), b);
		}
	} else if (v->held) {
		x += tui_put(w, y, x, cols - x, tui_attr(ui, ROLE_FAIL),
			     "VERDICT held  ");
		overview_put_fit(ui, w, y, x, cols - x, tui_attr(ui, ROLE_FAIL),
				 "the run ended with failures: r reruns a "
				 "failed stage, q ends the run");
	} else {
		const struct view_stage *cur = view_current_stage(v);
		x += tui_put(w, y, x, cols - x, tui_attr(ui, ROLE_HEAD),
			     "VERDICT pending");
		if (cur) {
			snprintf(b, sizeof b, "  stage %s %.0f%%", cur->id,
				 view_stage_progress(v, cur, NULL) * 100);
			overview_put_fit(ui, w, y, x, cols - x, A_NORMAL, b);
		}
	}
	if (h < 2)
		return 1;
	/* The checklist's counts, then the first failing item. */
	glance_checklist(v, &g);
	y++;
	x = tui_put(w, y, 0, cols, tui_attr(ui, ROLE_HEAD), "CHECKLIST");
	for (int s = 0; s < GLANCE_NSTATUS; s++) {
		if (!g.n[s] && s != GLANCE_PASS && s != GLANCE_FAIL)
			continue;
		snprintf(b, sizeof b, " %d %s", g.n[s], glance_status_name[s]);
		if (fit_cols(b) > cols - x)
			break; /* a count is written whole or not at all */
		x += tui_put(w, y, x, cols - x,
			     tui_attr(ui, !g.n[s] ? ROLE_DIM
				      : s == GLANCE_NONE
					  ? ROLE_DIM
					  : tui_status_role(glance_status_name[s])),
			     b);
	}
	if (g.first) {
		snprintf(b, sizeof b, "  first %s: %s", g.first_status,
			 g.first);
		if (fit_cols(b) <= cols - x)
			x += tui_put(w, y, x, cols - x,
				     tui_attr(ui, tui_status_role(g.first_status)),
				     b);
	}
	if (h < 3 || !g.first)
		return 2;
	/* The first failing item's evidence, as the checklist panel writes
	 * an item: status, node, detail (shortened at a word). */
	y++;
	x = tui_printf(w, y, 0, cols, tui_attr(ui, tui_status_role(g.first_status)),
		       "  %s %s %s  ",
		       !strcmp(g.first_status, "fail") ? ui->g->fail : "!",
		       g.first, g.first_status);
	if (g.first_check) {
		const struct view_check *c = g.first_check;
		size_t nl = strlen(c->node);
		int named = !strncmp(c->detail, c->node, nl) &&
			    (c->detail[nl] == ' ' || c->detail[nl] == ':');
		snprintf(b, sizeof b, "%s%s%s", named ? "" : c->node,
			 named ? "" : ": ", c->detail);
		/* Shortened: the whole text is one key away ('e': the
		 * Checklist screen at this item), and the line says so. */
		if (fit_cols(b) > cols - x && cols - x > 5 + 8) {
			x += overview_put_fit(ui, w, y, x, cols - x - 5,
					      A_NORMAL, b);
			tui_put(w, y, x, cols - x, tui_attr(ui, ROLE_DIM),
				"  [e]");
		} else
			overview_put_fit(ui, w, y, x, cols - x, A_NORMAL, b);
	}
	return 3;
}

int overview_summary_need(const struct view *v)
{
	struct glance_checklist g;
	glance_checklist(v, &g);
	return g.first ? 3 : 2;
}

/* "  LABEL " in lw columns at the line's start, a long one keeping its
 * end (fit_name: "…node-0017/3", never a cut "rack07-node-001"); returns
 * the columns written. */
static int overview_label(struct tui *ui, WINDOW *w, int y, int cols,
			  attr_t a, int lw, const char *label)
{
	char b[128];
	fit_name(label, lw, ui->ascii ? "..." : "\u2026", b, sizeof b);
	return tui_printf(w, y, 0, cols, a, "  %s%*s ", b, lw - fit_cols(b),
			  "");
}

/* One line of the memory or network panel: a card, a node or a node set. */
struct gline {
	char label[96];
	size_t first, last; /* nodes */
	int card;	    /* -1: the node's or set's worst card */
};

/* The lines for h rows: per card when they fit, else per node, else per
 * node set (consecutive nodes, as the grid folds them). */
static int glance_lines(const struct view *v, int h, int per_card,
			struct gline *out, int max)
{
	int n = 0;
	size_t group;
	if (h < 1 || !v->nnodes)
		return 0;
	if (per_card && glance_ncards(v, 0, v->nnodes - 1) <= h) {
		for (size_t i = 0; i < v->nnodes; i++)
			for (int c = 0; c < v->nodes[i].ncards && n < max; c++) {
				if (!glance_has(&v->nodes[i], c))
					continue;
				snprintf(out[n].label, sizeof out[n].label,
					 "%.60s/%d", v->nodes[i].name, c);
				out[n].first = out[n].last = i;
				out[n++].card = c;
			}
		return n;
	}
	group = (v->nnodes + (size_t)h - 1) / (size_t)h;
	for (size_t i = 0; i < v->nnodes && n < max; i += group) {
		size_t last = i + group - 1 < v->nnodes ? i + group - 1
							: v->nnodes - 1;
		tui_fold_name(v->nodes[i].name, v->nodes[last].name,
			      out[n].label, sizeof out[n].label);
		out[n].first = i;
		out[n].last = last;
		out[n++].card = -1;
	}
	return n;
}

#define GLINES 256

int overview_memory_need(const struct view *v)
{
	int c = v->nnodes ? glance_ncards(v, 0, v->nnodes - 1) : 0;
	return c ? c : 0;
}

int overview_memory(struct tui *ui, const struct view *v, WINDOW *w, int y,
		    int h, int cols)
{
	struct gline l[GLINES];
	struct glance_card g[GLINES];
	char ub[GLINES][48], pk[GLINES][32], hr[GLINES][16], worst[GLINES][96];
	int lw = 0, ubw = 0, pkw = 0, hrw = 0, wsw = 0, n, rows = 0;
	/* The heading when the caller gave it a row: every line fits
	 * under it, or the lines fold (8 rows and up: the caller's roomy
	 * layout, 30 screen rows). */
	int need = overview_memory_need(v);
	int head = h >= 2 && (h > need || h >= 8);
	n = glance_lines(v, h - head, 1, l, GLINES);
	if (!n)
		return 0;
	for (int i = 0; i < n; i++) {
		int total;
		double f;
		if (l[i].card >= 0) {
			glance_card(&v->nodes[l[i].first], l[i].card, &g[i]);
			total = 1;
		} else
			total = glance_worst(v, l[i].first, l[i].last, &g[i]);
		fit_used_budget(g[i].used, g[i].budget, ub[i], sizeof ub[i]);
		fit_bytes(g[i].peak, pk[i], sizeof pk[i]);
		fit_headroom(g[i].peak, g[i].budget, hr[i], sizeof hr[i], &f);
		worst[i][0] = 0;
		if (!total)
			snprintf(ub[i], sizeof ub[i], "no card");
		else if (l[i].card < 0 && l[i].first == l[i].last)
			snprintf(worst[i], sizeof worst[i],
				 "worst of %d cards: #%d", total, g[i].card);
		else if (l[i].card < 0)
			snprintf(worst[i], sizeof worst[i],
				 "worst of %d cards: %.40s/%d", total,
				 g[i].node, g[i].card);
#define WIDEST(var, s)                                                       \
	if (fit_cols(s) > var)                                               \
		var = fit_cols(s);
		WIDEST(lw, l[i].label)
		WIDEST(ubw, ub[i])
		WIDEST(pkw, pk[i])
		WIDEST(hrw, hr[i])
		WIDEST(wsw, worst[i])
	}
	if (lw > 24)
		lw = 24;
	/* The fields in order of what to give up when the line is narrow:
	 * the worst card's name, then the words; a number is never cut. */
	const char *pkl = "  peak ", *hrl = "  headroom ";
	int text = ubw + 7 + pkw + 11 + hrw + (wsw ? 2 + wsw : 0);
	int fixed = 2 + lw + 1;
	if (fixed + 8 + text > cols && wsw) {
		text -= 2 + wsw;
		wsw = 0;
	}
	if (fixed + 8 + text > cols) {
		pkl = " pk ";
		hrl = " free ";
		text = ubw + 4 + pkw + 6 + hrw;
	}
	int bw = cols - fixed - 1 - text;
	if (bw > 30)
		bw = 30;
	if (bw < 4)
		bw = 0;
	if (head) {
		tui_printf(w, y, 0, cols, tui_attr(ui, ROLE_HEAD),
			   "MEMORY  used/budget, peak, headroom above the peak");
		rows++;
	}
	for (int i = 0; i < n && rows < h; i++, rows++) {
		int yy = y + rows, x = 0, dim = 0;
		enum tui_role role;
		double f = g[i].headroom;
		role = isnan(f) ? ROLE_NORMAL
		       : f < 0.1 ? ROLE_FAIL
		       : f < 0.25 ? ROLE_WARN
				  : ROLE_OK;
		for (size_t k = l[i].first; k <= l[i].last; k++)
			dim |= view_node_stale(v, &v->nodes[k], NULL);
		x += overview_label(ui, w, yy, cols, A_NORMAL, lw, l[i].label);
		if (bw) {
			tui_membar(ui, w, yy, x, bw, g[i].used, g[i].peak,
				   g[i].budget, dim);
			x += bw + 1;
		}
		if (x + text > cols)
			continue; /* numbers whole or not at all */
		x += tui_printf(w, yy, x, cols - x, A_NORMAL, "%*s", ubw, ub[i]);
		x += tui_printf(w, yy, x, cols - x, tui_attr(ui, ROLE_DIM), "%s",
				pkl);
		x += tui_printf(w, yy, x, cols - x, A_NORMAL, "%*s", pkw, pk[i]);
		x += tui_printf(w, yy, x, cols - x, tui_attr(ui, ROLE_DIM), "%s",
				hrl);
		x += tui_printf(w, yy, x, cols - x,
				tui_attr(ui, dim ? ROLE_DIM : role), "%*s", hrw,
				hr[i]);
		if (wsw && worst[i][0])
			tui_printf(w, yy, x, cols - x, tui_attr(ui, ROLE_DIM),
				   "  %s", worst[i]);
	}
	return rows;
}

int overview_net_need(const struct view *v)
{
	int n = 0;
	for (size_t i = 0; i < v->nnodes; i++)
		n += glance_has_net(v, &v->nodes[i]);
	return n;
}

int overview_net(struct tui *ui, const struct view *v, WINDOW *w, int y, int h,
		 int cols)
{
	struct gline l[GLINES];
	int need = overview_net_need(v);
	int head = h >= 2 && (h > need || h >= 5); /* as in memory */
	int n = 0, lw = 0, rows = 0;
	if (!need)
		return 0;
	if (need <= h - head) {
		/* A line per node that has network figures. */
		for (size_t i = 0; i < v->nnodes && n < GLINES; i++)
			if (glance_has_net(v, &v->nodes[i])) {
				snprintf(l[n].label, sizeof l[n].label, "%s",
					 v->nodes[i].name);
				l[n].first = l[n].last = i;
				l[n++].card = -1;
			}
	} else
		n = glance_lines(v, h - head, 0, l, GLINES);
	if (!n)
		return 0;
	if (head) {
		tui_put(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
			"NET  NIC rx/tx, the running collective's bus "
			"bandwidth, data moved");
		rows++;
		h--;
	}
	for (int i = 0; i < n; i++)
		if (fit_cols(l[i].label) > lw)
			lw = fit_cols(l[i].label);
	if (lw > 24)
		lw = 24;
	/* The figures first (every line's), so the sparklines line up. */
	char t[GLINES][96], bus[GLINES][96];
	int tw = 0, bw = 0;
	for (int i = 0; i < n && i < h; i++) {
		struct glance_net g;
		char rx[32], tx[32];
		glance_net(v, l[i].first, l[i].last, &g);
		fit_bytes(g.rx, rx, sizeof rx);
		fit_bytes(g.tx, tx, sizeof tx);
		if (isnan(g.rx) && isnan(g.tx))
			snprintf(t[i], sizeof t[i], "no NIC samples");
		else
			snprintf(t[i], sizeof t[i], "rx %s/s  tx %s/s", rx, tx);
		bus[i][0] = 0;
		if (g.bus) {
			char b[32];
			fit_busbw(g.busbw, b, sizeof b);
			snprintf(bus[i], sizeof bus[i], "%.24s busbw %s", g.op, b);
		}
		if (fit_cols(t[i]) > tw)
			tw = fit_cols(t[i]);
		if (fit_cols(bus[i]) > bw)
			bw = fit_cols(bus[i]);
	}
	for (int i = 0; i < n && i < h; i++, rows++) {
		double vals[64];
		int yy = y + i, x = 0, m;
		x += overview_label(ui, w, yy, cols, tui_attr(ui, ROLE_HEAD), lw,
				    l[i].label);
		if (x + fit_cols(t[i]) > cols)
			continue; /* numbers whole or not at all */
		tui_put(w, yy, x, cols - x, A_NORMAL, t[i]);
		x += tw;
		if (bw && x + 2 + bw <= cols) {
			if (bus[i][0])
				tui_put(w, yy, x + 2, cols - x - 2,
					tui_attr(ui, ROLE_OK), bus[i]);
			x += 2 + bw;
		}
		/* The data moved per sample tick, summed over the set like
		 * its rx/tx (the grid's sparkline is the same line). */
		int sw = cols - x - 2;
		if (sw > 30)
			sw = 30;
		if (sw < 4)
			continue;
		m = glance_moved_set(v, l[i].first, l[i].last, vals, sw);
		overview_spark(ui, w, yy, x + 2, sw, vals, m,
			       tui_attr(ui, ROLE_BAR));
	}
	return rows;
}

void overview_spark(struct tui *ui, WINDOW *w, int y, int x, int n,
		    const double *vals, int m, attr_t a)
{
	double mx = 0;
	char run[8 * 64 + 1];
	size_t off = 0;
	if (n > 64)
		n = 64;
	for (int i = 0; i < m; i++)
		if (!isnan(vals[i]) && vals[i] > mx)
			mx = vals[i];
	for (int i = 0; i < n; i++) {
		int k = i - (n - m); /* right-aligned: the newest at the end */
		const char *gl = " ";
		if (k >= 0 && k < m) {
			int lvl = mx > 0 && !isnan(vals[k])
				      ? (int)(vals[k] / mx * 7 + 0.5)
				      : 0;
			/* flat only when truly idle: any data moved lifts
			 * its tick off the floor, however small beside the
			 * window's peak (a soak's collectives beside a comm
			 * sweep's) */
			if (lvl < 1 && !isnan(vals[k]) && vals[k] > 0)
				lvl = 1;
			gl = ui->g->spark[lvl < 0 ? 0 : lvl > 7 ? 7 : lvl];
		}
		size_t gl_n = strlen(gl);
		memcpy(run + off, gl, gl_n);
		off += gl_n;
	}
	run[off] = 0;
	tui_put(w, y, x, n, a, run);
}
