/*
 * step_gen_model.c - `day0-engine gen-model`: the engine's stand-in for a
 * model download.  Writes a Hugging Face-format checkpoint (config.json,
 * shards, index, SHA256SUMS) whose structure is exactly what transformers
 * would save for that config, with deterministic weights.
 *
 * Each tensor draws from its own generator seeded by (seed, tensor name),
 * so values do not depend on the shard count or the tensor order.  Weights
 * are scaled like a trained network's (linear layers ~ 1/sqrt(fan_in),
 * residual outputs further by 1/sqrt(2 * layers), norms near 1) so the
 * forward pass is well conditioned.  Tensors are generated in bounded
 * chunks: memory does not grow with the model.
 */
#include "engine.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GEN_CHUNK (1u << 18) /* elements per generated chunk */

static int run(int argc, char **argv);

const struct step_entry step_gen_model = {
	.name = "gen-model",
	.usage = "--arch llama|qwen3|mixtral|qwen2_moe [--layers N] "
		 "[--hidden N] [--heads N] [--kv-heads N] [--head-dim N] "
		 "[--ffn N] [--vocab N] [--experts N] [--top-k N] "
		 "[--moe-ffn N] [--shared-ffn N] [--sparse-step N] "
		 "[--mlp-only-layers L,L] [--tie] [--attention-bias] "
		 "[--rope-scaling TYPE:FACTOR] [--rope-theta X] "
		 "[--max-pos N] [--dtype f32|bf16|f16] [--shards N] "
		 "[--seed N] [--force] [--events] OUT_DIR",
	.summary = "generate a Hugging Face-format checkpoint (tiny, "
		   "deterministic, real structure)",
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
	long shards;
	uint64_t seed;
	int force;
	const char *out;
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

static int parse_opts(int argc, char **argv, struct gen_opts *o)
{
	static const struct option lo[] = {
		{"arch", 1, 0, 'a'}, {"layers", 1, 0, 'L'},
		{"hidden", 1, 0, 'H'}, {"heads", 1, 0, 'n'},
		{"kv-heads", 1, 0, 'k'}, {"head-dim", 1, 0, 'd'},
		{"ffn", 1, 0, 'f'}, {"vocab", 1, 0, 'V'},
		{"experts", 1, 0, 'E'}, {"top-k", 1, 0, 'K'},
		{"moe-ffn", 1, 0, 'm'}, {"shared-ffn", 1, 0, 's'},
		{"sparse-step", 1, 0, 'S'}, {"mlp-only-layers", 1, 0, 'M'},
		{"tie", 0, 0, 't'}, {"attention-bias", 0, 0, 'b'},
		{"rope-scaling", 1, 0, 'r'}, {"rope-theta", 1, 0, 'T'},
		{"max-pos", 1, 0, 'P'}, {"dtype", 1, 0, 'D'},
		{"shards", 1, 0, 'N'}, {"seed", 1, 0, 'z'},
		{"force", 0, 0, 'F'}, {"events", 0, 0, 'e'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0},
	};
	const struct step_entry *S = &step_gen_model;
	struct model_config *c = &o->cfg;
	long v;
	int ch, events = 0;
	int64_t head_dim = 0, kv = 0, experts = -1, moe_ffn = 0, shared = -1;
	const char *arch = NULL;

	memset(o, 0, sizeof *o);
	c->layers = 2;
	c->hidden = 64;
	c->heads = 4;
	c->ffn = 128;
	c->vocab = 256;
	c->top_k = 2;
	c->decoder_sparse_step = 1;
	c->rms_eps = 1e-6;
	c->rope_theta = 10000.0;
	c->max_pos = 2048;
	c->dtype = DT_F32;
	o->shards = 1;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
#define NUM(dst, lo_, hi_, what)                                             \
	do {                                                                 \
		if (parse_long(optarg, lo_, hi_, &v) < 0)                    \
			return step_usage_error(S, "--%s: expected an integer " \
						"in [%ld, %ld], got '%s'",   \
						what, (long)(lo_),           \
						(long)(hi_), optarg);        \
		dst = v;                                                     \
	} while (0)
		switch (ch) {
		case 'a': arch = optarg; break;
		case 'L': NUM(c->layers, 1, 4096, "layers"); break;
		case 'H': NUM(c->hidden, 2, 1 << 20, "hidden"); break;
		case 'n': NUM(c->heads, 1, 4096, "heads"); break;
		case 'k': NUM(kv, 1, 4096, "kv-heads"); break;
		case 'd': NUM(head_dim, 2, 1 << 16, "head-dim"); break;
		case 'f': NUM(c->ffn, 1, 1 << 22, "ffn"); break;
		case 'V': NUM(c->vocab, 2, 1 << 24, "vocab"); break;
		case 'E': NUM(experts, 1, 4096, "experts"); break;
		case 'K': NUM(c->top_k, 1, 4096, "top-k"); break;
		case 'm': NUM(moe_ffn, 1, 1 << 22, "moe-ffn"); break;
		case 's': NUM(shared, 0, 1 << 22, "shared-ffn"); break;
		case 'S': NUM(c->decoder_sparse_step, 1, 4096, "sparse-step"); break;
		case 'M':
			if (parse_layer_list(optarg, c) < 0)
				return step_usage_error(S, "--mlp-only-layers: "
							"expected a comma list "
							"of layer indices, got "
							"'%s'", optarg);
			break;
		case 't': c->tie_embeddings = 1; break;
		case 'b': c->attention_bias = 1; break;
		case 'r':
			if (parse_rope_opt(optarg, &c->rope) < 0)
				return step_usage_error(S, "--rope-scaling: "
							"expected TYPE:FACTOR "
							"with TYPE linear, "
							"dynamic, yarn or "
							"llama3 and FACTOR >= "
							"1, got '%s'", optarg);
			break;
		case 'T':
			c->rope_theta = strtod(optarg, NULL);
			if (!(c->rope_theta > 1.0))
				return step_usage_error(S, "--rope-theta: "
							"expected a number > 1");
			break;
		case 'P': NUM(c->max_pos, 16, 1 << 24, "max-pos"); break;
		case 'D':
			c->dtype = dtype_from_user(optarg);
			if (c->dtype == DT_INVALID)
				return step_usage_error(S, "--dtype: expected "
							"f32, bf16 or f16, got "
							"'%s'", optarg);
			break;
		case 'N': NUM(o->shards, 1, 99999, "shards"); break;
		case 'z':
			if (parse_size(optarg, &o->seed) < 0)
				return step_usage_error(S, "--seed: expected a "
							"non-negative integer");
			break;
		case 'F': o->force = 1; break;
		case 'e': events = 1; break;
		case 'h': step_usage(S, stdout); return -1;
		default:
			return step_usage_error(S, "unknown or incomplete "
						"option '%s'", argv[optind - 1]);
		}
#undef NUM
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected exactly one OUT_DIR");
	o->out = argv[optind];
	if (!arch)
		return step_usage_error(S, "--arch is required");
	if (!model_arch_known(arch))
		return step_usage_error(S, "--arch: '%s' is not one of llama, "
					"qwen3, mixtral, qwen2_moe", arch);
	snprintf(c->model_type, sizeof c->model_type, "%s", arch);
	c->kv_heads = kv ? kv : c->heads;
	if (c->heads % c->kv_heads)
		return step_usage_error(S, "--heads %lld is not a multiple of "
					"--kv-heads %lld", (long long)c->heads,
					(long long)c->kv_heads);
	if (!strcmp(arch, "qwen2_moe")) {
		if (head_dim && head_dim * c->heads != c->hidden)
			return step_usage_error(S, "qwen2_moe has no head_dim "
						"key: head dim is hidden/heads");
		if (c->hidden % c->heads)
			return step_usage_error(S, "--hidden %lld is not a "
						"multiple of --heads %lld",
						(long long)c->hidden,
						(long long)c->heads);
	}
	if (!head_dim) {
		if (c->hidden % c->heads)
			return step_usage_error(S, "--hidden %lld is not a "
						"multiple of --heads %lld (or "
						"give --head-dim)",
						(long long)c->hidden,
						(long long)c->heads);
		head_dim = c->hidden / c->heads;
	}
	if (head_dim % 2)
		return step_usage_error(S, "head dim %lld must be even",
					(long long)head_dim);
	c->head_dim = head_dim;
	if (!strcmp(arch, "mixtral") || !strcmp(arch, "qwen2_moe")) {
		c->experts = experts > 0 ? experts : 4;
		c->moe_ffn = !strcmp(arch, "mixtral") ? c->ffn
				   : (moe_ffn ? moe_ffn : c->ffn / 2);
		if (!strcmp(arch, "qwen2_moe")) {
			c->shared_ffn = shared >= 0 ? shared : c->ffn;
			c->norm_topk_prob = 0;
		} else {
			c->norm_topk_prob = 1;
		}
		if (c->top_k > c->experts)
			return step_usage_error(S, "--top-k %lld exceeds "
						"--experts %lld",
						(long long)c->top_k,
						(long long)c->experts);
	} else if (experts > 0 || moe_ffn) {
		return step_usage_error(S, "--experts/--moe-ffn apply to "
					"mixtral and qwen2_moe only");
	}
	if (c->rope.type[0])
		c->rope.original_max_pos = (double)c->max_pos;
	if (!strcmp(arch, "mixtral")) { /* MixtralConfig's own defaults */
		c->rope_theta = c->rope_theta == 10000.0 ? 1e6 : c->rope_theta;
		c->rms_eps = 1e-5;
	}
	events_init(stdout, events);
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

static int write_shard(const struct gen_opts *o, const struct tensor_spec *t,
		       size_t n, const int *which, int shard, const char *path,
		       uint64_t *done, uint64_t total, char hex[65],
		       struct d0_err *err)
{
	const struct model_config *c = &o->cfg;
	struct st_writer *w = st_writer_new();
	float *f = malloc(GEN_CHUNK * sizeof *f);
	void *conv = malloc(GEN_CHUNK * 4);
	size_t k = 0;
	int rc = 0;
	if (!f || !conv)
		abort();
	st_writer_meta(w, "format", "pt");
	for (size_t i = 0; i < n; i++)
		if (which[i] == shard)
			st_writer_add(w, t[i].name, stored_dtype(c, &t[i]),
				      t[i].ndim, t[i].shape);
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
		if (which[i] != shard)
			continue;
		numel = t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
		rng_seed(&r, o->seed * 0x9e3779b97f4a7c15ULL ^
				     hash_str64(t[i].name));
		while (off < numel) {
			size_t m = numel - off > GEN_CHUNK ? GEN_CHUNK
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
		total += t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1) *
			 dtype_size(stored_dtype(c, &t[i]));
	files = calloc((size_t)o->shards + 3, sizeof *files);
	hexes = calloc((size_t)o->shards + 3, sizeof *hexes);

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
		for (size_t i = 0; i < n; i++)
			if (which[i] == s)
				json_object_set_new(wm, t[i].name,
						    json_string(name));
	}
	if (o->shards > 1) {
		const char **keys = calloc(n, sizeof *keys);
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
