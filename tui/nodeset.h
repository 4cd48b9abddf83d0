/*
 * nodeset.h - folding node names into node sets, the inverse of
 * nodeset_expand (engine.h): "n01,n02,n03,n05" -> "n[01-03,05]".
 */
#ifndef DAY0_NODESET_H
#define DAY0_NODESET_H

#include <stddef.h>

/*
 * Fold names into a clush-style set, a malloc'd string (NULL when out of
 * memory).  Names are grouped by the text before their trailing number,
 * groups in the order their first name appears; within a group numbers
 * are sorted and consecutive ones become ranges.  Zero padding is kept: a
 * range only holds numbers printed with its first number's width
 * ("n9,n10" -> "n[9-10]", "n09,n10" -> "n[09-10]", "n1,n01" -> "n[1,01]").
 * A group of one is written plainly ("a[1-2],b7"); names without a
 * trailing number stay as they are; duplicates are dropped.  The result
 * expands back (nodeset_expand) to the same names, as a set.
 */
char *nodeset_fold(char *const *names, size_t n);

#endif
