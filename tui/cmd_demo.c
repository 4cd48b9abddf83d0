/* cmd_demo.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_demo(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 demo: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_demo = {"demo", "", "(not built yet)", run_demo};
