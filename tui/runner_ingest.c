/*
 * runner_ingest.c - the playbook runner, part: what comes in: agent lines bound to their links and absorbed into the state, the console's own events, commits and acks, the manifest, the links kept up.
 * runner_int.h says how the parts fit.
 */
#include "runner_int.h"

/* ------------------------------------------------------- console events */


/* Record one console event (node "console"). */
void console_event(struct run *r, const char *type, json_t *fields)
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
void alert(struct run *r, const char *kind, const char *node,
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

void console_log(struct run *r, const char *level, const char *fmt,
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

/* --------------------------------------------------------------- agents */


struct line_ctx *line_ctx; /* one per node */

#define AGENT_ARGV_MAX 40 /* ours (21 at most) and the inventory's */

char **agent_argv(struct run *r, struct node *nd)
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
	a[n++] = strdup("--session");
	a[n++] = strdup(r->tag);
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

void free_argv(char **a)
{
	for (size_t i = 0; a && a[i]; i++)
		free(a[i]);
	free(a);
}

void node_connect(struct run *r, size_t i)
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
	nd->link_gen++;
	if (link_open(&cfg, &nd->link, &err)) {
		nd->link = NULL;
		nd->failed = 1;
		scpy(nd->why, sizeof nd->why, err.msg);
	}
	free_argv(args);
}

void send_json(struct run *r, struct node *nd, json_t *cmd)
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

/* ---------------------------------------------------------------- absorb */

/* One check into the evidence: the last per (item, stage, node, rank);
 * the headless line when the (item, stage, node) status changes. */
void note_check(struct run *r, const char *node, const char *stage,
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
void forget_evidence(struct run *r, const char *stage, const char *node)
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

struct task *oldest_sent(struct run *r, int node)
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


/*
 * A node's new agent said hello after a lost connection.  A run command
 * is not spooled (only what the agent did with it is), so one that left
 * on the connection as it died reached no agent, and no start or "lost"
 * end will ever come for it: without this the stage would wait for ever
 * (the fleet bench's mass reconnect, killing every session just as a
 * stage was sent, hung the run that way).
 *
 * The new agent took the spool over once the old one had gone, ended
 * the old one's running stages "lost" (stage_recover), then said hello:
 * every event the old agent spooled has a lower seq than that hello.
 * So once the store holds every seq below it (none dropped by a stall or
 * a rate limit, still to be resent), a task sent on an earlier link and
 * still waiting for its start (T_SENT) never reached the node and goes
 * again under the same id.  A
 * hello of the old agent's, resent from the spool, does not count: it
 * says the old pid (absorb).  A cancelled task's (or run's) lost
 * command is not resent but ends cancelled.
 */
static void resend_lost_commands(struct run *r, int node)
{
	struct node *nd = &r->nodes[node];
	if (r->replaying || !nd->resend_after)
		return;
	if (store_acked_seq(r->store, nd->inv->name) < nd->resend_after - 1)
		return; /* a seq below the hello is still missing */
	nd->resend_after = 0;
	for (size_t i = 0; i < r->n_tasks; i++) {
		struct task *t = &r->tasks[i];
		char text[160];
		/* sent on this link (a rerun after a "lost" end): it is
		 * the new agent's, its start is on the way */
		if (t->node != node || t->st != T_SENT ||
		    t->sent_link == nd->link_gen)
			continue;
		if (r->cancelled || t->cancelled) {
			t->st = T_FAILED;
			snprintf(t->msg, sizeof t->msg, "cancelled");
			continue;
		}
		console_log(r, "warn",
			    "%s: stage %s: its command was lost with the "
			    "connection (no start came back): sent again",
			    nd->inv->name, t->sid);
		snprintf(text, sizeof text, "stage %-18s resent (lost command)",
			 r->pb.stages[t->stage].id);
		say(r, text, nd->inv->name);
		/* Waiting again: a stalled store holds it back (send_task),
		 * and the scheduler sends waiting tasks when it writes. */
		t->st = T_WAIT;
		send_task(r, t);
	}
}

/*
 * A service that was up (its stage ended done) and then ended on its own:
 * killed, crashed, out of memory, timed out, its agent lost.  Not the
 * playbook's end stopping it (bye: shutdown) or a cancel.  Its stage
 * becomes failed, with the cause, so the table, the verdict and the
 * report say the service died instead of "done" (the stages using it
 * fail too, but their errors do not say why).
 */
static void service_died(struct run *r, struct task *t, json_t *o)
{
	const char *reason = json_string_value(json_object_get(o, "reason"));
	const char *msg = json_string_value(json_object_get(o, "msg"));
	const char *cause = json_string_value(json_object_get(o, "cause"));
	int s = t->stage;
	char why[512];
	if (r->cancelled || t->cancelled ||
	    (reason && (!strcmp(reason, "shutdown") || !strcmp(reason, "cancel"))))
		return;
	t->st = T_FAILED;
	t->rc = (int)json_integer_value(json_object_get(o, "rc"));
	if (!t->rc)
		t->rc = 1;
	snprintf(t->msg, sizeof t->msg, "the service stopped after it was up: %.100s%s%.300s",
		 msg ? msg : reason ? reason : "ended", cause && *cause ? ": " : "",
		 cause ? cause : "");
	/* --resume replaying the file: the stage's failed end is in it */
	if (r->replaying || r->stages[s].st != S_DONE)
		return;
	console_log(r, "error", "%s: stage %s: %s", r->nodes[t->node].inv->name,
		    t->sid, t->msg);
	snprintf(why, sizeof why, "%.60s: %.400s", r->nodes[t->node].inv->name,
		 t->msg);
	{
		char text[160];
		snprintf(text, sizeof text, "stage %-18s FAILED (the service stopped)",
			 r->pb.stages[s].id);
		say(r, text, r->nodes[t->node].inv->name);
	}
	end_stage(r, s, S_FAILED, why);
	if (r->pb.stages[s].required && r->pb.fail_fast)
		r->stopping = 1;
}

/* One event, stored already: fold it into the runner's state. */
void absorb(struct run *r, int node, struct proto_event *ev)
{
	json_t *o = ev->obj;
	const char *sid = json_string_value(json_object_get(o, "stage_id"));
	struct task *t;
	if (node < 0) {
		if (!strcmp(ev->node, CONSOLE_NODE)) {
			if (ev->kind == EV_CHECK) {
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
	if (ev->kind == EV_HELLO) {
		struct node *nd = &r->nodes[node];
		int pid;
		nd->hello = 1;
		if (json_is_true(json_object_get(o, "sim")) && !nd->sim) {
			/* its events say so too; the verdict will */
			nd->sim = 1;
			say(r, "node simulated (no real work runs)",
			    nd->inv->name);
		}
		pid = (int)json_integer_value(json_object_get(o, "pid"));
		if (nd->lost_at && pid && pid == nd->agent_pid)
			return; /* the old agent's, resent from its spool */
		nd->agent_pid = pid;
		if (nd->lost_at) {
			/* back: a later loss gets its own reconnect_s */
			nd->lost_at = 0;
			nd->reconnects = 0;
			nd->resend_after = ev->seq;
			say(r, "node reconnected", nd->inv->name);
		}
		return;
	}
	if (ev->kind == EV_FACTS) {
		/* kept for facts.compat (runner_compat.c) */
		json_decref(r->nodes[node].facts);
		r->nodes[node].facts = json_deep_copy(o);
		return;
	}
	if (ev->kind == EV_BYE) {
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
	if (ev->kind == EV_CHECK) {
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
	if (ev->kind == EV_STAGE && sid &&
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
		else if (!strcmp(state, "end") && t->st == T_DONE &&
			 r->pb.stages[t->stage].service)
			service_died(r, t, o);
		return;
	}
	if (ev->kind == EV_ERROR) {
		const char *cmd = json_string_value(json_object_get(o, "cmd"));
		const char *msg = json_string_value(json_object_get(o, "msg"));
		/* The agent names the refused command's stage_id: that
		 * task ends, and none when it is not waiting for its start
		 * (a resent command the agent already runs).  An agent
		 * that names none: the oldest command still waiting. */
		if (cmd && (!strcmp(cmd, "run") || !strcmp(cmd, "facts")) &&
		    (t = sid ? find_task(r, node, sid) : oldest_sent(r, node)) &&
		    t->st == T_SENT) {
			t->attempt = r->pb.stages[t->stage].retries + 1;
			task_ended(r, t, 2, "refused", msg, NULL);
		}
	}
}

/* On --resume: the console's own stage starts rebuild the tasks. */

void absorb_console(struct run *r, struct proto_event *ev)
{
	json_t *o = ev->obj;
	if (ev->seq > r->console_seq)
		r->console_seq = ev->seq;
	if (!r->replaying)
		return;
	if (ev->kind == EV_STAGE) {
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
	} else if (ev->kind == EV_NODE) {
		const char *name = json_string_value(json_object_get(o, "name"));
		const char *state = json_string_value(json_object_get(o, "state"));
		for (size_t i = 0; name && state && i < r->n_nodes; i++)
			if (!strcmp(r->nodes[i].inv->name, name)) {
				if (!strcmp(state, "excluded"))
					r->nodes[i].excluded = 1;
			}
	}
}

int node_index(struct run *r, const char *name)
{
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!strcmp(r->nodes[i].inv->name, name))
			return (int)i;
	return -1;
}

/* One stored line: fold it into the live view and the runner. */
void fold_line(struct run *r, int node, const char *line, size_t len)
{
	struct d0_err err = {{0}};
	struct proto_event ev;
	/* Samples are most of the traffic and change no runner state: no
	 * need to build their tree (the store and the view scan them). */
	if (len > 20 && memmem(line, len, "\"type\":\"sample\"", 15)) {
		if (r->live)
			live_event(r->live, line, len);
		return;
	}
	if (proto_event_parse(line, len, &ev, &err)) {
		if (r->live) /* the view refuses it the same way */
			live_event(r->live, line, len);
		return;
	}
	/* one parse for the view and the runner */
	live_event_parsed(r->live, &ev, line, len);
	/* the intake let the line in only if it names its link's node */
	if (node >= 0 ? strcmp(r->nodes[node].inv->name, ev.node) != 0
		      : strcmp(ev.node, CONSOLE_NODE) != 0)
		node = node_index(r, ev.node);
	absorb(r, node, &ev);
	proto_event_free(&ev);
}

/* The console's own event: stored (held while the store is stalled),
 * then folded. */
void feed_console(struct run *r, const char *line, size_t len)
{
	struct d0_err err = {{0}};
	if (intake_console(r->intake, line, len, &err)) {
		fprintf(stderr, "day0: %s\n", err.msg);
		return;
	}
	fold_line(r, -1, line, len);
}

/* A line from node i's link: through the door (intake.c), folded only
 * when it is new. */
void on_agent_line(void *arg, const char *line, size_t len)
{
	struct line_ctx *c = arg;
	if (intake_line(c->r->intake, c->node, line, len, now_ns()) ==
	    INTAKE_STORED)
		fold_line(c->r, c->node, line, len);
}

void on_agent_toolong(void *arg, size_t len)
{
	struct line_ctx *c = arg;
	intake_toolong(c->r->intake, c->node, len, now_ns());
}

/* ------------------------------------------------------------- session */

int write_manifest(struct run *r)
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
	{
		char fam[128];
		model_family_of(lookup_var(r, "model"), fam, sizeof fam);
		SET("model_family", json_string(fam));
	}
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
void write_manifest_end(struct run *r)
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
void commit_and_ack(struct run *r)
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
void tend_links(struct run *r)
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
		if (ph == LINK_UP && nd->hello && nd->resend_after)
			resend_lost_commands(r, (int)i);
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

void say_store(struct run *r, const char *fmt, const char *what)
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
void tend_store(struct run *r, int64_t t)
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
void tend_intake(struct run *r)
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
