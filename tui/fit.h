/*
 * fit.h - text that fits: how the screens, the headless table and the
 * report shorten a line and write the numbers an operator reads at a
 * glance, so the three show the same figures.
 *
 * Shortening never cuts inside a word or a number: the text is cut at
 * the last space (or the last break after , ; ) / before it) that leaves
 * room for the ellipsis, the trailing punctuation is dropped and "…" (or
 * "..." in ASCII) ends it.  A single word longer than the room is cut at
 * a character boundary, but never between two characters of a number
 * (digits with their sign, point, exponent, unit letters and %): the
 * whole number goes.  The full text stays where the screen says it is
 * (the Checklist screen's evidence pane, the report).
 */
#ifndef DAY0_FIT_H
#define DAY0_FIT_H

#include <stddef.h>

/* Columns of a UTF-8 string (every character one column: the glyphs the
 * screens use are). */
int fit_cols(const char *s);

/*
 * s shortened to at most cols columns into out (max bytes), ending in
 * ell ("…" or "...") when shortened.  Returns the columns written.
 * cols < 1 writes "".
 */
int fit_text(const char *s, int cols, const char *ell, char *out,
	     size_t max);

/*
 * A name (node, card, node set) in cols columns: its end is what tells
 * one from the next ("gpu-h200-rack07-node-0017/3"), so a long one keeps
 * its end after ell, from a separator (- _ . / : space) on, else from a
 * character outside any number: "…node-0017/3".  Returns the columns.
 */
int fit_name(const char *s, int cols, const char *ell, char *out,
	     size_t max);

/*
 * The line of s that starts at byte *pos and fits cols columns, broken at
 * a space like fit_text (a word longer than cols is split); *pos moves to
 * the next line's start.  Returns 0 when s is used up.  For wrapping full
 * text in a detail pane.
 */
int fit_wrap(const char *s, size_t *pos, int cols, char *out, size_t max);

/* Bytes in binary units: "45.3 MiB", "128 MiB" (exact values without a
 * fraction), "-" for NaN.  The report's report_fmt_bytes is this. */
void fit_bytes(double b, char *out, size_t max);

/* A card's memory as the Overview, the headless table and the report
 * write it: "45.3/128 MiB" (used/budget, one unit when both share it),
 * "45.3 MiB/1.5 GiB" otherwise; "45.3 MiB" without a budget. */
void fit_used_budget(double used, double budget, char *out, size_t max);

/* Headroom: the share of the budget above the peak, (budget - peak) /
 * budget, as "65%" ("-" when there is no budget); *frac gets the share
 * (NAN without a budget) for its colour. */
void fit_headroom(double peak, double budget, char *out, size_t max,
		  double *frac);

/* A collective's bus bandwidth (GB/s, as nccl-tests and the comm events
 * give it) as "0.713 GB/s". */
void fit_busbw(double gbps, char *out, size_t max);

#endif
