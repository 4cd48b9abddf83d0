/*
 * route_follow.h - the float64 reference follows the run's MoE routing
 * where a near-tie let the run's rounding choose other experts.
 *
 * A router picks the top-k of its logits; where the k-th and the next are
 * closer than the run's rounding (bf16 activations on oneDNN, bf16
 * weights), the run may legitimately pick the other expert, and that one
 * token's layer output then differs from float64 by a whole expert's
 * contribution, which no error bound for rounding should absorb.  run
 * --dump-layers writes each MoE layer's choice ("experts" [T][top_k]) and
 * router logits ("router_logits" [T][experts]) beside its output; the
 * reference, computing the same layer, compares choices token by token:
 *   - the same experts: nothing to do;
 *   - other experts, explained: the run's choice is the top-k of the run's
 *     own router logits, and those are within max_rel (normwise over the
 *     token's logits) of the reference's: a flip.  The reference then
 *     routes the token as the run did (the weights from its own scores),
 *     so every later layer and the logits are compared like for like;
 *   - other experts, unexplained: a wrong router, wrong logits or a wrong
 *     top-k.  The reference keeps its own choice (the error shows) and the
 *     layer level fails.
 * Flips above max_flips of the routed (layer, token) rows fail too.  A
 * dump without routing (a dense model, an older run) is compared as
 * before.
 */
#ifndef DAY0_ROUTE_FOLLOW_H
#define DAY0_ROUTE_FOLLOW_H

#include "model.h"

#include <jansson.h>
#include <stdint.h>

struct rf_flip {
	int layer, token, explained;
	double margin;     /* the reference's score gap its choice has over the run's */
	double router_rel; /* the token's router logits against the reference's */
	char run[64], ref[64]; /* "3,5" */
};

struct rfollow {
	const char *layers_dir;
	const struct model_config *c; /* ref.c fills it before the first hook */
	int T;                        /* the dumps' tokens */
	double max_rel;
	/* the layer whose routing is loaded (-1: none yet) */
	int cur, have;
	float *lg;
	int32_t *idx;
	/* what was seen */
	int routed, flips, unexplained;
	double router_rel; /* worst token's router logits error, compared rows */
	struct rf_flip *fl;
	int nfl;
	char err[320]; /* a dump that could not be read */
};

void rfollow_init(struct rfollow *f, const char *layers_dir, int T,
		  double max_rel);
void rfollow_free(struct rfollow *f);
/* ref_hooks.follow for token t < f->T of layer l (later tokens: 0). */
int rfollow_route(struct rfollow *f, int l, int t, const double *bias,
		  const double *logits, int *idx);
/* The line that reports flip x ("routing flip at layer L token T: ..." or
 * "routing differs ..."), in out[n]. */
void rfollow_line(const struct rfollow *f, const struct rf_flip *x, char *out,
		  size_t n);
/* Print the flips (text), add "routing_flips", "flips", "routed",
 * "router_max_rel" to doc; returns 1 when the routing fails the layer
 * level (unexplained choices, flips above max_flips, a bad dump), with
 * why[n] saying so, else 0 with a summary in why. */
int rfollow_report(const struct rfollow *f, double max_flips, int text,
		   json_t *doc, char *why, size_t n);

#endif
