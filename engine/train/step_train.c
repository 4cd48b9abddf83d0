/*
 * step_train.c - `mpirun -np TP*PP*EP*DP day0-engine train MODEL_DIR`: K
 * fine-tuning steps on deterministic synthetic tokens, one `train` event a
 * step (loss, gradient norm, loss scale, skipped, the step time split into
 * forward, backward, optimizer and communication; under PP each stage's
 * bubble against the 1F1B schedule's (p-1)/(m+p-1)), and the training.*
 * checks (docs/training.md):
 *   training.gradients    one step's gradients against the float64
 *                         reference backward (ref_train.c) per tensor, and
 *                         central differences of the reference's loss on a
 *                         few scalar weights per layer type;
 *   training.layouts      the loss curve against a 1-rank run's
 *                         (--reference-losses, written by --losses-out);
 *   training.determinism  the same steps run twice, bit for bit;
 *   training.overflow     --force-overflow: skipped, the f16 scale
 *                         halved, recovered; more than half the steps
 *                         skipped fails it in any run;
 *   training.memory       the accountant's peak per card against plan
 *                         --train's estimate of the same configuration.
 */
#include "engine.h"
#include "ref_train.h"
#include "train.h"
#include "train_memcheck.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

static int run(int argc, char **argv);

const struct step_entry step_train = {
	.name = "train",
	.usage = "MODEL_DIR [--tp N] [--dp N] [--pp N] [--ep N] [--steps K] "
		 "[--lr X] [--seq N] [--batch N | --global-batch N] [--micro-batches "
		 "N | --micro-batch N] [--dtype "
		 "bf16|f16|f32] [--zero1] [--recompute] [--force-overflow STEP] "
		 "[--inject transpose-grad|no-allreduce|wrong-scale|no-pp-grad] "
		 "[--check-grads] [--determinism] [--losses-out FILE] "
		 "[--reference-losses FILE] [--bucket-bytes N] [--growth-interval N] "
		 "[--seed N] [--card-mem SIZE] [--events]  (under mpirun -np "
		 "TP*PP*EP*DP)",
	.summary = "fine-tuning steps with gradient, layout, determinism, overflow "
		   "and memory checks",
	.help = "  --tp N, --dp N       tensor and data parallel ranks (default 1)\n"
		"  --ep N               expert parallel ranks (routed experts split, "
		"tokens all-to-all)\n"
		"  --pp N               pipeline stages (layers split as run splits "
		"them; the 1F1B schedule; at most one stage a layer)\n"
		"  --steps K            optimizer steps (default 3)\n"
		"  --lr X               AdamW learning rate (default 1e-3; betas 0.9, "
		"0.999, weight decay 0.01 on matrices, clip 1.0)\n"
		"  --seq N, --batch N   tokens a sequence (default 16), sequences "
		"per DP rank (default 2)\n"
		"  --global-batch N     sequences a step over every DP rank (the "
		"same as --batch N/DP; N must split over --dp): a 1-rank reference "
		"and a DP run given the same N train on the same sequences\n"
		"  --micro-batches N    the batch split into N micro-batches (must "
		"divide --batch; default 1): PP's 1F1B schedule, gradient "
		"accumulation at PP 1\n"
		"  --micro-batch N      sequences a micro-batch instead (--batch / "
		"N micro-batches; plan --train's --micro-batch)\n"
		"  --dtype D            working weights and gradients: f32 (default), "
		"bf16, f16 (with the dynamic loss scaler)\n"
		"  --zero1              AdamW state sharded over DP\n"
		"  --recompute          keep each layer's input only, rebuild in backward\n"
		"  --force-overflow S   make step S (from 1) overflow\n"
		"  --inject FAULT       a deliberately wrong backward, for the checks' "
		"tests: transpose-grad, no-allreduce, wrong-scale, no-pp-grad (a "
		"stage drops the activation gradient sent back to it)\n"
		"  --check-grads        training.gradients before the first step\n"
		"  --determinism        run the steps twice: training.determinism\n"
		"  --losses-out FILE    write the loss curve; --reference-losses FILE "
		"compares against one: training.layouts\n"
		"  --bucket-bytes N     DP gradient bucket (default 65536; 0: one "
		"blocking all-reduce after backward)\n"
		"  --growth-interval N  steps without overflow before the f16 scale "
		"doubles (default 2000)\n"
		"  --seed N             the synthetic tokens' seed (default 1: the "
		"same data every run)\n"
		"  --card-mem SIZE      each rank's memory budget (bytes, or 64M, "
		"2G): the accountant refuses what does not fit (exit 1, named)\n"
		"  --events             JSON-lines events (train per step, check per "
		"item) on stdout\n"
		"example: mpirun -np 2 day0-engine train /tmp/m --tp 2 --steps 5 "
		"--check-grads --events",
	.run = run,
};

struct opts {
	struct train_cfg c;
	const char *dir, *losses_out, *ref_losses;
	int steps, seq, batch, force, check_grads, determinism, events;
	int global, micro_size; /* --global-batch, --micro-batch (0: not given) */
	int batch_given, micros_given;
	uint64_t seed;
};

/* Token of (seed, batch, sequence, position): splitmix64. */
static int64_t synth(uint64_t seed, int b, int s, int p, int64_t V)
{
	uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)b * 1000003u +
		     (uint64_t)s * 7919u + (uint64_t)p;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (int64_t)(z % (uint64_t)V);
}

/* The global batch of step (two batches cycled, so the loss can fall):
 * labels are the next token; the last position and the first two of
 * every sequence (a prompt the loss skips) are -100. */
static int64_t make_batch(const struct opts *o, int64_t V, int step, int nseq,
			  int64_t *tok, int64_t *lab)
{
	int64_t n = 0;
	for (int s = 0; s < nseq; s++)
		for (int p = 0; p < o->seq; p++) {
			size_t i = (size_t)s * o->seq + p;
			tok[i] = synth(o->seed, step % 2, s, p, V);
		}
	for (int s = 0; s < nseq; s++)
		for (int p = 0; p < o->seq; p++) {
			size_t i = (size_t)s * o->seq + p;
			lab[i] = p < 2 || p == o->seq - 1 ? -100 : tok[i + 1];
			n += lab[i] != -100;
		}
	return n;
}

static const char *layout_name(const struct train_cfg *c, char *b, size_t n)
{
	snprintf(b, n, "tp%dpp%dep%ddp%d", c->tp, c->pp, c->ep, c->dp);
	return b;
}

static int fails;

/* The loss diverged: the last step's more than this times the first's. */
#define TRAIN_DIVERGE 2.0

static void check(int rank, const char *item, int ok, const char *detail,
		  json_t *value, json_t *thr)
{
	if (rank == 0) {
		if (events_enabled())
			events_check(item, ok ? "pass" : "fail", detail, value, thr);
		else {
			printf("%s %s: %s\n", ok ? "PASS" : "FAIL", item, detail);
			json_decref(value);
			json_decref(thr);
		}
	} else {
		json_decref(value);
		json_decref(thr);
	}
	fails += !ok;
}

/* ------------------------------------------------------ the gradients */

static double l2(const double *a, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += a[i] * a[i];
	return sqrt(s);
}

/* Which tensors central differences probe: one per layer type. */
static int fd_kind(const char *name)
{
	if (strstr(name, "embed_tokens"))
		return 0;
	if (strstr(name, "layers.0.input_layernorm"))
		return 1;
	if (strstr(name, "layers.0.self_attn.q_proj.weight") ||
	    strstr(name, "layers.0.self_attn.kv_a_proj_with_mqa.weight"))
		return 2;
	if (strstr(name, ".experts.") && strstr(name, "down"))
		return 3;
	if (strstr(name, "experts.") && strstr(name, ".w2."))
		return 3;
	if (strstr(name, ".gate.weight"))
		return 4;
	return -1;
}

static int check_gradients(struct train *t, const struct opts *o, int rank,
			   struct d0_err *err)
{
	static const char *kinds[] = {"embedding", "norm", "attention", "expert",
				      "router"};
	const struct model_config *c = train_config(t);
	int nseq = o->batch * o->c.dp, dpr = train_dp_rank(t), ng = 0;
	size_t T = (size_t)nseq * o->seq;
	int64_t *tok = malloc(T * 8), *lab = malloc(T * 8), nv;
	double loss = 0, rloss = 0, worst = 0, fd_worst = 0, fd_ref_worst = 0;
	struct ref_tgrad *rg = NULL;
	char worst_name[160] = "", fd_name[200] = "", detail[700];
	int rc = 0, done[5] = {0}, nfd = 0, ok;
	json_t *per = json_array(), *fds = json_array();
	nv = make_batch(o, c->vocab, 0, nseq, tok, lab);
	train_zero_grad(t);
	if (train_grads(t, tok + (size_t)dpr * o->batch * o->seq,
			lab + (size_t)dpr * o->batch * o->seq, o->batch, o->seq, nv,
			&loss, NULL, err) < 0) {
		free(tok);
		free(lab);
		json_decref(per);
		json_decref(fds);
		return -1;
	}
	if (rank == 0 && ref_train_grads(o->dir, tok, lab, nseq, o->seq, nv, NULL,
					 &rloss, &rg, &ng, err) < 0)
		rc = -1;
	MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Bcast(&ng, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (rc < 0) {
		free(tok);
		free(lab);
		json_decref(per);
		json_decref(fds);
		return -1;
	}
	for (int i = 0; i < train_nparams(t); i++) {
		int64_t n = train_param_numel(t, i);
		float *g = malloc((size_t)n * 4);
		train_param_grad(t, i, g); /* collective over TP */
		if (rank == 0) {
			const struct ref_tgrad *r = NULL;
			double d = 0, rel, *diff;
			for (int k = 0; k < ng && !r; k++)
				if (!strcmp(rg[k].name, train_param_name(t, i)))
					r = &rg[k];
			if (!r || r->n != n) {
				rel = INFINITY;
			} else {
				diff = malloc((size_t)n * sizeof(double));
				for (int64_t j = 0; j < n; j++)
					diff[j] = g[j] - r->g[j];
				d = l2(diff, n);
				free(diff);
				rel = d / fmax(l2(r->g, n), 1e-30);
			}
			json_array_append_new(per, json_pack("{s:s, s:f}", "tensor",
							     train_param_name(t, i),
							     "rel_err", isfinite(rel) ? rel : 1e300));
			if (!(rel <= worst)) {
				worst = rel;
				snprintf(worst_name, sizeof worst_name, "%s", train_param_name(t, i));
			}
			/* central differences of the reference's float64 loss on
			 * the element with the largest gradient */
			{
				int k = fd_kind(train_param_name(t, i));
				if (k >= 0 && !done[k] && r && r->n == n) {
					int64_t at = 0;
					double h = 1e-4, lp = 0, lm = 0, fd, e1, e2;
					struct ref_perturb pp = {train_param_name(t, i), 0, h};
					for (int64_t j = 1; j < n; j++)
						if (fabs(r->g[j]) > fabs(r->g[at]))
							at = j;
					if (fabs(r->g[at]) > 1e-7) {
						pp.idx = at;
						pp.delta = h;
						if (ref_train_grads(o->dir, tok, lab, nseq, o->seq, nv,
								    &pp, &lp, NULL, NULL, err) < 0)
							rc = -1;
						pp.delta = -h;
						if (rc == 0 && ref_train_grads(o->dir, tok, lab, nseq,
									       o->seq, nv, &pp, &lm,
									       NULL, NULL, err) < 0)
							rc = -1;
						fd = (lp - lm) / (2 * h);
						e1 = fabs(g[at] - fd) / fabs(fd);
						e2 = fabs(r->g[at] - fd) / fabs(fd);
						done[k] = 1;
						nfd++;
						json_array_append_new(fds, json_pack(
							"{s:s, s:s, s:I, s:f, s:f, s:f, s:f, s:f}",
							"kind", kinds[k], "tensor", train_param_name(t, i),
							"index", (json_int_t)at, "fd", fd, "grad", (double)g[at],
							"ref", r->g[at], "rel_err", e1, "ref_rel_err", e2));
						if (!(e1 <= fd_worst)) {
							fd_worst = e1;
							snprintf(fd_name, sizeof fd_name, "%s [%lld] (%s)",
								 train_param_name(t, i), (long long)at, kinds[k]);
						}
						if (e2 > fd_ref_worst)
							fd_ref_worst = e2;
					}
				}
			}
		}
		free(g);
	}
	MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
	{
		/* 16-bit working weights: the gradients carry the weights' and
		 * their own rounding (bf16 2^-8, f16 2^-11 a value), so the
		 * runtime's gradient against the differences is held to the
		 * per-tensor sanity bound and the loss to bf16's unit
		 * roundoff; the reference against the differences stays at
		 * 1e-4 (it reads the same rounded weights in float64) */
		int f32 = o->c.dtype == DT_F32;
		double bound = f32 ? 1e-5 : 3e-2, fd_bound = f32 ? 1e-4 : bound,
		       loss_bound = f32 ? 1e-5 : 0x1p-8;
		ok = rc == 0 && worst <= bound && fd_worst <= fd_bound &&
		     fd_ref_worst <= 1e-4 &&
		     fabs(loss - rloss) <= loss_bound * fabs(rloss);
		/* the reference ran on rank 0 only: its verdict is every rank's
		 * (the exit status of each rank agrees) */
		MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
		snprintf(detail, sizeof detail,
			 "%d tensors against the float64 reference backward: worst "
			 "relative error %.2e (%s), bound %.0e; central differences on "
			 "%d scalar weights (%s): worst %.2e at %s (reference %.2e), "
			 "bound %.0e (the reference's 1e-4); loss %.9f vs %.9f, "
			 "bound %.1e relative",
			 train_nparams(t), worst, worst_name, bound, nfd,
			 "embedding, norm, attention, expert, router where present",
			 fd_worst, fd_name[0] ? fd_name : "-", fd_ref_worst, fd_bound,
			 loss, rloss, loss_bound);
		if (rc < 0)
			snprintf(detail, sizeof detail, "%.600s", err->msg);
		check(rank, "training.gradients", ok, detail,
		      json_pack("{s:f, s:s, s:f, s:o, s:o}", "worst_rel_err", worst,
				"worst_tensor", worst_name, "fd_worst", fd_worst,
				"tensors", per, "finite_differences", fds),
		      json_pack("{s:f, s:f, s:f, s:f}", "rel_err", bound, "fd_rel_err",
				fd_bound, "fd_ref_rel_err", 1e-4, "loss_rel_err",
				loss_bound));
	}
	ref_tgrads_free(rg, ng);
	free(tok);
	free(lab);
	return 0;
}

/* ------------------------------------------------------------ the run */

struct curve {
	double *loss, *norm, *scale;
	int *skipped;
};

static int run_steps(const struct opts *o, int rank, int emit, struct curve *cv,
		     struct train_mem *mem, struct d0_err *err)
{
	struct train *t = NULL;
	int nseq = o->batch * o->c.dp, rc = 0;
	size_t T = (size_t)nseq * o->seq;
	int64_t *tok = malloc(T * 8), *lab = malloc(T * 8);
	char lay[64];
	if (train_open(&t, o->dir, &o->c, err) < 0) {
		train_close(t);
		free(tok);
		free(lab);
		return -1;
	}
	if (emit && o->check_grads && check_gradients(t, o, rank, err) < 0)
		rc = -1;
	for (int s = 0; s < o->steps && rc == 0; s++) {
		struct train_stats st;
		int dpr = train_dp_rank(t);
		int64_t nv = make_batch(o, train_config(t)->vocab, s, nseq, tok, lab);
		if (train_step(t, tok + (size_t)dpr * o->batch * o->seq,
			       lab + (size_t)dpr * o->batch * o->seq, o->batch, o->seq,
			       nv, o->force == s + 1, &st, err) < 0) {
			rc = -1;
			break;
		}
		if (emit && s == 0 && (o->c.pp > 1 || o->c.micro > 1)) {
			/* the order each stage ran its micro-batches in */
			char *sched = train_schedule(t); /* collective */
			if (rank == 0) {
				if (events_enabled())
					events_log("info", "pipeline schedule 1F1B, pp %d, "
						   "%d micro-batches: %s", o->c.pp,
						   o->c.micro, sched);
				else
					printf("schedule 1F1B pp %d micro-batches %d: %s\n",
					       o->c.pp, o->c.micro, sched);
			}
			free(sched);
		}
		cv->loss[s] = st.loss;
		cv->norm[s] = st.grad_norm;
		cv->scale[s] = st.scale;
		cv->skipped[s] = st.skipped;
		if (emit && rank == 0) {
			if (events_enabled()) {
				/* a figure that is not finite cannot be JSON: left out
				 * (docs/protocol.md's train event) */
				json_t *ev = json_pack(
					"{s:i, s:f, s:i, s:f, s:I, s:f, s:f, s:f, s:f, s:s}",
					"step", s + 1, "loss_scale", st.scale, "skipped",
					st.skipped, "lr", st.lr, "tokens", (json_int_t)st.tokens,
					"t_fwd_s", st.t_fwd, "t_bwd_s", st.t_bwd, "t_opt_s",
					st.t_opt, "t_comm_s", st.t_comm, "layout",
					layout_name(&o->c, lay, sizeof lay));
				if (isfinite(st.loss))
					json_object_set_new(ev, "loss", json_real(st.loss));
				if (isfinite(st.grad_norm))
					json_object_set_new(ev, "grad_norm", json_real(st.grad_norm));
				json_object_set_new(ev, "micro_batches", json_integer(st.micro));
				if (st.pp > 1) {
					/* each stage's idle share of the forward-backward
					 * span, against 1F1B's (p-1)/(m+p-1) */
					json_t *b = json_array();
					for (int k = 0; k < st.pp && k < 64; k++)
						json_array_append_new(b, json_real(st.bubble_stage[k]));
					json_object_set_new(ev, "bubble_stages", b);
					json_object_set_new(ev, "bubble", json_real(st.bubble));
					json_object_set_new(ev, "bubble_theory",
							    json_real(st.bubble_theory));
				}
				events_emit("train", ev);
			} else {
				printf("step %d loss %.6f grad_norm %.4g scale %g%s fwd %.3fs "
				       "bwd %.3fs opt %.3fs comm %.3fs", s + 1, st.loss,
				       st.grad_norm, st.scale, st.skipped ? " SKIPPED" : "",
				       st.t_fwd, st.t_bwd, st.t_opt, st.t_comm);
				if (st.pp > 1)
					printf(" bubble %.3f (1F1B %.3f)", st.bubble,
					       st.bubble_theory);
				printf("\n");
			}
			fflush(stdout);
		}
	}
	train_memory(t, mem);
	train_close(t);
	free(tok);
	free(lab);
	return rc;
}

/* ------------------------------------------------- the loss curve file */

/*
 * --losses-out's file, JSON: {"losses": [one a step, null where not
 * finite], "steps", "seq", "sequences" (a step's, global), "seed",
 * "dtype", "layout"}.  Written to a temporary name in the file's
 * directory (created before training, so a directory that cannot take it
 * is refused up front) and renamed into place when complete.
 */
struct losses_out {
	char *tmp; /* NULL: none open */
	int fd;
};

/*
 * The temporary's name while it is open, for what removes it when the
 * job dies before the rename: mpirun's SIGTERM (sent to the ranks left
 * when another rank dies or is killed, or when mpirun itself is
 * stopped; SIGINT and SIGHUP alike), an MPI error on a communicator of
 * the run (the handler is set on MPI_COMM_WORLD before train.c splits
 * it, so its communicators inherit it), and rank 0's exit().  Every rank
 * knows the name (rank 0 sends it) and removes it on a signal or an MPI
 * error: mpirun sometimes kills rank 0 outright once another rank is
 * gone, and a rank on the same file system removes it then.  A SIGKILL
 * of every rank that sees the file (rank 0 alone on its node, kill -9)
 * cannot be caught: that temporary stays (docs/training.md).
 */
static char *volatile lo_tmp_path;
static char *lo_other_tmp; /* another rank's copy of rank 0's name */

static void lo_remove(void)
{
	char *p = lo_tmp_path;
	if (p)
		unlink(p); /* async-signal-safe */
}

static void lo_signal(int sig)
{
	lo_remove();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void lo_mpi_error(MPI_Comm *comm, int *code, ...)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	(void)comm;
	lo_remove();
	MPI_Error_string(*code, msg, &len);
	fprintf(stderr, "day0-engine: train: MPI error: %.*s\n", len, msg);
	MPI_Abort(MPI_COMM_WORLD, EXIT_CHECK_FAILED);
}

static void lo_guard(const char *tmp, int writer)
{
	static int armed;
	MPI_Errhandler eh;
	lo_tmp_path = (char *)tmp;
	MPI_Comm_create_errhandler(lo_mpi_error, &eh);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
	if (!armed) {
		static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = lo_signal;
		sigemptyset(&sa.sa_mask);
		for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
			sigaction(sigs[i], &sa, NULL);
		/* the writer only: another rank's normal exit may come before
		 * rank 0's rename */
		if (writer)
			atexit(lo_remove);
		armed = 1;
	}
}

static int losses_out_begin(struct losses_out *lo, const char *path,
			    char *why, size_t n)
{
	size_t k = strlen(path);
	if (path_is_dir(path)) {
		snprintf(why, n, "--losses-out %s: is a directory (expected a "
			 "file name)", path);
		return -1;
	}
	lo->tmp = malloc(k + 16);
	snprintf(lo->tmp, k + 16, "%s.tmp-XXXXXX", path);
	lo->fd = mkstemp(lo->tmp);
	if (lo->fd < 0) {
		snprintf(why, n, "--losses-out %s: cannot create a file in its "
			 "directory: %s", path, strerror(errno));
		free(lo->tmp);
		lo->tmp = NULL;
		return -1;
	}
	return 0;
}

static void losses_out_abort(struct losses_out *lo)
{
	if (!lo->tmp)
		return;
	lo_tmp_path = NULL;
	close(lo->fd);
	unlink(lo->tmp);
	free(lo->tmp);
	lo->tmp = NULL;
}

static json_t *finite_or_null(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

static int losses_out_commit(struct losses_out *lo, const char *path,
			     const struct opts *o, const double *loss,
			     char *why, size_t n)
{
	char lay[64], *txt;
	json_t *a = json_array(), *doc;
	int rc = 0;
	for (int i = 0; i < o->steps; i++)
		json_array_append_new(a, finite_or_null(loss[i]));
	doc = json_pack("{s:o, s:i, s:i, s:i, s:I, s:s, s:s}", "losses", a,
			"steps", o->steps, "seq", o->seq, "sequences",
			o->batch * o->c.dp, "seed", (json_int_t)o->seed, "dtype",
			o->c.dtype == DT_F32 ? "f32" : o->c.dtype == DT_BF16 ? "bf16"
									 : "f16",
			"layout", layout_name(&o->c, lay, sizeof lay));
	txt = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(17) |
				      JSON_PRESERVE_ORDER);
	json_decref(doc);
	if (!txt || write_full(lo->fd, txt, strlen(txt)) < 0 ||
	    write_full(lo->fd, "\n", 1) < 0) {
		snprintf(why, n, "--losses-out %s: cannot write: %s", path,
			 txt ? strerror(errno) : "out of memory");
		rc = -1;
	}
	free(txt);
	if (rc == 0 && close(lo->fd) < 0) {
		snprintf(why, n, "--losses-out %s: cannot write: %s", path,
			 strerror(errno));
		rc = -1;
	}
	lo->fd = -1;
	if (rc == 0 && rename(lo->tmp, path) < 0) {
		snprintf(why, n, "--losses-out %s: cannot rename %s to it: %s",
			 path, lo->tmp, strerror(errno));
		rc = -1;
	}
	if (rc < 0)
		unlink(lo->tmp);
	lo_tmp_path = NULL;
	free(lo->tmp);
	lo->tmp = NULL;
	return rc;
}

/*
 * --reference-losses: a --losses-out file of the same steps, sequence
 * length, global batch and seed (the curves compared are of the same
 * data); out gets o->steps losses (NaN for a null).  -1 with why: a file
 * that does not read or parse, or that is of another run.
 */
static int ref_losses_load(const char *path, const struct opts *o,
			   double *out, char *why, size_t n)
{
	json_error_t je;
	json_t *doc = json_load_file(path, 0, &je), *a, *v;
	int rc = -1;
	size_t i;
	json_int_t steps;
	if (!doc) {
		if (je.line < 1)
			snprintf(why, n, "--reference-losses %s: %s", path, je.text);
		else
			snprintf(why, n, "--reference-losses %s: line %d column %d: "
				 "%s (expected a --losses-out file)", path, je.line,
				 je.column, je.text);
		return -1;
	}
	a = json_object_get(doc, "losses");
	if (!json_is_object(doc) || !json_is_array(a)) {
		snprintf(why, n, "--reference-losses %s: expected an object with a "
			 "\"losses\" array (a --losses-out file)", path);
		goto done;
	}
	json_array_foreach(a, i, v) {
		if (!json_is_number(v) && !json_is_null(v)) {
			snprintf(why, n, "--reference-losses %s: losses[%zu]: "
				 "expected a number or null", path, i);
			goto done;
		}
	}
	steps = (json_int_t)json_array_size(a);
	if (steps != o->steps) {
		snprintf(why, n, "--reference-losses %s holds %lld steps, this run "
			 "has --steps %d: the curves compared must be of the same "
			 "steps", path, (long long)steps, o->steps);
		goto done;
	}
#define SAME(key, mine, what)                                                  \
	do {                                                                   \
		json_t *x_ = json_object_get(doc, key);                        \
		if (x_ && !(json_is_integer(x_) &&                             \
			    json_integer_value(x_) == (json_int_t)(mine))) {   \
			char *d_ = json_dumps(x_, JSON_ENCODE_ANY);            \
			snprintf(why, n, "--reference-losses %s: \"%s\": the " \
				 "reference ran %s, this run %lld (%s)", path, \
				 key, d_ ? d_ : "?", (long long)(mine), what); \
			free(d_);                                              \
			goto done;                                             \
		}                                                              \
	} while (0)
	SAME("seq", o->seq, "--seq: tokens a sequence");
	SAME("sequences", o->batch * o->c.dp,
	     "sequences a step, --batch x DP: the same global batch");
	SAME("seed", o->seed, "--seed: the synthetic tokens");
#undef SAME
	json_array_foreach(a, i, v)
		out[i] = json_is_number(v) ? json_number_value(v) : NAN;
	rc = 0;
done:
	json_decref(doc);
	return rc;
}

/* --seq within the model's positions (config.json's
 * max_position_embeddings); a config that does not load is left to
 * train_open to name. */
static int seq_fits(const char *dir, int seq, char *why, size_t n)
{
	struct model_config c;
	struct d0_err e;
	char *cp = path_join(dir, "config.json");
	int rc = 0;
	if (model_config_load(cp, &c, &e) == 0) {
		if (c.max_pos > 0 && seq > c.max_pos) {
			snprintf(why, n, "--seq %d is past %s's "
				 "max_position_embeddings %lld (positions the "
				 "model has no rotary training for)", seq, cp,
				 (long long)c.max_pos);
			rc = -1;
		}
		model_config_free(&c);
	}
	free(cp);
	return rc;
}

static int parse_dtype(const char *s)
{
	return !strcmp(s, "f32") ? DT_F32 : !strcmp(s, "bf16") ? DT_BF16
					: !strcmp(s, "f16") ? DT_F16 : -1;
}

static int run(int argc, char **argv)
{
	static const struct option lo[] = {
		{"tp", 1, 0, 't'}, {"dp", 1, 0, 'd'}, {"pp", 1, 0, 'p'}, {"ep", 1, 0, 'e'},
		{"steps", 1, 0, 'k'}, {"lr", 1, 0, 'l'}, {"seq", 1, 0, 's'},
		{"batch", 1, 0, 'b'}, {"micro-batches", 1, 0, 'm'}, {"dtype", 1, 0, 'D'},
		{"global-batch", 1, 0, 'A'}, {"micro-batch", 1, 0, 'u'},
		{"zero1", 0, 0, 'z'}, {"recompute", 0, 0, 'r'},
		{"force-overflow", 1, 0, 'f'}, {"inject", 1, 0, 'i'},
		{"check-grads", 0, 0, 'g'}, {"determinism", 0, 0, 'R'},
		{"losses-out", 1, 0, 'o'}, {"reference-losses", 1, 0, 'L'},
		{"bucket-bytes", 1, 0, 'B'}, {"growth-interval", 1, 0, 'G'},
		{"seed", 1, 0, 'S'}, {"card-mem", 1, 0, 'c'}, {"events", 0, 0, 'E'},
		{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
	const struct step_entry *S = &step_train;
	struct opts o;
	struct d0_err err = {{0}};
	char why[300] = "";
	int ch, rank, bad = 0, rc = 0;
	long v;
	struct curve cv, cv2;
	struct train_mem mem;
	struct losses_out lout = {NULL, -1};
	double *ref = NULL;
	char diverged[300] = "";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	memset(&o, 0, sizeof o);
	o.c = (struct train_cfg){.tp = 1, .pp = 1, .ep = 1, .dp = 1, .micro = 1,
				 .dtype = DT_F32,
				 .lr = 1e-3, .wd = 0.01, .beta1 = 0.9, .beta2 = 0.999,
				 .eps = 1e-8, .clip = 1.0, .scale0 = 65536, .growth = 2000,
				 .bucket_bytes = 65536};
	o.steps = 3;
	o.seq = 16;
	o.batch = 2;
	o.seed = 1;
	optind = 1;
	opterr = 0;
#define NUM(lo_, hi_, dst, what)                                               \
	do {                                                                   \
		if (parse_long(optarg, lo_, hi_, &v) < 0) {                    \
			snprintf(why, sizeof why, "%s: expected %ld..%ld, got '%s'", \
				 what, (long)(lo_), (long)(hi_), optarg);      \
			bad = 1;                                               \
		} else                                                         \
			dst = (int)v;                                          \
	} while (0)
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 't': NUM(1, 64, o.c.tp, "--tp"); break;
		case 'd': NUM(1, 64, o.c.dp, "--dp"); break;
		case 'p': NUM(1, 64, o.c.pp, "--pp"); break;
		case 'e': NUM(1, 64, o.c.ep, "--ep"); break;
		case 'k': NUM(1, 100000, o.steps, "--steps"); break;
		case 's': NUM(2, 4096, o.seq, "--seq"); break;
		case 'b': NUM(1, 4096, o.batch, "--batch"); o.batch_given = 1; break;
		case 'm': NUM(1, 4096, o.c.micro, "--micro-batches"); o.micros_given = 1; break;
		case 'A': NUM(1, 1 << 18, o.global, "--global-batch"); break;
		case 'u': NUM(1, 4096, o.micro_size, "--micro-batch"); break;
		case 'f': NUM(1, 100000, o.force, "--force-overflow"); break;
		case 'G': NUM(1, 1000000, o.c.growth, "--growth-interval"); break;
		case 'S': NUM(0, 1L << 30, o.seed, "--seed"); break;
		case 'B':
			if (parse_long(optarg, 0, 1L << 30, &v) < 0) {
				snprintf(why, sizeof why, "--bucket-bytes: expected bytes, "
					 "got '%s'", optarg);
				bad = 1;
			} else
				o.c.bucket_bytes = (size_t)v;
			break;
		case 'c': {
			/* as run's and serve's: bytes, or 64M, 2G, 1GiB */
			uint64_t cm;
			if (parse_size(optarg, &cm) < 0 || !cm) {
				snprintf(why, sizeof why, "--card-mem: expected bytes per "
					 "card (e.g. 2000000, 64M, 2G), got '%s'", optarg);
				bad = 1;
			} else
				o.c.card_mem = cm;
			break;
		}
		case 'l': {
			char *end;
			o.c.lr = strtod(optarg, &end);
			if (*end || !(o.c.lr >= 0 && o.c.lr < 10)) {
				snprintf(why, sizeof why, "--lr: expected a rate in [0, 10), "
					 "got '%s'", optarg);
				bad = 1;
			}
			break;
		}
		case 'D':
			if ((o.c.dtype = parse_dtype(optarg)) < 0) {
				snprintf(why, sizeof why, "--dtype: expected bf16, f16 or "
					 "f32, got '%s'", optarg);
				bad = 1;
			}
			break;
		case 'i':
			o.c.inject = !strcmp(optarg, "transpose-grad") ? INJECT_TRANSPOSE
				     : !strcmp(optarg, "no-allreduce") ? INJECT_NO_ALLREDUCE
				     : !strcmp(optarg, "wrong-scale") ? INJECT_WRONG_SCALE
				     : !strcmp(optarg, "no-pp-grad") ? INJECT_NO_PP_GRAD : -1;
			if (o.c.inject < 0) {
				snprintf(why, sizeof why, "--inject: expected transpose-grad, "
					 "no-allreduce, wrong-scale or no-pp-grad, got '%s'",
					 optarg);
				bad = 1;
			}
			break;
		case 'z': o.c.zero1 = 1; break;
		case 'r': o.c.recompute = 1; break;
		case 'g': o.check_grads = 1; break;
		case 'R': o.determinism = 1; break;
		case 'o': o.losses_out = optarg; break;
		case 'L': o.ref_losses = optarg; break;
		case 'E': o.events = 1; break;
		case 'h':
			if (!rank)
				step_help(S);
			MPI_Finalize();
			return EXIT_OK;
		default:
			snprintf(why, sizeof why, "unknown option '%s'", argv[optind - 1]);
			bad = 1;
		}
	}
#undef NUM
	/* the overflow check needs the forced step and one after it (the
	 * scale halved, training recovered) */
	if (!bad && o.force > o.steps) {
		snprintf(why, sizeof why, "--force-overflow %d is past --steps %d",
			 o.force, o.steps);
		bad = 1;
	} else if (!bad && o.force && o.force == o.steps) {
		snprintf(why, sizeof why, "--force-overflow %d is the last of "
			 "--steps %d: training.overflow needs a step after it (the "
			 "step applied; at f16 the scale halved)", o.force, o.steps);
		bad = 1;
	}
	/* --global-batch and --micro-batch: plan --train's workload, the
	 * rank's --batch and --micro-batches from them */
	if (!bad && o.global && o.batch_given) {
		snprintf(why, sizeof why, "--global-batch and --batch exclude each "
			 "other (--batch is a DP rank's sequences, --global-batch "
			 "all of DP's): give one");
		bad = 1;
	} else if (!bad && o.micro_size && o.micros_given) {
		snprintf(why, sizeof why, "--micro-batch and --micro-batches "
			 "exclude each other (sequences a micro-batch, or how many "
			 "micro-batches): give one");
		bad = 1;
	} else if (!bad && o.global) {
		if (o.global % o.c.dp || o.global / o.c.dp > 4096) {
			snprintf(why, sizeof why, "--global-batch %d does not split "
				 "over --dp %d (each DP rank takes the same number "
				 "of sequences, 1..4096)", o.global, o.c.dp);
			bad = 1;
		} else
			o.batch = o.global / o.c.dp;
	}
	if (!bad && o.micro_size) {
		if (o.batch % o.micro_size) {
			snprintf(why, sizeof why, "--micro-batch %d: the %d sequences "
				 "a DP rank%s do not split into micro-batches of %d",
				 o.micro_size, o.batch, o.global ? " (--global-batch "
				 "over --dp)" : "", o.micro_size);
			bad = 1;
		} else
			o.c.micro = o.batch / o.micro_size;
	}
	if (!bad && o.batch % o.c.micro) {
		snprintf(why, sizeof why, "--micro-batches %d: --batch %d sequences "
			 "a rank do not split into %d micro-batches", o.c.micro,
			 o.batch, o.c.micro);
		bad = 1;
	}
	if (bad || optind != argc - 1) {
		if (!rank)
			step_usage_error(S, "%s", why[0] ? why : "expected MODEL_DIR");
		MPI_Finalize();
		return EXIT_USAGE;
	}
	o.dir = argv[optind];
	/* what the run reads and writes, before any step: a reference curve
	 * that does not parse or is of another run, a loss file that cannot
	 * be made, a sequence past the model's positions (exit 2) */
	if (o.ref_losses)
		ref = calloc((size_t)o.steps, sizeof(double));
	{
		int pre = 0;
		if (rank == 0)
			pre = seq_fits(o.dir, o.seq, why, sizeof why) < 0 ||
			      (o.ref_losses && ref_losses_load(o.ref_losses, &o, ref,
							       why, sizeof why) < 0) ||
			      (o.losses_out && losses_out_begin(&lout, o.losses_out,
								why, sizeof why) < 0);
		MPI_Bcast(&pre, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (pre) {
			if (rank == 0)
				fprintf(stderr, "day0-engine: train: %s\n", why);
			losses_out_abort(&lout);
			free(ref);
			MPI_Finalize();
			return EXIT_USAGE;
		}
		if (ref)
			MPI_Bcast(ref, o.steps, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	}
	if (o.losses_out) {
		/* every rank learns the temporary's name: a signal or an MPI
		 * error on any of them removes it (lo_guard) */
		int len = rank == 0 ? (int)strlen(lout.tmp) + 1 : 0;
		MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (rank != 0)
			lo_other_tmp = calloc((size_t)len, 1);
		MPI_Bcast(rank == 0 ? lout.tmp : lo_other_tmp, len, MPI_CHAR, 0,
			  MPI_COMM_WORLD);
		lo_guard(rank == 0 ? lout.tmp : lo_other_tmp, rank == 0);
	}
	events_init(stdout, o.events);
	cv.loss = calloc((size_t)o.steps, sizeof(double));
	cv.norm = calloc((size_t)o.steps, sizeof(double));
	cv.scale = calloc((size_t)o.steps, sizeof(double));
	cv.skipped = calloc((size_t)o.steps, sizeof(int));
	cv2 = cv;
	if (rank == 0)
		events_stage("train", "start", 0, 0, NULL);
	if (run_steps(&o, rank, 1, &cv, &mem, &err) < 0) {
		if (rank == 0)
			fprintf(stderr, "day0-engine: train: %s\n", err.msg);
		/* over the card's budget is a finding (as run's), not bad input */
		rc = strstr(err.msg, "does not fit") ? EXIT_CHECK_FAILED : EXIT_USAGE;
		goto out;
	}
	/* training.memory: the busiest card against plan --train's figure
	 * (train_memcheck.c) */
	{
		struct train_memcheck_run mr = {&o.c, o.seq, o.batch, o.c.micro};
		struct train_memcheck mc;
		if (train_memcheck(o.dir, &mr, &mem, &mc, &err) < 0)
			check(rank, "training.memory", 0, err.msg, NULL, NULL);
		else
			check(rank, "training.memory", mc.ok, mc.detail, mc.value,
			      json_real(TRAIN_MEMCHECK_BOUND));
	}
	/* training.overflow: the forced step skipped (f16: the scale halved;
	 * f32 and bf16 have no loss scaler, the scale stays 1) and every step
	 * after it applied; and in any run, more than half the steps skipped
	 * is the scaler (or the gradients) never recovering */
	{
		int s = o.force - 1, ok = 1, nskip = 0, f16 = o.c.dtype == DT_F16;
		char detail[900], hist[300] = "", skipped[200] = "", why_not[400] = "";
		const char *dt = f16 ? "f16" : o.c.dtype == DT_BF16 ? "bf16" : "f32";
		for (int i = 0; i < o.steps; i++) {
			size_t n = strlen(hist), k = strlen(skipped);
			snprintf(hist + n, sizeof hist - n, "%s%g%s", i ? " " : "",
				 cv.scale[i], cv.skipped[i] ? "(skip)" : "");
			if (cv.skipped[i]) {
				nskip++;
				snprintf(skipped + k, sizeof skipped - k, "%s%d",
					 k ? " " : "", i + 1);
			}
		}
#define WHY(...)                                                               	do {                                                                   		size_t n_ = strlen(why_not);                                   		snprintf(why_not + n_, sizeof why_not - n_, "%s", n_ ? "; " : ""); 		n_ = strlen(why_not);                                          		snprintf(why_not + n_, sizeof why_not - n_, __VA_ARGS__);      		ok = 0;                                                        	} while (0)
		if (o.force) {
			if (!cv.skipped[s])
				WHY("step %d not skipped", o.force);
			if (f16 && s + 1 < o.steps && cv.scale[s + 1] != cv.scale[s] / 2)
				WHY("the scale not halved after it (%g, then %g)",
				    cv.scale[s], cv.scale[s + 1]);
			for (int i = s + 1; i < o.steps; i++)
				if (cv.skipped[i] || !isfinite(cv.loss[i])) {
					WHY("step %d after it %s", i + 1, cv.skipped[i]
					    ? "skipped too" : "has a loss that is not finite");
					break;
				}
		}
		if (2 * nskip > o.steps)
			WHY("the %s never recovered: %d of %d steps skipped (%s), "
			    "their gradients not finite", f16 ? "loss scaler" :
			    "training (no loss scaler at this dtype)", nskip, o.steps,
			    skipped);
#undef WHY
		if (o.force && ok && f16)
			snprintf(detail, sizeof detail, "step %d forced to overflow "
				 "(its gradients past f16's range): skipped, the scale "
				 "halved (%g to %g), the steps after it applied; the "
				 "scale a step: %s", o.force, cv.scale[s],
				 cv.scale[s + 1], hist);
		else if (o.force && ok)
			snprintf(detail, sizeof detail, "step %d forced to overflow "
				 "(one gradient set to inf): skipped, the steps after it "
				 "applied; no loss scaler at %s: the scale stays 1; the "
				 "scale a step: %s", o.force, dt,
				 hist);
		else if (!ok && o.force)
			snprintf(detail, sizeof detail, "step %d forced to overflow "
				 "(%s): %s; the scale a step: %s", o.force, dt,
				 why_not, hist);
		else if (!ok)
			snprintf(detail, sizeof detail, "%s; the scale a step: %s",
				 why_not, hist);
		if (o.force || !ok) {
			json_t *sc = json_array();
			for (int i = 0; i < o.steps; i++)
				json_array_append_new(sc, json_real(cv.scale[i]));
			check(rank, "training.overflow", ok, detail,
			      json_pack("{s:o, s:i, s:i, s:s}", "scale_history", sc,
					"step", o.force, "skipped", nskip, "dtype", dt),
			      NULL);
		}
	}
	/* the loss diverged: the last step's loss not finite, or more than
	 * twice the first's (a learning rate too large); said where the
	 * evidence is (stderr, a log event, the exit status 1), not left to
	 * a later comparison of curves to find */
	{
		double l0 = cv.loss[0], l1 = cv.loss[o.steps - 1];
		if (o.steps > 1 && (!isfinite(l1) || l1 > TRAIN_DIVERGE * l0)) {
			snprintf(diverged, sizeof diverged, "the loss diverged: %.6g at "
				 "step 1, %.6g at step %d (%s; --lr %g): not training",
				 l0, l1, o.steps, isfinite(l1) ? "more than twice the "
				 "first" : "not finite", o.c.lr);
			if (rank == 0) {
				fprintf(stderr, "day0-engine: train: %s\n", diverged);
				if (events_enabled())
					events_log("error", "%s", diverged);
			}
		}
	}
	/* training.layouts */
	if (lout.tmp && losses_out_commit(&lout, o.losses_out, &o, cv.loss, why,
					  sizeof why) < 0) {
		fprintf(stderr, "day0-engine: train: %s\n", why);
		rc = EXIT_USAGE;
	}
	if (ref) {
		/* the reference was read and checked before the steps: the same
		 * steps, sequence length, global batch and seed */
		double bound = o.c.dtype == DT_F32 ? 1e-5 : 2e-2, worst = 0, first = 0;
		int n = 0, ok = 1, grow_ok;
		char detail[1600], errs[500] = "";
		json_t *ev = json_array();
		for (; n < o.steps; n++) {
			double x = ref[n], e = fabs(cv.loss[n] - x) / fabs(x);
			size_t l = strlen(errs);
			json_array_append_new(ev, finite_or_null(e));
			snprintf(errs + l, sizeof errs - l, "%s%.1e", n ? " " : "", e);
			if (n == 0)
				first = e;
			if (!(e <= worst))
				worst = e;
			ok &= e <= bound;
		}
		/* not diverging: the last step's error within 10x the first's,
		 * or within a tenth of the bound */
		grow_ok = n < 2 || worst <= bound / 10 || worst <= 10 * first + 1e-7;
		snprintf(detail, sizeof detail, "%d steps at %s against the 1-rank curve "
			 "%.300s: relative loss error a step %s; worst %.2e, bound %.0e, %s",
			 n, layout_name(&o.c, why, sizeof why), o.ref_losses, errs, worst,
			 bound, grow_ok ? "not growing" : "growing");
		{
			/* a curve that diverged (the reference's or this run's)
			 * says nothing of the layout: the error between two
			 * diverging runs grows whatever the split */
			double r0 = ref[0], r1 = ref[o.steps - 1];
			int rdiv = o.steps > 1 && (!isfinite(r1) || r1 > TRAIN_DIVERGE * r0);
			if (rdiv || diverged[0]) {
				size_t l = strlen(detail);
				snprintf(detail + l, sizeof detail - l, "; the loss "
					 "diverged (the reference %.6g to %.6g, this run "
					 "%.6g to %.6g over %d steps): a learning rate too "
					 "large (--lr %g), not the layout, when both grow",
					 r0, r1, cv.loss[0], cv.loss[o.steps - 1], o.steps,
					 o.c.lr);
			}
		}
		check(rank, "training.layouts", ok && grow_ok && n == o.steps, detail,
		      json_pack("{s:o, s:o}", "rel_err_per_step", ev, "worst",
				finite_or_null(worst)),
		      json_real(bound));
	}
	/* training.determinism: the same steps again, bit for bit */
	if (o.determinism) {
		struct train_mem m2;
		char detail[800];
		int same;
		cv2.loss = calloc((size_t)o.steps, sizeof(double));
		cv2.norm = calloc((size_t)o.steps, sizeof(double));
		cv2.scale = calloc((size_t)o.steps, sizeof(double));
		cv2.skipped = calloc((size_t)o.steps, sizeof(int));
		struct opts o2 = o;
		o2.check_grads = 0;
		if (run_steps(&o2, rank, 0, &cv2, &m2, &err) < 0) {
			rc = EXIT_USAGE;
		} else {
			same = !memcmp(cv.loss, cv2.loss, sizeof(double) * (size_t)o.steps) &&
			       !memcmp(cv.norm, cv2.norm, sizeof(double) * (size_t)o.steps);
			snprintf(detail, sizeof detail, "two runs of %d steps at %s: losses "
				 "and gradient norms %s (fixed reduction order: sums in "
				 "index order, MPI's fixed all-reduce algorithms for a "
				 "given size)", o.steps, layout_name(&o.c, why, sizeof why),
				 same ? "bitwise equal" : "differ");
			check(rank, "training.determinism", same, detail,
			      json_pack("{s:f, s:f}", "loss_a", cv.loss[o.steps - 1],
					"loss_b", cv2.loss[o.steps - 1]), NULL);
		}
		free(cv2.loss);
		free(cv2.norm);
		free(cv2.scale);
		free(cv2.skipped);
	}
	if (rc == 0 && (fails || diverged[0]))
		rc = EXIT_CHECK_FAILED;
out:
	if (rank == 0)
		events_stage("train", "end", 1, rc, NULL);
	losses_out_abort(&lout);
	lo_tmp_path = NULL;
	free(lo_other_tmp);
	lo_other_tmp = NULL;
	free(ref);
	free(cv.loss);
	free(cv.norm);
	free(cv.scale);
	free(cv.skipped);
	MPI_Finalize();
	return rc;
}
