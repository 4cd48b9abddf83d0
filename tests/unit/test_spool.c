/*
 * test_spool.c - the agent's spool sends whole lines: a rewind (the
 * console's reconnect hello) that arrives while a line is half written
 * to a full pipe finishes that line first, so the console never sees the
 * head of one event glued to the first resent one (seen under the
 * sanitizer build: one event per node lost after a disk-full stall).
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

int main(void)
{
	char dir[] = "/tmp/day0-spool.XXXXXX", line[512];
	struct spool sp;
	struct d0_err err;
	int p[2], rewinds = 0, mid = 0, bad = 0, lines = 0;
	char *acc = NULL;
	size_t len = 0, cap = 0;

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
	/* Send into a small pipe, rewinding after every short write (the
	 * cursor then sits inside a line), and drain between. */
	for (int round = 0; round < 200 && spool_unsent(&sp); round++) {
		spool_send(&sp, p[1]);
		if (round < 20) {
			uint64_t c = sp.cursor;
			int start = c >= sp.committed;
			for (size_t i = sp.head; i < sp.head + sp.noff && !start; i++)
				start = sp.off[i] == c;
			mid += !start;
			spool_rewind(&sp);
			rewinds++;
		}
		acc = drain(p[0], acc, &len, &cap);
	}
	spool_send(&sp, p[1]);
	acc = drain(p[0], acc, &len, &cap);
	CHECKN("a rewind came while a line was half sent", mid > 0);
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
	}
	CHECKN("every line the pipe carried is one whole event", bad == 0 && lines >= EVENTS);
	CHECKN("the rewinds resent lines", lines > EVENTS && rewinds > 0);
	/* The last event arrived whole. */
	snprintf(line, sizeof line, "\"seq\":%d,", EVENTS);
	CHECKN("the last event arrived", acc && strstr(acc, line));
	spool_close(&sp);
	free(acc);
	{
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd) != 0)
			printf("FAIL - rm %s\n", dir);
	}
	return unit_done();
}
