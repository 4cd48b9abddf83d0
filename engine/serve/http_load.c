/*
 * http_load.c - the client side of the service checks (http_load.h):
 * blocking requests for `probe` and the service.api conformance pass that
 * `load` runs before it measures.  `load`'s event loop itself is in
 * step_load.c (libcurl multi).
 */
#include "http_load.h"

#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

size_t http_buf_write(char *p, size_t size, size_t n, void *arg)
{
	struct http_buf *b = arg;
	size_t add = size * n;
	char *d = realloc(b->data, b->len + add + 1);
	if (!d)
		return 0;
	b->data = d;
	memcpy(b->data + b->len, p, add);
	b->len += add;
	b->data[b->len] = 0;
	return add;
}

char *http_url(const char *base, const char *path)
{
	size_t n = strlen(base);
	char *u = malloc(n + strlen(path) + 2);
	while (n && base[n - 1] == '/')
		n--;
	memcpy(u, base, n);
	strcpy(u + n, path);
	return u;
}

int http_request(const char *url, const char *body, double timeout_s,
		 long *status, struct http_buf *out, struct d0_err *err)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	CURLcode rc;
	long os_errno = 0;
	out->data = NULL;
	out->len = 0;
	*status = 0;
	if (!c)
		return d0_errf(err, "%s: cannot start a transfer", url);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	if (body) {
		h = curl_slist_append(h, "Content-Type: application/json");
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	}
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	else /* the system's word too: "Connection refused" */
		curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (rc != CURLE_OK && os_errno)
		return d0_errf(err, "%s: %s (%s)", url, curl_easy_strerror(rc),
			       strerror((int)os_errno));
	if (rc != CURLE_OK)
		return d0_errf(err, "%s: %s", url, curl_easy_strerror(rc));
	if (!out->data)
		out->data = calloc(1, 1);
	return 0;
}

/* Token ids of a completion document's first choice, or NULL. */
static json_t *choice0(json_t *doc)
{
	return json_array_get(json_object_get(doc, "choices"), 0);
}

/* Concatenate the token_ids of every event of an SSE body; *done when the
 * stream ended with [DONE]. */
static json_t *stream_ids(const char *body, int *done, int *events)
{
	json_t *ids = json_array();
	const char *p = body;
	*done = *events = 0;
	while ((p = strstr(p, "data: "))) {
		const char *e = strstr(p, "\n\n");
		size_t n = e ? (size_t)(e - p - 6) : strlen(p + 6);
		json_t *doc;
		if (n == 6 && !strncmp(p + 6, "[DONE]", 6)) {
			*done = 1;
			break;
		}
		doc = json_loadb(p + 6, n, 0, NULL);
		if (doc) {
			json_t *t = json_object_get(choice0(doc), "token_ids");
			(*events)++;
			if (json_is_array(t))
				json_array_extend(ids, t);
			json_decref(doc);
		}
		p += 6;
	}
	return ids;
}

int service_api_check(const char *base, const char *model,
		      const char *prompt_json, char *detail, size_t n)
{
	struct d0_err e = {{0}};
	struct http_buf b = {0};
	long st = 0;
	char *u, body[4096];
	json_t *doc = NULL, *ids = NULL, *sids = NULL;
	int fail = 1, done = 0, events = 0;
	char mfield[300] = "";
#define API_FAIL(...) do { snprintf(detail, n, __VA_ARGS__); goto out; } while (0)
	if (model)
		snprintf(mfield, sizeof mfield, "\"model\":\"%s\",", model);
	u = http_url(base, "/v1/models");
	if (http_request(u, NULL, 30, &st, &b, &e) < 0) {
		free(u);
		API_FAIL("%s", e.msg);
	}
	free(u);
	doc = json_loads(b.data, 0, NULL);
	free(b.data);
	if (st != 200 || !json_is_array(json_object_get(doc, "data")) ||
	    !json_array_size(json_object_get(doc, "data")))
		API_FAIL("GET /v1/models: status %ld, expected 200 and a non-empty "
			 "data list", st);
	json_decref(doc);
	doc = NULL;
	u = http_url(base, "/health");
	if (http_request(u, NULL, 30, &st, &b, &e) < 0 || st != 200) {
		free(u);
		free(b.data);
		API_FAIL("GET /health: status %ld, expected 200", st);
	}
	free(u);
	free(b.data);
	snprintf(body, sizeof body, "{%s\"prompt\":%s,\"max_tokens\":8,"
		 "\"temperature\":0}", mfield, prompt_json);
	u = http_url(base, "/v1/completions");
	if (http_request(u, body, 120, &st, &b, &e) < 0) {
		free(u);
		API_FAIL("%s", e.msg);
	}
	doc = json_loads(b.data, 0, NULL);
	free(b.data);
	if (st != 200 || !choice0(doc) ||
	    !json_object_get(choice0(doc), "finish_reason") ||
	    !json_is_object(json_object_get(doc, "usage"))) {
		free(u);
		API_FAIL("POST /v1/completions: status %ld, expected 200 with "
			 "choices[0].finish_reason and usage", st);
	}
	ids = json_incref(json_object_get(choice0(doc), "token_ids"));
	snprintf(body, sizeof body, "{%s\"prompt\":%s,\"max_tokens\":8,"
		 "\"temperature\":0,\"stream\":true}", mfield, prompt_json);
	if (http_request(u, body, 120, &st, &b, &e) < 0) {
		free(u);
		API_FAIL("%s", e.msg);
	}
	sids = stream_ids(b.data, &done, &events);
	free(b.data);
	if (st != 200 || !done || !events) {
		free(u);
		API_FAIL("POST /v1/completions stream: status %ld, %d events, %s",
			 st, events, done ? "[DONE]" : "no [DONE] at the end");
	}
	if (ids && !json_equal(ids, sids)) {
		free(u);
		API_FAIL("streamed token_ids differ from the unstreamed answer");
	}
	if (http_request(u, "{\"prompt\": [1, 2", 30, &st, &b, &e) < 0) {
		free(u);
		API_FAIL("%s", e.msg);
	}
	free(u);
	json_decref(doc);
	doc = json_loads(b.data, 0, NULL);
	free(b.data);
	if (st < 400 || st > 499 ||
	    !json_is_object(json_object_get(doc, "error")))
		API_FAIL("malformed JSON body: status %ld, expected a 4xx with an "
			 "error object", st);
	snprintf(detail, n, "models, health, completion (%s), stream "
		 "(%d events, [DONE]%s), malformed body -> %ld with an error "
		 "object", ids ? "token_ids" : "no token_ids", events,
		 ids ? ", same tokens" : "", st);
	fail = 0;
out:
#undef API_FAIL
	json_decref(doc);
	json_decref(ids);
	json_decref(sids);
	return fail;
}

const char *http_served_model(const char *base, char *buf, size_t n,
			      char *why, size_t wn)
{
	struct http_buf b = {0};
	struct d0_err e = {{0}};
	long st = 0;
	char *u = http_url(base, "/v1/models");
	json_t *doc;
	const char *id;
	if (http_request(u, NULL, 30, &st, &b, &e) < 0 || st != 200) {
		if (why && e.msg[0])
			snprintf(why, wn, "%s", e.msg);
		else if (why)
			snprintf(why, wn, "%s: HTTP %ld", u, st);
		free(u);
		free(b.data);
		return NULL;
	}
	doc = json_loads(b.data, 0, NULL);
	free(b.data);
	id = json_string_value(json_object_get(
		json_array_get(json_object_get(doc, "data"), 0), "id"));
	if (id)
		snprintf(buf, n, "%s", id);
	else if (why)
		snprintf(why, wn, "%s: lists no model", u);
	free(u);
	json_decref(doc);
	return id ? buf : NULL;
}
