#!/usr/bin/env bash
# bench/forward.sh - the forward pass against what this machine can do,
# measured in the same run, for the same ~171M llama stored in f32, in
# bf16 and in block-scaled FP8 (e4m3, 128x128 blocks; the embedding and
# lm_head stay f32, as transformers' FP8 releases keep them
# unquantised), each held as stored, at 1 and 2 threads (THREADS="1 2"):
#   prefill: model FLOPs / TTFT / the sgemm peak at the same thread count
#            (bench/sgemm_peak.c 2048^3; bf16 products are widened panels
#            through sgemm; cblas_sbgemm's peak too where OpenBLAS has it)
#                                                              target >= 0.8
#   decode:  (bytes one token reads: weights as resident + the KV cache)
#            / the read bandwidth at the same thread count (bench/membw.c:
#            a vectorised sum over 1 GiB, best of 7) / TPOT      target >= 0.85
#   TTFT and TPOT are the best of perf's repetitions (REPEAT, default 5),
#   as the peak and the bandwidth are the best of theirs: on a shared
#   machine a busy moment lowers one sample, never raises one.
#            This fraction cannot exceed 1.0: when it does, the script says
#            the bound is wrong.
#   TP=2 against TP=1 (f32, 2 ranks of 1 thread on the same cores)
# BLAS=own: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for this run
# (some shared machines force an older kernel set through them): the
# kernels OpenBLAS picks for this CPU, as on a node without them; the line
# "OpenBLAS kernels:" names the set either way.
# Prints ratios; exits non-zero only when a command fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
CC=${CC:-cc}
W=$(mktemp -d /tmp/day0-fwd.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BLAS_FLAGS=$(pkg-config --cflags --libs openblas 2>/dev/null || echo -lopenblas)
if [ "${BLAS:-env}" = own ]; then
	unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
fi
$CC -O2 -o "$W/peak" bench/sgemm_peak.c $BLAS_FLAGS -ldl
echo "OpenBLAS kernels: $("$W/peak" --core)${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment; BLAS=own to measure without it)}"
$CC -O2 -pthread -o "$W/membw" bench/membw.c
THREADS=${THREADS:-1 2}

# ~170M parameters: 12 layers, hidden 1024, ffn 2816, vocab 8192
L=12 H=1024 F=2816 V=8192 NH=16 P=${PROMPT:-512} G=${GEN:-16}
DTYPES=${DTYPES:-f32 bf16 fp8}
for d in $DTYPES; do
	q="--dtype $d"
	[ "$d" = fp8 ] && q="--quant fp8 --block 128"
	"$E" gen-model --arch llama --layers $L --hidden $H --heads $NH --ffn $F --vocab $V \
		$q --shards 2 "$W/m.$d" >/dev/null
done
first=${DTYPES%% *}
params=$("$E" inspect --json "$W/m.$first" | grep -o '"total": [0-9]*' | head -1 | awk '{print $2}')
get() { echo "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
perf() { # DTYPE THREADS NP TP
	OPENBLAS_NUM_THREADS=$2 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS \
		-np "$3" "$E" perf "$W/m.$1" --tp "$4" --prompt-tokens $P --gen-tokens $G \
		--repeat "${REPEAT:-5}" --json |
		tr -d ' \n'
}
echo "model: $(awk -v p="$params" 'BEGIN { printf "%.0fM", p / 1e6 }') parameters, prompt $P tokens, $G generated, $DTYPES"
for t in $THREADS; do
	peak=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048)
	sb=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048 --sbgemm)
	# the bandwidth before and after each perf run, the best of them: on a
	# shared machine one measurement can land on a busy moment
	bw=$("$W/membw" "$t" 1024 7)
	declare -A J
	for d in $DTYPES; do
		J[$d]=$(perf $d "$t" 1 1)
		b=$("$W/membw" "$t" 1024 7)
		bw=$(awk -v a="$bw" -v b="$b" 'BEGIN { print (b > a ? b : a) }')
	done
	b=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048)
	peak=$(awk -v a="$peak" -v b="$b" 'BEGIN { print (b > a ? b : a) }')
	echo
	echo "threads $t: sgemm peak $peak GFLOP/s (best of 2), sbgemm ${sb/none/not exported by this OpenBLAS}$([ "$sb" = none ] || echo ' GFLOP/s'), read bandwidth $bw GB/s (best of 3 x 7)"
	for d in $DTYPES; do
		j=${J[$d]}
		awk -v d=$d -v params="$params" -v L=$L -v H=$H -v V=$V -v P=$P -v G=$G \
			-v peak="$peak" -v sb="$sb" -v bw="$bw" \
			-v ttft="$(get "$j" ttft_ms_min)" -v tpot="$(get "$j" tpot_ms_min)" 'BEGIN {
		emb = V * H; head = V * H   # the embedding is a lookup; lm_head untied
		norms = (2 * L + 1) * H     # f32 whatever the dtype
		# prefill: every weight over P tokens but the lm_head (the last
		# position only, as a server does), attention QK^T and PV in full
		flops = 2 * (params - emb - head - norms) * P + 2 * head + 4 * L * P * P * H
		mfu = flops / (ttft / 1e3) / (peak * 1e9)
		# decode: each resident weight byte once, and the KV cache (f32
		# keys and values, at the mean position of the generated tokens)
		wb = (d == "bf16" ? 2 : 4) * (params - emb - norms) + 4 * norms
		if (d == "fp8")   # codes and 128x128 f32 scales; lm_head f32
			wb = (params - emb - head - norms) * (1 + 4 / 16384) + 4 * head + 4 * norms
		kv = L * (P + G / 2) * 2 * H * 4
		bound_ms = (wb + kv) / (bw * 1e9) * 1e3
		frac = bound_ms / tpot
		printf "  %-4s prefill: TTFT %.1f ms = %.1f GFLOP/s, %.2f of sgemm peak", d, ttft,
			flops / (ttft / 1e3) / 1e9, mfu
		if (sb != "none")
			printf ", %.2f of sbgemm peak", flops / (ttft / 1e3) / (sb * 1e9)
		printf "  (target >= 0.80) %s\n", (mfu >= 0.8 ? "met" : "not met")
		verdict = frac >= 0.85 ? "met" : "not met"
		if (frac > 1.0)
			verdict = "IMPOSSIBLE: the bound is wrong (bandwidth under-measured?)"
		printf "  %-4s decode:  TPOT %.2f ms, %.0f MB/token, bound %.2f ms: %.2f of the read-bandwidth bound  (target >= 0.85) %s\n",
			d, tpot, (wb + kv) / 1e6, bound_ms, frac, verdict
	}'
	done
done
j1=$(perf f32 1 1 1)
j2=$(perf f32 1 2 2)
awk -v ttft1="$(get "$j1" ttft_ms_min)" -v tpot1="$(get "$j1" tpot_ms_min)" \
	-v ttft2="$(get "$j2" ttft_ms_min)" -v tpot2="$(get "$j2" tpot_ms_min)" \
	-v comm2="$(get "$j2" comm_share)" 'BEGIN {
	printf "\nTP2/TP1 (f32, 1 thread per rank): prefill %.2fx, decode %.2fx (comm %.0f%% of TP2 time)\n",
		ttft1 / ttft2, tpot1 / tpot2, comm2 * 100
}'
