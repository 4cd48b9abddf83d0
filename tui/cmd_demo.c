/*
 * cmd_demo.c - `day0 demo`: the release day on this machine.
 *
 * Generates a small Mixture-of-Experts checkpoint (the structure of
 * Qwen3-MoE, tiny sizes) and a one-node inventory with four CPU "cards"
 * (four MPI ranks), then runs playbooks/release-day.json on it: the TUI
 * when there is a terminal, headless otherwise.  Ends with where the
 * session file is and how to replay it.
 */
#include "console.h"
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char usage_text[] =
    "[--dir DIR] [--playbook FILE] [--headless] [--ascii] [--no-color] "
    "[--cards N] [--sample-hz H]\n\n"
    "Generates a tiny Qwen3-MoE checkpoint and a local inventory (one node, "
    "N cards of 128 MiB =\nN MPI ranks, default 4) in DIR (default /tmp/day0-demo), "
    "then runs the release-day\nplaybook on it with the live console (or "
    "headless when stdout is not a terminal).\n\n"
    "  --dir DIR         where the model, inventory and work go "
    "(default /tmp/day0-demo)\n"
    "  --playbook FILE   another playbook (default: release-day.json)\n"
    "  --headless        lines instead of the live screens\n"
    "  --ascii           ASCII glyphs only\n"
    "  --no-color        no colours\n"
    "  --cards N         local cards = MPI ranks, every one a rank of the "
    "layout\n"
    "                    (default 4: tp2 ep2; 1: tp1, 2: tp2, 3: pp3, 8: "
    "tp2 ep4, ...;\n"
    "                    --playbook: the playbook's own layout)\n"
    "  --sample-hz H     agent samples per second (default 4; 0..100)\n\n"
    "Example:\n  day0 demo --dir /tmp/d0 --headless";

/* The directory of the running program. */
static int exe_dir(char *out, size_t max)
{
	ssize_t n = readlink("/proc/self/exe", out, max - 1);
	char *slash;
	if (n <= 0)
		return -1;
	out[n] = 0;
	slash = strrchr(out, '/');
	if (!slash)
		return -1;
	*slash = 0;
	return 0;
}

/* playbooks/release-day.json from the source tree (build/day0 ->
 * ../playbooks) or an installed share directory. */
static int find_playbook(const char *name, char *out, size_t max)
{
	char dir[PATH_MAX];
	static const char *const rel[] = {"../playbooks", "../share/day0/playbooks",
					  "playbooks", NULL};
	if (exe_dir(dir, sizeof dir))
		return -1;
	for (int i = 0; rel[i]; i++) {
		if (rel[i][0] == '.' || i == 0)
			snprintf(out, max, "%.2000s/%s/%.200s", dir, rel[i], name);
		else
			snprintf(out, max, "%s/%.200s", rel[i], name);
		if (access(out, R_OK) == 0)
			return 0;
	}
	return -1;
}

static int run_engine(const char *engine, char *const argv[])
{
	pid_t pid = fork();
	int st;
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			close(fd);
		}
		execv(engine, argv);
		fprintf(stderr, "day0 demo: cannot run %s: %s\n", engine,
			strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/*
 * The demo model's layout on n cards: one rank a card (the launch starts
 * n), tp dividing its 4 heads, ep its 8 experts, pp at most its 4 layers;
 * the fewest stages, then tp 2 where it can be.  -1: none fits n.
 */
static int demo_layout(int n, int lay[3])
{
	static const int tps[] = {2, 1, 4};
	for (int pp = 1; pp <= 4; pp++) {
		if (n % pp)
			continue;
		for (int i = 0; i < 3; i++) {
			int m = n / pp, ep;
			if (m % tps[i])
				continue;
			ep = m / tps[i];
			if (ep == 1 || ep == 2 || ep == 4 || ep == 8) {
				lay[0] = tps[i];
				lay[1] = pp;
				lay[2] = ep;
				return 0;
			}
		}
	}
	return -1;
}

static int run(int argc, char **argv)
{
	const char *dir = "/tmp/day0-demo", *playbook = NULL;
	char pb[PATH_MAX], model[PATH_MAX], inv[PATH_MAX], engine[PATH_MAX];
	char exe[PATH_MAX];
	int headless = -1, ascii = 0, no_color = 0, cards = 4, rc;
	int lay[3] = {2, 1, 2};
	double hz = 4;
	struct runner_opts o;
	FILE *f;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--dir") && v)
			dir = argv[++i];
		else if (!strcmp(a, "--playbook") && v)
			playbook = argv[++i];
		else if (!strcmp(a, "--cards") && v) {
			char *end;
			long n = strtol(argv[++i], &end, 10);
			cards = *end || n < 1 || n > 64 ? -1 : (int)n;
			if (cards < 0 || demo_layout(cards, lay))
				return console_usage_error(
				    &cmd_demo,
				    "--cards: expected a number of cards the demo "
				    "model splits over (tp 1, 2 or 4 x pp 1..4 x ep "
				    "1, 2, 4 or 8): 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, "
				    "48 or 64; got '%s'",
				    argv[i]);
		} else if (!strcmp(a, "--sample-hz") && v) {
			char *end;
			hz = strtod(argv[++i], &end);
			if (*end || !(hz >= 0 && hz <= 100))
				return console_usage_error(
				    &cmd_demo, "--sample-hz: expected 0..100, got '%s'",
				    argv[i]);
		} else if (!strcmp(a, "--headless"))
			headless = 1;
		else if (!strcmp(a, "--tui"))
			headless = 0;
		else if (!strcmp(a, "--ascii"))
			ascii = 1;
		else if (!strcmp(a, "--no-color"))
			no_color = 1;
		else
			return console_usage_error(&cmd_demo,
						   "unknown argument '%s'", a);
	}
	if (playbook)
		snprintf(pb, sizeof pb, "%s", playbook);
	else if (find_playbook("release-day.json", pb, sizeof pb)) {
		fprintf(stderr, "day0 demo: cannot find playbooks/"
				"release-day.json next to this program (use "
				"--playbook FILE)\n");
		return EXIT_USAGE;
	}
	if (exe_dir(exe, sizeof exe)) {
		fprintf(stderr, "day0 demo: cannot locate this program\n");
		return EXIT_USAGE;
	}
	snprintf(engine, sizeof engine, "%.4000s/day0-engine", exe);
	if (mkdir(dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "day0 demo: %s: %s\n", dir, strerror(errno));
		return EXIT_USAGE;
	}
	snprintf(model, sizeof model, "%s/model", dir);
	snprintf(inv, sizeof inv, "%s/inventory.json", dir);

	/* 1. The model: Qwen3-MoE's structure, 8 experts top-2, 4 layers,
	 * stored as the FP8 releases are (e4m3 with block scales), so the
	 * day runs the quantised path: verify's scale checks, convert's
	 * dequantisation, the runtime's and the reference's decoders. */
	fprintf(stderr, "day0 demo: generating a tiny Qwen3-MoE FP8 checkpoint "
			"in %s ...\n",
		model);
	{
		char *const gen[] = {
		    engine,	   "gen-model", "--arch",     "qwen3_moe",
		    "--layers",	   "4",		"--hidden",   "128",
		    "--heads",	   "4",		"--kv-heads", "2",
		    "--head-dim",  "32",	"--ffn",      "256",
		    "--moe-ffn",   "64",	"--experts",  "8",
		    "--top-k",	   "2",		"--vocab",    "512",
		    "--quant",	   "fp8",	"--block",    "32",
		    "--shards",	   "3",		"--force",    model,
		    NULL};
		rc = run_engine(engine, gen);
		if (rc) {
			fprintf(stderr, "day0 demo: gen-model failed (exit %d)\n",
				rc);
			return EXIT_USAGE;
		}
	}
	/* 2. The inventory: this machine, N CPU cards of 128 MiB (the
	 * demo model needs ~10 MiB a card; a rank process ~30 MiB). */
	f = fopen(inv, "w");
	if (!f) {
		fprintf(stderr, "day0 demo: %s: %s\n", inv, strerror(errno));
		return EXIT_USAGE;
	}
	fprintf(f,
		"{\"name\": \"this-machine\",\n \"nodes\": [{\"name\": "
		"\"local\", \"transport\": \"local\", \"cards\": %d, "
		"\"card_mem\": \"128MiB\"}]}\n",
		cards);
	if (fclose(f)) {
		fprintf(stderr, "day0 demo: %s: %s\n", inv, strerror(errno));
		return EXIT_USAGE;
	}
	/* 3. The release day. */
	memset(&o, 0, sizeof o);
	o.playbook_path = pb;
	o.inventory_path = inv;
	o.model = model;
	o.vars = json_object();
	/* The layout: every card a rank of it (the launch starts one rank
	 * a card), release-day.json's tp2 ep2 on four.  Another playbook
	 * keeps its own (it may have no such variables). */
	if (!playbook) {
		char v[3][16];
		snprintf(v[0], sizeof v[0], "%d", lay[0]);
		snprintf(v[1], sizeof v[1], "%d", lay[1]);
		snprintf(v[2], sizeof v[2], "%d", lay[2]);
		json_object_set_new(o.vars, "tp", json_string(v[0]));
		json_object_set_new(o.vars, "pp", json_string(v[1]));
		json_object_set_new(o.vars, "ep", json_string(v[2]));
	}
	o.headless = headless >= 0 ? headless
				   : !isatty(1) || !isatty(0) ||
					 !getenv("TERM") ||
					 !strcmp(getenv("TERM"), "dumb");
	o.ascii = ascii;
	o.no_color = no_color || (getenv("NO_COLOR") && *getenv("NO_COLOR"));
	o.connect_timeout_s = 10;
	o.reconnect_s = 60;
	o.sample_hz = hz;
	o.argc = argc;
	o.argv = argv;
	o.out = stdout;
	{
		char work[PATH_MAX];
		snprintf(work, sizeof work, "%s/work", dir);
		o.work = work;
		rc = runner_main(&o);
	}
	json_decref(o.vars);
	return rc;
}

const struct console_cmd cmd_demo = {
    "demo", usage_text,
    "the release day on this machine: a generated MoE model, 4 local cards",
    run};
