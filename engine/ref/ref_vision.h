/*
 * ref_vision.h - the float64 reference of the image channel (ref_vision.c):
 * the vision tower from the pixel values transformers' processor produces
 * to the features the LM's image placeholders take, and the M-RoPE
 * positions of a prompt with images.  Independent of runtime/ and kernels/:
 * its own weight decoding, plain loops in double, written from
 * transformers' modeling_qwen2_vl.py, modeling_qwen2_5_vl.py,
 * modeling_clip.py and modeling_llava.py.
 */
#ifndef DAY0_REF_VISION_H
#define DAY0_REF_VISION_H

#include <stdint.h>

#include "model.h"

struct refv_model; /* config.json + the tower's and projector's weights */

/* Open checkpoint dir (config.json, shards); the tower and projector are
 * read and decoded to double.  Fails for a text model or a tower the
 * engine has no table for. */
int refv_open(const char *dir, struct refv_model **out, struct d0_err *err);
void refv_close(struct refv_model *m);
const struct model_config *refv_config(const struct refv_model *m);

/* Called after the patch embedding (block -1) and after each block run,
 * with the tower's hidden states as the block saw them (Qwen2.5-VL: in
 * window order): rows x cols, row-major. */
typedef void (*refv_trace_fn)(void *ctx, int block, const double *x,
			      int64_t rows, int64_t cols);

/*
 * The image features.
 *   Qwen2-VL / Qwen2.5-VL: pixels are the processor's flattened patches,
 *     rows = sum of t*h*w over the images, cols = C*T*P*P, in its order;
 *     grid_thw[3*i..] each image's (t, h, w) in patches.  Out: one row of
 *     the LM's hidden size per merged patch, in the processor's order
 *     (sum of t*h*w / merge^2 rows).
 *   LLaVA: pixels are pixel_values, n_img images of [C][S][S] (S =
 *     image_size; rows = n_img * C, cols = S*S); grid_thw unused.  Out:
 *     per image the projector's output for the selected hidden state
 *     (vision_feature_layer, the class token dropped by "default").
 * *out is malloc'd (*out_rows x the LM's hidden size).
 */
int refv_encode(const struct refv_model *m, const double *pixels, int64_t rows,
		int64_t cols, const int64_t *grid_thw, int n_img,
		refv_trace_fn trace, void *ctx, double **out, int64_t *out_rows,
		struct d0_err *err);

/*
 * get_rope_index of Qwen2-VL / Qwen2.5-VL for one prompt (no padding):
 * ids[n] with each image as vision_start followed by its placeholder
 * tokens; pos[3*n] the t, h, w positions (pos[a*n + i]); *delta the
 * rope_deltas (max position + 1 - n), added to later decode positions.
 * An image's placeholders must number t*h*w / merge^2 of its grid: a
 * mismatch is an error naming the image.
 */
int refv_rope_index(const struct model_config *c, const int64_t *ids,
		    int64_t n, const int64_t *grid_thw, int n_img,
		    int64_t *pos, int64_t *delta, struct d0_err *err);

#endif
