/*
 * ref.c - the float64 reference forward pass that `validate` measures the
 * parallel runtime against.  One process, the whole checkpoint in double,
 * every token at once with an explicit causal mask, no cache, no
 * parallelism and no code shared with runtime.c's math: transformers'
 * semantics written out as plainly as possible.
 */
#include "engine.h"
#include "ref_hooks.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct weights {
	struct ckpt ck;
	int fd_ok;
	const struct quant_config *q; /* block / group sizes of the format */
};

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

/* A stored tensor's bytes and header entry, or NULL. */
static unsigned char *raw(struct weights *w, const char *name,
			  const struct st_tensor **out)
{
	for (size_t k = 0; k < w->ck.nshards; k++) {
		const struct st_tensor *t = st_find(&w->ck.shards[k].st, name);
		unsigned char *b;
		int fd;
		if (!t)
			continue;
		b = malloc(t->end - t->begin + 1);
		fd = open(w->ck.shards[k].path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || pread_full(fd, b, t->end - t->begin,
					 w->ck.shards[k].st.data_off + t->begin) < 0) {
			if (fd >= 0)
				close(fd);
			free(b);
			return NULL;
		}
		close(fd);
		*out = t;
		return b;
	}
	return NULL;
}

static double scalar(const unsigned char *b, enum dtype dt, uint64_t i)
{
	float f;
	uint16_t h;
	if (dt == DT_F32) {
		memcpy(&f, b + 4 * i, 4);
		return f;
	}
	memcpy(&h, b + 2 * i, 2);
	return dt == DT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

/* W = fp8(q) * scale_inv[i / block_rows][j / block_cols], in double. */
static double *fp8_weight(struct weights *w, const struct st_tensor *t,
			  const unsigned char *q, const char *name)
{
	char sn[220];
	const struct st_tensor *st;
	unsigned char *sc;
	uint64_t R = t->shape[0], C = t->shape[1];
	double *d;
	snprintf(sn, sizeof sn, "%s_scale_inv", name);
	if (!(sc = raw(w, sn, &st)) || st->ndim != 2)
		return NULL;
	d = malloc(R * C * 8 + 8);
	for (uint64_t i = 0; i < R; i++)
		for (uint64_t j = 0; j < C; j++)
			d[i * C + j] = ref_fp8_value(t->dtype == DT_F8_E5M2,
						     q[i * C + j]) *
				       scalar(sc, st->dtype,
					      (i / (uint64_t)w->q->block[0]) *
						      st->shape[1] +
					      j / (uint64_t)w->q->block[1]);
	free(sc);
	return d;
}

/* W = (nibble - 2^(bits-1)) * scale[i][j / group] from name_packed. */
static double *packed_weight(struct weights *w, const char *name)
{
	char pn[220], sn[220];
	const struct st_tensor *pt, *st;
	unsigned char *pk, *sc;
	int bits = w->q->bits;
	uint64_t per = 32 / (uint64_t)bits, R, C, g;
	double *d;
	snprintf(pn, sizeof pn, "%s_packed", name);
	snprintf(sn, sizeof sn, "%s_scale", name);
	if (!(pk = raw(w, pn, &pt)))
		return NULL;
	if (!(sc = raw(w, sn, &st))) {
		free(pk);
		return NULL;
	}
	R = pt->shape[0];
	C = pt->shape[1] * per;
	g = w->q->group ? (uint64_t)w->q->group : C;
	d = malloc(R * C * 8 + 8);
	for (uint64_t i = 0; i < R; i++)
		for (uint64_t j = 0; j < C; j++) {
			uint32_t word = (uint32_t)pk[4 * (i * pt->shape[1] + j / per)] |
					(uint32_t)pk[4 * (i * pt->shape[1] + j / per) + 1] << 8 |
					(uint32_t)pk[4 * (i * pt->shape[1] + j / per) + 2] << 16 |
					(uint32_t)pk[4 * (i * pt->shape[1] + j / per) + 3] << 24;
			long v = (long)((word >> (bits * (j % per))) &
					((1u << bits) - 1)) - (1L << (bits - 1));
			d[i * C + j] = (double)v *
				       scalar(sc, st->dtype, i * st->shape[1] + j / g);
		}
	free(pk);
	free(sc);
	return d;
}

/* Tensor name as double[] (dequantised exactly), or NULL if absent. */
static double *get(struct weights *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#include <stdarg.h>
static double *get(struct weights *w, const char *fmt, ...)
{
	char name[200];
	const struct st_tensor *t;
	unsigned char *b;
	double *d = NULL;
	uint64_t n;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	if (!(b = raw(w, name, &t)))
		return w->q->kind == QUANT_PACKED_INT ? packed_weight(w, name)
						      : NULL;
	n = st_numel(t);
	if (t->dtype == DT_F8_E4M3 || t->dtype == DT_F8_E5M2) {
		d = t->ndim == 2 ? fp8_weight(w, t, b, name) : NULL;
	} else if (t->dtype == DT_F32 || t->dtype == DT_BF16 ||
		   t->dtype == DT_F16) {
		d = malloc(n * 8 + 8);
		for (uint64_t i = 0; i < n; i++)
			d[i] = scalar(b, t->dtype, i);
	}
	free(b);
	return d;
}

/* y[n] = W[n][k] x[k] (+ b) */
static void mv(double *y, const double *W, const double *x, const double *b,
	       int n, int k)
{
	for (int i = 0; i < n; i++) {
		double s = b ? b[i] : 0;
		for (int j = 0; j < k; j++)
			s += W[(size_t)i * k + j] * x[j];
		y[i] = s;
	}
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

static void swiglu_mlp(double *out, const double *x, const double *g,
		       const double *gb, const double *u, const double *ub,
		       const double *dn, const double *db, int H, int F)
{
	double *a = malloc((size_t)F * 8), *b = malloc((size_t)F * 8);
	mv(a, g, x, gb, F, H);
	mv(b, u, x, ub, F, H);
	for (int i = 0; i < F; i++)
		a[i] = silu(a[i]) * b[i];
	mv(out, dn, a, db, H, F);
	free(a);
	free(b);
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

static void route(const struct model_config *c, const double *logits,
		  const double *bias, int *idx, double *w)
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
		topk(p, E, K, idx);
		for (int j = 0; j < K; j++)
			sum += (w[j] = p[idx[j]]);
		if (c->norm_topk_prob)
			for (int j = 0; j < K; j++)
				w[j] /= sum;
	}
	free(p);
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
	int stopped = 0;
	struct weights W;
	struct model_config *c = cfg;
	char *cp = path_join(dir, "config.json");
	int H, V, nh, nkv, dqk, dv, rd;
	double *h, *x, *inv, af, scale, *logits;
	int mixtral;

	memset(&W, 0, sizeof W);
	if (model_config_load(cp, c, err) < 0) {
		free(cp);
		return -1;
	}
	free(cp);
	W.q = &c->qc;
	if (ckpt_open(dir, &W.ck, err) < 0)
		return -1;
	for (size_t k = 0; k < W.ck.nshards; k++) {
		if (st_open(W.ck.shards[k].path, &W.ck.shards[k].st, err) < 0) {
			ckpt_close(&W.ck);
			return -1;
		}
		W.ck.shards[k].parsed = 1;
	}
	H = (int)c->hidden;
	V = (int)c->vocab;
	nh = (int)c->heads;
	nkv = c->mla ? nh : (int)c->kv_heads;
	dqk = (int)(c->mla ? c->qk_nope_dim + c->qk_rope_dim : c->head_dim);
	dv = (int)(c->mla ? c->v_head_dim : c->head_dim);
	rd = (int)(c->mla ? c->qk_rope_dim : c->head_dim);
	mixtral = !strcmp(c->model_type, "mixtral");
	inv = calloc((size_t)rd, 8);
	if (op_rope_inv_freq(c, rd, T, inv, &af) < 0) {
		free(inv);
		ckpt_close(&W.ck);
		return d0_errf(err, "rope type '%s' not implemented", c->rope.type);
	}
	scale = 1.0 / sqrt((double)dqk);
	if (c->mla && c->rope.type[0] && c->rope.mscale_all_dim != 0) {
		double m = c->rope.factor <= 1 ? 1.0
			   : 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
		scale *= m * m;
	}
	h = calloc((size_t)T * H, 8);
	x = calloc((size_t)T * H, 8);
	if (!(hk && hk->no_embed)) {
		double *emb = get(&W, "model.embed_tokens.weight");
		for (int t = 0; t < T; t++)
			memcpy(h + (size_t)t * H, emb + tokens[t] * H, (size_t)H * 8);
		free(emb);
	}
	if (layers_out)
		*layers_out = malloc((size_t)c->layers * T * H * 8);
	for (int l = 0; l < c->layers && !stopped; l++) {
		const char *p = "model.layers";
		if (hk && hk->skip && hk->skip(hk->ctx, l))
			continue;
		if (hk && hk->layer_in && hk->layer_in(hk->ctx, l, h, err) < 0) {
			stopped = 1;
			break;
		}
		double *in_n = get(&W, "%s.%d.input_layernorm.weight", p, l);
		double *post_n = get(&W, "%s.%d.post_attention_layernorm.weight", p, l);
		double *Q = calloc((size_t)T * nh * dqk, 8), *K = calloc((size_t)T * nkv * dqk, 8);
		double *Vv = calloc((size_t)T * nkv * dv, 8), *A = calloc((size_t)T * nh * dv, 8);
		double *o = malloc((size_t)H * 8);
		double *wo = get(&W, "%s.%d.self_attn.o_proj.weight", p, l);
		double *bo = get(&W, "%s.%d.self_attn.o_proj.bias", p, l);
		for (int t = 0; t < T; t++)
			rmsnorm(x + (size_t)t * H, h + (size_t)t * H, in_n, H, c->rms_eps);
		if (c->mla) {
			int ql = (int)c->q_lora_rank, kl = (int)c->kv_lora_rank;
			int nope = (int)c->qk_nope_dim;
			double *qa = ql ? get(&W, "%s.%d.self_attn.q_a_proj.weight", p, l) : NULL;
			double *qab = ql && c->attention_bias ? get(&W, "%s.%d.self_attn.q_a_proj.bias", p, l) : NULL;
			double *kvab = c->attention_bias ? get(&W, "%s.%d.self_attn.kv_a_proj_with_mqa.bias", p, l) : NULL;
			double *qan = ql ? get(&W, "%s.%d.self_attn.q_a_layernorm.weight", p, l) : NULL;
			double *qb = get(&W, ql ? "%s.%d.self_attn.q_b_proj.weight"
					      : "%s.%d.self_attn.q_proj.weight", p, l);
			double *kva = get(&W, "%s.%d.self_attn.kv_a_proj_with_mqa.weight", p, l);
			double *kvan = get(&W, "%s.%d.self_attn.kv_a_layernorm.weight", p, l);
			double *kvb = get(&W, "%s.%d.self_attn.kv_b_proj.weight", p, l);
			double *tq = malloc((size_t)(ql + 1) * 8), *ckv = malloc((size_t)(kl + rd) * 8);
			double *kn = malloc((size_t)kl * 8), *kb = malloc((size_t)nh * (nope + dv) * 8);
			for (int t = 0; t < T; t++) {
				double *xt = x + (size_t)t * H, *qt = Q + (size_t)t * nh * dqk;
				double *kr = malloc((size_t)rd * 8), *tmp = malloc((size_t)rd * 8);
				if (ql) {
					mv(tq, qa, xt, qab, ql, H);
					rmsnorm(tq, tq, qan, ql, 1e-6); /* default eps */
					mv(qt, qb, tq, NULL, nh * dqk, ql);
				} else {
					mv(qt, qb, xt, NULL, nh * dqk, H);
				}
				mv(ckv, kva, xt, kvab, kl + rd, H);
				rmsnorm(kn, ckv, kvan, kl, 1e-6);
				mv(kb, kvb, kn, NULL, nh * (nope + dv), kl);
				for (int i = 0; i < rd; i++) /* interleaved -> half layout */
					kr[i] = c->rope_interleave
						? ckv[kl + (i < rd / 2 ? 2 * i : 2 * (i - rd / 2) + 1)]
						: ckv[kl + i];
				rope(kr, rd, t, inv, af);
				for (int hh = 0; hh < nh; hh++) {
					double *qr = qt + (size_t)hh * dqk + nope;
					for (int i = 0; i < rd; i++)
						tmp[i] = c->rope_interleave
							? qr[i < rd / 2 ? 2 * i : 2 * (i - rd / 2) + 1]
							: qr[i];
					memcpy(qr, tmp, (size_t)rd * 8);
					rope(qr, rd, t, inv, af);
					double *kd = K + ((size_t)t * nh + hh) * dqk;
					memcpy(kd, kb + (size_t)hh * (nope + dv), (size_t)nope * 8);
					memcpy(kd + nope, kr, (size_t)rd * 8);
					memcpy(Vv + ((size_t)t * nh + hh) * dv,
					       kb + (size_t)hh * (nope + dv) + nope, (size_t)dv * 8);
				}
				free(kr);
				free(tmp);
			}
			free(qa); free(qan); free(qb); free(kva); free(kvan); free(kvb);
			free(qab); free(kvab);
			free(tq); free(ckv); free(kn); free(kb);
		} else {
			double *wq = get(&W, "%s.%d.self_attn.q_proj.weight", p, l);
			double *wk = get(&W, "%s.%d.self_attn.k_proj.weight", p, l);
			double *wv = get(&W, "%s.%d.self_attn.v_proj.weight", p, l);
			double *bq = get(&W, "%s.%d.self_attn.q_proj.bias", p, l);
			double *bk = get(&W, "%s.%d.self_attn.k_proj.bias", p, l);
			double *bv = get(&W, "%s.%d.self_attn.v_proj.bias", p, l);
			double *qn = get(&W, "%s.%d.self_attn.q_norm.weight", p, l);
			double *kn = get(&W, "%s.%d.self_attn.k_norm.weight", p, l);
			for (int t = 0; t < T; t++) {
				double *xt = x + (size_t)t * H;
				double *qt = Q + (size_t)t * nh * dqk, *kt = K + (size_t)t * nkv * dqk;
				mv(qt, wq, xt, bq, nh * dqk, H);
				mv(kt, wk, xt, bk, nkv * dqk, H);
				mv(Vv + (size_t)t * nkv * dv, wv, xt, bv, nkv * dv, H);
				for (int hh = 0; hh < nh; hh++) {
					if (qn)
						rmsnorm(qt + (size_t)hh * dqk, qt + (size_t)hh * dqk,
							qn, dqk, c->rms_eps);
					rope(qt + (size_t)hh * dqk, dqk, t, inv, af);
				}
				for (int hh = 0; hh < nkv; hh++) {
					if (kn)
						rmsnorm(kt + (size_t)hh * dqk, kt + (size_t)hh * dqk,
							kn, dqk, c->rms_eps);
					rope(kt + (size_t)hh * dqk, dqk, t, inv, af);
				}
			}
			free(wq); free(wk); free(wv); free(bq); free(bk); free(bv);
			free(qn); free(kn);
		}
		/* causal softmax attention, GQA by head groups */
		for (int t = 0; t < T; t++)
			for (int hh = 0; hh < nh; hh++) {
				int kh = hh / (nh / nkv), j0 = 0;
				int64_t win = model_layer_window(c, l);
				double *s = malloc((size_t)(t + 1) * 8), m = -INFINITY, z = 0;
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
				free(s);
			}
		for (int t = 0; t < T; t++) {
			mv(o, wo, A + (size_t)t * nh * dv, bo, H, nh * dv);
			for (int i = 0; i < H; i++)
				h[(size_t)t * H + i] += o[i];
		}
		free(Q); free(K); free(Vv); free(A); free(wo); free(bo);
		/* MLP or MoE */
		for (int t = 0; t < T; t++)
			rmsnorm(x + (size_t)t * H, h + (size_t)t * H, post_n, H, c->rms_eps);
		if (!model_layer_is_moe(c, l)) {
			double *g = get(&W, "%s.%d.mlp.gate_proj.weight", p, l);
			double *u = get(&W, "%s.%d.mlp.up_proj.weight", p, l);
			double *d = get(&W, "%s.%d.mlp.down_proj.weight", p, l);
			double *gb = get(&W, "%s.%d.mlp.gate_proj.bias", p, l);
			double *ub = get(&W, "%s.%d.mlp.up_proj.bias", p, l);
			double *db = get(&W, "%s.%d.mlp.down_proj.bias", p, l);
			for (int t = 0; t < T; t++) {
				swiglu_mlp(o, x + (size_t)t * H, g, gb, u, ub, d, db, H, (int)c->ffn);
				for (int i = 0; i < H; i++)
					h[(size_t)t * H + i] += o[i];
			}
			free(g); free(u); free(d); free(gb); free(ub); free(db);
		} else {
			int E = (int)c->experts, Kk = (int)c->top_k, F = (int)c->moe_ffn;
			double *router = get(&W, mixtral ? "%s.%d.block_sparse_moe.gate.weight"
						       : "%s.%d.mlp.gate.weight", p, l);
			double *rb = get(&W, "%s.%d.mlp.gate.e_score_correction_bias", p, l);
			double *lg = malloc((size_t)E * 8), *wt = malloc((size_t)Kk * 8);
			double *acc = malloc((size_t)H * 8);
			int *idx = malloc((size_t)Kk * sizeof(int));
			for (int t = 0; t < T; t++) {
				double *xt = x + (size_t)t * H;
				mv(lg, router, xt, NULL, E, H);
				route(c, lg, rb, idx, wt);
				if (hk && hk->route)
					hk->route(hk->ctx, l, t, router, rb, xt, lg);
				memset(acc, 0, (size_t)H * 8);
				for (int j = 0; j < Kk; j++) {
					int e = idx[j];
					double *g, *u, *d;
					if (mixtral) {
						g = get(&W, "%s.%d.block_sparse_moe.experts.%d.w1.weight", p, l, e);
						d = get(&W, "%s.%d.block_sparse_moe.experts.%d.w2.weight", p, l, e);
						u = get(&W, "%s.%d.block_sparse_moe.experts.%d.w3.weight", p, l, e);
					} else {
						g = get(&W, "%s.%d.mlp.experts.%d.gate_proj.weight", p, l, e);
						u = get(&W, "%s.%d.mlp.experts.%d.up_proj.weight", p, l, e);
						d = get(&W, "%s.%d.mlp.experts.%d.down_proj.weight", p, l, e);
					}
					swiglu_mlp(o, xt, g, NULL, u, NULL, d, NULL, H, F);
					for (int i = 0; i < H; i++)
						acc[i] += wt[j] * o[i];
					free(g); free(u); free(d);
				}
				if (c->shared_ffn > 0) {
					const char *sn = c->mla ? "shared_experts" : "shared_expert";
					double *g = get(&W, "%s.%d.mlp.%s.gate_proj.weight", p, l, sn);
					double *u = get(&W, "%s.%d.mlp.%s.up_proj.weight", p, l, sn);
					double *d = get(&W, "%s.%d.mlp.%s.down_proj.weight", p, l, sn);
					double *sg = get(&W, "%s.%d.mlp.shared_expert_gate.weight", p, l);
					double gate = 1;
					swiglu_mlp(o, xt, g, NULL, u, NULL, d, NULL, H, (int)c->shared_ffn);
					if (sg) {
						mv(&gate, sg, xt, NULL, 1, H);
						gate = 1.0 / (1.0 + exp(-gate));
					}
					for (int i = 0; i < H; i++)
						acc[i] += gate * o[i];
					free(g); free(u); free(d); free(sg);
				}
				for (int i = 0; i < H; i++)
					h[(size_t)t * H + i] += acc[i];
			}
			free(router); free(rb); free(lg); free(wt); free(acc); free(idx);
		}
		free(o);
		free(in_n);
		free(post_n);
		if (layers_out)
			memcpy(*layers_out + (size_t)l * T * H, h, (size_t)T * H * 8);
		if (hk && hk->layer_out)
			hk->layer_out(hk->ctx, l, h);
	}
	logits = NULL;
	if (!stopped && !(hk && hk->no_head)) {
		double *fn = get(&W, "model.norm.weight");
		double *head = get(&W, c->tie_embeddings ? "model.embed_tokens.weight"
							 : "lm_head.weight");
		logits = malloc((size_t)T * V * 8);
		for (int t = 0; t < T; t++) {
			rmsnorm(x + (size_t)t * H, h + (size_t)t * H, fn, H, c->rms_eps);
			mv(logits + (size_t)t * V, head, x + (size_t)t * H, NULL, V, H);
		}
		free(fn);
		free(head);
	}
	*logits_out = logits;
	free(h);
	free(x);
	free(inv);
	ckpt_close(&W.ck);
	if (stopped && layers_out) {
		free(*layers_out);
		*layers_out = NULL;
	}
	return stopped ? -1 : 0;
}
