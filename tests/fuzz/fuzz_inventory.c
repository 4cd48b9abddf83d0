/*
 * fuzz_inventory.c - libFuzzer target for the inventory parser
 * (engine/inventory.c): the input is an inventory file's text, which
 * inventory_parse must load or refuse with a message naming it, never
 * crash; every node it accepts has a name, a host, a known transport, a
 * port and cards within their bounds, and no two share a name or an ssh
 * host:port.  The first line of the input, alone, also goes through
 * nodeset_expand (the node-set syntax is the densest grammar here).
 *
 *   make fuzz FUZZ_SECONDS=60    (seeded with tests/fuzz/inventory-corpus)
 */
#include "inventory.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_nodes(const struct inventory *inv)
{
	for (size_t i = 0; i < inv->n; i++) {
		const struct inv_node *n = &inv->nodes[i];
		if (!n->name[0] || !n->host[0] || n->port < 1 || n->port > 65535 ||
		    n->cards < 1 || n->cards > 4096 || !n->card_mem ||
		    (strcmp(n->transport, "ssh") && strcmp(n->transport, "local")))
			__builtin_trap();
		for (size_t j = 0; j < i; j++)
			if (!strcmp(n->name, inv->nodes[j].name) ||
			    (!strcmp(n->transport, "ssh") &&
			     !strcmp(inv->nodes[j].transport, "ssh") &&
			     n->port == inv->nodes[j].port &&
			     !strcmp(n->host, inv->nodes[j].host)))
				__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct inventory inv;
	struct d0_err err;
	const char *nl = memchr(data, '\n', size);
	size_t first = nl ? (size_t)(nl - (const char *)data) : size;
	char *set;
	err.msg[0] = 0;
	if (inventory_parse((const char *)data, size, "fuzz.json", &inv, &err) ==
	    0) {
		check_nodes(&inv);
		inventory_free(&inv);
	} else if (strncmp(err.msg, "fuzz.json", 9)) {
		__builtin_trap(); /* every refusal names the file */
	}
	if (first < 256 && (set = strndup((const char *)data, first))) {
		char **names;
		size_t n;
		size_t groups = 0;
		for (const char *q = set; *q; q++)
			groups += *q == '[';
		/* Three groups reach the expansion cap (16^4 names from four
		 * [01-16] already hit it); more only spend the fuzzer's time
		 * on malloc, not on the parser. */
		if (!memchr(set, 0, first) && groups <= 3 &&
		    nodeset_expand(set, &names, &n, &err) == 0) {
			for (size_t i = 0; i < n; i++)
				free(names[i]);
			free(names);
		}
		free(set);
	}
	return 0;
}
