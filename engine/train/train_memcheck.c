/*
 * train_memcheck.c - training.memory: does plan --train know what a
 * fine-tuning step holds?  The accountant (rt_alloc, the categories of
 * train.c's talloc) measures the peak of every card; this file asks the
 * planner (plan_train.c) for the same model, layout and batch with the
 * day0 trainer's memory model (train_mem_day0: the run's working dtype,
 * f32 activations and activation gradients, no sequence parallelism, the
 * attention probabilities kept, SwiGLU products rebuilt, f32 views of
 * 16-bit weights) and holds the two within 5%.  No correction is added
 * here: the figure is plan --train --trainer day0's, term for term, so a
 * planner that forgets a term fails the check (docs/training.md "Memory
 * model"; tests/sh/test_plan_train.sh runs both and compares).
 */
#include "train_memcheck.h"
#include "plan_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

/* The plan's figure for run (the layout as the engine holds it). */
static int plan_figure(const struct model_config *c,
		       const struct tensor_spec *sp, size_t ns,
		       const struct train_memcheck_run *run,
		       struct train_mem_model *mm, struct train_layout *tl,
		       struct train_need *nd, struct d0_err *err)
{
	const struct train_cfg *k = run->cfg;
	int micro = run->micro > 0 ? run->micro : 1;
	/* the day0 model's EP ranks share their replica's sequences
	 * (ep_data 0), as train.c's do: a step is batch x DP sequences */
	struct train_load ld = {.seq = run->seq, .micro = run->batch / micro,
				.global = (int64_t)run->batch * k->dp,
				.zero1 = k->zero1,
				.recompute = k->recompute ? RECOMPUTE_FULL
							  : RECOMPUTE_NONE};
	/* each EP rank holds its own experts only (train.c's tparam.here) */
	struct layout_dims d = {.tp = k->tp, .pp = k->pp, .ep = k->ep};
	/* the step time is not checked: any card and links will do */
	struct train_hw hw = {1e12, 1e10, 1e9};
	char reason[300];
	if (run->batch % micro)
		return d0_errf(err, "training.memory: a batch of %d sequences "
			       "in %d micro-batches", run->batch, micro);
	train_mem_day0(mm, k->dtype == DT_F32 ? 4 : 2);
	memset(tl, 0, sizeof *tl);
	tl->tp = d.tp;
	tl->pp = d.pp;
	tl->ep = d.ep;
	tl->dp = k->dp;
	tl->cards_per_node = k->tp * k->pp * k->dp;
	tl->tp_in_node = 1;
	train_layout_params(c, sp, ns, &d, mm->weight_bytes, tl);
	if (train_need_layout(c, sp, ns, &ld, mm, tl, &hw, UINT64_MAX, 0, nd,
			      reason, sizeof reason) < 0)
		return d0_errf(err, "training.memory: %s", reason);
	return 0;
}

int train_memcheck(const char *dir, const struct train_memcheck_run *run,
		   const struct train_mem *mem, struct train_memcheck *out,
		   struct d0_err *err)
{
	struct model_config cfg;
	struct tensor_spec *sp = NULL;
	struct train_mem_model mm;
	struct train_layout tl;
	struct train_need nd;
	size_t ns = 0;
	uint64_t peak = mem->peak;
	char *cp = path_join(dir, "config.json"), lines[2400];
	int rc;

	memset(out, 0, sizeof *out);
	MPI_Allreduce(MPI_IN_PLACE, &peak, 1, MPI_UINT64_T, MPI_MAX,
		      MPI_COMM_WORLD);
	rc = model_config_load(cp, &cfg, err);
	free(cp);
	if (rc < 0)
		return -1;
	if (model_tensors(&cfg, &sp, &ns, err) < 0 ||
	    plan_figure(&cfg, sp, ns, run, &mm, &tl, &nd, err) < 0) {
		free(sp);
		model_config_free(&cfg);
		return -1;
	}
	out->peak = peak;
	out->plan = nd.total;
	out->rel = fabs((double)peak - (double)nd.total) / (double)nd.total;
	out->ok = out->rel <= TRAIN_MEMCHECK_BOUND;
	train_need_lines(&nd, &mm, &nd.cell, "", lines, sizeof lines);
	snprintf(out->detail, sizeof out->detail,
		 "peak %llu B on the busiest card against plan --train --trainer "
		 "day0's %llu B (weights %llu, gradients %llu, optimizer %llu, "
		 "activations %llu%s, backward's working set %llu, f32 views "
		 "%llu, pp buffers %llu): %.1f%% apart, bound %.0f%%; the accountant's weights "
		 "%llu, gradients %llu, optimizer %llu, activations %llu, "
		 "buffers %llu (working set, views, tables)",
		 (unsigned long long)peak, (unsigned long long)nd.total,
		 (unsigned long long)nd.weights, (unsigned long long)nd.grads,
		 (unsigned long long)nd.optim, (unsigned long long)nd.act,
		 nd.recompute ? " recomputed" : "", (unsigned long long)nd.bwd,
		 (unsigned long long)nd.views, (unsigned long long)nd.pp_bufs,
		 out->rel * 100,
		 TRAIN_MEMCHECK_BOUND * 100, (unsigned long long)mem->weights,
		 (unsigned long long)mem->grads, (unsigned long long)mem->optim,
		 (unsigned long long)mem->act, (unsigned long long)mem->scratch);
	out->value = json_pack(
		"{s:I, s:I, s:f, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
		"s:{s:I, s:I, s:I, s:I, s:I}, s:s}",
		"peak", (json_int_t)peak, "plan", (json_int_t)nd.total, "rel",
		out->rel, "plan_terms", "weights", (json_int_t)nd.weights,
		"grads", (json_int_t)nd.grads, "optimizer", (json_int_t)nd.optim,
		"activations", (json_int_t)nd.act, "backward",
		(json_int_t)nd.bwd, "views", (json_int_t)nd.views, "pp_buffers",
		(json_int_t)nd.pp_bufs, "measured",
		"weights", (json_int_t)mem->weights, "grads",
		(json_int_t)mem->grads, "optimizer", (json_int_t)mem->optim,
		"activations", (json_int_t)mem->act, "buffers",
		(json_int_t)mem->scratch, "plan_lines", lines);
	free(sp);
	model_config_free(&cfg);
	return 0;
}
