/*
 * json_scan.h - store-internal: a strict, allocation-free JSON scanner for
 * one event line.  Not part of the store's interface (store.h is).
 *
 * Why not jansson here: ingest parses every event once and needs a dozen
 * top-level fields; jansson builds a tree of malloc'd values for that and
 * was a quarter of ingest time (bench/store.sh).  This scanner validates
 * the whole line with the same rules jansson applies (RFC 8259 grammar,
 * UTF-8, no \u0000, paired surrogates, integers within int64, reals that
 * do not overflow, depth <= 2048, nothing after the value) and records
 * where the top-level members are; values are decoded only when asked
 * for.  tests/fuzz/fuzz_proto.c holds it to jansson's verdicts.
 */
#ifndef DAY0_JSON_SCAN_H
#define DAY0_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

enum jkind { J_STR, J_INT, J_REAL, J_TRUE, J_FALSE, J_NULL, J_OBJ, J_ARR };

struct jmember {
	const char *key; /* raw span between the quotes */
	size_t klen;
	int kesc; /* key has escapes */
	enum jkind kind;
	const char *val; /* J_STR: between the quotes; else the whole token */
	size_t vlen;
	int vesc; /* J_STR with escapes */
};

#define JSCAN_MAX_MEMBERS 48
#define JSCAN_MAX_DEPTH	  2048

struct jscan {
	struct jmember m[JSCAN_MAX_MEMBERS];
	int n;	      /* members recorded (the first JSCAN_MAX_MEMBERS) */
	int total;    /* members in the object */
	char err[96]; /* why it was refused */
};

/* Validate s[0..n) as one JSON object and record its top-level members.
 * Duplicate top-level keys are refused.  0 ok, -1 refused (j->err). */
int json_scan_object(const char *s, size_t n, struct jscan *j);

/* The member named key (escapes in the document's key are decoded for
 * the comparison), or NULL. */
const struct jmember *jscan_get(const struct jscan *j, const char *key);

/* J_INT value. */
int64_t jscan_int(const struct jmember *m);
/* J_INT or J_REAL value as a double. */
double jscan_real(const struct jmember *m);
/* J_ARR of numbers into out (at most max): their count, or -1 when the
 * array holds anything else or more than max. */
int jscan_numbers(const struct jmember *m, double *out, size_t max);
/*
 * J_STR value decoded into out (which must hold m->vlen + 1 bytes: a
 * decoded string is never longer than its escaped form); NUL-terminated.
 * Returns the decoded length.
 */
size_t jscan_str(const struct jmember *m, char *out);

/* One multi-byte UTF-8 sequence at s[i] (s[i] >= 0x80): its length, or 0
 * if invalid (overlong, surrogate, above U+10FFFF, cut short).  The one
 * rule the scanner and proto_utf8_valid share. */
size_t jscan_utf8_seq(const unsigned char *s, size_t n, size_t i);

#endif
