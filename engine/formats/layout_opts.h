/*
 * layout_opts.h - the options every step that lays a model out shares, one
 * parser for all of them (run, perf, soak, validate, plan, convert):
 *
 *   --tp T --pp P --ep E      the layout (tp defaults to 1: one rank needs
 *                             no flag)
 *   --card-mem BYTES          the per-card memory budget
 *   --tokens 1,2,3            the prompt as ids, or as text encoded with the
 *   --prompt TEXT             model directory's tokenizer.json:
 *   --prompt-file F
 *
 * A step lists the entries it accepts in its getopt_long table
 * (LAYOUT_LONG_OPTS, CARD_MEM_LONG_OPT, PROMPT_LONG_OPTS) and hands every
 * option its switch does not know to layout_opts_take.
 */
#ifndef DAY0_LAYOUT_OPTS_H
#define DAY0_LAYOUT_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "runtime.h"
#include "tokenizer.h"

struct d0_err;
struct tokenizer;

enum {
	LOPT_TP = 0x4000,
	LOPT_PP,
	LOPT_EP,
	LOPT_CARD_MEM,
	LOPT_TOKENS,
	LOPT_PROMPT,
	LOPT_PROMPT_FILE,
};

#define LAYOUT_LONG_OPTS                                                       \
	{"tp", 1, 0, LOPT_TP}, {"pp", 1, 0, LOPT_PP}, {"ep", 1, 0, LOPT_EP}
#define CARD_MEM_LONG_OPT {"card-mem", 1, 0, LOPT_CARD_MEM}
#define PROMPT_LONG_OPTS                                                       \
	{"tokens", 1, 0, LOPT_TOKENS}, {"prompt", 1, 0, LOPT_PROMPT},          \
		{"prompt-file", 1, 0, LOPT_PROMPT_FILE}

/* The usage text of the prompt options, for steps' usage strings. */
#define PROMPT_USAGE "(--tokens 1,2,3 | --prompt TEXT | --prompt-file F)"

struct layout_opts {
	struct layout_dims d; /* tp, pp, ep: 1 unless given */
	int tp_given;
	uint64_t card_mem; /* 0: no budget */
	const char *tokens_arg, *prompt, *prompt_file;
	/* after layout_opts_prompt: */
	int64_t *tokens;
	int ntok;
	char *prompt_text;      /* the text, when given as text */
	struct tokenizer *tok;  /* the model's tokenizer, NULL if it has none */
};

void layout_opts_init(struct layout_opts *o);

/* 1: ch is one of these options and arg is good; 0: not one of them;
 * -1: a bad value (why says which option expected what). */
int layout_opts_take(struct layout_opts *o, int ch, const char *arg,
		     char *why, size_t n);

/* The prompt's ids: --tokens as given, or --prompt / --prompt-file
 * encoded with DIR/tokenizer.json (its template's BOS included).  Also
 * loads the tokenizer for --tokens when the model has one, so a step can
 * decode what it generates.  -1 with err on a usage error (none or two
 * given, bad ids, no tokenizer for text). */
int layout_opts_prompt(struct layout_opts *o, const char *dir,
		       struct d0_err *err);

/* 1 when the step was given any prompt option. */
int layout_opts_has_prompt(const struct layout_opts *o);

/* Decode ids with the model's tokenizer (NULL when it has none);
 * malloc'd text. */
char *layout_opts_decode(const struct layout_opts *o, const int64_t *ids,
			 int n);

void layout_opts_free(struct layout_opts *o);

/* "1,2,3" -> ids (malloc'd); -1 when empty or not ids. */
int parse_tokens(const char *s, int64_t **out, int *n);

#endif
