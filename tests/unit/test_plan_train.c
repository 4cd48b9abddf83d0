/*
 * plan --train's memory model (plan_train.c): each named parameter of
 * struct train_mem_model moves its own term and only that one, EP shards
 * the routed experts' parameters, ZeRO-1 divides the optimizer.  Real
 * configs from assets/configs (run from the repository root, as
 * tests/run.sh does).
 */
#include "plan_train.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static int load(const char *path, struct model_config *c,
		struct tensor_spec **t, size_t *n)
{
	struct d0_err err;
	if (model_config_load(path, c, &err) < 0 ||
	    model_tensors(c, t, n, &err) < 0) {
		printf("# %s\n", err.msg);
		return -1;
	}
	return 0;
}

static void need(const struct model_config *c, const struct tensor_spec *t,
		 size_t n, const struct train_mem_model *m, int tp, int dp,
		 int zero1, struct train_need *nd, struct train_layout *l)
{
	struct train_load ld = {.seq = 4096, .micro = 1, .global = dp,
				.zero1 = zero1, .recompute = RECOMPUTE_NONE};
	struct layout_dims d = {tp, 1, 1};
	struct train_hw hw = {1e15, 1e11, 5e10};
	char why[300];
	memset(l, 0, sizeof *l);
	l->tp = tp;
	l->pp = l->ep = 1;
	l->dp = dp;
	l->cards_per_node = 8;
	l->tp_in_node = 1;
	train_layout_params(c, t, n, &d, m->weight_bytes, l);
	CHECK(train_need_layout(c, t, n, &ld, m, l, &hw, UINT64_MAX, 0, nd, why,
				sizeof why) == 0);
}

int main(void)
{
	struct model_config c;
	struct tensor_spec *t = NULL;
	size_t n = 0;
	struct train_mem_model base, m;
	struct train_need a, b;
	struct train_layout la, lb;

	/* Llama-3.1-8B at TP 2, one sequence of 4096 */
	if (load("assets/configs/llama-3.1-8b.json", &c, &t, &n) < 0) {
		CHECK(!"llama-3.1-8b.json loads");
		return unit_done();
	}
	train_mem_megatron(&base);
	need(&c, t, n, &base, 2, 1, 1, &a, &la);
	CHECK(a.weights == 2 * la.params && a.grads == a.weights);
	CHECK(a.optim == 12 * la.params);
	CHECK(a.views == 0);
	CHECK(a.total == a.weights + a.grads + a.optim + a.act + a.bwd);
	/* sequence parallelism off: the residual stream whole on each TP rank
	 * (twice), nothing else moves */
	m = base;
	m.seq_parallel = 0;
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(b.parts.residual >= 2 * a.parts.residual - 2 &&
	      b.parts.residual <= 2 * a.parts.residual + 2);
	CHECK(b.parts.attention == a.parts.attention && b.parts.mlp == a.parts.mlp &&
	      b.parts.scores == a.parts.scores);
	/* FlashAttention off: [heads/TP, S] probabilities at 2 bytes instead
	 * of one f32 statistic a head: S * 2 / 4 = 2048 times */
	m = base;
	m.flash = 0;
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(b.parts.scores == 2048 * a.parts.scores);
	CHECK(b.parts.residual == a.parts.residual && b.parts.mlp == a.parts.mlp);
	/* products rebuilt: SwiGLU keeps gate and up only, 2/3 */
	m = base;
	m.keep_products = 0;
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(3 * b.parts.mlp == 2 * a.parts.mlp);
	CHECK(b.parts.attention == a.parts.attention);
	/* f32 activations: Q K V O twice the bytes; the working set is the
	 * gradients' width, not the activations' */
	m = base;
	m.act_bytes = 4;
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(b.parts.attention == 2 * a.parts.attention);
	CHECK(b.bwd == a.bwd);
	m = base;
	m.grad_bytes = 4;
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(b.bwd > a.bwd && b.act == a.act);
	/* f32 views: twice the largest slice (the vocab-parallel embedding)
	 * in f32 */
	m = base;
	m.f32_views = 1;
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(lb.max_tensor == (uint64_t)(c.vocab / 2 * c.hidden));
	CHECK(b.views == 8 * lb.max_tensor && b.total == a.total + b.views);
	/* the day0 trainer at f32: 4-byte weights and gradients, no views */
	train_mem_day0(&m, 4);
	need(&c, t, n, &m, 2, 1, 1, &b, &lb);
	CHECK(b.weights == 4 * lb.params && b.grads == b.weights && b.views == 0);
	CHECK(b.act > a.act && b.parts.scores > a.parts.scores);
	/* day0's backward working set is train.c's buffers, not one layer's
	 * activation gradients: the score gradient is a row at a time, so
	 * the term has no [heads/TP, S, S]; at TP 2 (16 heads, 4 KV heads of
	 * 128, F 7168): dh, dh2, dxn [T, H] and six buffers of widths 2048
	 * (datt), 2048 (dq), 7168 x 4 (the SwiGLU's widest), 4 B each */
	CHECK(b.bwd == 4096ull * 4 * (3 * 4096 + 2048 + 2048 + 4 * 7168) + 6 * 4);
	CHECK(b.bwd < b.parts.scores / 32);
	m.bwd_buffers = 0; /* one layer's gradients: the scores counted again */
	need(&c, t, n, &m, 2, 1, 1, &a, &la);
	CHECK(a.bwd > b.parts.scores / 32 && a.act == b.act);
	/* ZeRO-1 over DP 4 */
	need(&c, t, n, &base, 2, 4, 1, &a, &la);
	need(&c, t, n, &base, 2, 4, 0, &b, &lb);
	CHECK(a.optim * 4 == b.optim);
	free(t);
	model_config_free(&c);

	/* DeepSeek-V3: EP 8 holds an eighth of the routed experts, the dense
	 * part and the router biases (f32 buffers, not trained) whole */
	t = NULL;
	if (load("assets/configs/deepseek-v3.json", &c, &t, &n) < 0) {
		CHECK(!"deepseek-v3.json loads");
		return unit_done();
	}
	{
		struct layout_dims d1 = {1, 16, 1}, d8 = {1, 16, 8};
		train_layout_params(&c, t, n, &d1, 2, &la);
		train_layout_params(&c, t, n, &d8, 2, &lb);
		CHECK(la.expert_params > 0 && lb.expert_params * 8 == la.expert_params);
		CHECK(la.params - la.expert_params == lb.params - lb.expert_params);
		CHECK(la.buffers > 0 && la.buffers == lb.buffers);
	}
	free(t);
	model_config_free(&c);
	return unit_done();
}
