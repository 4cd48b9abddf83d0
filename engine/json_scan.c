/*
 * json_scan.c - a strict JSON scanner that allocates nothing (see
 * json_scan.h for why the store has one).  A recursive-descent validator
 * over the byte span; the top-level object's members are recorded as
 * spans.  The rules follow jansson's json_loadb(), which the fuzz target
 * compares it against: same grammar, same UTF-8 rules, same limits.
 */
#include "json_scan.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct scanner {
	const unsigned char *s;
	size_t n, i;
	struct jscan *j;
};

static int fail(struct scanner *sc, const char *what)
{
	snprintf(sc->j->err, sizeof sc->j->err, "%s at byte %zu", what, sc->i);
	return -1;
}

static void skip_ws(struct scanner *sc)
{
	while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' ||
				 sc->s[sc->i] == '\n' || sc->s[sc->i] == '\r'))
		sc->i++;
}

static int hexval(unsigned c)
{
	if (c >= '0' && c <= '9')
		return (int)(c - '0');
	if (c >= 'a' && c <= 'f')
		return (int)(c - 'a' + 10);
	if (c >= 'A' && c <= 'F')
		return (int)(c - 'A' + 10);
	return -1;
}

/* Four hex digits at p (caller checked there are 4 bytes). */
static int32_t hex4(const unsigned char *p)
{
	int32_t v = 0;
	for (int k = 0; k < 4; k++) {
		int h = hexval(p[k]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

size_t jscan_utf8_seq(const unsigned char *s, size_t n, size_t i)
{
	unsigned c = s[i];
	size_t k;
	uint32_t cp;
	if (c >= 0xc2 && c <= 0xdf) {
		k = 1;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		k = 2;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		k = 3;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n - i <= k)
		return 0;
	for (size_t m = 1; m <= k; m++) {
		if ((s[i + m] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i + m] & 0x3f);
	}
	if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return k + 1;
}

/* A string starting at the opening quote; *esc set if it has escapes. */
static int scan_string(struct scanner *sc, int *esc)
{
	*esc = 0;
	sc->i++; /* the quote */
	while (sc->i < sc->n) {
		unsigned c = sc->s[sc->i];
		if (c == '"') {
			sc->i++;
			return 0;
		}
		if (c < 0x20)
			return fail(sc, "control character in a string");
		if (c >= 0x80) {
			size_t k = jscan_utf8_seq(sc->s, sc->n, sc->i);
			if (!k)
				return fail(sc, "invalid UTF-8");
			sc->i += k;
			continue;
		}
		if (c != '\\') {
			sc->i++;
			continue;
		}
		*esc = 1;
		if (sc->i + 1 >= sc->n)
			break;
		c = sc->s[sc->i + 1];
		if (c == 'u') {
			int32_t v;
			if (sc->n - sc->i < 6 ||
			    (v = hex4(sc->s + sc->i + 2)) < 0)
				return fail(sc, "invalid \\u escape");
			sc->i += 6;
			if (v == 0)
				return fail(sc, "\\u0000 in a string");
			if (v >= 0xdc00 && v <= 0xdfff)
				return fail(sc, "lone low surrogate");
			if (v >= 0xd800 && v <= 0xdbff) {
				int32_t w;
				if (sc->n - sc->i < 6 || sc->s[sc->i] != '\\' ||
				    sc->s[sc->i + 1] != 'u')
					return fail(sc, "unpaired surrogate");
				w = hex4(sc->s + sc->i + 2);
				if (w < 0)
					return fail(sc, "invalid \\u escape");
				if (w < 0xdc00 || w > 0xdfff)
					return fail(sc,
						    "invalid surrogate pair");
				sc->i += 6;
			}
			continue;
		}
		if (!strchr("\"\\/bfnrt", (int)c) || c == 0)
			return fail(sc, "invalid escape");
		sc->i += 2;
	}
	return fail(sc, "unterminated string");
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
	c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* strtod of a token, independent of the process locale. */
static double token_strtod(const char *p, size_t len, int *overflow)
{
	char small[128], *buf = small;
	double v;
	pthread_once(&c_locale_once, c_locale_init);
	if (len >= sizeof small) {
		buf = malloc(len + 1);
		if (!buf)
			abort();
	}
	memcpy(buf, p, len);
	buf[len] = 0;
	errno = 0;
	v = c_locale ? strtod_l(buf, NULL, c_locale) : strtod(buf, NULL);
	*overflow = (v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE;
	if (buf != small)
		free(buf);
	return v;
}

/* Does the integer token fit in int64 (strtoll's range)? */
static int int_fits(const unsigned char *p, size_t len)
{
	int neg = p[0] == '-';
	uint64_t v = 0,
		 lim = neg ? 9223372036854775808ULL : 9223372036854775807ULL;
	for (size_t k = (size_t)neg; k < len; k++) {
		unsigned d = p[k] - '0';
		if (v > (lim - d) / 10)
			return 0;
		v = v * 10 + d;
	}
	return 1;
}

static int scan_number(struct scanner *sc, enum jkind *kind)
{
	size_t start = sc->i;
	int real = 0;
	if (sc->s[sc->i] == '-')
		sc->i++;
	if (sc->i >= sc->n)
		return fail(sc, "invalid number");
	if (sc->s[sc->i] == '0') {
		sc->i++;
		if (sc->i < sc->n && sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9')
			return fail(sc, "leading zero in a number");
	} else if (sc->s[sc->i] >= '1' && sc->s[sc->i] <= '9') {
		while (sc->i < sc->n && sc->s[sc->i] >= '0' &&
		       sc->s[sc->i] <= '9')
			sc->i++;
	} else {
		return fail(sc, "invalid number");
	}
	if (sc->i < sc->n && sc->s[sc->i] == '.') {
		real = 1;
		sc->i++;
		if (sc->i >= sc->n || sc->s[sc->i] < '0' || sc->s[sc->i] > '9')
			return fail(sc, "invalid number");
		while (sc->i < sc->n && sc->s[sc->i] >= '0' &&
		       sc->s[sc->i] <= '9')
			sc->i++;
	}
	if (sc->i < sc->n && (sc->s[sc->i] == 'e' || sc->s[sc->i] == 'E')) {
		real = 1;
		sc->i++;
		if (sc->i < sc->n &&
		    (sc->s[sc->i] == '+' || sc->s[sc->i] == '-'))
			sc->i++;
		if (sc->i >= sc->n || sc->s[sc->i] < '0' || sc->s[sc->i] > '9')
			return fail(sc, "invalid number");
		while (sc->i < sc->n && sc->s[sc->i] >= '0' &&
		       sc->s[sc->i] <= '9')
			sc->i++;
	}
	if (real) {
		int overflow;
		token_strtod((const char *)sc->s + start, sc->i - start,
			     &overflow);
		if (overflow)
			return fail(sc, "real number overflow");
		*kind = J_REAL;
	} else {
		if (!int_fits(sc->s + start, sc->i - start))
			return fail(sc, "integer out of range");
		*kind = J_INT;
	}
	return 0;
}

static int scan_value(struct scanner *sc, int depth, enum jkind *kind,
		      int *esc);

static int keys_equal(const struct jmember *a, const struct jmember *b);

static int scan_object(struct scanner *sc, int depth, int top)
{
	sc->i++; /* { */
	skip_ws(sc);
	if (sc->i < sc->n && sc->s[sc->i] == '}') {
		sc->i++;
		return 0;
	}
	for (;;) {
		struct jmember m = {0};
		int esc;
		if (sc->i >= sc->n || sc->s[sc->i] != '"')
			return fail(sc, "string or '}' expected");
		m.key = (const char *)sc->s + sc->i + 1;
		if (scan_string(sc, &esc) < 0)
			return -1;
		m.klen = (size_t)((const char *)sc->s + sc->i - 1 - m.key);
		m.kesc = esc;
		skip_ws(sc);
		if (sc->i >= sc->n || sc->s[sc->i] != ':')
			return fail(sc, "':' expected");
		sc->i++;
		skip_ws(sc);
		size_t vstart = sc->i;
		if (scan_value(sc, depth + 1, &m.kind, &m.vesc) < 0)
			return -1;
		if (top) {
			struct jscan *j = sc->j;
			if (m.kind == J_STR) {
				m.val = (const char *)sc->s + vstart + 1;
				m.vlen = sc->i - vstart - 2;
			} else {
				m.val = (const char *)sc->s + vstart;
				m.vlen = sc->i - vstart;
			}
			for (int k = 0; k < j->n; k++)
				if (keys_equal(&j->m[k], &m))
					return fail(sc, "duplicate key");
			if (j->n < JSCAN_MAX_MEMBERS)
				j->m[j->n++] = m;
			j->total++;
		}
		skip_ws(sc);
		if (sc->i < sc->n && sc->s[sc->i] == ',') {
			sc->i++;
			skip_ws(sc);
			continue;
		}
		if (sc->i < sc->n && sc->s[sc->i] == '}') {
			sc->i++;
			return 0;
		}
		return fail(sc, "',' or '}' expected");
	}
}

static int scan_array(struct scanner *sc, int depth)
{
	sc->i++; /* [ */
	skip_ws(sc);
	if (sc->i < sc->n && sc->s[sc->i] == ']') {
		sc->i++;
		return 0;
	}
	for (;;) {
		enum jkind k;
		int esc;
		if (scan_value(sc, depth + 1, &k, &esc) < 0)
			return -1;
		skip_ws(sc);
		if (sc->i < sc->n && sc->s[sc->i] == ',') {
			sc->i++;
			skip_ws(sc);
			continue;
		}
		if (sc->i < sc->n && sc->s[sc->i] == ']') {
			sc->i++;
			return 0;
		}
		return fail(sc, "',' or ']' expected");
	}
}

static int literal(struct scanner *sc, const char *word)
{
	size_t len = strlen(word);
	if (sc->n - sc->i < len || memcmp(sc->s + sc->i, word, len))
		return fail(sc, "invalid token");
	sc->i += len;
	/* jansson reads a whole identifier: "truex" is one bad token. */
	if (sc->i < sc->n && ((sc->s[sc->i] >= 'a' && sc->s[sc->i] <= 'z') ||
			      (sc->s[sc->i] >= 'A' && sc->s[sc->i] <= 'Z')))
		return fail(sc, "invalid token");
	return 0;
}

static int scan_value(struct scanner *sc, int depth, enum jkind *kind, int *esc)
{
	*esc = 0;
	if (depth > JSCAN_MAX_DEPTH)
		return fail(sc, "nested too deep");
	if (sc->i >= sc->n)
		return fail(sc, "value expected");
	switch (sc->s[sc->i]) {
	case '{':
		*kind = J_OBJ;
		return scan_object(sc, depth, 0);
	case '[':
		*kind = J_ARR;
		return scan_array(sc, depth);
	case '"':
		*kind = J_STR;
		return scan_string(sc, esc);
	case 't':
		*kind = J_TRUE;
		return literal(sc, "true");
	case 'f':
		*kind = J_FALSE;
		return literal(sc, "false");
	case 'n':
		*kind = J_NULL;
		return literal(sc, "null");
	default:
		if (sc->s[sc->i] == '-' ||
		    (sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9'))
			return scan_number(sc, kind);
		return fail(sc, "invalid token");
	}
}

int json_scan_object(const char *s, size_t n, struct jscan *j)
{
	struct scanner sc = {(const unsigned char *)s, n, 0, j};
	j->n = j->total = 0;
	j->err[0] = 0;
	skip_ws(&sc);
	if (sc.i >= n || s[sc.i] != '{')
		return fail(&sc, "'{' expected");
	if (scan_object(&sc, 1, 1) < 0)
		return -1;
	skip_ws(&sc);
	if (sc.i != n)
		return fail(&sc, "end of input expected");
	return 0;
}

/* ---------------------------------------------------------------- values */

/* Decode the escaped string span p[0..len) into out; returns the length. */
static size_t decode(const char *p, size_t len, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		if (p[i] != '\\') {
			out[o++] = p[i++];
			continue;
		}
		char c = p[i + 1];
		if (c != 'u') {
			static const char from[] = "\"\\/bfnrt",
					  to[] = "\"\\/\b\f\n\r\t";
			out[o++] = to[strchr(from, c) - from];
			i += 2;
			continue;
		}
		uint32_t cp = (uint32_t)hex4((const unsigned char *)p + i + 2);
		i += 6;
		if (cp >= 0xd800 && cp <= 0xdbff) {
			uint32_t lo =
			    (uint32_t)hex4((const unsigned char *)p + i + 2);
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			i += 6;
		}
		if (cp < 0x80) {
			out[o++] = (char)cp;
		} else if (cp < 0x800) {
			out[o++] = (char)(0xc0 | (cp >> 6));
			out[o++] = (char)(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			out[o++] = (char)(0xe0 | (cp >> 12));
			out[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
			out[o++] = (char)(0x80 | (cp & 0x3f));
		} else {
			out[o++] = (char)(0xf0 | (cp >> 18));
			out[o++] = (char)(0x80 | ((cp >> 12) & 0x3f));
			out[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
			out[o++] = (char)(0x80 | (cp & 0x3f));
		}
	}
	out[o] = 0;
	return o;
}

/* Compare a member's key with len bytes of plain text. */
static int key_is(const struct jmember *m, const char *key, size_t len)
{
	char small[256];
	if (!m->kesc)
		return m->klen == len && !memcmp(m->key, key, len);
	if (m->klen >= sizeof small) {
		char *buf = malloc(m->klen + 1);
		int eq;
		if (!buf)
			abort();
		eq = decode(m->key, m->klen, buf) == len &&
		     !memcmp(buf, key, len);
		free(buf);
		return eq;
	}
	return decode(m->key, m->klen, small) == len &&
	       !memcmp(small, key, len);
}

static int keys_equal(const struct jmember *a, const struct jmember *b)
{
	char small[256];
	if (!a->kesc)
		return key_is(b, a->key, a->klen);
	if (a->klen >= sizeof small) {
		char *buf = malloc(a->klen + 1);
		int eq;
		if (!buf)
			abort();
		size_t l = decode(a->key, a->klen, buf);
		eq = key_is(b, buf, l);
		free(buf);
		return eq;
	}
	size_t l = decode(a->key, a->klen, small);
	return key_is(b, small, l);
}

const struct jmember *jscan_get(const struct jscan *j, const char *key)
{
	size_t len = strlen(key);
	for (int k = 0; k < j->n; k++)
		if (key_is(&j->m[k], key, len))
			return &j->m[k];
	return NULL;
}

int64_t jscan_int(const struct jmember *m)
{
	int neg = m->val[0] == '-';
	uint64_t v = 0;
	for (size_t k = (size_t)neg; k < m->vlen; k++)
		v = v * 10 + (uint64_t)(m->val[k] - '0');
	return neg ? (int64_t)(0 - v) : (int64_t)v;
}

double jscan_real(const struct jmember *m)
{
	int overflow;
	if (m->kind == J_INT)
		return (double)jscan_int(m);
	return token_strtod(m->val, m->vlen, &overflow);
}

int jscan_numbers(const struct jmember *m, double *out, size_t max)
{
	const char *p, *end;
	size_t n = 0;
	if (m->kind != J_ARR)
		return -1;
	p = m->val;
	end = m->val + m->vlen;
	/* The scanner validated the array: '[' value (',' value)* ']'. */
	p++;
	for (;;) {
		const char *tok;
		int overflow;
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' ||
				   *p == '\r'))
			p++;
		if (p >= end)
			return -1;
		if (*p == ']')
			return (int)n;
		tok = p;
		if (!(*p == '-' || (*p >= '0' && *p <= '9')))
			return -1; /* not a number: the caller derives nothing */
		while (p < end && (*p == '-' || *p == '+' || *p == '.' ||
				   *p == 'e' || *p == 'E' ||
				   (*p >= '0' && *p <= '9')))
			p++;
		if (n == max)
			return -1;
		out[n++] = token_strtod(tok, (size_t)(p - tok), &overflow);
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' ||
				   *p == '\r'))
			p++;
		if (p < end && *p == ',')
			p++;
	}
}

size_t jscan_str(const struct jmember *m, char *out)
{
	if (!m->vesc) {
		memcpy(out, m->val, m->vlen);
		out[m->vlen] = 0;
		return m->vlen;
	}
	return decode(m->val, m->vlen, out);
}
