/*
 * link_ssh.c - the `ssh` transport: one libssh2 session per node, all of
 * them non-blocking and driven from the caller's poll loop.
 *
 * A link walks CONNECTING -> HANDSHAKE -> AUTH -> DEPLOY -> STARTING -> UP.
 * Every libssh2 call may answer LIBSSH2_ERROR_EAGAIN; the call is then
 * repeated with the same arguments on the next service pass, and
 * libssh2_session_block_directions() says whether to wait for the socket to
 * become readable or writable.  service() runs the state machine until it
 * stops making progress, because libssh2 may already hold bytes it read
 * (say, the auth reply and the channel confirmation together) that the next
 * poll() would never announce.
 *
 * Deployment (unless cfg.remote_agent): the SHA-256 of
 * ~/.cache/day0/bin/day0-agent and day0-engine on the node is compared with
 * the local files' (local_stamp); when the remote copies are missing or
 * differ, the agent and the day0-engine next to
 * it are sent with SCP as NAME.tmp-PID-N, their SHA-256 is checked on the
 * node with sha256sum, then they are made executable and renamed into place
 * (a rename, so an agent already running there is not disturbed).  A start
 * whose copies hash right notes the hash in ~/.cache/day0/bin.stamp; the
 * next starts trust the note (shell builtins, no hashing) while neither
 * copy nor the directory is newer than it.
 *
 * Agent arguments are single-quoted for the remote shell, except that a
 * leading "~/" stays outside the quotes so that it names the remote home
 * (`--spool ~/.cache/day0/spool`).
 */
#include "link_impl.h"
#include "weights.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libssh2.h>
#include <openssl/evp.h>

#define REMOTE_DIR ".cache/day0/bin" /* relative to the remote home */
#define DEPLOY_TIMEOUT_MS 120000     /* deploy + start, after auth */
#define DEPLOY_MARK "day0: deploy needed" /* the start command on stderr */

/* Steps inside LINK_DEPLOY. */
enum deploy_step {
	D_CHECK,   /* close the start channel that said "deploy needed" */
	D_MKDIR,   /* mkdir -p the directory */
	D_SEND,	   /* SCP the files (file index in ->file) */
	D_INSTALL, /* sha256sum -c, chmod, mv */
	D_DONE,
};

/* One exec (or SCP) channel run to completion: the deploy commands. */
struct job {
	LIBSSH2_CHANNEL *ch;
	int st;		       /* 0 open, 1 exec, 2 io, 3 eof, 4 close */
	char cmd[2048];	       /* exec command; "" for SCP */
	const char *scp_path;  /* SCP target (relative to home) */
	const unsigned char *data; /* SCP payload */
	size_t size;		   /* SCP: the file's size */
	size_t len, off;	   /* bytes to write, written */
	char out[1024]; /* stdout+stderr, truncated */
	size_t out_len;
	int rc; /* exit status */
};

struct ssh {
	int fd;
	LIBSSH2_SESSION *s;
	LIBSSH2_AGENT *agent;
	struct libssh2_agent_publickey *agent_id;
	LIBSSH2_CHANNEL *ch; /* the agent's channel */
	char where[400];     /* "NAME (HOST:PORT)" for messages */
	double deadline;     /* monotonic s; 0: none */
	double next_keepalive;
	int keepalive_on;
	/* auth */
	int auth_step; /* index into identity files, then the agent */
	char ident[4][512];
	int n_ident;
	char tried[1024];
	int agent_connected;
	/* deploy */
	enum deploy_step dstep;
	int file; /* 0 agent, 1 engine */
	char tmp[2][128];
	unsigned char *blob[2];
	size_t blob_len[2];
	char sha[2][65];
	struct job job;
	/* agent channel */
	int ch_st; /* 0 open, 1 exec, 2 waiting for the first byte */
	int deployed;
	char *start_cmd;
	int closing, eof_sent;
};

/* ---------------------------------------------------------------- helpers */

static void ssh_init_once(void)
{
	static int done;
	if (done)
		return;
	done = 1;
	libssh2_init(0);
	/* A peer that vanished turns writes into EPIPE; without this the
	 * whole console would die of SIGPIPE on one lost node. */
	signal(SIGPIPE, SIG_IGN);
}

static const char *last_error(struct ssh *t)
{
	char *msg = NULL;
	libssh2_session_last_error(t->s, &msg, NULL, 0);
	return msg && *msg ? msg : "unknown error";
}

/* "SHA256:<base64 without padding>" of raw bytes (a key blob's hash). */
static void fp_format(const unsigned char *hash, char *out, size_t max)
{
	unsigned char b64[64];
	int n = EVP_EncodeBlock(b64, hash, 32);
	while (n > 0 && b64[n - 1] == '=')
		n--;
	b64[n] = 0;
	snprintf(out, max, "SHA256:%s", (char *)b64);
}

/* The fingerprint of a base64 key blob as stored in known_hosts. */
static void fp_of_base64(const char *key, char *out, size_t max)
{
	size_t n = strlen(key);
	unsigned char *raw = malloc(n + 4), hash[32];
	int len;
	snprintf(out, max, "SHA256:?");
	if (!raw)
		return;
	len = EVP_DecodeBlock(raw, (const unsigned char *)key, (int)n);
	if (len >= 0) {
		/* EVP_DecodeBlock counts the '=' padding as zero bytes. */
		if (n >= 1 && key[n - 1] == '=')
			len--;
		if (n >= 2 && key[n - 2] == '=')
			len--;
		if (EVP_Digest(raw, (size_t)len, hash, NULL, EVP_sha256(),
			       NULL))
			fp_format(hash, out, max);
	}
	free(raw);
}

/* Append s to out[max] single-quoted for sh; a leading "~/" stays outside
 * the quotes (the remote home).  Returns -1 when it does not fit. */
static int shell_quote(char *out, size_t max, const char *s)
{
	size_t n = strlen(out);
#define PUT(c)                                                               \
	do {                                                                 \
		if (n + 1 >= max)                                            \
			return -1;                                           \
		out[n++] = (c);                                              \
	} while (0)
	if (n)
		PUT(' ');
	if (s[0] == '~' && s[1] == '/') {
		PUT('~');
		PUT('/');
		s += 2;
	}
	PUT('\'');
	for (; *s; s++) {
		if (*s == '\'') { /* close, escaped quote, reopen */
			PUT('\'');
			PUT('\\');
			PUT('\'');
		}
		PUT(*s);
	}
	PUT('\'');
	out[n] = 0;
	return 0;
#undef PUT
}

/* "~/x" -> "$HOME/x" locally. */
static void expand_home(const char *p, char *out, size_t max)
{
	const char *home = getenv("HOME");
	if (p[0] == '~' && (p[1] == '/' || !p[1]) && home)
		snprintf(out, max, "%s%s", home, p + 1);
	else
		snprintf(out, max, "%s", p);
}

/* The local agent's `--version` line (once per path: it is the same file
 * for every node), "" when it does not run. */
static const char *local_version(const char *agent)
{
	static char path[4096], ver[256];
	char cmd[4300], q[4200] = "";
	FILE *p;
	if (!strcmp(path, agent) && *ver)
		return ver;
	snprintf(path, sizeof path, "%s", agent);
	ver[0] = 0;
	if (shell_quote(q, sizeof q, agent))
		return ver;
	snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", q);
	if ((p = popen(cmd, "r"))) {
		if (!fgets(ver, sizeof ver, p))
			ver[0] = 0;
		pclose(p);
	}
	ver[strcspn(ver, "\r\n")] = 0;
	return ver;
}

/*
 * The SHA-256 of the local agent followed by its engine, hex: the node's
 * copies must be these bytes, not just the same version (a sanitizer or
 * debug build reports the same --version as a release build).
 */
static const char *local_stamp(const char *agent)
{
	static char path[4096], hex[65];
	char engine[4200], *slash;
	const char *files[2];
	EVP_MD_CTX *ctx;
	unsigned char md[32], buf[65536];
	unsigned int mdlen = 0;
	int ok = 1;
	if (!strcmp(path, agent) && *hex)
		return hex;
	snprintf(path, sizeof path, "%s", agent);
	hex[0] = 0;
	snprintf(engine, sizeof engine, "%s", agent);
	slash = strrchr(engine, '/');
	snprintf(slash ? slash + 1 : engine,
		 sizeof engine - (size_t)(slash ? slash + 1 - engine : 0), "%s",
		 "day0-engine");
	files[0] = agent;
	files[1] = engine;
	ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		ok = 0;
	for (int i = 0; ok && i < 2; i++) {
		FILE *f = fopen(files[i], "rb");
		size_t n;
		if (!f) {
			ok = 0;
			break;
		}
		while ((n = fread(buf, 1, sizeof buf, f)) > 0)
			if (!EVP_DigestUpdate(ctx, buf, n))
				ok = 0;
		if (ferror(f))
			ok = 0;
		fclose(f);
	}
	if (ok && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32)
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
	EVP_MD_CTX_free(ctx);
	return hex;
}

/* -------------------------------------------------------------- the jobs */

static void job_start_exec(struct job *j, const char *cmd)
{
	memset(j, 0, sizeof *j);
	snprintf(j->cmd, sizeof j->cmd, "%s", cmd);
}

static void job_start_scp(struct job *j, const char *path,
			  const unsigned char *data, size_t len)
{
	memset(j, 0, sizeof *j);
	j->scp_path = path;
	j->data = data;
	j->size = len;
	/* The scp protocol ends a file with one '\0' from the source (the
	 * sink waits for it, else it reports a lost connection and exits
	 * 1); libssh2 leaves it to us.  data is NUL-terminated
	 * (file_read_all), so that byte is data[len]. */
	j->len = len + 1;
}

static void job_keep(struct job *j, const char *buf, ssize_t n)
{
	size_t room = sizeof j->out - 1 - j->out_len;
	if (n <= 0)
		return;
	if ((size_t)n > room)
		n = (ssize_t)room;
	memcpy(j->out + j->out_len, buf, (size_t)n);
	j->out_len += (size_t)n;
	j->out[j->out_len] = 0;
}

static void job_free(struct job *j)
{
	if (j->ch)
		libssh2_channel_free(j->ch);
	j->ch = NULL;
}

/* Advance a job: 1 done (j->rc, j->out), 0 waiting, -1 session error. */
static int job_step(struct ssh *t, struct job *j)
{
	char buf[4096];
	ssize_t r;
	int rc;
	for (;;) {
		switch (j->st) {
		case 0:
			if (j->scp_path) {
				j->ch = libssh2_scp_send64(t->s, j->scp_path,
							   0600,
							   (libssh2_int64_t)j->size,
							   0, 0);
				if (!j->ch)
					goto nochan;
				j->st = 2;
			} else {
				j->ch = libssh2_channel_open_session(t->s);
				if (!j->ch)
					goto nochan;
				j->st = 1;
			}
			continue;
		case 1:
			rc = libssh2_channel_exec(j->ch, j->cmd);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			if (rc)
				return -1;
			j->st = 2;
			continue;
		case 2: /* write the payload (SCP), read both streams */
			while (j->off < j->len) {
				size_t n = j->len - j->off;
				if (n > 65536)
					n = 65536;
				r = libssh2_channel_write(j->ch,
							  (const char *)j->data +
							      j->off,
							  n);
				if (r == LIBSSH2_ERROR_EAGAIN)
					break;
				if (r < 0)
					return -1;
				j->off += (size_t)r;
			}
			while ((r = libssh2_channel_read(j->ch, buf,
							 sizeof buf)) > 0)
				job_keep(j, buf, r);
			if (r < 0 && r != LIBSSH2_ERROR_EAGAIN)
				return -1;
			while ((r = libssh2_channel_read_stderr(
				    j->ch, buf, sizeof buf)) > 0)
				job_keep(j, buf, r);
			if (r < 0 && r != LIBSSH2_ERROR_EAGAIN)
				return -1;
			if (j->off < j->len)
				return 0;
			if (j->scp_path) {
				j->st = 3;
				continue;
			}
			if (!libssh2_channel_eof(j->ch))
				return 0;
			j->st = 4;
			continue;
		case 3: /* SCP: end of data, then wait for scp to finish */
			rc = libssh2_channel_send_eof(j->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			if (rc)
				return -1;
			j->st = 5;
			continue;
		case 5:
			rc = libssh2_channel_wait_eof(j->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			if (rc)
				return -1;
			j->st = 4;
			continue;
		case 4:
			rc = libssh2_channel_close(j->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			rc = libssh2_channel_wait_closed(j->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			j->rc = libssh2_channel_get_exit_status(j->ch);
			rc = libssh2_channel_free(j->ch);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			j->ch = NULL;
			return 1;
		}
	}
nochan:
	if (libssh2_session_last_errno(t->s) == LIBSSH2_ERROR_EAGAIN)
		return 0;
	return -1;
}

/* --------------------------------------------------------------- phases */

static void set_deadline(struct ssh *t, int ms)
{
	t->deadline = now_s() + ms / 1000.0;
}

static int tcp_connect(struct link *l, struct ssh *t)
{
	const struct inv_node *nd = l->cfg.node;
	struct addrinfo hints = {0}, *ai = NULL;
	char port[16];
	int rc, one = 1;
	snprintf(port, sizeof port, "%d", nd->port ? nd->port : 22);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	rc = getaddrinfo(nd->host, port, &hints, &ai);
	if (rc == EAI_NONAME) {
		/* A name: the system resolver (usually /etc/hosts for
		 * cluster nodes).  The only call here that may wait. */
		hints.ai_flags = AI_NUMERICSERV;
		rc = getaddrinfo(nd->host, port, &hints, &ai);
	}
	if (rc) {
		link_fail(l, "unresolvable", "%s: cannot resolve: %s",
			  t->where, gai_strerror(rc));
		return -1;
	}
	t->fd = socket(ai->ai_family,
		       ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		       ai->ai_protocol);
	if (t->fd < 0) {
		link_fail(l, "socket", "%s: socket: %s", t->where,
			  strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	/* Interactive protocol lines: no Nagle delay.  And a peer that stops
	 * acknowledging (our keepalives) is declared lost after four
	 * keepalive periods instead of the kernel's ~15 minutes. */
	setsockopt(t->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	{
		unsigned int ms = (unsigned int)(l->cfg.keepalive_s > 0
							 ? l->cfg.keepalive_s
							 : 15) *
				  4000u;
		setsockopt(t->fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms,
			   sizeof ms);
	}
	rc = connect(t->fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (rc && errno != EINPROGRESS) {
		int e = errno;
		link_fail(l, e == ECONNREFUSED ? "connection refused"
					       : "unreachable",
			  "%s: %s", t->where,
			  e == ECONNREFUSED ? "connection refused"
					    : strerror(e));
		return -1;
	}
	return 0;
}

/* After the TCP connect finished: start the SSH session. */
static int session_start(struct link *l, struct ssh *t)
{
	struct pollfd p = {t->fd, POLLOUT, 0};
	int e = 0;
	socklen_t len = sizeof e;
	/* Called on timeout passes too: only a writable socket is done. */
	if (poll(&p, 1, 0) <= 0 || !p.revents)
		return 0;
	getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &e, &len);
	if (e) {
		link_fail(l, e == ECONNREFUSED ? "connection refused"
					       : "unreachable",
			  "%s: %s", t->where,
			  e == ECONNREFUSED ? "connection refused"
					    : strerror(e));
		return -1;
	}
	t->s = libssh2_session_init_ex(NULL, NULL, NULL, l);
	if (!t->s) {
		link_fail(l, "ssh", "%s: libssh2_session_init failed",
			  t->where);
		return -1;
	}
	libssh2_session_set_blocking(t->s, 0);
	l->phase = LINK_HANDSHAKE;
	return 1;
}

/* known_hosts, line by line: one line libssh2 cannot parse (a key type it
 * does not know) must not hide the lines after it, as readfile would. */
static void kh_read(LIBSSH2_KNOWNHOSTS *kh, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[16384];
	if (!f)
		return; /* no file: nothing known */
	while (fgets(line, sizeof line, f)) {
		size_t n = strlen(line);
		if (n <= 1 || line[0] == '#')
			continue;
		libssh2_knownhost_readline(kh, line, n,
					   LIBSSH2_KNOWNHOST_FILE_OPENSSH);
	}
	fclose(f);
}

static int key_type_mask(int hk)
{
	switch (hk) {
	case LIBSSH2_HOSTKEY_TYPE_RSA:
		return LIBSSH2_KNOWNHOST_KEY_SSHRSA;
	case LIBSSH2_HOSTKEY_TYPE_DSS:
		return LIBSSH2_KNOWNHOST_KEY_SSHDSS;
	case LIBSSH2_HOSTKEY_TYPE_ECDSA_256:
		return LIBSSH2_KNOWNHOST_KEY_ECDSA_256;
	case LIBSSH2_HOSTKEY_TYPE_ECDSA_384:
		return LIBSSH2_KNOWNHOST_KEY_ECDSA_384;
	case LIBSSH2_HOSTKEY_TYPE_ECDSA_521:
		return LIBSSH2_KNOWNHOST_KEY_ECDSA_521;
	case LIBSSH2_HOSTKEY_TYPE_ED25519:
		return LIBSSH2_KNOWNHOST_KEY_ED25519;
	}
	return LIBSSH2_KNOWNHOST_KEY_UNKNOWN;
}

/* Append the key as a known_hosts line (trust on first use). */
static int kh_append(struct link *l, struct ssh *t, LIBSSH2_KNOWNHOSTS *kh,
		     const char *path, const char *name, const char *key,
		     size_t klen, int tmask)
{
	struct libssh2_knownhost *store = NULL;
	char line[16384], dir[4096];
	size_t n = 0;
	int fd, rc;
	char *slash;
	if (libssh2_knownhost_addc(kh, name, NULL, key, klen, NULL, 0,
				   LIBSSH2_KNOWNHOST_TYPE_PLAIN |
				       LIBSSH2_KNOWNHOST_KEYENC_RAW | tmask,
				   &store) ||
	    libssh2_knownhost_writeline(kh, store, line, sizeof line, &n,
					LIBSSH2_KNOWNHOST_FILE_OPENSSH)) {
		link_fail(l, "host key unknown",
			  "%s: cannot record the host key: %s", t->where,
			  last_error(t));
		return -1;
	}
	snprintf(dir, sizeof dir, "%s", path);
	if ((slash = strrchr(dir, '/')) && slash != dir) {
		*slash = 0;
		mkdir(dir, 0700); /* ~/.ssh on a fresh account */
	}
	/* O_APPEND and one write: links accepting at once do not interleave. */
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	rc = fd < 0 ? -1 : write_full(fd, line, n);
	if (fd >= 0)
		close(fd);
	if (rc) {
		link_fail(l, "host key unknown", "%s: cannot write %s: %s",
			  t->where, path, strerror(errno));
		return -1;
	}
	return 0;
}

static int hostkey_check(struct link *l, struct ssh *t)
{
	const struct inv_node *nd = l->cfg.node;
	int port = nd->port ? nd->port : 22, type, rc, tmask;
	size_t klen;
	const char *key = libssh2_session_hostkey(t->s, &klen, &type);
	const char *hash =
	    libssh2_hostkey_hash(t->s, LIBSSH2_HOSTKEY_HASH_SHA256);
	struct libssh2_knownhost *found = NULL;
	LIBSSH2_KNOWNHOSTS *kh;
	char path[4096], name[300], expected[128];
	if (!key || !hash) {
		link_fail(l, "handshake failed", "%s: no host key: %s",
			  t->where, last_error(t));
		return -1;
	}
	fp_format((const unsigned char *)hash, l->fingerprint,
		  sizeof l->fingerprint);
	expand_home(l->cfg.known_hosts ? l->cfg.known_hosts
				       : "~/.ssh/known_hosts",
		    path, sizeof path);
	if (!(kh = libssh2_knownhost_init(t->s))) {
		link_fail(l, "ssh", "%s: libssh2_knownhost_init failed",
			  t->where);
		return -1;
	}
	kh_read(kh, path);
	tmask = key_type_mask(type);
	rc = libssh2_knownhost_checkp(kh, nd->host, port, key, klen,
				      LIBSSH2_KNOWNHOST_TYPE_PLAIN |
					  LIBSSH2_KNOWNHOST_KEYENC_RAW | tmask,
				      &found);
	switch (rc) {
	case LIBSSH2_KNOWNHOST_CHECK_MATCH:
		break;
	case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
		fp_of_base64(found && found->key ? found->key : "", expected,
			     sizeof expected);
		link_fail(l, "host key mismatch",
			  "%s: host key mismatch: expected %s, got %s; if "
			  "the node was reinstalled, remove its line from %s",
			  t->where, expected, l->fingerprint, path);
		break;
	default: /* NOTFOUND, FAILURE */
		/* OpenSSH's names: plain for port 22, [host]:port else. */
		if (port == 22)
			snprintf(name, sizeof name, "%s", nd->host);
		else
			snprintf(name, sizeof name, "[%s]:%d", nd->host, port);
		if (!l->cfg.accept_new_host_keys) {
			link_fail(l, "host key unknown",
				  "%s: host key unknown: %s is not in %s "
				  "(check it, then use --accept-new-host-keys)",
				  t->where, l->fingerprint, path);
			break;
		}
		kh_append(l, t, kh, path, name, key, klen, tmask);
		break;
	}
	libssh2_knownhost_free(kh);
	return l->phase == LINK_FAILED ? -1 : 0;
}

static void tried_add(struct ssh *t, const char *what)
{
	size_t n = strlen(t->tried);
	snprintf(t->tried + n, sizeof t->tried - n, "%s%s", n ? ", " : "",
		 what);
}

static void auth_setup(struct link *l, struct ssh *t)
{
	static const char *const dflt[] = {"~/.ssh/id_ed25519",
					   "~/.ssh/id_ecdsa", "~/.ssh/id_rsa"};
	const char *id = l->cfg.node->identity;
	if (*id) {
		expand_home(id, t->ident[0], sizeof t->ident[0]);
		t->n_ident = 1;
		return;
	}
	/* No identity in the inventory: what ssh would try first. */
	for (size_t i = 0; i < sizeof dflt / sizeof *dflt; i++) {
		expand_home(dflt[i], t->ident[t->n_ident],
			    sizeof t->ident[0]);
		if (access(t->ident[t->n_ident], R_OK) == 0)
			t->n_ident++;
	}
}

/* 1 authenticated, 0 waiting, -1 failed (link failed). */
static int auth_step(struct link *l, struct ssh *t)
{
	const char *user = l->cfg.node->user[0] ? l->cfg.node->user : "root";
	unsigned int ulen = (unsigned int)strlen(user);
	char what[600];
	int rc;
	while (t->auth_step < t->n_ident) {
		const char *priv = t->ident[t->auth_step];
		char pub[600];
		snprintf(pub, sizeof pub, "%s.pub", priv);
		rc = libssh2_userauth_publickey_fromfile_ex(
		    t->s, user, ulen, access(pub, R_OK) ? NULL : pub, priv,
		    NULL);
		if (rc == LIBSSH2_ERROR_EAGAIN)
			return 0;
		if (!rc)
			return 1;
		snprintf(what, sizeof what, "%s%s", priv,
			 rc == LIBSSH2_ERROR_FILE ? " (unreadable)" : "");
		tried_add(t, what);
		if (rc != LIBSSH2_ERROR_FILE &&
		    rc != LIBSSH2_ERROR_AUTHENTICATION_FAILED &&
		    rc != LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED &&
		    rc != LIBSSH2_ERROR_METHOD_NOT_SUPPORTED)
			goto lost;
		t->auth_step++;
	}
	if (t->auth_step == t->n_ident) {
		t->auth_step++;
		const char *sock = getenv("SSH_AUTH_SOCK");
		if (sock && *sock && (t->agent = libssh2_agent_init(t->s)) &&
		    libssh2_agent_connect(t->agent) == 0 &&
		    libssh2_agent_list_identities(t->agent) == 0) {
			t->agent_connected = 1;
			if (libssh2_agent_get_identity(t->agent, &t->agent_id,
						       NULL))
				t->agent_id = NULL;
		} else if (sock && *sock) {
			tried_add(t, "ssh-agent (cannot connect)");
		}
	}
	while (t->agent_connected && t->agent_id) {
		rc = libssh2_agent_userauth(t->agent, user, t->agent_id);
		if (rc == LIBSSH2_ERROR_EAGAIN)
			return 0;
		if (!rc)
			return 1;
		snprintf(what, sizeof what, "ssh-agent key %s",
			 t->agent_id->comment ? t->agent_id->comment : "?");
		tried_add(t, what);
		if (rc == LIBSSH2_ERROR_SOCKET_SEND ||
		    rc == LIBSSH2_ERROR_SOCKET_RECV ||
		    rc == LIBSSH2_ERROR_SOCKET_DISCONNECT)
			goto lost;
		if (libssh2_agent_get_identity(t->agent, &t->agent_id,
					       t->agent_id))
			t->agent_id = NULL;
	}
	if (!t->tried[0])
		tried_add(t, "nothing: no identity file and no ssh-agent");
	link_fail(l, "auth failed", "%s: auth failed for user %s; tried %s",
		  t->where, user, t->tried);
	return -1;
lost:
	link_fail(l, "connection lost", "%s: connection lost during auth: %s",
		  t->where, last_error(t));
	return -1;
}

/* Read a local file whole (the agent and engine binaries, a few MiB). */
static int slurp(const char *path, unsigned char **out, size_t *len,
		 char **why)
{
	struct d0_err err;
	char *buf;
	if (file_read_all(path, (size_t)1 << 30, &buf, len, &err)) {
		*why = strdup(err.msg);
		return -1;
	}
	*out = (unsigned char *)buf;
	return 0;
}

static int deploy_prepare(struct link *l, struct ssh *t)
{
	static unsigned seq;
	static const char *const names[2] = {"day0-agent", "day0-engine"};
	char path[2][4200], *slash, *why = NULL;
	struct d0_err err;
	/* The engine is the day0-engine sitting next to the agent. */
	snprintf(path[0], sizeof path[0], "%s", l->cfg.agent_path);
	snprintf(path[1], sizeof path[1], "%s", l->cfg.agent_path);
	slash = strrchr(path[1], '/');
	snprintf(slash ? slash + 1 : path[1],
		 sizeof path[1] - (size_t)(slash ? slash + 1 - path[1] : 0),
		 "%s", names[1]);
	seq++;
	for (int i = 0; i < 2; i++) {
		if (slurp(path[i], &t->blob[i], &t->blob_len[i], &why) ||
		    sha256_file(path[i], t->sha[i], NULL, &err)) {
			link_fail(l, "deploy failed", "%s: cannot deploy: %s",
				  t->where, why ? why : err.msg);
			free(why);
			return -1;
		}
		/* pid and a counter: links of this console deploying to the
		 * same home (one machine, several addresses) do not collide. */
		snprintf(t->tmp[i], sizeof t->tmp[i], "%s/%s.tmp-%d-%u",
			 REMOTE_DIR, names[i], (int)getpid(), seq);
	}
	return 0;
}

/* 1 done (start the agent), 0 waiting, -1 failed. */
static int deploy_step(struct link *l, struct ssh *t)
{
	const char *ver = local_version(l->cfg.agent_path);
	char cmd[2048];
	int rc;
	for (;;) {
		if (t->dstep == D_DONE)
			return 1;
		rc = job_step(t, &t->job);
		if (rc == 0)
			return 0;
		if (rc < 0) {
			link_fail(l, "connection lost",
				  "%s: connection lost during deployment: %s",
				  t->where, last_error(t));
			return -1;
		}
		switch (t->dstep) {
		case D_CHECK:
			if (!*ver) {
				link_fail(l, "deploy failed",
					  "%s: %s --version does not run "
					  "here: nothing to deploy",
					  t->where, l->cfg.agent_path);
				return -1;
			}
			if (deploy_prepare(l, t))
				return -1;
			t->dstep = D_MKDIR;
			/* and sweep temporaries an interrupted deployment
			 * left more than a day ago */
			job_start_exec(&t->job,
				       "mkdir -p \"$HOME\"/" REMOTE_DIR " && "
				       "find \"$HOME\"/" REMOTE_DIR
				       " -name '*.tmp-*' -mmin +1440 -delete");
			continue;
		case D_MKDIR:
			if (t->job.rc) {
				link_fail(l, "deploy failed",
					  "%s: mkdir ~/%s: %s", t->where,
					  REMOTE_DIR, t->job.out);
				return -1;
			}
			t->dstep = D_SEND;
			t->file = 0;
			job_start_scp(&t->job, t->tmp[0], t->blob[0],
				      t->blob_len[0]);
			continue;
		case D_SEND:
			if (t->job.rc) {
				link_fail(l, "deploy failed",
					  "%s: scp to ~/%s: %s", t->where,
					  t->tmp[t->file], t->job.out);
				return -1;
			}
			if (t->file == 0) {
				t->file = 1;
				job_start_scp(&t->job, t->tmp[1], t->blob[1],
					      t->blob_len[1]);
				continue;
			}
			/* Checked on the node, then renamed into place. */
			snprintf(cmd, sizeof cmd,
				 "cd && printf '%%s  %%s\\n' %s %s %s %s | "
				 "sha256sum -c --quiet && chmod 755 %s %s && "
				 "mv -f %s " REMOTE_DIR "/day0-agent && "
				 "mv -f %s " REMOTE_DIR "/day0-engine || "
				 "{ rm -f %s %s; exit 1; }",
				 t->sha[0], t->tmp[0], t->sha[1], t->tmp[1],
				 t->tmp[0], t->tmp[1], t->tmp[0], t->tmp[1],
				 t->tmp[0], t->tmp[1]);
			t->dstep = D_INSTALL;
			job_start_exec(&t->job, cmd);
			continue;
		case D_INSTALL:
			if (t->job.rc) {
				link_fail(l, "deploy failed",
					  "%s: checksum or install failed in "
					  "~/%s: %s",
					  t->where, REMOTE_DIR, t->job.out);
				return -1;
			}
			for (int i = 0; i < 2; i++) {
				free(t->blob[i]);
				t->blob[i] = NULL;
			}
			t->dstep = D_DONE;
			continue;
		case D_DONE:
			return 1;
		}
	}
}

/* Build the agent's command line. */
static int start_cmd(struct link *l, struct ssh *t)
{
	size_t max = 65536;
	char *c = calloc(1, max);
	if (!c)
		return -1;
	if (l->cfg.remote_agent) {
		shell_quote(c, max, l->cfg.remote_agent);
	} else {
		/* Start only copies that are our bytes (agent and engine
		 * hashed together: a different build of the same version
		 * is redeployed too); else say so (DEPLOY_MARK) and exit. */
		const char *stamp = local_stamp(l->cfg.agent_path);
		if (!*stamp) {
			free(c);
			link_fail(l, "deploy failed",
				  "%s: cannot read %s and the day0-engine "
				  "beside it",
				  t->where, l->cfg.agent_path);
			return -1;
		}
		/* Hashing the copies costs the node ~30 ms of CPU and four
		 * processes per start: once they hash right, the hash is
		 * noted in REMOTE_DIR.stamp (beside the directory, so
		 * writing it does not touch the directory), and later starts
		 * trust it with shell builtins only while neither copy nor
		 * the directory (a rename into it) is newer than the note. */
		snprintf(c, max,
			 "d=\"$HOME\"/" REMOTE_DIR "; s=; "
			 "[ -f \"$d.stamp\" ] && read -r s <\"$d.stamp\"; "
			 "if [ \"$s\" != %s ] || [ ! -x \"$d/day0-engine\" ] || "
			 "[ \"$d\" -nt \"$d.stamp\" ] || "
			 "[ \"$d/day0-agent\" -nt \"$d.stamp\" ] || "
			 "[ \"$d/day0-engine\" -nt \"$d.stamp\" ]; then "
			 "if [ ! -x \"$d/day0-engine\" ] "
			 "|| [ \"$(cat \"$d/day0-agent\" \"$d/day0-engine\" "
			 "2>/dev/null | sha256sum | cut -c1-64)\" != %s ]; "
			 "then echo '" DEPLOY_MARK "' >&2; exit 97; fi; "
			 "echo %s >\"$d.stamp.$$\" && mv -f \"$d.stamp.$$\" "
			 "\"$d.stamp\" 2>/dev/null; fi; "
			 "exec \"$d/day0-agent\"",
			 stamp, stamp, stamp);
	}
	for (char **a = l->agent_args; *a; a++)
		if (shell_quote(c, max, *a)) {
			free(c);
			link_fail(l, "agent failed",
				  "%s: agent arguments too long", t->where);
			return -1;
		}
	t->start_cmd = c;
	return 0;
}

/* Move bytes between the agent channel and link.c. */
static void pump(struct link *l, struct ssh *t)
{
	char buf[65536];
	ssize_t r;
	size_t q;
	const char *p;
	while ((p = link_out_peek(l, &q)) && q) {
		r = libssh2_channel_write(t->ch, p, q);
		if (r == LIBSSH2_ERROR_EAGAIN)
			break;
		if (r < 0)
			goto lost;
		link_out_consume(l, (size_t)r);
	}
	if (t->closing && !t->eof_sent && !link_pending(l)) {
		r = libssh2_channel_send_eof(t->ch);
		if (r == 0)
			t->eof_sent = 1;
		else if (r != LIBSSH2_ERROR_EAGAIN)
			goto lost;
	}
	/*
	 * Read until libssh2 says EAGAIN on both streams.  A read may return
	 * 0 without EOF when it only processed other packets (a window
	 * adjust, the other stream's data); stopping there could leave data
	 * in libssh2's buffer that no poll() would announce.
	 */
	for (int spins = 0; spins < 1000; spins++) {
		ssize_t ro, re;
		while ((re = libssh2_channel_read_stderr(t->ch, buf,
							 sizeof buf)) > 0)
			link_got_stderr(l, buf, (size_t)re);
		if (re < 0 && re != LIBSSH2_ERROR_EAGAIN)
			goto lost;
		while ((ro = libssh2_channel_read(t->ch, buf, sizeof buf)) >
		       0) {
			link_got_stdout(l, buf, (size_t)ro);
			if (l->phase == LINK_FAILED)
				return;
		}
		if (ro < 0 && ro != LIBSSH2_ERROR_EAGAIN)
			goto lost;
		if ((ro == LIBSSH2_ERROR_EAGAIN &&
		     re == LIBSSH2_ERROR_EAGAIN) ||
		    libssh2_channel_eof(t->ch))
			break;
		if (spins == 999)
			l->again = 1; /* not drained: come back */
	}
	/* stderr may have arrived with the last stdout read. */
	while ((r = libssh2_channel_read_stderr(t->ch, buf, sizeof buf)) > 0)
		link_got_stderr(l, buf, (size_t)r);
	if (libssh2_channel_eof(t->ch))
		link_got_stdout_eof(l);
	return;
lost:
	link_fail(l, "connection lost", "%s: connection lost: %s", t->where,
		  last_error(t));
}

/*
 * The start channel runs the version check and the agent in one command
 * (one session set-up on the node instead of two: the remote shell's
 * start-up is most of the cost).  The agent writes its hello before
 * reading anything, so its first stdout byte means UP; a channel that ends
 * with DEPLOY_MARK on stderr and no stdout wants the agent deployed.
 * 1 progressed, 0 waiting.
 */
static int started(struct link *l, struct ssh *t)
{
	char buf[16384];
	ssize_t r;
	while ((r = libssh2_channel_read_stderr(t->ch, buf, sizeof buf)) > 0)
		link_got_stderr(l, buf, (size_t)r);
	if (r < 0 && r != LIBSSH2_ERROR_EAGAIN)
		goto lost;
	r = libssh2_channel_read(t->ch, buf, sizeof buf);
	if (r > 0) {
		l->phase = LINK_UP;
		t->deadline = 0;
		link_got_stdout(l, buf, (size_t)r);
		return 1; /* pump reads the rest */
	}
	if (r < 0 && r != LIBSSH2_ERROR_EAGAIN)
		goto lost;
	if (!libssh2_channel_eof(t->ch))
		return r == 0; /* 0: other packets processed, try again */
	if (!strstr(l->err_tail, DEPLOY_MARK) || l->cfg.remote_agent) {
		/* The agent (or the shell) ended without a word: LINK_EOF,
		 * its stderr says why. */
		link_got_stdout_eof(l);
		return 0;
	}
	if (t->deployed) {
		link_fail(l, "deploy failed",
			  "%s: the agent deployed to ~/%s does not report "
			  "'%s'",
			  t->where, REMOTE_DIR,
			  local_version(l->cfg.agent_path));
		return 0;
	}
	/* Close that channel (a job), then deploy. */
	l->err_len = 0;
	l->err_tail[0] = 0;
	memset(&t->job, 0, sizeof t->job);
	t->job.ch = t->ch;
	t->job.st = 4;
	t->ch = NULL;
	t->ch_st = 0;
	t->dstep = D_CHECK;
	l->phase = LINK_DEPLOY;
	return 1;
lost:
	link_fail(l, "connection lost", "%s: connection lost: %s", t->where,
		  last_error(t));
	return 0;
}

/* One step of the state machine: 1 progressed, 0 waiting. */
static int step(struct link *l, struct ssh *t)
{
	int rc;
	switch (l->phase) {
	case LINK_CONNECTING:
		return session_start(l, t) > 0;
	case LINK_HANDSHAKE:
		rc = libssh2_session_handshake(t->s, t->fd);
		if (rc == LIBSSH2_ERROR_EAGAIN)
			return 0;
		if (rc) {
			link_fail(l, "handshake failed",
				  "%s: SSH handshake failed: %s", t->where,
				  last_error(t));
			return 0;
		}
		if (hostkey_check(l, t))
			return 0;
		auth_setup(l, t);
		l->phase = LINK_AUTH;
		return 1;
	case LINK_AUTH:
		rc = auth_step(l, t);
		if (rc <= 0)
			return 0;
		libssh2_keepalive_config(t->s, 1,
					 (unsigned)(l->cfg.keepalive_s > 0
							? l->cfg.keepalive_s
							: 15));
		t->keepalive_on = 1;
		set_deadline(t, DEPLOY_TIMEOUT_MS);
		if (start_cmd(l, t))
			return 0;
		l->phase = LINK_STARTING;
		return 1;
	case LINK_DEPLOY:
		rc = deploy_step(l, t);
		if (rc <= 0)
			return 0;
		t->deployed = 1;
		t->ch_st = 0;
		l->phase = LINK_STARTING;
		return 1;
	case LINK_STARTING:
		if (t->ch_st == 0) {
			t->ch = libssh2_channel_open_session(t->s);
			if (!t->ch) {
				if (libssh2_session_last_errno(t->s) ==
				    LIBSSH2_ERROR_EAGAIN)
					return 0;
				link_fail(l, "agent failed",
					  "%s: cannot open a channel: %s",
					  t->where, last_error(t));
				return 0;
			}
			t->ch_st = 1;
		}
		if (t->ch_st == 1) {
			rc = libssh2_channel_exec(t->ch, t->start_cmd);
			if (rc == LIBSSH2_ERROR_EAGAIN)
				return 0;
			if (rc) {
				link_fail(l, "agent failed",
					  "%s: cannot start the agent: %s",
					  t->where, last_error(t));
				return 0;
			}
			t->ch_st = 2;
		}
		return started(l, t);
	case LINK_UP:
		pump(l, t);
		return 0;
	default:
		return 0;
	}
}

/* ----------------------------------------------------------------- ops */

static int ssh_pollfds(struct link *l, struct pollfd *pfd, int max)
{
	struct ssh *t = l->t;
	short ev = POLLIN;
	if (t->fd < 0 || max < 1 || l->phase == LINK_EOF)
		return 0;
	if (l->phase == LINK_CONNECTING)
		ev = POLLOUT;
	else if (t->s) {
		int dir = libssh2_session_block_directions(t->s);
		if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND)
			ev |= POLLOUT;
		if (l->phase == LINK_UP && link_pending(l))
			ev |= POLLOUT;
	}
	pfd[0] = (struct pollfd){t->fd, ev, 0};
	return 1;
}

static int ssh_timeout_ms(struct link *l)
{
	struct ssh *t = l->t;
	double now = now_s(), next = -1;
	if (l->phase == LINK_EOF)
		return -1;
	if (t->deadline > 0)
		next = t->deadline;
	if (t->keepalive_on && t->next_keepalive > 0 &&
	    (next < 0 || t->next_keepalive < next))
		next = t->next_keepalive;
	if (next < 0)
		return -1;
	return next <= now ? 0 : (int)((next - now) * 1000) + 1;
}

static void ssh_service(struct link *l, struct pollfd *pfd, int n)
{
	struct ssh *t = l->t;
	int guard = 0, one = 1;
	(void)pfd;
	(void)n;
	/* sshd leaves Nagle on for exec channels (no pty), so its second
	 * small packet waits for our ACK of the first, which the kernel
	 * delays up to 200 ms when we have nothing to send back: every
	 * request/answer turn would cost that.  Quick ACKs avoid it; the
	 * kernel drops the mode by itself, hence on every pass. */
	if (t->fd >= 0)
		setsockopt(t->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
	while (l->phase != LINK_FAILED && l->phase != LINK_EOF &&
	       step(l, t) && ++guard < 64)
		;
	if (guard >= 64)
		l->again = 1; /* more steps may be ready: come back */
	if (l->phase == LINK_FAILED || l->phase == LINK_EOF)
		return;
	if (t->keepalive_on) {
		int next = 0;
		int rc = libssh2_keepalive_send(t->s, &next);
		if (rc && rc != LIBSSH2_ERROR_EAGAIN) {
			link_fail(l, "connection lost",
				  "%s: connection lost: %s", t->where,
				  last_error(t));
			return;
		}
		t->next_keepalive = now_s() + (next > 0 ? next : 1);
	}
	if (t->deadline > 0 && now_s() >= t->deadline)
		link_fail(l, "timeout", "%s: timeout while %s", t->where,
			  l->phase == LINK_CONNECTING ? "connecting"
			  : l->phase == LINK_HANDSHAKE
			      ? "in the SSH handshake"
			  : l->phase == LINK_AUTH ? "authenticating"
			  : l->phase == LINK_DEPLOY ? "deploying the agent"
						    : "starting the agent");
}

static void ssh_close_input(struct link *l)
{
	struct ssh *t = l->t;
	t->closing = 1;
	if (l->phase == LINK_UP)
		pump(l, t);
}

static void ssh_destroy(struct link *l)
{
	struct ssh *t = l->t;
	if (!t)
		return;
	job_free(&t->job);
	if (t->s) {
		/* Best effort, never waiting: a polite close and disconnect
		 * when the socket takes them, then shutdown() so that
		 * whatever libssh2 still tries to send fails at once. */
		if (t->ch)
			libssh2_channel_close(t->ch);
		libssh2_session_disconnect(t->s, "day0: done");
		if (t->fd >= 0)
			shutdown(t->fd, SHUT_RDWR);
		if (t->ch)
			libssh2_channel_free(t->ch);
		if (t->agent) {
			libssh2_agent_disconnect(t->agent);
			libssh2_agent_free(t->agent);
		}
		for (int i = 0;
		     i < 100 && libssh2_session_free(t->s) ==
				    LIBSSH2_ERROR_EAGAIN;
		     i++)
			;
	}
	if (t->fd >= 0)
		close(t->fd);
	for (int i = 0; i < 2; i++)
		free(t->blob[i]);
	free(t->start_cmd);
	free(t);
	l->t = NULL;
}

static const struct link_ops ssh_ops = {
    ssh_pollfds, ssh_timeout_ms, ssh_service, ssh_close_input, ssh_destroy,
};

int link_ssh_open(struct link *l, struct d0_err *err)
{
	const struct inv_node *nd = l->cfg.node;
	struct ssh *t;
	if (!nd->host[0]) {
		d0_errf(err, "%s: no host", nd->name);
		return -1;
	}
	ssh_init_once();
	t = calloc(1, sizeof *t);
	if (!t) {
		d0_errf(err, "out of memory");
		return -1;
	}
	t->fd = -1;
	snprintf(t->where, sizeof t->where, "%s (%s:%d)", nd->name, nd->host,
		 nd->port ? nd->port : 22);
	l->t = t;
	l->ops = &ssh_ops;
	l->phase = LINK_CONNECTING;
	set_deadline(t, l->cfg.connect_timeout_ms > 0
			    ? l->cfg.connect_timeout_ms
			    : 10000);
	if (!l->cfg.remote_agent)
		local_version(l->cfg.agent_path); /* once, before the loop */
	tcp_connect(l, t);
	return 0;
}
