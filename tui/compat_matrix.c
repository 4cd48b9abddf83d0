/*
 * compat_matrix.c - the compatibility matrix across nodes
 * (compat_matrix.h).
 *
 * Columns are node sets equal on every field (so a homogeneous cluster is
 * one column however many nodes it has); a row's majority is counted in
 * nodes, not columns.  The detail names each odd node set folded
 * (nodeset_fold), with the field's key and both values, so a NO-GO line
 * says where to look and what differs.
 */
#include "compat_matrix.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compat.h" /* the rules: engine/model/compat.h */
#include "nodeset.h"

/* A column: nodes with equal values on every field. */
struct col {
	char **names;
	size_t n;
	char (*val)[128];  /* per field: shown */
	char (*cmp)[128];  /* per field: compared */
};

static int col_cmp(const void *pa, const void *pb)
{
	const struct col *a = pa, *b = pb;
	if (a->n != b->n)
		return a->n > b->n ? -1 : 1;
	return 0; /* qsort is not stable: ties keep first-name order below */
}

static char *fold(char **names, size_t n)
{
	char *s = nodeset_fold(names, n);
	if (!s)
		abort();
	return s;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

json_t *compat_matrix(const struct compat_node *nodes, size_t n,
		      const char *family)
{
	const size_t nf = compat_nfields;
	struct col *cols = calloc(n + 1, sizeof *cols);
	size_t nc = 0, odd_nodes = 0;
	json_t *m = json_object(), *jcols = json_array(), *rows = json_array();
	char detail[1024] = "";
	size_t dl = 0;
	int fail = 0, warn = 0;
	const struct compat_node **sorted = calloc(n + 1, sizeof *sorted);
	char *failing = calloc(n + 1, 1); /* nodes already counted odd */
	if (!cols || !sorted || !failing)
		abort();
	/* Nodes by name, so a tie's "first node" and the columns' order do
	 * not depend on the order facts arrived. */
	for (size_t i = 0; i < n; i++)
		sorted[i] = &nodes[i];
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 &&
				   strcmp(sorted[k - 1]->name, sorted[k]->name) > 0;
		     k--) {
			const struct compat_node *t = sorted[k];
			sorted[k] = sorted[k - 1];
			sorted[k - 1] = t;
		}
	for (size_t i = 0; i < n; i++) {
		char (*val)[128] = calloc(nf, sizeof *val);
		char (*cmp)[128] = calloc(nf, sizeof *cmp);
		size_t c;
		if (!val || !cmp)
			abort();
		for (size_t f = 0; f < nf; f++) {
			compat_value(sorted[i]->facts, &compat_fields[f], 0,
				     val[f], sizeof val[f]);
			compat_value(sorted[i]->facts, &compat_fields[f], 1,
				     cmp[f], sizeof cmp[f]);
		}
		for (c = 0; c < nc; c++)
			if (!memcmp(cols[c].val, val, nf * sizeof *val))
				break;
		if (c == nc) {
			cols[nc].val = val;
			cols[nc].cmp = cmp;
			nc++;
		} else {
			free(val);
			free(cmp);
		}
		cols[c].names = realloc(cols[c].names,
					(cols[c].n + 1) * sizeof *cols[c].names);
		if (!cols[c].names)
			abort();
		cols[c].names[cols[c].n++] = (char *)sorted[i]->name;
	}
	/* Largest set first; equal sizes in first-name order (stable by
	 * insertion: a simple insertion sort). */
	for (size_t i = 1; i < nc; i++)
		for (size_t k = i; k > 0 && col_cmp(&cols[k - 1], &cols[k]) > 0;
		     k--) {
			struct col t = cols[k];
			cols[k] = cols[k - 1];
			cols[k - 1] = t;
		}
	for (size_t c = 0; c < nc; c++) {
		char *s = fold(cols[c].names, cols[c].n);
		json_array_append_new(jcols, json_pack("{s:s, s:I}", "nodes", s,
						       "n", (json_int_t)cols[c].n));
		free(s);
	}
	for (size_t f = 0; f < nf; f++) {
		const struct compat_field *fd = &compat_fields[f];
		json_t *cells = json_array(), *odd = json_array();
		size_t best = 0, bestn = 0;
		/* The majority in nodes: the columns holding each compared
		 * value, summed; a tie keeps the first (largest, then
		 * first-named) column's value. */
		for (size_t c = 0; c < nc; c++) {
			size_t cnt = 0;
			for (size_t k = 0; k < nc; k++)
				if (!strcmp(cols[k].cmp[f], cols[c].cmp[f]))
					cnt += cols[k].n;
			if (cnt > bestn)
				best = c, bestn = cnt;
		}
		for (size_t c = 0; c < nc; c++) {
			int differs =
			    strcmp(cols[c].cmp[f], cols[best].cmp[f]) != 0;
			json_array_append_new(cells, json_string(cols[c].val[f]));
			json_array_append_new(odd, json_boolean(differs));
		}
		/* The odd nodes of this field: one phrase per value other than
		 * the majority's, its nodes folded (from every column that
		 * holds it), then the majority's nodes folded. */
		if (bestn < n) {
			char **names = calloc(n, sizeof *names), *maj;
			char *done = calloc(nc, 1);
			size_t mk = 0;
			if (!names || !done)
				abort();
			for (size_t c = 0; c < nc; c++)
				if (!strcmp(cols[c].cmp[f], cols[best].cmp[f]))
					for (size_t j = 0; j < cols[c].n; j++)
						names[mk++] = cols[c].names[j];
			qsort(names, mk, sizeof *names, name_cmp);
			maj = fold(names, mk);
			for (size_t c = 0; c < nc && fd->match != COMPAT_SHOWN;
			     c++) {
				size_t k = 0;
				char *cs;
				if (done[c] ||
				    !strcmp(cols[c].cmp[f], cols[best].cmp[f]))
					continue;
				for (size_t c2 = c; c2 < nc; c2++) {
					if (strcmp(cols[c2].cmp[f], cols[c].cmp[f]))
						continue;
					done[c2] = 1;
					for (size_t j = 0; j < cols[c2].n; j++)
						names[k++] = cols[c2].names[j];
				}
				qsort(names, k, sizeof *names, name_cmp);
				cs = fold(names, k);
				if (dl < sizeof detail)
					dl += (size_t)snprintf(
					    detail + dl, sizeof detail - dl,
					    "%s%s: %s %s%s, not the majority's "
					    "%s (%s)",
					    dl ? "; " : "", cs, fd->key,
					    cols[c].val[f],
					    fd->match == COMPAT_MAJOR ? " (major)"
								      : "",
					    cols[best].val[f], maj);
				free(cs);
				/* count each node once over all fields */
				for (size_t j = 0; j < k; j++)
					for (size_t q = 0; q < n; q++)
						if (sorted[q]->name == names[j] &&
						    !failing[q]) {
							failing[q] = 1;
							odd_nodes++;
						}
			}
			if (fd->match != COMPAT_SHOWN)
				fail = 1;
			else
				warn = 1;
			free(maj);
			free(names);
			free(done);
		}
		json_array_append_new(
		    rows, json_pack("{s:s, s:s, s:s, s:o, s:o}", "field", fd->key,
				    "title", fd->title, "match",
				    fd->match == COMPAT_EQUAL   ? "equal"
				    : fd->match == COMPAT_MAJOR ? "major"
								: "shown",
				    "cells", cells, "odd", odd));
	}
	/* Minimums: nodes with the same shortfall folded together. */
	{
		json_t *by = json_object(), *v;
		const char *k;
		for (size_t i = 0; i < n; i++) {
			char why[512];
			json_t *a;
			if (!compat_check_minimums(sorted[i]->facts, family, why,
						   sizeof why))
				continue;
			if (!failing[i]) {
				failing[i] = 1;
				odd_nodes++;
			}
			a = json_object_get(by, why);
			if (!a)
				json_object_set_new(by, why, a = json_array());
			json_array_append_new(a, json_string(sorted[i]->name));
		}
		json_object_foreach(by, k, v)
		{
			char **names = calloc(json_array_size(v) + 1,
					      sizeof *names), *s;
			size_t i;
			json_t *e;
			if (!names)
				abort();
			json_array_foreach(v, i, e) names[i] =
			    (char *)json_string_value(e);
			s = fold(names, json_array_size(v));
			if (dl < sizeof detail)
				dl += (size_t)snprintf(detail + dl,
						       sizeof detail - dl,
						       "%s%s: %s", dl ? "; " : "",
						       s, k);
			free(s);
			free(names);
			fail = 1;
		}
		json_decref(by);
	}
	if (!fail) {
		char *all;
		char **names = calloc(n + 1, sizeof *names);
		if (!names)
			abort();
		for (size_t i = 0; i < n; i++)
			names[i] = (char *)sorted[i]->name;
		all = fold(names, n);
		snprintf(detail, sizeof detail,
			 "%s (%zu): one engine build, Open MPI and driver "
			 "major%s; minimums of %s met",
			 n ? all : "no node", n,
			 warn ? " (other facts differ: see the matrix)" : "",
			 family && *family ? family : "every family");
		free(all);
		free(names);
	}
	json_object_set_new(m, "columns", jcols);
	json_object_set_new(m, "rows", rows);
	json_object_set_new(m, "status",
			    json_string(fail ? "fail" : warn ? "warn" : "pass"));
	json_object_set_new(m, "detail", json_string(detail));
	json_object_set_new(m, "odd", json_integer((json_int_t)odd_nodes));
	if (family && *family)
		json_object_set_new(m, "family", json_string(family));
	for (size_t c = 0; c < nc; c++) {
		free(cols[c].names);
		free(cols[c].val);
		free(cols[c].cmp);
	}
	free(cols);
	free(sorted);
	free(failing);
	return m;
}

int compat_family(const char *model, char *out, size_t cap,
		  struct d0_err *err)
{
	char path[4096];
	struct stat st;
	json_t *doc, *t;
	json_error_t je;
	out[0] = 0;
	if (!model || !*model)
		return 0;
	/* a directory holds config.json; a file is the config itself */
	snprintf(path, sizeof path, "%s", model);
	if (stat(model, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(path, sizeof path, "%s/config.json", model);
	if (stat(path, &st))
		return d0_errf(err, "%s: %s", path, strerror(errno));
	doc = json_load_file(path, 0, &je);
	if (!doc)
		return d0_errf(err, "%s: line %d: %s", path, je.line, je.text);
	t = json_object_get(doc, "model_type");
	if (!json_is_string(t)) {
		json_decref(doc);
		return d0_errf(err, "%s: model_type: expected a string",
			       path);
	}
	snprintf(out, cap, "%s",
		 !strcmp(json_string_value(t), "kimi_k2")
		     ? "deepseek_v3"
		     : json_string_value(t));
	json_decref(doc);
	return 0;
}

void compat_print(FILE *f, json_t *m, int width)
{
	json_t *cols = json_object_get(m, "columns"),
	       *rows = json_object_get(m, "rows"), *r, *c;
	size_t i, k, nc = json_array_size(cols);
	int tw = 5, *cw = calloc(nc + 1, sizeof *cw);
	if (!cw)
		abort();
	json_array_foreach(rows, i, r)
	{
		int l = (int)strlen(json_string_value(json_object_get(r, "title"))) +
			2;
		if (l > tw)
			tw = l;
	}
	json_array_foreach(cols, k, c)
	{
		char head[160];
		int l = snprintf(head, sizeof head, "%s (%lld)",
				 json_string_value(json_object_get(c, "nodes")),
				 (long long)json_integer_value(
				     json_object_get(c, "n")));
		cw[k] = l;
		json_array_foreach(rows, i, r)
		{
			int cl = (int)strlen(json_string_value(json_array_get(
				     json_object_get(r, "cells"), k))) +
				 1;
			if (cl > cw[k])
				cw[k] = cl;
		}
		/* a wide cell (OpenBLAS's config) is cut: at the terminal, or
		 * at 40 columns when several node sets stand side by side */
		if (width > 0 && cw[k] > width - tw - 2)
			cw[k] = width - tw - 2 > 12 ? width - tw - 2 : 12;
		if (nc > 1 && cw[k] > 40)
			cw[k] = 40;
	}
	fprintf(f, "%-*s", tw, "field");
	json_array_foreach(cols, k, c)
	{
		char head[160];
		snprintf(head, sizeof head, "%s (%lld)",
			 json_string_value(json_object_get(c, "nodes")),
			 (long long)json_integer_value(json_object_get(c, "n")));
		fprintf(f, "  %-*.*s", k + 1 < nc ? cw[k] : 0, cw[k], head);
	}
	fputc('\n', f);
	json_array_foreach(rows, i, r)
	{
		const char *match = json_string_value(json_object_get(r, "match"));
		char title[64];
		snprintf(title, sizeof title, "%s%s",
			 json_string_value(json_object_get(r, "title")),
			 strcmp(match, "shown") ? " =" : "");
		fprintf(f, "%-*s", tw, title);
		json_array_foreach(cols, k, c)
		{
			int odd = json_is_true(
			    json_array_get(json_object_get(r, "odd"), k));
			char cell[192];
			/* the mark survives the cut: the value gives way */
			snprintf(cell, sizeof cell, "%.*s%s",
				 odd ? cw[k] - 1 : cw[k],
				 json_string_value(json_array_get(
				     json_object_get(r, "cells"), k)),
				 odd ? "*" : "");
			fprintf(f, "  %-*.*s", k + 1 < nc ? cw[k] : 0, cw[k],
				cell);
		}
		fputc('\n', f);
	}
	fprintf(f, "facts.compat: %s: %s\n",
		json_string_value(json_object_get(m, "status")),
		json_string_value(json_object_get(m, "detail")));
	free(cw);
}
