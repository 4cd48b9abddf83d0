# bench/fp8_decode.sh - FP8 decode in the engine, A/B of its GEMV kernels,
# against the read bound taken interleaved (issue 33; bench/README.md).
#
# The forward.sh model (~171M llama, 12 layers, hidden 1024, FP8 e4m3
# 128x128 blocks, the lm_head f32), prompt PROMPT (512) tokens, GEN (16)
# generated; for each thread count in THREADS ("1 2"), ROUNDS (5) rounds
# of: membw (the read bound's bandwidth, 3 passes, the best of its
# patterns), then `perf --repeat 1` once per kernel in KERNELS (default
# "gf4 gfx4": DAY0_KERNEL=avx512-gf4, the candidate e4m3 kernel (GFNI to
# value x 2^-120 on codes whose subnormals load took out, their products
# added from a sparse list), against DAY0_KERNEL=avx512-gfx4, the default
# (GFNI with the zero-exponent codes patched); "vbmi" is
# DAY0_KERNEL=avx512-vbmi, the VBMI tables, "dp4" DAY0_KERNEL=avx512-dp4
# (gf's words against x as bf16 hi + lo by VDPBF16PS, AVX512-BF16 CPUs),
# "default" DAY0_KERNEL unset
# (dp4's GEMV where the CPU has AVX512-BF16, else gfx4's; prefill on
# oneDNN; the named ones prefill by sgemm, which
# TPOT does not see)),
# the order of the kernels alternating from round to round.  Each
# (membw, perf) pair gives
# a fraction of the bound (forward.sh's bytes: codes, scales, lm_head and
# norms f32, the KV cache at the mean generated position, over the
# bandwidth, over TPOT); a kernel's figure is the median over the rounds,
# min-max beside it, and each round's TPOT ratio of the two kernels is
# printed (the second over the first: > 1 is the first faster; perf's
# kernel field is printed beside each: it names the kernel).  `uptime`'s load
# is printed with each thread count: the machine is shared.
#   BUILD=build-x THREADS="1 2" ROUNDS=5 bash bench/fp8_decode.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
CC=${CC:-cc}
W=$(mktemp -d /tmp/day0-fp8dec.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
$CC -O2 -pthread -o "$W/membw" bench/membw.c
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-5}
KERNELS=${KERNELS:-gf4 gfx4}
L=12 H=1024 F=2816 V=8192 NH=16 P=${PROMPT:-512} G=${GEN:-16}
load() { uptime | sed 's/.*load average/load average/'; }
echo "cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores; $(load)"
"$E" gen-model --arch llama --layers $L --hidden $H --heads $NH --ffn $F --vocab $V \
	--quant fp8 --block 128 --shards 2 "$W/m" >/dev/null
params=$("$E" inspect --json "$W/m" | grep -o '"total": [0-9]*' | head -1 | awk '{print $2}')
get() { echo "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
gets() { echo "$1" | grep -o "\"$2\":\"[^\"]*\"" | cut -d'"' -f4; }
envof() { case $1 in gf4 | gfx4 | vbmi | dp4) echo "avx512-$1" ;; *) echo onednn ;; esac; }
tpot() { # KERNEL THREADS
	DAY0_KERNEL=$(envof "$1") OPENBLAS_NUM_THREADS=$2 mpirun --oversubscribe --bind-to none \
		-x OPENBLAS_NUM_THREADS -x DAY0_KERNEL -np 1 "$E" perf "$W/m" --tp 1 \
		--prompt-tokens $P --gen-tokens $G --repeat 1 --json | tr -d ' \n'
}
set -- $KERNELS
for t in $THREADS; do
	declare -A TP FR NAME
	for k in $KERNELS; do TP[$k]="" FR[$k]=""; done
	echo
	echo "threads $t ($(load))"
	for i in $(seq "$ROUNDS"); do
		b=$("$W/membw" "$t" 1024 3)
		order=$KERNELS
		[ $((i % 2)) = 0 ] && order=$(echo $KERNELS | awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }')
		line="  round $i: bandwidth $b GB/s"
		for k in $order; do
			j=$(tpot "$k" "$t")
			NAME[$k]=$(gets "$j" kernel)
			tp=$(get "$j" tpot_ms_min)
			TP[$k]="${TP[$k]} $tp"
			FR[$k]="${FR[$k]} $(awk -v p="$params" -v L=$L -v H=$H -v V=$V -v P=$P -v G=$G -v bw="$b" -v tp="$tp" 'BEGIN {
				emb = V * H; head = V * H; norms = (2 * L + 1) * H
				wb = (p - emb - head - norms) * (1 + 4 / 16384) + 4 * head + 4 * norms
				kv = L * (P + G / 2) * 2 * H * 4
				printf "%.3f", (wb + kv) / (bw * 1e9) * 1e3 / tp }')"
			line="$line, $k TPOT $tp ms"
		done
		echo "$line"
	done
	for k in $KERNELS; do
		echo "$k" "${NAME[$k]}" "${TP[$k]}" "|" "${FR[$k]}" | awk -v t=$t '{
			n = 0; for (i = 3; $i != "|"; i++) tp[++n] = $i
			for (j = 1; j <= n; j++) fr[j] = $(i + j)
			for (a = 2; a <= n; a++) { v = fr[a]; for (b = a - 1; b >= 1 && fr[b] > v; b--) fr[b + 1] = fr[b]; fr[b + 1] = v }
			for (a = 2; a <= n; a++) { v = tp[a]; for (b = a - 1; b >= 1 && tp[b] > v; b--) tp[b + 1] = tp[b]; tp[b + 1] = v }
			med = n % 2 ? fr[(n + 1) / 2] : (fr[n / 2] + fr[n / 2 + 1]) / 2
			tm = n % 2 ? tp[(n + 1) / 2] : (tp[n / 2] + tp[n / 2 + 1]) / 2
			printf "  %-5s [%s] decode: TPOT median %.2f ms, %.2f of the read bound (median of %d rounds; min %.2f, max %.2f)  (target >= %.2f)\n",
				$1, $2, tm, med, n, fr[1], fr[n], (t == 1 ? 0.85 : 0.75) }'
	done
	if [ $# -ge 2 ]; then
		echo "${TP[$1]} | ${TP[$2]}" | awk -v a="$1" -v b="$2" '{
			n = 0; for (i = 1; $i != "|"; i++) x[++n] = $i
			for (j = 1; j <= n; j++) r[j] = $(i + j) / x[j]
			for (a2 = 2; a2 <= n; a2++) { v = r[a2]; for (c = a2 - 1; c >= 1 && r[c] > v; c--) r[c + 1] = r[c]; r[c + 1] = v }
			printf "  TPOT %s / %s per round: median %.3f (min %.3f, max %.3f)\n", b, a,
				n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2, r[1], r[n] }'
	fi
	echo "  ($(load) at the end)"
done
