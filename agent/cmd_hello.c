/*
 * cmd_hello.c - {"cmd":"hello"} or {"cmd":"hello","acked":N}: the
 * console introduces itself.  With acked (the last seq its store holds
 * with nothing missing before it), that is an ack, and everything after
 * it is sent again: the reconnect handshake.  Answered by a hello event.
 */
#include "agent.h"

static void run(struct agent *a, struct proto_cmd *cmd)
{
	json_t *acked = json_object_get(cmd->obj, "acked");
	if (acked) {
		struct d0_err err;
		if (spool_ack(&a->spool, json_integer_value(acked), &err) < 0) {
			agent_error(a, "hello", NULL, 0, "hello: %s", err.msg);
			return;
		}
		spool_rewind(&a->spool);
	}
	agent_hello(a);
}

const struct agent_cmd cmd_hello = {.name = "hello", .run = run};
