/*
 * notify.c - `day0 run --notify CMD`: every alert (a node unreachable, a
 * stage failed, a check failed) runs CMD through /bin/sh with the alert
 * as one JSON object on stdin, so a pager or a webhook (curl -d @-) hears
 * about it while the run goes on.  The command is started detached (a
 * double fork: nothing to reap, the run never waits for it); a command
 * that fails is the operator's to see on its own stderr.
 */
#include "notify.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void notify_alert(const char *cmd, json_t *alert)
{
	char *text;
	int p[2];
	pid_t pid;
	if (!cmd || !*cmd || !(text = json_dumps(alert, JSON_COMPACT)))
		return;
	if (pipe(p) < 0) {
		free(text);
		return;
	}
	pid = fork();
	if (pid == 0) {
		if (fork() != 0)
			_exit(0); /* the grandchild is init's to reap */
		signal(SIGPIPE, SIG_DFL);
		dup2(p[0], 0);
		close(p[0]);
		close(p[1]);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	if (pid > 0) {
		size_t n = strlen(text), off = 0;
		void (*old)(int) = signal(SIGPIPE, SIG_IGN);
		while (off < n) {
			ssize_t w = write(p[1], text + off, n - off);
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		if (write(p[1], "\n", 1) < 0) {
			/* the command closed its stdin: its business */
		}
		signal(SIGPIPE, old);
		waitpid(pid, NULL, 0);
	}
	close(p[1]);
	free(text);
}
