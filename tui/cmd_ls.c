/* cmd_ls.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_ls(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 ls: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_ls = {"ls", "", "(not built yet)", run_ls};
