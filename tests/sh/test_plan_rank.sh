# plan --objective throughput|latency: the ranking held to published
# deployments (docs/plan.md lists them with their sources).
. "$(dirname "$0")/../lib.sh"
CFG="$DAY0_ROOT/assets/configs"
INV="$DAY0_ROOT/assets/inventories/h200-8x8.json"
H200X8="--nodes 1 --cards 8 --card-mem 141GiB --intra-gbps 7200 --inter-gbps 400"
H200X16="--nodes 2 --cards 8 --card-mem 141GiB --intra-gbps 7200 --inter-gbps 400"

top() { # NAME JQ-CONDITION PLAN-ARGS...: the first ranked layout meets it
	local name=$1 cond=$2; shift 2
	run "$ENGINE" plan "$@" --json
	if [ "$RC" -eq 0 ] && jq -e ".feasible[0] | $cond" "$OUT" >/dev/null; then
		ok "$name"
	else
		fail "$name" "exit $RC, top: $(jq -c '.feasible[0] | {tp,pp,ep,dp,cards,serve}' "$OUT" 2>/dev/null | head -c 400)"
	fi
}

# DeepSeek-V3 FP8 on one node of 8 H200 (SGLang, vLLM recipes: tp 8):
# tp 8 fits with KV for the concurrency
top "deepseek-v3 fp8, 8xH200, latency: tp 8 with KV for 16 x 32k" \
	'.tp == 8 and .pp == 1 and .ep == 1 and .dp == 1 and .serve.kv_seqs >= 16' \
	"$CFG/deepseek-v3.json" $H200X8 --objective latency --ctx 32768 --concurrency 16
# bf16 on 2 x 8 H200 (vLLM: TP = cards of a node, PP = nodes): 16 cards,
# TP inside the node
top "deepseek-v3 bf16, 2x8 H200, throughput: 16 cards, TP in the node" \
	'.cards == 16 and .tp_in_node and .tp >= 4 and .tp <= 8' \
	"$CFG/deepseek-v3.json" $H200X16 --weights-dtype bf16 --objective throughput --ctx 32768 --concurrency 16
# Llama-3.1-70B bf16 on 8 H200 (NIM profiles): latency tp 8, throughput
# the fewest cards that hold it (tp 2) times 4 replicas
top "llama-3.1-70b bf16, 8xH200, latency: tp 8" \
	'.tp == 8 and .pp == 1 and .dp == 1' \
	"$CFG/llama-3.1-70b.json" $H200X8 --objective latency --ctx 4096 --concurrency 64
top "llama-3.1-70b bf16, 8xH200, throughput: tp 2 x dp 4" \
	'.tp == 2 and .pp == 1 and .dp == 4' \
	"$CFG/llama-3.1-70b.json" $H200X8 --objective throughput --ctx 4096 --concurrency 64
# Qwen3-235B-A22B bf16 (Qwen's vLLM/SGLang commands: 8 cards)
for obj in latency throughput; do
	top "qwen3-235b-a22b bf16, 8xH200, $obj: all 8 cards" '.cards == 8' \
		"$CFG/qwen3-235b-a22b.json" $H200X8 --objective $obj --ctx 32768 --concurrency 16
done
# the memory answer differs (fewest cards): the objective is what ranks
top "qwen3-235b-a22b by --objective cards: fewer than 8 cards" '.cards < 8' \
	"$CFG/qwen3-235b-a22b.json" $H200X8 --objective cards --ctx 32768 --concurrency 16
# DeepSeek-V3 on 8 x 8 H200: no longer tp1 pp7 on 7 cards
top "deepseek-v3 on h200-8x8, latency: tp 8 in the node, DP across nodes" \
	'.tp == 8 and .tp_in_node and .dp > 1' \
	"$CFG/deepseek-v3.json" --inventory "$INV" --objective latency --ctx 32768 --concurrency 64

# the table shows the same top layout as --json, with its why, and the
# rejected layouts with their reason
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" $H200X8 --objective throughput --ctx 4096 --concurrency 64 --json
want=$(jq -r '.feasible[0] | "tp\(.tp) pp\(.pp) ep\(.ep) dp\(.dp)"' "$OUT")
why=$(jq -r '.feasible[0].serve.why' "$OUT")
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" $H200X8 --objective throughput --ctx 4096 --concurrency 64
if sed -n '5p' "$OUT" | grep -qF "$want" && sed -n '6p' "$OUT" | grep -qF "why: $why"; then
	ok "the table's first row and its why match --json ($want)"
else
	fail "the table's first row and its why match --json" "want $want / $why: $(sed -n '4,6p' "$OUT")"
fi
contains "rejected layouts keep their reason" "tp1 pp1 ep1 dp1: needs" "$OUT"
expect_rc 2 "--objective takes cards, throughput or latency" "$ENGINE" plan "$CFG/llama-3.1-70b.json" $H200X8 --objective fast
contains "the refusal names the choices" "expected cards, throughput or latency" "$ERR"
expect_rc 2 "--card-tflops must be positive" "$ENGINE" plan "$CFG/llama-3.1-70b.json" $H200X8 --card-tflops 0
