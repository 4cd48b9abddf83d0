/*
 * layout_opts.c - one parser for the layout, budget and prompt options the
 * steps share (layout_opts.h).  Before it, five steps carried their own
 * copy of --tp/--pp/--ep/--card-mem/--tokens, with different messages and
 * defaults; now a new prompt form (--prompt text) reaches all of them at
 * once.
 */
#include "layout_opts.h"
#include "engine.h"

#include <stdlib.h>
#include <string.h>

int parse_tokens(const char *s, int64_t **out, int *n)
{
	char *dup = strdup(s), *tok, *save = NULL;
	*out = NULL;
	*n = 0;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		long v;
		if (parse_long(tok, 0, 1L << 30, &v) < 0) {
			free(dup);
			free(*out);
			*out = NULL;
			return -1;
		}
		*out = realloc(*out, (size_t)(*n + 1) * sizeof **out);
		(*out)[(*n)++] = v;
	}
	free(dup);
	return *n ? 0 : -1;
}

void layout_opts_init(struct layout_opts *o)
{
	memset(o, 0, sizeof *o);
	o->d.tp = o->d.pp = o->d.ep = 1;
}

int layout_opts_take(struct layout_opts *o, int ch, const char *arg,
		     char *why, size_t n)
{
	long v;
	switch (ch) {
	case LOPT_TP:
	case LOPT_PP:
	case LOPT_EP: {
		const char *name = ch == LOPT_TP ? "tp" : ch == LOPT_PP ? "pp" : "ep";
		if (parse_long(arg, 1, 65536, &v) < 0) {
			snprintf(why, n, "--%s: expected an integer >= 1, got '%s'",
				 name, arg);
			return -1;
		}
		*(ch == LOPT_TP ? &o->d.tp : ch == LOPT_PP ? &o->d.pp : &o->d.ep) =
			(int)v;
		o->tp_given |= ch == LOPT_TP;
		return 1;
	}
	case LOPT_CARD_MEM:
		if (parse_size(arg, &o->card_mem) < 0 || !o->card_mem) {
			snprintf(why, n, "--card-mem: expected bytes per card "
				 "(e.g. 64M, 2G), got '%s'", arg);
			return -1;
		}
		return 1;
	case LOPT_TOKENS: o->tokens_arg = arg; return 1;
	case LOPT_PROMPT: o->prompt = arg; return 1;
	case LOPT_PROMPT_FILE: o->prompt_file = arg; return 1;
	}
	return 0;
}

int layout_opts_has_prompt(const struct layout_opts *o)
{
	return o->tokens_arg || o->prompt || o->prompt_file;
}

static int prompt_text(struct layout_opts *o, struct d0_err *err)
{
	size_t len;
	if (o->prompt) {
		o->prompt_text = strdup(o->prompt);
		return 0;
	}
	if (file_read_all(o->prompt_file, 16u << 20, &o->prompt_text, &len,
			  err) < 0)
		return -1;
	if (strlen(o->prompt_text) != len)
		return d0_errf(err, "%s: --prompt-file: the text holds a NUL "
			       "byte", o->prompt_file);
	return 0;
}

int layout_opts_prompt(struct layout_opts *o, const char *dir,
		       struct d0_err *err)
{
	char *tj = path_join(dir, "tokenizer.json");
	int given = !!o->tokens_arg + !!o->prompt + !!o->prompt_file, rc = 0;
	int has_tok = path_exists(tj);
	free(tj);
	if (given != 1)
		return d0_errf(err, "give exactly one of --tokens, --prompt and "
			       "--prompt-file");
	if (o->tokens_arg) {
		if (parse_tokens(o->tokens_arg, &o->tokens, &o->ntok) < 0)
			return d0_errf(err, "--tokens: expected a comma list of "
				       "token ids");
		if (has_tok && tokenizer_open(dir, &o->tok, err) < 0)
			o->tok = NULL; /* ids need no tokenizer; text output is off */
		return 0;
	}
	if (!has_tok)
		return d0_errf(err, "%s: --prompt needs the model's tokenizer.json "
			       "(give --tokens instead)", dir);
	if (prompt_text(o, err) < 0 || tokenizer_open(dir, &o->tok, err) < 0)
		return -1;
	{
		int32_t *ids;
		size_t n;
		tokenizer_encode(o->tok, o->prompt_text, strlen(o->prompt_text), 1,
				 &ids, &n, err);
		if (!n)
			rc = d0_errf(err, "--prompt: the text encodes to no tokens");
		o->tokens = malloc((n ? n : 1) * sizeof *o->tokens);
		for (size_t i = 0; i < n; i++)
			o->tokens[i] = ids[i];
		o->ntok = (int)n;
		free(ids);
	}
	return rc;
}

char *layout_opts_decode(const struct layout_opts *o, const int64_t *ids,
			 int n)
{
	int32_t *v;
	char *text = NULL;
	struct d0_err err;
	if (!o->tok)
		return NULL;
	v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
	for (int i = 0; i < n; i++)
		v[i] = (int32_t)ids[i];
	if (tokenizer_decode(o->tok, v, (size_t)n, TOK_DECODE_SKIP_UNKNOWN,
			     &text, NULL, &err) < 0)
		text = NULL;
	free(v);
	return text;
}

void layout_opts_free(struct layout_opts *o)
{
	free(o->tokens);
	free(o->prompt_text);
	tokenizer_free(o->tok);
	o->tokens = NULL;
	o->prompt_text = NULL;
	o->tok = NULL;
}
