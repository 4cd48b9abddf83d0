/*
 * cmd_ack.c - {"cmd":"ack","seq":N}: the console's store holds every
 * event up to N; the spool may forget them.  An ack below the last one is
 * ignored; one beyond the last event is refused.
 */
#include "agent.h"

static void run(struct agent *a, struct proto_cmd *cmd)
{
	struct d0_err err;
	if (spool_ack(&a->spool, proto_int(cmd->obj, "seq", 0), &err) < 0)
		agent_error(a, "ack", NULL, 0, "%s", err.msg);
}

const struct agent_cmd cmd_ack = {.name = "ack", .run = run};
