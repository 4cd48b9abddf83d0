/*
 * screen_numerics.c - numerical validation: per op/layer the error against
 * the reference as a bar on a log scale (1e-8 .. 1), KL divergence and
 * top-1 agreement, the end-to-end perplexities; --baseline deltas on the
 * relative error.  Above them, once validate has checked text.generation:
 * the prompt and the run's greedy text beside the reference's; once
 * image-check has reported, the image channel's items and the TTFT split
 * of an image prompt (preprocess, encode, prefill); and, once
 * a fine-tuning run has reported steps (`train` events), its loss,
 * gradient norm, loss scale and step time as sparklines with the step
 * time split into forward, backward, optimizer and communication
 * (training.h: the same figures as the headless TRAINING table).
 */
#include "tui.h"
#include "training.h"

#include <math.h>
#include <string.h>

static const struct view_num *base_row(const struct view *b,
				       const struct view_num *x)
{
	if (!b)
		return NULL;
	for (size_t i = b->num.n; i-- > 0;) {
		const struct view_num *y = VIEW_AT(b->num, i);
		if (!strcmp(y->name, x->name) && !strcmp(y->level, x->level))
			return y;
	}
	return NULL;
}

static int later_same(const struct view *v, size_t i)
{
	const struct view_num *x = VIEW_AT(v->num, i);
	for (size_t k = i + 1; k < v->num.n; k++) {
		const struct view_num *y = VIEW_AT(v->num, k);
		if (!strcmp(y->name, x->name) && !strcmp(y->level, x->level) &&
		    !strcmp(y->node, x->node))
			return 1;
	}
	return 0;
}

/* "-" for a figure the row does not have (ops carry no KL/top-1). */
static void fig(char *out, size_t max, const char *fmt, double x)
{
	if (isnan(x))
		snprintf(out, max, "-");
	else
		snprintf(out, max, fmt, x);
}

/* The text block: prompt, run, reference; returns the rows it took. */
static int draw_text(struct tui *ui, const struct view *v, WINDOW *w,
		     int cols)
{
	const struct view_text *x = &v->text;
	enum tui_role r = x->agree == x->n ? ROLE_OK : ROLE_FAIL;
	if (!x->n)
		return 0;
	tui_printf(w, 0, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "text.generation  %d of %d greedy tokens equal the "
		   "reference's (%s)", x->agree, x->n, x->node);
	tui_printf(w, 1, 0, cols, A_NORMAL, "  prompt    %s", x->prompt);
	tui_printf(w, 2, 0, cols, tui_attr(ui, r), "  run       %s", x->text);
	tui_printf(w, 3, 0, cols, A_NORMAL, "  reference %s", x->ref_text);
	return 5;
}

/* The image channel (image-check's items, docs/multimodal.md): each
 * item's worst status, the first failing one's detail (or a text model's
 * "n/a" reason), and perf.image's TTFT split p50/p99 as bars of
 * P(reprocess) E(ncode) F(prefill), each part its share of the row.
 * Drawn from row y; returns the rows it took (0: no image evidence). */
static int draw_image(struct tui *ui, const struct view *v, WINDOW *w, int y,
		      int cols)
{
	static const char *const ids[4] = {"image.preprocess",
					   "image.features", "numerics.image",
					   "perf.image"};
	const struct view_image *im = &v->image;
	const struct view_check *why = NULL;
	int any = 0, x = 17, n0 = y;
	tui_printf(w, y, 0, cols, tui_attr(ui, ROLE_HEAD), "image channel");
	for (int i = 0; i < 4; i++) {
		enum check_status worst = CHECK_PASS;
		int has = 0;
		for (size_t k = 0; k < v->nchecks; k++) {
			const struct view_check *c = &v->checks[k];
			enum check_status st;
			if (strcmp(c->item, ids[i]))
				continue;
			st = check_status_parse(c->status, NULL);
			worst = has ? check_status_worst(worst, st) : st;
			has = 1;
			if ((st == CHECK_FAIL || !strncmp(c->detail, "n/a", 3)) &&
			    (!why || (st == CHECK_FAIL &&
				      strcmp(why->status, "fail"))))
				why = c;
		}
		/* the item's status as the Checklist screen and the
		 * verdict fold it (a declaring stage that ended without
		 * it: not run), not only the rows seen */
		const char *folded = view_item_status(v, ids[i]);
		if (!folded || (!has && !strcmp(folded, "pending")))
			continue;
		worst = check_status_parse(folded, NULL);
		any = 1;
		if (x < cols)
			tui_printf(w, y, x, cols - x,
				   tui_attr(ui, worst == CHECK_FAIL ? ROLE_FAIL
						: worst == CHECK_PASS ? ROLE_OK
								      : ROLE_WARN),
				   "%s %s", ids[i], check_status_name(worst));
		x += (int)strlen(ids[i]) + (int)strlen(check_status_name(worst)) + 3;
	}
	if (!any)
		return 0;
	y++;
	if (why)
		tui_printf(w, y++, 0, cols,
			   tui_attr(ui, strcmp(why->status, "fail") ? ROLE_DIM
								    : ROLE_FAIL),
			   "  %s: %s", why->item, why->detail);
	for (int k = 0; im->n && k < 2; k++) {
		double part[3] = {im->pre[k], im->enc[k], im->fill[k]},
		       sum = part[0] + part[1] + part[2];
		char bar[41];
		int o = 0;
		for (int j = 0; j < 3; j++) {
			int wd = sum > 0 ? (int)(part[j] / sum * 40 + 0.5) : 0;
			for (int c = 0; c < wd && o < 40; c++)
				bar[o++] = "PEF"[j];
		}
		bar[o] = 0;
		tui_printf(w, y, 0, cols, A_NORMAL, "  TTFT %s", k ? "p99" : "p50");
		tui_printf(w, y, 12, 40, tui_attr(ui, ROLE_BAR), "%-40s", bar);
		tui_printf(w, y++, 53, cols - 53, A_NORMAL,
			   "%.2f ms: preprocess %.2f, encode %.2f, prefill "
			   "%.2f (%s, %d images)",
			   im->ttft[k], part[0], part[1], part[2], im->node,
			   im->n);
	}
	return y - n0 + 1;
}

/* The text block, then the image channel's under it. */
static int draw_blocks(struct tui *ui, const struct view *v, WINDOW *w,
		       int cols)
{
	int t = draw_text(ui, v, w, cols);
	return t + draw_image(ui, v, w, t, cols);
}

/* A sparkline of m values scaled from their min to their max (a loss
 * curve falls from 10.4 to 9.8: from zero it would look flat), from the
 * left in n columns (m <= n); a skipped step is an 'x' (failure colour). */
static void spark_range(struct tui *ui, WINDOW *w, int y, int x, int n,
			const double *vals, const int *skipped, int m)
{
	double lo = NAN, hi = NAN;
	for (int i = 0; i < m; i++)
		if (!isnan(vals[i])) {
			if (isnan(lo) || vals[i] < lo)
				lo = vals[i];
			if (isnan(hi) || vals[i] > hi)
				hi = vals[i];
		}
	for (int k = 0; k < m && k < n; k++) {
		int i = k;
		if (skipped[k] || isnan(vals[k])) {
			tui_put(w, y, x + i, 1, tui_attr(ui, ROLE_FAIL),
				skipped[k] ? "x" : " ");
			continue;
		}
		int lvl = hi > lo ? (int)((vals[k] - lo) / (hi - lo) * 7 + 0.5)
				  : 3;
		tui_put(w, y, x + i, 1, tui_attr(ui, ROLE_BAR),
			ui->g->spark[lvl < 0 ? 0 : lvl > 7 ? 7 : lvl]);
	}
}

/* Columns kept after a sparkline for its figure ("4.2201 (first
 * 5.22143)"; a %.6g number is at most 12 columns). */
#define TRAIN_VALUE_COLS 36

/* One figure's line: label, sparkline, the text after it. */
static void train_line(struct tui *ui, const struct view *v, WINDOW *w,
		       int y, int cols, const struct training_run *r,
		       enum training_fig fig, const char *label,
		       const char *text, enum tui_role role)
{
	double vals[64];
	int skipped[64], sw = cols - 14 - TRAIN_VALUE_COLS, m;
	if (sw > 64)
		sw = 64;
	if (sw < 8)
		sw = 8;
	m = training_series(v, r, fig, vals, skipped, sw);
	tui_printf(w, y, 0, cols, A_NORMAL, "  %-11s", label);
	spark_range(ui, w, y, 14, sw, vals, skipped, m);
	tui_printf(w, y, 14 + sw + 1, cols - 15 - sw, tui_attr(ui, role),
		   "%s", text);
}

/* The fine-tuning block: the latest run's curves, the others one line
 * each (newest first); returns the rows it took (0: no training). */
static int draw_training(struct tui *ui, const struct view *v, WINDOW *w,
			 int rows, int cols)
{
	struct training_run runs[TRAINING_RUNS];
	int n = training_runs(v, runs, TRAINING_RUNS), order[TRAINING_RUNS];
	int y = 0;
	char t[160], split[96];
	if (!n || rows < 5)
		return 0;
	/* Newest first (by their last step): the first is drawn whole. */
	for (int k = 0; k < n; k++) {
		int j = k;
		while (j > 0 && runs[order[j - 1]].last_ts < runs[k].last_ts) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
	}
	const struct training_run *r = &runs[order[0]];
	if (r->skipped)
		snprintf(t, sizeof t, ", %d skipped (first: step %lld)",
			 r->skipped, (long long)r->first_skipped);
	else
		t[0] = 0;
	tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "TRAINING %s on %s rank %d  %s  steps %lld..%lld (%d%s)",
		   r->stage_id, r->node, r->rank, r->layout,
		   (long long)r->first_step, (long long)r->last_step, r->steps,
		   t);
	char a[24], b[24];
	training_num(r->loss_last, "%.6g", a, sizeof a);
	training_num(r->loss_first, "%.6g", b, sizeof b);
	snprintf(t, sizeof t, "%s (first %s)", a, b);
	train_line(ui, v, w, y++, cols, r, TF_LOSS, "loss", t, ROLE_NORMAL);
	training_num(r->grad_norm_last, "%.6g", t, sizeof t);
	train_line(ui, v, w, y++, cols, r, TF_GRAD_NORM, "grad norm", t,
		   ROLE_NORMAL);
	training_num(r->scale_last, "%.6g", a, sizeof a);
	training_num(r->scale_min, "%.6g", b, sizeof b);
	snprintf(t, sizeof t, "%s (min %s)", a, b);
	train_line(ui, v, w, y++, cols, r, TF_LOSS_SCALE, "loss scale", t,
		   r->scale_min < r->scale_first ? ROLE_WARN : ROLE_NORMAL);
	training_num(r->step_s, "%.4g", a, sizeof a);
	snprintf(t, sizeof t, "%s s", a);
	train_line(ui, v, w, y++, cols, r, TF_STEP_S, "step time", t,
		   ROLE_NORMAL);
	training_split(r, split, sizeof split);
	tui_printf(w, y++, 0, cols, A_NORMAL, "  %-11s %s  (mean of %d steps)",
		   "split", split, r->timed);
	/* The other runs, one line each, while rows are left (one kept for
	 * the gap below). */
	for (int k = 1; k < n && y < rows - 1; k++) {
		r = &runs[order[k]];
		char c[24];
		training_num(r->loss_first, "%.6g", a, sizeof a);
		training_num(r->loss_last, "%.6g", b, sizeof b);
		training_num(r->step_s, "%.4g", c, sizeof c);
		tui_printf(w, y++, 0, cols, A_NORMAL,
			   "  %s on %s  %s  %d steps, %d skipped  loss %s -> %s"
			   "  step %s s",
			   r->stage_id, r->node, r->layout, r->steps,
			   r->skipped, a, b, c);
	}
	return y + 1;
}

static void draw_table(struct tui *ui, const struct view *v, WINDOW *w);

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, top;
	WINDOW *sub;
	getmaxyx(w, rows, cols);
	top = draw_training(ui, v, w, rows, cols);
	if (top && !v->num.n && !v->text.n && !v->image.n)
		return;
	if (top) {
		WINDOW *rest = rows > top + 2
				   ? derwin(w, rows - top, cols, top, 0)
				   : NULL;
		if (rest) {
			int t2 = draw_blocks(ui, v, rest, cols);
			WINDOW *tb = t2 && rows - top > t2 + 2
					 ? derwin(rest, rows - top - t2, cols,
						  t2, 0)
					 : NULL;
			draw_table(ui, v, tb ? tb : rest);
			if (tb)
				delwin(tb);
			delwin(rest);
		}
		return;
	}
	top = draw_blocks(ui, v, w, cols);
	if (!top || rows <= top + 2) {
		draw_table(ui, v, w);
		return;
	}
	sub = derwin(w, rows - top, cols, top, 0);
	if (!sub) {
		draw_table(ui, v, w);
		return;
	}
	draw_table(ui, v, sub);
	delwin(sub);
}

static void draw_table(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, y = 1;
	getmaxyx(w, rows, cols);
	if (!v->num.n) {
		tui_put(w, 0, 0, cols, tui_attr(ui, ROLE_DIM),
			"no numerics results yet (day0-engine validate)");
		return;
	}
	/* Names whole: as wide as the longest, the bar takes what is left
	 * (at least 8 columns; a name is cut only then). */
	int namew = 4;
	for (size_t i = 0; i < v->num.n; i++) {
		int l = (int)strlen(VIEW_AT(v->num, i)->name);
		if (l > namew)
			namew = l;
	}
	const int fixed = 6 + 1 + 10 + 10 + 9 + 7; /* level, spaces, figures */
	if (namew > cols - fixed - 8)
		namew = cols - fixed - 8 > 8 ? cols - fixed - 8 : 8;
	int barw = cols - namew - fixed;
	if (barw < 4)
		barw = 4;
	if (barw > 40)
		barw = 40;
	tui_printf(w, 0, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "%-5s %-*s %-*s %9s %9s %8s %6s", "level", namew, "name",
		   barw, barw >= 21 ? "max_rel (log 1e-8..1)" : "max_rel",
		   "max_rel", "kl", "top-1", "");
	int skip = ui->scroll;
	for (size_t i = 0; i < v->num.n && y < rows; i++) {
		const struct view_num *x = VIEW_AT(v->num, i);
		char kl[16], top1[16];
		if (later_same(v, i) || skip-- > 0)
			continue;
		double e = !isnan(x->max_rel) ? x->max_rel : x->max_abs;
		double lg = e > 0 ? log10(e) : -8;
		if (lg < -8)
			lg = -8;
		if (lg > 0)
			lg = 0;
		int fill = isnan(e) ? 0 : (int)((lg + 8) / 8 * barw + 0.5);
		enum tui_role r = e > 1e-2 ? ROLE_FAIL : e > 1e-3 ? ROLE_WARN : ROLE_OK;
		int c = tui_printf(w, y, 0, cols, A_NORMAL, "%-5s %-*.*s ",
				   x->level, namew, namew, x->name);
		for (int k = 0; k < barw; k++)
			tui_put(w, y, c + k, 1,
				tui_attr(ui, k < fill ? r : ROLE_DIM),
				k < fill ? ui->g->full : ui->g->empty);
		c += barw;
		if (isnan(e))
			c += tui_printf(w, y, c, cols - c, A_NORMAL, " %9s", "-");
		else if (isnan(x->max_rel)) /* no relative error: the
					     * absolute one, marked so (probe's
					     * log-probabilities) */
			c += tui_printf(w, y, c, cols - c, tui_attr(ui, r),
					" %7.1e a", e);
		else
			c += tui_printf(w, y, c, cols - c, tui_attr(ui, r),
					" %9.2e", e);
		fig(kl, sizeof kl, "%.2e", x->kl);
		fig(top1, sizeof top1, "%.1f%%", x->top1); /* a percentage */
		c += tui_printf(w, y, c, cols - c, A_NORMAL, " %9s %8s", kl,
				top1);
		if (!isnan(x->ppl))
			c += tui_printf(w, y, c, cols - c, A_NORMAL,
					"  ppl %.4g (ref %.4g)", x->ppl,
					x->ppl_ref);
		const struct view_num *b = base_row(ui->base, x);
		if (b)
			tui_delta(ui, w, y, c, cols - c, x->max_rel, b->max_rel,
				  0);
		y++;
	}
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

const struct tui_screen screen_numerics = {"Numerics", draw, on_key};
