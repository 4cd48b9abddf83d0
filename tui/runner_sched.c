/*
 * runner_sched.c - the playbook runner, part: scheduling: tasks (one stage on one node), stages (start, settle, end, retry, skip) and the operator's cancel / rerun / marker.
 * runner_int.h says how the parts fit.
 */
#include "runner_int.h"

/* ----------------------------------------------------------------- tasks */

struct task *find_task(struct run *r, int node, const char *sid)
{
	/* Newest first: the current attempt. */
	for (size_t i = r->n_tasks; i-- > 0;)
		if (r->tasks[i].node == node && !strcmp(r->tasks[i].sid, sid))
			return &r->tasks[i];
	return NULL;
}

/* A task's sid for attempt n: the stage id, then "ID.n". */
void task_sid(struct run *r, struct task *t)
{
	const char *id = r->pb.stages[t->stage].id;
	if (t->attempt <= 1)
		snprintf(t->sid, sizeof t->sid, "%s", id);
	else
		snprintf(t->sid, sizeof t->sid, "%s.%d", id, t->attempt);
}

int is_final(const struct task *t)
{
	return t->st == T_DONE || t->st == T_FAILED;
}

/* Tests only (tests/sh/test_console.sh): DAY0_TEST_CRASH_AFTER_SEND=SID
 * makes the console SIGKILL itself once the run command of stage id SID
 * has left and the agent's start of it came back (read, not committed):
 * the moment the write-ahead rule in send_task covers. */
static void test_crash_after_send(struct run *r, struct node *nd,
				  struct task *t)
{
	const char *want = getenv("DAY0_TEST_CRASH_AFTER_SEND");
	(void)r;
	if (!want || strcmp(want, t->sid))
		return;
	for (int i = 0; i < 500 && t->st == T_SENT && nd->link &&
			link_phase(nd->link) == LINK_UP;
	     i++) {
		struct pollfd p[16];
		int n = link_pollfds(nd->link, p, 16);
		poll(p, (nfds_t)n, 10);
		link_service(nd->link, p, n);
	}
	raise(SIGKILL);
}

/* Tests only (tests/sh/test_console.sh): DAY0_TEST_LOSE_SEND=SID makes
 * the first run command of stage id SID vanish as if it had left on a
 * connection that died under it (the test then kills the agent): the
 * task waits for a start no agent will send, until the new agent's hello
 * has it sent again (resend_lost_commands). */
static int test_lose_send(struct task *t)
{
	static int lost;
	const char *want = getenv("DAY0_TEST_LOSE_SEND");
	if (lost || !want || strcmp(want, t->sid))
		return 0;
	lost = 1;
	return 1;
}

void send_task(struct run *r, struct task *t)
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
	/* Write-ahead: what led to this command (the console's stage start,
	 * the agent event that ended the last attempt) is on disk before the
	 * agent acts on it.  A console killed after the send but before its
	 * loop's commit would otherwise, resumed, not know the command went
	 * out and send it again under the same stage id: the agent, which
	 * ran it already, runs it twice into one id (the resume soak's
	 * "160 of 150 lines").  Stalled store: the task waits (T_WAIT) and
	 * goes when the store writes again. */
	if (r->intake && intake_commit(r->intake, now_ns()) < 0) {
		json_decref(cmd);
		return;
	}
	if (!test_lose_send(t))
		send_json(r, nd, cmd);
	json_decref(cmd);
	t->st = T_SENT;
	t->sent_order = ++nd->sends;
	t->sent_link = nd->link_gen;
	test_crash_after_send(r, nd, t);
}

/* Check a finished task against the stage's declared items and
 * thresholds; returns 0 when they hold, else fills why. */
int judge_checks(struct run *r, struct task *t, char *why, size_t max)
{
	const struct pb_stage *st = &r->pb.stages[t->stage];
	for (size_t i = 0; i < st->n_checks; i++) {
		const struct pb_check *c = &st->checks[i];
		json_t *got = json_object_get(t->checks, c->item);
		const char *status =
		    json_string_value(json_object_get(got, "status"));
		json_t *value = json_object_get(got, "value");
		if (!got && !strcmp(c->item, "facts.compat") &&
		    !strcmp(st->step, "facts"))
			continue; /* the console's, across nodes: settle_stage */
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


/* Send the task again as its next attempt (a new stage id for the
 * agent); text is the headless line. */
void task_again(struct run *r, struct task *t, const char *text)
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

void task_ended(struct run *r, struct task *t, int rc,
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
	    t->interrupted < 3 && !r->cancelled && !t->cancelled) {
		char text[160];
		t->interrupted++;
		console_log(r, "warn", "%s: stage %s %s: running it again",
			    r->nodes[t->node].inv->name, t->sid, reason);
		snprintf(text, sizeof text, "stage %-18s rerun (%s)", st->id,
			 reason);
		task_again(r, t, text);
		return;
	}
	if (t->attempt <= st->retries && !r->cancelled && !t->cancelled &&
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

/* ---------------------------------------------------------------- stages */

void add_task(struct run *r, int s, int node)
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
void start_stage_on(struct run *r, int s, json_t *nodes)
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
json_t *stage_nodes(struct run *r, const struct pb_stage *st,
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

void end_stage(struct run *r, int s, enum stage_state st,
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

void start_stage(struct run *r, int s)
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
int settle_stage(struct run *r, int s)
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
	/* facts.compat over the nodes whose facts came (also when failures
	 * are tolerated: the rest must still agree). */
	if (!strcmp(ps->step, "facts") &&
	    compat_stage_end(r, s, failed ? text : msg,
			     failed ? sizeof text : sizeof msg)) {
		end_stage(r, s, S_FAILED, msg);
		if (ps->required && r->pb.fail_fast)
			r->stopping = 1;
		return 1;
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

int all_links_settled(struct run *r)
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

void schedule(struct run *r)
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

void cancel_stage_tasks(struct run *r, int s)
{
	struct stage_rt *sr = &r->stages[s];
	for (size_t i = 0; i < sr->n_tasks; i++) {
		struct task *t = &r->tasks[sr->tasks[i]];
		struct node *nd = &r->nodes[t->node];
		/* Its cancel may be lost with a connection (or the node may be
		 * reconnecting): whatever end comes, it does not run again. */
		if (!is_final(t))
			t->cancelled = 1;
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

void cancel_all(struct run *r)
{
	r->cancelled = 1;
	r->stopping = 1;
	console_log(r, "warn", "cancelled by the operator");
	for (size_t s = 0; s < r->pb.n; s++)
		if (r->stages[s].st == S_RUNNING)
			cancel_stage_tasks(r, (int)s);
}

void show_running(struct run *r)
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

void op_cancel_stage(void *arg, const char *stage_id)
{
	struct run *r = arg;
	int s = playbook_stage(&r->pb, stage_id);
	if (s >= 0 && r->stages[s].st == S_RUNNING) {
		console_log(r, "warn", "stage %s cancelled by the operator",
			    stage_id);
		cancel_stage_tasks(r, s);
	}
}

void stage_reset(struct run *r, size_t k)
{
	r->stages[k].st = S_WAIT;
	free(r->stages[k].tasks);
	r->stages[k].tasks = NULL;
	r->stages[k].n_tasks = 0;
}

/* r on a failed stage reruns it; on a stage skipped because of a failure,
 * every failed stage.  Skipped stages wait again; schedule() starts what
 * is ready, with fresh tasks. */
void op_rerun_stage(void *arg, const char *stage_id)
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

void op_marker(void *arg, const char *note)
{
	struct run *r = arg;
	console_event(r, "marker", json_pack("{s:s}", "note", note));
}

void op_quit(void *arg)
{
	struct run *r = arg;
	if (!r->finished)
		cancel_all(r);
	r->quit = 1;
}
