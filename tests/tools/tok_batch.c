/*
 * tok_batch - the C tokenizer over many files in one process (a real
 * tokenizer.json takes a second to load), in the formats tests/tok/oracle.mjs
 * prints, so the test compares the two line by line:
 *
 *   tok_batch DIR check FILE...        what `oracle.mjs check` prints (E and D
 *                                      lines), then "R FILE ok|DIFF" for
 *                                      decode(encode(x)) == x on every file
 *   tok_batch DIR encode FILE...       per file: ids with the template, ids without
 *   tok_batch DIR decode IDS_FILE      per line of ids: the decoded text as JSON
 *   tok_batch DIR roundtrip FILE...    per file: "ok" or "DIFF" when
 *                                      decode(encode(x)) != x (lossy UTF-8 of x)
 *   tok_batch DIR bench FILE ROUNDS    encode MB/s (best of ROUNDS)
 */
#include "engine.h"
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *slurp(const char *path, size_t *n)
{
	char *d;
	struct d0_err err;
	if (file_read_all(path, 1u << 30, &d, n, &err) < 0) {
		fprintf(stderr, "tok_batch: %s\n", err.msg);
		exit(2);
	}
	return d;
}

static void print_ids(const int32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(i ? ",%d" : "%d", ids[i]);
	putchar('\n');
}

static void print_decoded(const struct tokenizer *t, const int32_t *ids,
			  size_t n)
{
	char *text, *js;
	size_t tn;
	struct d0_err err;
	json_t *s;
	if (tokenizer_decode(t, ids, n, 0, &text, &tn, &err) < 0) {
		printf("D ERROR %s\n", err.msg);
		return;
	}
	s = json_stringn(text, tn);
	js = json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
	printf("D %s\n", js);
	free(js);
	json_decref(s);
	free(text);
}

static int roundtrip(const struct tokenizer *t, const char *path);

/* Encode every file (E lines), decode whole and cut sequences (D lines),
 * then the round trips (R lines). */
static int check(const struct tokenizer *t, int n, char **files)
{
	int32_t **plain = calloc((size_t)n, sizeof *plain);
	size_t *np = calloc((size_t)n, sizeof *np);
	struct d0_err err;
	int bad = 0;
	for (int i = 0; i < n; i++) {
		size_t len, nid;
		char *d = slurp(files[i], &len);
		int32_t *ids;
		tokenizer_encode(t, d, len, 1, &ids, &nid, &err);
		printf("E ");
		print_ids(ids, nid);
		free(ids);
		tokenizer_encode(t, d, len, 0, &plain[i], &np[i], &err);
		printf("E ");
		print_ids(plain[i], np[i]);
		free(d);
	}
	for (int i = 0; i < n; i++) {
		size_t h = np[i] / 2;
		if (np[i])
			print_decoded(t, plain[i], np[i]);
		if (h)
			print_decoded(t, plain[i], h);
		if (np[i] > 1)
			print_decoded(t, plain[i] + 1, np[i] - 1);
		free(plain[i]);
	}
	for (int i = 0; i < n; i++) {
		printf("R %s ", files[i]);
		bad |= roundtrip(t, files[i]);
	}
	free(plain);
	free(np);
	return bad;
}

static int roundtrip(const struct tokenizer *t, const char *path)
{
	size_t n, nid, ln, dn;
	char *d = slurp(path, &n), *want = utf8_lossy(d, n, &ln), *got;
	int32_t *ids;
	struct d0_err err;
	int same;
	tokenizer_encode(t, d, n, 0, &ids, &nid, &err);
	if (tokenizer_decode(t, ids, nid, TOK_DECODE_NO_CLEANUP, &got, &dn,
			     &err) < 0) {
		printf("ERROR %s\n", err.msg);
		return 1;
	}
	same = dn == ln && !memcmp(got, want, ln);
	printf("%s\n", same ? "ok" : "DIFF");
	if (!same)
		fprintf(stderr, "%s: got '%s' want '%s'\n", path, got, want);
	free(ids);
	free(got);
	free(want);
	free(d);
	return !same;
}

int main(int argc, char **argv)
{
	struct tokenizer *t;
	struct d0_err err;
	int bad = 0;
	if (argc < 4) {
		fprintf(stderr, "usage: tok_batch DIR encode|decode|roundtrip|bench ...\n");
		return 2;
	}
	if (tokenizer_open(argv[1], &t, &err) < 0) {
		fprintf(stderr, "tok_batch: %s\n", err.msg);
		return 2;
	}
	if (!strcmp(argv[2], "check")) {
		bad = check(t, argc - 3, argv + 3);
	} else if (!strcmp(argv[2], "encode")) {
		for (int i = 3; i < argc; i++) {
			size_t n, nid;
			char *d = slurp(argv[i], &n);
			int32_t *ids;
			for (int special = 1; special >= 0; special--) {
				tokenizer_encode(t, d, n, special, &ids, &nid, &err);
				print_ids(ids, nid);
				free(ids);
			}
			free(d);
		}
	} else if (!strcmp(argv[2], "decode")) {
		size_t n;
		char *d = slurp(argv[3], &n), *save = NULL;
		for (char *line = strtok_r(d, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			int32_t *ids = malloc(strlen(line) * sizeof *ids);
			size_t nid = 0, tn;
			char *text, *js, *p = line;
			json_t *s;
			while (*p) {
				ids[nid++] = (int32_t)strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
			if (tokenizer_decode(t, ids, nid, 0, &text, &tn, &err) < 0) {
				printf("ERROR %s\n", err.msg);
				bad = 1;
			} else {
				s = json_stringn(text, tn);
				js = json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
				printf("%s\n", js);
				free(js);
				json_decref(s);
				free(text);
			}
			free(ids);
		}
		free(d);
	} else if (!strcmp(argv[2], "roundtrip")) {
		for (int i = 3; i < argc; i++)
			bad |= roundtrip(t, argv[i]);
	} else if (!strcmp(argv[2], "bench")) {
		size_t n, nid;
		char *d = slurp(argv[3], &n);
		int rounds = argc > 4 ? atoi(argv[4]) : 3;
		double best = 1e30;
		for (int r = 0; r < rounds; r++) {
			int32_t *ids;
			double t0 = now_s(), dt;
			tokenizer_encode(t, d, n, 0, &ids, &nid, &err);
			dt = now_s() - t0;
			if (dt < best)
				best = dt;
			free(ids);
		}
		printf("%.3f\n", (double)n / best / 1e6);
		free(d);
	} else {
		fprintf(stderr, "tok_batch: unknown mode '%s'\n", argv[2]);
		bad = 2;
	}
	tokenizer_free(t);
	return bad;
}
