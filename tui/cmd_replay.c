/* cmd_replay.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_replay(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 replay: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_replay = {"replay", "", "(not built yet)", run_replay};
