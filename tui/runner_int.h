/*
 * runner_int.h - what the runner's files share (not an interface: runner.h
 * is).  runner.c was one 2.9k-line file; it is split by concern:
 *   runner.c         the poll loop and runner_main (set-up, --resume)
 *   runner_ingest.c  agent lines in, absorbed; console events; commits,
 *                    acks, the manifest; links kept up
 *   runner_sched.c   tasks, stages, retries, skips; the operator's keys
 *   runner_cmd.c     the command a stage becomes (engine step, exec,
 *                    mpirun line) and --check's printing
 *   runner_vars.c    ${var} expansion
 *   runner_out.c     headless output, the CHECK table, the verdict, --json
 * struct run is the state they all read and change.
 */
#ifndef DAY0_RUNNER_INT_H
#define DAY0_RUNNER_INT_H

#include "cluster.h"
#include "intake.h"
#include "link.h"
#include "live.h"
#include "nodeset.h"
#include "notify.h"
#include "proto.h"
#include "runner.h"
#include "store.h"
#include "verdict.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

enum task_state {
	T_WAIT, /* stage started, command not sent yet */
	T_SENT, /* command sent, no start seen */
	T_RUNNING,
	T_DONE,
	T_FAILED,
};

enum stage_state { S_WAIT, S_RUNNING, S_DONE, S_FAILED, S_SKIPPED };

extern const char *const stage_state_names[]; /* by enum stage_state */

struct task {
	int stage, node;
	enum task_state st;
	int attempt;	 /* 1, 2, ... (sid "ID" then "ID.2", ...) */
	int interrupted; /* reruns owed to lost/shutdown ends */
	int cancelled;	 /* the operator cancelled it: never run again */
	char sid[80];
	int rc;
	char msg[512];
	uint64_t sent_order; /* per node, to match an agent's error event */
	int sent_link;	     /* the node's link_gen it was sent on */
	json_t *checks;	     /* item -> {"status","detail","value"} */
	json_t *argv;	     /* the argv the agent reported it ran */
};

struct node {
	struct inv_node *inv;
	struct link *link;
	int failed;   /* unreachable or gave up: excluded */
	int excluded; /* failed a stage under max_fail_percentage */
	char why[512];
	int64_t ack_sent;
	int64_t lost_at;  /* ns; connection lost, reconnecting */
	int64_t retry_at; /* ns; next reconnect attempt */
	int reconnects;
	int hello; /* hello seen on the current link */
	int agent_pid;	      /* of the last hello absorbed (0: none) */
	int link_gen;	      /* links opened to it so far */
	int64_t resend_after; /* seq of a new agent's hello after a loss:
			       * its lost commands go once the store holds
			       * every seq below it (resend_lost_commands) */
	int sim;   /* its agent simulates (hello with sim: true) */
	int said_bye;
	json_t *facts; /* its last facts event's fields (facts.compat) */
	char spool[PATH_MAX];
	uint64_t sends;
};

struct stage_rt {
	enum stage_state st;
	int *tasks; /* indices into run.tasks */
	size_t n_tasks;
	int64_t t0, t1;
	char msg[512];
};

struct run;
/* Nodes whose agents simulate (day0-agent --simulate / --sim-model). */
size_t run_simulated(const struct run *r);

struct run {
	const struct runner_opts *o;
	struct playbook pb;
	struct inventory inv;
	json_t *inv_doc;
	struct store *store;
	struct intake *intake; /* the door: binding, refusals, commits */
	int incomplete;	       /* the store stayed stalled: no verdict */
	int held_saved;	       /* console events saved beside it (count) */
	char held_where[PATH_MAX]; /* ... in this file; "" when none */
	int stall_said;	       /* 1 stall announced, 2 and its end */
	int stalled_alert;     /* the current stall has its alert event */
	int64_t store_ok_at;   /* the store's last recovery */
	int decided;	       /* the verdict is written */
	char session[PATH_MAX];
	char name[128];
	char tag[96]; /* session stem + random: spool and work names */
	char work[PATH_MAX];
	char work_buf[PATH_MAX]; /* a node's ${work} */
	char agent[PATH_MAX];
	json_t *vars; /* -e, owned */
	struct node *nodes;
	size_t n_nodes;
	struct stage_rt *stages;
	struct task *tasks;
	size_t n_tasks, cap_tasks;
	int64_t console_seq;
	int replaying;	/* --resume: folding stored events, no actions */
	int connecting; /* before the first stage: links coming up */
	int64_t t_start;
	int64_t last_commit;
	int stopping; /* no new stages (fail-fast, cancel) */
	int cancelled;
	int finished;
	int quit; /* the operator quit the live screen after the verdict */
	int held; /* live: all stages ended with failures, operator decides */
	int go;
	struct live *live;
	FILE *out; /* headless lines; NULL in TUI mode */
	/* evidence per (item, stage, node, rank): the checklist's rows
	 * (verdict.h); "item\nstage\nnode" -> status last said */
	json_t *evidence, *said;
	json_t *pending; /* headless: "text" -> [nodes] to print folded */
	int64_t pending_since;
	/* the node currently being fed, for the vars lookup */
	int cur_node, cur_stage;
	char buf[64];
};

/* Copy with truncation (snprintf "%s" draws truncation warnings). */
static inline void scpy(char *d, size_t n, const char *s)
{
	size_t k = strlen(s);
	if (k >= n)
		k = n - 1;
	memcpy(d, s, k);
	d[k] = 0;
}

/* Commit (then ack) at least this often: an uncommitted event is still
 * in its agent's spool, and every commit rewrites each page it touched
 * (a fleet's card series touch one page per card), so a longer interval
 * writes less.  1 s: half the pages of 0.5 s at 128 nodes. */
#define COMMIT_NS 1000000000LL
/* In steady state (every link up) the loop gathers lines for this long
 * between wake-ups, so one pass over the links services many at once:
 * at 128 nodes it woke ~570 times a second for ~1,200 events. */
#define LOOP_BATCH_NS 8000000LL

static inline int64_t now_ns(void)
{
	return proto_now_ns();
}

/* A link's callback argument: which node of which run (one per node). */
struct line_ctx {
	struct run *r;
	int node;
};
extern struct line_ctx *line_ctx;

/* The runner's functions, by file (see above). */
double since(struct run *r, int64_t ts);
void say(struct run *r, const char *text, const char *node);
char *fold_array(json_t *a);
void flush_said(struct run *r, int force);
void console_event(struct run *r, const char *type, json_t *fields);
void alert(struct run *r, const char *kind, const char *node, const char *what,
	   const char *why);
void console_log(struct run *r, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *node_work(struct run *r, const struct node *nd);
const char *lookup_var(void *arg, const char *name);
int var_nested(void *arg, const char *name);
char *expand(struct run *r, const char *s, const char *where,
	     struct d0_err *err);
json_t *expand_list(struct run *r, char **list, size_t n, const char *what,
		    struct d0_err *err);
int cluster_world(struct run *r);
int stage_first_node(struct run *r);
size_t cluster_nodes(struct run *r, const struct inv_node **out);
json_t *cluster_mpirun_args(struct run *r, const struct pb_stage *st);
void cluster_ssh(struct run *r, json_t *c);
json_t *task_command(struct run *r, struct task *t, struct d0_err *err);
json_t *command_argv(struct run *r, json_t *cmd);
void shell_join(json_t *argv, FILE *f);
char **agent_argv(struct run *r, struct node *nd);
void free_argv(char **a);
void node_connect(struct run *r, size_t i);
void send_json(struct run *r, struct node *nd, json_t *cmd);
struct task *find_task(struct run *r, int node, const char *sid);
void task_sid(struct run *r, struct task *t);
int is_final(const struct task *t);
void send_task(struct run *r, struct task *t);
int judge_checks(struct run *r, struct task *t, char *why, size_t max);
void task_again(struct run *r, struct task *t, const char *text);
void task_ended(struct run *r, struct task *t, int rc, const char *reason,
		const char *msg, const char *cause);
void note_check(struct run *r, const char *node, const char *stage, json_t *o);
/* runner_compat.c: a facts stage's tasks all ended: facts.compat across
 * its nodes, when the stage declares it; returns 1 when it failed a
 * required item (why in msg). */
int compat_stage_end(struct run *r, int s, char *msg, size_t max);
void forget_evidence(struct run *r, const char *stage, const char *node);
struct task *oldest_sent(struct run *r, int node);
void absorb(struct run *r, int node, struct proto_event *ev);
void absorb_console(struct run *r, struct proto_event *ev);
int node_index(struct run *r, const char *name);
/* node: the link's node index the line came on, -1 for the console's */
void fold_line(struct run *r, int node, const char *line, size_t len);
void feed_console(struct run *r, const char *line, size_t len);
void on_agent_line(void *arg, const char *line, size_t len);
void on_agent_toolong(void *arg, size_t len);
void add_task(struct run *r, int s, int node);
void start_stage_on(struct run *r, int s, json_t *nodes);
json_t *stage_nodes(struct run *r, const struct pb_stage *st,
		    struct d0_err *err);
void end_stage(struct run *r, int s, enum stage_state st, const char *msg);
void start_stage(struct run *r, int s);
int settle_stage(struct run *r, int s);
int all_links_settled(struct run *r);
void schedule(struct run *r);
void cancel_stage_tasks(struct run *r, int s);
void cancel_all(struct run *r);
void show_running(struct run *r);
void op_cancel_stage(void *arg, const char *stage_id);
void stage_reset(struct run *r, size_t k);
void op_rerun_stage(void *arg, const char *stage_id);
void op_marker(void *arg, const char *note);
void op_quit(void *arg);
json_t *run_checklist(struct run *r);
void print_item(FILE *f, json_t *it);
void print_checklist(struct run *r, FILE *f);
void print_reasons(FILE *f, const char *what, json_t *list);
void print_summary(struct run *r, FILE *f);
void print_json(struct run *r, FILE *f);
void decide(struct run *r);
int write_manifest(struct run *r);
void write_manifest_end(struct run *r);
void commit_and_ack(struct run *r);
void tend_links(struct run *r);
void say_store(struct run *r, const char *fmt, const char *what);
void tend_store(struct run *r, int64_t t);
void tend_intake(struct run *r);
int some_required_failed(struct run *r);
void loop(struct run *r);
int load_inventory_doc(struct run *r, const char *path);
void node_spool(struct run *r, struct node *nd);
void make_tag(struct run *r);
void print_check(struct run *r, FILE *f);
void run_free(struct run *r);
int replay_stored(void *arg, const struct store_event *e);
int resume_setup(struct run *r, char *pb_tmp, char *inv_tmp);
int check_var_values(struct run *r);
int check_stage_layouts(struct run *r);
const char *console_user(void);
int check_stage_sets(struct run *r);
void warn_free_space(struct run *r);

#endif
