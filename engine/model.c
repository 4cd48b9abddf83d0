/*
 * model.c - Hugging Face config.json families and the tensor table they
 * imply.
 *
 * model_tensors() is the single description of "what a checkpoint of this
 * config contains": gen-model writes it, verify checks against it and
 * convert shards by its roles, so the three cannot disagree.  Key names,
 * defaults and tensor names follow transformers (configuration_*.py and
 * modeling_*.py of each family).
 */
#include "engine.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define DIM_MAX (1LL << 24)     /* hidden, ffn, vocab sizes */
#define COUNT_MAX (1LL << 16)   /* layers, heads, experts, head_dim */
#define TENSORS_MAX (4LL << 20) /* tensors in one model */

struct family {
	const char *model_type, *architecture;
	int64_t default_kv_heads; /* 0: absent means num_attention_heads */
	int64_t default_head_dim; /* 0: absent means hidden / heads; -1 no key */
	int moe;                  /* 0 dense, 1 mixtral, 2 qwen2_moe */
	int qk_norm;
	int qkv_bias; /* q/k/v biases from 'qkv_bias' (default true) */
	int o_bias;   /* attention_bias also covers o_proj */
	double default_eps, default_theta;
};

/* Defaults are each configuration_*.py's __init__ defaults. */
static const struct family families[] = {
	{"llama", "LlamaForCausalLM", 0, 0, 0, 0, 0, 1, 1e-6, 10000.0},
	{"qwen3", "Qwen3ForCausalLM", 32, 128, 0, 1, 0, 1, 1e-6, 10000.0},
	{"mixtral", "MixtralForCausalLM", 8, 0, 1, 0, 0, 0, 1e-5, 1e6},
	{"qwen2_moe", "Qwen2MoeForCausalLM", 16, -1, 2, 0, 1, 0, 1e-6, 10000.0},
};

static const struct family *family_find(const char *model_type)
{
	for (size_t i = 0; i < sizeof families / sizeof *families; i++)
		if (!strcmp(families[i].model_type, model_type))
			return &families[i];
	return NULL;
}

int model_arch_known(const char *model_type)
{
	return family_find(model_type) != NULL;
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

static int parse_rope(json_t *root, const char *path, struct model_config *c,
		      struct d0_err *err)
{
	json_t *rs = json_object_get(root, "rope_scaling"), *t;
	const char *type;
	memset(&c->rope, 0, sizeof c->rope);
	if (!rs || json_is_null(rs))
		return 0;
	if (!json_is_object(rs))
		return d0_errf(err, "%s: 'rope_scaling' must be an object or "
			       "null", path);
	t = json_object_get(rs, "rope_type");
	if (!t)
		t = json_object_get(rs, "type");
	if (!json_is_string(t))
		return d0_errf(err, "%s: rope_scaling needs a string "
			       "'rope_type' (or 'type')", path);
	type = json_string_value(t);
	if (strcmp(type, "default") && strcmp(type, "linear") &&
	    strcmp(type, "dynamic") && strcmp(type, "yarn") &&
	    strcmp(type, "llama3"))
		return d0_errf(err, "%s: rope_scaling type '%s' unknown "
			       "(expected linear, dynamic, yarn or llama3)",
			       path, type);
	if (!strcmp(type, "default"))
		return 0;
	snprintf(c->rope.type, sizeof c->rope.type, "%s", type);
	if (get_num(rs, path, "factor", 0, &c->rope.factor, err) < 0)
		return -1;
	if (!(c->rope.factor >= 1.0) && strcmp(type, "dynamic"))
		return d0_errf(err, "%s: rope_scaling.factor must be >= 1 for "
			       "'%s'", path, type);
	if (get_num(rs, path, "original_max_position_embeddings",
		    (double)c->max_pos, &c->rope.original_max_pos, err) < 0 ||
	    get_num(rs, path, "low_freq_factor", 1.0,
		    &c->rope.low_freq_factor, err) < 0 ||
	    get_num(rs, path, "high_freq_factor", 4.0,
		    &c->rope.high_freq_factor, err) < 0 ||
	    get_num(rs, path, "beta_fast", 32.0, &c->rope.beta_fast, err) < 0 ||
	    get_num(rs, path, "beta_slow", 1.0, &c->rope.beta_slow, err) < 0)
		return -1;
	if (!strcmp(type, "llama3") &&
	    !(c->rope.high_freq_factor > c->rope.low_freq_factor))
		return d0_errf(err, "%s: rope_scaling high_freq_factor must "
			       "exceed low_freq_factor", path);
	return 0;
}

int model_config_from_json(json_t *root, const char *path,
			   struct model_config *c, struct d0_err *err)
{
	const struct family *f;
	json_t *mt = json_object_get(root, "model_type"), *td, *mol;

	memset(c, 0, sizeof *c);
	if (!json_is_object(root))
		return d0_errf(err, "%s: not a JSON object", path);
	if (!json_is_string(mt))
		return d0_errf(err, "%s: missing string key 'model_type'", path);
	f = family_find(json_string_value(mt));
	if (!f)
		return d0_errf(err, "%s: model_type '%s' is not supported "
			       "(known: llama, qwen3, mixtral, qwen2_moe)",
			       path, json_string_value(mt));
	snprintf(c->model_type, sizeof c->model_type, "%s", f->model_type);

	if (get_int(root, path, "hidden_size", 1, 0, &c->hidden, err) < 0 ||
	    get_int(root, path, "num_hidden_layers", 1, 0, &c->layers, err) < 0 ||
	    get_int(root, path, "num_attention_heads", 1, 0, &c->heads, err) < 0 ||
	    get_int(root, path, "vocab_size", 1, 0, &c->vocab, err) < 0 ||
	    get_int(root, path, "intermediate_size", 1, 0, &c->ffn, err) < 0 ||
	    get_int(root, path, "max_position_embeddings", 0, 4096,
		    &c->max_pos, err) < 0)
		return -1;
	if (c->hidden <= 0 || c->layers <= 0 || c->heads <= 0 ||
	    c->vocab <= 0 || c->ffn <= 0)
		return d0_errf(err, "%s: hidden_size, num_hidden_layers, "
			       "num_attention_heads, vocab_size and "
			       "intermediate_size must be positive", path);
	/* Bounds far above any published model keep every product below
	 * 2^63 and the tensor table finite. */
	if (c->hidden > DIM_MAX || c->ffn > DIM_MAX || c->vocab > DIM_MAX ||
	    c->layers > COUNT_MAX || c->heads > COUNT_MAX)
		return d0_errf(err, "%s: hidden_size, intermediate_size and "
			       "vocab_size must be at most %lld, "
			       "num_hidden_layers and num_attention_heads at "
			       "most %lld", path, (long long)DIM_MAX,
			       (long long)COUNT_MAX);
	if (get_int(root, path, "num_key_value_heads", 0,
		    f->default_kv_heads ? f->default_kv_heads : c->heads,
		    &c->kv_heads, err) < 0)
		return -1;
	if (c->kv_heads <= 0 || c->heads % c->kv_heads)
		return d0_errf(err, "%s: num_attention_heads %lld is not a "
			       "multiple of num_key_value_heads %lld", path,
			       (long long)c->heads, (long long)c->kv_heads);
	if (f->default_head_dim < 0) {
		if (c->hidden % c->heads)
			return d0_errf(err, "%s: hidden_size %lld is not a "
				       "multiple of num_attention_heads %lld",
				       path, (long long)c->hidden,
				       (long long)c->heads);
		c->head_dim = c->hidden / c->heads;
	} else {
		int64_t def = f->default_head_dim ? f->default_head_dim : 0;
		if (get_int(root, path, "head_dim", 0, def, &c->head_dim, err) < 0)
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
		    err) < 0)
		return -1;
	if (f->qkv_bias) {
		if (get_bool(root, path, "qkv_bias", 1, &c->attention_bias,
			     err) < 0)
			return -1;
	} else if (!strcmp(f->model_type, "mixtral")) {
		c->attention_bias = 0;
	} else if (get_bool(root, path, "attention_bias", 0, &c->attention_bias,
			  err) < 0)
		return -1;
	if (!strcmp(f->model_type, "llama") &&
	    get_bool(root, path, "mlp_bias", 0, &c->mlp_bias, err) < 0)
		return -1;

	if (f->moe == 1) {
		if (get_int(root, path, "num_local_experts", 0, 8, &c->experts,
			    err) < 0 ||
		    get_int(root, path, "num_experts_per_tok", 0, 2, &c->top_k,
			    err) < 0)
			return -1;
		c->moe_ffn = c->ffn;
		c->norm_topk_prob = 1;
	} else if (f->moe == 2) {
		if (get_int(root, path, "num_experts", 0, 60, &c->experts,
			    err) < 0 ||
		    get_int(root, path, "num_experts_per_tok", 0, 4, &c->top_k,
			    err) < 0 ||
		    get_int(root, path, "moe_intermediate_size", 0, 1408,
			    &c->moe_ffn, err) < 0 ||
		    get_int(root, path, "shared_expert_intermediate_size", 0,
			    5632, &c->shared_ffn, err) < 0 ||
		    get_int(root, path, "decoder_sparse_step", 0, 1,
			    &c->decoder_sparse_step, err) < 0 ||
		    get_bool(root, path, "norm_topk_prob", 0, &c->norm_topk_prob,
			     err) < 0)
			return -1;
		if (c->decoder_sparse_step <= 0 || c->moe_ffn <= 0 ||
		    c->shared_ffn < 0)
			return d0_errf(err, "%s: decoder_sparse_step and "
				       "moe_intermediate_size must be positive",
				       path);
		mol = json_object_get(root, "mlp_only_layers");
		if (mol && !json_is_null(mol)) {
			size_t i;
			json_t *x;
			if (!json_is_array(mol))
				return d0_errf(err, "%s: 'mlp_only_layers' must "
					       "be a list of layer indices",
					       path);
			c->mlp_only = calloc(json_array_size(mol) + 1,
					     sizeof *c->mlp_only);
			json_array_foreach(mol, i, x) {
				if (!json_is_integer(x))
					return d0_errf(err, "%s: "
						       "mlp_only_layers[%zu] is "
						       "not an integer", path, i);
				c->mlp_only[c->n_mlp_only++] =
					json_integer_value(x);
			}
		}
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
	return parse_rope(root, path, c, err);
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
}

int model_layer_is_moe(const struct model_config *c, int64_t l)
{
	const struct family *f = family_find(c->model_type);
	if (!f || !f->moe)
		return 0;
	if (f->moe == 1)
		return 1;
	for (size_t i = 0; i < c->n_mlp_only; i++)
		if (c->mlp_only[i] == l)
			return 0;
	return c->experts > 0 && (l + 1) % c->decoder_sparse_step == 0;
}

struct table {
	struct tensor_spec *v;
	size_t n, cap;
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
	va_start(ap, fmt);
	vsnprintf(s->name, sizeof s->name, fmt, ap);
	va_end(ap);
	s->role = role;
	s->layer = layer;
	s->expert = expert;
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

int model_tensors(const struct model_config *c, struct tensor_spec **out,
		  size_t *n, struct d0_err *err)
{
	const struct family *f = family_find(c->model_type);
	struct table t = {0};
	uint64_t H = (uint64_t)c->hidden, V = (uint64_t)c->vocab;
	uint64_t q = (uint64_t)(c->heads * c->head_dim);
	uint64_t kv = (uint64_t)(c->kv_heads * c->head_dim);
	char p[96];

	if (!f)
		return d0_errf(err, "model_type '%s' is not supported",
			       c->model_type);
	add(&t, ROLE_EMBED, -1, -1, 2, V, H, "model.embed_tokens.weight");
	for (int l = 0; l < c->layers; l++) {
		int ob = c->attention_bias && f->o_bias;
		snprintf(p, sizeof p, "model.layers.%d", l);
		add(&t, ROLE_Q, l, -1, 2, q, H, "%s.self_attn.q_proj.weight", p);
		if (c->attention_bias)
			add(&t, ROLE_Q, l, -1, 1, q, 0,
			    "%s.self_attn.q_proj.bias", p);
		add(&t, ROLE_KV, l, -1, 2, kv, H, "%s.self_attn.k_proj.weight", p);
		if (c->attention_bias)
			add(&t, ROLE_KV, l, -1, 1, kv, 0,
			    "%s.self_attn.k_proj.bias", p);
		add(&t, ROLE_KV, l, -1, 2, kv, H, "%s.self_attn.v_proj.weight", p);
		if (c->attention_bias)
			add(&t, ROLE_KV, l, -1, 1, kv, 0,
			    "%s.self_attn.v_proj.bias", p);
		add(&t, ROLE_O, l, -1, 2, H, q, "%s.self_attn.o_proj.weight", p);
		if (ob)
			add(&t, ROLE_REPL, l, -1, 1, H, 0,
			    "%s.self_attn.o_proj.bias", p);
		if (f->qk_norm) {
			add(&t, ROLE_NORM, l, -1, 1, (uint64_t)c->head_dim, 0,
			    "%s.self_attn.q_norm.weight", p);
			add(&t, ROLE_NORM, l, -1, 1, (uint64_t)c->head_dim, 0,
			    "%s.self_attn.k_norm.weight", p);
		}
		if (f->moe == 1) {
			uint64_t F = (uint64_t)c->moe_ffn;
			add(&t, ROLE_ROUTER, l, -1, 2, (uint64_t)c->experts, H,
			    "%s.block_sparse_moe.gate.weight", p);
			for (int e = 0; e < c->experts; e++) {
				const char *x = "block_sparse_moe.experts";
				add(&t, ROLE_COL, l, e, 2, F, H,
				    "%s.%s.%d.w1.weight", p, x, e);
				add(&t, ROLE_ROW, l, e, 2, H, F,
				    "%s.%s.%d.w2.weight", p, x, e);
				add(&t, ROLE_COL, l, e, 2, F, H,
				    "%s.%s.%d.w3.weight", p, x, e);
			}
		} else if (f->moe == 2 && model_layer_is_moe(c, l)) {
			char ep[128];
			add(&t, ROLE_ROUTER, l, -1, 2, (uint64_t)c->experts, H,
			    "%s.mlp.gate.weight", p);
			for (int e = 0; e < c->experts; e++) {
				snprintf(ep, sizeof ep, "%s.mlp.experts.%d", p, e);
				add_mlp(&t, l, e, ep, H, (uint64_t)c->moe_ffn, 0);
			}
			if (c->shared_ffn > 0) {
				snprintf(ep, sizeof ep, "%s.mlp.shared_expert", p);
				add_mlp(&t, l, -1, ep, H,
					(uint64_t)c->shared_ffn, 0);
				add(&t, ROLE_REPL, l, -1, 2, 1, H,
				    "%s.mlp.shared_expert_gate.weight", p);
			}
		} else {
			char mp[128];
			snprintf(mp, sizeof mp, "%s.mlp", p);
			add_mlp(&t, l, -1, mp, H, (uint64_t)c->ffn, c->mlp_bias);
		}
		add(&t, ROLE_NORM, l, -1, 1, H, 0, "%s.input_layernorm.weight", p);
		add(&t, ROLE_NORM, l, -1, 1, H, 0,
		    "%s.post_attention_layernorm.weight", p);
	}
	add(&t, ROLE_NORM, -1, -1, 1, H, 0, "model.norm.weight");
	if (!c->tie_embeddings)
		add(&t, ROLE_LM_HEAD, -1, -1, 2, V, H, "lm_head.weight");
	*out = t.v;
	*n = t.n;
	return 0;
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
	if (strcmp(r->type, "linear"))
		json_object_set_new(o, "original_max_position_embeddings",
				    json_integer((json_int_t)r->original_max_pos));
	json_object_set_new(o, "rope_type", json_string(r->type));
	return o;
}

json_t *model_config_to_json(const struct model_config *c)
{
	const struct family *f = family_find(c->model_type);
	json_t *o = json_object();
	int llama = f && !strcmp(f->model_type, "llama");
	int mixtral = f && f->moe == 1, qmoe = f && f->moe == 2;
	int qwen3 = f && f->qk_norm;

	/*
	 * The keys model.save_pretrained() writes for this family with
	 * transformers 4.51 (to_diff_dict: every model-specific key, base keys
	 * only when they differ from PretrainedConfig's defaults).  Written
	 * with sorted keys, as transformers does.
	 */
	json_object_set_new(o, "architectures",
			    json_pack("[s]", f ? f->architecture : "?"));
	if (!mixtral && !qmoe)
		json_object_set_new(o, "attention_bias",
				    json_boolean(c->attention_bias));
	json_object_set_new(o, "attention_dropout", json_real(0.0));
	if (llama || mixtral) {
		json_object_set_new(o, "bos_token_id", json_integer(1));
		json_object_set_new(o, "eos_token_id", json_integer(2));
	}
	if (qmoe)
		json_object_set_new(o, "decoder_sparse_step",
				    json_integer(c->decoder_sparse_step));
	if (mixtral && c->head_dim * c->heads == c->hidden)
		json_object_set_new(o, "head_dim", json_null());
	else if (!qmoe)
		json_object_set_new(o, "head_dim", json_integer(c->head_dim));
	json_object_set_new(o, "hidden_act", json_string("silu"));
	json_object_set_new(o, "hidden_size", json_integer(c->hidden));
	json_object_set_new(o, "initializer_range", json_real(0.02));
	json_object_set_new(o, "intermediate_size", json_integer(c->ffn));
	json_object_set_new(o, "max_position_embeddings",
			    json_integer(c->max_pos));
	if (qwen3 || qmoe)
		json_object_set_new(o, "max_window_layers",
				    json_integer(c->layers));
	if (llama)
		json_object_set_new(o, "mlp_bias", json_boolean(c->mlp_bias));
	if (qmoe) {
		json_t *mol = json_array();
		for (size_t i = 0; i < c->n_mlp_only; i++)
			json_array_append_new(mol, json_integer(c->mlp_only[i]));
		json_object_set_new(o, "mlp_only_layers", mol);
		json_object_set_new(o, "moe_intermediate_size",
				    json_integer(c->moe_ffn));
		json_object_set_new(o, "norm_topk_prob",
				    json_boolean(c->norm_topk_prob));
		json_object_set_new(o, "num_experts", json_integer(c->experts));
		json_object_set_new(o, "qkv_bias", json_boolean(c->attention_bias));
		json_object_set_new(o, "shared_expert_intermediate_size",
				    json_integer(c->shared_ffn));
	}
	json_object_set_new(o, "model_type", json_string(c->model_type));
	json_object_set_new(o, "num_attention_heads", json_integer(c->heads));
	if (mixtral || qmoe)
		json_object_set_new(o, "num_experts_per_tok",
				    json_integer(c->top_k));
	json_object_set_new(o, "num_hidden_layers", json_integer(c->layers));
	json_object_set_new(o, "num_key_value_heads", json_integer(c->kv_heads));
	if (mixtral) {
		json_object_set_new(o, "num_local_experts",
				    json_integer(c->experts));
		json_object_set_new(o, "router_jitter_noise", json_real(0.0));
	}
	if (mixtral || qmoe) {
		json_object_set_new(o, "output_router_logits", json_false());
		json_object_set_new(o, "router_aux_loss_coef", json_real(0.001));
	}
	if (llama)
		json_object_set_new(o, "pretraining_tp", json_integer(1));
	json_object_set_new(o, "rms_norm_eps", json_real(c->rms_eps));
	/* MixtralConfig has no rope_scaling argument: written only if set. */
	if (!mixtral || c->rope.type[0])
		json_object_set_new(o, "rope_scaling", rope_json(c));
	json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
	if (mixtral || qwen3 || qmoe)
		json_object_set_new(o, "sliding_window", json_null());
	json_object_set_new(o, "tie_word_embeddings",
			    json_boolean(c->tie_embeddings));
	json_object_set_new(o, "torch_dtype",
			    json_string(dtype_torch_name(c->dtype)));
	json_object_set_new(o, "transformers_version", json_string("4.51.3"));
	json_object_set_new(o, "use_cache", json_true());
	if (qwen3 || qmoe)
		json_object_set_new(o, "use_sliding_window", json_false());
	json_object_set_new(o, "vocab_size", json_integer(c->vocab));
	return o;
}
