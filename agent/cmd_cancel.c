/*
 * cmd_cancel.c - {"cmd":"cancel","stage_id":ID}: SIGTERM every process of
 * the stage's session, SIGKILL what is left after a grace period; the
 * stage's end event then says "cancelled".
 */
#include "agent.h"

static void run(struct agent *a, struct proto_cmd *cmd)
{
	const char *id = proto_str(cmd->obj, "stage_id", "");
	struct stage *st = agent_find_stage(a, id);
	if (!st) {
		agent_error(a, "cancel", NULL, 0,
			    "cancel: no running stage '%.80s'", id);
		return;
	}
	stage_stop(a, st, STOP_CANCEL);
}

const struct agent_cmd cmd_cancel = {.name = "cancel", .run = run};
