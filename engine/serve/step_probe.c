/*
 * step_probe.c - `day0-engine probe --url URL --model DIR`: endpoint
 * numerics, the numerics.endpoint item.
 *
 * A serving stack is proven without any dump file: for each prompt the
 * endpoint is asked for one greedy token with prompt logprobs (echo +
 * logprobs = K, the legacy completions form vLLM and day0 serve accept),
 * and every position's returned log-probabilities are compared with the
 * float64 reference forward pass of the checkpoint in DIR (engine/ref.c):
 *   top-1    the endpoint's most likely token equals the reference argmax
 *   max abs  |logprob(endpoint) - logprob(reference)| over the prompt
 *            tokens and every returned top-K alternative
 *   KL       KL(reference || endpoint), both renormalised over the
 *            returned support (the top-K ids): the drift of the shape of
 *            the distribution where the endpoint shows it.
 * Token ids are read from "token_id:N" keys (vLLM's
 * return_tokens_as_token_ids, which probe sends; day0 serve always does).
 */
#include "http_load.h"
#include "image.h"
#include "ref_hooks.h"
#include "serve_chat.h"
#include "tokenizer.h"
#include "validate_image.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/evp.h>

static int probe(int argc, char **argv);

const struct step_entry step_probe = {
	.name = "probe",
	.usage = "--url URL --model MODEL_DIR [--tokens 1,2,3 ...] [--prompts "
		 "FILE.jsonl] [--n N] [--len N] [--top K] [--served-model NAME] "
		 "[--max-abs X] [--kl-max Y] [--min-top1 F] [--timeout S] [--seed N] "
		 "[--json] [--events] [--image FILE [--image-text TEXT] [--gen N]]\n"
		 "  --url URL            the endpoint's base (http://host:port)\n"
		 "  --model DIR          the Hugging Face checkpoint it serves (the "
		 "float64 reference runs on it)\n"
		 "  --tokens LIST        a prompt as token ids (repeatable)\n"
		 "  --prompts FILE       JSONL lines {\"prompt\": [ids]}\n"
		 "  --n N, --len N       else N random prompts of LEN tokens "
		 "(default 4 x 16)\n"
		 "  --top K              top logprobs per position (default 5)\n"
		 "  --served-model NAME  model id to send (default: /v1/models' "
		 "first)\n"
		 "  --max-abs X          bound on the logprob difference (default "
		 "1e-3, f32 serving)\n"
		 "  --kl-max Y           bound on KL over the returned support "
		 "(default 1e-4)\n"
		 "  --min-top1 F         share of positions whose top-1 must agree "
		 "(default 1)\n"
		 "  --image FILE         an image prompt (repeatable): a chat "
		 "request with FILE as a data: URL and the --image-text, greedy, "
		 "--gen N tokens (default 4) with their top logprobs, against the "
		 "float64 reference with the image\n"
		 "  --image-text TEXT    the text beside each image (default "
		 "'Describe the image.')\n"
		 "  --json               one JSON document on stdout\n"
		 "  --events             numerics + numerics.endpoint check events\n"
		 "example: day0-engine probe --url http://127.0.0.1:8000 --model "
		 "/models/m --top 5",
	.summary = "endpoint numerics: prompt logprobs vs the float64 reference "
		   "(top-1, max abs, KL; numerics.endpoint)",
	.help =
		 "  --timeout S          seconds to wait for each HTTP answer (default 120)\n"
		 "  --seed N             the seed of the random prompts (with --n/--len)",
	.run = probe,
};

int parse_tokens(const char *s, int64_t **out, int *n); /* step_run.c */

struct probe_opts {
	const char *url, *model_dir, *prompts_file, *served, *image_text;
	char **token_args, **images;
	int nimages, gen;
	int ntoken_args, n, len, top, json, events;
	double max_abs, kl_max, min_top1, timeout;
	uint64_t seed;
};

struct prompt {
	int64_t *ids;
	int n;
};

struct tally {
	int positions, top1_ok, compared;
	double max_abs, kl_max, kl_sum;
	int worst_prompt, worst_pos;
};

static int parse(int argc, char **argv, struct probe_opts *o)
{
	static const struct option lo[] = {
		{"url", 1, 0, 'u'}, {"model", 1, 0, 'm'}, {"tokens", 1, 0, 'k'},
		{"prompts", 1, 0, 'p'}, {"n", 1, 0, 'n'}, {"len", 1, 0, 'l'},
		{"top", 1, 0, 't'}, {"served-model", 1, 0, 'S'},
		{"max-abs", 1, 0, 'a'}, {"kl-max", 1, 0, 'K'}, {"min-top1", 1, 0, '1'},
		{"timeout", 1, 0, 'T'}, {"seed", 1, 0, 'z'}, {"json", 0, 0, 'j'},
		{"events", 0, 0, 'E'}, {"image", 1, 0, 'I'},
		{"image-text", 1, 0, 'y'}, {"gen", 1, 0, 'g'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_probe;
	int ch;
	long v;
	char *end;
	memset(o, 0, sizeof *o);
	o->n = 4;
	o->len = 16;
	o->top = 5;
	o->max_abs = 1e-3;
	o->kl_max = 1e-4;
	o->min_top1 = 1;
	o->timeout = 120;
	o->token_args = calloc((size_t)argc + 1, sizeof *o->token_args);
	o->images = calloc((size_t)argc + 1, sizeof *o->images);
	o->gen = 4;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'u': o->url = optarg; break;
		case 'm': o->model_dir = optarg; break;
		case 'k': o->token_args[o->ntoken_args++] = optarg; break;
		case 'I': o->images[o->nimages++] = optarg; break;
		case 'y': o->image_text = optarg; break;
		case 'g':
			if (parse_long(optarg, 1, 1000, &v) < 0)
				return step_usage_error(S, "--gen: expected 1..1000");
			o->gen = (int)v;
			break;
		case 'p': o->prompts_file = optarg; break;
		case 'S': o->served = optarg; break;
		case 'n': case 'l': case 't':
			if (parse_long(optarg, ch == 't' ? 1 : 2, ch == 't' ? 20 : 100000,
				       &v) < 0)
				return step_usage_error(S, "--%s: expected %s",
							ch == 'n' ? "n" : ch == 'l' ? "len" : "top",
							ch == 't' ? "1..20" : "a count >= 2");
			*(ch == 'n' ? &o->n : ch == 'l' ? &o->len : &o->top) = (int)v;
			break;
		case 'a': case 'K': case '1': case 'T': {
			double x = strtod(optarg, &end);
			if (end == optarg || *end || x < 0 || (ch == '1' && x > 1))
				return step_usage_error(S, "--%s: expected a number >= 0%s",
							ch == 'a' ? "max-abs" : ch == 'K' ? "kl-max"
							: ch == '1' ? "min-top1" : "timeout",
							ch == '1' ? " and <= 1" : "");
			*(ch == 'a' ? &o->max_abs : ch == 'K' ? &o->kl_max
				: ch == '1' ? &o->min_top1 : &o->timeout) = x;
			break;
		}
		case 'z':
			if (parse_long(optarg, 0, 1L << 62, &v) < 0)
				return step_usage_error(S, "--seed: expected an integer");
			o->seed = (uint64_t)v;
			break;
		case 'j': o->json = 1; break;
		case 'E': o->events = 1; break;
		case 'h': step_help(S); return -1;
		default:
			return step_usage_error(S, "unknown or incomplete option '%s'",
						argv[optind - 1]);
		}
	}
	if (optind != argc)
		return step_usage_error(S, "unexpected argument '%s'", argv[optind]);
	if (!o->url || !o->model_dir)
		return step_usage_error(S, "--url and --model are required");
	return 0;
}

static int gather_prompts(const struct probe_opts *o, int64_t vocab,
			  struct prompt **out, int *n, struct d0_err *err)
{
	struct rng r;
	*out = NULL;
	*n = 0;
	for (int i = 0; i < o->ntoken_args; i++) {
		struct prompt p;
		if (parse_tokens(o->token_args[i], &p.ids, &p.n) < 0 || p.n < 2)
			return d0_errf(err, "--tokens %s: expected a comma list of at "
				       "least 2 token ids", o->token_args[i]);
		*out = realloc(*out, (size_t)(*n + 1) * sizeof **out);
		(*out)[(*n)++] = p;
	}
	if (o->prompts_file) {
		FILE *f = fopen(o->prompts_file, "r");
		char *line = NULL;
		size_t cap = 0, ln = 0;
		if (!f)
			return d0_errf(err, "%s: cannot open", o->prompts_file);
		while (getline(&line, &cap, f) > 0) {
			json_t *doc = json_loads(line, 0, NULL), *a, *t;
			struct prompt p = {0};
			size_t i;
			ln++;
			a = json_object_get(doc, "prompt");
			if (!json_is_array(a) || json_array_size(a) < 2) {
				json_decref(doc);
				free(line);
				fclose(f);
				return d0_errf(err, "%s:%zu: expected {\"prompt\": [at least "
					       "2 token ids]}", o->prompts_file, ln);
			}
			p.ids = calloc(json_array_size(a), sizeof *p.ids);
			json_array_foreach(a, i, t) p.ids[p.n++] = json_integer_value(t);
			json_decref(doc);
			*out = realloc(*out, (size_t)(*n + 1) * sizeof **out);
			(*out)[(*n)++] = p;
		}
		free(line);
		fclose(f);
	}
	if (*n)
		return 0;
	rng_seed(&r, o->seed);
	for (int i = 0; i < o->n; i++) {
		struct prompt p = {calloc((size_t)o->len, sizeof(int64_t)), o->len};
		for (int j = 0; j < o->len; j++)
			p.ids[j] = (int64_t)(rng_uniform(&r) * (double)vocab);
		*out = realloc(*out, (size_t)(*n + 1) * sizeof **out);
		(*out)[(*n)++] = p;
	}
	return 0;
}

/* "token_id:N" -> N, -1 otherwise. */
static long key_id(const char *k)
{
	char *end;
	long v;
	if (strncmp(k, "token_id:", 9))
		return -1;
	v = strtol(k + 9, &end, 10);
	return *end || end == k + 9 ? -1 : v;
}

/* Compare position `pos`'s returned top logprobs (dict) and the prompt
 * token's logprob with the reference row; updates t. */
static int compare_pos(json_t *dict, json_t *tok_lp, int64_t tok,
		       const double *ref_row, int64_t V, struct tally *t,
		       int pi, int pos, struct d0_err *err)
{
	double mx = ref_row[0], lz = 0, best_lp = -INFINITY;
	long best = -1;
	const char *k;
	json_t *v;
	double ps = 0, qs = 0, kl = 0;
	int64_t arg = 0;
	for (int64_t i = 1; i < V; i++)
		if (ref_row[i] > ref_row[arg])
			arg = i;
	mx = ref_row[arg];
	for (int64_t i = 0; i < V; i++)
		lz += exp(ref_row[i] - mx);
	lz = mx + log(lz);
#define DIFF(ep, id)                                                          \
	do {                                                                  \
		double d_ = fabs((ep) - (ref_row[id] - lz));                  \
		if (d_ > t->max_abs || isnan(d_)) {                           \
			t->max_abs = isnan(d_) ? INFINITY : d_;               \
			t->worst_prompt = pi;                                 \
			t->worst_pos = pos;                                   \
		}                                                             \
		t->compared++;                                                \
	} while (0)
	if (json_is_number(tok_lp))
		DIFF(json_number_value(tok_lp), tok);
	if (!json_is_object(dict) || !json_object_size(dict))
		return d0_errf(err, "prompt %d position %d: no top_logprobs returned "
			       "(does the server accept echo + logprobs?)", pi, pos);
	json_object_foreach(dict, k, v) {
		long id = key_id(k);
		if (id < 0)
			return d0_errf(err, "prompt %d position %d: top_logprobs key "
				       "'%s' is not token_id:N (vLLM: the server needs "
				       "return_tokens_as_token_ids)", pi, pos, k);
		if (id >= V) /* a well-formed id the checkpoint does not have */
			return d0_errf(err, "prompt %d position %d: top_logprobs key "
				       "'%s': id %ld is outside the %lld-token vocabulary "
				       "of --model: the server serves another model",
				       pi, pos, k, id, (long long)V);
		if (!json_is_number(v))
			return d0_errf(err, "prompt %d position %d: top_logprobs "
				       "'%s' is not a number", pi, pos, k);
		DIFF(json_number_value(v), id);
		if (json_number_value(v) > best_lp)
			best_lp = json_number_value(v), best = id;
		ps += exp(ref_row[id] - lz);
		qs += exp(json_number_value(v));
	}
#undef DIFF
	json_object_foreach(dict, k, v) {
		long id = key_id(k);
		double p = exp(ref_row[id] - lz) / ps, q = exp(json_number_value(v)) / qs;
		if (p > 0)
			kl += p * log(p / q);
	}
	if (kl < 0)
		kl = 0;
	t->kl_sum += kl;
	if (kl > t->kl_max)
		t->kl_max = kl;
	t->positions++;
	t->top1_ok += best == arg;
	return 0;
}

static int probe_prompt(const struct probe_opts *o, const char *model,
			const struct prompt *p, int pi, int64_t V,
			struct tally *t, struct d0_err *err)
{
	json_t *req = json_object(), *ids = json_array(), *doc, *lp, *tops, *tlp;
	double *ref = NULL;
	struct model_config cfg;
	struct http_buf b = {0};
	char *body, *url;
	long st;
	int rc = -1;
	for (int i = 0; i < p->n; i++)
		json_array_append_new(ids, json_integer(p->ids[i]));
	if (model)
		json_object_set_new(req, "model", json_string(model));
	json_object_set_new(req, "prompt", ids);
	json_object_set_new(req, "max_tokens", json_integer(1));
	json_object_set_new(req, "temperature", json_real(0));
	json_object_set_new(req, "echo", json_true());
	json_object_set_new(req, "logprobs", json_integer(o->top));
	json_object_set_new(req, "return_tokens_as_token_ids", json_true());
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	url = http_url(o->url, "/v1/completions");
	if (http_request(url, body, o->timeout, &st, &b, err) < 0) {
		free(url);
		free(body);
		return -1;
	}
	free(url);
	free(body);
	doc = json_loads(b.data, 0, NULL);
	if (st != 200) {
		d0_errf(err, "%s: POST /v1/completions: HTTP %ld: %.300s", o->url, st,
			b.data);
		free(b.data);
		json_decref(doc);
		return -1;
	}
	free(b.data);
	lp = json_object_get(json_array_get(json_object_get(doc, "choices"), 0),
			     "logprobs");
	tops = json_object_get(lp, "top_logprobs");
	tlp = json_object_get(lp, "token_logprobs");
	if (!json_is_array(tops) || json_array_size(tops) < (size_t)p->n + 1) {
		d0_errf(err, "prompt %d: the answer has %zu top_logprobs entries, "
			"expected the %d prompt positions + 1 (echo)", pi,
			json_array_size(tops), p->n);
		goto out;
	}
	if (ref_forward(o->model_dir, p->ids, p->n, &ref, NULL, &cfg, err) < 0)
		goto out;
	model_config_free(&cfg);
	/* position i (1..n-1) is predicted by reference row i-1; position n
	 * (the generated token) by row n-1 */
	for (int i = 1; i <= p->n; i++) {
		int64_t tok = i < p->n ? p->ids[i] : -1;
		if (compare_pos(json_array_get(tops, (size_t)i),
				tok >= 0 ? json_array_get(tlp, (size_t)i) : NULL, tok,
				ref + (size_t)(i - 1) * V, V, t, pi, i, err) < 0)
			goto out;
	}
	rc = 0;
out:
	free(ref);
	json_decref(doc);
	return rc;
}

/* 0 when file is a regular file probe can read and decode as PNG or
 * JPEG (the decoder's own checks: truncated, corrupt, zero-sized, over
 * the pixel limit), else -1 with err naming the file. */
static int image_check(const char *file, struct d0_err *err)
{
	char *raw = NULL;
	size_t len = 0;
	struct image_rgb im = {0};
	int rc;
	if (file_read_all(file, (size_t)256 << 20, &raw, &len, err) < 0)
		return -1;
	rc = image_decode((const uint8_t *)raw, len, file, 0, &im, err);
	image_free(&im);
	free(raw);
	return rc < 0 ? -1 : 0;
}

/*
 * An image prompt: the chat request (FILE as a data: URL beside the text,
 * greedy, o->gen tokens with top logprobs), then the float64 reference on
 * the same prompt (the template's text through the model's tokenizer,
 * placeholders expanded, the reference tower's features and M-RoPE
 * positions, vimg_reference) and the generated tokens: position j of the
 * answer is predicted by reference row T-1+j.
 */
static int probe_image(const struct probe_opts *o, const char *model,
		       const char *file, int pi, int64_t V, struct tally *t,
		       struct d0_err *err)
{
	const char *text = o->image_text ? o->image_text : "Describe the image.";
	struct model_config c;
	struct tokenizer *tk = NULL;
	struct vis_prompt vp = {0};
	struct vimg_result res = {0};
	struct http_buf b = {0};
	json_t *doc = NULL, *ch, *gen, *content, *req;
	char *raw = NULL, *durl = NULL, *body = NULL, *url, *ptext = NULL;
	int32_t *t32 = NULL;
	int64_t *ids = NULL, *seq = NULL, *pos = NULL;
	double *lg = NULL;
	size_t len = 0, k = 0;
	long st;
	int rc = -1, G, T;
	char *cp = path_join(o->model_dir, "config.json");
	if (model_config_load(cp, &c, err) < 0) {
		free(cp);
		return -1;
	}
	free(cp);
	if (file_read_all(file, (size_t)256 << 20, &raw, &len, err) < 0)
		goto out;
	{
		const char *x = strrchr(file, '.');
		int png = x && !strcasecmp(x, ".png");
		durl = malloc(32 + (len + 2) / 3 * 4 + 1);
		EVP_EncodeBlock((unsigned char *)durl +
				    sprintf(durl, "data:image/%s;base64,",
					    png ? "png" : "jpeg"),
				(const unsigned char *)raw, (int)len);
	}
	req = json_pack("{s:[{s:s, s:[{s:s, s:{s:s}}, {s:s, s:s}]}], s:i, s:f, "
			"s:b, s:i}", "messages", "role", "user", "content",
			"type", "image_url", "image_url", "url", durl, "type",
			"text", "text", text, "max_tokens", o->gen, "temperature",
			0.0, "logprobs", 1, "top_logprobs", o->top);
	if (model)
		json_object_set_new(req, "model", json_string(model));
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	url = http_url(o->url, "/v1/chat/completions");
	rc = http_request(url, body, o->timeout, &st, &b, err);
	free(url);
	if (rc < 0)
		goto out;
	rc = -1;
	doc = json_loads(b.data ? b.data : "", 0, NULL);
	if (st != 200) {
		d0_errf(err, "%s: image %s: POST /v1/chat/completions: HTTP %ld: "
			"%.300s", o->url, file, st, b.data ? b.data : "");
		goto out;
	}
	ch = json_array_get(json_object_get(doc, "choices"), 0);
	gen = json_object_get(ch, "token_ids");
	content = json_object_get(json_object_get(ch, "logprobs"), "content");
	G = (int)json_array_size(gen);
	if (!G || !json_is_array(content) || json_array_size(content) != (size_t)G) {
		d0_errf(err, "image %s: the answer has %d token_ids and %zu "
			"logprobs.content entries (expected equal, > 0)", file, G,
			json_array_size(content));
		goto out;
	}
	/* the reference's prompt: the same template, tokenizer, expansion */
	ptext = srv_chat_image_prompt(&c, text);
	if (tokenizer_open(o->model_dir, &tk, err) < 0 ||
	    tokenizer_encode(tk, ptext, strlen(ptext), 1, &t32, &k, err) < 0)
		goto out;
	ids = malloc((k + 1) * sizeof *ids);
	for (size_t i = 0; i < k; i++)
		ids[i] = t32[i];
	{
		char *imgs[1] = {(char *)file};
		json_t *vd = json_object();
		int r1 = vis_prompt_prepare(&c, o->model_dir, NULL, imgs, 1, ids,
					    (int64_t)k, &vp, err);
		if (r1 == 0)
			r1 = vimg_reference(o->model_dir, &vp, NULL, 1, 1, vd,
					    &res, err);
		json_decref(vd);
		if (r1 < 0)
			goto out;
	}
	T = (int)vp.n;
	seq = malloc((size_t)(T + G) * sizeof *seq);
	memcpy(seq, vp.ids, (size_t)T * sizeof *seq);
	for (int j = 0; j < G; j++)
		seq[T + j] = json_integer_value(json_array_get(gen, (size_t)j));
	if (res.rope_pos) {
		int L = T + G - 1;
		pos = malloc(3 * (size_t)L * sizeof *pos);
		for (int a = 0; a < 3; a++)
			for (int i = 0; i < L; i++)
				pos[(size_t)a * L + i] =
				    i < T ? res.rope_pos[(size_t)a * T + i]
					  : i + res.rope_delta;
	}
	{
		struct ref_hooks hk = {.embeds = res.embeds, .splice_upto = T,
				       .rope_pos = pos};
		struct model_config rc2;
		int r2 = ref_forward_hooked(o->model_dir, seq, T + G - 1, &lg, NULL,
					    &rc2, &hk, err);
		if (r2 == 0)
			model_config_free(&rc2);
		if (r2 < 0)
			goto out;
	}
	for (int j = 0; j < G; j++) {
		json_t *e = json_array_get(content, (size_t)j), *dict = json_object(),
		       *x;
		size_t i;
		int r3;
		json_array_foreach(json_object_get(e, "top_logprobs"), i, x)
			json_object_set(dict, json_string_value(json_object_get(x, "token"))
						  ? json_string_value(json_object_get(x, "token"))
						  : "?",
					json_object_get(x, "logprob"));
		r3 = compare_pos(dict, json_object_get(e, "logprob"), seq[T + j],
				 lg + (size_t)(T - 1 + j) * V, V, t, pi, T + j, err);
		json_decref(dict);
		if (r3 < 0)
			goto out;
	}
	rc = 0;
out:
	free(raw);
	free(durl);
	free(body);
	free(b.data);
	free(ptext);
	free(t32);
	free(ids);
	free(seq);
	free(pos);
	free(lg);
	json_decref(doc);
	tokenizer_free(tk);
	vis_prompt_free(&vp);
	vimg_result_free(&res);
	model_config_free(&c);
	return rc;
}

static const char *served_model(const struct probe_opts *o, char *buf,
				size_t n)
{
	return o->served ? o->served
			 : http_served_model(o->url, buf, n, NULL, 0);
}

static int probe(int argc, char **argv)
{
	struct probe_opts o;
	struct model_config cfg;
	struct d0_err err = {{0}};
	struct prompt *ps = NULL;
	struct tally t = {0};
	char mbuf[256], detail[1200], *cfgp;
	const char *model;
	int np = 0, ntext, rc = parse(argc, argv, &o), fail;
	double top1;
	if (rc) {
		free(o.token_args);
		free(o.images);
		return rc < 0 ? EXIT_OK : rc;
	}
	events_init(stdout, o.events);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	events_stage("probe", "start", 0, 0, o.url);
	cfgp = path_join(o.model_dir, "config.json");
	rc = model_config_load(cfgp, &cfg, &err);
	free(cfgp);
	if (rc < 0 || (!o.nimages && gather_prompts(&o, cfg.vocab, &ps, &np,
						    &err) < 0)) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage("probe", "end", 1, EXIT_USAGE, err.msg);
		free(o.token_args);
		free(o.images);
		curl_global_cleanup();
		return EXIT_USAGE;
	}
	/* the images are local input: a path that is not a readable PNG or
	 * JPEG is a usage error naming it, found before any request; so is
	 * an image for a text model (run and validate say the same) */
	if (o.nimages && cfg.vision.kind == VISION_NONE)
		d0_errf(&err, "probe: %s: a text model (no vision_config): "
			"--image needs a vision-language checkpoint",
			o.model_dir);
	for (int i = 0; i < o.nimages; i++)
		if (err.msg[0] || image_check(o.images[i], &err) < 0) {
			fprintf(stderr, "day0-engine: %s%s\n",
				err.msg[0] == 'p' && !strncmp(err.msg, "probe: ", 7)
				    ? "" : "probe --image ", err.msg);
			events_stage("probe", "end", 1, EXIT_USAGE, err.msg);
			for (int j = 0; j < np; j++)
				free(ps[j].ids);
			free(ps);
			free(o.token_args);
			free(o.images);
			model_config_free(&cfg);
			curl_global_cleanup();
			return EXIT_USAGE;
		}
	model = served_model(&o, mbuf, sizeof mbuf);
	rc = 0;
	for (int i = 0; i < np && rc == 0; i++) {
		rc = probe_prompt(&o, model, &ps[i], i, cfg.vocab, &t, &err);
		events_stage("probe", "progress", (double)(i + 1) / np, 0, NULL);
	}
	for (int i = 0; i < o.nimages && rc == 0; i++) /* image prompts */
		rc = probe_image(&o, model, o.images[i], np + i, cfg.vocab, &t,
				 &err);
	ntext = np;
	np += o.nimages;
	top1 = t.positions ? (double)t.top1_ok / t.positions : 0;
	if (rc < 0) {
		fail = 1;
		snprintf(detail, sizeof detail, "%s", err.msg);
		fprintf(stderr, "day0-engine: %s\n", err.msg);
	} else {
		fail = top1 < o.min_top1 || t.max_abs > o.max_abs || t.kl_max > o.kl_max;
		snprintf(detail, sizeof detail, "%d prompts, %d positions: top-1 "
			 "%.1f%% (need %.1f%%), max |dlogprob| %.3g (<= %.3g, "
			 "prompt %d pos %d), KL max %.3g mean %.3g (<= %.3g) over the "
			 "top-%d support", np, t.positions, top1 * 100,
			 o.min_top1 * 100, t.max_abs, o.max_abs, t.worst_prompt,
			 t.worst_pos, t.kl_max, t.positions ? t.kl_sum / t.positions : 0,
			 o.kl_max, o.top);
	}
	/* top1 as validate emits it: a percentage (the console's Numerics
	 * screen and the report print it so).  No max_rel: probe compares
	 * log-probabilities, whose relative error means nothing (one near
	 * 0 makes it any size), so the field stays absent (null). */
	events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f, s:f}", "level", "e2e",
					  "name", "endpoint", "max_abs", t.max_abs,
					  "kl", t.kl_max, "top1", top1 * 100));
	events_check("numerics.endpoint", fail ? "fail" : "pass", detail,
		     json_real(t.max_abs), json_real(o.max_abs));
	if (o.json) {
		json_t *doc = json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:s, "
					"s:s}", "url", o.url, "model", o.model_dir,
					"prompts", np, "positions", t.positions,
					"top1", top1, "max_abs", t.max_abs, "kl_max",
					t.kl_max, "kl_mean",
					t.positions ? t.kl_sum / t.positions : 0.0,
					"status", fail ? "fail" : "pass", "detail",
					detail);
		json_dumpf(doc, stdout, JSON_INDENT(2));
		printf("\n");
		json_decref(doc);
	} else if (!o.events) {
		printf("numerics.endpoint: %s: %s\n", fail ? "FAIL" : "pass", detail);
	}
	rc = rc < 0 ? EXIT_CHECK_FAILED : fail ? EXIT_CHECK_FAILED : EXIT_OK;
	events_stage("probe", "end", 1, rc, o.url);
	for (int i = 0; i < ntext; i++)
		free(ps[i].ids);
	free(ps);
	free(o.token_args);
	free(o.images);
	model_config_free(&cfg);
	curl_global_cleanup();
	return rc;
}
