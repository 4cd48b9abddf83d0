/*
 * cmd_diff.c - `day0 diff A.db B.db`: what changed from session A (the
 * baseline, e.g. the last release day) to session B, flagged REGRESSION
 * where B is worse past a threshold.  Exit 0 when nothing regressed, 1
 * when something did (CI gates on it), 2 for usage errors and unreadable
 * sessions.
 *
 * Both sessions go through report_load, so the diff compares exactly
 * what the reports show.  What is compared (docs/reports.md):
 *   checklist  the folded status per item; pass -> anything but pass/skip,
 *              or anything -> fail, is a regression
 *   perf       per (stage, node), the last perf event: ttft_ms and tpot_ms
 *              up, tokens_per_s down, relative, --threshold-perf (0.05)
 *   busbw      per (op, group, size), mean over ranks and nodes: down,
 *              relative, --threshold-busbw (0.10)
 *   memory     peak per (node, card): up, relative, --threshold-mem (0.05)
 *   numerics   per (level, name), the worst over nodes: max_rel and kl as
 *              ratios B/A, --threshold-numerics (2.0); values both under
 *              NUM_FLOOR are equal (float noise, not a regression)
 */
#include "console.h"
#include "report.h"
#include "checklist.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Errors below this are rounding noise of float32 against float64. */
#define NUM_FLOOR 1e-12

enum kind { REL, RATIO };

struct diff {
	double thr_perf, thr_busbw, thr_mem, thr_num;
	json_t *out; /* section -> array of rows */
	int regressions;
};

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "-";
}

static json_t *section(struct diff *d, const char *name)
{
	json_t *a = json_object_get(d->out, name);
	if (!a) {
		a = json_array();
		json_object_set_new(d->out, name, a);
	}
	return a;
}

/*
 * One metric of one key: dir +1 when higher is worse, -1 when lower is.
 * REL: change = (b - a) / |a|, bad past thr in the bad direction.
 * RATIO: change = b / a, bad when above thr.
 */
static void compare(struct diff *d, const char *sec, const char *key,
		    const char *metric, json_t *ra, json_t *rb, int dir,
		    enum kind kind, double thr)
{
	json_t *va = json_object_get(ra, metric), *vb = json_object_get(rb, metric);
	json_t *row;
	int bad = 0;
	if (!json_is_number(va) && !json_is_number(vb))
		return;
	row = json_pack("{s:s,s:s,s:O,s:O}", "key", key, "metric", metric,
			"a", va ? va : json_null(), "b", vb ? vb : json_null());
	if (json_is_number(va) && json_is_number(vb)) {
		double a = json_number_value(va), b = json_number_value(vb);
		double ch = NAN;
		if (kind == REL) {
			if (a != 0)
				ch = (b - a) / fabs(a);
			else if (b == 0)
				ch = 0;
			bad = isnan(ch) ? (dir > 0 ? b > 0 : b < 0)
					: dir * ch > thr;
		} else {
			if (fabs(a) < NUM_FLOOR && fabs(b) < NUM_FLOOR)
				ch = 1;
			else
				ch = fabs(b) / fmax(fabs(a), NUM_FLOOR);
			bad = ch > thr;
		}
		json_object_set_new(row, "change",
				    isfinite(ch) ? json_real(ch) : json_null());
	} else {
		json_object_set_new(row, "change", json_null());
		json_object_set_new(row, "note",
				    json_string(json_is_number(va)
						    ? "only in A"
						    : "only in B"));
	}
	json_object_set_new(row, "regression", json_boolean(bad));
	d->regressions += bad;
	json_array_append_new(section(d, sec), row);
}

/* ---------------------------------------------------------------- indexes */

/* rows -> {key: row}, the last row of a key winning (rows are in ts
 * order), or with fold set, each numeric field the worst (max) seen. */
static json_t *index_rows(json_t *rows, const char *const *keyf,
			  const char *const *fold)
{
	json_t *m = json_object(), *r;
	size_t i;
	json_array_foreach(rows, i, r)
	{
		char key[512];
		size_t len = 0;
		key[0] = 0;
		for (int k = 0; keyf[k] && len < sizeof key; k++) {
			json_t *v = json_object_get(r, keyf[k]);
			char b[128];
			report_fmt_num(v, b, sizeof b);
			int w = snprintf(key + len, sizeof key - len, "%s%s",
					 k ? " " : "", b);
			if (w < 0)
				break;
			len += (size_t)w;
		}
		json_t *prev = json_object_get(m, key);
		if (!fold || !prev) {
			json_object_set(m, key, r);
			continue;
		}
		json_t *merged = json_deep_copy(prev);
		for (int k = 0; fold[k]; k++) {
			json_t *a = json_object_get(prev, fold[k]),
			       *b = json_object_get(r, fold[k]);
			if (json_is_number(b) &&
			    (!json_is_number(a) ||
			     json_number_value(b) > json_number_value(a)))
				json_object_set(merged, fold[k], b);
		}
		json_object_set_new(m, key, merged);
	}
	return m;
}

/* Mean busbw per (op, group, bytes). */
static json_t *index_busbw(json_t *comm)
{
	static const char *const kf[] = {"op", "group", "bytes", NULL};
	json_t *sum = json_object(), *r, *m = json_object();
	const char *k;
	size_t i;
	json_array_foreach(comm, i, r)
	{
		json_t *one = json_array(), *idx;
		json_t *bw = json_object_get(r, "busbw");
		if (!json_is_number(bw)) {
			json_decref(one);
			continue;
		}
		json_array_append(one, r);
		idx = index_rows(one, kf, NULL);
		json_object_foreach(idx, k, r)
		{
			json_t *acc = json_object_get(sum, k);
			if (!acc) {
				acc = json_pack("{s:f,s:i}", "s", 0.0, "n", 0);
				json_object_set_new(sum, k, acc);
			}
			json_object_set_new(
			    acc, "s",
			    json_real(json_real_value(json_object_get(acc, "s")) +
				      json_number_value(bw)));
			json_object_set_new(
			    acc, "n",
			    json_integer(json_integer_value(
					     json_object_get(acc, "n")) +
					 1));
		}
		json_decref(idx);
		json_decref(one);
	}
	json_object_foreach(sum, k, r)
	    json_object_set_new(
		m, k,
		json_pack("{s:f}", "busbw",
			  json_real_value(json_object_get(r, "s")) /
			      (double)json_integer_value(json_object_get(r, "n"))));
	json_decref(sum);
	return m;
}

/* Each key of A, then the keys only B has. */
static void compare_maps(struct diff *d, const char *sec, json_t *ma,
			 json_t *mb, const char *const *metrics,
			 const int *dirs, enum kind kind, double thr)
{
	const char *k;
	json_t *ra, *rb;
	json_object_foreach(ma, k, ra)
	{
		rb = json_object_get(mb, k);
		for (int i = 0; metrics[i]; i++)
			compare(d, sec, k, metrics[i], ra, rb, dirs[i], kind,
				thr);
	}
	json_object_foreach(mb, k, rb)
	{
		if (json_object_get(ma, k))
			continue;
		for (int i = 0; metrics[i]; i++)
			compare(d, sec, k, metrics[i], NULL, rb, dirs[i], kind,
				thr);
	}
}

/* -------------------------------------------------------------- sections */

static void diff_checklist(struct diff *d, json_t *ca, json_t *cb)
{
	json_t *sa = json_object(), *sb = json_object(), *it, *v;
	size_t i;
	const char *k;
	json_array_foreach(ca, i, it)
	    json_object_set(sa, jstr(it, "item"), json_object_get(it, "status"));
	json_array_foreach(cb, i, it)
	    json_object_set(sb, jstr(it, "item"), json_object_get(it, "status"));
	json_t *items = json_array();
	json_object_foreach(sa, k, v) json_array_append_new(items, json_string(k));
	json_object_foreach(sb, k, v) if (!json_object_get(sa, k))
	    json_array_append_new(items, json_string(k));
	section(d, "checklist");
	json_array_foreach(items, i, it)
	{
		const char *item = json_string_value(it);
		const char *a = json_string_value(json_object_get(sa, item));
		const char *b = json_string_value(json_object_get(sb, item));
		int bad;
		a = a ? a : "not run";
		b = b ? b : "not run";
		if (!strcmp(a, b))
			continue;
		/* Worse than before, past a skip (the registry's one order). */
		bad = check_status_parse(b, NULL) > check_status_parse(a, NULL) &&
		      check_status_parse(b, NULL) > CHECK_SKIP;
		d->regressions += bad;
		json_array_append_new(
		    section(d, "checklist"),
		    json_pack("{s:s,s:s,s:s,s:b}", "item", item, "a", a, "b", b,
			      "regression", bad));
	}
	json_decref(items);
	json_decref(sa);
	json_decref(sb);
}

static json_t *run_diff_docs(struct diff *d, json_t *A, json_t *B)
{
	static const char *const perf_key[] = {"stage_id", "node", NULL};
	static const char *const perf_m[] = {"ttft_ms", "tpot_ms",
					     "tokens_per_s", NULL};
	static const int perf_dir[] = {1, 1, -1};
	static const char *const mem_key[] = {"node", "card", NULL};
	static const char *const mem_m[] = {"peak", NULL};
	static const int up[] = {1, 1};
	static const char *const bw_m[] = {"busbw", NULL};
	static const int down[] = {-1};
	static const char *const num_key[] = {"level", "name", NULL};
	static const char *const num_m[] = {"max_rel", "kl", NULL};
	json_t *ma, *mb;
	d->out = json_object();
	diff_checklist(d, json_object_get(A, "checklist"),
		       json_object_get(B, "checklist"));

	section(d, "perf");
	ma = index_rows(json_object_get(A, "perf"), perf_key, NULL);
	mb = index_rows(json_object_get(B, "perf"), perf_key, NULL);
	compare_maps(d, "perf", ma, mb, perf_m, perf_dir, REL, d->thr_perf);
	json_decref(ma);
	json_decref(mb);

	section(d, "busbw");
	ma = index_busbw(json_object_get(A, "comm"));
	mb = index_busbw(json_object_get(B, "comm"));
	compare_maps(d, "busbw", ma, mb, bw_m, down, REL, d->thr_busbw);
	json_decref(ma);
	json_decref(mb);

	section(d, "memory");
	ma = index_rows(json_object_get(json_object_get(A, "memory"), "cards"),
			mem_key, NULL);
	mb = index_rows(json_object_get(json_object_get(B, "memory"), "cards"),
			mem_key, NULL);
	compare_maps(d, "memory", ma, mb, mem_m, up, REL, d->thr_mem);
	json_decref(ma);
	json_decref(mb);

	section(d, "numerics");
	ma = index_rows(json_object_get(A, "numerics"), num_key, num_m);
	mb = index_rows(json_object_get(B, "numerics"), num_key, num_m);
	compare_maps(d, "numerics", ma, mb, num_m, up, RATIO, d->thr_num);
	json_decref(ma);
	json_decref(mb);
	return d->out;
}

/* ---------------------------------------------------------------- output */

static void print_rows(json_t *rows, const char *title, int ratio)
{
	json_t *r;
	size_t i;
	printf("\n%s\n", title);
	if (!json_array_size(rows)) {
		printf("  (nothing recorded in either session)\n");
		return;
	}
	json_array_foreach(rows, i, r)
	{
		char a[64], b[64], ch[64] = "";
		json_t *c = json_object_get(r, "change");
		report_fmt_num(json_object_get(r, "a"), a, sizeof a);
		report_fmt_num(json_object_get(r, "b"), b, sizeof b);
		if (json_is_number(c))
			snprintf(ch, sizeof ch,
				 ratio ? "x%.3g" : "%+.1f%%",
				 ratio ? json_number_value(c)
				       : 100 * json_number_value(c));
		else
			snprintf(ch, sizeof ch, "%s",
				 json_is_string(json_object_get(r, "note"))
				     ? jstr(r, "note")
				     : "-");
		printf("  %-34s %-13s %14s -> %-14s %10s%s\n", jstr(r, "key"),
		       jstr(r, "metric"), a, b, ch,
		       json_is_true(json_object_get(r, "regression"))
			   ? "  REGRESSION"
			   : "");
	}
}

static int parse_thr(const char *opt, const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || !isfinite(v))
		return console_usage_error(&cmd_diff,
					   "%s: expected a positive number, "
					   "got '%s'",
					   opt, s);
	*out = v;
	return 0;
}

static int run_diff(int argc, char **argv)
{
	struct diff d = {.thr_perf = 0.05,
			 .thr_busbw = 0.10,
			 .thr_mem = 0.05,
			 .thr_num = 2.0};
	const char *files[2] = {NULL, NULL};
	int nf = 0, as_json = 0;
	json_t *A, *B, *res;
	struct d0_err err;
	static const struct {
		const char *opt;
		size_t off;
	} thr[] = {
	    {"--threshold-perf", offsetof(struct diff, thr_perf)},
	    {"--threshold-busbw", offsetof(struct diff, thr_busbw)},
	    {"--threshold-mem", offsetof(struct diff, thr_mem)},
	    {"--threshold-numerics", offsetof(struct diff, thr_num)},
	};
	for (int i = 1; i < argc; i++) {
		size_t t;
		for (t = 0; t < sizeof thr / sizeof thr[0]; t++)
			if (!strcmp(argv[i], thr[t].opt))
				break;
		if (t < sizeof thr / sizeof thr[0]) {
			if (i + 1 >= argc)
				return console_usage_error(
				    &cmd_diff, "%s needs a value", argv[i]);
			if (parse_thr(argv[i], argv[i + 1],
				      (double *)((char *)&d + thr[t].off)))
				return EXIT_USAGE;
			i++;
		} else if (!strcmp(argv[i], "--json")) {
			as_json = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return console_usage_error(&cmd_diff,
						   "unknown option '%s'",
						   argv[i]);
		} else if (nf < 2) {
			files[nf++] = argv[i];
		} else {
			return console_usage_error(&cmd_diff,
						   "two session files only "
						   "('%s')",
						   argv[i]);
		}
	}
	if (nf != 2)
		return console_usage_error(&cmd_diff,
					   "needs two session files");
	if (!(A = report_load(files[0], &err))) {
		fprintf(stderr, "day0 diff: %s\n", err.msg);
		return EXIT_USAGE;
	}
	if (!(B = report_load(files[1], &err))) {
		fprintf(stderr, "day0 diff: %s\n", err.msg);
		json_decref(A);
		return EXIT_USAGE;
	}
	res = run_diff_docs(&d, A, B);
	if (as_json) {
		json_t *doc = json_pack(
		    "{s:s,s:s,s:{s:f,s:f,s:f,s:f},s:O,s:O,s:O,s:O,s:O,s:i}",
		    "a", files[0], "b", files[1], "thresholds", "perf",
		    d.thr_perf, "busbw", d.thr_busbw, "mem", d.thr_mem,
		    "numerics", d.thr_num, "checklist",
		    json_object_get(res, "checklist"), "perf",
		    json_object_get(res, "perf"), "busbw",
		    json_object_get(res, "busbw"), "memory",
		    json_object_get(res, "memory"), "numerics",
		    json_object_get(res, "numerics"), "regressions",
		    d.regressions);
		json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(doc);
	} else {
		json_t *r;
		size_t i;
		printf("day0 diff: A %s\n           B %s\n", files[0],
		       files[1]);
		printf("\nchecklist (status A -> B)\n");
		if (!json_array_size(json_object_get(res, "checklist")))
			printf("  no changes\n");
		json_array_foreach(json_object_get(res, "checklist"), i, r)
		    printf("  %-34s %s -> %s%s\n", jstr(r, "item"),
			   jstr(r, "a"), jstr(r, "b"),
			   json_is_true(json_object_get(r, "regression"))
			       ? "  REGRESSION"
			       : "");
		char title[128];
		snprintf(title, sizeof title,
			 "perf (stage node; relative change, threshold %g%%)",
			 100 * d.thr_perf);
		print_rows(json_object_get(res, "perf"), title, 0);
		snprintf(title, sizeof title,
			 "busbw GB/s (op group bytes; threshold %g%%)",
			 100 * d.thr_busbw);
		print_rows(json_object_get(res, "busbw"), title, 0);
		snprintf(title, sizeof title,
			 "peak memory bytes (node card; threshold %g%%)",
			 100 * d.thr_mem);
		print_rows(json_object_get(res, "memory"), title, 0);
		snprintf(title, sizeof title,
			 "numerics (level name; ratio B/A, threshold x%g)",
			 d.thr_num);
		print_rows(json_object_get(res, "numerics"), title, 1);
		printf("\n%d regression%s\n", d.regressions,
		       d.regressions == 1 ? "" : "s");
	}
	json_decref(res);
	json_decref(A);
	json_decref(B);
	if (fflush(stdout))
		return EXIT_USAGE;
	return d.regressions ? EXIT_CHECK_FAILED : EXIT_OK;
}

const struct console_cmd cmd_diff = {
    "diff",
    "A.db B.db [--threshold-perf 0.05] [--threshold-busbw 0.10] "
    "[--threshold-mem 0.05] [--threshold-numerics 2.0] [--json]\n\n"
    "What changed from session A (the baseline) to B: perf, bus "
    "bandwidth, peak\nmemory per card, numerics and the checklist.\n\n"
    "  --threshold-perf R       relative TTFT/TPOT/tokens-per-s change "
    "that counts (0.05)\n"
    "  --threshold-busbw R      relative busbw drop that counts (0.10)\n"
    "  --threshold-mem R        relative peak memory growth that counts "
    "(0.05)\n"
    "  --threshold-numerics X   error growth factor that counts (2.0)\n"
    "  --json                   the comparison as JSON\n\n"
    "Exit status: 0 no regression, 1 a regression past a threshold, 2 "
    "usage or input error.\n\n"
    "Example:\n  day0 diff last-release.db today.db --threshold-perf 0.1",
    "what changed from session A to B; exit 1 on a regression past the "
    "thresholds",
    run_diff};
