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
#include <sys/stat.h>
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
	       "                  [--takeover] [--simulate N] [--work DIR] [--net-if LIST]\n"
	       "                  [--sim-model CONFIG] [--sim-disk GBPS] "
	       "[--sim-link GBPS]\n"
	       "                  [--sim-scale F] [--fail SPEC] "
	       "[--sim-straggler NODES] [--sim-seed S]\n"
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
	       "  --net-if LIST     interfaces net.rx_bps/net.tx_bps count, "
	       "comma-separated\n"
	       "                    (default: all but lo; the console passes "
	       "lo for loopback\n"
	       "                    nodes, whose traffic only lo carries)\n"
	       "  --session TAG     the console's session: its stages carry it "
	       "(DAY0_SESSION)\n"
	       "                    and only ranks that carry it count as "
	       "this node's cards\n"
	       "                    (another session's on the same host do "
	       "not)\n"
	       "  --no-fsync        do not sync the spool (throwaway spools "
	       "only)\n"
	       "  --takeover        if another agent holds the spool (a "
	       "reconnect), stop it\n"
	       "                    (its stages end) and take over; else "
	       "wait 2 s and fail\n"
	       "  --simulate N      report N simulated cards (memory "
	       "patterns, a leak, NIC\n"
	       "                    rates) instead of sampling /proc: "
	       "benchmarks, demos\n"
	       "  --sim-model CONFIG  simulate the stages too: every engine "
	       "step runs as\n"
	       "                    `day0-engine simulate STEP` on a model of "
	       "this node (the\n"
	       "                    model's size from CONFIG, a config.json or "
	       "its directory;\n"
	       "                    8 cards unless --simulate); every event "
	       "says sim: true\n"
	       "  --sim-disk GBPS   the simulated node's disk (default 2)\n"
	       "  --sim-link GBPS   the simulated node's link (default 25)\n"
	       "  --sim-scale F     simulated durations divided by F (default "
	       "1: real time)\n"
	       "  --fail SPEC       injected failures, STEP:RATE,... "
	       "(verify:0.01,run:0.02;\n"
	       "                    oom:RATE: a card over its budget in run)\n"
	       "  --sim-straggler NODES  these nodes (comma-separated) run "
	       "at half speed\n"
	       "  --sim-seed S      seed of the injected failures (default "
	       "1)\n"
	       "  --work DIR        create the session's scratch directory "
	       "and its parent,\n"
	       "                    private (0700) to this user; refuse one "
	       "another user owns\n\n"
	       "Example: day0-agent --node n01 --spool /tmp/sp --cards 2 "
	       "--work /tmp/day0-work-$USER/s1\n");
}

/*
 * --work DIR (the console's default ${work}, /tmp/day0-work-USER/TAG):
 * the directory and its parent made 0700 and owned by this user, so a
 * shared /tmp neither blocks another user (one /tmp/day0-work made by root
 * once) nor shows one user's scratch files to the others.
 */
static int make_private(const char *dir, struct d0_err *err)
{
	struct stat st;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return d0_errf(err, "--work: mkdir %s: %s", dir,
			       strerror(errno));
	if (lstat(dir, &st) < 0)
		return d0_errf(err, "--work: %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
		return d0_errf(err, "--work: %s is not a directory of this user "
			       "(uid %u): remove it or give --work", dir,
			       (unsigned)geteuid());
	if ((st.st_mode & 077) && chmod(dir, 0700) < 0)
		return d0_errf(err, "--work: chmod 0700 %s: %s", dir,
			       strerror(errno));
	return 0;
}

static int make_work(const char *dir, struct d0_err *err)
{
	char parent[PATH_MAX], *slash;
	if (snprintf(parent, sizeof parent, "%s", dir) >= (int)sizeof parent)
		return d0_errf(err, "--work: path too long");
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = 0;
		if (make_private(parent, err) < 0)
			return -1;
	}
	return make_private(dir, err);
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

/* --fail: "STEP:RATE[,STEP:RATE...]", each rate in [0, 1]. */
static int fail_spec_ok(const char *spec)
{
	char buf[512], *save = NULL, *tok;
	if (!*spec || strlen(spec) >= sizeof buf)
		return -1;
	snprintf(buf, sizeof buf, "%s", spec);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		double r;
		if (!colon || colon == tok ||
		    parse_double(colon + 1, 0, 1, &r) < 0)
			return -1;
	}
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

/* `ENGINE --version`, first line, within ENGINE_VERSION_WAIT_S; "" when
 * it does not run.  build (BUILD_CAP bytes) gets the id of its "build ID"
 * line, "unknown" from an engine that prints none (docs/compat.md). */
#define BUILD_CAP 64
/* The wait ends when the engine has answered and closed its output (a few
 * ms); the bound is for an engine that hangs.  It was 5 s: a sanitizer
 * build of the engine, started by a niced test on a 2-core host at load
 * 18, took 12-20 s of wall time for 0.3 s of CPU, and the release day
 * stopped at facts.compat ("engine_version unknown").  An agent start is
 * allowed 120 s (link_ssh.c's DEPLOY_TIMEOUT_MS). */
#define ENGINE_VERSION_WAIT_S 60
static void engine_version(const char *engine, char *out, size_t cap,
			   char *build)
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
		if (t.tv_sec - t0.tv_sec >= ENGINE_VERSION_WAIT_S ||
		    len + 1 >= cap)
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
	snprintf(build, BUILD_CAP, "unknown");
	{
		char *b = strstr(out, "\nbuild ");
		if (b) {
			b += 7;
			b[strcspn(b, "\n")] = 0;
			if (*b && proto_utf8_valid(b, strlen(b), NULL))
				snprintf(build, BUILD_CAP, "%s", b);
		}
	}
	out[strcspn(out, "\n")] = 0;
	if (!proto_utf8_valid(out, strlen(out), NULL))
		out[0] = 0;
}

/*
 * The engine's version, cached per engine binary: running `ENGINE
 * --version` loads the engine's libraries (~20 ms of CPU), which every
 * agent start would pay before its hello; a fleet's connect is 128 such
 * starts.  The cache ($HOME/.cache/day0/engine-version) holds the binary's
 * identity (device, inode, size, mtime) and the version line; any change
 * of the binary runs it again.  A cache that cannot be read or written
 * only costs the run.
 */
static int version_cache_path(char *out, size_t cap)
{
	const char *home = getenv("HOME");
	if (!home || !*home)
		return -1;
	return (size_t)snprintf(out, cap, "%s/.cache/day0/engine-version",
				home) < cap
		   ? 0
		   : -1;
}

static void engine_version_cached(const char *engine, char *out, size_t cap,
				  char *build)
{
	char path[PATH_MAX], key[160], line[512];
	struct stat st;
	FILE *f;
	out[0] = 0;
	if (!strchr(engine, '/') || stat(engine, &st) < 0 ||
	    version_cache_path(path, sizeof path) < 0) {
		engine_version(engine, out, cap, build);
		return;
	}
	snprintf(key, sizeof key, "%llu %llu %lld %lld.%09ld",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
		 (long long)st.st_size, (long long)st.st_mtim.tv_sec,
		 st.st_mtim.tv_nsec);
	if ((f = fopen(path, "re"))) {
		int hit = 0;
		if (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\n")] = 0;
			hit = !strcmp(line, key);
		}
		if (hit && fgets(line, sizeof line, f)) {
			line[strcspn(line, "\n")] = 0;
			/* the third line, the build: a cache without it (an
			 * older agent's) is a miss */
			char bl[BUILD_CAP];
			if (*line && strlen(line) < cap &&
			    proto_utf8_valid(line, strlen(line), NULL) &&
			    fgets(bl, sizeof bl, f) && bl[0] != '\n' &&
			    proto_utf8_valid(bl, strlen(bl), NULL)) {
				bl[strcspn(bl, "\n")] = 0;
				snprintf(out, cap, "%s", line);
				snprintf(build, BUILD_CAP, "%s", bl);
				fclose(f);
				return;
			}
		}
		fclose(f);
	}
	engine_version(engine, out, cap, build);
	if (!*out)
		return; /* nothing worth keeping: ask again next time */
	/* write it whole or not at all: a temp file renamed over */
	char dir[PATH_MAX], tmp[PATH_MAX + 16];
	snprintf(dir, sizeof dir, "%s", path);
	*strrchr(dir, '/') = 0;
	char *cut = strrchr(dir, '/');
	if (cut) { /* $HOME/.cache, then $HOME/.cache/day0 */
		*cut = 0;
		mkdir(dir, 0700);
		*cut = '/';
	}
	mkdir(dir, 0700);
	snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
	int fd = mkstemp(tmp);
	if (fd < 0)
		return;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		unlink(tmp);
		return;
	}
	int ok = fprintf(f, "%s\n%s\n%s\n", key, out, build) > 0;
	if (fclose(f) != 0 || !ok || rename(tmp, path) < 0)
		unlink(tmp);
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
	    {"work", 1, 0, 'W'},      {"net-if", 1, 0, 'I'},
	    {"sim-model", 1, 0, 1},   {"sim-disk", 1, 0, 2},
	    {"sim-link", 1, 0, 3},    {"sim-scale", 1, 0, 4},
	    {"fail", 1, 0, 5},	      {"sim-straggler", 1, 0, 6},
	    {"sim-seed", 1, 0, 7},    {"session", 1, 0, 8},
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
		case 'W':
			if (make_work(optarg, &err) < 0) {
				fprintf(stderr, "day0-agent: %s\n", err.msg);
				return EXIT_USAGE;
			}
			break;
		case 8:
			if (!*optarg || strlen(optarg) >= sizeof a.cfg.session)
				return bad("--session: expected a tag of 1..127 "
					   "characters, got '%s'",
					   optarg);
			snprintf(a.cfg.session, sizeof a.cfg.session, "%s",
				 optarg);
			break;
		case 'I':
			if (strlen(optarg) >= sizeof a.cfg.net_if)
				return bad("--net-if: list too long: '%s'",
					   optarg);
			snprintf(a.cfg.net_if, sizeof a.cfg.net_if, "%s",
				 optarg);
			break;
		case 'S':
			if (parse_long(optarg, 1, 4096, &l) < 0)
				return bad("--simulate: expected 1..4096 "
					   "cards, got '%s'",
					   optarg);
			simulate_cards = (int)l;
			break;
		case 1:
			if (access(optarg, R_OK) < 0 ||
			    strlen(optarg) >= sizeof sim_stages.model)
				return bad("--sim-model: '%s': expected a "
					   "readable config.json or its "
					   "directory",
					   optarg);
			snprintf(sim_stages.model, sizeof sim_stages.model,
				 "%s", optarg);
			break;
		case 2:
		case 3:
		case 4: {
			double v;
			if (parse_double(optarg, 1e-6, 1e9, &v) < 0)
				return bad("--sim-disk/--sim-link/--sim-scale: "
					   "expected a number > 0, got '%s'",
					   optarg);
			*(ch == 2   ? &sim_stages.disk_gbps
			  : ch == 3 ? &sim_stages.link_gbps
				    : &sim_stages.scale) = v;
			break;
		}
		case 5:
			if (fail_spec_ok(optarg) < 0)
				return bad("--fail: expected STEP:RATE,... "
					   "with rates in [0, 1], got '%s'",
					   optarg);
			snprintf(sim_stages.fail, sizeof sim_stages.fail, "%s",
				 optarg);
			break;
		case 6:
			if (strlen(optarg) >= sizeof sim_stages.stragglers)
				return bad("--sim-straggler: list too long: "
					   "'%s'",
					   optarg);
			snprintf(sim_stages.stragglers,
				 sizeof sim_stages.stragglers, "%s", optarg);
			break;
		case 7:
			if (parse_long(optarg, 0, 1L << 30, &l) < 0)
				return bad("--sim-seed: expected an integer, "
					   "got '%s'",
					   optarg);
			sim_stages.seed = (unsigned long)l;
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
	if (sim_stages.model[0] && !simulate_cards)
		simulate_cards = a.cfg.cards > 0 ? a.cfg.cards : 8;
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
	engine_version_cached(a.cfg.engine, a.engine_version,
			      sizeof a.engine_version, a.engine_build);

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
	/* a spool with events before this agent's: its stream goes on */
	cards_load_peaks(&a.cards, a.cfg.spool_dir,
			 spool_next_seq(&a.spool) <= 1);
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
