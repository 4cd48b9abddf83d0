# bench/forward.sh - the forward pass against what this machine can do,
# measured in the same run, for the same ~171M llama stored in f32, in
# bf16 and in block-scaled FP8 (e4m3, 128x128 blocks; the embedding and
# lm_head stay f32, as transformers' FP8 releases keep them
# unquantised), each held as stored, at 1 and 2 threads (THREADS="1 2"):
#   prefill: model FLOPs / TTFT / the peak of the product prefill runs
#            on, at the same thread count (bench/sgemm_peak.c 2048^3):
#            oneDNN's bf16 matmul for bf16 and FP8 weights, oneDNN's f32
#            matmul for f32 and where bf16 and FP8 weights are widened to
#            f32 (kernel "...+onednn:ISA/w-f32"), where the engine's perf
#            reports its prefill on oneDNN; OpenBLAS's sgemm where
#            it does not (bf16 panels widened through sgemm)
#                                                              target >= 0.8
#   decode:  (bytes one token reads: weights as resident + the KV cache)
#            / the read bandwidth at the same thread count (bench/membw.c:
#            a vectorised sum over 1 GiB, the best of its read patterns:
#            one stream and four quarters side by side, AVX2 and AVX-512,
#            as the engine's GEMV kernels read) / TPOT          target >= 0.85
#            (1 thread), >= 0.75 (2 threads).  The bound is taken
#            interleaved with the engine's own runs: PAIRS (default 5)
#            rounds of (membw, 3 passes; perf --repeat 1) per dtype, each
#            pair's fraction its own bandwidth's bound / its own TPOT, and
#            the median of the pairs is the figure (min and max beside
#            it): on a shared host a best-of bandwidth from another moment
#            against a TPOT from this one is not a stable fraction.  A
#            pair's fraction above 1.0 means that pair's bandwidth pass
#            landed on a busy moment; the script counts them.
#   TTFT is the best of the pairs (against a best-of peak: a busy
#   moment lowers a sample, never raises one).
#   TP=2 against TP=1 (f32, 2 ranks of 1 thread on the same cores)
# BLAS=own: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for this run
# (some shared machines force an older kernel set through them): the
# kernels OpenBLAS picks for this CPU, as on a node without them; the line
# "OpenBLAS kernels:" names the set either way.  `uptime`'s load is
# printed at the start and with every thread count: the machine is shared.
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
$CC -O2 -o "$W/peak" bench/sgemm_peak.c $BLAS_FLAGS -ldnnl -lgomp -ldl
echo "OpenBLAS kernels: $("$W/peak" --core)${OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment; BLAS=own to measure without it)}"
$CC -O2 -pthread -o "$W/membw" bench/membw.c
THREADS=${THREADS:-1 2}
PAIRS=${PAIRS:-5}
load() { uptime | sed 's/.*load average/load average/'; }
echo "cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores; $(load)"

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
gets() { echo "$1" | grep -o "\"$2\":\"[^\"]*\"" | cut -d'"' -f4; }
perf() { # DTYPE THREADS NP TP [REPEAT]
	OPENBLAS_NUM_THREADS=$2 mpirun --oversubscribe --bind-to none -x OPENBLAS_NUM_THREADS \
		-np "$3" "$E" perf "$W/m.$1" --tp "$4" --prompt-tokens $P --gen-tokens $G \
		--repeat "${5:-${REPEAT:-5}}" --json |
		tr -d ' \n'
}
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a ? b : a) }'; }
echo "model: $(awk -v p="$params" 'BEGIN { printf "%.0fM", p / 1e6 }') parameters, prompt $P tokens, $G generated, $DTYPES; $PAIRS pairs (bandwidth, perf) per dtype and thread count"
for t in $THREADS; do
	peak=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048)
	sb=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048 --sbgemm)
	dbf=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048 --onednn bf16 2>/dev/null || echo 0)
	df=$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048 --onednn f32 2>/dev/null || echo 0)
	declare -A TTFT TPOTS FRACS BWS KERN
	for d in $DTYPES; do TTFT[$d]=1e30 TPOTS[$d]="" FRACS[$d]="" BWS[$d]=""; done
	for i in $(seq "$PAIRS"); do
		for d in $DTYPES; do
			b=$("$W/membw" "$t" 1024 3)
			j=$(perf "$d" "$t" 1 1 1)
			KERN[$d]=$(gets "$j" kernel)
			TTFT[$d]=$(awk -v a="${TTFT[$d]}" -v b="$(get "$j" ttft_ms_min)" 'BEGIN { print (b < a ? b : a) }')
			TPOTS[$d]="${TPOTS[$d]} $(get "$j" tpot_ms_min)"
			BWS[$d]="${BWS[$d]} $b"
		done
	done
	peak=$(best "$peak" "$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048)")
	dbf=$(best "$dbf" "$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048 --onednn bf16 2>/dev/null || echo 0)")
	df=$(best "$df" "$(OPENBLAS_NUM_THREADS=$t "$W/peak" 2048 --onednn f32 2>/dev/null || echo 0)")
	echo
	echo "threads $t ($(load)): sgemm peak $peak GFLOP/s (best of 2), oneDNN bf16 $dbf, oneDNN f32 $df GFLOP/s (best of 2), sbgemm ${sb/none/not exported by this OpenBLAS}$([ "$sb" = none ] || echo ' GFLOP/s')"
	for d in $DTYPES; do
		on=0
		case ${KERN[$d]} in *onednn:*) on=1 ;; esac
		awk -v d=$d -v params="$params" -v L=$L -v H=$H -v V=$V -v P=$P -v G=$G -v t=$t \
			-v peak="$peak" -v dbf="$dbf" -v df="$df" -v on=$on -v sb="$sb" -v kern="${KERN[$d]}" \
			-v ttft="${TTFT[$d]}" -v tpots="${TPOTS[$d]}" -v bws="${BWS[$d]}" 'BEGIN {
		emb = V * H; head = V * H   # the embedding is a lookup; lm_head untied
		norms = (2 * L + 1) * H     # f32 whatever the dtype
		# prefill: every weight over P tokens but the lm_head (the last
		# position only, as a server does), attention QK^T and PV in full
		flops = 2 * (params - emb - head - norms) * P + 2 * head + 4 * L * P * P * H
		# the product prefill runs on
		ref = peak; refname = "sgemm"
		if (on) { ref = (d == "f32" || kern ~ /\/w-f32/ ? df : dbf); refname = (ref == df ? "oneDNN f32" : "oneDNN bf16") }
		mfu = flops / (ttft / 1e3) / (ref * 1e9)
		# decode: each resident weight byte once, and the KV cache (f32
		# keys and values, at the mean position of the generated tokens)
		wb = (d == "bf16" ? 2 : 4) * (params - emb - norms) + 4 * norms
		if (d == "fp8")   # codes and 128x128 f32 scales; lm_head f32
			wb = (params - emb - head - norms) * (1 + 4 / 16384) + 4 * head + 4 * norms
		kv = L * (P + G / 2) * 2 * H * 4
		n = split(tpots, tp, " "); split(bws, bw, " ")
		over = 0
		for (i = 1; i <= n; i++) {
			fr[i] = (wb + kv) / (bw[i] * 1e9) * 1e3 / tp[i]
			if (fr[i] > 1.0) over++
		}
		# the median of the pairs (insertion sort: n is small)
		for (i = 2; i <= n; i++) { v = fr[i]; for (k = i - 1; k >= 1 && fr[k] > v; k--) fr[k + 1] = fr[k]; fr[k + 1] = v }
		med = (n % 2) ? fr[(n + 1) / 2] : (fr[n / 2] + fr[n / 2 + 1]) / 2
		for (i = 2; i <= n; i++) { v = tp[i]; for (k = i - 1; k >= 1 && tp[k] > v; k--) tp[k + 1] = tp[k]; tp[k + 1] = v }
		tmed = (n % 2) ? tp[(n + 1) / 2] : (tp[n / 2] + tp[n / 2 + 1]) / 2
		target = (t == 1 ? 0.85 : 0.75)
		# a figure just under its target is shown to 3 places, not
		# rounded up to it beside "not met" (0.797 printed "0.80")
		pf = (mfu < 0.8 && sprintf("%.2f", mfu) + 0 >= 0.8) ? "%.3f" : "%.2f"
		printf "  %-4s prefill: TTFT %.1f ms = %.1f GFLOP/s, " pf " of the %s peak  (target >= 0.80) %s  [%s]\n", d, ttft,
			flops / (ttft / 1e3) / 1e9, mfu, refname, (mfu >= 0.8 ? "met" : "not met"), kern
		verdict = med >= target ? "met" : "not met"
		if (med > 1.0)
			verdict = "IMPOSSIBLE: the bound is wrong (bandwidth under-measured?)"
		df = (med < target && sprintf("%.2f", med) + 0 >= target) ? "%.3f" : "%.2f"
		printf "  %-4s decode:  TPOT median %.2f ms, %.0f MB/token: " df " of the read-bandwidth bound (median of %d pairs; min %.2f, max %.2f%s)  (target >= %.2f) %s\n",
			d, tmed, (wb + kv) / 1e6, med, n, fr[1], fr[n], (over ? sprintf("; %d pair(s) over 1.0", over) : ""), target, verdict
	}'
	done
done
case " $DTYPES " in *" f32 "*) ;; *) exit 0 ;; esac # TP2/TP1 is on f32
j1=$(perf f32 1 1 1)
j2=$(perf f32 1 2 2)
awk -v ttft1="$(get "$j1" ttft_ms_min)" -v tpot1="$(get "$j1" tpot_ms_min)" \
	-v ttft2="$(get "$j2" ttft_ms_min)" -v tpot2="$(get "$j2" tpot_ms_min)" \
	-v comm2="$(get "$j2" comm_share)" 'BEGIN {
	printf "\nTP2/TP1 (f32, 1 thread per rank): prefill %.2fx, decode %.2fx (comm %.0f%% of TP2 time)\n",
		ttft1 / ttft2, tpot1 / tpot2, comm2 * 100
}'
