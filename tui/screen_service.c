/*
 * screen_service.c - the service level: what `day0-engine load` measures
 * against an endpoint and what `day0-engine serve` reports of itself.
 *
 * Per node with load samples: the current concurrency level's live
 * figures (the load.* host samples: TTFT, TPOT and end-to-end latency
 * p50/p90/p99, concurrency and requests in flight, output tokens/s with
 * its sparkline, requests/s, errors by class, stalls).  Per node with
 * serve samples: the queue, the running requests, the tokens generated,
 * the paged KV cache's blocks (used, shared, cached, free, of all) and
 * preemptions, and each card's KV cache (kv.used against kv.budget).  Below, one row
 * per finished concurrency level (load's perf events): the table the
 * report's service section prints; with --baseline, each level's tokens/s
 * and e2e p99 against the baseline's level of the same stage and
 * concurrency.  All of it is the view's (view.h), so
 * live and replay draw the same.
 */
#include "tui.h"

#include <math.h>
#include <string.h>

/* "%.2f", or "-" when absent. */
static void ms(char *out, size_t max, double x)
{
	if (isnan(x))
		snprintf(out, max, "-");
	else
		snprintf(out, max, "%.2f", x);
}

static void cnt(char *out, size_t max, double x)
{
	if (isnan(x))
		snprintf(out, max, "-");
	else
		snprintf(out, max, "%.0f", x);
}

/* A node's load section; returns the next row. */
static int draw_load(struct tui *ui, const struct view_node *n, WINDOW *w,
		     int y, int rows, int cols)
{
	static const char *const lab[] = {"TTFT", "TPOT", "e2e"};
	static const int first[] = {SVC_TTFT_P50, SVC_TPOT_P50, SVC_E2E_P50};
	const double *s = n->svc;
	char a[24], b[24], c[24], d[24];
	int x;
	cnt(a, sizeof a, s[SVC_CONC]);
	cnt(b, sizeof b, s[SVC_INFLIGHT]);
	cnt(c, sizeof c, s[SVC_REQUESTS]);
	tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "load on %s  concurrency %s  in flight %s  requests %s",
		   n->name, a, b, c);
	if (y < rows)
		tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_DIM),
			   "  %-8s %10s %10s %10s", "latency", "p50 ms",
			   "p90 ms", "p99 ms");
	for (int i = 0; i < 3 && y < rows; i++) {
		ms(a, sizeof a, s[first[i]]);
		ms(b, sizeof b, s[first[i] + 1]);
		ms(c, sizeof c, s[first[i] + 2]);
		tui_printf(w, y++, 0, cols, A_NORMAL, "  %-8s %10s %10s %10s",
			   lab[i], a, b, c);
	}
	if (y >= rows)
		return y;
	ms(a, sizeof a, s[SVC_TPS]);
	ms(b, sizeof b, s[SVC_RPS]);
	x = tui_printf(w, y, 0, cols, A_NORMAL,
		       "  tokens/s %s  requests/s %s  ", a, b);
	if (n->tps_hist.n > 1 && cols - x > 4)
		tui_spark(ui, w, y, x, cols - x < 40 ? cols - x : 40,
			  &n->tps_hist, tui_attr(ui, ROLE_BAR));
	y++;
	if (y >= rows)
		return y;
	cnt(a, sizeof a, s[SVC_ERRORS]);
	cnt(b, sizeof b, s[SVC_STALLS]);
	{
		int bad = (!isnan(s[SVC_ERRORS]) && s[SVC_ERRORS] > 0) ||
			  (!isnan(s[SVC_STALLS]) && s[SVC_STALLS] > 0);
		x = tui_printf(w, y, 0, cols,
			       tui_attr(ui, bad ? ROLE_FAIL : ROLE_OK),
			       "  errors %s  stalls %s", a, b);
	}
	for (int i = 0; i < VIEW_SVC_NERR && x < cols; i++) {
		double e = s[SVC_ERR0 + i];
		if (isnan(e) || e <= 0)
			continue;
		snprintf(d, sizeof d, "%.0f", e);
		x += tui_printf(w, y, x, cols - x, tui_attr(ui, ROLE_FAIL),
				"  %s %s", view_svc_err_class(i), d);
	}
	return y + 1;
}

/* A node's serve section: queue, running, KV per card (the cards stop
 * at row `rows`: the levels' table keeps its rows below). */
static int draw_serve(struct tui *ui, const struct view_node *n, WINDOW *w,
		      int y, int rows, int cols)
{
	int shown = 0, kv = 0;
	const double *s = n->svc;
	char a[24], b[24], c[24];
	cnt(a, sizeof a, s[SVC_QUEUE]);
	cnt(b, sizeof b, s[SVC_RUNNING]);
	cnt(c, sizeof c, s[SVC_GEN_TOKENS]);
	tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "serve on %s  queue %s  running %s  tokens generated %s",
		   n->name, a, b, c);
	if (y < rows && !isnan(s[SVC_KV_TOTAL]) && s[SVC_KV_TOTAL] > 0) {
		/* the paged cache: blocks in use (of them shared by several
		 * sequences), cached prefixes, free, of all; preemptions */
		double used = s[SVC_KV_USED], tot = s[SVC_KV_TOTAL];
		double cached = isnan(s[SVC_KV_CACHED]) ? 0 : s[SVC_KV_CACHED];
		char d[24], e[24], f[24], g[24];
		int x, bw;
		cnt(a, sizeof a, used);
		cnt(b, sizeof b, s[SVC_KV_SHARED]);
		cnt(c, sizeof c, cached);
		cnt(d, sizeof d, isnan(used) ? NAN : tot - used - cached);
		cnt(e, sizeof e, tot);
		cnt(f, sizeof f, s[SVC_PREEMPTIONS]);
		snprintf(g, sizeof g, "%.0f%%", isnan(used) ? 0 : 100 * used / tot);
		x = tui_printf(w, y, 0, cols,
			       tui_attr(ui, !isnan(s[SVC_PREEMPTIONS]) &&
						    s[SVC_PREEMPTIONS] > 0
					    ? ROLE_WARN : ROLE_OK),
			       "  KV blocks %s used (%s shared)  %s cached  %s free  "
			       "of %s  %s  preemptions %s ", a, b, c, d, e, g, f);
		bw = cols - x < 40 ? cols - x : 40;
		if (bw > 4 && !isnan(used))
			tui_membar(ui, w, y, x, bw, used, NAN, tot, 0);
		y++;
	}
	for (int k = 0; k < n->ncards; k++)
		kv += n->cards[k].present && !isnan(n->cards[k].kv_used);
	for (int k = 0; k < n->ncards && y < rows; k++) {
		const struct view_card *d = &n->cards[k];
		int bw = cols - 38;
		if (!d->present || isnan(d->kv_used))
			continue;
		if (shown + 1 < kv && y == rows - 1) {
			tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_DIM),
				   "  ... %d more cards", kv - shown);
			break;
		}
		shown++;
		if (bw > 40)
			bw = 40;
		tui_bytes(d->kv_used, a, sizeof a);
		tui_bytes(d->kv_budget, b, sizeof b);
		int x = tui_printf(w, y, 0, cols, A_NORMAL,
				   "  card %-3d KV %8s of %8s ", k, a, b);
		if (bw > 4)
			tui_membar(ui, w, y, x, bw, d->kv_used, NAN,
				   d->kv_budget, 0);
		y++;
	}
	return y;
}

/* The baseline's level of the same stage and concurrency (its last). */
static const struct view_perf *base_level(const struct view *b,
					  const struct view_perf *p)
{
	if (!b)
		return NULL;
	for (size_t i = b->perf.n; i-- > 0;) {
		const struct view_perf *q = VIEW_AT(b->perf, i);
		if (q->concurrency == p->concurrency &&
		    !strcmp(q->stage_id, p->stage_id))
			return q;
	}
	return NULL;
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, y = 0, any = 0, skip = ui->scroll, wide, nlev = 0;
	char h[8][24];
	getmaxyx(w, rows, cols);
	for (size_t i = 0; i < v->perf.n; i++)
		nlev += VIEW_AT(v->perf, i)->concurrency >= 0;
	for (size_t i = 0; i < v->nnodes && y < rows; i++) {
		const struct view_node *n = &v->nodes[i];
		if (!n->has_svc)
			continue;
		if (!isnan(n->svc[SVC_CONC])) {
			y = draw_load(ui, n, w, y, rows, cols) + 1;
			any = 1;
		}
		if (y < rows && (!isnan(n->svc[SVC_QUEUE]) ||
				 !isnan(n->svc[SVC_RUNNING]))) {
			/* room for the levels' table: its head and rows */
			int keep = nlev ? (nlev < 6 ? nlev : 6) + 2 : 0;
			y = draw_serve(ui, n, w, y,
				       rows - keep > y + 2 ? rows - keep : y + 2,
				       cols) + 1;
			any = 1;
		}
	}
	if (nlev)
		any = 2;
	if (!any) {
		tui_put(w, 0, 0, cols, tui_attr(ui, ROLE_DIM),
			"no service figures yet (day0-engine serve, load "
			"--events)");
		return;
	}
	if (any < 2 || y >= rows)
		return;
	/* Under 140 columns the node and stage go (the rows stay whole). */
	wide = cols >= 140;
	tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "%s%5s %6s %5s %5s %8s %9s %8s %8s %8s %8s %8s %8s  %s",
		   wide ? "node         stage      " : "", "conc", "reqs", "err",
		   "stall", "req/s", "tok/s", "ttft50", "ttft99", "tpot50",
		   "tpot99", "e2e50", "e2e99", "errors by class");
	for (size_t i = 0; i < v->perf.n && y < rows; i++) {
		const struct view_perf *p = VIEW_AT(v->perf, i);
		int bad;
		if (p->concurrency < 0 || skip-- > 0)
			continue;
		ms(h[0], sizeof h[0], p->requests_per_s);
		ms(h[1], sizeof h[1], p->tokens_per_s);
		ms(h[2], sizeof h[2], p->ttft_p[0]);
		ms(h[3], sizeof h[3], p->ttft_p[2]);
		ms(h[4], sizeof h[4], p->tpot_p[0]);
		ms(h[5], sizeof h[5], p->tpot_p[2]);
		ms(h[6], sizeof h[6], p->e2e_p[0]);
		ms(h[7], sizeof h[7], p->e2e_p[2]);
		bad = p->errors > 0 || p->stalls > 0;
		char who[32] = "";
		if (wide)
			snprintf(who, sizeof who, "%-12.12s %-10.10s ", p->node,
				 p->stage_id);
		const struct view_perf *bp = base_level(ui->base, p);
		int x = tui_printf(w, y, 0, cols,
				   bad ? tui_attr(ui, ROLE_FAIL) : A_NORMAL,
				   "%s%5d %6lld %5lld %5lld %8s %9s "
				   "%8s %8s %8s %8s %8s %8s  %s",
				   who, p->concurrency,
				   (long long)p->requests, (long long)p->errors,
				   (long long)p->stalls, h[0], h[1], h[2], h[3],
				   h[4], h[5], h[6], h[7], p->classes);
		if (bp && x < cols) { /* --baseline: tok/s and e2e p99 */
			x += tui_put(w, y, x, cols - x, tui_attr(ui, ROLE_DIM),
				     "  tok/s");
			x += tui_delta(ui, w, y, x, cols - x, p->tokens_per_s,
				       bp->tokens_per_s, 1);
			if (x < cols)
				x += tui_put(w, y, x, cols - x,
					     tui_attr(ui, ROLE_DIM), " e2e99");
			tui_delta(ui, w, y, x, cols - x, p->e2e_p[2],
				  bp->e2e_p[2], 0);
		}
		y++;
	}
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	(void)v;
	switch (key) {
	case KEY_UP: if (ui->scroll > 0) ui->scroll--; return 1;
	case KEY_DOWN: ui->scroll++; return 1;
	case KEY_PPAGE: ui->scroll = ui->scroll > 10 ? ui->scroll - 10 : 0; return 1;
	case KEY_NPAGE: ui->scroll += 10; return 1;
	}
	return 0;
}

const struct tui_screen screen_service = {"Service", draw, on_key};
