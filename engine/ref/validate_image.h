/*
 * validate_image.h - validate's image levels (validate_image.c): the
 * image channel's kernels against float64 (operator), the runtime tower's
 * per-block states and merger output against ref_vision.c's (layer), and
 * the reference's features and M-RoPE positions that the end-to-end
 * float64 forward pass splices in (ref_hooks' embeds and rope_pos).
 */
#ifndef DAY0_VALIDATE_IMAGE_H
#define DAY0_VALIDATE_IMAGE_H

#include "engine.h"
#include "vision.h"

struct vimg_result {
	double *embeds;	   /* [n_features][hidden] the reference's features */
	int64_t *rope_pos; /* [3][n] get_rope_index's; NULL without M-RoPE */
	int64_t rope_delta;
	double op_worst;    /* the image kernels' worst max rel */
	double tower_worst; /* the tower's worst block (embedding included) */
	int tower_block;    /* which (-1: the patch embedding) */
	double feat_worst;  /* the merger / projector output */
	int blocks;	    /* block states compared */
	int pos_wrong; /* M-RoPE positions that differ from the runtime's */
	int fail_op, fail_layer;
	char dump_err[256]; /* a dump that could not be read ("" none) */
};

/* The image kernels (ops_vision.c) on random inputs against float64
 * written here; results appended to a (name, max_abs, max_rel) and to
 * res->op_worst. */
void vimg_op_level(struct vimg_result *res, json_t *a, int quiet);

/*
 * The reference for a prompt vp (vis_prompt_prepare's): refv_encode of
 * every image, compared block by block with layers_dir's image-* dumps
 * when layers_dir is given (layer level, bound max_rel), and
 * refv_rope_index's positions (compared with vp's).  -1 with err when the
 * reference cannot run (the tower's weights, a grid).
 */
int vimg_reference(const char *dir, const struct vis_prompt *vp,
		   const char *layers_dir, double max_rel, int quiet,
		   json_t *doc, struct vimg_result *res, struct d0_err *err);
void vimg_result_free(struct vimg_result *res);

#endif
