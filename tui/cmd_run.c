/*
 * cmd_run.c - `day0 run PLAYBOOK`: options, then runner_main().
 */
#include "console.h"
#include "runner.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "PLAYBOOK.json [--inventory INV.json] [--model DIR] [-e KEY=VALUE]... "
    "[--check] [--headless] [--session FILE.db] [--work DIR] "
    "[--known-hosts FILE] [--accept-new-host-keys] [--agent PATH] "
    "[--remote-agent PATH] [--connect-timeout SECS] [--sample-hz H] "
    "[--store-wait SECS] [--node-rate N] [--ascii] [--no-color] [--stats FILE]\n"
    "[--json] [--notify CMD] [--baseline auto|FILE.db]\n"
    "       day0 run --resume SESSION.db [--headless] [...]\n\n"
    "Reaches every node of the inventory (ssh or local), starts day0-agent "
    "there,\nruns the playbook's stages and records every event in one "
    "session file.\n\n"
    "  --inventory INV   the cluster (default: the playbook's "
    "\"inventory\")\n"
    "  --model DIR       the checkpoint, ${model} in the playbook\n"
    "  -e KEY=VALUE      set a playbook variable (wins over its \"vars\")\n"
    "  --check           print every node's agent and command lines, run "
    "nothing\n"
    "  --headless        one line per stage or check change (default when "
    "stdout\n"
    "                    is not a terminal), then the checklist\n"
    "  --session FILE    the session file (default: a new one in the "
    "session\n"
    "                    directory, see `day0 ls`)\n"
    "  --resume FILE     re-attach to the agents of a session whose console "
    "died\n"
    "                    and continue it\n"
    "  --work DIR        ${work} on the nodes (default "
    "/tmp/day0-work-USER/SESSION, 0700)\n"
    "  --known-hosts F   host keys (default ~/.ssh/known_hosts)\n"
    "  --accept-new-host-keys   record unknown host keys (never changed "
    "ones)\n"
    "  --agent PATH      the local day0-agent (default: next to day0)\n"
    "  --remote-agent P  ssh nodes run this agent, no deployment\n"
    "  --connect-timeout SECS   connect through auth, per node (default "
    "10)\n"
    "  --sample-hz H     agent samples per second (default 2)\n"
    "  --store-wait S    the session file cannot be written (a full "
    "disk): no acks,\n"
    "                    no new stages, retry; after S seconds (default "
    "60) end\n"
    "                    the run incomplete (exit 3; --resume it later)\n"
    "  --node-rate N     events a second one node may send before it is "
    "rate-limited\n"
    "                    (default 20000; its agent resends the rest "
    "later)\n"
    "  --tui             the live screens even when stdout is not a "
    "terminal\n"
    "  --ascii           ASCII glyphs only\n"
    "  --no-color        no colours\n"
    "  --stats FILE      write CPU share and redraw times on exit "
    "(benchmarks)\n"
    "  --json            at the end, the verdict and every checklist item "
    "with its\n"
    "                    evidence as JSON on stdout (the lines go to "
    "stderr): CI\n"
    "  --notify CMD      run `sh -c CMD` for each alert (node unreachable, "
    "stage\n"
    "                    failed, check failed) with the alert as JSON on "
    "stdin\n"
    "  --baseline B      at the end, `day0 diff B SESSION` (on stderr with "
    "--json);\n"
    "                    auto: the last GO session of the same playbook and "
    "model\n"
    "                    family (says which; none: exit 2 before running); a "
    "GO run\n"
    "                    with a regression against it exits 1\n\n"
    "Ctrl-C once shows what still runs where; twice within a second "
    "cancels.\n"
    "Exit status: 0 go (every required check passed), 1 no-go, 2 usage or "
    "input error,\n3 incomplete (the session file could not be written).\n\n"
    "Example:\n  day0 run playbooks/release-day.json --inventory "
    "cluster.json --model /models/new -e tp=8";

/*
 * --baseline auto: the last GO session of this playbook (its "name") and
 * model family (config.json's model_type of --model, -e model=, or the
 * playbook's "model"); on --resume, of the resumed session's.
 */
static int pick_baseline(const struct runner_opts *o, json_t *vars,
			 char *out, size_t max)
{
	struct d0_err err;
	char fam[128] = "";
	int rc;
	if (o->resume_path) {
		rc = session_baseline_auto(o->resume_path, out, max, &err);
	} else {
		json_t *pb = json_load_file(o->playbook_path, 0, NULL);
		const char *name = json_string_value(json_object_get(pb, "name"));
		const char *model = o->model;
		if (!model)
			model = json_string_value(json_object_get(vars, "model"));
		if (!model)
			model = json_string_value(json_object_get(pb, "model"));
		model_family_of(model, fam, sizeof fam);
		if (!name) {
			json_decref(pb);
			fprintf(stderr, "day0 run: --baseline auto: %s: no "
				"playbook name\n", o->playbook_path);
			return -1;
		}
		rc = session_baseline_find(name, fam, o->session_path, out, max,
					   &err);
		json_decref(pb);
	}
	if (rc < 0) {
		fprintf(stderr, "day0 run: --baseline auto: %s\n", err.msg);
		return -1;
	}
	fprintf(stderr, "day0 run: baseline: %s\n", out);
	return 0;
}

/* After the run: `day0 diff BASELINE SESSION`, on stderr with --json
 * (stdout holds the verdict's JSON). */
static int diff_baseline(const char *baseline, const char *session, int json)
{
	char *argv[] = {"diff", (char *)baseline, (char *)session, NULL};
	int saved = -1, rc;
	fflush(stdout);
	if (json) {
		saved = dup(STDOUT_FILENO);
		dup2(STDERR_FILENO, STDOUT_FILENO);
	}
	rc = cmd_diff.run(3, argv);
	fflush(stdout);
	if (saved >= 0) {
		dup2(saved, STDOUT_FILENO);
		close(saved);
	}
	return rc;
}

static int run(int argc, char **argv)
{
	struct runner_opts o;
	json_t *vars = json_object();
	const char *baseline = NULL;
	char picked[PATH_MAX], session[PATH_MAX] = "";
	int rc;
	memset(&o, 0, sizeof o);
	o.headless = -1;
	o.connect_timeout_s = 10;
	o.reconnect_s = 60;
	o.sample_hz = 2;
	o.store_wait_s = 60;
	o.argc = argc;
	o.argv = argv;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                \
	do {                                                                  \
		if (!v) {                                                     \
			json_decref(vars);                                    \
			return console_usage_error(&cmd_run,                  \
						   "%s needs a value", a);    \
		}                                                             \
		i++;                                                          \
	} while (0)
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			console_usage(&cmd_run, stdout);
			json_decref(vars);
			return EXIT_OK;
		} else if (!strcmp(a, "--inventory") || !strcmp(a, "-i")) {
			NEED();
			o.inventory_path = v;
		} else if (!strcmp(a, "--model")) {
			NEED();
			o.model = v;
		} else if (!strcmp(a, "-e")) {
			const char *eq;
			NEED();
			eq = strchr(v, '=');
			if (!eq || eq == v) {
				json_decref(vars);
				return console_usage_error(
				    &cmd_run, "-e wants KEY=VALUE, got '%s'", v);
			}
			{
				char *key = strndup(v, (size_t)(eq - v));
				json_object_set_new(vars, key,
						    json_string(eq + 1));
				free(key);
			}
		} else if (!strcmp(a, "--check")) {
			o.check_only = 1;
		} else if (!strcmp(a, "--headless")) {
			o.headless = 1;
		} else if (!strcmp(a, "--tui")) {
			o.headless = 0;
		} else if (!strcmp(a, "--session")) {
			NEED();
			o.session_path = v;
		} else if (!strcmp(a, "--resume")) {
			NEED();
			o.resume_path = v;
		} else if (!strcmp(a, "--work")) {
			NEED();
			o.work = v;
		} else if (!strcmp(a, "--known-hosts")) {
			NEED();
			o.known_hosts = v;
		} else if (!strcmp(a, "--accept-new-host-keys")) {
			o.accept_new_host_keys = 1;
		} else if (!strcmp(a, "--agent")) {
			NEED();
			o.agent_path = v;
		} else if (!strcmp(a, "--remote-agent")) {
			NEED();
			o.remote_agent = v;
		} else if (!strcmp(a, "--connect-timeout")) {
			NEED();
			o.connect_timeout_s = atoi(v);
			if (o.connect_timeout_s < 1 || o.connect_timeout_s > 600) {
				json_decref(vars);
				return console_usage_error(
				    &cmd_run,
				    "--connect-timeout wants 1..600 seconds");
			}
		} else if (!strcmp(a, "--sample-hz")) {
			char *end;
			NEED();
			o.sample_hz = strtod(v, &end);
			if (*end || o.sample_hz < 0 || o.sample_hz > 100) {
				json_decref(vars);
				return console_usage_error(
				    &cmd_run, "--sample-hz wants 0..100");
			}
		} else if (!strcmp(a, "--store-wait")) {
			char *end;
			long w;
			NEED();
			w = strtol(v, &end, 10);
			if (*end || w < 0 || w > 86400) {
				json_decref(vars);
				return console_usage_error(
				    &cmd_run, "--store-wait wants 0..86400 seconds");
			}
			o.store_wait_s = (int)w;
		} else if (!strcmp(a, "--node-rate")) {
			char *end;
			NEED();
			o.node_rate = strtod(v, &end);
			if (*end || !(o.node_rate >= 1 && o.node_rate <= 1e7)) {
				json_decref(vars);
				return console_usage_error(
				    &cmd_run, "--node-rate wants 1..10000000 events/s");
			}
		} else if (!strcmp(a, "--ascii")) {
			o.ascii = 1;
		} else if (!strcmp(a, "--no-color")) {
			o.no_color = 1;
		} else if (!strcmp(a, "--stats")) {
			NEED();
			o.stats_path = v;
		} else if (!strcmp(a, "--json")) {
			o.json = 1;
		} else if (!strcmp(a, "--notify")) {
			NEED();
			o.notify = v;
		} else if (!strcmp(a, "--baseline")) {
			NEED();
			baseline = v;
		} else if (a[0] == '-') {
			json_decref(vars);
			return console_usage_error(&cmd_run, "unknown option %s",
						   a);
		} else if (!o.playbook_path) {
			o.playbook_path = a;
		} else {
			json_decref(vars);
			return console_usage_error(&cmd_run,
						   "one playbook only ('%s')", a);
		}
#undef NEED
	}
	if (!o.playbook_path == !o.resume_path) {
		json_decref(vars);
		return console_usage_error(
		    &cmd_run, "give a PLAYBOOK or --resume SESSION.db");
	}
	if (o.json && o.headless < 0)
		o.headless = 1; /* stdout is for the JSON */
	if (o.headless < 0)
		o.headless = !isatty(1) || !isatty(0) || !getenv("TERM") ||
			     !strcmp(getenv("TERM"), "dumb");
	if (getenv("NO_COLOR") && *getenv("NO_COLOR"))
		o.no_color = 1;
	o.vars = vars;
	o.out = o.json ? stderr : stdout;
	if (baseline && !o.check_only) {
		if (!strcmp(baseline, "auto")) {
			if (pick_baseline(&o, vars, picked, sizeof picked) < 0) {
				json_decref(vars);
				return EXIT_USAGE;
			}
			baseline = picked;
		} else if (access(baseline, R_OK) < 0) {
			fprintf(stderr, "day0 run: --baseline: %s: %s\n",
				baseline, strerror(errno));
			json_decref(vars);
			return EXIT_USAGE;
		}
		o.session_out = session;
		o.session_out_max = sizeof session;
	}
	rc = runner_main(&o);
	json_decref(vars);
	/* a verdict was reached: compare with the baseline */
	if (baseline && session[0] && (rc == EXIT_OK || rc == EXIT_CHECK_FAILED)) {
		int drc = diff_baseline(baseline, session, o.json);
		if (drc == EXIT_CHECK_FAILED && rc == EXIT_OK) {
			fprintf(stderr, "day0 run: GO, but regressions against "
				"the baseline %s: exit 1\n", baseline);
			rc = EXIT_CHECK_FAILED;
		}
	}
	return rc;
}

const struct console_cmd cmd_run = {
    "run", usage_text,
    "run a playbook across the inventory's nodes (or --check it)", run};
