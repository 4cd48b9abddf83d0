/* Node-set folding (tui/nodeset_fold.c) and round trips through
 * nodeset_expand. */
#include "engine.h"
#include "nodeset.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

/* Fold a comma-separated list (no brackets in it). */
static char *fold_list(const char *list)
{
	char *copy = strdup(list), *names[64], *save = NULL, *tok, *r;
	size_t n = 0;
	for (tok = strtok_r(copy, ",", &save); tok && n < 64;
	     tok = strtok_r(NULL, ",", &save))
		names[n++] = tok;
	r = nodeset_fold(names, n);
	free(copy);
	return r;
}

static int folds_to(const char *list, const char *want)
{
	char *got = fold_list(list);
	int ok = got && !strcmp(got, want);
	if (!ok)
		printf("# fold(%s) = %s, want %s\n", list, got ? got : "NULL",
		       want);
	free(got);
	return ok;
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* expand(fold(names)) holds the same names as names (a set). */
static int round_trip(char **names, size_t n)
{
	char *set = nodeset_fold(names, n), **back = NULL;
	size_t m = 0, i, j;
	struct d0_err err;
	int ok = 1;
	if (!set || nodeset_expand(set, &back, &m, &err)) {
		printf("# round trip: %s: %s\n", set ? set : "NULL",
		       set ? err.msg : "");
		free(set);
		return 0;
	}
	for (i = 0; i < n && ok; i++) {
		for (j = 0; j < m && strcmp(names[i], back[j]); j++)
			;
		ok = j < m;
	}
	for (j = 0; j < m && ok; j++) {
		for (i = 0; i < n && strcmp(names[i], back[j]); i++)
			;
		ok = i < n;
	}
	/* duplicates are dropped, nothing is added */
	if (!ok)
		printf("# round trip of %s failed\n", set);
	free_names(back, m);
	free(set);
	return ok;
}

static int expand_round_trip(const char *set)
{
	char **v = NULL;
	size_t n = 0;
	struct d0_err err;
	int ok;
	if (nodeset_expand(set, &v, &n, &err))
		return 0;
	ok = round_trip(v, n);
	/* and folding an expansion gives the set back when it is canonical */
	free_names(v, n);
	return ok;
}

int main(void)
{
	char *empty = nodeset_fold(NULL, 0);
	CHECK(empty && !strcmp(empty, ""));
	free(empty);

	CHECK(folds_to("n01,n02,n03,n05", "n[01-03,05]"));
	CHECK(folds_to("a1,a2,b7", "a[1-2],b7"));
	CHECK(folds_to("n1", "n1"));
	CHECK(folds_to("login", "login"));
	CHECK(folds_to("login,n1,n2,gw", "login,n[1-2],gw"));
	/* order-stable groups, numbers sorted within a group */
	CHECK(folds_to("b2,a1,b1", "b[1-2],a1"));
	CHECK(folds_to("n03,n01,n02", "n[01-03]"));
	/* duplicates dropped */
	CHECK(folds_to("n1,n2,n1,x,x", "n[1-2],x"));
	/* zero padding kept */
	CHECK(folds_to("n09,n10,n11", "n[09-11]"));
	CHECK(folds_to("n9,n10", "n[9-10]"));
	CHECK(folds_to("n1,n01", "n[1,01]"));
	CHECK(folds_to("n008,n009,n010", "n[008-010]"));
	CHECK(folds_to("n99,n100,n0100", "n[99-100,0100]"));
	/* prefixes with digits inside, addresses */
	CHECK(folds_to("r1c1,r1c2,r2c1", "r1c[1-2],r2c1"));
	CHECK(folds_to("10.0.0.1,10.0.0.2,10.0.0.4", "10.0.0.[1-2,4]"));
	CHECK(folds_to("node1,node2,node3,node4,node5,node6,node7,node8",
		       "node[1-8]"));
	CHECK(folds_to("n1,n3,n5", "n[1,3,5]"));
	/* a number beyond 64 bits is a plain name */
	CHECK(folds_to("n123456789012345678901", "n123456789012345678901"));

	/* round trips: expand(fold(x)) == x */
	CHECK(expand_round_trip("n[01-16]"));
	CHECK(expand_round_trip("n[1-3,7],x,y[08-12]"));
	CHECK(expand_round_trip("r[1-2]c[1-4]"));
	CHECK(expand_round_trip("n[9-11]"));
	CHECK(expand_round_trip("n[098-102]"));
	CHECK(expand_round_trip("a,b,c"));
	{
		char *v[] = {"n1", "n01", "n001", "n2", "n02", "x", "n10"};
		CHECK(round_trip(v, sizeof v / sizeof *v));
	}
	{
		/* fold(expand(s)) == s for canonical sets */
		char **v = NULL, *f;
		size_t n = 0;
		struct d0_err err;
		CHECK(nodeset_expand("n[01-03,05,07-09],gpu[1-2]", &v, &n,
				     &err) == 0);
		f = nodeset_fold(v, n);
		CHECK(f && !strcmp(f, "n[01-03,05,07-09],gpu[1-2]"));
		free(f);
		free_names(v, n);
	}
	{
		/* numbers past 18 digits or a range ending at LONG_MAX are
		 * refused, not looped over (the fuzzer found the overflow) */
		const char *bad[] = {"n[04444444444444444444416]",
				     "n[9223372036854775807]",
				     "n[9223372036854775806-9223372036854775807]",
				     "n[1-9999999999999999999]", "n[-1]"};
		for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
			char **v = NULL;
			size_t n = 0;
			struct d0_err err;
			CHECK(nodeset_expand(bad[i], &v, &n, &err) == -1);
			CHECK(strstr(err.msg, "18 digits") ||
			      strstr(err.msg, "not a number"));
		}
		char **v = NULL;
		size_t n = 0;
		struct d0_err err;
		CHECK(nodeset_expand("n[999999999999999998-999999999999999999]",
				     &v, &n, &err) == 0 && n == 2);
		free_names(v, n);
	}
	return unit_done();
}
