/*
 * step_tokenize.c - `day0-engine tokenize`: any model directory's
 * tokenizer.json by hand.  Text (or a file, bytes as they are) in, ids out;
 * `--decode` the other way.  The same code encodes `--prompt` for run,
 * perf, soak and validate, so what this prints is what the model is fed.
 */
#include "engine.h"
#include "tokenizer.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv);

const struct step_entry step_tokenize = {
	.name = "tokenize",
	.usage = "DIR (--text T | --file F | --decode ID,ID,...) [--json] "
		 "[--no-special] [--skip-special]\n"
		 "  DIR           a model directory holding tokenizer.json "
		 "(+ tokenizer_config.json)\n"
		 "  --text T      encode T; prints the ids, comma separated\n"
		 "  --file F      encode the bytes of file F (invalid UTF-8 "
		 "reads as U+FFFD)\n"
		 "  --decode IDS  decode a comma list of ids; prints the text\n"
		 "  --json        print {\"ids\":[...],\"text\":...,\"tokens\":"
		 "[...]} instead\n"
		 "  --no-special  do not add the template's special tokens "
		 "(BOS) when encoding\n"
		 "  --skip-special  drop special tokens when decoding\n"
		 "example: day0-engine tokenize /models/llama --text 'Hello "
		 "world' --json",
	.summary = "encode text to token ids (or decode ids) with the model's "
		   "tokenizer.json",
	.run = run,
};

int parse_tokens(const char *s, int64_t **out, int *n);

struct tok_opts {
	const char *dir, *text, *file, *decode;
	int json, no_special, skip_special;
};

static int parse(int argc, char **argv, struct tok_opts *o)
{
	static const struct option lo[] = {
		{"text", 1, 0, 't'}, {"file", 1, 0, 'f'}, {"decode", 1, 0, 'd'},
		{"json", 0, 0, 'j'}, {"no-special", 0, 0, 'n'},
		{"skip-special", 0, 0, 's'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_tokenize;
	int ch;
	memset(o, 0, sizeof *o);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 't': o->text = optarg; break;
		case 'f': o->file = optarg; break;
		case 'd': o->decode = optarg; break;
		case 'j': o->json = 1; break;
		case 'n': o->no_special = 1; break;
		case 's': o->skip_special = 1; break;
		case 'h': step_help(S); return -1;
		default:
			return step_usage_error(S, "unknown or incomplete option "
						"'%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected one model DIR");
	o->dir = argv[optind];
	if (!!o->text + !!o->file + !!o->decode != 1)
		return step_usage_error(S, "give exactly one of --text, --file "
					"and --decode");
	return 0;
}

static int print_decode(const struct tokenizer *t, const struct tok_opts *o)
{
	int64_t *v;
	int n;
	int32_t *ids;
	char *text;
	size_t len;
	struct d0_err err;
	if (parse_tokens(o->decode, &v, &n) < 0)
		return step_usage_error(&step_tokenize, "--decode: expected a "
					"comma list of token ids");
	ids = malloc((size_t)n * sizeof *ids);
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)v[i];
	free(v);
	if (tokenizer_decode(t, ids, (size_t)n,
			     o->skip_special ? TOK_DECODE_SKIP_SPECIAL : 0,
			     &text, &len, &err) < 0) {
		fprintf(stderr, "day0-engine: %s/tokenizer.json: %s\n", o->dir,
			err.msg);
		free(ids);
		return EXIT_USAGE;
	}
	if (o->json) {
		json_t *doc = json_pack("{s:s%}", "text", text, len);
		char *s = json_dumps(doc, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(doc);
	} else {
		fwrite(text, 1, len, stdout);
		putchar('\n');
	}
	free(text);
	free(ids);
	return EXIT_OK;
}

static int print_encode(const struct tokenizer *t, const struct tok_opts *o)
{
	char *data = NULL;
	size_t len;
	int32_t *ids;
	size_t n;
	struct d0_err err;
	if (o->file) {
		if (file_read_all(o->file, 1u << 30, &data, &len, &err) < 0) {
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			return EXIT_USAGE;
		}
	} else {
		data = strdup(o->text);
		len = strlen(data);
	}
	tokenizer_encode(t, data, len, !o->no_special, &ids, &n, &err);
	if (o->json) {
		json_t *a = json_array(), *tk = json_array(), *doc;
		char *s;
		for (size_t i = 0; i < n; i++) {
			json_array_append_new(a, json_integer(ids[i]));
			json_array_append_new(tk, json_string(tokenizer_id_token(t, ids[i])));
		}
		doc = json_pack("{s:o, s:o, s:i}", "ids", a, "tokens", tk, "count",
				(int)n);
		s = json_dumps(doc, JSON_COMPACT);
		printf("%s\n", s);
		free(s);
		json_decref(doc);
	} else {
		for (size_t i = 0; i < n; i++)
			printf(i ? ",%d" : "%d", ids[i]);
		putchar('\n');
	}
	free(ids);
	free(data);
	return EXIT_OK;
}

static int run(int argc, char **argv)
{
	struct tok_opts o;
	struct tokenizer *t;
	struct d0_err err;
	int rc = parse(argc, argv, &o);
	if (rc != 0)
		return rc < 0 ? EXIT_OK : rc;
	if (tokenizer_open(o.dir, &t, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		return EXIT_USAGE;
	}
	rc = o.decode ? print_decode(t, &o) : print_encode(t, &o);
	tokenizer_free(t);
	return rc;
}
