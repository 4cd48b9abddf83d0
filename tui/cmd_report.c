/*
 * cmd_report.c - `day0 report SESSION.db [--format md|json|html] [-o FILE]`:
 * the session as a report (report.h loads, report_md.c / report_html.c
 * render; docs/reports.md).
 *
 * The session is opened read-only.  With -o the report is written to
 * FILE.partial-PID and renamed into place, so a failed report never
 * leaves half a file where a good one was expected.
 */
#include "console.h"
#include "report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run_report(int argc, char **argv)
{
	const char *db = NULL, *format = "md", *out = NULL;
	struct d0_err err;
	json_t *doc;
	FILE *f = stdout;
	char tmp[4096];
	int rc;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--format") && i + 1 < argc)
			format = argv[++i];
		else if (!strncmp(argv[i], "--format=", 9))
			format = argv[i] + 9;
		else if ((!strcmp(argv[i], "-o") ||
			  !strcmp(argv[i], "--output")) &&
			 i + 1 < argc)
			out = argv[++i];
		else if (argv[i][0] == '-' && argv[i][1])
			return console_usage_error(&cmd_report,
						   "unknown option '%s'",
						   argv[i]);
		else if (!db)
			db = argv[i];
		else
			return console_usage_error(&cmd_report,
						   "one session file only "
						   "('%s')",
						   argv[i]);
	}
	if (!db)
		return console_usage_error(&cmd_report, "no session file");
	if (strcmp(format, "md") && strcmp(format, "json") &&
	    strcmp(format, "html"))
		return console_usage_error(&cmd_report,
					   "--format: expected md, json or "
					   "html, got '%s'",
					   format);
	if (!(doc = report_load(db, &err))) {
		fprintf(stderr, "day0 report: %s\n", err.msg);
		return EXIT_USAGE;
	}
	if (out) {
		int n = snprintf(tmp, sizeof tmp, "%s.partial-%ld", out,
				 (long)getpid());
		if (n < 0 || (size_t)n >= sizeof tmp) {
			fprintf(stderr, "day0 report: %s: name too long\n", out);
			json_decref(doc);
			return EXIT_USAGE;
		}
		if (!(f = fopen(tmp, "w"))) {
			fprintf(stderr, "day0 report: %s: %s\n", tmp,
				strerror(errno));
			json_decref(doc);
			return EXIT_USAGE;
		}
	}
	if (!strcmp(format, "md"))
		rc = report_write_md(f, doc);
	else if (!strcmp(format, "html"))
		rc = report_write_html(f, doc);
	else
		rc = json_dumpf(doc, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) ||
			     fputc('\n', f) == EOF || fflush(f)
			 ? -1
			 : 0;
	json_decref(doc);
	if (out) {
		if (fclose(f) != 0)
			rc = -1;
		if (rc == 0 && rename(tmp, out) < 0) {
			fprintf(stderr, "day0 report: %s: %s\n", out,
				strerror(errno));
			unlink(tmp);
			return EXIT_USAGE;
		}
		if (rc < 0)
			unlink(tmp);
	}
	if (rc < 0) {
		fprintf(stderr, "day0 report: %s: write failed: %s\n",
			out ? out : "stdout", strerror(errno));
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

const struct console_cmd cmd_report = {
    "report",
    "SESSION.db [--format md|json|html] [-o FILE]\n\n"
    "The session as a report: the verdict, the checklist with its "
    "evidence, plan,\ncommunication, numerics, perf, memory and the "
    "reproducibility manifest.\n\n"
    "  --format F        md (default), json or html (one self-contained "
    "file)\n"
    "  -o FILE           write there (default: stdout)\n\n"
    "Example:\n  day0 report session.db --format html -o report.html",
    "a session as a report: checklist with evidence, plan, comm, numerics, "
    "perf, memory, manifest",
    run_report};
