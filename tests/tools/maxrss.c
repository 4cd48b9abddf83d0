/*
 * maxrss - run a command and print its peak resident set size:
 *   maxrss CMD ARGS...   ->  stderr line "maxrss_kib N", exit status of CMD
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	pid_t pid;
	int status;
	struct rusage ru;
	if (argc < 2) {
		fprintf(stderr, "usage: maxrss CMD [ARGS...]\n");
		return 2;
	}
	pid = fork();
	if (pid == 0) {
		execvp(argv[1], argv + 1);
		perror(argv[1]);
		_exit(127);
	}
	if (pid < 0 || wait4(pid, &status, 0, &ru) < 0) {
		perror("maxrss");
		return 2;
	}
	fprintf(stderr, "maxrss_kib %ld\n", ru.ru_maxrss);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
