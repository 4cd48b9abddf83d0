/*
 * jsonl_check - validate a stream of day0 events for tests:
 *   jsonl_check FILE [KEY=VAL,KEY=VAL ...]
 * Every line must be a JSON object with the envelope (v=1, seq from 1
 * without gaps, ts, node, type).  Each further argument is a pattern that
 * at least one line must match (string or integer fields compared as
 * text).  Exit 0 when all hold, 1 otherwise, with the reason on stderr.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int field_is(json_t *o, const char *key, const char *want)
{
	json_t *v = json_object_get(o, key);
	char buf[64];
	if (json_is_string(v))
		return !strcmp(json_string_value(v), want);
	if (json_is_integer(v)) {
		snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
		return !strcmp(buf, want);
	}
	if (json_is_true(v))
		return !strcmp(want, "true");
	if (json_is_false(v))
		return !strcmp(want, "false");
	return 0;
}

static int matches(json_t *o, const char *pattern)
{
	char *p = strdup(pattern), *tok, *save = NULL;
	int ok = 1;
	for (tok = strtok_r(p, ",", &save); tok && ok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			ok = 0;
			break;
		}
		*eq = 0;
		ok = field_is(o, tok, eq + 1);
	}
	free(p);
	return ok;
}

int main(int argc, char **argv)
{
	FILE *f;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	long long seq = 0;
	int lineno = 0, *hit;
	json_t *o = NULL;
	if (argc < 2 || !(f = fopen(argv[1], "r"))) {
		fprintf(stderr, "usage: jsonl_check FILE [PATTERN...]\n");
		return 2;
	}
	hit = calloc((size_t)argc, sizeof *hit);
	while ((n = getline(&line, &cap, f)) > 0) {
		json_error_t je;
		o = json_loadb(line, (size_t)n, 0, &je);
		lineno++;
		if (!json_is_object(o)) {
			fprintf(stderr, "line %d: not a JSON object: %s\n", lineno, je.text);
			goto bad;
		}
		if (!field_is(o, "v", "1") || !json_is_integer(json_object_get(o, "ts")) ||
		    !json_is_string(json_object_get(o, "node")) ||
		    !json_is_string(json_object_get(o, "type"))) {
			fprintf(stderr, "line %d: envelope incomplete\n", lineno);
			goto bad;
		}
		if (json_integer_value(json_object_get(o, "seq")) != ++seq) {
			fprintf(stderr, "line %d: seq %lld, expected %lld\n", lineno,
				(long long)json_integer_value(json_object_get(o, "seq")), seq);
			goto bad;
		}
		for (int i = 2; i < argc; i++)
			if (matches(o, argv[i]))
				hit[i] = 1;
		json_decref(o);
	}
	free(line);
	fclose(f);
	if (lineno == 0) {
		fprintf(stderr, "no events\n");
		free(hit);
		return 1;
	}
	for (int i = 2; i < argc; i++)
		if (!hit[i]) {
			fprintf(stderr, "no event matches %s\n", argv[i]);
			free(hit);
			return 1;
		}
	free(hit);
	return 0;
bad: /* a failing check: free what the sanitizer would report */
	json_decref(o);
	free(line);
	fclose(f);
	free(hit);
	return 1;
}
