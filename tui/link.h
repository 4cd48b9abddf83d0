/*
 * link.h - one node's byte pipe to its day0-agent.
 *
 * Two transports behind one interface, all driven from one poll() loop (no
 * thread or process per host):
 *   local  fork/exec of the agent with pipes (this machine);
 *   ssh    a libssh2 session, non-blocking: TCP connect, handshake, host key
 *          check against known_hosts (unknown and mismatched keys refused
 *          with the SHA256 fingerprint; --accept-new-host-keys records new
 *          ones, never changed ones), public-key auth (identity file, then
 *          ssh-agent), keepalives, agent deployment (run `AGENT --version`;
 *          when missing or different, upload day0-agent and day0-engine
 *          over the same session to ~/.cache/day0/bin/, check their
 *          SHA-256 remotely, then start it), then one exec channel whose
 *          stdin/stdout carry the protocol.
 *
 * Usage:
 *   link_open(&cfg, &l, &err);
 *   loop: n = link_pollfds(l, pfd, max); timeout = min(link_timeout_ms(l));
 *         poll(...); link_service(l, pfd, n);   -> cfg.on_line(line) calls
 *         link_send(l, "{\"cmd\":\"hello\"}\n", ...);
 *   link_phase(l) == LINK_FAILED: link_error(l) says why, link_reason(l)
 *   is the short class ("connection refused", "timeout", "host key
 *   mismatch", "host key unknown", "auth failed", "agent failed", ...)
 *   used to group failures.
 */
#ifndef DAY0_LINK_H
#define DAY0_LINK_H

#include <poll.h>
#include <stddef.h>

#include "inventory.h"
#include "util.h"

enum link_phase {
	LINK_CONNECTING, /* TCP connect in progress (ssh) */
	LINK_HANDSHAKE,	 /* SSH handshake + host key check */
	LINK_AUTH,	 /* public-key authentication */
	LINK_DEPLOY,	 /* checking / uploading the agent */
	LINK_STARTING,	 /* exec channel / child being started */
	LINK_UP,	 /* the agent's stdin/stdout are connected (ssh: its
			  * first line has arrived, so it really runs) */
	LINK_EOF,	 /* the agent's stdout ended (it exited) */
	LINK_FAILED,	 /* see link_error() */
};

struct link_cfg {
	const struct inv_node *node; /* host, port, user, identity, transport */
	const char *known_hosts;     /* NULL: ~/.ssh/known_hosts */
	int accept_new_host_keys;    /* trust on first use */
	int connect_timeout_ms;	     /* 0: 10000 (connect through auth) */
	int keepalive_s;	     /* 0: 15 */
	/* The local day0-agent binary: started as is by the local transport,
	 * uploaded (with the day0-engine next to it) by ssh when the node's
	 * copy is missing or of another version. */
	const char *agent_path;
	/* Arguments after the agent (NULL-terminated), e.g. --node n01
	 * --spool DIR --cards 4 --card-mem 2G --takeover.  ssh quotes each
	 * one, except that a leading "~/" stays the remote home. */
	char *const *agent_args;
	/* ssh: agent to run on the node (NULL: deploy to ~/.cache/day0/bin
	 * as above; a path: run that, no deployment). */
	const char *remote_agent;
	/* Called for every complete line the agent writes on stdout. */
	void (*on_line)(void *arg, const char *line, size_t len);
	/* Called (when set) for a line over PROTO_MAX_LINE, dropped unread:
	 * len is its size. */
	void (*on_toolong)(void *arg, size_t len);
	void *arg;
};

struct link;

/* Start connecting (or fork/exec).  Never blocks.  Returns -1 (err) only
 * for bad configuration; connection failures show as LINK_FAILED. */
int link_open(const struct link_cfg *cfg, struct link **out,
	      struct d0_err *err);
/* The descriptors to poll now (0..max), with their events set. */
int link_pollfds(struct link *l, struct pollfd *pfd, int max);
/* Milliseconds until the link needs service without I/O (timeouts,
 * keepalives), -1 for none. */
int link_timeout_ms(struct link *l);
/* Advance after poll(): pfd/n as filled by link_pollfds with revents set
 * (n = 0 for a timeout pass).  Calls on_line for received lines. */
void link_service(struct link *l, struct pollfd *pfd, int n);
/*
 * Whether l must be serviced on the next pass even without revents: its
 * last service stopped with work left (the transport read until EAGAIN
 * otherwise, so anything else arriving makes its fds ready).  The poll
 * loop services a link only when one of its fds is ready, a timer of its
 * is due, or this says so: with 128 nodes, servicing every link on every
 * wake-up cost the console most of its CPU (recv and setsockopt calls
 * that found nothing).
 */
int link_busy(const struct link *l);
/* Queue bytes for the agent's stdin (copied).  -1 when not LINK_UP. */
int link_send(struct link *l, const char *data, size_t n);
/* Bytes queued but not yet written. */
size_t link_pending(const struct link *l);
enum link_phase link_phase(const struct link *l);
const char *link_phase_name(enum link_phase p);
const char *link_error(const struct link *l);  /* "" unless FAILED */
const char *link_reason(const struct link *l); /* short class */
/* The agent's stderr, last few KiB (for error messages). */
const char *link_stderr(const struct link *l);
/* Close the agent's stdin (it then exits after its stages). */
void link_close_input(struct link *l);
/* Close everything; a local child is sent SIGTERM and reaped. */
void link_free(struct link *l);

/* ssh: the host key fingerprint seen ("SHA256:..."), "" before it. */
const char *link_fingerprint(const struct link *l);

#endif
