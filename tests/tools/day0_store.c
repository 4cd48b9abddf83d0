/*
 * day0_store - the session store from the command line, and the console's
 * ingest path for tests and benchmarks (the real console embeds the same
 * calls):
 *
 *   day0_store ingest DB [--batch N] [--crash-after N]   event lines on stdin
 *   day0_store console DB SCRIPT [--batch N] [--crash-after N] -- AGENT...
 *   day0_store audit DB              every seq exactly once, integrity ok
 *   day0_store nodes DB              per-node next seq, events, gaps
 *   day0_store state DB T            state at time T (unix ns) as JSON
 *   day0_store events DB [FROM [TO]] event lines with FROM <= ts < TO
 *   day0_store samples DB NODE CARD METRIC [FROM [TO]]   "ts value" lines
 *   day0_store gen N [--node X] [--cards C] [--csv]      synthetic events
 *   day0_store querybench DB N       state-at-t latency: store_state_at
 *                                    vs the same answer by a full scan
 *   day0_store session DB KEY JSON   set a session manifest key (the
 *                                    runner's keys, for report tests)
 *
 * `console` plays the console's part against a real day0-agent: it starts
 * AGENT (argv) with pipes, sends the SCRIPT's commands, ingests every event
 * into DB in batches and, after each commit, acks the committed seq, as the
 * console does.  Script lines:
 *   {"cmd":...}              a command line, sent as is
 *   wait KEY=VAL,...         until an event matches, one ingested before
 *                            included (20 s limit)
 *   sleep MS
 *   kill                     SIGKILL the agent (and reap it)
 *   start                    start the agent again (same argv)
 *   close                    close the agent's stdin
 *   raw TEXT                 send TEXT and a newline as is (malformed input)
 * At the end of the script it waits for the agent to exit (closing its
 * stdin) and commits.  --crash-after N SIGKILLs this process itself in the
 * middle of a batch, after the N-th new event (fault tests).
 *
 * Exit: 0 ok, 1 a failure (message on stderr), 2 usage.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *prog = "day0_store";

static int usage(void)
{
	fprintf(stderr,
		"usage: %s ingest DB [--batch N] [--crash-after N]\n"
		"       %s console DB SCRIPT [--batch N] [--crash-after N] -- "
		"AGENT [ARGS...]\n"
		"       %s audit DB | nodes DB | state DB T\n"
		"       %s events DB [FROM [TO]]\n"
		"       %s samples DB NODE CARD METRIC [FROM [TO]]\n"
		"       %s gen N [--node X] [--cards C] [--csv]\n"
		"       %s querybench DB N\n"
		"       %s session DB KEY JSON\n",
		prog, prog, prog, prog, prog, prog, prog, prog);
	return 2;
}

static int64_t arg_i64(const char *s, const char *what)
{
	char *end;
	long long v;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end) {
		fprintf(stderr, "%s: %s: expected an integer, got '%s'\n", prog,
			what, s);
		exit(2);
	}
	return v;
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------ ingest */

struct ingest {
	struct store *st;
	int64_t crash_after, added;
};

/* One line into the store; returns -1 on a database failure. */
static int ingest_line(struct ingest *in, const char *line, size_t len)
{
	struct d0_err err;
	int rc = store_ingest(in->st, line, len, &err);
	if (rc < 0 && rc != STORE_EDB) {
		fprintf(stderr, "%s: refused: %s\n", prog, err.msg);
		return 0;
	}
	if (rc == STORE_EDB) {
		struct store_ingest_stats s;
		store_stats(in->st, &s);
		fprintf(stderr, "%s: %s; %llu events committed before it\n",
			prog, err.msg, (unsigned long long)s.committed);
		return -1;
	}
	if (rc == STORE_ADDED && ++in->added == in->crash_after) {
		fflush(NULL);
		raise(SIGKILL);
	}
	return 0;
}

static void print_stats(struct store *st)
{
	struct store_ingest_stats s;
	store_stats(st, &s);
	fprintf(
	    stderr,
	    "%s: added %llu, duplicates %llu, refused %llu, gaps opened "
	    "%llu, filled %llu, committed %llu\n",
	    prog, (unsigned long long)s.added, (unsigned long long)s.duplicates,
	    (unsigned long long)s.rejected, (unsigned long long)s.gaps_opened,
	    (unsigned long long)s.gaps_filled, (unsigned long long)s.committed);
}

static int open_store(const char *path, int flags, struct store **st)
{
	struct d0_err err;
	if (store_open(path, flags, st, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return -1;
	}
	return 0;
}

static int cmd_ingest(int argc, char **argv)
{
	struct ingest in = {0};
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned batch = 4096;
	struct d0_err err;
	double t0;
	if (argc < 2)
		return usage();
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			batch = (unsigned)arg_i64(argv[++i], "--batch");
		else if (!strcmp(argv[i], "--crash-after") && i + 1 < argc)
			in.crash_after = arg_i64(argv[++i], "--crash-after");
		else
			return usage();
	}
	if (open_store(argv[1], STORE_CREATE, &in.st) < 0)
		return 1;
	store_set_batch(in.st, batch);
	t0 = mono_s();
	while ((n = getline(&line, &cap, stdin)) > 0)
		if (ingest_line(&in, line, (size_t)n) < 0) {
			free(line);
			store_close(in.st, NULL);
			return 1;
		}
	free(line);
	if (store_commit(in.st, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		print_stats(in.st);
		store_close(in.st, NULL);
		return 1;
	}
	print_stats(in.st);
	fprintf(stderr, "%s: %.3f s\n", prog, mono_s() - t0);
	return store_close(in.st, NULL) < 0;
}

/* ----------------------------------------------------------------- console */

struct agent_proc {
	pid_t pid;
	int in, out; /* our ends: its stdin, its stdout */
	char **argv;
	char buf[1 << 16];
	size_t len;
};

static int agent_start(struct agent_proc *a)
{
	int pin[2], pout[2];
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
		return -1;
	a->pid = fork();
	if (a->pid < 0)
		return -1;
	if (a->pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		execvp(a->argv[0], a->argv);
		fprintf(stderr, "%s: %s: %s\n", prog, a->argv[0],
			strerror(errno));
		_exit(127);
	}
	close(pin[0]);
	close(pout[1]);
	a->in = pin[1];
	a->out = pout[0];
	a->len = 0;
	return 0;
}

/* Key=value patterns against an event (string/integer fields as text). */
static int event_matches(json_t *o, const char *pattern)
{
	char *p = strdup(pattern), *tok, *save = NULL;
	int ok = 1;
	for (tok = strtok_r(p, ",", &save); tok && ok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), buf[64];
		json_t *v;
		if (!eq) {
			ok = 0;
			break;
		}
		*eq = 0;
		v = json_object_get(o, tok);
		if (json_is_string(v))
			ok = !strcmp(json_string_value(v), eq + 1);
		else if (json_is_integer(v)) {
			snprintf(buf, sizeof buf, "%lld",
				 (long long)json_integer_value(v));
			ok = !strcmp(buf, eq + 1);
		} else
			ok = 0;
	}
	free(p);
	return ok;
}

struct console {
	struct ingest in;
	struct agent_proc ag;
	const char *waiting; /* pattern, or NULL */
	int matched;
	json_t *seen;  /* every event so far: a wait may match an old one */
	int64_t acked; /* last seq acked to the agent */
	char node[256];
	double last_commit;
};

/* Commit, then ack what the store holds contiguously. */
static int con_commit(struct console *c)
{
	struct d0_err err;
	char line[128];
	int64_t seq;
	if (store_commit(c->in.st, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		return -1;
	}
	c->last_commit = mono_s();
	if (!c->node[0] || c->ag.in < 0)
		return 0;
	seq = store_acked_seq(c->in.st, c->node);
	if (seq > c->acked) {
		int n = snprintf(line, sizeof line,
				 "{\"cmd\":\"ack\",\"seq\":%lld}\n",
				 (long long)seq);
		if (write(c->ag.in, line, (size_t)n) == n)
			c->acked = seq;
	}
	return 0;
}

/* Read what the agent wrote; ingest whole lines.  0 at EOF. */
static int con_read(struct console *c)
{
	ssize_t r = read(c->ag.out, c->ag.buf + c->ag.len,
			 sizeof c->ag.buf - c->ag.len);
	char *p, *nl;
	if (r < 0)
		return errno == EINTR ? 1 : -1;
	if (r == 0)
		return 0;
	c->ag.len += (size_t)r;
	p = c->ag.buf;
	while ((nl = memchr(p, '\n', c->ag.len - (size_t)(p - c->ag.buf)))) {
		size_t n = (size_t)(nl - p);
		json_t *o = json_loadb(p, n, 0, NULL);
		if (o && !c->node[0] &&
		    json_is_string(json_object_get(o, "node")))
			snprintf(c->node, sizeof c->node, "%s",
				 json_string_value(json_object_get(o, "node")));
		if (ingest_line(&c->in, p, n) < 0) {
			json_decref(o);
			return -1;
		}
		if (o && c->waiting && event_matches(o, c->waiting))
			c->matched = 1;
		if (o)
			json_array_append_new(c->seen, o);
		p = nl + 1;
	}
	c->ag.len -= (size_t)(p - c->ag.buf);
	memmove(c->ag.buf, p, c->ag.len);
	if (c->ag.len == sizeof c->ag.buf) {
		fprintf(stderr, "%s: agent line over %zu bytes\n", prog,
			sizeof c->ag.buf);
		return -1;
	}
	return 1;
}

/* Pump events for up to `secs` or until `done` says stop. */
static int con_pump(struct console *c, double secs, int until_match,
		    int until_eof)
{
	double end = mono_s() + secs;
	for (;;) {
		struct pollfd p = {c->ag.out, POLLIN, 0};
		double now = mono_s();
		int r;
		if (until_match && c->matched)
			return 0;
		if (now >= end)
			return until_match || until_eof ? -1 : 0;
		if (c->ag.out < 0)
			return until_eof ? 0 : -1;
		r = poll(&p, 1, 20);
		if (r < 0 && errno != EINTR)
			return -1;
		if (r > 0) {
			int k = con_read(c);
			if (k < 0)
				return -2;
			if (k == 0) {
				close(c->ag.out);
				c->ag.out = -1;
				if (con_commit(c) < 0)
					return -2;
				if (until_eof)
					return 0;
				continue;
			}
		}
		/* Batches close on size or after 50 ms, like the console. */
		if (store_pending(c->in.st) &&
		    mono_s() - c->last_commit > 0.05 && con_commit(c) < 0)
			return -2;
	}
}

static void agent_reap(struct console *c)
{
	if (c->ag.in >= 0)
		close(c->ag.in);
	c->ag.in = -1;
	if (c->ag.pid > 0)
		waitpid(c->ag.pid, NULL, 0);
	c->ag.pid = 0;
}

static int cmd_console(int argc, char **argv)
{
	struct console c;
	FILE *script;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int i, rc = 0;
	unsigned batch = 4096;
	memset(&c, 0, sizeof c);
	c.ag.in = c.ag.out = -1;
	c.seen = json_array();
	if (argc < 3)
		return usage();
	for (i = 3; i < argc && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			batch = (unsigned)arg_i64(argv[++i], "--batch");
		else if (!strcmp(argv[i], "--crash-after") && i + 1 < argc)
			c.in.crash_after = arg_i64(argv[++i], "--crash-after");
		else
			return usage();
	}
	if (i + 1 >= argc)
		return usage();
	c.ag.argv = argv + i + 1;
	if (!(script = fopen(argv[2], "r"))) {
		fprintf(stderr, "%s: %s: %s\n", prog, argv[2], strerror(errno));
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (open_store(argv[1], STORE_CREATE, &c.in.st) < 0) {
		fclose(script);
		return 1;
	}
	store_set_batch(c.in.st, batch);
	c.last_commit = mono_s();
	if (agent_start(&c.ag) < 0) {
		fprintf(stderr, "%s: cannot start the agent\n", prog);
		rc = 1;
		goto out;
	}
	while (rc == 0 && (n = getline(&line, &cap, script)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = 0;
		if (n == 0 || line[0] == '#')
			continue;
		if (line[0] == '{' || !strncmp(line, "raw ", 4)) {
			const char *text = line[0] == '{' ? line : line + 4;
			if (c.ag.in < 0 ||
			    write(c.ag.in, text, strlen(text)) < 0 ||
			    write(c.ag.in, "\n", 1) != 1) {
				fprintf(stderr, "%s: cannot send '%s'\n", prog,
					text);
				rc = 1;
			}
			if (con_pump(&c, 0.01, 0, 0) == -2)
				rc = 1;
		} else if (!strncmp(line, "wait ", 5)) {
			size_t k;
			json_t *o;
			c.waiting = line + 5;
			c.matched = 0;
			json_array_foreach(c.seen, k, o)
			{
				if (event_matches(o, c.waiting))
					c.matched = 1;
			}
			int r = con_pump(&c, 20, 1, 0);
			if (r < 0) {
				fprintf(stderr,
					"%s: %s: no event matched "
					"'%s'\n",
					prog,
					r == -2 ? "ingest failed" : "timeout",
					line + 5);
				rc = 1;
			}
			c.waiting = NULL;
		} else if (!strncmp(line, "sleep ", 5)) {
			if (con_pump(&c,
				     (double)arg_i64(line + 6, "sleep") / 1e3,
				     0, 0) == -2)
				rc = 1;
		} else if (!strcmp(line, "kill")) {
			kill(c.ag.pid, SIGKILL);
			/* Drain what it wrote before it died. */
			if (con_pump(&c, 10, 0, 1) < 0)
				rc = 1;
			agent_reap(&c);
		} else if (!strcmp(line, "start")) {
			if (c.ag.out >= 0)
				con_pump(&c, 10, 0, 1);
			agent_reap(&c);
			if (agent_start(&c.ag) < 0)
				rc = 1;
		} else if (!strcmp(line, "close")) {
			if (c.ag.in >= 0)
				close(c.ag.in);
			c.ag.in = -1;
		} else {
			fprintf(stderr, "%s: script: unknown line '%s'\n", prog,
				line);
			rc = 2;
		}
	}
	if (rc == 0) {
		if (c.ag.in >= 0)
			close(c.ag.in);
		c.ag.in = -1;
		if (c.ag.out >= 0 && con_pump(&c, 30, 0, 1) < 0) {
			fprintf(stderr, "%s: the agent did not exit\n", prog);
			rc = 1;
		}
	}
	if (c.ag.pid > 0 && rc)
		kill(c.ag.pid, SIGKILL);
	agent_reap(&c);
	if (c.ag.out >= 0)
		close(c.ag.out);
out:
	free(line);
	fclose(script);
	if (con_commit(&c) < 0)
		rc = 1;
	print_stats(c.in.st);
	if (store_close(c.in.st, NULL) < 0)
		rc = 1;
	json_decref(c.seen);
	return rc;
}

/* ----------------------------------------------------------------- queries */

static int cmd_audit(int argc, char **argv)
{
	struct store *st;
	struct store_node *nodes;
	size_t n;
	struct d0_err err;
	int rc = 0;
	if (argc != 2)
		return usage();
	if (open_store(argv[1], 0, &st) < 0)
		return 1;
	if (store_nodes(st, &nodes, &n, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		store_close(st, NULL);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		printf("%s events %lld next_seq %lld gaps %lld missing %lld\n",
		       nodes[i].node, (long long)nodes[i].events,
		       (long long)nodes[i].next_seq, (long long)nodes[i].gaps,
		       (long long)nodes[i].missing);
	free(nodes);
	if (store_audit(st, &err) < 0) {
		fprintf(stderr, "%s: audit: %s\n", prog, err.msg);
		rc = 1;
	} else {
		printf("audit ok\n");
	}
	store_close(st, NULL);
	return rc;
}

static int cmd_nodes(int argc, char **argv)
{
	struct store *st;
	struct store_node *nodes;
	size_t n;
	struct d0_err err;
	if (argc != 2)
		return usage();
	if (open_store(argv[1], STORE_READONLY, &st) < 0)
		return 1;
	if (store_nodes(st, &nodes, &n, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		store_close(st, NULL);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		printf("%s events %lld next_seq %lld gaps %lld missing %lld\n",
		       nodes[i].node, (long long)nodes[i].events,
		       (long long)nodes[i].next_seq, (long long)nodes[i].gaps,
		       (long long)nodes[i].missing);
	free(nodes);
	store_close(st, NULL);
	return 0;
}

static int cmd_state(int argc, char **argv)
{
	struct store *st;
	struct d0_err err;
	json_t *doc;
	if (argc != 3)
		return usage();
	int64_t t = arg_i64(argv[2], "T");
	if (open_store(argv[1], STORE_READONLY, &st) < 0)
		return 1;
	doc = store_state_at(st, t, &err);
	if (!doc) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		store_close(st, NULL);
		return 1;
	}
	json_dumpf(doc, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
	putchar('\n');
	json_decref(doc);
	store_close(st, NULL);
	return 0;
}

static int print_event(void *arg, const struct store_event *ev)
{
	(void)arg;
	fwrite(ev->body, 1, ev->body_len, stdout);
	putchar('\n');
	return 0;
}

static int cmd_events(int argc, char **argv)
{
	struct store *st;
	struct d0_err err;
	int64_t from = 0, to = INT64_MAX;
	int rc;
	if (argc < 2 || argc > 4)
		return usage();
	if (argc > 2)
		from = arg_i64(argv[2], "FROM");
	if (argc > 3)
		to = arg_i64(argv[3], "TO");
	if (open_store(argv[1], STORE_READONLY, &st) < 0)
		return 1;
	rc = store_events(st, from, to, print_event, NULL, &err);
	if (rc < 0)
		fprintf(stderr, "%s: %s\n", prog, err.msg);
	store_close(st, NULL);
	return rc < 0;
}

static int print_sample(void *arg, const struct store_sample *smp)
{
	(void)arg;
	printf("%lld %.17g\n", (long long)smp->ts, smp->value);
	return 0;
}

static int cmd_samples(int argc, char **argv)
{
	struct store *st;
	struct d0_err err;
	int64_t from = 0, to = INT64_MAX;
	int rc;
	if (argc < 5 || argc > 7)
		return usage();
	int card = (int)arg_i64(argv[3], "CARD");
	if (argc > 5)
		from = arg_i64(argv[5], "FROM");
	if (argc > 6)
		to = arg_i64(argv[6], "TO");
	if (open_store(argv[1], STORE_READONLY, &st) < 0)
		return 1;
	rc = store_samples(st, argv[2], card, argv[4], from, to, print_sample,
			   NULL, &err);
	if (rc < 0)
		fprintf(stderr, "%s: %s\n", prog, err.msg);
	store_close(st, NULL);
	return rc < 0;
}

/* -------------------------------------------------------------------- gen */

/*
 * Synthetic events as an agent with C cards sampling at 10 Hz would send
 * them: per tick, mem.used and mem.peak of every card and the host's
 * memory and NIC rates; a stage progress and a check every 100 ticks.
 * --csv writes the same rows as "node,seq,ts,type,body" CSV (for
 * sqlite3's .import), body quoted with doubled quotes.
 */
static int cmd_gen(int argc, char **argv)
{
	int64_t n, seq = 0, ts = 1795940000000000000LL;
	const char *node = "n01";
	int cards = 64, csv = 0;
	char line[512];
	static const char *const host_metrics[] = {"host.mem.used",
						   "net.rx_bps", "net.tx_bps"};
	if (argc < 2)
		return usage();
	n = arg_i64(argv[1], "N");
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--node") && i + 1 < argc)
			node = argv[++i];
		else if (!strcmp(argv[i], "--cards") && i + 1 < argc)
			cards = (int)arg_i64(argv[++i], "--cards");
		else if (!strcmp(argv[i], "--csv"))
			csv = 1;
		else
			return usage();
	}
	if (cards < 1 || n < 0)
		return usage();
	static char obuf[1 << 20];
	setvbuf(stdout, obuf, _IOFBF, sizeof obuf);
	for (int64_t tick = 0; seq < n; tick++) {
		int per_tick = cards * 2 + 3 + (tick % 100 == 0 ? 2 : 0);
		for (int k = 0; k < per_tick && seq < n; k++) {
			int len;
			seq++;
			ts += 100000000 / per_tick;
			if (k < cards * 2) {
				int card = k / 2;
				len = snprintf(
				    line, sizeof line,
				    "{\"v\":1,\"seq\":%lld,\"ts\":%lld,"
				    "\"node\":\"%s\",\"type\":\"sample\","
				    "\"card\":%d,\"metric\":\"%s\","
				    "\"value\":%lld}",
				    (long long)seq, (long long)ts, node, card,
				    k % 2 ? "mem.peak" : "mem.used",
				    (long long)(1000000000LL + card * 1000 +
						(tick * 7919) % 100000));
			} else if (k < cards * 2 + 3) {
				len = snprintf(
				    line, sizeof line,
				    "{\"v\":1,\"seq\":%lld,\"ts\":%lld,"
				    "\"node\":\"%s\",\"type\":\"sample\","
				    "\"card\":-1,\"metric\":\"%s\","
				    "\"value\":%.1f}",
				    (long long)seq, (long long)ts, node,
				    host_metrics[k - cards * 2],
				    12345678.0 + (double)(tick % 977));
			} else if (k == cards * 2 + 3) {
				len = snprintf(
				    line, sizeof line,
				    "{\"v\":1,\"seq\":%lld,\"ts\":%lld,"
				    "\"node\":\"%s\",\"type\":\"stage\","
				    "\"stage\":\"soak\",\"state\":"
				    "\"progress\",\"progress\":%.3f,"
				    "\"msg\":\"tick %lld\",\"stage_id\":"
				    "\"soak\",\"rank\":0}",
				    (long long)seq, (long long)ts, node,
				    (double)(tick % 1000) / 1000.0,
				    (long long)tick);
			} else {
				len = snprintf(
				    line, sizeof line,
				    "{\"v\":1,\"seq\":%lld,\"ts\":%lld,"
				    "\"node\":\"%s\",\"type\":\"check\","
				    "\"item\":\"stability.soak\","
				    "\"status\":\"running\",\"detail\":"
				    "\"tick %lld\",\"value\":%lld,"
				    "\"threshold\":0}",
				    (long long)seq, (long long)ts, node,
				    (long long)tick, (long long)tick);
			}
			if (!csv) {
				fwrite(line, 1, (size_t)len, stdout);
				putchar('\n');
				continue;
			}
			const char *type = strstr(line, "\"type\":\"") + 8;
			printf("%s,%lld,%lld,%.*s,\"", node, (long long)seq,
			       (long long)ts, (int)(strchr(type, '"') - type),
			       type);
			for (const char *p = line; *p; p++) {
				if (*p == '"')
					putchar('"');
				putchar(*p);
			}
			fputs("\"\n", stdout);
		}
	}
	return fflush(stdout) ? 1 : 0;
}

/*
 * N state-at-t queries at times spread over the session: store_state_at
 * (one index seek per series) against the reference a store without that
 * index would run (a scan of every sample up to t, grouped by series).
 * Prints "store_us reference_us" (means) and checks the answers agree.
 */
static int cmd_querybench(int argc, char **argv)
{
	struct store *st;
	struct d0_err err;
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t lo = 0, hi = 0, n;
	double ours = 0, ref = 0;
	int bad = 0;
	if (argc != 3)
		return usage();
	n = arg_i64(argv[2], "N");
	if (n < 1 || open_store(argv[1], STORE_READONLY, &st) < 0)
		return n < 1 ? usage() : 1;
	if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, NULL) !=
		SQLITE_OK ||
	    sqlite3_prepare_v2(db, "SELECT min(ts), max(ts) FROM events", -1,
			       &q, NULL) != SQLITE_OK) {
		fprintf(stderr, "%s: %s\n", prog, sqlite3_errmsg(db));
		return 1;
	}
	if (sqlite3_step(q) == SQLITE_ROW) {
		lo = sqlite3_column_int64(q, 0);
		hi = sqlite3_column_int64(q, 1);
	}
	sqlite3_finalize(q);
	sqlite3_prepare_v2(db,
			   "SELECT series, MAX(ts), value FROM sample_points "
			   "WHERE ts <= ?1 GROUP BY series",
			   -1, &q, NULL);
	for (int64_t i = 0; i < n; i++) {
		int64_t t = lo + (int64_t)((double)(hi - lo) *
					   ((double)i + 0.5) / (double)n);
		double t0 = mono_s();
		json_t *doc = store_state_at(st, t, &err);
		size_t got, want = 0;
		double sum_ours = 0, sum_ref = 0;
		ours += mono_s() - t0;
		if (!doc) {
			fprintf(stderr, "%s: %s\n", prog, err.msg);
			return 1;
		}
		got = json_array_size(json_object_get(doc, "samples"));
		for (size_t k = 0; k < got; k++)
			sum_ours += json_number_value(json_object_get(
			    json_array_get(json_object_get(doc, "samples"), k),
			    "value"));
		json_decref(doc);
		t0 = mono_s();
		sqlite3_bind_int64(q, 1, t);
		while (sqlite3_step(q) == SQLITE_ROW) {
			want++;
			sum_ref += sqlite3_column_double(q, 2);
		}
		sqlite3_reset(q);
		ref += mono_s() - t0;
		/* Sums in another order may differ in the last bits. */
		if (got != want ||
		    fabs(sum_ours - sum_ref) > 1e-9 * (1 + fabs(sum_ref)))
			bad++;
	}
	sqlite3_finalize(q);
	sqlite3_close(db);
	store_close(st, NULL);
	printf("%.1f %.1f\n", ours / (double)n * 1e6, ref / (double)n * 1e6);
	if (bad)
		fprintf(stderr, "%s: %d answers differ from the reference\n",
			prog, bad);
	return bad ? 1 : 0;
}

/* A manifest key as the runner writes it (store_session_set). */
static int cmd_session(int argc, char **argv)
{
	struct store *st;
	struct d0_err err;
	json_error_t je;
	json_t *v;
	int rc = 0;
	if (argc != 4)
		return usage();
	if (!(v = json_loads(argv[3], JSON_DECODE_ANY, &je))) {
		fprintf(stderr, "%s: %s: %s\n", prog, argv[2], je.text);
		return 2;
	}
	if (open_store(argv[1], STORE_CREATE, &st) < 0) {
		json_decref(v);
		return 1;
	}
	if (store_session_set(st, argv[2], v, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		rc = 1;
	}
	json_decref(v);
	if (store_close(st, &err) < 0) {
		fprintf(stderr, "%s: %s\n", prog, err.msg);
		rc = 1;
	}
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "ingest"))
		return cmd_ingest(argc - 1, argv + 1);
	if (!strcmp(argv[1], "console"))
		return cmd_console(argc - 1, argv + 1);
	if (!strcmp(argv[1], "audit"))
		return cmd_audit(argc - 1, argv + 1);
	if (!strcmp(argv[1], "nodes"))
		return cmd_nodes(argc - 1, argv + 1);
	if (!strcmp(argv[1], "state"))
		return cmd_state(argc - 1, argv + 1);
	if (!strcmp(argv[1], "events"))
		return cmd_events(argc - 1, argv + 1);
	if (!strcmp(argv[1], "samples"))
		return cmd_samples(argc - 1, argv + 1);
	if (!strcmp(argv[1], "gen"))
		return cmd_gen(argc - 1, argv + 1);
	if (!strcmp(argv[1], "querybench"))
		return cmd_querybench(argc - 1, argv + 1);
	if (!strcmp(argv[1], "session"))
		return cmd_session(argc - 1, argv + 1);
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return 0;
	}
	fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[1]);
	return usage();
}
