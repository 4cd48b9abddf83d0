/*
 * unit.h - the smallest test framework that does the job: CHECK prints
 * "ok - expr" or "FAIL - file:line: expr" (the lines tests/run.sh counts)
 * and unit_done() makes the exit status reflect failures.
 */
#ifndef DAY0_UNIT_H
#define DAY0_UNIT_H

#include <stdio.h>

static int unit_failed;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (cond) {                                                  \
			printf("ok - %s\n", #cond);                          \
		} else {                                                     \
			printf("FAIL - %s:%d: %s\n", __FILE__, __LINE__,     \
			       #cond);                                       \
			unit_failed++;                                       \
		}                                                            \
	} while (0)

/* Like CHECK but with a name, for checks inside loops. */
#define CHECKN(name, cond)                                                   \
	do {                                                                 \
		if (cond) {                                                  \
			printf("ok - %s\n", name);                           \
		} else {                                                     \
			printf("FAIL - %s:%d: %s (%s)\n", __FILE__,          \
			       __LINE__, name, #cond);                       \
			unit_failed++;                                       \
		}                                                            \
	} while (0)

static inline int unit_done(void)
{
	fflush(stdout);
	return unit_failed ? 1 : 0;
}

#endif
