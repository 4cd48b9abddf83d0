/*
 * log_search.c - the Log screen's filter past the view's ring
 * (log_search.h).  Matches come from the session file, newest first in
 * (ts, node, seq) order, a walk back through the ts index.  The walk is
 * paid for a frame at a time: at most SCAN_ROWS events or SCAN_NS read
 * per frame, resumed from the last one read at the next, so a filter that
 * matches nothing in a file of millions of events never holds the console
 * (its loop is also the runner's) for more than ~15 ms at a time;
 * log_search_busy() tells the screen to say so and come back soon.
 *
 * Replay: the ring holds the newest VIEW_LOG events up to t in that same
 * order, so the file's part is exactly what lies before the ring's oldest
 * line; a ring that moves on (playing) adds what left it since, a range
 * of the file.
 *
 * Live: the ring holds the newest in arrival order, and an event leaves
 * it before the console has committed it to the file (a commit every
 * second or 4096 events), and nodes' clocks differ: no position in the
 * file divides the ring from the rest.  So the walk starts at the file's
 * newest event and skips those the ring held when the filter was set,
 * and the lines the ring drops from then on come straight from the view
 * (view.log_evict), matched as they go, in arrival order like the ring.
 * An event that arrives late (an agent's resend after a reconnect) while
 * a walk is still going can show twice; none is missed.
 *
 * At most HELD matches are kept (the newest); a walk that reaches them
 * again goes on from the oldest kept.
 */
#include "log_search.h"
#include "tui.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json_scan.h"
#include "proto.h"
#include "reader.h"

#define PAGE 256	    /* matches wanted at a time */
#define SCAN_ROWS 20000   /* events read a frame at most */
#define SCAN_NS 15000000LL /* ... and for at most this long */
#define HELD 20000	    /* matches kept */

struct match {
	struct view_line l;
	char node[PROTO_MAX_NODE + 1];
	int64_t seq;
};

/* A position in (ts, node, seq) order. */
struct pos {
	int64_t ts, seq;
	char node[PROTO_MAX_NODE + 1];
};

struct log_search {
	char *path;
	int live;
	struct store_reader *rd;
	char err[1024]; /* a struct d0_err's */
	/* the filter the matches are for */
	char text[256], node[PROTO_MAX_NODE + 1];
	int have;
	struct pos from; /* replay: the ring's oldest line */
	struct pos scan; /* the walk back's last event read */
	int done;	 /* the walk reached the file's first event */
	int busy;	 /* this frame's get stopped for the budget */
	long budget;	 /* events the frame may still read */
	int64_t frame_end; /* CLOCK_MONOTONIC ns the frame's reading ends */
	/* replay: the ring the filter last looked at (its lines are freed
	 * and allocated anew: their ts besides) */
	const char *ring_new, *ring_old;
	int64_t ring_tnew, ring_told;
	size_t ring_n, ring_head;
	/* live: keys (node, seq) the walk skips: the ring's when the filter
	 * was set and the dropped lines kept since (open addressing,
	 * 0 empty) */
	uint64_t *skip;
	size_t nskip, capskip;
	struct match *m; /* newest first */
	size_t n, cap;
	struct match *add; /* a gap's matches, to go before m's */
	size_t nadd, capadd;
	int got;     /* a walk's matches */
	int stopped; /* ... it stopped before the file's start */
};

static const struct pos START = {INT64_MIN, INT64_MIN, ""};
static const struct pos END = {INT64_MAX, 0, ""};

/* ------------------------------------------------------------ matches */

static void free_matches(struct match *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(a[i].l.line);
}

static int grow(struct match **a, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : PAGE;
	while (c < need)
		c *= 2;
	struct match *na = realloc(*a, c * sizeof *na);
	if (!na)
		return -1;
	*a = na;
	*cap = c;
	return 0;
}

static int set_match(struct match *m, int64_t ts, const char *node, int64_t seq,
		     const char *line, size_t len)
{
	if (!(m->l.line = malloc(len + 1)))
		return -1;
	memcpy(m->l.line, line, len);
	m->l.line[len] = 0;
	m->l.ts = ts;
	snprintf(m->node, sizeof m->node, "%s", node);
	m->seq = seq;
	return 0;
}

/* Keep the newest HELD: a walk goes on from the oldest kept. */
static void trim(struct log_search *ls)
{
	if (ls->n <= HELD)
		return;
	free_matches(ls->m + HELD, ls->n - HELD);
	ls->n = HELD;
	ls->scan.ts = ls->m[HELD - 1].l.ts;
	ls->scan.seq = ls->m[HELD - 1].seq;
	snprintf(ls->scan.node, sizeof ls->scan.node, "%s", ls->m[HELD - 1].node);
	ls->done = 0;
}

/* n new matches (newest first) before those held. */
static int prepend(struct log_search *ls, struct match *a, size_t n)
{
	if (grow(&ls->m, &ls->cap, ls->n + n) < 0) {
		free_matches(a, n);
		return -1;
	}
	memmove(ls->m + n, ls->m, ls->n * sizeof *ls->m);
	memcpy(ls->m, a, n * sizeof *ls->m);
	ls->n += n;
	trim(ls);
	return 0;
}

/* ---------------------------------------------------------- skip keys */

static uint64_t key_of(const char *node, int64_t seq)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a, then the seq */
	for (const unsigned char *p = (const unsigned char *)node; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	h ^= (uint64_t)seq * 0x9E3779B97F4A7C15ULL;
	h ^= h >> 29;
	return h ? h : 1;
}

static int skip_has(const struct log_search *ls, uint64_t k)
{
	if (!ls->capskip)
		return 0;
	for (size_t i = k & (ls->capskip - 1);; i = (i + 1) & (ls->capskip - 1)) {
		if (ls->skip[i] == k)
			return 1;
		if (!ls->skip[i])
			return 0;
	}
}

static void skip_add(struct log_search *ls, uint64_t k)
{
	if (2 * (ls->nskip + 1) > ls->capskip) {
		size_t c = ls->capskip ? 2 * ls->capskip : 8192;
		uint64_t *ns = calloc(c, sizeof *ns), *old = ls->skip;
		size_t oc = ls->capskip;
		if (!ns)
			return; /* no skipping: at worst a line twice */
		ls->skip = ns;
		ls->capskip = c;
		ls->nskip = 0;
		for (size_t i = 0; i < oc; i++)
			if (old[i])
				skip_add(ls, old[i]);
		free(old);
	}
	if (skip_has(ls, k))
		return;
	for (size_t i = k & (ls->capskip - 1);; i = (i + 1) & (ls->capskip - 1))
		if (!ls->skip[i]) {
			ls->skip[i] = k;
			ls->nskip++;
			return;
		}
}

/* -------------------------------------------------------------- lines */

/* The node and seq of an event line, as the store keys it (the
 * envelope's, unescaped).  -1: not an event. */
static int line_pos(const char *line, int64_t ts, struct pos *p)
{
	struct jscan j;
	struct proto_envelope e;
	const struct jmember *mn;
	p->ts = ts;
	p->node[0] = 0;
	p->seq = 0;
	if (json_scan_object(line, strlen(line), &j) < 0 ||
	    proto_envelope_scan(&j, &e, NULL) < 0 ||
	    !(mn = jscan_get(&j, "node")) || mn->kind != J_STR ||
	    mn->vlen >= sizeof p->node)
		return -1;
	jscan_str(mn, p->node);
	p->seq = e.seq;
	return 0;
}

/* What the screen's keep() asks of a line: the text in it, the node. */
static int matches(const struct log_search *ls, const char *line,
		   const struct pos *p)
{
	return strstr(line, ls->text) && (!*ls->node || !strcmp(ls->node, p->node));
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

/* The ring's oldest line in (ts, node, seq) order. */
static void ring_oldest(const struct view *v, struct pos *out)
{
	int64_t ts = INT64_MAX;
	size_t any = 0;
	*out = END;
	for (size_t i = 0; i < v->nlog; i++) {
		const struct view_line *l = view_log_get(v, i);
		if (l->ts < ts)
			ts = l->ts;
	}
	for (size_t i = 0; i < v->nlog; i++) {
		const struct view_line *l = view_log_get(v, i);
		struct pos p;
		if (l->ts != ts || line_pos(l->line, l->ts, &p) < 0)
			continue;
		if (!any++ || pos_cmp(&p, out) < 0)
			*out = p;
	}
}

/* --------------------------------------------------------------- file */

static int out_of_time(struct log_search *ls)
{
	return --ls->budget <= 0 || (ls->budget % 256 == 0 && mono_ns() > ls->frame_end);
}

/* The walk back: every row read counts; a page of matches ends it. */
static int row_walk(void *arg, const struct store_row *r)
{
	struct log_search *ls = arg;
	const char *node = r->s[1] ? r->s[1] : "";
	ls->scan.ts = r->i[0];
	ls->scan.seq = r->i[2];
	snprintf(ls->scan.node, sizeof ls->scan.node, "%s", node);
	if (!r->null[3] && r->s[3] &&
	    !(ls->live && skip_has(ls, key_of(node, r->i[2])))) {
		if (grow(&ls->m, &ls->cap, ls->n + 1) < 0 ||
		    set_match(&ls->m[ls->n], r->i[0], node, r->i[2], r->s[3],
			      r->len[3]) < 0) {
			ls->budget = 0;
			return ls->stopped = -1;
		}
		ls->n++;
		ls->got++;
	}
	return ls->stopped = out_of_time(ls) || ls->got >= PAGE;
}

static int row_gap(void *arg, const struct store_row *r)
{
	struct log_search *ls = arg;
	if (!r->null[3] && r->s[3]) {
		if (grow(&ls->add, &ls->capadd, ls->nadd + 1) < 0 ||
		    set_match(&ls->add[ls->nadd], r->i[0], r->s[1] ? r->s[1] : "",
			      r->i[2], r->s[3], r->len[3]) < 0) {
			ls->budget = 0;
			return -1;
		}
		ls->nadd++;
	}
	return out_of_time(ls);
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
	struct pos hi = ls->scan; /* the bound, while row_walk moves scan */
	if (!opened(ls))
		return;
	ls->got = 0;
	ls->stopped = 0;
	if (store_reader_log_range(ls->rd, START.ts, START.node, START.seq, hi.ts,
				   hi.node, hi.seq, ls->text, ls->node, row_walk,
				   ls, &e) < 0) {
		snprintf(ls->err, sizeof ls->err, "%s", e.msg);
		ls->done = 1;
		return;
	}
	ls->err[0] = 0;
	/* not stopped for a page or the budget: the file's start */
	if (!ls->stopped)
		ls->done = 1;
	trim(ls);
}

/* Replay: the events that left the ring since, [from, to), before the
 * matches held.  0, or -1 when they are more than the frame can read
 * (the caller starts over). */
static int gap(struct log_search *ls, const struct pos *to)
{
	struct d0_err e = {0};
	struct pos lo = ls->from;
	int rc;
	if (!opened(ls))
		return -1;
	ls->nadd = 0;
	rc = store_reader_log_range(ls->rd, lo.ts, lo.node, lo.seq, to->ts, to->node,
				    to->seq, ls->text, ls->node, row_gap, ls, &e);
	if (rc < 0 || ls->budget <= 0) {
		free_matches(ls->add, ls->nadd);
		ls->nadd = 0;
		if (rc < 0)
			snprintf(ls->err, sizeof ls->err, "%s", e.msg);
		return -1;
	}
	rc = prepend(ls, ls->add, ls->nadd);
	ls->nadd = 0;
	return rc;
}

/* ----------------------------------------------------------------- api */

static void drop(struct log_search *ls)
{
	free_matches(ls->m, ls->n);
	ls->n = 0;
	ls->done = 0;
	ls->nskip = 0;
	if (ls->skip)
		memset(ls->skip, 0, ls->capskip * sizeof *ls->skip);
}

/* The ring drops a line (live): kept, ahead of the rest, if it matches. */
static void evicted(void *arg, const struct view_line *l)
{
	struct log_search *ls = arg;
	struct pos p;
	struct match m;
	if (!ls->have || !strstr(l->line, ls->text) ||
	    line_pos(l->line, l->ts, &p) < 0 || !matches(ls, l->line, &p))
		return;
	if (set_match(&m, l->ts, p.node, p.seq, l->line, strlen(l->line)) < 0)
		return;
	skip_add(ls, key_of(p.node, p.seq));
	prepend(ls, &m, 1);
}

void log_search_clear(struct log_search *ls)
{
	if (ls && ls->have) {
		drop(ls);
		ls->have = 0;
	}
}

struct log_search *log_search_new(const char *path, struct view *live)
{
	struct log_search *ls = calloc(1, sizeof *ls);
	if (ls && !(ls->path = strdup(path))) {
		free(ls);
		return NULL;
	}
	if (ls && live) {
		ls->live = 1;
		live->log_evict = evicted;
		live->log_evict_arg = ls;
	}
	return ls;
}

void log_search_free(struct log_search *ls)
{
	if (!ls)
		return;
	drop(ls);
	free(ls->m);
	free(ls->add);
	free(ls->skip);
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
	if (!ls)
		return;
	ls->budget = SCAN_ROWS;
	ls->frame_end = mono_ns() + SCAN_NS;
	ls->busy = 0;
}

/* A new filter: the matches anew, the walk from the top. */
static void restart(struct log_search *ls, const struct view *v, const char *text,
		    const char *node)
{
	drop(ls);
	snprintf(ls->text, sizeof ls->text, "%s", text);
	snprintf(ls->node, sizeof ls->node, "%s", node);
	ls->have = 1;
	if (ls->live) {
		/* the whole file but what the ring holds now */
		for (size_t i = 0; i < v->nlog; i++) {
			const struct view_line *l = view_log_get(v, i);
			struct pos p;
			if (line_pos(l->line, l->ts, &p) == 0)
				skip_add(ls, key_of(p.node, p.seq));
		}
		ls->scan = END;
	} else {
		ring_oldest(v, &ls->from);
		ls->scan = ls->from;
	}
}

const struct view_line *log_search_get(struct log_search *ls,
				       const struct view *v, const char *text,
				       const char *node, size_t i)
{
	if (!ls || v->nlog < VIEW_LOG || i >= HELD)
		return NULL;
	const struct view_line *lnew = view_log_get(v, 0);
	const struct view_line *lold = view_log_get(v, v->nlog - 1);
	int same_key = ls->have && !strcmp(ls->text, text) && !strcmp(ls->node, node);
	int same_ring = lnew->line == ls->ring_new && lold->line == ls->ring_old &&
			lnew->ts == ls->ring_tnew && lold->ts == ls->ring_told &&
			v->nlog == ls->ring_n && v->loghead == ls->ring_head;
	if (!same_key) {
		restart(ls, v, text, node);
	} else if (!ls->live && !same_ring) {
		struct pos from;
		ring_oldest(v, &from);
		int c = pos_cmp(&from, &ls->from);
		/* moved on (playing): what left it, ahead of the matches
		 * held; moved back (a seek): anew */
		if (c > 0 && gap(ls, &from) == 0)
			ls->from = from;
		else if (c != 0)
			restart(ls, v, text, node);
	}
	ls->ring_new = lnew->line;
	ls->ring_old = lold->line;
	ls->ring_tnew = lnew->ts;
	ls->ring_told = lold->ts;
	ls->ring_n = v->nlog;
	ls->ring_head = v->loghead;
	while (i >= ls->n && !ls->done && ls->budget > 0)
		walk(ls);
	if (i >= ls->n && !ls->done)
		ls->busy = 1; /* the next frame goes on */
	return i < ls->n ? &ls->m[i].l : NULL;
}
