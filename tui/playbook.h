/*
 * playbook.h - playbook files (docs/playbooks.md).
 *
 * A playbook is a JSON object:
 *   {"name": "release-day", "description": "...",
 *    "model": "/models/NEW",                 default for --model
 *    "inventory": "cluster.json",            default for --inventory
 *    "vars": {"prompt": "1,2,3"},            ${prompt} in args
 *    "policy": {"fail_fast": true} | {"max_fail_percentage": 25},
 *    "stages": [
 *      {"id": "verify", "step": "verify", "on": "all", "needs": ["facts"],
 *       "args": ["${model}", "--threads", "2"], "timeout": 600,
 *       "retries": 1, "required": true, "description": "...",
 *       "checks": {"weights.integrity": {"required": true},
 *                  "comm.bandwidth": {"min": 10.0}}},
 *      {"id": "comm", "step": "comm", "on": "cluster", "np": 0, ...},
 *      {"id": "ref", "step": "exec", "on": "first",
 *       "argv": ["python3", "dump.py"], "cwd": "/opt"},
 *      {"id": "facts", "step": "facts", "on": "all",
 *       "require": {"cores": 2}}]}
 *
 * step: an engine step (day0-engine STEP), "facts" (the agent's facts
 * command) or "exec" (argv).  on: "all" (every node, one command each),
 * "first" (the first node), "cluster" (one mpirun across the nodes,
 * started by the first node's agent; np 0 = every card of every node), or
 * a node set ("n[01-04]") of inventory names.
 *
 * Variables in args/argv/mpirun_args/cwd (playbook_builtins): ${model},
 * ${work} (the session's work directory on the node), ${session},
 * ${node}, ${cards} (cards on the node), ${card_mem} (bytes per card),
 * ${world} (cards in the stage: every card of the stage's nodes), ${nodes}
 * (node count), and the playbook's vars (command line -e K=V wins).  A
 * reference to anything else is refused at load time, so a playbook
 * declares every variable it uses in "vars" with its default; vars may
 * be strings or integers (kept as strings) and may not shadow a built-in.
 * $$ is a literal $.
 *
 * Checks: items the stage must produce; a stage that ends without a
 * required item fails it; min/max apply to the check's numeric value.
 * Stage `required` false: its failures do not decide the verdict.
 *
 * Errors name the file and the JSON path ("stages[3].needs[0]: no stage
 * 'verfy'") and, for syntax, jansson's line and column.  Unknown keys are
 * errors.
 */
#ifndef DAY0_PLAYBOOK_H
#define DAY0_PLAYBOOK_H

#include <limits.h>
#include <stddef.h>

#include <jansson.h>

#include "util.h"

enum pb_on { PB_ON_ALL, PB_ON_FIRST, PB_ON_CLUSTER, PB_ON_SET };

struct pb_check {
	char item[64];
	int required;	     /* default 1 */
	int has_min, has_max;
	double min, max;
};

struct pb_stage {
	char id[65];	     /* [A-Za-z0-9._-]{1,64}, unique */
	char step[64];	     /* engine step | "facts" | "exec" */
	char description[256];
	enum pb_on on;
	char on_set[256];    /* PB_ON_SET: the node set as written */
	size_t *needs;	     /* indices of earlier-or-later stages */
	size_t n_needs;
	char **args;	     /* engine steps: arguments (unexpanded) */
	size_t n_args;
	char **argv;	     /* exec: program and arguments */
	size_t n_argv;
	char **mpirun_args;  /* extra mpirun options (cluster stages) */
	size_t n_mpirun_args;
	char cwd[PATH_MAX];  /* "" = agent's default */
	json_t *require;     /* facts: minimums object, or NULL */
	int np;		     /* ranks; 0 = default (cluster: all cards) */
	double timeout;	     /* seconds; 0 = none */
	int retries;	     /* extra attempts after a failure */
	int required;	     /* default 1 */
	int rehearsal;	     /* a shape-validation rehearsal: its checks are
				rehearsal.ITEM, never the real item */
	int service;	     /* kept running until the playbook ends */
	char ready_url[1024]; /* service: polled until it answers ("" none) */
	double ready_timeout; /* seconds to come up (default 300) */
	struct pb_check *checks;
	size_t n_checks;
};

struct playbook {
	char path[PATH_MAX];
	char name[128];
	char description[512];
	char model[PATH_MAX];	  /* "" = none */
	char inventory[PATH_MAX]; /* "" = none; relative to the playbook */
	json_t *vars;		  /* object of strings (never NULL) */
	int fail_fast;		  /* default 1 unless max_fail_percentage */
	double max_fail_pct;	  /* -1 = not set */
	struct pb_stage *stages;
	size_t n;
	size_t *order;		  /* stages in a dependency order */
	json_t *doc;		  /* the document as loaded */
};

/* The runner's built-in variable names, NULL-terminated.  The checklist
 * items are the registry's (engine/checklist.h). */
extern const char *const playbook_builtins[];

/* Load and validate (needs exist, no cycles, steps exist in the engine's
 * registry or are facts/exec, node sets parse).  Returns 0 / -1 (err). */
int playbook_load(const char *path, struct playbook *pb, struct d0_err *err);
/* The same from a string (name is used in messages). */
int playbook_parse(const char *text, const char *name, struct playbook *pb,
		   struct d0_err *err);
void playbook_free(struct playbook *pb);

/*
 * Expand ${NAME} in `in` into out (max bytes): lookup(arg, NAME) returns
 * the value or NULL for an unknown variable (an error naming it and
 * `where`).  "$$" is "$".  Returns 0 / -1 (err).
 */
int playbook_expand(const char *in, const char *(*lookup)(void *arg,
							  const char *name),
		    void *arg, const char *where, char *out, size_t max,
		    struct d0_err *err);

/*
 * playbook_expand, and the value of every variable for which
 * nested(arg, NAME) is true (the playbook's `vars` and -e values, which may
 * use variables themselves) expanded the same way before it is
 * substituted: at most PB_VAR_DEPTH levels deep, so `a=${b}, b=${a}` is
 * an error naming the chain, and at most max bytes in all, so a runaway
 * expansion is one too.
 */
#define PB_VAR_DEPTH 8
int playbook_expand_deep(const char *in,
			 const char *(*lookup)(void *arg, const char *name),
			 int (*nested)(void *arg, const char *name), void *arg,
			 const char *where, char *out, size_t max,
			 struct d0_err *err);

/* A stage's timeout may be at most this (seconds; a week). */
#define PB_TIMEOUT_MAX 604800

/* Index of stage id, or -1. */
int playbook_stage(const struct playbook *pb, const char *id);

#endif
