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

# Crossing nodes (issue #34): Llama-3.1-405B bf16 fits one 8 x H200 node
# (tp 8); operators serve it TP 8 inside the node, DP (or PP) across
# (Llama 3 paper, section 6.1). Not tp 16/32 across nodes.
top "llama-3.1-405b bf16 on h200-8x8, latency 8k x 16: tp 8 in a node, DP across" \
	'.tp == 8 and .pp == 1 and .ep == 1 and .dp > 1 and .replica_nodes == 1' \
	"$CFG/llama-3.1-405b.json" --inventory "$INV" --objective latency --ctx 8192 --concurrency 16
# DeepSeek-V3 FP8 at the same load: one node per replica, tp 8 (SGLang's
# recipe) or attention unsplit with EP 8 (DP-attention + EP), DP across
top "deepseek-v3 fp8 on h200-8x8, latency 8k x 16: tp 8 or ep 8 in a node" \
	'.replica_nodes == 1 and .pp == 1 and ((.tp == 8 and .ep == 1) or (.tp == 1 and .ep == 8)) and .dp > 1' \
	"$CFG/deepseek-v3.json" --inventory "$INV" --objective latency --ctx 8192 --concurrency 16
# Llama-3.1-8B for throughput: one card a replica, replicated (NIM)
top "llama-3.1-8b on h200-8x8, throughput: tp 1 x dp 64" \
	'.tp == 1 and .pp == 1 and .dp == 64' \
	"$CFG/llama-3.1-8b.json" --inventory "$INV" --objective throughput --ctx 8192 --concurrency 256

# The decode step's split adds up, and counts what it should: 2 all-reduces
# a layer for TP (405B: 126 layers), 2 all-to-alls a MoE layer for EP
# (DeepSeek-V3: 58 of 61); a cross-node replica waits for its slowest node
run "$ENGINE" plan "$CFG/llama-3.1-405b.json" --inventory "$INV" --objective latency --ctx 8192 --concurrency 16 --layout 16,1,1,4 --json
if [ "$RC" -eq 0 ] && jq -e '.feasible[0].serve as $s | $s.comm_messages == 252 and $s.straggler_ms > 0 and
	($s.stage_ms + $s.comm_bandwidth_ms + $s.comm_latency_ms + $s.straggler_ms - $s.tpot_ms | fabs) < 1e-6 and
	$s.rank_ms > $s.tpot_ms and $s.replica_nodes == 2 and $s.lost_node_share == 0.25' "$OUT" >/dev/null; then
	ok "tp16 across 2 nodes: TPOT = stage + bandwidth + latency + straggler, 252 all-reduces, blast radius 2 nodes"
else
	fail "tp16 across 2 nodes: the split" "$(jq -c '.feasible[0].serve' "$OUT" | head -c 600)"
fi
contains "its why shows the split and the penalty" "(bandwidth " "$OUT"
run "$ENGINE" plan "$CFG/llama-3.1-405b.json" --inventory "$INV" --objective latency --ctx 8192 --concurrency 16 --layout 16,1,1,4
if grep -q "why: TPOT .* ms = 1 stage x .* ms + collectives .* ms (bandwidth .*, latency .*: 252 messages) + straggler .* ms (2 nodes); ranked as .* ms (blast radius)" "$OUT" &&
	grep -q "a lost node stops 25% (replica on 2 nodes)" "$OUT"; then
	ok "the table's why: bandwidth, latency, straggler, blast radius"
else
	fail "the table's why" "$(grep why "$OUT" | head -c 600)"
fi
run "$ENGINE" plan "$CFG/deepseek-v3.json" --inventory "$INV" --objective latency --ctx 8192 --concurrency 16 --layout 1,1,8,8 --json
check "deepseek-v3 ep 8: 116 all-to-alls a step, no straggler in one node" \
	jq -e '.feasible[0].serve | .comm_messages == 116 and .straggler_ms == 0 and .rank_ms == .tpot_ms' "$OUT"
[ "$RC" -eq 0 ] || fail "deepseek-v3 ep 8 plan ran" "exit $RC"

# The link latencies come from the inventory: a slower fabric costs the
# cross-node layout more latency and the in-node one nothing
sed 's/"inter_node_latency_us": 5,/"inter_node_latency_us": 50,/' "$INV" >"$T/slow.json"
lat() { "$ENGINE" plan "$CFG/llama-3.1-405b.json" --inventory "$1" --objective latency --ctx 8192 --concurrency 16 --layout "$2" --json | jq '.feasible[0].serve.comm_latency_ms'; }
a=$(lat "$INV" 16,1,1,4) b=$(lat "$T/slow.json" 16,1,1,4) c=$(lat "$INV" 8,1,1,8) d=$(lat "$T/slow.json" 8,1,1,8)
# tree all-reduce over 2 nodes: 2 x log2(2) network hops each, 252 of them
if awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" 'BEGIN { x = (b - a) - 252 * 2 * 45e-3; exit !(x < 1e-6 && x > -1e-6 && c == d) }'; then
	ok "inter_node_latency_us 5 -> 50: +252 x 2 x 45 us on tp16, nothing on tp8 ($a -> $b ms; $c ms)"
else
	fail "inter_node_latency_us moves the cross-node latency" "tp16 $a -> $b, tp8 $c -> $d"
fi
# the blast-radius penalty is what ranks tp 8 first: without it the
# estimate prefers a replica across nodes (docs/plan.md says by how much)
top "--blast-penalty 0: the bare TPOT prefers a replica across nodes" \
	'.replica_nodes > 1' \
	"$CFG/llama-3.1-405b.json" --inventory "$INV" --objective latency --ctx 8192 --concurrency 16 --blast-penalty 0
expect_rc 2 "--blast-penalty takes a fraction" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --blast-penalty x
contains "and says so" "--blast-penalty: expected a fraction" "$ERR"
# bad inventory values: exit 2 naming the file and the key
sed 's/"inter_node_latency_us": 5,/"inter_node_latency_us": -3,/' "$INV" >"$T/neg.json"
expect_rc 2 "a negative link latency is refused" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$T/neg.json"
contains "naming the file and the key" "neg.json: defaults.links.inter_node_latency_us: expected a number from 0 to" "$ERR"
sed 's/"inter_node_gbps": 400/"inter_node_gbps": 400, "straggler_per_nod": 0.1/' "$INV" >"$T/typo.json"
expect_rc 2 "a misspelled links key is refused" "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$T/typo.json"
contains "with the nearest key" "did you mean 'straggler_per_node'" "$ERR"
# the default objective is the memory answer (docs/plan.md)
run "$ENGINE" plan "$CFG/llama-3.1-8b.json" --inventory "$INV" --json
[ "$RC" -eq 0 ] || fail "plan without --objective ran" "exit $RC"
check "the default objective is cards" jq -e '.settings.objective == "cards" and (.feasible[0] | has("serve") | not)' "$OUT"

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
# The why's tokens/s in SI (a tiny model on H200 figures runs at millions
# a second: "3.33 G tok/s", not ten digits), the same figure as --json's.
run "$ENGINE" plan "$CFG/llama-3.1-70b.json" $H200X8 --objective throughput --ctx 4096 --concurrency 64 --json
tps=$(jq -r '.feasible[0].serve.tokens_per_s' "$OUT")
shown=$(jq -r '.feasible[0].serve.why' "$OUT" | sed -n 's/^\([0-9.]* [kMGT]\{0,1\}\) \{0,1\}tok\/s from.*/\1/p')
want=$(python3 -c "
v=float('$tps'); u=0; us=['', ' k',' M',' G',' T']
if v < 10000: print('%.0f' % v)
else:
    while v >= 1000 and u < 4: v /= 1000; u += 1
    print(('%.2f' if v < 10 else '%.1f' if v < 100 else '%.0f') % v + us[u])")
check "the why's tokens/s ($shown) is --json's $tps in SI ($want)" test -n "$shown" -a "$shown" = "$want"
