#!/usr/bin/env bash
# Communication benchmark: day0-engine comm's all-reduce busbw against a
# minimal raw MPI_Allreduce loop (bench/raw_allreduce.c, built here with
# mpicc), run in the same session, on the same ranks, at the same sizes.
#
#   make bench                 (builds first, then runs every bench)
#   BUILD=build bash bench/comm.sh
#
# Both sides: f32 sum, out-of-place, WARMUP untimed calls then ITERS timed
# calls per size after a barrier, per-call time averaged over ranks, busbw
# = bytes / time x 2(n-1)/n.  Runs are interleaved (day0, raw, day0, raw,
# ...) REPS times; each side's best busbw per size gives the ratio
# day0 / raw, printed per size >= 1 MiB against the target >= 0.95x.  It is
# a benchmark: missed targets are reported, not failed; the exit status is
# non-zero only when a command fails.
#
# Environment: BUILD (default build), NP (ranks, default: the CPU count,
# at least 2), MIN (default 1M), MAX (default 32M), ITERS (default 20),
# WARMUP (default 5), REPS (default 7).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
ENGINE=$BUILD/day0-engine
RAW=$BUILD/bench/raw_allreduce
NCPU=$(nproc 2>/dev/null || echo 2)
NP=${NP:-$((NCPU < 2 ? 2 : NCPU))}
MIN=${MIN:-1M}
MAX=${MAX:-32M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
REPS=${REPS:-7}
TARGET=0.95

die() {
	echo "bench: $*" >&2
	exit 1
}

[ -x "$ENGINE" ] || die "$ENGINE not found (run make build)"
command -v mpicc >/dev/null || die "mpicc not found (make deps installs Open MPI)"
command -v mpirun >/dev/null || die "mpirun not found (make deps installs Open MPI)"
for v in NP ITERS REPS; do
	case ${!v} in '' | *[!0-9]* | 0) die "$v: expected an integer >= 1, got '${!v}'" ;; esac
done
case $WARMUP in '' | *[!0-9]*) die "WARMUP: expected an integer >= 0, got '$WARMUP'" ;; esac
# Sizes in bytes (K/M/G binary, as day0-engine reads them).
bytes() {
	local s=$1 m=1
	case $s in *[kK]) m=1024 s=${s%?} ;; *[mM]) m=1048576 s=${s%?} ;; *[gG]) m=1073741824 s=${s%?} ;; esac
	case $s in '' | *[!0-9]*) die "bad size '$1'" ;; esac
	echo $((s * m))
}
MIN_B=$(bytes "$MIN")
MAX_B=$(bytes "$MAX")
[ "$MIN_B" -ge 4 ] && [ $((MIN_B % 4)) -eq 0 ] && [ "$MAX_B" -ge "$MIN_B" ] ||
	die "MIN/MAX: need 4 <= MIN <= MAX, multiples of 4 bytes"

mkdir -p "$BUILD/bench"
mpicc -O2 -o "$RAW" bench/raw_allreduce.c || die "mpicc failed on bench/raw_allreduce.c"

TMP=$(mktemp -d /tmp/day0-bench-comm.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

MPIRUN=(mpirun)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
[ "$NP" -gt "$NCPU" ] && MPIRUN+=(--oversubscribe)

echo "== day0 comm benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ)) =="
echo "machine: $NCPU CPUs, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(mpirun --version | head -1)"
echo "ranks:   $NP ($([ "$NP" -gt "$NCPU" ] && echo oversubscribed || echo "one per CPU or fewer")), sizes $MIN..$MAX, iters $ITERS, warmup $WARMUP, $REPS rounds (interleaved)"

# run_day0 FILE / run_raw FILE: "size busbw" per line.
run_day0() {
	"${MPIRUN[@]}" -np "$NP" "$ENGINE" comm --ops allreduce --dtype f32 \
		--min "$MIN_B" --max "$MAX_B" --iters "$ITERS" --warmup "$WARMUP" --json \
		>"$TMP/day0.out" 2>"$TMP/day0.err" ||
		{ cat "$TMP/day0.err" >&2; die "day0-engine comm failed"; }
	grep -q '^  "ok": true' "$TMP/day0.out" || die "day0-engine comm reported wrong results"
	# The --json rows, full precision: "bytes", then out_of_place's busbw.
	awk '/"bytes":/ { gsub(/[^0-9]/, "", $2); size = $2 }
		/"out_of_place":/ { oop = 1 }
		/"busbw":/ && oop { gsub(/,/, "", $2); print size, $2; oop = 0 }' \
		"$TMP/day0.out" >"$1"
	[ -s "$1" ] || die "no all-reduce rows in day0-engine comm --json output"
}
run_raw() {
	"${MPIRUN[@]}" -np "$NP" "$RAW" "$MIN_B" "$MAX_B" "$ITERS" "$WARMUP" \
		>"$TMP/raw.out" 2>"$TMP/raw.err" ||
		{ cat "$TMP/raw.err" >&2; die "raw_allreduce failed"; }
	awk '{ print $1, $4 }' "$TMP/raw.out" >"$1"
}

# CPU seconds: busy time of the whole machine, and of this script's
# children (`times` must run in this shell), to flag a noisy machine.
busy_cpu_s() {
	awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { print ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat
}
own_cpu_s() {
	awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } print t }' "$1"
}
T0=$(date +%s.%N)
BUSY0=$(busy_cpu_s)
times >"$TMP/times.0"
for ((r = 1; r <= REPS; r++)); do
	run_day0 "$TMP/round.$r.day0"
	run_raw "$TMP/round.$r.raw"
done
times >"$TMP/times.1"
WALL=$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN { printf "%.1f", a - b }')
OTHER=$(awk -v b0="$BUSY0" -v b1="$(busy_cpu_s)" -v o0="$(own_cpu_s "$TMP/times.0")" \
	-v o1="$(own_cpu_s "$TMP/times.1")" 'BEGIN { o = (b1 - b0) - (o1 - o0); printf "%.1f", (o > 0 ? o : 0) }')
SHARE=$(awk -v o="$OTHER" -v w="$WALL" -v n="$NCPU" 'BEGIN { printf "%.0f", (w > 0 ? 100 * o / (w * n) : 0) }')

# Best (highest) busbw per size over the rounds, and every round's figure.
cat "$TMP"/round.*.day0 | sort -n -k1,1 -k2,2gr | awk '!seen[$1]++' >"$TMP/day0.best"
cat "$TMP"/round.*.raw | sort -n -k1,1 -k2,2gr | awk '!seen[$1]++' >"$TMP/raw.best"

echo
echo "all-reduce busbw (GB/s), f32 sum, out-of-place, best of $REPS (ratio = day0 / raw MPI_Allreduce)"
printf '  %12s  %10s  %10s  %7s  %-8s %s\n' "size (B)" "day0" "raw" "ratio" "target" "status"
met=0 total=0
while read -r size d0; do
	raw=$(awk -v s="$size" '$1 == s { print $2 }' "$TMP/raw.best")
	[ -n "$raw" ] || die "raw loop has no figure for $size B"
	[ "$size" -ge 1048576 ] || continue
	ratio=$(awk -v a="$d0" -v b="$raw" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
	if awk -v r="$ratio" -v t="$TARGET" 'BEGIN { exit !(r >= t) }'; then
		status=met
		met=$((met + 1))
	else
		status="NOT MET"
	fi
	total=$((total + 1))
	printf '  %12s  %10.3f  %10.3f  %6.3fx  >= %sx %s\n' "$size" "$d0" "$raw" "$ratio" "$TARGET" "$status"
done <"$TMP/day0.best"
echo
echo "per round (day0 / raw busbw, GB/s):"
for ((r = 1; r <= REPS; r++)); do
	printf '  round %d:' "$r"
	awk 'NR == FNR { raw[$1] = $2; next }
		$1 >= 1048576 { printf " %s B %.2f/%.2f;", $1, $2, raw[$1] }' "$TMP/round.$r.raw" "$TMP/round.$r.day0"
	echo
done
echo
printf 'CPU time used by others during the measurements: %s s = %s%% of %s CPUs over %s s\n' \
	"$OTHER" "$SHARE" "$NCPU" "$WALL"
if [ "$SHARE" -gt 10 ]; then
	echo "warning: other work competed for the CPUs; figures are noisy (rerun on an idle machine)"
fi
echo "summary: $met of $total sizes >= 1 MiB meet day0/raw >= ${TARGET}x"
exit 0
