/*
 * ref_train.h - the float64 reference backward (ref_train.c) that
 * training's gradients are checked against: one process, the whole
 * checkpoint in float64, every sum a plain loop, no BLAS and no code
 * shared with engine/train/.  It also gives the loss with one scalar
 * weight moved (central finite differences).
 */
#ifndef DAY0_REF_TRAIN_H
#define DAY0_REF_TRAIN_H

#include "engine.h"

struct ref_tgrad {
	char name[160];
	int64_t n;
	double *g;
};

/* One weight element moved by delta before the pass (name NULL: none). */
struct ref_perturb {
	const char *name;
	int64_t idx;
	double delta;
};

/*
 * The mean cross-entropy of B sequences of S tokens with labels lab
 * (-100 ignored) over nvalid labels, and, if grads is non-NULL, the
 * gradient of every parameter tensor (*grads malloc'd, free with
 * ref_tgrads_free).  The value of weight (name, idx) in *w0 when asked.
 */
int ref_train_grads(const char *dir, const int64_t *tok, const int64_t *lab,
		    int B, int S, int64_t nvalid, const struct ref_perturb *pt,
		    double *loss, struct ref_tgrad **grads, int *ngrads,
		    struct d0_err *err);
void ref_tgrads_free(struct ref_tgrad *g, int n);

#endif
