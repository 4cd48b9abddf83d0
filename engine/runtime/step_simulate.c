/*
 * step_simulate.c - `day0-engine simulate STEP [OPTIONS] -- ARGS...`: the
 * events a real `day0-engine STEP ARGS --events` would write, on a model
 * of a node instead of the node.
 *
 * Why: a release day over 128 nodes x 8 cards cannot run on one machine,
 * but the console, the store, the fan-out and the agents' spools can, if
 * every step answers as it would.  `day0-agent --sim-model` runs this in
 * place of the engine (the same spawn, pipes, forwarding, spool, ack and
 * store as a real step): only the work is simulated.  Each step emits what
 * its real one emits (stage start/progress/end, the checklist items the
 * registry says it produces, comm/perf/numerics/sample events) with
 * durations from a model of the node:
 *
 *   model size    parameters from config.json (model_tensors), on disk at
 *                 1 byte (fp8 quantization_config) or 2 (bf16), 2 in bf16;
 *   disk GB/s     verify hashes the whole checkpoint, convert reads and
 *                 writes this node's share (cards / world), run, perf, soak
 *                 and serve load the node's share of the bf16 weights;
 *   link GB/s     comm's bus bandwidth (NCCL-like: latency + bytes / bw);
 *   cards, memory the world (np), each card's share of the weights against
 *                 its budget (resources.peak, memory.plan);
 *   speed         a straggler runs every stage at half speed (--speed 0.5);
 *   scale         every duration divided by it (a 10-minute verify in 6 s
 *                 at --scale 100).
 *
 * A cancel or timeout (SIGTERM) kills a simulated step as it kills a real
 * one; only `serve` catches it, to end the service cleanly.
 *
 * Failures are injected by rate (--fail verify:0.01,run:0.02,oom:0.01):
 * a stage fails when a hash of (seed, node, stage id, step) falls under its
 * rate, so a rerun of the same session fails the same stages.  "oom" makes
 * one card of run/soak/serve go over its budget (resources.peak fails).
 */
#include "engine.h"
#include "model.h"
#include "step.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int run(int argc, char **argv);

const struct step_entry step_simulate = {
    .name = "simulate",
    .usage = "STEP [--model CONFIG] [--np N] [--cards N] [--card-mem BYTES] "
	     "[--disk-gbps G] [--link-gbps G] [--speed F] [--scale F] "
	     "[--fail SPEC] [--seed S] [--rehearsal] [--events] -- ARGS...",
    .summary = "the events a real STEP would emit, on a model of the node "
	       "(day0-agent --sim-model)",
    .help =
	"  STEP             the engine step to answer for (verify, inspect, "
	"plan, convert,\n"
	"                   comm, gen-model, run, validate, perf, soak, serve, "
	"probe, load, ...)\n"
	"  --model CONFIG   config.json (or its directory): the model's size "
	"and layers\n"
	"                   (default: the first argument that is one)\n"
	"  --np N           ranks of the stage (default 1; a cluster stage: "
	"every card)\n"
	"  --cards N        cards of this node (default 8)\n"
	"  --card-mem BYTES memory of one card (default 80 GiB)\n"
	"  --disk-gbps G    the node's disk, GB/s (default 2)\n"
	"  --link-gbps G    the node's link, GB/s (default 25)\n"
	"  --speed F        1 (default); a straggler: 0.5\n"
	"  --scale F        durations divided by F (default 1)\n"
	"  --fail SPEC      STEP:RATE,...; oom:RATE for a card over budget\n"
	"  --seed S         seed of the injected failures (default 1)\n"
	"  --rehearsal      the stage is a rehearsal: a tiny model of the "
	"same shape\n"
	"  --events         JSON lines on stdout (always on)\n"
	"  ARGS             the real step's arguments (after --)\n"
	"Example: day0-engine simulate verify --model "
	"assets/configs/deepseek-v3.json --scale 100 -- /models/dsv3\n",
    .run = run,
};

/* The node and the step being simulated. */
struct sim {
	const char *step, *node, *stage_id;
	int np, cards, tp, pp, ep, layers;
	uint64_t card_mem;
	double disk, link, speed, scale;
	double params, active; /* parameters (MTP excluded) */
	double disk_bytes;     /* the checkpoint on disk */
	double bf16_bytes;     /* the whole model in bf16 */
	char model_type[32];
	int vision; /* config.json has a vision tower */
	const char *fail;
	uint64_t seed;
	int argc;
	char **argv;
};

static volatile sig_atomic_t sim_term;

static void on_term(int sig)
{
	(void)sig;
	sim_term = 1;
}

/* ----------------------------------------------------------------- model */

/* The value of "--name V" among the step's arguments; NULL when absent. */
static const char *arg_of(const struct sim *s, const char *name)
{
	for (int i = 0; i + 1 < s->argc; i++)
		if (!strcmp(s->argv[i], name))
			return s->argv[i + 1];
	return NULL;
}

static int arg_int(const struct sim *s, const char *name, int def)
{
	const char *v = arg_of(s, name);
	return v ? atoi(v) : def;
}

/* A size argument ("80GiB", "4M", "1073741824"); def when absent or bad. */
static double arg_size(const struct sim *s, const char *name, double def)
{
	const char *v = arg_of(s, name);
	uint64_t n;
	return v && parse_size(v, &n) == 0 && n > 0 ? (double)n : def;
}

/* The first positional argument (not an option's value). */
static const char *arg_first(const struct sim *s)
{
	for (int i = 0; i < s->argc; i++) {
		if (s->argv[i][0] == '-' && s->argv[i][1]) {
			i++; /* skip its value (flags without one: harmless) */
			continue;
		}
		return s->argv[i];
	}
	return "";
}

/* Parameters and bytes from config.json; 0, or -1 with err. */
static int load_model(struct sim *s, const char *path, struct d0_err *err)
{
	struct model_config c;
	struct tensor_spec *t = NULL;
	struct param_count pc;
	size_t n = 0;
	char *cfg =
	    path_is_dir(path) ? path_join(path, "config.json") : strdup(path);
	int rc = -1;
	memset(&c, 0, sizeof c);
	if (model_config_load(cfg, &c, err) == 0 &&
	    model_tensors(&c, &t, &n, err) == 0) {
		model_count_params(&c, t, n, &pc);
		s->params = (double)pc.total;
		s->active = (double)pc.active;
		s->layers = (int)c.layers;
		s->disk_bytes = s->params * (c.quant[0] ? 1.0 : 2.0);
		s->bf16_bytes = s->params * 2.0;
		snprintf(s->model_type, sizeof s->model_type, "%s",
			 c.model_type);
		s->vision = c.vision.kind != VISION_NONE;
		rc = 0;
	}
	free(t);
	model_config_free(&c);
	free(cfg);
	return rc;
}

/* A reproducible value in [0, 1) for (seed, node, stage, what). */
static double draw(const struct sim *s, const char *what)
{
	char key[512];
	struct rng r;
	snprintf(key, sizeof key, "%s/%s/%s", s->node, s->stage_id, what);
	rng_seed(&r, hash_str64(key) ^ (s->seed * 0x9e3779b97f4a7c15ULL));
	return rng_uniform(&r);
}

/* The rate SPEC gives key ("verify:0.01,run:0.02"); 0 when absent. */
static double fail_rate(const struct sim *s, const char *key)
{
	const char *p = s->fail;
	size_t k = strlen(key);
	while (p && *p) {
		if (!strncmp(p, key, k) && p[k] == ':')
			return atof(p + k + 1);
		p = strchr(p, ',');
		if (p)
			p++;
	}
	return 0;
}

/* Does this stage fail by the rate of key? */
static int fails(const struct sim *s, const char *key)
{
	double rate = fail_rate(s, key);
	return rate > 0 && draw(s, key) < rate;
}

/* This node's share of the weights: its cards over the world. */
static double node_share(const struct sim *s)
{
	int world = s->tp * s->pp * s->ep;
	if (world < 1)
		world = 1;
	return world <= s->cards ? 1.0 : (double)s->cards / world;
}

/* Seconds of wall time for t seconds of the node's work. */
static double wall(const struct sim *s, double t)
{
	return t / s->speed / s->scale;
}

/*
 * Wait t simulated seconds, reporting progress from p0 to p1 about twice a
 * second (of wall time) with msg; returns early on SIGTERM (1).
 */
static int work(const struct sim *s, double t, double p0, double p1,
		const char *msg)
{
	double w = wall(s, t), done = 0;
	while (done < w && !sim_term) {
		double d = w - done < 0.5 ? w - done : 0.5;
		struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
		nanosleep(&ts, NULL);
		done += d;
		events_stage(s->step, "progress", p0 + (p1 - p0) * done / w, 0,
			     msg);
	}
	return sim_term != 0;
}

static const char *gib(double bytes, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
	return buf;
}

/* ----------------------------------------------------------------- steps */

static int sim_verify(struct sim *s)
{
	const char *path = arg_first(s);
	int shards = (int)ceil(s->disk_bytes / 4.3e9);
	char msg[160], a[32], b[32];
	events_stage("verify", "start", 0, 0, path);
	for (int i = 1; i <= 10 && !sim_term; i++) {
		work(s, s->disk_bytes / (s->disk * 1e9) / 10, (i - 1) / 10.0,
		     i / 10.0, NULL);
		snprintf(msg, sizeof msg, "hashed %s of %s",
			 gib(s->disk_bytes * i / 10, a, sizeof a),
			 gib(s->disk_bytes, b, sizeof b));
		events_stage("verify", "progress", i / 10.0, 0, msg);
	}
	if (fails(s, "verify")) {
		snprintf(msg, sizeof msg,
			 "model-%05d-of-%05d.safetensors: sha256 differs from "
			 "SHA256SUMS (simulated)",
			 1 + (int)(draw(s, "shard") * shards), shards);
		events_check("weights.integrity", "fail", msg, json_integer(1),
			     json_integer(0));
		events_check("weights.metadata", "pass",
			     "every tensor matches config.json",
			     json_integer(0), json_integer(0));
		events_stage("verify", "end", 1, EXIT_CHECK_FAILED,
			     "verification failed");
		return EXIT_CHECK_FAILED;
	}
	snprintf(msg, sizeof msg, "%d shards, sha256 ok", shards);
	events_check("weights.integrity", "pass", msg, json_integer(0),
		     json_integer(0));
	snprintf(msg, sizeof msg, "every tensor matches config.json (%s)",
		 s->model_type);
	events_check("weights.metadata", "pass", msg, json_integer(0),
		     json_integer(0));
	events_stage("verify", "end", 1, 0, "ok");
	return EXIT_OK;
}

static int sim_inspect(struct sim *s)
{
	const char *path = arg_first(s);
	char msg[200];
	events_stage("inspect", "start", 0, 0, path);
	work(s, 0.3, 0, 1, NULL);
	if (fails(s, "inspect")) {
		events_check("ops.coverage", "fail",
			     "1 operator missing: rope.unknown (simulated)",
			     json_integer(1), json_integer(0));
		events_stage("inspect", "end", 1, EXIT_CHECK_FAILED, path);
		return EXIT_CHECK_FAILED;
	}
	snprintf(
	    msg, sizeof msg,
	    "%s: %.0fB parameters (%.0fB active): every operator native or "
	    "composed, 0 missing",
	    s->model_type, s->params / 1e9, s->active / 1e9);
	events_check("ops.coverage", "pass", msg, json_integer(0),
		     json_integer(0));
	events_stage("inspect", "end", 1, 0, path);
	return EXIT_OK;
}

/* image-check: the four image items; n/a (skip, with the reason) for a
 * text model, as the real step says it. */
static int sim_image_check(struct sim *s)
{
	static const char *const items[] = {"image.preprocess",
					    "image.features", "numerics.image",
					    "perf.image"};
	const char *path = arg_first(s);
	char msg[200];
	events_stage("image-check", "start", 0, 0, path);
	work(s, 0.2, 0, 1, NULL);
	if (s->vision && fails(s, "image-check")) {
		events_check("image.features", "fail",
			     "image 1: 63 placeholder tokens but the tower gives "
			     "64 merged patches (simulated)",
			     json_integer(1), NULL);
		events_stage("image-check", "end", 1, EXIT_CHECK_FAILED, path);
		return EXIT_CHECK_FAILED;
	}
	for (int i = 0; i < 4; i++) {
		if (s->vision)
			snprintf(msg, sizeof msg, "%s (simulated)", items[i]);
		else
			snprintf(msg, sizeof msg,
				 "n/a: no vision tower in config.json (%s is "
				 "a text model)",
				 s->model_type);
		events_check(items[i], s->vision ? "pass" : "skip", msg, NULL,
			     NULL);
	}
	events_stage("image-check", "end", 1, 0, path);
	return EXIT_OK;
}

static int sim_plan(struct sim *s)
{
	int nodes = arg_int(s, "--nodes", 1),
	    cards = arg_int(s, "--cards", s->cards);
	double budget = arg_size(s, "--card-mem", (double)s->card_mem);
	int world = s->tp * s->pp * s->ep;
	double per_card = s->bf16_bytes / (world > 0 ? world : 1);
	double total = per_card * 1.25; /* + KV, activations, comm buffers */
	int fit = total <= budget * 0.9 && !fails(s, "plan");
	char msg[300], a[32], b[32];
	json_t *ck;
	events_stage("plan", "start", 0, 0, arg_first(s));
	work(s, 0.5, 0, 1, NULL);
	snprintf(msg, sizeof msg,
		 "%d of 1 layouts fit; best tp%d pp%d ep%d dp1 at %s of %s per "
		 "card (%d nodes x %d cards)",
		 fit, s->tp, s->pp, s->ep, gib(total, a, sizeof a),
		 gib(budget * 0.9, b, sizeof b), nodes, cards);
	ck = json_pack("{s:s, s:s, s:s, s:i, s:i}", "item", "memory.plan",
		       "status", fit ? "pass" : "fail", "detail", msg, "value",
		       fit, "threshold", 1);
	json_object_set_new(
	    ck, "plan",
	    json_pack("{s:i, s:i, s:i, s:i, s:i, s:b, s:I, s:I}", "tp", s->tp,
		      "pp", s->pp, "ep", s->ep, "dp", 1, "cards", world, "fits",
		      fit, "weights_bytes", (json_int_t)per_card, "total_bytes",
		      (json_int_t)total));
	events_emit("check", ck);
	events_stage("plan", "end", 1, fit ? 0 : 1, arg_first(s));
	return fit ? EXIT_OK : EXIT_CHECK_FAILED;
}

static int sim_convert(struct sim *s)
{
	double bytes = (s->disk_bytes + s->bf16_bytes) * node_share(s);
	const char *dst = s->argc > 1 ? s->argv[1] : "";
	static const char *const names[] = {
	    "model.embed_tokens.weight",   "model.layers.0.self_attn",
	    "model.layers.3.mlp.experts",  "model.layers.30.mlp.experts",
	    "model.layers.60.mlp.experts", "lm_head.weight"};
	events_stage("convert", "start", 0, 0, arg_first(s));
	for (int i = 0; i < 6 && !sim_term; i++)
		work(s, bytes / (s->disk * 1e9) / 6, i / 6.0, (i + 1) / 6.0,
		     names[i]);
	if (fails(s, "convert")) {
		events_log("error",
			   "convert: %s: no space left on device "
			   "(simulated)",
			   dst);
		events_stage("convert", "end", 1, EXIT_CHECK_FAILED,
			     "no space left on device");
		return EXIT_CHECK_FAILED;
	}
	events_stage("convert", "end", 1, 0, dst);
	return EXIT_OK;
}

/* Bus bandwidth of op at bytes over the node's link (GB/s). */
static double comm_time_us(const struct sim *s, double bytes, int ranks,
			   double *busbw, double factor)
{
	double lat = 8.0 + 2.0 * log2(ranks > 1 ? ranks : 2);
	double bw = s->link * s->speed * 0.92;
	double t = lat + bytes * factor / (bw * 1e3);
	*busbw = bytes * factor / (t * 1e3);
	return t;
}

static int sim_comm(struct sim *s)
{
	static const char *const ops[] = {"allreduce",	   "allgather",
					  "reducescatter", "alltoall",
					  "broadcast",	   "sendrecv"};
	const char *ex = arg_of(s, "--expect-gbps");
	double maxb = arg_size(s, "--max", 4194304.0);
	double expect = ex ? atof(ex) : 0, lowest = 1e30;
	int iters = arg_int(s, "--iters", 5) + arg_int(s, "--warmup", 2);
	int hosts = (s->np + s->cards - 1) / (s->cards > 0 ? s->cards : 1);
	int nsizes = 0, k = 0, bad = fails(s, "comm");
	char msg[300];
	const char *low_op = "allreduce";
	for (double b = 8; b <= maxb; b *= 2)
		nsizes++;
	events_stage("comm", "start", 0, 0, "world");
	snprintf(msg, sizeof msg, "%d ranks on %d hosts: 1 world group of %d",
		 s->np, hosts, s->np);
	events_check("comm.groups", "pass", msg, json_integer(1), NULL);
	for (double b = 8; b <= maxb && !sim_term; b *= 2) {
		double total = 0;
		for (int o = 0; o < 6; o++) {
			double factor = o == 0	 ? 2.0 * (s->np - 1) / s->np
					: o >= 4 ? 1.0
						 : (double)(s->np - 1) / s->np;
			double busbw,
			    t = comm_time_us(s, b, s->np, &busbw, factor);
			if (bad && o == 3)
				busbw *= 0.1, t *= 10;
			total += t * iters;
			events_emit(
			    "comm",
			    json_pack("{s:s, s:I, s:i, s:f, s:f, s:f, "
				      "s:i, s:s, s:s}",
				      "op", ops[o], "bytes", (json_int_t)b,
				      "ranks", s->np, "time_us", t, "algbw",
				      b / (t * 1e3), "busbw", busbw, "wrong", 0,
				      "group", "world", "dtype", "f32"));
			if (b == maxb || b * 2 > maxb) {
				if (busbw < lowest) {
					lowest = busbw;
					low_op = ops[o];
				}
			}
		}
		k++;
		/* the collectives' own time plus the launch of each size */
		work(s, total / 1e6 + 0.2, (k - 1.0) / nsizes,
		     (double)k / nsizes, "collectives");
	}
	{
		double need = expect * 0.8;
		int ok = lowest >= need;
		snprintf(
		    msg, sizeof msg,
		    "lowest: %s busbw %.3g GB/s at %.0f B; needs %.3g GB/s "
		    "(0.80 of the %.3g GB/s link)",
		    low_op, lowest, maxb, need, expect);
		events_check("comm.bandwidth", ok ? "pass" : "fail", msg,
			     json_real(lowest), json_real(need));
		events_stage("comm", "end", 1, ok ? 0 : 1, ok ? "ok" : msg);
		return ok ? EXIT_OK : EXIT_CHECK_FAILED;
	}
}

static int sim_gen_model(struct sim *s)
{
	const char *out = "";
	for (int i = 0; i < s->argc; i++) /* the last positional argument */
		if (s->argv[i][0] != '-' &&
		    (i == 0 || s->argv[i - 1][0] != '-' ||
		     !strcmp(s->argv[i - 1], "--force")))
			out = s->argv[i];
	events_stage("gen-model", "start", 0, 0, out);
	work(s, 1.0, 0, 1, "model.embed_tokens.weight");
	events_stage("gen-model", "end", 1, 0, out);
	return EXIT_OK;
}

/* Peak memory of each card of this node for the weights' share. */
static double card_peak(const struct sim *s)
{
	int world = s->tp * s->pp * s->ep;
	return s->bf16_bytes / (world > 0 ? world : 1) * 1.18;
}

/* resources.peak as run reports it (report_pass) and serve refuses with
 * it; 0 when every card is within its budget. */
static int peak_check(struct sim *s, int report_pass)
{
	double peak = card_peak(s),
	       budget = arg_size(s, "--card-mem", (double)s->card_mem);
	char msg[300], a[32], b[32];
	if (fails(s, "oom") || peak > budget) {
		int card = (int)(draw(s, "card") * s->cards);
		double over = peak > budget ? peak : budget * 1.04;
		snprintf(msg, sizeof msg,
			 "card %d on %s: peak %s over its budget %s (out of "
			 "memory, simulated)",
			 card, s->node, gib(over, a, sizeof a),
			 gib(budget, b, sizeof b));
		events_check("resources.peak", "fail", msg,
			     json_integer((json_int_t)over),
			     json_integer((json_int_t)budget));
		return 1;
	}
	if (!report_pass)
		return 0;
	events_check("resources.peak", "pass", "every card within its budget",
		     json_integer((json_int_t)peak),
		     json_integer((json_int_t)budget));
	return 0;
}

/* Per-card samples of a loaded model (card = rank, the agent maps). */
static void card_samples(const struct sim *s)
{
	events_emit("sample",
		    json_pack("{s:i, s:s, s:I}", "card", 0, "metric",
			      "mem.peak", "value", (json_int_t)card_peak(s)));
}

static int sim_run(struct sim *s)
{
	const char *dir = arg_first(s);
	double load = s->bf16_bytes * node_share(s) / (s->disk * 1e9);
	int gen = arg_int(s, "--generate", 8);
	double tpot = s->active * 2 / (s->tp * s->pp * s->ep) / 2e12 + 0.004;
	char msg[300];
	events_stage("run", "start", 0, 0, dir);
	if (work(s, load, 0, 0.8, "loading weights"))
		return 143;
	snprintf(
	    msg, sizeof msg,
	    "%d ranks: %d TP groups of %d, %d EP groups of %d, %d pipeline "
	    "stages, each verified with an all-reduce",
	    s->np, s->np / (s->tp ? s->tp : 1), s->tp,
	    s->np / (s->ep ? s->ep : 1), s->ep, s->pp);
	events_check("comm.groups", "pass", msg, NULL, NULL);
	if (fails(s, "run")) {
		events_log("error",
			   "rank %d: NCCL watchdog: allreduce timed "
			   "out after 600 s (simulated)",
			   (int)(draw(s, "rank") * s->np));
		events_stage("run", "end", 1, EXIT_CHECK_FAILED, dir);
		return EXIT_CHECK_FAILED;
	}
	{
		double busbw,
		    t = comm_time_us(s, 7168.0 * 2 * 16, s->tp, &busbw, 2.0);
		events_emit(
		    "comm",
		    json_pack("{s:s, s:I, s:i, s:i, s:f, s:f, s:f, s:i, "
			      "s:s, s:s}",
			      "op", "allreduce", "bytes",
			      (json_int_t)(7168 * 2 * 16), "ranks", s->tp,
			      "calls", 2 * s->layers, "time_us",
			      t * 2 * s->layers, "algbw",
			      7168.0 * 32 / (t * 1e3), "busbw", busbw, "wrong",
			      0, "group", "tp", "step", "prefill"));
		t = comm_time_us(s, 7168.0 * 2 * 16 * 8, s->ep, &busbw, 1.0);
		events_emit(
		    "comm",
		    json_pack("{s:s, s:I, s:i, s:i, s:f, s:f, s:f, s:i, "
			      "s:s, s:s}",
			      "op", "alltoall", "bytes",
			      (json_int_t)(7168 * 2 * 16 * 8), "ranks", s->ep,
			      "calls", 2 * s->layers, "time_us",
			      t * 2 * s->layers, "algbw",
			      7168.0 * 256 / (t * 1e3), "busbw", busbw, "wrong",
			      0, "group", "ep", "step", "prefill"));
	}
	if (work(s, tpot * gen + 0.5, 0.8, 1, "generating"))
		return 143;
	card_samples(s);
	if (peak_check(s, 1)) {
		events_stage("run", "end", 1, EXIT_CHECK_FAILED, dir);
		return EXIT_CHECK_FAILED;
	}
	events_stage("run", "end", 1, 0, dir);
	return EXIT_OK;
}

static int sim_validate(struct sim *s)
{
	const char *dir = arg_first(s), *mr = arg_of(s, "--max-rel"),
		   *gen = arg_of(s, "--generated");
	int rehearsal = !mr; /* the rehearsal keeps f32's bound */
	double bound = mr ? atof(mr) : 1e-5, err = bound * 0.12;
	int bad = fails(s, "validate"), layers = s->layers > 0 ? s->layers : 1;
	char msg[300], name[32];
	events_stage("validate", "start", 0, 0, dir);
	work(s, 4, 0, 0.1, "kernels");
	events_emit("numerics", json_pack("{s:s, s:s, s:f, s:f}", "level", "op",
					  "name", "linear (sgemm)", "max_abs",
					  1.8e-6, "max_rel", 1.9e-7));
	events_check("numerics.op", "pass", "every kernel within 1e-5 relative",
		     NULL, json_real(1e-5));
	for (int l = 0; l < layers && !sim_term; l++) {
		double e = err * (1 + 0.3 * draw(s, "l") + 0.002 * l);
		snprintf(name, sizeof name, "layer.%d", l);
		events_emit("numerics",
			    json_pack("{s:s, s:s, s:f, s:f}", "level", "layer",
				      "name", name, "max_abs", e * 2.5,
				      "max_rel", e));
		if (l % 8 == 7)
			work(s, 8 * (rehearsal ? 0.05 : 0.6),
			     0.1 + 0.8 * l / layers,
			     0.1 + 0.8 * (l + 1) / layers, name);
	}
	snprintf(msg, sizeof msg,
		 "largest error growth at layer %d; threshold %g relative",
		 layers - 1, bound);
	events_check("numerics.layer", bad ? "fail" : "pass", msg,
		     json_real(bad ? bound * 3 : err * 1.3), json_real(bound));
	events_emit("numerics",
		    json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f}",
			      "level", "e2e", "name", "logits", "max_abs",
			      err * 4, "max_rel", err, "kl", err * err * 0.5,
			      "top1", 100.0, "ppl_ref", 3.412, "ppl", 3.413));
	snprintf(msg, sizeof msg, "max rel %.3g, KL max %.3g, top-1 100.0%%",
		 err, err * err * 0.5);
	events_check("numerics.e2e", bad ? "fail" : "pass", msg, json_real(err),
		     json_real(bound));
	if (gen) {
		int n = arg_int(s, "--text-tokens", 8);
		snprintf(msg, sizeof msg,
			 "%d of %d greedy tokens equal the reference's; the "
			 "text is clean UTF-8 (simulated)",
			 n, n);
		events_check("text.generation", "pass", msg, json_integer(n),
			     json_integer(n));
	}
	work(s, 1, 0.9, 1, NULL);
	events_stage("validate", "end", 1, bad, dir);
	return bad ? EXIT_CHECK_FAILED : EXIT_OK;
}

/* TTFT and TPOT (ms) of the layout: memory-bound decode over the cards. */
static void perf_model(const struct sim *s, int prompt, double *ttft,
		       double *tpot)
{
	int world = s->tp * s->pp * s->ep;
	double per_card = s->active * 2 / (world > 0 ? world : 1);
	double comm = 2.0 * s->layers * 0.025 / s->speed; /* ms */
	*tpot = (per_card / 2.0e12 * 1e3 + comm) * s->pp / s->speed;
	*ttft = *tpot * (1 + prompt / 64.0) + 5;
}

static int sim_perf(struct sim *s)
{
	int prompt = arg_int(s, "--prompt-tokens", 32),
	    gen = arg_int(s, "--gen-tokens", 8);
	double ttft, tpot, tps, load;
	char msg[300];
	perf_model(s, prompt, &ttft, &tpot);
	tps = 1000.0 / tpot;
	load = s->bf16_bytes * node_share(s) / (s->disk * 1e9);
	events_stage("perf", "start", 0, 0, arg_first(s));
	work(s, load + 3 * (ttft + gen * tpot) / 1e3, 0, 1, "measuring");
	events_emit("perf",
		    json_pack("{s:f, s:f, s:f, s:i, s:i, s:f, s:i}", "ttft_ms",
			      ttft, "tpot_ms", tpot, "tokens_per_s", tps,
			      "prompt_tokens", prompt, "gen_tokens", gen,
			      "comm_share", 0.31, "repeat", 3));
	snprintf(msg, sizeof msg,
		 "TTFT %.2f ms, TPOT %.3f ms, %.1f tok/s, comm 31.0%%", ttft,
		 tpot, tps);
	events_check("perf.baseline", "pass", msg, json_real(tps), NULL);
	events_stage("perf", "end", 1, 0, arg_first(s));
	return EXIT_OK;
}

static int sim_soak(struct sim *s)
{
	const char *d = arg_of(s, "--duration");
	double dur = d ? atof(d) : 10, ttft, tpot;
	int bad = fails(s, "soak"), iters;
	char msg[400];
	perf_model(s, 16, &ttft, &tpot);
	iters = (int)(dur * 1000 / ttft);
	events_stage("soak", "start", 0, 0, arg_first(s));
	if (work(s, dur, 0, 1, "iterations"))
		return 143;
	card_samples(s);
	snprintf(
	    msg, sizeof msg,
	    "%d iterations in %.1f s on %d ranks: logits %s; memory growth "
	    "+0.0%% (limit 5.0%%)",
	    iters, dur, s->np,
	    bad ? "differ at iteration 17 (simulated)" : "bit-identical");
	events_check("stability.soak", bad ? "fail" : "pass", msg,
		     json_real(bad ? 0.2 : 6e-5), json_real(0.05));
	events_stage("soak", "end", 1, bad ? EXIT_CHECK_FAILED : 0,
		     bad ? "unstable" : "stable");
	return bad ? EXIT_CHECK_FAILED : EXIT_OK;
}

static int sim_serve(struct sim *s)
{
	double load = s->bf16_bytes * node_share(s) / (s->disk * 1e9);
	events_stage("serve", "start", 0, 0, arg_first(s));
	if (work(s, load + 2, 0, 0, "loading"))
		return EXIT_OK;
	if (fails(s, "serve") || peak_check(s, 0)) {
		events_stage("serve", "end", 1, EXIT_CHECK_FAILED, "refused");
		return EXIT_CHECK_FAILED;
	}
	/* the agent turns this into its own "ready" (it polls no URL) */
	events_emit("stage",
		    json_pack("{s:s, s:s, s:f, s:s, s:b}", "stage", "serve",
			      "state", "progress", "progress", 0.0, "msg",
			      "ready (simulated)", "ready", 1));
	while (!sim_term) {
		struct timespec ts = {1, 0};
		nanosleep(&ts, NULL);
		events_emit("sample",
			    json_pack("{s:i, s:s, s:i}", "card", -1, "metric",
				      "serve.running", "value", 1));
	}
	events_stage("serve", "end", 1, 0, arg_first(s));
	return EXIT_OK;
}

static int sim_probe(struct sim *s)
{
	int bad = fails(s, "probe");
	char msg[300];
	events_stage("probe", "start", 0, 0, arg_of(s, "--url"));
	for (int i = 1; i <= 4 && !sim_term; i++)
		work(s, 1, (i - 1) / 4.0, i / 4.0, NULL);
	events_emit("numerics",
		    json_pack("{s:s, s:s, s:f, s:f, s:f}", "level", "e2e",
			      "name", "endpoint", "max_abs", bad ? 0.4 : 0.0083,
			      "kl", 1.0e-5, "top1", bad ? 70.0 : 98.4)); /* a % */
	snprintf(msg, sizeof msg,
		 "4 prompts, 64 positions: top-1 %.1f%% (need 90.0%%), max "
		 "|dlogprob| %.3g (<= 0.1)",
		 bad ? 70.0 : 98.4, bad ? 0.4 : 0.0083);
	events_check("numerics.endpoint", bad ? "fail" : "pass", msg,
		     json_real(bad ? 0.4 : 0.0083), json_real(0.1));
	events_stage("probe", "end", 1, bad, arg_of(s, "--url"));
	return bad ? EXIT_CHECK_FAILED : EXIT_OK;
}

static int sim_load(struct sim *s)
{
	const char *conc = arg_of(s, "--concurrency");
	int levels[8], nl = 0, bad = fails(s, "load");
	double ttft, tpot;
	char msg[300];
	for (const char *p = conc ? conc : "1,8"; p && *p && nl < 8;) {
		levels[nl++] = atoi(p);
		p = strchr(p, ',');
		if (p)
			p++;
	}
	perf_model(s, 20, &ttft, &tpot);
	events_stage("load", "start", 0, 0, arg_of(s, "--url"));
	events_check(
	    "service.api", "pass",
	    "models, health, completion, stream, malformed body -> 400 "
	    "(simulated)",
	    NULL, NULL);
	for (int i = 0; i < nl && !sim_term; i++) {
		double t = tpot * (1 + 0.05 * levels[i]);
		work(s,
		     arg_int(s, "--requests", 16) * (ttft + 16 * t) / 1e3 /
			 (levels[i] > 0 ? levels[i] : 1),
		     (double)i / nl, (i + 1.0) / nl, NULL);
		events_emit("perf",
			    json_pack("{s:i, s:f, s:f, s:f, s:i}",
				      "concurrency", levels[i], "ttft_ms", ttft,
				      "tpot_ms", t, "tokens_per_s",
				      levels[i] * 1000.0 / t, "errors", 0));
	}
	snprintf(msg, sizeof msg,
		 "%d levels, %d errors, 0 stalls; goodput %s at concurrency %d "
		 "(need 90%%)",
		 nl, bad ? 3 : 0, bad ? "62%" : "100%", levels[nl - 1]);
	events_check("service.load", bad ? "fail" : "pass", msg, NULL, NULL);
	events_stage("load", "end", 1, bad, arg_of(s, "--url"));
	return bad ? EXIT_CHECK_FAILED : EXIT_OK;
}

/* Steps without a checklist item of their own: start, work, end. */
static int sim_generic(struct sim *s)
{
	events_stage(s->step, "start", 0, 0, arg_first(s));
	work(s, 1, 0, 1, NULL);
	if (fails(s, s->step)) {
		events_stage(s->step, "end", 1, EXIT_CHECK_FAILED, "simulated");
		return EXIT_CHECK_FAILED;
	}
	events_stage(s->step, "end", 1, 0, arg_first(s));
	return EXIT_OK;
}

static const struct {
	const char *step;
	int (*run)(struct sim *s);
} sim_steps[] = {
    {"verify", sim_verify}, {"inspect", sim_inspect},
    {"plan", sim_plan},	    {"convert", sim_convert},
    {"comm", sim_comm},	    {"gen-model", sim_gen_model},
    {"run", sim_run},	    {"validate", sim_validate},
    {"perf", sim_perf},	    {"soak", sim_soak},
    {"serve", sim_serve},   {"probe", sim_probe},
    {"load", sim_load},	    {"image-check", sim_image_check},
};

/* A positive number, or -1. */
static double positive(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	return end != s && !*end && v > 0 ? v : -1;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"model", 1, 0, 'm'},     {"np", 1, 0, 'n'},
	    {"cards", 1, 0, 'c'},     {"card-mem", 1, 0, 'M'},
	    {"disk-gbps", 1, 0, 'd'}, {"link-gbps", 1, 0, 'l'},
	    {"speed", 1, 0, 's'},     {"scale", 1, 0, 'S'},
	    {"fail", 1, 0, 'f'},      {"seed", 1, 0, 'r'},
	    {"events", 0, 0, 'e'},    {"help", 0, 0, 'h'},
	    {"rehearsal", 0, 0, 'R'}, {0, 0, 0, 0},
	};
	const struct step_entry *S = &step_simulate;
	struct sim s;
	struct d0_err err = {{0}};
	const char *model = NULL, *id = getenv("DAY0_STAGE_ID"),
		   *node = getenv("DAY0_NODE");
	int ch, rehearsal = 0;
	memset(&s, 0, sizeof s);
	s.np = 1;
	s.cards = 8;
	s.card_mem = 80ULL << 30;
	s.disk = 2;
	s.link = 25;
	s.speed = 1;
	s.scale = 1;
	s.seed = 1;
	/* STEP first, then the options up to "--", then the step's own */
	if (argc >= 2 && argv[1][0] != '-') {
		s.step = argv[1];
		argv++;
		argc--;
	}
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		double v = optarg ? positive(optarg) : 0;
		switch (ch) {
		case 'm':
			model = optarg;
			break;
		case 'n':
		case 'c':
			if (v < 1 || v > 1e6 || v != floor(v))
				return step_usage_error(
				    S, "%s: expected a count >= 1, got '%s'",
				    argv[optind - 2], optarg);
			*(ch == 'n' ? &s.np : &s.cards) = (int)v;
			break;
		case 'M':
			if (v < 1)
				return step_usage_error(
				    S, "--card-mem: expected bytes, got '%s'",
				    optarg);
			s.card_mem = (uint64_t)v;
			break;
		case 'd':
		case 'l':
		case 's':
		case 'S':
			if (v <= 0)
				return step_usage_error(
				    S, "%s: expected a number > 0, got '%s'",
				    argv[optind - 2], optarg);
			*(ch == 'd'   ? &s.disk
			  : ch == 'l' ? &s.link
			  : ch == 's' ? &s.speed
				      : &s.scale) = v;
			break;
		case 'f':
			s.fail = optarg;
			break;
		case 'r':
			s.seed = strtoull(optarg, NULL, 10);
			break;
		case 'R':
			rehearsal = 1;
			break;
		case 'e':
			break;
		case 'h':
			step_help(S);
			return EXIT_OK;
		default:
			return step_usage_error(S, "unknown option '%s'",
						argv[optind - 1]);
		}
	}
	if (!s.step)
		return step_usage_error(S, "expected the STEP to simulate");
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	s.argc = argc - optind;
	s.argv = argv + optind;
	s.node = node && *node ? node : "localhost";
	s.stage_id = id && *id ? id : s.step;
	s.tp = arg_int(&s, "--tp", 1);
	s.pp = arg_int(&s, "--pp", 1);
	s.ep = arg_int(&s, "--ep", 1);
	if (arg_of(&s, "--layout") && /* plan's "tp,pp,ep" */
	    sscanf(arg_of(&s, "--layout"), "%d,%d,%d", &s.tp, &s.pp, &s.ep) !=
		3)
		s.tp = s.pp = s.ep = 1;
	if (!model) {
		/* the step's own model argument: a directory with config.json
		 */
		const char *like = arg_of(&s, "--like"),
			   *mm = arg_of(&s, "--model");
		model = like ? like : mm ? mm : arg_first(&s);
	}
	events_init(stdout, 1);
	/* Cancel and timeout end a step as they end the real one (killed by
	 * SIGTERM, no end of its own), except a service, which ends itself
	 * cleanly when the playbook is over. */
	if (!strcmp(s.step, "serve"))
		signal(SIGTERM, on_term);
	if (load_model(&s, model, &err) < 0) {
		fprintf(stderr, "day0-engine: %s\n", err.msg);
		events_stage(s.step, "start", 0, 0, model);
		events_log("error", "simulate: %s", err.msg);
		events_stage(s.step, "end", 1, EXIT_USAGE, err.msg);
		return EXIT_USAGE;
	}
	if (rehearsal) { /* gen-model --like --scale tiny: kilobytes */
		s.params /= 1e6;
		s.active /= 1e6;
		s.disk_bytes /= 1e6;
		s.bf16_bytes /= 1e6;
	}
	for (size_t i = 0; i < sizeof sim_steps / sizeof *sim_steps; i++)
		if (!strcmp(sim_steps[i].step, s.step))
			return sim_steps[i].run(&s);
	return sim_generic(&s);
}
