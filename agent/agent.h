/*
 * agent.h - day0-agent's insides (the agent module's interface for the
 * console is proto.h; this header is for the agent's own files only).
 *
 * The agent is one process and one poll loop (agent.c) over: stdin
 * (commands), the pipes of every running stage (stage.c), a signalfd
 * (children, termination) and a timeout that drives the samplers
 * (sample.c) and heartbeats.  Every event goes through agent_emit() or
 * agent_forward(): it gets the next seq, is appended to the spool
 * (spool.c) and reaches stdout only after the spool batch it belongs to
 * is written and fdatasync'd, so anything the console has seen survives
 * the agent.  Commands are a table (commands.c) of one file each
 * (cmd_*.c); accelerators are vendor units (cards*.c), nvtop-style.
 */
#ifndef DAY0_AGENT_H
#define DAY0_AGENT_H

#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

#define AGENT_MAX_STAGES 64
#define STAGE_ID_MAX	 64

struct agent_config {
	char node[256];
	char spool_dir[4096];
	double sample_hz;   /* 0: no samplers */
	double heartbeat_s; /* idle time before a heartbeat */
	char engine[4096];  /* day0-engine to run */
	char mpirun[4096];
	int cards;	   /* CPU cards (when NVML is absent or not chosen) */
	uint64_t card_mem; /* bytes per CPU card; 0: MemTotal / cards */
	char vendor[16];   /* auto, cpu, nvml */
	int fsync;	   /* fdatasync the spool before sending (default) */
	int takeover;	   /* stop an agent still holding the spool */
	char net_if[256];  /* interfaces to count ("": all but lo) */
	/* the console's session tag: its stages' processes carry it
	 * (DAY0_SESSION), and only ranks that carry it are this node's
	 * cards ("": any, an agent run by hand) */
	char session[128];
};

/* ------------------------------------------------------------------ spool */

/*
 * The spool: DIR/spool.jsonl holds a header line (node, acked seq) and
 * every event not yet acked, in seq order; DIR/lock keeps a second agent
 * out.  Events are appended in batches (spool_append, then spool_commit:
 * one write and one fdatasync); stdout is fed from the committed part of
 * the file (spool_send), so a resend is only a cursor move.
 */
struct spool {
	char *dir, *path;
	int fd, lockfd, dirfd;
	char node[256];
	int64_t acked, last_seq;
	uint64_t header_len; /* bytes of the header line */
	uint64_t end;	     /* bytes written to the file */
	uint64_t committed;  /* bytes written and synced: may be sent */
	uint64_t cursor;     /* next byte to send, on a line boundary */
	char *tail;          /* the rest of a line a short write cut */
	size_t tail_len, tail_off, tail_cap;
	char *batch;	     /* appended, not yet written */
	size_t blen, bcap;
	uint64_t *off; /* off[head + i]: offset of event acked+1+i */
	size_t head, noff, cap;
	int fsync;
	unsigned compactions;
};

/* takeover: SIGTERM the day0-agent holding the spool and wait for it. */
int spool_open(struct spool *sp, const char *dir, const char *node, int fsync,
	       int takeover, struct d0_err *err);
void spool_close(struct spool *sp);
/* The seq the next appended event gets. */
int64_t spool_next_seq(const struct spool *sp);
/* Append one formatted event line (with its '\n') to the batch. */
void spool_append(struct spool *sp, const char *line, size_t len);
/* Write and sync the batch; on failure the file is as before the call
 * and the batch is kept for a retry. */
int spool_commit(struct spool *sp, struct d0_err *err);
/* Everything up to seq is stored by the console. */
int spool_ack(struct spool *sp, int64_t seq, struct d0_err *err);
/* Send again everything after the last ack. */
void spool_rewind(struct spool *sp);
/* Bytes committed but not yet sent. */
uint64_t spool_unsent(const struct spool *sp);
/* Write committed bytes to fd; -1 with errno (EAGAIN: try later). */
ssize_t spool_send(struct spool *sp, int fd);
/* Drop the acked prefix from the file (tmp file + rename). */
int spool_compact(struct spool *sp, struct d0_err *err);
/* Run records of stages (DIR/stage-ID.run) for restart recovery. */
char *spool_stage_path(const struct spool *sp, const char *stage_id);

/* ------------------------------------------------------------------ cards */

struct card {
	char name[128];
	uint64_t mem_bytes;  /* capacity (the budget of a CPU card) */
	/* last refresh; the high-water mark of the spool's event stream
	 * (an agent restarted on the spool carries on from DIR/peaks) */
	uint64_t used, peak;
	uint64_t saved; /* the peak DIR/peaks holds */
};

/* Memory of the ranks of running stages (for CPU cards and rank.rss). */
struct rank_mem {
	int rank;
	uint64_t rss, hwm;
};

struct cards;

/* One accelerator vendor, nvtop's struct gpu_vendor shape. */
struct card_vendor {
	const char *name;
	/* 0 and c->n cards, or -1 with why (not present, no cards). */
	int (*init)(struct cards *c, const struct agent_config *cfg,
		    struct d0_err *why);
	void (*shutdown)(struct cards *c);
	/* Refresh c->card[i].used for every card. */
	int (*refresh)(struct cards *c, const struct rank_mem *ranks,
		       size_t nranks);
};

struct cards {
	const struct card_vendor *vendor;
	int n;
	struct card *card;
	void *priv;
	int peak_rose; /* a peak rose since the last cards_save_peaks */
};

extern const struct card_vendor card_vendor_nvml;
extern const struct card_vendor card_vendor_cpu;
/* The NVIDIA driver's version and its CUDA version, "none" without NVML
 * (cards_nvml.c; facts). */
void nvml_versions(char *driver, size_t dcap, char *cuda, size_t ccap);

/* Pick the vendor cfg->vendor names (auto: NVML when it loads and has
 * cards, else CPU cards). */
int cards_init(struct cards *c, const struct agent_config *cfg,
	       struct d0_err *err);
void cards_refresh(struct cards *c, const struct rank_mem *ranks,
		   size_t nranks);
void cards_shutdown(struct cards *c);
/*
 * The cards' high-water marks outlive the agent in DIR/peaks (spool_dir):
 * a restarted agent (killed, its connection lost) goes on from them, so
 * mem.peak never drops within one event stream; a new spool starts from
 * none.  Best effort: a mark lost in a crash only understates the peak
 * until the next refresh.
 */
void cards_load_peaks(struct cards *c, const char *dir, int fresh_spool);
void cards_save_peaks(struct cards *c, const char *dir);

/* ------------------------------------------------------------------ stage */

struct agent;

struct stage_stream {
	int fd;
	int is_err;
	/* mpirun --tag-output framing */
	char tag[48];
	size_t taglen;
	int cur;		   /* index into lines: rank + 1; 0 untagged */
	struct proto_lines *lines; /* per rank + 1 (one when not MPI) */
	int nlines;
};

enum stage_stop { STOP_NONE, STOP_CANCEL, STOP_TIMEOUT, STOP_SHUTDOWN };

/* Why a stage failed (cause.c): per rank the last CAUSE_KEEP error lines
 * (stderr and the engine's `error` events), and the first real cause. */
#define CAUSE_KEEP     3
#define CAUSE_LINE_MAX 400

struct cause_rank {
	int rank; /* -1: mpirun itself */
	int nline, head;
	char line[CAUSE_KEEP][CAUSE_LINE_MAX];
};

struct stage_cause {
	char first[CAUSE_LINE_MAX]; /* "" until an error line is seen */
	int first_rank;
	struct cause_rank *ranks;
	size_t n, cap;
};

/* Keep one error line of rank (mpirun's help text is dropped). */
void cause_note(struct stage_cause *c, int rank, const char *line, size_t len);
/* Is this one of mpirun's boilerplate lines (never a cause)? */
int cause_is_boilerplate(const char *line);
/* Add "cause" ("rank R on NODE: line") and "errors" to a stage end. */
void cause_to_json(const struct stage_cause *c, const char *node, json_t *end);
void cause_free(struct stage_cause *c);

struct stage {
	char id[STAGE_ID_MAX + 1];
	char step[64];
	int exec, mpi, np;
	pid_t pid; /* session leader: mpirun, day0-engine or the exec argv */
	unsigned long long start_ticks; /* /proc starttime of pid */
	int exited, status;
	double t_start, deadline, kill_at, exit_seen;
	/* stopping: 1 the ranks had SIGTERM (mpirun's stage), 2 the whole
	 * session had it, 3 SIGKILL; t_term, t_kill: when the first SIGTERM
	 * and SIGKILL went; killed: processes SIGKILL found still running
	 * (the end event says so) */
	int stop_phase, killed;
	double t_term, t_kill;
	enum stage_stop stop;
	double timeout_s;
	struct stage_stream out, err;
	int64_t *src_seq; /* last engine seq per rank */
	int nsrc;
	struct pid_rank *pr; /* pid -> rank cache for samplers */
	size_t npr, cappr;
	char *runfile;
	char *ranks; /* cluster stage: the rank map ("n1:2,n2:2"), else NULL */
	int rehearsal; /* the console said so: checks become rehearsal.ITEM */
	struct stage_cause cause;
	/* a service (`ready`): the URL polled until it answers, then the
	 * stage reports progress "ready" and keeps running */
	char *ready_url;
	double ready_timeout, ready_next;
	int ready_done;
	/* --sim-model: `day0-engine simulate STEP` runs instead of STEP */
	int sim, sim_ready;
};

struct pid_rank {
	pid_t pid;
	unsigned long long start;
	int rank; /* -1: not a rank (mpirun itself) */
	int seen;
};

/* Start a stage from a validated run command; emits its start (or start
 * and end when it cannot run).  NULL when it did not start. */
struct stage *stage_start(struct agent *a, json_t *cmd);
/* Read what the stage's pipes have; forward events and log lines. */
void stage_read(struct agent *a, struct stage *st, struct stage_stream *s);
/* SIGTERM the stage now (under mpirun: its ranks first, mpirun after
 * a grace) and SIGKILL what is left after the grace (stage.c). */
void stage_stop(struct agent *a, struct stage *st, enum stage_stop why);
/* Time-driven work: timeouts, kill escalation, pipes held open. */
void stage_tick(struct agent *a, struct stage *st, double now);
/* Done (exited and pipes closed): emit the end event. */
int stage_done(const struct stage *st);
void stage_finish(struct agent *a, struct stage *st);
void stage_free(struct stage *st);
/* Kill every process of session sid (leader pid, started at start). */
int session_kill(pid_t sid, unsigned long long start, int sig);
/* Restart recovery: stages a previous agent left running. */
void stage_recover(struct agent *a);

/* --------------------------------------------------------------- samplers */

/* A process of a cluster stage started elsewhere, running on this host. */
struct foreign_rank {
	pid_t pid;
	unsigned long long start;
	int card; /* this node's card; < 0: not ours (cached, not reread) */
	char stage_id[STAGE_ID_MAX + 1];
	int seen, reads;
};

struct sampler {
	double last_t;
	struct foreign_rank *fr;
	size_t nfr, capfr;
	uint64_t rx, tx;
	int have_net;
	uint64_t mem_total;
};

void sampler_init(struct sampler *s);
/* One tick: host memory, NIC rates, per-rank RSS, card memory. */
void sampler_tick(struct agent *a);
/* Parse helpers, exposed for the unit tests. */
int proc_meminfo(const char *text, uint64_t *total, uint64_t *avail);
int proc_netdev(const char *text, uint64_t *rx, uint64_t *tx);
/* The same over the interfaces in ifaces (comma-separated; NULL or "":
 * every interface but lo). */
int proc_netdev_if(const char *text, const char *ifaces, uint64_t *rx,
		   uint64_t *tx);
int proc_stat_session(const char *text, pid_t *sid, unsigned long long *start);
int proc_status_mem(const char *text, uint64_t *rss, uint64_t *hwm);
int proc_environ_rank(const char *env, size_t len);
/* env (NUL-separated, len bytes): KEY's value into out; -1 when absent or
 * longer than max - 1. */
int proc_environ_get(const char *env, size_t len, const char *key, char *out,
		     size_t max);

/* ranks.c: world rank -> this node's card under a cluster stage's rank map
 * ("n1:2,n2:2", hostfile order): the local index, or one of these. */
enum { RANK_UNMAPPED = -2, RANK_ELSEWHERE = -1 };
int rank_card(const char *ranks, int rank, const char *node);

/* ------------------------------------------------------------------ facts */

/* The facts event's fields for dir (NULL: the current directory). */
json_t *facts_collect(struct agent *a, const char *dir);
/* Check facts against a playbook's require object: pass/warn/fail. */
void facts_check(json_t *facts, json_t *require, const char **status,
		 char *detail, size_t cap, int *problems);

/* ------------------------------------------------------------------ agent */

struct agent {
	struct agent_config cfg;
	struct spool spool;
	struct cards cards;
	struct sampler sampler;
	struct stage *stages[AGENT_MAX_STAGES];
	int nstages;
	int in_fd, out_fd, out_nonblock, out_dead;
	struct proto_lines in;
	int sigfd;
	char engine_version[128];
	char engine_build[64]; /* the engine's "build ID" line (facts) */
	double last_emit, next_sample, next_heartbeat, spool_retry;
	int spool_ok;
	int quitting;	 /* exit once no stage runs */
	int stop_stages; /* and stop them now (bye, signals) */
	const char *quit_reason;
	char **unlink_after_commit;
	size_t nunlink;
};

/*
 * Emit an event of type with fields (stolen; may be NULL) stamped with the
 * next seq, the node and ts (0: now).  A line over the limit becomes an
 * error event that says so.
 */
void agent_emit(struct agent *a, const char *type, json_t *fields, int64_t ts);
/* An error event: msg, and the command name / bad line when known. */
void agent_error(struct agent *a, const char *cmd, const char *line, size_t len,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The same for a run or facts command the agent refused: the event
 * carries the stage_id it named (none if it named none, or one longer
 * than any the console sends), so the console ends that stage's task and
 * no other. */
void agent_refuse(struct agent *a, const char *cmd, const char *stage_id,
		  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A JSON string of text that may not be UTF-8 (bytes as \xNN). */
json_t *agent_text(const char *s);
void agent_log(struct agent *a, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Remove path once the events emitted so far are committed. */
void agent_unlink_after_commit(struct agent *a, char *path);
struct stage *agent_find_stage(struct agent *a, const char *id);
double agent_now(void); /* monotonic seconds */

/* Run the agent until bye, end of input or a signal; the exit status. */
int agent_run(struct agent *a);

/* --------------------------------------------------------------- commands */

struct agent_cmd {
	const char *name;
	void (*run)(struct agent *a, struct proto_cmd *cmd);
};

extern const struct agent_cmd cmd_hello, cmd_facts, cmd_run, cmd_cancel,
    cmd_ack, cmd_bye;
/* Indexed by enum proto_cmd_kind. */
extern const struct agent_cmd *const agent_cmds[];

void agent_hello(struct agent *a); /* the hello event */

#endif
