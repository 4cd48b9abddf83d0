/*
 * vision.c - the vision tower and its merger/projector forward in the
 * runtime, f32 (vision.h), and the prompt's image placeholders and M-RoPE
 * positions.
 *
 * Where it lives: the tower is replicated on pipeline stage 0 (layout.c
 * places GROUP_VISION/GROUP_PROJECTOR tensors there, unsplit), so every
 * tensor-parallel rank of stage 0 loads it whole through the runtime's
 * loader and accountant and computes the same features; no collective is
 * needed for it, and the features never cross a link.
 *
 * The math follows transformers' modeling_qwen2_vl.py /
 * modeling_qwen2_5_vl.py (patch_embed, rot_pos_emb, get_window_index, the
 * blocks, PatchMerger), modeling_clip.py / modeling_llava.py and Kimi-VL's
 * modeling_kimi_vl.py (MoonVitPretrainedModel, KimiVLMultiModalProjector);
 * every
 * product is an OpenBLAS sgemm (the Conv3d/Conv2d patch embedding is one
 * GEMM over the flattened patches, since kernel = stride), attention is
 * op_attention_segments over frames or windows.  The float64 reference it
 * is validated against (ref/ref_vision.c) is separate code.
 */
#include "vision.h"

#include "rt_impl.h"

#include <cblas.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct vis_block {
	float *n1w, *n1b, *n2w, *n2b;
	float *qkv, *qkv_b;		    /* Qwen: fused [3D][D] */
	float *q, *q_b, *k, *k_b, *v, *v_b; /* CLIP */
	float *proj, *proj_b;
	float *gate, *gate_b, *up, *up_b, *down, *down_b; /* SwiGLU (2.5) */
	float *fc1, *fc1_b, *fc2, *fc2_b;		  /* Qwen2-VL, CLIP */
};

struct vis {
	const struct model_config *c;
	int loaded;
	float *patch;			  /* [D][K] */
	float *cls, *pos, *pre_w, *pre_b; /* CLIP; Kimi: pos [H0*W0][D] */
	float *patch_b, *fin_w, *fin_b;	  /* Kimi: conv bias, final LN */
	struct vis_block *B;
	int nblocks; /* blocks computed: depth, or CLIP's up to the layer */
	float *ln_q, *ln_q_b, *m0, *m0_b, *m2, *m2_b; /* merger / projector */
	double inv[256];
	double gemm_s, gemm_flops;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------- loading */

struct loader {
	struct rt *r;
	struct tensor_spec *t;
	size_t n;
	int bad;
	char missing[200];
};

static float *get(struct loader *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static float *get(struct loader *l, const char *fmt, ...)
{
	char name[200];
	va_list ap;
	float *p;
	if (l->bad)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	p = rt_load_f32(l->r, l->t, l->n, name);
	if (!p) {
		l->bad = 1;
		snprintf(l->missing, sizeof l->missing, "%s", name);
	}
	return p;
}

static void load_qwen(struct vis *v, struct loader *l)
{
	const struct vision_config *vc = &v->c->vision;
	int q25 = vc->kind == VISION_QWEN2_5_VL;
	const char *p = "visual.blocks";
	v->patch = get(l, "visual.patch_embed.proj.weight");
	for (int i = 0; i < v->nblocks; i++) {
		struct vis_block *b = &v->B[i];
		b->n1w = get(l, "%s.%d.norm1.weight", p, i);
		b->n2w = get(l, "%s.%d.norm2.weight", p, i);
		if (!q25) {
			b->n1b = get(l, "%s.%d.norm1.bias", p, i);
			b->n2b = get(l, "%s.%d.norm2.bias", p, i);
		}
		b->qkv = get(l, "%s.%d.attn.qkv.weight", p, i);
		b->qkv_b = get(l, "%s.%d.attn.qkv.bias", p, i);
		b->proj = get(l, "%s.%d.attn.proj.weight", p, i);
		b->proj_b = get(l, "%s.%d.attn.proj.bias", p, i);
		if (q25) {
			b->gate = get(l, "%s.%d.mlp.gate_proj.weight", p, i);
			b->gate_b = get(l, "%s.%d.mlp.gate_proj.bias", p, i);
			b->up = get(l, "%s.%d.mlp.up_proj.weight", p, i);
			b->up_b = get(l, "%s.%d.mlp.up_proj.bias", p, i);
			b->down = get(l, "%s.%d.mlp.down_proj.weight", p, i);
			b->down_b = get(l, "%s.%d.mlp.down_proj.bias", p, i);
		} else {
			b->fc1 = get(l, "%s.%d.mlp.fc1.weight", p, i);
			b->fc1_b = get(l, "%s.%d.mlp.fc1.bias", p, i);
			b->fc2 = get(l, "%s.%d.mlp.fc2.weight", p, i);
			b->fc2_b = get(l, "%s.%d.mlp.fc2.bias", p, i);
		}
	}
	v->ln_q = get(l, "visual.merger.ln_q.weight");
	if (!q25)
		v->ln_q_b = get(l, "visual.merger.ln_q.bias");
	v->m0 = get(l, "visual.merger.mlp.0.weight");
	v->m0_b = get(l, "visual.merger.mlp.0.bias");
	v->m2 = get(l, "visual.merger.mlp.2.weight");
	v->m2_b = get(l, "visual.merger.mlp.2.bias");
}

static void load_clip(struct vis *v, struct loader *l)
{
	const char *m = "vision_tower.vision_model", *e = "encoder.layers";
	v->cls = get(l, "%s.embeddings.class_embedding", m);
	v->patch = get(l, "%s.embeddings.patch_embedding.weight", m);
	v->pos = get(l, "%s.embeddings.position_embedding.weight", m);
	v->pre_w = get(l, "%s.pre_layrnorm.weight", m);
	v->pre_b = get(l, "%s.pre_layrnorm.bias", m);
	for (int i = 0; i < v->nblocks; i++) {
		struct vis_block *b = &v->B[i];
#define G(f, name) b->f = get(l, "%s.%s.%d." name, m, e, i)
		G(n1w, "layer_norm1.weight");
		G(n1b, "layer_norm1.bias");
		G(n2w, "layer_norm2.weight");
		G(n2b, "layer_norm2.bias");
		G(q, "self_attn.q_proj.weight");
		G(q_b, "self_attn.q_proj.bias");
		G(k, "self_attn.k_proj.weight");
		G(k_b, "self_attn.k_proj.bias");
		G(v, "self_attn.v_proj.weight");
		G(v_b, "self_attn.v_proj.bias");
		G(proj, "self_attn.out_proj.weight");
		G(proj_b, "self_attn.out_proj.bias");
		G(fc1, "mlp.fc1.weight");
		G(fc1_b, "mlp.fc1.bias");
		G(fc2, "mlp.fc2.weight");
		G(fc2_b, "mlp.fc2.bias");
#undef G
	}
	v->m0 = get(l, "multi_modal_projector.linear_1.weight");
	v->m0_b = get(l, "multi_modal_projector.linear_1.bias");
	v->m2 = get(l, "multi_modal_projector.linear_2.weight");
	v->m2_b = get(l, "multi_modal_projector.linear_2.bias");
}

static void load_kimi(struct vis *v, struct loader *l)
{
	const char *e = "vision_tower.encoder.blocks";
	v->patch = get(l, "vision_tower.patch_embed.proj.weight");
	v->patch_b = get(l, "vision_tower.patch_embed.proj.bias");
	v->pos = get(l, "vision_tower.patch_embed.pos_emb.weight");
	for (int i = 0; i < v->nblocks; i++) {
		struct vis_block *b = &v->B[i];
#define G(f, name) b->f = get(l, "%s.%d." name, e, i)
		G(n1w, "norm0.weight");
		G(n1b, "norm0.bias");
		G(n2w, "norm1.weight");
		G(n2b, "norm1.bias");
		G(qkv, "wqkv.weight");
		G(qkv_b, "wqkv.bias");
		G(proj, "wo.weight");
		G(proj_b, "wo.bias");
		G(fc1, "mlp.fc0.weight");
		G(fc1_b, "mlp.fc0.bias");
		G(fc2, "mlp.fc1.weight");
		G(fc2_b, "mlp.fc1.bias");
#undef G
	}
	v->fin_w = get(l, "vision_tower.encoder.final_layernorm.weight");
	v->fin_b = get(l, "vision_tower.encoder.final_layernorm.bias");
	v->ln_q = get(l, "multi_modal_projector.pre_norm.weight");
	v->ln_q_b = get(l, "multi_modal_projector.pre_norm.bias");
	v->m0 = get(l, "multi_modal_projector.linear_1.weight");
	v->m0_b = get(l, "multi_modal_projector.linear_1.bias");
	v->m2 = get(l, "multi_modal_projector.linear_2.weight");
	v->m2_b = get(l, "multi_modal_projector.linear_2.bias");
}

/* CLIP: hidden state index LLaVA reads (0 = the embeddings) */
static int64_t clip_layer(const struct vision_config *vc)
{
	int64_t states = vc->depth + 1;
	return vc->feature_layer < 0 ? states + vc->feature_layer
				     : vc->feature_layer;
}

int vis_open(struct vis **out, struct rt *r, struct d0_err *err)
{
	const struct model_config *c = &r->c;
	const struct vision_config *vc = &c->vision;
	struct vis *v;
	struct loader l = {.r = r};
	int64_t hd;
	*out = NULL;
	if (vc->kind == VISION_NONE)
		return d0_errf(err,
			       "%s: a text model (no vision_config): it "
			       "takes no images",
			       r->dir);
	if (vc->kind == VISION_UNSUPPORTED)
		return d0_errf(err, "%s: %s", r->dir, vc->missing);
	hd = vc->heads > 0 ? vc->hidden / vc->heads : 0;
	if (hd < 4 || hd > 1024 || hd * vc->heads != vc->hidden ||
	    !op_act_known(vc->act) ||
	    (vc->kind == VISION_CLIP && !op_act_known(vc->projector_act)))
		return d0_errf(
		    err,
		    "%s: vision tower with head dim %lld, "
		    "hidden_act '%s': not implemented by the runtime",
		    r->dir, (long long)hd, vc->act);
	if (c->vision.mrope && c->vision.mrope_interleaved)
		return d0_errf(err,
			       "%s: interleaved M-RoPE (Qwen3-VL) is not "
			       "implemented by the runtime",
			       r->dir);
	v = calloc(1, sizeof *v);
	v->c = c;
	v->nblocks = (int)vc->depth;
	if (vc->kind == VISION_CLIP) {
		int64_t sel = clip_layer(vc);
		if (sel < 0 || sel > vc->depth) {
			free(v);
			return d0_errf(err,
				       "%s: vision_feature_layer %lld outside "
				       "the tower's %lld hidden states",
				       r->dir, (long long)vc->feature_layer,
				       (long long)(vc->depth + 1));
		}
		v->nblocks = (int)sel; /* later layers are never read */
	}
	/* VisionRotaryEmbedding(head_dim / 2, theta 10000); MoonViT's
	 * Rope2DPosEmb(head_dim): theta^(-4j / head_dim), the same numbers */
	for (int64_t j = 0; j < hd / 4; j++)
		v->inv[j] =
		    1.0 / pow(10000.0, (double)(2 * j) / (double)(hd / 2));
	if (r->pp_rank != 0) { /* the tower lives on stage 0 only */
		*out = v;
		return 0;
	}
	if (model_tensors(c, &l.t, &l.n, err) < 0) {
		free(v);
		return -1;
	}
	v->B = calloc((size_t)(v->nblocks ? v->nblocks : 1), sizeof *v->B);
	if (vc->kind == VISION_CLIP)
		load_clip(v, &l);
	else if (vc->kind == VISION_KIMI)
		load_kimi(v, &l);
	else
		load_qwen(v, &l);
	free(l.t);
	if (l.bad) {
		d0_errf(err, "%s: vision tower: %s", r->dir,
			r->over[0]
			    ? r->over
			    : "a tensor is missing from the rank's slice");
		(void)l.missing;
		vis_close(v);
		return -1;
	}
	v->loaded = 1;
	*out = v;
	return 0;
}

void vis_close(struct vis *v)
{
	/* the weights came from rt_alloc (posix_memalign): ours to free */
	if (!v)
		return;
	for (int i = 0; v->B && i < v->nblocks; i++) {
		struct vis_block *b = &v->B[i];
		float *w[] = {
		    b->n1w,  b->n1b,	b->n2w,	 b->n2b,    b->qkv, b->qkv_b,
		    b->q,    b->q_b,	b->k,	 b->k_b,    b->v,   b->v_b,
		    b->proj, b->proj_b, b->gate, b->gate_b, b->up,  b->up_b,
		    b->down, b->down_b, b->fc1,	 b->fc1_b,  b->fc2, b->fc2_b};
		for (size_t j = 0; j < sizeof w / sizeof *w; j++)
			free(w[j]);
	}
	{
		float *w[] = {v->patch, v->cls,	 v->pos,    v->pre_w,
			      v->pre_b, v->ln_q, v->ln_q_b, v->m0,
			      v->m0_b,	v->m2,	 v->m2_b,   v->patch_b,
			      v->fin_w, v->fin_b};
		for (size_t j = 0; j < sizeof w / sizeof *w; j++)
			free(w[j]);
	}
	free(v->B);
	free(v);
}

int vis_loaded(const struct vis *v)
{
	return v && v->loaded;
}

void vis_patch_gemm_stats(const struct vis *v, double *seconds, double *flops)
{
	*seconds = v->gemm_s;
	*flops = v->gemm_flops;
}

int64_t vis_image_tokens(const struct model_config *c,
			 const struct image_pixels *px, struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	if (v->kind == VISION_QWEN2_VL || v->kind == VISION_QWEN2_5_VL) {
		int64_t K =
		    v->in_chans * v->temporal_patch * v->patch * v->patch;
		if (px->kind != IMAGE_PROC_QWEN2VL || px->cols != K ||
		    px->grid_t < 1 || px->grid_h % v->merge ||
		    px->grid_w % v->merge ||
		    px->rows != (int64_t)px->grid_t * px->grid_h * px->grid_w) {
			d0_errf(
			    err,
			    "image.features: pixels of %lld x %lld (grid "
			    "%d x %d x %d) do not fit the tower (patches of "
			    "%lld values, merge %lld)",
			    (long long)px->rows, (long long)px->cols,
			    px->grid_t, px->grid_h, px->grid_w, (long long)K,
			    (long long)v->merge);
			return -1;
		}
		return px->rows / (v->merge * v->merge);
	}
	if (v->kind == VISION_KIMI) {
		int64_t K = v->in_chans * v->patch * v->patch;
		if (px->kind != IMAGE_PROC_KIMI || px->cols != K ||
		    px->grid_t != 1 || px->grid_h < 1 || px->grid_w < 1 ||
		    px->grid_h % v->merge || px->grid_w % v->merge ||
		    px->grid_h >= 512 || px->grid_w >= 512 ||
		    px->rows != (int64_t)px->grid_h * px->grid_w) {
			d0_errf(err,
				"image.features: pixels of %lld x %lld (grid "
				"%d x %d) do not fit the tower (patches of "
				"%lld values, merge %lld, under 512 a side)",
				(long long)px->rows, (long long)px->cols,
				px->grid_h, px->grid_w, (long long)K,
				(long long)v->merge);
			return -1;
		}
		return px->rows / (v->merge * v->merge);
	}
	if (v->kind == VISION_CLIP) {
		int64_t G = v->image_size / v->patch;
		if (px->kind != IMAGE_PROC_CLIP || px->rows != v->in_chans ||
		    px->height != v->image_size || px->width != v->image_size ||
		    px->cols != v->image_size * v->image_size) {
			d0_errf(err,
				"image.features: pixel_values of %d x %d x "
				"%d; the tower takes %lld x %lld x %lld "
				"(image_size)",
				(int)px->rows, px->height, px->width,
				(long long)v->in_chans,
				(long long)v->image_size,
				(long long)v->image_size);
			return -1;
		}
		return G * G + (strcmp(v->select_strategy, "full") == 0);
	}
	d0_errf(err, "a model without a vision tower takes no images");
	return -1;
}

/* ------------------------------------------------------------- forward */

/* y [m][ldy] = x [m][k] . w[n][k]^T + b */
static void linear(float *y, int64_t ldy, const float *x, const float *w,
		   const float *b, int64_t m, int64_t n, int64_t k)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n,
		    (int)k, 1.0f, x, (int)k, w, (int)k, 0.0f, y, (int)ldy);
	if (b)
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++)
				y[i * ldy + j] += b[j];
}

static void norm_rows(const struct vis *v, float *y, const float *x,
		      const float *w, const float *b, int64_t rows, int64_t d)
{
	int rms = v->c->vision.kind == VISION_QWEN2_5_VL;
	for (int64_t r = 0; r < rows; r++) {
		if (rms)
			op_rms_norm(y + r * d, x + r * d, w, (int)d,
				    v->c->vision.norm_eps);
		else
			op_layer_norm(y + r * d, x + r * d, w, b, (int)d,
				      v->c->vision.norm_eps);
	}
}

static void patch_gemm(struct vis *v, float *y, const float *x, int64_t m,
		       int64_t n, int64_t k)
{
	double t0 = now();
	linear(y, n, x, v->patch, NULL, m, n, k);
	v->gemm_s += now() - t0;
	v->gemm_flops += 2.0 * (double)m * (double)n * (double)k;
}

/* The MLP of a block on y [N][D], written back into y (f1, f2 [N][F]). */
static void block_mlp(const struct vis *v, const struct vis_block *b, float *y,
		      int64_t N, float *f1, float *f2)
{
	const struct vision_config *vc = &v->c->vision;
	int64_t D = vc->hidden, F = vc->ffn;
	if (b->gate) {
		linear(f1, F, y, b->gate, b->gate_b, N, F, D);
		linear(f2, F, y, b->up, b->up_b, N, F, D);
		op_act(vc->act, f1, N * F);
		for (int64_t i = 0; i < N * F; i++)
			f1[i] *= f2[i];
		linear(y, D, f1, b->down, b->down_b, N, D, F);
	} else {
		linear(f1, F, y, b->fc1, b->fc1_b, N, F, D);
		op_act(vc->act, f1, N * F);
		linear(y, D, f1, b->fc2, b->fc2_b, N, D, F);
	}
}

/*
 * The rest of a pre-LN tower block once q, k, v are in qkv (rows of 3D,
 * rotary applied where the family has one): attention over the segments
 * [bounds[i], bounds[i+1]), the output projection and the residual, the
 * second norm, the MLP and its residual.  Every tower runs this tail.
 */
static void block_rest(const struct vis *v, const struct vis_block *b,
		       float *x, float *y, float *at, const float *qkv,
		       int64_t N, const int64_t *bounds, int nb, float *sc,
		       float *f1, float *f2)
{
	const struct vision_config *vc = &v->c->vision;
	int64_t D = vc->hidden, H = vc->heads, hd = D / H;
	op_attention_segments(at, D, qkv, qkv + D, qkv + 2 * D, 3 * D, (int)H,
			      (int)hd, bounds, nb, sc);
	linear(y, D, at, b->proj, b->proj_b, N, D, D);
	for (int64_t i = 0; i < N * D; i++)
		x[i] += y[i];
	norm_rows(v, y, x, b->n2w, b->n2b, N, D);
	block_mlp(v, b, y, N, f1, f2);
	for (int64_t i = 0; i < N * D; i++)
		x[i] += y[i];
}

/*
 * Qwen2.5-VL's get_window_index for one image: merged units (t, uh, uw)
 * into windows of vws x vws units (the grid padded to whole windows, empty
 * windows dropped); order[u] the unit at window position u, bounds in
 * patches.  Returns the bound count.
 */
static int window_order(int64_t gt, int64_t uh, int64_t uw, int64_t vws,
			int64_t mu, int64_t *order, int64_t *bounds)
{
	int64_t nwh = (uh + vws - uh % vws) / vws,
		nww = (uw + vws - uw % vws) / vws;
	int64_t u = 0;
	int nb = 1;
	bounds[0] = 0;
	for (int64_t t = 0; t < gt; t++)
		for (int64_t wy = 0; wy < nwh; wy++)
			for (int64_t wx = 0; wx < nww; wx++) {
				int64_t cnt = 0;
				for (int64_t y = wy * vws;
				     y < (wy + 1) * vws && y < uh; y++)
					for (int64_t x = wx * vws;
					     x < (wx + 1) * vws && x < uw;
					     x++, cnt++)
						order[u++] =
						    (t * uh + y) * uw + x;
				if (cnt) {
					bounds[nb] = bounds[nb - 1] + cnt * mu;
					nb++;
				}
			}
	return nb;
}

static int qwen_encode(struct vis *v, const struct image_pixels *px, float *out,
		       vis_trace_fn trace, void *ctx, struct d0_err *err)
{
	const struct vision_config *vc = &v->c->vision;
	int q25 = vc->kind == VISION_QWEN2_5_VL;
	int64_t D = vc->hidden, F = vc->ffn, H = vc->heads, hd = D / H;
	int64_t mg = vc->merge, mu = mg * mg, O = vc->out_hidden, K = px->cols;
	int64_t gt = px->grid_t, gh = px->grid_h, gw = px->grid_w;
	int64_t N = px->rows, U = N / mu, uh = gh / mg, uw = gw / mg;
	int64_t *order = malloc((size_t)U * sizeof *order);
	int64_t *wb = malloc((size_t)(U + 2) * sizeof *wb);
	int64_t *fb = malloc((size_t)(gt + 1) * sizeof *fb);
	int64_t *prow = malloc((size_t)N * 2 * sizeof *prow);
	int64_t maxseg = gh * gw;
	int nwin = 0;
	float *x = malloc((size_t)(N * D) * 4),
	      *y = malloc((size_t)(N * D) * 4);
	float *qkv = malloc((size_t)(N * 3 * D) * 4),
	      *at = malloc((size_t)(N * D) * 4);
	float *f1 = malloc((size_t)(N * F) * 4),
	      *f2 = malloc((size_t)(N * F) * 4);
	float *sc = malloc((size_t)(maxseg * maxseg) * 4);
	float *mo;
	(void)err;

	/* Conv3d with kernel = stride: the flattened patch times the kernel */
	patch_gemm(v, y, px->values, N, D, K);
	/* each patch's (row, column) in the processor's (t, row block, column
	 * block, row in block, column in block) order */
	for (int64_t r = 0, t = 0; t < gt; t++)
		for (int64_t by = 0; by < uh; by++)
			for (int64_t bx = 0; bx < uw; bx++)
				for (int64_t my = 0; my < mg; my++)
					for (int64_t mx = 0; mx < mg;
					     mx++, r++) {
						prow[2 * r] = by * mg + my;
						prow[2 * r + 1] = bx * mg + mx;
					}
	for (int64_t t = 0; t <= gt; t++)
		fb[t] = t * gh * gw;
	for (int64_t u = 0; u < U; u++)
		order[u] = u;
	if (q25) {
		int64_t *pr = malloc((size_t)N * 2 * sizeof *pr);
		nwin =
		    window_order(gt, uh, uw, vc->window_size / mg / vc->patch,
				 mu, order, wb);
		memcpy(pr, prow, (size_t)N * 2 * sizeof *pr);
		for (int64_t u = 0; u < U; u++) {
			memcpy(x + u * mu * D, y + order[u] * mu * D,
			       (size_t)(mu * D) * 4);
			memcpy(prow + u * mu * 2, pr + order[u] * mu * 2,
			       (size_t)mu * 2 * sizeof *pr);
		}
		free(pr);
	} else {
		memcpy(x, y, (size_t)(N * D) * 4);
	}
	if (trace)
		trace(ctx, -1, x, N, D);

	for (int l = 0; l < v->nblocks; l++) {
		const struct vis_block *b = &v->B[l];
		int full = !q25;
		for (int i = 0; q25 && i < vc->n_fullatt; i++)
			full |= vc->fullatt[i] == l;
		norm_rows(v, y, x, b->n1w, b->n1b, N, D);
		linear(qkv, 3 * D, y, b->qkv, b->qkv_b, N, 3 * D, D);
		for (int64_t r = 0; r < N; r++) {
			op_rope_2d(qkv + r * 3 * D, (int)H, (int)hd,
				   prow[2 * r], prow[2 * r + 1], v->inv);
			op_rope_2d(qkv + r * 3 * D + D, (int)H, (int)hd,
				   prow[2 * r], prow[2 * r + 1], v->inv);
		}
		block_rest(v, b, x, y, at, qkv, N, full ? fb : wb,
			   full ? (int)gt + 1 : nwin, sc, f1, f2);
		if (trace)
			trace(ctx, l, x, N, D);
	}

	/* PatchMerger: ln_q, merge^2 neighbours as one row, Linear-GELU-Linear
	 */
	norm_rows(v, y, x, v->ln_q, v->ln_q_b, N, D);
	free(f1);
	f1 = malloc((size_t)(U * mu * D) * 4);
	mo = malloc((size_t)(U * O) * 4);
	linear(f1, mu * D, y, v->m0, v->m0_b, U, mu * D, mu * D);
	op_act("gelu", f1, U * mu * D);
	linear(mo, O, f1, v->m2, v->m2_b, U, O, mu * D);
	/* back from window order: unit u came from order[u] */
	for (int64_t u = 0; u < U; u++)
		memcpy(out + order[u] * O, mo + u * O, (size_t)O * 4);
	free(mo);
	free(x), free(y), free(qkv), free(at), free(f1), free(f2), free(sc);
	free(order), free(wb), free(fb), free(prow);
	return 0;
}

static int clip_encode(struct vis *v, const struct image_pixels *px, float *out,
		       vis_trace_fn trace, void *ctx, struct d0_err *err)
{
	const struct vision_config *vc = &v->c->vision;
	int64_t D = vc->hidden, F = vc->ffn;
	int64_t S = vc->image_size, P = vc->patch, G = S / P, L = G * G + 1;
	int64_t C = vc->in_chans, O = vc->out_hidden, K = C * P * P;
	int drop = strcmp(vc->select_strategy, "full") != 0;
	int64_t T = L - drop, bounds[2] = {0, L};
	float *pv = malloc((size_t)(G * G * K) * 4);
	float *x = malloc((size_t)(L * D) * 4),
	      *y = malloc((size_t)(L * D) * 4);
	float *qkv = malloc((size_t)(L * 3 * D) * 4),
	      *at = malloc((size_t)(L * D) * 4);
	float *f1 = malloc((size_t)(L * F) * 4), *f2 = NULL;
	float *sc = malloc((size_t)(L * L) * 4),
	      *pr = malloc((size_t)(T * O) * 4);
	(void)err;
	/* Conv2d(kernel = stride = P): patches row-major, each (C, P, P) */
	for (int64_t gy = 0; gy < G; gy++)
		for (int64_t gx = 0; gx < G; gx++)
			for (int64_t c = 0; c < C; c++)
				for (int64_t py = 0; py < P; py++)
					memcpy(pv + (gy * G + gx) * K +
						   c * P * P + py * P,
					       px->values + c * S * S +
						   (gy * P + py) * S + gx * P,
					       (size_t)P * 4);
	patch_gemm(v, y + D, pv, G * G, D, K);
	memcpy(y, v->cls, (size_t)D * 4);
	for (int64_t i = 0; i < L * D; i++)
		y[i] += v->pos[i];
	for (int64_t r = 0; r < L; r++)
		op_layer_norm(x + r * D, y + r * D, v->pre_w, v->pre_b, (int)D,
			      vc->norm_eps);
	if (trace)
		trace(ctx, -1, x, L, D);
	for (int l = 0; l < v->nblocks; l++) {
		const struct vis_block *b = &v->B[l];
		norm_rows(v, y, x, b->n1w, b->n1b, L, D);
		linear(qkv, 3 * D, y, b->q, b->q_b, L, D, D);
		linear(qkv + D, 3 * D, y, b->k, b->k_b, L, D, D);
		linear(qkv + 2 * D, 3 * D, y, b->v, b->v_b, L, D, D);
		block_rest(v, b, x, y, at, qkv, L, bounds, 2, sc, f1, f2);
		if (trace)
			trace(ctx, l, x, L, D);
	}
	/* LlavaMultiModalProjector on the selected rows */
	linear(pr, O, x + drop * D, v->m0, v->m0_b, T, O, D);
	op_act(vc->projector_act, pr, T * O);
	linear(out, O, pr, v->m2, v->m2_b, T, O, O);
	free(pv), free(x), free(y), free(qkv), free(at), free(f1), free(sc);
	free(pr);
	return 0;
}

/*
 * MoonViT (modeling_kimi_vl.py's MoonVitPretrainedModel) and
 * KimiVLMultiModalProjector for one image: the Conv2d patch embedding (one
 * GEMM + bias), the learned positions interpolated to the grid, pre-LN
 * blocks with the interleaved 2D rotary and full attention over the image,
 * final_layernorm, then 2x2 neighbours into one row after pre_norm,
 * Linear-GELU-Linear.  Features in raster order of the merged grid.
 */
static int kimi_encode(struct vis *v, const struct image_pixels *px,
		       float *out, vis_trace_fn trace, void *ctx,
		       struct d0_err *err)
{
	const struct vision_config *vc = &v->c->vision;
	int64_t D = vc->hidden, F = vc->ffn, H = vc->heads, hd = D / H;
	int64_t mg = vc->merge, mu = mg * mg, O = vc->out_hidden;
	int64_t gh = px->grid_h, gw = px->grid_w, N = px->rows, U = N / mu;
	int64_t bounds[2] = {0, N};
	float *x = malloc((size_t)(N * D) * 4), *y = malloc((size_t)(N * D) * 4);
	float *qkv = malloc((size_t)(N * 3 * D) * 4),
	      *at = malloc((size_t)(N * D) * 4);
	float *f1 = malloc((size_t)(N * F) * 4), *sc = malloc((size_t)(N * N) * 4);
	float *mrg, *mo;
	(void)err;

	/* Conv2d(kernel = stride = P) with bias, then the positions */
	patch_gemm(v, x, px->values, N, D, px->cols);
	if (gh == vc->pos_h && gw == vc->pos_w) {
		memcpy(y, v->pos, (size_t)(N * D) * 4);
	} else {
		op_interp_bicubic(y, v->pos, (int)vc->pos_h, (int)vc->pos_w,
				  (int)D, (int)gh, (int)gw);
	}
	for (int64_t r = 0; r < N; r++)
		for (int64_t j = 0; j < D; j++)
			x[r * D + j] += v->patch_b[j] + y[r * D + j];
	if (trace)
		trace(ctx, -1, x, N, D);
	for (int l = 0; l < v->nblocks; l++) {
		const struct vis_block *b = &v->B[l];
		norm_rows(v, y, x, b->n1w, b->n1b, N, D);
		linear(qkv, 3 * D, y, b->qkv, b->qkv_b, N, 3 * D, D);
		for (int64_t r = 0; r < N; r++) {
			op_rope_2d_pairs(qkv + r * 3 * D, (int)H, (int)hd, r / gw,
					 r % gw, v->inv);
			op_rope_2d_pairs(qkv + r * 3 * D + D, (int)H, (int)hd,
					 r / gw, r % gw, v->inv);
		}
		block_rest(v, b, x, y, at, qkv, N, bounds, 2, sc, f1, NULL);
		if (trace)
			trace(ctx, l, x, N, D);
	}
	norm_rows(v, y, x, v->fin_w, v->fin_b, N, D);
	/* patch_merger: unit (uy, ux) takes patches (mg uy + i, mg ux + j) in
	 * (i, j) order; the projector's pre_norm is per patch */
	mrg = malloc((size_t)(N * D) * 4);
	for (int64_t uy = 0, u = 0; uy < gh / mg; uy++)
		for (int64_t ux = 0; ux < gw / mg; ux++, u++)
			for (int64_t i = 0; i < mg; i++)
				for (int64_t j = 0; j < mg; j++)
					op_layer_norm(
					    mrg + (u * mu + i * mg + j) * D,
					    y + ((uy * mg + i) * gw + ux * mg + j) * D,
					    v->ln_q, v->ln_q_b, (int)D,
					    vc->norm_eps);
	mo = malloc((size_t)(U * mu * D) * 4);
	linear(mo, mu * D, mrg, v->m0, v->m0_b, U, mu * D, mu * D);
	op_act(vc->projector_act, mo, U * mu * D);
	linear(out, O, mo, v->m2, v->m2_b, U, O, mu * D);
	free(mrg), free(mo);
	free(x), free(y), free(qkv), free(at), free(f1), free(sc);
	return 0;
}

int vis_encode_traced(struct vis *v, const struct image_pixels *px, float *out,
		      vis_trace_fn trace, void *ctx, struct d0_err *err)
{
	if (!v || !v->loaded)
		return d0_errf(err, "the vision tower is not on this rank (it "
				    "lives on pipeline stage 0)");
	if (vis_image_tokens(v->c, px, err) < 0)
		return -1;
	if (v->c->vision.kind == VISION_CLIP)
		return clip_encode(v, px, out, trace, ctx, err);
	if (v->c->vision.kind == VISION_KIMI)
		return kimi_encode(v, px, out, trace, ctx, err);
	return qwen_encode(v, px, out, trace, ctx, err);
}

int vis_encode(struct vis *v, const struct image_pixels *px, float *out,
	       struct d0_err *err)
{
	return vis_encode_traced(v, px, out, NULL, NULL, err);
}

/* ------------------------------------------------------------- prompts */

/* The runs of image_token_id in ids: starts and lengths (at most cap). */
static int image_runs(int64_t tok, const int64_t *ids, int64_t n,
		      int64_t *start, int64_t *len, int cap)
{
	int nr = 0;
	for (int64_t i = 0; i < n; i++) {
		if (ids[i] != tok || (i && ids[i - 1] == tok))
			continue;
		if (nr < cap) {
			int64_t j = i;
			while (j < n && ids[j] == tok)
				j++;
			start[nr] = i;
			len[nr] = j - i;
		}
		nr++;
	}
	return nr;
}

int vis_prompt_ids(const struct model_config *c, const int64_t *ids, int64_t n,
		   const int64_t *img_tokens, int n_img, int64_t **out,
		   int64_t *nout, struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	int64_t tok = v->image_token_id, total = 0, m = 0;
	int64_t *start = malloc((size_t)(n_img + 1) * sizeof *start);
	int64_t *len = malloc((size_t)(n_img + 1) * sizeof *len);
	int qwen = v->kind == VISION_QWEN2_VL || v->kind == VISION_QWEN2_5_VL;
	int nr, rc = 0;
	*out = NULL;
	*nout = 0;
	if (tok < 0) {
		free(start), free(len);
		return d0_errf(err, "image.features: the config names no image "
				    "placeholder token (image_token_id)");
	}
	for (int i = 0; i < n_img; i++)
		total += img_tokens[i];
	nr = image_runs(tok, ids, n, start, len, n_img + 1);
	if (nr == 0 && n_img > 0) {
		/* no placeholder: the images first, then the text */
		int64_t *o =
		    malloc((size_t)(n + total + 2 * n_img + 1) * sizeof *o);
		for (int i = 0; i < n_img; i++) {
			if (qwen && v->vision_start_id >= 0)
				o[m++] = v->vision_start_id;
			for (int64_t j = 0; j < img_tokens[i]; j++)
				o[m++] = tok;
			if (qwen && v->vision_end_id >= 0)
				o[m++] = v->vision_end_id;
		}
		memcpy(o + m, ids, (size_t)n * sizeof *o);
		*out = o;
		*nout = m + n;
		free(start), free(len);
		return 0;
	}
	if (nr != n_img) {
		free(start), free(len);
		return d0_errf(err,
			       "image.features: the prompt has %d image "
			       "placeholder run%s (token %lld) for %d image%s",
			       nr, nr == 1 ? "" : "s", (long long)tok, n_img,
			       n_img == 1 ? "" : "s");
	}
	for (int i = 0; i < n_img && rc == 0; i++)
		if (len[i] != 1 && len[i] != img_tokens[i])
			rc = d0_errf(err,
				     "image.features: image %d takes %lld "
				     "placeholder tokens (its pixels' merged "
				     "patches); the prompt has %lld",
				     i + 1, (long long)img_tokens[i],
				     (long long)len[i]);
	if (rc == 0) {
		int64_t *o = malloc((size_t)(n + total + 1) * sizeof *o);
		int64_t from = 0;
		for (int i = 0; i < n_img; i++) {
			memcpy(o + m, ids + from,
			       (size_t)(start[i] - from) * sizeof *o);
			m += start[i] - from;
			for (int64_t j = 0; j < img_tokens[i]; j++)
				o[m++] = tok;
			from = start[i] + len[i];
		}
		memcpy(o + m, ids + from, (size_t)(n - from) * sizeof *o);
		*out = o;
		*nout = m + n - from;
	}
	free(start), free(len);
	return rc;
}

int vis_rope_index(const struct model_config *c, const int64_t *ids, int64_t n,
		   const int64_t *grid_thw, int n_img, int64_t *pos,
		   int64_t *delta, struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	int64_t *start = malloc((size_t)(n_img + 1) * sizeof *start);
	int64_t *len = malloc((size_t)(n_img + 1) * sizeof *len);
	int64_t next = 0, done = 0;
	int nr, rc = 0;
	*delta = 0;
	if (!v->mrope) {
		for (int64_t i = 0; i < n; i++)
			pos[i] = pos[n + i] = pos[2 * n + i] = i;
		free(start), free(len);
		return 0;
	}
	nr = image_runs(v->image_token_id, ids, n, start, len, n_img + 1);
	if (nr != n_img)
		rc = d0_errf(err,
			     "image.features: the prompt has %d image "
			     "placeholder run%s for %d image%s",
			     nr, nr == 1 ? "" : "s", n_img,
			     n_img == 1 ? "" : "s");
	for (int i = 0; i < n_img && rc == 0; i++) {
		int64_t gt = grid_thw[3 * i],
			gh = grid_thw[3 * i + 1] / v->merge;
		int64_t gw = grid_thw[3 * i + 2] / v->merge, top = 0;
		if (len[i] != gt * gh * gw) {
			rc = d0_errf(
			    err,
			    "image.features: image %d takes %lld "
			    "placeholder tokens (grid %lld x %lld x %lld, "
			    "merge %lld); the prompt has %lld",
			    i + 1, (long long)(gt * gh * gw), (long long)gt,
			    (long long)grid_thw[3 * i + 1],
			    (long long)grid_thw[3 * i + 2], (long long)v->merge,
			    (long long)len[i]);
			break;
		}
		/* text before the image: consecutive on all three axes */
		for (int64_t j = done; j < start[i]; j++)
			pos[j] = pos[n + j] = pos[2 * n + j] = next++;
		/* the image: its merged grid's (t, h, w) from the same base; a
		 * still image's t is 0 in 2.5 (seconds per grid x 0) */
		for (int64_t t = 0; t < gt; t++)
			for (int64_t h = 0; h < gh; h++)
				for (int64_t w = 0; w < gw; w++) {
					int64_t j =
					    start[i] + (t * gh + h) * gw + w;
					int64_t tp =
					    v->kind == VISION_QWEN2_5_VL ? 0
									 : t;
					pos[j] = next + tp;
					pos[n + j] = next + h;
					pos[2 * n + j] = next + w;
					if (pos[j] > top)
						top = pos[j];
					if (pos[n + j] > top)
						top = pos[n + j];
					if (pos[2 * n + j] > top)
						top = pos[2 * n + j];
				}
		next = top + 1;
		done = start[i] + len[i];
	}
	if (rc == 0) {
		for (int64_t j = done; j < n; j++)
			pos[j] = pos[n + j] = pos[2 * n + j] = next++;
		*delta = next - n;
	}
	free(start), free(len);
	return rc;
}

/* ------------------------------------------------------ a whole prompt */

void vis_prompt_free(struct vis_prompt *p)
{
	for (int i = 0; p->px && i < p->n_img; i++)
		image_pixels_free(&p->px[i]);
	free(p->px);
	free(p->img_tokens);
	free(p->grid_thw);
	free(p->ids);
	free(p->rope_pos);
	memset(p, 0, sizeof *p);
}

int vis_prompt_prepare(const struct model_config *c, const char *dir,
		       const char *preproc, char *const *images, int n_img,
		       const int64_t *ids, int64_t n, struct vis_prompt *out,
		       struct d0_err *err)
{
	struct image_prep_config pc;
	char *pp = NULL;
	int rc = 0;
	memset(out, 0, sizeof *out);
	out->n_img = n_img;
	out->px = calloc((size_t)n_img + 1, sizeof *out->px);
	out->img_tokens = calloc((size_t)n_img + 1, sizeof *out->img_tokens);
	out->grid_thw = calloc(3 * (size_t)n_img + 1, sizeof *out->grid_thw);
	if (n_img > 0 && c->vision.kind != VISION_QWEN2_VL &&
	    c->vision.kind != VISION_QWEN2_5_VL &&
	    c->vision.kind != VISION_CLIP && c->vision.kind != VISION_KIMI)
		rc = d0_errf(err, "%s: %s", dir,
			     c->vision.kind == VISION_NONE
				 ? "a text model: it takes no images"
				 : c->vision.missing);
	if (rc == 0 && n_img > 0) {
		pp = preproc ? strdup(preproc)
			     : path_join(dir, "preprocessor_config.json");
		rc = image_prep_config_load(pp, &pc, err);
	}
	for (int i = 0; i < n_img && rc == 0; i++) {
		struct image_rgb im;
		struct d0_err e;
		if (image_load(images[i], 0, &im, err) < 0) {
			rc = -1;
			break;
		}
		rc = image_preprocess(&pc, &im, images[i], &out->px[i], err);
		image_free(&im);
		if (rc < 0)
			break;
		out->img_tokens[i] = vis_image_tokens(c, &out->px[i], &e);
		if (out->img_tokens[i] < 0) {
			rc = d0_errf(err, "%s: %s (preprocessor %s)", images[i],
				     e.msg, pp);
			break;
		}
		out->grid_thw[3 * i] = out->px[i].grid_t;
		out->grid_thw[3 * i + 1] = out->px[i].grid_h;
		out->grid_thw[3 * i + 2] = out->px[i].grid_w;
		out->n_features += out->img_tokens[i];
	}
	if (rc == 0)
		rc = vis_prompt_ids(c, ids, n, out->img_tokens, n_img,
				    &out->ids, &out->n, err);
	if (rc == 0 && c->vision.mrope) {
		out->rope_pos =
		    malloc(3 * (size_t)out->n * sizeof *out->rope_pos + 8);
		rc = vis_rope_index(c, out->ids, out->n, out->grid_thw, n_img,
				    out->rope_pos, &out->rope_delta, err);
	}
	free(pp);
	if (rc < 0)
		vis_prompt_free(out);
	return rc;
}

const char *vis_prompt_case(const struct model_config *c,
			    const struct vis_prompt *p)
{
	const struct vision_config *v = &c->vision;
	if (p->n_img == 0)
		return "text-only";
	for (int64_t i = 0; i < p->n; i++)
		if (p->ids[i] != v->image_token_id &&
		    p->ids[i] != v->vision_start_id &&
		    p->ids[i] != v->vision_end_id)
			return "mixed";
	return "image-only";
}
