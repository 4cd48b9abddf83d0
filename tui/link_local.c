/*
 * link_local.c - the `local` transport: the agent as a child process with
 * three pipes, all non-blocking, serviced from the console's poll loop.
 */
#include "link_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct local {
	pid_t pid;
	int in, out, err; /* our ends: child's stdin, stdout, stderr */
	int closing;	  /* close stdin once the queue drains */
};

static void set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static int local_pollfds(struct link *l, struct pollfd *pfd, int max)
{
	struct local *t = l->t;
	int n = 0;
	size_t q;
	link_out_peek(l, &q);
	if (t->out >= 0 && n < max)
		pfd[n++] = (struct pollfd){t->out, POLLIN, 0};
	if (t->err >= 0 && n < max)
		pfd[n++] = (struct pollfd){t->err, POLLIN, 0};
	if (t->in >= 0 && q && n < max)
		pfd[n++] = (struct pollfd){t->in, POLLOUT, 0};
	return n;
}

static int local_timeout_ms(struct link *l)
{
	(void)l;
	return -1;
}

static void maybe_close_in(struct link *l)
{
	struct local *t = l->t;
	size_t q;
	link_out_peek(l, &q);
	if (t->closing && !q && t->in >= 0) {
		close(t->in);
		t->in = -1;
	}
}

static void drain(struct link *l, int *fd, int is_err)
{
	char buf[65536];
	for (;;) {
		ssize_t r = read(*fd, buf, sizeof buf);
		if (r > 0) {
			if (is_err)
				link_got_stderr(l, buf, (size_t)r);
			else
				link_got_stdout(l, buf, (size_t)r);
			if (l->phase == LINK_FAILED)
				return;
			continue;
		}
		if (r < 0 && (errno == EINTR))
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		close(*fd); /* EOF or error */
		*fd = -1;
		if (!is_err)
			link_got_stdout_eof(l);
		return;
	}
}

static void local_service(struct link *l, struct pollfd *pfd, int n)
{
	struct local *t = l->t;
	for (int i = 0; i < n; i++) {
		if (!pfd[i].revents)
			continue;
		if (pfd[i].fd == t->out && t->out >= 0)
			drain(l, &t->out, 0);
		else if (pfd[i].fd == t->err && t->err >= 0)
			drain(l, &t->err, 1);
		else if (pfd[i].fd == t->in && t->in >= 0) {
			size_t q;
			const char *p = link_out_peek(l, &q);
			ssize_t w = q ? write(t->in, p, q) : 0;
			if (w > 0)
				link_out_consume(l, (size_t)w);
			else if (w < 0 && errno != EAGAIN && errno != EINTR) {
				/* The agent closed its stdin (exited): its
				 * stdout EOF says the rest. */
				close(t->in);
				t->in = -1;
				link_out_consume(l, q);
			}
		}
		if (l->phase == LINK_FAILED)
			return;
	}
	maybe_close_in(l);
}

static void local_close_input(struct link *l)
{
	struct local *t = l->t;
	t->closing = 1;
	maybe_close_in(l);
}

static void local_destroy(struct link *l)
{
	struct local *t = l->t;
	if (!t)
		return;
	if (t->in >= 0)
		close(t->in);
	if (t->out >= 0)
		close(t->out);
	if (t->err >= 0)
		close(t->err);
	if (t->pid > 0) {
		int st;
		/* Give an agent whose stdin just closed a moment to exit by
		 * itself (it finishes its stages' bookkeeping), then TERM. */
		for (int i = 0; i < 50; i++) {
			if (waitpid(t->pid, &st, WNOHANG) == t->pid)
				goto reaped;
			nanosleep(&(struct timespec){0, 10000000}, NULL);
		}
		kill(t->pid, SIGTERM);
		while (waitpid(t->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
reaped:
	free(t);
	l->t = NULL;
}

static const struct link_ops local_ops = {
    local_pollfds, local_timeout_ms, local_service, local_close_input,
    local_destroy,
};

int link_local_open(struct link *l, struct d0_err *err)
{
	int pin[2], pout[2], perr[2], pexec[2];
	struct local *t = calloc(1, sizeof *t);
	size_t n = 0;
	char **argv;
	ssize_t r;
	int e;
	if (!t) {
		d0_errf(err, "out of memory");
		return -1;
	}
	while (l->agent_args[n])
		n++;
	argv = calloc(n + 2, sizeof *argv);
	if (!argv || pipe(pin) || pipe(pout) || pipe(perr) || pipe(pexec)) {
		d0_errf(err, "%s: pipe: %s", l->cfg.node->name,
			strerror(errno));
		free(argv);
		free(t);
		return -1;
	}
	argv[0] = (char *)l->cfg.agent_path;
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = l->agent_args[i];
	fcntl(pexec[1], F_SETFD, FD_CLOEXEC);
	t->pid = fork();
	if (t->pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		dup2(perr[1], 2);
		for (int fd = 3; fd < 1024; fd++)
			if (fd != pexec[1])
				close(fd);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_IGN); /* the console decides about ^C */
		execv(argv[0], argv);
		e = errno;
		r = write(pexec[1], &e, sizeof e);
		(void)r;
		_exit(127);
	}
	e = errno;
	free(argv);
	close(pin[0]);
	close(pout[1]);
	close(perr[1]);
	close(pexec[1]);
	if (t->pid < 0) {
		close(pin[1]);
		close(pout[0]);
		close(perr[0]);
		close(pexec[0]);
		free(t);
		d0_errf(err, "%s: fork: %s", l->cfg.node->name, strerror(e));
		return -1;
	}
	t->in = pin[1];
	t->out = pout[0];
	t->err = perr[0];
	set_nonblock(t->in);
	set_nonblock(t->out);
	set_nonblock(t->err);
	l->t = t;
	l->ops = &local_ops;
	/* exec failure comes back through the close-on-exec pipe. */
	while ((r = read(pexec[0], &e, sizeof e)) < 0 && errno == EINTR)
		;
	close(pexec[0]);
	if (r == sizeof e) {
		link_fail(l, "agent failed", "%s: cannot run %s: %s",
			  l->cfg.node->name, l->cfg.agent_path, strerror(e));
		return 0;
	}
	l->phase = LINK_UP;
	return 0;
}
