/*
 * report_compat.c - the report's compatibility matrix (docs/compat.md,
 * docs/reports.md): the manifest's facts per node through compat_matrix
 * (the same function the runner's facts.compat and `day0 hosts` use),
 * rendered as a table of fields x node sets in markdown and HTML, the
 * cells that differ from their field's majority in bold (markdown) or
 * marked with class "odd" (HTML).
 */
#include "report.h"

#include <stdlib.h>
#include <string.h>

#include "compat_matrix.h"

json_t *report_compat(json_t *manifest)
{
	json_t *facts = json_object_get(manifest, "facts"), *v;
	const char *k;
	struct compat_node *cn;
	size_t n = 0;
	char family[64];
	json_t *m;
	if (!json_object_size(facts))
		return json_null();
	cn = calloc(json_object_size(facts) + 1, sizeof *cn);
	if (!cn)
		abort();
	json_object_foreach(facts, k, v)
	{
		cn[n].name = k;
		cn[n++].facts = v;
	}
	(void)compat_family(
	    json_string_value(json_object_get(manifest, "model")), family,
	    sizeof family, NULL);
	m = compat_matrix(cn, n, family);
	free(cn);
	return m;
}

/* A markdown cell: '|' and newlines would break the table. */
static void md_cell(FILE *f, const char *s, int odd)
{
	fputs(odd ? " **" : " ", f);
	for (; *s; s++)
		if (*s == '|')
			fputs("\\|", f);
		else
			fputc(*s == '\n' ? ' ' : *s, f);
	fputs(odd ? "** |" : " |", f);
}

void report_compat_md(FILE *f, json_t *m)
{
	json_t *cols = json_object_get(m, "columns"), *r, *c;
	size_t i, k;
	fputs("### Compatibility matrix\n\n", f);
	if (!json_is_object(m)) {
		fputs("not recorded\n\n", f);
		return;
	}
	fputs("| field |", f);
	json_array_foreach(cols, k, c)
	{
		char head[192];
		snprintf(head, sizeof head, "%s (%lld)",
			 json_string_value(json_object_get(c, "nodes")),
			 (long long)json_integer_value(json_object_get(c, "n")));
		md_cell(f, head, 0);
	}
	fputs("\n|---|", f);
	for (k = 0; k < json_array_size(cols); k++)
		fputs("---|", f);
	fputc('\n', f);
	json_array_foreach(json_object_get(m, "rows"), i, r)
	{
		char title[96];
		snprintf(title, sizeof title, "%s%s",
			 json_string_value(json_object_get(r, "title")),
			 strcmp(json_string_value(json_object_get(r, "match")),
				"shown")
			     ? " (must match)"
			     : "");
		fputc('|', f);
		md_cell(f, title, 0);
		for (k = 0; k < json_array_size(cols); k++)
			md_cell(f,
				json_string_value(json_array_get(
				    json_object_get(r, "cells"), k)),
				json_is_true(json_array_get(
				    json_object_get(r, "odd"), k)));
		fputc('\n', f);
	}
	fprintf(f, "\nfacts.compat: **%s**: %s\n\n",
		json_string_value(json_object_get(m, "status")),
		json_string_value(json_object_get(m, "detail")));
}

static void esc(FILE *f, const char *s)
{
	for (; s && *s; s++)
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
}

void report_compat_html(FILE *f, json_t *m)
{
	json_t *cols = json_object_get(m, "columns"), *r, *c;
	size_t i, k;
	fputs("<h3>Compatibility matrix</h3>\n", f);
	if (!json_is_object(m)) {
		fputs("<p>not recorded</p>\n", f);
		return;
	}
	fputs("<table class=\"compat\"><tr><th>field</th>", f);
	json_array_foreach(cols, k, c)
	{
		fputs("<th>", f);
		esc(f, json_string_value(json_object_get(c, "nodes")));
		fprintf(f, " (%lld)</th>",
			(long long)json_integer_value(json_object_get(c, "n")));
	}
	fputs("</tr>\n", f);
	json_array_foreach(json_object_get(m, "rows"), i, r)
	{
		int must = strcmp(json_string_value(json_object_get(r, "match")),
				  "shown") != 0;
		fputs("<tr><th>", f);
		esc(f, json_string_value(json_object_get(r, "title")));
		fputs(must ? " (must match)</th>" : "</th>", f);
		for (k = 0; k < json_array_size(cols); k++) {
			int odd = json_is_true(
			    json_array_get(json_object_get(r, "odd"), k));
			fputs(odd ? "<td class=\"odd\" style=\"background:"
				    "#fdd;font-weight:bold\">"
				  : "<td>",
			      f);
			esc(f, json_string_value(
				   json_array_get(json_object_get(r, "cells"), k)));
			fputs("</td>", f);
		}
		fputs("</tr>\n", f);
	}
	fprintf(f, "</table>\n<p>facts.compat: <b>");
	esc(f, json_string_value(json_object_get(m, "status")));
	fputs("</b>: ", f);
	esc(f, json_string_value(json_object_get(m, "detail")));
	fputs("</p>\n", f);
}
