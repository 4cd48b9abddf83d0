/*
 * image_check.c - image.features: does what the processor produces fit
 * the tower the checkpoint holds?  A preprocessor that disagrees with the
 * checkpoint does not crash anything: a wrong mean/std feeds the tower
 * shifted values, a wrong patch size gives rows of the wrong width, a
 * wrong merge size or one placeholder too few shifts every token after the
 * image.  The result is plausible-looking garbage, so each disagreement is
 * found here, before any forward pass, and named.
 *
 * Where the truth comes from: config.json's vision_config (patch, merge,
 * temporal patch, image size), the weights themselves (the patch
 * embedding's kernel is [D, C, T, P, P] or [D, C, P, P], the merger's
 * first linear is [D m^2, D m^2], CLIP's learned positions are (S/P)^2 +
 * 1 rows), and the normalization the tower family was trained with
 * (image_trained_norm).
 */
#include "image_check.h"

#include "weights.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <strings.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenAI CLIP's normalization: Qwen2-VL / Qwen2.5-VL's towers and the
 * CLIP ViT-L/14 of LLaVA-1.5 were trained with it (their processors'
 * image_mean/image_std as released). */
static const double clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
static const double clip_std[3] = {0.26862954, 0.26130258, 0.27577711};

static int read_triple(json_t *v, double out[3])
{
	if (json_is_number(v)) {
		out[0] = out[1] = out[2] = json_number_value(v);
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) != 3)
		return -1;
	for (int i = 0; i < 3; i++) {
		if (!json_is_number(json_array_get(v, (size_t)i)))
			return -1;
		out[i] = json_number_value(json_array_get(v, (size_t)i));
	}
	return 0;
}

int image_trained_norm(const struct model_config *c, const char *config_path,
		       double mean[3], double std[3], const char **source)
{
	json_t *doc = config_path ? json_load_file(config_path, 0, NULL) : NULL;
	json_t *vc = doc ? json_object_get(doc, "vision_config") : NULL;
	int rc = -1;
	if (vc && !read_triple(json_object_get(vc, "image_mean"), mean) &&
	    !read_triple(json_object_get(vc, "image_std"), std)) {
		*source = "config.json vision_config.image_mean/image_std";
		rc = 0;
	} else if (c->vision.kind == VISION_QWEN2_VL ||
		   c->vision.kind == VISION_QWEN2_5_VL ||
		   (c->vision.kind == VISION_CLIP &&
		    !strstr(c->vision.tower_type, "siglip"))) {
		memcpy(mean, clip_mean, sizeof clip_mean);
		memcpy(std, clip_std, sizeof clip_std);
		*source = c->vision.kind == VISION_CLIP
			      ? "the CLIP tower's training normalization "
				"(OpenAI CLIP)"
			      : "the Qwen-VL tower's training normalization "
				"(OpenAI CLIP)";
		rc = 0;
	} else if (c->vision.kind == VISION_CLIP) {
		for (int i = 0; i < 3; i++)
			mean[i] = std[i] = 0.5;
		*source = "the SigLIP tower's training normalization (0.5)";
		rc = 0;
	} else if (c->vision.kind == VISION_KIMI) {
		for (int i = 0; i < 3; i++)
			mean[i] = std[i] = 0.5;
		*source = "MoonViT's training normalization (0.5, Kimi-VL's "
			  "released processor)";
		rc = 0;
	}
	json_decref(doc);
	return rc;
}

/* The shape of tensor name in the checkpoint dir; 0 found, 1 absent,
 * -1 with err. */
static int tensor_shape(const struct ckpt *ck, const char *name, int *ndim,
			uint64_t shape[ST_MAX_DIMS], struct d0_err *err)
{
	for (size_t s = 0; s < ck->nshards; s++) {
		struct st_file f;
		const struct st_tensor *t;
		if (st_open(ck->shards[s].path, &f, err) < 0)
			return -1;
		t = st_find(&f, name);
		if (t) {
			*ndim = t->ndim;
			memcpy(shape, t->shape, sizeof t->shape);
			st_free(&f);
			return 0;
		}
		st_free(&f);
	}
	return 1;
}

static void add(struct image_finding *f, int max, int *n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void add(struct image_finding *f, int max, int *n, const char *fmt, ...)
{
	va_list ap;
	if (*n < max) {
		va_start(ap, fmt);
		vsnprintf(f[*n].what, sizeof f[*n].what, fmt, ap);
		va_end(ap);
	}
	(*n)++;
}

static int close3(const double a[3], const double b[3])
{
	for (int i = 0; i < 3; i++)
		if (fabs(a[i] - b[i]) > 1e-6)
			return 0;
	return 1;
}

static void norm_check(const struct model_config *c, const char *config_path,
		       const char *prep_path, const struct image_prep_config *p,
		       struct image_finding *f, int max, int *n)
{
	double m[3], s[3];
	const char *src;
	if (!p->do_normalize || image_trained_norm(c, config_path, m, s, &src))
		return;
	if (close3(p->mean, s) && close3(p->std, m) && !close3(m, s))
		add(f, max, n,
		    "%s: image_mean and image_std are swapped: image_mean is "
		    "[%.8g, %.8g, %.8g], the std of %s",
		    prep_path, p->mean[0], p->mean[1], p->mean[2], src);
	else if (!close3(p->mean, m))
		add(f, max, n,
		    "%s: image_mean [%.8g, %.8g, %.8g] is not [%.8g, %.8g, "
		    "%.8g], %s",
		    prep_path, p->mean[0], p->mean[1], p->mean[2], m[0], m[1],
		    m[2], src);
	else if (!close3(p->std, s))
		add(f, max, n,
		    "%s: image_std [%.8g, %.8g, %.8g] is not [%.8g, %.8g, "
		    "%.8g], %s",
		    prep_path, p->std[0], p->std[1], p->std[2], s[0], s[1],
		    s[2], src);
}

static int qwen_check(const struct ckpt *ck, const char *cfg_path,
		      const struct model_config *c, const char *prep_path,
		      const struct image_prep_config *p,
		      struct image_finding *f, int max, int *n,
		      struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	uint64_t sh[ST_MAX_DIMS];
	int nd, rc;
	if (p->kind != IMAGE_PROC_QWEN2VL) {
		add(f, max, n, "%s: image_processor_type %s is not a "
			       "Qwen2-VL processor, which %s's tower needs",
		    prep_path, p->type_name, v->vl_type);
		return 0;
	}
	if (p->patch_size != v->patch)
		add(f, max, n, "%s: patch_size %d but %s vision_config."
			       "patch_size is %lld",
		    prep_path, p->patch_size, cfg_path, (long long)v->patch);
	if (p->temporal_patch_size != v->temporal_patch)
		add(f, max, n, "%s: temporal_patch_size %d but %s "
			       "vision_config.temporal_patch_size is %lld",
		    prep_path, p->temporal_patch_size, cfg_path,
		    (long long)v->temporal_patch);
	if (p->merge_size != v->merge)
		add(f, max, n, "%s: merge_size %d but %s vision_config."
			       "spatial_merge_size is %lld",
		    prep_path, p->merge_size, cfg_path, (long long)v->merge);
	rc = tensor_shape(ck, "visual.patch_embed.proj.weight", &nd, sh, err);
	if (rc < 0)
		return -1;
	if (rc == 0 && nd == 5 &&
	    (sh[3] != (uint64_t)p->patch_size ||
	     sh[4] != (uint64_t)p->patch_size ||
	     sh[2] != (uint64_t)p->temporal_patch_size))
		add(f, max, n, "%s: patch %dx%d over %d frames but the patch "
			       "embedding visual.patch_embed.proj.weight is "
			       "[%llu, %llu, %llu, %llu, %llu] (patch %llu, "
			       "%llu frames)",
		    prep_path, p->patch_size, p->patch_size,
		    p->temporal_patch_size, (unsigned long long)sh[0],
		    (unsigned long long)sh[1], (unsigned long long)sh[2],
		    (unsigned long long)sh[3], (unsigned long long)sh[4],
		    (unsigned long long)sh[3], (unsigned long long)sh[2]);
	rc = tensor_shape(ck, "visual.merger.mlp.0.weight", &nd, sh, err);
	if (rc < 0)
		return -1;
	if (rc == 0 && nd == 2 && v->hidden > 0 &&
	    sh[1] != (uint64_t)(v->hidden * p->merge_size * p->merge_size))
		add(f, max, n, "%s: merge_size %d merges %lld values a token "
			       "but the merger visual.merger.mlp.0.weight "
			       "takes %llu (merge %lld)",
		    prep_path, p->merge_size,
		    (long long)(v->hidden * p->merge_size * p->merge_size),
		    (unsigned long long)sh[1], (long long)v->merge);
	return 0;
}

static int clip_check(const struct ckpt *ck, const char *cfg_path,
		      const struct model_config *c, const char *prep_path,
		      const struct image_prep_config *p,
		      struct image_finding *f, int max, int *n,
		      struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	const char *m = "vision_tower.vision_model.embeddings";
	char name[200];
	uint64_t sh[ST_MAX_DIMS];
	int nd, rc, h = p->do_center_crop ? p->crop_h : p->size_h,
		    w = p->do_center_crop ? p->crop_w : p->size_w;
	if (p->kind != IMAGE_PROC_CLIP) {
		add(f, max, n, "%s: image_processor_type %s is not a CLIP/SigLIP "
			       "processor, which %s's tower needs",
		    prep_path, p->type_name, v->vl_type);
		return 0;
	}
	if (h && (h != v->image_size || w != v->image_size))
		add(f, max, n, "%s: the tower is fed %dx%d but %s vision_config."
			       "image_size is %lld",
		    prep_path, w, h, cfg_path, (long long)v->image_size);
	/* No crop: what reaches the tower is the resize's output, which for
	 * a shortest edge (or no resize) has the image's own aspect, not the
	 * tower's square. */
	if (!p->do_center_crop && p->do_resize && p->shortest_edge)
		add(f, max, n, "%s: do_center_crop false: size.shortest_edge "
			       "%d keeps each image's aspect (a 4:3 image is "
			       "fed as %dx%d), but the tower takes %lldx%lld "
			       "(%s vision_config.image_size): expected "
			       "do_center_crop true with crop_size %lld",
		    prep_path, p->shortest_edge,
		    (int)((double)p->shortest_edge * 4 / 3), p->shortest_edge,
		    (long long)v->image_size, (long long)v->image_size, cfg_path,
		    (long long)v->image_size);
	else if (!p->do_center_crop && !p->do_resize)
		add(f, max, n, "%s: do_center_crop and do_resize false: each "
			       "image is fed at its own size, but the tower "
			       "takes %lldx%lld (%s vision_config.image_size)",
		    prep_path, (long long)v->image_size,
		    (long long)v->image_size, cfg_path);
	/* A crop larger than the resize pads every image with zeros
	 * (transformers' center_crop): the tower sees black borders. */
	if (p->do_center_crop && p->do_resize && p->shortest_edge &&
	    (p->shortest_edge < p->crop_h || p->shortest_edge < p->crop_w))
		add(f, max, n, "%s: size.shortest_edge %d is smaller than "
			       "crop_size %dx%d: the crop pads every image "
			       "with zeros; expected shortest_edge >= %d",
		    prep_path, p->shortest_edge, p->crop_w, p->crop_h,
		    p->crop_h > p->crop_w ? p->crop_h : p->crop_w);
	else if (p->do_center_crop && p->do_resize && !p->shortest_edge &&
		 (p->size_h < p->crop_h || p->size_w < p->crop_w))
		add(f, max, n, "%s: size %dx%d is smaller than crop_size %dx%d: "
			       "the crop pads every image with zeros",
		    prep_path, p->size_w, p->size_h, p->crop_w, p->crop_h);
	snprintf(name, sizeof name, "%s.patch_embedding.weight", m);
	rc = tensor_shape(ck, name, &nd, sh, err);
	if (rc < 0)
		return -1;
	if (rc == 0 && nd == 4 && sh[2] != (uint64_t)v->patch)
		add(f, max, n, "%s vision_config.patch_size %lld but %s is "
			       "[%llu, %llu, %llu, %llu]",
		    cfg_path, (long long)v->patch, name,
		    (unsigned long long)sh[0], (unsigned long long)sh[1],
		    (unsigned long long)sh[2], (unsigned long long)sh[3]);
	snprintf(name, sizeof name, "%s.position_embedding.weight", m);
	rc = tensor_shape(ck, name, &nd, sh, err);
	if (rc < 0)
		return -1;
	if (rc == 0 && h && nd >= 1 && rc == 0 && v->patch > 0 &&
	    sh[0] != (uint64_t)((h / v->patch) * (w / v->patch) + 1))
		add(f, max, n, "%s: %dx%d in patches of %lld is %lld positions "
			       "+ the class token, but %s has %llu rows",
		    prep_path, w, h, (long long)v->patch,
		    (long long)((h / v->patch) * (w / v->patch)), name,
		    (unsigned long long)sh[0]);
	return 0;
}

/* Kimi-VL: the processor against vision_config and the weights
 * (vision_tower.patch_embed.proj.weight [D, 3, P, P], the projector's
 * linear_1 taking D * merge^2). */
static int kimi_check(const struct ckpt *ck, const char *cfg_path,
		      const struct model_config *c, const char *prep_path,
		      const struct image_prep_config *p,
		      struct image_finding *f, int max, int *n,
		      struct d0_err *err)
{
	const struct vision_config *v = &c->vision;
	const char *pe = "vision_tower.patch_embed.proj.weight";
	const char *l1 = "multi_modal_projector.linear_1.weight";
	uint64_t sh[ST_MAX_DIMS];
	int nd, rc;
	if (p->kind != IMAGE_PROC_KIMI) {
		add(f, max, n, "%s: image_processor_type %s is not "
			       "KimiVLImageProcessor, which %s's tower needs",
		    prep_path, p->type_name, v->vl_type);
		return 0;
	}
	if (p->patch_size != v->patch)
		add(f, max, n, "%s: patch_size %d but %s vision_config."
			       "patch_size is %lld",
		    prep_path, p->patch_size, cfg_path, (long long)v->patch);
	if (p->merge_size != v->merge)
		add(f, max, n, "%s: merge_kernel_size %d but %s vision_config."
			       "merge_kernel_size is %lld",
		    prep_path, p->merge_size, cfg_path, (long long)v->merge);
	rc = tensor_shape(ck, pe, &nd, sh, err);
	if (rc < 0)
		return -1;
	if (rc == 0 && nd == 4 &&
	    (sh[2] != (uint64_t)p->patch_size || sh[3] != (uint64_t)p->patch_size))
		add(f, max, n, "%s: patch_size %d but the patch embedding %s is "
			       "[%llu, %llu, %llu, %llu]",
		    prep_path, p->patch_size, pe, (unsigned long long)sh[0],
		    (unsigned long long)sh[1], (unsigned long long)sh[2],
		    (unsigned long long)sh[3]);
	rc = tensor_shape(ck, l1, &nd, sh, err);
	if (rc < 0)
		return -1;
	if (rc == 0 && nd == 2 && v->hidden > 0 &&
	    sh[1] != (uint64_t)(v->hidden * p->merge_size * p->merge_size))
		add(f, max, n, "%s: merge_kernel_size %d merges %lld values a "
			       "token but the projector %s takes %llu",
		    prep_path, p->merge_size,
		    (long long)(v->hidden * p->merge_size * p->merge_size), l1,
		    (unsigned long long)sh[1]);
	return 0;
}

int image_features_check(const char *dir, const struct model_config *c,
			 const char *prep_path,
			 const struct image_prep_config *p,
			 struct image_finding *f, int max, struct d0_err *err)
{
	struct ckpt ck;
	char *cfg_path = path_join(dir, "config.json");
	int n = 0, rc;
	if (ckpt_open(dir, &ck, err) < 0) {
		free(cfg_path);
		return -1;
	}
	if (c->vision.kind == VISION_CLIP)
		rc = clip_check(&ck, cfg_path, c, prep_path, p, f, max, &n, err);
	else if (c->vision.kind == VISION_KIMI)
		rc = kimi_check(&ck, cfg_path, c, prep_path, p, f, max, &n, err);
	else
		rc = qwen_check(&ck, cfg_path, c, prep_path, p, f, max, &n, err);
	if (rc == 0)
		norm_check(c, cfg_path, prep_path, p, f, max, &n);
	if (rc == 0 && c->vision.out_hidden && c->vision.out_hidden != c->hidden)
		add(f, max, &n, "%s: the projector gives rows of %lld but the "
				"language model's hidden size is %lld",
		    cfg_path, (long long)c->vision.out_hidden,
		    (long long)c->hidden);
	ckpt_close(&ck);
	free(cfg_path);
	return rc < 0 ? -1 : n;
}

int64_t image_tower_tokens(const struct model_config *c,
			   const struct image_pixels *px)
{
	const struct vision_config *v = &c->vision;
	if (v->kind == VISION_CLIP) {
		int64_t g = v->patch > 0 ? (px->height / v->patch) *
						   (px->width / v->patch)
					 : 0;
		return g + (strcmp(v->select_strategy, "full") ? 0 : 1);
	}
	return v->merge > 0 ? px->rows / (v->merge * v->merge) : 0;
}

/* ---------------------------------------------------------- a folder */

static int is_image_name(const char *s)
{
	const char *dot = strrchr(s, '.');
	return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") ||
		       !strcasecmp(dot, ".jpeg"));
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int image_corpus_dir(const char *dir, struct image_file **out, int *n,
		     struct d0_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	int k = 0, cap = 0, bad = 0;
	struct image_file *f;
	if (!d)
		return d0_errf(err, "%s: cannot open the image folder: %s", dir,
			       strerror(errno));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !is_image_name(e->d_name))
			continue;
		if (k == cap) {
			char **q = realloc(names, (size_t)(cap = cap ? 2 * cap
								     : 16) *
							  sizeof *q);
			if (!q)
				break;
			names = q;
		}
		names[k] = strdup(e->d_name);
		if (!names[k])
			break;
		k++;
	}
	closedir(d);
	if (!k) {
		free(names);
		return d0_errf(err, "%s: no .png, .jpg or .jpeg file in the "
			       "image folder", dir);
	}
	qsort(names, (size_t)k, sizeof *names, by_name);
	f = calloc((size_t)k, sizeof *f);
	for (int i = 0; f && i < k && !bad; i++) {
		char *path = path_join(dir, names[i]);
		FILE *fp = fopen(path, "rb");
		long len = -1;
		snprintf(f[i].name, sizeof f[i].name, "%s", path);
		free(path);
		if (fp && !fseek(fp, 0, SEEK_END) && (len = ftell(fp)) >= 0 &&
		    !fseek(fp, 0, SEEK_SET) && len <= (1L << 30) &&
		    (f[i].bytes = malloc(len ? (size_t)len : 1)) &&
		    fread(f[i].bytes, 1, (size_t)len, fp) == (size_t)len) {
			f[i].len = (size_t)len;
			fclose(fp);
			continue;
		}
		d0_errf(err, "%s: cannot read: %s", f[i].name,
			fp ? "read error or over 1 GiB" : strerror(errno));
		if (fp)
			fclose(fp);
		bad = 1;
	}
	for (int i = 0; i < k; i++)
		free(names[i]);
	free(names);
	if (bad) {
		image_files_free(f, k);
		return -1;
	}
	if (!f)
		return d0_errf(err, "%s: out of memory", dir);
	*out = f;
	*n = k;
	return 0;
}
