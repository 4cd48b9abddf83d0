/*
 * vis_run.c - `run --image`'s part (vis_run.h): the prompt's images
 * prepared on every rank (the expanded ids and the M-RoPE positions every
 * stage needs), the tower run on the ranks of stage 0 (the features only
 * they splice), and, for validate's layer level, the tower's hidden states
 * after the patch embedding and each block, and the merger's output,
 * dumped beside the LM's layers:
 *
 *   image-II-embed.safetensors      the embedding (Qwen2.5-VL: window order)
 *   image-II-block-BBB.safetensors  after block BBB
 *   image-II-features.safetensors   the merger / projector output
 *
 * each one F32 tensor "hidden" [rows][cols].
 */
#include "vis_run.h"

#include "rt_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int write_f32_tensor(const char *path, const char *name, const float *v,
		     uint64_t rows, uint64_t cols, struct d0_err *err);

int vis_run_prepare(struct vis_run *vr, const char *dir, const char *preproc,
		    char *const *images, int n_img, struct layout_opts *lay,
		    struct d0_err *err)
{
	char *cp = path_join(dir, "config.json");
	int rc;
	memset(vr, 0, sizeof *vr);
	rc = model_config_load(cp, &vr->c, err);
	free(cp);
	if (rc < 0)
		return VIS_RUN_INPUT;
	vr->have_config = 1;
	if (vr->c.vision.kind == VISION_NONE) {
		if (n_img) {
			d0_errf(err,
				"%s: a text model (no vision_config): --image "
				"needs a vision-language checkpoint",
				dir);
			return VIS_RUN_INPUT;
		}
		return 0;
	}
	if (vis_prompt_prepare(&vr->c, dir, preproc, images, n_img, lay->tokens,
			       lay->ntok, &vr->vp, err) < 0)
		return strncmp(err->msg, "image.features", 14)
			   ? VIS_RUN_INPUT
			   : VIS_RUN_FEATURES;
	vr->on = 1;
	if (vr->vp.n > 1 << 30) {
		d0_errf(err, "a prompt of %lld tokens", (long long)vr->vp.n);
		return VIS_RUN_INPUT;
	}
	free(lay->tokens);
	lay->tokens = malloc((size_t)vr->vp.n * sizeof *lay->tokens + 8);
	memcpy(lay->tokens, vr->vp.ids, (size_t)vr->vp.n * sizeof *lay->tokens);
	lay->ntok = (int)vr->vp.n;
	return 0;
}

static void keep_trace(void *ctx, int block, const float *x, int64_t rows,
		       int64_t cols)
{
	struct vis_run *vr = ctx;
	struct vis_dump *d;
	vr->dumps =
	    realloc(vr->dumps, (size_t)(vr->ndumps + 1) * sizeof *vr->dumps);
	d = &vr->dumps[vr->ndumps++];
	if (block < 0)
		snprintf(d->name, sizeof d->name, "image-%02d-embed", vr->cur);
	else
		snprintf(d->name, sizeof d->name, "image-%02d-block-%03d",
			 vr->cur, block);
	d->rows = rows;
	d->cols = cols;
	d->v = malloc((size_t)(rows * cols) * 4 + 4);
	memcpy(d->v, x, (size_t)(rows * cols) * 4);
}

int vis_run_encode(struct vis_run *vr, struct rt *r, int keep,
		   struct d0_err *err)
{
	int64_t H = vr->c.hidden, row = 0;
	struct timespec t0, t1;
	if (!vr->on || vr->vp.n_img == 0)
		return 0;
	if (vis_open(&vr->v, r, err) < 0)
		return -1;
	if (!vis_loaded(vr->v))
		return 0; /* another stage: positions only */
	vr->embeds = malloc((size_t)(vr->vp.n_features * H) * 4 + 4);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < vr->vp.n_img; i++) {
		float *o = vr->embeds + row * H;
		vr->cur = i;
		if (vis_encode_traced(vr->v, &vr->vp.px[i], o,
				      keep ? keep_trace : NULL, vr, err) < 0)
			return -1;
		if (keep) {
			struct vis_dump *d;
			keep_trace(vr, 0, o, vr->vp.img_tokens[i], H);
			d = &vr->dumps[vr->ndumps - 1];
			snprintf(d->name, sizeof d->name, "image-%02d-features",
				 i);
		}
		row += vr->vp.img_tokens[i];
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	vr->encode_s = (double)(t1.tv_sec - t0.tv_sec) +
		       1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	return 0;
}

void vis_run_summary(const struct vis_run *vr, char *buf, size_t n)
{
	double s, f;
	buf[0] = 0;
	if (!vis_loaded(vr->v))
		return;
	vis_patch_gemm_stats(vr->v, &s, &f);
	snprintf(buf, n,
		 ", vision: %d image%s -> %lld tokens in %.3f s (patch "
		 "GEMM %.3g GFLOP in %.4f s: %.1f GFLOP/s)",
		 vr->vp.n_img, vr->vp.n_img == 1 ? "" : "s",
		 (long long)vr->vp.n_features, vr->encode_s, f / 1e9, s,
		 s > 0 ? f / s / 1e9 : 0.0);
}

struct rt_seg vis_run_prefill_seg(const struct vis_run *vr, int T)
{
	struct rt_seg s;
	memset(&s, 0, sizeof s);
	s.len = T;
	if (vr->on) {
		s.embeds = vr->embeds;
		s.rope_pos = vr->vp.rope_pos;
	}
	return s;
}

struct rt_seg vis_run_decode_seg(const struct vis_run *vr)
{
	struct rt_seg s;
	memset(&s, 0, sizeof s);
	s.len = 1;
	s.rope_delta = vr->on ? vr->vp.rope_delta : 0;
	return s;
}

int vis_run_dump(const struct vis_run *vr, const char *dir, struct d0_err *err)
{
	for (int i = 0; i < vr->ndumps; i++) {
		char name[80], *p;
		int rc;
		snprintf(name, sizeof name, "%s.safetensors",
			 vr->dumps[i].name);
		p = path_join(dir, name);
		rc = write_f32_tensor(p, "hidden", vr->dumps[i].v,
				      (uint64_t)vr->dumps[i].rows,
				      (uint64_t)vr->dumps[i].cols, err);
		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

void vis_run_free(struct vis_run *vr)
{
	for (int i = 0; i < vr->ndumps; i++)
		free(vr->dumps[i].v);
	free(vr->dumps);
	free(vr->embeds);
	vis_close(vr->v);
	if (vr->on)
		vis_prompt_free(&vr->vp);
	if (vr->have_config)
		model_config_free(&vr->c);
	memset(vr, 0, sizeof *vr);
}
