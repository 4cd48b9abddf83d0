/*
 * http_load.h - what `load` and `probe` share: OpenAI-endpoint client
 * pieces over libcurl (engine/http_load.c).
 */
#ifndef DAY0_HTTP_LOAD_H
#define DAY0_HTTP_LOAD_H

#include <stddef.h>

#include "engine.h"

/* A response body grown by libcurl's write callback. */
struct http_buf {
	char *data;
	size_t len;
};
size_t http_buf_write(char *p, size_t size, size_t n, void *buf);

/*
 * One blocking request (GET when body is NULL, else POST of JSON).  Fills
 * *status and out (caller frees out->data).  -1 with err when the
 * transfer itself failed (connect, timeout).
 */
int http_request(const char *url, const char *body, double timeout_s,
		 long *status, struct http_buf *out, struct d0_err *err);

/* "http://h:p" + "/v1/completions" without a doubled slash (malloc'd). */
char *http_url(const char *base, const char *path);
/* The first model id the endpoint's GET /v1/models lists, into buf (n
 * bytes); NULL when it does not answer or lists none, with why (wn bytes,
 * may be NULL) saying which: the transfer's error ("Connection refused"),
 * the HTTP status, or an empty list. */
const char *http_served_model(const char *base, char *buf, size_t n,
			      char *why, size_t wn);

/*
 * The service.api conformance pass against an OpenAI-compatible endpoint:
 * models list, health, a greedy completion unstreamed and streamed (same
 * tokens when the server returns token_ids), a malformed body refused
 * with a 4xx and an error object.  detail gets the first failure or a
 * summary; returns 0 pass, 1 fail.
 */
int service_api_check(const char *base, const char *model,
		      const char *prompt_json, char *detail, size_t n);

#endif
