/*
 * model_vision.c - the image channel's half of model.c (issue #30): the
 * vision-language families' config.json, their vision tower and projector
 * in the one tensor table, and what an image costs.
 *
 * A vision-language release is a text model plus a tower.  Its config.json
 * nests the tower's keys in vision_config and keeps the language model's
 * either in text_config (LLaVA, Qwen3-VL) or at the top level (Qwen2-VL and
 * Qwen2.5-VL as published); vision_parse builds the LM's own config.json
 * from whichever it is (text_config, the top-level keys it lacks, the LM
 * class's defaults for what both leave out) and reads it with the text
 * families' parser, so model_type stays a text family (qwen2, llama, ...)
 * that every text step (plan, run, validate, convert) already handles; the
 * release's own type is vision.vl_type.  Key names, defaults and tensor
 * names follow transformers' configuration_/modeling_qwen2_vl.py,
 * qwen2_5_vl.py, llava.py and clip.py, Kimi-VL's own configuration_ and
 * modeling_kimi_vl.py (MoonViT), and the published checkpoints (visual.*,
 * vision_tower.vision_model.*, vision_tower.encoder.*,
 * multi_modal_projector.*, language_model.* for LLaVA's and Kimi-VL's LM).
 *
 * A release whose tower the engine has no table for (Qwen3-VL) is
 * still read: its LM maps onto a text family, vision.kind is
 * VISION_UNSUPPORTED and vision.missing says what is lacking, which inspect
 * reports as a missing operator; the tower is never silently dropped.
 */
#include "engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct vl_family {
	const char *vl_type, *architecture;
	enum vision_kind kind;
	const char *lm_type;   /* the text family; NULL: text_config's own */
	const char *lm_prefix; /* before the LM's tensor names */
	const char *missing;   /* VISION_UNSUPPORTED: what the engine lacks */
};

static const struct vl_family vl_families[] = {
	{"qwen2_vl", "Qwen2VLForConditionalGeneration", VISION_QWEN2_VL,
	 "qwen2", "", NULL},
	{"qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", VISION_QWEN2_5_VL,
	 "qwen2", "", NULL},
	{"llava", "LlavaForConditionalGeneration", VISION_CLIP, NULL,
	 "language_model.", NULL},
	{"qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration",
	 VISION_UNSUPPORTED, "qwen3_moe", "",
	 "the Qwen3-VL tower (patch 16 with bias, learned position "
	 "embedding, deepstack mergers, gelu_pytorch_tanh), interleaved "
	 "M-RoPE and the checkpoint's model.language_model.* / fused expert "
	 "layout"},
	{"qwen3_vl", "Qwen3VLForConditionalGeneration", VISION_UNSUPPORTED,
	 "qwen3", "",
	 "the Qwen3-VL tower (patch 16 with bias, learned position "
	 "embedding, deepstack mergers, gelu_pytorch_tanh), interleaved "
	 "M-RoPE and the checkpoint's model.language_model.* layout"},
	{"kimi_vl", "KimiVLForConditionalGeneration", VISION_KIMI,
	 "deepseek_v3", "language_model.", NULL},
};

static const struct vl_family *vl_find(const char *vl_type)
{
	for (size_t i = 0; i < sizeof vl_families / sizeof *vl_families; i++)
		if (!strcmp(vl_families[i].vl_type, vl_type))
			return &vl_families[i];
	return NULL;
}

int vision_family_known(const char *model_type)
{
	return vl_find(model_type) != NULL;
}

const char *vision_kind_name(enum vision_kind k)
{
	switch (k) {
	case VISION_QWEN2_VL:
		return "Qwen2-VL tower (LayerNorm, quick_gelu MLP, full "
		       "attention, PatchMerger)";
	case VISION_QWEN2_5_VL:
		return "Qwen2.5-VL tower (RMSNorm, SwiGLU, window attention, "
		       "PatchMerger)";
	case VISION_CLIP:
		return "CLIP ViT (class token, learned positions, pre-LN, "
		       "quick_gelu) + multi_modal_projector";
	case VISION_KIMI:
		return "MoonViT (native resolution, learned positions "
		       "interpolated bicubic, 2D RoPE, pre-LN, gelu_tanh) + "
		       "2x2 merge + pre_norm projector";
	case VISION_UNSUPPORTED:
		return "a tower the engine has no table for";
	default:
		return "none";
	}
}

const char *model_lm_name(const struct model_config *c, const char *name,
			  char *buf, size_t n)
{
	snprintf(buf, n, "%s%s", c->vision.lm_prefix, name);
	return buf;
}

/* ------------------------------------------------------------ reading */

static int vget_int(json_t *o, const char *path, const char *key,
		    int required, int64_t def, int64_t *out, struct d0_err *err)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		if (required)
			return d0_errf(err, "%s: vision_config needs '%s'", path,
				       key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return d0_errf(err, "%s: vision_config.%s must be an integer",
			       path, key);
	*out = json_integer_value(v);
	return 0;
}

static int top_int(json_t *o, const char *path, const char *key, int64_t def,
		   int64_t *out, struct d0_err *err)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v))
		return d0_errf(err, "%s: '%s' must be an integer", path, key);
	*out = json_integer_value(v);
	return 0;
}

static int get_string(json_t *o, const char *path, const char *where,
		      const char *key, const char *def, char *out, size_t cap,
		      struct d0_err *err)
{
	json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		snprintf(out, cap, "%s", def);
		return 0;
	}
	if (!json_is_string(v) || strlen(json_string_value(v)) >= cap)
		return d0_errf(err, "%s: %s%s must be a string (at most %zu "
			       "bytes)", path, where, key, cap - 1);
	snprintf(out, cap, "%s", json_string_value(v));
	return 0;
}

/*
 * The LM class's __init__ defaults for the keys a LLaVA text_config may
 * leave out (llava-1.5-7b-hf's names only a few: the rest is LlamaConfig()).
 */
static void lm_class_defaults(json_t *lm, const char *lm_type)
{
	static const struct {
		const char *type;
		int64_t vocab, hidden, ffn, layers, heads;
	} d[] = {
		{"llama", 32000, 4096, 11008, 32, 32},   /* LlamaConfig */
		{"mistral", 32000, 4096, 14336, 32, 32}, /* MistralConfig */
		{"qwen2", 151936, 4096, 22016, 32, 32},  /* Qwen2Config */
	};
	for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
		if (strcmp(d[i].type, lm_type))
			continue;
#define DEF(key, val)                                                         \
	if (!json_object_get(lm, key))                                        \
		json_object_set_new(lm, key, json_integer(val))
		DEF("vocab_size", d[i].vocab);
		DEF("hidden_size", d[i].hidden);
		DEF("intermediate_size", d[i].ffn);
		DEF("num_hidden_layers", d[i].layers);
		DEF("num_attention_heads", d[i].heads);
#undef DEF
	}
}

/* M-RoPE: rope_scaling's mrope_section (and mrope_interleaved); a plain
 * "mrope"/"default" type is then no scaling at all (transformers turns
 * "mrope" into "default"), so it is taken out of the LM's copy. */
static int take_mrope(json_t *lm, const char *path, struct vision_config *v,
		      struct d0_err *err)
{
	json_t *rs = json_object_get(lm, "rope_scaling"), *sec, *t;
	size_t i;
	json_t *x;
	int64_t sum = 0;
	if (!json_is_object(rs))
		rs = json_object_get(lm, "rope_parameters");
	if (!json_is_object(rs))
		return 0;
	sec = json_object_get(rs, "mrope_section");
	if (!sec)
		return 0;
	if (!json_is_array(sec) || json_array_size(sec) != 3)
		return d0_errf(err, "%s: rope_scaling.mrope_section must be a "
			       "list of 3 integers (t, h, w)", path);
	json_array_foreach(sec, i, x) {
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > MODEL_COUNT_MAX)
			return d0_errf(err, "%s: rope_scaling.mrope_section[%zu] "
				       "must be a non-negative integer", path, i);
		v->mrope_section[i] = json_integer_value(x);
		sum += v->mrope_section[i];
	}
	if (sum <= 0)
		return d0_errf(err, "%s: rope_scaling.mrope_section sums to 0",
			       path);
	v->mrope = 1;
	v->mrope_interleaved = json_is_true(json_object_get(rs,
							    "mrope_interleaved"));
	t = json_object_get(rs, "rope_type");
	if (!json_is_string(t))
		t = json_object_get(rs, "type");
	if (!t || (json_is_string(t) &&
		   (!strcmp(json_string_value(t), "mrope") ||
		    !strcmp(json_string_value(t), "default")))) {
		if (json_object_get(lm, "rope_scaling") == rs)
			json_object_del(lm, "rope_scaling");
		else
			json_object_del(rs, "rope_type");
	}
	return 0;
}

/* Qwen2-VL / Qwen2.5-VL's vision_config. */
static int parse_qwen_tower(json_t *vc, const char *path,
			    struct vision_config *v, struct d0_err *err)
{
	json_t *fa;
	/* transformers' Qwen2VLVisionConfig / Qwen2_5_VLVisionConfig defaults
	 * (depth 32, num_heads 16): a config saved with them left out (the
	 * 72B's) means these */
	if (vget_int(vc, path, "depth", 0, 32, &v->depth, err) < 0 ||
	    vget_int(vc, path, "num_heads", 0, 16, &v->heads, err) < 0 ||
	    vget_int(vc, path, "patch_size", 0, 14, &v->patch, err) < 0 ||
	    vget_int(vc, path, "temporal_patch_size", 0, 2, &v->temporal_patch,
		     err) < 0 ||
	    vget_int(vc, path, "spatial_merge_size", 0, 2, &v->merge, err) < 0 ||
	    vget_int(vc, path, "in_channels", 0, 3, &v->in_chans, err) < 0)
		return -1;
	if (!json_object_get(vc, "in_channels") &&
	    vget_int(vc, path, "in_chans", 0, 3, &v->in_chans, err) < 0)
		return -1;
	v->norm_eps = 1e-6; /* both towers' norms: eps=1e-6 in modeling */
	if (v->kind == VISION_QWEN2_VL) {
		/* Qwen2VLVisionConfig: embed_dim is the tower's width,
		 * hidden_size the merger's output (the LM's hidden) */
		json_t *mr = json_object_get(vc, "mlp_ratio");
		if (vget_int(vc, path, "embed_dim", 1, 0, &v->hidden, err) < 0 ||
		    vget_int(vc, path, "hidden_size", 1, 0, &v->out_hidden,
			     err) < 0 ||
		    get_string(vc, path, "vision_config.", "hidden_act",
			       "quick_gelu", v->act, sizeof v->act, err) < 0)
			return -1;
		if (mr && !json_is_number(mr))
			return d0_errf(err, "%s: vision_config.mlp_ratio must be "
				       "a number", path);
		v->mlp_ratio = mr ? json_number_value(mr) : 4.0;
		if (!(v->mlp_ratio > 0 && v->mlp_ratio < 64))
			return d0_errf(err, "%s: vision_config.mlp_ratio %g: "
				       "expected a ratio in (0, 64)", path,
				       v->mlp_ratio);
		v->ffn = (int64_t)(v->hidden * v->mlp_ratio); /* int() */
		return 0;
	}
	if (vget_int(vc, path, "hidden_size", 1, 0, &v->hidden, err) < 0 ||
	    vget_int(vc, path, "intermediate_size", 1, 0, &v->ffn, err) < 0 ||
	    vget_int(vc, path, "out_hidden_size", 1, 0, &v->out_hidden,
		     err) < 0 ||
	    vget_int(vc, path, "window_size", 0, 112, &v->window_size, err) < 0 ||
	    vget_int(vc, path, "tokens_per_second", 0, 4, &v->tokens_per_second,
		     err) < 0 ||
	    get_string(vc, path, "vision_config.", "hidden_act", "silu", v->act,
		       sizeof v->act, err) < 0)
		return -1;
	fa = json_object_get(vc, "fullatt_block_indexes");
	if (fa && !json_is_null(fa)) {
		size_t i;
		json_t *x;
		if (!json_is_array(fa) || json_array_size(fa) > VISION_FULLATT_MAX)
			return d0_errf(err, "%s: vision_config."
				       "fullatt_block_indexes must be a list of "
				       "at most %d block indices", path,
				       VISION_FULLATT_MAX);
		json_array_foreach(fa, i, x) {
			if (!json_is_integer(x))
				return d0_errf(err, "%s: vision_config."
					       "fullatt_block_indexes[%zu] is not "
					       "an integer", path, i);
			v->fullatt[v->n_fullatt++] = json_integer_value(x);
		}
	} else { /* Qwen2_5_VLVisionConfig's default */
		static const int64_t def[] = {7, 15, 23, 31};
		for (int i = 0; i < 4; i++)
			v->fullatt[v->n_fullatt++] = def[i];
	}
	return 0;
}

/* LLaVA: CLIPVisionConfig (its class defaults where the file is silent)
 * and the projector keys at the top level. */
static int parse_clip_tower(json_t *root, json_t *vc, const char *path,
			    struct vision_config *v, struct d0_err *err)
{
	json_t *fl = json_object_get(root, "vision_feature_layer"), *eps;
	if (vget_int(vc, path, "num_hidden_layers", 0, 12, &v->depth, err) < 0 ||
	    vget_int(vc, path, "hidden_size", 0, 768, &v->hidden, err) < 0 ||
	    vget_int(vc, path, "intermediate_size", 0, 3072, &v->ffn, err) < 0 ||
	    vget_int(vc, path, "num_attention_heads", 0, 12, &v->heads, err) < 0 ||
	    vget_int(vc, path, "image_size", 0, 224, &v->image_size, err) < 0 ||
	    vget_int(vc, path, "patch_size", 0, 32, &v->patch, err) < 0 ||
	    vget_int(vc, path, "num_channels", 0, 3, &v->in_chans, err) < 0 ||
	    vget_int(vc, path, "projection_dim", 0, 512, &v->projection_dim,
		     err) < 0 ||
	    get_string(vc, path, "vision_config.", "hidden_act", "quick_gelu",
		       v->act, sizeof v->act, err) < 0 ||
	    get_string(root, path, "", "vision_feature_select_strategy",
		       "default", v->select_strategy, sizeof v->select_strategy,
		       err) < 0 ||
	    get_string(root, path, "", "projector_hidden_act", "gelu",
		       v->projector_act, sizeof v->projector_act, err) < 0)
		return -1;
	eps = json_object_get(vc, "layer_norm_eps");
	if (eps && !json_is_number(eps))
		return d0_errf(err, "%s: vision_config.layer_norm_eps must be a "
			       "number", path);
	v->norm_eps = eps ? json_number_value(eps) : 1e-5;
	if (fl && !json_is_null(fl) && !json_is_integer(fl))
		return d0_errf(err, "%s: vision_feature_layer must be one "
			       "integer (a list of layers is not supported)",
			       path);
	v->feature_layer = fl && json_is_integer(fl) ? json_integer_value(fl)
						     : -2;
	if (strcmp(v->select_strategy, "default") &&
	    strcmp(v->select_strategy, "full"))
		return d0_errf(err, "%s: vision_feature_select_strategy '%s': "
			       "expected 'default' or 'full'", path,
			       v->select_strategy);
	if (json_is_false(json_object_get(root, "multimodal_projector_bias")))
		return d0_errf(err, "%s: multimodal_projector_bias false is not "
			       "supported (llava-1.5's projector has biases)",
			       path);
	v->merge = 1;
	v->temporal_patch = 1;
	return 0;
}

/* Kimi-VL: MoonViTConfig (its class defaults where the file is silent);
 * the act, norms and projector are fixed in modeling_kimi_vl.py. */
static int parse_kimi_tower(json_t *vc, const char *path,
			    struct vision_config *v, struct d0_err *err)
{
	json_t *mk = json_object_get(vc, "merge_kernel_size");
	if (vget_int(vc, path, "num_hidden_layers", 0, 27, &v->depth, err) < 0 ||
	    vget_int(vc, path, "hidden_size", 0, 1152, &v->hidden, err) < 0 ||
	    vget_int(vc, path, "intermediate_size", 0, 4304, &v->ffn, err) < 0 ||
	    vget_int(vc, path, "num_attention_heads", 0, 16, &v->heads, err) < 0 ||
	    vget_int(vc, path, "patch_size", 0, 14, &v->patch, err) < 0 ||
	    vget_int(vc, path, "init_pos_emb_height", 0, 64, &v->pos_h, err) < 0 ||
	    vget_int(vc, path, "init_pos_emb_width", 0, 64, &v->pos_w, err) < 0)
		return -1;
	v->merge = 2;
	if (mk && !json_is_null(mk)) {
		json_t *a = json_array_get(mk, 0), *b = json_array_get(mk, 1);
		if (!json_is_array(mk) || json_array_size(mk) != 2 ||
		    !json_is_integer(a) || !json_is_integer(b))
			return d0_errf(err, "%s: vision_config.merge_kernel_size "
				       "must be a list of 2 integers", path);
		if (json_integer_value(a) != json_integer_value(b))
			return d0_errf(err, "%s: vision_config.merge_kernel_size "
				       "[%lld, %lld]: only a square merge is "
				       "supported", path,
				       (long long)json_integer_value(a),
				       (long long)json_integer_value(b));
		v->merge = json_integer_value(a);
	}
	if (v->pos_h < 1 || v->pos_h > 4096 || v->pos_w < 1 || v->pos_w > 4096)
		return d0_errf(err, "%s: vision_config.init_pos_emb_height/width "
			       "%lld x %lld: expected 1..4096", path,
			       (long long)v->pos_h, (long long)v->pos_w);
	snprintf(v->act, sizeof v->act, "gelu_pytorch_tanh");
	snprintf(v->projector_act, sizeof v->projector_act, "gelu");
	v->norm_eps = 1e-5; /* nn.LayerNorm's default, every norm */
	v->in_chans = 3;
	v->temporal_patch = 1;
	return 0;
}

/* Bounds of the tower's numbers (config_check's role for the text keys). */
static int check_tower(const struct vision_config *v, const char *path,
		       struct d0_err *err)
{
	const struct {
		const char *key;
		int64_t val, min, max;
	} r[] = {
		{"depth", v->depth, 1, MODEL_COUNT_MAX},
		{"hidden_size", v->hidden, 1, MODEL_DIM_MAX},
		{"intermediate_size", v->ffn, 1, MODEL_DIM_MAX},
		{"num_heads", v->heads, 1, MODEL_COUNT_MAX},
		{"patch_size", v->patch, 1, 4096},
		{"temporal_patch_size", v->temporal_patch, 1, 64},
		{"spatial_merge_size", v->merge, 1, 64},
		{"in_channels", v->in_chans, 1, 64},
		{"out_hidden_size", v->out_hidden, 1, MODEL_DIM_MAX},
	};
	for (size_t i = 0; i < sizeof r / sizeof *r; i++)
		if (r[i].val < r[i].min || r[i].val > r[i].max)
			return d0_errf(err, "%s: vision_config.%s is %lld; "
				       "expected %lld..%lld", path, r[i].key,
				       (long long)r[i].val, (long long)r[i].min,
				       (long long)r[i].max);
	if (v->hidden % v->heads)
		return d0_errf(err, "%s: vision_config hidden size %lld is not a "
			       "multiple of its %lld heads", path,
			       (long long)v->hidden, (long long)v->heads);
	if (v->kind != VISION_CLIP && (v->hidden / v->heads) % 4)
		return d0_errf(err, "%s: vision head dim %lld must be a multiple "
			       "of 4 (the 2D rotary splits each half between "
			       "rows and columns)", path,
			       (long long)(v->hidden / v->heads));
	if (v->kind == VISION_CLIP &&
	    (v->image_size < v->patch || v->image_size % v->patch ||
	     v->image_size > 65536))
		return d0_errf(err, "%s: vision_config.image_size %lld is not a "
			       "multiple of patch_size %lld", path,
			       (long long)v->image_size, (long long)v->patch);
	if (v->kind == VISION_CLIP &&
	    (v->feature_layer < -(v->depth + 1) || v->feature_layer > v->depth))
		return d0_errf(err, "%s: vision_feature_layer %lld: the tower "
			       "has %lld hidden states (-%lld..%lld)", path,
			       (long long)v->feature_layer, (long long)v->depth + 1,
			       (long long)v->depth + 1, (long long)v->depth);
	if (v->kind == VISION_QWEN2_5_VL) {
		for (int i = 0; i < v->n_fullatt; i++)
			if (v->fullatt[i] < 0 || v->fullatt[i] >= v->depth)
				return d0_errf(err, "%s: vision_config."
					       "fullatt_block_indexes[%d] = %lld "
					       "is not a block of the %lld", path,
					       i, (long long)v->fullatt[i],
					       (long long)v->depth);
		if (v->window_size < v->patch * v->merge ||
		    v->window_size % (v->patch * v->merge) ||
		    v->window_size > 65536)
			return d0_errf(err, "%s: vision_config.window_size %lld "
				       "must be a multiple of patch_size x "
				       "spatial_merge_size (%lld)", path,
				       (long long)v->window_size,
				       (long long)(v->patch * v->merge));
	}
	return 0;
}

int vision_parse(json_t *root, const char *path, struct model_config *c,
		 struct d0_err *err)
{
	const struct vl_family *vf =
		vl_find(json_string_value(json_object_get(root, "model_type")));
	json_t *tc = json_object_get(root, "text_config");
	json_t *vc = json_object_get(root, "vision_config"), *lm, *v;
	struct vision_config vis;
	const char *key, *lm_type;
	char tower[32];
	int rc;

	memset(&vis, 0, sizeof vis);
	if (!vf)
		return d0_errf(err, "%s: not a vision-language model_type", path);
	if (tc && !json_is_null(tc) && !json_is_object(tc))
		return d0_errf(err, "%s: 'text_config' must be an object", path);
	if (!json_is_object(vc))
		return d0_errf(err, "%s: model_type '%s' needs a 'vision_config' "
			       "object (the vision tower's keys)", path,
			       vf->vl_type);
	if (get_string(vc, path, "vision_config.", "model_type", "", tower,
		       sizeof tower, err) < 0)
		return -1;
	/* the LM's own config.json: text_config, then the top-level keys it
	 * lacks (older Qwen-VL files keep the LM there), then class defaults */
	lm = json_is_object(tc) ? json_deep_copy(tc) : json_object();
	json_object_foreach(root, key, v)
		if (strcmp(key, "text_config") && strcmp(key, "vision_config") &&
		    strcmp(key, "model_type") && strcmp(key, "architectures") &&
		    !json_object_get(lm, key))
			json_object_set(lm, key, v);
	lm_type = vf->lm_type;
	if (!lm_type) {
		json_t *t = json_is_object(tc) ? json_object_get(tc, "model_type")
					       : NULL;
		lm_type = json_is_string(t) ? json_string_value(t) : "llama";
	}
	json_object_set_new(lm, "model_type", json_string(lm_type));
	lm_class_defaults(lm, lm_type);
	if (take_mrope(lm, path, &vis, err) < 0) {
		json_decref(lm);
		return -1;
	}
	rc = model_config_from_json(lm, path, c, err);
	json_decref(lm);
	if (rc < 0)
		return -1;
	if (c->vision.kind != VISION_NONE) {
		model_config_free(c);
		return d0_errf(err, "%s: text_config is itself a "
			       "vision-language config", path);
	}

	vis.kind = vf->kind;
	snprintf(vis.vl_type, sizeof vis.vl_type, "%s", vf->vl_type);
	snprintf(vis.architecture, sizeof vis.architecture, "%s",
		 vf->architecture);
	snprintf(vis.tower_type, sizeof vis.tower_type, "%s", tower);
	snprintf(vis.lm_prefix, sizeof vis.lm_prefix, "%s", vf->lm_prefix);
	vis.image_token_id = vis.video_token_id = -1;
	vis.vision_start_id = vis.vision_end_id = -1;
	if (vf->kind == VISION_UNSUPPORTED) {
		snprintf(vis.missing, sizeof vis.missing, "%s", vf->missing);
		c->vision = vis;
		return 0;
	}
	if (vf->kind == VISION_KIMI) {
		rc = parse_kimi_tower(vc, path, &vis, err);
		vis.out_hidden = c->hidden;
		if (rc == 0 && strcmp(tower, "moonvit") && tower[0])
			rc = d0_errf(err, "%s: vision_config.model_type '%s': "
				     "only moonvit is supported for kimi_vl",
				     path, tower);
		if (rc == 0)
			rc = top_int(root, path, "media_placeholder_token_id",
				     163605, &vis.image_token_id, err);
	} else if (vf->kind == VISION_CLIP) {
		rc = parse_clip_tower(root, vc, path, &vis, err);
		vis.out_hidden = c->hidden;
		if (rc == 0 && strcmp(tower, "clip_vision_model") && tower[0])
			rc = d0_errf(err, "%s: vision_config.model_type '%s': "
				     "only clip_vision_model is supported for "
				     "llava", path, tower);
		if (rc == 0)
			rc = top_int(root, path, "image_token_index", 32000,
				     &vis.image_token_id, err);
	} else {
		rc = parse_qwen_tower(vc, path, &vis, err);
		if (rc == 0 &&
		    (top_int(root, path, "image_token_id", 151655,
			     &vis.image_token_id, err) < 0 ||
		     top_int(root, path, "video_token_id", 151656,
			     &vis.video_token_id, err) < 0 ||
		     top_int(root, path, "vision_start_token_id", 151652,
			     &vis.vision_start_id, err) < 0 ||
		     top_int(root, path, "vision_end_token_id", 151653,
			     &vis.vision_end_id, err) < 0))
			rc = -1;
		if (rc == 0 && vis.out_hidden != c->hidden)
			rc = d0_errf(err, "%s: the merger's output (%s %lld) is "
				     "not the language model's hidden_size %lld",
				     path, vis.kind == VISION_QWEN2_VL
						   ? "vision_config.hidden_size"
						   : "vision_config.out_hidden_size",
				     (long long)vis.out_hidden,
				     (long long)c->hidden);
		if (rc == 0 && !vis.mrope)
			rc = d0_errf(err, "%s: %s needs rope_scaling."
				     "mrope_section (M-RoPE's t/h/w split)", path,
				     vf->vl_type);
		if (rc == 0 && vis.mrope_section[0] + vis.mrope_section[1] +
					       vis.mrope_section[2] !=
				       c->head_dim / 2)
			rc = d0_errf(err, "%s: mrope_section %lld+%lld+%lld must "
				     "sum to head_dim/2 = %lld", path,
				     (long long)vis.mrope_section[0],
				     (long long)vis.mrope_section[1],
				     (long long)vis.mrope_section[2],
				     (long long)c->head_dim / 2);
	}
	if (rc == 0)
		rc = check_tower(&vis, path, err);
	if (rc == 0 && vis.image_token_id >= c->vocab)
		rc = d0_errf(err, "%s: the image token id %lld is outside the "
			     "vocabulary (%lld)", path,
			     (long long)vis.image_token_id, (long long)c->vocab);
	if (rc < 0) {
		model_config_free(c);
		return -1;
	}
	c->vision = vis;
	return 0;
}

/* ------------------------------------------------------- tensor table */

/* One entry of the tower's table. */
static void vadd(struct tensor_spec **v, size_t *n, size_t *cap,
		 enum tensor_group g, enum tensor_role role, int ndim,
		 uint64_t d0, uint64_t d1, const char *fmt, ...)
	__attribute__((format(printf, 9, 10)));

static void vadd(struct tensor_spec **v, size_t *n, size_t *cap,
		 enum tensor_group g, enum tensor_role role, int ndim,
		 uint64_t d0, uint64_t d1, const char *fmt, ...)
{
	struct tensor_spec *s;
	va_list ap;
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 256;
		*v = realloc(*v, *cap * sizeof **v);
		if (!*v)
			abort();
	}
	s = &(*v)[(*n)++];
	memset(s, 0, sizeof *s);
	va_start(ap, fmt);
	vsnprintf(s->name, sizeof s->name, fmt, ap);
	va_end(ap);
	s->role = role;
	s->group = g;
	s->layer = -1; /* placed with the first stage (layout.c) */
	s->expert = -1;
	s->ndim = ndim;
	s->shape[0] = d0;
	s->shape[1] = d1;
}

/* A linear layer's weight and bias. */
#define LIN(g, out, in, ...)                                                  \
	do {                                                                  \
		vadd(v, n, cap, g, ROLE_REPL, 2, out, in, __VA_ARGS__);       \
		snprintf(b, sizeof b, "%s", (*v)[*n - 1].name);               \
		b[strlen(b) - 6] = 0; /* "weight" -> "bias" */                \
		vadd(v, n, cap, g, ROLE_REPL, 1, out, 0, "%sbias", b);        \
	} while (0)

static void qwen_tower(const struct vision_config *vc, struct tensor_spec **v,
		       size_t *n, size_t *cap)
{
	uint64_t D = (uint64_t)vc->hidden, F = (uint64_t)vc->ffn;
	uint64_t M = D * (uint64_t)(vc->merge * vc->merge);
	uint64_t O = (uint64_t)vc->out_hidden, P = (uint64_t)vc->patch;
	uint64_t T = (uint64_t)vc->temporal_patch, C = (uint64_t)vc->in_chans;
	int ln = vc->kind == VISION_QWEN2_VL; /* LayerNorm: weight and bias */
	enum tensor_group g = GROUP_VISION;
	char b[200];
	struct tensor_spec *s;

	/* Conv3d(C, D, kernel = stride = (T, P, P), bias=False) */
	vadd(v, n, cap, g, ROLE_REPL, 2, D, C * T * P * P,
	     "visual.patch_embed.proj.weight");
	s = &(*v)[*n - 1];
	s->file_ndim = 5;
	s->file_shape[0] = D;
	s->file_shape[1] = C;
	s->file_shape[2] = T;
	s->file_shape[3] = s->file_shape[4] = P;
	for (int64_t l = 0; l < vc->depth; l++) {
		const char *p = "visual.blocks";
		int i = (int)l;
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm1.weight", p, i);
		if (ln)
			vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm1.bias",
			     p, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm2.weight", p, i);
		if (ln)
			vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm2.bias",
			     p, i);
		LIN(g, 3 * D, D, "%s.%d.attn.qkv.weight", p, i);
		LIN(g, D, D, "%s.%d.attn.proj.weight", p, i);
		if (ln) {
			LIN(g, F, D, "%s.%d.mlp.fc1.weight", p, i);
			LIN(g, D, F, "%s.%d.mlp.fc2.weight", p, i);
		} else {
			LIN(g, F, D, "%s.%d.mlp.gate_proj.weight", p, i);
			LIN(g, F, D, "%s.%d.mlp.up_proj.weight", p, i);
			LIN(g, D, F, "%s.%d.mlp.down_proj.weight", p, i);
		}
	}
	g = GROUP_PROJECTOR; /* the PatchMerger: the tower's projector */
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "visual.merger.ln_q.weight");
	if (ln)
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "visual.merger.ln_q.bias");
	LIN(g, M, M, "visual.merger.mlp.0.weight");
	LIN(g, O, M, "visual.merger.mlp.2.weight");
}

static void clip_tower(const struct vision_config *vc, struct tensor_spec **v,
		       size_t *n, size_t *cap)
{
	uint64_t D = (uint64_t)vc->hidden, F = (uint64_t)vc->ffn;
	uint64_t P = (uint64_t)vc->patch, C = (uint64_t)vc->in_chans;
	uint64_t G = (uint64_t)(vc->image_size / vc->patch);
	uint64_t O = (uint64_t)vc->out_hidden;
	const char *m = "vision_tower.vision_model";
	enum tensor_group g = GROUP_VISION;
	char b[200];
	struct tensor_spec *s;

	vadd(v, n, cap, g, ROLE_REPL, 1, D, 0, "%s.embeddings.class_embedding",
	     m);
	/* Conv2d(C, D, kernel = stride = P, bias=False) */
	vadd(v, n, cap, g, ROLE_REPL, 2, D, C * P * P,
	     "%s.embeddings.patch_embedding.weight", m);
	s = &(*v)[*n - 1];
	s->file_ndim = 4;
	s->file_shape[0] = D;
	s->file_shape[1] = C;
	s->file_shape[2] = s->file_shape[3] = P;
	vadd(v, n, cap, g, ROLE_REPL, 2, G * G + 1, D,
	     "%s.embeddings.position_embedding.weight", m);
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.pre_layrnorm.weight", m);
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.pre_layrnorm.bias", m);
	for (int64_t l = 0; l < vc->depth; l++) {
		int i = (int)l;
		const char *e = "encoder.layers";
		LIN(g, D, D, "%s.%s.%d.self_attn.k_proj.weight", m, e, i);
		LIN(g, D, D, "%s.%s.%d.self_attn.v_proj.weight", m, e, i);
		LIN(g, D, D, "%s.%s.%d.self_attn.q_proj.weight", m, e, i);
		LIN(g, D, D, "%s.%s.%d.self_attn.out_proj.weight", m, e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0,
		     "%s.%s.%d.layer_norm1.weight", m, e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%s.%d.layer_norm1.bias",
		     m, e, i);
		LIN(g, F, D, "%s.%s.%d.mlp.fc1.weight", m, e, i);
		LIN(g, D, F, "%s.%s.%d.mlp.fc2.weight", m, e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0,
		     "%s.%s.%d.layer_norm2.weight", m, e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%s.%d.layer_norm2.bias",
		     m, e, i);
	}
	/* in the checkpoint though LLaVA reads an earlier layer's states */
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.post_layernorm.weight", m);
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.post_layernorm.bias", m);
	g = GROUP_PROJECTOR;
	LIN(g, O, D, "multi_modal_projector.linear_1.weight");
	LIN(g, O, O, "multi_modal_projector.linear_2.weight");
}
/* Kimi-VL: MoonVitPretrainedModel and KimiVLMultiModalProjector, as the
 * published safetensors index names them. */
static void kimi_tower(const struct vision_config *vc, struct tensor_spec **v,
		       size_t *n, size_t *cap)
{
	uint64_t D = (uint64_t)vc->hidden, F = (uint64_t)vc->ffn;
	uint64_t P = (uint64_t)vc->patch, C = (uint64_t)vc->in_chans;
	uint64_t M = D * (uint64_t)(vc->merge * vc->merge);
	uint64_t O = (uint64_t)vc->out_hidden;
	uint64_t PH = (uint64_t)vc->pos_h, PW = (uint64_t)vc->pos_w;
	const char *e = "vision_tower.encoder.blocks";
	enum tensor_group g = GROUP_VISION;
	char b[200];
	struct tensor_spec *s;

	/* Conv2d(C, D, kernel = stride = P), with bias */
	LIN(g, D, C * P * P, "vision_tower.patch_embed.proj.weight");
	s = &(*v)[*n - 2];
	s->file_ndim = 4;
	s->file_shape[0] = D;
	s->file_shape[1] = C;
	s->file_shape[2] = s->file_shape[3] = P;
	/* Learnable2DInterpPosEmb: [height, width, D] */
	vadd(v, n, cap, g, ROLE_REPL, 2, PH * PW, D,
	     "vision_tower.patch_embed.pos_emb.weight");
	s = &(*v)[*n - 1];
	s->file_ndim = 3;
	s->file_shape[0] = PH;
	s->file_shape[1] = PW;
	s->file_shape[2] = D;
	for (int64_t l = 0; l < vc->depth; l++) {
		int i = (int)l;
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm0.weight", e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm0.bias", e, i);
		LIN(g, 3 * D, D, "%s.%d.wqkv.weight", e, i);
		LIN(g, D, D, "%s.%d.wo.weight", e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm1.weight", e, i);
		vadd(v, n, cap, g, ROLE_NORM, 1, D, 0, "%s.%d.norm1.bias", e, i);
		LIN(g, F, D, "%s.%d.mlp.fc0.weight", e, i);
		LIN(g, D, F, "%s.%d.mlp.fc1.weight", e, i);
	}
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0,
	     "vision_tower.encoder.final_layernorm.weight");
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0,
	     "vision_tower.encoder.final_layernorm.bias");
	g = GROUP_PROJECTOR;
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0,
	     "multi_modal_projector.pre_norm.weight");
	vadd(v, n, cap, g, ROLE_NORM, 1, D, 0,
	     "multi_modal_projector.pre_norm.bias");
	LIN(g, M, M, "multi_modal_projector.linear_1.weight");
	LIN(g, O, M, "multi_modal_projector.linear_2.weight");
}
#undef LIN

void vision_tensors(const struct model_config *c, struct tensor_spec **v,
		    size_t *n, size_t *cap)
{
	if (c->vision.kind == VISION_QWEN2_VL ||
	    c->vision.kind == VISION_QWEN2_5_VL)
		qwen_tower(&c->vision, v, n, cap);
	else if (c->vision.kind == VISION_CLIP)
		clip_tower(&c->vision, v, n, cap);
	else if (c->vision.kind == VISION_KIMI)
		kimi_tower(&c->vision, v, n, cap);
}

/* ------------------------------------------------------------- sizes */

void vision_image_cost(const struct model_config *c, int64_t grid_t,
		       int64_t grid_h, int64_t grid_w, int kv_bytes,
		       struct vision_image_cost *out)
{
	const struct vision_config *v = &c->vision;
	int64_t width, per_tok;
	memset(out, 0, sizeof *out);
	if (v->kind == VISION_NONE || v->kind == VISION_UNSUPPORTED)
		return;
	if (v->kind == VISION_CLIP) {
		int64_t g = v->image_size / v->patch;
		out->patches = g * g + 1; /* + the class token */
		out->tokens = g * g + (strcmp(v->select_strategy, "full") ? 0 : 1);
	} else {
		out->patches = grid_t * grid_h * grid_w;
		out->tokens = out->patches / (v->merge * v->merge);
	}
	/* the widest activation of a block: qkv, or the MLP's gate+up */
	width = 3 * v->hidden;
	if ((v->kind == VISION_QWEN2_5_VL ? 2 : 1) * v->ffn > width)
		width = (v->kind == VISION_QWEN2_5_VL ? 2 : 1) * v->ffn;
	out->act_elems = (uint64_t)out->patches * (uint64_t)width;
	per_tok = c->mla ? c->kv_lora_rank + c->qk_rope_dim
			 : 2 * c->kv_heads * c->head_dim;
	out->kv_bytes = (uint64_t)out->tokens * (uint64_t)c->layers *
			(uint64_t)per_tok * (uint64_t)kv_bytes;
}

/* -------------------------------------------------- writing, shrinking */

json_t *vision_config_json(const struct model_config *c, json_t *lm)
{
	const struct vision_config *v = &c->vision;
	json_t *o, *vc = json_object(), *fa;
	const char *key;
	json_t *x;
	if (v->kind == VISION_CLIP) {
		/* LLaVA: the LM nested in text_config, as llava-hf writes it */
		o = json_object();
		json_object_set_new(lm, "architectures",
				    json_pack("[s]", !strcmp(c->model_type,
							     "llama")
							     ? "LlamaForCausalLM"
							     : "MistralForCausalLM"));
		json_object_set_new(o, "architectures",
				    json_pack("[s]", v->architecture));
		json_object_set_new(o, "ignore_index", json_integer(-100));
		json_object_set_new(o, "image_token_index",
				    json_integer(v->image_token_id));
		json_object_set_new(o, "model_type", json_string(v->vl_type));
		json_object_set_new(o, "projector_hidden_act",
				    json_string(v->projector_act));
		json_object_set(o, "text_config", lm);
		json_object_set(o, "tie_word_embeddings",
				json_object_get(lm, "tie_word_embeddings"));
		json_object_set(o, "torch_dtype", json_object_get(lm, "torch_dtype"));
		json_object_set_new(vc, "hidden_act", json_string(v->act));
		json_object_set_new(vc, "hidden_size", json_integer(v->hidden));
		json_object_set_new(vc, "image_size", json_integer(v->image_size));
		json_object_set_new(vc, "intermediate_size", json_integer(v->ffn));
		json_object_set_new(vc, "layer_norm_eps", json_real(v->norm_eps));
		json_object_set_new(vc, "model_type",
				    json_string("clip_vision_model"));
		json_object_set_new(vc, "num_attention_heads",
				    json_integer(v->heads));
		json_object_set_new(vc, "num_hidden_layers", json_integer(v->depth));
		json_object_set_new(vc, "patch_size", json_integer(v->patch));
		json_object_set_new(vc, "projection_dim",
				    json_integer(v->projection_dim));
		json_object_set_new(o, "vision_config", vc);
		json_object_set_new(o, "vision_feature_layer",
				    json_integer(v->feature_layer));
		json_object_set_new(o, "vision_feature_select_strategy",
				    json_string(v->select_strategy));
		json_object_set(o, "vocab_size", json_object_get(lm, "vocab_size"));
		json_decref(lm);
		return o;
	}
	if (v->kind == VISION_KIMI) {
		/* Kimi-VL: the LM nested in text_config (deepseek_v3) */
		o = json_object();
		json_object_set_new(o, "architectures",
				    json_pack("[s]", v->architecture));
		json_object_set_new(o, "ignore_index", json_integer(-100));
		json_object_set_new(o, "media_placeholder_token_id",
				    json_integer(v->image_token_id));
		json_object_set_new(o, "model_type", json_string(v->vl_type));
		json_object_set(o, "pad_token_id", json_object_get(lm,
								  "pad_token_id"));
		json_object_set(o, "text_config", lm);
		json_object_set(o, "torch_dtype", json_object_get(lm, "torch_dtype"));
		json_object_set_new(vc, "hidden_size", json_integer(v->hidden));
		json_object_set_new(vc, "init_pos_emb_height",
				    json_integer(v->pos_h));
		json_object_set_new(vc, "init_pos_emb_width",
				    json_integer(v->pos_w));
		json_object_set_new(vc, "intermediate_size", json_integer(v->ffn));
		json_object_set_new(vc, "merge_kernel_size",
				    json_pack("[I, I]", (json_int_t)v->merge,
					      (json_int_t)v->merge));
		json_object_set_new(vc, "model_type", json_string("moonvit"));
		json_object_set_new(vc, "num_attention_heads",
				    json_integer(v->heads));
		json_object_set_new(vc, "num_hidden_layers", json_integer(v->depth));
		json_object_set_new(vc, "patch_size", json_integer(v->patch));
		json_object_set_new(o, "vision_config", vc);
		if (!json_object_get(o, "pad_token_id"))
			json_object_del(o, "pad_token_id");
		json_decref(lm);
		return o;
	}
	/* Qwen2-VL / Qwen2.5-VL: the LM's keys at the top level, as the
	 * published config.json has them */
	o = lm;
	json_object_set_new(o, "architectures", json_pack("[s]", v->architecture));
	json_object_set_new(o, "model_type", json_string(v->vl_type));
	json_object_set_new(o, "image_token_id", json_integer(v->image_token_id));
	json_object_set_new(o, "video_token_id", json_integer(v->video_token_id));
	json_object_set_new(o, "vision_start_token_id",
			    json_integer(v->vision_start_id));
	json_object_set_new(o, "vision_end_token_id",
			    json_integer(v->vision_end_id));
	json_object_set_new(o, "rope_scaling",
			    json_pack("{s:s, s:[I, I, I]}", "type", "mrope",
				      "mrope_section",
				      (json_int_t)v->mrope_section[0],
				      (json_int_t)v->mrope_section[1],
				      (json_int_t)v->mrope_section[2]));
	json_object_set_new(vc, "depth", json_integer(v->depth));
	json_object_set_new(vc, "hidden_act", json_string(v->act));
	json_object_set_new(vc, "in_chans", json_integer(v->in_chans));
	json_object_set_new(vc, "num_heads", json_integer(v->heads));
	json_object_set_new(vc, "patch_size", json_integer(v->patch));
	json_object_set_new(vc, "spatial_merge_size", json_integer(v->merge));
	json_object_set_new(vc, "spatial_patch_size", json_integer(v->patch));
	json_object_set_new(vc, "temporal_patch_size",
			    json_integer(v->temporal_patch));
	if (v->kind == VISION_QWEN2_VL) {
		json_object_set_new(vc, "embed_dim", json_integer(v->hidden));
		json_object_set_new(vc, "hidden_size", json_integer(v->out_hidden));
		json_object_set_new(vc, "mlp_ratio", json_real(v->mlp_ratio));
	} else {
		fa = json_array();
		for (int i = 0; i < v->n_fullatt; i++)
			json_array_append_new(fa, json_integer(v->fullatt[i]));
		json_object_set_new(vc, "fullatt_block_indexes", fa);
		json_object_set_new(vc, "hidden_size", json_integer(v->hidden));
		json_object_set_new(vc, "intermediate_size", json_integer(v->ffn));
		json_object_set_new(vc, "out_hidden_size",
				    json_integer(v->out_hidden));
		json_object_set_new(vc, "tokens_per_second",
				    json_integer(v->tokens_per_second));
		json_object_set_new(vc, "window_size", json_integer(v->window_size));
	}
	json_object_set_new(o, "vision_config", vc);
	/* transformers sorts the keys it writes */
	{
		json_t *sorted = json_object();
		const char **keys = calloc(json_object_size(o) + 1, sizeof *keys);
		size_t k = 0;
		json_object_foreach(o, key, x)
			keys[k++] = key;
		qsort(keys, k, sizeof *keys,
		      (int (*)(const void *, const void *))strcmp);
		for (size_t i = 0; i < k; i++) {
			const char **kp = &keys[i];
			json_object_set(sorted, *kp, json_object_get(o, *kp));
		}
		free(keys);
		json_decref(o);
		return sorted;
	}
}

int vision_config_shrink(const struct model_config *real,
			 struct model_config *c, struct d0_err *err)
{
	struct vision_config *v = &c->vision;
	int64_t half = c->head_dim / 2, sum;
	if (v->kind == VISION_NONE)
		return 0;
	if (v->kind == VISION_UNSUPPORTED)
		return d0_errf(err, "model_type '%s': gen-model cannot write its "
			       "vision tower: the engine lacks %s", v->vl_type,
			       v->missing);
	/* a tiny tower of the same kind: 2 heads of 16 dims, two blocks so
	 * Qwen2.5-VL keeps a window block and a full-attention one; the
	 * patch, merge, window and image sizes stay, so the release's
	 * preprocessing feeds it unchanged */
	v->heads = 2;
	v->hidden = 32;
	v->depth = 2;
	v->ffn = v->kind == VISION_QWEN2_5_VL ? 48 : 64;
	v->mlp_ratio = 2.0;
	v->projection_dim = 32;
	v->out_hidden = c->hidden;
	if (v->kind == VISION_QWEN2_5_VL) {
		v->n_fullatt = 1;
		v->fullatt[0] = 1;
	}
	if (v->kind == VISION_KIMI) { /* a small position table: 4 x 5, so
				       * most images interpolate it */
		v->pos_h = 4;
		v->pos_w = 5;
	}
	if (v->kind == VISION_CLIP) /* at least one layer past the feature */
		v->feature_layer = real->vision.feature_layer < 0 ? -2 : 1;
	/* gen-model sets the placeholders' ids from the tokenizer it writes;
	 * until then, ids inside the small vocabulary */
	v->image_token_id = c->vocab - 1;
	if (v->kind == VISION_QWEN2_VL || v->kind == VISION_QWEN2_5_VL) {
		v->video_token_id = c->vocab - 2;
		v->vision_start_id = c->vocab - 3;
		v->vision_end_id = c->vocab - 4;
	}
	if (v->mrope) { /* the same t/h/w shares of the (smaller) head */
		sum = real->vision.mrope_section[0] + real->vision.mrope_section[1] +
		      real->vision.mrope_section[2];
		v->mrope_section[0] = real->vision.mrope_section[0] * half / sum;
		v->mrope_section[1] = real->vision.mrope_section[1] * half / sum;
		v->mrope_section[2] =
			half - v->mrope_section[0] - v->mrope_section[1];
	}
	return 0;
}
