#!/usr/bin/env bash
# image-check's findings put on the right item, with the right words
# (docs/multimodal.md, "The image channel on the release day"):
#   - a preprocessor that rescales or normalizes otherwise than (v/255 -
#     mean)/std fails image.preprocess naming the field and the value
#     expected (the expected values never come from the config checked);
#   - a CLIP crop that does not give the tower its image_size square (no
#     crop; a shortest edge under the crop, zero padding) fails
#     image.features, and the runtime items are not run;
#   - --events: stdout holds JSON events only;
#   - numerics.image names the images its 4,096-patch cap leaves out;
#   - --tp without the ranks under mpirun is a usage error (exit 2);
#   - a preprocessor config without image_processor_type says so.
. "$(dirname "$0")/../lib.sh"
PY=/usr/bin/python3
VL="$DAY0_ROOT/assets/configs/vl"
item() { # JSON ITEM FIELD
	$PY -c "import json,sys; d=json.load(open(sys.argv[1]))['items'][sys.argv[2]]; print(d.get(sys.argv[3], ''))" "$@"
}
"$ENGINE" gen-model --like "$VL/qwen2.5-vl-7b-instruct/config.json" --scale tiny --force "$T/q25" >/dev/null ||
	fail "gen-model q25" "exit $?"
"$ENGINE" gen-model --like "$VL/llava-1.5-7b-hf/config.json" --scale tiny --force "$T/llava" >/dev/null ||
	fail "gen-model llava" "exit $?"
# Two PNGs by PIL: 1000x1000 (5184 patches for the Qwen processor) and 60x40
$PY - "$T/big" <<'PY'
import os, sys
from PIL import Image
d = sys.argv[1]; os.makedirs(d)
Image.new("RGB", (1000, 1000), (30, 60, 90)).save(d + "/a_big.png")
Image.new("RGB", (60, 40), (200, 10, 10)).save(d + "/b_small.png")
PY
mkfault() { # NAME BASE PYTHON-EDIT: BASE's preprocessor edited, published so
	rm -rf "$T/$1"; cp -r "$T/$2" "$T/$1"
	$PY -c "import json; p='$T/$1/preprocessor_config.json'; c=json.load(open(p)); $3; json.dump(c, open(p, 'w'), indent=2)"
	(cd "$T/$1" && grep -v ' preprocessor_config.json$' SHA256SUMS >S && sha256sum preprocessor_config.json >>S && mv S SHA256SUMS)
}

# ---- 1. rescale / normalize against the definition, not the config --------------
mkfault r127 q25 "c['rescale_factor'] = 1 / 127.5"
mkfault nonorm q25 "c['do_normalize'] = False"
mkfault norescale q25 "c['do_rescale'] = False"
expect_rc 1 "rescale_factor 1/127.5: exit 1 (it once passed every item)" "$ENGINE" image-check "$T/r127" --json
cp "$OUT" "$T/r127.json"
check "... image.preprocess fails" test "$(item "$T/r127.json" image.preprocess status)" = fail
item "$T/r127.json" image.preprocess detail >"$T/d"
contains "... naming the field, its value and the value expected" \
	"$T/r127/preprocessor_config.json: rescale_factor 0.00784313725 (1/127.5), but the tower is fed (v/255 - mean)/std: expected 1/255 = 0.00392156862745098" "$T/d"
contains "... the uniform image's 1.9449 outside (1 - mean)/std = 1.93" "value 1.94493 at [0, 0] outside [(0 - mean)/std, (1 - mean)/std] = [-1.792, 1.93]" "$T/d"
check "... numerics.image and perf.image not run on values the tower is not fed" \
	test "$(item "$T/r127.json" numerics.image status)/$(item "$T/r127.json" perf.image status)" = skip/skip
item "$T/r127.json" perf.image detail >"$T/d"
contains "... saying why" "not measured: image.preprocess failed (the config's rescale/normalize)" "$T/d"
expect_rc 1 "do_normalize false: exit 1" "$ENGINE" image-check "$T/nonorm" --json
item "$OUT" image.preprocess detail >"$T/d"
contains "... image.preprocess names do_normalize" "preprocessor_config.json: do_normalize false, but the tower is fed (v/255 - mean)/std: expected do_normalize true" "$T/d"
contains "... and the closed form (v/255 - mean)/std = 0.0763 for the uniform image" "not (v/255 - mean)/std = 0.0763360735" "$T/d"
expect_rc 1 "do_rescale false: exit 1" "$ENGINE" image-check "$T/norescale" --json
item "$OUT" image.preprocess detail >"$T/d"
contains "... image.preprocess names do_rescale" "preprocessor_config.json: do_rescale false, but the tower is fed (v/255 - mean)/std: expected do_rescale true with rescale_factor 1/255" "$T/d"
check "... not 'not (v/255 - mean)/std = 474.7' (the expected value from the config)" test "$(grep -c '= 474' "$T/d")" = 0
expect_rc 0 "the published rescale_factor 0.00392156862745098 passes" "$ENGINE" image-check "$T/llava" --runs 1 --json
check "... image.preprocess pass" test "$(item "$OUT" image.preprocess status)" = pass

# ---- 2. CLIP: the crop against image_size, on image.features ----------------------
mkfault nocrop llava "c['do_center_crop'] = False"
mkfault se224 llava "c['size']['shortest_edge'] = 224"
expect_rc 1 "llava, do_center_crop false: exit 1" "$ENGINE" image-check "$T/nocrop" --json
cp "$OUT" "$T/nocrop.json"
check "... image.features fails (it once passed, numerics/perf failing for it)" test "$(item "$T/nocrop.json" image.features status)" = fail
item "$T/nocrop.json" image.features detail >"$T/d"
contains "... naming the crop against image_size" \
	"do_center_crop false: size.shortest_edge 336 keeps each image's aspect (a 4:3 image is fed as 448x336), but the tower takes 336x336 ($T/nocrop/config.json vision_config.image_size): expected do_center_crop true with crop_size 336" "$T/d"
check "... numerics.image and perf.image skip because of it" \
	test "$(item "$T/nocrop.json" numerics.image detail)|$(item "$T/nocrop.json" perf.image detail)" = "not measured: image.features failed|not measured: image.features failed"
expect_rc 1 "llava, size.shortest_edge 224 under a 336 crop (zero padding): exit 1" "$ENGINE" image-check "$T/se224" --json
cp "$OUT" "$T/se224.json"
item "$T/se224.json" image.features detail >"$T/d"
contains "... image.features names the padding" "size.shortest_edge 224 is smaller than crop_size 336x336: the crop pads every image with zeros; expected shortest_edge >= 336" "$T/d"
check "... the runtime items skip" test "$(item "$T/se224.json" numerics.image status)/$(item "$T/se224.json" perf.image status)" = skip/skip
# (image-prep --config's geometry check says the same of the two CLIP crops)
expect_rc 1 "image-prep --config, shortest edge 224 under the 336 crop: exit 1" "$ENGINE" image-prep "$T/big/b_small.png" \
	--preprocessor "$T/se224/preprocessor_config.json" --config "$T/se224/config.json"
contains "... named" "image.features: size.shortest_edge 224 is smaller than crop_size 336x336" "$ERR"
expect_rc 1 "image-prep --config, do_center_crop false: exit 1" "$ENGINE" image-prep "$T/big/b_small.png" \
	--preprocessor "$T/nocrop/preprocessor_config.json" --config "$T/nocrop/config.json"
contains "... named" "image.features: do_center_crop false: size.shortest_edge 336 keeps each image's aspect" "$ERR"

# ---- 3. --events: one JSON object a line on stdout ---------------------------------
expect_rc 0 "image-check --events" "$ENGINE" image-check "$T/q25" --runs 1 --events
check "... stdout: 4 lines, each a JSON check event (no text table)" $PY -c "
import json, sys
ls = open(sys.argv[1]).read().splitlines()
ev = [json.loads(l) for l in ls]
sys.exit(not (len(ev) == 4 and all(e['type'] == 'check' for e in ev)))" "$OUT"
expect_rc 1 "image-check --events with a failing item" "$ENGINE" image-check "$T/nocrop" --events
check "... stdout still JSON only" $PY -c "
import json, sys
[json.loads(l) for l in open(sys.argv[1])]" "$OUT"

# ---- 4. numerics.image names what its patch cap leaves out -------------------------
expect_rc 0 "a 1000x1000 image (5184 patches) and a small one" "$ENGINE" image-check "$T/q25" --images "$T/big" --json
cp "$OUT" "$T/big.json"
item "$T/big.json" numerics.image detail >"$T/d"
contains "... numerics.image names the image left out, its patches and the cap" \
	"1 image left out (the float64 tower is run on at most 4096 patches in all; 24 compared): $T/big/a_big.png (5184 patches)" "$T/d"
check "... in the event's left_out too" grep -q "a_big.png (5184 patches)" <(item "$T/big.json" numerics.image left_out)
check "... perf.image timed both" test "$(item "$T/big.json" perf.image n)" = 2

# ---- 5. a layout without its ranks is a usage error --------------------------------
expect_rc 2 "--tp 2 without mpirun: exit 2 (as perf), not two failed items" "$ENGINE" image-check "$T/q25" --tp 2
contains "... saying the ranks" "--tp 2 x --pp 1 x --ep 1 = 2 ranks, but mpirun started 1" "$ERR"
check "... no item printed" test ! -s "$OUT"

# ---- 7. no image_processor_type --------------------------------------------------
$PY -c "import json,sys; c=json.load(open(sys.argv[1])); del c['image_processor_type']; json.dump(c, open(sys.argv[2], 'w'))" \
	"$T/q25/preprocessor_config.json" "$T/notype.json"
expect_rc 2 "image-check --preprocessor without image_processor_type: exit 2" "$ENGINE" image-check "$T/q25" --preprocessor "$T/notype.json"
contains "... the key named missing, not 'image_processor_type \"\"'" "$T/notype.json: image_processor_type is missing" "$ERR"
check "... (no empty name)" test "$(grep -c 'image_processor_type ""' "$ERR")" = 0
expect_rc 2 "image-prep with it: exit 2" "$ENGINE" image-prep "$T/big/b_small.png" --preprocessor "$T/notype.json"
contains "... the same message" "image_processor_type is missing" "$ERR"
