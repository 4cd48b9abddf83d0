/*
 * validate_layer.h - layer-local float64 validation (validate --local):
 * every layer recomputed from the run's own input of that layer, at most
 * a chunk of weights in memory (--mem), the layers split over MPI ranks,
 * MoE routing flips reported apart.
 */
#ifndef DAY0_VALIDATE_LAYER_H
#define DAY0_VALIDATE_LAYER_H

#include "weights.h"

struct vl_opts {
	const char *dir;        /* the Hugging Face checkpoint */
	const char *layers_dir; /* run --dump-layers */
	const char *logits;     /* run --dump-logits, or NULL */
	const int64_t *tokens;
	int T;
	double max_rel;
	double kl_max;
	double max_flips;     /* fraction of routed (layer, token) pairs */
	enum dtype compute;   /* what the run computed with: F32, BF16, F16 */
	int json;             /* --json: one document, no table */
	size_t mem;           /* weights held at once (0: 256 MiB) */
};

/*
 * Run it (under mpirun or alone).  Prints the table (rank 0), emits the
 * numerics events and checks.  Returns EXIT_OK, EXIT_CHECK_FAILED or
 * EXIT_USAGE (with the message printed).
 */
int validate_local(const struct vl_opts *o);

/* The largest |a - b| over n values and that over the largest |b| (the
 * relative error validate's bounds use; NaN counts as infinite). */
struct err_stat {
	double max_abs, max_rel;
};
struct err_stat err_compare(const float *a, const double *b, size_t n);

#endif
