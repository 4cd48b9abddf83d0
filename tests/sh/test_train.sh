# day0-engine train: gradients against the float64 reference backward and
# central differences per family at 1 rank, TP 2, EP 2, TP 2 x EP 2,
# DP 2 (ZeRO-1) and PP 2 (1F1B; with TP 2, DP 2, a tied embedding), the
# loss curve of each layout against the 1-rank run, determinism, the f16
# overflow, the memory plan, and each injected fault failing its check by
# name.  What is read is what the agent reads: the --events lines.
. "$(dirname "$0")/../lib.sh"
mpi() { # NP ARGS...
	local np=$1; shift
	timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}
# status of check ITEM in $OUT's events ("" if none)
status() { jq -r --arg i "$1" 'select(.type == "check" and .item == $i) | .status' "$OUT" 2>/dev/null | head -1; }
want() { # NAME ITEM STATUS
	local got
	got=$(status "$2")
	if [ "$got" = "$3" ]; then ok "$1"; else
		fail "$1" "$2 is '$got', expected $3: $(jq -c --arg i "$2" 'select(.item == $i) | .detail' "$OUT" 2>/dev/null | head -c 500) $(head -c 300 "$ERR")"
	fi
}

for a in llama qwen2_moe deepseek_v3; do
	"$ENGINE" gen-model --arch "$a" "$T/$a" >/dev/null || fail "gen-model $a" "exit $?"
done
"$ENGINE" gen-model --arch llama --tie "$T/llama_tie" >/dev/null || fail "gen-model llama --tie" "exit $?"

# 1 rank: every family's gradients, the memory plan, the train events
for a in llama qwen2_moe deepseek_v3; do
	run "$ENGINE" train "$T/$a" --steps 3 --batch 4 --check-grads --events --losses-out "$T/$a.1"
	want "$a 1 rank: gradients vs float64 and central differences" training.gradients pass
	want "$a 1 rank: peak memory within 5% of plan --train" training.memory pass
	jq -c 'select(.item == "training.memory") | .value.measured' "$OUT" >"$T/$a.mem1"
	if [ "$RC" -eq 0 ] && [ "$(jq -s '[.[] | select(.type == "train")] | length' "$OUT")" = 3 ] &&
		jq -e -s '[.[] | select(.type == "train")] | all(has("step") and has("loss") and has("grad_norm")
			and has("loss_scale") and has("skipped") and has("lr") and has("tokens") and has("t_fwd_s")
			and has("t_bwd_s") and has("t_opt_s") and has("t_comm_s") and .layout == "tp1pp1ep1dp1")' "$OUT" >/dev/null; then
		ok "$a: one train event a step with the step time split"
	else
		fail "$a train events" "exit $RC: $(grep '"train"' "$OUT" | head -c 400)"
	fi
	# FD covered the layer types the family has
	kinds=$(jq -r 'select(.item == "training.gradients") | [.value.finite_differences[].kind] | sort | join(",")' "$OUT")
	case $a in
	llama) want_k="attention,embedding,norm" ;;
	*) want_k="attention,embedding,expert,norm,router" ;;
	esac
	if [ "$kinds" = "$want_k" ]; then ok "$a: central differences on $kinds"; else fail "$a FD kinds" "'$kinds', expected $want_k"; fi
done

# TP 2: column/row splits, the input gradients' all-reduce, replicated
# parameters agreed; the loss curve against the 1-rank run
for a in llama qwen2_moe deepseek_v3; do
	run mpi 2 train "$T/$a" --tp 2 --steps 3 --batch 4 --check-grads --events --reference-losses "$T/$a.1"
	want "$a tp2: gradients vs float64" training.gradients pass
	want "$a tp2: loss curve against 1 rank" training.layouts pass
	# MLA's replicated latents and whole expert outputs are not in the
	# estimate's TP terms yet (docs/training.md): deepseek_v3 tp2 is off
	[ "$a" = deepseek_v3 ] || want "$a tp2: peak memory within 5% of the estimate" training.memory pass
done

# EP 2: routed experts split over two EP ranks, each routing its tokens
# (t % 2) to the experts' owners by all-to-all and back; backward sends
# the output gradients along the same routes and the input gradients
# back; expert gradients on their owner only (gathered for the check),
# router and replicated gradients agreed over EP; the global norm over EP
for a in qwen2_moe deepseek_v3; do
	run mpi 2 train "$T/$a" --ep 2 --steps 3 --batch 4 --check-grads --events --reference-losses "$T/$a.1"
	want "$a ep2: gradients vs float64" training.gradients pass
	want "$a ep2: loss curve against 1 rank" training.layouts pass
	[ "$RC" -eq 0 ] && jq -e -s '[.[] | select(.type == "train")] | length == 3 and all(.layout == "tp1pp1ep2dp1")' "$OUT" >/dev/null &&
		ok "$a ep2: exit 0, the layout in the train events" || fail "$a ep2 exit/layout" "exit $RC"
	# each EP rank holds its own experts only: weights, gradients and
	# optimizer state a card below the 1-rank run's
	m2=$(jq -c 'select(.item == "training.memory") | .value.measured' "$OUT")
	jq -e -n --argjson a "$(cat "$T/$a.mem1")" --argjson b "$m2" \
		'$b.weights < $a.weights and $b.grads < $a.grads and $b.optimizer < $a.optimizer' >/dev/null 2>&1 &&
		ok "$a ep2: expert weights, gradients and optimizer state divided over EP ($(cat "$T/$a.mem1") -> $m2)" ||
		fail "$a ep2 expert memory" "1 rank $(cat "$T/$a.mem1"), ep2 $m2"
done
# TP 2 x EP 2 (4 ranks): expert slices partial over TP inside the EP route
run mpi 4 train "$T/qwen2_moe" --tp 2 --ep 2 --steps 3 --batch 4 --check-grads --events --reference-losses "$T/qwen2_moe.1"
want "qwen2_moe tp2 x ep2: gradients vs float64" training.gradients pass
want "qwen2_moe tp2 x ep2: loss curve against 1 rank" training.layouts pass

# full recomputation: the layer rebuilt in backward gives the same
# gradients; the memory estimate with recomputation
run "$ENGINE" train "$T/deepseek_v3" --steps 1 --batch 4 --recompute --check-grads --events
want "deepseek_v3 --recompute: gradients vs float64" training.gradients pass
want "deepseek_v3 --recompute: peak memory within 5%" training.memory pass

# DP 2 with ZeRO-1 (2 sequences a rank: the same global batch as the
# 1-rank run of 4), gradient buckets all-reduced while backward runs; and
# the same steps twice, bit for bit
run mpi 2 train "$T/llama" --dp 2 --zero1 --steps 3 --batch 2 --check-grads --determinism --events \
	--bucket-bytes 16384 --reference-losses "$T/llama.1"
want "llama dp2 zero1: gradients vs float64" training.gradients pass
want "llama dp2 zero1: loss curve against 1 rank" training.layouts pass
want "llama dp2: two runs bitwise equal" training.determinism pass

# f16: a forced overflow skips the step, halves the scale, recovers
run "$ENGINE" train "$T/llama" --dtype f16 --steps 5 --force-overflow 3 --growth-interval 2 --events
want "f16 forced overflow: skipped, halved, recovered" training.overflow pass
want "f16: peak memory within 5% of the estimate" training.memory pass
jq -e -s '[.[] | select(.type == "train")] | (.[2] | has("grad_norm") | not) and (.[3] | has("grad_norm"))' "$OUT" >/dev/null &&
	ok "the overflowed step's non-finite gradient norm is left out of its event" || fail "overflow event" "$(grep '"step":3' "$OUT")"
if jq -e -s '[.[] | select(.type == "train")] | (.[2].skipped == 1 and .[3].loss_scale == .[2].loss_scale / 2
	and .[3].skipped == 0 and .[4].skipped == 0)' "$OUT" >/dev/null &&
	jq -e -s 'map(select(.item == "training.overflow"))[0].value.scale_history | length == 5' "$OUT" >/dev/null; then
	ok "f16: the scale history in the events and the check's evidence"
else
	fail "f16 scale history" "$(grep -E 'train|overflow' "$OUT" | head -c 600)"
fi

# 16-bit working weights: the check's bounds are the rounding's (a bf16
# run's gradients are 5e-3 off the differences, not 1e-4), and a wrong
# backward still fails it
run "$ENGINE" train "$T/llama" --dtype bf16 --steps 1 --check-grads --events
want "bf16 --check-grads: training.gradients passes at its 16-bit bounds" training.gradients pass
run "$ENGINE" train "$T/llama" --dtype bf16 --steps 1 --check-grads --events --inject transpose-grad
want "bf16 with transpose-grad: training.gradients fails" training.gradients fail

# each injected fault fails its check by name (exit 1)
run "$ENGINE" train "$T/llama" --steps 1 --check-grads --events --inject transpose-grad
want "inject transpose-grad fails training.gradients" training.gradients fail
[ "$RC" -eq 1 ] && jq -e -s 'map(select(.item == "training.gradients"))[0].value.worst_tensor == "model.layers.0.self_attn.o_proj.weight"' "$OUT" >/dev/null &&
	ok "transpose-grad: exit 1, the transposed tensor named" || fail "transpose-grad named" "exit $RC"
run "$ENGINE" train "$T/qwen2_moe" --steps 1 --check-grads --events --inject wrong-scale
want "inject wrong-scale fails training.gradients" training.gradients fail
run mpi 2 train "$T/deepseek_v3" --tp 2 --steps 3 --batch 4 --check-grads --events --inject no-allreduce --reference-losses "$T/deepseek_v3.1"
want "inject no-allreduce (tp2) fails training.gradients" training.gradients fail
want "inject no-allreduce (tp2) fails training.layouts" training.layouts fail
run mpi 2 train "$T/llama" --dp 2 --steps 3 --batch 2 --events --inject no-allreduce --reference-losses "$T/llama.1"
want "inject no-allreduce (dp2) fails training.layouts" training.layouts fail
run mpi 2 train "$T/deepseek_v3" --ep 2 --steps 3 --batch 4 --check-grads --events --inject no-allreduce --reference-losses "$T/deepseek_v3.1"
want "inject no-allreduce (ep2: input gradients not summed over EP) fails training.gradients" training.gradients fail
want "inject no-allreduce (ep2) fails training.layouts" training.layouts fail
[ "$RC" -eq 1 ] && ok "inject no-allreduce (ep2): exit 1" || fail "ep2 inject exit" "exit $RC"

# PP 2, the 1F1B schedule: layers split over two stages as run splits
# them, activations sent on and their gradients sent back, gradients
# accumulated over 4 micro-batches of the same global batch as the 1-rank
# run; the schedule each stage ran, the bubble in the train events
run mpi 2 train "$T/llama" --pp 2 --micro-batches 4 --steps 3 --batch 4 --check-grads --determinism --events \
	--reference-losses "$T/llama.1"
want "llama pp2 m4: gradients vs float64" training.gradients pass
want "llama pp2 m4: loss curve against 1 rank" training.layouts pass
want "llama pp2 m4: two runs bitwise equal" training.determinism pass
sched=$(jq -r 'select(.type == "log") | .msg | select(startswith("pipeline schedule"))' "$OUT")
if [ "$sched" = "pipeline schedule 1F1B, pp 2, 4 micro-batches: stage 0: F0 F1 B0 F2 B1 F3 B2 B3; stage 1: F0 B0 F1 B1 F2 B2 F3 B3" ]; then
	ok "llama pp2 m4: 1F1B (stage 0 one forward ahead, then one forward one backward; stage 1 alternating)"
else
	fail "pp2 schedule" "'$sched'"
fi
jq -e -s '[.[] | select(.type == "train")] | length == 3 and all(.layout == "tp1pp2ep1dp1" and .micro_batches == 4
	and (.bubble_stages | length == 2 and all(. >= 0 and . < 1)) and .bubble_theory == 0.2 and .bubble >= 0)' "$OUT" >/dev/null &&
	ok "llama pp2 m4: each stage's bubble and 1F1B's (p-1)/(m+p-1) = 0.2 in the train events" ||
	fail "pp2 bubble in events" "$(grep '"train"' "$OUT" | head -c 500)"
# three stages (deepseek_v3: a dense layer then MoE): stage 0 two ahead
run mpi 3 train "$T/deepseek_v3" --pp 3 --micro-batches 4 --steps 3 --batch 4 --check-grads --events \
	--reference-losses "$T/deepseek_v3.1"
want "deepseek_v3 pp3 m4: gradients vs float64" training.gradients pass
want "deepseek_v3 pp3 m4: loss curve against 1 rank" training.layouts pass
want "deepseek_v3 pp3 m4: peak memory within 5% of plan --train (the largest stage's sum)" training.memory pass
[ "$RC" -eq 0 ] && ok "deepseek_v3 pp3 m4: exit 0 (every check passes)" || fail "deepseek_v3 pp3 m4 exit" "exit $RC: $(head -c 300 "$ERR")"
contains "deepseek_v3 pp3: stage 0 warms up with two forwards" "stage 0: F0 F1 F2 B0 F3 B1 B2 B3; stage 1: F0 F1 B0 F2 B1 F3 B2 B3; stage 2: F0 B0" "$OUT"
# PP 2 x TP 2 (4 ranks): a TP group inside each stage
run mpi 4 train "$T/qwen2_moe" --pp 2 --tp 2 --micro-batches 2 --steps 3 --batch 4 --check-grads --events \
	--reference-losses "$T/qwen2_moe.1"
want "qwen2_moe pp2 x tp2: gradients vs float64" training.gradients pass
want "qwen2_moe pp2 x tp2: loss curve against 1 rank" training.layouts pass
# PP 2 x DP 2 with ZeRO-1 (4 ranks): each replica's pipeline, the
# buckets all-reduced in the last micro-batch's backward
run mpi 4 train "$T/llama" --pp 2 --dp 2 --zero1 --micro-batches 2 --steps 3 --batch 2 --events \
	--reference-losses "$T/llama.1"
want "llama pp2 x dp2 zero1: loss curve against 1 rank" training.layouts pass
# a tied embedding: the first stage's input and the last stage's head, its
# gradient summed over the two
"$ENGINE" train "$T/llama_tie" --steps 3 --batch 4 --losses-out "$T/llama_tie.1" >/dev/null 2>&1
run mpi 2 train "$T/llama_tie" --pp 2 --micro-batches 2 --steps 3 --batch 4 --check-grads --events \
	--reference-losses "$T/llama_tie.1"
want "tied llama pp2: gradients vs float64 (embedding summed over both stages)" training.gradients pass
want "tied llama pp2: loss curve against 1 rank" training.layouts pass
# the activation gradient dropped by stage 0: named, exit 1
run mpi 2 train "$T/llama" --pp 2 --micro-batches 2 --steps 3 --batch 4 --check-grads --events \
	--inject no-pp-grad --reference-losses "$T/llama.1"
want "inject no-pp-grad fails training.gradients" training.gradients fail
want "inject no-pp-grad fails training.layouts" training.layouts fail
[ "$RC" -eq 1 ] && jq -e -s 'map(select(.item == "training.gradients"))[0].value.worst_tensor | test("embed_tokens|layers\\.0\\.")' "$OUT" >/dev/null &&
	ok "no-pp-grad: exit 1, a first-stage tensor named" || fail "no-pp-grad named" "exit $RC: $(jq -c 'select(.item == "training.gradients") | .value.worst_tensor' "$OUT")"

# bad input: named, exit 2
expect_rc 2 "--pp 3 on 2 layers refused" "$ENGINE" train "$T/llama" --pp 3
contains "--pp refusal names the config and the layers" "$T/llama/config.json: --pp 3: 2 layers" "$ERR"
expect_rc 2 "--micro-batches that do not divide --batch refused" "$ENGINE" train "$T/llama" --batch 4 --micro-batches 3
contains "--micro-batches refusal says why" "--batch 4 sequences a rank do not split into 3 micro-batches" "$ERR"
expect_rc 2 "--ep 2 on a dense model refused" mpi 2 train "$T/llama" --ep 2
contains "--ep refusal names the config and the expert count" "$T/llama/config.json: --ep 2: 0 routed experts" "$ERR"
expect_rc 2 "--dtype fp8 refused" "$ENGINE" train "$T/llama" --dtype fp8
contains "--dtype refusal says what was expected" "expected bf16, f16 or f32" "$ERR"
expect_rc 2 "a missing model directory" "$ENGINE" train "$T/none"
contains "the missing directory is named" "$T/none" "$ERR"
expect_rc 1 "over --card-mem: exit 1" "$ENGINE" train "$T/llama" --card-mem 1000000
contains "what did not fit is named" "gradients" "$ERR"
# over the budget only once the step's activations and buffers are
# placed (the tiny llama peaks at 2,146,480 B): exit 1 naming the part,
# never a crash (the RoPE tables were written through a refused
# allocation: signal 11 from 1.9 MB to 2,146,479 B)
"$ENGINE" gen-model --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 128 "$T/llama64" >/dev/null ||
	fail "gen-model llama hidden 64" "exit $?"
for cm in 1900000 2000000 2146479; do
	expect_rc 1 "--card-mem $cm (past the weights, short of the step's peak): exit 1, no crash" "$ENGINE" train "$T/llama64" --card-mem "$cm" --steps 2
	contains "--card-mem $cm: the part that does not fit is named" "does not fit:" "$ERR"
done
contains "--card-mem 2146479: the RoPE tables named" "rope tables" "$ERR"
expect_rc 0 "--card-mem 2146480 (the peak exactly) fits" "$ENGINE" train "$T/llama64" --card-mem 2146480 --steps 2
# a size as the other steps take it (engine/util.h parse_size)
expect_rc 0 "--card-mem 64M accepted" "$ENGINE" train "$T/llama" --card-mem 64M --steps 1
expect_rc 1 "--card-mem 2M: a size, over budget (exit 1, not a usage error)" "$ENGINE" train "$T/llama" --card-mem 2M --steps 1
contains "--card-mem 2M: the 2 MiB budget named" "of the 2.0 MiB budget" "$ERR"
expect_rc 2 "--card-mem 2X refused" "$ENGINE" train "$T/llama" --card-mem 2X
contains "--card-mem refusal says what was expected" "--card-mem: expected bytes per card (e.g. 2000000, 64M, 2G), got '2X'" "$ERR"

# --force-overflow past the run: a usage error at parsing, not a failed
# training.overflow
expect_rc 2 "--force-overflow 9 with the default 3 steps: exit 2" "$ENGINE" train "$T/llama" --force-overflow 9
contains "says the step is past the run" "--force-overflow 9 is past --steps 3" "$ERR"
expect_rc 2 "--force-overflow on the last step: exit 2 (no step after it to recover)" "$ENGINE" train "$T/llama" --force-overflow 3
contains "says why" "--force-overflow 3 is the last of --steps 3" "$ERR"

# the loss curve file: JSON (jansson), written whole or not at all; a
# reference of another run is bad input named with both sides (exit 2,
# before any step), never a training.layouts failure that reads like a
# pass ("2 steps ... worst 0.00e+00 ... not growing" used to end exit 1)
mkdir -p "$T/lo"
run "$ENGINE" train "$T/llama" --steps 2 --losses-out "$T/lo/l2.json"
if [ "$RC" -eq 0 ] && jq -e '(.losses | length == 2 and all(type == "number")) and .steps == 2 and .seq == 16 and
	.sequences == 2 and .seed == 1 and .layout == "tp1pp1ep1dp1"' "$T/lo/l2.json" >/dev/null &&
	[ "$(ls "$T/lo")" = l2.json ]; then
	ok "--losses-out: a JSON curve, no temporary left beside it"
else
	fail "--losses-out JSON" "exit $RC: $(head -c 300 "$T/lo/l2.json") :: $(ls "$T/lo")"
fi
expect_rc 2 "--reference-losses of 2 steps against --steps 4: exit 2" "$ENGINE" train "$T/llama" --steps 4 --reference-losses "$T/lo/l2.json"
contains "names the file and both step counts" "--reference-losses $T/lo/l2.json holds 2 steps, this run has --steps 4" "$ERR"
grep -q '^step 1 ' "$OUT" && fail "refused before training" "$(head -3 "$OUT")" || ok "refused before the first step"
expect_rc 2 "--reference-losses of another --seq: exit 2" "$ENGINE" train "$T/llama" --steps 2 --seq 32 --reference-losses "$T/lo/l2.json"
contains "names the field and both values" "$T/lo/l2.json: \"seq\": the reference ran 16, this run 32" "$ERR"
printf '{bad\n' >"$T/lo/bad.json"
expect_rc 2 "a malformed --reference-losses: exit 2" "$ENGINE" train "$T/llama" --steps 2 --reference-losses "$T/lo/bad.json"
contains "names the file and the parse error's line and column" "--reference-losses $T/lo/bad.json: line 1 column 4: " "$ERR"
run "$ENGINE" train "$T/llama" --steps 2 --reference-losses "$T/lo/l2.json"
[ "$RC" -eq 0 ] && grep -q "^PASS training.layouts: 2 steps" "$OUT" && ok "the same run against its own curve passes" ||
	fail "same-run training.layouts" "exit $RC: $(grep layouts "$OUT")"
# an output that cannot be written is refused before training, with the
# reason; a failed run leaves no file
expect_rc 2 "--losses-out in a missing directory: exit 2" "$ENGINE" train "$T/llama" --losses-out "$T/none/x.json"
contains "with the system's reason" "--losses-out $T/none/x.json: cannot create a file in its directory: No such file or directory" "$ERR"
grep -q '^step 1 ' "$OUT" && fail "refused before training" "$(head -3 "$OUT")" || ok "--losses-out refused before the first step"
expect_rc 1 "over --card-mem with --losses-out: exit 1" "$ENGINE" train "$T/llama" --card-mem 1000000 --losses-out "$T/lo/fail.json"
[ "$(ls "$T/lo")" = "bad.json
l2.json" ] && ok "a failed run writes no --losses-out, leaves no temporary" || fail "failed run's losses file" "$(ls "$T/lo")"
# a sequence past the model's positions
expect_rc 2 "--seq 4096 on a model of 2048 positions: exit 2" "$ENGINE" train "$T/llama" --seq 4096
contains "names the config and its max_position_embeddings" "--seq 4096 is past $T/llama/config.json's max_position_embeddings 2048" "$ERR"

# --global-batch / --micro-batch (plan --train's words, which the
# playbook passes to every train stage): a 1-rank reference and a DP 2
# run given the same --global-batch train on the same sequences
run "$ENGINE" train "$T/llama64" --steps 2 --global-batch 4 --losses-out "$T/lo/g4.json"
[ "$RC" -eq 0 ] && jq -e '.sequences == 4' "$T/lo/g4.json" >/dev/null &&
	ok "--global-batch 4 at 1 rank: 4 sequences a step" || fail "--global-batch 1 rank" "exit $RC: $(head -c 300 "$T/lo/g4.json")"
run mpi 2 train "$T/llama64" --dp 2 --steps 2 --global-batch 4 --micro-batch 1 --events --reference-losses "$T/lo/g4.json"
want "--dp 2 --global-batch 4 --micro-batch 1 against the 1-rank --global-batch 4" training.layouts pass
jq -e -s '[.[] | select(.type == "train")] | length == 2 and all(.micro_batches == 2)' "$OUT" >/dev/null &&
	ok "--micro-batch 1 of 2 sequences a DP rank: 2 micro-batches" || fail "--micro-batch" "$(grep '"train"' "$OUT" | head -c 300)"
expect_rc 2 "--global-batch 3 over --dp 2 refused" mpi 2 train "$T/llama64" --dp 2 --global-batch 3
contains "says it does not split" "--global-batch 3 does not split over --dp 2" "$ERR"
expect_rc 2 "--global-batch with --batch refused" "$ENGINE" train "$T/llama64" --global-batch 4 --batch 2
contains "says they exclude each other" "--global-batch and --batch exclude each other" "$ERR"
expect_rc 2 "--micro-batch 3 of 4 sequences refused" "$ENGINE" train "$T/llama64" --global-batch 4 --micro-batch 3
contains "says it does not split" "--micro-batch 3: the 4 sequences a DP rank (--global-batch over --dp) do not split into micro-batches of 3" "$ERR"
expect_rc 2 "--micro-batch with --micro-batches refused" "$ENGINE" train "$T/llama64" --micro-batch 1 --micro-batches 2

# --force-overflow where there is no loss scaler (f32, bf16): the step is
# skipped and the scale stays 1, and the check says so (it used to read
# "skipped, scale halved" over a history of 1s)
for dt in f32 bf16; do
	run "$ENGINE" train "$T/llama64" --dtype "$dt" --steps 3 --force-overflow 2 --events
	want "$dt --force-overflow 2: training.overflow passes (skipped, the later steps applied)" training.overflow pass
	d=$(jq -r 'select(.item == "training.overflow") | .detail' "$OUT")
	case "$d" in
	*"scale halved"*) fail "$dt overflow detail" "claims a halving: $d" ;;
	*"no loss scaler at $dt: the scale stays 1; the scale a step: 1 1(skip) 1") ok "$dt overflow detail: no loss scaler, the scale stays 1" ;;
	*) fail "$dt overflow detail" "$d" ;;
	esac
done
# A learning rate that diverges: said where the evidence is, exit 1 (it
# was exit 0 with the loss 5.22 -> 3002, and at f16 6 of 8 steps skipped)
run "$ENGINE" train "$T/llama64" --lr 9.9 --steps 8 --losses-out "$T/lo/lr99.json"
[ "$RC" -eq 1 ] && ok "--lr 9.9: exit 1" || fail "--lr 9.9 exit" "exit $RC"
contains "--lr 9.9: the loss diverged, named with both losses" "the loss diverged: 5.22143 at step 1, 3002.6 at step 8 (more than twice the first; --lr 9.9)" "$ERR"
run "$ENGINE" train "$T/llama64" --lr 9.9 --steps 8 --dtype f16 --events
want "--lr 9.9 f16: 6 of 8 steps skipped fails training.overflow" training.overflow fail
[ "$RC" -eq 1 ] && jq -e -s 'map(select(.item == "training.overflow"))[0].detail | contains("the loss scaler never recovered: 6 of 8 steps skipped")' "$OUT" >/dev/null &&
	jq -e -s 'map(select(.type == "log" and .level == "error"))[0].msg | startswith("the loss diverged")' "$OUT" >/dev/null &&
	ok "--lr 9.9 f16: exit 1, the scaler never recovered, the divergence logged" ||
	fail "--lr 9.9 f16" "exit $RC: $(grep -E 'overflow|diverged' "$OUT" | head -c 600)"
# a loss curve compared with a diverged reference says so (not only
# "growing", which points at the layout)
run "$ENGINE" train "$T/llama64" --lr 9.9 --steps 8 --events --reference-losses "$T/lo/lr99.json"
jq -e -s 'map(select(.item == "training.layouts"))[0].detail | contains("the loss diverged (the reference 5.22143 to 3002.6")' "$OUT" >/dev/null &&
	ok "training.layouts against a diverged reference names the divergence" ||
	fail "layouts divergence" "$(grep layouts "$OUT" | head -c 600)"

# A rank killed mid-run (kill -9 of rank 1 of a TP 2 job): mpirun stops
# the others with SIGTERM, and the --losses-out temporary is removed (it
# was left behind, F.tmp-XXXXXX).  rank 0 itself SIGKILLed cannot be
# caught (docs/training.md says so).
mkdir -p "$T/kill"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$ENGINE" train "$T/llama64" --tp 2 \
	--steps 100000 --losses-out "$T/kill/F.json" >"$T/kill.out" 2>&1 &
mp=$!
for i in $(seq 100); do ls "$T/kill" | grep -q . && grep -q '^step 20 ' "$T/kill.out" && break; sleep 0.1; done
victim=$(mpi_rank_pid "day0-engine train $T/llama64" 1 "$mp")
if [ -n "$victim" ]; then
	kill -9 "$victim"
	for i in $(seq 300); do kill -0 "$mp" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$mp" 2>/dev/null && { kill "$mp"; fail "killed rank" "mpirun still running 30 s after rank 1 was killed"; }
	wait "$mp" 2>/dev/null
	left=$(ls "$T/kill")
	[ -z "$left" ] && ok "rank 1 killed: no --losses-out temporary left" || fail "rank 1 killed" "left: $left"
else
	kill "$mp"
	wait "$mp" 2>/dev/null
	fail "killed rank" "no rank 1 found: $(head -c 300 "$T/kill.out")"
fi
