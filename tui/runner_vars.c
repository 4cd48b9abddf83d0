/*
 * runner_vars.c - the playbook runner, part: playbook variables: ${var} lookup and expansion (builtins, the playbook's vars, -e).
 * runner_int.h says how the parts fit.
 */
#include "runner_int.h"

/* ------------------------------------------------------------------ vars */

/* ${work} on a node: --work, or /tmp/day0-work-USER/TAG with the user the
 * node's agent runs as (its agent makes it 0700: --work). */
const char *node_work(struct run *r, const struct node *nd)
{
	if (r->o->work || !strcmp(nd->inv->transport, "local"))
		return r->work;
	snprintf(r->work_buf, sizeof r->work_buf, "/tmp/day0-work-%s/%s",
		 nd->inv->user, r->tag);
	return r->work_buf;
}

const char *lookup_var(void *arg, const char *name)
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
		 * sessions on one machine do not collide: 20000..31999.  From
		 * the tag (the session's stem and 3 random bytes, kept for
		 * --resume), not the name: every run of a test that names its
		 * session txt.db got one port, and on a host running tests in
		 * parallel a release day's probe and load met another server
		 * there (top-1 0%, 26 errors).  20000..31999: below Linux's
		 * ephemeral range (32768 and up), where a client socket of
		 * another process (a load generator's, MPI's) can hold the
		 * port and the server's bind fail. */
		snprintf(r->buf, sizeof r->buf, "%llu",
			 20000 + (unsigned long long)(hash_str64(r->tag) % 12000));
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
int var_nested(void *arg, const char *name)
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
char *expand(struct run *r, const char *s, const char *where,
		    struct d0_err *err)
{
	char a[PATH_MAX * 2];
	if (playbook_expand_deep(s, lookup_var, var_nested, r, where, a,
				 sizeof a, err))
		return NULL;
	return strdup(a);
}

json_t *expand_list(struct run *r, char **list, size_t n,
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
