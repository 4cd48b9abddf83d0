/*
 * console.c - the command table and what the commands share: usage
 * messages, session paths, time formatting.
 */
#include "console.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

const struct console_cmd *const console_cmds[] = {
    &cmd_run, &cmd_hosts, &cmd_replay, &cmd_report,
    &cmd_diff, &cmd_ls,    &cmd_demo,   NULL,
};

void console_usage(const struct console_cmd *c, FILE *f)
{
	fprintf(f, "usage: day0 %s %s\n", c->name, c->usage);
}

int console_usage_error(const struct console_cmd *c, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "day0 %s: ", c->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	console_usage(c, stderr);
	return EXIT_USAGE;
}

/* mkdir -p with mode for every created level. */
static int mkdirs(const char *path, mode_t mode, struct d0_err *err)
{
	char tmp[PATH_MAX];
	size_t n = strlen(path);
	if (n == 0 || n >= sizeof tmp) {
		d0_errf(err, "%s: bad directory name", path);
		return -1;
	}
	memcpy(tmp, path, n + 1);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, mode) && errno != EEXIST) {
			d0_errf(err, "%s: %s", tmp, strerror(errno));
			return -1;
		}
		*p = '/';
	}
	if (mkdir(tmp, mode) && errno != EEXIST) {
		d0_errf(err, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	return 0;
}

int session_dir(char *out, size_t max, int create, struct d0_err *err)
{
	const char *d = getenv("DAY0_SESSIONS");
	int n;
	if (d && *d)
		n = snprintf(out, max, "%s", d);
	else if ((d = getenv("XDG_STATE_HOME")) && *d)
		n = snprintf(out, max, "%s/day0/sessions", d);
	else {
		const char *home = getenv("HOME");
		if (!home || !*home) {
			d0_errf(err, "neither DAY0_SESSIONS, XDG_STATE_HOME "
				     "nor HOME is set: no session directory");
			return -1;
		}
		n = snprintf(out, max, "%s/.local/state/day0/sessions", home);
	}
	if (n < 0 || (size_t)n >= max) {
		d0_errf(err, "session directory name too long");
		return -1;
	}
	if (create && mkdirs(out, 0700, err))
		return -1;
	return 0;
}

int session_new_path(const char *name, char *out, size_t max,
		     struct d0_err *err)
{
	char dir[PATH_MAX], clean[64], stamp[32];
	size_t j = 0;
	time_t now = time(NULL);
	struct tm tm;
	if (session_dir(dir, sizeof dir, 1, err))
		return -1;
	for (const char *p = name && *name ? name : "session";
	     *p && j < sizeof clean - 1; p++)
		clean[j++] = (strchr("abcdefghijklmnopqrstuvwxyz"
				     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
				     *p) && *p)
				 ? *p
				 : '_';
	clean[j] = 0;
	localtime_r(&now, &tm);
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
	for (int k = 0; k < 100; k++) {
		struct stat st;
		int n = k ? snprintf(out, max, "%s/%s-%s-%d.db", dir, stamp,
				     clean, k)
			  : snprintf(out, max, "%s/%s-%s.db", dir, stamp, clean);
		if (n < 0 || (size_t)n >= max) {
			d0_errf(err, "%s: session path too long", dir);
			return -1;
		}
		if (stat(out, &st) && errno == ENOENT)
			return 0;
	}
	d0_errf(err, "%s: no free session name for %s", dir, clean);
	return -1;
}

void console_fmt_time(int64_t ns, char *out, size_t max)
{
	time_t t = (time_t)(ns / 1000000000);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(out, max, "%Y-%m-%d %H:%M:%S", &tm);
}
