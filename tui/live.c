/*
 * live.c - the TUI as the runner drives it during `day0 run` (live.h): the
 * runner's loop hands every ingested event line to live_event() (the view
 * model folds it) and calls live_tick() every turn (keys, redraw when due).
 * The view's t follows the wall clock so that silent nodes age on screen
 * while nothing arrives; nothing here blocks.
 */
#include "live.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "console.h"
#include "log_search.h"
#include "proto.h"
#include "store.h"
#include "tui.h"

/* A key redraws within a frame (~30 a second); new events at most 10
 * times a second: with 128 nodes something changes on every turn, and
 * drawing it 30 times a second cost the console a fifth of its CPU for
 * changes no one reads that fast. */
#define FRAME_NS 33000000LL
#define DATA_FRAME_NS 100000000LL
#define IDLE_NS	 500000000LL /* redraw this often anyway (ages move) */

struct live {
	struct store *st;
	struct live_opts o;
	struct live_ops ops;
	void *arg;
	struct view v;
	struct tui ui;
	int dirty; /* 1: new events (DATA_FRAME_NS), 2: a key (FRAME_NS) */
	int64_t last_draw, last_manifest;
	char stats_path[4096];
};

static void manifest(struct live *lv)
{
	json_t *name = store_session_get(lv->st, "name", NULL);
	json_t *model = store_session_get(lv->st, "model", NULL);
	json_t *pb = store_session_get(lv->st, "playbook", NULL);
	json_t *labels = store_session_get(lv->st, "labels", NULL);
	view_set_manifest(&lv->v, name, model, pb);
	view_set_labels(&lv->v, labels);
	json_decref(labels);
	json_decref(name);
	json_decref(model);
	json_decref(pb);
}

int live_start(struct store *s, const struct live_opts *o,
	       const struct live_ops *ops, void *arg, struct live **out,
	       struct d0_err *err)
{
	struct live *lv;
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
		return d0_errf(err, "the console needs a terminal (or "
				    "--headless)");
	if (!(lv = calloc(1, sizeof *lv)))
		return d0_errf(err, "out of memory");
	lv->st = s;
	if (o)
		lv->o = *o;
	if (o && o->stats_path)
		snprintf(lv->stats_path, sizeof lv->stats_path, "%s",
			 o->stats_path);
	if (ops)
		lv->ops = *ops;
	lv->arg = arg;
	view_init(&lv->v);
	if (s)
		manifest(lv);
	lv->ui.running = 1;
	/* the Log screen's filter reads on past the ring: the events this
	 * session has committed to its file */
	if (s && store_path(s))
		lv->ui.older = log_search_new(store_path(s), &lv->v);
	if (tui_start(&lv->ui, lv->o.ascii, lv->o.no_color) < 0) {
		log_search_free(lv->ui.older);
		lv->v.log_evict = NULL;
		view_free(&lv->v);
		free(lv);
		return d0_errf(err, "cannot start the terminal (TERM=%s)",
			       getenv("TERM") ? getenv("TERM") : "");
	}
	/* live_tick() polls: getch() must never wait. */
	nodelay(stdscr, TRUE);
	lv->dirty = 2;
	lv->last_manifest = mono_ns();
	*out = lv;
	return 0;
}

int live_fd(const struct live *lv)
{
	(void)lv;
	return STDIN_FILENO;
}

void live_event(struct live *lv, const char *line, size_t len)
{
	if (!lv)
		return;
	if (view_apply_line(&lv->v, line, len) == 0 && !lv->dirty)
		lv->dirty = 1;
}

void live_event_parsed(struct live *lv, const struct proto_event *ev,
		       const char *line, size_t len)
{
	if (!lv)
		return;
	view_apply_parsed(&lv->v, ev, line, len);
	lv->dirty = 1;
}

static void act(struct live *lv, enum tui_act a, const char *arg)
{
	switch (a) {
	case ACT_QUIT:
		if (lv->ops.quit)
			lv->ops.quit(lv->arg);
		break;
	case ACT_CANCEL:
		if (lv->ops.cancel_stage)
			lv->ops.cancel_stage(lv->arg, arg);
		break;
	case ACT_RERUN:
		if (lv->ops.rerun_stage)
			lv->ops.rerun_stage(lv->arg, arg);
		break;
	case ACT_MARKER:
		if (lv->ops.marker)
			lv->ops.marker(lv->arg, arg);
		break;
	case ACT_NONE:
		break;
	}
}

int live_tick(struct live *lv)
{
	int key;
	int64_t now = mono_ns(), wall = proto_now_ns();
	if (!lv)
		return 1000;
	while ((key = getch()) != ERR) {
		const char *arg;
		enum tui_act a = tui_key(&lv->ui, &lv->v, key, &arg);
		lv->dirty = 2;
		act(lv, a, arg);
	}
	/* The verdict is in: the run is over, q needs no confirmation. */
	if (lv->v.verdict >= 0)
		lv->ui.running = 0;
	if (!*lv->v.name && lv->st && now - lv->last_manifest > 2000000000LL) {
		manifest(lv);
		lv->last_manifest = now;
	}
	if (wall > lv->v.t)
		lv->v.t = wall;
	int64_t since = now - lv->last_draw;
	int64_t frame = lv->dirty == 2 ? FRAME_NS
			: lv->dirty	 ? DATA_FRAME_NS
					 : IDLE_NS;
	if (since >= frame) {
		log_search_frame(lv->ui.older);
		tui_draw(&lv->ui, &lv->v);
		lv->last_draw = now;
		/* a Log filter still reading the file: on next frame */
		lv->dirty = log_search_busy(lv->ui.older) ? 2 : 0;
		return (int)(FRAME_NS / 1000000);
	}
	int64_t due = frame - since;
	return due > 0 ? (int)((due + 999999) / 1000000) : 0;
}

void live_end(struct live *lv)
{
	if (!lv)
		return;
	tui_end(&lv->ui);
	if (*lv->stats_path &&
	    tui_write_stats(&lv->ui, lv->stats_path, lv->v.applied) < 0)
		fprintf(stderr, "day0: %s: %s\n", lv->stats_path,
			strerror(errno));
	free(lv->ui.draw_ms);
	log_search_free(lv->ui.older);
	lv->v.log_evict = NULL;
	view_free(&lv->v);
	free(lv);
}
