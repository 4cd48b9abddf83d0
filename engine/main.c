/*
 * main.c - day0-engine: dispatch argv[1] to a registered step.
 */
#include "engine.h"

#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: day0-engine STEP [ARGS...]\n"
		   "       day0-engine STEP --help\n\nsteps:\n");
	for (int i = 0; step_table[i]; i++)
		fprintf(f, "  %-10s %s\n", step_table[i]->name,
			step_table[i]->summary);
	fprintf(f, "\nExit status: 0 ok, 1 a check failed, 2 usage or input "
		   "error.\n");
}

int main(int argc, char **argv)
{
	const struct step_entry *s;
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
		/* The build on a line of its own: the first line stays what
		 * older agents and reports read. */
		printf("day0-engine %s (protocol %d)\nbuild %s\n",
		       DAY0_VERSION, DAY0_PROTO_VERSION, d0_build_id());
		return EXIT_OK;
	}
	s = step_find(argv[1]);
	if (!s) {
		fprintf(stderr, "day0-engine: unknown step '%s'\n", argv[1]);
		usage(stderr);
		return EXIT_USAGE;
	}
	events_init(stdout, 0);
	return s->run(argc - 1, argv + 1);
}
