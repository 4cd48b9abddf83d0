/*
 * link_impl.h - what the transports (link_local.c, link_ssh.c) share with
 * link.c.  Not for the rest of the console: use link.h.
 *
 * link.c owns the common state: phase, error text, the outgoing queue,
 * line framing of the agent's stdout (engine/proto's proto_lines) and the
 * tail of its stderr.  A transport moves bytes: it reads what it can and
 * hands it to link_got_stdout()/link_got_stderr(), and writes from
 * link_out_peek()/link_out_consume().
 */
#ifndef DAY0_LINK_IMPL_H
#define DAY0_LINK_IMPL_H

#include "link.h"
#include "proto.h"

struct link_ops {
	int (*pollfds)(struct link *l, struct pollfd *pfd, int max);
	int (*timeout_ms)(struct link *l);
	void (*service)(struct link *l, struct pollfd *pfd, int n);
	void (*close_input)(struct link *l);
	void (*destroy)(struct link *l); /* free transport state only */
};

#define LINK_STDERR_KEEP 4096

struct link {
	const struct link_ops *ops;
	struct link_cfg cfg;
	char **agent_args; /* owned copy of cfg.agent_args */
	enum link_phase phase;
	char error[1024];
	char reason[64];
	char fingerprint[128];
	struct proto_lines lines;
	char *out;	  /* queued stdin bytes */
	size_t out_len, out_cap, out_off;
	char err_tail[LINK_STDERR_KEEP + 1];
	size_t err_len;
	int again; /* the last service stopped with work left (link_busy) */
	void *t;   /* transport state */
};

/* The transports' constructors: fill l->ops and l->t, start work. */
int link_local_open(struct link *l, struct d0_err *err);
int link_ssh_open(struct link *l, struct d0_err *err);

/* Fail the link: phase FAILED, reason (short class) and message. */
void link_fail(struct link *l, const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Bytes from the agent's stdout / stderr. */
void link_got_stdout(struct link *l, const char *data, size_t n);
void link_got_stdout_eof(struct link *l);
void link_got_stderr(struct link *l, const char *data, size_t n);
/* Queued stdin bytes not yet written, and marking some written. */
const char *link_out_peek(struct link *l, size_t *n);
void link_out_consume(struct link *l, size_t n);

#endif
