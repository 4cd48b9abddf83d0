/*
 * step_run.c - `mpirun -np N day0-engine run`: launch the model across
 * ranks as a deployment would split it, run the prompt, optionally decode
 * greedily, dump logits and layer outputs for `validate`.
 *
 * Failure discipline: every rank reaches the same decision (an
 * MPI_Allreduce of its status) before anyone leaves, so a refusal or an
 * exhausted card budget stops all ranks cleanly instead of leaving some
 * waiting in a collective.
 */
#include "engine.h"
#include "vis_run.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static int run(int argc, char **argv);

const struct step_entry step_run = {
	.name = "run",
	.usage = "(MODEL_DIR | CONVERTED_DIR) [--tp T] [--pp P] [--ep E] "
		 PROMPT_USAGE " [--generate K] [--card-mem BYTES] "
		 "[--dump-logits FILE] [--dump-layers DIR] [--dump-generated FILE] "
		 "[--image FILE]... [--preprocessor FILE] "
		 "[--events]  (under mpirun -np T*P*E)\n"
		 "  --tp/--pp/--ep   the layout (default 1 each; world = tp*pp*ep)\n"
		 "  --tokens IDS     the prompt as token ids\n"
		 "  --prompt TEXT    the prompt as text, encoded with the model's "
		 "tokenizer.json\n"
		 "  --prompt-file F  the prompt text from a file\n"
		 "  --generate K     greedy-decode K tokens (printed as ids and, "
		 "with a tokenizer, as text)\n"
		 "  --card-mem BYTES the per-card memory budget\n"
		 "  --dump-logits F, --dump-layers DIR  for validate\n"
		 "  --dump-generated F  the prompt and generated ids as JSON, "
		 "for validate --generated\n"
		 "  --image FILE     a PNG/JPEG for a vision-language model "
		 "(repeatable, in the order of the prompt's image placeholders: "
		 "one placeholder token is expanded to the image's count; a "
		 "prompt without any gets them first)\n"
		 "  --preprocessor F preprocessor_config.json (default: "
		 "MODEL_DIR's)\n"
		 "example: mpirun -np 2 day0-engine run /models/m --tp 2 "
		 "--prompt 'The capital of France is' --generate 8",
	.summary = "parallel forward pass under Open MPI (TP/PP/EP), greedy "
		   "decoding, logits and layer dumps",
	.run = run,
};

/* Write one F32 tensor [rows, cols] as a safetensors file. */
int write_f32_tensor(const char *path, const char *name, const float *v,
		     uint64_t rows, uint64_t cols, struct d0_err *err)
{
	struct st_writer *w = st_writer_new();
	uint64_t shape[2] = {rows, cols};
	int rc;
	st_writer_meta(w, "format", "pt");
	st_writer_add(w, name, DT_F32, 2, shape);
	rc = st_writer_begin(w, path, err);
	if (rc == 0)
		rc = st_writer_put(w, 0, 0, v, rows * cols * 4, err);
	if (rc == 0)
		rc = st_writer_finish(w, err);
	st_writer_free(w);
	return rc;
}

static void emit_mem(struct rt *r, uint64_t budget)
{
	int rank = rt_rank(r);
	events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", rank, "metric",
					"alloc.used", "value", (json_int_t)rt_mem_used(r)));
	events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", rank, "metric",
					"alloc.peak", "value", (json_int_t)rt_mem_peak(r)));
	if (budget)
		events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", rank,
						"metric", "mem.budget", "value",
						(json_int_t)budget));
	{ /* FP8 e4m3's subnormal codes, taken out at load into sparse
	   * lists (counted in alloc.*, their bytes here) */
		uint64_t codes, sub, bytes;
		(void)rt_fp8_subnormals(r, &codes, &sub, &bytes);
		if (codes) {
			events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", rank, "metric",
							"fp8.subnormal_codes", "value", (json_int_t)sub));
			events_emit("sample", json_pack("{s:i, s:s, s:I}", "card", rank, "metric",
							"fp8.subnormal_bytes", "value", (json_int_t)bytes));
		}
	}
}

/* Everyone agrees on a failure (any rank's rc != 0 is everyone's). */
static int agree(int rc)
{
	int v = rc;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	return v;
}

struct run_opts {
	const char *dir, *dump_logits, *dump_layers, *dump_generated;
	struct layout_opts lay;
	int gen, events;
	char *images[64];
	int nimg;
	const char *preproc;
};

/* Usage errors are printed by rank 0 only; every rank returns 2. */
#define USAGE(...) (rank ? EXIT_USAGE : step_usage_error(S, __VA_ARGS__))

static int run_parse(const struct step_entry *S, int argc, char **argv,
		     struct run_opts *o, int rank)
{
	static const struct option lo[] = {
		LAYOUT_LONG_OPTS, CARD_MEM_LONG_OPT, PROMPT_LONG_OPTS,
		{"generate", 1, 0, 'g'}, {"dump-logits", 1, 0, 'L'},
		{"dump-layers", 1, 0, 'D'}, {"dump-generated", 1, 0, 'G'},
		{"image", 1, 0, 'I'}, {"preprocessor", 1, 0, 'p'},
		{"events", 0, 0, 'E'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	struct d0_err err;
	char why[256];
	int ch;
	long v;
	memset(o, 0, sizeof *o);
	layout_opts_init(&o->lay);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int took = layout_opts_take(&o->lay, ch, optarg, why, sizeof why);
		if (took < 0)
			return USAGE("%s", why);
		if (took)
			continue;
		switch (ch) {
		case 'g':
			if (parse_long(optarg, 0, 1 << 20, &v) < 0)
				return USAGE("--generate: expected a count");
			o->gen = (int)v;
			break;
		case 'L': o->dump_logits = optarg; break;
		case 'D': o->dump_layers = optarg; break;
		case 'G': o->dump_generated = optarg; break;
		case 'E': o->events = 1; break;
		case 'I':
			if (o->nimg == 64)
				return USAGE("--image: at most 64 images");
			o->images[o->nimg++] = optarg;
			break;
		case 'p': o->preproc = optarg; break;
		case 'h': if (!rank) step_help(S); return -1;
		default:
			return USAGE("unknown or incomplete option '%s'",
				     argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return USAGE("expected one MODEL_DIR or CONVERTED_DIR");
	o->dir = argv[optind];
	if (layout_opts_prompt(&o->lay, o->dir, &err) < 0)
		return USAGE("%s", err.msg);
	return 0;
}

/* The prompt and what was generated, as text (when the model has a
 * tokenizer) and ids: printed, or one `log` event, and the JSON file
 * validate --generated reads. */
static int report_generation(const struct run_opts *o, const int64_t *seq)
{
	int rc = 0;
	const struct layout_opts *l = &o->lay;
	char *ptext = layout_opts_decode(l, l->tokens, l->ntok);
	char *gtext = layout_opts_decode(l, seq, o->gen);
	json_t *gen = json_array(), *prompt = json_array();
	for (int g = 0; g < o->gen; g++)
		json_array_append_new(gen, json_integer(seq[g]));
	for (int i = 0; i < l->ntok; i++)
		json_array_append_new(prompt, json_integer(l->tokens[i]));
	if (!o->events) {
		printf("\ngenerated:");
		for (int g = 0; g < o->gen; g++)
			printf(" %lld", (long long)seq[g]);
		if (ptext)
			printf("\nprompt text: %s", ptext);
		if (gtext)
			printf("\ngenerated text: %s", gtext);
	}
	if (o->dump_generated) {
		json_t *doc = json_pack("{s:O, s:O}", "prompt", prompt, "generated", gen);
		struct d0_err err;
		if (ptext)
			json_object_set_new(doc, "prompt_text", json_string(ptext));
		if (gtext)
			json_object_set_new(doc, "generated_text", json_string(gtext));
		if ((rc = json_write_file(doc, o->dump_generated, 0, &err)) < 0)
			fprintf(stderr, "day0-engine: %s\n", err.msg);
		json_decref(doc);
	}
	if (o->events) {
		json_t *ev = json_pack("{s:s, s:s, s:O}", "level", "info", "msg",
				       "generated", "tokens", gen);
		if (ptext)
			json_object_set_new(ev, "prompt_text", json_string(ptext));
		if (gtext)
			json_object_set_new(ev, "text", json_string(gtext));
		events_emit("log", ev);
	}
	json_decref(gen);
	json_decref(prompt);
	free(ptext);
	free(gtext);
	return rc;
}

/* Bring every layer's output to rank 0 (stage roots hold them). */
/*
 * The MoE layers' routing of the prompt: each token's experts [T][top_k]
 * and router logits [T][experts] per MoE layer, dumped beside the layer's
 * output.  validate follows the run's choice where a near-tie let the
 * rounding choose otherwise than float64 would (and checks that the choice
 * is the top-k of the run's logits and those are within the bound of the
 * reference's).
 */
struct routes {
	int32_t **idx;
	float **lg;
	int K, E;
};

static void routes_alloc(struct routes *ro, const struct model_config *c,
			 int L, int T)
{
	memset(ro, 0, sizeof *ro);
	if (c->experts <= 0)
		return;
	ro->K = (int)c->top_k;
	ro->E = (int)c->experts;
	ro->idx = calloc((size_t)L, sizeof *ro->idx);
	ro->lg = calloc((size_t)L, sizeof *ro->lg);
	for (int l = 0; l < L; l++)
		if (model_layer_is_moe(c, l)) {
			ro->idx[l] = calloc((size_t)T * ro->K + 1, sizeof **ro->idx);
			ro->lg[l] = calloc((size_t)T * ro->E + 1, sizeof **ro->lg);
		}
}

static void routes_free(struct routes *ro, int L)
{
	for (int l = 0; ro->idx && l < L; l++) {
		free(ro->idx[l]);
		free(ro->lg[l]);
	}
	free(ro->idx);
	free(ro->lg);
}

/* Rank 0 gets every layer's output (and routing) from its stage's root. */
static int gather_layers(struct rt *r, float **lo, const struct routes *ro,
			 int L, int T, int H, int rank)
{
	int count, first = rt_first_layer(r, &count);
	for (int l = 0; l < L; l++) {
		int holder = -1;
		int moe = ro->idx && ro->idx[l];
		/* the root of the stage holding l sends it */
		int mine = rt_is_stage_root(r) && l >= first && l < first + count;
		int v = mine ? rank : -1;
		MPI_Allreduce(&v, &holder, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
		if (holder == 0)
			continue;
		if (rank == holder) {
			MPI_Send(lo[l], T * H, MPI_FLOAT, 0, 11, MPI_COMM_WORLD);
			if (moe) {
				MPI_Send(ro->idx[l], T * ro->K, MPI_INT32_T, 0, 12,
					 MPI_COMM_WORLD);
				MPI_Send(ro->lg[l], T * ro->E, MPI_FLOAT, 0, 13,
					 MPI_COMM_WORLD);
			}
		} else if (rank == 0) {
			MPI_Recv(lo[l], T * H, MPI_FLOAT, holder, 11, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
			if (moe) {
				MPI_Recv(ro->idx[l], T * ro->K, MPI_INT32_T, holder,
					 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Recv(ro->lg[l], T * ro->E, MPI_FLOAT, holder, 13,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			}
		}
	}
	return 0;
}

/* layer-NNN.safetensors: "hidden" [T][H]; a MoE layer's "router_logits"
 * [T][experts] and "experts" [T][top_k] too. */
static int write_layer(const char *path, const float *h, const struct routes *ro,
		       int l, int T, int H, struct d0_err *err)
{
	struct st_writer *w = st_writer_new();
	uint64_t sh[2] = {(uint64_t)T, (uint64_t)H};
	int moe = ro->idx && ro->idx[l], rc;
	st_writer_meta(w, "format", "pt");
	st_writer_add(w, "hidden", DT_F32, 2, sh);
	if (moe) {
		sh[1] = (uint64_t)ro->E;
		st_writer_add(w, "router_logits", DT_F32, 2, sh);
		sh[1] = (uint64_t)ro->K;
		st_writer_add(w, "experts", DT_I32, 2, sh);
	}
	rc = st_writer_begin(w, path, err);
	if (rc == 0)
		rc = st_writer_put(w, 0, 0, h, (uint64_t)T * H * 4, err);
	if (rc == 0 && moe)
		rc = st_writer_put(w, 1, 0, ro->lg[l], (uint64_t)T * ro->E * 4, err);
	if (rc == 0 && moe)
		rc = st_writer_put(w, 2, 0, ro->idx[l], (uint64_t)T * ro->K * 4, err);
	if (rc == 0)
		rc = st_writer_finish(w, err);
	st_writer_free(w);
	return rc;
}

static int run(int argc, char **argv)
{
	const struct step_entry *S = &step_run;
	struct run_opts o;
	struct rt *r = NULL;
	struct vis_run vr;
	struct d0_err err = {{0}};
	int rank, world, rc, last, T, V, H, L;
	float *logits = NULL, **lo = NULL;
	struct routes ro = {0};
	int64_t *seq = NULL;
	double t0;
	char detail[512];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	rc = run_parse(S, argc, argv, &o, rank);
	if (agree(rc != 0)) {
		MPI_Finalize();
		layout_opts_free(&o.lay);
		return rc < 0 ? EXIT_OK : EXIT_USAGE;
	}
	events_init(stdout, o.events);
	if (rank == 0)
		events_stage("run", "start", 0, 0, o.dir);
	/* the image channel: placeholders expanded before the cache is sized */
	rc = vis_run_prepare(&vr, o.dir, o.preproc, o.images, o.nimg, &o.lay, &err);
	if (rc < 0) {
		if (rank == 0) {
			fprintf(stderr, "day0-engine: %s\n", err.msg);
			if (rc == VIS_RUN_FEATURES)
				events_check("image.features", "fail", err.msg, NULL,
					     NULL);
			events_stage("run", "end", 1, rc == VIS_RUN_FEATURES
				     ? EXIT_CHECK_FAILED : EXIT_USAGE, "refused");
		}
		vis_run_free(&vr);
		MPI_Finalize();
		layout_opts_free(&o.lay);
		return rc == VIS_RUN_FEATURES ? EXIT_CHECK_FAILED : EXIT_USAGE;
	}
	rc = rt_open(&r, o.dir, &o.lay.d, o.lay.card_mem, o.lay.ntok + o.gen, &err);
	if (agree(rc < 0)) {
		if (rc < 0 && !rt_peer_failed(r))
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
		if (rank == 0)
			events_stage("run", "end", 1, EXIT_USAGE, "refused");
		rt_close(r);
		MPI_Finalize();
		layout_opts_free(&o.lay);
		vis_run_free(&vr);
		return EXIT_USAGE;
	}
	if (agree(rt_over_budget(r) != NULL)) {
		const char *why = rt_over_budget(r);
		emit_mem(r, o.lay.card_mem);
		if (why && !rt_peer_failed(r)) {
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, why);
			events_check("resources.peak", "fail", why,
				     json_integer((json_int_t)rt_mem_peak(r)),
				     json_integer((json_int_t)o.lay.card_mem));
		}
		if (rank == 0)
			events_stage("run", "end", 1, EXIT_CHECK_FAILED,
				     "card memory budget exceeded");
		rt_close(r);
		MPI_Finalize();
		layout_opts_free(&o.lay);
		vis_run_free(&vr);
		return EXIT_CHECK_FAILED;
	}
	{
		const struct model_config *c = rt_config(r);
		V = (int)c->vocab;
		H = (int)c->hidden;
		L = (int)c->layers;
		for (int i = 0; i < o.lay.ntok; i++)
			if (o.lay.tokens[i] >= V) {
				if (rank == 0)
					fprintf(stderr, "day0-engine: --tokens: id %lld is "
						"outside the vocabulary (%d)\n",
						(long long)o.lay.tokens[i], V);
				rt_close(r);
				MPI_Finalize();
				layout_opts_free(&o.lay);
				vis_run_free(&vr);
				return EXIT_USAGE;
			}
	}
	rc = rt_check_groups(r, detail, sizeof detail);
	if (rank == 0)
		events_check("comm.groups", rc ? "fail" : "pass", detail, NULL, NULL);
	T = o.lay.ntok;
	last = rt_last_stage_root(r);
	logits = calloc((size_t)(T > 0 ? T : 1) * V, 4);
	if (o.dump_layers) {
		lo = calloc((size_t)L, sizeof *lo);
		for (int l = 0; l < L; l++)
			lo[l] = calloc((size_t)T * H, 4);
		routes_alloc(&ro, rt_config(r), L, T);
		rt_record_routes(r, ro.idx, ro.lg);
	}
	t0 = MPI_Wtime();
	rc = vis_run_encode(&vr, r, rank == 0 && o.dump_layers, &err);
	if (agree(rc < 0)) {
		if (rc < 0)
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
		goto out;
	}
	{
		struct rt_seg sg = vis_run_prefill_seg(&vr, T);
		rc = rt_forward_seg(r, o.lay.tokens, &sg, logits, lo, &err);
		rt_record_routes(r, NULL, NULL);
	}
	if (agree(rc < 0)) {
		if (rc < 0)
			fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
		goto out;
	}
	rt_emit_comm(r, &o.lay.d, "prefill", NULL, 0);
	if (rank == last && last != 0)
		MPI_Send(logits, T * V, MPI_FLOAT, 0, 9, MPI_COMM_WORLD);
	if (rank == 0 && last != 0)
		MPI_Recv(logits, T * V, MPI_FLOAT, last, 9, MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
	if (lo)
		gather_layers(r, lo, &ro, L, T, H, rank);
	if (rank == 0) {
		if (o.dump_logits &&
		    write_f32_tensor(o.dump_logits, "logits", logits, (uint64_t)T,
				     (uint64_t)V, &err) < 0)
			fprintf(stderr, "day0-engine: %s\n", err.msg), rc = -1;
		if (o.dump_layers) {
			struct outdir od;
			if (outdir_begin(&od, o.dump_layers, 1, &err) < 0) {
				fprintf(stderr, "day0-engine: %s\n", err.msg);
				rc = -1;
			} else {
				for (int l = 0; l < L && rc == 0; l++) {
					char name[64], *p;
					snprintf(name, sizeof name, "layer-%03d.safetensors", l);
					p = path_join(od.partial, name);
					rc = write_layer(p, lo[l], &ro, l, T, H, &err);
					free(p);
				}
				if (rc == 0)
					rc = vis_run_dump(&vr, od.partial, &err);
				if (rc == 0)
					rc = outdir_commit(&od, &err);
				else
					outdir_abort(&od);
				if (rc < 0)
					fprintf(stderr, "day0-engine: %s\n", err.msg);
			}
		}
	}
	/* greedy decoding: the last stage picks, everyone follows */
	seq = calloc((size_t)o.gen + 1, sizeof *seq);
	for (int g = 0; g < o.gen && rc == 0; g++) {
		int64_t next = 0;
		if (rank == last) {
			const float *row = logits + (size_t)(g == 0 ? T - 1 : 0) * V;
			for (int v = 1; v < V; v++)
				if (row[v] > row[next])
					next = v;
		}
		MPI_Bcast(&next, 1, MPI_INT64_T, last, MPI_COMM_WORLD);
		seq[g] = next;
		if (g + 1 == o.gen)
			break;
		{
			struct rt_seg sg = vis_run_decode_seg(&vr);
			rc = rt_forward_seg(r, &next, &sg, logits, NULL, &err);
		}
		if (agree(rc < 0)) {
			if (rc < 0)
				fprintf(stderr, "day0-engine: rank %d: %s\n", rank, err.msg);
			goto out;
		}
	}
	if (o.gen)
		rt_emit_comm(r, &o.lay.d, "decode", NULL, 0);
	emit_mem(r, o.lay.card_mem);
	{ /* every rank's FP8 e4m3 codes and subnormals, for rank 0's line */
		uint64_t v[4];
		v[3] = (uint64_t)rt_fp8_subnormals(r, &v[0], &v[1], &v[2]);
		MPI_Reduce(rank == 0 ? MPI_IN_PLACE : v, v, 4, MPI_UINT64_T, MPI_SUM, 0,
			   MPI_COMM_WORLD);
		if (rank == 0 && !o.events && v[0] && v[3])
			printf("fp8: %llu of %llu e4m3 codes subnormal (%.2g), taken out at "
			       "load for %s: %llu bytes of sparse lists\n", (unsigned long long)v[1],
			       (unsigned long long)v[0], (double)v[1] / (double)v[0],
			       op_fp8_e4m3_kernel(), (unsigned long long)v[2]);
		else if (rank == 0 && !o.events && v[0])
			printf("fp8: %llu of %llu e4m3 codes subnormal (%.2g), kept in place "
			       "(%s)\n", (unsigned long long)v[1], (unsigned long long)v[0],
			       (double)v[1] / (double)v[0], op_fp8_e4m3_kernel());
	}
	if (rank == 0) {
		const struct model_config *c = rt_config(r);
		if (!o.events) {
			char vsum[200];
			vis_run_summary(&vr, vsum, sizeof vsum);
			printf("run: %s, tp %d pp %d ep %d (%d ranks), %d prompt tokens "
			       "in %.3f s%s", c->model_type, o.lay.d.tp, o.lay.d.pp,
			       o.lay.d.ep, world, T, MPI_Wtime() - t0, vsum);
			if (o.gen && report_generation(&o, seq) < 0)
				rc = -1;
			printf("\n");
		} else if (o.gen && report_generation(&o, seq) < 0) {
			rc = -1;
		}
		if (o.lay.card_mem)
			events_check("resources.peak", "pass",
				     "every card within its budget",
				     json_integer((json_int_t)rt_mem_peak(r)),
				     json_integer((json_int_t)o.lay.card_mem));
		else { /* nothing to be within: no claim that it was */
			char d[160], b[32];
			snprintf(d, sizeof d, "no card budget given (--card-mem): "
				 "peak %s a card, not checked",
				 fmt_bytes(rt_mem_peak(r), b));
			events_check("resources.peak", "skip", d,
				     json_integer((json_int_t)rt_mem_peak(r)),
				     NULL);
		}
	}
out:
	rc = agree(rc != 0);
	if (rank == 0)
		events_stage("run", "end", 1, rc ? EXIT_CHECK_FAILED : 0, o.dir);
	if (lo)
		for (int l = 0; l < L; l++)
			free(lo[l]);
	free(lo);
	routes_free(&ro, L);
	free(seq);
	free(logits);
	layout_opts_free(&o.lay);
	vis_run_free(&vr);
	rt_close(r);
	MPI_Finalize();
	return rc ? EXIT_CHECK_FAILED : EXIT_OK;
}
