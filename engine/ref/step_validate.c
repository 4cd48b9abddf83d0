/*
 * step_validate.c - `day0-engine validate`: are the numbers right?
 *
 * Three levels against float64:
 *   op     the engine's f32 kernels (ops.c) on random inputs against
 *          float64 implementations written here;
 *   layer  every layer output of a parallel run (run --dump-layers)
 *          against ref.c's float64 forward of the same checkpoint;
 *   e2e    the run's logits (run --dump-logits, or any engine's dump in
 *          the same format) against the reference: max abs / relative
 *          error, KL divergence statistics, top-1 agreement, perplexity
 *          ratio on the token sequence.
 * "Relative" is normwise: max |a - b| over max |b| of the same tensor (or
 * row), which stays meaningful where single elements are near zero.
 */
#include "engine.h"
#include "logit_fold.h"
#include "ref_hooks.h"
#include "route_follow.h"
#include "validate_layer.h"
#include "validate_image.h"

#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run(int argc, char **argv);

const struct step_entry step_validate = {
	.name = "validate",
	.usage = "MODEL_DIR [" PROMPT_USAGE "] [--logits FILE] "
		 "[--layers-dir DIR] [--generated FILE] [--text-tokens N] "
		 "[--levels op,layer,e2e,text] [--max-rel X] [--kl-max Y] "
		 "[--max-flips F] [--mem SIZE] [--image FILE]... "
		 "[--preprocessor FILE] [--json] "
		 "[--events]\n"
		 "  --tokens/--prompt/--prompt-file  the prompt run was given "
		 "(text is encoded with MODEL_DIR's tokenizer.json)\n"
		 "  --logits FILE     run --dump-logits (e2e level)\n"
		 "  --layers-dir DIR  run --dump-layers (layer level; with it "
		 "the layer, e2e and text levels follow a MoE run's routing "
		 "where the run chose other experts by a near-tie: the top-k "
		 "of its own router logits, within --max-rel of float64's; "
		 "any other choice fails)\n"
		 "  --generated FILE  run --dump-generated (text level: "
		 "text.generation)\n"
		 "  --text-tokens N   how many generated tokens must equal the "
		 "reference's greedy ones (default: all)\n"
		 "  --levels L,...    op, layer, e2e, text (default: all four; "
		 "a level without its input is skipped)\n"
		 "  --max-rel X, --kl-max Y  e2e and layer bounds\n"
		 "  --max-flips F     routing flips followed, at most F of the "
		 "routed (layer, token) rows (default 0.25)\n"
		 "  --mem SIZE        float64 weights the reference holds at "
		 "once (default 256 MiB; a bare number is MiB): matrices are "
		 "read in row blocks, the logits folded block by block, experts "
		 "one at a time; the logits and layer outputs do not depend on it\n"
		 "  --image FILE      the images run --image was given (a "
		 "vision-language model): the image kernels (op), the tower's "
		 "blocks and merger against the float64 tower (layer, from "
		 "--layers-dir's image-* dumps), the features and M-RoPE "
		 "positions in the reference's forward pass (e2e, text); "
		 "numerics.image\n"
		 "  --preprocessor F  the preprocessor_config.json run --image "
		 "used (default: MODEL_DIR's)\n"
		 "  or:  [mpirun -np N] validate MODEL_DIR --local --tokens ... "
		 "--layers-dir DIR [--logits FILE] [--compute-dtype f32|bf16|f16] "
		 "[--max-flips F] [--max-rel X] [--kl-max Y] [--mem SIZE]\n"
		 "  --local: each layer recomputed in float64 from the run's own "
		 "input of that layer (--mem of weights in memory, layers split "
		 "over ranks); MoE tokens whose routing the compute dtype cannot "
		 "resolve are reported as flips (fail above F of routed rows, "
		 "default 0.25)\n"
		 "example: day0-engine validate /models/m --prompt 'Hello' "
		 "--logits lg.st --generated gen.json --text-tokens 8",
	.summary = "numerics at operator, layer and end-to-end level against "
		   "a float64 reference",
	.run = run,
};

/* Read a 2-D F32 tensor from a safetensors file. */
static float *read_tensor(const char *path, const char *name, uint64_t rows,
			  uint64_t cols, struct d0_err *err)
{
	struct st_file f;
	const struct st_tensor *t;
	float *v;
	int fd;
	if (st_open(path, &f, err) < 0)
		return NULL;
	t = st_find(&f, name);
	if (!t || t->dtype != DT_F32 || t->ndim != 2 || t->shape[0] != rows ||
	    t->shape[1] != cols) {
		d0_errf(err, "%s: expected an F32 tensor '%s' of shape [%llu, %llu]",
			path, name, (unsigned long long)rows,
			(unsigned long long)cols);
		st_free(&f);
		return NULL;
	}
	v = malloc(rows * cols * 4 + 4);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || pread_full(fd, v, rows * cols * 4, f.data_off + t->begin) < 0) {
		d0_errf(err, "%s: read failed", path);
		free(v);
		v = NULL;
	}
	if (fd >= 0)
		close(fd);
	st_free(&f);
	return v;
}

/* ------------------------------------------------------------------- ops */

struct op_result {
	const char *name;
	struct err_stat e;
};

static void rnd(struct rng *r, float *v, int n, double s)
{
	for (int i = 0; i < n; i++)
		v[i] = (float)((rng_uniform(r) * 2 - 1) * s);
}

static int op_level(struct op_result *res)
{
	struct rng r;
	int n = 0;
	rng_seed(&r, 1234);
	{ /* GEMM */
		enum { M = 7, N = 33, K = 65 };
		float x[M * K], w[N * K], y[M * N];
		double ref[M * N];
		rnd(&r, x, M * K, 1);
		rnd(&r, w, N * K, 1);
		op_linear(y, x, w, NULL, M, N, K);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				double s = 0;
				for (int k = 0; k < K; k++)
					s += (double)x[i * K + k] * w[j * K + k];
				ref[i * N + j] = s;
			}
		res[n++] = (struct op_result){"linear (sgemm)", err_compare(y, ref, M * N)};
	}
	{ /* RMSNorm */
		enum { D = 257 };
		float x[D], w[D], y[D];
		double ref[D], ss = 0;
		rnd(&r, x, D, 3);
		rnd(&r, w, D, 1);
		op_rms_norm(y, x, w, D, 1e-6);
		for (int i = 0; i < D; i++)
			ss += (double)x[i] * x[i];
		for (int i = 0; i < D; i++)
			ref[i] = w[i] * x[i] / sqrt(ss / D + 1e-6);
		res[n++] = (struct op_result){"rms_norm", err_compare(y, ref, D)};
	}
	{ /* RoPE, each scaling */
		static const char *types[] = {"", "linear", "dynamic", "yarn", "llama3"};
		static const char *names[] = {"rope.default", "rope.linear", "rope.dynamic",
					      "rope.yarn", "rope.llama3"};
		for (int ti = 0; ti < 5; ti++) {
			struct model_config c;
			double inv[32], af, ref[4 * 64];
			float x[4 * 64];
			int64_t pos = 3000;
			memset(&c, 0, sizeof c);
			c.rope_theta = 10000;
			c.max_pos = 2048;
			snprintf(c.rope.type, sizeof c.rope.type, "%s", types[ti]);
			c.rope.factor = 4;
			c.rope.original_max_pos = 1024;
			c.rope.low_freq_factor = 1;
			c.rope.high_freq_factor = 4;
			c.rope.beta_fast = 32;
			c.rope.beta_slow = 1;
			op_rope_inv_freq(&c, 64, pos + 1, inv, &af);
			rnd(&r, x, 4 * 64, 1);
			for (int h = 0; h < 4; h++)
				for (int i = 0; i < 32; i++) {
					double a = (double)pos * inv[i];
					double x1 = x[h * 64 + i], x2 = x[h * 64 + i + 32];
					ref[h * 64 + i] = (x1 * cos(a) - x2 * sin(a)) * af;
					ref[h * 64 + i + 32] = (x2 * cos(a) + x1 * sin(a)) * af;
				}
			op_rope(x, 4, 64, 64, pos, inv, af);
			res[n++] = (struct op_result){names[ti], err_compare(x, ref, 4 * 64)};
		}
	}
	{ /* softmax */
		enum { D = 300 };
		float x[D];
		double ref[D], m = -1e300, z = 0;
		rnd(&r, x, D, 20);
		for (int i = 0; i < D; i++)
			if (x[i] > m)
				m = x[i];
		for (int i = 0; i < D; i++)
			z += exp(x[i] - m);
		for (int i = 0; i < D; i++)
			ref[i] = exp(x[i] - m) / z;
		op_softmax(x, D);
		res[n++] = (struct op_result){"softmax", err_compare(x, ref, D)};
	}
	for (int mla = 0; mla < 2; mla++) { /* attention: GQA, and MLA shapes */
		enum { T = 9, NH = 8 };
		int nkv = mla ? NH : 2, dqk = mla ? 24 : 16, dv = 16;
		float *q = malloc(T * NH * 24 * 4), *k = malloc(T * NH * 24 * 4);
		float *v = malloc(T * NH * 16 * 4), *o = malloc(T * NH * 16 * 4);
		double *ref = malloc(T * NH * 16 * 8), sc = 1 / sqrt((double)dqk);
		rnd(&r, q, T * NH * dqk, 1);
		rnd(&r, k, T * nkv * dqk, 1);
		rnd(&r, v, T * nkv * dv, 1);
		op_attention(o, q, k, v, T, T, 0, NH, nkv, dqk, dv, sc, 0);
		for (int t = 0; t < T; t++)
			for (int h = 0; h < NH; h++) {
				int kh = h / (NH / nkv);
				double s[T], m = -1e300, z = 0;
				for (int j = 0; j <= t; j++) {
					double d = 0;
					for (int i = 0; i < dqk; i++)
						d += (double)q[(t * NH + h) * dqk + i] *
						     k[(j * nkv + kh) * dqk + i];
					s[j] = d * sc;
					if (s[j] > m)
						m = s[j];
				}
				for (int j = 0; j <= t; j++)
					z += (s[j] = exp(s[j] - m));
				for (int i = 0; i < dv; i++) {
					double a = 0;
					for (int j = 0; j <= t; j++)
						a += s[j] / z * v[(j * nkv + kh) * dv + i];
					ref[(t * NH + h) * dv + i] = a;
				}
			}
		res[n++] = (struct op_result){mla ? "attention.mla (qk 24, v 16)"
						  : "attention.gqa (8 q / 2 kv)",
					      err_compare(o, ref, (size_t)T * NH * dv)};
		free(q); free(k); free(v); free(o); free(ref);
	}
	{ /* SwiGLU */
		enum { D = 200 };
		float g[D], u[D], y[D];
		double ref[D];
		rnd(&r, g, D, 4);
		rnd(&r, u, D, 2);
		op_swiglu(y, g, u, D);
		for (int i = 0; i < D; i++)
			ref[i] = g[i] / (1 + exp(-(double)g[i])) * u[i];
		res[n++] = (struct op_result){"swiglu", err_compare(y, ref, D)};
	}
	{ /* routers: weights of the chosen experts */
		enum { E = 16, K = 4 };
		float lg[E], w[K], bias[E];
		int idx[K];
		double ref[K], z = 0, s = 0;
		rnd(&r, lg, E, 3);
		op_router_softmax_topk(lg, E, K, 1, idx, w);
		for (int e = 0; e < E; e++)
			z += exp(lg[e]);
		for (int j = 0; j < K; j++)
			s += ref[j] = exp(lg[idx[j]]) / z;
		for (int j = 0; j < K; j++)
			ref[j] /= s;
		res[n++] = (struct op_result){"moe.router.softmax_topk_norm", err_compare(w, ref, K)};
		rnd(&r, bias, E, 0.1);
		op_router_sigmoid_group_topk(lg, bias, E, K, 4, 2, 1, 2.5, idx, w);
		s = 0;
		for (int j = 0; j < K; j++)
			s += ref[j] = 1 / (1 + exp(-(double)lg[idx[j]]));
		for (int j = 0; j < K; j++)
			ref[j] = ref[j] / s * 2.5;
		res[n++] = (struct op_result){"moe.router.sigmoid_group_topk", err_compare(w, ref, K)};
	}
	return n;
}

/* ---------------------------------------- the whole-model reference pass */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/*
 * What the whole-model pass checks as ref.c hands its results out: each
 * layer's output against the run's dump as the layer is done (no
 * [layers][T][hidden] copy), the logits folded against the run's a
 * vocabulary block at a time (logit_fold.h), or only the last position's
 * argmax for the text level.
 */
struct whole {
	const char *layers_dir; /* NULL: no layer level */
	int T, H;
	struct err_stat *lay; /* [layers] */
	int nlay, lay_bad;    /* layers compared; a dump could not be read */
	struct d0_err lay_err;
	float *buf;
	struct lfold *fold;   /* NULL: no e2e level */
	double best;          /* the last position's largest logit */
	int64_t arg;          /* and its (first) index */
	struct rfollow *rf;   /* the run's MoE routing followed, or NULL */
};

static int whole_follow(void *ctx, int l, int t, const double *bias,
			const double *logits, int *idx)
{
	struct whole *w = ctx;
	return rfollow_route(w->rf, l, t, bias, logits, idx);
}

static void whole_layer_out(void *ctx, int l, const double *h)
{
	struct whole *w = ctx;
	char name[64], *p;
	if (!w->layers_dir || w->lay_bad)
		return;
	snprintf(name, sizeof name, "layer-%03d.safetensors", l);
	p = path_join(w->layers_dir, name);
	free(w->buf);
	w->buf = read_tensor(p, "hidden", (uint64_t)w->T, (uint64_t)w->H,
			     &w->lay_err);
	free(p);
	if (!w->buf) {
		w->lay_bad = 1;
		return;
	}
	w->lay[w->nlay++] = err_compare(w->buf, h, (size_t)w->T * w->H);
}

static int whole_head(void *ctx, int v0, int n, const double *blk,
		      struct d0_err *err)
{
	struct whole *w = ctx;
	const double *last = blk + (size_t)(w->T - 1) * n;
	for (int i = 0; i < n; i++)
		if (last[i] > w->best || w->arg < 0) {
			w->best = last[i];
			w->arg = v0 + i;
		}
	return w->fold ? lfold_block(w->fold, v0, n, blk, err) : 0;
}

/* The float64 reference's greedy continuation of prompt, n tokens. */
static int ref_greedy(const char *dir, const int64_t *prompt, int T, int n,
		      size_t mem, const struct vimg_result *img,
		      const char *layers_dir, double max_rel, int64_t *out,
		      struct d0_err *err)
{
	int64_t *seq = malloc((size_t)(T + n) * sizeof *seq);
	int64_t *pos = img && img->rope_pos
			       ? malloc(3 * (size_t)(T + n) * sizeof *pos) : NULL;
	memcpy(seq, prompt, (size_t)T * sizeof *seq);
	for (int g = 0; g < n; g++) {
		struct model_config c;
		struct rfollow rf;
		struct whole w = {.T = T + g, .arg = -1, .rf = &rf};
		struct ref_hooks hk = {.ctx = &w, .mem = mem, .head = whole_head,
				       .embeds = img ? img->embeds : NULL,
				       .splice_upto = T, .rope_pos = pos,
				       .follow = layers_dir ? whole_follow : NULL};
		double *lg = NULL;
		int rc;
		/* the prompt's tokens routed as the run routed them, where
		 * the layer level found that explained */
		rfollow_init(&rf, layers_dir, T, max_rel);
		rf.c = &c;
		/* M-RoPE: the prompt's positions, then i + rope_delta */
		for (int a = 0; pos && a < 3; a++)
			for (int i = 0; i < T + g; i++)
				pos[(size_t)a * (T + g) + i] =
					i < T ? img->rope_pos[(size_t)a * T + i]
					      : i + img->rope_delta;
		rc = ref_forward_hooked(dir, seq, T + g, &lg, NULL, &c, &hk, err);
		rfollow_free(&rf);
		model_config_free(&c);
		if (rc < 0) {
			free(seq);
			free(pos);
			return -1;
		}
		out[g] = seq[T + g] = w.arg;
	}
	free(seq);
	free(pos);
	return 0;
}

/* run --dump-generated: {"prompt": [ids], "generated": [ids]} */
static int read_generated(const char *path, int64_t **prompt, int *np,
			  int64_t **gen, int *ng, struct d0_err *err)
{
	json_error_t je;
	json_t *doc = json_load_file(path, 0, &je), *p, *g;
	size_t i;
	json_t *v;
	if (!doc)
		return d0_errf(err, "%s: line %d: %s", path, je.line, je.text);
	p = json_object_get(doc, "prompt");
	g = json_object_get(doc, "generated");
	if (!json_is_array(p) || !json_is_array(g) || !json_array_size(p)) {
		json_decref(doc);
		return d0_errf(err, "%s: expected {\"prompt\": [ids], "
			       "\"generated\": [ids]} (run --dump-generated)", path);
	}
	*np = (int)json_array_size(p);
	*ng = (int)json_array_size(g);
	*prompt = malloc((size_t)*np * sizeof **prompt);
	*gen = malloc((size_t)(*ng ? *ng : 1) * sizeof **gen);
	json_array_foreach(p, i, v) (*prompt)[i] = json_integer_value(v);
	json_array_foreach(g, i, v) (*gen)[i] = json_integer_value(v);
	json_decref(doc);
	return 0;
}

/* Decoding the prompt and encoding it again gives the same ids.  A
 * prompt that starts with the BOS (run --prompt adds it, as the
 * post-processor does) is decoded without it and encoded with it. */
static int prompt_round_trip(const struct tokenizer *t, const int64_t *ids,
			     int n)
{
	int32_t *v = malloc((size_t)n * sizeof *v), *back = NULL;
	char *text = NULL;
	size_t len, nb = 0;
	struct d0_err err;
	struct tokenizer_info ti;
	int same = 0, bos;
	for (int i = 0; i < n; i++)
		v[i] = (int32_t)ids[i];
	tokenizer_describe(t, &ti);
	bos = n > 0 && ti.bos_id >= 0 && ids[0] == ti.bos_id;
	if (tokenizer_decode(t, v + bos, (size_t)(n - bos), TOK_DECODE_NO_CLEANUP,
			     &text, &len, &err) == 0 &&
	    tokenizer_encode(t, text, len, bos, &back, &nb, &err) == 0)
		same = nb == (size_t)n && !memcmp(back, v, (size_t)n * sizeof *v);
	free(v);
	free(back);
	free(text);
	return same;
}

struct text_result {
	int n, agree, clean, round_trip;
	char *prompt, *text, *ref_text;
};

static const char *text_status(const struct text_result *r)
{
	if (r->agree < r->n || !r->round_trip)
		return "fail";
	return r->clean ? "pass" : "warn";
}

static void text_report(const struct text_result *r, int quiet, json_t *doc)
{
	char d[900];
	const char *st = text_status(r);
	snprintf(d, sizeof d, "%d of %d greedy tokens equal the reference's%s%s; "
		 "\"%.160s\" -> \"%.160s\" (reference \"%.160s\")",
		 r->agree, r->n, r->round_trip ? "" : "; the decoded prompt "
		 "does not encode back to its ids", r->clean ? "" : "; the "
		 "generated text is not clean UTF-8 (U+FFFD)", r->prompt,
		 r->text, r->ref_text);
	if (!quiet) {
		printf("text (greedy continuation vs float64)\n");
		printf("  prompt:    %s\n  run:       %s\n  reference: %s\n",
		       r->prompt, r->text, r->ref_text);
		printf("  %d of %d tokens equal, prompt round trip %s, text %s\n",
		       r->agree, r->n, r->round_trip ? "ok" : "FAILS",
		       r->clean ? "clean UTF-8" : "holds U+FFFD");
		printf("  text.generation %s\n", st);
	}
	/* the check carries the texts: the console's seek folds checks */
	if (events_enabled())
		events_emit("check", json_pack(
			"{s:s, s:s, s:s, s:i, s:i, s:s, s:s, s:s, s:i, s:i}",
			"item", "text.generation", "status", st, "detail", d,
			"value", r->agree, "threshold", r->n, "prompt_text",
			r->prompt, "text", r->text, "ref_text", r->ref_text,
			"agree", r->agree, "n", r->n));
	json_object_set_new(doc, "text", json_pack(
		"{s:s, s:s, s:s, s:i, s:i, s:b, s:b, s:s}", "prompt", r->prompt,
		"generated", r->text, "reference", r->ref_text, "agree", r->agree,
		"n", r->n, "clean_utf8", r->clean, "prompt_round_trip",
		r->round_trip, "status", st));
}

/* text.generation: the run's greedy continuation (run --dump-generated)
 * equals the reference's for the first n tokens, its text is clean
 * UTF-8, and the prompt survives decode + encode.  0 pass (or warn),
 * 1 fail, 2 unusable input (named on stderr). */
static int text_level(const char *dir, struct layout_opts *lay,
		      const char *gen_path, int n_check, size_t mem, int quiet,
		      json_t *doc, const struct vimg_result *img,
		      const char *layers_dir, double max_rel, int *equal)
{
	int64_t *prompt = NULL, *gen = NULL, *ref = NULL;
	int np = 0, ng = 0, bad = 2;
	struct text_result r = {0};
	struct d0_err err;
	if (read_generated(gen_path, &prompt, &np, &gen, &ng, &err) < 0)
		goto out;
	if (lay->tokens && (np != lay->ntok ||
			    memcmp(prompt, lay->tokens, (size_t)np * sizeof *prompt))) {
		d0_errf(&err, "%s: its prompt is not the one given to validate",
			gen_path);
		goto out;
	}
	if (!lay->tok) {
		d0_errf(&err, "%s: no tokenizer.json: the text level needs one", dir);
		goto out;
	}
	r.n = n_check > 0 && n_check < ng ? n_check : ng;
	ref = malloc((size_t)(r.n ? r.n : 1) * sizeof *ref);
	if (ref_greedy(dir, prompt, np, r.n, mem, img, layers_dir, max_rel, ref,
		       &err) < 0)
		goto out;
	while (r.agree < r.n && ref[r.agree] == gen[r.agree])
		r.agree++;
	*equal = r.agree == r.n;
	r.prompt = layout_opts_decode(lay, prompt, np);
	r.text = layout_opts_decode(lay, gen, r.n);
	r.ref_text = layout_opts_decode(lay, ref, r.n);
	r.clean = utf8_clean(r.text, strlen(r.text));
	r.round_trip = prompt_round_trip(lay->tok, prompt, np);
	text_report(&r, quiet, doc);
	bad = strcmp(text_status(&r), "fail") == 0;
out:
	if (!r.text)
		fprintf(stderr, "day0-engine: %s\n", err.msg);
	free(prompt);
	free(gen);
	free(ref);
	free(r.prompt);
	free(r.text);
	free(r.ref_text);
	return bad;
}

/* --mem: a size (parse_size's units), a bare number in MiB, >= 4 KiB. */
static int parse_mem(const char *s, size_t *out)
{
	uint64_t v;
	size_t n = strspn(s, "0123456789");
	if (parse_size(s, &v) < 0)
		return -1;
	if (n && !s[n]) { /* no unit: MiB */
		if (v > (UINT64_MAX >> 20))
			return -1;
		v <<= 20;
	}
	if (v < REF_MEM_MIN || v > SIZE_MAX)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		PROMPT_LONG_OPTS, {"logits", 1, 0, 'l'},
		{"generated", 1, 0, 'g'}, {"text-tokens", 1, 0, 'n'},
		{"layers-dir", 1, 0, 'L'}, {"levels", 1, 0, 'v'},
		{"max-rel", 1, 0, 'r'}, {"kl-max", 1, 0, 'k'},
		{"json", 0, 0, 'j'}, {"events", 0, 0, 'e'}, {"help", 0, 0, 'h'},
		{"local", 0, 0, 'P'}, {"compute-dtype", 1, 0, 'C'},
		{"max-flips", 1, 0, 'F'}, {"mem", 1, 0, 'M'},
		{"image", 1, 0, 'I'}, {"preprocessor", 1, 0, 'p'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_validate;
	const char *dir, *logits_path = NULL, *layers_dir = NULL;
	const char *levels = "op,layer,e2e,text", *gen_path = NULL;
	struct layout_opts lay;
	char why[256];
	long text_tokens = 0;
	double max_rel = 1e-5, kl_max = 1e-6, max_flips = 0.25;
	size_t mem = REF_MEM_DEFAULT;
	enum dtype compute = DT_F32;
	int local = 0;
	int ch, json = 0, events = 0, ntok = 0, fail[4] = {0}, ran[4] = {0};
	int64_t *tokens = NULL;
	char *end, *images[64];
	const char *preproc = NULL;
	int nimg = 0, vl = 0, ran_img = 0, greedy_equal = 0, ran_imgop = 0;
	const char *follow_dir = NULL; /* the text level follows the run's
					* routing where the whole pass did */
	double e2e_rel = -1, e2e_top1 = -1;
	struct vis_prompt vp;
	struct vimg_result vres;
	struct model_config vcfg;
	struct d0_err err;
	json_t *doc = json_object();

	layout_opts_init(&lay);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int took = layout_opts_take(&lay, ch, optarg, why, sizeof why);
		if (took < 0) {
			json_decref(doc);
			return step_usage_error(S, "%s", why);
		}
		if (took)
			continue;
		switch (ch) {
		case 'g': gen_path = optarg; break;
		case 'I':
			if (nimg == 64) {
				json_decref(doc);
				return step_usage_error(S, "--image: at most 64");
			}
			images[nimg++] = optarg;
			break;
		case 'p': preproc = optarg; break;
		case 'n':
			if (parse_long(optarg, 1, 1 << 20, &text_tokens) < 0) {
				json_decref(doc);
				return step_usage_error(S, "--text-tokens: expected a "
							"count >= 1");
			}
			break;
		case 'l': logits_path = optarg; break;
		case 'L': layers_dir = optarg; break;
		case 'v': levels = optarg; break;
		case 'r':
			max_rel = strtod(optarg, &end);
			if (*end || !(max_rel > 0))
				return step_usage_error(S, "--max-rel: expected a positive number");
			break;
		case 'k':
			kl_max = strtod(optarg, &end);
			if (*end || !(kl_max > 0))
				return step_usage_error(S, "--kl-max: expected a positive number");
			break;
		case 'j': json = 1; break;
		case 'e': events = 1; break;
		case 'P': local = 1; break;
		case 'C':
			compute = dtype_from_user(optarg);
			if (compute != DT_F32 && compute != DT_BF16 &&
			    compute != DT_F16) {
				json_decref(doc);
				return step_usage_error(S, "--compute-dtype: "
							"expected f32, bf16 or "
							"f16, got '%s'", optarg);
			}
			break;
		case 'F':
			max_flips = strtod(optarg, &end);
			if (*end || !(max_flips >= 0) || !(max_flips <= 1)) {
				json_decref(doc);
				return step_usage_error(S, "--max-flips: expected "
							"a fraction in [0, 1]");
			}
			break;
		case 'M':
			if (parse_mem(optarg, &mem) < 0) {
				json_decref(doc);
				return step_usage_error(S, "--mem: expected a size of "
							"at least 4K (256, 64M, 1G; "
							"a bare number is MiB), got "
							"'%s'", optarg);
			}
			break;
		case 'h': step_help(S); json_decref(doc); return EXIT_OK;
		default:
			json_decref(doc);
			return step_usage_error(S, "unknown or incomplete option '%s'",
						argv[optind - 1]);
		}
	}
	if (optind != argc - 1) {
		json_decref(doc);
		return step_usage_error(S, "expected one MODEL_DIR");
	}
	dir = argv[optind];
	if (layout_opts_has_prompt(&lay) &&
	    layout_opts_prompt(&lay, dir, &err) < 0) {
		json_decref(doc);
		layout_opts_free(&lay);
		return step_usage_error(S, "%s", err.msg);
	}
	memset(&vp, 0, sizeof vp);
	memset(&vres, 0, sizeof vres);
	memset(&vcfg, 0, sizeof vcfg);
	{ /* the image channel: the prompt's placeholders as run expanded them */
		char *cp = path_join(dir, "config.json");
		int rc = model_config_load(cp, &vcfg, &err);
		free(cp);
		vl = rc == 0 && vcfg.vision.kind != VISION_NONE;
		if (rc == 0 && !vl && nimg)
			rc = d0_errf(&err, "%s: a text model: --image needs a "
				     "vision-language checkpoint", dir);
		if (rc == 0 && vl && lay.tokens &&
		    vis_prompt_prepare(&vcfg, dir, preproc, images, nimg,
				       lay.tokens, lay.ntok, &vp, &err) < 0)
			rc = -1;
		if (rc < 0 && (nimg || lay.tokens)) {
			int features = !strncmp(err.msg, "image.features", 14);
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			json_decref(doc);
			layout_opts_free(&lay);
			model_config_free(&vcfg);
			return features ? EXIT_CHECK_FAILED : EXIT_USAGE;
		}
		if (vl && vp.ids) {
			free(lay.tokens);
			lay.tokens = malloc((size_t)vp.n * sizeof *lay.tokens + 8);
			memcpy(lay.tokens, vp.ids, (size_t)vp.n * sizeof *lay.tokens);
			lay.ntok = (int)vp.n;
		}
	}
	tokens = lay.tokens;
	ntok = lay.ntok;
	if (local) { /* validate_layer.c */
		struct vl_opts vo = {dir, layers_dir, logits_path, NULL, 0,
				     max_rel, kl_max, max_flips, compute, json,
				     mem};
		int rc;
		json_decref(doc);
		if (!ntok || !layers_dir) {
			layout_opts_free(&lay);
			return step_usage_error(S, "--local needs --tokens and "
						"--layers-dir (the run's dumps)");
		}
		vo.tokens = tokens;
		vo.T = ntok;
		events_init(stdout, events && !json);
		events_stage("validate", "start", 0, 0, dir);
		rc = validate_local(&vo);
		events_stage("validate", "end", 1, rc, dir);
		layout_opts_free(&lay);
		return rc;
	}
	events_init(stdout, events && !json);
	events_stage("validate", "start", 0, 0, dir);

	if (strstr(levels, "op")) {
		struct op_result res[32];
		int n = op_level(res);
		json_t *a = json_array();
		ran[0] = 1;
		if (!json && !events_enabled())
			printf("%-34s %12s %12s\n", "op level (f32 vs float64)", "max abs",
			       "max rel");
		for (int i = 0; i < n; i++) {
			int bad = !(res[i].e.max_rel <= 1e-5);
			fail[0] |= bad;
			if (!json && !events_enabled())
				printf("  %-32s %12.3g %12.3g%s\n", res[i].name, res[i].e.max_abs,
				       res[i].e.max_rel, bad ? "  FAIL" : "");
			events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f}", "level", "op",
							  "name", res[i].name, "max_abs",
							  res[i].e.max_abs, "max_rel",
							  res[i].e.max_rel));
			json_array_append_new(a, json_pack("{s:s, s:f, s:f}", "name", res[i].name,
							   "max_abs", res[i].e.max_abs,
							   "max_rel", res[i].e.max_rel));
		}
		json_object_set_new(doc, "op", a);
		events_check("numerics.op", fail[0] ? "fail" : "pass",
			     fail[0] ? "a kernel exceeds 1e-5 relative" : "every kernel within 1e-5 relative",
			     NULL, json_real(1e-5));
	}
	if (vl && strstr(levels, "op")) {
		json_t *a = json_array();
		ran_img = ran_imgop = 1;
		vimg_op_level(&vres, a, json || events_enabled());
		json_object_set_new(doc, "image_op", a);
	}
	if (vl && tokens && vp.n_img) {
		ran_img = 1;
		if (vimg_reference(dir, &vp, strstr(levels, "layer") ? layers_dir
								      : NULL,
				   max_rel, json || events_enabled(), doc, &vres,
				   &err) < 0) {
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			vres.fail_layer = 1;
			if (!vres.embeds || !vres.blocks) {
				json_decref(doc);
				layout_opts_free(&lay);
				vis_prompt_free(&vp);
				vimg_result_free(&vres);
				model_config_free(&vcfg);
				return EXIT_USAGE;
			}
		}
	}
	if (strstr(levels, "layer") || strstr(levels, "e2e")) {
		struct model_config c;
		struct rfollow rf;
		struct whole w = {.T = ntok, .arg = -1, .rf = &rf};
		struct ref_hooks hk = {.ctx = &w, .mem = mem,
				       .layer_out = whole_layer_out,
				       .embeds = vres.embeds,
				       .splice_upto = ntok,
				       .rope_pos = vres.rope_pos};
		struct lfold fold;
		double *unused = NULL;
		int T = ntok, L, V, want_layer, want_e2e;
		char *cp;
		if (!tokens) {
			json_decref(doc);
			layout_opts_free(&lay);
			return step_usage_error(S, "--tokens (or --prompt) is required "
						"for the layer and e2e levels");
		}
		cp = path_join(dir, "config.json");
		if (model_config_load(cp, &c, &err) < 0) { /* sizes first */
			free(cp);
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			json_decref(doc);
			layout_opts_free(&lay);
			return EXIT_USAGE;
		}
		free(cp);
		L = (int)c.layers;
		V = (int)c.vocab;
		w.H = (int)c.hidden;
		model_config_free(&c);
		want_layer = strstr(levels, "layer") && layers_dir;
		want_e2e = strstr(levels, "e2e") && logits_path;
		/* the run's routing followed (and reported, by the layer
		 * level or else by e2e) whenever its dumps are given */
		rfollow_init(&rf, (want_layer || want_e2e) ? layers_dir : NULL, T,
			     max_rel);
		rf.c = &c;
		if (rf.layers_dir)
			hk.follow = whole_follow;
		if (want_layer) {
			w.layers_dir = layers_dir;
			w.lay = calloc((size_t)L + 1, sizeof *w.lay);
		}
		if (want_e2e) {
			ran[2] = 1;
			if (lfold_open(&fold, logits_path, T, V, tokens, &err) < 0) {
				fprintf(stderr, "day0-engine: %s\n", err.msg);
				fail[2] = 1;
				lfold_close(&fold);
			} else {
				w.fold = &fold;
			}
		}
		hk.head = w.fold ? whole_head : NULL;
		hk.no_head = !w.fold;
		if ((want_layer || w.fold) &&
		    ref_forward_hooked(dir, tokens, T, &unused, NULL, &c, &hk,
				       &err) < 0) {
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			model_config_free(&c);
			if (w.fold)
				lfold_close(&fold);
			rfollow_free(&rf);
			free(w.lay);
			free(w.buf);
			json_decref(doc);
			layout_opts_free(&lay);
			return EXIT_USAGE;
		}
		if (want_layer || w.fold)
			model_config_free(&c);
		if (want_layer) {
			json_t *a = json_array();
			double worst_growth = 0, prev = 0, worst_rel = 0;
			int worst = -1;
			ran[1] = 1;
			if (!json && !events_enabled())
				printf("%-34s %12s %12s\n", "layer level (run vs float64)",
				       "max abs", "max rel");
			for (int l = 0; l < w.nlay; l++) {
				char name[64];
				struct err_stat e = w.lay[l];
				if (l == 0 || e.max_rel - prev > worst_growth) {
					worst_growth = e.max_rel - prev;
					worst = l;
				}
				prev = e.max_rel;
				/* the item's value: the worst layer, not the last */
				if (!(e.max_rel <= worst_rel))
					worst_rel = e.max_rel;
				fail[1] |= !(e.max_rel <= max_rel);
				if (!json && !events_enabled())
					printf("  layer %-26d %12.3g %12.3g%s\n", l, e.max_abs,
					       e.max_rel, e.max_rel <= max_rel ? "" : "  FAIL");
				snprintf(name, sizeof name, "layer.%d", l);
				events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f}", "level",
								  "layer", "name", name, "max_abs",
								  e.max_abs, "max_rel", e.max_rel));
				json_array_append_new(a, json_pack("{s:i, s:f, s:f}", "layer", l,
								   "max_abs", e.max_abs, "max_rel",
								   e.max_rel));
			}
			if (w.lay_bad) {
				fprintf(stderr, "day0-engine: %s\n", w.lay_err.msg);
				fail[1] = 1;
			}
			json_object_set_new(doc, "layer", a);
			{
				char d[720], rwhy[360];
				int rbad = rfollow_report(&rf, max_flips,
							  !json && !events_enabled(),
							  doc, rwhy, sizeof rwhy);
				fail[1] |= rbad;
				if (!rbad)
					follow_dir = layers_dir;
				if (rf.err[0])
					fprintf(stderr, "day0-engine: %s\n", rf.err);
				char grow[200];
				if (worst >= 0)
					snprintf(grow, sizeof grow, "largest error "
						 "growth at layer %d", worst);
				else /* no layer's dump compared */
					snprintf(grow, sizeof grow, "no layer compared%s%.160s",
						 w.lay_bad ? ": " : "",
						 w.lay_bad ? w.lay_err.msg : "");
				snprintf(d, sizeof d, "%.200s%s%.200s; threshold %g relative%s%.200s",
					 rbad ? rwhy : "", rbad ? "; " : "", grow,
					 max_rel, !rbad && rwhy[0] ? "; " : "",
					 rbad ? "" : rwhy);
				if (!json && !events_enabled())
					printf("  %s\n", d);
				events_check("numerics.layer", fail[1] ? "fail" : "pass", d,
					     json_real(worst_rel), json_real(max_rel));
				json_object_set_new(doc, "layer_worst_growth", json_integer(worst));
			}
		}
		if (w.fold) {
			struct lfold_result r;
			char rwhy[360] = "";
			int rbad = 0;
			if (!want_layer && rf.layers_dir) {
				/* no layer level: e2e reports the routing */
				rbad = rfollow_report(&rf, max_flips,
						      !json && !events_enabled(), doc,
						      rwhy, sizeof rwhy);
				if (rf.err[0])
					fprintf(stderr, "day0-engine: %s\n", rf.err);
				if (!rbad)
					follow_dir = layers_dir;
			}
			lfold_finish(&fold, &r);
			qsort(r.kl, (size_t)T, 8, cmp_d);
			{
				double mean = r.kl_mean, med = r.kl[T / 2];
				double p99 = r.kl[(int)(0.99 * (T - 1))], mx = r.kl_max;
				double agree = 100.0 * r.top1 / T;
				double ppl_r = r.ppl_ref, ppl_q = r.ppl_run;
				fail[2] = !(r.max_rel <= max_rel) || !(mx <= kl_max) || rbad;
				e2e_rel = r.max_rel;
				e2e_top1 = agree;
				if (!json && !events_enabled()) {
					printf("e2e (logits vs float64)\n");
					printf("  max abs %.3g, max rel %.3g (threshold %g)\n",
					       r.max_abs, r.max_rel, max_rel);
					printf("  KL divergence: mean %.3g, median %.3g, p99 %.3g, "
					       "max %.3g (threshold %g)\n", mean, med, p99, mx, kl_max);
					printf("  top-1 agreement %.1f%%, perplexity %.6g vs "
					       "reference %.6g (ratio %.6f)\n", agree, ppl_q,
					       ppl_r, ppl_q / ppl_r);
					if (rf.flips)
						printf("  (the reference routed %d (layer, "
						       "token) row%s as the run did: routing "
						       "flips above)\n", rf.flips,
						       rf.flips == 1 ? "" : "s");
				}
				events_emit("numerics", json_pack(
					"{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f}", "level", "e2e",
					"name", "logits", "max_abs", r.max_abs, "max_rel",
					r.max_rel, "kl", mean, "top1", agree, "ppl_ref", ppl_r,
					"ppl", ppl_q));
				json_object_set_new(doc, "e2e", json_pack(
					"{s:f, s:f, s:{s:f, s:f, s:f, s:f}, s:f, s:f, s:f, s:f}",
					"max_abs", r.max_abs, "max_rel", r.max_rel, "kl", "mean",
					mean, "median", med, "p99", p99, "max", mx, "top1_pct",
					agree, "ppl", ppl_q, "ppl_ref", ppl_r, "ppl_ratio",
					ppl_q / ppl_r));
				{
					char d[640];
					snprintf(d, sizeof d, "%s%smax rel %.3g, KL max %.3g, "
						 "top-1 %.1f%%%s", rbad ? rwhy : "",
						 rbad ? "; " : "", r.max_rel, mx, agree,
						 rf.flips ? " (the run's routing followed at "
							    "its flips)" : "");
					events_check("numerics.e2e", fail[2] ? "fail" : "pass", d,
						     json_real(r.max_rel), json_real(max_rel));
				}
			}
			free(r.kl);
			lfold_close(&fold);
		}
		rfollow_free(&rf);
		free(w.lay);
		free(w.buf);
	}
	if (strstr(levels, "text") && gen_path) {
		ran[3] = 1;
		fail[3] = text_level(dir, &lay, gen_path, (int)text_tokens, mem,
				     json || events_enabled(), doc, &vres,
				     follow_dir, max_rel, &greedy_equal);
		if (fail[3] == 2) {
			events_stage("validate", "end", 1, EXIT_USAGE, gen_path);
			json_decref(doc);
			layout_opts_free(&lay);
			return EXIT_USAGE;
		}
	}
	if (vl && (ran_img || ran[2] || ran[3])) {
		/* numerics.image: the image kernels, the tower's blocks and
		 * merger, and the logits / greedy tokens of this prompt's case */
		char d[400];
		int bad = vres.fail_op || vres.fail_layer || fail[2] ||
			  (ran[3] && !greedy_equal);
		char ops[40], worst[24], tower[120];
		snprintf(ops, sizeof ops, ran_imgop ? "%.3g" : "not run",
			 vres.op_worst);
		snprintf(worst, sizeof worst, vres.tower_block < 0 ? "embed"
			 : "block %d", vres.tower_block);
		/* no state compared is not "0 states, worst 0" */
		if (vres.blocks)
			snprintf(tower, sizeof tower, "tower %d states, worst "
				 "%.3g (%s), merger %.3g%s", vres.blocks,
				 vres.tower_worst, worst, vres.feat_worst,
				 !vres.dump_err[0] ? ""
				 : strstr(vres.dump_err, "another image")
				     ? " (a dump of another image)"
				     : " (a dump missing)");
		else
			snprintf(tower, sizeof tower, "tower states not "
				 "compared (%s)",
				 !vp.n_img ? "no image"
				 : !layers_dir ? "no --layers-dir"
				 : !strstr(levels, "layer") ? "--levels "
							     "without layer"
				 : strstr(vres.dump_err, "another image")
				     ? "the run dumped another image"
				 : vres.dump_err[0] ? "a dump missing"
						    : "no tower state dumped");
		snprintf(d, sizeof d, "%s (%d image%s): image ops max rel %s; "
			 "%s; %s positions %s; logits max rel %s, top-1 %s; "
			 "greedy %s", vis_prompt_case(&vcfg, &vp), vp.n_img,
			 vp.n_img == 1 ? "" : "s", ops, tower,
			 vcfg.vision.mrope ? "M-RoPE" : "1-D",
			 vres.pos_wrong ? "DIFFER" : "equal",
			 e2e_rel >= 0 ? "" : "not run", e2e_top1 >= 0 ? "" : "not run",
			 !ran[3] ? "not run" : greedy_equal ? "equal" : "differs");
		if (e2e_rel >= 0) {
			char *p = strstr(d, "logits max rel ");
			char tail[200];
			snprintf(tail, sizeof tail, "logits max rel %.3g, top-1 %.1f%%; "
				 "greedy %s", e2e_rel, e2e_top1,
				 !ran[3] ? "not run" : greedy_equal ? "equal" : "differs");
			snprintf(p, sizeof d - (size_t)(p - d), "%s", tail);
		}
		if (vres.dump_err[0])
			fprintf(stderr, "day0-engine: %s\n", vres.dump_err);
		if (!json && !events_enabled())
			printf("numerics.image: %s: %s\n", bad ? "FAIL" : "pass", d);
		events_check("numerics.image", bad ? "fail" : "pass", d,
			     json_real(fmax(vres.tower_worst, fmax(vres.feat_worst,
								 e2e_rel))),
			     json_real(max_rel));
		json_object_set_new(doc, "image", json_pack(
			"{s:s, s:i, s:f, s:f, s:f, s:i, s:b}", "case",
			vis_prompt_case(&vcfg, &vp), "images", vp.n_img, "op_worst",
			vres.op_worst, "tower_worst", vres.tower_worst, "merger_worst",
			vres.feat_worst, "mrope_positions_wrong", vres.pos_wrong,
			"ok", !bad));
		fail[0] |= vres.fail_op;
		fail[1] |= vres.fail_layer;
		ran[0] = 1;
	}
	vis_prompt_free(&vp);
	vimg_result_free(&vres);
	model_config_free(&vcfg);
	if (json) {
		json_object_set_new(doc, "ok", json_boolean(!fail[0] && !fail[1] &&
							    !fail[2] && !fail[3]));
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	}
	json_decref(doc);
	layout_opts_free(&lay);
	if (!ran[0] && !ran[1] && !ran[2] && !ran[3]) {
		fprintf(stderr, "day0-engine: validate: nothing to check (give --logits "
			"and/or --layers-dir with --tokens, or --levels op)\n");
		return EXIT_USAGE;
	}
	{
		int bad = fail[0] || fail[1] || fail[2] || fail[3];
		if (!json && !events_enabled())
			printf("%s\n", bad ? "numerics: FAIL" : "numerics: pass");
		events_stage("validate", "end", 1, bad, dir);
		return bad ? EXIT_CHECK_FAILED : EXIT_OK;
	}
}
