# gen-model --like CONFIG --for-layout TP,PP,EP: the rehearsal model takes
# the real run's layout.  Shapes of every shipped config x every layout are
# held by unit/test_shrink_layout; here the command line, plan's own
# accepted layouts for h200-8x8, and real mpirun runs of a representative
# few (np <= 8, oversubscribed on this machine; the full sweep is
# bench/for_layout.sh) validated against float64.
. "$(dirname "$0")/../lib.sh"
CFG="$DAY0_ROOT/assets/configs"
INV="$DAY0_ROOT/assets/inventories/h200-8x8.json"
TOK=1,42,7,31,5
# A hang guard, not a time limit: 8 sanitizer-built ranks on 2 busy cores
# took over 120 s.
case $BUILD in *asan*) LIMIT=900 ;; *) LIMIT=300 ;; esac
mpi() { # NP ARGS...
	local np=$1; shift
	timeout $LIMIT mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}

# usage errors name what is wrong
expect_rc 2 "--for-layout needs --like" "$ENGINE" gen-model --arch llama --for-layout 2,1,1 "$T/a"
contains "the refusal says why" "needs --like" "$ERR"
expect_rc 2 "--for-layout wants three numbers" "$ENGINE" gen-model --like "$CFG/llama-3.1-8b.json" --for-layout 2,1 "$T/a"
expect_rc 2 "a layout the real model refuses" "$ENGINE" gen-model --like "$CFG/deepseek-v3.json" --for-layout 3,1,1 "$T/a"
contains "the refusal names the real model's rule" "num_attention_heads 128 is not divisible by tp 3" "$ERR"
run "$ENGINE" gen-model --help
contains "--help shows --for-layout" "--for-layout TP,PP,EP" "$OUT"

# without --for-layout the tiny model cannot take tp 8 (the bug this fixes)
"$ENGINE" gen-model --like "$CFG/deepseek-v3.json" "$T/plain" >/dev/null
run "$ENGINE" plan "$T/plain" --layout 8,1,1 --nodes 1 --cards 8 --card-mem 1T --json
if jq -e '.rejected[0].reason | test("not divisible by tp 8")' "$OUT" >/dev/null; then
	ok "plain --like deepseek-v3 is refused at tp 8"
else
	fail "plain --like deepseek-v3 is refused at tp 8" "$(head -c 300 "$OUT")"
fi

# plan's first accepted layout and its largest accepted one for each
# config on h200-8x8: the rehearsal model splits there (plan's own check)
for cfg in "$CFG"/*.json; do
	name=$(basename "$cfg" .json)
	"$ENGINE" plan "$cfg" --inventory "$INV" --json >"$T/plan.json"
	for sel in 0 -1; do
		lay=$(jq -r "[.feasible[] | select(.tp * .pp * .ep <= 64)] | sort_by(.tp * .pp * .ep) | .[$sel] | \"\(.tp),\(.pp),\(.ep)\"" "$T/plan.json")
		run "$ENGINE" gen-model --like "$cfg" --for-layout "$lay" "$T/m" --force
		if [ "$RC" -ne 0 ]; then
			fail "$name $lay: gen-model" "$(head -c 300 "$ERR")"
			continue
		fi
		run "$ENGINE" plan "$T/m" --layout "$lay" --nodes 1 --cards 64 --card-mem 1T --json
		if jq -e '.feasible | length == 1' "$OUT" >/dev/null; then
			ok "$name: plan's layout $lay splits the rehearsal model"
		else
			fail "$name $lay: rehearsal model splits" "$(jq -c '.rejected[0].reason' "$OUT")"
		fi
	done
done

# representative runs: MLA + grouped routing + dense-first (deepseek),
# GQA 16:1 (llama-405b) at tp 8, qwen3 MoE over 3 stages (the rest: bench)
runs() { # config tp pp ep
	local cfg=$1 tp=$2 pp=$3 ep=$4 name
	name="$(basename "$cfg" .json) tp$tp pp$pp ep$ep"
	rm -rf "$T/r" "$T/rl" "$T/r.st"
	"$ENGINE" gen-model --like "$cfg" --for-layout "$tp,$pp,$ep" "$T/r" >/dev/null
	run mpi $((tp * pp * ep)) run "$T/r" --tp "$tp" --pp "$pp" --ep "$ep" --tokens $TOK \
		--dump-logits "$T/r.st" --dump-layers "$T/rl"
	if [ "$RC" -ne 0 ]; then
		fail "$name: run" "exit $RC: $(tail -c 300 "$ERR")"
		return
	fi
	expect_rc 0 "$name: the rehearsal runs the layout, within 1e-5 of float64" \
		"$ENGINE" validate "$T/r" --tokens $TOK --logits "$T/r.st" --layers-dir "$T/rl" \
		--levels layer,e2e --max-rel 1e-5 --kl-max 1e-6
}
runs "$CFG/deepseek-v3.json" 2 2 2
runs "$CFG/llama-3.1-405b.json" 8 1 1
runs "$CFG/qwen3-30b-a3b.json" 1 3 2

