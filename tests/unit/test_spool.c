/*
 * test_spool.c - the agent's spool sends whole lines.  A short write into
 * a full pipe can stop inside a line; the rest of it is held and written
 * first, whatever moves the cursor meanwhile:
 *   - a rewind (the console's reconnect hello; seen under the sanitizer
 *     build: one event per node lost after a disk-full stall);
 *   - the hello's ack of everything, which jumps the cursor past the half
 *     sent line, and the hello event appended after it (seen at 128 nodes
 *     in bench/fleet.sh's mass reconnect: the head of seq 212 glued to
 *     the hello, seq 294, and the hello lost);
 *   - the same with a compaction, which drops the half-sent line from the
 *     file.
 * Otherwise the console sees the head of one event glued to the next and
 * refuses both as one malformed line.
 */
#include "agent.h"
#include "unit.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EVENTS 400

static char *drain(int fd, char *acc, size_t *len, size_t *cap)
{
	char buf[65536];
	ssize_t r;
	while ((r = read(fd, buf, sizeof buf)) > 0) {
		if (*len + (size_t)r + 1 > *cap) {
			*cap = (*len + (size_t)r + 1) * 2;
			acc = realloc(acc, *cap);
			if (!acc)
				abort();
		}
		memcpy(acc + *len, buf, (size_t)r);
		*len += (size_t)r;
		acc[*len] = 0;
	}
	return acc;
}

static int64_t parse_seq(const char *s)
{
	return strtoll(s + 13, NULL, 10);
}

/* mode 0: rewind after every short write; 1: ack all + rewind + a new
 * event while a line is half sent; 2: the same with a compaction. */
static void scenario(int mode)
{
	char dir[] = "/tmp/day0-spool.XXXXXX", line[512];
	struct spool sp;
	struct d0_err err;
	int p[2], rewinds = 0, mid = 0, bad = 0, lines = 0, hello = 0;
	int64_t hello_seq = 0;
	char *acc = NULL;
	size_t len = 0, cap = 0;
	const char *name[] = {"rewinds", "ack-all + hello", "ack-all + compaction + hello"};

	CHECK(mkdtemp(dir) != NULL);
	memset(&sp, 0, sizeof sp);
	CHECK(spool_open(&sp, dir, "n", 0, 0, &err) == 0);
	for (int i = 0; i < EVENTS; i++) {
		int64_t seq = spool_next_seq(&sp);
		int k = snprintf(line, sizeof line,
				 "{\"v\":1,\"seq\":%lld,\"node\":\"n\",\"msg\":\"%0300d\"}\n",
				 (long long)seq, i);
		spool_append(&sp, line, (size_t)k);
	}
	CHECK(spool_commit(&sp, &err) == 0);
	CHECK(pipe2(p, O_NONBLOCK) == 0);
	fcntl(p[1], F_SETPIPE_SZ, 4096);
	/* Send into a small pipe and drain between. */
	for (int round = 0; round < 400 && spool_unsent(&sp); round++) {
		spool_send(&sp, p[1]);
		int half = sp.tail_len > sp.tail_off;
		mid += half;
		if (mode == 0 && round < 20) {
			spool_rewind(&sp);
			rewinds++;
		} else if (mode > 0 && half && !hello_seq && round > 3) {
			/* the console's hello: acked = the last seq it has */
			CHECK(spool_ack(&sp, sp.last_seq, &err) == 0);
			if (mode == 2)
				CHECK(spool_compact(&sp, &err) == 0);
			spool_rewind(&sp);
			hello_seq = spool_next_seq(&sp);
			int k = snprintf(line, sizeof line,
					 "{\"v\":1,\"seq\":%lld,\"node\":\"n\",\"type\":\"hello\"}\n",
					 (long long)hello_seq);
			spool_append(&sp, line, (size_t)k);
			CHECK(spool_commit(&sp, &err) == 0);
		}
		acc = drain(p[0], acc, &len, &cap);
	}
	spool_send(&sp, p[1]);
	acc = drain(p[0], acc, &len, &cap);
	printf("# %s: %d sends stopped inside a line\n", name[mode], mid);
	CHECKN("a short write stopped inside a line", mid > 0);
	CHECKN("everything was sent in the end", spool_unsent(&sp) == 0);
	/* Every line received is one whole event. */
	for (char *s = acc, *e; s && *s; s = e + 1) {
		e = strchr(s, '\n');
		if (!e)
			break;
		lines++;
		if (strncmp(s, "{\"v\":1,\"seq\":", 13) ||
		    memmem(s + 1, (size_t)(e - s - 1), "{\"v\"", 4) ||
		    e[-1] != '}')
			bad++;
		else if (hello_seq && parse_seq(s) == hello_seq)
			hello++;
	}
	CHECKN("every line the pipe carried is one whole event", bad == 0 && lines > 0);
	if (mode == 0) {
		CHECKN("the rewinds resent lines", lines > EVENTS && rewinds > 0);
		snprintf(line, sizeof line, "\"seq\":%d,", EVENTS);
		CHECKN("the last event arrived", acc && strstr(acc, line));
	} else {
		CHECKN("the hello appended while a line was half sent arrived whole, once",
		       hello_seq > 0 && hello == 1);
	}
	spool_close(&sp);
	free(acc);
	close(p[0]);
	close(p[1]);
	{
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd) != 0)
			printf("FAIL - rm %s\n", dir);
	}
}

int main(void)
{
	for (int mode = 0; mode < 3; mode++)
		scenario(mode);
	return unit_done();
}
