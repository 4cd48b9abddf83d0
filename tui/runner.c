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
#include "runner_int.h"

static volatile sig_atomic_t sigint_count;
static int64_t sigint_first_ns;

static void on_sigint(int sig)
{
	(void)sig;
	sigint_count++;
}

/* ------------------------------------------------------------ the loop */

int some_required_failed(struct run *r)
{
	for (size_t s = 0; s < r->pb.n; s++)
		if (r->pb.stages[s].required && r->stages[s].st != S_DONE)
			return 1;
	return 0;
}

void loop(struct run *r)
{
	struct pollfd *pfd = calloc(r->n_nodes * 8 + 1, sizeof *pfd);
	/* per node: its first pollfd, how many, and whether it must be
	 * serviced whatever poll says (a timer due, work left, no fds) */
	int *first = calloc(r->n_nodes + 1, sizeof *first);
	int *cnt = calloc(r->n_nodes + 1, sizeof *cnt);
	char *must = calloc(r->n_nodes + 1, 1);
	int64_t bye_deadline = 0, last_wake = 0;
	for (;;) {
		int n = 0, timeout = 200, rc, steady = 1;
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
			first[i] = n;
			cnt[i] = k;
			n += k;
			lt = link_timeout_ms(nd->link);
			if (lt >= 0 && lt < timeout)
				timeout = lt;
			/* no fds: a link between phases must be serviced
			 * again at once; one whose agent has exited (EOF)
			 * or that failed only on the next timeout (it has
			 * nothing left to read, and tend_links handles it at
			 * the loop's top: the verdict screen of a finished
			 * run spun a core on poll(stdin, 0) for as long as it
			 * stayed open) */
			must[i] = (k == 0 && link_phase(nd->link) != LINK_EOF &&
				   link_phase(nd->link) != LINK_FAILED) ||
				  lt == 0 || link_busy(nd->link);
			if (must[i])
				timeout = 0;
			if (link_phase(nd->link) != LINK_UP)
				steady = 0;
		}
		if (r->live) {
			int lt = live_tick(r->live);
			pfd[n++] = (struct pollfd){live_fd(r->live), POLLIN, 0};
			if (lt >= 0 && lt < timeout)
				timeout = lt;
		}
		if (r->out && r->pending_since && timeout > 100)
			timeout = 100;
		/* Batch: not back in poll until LOOP_BATCH_NS after the
		 * last wake-up, unless something is due sooner.  Connecting
		 * and reconnecting links are round trips: no batching. */
		if (steady && timeout > 0 && last_wake) {
			int64_t nap = LOOP_BATCH_NS - (now_ns() - last_wake);
			if (nap > (int64_t)timeout * 1000000)
				nap = (int64_t)timeout * 1000000;
			if (nap > 0) {
				struct timespec ts = {0, (long)nap};
				nanosleep(&ts, NULL);
				timeout -= (int)((nap + 999999) / 1000000);
				if (timeout < 0)
					timeout = 0;
			}
		}
		rc = poll(pfd, (nfds_t)n, timeout);
		last_wake = now_ns();
		if (rc < 0 && errno != EINTR)
			break;
		/* Service the links whose fds are ready, whose timers are
		 * due or that asked to come back; a poll timeout (or a
		 * signal) services all, so every timer runs. */
		for (size_t i = 0; i < r->n_nodes; i++) {
			int ready = rc <= 0 || must[i];
			if (!r->nodes[i].link)
				continue;
			if (rc <= 0)
				for (int j = first[i]; j < first[i] + cnt[i]; j++)
					pfd[j].revents = 0;
			for (int j = first[i]; !ready && j < first[i] + cnt[i]; j++)
				ready = pfd[j].revents != 0;
			if (ready)
				link_service(r->nodes[i].link, pfd + first[i],
					     cnt[i]);
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
	free(first);
	free(cnt);
	free(must);
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

int load_inventory_doc(struct run *r, const char *path)
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
void node_spool(struct run *r, struct node *nd)
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
void make_tag(struct run *r)
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

void print_check(struct run *r, FILE *f)
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

void run_free(struct run *r)
{
	for (size_t i = 0; i < r->n_nodes; i++) {
		link_free(r->nodes[i].link);
		json_decref(r->nodes[i].facts);
	}
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

int replay_stored(void *arg, const struct store_event *e)
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

/* Where a run that ends with the store stalled keeps the console's own
 * events the session file lacks (stage decisions, alerts, markers): beside
 * the session, else in the console's state directory, else /tmp (a full
 * session volume may not take even that).  --resume stores them first. */
static size_t held_paths(const struct run *r, char p[3][PATH_MAX],
			 const char *ptr[3])
{
	const char *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	size_t n = 0;
	snprintf(p[n++], PATH_MAX, "%.4000s.held", r->session);
	if (x && *x)
		snprintf(p[n++], PATH_MAX, "%.3000s/day0/held-%s.jsonl", x,
			 r->tag);
	else if (home && *home)
		snprintf(p[n++], PATH_MAX,
			 "%.3000s/.local/state/day0/held-%s.jsonl", home,
			 r->tag);
	snprintf(p[n++], PATH_MAX, "/tmp/day0-held-%s-%s.jsonl",
		 console_user(), r->tag);
	for (size_t i = 0; i < n; i++)
		ptr[i] = p[i];
	return n;
}

static void save_held(struct run *r)
{
	char p[3][PATH_MAX];
	const char *ptr[3];
	struct d0_err err = {{0}};
	size_t n = held_paths(r, p, ptr);
	int k = intake_save_held(r->intake, ptr, n, r->held_where,
				 sizeof r->held_where, &err);
	if (k < 0)
		fprintf(stderr, "day0: %s\n", err.msg);
	else
		r->held_saved = k;
}

static int load_held(struct run *r)
{
	char p[3][PATH_MAX];
	const char *ptr[3];
	struct d0_err err = {{0}};
	size_t n = held_paths(r, p, ptr);
	int k = intake_load_held(r->intake, ptr, n, &err);
	if (k < 0) {
		fprintf(stderr, "day0: %s: storing the console events a "
				"stalled run kept: %s\n",
			r->session, err.msg);
		return -1;
	}
	if (k && r->out)
		fprintf(r->out, "day0: stored %d console events the stalled "
				"run had kept\n",
			k);
	return 0;
}

/* --resume: the manifest says what was run. */
int resume_setup(struct run *r, char *pb_tmp, char *inv_tmp)
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
int check_var_values(struct run *r)
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

/* A cluster stage runs one rank a card of the whole cluster: a layout
 * (--tp x --pp x --ep, x --dp for train) of another size would be refused
 * by the engine when the stage starts, hours into the run.  Say so before
 * anything runs, with the figures (the plan step passes such a layout: it
 * counts the cards the layout uses, not the ones the launch starts). */
int check_stage_layouts(struct run *r)
{
	int world = cluster_world(r), rc = 0, cur = r->cur_stage;
	r->cur_node = r->n_nodes ? 0 : -1;
	for (size_t s = 0; s < r->pb.n && !rc; s++) {
		const struct pb_stage *ps = &r->pb.stages[s];
		static const char *const dims[] = {"--tp", "--pp", "--ep",
						   "--dp"};
		long v[4] = {1, 1, 1, 1};
		int named = 0;
		struct d0_err err = {{0}};
		json_t *a;
		if (ps->on != PB_ON_CLUSTER || ps->np || !strcmp(ps->step, "exec") ||
		    !strcmp(ps->step, "comm") || !ps->n_args)
			continue;
		r->cur_stage = (int)s;
		a = expand_list(r, ps->args, ps->n_args, "args", &err);
		if (!a)
			continue; /* the stage reports it when it starts */
		for (size_t i = 0; i < json_array_size(a); i++) {
			const char *arg = json_string_value(json_array_get(a, i));
			for (int d = 0; d < 4; d++) {
				size_t len = strlen(dims[d]);
				const char *val = NULL;
				if (strncmp(arg, dims[d], len))
					continue;
				if (arg[len] == '=')
					val = arg + len + 1;
				else if (!arg[len] && i + 1 < json_array_size(a))
					val = json_string_value(
					    json_array_get(a, i + 1));
				if (val) {
					char *end;
					long n = strtol(val, &end, 10);
					if (*end || n < 1)
						continue; /* the engine's usage error */
					v[d] = n;
					named = 1;
				}
			}
		}
		json_decref(a);
		long ranks = v[0] * v[1] * v[2] * v[3];
		if (named && ranks != world) {
			char dp[32] = "";
			if (v[3] > 1)
				snprintf(dp, sizeof dp, " x dp%ld", v[3]);
			fprintf(stderr,
				"day0: %s: stage '%s' (%s) runs one rank a card "
				"on the cluster's %d card%s, but its layout is "
				"tp%ld x pp%ld x ep%ld%s = %ld rank%s: set the "
				"playbook's tp, pp, ep (-e tp=N ...) so that their "
				"product is %d, or use an inventory of %ld "
				"card%s\n",
				r->pb.path, ps->id, ps->step, world,
				world == 1 ? "" : "s", v[0], v[1], v[2], dp,
				ranks, ranks == 1 ? "" : "s", world, ranks,
				ranks == 1 ? "" : "s");
			rc = -1;
		}
	}
	r->cur_node = -1;
	r->cur_stage = cur;
	return rc;
}

/* The user this console runs as (the local nodes' ${work}). */
const char *console_user(void)
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
int check_stage_sets(struct run *r)
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
void warn_free_space(struct run *r)
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
	if (check_stage_sets(&r) || check_var_values(&r) ||
	    check_stage_layouts(&r))
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
	/* A run writes a new session file: one that exists (another run's
	 * record, or any other file) is never written into, where the new
	 * run's events would be refused against the old ones' and the old
	 * manifest replaced.  An empty file (mktemp's) is new. */
	if (!o->resume_path && o->session_path && !o->check_only) {
		struct stat st;
		if (stat(r.session, &st) == 0 &&
		    (!S_ISREG(st.st_mode) || st.st_size > 0)) {
			fprintf(stderr,
				"day0: --session %s: %s; a run writes a new "
				"session file: give a path that does not exist "
				"(or `day0 run --resume %s` to continue that "
				"session)\n",
				r.session,
				S_ISREG(st.st_mode) ? "the file exists"
						    : "not a regular file",
				r.session);
			goto out;
		}
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
		r.out = o->headless ? (o->out ? o->out : stdout) : NULL;
		if (load_held(&r))
			goto out;
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
	if (r.incomplete)
		save_held(&r);
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
	if (o->session_out && !o->check_only)
		snprintf(o->session_out, o->session_out_max, "%s", r.session);
	run_free(&r);
	if (pb_tmp[0])
		unlink(pb_tmp);
	if (inv_tmp[0])
		unlink(inv_tmp);
	return rc;
}
