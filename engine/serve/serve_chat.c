/*
 * serve_chat.c - POST /v1/chat/completions as vLLM accepts it
 * (serve_chat.h, docs/service.md).
 *
 * The messages are rendered with a fixed, documented template per family
 * (day0 has no Jinja engine to run tokenizer_config.json's chat_template):
 *   Qwen (model_type qwen*):  "<|im_start|>ROLE\nTEXT<|im_end|>\n" per
 *       message, a default system message first when none is given (as
 *       Qwen2/2.5(-VL)'s template does), "<|im_start|>assistant\n" last; an
 *       image part is "<|vision_start|><|image_pad|><|vision_end|>".
 *   LLaVA (llava*):  "USER: <image>\nTEXT ASSISTANT:" (llava-1.5's form).
 *   Kimi-VL (kimi*): "<|im_ROLE|>ROLE<|im_middle|>TEXT<|im_end|>" per
 *       message after a default system turn, an image part the media block
 *       "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"
 *       in the content's order, "<|im_assistant|>assistant<|im_middle|>"
 *       last (the release's chat_template); 1-D positions (no M-RoPE).
 *   anything else:   "ROLE: TEXT\n" per message, then "assistant:".
 * The text goes through the model's tokenizer (the same call as a string
 * prompt), each image's one placeholder is expanded to its token count
 * (vis_prompt_ids) and its M-RoPE positions computed (vis_rope_index);
 * the result is handed to the completion parser as token ids, so every
 * limit and sampling field behaves as on /v1/completions.
 *
 * Images come only as data: URLs (base64 PNG or JPEG, decoded with
 * OpenSSL's EVP_DecodeBlock): the server fetches nothing, so an http(s)
 * URL is a 400 that says so.  The tower runs on rank 0's main thread the
 * first time a request's segment is batched (srv_chat_segs); features and
 * positions stay with the request, so a preempted request recomputes
 * without encoding again; under TP the rows and positions go to every
 * rank with the batch (srv_chat_bcast).  Image-bearing requests never use
 * the prefix cache: their placeholder ids are equal for different images.
 */
#include "serve_chat.h"

#include "image.h"
#include "tokenizer.h"

#include <mpi.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TPL_QWEN, TPL_LLAVA, TPL_KIMI, TPL_PLAIN };

int srv_chat_setup(struct srv *s, const char *dir, int world, int pp,
		   struct d0_err *err)
{
	char *cp = path_join(dir, "config.json");
	struct model_config *c = calloc(1, sizeof *c);
	int rc = model_config_load(cp, c, err);
	free(cp);
	s->vl_dir = dir;
	if (rc < 0) {
		free(c);
		return -1;
	}
	s->vl = c;
	if (c->vision.kind == VISION_NONE)
		snprintf(s->vl_why, sizeof s->vl_why,
			 "this model (%s) is a text model: it takes no images",
			 c->model_type);
	else if (c->vision.kind != VISION_QWEN2_VL &&
		 c->vision.kind != VISION_QWEN2_5_VL &&
		 c->vision.kind != VISION_CLIP && c->vision.kind != VISION_KIMI)
		snprintf(s->vl_why, sizeof s->vl_why, "%.200s",
			 c->vision.missing);
	else if (pp != 1)
		snprintf(s->vl_why, sizeof s->vl_why,
			 "images are not served with pipeline stages (--pp %d) "
			 "in this version", pp);
	(void)world;
	return 0;
}

void srv_chat_close(struct srv *s)
{
	vis_close(s->vis);
	s->vis = NULL;
	free(s->vl);
	s->vl = NULL;
	free(s->chat_rope);
	s->chat_rope = NULL;
}

void srv_chat_img_free(struct srv_chat_img *img)
{
	if (!img)
		return;
	vis_prompt_free(&img->vp);
	free(img->embeds);
	free(img);
}

static int tpl_of(const struct model_config *c)
{
	const char *t = c ? c->model_type : "";
	if (c && c->vision.kind != VISION_NONE && c->vision.vl_type[0])
		t = c->vision.vl_type;
	if (!strncmp(t, "qwen", 4))
		return TPL_QWEN;
	if (!strncmp(t, "llava", 5))
		return TPL_LLAVA;
	if (!strncmp(t, "kimi", 4))
		return TPL_KIMI;
	return TPL_PLAIN;
}

/* Kimi-VL's chat_template (tokenizer_config.json): a default system turn,
 * each turn <|im_ROLE|>ROLE<|im_middle|>...<|im_end|>, an image as the
 * media block in the content's order */
#define KIMI_SYSTEM \
	"<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
#define KIMI_IMAGE "<|media_start|>image<|media_content|><|media_pad|><|media_end|>"

static int tpl_kind(const struct srv *s) { return tpl_of(s->vl); }

char *srv_chat_image_prompt(const struct model_config *c, const char *text)
{
	char *t = NULL;
	switch (tpl_of(c)) {
	case TPL_QWEN:
		if (asprintf(&t, "<|im_start|>system\nYou are a helpful assistant."
			     "<|im_end|>\n<|im_start|>user\n<|vision_start|>"
			     "<|image_pad|><|vision_end|>%s<|im_end|>\n"
			     "<|im_start|>assistant\n", text) < 0)
			abort();
		break;
	case TPL_LLAVA:
		if (asprintf(&t, "USER: <image>\n%s ASSISTANT:", text) < 0)
			abort();
		break;
	case TPL_KIMI:
		if (asprintf(&t, KIMI_SYSTEM "<|im_user|>user<|im_middle|>" KIMI_IMAGE
			     "%s<|im_end|><|im_assistant|>assistant<|im_middle|>",
			     text) < 0)
			abort();
		break;
	default:
		if (asprintf(&t, "user: <image>%s\nassistant:", text) < 0)
			abort();
	}
	return t;
}

/*
 * A data: URL's image, decoded and preprocessed into img slot i.  Errors
 * name the part (messages[M].content[P]) and what is wrong.
 */
static int data_image(const struct image_prep_config *pc, const char *url,
		      const char *where, struct image_pixels *px,
		      struct d0_err *err)
{
	const char *comma, *b64;
	size_t len;
	unsigned char *raw;
	int n, pad = 0, rc;
	struct image_rgb im;
	if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
		return d0_errf(err, "%s: image_url is an http(s) URL: this server "
			       "fetches nothing; send the image inline as "
			       "data:image/png;base64,... or data:image/jpeg;"
			       "base64,...", where);
	if (strncmp(url, "data:", 5))
		return d0_errf(err, "%s: image_url must be a data: URL "
			       "(data:image/png;base64,...)", where);
	comma = strchr(url, ',');
	if (!comma || comma - url < 12 ||
	    strncmp(comma - 7, ";base64", 7))
		return d0_errf(err, "%s: a malformed data URL: expected "
			       "data:image/png;base64,<data> (or image/jpeg)",
			       where);
	if (strncmp(url + 5, "image/", 6))
		return d0_errf(err, "%s: the data URL's media type is not "
			       "image/*", where);
	b64 = comma + 1;
	len = strlen(b64);
	if (len == 0 || len % 4 || len > (size_t)1 << 30)
		return d0_errf(err, "%s: the data URL's base64 is %s", where,
			       len ? "not a multiple of 4 characters long"
				   : "empty");
	raw = malloc(len / 4 * 3 + 4);
	n = EVP_DecodeBlock(raw, (const unsigned char *)b64, (int)len);
	if (n < 0) {
		free(raw);
		return d0_errf(err, "%s: the data URL's base64 does not decode "
			       "(a character outside the base64 alphabet)", where);
	}
	/* EVP_DecodeBlock counts '=' padding as zero bytes */
	pad = (b64[len - 1] == '=') + (b64[len - 2] == '=');
	n -= pad;
	rc = image_decode(raw, (size_t)n, where, 0, &im, err);
	free(raw);
	if (rc < 0)
		return -1;
	rc = image_preprocess(pc, &im, where, px, err);
	image_free(&im);
	return rc;
}

/* Append s to the growing text t. */
static void put(char **t, size_t *n, size_t *cap, const char *s)
{
	size_t k = strlen(s);
	if (*n + k + 1 > *cap) {
		*cap = (*n + k + 1) * 2;
		*t = realloc(*t, *cap);
	}
	memcpy(*t + *n, s, k + 1);
	*n += k;
}

json_t *srv_chat_request(struct srv *s, json_t *doc, struct srv_chat_img **img,
			 unsigned *status, const char **param, char *msg,
			 size_t n)
{
	json_t *msgs, *m, *out = NULL, *v, *ids;
	struct srv_chat_img *im = NULL;
	struct image_prep_config pc;
	int have_pc = 0, tpl = tpl_kind(s), has_system = 0;
	char *text = NULL, where[64];
	size_t tn = 0, tcap = 0, i;
	int64_t *tok = NULL, *exp = NULL, nexp = 0;
	int ntok = 0, cap_img = 0;
	struct d0_err e = {{0}};
#define REFUSE(st, field, ...) \
	do { *status = (st); *param = (field); snprintf(msg, n, __VA_ARGS__); \
	     goto fail; } while (0)
	*img = NULL;
	if (!json_is_object(doc))
		REFUSE(400, NULL, "the request body must be a JSON object");
	msgs = json_object_get(doc, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		REFUSE(400, "messages", "messages: required (a non-empty list of "
		       "{\"role\", \"content\"})");
	if (!s->tokenize)
		REFUSE(400, "messages", "chat needs the model's tokenizer.json, "
		       "and this model has none");
	im = calloc(1, sizeof *im);
	json_array_foreach(msgs, i, m) {
		const char *role;
		json_t *content = json_object_get(m, "content"), *part;
		size_t j;
		if (!json_is_object(m) ||
		    !json_is_string(json_object_get(m, "role")))
			REFUSE(400, "messages", "messages[%zu]: expected an object "
			       "with a string \"role\"", i);
		role = json_string_value(json_object_get(m, "role"));
		if (strcmp(role, "system") && strcmp(role, "user") &&
		    strcmp(role, "assistant"))
			REFUSE(400, "messages", "messages[%zu].role: '%.40s' (this "
			       "server takes system, user, assistant)", i, role);
		if (!strcmp(role, "system"))
			has_system = 1;
		if (tpl == TPL_QWEN) {
			if (i == 0 && strcmp(role, "system"))
				put(&text, &tn, &tcap, "<|im_start|>system\nYou are "
				    "a helpful assistant.<|im_end|>\n");
			put(&text, &tn, &tcap, "<|im_start|>");
			put(&text, &tn, &tcap, role);
			put(&text, &tn, &tcap, "\n");
		} else if (tpl == TPL_KIMI) {
			if (i == 0 && strcmp(role, "system"))
				put(&text, &tn, &tcap, KIMI_SYSTEM);
			put(&text, &tn, &tcap, "<|im_");
			put(&text, &tn, &tcap, role);
			put(&text, &tn, &tcap, "|>");
			put(&text, &tn, &tcap, role);
			put(&text, &tn, &tcap, "<|im_middle|>");
		} else if (tpl == TPL_LLAVA) {
			put(&text, &tn, &tcap, !strcmp(role, "user") ? "USER: "
					       : !strcmp(role, "assistant")
						   ? "ASSISTANT: " : "");
		} else {
			put(&text, &tn, &tcap, role);
			put(&text, &tn, &tcap, ": ");
		}
		if (json_is_string(content)) {
			put(&text, &tn, &tcap, json_string_value(content));
		} else if (json_is_array(content)) {
			/* LLaVA's template puts the images before the text */
			for (int pass = tpl == TPL_LLAVA ? 0 : 1; pass < 2; pass++)
			json_array_foreach(content, j, part) {
				const char *type =
				    json_string_value(json_object_get(part, "type"));
				snprintf(where, sizeof where,
					 "messages[%zu].content[%zu]", i, j);
				if (!type)
					REFUSE(400, "messages", "%s: expected an object "
					       "with a string \"type\"", where);
				if (!strcmp(type, "text")) {
					json_t *t = json_object_get(part, "text");
					if (!json_is_string(t))
						REFUSE(400, "messages", "%s.text: expected "
						       "a string", where);
					if (pass == 1)
						put(&text, &tn, &tcap,
						    json_string_value(t));
				} else if (!strcmp(type, "image_url")) {
					json_t *u = json_object_get(part, "image_url");
					const char *url;
					if (json_is_object(u))
						u = json_object_get(u, "url");
					if (!(url = json_string_value(u)))
						REFUSE(400, "messages", "%s.image_url: "
						       "expected {\"url\": \"data:...\"}",
						       where);
					if (tpl == TPL_LLAVA && pass == 1)
						continue;
					if (s->vl_why[0] || !s->vl)
						REFUSE(400, "messages", "%s: %s", where,
						       s->vl_why[0] ? s->vl_why
								    : "no config");
					if (!have_pc) {
						char *pp = path_join(s->vl_dir,
							"preprocessor_config.json");
						int r = image_prep_config_load(pp, &pc, &e);
						free(pp);
						if (r < 0)
							REFUSE(500, NULL, "%s", e.msg);
						have_pc = 1;
					}
					if (im->vp.n_img == cap_img) {
						cap_img = cap_img ? 2 * cap_img : 4;
						im->vp.px = realloc(im->vp.px, (size_t)cap_img * sizeof *im->vp.px);
						im->vp.img_tokens = realloc(im->vp.img_tokens, (size_t)cap_img * sizeof *im->vp.img_tokens);
						im->vp.grid_thw = realloc(im->vp.grid_thw, 3 * (size_t)cap_img * sizeof *im->vp.grid_thw);
					}
					{
						int k = im->vp.n_img;
						struct image_pixels *px = &im->vp.px[k];
						memset(px, 0, sizeof *px);
						if (data_image(&pc, url, where, px, &e) < 0)
							REFUSE(400, "messages", "%.480s", e.msg);
						im->vp.n_img++;
						im->vp.img_tokens[k] = vis_image_tokens(s->vl, px, &e);
						if (im->vp.img_tokens[k] < 0)
							REFUSE(400, "messages", "%s: %.400s", where, e.msg);
						im->vp.grid_thw[3 * k] = px->grid_t;
						im->vp.grid_thw[3 * k + 1] = px->grid_h;
						im->vp.grid_thw[3 * k + 2] = px->grid_w;
						im->vp.n_features += im->vp.img_tokens[k];
					}
					put(&text, &tn, &tcap,
					    tpl == TPL_QWEN ? "<|vision_start|><|image_pad|>"
							      "<|vision_end|>"
					    : tpl == TPL_LLAVA ? "<image>\n"
					    : tpl == TPL_KIMI ? KIMI_IMAGE : "<image>");
				} else {
					REFUSE(400, "messages", "%s.type: '%.40s' (this "
					       "server takes text and image_url)", where,
					       type);
				}
			}
		} else {
			REFUSE(400, "messages", "messages[%zu].content: expected a "
			       "string or a list of parts", i);
		}
		if (tpl == TPL_QWEN)
			put(&text, &tn, &tcap, "<|im_end|>\n");
		else if (tpl == TPL_KIMI)
			put(&text, &tn, &tcap, "<|im_end|>");
		else
			put(&text, &tn, &tcap, tpl == TPL_LLAVA ? " " : "\n");
	}
	(void)has_system;
	put(&text, &tn, &tcap, tpl == TPL_QWEN ? "<|im_start|>assistant\n"
			       : tpl == TPL_LLAVA ? "ASSISTANT:"
			       : tpl == TPL_KIMI ? "<|im_assistant|>assistant<|im_middle|>"
			       : "assistant:");
	if (s->tokenize(s->tokenize_ctx, text, &tok, &ntok, &e) < 0)
		REFUSE(400, "messages", "messages: %.400s", e.msg);
	if (im->vp.n_img || (s->vl && s->vl->vision.kind != VISION_NONE &&
			     !s->vl_why[0])) {
		/* a placeholder typed in the text without an image is refused
		 * here too (image.features) */
		if (vis_prompt_ids(s->vl, tok, ntok, im->vp.img_tokens,
				   im->vp.n_img, &exp, &nexp, &e) < 0)
			REFUSE(400, "messages", "%.480s", e.msg);
	} else {
		exp = tok;
		nexp = ntok;
		tok = NULL;
	}
	if (im->vp.n_img) {
		im->vp.ids = malloc((size_t)nexp * sizeof *exp + 8);
		memcpy(im->vp.ids, exp, (size_t)nexp * sizeof *exp);
		im->vp.n = nexp;
		if (s->vl->vision.mrope) {
			im->vp.rope_pos = malloc(3 * (size_t)nexp * sizeof *im->vp.rope_pos + 8);
			if (vis_rope_index(s->vl, exp, nexp, im->vp.grid_thw,
					   im->vp.n_img, im->vp.rope_pos,
					   &im->vp.rope_delta, &e) < 0)
				REFUSE(400, "messages", "%.480s", e.msg);
		}
	}
	/* the completion body: every other field as sent */
	out = json_object();
	ids = json_array();
	for (int64_t k = 0; k < nexp; k++)
		json_array_append_new(ids, json_integer(exp[k]));
	json_object_set_new(out, "prompt", ids);
	{
		const char *k;
		json_object_foreach(doc, k, v) {
			if (!strcmp(k, "messages") || !strcmp(k, "logprobs") ||
			    !strcmp(k, "top_logprobs") || !strcmp(k, "prompt") ||
			    !strcmp(k, "echo"))
				continue;
			json_object_set(out, !strcmp(k, "max_completion_tokens")
						 ? "max_tokens" : k, v);
		}
	}
	if (json_is_true(json_object_get(doc, "logprobs"))) {
		json_t *t = json_object_get(doc, "top_logprobs");
		json_object_set_new(out, "logprobs",
				    json_integer(json_is_integer(t)
						     ? json_integer_value(t) : 0));
	} else if ((v = json_object_get(doc, "logprobs")) &&
		   !json_is_null(v) && !json_is_boolean(v)) {
		REFUSE(400, "logprobs", "logprobs: expected true or false");
	}
	free(text);
	free(tok);
	free(exp);
	if (im->vp.n_img)
		*img = im;
	else
		srv_chat_img_free(im);
	return out;
fail:
#undef REFUSE
	json_decref(out);
	free(text);
	free(tok);
	free(exp);
	srv_chat_img_free(im);
	return NULL;
}

/* The answer's text of output tokens [0, k) (special tokens skipped). */
static char *out_text(const struct srv_req *q, int k)
{
	int32_t *t = malloc((size_t)k * sizeof *t + 4);
	char *txt = NULL;
	size_t len = 0;
	struct d0_err e = {{0}};
	for (int i = 0; i < k; i++)
		t[i] = (int32_t)q->out[i];
	if (!q->tok || tokenizer_decode(q->tok, t, (size_t)k,
					TOK_DECODE_SKIP_SPECIAL |
					    TOK_DECODE_SKIP_UNKNOWN,
					&txt, &len, &e) < 0)
		txt = strdup("");
	free(t);
	return txt;
}

/* Cut trailing U+FFFD (EF BF BD) characters off t. */
static void hold_fffd(char *t)
{
	size_t n = strlen(t);
	while (n >= 3 && !memcmp(t + n - 3, "\xEF\xBF\xBD", 3))
		n -= 3;
	t[n] = 0;
}

static json_t *chat_logprobs(const struct srv_req *q, int from, int to)
{
	json_t *content = json_array();
	int k = q->top_logprobs;
	char b[40];
	for (int i = from; i < to; i++) {
		json_t *tops = json_array();
		for (int j = 0; j < k; j++) {
			snprintf(b, sizeof b, "token_id:%d",
				 q->out_top_id[(size_t)i * k + j]);
			json_array_append_new(tops, json_pack("{s:s, s:f}", "token", b,
					      "logprob", (double)q->out_top_lp[(size_t)i * k + j]));
		}
		snprintf(b, sizeof b, "token_id:%lld", (long long)q->out[i]);
		json_array_append_new(content, json_pack("{s:s, s:f, s:o}", "token",
				      b, "logprob", (double)q->out_lp[i],
				      "top_logprobs", tops));
	}
	return json_pack("{s:o}", "content", content);
}

json_t *srv_chat_choice(const struct srv_req *q, int from, int to,
			const char *finish)
{
	json_t *ch, *msg, *ids = json_array();
	char *all = out_text(q, to), *before = from ? out_text(q, from) : strdup("");
	size_t nb;
	const char *add;
	/* streamed: the text tokens [from, to) add.  A token that ends inside
	 * a UTF-8 character decodes to a trailing U+FFFD that the next token
	 * may turn into the character: it is held back until then (or until
	 * the last chunk), so the deltas add up to the whole answer. */
	if (q->stream) {
		hold_fffd(before);
		if (!finish)
			hold_fffd(all);
	}
	nb = strlen(before);
	add = strncmp(all, before, nb) ? all + strlen(all) : all + nb;
	for (int i = from; i < to; i++)
		json_array_append_new(ids, json_integer(q->out[i]));
	if (q->stream) {
		msg = json_pack("{s:s}", "content", add);
		if (from == 0)
			json_object_set_new(msg, "role", json_string("assistant"));
	} else {
		msg = json_pack("{s:s, s:s}", "role", "assistant", "content", all);
	}
	ch = json_pack("{s:i, s:o, s:o, s:o}", "index", 0,
		       q->stream ? "delta" : "message", msg, "token_ids", ids,
		       "finish_reason", finish ? json_string(finish) : json_null());
	json_object_set_new(ch, "logprobs", q->top_logprobs >= 0
						  ? chat_logprobs(q, from, to)
						  : json_null());
	free(all);
	free(before);
	return ch;
}

json_t *srv_chat_obj(struct srv *s, const struct srv_req *q, json_t *choice)
{
	json_t *choices = json_array();
	if (choice)
		json_array_append_new(choices, choice);
	return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", q->id, "object",
			 q->stream ? "chat.completion.chunk" : "chat.completion",
			 "created", (json_int_t)q->created, "model", s->model_name,
			 "choices", choices);
}

int srv_chat_segs(struct srv *s, struct rt *r, struct srv_req *const *req,
		  struct rt_seg *seg, int nseg, struct d0_err *err)
{
	size_t need = 0, used = 0;
	for (int g = 0; g < nseg; g++)
		if (req[g]->img && req[g]->img->vp.rope_pos)
			need += 3 * (size_t)seg[g].len;
	if (need > s->chat_rope_cap) {
		s->chat_rope_cap = need;
		s->chat_rope = realloc(s->chat_rope, need * sizeof *s->chat_rope);
	}
	for (int g = 0; g < nseg; g++) {
		struct srv_chat_img *im = req[g]->img;
		const struct vis_prompt *vp;
		int64_t H, off = 0, p0 = seg[g].pos0, L = seg[g].len;
		if (!im)
			continue;
		vp = &im->vp;
		H = s->vl->hidden;
		if (!im->embeds) {
			int64_t row = 0;
			if (!s->vis && vis_open(&s->vis, r, err) < 0)
				return -1;
			im->embeds = malloc((size_t)(vp->n_features * H) * 4 + 4);
			for (int i = 0; i < vp->n_img; i++) {
				if (vis_encode(s->vis, &vp->px[i], im->embeds + row * H,
					       err) < 0)
					return -1;
				row += vp->img_tokens[i];
			}
		}
		/* the features of the placeholders before this segment */
		for (int64_t i = 0; i < p0 && i < vp->n; i++)
			off += vp->ids[i] == s->vl->vision.image_token_id;
		seg[g].embeds = im->embeds + off * H;
		if (!vp->rope_pos)
			continue;
		seg[g].rope_delta = vp->rope_delta;
		if (p0 >= vp->n)
			continue; /* decode: pos + rope_delta */
		{
			int64_t *rp = s->chat_rope + used;
			for (int a = 0; a < 3; a++)
				for (int64_t i = 0; i < L; i++) {
					int64_t p = p0 + i;
					rp[a * L + i] = p < vp->n ? vp->rope_pos[a * vp->n + p]
								  : p + vp->rope_delta;
				}
			seg[g].rope_pos = rp;
			used += 3 * (size_t)L;
		}
	}
	return 0;
}

/*
 * More than one rank (PP 1): rank 0's segment inputs to every rank.  Per
 * segment: the feature rows it splices (the placeholders among its
 * tokens), whether it has M-RoPE positions, its rope_delta; then the rows
 * and positions themselves.  fail (rank 0: the tower failed) travels too,
 * so every rank stops together.  buf/cap: the receiving ranks' scratch.
 */
int srv_chat_bcast(struct srv_chat_wire *w, int64_t image_token,
		   int64_t hidden, const int64_t *tok, struct rt_seg *seg,
		   int nseg, int rank, int fail)
{
	int64_t nrow = 0, nrope = 0, off = 0;
	size_t need = 3 * (size_t)nseg + 1;
	if (need > w->cap_meta) {
		w->cap_meta = need;
		w->meta = realloc(w->meta, need * sizeof *w->meta);
	}
	if (rank == 0) {
		w->meta[0] = fail;
		for (int g = 0; g < nseg; off += seg[g].len, g++) {
			int64_t k = 0;
			for (int i = 0; seg[g].embeds && i < seg[g].len; i++)
				k += tok[off + i] == image_token;
			w->meta[1 + 3 * g] = seg[g].embeds ? k : -1;
			w->meta[2 + 3 * g] = seg[g].rope_pos != NULL;
			w->meta[3 + 3 * g] = seg[g].rope_delta;
		}
	}
	MPI_Bcast(w->meta, (int)need, MPI_INT64_T, 0, MPI_COMM_WORLD);
	if (w->meta[0])
		return -1;
	for (int g = 0; g < nseg; g++) {
		nrow += w->meta[1 + 3 * g] > 0 ? w->meta[1 + 3 * g] : 0;
		nrope += w->meta[2 + 3 * g] ? 3 * (int64_t)seg[g].len : 0;
	}
	if ((size_t)(nrow * hidden) > w->cap_f) {
		w->cap_f = (size_t)(nrow * hidden);
		w->f = realloc(w->f, w->cap_f * sizeof *w->f);
	}
	if ((size_t)nrope > w->cap_r) {
		w->cap_r = (size_t)nrope;
		w->r = realloc(w->r, w->cap_r * sizeof *w->r);
	}
	if (rank == 0) { /* gather into one buffer each */
		int64_t fo = 0, ro = 0;
		for (int g = 0; g < nseg; g++) {
			int64_t k = w->meta[1 + 3 * g];
			if (k > 0)
				memcpy(w->f + fo * hidden, seg[g].embeds,
				       (size_t)(k * hidden) * sizeof *w->f);
			fo += k > 0 ? k : 0;
			if (w->meta[2 + 3 * g]) {
				memcpy(w->r + ro, seg[g].rope_pos,
				       3 * (size_t)seg[g].len * sizeof *w->r);
				ro += 3 * (int64_t)seg[g].len;
			}
		}
	}
	if (nrow)
		MPI_Bcast(w->f, (int)(nrow * hidden), MPI_FLOAT, 0, MPI_COMM_WORLD);
	if (nrope)
		MPI_Bcast(w->r, (int)nrope, MPI_INT64_T, 0, MPI_COMM_WORLD);
	if (rank != 0) {
		int64_t fo = 0, ro = 0;
		for (int g = 0; g < nseg; g++) {
			int64_t k = w->meta[1 + 3 * g];
			seg[g].embeds = k >= 0 ? w->f + fo * hidden : NULL;
			fo += k > 0 ? k : 0;
			seg[g].rope_pos = w->meta[2 + 3 * g] ? w->r + ro : NULL;
			ro += w->meta[2 + 3 * g] ? 3 * (int64_t)seg[g].len : 0;
			seg[g].rope_delta = w->meta[3 + 3 * g];
		}
	}
	return 0;
}

void srv_chat_wire_free(struct srv_chat_wire *w)
{
	free(w->meta);
	free(w->f);
	free(w->r);
	memset(w, 0, sizeof *w);
}
