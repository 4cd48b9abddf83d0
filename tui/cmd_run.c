/* cmd_run.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_run(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 run: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_run = {"run", "", "(not built yet)", run_run};
