/*
 * tui.c - the ncurses front: terminal set-up, colours (or attributes on
 * monochrome terminals and under NO_COLOR), glyphs (UTF-8 or --ascii),
 * the frame around the screens (header, tabs, timeline, bottom line),
 * global keys, prompts, help, and redraw timing.
 */
#include "tui.h"
#include "fit.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "console.h"

const struct tui_screen *const tui_screens[] = {
    &screen_overview, &screen_cards, &screen_comm, &screen_checklist,
    &screen_numerics, &screen_plan,  &screen_log,  &screen_service,
    &screen_hosts,
};


static const struct tui_glyphs glyphs_utf8 = {
    "\u2500", "\u2502", "\u2588", "\u258c", "\u00b7", "\u2503", "\u2595",
    "\u25c6", "\u25b2", "\u2716", "\u2714", "\u2718",
    {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587",
     "\u2588"},
};
static const struct tui_glyphs glyphs_ascii = {
    "-", "|", "#", "=", ".", "|", "]", "@", "M", "X", "+", "x",
    {"_", ".", ",", "-", "~", "=", "*", "#"},
};

int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

int tui_start(struct tui *ui, int ascii, int no_color)
{
	const char *nc = getenv("NO_COLOR");
	setlocale(LC_ALL, "");
	ui->ascii = ascii;
	ui->g = ascii ? &glyphs_ascii : &glyphs_utf8;
	if (!initscr())
		return -1;
	cbreak();
	noecho();
	nonl();
	keypad(stdscr, TRUE);
	curs_set(0);
	set_escdelay(25);
	ui->color = !no_color && !(nc && *nc) && has_colors();
	if (ui->color) {
		start_color();
		use_default_colors();
		init_pair(ROLE_OK, COLOR_GREEN, -1);
		init_pair(ROLE_WARN, COLOR_YELLOW, -1);
		init_pair(ROLE_FAIL, COLOR_RED, -1);
		init_pair(ROLE_HEAD, COLOR_CYAN, -1);
		init_pair(ROLE_DIM, COLORS >= 16 ? 8 : COLOR_WHITE, -1);
		init_pair(ROLE_SEL, COLOR_BLACK, COLOR_CYAN);
		init_pair(ROLE_MARK, COLOR_MAGENTA, -1);
		init_pair(ROLE_BAR, COLOR_BLUE, -1);
	}
	ui->t_start_ns = mono_ns();
	ui->cpu_start_s = cpu_s();
	if (ui->speed == 0)
		ui->speed = 1;
	return 0;
}

void tui_end(struct tui *ui)
{
	/* draw_ms stays for tui_write_stats(); the caller frees it. */
	if (!isendwin())
		endwin();
}

attr_t tui_attr(const struct tui *ui, enum tui_role r)
{
	if (ui->color) {
		switch (r) {
		case ROLE_NORMAL: return A_NORMAL;
		case ROLE_HEAD: return COLOR_PAIR(ROLE_HEAD) | A_BOLD;
		case ROLE_FAIL: return COLOR_PAIR(ROLE_FAIL) | A_BOLD;
		case ROLE_DIM: return COLOR_PAIR(ROLE_DIM) | A_DIM;
		default: return COLOR_PAIR(r);
		}
	}
	switch (r) {
	case ROLE_WARN: return A_BOLD;
	case ROLE_FAIL: return A_BOLD | A_REVERSE;
	case ROLE_HEAD: return A_BOLD;
	case ROLE_DIM: return A_DIM;
	case ROLE_SEL: return A_REVERSE;
	case ROLE_MARK: return A_BOLD;
	default: return A_NORMAL;
	}
}

/* ----------------------------------------------------------------- helpers */

/* Columns of a UTF-8 string (every glyph here is one column). */
static int u8len(const char *s, int maxcols, size_t *bytes)
{
	int cols = 0;
	const unsigned char *p = (const unsigned char *)s;
	while (*p && cols < maxcols) {
		int n = *p < 0x80 ? 1 : *p < 0xe0 ? 2 : *p < 0xf0 ? 3 : 4;
		for (int i = 1; i < n; i++)
			if (!p[i]) {
				n = i;
				break;
			}
		p += n;
		cols++;
	}
	if (bytes)
		*bytes = (size_t)(p - (const unsigned char *)s);
	return cols;
}

int tui_put(WINDOW *w, int y, int x, int n, attr_t a, const char *s)
{
	size_t bytes;
	int maxy, maxx, cols;
	getmaxyx(w, maxy, maxx);
	if (y < 0 || y >= maxy || x < 0 || x >= maxx || n <= 0)
		return 0;
	if (n > maxx - x)
		n = maxx - x;
	cols = u8len(s, n, &bytes);
	wattr_set(w, a, PAIR_NUMBER(a), NULL);
	mvwaddnstr(w, y, x, s, (int)bytes);
	wattr_set(w, A_NORMAL, 0, NULL);
	return cols;
}

int tui_printf(WINDOW *w, int y, int x, int n, attr_t a, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return tui_put(w, y, x, n, a, buf);
}

void tui_bytes(double b, char *out, size_t max)
{
	static const char *const u[] = {"B", "K", "M", "G", "T", "P"};
	int i = 0;
	if (isnan(b)) {
		snprintf(out, max, "-");
		return;
	}
	while (fabs(b) >= 1024 && i < 5) {
		b /= 1024;
		i++;
	}
	snprintf(out, max, fabs(b) >= 100 || i == 0 ? "%.0f%s" : "%.1f%s", b,
		 u[i]);
}

void tui_rate(double bps, char *out, size_t max)
{
	char b[16];
	tui_bytes(bps, b, sizeof b);
	snprintf(out, max, "%s/s", b);
}

void tui_dur(int64_t ns, char *out, size_t max)
{
	int64_t s = ns / 1000000000LL;
	if (ns < 0)
		ns = 0, s = 0;
	if (s < 60)
		snprintf(out, max, "%.1fs", (double)ns / 1e9);
	else if (s < 3600)
		snprintf(out, max, "%d:%02d", (int)(s / 60), (int)(s % 60));
	else
		snprintf(out, max, "%d:%02d:%02d", (int)(s / 3600),
			 (int)(s / 60 % 60), (int)(s % 60));
}

enum tui_role tui_mem_role(double used, double budget)
{
	if (isnan(used) || isnan(budget) || budget <= 0)
		return ROLE_NORMAL;
	double f = used / budget;
	return f > 0.9 ? ROLE_FAIL : f > 0.75 ? ROLE_WARN : ROLE_OK;
}

enum tui_role tui_status_role(const char *s)
{
	if (!strcmp(s, "pass"))
		return ROLE_OK;
	if (!strcmp(s, "warn") || !strcmp(s, "not run"))
		return ROLE_WARN;
	if (!strcmp(s, "fail"))
		return ROLE_FAIL;
	if (!strcmp(s, "running"))
		return ROLE_HEAD;
	return ROLE_DIM;
}

void tui_membar(struct tui *ui, WINDOW *w, int y, int x, int n, double used,
		double peak, double budget, int dim)
{
	const struct tui_glyphs *g = ui->g;
	attr_t a = tui_attr(ui, dim ? ROLE_DIM : tui_mem_role(used, budget));
	double top = budget > 0 ? budget : (peak > used ? peak : used);
	int fill = 0, pk = -1;
	if (n <= 0)
		return;
	if (n == 1) {
		/* One column: an eighths glyph of the fraction used. */
		int k = top > 0 && !isnan(used) ? (int)(used / top * 8) : 0;
		if (k > 7)
			k = 7;
		tui_put(w, y, x, 1, a, isnan(used) ? g->empty : g->spark[k]);
		return;
	}
	if (top > 0 && !isnan(used))
		fill = (int)(used / top * n + 0.5);
	if (fill > n)
		fill = n;
	if (top > 0 && !isnan(peak) && peak > 0)
		pk = (int)(peak / top * n);
	if (pk >= n)
		pk = n - 1;
	/* Three runs (used, peak mark, rest), each one string: a bar per
	 * card on 1024 cards is thousands of glyphs a frame. */
	char run[512];
	size_t gl = strlen(g->full), el = strlen(g->empty);
	int x0 = x, k;
	if (n * (int)(gl > el ? gl : el) >= (int)sizeof run)
		n = (int)(sizeof run / (gl > el ? gl : el)) - 1;
	if (fill > n)
		fill = n;
	run[0] = 0;
	for (k = 0; k < fill; k++)
		memcpy(run + k * gl, g->full, gl + 1);
	x += tui_put(w, y, x, fill, a, run);
	if (pk >= fill) {
		for (k = fill; k < pk; k++)
			memcpy(run + (k - fill) * el, g->empty, el + 1);
		if (pk > fill)
			x += tui_put(w, y, x, pk - fill, tui_attr(ui, ROLE_DIM), run);
		x += tui_put(w, y, x, 1, tui_attr(ui, dim ? ROLE_DIM : ROLE_MARK),
			     g->peak);
	}
	run[0] = 0;
	for (k = x - x0; k < n; k++)
		memcpy(run + (k - (x - x0)) * el, g->empty, el + 1);
	if (x - x0 < n)
		tui_put(w, y, x, n - (x - x0), tui_attr(ui, ROLE_DIM), run);
}

void tui_spark(struct tui *ui, WINDOW *w, int y, int x, int n,
	       const struct view_ring *r, attr_t a)
{
	double mx = 0;
	int k0 = r->n > n ? r->n - n : 0;
	for (int i = k0; i < r->n; i++) {
		double val = view_ring_get(r, i);
		if (!isnan(val) && val > mx)
			mx = val;
	}
	char run[8 * 64 + 1];
	size_t off = 0;
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++) {
		int k = k0 + i - (n - (r->n - k0));
		const char *gl = " ";
		if (k >= k0 && k < r->n) {
			double val = view_ring_get(r, k);
			int lvl = mx > 0 && !isnan(val) ? (int)(val / mx * 7 + 0.5)
							: 0;
			gl = ui->g->spark[lvl < 0 ? 0 : lvl > 7 ? 7 : lvl];
		}
		size_t l = strlen(gl);
		memcpy(run + off, gl, l);
		off += l;
	}
	run[off] = 0;
	tui_put(w, y, x, n, a, run);
}

void tui_fold_name(const char *first, const char *last, char *out,
		   size_t max)
{
	size_t p = 0, lf = strlen(first), ll = strlen(last);
	/* Common prefix without digits at its end. */
	while (p < lf && p < ll && first[p] == last[p])
		p++;
	while (p > 0 && first[p - 1] >= '0' && first[p - 1] <= '9')
		p--;
	if (!strcmp(first, last))
		snprintf(out, max, "%s", first);
	else
		snprintf(out, max, "%.*s[%s-%s]", (int)p, first, first + p,
			 last + p);
}

/* ------------------------------------------------------------------- frame */

static void draw_header(struct tui *ui, const struct view *v)
{
	char el[32], buf[512];
	int x = 0;
	const struct view_stage *cur = view_current_stage(v);
	attr_t h = tui_attr(ui, ROLE_HEAD);
	move(0, 0);
	clrtoeol();
	x += tui_printf(stdscr, 0, x, COLS - x, h, "day0 %s",
			*v->name ? v->name : "session");
	tui_dur(view_elapsed(v), el, sizeof el);
	if (*v->model) {
		/* The path keeps its end (the model's name, fit_name) and
		 * leaves room for the clock, the stage and the verdict. */
		int room = COLS - x - 8 - 10 - (int)strlen(el) -
			   (cur ? 14 + (int)strlen(cur->id) : 0) -
			   (v->verdict >= 0 ? 7 : 0);
		char m[256];
		if (room >= 12) {
			fit_name(v->model, room, ui->ascii ? "..." : "\u2026", m,
				 sizeof m);
			x += tui_printf(stdscr, 0, x, COLS - x, A_NORMAL,
					"  model %s", m);
		}
	}
	if (*v->playbook && strcmp(v->playbook, v->name))
		x += tui_printf(stdscr, 0, x, COLS - x, A_NORMAL,
				"  playbook %s", v->playbook);
	if (v->sim_nodes)
		x += tui_printf(stdscr, 0, x, COLS - x,
				tui_attr(ui, ROLE_FAIL), "  SIMULATED (%d nodes)",
				v->sim_nodes);
	snprintf(buf, sizeof buf, "  elapsed %s", el);
	if (x + (int)strlen(buf) <= COLS)
		x += tui_put(stdscr, 0, x, COLS - x, A_NORMAL, buf);
	if (cur) {
		/* The agents' progress (the console's stage events carry
		 * none while the stage runs). */
		int64_t eta;
		double p = view_stage_progress(v, cur, &eta);
		/* Each figure whole or not at all (never "ET" or "1"). */
		snprintf(buf, sizeof buf, "  stage %s %.0f%%", cur->id, p * 100);
		if (x + (int)strlen(buf) <= COLS)
			x += tui_put(stdscr, 0, x, COLS - x,
				     tui_attr(ui, ROLE_OK), buf);
		if (eta >= 0) {
			tui_dur(eta, el, sizeof el);
			snprintf(buf, sizeof buf, " ETA %s", el);
			if (x + (int)strlen(buf) <= COLS)
				x += tui_put(stdscr, 0, x, COLS - x, A_NORMAL,
					     buf);
		}
	}
	if (v->verdict >= 0)
		tui_put(stdscr, 0, x, COLS - x,
			tui_attr(ui, v->verdict ? ROLE_OK : ROLE_FAIL),
			v->verdict ? "  GO" : "  NO-GO");
	else if (v->held)
		tui_put(stdscr, 0, x, COLS - x, tui_attr(ui, ROLE_FAIL),
			"  ENDED WITH FAILURES: r reruns a failed stage, q ends "
			"the run");
}

/* The replay clock ("t=12.5s/59.0s x1 PAUSED"); "" live. */
static void replay_clock(const struct tui *ui, const struct view *v, char *b,
			 size_t max)
{
	char at[32], tot[32];
	b[0] = 0;
	if (!ui->replay)
		return;
	tui_dur(v->t - ui->first, at, sizeof at);
	tui_dur(ui->last - ui->first, tot, sizeof tot);
	snprintf(b, max, "t=%s/%s x%g %s%s", at, tot, ui->speed,
		 ui->paused ? "PAUSED" : "PLAY", ui->follow ? " follow" : "");
}

static void draw_tabs(struct tui *ui, const struct view *v)
{
	static const int cut[] = {64, 5, 3, 0}; /* name lengths, widest first */
	char clock[128];
	int x = 0, room, len = 0;
	move(1, 0);
	clrtoeol();
	/* The replay clock keeps its place; the tabs' names shorten until
	 * they fit beside it (numbers alone at the narrowest). */
	replay_clock(ui, v, clock, sizeof clock);
	room = COLS - (clock[0] ? (int)strlen(clock) + 1 : 0);
	for (int k = 0; k < 4; k++) {
		int need = 0;
		len = cut[k];
		for (int i = 0; i < TUI_NSCREENS; i++) {
			int l = (int)strlen(tui_screens[i]->name);
			need += (i + 1 >= 10 ? 2 : 1) + (len ? 1 : 0) +
				(l < len ? l : len) + 1;
		}
		if (need <= room)
			break;
	}
	for (int i = 0; i < TUI_NSCREENS; i++) {
		char b[80];
		if (len)
			snprintf(b, sizeof b, "%d %.*s", i + 1, len,
				 tui_screens[i]->name);
		else
			snprintf(b, sizeof b, "%d", i + 1);
		x += tui_put(stdscr, 1, x, COLS - x,
			     tui_attr(ui, i == ui->screen ? ROLE_SEL : ROLE_NORMAL),
			     b);
		x += tui_put(stdscr, 1, x, COLS - x, A_NORMAL, " ");
	}
	if (clock[0]) {
		int n = (int)strlen(clock);
		tui_put(stdscr, 1, COLS - n > x ? COLS - n : x, COLS - x,
			tui_attr(ui, ROLE_HEAD), clock);
	}
}

static void draw_timeline(struct tui *ui, const struct view *v, int y)
{
	int w = COLS - 2;
	const struct tui_glyphs *g = ui->g;
	double span = (double)(ui->last - ui->first);
	move(y, 0);
	clrtoeol();
	if (w < 4)
		return;
	tui_put(stdscr, y, 0, 1, A_NORMAL, "[");
	for (int i = 0; i < w; i++)
		tui_put(stdscr, y, 1 + i, 1, tui_attr(ui, ROLE_DIM), g->hline);
	for (size_t i = 0; i < ui->nmarks; i++) {
		const struct view_mark *m = &ui->marks[i];
		int x = span > 0 ? (int)((double)(m->ts - ui->first) / span *
					 (w - 1))
				 : 0;
		tui_put(stdscr, y, 1 + x, 1,
			tui_attr(ui, m->kind == VIEW_FAILURE ? ROLE_FAIL : ROLE_MARK),
			m->kind == VIEW_FAILURE ? g->failure : g->marker);
	}
	int cx = span > 0 ? (int)((double)(v->t - ui->first) / span * (w - 1))
			  : 0;
	if (cx < 0)
		cx = 0;
	if (cx > w - 1)
		cx = w - 1;
	tui_put(stdscr, y, 1 + cx, 1, tui_attr(ui, ROLE_HEAD), g->cursor);
	tui_put(stdscr, y, COLS - 1, 1, A_NORMAL, "]");
}

static const char *const help_text[] = {
    "day0 console keys",
    "",
    "  ?          this help (any key closes it)",
    "  1-8, Tab   screens: Overview Cards Comm Checklist Numerics Plan Log",
    "             Service",
    "  Up/Down PgUp/PgDn   move, scroll     Enter  drill into a node",
    "  /          filter (Log)              Esc  clear",
    "  e          Overview: the first failing item's whole evidence",
    "  a          cancel the running stage (asks y/n)",
    "  r          rerun the failed stage",
    "  m          add a marker with a note",
    "  q          quit (asks y/n while running)",
    "",
    "replay:",
    "  space      pause / play              Left/Right  1 s",
    "  , .        10 s (also Shift-Left/Right)",
    "  [ ]        previous / next marker or failure",
    "  + -        speed                     g G  start / end",
    NULL,
};

static void draw_help(struct tui *ui)
{
	int n = 0, wmax = 0;
	while (help_text[n]) {
		int l = (int)strlen(help_text[n]);
		if (l > wmax)
			wmax = l;
		n++;
	}
	int y0 = (LINES - n) / 2, x0 = (COLS - wmax - 4) / 2;
	if (y0 < 0)
		y0 = 0;
	if (x0 < 0)
		x0 = 0;
	for (int i = -1; i <= n; i++) {
		move(y0 + i, x0);
		for (int k = 0; k < wmax + 4 && x0 + k < COLS; k++)
			addch(' ' | A_REVERSE);
		if (i >= 0 && i < n)
			tui_put(stdscr, y0 + i, x0 + 2, COLS - x0 - 2,
				A_REVERSE | (i == 0 ? A_BOLD : 0), help_text[i]);
	}
}

static void draw_bottom(struct tui *ui, int y)
{
	move(y, 0);
	clrtoeol();
	if (ui->mode == UI_PROMPT)
		tui_printf(stdscr, y, 0, COLS, tui_attr(ui, ROLE_HEAD), "%s%s_",
			   ui->input_filter ? "filter: " : "marker note: ",
			   ui->input);
	else if (ui->mode == UI_CONFIRM)
		tui_printf(stdscr, y, 0, COLS, tui_attr(ui, ROLE_WARN),
			   "%s? (y/n)", ui->status);
	else if (*ui->status)
		tui_put(stdscr, y, 0, COLS, A_NORMAL, ui->status);
	else
		tui_put(stdscr, y, 0, COLS, tui_attr(ui, ROLE_DIM),
			ui->replay ? "? help  q quit  space pause  <- -> seek  "
				     "[ ] marks  + - speed  g G ends"
				   : "? help  q quit  1-8 screens  a cancel  r "
				     "rerun  m marker");
}

/* This thread's CPU time, ns. */
static int64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void tui_draw(struct tui *ui, const struct view *v)
{
	int64_t t0 = mono_ns(), c0 = thread_cpu_ns();
	int bottom = LINES - 1;
	int body_end = ui->replay ? LINES - 2 : LINES - 1;
	erase();
	if (LINES < 6 || COLS < 20) {
		tui_put(stdscr, 0, 0, COLS, A_BOLD, "day0: window too small");
	} else {
		draw_header(ui, v);
		draw_tabs(ui, v);
		WINDOW *w = derwin(stdscr, body_end - 2, COLS, 2, 0);
		if (w) {
			tui_screens[ui->screen]->draw(ui, v, w);
			delwin(w);
		}
		if (ui->replay)
			draw_timeline(ui, v, LINES - 2);
		draw_bottom(ui, bottom);
		if (ui->mode == UI_HELP)
			draw_help(ui);
	}
	wnoutrefresh(stdscr);
	doupdate();
	if (ui->ndraw == ui->capdraw) {
		size_t nc = ui->capdraw ? ui->capdraw * 2 : 4096;
		double *na = realloc(ui->draw_ms, 2 * nc * sizeof *na);
		if (!na)
			return;
		ui->draw_ms = na;
		ui->capdraw = nc;
	}
	/* wall time (what the operator waits), then the CPU time it took:
	 * on a loaded machine the first includes the scheduler's delays and
	 * the terminal's (a pty write blocks while tmux is not scheduled) */
	ui->draw_ms[2 * ui->ndraw] = (double)(mono_ns() - t0) / 1e6;
	ui->draw_ms[2 * ui->ndraw + 1] = (double)(thread_cpu_ns() - c0) / 1e6;
	ui->ndraw++;
}

/* -------------------------------------------------------------------- keys */

static void confirm(struct tui *ui, enum tui_act act, const char *arg,
		    const char *fmt)
{
	ui->mode = UI_CONFIRM;
	ui->pending = act;
	snprintf(ui->pending_arg, sizeof ui->pending_arg, "%s", arg);
	snprintf(ui->status, sizeof ui->status, fmt, arg);
}

static const struct view_stage *failed_stage(const struct view *v)
{
	const struct view_stage *best = NULL;
	for (int pass = 0; pass < 2 && !best; pass++)
		for (size_t i = 0; i < v->nstages; i++) {
			const struct view_stage *s = &v->stages[i];
			if ((pass == 0) != !strcmp(s->node, CONSOLE_NODE))
				continue;
			if (!strcmp(s->state, "end") && s->has_rc && s->rc &&
			    !view_stage_superseded(v, s) &&
			    (!best || s->ts >= best->ts))
				best = s;
		}
	return best;
}

enum tui_act tui_key(struct tui *ui, const struct view *v, int key,
		     const char **arg)
{
	*arg = NULL;
	if (key == ERR)
		return ACT_NONE;
	if (ui->mode == UI_HELP) {
		ui->mode = UI_NORMAL;
		return ACT_NONE;
	}
	if (ui->mode == UI_CONFIRM) {
		enum tui_act act = ui->pending;
		ui->mode = UI_NORMAL;
		ui->pending = ACT_NONE;
		if (key == 'y' || key == 'Y') {
			/* Say what was sent (the question's own words), not a
			 * bare word that outlives its context. */
			char q[sizeof ui->status];
			snprintf(q, sizeof q, "%s", ui->status);
			if (act == ACT_QUIT)
				snprintf(ui->status, sizeof ui->status,
					 "quitting");
			else
				snprintf(ui->status, sizeof ui->status,
					 "sent: %.200s (any key: the key hints)",
					 q);
			*arg = ui->pending_arg;
			return act;
		}
		ui->status[0] = 0;
		return ACT_NONE;
	}
	if (ui->mode == UI_PROMPT) {
		size_t n = strlen(ui->input);
		if (key == 27) {
			ui->mode = UI_NORMAL;
			ui->input[0] = 0;
			if (ui->input_filter)
				ui->filter[0] = 0;
		} else if (key == '\r' || key == '\n' || key == KEY_ENTER) {
			ui->mode = UI_NORMAL;
			if (ui->input_filter) {
				snprintf(ui->filter, sizeof ui->filter, "%s",
					 ui->input);
				ui->input[0] = 0;
				ui->scroll = 0;
				return ACT_NONE;
			}
			if (n) {
				snprintf(ui->pending_arg,
					 sizeof ui->pending_arg, "%s",
					 ui->input);
				snprintf(ui->status, sizeof ui->status,
					 "marker added: %.200s", ui->input);
				ui->input[0] = 0;
				*arg = ui->pending_arg;
				return ACT_MARKER;
			}
		} else if (key == KEY_BACKSPACE || key == 127 || key == 8) {
			if (n)
				ui->input[n - 1] = 0;
		} else if (key >= 32 && key < 256 && n + 1 < sizeof ui->input &&
			   n + 1 < sizeof ui->filter) {
			ui->input[n] = (char)key;
			ui->input[n + 1] = 0;
		}
		if (ui->input_filter)
			snprintf(ui->filter, sizeof ui->filter, "%s",
				 ui->input);
		return ACT_NONE;
	}
	ui->status[0] = 0;
	switch (key) {
	case '?':
		ui->mode = UI_HELP;
		return ACT_NONE;
	case '\t':
		ui->screen = (ui->screen + 1) % TUI_NSCREENS;
		ui->scroll = 0;
		return ACT_NONE;
	case KEY_BTAB:
		ui->screen = (ui->screen + TUI_NSCREENS - 1) % TUI_NSCREENS;
		ui->scroll = 0;
		return ACT_NONE;
	case 'q':
		/* held (every stage ended, one failed): q ends it with its
		 * verdict, nothing left to stop, no question (docs/tui.md) */
		if (ui->running && !v->held) {
			confirm(ui, ACT_QUIT, "", "quit and stop the run%s");
			return ACT_NONE;
		}
		return ACT_QUIT;
	case 'a': {
		const struct view_stage *s = view_current_stage(v);
		if (ui->replay)
			snprintf(ui->status, sizeof ui->status,
				 "replay: read-only");
		else if (!s)
			snprintf(ui->status, sizeof ui->status,
				 "no stage is running");
		else
			confirm(ui, ACT_CANCEL, s->id, "cancel stage %s");
		return ACT_NONE;
	}
	case 'r': {
		const struct view_stage *s = failed_stage(v);
		if (ui->replay)
			snprintf(ui->status, sizeof ui->status,
				 "replay: read-only");
		else if (!s)
			snprintf(ui->status, sizeof ui->status,
				 "no failed stage");
		else {
			snprintf(ui->status, sizeof ui->status,
				 "rerunning stage %s", s->id);
			snprintf(ui->pending_arg, sizeof ui->pending_arg, "%s",
				 s->id);
			*arg = ui->pending_arg;
			return ACT_RERUN;
		}
		return ACT_NONE;
	}
	case 'm':
		if (ui->replay) {
			snprintf(ui->status, sizeof ui->status,
				 "replay: read-only (markers are added live)");
			return ACT_NONE;
		}
		ui->mode = UI_PROMPT;
		ui->input_filter = 0;
		ui->input[0] = 0;
		return ACT_NONE;
	case KEY_RESIZE:
		return ACT_NONE;
	}
	if (key >= '1' && key < '1' + TUI_NSCREENS) {
		ui->screen = key - '1';
		ui->scroll = 0;
		return ACT_NONE;
	}
	if (tui_screens[ui->screen]->on_key)
		tui_screens[ui->screen]->on_key(ui, v, key);
	return ACT_NONE;
}

/* ------------------------------------------------------------------- stats */

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int tui_write_stats(const struct tui *ui, const char *path, uint64_t events)
{
	FILE *f;
	double wall = (double)(mono_ns() - ui->t_start_ns) / 1e9;
	double cpu = cpu_s() - ui->cpu_start_s;
	double p50 = 0, p99 = 0, mx = 0, c50 = 0, c99 = 0, cmx = 0;
	if (!path)
		return 0;
	if (ui->ndraw) {
		double *s = malloc(ui->ndraw * sizeof *s);
		for (int col = 0; s && col < 2; col++) {
			size_t n = ui->ndraw;
			for (size_t i = 0; i < n; i++)
				s[i] = ui->draw_ms[2 * i + (size_t)col];
			qsort(s, n, sizeof *s, dcmp);
			*(col ? &c50 : &p50) = s[n / 2];
			*(col ? &c99 : &p99) = s[(size_t)((double)(n - 1) * 0.99)];
			*(col ? &cmx : &mx) = s[n - 1];
		}
		free(s);
	}
	if (!(f = fopen(path, "w")))
		return -1;
	fprintf(f,
		"frames %zu\nredraw_p50_ms %.3f\nredraw_p99_ms %.3f\n"
		"redraw_max_ms %.3f\nredraw_cpu_p50_ms %.3f\n"
		"redraw_cpu_p99_ms %.3f\nredraw_cpu_max_ms %.3f\n"
		"wall_s %.3f\ncpu_s %.3f\ncpu_share %.4f\nevents %llu\n",
		ui->ndraw, p50, p99, mx, c50, c99, cmx, wall, cpu,
		wall > 0 ? cpu / wall : 0, (unsigned long long)events);
	return fclose(f) ? -1 : 0;
}

int tui_delta(struct tui *ui, WINDOW *w, int y, int x, int n, double cur,
	      double base, int higher_better)
{
	char b[32];
	double d;
	if (isnan(cur) || isnan(base) || base == 0)
		return 0;
	d = (cur - base) / fabs(base) * 100;
	/* A regression: worse by more than 2% (noise on a quiet cluster). */
	int worse = higher_better ? d < -2 : d > 2;
	int better = higher_better ? d > 2 : d < -2;
	snprintf(b, sizeof b, " %+.1f%%", d);
	return tui_put(w, y, x, n,
		       tui_attr(ui, worse ? ROLE_FAIL : better ? ROLE_OK : ROLE_DIM), b);
}
