/*
 * tokenizer.c - Hugging Face tokenizer.json: load, encode, decode.
 *
 * The pipeline is the reference library's, stage by stage, so that ids are
 * identical to Hugging Face's own implementations (the tests hold it to
 * @huggingface/tokenizers on a multilingual corpus):
 *
 *   text -> lossy UTF-8 -> split out added tokens (longest match, never
 *   normalized ones first) -> normalizer (NFC via utf8proc, Prepend,
 *   Replace) -> split out normalized added tokens -> pre-tokenizer (Split
 *   regexes compiled by PCRE2, ByteLevel, Metaspace) -> BPE on ids with a
 *   heap of merge ranks (byte fallback, unk fusing, ignore_merges) ->
 *   post-processor template (BOS).
 *
 *   ids -> token strings -> decoder chain (ByteLevel, Replace, ByteFallback,
 *   Fuse, Strip, Metaspace) -> clean_up_tokenization_spaces.
 *
 * Everything a tokenizer.json holds that this file does not implement is
 * refused at load with the field's path, never silently ignored.
 */
#include "tokenizer.h"
#include "engine.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------- UTF-8 */

/* Append a code point as UTF-8 to buf; returns bytes written. */
static int utf8_put(char *buf, uint32_t cp)
{
	if (cp < 0x80) {
		buf[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		buf[0] = (char)(0xC0 | (cp >> 6));
		buf[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		buf[0] = (char)(0xE0 | (cp >> 12));
		buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		buf[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	buf[0] = (char)(0xF0 | (cp >> 18));
	buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	buf[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* Length of the code point starting at s (valid UTF-8 assumed). */
static size_t utf8_len1(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static uint32_t utf8_get(const unsigned char *s, size_t *n)
{
	size_t k = utf8_len1(s[0]);
	uint32_t cp = k == 1 ? s[0] : k == 2 ? s[0] & 0x1Fu
				   : k == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
	for (size_t i = 1; i < k; i++)
		cp = (cp << 6) | (s[i] & 0x3Fu);
	*n = k;
	return cp;
}

/* The WHATWG UTF-8 decoder (what TextDecoder and Rust's from_utf8_lossy
 * do): a maximal invalid subpart becomes one U+FFFD. */
char *utf8_lossy(const char *s, size_t len, size_t *out_len)
{
	const unsigned char *p = (const unsigned char *)s;
	char *out = malloc(len * 3 + 1);
	size_t o = 0, i = 0;
	if (!out)
		abort();
	while (i < len) {
		unsigned c = p[i], need = 0, lo = 0x80, hi = 0xBF;
		size_t j;
		if (c < 0x80) {
			out[o++] = (char)c;
			i++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF)
			need = 1;
		else if (c >= 0xE0 && c <= 0xEF) {
			need = 2;
			if (c == 0xE0) lo = 0xA0;
			if (c == 0xED) hi = 0x9F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3;
			if (c == 0xF0) lo = 0x90;
			if (c == 0xF4) hi = 0x8F;
		} else {
			o += (size_t)utf8_put(out + o, 0xFFFD);
			i++;
			continue;
		}
		for (j = 1; j <= need; j++) {
			if (i + j >= len || p[i + j] < lo || p[i + j] > hi)
				break;
			lo = 0x80;
			hi = 0xBF;
		}
		if (j <= need) { /* truncated or bad: the prefix is one FFFD */
			o += (size_t)utf8_put(out + o, 0xFFFD);
			i += j;
			continue;
		}
		memcpy(out + o, p + i, need + 1);
		o += need + 1;
		i += need + 1;
	}
	out[o] = 0;
	if (out_len)
		*out_len = o;
	return out;
}

int utf8_clean(const char *s, size_t len)
{
	size_t n;
	char *c = utf8_lossy(s, len, &n);
	int ok = n == len && !memcmp(c, s, len) && !strstr(c, "\xEF\xBF\xBD");
	free(c);
	return ok;
}

/* JavaScript's String.prototype.trim set (WhiteSpace + LineTerminator). */
static int js_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 0x20 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

/* ------------------------------------------------------ growable text */

struct buf {
	char *s;
	size_t len, cap;
};

static void buf_add(struct buf *b, const void *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->s = realloc(b->s, b->cap);
		if (!b->s)
			abort();
	}
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = 0;
}

/* A list of strings held in one arena (pieces, tokens). */
struct strs {
	struct buf a;
	size_t *off, *len, n, cap;
};

static void strs_add(struct strs *l, const char *p, size_t n)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->off = realloc(l->off, l->cap * sizeof *l->off);
		l->len = realloc(l->len, l->cap * sizeof *l->len);
		if (!l->off || !l->len)
			abort();
	}
	l->off[l->n] = l->a.len;
	l->len[l->n++] = n;
	buf_add(&l->a, p, n);
}

static const char *strs_at(const struct strs *l, size_t i)
{
	return l->a.s + l->off[i];
}

static void strs_free(struct strs *l)
{
	free(l->a.s);
	free(l->off);
	free(l->len);
	memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------- hash tables */

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h ^ (h >> 29);
}

/* Token string -> id; keys point into the tokenizer's id table. */
struct strmap {
	int32_t *slot; /* id + 1, 0 = empty */
	size_t mask;
};

struct tokenizer;
static const char *tok_str(const struct tokenizer *t, int32_t id, size_t *n);

/* Merge pair (left id, right id) -> rank and merged id. */
struct pairmap {
	uint64_t *key; /* (a << 32 | b) + 1, 0 = empty */
	int32_t *rank, *id;
	size_t mask;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static void pairmap_init(struct pairmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	m->key = calloc(cap, sizeof *m->key);
	m->rank = calloc(cap, sizeof *m->rank);
	m->id = calloc(cap, sizeof *m->id);
	if (!m->key || !m->rank || !m->id)
		abort();
	m->mask = cap - 1;
}

/* Inserts unless present; returns 1 if it was already there. */
static int pairmap_put(struct pairmap *m, int32_t a, int32_t b, int32_t rank,
		       int32_t id)
{
	uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
	size_t i = mix64(k) & m->mask;
	while (m->key[i]) {
		if (m->key[i] == k)
			return 1;
		i = (i + 1) & m->mask;
	}
	m->key[i] = k;
	m->rank[i] = rank;
	m->id[i] = id;
	return 0;
}

static int pairmap_get(const struct pairmap *m, int32_t a, int32_t b,
		       int32_t *rank, int32_t *id)
{
	uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
	size_t i = mix64(k) & m->mask;
	while (m->key[i]) {
		if (m->key[i] == k) {
			*rank = m->rank[i];
			*id = m->id[i];
			return 1;
		}
		i = (i + 1) & m->mask;
	}
	return 0;
}

/* ------------------------------------------------------ the tokenizer */

enum norm_kind { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND,
		 NORM_REPLACE };
struct norm_op {
	enum norm_kind kind;
	char *a, *b; /* Prepend: a; Replace: a -> b */
};

enum pre_kind { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE };
struct pre_op {
	enum pre_kind kind;
	pcre2_code *re;
	pcre2_match_data *md; /* shared: encode is single-threaded per object */
	int removed;          /* Split behavior Removed (else Isolated) */
	int add_prefix_space; /* ByteLevel */
	char *repl;           /* Metaspace replacement */
	int prepend;          /* Metaspace: 0 never, 1 first, 2 always */
};

enum dec_kind { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE,
		DEC_STRIP, DEC_METASPACE };
struct dec_op {
	enum dec_kind kind;
	char *a, *b; /* Replace a -> b; Strip: a = content; Metaspace: a */
	int start, stop;
};

struct added_token {
	char *content;
	size_t len;
	int32_t id;
	int lstrip, rstrip, normalized, special;
};

struct tokenizer {
	/* id -> token string (vocab and added) */
	char **tok;
	uint32_t *tok_len;
	unsigned char *is_added, *is_special;
	int32_t n_ids;
	int64_t n_vocab, n_merges;
	struct strmap map;
	struct pairmap merges;
	int byte_fallback, fuse_unk, ignore_merges;
	int32_t unk_id;
	int32_t byte_id[256]; /* <0xXX> tokens, -1 if absent */
	int32_t bl_id[256];   /* byte-level char of each byte, -1 if absent */
	int byte_level;       /* a ByteLevel pre-tokenizer is present */
	struct added_token *added;
	size_t n_added;
	struct norm_op *norm;
	size_t n_norm;
	struct pre_op *pre;
	size_t n_pre;
	int32_t *tmpl_before, *tmpl_after;
	size_t n_before, n_after;
	struct dec_op *dec;
	size_t n_dec;
	int cleanup;
	int32_t bos_id, eos_id;
	char *bos, *eos;
};

/* GPT-2's byte <-> printable code point table. */
static uint32_t byte_cp[256];
static int32_t cp_byte[324];

static void byte_table_init(void)
{
	int n = 0;
	if (byte_cp['!'])
		return;
	for (int b = 0; b < 256; b++) {
		int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
			   (b >= 0xAE && b <= 0xFF);
		byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
	}
	for (int i = 0; i < 324; i++)
		cp_byte[i] = -1;
	for (int b = 0; b < 256; b++)
		cp_byte[byte_cp[b]] = b;
}

static const char *tok_str(const struct tokenizer *t, int32_t id, size_t *n)
{
	*n = t->tok_len[id];
	return t->tok[id];
}

static void strmap_init(struct strmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap <<= 1;
	m->slot = calloc(cap, sizeof *m->slot);
	if (!m->slot)
		abort();
	m->mask = cap - 1;
}

static int32_t strmap_get(const struct tokenizer *t, const char *s, size_t n)
{
	const struct strmap *m = &t->map;
	size_t i = hash_bytes(s, n) & m->mask;
	while (m->slot[i]) {
		size_t kn;
		const char *k = tok_str(t, m->slot[i] - 1, &kn);
		if (kn == n && !memcmp(k, s, n))
			return m->slot[i] - 1;
		i = (i + 1) & m->mask;
	}
	return -1;
}

/* Map s to id (replacing an existing entry for the same string). */
static void strmap_set(struct tokenizer *t, const char *s, size_t n, int32_t id)
{
	struct strmap *m = &t->map;
	size_t i = hash_bytes(s, n) & m->mask;
	while (m->slot[i]) {
		size_t kn;
		const char *k = tok_str(t, m->slot[i] - 1, &kn);
		if (kn == n && !memcmp(k, s, n))
			break;
		i = (i + 1) & m->mask;
	}
	m->slot[i] = id + 1;
}

const char *tokenizer_id_token(const struct tokenizer *t, int64_t id)
{
	return id >= 0 && id < t->n_ids ? t->tok[id] : NULL;
}

void tokenizer_free(struct tokenizer *t)
{
	if (!t)
		return;
	for (int32_t i = 0; i < t->n_ids; i++)
		free(t->tok[i]);
	free(t->tok);
	free(t->tok_len);
	free(t->is_added);
	free(t->is_special);
	free(t->map.slot);
	free(t->merges.key);
	free(t->merges.rank);
	free(t->merges.id);
	for (size_t i = 0; i < t->n_added; i++)
		free(t->added[i].content);
	free(t->added);
	for (size_t i = 0; i < t->n_norm; i++) {
		free(t->norm[i].a);
		free(t->norm[i].b);
	}
	free(t->norm);
	for (size_t i = 0; i < t->n_pre; i++) {
		pcre2_code_free(t->pre[i].re);
		pcre2_match_data_free(t->pre[i].md);
		free(t->pre[i].repl);
	}
	free(t->pre);
	for (size_t i = 0; i < t->n_dec; i++) {
		free(t->dec[i].a);
		free(t->dec[i].b);
	}
	free(t->dec);
	free(t->tmpl_before);
	free(t->tmpl_after);
	free(t->bos);
	free(t->eos);
	free(t);
}

/* ------------------------------------------------------------ loading */

struct loader {
	struct tokenizer *t;
	const char *path;
	struct d0_err *err;
};

#define LERR(L, ...) d0_errf((L)->err, __VA_ARGS__)

/* Give id its string; a second, different string for one id is an error. */
static int set_token(struct loader *L, int32_t id, const char *s, size_t n,
		     const char *field)
{
	struct tokenizer *t = L->t;
	if (id < 0 || id >= t->n_ids)
		return LERR(L, "%s: %s: id %d out of range", L->path, field, id);
	if (t->tok[id]) {
		if (t->tok_len[id] == n && !memcmp(t->tok[id], s, n))
			return 0;
		return LERR(L, "%s: %s: duplicate id %d (given to both '%s' "
			    "and '%.*s')", L->path, field, id, t->tok[id],
			    (int)n, s);
	}
	t->tok[id] = malloc(n + 1);
	memcpy(t->tok[id], s, n);
	t->tok[id][n] = 0;
	t->tok_len[id] = (uint32_t)n;
	return 0;
}

static const char *jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

static int jbool(json_t *o, const char *key, int dflt)
{
	json_t *v = json_object_get(o, key);
	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* Highest id named by the vocab and the added tokens. */
static int count_ids(struct loader *L, json_t *vocab, json_t *added,
		     int32_t *n)
{
	const char *k;
	json_t *v;
	size_t i;
	json_int_t max = -1;
	json_object_foreach(vocab, k, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > (1 << 26))
			return LERR(L, "%s: model.vocab['%s']: expected an id "
				    "(integer 0..2^26)", L->path, k);
		if (json_integer_value(v) > max)
			max = json_integer_value(v);
	}
	json_array_foreach(added, i, v) {
		json_t *id = json_object_get(v, "id");
		if (!json_is_integer(id) || json_integer_value(id) < 0 ||
		    json_integer_value(id) > (1 << 26) ||
		    !json_is_string(json_object_get(v, "content")))
			return LERR(L, "%s: added_tokens[%zu]: expected an "
				    "object with integer 'id' and string "
				    "'content'", L->path, i);
		if (json_integer_value(id) > max)
			max = json_integer_value(id);
	}
	*n = (int32_t)(max + 1);
	return 0;
}

/* Split a merge "a b" (or ["a", "b"]) into its two halves. */
static int merge_halves(struct loader *L, json_t *m, size_t i, const char **a,
			size_t *an, const char **b, size_t *bn)
{
	if (json_is_string(m)) {
		const char *s = json_string_value(m), *sp = strchr(s, ' ');
		if (!sp || sp == s)
			return LERR(L, "%s: model.merges[%zu]: expected 'A B', "
				    "got '%s'", L->path, i, s);
		*a = s;
		*an = (size_t)(sp - s);
		*b = sp + 1;
		sp = strchr(*b, ' ');
		*bn = sp ? (size_t)(sp - *b) : strlen(*b);
		return 0;
	}
	if (json_is_array(m) && json_array_size(m) == 2 &&
	    json_is_string(json_array_get(m, 0)) &&
	    json_is_string(json_array_get(m, 1))) {
		*a = json_string_value(json_array_get(m, 0));
		*an = json_string_length(json_array_get(m, 0));
		*b = json_string_value(json_array_get(m, 1));
		*bn = json_string_length(json_array_get(m, 1));
		return 0;
	}
	return LERR(L, "%s: model.merges[%zu]: expected a string 'A B' or a "
		    "pair of strings", L->path, i);
}

static int load_merges(struct loader *L, json_t *merges)
{
	struct tokenizer *t = L->t;
	size_t i;
	json_t *m;
	char *cat = NULL;
	size_t catcap = 0;
	if (!json_is_array(merges))
		return LERR(L, "%s: model.merges: expected an array", L->path);
	pairmap_init(&t->merges, json_array_size(merges));
	json_array_foreach(merges, i, m) {
		const char *a = NULL, *b = NULL;
		size_t an = 0, bn = 0;
		int32_t ia, ib, ic;
		if (merge_halves(L, m, i, &a, &an, &b, &bn) < 0)
			goto fail;
		ia = strmap_get(t, a, an);
		ib = strmap_get(t, b, bn);
		if (ia < 0 || ib < 0) {
			LERR(L, "%s: model.merges[%zu]: '%.*s' is not in "
			     "model.vocab", L->path, i, ia < 0 ? (int)an : (int)bn,
			     ia < 0 ? a : b);
			goto fail;
		}
		if (an + bn + 1 > catcap) {
			catcap = (an + bn + 1) * 2;
			cat = realloc(cat, catcap);
		}
		memcpy(cat, a, an);
		memcpy(cat + an, b, bn);
		ic = strmap_get(t, cat, an + bn);
		if (ic < 0) {
			LERR(L, "%s: model.merges[%zu]: the merged token "
			     "'%.*s' is not in model.vocab", L->path, i,
			     (int)(an + bn), cat);
			goto fail;
		}
		pairmap_put(&t->merges, ia, ib, (int32_t)i, ic);
	}
	free(cat);
	t->n_merges = (int64_t)json_array_size(merges);
	return 0;
fail:
	free(cat);
	return -1;
}

static int load_model(struct loader *L, json_t *model, json_t *added)
{
	struct tokenizer *t = L->t;
	json_t *vocab, *v;
	const char *type, *k, *s;
	size_t i;
	if (!json_is_object(model))
		return LERR(L, "%s: model: expected an object", L->path);
	type = jstr(model, "type");
	if (type && strcmp(type, "BPE"))
		return LERR(L, "%s: model.type: '%s' is not supported (only "
			    "BPE)", L->path, type);
	vocab = json_object_get(model, "vocab");
	if (!json_is_object(vocab))
		return LERR(L, "%s: model.vocab: expected an object of token "
			    "-> id", L->path);
	if (!json_is_array(added))
		added = NULL;
	if (count_ids(L, vocab, added, &t->n_ids) < 0) /* added may be NULL */
		return -1;
	t->tok = calloc((size_t)t->n_ids + 1, sizeof *t->tok);
	t->tok_len = calloc((size_t)t->n_ids + 1, sizeof *t->tok_len);
	t->is_added = calloc((size_t)t->n_ids + 1, 1);
	t->is_special = calloc((size_t)t->n_ids + 1, 1);
	strmap_init(&t->map, (size_t)t->n_ids + 1);
	json_object_foreach(vocab, k, v) {
		int32_t id = (int32_t)json_integer_value(v);
		if (t->tok[id]) {
			return LERR(L, "%s: model.vocab: duplicate id %d (given "
				    "to both '%s' and '%s')", L->path, id,
				    t->tok[id], k);
		}
		if (set_token(L, id, k, strlen(k), "model.vocab") < 0)
			return -1;
		strmap_set(t, k, strlen(k), id);
	}
	t->n_vocab = (int64_t)json_object_size(vocab);
	t->byte_fallback = jbool(model, "byte_fallback", 0);
	t->fuse_unk = jbool(model, "fuse_unk", 0);
	t->ignore_merges = jbool(model, "ignore_merges", 0);
	t->unk_id = -1;
	if ((s = jstr(model, "unk_token"))) {
		t->unk_id = strmap_get(t, s, strlen(s));
		if (t->unk_id < 0)
			return LERR(L, "%s: model.unk_token: '%s' is not in "
				    "model.vocab", L->path, s);
	}
	if ((s = jstr(model, "continuing_subword_prefix")) && *s)
		return LERR(L, "%s: model.continuing_subword_prefix: '%s' is "
			    "not supported", L->path, s);
	if ((s = jstr(model, "end_of_word_suffix")) && *s)
		return LERR(L, "%s: model.end_of_word_suffix: '%s' is not "
			    "supported", L->path, s);
	if ((v = json_object_get(model, "dropout")) && !json_is_null(v) &&
	    json_number_value(v) != 0)
		return LERR(L, "%s: model.dropout: BPE dropout is not supported "
			    "(it makes encoding random)", L->path);
	if (load_merges(L, json_object_get(model, "merges")) < 0)
		return -1;
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof name, "<0x%02X>", b);
		t->byte_id[b] = strmap_get(t, name, 6);
	}
	(void)i;
	return 0;
}

static int load_added(struct loader *L, json_t *added)
{
	struct tokenizer *t = L->t;
	size_t i;
	json_t *a;
	if (!added || json_is_null(added))
		return 0;
	if (!json_is_array(added))
		return LERR(L, "%s: added_tokens: expected an array", L->path);
	t->added = calloc(json_array_size(added) + 1, sizeof *t->added);
	json_array_foreach(added, i, a) {
		struct added_token *x = &t->added[t->n_added];
		const char *c = jstr(a, "content");
		char field[48];
		x->id = (int32_t)json_integer_value(json_object_get(a, "id"));
		x->len = json_string_length(json_object_get(a, "content"));
		if (!x->len)
			return LERR(L, "%s: added_tokens[%zu].content: empty",
				    L->path, i);
		x->content = malloc(x->len + 1);
		memcpy(x->content, c, x->len + 1);
		t->n_added++;
		x->special = jbool(a, "special", 0);
		x->lstrip = jbool(a, "lstrip", 0);
		x->rstrip = jbool(a, "rstrip", 0);
		x->normalized = jbool(a, "normalized", !x->special);
		snprintf(field, sizeof field, "added_tokens[%zu]", i);
		if (set_token(L, x->id, x->content, x->len, field) < 0)
			return -1;
		strmap_set(t, x->content, x->len, x->id);
		t->is_added[x->id] = 1;
		t->is_special[x->id] |= (unsigned char)x->special;
	}
	return 0;
}

static int norm_one(struct loader *L, json_t *n, const char *field);

static int norm_add(struct loader *L, enum norm_kind k, const char *a,
		    const char *b)
{
	struct tokenizer *t = L->t;
	struct norm_op *o;
	t->norm = realloc(t->norm, (t->n_norm + 1) * sizeof *t->norm);
	o = &t->norm[t->n_norm++];
	o->kind = k;
	o->a = a ? strdup(a) : NULL;
	o->b = b ? strdup(b) : NULL;
	return 0;
}

/* A Replace pattern: only {"String": ...} (a Regex pattern is refused). */
static const char *string_pattern(struct loader *L, json_t *n,
				  const char *field)
{
	json_t *p = json_object_get(n, "pattern");
	const char *s = jstr(p, "String");
	if (!s || !*s) {
		LERR(L, "%s: %s.pattern: only a non-empty {\"String\": ...} "
		     "pattern is supported", L->path, field);
		return NULL;
	}
	return s;
}

static int norm_one(struct loader *L, json_t *n, const char *field)
{
	const char *type = jstr(n, "type");
	char sub[160];
	if (json_is_null(n) || !n)
		return 0;
	if (!type)
		return LERR(L, "%s: %s.type: missing", L->path, field);
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(n, "normalizers"), *x;
		size_t i;
		if (!json_is_array(list))
			return LERR(L, "%s: %s.normalizers: expected an array",
				    L->path, field);
		json_array_foreach(list, i, x) {
			snprintf(sub, sizeof sub, "%s.normalizers[%zu]", field, i);
			if (norm_one(L, x, sub) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "NFC")) return norm_add(L, NORM_NFC, NULL, NULL);
	if (!strcmp(type, "NFD")) return norm_add(L, NORM_NFD, NULL, NULL);
	if (!strcmp(type, "NFKC")) return norm_add(L, NORM_NFKC, NULL, NULL);
	if (!strcmp(type, "NFKD")) return norm_add(L, NORM_NFKD, NULL, NULL);
	if (!strcmp(type, "Prepend")) {
		const char *p = jstr(n, "prepend");
		if (!p)
			return LERR(L, "%s: %s.prepend: expected a string",
				    L->path, field);
		return norm_add(L, NORM_PREPEND, p, NULL);
	}
	if (!strcmp(type, "Replace")) {
		const char *p = string_pattern(L, n, field);
		const char *c = jstr(n, "content");
		if (!p)
			return -1;
		return norm_add(L, NORM_REPLACE, p, c ? c : "");
	}
	return LERR(L, "%s: %s.type: normalizer '%s' is not supported (NFC, "
		    "NFD, NFKC, NFKD, Prepend, Replace, Sequence)", L->path,
		    field, type);
}

/*
 * Oniguruma's \s and \S are Unicode White_Space (the reference library's
 * regex engine; @huggingface/tokenizers rewrites them the same way), while
 * PCRE2's UCP \s differs at U+0085 and U+180E: spell the set out.
 */
#define WS_SET "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
	       "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

static char *rewrite_regex(const char *re)
{
	struct buf b = {0};
	int in_class = 0;
	for (const char *p = re; *p; p++) {
		if (*p == '\\' && p[1]) {
			if (p[1] == 's' || p[1] == 'S') {
				int neg = p[1] == 'S';
				if (in_class && !neg)
					buf_add(&b, WS_SET, strlen(WS_SET));
				else {
					buf_add(&b, neg ? "[^" : "[", neg ? 2 : 1);
					buf_add(&b, WS_SET, strlen(WS_SET));
					buf_add(&b, "]", 1);
				}
			} else {
				buf_add(&b, p, 2);
			}
			p++;
			continue;
		}
		if (*p == '[' && !in_class) {
			in_class = 1;
			buf_add(&b, p, 1);
			if (p[1] == '^')
				buf_add(&b, ++p, 1);
			if (p[1] == ']') /* a leading ] is literal */
				buf_add(&b, ++p, 1);
			continue;
		}
		if (*p == ']' && in_class)
			in_class = 0;
		buf_add(&b, p, 1);
	}
	if (!b.s)
		buf_add(&b, "", 0);
	return b.s;
}

static int compile_re(struct loader *L, const char *src, int literal,
		      struct pre_op *o, const char *field)
{
	int code;
	PCRE2_SIZE off;
	char *re = literal ? strdup(src) : rewrite_regex(src);
	o->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
			      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK |
				      (literal ? PCRE2_LITERAL : 0),
			      &code, &off, NULL);
	free(re);
	if (!o->re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(code, msg, sizeof msg);
		return LERR(L, "%s: %s.pattern: regex does not compile at "
			    "offset %zu: %s", L->path, field, (size_t)off,
			    (const char *)msg);
	}
	pcre2_jit_compile(o->re, PCRE2_JIT_COMPLETE); /* falls back if absent */
	o->md = pcre2_match_data_create_from_pattern(o->re, NULL);
	return 0;
}

static struct pre_op *pre_new(struct tokenizer *t, enum pre_kind k)
{
	struct pre_op *o;
	t->pre = realloc(t->pre, (t->n_pre + 1) * sizeof *t->pre);
	o = &t->pre[t->n_pre++];
	memset(o, 0, sizeof *o);
	o->kind = k;
	return o;
}

static int pre_one(struct loader *L, json_t *n, const char *field)
{
	struct tokenizer *t = L->t;
	const char *type = jstr(n, "type");
	char sub[160];
	if (!n || json_is_null(n))
		return 0;
	if (!type)
		return LERR(L, "%s: %s.type: missing", L->path, field);
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(n, "pretokenizers"), *x;
		size_t i;
		if (!json_is_array(list))
			return LERR(L, "%s: %s.pretokenizers: expected an array",
				    L->path, field);
		json_array_foreach(list, i, x) {
			snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", field, i);
			if (pre_one(L, x, sub) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "Split")) {
		json_t *p = json_object_get(n, "pattern");
		const char *beh = jstr(n, "behavior"), *rx = jstr(p, "Regex"),
			   *lit = jstr(p, "String");
		struct pre_op *o;
		if (jbool(n, "invert", 0))
			return LERR(L, "%s: %s.invert: true is not supported",
				    L->path, field);
		if (!beh || (strcmp(beh, "Isolated") && strcmp(beh, "Removed")))
			return LERR(L, "%s: %s.behavior: '%s' is not supported "
				    "(Isolated, Removed)", L->path, field,
				    beh ? beh : "(missing)");
		if (!rx && !lit)
			return LERR(L, "%s: %s.pattern: expected {\"Regex\": ...} "
				    "or {\"String\": ...}", L->path, field);
		o = pre_new(t, PRE_SPLIT);
		o->removed = !strcmp(beh, "Removed");
		return compile_re(L, rx ? rx : lit, !rx, o, field);
	}
	if (!strcmp(type, "ByteLevel")) {
		struct pre_op *o = pre_new(t, PRE_BYTELEVEL);
		o->add_prefix_space = jbool(n, "add_prefix_space", 0);
		t->byte_level = 1;
		if (jbool(n, "use_regex", 1)) /* GPT-2's split */
			return compile_re(L,
					  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| "
					  "?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+"
					  "(?!\\S)|\\s+", 0, o, field);
		return 0;
	}
	if (!strcmp(type, "Metaspace")) {
		struct pre_op *o = pre_new(t, PRE_METASPACE);
		const char *r = jstr(n, "replacement"), *sch = jstr(n, "prepend_scheme");
		o->repl = strdup(r ? r : "\xE2\x96\x81");
		o->prepend = !sch || !strcmp(sch, "always") ? 2
			     : !strcmp(sch, "first")	    ? 1 : 0;
		return 0;
	}
	return LERR(L, "%s: %s.type: pre-tokenizer '%s' is not supported "
		    "(Split, ByteLevel, Metaspace, Sequence)", L->path, field,
		    type);
}

static struct dec_op *dec_new(struct tokenizer *t, enum dec_kind k)
{
	struct dec_op *o;
	t->dec = realloc(t->dec, (t->n_dec + 1) * sizeof *t->dec);
	o = &t->dec[t->n_dec++];
	memset(o, 0, sizeof *o);
	o->kind = k;
	return o;
}

static int dec_one(struct loader *L, json_t *n, const char *field)
{
	struct tokenizer *t = L->t;
	const char *type = jstr(n, "type");
	char sub[160];
	if (!n || json_is_null(n))
		return 0;
	if (!type)
		return LERR(L, "%s: %s.type: missing", L->path, field);
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(n, "decoders"), *x;
		size_t i;
		if (!json_is_array(list))
			return LERR(L, "%s: %s.decoders: expected an array",
				    L->path, field);
		json_array_foreach(list, i, x) {
			snprintf(sub, sizeof sub, "%s.decoders[%zu]", field, i);
			if (dec_one(L, x, sub) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "ByteLevel")) {
		dec_new(t, DEC_BYTELEVEL);
		return 0;
	}
	if (!strcmp(type, "ByteFallback")) {
		dec_new(t, DEC_BYTEFALLBACK);
		return 0;
	}
	if (!strcmp(type, "Fuse")) {
		dec_new(t, DEC_FUSE);
		return 0;
	}
	if (!strcmp(type, "Replace")) {
		const char *p = string_pattern(L, n, field), *c = jstr(n, "content");
		struct dec_op *o;
		if (!p)
			return -1;
		o = dec_new(t, DEC_REPLACE);
		o->a = strdup(p);
		o->b = strdup(c ? c : "");
		return 0;
	}
	if (!strcmp(type, "Strip")) {
		const char *c = jstr(n, "content");
		struct dec_op *o = dec_new(t, DEC_STRIP);
		o->a = strdup(c ? c : "");
		o->start = (int)json_integer_value(json_object_get(n, "start"));
		o->stop = (int)json_integer_value(json_object_get(n, "stop"));
		return 0;
	}
	if (!strcmp(type, "Metaspace")) {
		const char *r = jstr(n, "replacement");
		struct dec_op *o = dec_new(t, DEC_METASPACE);
		o->a = strdup(r ? r : "\xE2\x96\x81");
		return 0;
	}
	return LERR(L, "%s: %s.type: decoder '%s' is not supported (ByteLevel, "
		    "Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)",
		    L->path, field, type);
}

static int tmpl_push(int32_t **v, size_t *n, int32_t id)
{
	*v = realloc(*v, (*n + 1) * sizeof **v);
	(*v)[(*n)++] = id;
	return 0;
}

static int post_one(struct loader *L, json_t *n, const char *field)
{
	struct tokenizer *t = L->t;
	const char *type = jstr(n, "type");
	char sub[160];
	if (!n || json_is_null(n))
		return 0;
	if (!type)
		return LERR(L, "%s: %s.type: missing", L->path, field);
	if (!strcmp(type, "ByteLevel"))
		return 0; /* offsets only: ids unchanged */
	if (!strcmp(type, "Sequence")) {
		json_t *list = json_object_get(n, "processors"), *x;
		size_t i;
		json_array_foreach(list, i, x) {
			snprintf(sub, sizeof sub, "%s.processors[%zu]", field, i);
			if (post_one(L, x, sub) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "TemplateProcessing")) {
		json_t *single = json_object_get(n, "single"), *it;
		size_t i;
		int seen_a = 0;
		if (!json_is_array(single))
			return LERR(L, "%s: %s.single: expected an array",
				    L->path, field);
		json_array_foreach(single, i, it) {
			json_t *sp = json_object_get(it, "SpecialToken");
			const char *s = jstr(sp, "id");
			int32_t id;
			if (json_object_get(it, "Sequence")) {
				seen_a = 1;
				continue;
			}
			if (!s)
				return LERR(L, "%s: %s.single[%zu]: expected "
					    "SpecialToken or Sequence", L->path,
					    field, i);
			id = strmap_get(t, s, strlen(s));
			if (id < 0)
				return LERR(L, "%s: %s.single[%zu]: special "
					    "token '%s' is not in the vocabulary",
					    L->path, field, i, s);
			if (seen_a)
				tmpl_push(&t->tmpl_after, &t->n_after, id);
			else
				tmpl_push(&t->tmpl_before, &t->n_before, id);
		}
		return 0;
	}
	return LERR(L, "%s: %s.type: post-processor '%s' is not supported "
		    "(TemplateProcessing, ByteLevel, Sequence)", L->path, field,
		    type);
}

/* bos_token / eos_token: a string or {"content": ...}. */
static int config_token(struct loader *L, json_t *cfg, const char *key,
			char **name, int32_t *id)
{
	json_t *v = json_object_get(cfg, key);
	const char *s = json_is_string(v) ? json_string_value(v)
					  : jstr(v, "content");
	*id = -1;
	if (!s)
		return 0;
	*name = strdup(s);
	*id = strmap_get(L->t, s, strlen(s));
	if (*id < 0)
		return LERR(L, "%s: %s: '%s' is not a token of tokenizer.json",
			    L->path, key, s);
	return 0;
}

static int load_config(struct loader *L, const char *path)
{
	json_error_t je;
	json_t *cfg;
	int rc = 0;
	L->t->cleanup = 1; /* transformers' default */
	L->t->bos_id = L->t->eos_id = -1;
	if (!path || !path_exists(path))
		return 0;
	cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	if (!json_is_object(cfg)) {
		json_decref(cfg);
		return LERR(L, "%s: line %d: %s", path, je.line,
			    cfg ? "expected an object" : je.text);
	}
	L->path = path;
	L->t->cleanup = jbool(cfg, "clean_up_tokenization_spaces", 1);
	if (config_token(L, cfg, "bos_token", &L->t->bos, &L->t->bos_id) < 0 ||
	    config_token(L, cfg, "eos_token", &L->t->eos, &L->t->eos_id) < 0)
		rc = -1;
	json_decref(cfg);
	return rc;
}

/* Build from a parsed tokenizer.json (name is what errors call it). */
static int tokenizer_from_doc(json_t *doc, const char *name,
			      const char *config_path, struct tokenizer **out,
			      struct d0_err *err)
{
	struct loader L = {calloc(1, sizeof(struct tokenizer)), name, err};
	int rc = -1;
	*out = NULL;
	byte_table_init();
	if (!json_is_object(doc)) {
		d0_errf(err, "%s: expected a JSON object", name);
		goto out;
	}
	if (load_model(&L, json_object_get(doc, "model"),
		       json_object_get(doc, "added_tokens")) < 0 ||
	    load_added(&L, json_object_get(doc, "added_tokens")) < 0 ||
	    norm_one(&L, json_object_get(doc, "normalizer"), "normalizer") < 0 ||
	    pre_one(&L, json_object_get(doc, "pre_tokenizer"), "pre_tokenizer") < 0 ||
	    post_one(&L, json_object_get(doc, "post_processor"), "post_processor") < 0 ||
	    dec_one(&L, json_object_get(doc, "decoder"), "decoder") < 0 ||
	    load_config(&L, config_path) < 0)
		goto out;
	for (int b = 0; b < 256; b++) {
		char s[4];
		int n = utf8_put(s, byte_cp[b]);
		L.t->bl_id[b] = strmap_get(L.t, s, (size_t)n);
	}
	rc = 0;
out:
	if (rc == 0)
		*out = L.t;
	else
		tokenizer_free(L.t);
	return rc;
}

int tokenizer_load(const char *json_path, const char *config_path,
		   struct tokenizer **out, struct d0_err *err)
{
	json_error_t je;
	json_t *doc;
	char *raw;
	size_t rawn;
	int rc;
	*out = NULL;
	if (file_read_all(json_path, 1u << 30, &raw, &rawn, err) < 0)
		return -1;
	/* one read, then parse the buffer: jansson's file reader goes a
	 * character at a time */
	doc = json_loadb(raw, rawn, 0, &je);
	free(raw);
	if (!doc)
		return d0_errf(err, "%s: line %d: %s", json_path, je.line, je.text);
	rc = tokenizer_from_doc(doc, json_path, config_path, out, err);
	json_decref(doc);
	return rc;
}

int tokenizer_from_json(json_t *doc, const char *name, struct tokenizer **out,
			struct d0_err *err)
{
	return tokenizer_from_doc(doc, name, NULL, out, err);
}

int tokenizer_open(const char *dir, struct tokenizer **out, struct d0_err *err)
{
	char *j = path_join(dir, "tokenizer.json");
	char *c = path_join(dir, "tokenizer_config.json");
	int rc;
	if (!path_exists(j)) {
		rc = d0_errf(err, "%s: no tokenizer.json (the model directory "
			     "must hold one for text prompts)", dir);
	} else {
		rc = tokenizer_load(j, c, out, err);
	}
	free(j);
	free(c);
	return rc;
}

void tokenizer_describe(const struct tokenizer *t, struct tokenizer_info *info)
{
	memset(info, 0, sizeof *info);
	info->kind = t->byte_level ? "byte-level BPE"
		     : t->byte_fallback ? "BPE with byte fallback" : "BPE";
	info->n_ids = t->n_ids;
	info->n_vocab = t->n_vocab;
	info->n_merges = t->n_merges;
	info->n_added = (int64_t)t->n_added;
	for (size_t i = 0; i < t->n_added; i++)
		info->n_special += t->added[i].special;
	info->bos_id = t->bos_id;
	info->eos_id = t->eos_id;
	info->bos = t->bos;
	info->eos = t->eos;
}

/* ----------------------------------------------------------- encoding */

struct ids {
	int32_t *v;
	size_t n, cap;
};

static void ids_push(struct ids *x, int32_t id)
{
	if (x->n == x->cap) {
		x->cap = x->cap ? x->cap * 2 : 64;
		x->v = realloc(x->v, x->cap * sizeof *x->v);
		if (!x->v)
			abort();
	}
	x->v[x->n++] = id;
}

/* BPE symbols: a doubly linked list over the word's code points. */
struct sym {
	int32_t id;
	int32_t prev, next;
	uint32_t off, len; /* bytes in the word */
};

struct merge_cand {
	int32_t rank, pos, id;
};

struct heap {
	struct merge_cand *v;
	size_t n, cap;
};

static int cand_less(const struct merge_cand *a, const struct merge_cand *b)
{
	return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct heap *h, struct merge_cand c)
{
	size_t i;
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 64;
		h->v = realloc(h->v, h->cap * sizeof *h->v);
		if (!h->v)
			abort();
	}
	i = h->n++;
	while (i && cand_less(&c, &h->v[(i - 1) / 2])) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = c;
}

static struct merge_cand heap_pop(struct heap *h)
{
	struct merge_cand top = h->v[0], last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && cand_less(&h->v[c + 1], &h->v[c]))
			c++;
		if (!cand_less(&h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

struct enc_scratch {
	struct sym *sym;
	size_t cap;
	struct heap heap;
};

static void try_pair(const struct tokenizer *t, struct enc_scratch *S, int32_t a)
{
	int32_t b = S->sym[a].next, rank, id;
	if (b < 0 || S->sym[a].id < 0 || S->sym[b].id < 0)
		return;
	if (pairmap_get(&t->merges, S->sym[a].id, S->sym[b].id, &rank, &id))
		heap_push(&S->heap, (struct merge_cand){rank, a, id});
}

/* The model's output for one unknown symbol: bytes, unk, or nothing. */
static void emit_unknown(const struct tokenizer *t, const char *w, size_t n,
			 struct ids *out)
{
	if (t->byte_fallback) {
		size_t i;
		for (i = 0; i < n; i++)
			if (t->byte_id[(unsigned char)w[i]] < 0)
				break;
		if (i == n) {
			for (i = 0; i < n; i++)
				ids_push(out, t->byte_id[(unsigned char)w[i]]);
			return;
		}
	}
	if (t->unk_id >= 0) {
		if (t->fuse_unk && out->n && out->v[out->n - 1] == t->unk_id)
			return;
		ids_push(out, t->unk_id);
	}
}

/* Byte-pair encode one pre-token (UTF-8, in the model's alphabet). */
static void bpe_word(const struct tokenizer *t, struct enc_scratch *S,
		     const char *w, size_t n, struct ids *out)
{
	size_t ns = 0, i = 0;
	int32_t whole;
	if (!n)
		return;
	if (t->ignore_merges && (whole = strmap_get(t, w, n)) >= 0) {
		ids_push(out, whole);
		return;
	}
	if (n > S->cap) {
		S->cap = n * 2;
		S->sym = realloc(S->sym, S->cap * sizeof *S->sym);
		if (!S->sym)
			abort();
	}
	while (i < n) {
		size_t k = utf8_len1((unsigned char)w[i]);
		struct sym *s = &S->sym[ns];
		s->off = (uint32_t)i;
		s->len = (uint32_t)k;
		s->id = strmap_get(t, w + i, k);
		s->prev = (int32_t)ns - 1;
		s->next = (int32_t)ns + 1;
		ns++;
		i += k;
	}
	S->sym[ns - 1].next = -1;
	S->heap.n = 0;
	for (size_t j = 0; j + 1 < ns; j++)
		try_pair(t, S, (int32_t)j);
	while (S->heap.n) {
		struct merge_cand c = heap_pop(&S->heap);
		struct sym *a = &S->sym[c.pos], *b;
		int32_t rank, id;
		if (!a->len || a->next < 0)
			continue;
		b = &S->sym[a->next];
		if (!pairmap_get(&t->merges, a->id, b->id, &rank, &id) ||
		    id != c.id || rank != c.rank)
			continue;
		a->id = id;
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (b->next >= 0)
			S->sym[b->next].prev = c.pos;
		if (a->prev >= 0)
			try_pair(t, S, a->prev);
		try_pair(t, S, c.pos);
	}
	for (int32_t j = 0; j >= 0; j = S->sym[j].next) {
		if (S->sym[j].id >= 0) {
			ids_push(out, S->sym[j].id);
		} else {
			emit_unknown(t, w + S->sym[j].off, S->sym[j].len, out);
		}
	}
}

/* The pieces a regex split makes of one piece (Isolated / Removed). */
static void split_piece(const struct pre_op *o, const char *s, size_t n,
			struct strs *out)
{
	size_t start = 0, prev = 0;
	while (start <= n) {
		int rc = pcre2_match(o->re, (PCRE2_SPTR)s, n, start,
				     PCRE2_NO_UTF_CHECK, o->md, NULL);
		PCRE2_SIZE *ov;
		if (rc < 0)
			break;
		ov = pcre2_get_ovector_pointer(o->md);
		if (ov[0] > prev)
			strs_add(out, s + prev, ov[0] - prev);
		if (ov[1] > ov[0]) {
			if (!o->removed)
				strs_add(out, s + ov[0], ov[1] - ov[0]);
			start = prev = ov[1];
		} else { /* empty match: step one code point */
			prev = ov[0];
			if (ov[0] >= n)
				break;
			start = ov[0] + utf8_len1((unsigned char)s[ov[0]]);
		}
	}
	if (prev < n)
		strs_add(out, s + prev, n - prev);
}

static void bytelevel_map(const char *s, size_t n, struct strs *out)
{
	struct buf b = {0};
	char u[4];
	for (size_t i = 0; i < n; i++)
		buf_add(&b, u, (size_t)utf8_put(u, byte_cp[(unsigned char)s[i]]));
	strs_add(out, b.s ? b.s : "", b.len);
	free(b.s);
}

static void split_piece(const struct pre_op *o, const char *s, size_t n,
			struct strs *out);

/* ByteLevel: optional prefix space, optional GPT-2 split, byte mapping. */
static void bytelevel_piece(const struct pre_op *o, const char *s, size_t n,
			    struct strs *out)
{
	struct buf b = {0};
	struct strs parts = {0};
	if (o->add_prefix_space && (n == 0 || s[0] != ' '))
		buf_add(&b, " ", 1);
	buf_add(&b, s, n);
	if (o->re)
		split_piece(o, b.s, b.len, &parts);
	else
		strs_add(&parts, b.s, b.len);
	for (size_t i = 0; i < parts.n; i++)
		bytelevel_map(strs_at(&parts, i), parts.len[i], out);
	strs_free(&parts);
	free(b.s);
}

static void replace_all(const char *s, size_t n, const char *from,
			const char *to, struct buf *out)
{
	size_t fl = strlen(from), tl = strlen(to), i = 0;
	while (i < n) {
		if (fl && i + fl <= n && !memcmp(s + i, from, fl)) {
			buf_add(out, to, tl);
			i += fl;
		} else {
			buf_add(out, s + i, 1);
			i++;
		}
	}
	if (!out->s)
		buf_add(out, "", 0);
}

static void metaspace_piece(const struct pre_op *o, const char *s, size_t n,
			    int section, struct strs *out)
{
	struct buf b = {0};
	size_t rl = strlen(o->repl);
	replace_all(s, n, " ", o->repl, &b);
	if ((b.len < rl || memcmp(b.s, o->repl, rl)) &&
	    (o->prepend == 2 || (o->prepend == 1 && section == 0))) {
		struct buf c = {0};
		buf_add(&c, o->repl, rl);
		buf_add(&c, b.s, b.len);
		free(b.s);
		b = c;
	}
	strs_add(out, b.s, b.len);
	free(b.s);
}

static void pre_tokenize(const struct tokenizer *t, const char *s, size_t n,
			 int section, struct strs *out)
{
	struct strs cur = {0}, next = {0};
	strs_add(&cur, s, n);
	for (size_t k = 0; k < t->n_pre; k++) {
		const struct pre_op *o = &t->pre[k];
		for (size_t i = 0; i < cur.n; i++) {
			const char *p = strs_at(&cur, i);
			if (o->kind == PRE_SPLIT)
				split_piece(o, p, cur.len[i], &next);
			else if (o->kind == PRE_BYTELEVEL)
				bytelevel_piece(o, p, cur.len[i], &next);
			else
				metaspace_piece(o, p, cur.len[i], section, &next);
		}
		strs_free(&cur);
		cur = next;
		memset(&next, 0, sizeof next);
	}
	*out = cur;
}

static char *normalize(const struct tokenizer *t, const char *s, size_t n,
		       size_t *out_n)
{
	struct buf b = {0};
	buf_add(&b, s, n);
	for (size_t k = 0; k < t->n_norm; k++) {
		const struct norm_op *o = &t->norm[k];
		struct buf c = {0};
		if (o->kind == NORM_PREPEND) {
			buf_add(&c, o->a, strlen(o->a));
			buf_add(&c, b.s, b.len);
		} else if (o->kind == NORM_REPLACE) {
			replace_all(b.s, b.len, o->a, o->b, &c);
		} else {
			static const int opt[] = {
				[NORM_NFC] = UTF8PROC_COMPOSE,
				[NORM_NFD] = UTF8PROC_DECOMPOSE,
				[NORM_NFKC] = UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
				[NORM_NFKD] = UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
			};
			utf8proc_uint8_t *r = NULL;
			utf8proc_ssize_t rn = utf8proc_map(
				(const utf8proc_uint8_t *)b.s, (utf8proc_ssize_t)b.len,
				&r, (utf8proc_option_t)(UTF8PROC_STABLE | opt[o->kind]));
			if (rn < 0) { /* cannot happen on lossy-cleaned text */
				free(r);
				continue;
			}
			buf_add(&c, r, (size_t)rn);
			free(r);
		}
		free(b.s);
		b = c;
	}
	*out_n = b.len;
	return b.s;
}

/* The added token of the longest match at s[i..n) among those with the
 * given normalized flag, or NULL. */
static const struct added_token *added_at(const struct tokenizer *t,
					  const char *s, size_t n, size_t i,
					  int normalized)
{
	const struct added_token *best = NULL;
	for (size_t k = 0; k < t->n_added; k++) {
		const struct added_token *a = &t->added[k];
		int in_set = a->normalized && t->n_norm ? 1 : 0;
		if (in_set != normalized || a->content[0] != s[i])
			continue;
		if (a->len <= n - i && !memcmp(s + i, a->content, a->len) &&
		    (!best || a->len > best->len))
			best = a;
	}
	return best;
}

/* Sections: text runs and added tokens (tok != NULL), with lstrip and
 * rstrip trimming the neighbouring runs as the reference does. */
struct section {
	size_t off, len;
	const struct added_token *tok;
};

static size_t split_added(const struct tokenizer *t, const char *s, size_t n,
			  int normalized, struct section **out)
{
	struct section *v = NULL;
	size_t nv = 0, start = 0, i = 0;
	int any = 0;
	for (size_t k = 0; k < t->n_added; k++)
		any |= (t->added[k].normalized && t->n_norm ? 1 : 0) == normalized;
	while (any && i < n) {
		const struct added_token *a = added_at(t, s, n, i, normalized);
		if (!a) {
			i++;
			continue;
		}
		v = realloc(v, (nv + 2) * sizeof *v);
		if (i > start)
			v[nv++] = (struct section){start, i - start, NULL};
		v[nv++] = (struct section){i, a->len, a};
		i += a->len;
		start = i;
	}
	v = realloc(v, (nv + 1) * sizeof *v);
	if (start < n || nv == 0)
		v[nv++] = (struct section){start, n - start, NULL};
	for (size_t k = 0; k < nv; k++) {
		if (!v[k].tok)
			continue;
		if (v[k].tok->lstrip && k > 0 && !v[k - 1].tok)
			while (v[k - 1].len) { /* trimEnd */
				size_t e = v[k - 1].off + v[k - 1].len, b = e - 1, cl;
				while (b > v[k - 1].off &&
				       ((unsigned char)s[b] & 0xC0) == 0x80)
					b--;
				if (!js_space(utf8_get((const unsigned char *)s + b, &cl)))
					break;
				v[k - 1].len = b - v[k - 1].off;
			}
		if (v[k].tok->rstrip && k + 1 < nv && !v[k + 1].tok)
			while (v[k + 1].len) { /* trimStart */
				size_t cl;
				if (!js_space(utf8_get((const unsigned char *)s +
						       v[k + 1].off, &cl)))
					break;
				v[k + 1].off += cl;
				v[k + 1].len -= cl;
			}
	}
	*out = v;
	return nv;
}

/* An exact added-token string (either form) for a whole section. */
static int32_t added_exact(const struct tokenizer *t, const char *s, size_t n)
{
	int32_t id = strmap_get(t, s, n);
	return id >= 0 && t->is_added[id] ? id : -1;
}

static void encode_run(const struct tokenizer *t, struct enc_scratch *S,
		       const char *s, size_t n, int section, struct ids *out)
{
	struct strs pieces;
	size_t out0 = out->n;
	pre_tokenize(t, s, n, section, &pieces);
	for (size_t i = 0; i < pieces.n; i++)
		bpe_word(t, S, strs_at(&pieces, i), pieces.len[i], out);
	strs_free(&pieces);
	(void)out0;
}

static void encode_section(const struct tokenizer *t, struct enc_scratch *S,
			   const char *s, size_t n, int section, struct ids *out)
{
	size_t nn, nsub;
	char *norm;
	struct section *sub;
	int32_t id;
	if (!n)
		return;
	if ((id = added_exact(t, s, n)) >= 0) {
		ids_push(out, id);
		return;
	}
	norm = normalize(t, s, n, &nn);
	nsub = nn ? split_added(t, norm, nn, 1, &sub) : 0;
	for (size_t k = 0; k < nsub; k++) {
		if (!sub[k].len)
			continue;
		if (sub[k].tok || (id = added_exact(t, norm + sub[k].off,
						    sub[k].len)) >= 0) {
			ids_push(out, sub[k].tok ? sub[k].tok->id : id);
			continue;
		}
		encode_run(t, S, norm + sub[k].off, sub[k].len, section, out);
	}
	if (nn)
		free(sub);
	free(norm);
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len,
		     int add_special, int32_t **ids, size_t *n,
		     struct d0_err *err)
{
	struct ids out = {0};
	struct enc_scratch S = {0};
	struct section *sec;
	size_t clean_n, nsec;
	char *clean = utf8_lossy(text, len, &clean_n);
	(void)err;
	if (add_special)
		for (size_t i = 0; i < t->n_before; i++)
			ids_push(&out, t->tmpl_before[i]);
	nsec = split_added(t, clean, clean_n, 0, &sec);
	for (size_t k = 0; k < nsec; k++) {
		if (sec[k].tok)
			ids_push(&out, sec[k].tok->id);
		else
			encode_section(t, &S, clean + sec[k].off, sec[k].len,
				       (int)k, &out);
	}
	if (add_special)
		for (size_t i = 0; i < t->n_after; i++)
			ids_push(&out, t->tmpl_after[i]);
	free(sec);
	free(clean);
	free(S.sym);
	free(S.heap.v);
	if (!out.v)
		out.v = malloc(sizeof *out.v);
	*ids = out.v;
	*n = out.n;
	return 0;
}

void tokenizer_pieces(const struct tokenizer *t, const char *text, size_t len,
		      void (*each)(void *ctx, const char *piece, size_t n),
		      void *ctx)
{
	size_t nn;
	char *norm = normalize(t, text, len, &nn);
	struct strs pieces;
	pre_tokenize(t, norm, nn, 0, &pieces);
	for (size_t i = 0; i < pieces.n; i++)
		each(ctx, strs_at(&pieces, i), pieces.len[i]);
	strs_free(&pieces);
	free(norm);
}

/* ----------------------------------------------------------- decoding */

static void bytelevel_flush(struct buf *raw, struct strs *out)
{
	size_t n;
	char *s;
	if (!raw->len)
		return;
	s = utf8_lossy(raw->s, raw->len, &n);
	strs_add(out, s, n);
	free(s);
	raw->len = 0;
}

static void dec_bytelevel(const struct tokenizer *t, const struct strs *in,
			  struct strs *out)
{
	struct buf raw = {0};
	for (size_t i = 0; i < in->n; i++) {
		const char *p = strs_at(in, i);
		int32_t id = strmap_get(t, p, in->len[i]);
		if (id >= 0 && t->is_added[id]) {
			bytelevel_flush(&raw, out);
			strs_add(out, p, in->len[i]);
			continue;
		}
		for (size_t j = 0; j < in->len[i];) {
			size_t k;
			uint32_t cp = utf8_get((const unsigned char *)p + j, &k);
			unsigned char b = cp < 324 && cp_byte[cp] >= 0
						  ? (unsigned char)cp_byte[cp] : 0;
			buf_add(&raw, &b, 1);
			j += k;
		}
	}
	bytelevel_flush(&raw, out);
	free(raw.s);
}

static int byte_token(const char *p, size_t n, unsigned char *b)
{
	char hex[3];
	char *end;
	if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>')
		return 0;
	hex[0] = p[3];
	hex[1] = p[4];
	hex[2] = 0;
	*b = (unsigned char)strtoul(hex, &end, 16);
	return end == hex + 2;
}

static void bytefallback_flush(struct buf *raw, struct strs *out)
{
	size_t n, skip;
	char *s;
	if (!raw->len)
		return;
	s = utf8_lossy(raw->s, raw->len, &n);
	/* TextDecoder's default strips a leading byte order mark */
	skip = n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3) ? 3 : 0;
	strs_add(out, s + skip, n - skip);
	free(s);
	raw->len = 0;
}

static void dec_bytefallback(const struct strs *in, struct strs *out)
{
	struct buf raw = {0};
	for (size_t i = 0; i < in->n; i++) {
		unsigned char b;
		if (byte_token(strs_at(in, i), in->len[i], &b)) {
			buf_add(&raw, &b, 1);
			continue;
		}
		bytefallback_flush(&raw, out);
		strs_add(out, strs_at(in, i), in->len[i]);
	}
	bytefallback_flush(&raw, out);
	free(raw.s);
}

static void dec_strip(const struct dec_op *o, const struct strs *in,
		      struct strs *out)
{
	size_t cl = strlen(o->a);
	for (size_t i = 0; i < in->n; i++) {
		const char *p = strs_at(in, i);
		size_t b = 0, e = in->len[i];
		for (int k = 0; k < o->start && cl && b + cl <= e &&
				!memcmp(p + b, o->a, cl); k++)
			b += cl;
		for (int k = 0; k < o->stop && cl && e >= b + cl &&
				!memcmp(p + e - cl, o->a, cl); k++)
			e -= cl;
		strs_add(out, p + b, e - b);
	}
}

static void dec_step(const struct tokenizer *t, const struct dec_op *o,
		     const struct strs *in, struct strs *out)
{
	switch (o->kind) {
	case DEC_BYTELEVEL:
		dec_bytelevel(t, in, out);
		return;
	case DEC_BYTEFALLBACK:
		dec_bytefallback(in, out);
		return;
	case DEC_FUSE: {
		struct buf b = {0};
		for (size_t i = 0; i < in->n; i++)
			buf_add(&b, strs_at(in, i), in->len[i]);
		strs_add(out, b.s ? b.s : "", b.len);
		free(b.s);
		return;
	}
	case DEC_STRIP:
		dec_strip(o, in, out);
		return;
	case DEC_REPLACE:
	case DEC_METASPACE:
		for (size_t i = 0; i < in->n; i++) {
			struct buf b = {0};
			size_t skip = 0;
			replace_all(strs_at(in, i), in->len[i], o->a,
				    o->kind == DEC_REPLACE ? o->b : " ", &b);
			if (o->kind == DEC_METASPACE && i == 0 && b.len &&
			    b.s[0] == ' ')
				skip = 1;
			strs_add(out, b.s + skip, b.len - skip);
			free(b.s);
		}
		return;
	}
}

/* transformers' clean_up_tokenization, replacement by replacement. */
static void cleanup_spaces(struct buf *b)
{
	static const char *const rules[][2] = {
		{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","},
		{" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
		{" 've", "'ve"}, {" 're", "'re"},
	};
	for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
		struct buf c = {0};
		replace_all(b->s, b->len, rules[r][0], rules[r][1], &c);
		free(b->s);
		*b = c;
	}
}

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
		     int flags, char **text, size_t *len, struct d0_err *err)
{
	struct strs cur = {0}, next = {0};
	struct buf b = {0};
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= t->n_ids || !t->tok[ids[i]]) {
			if (flags & TOK_DECODE_SKIP_UNKNOWN)
				continue;
			strs_free(&cur);
			return d0_errf(err, "id %d is not a token of this "
				       "tokenizer (ids 0..%d)", ids[i],
				       t->n_ids - 1);
		}
		if ((flags & TOK_DECODE_SKIP_SPECIAL) && t->is_special[ids[i]])
			continue;
		strs_add(&cur, t->tok[ids[i]], t->tok_len[ids[i]]);
	}
	for (size_t k = 0; k < t->n_dec; k++) {
		dec_step(t, &t->dec[k], &cur, &next);
		strs_free(&cur);
		cur = next;
		memset(&next, 0, sizeof next);
	}
	for (size_t i = 0; i < cur.n; i++)
		buf_add(&b, strs_at(&cur, i), cur.len[i]);
	if (!t->n_dec) { /* no decoder: the reference joins with spaces */
		free(b.s);
		b = (struct buf){0};
		for (size_t i = 0; i < cur.n; i++) {
			if (i)
				buf_add(&b, " ", 1);
			buf_add(&b, strs_at(&cur, i), cur.len[i]);
		}
	}
	strs_free(&cur);
	if (!b.s)
		buf_add(&b, "", 0);
	if (t->cleanup && !(flags & TOK_DECODE_NO_CLEANUP))
		cleanup_spaces(&b);
	*text = b.s;
	if (len)
		*len = b.len;
	return 0;
}
