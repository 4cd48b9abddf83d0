# validate --local: each layer from the run's own input, layers over
# mpirun ranks, MoE routing flips apart, memory bounded by a chunk.
. "$(dirname "$0")/../lib.sh"
TOK=1,42,7,31,5,99,11,23
MPI="timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none"

# an f32 MoE run (tp 2, ep 2): every layer within 1e-5, alone and on 2 ranks
"$ENGINE" gen-model --arch mixtral --layers 3 "$T/m" >/dev/null
run $MPI -np 4 "$ENGINE" run "$T/m" --tp 2 --ep 2 --tokens $TOK --dump-logits "$T/m.st" --dump-layers "$T/ml"
check "f32 run dumps its layers" test -f "$T/ml/layer-002.safetensors"
expect_rc 0 "--local, one process: every layer within 1e-5 of float64" \
	"$ENGINE" validate "$T/m" --local --tokens $TOK --layers-dir "$T/ml" --logits "$T/m.st" --json
cp "$OUT" "$T/one.json"
expect_rc 0 "--local under mpirun -np 2: the layers split over the ranks" \
	$MPI -np 2 "$ENGINE" validate "$T/m" --local --tokens $TOK --layers-dir "$T/ml" --logits "$T/m.st" --json
cp "$OUT" "$T/two.json"
check "2 ranks gather the same per-layer figures as 1" \
	test "$(jq -c '.layer' "$T/one.json")" = "$(jq -c '.layer' "$T/two.json")"
check "the document says how many ranks computed it" test "$(jq .ranks "$T/two.json")" = 2
check "every layer is reported" test "$(jq '.layer | length' "$T/one.json")" = 3
# layer 0 has the same input in both modes: the same error
run "$ENGINE" validate "$T/m" --tokens $TOK --layers-dir "$T/ml" --levels layer --json
check "layer 0: the whole-model and layer-local errors agree" \
	test "$(jq '.layer[0].max_rel' "$OUT")" = "$(jq '.layer[0].max_rel' "$T/one.json")"
# the table shows what --json holds
run "$ENGINE" validate "$T/m" --local --tokens $TOK --layers-dir "$T/ml"
rel1=$(jq -r '.layer[1].max_rel' "$T/one.json")
if awk -v want="$rel1" '$1 == "layer" && $2 == 1 { d = ($4 - want) / want; exit !(d < 1e-2 && d > -1e-2) } END {}' "$OUT"; then
	ok "the table's layer 1 matches --json ($rel1)"
else
	fail "the table's layer 1 matches --json" "$(grep 'layer 1' "$OUT")"
fi

# a routing flip bf16 cannot resolve: experts 0 and 1 of layer 0's router
# are one expert in bf16, two in float64
"$ENGINE" gen-model --arch mixtral --top-k 1 "$T/f" >/dev/null
python3 "$DAY0_ROOT/tests/sh/flip_router.py" "$T/f/model.safetensors" 0
"$ENGINE" convert "$T/f" "$T/fc" --dtype bf16 --tp 1 >/dev/null
run "$ENGINE" run "$T/fc" --tp 1 --tokens $TOK --dump-logits "$T/f.st" --dump-layers "$T/fl"
# The whole-model check follows the run's routing where the run's choice
# is the top-k of its own router logits and those are within the bound
# (engine/ref/route_follow.h): the dumps hold each MoE layer's choice.
run "$BUILD/tests/st_dump" "$T/fl/layer-000.safetensors"
check "a MoE layer's dump holds its experts [T][top_k] and router logits [T][experts]" \
	bash -c "grep -q '^experts I32 \[8,1\] ' '$OUT' && grep -q '^router_logits F32 \[8,4\] ' '$OUT'"
expect_rc 0 "the whole-model check follows the flips and passes at bf16's 2e-2" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl" --logits "$T/f.st" --levels layer,e2e \
	--max-rel 2e-2 --kl-max 1e-3
contains "… naming each flip, the two choices and why it is one" \
	"routing flip at layer 0 token 0: the run chose experts 0, float64 1 (float64's margin" "$OUT"
contains "… and the reference following the run" "the reference follows the run" "$OUT"
run "$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl" --logits "$T/f.st" --levels layer,e2e \
	--max-rel 2e-2 --kl-max 1e-3 --json
check "--json: the flips, all explained, the routed rows counted" \
	test "$(jq -c '[.flips >= 1, .flips == (.routing_flips | length), ([.routing_flips[].explained] | all), .routed]' "$OUT")" = "[true,true,true,16]"
check "--json: flips only where the reference and the run differ (0 for 1)" \
	test "$(jq -c '[.routing_flips[] | [.run, .reference]] | unique' "$OUT")" = '[["0","1"]]'
run "$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl" --levels layer --max-rel 2e-2 --events
check "--events: numerics.layer passes and counts the followed flips" \
	grep -q '"item":"numerics.layer","status":"pass","detail":"[^"]*routing flips\? of 16 routed rows, followed' "$OUT"
expect_rc 1 "… above --max-flips it fails" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl" --levels layer --max-rel 2e-2 --max-flips 0.05
contains "… saying so" "routing flips of 16 routed rows, above 0.05" "$OUT"
expect_rc 0 "without the layer level, e2e follows the flips too" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl" --logits "$T/f.st" --levels e2e \
	--max-rel 2e-2 --kl-max 1e-3 --events
check "… its numerics.e2e says so" grep -q '"item":"numerics.e2e","status":"pass","detail":"[^"]*(the run.s routing followed at its flips)' "$OUT"
# without the routing in the dumps (an older run) the flips are errors again
cp -r "$T/fl" "$T/fl0"
"$BUILD/tests/st_edit" "$T/fl0/layer-000.safetensors" --drop experts --drop router_logits
expect_rc 1 "dumps without routing: the whole-model check fails at 2e-2 where routing flipped" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl0" --levels layer --max-rel 2e-2
# a choice that is not the top-k of the run's own logits is no flip
cp -r "$T/fl" "$T/fl1"
"$BUILD/tests/st_edit" "$T/fl1/layer-000.safetensors" --poke experts 0 02000000
expect_rc 1 "a choice the run's logits do not make fails the layer level" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl1" --levels layer --max-rel 2e-2
contains "… naming layer, token, both choices and why" \
	"routing differs at layer 0 token 0: the run chose experts 2, float64 1" "$OUT"
contains "… (not the top-k)" "and not their top-k)" "$OUT"
# nor is one made by logits off by more than the bound
cp -r "$T/fl" "$T/fl2"
"$BUILD/tests/st_edit" "$T/fl2/layer-000.safetensors" --poke experts 0 02000000 --poke router_logits 2 0000c842
expect_rc 1 "router logits beyond the bound do not explain a choice" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl2" --levels layer --max-rel 2e-2
contains "… saying so" "relative, above the bound)" "$OUT"
cp -r "$T/fl" "$T/fl3"
"$BUILD/tests/st_edit" "$T/fl3/layer-000.safetensors" --drop experts
expect_rc 1 "a dump with router logits but no experts fails" \
	"$ENGINE" validate "$T/f" --tokens $TOK --layers-dir "$T/fl3" --levels layer --max-rel 2e-2
contains "… naming the file and what is missing" "layer-000.safetensors: has 'router_logits' without 'experts'" "$ERR"
expect_rc 0 "--local --compute-dtype bf16: flips apart, the rest within 2e-2" \
	"$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl" --logits "$T/f.st" \
	--max-rel 2e-2 --kl-max 1e-3 --compute-dtype bf16
contains "the flip is reported with its layer, token and margin" "routing flip at layer 0 token 0, margin" "$OUT"
expect_rc 1 "more flips than --max-flips fails" \
	"$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl" --max-rel 2e-2 \
	--compute-dtype bf16 --max-flips 0.05
expect_rc 1 "--compute-dtype f32 does not excuse a bf16 flip (dumps without routing)" \
	"$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl0" --max-rel 2e-2
# with the run's routing in the dumps --local follows an explained choice
# its spread test did not foresee, as the whole-model check does
run "$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl" --max-rel 2e-2 --json
check "--local follows the run's routing: f32's spread test missed the flips, they pass counted" \
	test "$(jq -c '[.ok, .flips >= 1, (.routing_flips | length) == .flips]' "$OUT")" = "[true,true,true]"
expect_rc 1 "--local: a choice the run's logits do not make fails" \
	"$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl1" --max-rel 2e-2 --compute-dtype bf16
contains "… naming layer, token and both choices" \
	"routing differs at layer 0 token 0: the run chose experts 2, float64 1" "$ERR"
contains "… and counting it in numerics.layer" "1 routed rows chose other experts than float64 without a near-tie" "$OUT"
expect_rc 2 "--local: a dump with router logits but no experts is an input error" \
	"$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl3" --max-rel 2e-2
contains "… naming the file" "layer-000.safetensors: has 'router_logits' without 'experts'" "$ERR"
run "$ENGINE" validate "$T/f" --local --tokens $TOK --layers-dir "$T/fl" --max-rel 2e-2 --compute-dtype bf16 --events
check "--events: numerics.layer passes and names the flips" \
	grep -q '"item":"numerics.layer","status":"pass","detail":"[^"]*2 routing flips of 16 routed' "$OUT"
check "--events: a log event per flip" grep -q '"msg":"routing flip at layer 0 token 0' "$OUT"

# a dump naming one expert twice for a token (mixtral, top-2) is refused
cp -r "$T/ml" "$T/mld"
python3 - "$T/mld/layer-001.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], 'r+b') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    t = json.loads(f.read(n))['experts']
    f.seek(8 + n + t['data_offsets'][0])
    a, b = struct.unpack('<2i', f.read(8))
    f.seek(8 + n + t['data_offsets'][0] + 4)
    f.write(struct.pack('<i', a))
PY
expect_rc 1 "a dump naming an expert twice in a row fails the layer level" \
	"$ENGINE" validate "$T/m" --tokens $TOK --layers-dir "$T/mld" --levels layer
contains "… naming the file, the row and the expert" "layer-001.safetensors: 'experts' row 0 holds expert" "$ERR"

# bad input
expect_rc 2 "--local needs --layers-dir" "$ENGINE" validate "$T/m" --local --tokens $TOK
expect_rc 2 "--compute-dtype takes f32, bf16 or f16" "$ENGINE" validate "$T/m" --local --tokens $TOK \
	--layers-dir "$T/ml" --compute-dtype int8
rm "$T/ml/layer-001.safetensors"
expect_rc 2 "a missing dump is an input error" "$ENGINE" validate "$T/m" --local --tokens $TOK --layers-dir "$T/ml"
contains "naming the file" "layer-001.safetensors: cannot open" "$ERR"

# memory: a chunk of weights, not a layer nor the model, in both modes
# (tests/sh/test_validate_chunk.sh: real vocabularies and expert widths
# under --mem + 64 MiB; bench/validate_local.sh: 8x under a bound)
"$ENGINE" gen-model --arch llama --layers 6 --hidden 512 --heads 8 --ffn 2048 --vocab 16384 "$T/big" >/dev/null
"$ENGINE" run "$T/big" --tp 1 --tokens 1,2,3 --dump-layers "$T/bl" >/dev/null
ck=$(stat -c %s "$T/big/model.safetensors")
rss() { # OUTFILE CMD...: peak RSS in bytes (tests/tools/maxrss)
	local o=$1; shift
	"$BUILD/tests/maxrss" "$@" >/dev/null 2>"$T/rss.err"
	echo $(($(sed -n 's/^maxrss_kib //p' "$T/rss.err") * 1024)) >"$o"
}
rss "$T/rss.local" "$ENGINE" validate "$T/big" --local --tokens 1,2,3 --layers-dir "$T/bl"
rss "$T/rss.full" "$ENGINE" validate "$T/big" --tokens 1,2,3 --layers-dir "$T/bl" --levels layer
rl=$(cat "$T/rss.local") rf=$(cat "$T/rss.full")
case "$BUILD" in
*asan*) # ASan's shadow memory and quarantine swamp RSS: only the order
	bound=$((1 << 62)) ;;
*) bound=$((ck / 3)) ;;
esac
if [ "$rl" -lt "$bound" ] && [ "$rf" -lt "$bound" ]; then
	ok "peak RSS --local $((rl >> 20)) MiB, whole-model $((rf >> 20)) MiB: both under a third of the $((ck >> 20)) MiB checkpoint"
else
	fail "peak RSS bounded in both modes" "local $rl, whole-model $rf, checkpoint $ck bytes"
fi
