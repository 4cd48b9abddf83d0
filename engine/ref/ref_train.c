/*
 * ref_train.c - the float64 reference backward: one step's loss and the
 * gradient of every parameter tensor, for training.gradients.
 *
 * Written apart from engine/train/ on purpose: the whole checkpoint read
 * into float64 (ref_weights.h's reader), one sequence at a time, every
 * product a plain loop in index order, no BLAS, no tensor parallelism.
 * transformers' semantics as ref.c writes them: RMSNorm with the weight
 * after, rotate_half RoPE (DeepSeek's interleaved layout permuted first),
 * causal softmax attention, SwiGLU, Mixtral/Qwen-MoE softmax and
 * DeepSeek-V3 sigmoid group top-k routers (the choice fixed, its weights
 * differentiated), MLA.  Each backward is the chain rule of its forward
 * written out by hand; central differences of this file's own float64
 * loss check it (step_train.c), and its loss is checked against ref.c's
 * logits.
 */
#include "ref_train.h"
#include "ref_weights.h"
#include "runtime.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct rten {
	char name[160];
	int64_t rows, cols;
	double *w, *g;
};

struct net {
	struct model_config c;
	struct rten *t;
	int n, cap;
	int H, V, nh, nkv, dqk, dv, rd, nope, kvl, ql, E, K;
	double scale, af, *inv;
	int S;
};

static struct rten *tf(struct net *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static struct rten *tf(struct net *m, const char *fmt, ...)
{
	char n[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(n, sizeof n, fmt, ap);
	va_end(ap);
	for (int i = 0; i < m->n; i++)
		if (!strcmp(m->t[i].name, n))
			return &m->t[i];
	return NULL;
}

/* Every tensor of the text model as float64, with a zeroed gradient. */
static int load_all(struct net *m, const char *dir, struct d0_err *err)
{
	struct tensor_spec *sp = NULL;
	size_t ns = 0;
	struct ref_w w;
	int rc = 0;
	if (model_tensors(&m->c, &sp, &ns, err) < 0)
		return -1;
	if (ref_w_open(&w, dir, &m->c.qc, 0, err) < 0) {
		free(sp);
		return -1;
	}
	m->t = calloc(ns + 1, sizeof *m->t);
	for (size_t i = 0; i < ns && rc == 0; i++) {
		struct rten *x = &m->t[m->n];
		if (sp[i].mtp)
			continue;
		snprintf(x->name, sizeof x->name, "%s", sp[i].name);
		x->rows = (int64_t)sp[i].shape[0];
		x->cols = sp[i].ndim == 2 ? (int64_t)sp[i].shape[1] : 1;
		x->w = malloc((size_t)(x->rows * x->cols) * sizeof(double));
		x->g = calloc((size_t)(x->rows * x->cols), sizeof(double));
		if (sp[i].ndim == 2) {
			struct ref_mat rm;
			unsigned char *raw;
			int f = ref_mat_find(&w, x->name, &rm, err);
			if (f <= 0) {
				rc = f < 0 ? -1 : d0_errf(err, "%s: tensor '%s' missing",
							  dir, x->name);
				break;
			}
			raw = malloc(ref_mat_raw_bytes(&rm, (uint64_t)x->rows) + 8);
			if (ref_mat_rows(&w, &rm, 0, (uint64_t)x->rows, x->w, raw, err) < 0)
				rc = -1;
			free(raw);
		} else {
			int absent = 0;
			double *v = ref_w_vector(&w, x->name, (uint64_t)x->rows, &absent, err);
			if (!v) {
				rc = absent ? d0_errf(err, "%s: tensor '%s' missing", dir,
						      x->name) : -1;
				break;
			}
			memcpy(x->w, v, (size_t)x->rows * sizeof(double));
			free(v);
		}
		m->n++;
	}
	ref_w_close(&w);
	free(sp);
	return rc;
}

/* ---------------------------------------------------------------- math */

/* y[n] = W[n][k] x + b */
static void mv(const struct rten *W, const struct rten *b, const double *x, double *y)
{
	for (int64_t i = 0; i < W->rows; i++) {
		double s = 0;
		for (int64_t j = 0; j < W->cols; j++)
			s += W->w[i * W->cols + j] * x[j];
		y[i] = s + (b ? b->w[i] : 0);
	}
}

/* dW += dy x^T, db += dy, dx += W^T dy */
static void mv_b(struct rten *W, struct rten *b, const double *x, const double *dy,
		 double *dx)
{
	for (int64_t i = 0; i < W->rows; i++) {
		for (int64_t j = 0; j < W->cols; j++) {
			W->g[i * W->cols + j] += dy[i] * x[j];
			if (dx)
				dx[j] += W->w[i * W->cols + j] * dy[i];
		}
		if (b)
			b->g[i] += dy[i];
	}
}

static double rms(const double *x, int n, double eps)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += x[i] * x[i];
	return 1.0 / sqrt(s / n + eps);
}

static void nrm(const struct rten *w, const double *x, double *y, double *r, int n,
		double eps)
{
	*r = rms(x, n, eps);
	for (int i = 0; i < n; i++)
		y[i] = w->w[i] * x[i] * *r;
}

/* dx += d(norm)/dx dy, dw += */
static void nrm_b(struct rten *w, const double *x, double r, const double *dy,
		  double *dx, int n)
{
	double a = 0;
	for (int i = 0; i < n; i++) {
		a += dy[i] * w->w[i] * x[i];
		w->g[i] += dy[i] * x[i] * r;
	}
	for (int i = 0; i < n; i++)
		dx[i] += r * w->w[i] * dy[i] - x[i] * r * r * r * a / n;
}

static void rot(const struct net *m, double *v, int pos, int back)
{
	int h = m->rd / 2;
	for (int i = 0; i < h; i++) {
		double a = pos * m->inv[i], c = cos(a) * m->af, s = sin(a) * m->af;
		double x1 = v[i], x2 = v[i + h];
		if (back) {
			v[i] = x1 * c + x2 * s;
			v[i + h] = -x1 * s + x2 * c;
		} else {
			v[i] = x1 * c - x2 * s;
			v[i + h] = x2 * c + x1 * s;
		}
	}
}

/* interleaved [a0 b0 a1 b1 ..] <-> halves [a0 a1 .. b0 b1 ..] */
static void perm(double *v, int n, int back)
{
	double t[1024];
	for (int i = 0; i < n / 2; i++) {
		if (back) {
			t[2 * i] = v[i];
			t[2 * i + 1] = v[i + n / 2];
		} else {
			t[i] = v[2 * i];
			t[i + n / 2] = v[2 * i + 1];
		}
	}
	memcpy(v, t, (size_t)n * sizeof(double));
}

static double sg(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ------------------------------------------------------- saved values */

struct lay {
	double *x, *xn1, r1[4096], *q, *k, *v, *qp, *kp, *qr, *kr, *P, *att;
	double *h2, *xn2, r2[4096];
	double *g, *u;
	double *prob, *wt, *eg, *eu, *ey, *sg_, *su, *sy, *sgl;
	int *idx;
	double *cqa, *cqn, *cqr, *ckv, *cn, *cr, *kvb;
};

#define NEW(n) calloc((size_t)(n) + 1, sizeof(double))

static void lay_free(struct lay *s)
{
	double *f[] = {s->x, s->xn1, s->q, s->k, s->v, s->qp, s->kp, s->qr, s->kr,
		       s->P, s->att, s->h2, s->xn2, s->g, s->u, s->prob, s->wt,
		       s->eg, s->eu, s->ey, s->sg_, s->su, s->sy, s->sgl, s->cqa,
		       s->cqn, s->cqr, s->ckv, s->cn, s->cr, s->kvb};
	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		free(f[i]);
	free(s->idx);
}

static void ktop(const double *x, int n, int k, int *idx)
{
	for (int j = 0; j < k; j++) {
		int b = -1;
		for (int i = 0; i < n; i++) {
			int used = 0;
			for (int q = 0; q < j; q++)
				used |= idx[q] == i;
			if (!used && (b < 0 || x[i] > x[b]))
				b = i;
		}
		idx[j] = b;
	}
}

/* --------------------------------------------------------- one layer */

static void swi_f(struct rten *gw, struct rten *gb, struct rten *uw, struct rten *ub,
		  struct rten *dw, const double *x, double *g, double *u, double *y,
		  int F)
{
	double *a = NEW(F);
	mv(gw, gb, x, g);
	mv(uw, ub, x, u);
	for (int i = 0; i < F; i++)
		a[i] = g[i] * sg(g[i]) * u[i];
	mv(dw, NULL, a, y);
	free(a);
}

static void swi_b(struct rten *gw, struct rten *gb, struct rten *uw, struct rten *ub,
		  struct rten *dw, const double *x, const double *g, const double *u,
		  const double *dy, double *dx, int F)
{
	double *a = NEW(F), *da = NEW(F), *dg = NEW(F), *du = NEW(F);
	for (int i = 0; i < F; i++)
		a[i] = g[i] * sg(g[i]) * u[i];
	mv_b(dw, NULL, a, dy, da);
	for (int i = 0; i < F; i++) {
		double s = sg(g[i]);
		du[i] = da[i] * g[i] * s;
		dg[i] = da[i] * u[i] * (s + g[i] * s * (1 - s));
	}
	mv_b(gw, gb, x, dg, dx);
	mv_b(uw, ub, x, du, dx);
	free(a);
	free(da);
	free(dg);
	free(du);
}

static const char *moe_pre(const struct net *m)
{
	return !strcmp(m->c.model_type, "mixtral") ? "block_sparse_moe" : "mlp";
}

static struct rten *expert(struct net *m, int l, int e, int which)
{
	static const char *mix[3] = {"w1", "w3", "w2"};
	static const char *hf[3] = {"gate_proj", "up_proj", "down_proj"};
	if (!strcmp(m->c.model_type, "mixtral"))
		return tf(m, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e,
			  mix[which]);
	return tf(m, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, hf[which]);
}

static struct rten *shared(struct net *m, int l, const char *which)
{
	return m->c.mla ? tf(m, "model.layers.%d.mlp.shared_experts.%s.weight", l, which)
			: tf(m, "model.layers.%d.mlp.shared_expert.%s.weight", l, which);
}

static void layer_fwd(struct net *m, int l, struct lay *s, double *h)
{
	int S = m->S, H = m->H, nh = m->nh, nkv = m->nkv, dqk = m->dqk, dv = m->dv;
	int grp = nh / nkv;
	int64_t win = model_layer_window(&m->c, l);
	double eps = m->c.rms_eps, *o = NEW(H);
	struct rten *in = tf(m, "model.layers.%d.input_layernorm.weight", l);
	struct rten *post = tf(m, "model.layers.%d.post_attention_layernorm.weight", l);
	const char *a = "model.layers.%d.self_attn.%s";
#define AT(x) tf(m, "model.layers.%d.self_attn.%s", l, x)
	(void)a;
	memcpy(s->x, h, (size_t)S * H * sizeof(double));
	for (int t = 0; t < S; t++)
		nrm(in, s->x + t * H, s->xn1 + t * H, &s->r1[t], H, eps);
	for (int t = 0; t < S; t++) {
		double *xn = s->xn1 + t * H, *q = s->q + t * nh * dqk;
		if (m->c.mla) {
			int nope = m->nope, rd = m->rd, kvl = m->kvl;
			double *ckv = s->ckv + t * (kvl + rd), kr[512];
			if (m->ql) {
				mv(AT("q_a_proj.weight"), AT("q_a_proj.bias"), xn, s->cqa + t * m->ql);
				nrm(AT("q_a_layernorm.weight"), s->cqa + t * m->ql,
				    s->cqn + t * m->ql, &s->cqr[t], m->ql, 1e-6);
				mv(AT("q_b_proj.weight"), NULL, s->cqn + t * m->ql, q);
			} else {
				mv(AT("q_proj.weight"), NULL, xn, q);
			}
			mv(AT("kv_a_proj_with_mqa.weight"), AT("kv_a_proj_with_mqa.bias"), xn, ckv);
			nrm(AT("kv_a_layernorm.weight"), ckv, s->cn + t * kvl, &s->cr[t], kvl, 1e-6);
			mv(AT("kv_b_proj.weight"), NULL, s->cn + t * kvl, s->kvb + t * nh * (nope + dv));
			memcpy(kr, ckv + kvl, (size_t)rd * sizeof(double));
			if (m->c.rope_interleave)
				perm(kr, rd, 0);
			rot(m, kr, t, 0);
			for (int hh = 0; hh < nh; hh++) {
				double *qh = q + hh * dqk + nope, *kb = s->kvb + (t * nh + hh) * (nope + dv);
				double *kd = s->k + (t * nh + hh) * dqk;
				if (m->c.rope_interleave)
					perm(qh, rd, 0);
				rot(m, qh, t, 0);
				memcpy(kd, kb, (size_t)nope * sizeof(double));
				memcpy(kd + nope, kr, (size_t)rd * sizeof(double));
				memcpy(s->v + (t * nh + hh) * dv, kb + nope, (size_t)dv * sizeof(double));
			}
		} else {
			double *k = s->k + t * nkv * dqk;
			mv(AT("q_proj.weight"), AT("q_proj.bias"), xn, q);
			mv(AT("k_proj.weight"), AT("k_proj.bias"), xn, k);
			mv(AT("v_proj.weight"), AT("v_proj.bias"), xn, s->v + t * nkv * dv);
			if (AT("q_norm.weight")) {
				memcpy(s->qp + t * nh * dqk, q, (size_t)nh * dqk * sizeof(double));
				memcpy(s->kp + t * nkv * dqk, k, (size_t)nkv * dqk * sizeof(double));
				for (int hh = 0; hh < nh; hh++)
					nrm(AT("q_norm.weight"), s->qp + (t * nh + hh) * dqk,
					    q + hh * dqk, &s->qr[t * nh + hh], dqk, eps);
				for (int hh = 0; hh < nkv; hh++)
					nrm(AT("k_norm.weight"), s->kp + (t * nkv + hh) * dqk,
					    k + hh * dqk, &s->kr[t * nkv + hh], dqk, eps);
			}
			for (int hh = 0; hh < nh; hh++)
				rot(m, q + hh * dqk, t, 0);
			for (int hh = 0; hh < nkv; hh++)
				rot(m, k + hh * dqk, t, 0);
		}
	}
	for (int hh = 0; hh < nh; hh++)
		for (int i = 0; i < S; i++) {
			double *p = s->P + (hh * S + i) * S, mx = -INFINITY, z = 0;
			int j0 = win > 0 && i - win + 1 > 0 ? (int)(i - win + 1) : 0;
			int kh = m->c.mla ? hh : hh / grp;
			for (int j = j0; j <= i; j++) {
				double d = 0;
				for (int e = 0; e < dqk; e++)
					d += s->q[(i * nh + hh) * dqk + e] *
					     s->k[(j * (m->c.mla ? nh : nkv) + kh) * dqk + e];
				p[j] = d * m->scale;
				if (p[j] > mx)
					mx = p[j];
			}
			for (int j = j0; j <= i; j++)
				z += p[j] = exp(p[j] - mx);
			for (int e = 0; e < dv; e++)
				s->att[(i * nh + hh) * dv + e] = 0;
			for (int j = j0; j <= i; j++) {
				p[j] /= z;
				for (int e = 0; e < dv; e++)
					s->att[(i * nh + hh) * dv + e] +=
						p[j] * s->v[(j * (m->c.mla ? nh : nkv) + kh) * dv + e];
			}
		}
	for (int t = 0; t < S; t++) {
		mv(AT("o_proj.weight"), AT("o_proj.bias"), s->att + t * nh * dv, o);
		for (int j = 0; j < H; j++)
			s->h2[t * H + j] = s->x[t * H + j] + o[j];
		nrm(post, s->h2 + t * H, s->xn2 + t * H, &s->r2[t], H, eps);
	}
	for (int t = 0; t < S; t++) {
		double *xn = s->xn2 + t * H, *y = NEW(H);
		memset(o, 0, (size_t)H * sizeof(double));
		if (!model_layer_is_moe(&m->c, l)) {
			int F = (int)m->c.ffn;
			swi_f(tf(m, "model.layers.%d.mlp.gate_proj.weight", l),
			      tf(m, "model.layers.%d.mlp.gate_proj.bias", l),
			      tf(m, "model.layers.%d.mlp.up_proj.weight", l),
			      tf(m, "model.layers.%d.mlp.up_proj.bias", l),
			      tf(m, "model.layers.%d.mlp.down_proj.weight", l), xn,
			      s->g + t * F, s->u + t * F, o, F);
			{
				struct rten *db = tf(m, "model.layers.%d.mlp.down_proj.bias", l);
				for (int j = 0; db && j < H; j++)
					o[j] += db->w[j];
			}
		} else {
			int E = m->E, K = m->K, Fm = (int)m->c.moe_ffn;
			double *lg = NEW(E), *pr = s->prob + t * E, *wt = s->wt + t * K, sum = 0;
			int *ix = s->idx + t * K;
			mv(tf(m, "model.layers.%d.%s.gate.weight", l, moe_pre(m)), NULL, xn, lg);
			if (!strcmp(m->c.scoring, "sigmoid")) {
				struct rten *bias = tf(m, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
				int ng = (int)m->c.n_group, tg = (int)m->c.topk_group, per = E / ng;
				double ch[1024], gs[256];
				int gi[256];
				for (int e = 0; e < E; e++) {
					pr[e] = sg(lg[e]);
					ch[e] = pr[e] + (bias ? bias->w[e] : 0);
				}
				for (int g = 0; g < ng; g++) {
					int two[2];
					ktop(ch + g * per, per, per >= 2 ? 2 : 1, two);
					gs[g] = ch[g * per + two[0]] + (per >= 2 ? ch[g * per + two[1]] : 0);
				}
				ktop(gs, ng, tg, gi);
				for (int g = 0; g < ng; g++) {
					int keep = 0;
					for (int q = 0; q < tg; q++)
						keep |= gi[q] == g;
					for (int e = g * per; !keep && e < (g + 1) * per; e++)
						ch[e] = 0;
				}
				ktop(ch, E, K, ix);
				for (int j = 0; j < K; j++)
					sum += pr[ix[j]];
				for (int j = 0; j < K; j++)
					wt[j] = (m->c.norm_topk_prob ? pr[ix[j]] / (sum + 1e-20)
								     : pr[ix[j]]) * m->c.routed_scaling;
			} else {
				double mx = lg[0], z = 0;
				for (int e = 1; e < E; e++)
					mx = lg[e] > mx ? lg[e] : mx;
				for (int e = 0; e < E; e++)
					z += pr[e] = exp(lg[e] - mx);
				for (int e = 0; e < E; e++)
					pr[e] /= z;
				ktop(pr, E, K, ix);
				for (int j = 0; j < K; j++)
					sum += pr[ix[j]];
				for (int j = 0; j < K; j++)
					wt[j] = m->c.norm_topk_prob ? pr[ix[j]] / sum : pr[ix[j]];
			}
			for (int j = 0; j < K; j++) {
				int slot = t * K + j;
				swi_f(expert(m, l, ix[j], 0), NULL, expert(m, l, ix[j], 1), NULL,
				      expert(m, l, ix[j], 2), xn, s->eg + slot * Fm,
				      s->eu + slot * Fm, s->ey + slot * H, Fm);
				for (int e = 0; e < H; e++)
					o[e] += wt[j] * s->ey[slot * H + e];
			}
			if (shared(m, l, "gate_proj")) {
				int Fs = (int)m->c.shared_ffn;
				struct rten *gw = tf(m, "model.layers.%d.mlp.shared_expert_gate.weight", l);
				double gl = 1;
				swi_f(shared(m, l, "gate_proj"), NULL, shared(m, l, "up_proj"), NULL,
				      shared(m, l, "down_proj"), xn, s->sg_ + t * Fs, s->su + t * Fs,
				      s->sy + t * H, Fs);
				if (gw) {
					double z;
					mv(gw, NULL, xn, &z);
					gl = sg(z);
				}
				s->sgl[t] = gl;
				for (int e = 0; e < H; e++)
					o[e] += gl * s->sy[t * H + e];
			}
			free(lg);
		}
		for (int j = 0; j < H; j++)
			h[t * H + j] = s->h2[t * H + j] + o[j];
		free(y);
	}
	free(o);
#undef AT
}

/* dh: the layer's output gradient in, its input's out */
static void layer_bwd(struct net *m, int l, struct lay *s, double *dh)
{
	int S = m->S, H = m->H, nh = m->nh, nkv = m->c.mla ? m->nh : m->nkv;
	int dqk = m->dqk, dv = m->dv, grp = nh / nkv;
	double eps = m->c.rms_eps;
	double *dxn = NEW(S * H), *dh2 = NEW(S * H), *datt = NEW(S * nh * dv);
	double *dq = NEW(S * nh * dqk), *dk = NEW(S * nkv * dqk), *dvv = NEW(S * nkv * dv);
	struct rten *in = tf(m, "model.layers.%d.input_layernorm.weight", l);
	struct rten *post = tf(m, "model.layers.%d.post_attention_layernorm.weight", l);
#define AT(x) tf(m, "model.layers.%d.self_attn.%s", l, x)
	(void)eps;
	/* MLP */
	for (int t = 0; t < S; t++) {
		double *xn = s->xn2 + t * H, *dy = dh + t * H, *dx = dxn + t * H;
		if (!model_layer_is_moe(&m->c, l)) {
			int F = (int)m->c.ffn;
			struct rten *db = tf(m, "model.layers.%d.mlp.down_proj.bias", l);
			for (int j = 0; db && j < H; j++)
				db->g[j] += dy[j];
			swi_b(tf(m, "model.layers.%d.mlp.gate_proj.weight", l),
			      tf(m, "model.layers.%d.mlp.gate_proj.bias", l),
			      tf(m, "model.layers.%d.mlp.up_proj.weight", l),
			      tf(m, "model.layers.%d.mlp.up_proj.bias", l),
			      tf(m, "model.layers.%d.mlp.down_proj.weight", l), xn,
			      s->g + t * F, s->u + t * F, dy, dx, F);
			continue;
		}
		{
			int E = m->E, K = m->K, Fm = (int)m->c.moe_ffn;
			double *pr = s->prob + t * E, *wt = s->wt + t * K, dw[64], dp[1024], dl[1024];
			int *ix = s->idx + t * K;
			double Ssum = 0, a = 0;
			for (int j = 0; j < K; j++) {
				int slot = t * K + j;
				double *dyj = NEW(H);
				dw[j] = 0;
				for (int e = 0; e < H; e++) {
					dw[j] += dy[e] * s->ey[slot * H + e];
					dyj[e] = wt[j] * dy[e];
				}
				swi_b(expert(m, l, ix[j], 0), NULL, expert(m, l, ix[j], 1), NULL,
				      expert(m, l, ix[j], 2), xn, s->eg + slot * Fm,
				      s->eu + slot * Fm, dyj, dx, Fm);
				free(dyj);
			}
			for (int e = 0; e < E; e++)
				dp[e] = 0;
			for (int j = 0; j < K; j++)
				Ssum += pr[ix[j]];
			if (!strcmp(m->c.scoring, "sigmoid")) {
				double rs = m->c.routed_scaling;
				if (m->c.norm_topk_prob) {
					double Se = Ssum + 1e-20;
					/* w_j = rs p_j / Se: dp_i = rs (dw_i - sum_j dw_j p_j / Se) / Se */
					for (int j = 0; j < K; j++)
						a += dw[j] * pr[ix[j]] / Se;
					for (int j = 0; j < K; j++)
						dp[ix[j]] = rs * (dw[j] - a) / Se;
				} else {
					for (int j = 0; j < K; j++)
						dp[ix[j]] = rs * dw[j];
				}
				for (int e = 0; e < E; e++)
					dl[e] = dp[e] * pr[e] * (1 - pr[e]);
			} else {
				double z = 0;
				if (m->c.norm_topk_prob) {
					for (int j = 0; j < K; j++)
						a += dw[j] * pr[ix[j]] / Ssum;
					for (int j = 0; j < K; j++)
						dp[ix[j]] = (dw[j] - a) / Ssum;
				} else {
					for (int j = 0; j < K; j++)
						dp[ix[j]] = dw[j];
				}
				for (int e = 0; e < E; e++)
					z += dp[e] * pr[e];
				for (int e = 0; e < E; e++)
					dl[e] = pr[e] * (dp[e] - z);
			}
			mv_b(tf(m, "model.layers.%d.%s.gate.weight", l, moe_pre(m)), NULL, xn,
			     dl, dx);
			if (shared(m, l, "gate_proj")) {
				int Fs = (int)m->c.shared_ffn;
				struct rten *gw = tf(m, "model.layers.%d.mlp.shared_expert_gate.weight", l);
				double *ds = NEW(H), dg = 0;
				for (int e = 0; e < H; e++) {
					ds[e] = s->sgl[t] * dy[e];
					dg += dy[e] * s->sy[t * H + e];
				}
				swi_b(shared(m, l, "gate_proj"), NULL, shared(m, l, "up_proj"), NULL,
				      shared(m, l, "down_proj"), xn, s->sg_ + t * Fs, s->su + t * Fs,
				      ds, dx, Fs);
				if (gw) {
					double dz = dg * s->sgl[t] * (1 - s->sgl[t]);
					mv_b(gw, NULL, xn, &dz, dx);
				}
				free(ds);
			}
		}
	}
	memcpy(dh2, dh, (size_t)S * H * sizeof(double));
	for (int t = 0; t < S; t++)
		nrm_b(post, s->h2 + t * H, s->r2[t], dxn + t * H, dh2 + t * H, H);
	/* attention */
	for (int t = 0; t < S; t++) {
		struct rten *bo = AT("o_proj.bias");
		mv_b(AT("o_proj.weight"), bo, s->att + t * nh * dv, dh2 + t * H,
		     datt + t * nh * dv);
	}
	for (int hh = 0; hh < nh; hh++)
		for (int i = 0; i < S; i++) {
			const double *p = s->P + (hh * S + i) * S, *da = datt + (i * nh + hh) * dv;
			int kh = hh / grp;
			double dP[4096], z = 0;
			for (int j = 0; j <= i; j++) {
				dP[j] = 0;
				for (int e = 0; e < dv; e++)
					dP[j] += da[e] * s->v[(j * nkv + kh) * dv + e];
				z += p[j] * dP[j];
			}
			for (int j = 0; j <= i; j++) {
				double ds = p[j] * (dP[j] - z) * m->scale;
				for (int e = 0; e < dqk; e++) {
					dq[(i * nh + hh) * dqk + e] += ds * s->k[(j * nkv + kh) * dqk + e];
					dk[(j * nkv + kh) * dqk + e] += ds * s->q[(i * nh + hh) * dqk + e];
				}
				for (int e = 0; e < dv; e++)
					dvv[(j * nkv + kh) * dv + e] += p[j] * da[e];
			}
		}
	memset(dxn, 0, (size_t)S * H * sizeof(double));
	for (int t = 0; t < S; t++) {
		double *xn = s->xn1 + t * H, *dx = dxn + t * H;
		if (m->c.mla) {
			int nope = m->nope, rd = m->rd, kvl = m->kvl;
			double *dckv = NEW(kvl + rd), *dcn = NEW(kvl), *dkvb = NEW(nh * (nope + dv));
			for (int hh = 0; hh < nh; hh++) {
				double *dqh = dq + (t * nh + hh) * dqk + nope;
				rot(m, dqh, t, 1);
				if (m->c.rope_interleave)
					perm(dqh, rd, 1);
				for (int e = 0; e < rd; e++)
					dckv[kvl + e] += dk[(t * nh + hh) * dqk + nope + e];
				for (int e = 0; e < nope; e++)
					dkvb[hh * (nope + dv) + e] = dk[(t * nh + hh) * dqk + e];
				for (int e = 0; e < dv; e++)
					dkvb[hh * (nope + dv) + nope + e] = dvv[(t * nh + hh) * dv + e];
			}
			rot(m, dckv + kvl, t, 1);
			if (m->c.rope_interleave)
				perm(dckv + kvl, rd, 1);
			mv_b(AT("kv_b_proj.weight"), NULL, s->cn + t * kvl, dkvb, dcn);
			nrm_b(AT("kv_a_layernorm.weight"), s->ckv + t * (kvl + rd), s->cr[t], dcn,
			      dckv, kvl);
			mv_b(AT("kv_a_proj_with_mqa.weight"), AT("kv_a_proj_with_mqa.bias"), xn,
			     dckv, dx);
			if (m->ql) {
				double *dcq = NEW(m->ql), *dca = NEW(m->ql);
				mv_b(AT("q_b_proj.weight"), NULL, s->cqn + t * m->ql, dq + t * nh * dqk, dcq);
				nrm_b(AT("q_a_layernorm.weight"), s->cqa + t * m->ql, s->cqr[t], dcq, dca, m->ql);
				mv_b(AT("q_a_proj.weight"), AT("q_a_proj.bias"), xn, dca, dx);
				free(dcq);
				free(dca);
			} else {
				mv_b(AT("q_proj.weight"), NULL, xn, dq + t * nh * dqk, dx);
			}
			free(dckv);
			free(dcn);
			free(dkvb);
			continue;
		}
		for (int hh = 0; hh < nh; hh++)
			rot(m, dq + (t * nh + hh) * dqk, t, 1);
		for (int hh = 0; hh < nkv; hh++)
			rot(m, dk + (t * nkv + hh) * dqk, t, 1);
		if (AT("q_norm.weight")) {
			double *tq = NEW(nh * dqk), *tk = NEW(nkv * dqk);
			for (int hh = 0; hh < nh; hh++)
				nrm_b(AT("q_norm.weight"), s->qp + (t * nh + hh) * dqk,
				      s->qr[t * nh + hh], dq + (t * nh + hh) * dqk, tq + hh * dqk, dqk);
			for (int hh = 0; hh < nkv; hh++)
				nrm_b(AT("k_norm.weight"), s->kp + (t * nkv + hh) * dqk,
				      s->kr[t * nkv + hh], dk + (t * nkv + hh) * dqk, tk + hh * dqk, dqk);
			memcpy(dq + t * nh * dqk, tq, (size_t)nh * dqk * sizeof(double));
			memcpy(dk + t * nkv * dqk, tk, (size_t)nkv * dqk * sizeof(double));
			free(tq);
			free(tk);
		}
		mv_b(AT("q_proj.weight"), AT("q_proj.bias"), xn, dq + t * nh * dqk, dx);
		mv_b(AT("k_proj.weight"), AT("k_proj.bias"), xn, dk + t * nkv * dqk, dx);
		mv_b(AT("v_proj.weight"), AT("v_proj.bias"), xn, dvv + t * nkv * dv, dx);
	}
	memcpy(dh, dh2, (size_t)S * H * sizeof(double));
	for (int t = 0; t < S; t++)
		nrm_b(in, s->x + t * H, s->r1[t], dxn + t * H, dh + t * H, H);
	free(dxn);
	free(dh2);
	free(datt);
	free(dq);
	free(dk);
	free(dvv);
#undef AT
}

static void lay_alloc(struct net *m, struct lay *s)
{
	int S = m->S, H = m->H, nh = m->nh, nkv = m->c.mla ? m->nh : m->nkv;
	int F = (int)m->c.ffn, E = m->E, K = m->K, Fm = (int)m->c.moe_ffn;
	int Fs = (int)m->c.shared_ffn;
	memset(s, 0, sizeof *s);
	s->x = NEW(S * H);
	s->xn1 = NEW(S * H);
	s->q = NEW(S * nh * m->dqk);
	s->k = NEW(S * nkv * m->dqk);
	s->v = NEW(S * nkv * m->dv);
	s->qp = NEW(S * nh * m->dqk);
	s->kp = NEW(S * nkv * m->dqk);
	s->qr = NEW(S * nh);
	s->kr = NEW(S * nkv);
	s->P = NEW((int64_t)nh * S * S);
	s->att = NEW(S * nh * m->dv);
	s->h2 = NEW(S * H);
	s->xn2 = NEW(S * H);
	s->g = NEW(S * F);
	s->u = NEW(S * F);
	s->prob = NEW(S * E);
	s->wt = NEW(S * K);
	s->idx = calloc((size_t)S * K + 1, sizeof(int));
	s->eg = NEW(S * K * Fm);
	s->eu = NEW(S * K * Fm);
	s->ey = NEW(S * K * H);
	s->sg_ = NEW(S * Fs);
	s->su = NEW(S * Fs);
	s->sy = NEW(S * H);
	s->sgl = NEW(S);
	s->cqa = NEW(S * m->ql);
	s->cqn = NEW(S * m->ql);
	s->cqr = NEW(S);
	s->ckv = NEW(S * (m->kvl + m->rd));
	s->cn = NEW(S * m->kvl);
	s->cr = NEW(S);
	s->kvb = NEW(S * nh * (m->nope + m->dv));
}

int ref_train_grads(const char *dir, const int64_t *tok, const int64_t *lab, int B,
		    int S, int64_t nvalid, const struct ref_perturb *pt, double *loss,
		    struct ref_tgrad **grads, int *ngrads, struct d0_err *err)
{
	struct net m;
	char *cp = path_join(dir, "config.json");
	int rc = 0, L;
	double total = 0;
	struct lay *ls = NULL;
	memset(&m, 0, sizeof m);
	if (model_config_load(cp, &m.c, err) < 0) {
		free(cp);
		return -1;
	}
	free(cp);
	if (S > 4096)
		return d0_errf(err, "sequences of %d tokens: the reference holds 4096", S);
	if (load_all(&m, dir, err) < 0) {
		rc = -1;
		goto out;
	}
	if (pt && pt->name) {
		struct rten *x = tf(&m, "%s", pt->name);
		if (!x || pt->idx < 0 || pt->idx >= x->rows * x->cols) {
			rc = d0_errf(err, "%s: no element %lld of '%s'", dir,
				     (long long)pt->idx, pt->name);
			goto out;
		}
		x->w[pt->idx] += pt->delta;
	}
	m.H = (int)m.c.hidden;
	m.V = (int)m.c.vocab;
	m.nh = (int)m.c.heads;
	m.nkv = (int)m.c.kv_heads;
	m.dqk = (int)(m.c.mla ? m.c.qk_nope_dim + m.c.qk_rope_dim : m.c.head_dim);
	m.dv = (int)(m.c.mla ? m.c.v_head_dim : m.c.head_dim);
	m.rd = (int)(m.c.mla ? m.c.qk_rope_dim : m.c.head_dim);
	m.nope = (int)m.c.qk_nope_dim;
	m.kvl = (int)m.c.kv_lora_rank;
	m.ql = (int)m.c.q_lora_rank;
	m.E = (int)m.c.experts;
	m.K = (int)m.c.top_k;
	m.S = S;
	m.scale = 1.0 / sqrt((double)m.dqk);
	if (m.c.mla && m.c.rope.type[0] && m.c.rope.mscale_all_dim != 0) {
		double f = m.c.rope.factor <= 1 ? 1.0
			   : 0.1 * m.c.rope.mscale_all_dim * log(m.c.rope.factor) + 1.0;
		m.scale *= f * f;
	}
	m.inv = calloc((size_t)m.rd, sizeof(double));
	op_rope_inv_freq(&m.c, m.rd, m.c.max_pos, m.inv, &m.af);
	L = (int)m.c.layers;
	ls = calloc((size_t)L, sizeof *ls);
	for (int l = 0; l < L; l++)
		lay_alloc(&m, &ls[l]);
	for (int b = 0; b < B; b++) {
		const int64_t *tk = tok + (size_t)b * S, *lb = lab + (size_t)b * S;
		int H = m.H, V = m.V;
		double *h = NEW(S * H), *xf = NEW(S * H), rf[4096], *lg = NEW(V);
		double *dxf = NEW(S * H);
		struct rten *E = tf(&m, "model.embed_tokens.weight");
		struct rten *fn = tf(&m, "model.norm.weight");
		struct rten *head = m.c.tie_embeddings ? E : tf(&m, "lm_head.weight");
		for (int t = 0; t < S; t++)
			memcpy(h + t * H, E->w + tk[t] * H, (size_t)H * sizeof(double));
		for (int l = 0; l < L; l++)
			layer_fwd(&m, l, &ls[l], h);
		for (int t = 0; t < S; t++) {
			double mx, z = 0;
			nrm(fn, h + t * H, xf + t * H, &rf[t], H, m.c.rms_eps);
			if (lb[t] == -100)
				continue;
			mv(head, NULL, xf + t * H, lg);
			mx = lg[0];
			for (int v = 1; v < V; v++)
				mx = lg[v] > mx ? lg[v] : mx;
			for (int v = 0; v < V; v++)
				z += exp(lg[v] - mx);
			total += (log(z) + mx - lg[lb[t]]) / (double)nvalid;
			if (!grads)
				continue;
			for (int v = 0; v < V; v++)
				lg[v] = (exp(lg[v] - mx) / z - (v == lb[t])) / (double)nvalid;
			mv_b(head, NULL, xf + t * H, lg, dxf + t * H);
		}
		if (grads) {
			double *dh = NEW(S * H);
			for (int t = 0; t < S; t++)
				nrm_b(fn, h + t * H, rf[t], dxf + t * H, dh + t * H, H);
			for (int l = L - 1; l >= 0; l--)
				layer_bwd(&m, l, &ls[l], dh);
			for (int t = 0; t < S; t++)
				for (int j = 0; j < H; j++)
					E->g[tk[t] * H + j] += dh[t * H + j];
			free(dh);
		}
		free(h);
		free(xf);
		free(lg);
		free(dxf);
	}
	*loss = total;
	if (grads) {
		*grads = calloc((size_t)m.n, sizeof **grads);
		*ngrads = m.n;
		for (int i = 0; i < m.n; i++) {
			struct ref_tgrad *g = &(*grads)[i];
			snprintf(g->name, sizeof g->name, "%s", m.t[i].name);
			g->n = m.t[i].rows * m.t[i].cols;
			g->g = m.t[i].g;
			m.t[i].g = NULL;
		}
	}
out:
	for (int l = 0; ls && l < (int)m.c.layers; l++)
		lay_free(&ls[l]);
	free(ls);
	for (int i = 0; i < m.n; i++) {
		free(m.t[i].w);
		free(m.t[i].g);
	}
	free(m.t);
	free(m.inv);
	model_config_free(&m.c);
	return rc;
}

void ref_tgrads_free(struct ref_tgrad *g, int n)
{
	for (int i = 0; g && i < n; i++)
		free(g[i].g);
	free(g);
}
