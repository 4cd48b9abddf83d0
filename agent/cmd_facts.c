/*
 * cmd_facts.c - {"cmd":"facts","dir":D,"require":{...}}: a facts event
 * for the host (free disk measured on dir), then the `facts` check: fail
 * when a requirement is not met (require: cores, mem_bytes, disk_free,
 * cards, card_mem, all integers), warn when a version is unknown, pass
 * otherwise.
 */
#include "agent.h"

#include <string.h>

static const char *const require_keys[] = {"cores", "mem_bytes", "disk_free",
					   "cards", "card_mem",	 NULL};

static void run(struct agent *a, struct proto_cmd *cmd)
{
	json_t *require = json_object_get(cmd->obj, "require"), *v, *facts;
	const char *key, *status;
	char detail[1024];
	int problems;
	json_object_foreach(require, key, v)
	{
		int known = 0;
		for (int i = 0; require_keys[i]; i++)
			known |= !strcmp(key, require_keys[i]);
		if (!known || !json_is_integer(v) ||
		    json_integer_value(v) < 0) {
			agent_refuse(a, "facts", proto_str(cmd->obj, "stage_id", NULL),
				    "facts: require: '%.60s': expected one of "
				    "cores, mem_bytes, disk_free, cards, "
				    "card_mem with an integer >= 0",
				    key);
			return;
		}
	}
	facts = facts_collect(a, proto_str(cmd->obj, "dir", NULL));
	facts_check(facts, require, &status, detail, sizeof detail, &problems);
	agent_emit(a, "facts", facts, 0);
	{
		/* The stage_id the console gave: the evidence's stage. */
		json_t *chk = json_pack("{s:s, s:s, s:s}", "item", "facts",
					"status", status, "detail", detail);
		const char *sid = proto_str(cmd->obj, "stage_id", NULL);
		if (sid)
			json_object_set_new(chk, "stage_id", json_string(sid));
		agent_emit(a, "check", chk, 0);
	}
}

const struct agent_cmd cmd_facts = {.name = "facts", .run = run};
