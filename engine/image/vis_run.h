/*
 * vis_run.h - what `run --image` adds to a run (vis_run.c): the prompt's
 * images prepared on every rank, the tower's features on stage 0, the
 * segments that carry them into the runtime, and the tower's dumps for
 * validate's layer level.
 */
#ifndef DAY0_VIS_RUN_H
#define DAY0_VIS_RUN_H

#include "engine.h"
#include "rt_batch.h"
#include "vision.h"

struct vis_dump {
	char name[48];
	int64_t rows, cols;
	float *v;
};

struct vis_run {
	struct model_config c;
	int have_config;
	int on; /* a vision-language model: vp holds the prompt */
	struct vis_prompt vp;
	struct vis *v;
	float *embeds; /* [vp.n_features][hidden], stage 0 */
	struct vis_dump *dumps;
	int ndumps, cur;
	double encode_s; /* the tower's wall time on this rank */
};

enum { VIS_RUN_INPUT = -1, VIS_RUN_FEATURES = -2 };

/*
 * Read DIR's config; for a vision-language model prepare the prompt with
 * its images and put the expanded ids into lay (tokens, ntok).  Returns 0,
 * VIS_RUN_INPUT (a bad file or option, err set) or VIS_RUN_FEATURES (the
 * placeholders do not match the images: err starts "image.features:").
 */
int vis_run_prepare(struct vis_run *vr, const char *dir, const char *preproc,
		    char *const *images, int n_img, struct layout_opts *lay,
		    struct d0_err *err);
/* Open the tower and encode the images on stage 0 (keep: the traces for
 * vis_run_dump); nothing on other stages or without images. */
int vis_run_encode(struct vis_run *vr, struct rt *r, int keep,
		   struct d0_err *err);
/* The prefill segment of T tokens and a decode step's segment. */
struct rt_seg vis_run_prefill_seg(const struct vis_run *vr, int T);
struct rt_seg vis_run_decode_seg(const struct vis_run *vr);
/* Write the kept traces into dir (see vis_run.c for the names). */
int vis_run_dump(const struct vis_run *vr, const char *dir, struct d0_err *err);
/* ", vision: N images -> T tokens in S s (patch GEMM G GFLOP/s)" for
 * run's summary line; "" where this rank ran no tower. */
void vis_run_summary(const struct vis_run *vr, char *buf, size_t n);
void vis_run_free(struct vis_run *vr);

#endif
