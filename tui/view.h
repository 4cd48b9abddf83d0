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
 *   sample   per node: per card mem.used/mem.peak/mem.budget/rank.rss,
 *            kv.used/kv.budget and a ring of the last VIEW_HIST mem.used
 *            values; host memory, net rx/tx and rings of them; the
 *            service figures (load.*, serve.*: enum view_svc) and a ring
 *            of load.tokens_per_s; the node's last-seen time
 *   stage    per (node, stage_id or stage): the last event's state,
 *            progress, rc, msg and the key's first ts; a failure when an
 *            end has rc != 0.  Node "console" holds the playbook's stages.
 *   check    per (item, node, stage): the last event (node: the console's
 *            `for`, else the reporting node; stage: the playbook stage of
 *            its stage_id); a failure on "fail"
 *   comm, numerics, perf, train   rows (bounded, oldest dropped)
 *   marker   (console) the markers; verdict (console) go/no-go, its ts
 *            and every item's status as the runner decided it
 *   facts    per node: the last event's fields (the Hosts screen's
 *            matrix; seek reads the session table's last one per node)
 *   node     (console) a node's state: unreachable (with why: the node
 *            appears even without events of its own), excluded, done
 *   alert    (console) refused input per (node, reason); the store's state
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
#define VIEW_TRAIN    4096 /* train rows (optimizer steps) kept */
#define VIEW_MARKS    4096 /* markers and failures kept */
#define VIEW_ITEMS    64   /* checklist items in the verdict */
#define VIEW_STALE_NS 5000000000LL /* a node silent this long is stale */
#define VIEW_PB_STAGES 64 /* playbook stages the timeline lists */

struct proto_event;

struct view_ring {
	double v[VIEW_HIST];
	int n, head; /* values held; head = where the next one goes */
};

void view_ring_push(struct view_ring *r, double x);
/* Is the metric's history kept in a ring (seek reads VIEW_HIST points)? */
int view_metric_ringed(const char *metric);
/* The i-th oldest value held (0 <= i < r->n). */
double view_ring_get(const struct view_ring *r, int i);
/* The ts of the node's i-th oldest net.rx_bps value (0 <= i < rx_hist.n). */
#define VIEW_RX_TS(n, i)                                                     \
	((n)->rx_ts[((n)->rx_hist.head - (n)->rx_hist.n + (i) + VIEW_HIST) % \
		    VIEW_HIST])

struct view_card {
	int present;
	double used, peak, budget, rss; /* NAN when not reported yet */
	double kv_used, kv_budget;	/* serve's KV cache (NAN: none) */
	int64_t ts;			/* last sample of this card */
	struct view_ring hist;		/* mem.used */
};

/* The service figures a node reports as host samples (card -1): load's
 * live figures of its current concurrency level and serve's queue; the
 * metric names are view_svc_metric[] (docs/service.md). */
enum view_svc {
	SVC_CONC, SVC_INFLIGHT, SVC_REQUESTS, SVC_RPS, SVC_TPS, SVC_ERRORS,
	SVC_STALLS,
	SVC_TTFT_P50, SVC_TTFT_P90, SVC_TTFT_P99,
	SVC_TPOT_P50, SVC_TPOT_P90, SVC_TPOT_P99,
	SVC_E2E_P50, SVC_E2E_P90, SVC_E2E_P99,
	SVC_QUEUE, SVC_RUNNING, SVC_GEN_TOKENS,
	/* serve's paged KV cache: blocks by state, preemptions so far */
	SVC_KV_USED, SVC_KV_SHARED, SVC_KV_CACHED, SVC_KV_TOTAL, SVC_PREEMPTIONS,
	SVC_ERR0, /* load.error.CLASS, VIEW_SVC_NERR of them */
	VIEW_SVC_NERR = 10,
	VIEW_SVC_N = SVC_ERR0 + VIEW_SVC_NERR
};
extern const char *const view_svc_metric[VIEW_SVC_N];
/* The error class of SVC_ERR0 + i ("http_503", "timeout", ...). */
const char *view_svc_err_class(int i);

struct view_node {
	char name[64];
	int64_t first_ts;	/* first event */
	int64_t last_ts;	/* last sample, stage or check */
	int64_t last_sample_ts; /* 0: none yet */
	struct view_card *cards;
	int ncards; /* slots: card numbers 0..ncards-1 (some not present) */
	double host_used, rx, tx;
	struct view_ring rx_hist, tx_hist;
	/* The ts of each rx_hist value (same slots): the Overview lines the
	 * collectives' comm events up with the NIC samples' ticks. */
	int64_t rx_ts[VIEW_HIST];
	/* Service figures (NAN: not reported); has_svc: any of them, or a
	 * card's kv.used.  tps_hist: load.tokens_per_s. */
	double svc[VIEW_SVC_N];
	int has_svc;
	struct view_ring tps_hist;
	/* The console's word on the node ("node" events): "" (in the run),
	 * unreachable, excluded or done (its agent said bye), and why. */
	char state[16], why[160];
	int sim; /* its agent simulates: hello with sim: true */
	/* Its last facts event's fields, without the envelope (NULL: none
	 * yet): the Hosts screen's compatibility matrix. */
	json_t *facts;
	/* Its stages: indexes into view.stages, in order of appearance
	 * (the screens ask per node; a fleet has thousands of stages). */
	uint32_t *stix;
	size_t nstix, capstix;
};

struct view_check {
	char node[64], item[48], status[12], stage[80];
	char detail[256], value[64], threshold[64];
	int64_t ts;
};

struct view_stage {
	char node[64], id[80], step[40], state[12];
	char result[12]; /* the console's end: done, failed, skipped, ... */
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
	/* a stage's own collectives over an interval (soak's "interval_s"):
	 * the Overview's bus bandwidth, not a sweep (the Comm screen skips
	 * them); bytes is then the mean of one call */
	int inrun;
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
	/* load's level (concurrency -1: not a load level): requests/s and
	 * the p50/p90/p99 latencies in ms (NAN: absent), the counts (-1:
	 * absent) and the error classes that occurred ("http_503 3 ...") */
	int concurrency;
	double requests_per_s, ttft_p[3], tpot_p[3], e2e_p[3];
	int64_t requests, errors, stalls;
	char classes[128];
};

/* One optimizer step of a fine-tuning run (`train` event): the run is
 * (node, stage_id); every rank may report (rank -1: none said). */
struct view_train {
	char node[64], stage_id[80], layout[32];
	int rank, skipped;
	int64_t step, tokens, ts; /* tokens -1: absent */
	double loss, grad_norm, loss_scale, lr; /* NAN: absent */
	double t_fwd, t_bwd, t_opt, t_comm;	/* seconds; NAN: absent */
};

enum { VIEW_MARKER = 'm', VIEW_FAILURE = 'f' };

struct view_mark {
	int kind; /* VIEW_MARKER or VIEW_FAILURE */
	int64_t ts;
	char node[64], text[192];
};

/* Input the console refused from a node (or held back: rate), per
 * reason: the last `alert` event's count. */
#define VIEW_ALERTS 256
/* How far before the console's first event a node's event may be and
 * still start the session (ns). */
#define VIEW_CLOCK_SKEW 3600000000000LL
struct view_alert {
	char node[64], reason[48];
	uint64_t count;
	int rate; /* kind "rate" (deferred, not refused) */
};

/* text.generation: the prompt, the run's greedy text and the float64
 * reference's (fields of validate's text.generation check); the last
 * one wins.  n == 0: none yet. */
struct view_text {
	char node[64], prompt[256], text[256], ref_text[256];
	int agree, n;
};

/* perf.image: the TTFT split of an image prompt (fields of image-check's
 * check: p50 [0] and p99 [1] of each part, ms); the last one wins.  n ==
 * 0: none yet. */
struct view_image {
	char node[64];
	int n;
	double pre[2], enc[2], fill[2], ttft[2];
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
	int64_t start; /* session start (earliest event, on the console's
			* clock: see note_start), 0 unknown */
	int start_console; /* the console's first event has been seen */
	char name[128], model[256], playbook[128];
	/* The playbook's stage ids in order (the manifest's playbook): the
	 * timeline shows the ones that have not started as pending. */
	char pb_stages[VIEW_PB_STAGES][80];
	int npb_stages;
	json_t *labels; /* node -> its inventory labels ("a,b"); manifest */
	/* The playbook's stages (the manifest's document): which items each
	 * declares, so that before the verdict an item whose stages have all
	 * ended without evidence reads "not run", as the verdict will. */
	json_t *pb_doc_stages;

	struct view_node *nodes; /* sorted by name; never "console" */
	size_t nnodes, capnodes;
	struct view_check *checks; /* sorted by (item, node, stage) */
	size_t nchecks, capchecks;
	struct view_stage *stages; /* in order of first appearance */
	size_t nstages, capstages;
	/* (node, id) -> stage index + 1, open addressing; capacity a power
	 * of two, at least twice nstages (0: not built yet) */
	uint32_t *stage_hash;
	size_t stage_hcap;
	VIEW_VEC(struct view_comm) comm;
	VIEW_VEC(struct view_num) num;
	VIEW_VEC(struct view_perf) perf;
	VIEW_VEC(struct view_train) train;
	struct view_text text;
	struct view_image image;
	VIEW_VEC(struct view_mark) marks; /* markers and failures, in order */
	struct view_line log[VIEW_LOG];
	size_t nlog, loghead;
	/* called with each line the ring drops to make room (the live
	 * console's Log filter keeps the ones it matches: log_search.h) */
	void (*log_evict)(void *arg, const struct view_line *l);
	void *log_evict_arg;

	/* memory.plan: the last check's detail and its plan object, if any */
	char plan_status[12], plan_detail[256];
	json_t *plan;
	int sim_nodes; /* nodes whose hello says sim: true (simulated) */
	int verdict; /* -1 none, 0 no-go, 1 go */
	int64_t verdict_ts; /* 0: none; the run's clock stops there */
	/* The runner holds a live run whose stages all ended with failures:
	 * the operator reruns one (r) or ends the run (q). */
	int held;
	char held_msg[160];
	char verdict_failed[192];
	/* the verdict's item statuses (verdict.h), in checklist order */
	struct view_item {
		char item[48], status[12];
		int optional; /* the verdict's "optional": not required */
	} items[VIEW_ITEMS];
	size_t nitems;
	/* The console's alerts: refusals per (node, reason), the store */
	struct view_alert alerts[VIEW_ALERTS];
	size_t nalerts;
	char store_alert[192]; /* "" unless the session file is not writable */

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
/* Fold an event parsed from line (len bytes, as view_apply_line takes
 * it): what view_apply_line does once the line is parsed. */
void view_apply_parsed(struct view *v, const struct proto_event *ev,
		       const char *line, size_t len);
/* Push a line into the log ring only. */
void view_log_push(struct view *v, int64_t ts, const char *line, size_t len);

/* Header fields from the session manifest (name, model, playbook). */
void view_set_manifest(struct view *v, json_t *name, json_t *model,
		       json_t *playbook);

/* The manifest's node -> labels object (a new reference is taken). */
void view_set_labels(struct view *v, json_t *labels);
/* A node's inventory labels, "" when none. */
const char *view_node_labels(const struct view *v, const char *node);

/* Lookups (NULL when absent). */
const struct view_node *view_node(const struct view *v, const char *name);
/* Has a later attempt of the same playbook stage on the same node (a
 * rerun: "ID.n", checklist_stage_of) superseded agent stage s?  Then its
 * failure is history, not the node's state (the screens show the latest
 * attempt). */
int view_stage_superseded(const struct view *v, const struct view_stage *s);
/* The node's i-th stage (0 <= i < n->nstix), in order of appearance. */
#define VIEW_NODE_STAGE(v, n, i) (&(v)->stages[(n)->stix[(i)]])
/* The worst of the item's evidence on node over its stages. */
const struct view_check *view_check(const struct view *v, const char *node,
				    const char *item);
/* The item's status: the verdict's once there is one, else the worst of
 * its evidence so far; NULL when there is neither. */
const char *view_item_status(const struct view *v, const char *item);
/* Is item one the verdict says the playbook does not require? */
int view_item_optional(const struct view *v, const char *item);
/* The playbook stage to show in the header: the console's latest stage
 * that has not ended, else the latest running stage of any node. */
const struct view_stage *view_current_stage(const struct view *v);
/* i-th newest log line (0 = newest); NULL past the end. */
const struct view_line *view_log_get(const struct view *v, size_t i);
/* Bounded vectors: i-th oldest. */
#define VIEW_AT(vec, i) (&(vec).a[((vec).head + (i)) % (vec).cap])

/* Lines refused from a node (all reasons), and the reason of the latest
 * alert (NULL when none). */
uint64_t view_node_refused(const struct view *v, const char *node,
			   const char **reason);
/* A stage's progress 0..1 from its agents' stage events (the mean over
 * the nodes running stage_id or its attempts "ID.n"); the console's own
 * when no agent has reported one.  *eta_ns (may be NULL): the time left
 * at the rate so far, -1 when unknown. */
double view_stage_progress(const struct view *v, const struct view_stage *cs,
			   int64_t *eta_ns);

/* Is the node silent at v->t (its last sample/event older than the
 * threshold)?  Age in ns through *age.  A node the console has a word for
 * (done, unreachable, excluded) and every node after the verdict are not
 * silent: there is nothing to wait for. */
int view_node_stale(const struct view *v, const struct view_node *n,
		    int64_t *age);

/* The run's elapsed time at v->t: it stops at the verdict. */
int64_t view_elapsed(const struct view *v);

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
