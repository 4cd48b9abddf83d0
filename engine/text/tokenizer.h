/*
 * tokenizer.h - Hugging Face tokenizer.json in C: text in, ids out, and back.
 *
 * The engine runs on token ids; release-day teams read text.  This module
 * loads a model directory's tokenizer.json (+ tokenizer_config.json) as the
 * flagship families ship it -- byte-level BPE with the Llama-3, Qwen2/3 and
 * DeepSeek-V3 split regexes (compiled with PCRE2), and the SentencePiece
 * style BPE with byte fallback of Llama-2/Mistral/Mixtral -- and encodes and
 * decodes exactly as Hugging Face's tokenizers do (docs/tokenizer.md).
 */
#ifndef DAY0_TOKENIZER_H
#define DAY0_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct d0_err;
struct tokenizer;

/* What inspect reports about a tokenizer. */
struct tokenizer_info {
	const char *kind;      /* "byte-level BPE" or "BPE with byte fallback" */
	int64_t n_ids;         /* highest id + 1 */
	int64_t n_vocab;       /* model vocabulary entries */
	int64_t n_merges;
	int64_t n_added;       /* added tokens */
	int64_t n_special;     /* added tokens marked special */
	int64_t bos_id, eos_id; /* -1 when tokenizer_config.json names none */
	const char *bos, *eos;
};

/* Load DIR/tokenizer.json and (if present) DIR/tokenizer_config.json.
 * Errors name the file and the JSON field. */
int tokenizer_open(const char *dir, struct tokenizer **out, struct d0_err *err);
/* Same, from explicit paths (config may be NULL). */
int tokenizer_load(const char *json_path, const char *config_path,
		   struct tokenizer **out, struct d0_err *err);
void tokenizer_free(struct tokenizer *t);

/* Encode UTF-8 text (invalid sequences become U+FFFD, as the reference
 * library does with text read lossily).  add_special applies the
 * post-processor's template (Llama's BOS).  *ids is malloc'd. */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len,
		     int add_special, int32_t **ids, size_t *n,
		     struct d0_err *err);

/* Decode ids to UTF-8 text (*text malloc'd, NUL-terminated).  Byte
 * sequences that are not UTF-8 decode to U+FFFD.  Flags below. */
enum {
	TOK_DECODE_SKIP_SPECIAL = 1, /* drop special tokens */
	TOK_DECODE_NO_CLEANUP = 2,   /* ignore clean_up_tokenization_spaces */
	TOK_DECODE_SKIP_UNKNOWN = 4, /* skip ids with no token (a vocabulary
					padded past the tokenizer's), as the
					Rust library does */
};
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
		     int flags, char **text, size_t *len, struct d0_err *err);

/* Build from a parsed tokenizer.json (no tokenizer_config.json). */
typedef struct json_t json_t;
int tokenizer_from_json(json_t *doc, const char *name, struct tokenizer **out,
			struct d0_err *err);

/* The normalized pre-tokenizer pieces of a text, in the model's alphabet
 * (what BPE merges are trained on). */
void tokenizer_pieces(const struct tokenizer *t, const char *text, size_t len,
		      void (*each)(void *ctx, const char *piece, size_t n),
		      void *ctx);

/* gen-model: write DIR/tokenizer.json and DIR/tokenizer_config.json in the
 * format the family ships (Llama-3, Qwen, DeepSeek-V3 byte-level BPE; the
 * Llama-2 SentencePiece form for mistral/mixtral) with BPE merges trained
 * deterministically on a built-in text, every id below vocab.  Writes
 * nothing and returns 0 when vocab is too small for the family's special
 * tokens (*written = 0). */
int tokenizer_write_family(const char *dir, const char *model_type,
			   int64_t vocab, int *written, struct d0_err *err);

/* Copy SRC's tokenizer.json and tokenizer_config.json (those present) to
 * DST. */
int tokenizer_copy_files(const char *src, const char *dst, struct d0_err *err);

void tokenizer_describe(const struct tokenizer *t, struct tokenizer_info *info);
/* The token string of an id (NULL if none). */
const char *tokenizer_id_token(const struct tokenizer *t, int64_t id);

/* UTF-8 as the WHATWG decoder reads it: every maximal invalid subpart
 * becomes U+FFFD.  Returns a malloc'd NUL-terminated copy. */
char *utf8_lossy(const char *s, size_t len, size_t *out_len);
/* 1 when s is valid UTF-8 without U+FFFD. */
int utf8_clean(const char *s, size_t len);

#endif
