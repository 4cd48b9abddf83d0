/*
 * stage.c - running a stage: day0-engine STEP, mpirun ... day0-engine
 * STEP, or an exec argv; reading its output; ending it.
 *
 * Every stage runs in its own session (setsid), so "the whole stage" is
 * the set of processes whose session id is the leader's pid: mpirun puts
 * each rank in a process group of its own, but not in a new session.
 * Cancel, timeout and the agent's exit send SIGTERM to all of them, then
 * SIGKILL after a grace period.  Under mpirun the ranks get the SIGTERM
 * first, straight and at once: mpirun (Open MPI 4) does not forward it,
 * it sends its ranks SIGCONT, SIGTERM a second later and SIGKILL a
 * second after that, and exits 1, so a server rank learnt of its stop
 * a second late (answering meanwhile) and had one second to drain.  A
 * rank that ends by itself lets mpirun exit 0; mpirun is signalled only
 * when the ranks outlive RANK_GRACE_S, and SIGKILL comes last.  The leader's pid and start time go into a run record in
 * the spool directory, so that an agent restarted after a crash can kill
 * what the old one left running and end the stage in the record.
 *
 * Output: each stdout line that is an event (proto_event_parse) is
 * forwarded with the agent's seq and node, plus rank, stage_id and the
 * engine's own seq (src_seq); other lines become log events.  Under
 * mpirun, --tag-output prefixes every chunk of a rank's output with
 * "[job,rank]<stdout>:"; a long line arrives as several chunks, each with
 * its tag, possibly between chunks of other ranks.  The parser below
 * strips the tags and appends each chunk to its rank's line buffer, so a
 * rank's lines come out whole and never mixed with another rank's.  (A
 * payload containing a literal "[1,2]<stdout>:" would be misread as a
 * tag; the engine never writes one.)
 *
 * Under stage simulation (--sim-model, simulate.c) an engine step runs as
 * `day0-engine simulate STEP ...` instead, one process for all its ranks
 * (no mpirun), through the same spawn, pipes, forwarding and ending.
 */
#include "agent.h"
#include "checklist.h"
#include "simulate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#define KILL_GRACE_S 2.0
#define PIPE_GRACE_S 2.0
/* mpirun's stage: the ranks' SIGTERM -> mpirun's -> SIGKILL.  4.5 s in
 * all, within the 5 s the console waits after its bye (tui/runner.c): a
 * server drains its answers for at most 2 s (SRV_DRAIN_S). */
#define RANK_GRACE_S   3.0
#define MPIRUN_GRACE_S 1.5

static void stream_init(struct stage_stream *s, int fd, int is_err, int nlines)
{
	memset(s, 0, sizeof *s);
	s->fd = fd;
	s->is_err = is_err;
	s->nlines = nlines;
	s->lines = calloc((size_t)nlines, sizeof *s->lines);
	if (!s->lines)
		abort();
	for (int i = 0; i < nlines; i++)
		proto_lines_init(&s->lines[i]);
}

static void stream_free(struct stage_stream *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	for (int i = 0; i < s->nlines; i++)
		proto_lines_free(&s->lines[i]);
	free(s->lines);
	s->lines = NULL;
	s->nlines = 0;
}

void stage_free(struct stage *st)
{
	if (!st)
		return;
	stream_free(&st->out);
	stream_free(&st->err);
	cause_free(&st->cause);
	free(st->src_seq);
	free(st->pr);
	free(st->runfile);
	free(st->ranks);
	free(st->ready_url);
	free(st);
}

/* ------------------------------------------------------------- processes */

/* Fields of /proc/PID/stat after the command name: session and start. */
static int read_stat(pid_t pid, pid_t *sid, unsigned long long *start)
{
	char path[64], buf[1024];
	int fd;
	ssize_t n;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return proc_stat_session(buf, sid, start);
}

/* Signal every process of session sid.  start: the leader's start time
 * (if the leader's pid now belongs to a newer process, nothing is done).
 * Returns how many processes were signalled. */
int session_kill(pid_t sid, unsigned long long start, int sig)
{
	DIR *d;
	struct dirent *e;
	int count = 0;
	pid_t s;
	unsigned long long t;
	if (sid <= 1)
		return 0;
	if (read_stat(sid, &s, &t) == 0 && start && t != start)
		return 0; /* pid reused: not our stage */
	d = opendir("/proc");
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 1)
			continue;
		if (read_stat((pid_t)pid, &s, &t) == 0 && s == sid &&
		    kill((pid_t)pid, sig) == 0)
			count++;
	}
	closedir(d);
	return count;
}

/* Signal the MPI ranks of session sid: its processes other than the
 * leader whose environment names a rank (OMPI_COMM_WORLD_RANK; the ssh
 * and daemons of a multi-host launch have none).  Returns how many. */
static int session_ranks_kill(pid_t sid, unsigned long long start, int sig)
{
	DIR *d;
	struct dirent *e;
	int count = 0;
	pid_t s;
	unsigned long long t;
	static char env[65536];
	if (sid <= 1 || read_stat(sid, &s, &t) < 0 || (start && t != start))
		return 0;
	d = opendir("/proc");
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char *end, path[64];
		long pid = strtol(e->d_name, &end, 10);
		ssize_t n = 0;
		int fd;
		if (*end || pid <= 1 || pid == sid)
			continue;
		if (read_stat((pid_t)pid, &s, &t) < 0 || s != sid)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/environ", pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		for (ssize_t k; (size_t)n < sizeof env &&
				(k = read(fd, env + n, sizeof env - (size_t)n)) > 0;)
			n += k;
		close(fd);
		if (n > 0 && proc_environ_rank(env, (size_t)n) >= 0 &&
		    kill((pid_t)pid, sig) == 0)
			count++;
	}
	closedir(d);
	return count;
}

/* --------------------------------------------------------------- spawning */

static int id_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
		      s[i] == '_' || s[i] == '-'))
			return 0;
	return s[0] != '.' && s[0] != '-';
}

struct argv_builder {
	char **v;
	size_t n, cap;
};

static void av_add(struct argv_builder *b, const char *s)
{
	if (b->n + 2 > b->cap) {
		b->cap = b->cap ? b->cap * 2 : 16;
		b->v = realloc(b->v, b->cap * sizeof *b->v);
		if (!b->v)
			abort();
	}
	b->v[b->n++] = strdup(s);
	b->v[b->n] = NULL;
}

static void av_free(struct argv_builder *b)
{
	for (size_t i = 0; i < b->n; i++)
		free(b->v[i]);
	free(b->v);
}

static char *av_join(const struct argv_builder *b)
{
	size_t len = 1;
	char *s;
	for (size_t i = 0; i < b->n; i++)
		len += strlen(b->v[i]) + 1;
	s = malloc(len);
	if (!s)
		abort();
	s[0] = 0;
	for (size_t i = 0; i < b->n; i++) {
		if (i)
			strcat(s, " ");
		strcat(s, b->v[i]);
	}
	return s;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p, (void)arg;
	return size * n;
}

static void emit_stage(struct agent *a, struct stage *st, const char *state,
		       json_t *extra)
{
	json_t *o = json_pack("{s:s, s:s, s:s}", "stage", st->step, "stage_id",
			      st->id, "state", state);
	json_object_set_new(o, "progress",
			    json_real(!strcmp(state, "end") ? 1.0 : 0.0));
	if (extra)
		json_object_update(o, extra);
	json_decref(extra);
	agent_emit(a, "stage", o, 0);
}

/* A stage that could not run: its start and end (rc 127) at once. */
static void spawn_failed(struct agent *a, struct stage *st, const char *cmd,
			 const char *why)
{
	char msg[1024];
	json_t *end = json_pack("{s:i, s:s}", "rc", 127, "reason", "spawn");
	json_t *start = json_object();
	json_object_set_new(start, "msg", agent_text(cmd));
	emit_stage(a, st, "start", start);
	snprintf(msg, sizeof msg, "cannot run: %s", why);
	json_object_set_new(end, "msg", agent_text(msg));
	emit_stage(a, st, "end", end);
}

static void write_runfile(struct agent *a, struct stage *st)
{
	json_t *o = json_pack("{s:s, s:s, s:i, s:I}", "stage_id", st->id,
			      "stage", st->step, "pid", (int)st->pid, "start",
			      (json_int_t)st->start_ticks);
	st->runfile = spool_stage_path(&a->spool, st->id);
	if (json_dump_file(o, st->runfile, JSON_COMPACT) < 0)
		agent_log(a, "warn", "%s: cannot write the run record",
			  st->runfile);
	json_decref(o);
}

/* A cluster stage's ssh settings for mpirun: the console made them from
 * the inventory (hosts, ports, users, identities, and the host keys it
 * checked); they go beside the spool as stage-ID.ssh_config and
 * stage-ID.known_hosts (0600), and mpirun's ssh reads them (-F). */
static int write_private(const char *path, const char *text, struct d0_err *e)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t n = strlen(text);
	if (fd < 0 || write(fd, text, n) != (ssize_t)n) {
		int er = errno;
		if (fd >= 0)
			close(fd);
		return d0_errf(e, "%s: %s", path, strerror(er));
	}
	return close(fd) < 0 ? d0_errf(e, "%s: %s", path, strerror(errno))
			     : 0;
}

static char *stage_file(struct agent *a, const char *id, const char *ext)
{
	char name[STAGE_ID_MAX + 32];
	snprintf(name, sizeof name, "stage-%s.%s", id, ext);
	return path_join(a->spool.dir, name);
}

/* "-F CONFIG" for plm_rsh_args, with %KNOWN_HOSTS% in the config replaced
 * by the known_hosts file written beside it.  NULL (err) on failure. */
static char *ssh_files(struct agent *a, const char *id, const char *config,
		       const char *known, struct d0_err *err)
{
	char *cpath = stage_file(a, id, "ssh_config"),
	     *kpath = stage_file(a, id, "known_hosts"), *text, *args = NULL;
	const char *mark = "%KNOWN_HOSTS%", *p;
	size_t cap = strlen(config) + 1, n = 0;
	for (p = config; (p = strstr(p, mark)); p += strlen(mark))
		cap += strlen(kpath);
	text = malloc(cap);
	if (!text)
		abort();
	for (p = config; *p;) {
		if (!strncmp(p, mark, strlen(mark))) {
			memcpy(text + n, kpath, strlen(kpath));
			n += strlen(kpath);
			p += strlen(mark);
		} else
			text[n++] = *p++;
	}
	text[n] = 0;
	if (write_private(kpath, known ? known : "", err) == 0 &&
	    write_private(cpath, text, err) == 0) {
		args = malloc(strlen(cpath) + 4);
		if (!args)
			abort();
		sprintf(args, "-F %s", cpath);
	}
	free(text);
	free(cpath);
	free(kpath);
	return args;
}

struct stage *stage_start(struct agent *a, json_t *cmd)
{
	const char *id = proto_str(cmd, "stage_id", ""),
		   *step = proto_str(cmd, "step", ""),
		   *cwd = proto_str(cmd, "cwd", NULL);
	json_t *args = json_object_get(cmd, "args"),
	       *argv = json_object_get(cmd, "argv"),
	       *margs = json_object_get(cmd, "mpirun_args"), *v;
	int64_t np = proto_int(cmd, "np", 1);
	double timeout = proto_num(cmd, "timeout", 0);
	struct argv_builder b = {0};
	struct stage *st;
	int pout[2] = {-1, -1}, perr[2] = {-1, -1}, pexec[2] = {-1, -1};
	size_t i;
	char *joined;
	int e = 0;
	ssize_t n;

	if (!id_ok(id, STAGE_ID_MAX)) {
		agent_refuse(a, "run", id,
			    "run: stage_id '%.80s': expected 1-%d of "
			    "[A-Za-z0-9._-], not starting with . or -",
			    id, STAGE_ID_MAX);
		return NULL;
	}
	if (agent_find_stage(a, id)) {
		agent_refuse(a, "run", id,
			    "run: stage '%s' is already running", id);
		return NULL;
	}
	if (a->nstages >= AGENT_MAX_STAGES) {
		agent_refuse(a, "run", id, "run: %d stages already running",
			    a->nstages);
		return NULL;
	}
	if (!strcmp(step, "exec")) {
		if (!argv || json_array_size(argv) == 0) {
			agent_refuse(a, "run", id,
				    "run: step exec needs a non-empty argv");
			return NULL;
		}
		if (args || margs || json_object_get(cmd, "np")) {
			agent_refuse(a, "run", id,
				    "run: step exec takes argv, cwd and "
				    "timeout only");
			return NULL;
		}
	} else {
		if (!id_ok(step, 32) || argv) {
			agent_refuse(
			    a, "run", id,
			    "run: step '%.40s': expected an engine step "
			    "name (with args) or exec (with argv)",
			    step);
			return NULL;
		}
		if (np < 1 || np > 4096) {
			agent_refuse(a, "run", id,
				    "run: np %lld: expected 1..4096",
				    (long long)np);
			return NULL;
		}
	}
	if (timeout < 0 || timeout > 1e7) {
		agent_refuse(a, "run", id,
			    "run: timeout %g: expected seconds > 0", timeout);
		return NULL;
	}

	st = calloc(1, sizeof *st);
	if (!st)
		abort();
	snprintf(st->id, sizeof st->id, "%s", id);
	snprintf(st->step, sizeof st->step, "%s", step);
	st->exec = !strcmp(step, "exec");
	st->sim = !st->exec && sim_stages.model[0];
	/* simulated: one process answers for every rank, no mpirun */
	st->mpi = !st->exec && !st->sim && (np > 1 || margs);
	st->np = st->exec || st->sim ? 1 : (int)np;
	st->timeout_s = timeout;
	if ((v = json_object_get(cmd, "ready")) && json_is_object(v)) {
		const char *url = proto_str(v, "url", "");
		if (strncmp(url, "http://", 7)) {
			agent_refuse(a, "run", id, "run: ready.url '%.80s': "
				    "expected http://HOST:PORT/PATH", url);
			free(st);
			return NULL;
		}
		st->ready_url = strdup(url);
		st->ready_timeout = proto_num(v, "timeout", 300);
	}
	st->out.fd = st->err.fd = -1;
	if (st->mpi && *proto_str(cmd, "ranks", ""))
		st->ranks = strdup(proto_str(cmd, "ranks", ""));
	st->rehearsal = json_is_true(json_object_get(cmd, "rehearsal"));

	if (st->exec) {
		json_array_foreach(argv, i, v)
		{
			av_add(&b, json_string_value(v));
		}
	} else if (st->sim) {
		json_t *sa = simulate_stage_args(
		    a, step, (int)np, proto_str(cmd, "ranks", ""),
		    st->rehearsal, args);
		av_add(&b, a->cfg.engine);
		json_array_foreach(sa, i, v)
		    av_add(&b, json_string_value(v));
		json_decref(sa);
	} else {
		int has_events = 0;
		if (st->mpi) {
			char nps[16];
			av_add(&b, a->cfg.mpirun);
			av_add(&b, "--tag-output");
			if (geteuid() == 0)
				av_add(&b, "--allow-run-as-root");
			if (np > sysconf(_SC_NPROCESSORS_ONLN))
				av_add(&b, "--oversubscribe");
			av_add(&b, "-x");
			av_add(&b, "DAY0_NODE");
			av_add(&b, "-x");
			av_add(&b, "DAY0_STAGE_ID");
			if (st->ranks) {
				av_add(&b, "-x");
				av_add(&b, "DAY0_RANKS");
			}
			if (a->cfg.session[0]) {
				av_add(&b, "-x");
				av_add(&b, "DAY0_SESSION");
			}
			if (*proto_str(cmd, "ssh_config", "")) {
				struct d0_err se = {{0}};
				char *rsh = ssh_files(
				    a, id, proto_str(cmd, "ssh_config", ""),
				    proto_str(cmd, "known_hosts", ""), &se);
				if (!rsh) {
					agent_refuse(a, "run", id,
						    "run: stage %s: ssh "
						    "settings: %s",
						    id, se.msg);
					av_free(&b);
					stage_free(st);
					return NULL;
				}
				av_add(&b, "--mca");
				av_add(&b, "plm_rsh_agent");
				av_add(&b, "ssh");
				av_add(&b, "--mca");
				av_add(&b, "plm_rsh_args");
				av_add(&b, rsh);
				free(rsh);
			}
			av_add(&b, "-np");
			snprintf(nps, sizeof nps, "%lld", (long long)np);
			av_add(&b, nps);
			json_array_foreach(margs, i, v)
			    av_add(&b, json_string_value(v));
		}
		av_add(&b, a->cfg.engine);
		av_add(&b, step);
		json_array_foreach(args, i, v)
		{
			av_add(&b, json_string_value(v));
			has_events |= !strcmp(json_string_value(v), "--events");
		}
		if (!has_events)
			av_add(&b, "--events");
	}
	joined = av_join(&b);

	if (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0 ||
	    pipe2(pexec, O_CLOEXEC) < 0) {
		e = errno;
		goto spawn_fail;
	}
	st->pid = fork();
	if (st->pid < 0) {
		e = errno;
		goto spawn_fail;
	}
	if (st->pid == 0) {
		sigset_t none;
		int devnull = open("/dev/null", O_RDONLY);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		setsid();
		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(pout[1], 1);
		dup2(perr[1], 2);
		setenv("DAY0_NODE", a->cfg.node, 1);
		setenv("DAY0_STAGE_ID", st->id, 1);
		if (a->cfg.session[0])
			setenv("DAY0_SESSION", a->cfg.session, 1);
		if (st->ranks)
			setenv("DAY0_RANKS", st->ranks, 1);
		/* One write of "what + errno" tells the parent why. */
		char why[1 + sizeof(int)];
		if (cwd && chdir(cwd) < 0) {
			int ce = errno;
			why[0] = 'c';
			memcpy(why + 1, &ce, sizeof ce);
			if (write(pexec[1], why, sizeof why) < 0)
				_exit(127);
			_exit(127);
		}
		execvp(b.v[0], b.v);
		{
			int xe = errno;
			why[0] = 'x';
			memcpy(why + 1, &xe, sizeof xe);
			if (write(pexec[1], why, sizeof why) < 0)
				_exit(127);
		}
		_exit(127);
	}
	close(pout[1]);
	close(perr[1]);
	close(pexec[1]);
	pout[1] = perr[1] = pexec[1] = -1;
	{
		char what[1 + sizeof(int)];
		do
			n = read(pexec[0], what, sizeof what);
		while (n < 0 && errno == EINTR);
		close(pexec[0]);
		pexec[0] = -1;
		if (n == (ssize_t)sizeof what) {
			char why[4200];
			memcpy(&e, what + 1, sizeof e);
			waitpid(st->pid, NULL, 0);
			if (what[0] == 'c')
				snprintf(why, sizeof why, "cwd %s: %s", cwd,
					 strerror(e));
			else
				snprintf(why, sizeof why, "%s: %s", b.v[0],
					 strerror(e));
			close(pout[0]);
			close(perr[0]);
			spawn_failed(a, st, joined, why);
			free(joined);
			av_free(&b);
			stage_free(st);
			return NULL;
		}
	}
	fcntl(pout[0], F_SETFL, O_NONBLOCK);
	fcntl(perr[0], F_SETFL, O_NONBLOCK);
	stream_init(&st->out, pout[0], 0, st->mpi ? st->np + 1 : 1);
	stream_init(&st->err, perr[0], 1, st->mpi ? st->np + 1 : 1);
	st->nsrc = st->np;
	st->src_seq = calloc((size_t)st->np, sizeof *st->src_seq);
	if (!st->src_seq)
		abort();
	{
		pid_t sid;
		if (read_stat(st->pid, &sid, &st->start_ticks) < 0)
			st->start_ticks = 0;
	}
	st->t_start = agent_now();
	if (timeout > 0)
		st->deadline = st->t_start + timeout;
	write_runfile(a, st);
	{
		json_t *av = json_array(), *o;
		for (i = 0; i < b.n; i++)
			json_array_append_new(av, agent_text(b.v[i]));
		o = json_pack("{s:o, s:i, s:i}", "argv", av, "pid",
			      (int)st->pid, "np", st->np);
		json_object_set_new(o, "msg", agent_text(joined));
		emit_stage(a, st, "start", o);
	}
	free(joined);
	av_free(&b);
	a->stages[a->nstages++] = st;
	return st;

spawn_fail:
	for (int k = 0; k < 2; k++) {
		if (pout[k] >= 0)
			close(pout[k]);
		if (perr[k] >= 0)
			close(perr[k]);
		if (pexec[k] >= 0)
			close(pexec[k]);
	}
	spawn_failed(a, st, joined, strerror(e));
	free(joined);
	av_free(&b);
	stage_free(st);
	return NULL;
}

/* ----------------------------------------------------------------- output */

/* A string for a JSON value from arbitrary bytes (escaped if need be). */
static json_t *text_value(const char *s, size_t n)
{
	char *buf;
	json_t *v;
	if (proto_utf8_valid(s, n, NULL))
		return json_stringn(s, n);
	buf = malloc(n * 4 + 1);
	if (!buf)
		abort();
	proto_excerpt(s, n, buf, n * 4 + 1);
	v = json_string(buf);
	free(buf);
	return v;
}

static void log_line(struct agent *a, struct stage *st, int rank,
		     const char *level, const char *stream, const char *line,
		     size_t len)
{
	json_t *o = json_pack("{s:s, s:s, s:s}", "level", level, "stream",
			      stream, "stage_id", st->id);
	json_object_set_new(o, "msg", text_value(line, len));
	if (rank >= 0)
		json_object_set_new(o, "rank", json_integer(rank));
	agent_emit(a, "log", o, 0);
}

/* One whole line of rank (-1: mpirun itself) from a stage. */
static void stage_line(struct agent *a, struct stage *st, int rank, int is_err,
		       const char *line, size_t len)
{
	struct proto_event ev;
	struct d0_err err;
	json_t *fields;
	const char *key;
	json_t *val;
	if (is_err) {
		log_line(a, st, rank, "warn", "stderr", line, len);
		cause_note(&st->cause, rank, line, len);
		return;
	}
	if (proto_blank(line, len))
		return;
	if (proto_event_parse(line, len, &ev, &err) < 0) {
		if (st->exec) {
			log_line(a, st, rank, "info", "stdout", line, len);
		} else {
			char ex[200];
			proto_excerpt(line, len, ex, sizeof ex);
			agent_log(a, "warn",
				  "stage %s rank %d: not an event "
				  "(%s): %s",
				  st->id, rank, err.msg, ex);
		}
		return;
	}
	if (rank >= 0 && rank < st->nsrc) {
		if (st->src_seq[rank] && ev.seq != st->src_seq[rank] + 1)
			agent_log(a, "warn",
				  "stage %s rank %d: engine seq %lld after "
				  "%lld: events lost on the way",
				  st->id, rank, (long long)ev.seq,
				  (long long)st->src_seq[rank]);
		st->src_seq[rank] = ev.seq;
	}
	fields = json_object();
	json_object_foreach(ev.obj, key, val)
	{
		if (!proto_is_envelope(key))
			json_object_set(fields, key, val);
	}
	if (st->ranks && ev.kind == EV_SAMPLE &&
	    json_integer_value(json_object_get(fields, "card")) == rank) {
		/* A rank's own card sample: this node's card, or another
		 * node's (whose agent measures it): not ours to send. */
		int card = rank_card(st->ranks, rank, a->cfg.node);
		if (card == RANK_ELSEWHERE) {
			json_decref(fields);
			proto_event_free(&ev);
			return;
		}
		if (card >= 0)
			json_object_set_new(fields, "card", json_integer(card));
	}
	/* A simulated service says when it is up (there is no URL to
	 * poll): the agent's own "ready" follows (poll_ready). */
	if (st->sim && ev.kind == EV_STAGE &&
	    json_is_true(json_object_get(ev.obj, "ready")))
		st->sim_ready = 1;
	if (!strcmp(ev.type, "log") &&
	    !strcmp(proto_str(ev.obj, "level", ""), "error")) {
		const char *m = proto_str(ev.obj, "msg", "");
		cause_note(&st->cause, rank, m, strlen(m));
	}
	/* A rehearsal (a shape-validation model) is evidence of its own
	 * kind: its checks never stand for the real model's. */
	if (st->rehearsal && !strcmp(ev.type, "check")) {
		const char *item = proto_str(ev.obj, "item", "");
		if (!checklist_is_rehearsal(item))
			json_object_set_new(fields, "item",
					    json_sprintf("%s%s",
							 CHECKLIST_REHEARSAL,
							 item));
	}
	json_object_set_new(fields, "rank", json_integer(rank));
	json_object_set_new(fields, "stage_id", json_string(st->id));
	json_object_set_new(fields, "src_seq", json_integer(ev.seq));
	{
		char type[64];
		snprintf(type, sizeof type, "%s", ev.type);
		int64_t ts = ev.ts;
		proto_event_free(&ev);
		agent_emit(a, type, fields, ts > 0 ? ts : 0);
	}
}

/* Drain whole lines of one line buffer. */
static void drain(struct agent *a, struct stage *st, struct stage_stream *s,
		  int idx, int at_eof)
{
	const char *line;
	size_t len;
	enum proto_line_result r;
	int rank = st->mpi ? idx - 1 : 0;
	for (;;) {
		r = at_eof ? proto_lines_finish(&s->lines[idx], &line, &len)
			   : proto_lines_next(&s->lines[idx], &line, &len);
		if (r == PL_NONE)
			return;
		if (r == PL_TOOLONG)
			agent_log(a, "warn",
				  "stage %s rank %d: a line of %zu bytes is "
				  "over the %d-byte limit: dropped",
				  st->id, rank, len, PROTO_MAX_LINE);
		else
			stage_line(a, st, rank, s->is_err, line, len);
	}
}

static void feed(struct agent *a, struct stage *st, struct stage_stream *s,
		 int idx, const char *data, size_t n)
{
	if (!n)
		return;
	proto_lines_push(&s->lines[idx], data, n);
	drain(a, st, s, idx, 0);
}

/*
 * How much of t[0..n) matches the tag grammar
 *   '[' digits ',' digits ']' '<' letters '>' ':'
 * Returns n when t is a proper prefix, -1 on a mismatch, and the tag's
 * length when complete (then *rank is set).
 */
static int tag_match(const char *t, size_t n, int *rank)
{
	size_t i = 0;
	long r = 0;
	int digits;
	if (i >= n)
		return (int)n;
	if (t[i++] != '[')
		return -1;
	for (digits = 0; i < n && t[i] >= '0' && t[i] <= '9'; i++)
		digits++;
	if (i >= n)
		return digits < 12 ? (int)n : -1;
	if (!digits || t[i++] != ',')
		return -1;
	for (digits = 0; i < n && t[i] >= '0' && t[i] <= '9'; i++, digits++)
		r = r * 10 + (t[i] - '0');
	if (i >= n)
		return digits < 9 ? (int)n : -1;
	if (!digits || digits >= 9 || t[i++] != ']')
		return -1;
	if (i >= n)
		return (int)n;
	if (t[i++] != '<')
		return -1;
	for (digits = 0; i < n && t[i] >= 'a' && t[i] <= 'z'; i++)
		digits++;
	if (i >= n)
		return digits < 8 ? (int)n : -1;
	if (!digits || t[i++] != '>')
		return -1;
	if (i >= n)
		return (int)n;
	if (t[i++] != ':')
		return -1;
	*rank = (int)r;
	return (int)i;
}

/* Bytes of mpirun's stream: strip tags, route chunks to their rank. */
static void feed_tagged(struct agent *a, struct stage *st,
			struct stage_stream *s, const char *data, size_t n)
{
	size_t i = 0;
	while (i < n) {
		if (s->taglen) {
			int rank = -1, m;
			s->tag[s->taglen++] = data[i++];
			m = tag_match(s->tag, s->taglen, &rank);
			if (m == (int)s->taglen && rank < 0)
				continue; /* still a prefix */
			if (m > 0) {
				s->cur = rank + 1 < s->nlines ? rank + 1 : 0;
				s->taglen = 0;
				continue;
			}
			/* Not a tag: its first byte is content; rescan the
			 * rest (it may start a real tag). */
			{
				char rest[sizeof s->tag];
				size_t rl = s->taglen - 1;
				memcpy(rest, s->tag + 1, rl);
				feed(a, st, s, s->cur, s->tag, 1);
				s->taglen = 0;
				feed_tagged(a, st, s, rest, rl);
			}
			continue;
		}
		{
			const char *lb = memchr(data + i, '[', n - i);
			size_t run = lb ? (size_t)(lb - (data + i)) : n - i;
			feed(a, st, s, s->cur, data + i, run);
			i += run;
			if (lb) {
				s->tag[0] = '[';
				s->taglen = 1;
				i++;
			}
		}
	}
}

void stage_read(struct agent *a, struct stage *st, struct stage_stream *s)
{
	char buf[65536];
	ssize_t n = read(s->fd, buf, sizeof buf);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0) {
		if (st->mpi)
			feed_tagged(a, st, s, buf, (size_t)n);
		else
			feed(a, st, s, 0, buf, (size_t)n);
		return;
	}
	/* End of the stream: what is left are the last partial lines. */
	if (s->taglen) {
		char rest[sizeof s->tag];
		size_t rl = s->taglen;
		memcpy(rest, s->tag, rl);
		s->taglen = 0;
		feed(a, st, s, s->cur, rest, rl);
	}
	for (int k = 0; k < s->nlines; k++)
		drain(a, st, s, k, 1);
	close(s->fd);
	s->fd = -1;
}

/* ------------------------------------------------------------------ ending */

void stage_stop(struct agent *a, struct stage *st, enum stage_stop why)
{
	if (st->stop == STOP_NONE)
		st->stop = why;
	if (st->kill_at)
		return; /* already terminating */
	st->t_term = agent_now();
	if (!st->exited && st->mpi &&
	    session_ranks_kill(st->pid, st->start_ticks, SIGTERM) > 0) {
		/* the ranks stop by themselves; mpirun exits after them */
		st->stop_phase = 1;
		st->kill_at = st->t_term + RANK_GRACE_S;
		return;
	}
	if (!st->exited) {
		if (session_kill(st->pid, st->start_ticks, SIGTERM) == 0)
			kill(st->pid, SIGTERM);
	}
	st->stop_phase = 2;
	st->kill_at = st->t_term + KILL_GRACE_S;
	(void)a;
}

/* Does url answer 200 within a short wait?  (Blocks the loop at most
 * READY_POLL_MS, twice a second, only while a service comes up.) */
#define READY_POLL_MS 250L
static int url_answers(const char *url)
{
	CURL *c = curl_easy_init();
	long code = 0;
	if (!c)
		return 0;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_NOBODY, 0L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, READY_POLL_MS);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	return code == 200;
}

/* A service stage: poll its ready URL; report "ready" once, or stop it
 * when it does not come up within ready.timeout. */
static void poll_ready(struct agent *a, struct stage *st, double now)
{
	if (!st->ready_url || st->ready_done || st->stop || st->exited ||
	    now < st->ready_next)
		return;
	st->ready_next = now + 0.5;
	if (st->sim ? st->sim_ready : url_answers(st->ready_url)) {
		char msg[600];
		st->ready_done = 1;
		snprintf(msg, sizeof msg,
			 st->sim ? "ready (simulated; %.500s is not polled)"
				 : "ready: %.500s answers",
			 st->ready_url);
		emit_stage(a, st, "progress",
			   json_pack("{s:s, s:b}", "msg", msg, "ready", 1));
	} else if (now - st->t_start > st->ready_timeout) {
		st->timeout_s = st->ready_timeout;
		stage_stop(a, st, STOP_TIMEOUT);
	}
}

void stage_tick(struct agent *a, struct stage *st, double now)
{
	if (!st->stop && st->deadline && now >= st->deadline)
		stage_stop(a, st, STOP_TIMEOUT);
	poll_ready(a, st, now);
	if (st->kill_at && now >= st->kill_at && st->stop_phase == 1 &&
	    !st->exited) {
		/* the ranks outlived their grace: mpirun's turn (it sends
		 * them SIGTERM and SIGKILL itself) */
		session_kill(st->pid, st->start_ticks, SIGTERM);
		st->stop_phase = 2;
		st->kill_at = now + MPIRUN_GRACE_S;
	} else if (st->kill_at && now >= st->kill_at) {
		/* Past the grace: everything left in the session dies. */
		int n = session_kill(st->pid, st->start_ticks, SIGKILL);
		if (!st->exited && kill(st->pid, SIGKILL) == 0 && !n)
			n = 1;
		if (n && !st->t_kill)
			st->t_kill = now;
		st->killed += n;
		st->stop_phase = 3;
		st->kill_at = now + KILL_GRACE_S;
	}
	/* Exited, but something (an orphan) still holds the pipes open. */
	if (st->exited && (st->out.fd >= 0 || st->err.fd >= 0)) {
		if (!st->exit_seen)
			st->exit_seen = now;
		else if (now - st->exit_seen > PIPE_GRACE_S) {
			session_kill(st->pid, 0, SIGKILL);
			if (st->out.fd >= 0)
				stage_read(a, st, &st->out);
			if (st->err.fd >= 0)
				stage_read(a, st, &st->err);
			if (st->out.fd >= 0) {
				close(st->out.fd);
				st->out.fd = -1;
			}
			if (st->err.fd >= 0) {
				close(st->err.fd);
				st->err.fd = -1;
			}
		}
	}
}

int stage_done(const struct stage *st)
{
	return st->exited && st->out.fd < 0 && st->err.fd < 0;
}

void stage_finish(struct agent *a, struct stage *st)
{
	int rc, sig = 0;
	char msg[256];
	const char *reason;
	double dur = agent_now() - st->t_start;
	json_t *extra;
	if (WIFEXITED(st->status)) {
		rc = WEXITSTATUS(st->status);
		snprintf(msg, sizeof msg, "exit %d", rc);
	} else {
		sig = WIFSIGNALED(st->status) ? WTERMSIG(st->status) : 0;
		rc = 128 + sig;
		snprintf(msg, sizeof msg, "killed by signal %d (%s)", sig,
			 strsignal(sig));
	}
	switch (st->stop) {
	case STOP_CANCEL:
		reason = "cancel";
		snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
			 "; cancelled");
		break;
	case STOP_TIMEOUT:
		reason = "timeout";
		snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
			 "; timeout after %g s", st->timeout_s);
		break;
	case STOP_SHUTDOWN:
		reason = "shutdown";
		snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
			 "; the agent is exiting");
		break;
	default:
		reason = sig ? "signal" : "exit";
	}
	if (st->killed) /* the last resort, said as such */
		snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
			 "; SIGKILL to %d process%s still running %.1f s after "
			 "SIGTERM", st->killed, st->killed == 1 ? "" : "es",
			 st->t_kill - st->t_term);
	extra = json_pack("{s:i, s:s, s:s, s:f}", "rc", rc, "reason", reason,
			  "msg", msg, "duration_s", dur);
	if (sig)
		json_object_set_new(extra, "signal", json_integer(sig));
	if (rc)
		cause_to_json(&st->cause, a->cfg.node, extra);
	emit_stage(a, st, "end", extra);
	if (st->ranks) { /* the cluster stage's ssh files, if any */
		char *f = stage_file(a, st->id, "ssh_config");
		unlink(f);
		free(f);
		f = stage_file(a, st->id, "known_hosts");
		unlink(f);
		free(f);
	}
	if (st->runfile) {
		agent_unlink_after_commit(a, st->runfile);
		st->runfile = NULL;
	}
}

/* ---------------------------------------------------------------- recover */

void stage_recover(struct agent *a)
{
	DIR *d = opendir(a->spool.dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char *path;
		json_t *o;
		int killed = 0;
		char msg[256];
		if (strncmp(e->d_name, "stage-", 6) || n < 11 ||
		    strcmp(e->d_name + n - 4, ".run"))
			continue;
		path = path_join(a->spool.dir, e->d_name);
		o = json_load_file(path, 0, NULL);
		if (json_is_object(o)) {
			pid_t pid = (pid_t)proto_int(o, "pid", 0);
			unsigned long long start =
			    (unsigned long long)proto_int(o, "start", 0);
			killed = session_kill(pid, start, SIGKILL);
			snprintf(msg, sizeof msg,
				 "lost: the agent was restarted while the "
				 "stage ran (%d leftover processes killed)",
				 killed);
			agent_emit(
			    a, "stage",
			    json_pack("{s:s, s:s, s:s, s:f, s:i, s:s, "
				      "s:s}",
				      "stage", proto_str(o, "stage", "?"),
				      "stage_id", proto_str(o, "stage_id", "?"),
				      "state", "end", "progress", 1.0, "rc", -1,
				      "reason", "lost", "msg", msg),
			    0);
		} else {
			agent_log(a, "warn",
				  "%s: unreadable run record "
				  "removed",
				  path);
		}
		json_decref(o);
		agent_unlink_after_commit(a, path);
	}
	closedir(d);
}
