/*
 * spool.c - events kept on disk until the console acks them.
 *
 * DIR/spool.jsonl:
 *   {"day0_spool":1,"node":"n01","acked":17                  }\n
 *   {"v":1,"seq":18,...}\n
 *   {"v":1,"seq":19,...}\n
 * The header's acked field is padded to a fixed width so that an ack
 * rewrites it in place (one small pwrite, no sync: losing it only means
 * resending events the store will drop as duplicates).  Event lines are
 * exactly what is sent on stdout.  A batch is appended with one write and
 * made durable with one fdatasync before any of it is sent: the console
 * never holds an event the spool could lose, so a restarted agent never
 * reuses a seq for a different event.
 *
 * Loading checks that seqs run on from acked + 1 without gaps; a torn last
 * line (a crash inside write) is cut off, since nothing of it was sent.
 * Compaction copies the unacked tail into a new file and renames it over
 * the old one when the acked prefix is large, and at a clean exit.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ACKED_WIDTH 20
#define COMPACT_MIN (1u << 20) /* acked bytes before compaction pays */

static int sys_err(struct d0_err *err, const char *path, const char *what)
{
	return d0_errf(err, "%s: %s: %s", path, what, strerror(errno));
}

static int mkdir_p(const char *dir, struct d0_err *err)
{
	char *p = strdup(dir), *s;
	if (!p)
		abort();
	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST) {
			sys_err(err, p, "cannot create");
			free(p);
			return -1;
		}
		*s = '/';
	}
	if (mkdir(p, 0700) < 0 && errno != EEXIST) {
		sys_err(err, p, "cannot create");
		free(p);
		return -1;
	}
	free(p);
	return 0;
}

/* The header line for acked, fixed width. */
static size_t header_format(const struct spool *sp, int64_t acked, char *buf,
			    size_t cap)
{
	json_t *n = json_string(sp->node);
	char *node = json_dumps(n, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
	int len;
	json_decref(n);
	len = snprintf(buf, cap,
		       "{\"day0_spool\":1,\"node\":%s,\"acked\":%-*lld}\n",
		       node ? node : "\"?\"", ACKED_WIDTH, (long long)acked);
	free(node);
	return (size_t)len;
}

static int sync_dir(struct spool *sp)
{
	return sp->fsync ? fsync(sp->dirfd) : 0;
}

static int write_header(struct spool *sp, struct d0_err *err)
{
	char buf[512];
	size_t n = header_format(sp, sp->acked, buf, sizeof buf);
	if (n != sp->header_len)
		return d0_errf(err, "%s: header length changed", sp->path);
	if (pwrite_full(sp->fd, buf, n, 0) < 0)
		return sys_err(err, sp->path, "cannot write");
	return 0;
}

static void off_push(struct spool *sp, uint64_t off)
{
	if (sp->head + sp->noff == sp->cap) {
		if (sp->head > sp->cap / 2) {
			memmove(sp->off, sp->off + sp->head,
				sp->noff * sizeof *sp->off);
			sp->head = 0;
		} else {
			sp->cap = sp->cap ? sp->cap * 2 : 1024;
			sp->off = realloc(sp->off, sp->cap * sizeof *sp->off);
			if (!sp->off)
				abort();
		}
	}
	sp->off[sp->head + sp->noff++] = off;
}

/* Read the existing file: header, then events acked+1, acked+2, ... */
static int spool_load(struct spool *sp, struct d0_err *err)
{
	struct stat stt;
	char *buf, *p, *end, *nl;
	json_t *h;
	json_error_t je;
	uint64_t lineno = 1;
	if (fstat(sp->fd, &stt) < 0)
		return sys_err(err, sp->path, "cannot stat");
	buf = malloc((size_t)stt.st_size + 1);
	if (!buf)
		return d0_errf(err, "%s: out of memory", sp->path);
	if (pread_full(sp->fd, buf, (size_t)stt.st_size, 0) < 0) {
		free(buf);
		return sys_err(err, sp->path, "cannot read");
	}
	buf[stt.st_size] = 0;
	end = buf + stt.st_size;
	nl = memchr(buf, '\n', (size_t)stt.st_size);
	if (!nl) {
		free(buf);
		return d0_errf(err,
			       "%s: no header line: not a day0 spool "
			       "(move it away)",
			       sp->path);
	}
	h = json_loadb(buf, (size_t)(nl - buf), 0, &je);
	if (!json_is_object(h) ||
	    json_integer_value(json_object_get(h, "day0_spool")) != 1 ||
	    !json_is_string(json_object_get(h, "node")) ||
	    !json_is_integer(json_object_get(h, "acked"))) {
		json_decref(h);
		free(buf);
		return d0_errf(err,
			       "%s: line 1: not a day0 spool header "
			       "(move the file away)",
			       sp->path);
	}
	if (strcmp(json_string_value(json_object_get(h, "node")), sp->node)) {
		d0_errf(err,
			"%s: spool of node '%s', not '%s' (use --node %s "
			"or another --spool)",
			sp->path, json_string_value(json_object_get(h, "node")),
			sp->node,
			json_string_value(json_object_get(h, "node")));
		json_decref(h);
		free(buf);
		return -1;
	}
	sp->acked = json_integer_value(json_object_get(h, "acked"));
	json_decref(h);
	sp->header_len = (uint64_t)(nl + 1 - buf);
	{
		char tmp[512];
		if (header_format(sp, sp->acked, tmp, sizeof tmp) !=
		    sp->header_len) {
			free(buf);
			return d0_errf(err,
				       "%s: line 1: header is not in the "
				       "expected form",
				       sp->path);
		}
	}
	/* Events run on without gaps; those up to acked may still be there
	 * (acked in place, not compacted yet) and are skipped. */
	sp->last_seq = 0;
	for (p = nl + 1; p < end; p = nl + 1) {
		json_t *o, *seq;
		int64_t want;
		lineno++;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl) {
			/* Torn by a crash inside write(): never sent. */
			if (ftruncate(sp->fd, p - buf) < 0) {
				free(buf);
				return sys_err(err, sp->path,
					       "cannot truncate");
			}
			fprintf(stderr,
				"day0-agent: %s: dropped a torn last "
				"line (%zu bytes, never sent)\n",
				sp->path, (size_t)(end - p));
			end = p;
			break;
		}
		o = json_loadb(p, (size_t)(nl - p), 0, &je);
		seq = json_object_get(o, "seq");
		want = sp->last_seq + 1;
		if (json_is_integer(seq) && sp->last_seq == 0 &&
		    json_integer_value(seq) >= 1 &&
		    json_integer_value(seq) <= sp->acked + 1)
			want = json_integer_value(seq); /* the first line */
		if (!json_is_integer(seq) || json_integer_value(seq) != want) {
			d0_errf(err,
				"%s: line %llu: %s, expected seq %lld "
				"(move the file away)",
				sp->path, (unsigned long long)lineno,
				o ? "wrong seq" : je.text, (long long)want);
			json_decref(o);
			free(buf);
			return -1;
		}
		json_decref(o);
		sp->last_seq = want;
		if (want > sp->acked)
			off_push(sp, (uint64_t)(p - buf));
	}
	if (sp->last_seq < sp->acked)
		sp->last_seq = sp->acked; /* all acked and compacted away */
	sp->end = sp->committed = (uint64_t)(end - buf);
	free(buf);
	return 0;
}

/* Ask the day0-agent holding the lock to exit (it stops its stages). */
static void take_over(int lockfd)
{
	char pid[32] = "", comm[64] = "", path[64];
	ssize_t n = pread(lockfd, pid, sizeof pid - 1, 0);
	long p;
	FILE *f;
	if (n <= 0)
		return;
	pid[n] = 0;
	p = strtol(pid, NULL, 10);
	if (p <= 1 || p == (long)getpid())
		return;
	snprintf(path, sizeof path, "/proc/%ld/comm", p);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(comm, sizeof comm, f) && !strncmp(comm, "day0-agent", 10)) {
		fprintf(stderr,
			"day0-agent: taking over the spool from pid "
			"%ld\n",
			p);
		kill((pid_t)p, SIGTERM);
	}
	fclose(f);
}

int spool_open(struct spool *sp, const char *dir, const char *node, int fsync,
	       int takeover, struct d0_err *err)
{
	char *lock;
	struct stat stt;
	memset(sp, 0, sizeof *sp);
	sp->fd = sp->lockfd = sp->dirfd = -1;
	sp->fsync = fsync;
	snprintf(sp->node, sizeof sp->node, "%s", node);
	if (mkdir_p(dir, err) < 0)
		return -1;
	sp->dir = strdup(dir);
	sp->path = path_join(dir, "spool.jsonl");
	lock = path_join(dir, "lock");
	sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	sp->lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (sp->dirfd < 0 || sp->lockfd < 0) {
		sys_err(err, sp->dirfd < 0 ? dir : lock, "cannot open");
		free(lock);
		goto fail;
	}
	/* A reconnect may start us while the old agent is still exiting;
	 * --takeover asks it to stop its stages and go. */
	for (int tries = 0; flock(sp->lockfd, LOCK_EX | LOCK_NB) < 0; tries++) {
		char pid[32] = "?";
		ssize_t n;
		struct timespec ts = {0, 100000000};
		if (errno != EWOULDBLOCK || tries >= (takeover ? 150 : 20)) {
			n = pread(sp->lockfd, pid, sizeof pid - 1, 0);
			pid[n > 0 ? n : 0] = 0;
			pid[strcspn(pid, "\n")] = 0;
			d0_errf(err,
				"%s: in use by another day0-agent (pid %s)%s",
				dir, pid,
				takeover ? " that does not exit"
					 : "; --takeover stops it");
			free(lock);
			goto fail;
		}
		if (takeover && tries == 0)
			take_over(sp->lockfd);
		nanosleep(&ts, NULL);
	}
	free(lock);
	{
		char pid[32];
		int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
		if (ftruncate(sp->lockfd, 0) < 0 ||
		    pwrite_full(sp->lockfd, pid, (size_t)n, 0) < 0) {
			sys_err(err, dir, "cannot write the lock file");
			goto fail;
		}
	}
	sp->fd = open(sp->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (sp->fd < 0 || fstat(sp->fd, &stt) < 0) {
		sys_err(err, sp->path, "cannot open");
		goto fail;
	}
	if (stt.st_size == 0) {
		char buf[512];
		sp->header_len = header_format(sp, 0, buf, sizeof buf);
		if (pwrite_full(sp->fd, buf, sp->header_len, 0) < 0 ||
		    (fsync && fdatasync(sp->fd) < 0) || sync_dir(sp) < 0) {
			sys_err(err, sp->path, "cannot write");
			goto fail;
		}
		sp->end = sp->committed = sp->header_len;
	} else if (spool_load(sp, err) < 0) {
		goto fail;
	}
	sp->cursor = sp->noff ? sp->off[sp->head] : sp->committed;
	return 0;
fail:
	spool_close(sp);
	return -1;
}

void spool_close(struct spool *sp)
{
	if (sp->fd >= 0)
		close(sp->fd);
	free(sp->tail);
	sp->tail = NULL;
	sp->tail_len = sp->tail_off = sp->tail_cap = 0;
	if (sp->lockfd >= 0)
		close(sp->lockfd); /* releases the lock */
	if (sp->dirfd >= 0)
		close(sp->dirfd);
	free(sp->batch);
	free(sp->off);
	free(sp->dir);
	free(sp->path);
	memset(sp, 0, sizeof *sp);
	sp->fd = sp->lockfd = sp->dirfd = -1;
}

int64_t spool_next_seq(const struct spool *sp)
{
	return sp->last_seq + 1;
}

void spool_append(struct spool *sp, const char *line, size_t len)
{
	if (sp->blen + len > sp->bcap) {
		while (sp->blen + len > sp->bcap)
			sp->bcap = sp->bcap ? sp->bcap * 2 : 65536;
		sp->batch = realloc(sp->batch, sp->bcap);
		if (!sp->batch)
			abort();
	}
	off_push(sp, sp->end + sp->blen);
	memcpy(sp->batch + sp->blen, line, len);
	sp->blen += len;
	sp->last_seq++;
}

int spool_commit(struct spool *sp, struct d0_err *err)
{
	if (sp->blen == 0)
		return 0;
	if (pwrite_full(sp->fd, sp->batch, sp->blen, sp->end) < 0) {
		int e = errno;
		/* Keep the file as it was: a partial batch is not a batch. */
		if (ftruncate(sp->fd, (off_t)sp->end) < 0) {
			/* nothing better to do; the load drops a torn tail */
		}
		errno = e;
		return sys_err(err, sp->path, "cannot append");
	}
	if (sp->fsync && fdatasync(sp->fd) < 0) {
		int e = errno;
		if (ftruncate(sp->fd, (off_t)sp->end) < 0) {
			/* as above */
		}
		errno = e;
		return sys_err(err, sp->path, "cannot sync");
	}
	sp->end += sp->blen;
	sp->committed = sp->end;
	sp->blen = 0;
	return 0;
}

int spool_ack(struct spool *sp, int64_t seq, struct d0_err *err)
{
	uint64_t first;
	if (seq <= sp->acked)
		return 0; /* old news (e.g. after a resend) */
	if (seq > sp->last_seq)
		return d0_errf(err,
			       "ack %lld: beyond the last event (seq %lld)",
			       (long long)seq, (long long)sp->last_seq);
	sp->head += (size_t)(seq - sp->acked);
	sp->noff -= (size_t)(seq - sp->acked);
	sp->acked = seq;
	first = sp->noff ? sp->off[sp->head] : sp->end + sp->blen;
	if (sp->cursor < first)
		sp->cursor = first < sp->committed ? first : sp->committed;
	if (write_header(sp, err) < 0)
		return -1;
	/* Compact when the acked prefix is large and most of the file. */
	first = sp->noff ? sp->off[sp->head] : sp->end;
	if (first - sp->header_len >= COMPACT_MIN &&
	    first - sp->header_len >= sp->end - first)
		return spool_compact(sp, err);
	return 0;
}

/* The cursor sits on a line boundary whenever spool_send is not running
 * (see hold_rest), so a rewind can always move it at once. */
void spool_rewind(struct spool *sp)
{
	uint64_t first = sp->noff ? sp->off[sp->head] : sp->committed;
	sp->cursor = first < sp->committed ? first : sp->committed;
}

uint64_t spool_unsent(const struct spool *sp)
{
	return (sp->committed > sp->cursor ? sp->committed - sp->cursor : 0) +
	       (sp->tail_len - sp->tail_off);
}

/*
 * A short write (the pipe is full) can stop inside a line.  The rest of
 * that line is copied out of the file, to be written before anything else,
 * and the cursor moves past it: an ack, a rewind (the console's hello) or
 * a compaction may then move the cursor, or drop the line from the file,
 * without cutting the line on the wire.  (Cut there, its head would be
 * glued to the next line sent, and the console would refuse both as one
 * malformed line: the event after it lost until a later resend.)
 */
static int hold_rest(struct spool *sp)
{
	char c, buf[4096];
	uint64_t at = sp->cursor;
	if (at <= sp->header_len || at >= sp->committed)
		return 0;
	if (pread(sp->fd, &c, 1, (off_t)(at - 1)) != 1)
		return -1;
	if (c == '\n')
		return 0; /* on a boundary */
	for (;;) {
		size_t n = sp->committed - at < sizeof buf ? (size_t)(sp->committed - at)
							   : sizeof buf;
		ssize_t r = pread(sp->fd, buf, n, (off_t)at);
		char *nl;
		if (r <= 0)
			return -1;
		nl = memchr(buf, '\n', (size_t)r);
		size_t take = nl ? (size_t)(nl - buf) + 1 : (size_t)r;
		if (sp->tail_len + take > sp->tail_cap) {
			while (sp->tail_len + take > sp->tail_cap)
				sp->tail_cap = sp->tail_cap ? 2 * sp->tail_cap : 4096;
			sp->tail = realloc(sp->tail, sp->tail_cap);
			if (!sp->tail)
				abort();
		}
		memcpy(sp->tail + sp->tail_len, buf, take);
		sp->tail_len += take;
		at += take;
		if (nl)
			break;
	}
	sp->cursor = at;
	return 0;
}

/* Write the held rest of a line; 1 when it is all out. */
static int send_tail(struct spool *sp, int fd, ssize_t *total)
{
	while (sp->tail_off < sp->tail_len) {
		ssize_t w = write(fd, sp->tail + sp->tail_off,
				  sp->tail_len - sp->tail_off);
		if (w <= 0)
			return 0;
		sp->tail_off += (size_t)w;
		*total += w;
	}
	sp->tail_off = sp->tail_len = 0;
	return 1;
}

ssize_t spool_send(struct spool *sp, int fd)
{
	char buf[65536];
	ssize_t total = 0;
	if (!send_tail(sp, fd, &total))
		return total ? total : -1;
	while (sp->cursor < sp->committed) {
		size_t n = (size_t)(sp->committed - sp->cursor);
		ssize_t r, w;
		if (n > sizeof buf)
			n = sizeof buf;
		r = pread(sp->fd, buf, n, (off_t)sp->cursor);
		if (r <= 0) {
			if (hold_rest(sp) < 0 || r < 0)
				return total ? total : -1;
			return total;
		}
		w = write(fd, buf, (size_t)r);
		if (w > 0) {
			sp->cursor += (uint64_t)w;
			total += w;
		}
		if (w < r) { /* pipe full, or an error */
			if (hold_rest(sp) < 0)
				return -1;
			if (w < 0)
				return total ? total : -1;
			break;
		}
	}
	return total;
}

int spool_compact(struct spool *sp, struct d0_err *err)
{
	uint64_t first, shift;
	char *tmp, hdr[512], buf[65536];
	size_t hlen;
	int fd;
	if (sp->blen && spool_commit(sp, err) < 0)
		return -1;
	first = sp->noff ? sp->off[sp->head] : sp->end;
	if (first == sp->header_len)
		return 0; /* nothing acked in the file */
	tmp = path_join(sp->dir, "spool.jsonl.tmp");
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		sys_err(err, tmp, "cannot create");
		free(tmp);
		return -1;
	}
	hlen = header_format(sp, sp->acked, hdr, sizeof hdr);
	if (write_full(fd, hdr, hlen) < 0)
		goto fail;
	for (uint64_t at = first; at < sp->end;) {
		size_t n = sp->end - at < sizeof buf ? (size_t)(sp->end - at)
						     : sizeof buf;
		if (pread_full(sp->fd, buf, n, at) < 0 ||
		    write_full(fd, buf, n) < 0)
			goto fail;
		at += n;
	}
	if ((sp->fsync && fdatasync(fd) < 0) || rename(tmp, sp->path) < 0)
		goto fail;
	sync_dir(sp);
	close(sp->fd);
	sp->fd = fd;
	shift = first - hlen;
	for (size_t i = 0; i < sp->noff; i++)
		sp->off[sp->head + i] -= shift;
	sp->end -= shift;
	sp->committed -= shift;
	sp->cursor = sp->cursor > first ? sp->cursor - shift : hlen;
	sp->header_len = hlen;
	sp->compactions++;
	free(tmp);
	return 0;
fail:
	sys_err(err, tmp, "cannot compact");
	close(fd);
	unlink(tmp);
	free(tmp);
	return -1;
}

char *spool_stage_path(const struct spool *sp, const char *stage_id)
{
	char name[STAGE_ID_MAX + 16];
	snprintf(name, sizeof name, "stage-%s.run", stage_id);
	return path_join(sp->dir, name);
}
