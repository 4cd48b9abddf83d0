# A vision-language MoE release end to end (issue #30): Kimi-VL-A3B
# (kimi_vl: the MoonViT tower, its 2x2 merge + pre_norm projector, the
# KimiVLImageProcessor, <|media_pad|> placeholders) over a deepseek_v3 LM
# (MLA with q_lora_rank null, sigmoid-routed MoE).  inspect on the
# release's config, gen-model --like (a tiny checkpoint with the release's
# tensor names, preprocessor and a tokenizer with the media tokens), the
# processor against PIL + numpy doing what the release's processor does,
# then run --image and validate --image (operator: patch embedding,
# bicubic position interpolation, 2D rotary; layer: every block and the
# projector; end to end: logits and greedy tokens) for image-only, mixed
# and text-only prompts at TP 1, TP 2, PP 2 and EP 2, image-check, and the
# faults that must fail by name.
. "$(dirname "$0")/../lib.sh"
REL="$DAY0_ROOT/assets/configs/vl/kimi-vl-a3b-instruct"
PY=/usr/bin/python3 # Debian's, with python3-pil (make deps)
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none"

# --- the release's config: counted, planned, every operator covered
run "$ENGINE" inspect "$REL" --json
check "inspect kimi-vl-a3b-instruct: exit 0" test "$RC" = 0
check "... the tower counted from the table (416,866,032 params: patch embed, 64x64 positions, 27 blocks, final LN), projector 30,679,808" \
	$PY -c "
import json,sys; d=json.load(open(sys.argv[1])); v=d['vision']
sys.exit(not (v['parameters']=={'tower':416866032,'projector':30679808} and v['lm_family']=='deepseek_v3'
  and v['image_token_id']==163605 and v['patch_size']==14 and v['spatial_merge_size']==2))" "$OUT"
run "$ENGINE" inspect "$REL"
contains "... coverage: the bicubic position interpolation is native" "pos_emb.bicubic                native" "$OUT"
contains "... the interleaved 2D rotary a fallback of rope.default" "vision.rope_2d_pairs           fallback  = rope.default" "$OUT"
contains "... nothing missing" "0 missing" "$OUT"
contains "... a 448 x 448 image is 1024 patches, 256 LM tokens" "448 x 448 image      1024 patches -> 256 LM tokens" "$OUT"
contains "... in_token_limit's largest square, 896 x 896" "896 x 896 (max)      4096 patches -> 1024 LM tokens" "$OUT"
run "$ENGINE" plan "$REL" --nodes 1 --cards 2 --card-mem 40G
check "plan kimi-vl-a3b-instruct on 2 x 40G: a layout fits" test "$RC" = 0

# --- the tiny checkpoint
"$ENGINE" gen-model --like "$REL/config.json" "$T/k" >/dev/null 2>&1
check "gen-model --like: a tiny kimi_vl" test -s "$T/k/model.safetensors"
check "... its tensors named as the release's index names them" $PY -c "
import json,struct,sys
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n])
want={'vision_tower.patch_embed.proj.weight':[32,3,14,14],'vision_tower.patch_embed.proj.bias':[32],
 'vision_tower.patch_embed.pos_emb.weight':[4,5,32],'vision_tower.encoder.blocks.1.wqkv.weight':[96,32],
 'vision_tower.encoder.blocks.0.mlp.fc0.bias':[64],'vision_tower.encoder.final_layernorm.weight':[32],
 'multi_modal_projector.pre_norm.bias':[32],'multi_modal_projector.linear_1.weight':[128,128],
 'language_model.model.layers.1.mlp.experts.7.down_proj.weight':None,
 'language_model.model.layers.1.mlp.gate.e_score_correction_bias':None,
 'language_model.model.layers.0.self_attn.q_proj.weight':None,'language_model.lm_head.weight':None}
bad=[k for k,s in want.items() if k not in h or (s and h[k]['shape']!=s)]
bad+=[k for k in h if 'q_a_proj' in k]
sys.exit(print(bad) or len(bad)>0)" "$T/k/model.safetensors"
contains "... its tokenizer has <|media_pad|>" '"<|media_pad|>"' "$T/k/tokenizer.json"
contains "... the release's preprocessor beside it" '"KimiVLImageProcessor"' "$T/k/preprocessor_config.json"
expect_rc 0 "verify the tiny kimi_vl" "$ENGINE" verify "$T/k"

$PY - "$T" <<'PY'
from PIL import Image
import random, sys
random.seed(30)
def mk(w, h, path, k=7):
    im = Image.new("RGB", (w, h))
    im.putdata([(random.randrange(256), (x * k) % 256, (y * 5) % 256) for y in range(h) for x in range(w)])
    im.save(path)
d = sys.argv[1]
mk(200, 150, d + "/a.png")      # padded to 224 x 168: 12 x 16 patches, 48 tokens
mk(56, 70, d + "/b.jpg")        # padded to 56 x 84: 6 x 4 patches, 6 tokens
mk(200, 150, d + "/a2.png", 3)  # a's size, other pixels
mk(300, 200, d + "/c.png", 5)   # past in_token_limit 64 (21 x 14 patches): BICUBIC shrink
PY

# --- the processor against PIL + numpy (what image_processing_kimi_vl.py
# does: shrink past in_token_limit by sqrt(limit / patches), BICUBIC; pad
# bottom/right with zeros; to_tensor's float32 / 255; normalize; patches
# in raster order as (channel, py, px))
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); d['in_token_limit']=64; json.dump(d,open(sys.argv[2],'w'))" \
	"$T/k/preprocessor_config.json" "$T/pp64.json"
for pp in "$T/k/preprocessor_config.json" "$T/pp64.json"; do
	rm -rf "$T/prep"
	run "$ENGINE" image-prep "$T/a.png" "$T/b.jpg" "$T/c.png" --preprocessor "$pp" --config "$T/k/config.json" --out "$T/prep"
	if [ "$RC" != 0 ]; then
		fail "image-prep $(basename "$pp")" "exit $RC: $(cat "$ERR")"
		continue
	fi
	run $PY - "$pp" "$T" <<'PY'
import json, math, sys
import numpy as np
from PIL import Image
c = json.load(open(sys.argv[1])); d = sys.argv[2]
P = c["patch_size"]; M = c["merge_kernel_size"][0]; lim = c["in_token_limit"]
mean = np.array(c["image_mean"], np.float32); std = np.array(c["image_std"], np.float32)
worst = 0; tok = []
for n in ["a.png", "b.jpg", "c.png"]:
    im = Image.open(d + "/" + n).convert("RGB"); w, h = im.size
    if (w // P) * (h // P) > lim:
        s = math.sqrt(lim / ((w // P) * (h // P)))
        im = im.resize((int(w * s), int(h * s)), Image.BICUBIC)
    w, h = im.size; f = M * P
    pw, ph = (f - w % f) % f, (f - h % f) % f
    pad = Image.new("RGB", (w + pw, h + ph), (0, 0, 0)); pad.paste(im, (0, 0))
    x = np.asarray(pad).astype(np.float32) / np.float32(255)
    x = ((x - mean) / std).transpose(2, 0, 1)
    C, H, W = x.shape
    x = x.reshape(C, H // P, P, W // P, P).transpose(1, 3, 0, 2, 4).reshape(-1, C * P * P)
    got = np.load(d + "/prep/" + n.split(".")[0] + ".pixel_values.npy")
    r = np.load(d + "/prep/" + n.split(".")[0] + ".resized.npy")
    if got.shape != x.shape or not np.array_equal(r, np.asarray(pad)):
        print("MISMATCH", n, got.shape, x.shape); sys.exit(1)
    worst = max(worst, float(np.abs(got - x).max())); tok.append(x.shape[0] // (M * M))
print("max", worst, "tokens", tok)
sys.exit(worst > 1e-6)
PY
	if [ "$RC" = 0 ]; then
		ok "image-prep ($(basename "$pp")) = PIL + numpy: padded bytes equal, values $(cat "$OUT")"
	else
		fail "image-prep ($(basename "$pp")) against PIL + numpy" "$(cat "$OUT" "$ERR" | head -c 300)"
	fi
done
"$ENGINE" image-prep "$T/c.png" --preprocessor "$T/pp64.json" >"$T/prep.out" 2>&1
contains "... c.png: 300x200 (294 patches) shrunk to 139x93 (BICUBIC) under in_token_limit 64, padded to 140x112" \
	"300x200 -> 140x112 (BICUBIC), the image 139x93 padded, grid 1x8x10, 80 patches x 588, 20 image tokens" "$T/prep.out"

# --- run --image, then validate --image on its dumps; $1 name, $2 layout
# ("" or --tp 2 / --pp 2 / --ep 2), $3 the case validate must name, rest:
# the prompt and image options.
vl_case() {
	local name=$1 lay=$2 kind=$3 pre=""
	shift 3
	[ -n "$lay" ] && pre="$MPI -np 2"
	rm -rf "$T/dump"
	run $pre "$ENGINE" run "$T/k" $lay "$@" --generate 4 --dump-logits "$T/lg.st" \
		--dump-layers "$T/dump" --dump-generated "$T/gen.json"
	if [ "$RC" != 0 ]; then
		fail "$name: run" "exit $RC: $(head -c 300 "$ERR")"
		return
	fi
	case "$lay" in --*) if ! grep -q "${lay#--} .*(2 ranks)" "$OUT"; then
		fail "$name: run" "not split as $lay: $(head -c 300 "$OUT")"
		return
	fi ;; esac
	run "$ENGINE" validate "$T/k" "$@" --logits "$T/lg.st" --layers-dir "$T/dump" \
		--generated "$T/gen.json"
	cp "$OUT" "$T/val.out"
	if [ "$RC" = 0 ] && grep -q "numerics.image: pass: $kind" "$T/val.out" &&
		grep -q "top-1 100.0%; greedy equal" "$T/val.out"; then
		ok "$name: $(grep -o 'tower [0-9]* states, worst [^)]*), merger [^;]*' "$T/val.out"), $(grep -o 'logits max rel [^,]*' "$T/val.out") <= 1e-5, top-1 100%, greedy equal"
	else
		fail "$name" "validate exit $RC: $(grep 'numerics\|FAIL' "$T/val.out" | head -5) $(head -c 300 "$ERR")"
	fi
}

IMG="<|media_start|>image<|media_content|><|media_pad|><|media_end|>"
MIX="<|im_user|>user<|im_middle|>${IMG}What is in it?${IMG}And here?<|im_end|><|im_assistant|>assistant<|im_middle|>"
vl_case "kimi_vl image-only, TP 1" "" image-only --prompt "<|media_pad|>" --image "$T/a.png"
contains "... every tower block compared" "image-00-block-001" "$T/val.out"
contains "... the patch embedding + interpolated positions (operator level)" "image-00-patch_embed" "$T/val.out"
contains "... the projector's output" "image-00-features" "$T/val.out"
contains "... the interleaved 2D rotary against float64" "vision.rope_2d_pairs" "$T/val.out"
contains "... torch's bicubic interpolation against float64 (up and down)" "vision.pos_bicubic.down" "$T/val.out"
contains "... plain 1-D positions in the LM" "1-D positions equal" "$T/val.out"
vl_case "kimi_vl mixed (chat template, 2 images), TP 1" "" mixed --prompt "$MIX" --image "$T/a.png" --image "$T/b.jpg"
vl_case "kimi_vl text-only, TP 1" "" text-only --prompt "<|im_user|>user<|im_middle|>Hello<|im_end|>"
vl_case "kimi_vl mixed, EP 2 (the MoE LM's experts split)" "--ep 2" mixed --prompt "$MIX" --image "$T/a.png" --image "$T/b.jpg"
vl_case "kimi_vl image-only, EP 2" "--ep 2" image-only --prompt "<|media_pad|>" --image "$T/b.jpg"
vl_case "kimi_vl text-only, EP 2" "--ep 2" text-only --prompt "Hello there"
vl_case "kimi_vl mixed, TP 2" "--tp 2" mixed --prompt "$MIX" --image "$T/a.png" --image "$T/b.jpg"
vl_case "kimi_vl mixed, PP 2" "--pp 2" mixed --prompt "$MIX" --image "$T/b.jpg" --image "$T/a.png"

# --- what must fail, by name
expect_rc 1 "one <|media_pad|> too few (47 for a.png's 48): image.features" "$ENGINE" run "$T/k" \
	--prompt "$($PY -c "print('<|media_pad|>' * 47)")" --image "$T/a.png"
contains "... naming the counts" "image.features: image 1 takes 48 placeholder tokens" "$ERR"
rm -rf "$T/dump"
"$ENGINE" run "$T/k" --prompt "<|media_pad|>Hi" --image "$T/a.png" --dump-logits "$T/lg.st" --dump-layers "$T/dump" >/dev/null 2>&1
expect_rc 1 "validate with other pixels of the same size: numerics.image fails" "$ENGINE" validate "$T/k" \
	--prompt "<|media_pad|>Hi" --image "$T/a2.png" --logits "$T/lg.st" --layers-dir "$T/dump"
contains "... named" "numerics.image: FAIL" "$OUT"

# --- the release day's image items on the tiny Kimi-VL
run "$ENGINE" image-check "$T/k" --runs 1
check "image-check kimi_vl (built-in corpus): exit 0" test "$RC" = 0
for it in image.preprocess image.features numerics.image perf.image; do
	contains "... $it pass" "$(printf '%-17s pass' "$it")" "$OUT"
done
cp -r "$T/k" "$T/kclip"
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('image_mean'); d.pop('image_std'); json.dump(d,open(sys.argv[1],'w'))" \
	"$T/kclip/preprocessor_config.json"
expect_rc 1 "image_mean/std left out (the processor's OpenAI CLIP defaults): image.features fails" \
	"$ENGINE" image-check "$T/kclip"
contains "... naming the tower's normalization" "MoonViT's training normalization" "$OUT"
cp -r "$T/k" "$T/k16"
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); d['patch_size']=16; json.dump(d,open(sys.argv[1],'w'))" \
	"$T/k16/preprocessor_config.json"
expect_rc 1 "patch 16 instead of 14: image.features fails" "$ENGINE" image-check "$T/k16" --json
contains "... naming the patch embedding's shape" "vision_tower.patch_embed.proj.weight is [32, 3, 14, 14]" "$OUT"
printf '{"image_processor_type": "KimiVLImageProcessor", "pad_input": false}' >"$T/nopad.json"
expect_rc 2 "pad_input false: refused by name (the crop path is not implemented)" \
	"$ENGINE" image-prep "$T/a.png" --preprocessor "$T/nopad.json"
contains "... says so" "pad_input false" "$ERR"


# --- serve: a chat with an image (Kimi-VL's template, 1-D positions) answers
# the greedy tokens of run --image on the same templated prompt, at EP 2
rm -f "$T/port"
timeout 120 $MPI -np 2 "$ENGINE" serve "$T/k" --tp 1 --ep 2 --port 0 --port-file "$T/port" \
	--max-ctx 256 --block-tokens 16 >"$T/serve.out" 2>"$T/serve.err" &
SPID=$!
for _ in $(seq 600); do [ -s "$T/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$T/port" 2>/dev/null)"
printf '{"messages":[{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"what is it?"}]}],"max_tokens":5,"temperature":0}' \
	"$(base64 -w0 "$T/a.png")" >"$T/req.json"
st=$(curl -s -o "$T/ans.json" -w '%{http_code}' "$URL/v1/chat/completions" \
	-H 'Content-Type: application/json' --data-binary @"$T/req.json")
check "serve kimi_vl at EP 2: a chat with a PNG data URL: 200" test "$st" = 200
printf '%s' "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|><|im_user|>user<|im_middle|>Look:${IMG}what is it?<|im_end|><|im_assistant|>assistant<|im_middle|>" >"$T/chat.txt"
"$ENGINE" run "$T/k" --prompt-file "$T/chat.txt" --image "$T/a.png" --generate 5 \
	--dump-generated "$T/cgen.json" >/dev/null 2>"$T/crun.err"
want=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['generated'])" "$T/cgen.json" 2>&1)
got=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['choices'][0]['token_ids'])" "$T/ans.json" 2>&1)
check "... the greedy tokens of run --image on Kimi-VL's chat template ($want)" test "$got" = "$want"
printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/x.png"}}]}]}' >"$T/req2.json"
st=$(curl -s -o "$T/ans2.json" -w '%{http_code}' "$URL/v1/chat/completions" --data-binary @"$T/req2.json")
check "... an http URL: 400" test "$st" = 400
contains "... saying the server fetches nothing" "fetches nothing" "$T/ans2.json"
kill -TERM $SPID 2>/dev/null
wait $SPID 2>/dev/null || true
