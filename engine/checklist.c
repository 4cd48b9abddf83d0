/*
 * checklist.c - the checklist registry (checklist.h): one table of items,
 * one status order, one fold from evidence to an item's verdict.
 *
 * Why one table: the ids, titles and order used to be copied into the
 * playbook validator, the runner, the screens and the report, and two
 * copies of the status order disagreed (pass < skip in one, skip < pass in
 * the other), so the headless summary and the report could name different
 * worst statuses.  Now a new item (service.api, ...) is one row here.
 */
#include "checklist.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[CHECK_NSTATUS] = {
    [CHECK_PASS] = "pass",	 [CHECK_SKIP] = "skip",
    [CHECK_PENDING] = "pending", [CHECK_RUNNING] = "running",
    [CHECK_WARN] = "warn",	 [CHECK_NOT_RUN] = "not run",
    [CHECK_FAIL] = "fail",
};

const char *check_status_name(enum check_status s)
{
	return s < CHECK_NSTATUS ? status_names[s] : "pending";
}

enum check_status check_status_parse(const char *name, int *known)
{
	if (known)
		*known = 0;
	for (int i = 0; name && i < CHECK_NSTATUS; i++)
		if (!strcmp(name, status_names[i])) {
			if (known)
				*known = 1;
			return (enum check_status)i;
		}
	return CHECK_PENDING;
}

enum check_status check_status_worst(enum check_status a, enum check_status b)
{
	return a > b ? a : b;
}

/* The order is the checklist teams keep (DAY0-DIGEST.md): runnable, then
 * correct, then efficient; the service level last. */
const struct checklist_item checklist_items[] = {
    {"facts", "Host facts",
     "Does every node have the cores, memory, disk, Open MPI, OpenBLAS and "
     "cards the run needs?",
     "runnable", {"facts"}},
    /* The console's, across nodes, when a facts stage ends (tui/runner_compat.c,
     * docs/compat.md). */
    {"facts.compat", "Compatibility matrix",
     "Does every node run the same engine build, Open MPI and GPU driver "
     "major version, each at least the model family's minimum?",
     "runnable", {"facts"}},
    {"weights.integrity", "Weight integrity",
     "Are all shards there, well-formed and equal to their SHA-256 sums, "
     "with nothing silently truncated?",
     "runnable", {"verify"}},
    {"weights.metadata", "Shard metadata",
     "Do the shards' tensors and shapes match config.json (and so the "
     "runtime's layout)?",
     "runnable", {"verify"}},
    {"ops.coverage", "Operator coverage",
     "Does the engine implement, or compose, every operator the model "
     "needs?",
     "runnable", {"inspect"}},
    {"memory.plan", "Memory plan",
     "Does the tp x pp x ep layout fit every card with margin (weights, KV "
     "cache, activations, comm buffers)?",
     "runnable", {"plan"}},
    {"comm.groups", "Communication groups",
     "Do the collective groups initialise with the expected ranks, without "
     "a topology mismatch?",
     "runnable", {"comm", "run"}},
    {"comm.bandwidth", "Communication bandwidth",
     "Does the slowest collective reach the bus bandwidth the links "
     "promise?",
     "efficient", {"comm"}},
    {"numerics.op", "Operator numerics",
     "Do the kernels agree with a float64 reference?", "correct",
     {"validate"}},
    {"numerics.layer", "Layer numerics",
     "Does every layer's output stay within the bound of float64, without "
     "error growing with depth?",
     "correct", {"validate"}},
    {"numerics.e2e", "End-to-end numerics",
     "Do the logits agree with float64 (max relative error, KL, top-1)?",
     "correct", {"validate"}},
    {"resources.peak", "Peak memory",
     "Did every card stay within its memory budget while loading and "
     "running the real model?",
     "runnable", {"run", "soak"}},
    {"perf.baseline", "Performance baseline",
     "Are TTFT, TPOT, tokens/s and the communication share recorded for the "
     "next release day?",
     "efficient", {"perf"}},
    {"stability.soak", "Stability",
     "Does the forward pass, repeated, stay bit-identical with no memory "
     "growth?",
     "efficient", {"soak"}},
    {"repro.manifest", "Reproducibility manifest",
     "Are versions, checksums, playbook, inventory and every command line "
     "recorded?",
     "runnable", {"console"}},
    {"service.api", "Service API",
     "Does a request get its response through the serving endpoint?",
     "service", {"load", "serve", "probe"}},
    {"service.load", "Service under load",
     "Does the service hold its concurrency without a batch-scheduling "
     "deadlock or a leak?",
     "service", {"load"}},
    {"service.kv", "KV blocks",
     "After the load, is every KV block back (free list full, reference "
     "counts zero): none lost or leaked?",
     "service", {"load"}},
    {"service.preemption", "Preemption under overload",
     "When requests outgrow the KV cache, are sequences preempted and "
     "recomputed with every request answered and none wrong?",
     "service", {"load"}},
    {"numerics.endpoint", "Endpoint numerics",
     "Do the served logits agree with the reference?", "service",
     {"probe", "validate"}},
    {"text.generation", "Text generation",
     "Is the generated text sensible (no positional-encoding "
     "misalignment)?",
     "correct", {"validate", "run"}},
    /* The image channel (issue #30, docs/multimodal.md).  A text model
     * has none of them: image-check reports each as skip with the
     * detail "n/a: no vision tower in config.json". */
    {"image.preprocess", "Image preprocessing",
     "Does the release's processor decode, resize and normalize images "
     "(PNG/JPEG, gray, alpha, palette, 16-bit) into what the tower takes?",
     "runnable", {"image-check"}},
    {"image.features", "Image feature alignment",
     "Does every image take as many placeholder tokens as the tower gives "
     "merged patches, with the preprocessing (mean/std, patch, merge) the "
     "checkpoint's tower expects?",
     "correct", {"image-check"}},
    {"numerics.image", "Image numerics",
     "Do the vision tower's features and the logits of image prompts agree "
     "with float64?",
     "correct", {"validate", "image-check"}},
    {"perf.image", "Image TTFT split",
     "How is an image prompt's TTFT split into preprocess, encode and "
     "prefill (p50 and p99 over N images)?",
     "efficient", {"image-check"}},
    /* Fine-tuning (issue #32, docs/training.md): `day0-engine train`
     * reports each, playbooks/finetune.json requires them. */
    {"training.gradients", "Training gradients",
     "Do one step's gradients agree with an independent float64 backward "
     "per parameter tensor, and with central finite differences on "
     "attention, norm, expert, router and embedding weights?",
     "correct", {"train"}},
    {"training.layouts", "Training across layouts",
     "Does the loss curve of K steps at the target layout (TP, PP, EP, DP) "
     "equal the 1-rank run within a bound, with an error that does not "
     "grow step by step?",
     "correct", {"train"}},
    {"training.determinism", "Training determinism",
     "Are two runs at the same layout bitwise identical (fixed reduction "
     "order), or is the cause named?",
     "correct", {"train"}},
    {"training.memory", "Training memory",
     "Does the planner's train mode (weights, gradients, optimizer states, "
     "activations, ZeRO-1) match the measured peak per card?",
     "runnable", {"train"}},
    {"training.overflow", "Loss-scale overflow",
     "Does an f16 step that overflows get skipped on every rank, the loss "
     "scale halved, and training recover?",
     "correct", {"train"}},
};
const size_t checklist_n = sizeof checklist_items / sizeof *checklist_items;

int checklist_is_rehearsal(const char *id)
{
	return id && !strncmp(id, CHECKLIST_REHEARSAL,
			      sizeof CHECKLIST_REHEARSAL - 1);
}

static int index_of(const char *id)
{
	for (size_t i = 0; id && i < checklist_n; i++)
		if (!strcmp(checklist_items[i].id, id))
			return (int)i;
	return -1;
}

const struct checklist_item *checklist_find(const char *id)
{
	int i;
	if (checklist_is_rehearsal(id))
		id += sizeof CHECKLIST_REHEARSAL - 1;
	i = index_of(id);
	return i < 0 ? NULL : &checklist_items[i];
}

int checklist_order(const char *id)
{
	int i;
	if (checklist_is_rehearsal(id)) {
		i = index_of(id + sizeof CHECKLIST_REHEARSAL - 1);
		return i < 0 ? 2 * (int)checklist_n : (int)checklist_n + i;
	}
	i = index_of(id);
	return i < 0 ? 2 * (int)checklist_n : i;
}

int checklist_step_produces(const struct checklist_item *it, const char *step)
{
	if (!strcmp(step, "exec"))
		return 1;
	for (int i = 0; i < 4 && it->steps[i]; i++)
		if (!strcmp(it->steps[i], step))
			return 1;
	return 0;
}

void checklist_stage_of(const char *stage_id, char *out, size_t max)
{
	size_t n = stage_id ? strlen(stage_id) : 0, k = n;
	if (!max)
		return;
	while (k > 0 && isdigit((unsigned char)stage_id[k - 1]))
		k--;
	/* "ID.n": n is the attempt, 2 or more */
	if (k > 1 && k < n && stage_id[k - 1] == '.' &&
	    !(n - k == 1 && stage_id[k] < '2'))
		n = k - 1;
	snprintf(out, max, "%.*s", (int)n, stage_id ? stage_id : "");
}

enum check_status checklist_unproduced(enum stage_outcome o)
{
	return o == STAGE_WAITING   ? CHECK_PENDING
	       : o == STAGE_RUNNING ? CHECK_RUNNING
				    : CHECK_NOT_RUN;
}

enum check_status checklist_fold(const struct checklist_producer *p,
				 size_t np,
				 const struct checklist_evidence *e, size_t ne)
{
	enum check_status v = CHECK_PASS;
	int any = 0;
	for (size_t i = 0; i < ne; i++) {
		v = any ? check_status_worst(v, e[i].status) : e[i].status;
		any = 1;
	}
	for (size_t i = 0; i < np; i++) {
		int has = 0;
		for (size_t k = 0; k < ne && !has; k++)
			has = e[k].stage && !strcmp(e[k].stage, p[i].stage);
		if (has)
			continue;
		v = any ? check_status_worst(v, checklist_unproduced(p[i].outcome))
			: checklist_unproduced(p[i].outcome);
		any = 1;
	}
	return any ? v : CHECK_NOT_RUN;
}
