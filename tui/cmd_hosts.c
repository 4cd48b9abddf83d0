/* cmd_hosts.c - placeholder until its issue lands: refuses with a message. */
#include "console.h"

static int run_hosts(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "day0 hosts: not built yet\n");
	return EXIT_USAGE;
}

const struct console_cmd cmd_hosts = {"hosts", "", "(not built yet)", run_hosts};
