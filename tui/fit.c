/*
 * fit.c - shortening at word and number boundaries, wrapping, and the
 * glance numbers (bytes, used/budget, headroom, bus bandwidth): see fit.h.
 */
#include "fit.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Bytes of the UTF-8 character at p (a truncated one counts what is
 * there). */
static size_t u8char(const char *p)
{
	unsigned char c = (unsigned char)*p;
	size_t n = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	for (size_t i = 1; i < n; i++)
		if (!p[i])
			return i;
	return n;
}

int fit_cols(const char *s)
{
	int cols = 0;
	while (*s) {
		s += u8char(s);
		cols++;
	}
	return cols;
}

/* The byte offset after the first cols columns of s. */
static size_t bytes_of(const char *s, int cols)
{
	size_t b = 0;
	for (int c = 0; c < cols && s[b]; c++)
		b += u8char(s + b);
	return b;
}

static int digit(char c) { return c >= '0' && c <= '9'; }

/* Is the boundary before byte b of s inside a number?  A number here is
 * a run of digits with the characters that belong to it ("1.5e-3",
 * "+0.2%", "12,345", "4194304B"): the boundary is inside when a digit
 * lies on one side and a digit or a joining character on the other. */
static int inside_number(const char *s, size_t b)
{
	char l, r;
	if (b == 0 || !s[b])
		return 0;
	l = s[b - 1];
	r = s[b];
	if (digit(l) && (digit(r) || strchr(".,eE%xX", r) ||
			 (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z')))
		return 1;
	if (digit(r) && (digit(l) || strchr(".,+-", l)))
		return 1;
	/* "1.|5": a point between digits */
	if ((l == '.' || l == ',') && b >= 2 && digit(s[b - 2]) && digit(r))
		return 1;
	return 0;
}

/* Where to cut s so that what stays takes at most room columns (room
 * bytes of s measured in columns): the last space in range, else a
 * character boundary outside any number.  Returns the byte length to
 * keep (trailing spaces and punctuation not yet dropped). */
static size_t cut_point(const char *s, int room)
{
	size_t lim = bytes_of(s, room), b, sp = 0;
	int have_sp = 0;
	/* A space right after the room: the whole last word fits. */
	if (s[lim] == ' ')
		return lim;
	for (b = 0; b < lim; b++)
		if (s[b] == ' ') {
			sp = b;
			have_sp = 1;
		}
	if (have_sp && sp > 0)
		return sp;
	/* One long word: back off to a character boundary outside a
	 * number. */
	b = lim;
	while (b > 0 && ((((unsigned char)s[b]) & 0xc0) == 0x80 ||
			 inside_number(s, b)))
		b--;
	return b;
}

int fit_text(const char *s, int cols, const char *ell, char *out,
	     size_t max)
{
	int ec = fit_cols(ell);
	size_t keep;
	if (!max)
		return 0;
	out[0] = 0;
	if (cols < 1)
		return 0;
	if (fit_cols(s) <= cols) {
		snprintf(out, max, "%s", s);
		return fit_cols(out);
	}
	if (cols <= ec) {
		/* No room for a word: the ellipsis alone (cut to fit). */
		snprintf(out, max, "%.*s", (int)bytes_of(ell, cols), ell);
		return fit_cols(out);
	}
	keep = cut_point(s, cols - ec);
	/* Drop what would dangle before the ellipsis. */
	while (keep > 0 && strchr(" ,;:(-=>", s[keep - 1]))
		keep--;
	if (keep >= max)
		keep = max - 1;
	snprintf(out, max, "%.*s%s", (int)keep, s, ell);
	return fit_cols(out);
}

int fit_name(const char *s, int cols, const char *ell, char *out,
	     size_t max)
{
	int n = fit_cols(s), ec = fit_cols(ell);
	size_t b, sep;
	if (!max)
		return 0;
	out[0] = 0;
	if (cols < 1)
		return 0;
	if (n <= cols) {
		snprintf(out, max, "%s", s);
		return fit_cols(out);
	}
	if (cols <= ec) {
		snprintf(out, max, "%.*s", (int)bytes_of(ell, cols), ell);
		return fit_cols(out);
	}
	/* The first byte that leaves at most cols - ec columns after it. */
	b = bytes_of(s, n - (cols - ec));
	/* From the next separator on (its word whole), else from the
	 * first character boundary outside a number. */
	for (sep = b; s[sep] && !strchr("-_./: ", s[sep]); sep++)
		;
	if (b > 0 && strchr("-_./: ", s[b - 1]))
		; /* a word starts here */
	else if (s[sep] && s[sep + 1])
		b = sep + 1;
	else
		while (s[b] && ((((unsigned char)s[b]) & 0xc0) == 0x80 ||
				inside_number(s, b)))
			b++;
	snprintf(out, max, "%s%s", ell, s + b);
	return fit_cols(out);
}

int fit_wrap(const char *s, size_t *pos, int cols, char *out, size_t max)
{
	const char *p = s + *pos;
	size_t keep;
	if (!max)
		return 0;
	out[0] = 0;
	while (*p == ' ')
		p++;
	if (!*p || cols < 1) {
		*pos = (size_t)(p - s);
		return 0;
	}
	if (fit_cols(p) <= cols)
		keep = strlen(p);
	else {
		keep = cut_point(p, cols);
		if (!keep) /* a number wider than the line: split anyway */
			keep = bytes_of(p, cols);
	}
	snprintf(out, max, "%.*s", (int)(keep < max ? keep : max - 1), p);
	*pos = (size_t)(p - s) + keep;
	return 1;
}

/* ----------------------------------------------------------------- numbers */

static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};

/* b as a number in unit u (b / 1024^u), written like fit_bytes. */
static void num_in(double b, int u, char *out, size_t max)
{
	double x = b;
	for (int i = 0; i < u; i++)
		x /= 1024;
	if (x == floor(x))
		snprintf(out, max, "%.0f", x);
	else
		snprintf(out, max, "%.1f", x);
}

static int unit_of(double b)
{
	int u = 0;
	double x = b;
	while (fabs(x) >= 1024 && u < 5) {
		x /= 1024;
		u++;
	}
	return u;
}

void fit_bytes(double b, char *out, size_t max)
{
	char n[32];
	if (isnan(b)) {
		snprintf(out, max, "-");
		return;
	}
	num_in(b, unit_of(b), n, sizeof n);
	snprintf(out, max, "%s %s", n, unit[unit_of(b)]);
}

void fit_used_budget(double used, double budget, char *out, size_t max)
{
	char a[32], b[32];
	if (isnan(budget) || budget <= 0) {
		fit_bytes(used, out, max);
		return;
	}
	if (isnan(used)) {
		fit_bytes(budget, b, sizeof b);
		snprintf(out, max, "-/%s", b);
		return;
	}
	if (unit_of(used) == unit_of(budget)) {
		num_in(used, unit_of(used), a, sizeof a);
		num_in(budget, unit_of(budget), b, sizeof b);
		snprintf(out, max, "%s/%s %s", a, b, unit[unit_of(budget)]);
		return;
	}
	fit_bytes(used, a, sizeof a);
	fit_bytes(budget, b, sizeof b);
	snprintf(out, max, "%s/%s", a, b);
}

void fit_headroom(double peak, double budget, char *out, size_t max,
		  double *frac)
{
	double f = !isnan(peak) && budget > 0 ? (budget - peak) / budget : NAN;
	if (frac)
		*frac = f;
	if (isnan(f))
		snprintf(out, max, "-");
	else
		snprintf(out, max, "%.0f%%", f * 100);
}

void fit_busbw(double gbps, char *out, size_t max)
{
	if (isnan(gbps))
		snprintf(out, max, "-");
	else
		snprintf(out, max, "%.3g GB/s", gbps);
}
