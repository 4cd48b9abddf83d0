/*
 * cmd_replay.c - `day0 replay SESSION.db`: the live screens over a session
 * file, with a timeline.  The view at t is built by view_seek() (derived
 * tables and indexes: any t of a 10-million-event file in well under
 * 100 ms) and kept up to date while playing by folding the events between
 * the last t and the new one (view_forward): the same fold as live.
 *
 *   --at T         start there, paused (seconds from the start, or unix ns)
 *   --speed X      play speed (session seconds per second)
 *   --baseline DB  deltas against another session (its view at its end)
 *   --follow       a file another console is writing: follow its end
 *   --stats FILE   redraw p50/p99 and CPU share at exit (bench/tui.sh)
 *   --dump         no terminal: print the view at T as text and exit
 *                  (--fold: by folding from zero instead of seeking)
 */
#include "console.h"
#include "log_search.h"
#include "store.h"
#include "tui.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SEC 1000000000LL

struct replay_opts {
	const char *path, *baseline, *stats, *at;
	double speed;
	int ascii, no_color, follow, dump, fold;
};

/* T: seconds from the session start (12.5), or absolute unix ns. */
static int parse_at(const char *s, int64_t first, int64_t *out)
{
	char *end;
	double x;
	errno = 0;
	x = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(x) || x < 0)
		return -1;
	if (x >= 1e15) {
		long long ns = strtoll(s, &end, 10);
		if (*end)
			return -1;
		*out = ns;
	} else
		*out = first + (int64_t)llround(x * 1e9);
	return 0;
}

static int open_src(const char *path, struct view_src **src,
		    struct d0_err *err)
{
	struct store *st;
	/* The store validates the file (a session, a known schema version)
	 * with messages naming it; queries go through our own handle. */
	if (store_open(path, STORE_READONLY, &st, err) < 0)
		return -1;
	store_close(st, NULL);
	return view_src_open(path, src, err);
}

/* Where [ and ] go: the previous/next marker or failure. */
static int64_t jump(const struct tui *ui, int64_t t, int dir)
{
	if (dir < 0) {
		for (size_t i = ui->nmarks; i-- > 0;)
			if (ui->marks[i].ts < t)
				return ui->marks[i].ts;
		return t;
	}
	for (size_t i = 0; i < ui->nmarks; i++)
		if (ui->marks[i].ts > t)
			return ui->marks[i].ts;
	return t;
}

static int dump(struct replay_opts *o, struct view_src *src)
{
	struct view v;
	struct d0_err err;
	int64_t first, last, t;
	view_src_span(src, &first, &last);
	t = last;
	if (o->at && parse_at(o->at, first, &t) < 0)
		return console_usage_error(&cmd_replay, "--at: bad time '%s'",
					   o->at);
	view_init(&v);
	view_src_manifest(src, &v);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int rc = o->fold ? view_fold_to(src, &v, t, &err)
			 : view_seek(src, &v, t, &err);
	clock_gettime(CLOCK_MONOTONIC, &b);
	/* bench/tui.sh reads this line. */
	if (rc == 0)
		fprintf(stderr, "day0 replay: view at %lld built in %.1f ms (%s)\n",
			(long long)t,
			(double)(b.tv_sec - a.tv_sec) * 1e3 +
			    (double)(b.tv_nsec - a.tv_nsec) / 1e6,
			o->fold ? "fold from zero" : "seek");
	if (rc < 0) {
		fprintf(stderr, "day0 replay: %s\n", err.msg);
		view_free(&v);
		return 1;
	}
	view_dump(&v, stdout);
	view_free(&v);
	return 0;
}

static int run_replay(int argc, char **argv)
{
	struct replay_opts o = {.speed = 1};
	struct view_src *src = NULL, *bsrc = NULL;
	struct view v, base;
	struct tui ui;
	struct d0_err err;
	char picked[PATH_MAX];
	int64_t first, last, t, target;
	int rc = 0;
	memset(&ui, 0, sizeof ui);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--speed") && i + 1 < argc) {
			char *end;
			o.speed = strtod(argv[++i], &end);
			if (*end || !(o.speed > 0) || o.speed > 1e6)
				return console_usage_error(
				    &cmd_replay, "--speed: expected a number > 0, "
						 "got '%s'", argv[i]);
		} else if (!strcmp(a, "--at") && i + 1 < argc)
			o.at = argv[++i];
		else if (!strcmp(a, "--baseline") && i + 1 < argc)
			o.baseline = argv[++i];
		else if (!strcmp(a, "--stats") && i + 1 < argc)
			o.stats = argv[++i];
		else if (!strcmp(a, "--ascii"))
			o.ascii = 1;
		else if (!strcmp(a, "--no-color"))
			o.no_color = 1;
		else if (!strcmp(a, "--follow"))
			o.follow = 1;
		else if (!strcmp(a, "--dump"))
			o.dump = 1;
		else if (!strcmp(a, "--fold"))
			o.fold = 1;
		else if (a[0] == '-' && a[1])
			return console_usage_error(&cmd_replay,
						   "unknown option '%s'", a);
		else if (!o.path)
			o.path = a;
		else
			return console_usage_error(&cmd_replay,
						   "one session file only");
	}
	if (!o.path)
		return console_usage_error(&cmd_replay, "no session file");
	if (access(o.path, R_OK) < 0) {
		fprintf(stderr, "day0 replay: %s: %s\n", o.path,
			strerror(errno));
		return EXIT_USAGE;
	}
	if (o.baseline && !strcmp(o.baseline, "auto")) {
		if (session_baseline_auto(o.path, picked, sizeof picked,
					  &err) < 0) {
			fprintf(stderr, "day0 replay: --baseline auto: %s\n",
				err.msg);
			return EXIT_USAGE;
		}
		fprintf(stderr, "day0 replay: baseline: %s\n", picked);
		o.baseline = picked;
	}
	if (open_src(o.path, &src, &err) < 0) {
		fprintf(stderr, "day0 replay: %s\n", err.msg);
		return EXIT_USAGE;
	}
	if (o.dump) {
		rc = dump(&o, src);
		view_src_close(src);
		return rc;
	}
	view_src_span(src, &first, &last);
	t = first;
	if (o.at && parse_at(o.at, first, &t) < 0) {
		view_src_close(src);
		return console_usage_error(&cmd_replay, "--at: bad time '%s'",
					   o.at);
	}
	if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
		fprintf(stderr, "day0 replay: not a terminal (--dump prints "
				"the view as text)\n");
		view_src_close(src);
		return EXIT_USAGE;
	}
	view_init(&v);
	view_init(&base);
	view_src_manifest(src, &v);
	if (o.baseline) {
		int64_t bf, bl;
		if (open_src(o.baseline, &bsrc, &err) < 0) {
			fprintf(stderr, "day0 replay: --baseline: %s\n",
				err.msg);
			view_src_close(src);
			return EXIT_USAGE;
		}
		view_src_span(bsrc, &bf, &bl);
		if (view_seek(bsrc, &base, bl, &err) < 0) {
			fprintf(stderr, "day0 replay: %s\n", err.msg);
			rc = 1;
			goto out;
		}
	}
	ui.replay = 1;
	ui.older = log_search_new(o.path, NULL);
	ui.speed = o.speed;
	ui.paused = o.at != NULL;
	ui.follow = o.follow;
	ui.first = first;
	ui.last = last;
	ui.base = o.baseline ? &base : NULL;
	if (view_src_marks(src, &ui.marks, &ui.nmarks, &err) < 0 ||
	    view_seek(src, &v, t, &err) < 0) {
		fprintf(stderr, "day0 replay: %s\n", err.msg);
		rc = 1;
		goto out;
	}
	if (tui_start(&ui, o.ascii, o.no_color) < 0) {
		fprintf(stderr, "day0 replay: cannot start the terminal\n");
		rc = 1;
		goto out;
	}
	int64_t wall = mono_ns(), last_draw = 0, last_refresh = wall;
	int dirty = 1;
	double tfrac = 0; /* sub-ns remainder of playing */
	timeout(15);
	for (;;) {
		int key = getch();
		const char *arg;
		int64_t now = mono_ns();
		target = v.t;
		if (key != ERR && ui.mode == UI_PROMPT) {
			/* typing a filter or a note: every key is text (a
			 * filter for "weights.integrity" must not seek on
			 * its 'g' and '.') */
			dirty = 1;
			if (tui_key(&ui, &v, key, &arg) == ACT_QUIT)
				goto done;
		} else if (key != ERR) {
			dirty = 1;
			switch (key) {
			case ' ': ui.paused = !ui.paused; break;
			case KEY_LEFT: target -= SEC; break;
			case KEY_RIGHT: target += SEC; break;
			case KEY_SLEFT:
			case ',': target -= 10 * SEC; break;
			case KEY_SRIGHT:
			case '.': target += 10 * SEC; break;
			case '[': target = jump(&ui, v.t, -1); break;
			case ']': target = jump(&ui, v.t, 1); break;
			case '+':
				if (ui.speed < 1024)
					ui.speed *= 2;
				break;
			case '-':
				if (ui.speed > 1.0 / 64)
					ui.speed /= 2;
				break;
			case 'g': target = ui.first; break;
			case 'G': target = ui.last; break;
			default:
				if (tui_key(&ui, &v, key, &arg) == ACT_QUIT)
					goto done;
			}
		}
		if (ui.follow && now - last_refresh > 250000000LL) {
			int64_t nf, nl;
			view_src_span(src, &nf, &nl);
			if (nl != ui.last || nf != ui.first) {
				int at_end = v.t >= ui.last;
				ui.first = nf;
				ui.last = nl;
				free(ui.marks);
				ui.marks = NULL;
				view_src_marks(src, &ui.marks, &ui.nmarks, &err);
				/* Following the end: stay on it. */
				if (at_end || !ui.paused)
					target = ui.last;
				dirty = 1;
			}
			last_refresh = now;
		}
		if (!ui.paused && !ui.follow) {
			double adv = (double)(now - wall) * ui.speed + tfrac;
			target += (int64_t)adv;
			tfrac = adv - floor(adv);
		}
		wall = now;
		if (target < ui.first)
			target = ui.first;
		if (target > ui.last) {
			target = ui.last;
			if (!ui.follow)
				ui.paused = 1;
		}
		if (target != v.t) {
			/* Short steps forward fold the events between;
			 * anything else seeks. */
			int r = target > v.t && target - v.t <= 2 * SEC
				    ? view_forward(src, &v, v.t, target, &err)
				    : view_seek(src, &v, target, &err);
			if (r < 0) {
				snprintf(ui.status, sizeof ui.status, "%.200s",
					 err.msg);
			}
			dirty = 1;
		}
		/* Redraw on change, at most ~60 a second; the ages of
		 * silent nodes move with t, so playing redraws too. */
		if ((dirty && now - last_draw > 16000000LL) ||
		    now - last_draw > 500000000LL) {
			log_search_frame(ui.older);
			tui_draw(&ui, &v);
			last_draw = now;
			/* a Log filter still reading the file: on next frame */
			dirty = log_search_busy(ui.older);
		}
	}
done:
	tui_end(&ui);
	if (o.stats && tui_write_stats(&ui, o.stats, v.applied) < 0)
		fprintf(stderr, "day0 replay: %s: %s\n", o.stats,
			strerror(errno));
	free(ui.draw_ms);
out:
	free(ui.marks);
	log_search_free(ui.older);
	view_free(&v);
	view_free(&base);
	view_src_close(src);
	view_src_close(bsrc);
	return rc;
}

const struct console_cmd cmd_replay = {
    "replay",
    "SESSION.db [--at T] [--speed X] [--baseline OTHER.db|auto] [--follow] "
    "[--ascii] [--no-color] [--stats FILE] [--dump [--fold]]\n\n"
    "The live screens of a session file at any time: the view at T is "
    "built from the\nfile's indexes, then played forward.\n\n"
    "  --at T            start at T seconds after the first event "
    "(default: the start)\n"
    "  --speed X         play at X times real time (default 1; + and - "
    "change it)\n"
    "  --baseline OTHER  show deltas against another session (Cards, "
    "Numerics, perf,\n                    Service);"
    " auto: the last GO session of the same\n"
    "                    playbook and model family\n"
    "  --follow          a file another console is still writing: stay on "
    "its end\n"
    "  --ascii           ASCII glyphs only\n"
    "  --no-color        no colours\n"
    "  --stats FILE      write CPU share and redraw times on exit "
    "(benchmarks)\n"
    "  --dump            no screen: print the view at T as text and exit\n"
    "  --fold            with --dump: fold every event from the start "
    "instead of seeking\n\n"
    "Keys: space pause, <- -> seek 1 s, [ ] previous/next failure or "
    "marker, g G ends.\n\n"
    "Example:\n  day0 replay ~/.local/state/day0/sessions/"
    "20261201-0900-release-day.db --at 120",
    "replay a session file: the live screens at any time, a timeline",
    run_replay};
