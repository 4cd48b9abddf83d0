/*
 * raw_allreduce.c - the reference for bench/comm.sh: the smallest honest
 * MPI_Allreduce bandwidth loop, built by the bench with mpicc.
 *
 *   mpirun -np N raw_allreduce MIN MAX ITERS WARMUP
 *
 * For each size MIN, 2*MIN, ... <= MAX (bytes of f32): WARMUP untimed
 * calls, a barrier, ITERS timed out-of-place MPI_Allreduce(SUM) calls; the
 * per-call time is averaged over ranks, as day0-engine comm does.  Rank 0
 * prints "size time_us algbw busbw" per size (GB/s, 1 GB = 1e9 B, busbw =
 * algbw * 2(n-1)/n).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int rank, n;
	long long min, max;
	long iters, warmup;
	float *send, *recv;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc != 5 || (min = atoll(argv[1])) < 4 || (max = atoll(argv[2])) < min ||
	    (iters = atol(argv[3])) < 1 || (warmup = atol(argv[4])) < 0) {
		if (rank == 0)
			fprintf(stderr, "usage: raw_allreduce MIN MAX ITERS WARMUP\n");
		MPI_Finalize();
		return 2;
	}
	send = malloc((size_t)max);
	recv = malloc((size_t)max);
	if (!send || !recv) {
		fprintf(stderr, "raw_allreduce: cannot allocate 2 x %lld B\n", max);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (long long i = 0; i < max / 4; i++) {
		send[i] = (float)(i % 100);
		recv[i] = 0;
	}
	for (long long size = min; size <= max; size *= 2) {
		int count = (int)(size / 4);
		double t, sum;
		for (long i = 0; i < warmup; i++)
			MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		t = MPI_Wtime();
		for (long i = 0; i < iters; i++)
			MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		t = (MPI_Wtime() - t) / (double)iters;
		MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		t = sum / n;
		if (rank == 0) {
			double algbw = (double)size / 1e9 / t;
			printf("%lld %.3f %.4f %.4f\n", size, t * 1e6, algbw,
			       algbw * 2.0 * (n - 1) / n);
			fflush(stdout);
		}
	}
	free(send);
	free(recv);
	MPI_Finalize();
	return 0;
}
