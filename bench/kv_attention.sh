#!/usr/bin/env bash
# bench/kv_attention.sh - attention over the paged KV cache (#31), ratios in
# the same run (tests/tools/kv_attn_bench.c; CPU seconds, best of ROUNDS,
# one thread: the machine is shared):
#   decode at CTX positions, GQA 32/8 heads of 128 (SHAPE="HEADS KV_HEADS
#   HEAD_DIM" for another: "16 16 64" is fp8_decode.sh's model), blocks of
#   BT tokens in a scattered table: the gather of before / in place, in
#   place / one contiguous block, and read/inplace: a plain AVX-512 read of
#   the same keys and values through the same table over in place (1.0: the
#   kernel reads the cache as fast as a loop that only reads it);
#   a 256-row prefill chunk: in place / the sgemm kernel of before;
#   MLA decode (16 heads): absorbed on the latent cache / per-head keys and
#   values, beside the cache bytes a position (576 against 16 x 320 floats).
#   BUILD=build bash bench/kv_attention.sh [CTX...]   (default 1024 4096 16384)
set -euo pipefail
BUILD=${BUILD:-build}
BT=${BT:-16}
ROUNDS=${ROUNDS:-5}
SHAPE=${SHAPE:-32 8 128}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg), heads/kv heads/dim $SHAPE, BT $BT"
printf '%6s %14s %16s %16s %14s %13s\n' ctx gather/inplace inplace/contig prefill_ip/sgemm mla_lat/perhead read/inplace
for ctx in "${@:-1024 4096 16384}"; do
	for c in $ctx; do
		# shellcheck disable=SC2086 # SHAPE is three words
		OPENBLAS_NUM_THREADS=1 "$BUILD/tests/kv_attn_bench" "$c" "$BT" "$ROUNDS" $SHAPE | awk -v c="$c" '
			{ t[$1] = $2 }
			END { printf "%6d %14.2f %16.2f %16.2f %14.2f %13.2f\n", c,
				t["decode_gather"] / t["decode_inplace"], t["decode_inplace"] / t["decode_contiguous"],
				t["prefill_inplace"] / t["prefill_sgemm"], t["mla_latent"] / t["mla_perhead"],
				t["decode_read"] / t["decode_inplace"] }'
	done
done
