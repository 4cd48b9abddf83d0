/*
 * step_inspect.c - `day0-engine inspect`: what is this model made of, and
 * can the engine run every operator in it?  Answered from config.json
 * alone, before a weight byte has arrived.
 *
 * Parameter counts come from model.c's tensor table (the same one verify,
 * convert and plan use); operators from model_operators() checked against
 * ops.c's registry.
 */
#include "engine.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv);

const struct step_entry step_inspect = {
	.name = "inspect",
	.usage = "(MODEL_DIR | CONFIG.json) [--json] [--events]\n"
		 "  reports the structure, parameters and operator coverage "
		 "from config.json, and the tokenizer.json beside it (type, "
		 "vocabulary, special tokens) checked against config.json's "
		 "vocab_size\n"
		 "example: day0-engine inspect /models/deepseek-v3 --json",
	.summary = "structure, parameter counts, operator coverage and the "
		   "tokenizer from config.json",
	.run = run,
};

static const char *attention_kind(const struct model_config *c)
{
	if (c->mla)
		return "MLA";
	return c->kv_heads == c->heads ? "MHA" : "GQA";
}

static void routing(const struct model_config *c, char *buf, size_t n)
{
	if (!strcmp(c->scoring, "sigmoid"))
		snprintf(buf, n, "sigmoid scores + correction bias, grouped "
			 "top-%lld (%lld of %lld groups)%s, scaled x%g",
			 (long long)c->top_k, (long long)c->topk_group,
			 (long long)c->n_group,
			 c->norm_topk_prob ? ", renormalised" : "",
			 c->routed_scaling);
	else
		snprintf(buf, n, "softmax top-%lld %s", (long long)c->top_k,
			 c->norm_topk_prob ? "renormalised"
					   : "without renormalisation");
}

static int64_t moe_layer_count(const struct model_config *c)
{
	int64_t k = 0;
	for (int64_t l = 0; l < c->layers; l++)
		k += model_layer_is_moe(c, l);
	return k;
}

static void rope_desc(const struct model_config *c, char *buf, size_t n)
{
	const struct rope_scaling *r = &c->rope;
	if (!r->type[0])
		snprintf(buf, n, "theta %g, no scaling", c->rope_theta);
	else if (!strcmp(r->type, "llama3"))
		snprintf(buf, n, "theta %g, llama3 x%g (bands %g..%g, original "
			 "%g positions)", c->rope_theta, r->factor,
			 r->low_freq_factor, r->high_freq_factor,
			 r->original_max_pos);
	else if (!strcmp(r->type, "yarn"))
		snprintf(buf, n, "theta %g, yarn x%g (original %g positions, "
			 "beta %g/%g)", c->rope_theta, r->factor,
			 r->original_max_pos, r->beta_fast, r->beta_slow);
	else
		snprintf(buf, n, "theta %g, %s x%g", c->rope_theta, r->type,
			 r->factor);
}

static const char *status_name(enum op_status s)
{
	return s == OP_IS_NATIVE ? "native" : s == OP_IS_FALLBACK ? "fallback"
								  : "missing";
}

static char *billions(uint64_t n, char *buf)
{
	snprintf(buf, 32, "%.2fB", (double)n / 1e9);
	return buf;
}

static json_t *structure_json(const struct model_config *c)
{
	char rbuf[256], rope[256];
	json_t *o = json_object();
	rope_desc(c, rope, sizeof rope);
	json_object_set_new(o, "layers", json_integer(c->layers));
	json_object_set_new(o, "moe_layers", json_integer(moe_layer_count(c)));
	json_object_set_new(o, "mtp_layers", json_integer(c->mtp_layers));
	json_object_set_new(o, "hidden_size", json_integer(c->hidden));
	json_object_set_new(o, "vocab_size", json_integer(c->vocab));
	json_object_set_new(o, "tie_word_embeddings",
			    json_boolean(c->tie_embeddings));
	json_object_set_new(
		o, "attention",
		json_pack("{s:s, s:I, s:I, s:I}", "kind", attention_kind(c),
			  "heads", (json_int_t)c->heads, "kv_heads",
			  (json_int_t)c->kv_heads, "head_dim",
			  (json_int_t)c->head_dim));
	if (c->mla) {
		json_t *mla = json_pack("{s:I, s:I, s:I, s:I, s:I}", "q_lora_rank",
					(json_int_t)c->q_lora_rank, "kv_lora_rank",
					(json_int_t)c->kv_lora_rank,
					"qk_nope_head_dim", (json_int_t)c->qk_nope_dim,
					"qk_rope_head_dim", (json_int_t)c->qk_rope_dim,
					"v_head_dim", (json_int_t)c->v_head_dim);
		json_object_update(json_object_get(o, "attention"), mla);
		json_decref(mla);
	}
	if (c->experts) {
		routing(c, rbuf, sizeof rbuf);
		json_object_set_new(
			o, "moe",
			json_pack("{s:I, s:I, s:I, s:I, s:s, s:s}", "experts",
				  (json_int_t)c->experts, "top_k",
				  (json_int_t)c->top_k, "expert_ffn",
				  (json_int_t)c->moe_ffn, "shared_ffn",
				  (json_int_t)c->shared_ffn, "scoring", c->scoring,
				  "routing", rbuf));
	} else {
		json_object_set_new(o, "moe", json_null());
	}
	json_object_set_new(o, "ffn", json_integer(c->ffn));
	json_object_set_new(o, "norm", json_pack("{s:s, s:f}", "kind", "rms_norm",
						 "eps", c->rms_eps));
	json_object_set_new(o, "activation", json_string(c->hidden_act));
	json_object_set_new(o, "rope", json_string(rope));
	json_object_set_new(o, "dtype", json_string(dtype_torch_name(c->dtype)));
	json_object_set_new(o, "quantization",
			    c->quant[0] ? json_string(c->quant) : json_null());
	return o;
}

/*
 * Bytes on disk in the format config.json declares (values + scales), and
 * the footprint once dequantised to bf16 (what a layout that dequantises
 * on load holds).  MTP layers included: they are in the checkpoint.
 */
struct storage {
	uint64_t disk, scales, quantised, dequant_bf16;
};

static void storage_bytes(const struct model_config *c,
			  const struct tensor_spec *t, size_t n,
			  struct storage *s)
{
	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < n; i++) {
		struct stored_part sp[3];
		int np = quant_parts(&c->qc, &t[i], c->dtype, sp);
		uint64_t numel = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
		s->disk += quant_stored_bytes(&c->qc, &t[i], c->dtype, -1, 1);
		for (int p = 1; p < np; p++)
			s->scales += sp[p].shape[0] * (sp[p].ndim == 2 ? sp[p].shape[1] : 1) *
				     dtype_size(sp[p].dtype);
		s->quantised += np > 1 ? numel : 0;
		s->dequant_bf16 += numel * 2;
	}
}

static json_t *storage_json(const struct model_config *c,
			    const struct storage *s)
{
	char fmt[64];
	return json_pack("{s:s, s:I, s:I, s:I, s:I}", "format",
			 quant_describe(&c->qc, fmt, sizeof fmt), "disk_bytes",
			 (json_int_t)s->disk, "scale_bytes", (json_int_t)s->scales,
			 "quantised_params", (json_int_t)s->quantised,
			 "dequantised_bf16_bytes", (json_int_t)s->dequant_bf16);
}

/*
 * The image channel: the tower and projector (parameters and stored
 * bytes), and what one image costs: patches, the LM tokens they become,
 * a block's widest activation and the LM's KV cache for those tokens.
 * Qwen's images vary in size: a 448 x 448 image (32 x 32 patches) and the
 * largest the preprocessor_config.json beside config.json allows
 * (max_pixels); CLIP's are all image_size square.
 */
struct vision_summary {
	uint64_t tower_bytes, projector_bytes;
	int64_t max_side; /* the largest square image's side, 0 unknown */
	struct vision_image_cost one, largest;
	int64_t one_side;
};

static int64_t preprocessor_max_pixels(const char *config_path)
{
	char *dir = strdup(config_path), *slash = strrchr(dir, '/'), *p;
	json_t *doc, *v;
	int64_t mp = 0;
	if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	p = path_join(dir, "preprocessor_config.json");
	doc = json_load_file(p, 0, NULL);
	v = doc ? json_object_get(doc, "max_pixels") : NULL;
	if (!json_is_integer(v) && doc)
		v = json_object_get(json_object_get(doc, "size"), "longest_edge");
	if (json_is_integer(v) && json_integer_value(v) > 0)
		mp = json_integer_value(v);
	/* Kimi-VL: in_token_limit patches of patch_size^2 pixels */
	v = doc ? json_object_get(doc, "in_token_limit") : NULL;
	if (json_is_integer(v) && json_integer_value(v) > 0 &&
	    json_integer_value(v) < (INT64_C(1) << 32)) {
		json_t *ps = json_object_get(doc, "patch_size");
		int64_t P = json_is_integer(ps) ? json_integer_value(ps) : 14;
		if (P > 0 && P < 4096)
			mp = json_integer_value(v) * P * P;
	}
	json_decref(doc);
	free(p);
	free(dir);
	return mp;
}

static void vision_summary(const char *path, const struct model_config *c,
			   const struct tensor_spec *t, size_t n,
			   struct vision_summary *s)
{
	const struct vision_config *v = &c->vision;
	int kvb = dtype_size(c->dtype) ? (int)dtype_size(c->dtype) : 2;
	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < n; i++) {
		uint64_t b = quant_stored_bytes(&c->qc, &t[i], c->dtype, -1, 1);
		if (t[i].group == GROUP_VISION)
			s->tower_bytes += b;
		else if (t[i].group == GROUP_PROJECTOR)
			s->projector_bytes += b;
	}
	if (v->kind == VISION_CLIP) {
		s->one_side = v->image_size;
		vision_image_cost(c, 1, 0, 0, kvb, &s->one);
		return;
	}
	if (v->kind != VISION_QWEN2_VL && v->kind != VISION_QWEN2_5_VL &&
	    v->kind != VISION_KIMI)
		return;
	s->one_side = 448;
	vision_image_cost(c, 1, 448 / v->patch, 448 / v->patch, kvb, &s->one);
	{
		int64_t mp = preprocessor_max_pixels(path);
		int64_t f = v->patch * v->merge, side = 0;
		if (mp > 0) { /* smart_resize of a square: floor to the factor */
			side = (int64_t)sqrt((double)mp);
			side -= side % f;
			s->max_side = side;
			vision_image_cost(c, 1, side / v->patch, side / v->patch,
					  kvb, &s->largest);
		}
	}
}

static void print_cost(const char *what, const struct vision_image_cost *k)
{
	char a[32], b[32];
	printf("  %-20s %lld patches -> %lld LM tokens; widest block "
	       "activation %s (f32); LM KV cache %s\n", what,
	       (long long)k->patches, (long long)k->tokens,
	       fmt_bytes(k->act_elems * 4, a), fmt_bytes(k->kv_bytes, b));
}

static void print_vision(const struct model_config *c,
			 const struct param_count *pc,
			 const struct vision_summary *s)
{
	const struct vision_config *v = &c->vision;
	char a[32], b[32], x[32], y[32], w[48];
	if (v->kind == VISION_NONE)
		return;
	printf("\nvision     %s (%s): %s\n", v->vl_type,
	       v->tower_type[0] ? v->tower_type : "tower", vision_kind_name(v->kind));
	if (v->kind == VISION_UNSUPPORTED) {
		printf("           NOT IMPLEMENTED: the engine lacks %s; its "
		       "tensors are not in the table (verify will list them "
		       "as unexpected)\n", v->missing);
		return;
	}
	printf("  blocks %lld, hidden %lld, %lld heads (head dim %lld), ffn "
	       "%lld, act %s, norm eps %g\n", (long long)v->depth,
	       (long long)v->hidden, (long long)v->heads,
	       (long long)(v->hidden / v->heads), (long long)v->ffn, v->act,
	       v->norm_eps);
	if (v->kind == VISION_CLIP) {
		printf("  image %lld x %lld, patch %lld: %lld positions (class "
		       "token + patches); LLaVA reads hidden state %lld, "
		       "strategy %s; projector Linear-%s-Linear %lld -> %lld\n",
		       (long long)v->image_size, (long long)v->image_size,
		       (long long)v->patch, (long long)s->one.patches,
		       (long long)v->feature_layer, v->select_strategy,
		       v->projector_act, (long long)v->hidden,
		       (long long)v->out_hidden);
		printf("  image token %lld, expanded to %lld per image\n",
		       (long long)v->image_token_id, (long long)s->one.tokens);
	} else if (v->kind == VISION_KIMI) {
		printf("  patch %lld x %lld, learned positions %lld x %lld "
		       "(bicubic-interpolated to other grids), 2D RoPE, merge "
		       "%lld x %lld -> projector -> LM hidden %lld\n",
		       (long long)v->patch, (long long)v->patch,
		       (long long)v->pos_h, (long long)v->pos_w,
		       (long long)v->merge, (long long)v->merge,
		       (long long)v->out_hidden);
		printf("  image token %lld (<|media_pad|>), one per merged "
		       "patch; plain 1-D positions in the LM\n",
		       (long long)v->image_token_id);
	} else {
		int o = 0;
		w[0] = 0;
		for (int i = 0; i < v->n_fullatt && o < 40; i++)
			o += snprintf(w + o, sizeof w - (size_t)o, "%s%lld",
				      i ? "," : "", (long long)v->fullatt[i]);
		printf("  patch %lld x %lld x %lld frames, merge %lld x %lld "
		       "-> LM hidden %lld", (long long)v->patch,
		       (long long)v->patch, (long long)v->temporal_patch,
		       (long long)v->merge, (long long)v->merge,
		       (long long)v->out_hidden);
		if (v->kind == VISION_QWEN2_5_VL)
			printf("; window %lld px, full attention in blocks %s",
			       (long long)v->window_size, w);
		printf("\n  M-RoPE t/h/w sections %lld/%lld/%lld; image token "
		       "%lld between %lld and %lld\n",
		       (long long)v->mrope_section[0], (long long)v->mrope_section[1],
		       (long long)v->mrope_section[2], (long long)v->image_token_id,
		       (long long)v->vision_start_id, (long long)v->vision_end_id);
	}
	printf("  tower %s params (%s), projector %s (%s): replicated on the "
	       "first pipeline stage (docs/multimodal.md)\n",
	       billions(pc->vision, a), fmt_bytes(s->tower_bytes, x),
	       billions(pc->projector, b), fmt_bytes(s->projector_bytes, y));
	snprintf(w, sizeof w, "%lld x %lld image", (long long)s->one_side,
		 (long long)s->one_side);
	print_cost(w, &s->one);
	if (s->max_side) {
		snprintf(w, sizeof w, "%lld x %lld (max)", (long long)s->max_side,
			 (long long)s->max_side);
		print_cost(w, &s->largest);
	}
}

static json_t *cost_json(int64_t side, const struct vision_image_cost *k)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I}", "side", (json_int_t)side,
			 "patches", (json_int_t)k->patches, "tokens",
			 (json_int_t)k->tokens, "activation_elems",
			 (json_int_t)k->act_elems, "kv_bytes",
			 (json_int_t)k->kv_bytes);
}

/* o gains src's keys it lacks; src is released. */
static void update_new(json_t *o, json_t *src)
{
	json_object_update_missing(o, src);
	json_decref(src);
}

static json_t *vision_json(const struct model_config *c,
			   const struct param_count *pc,
			   const struct vision_summary *s)
{
	const struct vision_config *v = &c->vision;
	json_t *o, *fa, *per;
	if (v->kind == VISION_NONE)
		return json_null();
	o = json_pack("{s:s, s:s, s:s, s:s}", "model_type", v->vl_type,
		      "tower_type", v->tower_type, "kind", vision_kind_name(v->kind),
		      "lm_family", c->model_type);
	if (v->kind == VISION_UNSUPPORTED) {
		json_object_set_new(o, "missing", json_string(v->missing));
		return o;
	}
	fa = json_array();
	for (int i = 0; i < v->n_fullatt; i++)
		json_array_append_new(fa, json_integer(v->fullatt[i]));
	update_new(o, json_pack(
		"{s:I, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:o}",
		"depth", (json_int_t)v->depth, "hidden_size", (json_int_t)v->hidden,
		"num_heads", (json_int_t)v->heads, "intermediate_size",
		(json_int_t)v->ffn, "hidden_act", v->act, "patch_size",
		(json_int_t)v->patch, "temporal_patch_size",
		(json_int_t)v->temporal_patch, "spatial_merge_size",
		(json_int_t)v->merge, "out_hidden_size", (json_int_t)v->out_hidden,
		"image_token_id", (json_int_t)v->image_token_id,
		"fullatt_block_indexes", fa));
	if (v->mrope)
		json_object_set_new(o, "mrope_section",
				    json_pack("[I, I, I]",
					      (json_int_t)v->mrope_section[0],
					      (json_int_t)v->mrope_section[1],
					      (json_int_t)v->mrope_section[2]));
	if (v->kind == VISION_CLIP)
		update_new(o, json_pack(
			"{s:I, s:I, s:s, s:s}", "image_size",
			(json_int_t)v->image_size, "vision_feature_layer",
			(json_int_t)v->feature_layer,
			"vision_feature_select_strategy", v->select_strategy,
			"projector_hidden_act", v->projector_act));
	json_object_set_new(o, "parameters",
			    json_pack("{s:I, s:I}", "tower", (json_int_t)pc->vision,
				      "projector", (json_int_t)pc->projector));
	json_object_set_new(o, "bytes",
			    json_pack("{s:I, s:I}", "tower",
				      (json_int_t)s->tower_bytes, "projector",
				      (json_int_t)s->projector_bytes));
	json_object_set_new(o, "placement",
			    json_string("replicated on the first pipeline stage"));
	per = json_array();
	json_array_append_new(per, cost_json(s->one_side, &s->one));
	if (s->max_side)
		json_array_append_new(per, cost_json(s->max_side, &s->largest));
	json_object_set_new(o, "per_image", per);
	return o;
}

static void print_text(const char *path, const struct model_config *c,
		       const struct param_count *pc, uint64_t embed_params,
		       const char **ops, size_t nops)
{
	char rbuf[256], rope[256], a[32], b[32];
	int64_t moe = moe_layer_count(c);
	rope_desc(c, rope, sizeof rope);
	if (c->vision.kind != VISION_NONE)
		printf("model      %s: language model %s%s (%s)\n",
		       c->vision.vl_type, c->model_type,
		       c->vision.lm_prefix[0] ? ", tensors language_model.*" : "",
		       path);
	else
		printf("model      %s (%s)\n", c->model_type, path);
	printf("layers     %lld", (long long)c->layers);
	if (moe && moe < c->layers)
		printf(" (%lld dense + %lld MoE)", (long long)(c->layers - moe),
		       (long long)moe);
	else if (moe)
		printf(" (all MoE)");
	if (c->mtp_layers)
		printf(" + %lld multi-token-prediction", (long long)c->mtp_layers);
	printf("\nhidden     %lld, vocab %lld, tied embeddings: %s\n",
	       (long long)c->hidden, (long long)c->vocab,
	       c->tie_embeddings ? "yes" : "no");
	if (c->mla)
		printf("attention  MLA, %lld heads, q_lora_rank %lld, "
		       "kv_lora_rank %lld, qk %lld nope + %lld rope, v %lld\n",
		       (long long)c->heads, (long long)c->q_lora_rank,
		       (long long)c->kv_lora_rank, (long long)c->qk_nope_dim,
		       (long long)c->qk_rope_dim, (long long)c->v_head_dim);
	else
		printf("attention  %s, %lld heads, %lld kv heads, head dim %lld%s%s\n",
		       attention_kind(c), (long long)c->heads,
		       (long long)c->kv_heads, (long long)c->head_dim,
		       c->attention_bias ? ", qkv bias" : "",
		       c->window ? ", sliding window" : "");
	if (c->experts) {
		routing(c, rbuf, sizeof rbuf);
		printf("moe        %lld routed experts of ffn %lld, %s", (long long)c->experts,
		       (long long)c->moe_ffn, rbuf);
		if (c->shared_ffn)
			printf(", shared expert ffn %lld", (long long)c->shared_ffn);
		printf("\n");
	}
	if (!c->experts || moe < c->layers)
		printf("mlp        dense ffn %lld\n", (long long)c->ffn);
	printf("norm       RMSNorm eps %g; activation %s%s\n", c->rms_eps,
	       c->hidden_act, strcmp(c->hidden_act, "silu") ? "" : " (SwiGLU)");
	printf("rope       %s\n", rope);
	printf("weights    %s%s%s\n", dtype_torch_name(c->dtype),
	       c->quant[0] ? ", quantised " : "", c->quant);
	{
		struct tensor_spec *t = NULL;
		size_t n = 0;
		struct d0_err err;
		struct storage s;
		char f[64], x[32], y[32], z[32];
		if (model_tensors(c, &t, &n, &err) == 0) {
			storage_bytes(c, t, n, &s);
			printf("storage    %s: %s on disk (scales %s); "
			       "dequantised to bf16 %s\n",
			       quant_describe(&c->qc, f, sizeof f),
			       fmt_bytes(s.disk, x), fmt_bytes(s.scales, y),
			       fmt_bytes(s.dequant_bf16, z));
		}
		free(t);
	}
	printf("\n");

	printf("%-24s %12s %14s\n", "parameters", "total", "active/token");
	for (int g = 0; g < GROUP_COUNT; g++)
		if (pc->group[g])
			printf("  %-22s %12s %14s\n", tensor_group_name(g),
			       billions(pc->group[g], a),
			       billions(pc->group_active[g], b));
	printf("  %-22s %12s %14s\n", "total", billions(pc->total, a),
	       billions(pc->active, b));
	printf("  %-22s %12s %14s\n", "excl. input embedding",
	       billions(pc->total - embed_params, a),
	       billions(pc->active - embed_params, b));
	if (pc->mtp)
		printf("  multi-token-prediction layers: %s (not in the totals)\n",
		       billions(pc->mtp, a));
	if (pc->vision || pc->projector)
		printf("  vision_tower and projector run once per image: in the "
		       "total, not in active/token\n");
	{
		struct tensor_spec *t = NULL;
		size_t n = 0;
		struct d0_err err;
		struct vision_summary vs;
		if (c->vision.kind != VISION_NONE &&
		    model_tensors(c, &t, &n, &err) == 0) {
			vision_summary(path, c, t, n, &vs);
			print_vision(c, pc, &vs);
		}
		free(t);
	}
	printf("\n%-32s %s\n", "operators", "coverage");
	for (size_t i = 0; i < nops; i++) {
		const struct op_entry *e = op_find(ops[i]);
		enum op_status st = op_status(ops[i]);
		printf("  %-30s %-9s %s%s\n", ops[i], status_name(st),
		       e && e->kind == OP_FALLBACK ? "= " : "",
		       e ? (e->kind == OP_FALLBACK ? e->uses : e->what)
			 : "not in the engine's registry");
	}
}

/*
 * The tokenizer beside config.json: what it is, and whether the model can
 * embed every id it produces (vocab_size >= its ids) and knows its eos.
 * Returns 1 when it cannot (a check failure), 0 otherwise; *tj is the
 * JSON description (null when there is no tokenizer.json).
 */
static int inspect_tokenizer(const char *config_path,
			     const struct model_config *c, json_t **tj,
			     char *line, size_t n)
{
	char *dir = strdup(config_path), *slash = strrchr(dir, '/');
	struct tokenizer *t;
	struct tokenizer_info ti;
	struct d0_err err;
	int bad = 0;
	*tj = json_null();
	if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	if (tokenizer_open(dir, &t, &err) < 0) {
		bad = strstr(err.msg, "no tokenizer.json") == NULL;
		snprintf(line, n, "%s", bad ? err.msg
			 : "none (no tokenizer.json: text prompts unavailable)");
		free(dir);
		return bad;
	}
	tokenizer_describe(t, &ti);
	bad = ti.n_ids > c->vocab || (ti.eos && ti.eos_id < 0);
	snprintf(line, n, "%s, %lld ids (%lld vocabulary + %lld added, %lld "
		 "special), %lld merges, bos %s, eos %s%s", ti.kind,
		 (long long)ti.n_ids, (long long)ti.n_vocab, (long long)ti.n_added,
		 (long long)ti.n_special, (long long)ti.n_merges,
		 ti.bos ? ti.bos : "none", ti.eos ? ti.eos : "none",
		 ti.n_ids > c->vocab ? "; ids exceed config.json's vocab_size"
				     : "");
	*tj = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:s?, s:I, s:s?, s:I, "
			"s:b}", "kind", ti.kind, "ids", (json_int_t)ti.n_ids,
			"vocab", (json_int_t)ti.n_vocab, "added",
			(json_int_t)ti.n_added, "special", (json_int_t)ti.n_special,
			"merges", (json_int_t)ti.n_merges, "bos", ti.bos, "bos_id",
			(json_int_t)ti.bos_id, "eos", ti.eos, "eos_id",
			(json_int_t)ti.eos_id, "fits_vocab_size",
			ti.n_ids <= c->vocab);
	tokenizer_free(t);
	free(dir);
	return bad;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"json", 0, 0, 'j'}, {"events", 0, 0, 'e'}, {"help", 0, 0, 'h'},
		{0, 0, 0, 0}};
	const struct step_entry *S = &step_inspect;
	struct model_config c;
	struct param_count pc;
	struct tensor_spec *t = NULL;
	struct d0_err err;
	const char *ops[32];
	char scratch[192], *path;
	size_t n = 0, nops, nmiss = 0, nfb = 0;
	uint64_t embed = 0;
	int ch, json = 0, events = 0, tok_bad;
	char tok_line[1100];
	json_t *tok_json;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (ch == 'j')
			json = 1;
		else if (ch == 'e')
			events = 1;
		else if (ch == 'h') {
			step_help(S);
			return EXIT_OK;
		} else
			return step_usage_error(S, "unknown option '%s'",
						argv[optind - 1]);
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected one MODEL_DIR or "
					"CONFIG.json");
	events_init(stdout, events && !json);
	path = path_is_dir(argv[optind]) ? path_join(argv[optind], "config.json")
					 : strdup(argv[optind]);
	events_stage("inspect", "start", 0, 0, path);
	if (model_config_load(path, &c, &err) < 0 ||
	    model_tensors(&c, &t, &n, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_check("ops.coverage", "fail", err.msg, NULL, NULL);
		events_stage("inspect", "end", 1, EXIT_USAGE, err.msg);
		free(path);
		return EXIT_USAGE;
	}
	model_count_params(&c, t, n, &pc);
	tok_bad = inspect_tokenizer(path, &c, &tok_json, tok_line,
				    sizeof tok_line);
	for (size_t i = 0; i < n; i++)
		if (t[i].role == ROLE_EMBED && !t[i].mtp)
			embed += t[i].shape[0] * t[i].shape[1];
	nops = model_operators(&c, ops, scratch, sizeof scratch);
	for (size_t i = 0; i < nops; i++) {
		enum op_status st = op_status(ops[i]);
		nmiss += st == OP_MISSING;
		nfb += st == OP_IS_FALLBACK;
	}
	if (json) {
		json_t *doc = json_object(), *params = json_object();
		json_t *opl = json_array(), *groups = json_object(), *missing = json_array();
		for (int g = 0; g < GROUP_COUNT; g++)
			if (pc.group[g])
				json_object_set_new(
					groups, tensor_group_name(g),
					json_pack("{s:I, s:I}", "total",
						  (json_int_t)pc.group[g], "active",
						  (json_int_t)pc.group_active[g]));
		json_object_set_new(params, "total", json_integer((json_int_t)pc.total));
		json_object_set_new(params, "active", json_integer((json_int_t)pc.active));
		json_object_set_new(params, "active_excl_embedding",
				    json_integer((json_int_t)(pc.active - embed)));
		json_object_set_new(params, "mtp", json_integer((json_int_t)pc.mtp));
		json_object_set_new(params, "groups", groups);
		for (size_t i = 0; i < nops; i++) {
			const struct op_entry *e = op_find(ops[i]);
			enum op_status st = op_status(ops[i]);
			json_array_append_new(
				opl, json_pack("{s:s, s:s, s:s?}", "name", ops[i],
					       "status", status_name(st), "uses",
					       e && e->kind == OP_FALLBACK ? e->uses
									   : NULL));
			if (st == OP_MISSING)
				json_array_append_new(missing, json_string(ops[i]));
		}
		json_object_set_new(doc, "config", json_string(path));
		json_object_set_new(doc, "model_type",
				    json_string(c.vision.kind != VISION_NONE
							? c.vision.vl_type
							: c.model_type));
		json_object_set_new(doc, "lm_family", json_string(c.model_type));
		json_object_set_new(doc, "structure", structure_json(&c));
		json_object_set_new(doc, "parameters", params);
		{
			struct storage st;
			storage_bytes(&c, t, n, &st);
			json_object_set_new(doc, "storage", storage_json(&c, &st));
		}
		json_object_set_new(doc, "tensors", json_integer((json_int_t)n));
		{
			struct vision_summary vs;
			vision_summary(path, &c, t, n, &vs);
			json_object_set_new(doc, "vision", vision_json(&c, &pc, &vs));
		}
		json_object_set_new(doc, "operators", opl);
		json_object_set_new(doc, "missing", missing);
		json_object_set_new(doc, "tokenizer", tok_json);
		tok_json = NULL;
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(doc);
	} else if (!events_enabled()) {
		print_text(path, &c, &pc, embed, ops, nops);
		printf("\ntokenizer  %s\n", tok_line);
	}
	json_decref(tok_json);
	if (tok_bad) {
		fprintf(stderr, "day0-engine: %s: tokenizer: %s\n", path, tok_line);
		events_log("error", "tokenizer: %s", tok_line);
	}
	{
		char detail[512];
		int o = snprintf(detail, sizeof detail, "%zu operators: %zu "
				 "native, %zu fallback, %zu missing", nops,
				 nops - nfb - nmiss, nfb, nmiss);
		for (size_t i = 0; i < nops && o < 400; i++)
			if (op_status(ops[i]) == OP_MISSING)
				o += snprintf(detail + o, sizeof detail - (size_t)o,
					      "%s%s", o && detail[o - 1] != ' '
						      ? (strchr(detail, '(') ? ", " : " (")
						      : "", ops[i]);
		if (nmiss)
			snprintf(detail + o, sizeof detail - (size_t)o, ")");
		events_check("ops.coverage", nmiss ? "fail" : "pass", detail,
			     json_integer((json_int_t)nmiss), json_integer(0));
		if (!json && !events_enabled())
			printf("\nops.coverage  %s: %s\n", nmiss ? "FAIL" : "pass",
			       detail);
		if (nmiss)
			fprintf(stderr, "day0-engine: %s: %s\n", path, detail);
	}
	events_stage("inspect", "end", 1, nmiss || tok_bad ? 1 : 0, path);
	free(t);
	free(path);
	model_config_free(&c);
	return nmiss || tok_bad ? EXIT_CHECK_FAILED : EXIT_OK;
}
