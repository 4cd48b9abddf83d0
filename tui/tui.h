/*
 * tui.h - the ncurses front shared by the live console (live.c) and replay
 * (cmd_replay.c): screen units, keys, colours, glyphs, resize, timing.
 *
 * Every screen is one unit (screen_*.c) with draw(ui, view, win) and
 * on_key; it draws the view model and nothing else, so live and replay are
 * the same drawing code.  Drawing never waits on anything: the view is in
 * memory, and a silent node is drawn greyed with its age.
 */
#ifndef DAY0_TUI_H
#define DAY0_TUI_H

#ifndef NCURSES_WIDECHAR
#define NCURSES_WIDECHAR 1
#endif
#include <ncursesw/curses.h>
#include <stdint.h>

#include "view.h"
#include "checklist.h"

struct tui;

struct tui_screen {
	const char *name;
	void (*draw)(struct tui *ui, const struct view *v, WINDOW *w);
	/* A key the global keys did not take; returns 1 when used. */
	int (*on_key)(struct tui *ui, const struct view *v, int key);
};

extern const struct tui_screen screen_overview, screen_cards, screen_comm,
    screen_checklist, screen_numerics, screen_plan, screen_log,
    screen_service, screen_hosts;

/* Colour roles; tui_attr() maps them to colours or, on monochrome
 * terminals and under NO_COLOR, to attributes. */
enum tui_role {
	ROLE_NORMAL,
	ROLE_OK,
	ROLE_WARN,
	ROLE_FAIL,
	ROLE_HEAD,
	ROLE_DIM,
	ROLE_SEL,
	ROLE_MARK,
	ROLE_BAR,
	ROLE_NROLES
};

/* What a key asks of the program around the TUI. */
enum tui_act {
	ACT_NONE,
	ACT_QUIT,
	ACT_CANCEL, /* text: stage id */
	ACT_RERUN,  /* text: stage id */
	ACT_MARKER, /* text: the note */
};

struct tui_glyphs {
	const char *hline, *vline, *full, *half, *empty, *peak, *budget,
	    *cursor, *marker, *failure, *pass, *fail;
	const char *spark[8];
};

enum { UI_NORMAL, UI_HELP, UI_CONFIRM, UI_PROMPT };

struct tui {
	int ascii, color, replay, running;
	int screen; /* index into tui_screens */
	const struct tui_glyphs *g;
	int mode;		/* UI_* */
	enum tui_act pending;	/* UI_CONFIRM: what y does */
	char pending_arg[256];
	char input[256]; /* UI_PROMPT text, or the log filter being typed */
	int input_filter; /* the prompt edits the log filter, not a marker */
	char status[256]; /* the bottom line's message */

	/* Selection state the screens share. */
	int sel_node, sel_card, sel_item, sel_col, scroll;
	char filter[256]; /* log: substring */
	char node_filter[64]; /* log: Enter picks a node */
	/* log: a filter's matches older than the view's ring, from the
	 * session file (log_search.h; NULL: the ring only) */
	struct log_search *older;

	/* Replay (timeline): all markers/failures of the file, its span. */
	struct view_mark *marks;
	size_t nmarks;
	int64_t first, last;
	double speed;
	int paused, follow;
	/* --baseline: the other session's view at its end (NULL: none). */
	const struct view *base;

	/* Redraw timing (ns) for --stats. */
	double *draw_ms; /* per frame: wall ms, then CPU ms */
	size_t ndraw, capdraw;
	int64_t t_start_ns; /* CLOCK_MONOTONIC at start */
	double cpu_start_s;
};

/* The Overview's panels (overview_panels.c): each draws rows y..y+h-1
 * and returns the rows it used. */
int overview_timeline(struct tui *ui, const struct view *v, WINDOW *w, int y,
		      int h, int cols);
int overview_checklist(struct tui *ui, const struct view *v, WINDOW *w, int y,
		       int h, int cols);
int overview_alerts(struct tui *ui, const struct view *v, WINDOW *w, int y,
		    int h, int cols);
/* The glance block (docs/screens.md): the verdict line and the
 * checklist's counts (2 rows), memory per card / node / node set, the
 * network per node / node set; the rows each would take when every line
 * is its own (memory: one per card). */
int overview_summary(struct tui *ui, const struct view *v, WINDOW *w, int y,
		     int h, int cols);
int overview_memory(struct tui *ui, const struct view *v, WINDOW *w, int y,
		    int h, int cols);
int overview_memory_need(const struct view *v);
/* 3 when an item fails or warns (its evidence on a row of its own), else 2. */
int overview_summary_need(const struct view *v);
int overview_net(struct tui *ui, const struct view *v, WINDOW *w, int y, int h,
		 int cols);
int overview_net_need(const struct view *v);
/* s shortened to n columns at a word or number boundary (fit.h), "…" or
 * "..." under --ascii; returns columns used. */
int overview_put_fit(struct tui *ui, WINDOW *w, int y, int x, int n, attr_t a,
		     const char *s);
/* A sparkline of m values (oldest first), right-aligned in n columns,
 * scaled to their max: flat only when every value is 0. */
void overview_spark(struct tui *ui, WINDOW *w, int y, int x, int n,
		    const double *vals, int m, attr_t a);
extern const struct tui_screen *const tui_screens[];
#define TUI_NSCREENS 9

/* Take the terminal.  ascii: no UTF-8 line/block characters; no_color
 * also when NO_COLOR is set or the terminal has no colours. */
int tui_start(struct tui *ui, int ascii, int no_color);
void tui_end(struct tui *ui);
/* Draw everything (header, tabs, screen, timeline, bottom line). */
void tui_draw(struct tui *ui, const struct view *v);
/* One key: global keys, then the screen's.  Returns the action asked
 * (ACT_NONE mostly); *arg gets its text. */
enum tui_act tui_key(struct tui *ui, const struct view *v, int key,
		     const char **arg);
attr_t tui_attr(const struct tui *ui, enum tui_role r);
/* Write stats (frames, redraw p50/p99 ms, CPU share) to path. */
int tui_write_stats(const struct tui *ui, const char *path, uint64_t events);

/* ------------------------------------------------- helpers for screens */

/* Print s clipped to n columns at (y, x); returns columns used. */
int tui_put(WINDOW *w, int y, int x, int n, attr_t a, const char *s);
int tui_printf(WINDOW *w, int y, int x, int n, attr_t a, const char *fmt,
	       ...) __attribute__((format(printf, 6, 7)));
/* Bytes as "12.3G" (binary units), 5 columns at most. */
void tui_bytes(double b, char *out, size_t max);
/* Bandwidth (bytes/s) as "1.2G/s". */
void tui_rate(double bps, char *out, size_t max);
/* ns duration as "1:02:03" or "12.5s". */
void tui_dur(int64_t ns, char *out, size_t max);
/* CLOCK_MONOTONIC in ns: frame budgets and key timing. */
int64_t mono_ns(void);
/* A memory bar of width n: used, peak mark, budget = full width. */
void tui_membar(struct tui *ui, WINDOW *w, int y, int x, int n, double used,
		double peak, double budget, int dim);
/* A sparkline of ring r's last n values, scaled to its max. */
void tui_spark(struct tui *ui, WINDOW *w, int y, int x, int n,
	       const struct view_ring *r, attr_t a);
/* " +3.2%" of cur against base, red when a regression (worse by more
 * than 2%), green when better; nothing without a base.  Returns columns. */
int tui_delta(struct tui *ui, WINDOW *w, int y, int x, int n, double cur,
	      double base, int higher_better);
/* Headroom colour of used/budget. */
enum tui_role tui_mem_role(double used, double budget);
/* Colour of a check status. */
enum tui_role tui_status_role(const char *status);
/* "node[1-8]" style name for the nodes first..last (sorted). */
void tui_fold_name(const char *first, const char *last, char *out,
		   size_t max);
/* The checklist items are the registry's (engine/checklist.h). */
#define TUI_NITEMS ((int)checklist_n)
#define tui_items(i) (checklist_items[i].id)

#endif
