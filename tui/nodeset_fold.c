/*
 * nodeset_fold.c - names -> "n[01-03,05],x": see nodeset.h.
 */
#include "nodeset.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item {
	const char *name;
	size_t plen;	 /* prefix length (before the trailing digits) */
	const char *num; /* trailing digits, "" when none */
	size_t nlen;
	uint64_t v;
	size_t group; /* index of the group's first name */
	size_t order; /* input position, for a stable sort */
};

static int cmp_item(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	if (x->v != y->v)
		return x->v < y->v ? -1 : 1;
	if (x->nlen != y->nlen)
		return x->nlen < y->nlen ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

struct buf {
	char *p;
	size_t len, cap;
	int oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		char *p;
		while (cap < b->len + n + 1)
			cap *= 2;
		if (!(p = realloc(b->p, cap))) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

/* Does v printed with zero padding to width w give exactly num[nlen]? */
static int prints_as(uint64_t v, size_t w, const char *num, size_t nlen)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof tmp, "%0*llu", (int)w,
			 (unsigned long long)v);
	return n > 0 && (size_t)n == nlen && !memcmp(tmp, num, nlen);
}

char *nodeset_fold(char *const *names, size_t n)
{
	struct item *it = calloc(n ? n : 1, sizeof *it);
	struct buf b = {0};
	size_t i, j;
	if (!it)
		return NULL;
	put(&b, "", 0);
	for (i = 0; i < n; i++) {
		const char *s = names[i];
		size_t len = strlen(s), k = len;
		while (k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9')
			k--;
		it[i].name = s;
		it[i].order = i;
		it[i].plen = k;
		it[i].num = s + k;
		it[i].nlen = len - k;
		/* Numbers too long for 64 bits are left as plain names. */
		if (it[i].nlen > 18 || k == 0) {
			it[i].plen = len;
			it[i].num = s + len;
			it[i].nlen = 0;
		}
		it[i].v = it[i].nlen ? strtoull(it[i].num, NULL, 10) : 0;
		it[i].group = i;
		if (!it[i].nlen) { /* plain: grouped with its duplicates */
			for (j = 0; j < i; j++)
				if (!it[j].nlen && !strcmp(it[j].name, s)) {
					it[i].group = it[j].group;
					break;
				}
			continue;
		}
		for (j = 0; j < i; j++)
			if (it[j].nlen && it[j].plen == k &&
			    !memcmp(it[j].name, s, k)) {
				it[i].group = it[j].group;
				break;
			}
	}
	qsort(it, n, sizeof *it, cmp_item);
	for (i = 0; i < n;) {
		size_t end = i + 1, count = 0;
		int first = 1;
		while (end < n && it[end].group == it[i].group)
			end++;
		if (b.len)
			put(&b, ",", 1);
		if (!it[i].nlen) { /* a plain name (duplicates dropped) */
			put(&b, it[i].name, strlen(it[i].name));
			i = end;
			continue;
		}
		/* One distinct number: no brackets. */
		for (j = i; j < end; j++)
			if (j == i || it[j].v != it[j - 1].v ||
			    it[j].nlen != it[j - 1].nlen)
				count++;
		put(&b, it[i].name, it[i].plen);
		if (count == 1) {
			put(&b, it[i].num, it[i].nlen);
			i = end;
			continue;
		}
		put(&b, "[", 1);
		while (i < end) {
			size_t w = it[i].nlen, last = i;
			/* Extend the run with v+1 printed at the same width. */
			for (j = i + 1; j < end; j++) {
				if (it[j].v == it[last].v &&
				    it[j].nlen == it[last].nlen)
					continue; /* duplicate */
				if (it[j].v != it[last].v + 1 ||
				    !prints_as(it[j].v, w, it[j].num,
					       it[j].nlen))
					break;
				last = j;
			}
			if (!first)
				put(&b, ",", 1);
			first = 0;
			put(&b, it[i].num, it[i].nlen);
			if (last != i) {
				put(&b, "-", 1);
				put(&b, it[last].num, it[last].nlen);
			}
			/* Skip duplicates of the run's last number. */
			while (j < end && it[j].v == it[last].v &&
			       it[j].nlen == it[last].nlen)
				j++;
			i = j;
		}
		put(&b, "]", 1);
	}
	free(it);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}
