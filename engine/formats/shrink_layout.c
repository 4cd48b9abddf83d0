/*
 * shrink_layout.c - gen-model --like CONFIG --for-layout TP,PP,EP.
 *
 * A shape rehearsal is only worth its name when the tiny model runs with
 * the real run's layout: `--tp 8` needs heads (and kv heads) that 8
 * divides, `--pp 3` needs three layers, `--ep 4` experts that 4 divides.
 * model_config_shrink picks few heads and layers; this file grows exactly
 * the dimensions the layout splits, to the smallest values layout_check
 * (the rule convert and run apply) accepts, and leaves every other
 * feature alone: the GQA ratio, MLA, dense-first layers, shared experts,
 * grouped routing, rope scaling.
 */
#include "shrink_layout.h"

#include <stdio.h>
#include <string.h>

static int64_t round_up(int64_t x, int64_t m)
{
	return m > 1 ? (x + m - 1) / m * m : x;
}

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* layout.c's kv rule: split when at least tp kv heads, else replicate. */
static int kv_fits(int64_t kv, int tp)
{
	return kv >= tp ? kv % tp == 0 : tp % kv == 0;
}

/*
 * The fewest heads that tp splits, keeping heads = kv * ratio.  kv only
 * grows, so MHA stays MHA and a GQA model keeps its group size.
 */
static void fit_heads(struct model_config *c, int tp)
{
	int64_t ratio = c->heads / c->kv_heads, kv = c->kv_heads;
	int derived = !c->mla && c->hidden == c->heads * c->head_dim;
	if (c->mla) { /* MLA: one kv "head" per query head, no ratio */
		c->heads = c->kv_heads = round_up(c->heads, tp);
		return;
	}
	while (!(kv_fits(kv, tp) && (kv * ratio) % tp == 0))
		kv++;
	c->kv_heads = kv;
	c->heads = kv * ratio;
	if (derived) /* hidden = heads x head_dim in this family */
		c->hidden = c->heads * c->head_dim;
}

/* FFN widths to multiples of tp; shared experts keep their multiple. */
static void fit_ffn(struct model_config *c, int tp)
{
	int64_t shared_mult = c->moe_ffn && c->shared_ffn % c->moe_ffn == 0
				      ? c->shared_ffn / c->moe_ffn
				      : 0;
	c->ffn = round_up(c->ffn, tp);
	c->vocab = round_up(c->vocab, tp);
	if (!c->experts)
		return;
	c->moe_ffn = round_up(c->moe_ffn, tp);
	c->shared_ffn = shared_mult ? c->moe_ffn * shared_mult
				    : round_up(c->shared_ffn, tp);
}

static void fit_experts(struct model_config *c, int ep)
{
	int64_t g = c->n_group > 1 ? c->n_group : 1;
	int64_t m = (int64_t)ep / gcd64(ep, g) * g; /* lcm(ep, groups) */
	if (!c->experts)
		return;
	c->experts = round_up(c->experts, m);
}

int model_config_fit_layout(const struct model_config *real,
			    const struct layout_dims *d,
			    struct model_config *c, struct d0_err *err)
{
	struct d0_err why;
	if (layout_check(real, d, &why) < 0)
		return d0_errf(err, "--for-layout tp%d pp%d ep%d: the real "
			       "model cannot take it either: %s", d->tp, d->pp,
			       d->ep, why.msg);
	fit_heads(c, d->tp);
	fit_ffn(c, d->tp);
	fit_experts(c, d->ep);
	if (c->layers < d->pp)
		c->layers = d->pp;
	if (layout_check(c, d, &why) < 0) /* a rule this file does not know */
		return d0_errf(err, "--for-layout tp%d pp%d ep%d: the shrunk "
			       "model still does not split: %s", d->tp, d->pp,
			       d->ep, why.msg);
	return 0;
}

int layout_dims_parse(const char *s, struct layout_dims *d)
{
	int v[4] = {1, 1, 1, 1}, k, used = 0;
	k = sscanf(s, "%d,%d,%d,%d%n", &v[0], &v[1], &v[2], &v[3], &used);
	if (k < 3) { /* all three are needed: the run passes tp,pp,ep */
		return -1;
	}
	for (int i = 0; i < k; i++)
		if (v[i] < 1 || v[i] > 65536)
			return -1;
	if (k == 4 && s[used])
		return -1;
	if (k == 3) { /* nothing but digits and commas may follow */
		char tail[2];
		if (sscanf(s, "%*d,%*d,%*d%1s", tail) == 1)
			return -1;
	}
	d->tp = v[0];
	d->pp = v[1];
	d->ep = v[2];
	return 0;
}
