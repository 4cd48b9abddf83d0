/*
 * cmd_ls.c - `day0 ls [--json] [DIR]`: the past sessions in the session
 * directory (session_dir(), or DIR), newest first.
 *
 * Each *.db file is opened read-only and summarised (report_summary:
 * name, start, duration, nodes, verdict, events).  A file that cannot be
 * read (not a session, corrupt, no permission) is listed with its error:
 * one bad file must not hide the others.  Exit 0 when the directory could
 * be listed (even with bad files in it), 2 when it could not.
 */
#include "console.h"
#include "report.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct entry {
	char path[PATH_MAX];
	int64_t sort_ns; /* started, else the file's mtime */
	json_t *summary; /* NULL: see why */
	char why[1024];
};

static int newest_first(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	if (x->sort_ns != y->sort_ns)
		return x->sort_ns < y->sort_ns ? 1 : -1;
	return strcmp(x->path, y->path);
}

static int is_session_name(const char *n)
{
	size_t l = strlen(n);
	return l > 3 && !strcmp(n + l - 3, ".db") && n[0] != '.';
}

static void fmt_duration(double s, char *out, size_t max)
{
	if (s < 60)
		snprintf(out, max, "%.1fs", s);
	else if (s < 3600)
		snprintf(out, max, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(out, max, "%dh%02dm", (int)(s / 3600),
			 (int)s / 60 % 60);
}

static int run_ls(int argc, char **argv)
{
	const char *dir = NULL;
	char dbuf[PATH_MAX];
	int as_json = 0;
	struct d0_err err;
	struct entry *ents = NULL;
	size_t n = 0, cap = 0;
	DIR *d;
	struct dirent *de;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			as_json = 1;
		else if (argv[i][0] == '-' && argv[i][1])
			return console_usage_error(&cmd_ls,
						   "unknown option '%s'",
						   argv[i]);
		else if (!dir)
			dir = argv[i];
		else
			return console_usage_error(&cmd_ls,
						   "one directory only ('%s')",
						   argv[i]);
	}
	if (!dir) {
		if (session_dir(dbuf, sizeof dbuf, 0, &err) < 0) {
			fprintf(stderr, "day0 ls: %s\n", err.msg);
			return EXIT_USAGE;
		}
		dir = dbuf;
	}
	if (!(d = opendir(dir))) {
		/* No session directory yet is an empty history, not an
		 * error; a DIR the operator named must exist. */
		if (errno == ENOENT && dir == dbuf) {
			if (as_json)
				puts("[]");
			else
				printf("no sessions in %s\n", dir);
			return EXIT_OK;
		}
		fprintf(stderr, "day0 ls: %s: %s\n", dir, strerror(errno));
		return EXIT_USAGE;
	}
	while ((de = readdir(d))) {
		struct entry *e;
		struct stat sb;
		if (!is_session_name(de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			struct entry *ne = realloc(ents, cap * sizeof *ents);
			if (!ne) {
				fprintf(stderr, "day0 ls: out of memory\n");
				closedir(d);
				free(ents);
				return EXIT_USAGE;
			}
			ents = ne;
		}
		e = &ents[n++];
		memset(e, 0, sizeof *e);
		int w = snprintf(e->path, sizeof e->path, "%s/%s", dir,
				 de->d_name);
		if (w < 0 || (size_t)w >= sizeof e->path) {
			/* Listed with the reason rather than dropped. */
			snprintf(e->why, sizeof e->why, "name too long");
			continue;
		}
		if (stat(e->path, &sb) == 0)
			e->sort_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 +
				     sb.st_mtim.tv_nsec;
		if (!(e->summary = report_summary(e->path, &err)))
			snprintf(e->why, sizeof e->why, "%s", err.msg);
		else
			e->sort_ns = json_integer_value(
			    json_object_get(e->summary, "started"));
	}
	closedir(d);
	qsort(ents, n, sizeof *ents, newest_first);

	if (as_json) {
		json_t *a = json_array();
		for (size_t i = 0; i < n; i++) {
			json_t *o = ents[i].summary
					? json_incref(ents[i].summary)
					: json_pack("{s:s,s:s}", "file",
						    ents[i].path, "error",
						    ents[i].why);
			json_array_append_new(a, o);
		}
		json_dumpf(a, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(a);
	} else {
		printf("%-40s %-20s %-19s %9s %-12s %-10s %8s\n", "FILE", "NAME",
		       "STARTED", "DURATION", "NODES", "VERDICT", "EVENTS");
		for (size_t i = 0; i < n; i++) {
			const char *base = strrchr(ents[i].path, '/') + 1;
			json_t *s = ents[i].summary, *nd;
			char t[32], dur[32], nodes[256] = "";
			size_t k, len = 0;
			if (!s) {
				printf("%-40s error: %s\n", base, ents[i].why);
				continue;
			}
			console_fmt_time(
			    json_integer_value(json_object_get(s, "started")), t,
			    sizeof t);
			fmt_duration(json_number_value(
					 json_object_get(s, "duration_s")),
				     dur, sizeof dur);
			json_array_foreach(json_object_get(s, "nodes"), k, nd)
			{
				int w = snprintf(nodes + len,
						 sizeof nodes - len, "%s%s",
						 k ? "," : "",
						 json_string_value(nd));
				if (w < 0 || (size_t)w >= sizeof nodes - len)
					break;
				len += (size_t)w;
			}
			printf("%-40s %-20s %-19s %9s %-12s %-10s %8lld\n", base,
			       json_string_value(json_object_get(s, "name")), t,
			       dur, len ? nodes : "-",
			       json_string_value(json_object_get(s, "verdict")),
			       (long long)json_integer_value(
				   json_object_get(s, "events")));
		}
	}
	for (size_t i = 0; i < n; i++)
		json_decref(ents[i].summary);
	free(ents);
	return fflush(stdout) ? EXIT_USAGE : EXIT_OK;
}

const struct console_cmd cmd_ls = {
    "ls",
    "[--json] [DIR]\n\n"
    "Past sessions in DIR (default: $DAY0_SESSIONS, else "
    "$XDG_STATE_HOME/day0/sessions),\nnewest first.\n\n"
    "  --json            one JSON array instead of the table\n\n"
    "Example:\n  day0 ls --json",
    "past sessions, newest first: name, start, duration, nodes, verdict",
    run_ls};
