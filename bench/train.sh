#!/usr/bin/env bash
# bench/train.sh - one fine-tuning step against the forward of the same
# tokens, and how much of the data-parallel gradient all-reduce backward
# hides, as ratios measured in the same run (docs/training.md):
#   step:   (backward + optimizer) / forward of the training step, medians
#           of STEPS steps after the first; the step against 3 x forward
#           (the usual fwd 1x + bwd 2x)                 target <= 2.5 (bwd+opt)
#   DP:     DP 2, gradient buckets of BUCKET bytes all-reduced while
#           backward runs, against the same steps with one blocking
#           all-reduce after backward (--bucket-bytes 0): hidden share =
#           1 - waited (overlapped) / waited (blocking)  target >= 0.5
# Sizes: LAYERS, HIDDEN, FFN, VOCAB, SEQ, BATCH, STEPS; BUILD as the tests.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
E="$BUILD/day0-engine"
LAYERS=${LAYERS:-4} HIDDEN=${HIDDEN:-256} FFN=${FFN:-768} VOCAB=${VOCAB:-2048}
SEQ=${SEQ:-128} BATCH=${BATCH:-4} STEPS=${STEPS:-6} BUCKET=${BUCKET:-262144}
T=$(mktemp -d /tmp/day0-bench-train.XXXXXX)
trap 'rm -rf "$T"' EXIT
mpi() { mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$@"; }

"$E" gen-model --arch llama --layers "$LAYERS" --hidden "$HIDDEN" --heads 8 --kv-heads 4 \
	--ffn "$FFN" --vocab "$VOCAB" "$T/m" >/dev/null || exit 2
echo "# model: llama, $LAYERS layers, hidden $HIDDEN, ffn $FFN, vocab $VOCAB; $BATCH x $SEQ tokens a step"
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load: $(cut -d' ' -f1-3 /proc/loadavg)"

med() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
steps() { jq -r "select(.type == \"train\" and .step > 1) | $1" "$2" | med; }

"$E" train "$T/m" --steps "$STEPS" --seq "$SEQ" --batch "$BATCH" --events >"$T/one.json" || exit 1
f=$(steps .t_fwd_s "$T/one.json"); b=$(steps .t_bwd_s "$T/one.json"); o=$(steps .t_opt_s "$T/one.json")
awk -v f="$f" -v b="$b" -v o="$o" 'BEGIN {
	printf "1 rank: forward %.4f s, backward %.4f s, optimizer %.4f s\n", f, b, o
	printf "  (backward + optimizer) / forward = %.2f   (target <= 2.5)\n", (b + o) / f
	printf "  step / (3 x forward)             = %.2f\n", (f + b + o) / (3 * f) }'

OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpi 2 "$E" train "$T/m" --dp 2 --steps "$STEPS" --seq "$SEQ" \
	--batch "$BATCH" --bucket-bytes "$BUCKET" --events >"$T/ov.json" || exit 1
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpi 2 "$E" train "$T/m" --dp 2 --steps "$STEPS" --seq "$SEQ" \
	--batch "$BATCH" --bucket-bytes 0 --events >"$T/bl.json" || exit 1
ov=$(steps .t_comm_s "$T/ov.json"); bl=$(steps .t_comm_s "$T/bl.json")
bo=$(steps .t_bwd_s "$T/ov.json"); bb=$(steps .t_bwd_s "$T/bl.json")
awk -v ov="$ov" -v bl="$bl" -v bo="$bo" -v bb="$bb" -v k="$BUCKET" 'BEGIN {
	printf "DP 2 (1 thread a rank): all-reduce waited %.4f s with %d-byte buckets during backward, %.4f s blocking after it\n", ov, k, bl
	printf "  backward incl. the wait: %.4f s overlapped, %.4f s blocking\n", bo, bb
	printf "  share of the DP all-reduce hidden behind backward = %.2f   (target >= 0.5)\n", (bl > 0 ? 1 - ov / bl : 0) }'

# PP 2 with the 1F1B schedule (docs/training.md): each stage's idle share
# of the step (the train event's bubble, the mean over the stages) against
# (p-1)/(m+p-1), for m = 1, 2, 4 micro-batches of the same global batch
echo "PP 2, 1F1B (1 thread a rank), bubble measured / (p-1)/(m+p-1):"
for m in 1 2 4; do
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpi 2 "$E" train "$T/m" --pp 2 --micro-batches "$m" \
		--steps "$STEPS" --seq "$SEQ" --batch "$BATCH" --events >"$T/pp$m.json" || exit 1
	bu=$(steps .bubble "$T/pp$m.json"); th=$(steps .bubble_theory "$T/pp$m.json")
	st=$(jq -r 'select(.type == "train" and .step > 1) | .bubble_stages | map(. * 100 | round / 100) | tostring' "$T/pp$m.json" | tail -1)
	awk -v m="$m" -v bu="$bu" -v th="$th" -v st="$st" 'BEGIN {
		printf "  m %d: %.2f / %.2f = %.2fx of theory (stages %s)\n", m, bu, th, (th > 0 ? bu / th : 0), st }'
done
