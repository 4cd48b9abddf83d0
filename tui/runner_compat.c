/*
 * runner_compat.c - facts.compat in a run: when a facts stage's tasks
 * have all ended, the console compares the facts its nodes reported
 * (compat_matrix: the engine build, Open MPI and driver major must equal
 * the majority; the model family's minimums) and records the verdict as
 * its own check for that stage.  The odd nodes are named, folded, with
 * the field, in the detail (docs/compat.md).
 */
#include "runner_int.h"

#include <stdlib.h>
#include <string.h>

#include "compat_matrix.h"

int compat_stage_end(struct run *r, int s, char *msg, size_t max)
{
	const struct pb_stage *ps = &r->pb.stages[s];
	const struct stage_rt *sr = &r->stages[s];
	const struct pb_check *c = NULL;
	struct compat_node *nodes;
	char family[64];
	size_t n = 0;
	json_t *m;
	const char *status;
	int failed;
	for (size_t k = 0; k < ps->n_checks; k++)
		if (!strcmp(ps->checks[k].item, "facts.compat"))
			c = &ps->checks[k];
	if (!c)
		return 0; /* the stage does not declare it */
	nodes = calloc(sr->n_tasks + 1, sizeof *nodes);
	if (!nodes)
		abort();
	for (size_t i = 0; i < sr->n_tasks; i++) {
		const struct task *t = &r->tasks[sr->tasks[i]];
		const struct node *nd = &r->nodes[t->node];
		if (t->st != T_DONE || !nd->facts)
			continue;
		nodes[n].name = nd->inv->name;
		nodes[n++].facts = nd->facts;
	}
	(void)compat_family(lookup_var(r, "model"), family, sizeof family,
			    NULL);
	m = compat_matrix(nodes, n, family);
	if (!n) { /* nothing compared: no claim that all agree */
		json_object_set_new(m, "status", json_string("skip"));
		json_object_set_new(
		    m, "detail",
		    json_string("no node's facts to compare (facts did not "
				"pass on any node)"));
	}
	status = json_string_value(json_object_get(m, "status"));
	console_event(r, "check",
		      json_pack("{s:s, s:s, s:s, s:O, s:s}", "item",
				"facts.compat", "status", status, "detail",
				json_string_value(json_object_get(m, "detail")),
				"value", json_object_get(m, "odd"), "stage_id",
				ps->id));
	failed = !strcmp(status, "fail") && c->required;
	if (failed)
		snprintf(msg, max, "facts.compat: %s",
			 json_string_value(json_object_get(m, "detail")));
	json_decref(m);
	free(nodes);
	return failed;
}
