/*
 * live.h - the TUI as the runner drives it during `day0 run`.
 *
 * The runner owns the poll loop and the store; after every ingested event
 * it calls live_event() (the view model folds it), and every loop turn
 * live_tick() (keys on stdin, redraw when due, at most ~30 per second).
 * The screens draw the view model only, never the runner's state.  Keys
 * that act on the run call back into the runner through live_ops.
 */
#ifndef DAY0_LIVE_H
#define DAY0_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct proto_event;

struct store;
struct live;

struct live_ops {
	/* `a` (after confirmation): cancel the running stage. */
	void (*cancel_stage)(void *arg, const char *stage_id);
	/* `r`: rerun a failed stage. */
	void (*rerun_stage)(void *arg, const char *stage_id);
	/* `m`: the operator's note; the runner records a marker event. */
	void (*marker)(void *arg, const char *note);
	/* `q` (confirmed while running): stop the run. */
	void (*quit)(void *arg);
};

struct live_opts {
	int ascii;    /* --ascii: no UTF-8 line/block characters */
	int no_color; /* NO_COLOR or --no-color */
	const char *stats_path; /* write redraw timing figures here at end */
};

/* Take over the terminal (ncurses).  s is the session being written. */
int live_start(struct store *s, const struct live_opts *o,
	       const struct live_ops *ops, void *arg, struct live **out,
	       struct d0_err *err);
/* The descriptor to poll for keys (stdin). */
int live_fd(const struct live *lv);
/* One event line just ingested (also the console's own events). */
void live_event(struct live *lv, const char *line, size_t len);
/* The same for a line the caller has parsed already (ev, from line). */
void live_event_parsed(struct live *lv, const struct proto_event *ev,
		       const char *line, size_t len);
/* Keys if any, redraw if due.  Returns ms until the next redraw is due. */
int live_tick(struct live *lv);
/* Give the terminal back.  NULL-safe. */
void live_end(struct live *lv);

#endif
