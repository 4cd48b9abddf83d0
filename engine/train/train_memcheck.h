/*
 * train_memcheck.h - training.memory: the accountant's peak on the
 * busiest card of a `day0-engine train` run against plan --train's own
 * figure for the same model, layout and batch with the day0 trainer's
 * memory model (train_memcheck.c, docs/training.md "Memory model").
 */
#ifndef DAY0_TRAIN_MEMCHECK_H
#define DAY0_TRAIN_MEMCHECK_H

#include "train.h"

#define TRAIN_MEMCHECK_BOUND 0.05 /* |peak - plan| / plan */

/* What the run was: its layout and dtypes (cfg), S tokens a sequence,
 * B sequences a DP rank a step in m micro-batches. */
struct train_memcheck_run {
	const struct train_cfg *cfg;
	int seq, batch, micro;
};

struct train_memcheck {
	int ok;             /* within TRAIN_MEMCHECK_BOUND */
	double rel;         /* |peak - plan| / plan */
	uint64_t peak;      /* the busiest card's, over MPI_COMM_WORLD */
	uint64_t plan;      /* plan --train's figure */
	char detail[1400];
	json_t *value;      /* the check's evidence; the caller owns it */
};

/*
 * Collective over MPI_COMM_WORLD (the peak is the most of any rank).
 * 0 with out filled, or -1 with err (the model's config or tensor table
 * could not be read, or the batch does not split) and nothing to free.
 */
int train_memcheck(const char *dir, const struct train_memcheck_run *run,
		   const struct train_mem *mem, struct train_memcheck *out,
		   struct d0_err *err);

#endif
