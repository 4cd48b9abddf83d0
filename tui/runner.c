/*
 * runner.c - the playbook runner (runner.h): stages x nodes, one poll loop.
 *
 * Shape: struct run holds the nodes (inventory entry + link), the stages
 * (playbook entry + state) and the tasks (one stage on one node: a command
 * sent to that node's agent).  Three things change state and nothing else:
 *   absorb()    an event (live from a link, or stored, on --resume);
 *   schedule()  start stages whose needs are done, finish stages whose
 *               tasks are done, retry, skip after failures;
 *   operator    Ctrl-C, and the live TUI's keys through live_ops.
 * Every decision is also written as a console event, so the session file
 * holds the whole story (what the screens, replay and reports read).
 */
#include "runner.h"
#include "cluster.h"
#include "notify.h"

#include "intake.h"
#include "link.h"
#include "live.h"
#include "nodeset.h"
#include "proto.h"
#include "store.h"
#include "verdict.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <pwd.h>
#include <unistd.h>

enum task_state {
	T_WAIT,	     /* stage started, command not sent yet */
	T_SENT,	     /* command sent, no start seen */
	T_RUNNING,
	T_DONE,
	T_FAILED,
};

enum stage_state { S_WAIT, S_RUNNING, S_DONE, S_FAILED, S_SKIPPED };

static const char *const stage_state_names[] = {"waiting", "running", "done",
						"failed", "skipped"};

struct task {
	int stage, node;
	enum task_state st;
	int attempt;	   /* 1, 2, ... (sid "ID" then "ID.2", ...) */
	int interrupted;   /* reruns owed to lost/shutdown ends */
	char sid[80];
	int rc;
	char msg[512];
	uint64_t sent_order; /* per node, to match an agent's error event */
	json_t *checks;	     /* item -> {"status","detail","value"} */
	json_t *argv;	     /* the argv the agent reported it ran */
};

struct node {
	struct inv_node *inv;
	struct link *link;
	int failed;	   /* unreachable or gave up: excluded */
	int excluded;	   /* failed a stage under max_fail_percentage */
	char why[512];
	int64_t ack_sent;
	int64_t lost_at;   /* ns; connection lost, reconnecting */
	int64_t retry_at;  /* ns; next reconnect attempt */
	int reconnects;
	int hello;	   /* hello seen on the current link */
	int said_bye;
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

struct run {
	const struct runner_opts *o;
	struct playbook pb;
	struct inventory inv;
	json_t *inv_doc;
	struct store *store;
	struct intake *intake; /* the door: binding, refusals, commits */
	int incomplete;	       /* the store stayed stalled: no verdict */
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
	int replaying;	 /* --resume: folding stored events, no actions */
	int connecting;	 /* before the first stage: links coming up */
	int64_t t_start;
	int64_t last_commit;
	int stopping;	 /* no new stages (fail-fast, cancel) */
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
static void scpy(char *d, size_t n, const char *s)
{
	size_t k = strlen(s);
	if (k >= n)
		k = n - 1;
	memcpy(d, s, k);
	d[k] = 0;
}

#define COMMIT_NS 500000000LL

static volatile sig_atomic_t sigint_count;
static int64_t sigint_first_ns;

static void on_sigint(int sig)
{
	(void)sig;
	sigint_count++;
}

static int64_t now_ns(void)
{
	return proto_now_ns();
}

/* ---------------------------------------------------------------- output */

static double since(struct run *r, int64_t ts)
{
	return (double)(ts - r->t_start) / 1e9;
}

/* Headless: queue one line's text for a node; equal texts within a short
 * window print once with the nodes folded ("node[1-8]"). */
static void say(struct run *r, const char *text, const char *node)
{
	json_t *a;
	if (!r->out || r->replaying)
		return;
	a = json_object_get(r->pending, text);
	if (!a) {
		a = json_array();
		json_object_set_new(r->pending, text, a);
	}
	json_array_append_new(a, json_string(node));
	if (!r->pending_since)
		r->pending_since = now_ns();
}

static char *fold_array(json_t *a)
{
	size_t n = json_array_size(a), i;
	char **names = calloc(n ? n : 1, sizeof *names);
	json_t *v;
	char *s;
	json_array_foreach(a, i, v) names[i] = (char *)json_string_value(v);
	s = nodeset_fold(names, n);
	free(names);
	return s;
}

static void flush_said(struct run *r, int force)
{
	const char *text;
	json_t *a;
	void *tmp;
	if (!r->out || !r->pending_since)
		return;
	if (!force && now_ns() - r->pending_since < 300000000)
		return;
	json_object_foreach_safe(r->pending, tmp, text, a)
	{
		char *set = fold_array(a);
		fprintf(r->out, "[%7.1fs] %-44s %s\n", since(r, now_ns()), text,
			set ? set : "?");
		free(set);
		json_object_del(r->pending, text);
	}
	fflush(r->out);
	r->pending_since = 0;
}

/* ------------------------------------------------------- console events */

static void feed_console(struct run *r, const char *line, size_t len);

/* Record one console event (node "console"). */
static void console_event(struct run *r, const char *type, json_t *fields)
{
	struct d0_err err = {{0}};
	size_t len;
	char *line;
	if (r->replaying) {
		json_decref(fields);
		return;
	}
	line = proto_event_format(CONSOLE_NODE, ++r->console_seq, now_ns(),
				  type, fields, &len, &err);
	json_decref(fields);
	if (!line) {
		fprintf(stderr, "day0: %s: %s\n", r->session, err.msg);
		r->console_seq--;
		return;
	}
	feed_console(r, line, len);
	free(line);
}

/* An alert for --notify: kind (node, stage, check), the node, what and
 * why, at the run's time.  Not while replaying a resumed session. */
static void alert(struct run *r, const char *kind, const char *node,
		  const char *what, const char *why)
{
	json_t *a;
	if (!r->o->notify || r->replaying)
		return;
	a = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "kind", kind,
		      "node", node ? node : "", "what", what ? what : "",
		      "why", why ? why : "", "session", r->session, "run",
		      r->name, "ts", (json_int_t)now_ns());
	notify_alert(r->o->notify, a);
	json_decref(a);
}

static void console_log(struct run *r, const char *level, const char *fmt,
			...) __attribute__((format(printf, 3, 4)));
static void console_log(struct run *r, const char *level, const char *fmt,
			...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	console_event(r, "log", json_pack("{s:s, s:s}", "level", level, "msg",
					  msg));
}

/* ------------------------------------------------------------------ vars */

/* ${work} on a node: --work, or /tmp/day0-work-USER/TAG with the user the
 * node's agent runs as (its agent makes it 0700: --work). */
static const char *node_work(struct run *r, const struct node *nd)
{
	if (r->o->work || !strcmp(nd->inv->transport, "local"))
		return r->work;
	snprintf(r->work_buf, sizeof r->work_buf, "/tmp/day0-work-%s/%s",
		 nd->inv->user, r->tag);
	return r->work_buf;
}

static const char *lookup_var(void *arg, const char *name)
{
	struct run *r = arg;
	const struct node *nd = r->cur_node >= 0 ? &r->nodes[r->cur_node] : NULL;
	json_t *v;
	if (!strcmp(name, "model"))
		return r->o->model ? r->o->model : r->pb.model;
	if (!strcmp(name, "work"))
		return nd ? node_work(r, nd) : r->work;
	if (!strcmp(name, "session"))
		return r->name;
	if (!strcmp(name, "service_port")) {
		/* a service's port, per session (the same on --resume), so two
		 * sessions on one machine do not collide: 20000..39999 */
		snprintf(r->buf, sizeof r->buf, "%llu",
			 20000 + (unsigned long long)(hash_str64(r->name) % 20000));
		return r->buf;
	}
	if (!strcmp(name, "node"))
		return nd ? nd->inv->name : "";
	if (!strcmp(name, "cards") && nd) {
		snprintf(r->buf, sizeof r->buf, "%d", nd->inv->cards);
		return r->buf;
	}
	if (!strcmp(name, "card_mem") && nd) {
		snprintf(r->buf, sizeof r->buf, "%llu",
			 (unsigned long long)nd->inv->card_mem);
		return r->buf;
	}
	if (!strcmp(name, "world") || !strcmp(name, "nodes")) {
		long world = 0, nodes = 0;
		for (size_t i = 0; i < r->n_nodes; i++)
			if (!r->nodes[i].failed && !r->nodes[i].excluded) {
				world += r->nodes[i].inv->cards;
				nodes++;
			}
		snprintf(r->buf, sizeof r->buf, "%ld",
			 name[0] == 'w' ? world : nodes);
		return r->buf;
	}
	if ((v = json_object_get(r->vars, name)) && json_is_string(v))
		return json_string_value(v);
	if ((v = json_object_get(r->pb.vars, name)) && json_is_string(v))
		return json_string_value(v);
	return NULL;
}

/* The playbook's vars and -e values may hold variables; built-ins are
 * what they are. */
static int var_nested(void *arg, const char *name)
{
	for (int i = 0; playbook_builtins[i]; i++)
		if (!strcmp(name, playbook_builtins[i]))
			return 0;
	(void)arg;
	return 1;
}

/* Expand s (variables, and playbook vars that themselves hold variables:
 * "like": "${work}/like", at most PB_VAR_DEPTH deep), into a new string
 * or NULL with err. */
static char *expand(struct run *r, const char *s, const char *where,
		    struct d0_err *err)
{
	char a[PATH_MAX * 2];
	if (playbook_expand_deep(s, lookup_var, var_nested, r, where, a,
				 sizeof a, err))
		return NULL;
	return strdup(a);
}

static json_t *expand_list(struct run *r, char **list, size_t n,
			   const char *what, struct d0_err *err)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++) {
		char where[128];
		char *s;
		snprintf(where, sizeof where, "stage '%s' %s[%zu]",
			 r->pb.stages[r->cur_stage].id, what, i);
		s = expand(r, list[i], where, err);
		if (!s) {
			json_decref(a);
			return NULL;
		}
		json_array_append_new(a, json_string(s));
		free(s);
	}
	return a;
}

/* ------------------------------------------------------------- commands */

static int cluster_world(struct run *r)
{
	int world = 0;
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!r->nodes[i].failed && !r->nodes[i].excluded)
			world += r->nodes[i].inv->cards;
	return world;
}

static int stage_first_node(struct run *r)
{
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!r->nodes[i].failed && !r->nodes[i].excluded)
			return (int)i;
	return -1;
}

/* The nodes a cluster stage runs on, in inventory (= rank) order. */
static size_t cluster_nodes(struct run *r, const struct inv_node **out)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!r->nodes[i].failed && !r->nodes[i].excluded)
			out[n++] = r->nodes[i].inv;
	return n;
}

/* mpirun options for a cluster stage: the hosts, then the inventory's and
 * the stage's own options.  How Open MPI's ssh reaches the hosts travels
 * beside them (cluster_ssh). */
static json_t *cluster_mpirun_args(struct run *r, const struct pb_stage *st)
{
	json_t *a = json_array(), *extra;
	char hosts[8192] = "";
	size_t i;
	for (i = 0; i < r->n_nodes; i++) {
		struct node *nd = &r->nodes[i];
		size_t len = strlen(hosts);
		if (nd->failed || nd->excluded)
			continue;
		snprintf(hosts + len, sizeof hosts - len, "%s%s:%d",
			 len ? "," : "",
			 !strcmp(nd->inv->transport, "local") ? "localhost"
							       : nd->inv->host,
			 nd->inv->cards);
	}
	extra = json_object_get(r->inv_doc, "mpirun_args");
	if (strchr(hosts, ',')) {
		json_array_append_new(a, json_string("--host"));
		json_array_append_new(a, json_string(hosts));
		json_array_append_new(a, json_string("--map-by"));
		json_array_append_new(a, json_string("slot"));
	}
	if (json_is_array(extra)) {
		json_t *v;
		json_array_foreach(extra, i, v) if (json_is_string(v))
		    json_array_append(a, v);
	}
	for (i = 0; i < st->n_mpirun_args; i++)
		json_array_append_new(a, json_string(st->mpirun_args[i]));
	return a;
}

/* The rank map and the ssh settings of a cluster stage into its command
 * (cluster.h).  The inventory's own plm_rsh_args (a hand-written ssh -F,
 * say) wins over the generated config. */
static void cluster_ssh(struct run *r, json_t *c)
{
	const struct inv_node **nodes = calloc(r->n_nodes + 1, sizeof *nodes);
	size_t n, remote = 0;
	char *given = json_dumps(json_object_get(r->inv_doc, "mpirun_args"),
				 JSON_COMPACT);
	if (!nodes)
		abort();
	char *ranks;
	n = cluster_nodes(r, nodes);
	ranks = cluster_rank_map(nodes, n);
	json_object_set_new(c, "ranks", json_string(ranks));
	free(ranks);
	for (size_t i = 0; i < n; i++)
		remote += strcmp(nodes[i]->transport, "local") != 0;
	if (n > 1 && remote && !(given && strstr(given, "plm_rsh_args"))) {
		char *cfg = cluster_ssh_config(nodes, n),
		     *kh = cluster_known_hosts(nodes, n, r->o->known_hosts);
		json_object_set_new(c, "ssh_config", json_string(cfg));
		json_object_set_new(c, "known_hosts", json_string(kh));
		free(cfg);
		free(kh);
	}
	free(given);
	free(nodes);
}

/* The command a task sends its agent, or NULL (err) when a variable is
 * unknown. */
static json_t *task_command(struct run *r, struct task *t, struct d0_err *err)
{
	const struct pb_stage *st = &r->pb.stages[t->stage];
	json_t *c, *list;
	r->cur_node = t->node;
	r->cur_stage = t->stage;
	if (!strcmp(st->step, "facts")) {
		const char *model = lookup_var(r, "model");
		c = json_pack("{s:s, s:s}", "cmd", "facts", "stage_id", t->sid);
		if (model && *model)
			json_object_set_new(c, "dir", json_string(model));
		if (st->require)
			json_object_set(c, "require", st->require);
		return c;
	}
	c = json_pack("{s:s, s:s, s:s}", "cmd", "run", "stage_id", t->sid,
		      "step", st->step);
	if (!strcmp(st->step, "exec")) {
		list = expand_list(r, st->argv, st->n_argv, "argv", err);
		if (!list)
			goto fail;
		json_object_set_new(c, "argv", list);
	} else {
		list = expand_list(r, st->args, st->n_args, "args", err);
		if (!list)
			goto fail;
		json_object_set_new(c, "args", list);
	}
	if (st->cwd[0]) {
		char *cwd = expand(r, st->cwd, "cwd", err);
		if (!cwd)
			goto fail;
		json_object_set_new(c, "cwd", json_string(cwd));
		free(cwd);
	}
	if (st->timeout > 0)
		json_object_set_new(c, "timeout", json_real(st->timeout));
	if (st->rehearsal)
		json_object_set_new(c, "rehearsal", json_true());
	if (st->ready_url[0]) {
		char *url = expand(r, st->ready_url, "ready", err);
		if (!url)
			goto fail;
		json_object_set_new(c, "ready",
				    json_pack("{s:s, s:f}", "url", url, "timeout",
					      st->ready_timeout));
		free(url);
	}
	if (st->on == PB_ON_CLUSTER && strcmp(st->step, "exec")) {
		int np = st->np ? st->np : cluster_world(r);
		json_object_set_new(c, "np", json_integer(np));
		json_object_set_new(c, "mpirun_args",
				    cluster_mpirun_args(r, st));
		cluster_ssh(r, c);
	} else if (st->np > 0 && strcmp(st->step, "exec")) {
		json_object_set_new(c, "np", json_integer(st->np));
		if (st->n_mpirun_args) {
			json_t *a = json_array();
			for (size_t i = 0; i < st->n_mpirun_args; i++)
				json_array_append_new(
				    a, json_string(st->mpirun_args[i]));
			json_object_set_new(c, "mpirun_args", a);
		}
	}
	return c;
fail:
	json_decref(c);
	return NULL;
}

/* The command line the agent will run for cmd (for --check and the
 * manifest): what agent/stage.c builds. */
static json_t *command_argv(struct run *r, json_t *cmd)
{
	json_t *a = json_array(), *v;
	const char *step = json_string_value(json_object_get(cmd, "step"));
	json_t *np = json_object_get(cmd, "np");
	size_t i;
	(void)r;
	if (!step) { /* facts: the agent itself answers */
		json_array_append_new(a, json_string("(day0-agent facts)"));
		return a;
	}
	if (!strcmp(step, "exec")) {
		json_array_extend(a, json_object_get(cmd, "argv"));
		return a;
	}
	if (np && (json_integer_value(np) > 1 ||
		   json_object_get(cmd, "mpirun_args"))) {
		json_array_append_new(a, json_string("mpirun"));
		json_array_append_new(a, json_string("--tag-output"));
		if (geteuid() == 0)
			json_array_append_new(
			    a, json_string("--allow-run-as-root"));
		json_array_append_new(a, json_string("-x"));
		json_array_append_new(a, json_string("DAY0_NODE"));
		json_array_append_new(a, json_string("-x"));
		json_array_append_new(a, json_string("DAY0_STAGE_ID"));
		if (json_object_get(cmd, "ranks")) {
			json_array_append_new(a, json_string("-x"));
			json_array_append_new(a, json_string("DAY0_RANKS"));
		}
		if (json_object_get(cmd, "ssh_config")) {
			json_array_append_new(a, json_string("--mca"));
			json_array_append_new(a, json_string("plm_rsh_agent"));
			json_array_append_new(a, json_string("ssh"));
			json_array_append_new(a, json_string("--mca"));
			json_array_append_new(a, json_string("plm_rsh_args"));
			json_array_append_new(
			    a, json_sprintf("-F <spool>/stage-%s.ssh_config",
					    json_string_value(json_object_get(
						cmd, "stage_id"))));
		}
		json_array_append_new(a, json_string("-np"));
		json_array_append_new(
		    a, json_sprintf("%lld", (long long)json_integer_value(np)));
		json_array_foreach(json_object_get(cmd, "mpirun_args"), i, v)
		    json_array_append(a, v);
	}
	json_array_append_new(a, json_string("day0-engine"));
	json_array_append_new(a, json_string(step));
	json_array_foreach(json_object_get(cmd, "args"), i, v)
	    json_array_append(a, v);
	json_array_append_new(a, json_string("--events"));
	return a;
}

/* "a b 'c d'": argv as a shell would need it. */
static void shell_join(json_t *argv, FILE *f)
{
	size_t i;
	json_t *v;
	json_array_foreach(argv, i, v)
	{
		const char *s = json_string_value(v);
		int plain = *s != 0;
		for (const char *p = s; *p; p++)
			if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
				    "OPQRSTUVWXYZ0123456789_-./=:,@%+",
				    *p))
				plain = 0;
		if (i)
			fputc(' ', f);
		if (plain) {
			fputs(s, f);
			continue;
		}
		fputc('\'', f);
		for (const char *p = s; *p; p++)
			if (*p == '\'')
				fputs("'\\''", f);
			else
				fputc(*p, f);
		fputc('\'', f);
	}
}

/* --------------------------------------------------------------- agents */

static void on_agent_line(void *arg, const char *line, size_t len);
static void on_agent_toolong(void *arg, size_t len);

struct line_ctx {
	struct run *r;
	int node;
};
static struct line_ctx *line_ctx; /* one per node */

#define AGENT_ARGV_MAX 40 /* ours (19 at most) and the inventory's */

static char **agent_argv(struct run *r, struct node *nd)
{
	char **a = calloc(AGENT_ARGV_MAX + 1, sizeof *a);
	char buf[64];
	int n = 0;
	json_t *extra = json_object_get(r->inv_doc, "agent_args"), *v;
	size_t i;
	a[n++] = strdup("--node");
	a[n++] = strdup(nd->inv->name);
	a[n++] = strdup("--spool");
	a[n++] = strdup(nd->spool);
	a[n++] = strdup("--cards");
	snprintf(buf, sizeof buf, "%d", nd->inv->cards);
	a[n++] = strdup(buf);
	if (nd->inv->card_mem) {
		a[n++] = strdup("--card-mem");
		snprintf(buf, sizeof buf, "%llu",
			 (unsigned long long)nd->inv->card_mem);
		a[n++] = strdup(buf);
	}
	a[n++] = strdup("--sample-hz");
	snprintf(buf, sizeof buf, "%g", r->o->sample_hz);
	a[n++] = strdup(buf);
	a[n++] = strdup("--takeover");
	if (!r->o->work) { /* the default: private to the node's user */
		a[n++] = strdup("--work");
		a[n++] = strdup(node_work(r, nd));
	}
	if (strcmp(nd->inv->transport, "local") &&
	    (!strncmp(nd->inv->host, "127.", 4) ||
	     !strcmp(nd->inv->host, "localhost") ||
	     !strcmp(nd->inv->host, "::1"))) {
		/* A loopback node's traffic (MPI over TCP too) is lo's. */
		a[n++] = strdup("--net-if");
		a[n++] = strdup("lo");
	}
	json_array_foreach(extra, i, v) if (json_is_string(v) && n < AGENT_ARGV_MAX)
	    a[n++] = strdup(json_string_value(v));
	return a;
}

static void free_argv(char **a)
{
	for (size_t i = 0; a && a[i]; i++)
		free(a[i]);
	free(a);
}

static void node_connect(struct run *r, size_t i)
{
	struct node *nd = &r->nodes[i];
	struct link_cfg cfg = {0};
	struct d0_err err = {{0}};
	char **args = agent_argv(r, nd);
	cfg.node = nd->inv;
	cfg.known_hosts = r->o->known_hosts;
	cfg.accept_new_host_keys = r->o->accept_new_host_keys;
	cfg.connect_timeout_ms = r->o->connect_timeout_s * 1000;
	cfg.agent_path = r->agent;
	cfg.agent_args = args;
	cfg.remote_agent = r->o->remote_agent;
	cfg.on_line = on_agent_line;
	cfg.on_toolong = on_agent_toolong;
	cfg.arg = &line_ctx[i];
	if (r->intake)
		intake_connected(r->intake, (int)i);
	nd->hello = 0;
	nd->said_bye = 0;
	nd->ack_sent = 0;
	if (link_open(&cfg, &nd->link, &err)) {
		nd->link = NULL;
		nd->failed = 1;
		scpy(nd->why, sizeof nd->why, err.msg);
	}
	free_argv(args);
}

static void send_json(struct run *r, struct node *nd, json_t *cmd)
{
	char *s = json_dumps(cmd, JSON_COMPACT);
	(void)r;
	if (s && nd->link) {
		size_t n = strlen(s);
		s[n] = '\n';
		link_send(nd->link, s, n + 1);
	}
	free(s);
}

/* ----------------------------------------------------------------- tasks */

static struct task *find_task(struct run *r, int node, const char *sid)
{
	/* Newest first: the current attempt. */
	for (size_t i = r->n_tasks; i-- > 0;)
		if (r->tasks[i].node == node && !strcmp(r->tasks[i].sid, sid))
			return &r->tasks[i];
	return NULL;
}

/* A task's sid for attempt n: the stage id, then "ID.n". */
static void task_sid(struct run *r, struct task *t)
{
	const char *id = r->pb.stages[t->stage].id;
	if (t->attempt <= 1)
		snprintf(t->sid, sizeof t->sid, "%s", id);
	else
		snprintf(t->sid, sizeof t->sid, "%s.%d", id, t->attempt);
}

static int is_final(const struct task *t)
{
	return t->st == T_DONE || t->st == T_FAILED;
}

static void send_task(struct run *r, struct task *t)
{
	struct node *nd = &r->nodes[t->node];
	struct d0_err err = {{0}};
	json_t *cmd;
	if (r->replaying || !nd->link || link_phase(nd->link) != LINK_UP ||
	    !nd->hello)
		return;
	cmd = task_command(r, t, &err);
	if (!cmd) {
		t->st = T_FAILED;
		t->rc = 2;
		scpy(t->msg, sizeof t->msg, err.msg);
		console_log(r, "error", "%s: %s", nd->inv->name, err.msg);
		return;
	}
	send_json(r, nd, cmd);
	json_decref(cmd);
	t->st = T_SENT;
	t->sent_order = ++nd->sends;
}

/* Check a finished task against the stage's declared items and
 * thresholds; returns 0 when they hold, else fills why. */
static int judge_checks(struct run *r, struct task *t, char *why, size_t max)
{
	const struct pb_stage *st = &r->pb.stages[t->stage];
	for (size_t i = 0; i < st->n_checks; i++) {
		const struct pb_check *c = &st->checks[i];
		json_t *got = json_object_get(t->checks, c->item);
		const char *status =
		    json_string_value(json_object_get(got, "status"));
		json_t *value = json_object_get(got, "value");
		if (!got) {
			if (c->required) {
				snprintf(why, max,
					 "required check %s was not reported",
					 c->item);
				console_event(
				    r, "check",
				    json_pack("{s:s, s:s, s:s, s:s, s:s}", "item",
					      c->item, "status", "fail",
					      "detail", why, "for",
					      r->nodes[t->node].inv->name,
					      "stage_id", t->sid));
				return -1;
			}
			continue;
		}
		if (status && !strcmp(status, "fail") && c->required) {
			snprintf(why, max, "check %s failed: %s", c->item,
				 json_string_value(
				     json_object_get(got, "detail"))
				     ?: "");
			return -1;
		}
		if ((c->has_min || c->has_max) && json_is_number(value)) {
			double v = json_number_value(value);
			if ((c->has_min && v < c->min) ||
			    (c->has_max && v > c->max)) {
				snprintf(why, max,
					 "%s = %g is outside the playbook's "
					 "threshold [%s%g, %s%g]",
					 c->item, v, c->has_min ? "" : "-",
					 c->has_min ? c->min : INFINITY,
					 c->has_max ? "" : "+",
					 c->has_max ? c->max : INFINITY);
				console_event(
				    r, "check",
				    json_pack("{s:s, s:s, s:s, s:f, s:s, s:s}",
					      "item", c->item, "status",
					      "fail", "detail", why, "value",
					      v, "for",
					      r->nodes[t->node].inv->name,
					      "stage_id", t->sid));
				if (c->required)
					return -1;
			}
		}
	}
	return 0;
}

static void forget_evidence(struct run *r, const char *stage,
			    const char *node);

/* Send the task again as its next attempt (a new stage id for the
 * agent); text is the headless line. */
static void task_again(struct run *r, struct task *t, const char *text)
{
	t->attempt++;
	task_sid(r, t);
	t->st = T_WAIT;
	json_object_clear(t->checks);
	forget_evidence(r, r->pb.stages[t->stage].id,
			r->nodes[t->node].inv->name);
	say(r, text, r->nodes[t->node].inv->name);
	send_task(r, t);
}

static void task_ended(struct run *r, struct task *t, int rc,
		       const char *reason, const char *msg, const char *cause)
{
	const struct pb_stage *st = &r->pb.stages[t->stage];
	char why[512] = "";
	int failed = rc != 0;
	t->rc = rc;
	/* The agent's first real cause (rank and node), not mpirun's help
	 * text: that stays in the log. */
	if (rc && cause && *cause)
		snprintf(t->msg, sizeof t->msg, "%.100s: %.400s",
			 msg ? msg : "", cause);
	else
		snprintf(t->msg, sizeof t->msg, "%s", msg ? msg : "");
	if (!failed && judge_checks(r, t, why, sizeof why)) {
		failed = 1;
		snprintf(t->msg, sizeof t->msg, "%s", why);
	}
	if (!failed) {
		t->st = T_DONE;
		return;
	}
	/* A stage the agent lost (killed agent) or stopped (takeover) did not
	 * fail on its merits: run it again without spending a retry. */
	if (reason && (!strcmp(reason, "lost") || !strcmp(reason, "shutdown")) &&
	    t->interrupted < 3 && !r->cancelled) {
		char text[160];
		t->interrupted++;
		console_log(r, "warn", "%s: stage %s %s: running it again",
			    r->nodes[t->node].inv->name, t->sid, reason);
		snprintf(text, sizeof text, "stage %-18s rerun (%s)", st->id,
			 reason);
		task_again(r, t, text);
		return;
	}
	if (t->attempt <= st->retries && !r->cancelled &&
	    !(reason && !strcmp(reason, "cancel"))) {
		char text[160];
		console_log(r, "warn", "%s: stage %s failed (%s): retry %d of %d",
			    r->nodes[t->node].inv->name, t->sid,
			    t->msg[0] ? t->msg : "exit", t->attempt,
			    st->retries);
		snprintf(text, sizeof text, "stage %-18s retry %d/%d", st->id,
			 t->attempt, st->retries);
		task_again(r, t, text);
		return;
	}
	t->st = T_FAILED;
}

/* ---------------------------------------------------------------- absorb */

/* One check into the evidence: the last per (item, stage, node, rank);
 * the headless line when the (item, stage, node) status changes. */
static void note_check(struct run *r, const char *node, const char *stage,
		       json_t *o)
{
	const char *item = json_string_value(json_object_get(o, "item"));
	const char *status = json_string_value(json_object_get(o, "status"));
	json_t *rank = json_object_get(o, "rank");
	const char *was;
	char key[512], text[160];
	if (!item || !status)
		return;
	snprintf(key, sizeof key, "%s\n%s\n%s\n%lld", item, stage, node,
		 json_is_integer(rank) ? (long long)json_integer_value(rank)
				       : -1LL);
	json_object_set_new(
	    r->evidence, key,
	    json_pack("{s:s, s:s, s:s, s:O, s:s, s:s, s:O*, s:O*}", "item",
		      item, "stage", stage, "node", node, "rank",
		      rank ? rank : json_null(), "status", status, "detail",
		      json_string_value(json_object_get(o, "detail")) ?: "",
		      "value", json_object_get(o, "value"), "threshold",
		      json_object_get(o, "threshold")));
	snprintf(key, sizeof key, "%s\n%s\n%s", item, stage, node);
	was = json_string_value(json_object_get(r->said, key));
	if (was && !strcmp(was, status))
		return;
	json_object_set_new(r->said, key, json_string(status));
	snprintf(text, sizeof text, "check %-18s %s", item, status);
	say(r, text, node);
	if (!strcmp(status, "fail"))
		alert(r, "check", node, item,
		      json_string_value(json_object_get(o, "detail")));
}

/* A new attempt of stage on node: its earlier evidence is replaced. */
static void forget_evidence(struct run *r, const char *stage, const char *node)
{
	const char *k;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(r->evidence, tmp, k, v)
	{
		if (!strcmp(json_string_value(json_object_get(v, "stage")) ?: "",
			    stage) &&
		    !strcmp(json_string_value(json_object_get(v, "node")) ?: "",
			    node))
			json_object_del(r->evidence, k);
	}
}

static struct task *oldest_sent(struct run *r, int node)
{
	struct task *best = NULL;
	for (size_t i = 0; i < r->n_tasks; i++) {
		struct task *t = &r->tasks[i];
		if (t->node == node && t->st == T_SENT &&
		    (!best || t->sent_order < best->sent_order))
			best = t;
	}
	return best;
}

static void absorb_console(struct run *r, struct proto_event *ev);

/* One event, stored already: fold it into the runner's state. */
static void absorb(struct run *r, int node, struct proto_event *ev)
{
	json_t *o = ev->obj;
	const char *sid = json_string_value(json_object_get(o, "stage_id"));
	struct task *t;
	if (node < 0) {
		if (!strcmp(ev->node, CONSOLE_NODE)) {
			if (!strcmp(ev->type, "check")) {
				const char *who = json_string_value(
				    json_object_get(o, "for"));
				char stage[96];
				checklist_stage_of(
				    json_string_value(
					json_object_get(o, "stage_id")),
				    stage, sizeof stage);
				note_check(r, who ? who : CONSOLE_NODE, stage,
					   o);
			}
			absorb_console(r, ev);
		}
		return;
	}
	if (!strcmp(ev->type, "hello")) {
		r->nodes[node].hello = 1;
		return;
	}
	if (!strcmp(ev->type, "bye")) {
		/* Done, not silent: the screens stop ageing it. */
		if (!r->nodes[node].said_bye)
			console_event(r, "node",
				      json_pack("{s:s, s:s, s:s}", "name",
						r->nodes[node].inv->name,
						"state", "done", "msg",
						"the agent said bye"));
		r->nodes[node].said_bye = 1;
		return;
	}
	if (!strcmp(ev->type, "check")) {
		const char *item = json_string_value(json_object_get(o, "item"));
		const char *status =
		    json_string_value(json_object_get(o, "status"));
		if (!item || !status)
			return;
		t = sid ? find_task(r, node, sid) : NULL;
		if (!strcmp(item, "facts") &&
		    (t ? !strcmp(r->pb.stages[t->stage].step, "facts") : !sid)) {
			/* The facts command's answer ends its task (an older
			 * agent's answer has no stage id: the node's facts
			 * task it is). */
			for (size_t i = r->n_tasks; !t && i-- > 0;)
				if (r->tasks[i].node == node &&
				    !is_final(&r->tasks[i]) &&
				    !strcmp(r->pb.stages[r->tasks[i].stage].step,
					    "facts")) {
					t = &r->tasks[i];
					break;
				}
			note_check(r, ev->node,
				   t ? r->pb.stages[t->stage].id : "", o);
			if (t) {
				json_object_set_new(
				    t->checks, item,
				    json_pack("{s:s, s:O*, s:O*}", "status",
					      status, "value",
					      json_object_get(o, "value"),
					      "detail",
					      json_object_get(o, "detail")));
				task_ended(r, t, !strcmp(status, "fail"), NULL,
					   json_string_value(
					       json_object_get(o, "detail")),
					   NULL);
			}
			return;
		}
		{
			char stage[96];
			checklist_stage_of(sid, stage, sizeof stage);
			note_check(r, ev->node, stage, o);
		}
		/* A rehearsal's items come back as rehearsal.ITEM: the
		 * playbook's thresholds name ITEM. */
		if (t && r->pb.stages[t->stage].rehearsal &&
		    checklist_is_rehearsal(item))
			item += sizeof CHECKLIST_REHEARSAL - 1;
		if (t && !is_final(t)) {
			/* Several ranks may report one item: a fail stays. */
			json_t *old = json_object_get(t->checks, item);
			const char *was =
			    json_string_value(json_object_get(old, "status"));
			if (!(was && !strcmp(was, "fail")))
				json_object_set_new(
				    t->checks, item,
				    json_pack("{s:s, s:O*, s:O*}", "status",
					      status, "value",
					      json_object_get(o, "value"),
					      "detail",
					      json_object_get(o, "detail")));
		}
		return;
	}
	if (!strcmp(ev->type, "stage") && sid &&
	    !json_object_get(o, "src_seq")) {
		const char *state = json_string_value(json_object_get(o, "state"));
		t = find_task(r, node, sid);
		if (!t || !state)
			return;
		if (!strcmp(state, "start") && !is_final(t)) {
			t->st = T_RUNNING;
			/* What the agent ran, exactly: the manifest's. */
			if (json_is_array(json_object_get(o, "argv"))) {
				json_decref(t->argv);
				t->argv = json_incref(json_object_get(o, "argv"));
			}
			/* a service without a ready URL is up once started */
			if (r->pb.stages[t->stage].service &&
			    !r->pb.stages[t->stage].ready_url[0])
				task_ended(r, t, 0, NULL, "service started", NULL);
		} else if (!strcmp(state, "progress") && !is_final(t) &&
			   json_is_true(json_object_get(o, "ready")) &&
			   r->pb.stages[t->stage].service)
			/* up: later stages may start; it runs on until the
			 * playbook ends (bye stops it) */
			task_ended(r, t, 0, NULL,
				   json_string_value(json_object_get(o, "msg")),
				   NULL);
		else if (!strcmp(state, "end") && !is_final(t))
			task_ended(
			    r, t, (int)json_integer_value(json_object_get(o, "rc")),
			    json_string_value(json_object_get(o, "reason")),
			    json_string_value(json_object_get(o, "msg")),
			    json_string_value(json_object_get(o, "cause")));
		return;
	}
	if (!strcmp(ev->type, "error")) {
		const char *cmd = json_string_value(json_object_get(o, "cmd"));
		const char *msg = json_string_value(json_object_get(o, "msg"));
		if (cmd && (!strcmp(cmd, "run") || !strcmp(cmd, "facts")) &&
		    (t = oldest_sent(r, node))) {
			t->attempt = r->pb.stages[t->stage].retries + 1;
			task_ended(r, t, 2, "refused", msg, NULL);
		}
	}
}

/* On --resume: the console's own stage starts rebuild the tasks. */
static void start_stage_on(struct run *r, int s, json_t *nodes);

static void absorb_console(struct run *r, struct proto_event *ev)
{
	json_t *o = ev->obj;
	if (ev->seq > r->console_seq)
		r->console_seq = ev->seq;
	if (!r->replaying)
		return;
	if (!strcmp(ev->type, "stage")) {
		const char *id = json_string_value(json_object_get(o, "stage_id"));
		const char *state = json_string_value(json_object_get(o, "state"));
		int s = id ? playbook_stage(&r->pb, id) : -1;
		if (s < 0 || !state)
			return;
		if (!strcmp(state, "start") && r->stages[s].st == S_WAIT)
			start_stage_on(r, s, json_object_get(o, "nodes"));
		else if (!strcmp(state, "end")) {
			const char *res =
			    json_string_value(json_object_get(o, "result"));
			r->stages[s].st = !res || !strcmp(res, "done") ? S_DONE
					  : !strcmp(res, "skipped")    ? S_SKIPPED
								       : S_FAILED;
			r->stages[s].t1 = ev->ts;
		}
	} else if (!strcmp(ev->type, "node")) {
		const char *name = json_string_value(json_object_get(o, "name"));
		const char *state = json_string_value(json_object_get(o, "state"));
		for (size_t i = 0; name && state && i < r->n_nodes; i++)
			if (!strcmp(r->nodes[i].inv->name, name)) {
				if (!strcmp(state, "excluded"))
					r->nodes[i].excluded = 1;
			}
	}
}

static int node_index(struct run *r, const char *name)
{
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!strcmp(r->nodes[i].inv->name, name))
			return (int)i;
	return -1;
}

/* One stored line: fold it into the live view and the runner. */
static void fold_line(struct run *r, const char *line, size_t len)
{
	struct d0_err err = {{0}};
	struct proto_event ev;
	if (r->live)
		live_event(r->live, line, len);
	/* Samples are most of the traffic and change no runner state: no
	 * need to build their tree (the store and the view scan them). */
	if (len > 20 && memmem(line, len, "\"type\":\"sample\"", 15))
		return;
	if (proto_event_parse(line, len, &ev, &err))
		return;
	absorb(r, node_index(r, ev.node), &ev);
	proto_event_free(&ev);
}

/* The console's own event: stored (held while the store is stalled),
 * then folded. */
static void feed_console(struct run *r, const char *line, size_t len)
{
	struct d0_err err = {{0}};
	if (intake_console(r->intake, line, len, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		return;
	}
	fold_line(r, line, len);
}

/* A line from node i's link: through the door (intake.c), folded only
 * when it is new. */
static void on_agent_line(void *arg, const char *line, size_t len)
{
	struct line_ctx *c = arg;
	if (intake_line(c->r->intake, c->node, line, len, now_ns()) ==
	    INTAKE_STORED)
		fold_line(c->r, line, len);
}

static void on_agent_toolong(void *arg, size_t len)
{
	struct line_ctx *c = arg;
	intake_toolong(c->r->intake, c->node, len, now_ns());
}

/* ---------------------------------------------------------------- stages */

static void add_task(struct run *r, int s, int node)
{
	struct task *t;
	struct stage_rt *sr = &r->stages[s];
	if (r->n_tasks == r->cap_tasks) {
		r->cap_tasks = r->cap_tasks ? 2 * r->cap_tasks : 64;
		r->tasks = realloc(r->tasks, r->cap_tasks * sizeof *r->tasks);
	}
	t = &r->tasks[r->n_tasks];
	memset(t, 0, sizeof *t);
	t->stage = s;
	t->node = node;
	t->attempt = 1;
	t->checks = json_object();
	task_sid(r, t);
	sr->tasks = realloc(sr->tasks, (sr->n_tasks + 1) * sizeof *sr->tasks);
	sr->tasks[sr->n_tasks++] = (int)r->n_tasks++;
}

/* Create the stage's tasks on the given node names. */
static void start_stage_on(struct run *r, int s, json_t *nodes)
{
	size_t i;
	json_t *v;
	r->stages[s].st = S_RUNNING;
	r->stages[s].t0 = now_ns();
	json_array_foreach(nodes, i, v)
	{
		int k = node_index(r, json_string_value(v));
		if (k >= 0)
			add_task(r, s, k);
	}
}

/* Which nodes a stage runs on now. */
static json_t *stage_nodes(struct run *r, const struct pb_stage *st,
			   struct d0_err *err)
{
	json_t *a = json_array();
	if (st->on == PB_ON_FIRST || st->on == PB_ON_CLUSTER) {
		int k = stage_first_node(r);
		if (k >= 0)
			json_array_append_new(
			    a, json_string(r->nodes[k].inv->name));
	} else if (st->on == PB_ON_ALL) {
		for (size_t i = 0; i < r->n_nodes; i++)
			if (!r->nodes[i].failed && !r->nodes[i].excluded)
				json_array_append_new(
				    a, json_string(r->nodes[i].inv->name));
	} else {
		char **names;
		size_t n;
		if (nodeset_expand(st->on_set, &names, &n, err)) {
			json_decref(a);
			return NULL;
		}
		for (size_t j = 0; j < n; j++) {
			int k = node_index(r, names[j]);
			if (k < 0)
				d0_errf(err, "stage '%s': node '%s' is not in "
					     "the inventory",
					st->id, names[j]);
			else if (!r->nodes[k].failed && !r->nodes[k].excluded)
				json_array_append_new(a,
						      json_string(names[j]));
			free(names[j]);
		}
		free(names);
	}
	return a;
}

static void end_stage(struct run *r, int s, enum stage_state st,
		      const char *msg)
{
	struct stage_rt *sr = &r->stages[s];
	const struct pb_stage *ps = &r->pb.stages[s];
	char text[160];
	json_t *nodes = json_array();
	sr->st = st;
	sr->t1 = now_ns();
	snprintf(sr->msg, sizeof sr->msg, "%s", msg ? msg : "");
	for (size_t i = 0; i < sr->n_tasks; i++)
		json_array_append_new(
		    nodes,
		    json_string(r->nodes[r->tasks[sr->tasks[i]].node].inv->name));
	console_event(r, "stage",
		      json_pack("{s:s, s:s, s:s, s:f, s:i, s:s, s:s, s:o}",
				"stage_id", ps->id, "stage", ps->step, "state",
				"end", "progress", 1.0, "rc",
				st == S_DONE ? 0 : 1, "result",
				stage_state_names[st], "msg", sr->msg, "nodes",
				nodes));
	if (st == S_FAILED)
		alert(r, "stage", "", ps->id, sr->msg);
	if (st == S_SKIPPED) {
		snprintf(text, sizeof text, "stage %-18s skipped (%s)", ps->id,
			 msg);
		say(r, text, "-");
	}
}

static void start_stage(struct run *r, int s)
{
	const struct pb_stage *ps = &r->pb.stages[s];
	struct d0_err err = {{0}};
	json_t *nodes = stage_nodes(r, ps, &err), *cmds;
	char text[160];
	size_t i;
	if (!nodes || !json_array_size(nodes)) {
		end_stage(r, s, S_FAILED,
			  nodes ? "no reachable node to run on" : err.msg);
		json_decref(nodes);
		return;
	}
	console_event(r, "stage",
		      json_pack("{s:s, s:s, s:s, s:f, s:O}", "stage_id", ps->id,
				"stage", ps->step, "state", "start",
				"progress", 0.0, "nodes", nodes));
	start_stage_on(r, s, nodes);
	/* The commands sent, for the reproducibility manifest (the argv each
	 * agent reports it ran joins them at the end: write_manifest_end). */
	cmds = json_array();
	for (i = 0; i < r->stages[s].n_tasks; i++) {
		struct task *t = &r->tasks[r->stages[s].tasks[i]];
		json_t *c = task_command(r, t, &err);
		snprintf(text, sizeof text, "stage %-18s start", ps->id);
		say(r, text, r->nodes[t->node].inv->name);
		if (c) {
			json_array_append_new(
			    cmds, json_pack("{s:s, s:o}", "node",
					    r->nodes[t->node].inv->name, "cmd",
					    c));
		}
		send_task(r, t);
	}
	{
		json_t *all = store_session_get(r->store, "commands", &err);
		if (!json_is_object(all)) {
			json_decref(all);
			all = json_object();
		}
		json_object_set_new(all, ps->id, cmds);
		store_session_set(r->store, "commands", all, &err);
		json_decref(all);
	}
	json_decref(nodes);
}

/* Is stage s finished?  Then end it; returns 1 when it ended. */
static int settle_stage(struct run *r, int s)
{
	struct stage_rt *sr = &r->stages[s];
	const struct pb_stage *ps = &r->pb.stages[s];
	size_t failed = 0;
	char msg[512] = "", text[160];
	for (size_t i = 0; i < sr->n_tasks; i++) {
		struct task *t = &r->tasks[sr->tasks[i]];
		if (!is_final(t))
			return 0;
		if (t->st == T_FAILED) {
			if (!failed)
				snprintf(msg, sizeof msg, "%.60s: %.400s",
					 r->nodes[t->node].inv->name, t->msg);
			failed++;
		}
	}
	for (size_t i = 0; i < sr->n_tasks; i++) {
		struct task *t = &r->tasks[sr->tasks[i]];
		snprintf(text, sizeof text, "stage %-18s %s", ps->id,
			 t->st == T_DONE ? "done" : "FAILED");
		say(r, text, r->nodes[t->node].inv->name);
	}
	if (!failed) {
		end_stage(r, s, S_DONE, "ok");
		return 1;
	}
	if (r->pb.max_fail_pct >= 0 && ps->on != PB_ON_CLUSTER &&
	    ps->on != PB_ON_FIRST &&
	    100.0 * (double)failed / (double)sr->n_tasks <= r->pb.max_fail_pct) {
		/* Tolerated: the failed nodes leave the run. */
		for (size_t i = 0; i < sr->n_tasks; i++) {
			struct task *t = &r->tasks[sr->tasks[i]];
			if (t->st != T_FAILED)
				continue;
			r->nodes[t->node].excluded = 1;
			console_event(r, "node",
				      json_pack("{s:s, s:s, s:s}", "name",
						r->nodes[t->node].inv->name,
						"state", "excluded", "msg",
						t->msg));
		}
		end_stage(r, s, S_DONE, msg);
		return 1;
	}
	end_stage(r, s, S_FAILED, msg);
	if (ps->required && r->pb.fail_fast)
		r->stopping = 1;
	return 1;
}

static int all_links_settled(struct run *r)
{
	for (size_t i = 0; i < r->n_nodes; i++) {
		struct node *nd = &r->nodes[i];
		if (nd->failed)
			continue;
		if (!nd->link || !nd->hello)
			return 0;
	}
	return 1;
}

static void schedule(struct run *r)
{
	int progress = 1;
	if (r->replaying || r->finished)
		return;
	/* A stalled store: nothing starts or ends until it writes again. */
	if (intake_stall(r->intake, NULL))
		return;
	if (r->connecting) {
		if (!all_links_settled(r))
			return;
		r->connecting = 0;
	}
	while (progress) {
		progress = 0;
		for (size_t k = 0; k < r->pb.n; k++) {
			int s = (int)r->pb.order[k];
			struct stage_rt *sr = &r->stages[s];
			const struct pb_stage *ps = &r->pb.stages[s];
			int ready = 1, dead = 0;
			if (sr->st == S_RUNNING) {
				/* Tasks that wait for a link that came up. */
				for (size_t i = 0; i < sr->n_tasks; i++) {
					struct task *t = &r->tasks[sr->tasks[i]];
					struct node *nd = &r->nodes[t->node];
					if (t->st == T_WAIT)
						send_task(r, t);
					if (!is_final(t) && nd->failed) {
						t->st = T_FAILED;
						snprintf(t->msg, sizeof t->msg,
							 "%s", nd->why);
					}
				}
				progress |= settle_stage(r, s);
				continue;
			}
			if (sr->st != S_WAIT)
				continue;
			for (size_t j = 0; j < ps->n_needs; j++) {
				enum stage_state ns = r->stages[ps->needs[j]].st;
				if (ns != S_DONE)
					ready = 0;
				if (ns == S_FAILED || ns == S_SKIPPED)
					dead = 1;
			}
			if (dead) {
				char msg[160];
				snprintf(msg, sizeof msg,
					 "a stage it needs did not succeed");
				end_stage(r, s, S_SKIPPED, msg);
				progress = 1;
			} else if (r->stopping || r->cancelled) {
				end_stage(r, s, S_SKIPPED,
					  r->cancelled ? "cancelled"
						       : "fail-fast: a required "
							 "stage failed");
				progress = 1;
			} else if (ready) {
				start_stage(r, s);
				progress = 1;
			}
		}
	}
	for (size_t s = 0; s < r->pb.n; s++)
		if (r->stages[s].st == S_WAIT || r->stages[s].st == S_RUNNING)
			return;
	r->finished = 1;
}

/* ------------------------------------------------------------ operator */

static void cancel_stage_tasks(struct run *r, int s)
{
	struct stage_rt *sr = &r->stages[s];
	for (size_t i = 0; i < sr->n_tasks; i++) {
		struct task *t = &r->tasks[sr->tasks[i]];
		struct node *nd = &r->nodes[t->node];
		if (t->st == T_WAIT) {
			t->st = T_FAILED;
			snprintf(t->msg, sizeof t->msg, "cancelled");
		} else if ((t->st == T_SENT || t->st == T_RUNNING) && nd->link) {
			json_t *c = json_pack("{s:s, s:s}", "cmd", "cancel",
					      "stage_id", t->sid);
			send_json(r, nd, c);
			json_decref(c);
		}
	}
}

static void cancel_all(struct run *r)
{
	r->cancelled = 1;
	r->stopping = 1;
	console_log(r, "warn", "cancelled by the operator");
	for (size_t s = 0; s < r->pb.n; s++)
		if (r->stages[s].st == S_RUNNING)
			cancel_stage_tasks(r, (int)s);
}

static void show_running(struct run *r)
{
	FILE *f = r->out ? r->out : stderr;
	int any = 0;
	fprintf(f, "\n^C: still running (press ^C again within 1 s to "
		   "cancel):\n");
	for (size_t s = 0; s < r->pb.n; s++) {
		struct stage_rt *sr = &r->stages[s];
		json_t *names;
		char *set;
		if (sr->st != S_RUNNING)
			continue;
		names = json_array();
		for (size_t i = 0; i < sr->n_tasks; i++) {
			struct task *t = &r->tasks[sr->tasks[i]];
			if (!is_final(t))
				json_array_append_new(
				    names,
				    json_string(r->nodes[t->node].inv->name));
		}
		set = fold_array(names);
		fprintf(f, "  %-18s %-10s on %s (%.0f s)\n", r->pb.stages[s].id,
			r->pb.stages[s].step, set ? set : "?",
			(double)(now_ns() - sr->t0) / 1e9);
		free(set);
		json_decref(names);
		any = 1;
	}
	if (!any)
		fprintf(f, "  nothing (connecting or finishing)\n");
	fflush(f);
}

static void op_cancel_stage(void *arg, const char *stage_id)
{
	struct run *r = arg;
	int s = playbook_stage(&r->pb, stage_id);
	if (s >= 0 && r->stages[s].st == S_RUNNING) {
		console_log(r, "warn", "stage %s cancelled by the operator",
			    stage_id);
		cancel_stage_tasks(r, s);
	}
}

static void stage_reset(struct run *r, size_t k)
{
	r->stages[k].st = S_WAIT;
	free(r->stages[k].tasks);
	r->stages[k].tasks = NULL;
	r->stages[k].n_tasks = 0;
}

/* r on a failed stage reruns it; on a stage skipped because of a failure,
 * every failed stage.  Skipped stages wait again; schedule() starts what
 * is ready, with fresh tasks. */
static void op_rerun_stage(void *arg, const char *stage_id)
{
	struct run *r = arg;
	int s = playbook_stage(&r->pb, stage_id), any = 0;
	if (s < 0 || r->cancelled ||
	    (r->stages[s].st != S_FAILED && r->stages[s].st != S_SKIPPED))
		return;
	for (size_t k = 0; k < r->pb.n; k++)
		if (r->stages[k].st == S_FAILED &&
		    (r->stages[s].st == S_SKIPPED || (int)k == s)) {
			console_log(r, "info",
				    "stage %s: rerun requested by the operator",
				    r->pb.stages[k].id);
			stage_reset(r, k);
			any = 1;
		}
	if (!any)
		return;
	for (size_t k = 0; k < r->pb.n; k++)
		if (r->stages[k].st == S_SKIPPED)
			stage_reset(r, k);
	r->stopping = 0;
	r->finished = 0;
	r->held = 0;
}

static void op_marker(void *arg, const char *note)
{
	struct run *r = arg;
	console_event(r, "marker", json_pack("{s:s}", "note", note));
}

static void op_quit(void *arg)
{
	struct run *r = arg;
	if (!r->finished)
		cancel_all(r);
	r->quit = 1;
}

/* ----------------------------------------------------------- summary */

/* The checklist of this run (verdict.h): the playbook's stages with what
 * became of them, folded with the evidence. */
static json_t *run_checklist(struct run *r)
{
	struct verdict_stage *vs = calloc(r->pb.n + 1, sizeof *vs);
	json_t *rows = json_array(), *v, *items;
	const char *k;
	json_object_foreach(r->evidence, k, v) json_array_append(rows, v);
	for (size_t s = 0; s < r->pb.n; s++) {
		const struct pb_stage *ps = &r->pb.stages[s];
		vs[s].id = ps->id;
		vs[s].rehearsal = ps->rehearsal;
		vs[s].outcome = verdict_outcome(stage_state_names[r->stages[s].st]);
		vs[s].checks = json_object();
		for (size_t c = 0; c < ps->n_checks; c++)
			json_object_set_new(
			    vs[s].checks, ps->checks[c].item,
			    json_pack("{s:b}", "required",
				      ps->checks[c].required && ps->required));
	}
	items = verdict_items(vs, r->pb.n, rows);
	for (size_t s = 0; s < r->pb.n; s++)
		json_decref(vs[s].checks);
	free(vs);
	json_decref(rows);
	return items;
}

/* The item's evidence rows, folded by (stage, status, detail) over nodes. */
static void print_item(FILE *f, json_t *it)
{
	json_t *groups = json_array(), *e, *g;
	size_t i, j;
	json_array_foreach(json_object_get(it, "evidence"), i, e)
	{
		json_t *found = NULL;
		json_array_foreach(groups, j, g)
		{
			if (json_equal(json_object_get(g, "stage"),
				       json_object_get(e, "stage")) &&
			    json_equal(json_object_get(g, "status"),
				       json_object_get(e, "status")) &&
			    json_equal(json_object_get(g, "detail"),
				       json_object_get(e, "detail"))) {
				found = g;
				break;
			}
		}
		if (!found) {
			found = json_pack("{s:O, s:O, s:O, s:[]}", "stage",
					  json_object_get(e, "stage"), "status",
					  json_object_get(e, "status"), "detail",
					  json_object_get(e, "detail"), "nodes");
			json_array_append_new(groups, found);
		}
		if (strcmp(json_string_value(json_object_get(e, "node")) ?: "-",
			   "-"))
			json_array_append(json_object_get(found, "nodes"),
					  json_object_get(e, "node"));
	}
	json_array_foreach(groups, i, g)
	{
		char *set = json_array_size(json_object_get(g, "nodes"))
				? fold_array(json_object_get(g, "nodes"))
				: strdup("-");
		/* The item and its verdict on the first row; each further
		 * piece of evidence below it, with its own status. */
		fprintf(f, "%-24s %-7s %-14s %-16s %.100s\n",
			i ? "" : json_string_value(json_object_get(it, "item")),
			i ? json_string_value(json_object_get(g, "status"))
			  : json_string_value(json_object_get(it, "status")),
			*json_string_value(json_object_get(g, "stage"))
			    ? json_string_value(json_object_get(g, "stage"))
			    : "-",
			set ? set : "?",
			json_string_value(json_object_get(g, "detail")) ?: "");
		free(set);
	}
	json_decref(groups);
}

/* The checklist table: each item's verdict and its evidence per (stage,
 * node), then the rehearsal's evidence in a block of its own. */
static void print_checklist(struct run *r, FILE *f)
{
	json_t *items = run_checklist(r), *it;
	size_t i;
	int rehearsal = 0;
	fprintf(f, "\n%-24s %-7s %-14s %-16s %s\n", "CHECK", "STATUS", "STAGE",
		"NODES", "DETAIL");
	json_array_foreach(items, i, it)
	{
		if (json_is_true(json_object_get(it, "rehearsal")) &&
		    !rehearsal++)
			fprintf(f, "\n%-24s %-7s %-14s %-16s %s\n",
				"REHEARSAL", "STATUS", "STAGE", "NODES",
				"DETAIL (a shape-validation model: never the "
				"real model's)");
		print_item(f, it);
	}
	json_decref(items);
}

/* "failed: a, b": one line of the NO-GO's reasons. */
static void print_reasons(FILE *f, const char *what, json_t *list)
{
	size_t i;
	json_t *v;
	if (!json_array_size(list))
		return;
	fprintf(f, "%s", what);
	json_array_foreach(list, i, v)
	    fprintf(f, "%s%s", i ? ", " : " ", json_string_value(v));
	fputc('\n', f);
}

static void print_summary(struct run *r, FILE *f)
{
	size_t unreachable = 0;
	struct d0_err err = {{0}};
	json_t *verdict;
	print_checklist(r, f);
	fprintf(f, "\n%-18s %-8s %s\n", "STAGE", "RESULT", "NOTE");
	for (size_t k = 0; k < r->pb.n; k++) {
		int s = (int)r->pb.order[k];
		struct stage_rt *sr = &r->stages[s];
		fprintf(f, "%-18s %-8s %.300s\n", r->pb.stages[s].id,
			stage_state_names[sr->st],
			sr->st == S_DONE && !strcmp(sr->msg, "ok") ? "" : sr->msg);
	}
	for (size_t i = 0; i < r->n_nodes; i++)
		if (r->nodes[i].failed) {
			if (!unreachable++)
				fprintf(f, "\nunreachable:\n");
			fprintf(f, "  %s: %s\n", r->nodes[i].inv->name,
				r->nodes[i].why);
		}
	if (r->incomplete) {
		int64_t t0 = 0;
		const char *why = intake_stall(r->intake, &t0);
		fprintf(f,
			"\nverdict: INCOMPLETE (STORE: %s for %d s: the "
			"session file does not hold every event)\n"
			"session: %s\nthe agents keep what was not stored; "
			"make room, then:\n  day0 run --resume %s\n",
			why ? why : "not writable", r->o->store_wait_s,
			r->session, r->session);
		return;
	}
	fprintf(f, "\nverdict: %s%s\n", r->go ? "GO" : "NO-GO",
		r->cancelled ? " (cancelled)" : "");
	verdict = store_session_get(r->store, "verdict", &err);
	print_reasons(f, "failed:", json_object_get(verdict, "failed"));
	print_reasons(f, "skipped:", json_object_get(verdict, "skipped"));
	json_decref(verdict);
	fprintf(f, "session: %s\nreplay:  day0 replay %s\n"
		   "report:  day0 report %s --format html -o report.html\n",
		r->session, r->session, r->session);
}

/* --json: the verdict and every item with its evidence, for CI (stdout
 * holds only this; the lines go to stderr). */
static void print_json(struct run *r, FILE *f)
{
	struct d0_err err = {{0}};
	json_t *verdict = store_session_get(r->store, "verdict", &err);
	json_t *failed = json_object_get(verdict, "failed"),
	       *skipped = json_object_get(verdict, "skipped");
	json_t *o = json_pack(
	    "{s:s, s:b, s:b, s:s, s:s, s:o, s:o, s:o}", "verdict",
	    r->go ? "GO" : "NO-GO", "go", r->go, "cancelled", r->cancelled,
	    "session", r->session, "playbook", r->pb.name, "items",
	    run_checklist(r), "failed",
	    json_is_array(failed) ? json_incref(failed) : json_array(),
	    "skipped",
	    json_is_array(skipped) ? json_incref(skipped) : json_array());
	json_dumpf(o, f, JSON_INDENT(1));
	fputc('\n', f);
	fflush(f);
	json_decref(o);
	json_decref(verdict);
}

/* GO or NO-GO, with the reasons apart: what failed (stages, nodes,
 * required items) and what was skipped (required stages that never ran). */
static void decide(struct run *r)
{
	json_t *failed = json_array(), *skipped = json_array(), *items, *it;
	size_t i, j;
	int go = !r->cancelled;
	for (size_t s = 0; s < r->pb.n; s++) {
		enum stage_state st = r->stages[s].st;
		if (!r->pb.stages[s].required || st == S_DONE)
			continue;
		go = 0;
		json_array_append_new(st == S_FAILED ? failed : skipped,
				      json_sprintf("stage:%s",
						   r->pb.stages[s].id));
	}
	for (i = 0; i < r->n_nodes; i++)
		if (r->nodes[i].failed || r->nodes[i].excluded) {
			go = 0;
			json_array_append_new(
			    failed,
			    json_sprintf("node:%s", r->nodes[i].inv->name));
		}
	{
		/* A session whose file lacks events of a node is no GO. */
		struct store_node *sn = NULL;
		size_t nsn = 0;
		struct d0_err err = {{0}};
		if (store_nodes(r->store, &sn, &nsn, &err) == 0)
			for (size_t k = 0; k < nsn; k++)
				if (sn[k].missing > 0) {
					go = 0;
					json_array_append_new(
					    failed, json_sprintf("store:%s",
								 sn[k].node));
				}
		free(sn);
	}
	items = run_checklist(r);
	json_array_foreach(items, i, it)
	{
		json_t *e;
		if (!json_is_true(json_object_get(it, "required")))
			continue;
		json_array_foreach(json_object_get(it, "evidence"), j, e)
		{
			if (strcmp(json_string_value(json_object_get(e, "status")),
				   "fail"))
				continue;
			go = 0;
			json_array_append_new(
			    failed,
			    json_sprintf("%s@%s",
					 json_string_value(json_object_get(it, "item")),
					 json_string_value(json_object_get(e, "node"))));
		}
	}
	r->go = go;
	console_event(r, "verdict",
		      json_pack("{s:b, s:O, s:O, s:o}", "go", go, "failed",
				failed, "skipped", skipped, "items",
				verdict_statuses(items)));
	json_decref(items);
	{
		struct d0_err err = {{0}};
		json_t *v = json_pack("{s:b, s:o, s:o, s:i}", "go", go, "failed",
				      failed, "skipped", skipped, "exit",
				      go ? 0 : 1);
		store_session_set(r->store, "verdict", v, &err);
		json_decref(v);
		v = json_integer(now_ns());
		store_session_set(r->store, "finished", v, &err);
		json_decref(v);
	}
}

/* ------------------------------------------------------------- session */

static int write_manifest(struct run *r)
{
	struct d0_err err = {{0}};
	json_t *cmd = json_array(), *v;
	int rc = 0;
	for (int i = 0; i < r->o->argc; i++)
		json_array_append_new(cmd, json_string(r->o->argv[i]));
#define SET(key, val)                                                         \
	do {                                                                  \
		v = (val);                                                    \
		rc |= store_session_set(r->store, key, v, &err);              \
		json_decref(v);                                               \
	} while (0)
	SET("name", json_string(r->name));
	SET("playbook", json_incref(r->pb.doc));
	SET("playbook_path", json_string(r->pb.path));
	SET("inventory", json_incref(r->inv_doc));
	SET("inventory_path", json_string(r->o->inventory_path));
	{ /* every node after node-set expansion: the screens' labels */
		json_t *labels = json_object();
		for (size_t i = 0; i < r->n_nodes; i++)
			json_object_set_new(labels, r->nodes[i].inv->name,
					    json_string(r->nodes[i].inv->labels));
		SET("labels", labels);
	}
	SET("model", json_string(lookup_var(r, "model") ?: ""));
	SET("work", json_string(r->work));
	SET("tag", json_string(r->tag));
	SET("vars", json_incref(r->vars));
	SET("command", cmd);
	SET("versions", json_pack("{s:s, s:i}", "day0", DAY0_VERSION,
				  "protocol", DAY0_PROTO_VERSION));
	SET("started", json_integer(r->t_start));
#undef SET
	if (rc)
		fprintf(stderr, "day0: %s\n", err.msg);
	return rc;
}

/* The stages' exact command lines, the thresholds: the manifest's
 * second half, written when the run ends. */
static void write_manifest_end(struct run *r)
{
	struct d0_err err = {{0}};
	json_t *stages = json_array(), *checks = json_array();
	json_t *commands = store_session_get(r->store, "commands", &err);
	for (size_t s = 0; s < r->pb.n; s++) {
		const struct pb_stage *ps = &r->pb.stages[s];
		static const char *const on[] = {"all", "first", "cluster",
						 "set"};
		json_t *cmds = json_object_get(commands, ps->id), *cm;
		size_t i;
		json_t *st = json_pack(
		    "{s:s, s:s, s:s, s:s, s:b, s:O*}", "id", ps->id, "step",
		    ps->step, "on", ps->on == PB_ON_SET ? ps->on_set : on[ps->on],
		    "result", stage_state_names[r->stages[s].st], "rehearsal",
		    ps->rehearsal, "commands", cmds);
		/* Each node's command with the argv its agent reported. */
		json_array_foreach(cmds, i, cm)
		{
			const char *node =
			    json_string_value(json_object_get(cm, "node"));
			for (size_t k = 0; node && k < r->stages[s].n_tasks; k++) {
				struct task *t = &r->tasks[r->stages[s].tasks[k]];
				if (!strcmp(r->nodes[t->node].inv->name, node) &&
				    t->argv)
					json_object_set(cm, "argv", t->argv);
			}
		}
		json_array_append_new(stages, st);
		for (size_t k = 0; k < ps->n_checks; k++) {
			const struct pb_check *c = &ps->checks[k];
			json_t *o = json_pack("{s:s, s:s, s:b}", "item", c->item,
					      "stage", ps->id, "required",
					      c->required);
			if (c->has_min)
				json_object_set_new(o, "min", json_real(c->min));
			if (c->has_max)
				json_object_set_new(o, "max", json_real(c->max));
			json_array_append_new(checks, o);
		}
	}
	store_session_set(r->store, "stages", stages, &err);
	store_session_set(r->store, "checks", checks, &err);
	json_decref(stages);
	json_decref(checks);
	json_decref(commands);
	console_event(r, "check",
		      json_pack("{s:s, s:s, s:s}", "item", "repro.manifest",
				"status", "pass", "detail",
				"versions, facts, checksums, playbook, "
				"inventory and every command line recorded in "
				"the session file"));
}

/* Commit, then ack what is committed; a stalled store acks nothing, so
 * the agents keep their spools. */
static void commit_and_ack(struct run *r)
{
	r->last_commit = now_ns();
	if (intake_commit(r->intake, r->last_commit) < 0)
		return;
	for (size_t i = 0; i < r->n_nodes; i++) {
		struct node *nd = &r->nodes[i];
		int64_t acked;
		if (!nd->link || link_phase(nd->link) != LINK_UP || !nd->hello)
			continue;
		acked = store_acked_seq(r->store, nd->inv->name);
		if (acked > nd->ack_sent) {
			json_t *c = json_pack("{s:s, s:I}", "cmd", "ack", "seq",
					      (json_int_t)acked);
			send_json(r, nd, c);
			json_decref(c);
			nd->ack_sent = acked;
		}
	}
}

/* ---------------------------------------------------------------- links */

/* Link phase changes: hello on UP, reconnect on loss, fail on give-up. */
static void tend_links(struct run *r)
{
	int64_t t = now_ns();
	for (size_t i = 0; i < r->n_nodes; i++) {
		struct node *nd = &r->nodes[i];
		enum link_phase ph;
		if (nd->failed || r->finished)
			continue;
		if (!nd->link) {
			if (nd->retry_at && t >= nd->retry_at) {
				nd->retry_at = 0;
				node_connect(r, i);
			}
			continue;
		}
		ph = link_phase(nd->link);
		if (ph == LINK_UP && !nd->hello && !nd->ack_sent) {
			json_t *c = json_pack(
			    "{s:s, s:I}", "cmd", "hello", "acked",
			    (json_int_t)store_acked_seq(r->store,
							nd->inv->name));
			send_json(r, nd, c);
			json_decref(c);
			nd->ack_sent = -1; /* hello sent; acks after it */
			continue;
		}
		if (ph != LINK_EOF && ph != LINK_FAILED)
			continue;
		/* Lost: before the run started, an unreachable node; after,
		 * reconnect (a new agent takes the spool over and resends). */
		if (!nd->lost_at && (r->connecting && !nd->hello)) {
			nd->failed = 1;
			snprintf(nd->why, sizeof nd->why, "%s",
				 ph == LINK_FAILED ? link_error(nd->link)
						   : "the agent exited at start");
			if (ph == LINK_EOF && link_stderr(nd->link)[0])
				snprintf(nd->why, sizeof nd->why,
					 "the agent exited at start: %.400s",
					 link_stderr(nd->link));
			console_event(
			    r, "check",
			    json_pack("{s:s, s:s, s:s, s:s}", "item", "facts",
				      "status", "fail", "detail", nd->why,
				      "for", nd->inv->name));
			alert(r, "node", nd->inv->name, "unreachable", nd->why);
			/* It stays in the grid, as unreachable and why. */
			console_event(r, "node",
				      json_pack("{s:s, s:s, s:s}", "name",
						nd->inv->name, "state",
						"unreachable", "msg", nd->why));
			say(r, "node unreachable", nd->inv->name);
			link_free(nd->link);
			nd->link = NULL;
			continue;
		}
		if (!nd->lost_at)
			nd->lost_at = t;
		console_log(r, "warn", "%s: connection lost (%s); reconnecting",
			    nd->inv->name,
			    ph == LINK_FAILED ? link_error(nd->link)
					      : "the agent exited");
		say(r, "node connection lost, reconnecting", nd->inv->name);
		link_free(nd->link);
		nd->link = NULL;
		nd->hello = 0;
		if ((t - nd->lost_at) / 1000000000 > r->o->reconnect_s) {
			nd->failed = 1;
			snprintf(nd->why, sizeof nd->why,
				 "connection lost and not back after %d s",
				 r->o->reconnect_s);
			continue;
		}
		nd->reconnects++;
		nd->retry_at = t + (int64_t)(nd->reconnects < 5
						 ? 200000000LL * nd->reconnects
						 : 2000000000LL);
	}
}

/* --------------------------------------------------------------- intake */

static void say_store(struct run *r, const char *fmt, const char *what)
{
	if (r->out) {
		flush_said(r, 1);
		fprintf(r->out, "[%7.1fs] ", since(r, now_ns()));
		fprintf(r->out, fmt, what);
		fputc('\n', r->out);
		fflush(r->out);
	} else if (!r->live) {
		fprintf(stderr, "day0: ");
		fprintf(stderr, fmt, what);
		fputc('\n', stderr);
	}
}

/* The store's state: a stall announced once (on screen through the
 * alert, headless as a line), retried with backoff, given up after
 * --store-wait (the run then ends incomplete); once it is back, every
 * agent resends what the store lacks. */
static void tend_store(struct run *r, int64_t t)
{
	int64_t since_ns;
	const char *why;
	if (intake_retry(r->intake, t)) {
		r->store_ok_at = t;
		if (r->stall_said == 1)
			say_store(r, "STORE: writing again to %s; agents resend "
				     "what it lacks", r->session);
		r->stall_said = 2;
		r->stalled_alert = 0;
		console_event(r, "alert",
			      json_pack("{s:s, s:s, s:s}", "kind", "store",
					"state", "ok", "msg", "store writable"));
	}
	why = intake_stall(r->intake, &since_ns);
	if (!why) {
		/* Quiet for a while: a next stall is news again. */
		if (r->stall_said == 2 && t - r->store_ok_at > 10000000000LL)
			r->stall_said = 0;
		return;
	}
	if (!r->stalled_alert) {
		char msg[700];
		r->stalled_alert = 1;
		snprintf(msg, sizeof msg, "%s", why);
		if (!r->stall_said) {
			say_store(r, "STORE: %s (no acks, no new stages; "
				     "retrying)", msg);
			r->stall_said = 1;
		}
		console_event(r, "alert",
			      json_pack("{s:s, s:s, s:s}", "kind", "store",
					"state", "stalled", "msg", msg));
	}
	if ((t - since_ns) / 1000000000 >= r->o->store_wait_s)
		r->incomplete = 1;
}

/* Agents owed a resend (after a stall, or a rate limit) get a hello
 * with the store's committed seq; refusals become console alerts. */
static void tend_intake(struct run *r)
{
	int64_t t = now_ns(), acked;
	struct intake_alert a;
	tend_store(r, t);
	for (size_t i = 0; i < r->n_nodes; i++) {
		struct node *nd = &r->nodes[i];
		if (!nd->link || link_phase(nd->link) != LINK_UP ||
		    !nd->ack_sent)
			continue;
		if (intake_rewind_due(r->intake, (int)i, t, &acked)) {
			json_t *c = json_pack("{s:s, s:I}", "cmd", "hello",
					      "acked", (json_int_t)acked);
			send_json(r, nd, c);
			json_decref(c);
			if (acked > nd->ack_sent)
				nd->ack_sent = acked;
		}
	}
	while (intake_next_alert(r->intake, t, r->finished, &a)) {
		const char *node = r->nodes[a.node].inv->name;
		const char *reason = intake_reason_names[a.reason];
		char text[96];
		console_event(
		    r, "alert",
		    json_pack("{s:s, s:s, s:s, s:I, s:s, s:s, s:s++}", "kind",
			      a.reason == IN_RATE ? "rate" : "protocol", "for",
			      node, "reason", reason, "count",
			      (json_int_t)a.count, "example", a.example,
			      "detail", a.detail, "msg", reason, ": ",
			      a.detail));
		snprintf(text, sizeof text, "%s: %s (%llu)",
			 a.reason == IN_RATE ? "rate-limited" : "refused",
			 reason, (unsigned long long)a.count);
		say(r, text, node);
	}
}

/* ------------------------------------------------------------ the loop */

static int some_required_failed(struct run *r)
{
	for (size_t s = 0; s < r->pb.n; s++)
		if (r->pb.stages[s].required && r->stages[s].st != S_DONE)
			return 1;
	return 0;
}

static void loop(struct run *r)
{
	struct pollfd *pfd = calloc(r->n_nodes * 8 + 1, sizeof *pfd);
	int *owner = calloc(r->n_nodes * 8 + 1, sizeof *owner);
	int64_t bye_deadline = 0;
	for (;;) {
		int n = 0, timeout = 200, rc;
		if (sigint_count) {
			int64_t t = now_ns();
			if (sigint_count >= 2 && t - sigint_first_ns < 1000000000) {
				if (!r->cancelled)
					cancel_all(r);
			} else if (sigint_count >= 2) {
				sigint_count = 1;
				sigint_first_ns = t;
				show_running(r);
			} else if (!sigint_first_ns) {
				sigint_first_ns = t;
				show_running(r);
			}
			if (sigint_count == 1 && t - sigint_first_ns >= 1000000000) {
				sigint_count = 0;
				sigint_first_ns = 0;
			}
		}
		tend_links(r);
		tend_intake(r);
		if (r->incomplete)
			break;
		schedule(r);
		/* Live: a run whose stages all ended but some failed waits
		 * for the operator (r reruns a failed stage, q ends it). */
		if (r->finished && !bye_deadline && r->live && !r->quit &&
		    !r->cancelled && some_required_failed(r)) {
			if (!r->held) {
				r->held = 1;
				console_event(
				    r, "hold",
				    json_pack("{s:s}", "msg",
					      "every stage has ended, some "
					      "failed: r reruns a failed "
					      "stage, q ends the run"));
			}
		} else if (r->finished && !bye_deadline &&
			   !intake_stall(r->intake, NULL)) {
			if (!r->decided) {
				write_manifest_end(r);
				decide(r);
				r->decided = 1;
			}
			commit_and_ack(r);
			if (intake_stall(r->intake, NULL))
				continue; /* the verdict waits for the disk */
			for (size_t i = 0; i < r->n_nodes; i++)
				if (r->nodes[i].link &&
				    link_phase(r->nodes[i].link) == LINK_UP) {
					json_t *c = json_pack("{s:s}", "cmd",
							      "bye");
					send_json(r, &r->nodes[i], c);
					json_decref(c);
					link_close_input(r->nodes[i].link);
				}
			bye_deadline = now_ns() + 5000000000LL;
		}
		if (bye_deadline) {
			int open = 0;
			for (size_t i = 0; i < r->n_nodes; i++)
				if (r->nodes[i].link &&
				    link_phase(r->nodes[i].link) == LINK_UP)
					open++;
			/* The live screen stays on the verdict until the
			 * operator quits it. */
			if ((!open || now_ns() > bye_deadline) &&
			    (!r->live || r->quit) &&
			    !intake_stall(r->intake, NULL))
				break;
		}
		for (size_t i = 0; i < r->n_nodes; i++) {
			struct node *nd = &r->nodes[i];
			int k, lt;
			if (!nd->link)
				continue;
			k = link_pollfds(nd->link, pfd + n, 8);
			for (int j = 0; j < k; j++)
				owner[n + j] = (int)i;
			n += k;
			lt = link_timeout_ms(nd->link);
			if (lt >= 0 && lt < timeout)
				timeout = lt;
		}
		if (r->live) {
			int lt = live_tick(r->live);
			pfd[n] = (struct pollfd){live_fd(r->live), POLLIN, 0};
			owner[n++] = -1;
			if (lt >= 0 && lt < timeout)
				timeout = lt;
		}
		if (r->out && r->pending_since && timeout > 100)
			timeout = 100;
		rc = poll(pfd, (nfds_t)n, timeout);
		if (rc < 0 && errno != EINTR)
			break;
		/* Service every link (with its own revents, or a timeout
		 * pass) so timers run too. */
		for (size_t i = 0; i < r->n_nodes; i++) {
			int first = -1, cnt = 0;
			if (!r->nodes[i].link)
				continue;
			for (int j = 0; j < n; j++)
				if (owner[j] == (int)i) {
					if (first < 0)
						first = j;
					cnt++;
				}
			if (rc <= 0)
				for (int j = first; j >= 0 && j < first + cnt; j++)
					pfd[j].revents = 0;
			link_service(r->nodes[i].link,
				     first >= 0 ? pfd + first : pfd,
				     first >= 0 ? cnt : 0);
		}
		/* Commit (then ack) every half second: uncommitted events
		 * are still in the agents' spools, so a crash loses nothing,
		 * and fewer commits write far less (a commit rewrites every
		 * page it touched, and 1024 cards' series touch 1024 pages). */
		if (store_pending(r->store) &&
		    now_ns() - r->last_commit > COMMIT_NS)
			commit_and_ack(r);
		flush_said(r, 0);
	}
	if (!r->incomplete)
		commit_and_ack(r);
	flush_said(r, 1);
	free(pfd);
	free(owner);
}

/* ------------------------------------------------------------ set-up */

int runner_default_agent(char *out, size_t max)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;
	if (n <= 0)
		return -1;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = 0;
	if ((size_t)snprintf(out, max, "%s/day0-agent", self) >= max)
		return -1;
	return access(out, X_OK);
}

static int load_inventory_doc(struct run *r, const char *path)
{
	struct d0_err err = {{0}};
	json_error_t jerr;
	if (inventory_load(path, &r->inv, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		return -1;
	}
	r->inv_doc = json_load_file(path, 0, &jerr);
	if (!r->inv_doc) {
		fprintf(stderr, "day0: %s: %s\n", path, jerr.text);
		return -1;
	}
	return 0;
}

/* The spool a node's agent keeps for this session: relative to the home
 * directory over ssh (the exec channel starts there), under the state
 * directory for the local node. */
static void node_spool(struct run *r, struct node *nd)
{
	if (!strcmp(nd->inv->transport, "local")) {
		char dir[PATH_MAX];
		struct d0_err err;
		if (session_dir(dir, sizeof dir, 0, &err))
			snprintf(dir, sizeof dir, "/tmp");
		snprintf(nd->spool, sizeof nd->spool, "%.3800s/spool/%s/%s",
			 dir, r->tag, nd->inv->name);
	} else {
		snprintf(nd->spool, sizeof nd->spool, ".cache/day0/spool/%s/%s",
			 r->tag, nd->inv->name);
	}
}

/* The session's tag: its file's stem and 6 random hex digits, so that
 * two sessions never share an agent spool (a spool's seqs belong to one
 * store) even when their files have the same name. */
static void make_tag(struct run *r)
{
	const char *base = strrchr(r->session, '/');
	char stem[64];
	unsigned char rnd[3] = {0};
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
		uint64_t x = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 20);
		memcpy(rnd, &x, sizeof rnd);
	}
	if (fd >= 0)
		close(fd);
	base = base ? base + 1 : r->session;
	scpy(stem, sizeof stem, base);
	if (strlen(stem) > 3 && !strcmp(stem + strlen(stem) - 3, ".db"))
		stem[strlen(stem) - 3] = 0;
	snprintf(r->tag, sizeof r->tag, "%s-%02x%02x%02x", stem, rnd[0], rnd[1],
		 rnd[2]);
}

static void print_check(struct run *r, FILE *f)
{
	struct d0_err err = {{0}};
	fprintf(f, "# day0 run --check: %s (%zu stages) on %s (%zu nodes)\n",
		r->pb.path, r->pb.n, r->inv.name, r->n_nodes);
	fprintf(f, "# nothing is run; commands as each node's agent would "
		   "run them\n\n# agents\n");
	for (size_t i = 0; i < r->n_nodes; i++) {
		struct node *nd = &r->nodes[i];
		char **a = agent_argv(r, nd);
		json_t *argv = json_array();
		if (!strcmp(nd->inv->transport, "local")) {
			json_array_append_new(argv, json_string(r->agent));
		} else {
			json_array_append_new(argv, json_string("ssh"));
			json_array_append_new(argv, json_string("-p"));
			json_array_append_new(argv,
					      json_sprintf("%d", nd->inv->port));
			json_array_append_new(
			    argv, json_sprintf("%s@%s", nd->inv->user,
					       nd->inv->host));
			json_array_append_new(
			    argv, json_string(r->o->remote_agent
						  ? r->o->remote_agent
						  : "~/.cache/day0/bin/"
						    "day0-agent"));
		}
		for (size_t k = 0; a[k]; k++)
			json_array_append_new(argv, json_string(a[k]));
		fprintf(f, "%-10s ", nd->inv->name);
		shell_join(argv, f);
		fputc('\n', f);
		json_decref(argv);
		free_argv(a);
	}
	for (size_t k = 0; k < r->pb.n; k++) {
		int s = (int)r->pb.order[k];
		const struct pb_stage *ps = &r->pb.stages[s];
		json_t *nodes = stage_nodes(r, ps, &err);
		size_t i;
		json_t *v;
		fprintf(f, "\n# stage %s (%s, on %s)", ps->id, ps->step,
			ps->on == PB_ON_ALL       ? "all"
			: ps->on == PB_ON_FIRST   ? "first"
			: ps->on == PB_ON_CLUSTER ? "cluster"
						  : ps->on_set);
		if (ps->n_needs) {
			fprintf(f, " needs");
			for (size_t j = 0; j < ps->n_needs; j++)
				fprintf(f, " %s", r->pb.stages[ps->needs[j]].id);
		}
		if (ps->service)
			fprintf(f, "; service: kept running until the playbook "
				"ends%s%s", ps->ready_url[0] ? ", ready when " : "",
				ps->ready_url[0] ? "its URL answers" : "");
		fputc('\n', f);
		if (!nodes) {
			fprintf(f, "error: %s\n", err.msg);
			continue;
		}
		json_array_foreach(nodes, i, v)
		{
			struct task t = {0};
			json_t *cmd, *argv;
			char *js;
			t.stage = s;
			t.node = node_index(r, json_string_value(v));
			t.attempt = 1;
			task_sid(r, &t);
			cmd = task_command(r, &t, &err);
			if (!cmd) {
				fprintf(f, "%-10s error: %s\n",
					json_string_value(v), err.msg);
				continue;
			}
			argv = command_argv(r, cmd);
			fprintf(f, "%-10s ", json_string_value(v));
			shell_join(argv, f);
			js = json_dumps(cmd, JSON_COMPACT);
			fprintf(f, "\n%-10s agent <- %s\n", "", js);
			free(js);
			json_decref(cmd);
			json_decref(argv);
		}
		json_decref(nodes);
	}
}

static void run_free(struct run *r)
{
	for (size_t i = 0; i < r->n_nodes; i++)
		link_free(r->nodes[i].link);
	for (size_t i = 0; i < r->n_tasks; i++) {
		json_decref(r->tasks[i].checks);
		json_decref(r->tasks[i].argv);
	}
	for (size_t s = 0; r->stages && s < r->pb.n; s++)
		free(r->stages[s].tasks);
	free(r->stages);
	free(r->tasks);
	free(r->nodes);
	free(line_ctx);
	line_ctx = NULL;
	json_decref(r->inv_doc);
	json_decref(r->vars);
	json_decref(r->evidence);
	json_decref(r->said);
	json_decref(r->pending);
	intake_free(r->intake);
	r->intake = NULL;
	inventory_free(&r->inv);
	playbook_free(&r->pb);
}

static int replay_stored(void *arg, const struct store_event *e)
{
	struct run *r = arg;
	struct proto_event ev;
	struct d0_err err;
	if (proto_event_parse(e->body, e->body_len, &ev, &err))
		return 0;
	absorb(r, node_index(r, ev.node), &ev);
	proto_event_free(&ev);
	return 0;
}

/* --resume: the manifest says what was run. */
static int resume_setup(struct run *r, char *pb_tmp, char *inv_tmp)
{
	struct d0_err err = {{0}};
	json_t *pb, *inv, *v;
	FILE *f;
	if (store_open(r->o->resume_path, 0, &r->store, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		return -1;
	}
	snprintf(r->session, sizeof r->session, "%s", r->o->resume_path);
	pb = store_session_get(r->store, "playbook", &err);
	inv = store_session_get(r->store, "inventory", &err);
	if (!pb || !inv) {
		fprintf(stderr,
			"day0: %s: not a day0 run session (no playbook or "
			"inventory in its manifest)\n",
			r->session);
		json_decref(pb);
		json_decref(inv);
		return -1;
	}
	snprintf(pb_tmp, PATH_MAX, "/tmp/day0-resume-pb-%d.json", getpid());
	snprintf(inv_tmp, PATH_MAX, "/tmp/day0-resume-inv-%d.json", getpid());
	json_dump_file(pb, pb_tmp, 0);
	json_dump_file(inv, inv_tmp, 0);
	json_decref(pb);
	json_decref(inv);
	if ((v = store_session_get(r->store, "vars", &err)) && json_is_object(v))
		json_object_update(r->vars, v);
	json_decref(v);
	if ((v = store_session_get(r->store, "name", &err)) && json_is_string(v))
		snprintf(r->name, sizeof r->name, "%s", json_string_value(v));
	json_decref(v);
	if ((v = store_session_get(r->store, "tag", &err)) && json_is_string(v))
		snprintf(r->tag, sizeof r->tag, "%s", json_string_value(v));
	json_decref(v);
	if ((v = store_session_get(r->store, "work", &err)) && json_is_string(v))
		snprintf(r->work, sizeof r->work, "%s", json_string_value(v));
	json_decref(v);
	if ((v = store_session_get(r->store, "started", &err)) &&
	    json_is_integer(v))
		r->t_start = json_integer_value(v);
	json_decref(v);
	f = NULL;
	(void)f;
	return 0;
}

/* -e values may hold variables too: with the playbook's, they must
 * expand (no cycle, no runaway) before anything runs. */
static int check_var_values(struct run *r)
{
	json_t *all = json_deep_copy(r->pb.vars), *v;
	const char *k;
	int rc = 0;
	json_object_update(all, r->vars);
	r->cur_node = r->n_nodes ? 0 : -1; /* ${node}, ${cards}: the first */
	json_object_foreach(all, k, v)
	{
		struct d0_err err = {{0}};
		char where[96], *s;
		snprintf(where, sizeof where, "-e/vars %.64s", k);
		s = json_is_string(v) ? expand(r, json_string_value(v), where,
					       &err)
				      : NULL;
		if (!s) {
			fprintf(stderr, "day0: %s: %s\n", r->pb.path, err.msg);
			rc = -1;
			break;
		}
		free(s);
	}
	r->cur_node = -1;
	json_decref(all);
	return rc;
}

/* The user this console runs as (the local nodes' ${work}). */
static const char *console_user(void)
{
	struct passwd *pw = getpwuid(geteuid());
	static char uid[32];
	if (pw && pw->pw_name && *pw->pw_name)
		return pw->pw_name;
	snprintf(uid, sizeof uid, "%u", (unsigned)geteuid());
	return uid;
}

/* Every node a stage's `on` names is in the inventory: a typo would
 * otherwise be found when the stage starts, hours into the run. */
static int check_stage_sets(struct run *r)
{
	for (size_t s = 0; s < r->pb.n; s++) {
		const struct pb_stage *ps = &r->pb.stages[s];
		struct d0_err err = {{0}};
		char **names;
		size_t n;
		int bad = -1;
		if (ps->on != PB_ON_SET)
			continue;
		if (nodeset_expand(ps->on_set, &names, &n, &err)) {
			fprintf(stderr, "day0: %s: stages[%zu].on: %s\n",
				r->pb.path, s, err.msg);
			return -1;
		}
		for (size_t j = 0; j < n; j++) {
			if (bad < 0 && node_index(r, names[j]) < 0)
				bad = (int)j;
		}
		if (bad >= 0) {
			char **all = calloc(r->n_nodes + 1, sizeof *all);
			char *set;
			for (size_t i = 0; i < r->n_nodes; i++)
				all[i] = r->nodes[i].inv->name;
			set = nodeset_fold(all, r->n_nodes);
			fprintf(stderr,
				"day0: %s: stages[%zu].on: node '%s' is not in "
				"the inventory %s (its nodes: %s)\n",
				r->pb.path, s, names[bad], r->inv.name,
				set ? set : "?");
			free(set);
			free(all);
		}
		for (size_t j = 0; j < n; j++)
			free(names[j]);
		free(names);
		if (bad >= 0)
			return -1;
	}
	return 0;
}

/* Before the first stage: will the session's volume hold the samples?
 * About 40 bytes a card-sample stored (event text, samples row, index),
 * for each node's cards at the sampling rate, over the stages' timeouts
 * (10 min for a stage without one). */
static void warn_free_space(struct run *r)
{
	char dir[PATH_MAX], *slash;
	struct statvfs sv;
	double secs = 0, cards = 0, need, have;
	snprintf(dir, sizeof dir, "%s", r->session);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	else
		snprintf(dir, sizeof dir, ".");
	if (statvfs(dir[0] ? dir : "/", &sv) < 0)
		return;
	for (size_t s = 0; s < r->pb.n; s++)
		secs += r->pb.stages[s].timeout > 0 ? r->pb.stages[s].timeout
						    : 600;
	for (size_t i = 0; i < r->n_nodes; i++)
		cards += r->nodes[i].inv->cards + 1; /* + the host */
	need = cards * 4 * r->o->sample_hz * secs * 40;
	have = (double)sv.f_bavail * (double)sv.f_frsize;
	if (have < need)
		fprintf(stderr,
			"day0: warning: %s has %.1f MiB free; this run may "
			"store about %.1f MiB of samples (%.0f cards x %g Hz "
			"for up to %.0f s): a full disk pauses it (--store-wait "
			"%d s), then ends it incomplete\n",
			dir, have / 1048576, need / 1048576, cards,
			r->o->sample_hz, secs, r->o->store_wait_s);
}

int runner_main(const struct runner_opts *o)
{
	struct run r;
	struct d0_err err = {{0}};
	char pb_tmp[PATH_MAX] = "", inv_tmp[PATH_MAX] = "";
	const char *pb_path = o->playbook_path, *inv_path = o->inventory_path;
	int rc = EXIT_USAGE;
	struct sigaction sa;
	json_t *model = NULL;

	memset(&r, 0, sizeof r);
	r.o = o;
	r.cur_node = -1;
	r.vars = o->vars ? json_deep_copy(o->vars) : json_object();
	r.evidence = json_object();
	r.said = json_object();
	r.pending = json_object();
	r.t_start = now_ns();
	r.pb.max_fail_pct = -1;
	if (o->agent_path)
		snprintf(r.agent, sizeof r.agent, "%s", o->agent_path);
	else if (runner_default_agent(r.agent, sizeof r.agent)) {
		fprintf(stderr, "day0: cannot find day0-agent next to this "
				"program (use --agent PATH)\n");
		goto out;
	}
	if (o->resume_path) {
		if (resume_setup(&r, pb_tmp, inv_tmp))
			goto out;
		pb_path = pb_tmp;
		inv_path = inv_tmp;
		model = store_session_get(r.store, "model", &err);
	}
	if (playbook_load(pb_path, &r.pb, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		goto out;
	}
	if (!inv_path || !*inv_path)
		inv_path = r.pb.inventory[0] ? r.pb.inventory : NULL;
	if (!inv_path) {
		fprintf(stderr, "day0: %s: no inventory: give --inventory "
				"INV.json (or \"inventory\" in the playbook)\n",
			pb_path);
		goto out;
	}
	{ /* -e: only the playbook's own variables */
		const char *k;
		json_t *v;
		json_object_foreach(r.vars, k, v)
		{
			int builtin = 0;
			for (int i = 0; playbook_builtins[i]; i++)
				builtin |= !strcmp(k, playbook_builtins[i]);
			if (builtin || !json_object_get(r.pb.vars, k)) {
				char *has = json_dumps(r.pb.vars, JSON_COMPACT);
				fprintf(stderr,
					"day0: -e %s: %s (the playbook's "
					"variables: %s)\n",
					k,
					builtin ? "a built-in variable, set by "
						  "the console (--model, --work, "
						  "the inventory)"
						: "the playbook has no such "
						  "variable",
					has ? has : "{}");
				free(has);
				goto out;
			}
		}
	}
	if (load_inventory_doc(&r, inv_path))
		goto out;
	if (!r.name[0])
		snprintf(r.name, sizeof r.name, "%s", r.pb.name);
	{
		struct runner_opts *mo = (struct runner_opts *)o;
		if (model && json_is_string(model) && !o->model)
			mo->model = json_string_value(model);
		if (!mo->inventory_path)
			mo->inventory_path = inv_path;
	}
	/* Nodes. */
	r.n_nodes = r.inv.n;
	r.nodes = calloc(r.n_nodes, sizeof *r.nodes);
	line_ctx = calloc(r.n_nodes, sizeof *line_ctx);
	for (size_t i = 0; i < r.n_nodes; i++) {
		r.nodes[i].inv = &r.inv.nodes[i];
		line_ctx[i].r = &r;
		line_ctx[i].node = (int)i;
	}
	r.stages = calloc(r.pb.n ? r.pb.n : 1, sizeof *r.stages);
	if (check_stage_sets(&r) || check_var_values(&r))
		goto out; /* before any session file is written */
	if (!o->resume_path) {
		if (o->session_path)
			snprintf(r.session, sizeof r.session, "%s",
				 o->session_path);
		else if (!o->check_only &&
			 session_new_path(r.name, r.session, sizeof r.session,
					  &err)) {
			fprintf(stderr, "day0: %s\n", err.msg);
			goto out;
		} else if (o->check_only)
			snprintf(r.session, sizeof r.session, "SESSION.db");
	}
	if (!r.tag[0]) {
		if (o->check_only)
			snprintf(r.tag, sizeof r.tag, "SESSION");
		else
			make_tag(&r);
	}
	if (!r.work[0]) {
		if (o->work)
			scpy(r.work, sizeof r.work, o->work);
		else
			snprintf(r.work, sizeof r.work, "/tmp/day0-work-%s/%s",
				 console_user(), r.tag);
	}
	for (size_t i = 0; i < r.n_nodes; i++)
		node_spool(&r, &r.nodes[i]);
	if (!lookup_var(&r, "model") || !*lookup_var(&r, "model")) {
		for (size_t s = 0; s < r.pb.n; s++)
			for (size_t k = 0; k < r.pb.stages[s].n_args; k++)
				if (strstr(r.pb.stages[s].args[k], "${model}")) {
					fprintf(stderr,
						"day0: %s: stage '%s' uses "
						"${model}: give --model DIR\n",
						r.pb.path, r.pb.stages[s].id);
					goto out;
				}
	}
	if (o->check_only) {
		print_check(&r, o->out ? o->out : stdout);
		rc = EXIT_OK;
		goto out;
	}
	if (!r.store && store_open(r.session, STORE_CREATE, &r.store, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		goto out;
	}
	{
		const char **names = calloc(r.n_nodes + 1, sizeof *names);
		struct intake_opts io = {o->node_rate, 0};
		for (size_t i = 0; i < r.n_nodes; i++)
			names[i] = r.nodes[i].inv->name;
		r.intake = intake_new(r.store, names, r.n_nodes, &io);
		free(names);
	}
	if (!o->resume_path)
		warn_free_space(&r);
	if (o->resume_path) {
		r.replaying = 1;
		if (store_events(r.store, INT64_MIN, INT64_MAX, replay_stored,
				 &r, &err) < 0) {
			fprintf(stderr, "day0: %s\n", err.msg);
			goto out;
		}
		r.replaying = 0;
		/* Tasks that were mid-flight: their agents' resends settle
		 * them; unsent ones go when the links are up. */
		for (size_t i = 0; i < r.n_tasks; i++)
			if (r.tasks[i].st == T_SENT)
				r.tasks[i].st = T_RUNNING;
		console_log(&r, "info", "resumed by a new console (pid %d)",
			    (int)getpid());
	} else if (write_manifest(&r)) {
		goto out;
	}
	r.connecting = 1;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	r.out = o->headless ? (o->out ? o->out : stdout) : NULL;
	if (!o->headless) {
		struct live_opts lo = {o->ascii, o->no_color, o->stats_path};
		static const struct live_ops ops = {
		    op_cancel_stage, op_rerun_stage, op_marker, op_quit};
		if (live_start(r.store, &lo, &ops, &r, &r.live, &err)) {
			fprintf(stderr, "day0: %s; running headless\n", err.msg);
			r.out = o->out ? o->out : stdout;
			r.live = NULL;
		}
	}
	if (r.out)
		fprintf(r.out, "day0: %s on %s (%zu nodes), session %s\n",
			r.pb.name, r.inv.name, r.n_nodes, r.session);
	for (size_t i = 0; i < r.n_nodes; i++)
		node_connect(&r, i);
	loop(&r);
	live_end(r.live);
	r.live = NULL;
	if (!r.finished && !r.incomplete) {
		/* Broken out early (poll failure): record what is known. */
		decide(&r);
		commit_and_ack(&r);
	}
	print_summary(&r, o->out ? o->out : stdout);
	if (o->json && !r.incomplete)
		print_json(&r, stdout);
	rc = r.incomplete ? EXIT_INCOMPLETE : r.go ? EXIT_OK : EXIT_CHECK_FAILED;
out:
	if (r.store && store_close(r.store, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		if (rc != EXIT_INCOMPLETE)
			rc = EXIT_CHECK_FAILED;
	}
	json_decref(model);
	run_free(&r);
	if (pb_tmp[0])
		unlink(pb_tmp);
	if (inv_tmp[0])
		unlink(inv_tmp);
	return rc;
}
