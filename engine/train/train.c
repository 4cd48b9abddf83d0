/*
 * train.c - one fine-tuning step: the training forward (keeping what
 * backward needs), the backward pass, cross-entropy over shifted labels,
 * AdamW, clipping, the f16 loss scaler, data parallelism and ZeRO-1.
 *
 * Parameters are the Hugging Face tensors, each rank holding the slice
 * layout.c gives it (the same column/row/vocab splits as inference), read
 * through the runtime's loader (rt_load_f32) and accountant (rt_alloc):
 * this file builds its own struct rt (rt_impl.h) whose rank is the rank
 * inside one tensor-parallel replica, so data-parallel replicas load the
 * same slices.  All parameters live in three flat arrays in the order
 * backward finishes them (lm_head, final norm, the last layer .. the first,
 * the embedding): the working weights (bf16, f16 or f32: what forward and
 * backward read), their gradients (the same width) and, for this rank's
 * shard (all of it without ZeRO-1), the f32 master weights and Adam's two
 * moments: 2 + 2 + 12 bytes a parameter, plan --train's model.  A bucket of
 * finished gradients is all-reduced over DP (MPI_Iallreduce) as soon as
 * backward has passed it, while backward goes on with the earlier layers.
 *
 * Tensor parallelism, Megatron's: a column-parallel product's input
 * gradient is a partial sum, all-reduced over TP before the norm below it;
 * a row-parallel product's output gradient is whole on every rank.  The
 * gradients of replicated parameters are made whole the same way: partial
 * quantities computed from sliced heads or experts (the router's gate
 * weights' gradients, the shared-expert gate's, MLA's latent gradients)
 * are all-reduced before the replicated part of backward runs, so every TP
 * rank computes the same gradient; q_norm/k_norm (applied per local head)
 * are summed over TP.  Replicated gradients are then averaged over TP, so
 * they agree bit for bit whatever the all-reduce did.
 *
 * Expert parallelism, the inference runtime's moe(): routed experts split
 * over EP ranks; each EP rank routes its tokens (t % ep) by all-to-all to
 * the experts' owners and gets the answers back, the routed part summed
 * over EP.  Backward runs the same routes: output gradients to the owners
 * (whose experts' weight gradients stay there), input gradients back, the
 * gate weights' and input gradients summed over EP (docs/training.md).
 *
 * The math is runtime.c's forward written for training (every sequence of
 * the batch starts at position 0): RMSNorm with the weight after, RoPE
 * rotate_half (DeepSeek's interleaved layout permuted first), causal
 * softmax attention, SwiGLU, softmax / sigmoid group top-k routers, MLA.
 * The top-k choice is not differentiated (the chosen experts are fixed);
 * DeepSeek's e_score_correction_bias is not a trained parameter.
 */
#include "train.h"
#include "rt_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#define IGNORE_LABEL (-100)

struct tparam {
	char name[160];
	int64_t rows, cols, numel, off; /* this rank's slice */
	int64_t frows, fcols;           /* the whole tensor */
	int axis, parts, part;          /* how it is split over TP */
	int repl;                       /* replicated over TP */
	int tp_sum;                     /* partial over TP: summed */
	int decay;                      /* weight decay (matrices) */
	int expert;
	int stage;                      /* the pipeline stage that owns it */
	int here;                       /* held on this rank (stage, expert) */
};

/* What forward keeps of one layer for backward (floats unless said). */
struct tws {
	float *x, *xn1, *rs1, *q, *k, *v, *qpre, *kpre, *qrs, *krs, *P, *att;
	float *h2, *xn2, *rs2;
	float *g, *u;                               /* dense SwiGLU */
	float *prob, *wt, *eg, *eu, *ey, *sg, *su, *sy, *sgl; /* MoE */
	int *idx;
	float *cqa, *cqn, *cqrs, *ckv, *cn, *crs, *kvb; /* MLA */
};

struct tlay {
	int moe;
	int64_t window;
	struct tparam *in_norm, *post_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv,
		*bo, *q_norm, *k_norm;
	struct tparam *q_a, *q_a_b, *q_a_norm, *q_b, *kv_a, *kv_a_b, *kv_a_norm,
		*kv_b;
	struct tparam *gate, *up, *down, *gate_b, *up_b, *down_b;
	struct tparam *router, **e_gate, **e_up, **e_down;
	struct tparam *sh_gate, *sh_up, *sh_down, *sh_gate_w;
	float *router_bias; /* not trained */
	int64_t p_lo, p_hi; /* its parameters' flat range */
};

struct train {
	struct rt *r;
	struct train_cfg cfg;
	int rank, world, tp, tp_rank, dp, dp_rank, ep, ep_rank, pp, pp_rank;
	MPI_Comm tp_comm, dp_comm, ep_comm; /* ep_comm: the EP group */
	MPI_Comm pp_comm;  /* this rank's pipeline: the same dp, ep, tp */
	MPI_Comm emb_comm; /* a tied embedding's two stages (first, last) */
	int l0, l1;        /* this stage's layers [l0, l1) */
	int first, last;   /* the first / the last stage */
	MPI_Op op16;
	int np, pcap;
	struct tparam *P;
	int64_t N, maxn;
	int wsz;
	void *work, *grad;
	float *master, *mom, *vel;
	int64_t z0, zn, *zs;
	float *xs[3], *gs;
	struct tlay *L;
	int nl;
	struct tparam *embed, *lm_head, *final_norm;
	int H, V, Vl, nh, nkv, dqk, dv, rd, F, Fm, Fs, E, K, nope, kvl, ql;
	double attn_scale, attn_factor, *inv_freq;
	/* activations of one micro-batch, sized at the first batch: T = B x S
	 * tokens; nslots micro-batches in flight on this stage (1F1B keeps at
	 * most pp - pp_rank), each its layers' tws (one scratch tws when
	 * recomputing, the layer inputs in tpbuf) */
	int T, B, S, M, nslots, nws;
	struct tws *ws;
	float *cosT, *sinT;
	float *logits, *hfin, *xf, *rsf;
	float *dh, *dh2, *dxn, *b[6];
	float *tpbuf;
	int64_t wmax;
	/* the pipeline's point-to-point buffers, one a slot: the activation
	 * sent on (not the last stage), the gradient sent back (not the
	 * first), each until its MPI_Isend completes */
	float **sact, **sgrad;
	MPI_Request *rq_act, *rq_grad;
	double lraw;          /* the loss summed over the micro-batches */
	double t_f, t_b, t_wait; /* this pass: forward, backward, waiting on
				  * the pipeline's neighbours */
	int agree;            /* the last micro-batch: gradients final */
	double bubble[64];    /* each stage's idle share (stage 0: all) */
	char *sched;          /* this pass's order: "F0 F1 B0 ..." */
	size_t sched_n;
	/* optimizer */
	int64_t step;
	double scale;
	int good;
	/* DP buckets */
	MPI_Request *req;
	int nreq, reqcap;
	int64_t bstart;
	double t_dp_exposed, t_dp;
	double t_ep; /* in the EP all-to-alls and sums */
	struct train_mem mem;
	struct tparam *inject_p;
	int failed_acts; /* alloc_acts refused: the step cannot run */
};

/* ------------------------------------------------------------- memory */

enum { CAT_WEIGHTS, CAT_GRADS, CAT_OPTIM, CAT_ACT, CAT_SCRATCH };

static void *talloc(struct train *t, size_t bytes, const char *what, int cat)
{
	void *p = rt_alloc(t->r, bytes, what, 1);
	if (!p)
		return NULL;
	switch (cat) {
	case CAT_WEIGHTS: t->mem.weights += bytes; break;
	case CAT_GRADS: t->mem.grads += bytes; break;
	case CAT_OPTIM: t->mem.optim += bytes; break;
	case CAT_ACT: t->mem.act += bytes; break;
	default: t->mem.scratch += bytes; break;
	}
	return p;
}

/* --------------------------------------------------------- parameters */

static struct tparam *reg(struct train *t, const struct tensor_spec *sp,
			  size_t ns, const char *name, int tp_sum)
{
	const struct tensor_spec *s = NULL;
	struct tensor_split sl;
	struct tparam *p;
	int part;
	for (size_t i = 0; i < ns && !s; i++)
		if (!strcmp(sp[i].name, name))
			s = &sp[i];
	if (!s)
		return NULL;
	layout_split(&t->r->c, &t->r->d, s, &sl);
	part = layout_part_for_rank(&t->r->c, &t->r->d, s, &sl, t->r->rank);
	if (part < 0)
		return NULL;
	if (t->np == t->pcap) {
		/* pointers into P are taken: size it once, generously */
		return NULL;
	}
	p = &t->P[t->np++];
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->frows = (int64_t)s->shape[0];
	p->fcols = s->ndim == 2 ? (int64_t)s->shape[1] : 1;
	p->rows = p->frows;
	p->cols = p->fcols;
	p->axis = sl.axis;
	p->parts = sl.parts;
	p->part = part;
	if (sl.axis == 0)
		p->rows /= sl.parts;
	else if (sl.axis == 1)
		p->cols /= sl.parts;
	p->numel = p->rows * p->cols;
	p->repl = sl.axis < 0;
	p->tp_sum = tp_sum;
	p->decay = s->ndim == 2;
	p->expert = s->expert;
	p->off = -1; /* placed by assign_offsets if held here */
	if (s->ndim == 1) { /* a vector: [1, n] for the products below */
		p->cols = p->rows;
		p->rows = 1;
	}
	return p;
}

/* The parameters of the model in forward order; offsets later. */
static int register_params(struct train *t, struct d0_err *err)
{
	struct model_config *c = &t->r->c;
	struct tensor_spec *sp = NULL;
	size_t ns = 0;
	char n[200];
	if (model_tensors(c, &sp, &ns, err) < 0)
		return -1;
	t->pcap = (int)ns + 8;
	t->P = calloc((size_t)t->pcap, sizeof *t->P);
#define R(field, tps, fmt, ...)                                                \
	do {                                                                   \
		snprintf(n, sizeof n, fmt, __VA_ARGS__);                       \
		field = reg(t, sp, ns, n, tps);                                \
	} while (0)
	R(t->embed, 0, "%s", "model.embed_tokens.weight");
	t->L = calloc((size_t)c->layers, sizeof *t->L);
	t->nl = (int)c->layers;
	for (int l = 0; l < t->nl; l++) {
		struct tlay *y = &t->L[l];
		const char *p = "model.layers";
		y->moe = model_layer_is_moe(c, l);
		y->window = model_layer_window(c, l);
		R(y->in_norm, 0, "%s.%d.input_layernorm.weight", p, l);
		if (c->mla) {
			if (c->q_lora_rank) {
				R(y->q_a, 0, "%s.%d.self_attn.q_a_proj.weight", p, l);
				R(y->q_a_b, 0, "%s.%d.self_attn.q_a_proj.bias", p, l);
				R(y->q_a_norm, 0, "%s.%d.self_attn.q_a_layernorm.weight", p, l);
				R(y->q_b, 0, "%s.%d.self_attn.q_b_proj.weight", p, l);
			} else {
				R(y->wq, 0, "%s.%d.self_attn.q_proj.weight", p, l);
			}
			R(y->kv_a, 0, "%s.%d.self_attn.kv_a_proj_with_mqa.weight", p, l);
			R(y->kv_a_b, 0, "%s.%d.self_attn.kv_a_proj_with_mqa.bias", p, l);
			R(y->kv_a_norm, 0, "%s.%d.self_attn.kv_a_layernorm.weight", p, l);
			R(y->kv_b, 0, "%s.%d.self_attn.kv_b_proj.weight", p, l);
		} else {
			R(y->wq, 0, "%s.%d.self_attn.q_proj.weight", p, l);
			R(y->wk, 0, "%s.%d.self_attn.k_proj.weight", p, l);
			R(y->wv, 0, "%s.%d.self_attn.v_proj.weight", p, l);
			R(y->bq, 0, "%s.%d.self_attn.q_proj.bias", p, l);
			R(y->bk, 0, "%s.%d.self_attn.k_proj.bias", p, l);
			R(y->bv, 0, "%s.%d.self_attn.v_proj.bias", p, l);
			R(y->q_norm, 1, "%s.%d.self_attn.q_norm.weight", p, l);
			R(y->k_norm, 1, "%s.%d.self_attn.k_norm.weight", p, l);
		}
		R(y->wo, 0, "%s.%d.self_attn.o_proj.weight", p, l);
		R(y->bo, 0, "%s.%d.self_attn.o_proj.bias", p, l);
		R(y->post_norm, 0, "%s.%d.post_attention_layernorm.weight", p, l);
		if (!y->moe) {
			R(y->gate, 0, "%s.%d.mlp.gate_proj.weight", p, l);
			R(y->up, 0, "%s.%d.mlp.up_proj.weight", p, l);
			R(y->down, 0, "%s.%d.mlp.down_proj.weight", p, l);
			R(y->gate_b, 0, "%s.%d.mlp.gate_proj.bias", p, l);
			R(y->up_b, 0, "%s.%d.mlp.up_proj.bias", p, l);
			R(y->down_b, 0, "%s.%d.mlp.down_proj.bias", p, l);
			continue;
		}
		y->e_gate = calloc((size_t)c->experts, sizeof(void *));
		y->e_up = calloc((size_t)c->experts, sizeof(void *));
		y->e_down = calloc((size_t)c->experts, sizeof(void *));
		if (!strcmp(c->model_type, "mixtral")) {
			const char *x = "block_sparse_moe";
			R(y->router, 0, "%s.%d.%s.gate.weight", p, l, x);
			for (int e = 0; e < c->experts; e++) {
				R(y->e_gate[e], 0, "%s.%d.%s.experts.%d.w1.weight", p, l, x, e);
				R(y->e_down[e], 0, "%s.%d.%s.experts.%d.w2.weight", p, l, x, e);
				R(y->e_up[e], 0, "%s.%d.%s.experts.%d.w3.weight", p, l, x, e);
			}
		} else {
			R(y->router, 0, "%s.%d.mlp.gate.weight", p, l);
			for (int e = 0; e < c->experts; e++) {
				R(y->e_gate[e], 0, "%s.%d.mlp.experts.%d.gate_proj.weight", p, l, e);
				R(y->e_up[e], 0, "%s.%d.mlp.experts.%d.up_proj.weight", p, l, e);
				R(y->e_down[e], 0, "%s.%d.mlp.experts.%d.down_proj.weight", p, l, e);
			}
			if (c->mla) {
				R(y->sh_gate, 0, "%s.%d.mlp.shared_experts.gate_proj.weight", p, l);
				R(y->sh_up, 0, "%s.%d.mlp.shared_experts.up_proj.weight", p, l);
				R(y->sh_down, 0, "%s.%d.mlp.shared_experts.down_proj.weight", p, l);
			} else {
				R(y->sh_gate, 0, "%s.%d.mlp.shared_expert.gate_proj.weight", p, l);
				R(y->sh_up, 0, "%s.%d.mlp.shared_expert.up_proj.weight", p, l);
				R(y->sh_down, 0, "%s.%d.mlp.shared_expert.down_proj.weight", p, l);
				R(y->sh_gate_w, 0, "%s.%d.mlp.shared_expert_gate.weight", p, l);
			}
		}
	}
	R(t->final_norm, 0, "%s", "model.norm.weight");
	if (!c->tie_embeddings)
		R(t->lm_head, 0, "%s", "lm_head.weight");
	else
		t->lm_head = t->embed;
#undef R
	free(sp);
	if (!t->embed || !t->final_norm || !t->lm_head)
		return d0_errf(err, "%s: the embedding, final norm or lm_head is "
			       "missing from the tensor table", t->r->dir);
	return 0;
}

/* The stage that runs layer l: the inference runtime's split
 * (layout_stage_layers: the first layers % pp stages one layer more). */
static int stage_of_layer(const struct train *t, int l)
{
	for (int s = 0; s < t->pp; s++) {
		int64_t first, count;
		layout_stage_layers(t->nl, t->pp, s, &first, &count);
		if (l >= first && l < first + count)
			return s;
	}
	return t->pp - 1;
}

static int owner(const struct train *t, int e);

/* Which stage owns each parameter, and which are held here: a layer's on
 * its stage, the embedding on the first, the final norm and lm_head on
 * the last (a tied embedding on both: the last uses it as the head; its
 * gradient is summed over the two, the first owns it for the norm and
 * the check); a routed expert on its EP owner only (weights, gradients
 * and optimizer state: EP divides the experts' memory). */
static void mark_stages(struct train *t)
{
	for (int i = 0; i < t->np; i++) {
		struct tparam *p = &t->P[i];
		int l;
		if (sscanf(p->name, "model.layers.%d.", &l) == 1)
			p->stage = stage_of_layer(t, l);
		else if (p == t->embed)
			p->stage = 0;
		else
			p->stage = t->pp - 1;
		p->here = p->stage == t->pp_rank ||
			  (p == t->embed && t->lm_head == t->embed && t->last);
		if (p->expert >= 0 && owner(t, p->expert) != t->ep_rank)
			p->here = 0;
	}
}

static void place(struct train *t, struct tparam *p, int64_t *off)
{
	if (!p || !p->here || p->off >= 0)
		return;
	p->off = *off;
	*off += p->numel;
	if (p->numel > t->maxn)
		t->maxn = p->numel;
}

/* Flat offsets of this stage's parameters in the order backward finishes
 * them (a tied embedding on the last stage of a pipeline comes first: it
 * is the head there). */
static void assign_offsets(struct train *t)
{
	int64_t off = 0;
	if (t->lm_head != t->embed || (t->pp > 1 && t->last))
		place(t, t->lm_head, &off);
	place(t, t->final_norm, &off);
	for (int l = t->l1 - 1; l >= t->l0; l--) {
		struct tlay *y = &t->L[l];
		y->p_lo = off;
		for (int i = 0; i < t->np; i++) {
			struct tparam *p = &t->P[i];
			char pre[64];
			snprintf(pre, sizeof pre, "model.layers.%d.", l);
			if (!strncmp(p->name, pre, strlen(pre)))
				place(t, p, &off);
		}
		y->p_hi = off;
	}
	place(t, t->embed, &off);
	t->N = off;
}

/* f32 value of working element i / store one. */
static float wget(const struct train *t, const void *a, int64_t i)
{
	if (t->cfg.dtype == DT_F32)
		return ((const float *)a)[i];
	if (t->cfg.dtype == DT_BF16)
		return bf16_to_f32(((const uint16_t *)a)[i]);
	return f16_to_f32(((const uint16_t *)a)[i]);
}

static void wset(const struct train *t, void *a, int64_t i, float v)
{
	if (t->cfg.dtype == DT_F32)
		((float *)a)[i] = v;
	else if (t->cfg.dtype == DT_BF16)
		((uint16_t *)a)[i] = f32_to_bf16(v);
	else
		((uint16_t *)a)[i] = f32_to_f16(v);
}

/* The working weight p as f32 (slot: which of three scratch views). */
static const float *W(struct train *t, const struct tparam *p, int slot)
{
	if (t->cfg.dtype == DT_F32)
		return (const float *)t->work + p->off;
	for (int64_t i = 0; i < p->numel; i++)
		t->xs[slot][i] = wget(t, t->work, p->off + i);
	return t->xs[slot];
}

/* grad(p) += s */
static void gadd(struct train *t, const struct tparam *p, const float *s)
{
	if (t->cfg.dtype == DT_F32) {
		float *g = (float *)t->grad + p->off;
		for (int64_t i = 0; i < p->numel; i++)
			g[i] += s[i];
		return;
	}
	for (int64_t i = 0; i < p->numel; i++)
		wset(t, t->grad, p->off + i, wget(t, t->grad, p->off + i) + s[i]);
}

static int load_params(struct train *t, struct d0_err *err)
{
	struct tensor_spec *sp = NULL;
	size_t ns = 0;
	if (model_tensors(&t->r->c, &sp, &ns, err) < 0)
		return -1;
	for (int i = 0; i < t->np && !t->r->over[0]; i++) {
		struct tparam *p = &t->P[i];
		float *f;
		if (!p->here)
			continue;
		f = rt_load_f32(t->r, sp, ns, p->name);
		if (!f)
			break;
		for (int64_t j = 0; j < p->numel; j++) {
			int64_t at = p->off + j;
			wset(t, t->work, at, f[j]);
			if (at >= t->z0 && at < t->z0 + t->zn)
				t->master[at - t->z0] = f[j];
		}
		free(f);
		t->r->used -= (uint64_t)p->numel * 4; /* a transient copy */
	}
	free(sp);
	if (t->r->over[0])
		return d0_errf(err, "%s", t->r->over);
	return 0;
}

/* The sum of two 16-bit gradient vectors in f32, rounded once (the DP
 * all-reduce of bf16/f16 gradients). */
static int g_dtype;
static void sum16(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	uint16_t *a = in, *b = inout;
	(void)dt;
	for (int i = 0; i < *len; i++) {
		float s = g_dtype == DT_BF16 ? bf16_to_f32(a[i]) + bf16_to_f32(b[i])
					     : f16_to_f32(a[i]) + f16_to_f32(b[i]);
		b[i] = g_dtype == DT_BF16 ? f32_to_bf16(s) : f32_to_f16(s);
	}
}

int train_open(struct train **out, const char *dir, const struct train_cfg *cfg,
	       struct d0_err *err)
{
	struct train *t = calloc(1, sizeof *t);
	struct rt *r = calloc(1, sizeof *r);
	struct model_config *c = &r->c;
	char *cp = path_join(dir, "config.json"), *lp = path_join(dir, "layout.json");
	int rc = 0, bad;
	*out = t;
	t->r = r;
	t->cfg = *cfg;
	r->rank_fd = -1;
	r->dir = dir;
	r->ep_comm = MPI_COMM_NULL;
	r->tp_comm = MPI_COMM_NULL;
	t->tp_comm = MPI_COMM_NULL;
	t->dp_comm = MPI_COMM_NULL;
	t->ep_comm = MPI_COMM_NULL;
	t->pp_comm = MPI_COMM_NULL;
	t->emb_comm = MPI_COMM_NULL;
	r->budget = cfg->card_mem;
	MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &t->world);
	t->tp = cfg->tp;
	t->dp = cfg->dp;
	t->ep = cfg->ep;
	t->pp = cfg->pp;
	t->M = cfg->micro > 0 ? cfg->micro : 1;
	/* world rank = ((dp_rank * pp + pp_rank) * ep + ep_rank) * tp +
	 * tp_rank: a TP group inside an EP group inside a pipeline stage (the
	 * inference runtime's layout_rank) inside a DP replica */
	t->tp_rank = t->rank % t->tp;
	t->ep_rank = t->rank / t->tp % t->ep;
	t->pp_rank = t->rank / (t->tp * t->ep) % t->pp;
	t->dp_rank = t->rank / (t->tp * t->ep * t->pp);
	t->first = t->pp_rank == 0;
	t->last = t->pp_rank == t->pp - 1;
	if (model_config_load(cp, c, err) < 0)
		rc = -1;
	else if (cfg->pp > c->layers)
		rc = d0_errf(err, "%s: --pp %d: %lld layers cannot give every "
			     "pipeline stage one", cp, cfg->pp, (long long)c->layers);
	else if (cfg->ep > 1 && (c->experts == 0 || c->experts % cfg->ep))
		rc = d0_errf(err, "%s: --ep %d: %lld routed experts do not split "
			     "over %d EP ranks", cp, cfg->ep, (long long)c->experts,
			     cfg->ep);
	else if (t->tp * t->pp * t->ep * t->dp != t->world)
		rc = d0_errf(err, "tp %d x pp %d x ep %d x dp %d = %d ranks, but "
			     "mpirun started %d", t->tp, t->pp, t->ep, t->dp,
			     t->tp * t->pp * t->ep * t->dp, t->world);
	else if (path_exists(lp))
		rc = d0_errf(err, "%s: a converted layout; train reads a Hugging "
			     "Face checkpoint directory", dir);
	if (rc == 0) {
		r->d = (struct layout_dims){.tp = t->tp, .pp = 1, .ep = 1};
		r->rank = t->tp_rank;
		r->world = t->tp;
		r->tp_rank = t->tp_rank;
		if (layout_check(c, &r->d, err) < 0)
			rc = -1;
		else if (!c->mla && c->kv_heads < t->tp)
			rc = d0_errf(err, "%s: %lld kv heads under TP %d: training "
				     "splits kv heads, it does not replicate them",
				     cp, (long long)c->kv_heads, t->tp);
		else if (strcmp(c->hidden_act, "silu"))
			rc = d0_errf(err, "%s: activation '%s': training implements "
				     "silu (SwiGLU) only", cp, c->hidden_act);
		else if (c->qc.kind != QUANT_NONE)
			rc = d0_errf(err, "%s: quantised weights (%s): fine-tune a "
				     "bf16/f16/f32 checkpoint", cp, c->quant);
	}
	if (rc == 0 && ckpt_open(dir, &r->ck, err) < 0)
		rc = -1;
	for (size_t k = 0; rc == 0 && k < r->ck.nshards; k++) {
		if (st_open(r->ck.shards[k].path, &r->ck.shards[k].st, err) < 0)
			rc = -1;
		else
			r->ck.shards[k].parsed = 1;
	}
	free(cp);
	free(lp);
	bad = rc < 0;
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (bad)
		return rc < 0 ? -1 : d0_errf(err, "another rank failed to open %s", dir);
	{
		/* a replica's stage, and the coordinates the others share */
		int st = t->dp_rank * t->pp + t->pp_rank;
		int col = t->ep_rank * t->tp + t->tp_rank;
		MPI_Comm_split(MPI_COMM_WORLD, st * t->ep + t->ep_rank, t->tp_rank,
			       &t->tp_comm);
		MPI_Comm_split(MPI_COMM_WORLD, t->pp_rank * t->ep * t->tp + col,
			       t->dp_rank, &t->dp_comm);
		MPI_Comm_split(MPI_COMM_WORLD, st * t->tp + t->tp_rank, t->ep_rank,
			       &t->ep_comm);
		MPI_Comm_split(MPI_COMM_WORLD, t->dp_rank * t->ep * t->tp + col,
			       t->pp_rank, &t->pp_comm);
		/* a tied embedding's first and last stage sum its gradient */
		MPI_Comm_split(MPI_COMM_WORLD,
			       c->tie_embeddings && t->pp > 1 && (t->first || t->last)
				       ? t->dp_rank * t->ep * t->tp + col
				       : MPI_UNDEFINED,
			       t->pp_rank, &t->emb_comm);
	}
	{
		int64_t first, count;
		layout_stage_layers(c->layers, t->pp, t->pp_rank, &first, &count);
		t->l0 = (int)first;
		t->l1 = (int)(first + count);
	}
	MPI_Comm_dup(t->tp_comm, &r->tp_comm);
	g_dtype = cfg->dtype;
	MPI_Op_create(sum16, 1, &t->op16);

	t->H = (int)c->hidden;
	t->V = (int)c->vocab;
	t->Vl = t->V / t->tp;
	t->nh = (int)(c->heads / t->tp);
	t->nkv = c->mla ? t->nh : (int)(c->kv_heads / t->tp);
	t->dqk = (int)(c->mla ? c->qk_nope_dim + c->qk_rope_dim : c->head_dim);
	t->dv = (int)(c->mla ? c->v_head_dim : c->head_dim);
	t->rd = (int)(c->mla ? c->qk_rope_dim : c->head_dim);
	t->nope = (int)c->qk_nope_dim;
	t->kvl = (int)c->kv_lora_rank;
	t->ql = (int)c->q_lora_rank;
	t->F = (int)(c->ffn / t->tp);
	t->Fm = (int)(c->moe_ffn / t->tp);
	t->Fs = (int)(c->shared_ffn / t->tp);
	t->E = (int)c->experts;
	t->K = (int)c->top_k;
	t->attn_scale = 1.0 / sqrt((double)t->dqk);
	if (c->mla && c->rope.type[0] && c->rope.mscale_all_dim != 0) {
		double m = c->rope.factor <= 1 ? 1.0
			   : 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
		t->attn_scale *= m * m;
	}
	t->inv_freq = calloc((size_t)t->rd, sizeof(double));
	if (op_rope_inv_freq(c, t->rd, c->max_pos, t->inv_freq, &t->attn_factor) < 0 ||
	    !strcmp(c->rope.type, "dynamic"))
		return d0_errf(err, "rope type '%s' is not implemented by training",
			       c->rope.type);

	if (register_params(t, err) < 0)
		return -1;
	mark_stages(t);
	assign_offsets(t);
	t->wsz = cfg->dtype == DT_F32 ? 4 : 2;
	/* ZeRO-1: rank d of the DP group owns [zs[d], zs[d+1]) */
	t->zs = calloc((size_t)t->dp + 1, sizeof(int64_t));
	for (int d = 0; d <= t->dp; d++)
		t->zs[d] = cfg->zero1 ? t->N * d / t->dp : (d ? t->N : 0);
	t->z0 = cfg->zero1 ? t->zs[t->dp_rank] : 0;
	t->zn = cfg->zero1 ? t->zs[t->dp_rank + 1] - t->z0 : t->N;
	t->mem.params = (uint64_t)t->N;
	for (int i = 0; i < t->np; i++)
		if (t->P[i].expert >= 0 && t->P[i].here)
			t->mem.expert_params += (uint64_t)t->P[i].numel;
	/* weights and master first: the loader's transient copy then never
	 * raises the step's peak */
	t->work = talloc(t, (size_t)t->N * t->wsz, "working weights", CAT_WEIGHTS);
	t->master = talloc(t, (size_t)t->zn * 4 + 4, "master weights (f32)", CAT_OPTIM);
	if (!r->over[0])
		load_params(t, err);
	t->grad = talloc(t, (size_t)t->N * t->wsz, "gradients", CAT_GRADS);
	t->mom = talloc(t, (size_t)t->zn * 4 + 4, "Adam first moments", CAT_OPTIM);
	t->vel = talloc(t, (size_t)t->zn * 4 + 4, "Adam second moments", CAT_OPTIM);
	if (t->cfg.dtype != DT_F32) {
		/* slot 0 views a matrix, slots 1 and 2 vectors (norms, biases) */
		int64_t vn = 1;
		for (int i = 0; i < t->np; i++)
			if (t->P[i].here && t->P[i].rows == 1 && t->P[i].numel > vn)
				vn = t->P[i].numel;
		t->xs[0] = talloc(t, (size_t)t->maxn * 4, "weight views (f32)", CAT_SCRATCH);
		for (int s = 1; s < 3; s++)
			t->xs[s] = talloc(t, (size_t)vn * 4, "weight views (f32)", CAT_SCRATCH);
	}
	{
		/* f32: vectors' gradients only (matrices are summed in place) */
		int64_t gn = t->cfg.dtype == DT_F32 ? 0 : t->maxn;
		for (int i = 0; i < t->np; i++)
			if (t->P[i].here && t->P[i].rows == 1 && t->P[i].numel > gn)
				gn = t->P[i].numel;
		t->gs = talloc(t, (size_t)gn * 4 + 4, "gradient scratch", CAT_SCRATCH);
		if (t->cfg.dtype != DT_F32)
			t->mem.views = (uint64_t)t->maxn * 8;
	}
	/* the router biases (not trained) */
	for (int l = t->l0; l < t->l1 && !r->over[0]; l++)
		if (t->L[l].moe && !strcmp(c->scoring, "sigmoid")) {
			struct tensor_spec *sp = NULL;
			size_t ns = 0;
			char n[200];
			snprintf(n, sizeof n, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
			if (model_tensors(c, &sp, &ns, err) == 0)
				t->L[l].router_bias = rt_load_f32(r, sp, ns, n);
			if (t->L[l].router_bias)
				t->mem.weights += (uint64_t)t->E * 4;
			free(sp);
		}
	for (int l = 0; l < t->nl; l++)
		if (t->L[l].wo && !t->inject_p && cfg->inject == INJECT_TRANSPOSE)
			t->inject_p = t->L[0].wo;
	t->scale = cfg->dtype == DT_F16 ? cfg->scale0 : 1.0;
	bad = r->over[0] != 0;
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (bad)
		return d0_errf(err, "%s", r->over[0] ? r->over
			       : "another rank's weights did not fit or load");
	return 0;
}

void train_close(struct train *t)
{
	if (!t)
		return;
	if (t->ws)
		for (int l = 0; l < t->nws; l++) {
			float **f = (float **)&t->ws[l];
			for (size_t k = 0; k < sizeof(struct tws) / sizeof(float *); k++)
				free(f[k]);
		}
	free(t->ws);
	for (int k = 0; k < t->nslots; k++) {
		if (t->sact)
			free(t->sact[k]);
		if (t->sgrad)
			free(t->sgrad[k]);
	}
	free(t->sact);
	free(t->sgrad);
	free(t->rq_act);
	free(t->rq_grad);
	free(t->sched);
	{
		float *fs[] = {t->cosT, t->sinT, t->logits, t->hfin, t->xf, t->rsf,
			       t->dh, t->dh2, t->dxn, t->b[0], t->b[1], t->b[2],
			       t->b[3], t->b[4], t->b[5], t->tpbuf, t->master,
			       t->mom, t->vel, t->xs[0], t->xs[1], t->xs[2], t->gs};
		for (size_t k = 0; k < sizeof fs / sizeof *fs; k++)
			free(fs[k]);
	}
	free(t->work);
	free(t->grad);
	for (int l = 0; t->L && l < t->nl; l++) {
		free(t->L[l].e_gate);
		free(t->L[l].e_up);
		free(t->L[l].e_down);
		free(t->L[l].router_bias);
	}
	free(t->L);
	free(t->P);
	free(t->zs);
	free(t->req);
	free(t->inv_freq);
	if (t->op16)
		MPI_Op_free(&t->op16);
	if (t->tp_comm != MPI_COMM_NULL)
		MPI_Comm_free(&t->tp_comm);
	if (t->dp_comm != MPI_COMM_NULL)
		MPI_Comm_free(&t->dp_comm);
	if (t->ep_comm != MPI_COMM_NULL)
		MPI_Comm_free(&t->ep_comm);
	if (t->pp_comm != MPI_COMM_NULL)
		MPI_Comm_free(&t->pp_comm);
	if (t->emb_comm != MPI_COMM_NULL)
		MPI_Comm_free(&t->emb_comm);
	rt_close(t->r);
	free(t);
}

const struct model_config *train_config(const struct train *t) { return &t->r->c; }
int train_rank(const struct train *t) { return t->rank; }
int train_dp_rank(const struct train *t) { return t->dp_rank; }
double train_scale(const struct train *t) { return t->scale; }
int train_nparams(const struct train *t) { return t->np; }
const char *train_param_name(const struct train *t, int i) { return t->P[i].name; }
int64_t train_param_numel(const struct train *t, int i)
{
	return t->P[i].frows * t->P[i].fcols;
}

void train_memory(const struct train *t, struct train_mem *m)
{
	*m = t->mem;
	m->peak = t->r->peak;
}

/* ------------------------------------------------------- activations */

static float *A(struct train *t, int64_t n)
{
	return n > 0 ? talloc(t, (size_t)n * 4, "activations", CAT_ACT) : NULL;
}

static int alloc_acts(struct train *t, int B, int S, struct d0_err *err)
{
	int T = B * S, H = t->H, nloc = t->l1 - t->l0, nw;
	const struct model_config *c = &t->r->c;
	int64_t w = H;
	if (t->failed_acts)
		return d0_errf(err, "%s", t->r->over[0] ? t->r->over
			       : "activations and buffers on another rank: does "
			       "not fit its card (that rank names the part)");
	if (t->ws) {
		if (B == t->B && S == t->S)
			return 0;
		return d0_errf(err, "a batch of %d x %d tokens after one of %d x %d",
			       B, S, t->B, t->S);
	}
	if ((int64_t)T * t->K > 4096 || t->E > 1024 || t->rd > 512 ||
	    (c->mla && c->n_group > 256))
		return d0_errf(err, "a batch of %d tokens with top-%d routing over "
			       "%d experts: training holds at most 4096 routed "
			       "token slots, 1024 experts, 512 rotary dims", T,
			       t->K, t->E);
	t->T = T;
	t->B = B;
	t->S = S;
	/* 1F1B: stage s runs pp - 1 - s forwards ahead of its first backward */
	t->nslots = t->pp - t->pp_rank < t->M ? t->pp - t->pp_rank : t->M;
	nw = t->cfg.recompute ? 1 : t->nslots * nloc;
	t->nws = nw;
	t->ws = calloc((size_t)nw, sizeof *t->ws);
	for (int k = 0; k < nw; k++) {
		struct tws *s = &t->ws[k];
		int moe = 0, dense = 0;
		for (int i = t->l0; i < t->l1; i++) {
			int mine = t->cfg.recompute || i == t->l0 + k % nloc;
			moe |= t->L[i].moe && mine;
			dense |= !t->L[i].moe && mine;
		}
		s->x = A(t, (int64_t)T * H);
		s->xn1 = A(t, (int64_t)T * H);
		s->rs1 = A(t, T);
		s->q = A(t, (int64_t)T * t->nh * t->dqk);
		s->k = A(t, (int64_t)T * t->nkv * t->dqk);
		s->v = A(t, (int64_t)T * t->nkv * t->dv);
		if (t->L[0].q_norm) {
			s->qpre = A(t, (int64_t)T * t->nh * t->dqk);
			s->kpre = A(t, (int64_t)T * t->nkv * t->dqk);
			s->qrs = A(t, (int64_t)T * t->nh);
			s->krs = A(t, (int64_t)T * t->nkv);
		}
		s->P = A(t, (int64_t)B * t->nh * S * S);
		s->att = A(t, (int64_t)T * t->nh * t->dv);
		s->h2 = A(t, (int64_t)T * H);
		s->xn2 = A(t, (int64_t)T * H);
		s->rs2 = A(t, T);
		if (dense) {
			s->g = A(t, (int64_t)T * t->F);
			s->u = A(t, (int64_t)T * t->F);
		}
		if (moe) {
			s->prob = A(t, (int64_t)T * t->E);
			s->wt = A(t, (int64_t)T * t->K);
			s->idx = (int *)A(t, (int64_t)T * t->K);
			s->eg = A(t, (int64_t)T * t->K * t->Fm);
			s->eu = A(t, (int64_t)T * t->K * t->Fm);
			s->ey = A(t, (int64_t)T * t->K * H);
			if (t->Fs) {
				s->sg = A(t, (int64_t)T * t->Fs);
				s->su = A(t, (int64_t)T * t->Fs);
				s->sy = A(t, (int64_t)T * H);
				s->sgl = A(t, T);
			}
		}
		if (c->mla) {
			if (t->ql) {
				s->cqa = A(t, (int64_t)T * t->ql);
				s->cqn = A(t, (int64_t)T * t->ql);
				s->cqrs = A(t, T);
			}
			s->ckv = A(t, (int64_t)T * (t->kvl + t->rd));
			s->cn = A(t, (int64_t)T * t->kvl);
			s->crs = A(t, T);
			s->kvb = A(t, (int64_t)T * t->nh * (t->nope + t->dv));
		}
	}
	if (t->cfg.recompute) /* each layer's input, the rest rebuilt */
		t->tpbuf = A(t, (int64_t)t->nslots * nloc * T * H);
	if (t->last) {
		t->hfin = A(t, (int64_t)T * H);
		t->xf = A(t, (int64_t)T * H);
		t->rsf = A(t, T);
		t->logits = A(t, (int64_t)T * t->Vl);
	}
	t->sact = calloc((size_t)t->nslots, sizeof(float *));
	t->sgrad = calloc((size_t)t->nslots, sizeof(float *));
	t->rq_act = malloc((size_t)t->nslots * sizeof(MPI_Request));
	t->rq_grad = malloc((size_t)t->nslots * sizeof(MPI_Request));
	for (int k = 0; k < t->nslots; k++) {
		t->rq_act[k] = t->rq_grad[k] = MPI_REQUEST_NULL;
		if (!t->last) /* the stage's output, until the next has it */
			t->sact[k] = A(t, (int64_t)T * H);
		if (!t->first)
			t->sgrad[k] = talloc(t, (size_t)T * H * 4, "pipeline gradient "
					     "buffers", CAT_SCRATCH);
	}
	/* backward's own buffers, each as wide as its widest use */
	{
		int moe = 0, mla = c->mla != 0;
		int64_t KH = 0, KF = 0, bw[6];
		for (int i = t->l0; i < t->l1; i++)
			moe |= t->L[i].moe;
		if (moe) {
			KH = (int64_t)t->K * H;
			KF = (int64_t)t->K * t->Fm;
		}
#define MX(a, b) ((a) > (b) ? (a) : (b))
		bw[0] = MX(MX((int64_t)t->nh * t->dv, mla * (int64_t)t->nh * (t->nope + t->dv)),
			   MX(moe * (int64_t)t->E, KH));
		bw[1] = MX(MX((int64_t)t->nh * t->dqk, KH), t->ql);
		bw[2] = MX(MX((int64_t)t->nkv * t->dqk, KF), MX(MX(t->F, t->Fs), moe * (int64_t)t->E));
		bw[3] = MX(MX((int64_t)t->nkv * t->dv, KF), MX(t->F, t->Fs));
		bw[4] = MX(MX(mla * (int64_t)(t->kvl + t->rd), (int64_t)t->nh * t->dqk),
			   MX(MX(KH, KF), MX(t->F, t->Fs)));
		bw[5] = MX(MX(t->kvl, t->ql), MX(MX((int64_t)t->nkv * t->dqk, KF), MX(t->F, t->Fs)));
#undef MX
		for (int i = 0; i < 6; i++) {
			if (bw[i] > w)
				w = bw[i];
			t->b[i] = talloc(t, (size_t)T * (bw[i] ? bw[i] : 1) * 4 + 4,
					 "gradient buffers", CAT_SCRATCH);
		}
	}
	t->wmax = w;
	t->dh = talloc(t, (size_t)T * H * 4, "gradient buffers", CAT_SCRATCH);
	t->dh2 = talloc(t, (size_t)T * H * 4, "gradient buffers", CAT_SCRATCH);
	t->dxn = talloc(t, (size_t)T * H * 4, "gradient buffers", CAT_SCRATCH);
	t->cosT = talloc(t, (size_t)S * t->rd / 2 * 4 + 4, "rope tables", CAT_SCRATCH);
	t->sinT = talloc(t, (size_t)S * t->rd / 2 * 4 + 4, "rope tables", CAT_SCRATCH);
	/* any allocation above refused (over the card's budget, or out of
	 * host memory: rt_alloc names the part in r->over and every later
	 * one is refused too) leaves NULLs: nothing is written, and every
	 * rank stops before the first collective of the step (a rank over
	 * its budget alone would leave the others waiting for it) */
	{
		int bad = t->r->over[0] != 0;
		MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (bad) {
			t->failed_acts = 1;
			return d0_errf(err, "%s", t->r->over[0] ? t->r->over
				       : "activations and buffers on another rank: "
				       "does not fit its card (that rank names the "
				       "part)");
		}
	}
	for (int p = 0; p < S; p++)
		for (int i = 0; i < t->rd / 2; i++) {
			double a = (double)p * t->inv_freq[i];
			t->cosT[p * (t->rd / 2) + i] = (float)(cos(a) * t->attn_factor);
			t->sinT[p * (t->rd / 2) + i] = (float)(sin(a) * t->attn_factor);
		}
	return 0;
}

/* ------------------------------------------------------------- kernels */

static void tp_sum(struct train *t, float *buf, int64_t n)
{
	rt_allreduce(t->r, buf, (int)n, t->tp > 1 ? t->r->tp_comm : MPI_COMM_NULL,
		     RT_GROUP_TP);
}

/* An input gradient's all-reduce over TP (the fault injection skips it). */
static void tp_sum_dx(struct train *t, float *buf, int64_t n)
{
	if (t->cfg.inject != INJECT_NO_ALLREDUCE)
		tp_sum(t, buf, n);
}

/* Y[T,N] = X[T,K] W^T + b */
static void lin_f(struct train *t, const struct tparam *w, const struct tparam *b,
		  const float *X, float *Y, int T)
{
	int N = (int)w->rows, K = (int)w->cols;
	const float *Wf = W(t, w, 0);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, N, K, 1.0f, X, K,
		    Wf, K, 0.0f, Y, N);
	if (b) {
		const float *bf = W(t, b, 1);
		for (int i = 0; i < T; i++)
			for (int j = 0; j < N; j++)
				Y[(size_t)i * N + j] += bf[j];
	}
}

/* dW += dY^T X, db += sum dY, dX += dY W (dX NULL: not wanted). */
static void lin_b(struct train *t, const struct tparam *w, const struct tparam *b,
		  const float *X, const float *dY, float *dX, int T)
{
	int N = (int)w->rows, K = (int)w->cols, f32 = t->cfg.dtype == DT_F32;
	/* f32 gradients are summed in place; 16-bit ones through f32 */
	float *dW = f32 ? (float *)t->grad + w->off : t->gs;
	if (w == t->inject_p) /* the fault: X^T dY, [K, N] laid out as [N, K] */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, T, 1.0f,
			    X, K, dY, N, f32 ? 1.0f : 0.0f, dW, N);
	else
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, T, 1.0f,
			    dY, N, X, K, f32 ? 1.0f : 0.0f, dW, K);
	if (!f32)
		gadd(t, w, t->gs);
	if (b) {
		for (int j = 0; j < N; j++) {
			float s = 0;
			for (int i = 0; i < T; i++)
				s += dY[(size_t)i * N + j];
			t->gs[j] = s;
		}
		gadd(t, b, t->gs);
	}
	if (dX)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, K, N, 1.0f,
			    dY, N, W(t, w, 0), K, 1.0f, dX, K);
	if (t->nreq) {
		/* MPI moves a non-blocking all-reduce on only inside MPI
		 * calls: give the buckets in flight a turn after each product */
		int done;
		MPI_Testall(t->nreq, t->req, &done, MPI_STATUSES_IGNORE);
		if (done)
			t->nreq = 0;
	}
}

/* y = w * (x r), r = 1/sqrt(mean x^2 + eps), rows of n */
static void norm_f(const float *x, const float *w, float *y, float *rs, int rows,
		   int n, double eps)
{
	for (int t = 0; t < rows; t++) {
		const float *xr = x + (size_t)t * n;
		double ss = 0;
		float r;
		for (int i = 0; i < n; i++)
			ss += (double)xr[i] * xr[i];
		r = (float)(1.0 / sqrt(ss / n + eps));
		rs[t] = r;
		for (int i = 0; i < n; i++)
			y[(size_t)t * n + i] = w[i] * (xr[i] * r);
	}
}

/* dx (+)= norm's input gradient; dw accumulated in t->gs (zeroed here)
 * and added to p's gradient. */
static void norm_b(struct train *t, const struct tparam *p, const float *x,
		   const float *rs, const float *dy, float *dx, int add, int rows,
		   int n)
{
	const float *w = W(t, p, 1);
	memset(t->gs, 0, (size_t)n * 4);
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * n, *dr = dy + (size_t)r * n;
		float *o = dx + (size_t)r * n, q = rs[r];
		double a = 0;
		for (int i = 0; i < n; i++) {
			a += (double)dr[i] * w[i] * xr[i];
			t->gs[i] += dr[i] * xr[i] * q;
		}
		for (int i = 0; i < n; i++) {
			float v = q * w[i] * dr[i] - (float)(xr[i] * (double)q * q * q * a / n);
			o[i] = add ? o[i] + v : v;
		}
	}
	gadd(t, p, t->gs);
}

static void rope_f(struct train *t, float *v, int pos)
{
	int h = t->rd / 2;
	const float *c = t->cosT + (size_t)pos * h, *s = t->sinT + (size_t)pos * h;
	for (int i = 0; i < h; i++) {
		float x1 = v[i], x2 = v[i + h];
		v[i] = x1 * c[i] - x2 * s[i];
		v[i + h] = x2 * c[i] + x1 * s[i];
	}
}

static void rope_b(struct train *t, float *d, int pos)
{
	int h = t->rd / 2;
	const float *c = t->cosT + (size_t)pos * h, *s = t->sinT + (size_t)pos * h;
	for (int i = 0; i < h; i++) {
		float d1 = d[i], d2 = d[i + h];
		d[i] = d1 * c[i] + d2 * s[i];
		d[i + h] = -d1 * s[i] + d2 * c[i];
	}
}

/* DeepSeek's interleaved rope layout to rotate_half, and back */
static void deint(float *v, int n)
{
	float tmp[512];
	for (int i = 0; i < n / 2; i++) {
		tmp[i] = v[2 * i];
		tmp[i + n / 2] = v[2 * i + 1];
	}
	memcpy(v, tmp, (size_t)n * 4);
}

static void reint(float *v, int n)
{
	float tmp[512];
	for (int i = 0; i < n / 2; i++) {
		tmp[2 * i] = v[i];
		tmp[2 * i + 1] = v[i + n / 2];
	}
	memcpy(v, tmp, (size_t)n * 4);
}

static float silu(float x) { return x / (1.0f + expf(-x)); }
static float dsilu(float x)
{
	float s = 1.0f / (1.0f + expf(-x));
	return s * (1.0f + x * (1.0f - s));
}

/* --------------------------------------------------------- attention */

static void attn_core_f(struct train *t, struct tws *w, int64_t window)
{
	int S = t->S, nh = t->nh, nkv = t->nkv, dqk = t->dqk, dv = t->dv;
	int grp = nh / nkv;
	for (int b = 0; b < t->B; b++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < S; i++) {
				int ti = b * S + i, g = h / grp;
				int j0 = window > 0 && i - window + 1 > 0 ? (int)(i - window + 1) : 0;
				float *row = w->P + (((size_t)b * nh + h) * S + i) * S;
				const float *qi = w->q + ((size_t)ti * nh + h) * dqk;
				float *o = w->att + ((size_t)ti * nh + h) * dv, m = -INFINITY;
				double sum = 0;
				memset(row, 0, (size_t)S * 4);
				for (int j = j0; j <= i; j++) {
					const float *kj = w->k + ((size_t)(b * S + j) * nkv + g) * dqk;
					float s = 0;
					for (int d = 0; d < dqk; d++)
						s += qi[d] * kj[d];
					row[j] = s * (float)t->attn_scale;
					if (row[j] > m)
						m = row[j];
				}
				for (int j = j0; j <= i; j++) {
					row[j] = expf(row[j] - m);
					sum += row[j];
				}
				memset(o, 0, (size_t)dv * 4);
				for (int j = j0; j <= i; j++) {
					const float *vj = w->v + ((size_t)(b * S + j) * nkv + g) * dv;
					row[j] = (float)(row[j] / sum);
					for (int d = 0; d < dv; d++)
						o[d] += row[j] * vj[d];
				}
			}
}

/* datt -> dq, dk, dv (zeroed here) */
static void attn_core_b(struct train *t, struct tws *w, const float *datt,
			float *dq, float *dk, float *dv_)
{
	int S = t->S, nh = t->nh, nkv = t->nkv, dqk = t->dqk, dv = t->dv;
	int grp = nh / nkv, T = t->B * S;
	float sc = (float)t->attn_scale, *dP = malloc((size_t)S * 4);
	memset(dq, 0, (size_t)T * nh * dqk * 4);
	memset(dk, 0, (size_t)T * nkv * dqk * 4);
	memset(dv_, 0, (size_t)T * nkv * dv * 4);
	for (int b = 0; b < t->B; b++)
		for (int h = 0; h < nh; h++)
			for (int i = 0; i < S; i++) {
				int ti = b * S + i, g = h / grp;
				const float *row = w->P + (((size_t)b * nh + h) * S + i) * S;
				const float *da = datt + ((size_t)ti * nh + h) * dv;
				const float *qi = w->q + ((size_t)ti * nh + h) * dqk;
				float *dqi = dq + ((size_t)ti * nh + h) * dqk;
				double dot = 0;
				for (int j = 0; j <= i; j++) {
					const float *vj = w->v + ((size_t)(b * S + j) * nkv + g) * dv;
					float s = 0;
					if (row[j] == 0)
						continue;
					for (int d = 0; d < dv; d++)
						s += da[d] * vj[d];
					dP[j] = s;
					dot += (double)s * row[j];
				}
				for (int j = 0; j <= i; j++) {
					size_t kj = ((size_t)(b * S + j) * nkv + g);
					float ds;
					if (row[j] == 0)
						continue;
					ds = row[j] * (dP[j] - (float)dot) * sc;
					for (int d = 0; d < dqk; d++) {
						dqi[d] += ds * w->k[kj * dqk + d];
						dk[kj * dqk + d] += ds * qi[d];
					}
					for (int d = 0; d < dv; d++)
						dv_[kj * dv + d] += row[j] * da[d];
				}
			}
	free(dP);
}

/* attention of layer y on xn1: o [T,H] partial over TP (bo not added) */
static void attn_f(struct train *t, struct tlay *y, struct tws *w, float *o)
{
	int T = t->T, S = t->S, nh = t->nh, nkv = t->nkv, dqk = t->dqk;
	double eps = t->r->c.rms_eps;
	if (t->r->c.mla) {
		int nope = t->nope, rd = t->rd, kvl = t->kvl, dv = t->dv;
		if (t->ql) {
			lin_f(t, y->q_a, y->q_a_b, w->xn1, w->cqa, T);
			norm_f(w->cqa, W(t, y->q_a_norm, 2), w->cqn, w->cqrs, T, t->ql, 1e-6);
			lin_f(t, y->q_b, NULL, w->cqn, w->q, T);
		} else {
			lin_f(t, y->wq, NULL, w->xn1, w->q, T);
		}
		lin_f(t, y->kv_a, y->kv_a_b, w->xn1, w->ckv, T);
		for (int i = 0; i < T; i++)
			norm_f(w->ckv + (size_t)i * (kvl + rd), W(t, y->kv_a_norm, 2),
			       w->cn + (size_t)i * kvl, w->crs + i, 1, kvl, 1e-6);
		lin_f(t, y->kv_b, NULL, w->cn, w->kvb, T);
		for (int i = 0; i < T; i++) {
			float kr[512];
			memcpy(kr, w->ckv + (size_t)i * (kvl + rd) + kvl, (size_t)rd * 4);
			if (t->r->c.rope_interleave)
				deint(kr, rd);
			rope_f(t, kr, i % S);
			for (int h = 0; h < nh; h++) {
				float *qh = w->q + ((size_t)i * nh + h) * dqk + nope;
				const float *kb = w->kvb + ((size_t)i * nh + h) * (nope + dv);
				float *kd = w->k + ((size_t)i * nh + h) * dqk;
				if (t->r->c.rope_interleave)
					deint(qh, rd);
				rope_f(t, qh, i % S);
				memcpy(kd, kb, (size_t)nope * 4);
				memcpy(kd + nope, kr, (size_t)rd * 4);
				memcpy(w->v + ((size_t)i * nh + h) * dv, kb + nope, (size_t)dv * 4);
			}
		}
	} else {
		lin_f(t, y->wq, y->bq, w->xn1, w->q, T);
		lin_f(t, y->wk, y->bk, w->xn1, w->k, T);
		lin_f(t, y->wv, y->bv, w->xn1, w->v, T);
		if (y->q_norm) {
			memcpy(w->qpre, w->q, (size_t)T * nh * dqk * 4);
			memcpy(w->kpre, w->k, (size_t)T * nkv * dqk * 4);
			norm_f(w->qpre, W(t, y->q_norm, 1), w->q, w->qrs, T * nh, dqk, eps);
			norm_f(w->kpre, W(t, y->k_norm, 2), w->k, w->krs, T * nkv, dqk, eps);
		}
		for (int i = 0; i < T; i++) {
			for (int h = 0; h < nh; h++)
				rope_f(t, w->q + ((size_t)i * nh + h) * dqk, i % S);
			for (int h = 0; h < nkv; h++)
				rope_f(t, w->k + ((size_t)i * nkv + h) * dqk, i % S);
		}
	}
	attn_core_f(t, w, y->window);
	lin_f(t, y->wo, NULL, w->att, o, T);
}

/* do_ [T,H] whole -> dxn (set, summed over TP) */
static void attn_b(struct train *t, struct tlay *y, struct tws *w, const float *do_,
		   float *dxn)
{
	int T = t->T, S = t->S, nh = t->nh, nkv = t->nkv, dqk = t->dqk, dv = t->dv;
	int H = t->H;
	float *datt = t->b[0], *dq = t->b[1], *dk = t->b[2], *dvv = t->b[3];
	memset(datt, 0, (size_t)T * nh * dv * 4);
	lin_b(t, y->wo, NULL, w->att, do_, datt, T);
	attn_core_b(t, w, datt, dq, dk, dvv);
	memset(dxn, 0, (size_t)T * H * 4);
	if (t->r->c.mla) {
		int nope = t->nope, rd = t->rd, kvl = t->kvl;
		float *dkvb = t->b[0], *dckv = t->b[4], *dcn = t->b[5];
		/* k_pe is shared by the heads: its gradient sums theirs */
		memset(dckv, 0, (size_t)T * (kvl + rd) * 4);
		for (int i = 0; i < T; i++) {
			float *dkr = dckv + (size_t)i * (kvl + rd) + kvl;
			for (int h = 0; h < nh; h++) {
				float *dqh = dq + ((size_t)i * nh + h) * dqk + nope;
				const float *dkh = dk + ((size_t)i * nh + h) * dqk;
				float *db = dkvb + ((size_t)i * nh + h) * (nope + dv);
				rope_b(t, dqh, i % S);
				if (t->r->c.rope_interleave)
					reint(dqh, rd);
				for (int d = 0; d < rd; d++)
					dkr[d] += dkh[nope + d];
				memcpy(db, dkh, (size_t)nope * 4);
				memcpy(db + nope, dvv + ((size_t)i * nh + h) * dv, (size_t)dv * 4);
			}
		}
		/* the heads' partial sums of the latent gradients, whole */
		memset(dcn, 0, (size_t)T * kvl * 4);
		lin_b(t, y->kv_b, NULL, w->cn, dkvb, dcn, T);
		tp_sum_dx(t, dcn, (int64_t)T * kvl);
		for (int i = 0; i < T; i++) {
			float *dkr = dckv + (size_t)i * (kvl + rd) + kvl;
			tp_sum_dx(t, dkr, rd);
			rope_b(t, dkr, i % S);
			if (t->r->c.rope_interleave)
				reint(dkr, rd);
		}
		/* kv_a_norm over the first kvl of each row of ckv */
		{
			const float *wn = W(t, y->kv_a_norm, 1);
			memset(t->gs, 0, (size_t)kvl * 4);
			for (int i = 0; i < T; i++) {
				const float *xr = w->ckv + (size_t)i * (kvl + rd);
				const float *dr = dcn + (size_t)i * kvl;
				float *o = dckv + (size_t)i * (kvl + rd), q = w->crs[i];
				double a = 0;
				for (int j = 0; j < kvl; j++) {
					a += (double)dr[j] * wn[j] * xr[j];
					t->gs[j] += dr[j] * xr[j] * q;
				}
				for (int j = 0; j < kvl; j++)
					o[j] = q * wn[j] * dr[j] -
					       (float)(xr[j] * (double)q * q * q * a / kvl);
			}
			gadd(t, y->kv_a_norm, t->gs);
		}
		if (t->ql) {
			float *dcq = t->b[5];
			memset(dcq, 0, (size_t)T * t->ql * 4);
			lin_b(t, y->q_b, NULL, w->cqn, dq, dcq, T);
			tp_sum_dx(t, dcq, (int64_t)T * t->ql);
			norm_b(t, y->q_a_norm, w->cqa, w->cqrs, dcq, t->b[1], 0, T, t->ql);
			lin_b(t, y->q_a, y->q_a_b, w->xn1, t->b[1], dxn, T);
		} else {
			lin_b(t, y->wq, NULL, w->xn1, dq, dxn, T);
			tp_sum_dx(t, dxn, (int64_t)T * H);
		}
		/* replicated from here: whole on every rank */
		lin_b(t, y->kv_a, y->kv_a_b, w->xn1, dckv, dxn, T);
		return;
	}
	for (int i = 0; i < T; i++) {
		for (int h = 0; h < nh; h++)
			rope_b(t, dq + ((size_t)i * nh + h) * dqk, i % S);
		for (int h = 0; h < nkv; h++)
			rope_b(t, dk + ((size_t)i * nkv + h) * dqk, i % S);
	}
	if (y->q_norm) {
		float *tq = t->b[4], *tk = t->b[5];
		norm_b(t, y->q_norm, w->qpre, w->qrs, dq, tq, 0, T * nh, dqk);
		norm_b(t, y->k_norm, w->kpre, w->krs, dk, tk, 0, T * nkv, dqk);
		memcpy(dq, tq, (size_t)T * nh * dqk * 4);
		memcpy(dk, tk, (size_t)T * nkv * dqk * 4);
	}
	lin_b(t, y->wq, y->bq, w->xn1, dq, dxn, T);
	lin_b(t, y->wk, y->bk, w->xn1, dk, dxn, T);
	lin_b(t, y->wv, y->bv, w->xn1, dvv, dxn, T);
	tp_sum_dx(t, dxn, (int64_t)T * H);
}

/* ---------------------------------------------------------------- MLP */

static void topk(const float *x, int n, int k, int *idx)
{
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int q = 0; q < j; q++)
				taken |= idx[q] == i;
			if (!taken && (best < 0 || x[i] > x[best]))
				best = i;
		}
		idx[j] = best;
	}
}

/* the router of token row lg [E] -> prob (softmax or sigmoid), idx, wt */
static void route(struct train *t, struct tlay *y, const float *lg, float *prob,
		  int *idx, float *wt)
{
	const struct model_config *c = &t->r->c;
	int E = t->E, K = t->K;
	double sum = 0;
	if (!strcmp(c->scoring, "sigmoid")) {
		int ng = (int)c->n_group, tg = (int)c->topk_group, per = E / ng;
		float choice[1024], gsc[256];
		int gi[256];
		for (int e = 0; e < E; e++) {
			prob[e] = 1.0f / (1.0f + expf(-lg[e]));
			choice[e] = prob[e] + (y->router_bias ? y->router_bias[e] : 0.0f);
		}
		for (int g = 0; g < ng; g++) {
			int two[2];
			topk(choice + g * per, per, per >= 2 ? 2 : 1, two);
			gsc[g] = choice[g * per + two[0]] +
				 (per >= 2 ? choice[g * per + two[1]] : 0.0f);
		}
		topk(gsc, ng, tg, gi);
		for (int g = 0; g < ng; g++) {
			int keep = 0;
			for (int q = 0; q < tg; q++)
				keep |= gi[q] == g;
			if (!keep)
				for (int e = g * per; e < (g + 1) * per; e++)
					choice[e] = 0.0f;
		}
		topk(choice, E, K, idx);
		for (int j = 0; j < K; j++)
			sum += wt[j] = prob[idx[j]];
		for (int j = 0; j < K; j++)
			wt[j] = (float)((c->norm_topk_prob ? wt[j] / (sum + 1e-20) : wt[j]) *
					c->routed_scaling);
		return;
	}
	{
		float m = lg[0];
		double s = 0;
		for (int e = 1; e < E; e++)
			if (lg[e] > m)
				m = lg[e];
		for (int e = 0; e < E; e++)
			s += prob[e] = expf(lg[e] - m);
		for (int e = 0; e < E; e++)
			prob[e] = (float)(prob[e] / s);
	}
	topk(prob, E, K, idx);
	for (int j = 0; j < K; j++)
		sum += wt[j] = prob[idx[j]];
	if (c->norm_topk_prob)
		for (int j = 0; j < K; j++)
			wt[j] = (float)(wt[j] / sum);
}

/* dwt [K] -> dlogits [E] */
static void route_b(struct train *t, const float *prob, const int *idx,
		    const float *dwt, float *dlg)
{
	const struct model_config *c = &t->r->c;
	int E = t->E, K = t->K;
	double S = 0, a = 0;
	float dp[1024];
	memset(dp, 0, (size_t)E * 4);
	for (int j = 0; j < K; j++)
		S += prob[idx[j]];
	if (!strcmp(c->scoring, "sigmoid")) {
		double rs = c->routed_scaling;
		if (c->norm_topk_prob) {
			double Se = S + 1e-20;
			for (int j = 0; j < K; j++)
				a += rs * dwt[j] * prob[idx[j]] / Se;
			for (int j = 0; j < K; j++)
				dp[idx[j]] = (float)((rs * dwt[j] - a) / Se);
		} else {
			for (int j = 0; j < K; j++)
				dp[idx[j]] = (float)(rs * dwt[j]);
		}
		for (int e = 0; e < E; e++)
			dlg[e] = dp[e] * prob[e] * (1.0f - prob[e]);
		return;
	}
	if (c->norm_topk_prob) {
		for (int j = 0; j < K; j++)
			a += dwt[j] * prob[idx[j]] / S;
		for (int j = 0; j < K; j++)
			dp[idx[j]] = (float)((dwt[j] - a) / S);
	} else {
		for (int j = 0; j < K; j++)
			dp[idx[j]] = dwt[j];
	}
	{
		double s = 0;
		for (int e = 0; e < E; e++)
			s += (double)dp[e] * prob[e];
		for (int e = 0; e < E; e++)
			dlg[e] = prob[e] * (dp[e] - (float)s);
	}
}

/* out [n,H] = down(silu(gate x) * up x); g, u [n,F] kept */
static void swiglu_f(struct train *t, const struct tparam *gw, const struct tparam *gb,
		     const struct tparam *uw, const struct tparam *ub,
		     const struct tparam *dw, const float *x, float *g, float *u,
		     float *out, int n, int F)
{
	float *a = t->b[5];
	lin_f(t, gw, gb, x, g, n);
	lin_f(t, uw, ub, x, u, n);
	for (int64_t i = 0; i < (int64_t)n * F; i++)
		a[i] = silu(g[i]) * u[i];
	lin_f(t, dw, NULL, a, out, n);
}

/* dout [n,H] -> dx (accumulated) */
static void swiglu_b(struct train *t, const struct tparam *gw, const struct tparam *gb,
		     const struct tparam *uw, const struct tparam *ub,
		     const struct tparam *dw, const float *x, const float *g,
		     const float *u, const float *dout, float *dx, int n, int F)
{
	float *a = t->b[5], *da = t->b[4], *dg = t->b[3], *du = t->b[2];
	for (int64_t i = 0; i < (int64_t)n * F; i++)
		a[i] = silu(g[i]) * u[i];
	memset(da, 0, (size_t)n * F * 4);
	lin_b(t, dw, NULL, a, dout, da, n);
	for (int64_t i = 0; i < (int64_t)n * F; i++) {
		dg[i] = da[i] * u[i] * dsilu(g[i]);
		du[i] = da[i] * silu(g[i]);
	}
	lin_b(t, gw, gb, x, dg, dx, n);
	lin_b(t, uw, ub, x, du, dx, n);
}

/* MoE on xn2: part [T,H] += partial over TP */
/* ------------------------------------------------------ expert parallel */

/* The EP rank that owns routed expert e (a contiguous block each). */
static int owner(const struct train *t, int e) { return e / (t->E / t->ep); }

/*
 * One MoE layer's all-to-all routes, as the inference runtime's: each EP
 * rank routes the tokens t with t % ep == its EP rank, sending each chosen
 * slot to the owner of its expert; the owner answers along the same route.
 * sl: this rank's slots in send order (by owner, then slot), sc: rows to
 * each EP rank.  The owner learns what it receives from the routing rank
 * (counts, then each row's slot and expert: rs, re, rc), not from its own
 * copy of the router, so replicas that drift (a fault) cannot mismatch
 * the exchange.  Returns the rows received; -1 if a route is malformed.
 */
static void ep_a2a(struct train *t, const void *snd, const int *sc, void *rcv,
		   const int *rc, int width, MPI_Datatype dt, size_t esz);

static int ep_routes(struct train *t, const int *idx, int *sl, int *sc, int *rs,
		     int *re, int *rc)
{
	int TK = t->T * t->K, ns = 0, nr = 0;
	int *pr;
	for (int q = 0; q < t->ep; q++) {
		sc[q] = 0;
		for (int s = 0; s < TK; s++)
			if (s / t->K % t->ep == t->ep_rank && owner(t, idx[s]) == q) {
				sl[ns++] = s;
				sc[q]++;
			}
	}
	if (t->ep == 1)
		rc[0] = sc[0];
	else
		MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, t->ep_comm);
	for (int q = 0; q < t->ep; q++)
		nr += rc[q];
	if (nr > TK)
		return -1;
	pr = malloc((size_t)(ns + nr) * 2 * sizeof(int) + 8);
	for (int i = 0; i < ns; i++) {
		pr[2 * i] = sl[i];
		pr[2 * i + 1] = idx[sl[i]];
	}
	ep_a2a(t, pr, sc, pr + 2 * ns, rc, 2, MPI_INT, sizeof(int));
	for (int i = 0; i < nr; i++) {
		rs[i] = pr[2 * (ns + i)];
		re[i] = pr[2 * (ns + i) + 1];
		if (rs[i] < 0 || rs[i] >= TK || re[i] < 0 || re[i] >= t->E ||
		    owner(t, re[i]) != t->ep_rank)
			nr = -1;
	}
	free(pr);
	return nr;
}

/* Rows of width elements: sc[q] sent to EP rank q, rc[q] received from
 * it (the answers' way back swaps the two). */
static void ep_a2a(struct train *t, const void *snd, const int *sc, void *rcv,
		   const int *rc, int width, MPI_Datatype dt, size_t esz)
{
	int *a = malloc((size_t)t->ep * 4 * sizeof(int)), so = 0, ro = 0;
	double q0 = MPI_Wtime();
	if (t->ep == 1) {
		memcpy(rcv, snd, (size_t)sc[0] * width * esz);
		free(a);
		return;
	}
	for (int q = 0; q < t->ep; q++) {
		a[q] = sc[q] * width;
		a[t->ep + q] = so;
		a[2 * t->ep + q] = rc[q] * width;
		a[3 * t->ep + q] = ro;
		so += a[q];
		ro += a[2 * t->ep + q];
	}
	MPI_Alltoallv(snd, a, a + t->ep, dt, rcv, a + 2 * t->ep, a + 3 * t->ep, dt,
		      t->ep_comm);
	t->t_ep += MPI_Wtime() - q0;
	free(a);
}

/* A sum over the EP group (the EP all-gather by sum, and its backward). */
static void ep_sum(struct train *t, float *buf, int64_t n)
{
	double q0 = MPI_Wtime();
	if (t->ep == 1)
		return;
	MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, t->ep_comm);
	t->t_ep += MPI_Wtime() - q0;
}

static void moe_f(struct train *t, struct tlay *y, struct tws *w, float *part)
{
	int T = t->T, H = t->H, E = t->E, K = t->K, Fm = t->Fm, TK = T * K;
	float *lg = t->b[0];
	int *sl = malloc((size_t)TK * 3 * sizeof(int) + 4), *rs = sl + TK, *re = rs + TK;
	int *sc = malloc((size_t)t->ep * 2 * sizeof(int)), *rc = sc + t->ep, ns = 0, nr;
	float *sx, *rx, *ry, *sy;
	lin_f(t, y->router, NULL, w->xn2, lg, T);
	for (int i = 0; i < T; i++)
		route(t, y, lg + (size_t)i * E, w->prob + (size_t)i * E,
		      w->idx + (size_t)i * K, w->wt + (size_t)i * K);
	nr = ep_routes(t, w->idx, sl, sc, rs, re, rc);
	for (int q = 0; q < t->ep; q++)
		ns += sc[q];
	if (nr < 0) /* only a broken exchange: every row's answer zero */
		nr = 0;
	sx = malloc((size_t)ns * H * 4 + 4);
	sy = malloc((size_t)ns * H * 4 + 4);
	rx = malloc((size_t)TK * H * 4 + 4);
	ry = calloc((size_t)TK * H + 1, 4);
	for (int i = 0; i < ns; i++)
		memcpy(sx + (size_t)i * H, w->xn2 + (size_t)(sl[i] / K) * H, (size_t)H * 4);
	ep_a2a(t, sx, sc, rx, rc, H, MPI_FLOAT, 4);
	/* the owner runs its experts on the rows it received */
	for (int e = 0; e < E; e++) {
		float *X = t->b[1], *G = t->b[2], *U = t->b[3], *Y = t->b[4];
		int n = 0, rows[4096];
		if (owner(t, e) != t->ep_rank)
			continue;
		for (int i = 0; i < nr; i++)
			if (re[i] == e)
				rows[n++] = i;
		if (!n)
			continue;
		for (int i = 0; i < n; i++)
			memcpy(X + (size_t)i * H, rx + (size_t)rows[i] * H, (size_t)H * 4);
		swiglu_f(t, y->e_gate[e], NULL, y->e_up[e], NULL, y->e_down[e], X, G,
			 U, Y, n, Fm);
		for (int i = 0; i < n; i++) {
			int s = rs[rows[i]];
			memcpy(w->eg + (size_t)s * Fm, G + (size_t)i * Fm, (size_t)Fm * 4);
			memcpy(w->eu + (size_t)s * Fm, U + (size_t)i * Fm, (size_t)Fm * 4);
			memcpy(ry + (size_t)rows[i] * H, Y + (size_t)i * H, (size_t)H * 4);
		}
	}
	/* the answers back to the routing rank, which keeps its slots' expert
	 * outputs (the gate weights' gradients need them) */
	ep_a2a(t, ry, rc, sy, sc, H, MPI_FLOAT, 4);
	memset(w->ey, 0, (size_t)TK * H * 4);
	for (int i = 0; i < ns; i++)
		memcpy(w->ey + (size_t)sl[i] * H, sy + (size_t)i * H, (size_t)H * 4);
	for (int s = 0; s < TK; s++)
		if (s / K % t->ep == t->ep_rank)
			for (int j = 0; j < H; j++)
				part[(size_t)(s / K) * H + j] += w->wt[s] * w->ey[(size_t)s * H + j];
	/* each rank's tokens: whole on every EP rank (the all-gather by sum) */
	ep_sum(t, part, (int64_t)T * H);
	free(sx);
	free(sy);
	free(rx);
	free(ry);
	free(sl);
	free(sc);
	if (y->sh_gate) {
		swiglu_f(t, y->sh_gate, NULL, y->sh_up, NULL, y->sh_down, w->xn2, w->sg,
			 w->su, w->sy, T, t->Fs);
		for (int i = 0; i < T; i++) {
			float gl = 1.0f;
			if (y->sh_gate_w) {
				const float *gw = W(t, y->sh_gate_w, 1);
				float z = 0;
				for (int j = 0; j < H; j++)
					z += w->xn2[(size_t)i * H + j] * gw[j];
				gl = 1.0f / (1.0f + expf(-z));
			}
			w->sgl[i] = gl;
			for (int j = 0; j < H; j++)
				part[(size_t)i * H + j] += gl * w->sy[(size_t)i * H + j];
		}
	}
}

/* dpart [T,H] whole -> dxn (set, whole) */
static void moe_b(struct train *t, struct tlay *y, struct tws *w, const float *dp,
		  float *dxn)
{
	int T = t->T, H = t->H, E = t->E, K = t->K, Fm = t->Fm;
	float *dwt = malloc((size_t)T * K * 4 + 4), *dsgl = malloc((size_t)T * 4 + 4);
	memset(dxn, 0, (size_t)T * H * 4);
	/* the gate weights' gradients: partial over TP (the experts' outputs
	 * are), whole after the all-reduce */
	for (int s = 0; s < T * K; s++) {
		float a = 0;
		for (int j = 0; j < H; j++)
			a += dp[(size_t)(s / K) * H + j] * w->ey[(size_t)s * H + j];
		dwt[s] = a;
	}
	tp_sum(t, dwt, (int64_t)T * K);
	/* the routing rank's slots only (ey is zero elsewhere): whole after
	 * the EP sum, so every EP rank computes the router's same gradient */
	ep_sum(t, dwt, (int64_t)T * K);
	{
		int TK = T * K;
		int *sl = malloc((size_t)TK * 4 * sizeof(int) + 4), *rs = sl + TK;
		int *re = rs + TK, *spos = re + TK;
		int *sc = malloc((size_t)t->ep * 2 * sizeof(int)), *rc = sc + t->ep;
		int ns = 0, nr;
		float *sd, *rd, *rdx, *sdx;
		/* the forward's routes again (the same slots, the same order) */
		nr = ep_routes(t, w->idx, sl, sc, rs, re, rc);
		for (int q = 0; q < t->ep; q++)
			ns += sc[q];
		if (nr < 0)
			nr = 0;
		sd = malloc((size_t)ns * H * 4 + 4);
		sdx = malloc((size_t)ns * H * 4 + 4);
		rd = malloc((size_t)TK * H * 4 + 4);
		rdx = calloc((size_t)TK * H + 1, 4);
		for (int s = 0; s < TK; s++)
			spos[s] = -1;
		/* the output gradients to the experts' owners, along the
		 * forward's routes */
		for (int i = 0; i < ns; i++) {
			int s = sl[i];
			spos[s] = i;
			for (int j = 0; j < H; j++)
				sd[(size_t)i * H + j] = w->wt[s] * dp[(size_t)(s / K) * H + j];
		}
		ep_a2a(t, sd, sc, rd, rc, H, MPI_FLOAT, 4);
		for (int e = 0; e < E; e++) {
			float *X = t->b[0], *dY = t->b[1], *dX;
			float *G, *U;
			int n = 0, rows[4096];
			if (owner(t, e) != t->ep_rank)
				continue;
			for (int i = 0; i < nr; i++)
				if (re[i] == e)
					rows[n++] = i;
			if (!n)
				continue;
			dX = malloc((size_t)n * H * 4);
			G = malloc((size_t)n * Fm * 4);
			U = malloc((size_t)n * Fm * 4);
			for (int i = 0; i < n; i++) {
				int s = rs[rows[i]];
				memcpy(X + (size_t)i * H, w->xn2 + (size_t)(s / K) * H, (size_t)H * 4);
				memcpy(dY + (size_t)i * H, rd + (size_t)rows[i] * H, (size_t)H * 4);
				memcpy(G + (size_t)i * Fm, w->eg + (size_t)s * Fm, (size_t)Fm * 4);
				memcpy(U + (size_t)i * Fm, w->eu + (size_t)s * Fm, (size_t)Fm * 4);
			}
			memset(dX, 0, (size_t)n * H * 4);
			/* the expert's weight gradients: on its owner only */
			swiglu_b(t, y->e_gate[e], NULL, y->e_up[e], NULL, y->e_down[e], X, G,
				 U, dY, dX, n, Fm);
			for (int i = 0; i < n; i++)
				memcpy(rdx + (size_t)rows[i] * H, dX + (size_t)i * H,
				       (size_t)H * 4);
			free(dX);
			free(G);
			free(U);
		}
		/* the input gradients back to the routing rank, added in the
		 * 1-rank run's order (expert, then slot) */
		ep_a2a(t, rdx, rc, sdx, sc, H, MPI_FLOAT, 4);
		for (int e = 0; e < E; e++)
			for (int s = 0; s < TK; s++)
				if (w->idx[s] == e && spos[s] >= 0)
					for (int j = 0; j < H; j++)
						dxn[(size_t)(s / K) * H + j] +=
							sdx[(size_t)spos[s] * H + j];
		/* each routing rank's tokens: whole on every EP rank (the
		 * fault injection skips it) */
		if (t->cfg.inject != INJECT_NO_ALLREDUCE)
			ep_sum(t, dxn, (int64_t)T * H);
		free(sd);
		free(sdx);
		free(rd);
		free(rdx);
		free(sl);
		free(sc);
	}
	if (y->sh_gate) {
		float *dS = malloc((size_t)T * H * 4);
		for (int i = 0; i < T; i++) {
			float a = 0;
			for (int j = 0; j < H; j++) {
				dS[(size_t)i * H + j] = w->sgl[i] * dp[(size_t)i * H + j];
				a += dp[(size_t)i * H + j] * w->sy[(size_t)i * H + j];
			}
			dsgl[i] = a;
		}
		swiglu_b(t, y->sh_gate, NULL, y->sh_up, NULL, y->sh_down, w->xn2, w->sg,
			 w->su, dS, dxn, T, t->Fs);
		free(dS);
	}
	/* the experts' input gradients are partial over TP: whole here, then
	 * the replicated router and shared-expert gate add theirs */
	tp_sum_dx(t, dxn, (int64_t)T * H);
	if (y->sh_gate_w) {
		float *dz = t->b[2];
		tp_sum(t, dsgl, T);
		for (int i = 0; i < T; i++)
			dz[i] = dsgl[i] * w->sgl[i] * (1.0f - w->sgl[i]);
		lin_b(t, y->sh_gate_w, NULL, w->xn2, dz, dxn, T);
	}
	{
		float *dlg = t->b[2];
		for (int i = 0; i < T; i++)
			route_b(t, w->prob + (size_t)i * E, w->idx + (size_t)i * K,
				dwt + (size_t)i * K, dlg + (size_t)i * E);
		lin_b(t, y->router, NULL, w->xn2, dlg, dxn, T);
	}
	free(dwt);
	free(dsgl);
}

/* ------------------------------------------------------------- layers */

static void layer_f(struct train *t, struct tlay *y, struct tws *w, const float *x,
		    float *out)
{
	int T = t->T, H = t->H;
	float *part = t->dxn;
	double eps = t->r->c.rms_eps;
	if (w->x != x)
		memcpy(w->x, x, (size_t)T * H * 4);
	norm_f(w->x, W(t, y->in_norm, 1), w->xn1, w->rs1, T, H, eps);
	attn_f(t, y, w, part);
	tp_sum(t, part, (int64_t)T * H);
	{
		const float *bo = y->bo ? W(t, y->bo, 1) : NULL;
		for (int64_t i = 0; i < (int64_t)T * H; i++)
			w->h2[i] = w->x[i] + part[i] + (bo ? bo[i % H] : 0.0f);
	}
	norm_f(w->h2, W(t, y->post_norm, 1), w->xn2, w->rs2, T, H, eps);
	memset(part, 0, (size_t)T * H * 4);
	if (y->moe)
		moe_f(t, y, w, part);
	else
		swiglu_f(t, y->gate, y->gate_b, y->up, y->up_b, y->down, w->xn2, w->g,
			 w->u, part, T, t->F);
	tp_sum(t, part, (int64_t)T * H);
	{
		const float *db = y->down_b ? W(t, y->down_b, 1) : NULL;
		for (int64_t i = 0; i < (int64_t)T * H; i++)
			out[i] = w->h2[i] + part[i] + (db ? db[i % H] : 0.0f);
	}
}

/* Replicated parameters agree over TP: averaged (summed when partial). */
static void tp_agree(struct train *t, int64_t lo, int64_t hi)
{
	if (t->tp == 1)
		return;
	for (int i = 0; i < t->np; i++) {
		struct tparam *p = &t->P[i];
		if (!p->here || !p->repl || p->off < lo || p->off >= hi)
			continue;
		if (t->cfg.dtype == DT_F32) {
			float *g = (float *)t->grad + p->off;
			tp_sum(t, g, p->numel);
			for (int64_t j = 0; !p->tp_sum && j < p->numel; j++)
				g[j] /= (float)t->tp;
			continue;
		}
		for (int64_t j = 0; j < p->numel; j++)
			t->gs[j] = wget(t, t->grad, p->off + j);
		tp_sum(t, t->gs, p->numel);
		for (int64_t j = 0; j < p->numel; j++)
			wset(t, t->grad, p->off + j,
			     p->tp_sum ? t->gs[j] : t->gs[j] / (float)t->tp);
	}
}

/* dh: the layer output's gradient in, the input's out */
static void layer_b(struct train *t, struct tlay *y, struct tws *w, float *dh)
{
	int T = t->T, H = t->H;
	float *dh2 = t->dh2, *dxn = t->dxn;
	if (y->down_b) {
		for (int j = 0; j < H; j++) {
			float s = 0;
			for (int i = 0; i < T; i++)
				s += dh[(size_t)i * H + j];
			t->gs[j] = s;
		}
		gadd(t, y->down_b, t->gs);
	}
	if (y->moe) {
		moe_b(t, y, w, dh, dxn);
	} else {
		memset(dxn, 0, (size_t)T * H * 4);
		swiglu_b(t, y->gate, y->gate_b, y->up, y->up_b, y->down, w->xn2, w->g,
			 w->u, dh, dxn, T, t->F);
		tp_sum_dx(t, dxn, (int64_t)T * H);
	}
	memcpy(dh2, dh, (size_t)T * H * 4);
	norm_b(t, y->post_norm, w->h2, w->rs2, dxn, dh2, 1, T, H);
	if (y->bo) {
		for (int j = 0; j < H; j++) {
			float s = 0;
			for (int i = 0; i < T; i++)
				s += dh2[(size_t)i * H + j];
			t->gs[j] = s;
		}
		gadd(t, y->bo, t->gs);
	}
	attn_b(t, y, w, dh2, dxn);
	memcpy(dh, dh2, (size_t)T * H * 4);
	norm_b(t, y->in_norm, w->x, w->rs1, dxn, dh, 1, T, H);
	/* once the micro-batches' gradients are all in: an average of
	 * partial sums would sum the earlier ones again */
	if (t->agree)
		tp_agree(t, y->p_lo, y->p_hi);
}

/* ------------------------------------------------------------ DP buckets */

static void dp_start(struct train *t, int64_t lo, int64_t hi)
{
	MPI_Request rq;
	if (hi <= lo)
		return;
	if (t->nreq == t->reqcap) {
		t->reqcap = t->reqcap ? 2 * t->reqcap : 16;
		t->req = realloc(t->req, (size_t)t->reqcap * sizeof *t->req);
	}
	if (t->cfg.dtype == DT_F32)
		MPI_Iallreduce(MPI_IN_PLACE, (float *)t->grad + lo, (int)(hi - lo),
			       MPI_FLOAT, MPI_SUM, t->dp_comm, &rq);
	else
		MPI_Iallreduce(MPI_IN_PLACE, (uint16_t *)t->grad + lo, (int)(hi - lo),
			       MPI_UINT16_T, t->op16, t->dp_comm, &rq);
	t->req[t->nreq++] = rq;
}

/* Gradients [bstart, upto) are final: start a bucket once it is full
 * (every remaining one when last), and let MPI progress the others. */
static void dp_ready(struct train *t, int64_t upto, int last)
{
	int64_t be;
	if (t->dp == 1 || t->cfg.inject == INJECT_NO_ALLREDUCE)
		return;
	be = (int64_t)(t->cfg.bucket_bytes / (size_t)t->wsz);
	if (be > 0 && (upto - t->bstart >= be || last)) {
		dp_start(t, t->bstart, upto);
		t->bstart = upto;
	}
	if (be == 0 && last) { /* no overlap: one blocking all-reduce */
		double t0 = MPI_Wtime();
		dp_start(t, 0, t->N);
		MPI_Waitall(t->nreq, t->req, MPI_STATUSES_IGNORE);
		t->nreq = 0;
		t->t_dp_exposed += MPI_Wtime() - t0;
		return;
	}
	if (t->nreq) {
		int done;
		MPI_Testall(t->nreq, t->req, &done, MPI_STATUSES_IGNORE);
		if (done)
			t->nreq = 0;
	}
	if (last && t->nreq) {
		double t0 = MPI_Wtime();
		MPI_Waitall(t->nreq, t->req, MPI_STATUSES_IGNORE);
		t->nreq = 0;
		t->t_dp_exposed += MPI_Wtime() - t0;
	}
}

/* --------------------------------------------------------- the pass */

static double comm_time(const struct train *t)
{
	double s = 0;
	for (int g = 0; g < RT_GROUPS; g++)
		for (int o = 0; o < RT_OPS; o++)
			s += t->r->stats.time_s[g][o];
	return s + t->t_ep;
}

/* ---------------------------------------------------------- the pipeline */

enum { TAG_ACT = 71, TAG_GRAD = 72, TAG_CHECK = 73 };

/* A wait on a pipeline neighbour: idle time of this stage (the bubble and
 * the transfer), counted as communication. */
static void pp_waited(struct train *t, double q0, uint64_t bytes)
{
	double dt = now_s() - q0;
	t->t_wait += dt;
	rt_stat_add(t->r, RT_GROUP_PP, RT_OP_SENDRECV, bytes, dt);
}

static void pp_wait(struct train *t, MPI_Request *rq)
{
	double q0 = now_s();
	if (*rq == MPI_REQUEST_NULL)
		return;
	MPI_Wait(rq, MPI_STATUS_IGNORE);
	pp_waited(t, q0, 0);
}

/* n floats from pipeline stage `from` (blocking: nothing else to do) */
static void pp_recv(struct train *t, float *buf, int64_t n, int from, int tag)
{
	double q0 = now_s();
	MPI_Recv(buf, (int)n, MPI_FLOAT, from, tag, t->pp_comm, MPI_STATUS_IGNORE);
	pp_waited(t, q0, (uint64_t)n * 4);
}

static void sched_note(struct train *t, char kind, int m)
{
	char b[24];
	int n = snprintf(b, sizeof b, "%s%c%d", t->sched_n ? " " : "", kind, m);
	char *g = realloc(t->sched, t->sched_n + (size_t)n + 1);
	if (!g)
		return;
	t->sched = g;
	memcpy(t->sched + t->sched_n, b, (size_t)n + 1);
	t->sched_n += (size_t)n;
}

/* Layer l's input in slot k (the stage's first: where the embedding or
 * the previous stage's activation lands), what forward keeps of it, and
 * where its output goes (the next layer's input, the final norm's on the
 * last stage, the buffer sent on elsewhere). */
static float *layer_in(struct train *t, int k, int l)
{
	int nloc = t->l1 - t->l0;
	if (t->cfg.recompute)
		return t->tpbuf + ((size_t)k * nloc + (size_t)(l - t->l0)) * t->T * t->H;
	return t->ws[k * nloc + (l - t->l0)].x;
}

static struct tws *layer_ws(struct train *t, int k, int l)
{
	return &t->ws[t->cfg.recompute ? 0 : k * (t->l1 - t->l0) + (l - t->l0)];
}

static float *layer_out(struct train *t, int k, int l)
{
	if (l + 1 < t->l1)
		return layer_in(t, k, l + 1);
	return t->last ? t->hfin : t->sact[k];
}

/* The vocabulary-parallel embedding of a micro-batch's tokens into h. */
static void embed_f(struct train *t, const int64_t *tok, float *h)
{
	int T = t->T, H = t->H, Vl = t->Vl;
	int64_t lo = (int64_t)t->tp_rank * Vl;
	const float *E = W(t, t->embed, 0);
	memset(h, 0, (size_t)T * H * 4);
	for (int i = 0; i < T; i++)
		if (tok[i] >= lo && tok[i] < lo + Vl)
			memcpy(h + (size_t)i * H, E + (size_t)(tok[i] - lo) * H, (size_t)H * 4);
	tp_sum(t, h, (int64_t)T * H);
}

/* The embedding's gradient: rows of this rank's vocabulary slice. */
static void embed_b(struct train *t, const int64_t *tok)
{
	int T = t->T, H = t->H, Vl = t->Vl;
	int64_t lo = (int64_t)t->tp_rank * Vl;
	if (t->cfg.dtype == DT_F32) {
		float *g = (float *)t->grad + t->embed->off;
		for (int i = 0; i < T; i++)
			if (tok[i] >= lo && tok[i] < lo + Vl)
				for (int j = 0; j < H; j++)
					g[(size_t)(tok[i] - lo) * H + j] += t->dh[(size_t)i * H + j];
		return;
	}
	memset(t->gs, 0, (size_t)t->embed->numel * 4);
	for (int i = 0; i < T; i++)
		if (tok[i] >= lo && tok[i] < lo + Vl)
			for (int j = 0; j < H; j++)
				t->gs[(size_t)(tok[i] - lo) * H + j] += t->dh[(size_t)i * H + j];
	gadd(t, t->embed, t->gs);
}

/* The last stage's head: final norm, lm_head, cross-entropy over the
 * vocabulary slices (max, sum, target); the loss summed into t->lraw,
 * the logits replaced by the loss's gradient (seed_mul / norm). */
static void head_f(struct train *t, const int64_t *lab, double seed_mul, double norm)
{
	int T = t->T, H = t->H, Vl = t->Vl;
	int64_t lo = (int64_t)t->tp_rank * Vl;
	float *mx = t->b[0], *se = t->b[1], *tl = t->b[2];
	norm_f(t->hfin, W(t, t->final_norm, 1), t->xf, t->rsf, T, H, t->r->c.rms_eps);
	lin_f(t, t->lm_head, NULL, t->xf, t->logits, T);
	for (int i = 0; i < T; i++) {
		const float *row = t->logits + (size_t)i * Vl;
		float m = row[0];
		for (int j = 1; j < Vl; j++)
			if (row[j] > m)
				m = row[j];
		mx[i] = m;
	}
	if (t->tp > 1) {
		double q = MPI_Wtime();
		MPI_Allreduce(MPI_IN_PLACE, mx, T, MPI_FLOAT, MPI_MAX, t->r->tp_comm);
		rt_stat_add(t->r, RT_GROUP_TP, RT_OP_ALLREDUCE, (uint64_t)T * 4,
			    MPI_Wtime() - q);
	}
	for (int i = 0; i < T; i++) {
		const float *row = t->logits + (size_t)i * Vl;
		double s = 0;
		for (int j = 0; j < Vl; j++)
			s += exp((double)row[j] - mx[i]);
		se[i] = (float)s;
		tl[i] = lab[i] >= lo && lab[i] < lo + Vl ? row[lab[i] - lo] : 0.0f;
	}
	tp_sum(t, se, T);
	tp_sum(t, tl, T);
	for (int i = 0; i < T; i++) {
		float *row = t->logits + (size_t)i * Vl;
		if (lab[i] == IGNORE_LABEL) {
			memset(row, 0, (size_t)Vl * 4);
			continue;
		}
		t->lraw += log((double)se[i]) + mx[i] - tl[i];
		for (int j = 0; j < Vl; j++) {
			double p = exp((double)row[j] - mx[i]) / se[i];
			if (lab[i] - lo == j)
				p -= 1.0;
			row[j] = (float)(p * seed_mul / norm);
		}
	}
}

/* The head's backward: the final norm's input gradient into t->dh. */
static void head_b(struct train *t)
{
	int T = t->T, H = t->H;
	memset(t->dh, 0, (size_t)T * H * 4);
	memset(t->dxn, 0, (size_t)T * H * 4);
	lin_b(t, t->lm_head, NULL, t->xf, t->logits, t->dxn, T);
	tp_sum_dx(t, t->dxn, (int64_t)T * H);
	norm_b(t, t->final_norm, t->hfin, t->rsf, t->dxn, t->dh, 0, T, H);
	if (t->agree) {
		tp_agree(t, t->final_norm->off, t->final_norm->off + 1);
		dp_ready(t, t->final_norm->off + t->final_norm->numel, 0);
	}
}

/* Micro-batch m's forward on this stage: its input embedded (first
 * stage) or received from the previous stage, this stage's layers, then
 * the head and loss (last stage) or the output sent on (MPI_Isend: the
 * stage goes on while it travels). */
static void fwd_micro(struct train *t, int m, const int64_t *tok, const int64_t *lab,
		      double seed_mul, double norm)
{
	int T = t->T, H = t->H, k = m % t->nslots;
	double q0 = now_s(), w0 = t->t_wait;
	float *h = layer_in(t, k, t->l0);
	if (t->first)
		embed_f(t, tok + (size_t)m * T, h);
	else
		pp_recv(t, h, (int64_t)T * H, t->pp_rank - 1, TAG_ACT);
	if (!t->last) /* the output buffer: its last send must be done */
		pp_wait(t, &t->rq_act[k]);
	for (int l = t->l0; l < t->l1; l++)
		layer_f(t, &t->L[l], layer_ws(t, k, l), layer_in(t, k, l), layer_out(t, k, l));
	if (t->last)
		head_f(t, lab + (size_t)m * T, seed_mul, norm);
	else
		MPI_Isend(t->sact[k], T * H, MPI_FLOAT, t->pp_rank + 1, TAG_ACT, t->pp_comm,
			  &t->rq_act[k]);
	t->t_f += now_s() - q0 - (t->t_wait - w0);
	sched_note(t, 'F', m);
}

/* Micro-batch m's backward on this stage: the loss's gradient through the
 * head (last stage) or the output's gradient received from the next
 * stage, this stage's layers in reverse, then the embedding's gradient
 * (first stage) or the input's gradient sent back.  The last micro-batch
 * agrees the replicated gradients over TP and all-reduces the buckets
 * over DP as it goes (the gradients are final only then), and sums a tied
 * embedding's gradient over its two stages. */
static void bwd_micro(struct train *t, int m, const int64_t *tok)
{
	int T = t->T, H = t->H, k = m % t->nslots;
	double q0 = now_s(), w0 = t->t_wait;
	t->agree = m == t->M - 1;
	if (t->last) {
		head_b(t);
	} else {
		pp_recv(t, t->dh, (int64_t)T * H, t->pp_rank + 1, TAG_GRAD);
		if (t->cfg.inject == INJECT_NO_PP_GRAD) /* the fault: dropped */
			memset(t->dh, 0, (size_t)T * H * 4);
	}
	for (int l = t->l1 - 1; l >= t->l0; l--) {
		struct tws *w = layer_ws(t, k, l);
		if (t->cfg.recompute) { /* rebuild the layer from its input */
			float *keep = malloc((size_t)T * H * 4);
			memcpy(keep, t->dh, (size_t)T * H * 4);
			layer_f(t, &t->L[l], w, layer_in(t, k, l), t->dh2);
			memcpy(t->dh, keep, (size_t)T * H * 4);
			free(keep);
		}
		layer_b(t, &t->L[l], w, t->dh);
		if (t->agree)
			dp_ready(t, t->L[l].p_hi, 0);
	}
	if (t->first) {
		embed_b(t, tok + (size_t)m * T);
	} else {
		pp_wait(t, &t->rq_grad[k]);
		memcpy(t->sgrad[k], t->dh, (size_t)T * H * 4);
		MPI_Isend(t->sgrad[k], T * H, MPI_FLOAT, t->pp_rank - 1, TAG_GRAD,
			  t->pp_comm, &t->rq_grad[k]);
	}
	if (t->agree) {
		dp_ready(t, t->N, 1);
		if (t->emb_comm != MPI_COMM_NULL) {
			/* the tied embedding: the first stage's gradient (input)
			 * plus the last's (head), the same sum on both */
			double e0 = now_s();
			if (t->cfg.dtype == DT_F32)
				MPI_Allreduce(MPI_IN_PLACE, (float *)t->grad + t->embed->off,
					      (int)t->embed->numel, MPI_FLOAT, MPI_SUM,
					      t->emb_comm);
			else
				MPI_Allreduce(MPI_IN_PLACE, (uint16_t *)t->grad + t->embed->off,
					      (int)t->embed->numel, MPI_UINT16_T, t->op16,
					      t->emb_comm);
			pp_waited(t, e0, (uint64_t)t->embed->numel * t->wsz);
		}
	}
	t->t_b += now_s() - q0 - (t->t_wait - w0);
	sched_note(t, 'B', m);
}

/*
 * Forward (and backward unless loss_only) of this rank's B sequences as M
 * micro-batches of B / M.  At PP 1 they run one after the other (gradient
 * accumulation).  Under PP the schedule is 1F1B (PipeDream-flush, as
 * Megatron-LM's non-interleaved one): stage s runs min(pp - 1 - s, M)
 * forwards (warm-up), then one forward and one backward in turn (steady
 * state), then the remaining backwards (cool-down); so at most pp - s
 * micro-batches' activations are kept.  loss is global, on every rank.
 */
static int pass(struct train *t, const int64_t *tok, const int64_t *lab, int B,
		int S, int64_t nvalid, double seed_mul, int loss_only,
		double *loss, struct train_stats *st, struct d0_err *err)
{
	int M = t->M, P = t->pp, warm, T;
	double t0 = now_s(), c0 = comm_time(t), norm, lsum, span, mine;
	if (B % M)
		return d0_errf(err, "a batch of %d sequences a rank does not split "
			       "into %d micro-batches", B, M);
	if (alloc_acts(t, B / M, S, err) < 0)
		return -1;
	T = t->T;
	norm = t->cfg.inject == INJECT_WRONG_SCALE ? (double)T * M * t->dp : (double)nvalid;
	t->lraw = 0;
	t->t_f = t->t_b = t->t_wait = 0;
	t->sched_n = 0;
	if (t->sched)
		t->sched[0] = 0;
	t->bstart = 0;
	t->nreq = 0;
	t->t_dp_exposed = 0;
	if (loss_only) {
		for (int m = 0; m < M; m++)
			fwd_micro(t, m, tok, lab, seed_mul, norm);
	} else {
		warm = P - 1 - t->pp_rank < M ? P - 1 - t->pp_rank : M;
		for (int m = 0; m < warm; m++)
			fwd_micro(t, m, tok, lab, seed_mul, norm);
		for (int m = warm; m < M; m++) {
			fwd_micro(t, m, tok, lab, seed_mul, norm);
			bwd_micro(t, m - warm, tok);
		}
		for (int m = M - warm; m < M; m++)
			bwd_micro(t, m, tok);
	}
	/* every send done: the buffers are reused by the next pass */
	for (int k = 0; k < t->nslots; k++) {
		pp_wait(t, &t->rq_act[k]);
		pp_wait(t, &t->rq_grad[k]);
	}
	/* the loss: the last stage's, summed over DP, to every stage */
	lsum = t->last ? t->lraw / (double)nvalid : 0.0;
	if (t->last && t->dp > 1)
		MPI_Allreduce(MPI_IN_PLACE, &lsum, 1, MPI_DOUBLE, MPI_SUM, t->dp_comm);
	if (P > 1) {
		double q0 = now_s();
		MPI_Bcast(&lsum, 1, MPI_DOUBLE, P - 1, t->pp_comm);
		pp_waited(t, q0, 8);
	}
	*loss = lsum;
	/* the bubble: this stage's share of the span not computing */
	span = now_s() - t0;
	mine = span > 0 ? 1.0 - (t->t_f + t->t_b) / span : 0.0;
	if (mine < 0)
		mine = 0;
	t->bubble[t->pp_rank] = mine;
	if (P > 1)
		MPI_Gather(&mine, 1, MPI_DOUBLE, t->bubble, 1, MPI_DOUBLE, 0, t->pp_comm);
	if (st) {
		double sum = 0;
		st->t_fwd = t->t_f;
		st->t_bwd = t->t_b;
		st->tokens = (int64_t)T * M * t->dp;
		st->t_comm = comm_time(t) - c0 + t->t_dp_exposed;
		st->t_dp = t->t_dp_exposed;
		st->pp = P;
		st->micro = M;
		for (int s = 0; s < P && s < 64; s++) {
			st->bubble_stage[s] = t->pp_rank == 0 || s == t->pp_rank ? t->bubble[s] : 0;
			sum += st->bubble_stage[s];
		}
		st->bubble = t->pp_rank == 0 ? sum / P : mine;
		st->bubble_theory = (double)(P - 1) / (M + P - 1);
	}
	return 0;
}

void train_zero_grad(struct train *t)
{
	memset(t->grad, 0, (size_t)t->N * t->wsz);
}

int train_grads(struct train *t, const int64_t *tok, const int64_t *lab, int B,
		int S, int64_t nvalid, double *loss, struct train_stats *st,
		struct d0_err *err)
{
	return pass(t, tok, lab, B, S, nvalid, t->scale, 0, loss, st, err);
}

int train_loss(struct train *t, const int64_t *tok, const int64_t *lab, int B,
	       int S, int64_t nvalid, double *loss, struct d0_err *err)
{
	return pass(t, tok, lab, B, S, nvalid, 1.0, 1, loss, NULL, err);
}

/* Is element i counted in the global norm on this rank?  Each value once:
 * replicated over TP on TP rank 0, the same over DP on its shard's owner. */
static int counts(const struct train *t, const struct tparam *p, int64_t i)
{
	int64_t at = p->off + i;
	/* held here, and on its own stage (a tied embedding on the first) */
	if (!p->here || p->stage != t->pp_rank)
		return 0;
	if (p->repl && t->tp_rank != 0)
		return 0;
	/* an expert on its owner, everything else (the same over EP) once */
	if (p->expert >= 0 ? owner(t, p->expert) != t->ep_rank : t->ep_rank != 0)
		return 0;
	if (t->cfg.zero1)
		return at >= t->z0 && at < t->z0 + t->zn;
	return t->dp_rank == 0;
}

int train_step(struct train *t, const int64_t *tok, const int64_t *lab, int B,
	       int S, int64_t nvalid, int force_overflow, struct train_stats *st,
	       struct d0_err *err)
{
	double loss, t0, ss = 0, inv, coef, b1, b2, c0;
	int bad = 0;
	const struct train_cfg *c = &t->cfg;
	memset(st, 0, sizeof *st);
	train_zero_grad(t);
	if (pass(t, tok, lab, B, S, nvalid,
		 t->scale * (force_overflow && c->dtype == DT_F16 ? 16777216.0 : 1.0),
		 0, &loss, st, err) < 0)
		return -1;
	if (force_overflow && c->dtype != DT_F16) /* as an overflow would */
		wset(t, t->grad, 0, INFINITY);
	t0 = now_s();
	c0 = comm_time(t);
	st->loss = loss;
	st->scale = t->scale;
	st->lr = c->lr;
	for (int64_t i = 0; i < t->N && !bad; i++)
		bad |= !isfinite(wget(t, t->grad, i));
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (bad) { /* skip the step, halve the scale */
		st->skipped = 1;
		st->grad_norm = INFINITY;
		if (c->dtype == DT_F16)
			t->scale /= 2;
		t->good = 0;
		st->t_opt = now_s() - t0;
		return 0;
	}
	inv = 1.0 / t->scale;
	for (int i = 0; i < t->np; i++) {
		const struct tparam *p = &t->P[i];
		for (int64_t j = 0; j < p->numel; j++)
			if (counts(t, p, j)) {
				double g = wget(t, t->grad, p->off + j) * inv;
				ss += g * g;
			}
	}
	MPI_Allreduce(MPI_IN_PLACE, &ss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	st->grad_norm = sqrt(ss);
	coef = c->clip > 0 && st->grad_norm > c->clip ? c->clip / (st->grad_norm + 1e-6) : 1.0;
	t->step++;
	b1 = 1 - pow(c->beta1, (double)t->step);
	b2 = 1 - pow(c->beta2, (double)t->step);
	for (int i = 0; i < t->np; i++) {
		const struct tparam *p = &t->P[i];
		int64_t a = p->off > t->z0 ? p->off : t->z0;
		/* another stage's, or another EP rank's expert */
		if (!p->here)
			continue;
		int64_t e = p->off + p->numel < t->z0 + t->zn ? p->off + p->numel : t->z0 + t->zn;
		for (int64_t at = a; at < e; at++) {
			int64_t k = at - t->z0;
			float g = (float)(wget(t, t->grad, at) * inv * coef), w = t->master[k];
			t->mom[k] = (float)(c->beta1 * t->mom[k] + (1 - c->beta1) * g);
			t->vel[k] = (float)(c->beta2 * t->vel[k] + (1 - c->beta2) * (double)g * g);
			w -= (float)(c->lr * ((t->mom[k] / b1) / (sqrt(t->vel[k] / b2) + c->eps) +
					      (p->decay ? c->wd * w : 0.0)));
			t->master[k] = w;
			wset(t, t->work, at, w);
		}
	}
	if (c->zero1 && t->dp > 1) {
		int *cnt = malloc((size_t)t->dp * sizeof(int)), *dis = malloc((size_t)t->dp * sizeof(int));
		double q = MPI_Wtime();
		for (int d = 0; d < t->dp; d++) {
			cnt[d] = (int)((t->zs[d + 1] - t->zs[d]) * t->wsz);
			dis[d] = (int)(t->zs[d] * t->wsz);
		}
		MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, t->work, cnt, dis, MPI_BYTE,
			       t->dp_comm);
		st->t_comm += MPI_Wtime() - q;
		free(cnt);
		free(dis);
	}
	if (c->dtype == DT_F16 && ++t->good >= c->growth) {
		t->scale *= 2;
		t->good = 0;
	}
	st->t_comm += comm_time(t) - c0;
	st->t_opt = now_s() - t0;
	return 0;
}

/* The full gradient of p on its own stage: gathered over TP, summed over
 * EP (an expert's is on its owner, zero elsewhere). */
static int stage_grad(struct train *t, const struct tparam *p, float *full)
{
	float *mine = malloc((size_t)p->numel * 4 + 4), *all = NULL;
	for (int64_t j = 0; j < p->numel; j++)
		mine[j] = p->here ? (float)(wget(t, t->grad, p->off + j) / t->scale) : 0.0f;
	if (p->axis < 0 || t->tp == 1) {
		memcpy(full, mine, (size_t)p->numel * 4);
		free(mine);
		/* an expert's gradient is on its owner (zero elsewhere) */
		if (p->expert >= 0)
			ep_sum(t, full, p->numel);
		return 0;
	}
	all = malloc((size_t)p->numel * t->tp * 4);
	MPI_Allgather(mine, (int)p->numel, MPI_FLOAT, all, (int)p->numel, MPI_FLOAT,
		      t->tp_comm);
	if (p->axis == 0) {
		memcpy(full, all, (size_t)p->numel * t->tp * 4);
	} else {
		/* a row-parallel slice: each rank's columns of every row */
		for (int q = 0; q < t->tp; q++)
			for (int64_t r = 0; r < p->rows; r++)
				memcpy(full + r * p->fcols + q * p->cols,
				       all + (size_t)q * p->numel + r * p->cols,
				       (size_t)p->cols * 4);
	}
	free(mine);
	free(all);
	if (p->expert >= 0)
		ep_sum(t, full, p->numel * t->tp);
	return 0;
}

int train_param_grad(struct train *t, int i, float *full)
{
	const struct tparam *p = &t->P[i];
	int64_t n = p->frows * p->fcols;
	/* the stage's (dp 0, ep 0, tp 0) rank gives it to world rank 0 */
	int src = p->stage * t->ep * t->tp;
	if (t->pp_rank == p->stage)
		stage_grad(t, p, full);
	if (p->stage != 0) {
		if (t->rank == src)
			MPI_Send(full, (int)n, MPI_FLOAT, 0, TAG_CHECK, MPI_COMM_WORLD);
		else if (t->rank == 0)
			MPI_Recv(full, (int)n, MPI_FLOAT, src, TAG_CHECK, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
	}
	return 0;
}

char *train_schedule(struct train *t)
{
	int n = (int)t->sched_n + 1, *len = NULL, *dis = NULL, tot = 0;
	char *all = NULL, *out;
	if (t->pp_rank == 0) {
		len = calloc((size_t)t->pp, sizeof(int));
		dis = calloc((size_t)t->pp, sizeof(int));
	}
	MPI_Gather(&n, 1, MPI_INT, len, 1, MPI_INT, 0, t->pp_comm);
	if (t->pp_rank == 0) {
		for (int s = 0; s < t->pp; s++) {
			dis[s] = tot;
			tot += len[s];
		}
		all = malloc((size_t)tot + 1);
	}
	MPI_Gatherv(t->sched ? t->sched : "", n, MPI_CHAR, all, len, dis, MPI_CHAR, 0,
		    t->pp_comm);
	if (t->rank != 0) {
		out = strdup("");
	} else {
		size_t cap = (size_t)tot + 32 * (size_t)t->pp, at = 0;
		out = malloc(cap);
		out[0] = 0;
		for (int s = 0; s < t->pp; s++)
			at += (size_t)snprintf(out + at, cap - at, "%sstage %d: %s",
					       s ? "; " : "", s, all + dis[s]);
	}
	free(len);
	free(dis);
	free(all);
	return out;
}
