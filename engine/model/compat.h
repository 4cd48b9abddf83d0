/*
 * compat.h - the compatibility matrix's rules (docs/compat.md): which
 * facts a node reports are compared across nodes, how (the whole value,
 * or a driver's major version), and the minimums per model family
 * (compat_min.c, the one table of them).
 *
 * The console builds the matrix (tui/compat.c: nodes grouped by value,
 * the majority, the odd node sets) from these rules; the engine holds
 * them so that every consumer reads one list, as with the checklist.
 */
#ifndef DAY0_COMPAT_H
#define DAY0_COMPAT_H

#include <stddef.h>

#include <jansson.h>

enum compat_match {
	COMPAT_SHOWN, /* in the matrix; differences shown, not a failure */
	COMPAT_EQUAL, /* every node must equal the majority */
	COMPAT_MAJOR, /* every node's major version must equal the majority's */
};

struct compat_field {
	const char *key;   /* the facts event's field (docs/protocol.md) */
	const char *title; /* the matrix's row */
	enum compat_match match;
};

/* The matrix's rows, in order. */
extern const struct compat_field compat_fields[];
extern const size_t compat_nfields;

/* The field named key, NULL when it is not a matrix field. */
const struct compat_field *compat_field_find(const char *key);

/*
 * The value of f in a node's facts (the fields object of its facts
 * event): the string as reported, "-" when absent (an older agent).  With
 * compare and COMPAT_MAJOR, the number before the first '.' ("550" of
 * "550.54.15"; "none" stays "none").
 */
void compat_value(json_t *facts, const struct compat_field *f, int compare,
		  char *out, size_t cap);

/*
 * The first dotted number in s ("Open MPI v4.1.4" -> 4.1.4), compared
 * part by part with b's: <0, 0, >0.  *ok is 0 when s holds no number.
 */
int compat_version_cmp(const char *s, const char *min, int *ok);

/* A minimum: the field's version at least min for the family ("*": every
 * family), when the node reports one ("none": no GPU, not applicable). */
struct compat_min {
	const char *family; /* config.json's model_type, or "*" */
	const char *field;
	const char *min;
	const char *why; /* the reason and its source, for the docs and detail */
};
extern const struct compat_min compat_minimums[];
extern const size_t compat_nminimums;

/*
 * The minimums of family (NULL or "": the "*" rows only) that facts do not
 * meet, as "FIELD VALUE < MIN (WHY)" joined by "; " into out; returns how
 * many.  A field the node does not report counts as not met ("unknown").
 */
int compat_check_minimums(json_t *facts, const char *family, char *out,
			  size_t cap);

#endif
