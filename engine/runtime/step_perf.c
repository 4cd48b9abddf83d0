/*
 * step_perf.c - `mpirun -np N day0-engine perf`: the performance baseline
 * of a layout: time to first token (prefill of --prompt-tokens and the
 * first greedy pick), time per output token over --gen-tokens decode
 * steps, tokens/s, and the share of step time spent in collectives (the
 * runtime times its own).  Recorded as a `perf` event and the
 * `perf.baseline` check for the console to compare across sessions.
 */
#include "engine.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <mpi.h>

static int run(int argc, char **argv);

const struct step_entry step_perf = {
	.name = "perf",
	.usage = "(MODEL_DIR | CONVERTED_DIR) [--tp T] [--pp P] [--ep E] "
		 "(--prompt-tokens N | " PROMPT_USAGE ") --gen-tokens K "
		 "[--repeat R] [--card-mem BYTES] [--json] [--events]  (under "
		 "mpirun -np T*P*E)\n"
		 "  --tp/--pp/--ep     the layout (default 1 each)\n"
		 "  --prompt-tokens N  a prompt of N deterministic pseudo-random "
		 "ids, or the prompt as --tokens, --prompt or --prompt-file\n"
		 "  --gen-tokens K     decode steps timed for TPOT\n"
		 "  --repeat R         measure R times (default 3): medians, "
		 "with min and max as the spread\n"
		 "  --card-mem BYTES   the per-card budget\n"
		 "  --json             one JSON document on stdout\n"
		 "example: mpirun -np 2 day0-engine perf /models/m --tp 2 "
		 "--prompt-tokens 128 --gen-tokens 32",
	.summary = "TTFT, TPOT, tokens/s and communication share of a layout",
	.run = run,
};

static double comm_seconds(const struct rt *r)
{
	const struct rt_stats *s = rt_stats(r);
	double t = 0;
	for (int g = 0; g < RT_GROUPS; g++)
		for (int o = 0; o < RT_OPS; o++)
			t += s->time_s[g][o];
	return t;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* of sorted v */
static double median(const double *v, long n)
{
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		LAYOUT_LONG_OPTS, CARD_MEM_LONG_OPT, PROMPT_LONG_OPTS,
		{"prompt-tokens", 1, 0, 'n'}, {"gen-tokens", 1, 0, 'g'},
		{"repeat", 1, 0, 'R'},
		{"json", 0, 0, 'j'},
		{"events", 0, 0, 'E'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_perf;
	struct layout_opts lay;
	char why[sizeof ((struct d0_err *)0)->msg];
	struct rt *r = NULL;
	struct d0_err err;
	long np = 0, ng = 0, nrep = 3;
	int ch, rank, json = 0, events = 0, rc = 0, bad = 0, last, V;
	int64_t *toks, *gen = NULL, next = 0;
	float *logits;
	json_t *spread = NULL, *kern = NULL;
	double t0, ttft, tdec, comm_prefill, comm_all, tall;
	double *m_ttft = NULL, *m_tpot = NULL, *m_tps = NULL;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	layout_opts_init(&lay);
	why[0] = 0;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int took = layout_opts_take(&lay, ch, optarg, why, sizeof why);
		if (took) {
			bad |= took < 0;
			continue;
		}
		switch (ch) {
		case 'n': bad |= parse_long(optarg, 1, 1 << 20, &np) < 0; break;
		case 'g': bad |= parse_long(optarg, 1, 1 << 20, &ng) < 0; break;
		case 'R':
			if (parse_long(optarg, 1, 1000, &nrep) < 0) {
				snprintf(why, sizeof why, "--repeat: expected a "
					 "count from 1 to 1000, got '%s'", optarg);
				bad = 1;
			}
			break;
		case 'j': json = 1; break;
		case 'E': events = 1; break;
		case 'h':
			if (!rank)
				step_help(S);
			MPI_Finalize();
			return EXIT_OK;
		default: bad = 1;
		}
	}
	if (!bad && optind == argc - 1 && !np && layout_opts_has_prompt(&lay)) {
		if (layout_opts_prompt(&lay, argv[optind], &err) < 0) {
			snprintf(why, sizeof why, "%s", err.msg);
			bad = 1;
		}
		np = lay.ntok;
	} else if (np && layout_opts_has_prompt(&lay)) {
		snprintf(why, sizeof why, "--prompt-tokens excludes --tokens, "
			 "--prompt and --prompt-file");
		bad = 1;
	}
	if (bad || optind != argc - 1 || !np || !ng) {
		if (!rank)
			step_usage_error(S, "%s", why[0] ? why
					 : "expected MODEL_DIR, a prompt "
					   "(--prompt-tokens N or --tokens/"
					   "--prompt) and --gen-tokens K");
		layout_opts_free(&lay);
		MPI_Finalize();
		return EXIT_USAGE;
	}
	events_init(stdout, events && !json);
	if (rt_open(&r, argv[optind], &lay.d, lay.card_mem, np + ng, &err) < 0)
		rc = -1;
	MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (rc < 0 || rt_over_budget(r)) {
		if (rt_peer_failed(r))
			; /* the failing rank says why */
		else if (err.msg[0] && rc < 0)
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
		else if (rt_over_budget(r))
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, rt_over_budget(r));
		rt_close(r);
		layout_opts_free(&lay);
		MPI_Finalize();
		return rc < 0 ? EXIT_USAGE : EXIT_CHECK_FAILED;
	}
	V = (int)rt_config(r)->vocab;
	last = rt_last_stage_root(r);
	toks = malloc((size_t)np * sizeof *toks);
	if (lay.tokens) {
		for (long i = 0; i < np; i++) {
			if (lay.tokens[i] >= V) {
				if (!rank)
					fprintf(stderr, "day0-engine: --tokens: id %lld "
						"is outside the vocabulary (%d)\n",
						(long long)lay.tokens[i], V);
				free(toks);
				rt_close(r);
				layout_opts_free(&lay);
				MPI_Finalize();
				return EXIT_USAGE;
			}
			toks[i] = lay.tokens[i];
		}
	} else {
		struct rng g;
		rng_seed(&g, 17);
		for (long i = 0; i < np; i++)
			toks[i] = (int64_t)(rng_next(&g) % (uint64_t)V);
	}
	logits = malloc((size_t)V * 4);
	gen = calloc((size_t)ng, sizeof *gen); /* the first repeat's tokens */
	m_ttft = calloc((size_t)nrep, sizeof *m_ttft);
	m_tpot = calloc((size_t)nrep, sizeof *m_tpot);
	m_tps = calloc((size_t)nrep, sizeof *m_tps);
	if (!logits || !gen || !m_ttft || !m_tpot || !m_tps)
		abort();
	comm_prefill = comm_all = tall = 0;
	for (long rep = 0; rep < nrep && rc == 0; rep++) {
		double c0 = comm_seconds(r);
		if (rep)
			rt_reset(r);
		tdec = 0;
		next = 0;
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = MPI_Wtime();
		/* as a server prefills: the lm_head for the last position only */
		rc = rt_forward_last(r, toks, (int)np, logits, &err);
		if (rank == last)
			for (int i = 1; i < V; i++)
				if (logits[i] > logits[next])
					next = i;
		MPI_Bcast(&next, 1, MPI_INT64_T, last, MPI_COMM_WORLD);
		ttft = MPI_Wtime() - t0;
		if (rep == 0)
			gen[0] = next;
		comm_prefill += comm_seconds(r) - c0;
		for (long g = 1; g < ng && rc == 0; g++) {
			double t1 = MPI_Wtime();
			rc = rt_forward(r, &next, 1, logits, NULL, &err);
			if (rank == last) {
				int64_t best = 0;
				for (int i = 1; i < V; i++)
					if (logits[i] > logits[best])
						best = i;
				next = best;
			}
			MPI_Bcast(&next, 1, MPI_INT64_T, last, MPI_COMM_WORLD);
			tdec += MPI_Wtime() - t1;
			if (rep == 0)
				gen[g] = next;
		}
		tall += MPI_Wtime() - t0;
		comm_all += comm_seconds(r) - c0;
		m_ttft[rep] = ttft * 1e3;
		m_tpot[rep] = ng > 1 ? tdec / (double)(ng - 1) * 1e3 : 0;
		m_tps[rep] = tdec > 0 ? (double)(ng - 1) / tdec : 0;
	}
	/* the slowest rank's view is the layout's */
	MPI_Allreduce(MPI_IN_PLACE, &comm_all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	MPI_Allreduce(MPI_IN_PLACE, &comm_prefill, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	{
		double mn[3], mx[3];
		double *m[3] = {m_ttft, m_tpot, m_tps};
		for (int k = 0; k < 3; k++) {
			qsort(m[k], (size_t)nrep, sizeof(double), cmp_double);
			mn[k] = m[k][0];
			mx[k] = m[k][nrep - 1];
		}
		ttft = median(m_ttft, nrep) / 1e3;
		spread = json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "repeat",
				   (json_int_t)nrep, "ttft_ms_min", mn[0],
				   "ttft_ms_max", mx[0], "tpot_ms_min", mn[1],
				   "tpot_ms_max", mx[1], "tokens_per_s_min", mn[2],
				   "tokens_per_s_max", mx[2]);
	}
	/* the kernels the figures were measured with: a baseline from another
	 * release day compares like with like only when these match */
	kern = json_pack("{s:s, s:s}", "kernel", op_kernels(), "blas_core",
			 openblas_get_corename());
	if (rank == 0 && rc == 0) {
		double tpot = median(m_tpot, nrep);
		double tps = median(m_tps, nrep);
		double ptps = (double)np / ttft;
		double share = tall > 0 ? comm_all / tall : 0;
		if (json) {
			json_t *o = json_pack("{s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:i, s:i, s:i}",
					      "ttft_ms", ttft * 1e3, "tpot_ms", tpot,
					      "tokens_per_s", tps, "prefill_tokens_per_s",
					      ptps, "prompt_tokens", (json_int_t)np,
					      "gen_tokens", (json_int_t)ng, "comm_share",
					      share, "tp", lay.d.tp, "pp", lay.d.pp, "ep", lay.d.ep);
			json_object_update(o, spread);
			json_object_update(o, kern);
			{ /* rank 0's memory: what the accountant holds, the part
			   * of it in huge-page chunks (runtime.c), and the
			   * anonymous huge pages the kernel gave the process */
				long long ahp = -1;
				char line[256];
				FILE *f = fopen("/proc/self/smaps_rollup", "r");
				while (f && fgets(line, sizeof line, f))
					if (!strncmp(line, "AnonHugePages:", 14))
						ahp = atoll(line + 14) * 1024;
				if (f)
					fclose(f);
				json_object_set_new(o, "mem", json_pack(
					"{s:I, s:I, s:I}", "resident_bytes",
					(json_int_t)rt_mem_used(r), "huge_chunk_bytes",
					(json_int_t)rt_chunk_bytes(r), "anon_huge_bytes",
					(json_int_t)ahp));
			}
			{ /* the greedy answer: the same tokens as run --generate */
				json_t *a = json_array();
				for (long g = 0; g < ng; g++)
					json_array_append_new(a, json_integer(gen[g]));
				json_object_set_new(o, "generated", a);
			}
			json_dumpf(o, stdout, JSON_INDENT(2));
			putchar('\n');
			json_decref(o);
		} else if (!events_enabled()) {
			printf("perf: tp %d pp %d ep %d: TTFT %.2f ms (%ld prompt tokens, "
			       "%.0f tokens/s), TPOT %.3f ms, %.1f tokens/s decode, "
			       "communication %.1f%% of step time (kernels %s, "
			       "OpenBLAS %s)\n", lay.d.tp, lay.d.pp, lay.d.ep,
			       ttft * 1e3, np, ptps, tpot, tps, share * 100, op_kernels(),
			       openblas_get_corename());
		}
		{
			json_t *ev = json_pack("{s:f, s:f, s:f, s:I, s:I, s:f}", "ttft_ms",
					       ttft * 1e3, "tpot_ms", tpot, "tokens_per_s",
					       tps, "prompt_tokens", (json_int_t)np,
					       "gen_tokens", (json_int_t)ng, "comm_share",
					       share);
			json_object_update(ev, spread);
			json_object_update(ev, kern);
			events_emit("perf", ev);
		}
		{
			char det[200];
			snprintf(det, sizeof det, "TTFT %.2f ms, TPOT %.3f ms, %.1f tok/s, "
				 "comm %.1f%%", ttft * 1e3, tpot, tps, share * 100);
			events_check("perf.baseline", "pass", det, json_real(tps), NULL);
		}
	}
	if (rc < 0)
		fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
	free(toks);
	free(gen);
	free(logits);
	free(m_ttft);
	free(m_tpot);
	free(m_tps);
	json_decref(spread);
	json_decref(kern);
	layout_opts_free(&lay);
	rt_close(r);
	MPI_Finalize();
	return rc < 0 ? EXIT_CHECK_FAILED : EXIT_OK;
}
