/*
 * test_checklist.c - the checklist registry: ids unique and in the
 * contract's order, one status order, rehearsal ids apart, the attempt
 * suffix, and the fold from evidence to an item's verdict.
 */
#include "checklist.h"
#include "unit.h"

#include <string.h>

static void registry(void)
{
	static const char *const contract[] = {
	    "facts",	      "facts.compat",	   "weights.integrity",
	    "weights.metadata",
	    "ops.coverage",   "memory.plan",	   "comm.groups",
	    "comm.bandwidth", "numerics.op",	   "numerics.layer",
	    "numerics.e2e",   "resources.peak",	   "perf.baseline",
	    "stability.soak", "repro.manifest",	   "service.api",
	    "service.load",   "service.kv",	   "service.preemption",
	    "numerics.endpoint", "text.generation", "image.preprocess",
	    "image.features",	 "numerics.image",  "perf.image",
	    "training.gradients", "training.layouts", "training.determinism",
	    "training.memory", "training.overflow"};
	size_t n = sizeof contract / sizeof *contract;
	CHECK(checklist_n == n);
	for (size_t i = 0; i < n && i < checklist_n; i++) {
		CHECKN(contract[i], !strcmp(checklist_items[i].id, contract[i]));
		CHECKN("order", checklist_order(contract[i]) == (int)i);
		CHECKN("titled and asked", checklist_items[i].title[0] &&
					       checklist_items[i].question[0] &&
					       checklist_items[i].steps[0]);
		for (size_t k = 0; k < i; k++)
			CHECKN("unique", strcmp(checklist_items[k].id,
						checklist_items[i].id));
	}
	CHECK(checklist_find("nope") == NULL);
	CHECK(checklist_order("nope") == 2 * (int)checklist_n);
	CHECK(checklist_is_rehearsal("rehearsal.numerics.e2e"));
	CHECK(!checklist_is_rehearsal("numerics.e2e"));
	CHECK(checklist_find("rehearsal.numerics.e2e") ==
	      checklist_find("numerics.e2e"));
	CHECK(checklist_order("rehearsal.facts") == (int)checklist_n);
	CHECK(checklist_order("numerics.e2e") <
	      checklist_order("rehearsal.facts"));
	CHECK(checklist_step_produces(checklist_find("numerics.e2e"),
				      "validate"));
	CHECK(!checklist_step_produces(checklist_find("numerics.e2e"),
				       "verify"));
	CHECK(checklist_step_produces(checklist_find("numerics.e2e"), "exec"));
}

static void statuses(void)
{
	/* One order, worst last: the runner and the report both use it. */
	static const char *const order[] = {"pass", "skip",    "pending",
					    "running", "warn", "not run",
					    "fail"};
	int known;
	for (int i = 0; i < 7; i++) {
		CHECKN(order[i], check_status_parse(order[i], &known) ==
					 (enum check_status)i &&
				     known);
		CHECKN("name", !strcmp(check_status_name((enum check_status)i),
				       order[i]));
	}
	CHECK(check_status_parse("bogus", &known) == CHECK_PENDING && !known);
	CHECK(check_status_parse(NULL, NULL) == CHECK_PENDING);
	CHECK(check_status_worst(CHECK_PASS, CHECK_SKIP) == CHECK_SKIP);
	CHECK(check_status_worst(CHECK_FAIL, CHECK_NOT_RUN) == CHECK_FAIL);
	CHECK(check_status_worst(CHECK_WARN, CHECK_NOT_RUN) == CHECK_NOT_RUN);
}

static void stage_of(void)
{
	char b[64];
	checklist_stage_of("run", b, sizeof b);
	CHECK(!strcmp(b, "run"));
	checklist_stage_of("run.2", b, sizeof b);
	CHECK(!strcmp(b, "run"));
	checklist_stage_of("like-run.13", b, sizeof b);
	CHECK(!strcmp(b, "like-run"));
	checklist_stage_of("a.1", b, sizeof b);
	CHECK(!strcmp(b, "a.1"));
	checklist_stage_of("v2", b, sizeof b);
	CHECK(!strcmp(b, "v2"));
	checklist_stage_of(".5", b, sizeof b);
	CHECK(!strcmp(b, ".5"));
}

static void fold(void)
{
	struct checklist_producer p[2] = {{"validate", STAGE_SKIPPED},
					  {"run", STAGE_DONE}};
	struct checklist_evidence e[2] = {{"run", CHECK_PASS},
					  {"validate", CHECK_PASS}};
	/* A producer skipped, no evidence: not run, never pass. */
	CHECK(checklist_fold(p, 1, NULL, 0) == CHECK_NOT_RUN);
	/* One producer passed, the other left nothing: not run. */
	CHECK(checklist_fold(p, 2, e, 1) == CHECK_NOT_RUN);
	CHECK(checklist_fold(p, 2, e, 2) == CHECK_PASS);
	/* The worst evidence wins whatever its order. */
	e[0].status = CHECK_FAIL;
	CHECK(checklist_fold(p, 2, e, 2) == CHECK_FAIL);
	e[0].status = CHECK_PASS;
	e[1].status = CHECK_WARN;
	CHECK(checklist_fold(p, 2, e, 2) == CHECK_WARN);
	/* Live: a producer waiting or running. */
	p[0].outcome = STAGE_WAITING;
	CHECK(checklist_fold(p, 1, NULL, 0) == CHECK_PENDING);
	p[0].outcome = STAGE_RUNNING;
	CHECK(checklist_fold(p, 1, NULL, 0) == CHECK_RUNNING);
	/* Nothing declared, nothing reported. */
	CHECK(checklist_fold(NULL, 0, NULL, 0) == CHECK_NOT_RUN);
	/* Evidence from a stage that does not have to produce it counts. */
	CHECK(checklist_fold(NULL, 0, e, 1) == CHECK_PASS);
}

int main(void)
{
	registry();
	statuses();
	stage_of();
	fold();
	return unit_done();
}
