#!/usr/bin/env bash
# bench/forward.sh - the forward pass against what this machine can do,
# measured in the same run:
#   prefill: model FLOP utilisation = model FLOPs / TTFT / sgemm peak
#            (OpenBLAS sgemm 2048^3, bench/sgemm_peak.c)       target >= 60%
#   decode:  the memory-bandwidth bound (f32 weight bytes per token over
#            the memcpy bandwidth, bench/membw.c) / TPOT        target >= 70%
#   TP=2 against TP=1 (same machine: 2 ranks share its cores)
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
$CC -O2 -o "$W/peak" bench/sgemm_peak.c $BLAS_FLAGS
$CC -O2 -o "$W/membw" bench/membw.c

# ~170M parameters: 12 layers, hidden 1024, ffn 2816, vocab 8192 (f32)
L=12 H=1024 F=2816 V=8192 NH=16 P=${PROMPT:-512} G=${GEN:-16}
"$E" gen-model --arch llama --layers $L --hidden $H --heads $NH --ffn $F --vocab $V \
	--shards 2 "$W/m" >/dev/null
params=$("$E" inspect --json "$W/m" | grep -o '"total": [0-9]*' | head -1 | awk '{print $2}')
peak=$("$W/peak" 2048)
bw=$("$W/membw")
perf() { # NP TP
	mpirun --oversubscribe --bind-to none -np "$1" "$E" perf "$W/m" --tp "$2" \
		--prompt-tokens $P --gen-tokens $G --json | tr -d ' \n'
}
j1=$(perf 1 1)
j2=$(perf 2 2)
get() { echo "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
awk -v params="$params" -v L=$L -v H=$H -v V=$V -v P=$P -v peak="$peak" -v bw="$bw" \
	-v ttft1="$(get "$j1" ttft_ms)" -v tpot1="$(get "$j1" tpot_ms)" \
	-v ttft2="$(get "$j2" ttft_ms)" -v tpot2="$(get "$j2" tpot_ms)" \
	-v comm2="$(get "$j2" comm_share)" 'BEGIN {
	emb = V * H                         # the embedding is a lookup, not FLOPs
	flops = 2 * (params - emb) * P + 4 * L * P * P * H   # weights + attention
	mfu = flops / (ttft1 / 1e3) / (peak * 1e9)
	wbytes = 4 * (params - emb)         # streamed once per decoded token
	bound_ms = wbytes / (bw * 1e9) * 1e3
	printf "model: %.0fM parameters (f32), prompt %d tokens\n", params / 1e6, P
	printf "reference: OpenBLAS sgemm peak %.1f GFLOP/s, memcpy %.1f GB/s\n\n", peak, bw
	printf "prefill  TP1: TTFT %.1f ms = %.1f GFLOP/s model FLOPs  MFU %.2fx of sgemm peak  (target >= 0.60) %s\n",
		ttft1, flops / (ttft1 / 1e3) / 1e9, mfu, (mfu >= 0.6 ? "met" : "not met")
	printf "decode   TP1: TPOT %.2f ms vs bandwidth bound %.2f ms  %.2fx  (target >= 0.70) %s\n",
		tpot1, bound_ms, bound_ms / tpot1, (bound_ms / tpot1 >= 0.7 ? "met" : "not met")
	printf "TP2/TP1: prefill %.2fx, decode %.2fx (2 ranks on the same %s cores; comm %.0f%% of TP2 time)\n",
		ttft1 / ttft2, tpot1 / tpot2, "2", comm2 * 100
}'
