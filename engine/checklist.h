/*
 * checklist.h - THE checklist: every item the release day answers, in one
 * table, and the one order of check statuses.
 *
 * Every consumer reads this file: the playbook validator (which items a
 * stage may declare, and which steps can produce them), the runner (the
 * headless table, the verdict), the view and the screens, the report and
 * the diff.  An item's evidence is kept per (item, stage, node); its
 * verdict is the worst over the stages that must produce it
 * (checklist_fold).  A rehearsal on a shape-validation model reports its
 * items as "rehearsal.<id>": evidence of its own kind, never a real item's.
 * docs/checklist.md lists the table.
 */
#ifndef DAY0_CHECKLIST_H
#define DAY0_CHECKLIST_H

#include <stddef.h>

/* The status order, best first: the worst of several is the highest. */
enum check_status {
	CHECK_PASS,
	CHECK_SKIP,	/* the producer chose not to check (no reference) */
	CHECK_PENDING,	/* its producer has not started yet */
	CHECK_RUNNING,	/* its producer is running */
	CHECK_WARN,
	CHECK_NOT_RUN,	/* no evidence: its producer did not run */
	CHECK_FAIL,
	CHECK_NSTATUS
};

/* "pass", "skip", "pending", "running", "warn", "not run", "fail". */
const char *check_status_name(enum check_status s);
/* A status by name; NULL or an unknown name is CHECK_PENDING (nothing
 * says it passed).  *known (may be NULL) says whether the name is one. */
enum check_status check_status_parse(const char *name, int *known);
/* The worse of a and b. */
enum check_status check_status_worst(enum check_status a, enum check_status b);

struct checklist_item {
	const char *id;	      /* a contract: never renamed */
	const char *title;    /* short, for tables */
	const char *question; /* the seed question the item answers */
	const char *level;    /* runnable | correct | efficient | service */
	const char *steps[4]; /* the steps that produce it ("console": the
				 runner itself); NULL-terminated */
};

/* The items in checklist order. */
extern const struct checklist_item checklist_items[];
extern const size_t checklist_n;

#define CHECKLIST_REHEARSAL "rehearsal."

/* The item with this id (a "rehearsal." id finds its real item); NULL
 * when unknown. */
const struct checklist_item *checklist_find(const char *id);
/* Position in the order: real items 0..n-1, rehearsal ones n..2n-1, and
 * anything else after them (2n). */
int checklist_order(const char *id);
/* Is id a rehearsal item ("rehearsal.<id>")? */
int checklist_is_rehearsal(const char *id);
/* Can a stage of this step produce the item?  exec stages (a vendor's own
 * stack) may produce any item. */
int checklist_step_produces(const struct checklist_item *it, const char *step);

/*
 * A stage's id from a task's stage_id: the runner names the n-th attempt
 * of stage ID "ID.n" (n >= 2); the evidence belongs to ID.  Playbook ids
 * never end in ".<digits>" (the validator refuses them), so this is exact.
 */
void checklist_stage_of(const char *stage_id, char *out, size_t max);

/* What became of a stage, for the fold. */
enum stage_outcome {
	STAGE_WAITING,
	STAGE_RUNNING,
	STAGE_DONE,
	STAGE_FAILED,
	STAGE_SKIPPED
};

/* A stage that must produce the item, and what became of it. */
struct checklist_producer {
	const char *stage;
	enum stage_outcome outcome;
};

/* One piece of evidence: the (folded over ranks) status a stage reported
 * for the item on a node. */
struct checklist_evidence {
	const char *stage;
	enum check_status status;
};

/*
 * The item's verdict: the worst over its evidence and over each producer
 * that left none (waiting: pending, running: running, otherwise: not run).
 * No producer and no evidence: not run.
 */
enum check_status checklist_fold(const struct checklist_producer *p,
				 size_t np,
				 const struct checklist_evidence *e, size_t ne);
/* The status a producer without evidence stands for. */
enum check_status checklist_unproduced(enum stage_outcome o);

#endif
