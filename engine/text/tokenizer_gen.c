/*
 * tokenizer_gen.c - the tokenizer gen-model ships with a generated model.
 *
 * A generated checkpoint stands in for a download, so it carries what a
 * download carries: tokenizer.json + tokenizer_config.json in the family's
 * real format (the same normalizer, split regexes, decoder, template and
 * special tokens as the released files), with a vocabulary that fits the
 * generated vocab_size.  The merges are trained here, deterministically
 * (most frequent pair, ties to the smaller strings), on a built-in text, so
 * the same command always writes the same bytes and every generated model
 * -- and the demo -- runs on text.
 *
 * Byte-level families reserve their special tokens, then take the 256 byte
 * symbols (fewer, printable ASCII first, when the vocabulary is tiny), then
 * merges.  The SentencePiece form takes <unk> <s> </s>, the 256 <0xXX>
 * byte-fallback tokens when there is room, the training text's characters
 * by frequency, then merges.
 */
#include "engine.h"
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

static const char train_text[] =
	"The release day begins when the weights are published. A platform "
	"team must load the model on its own cluster, prove that the outputs "
	"are right, and measure how fast it runs. There is no tuning window: "
	"certainty comes from a prepared, scripted and reproducible process.\n"
	"Memory is the first barrier. Weights alone for three trillion "
	"parameters need twelve terabytes in float32, six in bfloat16 and three "
	"in int8, so tensor, pipeline and expert parallelism are mandatory. "
	"The key-value cache grows with context and concurrency.\n"
	"Operators are the second barrier: new attention variants, rotary "
	"scalings, norms and routers. Precision is the third: sharding changes "
	"the order of reductions, and errors accumulate over deep stacks. "
	"Communication is the fourth: all-reduce inside a node, point-to-point "
	"between stages, all-to-all between experts.\n"
	"def forward(self, tokens):\n"
	"    hidden = self.embed(tokens)\n"
	"    for layer in self.layers:\n"
	"        hidden = layer(hidden)\n"
	"    return self.lm_head(self.norm(hidden))\n"
	"for (int i = 0; i < n; i++) { sum += x[i] * w[i]; }\n"
	"Throughput 1234 tokens/s, TTFT 56 ms, TPOT 7.8 ms at 2026-12-01.\n"
	"大型语言模型在发布当天运行。验证输出，测量吞吐量。"
	"今日はモデルを検証します。テストは成功しました。\n"
	"Le modèle est prêt. Das Modell läuft. El modelo funciona. "
	"Модель работает. النموذج يعمل. 🚀 ✅\n";

/* ------------------------------------------------------------ families */

#define SPECIALS_MAX 12

struct family {
	const char *name;       /* format */
	int sentencepiece;      /* else byte-level */
	const char *specials[SPECIALS_MAX]; /* NULL-terminated when fewer */
	int specials_first;     /* DeepSeek keeps its specials at 0, 1 */
	const char *bos, *eos, *pad;
	int cleanup, bos_template, ignore_merges, nfc, merge_pairs;
	const char *regex[3];
};

#define LLAMA3_RE                                                              \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN_RE                                                                \
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "      \
	"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define DEEPSEEK_RE                                                            \
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}"  \
	"\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)" \
	"|\\s+"

static const struct family families[] = {
	{"llama3", 0, {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}, 0,
	 "<|begin_of_text|>", "<|eot_id|>", NULL, 1, 1, 1, 0, 0, {LLAMA3_RE}},
	{"qwen", 0, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, 0, NULL,
	 "<|im_end|>", "<|endoftext|>", 0, 0, 0, 1, 1, {QWEN_RE}},
	{"deepseek_v3", 0,
	 {"<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
	  "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"},
	 1, "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
	 "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
	 "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", 0,
	 0, 0, 0, 0,
	 {"\\p{N}{1,3}",
	  "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-"
	  "\xE3\x83\xBF]+",
	  DEEPSEEK_RE}},
	{"llama2", 1, {"<unk>", "<s>", "</s>"}, 1, "<s>", "</s>", NULL, 0, 1, 0,
	 0, 0, {NULL}},
	/* the vision-language releases: their image placeholders added */
	{"qwen_vl", 0, {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
			"<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
			"<|video_pad|>"}, 0, NULL,
	 "<|im_end|>", "<|endoftext|>", 0, 0, 0, 1, 1, {QWEN_RE}},
	{"llava", 1, {"<unk>", "<s>", "</s>", "<image>", "<pad>"}, 1, "<s>",
	 "</s>", "<pad>", 0, 1, 0, 0, 0, {NULL}},
	/* Kimi-VL ships tiktoken.model; this is a byte-level tokenizer.json
	 * with its special tokens (the chat's and the media placeholders) */
	{"kimi_vl", 0, {"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>",
			"<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
			"<|media_start|>",
			"<|media_content|>", "<|media_end|>", "<|media_pad|>"}, 0,
	 "[BOS]", "<|im_end|>", "[EOS]", 0, 0, 0, 1, 1, {QWEN_RE}},
};

static const struct family *family_of(const char *model_type)
{
	if (!strcmp(model_type, "qwen2_vl") || !strcmp(model_type, "qwen2_5_vl"))
		return &families[4];
	if (!strcmp(model_type, "llava")) /* Vicuna's Llama-2 SentencePiece */
		return &families[5];
	if (!strcmp(model_type, "kimi_vl"))
		return &families[6];
	if (!strcmp(model_type, "llama"))
		return &families[0];
	if (!strncmp(model_type, "qwen", 4))
		return &families[1];
	if (!strcmp(model_type, "deepseek_v3"))
		return &families[2];
	if (!strcmp(model_type, "mistral") || !strcmp(model_type, "mixtral"))
		return &families[3];
	return NULL;
}

/* ------------------------------------------------------------ training */

struct vocab {
	char **s;
	size_t n, cap;
};

static int32_t vocab_add(struct vocab *v, const char *s, size_t n)
{
	if (v->n == v->cap) {
		v->cap = v->cap ? v->cap * 2 : 512;
		v->s = realloc(v->s, v->cap * sizeof *v->s);
	}
	v->s[v->n] = strndup(s, n);
	return (int32_t)v->n++;
}

static int32_t vocab_find(const struct vocab *v, const char *s, size_t n)
{
	for (size_t i = 0; i < v->n; i++)
		if (strlen(v->s[i]) == n && !memcmp(v->s[i], s, n))
			return (int32_t)i;
	return -1;
}

struct word {
	int32_t *sym;
	size_t n;
	long freq;
};

struct words {
	struct word *w;
	size_t n, cap;
	struct vocab *v;
};

/* One training piece: symbols are its code points (already in the vocab,
 * or skipped when the vocabulary left them out). */
static void words_add(void *ctx, const char *p, size_t n)
{
	struct words *W = ctx;
	struct word w = {malloc(n * sizeof(int32_t)), 0, 1};
	for (size_t i = 0; i < n;) {
		size_t k = 1;
		int32_t id;
		while (i + k < n && ((unsigned char)p[i + k] & 0xC0) == 0x80)
			k++;
		id = vocab_find(W->v, p + i, k);
		if (id >= 0)
			w.sym[w.n++] = id;
		i += k;
	}
	for (size_t j = 0; j < W->n; j++)
		if (W->w[j].n == w.n &&
		    !memcmp(W->w[j].sym, w.sym, w.n * sizeof *w.sym)) {
			W->w[j].freq++;
			free(w.sym);
			return;
		}
	if (W->n == W->cap) {
		W->cap = W->cap ? W->cap * 2 : 256;
		W->w = realloc(W->w, W->cap * sizeof *W->w);
	}
	W->w[W->n++] = w;
}

struct pair {
	int32_t a, b;
	long count;
};

static int pair_cmp(const void *x, const void *y)
{
	const struct pair *p = x, *q = y;
	return p->a != q->a ? (p->a > q->a) - (p->a < q->a)
			    : (p->b > q->b) - (p->b < q->b);
}

/* The next merge: most frequent pair (count >= 2), ties to the smaller
 * (a, b) strings.  Returns 0 when none is left. */
static int best_pair(const struct words *W, struct pair *best)
{
	struct pair *all = NULL;
	size_t n = 0, cap = 0;
	int found = 0;
	for (size_t i = 0; i < W->n; i++)
		for (size_t j = 0; j + 1 < W->w[i].n; j++) {
			if (n == cap) {
				cap = cap ? cap * 2 : 1024;
				all = realloc(all, cap * sizeof *all);
			}
			all[n++] = (struct pair){W->w[i].sym[j], W->w[i].sym[j + 1],
						 W->w[i].freq};
		}
	if (n)
		qsort(all, n, sizeof *all, pair_cmp);
	for (size_t i = 0; i < n;) {
		struct pair p = all[i];
		size_t j = i + 1;
		while (j < n && all[j].a == p.a && all[j].b == p.b)
			p.count += all[j++].count;
		i = j;
		if (p.count < 2)
			continue;
		if (!found || p.count > best->count ||
		    (p.count == best->count &&
		     (strcmp(W->v->s[p.a], W->v->s[best->a]) < 0 ||
		      (!strcmp(W->v->s[p.a], W->v->s[best->a]) &&
		       strcmp(W->v->s[p.b], W->v->s[best->b]) < 0)))) {
			*best = p;
			found = 1;
		}
	}
	free(all);
	return found;
}

static void apply_merge(struct words *W, const struct pair *p, int32_t id)
{
	for (size_t i = 0; i < W->n; i++) {
		struct word *w = &W->w[i];
		size_t o = 0;
		for (size_t j = 0; j < w->n; j++) {
			if (j + 1 < w->n && w->sym[j] == p->a && w->sym[j + 1] == p->b) {
				w->sym[o++] = id;
				j++;
			} else {
				w->sym[o++] = w->sym[j];
			}
		}
		w->n = o;
	}
}

/* Train merges until the vocabulary holds `room` more tokens. */
static json_t *train_merges(struct words *W, size_t room, int as_pairs)
{
	json_t *merges = json_array();
	struct pair p = {0, 0, 0};
	while (room && best_pair(W, &p)) {
		struct vocab *v = W->v;
		size_t la = strlen(v->s[p.a]), lb = strlen(v->s[p.b]);
		char *cat = malloc(la + lb + 1);
		int32_t id;
		memcpy(cat, v->s[p.a], la);
		memcpy(cat + la, v->s[p.b], lb + 1);
		id = vocab_find(v, cat, la + lb);
		if (id < 0) {
			id = vocab_add(v, cat, la + lb);
			room--;
		}
		if (as_pairs) {
			json_array_append_new(merges, json_pack("[s,s]", v->s[p.a],
								v->s[p.b]));
		} else {
			char *m = malloc(la + lb + 2);
			memcpy(m, v->s[p.a], la);
			m[la] = ' ';
			memcpy(m + la + 1, v->s[p.b], lb + 1);
			json_array_append_new(merges, json_string(m));
			free(m);
		}
		free(cat);
		apply_merge(W, &p, id);
	}
	return merges;
}

/* ------------------------------------------------------- the documents */

static json_t *split_re(const char *re)
{
	return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern",
			 "Regex", re, "behavior", "Isolated", "invert", 0);
}

static json_t *bytelevel(const char *type, int trim)
{
	return json_pack("{s:s, s:b, s:b, s:b}", "type", type, "add_prefix_space",
			 0, "trim_offsets", trim, "use_regex", 0);
}

static json_t *bos_template(const char *bos, int32_t id)
{
	return json_pack(
		"{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:[{s:{s:s, s:i}}, "
		"{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, "
		"s:[i], s:[s]}}}",
		"type", "TemplateProcessing", "single", "SpecialToken", "id", bos,
		"type_id", 0, "Sequence", "id", "A", "type_id", 0, "pair",
		"SpecialToken", "id", bos, "type_id", 0, "Sequence", "id", "A",
		"type_id", 0, "SpecialToken", "id", bos, "type_id", 1, "Sequence",
		"id", "B", "type_id", 1, "special_tokens", bos, "id", bos, "ids", id,
		"tokens", bos);
}

/* normalizer, pre_tokenizer, post_processor and decoder of the family */
static void pipeline(const struct family *f, int32_t bos_id, json_t *doc)
{
	json_t *pre = json_array();
	json_t *post;
	for (int i = 0; i < 3 && f->regex[i]; i++)
		json_array_append_new(pre, split_re(f->regex[i]));
	if (f->sentencepiece) {
		json_object_set_new(doc, "normalizer", json_pack(
			"{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type",
			"Sequence", "normalizers", "type", "Prepend", "prepend",
			"\xE2\x96\x81", "type", "Replace", "pattern", "String", " ",
			"content", "\xE2\x96\x81"));
		json_object_set_new(doc, "pre_tokenizer", json_null());
		json_decref(pre);
		json_object_set_new(doc, "post_processor",
				    bos_template(f->bos, bos_id));
		json_object_set_new(doc, "decoder", json_pack(
			"{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, "
			"s:i, s:i}]}", "type", "Sequence", "decoders", "type",
			"Replace", "pattern", "String", "\xE2\x96\x81", "content", " ",
			"type", "ByteFallback", "type", "Fuse", "type", "Strip",
			"content", " ", "start", 1, "stop", 0));
		return;
	}
	json_array_append_new(pre, bytelevel("ByteLevel", f->nfc ? 0 : 1));
	json_object_set_new(doc, "normalizer",
			    f->nfc ? json_pack("{s:s}", "type", "NFC")
			    : f->bos_template ? json_null()
			    : json_pack("{s:s, s:[]}", "type", "Sequence",
					"normalizers"));
	json_object_set_new(doc, "pre_tokenizer", json_pack(
		"{s:s, s:o}", "type", "Sequence", "pretokenizers", pre));
	post = bytelevel("ByteLevel", 0);
	if (f->bos_template)
		post = json_pack("{s:s, s:[o, o]}", "type", "Sequence",
				 "processors", post, bos_template(f->bos, bos_id));
	json_object_set_new(doc, "post_processor", post);
	json_object_set_new(doc, "decoder", bytelevel("ByteLevel", 1));
}

/* The order byte symbols enter a tiny vocabulary: space and newline,
 * printable ASCII, tab and CR, then the rest. */
static int byte_rank(int b)
{
	if (b == ' ') return 0;
	if (b == '\n') return 1;
	if (b > ' ' && b < 0x7F) return 2 + b;
	if (b == '\t') return 200;
	if (b == '\r') return 201;
	return 300 + (b >= 0x80 ? b - 0x80 : 128 + b);
}

static int byte_cmp(const void *x, const void *y)
{
	return byte_rank(*(const int *)x) - byte_rank(*(const int *)y);
}

static void utf8_cp(uint32_t cp, char *s, size_t *n)
{
	if (cp < 0x80) { s[0] = (char)cp; *n = 1; return; }
	if (cp < 0x800) {
		s[0] = (char)(0xC0 | (cp >> 6));
		s[1] = (char)(0x80 | (cp & 0x3F));
		*n = 2;
		return;
	}
	s[0] = (char)(0xE0 | (cp >> 12));
	s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
	s[2] = (char)(0x80 | (cp & 0x3F));
	*n = 3;
}

/* GPT-2's printable code point for a byte. */
static uint32_t gpt2_cp(int b)
{
	int n = 0;
	for (int x = 0; x < b; x++)
		if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) ||
		      (x >= 0xAE && x <= 0xFF)))
			n++;
	if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
	    (b >= 0xAE && b <= 0xFF))
		return (uint32_t)b;
	return (uint32_t)(256 + n);
}

/* Byte-level base: `room` byte symbols. */
static void base_bytes(struct vocab *v, size_t room)
{
	int order[256];
	for (int b = 0; b < 256; b++)
		order[b] = b;
	if (room < 256)
		qsort(order, 256, sizeof *order, byte_cmp);
	else { /* GPT-2's own order: printable first, as the real files */
		int k = 0;
		for (int b = 0; b < 256; b++)
			if (gpt2_cp(b) == (uint32_t)b)
				order[k++] = b;
		for (int b = 0; b < 256; b++)
			if (gpt2_cp(b) != (uint32_t)b)
				order[k++] = b;
	}
	for (size_t i = 0; i < room && i < 256; i++) {
		char s[4];
		size_t n;
		utf8_cp(gpt2_cp(order[i]), s, &n);
		vocab_add(v, s, n);
	}
}

struct charcount {
	char s[5];
	long n;
};

static int charcount_cmp(const void *x, const void *y)
{
	const struct charcount *a = x, *b = y;
	if (a->n != b->n)
		return a->n < b->n ? 1 : -1;
	return strcmp(a->s, b->s);
}

/* SentencePiece base: the normalized training text's characters, the
 * most frequent first ("▁" always). */
static void base_chars(struct vocab *v, const char *norm, size_t room)
{
	struct charcount *c = NULL;
	size_t nc = 0;
	for (size_t i = 0; norm[i];) {
		size_t k = 1, j;
		while (((unsigned char)norm[i + k] & 0xC0) == 0x80)
			k++;
		for (j = 0; j < nc; j++)
			if (strlen(c[j].s) == k && !memcmp(c[j].s, norm + i, k))
				break;
		if (j == nc) {
			c = realloc(c, (nc + 1) * sizeof *c);
			memset(&c[nc], 0, sizeof *c);
			memcpy(c[nc].s, norm + i, k);
			nc++;
		}
		c[j].n += !strcmp(c[j].s, "\xE2\x96\x81") ? 1000000 : 1;
		i += k;
	}
	qsort(c, nc, sizeof *c, charcount_cmp);
	for (size_t j = 0; j < nc && j < room; j++)
		vocab_add(v, c[j].s, strlen(c[j].s));
	free(c);
}

/* "▁The▁release▁day" -> pieces "▁The" "▁release" "▁day". */
static void sp_words(const char *norm, struct words *W)
{
	const char *p = norm, *start = norm;
	while (*p) {
		p++;
		if (!*p || !strncmp(p, "\xE2\x96\x81", 3)) {
			words_add(W, start, (size_t)(p - start));
			start = p;
		}
	}
}

static char *sp_normalize(const char *text)
{
	size_t n = strlen(text);
	char *o = malloc(n * 3 + 4), *q = o;
	memcpy(q, "\xE2\x96\x81", 3);
	q += 3;
	for (const char *p = text; *p; p++) {
		if (*p == ' ') {
			memcpy(q, "\xE2\x96\x81", 3);
			q += 3;
		} else {
			*q++ = *p;
		}
	}
	*q = 0;
	return o;
}

static void vocab_json(const struct vocab *v, int32_t first_id, json_t *obj)
{
	for (size_t i = 0; i < v->n; i++)
		json_object_set_new(obj, v->s[i], json_integer(first_id + (int32_t)i));
}

static json_t *added_json(const struct family *f, int32_t first_id)
{
	json_t *a = json_array();
	for (int i = 0; i < SPECIALS_MAX && f->specials[i]; i++)
		json_array_append_new(a, json_pack(
			"{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", first_id + i,
			"content", f->specials[i], "single_word", 0, "lstrip", 0,
			"rstrip", 0, "normalized", 0, "special", 1));
	return a;
}

static json_t *config_json(const struct family *f)
{
	json_t *c = json_object();
	json_object_set_new(c, "add_bos_token", json_boolean(f->bos_template));
	json_object_set_new(c, "add_eos_token", json_false());
	json_object_set_new(c, "bos_token", f->bos ? json_string(f->bos) : json_null());
	json_object_set_new(c, "eos_token", json_string(f->eos));
	if (f->pad)
		json_object_set_new(c, "pad_token", json_string(f->pad));
	if (f->sentencepiece)
		json_object_set_new(c, "unk_token", json_string("<unk>"));
	json_object_set_new(c, "clean_up_tokenization_spaces",
			    json_boolean(f->cleanup));
	json_object_set_new(c, "model_max_length", json_integer(131072));
	json_object_set_new(c, "tokenizer_class",
			    json_string(f->sentencepiece ? "LlamaTokenizer"
					: f->nfc ? "Qwen2TokenizerFast"
						 : "PreTrainedTokenizerFast"));
	return c;
}

/* The byte-level families' pieces come from the family's own pipeline:
 * a tokenizer with the base vocabulary and no merges. */
static int bytelevel_words(const struct family *f, struct vocab *v,
			   struct words *W, struct d0_err *err)
{
	json_t *doc = json_object(), *vo = json_object();
	struct tokenizer *t;
	vocab_json(v, 0, vo);
	json_object_set_new(doc, "model", json_pack("{s:s, s:o, s:[]}", "type",
						    "BPE", "vocab", vo, "merges"));
	pipeline(f, -1, doc);
	json_object_set_new(doc, "post_processor", json_null());
	if (tokenizer_from_json(doc, "generated tokenizer.json", &t, err) < 0) {
		json_decref(doc);
		return -1;
	}
	json_decref(doc);
	tokenizer_pieces(t, train_text, sizeof train_text - 1, words_add, W);
	tokenizer_free(t);
	return 0;
}

static int write_docs(const char *dir, json_t *tok, json_t *cfg,
		      struct d0_err *err)
{
	char *p = path_join(dir, "tokenizer.json");
	int rc = json_dump_file(tok, p, JSON_INDENT(2));
	if (rc < 0)
		d0_errf(err, "%s: cannot write", p);
	free(p);
	if (rc == 0) {
		p = path_join(dir, "tokenizer_config.json");
		rc = json_dump_file(cfg, p, JSON_INDENT(2));
		if (rc < 0)
			d0_errf(err, "%s: cannot write", p);
		free(p);
	}
	return rc < 0 ? -1 : 0;
}

static int32_t special_index(const struct family *f, const char *s)
{
	for (int i = 0; s && i < SPECIALS_MAX && f->specials[i]; i++)
		if (!strcmp(f->specials[i], s))
			return i;
	return 0;
}

int tokenizer_write_family(const char *dir, const char *model_type,
			   int64_t vocab, int *written, struct d0_err *err)
{
	const struct family *f = family_of(model_type);
	struct vocab v = {0};
	struct words W = {0};
	json_t *doc, *vo, *merges, *model;
	int nspec = 0, rc = -1;
	int32_t base_id, spec_id;
	size_t room;
	char *norm = NULL;
	*written = 0;
	if (!f)
		return 0;
	while (nspec < SPECIALS_MAX && f->specials[nspec])
		nspec++;
	if (vocab < nspec + 8)
		return 0;
	room = (size_t)vocab - (size_t)nspec;
	W.v = &v;
	if (f->sentencepiece) {
		if (room >= 256 + 64)
			for (int b = 0; b < 256; b++) {
				char s[8];
				snprintf(s, sizeof s, "<0x%02X>", b);
				vocab_add(&v, s, 6);
			}
		norm = sp_normalize(train_text);
		base_chars(&v, norm, room - v.n > 1 ? (room - v.n) / 2 + 1 : 1);
		sp_words(norm, &W);
	} else {
		base_bytes(&v, room < 256 ? room : 256);
		if (bytelevel_words(f, &v, &W, err) < 0)
			goto out;
	}
	merges = train_merges(&W, room - v.n, f->merge_pairs);
	base_id = f->specials_first ? nspec : 0;
	spec_id = f->specials_first ? 0 : (int32_t)v.n;
	vo = json_object();
	if (f->sentencepiece)
		for (int i = 0; i < nspec; i++)
			json_object_set_new(vo, f->specials[i], json_integer(i));
	vocab_json(&v, base_id, vo);
	model = json_pack("{s:s, s:n, s:o, s:b, s:b, s:b, s:o, s:o}", "type",
			  "BPE", "dropout", "unk_token",
			  f->sentencepiece ? json_string("<unk>") : json_null(),
			  "fuse_unk", f->sentencepiece, "byte_fallback",
			  f->sentencepiece, "ignore_merges", f->ignore_merges,
			  "vocab", vo, "merges", merges);
	doc = json_pack("{s:s, s:n, s:n, s:o}", "version", "1.0", "truncation",
			"padding", "added_tokens", added_json(f, spec_id));
	pipeline(f, spec_id + special_index(f, f->bos), doc);
	json_object_set_new(doc, "model", model);
	{
		json_t *c = config_json(f);
		rc = write_docs(dir, doc, c, err);
		json_decref(c);
	}
	json_decref(doc);
	*written = rc == 0;
out:
	for (size_t i = 0; i < W.n; i++)
		free(W.w[i].sym);
	free(W.w);
	for (size_t i = 0; i < v.n; i++)
		free(v.s[i]);
	free(v.s);
	free(norm);
	return rc;
}

/* The tokenizer files travel with a model's weights (convert's rank
 * files, merge's checkpoint), so --prompt works on either. */
int tokenizer_copy_files(const char *src, const char *dst, struct d0_err *err)
{
	for (size_t i = 0; i < 2; i++) {
		const char *name = i ? "tokenizer_config.json" : "tokenizer.json";
		char *from = path_join(src, name), *to, *text;
		size_t len;
		FILE *f;
		int rc = 0;
		if (!path_exists(from)) {
			free(from);
			continue;
		}
		rc = file_read_all(from, 1u << 30, &text, &len, err);
		free(from);
		if (rc < 0)
			return -1;
		to = path_join(dst, name);
		f = fopen(to, "wb");
		if (!f || fwrite(text, 1, len, f) != len)
			rc = d0_errf(err, "%s: write failed", to);
		if (f && fclose(f) != 0 && rc == 0)
			rc = d0_errf(err, "%s: write failed", to);
		free(to);
		free(text);
		if (rc < 0)
			return -1;
	}
	return 0;
}
