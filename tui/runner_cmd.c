/*
 * runner_cmd.c - the playbook runner, part: the commands a stage becomes: an engine step or exec argv, the mpirun line of a cluster stage, --check's printing.
 * runner_int.h says how the parts fit.
 */
#include "runner_int.h"

/* ------------------------------------------------------------- commands */

int cluster_world(struct run *r)
{
	int world = 0;
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!r->nodes[i].failed && !r->nodes[i].excluded)
			world += r->nodes[i].inv->cards;
	return world;
}

int stage_first_node(struct run *r)
{
	for (size_t i = 0; i < r->n_nodes; i++)
		if (!r->nodes[i].failed && !r->nodes[i].excluded)
			return (int)i;
	return -1;
}

/* The nodes a cluster stage runs on, in inventory (= rank) order. */
size_t cluster_nodes(struct run *r, const struct inv_node **out)
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
json_t *cluster_mpirun_args(struct run *r, const struct pb_stage *st)
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
void cluster_ssh(struct run *r, json_t *c)
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
json_t *task_command(struct run *r, struct task *t, struct d0_err *err)
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
json_t *command_argv(struct run *r, json_t *cmd)
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
		/* every agent the console starts has --session */
		json_array_append_new(a, json_string("-x"));
		json_array_append_new(a, json_string("DAY0_SESSION"));
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
void shell_join(json_t *argv, FILE *f)
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
