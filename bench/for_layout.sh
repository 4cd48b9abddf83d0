#!/usr/bin/env bash
# bench/for_layout.sh - the full sweep behind tests/sh/test_for_layout.sh:
# every shipped config x every layout plan accepts for h200-8x8 that fits
# this machine (tp x pp x ep <= MAXNP, default 8, oversubscribed), the
# rehearsal model from gen-model --like --for-layout run under mpirun and
# validated against float64 (layers and logits, 1e-5).  Prints, per
# config, runs passed / layouts; exits 1 when any layout fails.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
MAXNP=${MAXNP:-8}
INV=assets/inventories/h200-8x8.json
W=$(mktemp -d /tmp/day0-forlayout.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
TOK=1,42,7,31,5
bad=0
for cfg in assets/configs/*.json; do
	name=$(basename "$cfg" .json)
	"$E" plan "$cfg" --inventory "$INV" --json >"$W/plan.json" || true
	n=0 okc=0
	for lay in $(jq -r "[.feasible[] | select(.tp * .pp * .ep <= $MAXNP) | \"\(.tp),\(.pp),\(.ep)\"] | unique | .[]" "$W/plan.json"); do
		IFS=, read -r tp pp ep <<<"$lay"
		n=$((n + 1))
		rm -rf "$W/m" "$W/l" "$W/l.st"
		if "$E" gen-model --like "$cfg" --for-layout "$lay" "$W/m" >/dev/null 2>"$W/err" &&
			timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none \
				-np $((tp * pp * ep)) "$E" run "$W/m" --tp "$tp" --pp "$pp" --ep "$ep" \
				--tokens $TOK --dump-logits "$W/l.st" --dump-layers "$W/l" >/dev/null 2>>"$W/err" &&
			"$E" validate "$W/m" --tokens $TOK --logits "$W/l.st" --layers-dir "$W/l" \
				--levels layer,e2e --max-rel 1e-5 --kl-max 1e-6 >/dev/null 2>>"$W/err"; then
			okc=$((okc + 1))
		else
			echo "  $name tp$tp pp$pp ep$ep: FAILED: $(tail -c 300 "$W/err")"
			bad=1
		fi
	done
	printf '%-20s %3d of %3d layouts (np <= %d) run and validate\n' "$name" "$okc" "$n" "$MAXNP"
done
exit $bad
