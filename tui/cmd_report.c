/* cmd_report.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_report(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 report: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_report = {"report", "", "(not built yet)", run_report};
