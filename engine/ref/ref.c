/*
 * ref.c - the float64 reference forward pass that `validate` measures the
 * parallel runtime against.  One process, every token at once with an
 * explicit causal mask, no cache, no parallelism and no code shared with
 * runtime.c's math: transformers' semantics written out as plainly as
 * possible.
 *
 * Memory is a chunk, not the model (ref_weights.h): every matrix is read
 * a block of rows at a time (at most hooks->mem bytes, 256 MiB by
 * default, stored bytes and float64 together) and applied to all the
 * tokens that need it before the next block is read; the embedding is
 * read by the prompt's rows; the lm_head's logits come out block by block
 * to a callback (validate folds its softmax statistics as they pass, see
 * logit_fold.h), MoE experts are computed one at a time for the tokens
 * routed to them.  Every float64 sum keeps its index order, so the
 * results do not depend on the chunk.
 */
#include "engine.h"
#include "ref_hooks.h"
#include "ref_weights.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MOE_OUT_BYTES ((size_t)16 << 20) /* expert outputs of a token group */

/*
 * The value of an FP8 code, from the OCP 8-bit floating point definition:
 * sign, exponent, mantissa fields; exponent 0 is subnormal.  e4m3fn (bias
 * 7) has no infinities and S.1111.111 is NaN; e5m2 (bias 15) is IEEE-like.
 * Independent of format_fp8.c's table on purpose (tests/unit/test_fp8.c
 * checks both against all 256 codes).
 */
double ref_fp8_value(int e5m2, unsigned code)
{
	int ebits = e5m2 ? 5 : 4, mbits = 7 - ebits, bias = e5m2 ? 15 : 7;
	unsigned e = (code & 0x7f) >> mbits, m = code & ((1u << mbits) - 1);
	double sign = code & 0x80 ? -1.0 : 1.0, frac = (double)m / (1 << mbits);
	if (e5m2 && e == 31)
		return m ? NAN : sign * INFINITY;
	if (!e5m2 && e == 15 && m == 7)
		return NAN;
	if (e == 0)
		return sign * frac * pow(2.0, 1 - bias);
	return sign * (1.0 + frac) * pow(2.0, (double)e - bias);
}

static void rmsnorm(double *y, const double *x, const double *w, int n,
		    double eps)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0 / sqrt(ss / n + eps);
	for (int i = 0; i < n; i++)
		y[i] = w[i] * (x[i] * ss);
}

static double silu(double x)
{
	return x / (1.0 + exp(-x));
}

/* rotate_half RoPE on v[0..d) at pos */
static void rope(double *v, int d, int64_t pos, const double *inv_freq,
		 double af)
{
	for (int i = 0; i < d / 2; i++) {
		double a = (double)pos * inv_freq[i];
		double c = cos(a) * af, s = sin(a) * af;
		double x1 = v[i], x2 = v[i + d / 2];
		v[i] = x1 * c - x2 * s;
		v[i + d / 2] = x2 * c + x1 * s;
	}
}

/* Qwen2-VL's apply_multimodal_rotary_pos_emb (sections not interleaved):
 * frequency slot i takes the position of the axis whose mrope_section
 * holds it; rotate_half as rope(). */
static void mrope(double *v, int d, const int64_t p[3], const int64_t sec[3],
		  const double *inv_freq, double af)
{
	for (int i = 0; i < d / 2; i++) {
		int ax = i < sec[0] ? 0 : i < sec[0] + sec[1] ? 1 : 2;
		double a = (double)p[ax] * inv_freq[i];
		double c = cos(a) * af, s = sin(a) * af;
		double x1 = v[i], x2 = v[i + d / 2];
		v[i] = x1 * c - x2 * s;
		v[i + d / 2] = x2 * c + x1 * s;
	}
}

/* top-k of x (lower index wins ties) */
static void topk(const double *x, int n, int k, int *idx)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int t = 0; t < j; t++)
				taken |= idx[t] == i;
			if (!taken && (best < 0 || x[i] > x[best]))
				best = i;
		}
		idx[j] = best;
	}
}

/* A MoE router's choice (idx [top_k], in score order) and the experts'
 * weights w [top_k] from logits [E] as transformers routes (softmax top-k,
 * or DeepSeek's grouped sigmoid with the correction bias); given: idx is
 * already chosen (validate following the run), only the weights are
 * computed. */
static void ref_route(const struct model_config *c, const double *logits,
		      const double *bias, int *idx, double *w, int given)
{
	int E = (int)c->experts, K = (int)c->top_k;
	double *p = malloc((size_t)E * 8), sum = 0;
	if (!strcmp(c->scoring, "sigmoid")) {
		int G = (int)c->n_group, per = E / G, *gi = malloc((size_t)G * sizeof(int));
		double *ch = malloc((size_t)E * 8), *gs = calloc((size_t)G, 8);
		for (int e = 0; e < E; e++) {
			p[e] = 1.0 / (1.0 + exp(-logits[e]));
			ch[e] = p[e] + (bias ? bias[e] : 0);
		}
		for (int g = 0; g < G; g++) {
			int two[2];
			topk(ch + g * per, per, per >= 2 ? 2 : 1, two);
			gs[g] = ch[g * per + two[0]] + (per >= 2 ? ch[g * per + two[1]] : 0);
		}
		topk(gs, G, (int)c->topk_group, gi);
		for (int g = 0; g < G; g++) {
			int keep = 0;
			for (int t = 0; t < c->topk_group; t++)
				keep |= gi[t] == g;
			if (!keep)
				for (int e = g * per; e < (g + 1) * per; e++)
					ch[e] = 0;
		}
		if (!given)
			topk(ch, E, K, idx);
		for (int j = 0; j < K; j++)
			sum += (w[j] = p[idx[j]]);
		for (int j = 0; j < K; j++)
			w[j] = (c->norm_topk_prob ? w[j] / (sum + 1e-20) : w[j]) *
			       c->routed_scaling;
		free(gi);
		free(ch);
		free(gs);
	} else {
		double m = logits[0], z = 0;
		for (int e = 1; e < E; e++)
			if (logits[e] > m)
				m = logits[e];
		for (int e = 0; e < E; e++)
			z += (p[e] = exp(logits[e] - m));
		for (int e = 0; e < E; e++)
			p[e] /= z;
		if (!given)
			topk(p, E, K, idx);
		for (int j = 0; j < K; j++)
			sum += (w[j] = p[idx[j]]);
		if (c->norm_topk_prob)
			for (int j = 0; j < K; j++)
				w[j] /= sum;
	}
	free(p);
}


/* ------------------------------------------------------ one forward pass */

struct fw {
	struct ref_w w;
	const struct model_config *c;
	const struct ref_hooks *hk;
	int T, H;
	int bad; /* set by the first failure: later products are skipped */
	const int64_t *rope_pos; /* M-RoPE [3][T], or NULL */
	struct d0_err *err;
};

/* y [rows][n] = W x [rows][k] (+ bias), W the matrix named by fmt. */
static void lin(struct fw *f, double *y, const double *x, int rows, int n,
		int k, const double *bias, double *sq, const char *fmt, ...)
	__attribute__((format(printf, 9, 10)));
static void lin(struct fw *f, double *y, const double *x, int rows, int n,
		int k, const double *bias, double *sq, const char *fmt, ...)
{
	char name[240];
	va_list ap;
	if (f->bad || rows < 1)
		return;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	if (ref_w_linear(&f->w, name, y, x, rows, n, k, bias, sq, f->err) < 0)
		f->bad = 1;
}

/* A 1-D tensor of n values, or NULL when absent (an error if required). */
static double *vec(struct fw *f, int required, uint64_t n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static double *vec(struct fw *f, int required, uint64_t n, const char *fmt, ...)
{
	char name[240];
	va_list ap;
	int absent;
	double *d;
	if (f->bad)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	d = ref_w_vector(&f->w, name, n, &absent, f->err);
	if (!d && (!absent || required)) {
		if (absent)
			d0_errf(f->err, "%s: no tensor '%s'", f->w.ck.dir, name);
		f->bad = 1;
	}
	return d;
}

/* Does the checkpoint hold matrix name? */
static int has(struct fw *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int has(struct fw *f, const char *fmt, ...)
{
	char name[240];
	struct ref_mat m;
	va_list ap;
	int found;
	if (f->bad)
		return 0;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	found = ref_mat_find(&f->w, name, &m, f->err);
	if (found < 0)
		f->bad = 1;
	return found > 0;
}

static double *zeros(size_t n)
{
	return calloc(n ? n : 1, 8);
}

#define L_ "model.layers.%d." /* layer l's tensor names start so */

/* MLA: the query through its low-rank path, keys and values from the
 * compressed latent; RoPE on the decoupled rope dims (interleaved
 * checkpoints permuted to the half layout first). */
static void mla_qkv(struct fw *f, int l, const double *x, double *Q, double *K,
		    double *Vv, const double *inv, double af)
{
	const struct model_config *c = f->c;
	int T = f->T, H = f->H, nh = (int)c->heads;
	int ql = (int)c->q_lora_rank, kl = (int)c->kv_lora_rank;
	int nope = (int)c->qk_nope_dim, rd = (int)c->qk_rope_dim;
	int dv = (int)c->v_head_dim, dqk = nope + rd, kw = nope + dv;
	double *qab = ql && c->attention_bias ? vec(f, 0, (uint64_t)ql, L_ "self_attn.q_a_proj.bias", l) : NULL;
	double *kvab = c->attention_bias ? vec(f, 0, (uint64_t)(kl + rd), L_ "self_attn.kv_a_proj_with_mqa.bias", l) : NULL;
	double *qan = ql ? vec(f, 1, (uint64_t)ql, L_ "self_attn.q_a_layernorm.weight", l) : NULL;
	double *kvan = vec(f, 1, (uint64_t)kl, L_ "self_attn.kv_a_layernorm.weight", l);
	double *TQ = zeros((size_t)T * (ql + 1)), *CKV = zeros((size_t)T * (kl + rd));
	double *KN = zeros((size_t)T * kl), *KB = zeros((size_t)T * nh * kw);
	double *kr = zeros((size_t)rd), *tmp = zeros((size_t)rd);
	if (ql) {
		lin(f, TQ, x, T, ql, H, qab, NULL, L_ "self_attn.q_a_proj.weight", l);
		for (int t = 0; t < T && !f->bad; t++) /* default eps */
			rmsnorm(TQ + (size_t)t * ql, TQ + (size_t)t * ql, qan, ql, 1e-6);
		lin(f, Q, TQ, T, nh * dqk, ql, NULL, NULL, L_ "self_attn.q_b_proj.weight", l);
	} else {
		lin(f, Q, x, T, nh * dqk, H, NULL, NULL, L_ "self_attn.q_proj.weight", l);
	}
	lin(f, CKV, x, T, kl + rd, H, kvab, NULL, L_ "self_attn.kv_a_proj_with_mqa.weight", l);
	for (int t = 0; t < T && !f->bad; t++)
		rmsnorm(KN + (size_t)t * kl, CKV + (size_t)t * (kl + rd), kvan, kl, 1e-6);
	lin(f, KB, KN, T, nh * kw, kl, NULL, NULL, L_ "self_attn.kv_b_proj.weight", l);
	for (int t = 0; t < T && !f->bad; t++) {
		const double *ckv = CKV + (size_t)t * (kl + rd), *kb = KB + (size_t)t * nh * kw;
		double *qt = Q + (size_t)t * nh * dqk;
		for (int i = 0; i < rd; i++) /* interleaved -> half layout */
			kr[i] = c->rope_interleave
				? ckv[kl + (i < rd / 2 ? 2 * i : 2 * (i - rd / 2) + 1)]
				: ckv[kl + i];
		rope(kr, rd, t, inv, af);
		for (int hh = 0; hh < nh; hh++) {
			double *qr = qt + (size_t)hh * dqk + nope;
			double *kd = K + ((size_t)t * nh + hh) * dqk;
			for (int i = 0; i < rd; i++)
				tmp[i] = c->rope_interleave
					? qr[i < rd / 2 ? 2 * i : 2 * (i - rd / 2) + 1]
					: qr[i];
			memcpy(qr, tmp, (size_t)rd * 8);
			rope(qr, rd, t, inv, af);
			memcpy(kd, kb + (size_t)hh * kw, (size_t)nope * 8);
			memcpy(kd + nope, kr, (size_t)rd * 8);
			memcpy(Vv + ((size_t)t * nh + hh) * dv, kb + (size_t)hh * kw + nope,
			       (size_t)dv * 8);
		}
	}
	free(qab); free(kvab); free(qan); free(kvan);
	free(TQ); free(CKV); free(KN); free(KB); free(kr); free(tmp);
}

/* RoPE of token t: M-RoPE's axes where the model has mrope_section (the
 * hooks' positions, or t on every axis), else the plain rotation. */
static void rope_at(struct fw *f, double *v, int d, int t, const double *inv,
		    double af)
{
	const struct model_config *c = f->c;
	int64_t p[3] = {t, t, t};
	if (!c->vision.mrope) {
		rope(v, d, t, inv, af);
		return;
	}
	for (int a = 0; f->rope_pos && a < 3; a++)
		p[a] = f->rope_pos[(size_t)a * f->T + t];
	mrope(v, d, p, c->vision.mrope_section, inv, af);
}

/* GQA: q/k/v projections (optional biases, optional per-head q/k norm),
 * RoPE over the whole head. */
static void gqa_qkv(struct fw *f, int l, const double *x, double *Q, double *K,
		    double *Vv, const double *inv, double af)
{
	const struct model_config *c = f->c;
	int T = f->T, H = f->H, nh = (int)c->heads, nkv = (int)c->kv_heads;
	int d = (int)c->head_dim;
	double *bq = vec(f, 0, (uint64_t)nh * d, L_ "self_attn.q_proj.bias", l);
	double *bk = vec(f, 0, (uint64_t)nkv * d, L_ "self_attn.k_proj.bias", l);
	double *bv = vec(f, 0, (uint64_t)nkv * d, L_ "self_attn.v_proj.bias", l);
	double *qn = vec(f, 0, (uint64_t)d, L_ "self_attn.q_norm.weight", l);
	double *kn = vec(f, 0, (uint64_t)d, L_ "self_attn.k_norm.weight", l);
	lin(f, Q, x, T, nh * d, H, bq, NULL, L_ "self_attn.q_proj.weight", l);
	lin(f, K, x, T, nkv * d, H, bk, NULL, L_ "self_attn.k_proj.weight", l);
	lin(f, Vv, x, T, nkv * d, H, bv, NULL, L_ "self_attn.v_proj.weight", l);
	for (int t = 0; t < T && !f->bad; t++) {
		double *qt = Q + (size_t)t * nh * d, *kt = K + (size_t)t * nkv * d;
		for (int hh = 0; hh < nh; hh++) {
			if (qn)
				rmsnorm(qt + (size_t)hh * d, qt + (size_t)hh * d, qn, d,
					c->rms_eps);
			rope_at(f, qt + (size_t)hh * d, d, t, inv, af);
		}
		for (int hh = 0; hh < nkv; hh++) {
			if (kn)
				rmsnorm(kt + (size_t)hh * d, kt + (size_t)hh * d, kn, d,
					c->rms_eps);
			rope_at(f, kt + (size_t)hh * d, d, t, inv, af);
		}
	}
	free(bq); free(bk); free(bv); free(qn); free(kn);
}

/* h += o_proj(causal softmax attention of x), GQA by head groups. */
static void attention(struct fw *f, int l, const double *x, double *h,
		      const double *inv, double af, double scale)
{
	const struct model_config *c = f->c;
	int T = f->T, H = f->H, nh = (int)c->heads;
	int nkv = c->mla ? nh : (int)c->kv_heads;
	int dqk = (int)(c->mla ? c->qk_nope_dim + c->qk_rope_dim : c->head_dim);
	int dv = (int)(c->mla ? c->v_head_dim : c->head_dim);
	int64_t win = model_layer_window(c, l);
	double *Q = zeros((size_t)T * nh * dqk), *K = zeros((size_t)T * nkv * dqk);
	double *Vv = zeros((size_t)T * nkv * dv), *A = zeros((size_t)T * nh * dv);
	double *O = zeros((size_t)T * H), *s = zeros((size_t)T);
	double *bo = vec(f, 0, (uint64_t)H, L_ "self_attn.o_proj.bias", l);
	if (c->mla)
		mla_qkv(f, l, x, Q, K, Vv, inv, af);
	else
		gqa_qkv(f, l, x, Q, K, Vv, inv, af);
	for (int t = 0; t < T && !f->bad; t++)
		for (int hh = 0; hh < nh; hh++) {
			int kh = hh / (nh / nkv), j0 = 0;
			double m = -INFINITY, z = 0;
			if (win > 0 && t - win + 1 > 0)
				j0 = (int)(t - win + 1);
			for (int j = j0; j <= t; j++) {
				double d = 0;
				for (int i = 0; i < dqk; i++)
					d += Q[((size_t)t * nh + hh) * dqk + i] *
					     K[((size_t)j * nkv + kh) * dqk + i];
				s[j] = d * scale;
				if (s[j] > m)
					m = s[j];
			}
			for (int j = j0; j <= t; j++)
				z += (s[j] = exp(s[j] - m));
			for (int i = 0; i < dv; i++) {
				double a = 0;
				for (int j = j0; j <= t; j++)
					a += s[j] / z * Vv[((size_t)j * nkv + kh) * dv + i];
				A[((size_t)t * nh + hh) * dv + i] = a;
			}
		}
	lin(f, O, A, T, H, nh * dv, bo, NULL, L_ "self_attn.o_proj.weight", l);
	for (size_t i = 0; i < (size_t)T * H && !f->bad; i++)
		h[i] += O[i];
	free(Q); free(K); free(Vv); free(A); free(O); free(s); free(bo);
}

/* out [rows][H] = down(silu(gate x) * up x) of the MLP named by prefix. */
static void swiglu(struct fw *f, double *out, const double *x, int rows, int F,
		   const double *gb, const double *ub, const double *db,
		   const char *prefix, const char *g, const char *u, const char *d)
{
	int H = f->H;
	double *a = zeros((size_t)rows * F), *b = zeros((size_t)rows * F);
	lin(f, a, x, rows, F, H, gb, NULL, "%s.%s.weight", prefix, g);
	lin(f, b, x, rows, F, H, ub, NULL, "%s.%s.weight", prefix, u);
	for (size_t i = 0; i < (size_t)rows * F; i++)
		a[i] = silu(a[i]) * b[i];
	lin(f, out, a, rows, H, F, db, NULL, "%s.%s.weight", prefix, d);
	free(a);
	free(b);
}

static void dense_mlp(struct fw *f, int l, const double *x, double *h)
{
	int T = f->T, H = f->H, F = (int)f->c->ffn;
	char pre[64];
	double *gb = vec(f, 0, (uint64_t)F, L_ "mlp.gate_proj.bias", l);
	double *ub = vec(f, 0, (uint64_t)F, L_ "mlp.up_proj.bias", l);
	double *db = vec(f, 0, (uint64_t)H, L_ "mlp.down_proj.bias", l);
	double *o = zeros((size_t)T * H);
	snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
	swiglu(f, o, x, T, F, gb, ub, db, pre, "gate_proj", "up_proj", "down_proj");
	for (size_t i = 0; i < (size_t)T * H && !f->bad; i++)
		h[i] += o[i];
	free(gb); free(ub); free(db); free(o);
}

/*
 * Tokens t0..t0+tn: every expert the group routes to, one at a time, on
 * the rows routed to it (out[(t - t0) * K + j] for slot j); then each
 * token's sum in slot order plus the shared expert, as transformers adds.
 */
static void moe_group(struct fw *f, int l, const double *x, double *h, int t0,
		      int tn, const int *idx, const double *wt, double *out)
{
	const struct model_config *c = f->c;
	int E = (int)c->experts, K = (int)c->top_k, F = (int)c->moe_ffn, H = f->H;
	int mixtral = !strcmp(c->model_type, "mixtral"), S = (int)c->shared_ffn;
	double *X = zeros((size_t)tn * H), *O = zeros((size_t)tn * H);
	double *so = S > 0 ? zeros((size_t)tn * H) : NULL, *gate = zeros((size_t)tn);
	int *slot = malloc((size_t)tn * sizeof *slot);
	char pre[96];
	for (int e = 0; e < E && !f->bad; e++) {
		int n = 0;
		for (int t = 0; t < tn; t++)
			for (int j = 0; j < K; j++)
				if (idx[(size_t)(t0 + t) * K + j] == e) {
					memcpy(X + (size_t)n * H, x + (size_t)(t0 + t) * H,
					       (size_t)H * 8);
					slot[n++] = t * K + j;
				}
		if (!n)
			continue;
		if (mixtral) {
			snprintf(pre, sizeof pre, "model.layers.%d.block_sparse_moe.experts.%d", l, e);
			swiglu(f, O, X, n, F, NULL, NULL, NULL, pre, "w1", "w3", "w2");
		} else {
			snprintf(pre, sizeof pre, "model.layers.%d.mlp.experts.%d", l, e);
			swiglu(f, O, X, n, F, NULL, NULL, NULL, pre, "gate_proj",
			       "up_proj", "down_proj");
		}
		for (int i = 0; i < n; i++)
			memcpy(out + (size_t)slot[i] * H, O + (size_t)i * H, (size_t)H * 8);
	}
	if (S > 0) {
		snprintf(pre, sizeof pre, "model.layers.%d.mlp.%s", l,
			 c->mla ? "shared_experts" : "shared_expert");
		swiglu(f, so, x + (size_t)t0 * H, tn, S, NULL, NULL, NULL, pre,
		       "gate_proj", "up_proj", "down_proj");
		for (int t = 0; t < tn; t++)
			gate[t] = 1;
		if (has(f, L_ "mlp.shared_expert_gate.weight", l)) {
			lin(f, gate, x + (size_t)t0 * H, tn, 1, H, NULL, NULL,
			    L_ "mlp.shared_expert_gate.weight", l);
			for (int t = 0; t < tn; t++)
				gate[t] = 1.0 / (1.0 + exp(-gate[t]));
		}
	}
	for (int t = 0; t < tn && !f->bad; t++) {
		double *ht = h + (size_t)(t0 + t) * H, *acc = O; /* O: scratch now */
		memset(acc, 0, (size_t)H * 8);
		for (int j = 0; j < K; j++)
			for (int i = 0; i < H; i++)
				acc[i] += wt[(size_t)(t0 + t) * K + j] *
					  out[((size_t)t * K + j) * H + i];
		for (int i = 0; so && i < H; i++)
			acc[i] += gate[t] * so[(size_t)t * H + i];
		for (int i = 0; i < H; i++)
			ht[i] += acc[i];
	}
	free(X); free(O); free(so); free(gate); free(slot);
}

static void moe(struct fw *f, int l, const double *x, double *h)
{
	const struct model_config *c = f->c;
	const struct ref_hooks *hk = f->hk;
	int T = f->T, H = f->H, E = (int)c->experts, K = (int)c->top_k;
	int mixtral = !strcmp(c->model_type, "mixtral"), group;
	double *rb = vec(f, 0, (uint64_t)E, L_ "mlp.gate.e_score_correction_bias", l);
	double *lg = zeros((size_t)T * E), *wt = zeros((size_t)T * K), *out;
	double *sq = hk && hk->route ? zeros((size_t)T * E) : NULL;
	int *idx = calloc((size_t)T * K, sizeof *idx);
	lin(f, lg, x, T, E, H, NULL, sq, mixtral ? L_ "block_sparse_moe.gate.weight"
						 : L_ "mlp.gate.weight", l);
	for (int t = 0; t < T && !f->bad; t++) {
		ref_route(c, lg + (size_t)t * E, rb, idx + (size_t)t * K,
			  wt + (size_t)t * K, 0);
		if (sq)
			hk->route(hk->ctx, l, t, rb, lg + (size_t)t * E, sq + (size_t)t * E);
		if (hk && hk->follow &&
		    hk->follow(hk->ctx, l, t, rb, lg + (size_t)t * E,
			       idx + (size_t)t * K))
			ref_route(c, lg + (size_t)t * E, rb, idx + (size_t)t * K,
				  wt + (size_t)t * K, 1);
	}
	group = (int)(MOE_OUT_BYTES / ((size_t)K * H * 8));
	group = group < 1 ? 1 : group > T ? T : group;
	out = zeros((size_t)group * K * H);
	for (int t0 = 0; t0 < T && !f->bad; t0 += group)
		moe_group(f, l, x, h, t0, T - t0 < group ? T - t0 : group, idx, wt, out);
	free(rb); free(lg); free(wt); free(sq); free(idx); free(out);
}

/* Final norm of h, then the lm_head (or tied embedding) block by block. */
static int head(struct ref_w *w, const struct model_config *c, const double *h,
		int T, ref_block_fn fn, void *ctx, struct d0_err *err)
{
	int H = (int)c->hidden, absent, rc;
	double *nw = ref_w_vector(w, "model.norm.weight", (uint64_t)H, &absent, err);
	double *x;
	if (!nw)
		return absent ? d0_errf(err, "%s: no tensor 'model.norm.weight'",
					w->ck.dir) : -1;
	x = zeros((size_t)T * H);
	for (int t = 0; t < T; t++)
		rmsnorm(x + (size_t)t * H, h + (size_t)t * H, nw, H, c->rms_eps);
	rc = ref_w_linear_blocks(w, c->tie_embeddings ? "model.embed_tokens.weight"
						      : "lm_head.weight",
				 x, T, (int)c->vocab, H, fn, ctx, err);
	free(nw);
	free(x);
	return rc;
}

int ref_head_logits(const char *dir, const struct model_config *c,
		    const double *h, int T, size_t mem, ref_block_fn fn,
		    void *ctx, struct d0_err *err)
{
	struct ref_w w;
	int rc;
	if (ref_w_open(&w, dir, &c->qc, mem, err) < 0)
		return -1;
	w.prefix = c->vision.lm_prefix;
	rc = head(&w, c, h, T, fn, ctx, err);
	ref_w_close(&w);
	return rc;
}

struct full_logits {
	double *lg;
	int T, V;
};

static int keep_block(void *ctx, int v0, int n, const double *blk,
		      struct d0_err *err)
{
	struct full_logits *fl = ctx;
	(void)err;
	for (int t = 0; t < fl->T; t++)
		memcpy(fl->lg + (size_t)t * fl->V + v0, blk + (size_t)t * n,
		       (size_t)n * 8);
	return 0;
}

/* h [T][H] = the embedding rows of the tokens. */
static void embed(struct fw *f, const int64_t *tokens, double *h)
{
	struct ref_mat m;
	unsigned char *raw;
	int found;
	if (f->bad)
		return;
	found = ref_mat_find(&f->w, "model.embed_tokens.weight", &m, f->err);
	if (found <= 0 || m.cols != (uint64_t)f->H) {
		if (found == 0 || (found > 0 && m.cols != (uint64_t)f->H))
			d0_errf(f->err, "%s: no tensor 'model.embed_tokens.weight' "
				"of %d columns", f->w.ck.dir, f->H);
		f->bad = 1;
		return;
	}
	raw = malloc(ref_mat_raw_bytes(&m, 1) + 8);
	for (int t = 0; t < f->T && !f->bad; t++) {
		if (tokens[t] < 0 || (uint64_t)tokens[t] >= m.rows) {
			d0_errf(f->err, "token id %lld is outside the vocabulary "
				"(%llu rows of model.embed_tokens.weight)",
				(long long)tokens[t], (unsigned long long)m.rows);
			f->bad = 1;
		} else if (ref_mat_rows(&f->w, &m, (uint64_t)tokens[t], 1,
					h + (size_t)t * f->H, raw, f->err) < 0) {
			f->bad = 1;
		}
	}
	free(raw);
}

int ref_forward(const char *dir, const int64_t *tokens, int T,
		double **logits_out, double **layers_out,
		struct model_config *cfg, struct d0_err *err)
{
	return ref_forward_hooked(dir, tokens, T, logits_out, layers_out, cfg,
				  NULL, err);
}

int ref_forward_hooked(const char *dir, const int64_t *tokens, int T,
		       double **logits_out, double **layers_out,
		       struct model_config *cfg, const struct ref_hooks *hk,
		       struct d0_err *err)
{
	struct fw f;
	struct model_config *c = cfg;
	char *cp = path_join(dir, "config.json");
	int H, rd, stopped = 0;
	double *h, *x, *inv, af, scale;

	memset(&f, 0, sizeof f);
	*logits_out = NULL;
	if (layers_out)
		*layers_out = NULL;
	if (model_config_load(cp, c, err) < 0) {
		free(cp);
		return -1;
	}
	free(cp);
	if (ref_w_open(&f.w, dir, &c->qc, hk ? hk->mem : 0, err) < 0)
		return -1;
	f.w.prefix = c->vision.lm_prefix;
	f.c = c;
	f.hk = hk;
	f.T = T;
	f.H = H = (int)c->hidden;
	f.err = err;
	rd = (int)(c->mla ? c->qk_rope_dim : c->head_dim);
	inv = zeros((size_t)rd);
	if (op_rope_inv_freq(c, rd, T, inv, &af) < 0) {
		free(inv);
		ref_w_close(&f.w);
		return d0_errf(err, "rope type '%s' not implemented", c->rope.type);
	}
	scale = 1.0 / sqrt((double)(c->mla ? c->qk_nope_dim + c->qk_rope_dim
					   : c->head_dim));
	if (c->mla && c->rope.type[0] && c->rope.mscale_all_dim != 0) {
		double m = c->rope.factor <= 1 ? 1.0
			   : 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
		scale *= m * m;
	}
	h = zeros((size_t)T * H);
	x = zeros((size_t)T * H);
	if (!(hk && hk->no_embed))
		embed(&f, tokens, h);
	if (hk && hk->embeds && !(hk->no_embed)) /* the image splice */
		for (int t = 0, k = 0; t < T && t < hk->splice_upto; t++)
			if (tokens[t] == c->vision.image_token_id)
				memcpy(h + (size_t)t * H, hk->embeds + (size_t)k++ * H,
				       (size_t)H * sizeof *h);
	f.rope_pos = hk ? hk->rope_pos : NULL;
	if (layers_out)
		*layers_out = malloc((size_t)c->layers * T * H * 8 + 8);
	for (int l = 0; l < c->layers && !f.bad && !stopped; l++) {
		double *in_n, *post_n;
		if (hk && hk->skip && hk->skip(hk->ctx, l))
			continue;
		if (hk && hk->layer_in && hk->layer_in(hk->ctx, l, h, err) < 0) {
			stopped = 1;
			break;
		}
		in_n = vec(&f, 1, (uint64_t)H, L_ "input_layernorm.weight", l);
		post_n = vec(&f, 1, (uint64_t)H, L_ "post_attention_layernorm.weight", l);
		for (int t = 0; t < T && !f.bad; t++)
			rmsnorm(x + (size_t)t * H, h + (size_t)t * H, in_n, H, c->rms_eps);
		attention(&f, l, x, h, inv, af, scale);
		for (int t = 0; t < T && !f.bad; t++)
			rmsnorm(x + (size_t)t * H, h + (size_t)t * H, post_n, H, c->rms_eps);
		if (model_layer_is_moe(c, l))
			moe(&f, l, x, h);
		else
			dense_mlp(&f, l, x, h);
		free(in_n);
		free(post_n);
		if (f.bad)
			break;
		if (layers_out)
			memcpy(*layers_out + (size_t)l * T * H, h, (size_t)T * H * 8);
		if (hk && hk->layer_out)
			hk->layer_out(hk->ctx, l, h);
	}
	stopped |= f.bad;
	if (!stopped && hk && hk->head) {
		stopped = head(&f.w, c, h, T, hk->head, hk->ctx, err) < 0;
	} else if (!stopped && !(hk && hk->no_head)) {
		struct full_logits fl = {malloc((size_t)T * c->vocab * 8 + 8), T,
					 (int)c->vocab};
		stopped = head(&f.w, c, h, T, keep_block, &fl, err) < 0;
		*logits_out = fl.lg;
	}
	free(h);
	free(x);
	free(inv);
	ref_w_close(&f.w);
	if (stopped) {
		free(*logits_out);
		*logits_out = NULL;
		if (layers_out) {
			free(*layers_out);
			*layers_out = NULL;
		}
	}
	return stopped ? -1 : 0;
}
