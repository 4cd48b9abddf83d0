/*
 * training.h - the figures of fine-tuning runs (`train` events), computed
 * from the view model once for every place that shows them: the Numerics
 * screen (sparklines and the step time split) and the headless run's
 * closing TRAINING table, so the two cannot disagree.
 *
 * A run is (node, stage_id): one `day0-engine train` stage.  Every rank
 * may report its steps; a run's figures are those of its lowest rank (the
 * loss and the gradient norm are global, agreed across ranks).
 */
#ifndef DAY0_TRAINING_H
#define DAY0_TRAINING_H

#include <stddef.h>
#include <stdint.h>

#include "view.h"

/* Runs shown at most (a playbook has a handful). */
#define TRAINING_RUNS 16

struct training_run {
	const char *node, *stage_id, *layout; /* the view's strings */
	int rank;			      /* the rank whose steps these are */
	int steps, skipped;		      /* step events; skipped updates */
	int64_t first_step, last_step, first_skipped; /* -1: none skipped */
	double loss_first, loss_last;	/* first and last finite loss */
	double grad_norm_last;		/* last finite one; NAN: none */
	double scale_first, scale_last, scale_min; /* NAN: none */
	/* Mean seconds per step over the steps that report all four: forward,
	 * backward, optimizer, communication; step_s is their sum. */
	double t_fwd, t_bwd, t_opt, t_comm, step_s;
	int timed; /* steps that had all four */
	int64_t tokens;
	int64_t last_ts;
};

/* The runs in the view, in order of their first step (at most max).
 * Returns how many. */
int training_runs(const struct view *v, struct training_run *out, int max);

enum training_fig { TF_LOSS, TF_GRAD_NORM, TF_LOSS_SCALE, TF_STEP_S };
/*
 * The run's last (at most max) values of a figure, oldest first, one per
 * step of its rank; NAN where the step has none (an overflowed step's
 * loss).  *skipped (may be NULL) gets 1 for each skipped step.  Returns
 * how many.
 */
int training_series(const struct view *v, const struct training_run *r,
		    enum training_fig fig, double *vals, int *skipped,
		    int max);

/* The time split as text: "fwd 29% bwd 58% opt 8% comm 3%" (shares of
 * step_s), or "-" when no step was timed. */
void training_split(const struct training_run *r, char *out, size_t max);

/* x with printf format fmt (one double), "-" when NAN. */
void training_num(double x, const char *fmt, char *out, size_t max);

#endif
