/*
 * sample.c - the samplers: what the operator watches while stages run.
 *
 * Each tick (--sample-hz) emits `sample` events:
 *   card -1   host.mem.used (MemTotal - MemAvailable), net.rx_bps and
 *             net.tx_bps (all interfaces but lo, from /proc/net/dev);
 *   card r    rank.rss of rank r of each running stage (with stage_id),
 *             the processes of the stage's session: under mpirun a
 *             process's rank is OMPI_COMM_WORLD_RANK in its environment
 *             (read once per pid), otherwise the session is rank 0;
 *   card i    mem.used and mem.peak of every card from its vendor unit
 *             (cards*.c): NVML's numbers, or for CPU cards the memory of
 *             the ranks mapped to them.
 * Parsing is kept in small functions over text so the unit tests can feed
 * them /proc-shaped input.
 */
#include "agent.h"
#include "simulate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, total = 0;
	if (fd < 0)
		return -1;
	while ((size_t)total < cap - 1 &&
	       (n = read(fd, buf + total, cap - 1 - (size_t)total)) > 0)
		total += n;
	close(fd);
	buf[total] = 0;
	return total;
}

/* "Key:   12345 kB" -> bytes; 0 when absent. */
static int meminfo_field(const char *text, const char *key, uint64_t *out)
{
	const char *p = text;
	size_t kl = strlen(key);
	while (p && *p) {
		if (!strncmp(p, key, kl) && p[kl] == ':') {
			unsigned long long v;
			if (sscanf(p + kl + 1, "%llu", &v) != 1)
				return -1;
			*out = (uint64_t)v * 1024;
			return 0;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

int proc_meminfo(const char *text, uint64_t *total, uint64_t *avail)
{
	if (meminfo_field(text, "MemTotal", total) < 0)
		return -1;
	if (meminfo_field(text, "MemAvailable", avail) < 0) {
		/* Kernels before 3.14: free + buffers + cached. */
		uint64_t f = 0, b = 0, c = 0;
		if (meminfo_field(text, "MemFree", &f) < 0)
			return -1;
		meminfo_field(text, "Buffers", &b);
		meminfo_field(text, "Cached", &c);
		*avail = f + b + c;
	}
	return 0;
}

/* Is name in the comma-separated list? */
static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		const char *c = strchr(p, ',');
		size_t l = c ? (size_t)(c - p) : strlen(p);
		if (l == n && !memcmp(p, name, n))
			return 1;
		p = c ? c + 1 : p + l;
	}
	return 0;
}

int proc_netdev(const char *text, uint64_t *rx, uint64_t *tx)
{
	return proc_netdev_if(text, NULL, rx, tx);
}

int proc_netdev_if(const char *text, const char *only, uint64_t *rx,
		   uint64_t *tx)
{
	const char *p = text;
	int ifaces = 0;
	*rx = *tx = 0;
	while ((p = strchr(p, '\n'))) {
		char name[64];
		unsigned long long v[9];
		const char *colon;
		p++;
		colon = strchr(p, ':');
		if (!colon || (strchr(p, '\n') && colon > strchr(p, '\n')))
			continue;
		if (sscanf(p, " %63[^:]", name) != 1)
			continue;
		if (sscanf(colon + 1,
			   "%llu %llu %llu %llu %llu %llu %llu %llu %llu",
			   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
			   &v[7], &v[8]) != 9)
			continue;
		if (only && *only ? !in_list(only, name)
				      : !strcmp(name, "lo"))
			continue;
		*rx += v[0];
		*tx += v[8];
		ifaces++;
	}
	return ifaces >= 0 ? 0 : -1;
}

int proc_stat_session(const char *text, pid_t *sid, unsigned long long *start)
{
	const char *p = strrchr(text, ')');
	int field = 2;
	long long sess = -1;
	unsigned long long st = 0;
	if (!p)
		return -1;
	for (p++; *p; p++) {
		if (*p != ' ')
			continue;
		field++;
		if (field == 6)
			sess = strtoll(p + 1, NULL, 10);
		else if (field == 22) {
			st = strtoull(p + 1, NULL, 10);
			break;
		}
	}
	if (field != 22 || sess < 0)
		return -1;
	*sid = (pid_t)sess;
	*start = st;
	return 0;
}

int proc_status_mem(const char *text, uint64_t *rss, uint64_t *hwm)
{
	*rss = *hwm = 0;
	if (meminfo_field(text, "VmRSS", rss) < 0)
		return -1; /* kernel threads and zombies have none */
	meminfo_field(text, "VmHWM", hwm);
	return 0;
}

int proc_environ_rank(const char *env, size_t len)
{
	static const char key[] = "OMPI_COMM_WORLD_RANK=";
	size_t i = 0;
	while (i < len) {
		const char *e = env + i;
		size_t n = strnlen(e, len - i);
		if (n > sizeof key - 1 && !memcmp(e, key, sizeof key - 1)) {
			char num[16];
			size_t dl = n - (sizeof key - 1);
			char *end;
			long r;
			if (dl >= sizeof num)
				return -1;
			memcpy(num, e + sizeof key - 1, dl);
			num[dl] = 0;
			r = strtol(num, &end, 10);
			return *end || r < 0 || r > 1000000 ? -1 : (int)r;
		}
		i += n + 1;
	}
	return -1;
}

void sampler_init(struct sampler *s)
{
	memset(s, 0, sizeof *s);
}

static void emit_sample(struct agent *a, int card, const char *metric,
			double value, const char *stage_id)
{
	json_t *o = json_pack("{s:i, s:s, s:f}", "card", card, "metric", metric,
			      "value", value);
	if (stage_id)
		json_object_set_new(o, "stage_id", json_string(stage_id));
	agent_emit(a, "sample", o, 0);
}

/* The rank of pid in stage st (cached), or -2 when pid is not in it. */
static int pid_rank(struct stage *st, pid_t pid, unsigned long long start)
{
	char path[64], env[65536];
	ssize_t n;
	struct pid_rank *p;
	for (size_t i = 0; i < st->npr; i++)
		if (st->pr[i].pid == pid && st->pr[i].start == start) {
			st->pr[i].seen = 1;
			if (st->pr[i].rank < 0 && st->mpi) {
				/* Forked but not yet exec'd when first read
				 * (the environment was the launcher's): the
				 * few non-ranks of a stage are read again. */
				p = &st->pr[i];
				goto read_env;
			}
			return st->pr[i].rank;
		}
	if (st->npr == st->cappr) {
		st->cappr = st->cappr ? st->cappr * 2 : 16;
		st->pr = realloc(st->pr, st->cappr * sizeof *st->pr);
		if (!st->pr)
			abort();
	}
	p = &st->pr[st->npr++];
	p->pid = pid;
	p->start = start;
	p->seen = 1;
	if (!st->mpi) {
		p->rank = 0;
		return 0;
	}
read_env:
	snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
	n = read_small(path, env, sizeof env);
	p->rank = n > 0 ? proc_environ_rank(env, (size_t)n) : -1;
	return p->rank;
}

struct rank_acc {
	struct rank_mem *m;
	size_t n, cap;
};

static void acc_add(struct rank_acc *acc, int rank, uint64_t rss, uint64_t hwm)
{
	for (size_t i = 0; i < acc->n; i++)
		if (acc->m[i].rank == rank) {
			acc->m[i].rss += rss;
			acc->m[i].hwm += hwm;
			return;
		}
	if (acc->n == acc->cap) {
		acc->cap = acc->cap ? acc->cap * 2 : 16;
		acc->m = realloc(acc->m, acc->cap * sizeof *acc->m);
		if (!acc->m)
			abort();
	}
	acc->m[acc->n++] = (struct rank_mem){rank, rss, hwm};
}

/*
 * Ranks on this host that a cluster stage launched from another node
 * (ranks.c): their environment names the stage and its rank map.  Each
 * process's environment is read once (cached by pid and start time); a
 * process that is not one of ours is remembered as such.
 */
#define FOREIGN_REREADS 3

static struct foreign_rank *foreign_find(struct sampler *s, pid_t pid,
					 unsigned long long start)
{
	for (size_t i = 0; i < s->nfr; i++)
		if (s->fr[i].pid == pid && s->fr[i].start == start)
			return &s->fr[i];
	if (s->nfr == s->capfr) {
		s->capfr = s->capfr ? s->capfr * 2 : 64;
		s->fr = realloc(s->fr, s->capfr * sizeof *s->fr);
		if (!s->fr)
			abort();
	}
	s->fr[s->nfr] = (struct foreign_rank){.pid = pid, .start = start,
					       .card = RANK_UNMAPPED - 1};
	return &s->fr[s->nfr++];
}

/* A rank another agent's stage started is this session's (one console
 * may run beside another on the same hosts, their node names alike): its
 * DAY0_SESSION is ours.  An agent given no --session takes any. */
static int same_session(const struct agent *a, const char *env, size_t n)
{
	char s[sizeof a->cfg.session];
	if (!a->cfg.session[0])
		return 1;
	return proc_environ_get(env, n, "DAY0_SESSION", s, sizeof s) == 0 &&
	       !strcmp(s, a->cfg.session);
}

static void foreign_rank(struct agent *a, pid_t pid, unsigned long long start,
			 struct rank_acc *all)
{
	struct foreign_rank *f = foreign_find(&a->sampler, pid, start);
	char path[64], buf[4096];
	uint64_t rss, hwm;
	f->seen = 1;
	/* Read when new, and again on the next ticks while it is not a
	 * rank: a process seen between fork and exec still had its
	 * launcher's environment. */
	if (f->card == RANK_UNMAPPED - 1 ||
	    (f->card == RANK_UNMAPPED && f->reads < FOREIGN_REREADS)) {
		static char env[65536];
		char ranks[16384];
		ssize_t n;
		snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
		n = read_small(path, env, sizeof env);
		f->card = RANK_UNMAPPED;
		f->reads++;
		if (n > 0 &&
		    proc_environ_get(env, (size_t)n, "DAY0_RANKS", ranks,
				     sizeof ranks) == 0 &&
		    proc_environ_get(env, (size_t)n, "DAY0_STAGE_ID",
				     f->stage_id, sizeof f->stage_id) == 0 &&
		    same_session(a, env, (size_t)n))
			f->card = rank_card(ranks,
					    proc_environ_rank(env, (size_t)n),
					    a->cfg.node);
	}
	if (f->card < 0)
		return;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	if (read_small(path, buf, sizeof buf) <= 0 ||
	    proc_status_mem(buf, &rss, &hwm) < 0)
		return;
	emit_sample(a, f->card, "rank.rss", (double)rss, f->stage_id);
	acc_add(all, f->card, rss, hwm);
}

/* Forget the processes that are gone. */
static void foreign_sweep(struct agent *a)
{
	struct sampler *s = &a->sampler;
	size_t w = 0;
	for (size_t i = 0; i < s->nfr; i++)
		if (s->fr[i].seen) {
			s->fr[i].seen = 0;
			s->fr[w++] = s->fr[i];
		}
	s->nfr = w;
}

/* Per-rank memory of every running stage, one /proc walk for all. */
static void sample_ranks(struct agent *a, struct rank_acc *all)
{
	DIR *d;
	struct dirent *e;
	struct rank_acc *per;
	per = calloc((size_t)(a->nstages ? a->nstages : 1), sizeof *per);
	if (!per)
		abort();
	for (int k = 0; k < a->nstages; k++)
		for (size_t i = 0; i < a->stages[k]->npr; i++)
			a->stages[k]->pr[i].seen = 0;
	d = opendir("/proc");
	while (d && (e = readdir(d))) {
		char path[64], buf[4096];
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		pid_t sid;
		unsigned long long start;
		uint64_t rss, hwm;
		int k, rank;
		if (*end || pid <= 1)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/stat", pid);
		if (read_small(path, buf, sizeof buf) <= 0 ||
		    proc_stat_session(buf, &sid, &start) < 0)
			continue;
		for (k = 0; k < a->nstages; k++)
			if (a->stages[k]->pid == sid && !a->stages[k]->exited)
				break;
		if (k == a->nstages) {
			foreign_rank(a, (pid_t)pid, start, all);
			continue;
		}
		rank = pid_rank(a->stages[k], (pid_t)pid, start);
		if (rank >= 0 && a->stages[k]->ranks)
			rank = rank_card(a->stages[k]->ranks, rank,
					 a->cfg.node);
		if (rank < 0)
			continue; /* mpirun itself, or another node's rank */
		snprintf(path, sizeof path, "/proc/%ld/status", pid);
		if (read_small(path, buf, sizeof buf) <= 0 ||
		    proc_status_mem(buf, &rss, &hwm) < 0)
			continue;
		acc_add(&per[k], rank, rss, hwm);
		acc_add(all, rank, rss, hwm);
	}
	foreign_sweep(a);
	if (d)
		closedir(d);
	for (int k = 0; k < a->nstages; k++) {
		struct stage *st = a->stages[k];
		size_t w = 0;
		for (size_t i = 0; i < per[k].n; i++)
			emit_sample(a, per[k].m[i].rank, "rank.rss",
				    (double)per[k].m[i].rss, st->id);
		free(per[k].m);
		/* Forget pids that are gone. */
		for (size_t i = 0; i < st->npr; i++)
			if (st->pr[i].seen)
				st->pr[w++] = st->pr[i];
		st->npr = w;
	}
	free(per);
}

void sampler_tick(struct agent *a)
{
	struct sampler *s = &a->sampler;
	char buf[16384];
	uint64_t total, avail, rx, tx;
	double now = agent_now();
	struct rank_acc ranks = {0};
	if (simulate_cards) { /* --simulate: no /proc, no vendor */
		simulate_tick(a);
		return;
	}
	if (read_small("/proc/meminfo", buf, sizeof buf) > 0 &&
	    proc_meminfo(buf, &total, &avail) == 0) {
		s->mem_total = total;
		emit_sample(a, -1, "host.mem.used", (double)(total - avail),
			    NULL);
	}
	if (read_small("/proc/net/dev", buf, sizeof buf) > 0 &&
	    proc_netdev_if(buf, a->cfg.net_if, &rx, &tx) == 0) {
		double dt = now - s->last_t;
		if (s->have_net && dt > 0 && rx >= s->rx && tx >= s->tx) {
			emit_sample(a, -1, "net.rx_bps",
				    (double)(rx - s->rx) / dt, NULL);
			emit_sample(a, -1, "net.tx_bps",
				    (double)(tx - s->tx) / dt, NULL);
		}
		s->rx = rx;
		s->tx = tx;
		s->have_net = 1;
	}
	s->last_t = now;
	sample_ranks(a, &ranks);
	cards_refresh(&a->cards, ranks.m, ranks.n);
	cards_save_peaks(&a->cards, a->cfg.spool_dir);
	for (int i = 0; i < a->cards.n; i++) {
		emit_sample(a, i, "mem.used", (double)a->cards.card[i].used,
			    NULL);
		emit_sample(a, i, "mem.peak", (double)a->cards.card[i].peak,
			    NULL);
	}
	free(ranks.m);
}
