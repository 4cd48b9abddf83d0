/*
 * tui_live.c - bench/tui.sh's console: drives tui/live.h exactly as the
 * runner does (a poll loop over the event stream and the terminal; every
 * event line to live_event(), live_tick() every turn), optionally ingesting
 * into a session file first as the runner does (--db), and writes the
 * redraw figures and CPU share (--stats).  Events come from the file or
 * FIFO named on the command line; the terminal is for keys (q quits).
 *
 *   tui_live EVENTS [--db FILE.db] [--stats FILE]
 */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "live.h"
#include "proto.h"
#include "store.h"

static int quit;
static void on_quit(void *arg) { (void)arg; quit = 1; }

int main(int argc, char **argv)
{
	struct live_opts o = {0};
	struct live_ops ops = {.quit = on_quit};
	struct live *lv;
	struct store *st = NULL;
	struct d0_err err;
	struct proto_lines pl;
	const char *db = NULL;
	char buf[65536];
	int fd, eof = 0;
	if (argc < 2)
		return 2;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--db"))
			db = argv[i + 1];
		else if (!strcmp(argv[i], "--stats"))
			o.stats_path = argv[i + 1];
	}
	if ((fd = open(argv[1], O_RDONLY)) < 0) {
		perror(argv[1]);
		return 1;
	}
	if (db && store_open(db, STORE_CREATE, &st, &err) < 0) {
		fprintf(stderr, "tui_live: %s\n", err.msg);
		return 1;
	}
	if (live_start(st, &o, &ops, NULL, &lv, &err) < 0) {
		fprintf(stderr, "tui_live: %s\n", err.msg);
		return 1;
	}
	proto_lines_init(&pl);
	struct timespec last;
	clock_gettime(CLOCK_MONOTONIC, &last);
	while (!quit) {
		int ms = live_tick(lv);
		struct pollfd p[2] = {{live_fd(lv), POLLIN, 0},
				      {eof ? -1 : fd, POLLIN, 0}};
		if (poll(p, 2, ms) < 0)
			continue;
		if (p[1].revents) {
			ssize_t n = read(fd, buf, sizeof buf);
			const char *line;
			size_t len;
			if (n <= 0)
				eof = 1;
			else
				proto_lines_push(&pl, buf, (size_t)n);
			while (proto_lines_next(&pl, &line, &len) == PL_LINE) {
				if (st)
					store_ingest(st, line, len, NULL);
				live_event(lv, line, len);
			}
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		/* The runner commits on a short timer. */
		if (st && (now.tv_sec - last.tv_sec) * 1000000000L +
				      (now.tv_nsec - last.tv_nsec) >
				  100000000L) {
			store_commit(st, NULL);
			last = now;
		}
	}
	live_end(lv);
	proto_lines_free(&pl);
	if (st)
		store_close(st, NULL);
	return 0;
}
