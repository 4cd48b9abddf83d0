/*
 * step.h - day0-engine's step table (tmux's command-table shape): each step_*.c
 * exports one `const struct step_entry`, steps.c lists them.
 */
#ifndef DAY0_STEP_H
#define DAY0_STEP_H

#include <stdio.h>

#include "util.h"

/* ------------------------------------------------------------------ steps */

struct step_entry {
	const char *name;
	const char *usage;   /* one line of arguments, after the name */
	const char *summary; /* one line: what it does */
	const char *help;    /* --help: every option, then an example */
	int (*run)(int argc, char **argv); /* returns an exit status */
};

extern const struct step_entry *const step_table[];
const struct step_entry *step_find(const char *name);
/* Print "usage: day0-engine NAME USAGE" to f. */
void step_usage(const struct step_entry *s, FILE *f);
/* --help on stdout: the usage line, the summary, then help. */
void step_help(const struct step_entry *s);
/* Report a usage error for step s and return EXIT_USAGE. */
int step_usage_error(const struct step_entry *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
