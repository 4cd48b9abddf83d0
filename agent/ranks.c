/*
 * ranks.c - which node's card a rank of a cluster stage is.
 *
 * A card is (node, local index).  The console launches a cluster stage
 * with one mpirun on the first node, listing the hosts in inventory order
 * with their card counts; Open MPI fills each host's slots in that order,
 * so world rank r lives on the node whose slots cover r.  The console
 * sends that order in the run command as "ranks" ("n1:2,n2:2"); the agent
 * hands it to every rank as DAY0_RANKS (with DAY0_STAGE_ID), so:
 *   - the launching agent forwards a rank's card samples as its own only
 *     when the rank is on its node, with the local index as the card;
 *   - every agent finds the ranks running on its host that a cluster
 *     stage started elsewhere (their environment says so) and counts them
 *     as its own cards.
 */
#include "agent.h"

#include <stdlib.h>
#include <string.h>

int rank_card(const char *ranks, int rank, const char *node)
{
	const char *p = ranks;
	int first = 0;
	size_t nlen = strlen(node);
	if (!ranks || !*ranks || rank < 0)
		return RANK_UNMAPPED;
	while (*p) {
		const char *colon = strchr(p, ':'), *comma;
		char *end;
		long cards;
		if (!colon)
			return RANK_UNMAPPED;
		cards = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || cards < 0 || (*end && *end != ','))
			return RANK_UNMAPPED;
		comma = end;
		if (rank < first + cards)
			return (size_t)(colon - p) == nlen &&
					   !memcmp(p, node, nlen)
				   ? rank - first
				   : RANK_ELSEWHERE;
		first += (int)cards;
		p = *comma ? comma + 1 : comma;
	}
	return RANK_UNMAPPED;
}

int proc_environ_get(const char *env, size_t len, const char *key, char *out,
		     size_t max)
{
	size_t klen = strlen(key), i = 0;
	while (i < len) {
		const char *e = env + i;
		size_t n = strnlen(e, len - i);
		if (n > klen && e[klen] == '=' && !memcmp(e, key, klen)) {
			size_t vl = n - klen - 1;
			if (vl >= max)
				return -1;
			memcpy(out, e + klen + 1, vl);
			out[vl] = 0;
			return 0;
		}
		i += n + 1;
	}
	return -1;
}
