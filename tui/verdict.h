/*
 * verdict.h - the checklist told truly: each item's verdict from its
 * evidence per (item, stage, node), for the runner's table and verdict,
 * the report, and (through the verdict event) the Checklist screen.  One
 * function, so the three cannot disagree.  docs/checklist.md has the rules.
 */
#ifndef DAY0_VERDICT_H
#define DAY0_VERDICT_H

#include <stdio.h>

#include <jansson.h>

#include "checklist.h"

/* A playbook stage as the fold sees it. */
struct verdict_stage {
	const char *id;
	int rehearsal;
	enum stage_outcome outcome;
	json_t *checks; /* object item -> {"required": bool}; borrowed */
};

/* A stage state name ("waiting", "running", "done", "failed", "skipped",
 * or a stage end's result) as an outcome; NULL is waiting. */
enum stage_outcome verdict_outcome(const char *state);

/*
 * The checklist of a session.  rows: evidence, an array of objects
 * {item, stage, node, rank, status, detail, value, threshold, ts}, one per
 * (item, stage, node, rank) (the last such check; stage "" when none).
 * Returns an array, the registry's items in order, then the rehearsal
 * items seen, then any other item seen:
 *   {"item", "title", "status", "rehearsal": bool, "required": bool,
 *    "evidence": [{"stage", "node", "status", "detail", "value",
 *                  "threshold", "ts"}...]}
 * Evidence is folded over ranks (the worst stays), sorted worst first; a
 * producing stage that left none is a row of its own (node "-") saying
 * why ("stage verify skipped").
 */
json_t *verdict_items(const struct verdict_stage *st, size_t n, json_t *rows);

/* The first row of an item's evidence whose status is the item's: the
 * row that decided it. */
json_t *verdict_decisive(json_t *item);

/* {"item": status, ...} in the order of items: the verdict event's. */
json_t *verdict_statuses(json_t *items);

#endif
