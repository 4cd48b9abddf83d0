# plan without an inventory file: --nodes --cards --card-mem (what the
# console passes from ${nodes} ${cards} ${card_mem}) plans exactly as the
# equivalent inventory does, and the two ways exclude each other.
. "$(dirname "$0")/../lib.sh"
CONFIGS="$DAY0_ROOT/assets/configs"
INV="$DAY0_ROOT/assets/inventories/h200-8x8.json"
# 141 GiB in bytes, the way ${card_mem} arrives
MEM=$((141 * 1024 * 1024 * 1024))

expect_rc 0 "plan DeepSeek-V3 with --nodes 8 --cards 8 --card-mem BYTES" "$ENGINE" plan "$CONFIGS/deepseek-v3.json" \
	--nodes 8 --cards 8 --card-mem "$MEM" --intra-gbps 7200 --inter-gbps 400 --ctx 32768 --concurrency 64 --json
tr -d ' \n' <"$OUT" | sed 's/"model":"[^"]*",//' >"$T/cards.json"
expect_rc 0 "the same with --inventory" "$ENGINE" plan "$CONFIGS/deepseek-v3.json" --inventory "$INV" \
	--ctx 32768 --concurrency 64 --json
tr -d ' \n' <"$OUT" | sed 's/"model":"[^"]*",//' >"$T/inv.json"
check "both plans are identical" cmp -s "$T/cards.json" "$T/inv.json"
contains "the cluster is 64 cards" '"cards":64' "$T/cards.json"

# the link latencies and straggler by hand too: the same plan as the
# inventory that states them (a serving objective, which uses them)
expect_rc 0 "latency plan with --intra/--inter-latency-us and --straggler" "$ENGINE" plan "$CONFIGS/llama-3.1-405b.json" \
	--nodes 8 --cards 8 --card-mem "$MEM" --intra-gbps 7200 --inter-gbps 400 --intra-latency-us 0.6 \
	--inter-latency-us 5 --straggler 0.05 --objective latency --ctx 8192 --concurrency 16 --json
tr -d ' \n' <"$OUT" | sed 's/"model":"[^"]*",//' >"$T/cards-lat.json"
expect_rc 0 "the same with --inventory" "$ENGINE" plan "$CONFIGS/llama-3.1-405b.json" --inventory "$INV" \
	--objective latency --ctx 8192 --concurrency 16 --json
tr -d ' \n' <"$OUT" | sed 's/"model":"[^"]*",//' >"$T/inv-lat.json"
check "both latency plans are identical" cmp -s "$T/cards-lat.json" "$T/inv-lat.json"
contains "and the cluster states the latencies" '"inter_node_latency_us":5' "$T/cards-lat.json"

expect_rc 0 "--card-mem takes sizes too (141G)" "$ENGINE" plan "$CONFIGS/llama-3.1-405b.json" \
	--nodes 2 --cards 8 --card-mem 141G --ctx 32768 --concurrency 64
contains "the header says where the cluster came from" "on --nodes/--cards/--card-mem: 2 nodes x 8 cards x 141.0 GiB = 16 cards" "$OUT"
contains "memory.plan passes" "memory.plan  pass" "$OUT"

expect_rc 1 "nothing fits on one 1 GiB card: exit 1" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" \
	--nodes 1 --cards 1 --card-mem 1G
contains "and memory.plan fails" "memory.plan  FAIL: no layout of 1 fits" "$OUT"

expect_rc 0 "--layout with --events: one memory.plan check" "$ENGINE" plan "$CONFIGS/qwen3-30b-a3b.json" \
	--nodes 1 --cards 8 --card-mem 141G --weights-dtype bf16 --layout 2,1,4 --events
check "the check event is there and passes" grep -q '"type":"check","item":"memory.plan","status":"pass"' "$OUT"
# A layout of more ranks than the cluster's cards does not fit, however
# small its per-card memory: the launch could not start its ranks.
expect_rc 1 "--layout 2,2,4 on 8 cards (16 ranks): exit 1" "$ENGINE" plan "$CONFIGS/qwen3-30b-a3b.json" \
	--nodes 1 --cards 8 --card-mem 141G --weights-dtype bf16 --layout 2,2,4 --events
check "the check fails and says why" grep -q '"type":"check","item":"memory.plan","status":"fail","detail":"no layout of 1 fits: needs 16 cards (tp2 x pp2 x ep4 x dp1), the cluster has 8"' "$OUT"
expect_rc 1 "... --json: fits false" "$ENGINE" plan "$CONFIGS/qwen3-30b-a3b.json" \
	--nodes 1 --cards 8 --card-mem 141G --weights-dtype bf16 --layout 2,2,4 --json
check "... with the reason" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["feasible"] == [], d["feasible"]
p = d["rejected"][0]
assert p["fits"] is False and p["cards"] == 16, p
assert p["reason"].startswith("needs 16 cards"), p["reason"]' "$OUT"
expect_rc 1 "--train --layout 2,2,4 on 8 cards: exit 1" "$ENGINE" plan "$CONFIGS/qwen3-30b-a3b.json" \
	--nodes 1 --cards 8 --card-mem 141G --layout 2,2,4 --train
contains "... says the cluster is too small" "needs 16 cards (tp2 x pp2 x ep4 x dp1), the cluster has 8" "$OUT"

# usage errors: exit 2 with a message naming what is wrong
expect_rc 2 "no cluster at all" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json"
contains "says what to give" "the cluster is needed: --inventory INV.json, or all of --nodes N --cards C --card-mem SIZE" "$ERR"
expect_rc 2 "--nodes and --cards without --card-mem" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --nodes 1 --cards 8
contains "says what is missing" "all of --nodes N --cards C --card-mem SIZE" "$ERR"
expect_rc 2 "both ways at once" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$INV" --nodes 1 --cards 8 --card-mem 80G
contains "names the conflict" "exclude each other" "$ERR"
expect_rc 2 "--inventory with --straggler" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$INV" --straggler 0.1
contains "names the conflict" "exclude each other" "$ERR"
expect_rc 2 "--inter-latency-us -1" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --nodes 1 --cards 8 --card-mem 80G --inter-latency-us -1
contains "names --inter-latency-us" "--inter-latency-us: expected microseconds" "$ERR"
expect_rc 2 "--inventory with --intra-gbps" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$INV" --intra-gbps 10
expect_rc 2 "--cards 0" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --nodes 1 --cards 0 --card-mem 80G
contains "names --cards" "--cards: expected 1..4096" "$ERR"
expect_rc 2 "--nodes x" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --nodes x --cards 8 --card-mem 80G
contains "names --nodes" "--nodes: expected" "$ERR"
expect_rc 2 "--card-mem 0" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --nodes 1 --cards 8 --card-mem 0
contains "names --card-mem" "--card-mem: expected bytes per card" "$ERR"
expect_rc 2 "--inter-gbps -1" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --nodes 1 --cards 8 --card-mem 80G --inter-gbps -1
contains "names --inter-gbps" "--inter-gbps: expected a number" "$ERR"
