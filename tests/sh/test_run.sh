# day0-engine run under real mpirun, checked by validate against float64.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
TOK=1,5,9,3,7,11,2,60
mpi() { # NP ARGS...: day0-engine under mpirun
	local np=$1; shift
	timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}
gen() { # arch dir extra...
	local arch=$1 dir=$2; shift 2
	"$ENGINE" gen-model --arch "$arch" --layers 4 --heads 4 --kv-heads 2 --hidden 64 \
		--vocab 128 --shards 2 "$@" "$dir" >/dev/null
}
# run a layout, dump, validate at 1e-5 relative (f32)
layout() { # arch dir tp pp ep
	local arch=$1 dir=$2 tp=$3 pp=$4 ep=$5
	rm -rf "$T/ly" "$T/lg.st"
	run mpi $((tp * pp * ep)) run "$dir" --tp "$tp" --pp "$pp" --ep "$ep" --tokens "${TOKS:-$TOK}" \
		--generate 4 --dump-logits "$T/lg.st" --dump-layers "$T/ly"
	if [ "$RC" -ne 0 ]; then
		fail "$arch tp$tp pp$pp ep$ep: run" "exit $RC: $(tail -c 300 "$ERR")"
		return
	fi
	grep '^generated:' "$OUT" >"$T/gen.$arch.tp$tp.pp$pp.ep$ep"
	expect_rc 0 "$arch tp$tp pp$pp ep$ep: layers and logits within 1e-5 of float64" \
		"$ENGINE" validate "$dir" --tokens "${TOKS:-$TOK}" --logits "$T/lg.st" --layers-dir "$T/ly" \
		--levels layer,e2e --max-rel 1e-5 --kl-max 1e-6
}

for arch in llama mistral qwen2 qwen3 mixtral qwen2_moe qwen3_moe deepseek_v3; do
	extra=""
	case $arch in
	deepseek_v3) extra="--experts 8 --n-group 4 --topk-group 2" ;;
	mixtral | qwen2_moe | qwen3_moe) extra="--experts 4" ;;
	llama) extra="--rope-scaling llama3:8 --attention-bias" ;;
	qwen3) extra="--rope-scaling yarn:4 --tie" ;;
	mistral) extra="--rope-scaling linear:2" ;;
	qwen2) extra="--rope-scaling dynamic:2 --max-pos 16" ;;
	esac
	# qwen2's dynamic NTK rope only acts past max_position_embeddings (16)
	TOKS=""
	[ "$arch" = qwen2 ] && TOKS=3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3,2,3,8,4
	gen "$arch" "$T/m.$arch" $extra
	lays="1,1,1 2,1,1 4,1,1 1,2,1 2,2,1"
	case $arch in mixtral | qwen2_moe | qwen3_moe | deepseek_v3) lays="$lays 2,1,2 1,1,4 1,2,2" ;; esac
	for l in $lays; do
		IFS=, read -r tp pp ep <<<"$l"
		layout "$arch" "$T/m.$arch" "$tp" "$pp" "$ep"
	done
	check "$arch: --generate gives the same tokens at every layout" \
		bash -c "[ \$(cat '$T'/gen.$arch.* | sort -u | wc -l) = 1 ] && [ -s '$T/gen.$arch.tp1.pp1.ep1' ]"
done

# From convert's rank files: same numbers; bf16 within its documented bound.
"$ENGINE" convert "$T/m.mixtral" "$T/c32" --dtype f32 --tp 2 --pp 2 >/dev/null
rm -rf "$T/ly"
expect_rc 0 "run from convert's f32 rank files (tp2 pp2)" mpi 4 run "$T/c32" --tp 2 --pp 2 --tokens "$TOK" --dump-logits "$T/lg.st" --dump-layers "$T/ly"
expect_rc 0 "… matches float64 to 1e-5" "$ENGINE" validate "$T/m.mixtral" --tokens "$TOK" --logits "$T/lg.st" --layers-dir "$T/ly" --levels layer,e2e
"$ENGINE" convert "$T/m.deepseek_v3" "$T/c16" --dtype bf16 --tp 2 --ep 2 >/dev/null
expect_rc 0 "run from bf16 rank files (deepseek_v3 tp2 ep2)" mpi 4 run "$T/c16" --tp 2 --ep 2 --tokens "$TOK" --dump-logits "$T/lg16.st"
expect_rc 1 "bf16 weights are not within the f32 bound" "$ENGINE" validate "$T/m.deepseek_v3" --tokens "$TOK" --logits "$T/lg16.st" --levels e2e
expect_rc 0 "bf16 weights stay within the documented bf16 bound (rel 2e-2, KL 1e-3)" "$ENGINE" validate "$T/m.deepseek_v3" \
	--tokens "$TOK" --logits "$T/lg16.st" --levels e2e --max-rel 2e-2 --kl-max 1e-3

# Refusals: a layout that differs from the conversion, or from mpirun's size.
expect_rc 2 "converted for tp2 pp2, launched with tp4: refused" mpi 4 run "$T/c32" --tp 4 --tokens "$TOK"
contains "the refusal says what differs" "converted for tp=2 but launched with tp=4" "$ERR"
expect_rc 2 "--tp 2 under -np 4: refused" mpi 4 run "$T/m.llama" --tp 2 --tokens "$TOK"
contains "the refusal names both counts" "tp 2 x pp 1 x ep 1 = 2 ranks, but mpirun started 4" "$ERR"
expect_rc 2 "a token outside the vocabulary" mpi 1 run "$T/m.llama" --tp 1 --tokens 1,500
contains "names the token" "id 500 is outside the vocabulary" "$ERR"

# The card budget: a clean resources.peak failure naming what did not fit.
expect_rc 1 "--card-mem 96K stops every rank cleanly" mpi 2 run "$T/m.llama" --tp 2 --tokens "$TOK" --card-mem 96K --events
check "resources.peak fail event names what did not fit" grep -q '"item":"resources.peak","status":"fail","detail":"[^"]*does not fit' "$OUT"
contains "… on stderr too" "does not fit" "$ERR"
check "no rank crashed (no MPI abort)" bash -c "! grep -qi 'MPI_ABORT\|Segmentation\|core dumped' '$ERR'"

# Events: comm.groups, comm per group and op, per-card memory samples.
expect_rc 0 "run --events" mpi 4 run "$T/m.mixtral" --tp 2 --ep 2 --tokens "$TOK" --generate 2 --events
grep '^{' "$OUT" | awk '{print}' >"$T/ev.all"
for r in 0 1 2 3; do grep "\"rank\":$r[,}]\|\"card\":$r," "$T/ev.all" >/dev/null || true; done
check "comm.groups passes" grep -q '"item":"comm.groups","status":"pass"' "$T/ev.all"
check "comm events for the TP all-reduce" grep -q '"type":"comm","op":"allreduce".*"group":"tp"' "$T/ev.all"
check "comm events for the EP all-to-all" grep -q '"type":"comm","op":"alltoall".*"group":"ep"' "$T/ev.all"
check "alloc.peak samples for every card" bash -c "for c in 0 1 2 3; do grep -q \"\\\"card\\\":\$c,\\\"metric\\\":\\\"alloc.peak\\\"\" '$T/ev.all' || exit 1; done"
check "the run ends with rc 0" grep -q '"type":"stage","stage":"run","state":"end".*"rc":0' "$T/ev.all"
# No --card-mem: nothing to be within, and resources.peak says so (it
# passed with "every card within its budget" and a threshold of 0)
check "no --card-mem: resources.peak skips, naming the peak it did not check" \
	grep -qE '"item":"resources.peak","status":"skip","detail":"no card budget given \(--card-mem\): peak [0-9.]+ [KMG]?i?B a card, not checked"' "$T/ev.all"
expect_rc 0 "validate --levels op" "$ENGINE" validate "$T/m.llama" --levels op --events
check "numerics.op passes" "$TOOLS/jsonl_check" "$OUT" "type=check,item=numerics.op,status=pass"

# perf: the baseline figures and the perf.baseline check.
expect_rc 0 "perf --json at tp 2" mpi 2 perf "$T/m.llama" --tp 2 --prompt-tokens 16 --gen-tokens 4 --json
check "perf reports TTFT, TPOT, tokens/s and the communication share" bash -c "tr -d ' \n' <'$OUT' | grep -q '\"ttft_ms\":[0-9.]*,\"tpot_ms\":[0-9.]*,\"tokens_per_s\":[0-9.]*' && grep -q comm_share '$OUT'"
expect_rc 0 "perf --events" mpi 1 perf "$T/m.llama" --tp 1 --prompt-tokens 8 --gen-tokens 2 --events
check "perf event and perf.baseline check" bash -c "grep -q '\"type\":\"perf\"' '$OUT' && grep -q '\"item\":\"perf.baseline\",\"status\":\"pass\"' '$OUT'"
expect_rc 2 "perf without --gen-tokens" mpi 1 perf "$T/m.llama" --tp 1 --prompt-tokens 8

# The multi-node launch line's hostfile, from an inventory.
printf '{"defaults":{"cards":4,"card_mem":"8GiB"},"nodes":[{"name":"n[1-3]","host":"10.1.0.[1-3]"},{"name":"me","transport":"local","cards":2}]}' >"$T/inv.json"
expect_rc 0 "hostfile from an inventory" "$ENGINE" hostfile --inventory "$T/inv.json"
check "one line per node with its cards as slots" bash -c "[ \"\$(cat '$OUT')\" = \"\$(printf '10.1.0.1 slots=4\n10.1.0.2 slots=4\n10.1.0.3 slots=4\nlocalhost slots=2')\" ]"
expect_rc 0 "hostfile --nodes" "$ENGINE" hostfile --inventory "$T/inv.json" --nodes 'n[2-3]'
check "--nodes keeps the named ones" bash -c "[ \$(wc -l <'$OUT') = 2 ] && grep -q '10.1.0.3 slots=4' '$OUT'"
