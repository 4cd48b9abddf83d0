/*
 * intake.c - the console's door for agent lines and its store commits
 * (intake.h says what and why).
 *
 * Per node: the token bucket, what was refused (count, first example),
 * what has been folded (so a batch rolled back and resent is not folded
 * twice) and whether a rewind is owed.  Per run: the store's stall state
 * and the console's own lines not yet committed.
 */
#include "intake.h"

#include "console.h"
#include "proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALERT_EVERY_NS 2000000000LL
#define RETRY_MIN_NS   250000000LL
#define RETRY_MAX_NS   4000000000LL
#define FLAP_NS        10000000000LL
#define BATCH_MAX      4096u /* events per commit at most */
#define HELD_MAX       (64u << 20) /* console bytes held while stalled */

const char *const intake_reason_names[IN_REASONS] = {
    [IN_TOOLONG] = "over-long line",
    [IN_UTF8] = "invalid UTF-8",
    [IN_NOT_EVENT] = "not an event",
    [IN_VERSION] = "unknown protocol version",
    [IN_FORGED] = "forged node",
    [IN_RESERVED] = "reserved node name",
    [IN_BACKWARDS] = "seq going backwards",
    [IN_CONFLICT] = "duplicate seq with a different body",
    [IN_RATE] = "over the event rate",
};

struct refusal {
	uint64_t count, reported;
	int64_t reported_at;
	char detail[160], example[200];
};

struct node_in {
	char name[64];
	double tokens;
	int64_t refill_at;
	int dropping;	   /* over the rate: drop until the rewind */
	int rewind;	   /* a rewind is owed */
	int64_t link_max;  /* highest seq received on the current link */
	/* seqs handed to the runner since the last commit, and those a
	 * rollback took back after they were folded (sorted) */
	struct seqs {
		int64_t *v;
		size_t n, cap;
	} fresh, redo;
	struct refusal why[IN_REASONS];
};

struct intake {
	struct store *store;
	struct node_in *nodes;
	size_t n;
	double rate, burst;
	/* stalled store */
	int stalled;
	int64_t stall_since, retry_at, backoff;
	int64_t ok_since; /* the last recovery (a stall soon after it is the
			   * same stall: a disk that frees a few pages) */
	char stall_msg[600];
	/* console lines since the last commit (re-stored after a rollback) */
	char *held;
	size_t held_len, held_cap;
	unsigned held_stored; /* of them, in the open batch */
};

struct intake *intake_new(struct store *s, const char *const *names,
			  size_t n, const struct intake_opts *o)
{
	struct intake *in = calloc(1, sizeof *in);
	if (!in)
		abort();
	in->store = s;
	in->n = n;
	in->nodes = calloc(n ? n : 1, sizeof *in->nodes);
	if (!in->nodes)
		abort();
	in->rate = o && o->rate > 0 ? o->rate : 20000;
	in->burst = o && o->burst > 0 ? o->burst : 2 * in->rate;
	for (size_t i = 0; i < n; i++) {
		struct node_in *nd = &in->nodes[i];
		snprintf(nd->name, sizeof nd->name, "%.63s", names[i]);
		nd->tokens = in->burst;
	}
	store_set_batch(s, 0); /* intake_line commits: it must know when */
	return in;
}

void intake_free(struct intake *in)
{
	if (!in)
		return;
	for (size_t i = 0; i < in->n; i++) {
		free(in->nodes[i].fresh.v);
		free(in->nodes[i].redo.v);
	}
	free(in->nodes);
	free(in->held);
	free(in);
}

/* ------------------------------------------------------------ refusals */

static void refuse(struct intake *in, int node, enum intake_reason why,
		   const char *line, size_t len, const char *detail)
{
	struct refusal *r = &in->nodes[node].why[why];
	if (r->count++ == 0) {
		snprintf(r->detail, sizeof r->detail, "%.159s", detail);
		proto_excerpt(line, len, r->example, sizeof r->example);
	}
}

uint64_t intake_refused(const struct intake *in, int node)
{
	uint64_t n = 0;
	for (int k = 0; k < IN_REASONS; k++)
		if (k != IN_RATE)
			n += in->nodes[node].why[k].count;
	return n;
}

int intake_next_alert(struct intake *in, int64_t now, int force,
		      struct intake_alert *a)
{
	for (size_t i = 0; i < in->n; i++)
		for (int k = 0; k < IN_REASONS; k++) {
			struct refusal *r = &in->nodes[i].why[k];
			if (r->count == r->reported ||
			    (r->reported && !force &&
			     now - r->reported_at < ALERT_EVERY_NS))
				continue;
			r->reported = r->count;
			r->reported_at = now;
			a->node = (int)i;
			a->reason = (enum intake_reason)k;
			a->count = r->count;
			snprintf(a->detail, sizeof a->detail, "%.159s", r->detail);
			snprintf(a->example, sizeof a->example, "%.199s",
				 r->example);
			return 1;
		}
	return 0;
}

void intake_toolong(struct intake *in, int node, size_t len, int64_t now)
{
	char d[96];
	(void)now;
	snprintf(d, sizeof d, "a line of %zu bytes (at most %d)", len,
		 PROTO_MAX_LINE);
	refuse(in, node, IN_TOOLONG, "", 0, d);
}

/* ---------------------------------------------------------- rate limit */

static void refill(struct intake *in, struct node_in *nd, int64_t now)
{
	if (nd->refill_at && now > nd->refill_at) {
		nd->tokens += in->rate * (double)(now - nd->refill_at) / 1e9;
		if (nd->tokens > in->burst)
			nd->tokens = in->burst;
	}
	nd->refill_at = now;
}

int intake_rewind_due(struct intake *in, int node, int64_t now,
		      int64_t *acked)
{
	struct node_in *nd = &in->nodes[node];
	if (in->stalled || !nd->rewind)
		return 0;
	refill(in, nd, now);
	if (nd->dropping && nd->tokens < in->burst / 2)
		return 0;
	nd->rewind = 0;
	nd->dropping = 0;
	*acked = store_acked_seq(in->store, nd->name);
	return 1;
}

void intake_connected(struct intake *in, int node)
{
	struct node_in *nd = &in->nodes[node];
	/* The console's hello on the new link asks for the resend. */
	nd->dropping = 0;
	nd->rewind = 0;
	nd->link_max = 0;
}

/* ------------------------------------------------------------ stalling */

static void seqs_push(struct seqs *q, int64_t seq)
{
	if (q->n == q->cap) {
		q->cap = q->cap ? q->cap * 2 : 256;
		q->v = realloc(q->v, q->cap * sizeof *q->v);
		if (!q->v)
			abort();
	}
	q->v[q->n++] = seq;
}

static int seq_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Was seq folded before a rollback?  Then it is taken off the list. */
static int seqs_take(struct seqs *q, int64_t seq)
{
	int64_t *p;
	if (!q->n)
		return 0;
	p = bsearch(&seq, q->v, q->n, sizeof *q->v, seq_cmp);
	if (!p)
		return 0;
	memmove(p, p + 1, (size_t)(q->v + q->n - (p + 1)) * sizeof *p);
	q->n--;
	return 1;
}

static void committed(struct intake *in)
{
	in->held_len = 0;
	in->held_stored = 0;
	for (size_t i = 0; i < in->n; i++)
		in->nodes[i].fresh.n = 0;
}

static void stall(struct intake *in, const char *why, int64_t now)
{
	const char *path = store_path(in->store);
	if (!in->stalled) {
		in->stalled = 1;
		if (!in->ok_since || now - in->ok_since > FLAP_NS)
			in->stall_since = now;
		in->backoff = RETRY_MIN_NS;
	} else if (in->backoff < RETRY_MAX_NS) {
		in->backoff *= 2;
	}
	in->retry_at = now + in->backoff;
	in->held_stored = 0; /* rolled back with the batch */
	if (strstr(why, "disk is full") || strstr(why, "No space"))
		snprintf(in->stall_msg, sizeof in->stall_msg,
			 "disk full at %.500s", path);
	else
		snprintf(in->stall_msg, sizeof in->stall_msg,
			 "cannot write %.200s: %.380s", path, why);
	/* What was folded but not committed comes again: store it, do not
	 * fold it twice; every agent resends once the store is back. */
	for (size_t i = 0; i < in->n; i++) {
		struct node_in *nd = &in->nodes[i];
		for (size_t k = 0; k < nd->fresh.n; k++)
			seqs_push(&nd->redo, nd->fresh.v[k]);
		nd->fresh.n = 0;
		if (nd->redo.n)
			qsort(nd->redo.v, nd->redo.n, sizeof *nd->redo.v,
			      seq_cmp);
		nd->rewind = 1;
	}
}

const char *intake_stall(const struct intake *in, int64_t *since)
{
	if (!in->stalled)
		return NULL;
	if (since)
		*since = in->stall_since;
	return in->stall_msg;
}

static void held_push(struct intake *in, const char *line, size_t len)
{
	if (in->held_len + len + 1 > in->held_cap) {
		size_t cap = in->held_cap ? in->held_cap : 1 << 14;
		while (cap < in->held_len + len + 1)
			cap *= 2;
		in->held = realloc(in->held, cap);
		if (!in->held)
			abort();
		in->held_cap = cap;
	}
	memcpy(in->held + in->held_len, line, len);
	in->held[in->held_len + len] = '\n';
	in->held_len += len + 1;
}

/* Store the held console lines the open batch lacks. */
static int store_held(struct intake *in, struct d0_err *err)
{
	size_t off = 0;
	unsigned k = 0;
	while (off < in->held_len) {
		char *nl = memchr(in->held + off, '\n', in->held_len - off);
		size_t len = (size_t)(nl - (in->held + off));
		if (k++ >= in->held_stored) {
			int rc = store_ingest(in->store, in->held + off, len, err);
			if (rc == STORE_EDB)
				return -1;
			in->held_stored++;
		}
		off += len + 1;
	}
	return 0;
}

int intake_console(struct intake *in, const char *line, size_t len,
		   struct d0_err *err)
{
	int rc;
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	if (in->held_len + len > HELD_MAX && in->stalled)
		return 0; /* cannot hold more: the run ends incomplete anyway */
	held_push(in, line, len);
	if (in->stalled)
		return 0;
	rc = store_ingest(in->store, line, len, err);
	if (rc == STORE_EDB) {
		stall(in, err->msg, proto_now_ns());
		return 0;
	}
	if (rc < 0) {
		in->held_len -= len + 1;
		return -1;
	}
	in->held_stored++;
	return 0;
}

/* Write len bytes to path through a temporary file beside it, synced
 * before the rename: the file is whole or absent. */
static int write_whole(const char *path, const char *buf, size_t len,
		       struct d0_err *err)
{
	char tmp[4200];
	size_t off = 0;
	int fd;
	snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		d0_errf(err, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	while (off < len) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			d0_errf(err, "%s: %s", tmp,
				w < 0 ? strerror(errno) : "short write");
			goto fail;
		}
		off += (size_t)w;
	}
	if (fsync(fd)) {
		d0_errf(err, "%s: %s", tmp, strerror(errno));
		goto fail;
	}
	if (close(fd)) {
		fd = -1;
		d0_errf(err, "%s: %s", tmp, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path)) {
		d0_errf(err, "%s: %s", path, strerror(errno));
		goto fail;
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return -1;
}

int intake_save_held(struct intake *in, const char *const *paths, size_t n,
		     char *where, size_t wmax, struct d0_err *err)
{
	size_t lines = 0;
	char why[1200] = "";
	for (size_t off = 0; off < in->held_len; off++)
		lines += in->held[off] == '\n';
	if (where && wmax)
		*where = 0;
	if (!lines)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct d0_err e = {{0}};
		if (!write_whole(paths[i], in->held, in->held_len, &e)) {
			if (where)
				snprintf(where, wmax, "%s", paths[i]);
			return (int)lines;
		}
		snprintf(why + strlen(why), sizeof why - strlen(why), "%s%s",
			 *why ? "; " : "", e.msg);
	}
	d0_errf(err, "%zu console events not stored and not saved: %s",
		lines, *why ? why : "no place to save them");
	return -1;
}

int intake_load_held(struct intake *in, const char *const *paths, size_t n,
		     struct d0_err *err)
{
	int stored = 0;
	for (size_t i = 0; i < n; i++) {
		FILE *f = fopen(paths[i], "re");
		char *line = NULL;
		size_t cap = 0;
		ssize_t len;
		if (!f)
			continue;
		while ((len = getline(&line, &cap, f)) > 0) {
			while (len && (line[len - 1] == '\n' ||
				       line[len - 1] == '\r'))
				len--;
			if (!len)
				continue;
			if (store_ingest(in->store, line, (size_t)len, err) ==
			    STORE_EDB) {
				free(line);
				fclose(f);
				return -1;
			}
			stored++; /* a refused line was a console line: the
				   * store says why on its own log */
		}
		free(line);
		fclose(f);
		if (store_pending(in->store) && store_commit(in->store, err) < 0)
			return -1;
		unlink(paths[i]);
	}
	return stored;
}

int intake_commit(struct intake *in, int64_t now)
{
	struct d0_err err = {{0}};
	if (in->stalled)
		return -1;
	if (store_pending(in->store) && store_commit(in->store, &err) < 0) {
		stall(in, err.msg, now);
		return -1;
	}
	committed(in);
	return 0;
}

int intake_retry(struct intake *in, int64_t now)
{
	struct d0_err err = {{0}};
	if (!in->stalled || now < in->retry_at)
		return 0;
	if (store_held(in, &err) < 0 ||
	    (store_pending(in->store) && store_commit(in->store, &err) < 0)) {
		stall(in, err.msg, now);
		return 0;
	}
	in->stalled = 0;
	in->ok_since = now;
	committed(in);
	return 1;
}

/* --------------------------------------------------------------- lines */

enum intake_result intake_line(struct intake *in, int node, const char *line,
			       size_t len, int64_t now)
{
	struct node_in *nd = &in->nodes[node];
	struct d0_err err = {{0}};
	struct store_line seen;
	size_t bad;
	int rc;
	if (in->stalled) {
		nd->rewind = 1;
		return INTAKE_DEFERRED;
	}
	refill(in, nd, now);
	if (nd->dropping || nd->tokens < 1) {
		if (!nd->dropping) {
			char d[96];
			snprintf(d, sizeof d, "more than %.0f events/s (burst "
				 "%.0f): held back, resent later", in->rate,
				 in->burst);
			refuse(in, node, IN_RATE, line, len, d);
		} else
			in->nodes[node].why[IN_RATE].count++;
		nd->dropping = 1;
		nd->rewind = 1;
		return INTAKE_DEFERRED;
	}
	nd->tokens -= 1;
	if (!proto_utf8_valid(line, len, &bad)) {
		char d[64];
		snprintf(d, sizeof d, "invalid UTF-8 at byte %zu", bad);
		refuse(in, node, IN_UTF8, line, len, d);
		return INTAKE_REFUSED;
	}
	rc = store_ingest_from(in->store, line, len, nd->name, &seen, &err);
	if ((rc == STORE_ADDED || rc == STORE_DUPLICATE) &&
	    seen.seq > nd->link_max)
		nd->link_max = seen.seq;
	switch (rc) {
	case STORE_ADDED: {
		int again = seqs_take(&nd->redo, seen.seq);
		seqs_push(&nd->fresh, seen.seq);
		if (store_pending(in->store) >= BATCH_MAX)
			intake_commit(in, now);
		return again ? INTAKE_REDONE : INTAKE_STORED;
	}
	case STORE_DUPLICATE:
		return INTAKE_DUPLICATE;
	case STORE_CONFLICT:
		/* Below what this link already sent: the agent went back
		 * (a resend would carry the same body). */
		refuse(in, node,
		       seen.seq < nd->link_max ? IN_BACKWARDS : IN_CONFLICT,
		       line, len, err.msg);
		return INTAKE_REFUSED;
	case STORE_ENODE:
		refuse(in, node,
		       !strcmp(seen.node, CONSOLE_NODE) ? IN_RESERVED
							: IN_FORGED,
		       line, len, err.msg);
		return INTAKE_REFUSED;
	case STORE_EVERSION:
		refuse(in, node, IN_VERSION, line, len, err.msg);
		return INTAKE_REFUSED;
	case STORE_EDB:
		stall(in, err.msg, now);
		return INTAKE_DEFERRED;
	default:
		refuse(in, node, IN_NOT_EVENT, line, len, err.msg);
		return INTAKE_REFUSED;
	}
}
