#!/usr/bin/env bash
# bench/serve.sh - the service level, measured in the same run:
#   batching: `serve` decode throughput (output tokens/s from `load`) at
#             concurrency 16 against concurrency 1, same model and layout
#                                                             target >= 4x
#   load's own overhead: `load --get /health` requests/s against `ab -k`
#             (apache2-utils) on the same trivial endpoint, same connection
#             count; and load's absolute requests/s on one core
#                                                             target >= 5000/s
# and the paged KV cache against the slot design (below).
# Prints ratios; exits non-zero only when a command fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
W=$(mktemp -d /tmp/day0-serve.XXXXXX)
MP=""
trap '[ -n "$MP" ] && kill -TERM $MP 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v ab >/dev/null || { echo "bench/serve.sh: ab missing (make deps: apache2-utils)" >&2; exit 2; }

# ~25M parameters: decode is weight-bandwidth bound, so batching pays
TP=${TP:-1} C=${CONC:-16} N=${REQS:-64} OUTLEN=${OUTLEN:-32}
"$E" gen-model --arch llama --layers 8 --hidden 512 --heads 8 --ffn 1408 --vocab 4096 \
	--shards 1 "$W/m" >/dev/null
if [ -z "${PAGED_ONLY:-}${PP_ONLY:-}" ]; then # PAGED_ONLY=1 / PP_ONLY=1: skip this part
mpirun --oversubscribe --bind-to none -np "$TP" "$E" serve "$W/m" --tp "$TP" --port 0 \
	--port-file "$W/port" --kv-seqs "$C" --max-ctx 256 >"$W/serve.out" 2>&1 &
MP=$!
for _ in $(seq 300); do [ -s "$W/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$W/port")"
tps() { # CONCURRENCY -> output tokens/s
	"$E" load --url "$URL" --concurrency "$1" --requests "$2" --input-len 16 \
		--output-len "$OUTLEN" --vocab 4096 --no-api-check --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["output_tokens_per_s"])'
}
tps 1 4 >/dev/null # warm-up
t1=$(tps 1 $((N / 4)))
tc=$(tps "$C" "$N")
rps_load=$("$E" load --url "$URL" --get /health --concurrency "$C" --requests 20000 --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["requests_per_s"])')
rps_ab=$(ab -q -k -c "$C" -n 20000 "$URL/health" | awk '/Requests per second/ {print $4}')
cpu_load=$( { /usr/bin/time -f '%U %S' "$E" load --url "$URL" --get /health \
	--concurrency "$C" --requests 20000 >/dev/null; } 2>&1 | tail -1)
awk -v t1="$t1" -v tc="$tc" -v C="$C" -v rl="$rps_load" -v ra="$rps_ab" -v cpu="$cpu_load" 'BEGIN {
	split(cpu, c, " "); core = c[1] + c[2]
	printf "serve decode, 1 stream:        %8.1f tokens/s\n", t1
	printf "serve decode, %2d streams:      %8.1f tokens/s\n", C, tc
	printf "batched / single-stream:       %8.2fx   (target >= 4x)\n", tc / t1
	printf "load --get /health:            %8.0f req/s\n", rl
	printf "ab -k, same endpoint:          %8.0f req/s\n", ra
	printf "load / ab:                     %8.2f\n", rl / ra
	printf "load on one core (20000 req in %.2f s of CPU): %.0f req/s of its own CPU (target >= 5000)\n",
		core, (core > 0 ? 20000 / core : 0)
}'
fi

# ------------------------------------------------------------------------
# The paged KV cache against the slot design on the same KV budget (the
# same blocks: --kv-policy slots reserves a whole context per sequence):
#   sequences held at once at mixed lengths                 target >= 3x
#   KV budget holding tokens while loaded (paged)            target >= 90%
#   TTFT of a request whose long prefix is cached / a cold one   <= 0.2x
#   goodput at a TTFT SLO over a concurrency sweep (both)
mval() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
if [ -z "${PP_ONLY:-}" ]; then # PP_ONLY=1: the PP part alone
[ -n "$MP" ] && { kill -TERM $MP 2>/dev/null; wait $MP 2>/dev/null || true; }
MP=""
KVSEQS=${KVSEQS:-8} CTX=${CTX:-512}
# (prefill in chunks of --max-batch-tokens 512: a 4096-token step takes
# seconds on a small CPU, and every decode waits for it)
pserve() { # NAME ARGS...; sets URL
	local n=$1; shift
	rm -f "$W/$n.port"
	mpirun --oversubscribe --bind-to none -np 1 "$E" serve "$W/m" --tp 1 --port 0 \
		--port-file "$W/$n.port" --max-ctx "$CTX" --kv-seqs "$KVSEQS" \
		--max-batch-tokens 512 "$@" >"$W/$n.out" 2>&1 &
	MP="$MP $!"
	for _ in $(seq 300); do [ -s "$W/$n.port" ] && break; sleep 0.1; done
	URL="http://127.0.0.1:$(cat "$W/$n.port")"
}
pserve paged
UP=$URL
pserve slots --kv-policy slots
US=$URL
mval() { curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
# KV in use while loaded: tokens held / the budget's tokens, sampled
watch_kv() { # URL OUT: mean of day0_kv_tokens / (blocks * block tokens) while running > 0
	local tot bt
	tot=$(mval "$1" day0_kv_blocks_total) bt=$(mval "$1" day0_kv_block_tokens)
	: >"$2"
	while [ -e "$W/watch" ]; do
		curl -s "$1/metrics" | awk -v cap=$((tot * bt)) '
			$1 == "day0_kv_tokens" { t = $2 } $1 == "day0_requests_waiting" { w = $2 }
			$1 == "day0_batch_steps_total" { s = $2 }
			END { if (w > 0 && s > 2) print t / cap }' >>"$2"
		sleep 0.2
	done
}
mixed() { # URL TAG
	touch "$W/watch"
	watch_kv "$1" "$W/$2.kv" &
	local wp=$!
	"$E" load --url "$1" --concurrency 48 --requests 144 --input-len 8:200 --output-len 8:128 \
		--vocab 4096 --no-api-check --stall 600 --json >"$W/$2.load.json" || true
	rm -f "$W/watch"
	wait $wp
}
mixed "$UP" paged
mixed "$US" slots
seq_p=$(mval "$UP" day0_kv_sequences_peak) seq_s=$(mval "$US" day0_kv_sequences_peak)
use_p=$(awk '{ s += $1; n++ } END { print n ? s / n : 0 }' "$W/paged.kv")
use_s=$(awk '{ s += $1; n++ } END { print n ? s / n : 0 }' "$W/slots.kv")
tps_p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["levels"][0]["output_tokens_per_s"])' "$W/paged.load.json")
tps_s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["levels"][0]["output_tokens_per_s"])' "$W/slots.load.json")
# TTFT: a 384-token prefix cold (a new one each time) against the same
# prefix cached, 1 output token, unstreamed (the answer is the first token)
ttft() { # URL PREFIX_SEED -> seconds
	local body
	body=$(python3 -c "
import json, random, sys
r = random.Random(int(sys.argv[1]))
p = [r.randrange(1, 4096) for _ in range(384)] + [7, 8, 9, int(sys.argv[2]) % 4000 + 1]
print(json.dumps({'prompt': p, 'max_tokens': 1, 'temperature': 0}))" "$2" "$RANDOM")
	curl -s -o /dev/null -w '%{time_total}\n' "$1/v1/completions" -d "$body"
}
cold=0 warm=0
ttft "$UP" 1000 >/dev/null
for i in 1 2 3 4 5; do
	cold=$(awk -v a="$cold" -v b="$(ttft "$UP" $((2000 + i)))" 'BEGIN { print a + b }')
	warm=$(awk -v a="$warm" -v b="$(ttft "$UP" 1000)" 'BEGIN { print a + b }')
done
# goodput at a TTFT SLO, concurrency 4,16,64 (the same requests both ways)
SLO=${SLO:-ttft=5000}
gp() { # URL -> "c:goodput ..."
	"$E" load --url "$1" --concurrency 4,16,48 --requests 96 --input-len 8:200 --output-len 8:128 \
		--vocab 4096 --slo "$SLO" --stall 600 --no-api-check --json >"$W/gp.json" || true
	python3 -c 'import json,sys; print(" ".join("%d:%.2f" % (l["concurrency"], l["goodput"]) for l in json.load(sys.stdin)["levels"]))' <"$W/gp.json"
}
gp_p=$(gp "$UP") gp_s=$(gp "$US")
awk -v sp="$seq_p" -v ss="$seq_s" -v up="$use_p" -v us="$use_s" -v tp="$tps_p" -v ts="$tps_s" \
	-v c="$cold" -v w="$warm" -v gpp="$gp_p" -v gps="$gp_s" -v slo="$SLO" -v k="$KVSEQS" -v ctx="$CTX" 'BEGIN {
	printf "\nKV budget: %d contexts of %d tokens; 48 clients, prompts 8..200, outputs 8..128\n", k, ctx
	printf "sequences held at once, paged / slots:  %3d / %3d = %5.2fx   (target >= 3x)\n", sp, ss, ss ? sp / ss : 0
	printf "KV budget holding tokens while loaded:  paged %5.1f%%  slots %5.1f%%   (target >= 90%%)\n", 100 * up, 100 * us
	printf "decode tokens/s, paged / slots:         %8.1f / %8.1f = %5.2fx\n", tp, ts, ts ? tp / ts : 0
	printf "TTFT, 384-token prefix cached / cold:   %6.1f / %6.1f ms = %5.3fx   (target <= 0.2x)\n", w / 5 * 1000, c / 5 * 1000, c ? w / c : 0
	printf "goodput at %s, concurrency:goodput  paged %s   slots %s\n", slo, gpp, gps

}'
fi

# ------------------------------------------------------------------------
# PP 2: micro-batches kept in flight across the two stages (--micro-batches
# MB, default 2 = p: stage 0 computes one while stage 1 computes the other,
# and a micro-batch's next step starts as soon as its tokens are back)
# against one batch through the stages at a time (--micro-batches 1), output
# tokens/s over a decode concurrency sweep (16 in, PP_OUT out) and
# prefill-heavy (16 streams of 384-token prompts, 4 out, --max-batch-tokens
# 1024).  The micro-batch side runs serve's default policy: decodes are cut
# only where each micro-batch gets >= 16 (--micro-batch-tokens), prompt
# chunks always; "cut" forces every cut (--micro-batch-tokens 1); "cap N"
# gives both sides --max-seqs N (vLLM's max_num_seqs: a batch, or each
# micro-batch, holds N sequences at most, so one batch runs N at a time and
# two micro-batches 2N).  Each load on a fresh server, so the bubble it
# reports is that load's, beside (p-1)/(m+p-1) for the mean micro-batches in
# flight.  The designs run alternately PP_ROUNDS times (default 2); the
# ratio of each round is printed and their median.         target >= 1.5x
[ -n "$MP" ] && { kill -TERM $MP 2>/dev/null; wait $MP 2>/dev/null || true; }
MP=""
MB=${MB:-2} ROUNDS=${PP_ROUNDS:-2} PPOUT=${PP_OUT:-64}
# NAME CONCURRENCY INPUT OUTPUT ARGS-OF-BOTH-SIDES / ARGS-OF-THE-MICRO-SIDE
PP_LOADS=${PP_LOADS:-"dec16 16 16 $PPOUT / ;dec16cut 16 16 $PPOUT / --micro-batch-tokens 1;dec32 32 16 $PPOUT / ;dec64 64 16 $PPOUT / ;dec64cap32 64 16 $PPOUT --max-seqs 32 / ;prefill 16 384 4 / "}
ppserve() { # NAME MICRO ARGS...; sets URL
	local n=$1 mb=$2; shift 2
	rm -f "$W/$n.port"
	mpirun --oversubscribe --bind-to none -np 2 "$E" serve "$W/m" --tp 1 --pp 2 --port 0 \
		--port-file "$W/$n.port" --max-ctx 512 --kv-seqs 32 --micro-batches "$mb" \
		--max-batch-tokens 1024 "$@" >"$W/$n.out" 2>&1 &
	MP="$MP $!"
	for _ in $(seq 300); do [ -s "$W/$n.port" ] && break; sleep 0.1; done
	URL="http://127.0.0.1:$(cat "$W/$n.port")"
}
pprun() { # MICRO CONC INPUT OUTPUT ARGS... -> "output_tokens/s bubble expected mean_m"
	local mb=$1 c=$2 in=$3 out=$4; shift 4
	ppserve "pp$mb" "$mb" "$@"
	"$E" load --url "$URL" --concurrency "$c" --requests $((c * 2)) --input-len "$in" \
		--output-len "$out" --vocab 4096 --no-api-check --stall 600 --json >"$W/pp.json" || true
	echo "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["levels"][0]["output_tokens_per_s"])' "$W/pp.json")" \
		"$(mval "$URL" day0_pp_bubble_fraction)" "$(mval "$URL" day0_pp_bubble_expected)" \
		"$(mval "$URL" day0_pp_micro_batches_mean)"
	kill -TERM $MP 2>/dev/null; wait $MP 2>/dev/null || true; MP=""
}
printf '\nPP 2 on %s, %s cores, load average %s at the start\n' \
	"$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)" "$(nproc)" \
	"$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'tokens/s out, one batch -> %d micro-batches (bubble measured / (p-1)/(m+p-1) at mean m):\n' "$MB"
: >"$W/pp.ratios"
IFS=';' read -r -a LOADS <<<"$PP_LOADS"
for round in $(seq "$ROUNDS"); do
	for load in "${LOADS[@]}"; do
		both=${load#* * * * } both=${both%%/*} micro=${load#*/}
		set -- $load
		# alternate which design goes first, round by round
		if [ $((round % 2)) = 1 ]; then
			read -r t1 b1 e1 m1 <<<"$(pprun 1 "$2" "$3" "$4" $both)"
			read -r tm bm em mm <<<"$(pprun "$MB" "$2" "$3" "$4" $both $micro)"
		else
			read -r tm bm em mm <<<"$(pprun "$MB" "$2" "$3" "$4" $both $micro)"
			read -r t1 b1 e1 m1 <<<"$(pprun 1 "$2" "$3" "$4" $both)"
		fi
		awk -v n="$1" -v r="$round" -v t1="$t1" -v tm="$tm" -v b1="$b1" -v e1="$e1" -v bm="$bm" \
			-v em="$em" -v mm="$mm" -v la="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
			printf "  round %d %-10s %7.1f -> %7.1f = %5.2fx   bubble %.2f/%.2f -> %.2f/%.2f (m %.2f)  load %s\n",
				r, n, t1, tm, t1 ? tm / t1 : 0, b1, e1, bm, em, mm, la }'
		echo "$1 $(awk -v a="$t1" -v b="$tm" 'BEGIN { print a ? b / a : 0 }')" >>"$W/pp.ratios"
	done
done
for load in "${LOADS[@]}"; do
	n=${load%% *}
	awk -v n="$n" '$1 == n { print $2 }' "$W/pp.ratios" | sort -g | awk -v n="$n" '{ v[++k] = $1 } END {
		m = k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
		printf "  %-10s micro-batches / one batch, median of %d rounds: %5.2fx   (target >= 1.5x)\n", n, k, m }'
done
printf 'load average %s at the end\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
