/*
 * cluster.c - a cluster stage's ssh config and rank map (cluster.h).
 */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing string (open_memstream keeps it simple). */
struct text {
	char *s;
	size_t n;
	FILE *f;
};

static void text_open(struct text *t)
{
	t->s = NULL;
	t->n = 0;
	t->f = open_memstream(&t->s, &t->n);
	if (!t->f)
		abort();
}

static char *text_close(struct text *t)
{
	fclose(t->f);
	return t->s;
}

static int is_local(const struct inv_node *nd)
{
	return !strcmp(nd->transport, "local");
}

char *cluster_rank_map(const struct inv_node *const *nodes, size_t n)
{
	struct text t;
	text_open(&t);
	for (size_t i = 0; i < n; i++)
		fprintf(t.f, "%s%s:%d", i ? "," : "", nodes[i]->name,
			nodes[i]->cards);
	return text_close(&t);
}

char *cluster_ssh_config(const struct inv_node *const *nodes, size_t n)
{
	struct text t;
	text_open(&t);
	fprintf(t.f, "# day0: made from the inventory for one cluster stage\n");
	for (size_t i = 0; i < n; i++) {
		const struct inv_node *nd = nodes[i];
		if (is_local(nd))
			continue;
		fprintf(t.f, "Host %s\n  HostName %s\n  Port %d\n", nd->host,
			nd->host, nd->port ? nd->port : 22);
		if (nd->user[0])
			fprintf(t.f, "  User %s\n", nd->user);
		if (nd->identity[0])
			fprintf(t.f, "  IdentityFile %s\n  IdentitiesOnly yes\n",
				nd->identity);
	}
	fprintf(t.f, "Host *\n  UserKnownHostsFile %%KNOWN_HOSTS%%\n"
		     "  GlobalKnownHostsFile /dev/null\n"
		     "  StrictHostKeyChecking yes\n  BatchMode yes\n"
		     "  LogLevel ERROR\n  ConnectTimeout 10\n");
	return text_close(&t);
}

/* Does the first field of a known_hosts line (comma-separated names)
 * name this node? */
static int line_names(const char *names, size_t len,
		      const struct inv_node *nd)
{
	char want[300];
	size_t wl;
	int port = nd->port ? nd->port : 22;
	if (port == 22)
		snprintf(want, sizeof want, "%s", nd->host);
	else
		snprintf(want, sizeof want, "[%s]:%d", nd->host, port);
	wl = strlen(want);
	for (const char *p = names; p < names + len;) {
		const char *c = memchr(p, ',', (size_t)(names + len - p));
		size_t l = c ? (size_t)(c - p) : (size_t)(names + len - p);
		if (l == wl && !memcmp(p, want, wl))
			return 1;
		p += l + 1;
	}
	return 0;
}

char *cluster_known_hosts(const struct inv_node *const *nodes, size_t n,
			  const char *path)
{
	char full[4096], *line = NULL;
	size_t cap = 0;
	ssize_t len;
	struct text t;
	FILE *f;
	const char *home = getenv("HOME");
	if (!path)
		path = "~/.ssh/known_hosts";
	if (!strncmp(path, "~/", 2) && home)
		snprintf(full, sizeof full, "%s/%s", home, path + 2);
	else
		snprintf(full, sizeof full, "%s", path);
	text_open(&t);
	if (!(f = fopen(full, "r")))
		return text_close(&t);
	while ((len = getline(&line, &cap, f)) > 0) {
		const char *p = line;
		size_t nl;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '#' || *p == '\n' || !*p)
			continue;
		if (*p == '@') /* @cert-authority / @revoked: keep */
			goto keep;
		nl = strcspn(p, " \t");
		if (!strncmp(p, "|1|", 3))
			goto keep;
		for (size_t i = 0; i < n; i++)
			if (!is_local(nodes[i]) && line_names(p, nl, nodes[i]))
				goto keep;
		continue;
	keep:
		fputs(line, t.f);
		if (line[len - 1] != '\n')
			fputc('\n', t.f);
	}
	free(line);
	fclose(f);
	return text_close(&t);
}
