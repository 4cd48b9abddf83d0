/* Playbook files: validation messages name the JSON path, order, ${vars}. */
#include "playbook.h"
#include "unit.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

static struct d0_err err;

/* Parse text; 1 when it is refused with a message containing want. */
static int refused(const char *text, const char *want)
{
	struct playbook pb;
	memset(&err, 0, sizeof err);
	if (playbook_parse(text, "pb.json", &pb, &err) == 0) {
		printf("# accepted: %s\n", text);
		playbook_free(&pb);
		return 0;
	}
	if (!strstr(err.msg, want) || strncmp(err.msg, "pb.json", 7)) {
		printf("# message: %s\n# wanted: %s\n", err.msg, want);
		return 0;
	}
	return 1;
}

/* One stage wrapped into a playbook. */
static int stage_refused(const char *stage, const char *want)
{
	char text[2048];
	snprintf(text, sizeof text, "{\"stages\": [%s]}", stage);
	return refused(text, want);
}

static const char *lookup(void *arg, const char *name)
{
	(void)arg;
	if (!strcmp(name, "model"))
		return "/m";
	if (!strcmp(name, "tp"))
		return "2";
	if (!strcmp(name, "empty"))
		return "";
	return NULL;
}

static const char *valid =
    "{\"name\": \"t\", \"description\": \"d\", \"model\": \"/models/x\",\n"
    " \"inventory\": \"inv.json\", \"vars\": {\"tp\": 2, \"p\": \"1,2\"},\n"
    " \"policy\": {\"max_fail_percentage\": 25},\n"
    " \"stages\": [\n"
    "  {\"id\": \"verify\", \"step\": \"verify\", \"needs\": [\"facts\"],\n"
    "   \"args\": [\"${model}\", \"--tp\", \"${tp}\"], \"timeout\": 60.5,\n"
    "   \"retries\": 2, \"required\": false, \"description\": \"v\",\n"
    "   \"checks\": {\"weights.integrity\": {},\n"
    "              \"weights.metadata\": {\"required\": false, \"min\": 1,\n"
    "                                  \"max\": 9.5}}},\n"
    "  {\"id\": \"comm\", \"step\": \"comm\", \"on\": \"cluster\", \"np\": 4,\n"
    "   \"needs\": [\"verify\"], \"mpirun_args\": [\"--bind-to\", \"none\"]},\n"
    "  {\"id\": \"ref\", \"step\": \"exec\", \"on\": \"n[01-02]\",\n"
    "   \"argv\": [\"python3\", \"x.py\", \"$${HOME}\"], \"cwd\": \"${work}\"},\n"
    "  {\"id\": \"facts\", \"step\": \"facts\", \"on\": \"first\",\n"
    "   \"require\": {\"cores\": 2, \"cards\": 1}}]}\n";

int main(void)
{
	struct playbook pb;
	char out[256];
	int rc;

	/* a valid playbook and its fields */
	rc = playbook_parse(valid, "v.json", &pb, &err);
	if (rc < 0)
		printf("# %s\n", err.msg);
	CHECK(rc == 0);
	if (rc == 0) {
		CHECK(!strcmp(pb.name, "t") && !strcmp(pb.description, "d"));
		CHECK(!strcmp(pb.model, "/models/x"));
		CHECK(!strcmp(pb.inventory, "inv.json"));
		CHECK(!strcmp(json_string_value(json_object_get(pb.vars, "tp")),
			      "2"));
		CHECK(pb.fail_fast == 0 && pb.max_fail_pct == 25);
		CHECK(pb.n == 4);
		CHECK(playbook_stage(&pb, "comm") == 1);
		CHECK(playbook_stage(&pb, "nope") == -1);
		CHECK(pb.stages[0].on == PB_ON_ALL);
		CHECK(pb.stages[0].n_args == 3 &&
		      !strcmp(pb.stages[0].args[2], "${tp}"));
		CHECK(pb.stages[0].timeout == 60.5 && pb.stages[0].retries == 2);
		CHECK(pb.stages[0].required == 0);
		CHECK(pb.stages[0].n_needs == 1 && pb.stages[0].needs[0] == 3);
		CHECK(pb.stages[0].n_checks == 2);
		CHECK(!strcmp(pb.stages[0].checks[0].item,
			      "weights.integrity") &&
		      pb.stages[0].checks[0].required == 1 &&
		      !pb.stages[0].checks[0].has_min);
		CHECK(pb.stages[0].checks[1].required == 0 &&
		      pb.stages[0].checks[1].has_min &&
		      pb.stages[0].checks[1].min == 1 &&
		      pb.stages[0].checks[1].max == 9.5);
		CHECK(pb.stages[1].on == PB_ON_CLUSTER && pb.stages[1].np == 4);
		CHECK(pb.stages[1].n_mpirun_args == 2);
		CHECK(pb.stages[1].required == 1);
		CHECK(pb.stages[2].on == PB_ON_SET &&
		      !strcmp(pb.stages[2].on_set, "n[01-02]"));
		CHECK(pb.stages[2].n_argv == 3 &&
		      !strcmp(pb.stages[2].cwd, "${work}"));
		CHECK(pb.stages[3].on == PB_ON_FIRST &&
		      json_integer_value(json_object_get(pb.stages[3].require,
							 "cores")) == 2);
		/* facts just before verify (which needs it), then file
		 * order */
		CHECK(pb.order[0] == 3 && pb.order[1] == 0 &&
		      pb.order[2] == 1 && pb.order[3] == 2);
		CHECK(pb.doc != NULL);
		playbook_free(&pb);
	}

	/* defaults */
	rc = playbook_parse("{\"stages\": [{\"id\": \"a\", \"step\": "
			    "\"facts\"}]}",
			    "dir/quick.json", &pb, &err);
	CHECK(rc == 0);
	if (rc == 0) {
		CHECK(!strcmp(pb.name, "quick"));
		CHECK(pb.fail_fast == 1 && pb.max_fail_pct == -1);
		CHECK(pb.stages[0].on == PB_ON_ALL && pb.stages[0].required);
		CHECK(json_object_size(pb.vars) == 0);
		playbook_free(&pb);
	}

	/* stable order: independent stages stay in file order */
	rc = playbook_parse(
	    "{\"stages\": [{\"id\": \"c\", \"step\": \"facts\", \"needs\": "
	    "[\"b\"]}, {\"id\": \"a\", \"step\": \"facts\"}, {\"id\": \"b\", "
	    "\"step\": \"facts\", \"needs\": [\"a\"]}, {\"id\": \"d\", "
	    "\"step\": \"facts\"}]}",
	    "o.json", &pb, &err);
	CHECK(rc == 0);
	if (rc == 0) {
		/* c needs b needs a: a, b, c, then d */
		CHECK(pb.order[0] == 1 && pb.order[1] == 2 &&
		      pb.order[2] == 0 && pb.order[3] == 3);
		playbook_free(&pb);
	}

	/* syntax errors carry jansson's line and column */
	CHECK(refused("{\"stages\": [\n  {\"id\": }]}", "pb.json:2:"));
	CHECK(refused("{\"name\": \"a\", \"name\": \"b\", \"stages\": []}",
		      "duplicate"));
	CHECK(refused("[]", "a playbook is a JSON object"));
	CHECK(refused("{\"stages\": []}", "stages: expected a non-empty"));
	CHECK(refused("{\"name\": \"x\"}", "missing 'stages'"));
	CHECK(refused("{\"nmae\": \"x\", \"stages\": []}",
		      "unknown key 'nmae'"));
	CHECK(refused("{\"name\": 3, \"stages\": []}",
		      "name: expected a string"));

	/* stage keys and types */
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\"}, "
			    "{\"id\": \"b\", \"step\": \"facts\", \"neds\": []}",
			    "stages[1]: unknown key 'neds'"));
	CHECK(stage_refused("3", "stages[0]: expected an object"));
	CHECK(stage_refused("{\"step\": \"facts\"}", "stages[0]: missing 'id'"));
	CHECK(stage_refused("{\"id\": \"a\"}", "stages[0]: missing 'step'"));
	CHECK(stage_refused("{\"id\": \".a\", \"step\": \"facts\"}",
			    "stages[0].id: expected"));
	CHECK(stage_refused("{\"id\": \"-a\", \"step\": \"facts\"}",
			    "stages[0].id"));
	CHECK(stage_refused("{\"id\": \"a b\", \"step\": \"facts\"}",
			    "stages[0].id"));
	CHECK(stage_refused("{\"id\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\", \"step\": "
			    "\"facts\"}",
			    "stages[0].id"));
	CHECK(stage_refused("{\"id\": 1, \"step\": \"facts\"}",
			    "stages[0].id"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\"}, "
			    "{\"id\": \"a\", \"step\": \"facts\"}",
			    "stages[1].id: duplicate id 'a'"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"soak2\"}",
			    "stages[0].step: unknown step 'soak2' "
			    "(day0-engine has: gen-model"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": 7}",
			    "stages[0].step: expected a string"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\", \"needs\": "
			    "\"b\"}",
			    "stages[0].needs: expected an array"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\"}, {\"id\": "
			    "\"b\", \"step\": \"facts\"}, {\"id\": \"c\", "
			    "\"step\": \"facts\"}, {\"id\": \"d\", \"step\": "
			    "\"facts\", \"needs\": [\"verfy\"]}",
			    "stages[3].needs[0]: no stage 'verfy'"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\"}, {\"id\": "
			    "\"b\", \"step\": \"facts\", \"needs\": [\"a\", "
			    "\"a\"]}",
			    "stages[1].needs[1]: 'a' listed twice"));
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\", \"needs\": "
			    "[3]}",
			    "stages[0].needs[0]: expected a stage id"));
	/* cycles name the loop */
	CHECK(stage_refused("{\"id\": \"a\", \"step\": \"facts\", \"needs\": "
			    "[\"c\"]}, {\"id\": \"b\", \"step\": \"facts\", "
			    "\"needs\": [\"a\"]}, {\"id\": \"c\", \"step\": "
			    "\"facts\", \"needs\": [\"b\"]}",
			    "dependency cycle: "));
	CHECK(stage_refused("{\"id\": \"x\", \"step\": \"facts\"}, {\"id\": "
			    "\"a\", \"step\": \"facts\", \"needs\": [\"x\", "
			    "\"b\"]}, {\"id\": \"b\", \"step\": \"facts\", "
			    "\"needs\": [\"a\"]}",
			    "cycle: a -> b -> a"));
	CHECK(stage_refused("{\"id\": \"s\", \"step\": \"facts\", \"needs\": "
			    "[\"s\"]}",
			    "stages[0].needs[0]: dependency cycle: s -> s"));

	/* exec / facts / engine argument rules */
	CHECK(stage_refused("{\"id\": \"e\", \"step\": \"exec\"}",
			    "stages[0]: exec stage without 'argv'"));
	CHECK(stage_refused("{\"id\": \"e\", \"step\": \"exec\", \"argv\": []}",
			    "stages[0].argv: empty"));
	CHECK(stage_refused("{\"id\": \"e\", \"step\": \"exec\", \"argv\": "
			    "[\"ls\"], \"args\": [\"x\"]}",
			    "stages[0].args: exec stages take 'argv'"));
	CHECK(stage_refused("{\"id\": \"e\", \"step\": \"exec\", \"argv\": "
			    "[\"ls\", 3]}",
			    "stages[0].argv[1]: expected a string"));
	CHECK(stage_refused("{\"id\": \"f\", \"step\": \"facts\", \"args\": "
			    "[\"x\"]}",
			    "stages[0].args: facts stages take no arguments"));
	CHECK(stage_refused("{\"id\": \"f\", \"step\": \"facts\", \"argv\": "
			    "[\"x\"]}",
			    "stages[0].argv: only exec stages"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"argv\": "
			    "[\"x\"]}",
			    "stages[0].argv: only exec stages"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"args\": "
			    "\"x\"}",
			    "stages[0].args: expected an array of strings"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"args\": "
			    "[\"--iters\", 5]}",
			    "stages[0].args[1]: expected a string"));
	CHECK(stage_refused("{\"id\": \"f\", \"step\": \"facts\", \"on\": "
			    "\"cluster\"}",
			    "stages[0].on: facts runs"));
	CHECK(stage_refused("{\"id\": \"f\", \"step\": \"facts\", \"np\": 2}",
			    "stages[0]: facts stages take no 'np'"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"require\":"
			    " {}}",
			    "stages[0].require: only facts"));
	CHECK(stage_refused("{\"id\": \"f\", \"step\": \"facts\", \"require\": "
			    "{\"gpus\": 1}}",
			    "stages[0].require: unknown requirement 'gpus'"));
	CHECK(stage_refused("{\"id\": \"f\", \"step\": \"facts\", \"require\": "
			    "{\"cores\": -1}}",
			    "stages[0].require.cores: expected an integer"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", "
			    "\"mpirun_args\": [\"-x\"]}",
			    "stages[0].mpirun_args: only 'cluster'"));

	/* on */
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"on\": "
			    "\"n[03-01]\"}",
			    "stages[0].on: 'n[03-01]' is not all"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"on\": "
			    "\"n[01-\"}",
			    "stages[0].on:"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"on\": 1}",
			    "stages[0].on: expected all, first"));

	/* numbers */
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"np\": -1}",
			    "stages[0].np: expected an integer"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"np\": 1.5}",
			    "stages[0].np"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"timeout\": "
			    "-1}",
			    "stages[0].timeout: expected seconds"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"timeout\": "
			    "\"1h\"}",
			    "stages[0].timeout"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"retries\": "
			    "11}",
			    "stages[0].retries: expected an integer 0..10"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"required\": "
			    "1}",
			    "stages[0].required: expected true or false"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"cwd\": 1}",
			    "stages[0].cwd: expected a string"));

	/* checks */
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "[]}",
			    "stages[0].checks: expected an object"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwith\": {}}}",
			    "stages[0].checks: unknown checklist item "
			    "'comm.bandwith'"));
	/* the registry says which steps produce an item */
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"checks\": "
			    "{\"numerics.e2e\": {}}}",
			    "stages[0].checks.numerics.e2e: step verify does "
			    "not produce numerics.e2e (produced by validate)"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"validate\", \"checks\": "
			    "{\"rehearsal.numerics.e2e\": {}}}",
			    "stages[0].checks: unknown checklist item "
			    "'rehearsal.numerics.e2e'"));
	CHECK(stage_refused("{\"id\": \"v.2\", \"step\": \"comm\"}",
			    "stages[0].id: 'v.2' ends like an attempt of "
			    "stage 'v'"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", "
			    "\"rehearsal\": 1}",
			    "stages[0].rehearsal: expected true or false"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwidth\": true}}",
			    "stages[0].checks.comm.bandwidth: expected an "
			    "object"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwidth\": {\"mni\": 1}}}",
			    "stages[0].checks.comm.bandwidth: unknown key "
			    "'mni'"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwidth\": {\"min\": \"1\"}}}",
			    "stages[0].checks.comm.bandwidth: 'min' must be"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwidth\": {\"max\": null}}}",
			    "'max' must be a number"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwidth\": {\"required\": 0}}}",
			    "'required' must be true or false"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"checks\": "
			    "{\"comm.bandwidth\": {\"min\": 2, \"max\": 1}}}",
			    "'min' 2 is above 'max' 1"));

	/* policy */
	CHECK(refused("{\"policy\": {\"fail_fast\": true, "
		      "\"max_fail_percentage\": 5}, \"stages\": [{\"id\": "
		      "\"a\", \"step\": \"facts\"}]}",
		      "policy: fail_fast and max_fail_percentage"));
	CHECK(refused("{\"policy\": {\"max_fail_percentage\": 101}, "
		      "\"stages\": [{\"id\": \"a\", \"step\": \"facts\"}]}",
		      "policy.max_fail_percentage: expected a number 0..100"));
	CHECK(refused("{\"policy\": {\"fail_fast\": 1}, \"stages\": [{\"id\": "
		      "\"a\", \"step\": \"facts\"}]}",
		      "policy.fail_fast: expected true or false"));
	CHECK(refused("{\"policy\": {\"fast\": true}, \"stages\": [{\"id\": "
		      "\"a\", \"step\": \"facts\"}]}",
		      "policy: unknown key 'fast'"));
	CHECK(refused("{\"policy\": true, \"stages\": [{\"id\": \"a\", "
		      "\"step\": \"facts\"}]}",
		      "policy: expected"));
	rc = playbook_parse("{\"policy\": {\"fail_fast\": false}, \"stages\": "
			    "[{\"id\": \"a\", \"step\": \"facts\"}]}",
			    "p.json", &pb, &err);
	CHECK(rc == 0 && pb.fail_fast == 0 && pb.max_fail_pct == -1);
	if (rc == 0)
		playbook_free(&pb);

	/* vars and references */
	CHECK(refused("{\"vars\": [], \"stages\": [{\"id\": \"a\", \"step\": "
		      "\"facts\"}]}",
		      "vars: expected an object"));
	CHECK(refused("{\"vars\": {\"x\": 1.5}, \"stages\": [{\"id\": \"a\", "
		      "\"step\": \"facts\"}]}",
		      "vars.x: expected a string or an integer"));
	CHECK(refused("{\"vars\": {\"model\": \"x\"}, \"stages\": [{\"id\": "
		      "\"a\", \"step\": \"facts\"}]}",
		      "vars.model: 'model' is a built-in"));
	CHECK(refused("{\"vars\": {\"a-b\": \"x\"}, \"stages\": [{\"id\": "
		      "\"a\", \"step\": \"facts\"}]}",
		      "vars.a-b: a variable name"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"args\": "
			    "[\"${model}\", \"${tpp}\"]}",
			    "stages[0].args[1]: unknown variable '${tpp}'"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"verify\", \"args\": "
			    "[\"${model\"]}",
			    "stages[0].args[0]: unterminated '${'"));
	CHECK(stage_refused("{\"id\": \"e\", \"step\": \"exec\", \"argv\": "
			    "[\"ls\"], \"cwd\": \"${nowhere}\"}",
			    "stages[0].cwd: unknown variable '${nowhere}'"));
	CHECK(stage_refused("{\"id\": \"v\", \"step\": \"comm\", \"on\": "
			    "\"cluster\", \"mpirun_args\": [\"${x}\"]}",
			    "stages[0].mpirun_args[0]: unknown variable"));

	/* expand */
	CHECK(playbook_expand("${model}/conv-tp${tp}", lookup, NULL, "w", out,
			      sizeof out, &err) == 0 &&
	      !strcmp(out, "/m/conv-tp2"));
	CHECK(playbook_expand("a$$b$${model}$", lookup, NULL, "w", out,
			      sizeof out, &err) == 0 &&
	      !strcmp(out, "a$b${model}$"));
	CHECK(playbook_expand("x${empty}y", lookup, NULL, "w", out, sizeof out,
			      &err) == 0 &&
	      !strcmp(out, "xy"));
	CHECK(playbook_expand("", lookup, NULL, "w", out, sizeof out, &err) ==
		  0 &&
	      !strcmp(out, ""));
	CHECK(playbook_expand("$x ${model}", lookup, NULL, "w", out,
			      sizeof out, &err) == 0 &&
	      !strcmp(out, "$x /m"));
	CHECK(playbook_expand("${nope}", lookup, NULL, "stages[1].args[0]",
			      out, sizeof out, &err) < 0 &&
	      strstr(err.msg, "stages[1].args[0]: unknown variable '${nope}'"));
	CHECK(playbook_expand("x${model", lookup, NULL, "w", out, sizeof out,
			      &err) < 0 &&
	      strstr(err.msg, "unterminated '${'"));
	CHECK(playbook_expand("${}", lookup, NULL, "w", out, sizeof out,
			      &err) < 0 &&
	      strstr(err.msg, "bad variable name"));
	CHECK(playbook_expand("${model}${model}", lookup, NULL, "w", out, 4,
			      &err) < 0 &&
	      strstr(err.msg, "longer than 3 bytes"));
	CHECK(playbook_expand("${model}", lookup, NULL, "w", out, 3, &err) ==
		  0 &&
	      !strcmp(out, "/m"));

	/* missing file */
	CHECK(playbook_load("/nonexistent/pb.json", &pb, &err) < 0 &&
	      strstr(err.msg, "/nonexistent/pb.json"));

	/* every shipped playbook loads */
	{
		const char *root = getenv("DAY0_ROOT");
		char pat[4096];
		glob_t g;
		snprintf(pat, sizeof pat, "%s/playbooks/*.json",
			 root && *root ? root : ".");
		CHECK(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc >= 4);
		for (size_t i = 0; i < g.gl_pathc; i++) {
			char name[4200];
			rc = playbook_load(g.gl_pathv[i], &pb, &err);
			snprintf(name, sizeof name, "%s loads", g.gl_pathv[i]);
			if (rc < 0)
				printf("# %s\n", err.msg);
			CHECKN(name, rc == 0);
			/* release-day's like-* stages are its rehearsal */
			if (rc == 0 && strstr(g.gl_pathv[i], "release-day"))
				for (size_t k = 0; k < pb.n; k++)
					CHECKN(pb.stages[k].id,
					       pb.stages[k].rehearsal ==
						   !strncmp(pb.stages[k].id,
							    "like-", 5));
			if (rc == 0)
				playbook_free(&pb);
		}
		globfree(&g);
	}
	return unit_done();
}
