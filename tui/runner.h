/*
 * runner.h - the playbook runner: a state machine over stages x nodes,
 * driven by the agents' events.
 *
 * One poll loop holds every node's link (link.h), the keys of the live TUI
 * (live.h) and a SIGINT flag.  Every event line an agent sends is stored
 * first (store_ingest; the store drops duplicates by (node, seq)), then
 * folded into the runner's state, the TUI's view and the headless log, and
 * acked once its batch is committed.  The console's own decisions (a stage
 * starting or ending on a set of nodes, a threshold, the verdict, the
 * operator's markers) are events too, node "console", in the same store:
 * the session file alone says what happened.
 *
 * Resume: the runner state is a function of the stored events, so
 * `--resume` reads the manifest (playbook, inventory, model, vars), folds
 * every stored event without acting on it, reconnects each agent on its
 * spool (hello acked=N: it resends what the store lacks), and goes on.
 * Tasks whose processes died with the old agent ("lost") or that the
 * takeover stopped ("shutdown") run again.
 */
#ifndef DAY0_RUNNER_H
#define DAY0_RUNNER_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "console.h"
#include "playbook.h"

struct runner_opts {
	const char *playbook_path; /* or NULL on resume */
	const char *inventory_path;
	const char *model;
	json_t *vars;		   /* -e K=V (object of strings), borrowed */
	const char *session_path;  /* NULL: session_new_path() */
	const char *resume_path;   /* --resume */
	const char *work;	   /* ${work}: NULL = /tmp/day0-work-USER/SESSION */
	const char *known_hosts;
	int accept_new_host_keys;
	const char *agent_path;	   /* NULL: next to this program */
	const char *remote_agent;  /* ssh: run this agent, no deployment */
	int check_only;		   /* --check: print, run nothing */
	int headless;		   /* 1 headless, 0 TUI, -1 auto */
	int ascii, no_color;
	const char *stats_path;
	int connect_timeout_s;	   /* default 10 */
	int reconnect_s;	   /* give up on a lost node after (60) */
	double sample_hz;	   /* agents' sampling rate (default 2) */
	int store_wait_s;	   /* a stalled store: give up after (60) */
	double node_rate;	   /* events/s per node before the limit
				    * (0: 20000) */
	char **argv;		   /* the console's own command line */
	int argc;
	FILE *out;		   /* headless lines and the summary */
	int json;		   /* --json: the verdict and items on stdout */
	const char *notify;	   /* --notify CMD: each alert on its stdin */
	char *session_out;	   /* non-NULL: gets the session file's path */
	size_t session_out_max;
};

/* The session file could not be written for --store-wait seconds: the run
 * ended without a verdict (resume it with --resume). */
#define EXIT_INCOMPLETE 3

/* Run (or --check) a playbook.  Returns the exit status: 0 go, 1 no-go
 * (or cancelled), 2 usage/input error (message printed), 3 incomplete
 * (the session file could not be written). */
int runner_main(const struct runner_opts *o);

/* The day0-agent next to the running program (readlink /proc/self/exe). */
int runner_default_agent(char *out, size_t max);

#endif
