/*
 * events.c - the one --events emitter.  Every engine step reports through
 * here, so every line has the same envelope (ARCHITECTURE.md, "Event
 * protocol"): v, seq, ts (unix ns), node, type, then the type's fields.
 * The agent re-stamps seq and node and forwards the line unchanged
 * otherwise.  One line per event, written with a single fwrite under a
 * lock and flushed, so lines from threads never interleave.
 */
#include "engine.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FILE *ev_out;
static int ev_on;
static uint64_t ev_seq;
static char ev_node[256];
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;

void events_init(FILE *out, int enabled)
{
	const char *node = getenv("DAY0_NODE");
	ev_out = out;
	ev_on = enabled && out;
	ev_seq = 0;
	if (node && *node)
		snprintf(ev_node, sizeof ev_node, "%s", node);
	else if (gethostname(ev_node, sizeof ev_node - 1) < 0)
		snprintf(ev_node, sizeof ev_node, "localhost");
}

int events_enabled(void)
{
	return ev_on;
}

void events_emit(const char *type, json_t *obj)
{
	struct timespec ts;
	json_t *line;
	char *s;
	if (!ev_on) {
		json_decref(obj);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	pthread_mutex_lock(&ev_mu);
	line = json_pack("{s:i, s:I, s:I, s:s, s:s}", "v", DAY0_PROTO_VERSION,
			 "seq", (json_int_t)++ev_seq, "ts",
			 (json_int_t)ts.tv_sec * 1000000000 + ts.tv_nsec,
			 "node", ev_node, "type", type);
	if (obj)
		json_object_update(line, obj);
	json_decref(obj);
	s = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER |
				     JSON_ENSURE_ASCII);
	json_decref(line);
	if (s) {
		size_t n = strlen(s);
		s[n] = '\n';
		fwrite(s, 1, n + 1, ev_out);
		fflush(ev_out);
		free(s);
	}
	pthread_mutex_unlock(&ev_mu);
}

void events_stage(const char *stage, const char *state, double progress,
		  int rc, const char *msg)
{
	json_t *o;
	if (!ev_on)
		return;
	o = json_pack("{s:s, s:s, s:f}", "stage", stage, "state", state,
		      "progress", progress);
	if (!strcmp(state, "end"))
		json_object_set_new(o, "rc", json_integer(rc));
	if (msg)
		json_object_set_new(o, "msg", json_string(msg));
	events_emit("stage", o);
}

void events_check(const char *item, const char *status, const char *detail,
		  json_t *value, json_t *threshold)
{
	json_t *o;
	if (!ev_on) {
		json_decref(value);
		json_decref(threshold);
		return;
	}
	o = json_pack("{s:s, s:s, s:s}", "item", item, "status", status,
		      "detail", detail ? detail : "");
	if (value)
		json_object_set_new(o, "value", value);
	if (threshold)
		json_object_set_new(o, "threshold", threshold);
	events_emit("check", o);
}

void events_log(const char *level, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	if (!ev_on)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	events_emit("log", json_pack("{s:s, s:s}", "level", level, "msg", buf));
}
