/*
 * ops_vision.h - the image channel's kernels (ops_vision.c): what the
 * vision towers need beyond the text kernels of model.h.  f32, row-major;
 * registered in the operator registry (ops.c) so coverage sees them.
 */
#ifndef DAY0_OPS_VISION_H
#define DAY0_OPS_VISION_H

#include <stdint.h>

/* LayerNorm over n with weight and bias (torch: biased variance). */
void op_layer_norm(float *y, const float *x, const float *w, const float *b,
		   int n, double eps);
/* gelu (erf), quick_gelu (x sigmoid(1.702 x)), gelu_pytorch_tanh, silu by
 * name, in place over n; -1 for an unknown name. */
int op_act(const char *name, float *x, int64_t n);
int op_act_known(const char *name);
/*
 * 2D rotary of the Qwen vision blocks on x [heads][hd] of one patch at
 * (row, col): rotate_half over hd with angles row * inv[j] for the first
 * hd/4 frequency slots and col * inv[j] for the next hd/4 (inv [hd/4]).
 */
void op_rope_2d(float *x, int heads, int hd, int64_t row, int64_t col,
		const double *inv);
/*
 * MoonViT's 2D rotary (Rope2DPosEmb) on x [heads][hd] of the patch at
 * (row, col): head dims (2c, 2c+1) are one complex pair; pair 2i turns by
 * col * inv[i], pair 2i+1 by row * inv[i] (inv [hd/4] = theta^(-4i/hd)).
 */
void op_rope_2d_pairs(float *x, int heads, int hd, int64_t row, int64_t col,
		      const double *inv);
/*
 * torch's F.interpolate(mode="bicubic", align_corners=False) of in
 * [ih][iw][d] (channels last) to out [oh][ow][d]: the cubic convolution
 * with A = -0.75, source (o + 0.5) * in / out - 0.5, taps clamped to the
 * border, no antialiasing; weights and sums in double, rounded once.
 */
void op_interp_bicubic(float *out, const float *in, int ih, int iw, int d,
		       int oh, int ow);
/*
 * M-RoPE (Qwen2-VL's apply_multimodal_rotary_pos_emb, sections not
 * interleaved) on x [n_heads][head_dim]: frequency slot j of the rot_dim/2
 * takes the position of axis a where j falls in mrope_section a.
 */
void op_mrope(float *x, int n_heads, int head_dim, int rot_dim,
	      const int64_t pos[3], const int64_t section[3],
	      const double *inv_freq, double attn_factor);
/*
 * Bidirectional softmax attention within segments: q, k, v [rows][ld] and
 * out [rows][out_ld] with head h at column h*hd; the rows of
 * bounds[s-1]..bounds[s] attend each other only (nb bounds, bounds[0] =
 * 0).  scratch holds the longest segment's rows squared floats.
 */
void op_attention_segments(float *out, int64_t out_ld, const float *q,
			   const float *k, const float *v, int64_t ld,
			   int heads, int hd, const int64_t *bounds, int nb,
			   float *scratch);

/* The image splice: the rows of embeds, in order, replace the rows of h
 * [T][H] whose token is image_token; returns the rows used. */
int op_image_splice(float *h, int H, const int64_t *tokens, int T,
		    int64_t image_token, const float *embeds);

#endif
