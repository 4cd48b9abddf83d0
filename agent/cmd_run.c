/*
 * cmd_run.c - {"cmd":"run","stage_id":ID,"step":STEP,...}: start a stage
 * (stage.c does the work).  Engine steps: "args" (argv after the step;
 * --events is added when missing), "np" > 1 or "mpirun_args" for mpirun;
 * step "exec": "argv" with optional "cwd".  Both take "timeout" seconds.
 */
#include "agent.h"

static void run(struct agent *a, struct proto_cmd *cmd)
{
	stage_start(a, cmd->obj);
}

const struct agent_cmd cmd_run = {.name = "run", .run = run};
