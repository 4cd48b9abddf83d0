/*
 * link.c - the transport-independent half of a link: phase, errors, the
 * outgoing queue, line framing of the agent's stdout.  See link.h.
 */
#include "link_impl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const phase_names[] = {
    [LINK_CONNECTING] = "connecting", [LINK_HANDSHAKE] = "handshake",
    [LINK_AUTH] = "auth",	      [LINK_DEPLOY] = "deploy",
    [LINK_STARTING] = "starting",     [LINK_UP] = "up",
    [LINK_EOF] = "exited",	      [LINK_FAILED] = "failed",
};

const char *link_phase_name(enum link_phase p)
{
	return (unsigned)p < sizeof phase_names / sizeof *phase_names
		   ? phase_names[p]
		   : "?";
}

int link_open(const struct link_cfg *cfg, struct link **out,
	      struct d0_err *err)
{
	struct link *l;
	size_t n = 0;
	int rc;
	*out = NULL;
	if (!cfg->node || !cfg->agent_path || !cfg->on_line) {
		d0_errf(err, "link: node, agent_path and on_line are required");
		return -1;
	}
	l = calloc(1, sizeof *l);
	if (!l) {
		d0_errf(err, "out of memory");
		return -1;
	}
	l->cfg = *cfg;
	while (cfg->agent_args && cfg->agent_args[n])
		n++;
	l->agent_args = calloc(n + 1, sizeof *l->agent_args);
	if (!l->agent_args) {
		free(l);
		d0_errf(err, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		l->agent_args[i] = strdup(cfg->agent_args[i]);
	l->cfg.agent_args = l->agent_args;
	proto_lines_init(&l->lines);
	l->phase = LINK_STARTING;
	if (!strcmp(cfg->node->transport, "local"))
		rc = link_local_open(l, err);
	else
		rc = link_ssh_open(l, err);
	if (rc) {
		l->ops = NULL;
		link_free(l);
		return -1;
	}
	*out = l;
	return 0;
}

int link_pollfds(struct link *l, struct pollfd *pfd, int max)
{
	if (l->phase == LINK_FAILED || !l->ops)
		return 0;
	return l->ops->pollfds(l, pfd, max);
}

int link_timeout_ms(struct link *l)
{
	if (l->phase == LINK_FAILED || !l->ops)
		return -1;
	return l->ops->timeout_ms(l);
}

void link_service(struct link *l, struct pollfd *pfd, int n)
{
	if (l->phase == LINK_FAILED || !l->ops)
		return;
	l->again = 0;
	l->ops->service(l, pfd, n);
}

int link_busy(const struct link *l)
{
	return l->again && l->phase != LINK_FAILED;
}

int link_send(struct link *l, const char *data, size_t n)
{
	if (l->phase != LINK_UP)
		return -1;
	if (l->out_off && l->out_off == l->out_len)
		l->out_off = l->out_len = 0;
	if (l->out_len + n > l->out_cap) {
		size_t cap = l->out_cap ? l->out_cap : 4096;
		char *p;
		if (l->out_off) { /* compact first */
			memmove(l->out, l->out + l->out_off,
				l->out_len - l->out_off);
			l->out_len -= l->out_off;
			l->out_off = 0;
		}
		while (cap < l->out_len + n)
			cap *= 2;
		if (cap > l->out_cap) {
			p = realloc(l->out, cap);
			if (!p)
				return -1;
			l->out = p;
			l->out_cap = cap;
		}
	}
	memcpy(l->out + l->out_len, data, n);
	l->out_len += n;
	return 0;
}

size_t link_pending(const struct link *l)
{
	return l->out_len - l->out_off;
}

const char *link_out_peek(struct link *l, size_t *n)
{
	*n = l->out_len - l->out_off;
	return l->out + l->out_off;
}

void link_out_consume(struct link *l, size_t n)
{
	l->out_off += n;
	if (l->out_off >= l->out_len)
		l->out_off = l->out_len = 0;
}

enum link_phase link_phase(const struct link *l)
{
	return l->phase;
}

const char *link_error(const struct link *l)
{
	return l->error;
}

const char *link_reason(const struct link *l)
{
	return l->reason;
}

const char *link_fingerprint(const struct link *l)
{
	return l->fingerprint;
}

const char *link_stderr(const struct link *l)
{
	return l->err_tail;
}

void link_fail(struct link *l, const char *reason, const char *fmt, ...)
{
	va_list ap;
	if (l->phase == LINK_FAILED)
		return;
	l->phase = LINK_FAILED;
	snprintf(l->reason, sizeof l->reason, "%s", reason);
	va_start(ap, fmt);
	vsnprintf(l->error, sizeof l->error, fmt, ap);
	va_end(ap);
}

static void deliver(struct link *l, enum proto_line_result r, const char *line,
		    size_t len)
{
	if (r == PL_LINE)
		l->cfg.on_line(l->cfg.arg, line, len);
	else if (r == PL_TOOLONG && l->cfg.on_toolong)
		l->cfg.on_toolong(l->cfg.arg, len); /* dropped, but counted */
}

void link_got_stdout(struct link *l, const char *data, size_t n)
{
	const char *line;
	size_t len;
	enum proto_line_result r;
	proto_lines_push(&l->lines, data, n);
	while ((r = proto_lines_next(&l->lines, &line, &len)) != PL_NONE)
		deliver(l, r, line, len);
}

void link_got_stdout_eof(struct link *l)
{
	const char *line;
	size_t len;
	enum proto_line_result r;
	while ((r = proto_lines_finish(&l->lines, &line, &len)) != PL_NONE)
		deliver(l, r, line, len);
	if (l->phase != LINK_FAILED)
		l->phase = LINK_EOF;
}

void link_got_stderr(struct link *l, const char *data, size_t n)
{
	if (n >= LINK_STDERR_KEEP) {
		data += n - LINK_STDERR_KEEP;
		n = LINK_STDERR_KEEP;
	}
	if (l->err_len + n > LINK_STDERR_KEEP) {
		size_t drop = l->err_len + n - LINK_STDERR_KEEP;
		memmove(l->err_tail, l->err_tail + drop, l->err_len - drop);
		l->err_len -= drop;
	}
	memcpy(l->err_tail + l->err_len, data, n);
	l->err_len += n;
	l->err_tail[l->err_len] = 0;
}

void link_close_input(struct link *l)
{
	if (l->ops && l->phase != LINK_FAILED)
		l->ops->close_input(l);
}

void link_free(struct link *l)
{
	if (!l)
		return;
	if (l->ops)
		l->ops->destroy(l);
	proto_lines_free(&l->lines);
	for (size_t i = 0; l->agent_args && l->agent_args[i]; i++)
		free(l->agent_args[i]);
	free(l->agent_args);
	free(l->out);
	free(l);
}
