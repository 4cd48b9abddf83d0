/*
 * report_md.c - the report document as markdown (`day0 report`, the
 * default format).
 *
 * Strings from the store go into tables: every one passes through md_cell,
 * which escapes what would end a cell or become markup (| < > ` * \) and
 * folds newlines, so a detail written by a step cannot break the table or
 * inject HTML into a rendered page.
 */
#include "report.h"

#include <math.h>
#include <string.h>

#include "console.h"

static void md_text(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\n' || *s == '\r' || *s == '\t')
			fputc(' ', f);
		else if (strchr("|<>`*\\[]", *s))
			fprintf(f, "\\%c", *s);
		else
			fputc(*s, f);
	}
}

/* One table cell: " text |". */
static void md_cell(FILE *f, json_t *v)
{
	char buf[512];
	fputc(' ', f);
	if (json_is_string(v)) {
		md_text(f, json_string_value(v));
	} else {
		report_fmt_num(v, buf, sizeof buf);
		md_text(f, buf);
	}
	fputs(" |", f);
}

static void md_cells(FILE *f, json_t *row, const char *const *keys)
{
	fputc('|', f);
	for (int i = 0; keys[i]; i++)
		md_cell(f, json_object_get(row, keys[i]));
	fputc('\n', f);
}

static void md_head(FILE *f, const char *const *names)
{
	int n = 0;
	fputc('|', f);
	for (; names[n]; n++)
		fprintf(f, " %s |", names[n]);
	fputs("\n|", f);
	for (int i = 0; i < n; i++)
		fputs("---|", f);
	fputc('\n', f);
}

/* A fenced block whose fence is longer than any backtick run inside. */
static void md_block(FILE *f, const char *lang, const char *text)
{
	int run = 0, longest = 0;
	for (const char *p = text; *p; p++) {
		run = *p == '`' ? run + 1 : 0;
		if (run > longest)
			longest = run;
	}
	int n = longest < 3 ? 3 : longest + 1;
	for (int i = 0; i < n; i++)
		fputc('`', f);
	fprintf(f, "%s\n%s\n", lang, text);
	for (int i = 0; i < n; i++)
		fputc('`', f);
	fputs("\n\n", f);
}

static void not_recorded(FILE *f)
{
	fputs("not recorded\n\n", f);
}

static void md_json(FILE *f, json_t *v)
{
	char *s = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY |
				    JSON_PRESERVE_ORDER);
	md_block(f, "json", s ? s : "null");
	free(s);
}

static void md_session(FILE *f, json_t *s)
{
	char t0[32], t1[32];
	json_t *n;
	size_t i;
	fputs("# day0 report: ", f);
	md_text(f, json_string_value(json_object_get(s, "name")));
	fputs("\n\n", f);
	{
		/* The verdict first, then the metadata. */
		const char *v =
		    json_string_value(json_object_get(s, "verdict"));
		static const char *const lists[] = {"failed", "skipped"};
		fprintf(f, "## Verdict: %s\n\n",
			!v			? "INCOMPLETE"
			: !strcmp(v, "go")	? "GO"
			: !strcmp(v, "no-go")	? "NO-GO"
						: "INCOMPLETE");
		if (json_integer_value(json_object_get(s, "simulated")) > 0)
			fprintf(f,
				"**SIMULATED**: %lld nodes' agents simulated "
				"the work (day0-agent --sim-model): the "
				"figures are a model's, not a cluster's.\n\n",
				(long long)json_integer_value(
				    json_object_get(s, "simulated")));
		for (int k = 0; k < 2; k++) {
			if (!json_array_size(json_object_get(s, lists[k])))
				continue;
			fprintf(f, "- %s:", lists[k]);
			json_array_foreach(json_object_get(s, lists[k]), i, n)
			{
				fputc(' ', f);
				md_text(f, json_string_value(n));
			}
			fputc('\n', f);
		}
		fputc('\n', f);
	}
	console_fmt_time(json_integer_value(json_object_get(s, "started")), t0,
			 sizeof t0);
	console_fmt_time(json_integer_value(json_object_get(s, "finished")),
			 t1, sizeof t1);
	fputs("- file: ", f);
	md_text(f, json_string_value(json_object_get(s, "file")));
	fputs("\n- model: ", f);
	md_text(f, json_is_string(json_object_get(s, "model"))
		       ? json_string_value(json_object_get(s, "model"))
		       : "not recorded");
	fprintf(f, "\n- started: %s, %s: %s (%.1f s)\n- nodes:", t0,
		json_is_false(json_object_get(s, "finished_recorded"))
		    ? "never finished, last event"
		    : "finished",
		t1, json_number_value(json_object_get(s, "duration_s")));
	json_array_foreach(json_object_get(s, "nodes"), i, n)
	{
		fputc(' ', f);
		md_text(f, json_string_value(n));
	}
	fprintf(f, "\n- events: %lld\n- verdict: **%s**",
		(long long)json_integer_value(json_object_get(s, "events")),
		json_string_value(json_object_get(s, "verdict")));
	if (json_array_size(json_object_get(s, "failed"))) {
		fputs(" (failed:", f);
		json_array_foreach(json_object_get(s, "failed"), i, n)
		{
			fputc(' ', f);
			md_text(f, json_string_value(n));
		}
		fputc(')', f);
	}
	if (json_array_size(json_object_get(s, "skipped"))) {
		fputs(" (skipped:", f);
		json_array_foreach(json_object_get(s, "skipped"), i, n)
		{
			fputc(' ', f);
			md_text(f, json_string_value(n));
		}
		fputc(')', f);
	}
	fputs("\n\n", f);
}

/* One block of items: the item and its verdict on its first row, then
 * every stage's evidence per node, its own status in front of its detail. */
static void md_items(FILE *f, json_t *cl, int rehearsal)
{
	static const char *const head[] = {"item",   "status", "stage",
					   "node",   "detail", "value",
					   "threshold", NULL};
	static const char *const ev_keys[] = {"stage", "node", "detail",
					      "value", "threshold", NULL};
	json_t *it, *e;
	size_t i, j;
	md_head(f, head);
	json_array_foreach(cl, i, it)
	{
		if (json_is_true(json_object_get(it, "rehearsal")) != rehearsal)
			continue;
		json_array_foreach(json_object_get(it, "evidence"), j, e)
		{
			fputc('|', f);
			if (j == 0) {
				md_cell(f, json_object_get(it, "item"));
				md_cell(f, json_object_get(it, "status"));
			} else {
				fputs(" | |", f);
			}
			for (int k = 0; ev_keys[k]; k++) {
				if (!strcmp(ev_keys[k], "detail")) {
					fputs(" [", f);
					md_text(f, json_string_value(
						       json_object_get(e, "status")));
					fputs("]", f);
				}
				md_cell(f, json_object_get(e, ev_keys[k]));
			}
			fputc('\n', f);
		}
	}
	fputc('\n', f);
}

static void md_checklist(FILE *f, json_t *cl)
{
	json_t *it;
	size_t i;
	int rehearsal = 0;
	fputs("## Checklist\n\n", f);
	md_items(f, cl, 0);
	json_array_foreach(cl, i, it) rehearsal |=
	    json_is_true(json_object_get(it, "rehearsal"));
	if (!rehearsal)
		return;
	fputs("### Rehearsal (a shape-validation model: never the real "
	      "model's evidence)\n\n",
	      f);
	md_items(f, cl, 1);
}

static void md_plan(FILE *f, json_t *p)
{
	static const char *const head[] = {"node", "stage", "status", "detail",
					   "value", "threshold", NULL};
	static const char *const keys[] = {"node",  "stage_id", "status",
					   "detail", "value",	 "threshold",
					   NULL};
	json_t *r, *l;
	size_t i, j;
	fputs("## Plan\n\n", f);
	if (!json_is_object(p)) {
		not_recorded(f);
		return;
	}
	if (json_array_size(json_object_get(p, "checks"))) {
		md_head(f, head);
		json_array_foreach(json_object_get(p, "checks"), i, r)
		    md_cells(f, r, keys);
		fputc('\n', f);
		/* The chosen layout's per-card budget, when the check has it. */
		if (json_array_size(json_object_get(p, "budget"))) {
			static const char *const bhead[] = {"part", "bytes",
							    "", NULL};
			static const char *const bkeys[] = {"part", "bytes",
							    "size", NULL};
			fprintf(f, "Per-card budget of the chosen layout (%s):\n\n",
				json_string_value(json_object_get(p, "layout")));
			md_head(f, bhead);
			json_array_foreach(json_object_get(p, "budget"), j, l)
			    md_cells(f, l, bkeys);
			fputc('\n', f);
		}
	} else {
		fputs("memory.plan: not recorded\n\n", f);
	}
	json_array_foreach(json_object_get(p, "stages"), i, r)
	{
		char rc[32];
		report_fmt_num(json_object_get(r, "rc"), rc, sizeof rc);
		fputs("Plan stage ", f);
		md_text(f, json_string_value(json_object_get(r, "stage_id")));
		fputs(" on ", f);
		md_text(f, json_string_value(json_object_get(r, "node")));
		fprintf(f, " (rc %s)", rc);
		if (!json_array_size(json_object_get(r, "output"))) {
			fputs(": no output recorded\n\n", f);
			continue;
		}
		fputs(":\n\n", f);
		size_t len = 0;
		json_array_foreach(json_object_get(r, "output"), j, l)
		    len += strlen(json_string_value(l)) + 1;
		char *text = calloc(1, len + 1), *p2 = text;
		json_array_foreach(json_object_get(r, "output"), j, l)
		{
			size_t n = strlen(json_string_value(l));
			memcpy(p2, json_string_value(l), n);
			p2 += n;
			*p2++ = '\n';
		}
		if (p2 > text)
			p2[-1] = 0;
		md_block(f, "", text);
		free(text);
	}
}

static void md_table(FILE *f, const char *title, json_t *rows,
		     const char *const *head, const char *const *keys)
{
	json_t *r;
	size_t i;
	fprintf(f, "## %s\n\n", title);
	if (!json_array_size(rows)) {
		not_recorded(f);
		return;
	}
	md_head(f, head);
	json_array_foreach(rows, i, r) md_cells(f, r, keys);
	fputc('\n', f);
}

static void md_comm(FILE *f, json_t *rows)
{
	static const char *const head[] = {
	    "stage", "group", "op",	     "bytes",	   "size", "ranks",
	    "time_us", "algbw GB/s", "busbw GB/s", "#wrong", "node", "rank",
	    NULL};
	static const char *const keys[] = {
	    "stage_id", "group", "op",	  "bytes", "size", "ranks",
	    "time_us",	"algbw", "busbw", "wrong", "node", "rank",
	    NULL};
	json_t *r;
	size_t i;
	json_array_foreach(rows, i, r)
	{
		char b[32];
		report_fmt_bytes(json_number_value(json_object_get(r, "bytes")),
				 b, sizeof b);
		json_object_set_new(r, "size", json_string(b));
	}
	md_table(f, "Communication", rows, head, keys);
}

static void md_memory(FILE *f, json_t *mem)
{
	static const char *const head[] = {
	    "node",   "card",	      "peak bytes", "peak",	"budget bytes",
	    "budget", "peak/budget", "used/budget", "headroom", NULL};
	static const char *const keys[] = {
	    "node",	"card", "peak",	      "peak_h",	  "budget",
	    "budget_h", "frac", "used_budget", "headroom", NULL};
	json_t *cards = json_object_get(mem, "cards"), *r;
	size_t i;
	json_array_foreach(cards, i, r)
	{
		char b[32];
		json_t *pk = json_object_get(r, "peak"),
		       *bu = json_object_get(r, "budget"),
		       *fr = json_object_get(r, "fraction");
		int has_pk = json_is_number(pk), has_bu = json_is_number(bu);
		double vpk = json_number_value(pk), vbu = json_number_value(bu);
		if (json_is_number(fr)) {
			snprintf(b, sizeof b, "%.2f%%",
				 100 * json_number_value(fr));
			json_object_set_new(r, "frac", json_string(b));
		}
		/* Whole bytes read better than 1.83e+05. */
		if (has_pk) {
			json_object_set_new(r, "peak",
					    json_integer((json_int_t)vpk));
			report_fmt_bytes(vpk, b, sizeof b);
			json_object_set_new(r, "peak_h", json_string(b));
		}
		if (has_bu) {
			json_object_set_new(r, "budget",
					    json_integer((json_int_t)vbu));
			report_fmt_bytes(vbu, b, sizeof b);
			json_object_set_new(r, "budget_h", json_string(b));
		}
	}
	md_table(f, "Peak memory per card", cards, head, keys);
}

static void md_manifest(FILE *f, json_t *m)
{
	static const char *const fhead[] = {"node", "cpu", "cores", "memory",
					    "kernel", "glibc", "mpi", "blas",
					    "engine", NULL};
	static const char *const fkeys[] = {"node", "cpu", "cores",
					    "mem_bytes", "kernel", "glibc",
					    "mpi_version", "blas",
					    "engine_version", NULL};
	static const char *const ahead[] = {"node", "agent", "engine",
					    "vendor", "cards", NULL};
	static const char *const akeys[] = {"node", "agent_version",
					    "engine_version", "vendor",
					    "cards", NULL};
	static const char *const chead[] = {"node", "stage", "step",
					    "command", NULL};
	static const char *const ckeys[] = {"node", "stage_id", "stage",
					    "command", NULL};
	static const char *const shead[] = {"node", "stage", "item",
					    "value", NULL};
	static const char *const skeys[] = {"node", "stage_id", "item",
					    "value", NULL};
	json_t *v, *rows;
	const char *k;
	fputs("## Reproducibility manifest\n\n", f);
	fputs("- versions: ", f);
	v = json_object_get(m, "versions");
	if (json_is_object(v)) {
		json_t *x;
		int first = 1;
		json_object_foreach(v, k, x)
		{
			char b[256];
			report_fmt_num(x, b, sizeof b);
			fputs(first ? "" : ", ", f);
			md_text(f, k);
			fputs(" ", f);
			md_text(f, b);
			first = 0;
		}
	} else {
		fputs("not recorded", f);
	}
	static const char *const scalars[] = {"model", "playbook_path",
					      "inventory_path", NULL};
	for (int i = 0; scalars[i]; i++) {
		fprintf(f, "\n- %s: ", scalars[i]);
		v = json_object_get(m, scalars[i]);
		md_text(f, json_is_string(v) ? json_string_value(v)
					     : "not recorded");
	}
	fputs("\n- command: ", f);
	v = json_object_get(m, "command");
	if (json_is_array(v)) {
		json_t *a;
		size_t i;
		fputs("`", f);
		json_array_foreach(v, i, a)
		{
			/* In a code span only a backtick needs care. */
			for (const char *p = json_string_value(a); p && *p; p++)
				fputc(*p == '`' || *p == '\n' ? '\'' : *p, f);
			fputc(i + 1 < json_array_size(v) ? ' ' : '`', f);
		}
		if (!json_array_size(v))
			fputc('`', f);
	} else {
		fputs("not recorded", f);
	}
	fputs("\n\n", f);

	/* Agents and facts: one row per node. */
	rows = json_array();
	json_object_foreach(json_object_get(m, "agents"), k, v)
	{
		json_t *r = json_deep_copy(v);
		json_object_set_new(r, "node", json_string(k));
		json_array_append_new(rows, r);
	}
	md_table(f, "Agents", rows, ahead, akeys);
	json_decref(rows);
	rows = json_array();
	json_object_foreach(json_object_get(m, "facts"), k, v)
	{
		json_t *r = json_deep_copy(v);
		json_object_set_new(r, "node", json_string(k));
		json_array_append_new(rows, r);
	}
	md_table(f, "Host facts", rows, fhead, fkeys);
	json_decref(rows);
	report_compat_md(f, json_object_get(m, "compat"));

	md_table(f, "Weights checksums", json_object_get(m, "checksums"),
		 shead, skeys);
	md_table(f, "Command lines run", json_object_get(m, "commands_run"),
		 chead, ckeys);
	fputs("## Playbook stages (as planned)\n\n", f);
	v = json_object_get(m, "stages");
	if (json_is_null(v) || !v)
		not_recorded(f);
	else
		md_json(f, v);
	fputs("## Check thresholds\n\n", f);
	v = json_object_get(m, "checks");
	if (json_is_null(v) || !v)
		not_recorded(f);
	else
		md_json(f, v);
	fputs("## Playbook\n\n", f);
	v = json_object_get(m, "playbook");
	if (json_is_null(v) || !v)
		not_recorded(f);
	else
		md_json(f, v);
	fputs("## Inventory\n\n", f);
	v = json_object_get(m, "inventory");
	if (json_is_null(v) || !v)
		not_recorded(f);
	else
		md_json(f, v);
	if (json_object_size(json_object_get(m, "other"))) {
		fputs("## Other manifest keys\n\n", f);
		md_json(f, json_object_get(m, "other"));
	}
}

/* text.generation: the prompt and the two greedy texts side by side. */
static void md_generation(FILE *f, json_t *rows)
{
	static const char *const head[] = {"prompt", "generated", "reference",
					   "equal", "of", "node", NULL};
	static const char *const keys[] = {"prompt", "generated", "reference",
					   "agree", "n", "node", NULL};
	md_table(f, "Text generation (greedy, against the float64 reference)",
		 rows, head, keys);
}

/* The image channel (docs/multimodal.md): image-check's items, then
 * perf.image's TTFT split as a stacked text bar per percentile (P
 * preprocess, E encode, F prefill: each part's share of the row's sum in
 * 40 columns). */
static void md_image(FILE *f, json_t *rows)
{
	static const char *const head[] = {"item", "status", "stage", "node",
					   "detail", NULL};
	static const char *const keys[] = {"item", "status", "stage", "node",
					   "detail", NULL};
	static const char *const q[2] = {"p50", "p99"};
	json_t *r;
	size_t i;
	if (!json_array_size(rows))
		return;
	md_table(f, "Image channel", rows, head, keys);
	json_array_foreach(rows, i, r)
	{
		double v[2][3], top[2] = {0, 0};
		const char *parts[3] = {"preprocess", "encode", "prefill"};
		char key[32];
		if (strcmp(json_string_value(json_object_get(r, "item")),
			   "perf.image") ||
		    !json_is_number(json_object_get(r, "ttft_p50")))
			continue;
		for (int k = 0; k < 2; k++)
			for (int j = 0; j < 3; j++) {
				snprintf(key, sizeof key, "%s_%s", parts[j],
					 q[k]);
				v[k][j] = json_number_value(
				    json_object_get(r, key));
				top[k] += v[k][j];
			}
		fprintf(f, "### TTFT split (%s, %lld images)\n\n",
			json_string_value(json_object_get(r, "node")),
			(long long)json_integer_value(json_object_get(r, "n")));
		fputs("| | preprocess ms | encode ms | prefill ms | TTFT ms | "
		      "share (P preprocess, E encode, F prefill) |\n"
		      "|---|---|---|---|---|---|\n", f);
		for (int k = 0; k < 2; k++) {
			char bar[64];
			int o = 0;
			snprintf(key, sizeof key, "ttft_%s", q[k]);
			for (int j = 0; j < 3; j++) {
				int w = top[k] > 0
					    ? (int)(v[k][j] / top[k] * 40 + 0.5)
					    : 0;
				for (int c = 0; c < w && o < 40; c++)
					bar[o++] = "PEF"[j];
			}
			bar[o] = 0;
			fprintf(f, "| %s | %.2f | %.2f | %.2f | %.2f | `%s` |\n",
				q[k], v[k][0], v[k][1], v[k][2],
				json_number_value(json_object_get(r, key)), bar);
		}
		fputc('\n', f);
	}
}

/* A text sparkline of a run's figure over its points, scaled from its min
 * to its max; 'x' a skipped step, ' ' a step without the figure. */
static void md_spark(json_t *pts, const char *key, char *out, size_t max)
{
	static const char *const bars[8] = {"\u2581", "\u2582", "\u2583",
					    "\u2584", "\u2585", "\u2586",
					    "\u2587", "\u2588"};
	double lo = NAN, hi = NAN;
	size_t i, o = 0;
	json_t *p;
	json_array_foreach(pts, i, p)
	{
		json_t *v = json_object_get(p, key);
		double x = json_number_value(v);
		if (!json_is_number(v) ||
		    json_integer_value(json_object_get(p, "skipped")))
			continue;
		if (isnan(lo) || x < lo)
			lo = x;
		if (isnan(hi) || x > hi)
			hi = x;
	}
	out[0] = 0;
	json_array_foreach(pts, i, p)
	{
		json_t *v = json_object_get(p, key);
		const char *g = " ";
		if (json_integer_value(json_object_get(p, "skipped")))
			g = "x";
		else if (json_is_number(v)) {
			int l = hi > lo ? (int)((json_number_value(v) - lo) /
						    (hi - lo) * 7 + 0.5)
					: 3;
			g = bars[l < 0 ? 0 : l > 7 ? 7 : l];
		}
		if (o + strlen(g) + 1 > max)
			break;
		memcpy(out + o, g, strlen(g) + 1);
		o += strlen(g);
	}
}

/* Fine-tuning (docs/training.md): a line per run with its curves as
 * text sparklines and the step time split, then every step. */
static void md_training(FILE *f, json_t *runs)
{
	static const char *const head[] = {
	    "stage", "node", "rank", "layout", "steps", "skipped",
	    "loss first", "loss last", "loss curve", "grad norm last",
	    "grad norm curve", "loss scale last", "loss scale min",
	    "loss scale curve", "step s", "fwd s", "bwd s", "opt s", "comm s",
	    "split", "tokens/s", NULL};
	static const char *const keys[] = {
	    "stage_id", "node", "rank", "layout", "steps", "skipped",
	    "loss_first", "loss_last", "loss_curve", "grad_norm_last",
	    "grad_norm_curve", "loss_scale_last", "loss_scale_min",
	    "loss_scale_curve", "step_s", "t_fwd_s", "t_bwd_s", "t_opt_s",
	    "t_comm_s", "split", "tokens_per_s", NULL};
	static const char *const shead[] = {
	    "stage", "step", "loss", "grad norm", "loss scale", "skipped",
	    "lr", "tokens", "fwd s", "bwd s", "opt s", "comm s", NULL};
	static const char *const skeys[] = {
	    "stage_id", "step", "loss", "grad_norm", "loss_scale", "skipped",
	    "lr", "tokens", "t_fwd_s", "t_bwd_s", "t_opt_s", "t_comm_s", NULL};
	json_t *r, *steps = json_array();
	size_t i;
	char buf[64 * 4 * 8];
	json_array_foreach(runs, i, r)
	{
		json_t *pts = json_object_get(r, "points"), *p;
		double s = json_number_value(json_object_get(r, "step_s"));
		size_t k;
		md_spark(pts, "loss", buf, sizeof buf);
		json_object_set_new(r, "loss_curve", json_string(buf));
		md_spark(pts, "grad_norm", buf, sizeof buf);
		json_object_set_new(r, "grad_norm_curve", json_string(buf));
		md_spark(pts, "loss_scale", buf, sizeof buf);
		json_object_set_new(r, "loss_scale_curve", json_string(buf));
		if (json_is_number(json_object_get(r, "step_s")) && s > 0)
			snprintf(buf, sizeof buf,
				 "fwd %.0f%% bwd %.0f%% opt %.0f%% comm %.0f%%",
				 100 * json_number_value(
					   json_object_get(r, "t_fwd_s")) / s,
				 100 * json_number_value(
					   json_object_get(r, "t_bwd_s")) / s,
				 100 * json_number_value(
					   json_object_get(r, "t_opt_s")) / s,
				 100 * json_number_value(
					   json_object_get(r, "t_comm_s")) / s);
		else
			snprintf(buf, sizeof buf, "-");
		json_object_set_new(r, "split", json_string(buf));
		json_array_foreach(pts, k, p)
		{
			json_t *row = json_deep_copy(p);
			json_object_set(row, "stage_id",
					json_object_get(r, "stage_id"));
			json_array_append_new(steps, row);
		}
	}
	md_table(f, "Fine-tuning (per run: its lowest rank's steps)", runs,
		 head, keys);
	md_table(f, "Fine-tuning steps", steps, shead, skeys);
	json_decref(steps);
}

int report_write_md(FILE *f, json_t *doc)
{
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
	md_session(f, json_object_get(doc, "session"));
	md_checklist(f, json_object_get(doc, "checklist"));
	{
		static const char *const thead[] = {"+s", "kind", "stage",
						    "text", NULL};
		static const char *const tkeys[] = {"t_s", "kind", "stage_id",
						    "text", NULL};
		md_table(f, "Timeline (markers, cancels, reruns, failures)",
			 json_object_get(doc, "timeline"), thead, tkeys);
	}
	md_plan(f, json_object_get(doc, "plan"));
	md_comm(f, json_object_get(doc, "comm"));
	{
		static const char *const head[] = {
		    "stage", "phase", "group", "op", "ranks", "calls", "bytes",
		    "time_us", "busbw GB/s", "node", "rank", NULL};
		static const char *const keys[] = {
		    "stage_id", "phase", "group", "op", "ranks", "calls", "bytes",
		    "time_us", "busbw", "node", "rank", NULL};
		static const char *const pairhead[] = {
		    "stage", "from", "to", "bytes", "GB/s", "#wrong", "node",
		    NULL};
		static const char *const pairkeys[] = {
		    "stage_id", "from", "to", "bytes", "busbw", "wrong", "node",
		    NULL};
		md_table(f, "Send/recv pairs (slowest first)",
			 json_object_get(doc, "comm_pairs"), pairhead, pairkeys);
		md_table(f, "Collectives inside the run", 
			 json_object_get(doc, "comm_runtime"), head, keys);
	}
	md_table(f, "Numerics", json_object_get(doc, "numerics"), nhead,
		 nkeys);
	md_generation(f, json_object_get(doc, "text"));
	md_image(f, json_object_get(doc, "image"));
	if (json_array_size(json_object_get(doc, "training")))
		md_training(f, json_object_get(doc, "training"));
	md_table(f, "Performance baseline", json_object_get(doc, "perf"),
		 phead, pkeys);
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
		md_table(f, "Service (load per concurrency level)",
			 json_object_get(doc, "service"), shead, skeys);
	}
	{
		static const char *const rhead[] = {
		    "node", "reason", "count", "first", "example", NULL};
		static const char *const rkeys[] = {
		    "node", "reason", "count", "detail", "example", NULL};
		if (json_object_get(doc, "refused"))
			md_table(f, "Refused input",
				 json_object_get(doc, "refused"), rhead, rkeys);
	}
	md_memory(f, json_object_get(doc, "memory"));
	md_manifest(f, json_object_get(doc, "manifest"));
	return fflush(f) || ferror(f) ? -1 : 0;
}
