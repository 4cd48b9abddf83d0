/*
 * serve_chat.h - POST /v1/chat/completions (serve_chat.c): OpenAI chat
 * messages, with vLLM's image_url content parts (data: URLs only), turned
 * into a completion request the scheduler already knows how to run, plus
 * the image channel's inputs (features, M-RoPE positions) it attaches to
 * the request's segments.
 */
#ifndef DAY0_SERVE_CHAT_H
#define DAY0_SERVE_CHAT_H

#include <jansson.h>

#include "rt_batch.h"
#include "serve.h"
#include "vision.h"

/* A chat request's images (NULL on text-only requests). */
struct srv_chat_img {
	struct vis_prompt vp; /* pixels, expanded ids, M-RoPE positions */
	float *embeds;	      /* [vp.n_features][hidden] once encoded */
};

/* Rank 0 after the runtime is open: read DIR's config for the image
 * channel; images are accepted when the model has a supported tower and
 * the server has no pipeline stages (vl_why says otherwise). */
int srv_chat_setup(struct srv *s, const char *dir, int world, int pp,
		   struct d0_err *err);
void srv_chat_close(struct srv *s);

/*
 * Turn a chat body into a completion body (prompt as token ids, logprobs
 * as a count) for serve_http.c's parser; *img gets the images.  On a
 * refusal: NULL with *status, *param and msg set.
 */
json_t *srv_chat_request(struct srv *s, json_t *doc, struct srv_chat_img **img,
			 unsigned *status, const char **param, char *msg,
			 size_t n);
void srv_chat_img_free(struct srv_chat_img *img);
/* The text the template renders for one user message of one image then
 * text (probe --image's reference prompt); malloc'd. */
char *srv_chat_image_prompt(const struct model_config *c, const char *text);

/* chat.completion(.chunk) shapes for output tokens [from, to). */
json_t *srv_chat_choice(const struct srv_req *q, int from, int to,
			const char *finish);
json_t *srv_chat_obj(struct srv *s, const struct srv_req *q, json_t *choice);

/*
 * Rank 0's main thread, before the forward: the batch's image-bearing
 * segments get their features (the tower run on first use) and M-RoPE
 * positions (chunks sliced, later positions by rope_delta).
 */
int srv_chat_segs(struct srv *s, struct rt *r, struct srv_req *const *req,
		  struct rt_seg *seg, int nseg, struct d0_err *err);

/* With more than one rank (PP 1): the segments' image inputs from rank 0
 * to every rank (collective; see serve_chat.c).  -1 on every rank when
 * rank 0 passed fail. */
struct srv_chat_wire {
	int64_t *meta;
	float *f;
	int64_t *r;
	size_t cap_meta, cap_f, cap_r;
};
int srv_chat_bcast(struct srv_chat_wire *w, int64_t image_token,
		   int64_t hidden, const int64_t *tok, struct rt_seg *seg,
		   int nseg, int rank, int fail);
void srv_chat_wire_free(struct srv_chat_wire *w);

#endif
