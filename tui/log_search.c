/*
 * log_search.c - the Log screen's filter past the view's ring
 * (log_search.h).  Matches come from the session file in (ts, node, seq)
 * order, newest first, behind the ring's oldest line.  The walk back is
 * paid for a frame at a time: at most SCAN_ROWS events read per frame,
 * resumed from the last one read at the next, so a filter that matches
 * nothing in a file of millions of events never holds the console (its
 * loop is also the runner's) for more than a few tens of milliseconds;
 * log_search_busy() tells the screen to say so and come back soon.  A
 * ring that moves on (live, or replay playing) only adds the events that
 * have left it since: the matches already found are still older.  Live,
 * an event can leave the ring before the console has committed it to the
 * file (a commit takes up to 4096 events): the gap then misses it, so a
 * live search that moved on starts over every LIVE_REDO_NS.
 */
#include "log_search.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "reader.h"

#define PAGE 256	  /* matches wanted at a time */
#define SCAN_ROWS 20000 /* events read a frame at most (~20 ms) */
#define LIVE_REDO_NS 10000000000LL

struct match {
	struct view_line l;
	char node[64];
	int64_t seq;
};

/* A position in (ts, node, seq) order. */
struct pos {
	int64_t ts, seq;
	char node[64];
};

struct log_search {
	char *path;
	int live;
	int64_t started; /* CLOCK_MONOTONIC ns of the last start over */
	struct store_reader *rd;
	char err[1024]; /* a struct d0_err's */
	/* the filter the matches are for */
	char text[256], node[64];
	int have;
	struct pos from; /* the ring's oldest line: every match is before it */
	struct pos scan; /* the walk back's last event read (from at first) */
	int done;	 /* the walk reached the file's first event */
	int busy;	 /* the last get stopped for the frame's budget */
	long budget;	 /* events the frame may still read */
	/* the ring the filter last looked at: unchanged, nothing to do
	 * (its lines are freed and allocated anew: their ts besides) */
	const char *ring_new, *ring_old;
	int64_t ring_tnew, ring_told;
	size_t ring_n, ring_head;
	struct match *m; /* newest first */
	size_t n, cap;
	/* a walk's rows: where they go */
	struct match *add; /* the gap's matches, before m's */
	size_t nadd, capadd;
	long rows;
	int want; /* matches that end a walk (0: none) */
	int got;
};

static const struct pos START = {INT64_MIN, INT64_MIN, ""};

static int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct log_search *log_search_new(const char *path, int live)
{
	struct log_search *ls = calloc(1, sizeof *ls);
	if (ls && !(ls->path = strdup(path))) {
		free(ls);
		return NULL;
	}
	if (ls)
		ls->live = live;
	return ls;
}

static void drop(struct log_search *ls)
{
	for (size_t i = 0; i < ls->n; i++)
		free(ls->m[i].l.line);
	ls->n = 0;
	ls->done = 0;
	ls->busy = 0;
}

void log_search_free(struct log_search *ls)
{
	if (!ls)
		return;
	drop(ls);
	free(ls->m);
	free(ls->add);
	store_reader_close(ls->rd);
	free(ls->path);
	free(ls);
}

const char *log_search_error(const struct log_search *ls)
{
	return ls ? ls->err : "";
}

int log_search_busy(const struct log_search *ls)
{
	return ls && ls->busy;
}

int64_t log_search_at(const struct log_search *ls)
{
	return ls ? ls->scan.ts : 0;
}

void log_search_frame(struct log_search *ls)
{
	if (ls)
		ls->budget = SCAN_ROWS;
}

/* The node and seq fields of an event line (as the store keys it). */
static void line_pos(const struct view_line *l, struct pos *p)
{
	const char *s = strstr(l->line, "\"node\":\"");
	p->ts = l->ts;
	p->node[0] = 0;
	p->seq = 0;
	if (s) {
		s += 8;
		size_t n = strcspn(s, "\"");
		snprintf(p->node, sizeof p->node, "%.*s", (int)n, s);
	}
	if ((s = strstr(l->line, "\"seq\":")))
		p->seq = strtoll(s + 6, NULL, 10);
}

static int pos_cmp(const struct pos *a, const struct pos *b)
{
	int c;
	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	if ((c = strcmp(a->node, b->node)))
		return c;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The ring's oldest line in (ts, node, seq) order (replay fills it in
 * that order; the live console in arrival order, so every line counts). */
static void ring_oldest(const struct view *v, struct pos *out)
{
	int64_t ts = INT64_MAX;
	size_t any = 0;
	for (size_t i = 0; i < v->nlog; i++) {
		const struct view_line *l = view_log_get(v, i);
		if (l->ts < ts)
			ts = l->ts;
	}
	for (size_t i = 0; i < v->nlog; i++) {
		const struct view_line *l = view_log_get(v, i);
		struct pos p;
		if (l->ts != ts)
			continue;
		line_pos(l, &p);
		if (!any++ || pos_cmp(&p, out) < 0)
			*out = p;
	}
}

static int push(struct match **a, size_t *n, size_t *cap, const struct store_row *r)
{
	struct match *m;
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : PAGE;
		struct match *na = realloc(*a, c * sizeof *na);
		if (!na)
			return -1;
		*a = na;
		*cap = c;
	}
	m = &(*a)[*n];
	if (!(m->l.line = malloc(r->len[3] + 1)))
		return -1;
	memcpy(m->l.line, r->s[3], r->len[3]);
	m->l.line[r->len[3]] = 0;
	m->l.ts = r->i[0];
	snprintf(m->node, sizeof m->node, "%s", r->s[1] ? r->s[1] : "");
	m->seq = r->i[2];
	(*n)++;
	return 0;
}

/* The walk back (into m, from scan) or a gap (into add): every row read
 * counts against the frame's budget; a walk stops at a page of matches. */
static int row_walk(void *arg, const struct store_row *r)
{
	struct log_search *ls = arg;
	ls->rows++;
	ls->budget--;
	ls->scan.ts = r->i[0];
	ls->scan.seq = r->i[2];
	snprintf(ls->scan.node, sizeof ls->scan.node, "%s", r->s[1] ? r->s[1] : "");
	if (!r->null[3] && r->s[3]) {
		if (push(&ls->m, &ls->n, &ls->cap, r) < 0)
			return -1;
		ls->got++;
	}
	return ls->got >= ls->want || ls->budget <= 0;
}

static int row_gap(void *arg, const struct store_row *r)
{
	struct log_search *ls = arg;
	ls->rows++;
	ls->budget--;
	if (!r->null[3] && r->s[3] && push(&ls->add, &ls->nadd, &ls->capadd, r) < 0)
		return -1;
	return ls->budget <= 0;
}

static int opened(struct log_search *ls)
{
	struct d0_err e = {0};
	if (ls->rd)
		return 1;
	if (store_reader_open(ls->path, &ls->rd, &e) < 0) {
		snprintf(ls->err, sizeof ls->err, "%s", e.msg);
		ls->done = 1;
		return 0;
	}
	return 1;
}

/* Walk back from scan for up to a page of matches, within the budget. */
static void walk(struct log_search *ls)
{
	struct d0_err e = {0};
	if (!opened(ls))
		return;
	ls->rows = 0;
	ls->got = 0;
	ls->want = PAGE;
	if (store_reader_log_range(ls->rd, START.ts, START.node, START.seq,
				   ls->scan.ts, ls->scan.node, ls->scan.seq,
				   ls->text, ls->node, row_walk, ls, &e) < 0) {
		snprintf(ls->err, sizeof ls->err, "%s", e.msg);
		ls->done = 1;
		return;
	}
	ls->err[0] = 0;
	/* stopped neither for a page nor for the budget: the file's start */
	if (ls->got < ls->want && ls->budget > 0)
		ls->done = 1;
}

/* The events that left the ring since: [from, to) ahead of the matches
 * held.  0, or -1 when they are too many for the frame (start over). */
static int gap(struct log_search *ls, const struct pos *to)
{
	struct d0_err e = {0};
	int rc;
	if (!opened(ls))
		return 0;
	ls->nadd = 0;
	rc = store_reader_log_range(ls->rd, ls->from.ts, ls->from.node,
				    ls->from.seq, to->ts, to->node, to->seq,
				    ls->text, ls->node, row_gap, ls, &e);
	if (rc < 0 || ls->budget <= 0) {
		for (size_t i = 0; i < ls->nadd; i++)
			free(ls->add[i].l.line);
		ls->nadd = 0;
		if (rc < 0)
			snprintf(ls->err, sizeof ls->err, "%s", e.msg);
		return -1;
	}
	if (ls->nadd) {
		if (ls->n + ls->nadd > ls->cap) {
			size_t c = ls->n + ls->nadd;
			struct match *na = realloc(ls->m, c * sizeof *na);
			if (!na) {
				for (size_t i = 0; i < ls->nadd; i++)
					free(ls->add[i].l.line);
				ls->nadd = 0;
				return -1;
			}
			ls->m = na;
			ls->cap = c;
		}
		memmove(ls->m + ls->nadd, ls->m, ls->n * sizeof *ls->m);
		memcpy(ls->m, ls->add, ls->nadd * sizeof *ls->m);
		ls->n += ls->nadd;
		ls->nadd = 0;
	}
	return 0;
}

const struct view_line *log_search_get(struct log_search *ls,
				       const struct view *v, const char *text,
				       const char *node, size_t i)
{
	if (!ls || v->nlog < VIEW_LOG)
		return NULL;
	const struct view_line *lnew = view_log_get(v, 0);
	const struct view_line *lold = view_log_get(v, v->nlog - 1);
	int same_key = ls->have && !strcmp(ls->text, text) && !strcmp(ls->node, node);
	int same_ring = lnew->line == ls->ring_new && lold->line == ls->ring_old &&
			lnew->ts == ls->ring_tnew && lold->ts == ls->ring_told &&
			v->nlog == ls->ring_n && v->loghead == ls->ring_head;
	if (!same_key || !same_ring) {
		struct pos from;
		int c;
		ring_oldest(v, &from);
		c = same_key ? pos_cmp(&from, &ls->from) : -1;
		/* a ring that moved on: what left it since, ahead of the
		 * matches held; one that moved back, or a new filter: anew
		 * (live, now and then anyway: see the top) */
		if (c > 0 && ls->live && mono_ns() - ls->started > LIVE_REDO_NS)
			c = -1;
		if (c > 0 && gap(ls, &from) == 0) {
			ls->from = from;
		} else if (c != 0) {
			drop(ls);
			snprintf(ls->text, sizeof ls->text, "%s", text);
			snprintf(ls->node, sizeof ls->node, "%s", node);
			ls->from = ls->scan = from;
			ls->have = 1;
			ls->started = mono_ns();
		}
		ls->ring_new = lnew->line;
		ls->ring_old = lold->line;
		ls->ring_tnew = lnew->ts;
		ls->ring_told = lold->ts;
		ls->ring_n = v->nlog;
		ls->ring_head = v->loghead;
	}
	ls->busy = 0;
	while (i >= ls->n && !ls->done && ls->budget > 0)
		walk(ls);
	if (i >= ls->n && !ls->done)
		ls->busy = 1; /* the next frame goes on */
	return i < ls->n ? &ls->m[i].l : NULL;
}
