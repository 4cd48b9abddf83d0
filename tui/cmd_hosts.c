/*
 * cmd_hosts.c - `day0 hosts`: reach every inventory node at once, start its
 * agent, ask for hello and facts, and print the answers folded into node
 * sets the way `clush -b` does; failures grouped by what went wrong.
 *
 * One poll loop drives every link (link.h); nothing waits on one node.
 * Per node: link UP -> send hello + facts; facts event -> send bye and
 * close stdin; the agent exits (EOF).  A node that is UP but has not
 * answered within --timeout seconds fails with "timeout".
 *
 * Spools: the agent here is a throwaway probe, so it gets its own spool
 * (never the one a playbook run's agent holds) and --no-fsync:
 *   ssh nodes    ~/.cache/day0/spool-hosts-NAME (the node's home)
 *   local nodes  $XDG_STATE_HOME/day0/spool-hosts/NAME, else
 *                ~/.local/state/day0/spool-hosts/NAME, else
 *                /tmp/day0-spool-hosts-UID/NAME
 */
#include "compat_matrix.h"
#include "console.h"
#include "link.h"
#include "nodeset.h"
#include "proto.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct host {
	const struct inv_node *nd;
	struct link *l;
	char *args[16];
	char spool[PATH_MAX], cards[16], mem[32];
	int sent, bye, finished, failed;
	int64_t last_seq; /* of the facts event: acked with bye */
	double up_at, done_at;
	json_t *hello, *facts;
	char reason[64];
	char error[1200]; /* without the "NAME (HOST:PORT): " prefix */
	char summary[512];
};

static void on_line(void *arg, const char *line, size_t len)
{
	struct host *h = arg;
	struct proto_event ev;
	struct d0_err err;
	if (proto_blank(line, len))
		return;
	if (proto_event_parse(line, len, &ev, &err))
		return; /* not ours to judge here: the agent is tested */
	if (!strcmp(ev.type, "hello")) {
		json_decref(h->hello);
		h->hello = json_incref(ev.obj);
	} else if (!strcmp(ev.type, "facts") && !h->facts) {
		h->facts = json_incref(ev.obj);
		h->last_seq = ev.seq;
	}
	proto_event_free(&ev);
}

/* "n01 (10.0.0.1:22): what" -> "what"; "n01: what" -> "what". */
static const char *strip_node(const char *msg, const char *name)
{
	size_t n = strlen(name);
	const char *p;
	if (strncmp(msg, name, n))
		return msg;
	p = msg + n;
	if (p[0] == ':' && p[1] == ' ')
		return p + 2;
	if (p[0] == ' ' && p[1] == '(' && (p = strstr(p, "): ")))
		return p + 3;
	return msg;
}

static void host_fail(struct host *h, const char *reason, const char *msg)
{
	if (h->failed || h->facts)
		return;
	h->failed = 1;
	snprintf(h->reason, sizeof h->reason, "%s", reason);
	snprintf(h->error, sizeof h->error, "%s", strip_node(msg, h->nd->name));
}

static int64_t jint(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static void summarize(struct host *h)
{
	json_t *acc = json_object_get(h->facts, "accelerators");
	const char *mpi = json_string_value(json_object_get(h->facts,
							    "mpi_version"));
	const char *ver = h->hello ? json_string_value(json_object_get(
					 h->hello, "agent_version"))
				   : NULL;
	uint64_t disk = (uint64_t)jint(h->facts, "disk_free");
	char mem[32], card[32], dbuf[32];
	size_t n = json_array_size(acc);
	int same = 1;
	for (size_t i = 1; i < n; i++)
		if (jint(json_array_get(acc, i), "mem_bytes") !=
		    jint(json_array_get(acc, 0), "mem_bytes"))
			same = 0;
	if (mpi && !strncmp(mpi, "Open MPI v", 10))
		mpi += 10;
	/* Whole GiB of free disk: nodes asked a moment apart still fold. */
	if (disk >= (1ull << 30))
		snprintf(dbuf, sizeof dbuf, "%llu GiB",
			 (unsigned long long)(disk >> 30));
	else
		fmt_bytes(disk, dbuf);
	fmt_bytes((uint64_t)jint(json_array_get(acc, 0), "mem_bytes"), card);
	snprintf(h->summary, sizeof h->summary,
		 "ok  cores %lld  mem %s  disk %s free  cards %zu%s%s%s  mpi %s"
		 "  agent %s",
		 (long long)jint(h->facts, "cores"),
		 fmt_bytes((uint64_t)jint(h->facts, "mem_bytes"), mem), dbuf,
		 n, n ? " x " : "", n ? card : "", n && !same ? " (mixed)" : "",
		 mpi && *mpi ? mpi : "?", ver ? ver : "?");
}

/* Where the local agent's probe spool goes (see the top of the file). */
static void local_spool(const char *name, char *out, size_t max)
{
	const char *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	if (x && *x)
		snprintf(out, max, "%s/day0/spool-hosts/%s", x, name);
	else if (home && *home)
		snprintf(out, max, "%s/.local/state/day0/spool-hosts/%s", home,
			 name);
	else
		snprintf(out, max, "/tmp/day0-spool-hosts-%d/%s", (int)getuid(),
			 name);
}

static int default_agent(char *out, size_t max)
{
	char self[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;
	if (n <= 0)
		return -1;
	self[n] = 0;
	if (!(slash = strrchr(self, '/')))
		return -1;
	*slash = 0;
	snprintf(out, max, "%s/day0-agent", self);
	return 0;
}

static void progress(struct host *hs, size_t n, int final)
{
	size_t ok = 0, bad = 0;
	for (size_t i = 0; i < n; i++) {
		ok += hs[i].facts != NULL;
		bad += hs[i].failed;
	}
	if (final)
		fprintf(stderr, "\r\033[K");
	else
		fprintf(stderr, "\rhosts: %zu/%zu answered, %zu failed\033[K",
			ok, n, bad);
	fflush(stderr);
}

/* Print groups of hosts with equal keys (summary or error), folded. */
static void print_groups(struct host *hs, size_t n, int ok)
{
	char **names = calloc(n ? n : 1, sizeof *names);
	char *used = calloc(n ? n : 1, 1);
	for (size_t i = 0; names && used && i < n; i++) {
		const char *key = ok ? hs[i].summary : hs[i].error;
		size_t k = 0;
		char *set;
		if (used[i] || (ok ? !hs[i].facts : !hs[i].failed))
			continue;
		for (size_t j = i; j < n; j++) {
			if (used[j] || (ok ? !hs[j].facts : !hs[j].failed))
				continue;
			if (strcmp(key, ok ? hs[j].summary : hs[j].error) ||
			    (!ok && strcmp(hs[i].reason, hs[j].reason)))
				continue;
			used[j] = 1;
			names[k++] = (char *)hs[j].nd->name;
		}
		set = nodeset_fold(names, k);
		if (ok)
			printf("---------------\n%s (%zu)\n---------------\n%s\n",
			       set ? set : "?", k, key);
		else
			printf("%s (%zu): %s\n", set ? set : "?", k, key);
		free(set);
	}
	free(names);
	free(used);
}

/* facts.compat over the nodes that answered (compat_matrix.h); family:
 * the model family whose minimums apply ("": those of every family). */
static json_t *hosts_matrix(struct host *hs, size_t n, const char *family)
{
	struct compat_node *cn = calloc(n + 1, sizeof *cn);
	size_t k = 0;
	json_t *m;
	if (!cn)
		abort();
	for (size_t i = 0; i < n; i++)
		if (hs[i].facts) {
			cn[k].name = hs[i].nd->name;
			cn[k++].facts = hs[i].facts;
		}
	m = compat_matrix(cn, k, family);
	free(cn);
	return m;
}

static void print_json(const char *inv_path, struct host *hs, size_t n,
		       json_t *matrix)
{
	json_t *doc = json_object(), *arr = json_array();
	size_t ok = 0;
	char *s;
	for (size_t i = 0; i < n; i++) {
		struct host *h = &hs[i];
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(h->nd->name));
		json_object_set_new(o, "host", json_string(h->nd->host));
		json_object_set_new(o, "transport",
				    json_string(h->nd->transport));
		if (strcmp(h->nd->transport, "local"))
			json_object_set_new(o, "port",
					    json_integer(h->nd->port));
		json_object_set_new(o, "ok", json_boolean(h->facts != NULL));
		if (!h->facts) {
			json_object_set_new(o, "reason",
					    json_string(h->reason));
			json_object_set_new(o, "error", json_string(h->error));
		}
		if (h->l && *link_fingerprint(h->l))
			json_object_set_new(
			    o, "fingerprint",
			    json_string(link_fingerprint(h->l)));
		json_object_set_new(o, "seconds",
				    json_real(h->done_at > 0 ? h->done_at : 0));
		if (h->hello)
			json_object_set(o, "hello", h->hello);
		if (h->facts)
			json_object_set(o, "facts", h->facts);
		json_array_append_new(arr, o);
		ok += h->facts != NULL;
	}
	json_object_set_new(doc, "inventory", json_string(inv_path));
	json_object_set_new(doc, "nodes", arr);
	json_object_set_new(doc, "ok", json_integer((json_int_t)ok));
	json_object_set_new(doc, "failed", json_integer((json_int_t)(n - ok)));
	json_object_set(doc, "compat", matrix);
	s = json_dumps(doc, JSON_INDENT(2));
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(doc);
}

/* Drive every link until each node answered or failed. */
static void fan_out(struct host *hs, size_t n, int timeout_s, int tty)
{
	size_t cap = n * 4 + 4;
	struct pollfd *pfd = calloc(cap, sizeof *pfd);
	int *first = calloc(n + 1, sizeof *first), *cnt =
							calloc(n + 1,
							       sizeof *cnt),
	    *tmo = calloc(n + 1, sizeof *tmo);
	double start = now_s(), all_done = 0;
	if (!pfd || !first || !cnt || !tmo)
		goto out;
	for (;;) {
		int nf = 0, wait = 200, live = 0, pending = 0;
		double now = now_s(), before;
		for (size_t i = 0; i < n; i++) {
			struct host *h = &hs[i];
			enum link_phase ph;
			cnt[i] = 0;
			tmo[i] = -1;
			if (h->finished)
				continue;
			ph = link_phase(h->l);
			if (ph == LINK_UP && !h->sent) {
				static const char msg[] =
				    "{\"cmd\":\"hello\"}\n{\"cmd\":\"facts\"}\n";
				link_send(h->l, msg, sizeof msg - 1);
				h->sent = 1;
				h->up_at = now;
			}
			if (h->facts && !h->bye) {
				/* The ack lets the agent drop this probe's
				 * events from its spool, else every run would
				 * resend all earlier ones. */
				char bye[96];
				int bl = snprintf(bye, sizeof bye,
						  "{\"cmd\":\"ack\",\"seq\":%lld}\n"
						  "{\"cmd\":\"bye\"}\n",
						  (long long)h->last_seq);
				if (ph == LINK_UP)
					link_send(h->l, bye, (size_t)bl);
				link_close_input(h->l);
				h->bye = 1;
				h->done_at = now - start;
			}
			if (ph == LINK_FAILED) {
				host_fail(h, link_reason(h->l),
					  link_error(h->l));
				h->finished = 1;
			} else if (ph == LINK_EOF) {
				const char *e = link_stderr(h->l);
				char msg[1200];
				size_t el = strlen(e);
				while (el && (e[el - 1] == '\n'))
					el--;
				snprintf(msg, sizeof msg,
					 "the agent exited before answering%s%.*s",
					 el ? ": " : "", (int)(el > 400 ? 400 : el),
					 el > 400 ? e + el - 400 : e);
				host_fail(h, "agent failed", msg);
				h->finished = 1;
			} else if (h->sent && !h->facts &&
				   now - h->up_at > timeout_s) {
				host_fail(h, "timeout",
					  "timeout: no facts from the agent");
				h->finished = 1;
			} else if (all_done > 0 && now - all_done > 2) {
				h->finished = 1; /* answered; slow to exit */
			}
			if (h->failed && !h->done_at)
				h->done_at = now - start;
			if (h->finished)
				continue;
			live++;
			pending += !h->facts;
			first[i] = nf;
			cnt[i] = link_pollfds(h->l, pfd + nf, (int)cap - nf);
			nf += cnt[i];
			tmo[i] = link_timeout_ms(h->l);
			if (tmo[i] >= 0 && tmo[i] < wait)
				wait = tmo[i];
		}
		if (tty)
			progress(hs, n, 0);
		if (!live)
			break;
		if (!pending && all_done == 0)
			all_done = now_s();
		before = now_s();
		if (poll(pfd, (nfds_t)nf, wait) < 0 && errno != EINTR)
			break;
		now = now_s();
		for (size_t i = 0; i < n; i++) {
			struct host *h = &hs[i];
			int hit = 0;
			if (h->finished)
				continue;
			for (int k = 0; k < cnt[i]; k++)
				hit |= pfd[first[i] + k].revents != 0;
			if (hit || (tmo[i] >= 0 &&
				    (now - before) * 1000 >= tmo[i]))
				link_service(h->l, pfd + first[i], cnt[i]);
		}
	}
out:
	if (tty)
		progress(hs, n, 1);
	free(pfd);
	free(first);
	free(cnt);
	free(tmo);
}

static const struct option opts[] = {
    {"inventory", 1, 0, 'i'},	  {"known-hosts", 1, 0, 'k'},
    {"accept-new-host-keys", 0, 0, 'A'},
    {"timeout", 1, 0, 't'},	  {"json", 0, 0, 'j'},
    {"agent", 1, 0, 'a'},	  {"model", 1, 0, 'm'},
    {0, 0, 0, 0},
};

static int run_hosts(int argc, char **argv)
{
	const char *inv_path = NULL, *known = NULL, *model = NULL;
	char agent[PATH_MAX] = "", family[64];
	json_t *matrix;
	int accept = 0, json = 0, c, rc = EXIT_OK;
	long timeout = 10;
	struct inventory inv = {0};
	struct d0_err err;
	struct host *hs;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			inv_path = optarg;
			break;
		case 'k':
			known = optarg;
			break;
		case 'A':
			accept = 1;
			break;
		case 't':
			if (parse_long(optarg, 1, 3600, &timeout))
				return console_usage_error(
				    &cmd_hosts,
				    "--timeout: expected 1..3600 seconds, "
				    "got '%s'",
				    optarg);
			break;
		case 'j':
			json = 1;
			break;
		case 'm':
			model = optarg;
			break;
		case 'a':
			snprintf(agent, sizeof agent, "%s", optarg);
			break;
		case ':':
			return console_usage_error(&cmd_hosts,
						   "%s needs a value",
						   argv[optind - 1]);
		default:
			return console_usage_error(&cmd_hosts,
						   "unknown option '%s'",
						   argv[optind - 1]);
		}
	}
	if (optind < argc)
		return console_usage_error(&cmd_hosts, "unexpected '%s'",
					   argv[optind]);
	if (!inv_path)
		return console_usage_error(&cmd_hosts,
					   "--inventory is required");
	if (!*agent && default_agent(agent, sizeof agent))
		return console_usage_error(&cmd_hosts,
					   "cannot find day0-agent: use "
					   "--agent PATH");
	if (access(agent, X_OK)) {
		fprintf(stderr, "day0 hosts: %s: not an executable (--agent)\n",
			agent);
		return EXIT_USAGE;
	}
	/* --model named by hand must be read: a typo would otherwise hold
	 * the nodes to no family's minimums and pass. */
	if (compat_family(model, family, sizeof family, &err)) {
		fprintf(stderr, "day0 hosts: --model: %s\n", err.msg);
		return EXIT_USAGE;
	}
	if (inventory_load(inv_path, &inv, &err)) {
		fprintf(stderr, "day0 hosts: %s\n", err.msg);
		return EXIT_USAGE;
	}
	/* A lost node must not take the console with it (EPIPE instead). */
	signal(SIGPIPE, SIG_IGN);
	hs = calloc(inv.n ? inv.n : 1, sizeof *hs);
	if (!hs) {
		inventory_free(&inv);
		fprintf(stderr, "day0 hosts: out of memory\n");
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < inv.n; i++) {
		struct host *h = &hs[i];
		const struct inv_node *nd = &inv.nodes[i];
		int local = !strcmp(nd->transport, "local"), k = 0;
		struct link_cfg cfg = {0};
		h->nd = nd;
		if (local)
			local_spool(nd->name, h->spool, sizeof h->spool);
		else
			snprintf(h->spool, sizeof h->spool,
				 "~/.cache/day0/spool-hosts-%s", nd->name);
		snprintf(h->cards, sizeof h->cards, "%d", nd->cards);
		snprintf(h->mem, sizeof h->mem, "%llu",
			 (unsigned long long)nd->card_mem);
		h->args[k++] = "--node";
		h->args[k++] = (char *)nd->name;
		h->args[k++] = "--spool";
		h->args[k++] = h->spool;
		h->args[k++] = "--sample-hz";
		h->args[k++] = "0";
		h->args[k++] = "--cards";
		h->args[k++] = h->cards;
		if (nd->card_mem) {
			h->args[k++] = "--card-mem";
			h->args[k++] = h->mem;
		}
		h->args[k++] = "--no-fsync";
		h->args[k] = NULL;
		cfg.node = nd;
		cfg.known_hosts = known;
		cfg.accept_new_host_keys = accept;
		cfg.connect_timeout_ms = (int)timeout * 1000;
		cfg.agent_path = agent;
		cfg.agent_args = h->args;
		cfg.on_line = on_line;
		cfg.arg = h;
		if (link_open(&cfg, &h->l, &err)) {
			host_fail(h, "bad node", err.msg);
			h->finished = 1;
		}
	}
	fan_out(hs, inv.n, (int)timeout, isatty(2));
	for (size_t i = 0; i < inv.n; i++) {
		if (hs[i].facts)
			summarize(&hs[i]);
		else
			rc = EXIT_CHECK_FAILED;
	}
	matrix = hosts_matrix(hs, inv.n, family);
	/* A node that must match and does not fails the probe as a node that
	 * did not answer does. */
	if (!strcmp(json_string_value(json_object_get(matrix, "status")),
		    "fail"))
		rc = EXIT_CHECK_FAILED;
	if (json) {
		print_json(inv_path, hs, inv.n, matrix);
	} else {
		const char *cols = getenv("COLUMNS");
		print_groups(hs, inv.n, 1);
		print_groups(hs, inv.n, 0);
		printf("\ncompatibility matrix (fields x node sets; '=': must "
		       "match, '*': differs from the majority)\n");
		compat_print(stdout, matrix, cols ? atoi(cols) : 0);
	}
	json_decref(matrix);
	fflush(stdout);
	for (size_t i = 0; i < inv.n; i++) {
		link_free(hs[i].l);
		json_decref(hs[i].hello);
		json_decref(hs[i].facts);
	}
	free(hs);
	inventory_free(&inv);
	return rc;
}

const struct console_cmd cmd_hosts = {
    "hosts",
    "--inventory INV [--known-hosts FILE] [--accept-new-host-keys] "
    "[--timeout SECS] [--json] [--agent PATH] [--model DIR|CONFIG]\n\n"
    "Reaches every node of the inventory in parallel (ssh or local), "
    "deploys the\nagent where it is missing or stale, and prints the "
    "facts folded by node set, then the compatibility matrix (fields x "
    "node sets)\nand facts.compat: exit 1 when a node did not answer or "
    "differs from the\nmajority on the engine build, Open MPI or the "
    "driver major (docs/compat.md).\n\n"
    "  --inventory INV          the cluster\n"
    "  --known-hosts FILE       host keys (default ~/.ssh/known_hosts)\n"
    "  --accept-new-host-keys   record unknown host keys (never changed "
    "ones)\n"
    "  --timeout SECS           per node, connect through facts (default "
    "10)\n"
    "  --json                   one JSON object per node\n"
    "  --agent PATH             the local day0-agent to deploy (default: "
    "next to day0)\n"
    "  --model DIR|CONFIG       hold the nodes to this checkpoint's "
    "family minimums\n"
    "                           (its config.json's model_type; exit 2 "
    "when unreadable)\n\n"
    "Example:\n  day0 hosts --inventory cluster.json --known-hosts "
    "~/.ssh/known_hosts",
    "reach every node (ssh/local), deploy the agent, show facts folded "
    "by node set",
    run_hosts,
};
