/*
 * step_gen_model.c - `day0-engine gen-model`: the engine's stand-in for a
 * model download.  Writes a Hugging Face-format checkpoint (config.json,
 * shards, index, SHA256SUMS) whose structure is exactly what transformers
 * would save for that config, with deterministic weights.
 *
 * It also writes the family's tokenizer.json + tokenizer_config.json
 * (tokenizer_gen.c), so a generated model runs on text like a real one.
 *
 * Each tensor draws from its own generator seeded by (seed, tensor name),
 * so values do not depend on the shard count or the tensor order.  Weights
 * are scaled like a trained network's (linear layers ~ 1/sqrt(fan_in),
 * residual outputs further by 1/sqrt(2 * layers), norms near 1) so the
 * forward pass is well conditioned.  Tensors are generated in bounded
 * chunks: memory does not grow with the model.
 */
#include "engine.h"
#include "tokenizer.h"
#include "shrink_layout.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GEN_CHUNK (1u << 18) /* elements per generated chunk */

static int run(int argc, char **argv);

const struct step_entry step_gen_model = {
	.name = "gen-model",
	.usage = "(--arch ARCH | --like CONFIG.json [--scale tiny|small] "
		 "[--for-layout TP,PP,EP]) "
		 "[--layers N] [--hidden N] [--heads N] [--kv-heads N] "
		 "[--head-dim N] [--ffn N] [--vocab N] [--experts N] [--top-k N] "
		 "[--moe-ffn N] [--shared-ffn N] [--shared-experts N] "
		 "[--sparse-step N] [--mlp-only-layers L,L] [--first-dense N] "
		 "[--q-lora-rank N] [--kv-lora-rank N] [--qk-rope-dim N] "
		 "[--qk-nope-dim N] [--v-head-dim N] [--n-group N] "
		 "[--topk-group N] [--mtp-layers N] [--tie] [--attention-bias] "
		 "[--rope-scaling TYPE:FACTOR] [--rope-theta X] [--max-pos N] "
		 "[--dtype f32|bf16|f16] [--quant fp8|fp8-e5m2|int4|int8|none] "
		 "[--block N] [--group N] [--shards N] [--seed N] [--force] "
		 "[--events] OUT_DIR\n"
		 "  --quant stores the linear weights the way release checkpoints "
		 "do (docs/formats.md):\n"
		 "    fp8: FP8 e4m3fn with a float32 scale per --block x --block "
		 "block (default 128), DeepSeek-V3 style\n"
		 "    int4/int8: compressed-tensors pack-quantized, a bf16 scale "
		 "per --group inputs (default 32; 0: per channel)\n"
		 "  --like writes the format the config declares (blocks and "
		 "groups scaled down with the model)\n"
		 "  example: day0-engine gen-model --arch deepseek_v3 --quant fp8 "
		 "--block 16 /tmp/ds-fp8\n"
		 "  ARCH: llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, "
		 "qwen3_moe, deepseek_v3\n"
		 "  --for-layout: the smallest model of CONFIG's structure "
		 "that run --tp TP --pp PP --ep EP can split\n"
		 "  example: gen-model --like deepseek-v3.json --for-layout "
		 "8,2,4 /tmp/like",
	.summary = "generate a Hugging Face-format checkpoint (tiny, "
		   "deterministic, real structure; --like mirrors a real config)",
	.help =
		 "  --arch ARCH           the family, or --like CONFIG.json: a real model's config\n"
		 "  --scale tiny|small    how far --like shrinks the model (default tiny)\n"
		 "  --for-layout TP,PP,EP the smallest model of the structure that layout splits\n"
		 "  --layers N, --hidden N, --heads N, --kv-heads N, --head-dim N, --ffn N,\n"
		 "  --vocab N, --max-pos N          the dense dimensions (config.json's names)\n"
		 "  --experts N, --top-k N, --moe-ffn N, --shared-ffn N, --shared-experts N,\n"
		 "  --sparse-step N, --mlp-only-layers L,L, --first-dense N   mixture of experts\n"
		 "  --q-lora-rank N, --kv-lora-rank N, --qk-rope-dim N, --qk-nope-dim N,\n"
		 "  --v-head-dim N        multi-head latent attention (deepseek_v3)\n"
		 "  --n-group N, --topk-group N     grouped expert routing (deepseek_v3)\n"
		 "  --mtp-layers N        multi-token-prediction layers (deepseek_v3)\n"
		 "  --tie                 tie the embedding and the LM head\n"
		 "  --attention-bias      q/k/v projections with bias (qwen2)\n"
		 "  --rope-scaling TYPE:FACTOR, --rope-theta X   rotary embedding settings\n"
		 "  --dtype D             f32, bf16 or f16 tensors (default f32)\n"
		 "  --quant Q, --block N, --group N   quantised linear weights (see above)\n"
		 "  --shards N            safetensors shards (default 1)\n"
		 "  --seed N              the weights' seed (deterministic per seed and tensor)\n"
		 "  --force               replace OUT_DIR if it exists\n"
		 "  --events              day0 protocol events on stdout\n"
		 "example: day0-engine gen-model --arch qwen3_moe --layers 4 --experts 8 --top-k 2 --shards 3 /tmp/m",
	.run = run,
};

/* Standard deviation of a tensor's entries, by what it is. */
static double tensor_std(const struct model_config *c,
			 const struct tensor_spec *t)
{
	double fan_in = t->ndim == 2 ? (double)t->shape[1] : 1.0;
	switch (t->role) {
	case ROLE_EMBED:
		return 1.0;
	case ROLE_NORM:
		return 0.05; /* around a mean of 1, see fill() */
	case ROLE_O:
	case ROLE_ROW:
		if (t->ndim == 1)
			return 0.02;
		return 1.0 / sqrt(fan_in) / sqrt(2.0 * (double)c->layers);
	default:
		return t->ndim == 1 ? 0.02 : 1.0 / sqrt(fan_in);
	}
}

/* Uniform entries with the given std (and mean 1 for norms). */
static void fill(float *v, size_t n, struct rng *r, double std, double mean)
{
	const double a = std * sqrt(3.0) * 0x1p-31;
	for (size_t i = 0; i < n; i++) {
		int32_t x = (int32_t)(rng_next(r) >> 32);
		v[i] = (float)(mean + a * (double)x);
	}
}

struct gen_opts {
	struct model_config cfg;
	const char *quant; /* --quant, or NULL */
	long block, group;
	long shards;
	uint64_t seed;
	int force;
	const char *out;
	const char *like; /* --like CONFIG (a VL release's preprocessor
			   * config is taken from beside it) */
};

static int parse_rope_opt(const char *s, struct rope_scaling *r)
{
	const char *colon = strchr(s, ':');
	char *end;
	size_t tl = colon ? (size_t)(colon - s) : strlen(s);
	memset(r, 0, sizeof *r);
	if (tl == 0 || tl >= sizeof r->type)
		return -1;
	memcpy(r->type, s, tl);
	if (strcmp(r->type, "linear") && strcmp(r->type, "dynamic") &&
	    strcmp(r->type, "yarn") && strcmp(r->type, "llama3"))
		return -1;
	r->factor = colon ? strtod(colon + 1, &end) : 2.0;
	if (colon && (*end || end == colon + 1))
		return -1;
	if (!(r->factor >= 1.0))
		return -1;
	r->low_freq_factor = 1.0;
	r->high_freq_factor = 4.0;
	r->beta_fast = 32.0;
	r->beta_slow = 1.0;
	return 0;
}

static int parse_layer_list(const char *s, struct model_config *c)
{
	char *dup = strdup(s), *tok, *save = NULL;
	free(c->mlp_only);
	c->mlp_only = NULL;
	c->n_mlp_only = 0;
	for (tok = strtok_r(dup, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		long v;
		if (parse_long(tok, 0, 1 << 20, &v) < 0) {
			free(dup);
			return -1;
		}
		c->mlp_only = realloc(c->mlp_only,
				      (c->n_mlp_only + 1) * sizeof *c->mlp_only);
		c->mlp_only[c->n_mlp_only++] = v;
	}
	free(dup);
	return 0;
}

/* Integer options: which field each sets, and its range. */
enum { O_LAYERS, O_HIDDEN, O_HEADS, O_KV, O_HEAD_DIM, O_FFN, O_VOCAB,
       O_EXPERTS, O_TOPK, O_MOE_FFN, O_SHARED_FFN, O_SHARED_EXPERTS,
       O_SPARSE_STEP, O_FIRST_DENSE, O_QLORA, O_KVLORA, O_ROPE_DIM,
       O_NOPE_DIM, O_V_DIM, O_NGROUP, O_TOPK_GROUP, O_MTP, O_MAX_POS,
       O_COUNT };

static const struct {
	const char *name;
	long lo, hi;
} int_opts[O_COUNT] = {
	[O_LAYERS] = {"layers", 1, 4096},
	[O_HIDDEN] = {"hidden", 2, 1 << 20},
	[O_HEADS] = {"heads", 1, 4096},
	[O_KV] = {"kv-heads", 1, 4096},
	[O_HEAD_DIM] = {"head-dim", 2, 1 << 16},
	[O_FFN] = {"ffn", 1, 1 << 22},
	[O_VOCAB] = {"vocab", 2, 1 << 24},
	[O_EXPERTS] = {"experts", 1, 4096},
	[O_TOPK] = {"top-k", 1, 4096},
	[O_MOE_FFN] = {"moe-ffn", 1, 1 << 22},
	[O_SHARED_FFN] = {"shared-ffn", 0, 1 << 22},
	[O_SHARED_EXPERTS] = {"shared-experts", 0, 64},
	[O_SPARSE_STEP] = {"sparse-step", 1, 4096},
	[O_FIRST_DENSE] = {"first-dense", 0, 4096},
	[O_QLORA] = {"q-lora-rank", 0, 1 << 20},
	[O_KVLORA] = {"kv-lora-rank", 1, 1 << 20},
	[O_ROPE_DIM] = {"qk-rope-dim", 2, 1 << 16},
	[O_NOPE_DIM] = {"qk-nope-dim", 0, 1 << 16},
	[O_V_DIM] = {"v-head-dim", 1, 1 << 16},
	[O_NGROUP] = {"n-group", 1, 4096},
	[O_TOPK_GROUP] = {"topk-group", 1, 4096},
	[O_MTP] = {"mtp-layers", 0, 16},
	[O_MAX_POS] = {"max-pos", 16, 1 << 24},
};

/* Defaults for --arch: a tiny model of that family. */
static void arch_defaults(const char *arch, struct model_config *c)
{
	memset(c, 0, sizeof *c);
	snprintf(c->model_type, sizeof c->model_type, "%s", arch);
	snprintf(c->hidden_act, sizeof c->hidden_act, "silu");
	c->layers = 2;
	c->hidden = 64;
	c->heads = 4;
	c->kv_heads = 4;
	c->head_dim = 16;
	c->ffn = 128;
	c->vocab = 256;
	c->rms_eps = 1e-6;
	c->rope_theta = 10000.0;
	c->max_pos = 2048;
	c->dtype = DT_F32;
	c->decoder_sparse_step = 1;
	c->moe_layer_freq = 1;
	if (!strcmp(arch, "mixtral")) {
		c->experts = 4;
		c->top_k = 2;
		c->moe_ffn = c->ffn;
		c->rms_eps = 1e-5;
		c->rope_theta = 1e6;
		c->norm_topk_prob = 1;
	} else if (!strcmp(arch, "qwen2_moe") || !strcmp(arch, "qwen3_moe")) {
		c->experts = 4;
		c->top_k = 2;
		c->moe_ffn = 64;
		if (!strcmp(arch, "qwen2_moe")) {
			c->shared_ffn = 128;
			c->attention_bias = 1; /* qkv_bias */
		}
	} else if (!strcmp(arch, "qwen2")) {
		c->attention_bias = 1;
	} else if (!strcmp(arch, "deepseek_v3")) {
		c->layers = 3;
		c->experts = 8;
		c->top_k = 2;
		c->moe_ffn = 32;
		c->shared_experts = 1;
		c->first_dense = 1;
		c->n_group = 4;
		c->topk_group = 2;
		c->routed_scaling = 2.5;
		c->norm_topk_prob = 1;
		c->mla = 1;
		c->q_lora_rank = 32;
		c->kv_lora_rank = 16;
		c->qk_rope_dim = 8;
		c->qk_nope_dim = 16;
		c->v_head_dim = 16;
		c->head_dim = 8;
		c->mtp_layers = 1;
		c->rope_interleave = 1;
		snprintf(c->scoring, sizeof c->scoring, "sigmoid");
	}
}

static int set_quant(struct gen_opts *o, int like);

static int parse_opts(int argc, char **argv, struct gen_opts *o)
{
	static const struct option lo[] = {
		{"arch", 1, 0, 'a'}, {"like", 1, 0, 'l'}, {"scale", 1, 0, 'c'},
		{"tie", 0, 0, 't'}, {"attention-bias", 0, 0, 'b'},
		{"mlp-only-layers", 1, 0, 'M'},
		{"rope-scaling", 1, 0, 'r'}, {"rope-theta", 1, 0, 'T'},
		{"dtype", 1, 0, 'D'}, {"shards", 1, 0, 'N'}, {"seed", 1, 0, 'z'},
		{"force", 0, 0, 'F'}, {"events", 0, 0, 'e'}, {"help", 0, 0, 'h'},
		{"quant", 1, 0, 'Q'}, {"block", 1, 0, 'B'}, {"group", 1, 0, 'G'},
		{"for-layout", 1, 0, 'L'},
		/* integer options: val = 1000 + index into int_opts */
#define IO(i) {NULL, 1, 0, 1000 + (i)}
		IO(0), IO(1), IO(2), IO(3), IO(4), IO(5), IO(6), IO(7), IO(8),
		IO(9), IO(10), IO(11), IO(12), IO(13), IO(14), IO(15), IO(16),
		IO(17), IO(18), IO(19), IO(20), IO(21), IO(22),
#undef IO
		{0, 0, 0, 0},
	};
	struct option opts[sizeof lo / sizeof *lo];
	const struct step_entry *S = &step_gen_model;
	struct model_config *c = &o->cfg;
	struct d0_err err;
	long ival[O_COUNT];
	int given[O_COUNT] = {0};
	int ch, events = 0, tie = 0, bias = 0, have_dtype = 0;
	const char *arch = NULL, *like = NULL, *scale = "tiny", *mol = NULL;
	const char *for_layout = NULL;
	struct layout_dims fl;
	struct rope_scaling rope;
	double theta = 0;
	enum dtype dt = DT_F32;
	json_t *doc;

	memset(&rope, 0, sizeof rope);
	memcpy(opts, lo, sizeof lo);
	for (int i = 0; i < O_COUNT; i++)
		for (size_t k = 0; k < sizeof lo / sizeof *lo; k++)
			if (opts[k].val == 1000 + i)
				opts[k].name = int_opts[i].name;
	memset(o, 0, sizeof *o);
	o->shards = 1;
	o->block = -1;
	o->group = -1;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch >= 1000 && ch < 1000 + O_COUNT) {
			int i = ch - 1000;
			if (parse_long(optarg, int_opts[i].lo, int_opts[i].hi,
				       &ival[i]) < 0)
				return step_usage_error(
					S, "--%s: expected an integer in [%ld, "
					"%ld], got '%s'", int_opts[i].name,
					int_opts[i].lo, int_opts[i].hi, optarg);
			given[i] = 1;
			continue;
		}
		switch (ch) {
		case 'a': arch = optarg; break;
		case 'l': like = o->like = optarg; break;
		case 'c': scale = optarg; break;
		case 't': tie = 1; break;
		case 'b': bias = 1; break;
		case 'M': mol = optarg; break;
		case 'r':
			if (parse_rope_opt(optarg, &rope) < 0)
				return step_usage_error(S, "--rope-scaling: "
							"expected TYPE:FACTOR "
							"with TYPE linear, "
							"dynamic, yarn or "
							"llama3 and FACTOR >= "
							"1, got '%s'", optarg);
			break;
		case 'T':
			theta = strtod(optarg, NULL);
			if (!(theta > 1.0))
				return step_usage_error(S, "--rope-theta: "
							"expected a number > 1");
			break;
		case 'D':
			dt = dtype_from_user(optarg);
			have_dtype = 1;
			if (dt == DT_INVALID)
				return step_usage_error(S, "--dtype: expected "
							"f32, bf16 or f16, got "
							"'%s'", optarg);
			break;
		case 'N':
			if (parse_long(optarg, 1, 99999, &o->shards) < 0)
				return step_usage_error(S, "--shards: expected "
							"1..99999, got '%s'",
							optarg);
			break;
		case 'z':
			if (parse_size(optarg, &o->seed) < 0)
				return step_usage_error(S, "--seed: expected a "
							"non-negative integer");
			break;
		case 'L':
			if (layout_dims_parse(optarg, &fl) < 0)
				return step_usage_error(S, "--for-layout: "
							"expected TP,PP,EP "
							"positive integers, "
							"got '%s'", optarg);
			for_layout = optarg;
			break;
		case 'F': o->force = 1; break;
		case 'Q':
			if (strcmp(optarg, "fp8") && strcmp(optarg, "fp8-e5m2") &&
			    strcmp(optarg, "int4") && strcmp(optarg, "int8") &&
			    strcmp(optarg, "none"))
				return step_usage_error(S, "--quant: expected fp8, "
							"fp8-e5m2, int4, int8 or "
							"none, got '%s'", optarg);
			o->quant = optarg;
			break;
		case 'B':
			if (parse_long(optarg, 1, 65536, &o->block) < 0)
				return step_usage_error(S, "--block: expected "
							"1..65536, got '%s'",
							optarg);
			break;
		case 'G':
			if (parse_long(optarg, 0, 1 << 20, &o->group) < 0)
				return step_usage_error(S, "--group: expected "
							"0..1048576, got '%s'",
							optarg);
			break;
		case 'e': events = 1; break;
		case 'h': step_help(S); return -1;
		default:
			return step_usage_error(S, "unknown or incomplete "
						"option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected exactly one OUT_DIR");
	o->out = argv[optind];
	if (!arch == !like)
		return step_usage_error(S, "give exactly one of --arch and "
					"--like (--arch is required without "
					"--like)");
	if (for_layout && !like)
		return step_usage_error(S, "--for-layout needs --like CONFIG "
					"(it sizes a model of that structure)");
	if (like) {
		struct model_config real;
		if (model_config_load(like, &real, &err) < 0) {
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			return EXIT_USAGE;
		}
		if (model_config_shrink(&real, scale,
					given[O_LAYERS] ? ival[O_LAYERS] : 0, c,
					&err) < 0) {
			model_config_free(&real);
			return step_usage_error(S, "%s", err.msg);
		}
		if (for_layout &&
		    model_config_fit_layout(&real, &fl, c, &err) < 0) {
			model_config_free(&real);
			return step_usage_error(S, "%s", err.msg);
		}
		if (for_layout && given[O_LAYERS]) /* at least pp of them */
			ival[O_LAYERS] = c->layers;
		model_config_free(&real);
		for (int i = 0; i < O_COUNT; i++)
			if (given[i] && i != O_LAYERS)
				return step_usage_error(S, "--%s cannot be "
							"combined with --like "
							"(only --layers can)",
							int_opts[i].name);
	} else {
		if (!model_arch_known(arch) || !strcmp(arch, "kimi_k2"))
			return step_usage_error(S, "--arch: '%s' is not one of "
						"llama, mistral, qwen2, qwen3, "
						"mixtral, qwen2_moe, qwen3_moe, "
						"deepseek_v3", arch);
		arch_defaults(arch, c);
	}
	if (given[O_LAYERS]) c->layers = ival[O_LAYERS];
	if (given[O_HIDDEN]) c->hidden = ival[O_HIDDEN];
	if (given[O_HEADS]) c->heads = ival[O_HEADS];
	if (given[O_KV]) c->kv_heads = ival[O_KV];
	else if (given[O_HEADS] && !like) c->kv_heads = c->heads;
	if (given[O_HEAD_DIM]) c->head_dim = ival[O_HEAD_DIM];
	else if ((given[O_HIDDEN] || given[O_HEADS]) && !c->mla)
		c->head_dim = c->hidden % c->heads ? 0 : c->hidden / c->heads;
	if (given[O_FFN]) c->ffn = ival[O_FFN];
	if (given[O_VOCAB]) c->vocab = ival[O_VOCAB];
	if (given[O_EXPERTS] || given[O_MOE_FFN] || given[O_SHARED_FFN] ||
	    given[O_TOPK]) {
		if (!c->experts)
			return step_usage_error(S, "--experts, --top-k, "
						"--moe-ffn and --shared-ffn apply "
						"to MoE architectures only");
	}
	if (given[O_EXPERTS]) c->experts = ival[O_EXPERTS];
	if (given[O_TOPK]) c->top_k = ival[O_TOPK];
	if (given[O_MOE_FFN]) c->moe_ffn = ival[O_MOE_FFN];
	if (!strcmp(c->model_type, "mixtral")) c->moe_ffn = c->ffn;
	if (given[O_SHARED_FFN]) c->shared_ffn = ival[O_SHARED_FFN];
	if (given[O_SPARSE_STEP]) c->decoder_sparse_step = ival[O_SPARSE_STEP];
	if (mol && parse_layer_list(mol, c) < 0)
		return step_usage_error(S, "--mlp-only-layers: expected a comma "
					"list of layer indices, got '%s'", mol);
	if (given[O_FIRST_DENSE]) c->first_dense = ival[O_FIRST_DENSE];
	if (given[O_SHARED_EXPERTS]) c->shared_experts = ival[O_SHARED_EXPERTS];
	if (given[O_QLORA]) c->q_lora_rank = ival[O_QLORA];
	if (given[O_KVLORA]) c->kv_lora_rank = ival[O_KVLORA];
	if (given[O_ROPE_DIM]) c->qk_rope_dim = ival[O_ROPE_DIM];
	if (given[O_NOPE_DIM]) c->qk_nope_dim = ival[O_NOPE_DIM];
	if (given[O_V_DIM]) c->v_head_dim = ival[O_V_DIM];
	if (given[O_NGROUP]) c->n_group = ival[O_NGROUP];
	if (given[O_TOPK_GROUP]) c->topk_group = ival[O_TOPK_GROUP];
	if (given[O_MTP]) c->mtp_layers = ival[O_MTP];
	if (given[O_MAX_POS]) c->max_pos = ival[O_MAX_POS];
	if (tie) c->tie_embeddings = 1;
	if (bias) c->attention_bias = 1;
	if (rope.type[0]) c->rope = rope;
	if (c->rope.type[0] && !c->rope.original_max_pos)
		c->rope.original_max_pos = (double)c->max_pos;
	if (theta > 0) c->rope_theta = theta;
	if (have_dtype || !like) c->dtype = dt;
	if (set_quant(o, like != NULL) != 0)
		return EXIT_USAGE;
	if (c->head_dim == 0 && !c->mla)
		return step_usage_error(S, "--hidden %lld is not a multiple of "
					"--heads %lld (or give --head-dim)",
					(long long)c->hidden, (long long)c->heads);
	if (!strcmp(c->model_type, "qwen2_moe") || !strcmp(c->model_type, "qwen2"))
		if (c->head_dim * c->heads != c->hidden)
			return step_usage_error(S, "%s has no head_dim key: head "
						"dim must be hidden/heads",
						c->model_type);

	/*
	 * Write the config as transformers would and read it back with the
	 * parser verify uses: any inconsistency is reported the same way,
	 * and the tensors we write are exactly what verify will expect.
	 */
	if (c->vision.kind != VISION_NONE) /* --for-layout may widen the LM */
		c->vision.out_hidden = c->hidden;
	doc = model_config_to_json(c);
	model_config_free(c);
	if (model_config_from_json(doc, "generated config.json", c, &err) < 0) {
		json_decref(doc);
		return step_usage_error(S, "%s", err.msg);
	}
	json_decref(doc);
	events_init(stdout, events);
	return 0;
}

/*
 * The storage format: --quant for any family, or what the --like config
 * declares.  A rehearsal model is far smaller than its release, so --like
 * scales blocks and groups down with it (several blocks per weight, so
 * splits on block boundaries are exercised); --block/--group override.
 */
static int set_quant(struct gen_opts *o, int like)
{
	const struct step_entry *S = &step_gen_model;
	struct quant_config *q = &o->cfg.qc;
	char why[200];
	if (o->quant) {
		memset(q, 0, sizeof *q);
		if (!strncmp(o->quant, "fp8", 3)) {
			q->kind = QUANT_FP8_BLOCK;
			q->fp8_dtype = strcmp(o->quant, "fp8") ? DT_F8_E5M2
							      : DT_F8_E4M3;
			q->block[0] = q->block[1] = 128;
		} else if (!strncmp(o->quant, "int", 3)) {
			q->kind = QUANT_PACKED_INT;
			q->bits = o->quant[3] == '4' ? 4 : 8;
			q->group = 32;
			q->regex_ignore = 1;
			q->nignore = 1;
			snprintf(q->ignore, sizeof q->ignore, "lm_head");
		}
	} else if (like && q->kind != QUANT_NONE) {
		int64_t cap = o->cfg.hidden / 8;
		if (q->block[0] > cap)
			q->block[0] = cap;
		if (q->block[1] > cap)
			q->block[1] = cap;
		if (q->group > cap)
			q->group = cap;
	}
	if (o->block > 0 || o->group >= 0) {
		if (q->kind == QUANT_NONE)
			return step_usage_error(S, "--block and --group need "
						"--quant (or a --like config that "
						"declares quantization)");
		if (o->block > 0 && q->kind != QUANT_FP8_BLOCK)
			return step_usage_error(S, "--block applies to fp8");
		if (o->group >= 0 && q->kind != QUANT_PACKED_INT)
			return step_usage_error(S, "--group applies to int4/int8");
		if (o->block > 0)
			q->block[0] = q->block[1] = o->block;
		if (o->group >= 0)
			q->group = o->group;
	}
	if (q->kind != QUANT_NONE) {
		struct tensor_spec *t = NULL;
		size_t n = 0;
		struct d0_err err;
		const struct weight_format *f = format_of(q);
		if (model_tensors(&o->cfg, &t, &n, &err) < 0)
			return step_usage_error(S, "%s", err.msg);
		for (size_t i = 0; i < n; i++)
			if (f->unfit && quant_applies(q, &t[i]) &&
			    f->unfit(q, &t[i], why, sizeof why)) {
				free(t);
				return step_usage_error(S, "tensor '%s': %s "
							"(choose another "
							"--group)", t[i].name,
							why);
			}
		free(t);
	}
	return 0;
}

/* Assign tensors to shards: contiguous runs balanced by bytes, none empty. */
static void assign_shards(const struct tensor_spec *t, size_t n,
			  const struct model_config *c, long shards, int *which)
{
	uint64_t total = 0, cum = 0;
	size_t cnt = 0;
	long s = 0;
	for (size_t i = 0; i < n; i++)
		total += t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
	for (size_t i = 0; i < n; i++) {
		uint64_t numel = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
		long want = (long)((double)cum * (double)shards / (double)total);
		if (cnt && (want > s || (long)(n - i) <= shards - 1 - s)) {
			s++;
			cnt = 0;
		}
		which[i] = (int)s;
		cnt++;
		cum += numel;
	}
	(void)c;
}

static enum dtype stored_dtype(const struct model_config *c,
			       const struct tensor_spec *t)
{
	(void)t; /* transformers saves every tensor in torch_dtype */
	return c->dtype;
}

static uint64_t part_numel(const struct stored_part *p)
{
	return p->shape[0] * (p->ndim == 2 ? p->shape[1] : 1);
}

/*
 * Scales of a quantised weight: what a max-abs calibration would give for
 * values of the tensor's distribution (uniform, amax std * sqrt(3)), times
 * 1 to 1.5 per block or group, so every block's scale differs.  Rounded to
 * the part's dtype, since encoding must use the stored scales.
 */
static void *gen_scales(const struct gen_opts *o, const struct tensor_spec *t,
			const struct stored_part *sp, double std)
{
	uint64_t n = part_numel(sp);
	void *out = malloc(n * dtype_size(sp->dtype) + 4);
	struct rng r;
	char name[sizeof sp->name];
	double base = std * sqrt(3.0) / quant_level_max(&o->cfg.qc);
	snprintf(name, sizeof name, "%s#scale", t->name);
	rng_seed(&r, o->seed * 0x9e3779b97f4a7c15ULL ^ hash_str64(name));
	for (uint64_t i = 0; i < n; i++) {
		float s = (float)(base * (1.0 + 0.5 * rng_uniform(&r)));
		dtype_convert(DT_F32, &s, sp->dtype, (char *)out +
			      i * dtype_size(sp->dtype), 1);
	}
	return out;
}

/* Write one quantised weight's parts (declared at k, k+1, ...). */
static int write_quantised(const struct gen_opts *o, struct st_writer *w,
			   size_t k, const struct tensor_spec *t,
			   const struct stored_part *sp, int np, struct rng *r,
			   double std, float *f, void *conv, uint64_t *done,
			   struct d0_err *err)
{
	const struct quant_config *q = &o->cfg.qc;
	const struct weight_format *fmt = format_of(q);
	uint64_t numel = t->shape[0] * t->shape[1], off = 0, vbytes = 0;
	void *scales = gen_scales(o, t, &sp[1], std);
	struct quant_view v = {.rows = t->shape[0], .cols = t->shape[1],
			       .scale = scales, .scale_dtype = sp[1].dtype,
			       .scale_cols = sp[1].shape[1]};
	int rc = 0;
	/* bytes per logical element of the values part, as a fraction */
	uint64_t vnum = part_numel(&sp[0]) * dtype_size(sp[0].dtype);
	while (off < numel && rc == 0) {
		size_t m = numel - off > GEN_CHUNK ? GEN_CHUNK : (size_t)(numel - off);
		uint64_t b = (off + m) * vnum / numel - off * vnum / numel;
		fill(f, m, r, std, 0.0);
		fmt->encode(q, &v, off, m, f, conv);
		rc = st_writer_put(w, k, vbytes, conv, (size_t)b, err);
		vbytes += b;
		off += m;
	}
	if (rc == 0)
		rc = st_writer_put(w, k + 1, 0, scales,
				   part_numel(&sp[1]) * dtype_size(sp[1].dtype),
				   err);
	if (rc == 0 && np == 3) { /* weight_shape */
		int32_t shp[2] = {(int32_t)t->shape[0], (int32_t)t->shape[1]};
		rc = st_writer_put(w, k + 2, 0, shp, sizeof shp, err);
	}
	for (int i = 0; i < np; i++)
		*done += part_numel(&sp[i]) * dtype_size(sp[i].dtype);
	free(scales);
	return rc;
}

static int write_shard(const struct gen_opts *o, const struct tensor_spec *t,
		       size_t n, const int *which, int shard, const char *path,
		       uint64_t *done, uint64_t total, char hex[65],
		       struct d0_err *err)
{
	const struct model_config *c = &o->cfg;
	struct st_writer *w = st_writer_new();
	float *f = malloc(GEN_CHUNK * sizeof *f);
	void *conv = malloc(GEN_CHUNK * 4);
	struct stored_part sp[3];
	size_t k = 0;
	int rc = 0;
	if (!f || !conv)
		abort();
	st_writer_meta(w, "format", "pt");
	for (size_t i = 0; i < n; i++) {
		int np;
		if (which[i] != shard)
			continue;
		np = quant_parts(&c->qc, &t[i], stored_dtype(c, &t[i]), sp);
		for (int p = 0; p < np; p++)
			st_writer_add(w, sp[p].name, sp[p].dtype, sp[p].ndim,
				      sp[p].shape);
	}
	if (st_writer_begin(w, path, err) < 0) {
		rc = -1;
		goto out;
	}
	for (size_t i = 0; i < n && rc == 0; i++) {
		uint64_t numel, off = 0;
		enum dtype dt = stored_dtype(c, &t[i]);
		struct rng r;
		double std = tensor_std(c, &t[i]);
		double mean = t[i].role == ROLE_NORM ? 1.0 : 0.0;
		int np;
		if (which[i] != shard)
			continue;
		rng_seed(&r, o->seed * 0x9e3779b97f4a7c15ULL ^
				     hash_str64(t[i].name));
		np = quant_parts(&c->qc, &t[i], dt, sp);
		if (np > 1) {
			rc = write_quantised(o, w, k, &t[i], sp, np, &r, std, f,
					     conv, done, err);
			k += (size_t)np;
		} else {
			numel = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
			while (off < numel) {
				size_t m = numel - off > GEN_CHUNK
						   ? GEN_CHUNK
						   : (size_t)(numel - off);
				fill(f, m, &r, std, mean);
				dtype_convert(DT_F32, f, dt, conv, m);
				if (st_writer_put(w, k, off * dtype_size(dt), conv,
						  m * dtype_size(dt), err) < 0) {
					rc = -1;
					break;
				}
				off += m;
				*done += m * dtype_size(dt);
			}
			k++;
		}
		if (events_enabled())
			events_stage("gen-model", "progress",
				     total ? (double)*done / (double)total : 1.0,
				     0, t[i].name);
	}
	if (rc == 0)
		rc = st_writer_finish(w, err);
	if (rc == 0 && st_writer_sha256(w, hex) < 0)
		rc = sha256_file(path, hex, NULL, err);
out:
	st_writer_free(w);
	free(f);
	free(conv);
	return rc;
}

/*
 * A vision-language model's preprocessor_config.json: the release's own
 * (beside the --like config.json), else transformers' image processor
 * defaults for the family with the config's patch and merge sizes
 * (Qwen2VLImageProcessor: min 56*56, max 28*28*1280 pixels; CLIP: the
 * tower's image_size), mean and std OpenAI CLIP's as both classes have.
 * The tiny tower keeps the real patch, merge and image sizes, so the
 * release's preprocessing feeds it unchanged.
 */
static int write_preprocessor(const struct gen_opts *o, const char *dir,
			      struct d0_err *err)
{
	const struct vision_config *v = &o->cfg.vision;
	json_t *doc = NULL;
	char *p;
	int rc;
	if (o->like) {
		char *d = strdup(o->like), *slash = strrchr(d, '/');
		if (slash)
			*slash = 0;
		else
			strcpy(d, ".");
		p = path_join(d, "preprocessor_config.json");
		free(d);
		doc = json_load_file(p, JSON_REJECT_DUPLICATES, NULL);
		if (!doc && path_exists(p)) {
			rc = d0_errf(err, "%s: invalid JSON", p);
			free(p);
			return rc;
		}
		free(p);
	}
	if (!doc && v->kind == VISION_CLIP)
		doc = json_pack(
			"{s:{s:I, s:I}, s:b, s:b, s:b, s:b, s:b, s:[f, f, f], "
			"s:s, s:[f, f, f], s:s, s:i, s:f, s:{s:I}}", "crop_size",
			"height", (json_int_t)v->image_size, "width",
			(json_int_t)v->image_size, "do_center_crop", 1,
			"do_convert_rgb", 1, "do_normalize", 1, "do_rescale", 1,
			"do_resize", 1, "image_mean", 0.48145466, 0.4578275,
			0.40821073, "image_processor_type", "CLIPImageProcessor",
			"image_std", 0.26862954, 0.26130258, 0.27577711,
			"processor_class", "LlavaProcessor", "resample", 3,
			"rescale_factor", 1.0 / 255.0, "size", "shortest_edge",
			(json_int_t)v->image_size);
	else if (!doc && v->kind == VISION_KIMI) /* the processor's defaults */
		doc = json_pack("{s:I, s:I, s:[I, I], s:b, s:[f, f, f], "
				"s:[f, f, f], s:s, s:s}", "patch_size",
				(json_int_t)v->patch, "in_token_limit",
				(json_int_t)4096, "merge_kernel_size",
				(json_int_t)v->merge, (json_int_t)v->merge,
				"pad_input", 1, "image_mean", 0.5, 0.5, 0.5,
				"image_std", 0.5, 0.5, 0.5,
				"image_processor_type", "KimiVLImageProcessor",
				"processor_class", "KimiVLProcessor");
	else if (!doc)
		doc = json_pack("{s:I, s:I, s:I, s:I, s:I, s:[f, f, f], "
				"s:[f, f, f], s:s}", "min_pixels",
				(json_int_t)3136, "max_pixels",
				(json_int_t)(28 * 28 * 1280), "patch_size",
				(json_int_t)v->patch, "temporal_patch_size",
				(json_int_t)v->temporal_patch, "merge_size",
				(json_int_t)v->merge, "image_mean", 0.48145466,
				0.4578275, 0.40821073, "image_std", 0.26862954,
				0.26130258, 0.27577711, "image_processor_type",
				"Qwen2VLImageProcessor");
	p = path_join(dir, "preprocessor_config.json");
	rc = json_write_file(doc, p, 1, err);
	free(p);
	json_decref(doc);
	return rc;
}

/* The generated tokenizer's ids of the image placeholders, into the
 * config (the tiny vocabulary has no room for the release's ids). */
static int placeholder_ids(const char *dir, struct model_config *c,
			   struct d0_err *err)
{
	struct vision_config *v = &c->vision;
	struct tokenizer *t;
	static const char *const qwen[] = {"<|image_pad|>", "<|video_pad|>",
					   "<|vision_start|>", "<|vision_end|>"};
	int64_t *dst[] = {&v->image_token_id, &v->video_token_id,
			  &v->vision_start_id, &v->vision_end_id};
	int nq = v->kind == VISION_CLIP || v->kind == VISION_KIMI ? 1 : 4;
	if (tokenizer_open(dir, &t, err) < 0)
		return -1;
	for (int k = 0; k < nq; k++) {
		const char *want = v->kind == VISION_CLIP   ? "<image>"
				   : v->kind == VISION_KIMI ? "<|media_pad|>"
							    : qwen[k];
		*dst[k] = -1;
		for (int64_t id = 0; id < c->vocab && *dst[k] < 0; id++) {
			const char *s = tokenizer_id_token(t, id);
			if (s && !strcmp(s, want))
				*dst[k] = id;
		}
		if (*dst[k] < 0) {
			tokenizer_free(t);
			return d0_errf(err, "%s/tokenizer.json: no '%s' token",
				       dir, want);
		}
	}
	tokenizer_free(t);
	return 0;
}

static int write_checkpoint(struct gen_opts *o, const char *dir,
			    struct d0_err *err, size_t *ntensors,
			    uint64_t *bytes)
{
	const struct model_config *c = &o->cfg;
	struct tensor_spec *t = NULL;
	size_t n = 0;
	int *which = NULL, rc = -1;
	uint64_t total = 0, done = 0;
	json_t *wm = NULL, *doc;
	char **files = NULL, (*hexes)[65] = NULL;
	size_t nfiles = 0;
	int wrote_tok = 0;
	FILE *sums = NULL;
	char *p;

	if (model_tensors(c, &t, &n, err) < 0)
		return -1;
	if ((size_t)o->shards > n) {
		d0_errf(err, "--shards %ld: the model has only %zu tensors",
			o->shards, n);
		goto out;
	}
	which = calloc(n, sizeof *which);
	assign_shards(t, n, c, o->shards, which);
	for (size_t i = 0; i < n; i++)
		total += quant_stored_bytes(&c->qc, &t[i],
					    stored_dtype(c, &t[i]), -1, 1);
	files = calloc((size_t)o->shards + 6, sizeof *files);
	hexes = calloc((size_t)o->shards + 6, sizeof *hexes);

	/* the tokenizer first: a VL config names its placeholders' ids */
	if (tokenizer_write_family(dir, c->vision.kind != VISION_NONE
						? c->vision.vl_type
						: c->model_type,
				   c->vocab, &wrote_tok, err) < 0)
		goto out;
	if (c->vision.kind != VISION_NONE &&
	    (!wrote_tok ? d0_errf(err, "vocab %lld is too small for the "
				  "tokenizer's image placeholders",
				  (long long)c->vocab)
			: placeholder_ids(dir, &o->cfg, err)) < 0)
		goto out;
	doc = model_config_to_json(c);
	p = path_join(dir, "config.json");
	rc = json_write_file(doc, p, 1, err);
	free(p);
	json_decref(doc);
	if (rc < 0)
		goto out;
	files[nfiles++] = strdup("config.json");

	wm = json_object();
	for (long s = 0; s < o->shards; s++) {
		char name[64];
		if (o->shards == 1)
			snprintf(name, sizeof name, "model.safetensors");
		else
			snprintf(name, sizeof name,
				 "model-%05ld-of-%05ld.safetensors", s + 1,
				 o->shards);
		p = path_join(dir, name);
		rc = write_shard(o, t, n, which, (int)s, p, &done, total,
				 hexes[nfiles], err);
		free(p);
		if (rc < 0)
			goto out;
		files[nfiles++] = strdup(name);
		for (size_t i = 0; i < n; i++) {
			struct stored_part sp[3];
			int np = quant_parts(&c->qc, &t[i],
					     stored_dtype(c, &t[i]), sp);
			for (int j = 0; which[i] == s && j < np; j++)
				json_object_set_new(wm, sp[j].name,
						    json_string(name));
		}
	}
	if (o->shards > 1) {
		const char **keys = calloc(json_object_size(wm) + 1,
					   sizeof *keys);
		json_t *sorted = json_object();
		size_t k = 0;
		const char *key;
		json_t *v;
		json_object_foreach(wm, key, v)
			keys[k++] = key;
		qsort(keys, k, sizeof *keys, (int (*)(const void *,
						     const void *))strcmp);
		/* HF writes the weight_map sorted by tensor name. */
		for (size_t i = 0; i < k; i++) {
			const char **kp = &keys[i];
			json_object_set(sorted, *kp, json_object_get(wm, *kp));
		}
		free(keys);
		doc = json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
				(json_int_t)total, "weight_map", sorted);
		p = path_join(dir, "model.safetensors.index.json");
		rc = json_write_file(doc, p, 1, err);
		free(p);
		json_decref(doc);
		if (rc < 0)
			goto out;
		files[nfiles++] = strdup("model.safetensors.index.json");
	}
	/* listed last: the shards keep their lines */
	if (wrote_tok) {
		files[nfiles++] = strdup("tokenizer.json");
		files[nfiles++] = strdup("tokenizer_config.json");
	}
	if (c->vision.kind != VISION_NONE) {
		if (write_preprocessor(o, dir, err) < 0) {
			rc = -1;
			goto out;
		}
		files[nfiles++] = strdup("preprocessor_config.json");
	}
	p = path_join(dir, "SHA256SUMS");
	sums = fopen(p, "w");
	free(p);
	if (!sums) {
		rc = d0_errf(err, "%s/SHA256SUMS: cannot create", dir);
		goto out;
	}
	for (size_t i = 0; i < nfiles; i++) {
		if (!hexes[i][0]) { /* config.json, the index */
			p = path_join(dir, files[i]);
			rc = sha256_file(p, hexes[i], NULL, err);
			free(p);
			if (rc < 0)
				goto out;
		}
		fprintf(sums, "%s  %s\n", hexes[i], files[i]);
	}
	if (fclose(sums) != 0) {
		sums = NULL;
		rc = d0_errf(err, "%s/SHA256SUMS: write failed", dir);
		goto out;
	}
	sums = NULL;
	*ntensors = n;
	*bytes = total;
	rc = 0;
out:
	if (sums)
		fclose(sums);
	for (size_t i = 0; i < nfiles; i++)
		free(files[i]);
	free(files);
	free(hexes);
	json_decref(wm);
	free(which);
	free(t);
	return rc;
}

static int run(int argc, char **argv)
{
	struct gen_opts o;
	struct outdir od;
	struct d0_err err;
	size_t ntensors = 0;
	uint64_t bytes = 0;
	char b[32];
	int rc = parse_opts(argc, argv, &o);
	if (rc != 0) {
		model_config_free(&o.cfg);
		return rc < 0 ? EXIT_OK : rc;
	}
	events_stage("gen-model", "start", 0, 0, o.out);
	if (outdir_begin(&od, o.out, o.force, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage("gen-model", "end", 1, EXIT_USAGE, err.msg);
		model_config_free(&o.cfg);
		return EXIT_USAGE;
	}
	if (write_checkpoint(&o, od.partial, &err, &ntensors, &bytes) < 0 ||
	    outdir_commit(&od, &err) < 0) {
		outdir_abort(&od);
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage("gen-model", "end", 1, EXIT_USAGE, err.msg);
		model_config_free(&o.cfg);
		return EXIT_USAGE;
	}
	if (!events_enabled())
		printf("wrote %s: %s, %lld layers, hidden %lld, %zu tensors in "
		       "%ld shard%s, %s (%s)\n", o.out, o.cfg.model_type,
		       (long long)o.cfg.layers, (long long)o.cfg.hidden,
		       ntensors, o.shards, o.shards == 1 ? "" : "s",
		       fmt_bytes(bytes, b), dtype_user_name(o.cfg.dtype));
	events_stage("gen-model", "end", 1, 0, o.out);
	model_config_free(&o.cfg);
	return EXIT_OK;
}
