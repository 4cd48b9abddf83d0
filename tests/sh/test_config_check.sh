#!/usr/bin/env bash
# config.json's numbers are held to one table per family (engine/
# config_check.c, after the loader's own relational checks): zero, negative
# and absurd dimensions are refused naming the key, the same way by
# inspect, plan, gen-model --like and run, before any of them computes
# with them.
. "$(dirname "$0")/../lib.sh"
set_key() { # dir key json-value: config.json[key] = value
	python3 - "$1/config.json" "$2" "$3" <<'PY'
import json, sys
p, k, v = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
c = json.load(open(p)); c[k] = v; json.dump(c, open(p, "w"))
PY
}
gen() { # arch dir extra...
	local arch=$1 dir=$2; shift 2
	rm -rf "$dir"
	"$ENGINE" gen-model --arch "$arch" --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
		--vocab 128 "$@" "$dir" >/dev/null
}
# refused NAME arch key value: inspect exits 2 naming the key
refused() {
	local arch=$1 key=$2 val=$3 extra=""
	case $arch in
	deepseek_v3) extra="--experts 8 --n-group 4 --topk-group 2" ;;
	mixtral | qwen2_moe | qwen3_moe) extra="--experts 4" ;;
	esac
	# one generated model per family, copied for each mutation
	[ -d "$T/base.$arch" ] || gen "$arch" "$T/base.$arch" $extra
	rm -rf "$T/m"
	cp -r "$T/base.$arch" "$T/m"
	set_key "$T/m" "$key" "$val"
	run "$ENGINE" inspect "$T/m"
	if [ "$RC" = 2 ] && grep -q "config.json: .*$key" "$ERR"; then
		ok "$arch: $key $val refused by name"
	else
		fail "$arch: $key $val refused" "exit $RC: $(head -c 300 "$ERR")$(head -c 200 "$OUT")"
	fi
}

for arch in llama mistral qwen2 qwen3 mixtral qwen2_moe qwen3_moe deepseek_v3; do
	refused "$arch" max_position_embeddings 0
	refused "$arch" rms_norm_eps -1e-6
done
refused llama max_position_embeddings -5
refused mistral rms_norm_eps 0
refused qwen2 rope_theta 0
refused mixtral intermediate_size 0
refused deepseek_v3 vocab_size -8
for arch in qwen3 qwen3_moe; do refused "$arch" head_dim -2; done
refused mixtral num_experts_per_tok 0
refused qwen2_moe moe_intermediate_size -8
refused qwen3_moe num_experts -1
refused qwen2_moe shared_expert_intermediate_size -1
for v in -8 0; do refused deepseek_v3 moe_intermediate_size $v; done
refused deepseek_v3 v_head_dim 0
refused deepseek_v3 n_shared_experts -1
refused deepseek_v3 num_nextn_predict_layers 99

# The issue's reproductions: a negative expert size gave a parameter count
# near 2^64 and a passing plan; zero gave "463 of 463 layouts fit".
gen deepseek_v3 "$T/d" --experts 8 --n-group 4 --topk-group 2
set_key "$T/d" moe_intermediate_size -8
expect_rc 2 "deepseek moe_intermediate_size -8: inspect refuses" "$ENGINE" inspect "$T/d"
check "... and prints no parameter count" bash -c "! grep -q 'routed_experts' '$OUT'"
set_key "$T/d" moe_intermediate_size 0
expect_rc 2 "deepseek moe_intermediate_size 0: plan refuses" "$ENGINE" plan "$T/d" --nodes 1 --cards 2 --card-mem 1G
contains "... naming the key" "moe_intermediate_size is 0; expected 1.." "$ERR"
expect_rc 2 "... gen-model --like refuses it too" "$ENGINE" gen-model --like "$T/d/config.json" "$T/like"
contains "... with the same message" "moe_intermediate_size is 0; expected 1.." "$ERR"
expect_rc 2 "... and run (the engine's forward pass) too" "$ENGINE" run "$T/d" --tp 1 --tokens 1,2
contains "... with the same message" "moe_intermediate_size is 0; expected 1.." "$ERR"

# Products: every dimension within its bound, the model is not.
gen llama "$T/big"
set_key "$T/big" hidden_size 16777216
set_key "$T/big" num_attention_heads 256
set_key "$T/big" num_key_value_heads 256
set_key "$T/big" intermediate_size 16777216
set_key "$T/big" num_hidden_layers 65536
expect_rc 2 "dimensions whose products overflow: refused" "$ENGINE" inspect "$T/big"
contains "... saying so" "parameters" "$ERR"
gen llama "$T/ok"
expect_rc 0 "a sane config still passes" "$ENGINE" inspect "$T/ok"
