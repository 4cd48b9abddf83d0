/*
 * step_hostfile.c - `day0-engine hostfile --inventory INV.json`: the Open
 * MPI hostfile for a multi-node launch, one line per inventory node:
 * "HOST slots=CARDS".  The launch line is then
 *   mpirun --hostfile FILE -np N day0-engine run ...
 * Ranks fill hosts in order, so with TP <= cards per node a TP group
 * stays inside a node (layout.c puts tp fastest).
 */
#include "engine.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv);

const struct step_entry step_hostfile = {
	.name = "hostfile",
	.usage = "--inventory INV.json [--nodes SET]",
	.summary = "Open MPI hostfile (HOST slots=CARDS) from an inventory",
	.help = "  --inventory INV    the inventory (docs/inventory.md)\n"
	"  --nodes SET        only these nodes (a node set such as n[01-08])\n"
	"prints one line per node: HOST slots=CARDS (local nodes as localhost)\n"
	"example: day0-engine hostfile --inventory inv.json --nodes 'n[1-4]' > hosts",
	.run = run,
};

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"inventory", 1, 0, 'i'}, {"nodes", 1, 0, 'n'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_hostfile;
	const char *path = NULL, *only = NULL;
	struct inventory inv;
	struct d0_err err;
	char **names = NULL;
	size_t nn = 0;
	int ch, printed = 0;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (ch == 'i')
			path = optarg;
		else if (ch == 'n')
			only = optarg;
		else if (ch == 'h') {
			step_help(S);
			return EXIT_OK;
		} else
			return step_usage_error(S, "unknown option '%s'",
						argv[optind - 1]);
	}
	if (!path || optind != argc)
		return step_usage_error(S, "--inventory is required");
	if (inventory_load(path, &inv, &err) < 0 ||
	    (only && nodeset_expand(only, &names, &nn, &err) < 0)) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < inv.n; i++) {
		int keep = !only;
		for (size_t k = 0; k < nn; k++)
			keep |= !strcmp(names[k], inv.nodes[i].name);
		if (!keep)
			continue;
		printf("%s slots=%d\n",
		       !strcmp(inv.nodes[i].transport, "local") ? "localhost"
							       : inv.nodes[i].host,
		       inv.nodes[i].cards);
		printed++;
	}
	for (size_t k = 0; k < nn; k++)
		free(names[k]);
	free(names);
	inventory_free(&inv);
	if (!printed) {
		fprintf(stderr, "day0-engine: %s: no node matches --nodes %s\n",
			path, only);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}
