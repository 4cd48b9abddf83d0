/*
 * runner_out.c - the playbook runner, part: headless output: the folded progress lines, the CHECK table, the verdict and its reasons, --json.
 * runner_int.h says how the parts fit.
 */
#include "runner_int.h"
#include "fit.h"
#include "glance.h"
#include "training.h"

#include <sys/ioctl.h>

const char *const stage_state_names[] = {"waiting", "running", "done",
					   "failed", "skipped"};

/* ---------------------------------------------------------------- output */

double since(struct run *r, int64_t ts)
{
	return (double)(ts - r->t_start) / 1e9;
}

/* Headless: queue one line's text for a node; equal texts within a short
 * window print once with the nodes folded ("node[1-8]"). */
void say(struct run *r, const char *text, const char *node)
{
	json_t *a;
	if (!r->out || r->replaying)
		return;
	a = json_object_get(r->pending, text);
	if (!a) {
		a = json_array();
		json_object_set_new(r->pending, text, a);
	}
	json_array_append_new(a, json_string(node));
	if (!r->pending_since)
		r->pending_since = now_ns();
}

char *fold_array(json_t *a)
{
	size_t n = json_array_size(a), i;
	char **names = calloc(n ? n : 1, sizeof *names);
	json_t *v;
	char *s;
	json_array_foreach(a, i, v) names[i] = (char *)json_string_value(v);
	s = nodeset_fold(names, n);
	free(names);
	return s;
}

void flush_said(struct run *r, int force)
{
	const char *text;
	json_t *a;
	void *tmp;
	if (!r->out || !r->pending_since)
		return;
	if (!force && now_ns() - r->pending_since < 300000000)
		return;
	json_object_foreach_safe(r->pending, tmp, text, a)
	{
		char *set = fold_array(a);
		fprintf(r->out, "[%7.1fs] %-44s %s\n", since(r, now_ns()), text,
			set ? set : "?");
		free(set);
		json_object_del(r->pending, text);
	}
	fflush(r->out);
	r->pending_since = 0;
}

/* ----------------------------------------------------------- summary */

size_t run_simulated(const struct run *r)
{
	size_t n = 0;
	for (size_t i = 0; i < r->n_nodes; i++)
		n += r->nodes[i].sim != 0;
	return n;
}

/* The checklist of this run (verdict.h): the playbook's stages with what
 * became of them, folded with the evidence. */
json_t *run_checklist(struct run *r)
{
	struct verdict_stage *vs = calloc(r->pb.n + 1, sizeof *vs);
	json_t *rows = json_array(), *v, *items;
	const char *k;
	json_object_foreach(r->evidence, k, v) json_array_append(rows, v);
	for (size_t s = 0; s < r->pb.n; s++) {
		const struct pb_stage *ps = &r->pb.stages[s];
		vs[s].id = ps->id;
		vs[s].rehearsal = ps->rehearsal;
		vs[s].outcome = verdict_outcome(stage_state_names[r->stages[s].st]);
		vs[s].checks = json_object();
		for (size_t c = 0; c < ps->n_checks; c++)
			json_object_set_new(
			    vs[s].checks, ps->checks[c].item,
			    json_pack("{s:b}", "required",
				      ps->checks[c].required && ps->required));
	}
	items = verdict_items(vs, r->pb.n, rows);
	for (size_t s = 0; s < r->pb.n; s++)
		json_decref(vs[s].checks);
	free(vs);
	json_decref(rows);
	return items;
}

/* Columns the DETAIL column may take: the terminal's width when f is
 * one, else $COLUMNS, else no limit (0: a log file keeps the whole
 * text). */
static int detail_cols(FILE *f)
{
	struct winsize ws;
	const char *c = getenv("COLUMNS");
	int cols = 0;
	if (isatty(fileno(f)) && ioctl(fileno(f), TIOCGWINSZ, &ws) == 0)
		cols = ws.ws_col;
	else if (c && atoi(c) > 0)
		cols = atoi(c);
	if (!cols)
		return 0;
	/* item, status, stage, nodes: 24+1+7+1+14+1+16+1 columns */
	return cols - 65 > 20 ? cols - 65 : 20;
}

/* The item's evidence rows, folded by (stage, status, detail) over nodes. */
void print_item(FILE *f, json_t *it)
{
	int dcols = detail_cols(f);
	json_t *groups = json_array(), *e, *g;
	size_t i, j;
	json_array_foreach(json_object_get(it, "evidence"), i, e)
	{
		json_t *found = NULL;
		json_array_foreach(groups, j, g)
		{
			if (json_equal(json_object_get(g, "stage"),
				       json_object_get(e, "stage")) &&
			    json_equal(json_object_get(g, "status"),
				       json_object_get(e, "status")) &&
			    json_equal(json_object_get(g, "detail"),
				       json_object_get(e, "detail"))) {
				found = g;
				break;
			}
		}
		if (!found) {
			found = json_pack("{s:O, s:O, s:O, s:[]}", "stage",
					  json_object_get(e, "stage"), "status",
					  json_object_get(e, "status"), "detail",
					  json_object_get(e, "detail"), "nodes");
			json_array_append_new(groups, found);
		}
		if (strcmp(json_string_value(json_object_get(e, "node")) ?: "-",
			   "-"))
			json_array_append(json_object_get(found, "nodes"),
					  json_object_get(e, "node"));
	}
	json_array_foreach(groups, i, g)
	{
		char *set = json_array_size(json_object_get(g, "nodes"))
				? fold_array(json_object_get(g, "nodes"))
				: strdup("-");
		/* The item and its verdict on the first row; each further
		 * piece of evidence below it, with its own status. */
		const char *detail =
		    json_string_value(json_object_get(g, "detail")) ?: "";
		char shown[1024];
		/* Shortened at a word (never inside a number) to the line;
		 * the report has the whole text. */
		if (dcols)
			fit_text(detail, dcols, "\u2026", shown, sizeof shown);
		else
			snprintf(shown, sizeof shown, "%s", detail);
		fprintf(f, "%-24s %-7s %-14s %-16s %s\n",
			i ? "" : json_string_value(json_object_get(it, "item")),
			i ? json_string_value(json_object_get(g, "status"))
			  : json_string_value(json_object_get(it, "status")),
			*json_string_value(json_object_get(g, "stage"))
			    ? json_string_value(json_object_get(g, "stage"))
			    : "-",
			set ? set : "?", shown);
		free(set);
	}
	json_decref(groups);
}

/* The checklist table: each item's verdict and its evidence per (stage,
 * node), then the rehearsal's evidence in a block of its own. */
void print_checklist(struct run *r, FILE *f)
{
	json_t *items = run_checklist(r), *it;
	size_t i;
	int rehearsal = 0;
	fprintf(f, "\n%-24s %-7s %-14s %-16s %s\n", "CHECK", "STATUS", "STAGE",
		"NODES", "DETAIL");
	json_array_foreach(items, i, it)
	{
		if (json_is_true(json_object_get(it, "rehearsal")) &&
		    !rehearsal++)
			fprintf(f, "\n%-24s %-7s %-14s %-16s %s\n",
				"REHEARSAL", "STATUS", "STAGE", "NODES",
				"DETAIL (a shape-validation model: never the "
				"real model's)");
		print_item(f, it);
	}
	json_decref(items);
}

/* "failed: a, b": one line of the NO-GO's reasons. */
void print_reasons(FILE *f, const char *what, json_t *list)
{
	size_t i;
	json_t *v;
	if (!json_array_size(list))
		return;
	fprintf(f, "%s", what);
	json_array_foreach(list, i, v)
	    fprintf(f, "%s%s", i ? ", " : " ", json_string_value(v));
	fputc('\n', f);
}

/* One MEMORY line: card c of node first, or (c < 0) the worst card of
 * nodes first..last. */
static void glance_line(FILE *f, const struct view *v, size_t first,
			size_t last, int c, const char *label)
{
	struct glance_card k;
	char ub[48], pk[32], hr[16];
	int total = 1;
	if (c >= 0)
		glance_card(&v->nodes[first], c, &k);
	else if (!(total = glance_worst(v, first, last, &k)))
		return;
	fit_used_budget(k.used, k.budget, ub, sizeof ub);
	fit_bytes(k.peak, pk, sizeof pk);
	fit_headroom(k.peak, k.budget, hr, sizeof hr, NULL);
	if (c >= 0)
		fprintf(f, "%-24s %-18s %-10s %s\n", label, ub, pk, hr);
	else
		fprintf(f, "%-24s %-18s %-10s %-8s %.60s/%d of %d cards\n",
			label, ub, pk, hr, k.node, k.card, total);
}

/* The fine-tuning runs (training.h: the Numerics screen's figures), one
 * line each in the order they started. */
static void print_training(FILE *f, const struct view *v)
{
	struct training_run runs[TRAINING_RUNS];
	int n = training_runs(v, runs, TRAINING_RUNS);
	char who[96], split[96];
	if (!n)
		return;
	fprintf(f, "\n%-28s %-14s %5s %7s %-25s %-10s %-10s %-8s %s\n",
		"TRAINING", "LAYOUT", "STEPS", "SKIPPED", "LOSS FIRST -> LAST",
		"GRAD NORM", "LOSS SCALE", "STEP S", "SPLIT");
	for (int k = 0; k < n; k++) {
		const struct training_run *r = &runs[k];
		char loss[64], lf[24], ll[24], gn[24], sc[24], st[24];
		snprintf(who, sizeof who, "%.40s on %.40s", r->stage_id,
			 r->node);
		training_num(r->loss_first, "%.6g", lf, sizeof lf);
		training_num(r->loss_last, "%.6g", ll, sizeof ll);
		training_num(r->grad_norm_last, "%.6g", gn, sizeof gn);
		training_num(r->scale_last, "%.6g", sc, sizeof sc);
		training_num(r->step_s, "%.4g", st, sizeof st);
		snprintf(loss, sizeof loss, "%s -> %s", lf, ll);
		training_split(r, split, sizeof split);
		fprintf(f, "%-28s %-14s %5d %7d %-25s %-10s %-10s %-8s %s\n",
			who, r->layout, r->steps, r->skipped, loss, gn, sc, st,
			split);
	}
}

/* The Overview's glance figures at the end of the session file, from
 * the same view and the same functions as the screen (glance.h): the
 * checklist's counts and memory per card (per node, its worst card, past
 * GLANCE_HEADLESS_CARDS cards). */
#define GLANCE_HEADLESS_CARDS 64
static void print_glance(struct run *r, FILE *f)
{
	struct view_src *src = NULL;
	struct view v;
	struct d0_err err = {{0}};
	struct glance_checklist g;
	int64_t first, last;
	int per_card;
	if (view_src_open(r->session, &src, &err) < 0)
		return;
	view_init(&v);
	view_src_span(src, &first, &last);
	if (view_seek(src, &v, last, &err) < 0 || !v.nnodes)
		goto out;
	glance_checklist(&v, &g);
	/* An incomplete run (the store stalled): the table above folds what
	 * the agents sent, this line what the file holds; say which. */
	if (r->incomplete)
		fprintf(f, "\nthe session file holds only part of the above "
			   "(the rest is not stored yet: --resume stores it)");
	fprintf(f, "\nchecklist%s:", r->incomplete ? " in the session file" : "");
	for (int s = 0; s < GLANCE_NSTATUS; s++)
		if (g.n[s] || s == GLANCE_PASS || s == GLANCE_FAIL)
			fprintf(f, " %d %s", g.n[s], glance_status_name[s]);
	if (g.first)
		fprintf(f, "  first %s: %s", g.first_status, g.first);
	fputc('\n', f);
	per_card = glance_ncards(&v, 0, v.nnodes - 1) <= GLANCE_HEADLESS_CARDS;
	fprintf(f, "\n%-24s %-18s %-10s %s\n", "MEMORY", "USED/BUDGET", "PEAK",
		per_card ? "HEADROOM" : "HEADROOM WORST CARD");
	if (per_card) {
		for (size_t i = 0; i < v.nnodes; i++)
			for (int c = 0; c < v.nodes[i].ncards; c++) {
				char label[96];
				if (!glance_has(&v.nodes[i], c))
					continue;
				snprintf(label, sizeof label, "%.60s/%d",
					 v.nodes[i].name, c);
				glance_line(f, &v, i, i, c, label);
			}
		goto out;
	}
	/* Past GLANCE_HEADLESS_CARDS cards: a line per node, or per node
	 * set (at most GLANCE_HEADLESS_CARDS lines), its worst card. */
	size_t group = (v.nnodes + GLANCE_HEADLESS_CARDS - 1) /
		       GLANCE_HEADLESS_CARDS;
	for (size_t i = 0; i < v.nnodes; i += group) {
		size_t end = i + group - 1 < v.nnodes ? i + group - 1
						      : v.nnodes - 1;
		char *names[GLANCE_HEADLESS_CARDS * 64], *set;
		size_t k, nn = 0;
		for (k = i; k <= end && nn < sizeof names / sizeof *names; k++)
			names[nn++] = v.nodes[k].name;
		set = nodeset_fold(names, nn);
		glance_line(f, &v, i, end, -1, set ? set : v.nodes[i].name);
		free(set);
	}
out:
	print_training(f, &v);
	view_free(&v);
	view_src_close(src);
}

void print_summary(struct run *r, FILE *f)
{
	size_t unreachable = 0;
	struct d0_err err = {{0}};
	json_t *verdict;
	/* NOTE: shortened at a word like DETAIL (to the terminal, else 300
	 * columns; never inside a number); the report has it whole. */
	int ncols = detail_cols(f) ? detail_cols(f) + 65 - 28 : 300;
	print_checklist(r, f);
	print_glance(r, f);
	fprintf(f, "\n%-18s %-8s %s\n", "STAGE", "RESULT", "NOTE");
	for (size_t k = 0; k < r->pb.n; k++) {
		int s = (int)r->pb.order[k];
		struct stage_rt *sr = &r->stages[s];
		char note[1024];
		fit_text(sr->st == S_DONE && !strcmp(sr->msg, "ok") ? "" : sr->msg,
			 ncols > 20 ? ncols : 20, "\u2026", note, sizeof note);
		fprintf(f, "%-18s %-8s %s\n", r->pb.stages[s].id,
			stage_state_names[sr->st], note);
	}
	for (size_t i = 0; i < r->n_nodes; i++)
		if (r->nodes[i].failed) {
			if (!unreachable++)
				fprintf(f, "\nunreachable:\n");
			fprintf(f, "  %s: %s\n", r->nodes[i].inv->name,
				r->nodes[i].why);
		}
	if (r->incomplete) {
		int64_t t0 = 0;
		const char *why = intake_stall(r->intake, &t0);
		fprintf(f,
			"\nverdict: INCOMPLETE (STORE: %s for %d s: the "
			"session file does not hold every event)\n"
			"session: %s\nthe agents keep what was not stored; "
			"make room, then:\n  day0 run --resume %s\n",
			why ? why : "not writable", r->o->store_wait_s,
			r->session, r->session);
		if (r->held_saved)
			fprintf(f, "the console's %d events the file lacks are "
				   "kept in %s (--resume stores them)\n",
				r->held_saved, r->held_where);
		return;
	}
	fprintf(f, "\nverdict: %s%s", r->go ? "GO" : "NO-GO",
		r->cancelled ? " (cancelled)" : "");
	if (run_simulated(r))
		fprintf(f, " (SIMULATED: %zu of %zu nodes' agents simulated "
			   "their work)",
			run_simulated(r), r->n_nodes);
	fputc('\n', f);
	verdict = store_session_get(r->store, "verdict", &err);
	print_reasons(f, "failed:", json_object_get(verdict, "failed"));
	print_reasons(f, "skipped:", json_object_get(verdict, "skipped"));
	json_decref(verdict);
	fprintf(f, "session: %s\nreplay:  day0 replay %s\n"
		   "report:  day0 report %s --format html -o report.html\n",
		r->session, r->session, r->session);
}

/* --json: the verdict and every item with its evidence, for CI (stdout
 * holds only this; the lines go to stderr). */
void print_json(struct run *r, FILE *f)
{
	struct d0_err err = {{0}};
	json_t *verdict = store_session_get(r->store, "verdict", &err);
	json_t *failed = json_object_get(verdict, "failed"),
	       *skipped = json_object_get(verdict, "skipped");
	json_t *o = json_pack(
	    "{s:s, s:b, s:b, s:s, s:s, s:o, s:o, s:o}", "verdict",
	    r->go ? "GO" : "NO-GO", "go", r->go, "cancelled", r->cancelled,
	    "session", r->session, "playbook", r->pb.name, "items",
	    run_checklist(r), "failed",
	    json_is_array(failed) ? json_incref(failed) : json_array(),
	    "skipped",
	    json_is_array(skipped) ? json_incref(skipped) : json_array());
	json_object_set_new(o, "simulated",
			    json_integer((json_int_t)run_simulated(r)));
	json_dumpf(o, f, JSON_INDENT(1));
	fputc('\n', f);
	fflush(f);
	json_decref(o);
	json_decref(verdict);
}

/* GO or NO-GO, with the reasons apart: what failed (stages, nodes,
 * required items) and what was skipped (required stages that never ran). */
void decide(struct run *r)
{
	json_t *failed = json_array(), *skipped = json_array(), *items, *it;
	size_t i, j;
	int go = !r->cancelled;
	for (size_t s = 0; s < r->pb.n; s++) {
		enum stage_state st = r->stages[s].st;
		if (!r->pb.stages[s].required || st == S_DONE)
			continue;
		go = 0;
		json_array_append_new(st == S_FAILED ? failed : skipped,
				      json_sprintf("stage:%s",
						   r->pb.stages[s].id));
	}
	for (i = 0; i < r->n_nodes; i++)
		if (r->nodes[i].failed || r->nodes[i].excluded) {
			go = 0;
			json_array_append_new(
			    failed,
			    json_sprintf("node:%s", r->nodes[i].inv->name));
		}
	{
		/* A session whose file lacks events of a node is no GO. */
		struct store_node *sn = NULL;
		size_t nsn = 0;
		struct d0_err err = {{0}};
		if (store_nodes(r->store, &sn, &nsn, &err) == 0)
			for (size_t k = 0; k < nsn; k++)
				if (sn[k].missing > 0) {
					go = 0;
					json_array_append_new(
					    failed, json_sprintf("store:%s",
								 sn[k].node));
				}
		free(sn);
	}
	items = run_checklist(r);
	json_array_foreach(items, i, it)
	{
		json_t *e;
		if (!json_is_true(json_object_get(it, "required")))
			continue;
		json_array_foreach(json_object_get(it, "evidence"), j, e)
		{
			if (strcmp(json_string_value(json_object_get(e, "status")),
				   "fail"))
				continue;
			go = 0;
			json_array_append_new(
			    failed,
			    json_sprintf("%s@%s",
					 json_string_value(json_object_get(it, "item")),
					 json_string_value(json_object_get(e, "node"))));
		}
	}
	r->go = go;
	{
		/* The items this playbook does not require (no required stage
		 * declares them: a release day's training.*): the Overview
		 * names a "not run" one last, not as the first failing. */
		json_t *optional = json_array(), *ev;
		json_array_foreach(items, i, it)
		{
			if (!json_is_true(json_object_get(it, "required")))
				json_array_append(optional,
						  json_object_get(it, "item"));
		}
		ev = json_pack("{s:b, s:O, s:O, s:o, s:I}", "go", go, "failed",
			       failed, "skipped", skipped, "items",
			       verdict_statuses(items), "simulated",
			       (json_int_t)run_simulated(r));
		json_object_set_new(ev, "optional", optional);
		console_event(r, "verdict", ev);
	}
	json_decref(items);
	{
		struct d0_err err = {{0}};
		json_t *v = json_pack("{s:b, s:o, s:o, s:i, s:I}", "go", go,
				      "failed", failed, "skipped", skipped,
				      "exit", go ? 0 : 1, "simulated",
				      (json_int_t)run_simulated(r));
		store_session_set(r->store, "verdict", v, &err);
		json_decref(v);
		v = json_integer(now_ns());
		store_session_set(r->store, "finished", v, &err);
		json_decref(v);
	}
}
