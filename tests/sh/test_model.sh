# inspect, plan and gen-model --like: model understanding from config.json.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
CONFIGS="$DAY0_ROOT/assets/configs"
INV="$DAY0_ROOT/assets/inventories/h200-8x8.json"

jget() { # FILE KEY: the first integer value of "KEY": in a JSON file
	grep -o "\"$2\": [0-9]*" "$1" | head -1 | awk '{print $2}'
}
within() { # NAME GOT WANT PERCENT
	if awk -v g="$2" -v w="$3" -v p="$4" 'BEGIN { d = (g - w) / w; if (d < 0) d = -d; exit !(d <= p / 100) }'; then
		ok "$1 ($2 vs $3)"
	else
		fail "$1" "$2 is not within $4% of $3"
	fi
}

# Published parameter counts (sources: assets/configs/SOURCES.md).
# Each figure is what its publisher states, within 0.5%.
published() { # config total active-or-- active-kind source
	local f="$CONFIGS/$1.json"
	expect_rc 0 "inspect $1" "$ENGINE" inspect --json "$f"
	cp "$OUT" "$T/$1.json"
	within "$1 total parameters vs $5" "$(jget "$T/$1.json" total)" "$2" 0.5
	if [ "$3" != - ]; then
		within "$1 active parameters ($4) vs $5" "$(jget "$T/$1.json" "$4")" "$3" 0.5
	fi
}
published llama-3.1-8b 8.0e9 - - "Llama 3.1 model card: 8B"
published llama-3.1-405b 405e9 - - "Llama 3.1 model card: 405B"
published mixtral-8x7b 46.7e9 12.9e9 active "Mistral AI, Mixtral 8x7B release: 46.7B total, 12.9B per token"
published deepseek-v3 671e9 36.6e9 active_excl_embedding "DeepSeek-V3 README: 671B total; README_WEIGHTS: 36.6B activated incl. the output head"
published qwen3-30b-a3b 30.5e9 - - "Qwen3-30B-A3B model card: 30.5B in total"
published qwen2.5-7b 7.61e9 - - "Qwen2.5-7B model card: 7.61B"
published qwen3-8b 8.2e9 - - "Qwen3-8B model card: 8.2B"
published mistral-7b 7.24e9 - - "Hugging Face model page (safetensors count): 7.24B"
published llama-3.1-70b 70.6e9 - - "Llama 3.1 model card: 70B (70.6B in the safetensors count)"
published qwen3-235b-a22b 235e9 - - "Qwen3-235B-A22B model card: 235B total"
# Mistral's own "7.3B" (website) and Qwen3-30B-A3B's "3.3B activated" are
# rounded past 0.5% (the configs give 7.24B and 3.35B): Mistral is held to
# the safetensors count above, Qwen3's active count to its exact value.
check "mistral-7b: exactly 7,241,732,096 parameters" grep -q '"total": 7241732096,' "$T/mistral-7b.json"
within "qwen3-235b-a22b active (published 22B, truncated)" "$(jget "$T/qwen3-235b-a22b.json" active)" 22.19e9 0.1
within "qwen3-30b-a3b active (published 3.3B, truncated)" "$(jget "$T/qwen3-30b-a3b.json" active)" 3.353e9 0.1
check "deepseek-v3 lists its 14B multi-token-prediction module separately" \
	bash -c "grep -q '\"mtp\": 13463426304' '$T/deepseek-v3.json'"

# Structure as transformers reads it.
"$ENGINE" inspect "$CONFIGS/deepseek-v3.json" >"$T/ds.txt"
contains "deepseek-v3: MLA attention" "attention  MLA, 128 heads, q_lora_rank 1536, kv_lora_rank 512" "$T/ds.txt"
contains "deepseek-v3: 3 dense + 58 MoE layers + MTP" "61 (3 dense + 58 MoE) + 1 multi-token-prediction" "$T/ds.txt"
contains "deepseek-v3: sigmoid grouped routing" "sigmoid scores + correction bias, grouped top-8 (4 of 8 groups), renormalised, scaled x2.5" "$T/ds.txt"
contains "deepseek-v3: yarn rope" "yarn x40 (original 4096 positions" "$T/ds.txt"
"$ENGINE" inspect "$CONFIGS/mixtral-8x7b.json" >"$T/mx.txt"
contains "mixtral: GQA 32/8" "GQA, 32 heads, 8 kv heads, head dim 128" "$T/mx.txt"
contains "mixtral: softmax top-2 renormalised" "softmax top-2 renormalised" "$T/mx.txt"
"$ENGINE" inspect "$CONFIGS/llama-3.1-8b.json" >"$T/l8.txt"
contains "llama-3.1: llama3 rope" "llama3 x8 (bands 1..4, original 8192 positions)" "$T/l8.txt"
contains "llama-3.1: coverage passes" "ops.coverage  pass" "$T/l8.txt"
check "qwen3: qk_norm operator (fallback on rms_norm)" grep -qE 'qk_norm +fallback += rms_norm' <("$ENGINE" inspect "$CONFIGS/qwen3-8b.json")
check "qwen2.5: qkv bias" grep -q 'qkv bias' <("$ENGINE" inspect "$CONFIGS/qwen2.5-7b.json")

# Operators: a missing one fails with the list; --events reports ops.coverage.
sed 's/"hidden_act": "silu"/"hidden_act": "gelu_pytorch_tanh"/; s/"rope_type": "llama3"/"rope_type": "longrope"/' \
	"$CONFIGS/llama-3.1-8b.json" >"$T/odd.json"
expect_rc 1 "inspect exits 1 when operators are missing" "$ENGINE" inspect "$T/odd.json"
contains "missing operators are listed" "2 missing (rope.longrope, glu.gelu_pytorch_tanh)" "$ERR"
expect_rc 1 "inspect --events with a missing operator" "$ENGINE" inspect --events "$T/odd.json"
check "ops.coverage fail event" "$TOOLS/jsonl_check" "$OUT" "type=check,item=ops.coverage,status=fail"
expect_rc 0 "inspect --events" "$ENGINE" inspect --events "$CONFIGS/deepseek-v3.json"
check "ops.coverage pass event" "$TOOLS/jsonl_check" "$OUT" "type=check,item=ops.coverage,status=pass" "type=stage,stage=inspect,state=end,rc=0"

# Malformed configs name the key.
bad() { # name expected-substring json
	printf '%s' "$3" >"$T/bad.json"
	expect_rc 2 "inspect refuses: $1" "$ENGINE" inspect "$T/bad.json"
	contains "… and says: $2" "$2" "$ERR"
}
bad "unknown model_type" "model_type 'gpt9' is not supported" '{"model_type":"gpt9"}'
bad "missing hidden_size" "missing required key 'hidden_size'" '{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"intermediate_size":8}'
bad "negative layers" "must be positive" '{"model_type":"llama","hidden_size":64,"num_hidden_layers":-2,"num_attention_heads":4,"vocab_size":10,"intermediate_size":8}'
bad "heads not dividing hidden (no head_dim key)" "hidden_size 64 is not a multiple of num_attention_heads 5" '{"model_type":"qwen2","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":5,"num_key_value_heads":5,"vocab_size":10,"intermediate_size":8}'
bad "deepseek groups" "must split into n_group" '{"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"intermediate_size":8,"num_key_value_heads":4,"n_routed_experts":10,"n_group":4}'
bad "string where a number belongs" "'rms_norm_eps' must be a number" '{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":10,"intermediate_size":8,"rms_norm_eps":"small"}'
bad "not JSON" "invalid JSON" '{"model_type":'

# gen-model --like: same structure and operator set, tiny, and it verifies.
for f in "$CONFIGS"/*.json; do
	n=$(basename "$f" .json)
	expect_rc 0 "gen-model --like $n" "$ENGINE" gen-model --like "$f" "$T/like/$n"
	expect_rc 0 "verify the tiny $n" "$ENGINE" verify "$T/like/$n"
	"$ENGINE" inspect --json "$f" | grep -A1 '"name"' | grep -o '"name": "[^"]*"' >"$T/ops.real"
	"$ENGINE" inspect --json "$T/like/$n" | grep -A1 '"name"' | grep -o '"name": "[^"]*"' >"$T/ops.tiny"
	check "$n: the tiny model needs exactly the real model's operators" cmp -s "$T/ops.real" "$T/ops.tiny"
	# kimi_k2 is DeepSeek-V3's architecture and is written as its family
	# (docs/inspect.md); every other family keeps its own name.
	want=$(grep -o '"model_type": "[^"]*"' "$f" | sed 's/"kimi_k2"/"deepseek_v3"/')
	check "$n: same model_type ($want)" grep -q "$want" "$T/like/$n/config.json"
	check "$n: tiny (under 64 MiB)" test "$(du -sk "$T/like/$n" | cut -f1)" -lt 65536
done
expect_rc 0 "gen-model --like deepseek-v3 --layers 4" "$ENGINE" gen-model --like "$CONFIGS/deepseek-v3.json" --layers 4 "$T/ds4"
contains "--layers sets the layer count" '"num_hidden_layers": 4' "$T/ds4/config.json"
check "the tiny DeepSeek keeps a dense first layer and an MTP layer" \
	bash -c "grep -q '\"first_k_dense_replace\": 1' '$T/ds4/config.json' && grep -q 'model.layers.4.eh_proj' '$T/ds4/model.safetensors' "
expect_rc 2 "--like with --hidden is refused" "$ENGINE" gen-model --like "$CONFIGS/llama-3.1-8b.json" --hidden 64 "$T/x"

# Every family round-trips through convert, and plan predicts convert's bytes.
for arch in llama mistral qwen2 qwen3 mixtral qwen2_moe qwen3_moe deepseek_v3; do
	extra=""
	case $arch in deepseek_v3) extra="--layers 4 --experts 8 --n-group 4 --topk-group 2" ;;
	mixtral|qwen2_moe|qwen3_moe) extra="--experts 4" ;; esac
	"$ENGINE" gen-model --arch "$arch" --layers 4 --heads 8 --kv-heads 2 --hidden 128 \
		--vocab 256 --shards 2 $extra "$T/a.$arch" >/dev/null 2>"$ERR" || { fail "gen-model --arch $arch" "$(cat "$ERR")"; continue; }
	expect_rc 0 "$arch: verify" "$ENGINE" verify "$T/a.$arch"
	for lay in "2,2,1" "4,1,1" "2,1,2" "1,3,1"; do
		IFS=, read -r tp pp ep <<<"$lay"
		[ "$ep" -gt 1 ] && case $arch in llama|mistral|qwen2|qwen3) continue ;; esac
		"$ENGINE" convert "$T/a.$arch" "$T/c" --dtype bf16 --tp "$tp" --pp "$pp" --ep "$ep" --force >/dev/null 2>"$ERR" ||
			{ fail "$arch tp$tp pp$pp ep$ep: convert" "$(cat "$ERR")"; continue; }
		"$ENGINE" plan "$T/a.$arch" --inventory "$INV" --weights-dtype bf16 --layout "$lay" --json >"$T/plan.json"
		want=$(tr -d ' \n' <"$T/plan.json" | grep -o '"rank_weight_bytes":\[[0-9,]*\]' | grep -o '[0-9][0-9,]*' | tr ',' ' ')
		got=$(for f in "$T"/c/rank-*.safetensors; do "$TOOLS/st_dump" "$f" --data-bytes; done | tr '\n' ' ')
		check "$arch tp$tp pp$pp ep$ep: plan's per-rank weight bytes equal convert's" test "$(echo $want)" = "$(echo $got)"
	done
	"$ENGINE" convert "$T/a.$arch" "$T/c32" --dtype f32 --tp 2 --pp 2 --force >/dev/null &&
		"$ENGINE" merge "$T/c32" "$T/m32" --force >/dev/null
	check "$arch: f32 tp2 pp2 round-trips bit-exactly" bash -c "cd '$T/m32' && sha256sum -c --quiet '$T/a.$arch/SHA256SUMS'"
done
"$TOOLS/st_dump" "$T/c/rank-00000-of-00003.safetensors" >"$T/ds.rank0" 2>/dev/null
"$ENGINE" convert "$T/a.deepseek_v3" "$T/dsc" --dtype bf16 --tp 2 --pp 2 >/dev/null
"$TOOLS/st_dump" "$T/dsc/rank-00002-of-00004.safetensors" >"$T/ds.last"
check "deepseek_v3: the MTP layer sits on the last stage" grep -q '^model.layers.4.eh_proj.weight' "$T/ds.last"
check "deepseek_v3: e_score_correction_bias stays F32 in a bf16 conversion" grep -q 'e_score_correction_bias F32' "$T/ds.last"
check "deepseek_v3: kv_b_proj is split by heads" grep -q 'model.layers.2.self_attn.kv_b_proj.weight BF16 \[128,16\]' "$T/ds.last"

# plan on real configs: ranks layouts, rejects what cannot fit, with reasons.
expect_rc 0 "plan DeepSeek-V3 on 8x8 H200 (32k context, 64 sequences)" "$ENGINE" plan "$CONFIGS/deepseek-v3.json" \
	--inventory "$INV" --ctx 32768 --concurrency 64
contains "plan prints the ranking" "rank  layout" "$OUT"
contains "plan lists rejected layouts with the memory they need" "GiB per card, 126.9 GiB usable" "$OUT"
contains "memory.plan passes" "memory.plan  pass" "$OUT"
expect_rc 0 "plan Llama-3.1-405B --json" "$ENGINE" plan "$CONFIGS/llama-3.1-405b.json" --inventory "$INV" --ctx 32768 --concurrency 64 --json
check "405B: the best layout keeps TP inside a node and fits" bash -c "tr -d ' \n' <'$OUT' | grep -q '\"feasible\":\[{\"tp\":8,\"pp\":2,\"ep\":1,\"dp\":1,\"cards\":16,\"fits\":true,\"tp_in_node\":true'"
printf '{"nodes":[{"name":"tiny","cards":1,"card_mem":"1GiB","transport":"local"}]}' >"$T/tiny.json"
expect_rc 1 "plan exits 1 when nothing fits" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$T/tiny.json"
contains "and memory.plan fails" "memory.plan  FAIL: no layout of 1 fits: needs" "$OUT"
expect_rc 1 "plan --events when nothing fits" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$T/tiny.json" --events
check "memory.plan fail event" "$TOOLS/jsonl_check" "$OUT" "type=check,item=memory.plan,status=fail"
expect_rc 0 "plan --layout reports one layout" "$ENGINE" plan "$CONFIGS/deepseek-v3.json" --inventory "$INV" --layout 8,8,1 --weights-dtype fp8
contains "--layout prints per-rank weights" "per-rank weights:" "$OUT"
expect_rc 1 "plan --layout of an invalid layout" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$INV" --layout 3,1,1
contains "says why" "num_attention_heads 32 is not divisible by tp 3" "$OUT"
expect_rc 2 "plan without --inventory" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json"
invbad() { # name expected json
	printf '%s' "$3" >"$T/inv.json"
	expect_rc 2 "inventory refused: $1" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$T/inv.json"
	contains "… and says: $2" "$2" "$ERR"
}
invbad "no nodes" "'nodes' must be a non-empty list" '{"nodes":[]}'
invbad "bad card_mem" "'card_mem' must be a byte count" '{"nodes":[{"name":"a","card_mem":"lots"}]}'
invbad "unbalanced node set" "unbalanced '['" '{"nodes":[{"name":"n[01-04","card_mem":"8GiB"}]}'
invbad "hosts do not match names" "'name' gives 4 nodes but 'host' 3 hosts" '{"nodes":[{"name":"n[1-4]","host":"h[1-3]","card_mem":"8GiB"}]}'
invbad "duplicate node" "node 'n2' listed twice" '{"nodes":[{"name":"n[1-2]","card_mem":"8GiB"},{"name":"n2","card_mem":"8GiB"}]}'
# Names cut to their 63 bytes made two nodes one (found by the fuzzer).
long=$(printf '%070d' 0)
invbad "node names past 63 bytes" "is longer than 63 bytes" "{\"nodes\":[{\"name\":\"r[1-2]$long\",\"card_mem\":\"8GiB\"}]}"
invbad "bad transport" "'transport' must be ssh or local" '{"nodes":[{"name":"a","card_mem":"8GiB","transport":"telnet"}]}'
printf '{"defaults":{"cards":4,"card_mem":"16GiB"},"nodes":[{"name":"n[01-06]","exclude":"n[03,05]"}]}' >"$T/inv6.json"
expect_rc 0 "plan with node-set exclusions" "$ENGINE" plan "$CONFIGS/llama-3.1-8b.json" --inventory "$T/inv6.json"
contains "4 nodes after excluding 2" "4 nodes x 4 cards x 16.0 GiB = 16 cards" "$OUT"
