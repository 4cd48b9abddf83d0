/*
 * main.c - day0, the console: dispatch argv[1] through console_cmds.
 */
#include "console.h"

#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: day0 COMMAND [ARGS...]\n"
		   "       day0 COMMAND --help\n\ncommands:\n");
	for (int i = 0; console_cmds[i]; i++)
		fprintf(f, "  %-8s %s\n", console_cmds[i]->name,
			console_cmds[i]->summary);
	fprintf(f, "\nStart with `day0 demo`.  Exit status: 0 ok (go), 1 a "
		   "check failed (no-go), 2 usage or input error,\n3 a run "
		   "incomplete (the session file could not be written: "
		   "--resume it).\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("day0 %s (protocol %d)\n", DAY0_VERSION,
		       DAY0_PROTO_VERSION);
		return EXIT_OK;
	}
	for (int i = 0; console_cmds[i]; i++) {
		const struct console_cmd *c = console_cmds[i];
		if (strcmp(argv[1], c->name))
			continue;
		for (int j = 2; j < argc; j++) {
			if (!strcmp(argv[j], "--"))
				break;
			if (!strcmp(argv[j], "--help") ||
			    !strcmp(argv[j], "-h")) {
				console_usage(c, stdout);
				return EXIT_OK;
			}
		}
		return c->run(argc - 1, argv + 1);
	}
	fprintf(stderr, "day0: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
