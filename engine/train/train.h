/*
 * train.h - one fine-tuning step (train.c): a training forward that keeps
 * what backward needs, the backward pass, cross-entropy over shifted
 * labels, AdamW on f32 master weights with bf16/f16/f32 working weights,
 * clipping by the global norm, a dynamic loss scaler, data parallelism
 * with gradient buckets all-reduced while backward runs, ZeRO-1, and
 * pipeline parallelism with the 1F1B schedule over micro-batches.
 * The float64 reference backward the step is checked against is ref_train.c
 * (ref_train.h).  docs/training.md.
 */
#ifndef DAY0_TRAIN_H
#define DAY0_TRAIN_H

#include "engine.h"

#include <mpi.h>

enum train_inject {
	INJECT_NONE,
	INJECT_TRANSPOSE, /* layer 0's o_proj gradient stored transposed */
	INJECT_NO_ALLREDUCE, /* input gradients not summed over TP, nor
			      * weight gradients over DP */
	INJECT_WRONG_SCALE, /* the loss gradient divided by every label,
			     * ignored ones included */
	INJECT_NO_PP_GRAD, /* a stage drops the activation gradient its next
			    * stage sent back (PP) */
};

struct train_cfg {
	int tp, pp, ep, dp;
	int micro;     /* micro-batches a step (the 1F1B schedule's m) */
	int dtype;     /* working weights and gradients: DT_F32/BF16/F16 */
	int zero1;     /* optimizer state (master, m, v) sharded over DP */
	int recompute; /* keep each layer's input only, rebuild in backward */
	double lr, wd, beta1, beta2, eps, clip;
	double scale0;      /* the f16 loss scale to start from */
	int growth;         /* steps without overflow before the scale doubles */
	size_t bucket_bytes; /* DP gradient bucket */
	int inject;
	uint64_t card_mem;
};

struct train_stats {
	double loss, grad_norm, scale, lr;
	int skipped;
	double t_fwd, t_bwd, t_opt, t_comm;
	double t_dp, t_dp_exposed; /* DP all-reduce: in flight, waited for */
	int64_t tokens;
	/* the pipeline (PP): each stage's idle share of the forward-backward
	 * span (on world rank 0, gathered; this stage's elsewhere), their
	 * mean, and the 1F1B schedule's (p-1)/(m+p-1) */
	int pp, micro;
	double bubble_stage[64], bubble, bubble_theory;
};

/* Per category, the bytes this card holds (the accountant's share). */
struct train_mem {
	uint64_t weights, grads, optim, act, scratch, peak;
	uint64_t views; /* of scratch: 16-bit runs' f32 views of the largest
			 * tensor and its gradient */
	uint64_t params, expert_params;
};

struct train;

/* Open dir (a Hugging Face checkpoint) for training: collective over
 * MPI_COMM_WORLD, world = tp x pp x ep x dp, world rank
 * ((dp_rank x pp + pp_rank) x ep + ep_rank) x tp + tp_rank.  Errors name
 * the file, the tensor or the budget. */
int train_open(struct train **t, const char *dir, const struct train_cfg *c,
	       struct d0_err *err);
void train_close(struct train *t);
const struct model_config *train_config(const struct train *t);
int train_rank(const struct train *t);
int train_dp_rank(const struct train *t);

/*
 * Forward and backward of this rank's B sequences of S tokens (labels
 * [B*S], -100 ignored; every stage of a pipeline is given the same), the
 * loss normalised by nvalid, the labels counted over every DP rank.  The
 * B sequences run as cfg.micro micro-batches (the 1F1B schedule when
 * pp > 1).  Gradients are accumulated (zero them with train_zero_grad)
 * and all-reduced over DP.  loss is the global loss, on every rank.
 */
int train_grads(struct train *t, const int64_t *tok, const int64_t *lab,
		int B, int S, int64_t nvalid, double *loss,
		struct train_stats *st, struct d0_err *err);
void train_zero_grad(struct train *t);
/* The loss of the batch without backward (timing reference). */
int train_loss(struct train *t, const int64_t *tok, const int64_t *lab,
	       int B, int S, int64_t nvalid, double *loss, struct d0_err *err);
/* A whole step: grads, overflow check, clipping, AdamW, scaler. */
int train_step(struct train *t, const int64_t *tok, const int64_t *lab,
	       int B, int S, int64_t nvalid, int force_overflow,
	       struct train_stats *st, struct d0_err *err);

/* The parameters (every stage's, the same list on every rank): count, HF
 * name, full shape, and the full unscaled gradient as f32 gathered over
 * TP and EP on world rank 0 (collective over MPI_COMM_WORLD; full must
 * hold rows*cols; the owning stage's ranks get it too). */
int train_nparams(const struct train *t);
const char *train_param_name(const struct train *t, int i);
int64_t train_param_numel(const struct train *t, int i);
int train_param_grad(struct train *t, int i, float *full);
/* The loss scale and the memory per category. */
double train_scale(const struct train *t);
void train_memory(const struct train *t, struct train_mem *m);
/* The last pass's schedule on this stage ("F0 F1 B0 ..."), and every
 * stage's on world rank 0 (collective over MPI_COMM_WORLD; "" elsewhere;
 * the caller frees). */
char *train_schedule(struct train *t);

#endif
