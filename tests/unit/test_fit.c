/*
 * test_fit.c - fit.h: shortening at word and number boundaries (never
 * inside a number), wrapping that loses no word, and the glance numbers
 * the Overview, the headless table and the report share.
 */
#include "fit.h"
#include "unit.h"

#include <math.h>
#include <string.h>

/* Does the shortened text end inside one of the numbers of the full
 * text?  (The kept part's last token must be a whole token of s.) */
static int cut_whole(const char *s, const char *out, const char *ell)
{
	size_t n = strlen(out), el = strlen(ell);
	if (n < el || strcmp(out + n - el, ell))
		return !strcmp(s, out); /* not shortened: must be equal */
	n -= el;
	if (strncmp(s, out, n))
		return 0;
	/* The next character of s after what was kept starts a new token. */
	return n == 0 || s[n] == ' ' || s[n] == ',' || s[n] == ';' ||
	       s[n] == ':' || s[n] == '(' || s[n] == '-' || s[n] == '=';
}

int main(void)
{
	char out[256];
	const char *soak = "2465 iterations in 10.0 s on 4 ranks: logits "
			   "bit-identical (0 differ, max diff 0); memory "
			   "growth +0.2% (rss 26.3 MiB -> 26.3 MiB)";
	int c;

	c = fit_text("short", 10, "…", out, sizeof out);
	CHECK(!strcmp(out, "short") && c == 5);
	/* Every width from 1 to the full length: within the width, ends
	 * with the ellipsis, and what is kept is whole words. */
	for (int w = 1; w <= (int)strlen(soak) + 2; w++) {
		char name[64];
		c = fit_text(soak, w, "…", out, sizeof out);
		snprintf(name, sizeof name, "soak at %d columns", w);
		CHECKN(name, c <= w && fit_cols(out) == c &&
				 cut_whole(soak, out, "…"));
	}
	fit_text(soak, 110, "…", out, sizeof out);
	CHECK(!strstr(out, "+0.…") && !strstr(out, "+0…"));
	fit_text("memory growth +0.2% (rss)", 18, "…", out, sizeof out);
	CHECK(!strcmp(out, "memory growth…"));
	fit_text("malformed body -> 400 with an error object", 21, "...", out,
		 sizeof out);
	CHECK(!strcmp(out, "malformed body..."));
	/* One long word: cut at a character, never inside a number. */
	fit_text("abcdefgh12345678", 12, "…", out, sizeof out);
	CHECK(!strcmp(out, "abcdefgh…"));
	/* A node name in a narrow column: its number whole or gone. */
	fit_text("gpu-h200-node-0017", 16, "…", out, sizeof out);
	CHECK(!strcmp(out, "gpu-h200-node…"));
	fit_text("gpu-h200-node-0017/3", 19, "…", out, sizeof out);
	CHECK(!strcmp(out, "gpu-h200-node-0017…"));
	/* Names keep their end: what tells them apart. */
	c = fit_name("gpu-h200-rack07-node-0017", 16, "…", out, sizeof out);
	CHECK(c <= 16 && !strcmp(out, "…node-0017"));
	c = fit_name("gpu-h200-rack07-node-0017/3", 24, "…", out, sizeof out);
	CHECK(c <= 24 && !strcmp(out, "…h200-rack07-node-0017/3"));
	c = fit_name("n[0001-1024]", 20, "…", out, sizeof out);
	CHECK(!strcmp(out, "n[0001-1024]"));
	c = fit_name("abcdefgh12345678", 6, "...", out, sizeof out);
	CHECK(c <= 6 && !strcmp(out, "...")); /* the number whole or gone */
	fit_text("/very/long/path/without/spaces", 10, "…", out, sizeof out);
	CHECK(fit_cols(out) == 10);
	/* UTF-8 counts columns, not bytes. */
	c = fit_text("été été été été", 9, "…", out, sizeof out);
	CHECK(c <= 9 && !strcmp(out, "été été…"));
	c = fit_text("anything", 1, "…", out, sizeof out);
	CHECK(c == 1 && !strcmp(out, "…"));
	c = fit_text("anything", 0, "…", out, sizeof out);
	CHECK(c == 0 && !out[0]);

	/* Wrapping keeps every word, in order, each line within the width. */
	{
		size_t pos = 0;
		char all[512] = "";
		int ok = 1, lines = 0;
		while (fit_wrap(soak, &pos, 20, out, sizeof out)) {
			ok &= fit_cols(out) <= 20;
			if (all[0])
				strcat(all, " ");
			strcat(all, out);
			lines++;
		}
		CHECK(ok && lines > 3);
		CHECK(!strcmp(all, soak));
	}

	fit_bytes(47497216, out, sizeof out);
	CHECK(!strcmp(out, "45.3 MiB"));
	fit_bytes(134217728, out, sizeof out);
	CHECK(!strcmp(out, "128 MiB"));
	fit_bytes(0, out, sizeof out);
	CHECK(!strcmp(out, "0 B"));
	fit_bytes(NAN, out, sizeof out);
	CHECK(!strcmp(out, "-"));
	fit_used_budget(47497216, 134217728, out, sizeof out);
	CHECK(!strcmp(out, "45.3/128 MiB"));
	fit_used_budget(47497216, 1.5 * 1073741824.0, out, sizeof out);
	CHECK(!strcmp(out, "45.3 MiB/1.5 GiB"));
	fit_used_budget(47497216, NAN, out, sizeof out);
	CHECK(!strcmp(out, "45.3 MiB"));
	double f;
	fit_headroom(47497216, 134217728, out, sizeof out, &f);
	CHECK(!strcmp(out, "65%") && fabs(f - 0.646) < 0.001);
	fit_headroom(47497216, NAN, out, sizeof out, &f);
	CHECK(!strcmp(out, "-") && isnan(f));
	fit_busbw(0.713002962142026, out, sizeof out);
	CHECK(!strcmp(out, "0.713 GB/s"));
	return unit_done();
}
