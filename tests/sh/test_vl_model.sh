# The image channel's model part (issue #30): vision-language configs read
# from the real files, the tower and projector counted, enumerated and
# placed, tiny same-structure checkpoints written and verified, and the
# float64 reference tower and M-RoPE positions held against an independent
# NumPy computation of transformers' equations.
. "$(dirname "$0")/../lib.sh"
VL="$DAY0_ROOT/assets/configs/vl"
VLREF="$BUILD/tests/vl_ref"
PY=/usr/bin/python3 # Debian's, with python3-numpy (make deps)
Q25="$VL/qwen2.5-vl-7b-instruct"
LLAVA="$VL/llava-1.5-7b-hf"
Q3="$VL/qwen3-vl-30b-a3b-instruct"

# --- inspect on the real configs: counts against the shapes, computed here
# from config.json by the formulas of transformers' modules
expect_rc 0 "inspect Qwen2.5-VL-7B (exit 0: every image operator covered)" \
	"$ENGINE" inspect --json "$Q25"
cp "$OUT" "$T/q25.json"
$PY - "$Q25/config.json" "$T/q25.json" >"$T/q25.cmp" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); got = json.load(open(sys.argv[2]))
v = c["vision_config"]; D, F, m = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"]
block = 2 * D + (3 * D * D + 3 * D) + (D * D + D) + 2 * (F * D + F) + (D * F + D)
tower = D * 3 * v["temporal_patch_size"] * v["patch_size"] ** 2 + v["depth"] * block
M = D * m * m
proj = D + (M * M + M) + (v["out_hidden_size"] * M + v["out_hidden_size"])
p = got["vision"]["parameters"]
print("tower", p["tower"] == tower, p["tower"], tower)
print("projector", p["projector"] == proj, p["projector"], proj)
print("bytes", got["vision"]["bytes"]["tower"] == 2 * tower)
print("published", abs(got["parameters"]["total"] - 8.29e9) / 8.29e9 < 0.005, got["parameters"]["total"])
PY
contains "Qwen2.5-VL-7B tower parameters = the shapes' sum (631,975,680)" "tower True 631975680" "$T/q25.cmp"
contains "Qwen2.5-VL-7B merger parameters (44,574,464)" "projector True 44574464" "$T/q25.cmp"
contains "Qwen2.5-VL-7B tower bytes in bf16" "bytes True" "$T/q25.cmp"
contains "Qwen2.5-VL-7B total within 0.5% of the card's 8.29B" "published True" "$T/q25.cmp"
contains "Qwen2.5-VL-7B: the release's model_type" '"model_type": "qwen2_5_vl"' "$T/q25.json"
contains "... its LM read as qwen2" '"lm_family": "qwen2"' "$T/q25.json"
contains "... 256 tokens for a 448 x 448 image" '"tokens": 256' "$T/q25.json"
contains "... 16384 tokens at max_pixels (the preprocessor beside it)" '"tokens": 16384' "$T/q25.json"
for op in patch_embed.conv3d vision.rope_2d attention.window patch_merger mrope image_splice; do
	contains "Qwen2.5-VL operator enumerated: $op" "\"name\": \"$op\"" "$T/q25.json"
done
check "ops.coverage: nothing missing" grep -q '"missing": \[\]' "$T/q25.json"

expect_rc 0 "inspect llava-1.5-7b (every operator covered)" "$ENGINE" inspect --json "$LLAVA"
cp "$OUT" "$T/llava.json"
$PY - "$LLAVA/config.json" "$T/llava.json" >"$T/llava.cmp" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); got = json.load(open(sys.argv[2]))
v = c["vision_config"]; D, F, P, S = v["hidden_size"], v["intermediate_size"], v["patch_size"], v["image_size"]
layer = 4 * (D * D + D) + 2 * 2 * D + (F * D + F) + (D * F + D)
tower = D + D * 3 * P * P + ((S // P) ** 2 + 1) * D + 2 * 2 * D + v["num_hidden_layers"] * layer
H = 4096  # LlamaConfig's hidden_size: text_config does not name it
proj = (H * D + H) + (H * H + H)
p = got["vision"]["parameters"]
print("tower", p["tower"] == tower, p["tower"], tower)
print("projector", p["projector"] == proj)
print("published", abs(got["parameters"]["total"] - 7.06e9) / 7.06e9 < 0.005, got["parameters"]["total"])
PY
contains "llava-1.5 CLIP tower parameters = the shapes' sum (303,507,456)" "tower True 303507456" "$T/llava.cmp"
contains "llava-1.5 projector parameters" "projector True" "$T/llava.cmp"
contains "llava-1.5 total within 0.5% of the card's 7.06B" "published True" "$T/llava.cmp"
contains "llava: 576 image tokens (CLS dropped by 'default')" '"tokens": 576' "$T/llava.json"
for op in patch_embed.conv2d vision.class_token layer_norm quick_gelu projector.mlp image_splice; do
	contains "LLaVA operator enumerated: $op" "\"name\": \"$op\"" "$T/llava.json"
done

# Qwen2.5-VL-72B-Instruct (assets/configs/SOURCES.md: Qwen's own AWQ
# release's config.json, unquantized).  That file is a transformers 4.49
# save: its vision_config leaves out the keys at Qwen2_5_VLVisionConfig's
# defaults, which transformers reads back as those defaults (depth 32,
# num_heads 16, window 112, fullatt 7/15/23/31, patch 14, merge 2, 2
# frames); day0 reads them the same way (model_vision.c), so the release's
# file is inspected as it is, and a copy spelling them out says the same.
Q72="$VL/qwen2.5-vl-72b-instruct"
mkdir -p "$T/q72" "$T/q72x"
cp "$Q72/preprocessor_config.json" "$T/q72/"
cp "$Q72/config.json" "$T/q72/"
cp "$Q72/preprocessor_config.json" "$T/q72x/"
$PY -c "import json,sys; c=json.load(open(sys.argv[1])); assert 'depth' not in c['vision_config']; c['vision_config'].update(depth=32, num_heads=16); json.dump(c, open(sys.argv[2], 'w'), indent=2)" \
	"$Q72/config.json" "$T/q72x/config.json"
expect_rc 0 "inspect Qwen2.5-VL-72B (every operator covered)" "$ENGINE" inspect --json "$T/q72"
cp "$OUT" "$T/q72.json"
"$ENGINE" inspect --json "$T/q72x" >"$T/q72x.json" 2>/dev/null
check "... depth and num_heads left out read as transformers' defaults (32, 16): the same counts as spelled out" \
	test "$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['vision'])" "$T/q72.json")" = "$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['vision'])" "$T/q72x.json")"
$PY - "$T/q72x/config.json" "$T/q72.json" >"$T/q72.cmp" <<'PY2'
import json, sys
c = json.load(open(sys.argv[1])); got = json.load(open(sys.argv[2]))
v = c["vision_config"]; D, F, m = v["hidden_size"], v["intermediate_size"], 2
block = 2 * D + (3 * D * D + 3 * D) + (D * D + D) + 2 * (F * D + F) + (D * F + D)
tower = D * 3 * 2 * 14 ** 2 + v["depth"] * block
M = D * m * m
proj = D + (M * M + M) + (v["out_hidden_size"] * M + v["out_hidden_size"])
p = got["vision"]["parameters"]
lm = got["parameters"]["total"] - p["tower"] - p["projector"]
print("tower", p["tower"] == tower, p["tower"], tower)
print("projector", p["projector"] == proj, p["projector"], proj)
# the LM is Qwen2.5-72B's shapes: 72.7B on the Hub (Qwen/Qwen2.5-72B-Instruct)
print("lm", abs(lm - 72.7e9) / 72.7e9 < 0.005, lm)
print("width", got["vision"]["out_hidden_size"] == c["hidden_size"] == 8192)
PY2
contains "Qwen2.5-VL-72B tower parameters = the shapes' sum (636,401,664: ffn 3456)" "tower True 636401664" "$T/q72.cmp"
contains "Qwen2.5-VL-72B merger parameters (68,172,032: into hidden 8192)" "projector True 68172032" "$T/q72.cmp"
contains "Qwen2.5-VL-72B LM within 0.5% of Qwen2.5-72B's 72.7B" "lm True" "$T/q72.cmp"
contains "Qwen2.5-VL-72B merger output = the LM's hidden 8192" "width True" "$T/q72.cmp"
expect_rc 0 "plan Qwen2.5-VL-72B on 8 x 80G" "$ENGINE" plan "$T/q72" --nodes 1 --cards 8 --card-mem 80G --json
check "... one card cannot hold it (bf16 137 GiB), tp 2 can; the tower and merger (1.3 GiB) replicated on stage 0" \
	$PY - "$OUT" <<'PY2'
import json, sys
p = json.load(open(sys.argv[1])); v = p["vision"]
one = [r for r in p["rejected"] if r["tp"] * r["pp"] == 1]
ok = (v["placement"] == "replicated" and v["stage"] == 0 and v["parameters"] == 636401664 + 68172032
      and abs(v["bytes_per_rank"] - 2 * v["parameters"]) < 1e-3 * v["bytes_per_rank"]  # bf16, norms f32
      and one and p["feasible"]
      and min(r["tp"] * r["pp"] for r in p["feasible"]) == 2)
sys.exit(not ok)
PY2

# A tower without a table: read, named as missing, never dropped.
expect_rc 1 "inspect Qwen3-VL-30B-A3B: exit 1" "$ENGINE" inspect "$Q3"
contains "... names the tower as a missing operator" "vision_tower.qwen3_vl_moe" "$ERR"
contains "... and says what is lacking" "NOT IMPLEMENTED" "$OUT"
contains "... its MoE LM still read (128 experts)" "128 routed experts" "$OUT"
expect_rc 2 "gen-model --like Qwen3-VL refuses" "$ENGINE" gen-model --like "$Q3/config.json" "$T/q3"
contains "... naming the tower it cannot write" "cannot write its vision tower" "$ERR"

# --- gen-model --like: tiny, same structure, preprocessor and placeholders
for n in q25:"$Q25" llava:"$LLAVA"; do
	k=${n%%:*}; src=${n#*:}
	expect_rc 0 "gen-model --like $k" "$ENGINE" gen-model --like "$src/config.json" "$T/$k"
	expect_rc 0 "verify the tiny $k (the tower's tensors, a 5-D/4-D conv kernel)" "$ENGINE" verify "$T/$k"
	"$ENGINE" inspect --json "$src" 2>/dev/null | grep -o '"name": "[^"]*"' >"$T/ops.real"
	"$ENGINE" inspect --json "$T/$k" 2>/dev/null | grep -o '"name": "[^"]*"' >"$T/ops.tiny"
	check "$k: the tiny model needs exactly the real model's operators" cmp -s "$T/ops.real" "$T/ops.tiny"
	check "$k: preprocessor_config.json is the release's" \
		$PY -c "import json,sys; sys.exit(json.load(open('$src/preprocessor_config.json')) != json.load(open('$T/$k/preprocessor_config.json')))"
	check "$k: SHA256SUMS covers the preprocessor" grep -q "preprocessor_config.json" "$T/$k/SHA256SUMS"
done
check "q25: config ids are the tokenizer's <|image_pad|>, <|vision_start|>, <|vision_end|>" $PY - "$T/q25" <<'PY'
import json, sys
d = sys.argv[1]; c = json.load(open(d + "/config.json"))
ids = {a["content"]: a["id"] for a in json.load(open(d + "/tokenizer.json"))["added_tokens"]}
sys.exit(not (ids["<|image_pad|>"] == c["image_token_id"] and ids["<|vision_start|>"] == c["vision_start_token_id"]
              and ids["<|vision_end|>"] == c["vision_end_token_id"] and c["vision_config"]["fullatt_block_indexes"]))
PY
check "llava: image_token_index is the tokenizer's <image>" $PY - "$T/llava" <<'PY'
import json, sys
d = sys.argv[1]; c = json.load(open(d + "/config.json"))
ids = {a["content"]: a["id"] for a in json.load(open(d + "/tokenizer.json"))["added_tokens"]}
sys.exit(ids["<image>"] != c["image_token_index"])
PY
expect_rc 0 "tokenize '<|vision_start|><|image_pad|><|vision_end|>' gives the three ids" \
	"$ENGINE" tokenize "$T/q25" --text "<|vision_start|><|image_pad|><|vision_end|>"
contains "... one token each, the config's ids" "$($PY -c "import json; c=json.load(open('$T/q25/config.json')); print('%d,%d,%d' % (c['vision_start_token_id'], c['image_token_id'], c['vision_end_token_id']))")" "$OUT"

# A defect in the tower is found like one in the LM.
cp -r "$T/q25" "$T/q25bad"
"$BUILD/tests/st_edit" "$T/q25bad/model.safetensors" --reshape visual.patch_embed.proj.weight 32,1176 >/dev/null
expect_rc 1 "verify: the patch embedding stored 2-D instead of 5-D fails" "$ENGINE" verify "$T/q25bad"
contains "... naming it and the conv shape expected" "config.json implies [32, 3, 2, 14, 14]" "$ERR"
"$BUILD/tests/st_edit" "$T/q25bad/model.safetensors" --drop visual.merger.mlp.2.bias >/dev/null
expect_rc 1 "verify: a merger tensor missing fails" "$ENGINE" verify "$T/q25bad"
contains "... naming it" "visual.merger.mlp.2.bias" "$ERR"
expect_rc 0 "gen-model --like Qwen2.5-VL --for-layout 4,1,1 (the LM widened, the merger follows)" \
	"$ENGINE" gen-model --like "$Q25/config.json" --for-layout 4,1,1 "$T/q25tp4"
expect_rc 0 "... verifies" "$ENGINE" verify "$T/q25tp4"

# Text only: the LM runs as its text family (LLaVA's under language_model.).
expect_rc 0 "run a text prompt on the tiny Qwen2.5-VL's LM" "$ENGINE" run "$T/q25" --tokens 1,2,3
expect_rc 0 "run a text prompt on the tiny LLaVA's LM (language_model.*; 3 is <image>)" "$ENGINE" run "$T/llava" --tokens 1,2,4

# A Qwen2-VL (LayerNorm, quick_gelu fc1/fc2, full attention) of test size.
mkdir -p "$T/q2src"
$PY - "$Q25/config.json" "$T/q2src/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model_type"] = "qwen2_vl"; c["architectures"] = ["Qwen2VLForConditionalGeneration"]
c["vision_config"] = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                      "hidden_size": c["hidden_size"], "patch_size": 14, "spatial_merge_size": 2,
                      "spatial_patch_size": 14, "temporal_patch_size": 2}
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
expect_rc 0 "gen-model --like a qwen2_vl config" "$ENGINE" gen-model --like "$T/q2src/config.json" "$T/q2"
expect_rc 0 "verify the tiny qwen2_vl" "$ENGINE" verify "$T/q2"

# --- the float64 reference against NumPy (transformers' equations)
expect_rc 0 "Qwen2.5-VL tower+merger, two images (window padding, 2 frames of one): C = NumPy" \
	$PY "$DAY0_ROOT/tests/tools/vl_ref_numpy.py" encode "$T/q25" "$VLREF" 7 1 16 20 2 4 6
contains "... (320 + 2 x 24) / 4 = 92 merged rows of the LM's hidden" "rows 92 cols" "$OUT"
expect_rc 0 "gen-model --like Qwen2.5-VL --dtype bf16" "$ENGINE" gen-model --like "$Q25/config.json" --dtype bf16 "$T/q25bf"
expect_rc 0 "... the reference decodes its bf16 tower as NumPy does" \
	$PY "$DAY0_ROOT/tests/tools/vl_ref_numpy.py" encode "$T/q25bf" "$VLREF" 9 1 8 8
expect_rc 0 "Qwen2-VL tower+merger: C = NumPy" \
	$PY "$DAY0_ROOT/tests/tools/vl_ref_numpy.py" encode "$T/q2" "$VLREF" 3 1 8 12
expect_rc 0 "LLaVA CLIP tower (hidden state -2, CLS dropped) + projector, two images: C = NumPy" \
	$PY "$DAY0_ROOT/tests/tools/vl_ref_numpy.py" encode "$T/llava" "$VLREF" 5 1 1 1 1 1 1
contains "... 576 rows an image" "rows 1152 cols" "$OUT"
read -r VS IP VE <<<"$($PY -c "import json; c=json.load(open('$T/q25/config.json')); print(c['vision_start_token_id'], c['image_token_id'], c['vision_end_token_id'])")"
p4=$(printf "$IP,%.0s" 1 2 3 4); p6=$(printf "$IP,%.0s" 1 2 3 4 5 6)
expect_rc 0 "M-RoPE positions, text-image-text-image-text: C = NumPy" \
	$PY "$DAY0_ROOT/tests/tools/vl_ref_numpy.py" rope "$T/q25" "$VLREF" "1,2,$VS,${p4}$VE,9,$VS,${p6}$VE,11,12" 1 4 4 1 4 6
expect_rc 0 "M-RoPE on text only is 0..n-1 on every axis (delta 0)" "$VLREF" rope "$T/q25" 5,6,7,8
contains "... delta 0" "$(printf '0 1 2 3\n0 1 2 3\n0 1 2 3\n0')" "$OUT"
expect_rc 1 "one placeholder too few is a named error" "$VLREF" rope "$T/q25" "1,$VS,$IP,$IP,$IP,$VE" 1 4 4
contains "... naming the image and the count" "image 0: 4 placeholder tokens expected" "$ERR"
expect_rc 2 "a patch grid that is not whole merge windows is refused" "$VLREF" encode "$T/q25" /dev/null 15 1176 "$T/o" 1 3 5

# --- bad configs: a clear error naming the file and the key
bad() { # NAME NEEDLE PYTHON-EDIT
	mkdir -p "$T/bad"
	$PY -c "import json,sys; c=json.load(open('$Q25/config.json')); $3; json.dump(c, open('$T/bad/config.json','w'))"
	expect_rc 2 "inspect refuses: $1" "$ENGINE" inspect "$T/bad"
	contains "... and says: $2" "$2" "$ERR"
}
bad "no vision_config" "needs a 'vision_config' object" "del c['vision_config']"
bad "mrope_section not summing to head_dim/2" "must sum to head_dim/2 = 64" "c['rope_scaling']['mrope_section']=[16,24,16]"
bad "fullatt block past the depth" "fullatt_block_indexes[3] = 32" "c['vision_config']['fullatt_block_indexes'][3]=32"
bad "merger output not the LM hidden" "is not the language model's hidden_size 3584" "c['vision_config']['out_hidden_size']=4096"
bad "a string depth" "vision_config.depth must be an integer" "c['vision_config']['depth']='32'"
bad "window not whole merged patches" "window_size 100 must be a multiple" "c['vision_config']['window_size']=100"

# --- the planner places the tower on the first stage's ranks
expect_rc 0 "plan Qwen2.5-VL-7B at pp 2" "$ENGINE" plan "$Q25" --nodes 1 --cards 2 --card-mem 80G --layout 1,2,1 --json
cp "$OUT" "$T/plan.json"
check "the tower's bytes are on stage 0's rank only" $PY - "$T/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
t = p["vision"]
sys.exit(not (t["placement"] == "replicated" and t["stage"] == 0 and t["bytes_per_rank"] > 0))
PY
