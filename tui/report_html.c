/*
 * report_html.c - the report document as one self-contained HTML file:
 * inline CSS, inline SVG charts drawn here (bus bandwidth against message
 * size, memory over time per card, error per layer), no scripts and no
 * external resources, so the file opens the same from a mail attachment
 * on an air-gapped machine.
 *
 * Every string that comes from the session goes through html_esc (text
 * and attribute values alike): a step's detail is data, never markup.
 */
#include "report.h"

#include <math.h>
#include <string.h>

#include "console.h"

static void html_esc(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		case '\'':
			fputs("&#39;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

static void html_val(FILE *f, json_t *v)
{
	char buf[1024];
	if (json_is_string(v)) {
		html_esc(f, json_string_value(v));
		return;
	}
	report_fmt_num(v, buf, sizeof buf);
	html_esc(f, buf);
}

static void not_recorded(FILE *f)
{
	fputs("<p class=\"nr\">not recorded</p>\n", f);
}

/* Columns whose numbers are bytes: shown in B/KiB/MiB/GiB, never as
 * 1.34218e+08. */
static int is_bytes_key(const char *k)
{
	static const char *const keys[] = {"bytes", "peak", "budget",
					   "mem_bytes", NULL};
	for (int i = 0; keys[i]; i++)
		if (!strcmp(k, keys[i]))
			return 1;
	return 0;
}

static void html_table(FILE *f, json_t *rows, const char *const *head,
		       const char *const *keys)
{
	json_t *r;
	size_t i;
	if (!json_array_size(rows)) {
		not_recorded(f);
		return;
	}
	fputs("<table><tr>", f);
	for (int k = 0; head[k]; k++) {
		fputs("<th>", f);
		html_esc(f, head[k]);
		fputs("</th>", f);
	}
	fputs("</tr>\n", f);
	json_array_foreach(rows, i, r)
	{
		fputs("<tr>", f);
		for (int k = 0; keys[k]; k++) {
			json_t *v = json_object_get(r, keys[k]);
			const char *st = json_string_value(v);
			if (!strcmp(keys[k], "status") && st) {
				fputs("<td class=\"st-", f);
				html_esc(f, st);
				fputs("\">", f);
			} else {
				fputs(json_is_number(v) ? "<td class=\"n\">"
							: "<td>",
				      f);
			}
			if (json_is_number(v) && is_bytes_key(keys[k])) {
				char b[32];
				report_fmt_bytes(json_number_value(v), b,
						 sizeof b);
				html_esc(f, b);
			} else if (json_is_number(v) &&
				   !strcmp(keys[k], "fraction")) {
				fprintf(f, "%.1f%%",
					100 * json_number_value(v));
			} else {
				html_val(f, v);
			}
			fputs("</td>", f);
		}
		fputs("</tr>\n", f);
	}
	fputs("</table>\n", f);
}

static void html_json(FILE *f, json_t *v)
{
	char *s;
	if (!v || json_is_null(v)) {
		not_recorded(f);
		return;
	}
	s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY |
			      JSON_PRESERVE_ORDER);
	fputs("<pre>", f);
	html_esc(f, s ? s : "");
	fputs("</pre>\n", f);
	free(s);
}

/* ------------------------------------------------------------------ charts */

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c",
				      "#ff7f0e", "#9467bd", "#8c564b",
				      "#e377c2", "#17becf"};

/* Plot area inside a 720 x 320 drawing. */
enum { CW = 720, CH = 320, PL = 70, PR = 170, PT = 20, PB = 50 };

struct chart {
	double xmin, xmax, ymin, ymax; /* in plot units (log already taken) */
};

static double cx(const struct chart *c, double x)
{
	return PL + (x - c->xmin) / (c->xmax - c->xmin) * (CW - PL - PR);
}

static double cy(const struct chart *c, double y)
{
	return CH - PB - (y - c->ymin) / (c->ymax - c->ymin) * (CH - PT - PB);
}

static void chart_open(FILE *f, const char *id, const char *title,
		       const char *xlabel, const char *ylabel)
{
	fprintf(f,
		"<svg id=\"%s\" class=\"chart\" viewBox=\"0 0 %d %d\" "
		"width=\"%d\" height=\"%d\" role=\"img\">\n<title>",
		id, CW, CH, CW, CH);
	html_esc(f, title);
	fprintf(f,
		"</title>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
		"class=\"plot\"/>\n",
		PL, PT, CW - PL - PR, CH - PT - PB);
	fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"axis\" "
		   "text-anchor=\"middle\">",
		(PL + CW - PR) / 2, CH - 8);
	html_esc(f, xlabel);
	fprintf(f,
		"</text>\n<text x=\"14\" y=\"%d\" class=\"axis\" "
		"text-anchor=\"middle\" transform=\"rotate(-90 14 %d)\">",
		(PT + CH - PB) / 2, (PT + CH - PB) / 2);
	html_esc(f, ylabel);
	fputs("</text>\n", f);
}

static void xtick(FILE *f, const struct chart *c, double x, const char *lab)
{
	double px = cx(c, x);
	fprintf(f,
		"<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
		"class=\"grid\"/><text x=\"%.1f\" y=\"%d\" class=\"tick\" "
		"text-anchor=\"middle\">",
		px, PT, px, CH - PB, px, CH - PB + 14);
	html_esc(f, lab);
	fputs("</text>\n", f);
}

static void ytick(FILE *f, const struct chart *c, double y, const char *lab)
{
	double py = cy(c, y);
	fprintf(f,
		"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
		"class=\"grid\"/><text x=\"%d\" y=\"%.1f\" class=\"tick\" "
		"text-anchor=\"end\">",
		PL, py, CW - PR, py, PL - 4, py + 4);
	html_esc(f, lab);
	fputs("</text>\n", f);
}

/* Linear y ticks: about five at 1/2/5 steps. */
static void yticks_linear(FILE *f, const struct chart *c, double scale,
			  const char *unit)
{
	double span = c->ymax - c->ymin, step = pow(10, floor(log10(span / 5)));
	char lab[64];
	if (span / step > 10)
		step *= span / step > 25 ? 5 : 2;
	for (double y = ceil(c->ymin / step) * step; y <= c->ymax + 1e-12;
	     y += step) {
		snprintf(lab, sizeof lab, "%g%s", y / scale, unit);
		ytick(f, c, y, lab);
	}
}

/* Memory ticks: 1/2/5 steps in the chosen unit, so the labels read
 * 16 MiB, 32 MiB ... rather than 16.7772 MiB. */
static void yticks_mem(FILE *f, const struct chart *c, double scale,
		       const char *unit)
{
	double span = (c->ymax - c->ymin) / scale,
	       step = pow(10, floor(log10(span / 5)));
	char lab[64];
	if (span / step > 10)
		step *= span / step >25 ? 5 : 2;
	if (step < 1 && scale > 1)
		step = 1;
	for (double y = ceil(c->ymin / scale / step) * step;
	     y * scale <= c->ymax + 1e-12; y += step) {
		snprintf(lab, sizeof lab, "%g%s", y, unit);
		ytick(f, c, y * scale, lab);
	}
}

static void legend(FILE *f, int i, const char *name)
{
	int y = PT + 14 + 16 * i;
	fprintf(f,
		"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
		"stroke-width=\"2\"/><text x=\"%d\" y=\"%d\" class=\"legend\">",
		CW - PR + 10, y - 4, CW - PR + 28, y - 4, palette[i % 8],
		CW - PR + 32, y);
	html_esc(f, name);
	fputs("</text>\n", f);
}

/* One series: xs/ys in plot units, n points. */
static void polyline(FILE *f, const struct chart *c, int i, const char *name,
		     const double *xs, const double *ys, size_t n, int dots)
{
	fputs("<polyline class=\"series\" data-series=\"", f);
	html_esc(f, name);
	fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
		   "points=\"",
		palette[i % 8]);
	for (size_t k = 0; k < n; k++)
		fprintf(f, "%s%.1f,%.1f", k ? " " : "", cx(c, xs[k]),
			cy(c, ys[k]));
	fputs("\"/>\n", f);
	for (size_t k = 0; dots && k < n; k++)
		fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" "
			   "fill=\"%s\"/>\n",
			cx(c, xs[k]), cy(c, ys[k]), palette[i % 8]);
	legend(f, i, name);
}

/* Series for the charts: name -> [[x, y]...], in first-seen order. */
static void add_point(json_t *series, const char *name, double x, double y)
{
	json_t *s = json_object_get(series, name);
	if (!s) {
		s = json_array();
		json_object_set_new(series, name, s);
	}
	json_array_append_new(s, json_pack("[f,f]", x, y));
}

static void bounds(json_t *series, struct chart *c)
{
	const char *k;
	json_t *s, *p;
	size_t i;
	c->xmin = c->ymin = INFINITY;
	c->xmax = c->ymax = -INFINITY;
	json_object_foreach(series, k, s) json_array_foreach(s, i, p)
	{
		double x = json_real_value(json_array_get(p, 0));
		double y = json_real_value(json_array_get(p, 1));
		c->xmin = fmin(c->xmin, x);
		c->xmax = fmax(c->xmax, x);
		c->ymin = fmin(c->ymin, y);
		c->ymax = fmax(c->ymax, y);
	}
	if (!(c->xmax > c->xmin)) {
		c->xmin -= 1;
		c->xmax += 1;
	}
}

static void draw_series(FILE *f, const struct chart *c, json_t *series,
			int dots)
{
	const char *k;
	json_t *s;
	int i = 0;
	json_object_foreach(series, k, s)
	{
		size_t n = json_array_size(s), j;
		double *xs = calloc(n + 1, sizeof *xs),
		       *ys = calloc(n + 1, sizeof *ys);
		json_t *p;
		json_array_foreach(s, j, p)
		{
			xs[j] = json_real_value(json_array_get(p, 0));
			ys[j] = json_real_value(json_array_get(p, 1));
		}
		polyline(f, c, i++, k, xs, ys, n, dots);
		free(xs);
		free(ys);
	}
}

/* Bus bandwidth against message size: log2 x, one line per op (and group
 * when not world; rows of several ranks or nodes at one size averaged). */
static void chart_busbw(FILE *f, json_t *comm)
{
	json_t *sum = json_object(), *series = json_object(), *r;
	const char *k;
	size_t i;
	struct chart c;
	char lab[64];
	json_array_foreach(comm, i, r)
	{
		const char *op = json_string_value(json_object_get(r, "op"));
		const char *g = json_string_value(json_object_get(r, "group"));
		json_t *b = json_object_get(r, "bytes"),
		       *bw = json_object_get(r, "busbw"), *acc;
		char key[300];
		if (!op || !json_is_number(b) || !json_is_number(bw) ||
		    json_number_value(b) <= 0)
			continue;
		snprintf(key, sizeof key, "%s%s%s\x1f%.0f", op,
			 g && strcmp(g, "world") ? " / " : "",
			 g && strcmp(g, "world") ? g : "",
			 json_number_value(b));
		if (!(acc = json_object_get(sum, key))) {
			acc = json_pack("[f,f]", 0.0, 0.0);
			json_object_set_new(sum, key, acc);
		}
		json_array_set_new(acc, 0,
				   json_real(json_real_value(json_array_get(
						 acc, 0)) +
					     json_number_value(bw)));
		json_array_set_new(
		    acc, 1,
		    json_real(json_real_value(json_array_get(acc, 1)) + 1));
	}
	json_t *acc;
	json_object_foreach(sum, k, acc)
	{
		char name[300];
		const char *sep = strchr(k, '\x1f');
		snprintf(name, sizeof name, "%.*s", (int)(sep - k), k);
		add_point(series, name, log2(atof(sep + 1)),
			  json_real_value(json_array_get(acc, 0)) /
			      json_real_value(json_array_get(acc, 1)));
	}
	json_decref(sum);
	/* Points in size order within each line. */
	json_t *s;
	json_object_foreach(series, k, s)
	{
		size_t n = json_array_size(s);
		for (size_t a = 1; a < n; a++)
			for (size_t b2 = a; b2 > 0; b2--) {
				json_t *p = json_array_get(s, b2 - 1),
				       *q = json_array_get(s, b2);
				if (json_real_value(json_array_get(p, 0)) <=
				    json_real_value(json_array_get(q, 0)))
					break;
				json_incref(p);
				json_array_set(s, b2 - 1, q);
				json_array_set_new(s, b2, p);
			}
	}
	if (!json_object_size(series)) {
		not_recorded(f);
		json_decref(series);
		return;
	}
	bounds(series, &c);
	c.xmin = floor(c.xmin);
	c.xmax = ceil(c.xmax);
	c.ymin = 0;
	c.ymax = c.ymax > 0 ? c.ymax * 1.1 : 1;
	chart_open(f, "chart-busbw", "bus bandwidth against message size",
		   "message size (log2)", "busbw GB/s");
	int step = (int)ceil((c.xmax - c.xmin) / 10);
	for (double x = c.xmin; x <= c.xmax; x += step > 0 ? step : 1) {
		report_fmt_bytes(pow(2, x), lab, sizeof lab);
		xtick(f, &c, x, lab);
	}
	yticks_linear(f, &c, 1, "");
	draw_series(f, &c, series, 1);
	fputs("</svg>\n", f);
	json_decref(series);
}

/* mem.used over time, one line per card. */
static void chart_memory(FILE *f, json_t *mem)
{
	json_t *series = json_object(), *s, *p;
	size_t i, j;
	struct chart c;
	json_array_foreach(json_object_get(mem, "series"), i, s)
	{
		char name[300];
		snprintf(name, sizeof name, "%s card %lld",
			 json_string_value(json_object_get(s, "node")),
			 (long long)json_integer_value(
			     json_object_get(s, "card")));
		json_array_foreach(json_object_get(s, "points"), j, p)
		    add_point(series, name,
			      json_number_value(json_array_get(p, 0)),
			      json_number_value(json_array_get(p, 1)));
	}
	if (!json_object_size(series)) {
		not_recorded(f);
		json_decref(series);
		return;
	}
	bounds(series, &c);
	c.ymin = 0;
	/* The card budget (the largest card's: one budget per card kind)
	 * drawn as a dashed line, inside the plot. */
	double budget = 0;
	json_array_foreach(json_object_get(mem, "cards"), i, s)
	{
		json_t *b = json_object_get(s, "budget");
		if (json_is_number(b))
			budget = fmax(budget, json_number_value(b));
	}
	if (budget > c.ymax)
		c.ymax = budget;
	c.ymax = c.ymax > 0 ? c.ymax * 1.1 : 1;
	double scale = 1;
	const char *unit = " B";
	if (c.ymax >= 1 << 30) {
		scale = 1 << 30;
		unit = " GiB";
	} else if (c.ymax >= 1 << 20) {
		scale = 1 << 20;
		unit = " MiB";
	} else if (c.ymax >= 1 << 10) {
		scale = 1 << 10;
		unit = " KiB";
	}
	chart_open(f, "chart-memory", "memory over time per card",
		   "seconds since the first event", "mem.used");
	double span = c.xmax - c.xmin,
	       step = pow(10, floor(log10(span / 5)));
	if (span / step > 10)
		step *= span / step > 25 ? 5 : 2;
	for (double x = ceil(c.xmin / step) * step; x <= c.xmax + 1e-12;
	     x += step) {
		char lab[32];
		snprintf(lab, sizeof lab, "%g", x);
		xtick(f, &c, x, lab);
	}
	yticks_mem(f, &c, scale, unit);
	draw_series(f, &c, series, 0);
	if (budget > 0) {
		char lab[32];
		report_fmt_bytes(budget, lab, sizeof lab);
		fprintf(f,
			"<line class=\"budget\" x1=\"%d\" y1=\"%.1f\" "
			"x2=\"%d\" y2=\"%.1f\" stroke=\"#a01010\" "
			"stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>"
			"<text x=\"%d\" y=\"%.1f\" class=\"tick\">budget ",
			PL, cy(&c, budget), CW - PR, cy(&c, budget), PL + 4,
			cy(&c, budget) - 4);
		html_esc(f, lab);
		fputs("</text>\n", f);
	}
	fputs("</svg>\n", f);
	json_decref(series);
}

/* max_rel per layer on a log scale, one line per (node, stage). */
static void chart_layers(FILE *f, json_t *num)
{
	json_t *series = json_object(), *counts = json_object(), *r,
	       *names = json_array();
	size_t i;
	struct chart c;
	json_array_foreach(num, i, r)
	{
		const char *lv = json_string_value(json_object_get(r, "level"));
		json_t *mr = json_object_get(r, "max_rel");
		char name[300];
		if (!lv || strcmp(lv, "layer") || !json_is_number(mr) ||
		    json_number_value(mr) <= 0)
			continue;
		snprintf(name, sizeof name, "%s %s",
			 json_string_value(json_object_get(r, "node")),
			 json_is_string(json_object_get(r, "stage_id"))
			     ? json_string_value(json_object_get(r, "stage_id"))
			     : "-");
		json_int_t k = json_integer_value(json_object_get(counts, name));
		json_object_set_new(counts, name, json_integer(k + 1));
		if ((size_t)k >= json_array_size(names))
			json_array_append(names, json_object_get(r, "name"));
		add_point(series, name, (double)k,
			  log10(json_number_value(mr)));
	}
	json_decref(counts);
	if (!json_object_size(series)) {
		not_recorded(f);
		json_decref(series);
		json_decref(names);
		return;
	}
	bounds(series, &c);
	c.ymin = floor(c.ymin);
	c.ymax = ceil(c.ymax);
	if (c.ymax <= c.ymin)
		c.ymax = c.ymin + 1;
	c.xmin = -0.5;
	c.xmax = (double)json_array_size(names) - 0.5;
	chart_open(f, "chart-layers", "error per layer (max relative, log)",
		   "layer", "max_rel");
	size_t nl = json_array_size(names),
	       step = nl > 16 ? (nl + 15) / 16 : 1;
	for (size_t k = 0; k < nl; k += step) {
		const char *nm = json_string_value(json_array_get(names, k));
		xtick(f, &c, (double)k, nm ? nm : "?");
	}
	for (double y = c.ymin; y <= c.ymax; y += 1) {
		char lab[32];
		snprintf(lab, sizeof lab, "1e%.0f", y);
		ytick(f, &c, y, lab);
	}
	draw_series(f, &c, series, 1);
	fputs("</svg>\n", f);
	json_decref(series);
	json_decref(names);
}

/* Fine-tuning: one figure against the step, a line per run ("stage
 * node"); log2: the y axis in powers of two (the loss scale halves and
 * doubles).  Skipped steps are red crosses on the x axis. */
static void chart_train(FILE *f, json_t *runs, const char *key,
			const char *id, const char *title, const char *ylabel,
			int log2y)
{
	json_t *series = json_object(), *skips = json_array(), *r, *p;
	size_t i, k;
	struct chart c;
	json_array_foreach(runs, i, r)
	{
		char name[300];
		snprintf(name, sizeof name, "%s %s",
			 json_is_string(json_object_get(r, "stage_id"))
			     ? json_string_value(json_object_get(r, "stage_id"))
			     : "-",
			 json_string_value(json_object_get(r, "node")));
		json_array_foreach(json_object_get(r, "points"), k, p)
		{
			json_t *v = json_object_get(p, key);
			double x = (double)json_integer_value(
			    json_object_get(p, "step"));
			if (json_integer_value(json_object_get(p, "skipped")))
				json_array_append_new(skips, json_real(x));
			/* a skipped step's gradient norm overflowed */
			if (!json_is_number(v) ||
			    (log2y && !(json_number_value(v) > 0)) ||
			    (!strcmp(key, "grad_norm") &&
			     json_integer_value(json_object_get(p, "skipped"))))
				continue;
			add_point(series, name, x,
				  log2y ? log2(json_number_value(v))
					: json_number_value(v));
		}
	}
	if (!json_object_size(series)) {
		not_recorded(f);
		json_decref(series);
		json_decref(skips);
		return;
	}
	bounds(series, &c);
	if (log2y) {
		c.ymin = floor(c.ymin) - 1;
		c.ymax = ceil(c.ymax) + 1;
	} else {
		double pad = (c.ymax - c.ymin) * 0.05;
		if (!(pad > 0))
			pad = fabs(c.ymax) * 0.05 + 1e-9;
		c.ymin -= pad;
		c.ymax += pad;
	}
	chart_open(f, id, title, "step", ylabel);
	{
		double span = c.xmax - c.xmin,
		       st = span > 10 ? ceil(span / 10) : 1;
		char lab[32];
		for (double x = ceil(c.xmin); x <= c.xmax; x += st) {
			snprintf(lab, sizeof lab, "%g", x);
			xtick(f, &c, x, lab);
		}
	}
	if (log2y) {
		int st = c.ymax - c.ymin > 8 ? 2 : 1;
		for (double y = c.ymin; y <= c.ymax; y += st) {
			char lab[32];
			snprintf(lab, sizeof lab, "2^%.0f", y);
			ytick(f, &c, y, lab);
		}
	} else {
		yticks_linear(f, &c, 1, "");
	}
	json_array_foreach(skips, i, p)
	{
		double x = cx(&c, json_real_value(p)), y = CH - PB;
		fprintf(f,
			"<path class=\"skipped\" d=\"M%.1f %.1fl8 8m0 -8l-8 8\" "
			"stroke=\"#d62728\" stroke-width=\"2\"><title>skipped "
			"step %g</title></path>\n",
			x - 4, y - 4, json_real_value(p));
	}
	draw_series(f, &c, series, 1);
	fputs("</svg>\n", f);
	json_decref(series);
	json_decref(skips);
}

/* The step time split: per run a horizontal bar of its mean forward,
 * backward, optimizer and communication seconds. */
static void chart_train_split(FILE *f, json_t *runs)
{
	static const char *const parts[] = {"t_fwd_s", "t_bwd_s", "t_opt_s",
					    "t_comm_s"};
	static const char *const names[] = {"forward", "backward", "optimizer",
					    "communication"};
	size_t n = json_array_size(runs), i;
	double mx = 0;
	json_t *r;
	int h = 40 + 26 * (int)n + 40, w = 720, pl = 200, pr = 20;
	json_array_foreach(runs, i, r) if (json_number_value(
	    json_object_get(r, "step_s")) > mx) mx =
	    json_number_value(json_object_get(r, "step_s"));
	if (!(mx > 0)) {
		not_recorded(f);
		return;
	}
	fprintf(f,
		"<svg id=\"chart-train-split\" class=\"chart\" viewBox=\"0 0 "
		"%d %d\" width=\"%d\" height=\"%d\" role=\"img\">\n<title>"
		"step time split (mean seconds per step)</title>\n",
		w, h, w, h);
	for (int p = 0; p < 4; p++)
		fprintf(f,
			"<rect x=\"%d\" y=\"10\" width=\"12\" height=\"12\" "
			"fill=\"%s\"/><text x=\"%d\" y=\"20\" "
			"class=\"legend\">%s</text>\n",
			pl + 130 * p, palette[p], pl + 130 * p + 16, names[p]);
	json_array_foreach(runs, i, r)
	{
		double x = pl, s = json_number_value(json_object_get(r, "step_s"));
		int y = 40 + 26 * (int)i;
		fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" "
			   "class=\"tick\">",
			pl - 6, y + 15);
		html_esc(f, json_is_string(json_object_get(r, "stage_id"))
				? json_string_value(json_object_get(r, "stage_id"))
				: "-");
		fputs(" ", f);
		html_esc(f, json_string_value(json_object_get(r, "layout")));
		fputs("</text>\n", f);
		if (!(s > 0))
			continue;
		for (int p = 0; p < 4; p++) {
			double t = json_number_value(json_object_get(r, parts[p]));
			double wd = t / mx * (w - pl - pr - 80);
			if (!(wd > 0))
				continue;
			fprintf(f,
				"<rect class=\"split\" data-part=\"%s\" "
				"x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
				"height=\"20\" fill=\"%s\"><title>%s %.4g s "
				"(%.0f%%)</title></rect>\n",
				names[p], x, y, wd, palette[p], names[p], t,
				100 * t / s);
			x += wd;
		}
		fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\">%.4g s"
			   "</text>\n",
			x + 4, y + 15, s);
	}
	fputs("</svg>\n", f);
}

/* load's levels against concurrency (log2 x): the latency percentiles on
 * a log y (chart-service-latency), output tokens/s on a linear one
 * (chart-service-throughput); one line per figure, prefixed with the
 * stage when the session has several load stages. */
static void chart_service(FILE *f, json_t *svc)
{
	static const char *const keys[] = {"ttft_p50_ms", "ttft_p99_ms",
					   "tpot_p50_ms", "tpot_p99_ms",
					   "e2e_p50_ms",  "e2e_p99_ms"};
	static const char *const names[] = {"TTFT p50", "TTFT p99",
					    "TPOT p50", "TPOT p99",
					    "e2e p50",	"e2e p99"};
	json_t *lat = json_object(), *tps = json_object(), *r, *ticks;
	const char *first = NULL;
	int many = 0;
	size_t i;
	struct chart c;
	json_array_foreach(svc, i, r) {
		const char *st = json_string_value(json_object_get(r, "stage_id"));
		if (!st)
			st = "-";
		if (!first)
			first = st;
		else if (strcmp(first, st))
			many = 1;
	}
	ticks = json_object();
	json_array_foreach(svc, i, r) {
		const char *st = json_string_value(json_object_get(r, "stage_id"));
		json_t *cc = json_object_get(r, "concurrency"), *t;
		char name[300], tk[32];
		double x;
		if (!json_is_number(cc) || json_number_value(cc) < 1)
			continue;
		x = log2(json_number_value(cc));
		snprintf(tk, sizeof tk, "%g", json_number_value(cc));
		json_object_set_new(ticks, tk, json_real(x));
		for (int k = 0; k < 6; k++) {
			json_t *y = json_object_get(r, keys[k]);
			if (!json_is_number(y) || json_number_value(y) <= 0)
				continue;
			snprintf(name, sizeof name, "%s%s%s", many && st ? st : "",
				 many && st ? " " : "", names[k]);
			add_point(lat, name, x, log10(json_number_value(y)));
		}
		t = json_object_get(r, "tokens_per_s");
		if (json_is_number(t)) {
			snprintf(name, sizeof name, "%s%stokens/s",
				 many && st ? st : "", many && st ? " " : "");
			add_point(tps, name, x, json_number_value(t));
		}
	}
	if (!json_object_size(lat) && !json_object_size(tps)) {
		not_recorded(f);
		json_decref(lat);
		json_decref(tps);
		json_decref(ticks);
		return;
	}
	if (json_object_size(lat)) {
		const char *k;
		json_t *x;
		bounds(lat, &c);
		c.ymin = floor(c.ymin);
		c.ymax = ceil(c.ymax);
		if (c.ymax <= c.ymin)
			c.ymax = c.ymin + 1;
		chart_open(f, "chart-service-latency",
			   "latency against concurrency (log)",
			   "concurrency (log2)", "latency ms");
		json_object_foreach(ticks, k, x) xtick(f, &c, json_real_value(x), k);
		for (double y = c.ymin; y <= c.ymax; y += 1) {
			char lab[32];
			snprintf(lab, sizeof lab, "%g", pow(10, y));
			ytick(f, &c, y, lab);
		}
		draw_series(f, &c, lat, 1);
		fputs("</svg>\n", f);
	}
	if (json_object_size(tps)) {
		const char *k;
		json_t *x;
		bounds(tps, &c);
		c.ymin = 0;
		c.ymax = c.ymax > 0 ? c.ymax * 1.1 : 1;
		chart_open(f, "chart-service-throughput",
			   "output tokens/s against concurrency",
			   "concurrency (log2)", "tokens/s");
		json_object_foreach(ticks, k, x) xtick(f, &c, json_real_value(x), k);
		yticks_linear(f, &c, 1, "");
		draw_series(f, &c, tps, 1);
		fputs("</svg>\n", f);
	}
	json_decref(lat);
	json_decref(tps);
	json_decref(ticks);
}

/* ---------------------------------------------------------------- sections */

static const char css[] =
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;"
    "max-width:1100px}\n"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:90%}\n"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;"
    "vertical-align:top}\n"
    "th{background:#f0f0f0}td.n{text-align:right;"
    "font-variant-numeric:tabular-nums}\n"
    "td.st-pass{background:#d9f2d9}td.st-fail{background:#f8d0d0}\n"
    "td.st-warn{background:#fcebc0}td.st-skip,td.st-pending,"
    "td.st-running{background:#eee}\n"
    "td.st-notrun{background:#f3e3cf}\n"
    ".nr{color:#888;font-style:italic}\n"
    "pre{background:#f6f6f6;padding:0.6em;overflow:auto;font-size:85%}\n"
    ".verdict-go{color:#176117}.verdict-no-go{color:#a01010}\n"
    "svg.chart{display:block;margin:0.5em 0 1.5em}\n"
    "svg .plot{fill:#fafafa;stroke:#999}svg .grid{stroke:#e4e4e4}\n"
    "svg text{font-size:11px;fill:#333}svg .axis{font-size:12px}\n"
    ".verdict{border:3px solid #888;border-radius:8px;padding:0.4em 1em;"
    "margin-bottom:1em}.verdict .big{font-size:3em;font-weight:bold}\n"
    ".v-go{border-color:#176117;background:#e6f6e6}.v-go .big{color:#176117}\n"
    ".v-no-go{border-color:#a01010;background:#fbe4e4}"
    ".v-no-go .big{color:#a01010}\n"
    ".v-incomplete{border-color:#b07000;background:#fdf1dc}"
    ".v-incomplete .big{color:#b07000}\n"
    "details summary{cursor:pointer;margin:0.5em 0}\n";

/* The verdict, first thing of the body and large: GO, NO-GO or
 * INCOMPLETE (no verdict: the playbook never reached its end), then the
 * failed and the skipped items each on their own line. */
static void h_verdict(FILE *f, json_t *s)
{
	const char *v = json_string_value(json_object_get(s, "verdict"));
	const char *big = !v ? "INCOMPLETE"
			  : !strcmp(v, "go")	? "GO"
			  : !strcmp(v, "no-go") ? "NO-GO"
						: "INCOMPLETE";
	const char *cls = !strcmp(big, "GO")	  ? "go"
			  : !strcmp(big, "NO-GO") ? "no-go"
						  : "incomplete";
	static const char *const lists[] = {"failed", "skipped"};
	fprintf(f, "<div id=\"verdict\" class=\"verdict v-%s\">"
		   "<div class=\"big\">%s</div>\n", cls, big);
	if (json_integer_value(json_object_get(s, "simulated")) > 0)
		fprintf(f, "<p class=\"simulated\"><b>SIMULATED:</b> %lld "
			   "nodes' agents simulated the work (day0-agent "
			   "--sim-model): the figures are a model's, not a "
			   "cluster's.</p>\n",
			(long long)json_integer_value(
			    json_object_get(s, "simulated")));
	for (int k = 0; k < 2; k++) {
		json_t *a = json_object_get(s, lists[k]), *n;
		size_t i;
		if (!json_array_size(a))
			continue;
		fprintf(f, "<p class=\"%s\"><b>%s:</b> ", lists[k],
			lists[k]);
		json_array_foreach(a, i, n)
		{
			if (i)
				fputs(", ", f);
			html_esc(f, json_string_value(n));
		}
		fputs("</p>\n", f);
	}
	fputs("</div>\n", f);
}

/* The operator's markers, warnings, cancels, reruns and the stages that
 * did not end done, in time order. */
static void h_timeline(FILE *f, json_t *rows)
{
	json_t *r;
	size_t i;
	fputs("<h2 id=\"timeline\">Timeline (markers, cancels, reruns, "
	      "failures)</h2>\n",
	      f);
	if (!json_array_size(rows)) {
		fputs("<p class=\"nr\">no markers, cancels, reruns or "
		      "failures</p>\n",
		      f);
		return;
	}
	fputs("<table><tr><th>time</th><th>+s</th><th>kind</th>"
	      "<th>stage</th><th>text</th></tr>\n",
	      f);
	json_array_foreach(rows, i, r)
	{
		char t[32];
		const char *k = json_string_value(json_object_get(r, "kind"));
		console_fmt_time(json_integer_value(json_object_get(r, "ts")), t,
				 sizeof t);
		fprintf(f, "<tr><td>%s</td><td class=\"n\">%.1f</td><td "
			   "class=\"k-",
			t, json_number_value(json_object_get(r, "t_s")));
		html_esc(f, k ? k : "-");
		fputs("\">", f);
		html_esc(f, k ? k : "-");
		fputs("</td><td>", f);
		html_val(f, json_object_get(r, "stage_id"));
		fputs("</td><td>", f);
		html_val(f, json_object_get(r, "text"));
		fputs("</td></tr>\n", f);
	}
	fputs("</table>\n", f);
}

static void h_session(FILE *f, json_t *s)
{
	char t0[32], t1[32];
	json_t *n;
	size_t i;
	const char *v = json_string_value(json_object_get(s, "verdict"));
	console_fmt_time(json_integer_value(json_object_get(s, "started")), t0,
			 sizeof t0);
	console_fmt_time(json_integer_value(json_object_get(s, "finished")),
			 t1, sizeof t1);
	fputs("<h1>day0 report: ", f);
	html_esc(f, json_string_value(json_object_get(s, "name")));
	fputs("</h1>\n<table>\n<tr><th>file</th><td>", f);
	html_esc(f, json_string_value(json_object_get(s, "file")));
	fputs("</td></tr>\n<tr><th>model</th><td>", f);
	html_esc(f, json_is_string(json_object_get(s, "model"))
			? json_string_value(json_object_get(s, "model"))
			: "not recorded");
	fprintf(f,
		"</td></tr>\n<tr><th>started</th><td>%s</td></tr>\n"
		"<tr><th>%s</th><td>%s (%.1f s)</td></tr>\n"
		"<tr><th>nodes</th><td>",
		t0,
		json_is_false(json_object_get(s, "finished_recorded"))
		    ? "never finished, last event"
		    : "finished",
		t1, json_number_value(json_object_get(s, "duration_s")));
	json_array_foreach(json_object_get(s, "nodes"), i, n)
	{
		html_esc(f, json_string_value(n));
		fputc(' ', f);
	}
	fprintf(f, "</td></tr>\n<tr><th>events</th><td>%lld</td></tr>\n",
		(long long)json_integer_value(json_object_get(s, "events")));
	fprintf(f, "<tr><th>verdict</th><td class=\"verdict-%s\"><b>%s</b>",
		v ? v : "unfinished", v ? v : "unfinished");
	fputs("</td></tr>\n</table>\n", f);
}

static void h_items(FILE *f, json_t *cl, int rehearsal)
{
	json_t *it, *e;
	size_t i, j;
	fputs("<table><tr><th>item</th><th>status</th><th>stage</th>"
	      "<th>node</th><th>evidence</th><th>detail</th><th>value</th>"
	      "<th>threshold</th></tr>\n",
	      f);
	json_array_foreach(cl, i, it)
	{
		json_t *ev = json_object_get(it, "evidence");
		size_t n = json_array_size(ev);
		const char *st =
		    json_string_value(json_object_get(it, "status"));
		const char *name =
		    json_string_value(json_object_get(it, "item"));
		/* resources.peak's value and threshold are bytes (the peak
		 * and the card budget). */
		int bytes_item = name && strlen(name) >= 14 &&
				 !strcmp(name + strlen(name) - 14,
					 "resources.peak");
		if (json_is_true(json_object_get(it, "rehearsal")) != rehearsal)
			continue;
		fprintf(f, "<tr><td rowspan=\"%zu\">", n ? n : 1);
		html_val(f, json_object_get(it, "item"));
		fprintf(f, "</td><td rowspan=\"%zu\" class=\"st-%s\">", n ? n : 1,
			!strcmp(st, "not run") ? "notrun" : st);
		html_esc(f, st);
		fputs("</td>", f);
		if (!n)
			fputs("<td colspan=\"6\"></td></tr>\n", f);
		json_array_foreach(ev, j, e)
		{
			static const char *const keys[] = {
			    "stage", "node",  "status", "detail",
			    "value", "threshold", NULL};
			if (j)
				fputs("<tr>", f);
			for (int k = 0; keys[k]; k++) {
				json_t *x = json_object_get(e, keys[k]);
				fputs("<td>", f);
				/* A console check has no stage: "-". */
				if (json_is_string(x) &&
				    !*json_string_value(x))
					fputc('-', f);
				else if (bytes_item && json_is_number(x) &&
					 json_number_value(x) > 0 &&
					 (!strcmp(keys[k], "value") ||
					  !strcmp(keys[k], "threshold"))) {
					char b[32];
					report_fmt_bytes(json_number_value(x),
							 b, sizeof b);
					html_esc(f, b);
				} else
					html_val(f, x);
				fputs("</td>", f);
			}
			fputs("</tr>\n", f);
		}
	}
	fputs("</table>\n", f);
}

static void h_checklist(FILE *f, json_t *cl)
{
	json_t *it;
	size_t i;
	int rehearsal = 0;
	fputs("<h2>Checklist</h2>\n", f);
	h_items(f, cl, 0);
	json_array_foreach(cl, i, it) rehearsal |=
	    json_is_true(json_object_get(it, "rehearsal"));
	if (rehearsal) {
		fputs("<h3>Rehearsal (a shape-validation model: never the "
		      "real model's evidence)</h3>\n",
		      f);
		h_items(f, cl, 1);
	}
}

static void h_plan(FILE *f, json_t *p)
{
	static const char *const head[] = {"node",   "stage", "status",
					   "detail", "value", "threshold",
					   NULL};
	static const char *const keys[] = {"node",   "stage_id", "status",
					   "detail", "value",	 "threshold",
					   NULL};
	json_t *r, *l;
	size_t i, j;
	fputs("<h2>Plan</h2>\n", f);
	if (!json_is_object(p)) {
		not_recorded(f);
		return;
	}
	html_table(f, json_object_get(p, "checks"), head, keys);
	if (json_array_size(json_object_get(p, "budget"))) {
		static const char *const bhead[] = {"part", "size", NULL};
		static const char *const bkeys[] = {"part", "bytes", NULL};
		fputs("<p>Per-card budget of the chosen layout (", f);
		html_val(f, json_object_get(p, "layout"));
		fputs("):</p>\n", f);
		html_table(f, json_object_get(p, "budget"), bhead, bkeys);
	}
	json_array_foreach(json_object_get(p, "stages"), i, r)
	{
		fputs("<p>plan stage ", f);
		html_val(f, json_object_get(r, "stage_id"));
		fputs(" on ", f);
		html_val(f, json_object_get(r, "node"));
		fputs(" (rc ", f);
		html_val(f, json_object_get(r, "rc"));
		fputs(")</p>\n", f);
		if (!json_array_size(json_object_get(r, "output")))
			continue;
		fputs("<pre>", f);
		json_array_foreach(json_object_get(r, "output"), j, l)
		{
			html_esc(f, json_string_value(l));
			fputc('\n', f);
		}
		fputs("</pre>\n", f);
	}
}

static void h_manifest(FILE *f, json_t *m)
{
	static const char *const fhead[] = {"node",   "cpu",   "cores",
					    "memory", "kernel", "glibc",
					    "mpi",    "blas",  "engine", NULL};
	static const char *const fkeys[] = {
	    "node",	   "cpu",	  "cores", "mem_bytes",	     "kernel",
	    "glibc",	   "mpi_version", "blas",  "engine_version", NULL};
	static const char *const ahead[] = {"node", "agent", "engine",
					    "vendor", "cards", NULL};
	static const char *const akeys[] = {"node", "agent_version",
					    "engine_version", "vendor",
					    "cards", NULL};
	static const char *const chead[] = {"node", "stage", "step",
					    "command", NULL};
	static const char *const ckeys[] = {"node", "stage_id", "stage",
					    "command", NULL};
	static const char *const shead[] = {"node", "stage", "item", "value",
					    NULL};
	static const char *const skeys[] = {"node", "stage_id", "item",
					    "value", NULL};
	static const char *const scalars[] = {"model", "playbook_path",
					      "inventory_path", NULL};
	json_t *v, *rows;
	const char *k;
	fputs("<h2>Reproducibility manifest</h2>\n<table>\n", f);
	fputs("<tr><th>versions</th><td>", f);
	v = json_object_get(m, "versions");
	if (json_is_object(v)) {
		json_t *x;
		json_object_foreach(v, k, x)
		{
			html_esc(f, k);
			fputc(' ', f);
			html_val(f, x);
			fputs("; ", f);
		}
	} else {
		fputs("not recorded", f);
	}
	fputs("</td></tr>\n", f);
	for (int i = 0; scalars[i]; i++) {
		fprintf(f, "<tr><th>%s</th><td>", scalars[i]);
		v = json_object_get(m, scalars[i]);
		html_esc(f, json_is_string(v) ? json_string_value(v)
					      : "not recorded");
		fputs("</td></tr>\n", f);
	}
	fputs("<tr><th>command</th><td><code>", f);
	v = json_object_get(m, "command");
	if (json_is_array(v)) {
		json_t *a;
		size_t i;
		json_array_foreach(v, i, a)
		{
			html_esc(f, json_string_value(a));
			fputc(' ', f);
		}
	} else {
		fputs("not recorded", f);
	}
	fputs("</code></td></tr>\n</table>\n", f);

	fputs("<h3>Agents</h3>\n", f);
	rows = json_array();
	json_object_foreach(json_object_get(m, "agents"), k, v)
	{
		json_t *r = json_deep_copy(v);
		json_object_set_new(r, "node", json_string(k));
		json_array_append_new(rows, r);
	}
	html_table(f, rows, ahead, akeys);
	json_decref(rows);
	fputs("<h3>Host facts</h3>\n", f);
	rows = json_array();
	json_object_foreach(json_object_get(m, "facts"), k, v)
	{
		json_t *r = json_deep_copy(v);
		json_object_set_new(r, "node", json_string(k));
		json_array_append_new(rows, r);
	}
	html_table(f, rows, fhead, fkeys);
	json_decref(rows);
	report_compat_html(f, json_object_get(m, "compat"));
	fputs("<h3>Weights checksums</h3>\n", f);
	html_table(f, json_object_get(m, "checksums"), shead, skeys);
	fputs("<h3>Command lines run</h3>\n", f);
	html_table(f, json_object_get(m, "commands_run"), chead, ckeys);
	fputs("<h3>Playbook stages (as planned)</h3>\n", f);
	html_json(f, json_object_get(m, "stages"));
	fputs("<h3>Check thresholds</h3>\n", f);
	html_json(f, json_object_get(m, "checks"));
	fputs("<h3>Playbook</h3>\n", f);
	html_json(f, json_object_get(m, "playbook"));
	fputs("<h3>Inventory</h3>\n", f);
	html_json(f, json_object_get(m, "inventory"));
	if (json_object_size(json_object_get(m, "other"))) {
		fputs("<h3>Other manifest keys</h3>\n", f);
		html_json(f, json_object_get(m, "other"));
	}
}

/* text.generation: the prompt and the two greedy texts side by side. */
/* The image channel: image-check's items and perf.image's TTFT split
 * as stacked horizontal bars (p50, p99: each part's share of the row). */
static void h_image(FILE *f, json_t *rows)
{
	static const char *const head[] = {"item", "status", "stage", "node",
					   "detail", NULL};
	static const char *const keys[] = {"item", "status", "stage", "node",
					   "detail", NULL};
	static const char *const parts[3] = {"preprocess", "encode",
					     "prefill"};
	json_t *r;
	size_t i;
	if (!json_array_size(rows))
		return;
	fputs("<h3>Image channel</h3>\n", f);
	html_table(f, rows, head, keys);
	json_array_foreach(rows, i, r)
	{
		double v[2][3], top[2] = {0, 0};
		char key[32];
		if (strcmp(json_string_value(json_object_get(r, "item")),
			   "perf.image") ||
		    !json_is_number(json_object_get(r, "ttft_p50")))
			continue;
		for (int k = 0; k < 2; k++)
			for (int j = 0; j < 3; j++) {
				snprintf(key, sizeof key, "%s_%s", parts[j],
					 k ? "p99" : "p50");
				v[k][j] = json_number_value(
				    json_object_get(r, key));
				top[k] += v[k][j];
			}
		fprintf(f,
			"<svg id=\"chart-ttft-split\" class=\"chart\" "
			"viewBox=\"0 0 %d 130\" width=\"%d\" height=\"130\" "
			"role=\"img\">\n<title>TTFT split of an image prompt "
			"(preprocess, encode, prefill)</title>\n",
			CW, CW);
		for (int k = 0; k < 2; k++) {
			double x = PL, y = 20 + k * 40;
			fprintf(f, "<text x=\"%d\" y=\"%.0f\" class=\"tick\" "
				   "text-anchor=\"end\">%s</text>\n",
				PL - 6, y + 17, k ? "p99" : "p50");
			for (int j = 0; j < 3; j++) {
				double w = top[k] > 0 ? v[k][j] / top[k] *
							    (CW - PL - PR)
						      : 0;
				fprintf(f,
					"<rect x=\"%.1f\" y=\"%.0f\" "
					"width=\"%.1f\" height=\"26\" "
					"fill=\"%s\"><title>%s %s %.3f "
					"ms</title></rect>\n",
					x, y, w, palette[j], parts[j],
					k ? "p99" : "p50", v[k][j]);
				x += w;
			}
			snprintf(key, sizeof key, "ttft_%s", k ? "p99" : "p50");
			fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" "
				   "class=\"tick\">TTFT %.2f ms</text>\n",
				x + 6, y + 17,
				json_number_value(json_object_get(r, key)));
		}
		for (int j = 0; j < 3; j++)
			fprintf(f,
				"<rect x=\"%d\" y=\"105\" width=\"12\" "
				"height=\"12\" fill=\"%s\"/><text x=\"%d\" "
				"y=\"116\" class=\"tick\">%s</text>\n",
				PL + j * 130, palette[j], PL + j * 130 + 16,
				parts[j]);
		fputs("</svg>\n", f);
	}
}

static void h_text(FILE *f, json_t *rows)
{
	static const char *const head[] = {"prompt", "generated", "reference",
					   "equal", "of", "node", NULL};
	static const char *const keys[] = {"prompt", "generated", "reference",
					   "agree", "n", "node", NULL};
	if (!json_array_size(rows))
		return;
	fputs("<h3>Text generation (greedy, against the float64 "
	      "reference)</h3>\n", f);
	html_table(f, rows, head, keys);
}

int report_write_html(FILE *f, json_t *doc)
{
	static const char *const chead[] = {
	    "stage", "group", "op",	     "bytes",	   "ranks", "time_us",
	    "algbw GB/s", "busbw GB/s", "#wrong", "node",  "rank", NULL};
	static const char *const ckeys[] = {
	    "stage_id", "group", "op",	  "bytes", "ranks", "time_us",
	    "algbw",	"busbw", "wrong", "node",  "rank",  NULL};
	static const char *const nhead[] = {"level", "name", "max_abs",
					    "max_rel", "kl", "top1 %",
					    "ppl_ref", "ppl", "node", "stage",
					    NULL};
	static const char *const nkeys[] = {"level", "name", "max_abs",
					    "max_rel", "kl", "top1",
					    "ppl_ref", "ppl", "node",
					    "stage_id", NULL};
	static const char *const phead[] = {"node", "stage", "rank",
					    "ttft_ms", "tpot_ms", "tokens/s",
					    "prompt tokens", "gen tokens",
					    "kernel", "OpenBLAS", NULL};
	static const char *const pkeys[] = {"node", "stage_id", "rank",
					    "ttft_ms", "tpot_ms",
					    "tokens_per_s", "prompt_tokens",
					    "gen_tokens", "kernel", "blas_core",
					    NULL};
	static const char *const mhead[] = {"node",	   "card",
					    "peak",	   "budget",
					    "peak/budget", "used/budget",
					    "headroom",	   NULL};
	static const char *const mkeys[] = {"node",	"card",
					    "peak",	"budget",
					    "fraction", "used_budget",
					    "headroom", NULL};
	json_t *s = json_object_get(doc, "session");
	json_t *mem = json_object_get(doc, "memory");
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n"
	      "<meta charset=\"utf-8\">\n<title>day0 report: ",
	      f);
	html_esc(f, json_string_value(json_object_get(s, "name")));
	fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", css);
	h_verdict(f, s);
	h_session(f, s);
	h_checklist(f, json_object_get(doc, "checklist"));
	h_timeline(f, json_object_get(doc, "timeline"));
	h_plan(f, json_object_get(doc, "plan"));
	/* The charts first, the tables after them; the comm sweep's rows
	 * (one per size, op, group: ~120 on the demo) folded. */
	fputs("<h2>Communication</h2>\n", f);
	chart_busbw(f, json_object_get(doc, "comm"));
	fputs("<h2>Numerics</h2>\n", f);
	chart_layers(f, json_object_get(doc, "numerics"));
	fputs("<h2>Memory per card</h2>\n", f);
	chart_memory(f, mem);
	html_table(f, json_object_get(mem, "cards"), mhead, mkeys);
	fputs("<h2>Numerics table</h2>\n", f);
	html_table(f, json_object_get(doc, "numerics"), nhead, nkeys);
	h_text(f, json_object_get(doc, "text"));
	h_image(f, json_object_get(doc, "image"));
	if (json_array_size(json_object_get(doc, "training"))) {
		static const char *const thead[] = {
		    "stage", "node", "rank", "layout", "steps", "skipped",
		    "loss first", "loss last", "grad norm last",
		    "loss scale last", "loss scale min", "step s", "fwd s",
		    "bwd s", "opt s", "comm s", "tokens/s", NULL};
		static const char *const tkeys[] = {
		    "stage_id", "node", "rank", "layout", "steps", "skipped",
		    "loss_first", "loss_last", "grad_norm_last",
		    "loss_scale_last", "loss_scale_min", "step_s", "t_fwd_s",
		    "t_bwd_s", "t_opt_s", "t_comm_s", "tokens_per_s", NULL};
		json_t *tr = json_object_get(doc, "training");
		fputs("<h2 id=\"training\">Fine-tuning</h2>\n", f);
		chart_train(f, tr, "loss", "chart-train-loss",
			    "loss per step", "loss", 0);
		chart_train(f, tr, "grad_norm", "chart-train-grad-norm",
			    "gradient norm per step (before clipping)",
			    "grad norm", 0);
		chart_train(f, tr, "loss_scale", "chart-train-loss-scale",
			    "loss scale per step", "loss scale", 1);
		chart_train_split(f, tr);
		html_table(f, tr, thead, tkeys);
	}
	fputs("<h2>Performance baseline</h2>\n", f);
	html_table(f, json_object_get(doc, "perf"), phead, pkeys);
	{
		static const char *const shead[] = {
		    "stage", "node", "concurrency", "requests", "errors",
		    "stalls", "req/s", "tokens/s", "TTFT p50 ms", "TTFT p90 ms",
		    "TTFT p99 ms", "TPOT p50 ms", "TPOT p90 ms", "TPOT p99 ms",
		    "e2e p50 ms", "e2e p90 ms", "e2e p99 ms", "goodput",
		    "errors by class", NULL};
		static const char *const skeys[] = {
		    "stage_id", "node", "concurrency", "requests", "errors",
		    "stalls", "requests_per_s", "tokens_per_s", "ttft_p50_ms",
		    "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms",
		    "tpot_p99_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms",
		    "goodput", "errors_by_class", NULL};
		fputs("<h2 id=\"service\">Service</h2>\n", f);
		chart_service(f, json_object_get(doc, "service"));
		html_table(f, json_object_get(doc, "service"), shead, skeys);
	}
	if (json_object_get(doc, "refused")) {
		static const char *const rhead[] = {
		    "node", "reason", "count", "first", "example", NULL};
		static const char *const rkeys[] = {
		    "node", "reason", "count", "detail", "example", NULL};
		fputs("<h2>Refused input</h2>\n", f);
		html_table(f, json_object_get(doc, "refused"), rhead, rkeys);
	}
	fprintf(f, "<h2 id=\"comm-table\">Communication table</h2>\n"
		   "<details><summary>%zu rows (every size, op and group)"
		   "</summary>\n",
		json_array_size(json_object_get(doc, "comm")));
	html_table(f, json_object_get(doc, "comm"), chead, ckeys);
	fputs("</details>\n", f);
	h_manifest(f, json_object_get(doc, "manifest"));
	fputs("</body>\n</html>\n", f);
	return fflush(f) || ferror(f) ? -1 : 0;
}
