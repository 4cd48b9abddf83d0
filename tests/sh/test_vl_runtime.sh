# The image channel in the runtime (issue #30): the vision tower, the
# splice of its features and M-RoPE under run --image, held by validate
# --image against the float64 reference (ref_vision.c + ref.c) on tiny
# same-structure Qwen2.5-VL, Qwen2-VL and LLaVA checkpoints: operator
# (2D rotary, window attention, M-RoPE, patch embedding), layer (every
# tower block, the merger output), end to end (logits, greedy tokens) for
# image-only, mixed and text-only prompts at TP 1, TP 2, TP 4 and PP 2.
. "$(dirname "$0")/../lib.sh"
VL="$DAY0_ROOT/assets/configs/vl"
PY=/usr/bin/python3 # Debian's, with python3-pil (make deps)
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none"

# --- the checkpoints and images
"$ENGINE" gen-model --like "$VL/qwen2.5-vl-7b-instruct/config.json" "$T/q25" >/dev/null 2>&1
"$ENGINE" gen-model --like "$VL/llava-1.5-7b-hf/config.json" "$T/llava" >/dev/null 2>&1
mkdir -p "$T/q2src"
$PY - "$VL/qwen2.5-vl-7b-instruct/config.json" "$T/q2src/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["model_type"] = "qwen2_vl"; c["architectures"] = ["Qwen2VLForConditionalGeneration"]
c["vision_config"] = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                      "hidden_size": c["hidden_size"], "patch_size": 14, "spatial_merge_size": 2,
                      "spatial_patch_size": 14, "temporal_patch_size": 2}
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
cp "$VL/qwen2.5-vl-7b-instruct/preprocessor_config.json" "$T/q2src/"
"$ENGINE" gen-model --like "$T/q2src/config.json" "$T/q2" >/dev/null 2>&1
# TP 4 splits the LM's heads, kv heads and ffn over 4 ranks: the tiny
# Qwen2.5-VL's 14 heads / 2 kv heads do not, --for-layout 4,1,1 gives the
# smallest of its structure that does (the tower is replicated).  LLaVA's
# tiny LM (4 heads, 4 kv heads, ffn 128) already splits.
"$ENGINE" gen-model --like "$VL/qwen2.5-vl-7b-instruct/config.json" --for-layout 4,1,1 "$T/q25t4" >/dev/null 2>&1
for m in q25 q2 llava q25t4; do
	check "gen-model --like: a tiny $m" test -s "$T/$m/model.safetensors"
done
$PY - "$T" <<'PY'
from PIL import Image
import random, sys
random.seed(30)
def mk(w, h, path, k=7):
    im = Image.new("RGB", (w, h))
    im.putdata([(random.randrange(256), (x * k) % 256, (y * 5) % 256) for y in range(h) for x in range(w)])
    im.save(path)
d = sys.argv[1]
mk(252, 140, d + "/a.png")      # Qwen: 10 x 18 patches, 45 tokens, 2 x 3 windows (padded)
mk(90, 60, d + "/b.jpg")        # a JPEG, 4 x 6 patches
mk(252, 140, d + "/a2.png", 3)  # a's size, other pixels
PY

# run --image, then validate --image on its dumps; $1 name, $2 model,
# $3 layout ("" or --tp 2 / --pp 2), $4 the case validate must name, rest:
# the prompt and image options.
vl_case() {
	local name=$1 m=$2 lay=$3 kind=$4 np=1 pre=""
	shift 4
	case "$lay" in *" "[24]) np=${lay##* }; pre="$MPI -np $np" ;; esac
	rm -rf "$T/dump"
	run $pre "$ENGINE" run "$T/$m" $lay "$@" --generate 4 --dump-logits "$T/lg.st" \
		--dump-layers "$T/dump" --dump-generated "$T/gen.json"
	if [ "$RC" != 0 ]; then
		fail "$name: run" "exit $RC: $(head -c 300 "$ERR")"
		return
	fi
	case "$lay" in --tp*) if ! grep -q "tp $np pp 1 ep 1 ($np ranks)" "$OUT"; then
		fail "$name: run" "not split over $np ranks: $(head -c 300 "$OUT")"
		return
	fi ;; esac
	run "$ENGINE" validate "$T/$m" "$@" --logits "$T/lg.st" --layers-dir "$T/dump" \
		--generated "$T/gen.json"
	cp "$OUT" "$T/val.out"
	if [ "$RC" = 0 ] && grep -q "numerics.image: pass: $kind" "$T/val.out" &&
		grep -q "top-1 100.0%; greedy equal" "$T/val.out"; then
		ok "$name: $(grep -o 'tower [0-9]* states, worst [^)]*), merger [^;]*' "$T/val.out"), $(grep -o 'logits max rel [^,]*' "$T/val.out") <= 1e-5, top-1 100%, greedy equal"
	else
		fail "$name" "validate exit $RC: $(grep 'numerics\|FAIL' "$T/val.out" | head -5) $(head -c 300 "$ERR")"
	fi
}

Q="413,415,414" # <|vision_start|><|image_pad|><|vision_end|>: one placeholder, expanded
vl_case "qwen2.5-vl image-only, TP 1" q25 "" image-only --tokens $Q --image "$T/a.png"
contains "... the window order's states are compared block by block" "image-00-block-001" "$T/val.out"
contains "... the patch embedding (operator level)" "image-00-patch_embed" "$T/val.out"
contains "... 2D rotary and window attention kernels against float64" "attention.window" "$T/val.out"
vl_case "qwen2.5-vl mixed (text, 2 images, text), TP 1" q25 "" mixed \
	--tokens 5,$Q,6,7,$Q,8 --image "$T/a.png" --image "$T/b.jpg"
vl_case "qwen2.5-vl text-only, TP 1" q25 "" text-only --tokens 5,6,7,8
vl_case "qwen2.5-vl mixed, TP 2" q25 "--tp 2" mixed --tokens 5,$Q,6,7,$Q,8 --image "$T/a.png" --image "$T/b.jpg"
vl_case "qwen2.5-vl mixed, PP 2" q25 "--pp 2" mixed --tokens 5,$Q,6,7,$Q,8 --image "$T/a.png" --image "$T/b.jpg"
vl_case "qwen2.5-vl image-only, TP 2" q25 "--tp 2" image-only --tokens $Q --image "$T/b.jpg"
vl_case "qwen2-vl (LayerNorm, quick_gelu, full attention) mixed, TP 1" q2 "" mixed \
	--tokens 5,$Q,6,$Q,7 --image "$T/a.png" --image "$T/b.jpg"
vl_case "qwen2-vl image-only, PP 2" q2 "--pp 2" image-only --tokens $Q --image "$T/a.png"
vl_case "qwen2-vl text-only, TP 2" q2 "--tp 2" text-only --tokens 5,6,7,8
vl_case "llava (CLIP, feature layer -2, projector) image-only, TP 1" llava "" image-only --tokens 3 --image "$T/b.jpg"
vl_case "llava mixed (USER: <image>), TP 2" llava "--tp 2" mixed --prompt "USER: <image>" --image "$T/a.png"
vl_case "llava text-only, PP 2" llava "--pp 2" text-only --prompt "USER: What is it? ASSISTANT:"
# TP 4 (4 ranks on 2 cores: --oversubscribe).  a.png's greedy
# continuation generates an <|image_pad|> id: the reference embeds it as a
# token, as the runtime's decode does (it once spliced a feature row read
# past the features there: greedy "differs", a heap overflow under ASan).
vl_case "qwen2.5-vl image-only, TP 4" q25t4 "--tp 4" image-only --tokens $Q --image "$T/a.png"
check "... its greedy continuation holds an <|image_pad|> id (415)" \
	$PY -c "import json,sys; sys.exit(415 not in json.load(open(sys.argv[1]))['generated'])" "$T/gen.json"
vl_case "qwen2.5-vl mixed (text, 2 images, text), TP 4" q25t4 "--tp 4" mixed \
	--tokens 5,$Q,6,7,$Q,8 --image "$T/a.png" --image "$T/b.jpg"
vl_case "qwen2.5-vl text-only, TP 4" q25t4 "--tp 4" text-only --tokens 5,6,7,8
vl_case "llava image-only, TP 4" llava "--tp 4" image-only --tokens 3 --image "$T/b.jpg"
vl_case "llava mixed (USER: <image>), TP 4" llava "--tp 4" mixed --prompt "USER: <image>" --image "$T/a.png"
vl_case "llava text-only, TP 4" llava "--tp 4" text-only --prompt "USER: What is it? ASSISTANT:"
vl_case "qwen2.5-vl: placeholders auto-inserted before the text, TP 1" q25 "" mixed --tokens 5,6,7 --image "$T/b.jpg"

# A user's run: text with the image placeholder, the expansion shown.
expect_rc 0 "run --prompt with <|image_pad|> and --image" "$ENGINE" run "$T/q25" \
	--prompt "<|vision_start|><|image_pad|><|vision_end|>What is it?" --image "$T/a.png" --generate 2
contains "... the placeholder expanded to the image's 45 tokens" \
	"$($PY -c "print('<|vision_start|>' + '<|image_pad|>' * 45 + '<|vision_end|>What is it?')")" "$OUT"

# --- refusals, by name
expect_rc 1 "one placeholder too few (44 for the image's 45): refused" "$ENGINE" run "$T/q25" \
	--tokens "413,$($PY -c "print(','.join(['415'] * 44))"),414" --image "$T/a.png"
contains "... as image.features, naming the counts" \
	"image.features: image 1 takes 45 placeholder tokens (its pixels' merged patches); the prompt has 44" "$ERR"
expect_rc 1 "... validate refuses the same prompt by the same name" "$ENGINE" validate "$T/q25" \
	--tokens "413,$($PY -c "print(','.join(['415'] * 44))"),414" --image "$T/a.png" --levels e2e
contains "... image.features" "image.features: image 1 takes 45" "$ERR"
expect_rc 1 "two placeholder runs for one image: image.features" "$ENGINE" run "$T/q25" \
	--tokens $Q,5,$Q --image "$T/a.png"
contains "... named" "image.features: the prompt has 2 image placeholder runs" "$ERR"
"$ENGINE" gen-model --like "$DAY0_ROOT/assets/configs/qwen2-0.5b.json" "$T/text" >/dev/null 2>&1 ||
	"$ENGINE" gen-model --arch qwen2 "$T/text" >/dev/null 2>&1
expect_rc 2 "--image on a text model: a usage error naming it" "$ENGINE" run "$T/text" --tokens 1,2 --image "$T/a.png"
contains "... says why" "--image needs a vision-language checkpoint" "$ERR"
printf 'not an image' >"$T/bad.png"
expect_rc 2 "a corrupt image: exit 2 naming the file" "$ENGINE" run "$T/q25" --tokens $Q --image "$T/bad.png"
contains "... the file named" "$T/bad.png" "$ERR"

# --- a wrong image is found, not passed: validate with other pixels of
# the same size (same tokens) fails numerics.image at the layer and e2e
rm -rf "$T/dump"
"$ENGINE" run "$T/q25" --tokens $Q --image "$T/a.png" --dump-logits "$T/lg.st" --dump-layers "$T/dump" >/dev/null 2>&1
expect_rc 1 "validate with other pixels than the run's: numerics.image fails" "$ENGINE" validate "$T/q25" \
	--tokens $Q --image "$T/a2.png" --logits "$T/lg.st" --layers-dir "$T/dump" --levels layer,e2e
contains "... named" "numerics.image: FAIL" "$OUT"
# another image of another size than the run's: the dumps are there, of
# the run's image; validate says so (it said "largest error growth at
# layer -1" and "tower states not compared (a dump missing)")
run "$ENGINE" validate "$T/q25" --tokens $Q --image "$T/b.jpg" --logits "$T/lg.st" --layers-dir "$T/dump" --levels layer,e2e
check "validate with an image of another size than the run's: not exit 0 (exit $RC)" test "$RC" != 0
contains "... numerics.image: the run dumped another image" "the run dumped another image" "$OUT"
check "... no 'layer -1'" bash -c "! grep -q 'layer -1' '$OUT'"
check "... no 'a dump missing'" bash -c "! grep -q 'a dump missing' '$OUT'"
contains "... stderr gives both shapes" "this prompt's image gives [" "$ERR"
run "$ENGINE" validate "$T/q25" --tokens $Q --image "$T/a.png" --logits "$T/lg.st" --layers-dir "$T/dump" --events
check "validate --events: a numerics.image check event, pass" \
	grep -q '"type": *"check".*"item": *"numerics.image".*"status": *"pass"\|"item": *"numerics.image".*"status": *"pass"' "$OUT"
# Without --layers-dir the tower's states are not compared: validate says
# so (it printed "tower 0 states, worst 0 (embed), merger 0", which reads
# as no error)
expect_rc 0 "validate --image without --layers-dir: exit 0" "$ENGINE" validate "$T/q25" \
	--tokens $Q --image "$T/a.png" --logits "$T/lg.st"
contains "... numerics.image says the tower's states were not compared" \
	"tower states not compared (no --layers-dir)" "$OUT"
check "... no 'tower 0 states'" test "$(grep -c 'tower 0 states' "$OUT")" = 0
