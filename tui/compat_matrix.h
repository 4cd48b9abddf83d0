/*
 * compat_matrix.h - the compatibility matrix across nodes (docs/compat.md): the
 * nodes' facts grouped into node sets with equal values, each field's
 * majority, the odd node sets, the family's minimums, and the
 * `facts.compat` verdict.  The rules (which fields must match, the
 * minimums) are the engine's (compat.h there, engine/model/); this file
 * applies them.  The runner, `day0 hosts`, the Hosts screen and the
 * report all call compat_matrix(), so they cannot disagree.
 */
#ifndef DAY0_COMPAT_MATRIX_H
#define DAY0_COMPAT_MATRIX_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "util.h" /* struct d0_err */

/* One node's facts (the facts event's fields; not owned). */
struct compat_node {
	const char *name;
	json_t *facts;
};

/*
 * The matrix of n nodes (family: config.json's model_type, NULL when
 * unknown: only the "*" minimums apply).  A new object:
 *   columns  [{nodes: "node[1-2,4]", n: 3}]  nodes equal on every field,
 *            the largest set first
 *   rows     [{field, title, match: equal|major|shown, cells: [value per
 *            column], odd: [true where the column differs from the
 *            field's majority]}]
 *   status   pass | warn (a shown field differs) | fail (a field that
 *            must match differs, or a minimum is not met)
 *   detail   the check's detail: the odd node sets with the field and
 *            both values, or what every node agrees on
 *   odd      how many nodes differ on a field that must match or miss a
 *            minimum
 * The majority of a field is the value most nodes hold; a tie goes to the
 * value of the node named first.
 */
json_t *compat_matrix(const struct compat_node *nodes, size_t n,
		      const char *family);

/* The family of a model directory or config.json (model_type; kimi_k2
 * reads as deepseek_v3), into out: 0, or -1 with out "" and err naming
 * the file and what is wrong when it cannot be read (the runner and the
 * report pass NULL and go on with the "*" minimums, which the check's
 * detail names; `hosts --model`, typed by hand, refuses). */
int compat_family(const char *model, char *out, size_t cap,
		  struct d0_err *err);

/* The matrix as a plain-text table (fields x node sets), odd cells
 * marked with '*' ; width: the terminal's columns (0: no limit). */
void compat_print(FILE *f, json_t *m, int width);

#endif
