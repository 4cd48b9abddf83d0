/*
 * ref_vision.c - the image channel's float64 reference (ref_vision.h).
 *
 * What validate compares the runtime's vision forward with, so it shares
 * no code with runtime/ or kernels/: the weights are decoded here (f32,
 * bf16, f16 to double), every product is a plain loop in double, and each
 * function follows one transformers function:
 *
 *   qwen_encode      Qwen2VisionTransformerPretrainedModel.forward and
 *                    Qwen2_5_VisionTransformerPretrainedModel.forward:
 *                    patch_embed (Conv3d with stride = kernel, so a product
 *                    with the flattened patch), rot_pos_emb (2D rotary:
 *                    rows then columns in each half of the rotated dims),
 *                    get_window_index (2.5: merged units reordered into
 *                    window_size windows, attention within each window
 *                    except the fullatt_block_indexes blocks, which attend
 *                    the whole frame), the blocks (pre-norm attention and
 *                    MLP), the PatchMerger, and the reverse of the window
 *                    order;
 *   clip_encode      CLIPVisionTransformer (class token, learned positions,
 *                    pre_layrnorm, pre-LN blocks) up to LLaVA's
 *                    vision_feature_layer, the strategy's CLS drop, and
 *                    LlavaMultiModalProjector (Linear-GELU-Linear);
 *   kimi_encode      Kimi-VL's MoonVitPretrainedModel (Conv2d patch embed
 *                    with bias, learned positions interpolated as torch's
 *                    bicubic F.interpolate, Rope2DPosEmb as complex pairs,
 *                    pre-LN blocks, final_layernorm), patch_merger and
 *                    KimiVLMultiModalProjector (modeling_kimi_vl.py);
 *   refv_rope_index  Qwen2VLModel.get_rope_index / Qwen2_5_VLModel's for
 *                    images (t = 0 for a still image in 2.5).
 */
#include "engine.h"
#include "ref_vision.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct refv_model {
	struct model_config c;
	struct tensor_spec *t; /* the tensor table; w[i] for the tower's */
	size_t n;
	double **w;
};

const struct model_config *refv_config(const struct refv_model *m)
{
	return &m->c;
}

/* ---------------------------------------------------------- weights */

static double half_to_double(uint16_t h)
{
	int e = (h >> 10) & 31, f = h & 1023;
	double v = e == 0 ? ldexp(f, -24)
		   : e == 31 ? (f ? NAN : INFINITY)
			     : ldexp(1024 + f, e - 25);
	return h & 0x8000 ? -v : v;
}

static int decode(const uint8_t *b, enum dtype dt, uint64_t n, double *out)
{
	for (uint64_t i = 0; i < n; i++) {
		if (dt == DT_F32) {
			float f;
			memcpy(&f, b + 4 * i, 4);
			out[i] = f;
		} else if (dt == DT_BF16) {
			uint32_t u = (uint32_t)(b[2 * i] | b[2 * i + 1] << 8) << 16;
			float f;
			memcpy(&f, &u, 4);
			out[i] = f;
		} else if (dt == DT_F16) {
			out[i] = half_to_double((uint16_t)(b[2 * i] |
							   b[2 * i + 1] << 8));
		} else {
			return -1;
		}
	}
	return 0;
}

/* Every tower and projector tensor of the table, from whichever shard. */
static int load_tower(struct refv_model *m, const char *dir,
		      struct d0_err *err)
{
	struct ckpt ck;
	int rc = 0;
	if (ckpt_open(dir, &ck, err) < 0)
		return -1;
	for (size_t s = 0; s < ck.nshards && rc == 0; s++) {
		struct st_file sf;
		int fd;
		if (st_open(ck.shards[s].path, &sf, err) < 0) {
			rc = -1;
			break;
		}
		fd = open(ck.shards[s].path, O_RDONLY);
		for (size_t i = 0; i < m->n && rc == 0 && fd >= 0; i++) {
			const struct tensor_spec *t = &m->t[i];
			const struct st_tensor *st;
			uint64_t numel = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
			uint8_t *raw;
			if ((t->group != GROUP_VISION && t->group != GROUP_PROJECTOR) ||
			    m->w[i] || !(st = st_find(&sf, t->name)))
				continue;
			if (st_numel(st) != numel) {
				rc = d0_errf(err, "%s: tensor '%s' has %llu "
					     "elements; config.json implies %llu",
					     ck.shards[s].path, t->name,
					     (unsigned long long)st_numel(st),
					     (unsigned long long)numel);
				break;
			}
			raw = malloc(st->end - st->begin + 1);
			m->w[i] = malloc(numel * sizeof **m->w);
			if (pread_full(fd, raw, st->end - st->begin,
				       sf.data_off + st->begin) < 0 ||
			    decode(raw, st->dtype, numel, m->w[i]) < 0)
				rc = d0_errf(err, "%s: tensor '%s': cannot read it as "
					     "f32, bf16 or f16",
					     ck.shards[s].path, t->name);
			free(raw);
		}
		if (fd < 0)
			rc = d0_errf(err, "%s: cannot open", ck.shards[s].path);
		else
			close(fd);
		st_free(&sf);
	}
	ckpt_close(&ck);
	for (size_t i = 0; i < m->n && rc == 0; i++)
		if ((m->t[i].group == GROUP_VISION ||
		     m->t[i].group == GROUP_PROJECTOR) && !m->w[i])
			rc = d0_errf(err, "%s: tensor '%s' is in no shard", dir,
				     m->t[i].name);
	return rc;
}

int refv_open(const char *dir, struct refv_model **out, struct d0_err *err)
{
	struct refv_model *m = calloc(1, sizeof *m);
	char *cp = path_join(dir, "config.json");
	int rc = model_config_load(cp, &m->c, err);
	free(cp);
	if (rc == 0 && (m->c.vision.kind == VISION_NONE ||
			m->c.vision.kind == VISION_UNSUPPORTED))
		rc = d0_errf(err, "%s: %s", dir,
			     m->c.vision.kind == VISION_NONE
				     ? "not a vision-language model (no "
				       "vision_config)"
				     : m->c.vision.missing);
	if (rc == 0)
		rc = model_tensors(&m->c, &m->t, &m->n, err);
	if (rc == 0) {
		m->w = calloc(m->n, sizeof *m->w);
		rc = load_tower(m, dir, err);
	}
	if (rc < 0) {
		refv_close(m);
		return -1;
	}
	*out = m;
	return 0;
}

void refv_close(struct refv_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; m->w && i < m->n; i++)
		free(m->w[i]);
	free(m->w);
	free(m->t);
	model_config_free(&m->c);
	free(m);
}

/* A loaded weight by name (the table says it exists). */
static const double *W(const struct refv_model *m, const char *fmt, int i)
{
	char name[200];
	snprintf(name, sizeof name, fmt, i);
	for (size_t k = 0; k < m->n; k++)
		if (m->w[k] && !strcmp(m->t[k].name, name))
			return m->w[k];
	return NULL;
}

/* ------------------------------------------------------------- math */

/* y[r, o] = x[r, :] . w[o, :] + b[o] */
static void linear(double *y, const double *x, const double *w, const double *b,
		   int64_t rows, int64_t out, int64_t in)
{
	for (int64_t r = 0; r < rows; r++)
		for (int64_t o = 0; o < out; o++) {
			double s = b ? b[o] : 0.0;
			for (int64_t k = 0; k < in; k++)
				s += x[r * in + k] * w[o * in + k];
			y[r * out + o] = s;
		}
}

static void rms_norm(double *y, const double *x, const double *w,
		     int64_t rows, int64_t d, double eps)
{
	for (int64_t r = 0; r < rows; r++) {
		double ss = 0;
		for (int64_t k = 0; k < d; k++)
			ss += x[r * d + k] * x[r * d + k];
		ss = 1.0 / sqrt(ss / (double)d + eps);
		for (int64_t k = 0; k < d; k++)
			y[r * d + k] = x[r * d + k] * ss * w[k];
	}
}

static void layer_norm(double *y, const double *x, const double *w,
		       const double *b, int64_t rows, int64_t d, double eps)
{
	for (int64_t r = 0; r < rows; r++) {
		double mu = 0, var = 0;
		for (int64_t k = 0; k < d; k++)
			mu += x[r * d + k];
		mu /= (double)d;
		for (int64_t k = 0; k < d; k++)
			var += (x[r * d + k] - mu) * (x[r * d + k] - mu);
		var = 1.0 / sqrt(var / (double)d + eps);
		for (int64_t k = 0; k < d; k++)
			y[r * d + k] = (x[r * d + k] - mu) * var * w[k] + b[k];
	}
}

/* transformers' ACT2FN: silu, gelu (erf), quick_gelu, gelu_pytorch_tanh */
static double act(const char *name, double x)
{
	if (!strcmp(name, "silu"))
		return x / (1.0 + exp(-x));
	if (!strcmp(name, "quick_gelu"))
		return x / (1.0 + exp(-1.702 * x));
	if (!strcmp(name, "gelu_pytorch_tanh") || !strcmp(name, "gelu_new"))
		return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) *
					      (x + 0.044715 * x * x * x)));
	return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); /* "gelu" */
}

static int act_known(const char *name)
{
	return !strcmp(name, "silu") || !strcmp(name, "quick_gelu") ||
	       !strcmp(name, "gelu") || !strcmp(name, "gelu_pytorch_tanh") ||
	       !strcmp(name, "gelu_new");
}

/*
 * Softmax attention without a mask over one segment of rows [s0, s1):
 * q, k, v and out are [rows][heads][hd] (q already scaled or not: scale).
 */
static void attend(double *out, const double *q, const double *k,
		   const double *v, int64_t s0, int64_t s1, int64_t heads,
		   int64_t hd, double scale, double *sc)
{
	int64_t D = heads * hd;
	for (int64_t h = 0; h < heads; h++)
		for (int64_t i = s0; i < s1; i++) {
			double mx = -INFINITY, sum = 0;
			for (int64_t j = s0; j < s1; j++) {
				double s = 0;
				for (int64_t d = 0; d < hd; d++)
					s += q[i * D + h * hd + d] * k[j * D + h * hd + d];
				sc[j - s0] = s * scale;
				if (sc[j - s0] > mx)
					mx = sc[j - s0];
			}
			for (int64_t j = s0; j < s1; j++) {
				sc[j - s0] = exp(sc[j - s0] - mx);
				sum += sc[j - s0];
			}
			for (int64_t d = 0; d < hd; d++) {
				double o = 0;
				for (int64_t j = s0; j < s1; j++)
					o += sc[j - s0] * v[j * D + h * hd + d];
				out[i * D + h * hd + d] = o / sum;
			}
		}
}

/* ------------------------------------------------------------- Qwen */

/*
 * get_window_index for one frame set of an image: the merged units
 * (grid_t x uh x uw, row-major) in window order (vws x vws units a
 * window, windows row-major, the grid padded to whole windows), appended
 * to idx from *ni with base added; window sizes in patches appended to
 * segs (empty windows of the padding give repeated bounds, dropped as
 * unique_consecutive does).
 */
static void window_index(int64_t gt, int64_t uh, int64_t uw, int64_t vws,
			 int64_t mu, int64_t base, int64_t *idx, int64_t *ni,
			 int64_t *bounds, int64_t *nb)
{
	int64_t ph = vws - uh % vws, pw = vws - uw % vws; /* as transformers */
	int64_t nwh = (uh + ph) / vws, nww = (uw + pw) / vws;
	for (int64_t t = 0; t < gt; t++)
		for (int64_t wy = 0; wy < nwh; wy++)
			for (int64_t wx = 0; wx < nww; wx++) {
				int64_t cnt = 0;
				for (int64_t y = wy * vws; y < (wy + 1) * vws; y++)
					for (int64_t x = wx * vws; x < (wx + 1) * vws;
					     x++) {
						if (y >= uh || x >= uw)
							continue;
						idx[(*ni)++] = base + (t * uh + y) * uw + x;
						cnt++;
					}
				if (cnt) /* unique_consecutive drops empty ones */
					bounds[*nb] = bounds[*nb - 1] + cnt * mu, (*nb)++;
			}
}

static int qwen_encode(const struct refv_model *m, const double *pix,
		       int64_t rows, int64_t cols, const int64_t *g, int n_img,
		       refv_trace_fn trace, void *ctx, double **out,
		       int64_t *out_rows, struct d0_err *err)
{
	const struct vision_config *v = &m->c.vision;
	int64_t D = v->hidden, F = v->ffn, H = v->heads, hd = D / H;
	int64_t mg = v->merge, mu = mg * mg, O = v->out_hidden;
	int64_t K = v->in_chans * v->temporal_patch * v->patch * v->patch;
	int q25 = v->kind == VISION_QWEN2_5_VL;
	int64_t N = 0, U, nwin = 0, nfr = 1, ni = 0;
	int64_t *win = NULL, *wb = NULL, *fb = NULL, *order;
	double *x, *y, *qkv, *q, *k, *vv, *at, *f1, *f2, *ang, *sc, *mrg, *mo;
	double inv[1024];

	if (cols != K)
		return d0_errf(err, "patches have %lld columns; the tower takes "
			       "in_chans x temporal x patch x patch = %lld",
			       (long long)cols, (long long)K);
	for (int i = 0; i < n_img; i++) {
		if (g[3 * i] < 1 || g[3 * i + 1] < 1 || g[3 * i + 2] < 1 ||
		    g[3 * i + 1] % mg || g[3 * i + 2] % mg)
			return d0_errf(err, "image %d: grid %lld x %lld x %lld is "
				       "not whole %lld x %lld merge windows", i,
				       (long long)g[3 * i], (long long)g[3 * i + 1],
				       (long long)g[3 * i + 2], (long long)mg,
				       (long long)mg);
		N += g[3 * i] * g[3 * i + 1] * g[3 * i + 2];
		nfr += g[3 * i];
	}
	if (N != rows)
		return d0_errf(err, "%lld patch rows, but the grids hold %lld",
			       (long long)rows, (long long)N);
	if (hd / 4 > 1024 || !act_known(v->act))
		return d0_errf(err, "vision head dim %lld or hidden_act '%s' is "
			       "not supported by the reference", (long long)hd,
			       v->act);
	U = N / mu;
	/* VisionRotaryEmbedding(head_dim / 2, theta 10000) */
	for (int64_t j = 0; j < hd / 4; j++)
		inv[j] = 1.0 / pow(10000.0, (double)(2 * j) / (double)(hd / 2));

	x = malloc((size_t)(N * D) * sizeof *x);
	y = malloc((size_t)(N * D) * sizeof *y);
	qkv = malloc((size_t)(N * 3 * D) * sizeof *qkv);
	q = malloc((size_t)(N * D) * sizeof *q);
	k = malloc((size_t)(N * D) * sizeof *k);
	vv = malloc((size_t)(N * D) * sizeof *vv);
	at = malloc((size_t)(N * D) * sizeof *at);
	f1 = malloc((size_t)(N * F) * sizeof *f1);
	f2 = malloc((size_t)(N * F) * sizeof *f2);
	ang = malloc((size_t)(N * (hd / 2)) * sizeof *ang);
	sc = malloc((size_t)N * sizeof *sc);
	order = malloc((size_t)U * sizeof *order);
	win = malloc((size_t)(U + 1) * sizeof *win);
	wb = malloc((size_t)(U + 2) * sizeof *wb);
	fb = malloc((size_t)(nfr + 1) * sizeof *fb);

	/* patch_embed: Conv3d(kernel = stride) = the flattened patch times
	 * the kernel flattened in the same (C, T, P, P) order */
	linear(x, pix, W(m, "visual.patch_embed.proj.weight", 0), NULL, N, D, K);

	/* rot_pos_emb: each patch's row and column, in the processor's
	 * (t, row block, column block, row in block, column in block) order */
	{
		int64_t r = 0;
		for (int i = 0; i < n_img; i++)
			for (int64_t t = 0; t < g[3 * i]; t++)
				for (int64_t by = 0; by < g[3 * i + 1] / mg; by++)
					for (int64_t bx = 0; bx < g[3 * i + 2] / mg; bx++)
						for (int64_t my = 0; my < mg; my++)
							for (int64_t mx = 0; mx < mg; mx++, r++)
								for (int64_t j = 0; j < hd / 4; j++) {
									ang[r * (hd / 2) + j] =
										(double)(by * mg + my) * inv[j];
									ang[r * (hd / 2) + hd / 4 + j] =
										(double)(bx * mg + mx) * inv[j];
								}
	}
	/* frames (cu_seqlens) and, for 2.5, windows (cu_window_seqlens) */
	fb[0] = 0;
	nfr = 1;
	for (int i = 0; i < n_img; i++)
		for (int64_t t = 0; t < g[3 * i]; t++, nfr++)
			fb[nfr] = fb[nfr - 1] + g[3 * i + 1] * g[3 * i + 2];
	wb[0] = 0;
	nwin = 1;
	for (int64_t u = 0; u < U; u++)
		order[u] = u;
	if (q25) {
		int64_t vws = v->window_size / mg / v->patch, base = 0;
		for (int i = 0; i < n_img; i++) {
			int64_t uh = g[3 * i + 1] / mg, uw = g[3 * i + 2] / mg;
			window_index(g[3 * i], uh, uw, vws, mu, base, win, &ni, wb,
				     &nwin);
			base += g[3 * i] * uh * uw;
		}
		memcpy(order, win, (size_t)U * sizeof *order);
		/* hidden_states[window_index] by merged unit, and the angles */
		memcpy(y, x, (size_t)(N * D) * sizeof *y);
		memcpy(q, ang, (size_t)(N * (hd / 2)) * sizeof *q);
		for (int64_t u = 0; u < U; u++) {
			memcpy(x + u * mu * D, y + order[u] * mu * D,
			       (size_t)(mu * D) * sizeof *x);
			memcpy(ang + u * mu * (hd / 2), q + order[u] * mu * (hd / 2),
			       (size_t)(mu * (hd / 2)) * sizeof *ang);
		}
	}
	if (trace)
		trace(ctx, -1, x, N, D);

	for (int64_t l = 0; l < v->depth; l++) {
		int full = !q25;
		const int64_t *bd = fb;
		int64_t nb = nfr;
		int b = (int)l;
		for (int i = 0; q25 && i < v->n_fullatt; i++)
			full |= v->fullatt[i] == l;
		if (!full) {
			bd = wb;
			nb = nwin;
		}
		/* norm1 */
		if (q25)
			rms_norm(y, x, W(m, "visual.blocks.%d.norm1.weight", b), N, D,
				 v->norm_eps);
		else
			layer_norm(y, x, W(m, "visual.blocks.%d.norm1.weight", b),
				   W(m, "visual.blocks.%d.norm1.bias", b), N, D,
				   v->norm_eps);
		linear(qkv, y, W(m, "visual.blocks.%d.attn.qkv.weight", b),
		       W(m, "visual.blocks.%d.attn.qkv.bias", b), N, 3 * D, D);
		/* reshape(seq, 3, heads, hd): q, k, v; rotary on q and k */
		for (int64_t r = 0; r < N; r++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t d = 0; d < hd; d++) {
					int64_t c = h * hd + d;
					double a = ang[r * (hd / 2) + d % (hd / 2)];
					int64_t pd = d < hd / 2 ? d + hd / 2 : d - hd / 2;
					double sgn = d < hd / 2 ? -1.0 : 1.0;
					double *row = qkv + r * 3 * D;
					q[r * D + c] = row[c] * cos(a) +
						       sgn * row[h * hd + pd] * sin(a);
					k[r * D + c] = row[D + c] * cos(a) +
						       sgn * row[D + h * hd + pd] * sin(a);
					vv[r * D + c] = row[2 * D + c];
				}
		for (int64_t s = 1; s < nb; s++)
			attend(at, q, k, vv, bd[s - 1], bd[s], H, hd,
			       1.0 / sqrt((double)hd), sc);
		linear(y, at, W(m, "visual.blocks.%d.attn.proj.weight", b),
		       W(m, "visual.blocks.%d.attn.proj.bias", b), N, D, D);
		for (int64_t i = 0; i < N * D; i++)
			x[i] += y[i];
		/* norm2 + MLP */
		if (q25)
			rms_norm(y, x, W(m, "visual.blocks.%d.norm2.weight", b), N, D,
				 v->norm_eps);
		else
			layer_norm(y, x, W(m, "visual.blocks.%d.norm2.weight", b),
				   W(m, "visual.blocks.%d.norm2.bias", b), N, D,
				   v->norm_eps);
		if (q25) {
			linear(f1, y, W(m, "visual.blocks.%d.mlp.gate_proj.weight", b),
			       W(m, "visual.blocks.%d.mlp.gate_proj.bias", b), N, F, D);
			linear(f2, y, W(m, "visual.blocks.%d.mlp.up_proj.weight", b),
			       W(m, "visual.blocks.%d.mlp.up_proj.bias", b), N, F, D);
			for (int64_t i = 0; i < N * F; i++)
				f1[i] = act(v->act, f1[i]) * f2[i];
			linear(y, f1, W(m, "visual.blocks.%d.mlp.down_proj.weight", b),
			       W(m, "visual.blocks.%d.mlp.down_proj.bias", b), N, D, F);
		} else {
			linear(f1, y, W(m, "visual.blocks.%d.mlp.fc1.weight", b),
			       W(m, "visual.blocks.%d.mlp.fc1.bias", b), N, F, D);
			for (int64_t i = 0; i < N * F; i++)
				f1[i] = act(v->act, f1[i]);
			linear(y, f1, W(m, "visual.blocks.%d.mlp.fc2.weight", b),
			       W(m, "visual.blocks.%d.mlp.fc2.bias", b), N, D, F);
		}
		for (int64_t i = 0; i < N * D; i++)
			x[i] += y[i];
		if (trace)
			trace(ctx, b, x, N, D);
	}

	/* PatchMerger: ln_q, merge^2 neighbours as one row, Linear-GELU-Linear */
	if (q25)
		rms_norm(y, x, W(m, "visual.merger.ln_q.weight", 0), N, D, v->norm_eps);
	else
		layer_norm(y, x, W(m, "visual.merger.ln_q.weight", 0),
			   W(m, "visual.merger.ln_q.bias", 0), N, D, v->norm_eps);
	mrg = malloc((size_t)(U * mu * D) * sizeof *mrg);
	mo = malloc((size_t)(U * O) * sizeof *mo);
	linear(mrg, y, W(m, "visual.merger.mlp.0.weight", 0),
	       W(m, "visual.merger.mlp.0.bias", 0), U, mu * D, mu * D);
	for (int64_t i = 0; i < U * mu * D; i++)
		mrg[i] = act("gelu", mrg[i]);
	linear(mo, mrg, W(m, "visual.merger.mlp.2.weight", 0),
	       W(m, "visual.merger.mlp.2.bias", 0), U, O, mu * D);
	/* hidden_states[argsort(window_index)]: unit u came from order[u] */
	*out = malloc((size_t)(U * O) * sizeof **out);
	for (int64_t u = 0; u < U; u++)
		memcpy(*out + order[u] * O, mo + u * O, (size_t)O * sizeof **out);
	*out_rows = U;

	free(mrg);
	free(mo);
	free(x), free(y), free(qkv), free(q), free(k), free(vv), free(at);
	free(f1), free(f2), free(ang), free(sc), free(order), free(win);
	free(wb), free(fb);
	return 0;
}

/* ------------------------------------------------------------- CLIP */

static int clip_encode(const struct refv_model *m, const double *pix,
		       int64_t rows, int64_t cols, int n_img,
		       refv_trace_fn trace, void *ctx, double **out,
		       int64_t *out_rows, struct d0_err *err)
{
	const struct vision_config *v = &m->c.vision;
	const char *p = "vision_tower.vision_model";
	char nm[200];
	int64_t D = v->hidden, F = v->ffn, H = v->heads, hd = D / H;
	int64_t S = v->image_size, P = v->patch, G = S / P, L = G * G + 1;
	int64_t C = v->in_chans, O = v->out_hidden, K = C * P * P;
	int64_t nstates = v->depth + 1;
	int64_t sel = v->feature_layer < 0 ? nstates + v->feature_layer
					   : v->feature_layer;
	int drop = strcmp(v->select_strategy, "full") != 0;
	int64_t T = L - drop;
	double *x, *y, *q, *k, *vv, *at, *f1, *pv, *sc, *pr;

	if (rows != (int64_t)n_img * C || cols != S * S)
		return d0_errf(err, "pixel_values of %lld x %lld; %d images of "
			       "[%lld][%lld][%lld] expected", (long long)rows,
			       (long long)cols, n_img, (long long)C, (long long)S,
			       (long long)S);
	if (!act_known(v->act) || !act_known(v->projector_act))
		return d0_errf(err, "hidden_act '%s' / projector_hidden_act '%s' "
			       "not supported by the reference", v->act,
			       v->projector_act);
	x = malloc((size_t)(L * D) * sizeof *x);
	y = malloc((size_t)(L * D) * sizeof *y);
	q = malloc((size_t)(L * D) * sizeof *q);
	k = malloc((size_t)(L * D) * sizeof *k);
	vv = malloc((size_t)(L * D) * sizeof *vv);
	at = malloc((size_t)(L * D) * sizeof *at);
	f1 = malloc((size_t)(L * F) * sizeof *f1);
	pv = malloc((size_t)(G * G * K) * sizeof *pv);
	sc = malloc((size_t)L * sizeof *sc);
	pr = malloc((size_t)(T * O) * sizeof *pr);
	*out = malloc((size_t)(n_img * T * O) * sizeof **out);
	*out_rows = n_img * T;
	for (int im = 0; im < n_img; im++) {
		const double *img = pix + (size_t)im * (size_t)(C * S * S);
		/* Conv2d(kernel = stride = P): patches row-major over the grid,
		 * each flattened (C, P, P) */
		for (int64_t gy = 0; gy < G; gy++)
			for (int64_t gx = 0; gx < G; gx++)
				for (int64_t c = 0; c < C; c++)
					for (int64_t py = 0; py < P; py++)
						for (int64_t px = 0; px < P; px++)
							pv[(gy * G + gx) * K + c * P * P + py * P + px] =
								img[c * S * S + (gy * P + py) * S + gx * P + px];
		snprintf(nm, sizeof nm, "%s.embeddings.patch_embedding.weight", p);
		linear(y + D, pv, W(m, nm, 0), NULL, G * G, D, K);
		snprintf(nm, sizeof nm, "%s.embeddings.class_embedding", p);
		memcpy(y, W(m, nm, 0), (size_t)D * sizeof *y);
		snprintf(nm, sizeof nm, "%s.embeddings.position_embedding.weight", p);
		for (int64_t i = 0; i < L * D; i++)
			y[i] += W(m, nm, 0)[i];
		snprintf(nm, sizeof nm, "%s.pre_layrnorm.weight", p);
		{
			char nb[200];
			snprintf(nb, sizeof nb, "%s.pre_layrnorm.bias", p);
			layer_norm(x, y, W(m, nm, 0), W(m, nb, 0), L, D, v->norm_eps);
		}
		if (trace)
			trace(ctx, -1, x, L, D);
		/* hidden_states[sel]: the embeddings are state 0, layer l's
		 * output state l + 1 */
		for (int64_t l = 0; l < sel; l++) {
			char w1[200], b1[200];
			int b = (int)l;
#define LW(field) (snprintf(w1, sizeof w1, "%s.encoder.layers.%d." field ".weight", p, b), W(m, w1, 0))
#define LB(field) (snprintf(b1, sizeof b1, "%s.encoder.layers.%d." field ".bias", p, b), W(m, b1, 0))
			layer_norm(y, x, LW("layer_norm1"), LB("layer_norm1"), L, D,
				   v->norm_eps);
			linear(q, y, LW("self_attn.q_proj"), LB("self_attn.q_proj"),
			       L, D, D);
			linear(k, y, LW("self_attn.k_proj"), LB("self_attn.k_proj"),
			       L, D, D);
			linear(vv, y, LW("self_attn.v_proj"), LB("self_attn.v_proj"),
			       L, D, D);
			attend(at, q, k, vv, 0, L, H, hd, 1.0 / sqrt((double)hd), sc);
			linear(y, at, LW("self_attn.out_proj"),
			       LB("self_attn.out_proj"), L, D, D);
			for (int64_t i = 0; i < L * D; i++)
				x[i] += y[i];
			layer_norm(y, x, LW("layer_norm2"), LB("layer_norm2"), L, D,
				   v->norm_eps);
			linear(f1, y, LW("mlp.fc1"), LB("mlp.fc1"), L, F, D);
			for (int64_t i = 0; i < L * F; i++)
				f1[i] = act(v->act, f1[i]);
			linear(y, f1, LW("mlp.fc2"), LB("mlp.fc2"), L, D, F);
			for (int64_t i = 0; i < L * D; i++)
				x[i] += y[i];
#undef LW
#undef LB
			if (trace)
				trace(ctx, b, x, L, D);
		}
		/* LlavaMultiModalProjector on the selected rows */
		linear(pr, x + drop * D,
		       W(m, "multi_modal_projector.linear_1.weight", 0),
		       W(m, "multi_modal_projector.linear_1.bias", 0), T, O, D);
		for (int64_t i = 0; i < T * O; i++)
			pr[i] = act(v->projector_act, pr[i]);
		linear(*out + (size_t)im * (size_t)(T * O), pr,
		       W(m, "multi_modal_projector.linear_2.weight", 0),
		       W(m, "multi_modal_projector.linear_2.bias", 0), T, O, O);
	}
	free(x), free(y), free(q), free(k), free(vv), free(at), free(f1);
	free(pv), free(sc), free(pr);
	return 0;
}

/* ------------------------------------------------------------- Kimi */

/* torch's upsample_bicubic2d coefficients (cubic convolution, A = -0.75)
 * for fraction t: the taps at floor(src) - 1 .. floor(src) + 2. */
static void cubic_coeffs(double t, double c[4])
{
	const double A = -0.75;
	double x;
	x = t + 1;
	c[0] = A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
	x = t;
	c[1] = (A + 2) * x * x * x - (A + 3) * x * x + 1;
	x = 1 - t;
	c[2] = (A + 2) * x * x * x - (A + 3) * x * x + 1;
	x = 2 - t;
	c[3] = A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
}

/*
 * Learnable2DInterpPosEmb for a gh x gw grid: the weight [H0][W0][D] as
 * is when the grid is its size, else F.interpolate(weight as [1, D, H0,
 * W0], size=(gh, gw), mode="bicubic", align_corners=False): each output
 * (y, x) reads source (y + 0.5) H0/gh - 0.5 (and the same for x), 4 x 4
 * taps clamped to the border.  pos [gh*gw][D], row-major.
 */
static void kimi_pos(const double *w, int64_t H0, int64_t W0, int64_t D,
		     int64_t gh, int64_t gw, double *pos)
{
	if (gh == H0 && gw == W0) {
		memcpy(pos, w, (size_t)(gh * gw * D) * sizeof *pos);
		return;
	}
	for (int64_t y = 0; y < gh; y++) {
		double sy = ((double)y + 0.5) * (double)H0 / (double)gh - 0.5;
		double fy = floor(sy), cy[4];
		cubic_coeffs(sy - fy, cy);
		for (int64_t x = 0; x < gw; x++) {
			double sx = ((double)x + 0.5) * (double)W0 / (double)gw - 0.5;
			double fx = floor(sx), cx[4];
			double *o = pos + (y * gw + x) * D;
			cubic_coeffs(sx - fx, cx);
			for (int64_t d = 0; d < D; d++)
				o[d] = 0;
			for (int a = 0; a < 4; a++) {
				int64_t iy = (int64_t)fy - 1 + a;
				iy = iy < 0 ? 0 : iy >= H0 ? H0 - 1 : iy;
				for (int b = 0; b < 4; b++) {
					int64_t ix = (int64_t)fx - 1 + b;
					ix = ix < 0 ? 0 : ix >= W0 ? W0 - 1 : ix;
					for (int64_t d = 0; d < D; d++)
						o[d] += cy[a] * cx[b] *
							w[(iy * W0 + ix) * D + d];
				}
			}
		}
	}
}

/*
 * MoonVitPretrainedModel + KimiVLMultiModalProjector for one or more
 * images (grids g[3 i] = 1, g[3 i + 1] = h, g[3 i + 2] = w patches; the
 * pixel rows concatenated, each [C][P][P]): patch_embed (Conv2d with bias
 * as a product, plus the interpolated positions), the encoder blocks
 * (norm0, wqkv, Rope2DPosEmb on q and k as complex pairs, attention within
 * the image, wo; norm1, fc0, gelu_pytorch_tanh, fc1), final_layernorm,
 * patch_merger (2x2 neighbours as one row), pre_norm, linear_1, GELU,
 * linear_2.
 */
static int kimi_encode(const struct refv_model *m, const double *pix,
		       int64_t rows, int64_t cols, const int64_t *g, int n_img,
		       refv_trace_fn trace, void *ctx, double **out,
		       int64_t *out_rows, struct d0_err *err)
{
	const struct vision_config *v = &m->c.vision;
	const char *e = "vision_tower.encoder.blocks";
	char nm[200];
	int64_t D = v->hidden, F = v->ffn, H = v->heads, hd = D / H;
	int64_t mg = v->merge, mu = mg * mg, O = v->out_hidden;
	int64_t K = v->in_chans * v->patch * v->patch, N = 0, U = 0;
	int64_t *seg, *prow, r0 = 0;
	double *x, *y, *qkv, *q, *k, *vv, *at, *f1, *sc, *mrg, *mo, *pos;

	if (cols != K)
		return d0_errf(err, "patches have %lld columns; MoonViT takes "
			       "3 x patch x patch = %lld", (long long)cols,
			       (long long)K);
	for (int i = 0; i < n_img; i++) {
		if (g[3 * i] != 1 || g[3 * i + 1] < 1 || g[3 * i + 2] < 1 ||
		    g[3 * i + 1] % mg || g[3 * i + 2] % mg)
			return d0_errf(err, "image %d: grid %lld x %lld x %lld is "
				       "not one frame of whole %lld x %lld merge "
				       "kernels", i, (long long)g[3 * i],
				       (long long)g[3 * i + 1],
				       (long long)g[3 * i + 2], (long long)mg,
				       (long long)mg);
		N += g[3 * i + 1] * g[3 * i + 2];
	}
	if (N != rows)
		return d0_errf(err, "%lld patch rows, but the grids hold %lld",
			       (long long)rows, (long long)N);
	U = N / mu;
#define KW(fmt, i) (snprintf(nm, sizeof nm, "%s.%d." fmt, e, (int)(i)), W(m, nm, 0))
	x = malloc((size_t)(N * D) * sizeof *x);
	y = malloc((size_t)(N * D) * sizeof *y);
	pos = malloc((size_t)(N * D) * sizeof *pos);
	qkv = malloc((size_t)(N * 3 * D) * sizeof *qkv);
	q = malloc((size_t)(N * D) * sizeof *q);
	k = malloc((size_t)(N * D) * sizeof *k);
	vv = malloc((size_t)(N * D) * sizeof *vv);
	at = malloc((size_t)(N * D) * sizeof *at);
	f1 = malloc((size_t)(N * F) * sizeof *f1);
	sc = malloc((size_t)N * sizeof *sc);
	seg = malloc((size_t)(n_img + 1) * sizeof *seg);
	prow = malloc((size_t)N * 2 * sizeof *prow);

	/* patch_embed: proj(x).view(L, -1), then + the positions */
	linear(x, pix, W(m, "vision_tower.patch_embed.proj.weight", 0),
	       W(m, "vision_tower.patch_embed.proj.bias", 0), N, D, K);
	seg[0] = 0;
	for (int i = 0; i < n_img; i++) {
		int64_t gh = g[3 * i + 1], gw = g[3 * i + 2];
		kimi_pos(W(m, "vision_tower.patch_embed.pos_emb.weight", 0),
			 v->pos_h, v->pos_w, D, gh, gw, pos + r0 * D);
		for (int64_t p = 0; p < gh * gw; p++) {
			prow[2 * (r0 + p)] = p / gw;     /* height */
			prow[2 * (r0 + p) + 1] = p % gw; /* width */
		}
		r0 += gh * gw;
		seg[i + 1] = r0;
	}
	for (int64_t i = 0; i < N * D; i++)
		x[i] += pos[i];
	if (trace)
		trace(ctx, -1, x, N, D);

	for (int64_t l = 0; l < v->depth; l++) {
		layer_norm(y, x, KW("norm0.weight", l), KW("norm0.bias", l), N, D,
			   v->norm_eps);
		linear(qkv, y, KW("wqkv.weight", l), KW("wqkv.bias", l), N,
		       3 * D, D);
		/* view(L, 3, heads, hd); freqs_cis[h, w, c]: c = 2i is
		 * cis(w theta^(-4i/hd)), c = 2i + 1 is cis(h theta^(-4i/hd)) */
		for (int64_t r = 0; r < N; r++)
			for (int64_t h = 0; h < H; h++)
				for (int64_t c = 0; c < hd / 2; c++) {
					int64_t i = c / 2, o = h * hd + 2 * c;
					double th = pow(10000.0, -(double)(4 * i) /
								    (double)hd);
					double a = (double)(c % 2 ? prow[2 * r]
								  : prow[2 * r + 1]) * th;
					double cs = cos(a), sn = sin(a);
					const double *row = qkv + r * 3 * D;
					q[r * D + o] = row[o] * cs - row[o + 1] * sn;
					q[r * D + o + 1] = row[o] * sn + row[o + 1] * cs;
					k[r * D + o] = row[D + o] * cs -
						       row[D + o + 1] * sn;
					k[r * D + o + 1] = row[D + o] * sn +
							   row[D + o + 1] * cs;
					vv[r * D + o] = row[2 * D + o];
					vv[r * D + o + 1] = row[2 * D + o + 1];
				}
		for (int i = 0; i < n_img; i++)
			attend(at, q, k, vv, seg[i], seg[i + 1], H, hd,
			       1.0 / sqrt((double)hd), sc);
		linear(y, at, KW("wo.weight", l), KW("wo.bias", l), N, D, D);
		for (int64_t i = 0; i < N * D; i++)
			x[i] += y[i];
		layer_norm(y, x, KW("norm1.weight", l), KW("norm1.bias", l), N, D,
			   v->norm_eps);
		linear(f1, y, KW("mlp.fc0.weight", l), KW("mlp.fc0.bias", l), N,
		       F, D);
		for (int64_t i = 0; i < N * F; i++)
			f1[i] = act("gelu_pytorch_tanh", f1[i]);
		linear(y, f1, KW("mlp.fc1.weight", l), KW("mlp.fc1.bias", l), N,
		       D, F);
		for (int64_t i = 0; i < N * D; i++)
			x[i] += y[i];
		if (trace)
			trace(ctx, (int)l, x, N, D);
	}
#undef KW
	layer_norm(y, x, W(m, "vision_tower.encoder.final_layernorm.weight", 0),
		   W(m, "vision_tower.encoder.final_layernorm.bias", 0), N, D,
		   v->norm_eps);
	/* patch_merger: view(h/2, 2, w/2, 2, D).permute(0, 2, 1, 3, 4) */
	mrg = malloc((size_t)(N * D) * sizeof *mrg);
	{
		int64_t u = 0;
		r0 = 0;
		for (int i = 0; i < n_img; i++) {
			int64_t gh = g[3 * i + 1], gw = g[3 * i + 2];
			for (int64_t a = 0; a < gh / mg; a++)
				for (int64_t b = 0; b < gw / mg; b++, u++)
					for (int64_t ky = 0; ky < mg; ky++)
						for (int64_t kx = 0; kx < mg; kx++)
							memcpy(mrg + (u * mu + ky * mg + kx) * D,
							       y + (r0 + (a * mg + ky) * gw +
								    b * mg + kx) * D,
							       (size_t)D * sizeof *mrg);
			r0 += gh * gw;
		}
	}
	/* KimiVLMultiModalProjector: pre_norm per patch, view(-1, D mg^2) */
	layer_norm(y, mrg, W(m, "multi_modal_projector.pre_norm.weight", 0),
		   W(m, "multi_modal_projector.pre_norm.bias", 0), N, D, 1e-5);
	mo = malloc((size_t)(U * mu * D) * sizeof *mo);
	linear(mo, y, W(m, "multi_modal_projector.linear_1.weight", 0),
	       W(m, "multi_modal_projector.linear_1.bias", 0), U, mu * D, mu * D);
	for (int64_t i = 0; i < U * mu * D; i++)
		mo[i] = act("gelu", mo[i]);
	*out = malloc((size_t)(U * O) * sizeof **out);
	linear(*out, mo, W(m, "multi_modal_projector.linear_2.weight", 0),
	       W(m, "multi_modal_projector.linear_2.bias", 0), U, O, mu * D);
	*out_rows = U;
	free(x), free(y), free(pos), free(qkv), free(q), free(k), free(vv);
	free(at), free(f1), free(sc), free(seg), free(prow), free(mrg), free(mo);
	return 0;
}

int refv_encode(const struct refv_model *m, const double *pixels, int64_t rows,
		int64_t cols, const int64_t *grid_thw, int n_img,
		refv_trace_fn trace, void *ctx, double **out, int64_t *out_rows,
		struct d0_err *err)
{
	*out = NULL;
	*out_rows = 0;
	if (n_img < 1)
		return d0_errf(err, "no images");
	if (m->c.vision.kind == VISION_CLIP)
		return clip_encode(m, pixels, rows, cols, n_img, trace, ctx, out,
				   out_rows, err);
	if (m->c.vision.kind == VISION_KIMI)
		return kimi_encode(m, pixels, rows, cols, grid_thw, n_img, trace,
				   ctx, out, out_rows, err);
	return qwen_encode(m, pixels, rows, cols, grid_thw, n_img, trace, ctx,
			   out, out_rows, err);
}

/* ----------------------------------------------------------- M-RoPE */

int refv_rope_index(const struct model_config *c, const int64_t *ids,
		    int64_t n, const int64_t *g, int n_img, int64_t *pos,
		    int64_t *delta, struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	int64_t st = 0, maxpos = -1;
	int img = 0, images = 0;
	if (v->kind != VISION_QWEN2_VL && v->kind != VISION_QWEN2_5_VL)
		return d0_errf(err, "%s has no M-RoPE",
			       v->vl_type[0] ? v->vl_type : c->model_type);
	/* image_nums: the vision_start tokens followed by an image token */
	for (int64_t i = 0; i + 1 < n; i++)
		images += ids[i] == v->vision_start_id &&
			  ids[i + 1] == v->image_token_id;
	if (images != n_img)
		return d0_errf(err, "the prompt has %d images (vision_start + "
			       "image token) but %d grids were given", images,
			       n_img);
	for (img = 0; img < n_img; img++) {
		int64_t ed = st, gt = g[3 * img], gh = g[3 * img + 1] / v->merge;
		int64_t gw = g[3 * img + 2] / v->merge, len = gt * gh * gw;
		int64_t base, text_len;
		while (ed < n && ids[ed] != v->image_token_id) /* .index(, st) */
			ed++;
		for (int64_t j = ed; j < ed + len; j++)
			if (j >= n || ids[j] != v->image_token_id)
				return d0_errf(err, "image %d: %lld placeholder "
					       "tokens expected (grid %lld x %lld x "
					       "%lld, merge %lld x %lld), the prompt "
					       "has %lld", img, (long long)len,
					       (long long)g[3 * img],
					       (long long)g[3 * img + 1],
					       (long long)g[3 * img + 2],
					       (long long)v->merge, (long long)v->merge,
					       (long long)(j - ed));
		if (ed + len < n && ids[ed + len] == v->image_token_id)
			return d0_errf(err, "image %d: more than the %lld "
				       "placeholder tokens its grid gives", img,
				       (long long)len);
		/* the text before: arange(text_len) + st_idx on all axes */
		text_len = ed - st;
		base = maxpos + 1;
		for (int64_t i = 0; i < text_len; i++)
			for (int a = 0; a < 3; a++)
				pos[a * n + st + i] = base + i;
		if (text_len)
			maxpos = base + text_len - 1;
		/* the image: (t, h, w) of its merged grid + text_len + st_idx;
		 * 2.5 gives a still image's t as 0 * tokens_per_second */
		for (int64_t t = 0; t < gt; t++)
			for (int64_t h = 0; h < gh; h++)
				for (int64_t w = 0; w < gw; w++) {
					int64_t j = ed + (t * gh + h) * gw + w;
					int64_t tp = v->kind == VISION_QWEN2_5_VL ? 0 : t;
					pos[0 * n + j] = tp + text_len + base;
					pos[1 * n + j] = h + text_len + base;
					pos[2 * n + j] = w + text_len + base;
					for (int a = 0; a < 3; a++)
						if (pos[a * n + j] > maxpos)
							maxpos = pos[a * n + j];
				}
		st = ed + len;
	}
	{ /* the text after the last image */
		int64_t base = maxpos + 1;
		for (int64_t i = st; i < n; i++)
			for (int a = 0; a < 3; a++)
				pos[a * n + i] = base + (i - st);
		if (st < n)
			maxpos = base + (n - st) - 1;
	}
	*delta = maxpos + 1 - n;
	return 0;
}
