/*
 * model.c - Hugging Face config.json families and the tensor table they
 * imply.
 *
 * model_tensors() is the single description of "what a checkpoint of this
 * config contains": gen-model writes it, verify checks against it, convert
 * shards by its roles, plan sizes from it and inspect counts it, so none of
 * them can disagree.  Key names, defaults and tensor names follow
 * transformers (configuration_*.py and modeling_*.py of each family) and,
 * for deepseek_v3, DeepSeek's own modeling_deepseek.py and checkpoint
 * (which also carries the multi-token-prediction layers).
 */
#include "engine.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define DIM_MAX MODEL_DIM_MAX     /* hidden, ffn, vocab sizes */
#define COUNT_MAX MODEL_COUNT_MAX /* layers, heads, experts, head_dim */
#define TENSORS_MAX (4LL << 20) /* tensors in one model */

enum moe_kind { MOE_NONE, MOE_MIXTRAL, MOE_QWEN, MOE_DEEPSEEK };

struct family {
	const char *model_type, *architecture;
	int64_t default_kv_heads; /* 0: absent means num_attention_heads */
	int64_t default_head_dim; /* 0: absent means hidden / heads; -1 no key */
	enum moe_kind moe;
	int qk_norm;
	int qkv_bias;    /* 1: q/k/v biases always (qwen2); 2: from 'qkv_bias' */
	int o_bias;      /* attention_bias also covers o_proj */
	int attn_bias_key; /* reads 'attention_bias' */
	int shared_expert; /* qwen2_moe's gated shared expert */
	double default_eps, default_theta;
	int64_t default_experts, default_top_k;
	int64_t default_max_pos;
};

/* Defaults are each configuration_*.py's __init__ defaults. */
static const struct family families[] = {
	{"llama", "LlamaForCausalLM", 0, 0, MOE_NONE, 0, 0, 1, 1, 0, 1e-6, 10000.0, 0, 0, 2048},
	{"mistral", "MistralForCausalLM", 8, 0, MOE_NONE, 0, 0, 0, 0, 0, 1e-6, 10000.0, 0, 0, 131072},
	{"qwen2", "Qwen2ForCausalLM", 32, 0, MOE_NONE, 0, 1, 0, 0, 0, 1e-6, 10000.0, 0, 0, 32768},
	{"qwen3", "Qwen3ForCausalLM", 32, 128, MOE_NONE, 1, 0, 1, 1, 0, 1e-6, 10000.0, 0, 0, 32768},
	{"mixtral", "MixtralForCausalLM", 8, 0, MOE_MIXTRAL, 0, 0, 0, 0, 0, 1e-5, 1e6, 8, 2, 131072},
	{"qwen2_moe", "Qwen2MoeForCausalLM", 16, 0, MOE_QWEN, 0, 2, 0, 0, 1, 1e-6, 10000.0, 60, 4, 32768},
	{"qwen3_moe", "Qwen3MoeForCausalLM", 4, 128, MOE_QWEN, 1, 0, 1, 1, 0, 1e-6, 10000.0, 128, 8, 32768},
	{"deepseek_v3", "DeepseekV3ForCausalLM", 128, -1, MOE_DEEPSEEK, 0, 0, 1, 1, 0, 1e-6, 10000.0, 256, 8, 4096},
};

static const struct family *family_find(const char *model_type)
{
	if (!strcmp(model_type, "kimi_k2")) /* Kimi-K2 is DeepSeek-V3's shape */
		model_type = "deepseek_v3";
	for (size_t i = 0; i < sizeof families / sizeof *families; i++)
		if (!strcmp(families[i].model_type, model_type))
			return &families[i];
	return NULL;
}

int model_arch_known(const char *model_type)
{
	return family_find(model_type) != NULL;
}

const char *model_arch_list(void)
{
	return "llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
	       "deepseek_v3 (kimi_k2); vision-language: qwen2_vl, qwen2_5_vl, "
	       "llava (qwen3_vl, qwen3_vl_moe, kimi_vl read, towers not "
	       "implemented)";
}

int role_keeps_f32(enum tensor_role r)
{
	return r == ROLE_NORM || r == ROLE_ROUTER_BIAS;
}

const char *tensor_group_name(enum tensor_group g)
{
	static const char *const names[GROUP_COUNT] = {
		"embeddings", "attention", "dense_mlp", "routed_experts",
		"shared_experts", "routers", "norms", "lm_head",
		"vision_tower", "projector"};
	return g >= 0 && g < GROUP_COUNT ? names[g] : "?";
}

/* Read an integer key; absent -> def (or an error when required). */
static int get_int(json_t *root, const char *path, const char *key,
		   int required, int64_t def, int64_t *out, struct d0_err *err)
{
	json_t *v = json_object_get(root, key);
	if (!v || json_is_null(v)) {
		if (required)
			return d0_errf(err, "%s: missing required key '%s'",
				       path, key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return d0_errf(err, "%s: '%s' must be an integer", path, key);
	*out = json_integer_value(v);
	return 0;
}

static int get_num(json_t *root, const char *path, const char *key,
		   double def, double *out, struct d0_err *err)
{
	json_t *v = json_object_get(root, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_number(v))
		return d0_errf(err, "%s: '%s' must be a number", path, key);
	*out = json_number_value(v);
	return 0;
}

static int get_bool(json_t *root, const char *path, const char *key, int def,
		    int *out, struct d0_err *err)
{
	json_t *v = json_object_get(root, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v))
		return d0_errf(err, "%s: '%s' must be true or false", path, key);
	*out = json_is_true(v);
	return 0;
}

static int get_str(json_t *root, const char *path, const char *key,
		   const char *def, char *out, size_t cap, struct d0_err *err)
{
	json_t *v = json_object_get(root, key);
	if (!v || json_is_null(v)) {
		snprintf(out, cap, "%s", def);
		return 0;
	}
	if (!json_is_string(v))
		return d0_errf(err, "%s: '%s' must be a string", path, key);
	snprintf(out, cap, "%s", json_string_value(v));
	return 0;
}

/*
 * rope_scaling: any type is recorded (so inspect can report an unsupported
 * one as a missing operator); the known ones are checked.
 */
static int parse_rope(json_t *root, const char *path, struct model_config *c,
		      struct d0_err *err)
{
	json_t *rs = json_object_get(root, "rope_scaling"), *t, *v;
	const char *type;
	memset(&c->rope, 0, sizeof c->rope);
	c->rope.truncate = 1;
	/* transformers v5 writes rope_parameters (with rope_theta inside) */
	if (!rs || json_is_null(rs)) {
		json_t *rp = json_object_get(root, "rope_parameters");
		if (json_is_object(rp)) {
			json_t *th = json_object_get(rp, "rope_theta");
			if (th && !json_is_number(th))
				return d0_errf(err, "%s: rope_parameters.rope_theta "
					       "must be a number", path);
			if (th)
				c->rope_theta = json_number_value(th);
			rs = rp;
		}
	}
	if (!rs || json_is_null(rs))
		return 0;
	if (!json_is_object(rs))
		return d0_errf(err, "%s: 'rope_scaling' must be an object or "
			       "null", path);
	t = json_object_get(rs, "rope_type");
	if (!t)
		t = json_object_get(rs, "type");
	if (!t && json_object_get(root, "rope_parameters") == rs)
		return 0; /* v5 default rope */
	if (!json_is_string(t))
		return d0_errf(err, "%s: rope_scaling needs a string "
			       "'rope_type' (or 'type')", path);
	type = json_string_value(t);
	if (!strcmp(type, "default"))
		return 0;
	if (!*type || strlen(type) >= sizeof c->rope.type)
		return d0_errf(err, "%s: rope_scaling type '%s' is not a rope "
			       "type name", path, type);
	snprintf(c->rope.type, sizeof c->rope.type, "%s", type);
	if (get_num(rs, path, "original_max_position_embeddings",
		    (double)c->max_pos, &c->rope.original_max_pos, err) < 0 ||
	    get_num(rs, path, "factor",
		    /* v5 yarn: factor defaults to the context extension */
		    !strcmp(type, "yarn") && c->rope.original_max_pos > 0
			    ? (double)c->max_pos / c->rope.original_max_pos
			    : 1.0,
		    &c->rope.factor, err) < 0)
		return -1;
	if (!(c->rope.factor >= 1.0) &&
	    (!strcmp(type, "linear") || !strcmp(type, "yarn") ||
	     !strcmp(type, "llama3")))
		return d0_errf(err, "%s: rope_scaling.factor must be >= 1 for "
			       "'%s'", path, type);
	if (get_num(rs, path, "low_freq_factor", 1.0,
		    &c->rope.low_freq_factor, err) < 0 ||
	    get_num(rs, path, "high_freq_factor", 4.0,
		    &c->rope.high_freq_factor, err) < 0 ||
	    get_num(rs, path, "beta_fast", 32.0, &c->rope.beta_fast, err) < 0 ||
	    get_num(rs, path, "beta_slow", 1.0, &c->rope.beta_slow, err) < 0 ||
	    get_num(rs, path, "mscale", 0.0, &c->rope.mscale, err) < 0 ||
	    get_num(rs, path, "mscale_all_dim", 0.0, &c->rope.mscale_all_dim,
		    err) < 0 ||
	    get_num(rs, path, "attention_factor", 0.0,
		    &c->rope.attention_factor, err) < 0 ||
	    get_bool(rs, path, "truncate", 1, &c->rope.truncate, err) < 0)
		return -1;
	/* Python's `x or default`: a zero beta means the default */
	if (c->rope.beta_fast == 0)
		c->rope.beta_fast = 32.0;
	if (c->rope.beta_slow == 0)
		c->rope.beta_slow = 1.0;
	(void)v;
	if (!strcmp(type, "llama3") &&
	    !(c->rope.high_freq_factor > c->rope.low_freq_factor))
		return d0_errf(err, "%s: rope_scaling high_freq_factor must "
			       "exceed low_freq_factor", path);
	return 0;
}

static int dims_error(const char *path, const char *what, struct d0_err *err)
{
	return d0_errf(err, "%s: %s", path, what);
}

/* MoE keys of the qwen2_moe / qwen3_moe families. */
static int parse_qwen_moe(json_t *root, const char *path,
			  const struct family *f, struct model_config *c,
			  struct d0_err *err)
{
	json_t *mol;
	if (get_int(root, path, "num_experts", 0, f->default_experts,
		    &c->experts, err) < 0 ||
	    get_int(root, path, "num_experts_per_tok", 0, f->default_top_k,
		    &c->top_k, err) < 0 ||
	    get_int(root, path, "moe_intermediate_size", 0,
		    f->shared_expert ? 1408 : 768, &c->moe_ffn, err) < 0 ||
	    get_int(root, path, "decoder_sparse_step", 0, 1,
		    &c->decoder_sparse_step, err) < 0 ||
	    get_bool(root, path, "norm_topk_prob", 0, &c->norm_topk_prob,
		     err) < 0)
		return -1;
	if (f->shared_expert &&
	    get_int(root, path, "shared_expert_intermediate_size", 0, 5632,
		    &c->shared_ffn, err) < 0)
		return -1;
	if (c->decoder_sparse_step <= 0 || c->moe_ffn <= 0 || c->shared_ffn < 0)
		return dims_error(path, "decoder_sparse_step and "
				  "moe_intermediate_size must be positive, "
				  "shared_expert_intermediate_size not negative",
				  err);
	mol = json_object_get(root, "mlp_only_layers");
	if (mol && !json_is_null(mol)) {
		size_t i;
		json_t *x;
		if (!json_is_array(mol))
			return dims_error(path, "'mlp_only_layers' must be a "
					  "list of layer indices", err);
		c->mlp_only = calloc(json_array_size(mol) + 1,
				     sizeof *c->mlp_only);
		json_array_foreach(mol, i, x) {
			if (!json_is_integer(x))
				return d0_errf(err, "%s: mlp_only_layers[%zu] is "
					       "not an integer", path, i);
			c->mlp_only[c->n_mlp_only++] = json_integer_value(x);
		}
	}
	snprintf(c->scoring, sizeof c->scoring, "softmax");
	return 0;
}

/* DeepSeek-V3's MLA attention and sigmoid-routed MoE. */
static int parse_deepseek(json_t *root, const char *path,
			  struct model_config *c, struct d0_err *err)
{
	c->mla = 1;
	if (get_int(root, path, "q_lora_rank", 0,
		    json_is_null(json_object_get(root, "q_lora_rank")) ? 0 : 1536,
		    &c->q_lora_rank, err) < 0 ||
	    get_int(root, path, "kv_lora_rank", 0, 512, &c->kv_lora_rank,
		    err) < 0 ||
	    get_int(root, path, "qk_rope_head_dim", 0, 64, &c->qk_rope_dim,
		    err) < 0 ||
	    get_int(root, path, "qk_nope_head_dim", 0, 128, &c->qk_nope_dim,
		    err) < 0 ||
	    get_int(root, path, "v_head_dim", 0, 128, &c->v_head_dim, err) < 0 ||
	    get_int(root, path, "n_routed_experts", 0, 256, &c->experts,
		    err) < 0 ||
	    get_int(root, path, "num_experts_per_tok", 0, 8, &c->top_k, err) < 0 ||
	    get_int(root, path, "n_shared_experts", 0, 1, &c->shared_experts,
		    err) < 0 ||
	    get_int(root, path, "moe_intermediate_size", 0, 2048, &c->moe_ffn,
		    err) < 0 ||
	    get_int(root, path, "first_k_dense_replace", 0, 3, &c->first_dense,
		    err) < 0 ||
	    get_int(root, path, "moe_layer_freq", 0, 1, &c->moe_layer_freq,
		    err) < 0 ||
	    get_int(root, path, "n_group", 0, 8, &c->n_group, err) < 0 ||
	    get_int(root, path, "topk_group", 0, 4, &c->topk_group, err) < 0 ||
	    get_num(root, path, "routed_scaling_factor", 2.5, &c->routed_scaling,
		    err) < 0 ||
	    get_bool(root, path, "norm_topk_prob", 1, &c->norm_topk_prob,
		     err) < 0 ||
	    get_str(root, path, "scoring_func", "sigmoid", c->scoring,
		    sizeof c->scoring, err) < 0 ||
	    get_int(root, path, "num_nextn_predict_layers", 0, 0, &c->mtp_layers,
		    err) < 0 ||
	    get_bool(root, path, "rope_interleave", 1, &c->rope_interleave,
		     err) < 0)
		return -1;
	if (c->q_lora_rank < 0 || c->kv_lora_rank <= 0 || c->qk_rope_dim <= 0 ||
	    c->qk_nope_dim < 0 || c->v_head_dim <= 0 ||
	    c->kv_lora_rank > DIM_MAX || c->q_lora_rank > DIM_MAX ||
	    c->qk_rope_dim > COUNT_MAX || c->qk_nope_dim > COUNT_MAX ||
	    c->v_head_dim > COUNT_MAX)
		return dims_error(path, "MLA ranks and head dims (q_lora_rank, "
				  "kv_lora_rank, qk_rope_head_dim, "
				  "qk_nope_head_dim, v_head_dim) must be positive "
				  "and sane", err);
	if (c->qk_rope_dim % 2)
		return d0_errf(err, "%s: qk_rope_head_dim %lld must be even",
			       path, (long long)c->qk_rope_dim);
	if (c->moe_layer_freq <= 0 || c->first_dense < 0 ||
	    c->shared_experts < 0 || c->mtp_layers < 0 || c->mtp_layers > 16)
		return dims_error(path, "moe_layer_freq must be positive; "
				  "first_k_dense_replace, n_shared_experts and "
				  "num_nextn_predict_layers non-negative", err);
	if (c->n_group <= 0 || c->experts % c->n_group ||
	    c->topk_group <= 0 || c->topk_group > c->n_group)
		return d0_errf(err, "%s: n_routed_experts %lld must split into "
			       "n_group %lld groups and topk_group %lld must be "
			       "between 1 and n_group", path,
			       (long long)c->experts, (long long)c->n_group,
			       (long long)c->topk_group);
	/* transformers' DeepseekV3 always routes with sigmoid scores and
	 * makes every layer from first_k_dense_replace on an MoE layer,
	 * whatever scoring_func and moe_layer_freq say */
	snprintf(c->scoring, sizeof c->scoring, "sigmoid");
	c->moe_layer_freq = 1;
	c->head_dim = c->qk_rope_dim; /* transformers: head_dim = rope dim */
	c->shared_ffn = c->moe_ffn * c->shared_experts;
	return 0;
}

int model_config_from_json(json_t *root, const char *path,
			   struct model_config *c, struct d0_err *err)
{
	const struct family *f;
	json_t *mt = json_object_get(root, "model_type"), *td, *q;
	int use_sw = 0;

	memset(c, 0, sizeof *c);
	if (!json_is_object(root))
		return d0_errf(err, "%s: not a JSON object", path);
	if (!json_is_string(mt))
		return d0_errf(err, "%s: missing string key 'model_type'", path);
	if (vision_family_known(json_string_value(mt))) /* model_vision.c */
		return vision_parse(root, path, c, err);
	f = family_find(json_string_value(mt));
	if (!f)
		return d0_errf(err, "%s: model_type '%s' is not supported "
			       "(known: %s)", path, json_string_value(mt),
			       model_arch_list());
	snprintf(c->model_type, sizeof c->model_type, "%s", f->model_type);

	if (get_int(root, path, "hidden_size", 1, 0, &c->hidden, err) < 0 ||
	    get_int(root, path, "num_hidden_layers", 1, 0, &c->layers, err) < 0 ||
	    get_int(root, path, "num_attention_heads", 1, 0, &c->heads, err) < 0 ||
	    get_int(root, path, "vocab_size", 1, 0, &c->vocab, err) < 0 ||
	    get_int(root, path, "intermediate_size", 1, 0, &c->ffn, err) < 0 ||
	    get_int(root, path, "max_position_embeddings", 0,
		    f->default_max_pos, &c->max_pos, err) < 0 ||
	    get_str(root, path, "hidden_act", "silu", c->hidden_act,
		    sizeof c->hidden_act, err) < 0)
		return -1;
	if (c->hidden <= 0 || c->layers <= 0 || c->heads <= 0 ||
	    c->vocab <= 0 || c->ffn <= 0)
		return dims_error(path, "hidden_size, num_hidden_layers, "
				  "num_attention_heads, vocab_size and "
				  "intermediate_size must be positive", err);
	/* Bounds far above any published model keep every product below
	 * 2^63 and the tensor table finite. */
	if (c->hidden > DIM_MAX || c->ffn > DIM_MAX || c->vocab > DIM_MAX ||
	    c->layers > COUNT_MAX || c->heads > COUNT_MAX)
		return d0_errf(err, "%s: hidden_size, intermediate_size and "
			       "vocab_size must be at most %lld, "
			       "num_hidden_layers and num_attention_heads at "
			       "most %lld", path, (long long)DIM_MAX,
			       (long long)COUNT_MAX);
	/* absent: the class default; null: the head count (as __init__ does) */
	if (get_int(root, path, "num_key_value_heads", 0,
		    json_is_null(json_object_get(root, "num_key_value_heads")) ||
				    !f->default_kv_heads
			    ? c->heads
			    : f->default_kv_heads,
		    &c->kv_heads, err) < 0)
		return -1;
	if (c->kv_heads <= 0 || c->heads % c->kv_heads)
		return d0_errf(err, "%s: num_attention_heads %lld is not a "
			       "multiple of num_key_value_heads %lld", path,
			       (long long)c->heads, (long long)c->kv_heads);
	if (f->moe == MOE_DEEPSEEK) {
		c->head_dim = 2; /* set from qk_rope_head_dim below */
	} else if (f->default_head_dim < 0) {
		if (c->hidden % c->heads)
			return d0_errf(err, "%s: hidden_size %lld is not a "
				       "multiple of num_attention_heads %lld",
				       path, (long long)c->hidden,
				       (long long)c->heads);
		c->head_dim = c->hidden / c->heads;
	} else {
		if (get_int(root, path, "head_dim", 0, f->default_head_dim,
			    &c->head_dim, err) < 0)
			return -1;
		if (c->head_dim == 0) {
			if (c->hidden % c->heads)
				return d0_errf(err, "%s: hidden_size %lld is "
					       "not a multiple of "
					       "num_attention_heads %lld and "
					       "head_dim is absent", path,
					       (long long)c->hidden,
					       (long long)c->heads);
			c->head_dim = c->hidden / c->heads;
		}
	}
	if (c->head_dim > COUNT_MAX)
		return d0_errf(err, "%s: head_dim %lld is larger than %lld",
			       path, (long long)c->head_dim,
			       (long long)COUNT_MAX);
	if (c->head_dim <= 0 || c->head_dim % 2)
		return d0_errf(err, "%s: head_dim %lld must be positive and "
			       "even (RoPE rotates pairs)", path,
			       (long long)c->head_dim);
	if (get_bool(root, path, "tie_word_embeddings", 0, &c->tie_embeddings,
		     err) < 0 ||
	    get_num(root, path, "rms_norm_eps", f->default_eps, &c->rms_eps,
		    err) < 0 ||
	    get_num(root, path, "rope_theta", f->default_theta, &c->rope_theta,
		    err) < 0 ||
	    get_bool(root, path, "use_sliding_window", 0, &use_sw, err) < 0)
		return -1;
	{
		/* Mistral, Mixtral, Qwen3-MoE: every layer; Qwen2/Qwen3: layers
		 * from max_window_layers on; Qwen2-MoE: odd-numbered (1-based)
		 * layers below it; an explicit layer_types list wins */
		json_t *sw = json_object_get(root, "sliding_window");
		json_t *lt = json_object_get(root, "layer_types");
		int mistral_like = !strcmp(f->model_type, "mistral") ||
				   f->moe == MOE_MIXTRAL;
		int64_t span = 0;
		if (sw && !json_is_null(sw) && !json_is_integer(sw))
			return d0_errf(err, "%s: 'sliding_window' must be an "
				       "integer or null", path);
		if (json_is_integer(sw))
			span = json_integer_value(sw);
		else if (!sw && !strcmp(f->model_type, "mistral"))
			span = 4096; /* MistralConfig's default */
		else if (!json_is_integer(sw) && use_sw && !mistral_like)
			span = 4096;
		if (span > 0 && (mistral_like ? span < c->max_pos : use_sw))
			c->window = span;
		if (get_int(root, path, "max_window_layers", 0, 28,
			    &c->max_window_layers, err) < 0)
			return -1;
		if (c->window && json_is_array(lt)) {
			size_t i;
			json_t *x;
			c->layer_sliding = calloc((size_t)c->layers + 1, 1);
			json_array_foreach(lt, i, x)
				if ((int64_t)i < c->layers && json_is_string(x))
					c->layer_sliding[i] = !strcmp(
						json_string_value(x),
						"sliding_attention");
		}
	}
	if (f->qkv_bias == 1) {
		c->attention_bias = 1;
	} else if (f->qkv_bias == 2) {
		if (get_bool(root, path, "qkv_bias", 1, &c->attention_bias,
			     err) < 0)
			return -1;
	} else if (f->attn_bias_key) {
		if (get_bool(root, path, "attention_bias", 0, &c->attention_bias,
			     err) < 0)
			return -1;
	}
	if (!strcmp(f->model_type, "llama") &&
	    get_bool(root, path, "mlp_bias", 0, &c->mlp_bias, err) < 0)
		return -1;

	if (f->moe == MOE_MIXTRAL) {
		if (get_int(root, path, "num_local_experts", 0, 8, &c->experts,
			    err) < 0 ||
		    get_int(root, path, "num_experts_per_tok", 0, 2, &c->top_k,
			    err) < 0)
			return -1;
		c->moe_ffn = c->ffn;
		c->norm_topk_prob = 1;
		snprintf(c->scoring, sizeof c->scoring, "softmax");
	} else if (f->moe == MOE_QWEN) {
		if (parse_qwen_moe(root, path, f, c, err) < 0)
			return -1;
	} else if (f->moe == MOE_DEEPSEEK) {
		if (parse_deepseek(root, path, c, err) < 0)
			return -1;
	}
	if (f->moe) {
		if (c->experts > COUNT_MAX || c->moe_ffn > DIM_MAX ||
		    c->shared_ffn > DIM_MAX)
			return d0_errf(err, "%s: expert count must be at most "
				       "%lld and expert sizes at most %lld",
				       path, (long long)COUNT_MAX,
				       (long long)DIM_MAX);
		if (c->layers * (c->experts * 3 + 16) > TENSORS_MAX)
			return d0_errf(err, "%s: %lld layers x %lld experts is "
				       "more than the %lld tensors supported",
				       path, (long long)c->layers,
				       (long long)c->experts,
				       (long long)TENSORS_MAX);
		if (c->experts <= 0 || c->top_k <= 0 || c->top_k > c->experts)
			return d0_errf(err, "%s: num_experts_per_tok %lld must be "
				       "between 1 and the expert count %lld",
				       path, (long long)c->top_k,
				       (long long)c->experts);
	}
	td = json_object_get(root, "torch_dtype");
	if (!td)
		td = json_object_get(root, "dtype");
	c->dtype = json_is_string(td) ? dtype_from_user(json_string_value(td))
				      : DT_F32;
	if (c->dtype == DT_INVALID)
		c->dtype = DT_F32;
	q = json_object_get(root, "quantization_config");
	if (json_is_object(q) &&
	    json_is_string(json_object_get(q, "quant_method")))
		snprintf(c->quant, sizeof c->quant, "%s",
			 json_string_value(json_object_get(q, "quant_method")));
	if (quant_config_parse(root, path, &c->qc, err) < 0)
		return -1;
	if (parse_rope(root, path, c, err) < 0)
		return -1;
	return model_config_check(c, path, err); /* config_check.c */
}

int model_config_load(const char *path, struct model_config *cfg,
		      struct d0_err *err)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	int rc;
	memset(cfg, 0, sizeof *cfg);
	if (!root) {
		if (!path_exists(path))
			return d0_errf(err, "%s: missing", path);
		return d0_errf(err, "%s: invalid JSON: %s (line %d)", path,
			       jerr.text, jerr.line);
	}
	rc = model_config_from_json(root, path, cfg, err);
	json_decref(root);
	if (rc < 0)
		model_config_free(cfg);
	return rc;
}

void model_config_free(struct model_config *cfg)
{
	free(cfg->mlp_only);
	cfg->mlp_only = NULL;
	cfg->n_mlp_only = 0;
	free(cfg->layer_sliding);
	cfg->layer_sliding = NULL;
}

int64_t model_layer_window(const struct model_config *c, int64_t l)
{
	if (!c->window)
		return 0;
	if (c->layer_sliding)
		return l < c->layers && c->layer_sliding[l] ? c->window : 0;
	if (!strcmp(c->model_type, "qwen2") || !strcmp(c->model_type, "qwen3"))
		return l >= c->max_window_layers ? c->window : 0;
	if (!strcmp(c->model_type, "qwen2_moe"))
		return (l + 1) % 2 && l < c->max_window_layers ? c->window : 0;
	return c->window;
}

int model_layer_is_moe(const struct model_config *c, int64_t l)
{
	const struct family *f = family_find(c->model_type);
	if (!f || f->moe == MOE_NONE || c->experts <= 0)
		return 0;
	if (l >= c->layers) /* an MTP layer is a full MoE decoder layer */
		return f->moe == MOE_DEEPSEEK;
	switch (f->moe) {
	case MOE_MIXTRAL:
		return 1;
	case MOE_DEEPSEEK:
		return l >= c->first_dense && l % c->moe_layer_freq == 0;
	default:
		for (size_t i = 0; i < c->n_mlp_only; i++)
			if (c->mlp_only[i] == l)
				return 0;
		return (l + 1) % c->decoder_sparse_step == 0;
	}
}

struct table {
	struct tensor_spec *v;
	size_t n, cap;
	enum tensor_group group; /* for the next add()s */
	int mtp;
	const char *prefix; /* before every name (LLaVA's language_model.) */
};

static void add(struct table *t, enum tensor_role role, int layer, int expert,
		int ndim, uint64_t d0, uint64_t d1, const char *fmt, ...)
	__attribute__((format(printf, 8, 9)));

static void add(struct table *t, enum tensor_role role, int layer, int expert,
		int ndim, uint64_t d0, uint64_t d1, const char *fmt, ...)
{
	struct tensor_spec *s;
	va_list ap;
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 256;
		t->v = realloc(t->v, t->cap * sizeof *t->v);
		if (!t->v)
			abort();
	}
	s = &t->v[t->n++];
	memset(s, 0, sizeof *s);
	{
		size_t pl = t->prefix ? strlen(t->prefix) : 0;
		if (pl)
			memcpy(s->name, t->prefix, pl);
		va_start(ap, fmt);
		vsnprintf(s->name + pl, sizeof s->name - pl, fmt, ap);
		va_end(ap);
	}
	s->role = role;
	/* the tower's norms count with the tower */
	s->group = role == ROLE_NORM && t->group != GROUP_VISION &&
				   t->group != GROUP_PROJECTOR
			   ? GROUP_NORM
			   : t->group;
	s->layer = layer;
	s->expert = expert;
	s->mtp = t->mtp;
	s->ndim = ndim;
	s->shape[0] = d0;
	s->shape[1] = d1;
}

/* gate/up/down of a SwiGLU MLP named prefix.{gate,up,down}_proj. */
static void add_mlp(struct table *t, int l, int e, const char *prefix,
		    uint64_t H, uint64_t F, int bias)
{
	add(t, ROLE_COL, l, e, 2, F, H, "%s.gate_proj.weight", prefix);
	if (bias)
		add(t, ROLE_COL, l, e, 1, F, 0, "%s.gate_proj.bias", prefix);
	add(t, ROLE_COL, l, e, 2, F, H, "%s.up_proj.weight", prefix);
	if (bias)
		add(t, ROLE_COL, l, e, 1, F, 0, "%s.up_proj.bias", prefix);
	add(t, ROLE_ROW, l, e, 2, H, F, "%s.down_proj.weight", prefix);
	if (bias)
		add(t, ROLE_REPL, l, e, 1, H, 0, "%s.down_proj.bias", prefix);
}

static void add_attention(struct table *t, const struct family *f,
			  const struct model_config *c, int l, const char *p)
{
	uint64_t H = (uint64_t)c->hidden;
	uint64_t q = (uint64_t)(c->heads * c->head_dim);
	uint64_t kv = (uint64_t)(c->kv_heads * c->head_dim);
	int ob = c->attention_bias && f->o_bias;

	t->group = GROUP_ATTN;
	if (c->mla) { /* DeepSeek-V3 multi-head latent attention */
		uint64_t nh = (uint64_t)c->heads;
		uint64_t qk = (uint64_t)(c->qk_nope_dim + c->qk_rope_dim);
		uint64_t ql = (uint64_t)c->q_lora_rank;
		uint64_t kl = (uint64_t)c->kv_lora_rank;
		if (ql) {
			add(t, ROLE_REPL, l, -1, 2, ql, H,
			    "%s.self_attn.q_a_proj.weight", p);
			if (c->attention_bias)
				add(t, ROLE_REPL, l, -1, 1, ql, 0,
				    "%s.self_attn.q_a_proj.bias", p);
			add(t, ROLE_NORM, l, -1, 1, ql, 0,
			    "%s.self_attn.q_a_layernorm.weight", p);
			add(t, ROLE_Q, l, -1, 2, nh * qk, ql,
			    "%s.self_attn.q_b_proj.weight", p);
		} else {
			add(t, ROLE_Q, l, -1, 2, nh * qk, H,
			    "%s.self_attn.q_proj.weight", p);
		}
		add(t, ROLE_REPL, l, -1, 2, kl + (uint64_t)c->qk_rope_dim, H,
		    "%s.self_attn.kv_a_proj_with_mqa.weight", p);
		if (c->attention_bias)
			add(t, ROLE_REPL, l, -1, 1, kl + (uint64_t)c->qk_rope_dim, 0,
			    "%s.self_attn.kv_a_proj_with_mqa.bias", p);
		add(t, ROLE_NORM, l, -1, 1, kl, 0,
		    "%s.self_attn.kv_a_layernorm.weight", p);
		add(t, ROLE_Q, l, -1, 2,
		    nh * (uint64_t)(c->qk_nope_dim + c->v_head_dim), kl,
		    "%s.self_attn.kv_b_proj.weight", p);
		add(t, ROLE_O, l, -1, 2, H, nh * (uint64_t)c->v_head_dim,
		    "%s.self_attn.o_proj.weight", p);
		if (c->attention_bias)
			add(t, ROLE_REPL, l, -1, 1, H, 0, "%s.self_attn.o_proj.bias",
			    p);
		return;
	}
	add(t, ROLE_Q, l, -1, 2, q, H, "%s.self_attn.q_proj.weight", p);
	if (c->attention_bias)
		add(t, ROLE_Q, l, -1, 1, q, 0, "%s.self_attn.q_proj.bias", p);
	add(t, ROLE_KV, l, -1, 2, kv, H, "%s.self_attn.k_proj.weight", p);
	if (c->attention_bias)
		add(t, ROLE_KV, l, -1, 1, kv, 0, "%s.self_attn.k_proj.bias", p);
	add(t, ROLE_KV, l, -1, 2, kv, H, "%s.self_attn.v_proj.weight", p);
	if (c->attention_bias)
		add(t, ROLE_KV, l, -1, 1, kv, 0, "%s.self_attn.v_proj.bias", p);
	add(t, ROLE_O, l, -1, 2, H, q, "%s.self_attn.o_proj.weight", p);
	if (ob)
		add(t, ROLE_REPL, l, -1, 1, H, 0, "%s.self_attn.o_proj.bias", p);
	if (f->qk_norm) {
		add(t, ROLE_NORM, l, -1, 1, (uint64_t)c->head_dim, 0,
		    "%s.self_attn.q_norm.weight", p);
		add(t, ROLE_NORM, l, -1, 1, (uint64_t)c->head_dim, 0,
		    "%s.self_attn.k_norm.weight", p);
	}
}

static void add_ffn(struct table *t, const struct family *f,
		    const struct model_config *c, int l, const char *p)
{
	uint64_t H = (uint64_t)c->hidden, E = (uint64_t)c->experts;
	char ep[128];

	if (!model_layer_is_moe(c, l)) {
		t->group = GROUP_DENSE_MLP;
		snprintf(ep, sizeof ep, "%s.mlp", p);
		add_mlp(t, l, -1, ep, H, (uint64_t)c->ffn, c->mlp_bias);
		return;
	}
	if (f->moe == MOE_MIXTRAL) {
		uint64_t F = (uint64_t)c->moe_ffn;
		t->group = GROUP_ROUTER;
		add(t, ROLE_ROUTER, l, -1, 2, E, H,
		    "%s.block_sparse_moe.gate.weight", p);
		t->group = GROUP_EXPERTS;
		for (int e = 0; e < c->experts; e++) {
			const char *x = "block_sparse_moe.experts";
			add(t, ROLE_COL, l, e, 2, F, H, "%s.%s.%d.w1.weight", p, x, e);
			add(t, ROLE_ROW, l, e, 2, H, F, "%s.%s.%d.w2.weight", p, x, e);
			add(t, ROLE_COL, l, e, 2, F, H, "%s.%s.%d.w3.weight", p, x, e);
		}
		return;
	}
	t->group = GROUP_ROUTER;
	add(t, ROLE_ROUTER, l, -1, 2, E, H, "%s.mlp.gate.weight", p);
	if (f->moe == MOE_DEEPSEEK && !strcmp(c->scoring, "sigmoid"))
		add(t, ROLE_ROUTER_BIAS, l, -1, 1, E, 0,
		    "%s.mlp.gate.e_score_correction_bias", p);
	t->group = GROUP_EXPERTS;
	for (int e = 0; e < c->experts; e++) {
		snprintf(ep, sizeof ep, "%s.mlp.experts.%d", p, e);
		add_mlp(t, l, e, ep, H, (uint64_t)c->moe_ffn, 0);
	}
	t->group = GROUP_SHARED;
	if (f->moe == MOE_DEEPSEEK && c->shared_experts > 0) {
		snprintf(ep, sizeof ep, "%s.mlp.shared_experts", p);
		add_mlp(t, l, -1, ep, H, (uint64_t)c->shared_ffn, 0);
	}
	if (f->shared_expert && c->shared_ffn > 0) {
		snprintf(ep, sizeof ep, "%s.mlp.shared_expert", p);
		add_mlp(t, l, -1, ep, H, (uint64_t)c->shared_ffn, 0);
		add(t, ROLE_REPL, l, -1, 2, 1, H,
		    "%s.mlp.shared_expert_gate.weight", p);
	}
}

/* One decoder layer (attention, FFN, its two norms). */
static void add_layer(struct table *t, const struct family *f,
		      const struct model_config *c, int l)
{
	uint64_t H = (uint64_t)c->hidden;
	char p[96];
	snprintf(p, sizeof p, "model.layers.%d", l);
	add_attention(t, f, c, l, p);
	add_ffn(t, f, c, l, p);
	add(t, ROLE_NORM, l, -1, 1, H, 0, "%s.input_layernorm.weight", p);
	add(t, ROLE_NORM, l, -1, 1, H, 0, "%s.post_attention_layernorm.weight",
	    p);
}

/* The vision tower and projector (model_vision.c), after the LM. */
static void add_vision(struct table *t, const struct model_config *c)
{
	vision_tensors(c, &t->v, &t->n, &t->cap);
}

int model_tensors(const struct model_config *c, struct tensor_spec **out,
		  size_t *n, struct d0_err *err)
{
	const struct family *f = family_find(c->model_type);
	struct table t = {0};
	uint64_t H = (uint64_t)c->hidden, V = (uint64_t)c->vocab;

	if (!f)
		return d0_errf(err, "model_type '%s' is not supported",
			       c->model_type);
	t.prefix = c->vision.lm_prefix;
	t.group = GROUP_EMBED;
	add(&t, ROLE_EMBED, -1, -1, 2, V, H, "model.embed_tokens.weight");
	for (int l = 0; l < c->layers; l++)
		add_layer(&t, f, c, l);
	add(&t, ROLE_NORM, -1, -1, 1, H, 0, "model.norm.weight");
	if (!c->tie_embeddings) {
		t.group = GROUP_LM_HEAD;
		add(&t, ROLE_LM_HEAD, -1, -1, 2, V, H, "lm_head.weight");
	}
	/*
	 * DeepSeek's multi-token-prediction modules, as its checkpoint stores
	 * them: layer num_hidden_layers + i with its own embedding, two norms,
	 * a projection of [h; e], a full MoE decoder layer and a head.
	 */
	t.mtp = 1;
	for (int m = 0; m < c->mtp_layers; m++) {
		int l = (int)c->layers + m;
		char p[96];
		snprintf(p, sizeof p, "model.layers.%d", l);
		t.group = GROUP_EMBED;
		add(&t, ROLE_EMBED, l, -1, 2, V, H, "%s.embed_tokens.weight", p);
		add(&t, ROLE_NORM, l, -1, 1, H, 0, "%s.enorm.weight", p);
		add(&t, ROLE_NORM, l, -1, 1, H, 0, "%s.hnorm.weight", p);
		t.group = GROUP_ATTN;
		add(&t, ROLE_REPL, l, -1, 2, H, 2 * H, "%s.eh_proj.weight", p);
		add_layer(&t, f, c, l);
		add(&t, ROLE_NORM, l, -1, 1, H, 0, "%s.shared_head.norm.weight", p);
		t.group = GROUP_LM_HEAD;
		add(&t, ROLE_LM_HEAD, l, -1, 2, V, H, "%s.shared_head.head.weight",
		    p);
	}
	t.mtp = 0;
	t.prefix = NULL;
	add_vision(&t, c);
	*out = t.v;
	*n = t.n;
	return 0;
}

void model_count_params(const struct model_config *c,
			const struct tensor_spec *t, size_t n,
			struct param_count *out)
{
	/* Routed experts' parameters summed per group first: a token runs
	 * top_k of a layer's experts, and top_k / experts of the sum is
	 * exact where the same fraction of each tensor is not (Kimi-K2's
	 * 8/384 of an expert tensor is no whole number). */
	uint64_t routed[GROUP_COUNT] = {0};
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < n; i++) {
		uint64_t numel = t[i].shape[0] *
				 (t[i].ndim == 2 ? t[i].shape[1] : 1);
		if (t[i].mtp) {
			out->mtp += numel;
			continue;
		}
		out->group[t[i].group] += numel;
		out->total += numel;
		if (t[i].group == GROUP_VISION || t[i].group == GROUP_PROJECTOR) {
			/* once per image, not per token */
			out->group_active[t[i].group] += numel;
			*(t[i].group == GROUP_VISION ? &out->vision
						     : &out->projector) += numel;
			continue;
		}
		if (t[i].expert >= 0) {
			routed[t[i].group] += numel;
			continue;
		}
		out->group_active[t[i].group] += numel;
		out->active += numel;
	}
	for (int g = 0; g < GROUP_COUNT; g++) {
		uint64_t act = routed[g] / (uint64_t)(c->experts ? c->experts : 1) *
				   (uint64_t)c->top_k +
			       routed[g] % (uint64_t)(c->experts ? c->experts : 1) *
				   (uint64_t)c->top_k /
				   (uint64_t)(c->experts ? c->experts : 1);
		out->group_active[g] += act;
		out->active += act;
	}
}

int model_config_shrink(const struct model_config *real, const char *scale,
			int64_t layers, struct model_config *c,
			struct d0_err *err)
{
	int64_t H, hd, kv, ratio;
	const struct family *f = family_find(real->model_type);
	if (!f)
		return d0_errf(err, "model_type '%s' is not supported",
			       real->model_type);
	if (!strcmp(scale, "tiny"))
		H = 128;
	else if (!strcmp(scale, "small"))
		H = 512;
	else
		return d0_errf(err, "--scale: expected tiny or small, got '%s'",
			       scale);
	*c = *real;
	c->layer_sliding = NULL;
	c->mlp_only = NULL;
	c->n_mlp_only = 0;
	c->quant[0] = 0; /* gen-model --like keeps real->qc: the rehearsal
			  * model is stored the way the release is */
	c->dtype = DT_F32;
	hd = H == 128 ? 16 : 64;
	/* keep MHA as MHA and the GQA ratio (up to 16), with few heads */
	ratio = real->heads / real->kv_heads;
	if (ratio > 16)
		ratio = 16;
	kv = ratio == 1 ? 4 : (ratio >= 8 ? 1 : 2);
	c->kv_heads = kv;
	c->heads = kv * ratio;
	c->head_dim = hd;
	/* head dim derived from hidden (or no head_dim key): hidden follows */
	if (!real->mla && (real->head_dim * real->heads == real->hidden ||
			   f->default_head_dim < 0))
		H = c->heads * hd;
	c->hidden = H;
	c->ffn = 2 * H;
	c->vocab = hd == 16 ? 512 : 4096;
	c->max_pos = real->max_pos < 4096 ? real->max_pos : 4096;
	if (real->window) /* keep sliding-window attention, within context */
		c->window = c->max_pos / 2;
	if (c->rope.type[0] && c->rope.original_max_pos > c->max_pos)
		c->rope.original_max_pos = (double)c->max_pos / 2;
	if (real->experts) {
		int64_t E = hd == 16 ? 8 : 16;
		c->experts = real->experts < E ? real->experts : E;
		c->moe_ffn = f->moe == MOE_MIXTRAL ? c->ffn : H / 2;
		c->top_k = real->top_k < c->experts / 2 ? real->top_k
							: c->experts / 2;
		if (c->top_k < 1)
			c->top_k = 1;
		if (real->shared_ffn && real->moe_ffn)
			c->shared_ffn = f->moe == MOE_DEEPSEEK
				? c->moe_ffn * real->shared_experts
				: c->moe_ffn * (real->shared_ffn / real->moe_ffn
							? real->shared_ffn /
								  real->moe_ffn
							: 1);
	}
	if (c->mla) {
		c->q_lora_rank = real->q_lora_rank ? H / 4 : 0;
		c->kv_lora_rank = H / 8;
		c->qk_rope_dim = 8;
		c->qk_nope_dim = 16;
		c->v_head_dim = 16;
		c->head_dim = c->qk_rope_dim;
		c->heads = c->kv_heads = 4;
		/* grouped routing: 4 groups, the same share of groups picked */
		c->n_group = real->n_group > 1 ? 4 : 1;
		c->topk_group = real->n_group > 1
					? (real->topk_group * 4 + real->n_group - 1) /
						  real->n_group
					: 1;
		if (c->topk_group < 1)
			c->topk_group = 1;
		if (c->top_k > c->topk_group * (c->experts / c->n_group))
			c->top_k = c->topk_group * (c->experts / c->n_group);
		c->mtp_layers = real->mtp_layers ? 1 : 0;
	}
	/* enough layers for every kind: dense-first, sparse step, mlp-only */
	if (!layers) {
		layers = 2;
		if (f->moe == MOE_DEEPSEEK)
			layers = real->first_dense ? 3 : 2;
		if (f->moe == MOE_QWEN && c->decoder_sparse_step > 1)
			layers = 2 * c->decoder_sparse_step;
	}
	c->layers = layers;
	if (f->moe == MOE_DEEPSEEK) /* one dense layer first, if it had any */
		c->first_dense = real->first_dense > 0 && layers > 1 ? 1 : 0;
	if (c->decoder_sparse_step > layers)
		c->decoder_sparse_step = layers;
	for (size_t i = 0; i < real->n_mlp_only; i++)
		if (real->mlp_only[i] < layers) {
			c->mlp_only = realloc(c->mlp_only, (c->n_mlp_only + 1) *
							   sizeof *c->mlp_only);
			c->mlp_only[c->n_mlp_only++] = real->mlp_only[i];
		}
	return vision_config_shrink(real, c, err); /* model_vision.c */
}

static json_t *rope_json(const struct model_config *c)
{
	const struct rope_scaling *r = &c->rope;
	json_t *o;
	if (!r->type[0])
		return json_null();
	o = json_object();
	json_object_set_new(o, "factor", json_real(r->factor));
	if (!strcmp(r->type, "llama3")) {
		json_object_set_new(o, "high_freq_factor",
				    json_real(r->high_freq_factor));
		json_object_set_new(o, "low_freq_factor",
				    json_real(r->low_freq_factor));
	}
	if (!strcmp(r->type, "yarn")) {
		json_object_set_new(o, "beta_fast", json_real(r->beta_fast));
		json_object_set_new(o, "beta_slow", json_real(r->beta_slow));
	}
	if (!strcmp(r->type, "yarn") && r->mscale > 0) {
		json_object_set_new(o, "mscale", json_real(r->mscale));
		json_object_set_new(o, "mscale_all_dim",
				    json_real(r->mscale_all_dim));
	}
	if (strcmp(r->type, "linear"))
		json_object_set_new(o, "original_max_position_embeddings",
				    json_integer((json_int_t)r->original_max_pos));
	json_object_set_new(o, "rope_type", json_string(r->type));
	return o;
}

#define SET(key, val) json_object_set_new(o, key, val)

json_t *model_config_to_json(const struct model_config *c)
{
	const struct family *f = family_find(c->model_type);
	json_t *o = json_object();
	const char *mt = c->model_type;
	int llama = !strcmp(mt, "llama"), mistral = !strcmp(mt, "mistral");
	int qwen2 = !strcmp(mt, "qwen2"), qwen3 = !strcmp(mt, "qwen3");
	int mixtral = f && f->moe == MOE_MIXTRAL;
	int q2moe = !strcmp(mt, "qwen2_moe"), q3moe = !strcmp(mt, "qwen3_moe");
	int ds = f && f->moe == MOE_DEEPSEEK;
	int qwen = qwen2 || qwen3 || q2moe || q3moe;

	/*
	 * The keys model.save_pretrained() writes for this family with
	 * transformers 4.51 (to_diff_dict: every model-specific key, base keys
	 * only when they differ from PretrainedConfig's defaults), written
	 * with sorted keys as transformers does; deepseek_v3 also carries the
	 * keys of DeepSeek's own config (num_nextn_predict_layers,
	 * scoring_func, topk_method, moe_layer_freq).
	 */
	SET("architectures", json_pack("[s]", f ? f->architecture : "?"));
	if (llama || qwen3 || q3moe || ds)
		SET("attention_bias", json_boolean(c->attention_bias));
	SET("attention_dropout", json_real(0.0));
	if (llama || mistral || mixtral) {
		SET("bos_token_id", json_integer(1));
		SET("eos_token_id", json_integer(2));
	} else if (ds) {
		SET("bos_token_id", json_integer(0));
		SET("eos_token_id", json_integer(1));
	}
	if (q2moe || q3moe)
		SET("decoder_sparse_step", json_integer(c->decoder_sparse_step));
	if (ds)
		SET("first_k_dense_replace", json_integer(c->first_dense));
	if (mixtral && c->head_dim * c->heads == c->hidden)
		SET("head_dim", json_null());
	else if (llama || mistral || qwen3 || q3moe || mixtral || ds)
		SET("head_dim", json_integer(c->head_dim));
	SET("hidden_act", json_string(c->hidden_act[0] ? c->hidden_act : "silu"));
	SET("hidden_size", json_integer(c->hidden));
	SET("initializer_range", json_real(0.02));
	SET("intermediate_size", json_integer(c->ffn));
	if (ds)
		SET("kv_lora_rank", json_integer(c->kv_lora_rank));
	SET("max_position_embeddings", json_integer(c->max_pos));
	if (qwen) /* qwen2/qwen3 window the layers from max_window_layers on */
		SET("max_window_layers",
		    json_integer(c->window && (qwen2 || qwen3) ? 0 : c->layers));
	if (llama)
		SET("mlp_bias", json_boolean(c->mlp_bias));
	if (q2moe || q3moe) {
		json_t *mol = json_array();
		for (size_t i = 0; i < c->n_mlp_only; i++)
			json_array_append_new(mol, json_integer(c->mlp_only[i]));
		SET("mlp_only_layers", mol);
	}
	if (q2moe || q3moe || ds)
		SET("moe_intermediate_size", json_integer(c->moe_ffn));
	if (ds) {
		SET("moe_layer_freq", json_integer(c->moe_layer_freq));
		SET("n_group", json_integer(c->n_group));
		SET("n_routed_experts", json_integer(c->experts));
		SET("n_shared_experts", json_integer(c->shared_experts));
	}
	SET("model_type", json_string(mt));
	if (q2moe || q3moe || ds)
		SET("norm_topk_prob", json_boolean(c->norm_topk_prob));
	SET("num_attention_heads", json_integer(c->heads));
	if (q2moe || q3moe)
		SET("num_experts", json_integer(c->experts));
	if (mixtral || q2moe || q3moe || ds)
		SET("num_experts_per_tok", json_integer(c->top_k));
	SET("num_hidden_layers", json_integer(c->layers));
	SET("num_key_value_heads", json_integer(c->kv_heads));
	if (mixtral)
		SET("num_local_experts", json_integer(c->experts));
	if (ds)
		SET("num_nextn_predict_layers", json_integer(c->mtp_layers));
	if (mixtral || q2moe || q3moe) {
		SET("output_router_logits", json_false());
		SET("router_aux_loss_coef", json_real(0.001));
	}
	if (llama)
		SET("pretraining_tp", json_integer(1));
	if (ds) {
		SET("q_lora_rank", c->q_lora_rank ? json_integer(c->q_lora_rank)
						  : json_null());
		SET("qk_nope_head_dim", json_integer(c->qk_nope_dim));
		SET("qk_rope_head_dim", json_integer(c->qk_rope_dim));
	}
	if (q2moe)
		SET("qkv_bias", json_boolean(c->attention_bias));
	SET("rms_norm_eps", json_real(c->rms_eps));
	if (ds)
		SET("rope_interleave", json_boolean(c->rope_interleave));
	/* Mixtral/Mistral configs have no rope_scaling argument: only if set */
	if (!(mixtral || mistral) || c->rope.type[0])
		SET("rope_scaling", rope_json(c));
	SET("rope_theta", json_real(c->rope_theta));
	if (ds) {
		SET("routed_scaling_factor", json_real(c->routed_scaling));
		SET("scoring_func", json_string(c->scoring));
	}
	if (mixtral)
		SET("router_jitter_noise", json_real(0.0));
	if (q2moe)
		SET("shared_expert_intermediate_size", json_integer(c->shared_ffn));
	if (mixtral || mistral || qwen)
		SET("sliding_window",
		    c->window ? json_integer(c->window) : json_null());
	SET("tie_word_embeddings", json_boolean(c->tie_embeddings));
	if (ds) {
		SET("topk_group", json_integer(c->topk_group));
		SET("topk_method", json_string("noaux_tc"));
	}
	if (c->qc.kind != QUANT_NONE)
		SET("quantization_config", quant_config_to_json(&c->qc));
	SET("torch_dtype", json_string(dtype_torch_name(c->dtype)));
	SET("transformers_version", json_string("4.51.3"));
	SET("use_cache", json_true());
	if (qwen)
		SET("use_sliding_window", json_boolean(c->window > 0));
	if (ds)
		SET("v_head_dim", json_integer(c->v_head_dim));
	SET("vocab_size", json_integer(c->vocab));
	if (c->vision.kind != VISION_NONE) /* the release's own form */
		return vision_config_json(c, o);
	return o;
}
