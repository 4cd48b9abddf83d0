/*
 * events.h - the --events emitter every step uses (events.c): the protocol's envelope
 * on one JSON object per line.
 */
#ifndef DAY0_EVENTS_H
#define DAY0_EVENTS_H

#include <stdio.h>

#include <jansson.h>

/* ----------------------------------------------------------------- events */

/*
 * The one emitter every step uses for --events: JSON lines with the
 * envelope of ARCHITECTURE.md (v, seq, ts, node, type).  Disabled emitters
 * drop everything, so steps call these unconditionally.  Thread-safe.
 */
void events_init(FILE *out, int enabled);
int events_enabled(void);
/* Emit obj (stolen) after adding the envelope. */
void events_emit(const char *type, json_t *obj);
void events_stage(const char *stage, const char *state, double progress,
		  int rc, const char *msg);
void events_check(const char *item, const char *status, const char *detail,
		  json_t *value, json_t *threshold);
void events_log(const char *level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
