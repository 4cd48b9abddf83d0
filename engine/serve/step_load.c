/*
 * step_load.c - `day0-engine load --url URL`: a load generator for any
 * OpenAI-compatible completions endpoint (vLLM, SGLang, TGI, llama.cpp's
 * server, day0's own `serve`).
 *
 * One thread, one libcurl multi handle, many transfers: each level of a
 * sweep keeps --concurrency requests in flight (or starts them at Poisson
 * --rate arrivals, the concurrency then being a cap) until --requests have
 * finished or --duration has passed.  Streamed answers are timed per
 * server-sent event: TTFT (start to the first token), inter-token latency
 * (between events), TPOT ((e2e - TTFT) / (tokens - 1)) and end-to-end.
 * Failures are classed: http_NNN, timeout, connect, broken (a stream that
 * ends without [DONE]), stall (no token for --stall seconds: the deadlock
 * check; the transfer is dropped).  Before measuring it runs the service.api
 * pass (http_load.c); after, service.load: no errors, no stalls, and the
 * --slo met by at least --slo-min of the requests at --slo-at concurrency;
 * then, from the server's /metrics once it is idle, service.kv and
 * service.preemption (kv_checks).
 */
#include "http_load.h"

#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

static int load(int argc, char **argv);

const struct step_entry step_load = {
	.name = "load",
	.usage = "--url URL [--model NAME] [--concurrency 1,8,32] [--rate R] "
		 "[--requests N | --duration S] [--input-len N|LO:HI] "
		 "[--output-len N|LO:HI] [--dataset FILE.jsonl] [--vocab N] "
		 "[--slo ttft=MS,tpot=MS] [--slo-min F] [--slo-at C] [--stall S] "
		 "[--timeout S] [--no-stream] [--ignore-eos] [--get PATH] "
		 "[--no-api-check] [--seed N] [--json] [--events] "
		 "[--images DIR [--image-text TEXT]]\n"
		 "  --url URL            the endpoint's base (http://host:port)\n"
		 "  --model NAME         model id to send (default: the first of "
		 "/v1/models)\n"
		 "  --concurrency LIST   requests kept in flight, one level each "
		 "(default 1)\n"
		 "  --rate R             Poisson arrivals, R requests/s "
		 "(concurrency is then a cap)\n"
		 "  --requests N         requests per level (default 32)\n"
		 "  --duration S         or: seconds per level\n"
		 "  --input-len D        prompt tokens: N or LO:HI uniform "
		 "(default 32)\n"
		 "  --output-len D       max_tokens: N or LO:HI (default 32)\n"
		 "  --dataset FILE       JSONL lines {\"prompt\": [ids] | \"text\", "
		 "\"max_tokens\": N}, used in turn\n"
		 "  --vocab N            random prompt ids are in [1, N) (default "
		 "100)\n"
		 "  --slo ttft=MS,tpot=MS  goodput: requests meeting both\n"
		 "  --slo-min F          share of good requests service.load needs "
		 "(default 0.9)\n"
		 "  --slo-at C           the level the SLO is judged at (default: "
		 "the highest)\n"
		 "  --stall S            no token for S seconds is a stall "
		 "(default 30)\n"
		 "  --timeout S          whole-request timeout (default 600)\n"
		 "  --no-stream          ask for whole answers (TTFT = e2e)\n"
		 "  --ignore-eos         send ignore_eos (vLLM/SGLang: fixed output "
		 "lengths)\n"
		 "  --get PATH           raw mode: GET PATH, count 200s (overhead "
		 "benchmarks)\n"
		 "  --no-api-check       skip the service.api pass\n"
		 "  --images DIR         chat requests (/v1/chat/completions), "
		 "one of DIR's PNG/JPEG files each, in turn, as a data: URL\n"
		 "  --image-text TEXT    the text beside the image (default "
		 "'Describe the image.')\n"
		 "  --json               one JSON document on stdout\n"
		 "  --events             JSON-lines events (stage, sample, perf, "
		 "check)\n"
		 "example: day0-engine load --url http://127.0.0.1:8000 --concurrency "
		 "1,8,32 --requests 64 --slo ttft=500,tpot=50",
	.summary = "load generator for OpenAI-compatible endpoints: TTFT/TPOT/ITL "
		   "percentiles, goodput, errors, stalls (service.api, "
		   "service.load)",
	.help =
		 "  --seed N              the seed of the prompts' random token ids and of the\n"
		 "                        Poisson arrivals (the same seed sends the same requests)",
	.run = load,
};

struct dist {
	int lo, hi;
};

struct load_opts {
	const char *url, *model, *dataset, *get_path, *images, *image_text;
	int conc[64], nconc;
	double rate, duration, stall, timeout, slo_ttft, slo_tpot, slo_min;
	int requests, vocab, stream, ignore_eos, api_check, json, events;
	int slo_at;
	uint64_t seed;
	struct dist in, out;
};

/* One transfer in flight. */
struct lreq {
	CURL *h;
	struct curl_slist *hdr;
	char *body;
	double t0, t_first, t_last;
	int ntok, done_marker, stalled;
	int in_tokens; /* the prompt's ids: counted once it is answered */
	char *line;     /* SSE bytes not yet ending in a newline */
	size_t line_len;
	char head[1024]; /* a streamed body's first bytes (an error's JSON) */
	size_t head_len;
	char errbuf[CURL_ERROR_SIZE];
	struct http_buf raw; /* unstreamed answer */
	struct level *lv;
};

/* One level's results. */
struct series {
	double *v;
	size_t n, cap;
};

struct level {
	int conc;
	double rate, wall;
	int sent, ok, stalls, timeouts, connect, broken, http_other;
	int http[6]; /* 400 404 413 429 500 503 */
	uint64_t in_tokens, out_tokens;
	int good;
	struct series ttft, tpot, itl, e2e;
	/* the first failure's message per error class (err_class), and of
	 * a stall (ERR_STALL): why requests were refused */
	char *example[11];
};
#define ERR_STALL 10

/* The server answered something (any HTTP status) during this run: a
 * server unreachable afterwards "stopped answering", else it "never
 * answered". */
static int server_answered;

static void series_add(struct series *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
	}
	s->v[s->n++] = v;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted series (0 when empty). */
static double pct(const struct series *s, double p)
{
	size_t k;
	if (!s->n)
		return 0;
	k = (size_t)ceil(p / 100.0 * (double)s->n);
	return s->v[k ? k - 1 : 0];
}

static int parse_dist(const char *s, struct dist *d)
{
	char *end;
	long lo = strtol(s, &end, 10), hi = lo;
	if (end == s || lo < 1)
		return -1;
	if (*end == ':') {
		char *e2;
		hi = strtol(end + 1, &e2, 10);
		if (e2 == end + 1 || *e2 || hi < lo)
			return -1;
	} else if (*end) {
		return -1;
	}
	if (hi > 1 << 20)
		return -1;
	d->lo = (int)lo;
	d->hi = (int)hi;
	return 0;
}

static int draw(struct rng *r, const struct dist *d)
{
	return d->lo + (int)(rng_uniform(r) * (d->hi - d->lo + 1));
}

static int parse_slo(const char *s, struct load_opts *o)
{
	char *dup = strdup(s), *tok, *save = NULL;
	int rc = 0;
	for (tok = strtok_r(dup, ",", &save); tok && !rc;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *end;
		double v;
		if (!eq)
			rc = -1;
		else if ((v = strtod(eq + 1, &end)) <= 0 || *end)
			rc = -1;
		else if (!strncmp(tok, "ttft", (size_t)(eq - tok)) && eq - tok == 4)
			o->slo_ttft = v / 1000;
		else if (!strncmp(tok, "tpot", (size_t)(eq - tok)) && eq - tok == 4)
			o->slo_tpot = v / 1000;
		else
			rc = -1;
	}
	free(dup);
	return rc;
}

static int parse(int argc, char **argv, struct load_opts *o)
{
	static const struct option lo[] = {
		{"url", 1, 0, 'u'}, {"model", 1, 0, 'M'}, {"concurrency", 1, 0, 'c'},
		{"rate", 1, 0, 'r'}, {"requests", 1, 0, 'n'}, {"duration", 1, 0, 'd'},
		{"input-len", 1, 0, 'i'}, {"output-len", 1, 0, 'o'},
		{"dataset", 1, 0, 'D'}, {"vocab", 1, 0, 'V'}, {"slo", 1, 0, 'S'},
		{"slo-min", 1, 0, 'g'}, {"slo-at", 1, 0, 'a'}, {"stall", 1, 0, 's'},
		{"timeout", 1, 0, 'T'}, {"no-stream", 0, 0, 'N'},
		{"ignore-eos", 0, 0, 'I'}, {"get", 1, 0, 'G'},
		{"no-api-check", 0, 0, 'A'}, {"seed", 1, 0, 'z'}, {"json", 0, 0, 'j'},
		{"events", 0, 0, 'E'}, {"images", 1, 0, 'Y'},
		{"image-text", 1, 0, 'y'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_load;
	int ch;
	long v;
	char *end;
	memset(o, 0, sizeof *o);
	o->conc[0] = 1;
	o->nconc = 1;
	o->requests = 32;
	o->vocab = 100;
	o->stream = 1;
	o->api_check = 1;
	o->stall = 30;
	o->timeout = 600;
	o->slo_min = 0.9;
	o->in = (struct dist){32, 32};
	o->out = (struct dist){32, 32};
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'u': o->url = optarg; break;
		case 'M': o->model = optarg; break;
		case 'c': {
			char *dup = strdup(optarg), *tok, *save = NULL;
			o->nconc = 0;
			for (tok = strtok_r(dup, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				if (o->nconc == 64 || parse_long(tok, 1, 100000, &v) < 0) {
					free(dup);
					return step_usage_error(S, "--concurrency: expected a "
								"comma list of counts >= 1");
				}
				o->conc[o->nconc++] = (int)v;
			}
			free(dup);
			if (!o->nconc)
				return step_usage_error(S, "--concurrency: empty list");
			break;
		}
		case 'r': case 'd': case 's': case 'T': case 'g': {
			double x = strtod(optarg, &end);
			if (end == optarg || *end || x <= 0 || (ch == 'g' && x > 1))
				return step_usage_error(S, "--%s: expected a positive "
							"number%s", ch == 'r' ? "rate"
							: ch == 'd' ? "duration" : ch == 's' ? "stall"
							: ch == 'T' ? "timeout" : "slo-min",
							ch == 'g' ? " <= 1" : "");
			*(ch == 'r' ? &o->rate : ch == 'd' ? &o->duration
				: ch == 's' ? &o->stall : ch == 'T' ? &o->timeout
				: &o->slo_min) = x;
			break;
		}
		case 'n':
			if (parse_long(optarg, 1, 100000000, &v) < 0)
				return step_usage_error(S, "--requests: expected a count >= 1");
			o->requests = (int)v;
			break;
		case 'i': case 'o':
			if (parse_dist(optarg, ch == 'i' ? &o->in : &o->out) < 0)
				return step_usage_error(S, "--%s-len: expected N or LO:HI "
							"(tokens >= 1)", ch == 'i' ? "input" : "output");
			break;
		case 'D': o->dataset = optarg; break;
		case 'V':
			if (parse_long(optarg, 2, 1 << 30, &v) < 0)
				return step_usage_error(S, "--vocab: expected a count >= 2");
			o->vocab = (int)v;
			break;
		case 'S':
			if (parse_slo(optarg, o) < 0)
				return step_usage_error(S, "--slo: expected ttft=MS,tpot=MS "
							"(either or both, positive)");
			break;
		case 'a':
			if (parse_long(optarg, 1, 100000, &v) < 0)
				return step_usage_error(S, "--slo-at: expected a concurrency");
			o->slo_at = (int)v;
			break;
		case 'N': o->stream = 0; break;
		case 'I': o->ignore_eos = 1; break;
		case 'G': o->get_path = optarg; break;
		case 'A': o->api_check = 0; break;
		case 'z':
			if (parse_long(optarg, 0, 1L << 62, &v) < 0)
				return step_usage_error(S, "--seed: expected an integer");
			o->seed = (uint64_t)v;
			break;
		case 'j': o->json = 1; break;
		case 'E': o->events = 1; break;
		case 'Y': o->images = optarg; break;
		case 'y': o->image_text = optarg; break;
		case 'h': step_help(S); return -1;
		default:
			return step_usage_error(S, "unknown or incomplete option '%s'",
						argv[optind - 1]);
		}
	}
	if (optind != argc)
		return step_usage_error(S, "unexpected argument '%s'", argv[optind]);
	if (!o->url)
		return step_usage_error(S, "--url is required");
	if (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))
		return step_usage_error(S, "--url: expected http://HOST:PORT");
	if (o->duration && o->requests != 32)
		return step_usage_error(S, "--requests and --duration: give one");
	if (o->images && (o->dataset || o->get_path))
		return step_usage_error(S, "--images: not with --dataset or --get");
	if (o->get_path && o->get_path[0] != '/')
		return step_usage_error(S, "--get: expected a path such as /health");
	return 0;
}

/* ---------------------------------------------------------- the workload */

struct workload {
	json_t **prompts; /* dataset prompts, or NULL */
	int *max_tokens;
	size_t n, next;
	char **img_urls; /* --images: data: URLs, used in turn */
	size_t nimg;
	struct rng rng;
};

static int dataset_load(const char *path, struct workload *w,
			struct d0_err *err)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0, ln = 0;
	if (!f)
		return d0_errf(err, "%s: cannot open", path);
	while (getline(&line, &cap, f) > 0) {
		json_t *doc, *p, *m;
		ln++;
		if (line[strspn(line, " \t\r\n")] == 0)
			continue;
		doc = json_loads(line, 0, NULL);
		p = json_object_get(doc, "prompt");
		m = json_object_get(doc, "max_tokens");
		if (!p || !(json_is_array(p) || json_is_string(p)) ||
		    (m && (!json_is_integer(m) || json_integer_value(m) < 1))) {
			json_decref(doc);
			free(line);
			fclose(f);
			return d0_errf(err, "%s:%zu: expected {\"prompt\": [ids] or "
				       "\"text\", \"max_tokens\": N >= 1}", path, ln);
		}
		w->prompts = realloc(w->prompts, (w->n + 1) * sizeof *w->prompts);
		w->max_tokens = realloc(w->max_tokens, (w->n + 1) * sizeof(int));
		w->prompts[w->n] = json_incref(p);
		w->max_tokens[w->n++] = m ? (int)json_integer_value(m) : 0;
		json_decref(doc);
	}
	free(line);
	fclose(f);
	if (!w->n)
		return d0_errf(err, "%s: no requests in the dataset", path);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* --images DIR: every PNG/JPEG there (by name), read and base64-encoded
 * (OpenSSL's EVP_EncodeBlock) into a data: URL once, before measuring. */
static int images_load(const char *dir, struct workload *w, struct d0_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0;
	if (!d)
		return d0_errf(err, "--images %s: cannot open the folder", dir);
	while ((e = readdir(d))) {
		const char *x = strrchr(e->d_name, '.');
		if (x && (!strcasecmp(x, ".png") || !strcasecmp(x, ".jpg") ||
			  !strcasecmp(x, ".jpeg"))) {
			names = realloc(names, (n + 1) * sizeof *names);
			names[n++] = strdup(e->d_name);
		}
	}
	closedir(d);
	if (!n) {
		free(names);
		return d0_errf(err, "--images %s: no .png, .jpg or .jpeg file there",
			       dir);
	}
	qsort(names, n, sizeof *names, cmp_str);
	w->img_urls = calloc(n, sizeof *w->img_urls);
	for (size_t i = 0; i < n; i++) {
		char *path = path_join(dir, names[i]), *raw = NULL;
		const char *x = strrchr(names[i], '.');
		size_t len = 0;
		int png = !strcasecmp(x, ".png");
		if (file_read_all(path, (size_t)256 << 20, &raw, &len, err) < 0 ||
		    len == 0) {
			if (len == 0 && raw)
				d0_errf(err, "%s: an empty file", path);
			free(raw);
			free(path);
			for (size_t k = i; k < n; k++)
				free(names[k]);
			free(names);
			return -1;
		}
		w->img_urls[i] = malloc(32 + (len + 2) / 3 * 4 + 1);
		EVP_EncodeBlock((unsigned char *)w->img_urls[i] +
					sprintf(w->img_urls[i], "data:image/%s;base64,",
						png ? "png" : "jpeg"),
				(const unsigned char *)raw, (int)len);
		w->nimg++;
		free(raw);
		free(path);
		free(names[i]);
	}
	free(names);
	return 0;
}

/* A chat body with the next image and --image-text (--images). */
static char *image_body(const struct load_opts *o, struct workload *w)
{
	const char *url = w->img_urls[w->next++ % w->nimg];
	json_t *doc = json_pack(
	    "{s:[{s:s, s:[{s:s, s:{s:s}}, {s:s, s:s}]}], s:i, s:f}", "messages",
	    "role", "user", "content", "type", "image_url", "image_url", "url",
	    url, "type", "text", "text",
	    o->image_text ? o->image_text : "Describe the image.", "max_tokens",
	    draw(&w->rng, &o->out), "temperature", 0.0);
	char *s;
	if (o->model)
		json_object_set_new(doc, "model", json_string(o->model));
	if (o->stream)
		json_object_set_new(doc, "stream", json_true());
	if (o->ignore_eos)
		json_object_set_new(doc, "ignore_eos", json_true());
	s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return s;
}

/* The next request body (malloc'd); *in_tokens counts its prompt ids. */
static char *next_body(const struct load_opts *o, struct workload *w,
		       int *in_tokens)
{
	json_t *doc, *prompt;
	int mt;
	char *s;
	if (w->nimg) {
		*in_tokens = 0;
		return image_body(o, w);
	}
	doc = json_object();
	if (w->n) {
		size_t k = w->next++ % w->n;
		prompt = json_incref(w->prompts[k]);
		mt = w->max_tokens[k] ? w->max_tokens[k] : draw(&w->rng, &o->out);
	} else {
		int n = draw(&w->rng, &o->in);
		prompt = json_array();
		for (int i = 0; i < n; i++)
			json_array_append_new(prompt, json_integer(
				1 + (json_int_t)(rng_uniform(&w->rng) * (o->vocab - 1))));
		mt = draw(&w->rng, &o->out);
	}
	*in_tokens = json_is_array(prompt) ? (int)json_array_size(prompt) : 0;
	if (o->model)
		json_object_set_new(doc, "model", json_string(o->model));
	json_object_set_new(doc, "prompt", prompt);
	json_object_set_new(doc, "max_tokens", json_integer(mt));
	json_object_set_new(doc, "temperature", json_real(0));
	if (o->stream)
		json_object_set_new(doc, "stream", json_true());
	if (o->ignore_eos)
		json_object_set_new(doc, "ignore_eos", json_true());
	s = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	return s;
}

/* ---------------------------------------------------------- transfers */

/* One SSE data line: count its tokens, time them. */
static void sse_data(struct lreq *q, const char *data, size_t n)
{
	json_t *doc, *ch, *ids;
	int k = 0;
	double now = now_s();
	if (n == 6 && !strncmp(data, "[DONE]", 6)) {
		q->done_marker = 1;
		return;
	}
	doc = json_loadb(data, n, 0, NULL);
	ch = json_array_get(json_object_get(doc, "choices"), 0);
	ids = json_object_get(ch, "token_ids");
	if (json_is_array(ids))
		k = (int)json_array_size(ids);
	else if (json_string_length(json_object_get(ch, "text")) > 0)
		k = 1;
	json_decref(doc);
	if (!k)
		return;
	if (!q->ntok)
		q->t_first = now;
	else
		series_add(&q->lv->itl, now - q->t_last);
	q->t_last = now;
	q->ntok += k;
}

static size_t on_stream(char *p, size_t size, size_t nm, void *arg)
{
	struct lreq *q = arg;
	size_t n = size * nm, start = 0;
	if (q->head_len < sizeof q->head - 1) { /* an error's body, whole */
		size_t k = n < sizeof q->head - 1 - q->head_len
				   ? n : sizeof q->head - 1 - q->head_len;
		memcpy(q->head + q->head_len, p, k);
		q->head_len += k;
		q->head[q->head_len] = 0;
	}
	q->line = realloc(q->line, q->line_len + n + 1);
	memcpy(q->line + q->line_len, p, n);
	q->line_len += n;
	for (size_t i = 0; i < q->line_len; i++)
		if (q->line[i] == '\n') {
			char *l = q->line + start;
			size_t len = i - start;
			if (len && l[len - 1] == '\r')
				len--;
			if (len > 6 && !strncmp(l, "data: ", 6))
				sse_data(q, l + 6, len - 6);
			start = i + 1;
		}
	memmove(q->line, q->line + start, q->line_len - start);
	q->line_len -= start;
	return n;
}

static struct lreq *start_req(CURLM *m, const struct load_opts *o,
			      struct workload *w, struct level *lv,
			      const char *url)
{
	struct lreq *q = calloc(1, sizeof *q);
	int in = 0;
	q->lv = lv;
	q->h = curl_easy_init();
	curl_easy_setopt(q->h, CURLOPT_URL, url);
	curl_easy_setopt(q->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(q->h, CURLOPT_PRIVATE, q);
	curl_easy_setopt(q->h, CURLOPT_TIMEOUT_MS, (long)(o->timeout * 1000));
	curl_easy_setopt(q->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(q->h, CURLOPT_ERRORBUFFER, q->errbuf);
	if (!o->get_path) {
		q->body = next_body(o, w, &in);
		q->hdr = curl_slist_append(NULL, "Content-Type: application/json");
		curl_easy_setopt(q->h, CURLOPT_HTTPHEADER, q->hdr);
		curl_easy_setopt(q->h, CURLOPT_POSTFIELDS, q->body);
	}
	if (o->stream && !o->get_path) {
		curl_easy_setopt(q->h, CURLOPT_WRITEFUNCTION, on_stream);
		curl_easy_setopt(q->h, CURLOPT_WRITEDATA, q);
	} else {
		curl_easy_setopt(q->h, CURLOPT_WRITEFUNCTION, http_buf_write);
		curl_easy_setopt(q->h, CURLOPT_WRITEDATA, &q->raw);
	}
	q->in_tokens = in;
	lv->sent++;
	q->t0 = q->t_last = now_s();
	curl_multi_add_handle(m, q->h);
	return q;
}

static void end_req(CURLM *m, struct lreq *q)
{
	curl_multi_remove_handle(m, q->h);
	curl_easy_cleanup(q->h);
	curl_slist_free_all(q->hdr);
	free(q->body);
	free(q->line);
	free(q->raw.data);
	free(q);
}

/* The message of an error body: an OpenAI error's `error.message` (or
 * `error` as a string, vLLM's top-level `message`, a `detail`), else the
 * body itself; on one line, cut to 200 bytes. */
static void error_text(const char *body, char *out, size_t n)
{
	json_t *doc = body ? json_loads(body, 0, NULL) : NULL, *e;
	const char *m = NULL, *c;
	size_t k = 0, cap = n < 204 ? n : 204;
	e = json_object_get(doc, "error");
	m = json_string_value(json_object_get(e, "message"));
	if (!m)
		m = json_string_value(e);
	if (!m)
		m = json_string_value(json_object_get(doc, "message"));
	if (!m)
		m = json_string_value(json_object_get(doc, "detail"));
	if (!m)
		m = body && *body ? body : "(an empty body)";
	for (c = m; *c && k + 4 < cap; c++) {
		char ch = (unsigned char)*c < ' ' ? ' ' : *c;
		if (ch == ' ' && (!k || out[k - 1] == ' '))
			continue;
		out[k++] = ch;
	}
	if (*c) { /* cut, not inside a UTF-8 character */
		if (((unsigned char)*c & 0xC0) == 0x80) {
			while (k && ((unsigned char)out[k - 1] & 0xC0) == 0x80)
				k--;
			if (k && (unsigned char)out[k - 1] >= 0xC0)
				k--;
		}
		memcpy(out + k, "...", 3);
		k += 3;
	}
	while (k && out[k - 1] == ' ')
		k--;
	out[k] = 0;
	json_decref(doc);
}

/* Keep the first failure's message of class k in the level. */
static void note_error(struct level *lv, int k, const char *fmt, ...)
{
	char buf[400];
	va_list ap;
	if (lv->example[k])
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	lv->example[k] = strdup(buf);
}

/* A transfer that failed below HTTP: curl's own words, and the
 * system's ("Connection refused"). */
static const char *curl_why(const struct lreq *q, CURLcode rc)
{
	static char buf[CURL_ERROR_SIZE + 80];
	long os_errno = 0;
	curl_easy_getinfo(q->h, CURLINFO_OS_ERRNO, &os_errno);
	snprintf(buf, sizeof buf, "%s", q->errbuf[0] ? q->errbuf
						     : curl_easy_strerror(rc));
	if (os_errno && !strstr(buf, strerror((int)os_errno)))
		snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " (%s)",
			 strerror((int)os_errno));
	return buf;
}

/* A finished transfer: classify it and record its timings. */
static void account(const struct load_opts *o, struct lreq *q, CURLcode rc)
{
	struct level *lv = q->lv;
	static const int codes[6] = {400, 404, 413, 429, 500, 503};
	long st = 0;
	double now = now_s(), e2e = now - q->t0, ttft, tpot = 0;
	if (rc == CURLE_OPERATION_TIMEDOUT) {
		lv->timeouts++;
		note_error(lv, 7, "%s", curl_why(q, rc));
		return;
	}
	if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) {
		lv->connect++;
		note_error(lv, 8, "%s", curl_why(q, rc));
		return;
	}
	curl_easy_getinfo(q->h, CURLINFO_RESPONSE_CODE, &st);
	server_answered |= st > 0;
	if (rc != CURLE_OK && st == 200) {
		lv->broken++;
		note_error(lv, 9, "the answer was cut: %s", curl_why(q, rc));
		return;
	}
	if (st != 200 || rc != CURLE_OK) {
		int k = -1;
		char msg[256];
		for (int i = 0; i < 6; i++)
			if (codes[i] == st)
				k = i;
		error_text(o->stream && !o->get_path ? q->head : q->raw.data, msg,
			   sizeof msg);
		if (k >= 0) {
			lv->http[k]++;
			note_error(lv, k, "%s", msg);
		} else if (rc != CURLE_OK) {
			lv->broken++;
			note_error(lv, 9, "%s", curl_why(q, rc));
		} else {
			lv->http_other++;
			note_error(lv, 6, "HTTP %ld: %s", st, msg);
		}
		return;
	}
	if (o->get_path) {
		lv->ok++;
		return;
	}
	if (o->stream) {
		if (!q->done_marker || !q->ntok) {
			lv->broken++;
			note_error(lv, 9, "%s", !q->ntok ? "a stream without a token"
				   : "a stream that ended without [DONE]");
			return;
		}
		ttft = q->t_first - q->t0;
		if (q->ntok > 1)
			tpot = (q->t_last - q->t_first) / (q->ntok - 1);
		e2e = q->t_last - q->t0;
	} else {
		json_t *doc = json_loads(q->raw.data ? q->raw.data : "", 0, NULL);
		json_t *u = json_object_get(json_object_get(doc, "usage"),
					    "completion_tokens");
		if (!json_is_integer(u)) {
			json_decref(doc);
			lv->broken++;
			note_error(lv, 9, "an answer without usage.completion_tokens");
			return;
		}
		q->ntok = (int)json_integer_value(u);
		json_decref(doc);
		ttft = e2e;
		if (q->ntok > 1)
			tpot = e2e / q->ntok;
	}
	lv->ok++;
	lv->in_tokens += (uint64_t)q->in_tokens;
	lv->out_tokens += (uint64_t)q->ntok;
	series_add(&lv->ttft, ttft);
	series_add(&lv->e2e, e2e);
	if (q->ntok > 1)
		series_add(&lv->tpot, tpot);
	if ((!o->slo_ttft || ttft <= o->slo_ttft) &&
	    (!o->slo_tpot || tpot <= o->slo_tpot))
		lv->good++;
}

/* Failed requests, stalls included (docs/service.md): every output
 * (samples, perf, --json, the table, service.load) counts them so. */
static int errors_of(const struct level *lv)
{
	int n = lv->timeouts + lv->connect + lv->broken + lv->http_other +
		lv->stalls;
	for (int i = 0; i < 6; i++)
		n += lv->http[i];
	return n;
}

/* The error classes of a level, in the order --json lists them. */
static const char *const err_class[] = {
    "http_400", "http_404", "http_413", "http_429", "http_500",
    "http_503", "http_other", "timeout", "connect", "broken"};
#define N_ERR_CLASS (sizeof err_class / sizeof err_class[0])

static int err_count(const struct level *lv, size_t i)
{
	if (i < 6)
		return lv->http[i];
	switch (i) {
	case 6: return lv->http_other;
	case 7: return lv->timeouts;
	case 8: return lv->connect;
	default: return lv->broken;
	}
}

static void sample(const char *metric, double x)
{
	events_emit("sample", json_pack("{s:i, s:s, s:f}", "card", -1,
					"metric", metric, "value", x));
}

/* The live figures of the level so far (every second and at its end):
 * host samples the console's Service screen shows (docs/service.md). */
static void emit_live(const struct level *lv, int inflight, double el)
{
	static const char *const lat[] = {"ttft", "tpot", "e2e"};
	const struct series *ser[] = {&lv->ttft, &lv->tpot, &lv->e2e};
	static const int ps[] = {50, 90, 99};
	char m[48];
	if (el <= 0)
		el = 1e-9;
	sample("load.concurrency", lv->conc);
	sample("load.inflight", inflight);
	sample("load.requests", lv->sent);
	sample("load.requests_per_s", lv->ok / el);
	sample("load.tokens_per_s", (double)lv->out_tokens / el);
	sample("load.errors", errors_of(lv));
	sample("load.stalls", lv->stalls);
	for (size_t i = 0; i < N_ERR_CLASS; i++) { /* all: a level resets them */
		snprintf(m, sizeof m, "load.error.%s", err_class[i]);
		sample(m, err_count(lv, i));
	}
	for (int k = 0; k < 3; k++) {
		struct series c = {NULL, ser[k]->n, ser[k]->n};
		if (!c.n)
			continue;
		c.v = malloc(c.n * sizeof *c.v);
		if (!c.v)
			return;
		memcpy(c.v, ser[k]->v, c.n * sizeof *c.v);
		qsort(c.v, c.n, sizeof *c.v, cmp_d);
		for (int j = 0; j < 3; j++) {
			snprintf(m, sizeof m, "load.%s_p%d_ms", lat[k], ps[j]);
			sample(m, pct(&c, ps[j]) * 1e3);
		}
		free(c.v);
	}
}

static void progress(const struct load_opts *o, const struct level *lv,
		     int target, double t0, int inflight)
{
	int done = lv->ok + errors_of(lv), w = 30, fill;
	double el = now_s() - t0;
	double frac = target ? (double)done / target : el / o->duration;
	char bar[64];
	if (frac > 1)
		frac = 1;
	fill = (int)(frac * w);
	for (int i = 0; i < w; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[w] = 0;
	fprintf(stderr, "\r  c=%-5d [%s] %6d done %4d in flight %5d err %4d stall "
		"%8.1f req/s", lv->conc, bar, done, inflight, errors_of(lv),
		lv->stalls, el > 0 ? lv->ok / el : 0.0);
}

/* Run one level of the sweep. */
static void run_level(const struct load_opts *o, struct workload *w,
		      struct level *lv, const char *url, int tty)
{
	CURLM *m = curl_multi_init();
	struct lreq **fl = calloc((size_t)lv->conc + 1, sizeof *fl);
	int inflight = 0, launched = 0, target = o->duration ? 0 : o->requests;
	double t0 = now_s(), next_arrival = t0, last_prog = 0, last_ev = t0;
	curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)lv->conc + 4);
	for (;;) {
		double now = now_s();
		int running, left, more, finished = 0;
		CURLMsg *msg;
		more = target ? launched < target : now - t0 < o->duration;
		if (!more && !inflight)
			break;
		while (more && inflight < lv->conc &&
		       (!o->rate || now >= next_arrival)) {
			fl[inflight++] = start_req(m, o, w, lv, url);
			launched++;
			if (o->rate)
				next_arrival += -log(1 - rng_uniform(&w->rng)) / o->rate;
			more = target ? launched < target : now - t0 < o->duration;
		}
		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left))) {
			struct lreq *q = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&q);
			account(o, q, msg->data.result);
			finished++;
			for (int i = 0; i < inflight; i++)
				if (fl[i] == q) {
					fl[i] = fl[--inflight];
					break;
				}
			end_req(m, q);
		}
		now = now_s();
		for (int i = 0; !o->get_path && i < inflight; i++)
			if (now - fl[i]->t_last > o->stall) {
				lv->stalls++;
				note_error(lv, ERR_STALL, "no token for %g s (--stall)",
					   o->stall);
				end_req(m, fl[i]);
				fl[i--] = fl[--inflight];
			}
		if (tty && now - last_prog > 0.2) {
			progress(o, lv, target, t0, inflight);
			last_prog = now;
		}
		if (o->events && now - last_ev > 1.0) {
			emit_live(lv, inflight, now - t0);
			last_ev = now;
		}
		{
			int wait = 20;
			if (o->rate && more && next_arrival > now)
				wait = (int)((next_arrival - now) * 1000) < wait
					       ? (int)((next_arrival - now) * 1000) : wait;
			/* a finished transfer frees a place: refill before waiting */
			if (!finished && (inflight || wait > 0))
				curl_multi_poll(m, NULL, 0, wait > 0 ? wait : 0, NULL);
		}
	}
	lv->wall = now_s() - t0;
	if (o->events) /* the level's final figures, as its perf says */
		emit_live(lv, 0, lv->wall);
	if (tty) {
		progress(o, lv, target, t0, 0);
		fputc('\n', stderr);
	}
	free(fl);
	curl_multi_cleanup(m);
	/* a level where nothing was measured has no arrays (qsort's
	 * pointer must not be NULL, even for 0 items) */
	if (lv->ttft.n)
		qsort(lv->ttft.v, lv->ttft.n, sizeof(double), cmp_d);
	if (lv->tpot.n)
		qsort(lv->tpot.v, lv->tpot.n, sizeof(double), cmp_d);
	if (lv->itl.n)
		qsort(lv->itl.v, lv->itl.n, sizeof(double), cmp_d);
	if (lv->e2e.n)
		qsort(lv->e2e.v, lv->e2e.n, sizeof(double), cmp_d);
}

/* ------------------------------------------------------------- report */

/* A latency's p50/p90/p99 and mean, in ms; null when no request was
 * measured (a level where every request failed has no latency, not 0). */
static json_t *pcts_ms(const struct series *s)
{
	double sum = 0;
	if (!s->n)
		return json_pack("{s:n, s:n, s:n, s:n}", "p50", "p90", "p99",
				 "mean");
	for (size_t i = 0; i < s->n; i++)
		sum += s->v[i];
	return json_pack("{s:f, s:f, s:f, s:f}", "p50", pct(s, 50) * 1e3, "p90",
			 pct(s, 90) * 1e3, "p99", pct(s, 99) * 1e3, "mean",
			 s->n ? sum / (double)s->n * 1e3 : 0.0);
}

/* The first failure's message per class that occurred ("stall" too). */
static json_t *examples_json(const struct level *lv)
{
	json_t *x = json_object();
	for (size_t i = 0; i <= ERR_STALL; i++)
		if (lv->example[i])
			json_object_set_new(x, i == ERR_STALL ? "stall" : err_class[i],
					    json_string(lv->example[i]));
	return x;
}

static json_t *level_json(const struct level *lv)
{
	json_t *err = json_pack("{s:i}", "stall", lv->stalls);
	for (size_t i = 0; i < N_ERR_CLASS; i++)
		json_object_set_new(err, err_class[i],
				    json_integer(err_count(lv, i)));
	return json_pack("{s:i, s:f, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:I, s:I, "
			 "s:i, s:f, s:o, s:o, s:o, s:o, s:o, s:o}",
			 "concurrency", lv->conc, "rate", lv->rate, "requests",
			 lv->sent, "ok", lv->ok, "errors", errors_of(lv), "stalls",
			 lv->stalls, "seconds", lv->wall, "requests_per_s",
			 lv->wall > 0 ? lv->ok / lv->wall : 0.0, "output_tokens_per_s",
			 lv->wall > 0 ? lv->out_tokens / lv->wall : 0.0,
			 "input_tokens", (json_int_t)lv->in_tokens, "output_tokens",
			 (json_int_t)lv->out_tokens, "good", lv->good, "goodput",
			 lv->sent ? (double)lv->good / lv->sent : 0.0, "ttft_ms",
			 pcts_ms(&lv->ttft), "tpot_ms", pcts_ms(&lv->tpot), "itl_ms",
			 pcts_ms(&lv->itl), "e2e_ms", pcts_ms(&lv->e2e),
			 "error_classes", err, "error_examples", examples_json(lv));
}

/* A level's perf event: the means, and for the Service screen and the
 * report's service section its percentiles, counts and error classes. */
static json_t *perf_json(const struct level *lv, json_t *lj)
{
	static const char *const lat[] = {"ttft", "tpot", "e2e"};
	static const char *const ps[] = {"p50", "p90", "p99"};
	json_t *classes = json_object(), *p;
	char k[32];
	p = json_pack(
	    "{s:f, s:I, s:I, s:i, s:f, s:i, s:i, s:i, s:i, s:f}",
	    "tokens_per_s", lv->wall > 0 ? lv->out_tokens / lv->wall : 0.0,
	    "prompt_tokens", (json_int_t)lv->in_tokens, "gen_tokens",
	    (json_int_t)lv->out_tokens, "concurrency", lv->conc,
	    "requests_per_s", lv->wall > 0 ? lv->ok / lv->wall : 0.0,
	    "requests", lv->sent, "ok", lv->ok, "errors", errors_of(lv),
	    "stalls", lv->stalls, "goodput",
	    lv->sent ? (double)lv->good / lv->sent : 0.0);
	/* the means: absent when no request was measured */
	for (int i = 0; i < 2; i++) {
		static const char *const mk[] = {"ttft_ms", "tpot_ms"};
		json_t *m = json_object_get(json_object_get(lj, mk[i]), "mean");
		if (json_is_number(m))
			json_object_set_new(p, mk[i], json_real(json_number_value(m)));
	}
	const struct series *ser[] = {&lv->ttft, &lv->tpot, &lv->e2e};
	for (int i = 0; i < 3; i++) /* none measured: absent, not 0 */
		for (int j = 0; j < 3 && ser[i]->n; j++) {
			snprintf(k, sizeof k, "%s_ms", lat[i]);
			json_t *x = json_object_get(json_object_get(lj, k), ps[j]);
			snprintf(k, sizeof k, "%s_%s_ms", lat[i], ps[j]);
			json_object_set_new(p, k, json_real(json_real_value(x)));
		}
	for (size_t i = 0; i < N_ERR_CLASS; i++)
		if (err_count(lv, i))
			json_object_set_new(classes, err_class[i],
					    json_integer(err_count(lv, i)));
	if (lv->stalls) /* the classes add up to errors */
		json_object_set_new(classes, "stall", json_integer(lv->stalls));
	json_object_set_new(p, "error_classes", classes);
	if (errors_of(lv)) /* why: the first message of each class */
		json_object_set(p, "error_examples",
				json_object_get(lj, "error_examples"));
	return p;
}

static void print_table(const struct load_opts *o, json_t *levels)
{
	size_t i;
	json_t *l;
	printf("load: %s%s\n", o->url, o->get_path ? o->get_path
				       : o->images ? "/v1/chat/completions (images)"
						   : "/v1/completions");
	printf("%6s %7s %6s %5s %5s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n", "conc",
	       "reqs", "ok", "err", "stall", "req/s", "tok/s", "ttft50", "ttft99",
	       "tpot50", "tpot99", "itl99", "e2e99", "goodput");
	json_array_foreach(levels, i, l) {
		static const char *const lk[6][2] = {
		    {"ttft_ms", "p50"}, {"ttft_ms", "p99"}, {"tpot_ms", "p50"},
		    {"tpot_ms", "p99"}, {"itl_ms", "p99"},  {"e2e_ms", "p99"}};
#define N(k) json_number_value(json_object_get(l, k))
		printf("%6d %7d %6d %5d %5d %9.1f %9.1f", (int)N("concurrency"),
		       (int)N("requests"), (int)N("ok"), (int)N("errors"),
		       (int)N("stalls"), N("requests_per_s"),
		       N("output_tokens_per_s"));
		for (int k = 0; k < 6; k++) { /* none measured: "-" */
			json_t *v = json_object_get(json_object_get(l, lk[k][0]),
						    lk[k][1]);
			if (json_is_number(v))
				printf(" %9.2f", json_number_value(v));
			else
				printf(" %9s", "-");
		}
		printf(" %7.0f%%\n", N("goodput") * 100);
#undef N
	}
	printf("(latencies in ms)\n");
	json_array_foreach(levels, i, l) { /* why requests failed */
		const char *k;
		json_t *m, *ex = json_object_get(l, "error_examples");
		json_object_foreach(ex, k, m)
			printf("c=%d %s (%lld): %s\n",
			       (int)json_number_value(json_object_get(l, "concurrency")),
			       k, (long long)json_integer_value(json_object_get(
				      json_object_get(l, "error_classes"), k)),
			       json_string_value(m));
	}
}

/* The model to name in requests: --model, else /v1/models' first id
 * (NULL with why when there is none). */
static const char *find_model(const struct load_opts *o, char *buf, size_t n,
			      char *why, size_t wn)
{
	return o->model ? o->model : http_served_model(o->url, buf, n, why, wn);
}


/* ------------------------------------------- the server's KV blocks */

/* The value of metric `name` (with its labels, or followed by labels) in
 * a Prometheus text; -1 when absent. */
static double metric_of(const char *text, const char *name)
{
	size_t n = strlen(name);
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (*l == '#' || strncmp(l, name, n))
			continue;
		if (l[n] == ' ')
			return strtod(l + n + 1, NULL);
		if (l[n] == '{') {
			const char *e = strchr(l + n, '}');
			if (e && e[1] == ' ')
				return strtod(e + 2, NULL);
		}
	}
	return -1;
}

/*
 * GET /metrics (malloc'd text) or NULL.  With why: on NULL, why it gave
 * none, and *gone 1 when the server did not answer at all (the transfer
 * failed: refused, reset, timed out), 0 when it answered without metrics
 * (a status other than 200).
 */
static char *server_metrics_why(const char *base, char *why, size_t n,
				int *gone)
{
	char *u = http_url(base, "/metrics");
	struct http_buf b = {0};
	struct d0_err e = {{0}};
	long st = 0;
	int rc = http_request(u, NULL, 30, &st, &b, &e);
	server_answered |= rc == 0;
	if (rc < 0 || st != 200) {
		if (why && rc < 0)
			snprintf(why, n, "%.300s", e.msg);
		else if (why)
			snprintf(why, n, "GET %s: HTTP %ld", u, st);
		if (gone)
			*gone = rc < 0;
		free(b.data);
		b.data = NULL;
	}
	free(u);
	return b.data;
}

static char *server_metrics(const char *base)
{
	return server_metrics_why(base, NULL, 0, NULL);
}

/* The server's counters that service.preemption compares before and after. */
struct kv_counts {
	double preemptions, wrong, aborted;
};

static void kv_counts_of(const char *text, struct kv_counts *c)
{
	c->preemptions = text ? metric_of(text, "vllm:num_preemptions_total") : -1;
	c->wrong = text ? metric_of(text, "day0_recompute_checks_total{result=\"different\"}") : -1;
	c->aborted = text ? metric_of(text, "day0_preempted_requests_total{status=\"aborted\"}") : -1;
}

/*
 * After the sweep, with the server idle again: service.kv (no block lost
 * or leaked: every reference count 0, free and cached blocks adding up to
 * the cache) and service.preemption (the load overflowed the KV cache,
 * the server preempted and recomputed, and every request was answered,
 * none differently: the recomputed logits picked the tokens already
 * sent).  An endpoint that answers without day0's block metrics gets
 * skips that say so; one that no longer answers at all (it served the
 * load, then went away: crashed or killed) fails both, naming the error:
 * a server gone is not "another server", and nothing can be said of its
 * blocks or of the requests it was preempting.
 * Returns 1 when either failed.
 */
static int kv_checks(const char *base, const struct kv_counts *before,
		     int errors, json_t *doc)
{
	char d1[512], d2[512], why[400] = "", *text = NULL;
	const char *s1, *s2;
	struct kv_counts after;
	double total, used, refs, cached, freeb, running = 1, waiting = 1;
	int gone = 0;
	/* the server finishes what the last level cancelled within moments */
	for (int i = 0; i < 100 && (running || waiting); i++) {
		free(text);
		if (i)
			usleep(100000);
		text = server_metrics_why(base, why, sizeof why, &gone);
		running = text ? metric_of(text, "vllm:num_requests_running") : 0;
		waiting = text ? metric_of(text, "vllm:num_requests_waiting") : 0;
	}
	total = text ? metric_of(text, "day0_kv_blocks_total") : -1;
	used = text ? metric_of(text, "day0_kv_blocks{state=\"used\"}") : -1;
	refs = text ? metric_of(text, "day0_kv_block_refs") : -1;
	cached = text ? metric_of(text, "day0_kv_blocks{state=\"cached\"}") : -1;
	freeb = text ? metric_of(text, "day0_kv_blocks{state=\"free\"}") : -1;
	kv_counts_of(text, &after);
	if (!text && gone) {
		s1 = "fail";
		snprintf(d1, sizeof d1, "the server %s (%s): its KV blocks cannot "
			 "be checked", server_answered ? "stopped answering after "
			 "the load" : "never answered", why);
	} else if (!text) {
		s1 = "skip";
		snprintf(d1, sizeof d1, "no metrics (%s): not day0's serve", why);
	} else if (total < 0 || used < 0 || refs < 0) {
		s1 = "skip";
		snprintf(d1, sizeof d1, "%s/metrics has no KV block gauges "
			 "(day0_kv_blocks): not day0's serve", base);
	} else if (running > 0 || waiting > 0) {
		s1 = "fail";
		snprintf(d1, sizeof d1, "the server still runs %.0f and queues %.0f "
			 "requests 10 s after the load ended", running, waiting);
	} else if (used != 0 || refs != 0 || cached + freeb != total) {
		s1 = "fail";
		snprintf(d1, sizeof d1, "idle, yet %.0f of %.0f blocks in use, "
			 "reference counts summing to %.0f, %.0f free + %.0f cached "
			 "(%.0f lost)", used, total, refs, freeb, cached,
			 total - freeb - cached);
	} else {
		s1 = "pass";
		snprintf(d1, sizeof d1, "idle after the load: all %.0f KV blocks "
			 "back (%.0f free, %.0f cached prefix blocks), every "
			 "reference count 0", total, freeb, cached);
	}
	if (!text && gone) {
		s2 = "fail";
		snprintf(d2, sizeof d2, "the server %s (%s): its preemptions "
			 "cannot be checked", server_answered ? "stopped answering "
			 "after the load" : "never answered", why);
	} else if (!text) {
		s2 = "skip";
		snprintf(d2, sizeof d2, "no metrics (%s)", why);
	} else if (after.preemptions < 0 || before->preemptions < 0) {
		s2 = "skip";
		snprintf(d2, sizeof d2, "%s/metrics has no vllm:num_preemptions_total",
			 base);
	} else if (after.preemptions - before->preemptions <= 0) {
		s2 = "skip";
		snprintf(d2, sizeof d2, "no preemption during the load: it stayed "
			 "within the KV cache (raise the concurrency or the lengths "
			 "to test overload)");
	} else {
		double n = after.preemptions - before->preemptions;
		double wrong = after.wrong >= 0 ? after.wrong - before->wrong : -1;
		double lost = after.aborted >= 0 ? after.aborted - before->aborted : 0;
		s2 = errors || wrong > 0 || lost > 0 ? "fail" : wrong < 0 ? "warn" : "pass";
		snprintf(d2, sizeof d2, "%.0f preemptions under load; %d requests "
			 "failed, %.0f preempted requests aborted, %s", n, errors,
			 lost, wrong < 0 ? "recomputed tokens not checked (no "
					   "day0_recompute_checks_total)"
			 : wrong > 0 ? "recomputed logits picked another token"
				     : "recomputed logits picked every token already sent");
		if (wrong > 0)
			snprintf(d2 + strlen(d2), sizeof d2 - strlen(d2), " (%.0f times)",
				 wrong);
	}
	free(text);
	events_check("service.kv", s1, d1, NULL, NULL);
	events_check("service.preemption", s2, d2, NULL, NULL);
	json_object_set_new(doc, "service.kv", json_pack("{s:s, s:s}", "status", s1,
							 "detail", d1));
	json_object_set_new(doc, "service.preemption",
			    json_pack("{s:s, s:s}", "status", s2, "detail", d2));
	return !strcmp(s1, "fail") || !strcmp(s2, "fail");
}

static int load(int argc, char **argv)
{
	struct load_opts o;
	struct workload w = {0};
	struct d0_err err = {{0}};
	char model[256], detail[1024], api_detail[1024] = "", *url;
	char mwhy[512] = "";
	json_t *levels, *doc;
	int rc = parse(argc, argv, &o), api_fail = 0, load_fail = 0, tty;
	int judged = -1, kv_fail = 0, errs_all = 0;
	struct kv_counts before;
	if (rc)
		return rc < 0 ? EXIT_OK : rc;
	events_init(stdout, o.events);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rng_seed(&w.rng, o.seed);
	if (o.dataset && dataset_load(o.dataset, &w, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		for (size_t i = 0; i < w.n; i++)
			json_decref(w.prompts[i]);
		free(w.prompts);
		free(w.max_tokens);
		curl_global_cleanup();
		return EXIT_USAGE;
	}
	if (o.images && images_load(o.images, &w, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		for (size_t i = 0; i < w.nimg; i++)
			free(w.img_urls[i]);
		free(w.img_urls);
		curl_global_cleanup();
		return EXIT_USAGE;
	}
	tty = isatty(2) && !o.events;
	events_stage("load", "start", 0, 0, o.url);
	if (!o.get_path) {
		const char *given = o.model;
		o.model = find_model(&o, model, sizeof model, mwhy, sizeof mwhy);
		server_answered |= o.model && !given;
		if (!o.model) {
			char d[700];
			snprintf(d, sizeof d, "GET /v1/models gave no model: %s%s", mwhy,
				 strstr(mwhy, "HTTP") || strstr(mwhy, "lists no")
				     ? "" : " (is the server up?)");
			fprintf(stderr, "day0-engine: %s; pass --model\n", d);
			events_check("service.api", "fail", d, NULL, NULL);
			events_stage("load", "end", 1, EXIT_CHECK_FAILED, "no model");
			for (size_t i = 0; i < w.n; i++)
				json_decref(w.prompts[i]);
			free(w.prompts);
			free(w.max_tokens);
			curl_global_cleanup();
			return EXIT_CHECK_FAILED;
		}
	}
	if (o.api_check && !o.get_path) {
		char prompt[256];
		int n = 0;
		n += snprintf(prompt + n, sizeof prompt - (size_t)n, "[");
		for (int i = 0; i < 8; i++)
			n += snprintf(prompt + n, sizeof prompt - (size_t)n, "%s%d",
				      i ? "," : "", 1 + (i * 7) % (o.vocab - 1));
		snprintf(prompt + n, sizeof prompt - (size_t)n, "]");
		api_fail = service_api_check(o.url, o.model, prompt, api_detail,
					     sizeof api_detail);
		events_check("service.api", api_fail ? "fail" : "pass", api_detail,
			     NULL, NULL);
		if (!o.json && !o.events)
			printf("service.api: %s: %s\n", api_fail ? "FAIL" : "pass",
			       api_detail);
	}
	levels = json_array();
	{
		char *mt = o.get_path ? NULL : server_metrics(o.url);
		kv_counts_of(mt, &before);
		free(mt);
	}
	url = http_url(o.url, o.get_path ? o.get_path
				 : o.images ? "/v1/chat/completions"
					    : "/v1/completions");
	for (int i = 0; i < o.nconc; i++) {
		struct level lv = {.conc = o.conc[i], .rate = o.rate};
		json_t *lj;
		run_level(&o, &w, &lv, url, tty);
		lj = level_json(&lv);
		json_array_append(levels, lj);
		if (errors_of(&lv))
			load_fail = 1;
		if (o.conc[i] == (o.slo_at ? o.slo_at : o.conc[o.nconc - 1]))
			judged = i;
		/* the level's whole --json object rides along: `day0 diff`
		 * compares the percentiles, errors and stalls per concurrency */
		{
			json_t *pj = perf_json(&lv, lj);
			json_object_set(pj, "level", lj);
			events_emit("perf", pj);
		}
		events_stage("load", "progress", (double)(i + 1) / o.nconc, 0, NULL);
		json_decref(lj);
		free(lv.ttft.v); free(lv.tpot.v); free(lv.itl.v); free(lv.e2e.v);
		for (int k = 0; k <= ERR_STALL; k++)
			free(lv.example[k]);
	}
	free(url);
	{
		json_t *jl = json_array_get(levels, judged >= 0 ? (size_t)judged : 0);
		double gp = json_number_value(json_object_get(jl, "goodput"));
		int errs = 0, stalls = 0, slo_fail;
		size_t i;
		json_t *l;
		json_array_foreach(levels, i, l) {
			errs += (int)json_integer_value(json_object_get(l, "errors"));
			stalls += (int)json_integer_value(json_object_get(l, "stalls"));
		}
		slo_fail = (o.slo_ttft || o.slo_tpot) && (judged < 0 || gp < o.slo_min);
		errs_all = errs; /* stalls included */
		snprintf(detail, sizeof detail, "%d levels, %d errors, %d stalls%s; "
			 "goodput %.0f%% at concurrency %d (need %.0f%%%s)",
			 o.nconc, errs, stalls, stalls ? " among them (no token "
						 "within --stall)" : "",
			 gp * 100, judged >= 0 ? o.conc[judged] : 0, o.slo_min * 100,
			 (o.slo_ttft || o.slo_tpot) ? "" : ", no --slo given");
		json_array_foreach(levels, i, l) { /* the first refusal, said */
			const char *k;
			json_t *m;
			int said = 0;
			json_object_foreach(json_object_get(l, "error_examples"), k, m) {
				snprintf(detail + strlen(detail),
					 sizeof detail - strlen(detail),
					 "; first error at concurrency %d: %s: %s",
					 (int)json_number_value(json_object_get(
						 l, "concurrency")),
					 k, json_string_value(m));
				said = 1;
				break;
			}
			if (said)
				break;
		}
		load_fail |= slo_fail;
		events_check("service.load", load_fail ? "fail" : "pass", detail,
			     json_real(gp), json_real(o.slo_min));
		doc = json_pack("{s:s, s:s?, s:o, s:{s:s, s:s}, s:{s:s, s:s}}", "url",
				o.url, "model", o.model, "levels", levels, "service.api",
				"status", api_fail ? "fail" : o.api_check ? "pass" : "skip",
				"detail", api_detail, "service.load", "status",
				load_fail ? "fail" : "pass", "detail", detail);
		if (!o.get_path)
			kv_fail = kv_checks(o.url, &before, errs_all, doc);
		if (o.json)
			json_dumpf(doc, stdout, JSON_INDENT(2)), printf("\n");
		else if (!o.events) {
			print_table(&o, levels);
			printf("service.load: %s: %s\n", load_fail ? "FAIL" : "pass", detail);
			for (int k = 0; !o.get_path && k < 2; k++) {
				const char *id = k ? "service.preemption" : "service.kv";
				json_t *c = json_object_get(doc, id);
				printf("%s: %s: %s\n", id,
				       json_string_value(json_object_get(c, "status")),
				       json_string_value(json_object_get(c, "detail")));
			}
		}
		json_decref(doc);
	}
	rc = api_fail || load_fail || kv_fail ? EXIT_CHECK_FAILED : EXIT_OK;
	events_stage("load", "end", 1, rc, o.url);
	for (size_t i = 0; i < w.n; i++)
		json_decref(w.prompts[i]);
	free(w.prompts);
	free(w.max_tokens);
	for (size_t i = 0; i < w.nimg; i++)
		free(w.img_urls[i]);
	free(w.img_urls);
	curl_global_cleanup();
	return rc;
}
