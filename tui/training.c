/*
 * training.c - fine-tuning runs' figures from the view model: see
 * training.h.  No drawing here: the Numerics screen and the headless
 * summary print these.
 */
#include "training.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int same_run(const struct view_train *x, const struct training_run *r)
{
	return !strcmp(x->node, r->node) && !strcmp(x->stage_id, r->stage_id);
}

/* The row's step time, NAN unless all four parts are there. */
static double step_time(const struct view_train *x)
{
	return x->t_fwd + x->t_bwd + x->t_opt + x->t_comm;
}

int training_runs(const struct view *v, struct training_run *out, int max)
{
	int n = 0;
	/* Pass 1: the runs and each one's lowest rank. */
	for (size_t i = 0; i < v->train.n; i++) {
		const struct view_train *x = VIEW_AT(v->train, i);
		int k;
		for (k = 0; k < n; k++)
			if (same_run(x, &out[k]))
				break;
		if (k == n) {
			if (n == max)
				continue;
			memset(&out[n], 0, sizeof out[n]);
			out[n].node = x->node;
			out[n].stage_id = x->stage_id;
			out[n].rank = x->rank;
			n++;
		} else if (x->rank < out[k].rank) {
			out[k].rank = x->rank;
		}
	}
	for (int k = 0; k < n; k++) {
		struct training_run *r = &out[k];
		r->first_skipped = -1;
		r->loss_first = r->loss_last = r->grad_norm_last = NAN;
		r->scale_first = r->scale_last = r->scale_min = NAN;
		r->t_fwd = r->t_bwd = r->t_opt = r->t_comm = r->step_s = NAN;
	}
	/* Pass 2: each run's figures from its rank's steps. */
	for (int k = 0; k < n; k++) {
		struct training_run *r = &out[k];
		double fwd = 0, bwd = 0, opt = 0, comm = 0;
		for (size_t i = 0; i < v->train.n; i++) {
			const struct view_train *x = VIEW_AT(v->train, i);
			if (x->rank != r->rank || !same_run(x, r))
				continue;
			if (!r->steps++) {
				r->first_step = x->step;
				r->layout = x->layout;
			}
			r->last_step = x->step;
			r->last_ts = x->ts;
			if (x->layout[0])
				r->layout = x->layout;
			if (x->skipped && !r->skipped++)
				r->first_skipped = x->step;
			if (!isnan(x->loss)) {
				if (isnan(r->loss_first))
					r->loss_first = x->loss;
				r->loss_last = x->loss;
			}
			/* A skipped step's norm overflowed: it is no norm (the
			 * engine may send -1). */
			if (!isnan(x->grad_norm) && !x->skipped)
				r->grad_norm_last = x->grad_norm;
			if (!isnan(x->loss_scale)) {
				if (isnan(r->scale_first))
					r->scale_first = x->loss_scale;
				r->scale_last = x->loss_scale;
				if (isnan(r->scale_min) ||
				    x->loss_scale < r->scale_min)
					r->scale_min = x->loss_scale;
			}
			if (x->tokens > 0)
				r->tokens += x->tokens;
			if (!isnan(step_time(x))) {
				fwd += x->t_fwd;
				bwd += x->t_bwd;
				opt += x->t_opt;
				comm += x->t_comm;
				r->timed++;
			}
		}
		if (!r->layout)
			r->layout = "";
		if (r->timed) {
			r->t_fwd = fwd / r->timed;
			r->t_bwd = bwd / r->timed;
			r->t_opt = opt / r->timed;
			r->t_comm = comm / r->timed;
			r->step_s = r->t_fwd + r->t_bwd + r->t_opt + r->t_comm;
		}
	}
	return n;
}

int training_series(const struct view *v, const struct training_run *r,
		    enum training_fig fig, double *vals, int *skipped,
		    int max)
{
	int total = 0, skip, n = 0;
	if (max <= 0)
		return 0;
	for (size_t i = 0; i < v->train.n; i++) {
		const struct view_train *x = VIEW_AT(v->train, i);
		total += x->rank == r->rank && same_run(x, r);
	}
	skip = total > max ? total - max : 0; /* the oldest that do not fit */
	for (size_t i = 0; i < v->train.n && n < max; i++) {
		const struct view_train *x = VIEW_AT(v->train, i);
		if (x->rank != r->rank || !same_run(x, r) || skip-- > 0)
			continue;
		vals[n] = fig == TF_LOSS	? x->loss
			  : fig == TF_GRAD_NORM ? (x->skipped ? NAN : x->grad_norm)
			  : fig == TF_LOSS_SCALE ? x->loss_scale
						 : step_time(x);
		if (skipped)
			skipped[n] = x->skipped;
		n++;
	}
	return n;
}

void training_split(const struct training_run *r, char *out, size_t max)
{
	double s = r->step_s;
	if (!r->timed || !(s > 0)) {
		snprintf(out, max, "-");
		return;
	}
	snprintf(out, max, "fwd %.0f%% bwd %.0f%% opt %.0f%% comm %.0f%%",
		 100 * r->t_fwd / s, 100 * r->t_bwd / s, 100 * r->t_opt / s,
		 100 * r->t_comm / s);
}

void training_num(double x, const char *fmt, char *out, size_t max)
{
	if (isnan(x))
		snprintf(out, max, "-");
	else
		snprintf(out, max, fmt, x);
}
