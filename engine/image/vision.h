/*
 * vision.h - the image channel in the runtime: the vision tower and its
 * merger/projector forward in f32 (vision.c), and what a prompt with images
 * hands the language model (placeholders expanded, M-RoPE positions).
 *
 * The tower is replicated on the ranks of pipeline stage 0 (the planner's
 * placement, layout.c): its features replace the embedding rows of the
 * image placeholder tokens there (struct rt_seg's `embeds`, rt_batch.h),
 * and only M-RoPE positions (`rope_pos`, `rope_delta`) travel with the
 * batch to the other stages.  Families: qwen2_vl, qwen2_5_vl (Conv3d patch
 * embedding as one GEMM over the flattened patches, 2D rotary, window
 * attention with fullatt_block_indexes, PatchMerger), llava (CLIP ViT to
 * vision_feature_layer, multi_modal_projector) and kimi_vl (MoonViT:
 * Conv2d patch embedding with bias, learned positions interpolated
 * bicubic, interleaved 2D rotary, 2x2 merge into the pre_norm projector;
 * its LM a deepseek_v3 MoE with 1-D positions).  docs/multimodal.md.
 *
 * Placeholder conventions (transformers' processors): an image is a run of
 * consecutive image_token_id tokens, one run per image in order; Qwen's
 * chat template puts vision_start before and vision_end after each run.
 */
#ifndef DAY0_VISION_H
#define DAY0_VISION_H

#include <stdint.h>

#include "image.h"
#include "model.h"
#include "ops_vision.h"

struct rt;
struct vis;

/*
 * Load the tower and projector of the runtime's model (r's config) through
 * its loader and accountant.  On ranks of pipeline stage 0 the weights are
 * loaded (replicated: every tensor-parallel rank holds them whole); on the
 * other stages *v holds no weights and vis_encode refuses.  Not collective.
 * A text model or a tower the engine cannot run is an error naming it.
 */
int vis_open(struct vis **v, struct rt *r, struct d0_err *err);
void vis_close(struct vis *v);
/* Does this rank hold the tower (stage 0)? */
int vis_loaded(const struct vis *v);

/* The LM tokens image px takes (Qwen: merged patches; CLIP: the grid, plus
 * the class token under select strategy "full"); -1 with err when px does
 * not fit the config (patch, merge, temporal, image_size). */
int64_t vis_image_tokens(const struct model_config *c,
			 const struct image_pixels *px, struct d0_err *err);

/* Called after the patch embedding (block -1) and after each block with
 * the tower's hidden states (Qwen2.5-VL: in window order, as the float64
 * reference's trace sees them), rows x cols row-major. */
typedef void (*vis_trace_fn)(void *ctx, int block, const float *x, int64_t rows,
			     int64_t cols);

/*
 * The features of one image: out [vis_image_tokens][LM hidden], in the
 * order its placeholders take them.  trace may be NULL.
 */
int vis_encode(struct vis *v, const struct image_pixels *px, float *out,
	       struct d0_err *err);
int vis_encode_traced(struct vis *v, const struct image_pixels *px, float *out,
		      vis_trace_fn trace, void *ctx, struct d0_err *err);

/* Seconds spent in the patch embedding GEMMs and the floating-point
 * operations they did, since vis_open (bench/image.sh's figure). */
void vis_patch_gemm_stats(const struct vis *v, double *seconds, double *flops);

/*
 * A prompt's ids with the images' placeholders in place.  In ids[n], each
 * run of image_token_id is one image: a run of one token is expanded to
 * the image's token count; a longer run must already hold exactly that
 * count.  A prompt without any placeholder gets them inserted before the
 * text (Qwen: vision_start, the run, vision_end per image).  The number of
 * runs must equal n_img.  Every mismatch is an error that names the image,
 * the count its pixels give and the count the prompt has, prefixed by
 * "image.features: ".  *out (malloc'd) holds *nout ids.
 */
int vis_prompt_ids(const struct model_config *c, const int64_t *ids, int64_t n,
		   const int64_t *img_tokens, int n_img, int64_t **out,
		   int64_t *nout, struct d0_err *err);

/*
 * M-RoPE positions of a prompt (transformers' get_rope_index for images):
 * pos[3*n] (pos[a*n + i], a = temporal, height, width) and *delta, the
 * offset later positions take (position of token i >= n: i + delta on all
 * three axes).  grid_thw[3*i] each image's (t, h, w) in patches.  The runs
 * must hold t*h*w/merge^2 tokens each (error as vis_prompt_ids).  For a
 * family without M-RoPE (llava) pos is i on every axis and delta 0.
 */
int vis_rope_index(const struct model_config *c, const int64_t *ids, int64_t n,
		   const int64_t *grid_thw, int n_img, int64_t *pos,
		   int64_t *delta, struct d0_err *err);

/*
 * Everything a prompt with images needs, from files: each image decoded
 * and preprocessed with preproc (NULL: DIR/preprocessor_config.json), its
 * token count checked against the tower (vis_image_tokens), the prompt's
 * placeholders expanded (vis_prompt_ids) and, for M-RoPE, its positions
 * (vis_rope_index).  n_img 0 is a text prompt (ids copied; a placeholder
 * in it is then an error).  Errors name the image file or the field.
 */
struct vis_prompt {
	int n_img;
	struct image_pixels *px; /* [n_img] */
	int64_t *img_tokens;	 /* [n_img] */
	int64_t *grid_thw;	 /* [3 n_img]: Qwen's (t, h, w); CLIP 0s */
	int64_t *ids, n;	 /* the prompt, placeholders expanded */
	int64_t *rope_pos;	 /* M-RoPE [3][n], NULL without M-RoPE */
	int64_t rope_delta;
	int64_t n_features; /* rows of features: sum of img_tokens */
};
int vis_prompt_prepare(const struct model_config *c, const char *dir,
		       const char *preproc, char *const *images, int n_img,
		       const int64_t *ids, int64_t n, struct vis_prompt *out,
		       struct d0_err *err);
void vis_prompt_free(struct vis_prompt *p);
/* "text-only", "image-only" (no token but placeholders and the vision
 * start/end markers) or "mixed". */
const char *vis_prompt_case(const struct model_config *c,
			    const struct vis_prompt *p);

#endif
