#!/usr/bin/env bash
# bench/validate_local.sh - validate --local at a size the whole-model
# reference cannot hold, measured in one run:
#   memory: peak RSS of validate --local on a bf16 checkpoint at least 8x
#           the bound (default 4 GB under 512 MiB): RSS / bound, target < 1
#   time:   mpirun -np RANKS (default 4) against one process on the same
#           model, target <= 0.35 (on fewer cores than ranks the figure is
#           oversubscribed and says so)
# The layer dumps are made up (right shape, finite; bench/fake_dumps.py):
# this measures memory and time, not error, so validate's exit 1 is
# expected.  Knobs: LAYERS (40), HIDDEN (2048), FFN (5632), VOCAB (32768),
# BOUND_MIB (512), RANKS (4), TOKENS (4).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
LAYERS=${LAYERS:-40} HIDDEN=${HIDDEN:-2048} FFN=${FFN:-5632} VOCAB=${VOCAB:-32768}
BOUND_MIB=${BOUND_MIB:-512} RANKS=${RANKS:-4} NT=${TOKENS:-4}
W=$(mktemp -d /tmp/day0-vlocal.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
make -s "$BUILD/tests/maxrss" >/dev/null
TOK=$(seq -s, 1 "$NT")
"$E" gen-model --arch llama --layers "$LAYERS" --hidden "$HIDDEN" --heads $((HIDDEN / 128)) \
	--ffn "$FFN" --vocab "$VOCAB" --dtype bf16 --shards 8 "$W/m" >/dev/null
python3 bench/fake_dumps.py "$W/l" "$LAYERS" "$NT" "$HIDDEN"
ck=$(du -sb "$W/m" | cut -f1)
bound=$((BOUND_MIB << 20))
printf 'checkpoint %.2f GB bf16, %d layers; bound %d MiB (%.1fx smaller)\n' \
	"$(echo "$ck / 1000000000" | bc -l)" "$LAYERS" "$BOUND_MIB" "$(echo "$ck / $bound" | bc -l)"
t0=$(date +%s.%N)
"$BUILD/tests/maxrss" "$E" validate "$W/m" --local --tokens "$TOK" --layers-dir "$W/l" \
	--max-rel 1e9 >/dev/null 2>"$W/rss" || true
t1=$(date +%s.%N)
rss=$(($(sed -n 's/^maxrss_kib //p' "$W/rss") * 1024))
printf 'validate --local, 1 process: peak RSS %d MiB = %.2f of the bound\n' $((rss >> 20)) \
	"$(echo "$rss / $bound" | bc -l)"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS" \
	"$E" validate "$W/m" --local --tokens "$TOK" --layers-dir "$W/l" --max-rel 1e9 >/dev/null || true
t2=$(date +%s.%N)
one=$(echo "$t1 - $t0" | bc -l) many=$(echo "$t2 - $t1" | bc -l)
cores=$(nproc)
printf 'time: %d ranks / 1 process = %.2f (%.1f s / %.1f s)%s\n' "$RANKS" \
	"$(echo "$many / $one" | bc -l)" "$many" "$one" \
	"$([ "$cores" -lt "$RANKS" ] && echo " - oversubscribed: $RANKS ranks on $cores cores")"
