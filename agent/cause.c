/*
 * cause.c - why a stage failed, in one line (agent.h: struct stage_cause).
 *
 * A failed MPI stage's stderr ends with mpirun's help text ("Per
 * user-direction, the job has been aborted", "Set MCA parameter
 * orte_base_help_aggregate ..."), which says that something failed but not
 * what.  The engine said what a moment earlier: on a rank's stderr
 * ("day0-engine: rank 1: FILE: ...") or as an `error` log event.  So the
 * agent keeps, per rank, the last CAUSE_KEEP error lines, and the first
 * real cause of the stage: the first such line of a rank, or failing that
 * the first line of mpirun itself that is not its boilerplate (a launch
 * that never reached a rank: "Host key verification failed.").  The
 * stage's end event carries both ("cause", "errors"); the log keeps every
 * line, the help text included.
 */
#include "agent.h"

#include <stdlib.h>
#include <string.h>

/* mpirun's own boilerplate: framing and advice, never a cause. */
static int boilerplate(const char *s)
{
	static const char *const noise[] = {
	    "Per user-direction",
	    "orte_base_help_aggregate",
	    "help message",
	    "MCA parameter",
	    "Primary job",
	    "mpirun detected",
	    "mpirun noticed",
	    "prterun",
	    "job to be terminated",
	    "exited on signal",
	    "non-zero status",
	    "Process name:",
	    "Exit code:",
	    "MPI_ABORT was invoked",
	    "NOTE: invoking MPI_ABORT",
	    "You may or may not see output",
	    "exiting improperly",
	    NULL,
	};
	while (*s == ' ' || *s == '\t')
		s++;
	if (!*s || *s == '-' || *s == '=' || *s == '*')
		return 1;
	for (int i = 0; noise[i]; i++)
		if (strstr(s, noise[i]))
			return 1;
	return 0;
}

int cause_is_boilerplate(const char *line)
{
	return boilerplate(line);
}

void cause_free(struct stage_cause *c)
{
	free(c->ranks);
	memset(c, 0, sizeof *c);
}

static struct cause_rank *rank_slot(struct stage_cause *c, int rank)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->ranks[i].rank == rank)
			return &c->ranks[i];
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 4;
		struct cause_rank *na = realloc(c->ranks, nc * sizeof *na);
		if (!na)
			abort();
		c->ranks = na;
		c->cap = nc;
	}
	memset(&c->ranks[c->n], 0, sizeof c->ranks[c->n]);
	c->ranks[c->n].rank = rank;
	return &c->ranks[c->n++];
}

void cause_note(struct stage_cause *c, int rank, const char *line, size_t len)
{
	char text[CAUSE_LINE_MAX];
	struct cause_rank *r;
	if (len >= sizeof text)
		len = sizeof text - 1;
	memcpy(text, line, len);
	text[len] = 0;
	while (len && (text[len - 1] == '\r' || text[len - 1] == ' '))
		text[--len] = 0;
	if (boilerplate(text))
		return;
	r = rank_slot(c, rank);
	memcpy(r->line[r->head], text, len + 1);
	r->head = (r->head + 1) % CAUSE_KEEP;
	if (r->nline < CAUSE_KEEP)
		r->nline++;
	/* A rank's line beats mpirun's: mpirun's may only be the echo. */
	if (!c->first[0] || (c->first_rank < 0 && rank >= 0)) {
		memcpy(c->first, text, len + 1);
		c->first_rank = rank;
	}
}

void cause_to_json(const struct stage_cause *c, const char *node, json_t *end)
{
	json_t *errs;
	char msg[CAUSE_LINE_MAX + 128];
	if (!c->first[0])
		return;
	if (c->first_rank >= 0)
		snprintf(msg, sizeof msg, "rank %d on %s: %s", c->first_rank,
			 node, c->first);
	else
		snprintf(msg, sizeof msg, "mpirun on %s: %s", node, c->first);
	json_object_set_new(end, "cause", agent_text(msg));
	errs = json_array();
	for (size_t i = 0; i < c->n; i++) {
		const struct cause_rank *r = &c->ranks[i];
		json_t *lines = json_array();
		for (int k = 0; k < r->nline; k++) {
			int at = (r->head - r->nline + k + CAUSE_KEEP) % CAUSE_KEEP;
			json_array_append_new(lines, agent_text(r->line[at]));
		}
		json_array_append_new(errs, json_pack("{s:i, s:o}", "rank",
						      r->rank, "lines", lines));
	}
	json_object_set_new(end, "errors", errs);
}
