/* cmd_diff.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_diff(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 diff: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_diff = {"diff", "", "(not built yet)", run_diff};
