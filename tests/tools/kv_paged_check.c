/*
 * kv_paged_check - the paged KV cache's attention against the contiguous
 * layout, bit for bit, under mpirun at any layout:
 *
 *   mpirun -np N kv_paged_check MODEL TP PP EP BLOCK_TOKENS
 *
 * Opens MODEL twice: with one block of max_ctx tokens per slot (the
 * contiguous layout run and perf use) and paged in blocks of BLOCK_TOKENS.
 * Two sequences go through both in the same steps (prompts in chunks that
 * cross block boundaries, two segments a batch, then decode steps); the
 * paged sequences' blocks are scattered out of order and interleaved.  The
 * logits of every step must be the same bits (attention reads the blocks
 * in place with the sums of the contiguous run).  Prints one line on the
 * last stage's root; exit 0 when equal, 1 when a logit differs, 2 on a
 * usage or start-up error.
 */
#include "engine.h"
#include "rt_batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define CTX 64

int main(int argc, char **argv)
{
	struct layout_dims d;
	struct rt *flat = NULL, *paged = NULL;
	struct d0_err err = {0};
	int rank, bt, nb, rc = 0, vocab, rows = 0, differ = 0;
	double worst = 0;
	int32_t tab[2][CTX];
	int64_t tok[2][CTX];
	/* (A tokens, B tokens) a step: chunks across block edges, then decode
	 */
	static const int steps[][2] = {{9, 5}, {14, 0}, {0, 8}, {1, 1},
				       {1, 1}, {1, 1},	{1, 1}, {1, 1},
				       {1, 1}, {1, 1},	{0, 6}, {1, 1}};
	int done[2] = {0, 0};

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (argc != 6 || (bt = atoi(argv[5])) < 1) {
		if (!rank)
			fprintf(stderr, "usage: kv_paged_check MODEL TP PP EP "
					"BLOCK_TOKENS\n");
		MPI_Finalize();
		return 2;
	}
	d.tp = atoi(argv[2]);
	d.pp = atoi(argv[3]);
	d.ep = atoi(argv[4]);
	nb = 2 * ((CTX + bt - 1) / bt) + 3;
	if (rt_open_slots(&flat, argv[1], &d, 0, CTX, 2, &err) < 0 ||
	    rt_open_paged(&paged, argv[1], &d, 0, CTX, bt, nb, &err) < 0 ||
	    rt_over_budget(flat) || rt_over_budget(paged)) {
		fprintf(stderr, "kv_paged_check: rank %d: %s\n", rank,
			err.msg[0] ? err.msg : "over budget");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	vocab = (int)rt_config(flat)->vocab;
	/* scattered tables: block ids from the back, the two interleaved, a
	 * few left unused at the front */
	for (int i = 0; i < CTX; i++) {
		tab[0][i] = nb - 1 - 2 * i;
		tab[1][i] = nb - 2 - 2 * i;
		tok[0][i] = 1 + (i * 37 + 11) % (vocab - 1);
		tok[1][i] = 1 + (i * 53 + 5) % (vocab - 1);
	}
	for (size_t s = 0; s < sizeof steps / sizeof *steps && !rc; s++) {
		struct rt_seg fs[2], ps[2];
		int64_t t[2 * CTX];
		int n = 0, T = 0;
		float *lf, *lp;
		for (int q = 0; q < 2; q++) {
			if (!steps[s][q])
				continue;
			memset(&fs[n], 0, sizeof fs[n]);
			fs[n].slot = q;
			fs[n].pos0 = done[q];
			fs[n].len = steps[s][q];
			ps[n] = fs[n];
			ps[n].table = tab[q];
			ps[n].ntable =
			    (int)((done[q] + steps[s][q] + bt - 1) / bt);
			memcpy(t + T, tok[q] + done[q],
			       (size_t)steps[s][q] * sizeof *t);
			T += steps[s][q];
			done[q] += steps[s][q];
			n++;
		}
		lf = calloc((size_t)T * vocab, sizeof *lf);
		lp = calloc((size_t)T * vocab, sizeof *lp);
		if (rt_forward_batch(flat, t, fs, n, lf, &err) < 0 ||
		    rt_forward_batch(paged, t, ps, n, lp, &err) < 0) {
			fprintf(stderr, "kv_paged_check: rank %d: %s\n", rank,
				err.msg);
			rc = 2;
		}
		for (size_t i = 0; i < (size_t)T * vocab; i++) {
			double e = fabs((double)lf[i] - lp[i]);
			if (memcmp(&lf[i], &lp[i], sizeof *lf))
				differ++;
			if (e > worst)
				worst = e;
		}
		rows += T;
		free(lf);
		free(lp);
	}
	if (!rc && rank == rt_last_stage_root(flat)) {
		printf("kv_paged_check: tp %d pp %d ep %d, blocks of %d: %d "
		       "rows of logits "
		       "(2 sequences, %d + %d positions), %s",
		       d.tp, d.pp, d.ep, bt, rows, done[0], done[1],
		       differ ? "" : "bit-equal to the contiguous layout\n");
		if (differ)
			printf("%d logits differ (max abs %.3g)\n", differ,
			       worst);
		fflush(stdout);
	}
	if (!rc && rank == rt_last_stage_root(flat) && differ)
		rc = 1;
	MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	rt_close(flat);
	rt_close(paged);
	MPI_Finalize();
	return rc;
}
