/*
 * validate_image.c - validate's image levels (validate_image.h).
 *
 *   operator  ops_vision.c's kernels (2D rotary, window attention, M-RoPE,
 *             LayerNorm, the activations) on random inputs against the
 *             float64 formulas written here, as step_validate.c's op level
 *             does for the text kernels; the patch embedding is checked on
 *             the real weights as the tower's first dumped state;
 *   layer     the runtime tower's states (run --image --dump-layers:
 *             image-II-embed, image-II-block-BBB, image-II-features)
 *             against ref_vision.c's trace of the same pixels;
 *   e2e       the reference's features and get_rope_index positions, for
 *             ref.c's forward pass (ref_hooks' embeds and rope_pos).
 * Relative errors are normwise, as in step_validate.c.
 */
#include "validate_image.h"
#include "validate_layer.h"

#include "ref_vision.h"

#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void add(json_t *a, const char *name, struct err_stat e, int quiet,
		const char *level)
{
	if (!quiet)
		printf("  %-32s %12.3g %12.3g\n", name, e.max_abs, e.max_rel);
	events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f}", "level",
					  level, "name", name, "max_abs",
					  e.max_abs, "max_rel", e.max_rel));
	if (a)
		json_array_append_new(a, json_pack("{s:s, s:f, s:f}", "name",
						   name, "max_abs", e.max_abs,
						   "max_rel", e.max_rel));
}

/* ------------------------------------------------------------ operators */

static void rnd(struct rng *r, float *v, int n, double s)
{
	for (int i = 0; i < n; i++)
		v[i] = (float)((rng_uniform(r) * 2 - 1) * s);
}

static void rot_d(double *v, int d, const double *ang)
{
	for (int i = 0; i < d / 2; i++) {
		double c = cos(ang[i]), s = sin(ang[i]);
		double x1 = v[i], x2 = v[i + d / 2];
		v[i] = x1 * c - x2 * s;
		v[i + d / 2] = x2 * c + x1 * s;
	}
}

void vimg_op_level(struct vimg_result *res, json_t *a, int quiet)
{
	struct rng g;
	enum { HD = 64, NH = 3, N = 37 };
	float x[N * NH * HD], q[N * NH * HD], k[N * NH * HD], v[N * NH * HD];
	float o[N * NH * HD], sc[N * N];
	double ref[N * NH * HD], inv[HD];
	struct err_stat e;
	rng_seed(&g, 30);
	if (!quiet)
		printf("%-34s %12s %12s\n", "image ops (f32 vs float64)",
		       "max abs", "max rel");
	/* 2D rotary: rows in the first quarter of the slots, columns next */
	for (int j = 0; j < HD / 4; j++)
		inv[j] = 1.0 / pow(10000.0, (double)(2 * j) / (HD / 2));
	rnd(&g, x, NH * HD, 1.0);
	for (int i = 0; i < NH * HD; i++)
		ref[i] = x[i];
	op_rope_2d(x, NH, HD, 517, 33, inv);
	for (int h = 0; h < NH; h++) {
		double ang[HD / 2];
		for (int j = 0; j < HD / 4; j++) {
			ang[j] = 517.0 * inv[j];
			ang[HD / 4 + j] = 33.0 * inv[j];
		}
		rot_d(ref + h * HD, HD, ang);
	}
	e = err_compare(x, ref, NH * HD);
	add(a, "vision.rope_2d", e, quiet, "op");
	res->op_worst = fmax(res->op_worst, e.max_rel);
	/* MoonViT's 2D rotary: complex pairs (2c, 2c+1); pair 2i by the
	 * column, pair 2i+1 by the row, theta^(-4i/hd) */
	{
		double th[HD / 4];
		for (int j = 0; j < HD / 4; j++)
			th[j] = pow(10000.0, -(double)(4 * j) / HD);
		rnd(&g, x, NH * HD, 1.0);
		for (int i = 0; i < NH * HD; i++)
			ref[i] = x[i];
		op_rope_2d_pairs(x, NH, HD, 301, 47, th);
		for (int h = 0; h < NH; h++)
			for (int c = 0; c < HD / 2; c++) {
				double an = (c % 2 ? 301.0 : 47.0) * th[c / 2];
				double *p = ref + h * HD + 2 * c, re = p[0],
				       im = p[1];
				p[0] = re * cos(an) - im * sin(an);
				p[1] = re * sin(an) + im * cos(an);
			}
		e = err_compare(x, ref, NH * HD);
		add(a, "vision.rope_2d_pairs", e, quiet, "op");
		res->op_worst = fmax(res->op_worst, e.max_rel);
	}
	/* torch's bicubic F.interpolate (align_corners=False, A = -0.75,
	 * borders clamped) of a 5 x 7 x 3 table up to 9 x 4 and down to 3 x
	 * 11, float64 written out from upsample_bicubic2d's definition */
	{
		enum { IH = 5, IW = 7, C = 3 };
		float tab[IH * IW * C], out[11 * 11 * C];
		double want[11 * 11 * C];
		const int sz[2][2] = {{9, 4}, {3, 11}};
		rnd(&g, tab, IH * IW * C, 2.0);
		for (int t = 0; t < 2; t++) {
			int oh = sz[t][0], ow = sz[t][1];
			op_interp_bicubic(out, tab, IH, IW, C, oh, ow);
			for (int y = 0; y < oh; y++)
				for (int xx = 0; xx < ow; xx++)
					for (int ch = 0; ch < C; ch++) {
						double sy = (y + 0.5) * IH / oh - 0.5;
						double sx = (xx + 0.5) * IW / ow - 0.5;
						double acc = 0;
						for (int iy = (int)floor(sy) - 1;
						     iy <= (int)floor(sy) + 2; iy++)
							for (int ix = (int)floor(sx) - 1;
							     ix <= (int)floor(sx) + 2; ix++) {
								double dy = fabs(sy - iy),
								       dx = fabs(sx - ix), wy, wx;
								const double A = -0.75;
								wy = dy <= 1 ? ((A + 2) * dy - (A + 3)) * dy * dy + 1
									     : A * (dy * dy * dy - 5 * dy * dy + 8 * dy - 4);
								wx = dx <= 1 ? ((A + 2) * dx - (A + 3)) * dx * dx + 1
									     : A * (dx * dx * dx - 5 * dx * dx + 8 * dx - 4);
								acc += wy * wx *
								       tab[((iy < 0 ? 0 : iy >= IH ? IH - 1 : iy) * IW +
									    (ix < 0 ? 0 : ix >= IW ? IW - 1 : ix)) * C + ch];
							}
						want[(y * ow + xx) * C + ch] = acc;
					}
			e = err_compare(out, want, (size_t)(oh * ow * C));
			add(a, t ? "vision.pos_bicubic.down" : "vision.pos_bicubic.up",
			    e, quiet, "op");
			res->op_worst = fmax(res->op_worst, e.max_rel);
		}
	}
	/* M-RoPE: sections (t, h, w) of the frequency slots */
	{
		int64_t sec[3] = {8, 12, 12}, pos[3] = {4000, 17, 260};
		for (int j = 0; j < HD / 2; j++)
			inv[j] = 1.0 / pow(1e6, (double)(2 * j) / HD);
		rnd(&g, x, NH * HD, 1.0);
		for (int i = 0; i < NH * HD; i++)
			ref[i] = x[i];
		op_mrope(x, NH, HD, HD, pos, sec, inv, 1.0);
		for (int h = 0; h < NH; h++) {
			double ang[HD / 2];
			for (int j = 0; j < HD / 2; j++)
				ang[j] = (double)pos[j < 8    ? 0
						     : j < 20 ? 1
							      : 2] *
					 inv[j];
			rot_d(ref + h * HD, HD, ang);
		}
		e = err_compare(x, ref, NH * HD);
		add(a, "mrope", e, quiet, "op");
		res->op_worst = fmax(res->op_worst, e.max_rel);
	}
	/* window attention: rows attend within [0,16), [16,20), [20,37) */
	{
		int64_t b[4] = {0, 16, 20, N};
		double scale = 1.0 / sqrt((double)HD);
		rnd(&g, q, N * NH * HD, 2.0);
		rnd(&g, k, N * NH * HD, 2.0);
		rnd(&g, v, N * NH * HD, 1.0);
		op_attention_segments(o, NH * HD, q, k, v, NH * HD, NH, HD, b,
				      4, sc);
		for (int s = 1; s < 4; s++)
			for (int h = 0; h < NH; h++)
				for (int64_t i = b[s - 1]; i < b[s]; i++) {
					double w[N], mx = -INFINITY, z = 0;
					for (int64_t j = b[s - 1]; j < b[s];
					     j++) {
						double d = 0;
						for (int c = 0; c < HD; c++)
							d +=
							    (double)
								q[(i * NH + h) *
								      HD +
								  c] *
							    k[(j * NH + h) *
								  HD +
							      c];
						w[j] = d * scale;
						mx = fmax(mx, w[j]);
					}
					for (int64_t j = b[s - 1]; j < b[s];
					     j++)
						z += (w[j] = exp(w[j] - mx));
					for (int c = 0; c < HD; c++) {
						double acc = 0;
						for (int64_t j = b[s - 1];
						     j < b[s]; j++)
							acc += w[j] / z *
							       v[(j * NH + h) *
								     HD +
								 c];
						ref[(i * NH + h) * HD + c] =
						    acc;
					}
				}
		e = err_compare(o, ref, N * NH * HD);
		add(a, "attention.window", e, quiet, "op");
		res->op_worst = fmax(res->op_worst, e.max_rel);
	}
	/* LayerNorm and the activations */
	{
		float w[NH * HD], bb[NH * HD];
		double mu = 0, var = 0;
		int n = NH * HD;
		rnd(&g, x, n, 3.0);
		rnd(&g, w, n, 1.0);
		rnd(&g, bb, n, 1.0);
		for (int i = 0; i < n; i++)
			x[i] += 5.0f; /* an offset the mean must take out */
		for (int i = 0; i < n; i++)
			mu += x[i];
		mu /= n;
		for (int i = 0; i < n; i++)
			var += (x[i] - mu) * (x[i] - mu);
		var /= n;
		for (int i = 0; i < n; i++)
			ref[i] = (x[i] - mu) / sqrt(var + 1e-5) * w[i] + bb[i];
		op_layer_norm(o, x, w, bb, n, 1e-5);
		e = err_compare(o, ref, (size_t)n);
		add(a, "layer_norm", e, quiet, "op");
		res->op_worst = fmax(res->op_worst, e.max_rel);
		for (int f = 0; f < 2; f++) {
			rnd(&g, x, n, 6.0);
			for (int i = 0; i < n; i++)
				ref[i] = f == 0
					     ? 0.5 * x[i] *
						   (1 + erf(x[i] / sqrt(2.0)))
					     : x[i] / (1 + exp(-1.702 * x[i]));
			op_act(f == 0 ? "gelu" : "quick_gelu", x, n);
			e = err_compare(x, ref, (size_t)n);
			add(a, f == 0 ? "gelu" : "quick_gelu", e, quiet, "op");
			res->op_worst = fmax(res->op_worst, e.max_rel);
		}
	}
	res->fail_op = !(res->op_worst <= 1e-5);
}

/* ------------------------------------------------------------ the tower */

static float *read_dump(const char *dir, const char *name, int64_t rows,
			int64_t cols, char *why, size_t wn)
{
	char file[96], *p;
	struct st_file f;
	const struct st_tensor *t;
	struct d0_err e;
	float *v = NULL;
	int fd;
	snprintf(file, sizeof file, "%s.safetensors", name);
	p = path_join(dir, file);
	if (st_open(p, &f, &e) < 0) {
		snprintf(why, wn, "%.200s", e.msg);
		free(p);
		return NULL;
	}
	t = st_find(&f, "hidden");
	if (!t || t->dtype != DT_F32 || t->ndim != 2) {
		snprintf(why, wn,
			 "%.150s: expected an F32 tensor 'hidden' of "
			 "[%lld, %lld]",
			 p, (long long)rows, (long long)cols);
	} else if (t->shape[0] != (uint64_t)rows ||
		   t->shape[1] != (uint64_t)cols) {
		/* the dump is there, of another image's size */
		snprintf(why, wn,
			 "%.150s: 'hidden' is [%llu, %llu], this prompt's image "
			 "gives [%lld, %lld]: the run dumped another image",
			 p, (unsigned long long)t->shape[0],
			 (unsigned long long)t->shape[1], (long long)rows,
			 (long long)cols);
	} else {
		v = malloc((size_t)(rows * cols) * 4 + 4);
		fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || pread_full(fd, v, (size_t)(rows * cols) * 4,
					 f.data_off + t->begin) < 0) {
			snprintf(why, wn, "%.200s: read failed", p);
			free(v);
			v = NULL;
		}
		if (fd >= 0)
			close(fd);
	}
	st_free(&f);
	free(p);
	return v;
}

struct trace_ctx {
	const char *dir;
	int img, quiet;
	double max_rel;
	json_t *a;
	struct vimg_result *res;
};

static void on_block(void *ctx, int block, const double *x, int64_t rows,
		     int64_t cols)
{
	struct trace_ctx *t = ctx;
	char name[48];
	float *run;
	struct err_stat e;
	if (!t->dir || t->res->dump_err[0])
		return;
	if (block < 0)
		snprintf(name, sizeof name, "image-%02d-embed", t->img);
	else
		snprintf(name, sizeof name, "image-%02d-block-%03d", t->img,
			 block);
	run = read_dump(t->dir, name, rows, cols, t->res->dump_err,
			sizeof t->res->dump_err);
	if (!run)
		return;
	e = err_compare(run, x, (size_t)(rows * cols));
	free(run);
	if (block < 0) /* the patch embedding (operator level) */
		snprintf(name, sizeof name, "image-%02d-patch_embed", t->img);
	add(t->a, name, e, t->quiet, block < 0 ? "op" : "layer");
	if (!(e.max_rel <= t->res->tower_worst)) {
		t->res->tower_worst = e.max_rel;
		t->res->tower_block = block;
	}
	t->res->blocks++;
}

int vimg_reference(const char *dir, const struct vis_prompt *vp,
		   const char *layers_dir, double max_rel, int quiet,
		   json_t *doc, struct vimg_result *res, struct d0_err *err)
{
	struct refv_model *m = NULL;
	const struct model_config *c;
	int64_t H, row = 0;
	json_t *a = json_array();
	int rc = 0;
	if (refv_open(dir, &m, err) < 0) {
		json_decref(a);
		return -1;
	}
	c = refv_config(m);
	H = c->hidden;
	res->embeds = malloc((size_t)(vp->n_features * H) * sizeof(double) + 8);
	res->tower_block = -2;
	if (layers_dir && !quiet)
		printf("%-34s %12s %12s\n", "image layer (run vs float64)",
		       "max abs", "max rel");
	for (int i = 0; i < vp->n_img && rc == 0; i++) {
		const struct image_pixels *px = &vp->px[i];
		struct trace_ctx t = {layers_dir, i, quiet, max_rel, a, res};
		size_t n = (size_t)(px->rows * px->cols);
		double *pix = malloc(n * sizeof *pix + 8), *out = NULL;
		int64_t rows = 0;
		for (size_t j = 0; j < n; j++)
			pix[j] = px->values[j];
		rc = refv_encode(m, pix, px->rows, px->cols,
				 vp->grid_thw + 3 * i, 1, on_block, &t, &out,
				 &rows, err);
		free(pix);
		if (rc == 0 && rows != vp->img_tokens[i])
			rc = d0_errf(
			    err,
			    "image %d: the reference gives %lld feature "
			    "rows, the runtime's count is %lld",
			    i + 1, (long long)rows,
			    (long long)vp->img_tokens[i]);
		if (rc == 0) {
			memcpy(res->embeds + row * H, out,
			       (size_t)(rows * H) * sizeof *out);
			if (layers_dir && !res->dump_err[0]) {
				char name[48];
				float *run;
				snprintf(name, sizeof name,
					 "image-%02d-features", i);
				run = read_dump(layers_dir, name, rows, H,
						res->dump_err,
						sizeof res->dump_err);
				if (run) {
					struct err_stat e =
					    err_compare(run, out, (size_t)(rows * H));
					add(a, name, e, quiet, "layer");
					res->feat_worst =
					    fmax(res->feat_worst, e.max_rel);
					free(run);
				}
			}
			row += rows;
		}
		free(out);
	}
	if (rc == 0 && c->vision.mrope) {
		res->rope_pos =
		    malloc(3 * (size_t)vp->n * sizeof *res->rope_pos + 8);
		rc = refv_rope_index(c, vp->ids, vp->n, vp->grid_thw, vp->n_img,
				     res->rope_pos, &res->rope_delta, err);
		for (int64_t j = 0; rc == 0 && vp->rope_pos && j < 3 * vp->n;
		     j++)
			res->pos_wrong += res->rope_pos[j] != vp->rope_pos[j];
		if (rc == 0 && vp->rope_pos &&
		    res->rope_delta != vp->rope_delta)
			res->pos_wrong++;
	}
	res->fail_layer = res->dump_err[0] || !(res->tower_worst <= max_rel) ||
			  !(res->feat_worst <= max_rel) || res->pos_wrong;
	if (!layers_dir)
		res->fail_layer = res->pos_wrong > 0;
	json_object_set_new(doc, "image_layer", a);
	refv_close(m);
	return rc;
}

void vimg_result_free(struct vimg_result *res)
{
	free(res->embeds);
	free(res->rope_pos);
	memset(res, 0, sizeof *res);
}
