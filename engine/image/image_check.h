/*
 * image_check.h - the image channel's release-day checks (image_check.c,
 * image_corpus.c; the step is step_image_check.c, docs/multimodal.md):
 *
 *   corpus      the images the processor is run on: a folder's PNG/JPEG
 *               files, or the built-in corpus encoded in memory
 *   features    image.features: the preprocessor against the checkpoint
 *               (config.json's vision_config, the tower's weight shapes,
 *               the normalization the tower was trained with) and the
 *               prompt's placeholder tokens against each image's merged
 *               patch count
 */
#ifndef DAY0_IMAGE_CHECK_H
#define DAY0_IMAGE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"
#include "model.h"

/* One image file's bytes, as read (or encoded by the built-in corpus). */
struct image_file {
	char name[256];	 /* the path, or "builtin:NAME" */
	uint8_t *bytes;
	size_t len;
	int uniform;	 /* built-in: every pixel image_corpus_uniform_rgb */
};

extern const uint8_t image_corpus_uniform_rgb[3];

/* The built-in corpus: PNG (RGB, RGBA, gray, gray+alpha, palette, 16-bit
 * RGB and gray, 1x1, a 40:1 strip) and JPEG (baseline 800x600,
 * progressive, gray), encoded in memory. */
int image_corpus_builtin(struct image_file **out, int *n, struct d0_err *err);
/* Every *.png, *.jpg, *.jpeg in dir (sorted by name), read whole; an
 * unreadable file or a folder without images is an error naming it. */
int image_corpus_dir(const char *dir, struct image_file **out, int *n,
		     struct d0_err *err);
void image_files_free(struct image_file *f, int n);

/*
 * The normalization the checkpoint's tower was trained with: config.json's
 * vision_config.image_mean/image_std when the release records them there,
 * else the tower family's (OpenAI CLIP's for the Qwen2-VL/2.5-VL and CLIP
 * towers, 0.5/0.5 for SigLIP).  *source says which.  -1 when unknown.
 */
int image_trained_norm(const struct model_config *c, const char *config_path,
		       double mean[3], double std[3], const char **source);

/* One disagreement image.features names. */
struct image_finding {
	char what[400];
};

/*
 * The preprocessor (its file prep_path, parsed p) against the checkpoint
 * in dir (config.json parsed into c): patch, temporal patch and merge
 * sizes against vision_config and against the patch embedding's and the
 * merger's weight shapes; CLIP's crop against image_size and the learned
 * positions; mean/std against image_trained_norm (a swap named as one);
 * the projector's output against the LM's hidden size.  Appends to f (up
 * to max); returns how many were found, -1 with err when the checkpoint
 * cannot be read.
 */
int image_features_check(const char *dir, const struct model_config *c,
			 const char *prep_path,
			 const struct image_prep_config *p,
			 struct image_finding *f, int max, struct d0_err *err);

/* The placeholder tokens the tower gives for an image the processor
 * turned into px: merged patches (Qwen2-VL: rows / the tower's merge^2),
 * or CLIP's grid (+ the class token with "full"). */
int64_t image_tower_tokens(const struct model_config *c,
			   const struct image_pixels *px);

#endif
