/* Sharding rules: rank coordinates, splits, refusals. */
#include "engine.h"
#include "unit.h"

#include <string.h>

static struct model_config cfg(const char *type)
{
	struct model_config c;
	memset(&c, 0, sizeof c);
	snprintf(c.model_type, sizeof c.model_type, "%s", type);
	c.hidden = 64;
	c.layers = 4;
	c.heads = 8;
	c.kv_heads = 2;
	c.head_dim = 8;
	c.ffn = 128;
	c.vocab = 256;
	if (!strcmp(type, "mixtral")) {
		c.experts = 8;
		c.top_k = 2;
		c.moe_ffn = 128;
	}
	return c;
}

static const struct tensor_spec *find(const struct tensor_spec *t, size_t n,
				      const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, name))
			return &t[i];
	return NULL;
}

int main(void)
{
	struct model_config c = cfg("mixtral");
	struct layout_dims d = {.tp = 4, .pp = 2, .ep = 2};
	struct tensor_spec *t;
	struct tensor_split s;
	struct d0_err err;
	size_t n;
	int pp, ep, tp;

	/* rank order: tp fastest, then ep, then pp */
	CHECK(layout_rank(&d, 0, 0, 1) == 1);
	CHECK(layout_rank(&d, 0, 1, 0) == 4);
	CHECK(layout_rank(&d, 1, 0, 0) == 8);
	layout_coords(&d, 13, &pp, &ep, &tp);
	CHECK(pp == 1 && ep == 1 && tp == 1);
	CHECK(layout_check(&c, &d, &err) == 0);

	CHECK(model_tensors(&c, &t, &n, &err) == 0);
	{
		const struct tensor_spec *q = find(t, n, "model.layers.0.self_attn.q_proj.weight");
		const struct tensor_spec *k = find(t, n, "model.layers.0.self_attn.k_proj.weight");
		const struct tensor_spec *o = find(t, n, "model.layers.3.self_attn.o_proj.weight");
		const struct tensor_spec *w1 = find(t, n, "model.layers.2.block_sparse_moe.experts.5.w1.weight");
		const struct tensor_spec *g = find(t, n, "model.layers.0.block_sparse_moe.gate.weight");
		const struct tensor_spec *e = find(t, n, "model.embed_tokens.weight");
		const struct tensor_spec *lm = find(t, n, "lm_head.weight");
		CHECK(q && k && o && w1 && g && e && lm);
		layout_split(&c, &d, q, &s);
		CHECK(!strcmp(s.kind, "column") && s.axis == 0 && s.parts == 4);
		CHECK(layout_part_for_rank(&c, &d, q, &s, 3) == 3);
		CHECK(layout_part_for_rank(&c, &d, q, &s, 8) == -1); /* stage 1 */
		/* 2 kv heads over tp 4: each head replicated on 2 ranks */
		layout_split(&c, &d, k, &s);
		CHECK(!strcmp(s.kind, "kv_heads") && s.parts == 2 && s.replicas == 2);
		CHECK(layout_part_for_rank(&c, &d, k, &s, 0) == 0);
		CHECK(layout_part_for_rank(&c, &d, k, &s, 1) == 0);
		CHECK(layout_part_for_rank(&c, &d, k, &s, 2) == 1);
		layout_split(&c, &d, o, &s);
		CHECK(!strcmp(s.kind, "row") && s.axis == 1);
		CHECK(layout_part_for_rank(&c, &d, o, &s, 9) == 1); /* stage 1 */
		CHECK(layout_part_for_rank(&c, &d, o, &s, 1) == -1);
		/* expert 5 of 8 over ep 2: owned by ep rank 1; layer 2 on stage 1 */
		layout_split(&c, &d, w1, &s);
		CHECK(layout_part_for_rank(&c, &d, w1, &s, layout_rank(&d, 1, 1, 2)) == 2);
		CHECK(layout_part_for_rank(&c, &d, w1, &s, layout_rank(&d, 1, 0, 2)) == -1);
		layout_split(&c, &d, g, &s);
		CHECK(!strcmp(s.kind, "replicated"));
		layout_split(&c, &d, e, &s);
		CHECK(!strcmp(s.kind, "vocab"));
		CHECK(layout_part_for_rank(&c, &d, e, &s, 2) == 2);
		CHECK(layout_part_for_rank(&c, &d, e, &s, 10) == -1); /* not on last stage */
		layout_split(&c, &d, lm, &s);
		CHECK(layout_part_for_rank(&c, &d, lm, &s, 10) == 2);
		CHECK(layout_part_for_rank(&c, &d, lm, &s, 2) == -1);
	}
	free(t);

	/* refusals name the dimension */
	d = (struct layout_dims){.tp = 3, .pp = 1, .ep = 1};
	CHECK(layout_check(&c, &d, &err) == -1 && strstr(err.msg, "num_attention_heads"));
	d = (struct layout_dims){.tp = 2, .pp = 3, .ep = 1};
	CHECK(layout_check(&c, &d, &err) == 0); /* balanced: 2 + 1 + 1 layers */
	d = (struct layout_dims){.tp = 2, .pp = 5, .ep = 1};
	CHECK(layout_check(&c, &d, &err) == -1 && strstr(err.msg, "num_hidden_layers"));
	{
		/* 61 layers over 8 stages: 61 = 5 x 8 + 3 x 7, the first five
		 * stages hold 8 layers */
		struct model_config big = c;
		struct tensor_spec ts = {.layer = 39};
		int st[2];
		big.layers = 61;
		d = (struct layout_dims){.tp = 1, .pp = 8, .ep = 1};
		CHECK(layout_tensor_stages(&big, &d, &ts, st) == 1 && st[0] == 4);
		ts.layer = 40;
		CHECK(layout_tensor_stages(&big, &d, &ts, st) == 1 && st[0] == 5);
		ts.layer = 60;
		CHECK(layout_tensor_stages(&big, &d, &ts, st) == 1 && st[0] == 7);
		ts.layer = 61; /* an MTP layer */
		CHECK(layout_tensor_stages(&big, &d, &ts, st) == 1 && st[0] == 7);
		{
			int64_t first, count, sum = 0;
			for (int sg = 0; sg < 8; sg++) {
				layout_stage_layers(61, 8, sg, &first, &count);
				CHECKN("stage_layers agrees with the stage of its first layer",
				       (ts.layer = (int)first, layout_tensor_stages(&big, &d, &ts, st) == 1 && st[0] == sg));
				sum += count;
			}
			CHECK(sum == 61);
		}
	}
	d = (struct layout_dims){.tp = 1, .pp = 1, .ep = 3};
	CHECK(layout_check(&c, &d, &err) == -1 && strstr(err.msg, "expert count"));
	c.kv_heads = 4;
	c.heads = 24;
	d = (struct layout_dims){.tp = 8, .pp = 1, .ep = 1};
	CHECK(layout_check(&c, &d, &err) == 0); /* 4 kv heads each on 2 ranks */
	d = (struct layout_dims){.tp = 16, .pp = 1, .ep = 1};
	CHECK(layout_check(&c, &d, &err) == -1 && strstr(err.msg, "num_attention_heads"));
	d = (struct layout_dims){.tp = 6, .pp = 1, .ep = 1};
	CHECK(layout_check(&c, &d, &err) == -1);
	{
		struct model_config l = cfg("llama");
		d = (struct layout_dims){.tp = 1, .pp = 1, .ep = 2};
		CHECK(layout_check(&l, &d, &err) == -1 && strstr(err.msg, "no routed experts"));
		l.vocab = 255;
		d = (struct layout_dims){.tp = 2, .pp = 1, .ep = 1};
		CHECK(layout_check(&l, &d, &err) == -1 && strstr(err.msg, "vocab_size"));
	}
	return unit_done();
}
