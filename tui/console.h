/*
 * console.h - the day0 console (`day0`): its command table and the pieces
 * the commands share.
 *
 * Every subcommand is one file exporting one `const struct console_cmd`
 * (tmux's command-table shape, as engine steps do); main.c lists them.
 * Exit status everywhere: 0 ok (go), 1 a check failed (no-go), 2 usage or
 * input error.  Errors are printed as `day0: FILE/HOST: what is wrong`.
 *
 * Modules (one header each):
 *   link.h      one node's byte pipe to its day0-agent: ssh (libssh2,
 *               non-blocking) or local (fork/exec); deploys the agent
 *   playbook.h  playbook files: parse, validate, expand ${vars}
 *   view.h      the view model: fold(events up to t) -> what screens show
 *   runner      (runner.c) stages x nodes state machine, ingest, acks
 */
#ifndef DAY0_CONSOLE_H
#define DAY0_CONSOLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util.h"

struct console_cmd {
	const char *name;
	const char *usage;   /* arguments after the name, one line */
	const char *summary; /* one line for `day0 --help` */
	int (*run)(int argc, char **argv); /* argv[0] is the command name */
};

extern const struct console_cmd cmd_run, cmd_replay, cmd_report, cmd_diff,
    cmd_ls, cmd_hosts, cmd_demo;
extern const struct console_cmd *const console_cmds[];

/* "usage: day0 NAME USAGE" on f. */
void console_usage(const struct console_cmd *c, FILE *f);
/* Print "day0 NAME: <fmt>" and the usage line on stderr; returns 2. */
int console_usage_error(const struct console_cmd *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The node name the console's own events carry (markers, verdict,
 * playbook-level stage states). */
#define CONSOLE_NODE "console"

/* ---------------------------------------------------------------- sessions */

/*
 * Where session files live: $DAY0_SESSIONS, else
 * $XDG_STATE_HOME/day0/sessions, else ~/.local/state/day0/sessions.
 * Created (0700) when create is set.  Returns 0 / -1 (err).
 */
int session_dir(char *out, size_t max, int create, struct d0_err *err);
/*
 * --baseline auto (baseline.c): the last GO session (latest "started") of
 * playbook PLAYBOOK and model family FAMILY in the session directory,
 * EXCLUDE (a path, or NULL) left out; the path in out.  -1 (err saying
 * what was looked for and where) when there is none.
 * session_baseline_auto: the same for the playbook and family of the
 * session file SESSION.  model_family_of: config.json's model_type of a
 * checkpoint directory ("" and -1 when unreadable).
 */
int session_baseline_find(const char *playbook, const char *family,
			  const char *exclude, char *out, size_t max,
			  struct d0_err *err);
int session_baseline_auto(const char *session, char *out, size_t max,
			  struct d0_err *err);
int model_family_of(const char *model_dir, char *out, size_t max);
/* A new session path: DIR/YYYYmmdd-HHMMSS-NAME.db (name sanitised). */
int session_new_path(const char *name, char *out, size_t max,
		     struct d0_err *err);

/*
 * Session manifest keys (store_session_set) the runner writes, which
 * report/diff/ls read:
 *   "name"       string: playbook name
 *   "playbook"   the playbook document (JSON as loaded) + "playbook_path"
 *   "inventory"  the inventory document + "inventory_path"
 *   "model"      string: the --model path
 *   "model_family"  string: its config.json model_type ("" unknown)
 *   "command"    array of strings: the console's argv
 *   "versions"   {"day0": "...", "protocol": 1}
 *   "started", "finished"   integers: unix ns
 *   "verdict"    {"go": bool, "failed": [ITEM...], "exit": 0|1}
 *   "stages"     [{"id","step","on","result","commands":[...]}]: each
 *                stage's result and exact command lines (as "commands")
 *   "checks"     [{"item","stage","required","min","max"}] : thresholds
 *   "commands"   {STAGE_ID: [{"node","cmd","argv"}]}: what each node's
 *                agent was sent and runs, written as stages start
 *   "vars"       {K: V}: -e variables;  "work": ${work};  "tag": the
 *                session's spool/work tag;  "playbook_path",
 *                "inventory_path": where they were read from
 *   agent/NODE, facts/NODE are written by the store itself.
 *
 * Console events (node CONSOLE_NODE, seq from 1, in the same events
 * table): "marker" {note}, "stage" {stage_id, stage, state, nodes, rc,
 * msg} for playbook stage transitions, "check" for checklist items the
 * console decides (a missing required item, a threshold), "log", and
 * "verdict" {go, failed}.
 */

/* Format unix ns as "YYYY-mm-dd HH:MM:SS" (local time). */
void console_fmt_time(int64_t ns, char *out, size_t max);

#endif
