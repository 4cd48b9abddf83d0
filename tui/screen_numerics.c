/*
 * screen_numerics.c - numerical validation: per op/layer the error against
 * the reference as a bar on a log scale (1e-8 .. 1), KL divergence and
 * top-1 agreement, the end-to-end perplexities; --baseline deltas on the
 * relative error.  Above them, once validate has checked text.generation:
 * the prompt and the run's greedy text beside the reference's.
 */
#include "tui.h"

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

static void draw_table(struct tui *ui, const struct view *v, WINDOW *w);

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, top;
	WINDOW *sub;
	getmaxyx(w, rows, cols);
	top = draw_text(ui, v, w, cols);
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
