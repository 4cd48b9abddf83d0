/*
 * main.c - day0-agent: options, then agent_run() (agent.c).
 *
 * The same binary serves both transports: `ssh host day0-agent ...` and
 * the console's fork/exec with pipes.  Commands arrive on stdin, events
 * leave on stdout, diagnostics go to stderr.
 */
#include "agent.h"
#include "simulate.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: day0-agent [--node NAME] [--spool DIR] [--sample-hz H]\n"
	       "                  [--cards N] [--card-mem SIZE] [--vendor "
	       "auto|nvml|cpu]\n"
	       "                  [--heartbeat SECS] [--engine PATH] "
	       "[--mpirun PATH] [--no-fsync]\n"
	       "                  [--takeover] [--simulate N]\n"
	       "       day0-agent --version | --help\n\n"
	       "Reads commands (JSON lines) on stdin and writes events (JSON "
	       "lines) on stdout;\n"
	       "every event is spooled in DIR until the console acks it. See "
	       "docs/protocol.md.\n\n"
	       "  --node NAME       name in every event (default: host name)\n"
	       "  --spool DIR       spool directory (default: "
	       "$XDG_STATE_HOME/day0/spool/NODE)\n"
	       "  --sample-hz H     samplers per second, 0 to disable "
	       "(default 1)\n"
	       "  --cards N         CPU cards when NVML has none (default 0)\n"
	       "  --card-mem SIZE   memory budget of one CPU card (default: "
	       "memory / N)\n"
	       "  --vendor V        auto (NVML if present, else CPU cards), "
	       "nvml or cpu\n"
	       "  --heartbeat SECS  heartbeat after this much silence "
	       "(default 5, 0: never)\n"
	       "  --engine PATH     day0-engine to run (default: next to "
	       "this program)\n"
	       "  --mpirun PATH     mpirun to run (default: mpirun)\n"
	       "  --no-fsync        do not sync the spool (throwaway spools "
	       "only)\n"
	       "  --takeover        if another agent holds the spool (a "
	       "reconnect), stop it\n"
	       "                    (its stages end) and take over; else "
	       "wait 2 s and fail\n"
	       "  --simulate N      report N simulated cards (memory "
	       "patterns, a leak, NIC\n"
	       "                    rates) instead of sampling /proc: "
	       "benchmarks, demos\n");
}

static int bad(const char *fmt, const char *arg)
{
	fprintf(stderr, "day0-agent: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	usage(stderr);
	return EXIT_USAGE;
}

static int parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		return -1;
	*out = v;
	return 0;
}

/* day0-engine next to this program, else the one in PATH. */
static void default_engine(char *out, size_t cap)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		char *slash;
		self[n] = 0;
		slash = strrchr(self, '/');
		if (slash) {
			snprintf(slash + 1,
				 sizeof self - (size_t)(slash + 1 - self),
				 "day0-engine");
			if (access(self, X_OK) == 0) {
				snprintf(out, cap, "%s", self);
				return;
			}
		}
	}
	snprintf(out, cap, "day0-engine");
}

/* `ENGINE --version`, first line, within 5 s; "" when it does not run. */
static void engine_version(const char *engine, char *out, size_t cap)
{
	int p[2];
	pid_t pid;
	size_t len = 0;
	struct timespec t0, t;
	out[0] = 0;
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 0);
		dup2(p[1], 1);
		dup2(devnull, 2);
		execlp(engine, engine, "--version", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd pf = {p[0], POLLIN, 0};
		ssize_t n;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec >= 5 || len + 1 >= cap)
			break;
		if (poll(&pf, 1, 200) <= 0)
			continue;
		n = read(p[0], out + len, cap - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(p[0]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	out[len] = 0;
	out[strcspn(out, "\n")] = 0;
	if (!proto_utf8_valid(out, strlen(out), NULL))
		out[0] = 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"node", 1, 0, 'n'},      {"spool", 1, 0, 's'},
	    {"sample-hz", 1, 0, 'z'}, {"cards", 1, 0, 'c'},
	    {"card-mem", 1, 0, 'm'},  {"vendor", 1, 0, 'V'},
	    {"heartbeat", 1, 0, 'b'}, {"engine", 1, 0, 'e'},
	    {"mpirun", 1, 0, 'M'},    {"no-fsync", 0, 0, 'F'},
	    {"takeover", 0, 0, 'T'},  {"version", 0, 0, 'v'},
	    {"help", 0, 0, 'h'},      {"simulate", 1, 0, 'S'},
	    {0, 0, 0, 0},
	};
	static struct agent a; /* big: keep it off the stack */
	struct d0_err err;
	const char *spool = NULL;
	int ch, rc;
	long l;
	uint64_t size;

	a.cfg.sample_hz = 1;
	a.cfg.heartbeat_s = 5;
	a.cfg.fsync = 1;
	snprintf(a.cfg.vendor, sizeof a.cfg.vendor, "auto");
	snprintf(a.cfg.mpirun, sizeof a.cfg.mpirun, "mpirun");
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			if (!*optarg || strlen(optarg) > PROTO_MAX_NODE ||
			    !proto_utf8_valid(optarg, strlen(optarg), NULL))
				return bad("--node: expected a name of 1-63 "
					   "bytes (the protocol's limit), got "
					   "'%s'",
					   optarg);
			snprintf(a.cfg.node, sizeof a.cfg.node, "%s", optarg);
			break;
		case 's':
			spool = optarg;
			break;
		case 'z':
			if (parse_double(optarg, 0, 1000, &a.cfg.sample_hz) < 0)
				return bad("--sample-hz: expected 0..1000, got "
					   "'%s'",
					   optarg);
			break;
		case 'b':
			if (parse_double(optarg, 0, 86400, &a.cfg.heartbeat_s) <
			    0)
				return bad("--heartbeat: expected seconds "
					   "0..86400, got '%s'",
					   optarg);
			break;
		case 'c':
			if (parse_long(optarg, 0, 4096, &l) < 0)
				return bad(
				    "--cards: expected 0..4096, got '%s'",
				    optarg);
			a.cfg.cards = (int)l;
			break;
		case 'm':
			if (parse_size(optarg, &size) < 0 || size == 0)
				return bad(
				    "--card-mem: expected a size such as "
				    "16G, got '%s'",
				    optarg);
			a.cfg.card_mem = size;
			break;
		case 'V':
			if (strcmp(optarg, "auto") && strcmp(optarg, "nvml") &&
			    strcmp(optarg, "cpu"))
				return bad("--vendor: expected auto, nvml or "
					   "cpu, got '%s'",
					   optarg);
			snprintf(a.cfg.vendor, sizeof a.cfg.vendor, "%s",
				 optarg);
			break;
		case 'e':
			snprintf(a.cfg.engine, sizeof a.cfg.engine, "%s",
				 optarg);
			break;
		case 'M':
			snprintf(a.cfg.mpirun, sizeof a.cfg.mpirun, "%s",
				 optarg);
			break;
		case 'F':
			a.cfg.fsync = 0;
			break;
		case 'T':
			a.cfg.takeover = 1;
			break;
		case 'S':
			if (parse_long(optarg, 1, 4096, &l) < 0)
				return bad("--simulate: expected 1..4096 "
					   "cards, got '%s'",
					   optarg);
			simulate_cards = (int)l;
			break;
		case 'v':
			printf("day0-agent %s (protocol %d)\n", DAY0_VERSION,
			       PROTO_VERSION);
			return EXIT_OK;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			return bad("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return bad("unexpected argument '%s'", argv[optind]);
	if (simulate_cards) {
		/* the simulated cards are the node's cards: hello and facts
		 * report them (as CPU cards, 80 GiB unless --card-mem) */
		a.cfg.cards = simulate_cards;
		if (!a.cfg.card_mem)
			a.cfg.card_mem = 80ULL << 30;
		snprintf(a.cfg.vendor, sizeof a.cfg.vendor, "cpu");
	}
	if (!a.cfg.node[0] &&
	    gethostname(a.cfg.node, sizeof a.cfg.node - 1) < 0)
		snprintf(a.cfg.node, sizeof a.cfg.node, "localhost");
	a.cfg.node[PROTO_MAX_NODE] = 0; /* a long host name, cut to fit */
	if (spool) {
		snprintf(a.cfg.spool_dir, sizeof a.cfg.spool_dir, "%s", spool);
	} else {
		const char *state = getenv("XDG_STATE_HOME"),
			   *home = getenv("HOME");
		if (state && *state)
			snprintf(a.cfg.spool_dir, sizeof a.cfg.spool_dir,
				 "%s/day0/spool/%s", state, a.cfg.node);
		else
			snprintf(a.cfg.spool_dir, sizeof a.cfg.spool_dir,
				 "%s/.local/state/day0/spool/%s",
				 home && *home ? home : "/tmp", a.cfg.node);
	}
	if (!a.cfg.engine[0])
		default_engine(a.cfg.engine, sizeof a.cfg.engine);
	engine_version(a.cfg.engine, a.engine_version, sizeof a.engine_version);

	if (cards_init(&a.cards, &a.cfg, &err) < 0) {
		fprintf(stderr, "day0-agent: %s\n", err.msg);
		return EXIT_USAGE;
	}
	if (spool_open(&a.spool, a.cfg.spool_dir, a.cfg.node, a.cfg.fsync,
		       a.cfg.takeover, &err) < 0) {
		fprintf(stderr, "day0-agent: %s\n", err.msg);
		cards_shutdown(&a.cards);
		return EXIT_USAGE;
	}
	rc = agent_run(&a);
	for (int i = 0; i < a.nstages; i++)
		stage_free(a.stages[i]);
	for (size_t i = 0; i < a.nunlink; i++)
		free(a.unlink_after_commit[i]);
	free(a.unlink_after_commit);
	spool_close(&a.spool);
	cards_shutdown(&a.cards);
	return rc;
}
