/*
 * comm_check - check a `day0-engine comm --json` document for the tests:
 *   comm_check FILE [WRONG]
 * Every row of every op must satisfy nccl-tests' relations exactly:
 * count = bytes / element size, algbw = bytes / time (GB/s, 1e9),
 * busbw = algbw x the op's bus factor for the group's rank count, split
 * ops' sizes a multiple of ranks x element size; every result's `wrong`
 * must equal WRONG (default 0) and the totals must add up.  The rank map
 * must list every rank once, and a pairs matrix (if any) must be n x n
 * with an empty diagonal and its slowest pairs in order.  Prints a one-line
 * summary; exit 0 when all hold, 1 otherwise, with the reason on stderr.
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *file;

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "comm_check: %s: ", file);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static double factor(const char *op, int n)
{
	if (!strcmp(op, "allreduce"))
		return 2.0 * (n - 1) / n;
	if (!strcmp(op, "allgather") || !strcmp(op, "reducescatter") ||
	    !strcmp(op, "alltoall"))
		return (double)(n - 1) / n;
	return 1.0;
}

static int close_to(double a, double b)
{
	return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-12;
}

static int check_result(json_t *r, const char *op, long long bytes, int n,
			long long want_wrong, long long *wrong)
{
	double t = json_real_value(json_object_get(r, "time_us"));
	double alg = json_real_value(json_object_get(r, "algbw"));
	double bus = json_real_value(json_object_get(r, "busbw"));
	json_t *w = json_object_get(r, "wrong");
	if (!json_is_real(json_object_get(r, "time_us")) || !(t > 0))
		return bad("%s: size %lld: time_us missing or not > 0", op, bytes);
	if (!close_to(alg, (double)bytes / 1e9 / (t / 1e6)))
		return bad("%s: size %lld: algbw is not bytes / time", op, bytes);
	if (!close_to(bus, alg * factor(op, n)))
		return bad("%s: size %lld: busbw is not algbw x bus factor", op,
			   bytes);
	if (!json_is_integer(w) || json_integer_value(w) != want_wrong)
		return bad("%s: size %lld: unexpected wrong count", op, bytes);
	*wrong += json_integer_value(w);
	return 0;
}

static int check_pairs(json_t *p, int n)
{
	json_t *m = json_object_get(p, "gbps"), *slow = json_object_get(p, "slowest");
	double prev = -1;
	if (json_array_size(m) != (size_t)n)
		return bad("pairs: %s matrix has %lld rows", "gbps",
			   (long long)json_array_size(m));
	for (int i = 0; i < n; i++) {
		json_t *row = json_array_get(m, (size_t)i);
		if (json_array_size(row) != (size_t)n)
			return bad("pairs: gbps row %d has the wrong length", i);
		for (int j = 0; j < n; j++) {
			json_t *v = json_array_get(row, (size_t)j);
			if (i == j ? !json_is_null(v)
				   : !(json_is_real(v) && json_real_value(v) > 0))
				return bad("pairs: gbps row %d: diagonal must be null, "
					   "the rest > 0", i);
		}
	}
	if (!json_array_size(slow))
		return bad("pairs: no slowest pairs");
	for (size_t k = 0; k < json_array_size(slow); k++) {
		json_t *s = json_array_get(slow, k);
		int from = (int)json_integer_value(json_object_get(s, "from"));
		int to = (int)json_integer_value(json_object_get(s, "to"));
		double g = json_real_value(json_object_get(s, "gbps"));
		if (from == to || from < 0 || to < 0 || from >= n || to >= n ||
		    g < prev ||
		    g != json_real_value(json_array_get(
				 json_array_get(m, (size_t)from), (size_t)to)) ||
		    !json_is_string(json_object_get(s, "from_host")))
			return bad("pairs: slowest entry %zu is inconsistent", k);
		prev = g;
	}
	return 0;
}

int main(int argc, char **argv)
{
	json_error_t je;
	json_t *doc, *ops, *map;
	long long want_wrong = argc > 2 ? atoll(argv[2]) : 0, wrong = 0;
	size_t nrows = 0, esz;
	int ranks, gn;
	const char *dtype;

	if (argc < 2) {
		fprintf(stderr, "usage: comm_check FILE [WRONG]\n");
		return 2;
	}
	file = argv[1];
	doc = json_load_file(file, 0, &je);
	if (!json_is_object(doc))
		return bad("not a JSON document: %s", je.text);
	ranks = (int)json_integer_value(json_object_get(doc, "ranks"));
	gn = (int)json_integer_value(json_object_get(doc, "group_ranks"));
	dtype = json_string_value(json_object_get(doc, "dtype"));
	if (ranks < 1 || gn < 1 || ranks % gn || !dtype)
		return bad("ranks, group_ranks or dtype missing");
	esz = !strcmp(dtype, "f64") ? 8 : 4;
	map = json_object_get(doc, "rank_map");
	if (json_array_size(map) != (size_t)ranks)
		return bad("rank_map: %zu entries for %d ranks", json_array_size(map), ranks);
	for (int r = 0; r < ranks; r++) {
		json_t *e = json_array_get(map, (size_t)r);
		if (json_integer_value(json_object_get(e, "rank")) != r ||
		    json_integer_value(json_object_get(e, "pid")) <= 0 ||
		    !json_is_string(json_object_get(e, "host")) ||
		    !json_is_integer(json_object_get(e, "card")))
			return bad("rank_map: entry %d incomplete", r);
	}
	ops = json_object_get(doc, "ops");
	for (size_t i = 0; i < json_array_size(ops); i++) {
		json_t *o = json_array_get(ops, i), *rows = json_object_get(o, "rows");
		const char *op = json_string_value(json_object_get(o, "op"));
		long long op_wrong = 0;
		if (!op || json_integer_value(json_object_get(o, "ranks")) != gn)
			return bad("op %s: name or ranks missing", op ? op : "?");
		if (!json_array_size(rows))
			return bad("%s: no rows", op);
		for (size_t k = 0; k < json_array_size(rows); k++) {
			json_t *row = json_array_get(rows, k);
			long long bytes = json_integer_value(json_object_get(row, "bytes"));
			long long count = json_integer_value(json_object_get(row, "count"));
			int split = !strcmp(op, "allgather") || !strcmp(op, "reducescatter") ||
				    !strcmp(op, "alltoall");
			if (bytes <= 0 || count * (long long)esz != bytes)
				return bad("%s: size %lld: count x element size != bytes", op, bytes);
			if (split && bytes % ((long long)gn * (long long)esz))
				return bad("%s: size %lld: not N equal blocks", op, bytes);
			if (check_result(json_object_get(row, "out_of_place"), op, bytes, gn,
					 want_wrong, &op_wrong) ||
			    check_result(json_object_get(row, "in_place"), op, bytes, gn,
					 want_wrong, &op_wrong))
				return 1;
			nrows++;
		}
		if (json_integer_value(json_object_get(o, "wrong")) != op_wrong)
			return bad("%s: op total wrong %lld does not add up", op,
				   (long long)json_integer_value(json_object_get(o, "wrong")));
		wrong += op_wrong;
	}
	if (json_object_get(doc, "pairs")) {
		if (check_pairs(json_object_get(doc, "pairs"), ranks))
			return 1;
		wrong += json_integer_value(
			json_object_get(json_object_get(doc, "pairs"), "wrong"));
	}
	if (json_integer_value(json_object_get(doc, "wrong")) != wrong ||
	    json_is_true(json_object_get(doc, "ok")) != (wrong == 0))
		return bad("document total wrong / ok do not add up (rows: %lld)",
			   wrong);
	printf("comm_check: %zu ops, %zu rows, %d ranks, %lld wrong: ok\n",
	       json_array_size(ops), nrows, ranks, wrong);
	json_decref(doc);
	return 0;
}
