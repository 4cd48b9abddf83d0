/*
 * agent.c - day0-agent's loop: one poll() over stdin, the stage pipes, a
 * signalfd and stdout, with a timeout for samplers and heartbeats.
 *
 * Order of work in one turn of the loop:
 *   1. read whatever is ready (signals, stage output, commands) and emit
 *      the events it causes: they go to the spool batch, not to stdout;
 *   2. timers: stage timeouts and kill escalation, ended stages, samplers,
 *      the heartbeat, shutdown;
 *   3. commit the batch (one write, one fdatasync) - the group commit that
 *      makes "spooled before sent" cost one sync per turn, not per event;
 *   4. send committed bytes to stdout (non-blocking when stdout is a pipe,
 *      so a slow console never stalls the stages; the spool holds the
 *      backlog).
 * If the spool cannot be written (a full disk), the agent stops reading
 * stage pipes and sampling - the stages block on their own output rather
 * than lose it - and retries every second; commands are still answered.
 */
#include "agent.h"
#include "simulate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double agent_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- emitting */

static void emit_line(struct agent *a, const char *type, json_t *fields,
		      int64_t ts)
{
	struct d0_err err;
	size_t len;
	char *line;
	json_t *sim = NULL;
	if (simulate_on()) {
		/* every event of a simulated node says so */
		sim = fields ? json_incref(fields) : json_object();
		json_object_set_new(sim, "sim", json_true());
		fields = sim;
	}
	line = proto_event_format(a->cfg.node, spool_next_seq(&a->spool),
				  ts ? ts : proto_now_ns(), type, fields, &len,
				  &err);
	json_decref(sim);
	if (!line) {
		/* Too long or not encodable: say so instead. */
		json_t *e = json_pack("{s:s}", "msg", err.msg);
		line =
		    proto_event_format(a->cfg.node, spool_next_seq(&a->spool),
				       proto_now_ns(), "error", e, &len, &err);
		json_decref(e);
		if (!line)
			abort(); /* a short error event always fits */
	}
	spool_append(&a->spool, line, len);
	free(line);
	a->last_emit = agent_now();
}

void agent_emit(struct agent *a, const char *type, json_t *fields, int64_t ts)
{
	emit_line(a, type, fields, ts);
	json_decref(fields);
}

/* A JSON string of text that may not be valid UTF-8 (a truncated
 * message, bytes from a child): invalid bytes are written as \xNN. */
json_t *agent_text(const char *s)
{
	size_t n = strlen(s);
	char *buf;
	json_t *v;
	if (proto_utf8_valid(s, n, NULL))
		return json_string(s);
	buf = malloc(n * 4 + 1);
	if (!buf)
		abort();
	proto_excerpt(s, n, buf, n * 4 + 1);
	v = json_string(buf);
	free(buf);
	return v;
}

static void verror(struct agent *a, const char *cmd, const char *stage_id,
		   const char *line, size_t len, const char *fmt, va_list ap)
{
	char msg[1024];
	json_t *o;
	vsnprintf(msg, sizeof msg, fmt, ap);
	o = json_object();
	json_object_set_new(o, "msg", agent_text(msg));
	if (cmd)
		json_object_set_new(o, "cmd", json_string(cmd));
	/* one the console could have sent (an id and its attempt): a longer
	 * one is no task's, and echoing it could overflow the line limit */
	if (stage_id && *stage_id && strlen(stage_id) <= STAGE_ID_MAX + 12)
		json_object_set_new(o, "stage_id", agent_text(stage_id));
	if (line) {
		char ex[240];
		proto_excerpt(line, len, ex, sizeof ex);
		json_object_set_new(o, "line", json_string(ex));
	}
	agent_emit(a, "error", o, 0);
}

void agent_error(struct agent *a, const char *cmd, const char *line, size_t len,
		 const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(a, cmd, NULL, line, len, fmt, ap);
	va_end(ap);
}

void agent_refuse(struct agent *a, const char *cmd, const char *stage_id,
		  const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(a, cmd, stage_id, NULL, 0, fmt, ap);
	va_end(ap);
}

void agent_log(struct agent *a, const char *level, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	json_t *o;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	o = json_pack("{s:s}", "level", level);
	json_object_set_new(o, "msg", agent_text(msg));
	agent_emit(a, "log", o, 0);
}

void agent_unlink_after_commit(struct agent *a, char *path)
{
	a->unlink_after_commit =
	    realloc(a->unlink_after_commit, (a->nunlink + 1) * sizeof(char *));
	if (!a->unlink_after_commit)
		abort();
	a->unlink_after_commit[a->nunlink++] = path;
}

struct stage *agent_find_stage(struct agent *a, const char *id)
{
	for (int i = 0; i < a->nstages; i++)
		if (!strcmp(a->stages[i]->id, id))
			return a->stages[i];
	return NULL;
}

void agent_hello(struct agent *a)
{
	json_t *o = json_pack(
	    "{s:s, s:i, s:i, s:I, s:I, s:i, s:s, s:f, s:s}", "agent_version",
	    DAY0_VERSION, "pid", (int)getpid(), "proto", PROTO_VERSION, "acked",
	    (json_int_t)a->spool.acked, "last_seq",
	    (json_int_t)a->spool.last_seq, "cards", a->cards.n, "vendor",
	    a->cards.vendor ? a->cards.vendor->name : "none", "sample_hz",
	    a->cfg.sample_hz, "spool", a->cfg.spool_dir);
	if (a->engine_version[0])
		json_object_set_new(o, "engine_version",
				    json_string(a->engine_version));
	agent_emit(a, "hello", o, 0);
}

/* -------------------------------------------------------------- commands */

static void handle_line(struct agent *a, const char *line, size_t len)
{
	struct proto_cmd cmd;
	struct d0_err err;
	if (proto_blank(line, len))
		return;
	if (proto_cmd_parse(line, len, &cmd, &err) < 0) {
		agent_error(a, NULL, line, len, "%s", err.msg);
		return;
	}
	if (a->quitting && cmd.kind == CMD_RUN) {
		agent_refuse(a, "run", proto_str(cmd.obj, "stage_id", NULL),
			     "run: the agent is exiting (%s)", a->quit_reason);
	} else {
		agent_cmds[cmd.kind]->run(a, &cmd);
	}
	proto_cmd_free(&cmd);
}

static void read_stdin(struct agent *a)
{
	char buf[65536];
	const char *line;
	size_t len;
	enum proto_line_result r;
	ssize_t n = read(a->in_fd, buf, sizeof buf);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0)
		proto_lines_push(&a->in, buf, (size_t)n);
	for (;;) {
		r = n > 0 ? proto_lines_next(&a->in, &line, &len)
			  : proto_lines_finish(&a->in, &line, &len);
		if (r == PL_NONE)
			break;
		if (r == PL_TOOLONG)
			agent_error(a, NULL, NULL, 0,
				    "command line of %zu bytes is over the "
				    "%d-byte limit: ignored",
				    len, PROTO_MAX_LINE);
		else
			handle_line(a, line, len);
	}
	if (n <= 0) {
		a->in_fd = -1; /* end of input: the console is gone */
		if (!a->quitting) {
			a->quitting = 1;
			a->quit_reason = "eof";
		}
	}
}

/* ----------------------------------------------------------------- signals */

static void reap(struct agent *a)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (int i = 0; i < a->nstages; i++)
			if (a->stages[i]->pid == pid) {
				a->stages[i]->exited = 1;
				a->stages[i]->status = status;
			}
}

static void read_signals(struct agent *a)
{
	struct signalfd_siginfo si;
	while (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGCHLD)
			reap(a);
		else {
			if (!a->quitting)
				a->quit_reason = "signal";
			a->quitting = a->stop_stages = 1;
		}
	}
	reap(a);
}

/* ------------------------------------------------------------------ output */

static void send_out(struct agent *a)
{
	if (a->out_dead)
		return;
	while (spool_unsent(&a->spool)) {
		ssize_t n = spool_send(&a->spool, a->out_fd);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			/* EPIPE: nobody reads us any more. */
			a->out_dead = 1;
			if (!a->quitting) {
				a->quitting = 1;
				a->quit_reason = "stdout closed";
			}
			return;
		}
		if (a->out_nonblock)
			return; /* poll says when there is room again */
	}
}

static int commit(struct agent *a)
{
	struct d0_err err;
	if (spool_commit(&a->spool, &err) < 0) {
		if (a->spool_ok)
			fprintf(stderr,
				"day0-agent: %s; pausing stages and "
				"samplers until it can be written\n",
				err.msg);
		a->spool_ok = 0;
		a->spool_retry = agent_now() + 1.0;
		return -1;
	}
	if (!a->spool_ok)
		fprintf(stderr, "day0-agent: spool writable again\n");
	a->spool_ok = 1;
	for (size_t i = 0; i < a->nunlink; i++) {
		unlink(a->unlink_after_commit[i]);
		free(a->unlink_after_commit[i]);
	}
	a->nunlink = 0;
	return 0;
}

/* ----------------------------------------------------------------- the loop */

static void remove_stage(struct agent *a, int i)
{
	stage_free(a->stages[i]);
	memmove(&a->stages[i], &a->stages[i + 1],
		(size_t)(a->nstages - i - 1) * sizeof *a->stages);
	a->nstages--;
}

static void timers(struct agent *a, double now)
{
	for (int i = 0; i < a->nstages; i++) {
		struct stage *st = a->stages[i];
		if (a->stop_stages && !st->stop)
			stage_stop(a, st, STOP_SHUTDOWN);
		stage_tick(a, st, now);
		if (stage_done(st)) {
			stage_finish(a, st);
			remove_stage(a, i--);
		}
	}
	if (a->spool_ok && a->cfg.sample_hz > 0 && now >= a->next_sample) {
		sampler_tick(a);
		a->next_sample += 1.0 / a->cfg.sample_hz;
		if (a->next_sample < now) /* fell behind: do not burst */
			a->next_sample = now + 1.0 / a->cfg.sample_hz;
	}
	if (a->cfg.heartbeat_s > 0 && now - a->last_emit >= a->cfg.heartbeat_s)
		agent_emit(a, "heartbeat",
			   json_pack("{s:i, s:I}", "running", a->nstages,
				     "acked", (json_int_t)a->spool.acked),
			   0);
}

static int poll_timeout_ms(struct agent *a, double now)
{
	double t = now + 1.0;
	for (int i = 0; i < a->nstages; i++) {
		struct stage *st = a->stages[i];
		if (st->deadline && !st->stop && st->deadline < t)
			t = st->deadline;
		if (st->kill_at && st->kill_at < t)
			t = st->kill_at;
		if (st->exited)
			t = now + 0.1;
	}
	if (a->cfg.sample_hz > 0 && a->next_sample < t)
		t = a->next_sample;
	if (a->cfg.heartbeat_s > 0 && a->last_emit + a->cfg.heartbeat_s < t)
		t = a->last_emit + a->cfg.heartbeat_s;
	if (!a->spool_ok && a->spool_retry < t)
		t = a->spool_retry;
	if (t <= now)
		return 0;
	return (int)((t - now) * 1000) + 1;
}

/* The end: nothing running any more.  Say bye, flush, compact. */
static void finish(struct agent *a)
{
	struct d0_err err;
	agent_emit(a, "bye", json_pack("{s:s}", "reason", a->quit_reason), 0);
	for (int tries = 0; commit(a) < 0 && tries < 5; tries++)
		sleep(1);
	if (!a->out_dead) {
		/* Blocking now: whatever the console has not read yet. */
		int fl = fcntl(a->out_fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK))
			fcntl(a->out_fd, F_SETFL, fl & ~O_NONBLOCK);
		a->out_nonblock = 0;
		send_out(a);
	}
	if (spool_compact(&a->spool, &err) < 0)
		fprintf(stderr, "day0-agent: %s\n", err.msg);
}

int agent_run(struct agent *a)
{
	sigset_t mask;
	struct stat stt;
	struct pollfd pfd[3 + 2 * AGENT_MAX_STAGES];
	struct stage_stream *pstream[3 + 2 * AGENT_MAX_STAGES];
	struct stage *pstage[3 + 2 * AGENT_MAX_STAGES];

	signal(SIGPIPE, SIG_IGN);
	/* Orphans of our stages (a shell's background jobs) become our
	 * children: reaped here, not left as zombies under a lax init. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	a->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sigfd < 0) {
		fprintf(stderr, "day0-agent: signalfd: %s\n", strerror(errno));
		return EXIT_USAGE;
	}
	a->in_fd = 0;
	a->out_fd = 1;
	if (fstat(a->out_fd, &stt) == 0 &&
	    (S_ISFIFO(stt.st_mode) || S_ISSOCK(stt.st_mode))) {
		int fl = fcntl(a->out_fd, F_GETFL);
		if (fl >= 0 && fcntl(a->out_fd, F_SETFL, fl | O_NONBLOCK) == 0)
			a->out_nonblock = 1;
	}
	proto_lines_init(&a->in);
	a->spool_ok = 1;
	a->last_emit = agent_now();
	a->next_sample = agent_now();

	/* What a previous agent left: stages to end, events to resend. */
	stage_recover(a);
	agent_hello(a);
	for (int i = 0; i < a->cards.n; i++)
		agent_emit(a, "sample",
			   json_pack("{s:i, s:s, s:I}", "card", i, "metric",
				     "mem.budget", "value",
				     (json_int_t)a->cards.card[i].mem_bytes),
			   0);

	for (;;) {
		int n = 0, rc;
		double now;
		commit(a);
		send_out(a);
		if (a->quitting && a->nstages == 0)
			break;
		pfd[n] = (struct pollfd){a->sigfd, POLLIN, 0};
		pstage[n++] = NULL;
		if (a->in_fd >= 0) {
			pfd[n] = (struct pollfd){a->in_fd, POLLIN, 0};
			pstage[n++] = NULL;
		}
		if (a->out_nonblock && !a->out_dead &&
		    spool_unsent(&a->spool)) {
			pfd[n] = (struct pollfd){a->out_fd, POLLOUT, 0};
			pstage[n++] = NULL;
		}
		for (int i = 0; a->spool_ok && i < a->nstages; i++) {
			struct stage *st = a->stages[i];
			if (st->out.fd >= 0) {
				pfd[n] = (struct pollfd){st->out.fd, POLLIN, 0};
				pstream[n] = &st->out;
				pstage[n++] = st;
			}
			if (st->err.fd >= 0) {
				pfd[n] = (struct pollfd){st->err.fd, POLLIN, 0};
				pstream[n] = &st->err;
				pstage[n++] = st;
			}
		}
		now = agent_now();
		rc = poll(pfd, (nfds_t)n, poll_timeout_ms(a, now));
		if (rc < 0 && errno != EINTR) {
			fprintf(stderr, "day0-agent: poll: %s\n",
				strerror(errno));
			break;
		}
		for (int i = 0; rc > 0 && i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (pfd[i].fd == a->sigfd && !pstage[i])
				read_signals(a);
			else if (pfd[i].fd == a->in_fd && !pstage[i])
				read_stdin(a);
			else if (pfd[i].fd == a->out_fd && !pstage[i])
				send_out(a);
			else if (pstage[i] && pstream[i]->fd == pfd[i].fd)
				stage_read(a, pstage[i], pstream[i]);
		}
		timers(a, agent_now());
	}
	finish(a);
	proto_lines_free(&a->in);
	close(a->sigfd);
	return EXIT_OK;
}
