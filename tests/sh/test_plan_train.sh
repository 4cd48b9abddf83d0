# plan --train: the fine-tuning memory plan (mixed-precision AdamW, ZeRO-1,
# activations with and without recomputation) and its ranking by the step,
# held to the formulas of docs/plan.md "Fine-tuning" and to what published
# recipes run.
. "$(dirname "$0")/../lib.sh"
CFG="$DAY0_ROOT/assets/configs"
INV="$DAY0_ROOT/assets/inventories/h200-8x8.json"

# Llama-3.1-70B on 8 x 8 H200: fits, TP inside a node with PP (NeMo's
# llama3_70b recipe: TP 4, PP 4, sequence parallel, distributed optimizer)
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --train --json
if [ "$RC" -eq 0 ] && jq -e '.feasible[0] | .tp_in_node and .tp >= 2 and .tp <= 8 and .pp >= 2 and .train.step_s > 0' "$OUT" >/dev/null; then
	ok "llama-3.1-70b --train on h200-8x8: TP in a node with PP ($(jq -r '.feasible[0] | "tp\(.tp) pp\(.pp) dp\(.dp)"' "$OUT"))"
else
	fail "llama-3.1-70b --train on h200-8x8" "exit $RC: $(jq -c '.feasible[0] | {tp,pp,ep,dp,train}' "$OUT" 2>/dev/null | head -c 400)"
fi
check "settings say what was planned" jq -e '.settings.train == {"seq": 4096, "micro_batch": 1, "global_batch": 128, "zero1": true, "recompute": "auto"}' "$OUT"

# 16 bytes a parameter: bf16 weights and gradients (2 + 2), f32 master and
# two moments (12) divided by DP under ZeRO-1; the parameters from an f32
# plan of the same layout (4 bytes each)
P4=$("$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --layout 8,2,1,4 --weights-dtype f32 --json | jq '.feasible[0].rank_weight_bytes | max')
B16=$("$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --layout 8,2,1,4 --weights-dtype bf16 --json | jq '.feasible[0].weights_bytes')
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --train --layout 8,2,1,4 --json
if [ "$RC" -eq 0 ] && jq -e --argjson p4 "$P4" --argjson b16 "$B16" '.feasible[0].train |
	.weights_bytes == $b16 and .grads_bytes == $b16 and .optimizer_bytes == 12 * ($p4 / 4) / 4 and
	.micro_batches == 32 and .dp_bytes == 2 * (3 / 4) * 2 * ($p4 / 4) and
	.tp_bytes == 32 * 40 * 4 * (2 * 7 / 8) * 4096 * 8192 * 2' "$OUT" >/dev/null; then
	ok "tp8 pp2 dp4: weights = grads = bf16 slice, optimizer 12 B/param / DP, DP and TP bytes per step"
else
	fail "tp8 pp2 dp4 train bytes" "p4 $P4 b16 $B16: $(jq -c '.feasible[0].train' "$OUT" | head -c 600)"
fi
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --train --layout 8,2,1,4 --no-zero1 --json
check "--no-zero1: the optimizer is 12 B/param, unsharded" \
	jq -e --argjson p4 "$P4" '.feasible[0].train.optimizer_bytes == 12 * ($p4 / 4)' "$OUT"

# activations of Llama-3.1-8B, one rank, one sequence of 4096 (its 16 B a
# parameter fill the card: it fits only recomputing): per token a
# layer 2(4H + q + k + v + o) + 6F bytes, 32 layers, plus f32 logits; with
# full recomputation each layer's input (2H) and one layer rebuilt
run "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --train --global-batch 1 --layout 1,1,1,1 --json
want_none=$(( 4096 * (32 * (2 * (4 * 4096 + 4096 + 1024 + 1024 + 4096) + 6 * 14336) + 4 * 128256) ))
want_full=$(( 4096 * (32 * 2 * 4096 + 2 * (4 * 4096 + 4096 + 1024 + 1024 + 4096) + 6 * 14336 + 4 * 128256) ))
if [ "$RC" -eq 0 ] && jq -e --argjson n "$want_none" --argjson f "$want_full" \
	'(.feasible + .rejected)[0].train | .activation_bytes == $n and .activation_recompute_bytes == $f' "$OUT" >/dev/null; then
	ok "llama-3.1-8b activations: $want_none B kept, $want_full B with recomputation"
else
	fail "llama-3.1-8b activations" "want $want_none / $want_full: $(jq -c '.feasible[0].train' "$OUT" | head -c 400)"
fi

# recomputation when needed: a layout that fits only with it, refused
# without it, and the table says which
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --train --ctx 8192 --global-batch 512 --json
L=$(jq -r '[.feasible[] | select(.train.recompute)][0] | "\(.tp),\(.pp),\(.ep),\(.dp)"' "$OUT")
if [ "$RC" -eq 0 ] && [ -n "$L" ] && [ "$L" != "null,null,null,null" ]; then
	ok "at 8k x 512 some layout fits only with full recomputation ($L)"
	expect_rc 1 "$L with --recompute none does not fit" "$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" \
		--train --ctx 8192 --global-batch 512 --layout "$L" --recompute none
	contains "its reason names the activations" "+ activations" "$OUT"
else
	fail "a layout that fits only with recomputation" "exit $RC, none found"
fi
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" --inventory "$INV" --train --top 2
if grep -q "fine-tuning: AdamW, bf16 weights and gradients, f32 master + moments (ZeRO-1 over DP); 128 sequences of 4096 tokens a step" "$OUT" &&
	grep -qE "^ +1  tp[0-9]+ pp[0-9]+ ep1 dp[0-9]+ +64 .* yes  none" "$OUT" &&
	grep -q "why: step .* s for 128 x 4096 tokens .* per rank a step: TP .* GB, PP .* GB, EP .* GB, DP .* GB" "$OUT"; then
	ok "the table: header, first row, its why"
else
	fail "the train table" "$(head -8 "$OUT")"
fi

# DeepSeek-V3: 671B x 16 B = 10.7 TB of training state; 64 H200 hold 9 TB:
# no layout fits, and the nearest says why
run "$ENGINE" plan "$CFG/deepseek-v3.json" --inventory "$INV" --train
if [ "$RC" -eq 1 ] && grep -q "memory.plan  FAIL: no layout of [0-9]* fits: needs .* (weights .* + gradients .* + optimizer .* + activations .*), .* usable" "$OUT"; then
	ok "deepseek-v3 --train on h200-8x8: no layout fits (exit 1), the nearest named with its parts"
else
	fail "deepseek-v3 --train on h200-8x8" "exit $RC: $(tail -2 "$OUT")"
fi
# on 16 x 8 it fits with EP carved from DP: tp1 pp16 ep8 (DeepSeek's own
# PP 16 x EP, no TP), recomputing, EP traffic inside the node
run "$ENGINE" plan "$CFG/deepseek-v3.json" --nodes 16 --cards 8 --card-mem 141GiB --train --layout 1,16,8 --json
check "deepseek-v3 tp1 pp16 ep8 on 16 x 8: fits with recomputation, 16 micro-batches a stream" \
	jq -e '.feasible[0] | .fits and .train.recompute and .train.micro_batches == 16 and .train.ep_bytes > 0 and .train.tp_bytes == 0' "$OUT"
[ "$RC" -eq 0 ] || fail "deepseek-v3 tp1 pp16 ep8 plan ran" "exit $RC"

# bad input
expect_rc 2 "--train with --objective" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --train --objective latency
contains "says to leave it out" "leave out --objective" "$ERR"
expect_rc 2 "--recompute takes auto, none or full" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --train --recompute some
contains "and says so" "--recompute: expected auto, none or full" "$ERR"
expect_rc 2 "--micro-batch 0" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --train --micro-batch 0
expect_rc 1 "a global batch DP does not divide" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --train \
	--global-batch 3 --layout 1,1,1,2
contains "is refused with the reason" "does not split over DP 2 x EP 1" "$OUT"
