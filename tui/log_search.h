/*
 * log_search.h - the Log screen's filter past the view's ring.  The ring
 * holds the newest VIEW_LOG events; a filter (a substring, a node) also
 * finds the older ones, in the session file, newest first, where the
 * ring left off.  Replay and the live console each keep one on their
 * session file (its own read-only connection: store/reader.h).
 */
#ifndef DAY0_LOG_SEARCH_H
#define DAY0_LOG_SEARCH_H

#include "view.h"

struct log_search;

/* A search on the session file at path (opened on first use); live: the
 * view of the console that is writing it (the search takes the lines its
 * ring drops: view.log_evict; log_search.c says why), else NULL. */
struct log_search *log_search_new(const char *path, struct view *live);
void log_search_free(struct log_search *ls);

/*
 * The i-th newest (from 0) of the session's events that v's ring does not
 * hold (replay: those before its oldest line; live: log_search.c), whose
 * line contains text ("" any) and, where node is not "", of that node;
 * NULL past the last, while the ring is not full
 * (it then holds every event up to v->t), or where the frame's budget ran
 * out first (log_search_busy).  The line stays valid until the next call.
 * Matches are kept while the filter stays the same (the newest 20000 of
 * them: beyond, NULL); a ring that moves on adds the events that left it.
 */
const struct view_line *log_search_get(struct log_search *ls,
				       const struct view *v, const char *text,
				       const char *node, size_t i);

/* A new frame, before it is drawn: the file may be read for up to
 * 20000 events or 15 ms more, and busy is 0 until a get says otherwise. */
void log_search_frame(struct log_search *ls);

/* No filter any more: the matches go (a live console stops matching the
 * lines its ring drops). */
void log_search_clear(struct log_search *ls);

/* 1: the last get stopped for the frame's budget, not at the file's
 * start: draw again soon (the walk goes on from where it stopped). */
int log_search_busy(const struct log_search *ls);

/* The ts the walk back has reached. */
int64_t log_search_at(const struct log_search *ls);

/* The last error reading the file ("" none): the screen shows it. */
const char *log_search_error(const struct log_search *ls);

#endif
