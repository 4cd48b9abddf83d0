/*
 * step_comm.c - `day0-engine comm`: collective communication sweeps with
 * nccl-tests semantics over Open MPI, every result checked exactly.
 *
 *   mpirun -np N day0-engine comm [--ops LIST] [--min 8] [--max 256M] ...
 *
 * Run under mpirun, each rank is one "card".  The step
 *   1. gathers the rank map (rank -> host, card = local rank, pid) and
 *      splits the ranks into groups: world, node (ranks sharing a host: the
 *      TP domain) or cross (the k-th rank of every host: the inter-node
 *      domain); every group runs the same collective at the same time;
 *   2. for every op and size, times `iters` back-to-back calls (after
 *      `warmup` untimed ones) out-of-place and in-place, averages the
 *      per-call time over all ranks, and derives algbw = bytes / time and
 *      busbw = algbw x the op's bus factor (nccl-tests' PERFORMANCE.md);
 *   3. re-initialises the buffers, runs the op once more and compares
 *      every element of every result buffer with its exact expected value
 *      (#wrong, summed over ranks);
 *   4. optionally (--pairs) measures send/recv bandwidth for every ordered
 *      pair of ranks and names the slowest.
 *
 * Inputs are small integers (see `elem_a`/`rank_b`), so every sum is exact
 * in f32, f64 and i32 whatever order MPI reduces in: any difference from
 * the expected value is a wrong element, never rounding.
 *
 * Sizes follow nccl-tests: for all-gather, reduce-scatter and all-to-all
 * the size is the whole buffer (N blocks of size/N), rounded down to a
 * multiple of N elements; sizes that round to 0 are skipped.
 *
 * Rank 0 prints (text, --json or --events); the other ranks print nothing
 * but their own fatal errors.  Usage errors found before MPI starts are
 * printed by the rank mpirun numbers 0 (or by a lone process).
 */
#include "engine.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int run(int argc, char **argv);

const struct step_entry step_comm = {
	.name = "comm",
	.usage = "[--ops allreduce,allgather,reducescatter,alltoall,"
		 "broadcast,sendrecv] [--min 8] [--max 256M] [--factor 2] "
		 "[--iters 20] [--warmup 5] [--dtype f32|f64|i32] "
		 "[--group world|node|cross] [--pairs] [--pairs-size SIZE] "
		 "[--expect-gbps X] [--expect-fraction 0.8] [--json] "
		 "[--events] [--corrupt RANK]   (under mpirun -np N)",
	.summary = "collective bandwidth sweeps (nccl-tests columns), every "
		   "result checked; send/recv pair matrix",
	.help = "  --ops LIST         collectives to sweep (default all): allreduce,\n"
	"                     allgather,reducescatter,alltoall,broadcast,sendrecv\n"
	"  --min/--max SIZE   message sizes swept (default 8 to 256M), times --factor\n"
	"                     (default 2)\n"
	"  --iters N          timed iterations per size (default 20), after --warmup N\n"
	"                     (default 5)\n"
	"  --dtype D          f32, f64 or i32 (default f32); every result is checked\n"
	"  --group G          world, node (ranks of one host) or cross (one rank per\n"
	"                     host) (default world)\n"
	"  --pairs            the send/recv matrix between every pair of ranks, at\n"
	"                     --pairs-size (default --max)\n"
	"  --expect-gbps X    the link's speed: comm.bandwidth fails below\n"
	"                     X x --expect-fraction (default 0.8) bus bandwidth\n"
	"  --json, --events   one JSON document / day0 protocol events on stdout\n"
	"  --corrupt RANK     testing: that rank sends wrong data (must be caught)\n"
	"columns and semantics: docs/comm.md\n"
	"example: mpirun -np 8 day0-engine comm --max 1G --expect-gbps 400 --json",
	.run = run,
};

#define HOST_LEN 256
#define SENTINEL (-7777777) /* exact in f32; no expected value reaches it */
#define SLOWEST_SHOWN 3

/* ------------------------------------------------------------------ ops */

enum op {
	OP_ALLREDUCE,
	OP_ALLGATHER,
	OP_REDUCESCATTER,
	OP_ALLTOALL,
	OP_BROADCAST,
	OP_SENDRECV,
	OP_COUNT
};

static const struct op_desc {
	const char *name;
	const char *redop; /* "sum" or "none", as nccl-tests prints */
	int root;          /* -1: the op has none */
	int split;         /* the size is N blocks, one per rank */
} op_desc[OP_COUNT] = {
	[OP_ALLREDUCE] = {"allreduce", "sum", -1, 0},
	[OP_ALLGATHER] = {"allgather", "none", -1, 1},
	[OP_REDUCESCATTER] = {"reducescatter", "sum", -1, 1},
	[OP_ALLTOALL] = {"alltoall", "none", -1, 1},
	[OP_BROADCAST] = {"broadcast", "none", 0, 0},
	[OP_SENDRECV] = {"sendrecv", "none", -1, 0},
};

/*
 * busbw / algbw: the fraction of the data each rank's link carries for an
 * op on n ranks, so busbw is comparable with the link bandwidth whatever
 * n is (nccl-tests' PERFORMANCE.md).
 */
static double bus_factor(enum op op, int n)
{
	switch (op) {
	case OP_ALLREDUCE:
		return 2.0 * (n - 1) / n;
	case OP_ALLGATHER:
	case OP_REDUCESCATTER:
	case OP_ALLTOALL:
		return (double)(n - 1) / n;
	default:
		return 1.0;
	}
}

static int op_from_name(const char *s)
{
	for (int i = 0; i < OP_COUNT; i++)
		if (!strcmp(op_desc[i].name, s))
			return i;
	return -1;
}

/* --------------------------------------------------------------- dtypes */

enum comm_dtype { CD_F32, CD_F64, CD_I32, CD_COUNT };

static const struct {
	const char *user, *nccl; /* "f32", and the name nccl-tests prints */
	size_t size;
} dtype_desc[CD_COUNT] = {
	[CD_F32] = {"f32", "float", 4},
	[CD_F64] = {"f64", "double", 8},
	[CD_I32] = {"i32", "int32", 4},
};

static MPI_Datatype mpi_dtype(enum comm_dtype d)
{
	return d == CD_F32 ? MPI_FLOAT : d == CD_F64 ? MPI_DOUBLE : MPI_INT32_T;
}

/*
 * Test data.  Element i of rank r's input is elem_a(i) + rank_b(r):
 * elem_a in [-100, 100] varies along the buffer (a shifted or reordered
 * result shows), rank_b tells ranks apart.  Reductions use a small
 * rank_b (|sum| <= 115 n, exact in f32 up to ~145k ranks); pure data
 * movement a large one, distinct for 32768 ranks and still below 2^24.
 */
static inline int64_t elem_a(uint64_t i)
{
	return (int64_t)(((i * 0x9E3779B97F4A7C15ULL) >> 40) % 201) - 100;
}

static int64_t rank_b(int reduces, int r)
{
	return reduces ? (int64_t)(r % 31) - 15 : 256 * (int64_t)(r % 32768);
}

/* buf[k] = mul * elem_a(first + k) + add, for k < n. */
static void fill(enum comm_dtype d, void *buf, uint64_t first, uint64_t n,
		 int64_t mul, int64_t add)
{
#define FILL(T)                                                               \
	do {                                                                  \
		T *p = buf;                                                   \
		for (uint64_t k = 0; k < n; k++)                              \
			p[k] = (T)(mul * elem_a(first + k) + add);            \
	} while (0)
	switch (d) {
	case CD_F32: FILL(float); break;
	case CD_F64: FILL(double); break;
	default: FILL(int32_t); break;
	}
#undef FILL
}

static void fill_sentinel(enum comm_dtype d, void *buf, uint64_t n)
{
	fill(d, buf, 0, n, 0, SENTINEL);
}

/* How many of buf[k], k < n, differ from mul * elem_a(first + k) + add. */
static uint64_t count_wrong(enum comm_dtype d, const void *buf, uint64_t first,
			    uint64_t n, int64_t mul, int64_t add)
{
	uint64_t wrong = 0;
#define CHECK(T)                                                              \
	do {                                                                  \
		const T *p = buf;                                             \
		for (uint64_t k = 0; k < n; k++)                              \
			wrong += p[k] != (T)(mul * elem_a(first + k) + add);  \
	} while (0)
	switch (d) {
	case CD_F32: CHECK(float); break;
	case CD_F64: CHECK(double); break;
	default: CHECK(int32_t); break;
	}
#undef CHECK
	return wrong;
}

/* The --corrupt test aid: change element k of buf by one. */
static void nudge(enum comm_dtype d, void *buf, uint64_t k)
{
	switch (d) {
	case CD_F32: ((float *)buf)[k] += 1; break;
	case CD_F64: ((double *)buf)[k] += 1; break;
	default: ((int32_t *)buf)[k] ^= 1; break;
	}
}

/* ----------------------------------------------------------------- args */

struct opts {
	int ops[OP_COUNT], nops, ops_given;
	uint64_t min, max, pairs_size;
	long factor, iters, warmup;
	enum comm_dtype dtype;
	const char *group; /* "world", "node", "cross" */
	int pairs, json, events;
	double expect_gbps, expect_fraction; /* 0: no comm.bandwidth check */
	long corrupt;                        /* rank, or -1 */
};

/* Every rank's map of the world (hosts, cards, groups) and its own place. */
struct world {
	int rank, n;
	char *hosts; /* n x HOST_LEN */
	int *card, *host_index, *pid;
	int nhosts;
	/* group */
	MPI_Comm comm;
	int grank, gn, ngroups;
	int *group_of; /* world rank -> group index */
	int quiet;     /* rank != 0 */
};

static const char *host_of(const struct world *w, int r)
{
	return w->hosts + (size_t)r * HOST_LEN;
}

/* The rank mpirun gave this process, before MPI_Init; 0 when alone. */
static int launcher_rank(void)
{
	static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK",
					   "PMI_RANK"};
	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
		const char *v = getenv(vars[i]);
		if (v && *v)
			return atoi(v);
	}
	return 0;
}

static int usage_error(int quiet, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* step_usage_error, printed by rank 0 only. */
static int usage_error(int quiet, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	if (quiet)
		return EXIT_USAGE;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	return step_usage_error(&step_comm, "%s", buf);
}

static int parse_ops(const char *s, struct opts *o)
{
	char *copy = strdup(s), *tok, *save = NULL;
	int rc = 0;
	o->nops = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int op = op_from_name(tok);
		if (op < 0) {
			rc = -1;
			break;
		}
		for (int i = 0; i < o->nops; i++)
			if (o->ops[i] == op)
				op = -2;
		if (op >= 0)
			o->ops[o->nops++] = op;
	}
	free(copy);
	return rc;
}

/* The first unknown name in an --ops list (for the message); malloc'd. */
static char *first_unknown_op(const char *s)
{
	char *copy = strdup(s), *tok, *save = NULL, *bad = NULL;
	for (tok = strtok_r(copy, ",", &save); tok && !bad;
	     tok = strtok_r(NULL, ",", &save))
		if (op_from_name(tok) < 0)
			bad = strdup(tok);
	free(copy);
	return bad ? bad : strdup(s);
}

static int parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;
	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= min && v <= max))
		return -1;
	*out = v;
	return 0;
}

/* Parse argv into o; returns -1 after reporting (EXIT_USAGE), 1 for --help. */
static int parse_args(int argc, char **argv, struct opts *o, int quiet,
		      int *rc)
{
	static const struct option lo[] = {
		{"ops", 1, 0, 'o'},          {"min", 1, 0, 'b'},
		{"max", 1, 0, 'e'},          {"factor", 1, 0, 'f'},
		{"iters", 1, 0, 'n'},        {"warmup", 1, 0, 'w'},
		{"dtype", 1, 0, 'd'},        {"group", 1, 0, 'g'},
		{"pairs", 0, 0, 'p'},        {"pairs-size", 1, 0, 'P'},
		{"expect-gbps", 1, 0, 'x'},  {"expect-fraction", 1, 0, 'X'},
		{"json", 0, 0, 'j'},         {"events", 0, 0, 'E'},
		{"corrupt", 1, 0, 'C'},      {"help", 0, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *min_s = "8", *max_s = "256M", *dtype_s = "f32";
	int ch;

	memset(o, 0, sizeof *o);
	for (int i = 0; i < OP_COUNT; i++)
		o->ops[i] = i;
	o->nops = OP_COUNT;
	o->factor = 2;
	o->iters = 20;
	o->warmup = 5;
	o->group = "world";
	o->expect_fraction = 0.8;
	o->corrupt = -1;
	optind = 1;
	opterr = 0;
	*rc = EXIT_USAGE;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'o':
			o->ops_given = 1;
			if (parse_ops(optarg, o) < 0 || o->nops == 0) {
				char *bad = first_unknown_op(optarg);
				usage_error(quiet, "--ops: unknown op '%s' (known: "
					    "allreduce, allgather, "
					    "reducescatter, alltoall, "
					    "broadcast, sendrecv)", bad);
				free(bad);
				return -1;
			}
			break;
		case 'b': min_s = optarg; break;
		case 'e': max_s = optarg; break;
		case 'f':
			if (parse_long(optarg, 2, 1 << 20, &o->factor) < 0) {
				usage_error(quiet, "--factor: expected an "
					    "integer >= 2, got '%s'", optarg);
				return -1;
			}
			break;
		case 'n':
			if (parse_long(optarg, 1, 1000000, &o->iters) < 0) {
				usage_error(quiet, "--iters: expected an "
					    "integer 1..1000000, got '%s'",
					    optarg);
				return -1;
			}
			break;
		case 'w':
			if (parse_long(optarg, 0, 1000000, &o->warmup) < 0) {
				usage_error(quiet, "--warmup: expected an "
					    "integer 0..1000000, got '%s'",
					    optarg);
				return -1;
			}
			break;
		case 'd': dtype_s = optarg; break;
		case 'g':
			if (strcmp(optarg, "world") && strcmp(optarg, "node") &&
			    strcmp(optarg, "cross")) {
				usage_error(quiet, "--group: expected world, "
					    "node or cross, got '%s'", optarg);
				return -1;
			}
			o->group = optarg;
			break;
		case 'p': o->pairs = 1; break;
		case 'P':
			if (parse_size(optarg, &o->pairs_size) < 0 ||
			    !o->pairs_size) {
				usage_error(quiet, "--pairs-size: expected a "
					    "size such as 1M, got '%s'", optarg);
				return -1;
			}
			break;
		case 'x':
			if (parse_double(optarg, 1e-9, 1e9, &o->expect_gbps) <
			    0) {
				usage_error(quiet, "--expect-gbps: expected a "
					    "link bandwidth in GB/s > 0, got "
					    "'%s'", optarg);
				return -1;
			}
			break;
		case 'X':
			if (parse_double(optarg, 1e-9, 10, &o->expect_fraction) <
			    0) {
				usage_error(quiet, "--expect-fraction: expected "
					    "a fraction > 0 such as 0.8, got "
					    "'%s'", optarg);
				return -1;
			}
			break;
		case 'j': o->json = 1; break;
		case 'E': o->events = 1; break;
		case 'C':
			if (parse_long(optarg, 0, 1 << 30, &o->corrupt) < 0) {
				usage_error(quiet, "--corrupt: expected a rank, "
					    "got '%s'", optarg);
				return -1;
			}
			break;
		case 'h':
			if (!quiet) {
				step_help(&step_comm);
			}
			*rc = EXIT_OK;
			return 1;
		default:
			usage_error(quiet, "unknown or incomplete option '%s'",
				    argv[optind - 1]);
			return -1;
		}
	}
	if (optind != argc) {
		usage_error(quiet, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	if (o->pairs && !o->ops_given)
		o->nops = 0; /* --pairs alone: just the matrix */

	for (o->dtype = 0; o->dtype < CD_COUNT; o->dtype++)
		if (!strcmp(dtype_s, dtype_desc[o->dtype].user))
			break;
	if (o->dtype == CD_COUNT) {
		usage_error(quiet, "--dtype: expected f32, f64 or i32, got "
			    "'%s'", dtype_s);
		return -1;
	}
	size_t esz = dtype_desc[o->dtype].size;
	if (parse_size(min_s, &o->min) < 0 || !o->min) {
		usage_error(quiet, "--min: expected a size > 0 such as 8 or "
			    "64K, got '%s'", min_s);
		return -1;
	}
	if (parse_size(max_s, &o->max) < 0 || !o->max) {
		usage_error(quiet, "--max: expected a size > 0 such as 256M, "
			    "got '%s'", max_s);
		return -1;
	}
	if (o->min % esz || o->max % esz) {
		int bad_min = o->min % esz != 0;
		usage_error(quiet, "--%s: %llu B is not a multiple of the %s "
			    "element size (%zu B)", bad_min ? "min" : "max",
			    (unsigned long long)(bad_min ? o->min : o->max),
			    dtype_desc[o->dtype].user, esz);
		return -1;
	}
	if (o->min > o->max) {
		usage_error(quiet, "--min (%llu B) is larger than --max "
			    "(%llu B)", (unsigned long long)o->min,
			    (unsigned long long)o->max);
		return -1;
	}
	if (o->max / esz > INT32_MAX) {
		usage_error(quiet, "--max: %llu B is %llu %s elements; MPI "
			    "counts stop at %d", (unsigned long long)o->max,
			    (unsigned long long)(o->max / esz),
			    dtype_desc[o->dtype].user, INT32_MAX);
		return -1;
	}
	if (!o->pairs_size)
		o->pairs_size = o->max;
	if (o->pairs_size % esz || o->pairs_size / esz > INT32_MAX) {
		usage_error(quiet, "--pairs-size: %llu B is not a whole "
			    "number of %s elements below 2^31",
			    (unsigned long long)o->pairs_size,
			    dtype_desc[o->dtype].user);
		return -1;
	}
	*rc = EXIT_OK;
	return 0;
}

/* ------------------------------------------------------------ rank map */

/*
 * The host name this rank groups by.  DAY0_HOSTNAME_FROM_RANK=N (a test
 * and simulation aid) pretends ranks r sit on host "host<r / N>", so
 * node and cross groups can be exercised on one machine.
 */
static int rank_host(int rank, char *out, struct d0_err *err)
{
	const char *fake = getenv("DAY0_HOSTNAME_FROM_RANK");
	long per;
	if (fake && *fake) {
		if (parse_long(fake, 1, 1 << 30, &per) < 0)
			return d0_errf(err, "DAY0_HOSTNAME_FROM_RANK: expected "
				       "ranks per host (an integer >= 1), "
				       "got '%s'", fake);
		snprintf(out, HOST_LEN, "host%ld", rank / per);
		return 0;
	}
	if (gethostname(out, HOST_LEN - 1) < 0)
		snprintf(out, HOST_LEN, "localhost");
	out[HOST_LEN - 1] = 0;
	return 0;
}

/*
 * Gather every rank's host and pid; derive host indices (in order of first
 * appearance) and cards (local rank: position among the host's ranks).
 */
static int world_map(struct world *w, struct d0_err *err)
{
	char me[HOST_LEN] = {0};
	int pid = (int)getpid(), bad, any_bad;

	bad = rank_host(w->rank, me, err) < 0;
	MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any_bad)
		return bad ? -1
			   : d0_errf(err, "DAY0_HOSTNAME_FROM_RANK is not "
				     "valid on every rank");
	w->hosts = calloc((size_t)w->n, HOST_LEN);
	w->pid = calloc((size_t)w->n, sizeof *w->pid);
	w->card = calloc((size_t)w->n, sizeof *w->card);
	w->host_index = calloc((size_t)w->n, sizeof *w->host_index);
	w->group_of = calloc((size_t)w->n, sizeof *w->group_of);
	if (!w->hosts || !w->pid || !w->card || !w->host_index ||
	    !w->group_of)
		abort();
	MPI_Allgather(me, HOST_LEN, MPI_CHAR, w->hosts, HOST_LEN, MPI_CHAR,
		      MPI_COMM_WORLD);
	MPI_Allgather(&pid, 1, MPI_INT, w->pid, 1, MPI_INT, MPI_COMM_WORLD);
	w->nhosts = 0;
	for (int r = 0; r < w->n; r++) {
		int h = -1, card = 0;
		for (int q = 0; q < r; q++)
			if (!strcmp(host_of(w, q), host_of(w, r))) {
				h = w->host_index[q];
				card++;
			}
		w->host_index[r] = h >= 0 ? h : w->nhosts++;
		w->card[r] = card;
	}
	return 0;
}

/* Ranks on host h. */
static int host_ranks(const struct world *w, int h)
{
	int k = 0;
	for (int r = 0; r < w->n; r++)
		k += w->host_index[r] == h;
	return k;
}

/*
 * Split the world into the groups --group asks for.  node and cross need
 * the same number of ranks on every host (every group the same size, so
 * one row describes them all).
 */
static int world_groups(struct world *w, const char *group,
			struct d0_err *err)
{
	int color;
	if (strcmp(group, "world")) {
		int want = host_ranks(w, 0);
		for (int h = 1; h < w->nhosts; h++)
			if (host_ranks(w, h) != want) {
				int r0 = 0, rh = 0;
				for (int r = w->n - 1; r >= 0; r--) {
					if (w->host_index[r] == 0)
						r0 = r;
					if (w->host_index[r] == h)
						rh = r;
				}
				return d0_errf(err, "--group %s needs the same "
					       "number of ranks on every host: "
					       "%s has %d, %s has %d", group,
					       host_of(w, r0), want,
					       host_of(w, rh),
					       host_ranks(w, h));
			}
	}
	for (int r = 0; r < w->n; r++)
		w->group_of[r] = !strcmp(group, "node")    ? w->host_index[r]
				 : !strcmp(group, "cross") ? w->card[r]
							   : 0;
	w->ngroups = 0;
	for (int r = 0; r < w->n; r++)
		if (w->group_of[r] + 1 > w->ngroups)
			w->ngroups = w->group_of[r] + 1;
	color = w->group_of[w->rank];
	MPI_Comm_split(MPI_COMM_WORLD, color, w->rank, &w->comm);
	MPI_Comm_rank(w->comm, &w->grank);
	MPI_Comm_size(w->comm, &w->gn);
	return 0;
}

static void world_free(struct world *w)
{
	if (w->comm != MPI_COMM_NULL)
		MPI_Comm_free(&w->comm);
	free(w->hosts);
	free(w->pid);
	free(w->card);
	free(w->host_index);
	free(w->group_of);
}

/* --------------------------------------------------------------- sweeps */

struct bufs {
	void *send, *recv;
	size_t bytes; /* each */
};

/* One size of one op: the element layout and what it moves. */
struct shape {
	uint64_t per;   /* elements per block (split ops) or in the buffer */
	uint64_t bytes; /* the size column: the whole buffer */
};

/* nccl-tests' sizing: split ops round down to N equal blocks. */
static struct shape op_shape(enum op op, int n, uint64_t size, size_t esz)
{
	struct shape s;
	if (op_desc[op].split) {
		s.per = size / esz / (uint64_t)n;
		s.bytes = s.per * (uint64_t)n * esz;
	} else {
		s.per = size / esz;
		s.bytes = s.per * esz;
	}
	return s;
}

struct result {
	double time_us, algbw, busbw;
	double busbw_min, busbw_max; /* over the timed calls: the noise */
	double busbw_p50;            /* the median call's */
	uint64_t wrong;
};

struct row {
	uint64_t bytes;
	struct result r[2]; /* out-of-place, in-place */
};

struct sweep {
	const struct opts *o;
	struct world *w;
	struct bufs b;
	MPI_Datatype mdt;
	size_t esz;
};

static int next_rank(const struct sweep *s)
{
	return (s->w->grank + 1) % s->w->gn;
}

static int prev_rank(const struct sweep *s)
{
	return (s->w->grank + s->w->gn - 1) % s->w->gn;
}

/* One call of op on the group: the thing that is timed. */
static void op_call(const struct sweep *s, enum op op, int inplace,
		    uint64_t per)
{
	const struct world *w = s->w;
	int c = (int)per;
	void *send = inplace ? MPI_IN_PLACE : s->b.send, *recv = s->b.recv;
	MPI_Datatype dt = s->mdt;

	switch (op) {
	case OP_ALLREDUCE:
		MPI_Allreduce(send, recv, c, dt, MPI_SUM, w->comm);
		break;
	case OP_ALLGATHER:
		MPI_Allgather(send, inplace ? 0 : c,
			      inplace ? MPI_DATATYPE_NULL : dt, recv, c, dt,
			      w->comm);
		break;
	case OP_REDUCESCATTER:
		MPI_Reduce_scatter_block(send, recv, c, dt, MPI_SUM, w->comm);
		break;
	case OP_ALLTOALL:
		MPI_Alltoall(send, inplace ? 0 : c,
			     inplace ? MPI_DATATYPE_NULL : dt, recv, c, dt,
			     w->comm);
		break;
	case OP_BROADCAST:
		/* Out-of-place: the root sends from its send buffer. */
		MPI_Bcast(!inplace && w->grank == 0 ? s->b.send : recv, c, dt,
			  0, w->comm);
		break;
	case OP_SENDRECV:
		if (inplace)
			MPI_Sendrecv_replace(recv, c, dt, next_rank(s), 0,
					     prev_rank(s), 0, w->comm,
					     MPI_STATUS_IGNORE);
		else
			MPI_Sendrecv(s->b.send, c, dt, next_rank(s), 0, recv, c,
				     dt, prev_rank(s), 0, w->comm,
				     MPI_STATUS_IGNORE);
		break;
	default:
		break;
	}
}

static int64_t rank_sum_b(int n)
{
	int64_t sum = 0;
	for (int r = 0; r < n; r++)
		sum += rank_b(1, r);
	return sum;
}

/* Inputs for one call: this rank's data where the op reads it, sentinel in
 * every result element so nothing stale can pass the check. */
static void op_prepare(const struct sweep *s, enum op op, int inplace,
		       uint64_t per)
{
	enum comm_dtype d = s->o->dtype;
	int r = s->w->grank, n = s->w->gn;
	int reduces = !strcmp(op_desc[op].redop, "sum");
	uint64_t total = op_desc[op].split ? per * (uint64_t)n : per;
	void *in = inplace ? s->b.recv : s->b.send;
	int64_t b = rank_b(reduces, r);

	fill_sentinel(d, s->b.recv, total);
	switch (op) {
	case OP_ALLGATHER:
		if (inplace)
			fill(d, (char *)s->b.recv + (size_t)r * per * s->esz, 0,
			     per, 1, b);
		else
			fill(d, s->b.send, 0, per, 1, b);
		break;
	case OP_BROADCAST:
		if (r == 0)
			fill(d, in, 0, per, 1, b);
		break;
	default: /* allreduce, reducescatter, alltoall, sendrecv */
		fill(d, in, 0, total, 1, b);
		break;
	}
}

/* Where op leaves this rank's result, and how many elements it has. */
static void *op_result(const struct sweep *s, enum op op, int inplace,
		       uint64_t per, uint64_t *n_out)
{
	int n = s->w->gn;
	*n_out = op == OP_ALLGATHER || op == OP_ALLTOALL ? per * (uint64_t)n
							 : per;
	if (op == OP_BROADCAST && !inplace && s->w->grank == 0)
		return s->b.send; /* the root's data must come back untouched */
	return s->b.recv;
}

/* Compare this rank's result with the exact expected values. */
static uint64_t op_check(const struct sweep *s, enum op op, int inplace,
			 uint64_t per)
{
	enum comm_dtype d = s->o->dtype;
	int r = s->w->grank, n = s->w->gn;
	uint64_t wrong = 0, nres;
	char *res = op_result(s, op, inplace, per, &nres);
	size_t block = (size_t)per * s->esz;

	switch (op) {
	case OP_ALLREDUCE:
		return count_wrong(d, res, 0, per, n, rank_sum_b(n));
	case OP_REDUCESCATTER:
		return count_wrong(d, res, (uint64_t)r * per, per, n,
				   rank_sum_b(n));
	case OP_ALLGATHER:
		for (int q = 0; q < n; q++)
			wrong += count_wrong(d, res + q * block, 0, per, 1,
					     rank_b(0, q));
		return wrong;
	case OP_ALLTOALL:
		/* block q came from rank q's block r */
		for (int q = 0; q < n; q++)
			wrong += count_wrong(d, res + q * block,
					     (uint64_t)r * per, per, 1,
					     rank_b(0, q));
		return wrong;
	case OP_BROADCAST:
		return count_wrong(d, res, 0, per, 1, rank_b(0, 0));
	case OP_SENDRECV:
		return count_wrong(d, res, 0, per, 1, rank_b(0, prev_rank(s)));
	default:
		return 0;
	}
}

/*
 * Time one op at one size in one mode: warmup calls, then iters calls
 * between two clock reads after a world barrier (every group starts
 * together).  Returns the mean per-call time over all ranks, in seconds;
 * *lo and *hi get the fastest and slowest single call (each call's time
 * is the slowest rank's), the spread `day0 diff` weighs a change against.
 */
static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double op_time(const struct sweep *s, enum op op, int inplace,
		      uint64_t per, double *lo, double *hi, double *mid)
{
	double t, sum, *call = malloc((size_t)s->o->iters * sizeof *call);
	if (!call)
		abort();
	for (long i = 0; i < s->o->warmup; i++)
		op_call(s, op, inplace, per);
	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (long i = 0; i < s->o->iters; i++) {
		double c = MPI_Wtime();
		op_call(s, op, inplace, per);
		call[i] = MPI_Wtime() - c;
	}
	t = (MPI_Wtime() - t) / (double)s->o->iters;
	MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(MPI_IN_PLACE, call, (int)s->o->iters, MPI_DOUBLE,
		      MPI_MAX, MPI_COMM_WORLD);
	qsort(call, (size_t)s->o->iters, sizeof *call, cmp_dbl);
	*lo = call[0];
	*hi = call[s->o->iters - 1];
	*mid = s->o->iters % 2 ? call[s->o->iters / 2]
			       : (call[s->o->iters / 2 - 1] +
				  call[s->o->iters / 2]) / 2;
	free(call);
	return sum / s->w->n;
}

#define WRONG_LINES_MAX 20 /* per run; the counts are all in the tables */

/*
 * Collective, when some rank found wrong elements: rank 0 names every rank
 * with wrong elements in `what` (on stderr, and as an error log event), so
 * a bad card or link shows by rank, host and card.
 */
static void report_wrong(const struct world *w, const char *what,
			 uint64_t mine)
{
	static int lines;
	uint64_t *all = w->quiet ? NULL : calloc((size_t)w->n, sizeof *all);
	if (!w->quiet && !all)
		abort();
	MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0,
		   MPI_COMM_WORLD);
	for (int r = 0; !w->quiet && r < w->n; r++) {
		if (!all[r])
			continue;
		if (lines++ == WRONG_LINES_MAX)
			fprintf(stderr, "day0-engine comm: ... more wrong "
				"results (see the #wrong columns)\n");
		if (lines > WRONG_LINES_MAX)
			continue;
		fprintf(stderr, "day0-engine comm: %s: %llu wrong element%s "
			"on rank %d (%s card %d)\n", what,
			(unsigned long long)all[r], all[r] == 1 ? "" : "s", r,
			host_of(w, r), w->card[r]);
		events_log("error", "%s: %llu wrong element%s on rank %d "
			   "(%s card %d)", what, (unsigned long long)all[r],
			   all[r] == 1 ? "" : "s", r, host_of(w, r),
			   w->card[r]);
	}
	free(all);
}

/* Measure and check one mode; wrong is summed over all ranks. */
static void op_measure(const struct sweep *s, enum op op, int inplace,
		       struct shape sh, struct result *res)
{
	uint64_t wrong, total, nres;
	double sec, lo, hi, mid;

	op_prepare(s, op, inplace, sh.per);
	sec = op_time(s, op, inplace, sh.per, &lo, &hi, &mid);
	/* Timed calls may have overwritten inputs (in-place): start over. */
	op_prepare(s, op, inplace, sh.per);
	op_call(s, op, inplace, sh.per);
	if (s->o->corrupt == s->w->rank) {
		void *p = op_result(s, op, inplace, sh.per, &nres);
		nudge(s->o->dtype, p, nres / 2);
	}
	wrong = op_check(s, op, inplace, sh.per);
	MPI_Allreduce(&wrong, &total, 1, MPI_UINT64_T, MPI_SUM,
		      MPI_COMM_WORLD);
	if (total) {
		char what[96];
		snprintf(what, sizeof what, "%s %llu B %s", op_desc[op].name,
			 (unsigned long long)sh.bytes,
			 inplace ? "in-place" : "out-of-place");
		report_wrong(s->w, what, wrong);
	}
	res->time_us = sec * 1e6;
	res->algbw = sec > 0 ? (double)sh.bytes / 1e9 / sec : 0;
	res->busbw = res->algbw * bus_factor(op, s->w->gn);
	res->busbw_min = hi > 0 ? (double)sh.bytes / 1e9 / hi *
				      bus_factor(op, s->w->gn) : 0;
	res->busbw_max = lo > 0 ? (double)sh.bytes / 1e9 / lo *
				      bus_factor(op, s->w->gn) : 0;
	res->busbw_p50 = mid > 0 ? (double)sh.bytes / 1e9 / mid *
				       bus_factor(op, s->w->gn) : 0;
	res->wrong = total;
}

/*
 * A size's busbw spread for `day0 diff`: over every timed call of both
 * modes and the two modes' means.  The in-place calls come a moment after
 * the out-of-place ones (the same work for every op), so a machine whose
 * load changes over seconds shows it here, not only one burst's jitter.
 */
static double spread_lo(const struct row *rw)
{
	double v = rw->r[0].busbw_min;
	v = rw->r[1].busbw_min < v ? rw->r[1].busbw_min : v;
	v = rw->r[0].busbw < v ? rw->r[0].busbw : v;
	return rw->r[1].busbw < v ? rw->r[1].busbw : v;
}

static double spread_hi(const struct row *rw)
{
	double v = rw->r[0].busbw_max;
	v = rw->r[1].busbw_max > v ? rw->r[1].busbw_max : v;
	v = rw->r[0].busbw > v ? rw->r[0].busbw : v;
	return rw->r[1].busbw > v ? rw->r[1].busbw : v;
}

/* ------------------------------------------------------------- printing */

/* nccl-tests' time column: fewer decimals as it grows. */
static void fmt_time(double us, char *buf, size_t n)
{
	if (us >= 10000.0)
		snprintf(buf, n, "%7.0f", us);
	else if (us >= 100.0)
		snprintf(buf, n, "%7.1f", us);
	else
		snprintf(buf, n, "%7.2f", us);
}

static void print_rank_map(const struct world *w, const struct opts *o)
{
	printf("# day0 comm: %d rank%s on %d host%s, group %s (%d group%s of "
	       "%d), dtype %s, iters %ld, warmup %ld\n",
	       w->n, w->n == 1 ? "" : "s", w->nhosts, w->nhosts == 1 ? "" : "s",
	       o->group, w->ngroups, w->ngroups == 1 ? "" : "s",
	       w->n / w->ngroups, dtype_desc[o->dtype].user, o->iters,
	       o->warmup);
	printf("#\n# rank map\n#  %5s  %-24s %5s %9s %6s\n", "rank", "host",
	       "card", "pid", "group");
	for (int r = 0; r < w->n; r++)
		printf("#  %5d  %-24s %5d %9d %6d\n", r, host_of(w, r),
		       w->card[r], w->pid[r], w->group_of[r]);
	printf("#\n");
}

static void print_op_header(enum op op, const struct world *w,
			    const struct opts *o)
{
	printf("# %s: group %s, %d group%s of %d rank%s, running at once\n",
	       op_desc[op].name, o->group, w->ngroups,
	       w->ngroups == 1 ? "" : "s", w->gn, w->gn == 1 ? "" : "s");
	printf("#%61s%-35s%s\n", "", "out-of-place", "in-place");
	printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  "
	       "%6s  %6s\n",
	       "size", "count", "type", "redop", "root", "time", "algbw",
	       "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
	printf("#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  "
	       "%6s\n",
	       "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
	       "(us)", "(GB/s)", "(GB/s)");
}

static void print_row(enum op op, const struct opts *o, const struct row *rw)
{
	size_t esz = dtype_desc[o->dtype].size;
	printf("%12llu  %12llu  %8s  %6s  %6d", (unsigned long long)rw->bytes,
	       (unsigned long long)(rw->bytes / esz), dtype_desc[o->dtype].nccl,
	       op_desc[op].redop, op_desc[op].root);
	for (int m = 0; m < 2; m++) {
		char t[32];
		fmt_time(rw->r[m].time_us, t, sizeof t);
		printf("  %7s  %6.2f  %6.2f  %6llu", t, rw->r[m].algbw,
		       rw->r[m].busbw, (unsigned long long)rw->r[m].wrong);
	}
	printf("\n");
	fflush(stdout);
}

static json_t *result_json(const struct result *r)
{
	return json_pack("{s:f, s:f, s:f, s:I}", "time_us", r->time_us,
			 "algbw", r->algbw, "busbw", r->busbw, "wrong",
			 (json_int_t)r->wrong);
}

/* ------------------------------------------------------------ the sweep */

struct op_report {
	enum op op;
	struct row *rows;
	size_t nrows;
	uint64_t wrong;
	double avg_busbw;
};

/* The sizes min, min*factor, ... <= max. */
static size_t sweep_sizes(const struct opts *o, uint64_t **out)
{
	size_t n = 0;
	uint64_t *v = NULL;
	for (uint64_t sz = o->min; sz <= o->max;) {
		v = realloc(v, (n + 1) * sizeof *v);
		if (!v)
			abort();
		v[n++] = sz;
		if (sz > UINT64_MAX / (uint64_t)o->factor)
			break;
		sz *= (uint64_t)o->factor;
	}
	*out = v;
	return n;
}

/* Does op have at least one size that gives every rank an element? */
static int op_fits(enum op op, int n, const struct opts *o)
{
	size_t esz = dtype_desc[o->dtype].size;
	return op_shape(op, n, o->max, esz).per > 0;
}

static void run_op(struct sweep *s, enum op op, const uint64_t *sizes,
		   size_t nsizes, struct op_report *rep, size_t *done,
		   size_t total)
{
	const struct opts *o = s->o;
	const struct world *w = s->w;
	int print = !w->quiet && !o->json && !events_enabled();
	double bw = 0;
	int bw_n = 0;

	memset(rep, 0, sizeof *rep);
	rep->op = op;
	rep->rows = calloc(nsizes, sizeof *rep->rows);
	if (!rep->rows)
		abort();
	if (print)
		print_op_header(op, w, o);
	for (size_t i = 0; i < nsizes; i++) {
		struct shape sh = op_shape(op, w->gn, sizes[i], s->esz);
		struct row *rw = &rep->rows[rep->nrows];
		(*done)++;
		if (!sh.per)
			continue; /* fewer elements than ranks */
		rw->bytes = sh.bytes;
		op_measure(s, op, 0, sh, &rw->r[0]);
		op_measure(s, op, 1, sh, &rw->r[1]);
		rep->nrows++;
		for (int m = 0; m < 2; m++) {
			rep->wrong += rw->r[m].wrong;
			bw += rw->r[m].busbw;
			bw_n++;
		}
		if (print)
			print_row(op, o, rw);
		if (!w->quiet) {
			json_t *ev = json_pack(
				"{s:s, s:I, s:i, s:f, s:f, s:f, s:I, s:s, s:s, "
				"s:I, s:o, s:f, s:f, s:f}",
				"op", op_desc[op].name, "bytes",
				(json_int_t)rw->bytes, "ranks", w->gn,
				"time_us", rw->r[0].time_us, "algbw",
				rw->r[0].algbw, "busbw", rw->r[0].busbw,
				"wrong",
				(json_int_t)(rw->r[0].wrong + rw->r[1].wrong),
				"group", o->group, "dtype",
				dtype_desc[o->dtype].user, "count",
				(json_int_t)(rw->bytes / s->esz), "in_place",
				result_json(&rw->r[1]), "busbw_min",
				spread_lo(rw), "busbw_max", spread_hi(rw),
				"busbw_p50", rw->r[0].busbw_p50);
			events_emit("comm", ev);
			events_stage("comm", "progress",
				     (double)*done / (double)total, 0,
				     op_desc[op].name);
		}
	}
	rep->avg_busbw = bw_n ? bw / bw_n : 0;
	if (print) {
		printf("# Out of bounds values : %llu %s\n",
		       (unsigned long long)rep->wrong,
		       rep->wrong ? "FAILED" : "OK");
		printf("# Avg bus bandwidth    : %g\n#\n", rep->avg_busbw);
		fflush(stdout);
	}
}

/* -------------------------------------------------------------- pairs */

struct pairs_report {
	double *gbps; /* n x n, row = sender; diagonal unused */
	uint64_t *bad; /* n x n wrong elements per pair (rank 0), or NULL */
	uint64_t wrong;
	uint64_t bytes;
};

/*
 * Send/recv bandwidth of every ordered pair (i -> j), one pair at a time
 * while the others wait: i sends `iters` messages, j acknowledges the last
 * with an empty one, i's clock covers it all.  j checks the last message.
 */
static void run_pairs(struct sweep *s, struct pairs_report *pr)
{
	const struct opts *o = s->o;
	int n = s->w->n, me = s->w->rank;
	uint64_t per = o->pairs_size / s->esz;
	int c = (int)per;
	size_t nn = (size_t)n * (size_t)n;
	double *row = calloc(nn, sizeof *row);
	uint64_t *bad = calloc(nn, sizeof *bad), *bad_all = NULL;
	char ack = 0;

	pr->bytes = per * s->esz;
	pr->gbps = calloc(nn, sizeof *pr->gbps);
	if (!s->w->quiet)
		bad_all = calloc(nn, sizeof *bad_all);
	if (!row || !bad || !pr->gbps || (!s->w->quiet && !bad_all))
		abort();
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			if (i == j)
				continue;
			MPI_Barrier(MPI_COMM_WORLD);
			if (me == i) {
				double t = 0;
				fill(o->dtype, s->b.send, 0, per, 1,
				     rank_b(0, i));
				for (long k = -o->warmup; k < o->iters; k++) {
					if (k == 0)
						t = MPI_Wtime();
					MPI_Send(s->b.send, c, s->mdt, j, 1,
						 MPI_COMM_WORLD);
				}
				MPI_Recv(&ack, 0, MPI_CHAR, j, 2,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				t = MPI_Wtime() - t;
				row[i * n + j] = t > 0 ? (double)pr->bytes *
							  (double)o->iters /
							  t / 1e9
						       : 0;
			} else if (me == j) {
				fill_sentinel(o->dtype, s->b.recv, per);
				for (long k = -o->warmup; k < o->iters; k++)
					MPI_Recv(s->b.recv, c, s->mdt, i, 1,
						 MPI_COMM_WORLD,
						 MPI_STATUS_IGNORE);
				MPI_Send(&ack, 0, MPI_CHAR, i, 2,
					 MPI_COMM_WORLD);
				if (o->corrupt == me)
					nudge(o->dtype, s->b.recv, per / 2);
				bad[i * n + j] = count_wrong(o->dtype,
							     s->b.recv, 0, per,
							     1, rank_b(0, i));
			}
		}
	MPI_Allreduce(row, pr->gbps, n * n, MPI_DOUBLE, MPI_SUM,
		      MPI_COMM_WORLD);
	MPI_Reduce(bad, bad_all, n * n, MPI_UINT64_T, MPI_SUM, 0,
		   MPI_COMM_WORLD);
	pr->wrong = 0;
	for (size_t k = 0; bad_all && k < nn; k++)
		pr->wrong += bad_all[k];
	/* Every rank returns the same status: share the total. */
	MPI_Bcast(&pr->wrong, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
	for (int i = 0; bad_all && i < n; i++)
		for (int j = 0; j < n; j++)
			if (bad_all[i * n + j]) {
				fprintf(stderr, "day0-engine comm: pair %d -> %d "
					"(%s card %d -> %s card %d): %llu wrong "
					"element%s received\n", i, j,
					host_of(s->w, i), s->w->card[i],
					host_of(s->w, j), s->w->card[j],
					(unsigned long long)bad_all[i * n + j],
					bad_all[i * n + j] == 1 ? "" : "s");
				events_log("error", "pair %d -> %d: %llu wrong "
					   "elements received", i, j,
					   (unsigned long long)bad_all[i * n + j]);
			}
	free(row);
	free(bad);
	pr->bad = bad_all; /* the per-pair counts, for the events */
}

struct pair {
	int from, to;
	double gbps;
};

static int pair_cmp(const void *a, const void *b)
{
	double x = ((const struct pair *)a)->gbps;
	double y = ((const struct pair *)b)->gbps;
	return x < y ? -1 : x > y;
}

/* Every ordered pair, slowest first; returns the count (n * (n - 1)). */
static size_t pairs_sorted(const struct pairs_report *pr, int n,
			   struct pair **out)
{
	size_t k = 0;
	struct pair *p = calloc((size_t)n * (size_t)n + 1, sizeof *p);
	if (!p)
		abort();
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			if (i != j)
				p[k++] = (struct pair){i, j, pr->gbps[i * n + j]};
	qsort(p, k, sizeof *p, pair_cmp);
	*out = p;
	return k;
}

static double pairs_median(const struct pair *p, size_t k)
{
	if (!k)
		return 0;
	return k % 2 ? p[k / 2].gbps : (p[k / 2 - 1].gbps + p[k / 2].gbps) / 2;
}

static void print_pairs(const struct world *w, const struct opts *o,
			const struct pairs_report *pr)
{
	int n = w->n;
	struct pair *p;
	size_t k = pairs_sorted(pr, n, &p);
	double med = pairs_median(p, k);

	printf("# send/recv bandwidth of every ordered pair (GB/s), %llu B x "
	       "%ld iters; row sends, column receives\n",
	       (unsigned long long)pr->bytes, o->iters);
	printf("# %7s", "from\\to");
	for (int j = 0; j < n; j++)
		printf(" %7d", j);
	printf("\n");
	for (int i = 0; i < n; i++) {
		printf("  %7d", i);
		for (int j = 0; j < n; j++) {
			if (i == j)
				printf(" %7s", "-");
			else
				/* significant digits: a slow pair on a
				 * busy machine is not 0.00 */
				printf(" %7.3g", pr->gbps[i * n + j]);
		}
		printf("\n");
	}
	printf("# slowest pairs (median %.3g GB/s):\n", med);
	for (size_t i = 0; i < k && i < SLOWEST_SHOWN; i++)
		printf("#   %d -> %d  (%s card %d -> %s card %d)  %.3g GB/s  "
		       "%.2fx median\n",
		       p[i].from, p[i].to, host_of(w, p[i].from),
		       w->card[p[i].from], host_of(w, p[i].to),
		       w->card[p[i].to], p[i].gbps,
		       med > 0 ? p[i].gbps / med : 0);
	printf("# Out of bounds values : %llu %s\n#\n",
	       (unsigned long long)pr->wrong, pr->wrong ? "FAILED" : "OK");
	free(p);
}

static json_t *pairs_json(const struct world *w, const struct opts *o,
			  const struct pairs_report *pr)
{
	int n = w->n;
	struct pair *p;
	size_t k = pairs_sorted(pr, n, &p);
	json_t *m = json_array(), *slow = json_array();
	for (int i = 0; i < n; i++) {
		json_t *row = json_array();
		for (int j = 0; j < n; j++)
			json_array_append_new(row, i == j ? json_null()
						      : json_real(pr->gbps[i * n + j]));
		json_array_append_new(m, row);
	}
	for (size_t i = 0; i < k && i < SLOWEST_SHOWN; i++)
		json_array_append_new(
			slow, json_pack("{s:i, s:i, s:s, s:i, s:s, s:i, s:f}",
					"from", p[i].from, "to", p[i].to,
					"from_host", host_of(w, p[i].from),
					"from_card", w->card[p[i].from],
					"to_host", host_of(w, p[i].to),
					"to_card", w->card[p[i].to], "gbps",
					p[i].gbps));
	json_t *doc = json_pack("{s:I, s:i, s:o, s:f, s:o, s:I}", "bytes",
				(json_int_t)pr->bytes, "iters", (int)o->iters,
				"gbps", m, "median_gbps", pairs_median(p, k),
				"slowest", slow, "wrong",
				(json_int_t)pr->wrong);
	free(p);
	return doc;
}

/* ---------------------------------------------------- comm.bandwidth */

struct bw_check {
	const char *status; /* pass, warn, fail, skip */
	char detail[512];
	double value, threshold;
};

/*
 * comm.bandwidth: the busbw at the largest size of every op (and the
 * slowest pair) against --expect-fraction x --expect-gbps.  Wrong results
 * fail it: a bandwidth from a broken collective means nothing.
 */
static void bandwidth_check(const struct opts *o, const struct op_report *reps,
			    int nreps, const struct pairs_report *pr, int n,
			    uint64_t wrong, struct bw_check *c)
{
	const char *worst = NULL;
	double low = INFINITY;
	uint64_t at = 0;

	for (int i = 0; i < nreps; i++) {
		const struct op_report *r = &reps[i];
		if (!r->nrows)
			continue;
		const struct row *last = &r->rows[r->nrows - 1];
		if (last->r[0].busbw < low) {
			low = last->r[0].busbw;
			worst = op_desc[r->op].name;
			at = last->bytes;
		}
	}
	if (o->pairs && n > 1) {
		struct pair *p;
		size_t k = pairs_sorted(pr, n, &p);
		if (k && p[0].gbps < low) {
			low = p[0].gbps;
			worst = "slowest send/recv pair";
			at = pr->bytes;
		}
		free(p);
	}
	c->value = isfinite(low) ? low : 0;
	c->threshold = o->expect_fraction * o->expect_gbps;
	if (wrong) {
		c->status = "fail";
		snprintf(c->detail, sizeof c->detail,
			 "%llu wrong result elements: bandwidth not trusted",
			 (unsigned long long)wrong);
	} else if (!o->expect_gbps) {
		c->status = "skip";
		snprintf(c->detail, sizeof c->detail,
			 "no --expect-gbps (link bandwidth) to compare with");
	} else if (!worst) {
		c->status = "skip";
		snprintf(c->detail, sizeof c->detail, "nothing measured");
	} else {
		c->status = c->value >= c->threshold ? "pass" : "warn";
		snprintf(c->detail, sizeof c->detail,
			 "lowest: %s busbw %.3g GB/s at %llu B; needs %g GB/s "
			 "(%.2f of the %g GB/s link)",
			 worst, c->value, (unsigned long long)at, c->threshold,
			 o->expect_fraction, o->expect_gbps);
	}
}

/* ------------------------------------------------------------------ run */

static json_t *world_json(const struct world *w)
{
	json_t *map = json_array();
	for (int r = 0; r < w->n; r++)
		json_array_append_new(
			map, json_pack("{s:i, s:s, s:i, s:i, s:i}", "rank", r,
				       "host", host_of(w, r), "card", w->card[r],
				       "pid", w->pid[r], "group",
				       w->group_of[r]));
	return map;
}

static json_t *groups_json(const struct world *w)
{
	json_t *g = json_array();
	for (int k = 0; k < w->ngroups; k++) {
		json_t *m = json_array();
		for (int r = 0; r < w->n; r++)
			if (w->group_of[r] == k)
				json_array_append_new(m, json_integer(r));
		json_array_append_new(g, m);
	}
	return g;
}

/* The --json document: everything the text shows, unrounded. */
static json_t *report_json(const struct world *w, const struct opts *o,
			   const struct op_report *reps,
			   const struct pairs_report *pr,
			   const struct bw_check *bc, uint64_t wrong)
{
	size_t esz = dtype_desc[o->dtype].size;
	json_t *ops = json_array(), *doc;

	for (int i = 0; i < o->nops; i++) {
		const struct op_report *r = &reps[i];
		json_t *rows = json_array();
		for (size_t k = 0; k < r->nrows; k++) {
			const struct row *rw = &r->rows[k];
			json_array_append_new(
				rows, json_pack("{s:I, s:I, s:o, s:o}", "bytes",
						(json_int_t)rw->bytes, "count",
						(json_int_t)(rw->bytes / esz),
						"out_of_place",
						result_json(&rw->r[0]), "in_place",
						result_json(&rw->r[1])));
		}
		json_array_append_new(
			ops,
			json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:I, s:f, "
				  "s:o}",
				  "op", op_desc[r->op].name, "redop",
				  op_desc[r->op].redop, "root",
				  op_desc[r->op].root, "ranks", w->gn,
				  "bus_factor", bus_factor(r->op, w->gn),
				  "avg_busbw", r->avg_busbw, "wrong",
				  (json_int_t)r->wrong, "largest_busbw",
				  r->nrows ? r->rows[r->nrows - 1].r[0].busbw
					   : 0.0,
				  "rows", rows));
	}
	doc = json_pack("{s:i, s:i, s:s, s:i, s:i, s:s, s:s, s:i, s:i, s:o, "
			"s:o, s:o}",
			"ranks", w->n, "hosts", w->nhosts, "group", o->group,
			"groups", w->ngroups, "group_ranks", w->gn, "dtype",
			dtype_desc[o->dtype].user, "type",
			dtype_desc[o->dtype].nccl, "iters", (int)o->iters,
			"warmup", (int)o->warmup, "rank_map", world_json(w),
			"group_members", groups_json(w), "ops", ops);
	if (o->pairs)
		json_object_set_new(doc, "pairs", pairs_json(w, o, pr));
	json_object_set_new(doc, "comm.bandwidth",
			    json_pack("{s:s, s:s, s:f, s:f}", "status",
				      bc->status, "detail", bc->detail, "value",
				      bc->value, "threshold", bc->threshold));
	json_object_set_new(doc, "wrong", json_integer((json_int_t)wrong));
	json_object_set_new(doc, "ok", json_boolean(!wrong));
	return doc;
}

/* Collective: do all ranks succeed?  Rank 0 prints the first failure. */
static int all_ok(const struct world *w, int ok, const char *what,
		  const char *msg)
{
	int all;
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!all && !ok)
		fprintf(stderr, "day0-engine comm: rank %d (%s): %s%s%s\n",
			w->rank, host_of(w, w->rank), what, msg ? ": " : "",
			msg ? msg : "");
	return all;
}

/*
 * Two buffers for the largest size any op or pair uses, every page touched
 * now rather than inside the first timed call.  Collective: -1 on every
 * rank when one cannot allocate.  Plain malloc, as applications allocate:
 * page-aligned buffers measured up to ~20% slower at 32 MiB here (Open
 * MPI's reduction temporaries are malloc'd, and equal offsets within a
 * page alias in the cache).
 */
static int bufs_alloc(struct sweep *s)
{
	const struct opts *o = s->o;
	char msg[128];
	int ok;

	s->b.bytes = (size_t)(o->nops ? o->max : 0);
	if (o->pairs && o->pairs_size > s->b.bytes)
		s->b.bytes = (size_t)o->pairs_size;
	if (s->b.bytes < s->esz)
		s->b.bytes = s->esz;
	ok = (s->b.send = malloc(s->b.bytes)) != NULL &&
	     (s->b.recv = malloc(s->b.bytes)) != NULL;
	snprintf(msg, sizeof msg, "cannot allocate 2 x %llu B buffers",
		 (unsigned long long)s->b.bytes);
	if (!all_ok(s->w, ok, "out of memory", msg))
		return -1;
	memset(s->b.send, 0, s->b.bytes);
	memset(s->b.recv, 0, s->b.bytes);
	return 0;
}

/* Checks that need the world size; usage errors (exit 2) otherwise. */
static int check_world_args(const struct world *w, const struct opts *o)
{
	size_t esz = dtype_desc[o->dtype].size;
	if (o->corrupt >= w->n)
		return usage_error(w->quiet, "--corrupt: rank %ld, but the "
				   "world has %d rank%s", o->corrupt, w->n,
				   w->n == 1 ? "" : "s");
	if (o->pairs && w->n < 2)
		return usage_error(w->quiet, "--pairs needs at least 2 ranks "
				   "(run under mpirun -np N, N >= 2)");
	for (int i = 0; i < o->nops; i++) {
		enum op op = o->ops[i];
		if (!op_fits(op, w->gn, o))
			return usage_error(
				w->quiet, "%s: %d ranks per group need at "
				"least %llu B per size (one %s element "
				"each); --max is %llu B",
				op_desc[op].name, w->gn,
				(unsigned long long)((uint64_t)w->gn * esz),
				dtype_desc[o->dtype].user,
				(unsigned long long)o->max);
	}
	return EXIT_OK;
}

static int run(int argc, char **argv)
{
	struct opts o;
	struct world w = {.comm = MPI_COMM_NULL};
	struct sweep s = {0};
	struct d0_err err;
	struct op_report reps[OP_COUNT];
	struct pairs_report pr = {0};
	struct bw_check bc;
	uint64_t *sizes = NULL, wrong = 0;
	size_t nsizes, done = 0;
	int rc, quiet = launcher_rank() != 0;

	if (parse_args(argc, argv, &o, quiet, &rc) != 0)
		return rc;

	MPI_Init(NULL, NULL);
	MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &w.n);
	w.quiet = w.rank != 0;
	events_init(stdout, o.events && !o.json && !w.quiet);

	if (world_map(&w, &err) < 0 || world_groups(&w, o.group, &err) < 0) {
		if (!w.quiet)
			fprintf(stderr, "day0-engine comm: %s\n", err.msg);
		rc = EXIT_USAGE;
		goto out;
	}
	if ((rc = check_world_args(&w, &o)) != EXIT_OK)
		goto out;

	s.o = &o;
	s.w = &w;
	s.esz = dtype_desc[o.dtype].size;
	s.mdt = mpi_dtype(o.dtype);
	if (bufs_alloc(&s) < 0) {
		rc = EXIT_USAGE;
		goto out;
	}
	nsizes = sweep_sizes(&o, &sizes);
	if (!w.quiet) {
		char detail[256];
		events_stage("comm", "start", 0, 0, o.group);
		snprintf(detail, sizeof detail,
			 "%d rank%s on %d host%s: %d %s group%s of %d", w.n,
			 w.n == 1 ? "" : "s", w.nhosts,
			 w.nhosts == 1 ? "" : "s", w.ngroups, o.group,
			 w.ngroups == 1 ? "" : "s", w.gn);
		events_check("comm.groups", "pass", detail,
			     json_integer(w.ngroups), NULL);
		if (!o.json && !events_enabled())
			print_rank_map(&w, &o);
	}
	for (int i = 0; i < o.nops; i++) {
		run_op(&s, o.ops[i], sizes, nsizes, &reps[i], &done,
		       (size_t)o.nops * nsizes);
		wrong += reps[i].wrong;
	}
	if (o.pairs) {
		run_pairs(&s, &pr);
		wrong += pr.wrong;
		if (!w.quiet && !o.json && !events_enabled())
			print_pairs(&w, &o, &pr);
		if (!w.quiet && events_enabled()) {
			struct pair *p;
			size_t k = pairs_sorted(&pr, w.n, &p);
			/* Every ordered pair as a comm event (the console's
			 * heat map): group "pairs", from -> to. */
			for (int i = 0; i < w.n; i++)
				for (int j = 0; j < w.n; j++) {
					double g = pr.gbps[i * w.n + j];
					if (i == j)
						continue;
					events_emit(
					    "comm",
					    json_pack(
						"{s:s, s:I, s:i, s:f, s:f, s:f, "
						"s:I, s:s, s:i, s:i}",
						"op", "sendrecv", "bytes",
						(json_int_t)pr.bytes, "ranks", 2,
						"time_us",
						g > 0 ? (double)pr.bytes / (g * 1e3)
						      : 0.0,
						"algbw", g, "busbw", g, "wrong",
						(json_int_t)(pr.bad
								 ? pr.bad[i * w.n + j]
								 : 0),
						"group", "pairs", "from", i, "to",
						j));
				}
			events_log("info", "slowest send/recv pair: %d -> %d "
				   "(%s card %d -> %s card %d) %.2f GB/s, "
				   "median %.2f GB/s", p[0].from, p[0].to,
				   host_of(&w, p[0].from), w.card[p[0].from],
				   host_of(&w, p[0].to), w.card[p[0].to],
				   p[0].gbps, pairs_median(p, k));
			free(p);
		}
	}
	rc = wrong ? EXIT_CHECK_FAILED : EXIT_OK;
	bandwidth_check(&o, reps, o.nops, &pr, w.n, wrong, &bc);

	if (!w.quiet) {
		events_check("comm.bandwidth", bc.status, bc.detail,
			     json_real(bc.value), json_real(bc.threshold));
		events_stage("comm", "end", 1, rc,
			     wrong ? "wrong results" : "ok");
		if (o.json) {
			json_t *doc = report_json(&w, &o, reps, &pr, &bc, wrong);
			json_dumpf(doc, stdout,
				   JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			putchar('\n');
			json_decref(doc);
		} else if (!events_enabled()) {
			if (o.expect_gbps)
				printf("# comm.bandwidth: %s: %s\n", bc.status,
				       bc.detail);
			printf("# %s: %llu wrong element%s\n",
			       wrong ? "FAILED" : "OK",
			       (unsigned long long)wrong,
			       wrong == 1 ? "" : "s");
		}
		fflush(stdout);
	}
	for (int i = 0; i < o.nops; i++)
		free(reps[i].rows);
	free(pr.gbps);
	free(pr.bad);
	free(sizes);
out:
	free(s.b.send);
	free(s.b.recv);
	world_free(&w);
	MPI_Finalize();
	return rc;
}
