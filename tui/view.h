/*
 * view.h - the view model: what the screens show at time t.
 *
 * The screen is a pure function of the event log up to t.  struct view is
 * that function's value; view_apply() is THE fold (one event in, the view
 * updated), used live (the runner hands every ingested line to live.c) and
 * in replay when playing forward.  view_seek() builds the view at any t of
 * a session file from its derived tables and indexes (docs/tui.md says
 * which query answers which field) instead of folding from zero, and must
 * give the same view as the fold: view_dump() writes every field a screen
 * shows as text, and tests/unit/test_view.c compares the two dumps.
 *
 * What the fold keeps, per event type (others only enter the log ring):
 *   sample   per node: per card mem.used/mem.peak/mem.budget/rank.rss and
 *            a ring of the last VIEW_HIST mem.used values; host memory,
 *            net rx/tx and rings of them; the node's last-seen time
 *   stage    per (node, stage_id or stage): the last event's state,
 *            progress, rc, msg and the key's first ts; a failure when an
 *            end has rc != 0.  Node "console" holds the playbook's stages.
 *   check    per (node, item): the last event; a failure on "fail"
 *   comm, numerics, perf   rows (bounded, oldest dropped)
 *   marker   (console) the markers; verdict (console) go/no-go
 * Nodes appear with their first event of any type (their seq 1 in seek).
 */
#ifndef DAY0_VIEW_H
#define DAY0_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "util.h"

#define VIEW_HIST     120  /* mem.used / net values kept per series */
#define VIEW_LOG      2000 /* event lines in the log ring */
#define VIEW_COMM     4096 /* comm rows kept */
#define VIEW_NUM      4096 /* numerics rows kept */
#define VIEW_PERF     1024 /* perf rows kept */
#define VIEW_MARKS    4096 /* markers and failures kept */
#define VIEW_STALE_NS 5000000000LL /* a node silent this long is stale */

struct proto_event;

struct view_ring {
	double v[VIEW_HIST];
	int n, head; /* values held; head = where the next one goes */
};

void view_ring_push(struct view_ring *r, double x);
/* The i-th oldest value held (0 <= i < r->n). */
double view_ring_get(const struct view_ring *r, int i);

struct view_card {
	int present;
	double used, peak, budget, rss; /* NAN when not reported yet */
	int64_t ts;			/* last sample of this card */
	struct view_ring hist;		/* mem.used */
};

struct view_node {
	char name[64];
	int64_t first_ts;	/* first event */
	int64_t last_ts;	/* last sample, stage or check */
	int64_t last_sample_ts; /* 0: none yet */
	struct view_card *cards;
	int ncards; /* slots: card numbers 0..ncards-1 (some not present) */
	double host_used, rx, tx;
	struct view_ring rx_hist, tx_hist;
};

struct view_check {
	char node[64], item[48], status[12];
	char detail[256], value[64], threshold[64];
	int64_t ts;
};

struct view_stage {
	char node[64], id[80], step[40], state[12];
	double progress;
	int has_rc, rc;
	char msg[160];
	int64_t first_ts, ts;
};

struct view_comm {
	char node[64], op[24], group[16];
	int64_t bytes, wrong, ts;
	int ranks, from, to; /* from/to: a pair's ranks, -1 otherwise */
	double time_us, algbw, busbw;
};

struct view_num {
	char node[64], level[8], name[96];
	double max_abs, max_rel, kl, top1, ppl_ref, ppl; /* NAN: absent */
	int64_t ts;
};

struct view_perf {
	char node[64], stage_id[80];
	double ttft_ms, tpot_ms, tokens_per_s; /* NAN: absent */
	int64_t prompt_tokens, gen_tokens, ts;
};

enum { VIEW_MARKER = 'm', VIEW_FAILURE = 'f' };

struct view_mark {
	int kind; /* VIEW_MARKER or VIEW_FAILURE */
	int64_t ts;
	char node[64], text[192];
};

struct view_line {
	int64_t ts;
	char *line; /* the event line as received (malloc'd) */
};

/* A bounded array: the last `cap` items pushed. */
#define VIEW_VEC(T)                                                          \
	struct {                                                             \
		T *a;                                                        \
		size_t n, cap, head; /* head: oldest when full */           \
	}

struct view {
	int64_t t;     /* the time shown (ns); events with ts <= t are in */
	int64_t start; /* session start (first event), 0 unknown */
	char name[128], model[256], playbook[128];

	struct view_node *nodes; /* sorted by name; never "console" */
	size_t nnodes, capnodes;
	struct view_check *checks; /* sorted by (item, node) */
	size_t nchecks, capchecks;
	struct view_stage *stages; /* in order of first appearance */
	size_t nstages, capstages;
	VIEW_VEC(struct view_comm) comm;
	VIEW_VEC(struct view_num) num;
	VIEW_VEC(struct view_perf) perf;
	VIEW_VEC(struct view_mark) marks; /* markers and failures, in order */
	struct view_line log[VIEW_LOG];
	size_t nlog, loghead;

	/* memory.plan: the last check's detail and its plan object, if any */
	char plan_status[12], plan_detail[256];
	json_t *plan;
	int verdict; /* -1 none, 0 no-go, 1 go */
	/* The runner holds a live run whose stages all ended with failures:
	 * the operator reruns one (r) or ends the run (q). */
	int held;
	char held_msg[160];
	char verdict_failed[192];

	int no_log;	  /* seek: view_apply leaves the log ring alone */
	uint64_t applied; /* events folded */
};

void view_init(struct view *v);
void view_free(struct view *v);
/* Empty the view (keeps name/model/playbook). */
void view_reset(struct view *v);

/* THE fold: one parsed event.  v->t moves up to its ts. */
void view_apply(struct view *v, const struct proto_event *ev);
/* Parse one event line and fold it (lines that are not events are
 * ignored: the store refused them too).  Returns 0, or -1 if refused. */
int view_apply_line(struct view *v, const char *line, size_t len);
/* Push a line into the log ring only. */
void view_log_push(struct view *v, int64_t ts, const char *line, size_t len);

/* Header fields from the session manifest (name, model, playbook). */
void view_set_manifest(struct view *v, json_t *name, json_t *model,
		       json_t *playbook);

/* Lookups (NULL when absent). */
const struct view_node *view_node(const struct view *v, const char *name);
const struct view_check *view_check(const struct view *v, const char *node,
				    const char *item);
/* The playbook stage to show in the header: the console's latest stage
 * that has not ended, else the latest running stage of any node. */
const struct view_stage *view_current_stage(const struct view *v);
/* i-th newest log line (0 = newest); NULL past the end. */
const struct view_line *view_log_get(const struct view *v, size_t i);
/* Bounded vectors: i-th oldest. */
#define VIEW_AT(vec, i) (&(vec).a[((vec).head + (i)) % (vec).cap])

/* Is the node silent at v->t (its last sample/event older than the
 * threshold)?  Age in ns through *age. */
int view_node_stale(const struct view *v, const struct view_node *n,
		    int64_t *age);

/* Every field the screens show, as text (tests compare dumps). */
void view_dump(const struct view *v, FILE *f);

/* ------------------------------------------------------------------ seek */

struct view_src;

/* A session file opened read-only for seeking (its own sqlite handle). */
int view_src_open(const char *path, struct view_src **out, struct d0_err *err);
void view_src_close(struct view_src *src);
/* First and last event ts (re-read: the file may be growing). */
int view_src_span(struct view_src *src, int64_t *first, int64_t *last);
/* The view at t, from the derived tables (no fold from zero). */
int view_seek(struct view_src *src, struct view *v, int64_t t,
	      struct d0_err *err);
/* Fold the events with from < ts <= to into v (playing forward). */
int view_forward(struct view_src *src, struct view *v, int64_t from,
		 int64_t to, struct d0_err *err);
/* Fold every event from the start up to t (the reference seek must equal). */
int view_fold_to(struct view_src *src, struct view *v, int64_t t,
		 struct d0_err *err);
/* Timeline of the whole file: markers and failures, any ts, in order.
 * Returns a new vector in *out (free()), count in *n. */
int view_src_marks(struct view_src *src, struct view_mark **out, size_t *n,
		   struct d0_err *err);
/* Manifest keys name/model/playbook into v (absent keys are left). */
void view_src_manifest(struct view_src *src, struct view *v);

#endif
