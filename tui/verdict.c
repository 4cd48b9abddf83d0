/*
 * verdict.c - evidence per (item, stage, node) into each item's verdict
 * (verdict.h).
 *
 * The rules (docs/checklist.md): an item's verdict is the worst over its
 * evidence and over every stage that must produce it and left none
 * (pending while it waits, running while it runs, not run after); the
 * producers are the non-rehearsal stages that declare the item; rehearsal
 * evidence ("rehearsal.<id>", renamed by the agent) is an item of its own
 * and never a real item's.  The status order is the registry's.
 */
#include "verdict.h"

#include <stdlib.h>
#include <string.h>

enum stage_outcome verdict_outcome(const char *state)
{
	if (!state || !strcmp(state, "waiting"))
		return STAGE_WAITING;
	if (!strcmp(state, "running") || !strcmp(state, "start"))
		return STAGE_RUNNING;
	if (!strcmp(state, "done"))
		return STAGE_DONE;
	if (!strcmp(state, "skipped"))
		return STAGE_SKIPPED;
	return STAGE_FAILED;
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static enum check_status status_of(json_t *row)
{
	return check_status_parse(json_string_value(json_object_get(row, "status")),
				  NULL);
}

/* Rows folded over ranks: object "item\nstage\nnode" -> the worst row. */
static json_t *fold_ranks(json_t *rows)
{
	json_t *by = json_object(), *r;
	size_t i;
	json_array_foreach(rows, i, r)
	{
		char key[512];
		json_t *old;
		if (!json_is_string(json_object_get(r, "item")))
			continue;
		snprintf(key, sizeof key, "%s\n%s\n%s", str(r, "item"),
			 str(r, "stage"), str(r, "node"));
		old = json_object_get(by, key);
		if (!old || status_of(r) > status_of(old))
			json_object_set(by, key, r);
	}
	return by;
}

static int stage_index(const struct verdict_stage *st, size_t n,
		       const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(st[i].id, id))
			return (int)i;
	return (int)n;
}

struct sort_ctx {
	const struct verdict_stage *st;
	size_t n;
};
static struct sort_ctx sort_ctx;

/* Worst first, then playbook order, then node. */
static int evidence_cmp(const void *pa, const void *pb)
{
	json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
	int c = (int)status_of(b) - (int)status_of(a);
	if (c)
		return c;
	c = stage_index(sort_ctx.st, sort_ctx.n, str(a, "stage")) -
	    stage_index(sort_ctx.st, sort_ctx.n, str(b, "stage"));
	return c ? c : strcmp(str(a, "node"), str(b, "node"));
}

static json_t *evidence_row(json_t *r)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "stage", str(r, "stage"),
			      "node", str(r, "node"), "status",
			      str(r, "status"), "detail", str(r, "detail"));
	static const char *const keep[] = {"value", "threshold", "ts", NULL};
	for (int k = 0; keep[k]; k++)
		if (json_object_get(r, keep[k]))
			json_object_set(o, keep[k], json_object_get(r, keep[k]));
	return o;
}

static const char *why_none(enum stage_outcome o)
{
	switch (o) {
	case STAGE_WAITING: return "has not started";
	case STAGE_RUNNING: return "is running";
	case STAGE_DONE: return "ended without reporting it";
	case STAGE_FAILED: return "failed before reporting it";
	default: return "was skipped";
	}
}

/* One item: its evidence, producers and verdict. */
static json_t *one_item(const struct verdict_stage *st, size_t n,
			const char *item, json_t *folded)
{
	const struct checklist_item *ci = checklist_find(item);
	int rehearsal = checklist_is_rehearsal(item), required = 0;
	json_t *ev = json_array(), *r, *out;
	const char *k;
	size_t ne = 0, np = 0, i;
	struct checklist_evidence *e;
	struct checklist_producer *p = calloc(n + 1, sizeof *p);
	json_t **sorted;
	char prefix[256];
	snprintf(prefix, sizeof prefix, "%s\n", item);
	json_object_foreach(folded, k, r) if (!strncmp(k, prefix, strlen(prefix)))
	    json_array_append_new(ev, evidence_row(r));
	e = calloc(json_array_size(ev) + 1, sizeof *e);
	json_array_foreach(ev, i, r)
	{
		e[ne].stage = str(r, "stage");
		e[ne++].status = status_of(r);
	}
	for (i = 0; i < n && !rehearsal; i++) {
		json_t *c = json_object_get(st[i].checks, item);
		if (st[i].rehearsal || !c)
			continue;
		required |= json_is_true(json_object_get(c, "required")) ||
			    !json_object_get(c, "required");
		p[np].stage = st[i].id;
		p[np++].outcome = st[i].outcome;
	}
	enum check_status v = checklist_fold(p, np, e, ne);
	/* A producer that left nothing: a row saying why. */
	for (i = 0; i < np; i++) {
		int has = 0;
		char d[160];
		for (size_t j = 0; j < ne && !has; j++)
			has = !strcmp(e[j].stage, p[i].stage);
		if (has)
			continue;
		snprintf(d, sizeof d, "stage %s %s", p[i].stage,
			 why_none(p[i].outcome));
		json_array_append_new(
		    ev, json_pack("{s:s, s:s, s:s, s:s}", "stage", p[i].stage,
				  "node", "-", "status",
				  check_status_name(checklist_unproduced(p[i].outcome)),
				  "detail", d));
	}
	if (!json_array_size(ev))
		json_array_append_new(
		    ev, json_pack("{s:s, s:s, s:s, s:s}", "stage", "-", "node",
				  "-", "status", "not run", "detail",
				  /* the console's own, at the run's end */
				  !strcmp(item, "repro.manifest")
				      ? "the console records it when the run "
					"ends; this run has not ended"
				      : "no stage of the playbook produces it"));
	/* Sort worst first (qsort over the array's values). */
	sorted = calloc(json_array_size(ev) + 1, sizeof *sorted);
	json_array_foreach(ev, i, r) sorted[i] = json_incref(r);
	sort_ctx = (struct sort_ctx){st, n};
	qsort(sorted, json_array_size(ev), sizeof *sorted, evidence_cmp);
	json_array_clear(ev);
	for (i = 0; sorted[i]; i++)
		json_array_append_new(ev, sorted[i]);
	free(sorted);
	out = json_pack("{s:s, s:s, s:s, s:b, s:b, s:o}", "item", item, "title",
			ci ? ci->title : item, "status", check_status_name(v),
			"rehearsal", rehearsal, "required", required, "evidence",
			ev);
	free(e);
	free(p);
	return out;
}

static int id_cmp(const void *pa, const void *pb)
{
	const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
	int c = checklist_order(a) - checklist_order(b);
	return c ? c : strcmp(a, b);
}

json_t *verdict_items(const struct verdict_stage *st, size_t n, json_t *rows)
{
	json_t *folded = fold_ranks(rows), *out = json_array(), *seen, *r, *v;
	const char *k;
	const char **extra;
	size_t ne = 0, i;
	for (i = 0; i < checklist_n; i++)
		json_array_append_new(out, one_item(st, n, checklist_items[i].id,
						    folded));
	/* The rehearsal items and any other item seen, in order. */
	seen = json_object();
	json_array_foreach(rows, i, r)
	{
		const char *item = json_string_value(json_object_get(r, "item"));
		if (item && checklist_order(item) >= (int)checklist_n)
			json_object_set_new(seen, item, json_true());
	}
	extra = calloc(json_object_size(seen) + 1, sizeof *extra);
	json_object_foreach(seen, k, v) extra[ne++] = k;
	qsort(extra, ne, sizeof *extra, id_cmp);
	for (i = 0; i < ne; i++)
		json_array_append_new(out, one_item(st, n, extra[i], folded));
	free(extra);
	json_decref(seen);
	json_decref(folded);
	return out;
}

json_t *verdict_decisive(json_t *item)
{
	json_t *r;
	size_t i;
	const char *s = str(item, "status");
	json_array_foreach(json_object_get(item, "evidence"), i, r)
	    if (!strcmp(str(r, "status"), s)) return r;
	return json_array_get(json_object_get(item, "evidence"), 0);
}

json_t *verdict_statuses(json_t *items)
{
	json_t *o = json_object(), *it;
	size_t i;
	json_array_foreach(items, i, it)
	    json_object_set(o, str(it, "item"), json_object_get(it, "status"));
	return o;
}
