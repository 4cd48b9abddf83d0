/*
 * commands.c - the agent's command table, tmux-style: one file per
 * command (cmd_*.c), each exporting a `const struct agent_cmd`; this list
 * is indexed by proto.h's enum proto_cmd_kind, whose order is that of
 * proto_cmd_types (the parser already validated every field).
 */
#include "agent.h"

const struct agent_cmd *const agent_cmds[] = {
    [CMD_HELLO] = &cmd_hello,	[CMD_FACTS] = &cmd_facts, [CMD_RUN] = &cmd_run,
    [CMD_CANCEL] = &cmd_cancel, [CMD_ACK] = &cmd_ack,	  [CMD_BYE] = &cmd_bye,
};
