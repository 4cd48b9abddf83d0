/*
 * screen_overview.c - one row per node: state, a memory bar per card (used,
 * peak mark, budget = the bar's end; colour by headroom; bars widen with
 * the terminal), a sparkline of the data the node moves (NIC or the
 * collectives' bus bandwidth: glance.h) and the node's checklist row;
 * folded node sets when the nodes outnumber the rows they get.  Below the
 * grid: the verdict line and the checklist's counts, memory with numbers
 * per card, the network per node, then the stage timeline, the checklist
 * by name with its evidence and the last alerts (overview_panels.c); the
 * perf line and the alerts line at the bottom.  The layout rule per
 * terminal size is in docs/screens.md.
 */
#include "tui.h"
#include "checklist.h"
#include "console.h"
#include "fit.h"
#include "glance.h"

#include <math.h>
#include <string.h>

static enum tui_role node_activity(const struct view *v,
				   const struct view_node *n, char *out,
				   size_t max);

/* The node's state as a word and its colour; input the console refused
 * from it follows ("idle, 3 refused"). */
static enum tui_role node_state(const struct view *v,
				const struct view_node *n, char *out,
				size_t max)
{
	enum tui_role role = node_activity(v, n, out, max);
	uint64_t refused = view_node_refused(v, n->name, NULL);
	size_t k = strlen(out);
	if (refused && k < max) {
		snprintf(out + k, max - k, ", %llu refused",
			 (unsigned long long)refused);
		if (role == ROLE_OK || role == ROLE_HEAD)
			role = ROLE_WARN;
	}
	return role;
}

static enum tui_role node_activity(const struct view *v,
				   const struct view_node *n, char *out,
				   size_t max)
{
	const struct view_stage *run = NULL, *bad = NULL;
	int64_t age;
	for (size_t i = 0; i < n->nstix; i++) {
		const struct view_stage *s = VIEW_NODE_STAGE(v, n, i);
		if (strcmp(s->state, "end"))
			run = s;
		else if (s->has_rc && s->rc && !view_stage_superseded(v, s) &&
			 !(v->verdict_ts && s->ts > v->verdict_ts))
			bad = s; /* a rerun that followed decides, not this;
				  * nor a service its agent stopped after the
				  * verdict (FAILURES AND MARKERS keeps it) */
	}
	if (n->state[0] && strcmp(n->state, "done")) {
		/* The grid shortens it at a word (fit.h). */
		size_t k = strlen(n->state);
		snprintf(out, max, "%s: ", n->state);
		if (k + 3 < max) {
			size_t wl = strnlen(n->why, max - k - 3);
			memcpy(out + k + 2, n->why, wl);
			out[k + 2 + wl] = 0;
		}
		return ROLE_FAIL;
	}
	if (view_node_stale(v, n, &age)) {
		char d[24];
		tui_dur(age, d, sizeof d);
		snprintf(out, max, "silent %s", d);
		return ROLE_DIM;
	}
	if (run && v->verdict_ts) {
		/* after the verdict only a service runs on, until the
		 * console's bye stops it: not "run serve 0%" */
		snprintf(out, max, "stopping %s", run->id);
		return ROLE_DIM;
	}
	if (run) {
		snprintf(out, max, "run %s %.0f%%", run->id,
			 run->progress * 100);
		return ROLE_HEAD;
	}
	if (bad) {
		snprintf(out, max, "FAIL %s", bad->id);
		return ROLE_FAIL;
	}
	snprintf(out, max, n->state[0] ? "done" : "idle");
	return ROLE_OK;
}

/* A running node's state in w columns, words and numbers whole: "run
 * comm 45%", else "comm 45%" (the colour says it runs), else "run 45%"
 * (the stage is on the verdict line); the progress is never the part
 * that goes. */
static void running_fit(char *state, size_t max, int w)
{
	const char *pct = strrchr(state, ' ');
	char b[96];
	if (fit_cols(state) <= w || strncmp(state, "run ", 4) ||
	    strchr(state, ',') || !pct || pct[strlen(pct) - 1] != '%')
		return;
	if (fit_cols(state + 4) <= w) {
		memmove(state, state + 4, strlen(state + 4) + 1);
		return;
	}
	snprintf(b, sizeof b, "run%s", pct);
	snprintf(state, max, "%s", b);
}

/* One character per checklist item, in contract order. */
static void checks_row(struct tui *ui, const struct view *v, WINDOW *w, int y,
		       int x, int n, const char *node, int dim)
{
	for (int i = 0; i < TUI_NITEMS && i < n; i++) {
		const struct view_check *c = view_check(v, node, tui_items(i));
		const char *g = ui->g->empty;
		if (c) {
			if (!strcmp(c->status, "pass"))
				g = ui->g->pass;
			else if (!strcmp(c->status, "fail"))
				g = ui->g->fail;
			else if (!strcmp(c->status, "warn"))
				g = "!";
			else if (!strcmp(c->status, "running"))
				g = "~";
			else if (!strcmp(c->status, "skip"))
				g = "-";
			else
				g = "?";
		}
		tui_put(w, y, x + i, 1,
			tui_attr(ui, dim ? ROLE_DIM
				 : c	 ? tui_status_role(c->status)
					 : ROLE_DIM),
			g);
	}
}

static int max_cards(const struct view *v)
{
	int m = 0;
	for (size_t i = 0; i < v->nnodes; i++)
		if (v->nodes[i].ncards > m)
			m = v->nodes[i].ncards;
	return m;
}

/* How serious a refusal is (lower first): a node speaking for another
 * comes before a replayed or out-of-order seq, which comes before a
 * malformed line; a rate limit (deferred, not refused) comes last. */
static int alert_rank(const struct view_alert *a)
{
	static const char *const order[] = {
	    "forged node", "reserved node name",
	    "duplicate seq with a different body", "seq going backwards",
	    "unknown protocol version"};
	if (a->rate)
		return 100;
	for (size_t i = 0; i < sizeof order / sizeof *order; i++)
		if (!strcmp(a->reason, order[i]))
			return (int)i;
	return 50;
}

static void alerts(struct tui *ui, const struct view *v, WINDOW *w, int y,
		   int cols)
{
	char b[1024];
	size_t off = 0;
	int nmem = 0, nfail = 0, nstale = 0, nref = 0;
#define ADD(...)                                                             \
	do {                                                                 \
		int k_ = snprintf(b + off, sizeof b - off, __VA_ARGS__);     \
		if (k_ > 0 && (size_t)k_ < sizeof b - off)                   \
			off += (size_t)k_;                                   \
	} while (0)
	if (v->store_alert[0])
		ADD("STORE: %s  ", v->store_alert);
	/* One entry per node (three nodes at most): its most serious
	 * reason, how many other reasons, the count of everything held
	 * back from it.  A node that forges identities is never crowded
	 * out by another node's noisier but lesser faults. */
	for (size_t i = 0; i < v->nalerts; i++) {
		const struct view_alert *a = &v->alerts[i], *top = a;
		uint64_t count = 0;
		int reasons = 0, seen = 0, rate = 1;
		for (size_t j = 0; j < i && !seen; j++)
			seen = !strcmp(v->alerts[j].node, a->node);
		if (seen)
			continue;
		for (size_t j = i; j < v->nalerts; j++) {
			const struct view_alert *o = &v->alerts[j];
			if (strcmp(o->node, a->node))
				continue;
			count += o->count;
			reasons++;
			rate &= o->rate;
			if (alert_rank(o) < alert_rank(top))
				top = o;
		}
		if (nref++ >= 3)
			continue;
		if (reasons > 1)
			ADD("%s %s %s +%d (%llu)  ",
			    rate ? "rate-limited" : "refused", a->node,
			    top->reason, reasons - 1,
			    (unsigned long long)count);
		else
			ADD("%s %s %s (%llu)  ",
			    rate ? "rate-limited" : "refused", a->node,
			    top->reason, (unsigned long long)count);
	}
	for (size_t i = 0; i < v->nnodes; i++) {
		const struct view_node *n = &v->nodes[i];
		for (int c = 0; c < n->ncards; c++) {
			const struct view_card *k = &n->cards[c];
			if (k->present && k->budget > 0 &&
			    k->used > 0.9 * k->budget && nmem++ < 3)
				ADD("mem %s/%d %.0f%%  ", n->name, c,
				    k->used / k->budget * 100);
		}
	}
	for (size_t i = 0; i < v->nchecks; i++)
		if (!strcmp(v->checks[i].status, "fail") && nfail++ < 3)
			ADD("fail %s@%s  ", v->checks[i].item,
			    v->checks[i].node);
	for (size_t i = 0; i < v->nnodes; i++) {
		int64_t age;
		char d[24];
		if (view_node_stale(v, &v->nodes[i], &age) && nstale++ < 3) {
			tui_dur(age, d, sizeof d);
			ADD("silent %s %s  ", v->nodes[i].name, d);
		}
	}
#undef ADD
	if (!nmem && !nfail && !nstale && !nref && !v->store_alert[0]) {
		tui_put(w, y, 0, cols, tui_attr(ui, ROLE_OK), "alerts: none");
		return;
	}
	int x = tui_put(w, y, 0, cols, tui_attr(ui, ROLE_FAIL), "ALERTS:");
	char line[sizeof b + 8];
	while (off > 0 && b[off - 1] == ' ')
		b[--off] = 0;
	snprintf(line, sizeof line, " %s%s", b,
		 nmem + nfail + nstale + nref > 9 ? " ..." : "");
	/* Shortened at a word: "mem n01/3 9" never reads as 9%. */
	overview_put_fit(ui, w, y, x, cols - x, tui_attr(ui, ROLE_WARN), line);
}

/* The last perf row of a kind: the perf step's (concurrency < 0) or a
 * load level's of concurrency c. */
static const struct view_perf *perf_last(const struct view *v, int c)
{
	if (!v)
		return NULL;
	for (size_t i = v->perf.n; i-- > 0;) {
		const struct view_perf *p = VIEW_AT(v->perf, i);
		if (c < 0 ? p->concurrency < 0 : p->concurrency == c)
			return p;
	}
	return NULL;
}

/* The perf line: the perf step's baseline (load's levels come after it
 * and are the Service screen's), else the last load level, named so;
 * each figure and its change against the baseline session's row of the
 * same kind whole or not at all (a narrow screen drops the last ones,
 * never half of a number). */
static void perf_line(struct tui *ui, const struct view *v, WINDOW *w, int y,
		      int cols)
{
	const struct view_perf *p = perf_last(v, -1);
	const struct view_perf *b;
	char label[48];
	if (!p)
		p = VIEW_AT(v->perf, v->perf.n - 1);
	if (p->concurrency < 0)
		snprintf(label, sizeof label, "perf:");
	else
		snprintf(label, sizeof label, "load c%d:", p->concurrency);
	b = perf_last(ui->base, p->concurrency);
	const double cur[3] = {p->ttft_ms, p->tpot_ms, p->tokens_per_s};
	const double base[3] = {b ? b->ttft_ms : NAN, b ? b->tpot_ms : NAN,
				b ? b->tokens_per_s : NAN};
	int x = 0;
	for (int k = 0; k < 3; k++) {
		char s[96], d[32];
		if (k == 0)
			snprintf(s, sizeof s, "%s ttft %.1f ms", label, cur[k]);
		else if (k == 1)
			snprintf(s, sizeof s, "  tpot %.1f ms", cur[k]);
		else
			snprintf(s, sizeof s, "  %.1f tok/s", cur[k]);
		if (fit_cols(s) > cols - x)
			return;
		x += tui_put(w, y, x, cols - x, A_NORMAL, s);
		if (isnan(base[k]) || base[k] == 0 || isnan(cur[k]))
			continue;
		/* tui_delta's own words */
		snprintf(d, sizeof d, " %+.1f%%",
			 (cur[k] - base[k]) / fabs(base[k]) * 100);
		if (fit_cols(d) > cols - x)
			return;
		x += tui_delta(ui, w, y, x, cols - x, cur[k], base[k], k == 2);
	}
}

/* The panels share h rows.  Each drawn panel takes at least a heading and
 * one line: when rows are short they go first to the failures and
 * markers (when there are any), then the timeline, then the checklist;
 * what is left is shared out in screen order, a third each, then what
 * the others leave. */
static void draw_panels(struct tui *ui, const struct view *v, WINDOW *w,
			int y, int h, int cols)
{
	int need[3], got[3] = {0, 0, 0}, left = h, drawn = 0;
	static const int prio[3] = {2, 0, 1};
	int nst = v->npb_stages;
	if (!nst)
		for (size_t i = 0; i < v->nstages; i++)
			nst += !strcmp(v->stages[i].node, CONSOLE_NODE);
	need[0] = nst ? nst + 1 : 0;
	/* Short screens: the summary's rows are the checklist's short form. */
	need[1] = h >= 20 ? (int)checklist_n + 1 : 0;
	need[2] = v->marks.n ? (int)(v->marks.n < 8 ? v->marks.n : 8) + 1 : 0;
	for (int k = 0; k < 3; k++) {
		int i = prio[k];
		int gap = drawn ? 1 : 0; /* a blank row between panels */
		if (need[i] >= 2 && left >= 2 + gap) {
			got[i] = 2;
			left -= 2 + gap;
			drawn++;
		}
	}
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 3 && left > 0; i++) {
			int more = need[i] - got[i], cap = h / 3 - got[i];
			if (!got[i])
				continue;
			if (round == 0 && more > cap)
				more = cap;
			if (more > left)
				more = left;
			if (more > 0) {
				got[i] += more;
				left -= more;
			}
		}
	if (got[0])
		y += overview_timeline(ui, v, w, y, got[0], cols) + 1;
	if (got[1])
		y += overview_checklist(ui, v, w, y, got[1], cols) + 1;
	if (got[2])
		overview_alerts(ui, v, w, y, got[2], cols);
	else if (!v->marks.n && left >= 1)
		overview_alerts(ui, v, w, y, 1, cols);
}

/* Nodes per row of the last draw (folded node sets), for Enter. */
static size_t last_group = 1;

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols;
	getmaxyx(w, rows, cols);
	int namew = 6, ncards = max_cards(v);
	for (size_t i = 0; i < v->nnodes; i++) {
		int l = (int)strlen(v->nodes[i].name);
		if (l > namew)
			namew = l;
	}
	if (namew > 16)
		namew = 16;
	/* Inventory labels beside the names when the terminal is wide. */
	int labw = 0;
	if (cols >= 120)
		for (size_t i = 0; i < v->nnodes; i++) {
			int l = (int)strlen(view_node_labels(v, v->nodes[i].name));
			if (l > labw)
				labw = l;
		}
	if (labw > 24)
		labw = 24;
	/* The layout rule (docs/screens.md): under the grid's heading the
	 * rows go, in this order, to the node grid (its node sets folded
	 * to at most half of them), the verdict line and the checklist's
	 * counts (always), memory (per card, else folded: at most half of
	 * what is left), the network (a third of the rest), then the
	 * stage / checklist / failure panels; perf and alerts at the
	 * bottom. */
	int avail = rows - 1 - (v->perf.n ? 1 : 0) - 1; /* heading, perf, alerts */
	int sum = avail >= 4 ? 2 : avail >= 3 ? 1 : 0;
	if (sum == 2 && avail >= 6)
		sum = overview_summary_need(v);
	int body = (int)v->nnodes, rest, memh, neth, panels, blank;
	avail -= sum;
	if (avail >= 4 && body > avail / 2)
		body = avail / 2;
	if (body > avail)
		body = avail;
	if (body < 1)
		body = 1;
	/* Folded node sets: the rows they fill, no more. */
	size_t group = (v->nnodes + (size_t)body - 1) / (size_t)body;
	if (group < 1)
		group = 1;
	size_t ngroups = (v->nnodes + group - 1) / group;
	if (ngroups && (int)ngroups < body)
		body = (int)ngroups;
	rest = avail - body;
	blank = rest >= 24; /* a blank row under the grid when roomy */
	rest -= blank;
	/* MEMORY's and NET's headings only when roomy (30 rows and up) */
	memh = overview_memory_need(v) + (rows >= 30);
	if (memh > (rest + 1) / 2)
		memh = rest >= 2 ? (rest + 1) / 2 : rest > 0 ? rest : 0;
	rest -= memh;
	neth = overview_net_need(v) + (rows >= 30);
	if (neth > rest / 3)
		neth = rest >= 1 ? (rest / 3 > 0 ? rest / 3 : 1) : 0;
	rest -= neth;
	panels = rest - 1 >= 2 ? rest - 1 : 0;
	/* Folded rows need room for "n[001-008]" (whole: a node set's
	 * name is never cut). */
	if (group > 1) {
		size_t g0 = group;
		char fn[96];
		tui_fold_name(v->nodes[0].name,
			      v->nodes[g0 < v->nnodes ? g0 - 1 : v->nnodes - 1].name,
			      fn, sizeof fn);
		if ((int)strlen(fn) > namew)
			namew = (int)strlen(fn);
		if (namew > 20)
			namew = 20;
	}
	int namew0 = namew;
	if (labw)
		namew += labw + 3;
	int statew = cols >= 140 ? 28 : cols >= 100 ? 20 : 12;
	int sparkw = cols >= 100 ? 10 : 6;
	int chkw = cols >= 90 ? TUI_NITEMS : 0;
	int barx = namew + 1 + statew + 1;
	int area = cols - barx - sparkw - 1 - (chkw ? chkw + 1 : 0) - 5;
	int bw = ncards ? (area - (ncards - 1)) / ncards : 0;
	int gap = 1;
	if (bw > 40)
		bw = 40;
	if (bw < 2) {
		/* One column a card, no gaps: graceful degradation. */
		bw = 1;
		gap = 0;
	}
	if (!v->nnodes) {
		tui_put(w, 1, 0, cols, tui_attr(ui, ROLE_DIM),
			"no node has reported yet");
		alerts(ui, v, w, rows - 1, cols);
		return;
	}
	tui_printf(w, 0, 0, cols, tui_attr(ui, ROLE_HEAD), "%-*s %-*s %s",
		   namew, "node", statew, "state", "memory per card");
	tui_put(w, 0, cols - sparkw - 1 - (chkw ? chkw + 1 : 0) - 4,
		sparkw + 5, tui_attr(ui, ROLE_HEAD), "use  net");
	if (chkw)
		tui_put(w, 0, cols - chkw, chkw, tui_attr(ui, ROLE_HEAD),
			"checklist");
	/* Consecutive nodes fold into groups when they do not all fit. */
	last_group = group;
	if (ui->sel_node >= (int)ngroups)
		ui->sel_node = (int)ngroups - 1;
	if (ui->sel_node < 0)
		ui->sel_node = 0;
	for (size_t gi = 0; gi < ngroups && (int)gi < body; gi++) {
		const struct view_node *n0 = &v->nodes[gi * group];
		size_t last = gi * group + group - 1;
		if (last >= v->nnodes)
			last = v->nnodes - 1;
		const struct view_node *nl = &v->nodes[last];
		int y = 1 + (int)gi;
		char name[96], state[96];
		enum tui_role role = ROLE_OK;
		int dim = 1;
		double maxfrac = 0;
		tui_fold_name(n0->name, nl->name, name, sizeof name);
		/* The group's worst state: fail, then running, then silent. */
		state[0] = 0;
		for (size_t k = gi * group; k <= last; k++) {
			char s[96];
			enum tui_role r = node_state(v, &v->nodes[k], s, sizeof s);
			int rank = r == ROLE_FAIL ? 3 : r == ROLE_HEAD ? 2 : r == ROLE_DIM ? 1 : 0;
			int cur = role == ROLE_FAIL ? 3 : role == ROLE_HEAD ? 2 : role == ROLE_DIM ? 1 : 0;
			if (!state[0] || rank > cur) {
				role = r;
				snprintf(state, sizeof state, "%s", s);
			}
			if (r != ROLE_DIM)
				dim = 0;
		}
		if (group > 1 && role == ROLE_OK) {
			/* "done x2", "idle x8": no node of the set fails,
			 * runs or is silent; the word is its first node's */
			char word[16];
			snprintf(word, sizeof word, "%.15s", state);
			snprintf(state, sizeof state, "%s x%zu", word,
				 last - gi * group + 1);
		}
		{
			/* A name wider than its column keeps its end after
			 * "…" (fit_name): "…node-0017", never a cut
			 * "gpu-h200-rack07-node-00". */
			char nm[128];
			fit_name(name, namew0, ui->ascii ? "..." : "\u2026", nm,
				 sizeof nm);
			tui_printf(w, y, 0, namew0,
				   tui_attr(ui, (int)gi == ui->sel_node ? ROLE_SEL
						: dim ? ROLE_DIM
						      : ROLE_NORMAL),
				   "%s%*s", nm, namew0 - fit_cols(nm), "");
		}
		if (labw && group == 1 && *view_node_labels(v, n0->name))
			tui_printf(w, y, namew0 + 1, labw + 2,
				   tui_attr(ui, ROLE_MARK), "[%s]",
				   view_node_labels(v, n0->name));
		if (role == ROLE_HEAD)
			running_fit(state, sizeof state, statew);
		overview_put_fit(ui, w, y, namew + 1, statew, tui_attr(ui, role),
				 state);
		/* Per card: this node's, or per card index the group's
		 * fullest. */
		int x = barx;
		for (int c = 0; c < ncards && x + bw <= cols; c++) {
			double used = NAN, peak = NAN, budget = NAN, best = -1;
			for (size_t k = gi * group; k <= last; k++) {
				const struct view_node *n = &v->nodes[k];
				if (c >= n->ncards || !n->cards[c].present)
					continue;
				const struct view_card *cd = &n->cards[c];
				double f = cd->budget > 0 ? cd->used / cd->budget
							  : 0;
				if (f > best || isnan(used)) {
					best = f;
					used = cd->used;
					peak = cd->peak;
					budget = cd->budget;
				}
			}
			if (budget > 0 && used / budget > maxfrac)
				maxfrac = used / budget;
			tui_membar(ui, w, y, x, bw, used, peak, budget, dim);
			x += bw + gap;
		}
		int rx = cols - sparkw - 1 - (chkw ? chkw + 1 : 0);
		tui_printf(w, y, rx - 5, 4,
			   tui_attr(ui, dim ? ROLE_DIM
					    : tui_mem_role(maxfrac, 1)),
			   "%3.0f%%", maxfrac * 100);
		{
			/* NIC rx + tx, or the collectives' bus bandwidth
			 * (glance.h): not flat while a collective runs;
			 * a folded set's summed over its nodes. */
			double vals[GLANCE_MOVED_MAX];
			int m = glance_moved_set(v, gi * group, last, vals,
						 sparkw < GLANCE_MOVED_MAX
						     ? sparkw
						     : GLANCE_MOVED_MAX);
			overview_spark(ui, w, y, rx, sparkw, vals, m,
				       tui_attr(ui, dim ? ROLE_DIM : ROLE_BAR));
		}
		if (chkw)
			checks_row(ui, v, w, y, cols - chkw, chkw, n0->name,
				   dim);
	}
	{
		int y = 1 + (body < (int)ngroups ? body : (int)ngroups) + blank;
		y += overview_summary(ui, v, w, y, sum, cols);
		y += overview_memory(ui, v, w, y, memh, cols);
		y += overview_net(ui, v, w, y, neth, cols) + 1;
		/* The rows memory and net were given but did not use (a
		 * folded set's lines fill fewer) go to the panels too. */
		int left = rows - 1 - (v->perf.n ? 1 : 0) - y;
		if (left > panels)
			panels = left;
		if (panels >= 2)
			draw_panels(ui, v, w, y, panels, cols);
	}
	if (v->perf.n)
		perf_line(ui, v, w, rows - 2, cols);
	alerts(ui, v, w, rows - 1, cols);
}

/* 'e': the first failing item's whole evidence, one key away: the
 * Checklist screen with that item and its worst evidence's node selected
 * (the Overview's summary row shortens it). */
static int show_first_evidence(struct tui *ui, const struct view *v)
{
	struct glance_checklist g;
	glance_checklist(v, &g);
	if (!g.first) {
		snprintf(ui->status, sizeof ui->status,
			 "no item fails, warns or was not run");
		return 1;
	}
	for (int s = 0; s < TUI_NSCREENS; s++)
		if (tui_screens[s] == &screen_checklist)
			ui->screen = s;
	for (int i = 0; i < TUI_NITEMS; i++)
		if (!strcmp(tui_items(i), g.first))
			ui->sel_item = i;
	if (g.first_check) {
		/* The Checklist screen's columns: the nodes, the console's
		 * own last. */
		ui->sel_col = (int)v->nnodes;
		for (size_t i = 0; i < v->nnodes; i++)
			if (!strcmp(v->nodes[i].name, g.first_check->node))
				ui->sel_col = (int)i;
	}
	ui->scroll = 0;
	return 1;
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	switch (key) {
	case 'e': return show_first_evidence(ui, v);
	case KEY_UP: ui->sel_node--; return 1;
	case KEY_DOWN: ui->sel_node++; return 1;
	case KEY_PPAGE: ui->sel_node -= 10; return 1;
	case KEY_NPAGE: ui->sel_node += 10; return 1;
	case '\r':
	case '\n':
	case KEY_ENTER:
		/* Drill into the node: its cards. */
		ui->screen = 1;
		ui->sel_card = 0;
		ui->sel_node = ui->sel_node * (int)last_group;
		return 1;
	}
	return 0;
}

const struct tui_screen screen_overview = {"Overview", draw, on_key};
