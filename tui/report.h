/*
 * report.h - what `day0 report`, `day0 diff` and `day0 ls` read out of a
 * session file, and the renderers.
 *
 * One loader (report_data.c) turns a session file into one JSON document;
 * the markdown, JSON and HTML reports (report_md.c, report_html.c) and the
 * diff render or compare that document, so the three formats and the diff
 * cannot disagree about what a session holds.  docs/reports.md describes
 * the document and the formats.
 *
 * The file is opened read-only (STORE_READONLY through the store, which
 * refuses files that are not day0 sessions, plus a read-only sqlite handle
 * for the report's own queries): reports never change a session.  Every
 * manifest key may be missing (a session written by a console that died,
 * or by the test tools); the sections then hold null and render as
 * "not recorded".
 */
#ifndef DAY0_REPORT_H
#define DAY0_REPORT_H

#include <stdio.h>

#include <jansson.h>

#include "util.h"

/*
 * The session summary `day0 ls` shows (and the report's "session"
 * section):
 *   {"file","name","started","finished","duration_s","nodes":[..],
 *    "verdict":"go"|"no-go"|"unfinished","events":N,"model"}
 * started/finished are unix ns (from the manifest, else the first and last
 * event); name falls back to the file name.  NULL and err on failure.
 */
json_t *report_summary(const char *path, struct d0_err *err);

/*
 * The whole report document:
 *   {"format":"day0-report","version":1,"session":{summary},
 *    "checklist":[{"item","title","status","rehearsal","required",
 *                  "evidence":[{stage,node,status,detail,value,
 *                  threshold,ts}...]}...]  (verdict.h: every item's
 *                  verdict, worst evidence first; rehearsal items last),
 *    "plan":{...}|null, "comm":[...], "numerics":[...], "perf":[...],
 *    "service":[{node,stage_id,concurrency,requests,ok,errors,stalls,
 *                requests_per_s,tokens_per_s,goodput,ttft_p50_ms..
 *                e2e_p99_ms,error_classes:{},errors_by_class,ts}..],
 *    "training":[{node,stage_id,rank,layout,steps,skipped,first_skipped,
 *                 first_step,last_step,loss_first,loss_last,grad_norm_last,
 *                 loss_scale_first,loss_scale_last,loss_scale_min,tokens,
 *                 timed_steps,t_fwd_s,t_bwd_s,t_opt_s,t_comm_s,step_s,
 *                 step_s_min,step_s_max,tokens_per_s,ts,
 *                 points:[{step,loss,grad_norm,loss_scale,skipped,lr,
 *                 tokens,t_fwd_s,t_bwd_s,t_opt_s,t_comm_s}]}..]
 *                (fine-tuning runs: per (node, stage_id) its lowest rank),
 *    "memory":{"cards":[{node,card,peak,budget,fraction}], "series":[..]},
 *    "manifest":{...}}
 * Empty sections are null.  NULL and err on failure.
 */
json_t *report_load(const char *path, struct d0_err *err);

/* The manifest's compatibility matrix (report_compat.c, compat_matrix.h;
 * null without facts) and its renderings. */
json_t *report_compat(json_t *manifest);
void report_compat_md(FILE *f, json_t *matrix);
void report_compat_html(FILE *f, json_t *matrix);

/* Renderers: return 0, or -1 when writing failed. */
int report_write_md(FILE *f, json_t *doc);
int report_write_html(FILE *f, json_t *doc);

/* Number formatting shared by the renderers ("%.6g"; "-" for null). */
void report_fmt_num(json_t *v, char *out, size_t max);
/* Bytes as "64 KiB" / "1.5 GiB" (exact powers shown without fraction). */
void report_fmt_bytes(double b, char *out, size_t max);

#endif
