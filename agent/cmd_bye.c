/*
 * cmd_bye.c - {"cmd":"bye"}: stop every running stage (as on cancel),
 * emit their end events and a bye event, flush, compact the spool, exit 0.
 * (End of input is gentler: running stages finish first.)
 */
#include "agent.h"

static void run(struct agent *a, struct proto_cmd *cmd)
{
	(void)cmd;
	if (!a->quitting)
		a->quit_reason = "bye";
	a->quitting = a->stop_stages = 1;
}

const struct agent_cmd cmd_bye = {.name = "bye", .run = run};
