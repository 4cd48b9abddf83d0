# Release checkpoint formats (docs/formats.md): FP8 block-scaled and INT4
# pack-quantized weights through gen-model, verify, convert, merge, run and
# validate; the quantised malformed corpus (tests/corpus/quant/MANIFEST);
# Hugging Face cache snapshots and --checksums.  Under BUILD=build-asan any
# sanitizer report fails a case.
. "$(dirname "$0")/../lib.sh"
export LC_ALL=C
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
TOOLS="$BUILD/tests"
CONFIGS="$DAY0_ROOT/assets/configs"
QUANT="$DAY0_ROOT/tests/corpus/quant"
TOK=1,5,9,3,7,11,2,60
mpi() { # NP ARGS...
	local np=$1; shift
	timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}
sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$ERR"; }

# vcase NAME WANT_RC NEEDLE DIR [VERIFY ARGS...]: verify's exit status,
# NEEDLE on stderr (stdout when 0), every stderr line a day0-engine message.
vcase() {
	local name=$1 want=$2 needle=$3 path=$4; shift 4
	local where=$ERR
	[ "$want" -eq 0 ] && where=$OUT
	run timeout 60 "$ENGINE" verify "$path" "$@" </dev/null
	if sanitizer_report; then
		fail "$name" "sanitizer report: $(grep -m3 -E 'Sanitizer|runtime error' "$ERR")"
	elif [ "$RC" -ne "$want" ]; then
		fail "$name" "exit $RC, expected $want :: $(head -c 600 "$ERR")"
	elif ! grep -qF -- "$needle" "$where"; then
		fail "$name" "'$needle' not in: $(head -c 600 "$where")"
	elif grep -qv '^day0-engine: ' "$ERR"; then
		fail "$name" "stray stderr line: $(grep -m1 -v '^day0-engine: ' "$ERR")"
	else
		ok "$name"
	fi
}
resum() { (cd "$1" && sha256sum config.json *.safetensors >SHA256SUMS); }

# ------------------------------------------------ logits against float64
# Every family with a quantised release, each layout, f32 compute: within
# 1e-5 of the float64 reference of the dequantised weights.
layout() { # NAME DIR TP PP EP
	local name=$1 dir=$2 tp=$3 pp=$4 ep=$5
	rm -rf "$T/ly" "$T/lg.st"
	run mpi $((tp * pp * ep)) run "$dir" --tp "$tp" --pp "$pp" --ep "$ep" --tokens "$TOK" \
		--dump-logits "$T/lg.st" --dump-layers "$T/ly"
	if [ "$RC" -ne 0 ]; then
		fail "$name tp$tp pp$pp ep$ep: run" "exit $RC: $(tail -c 300 "$ERR")"
		return
	fi
	expect_rc 0 "$name tp$tp pp$pp ep$ep: layers and logits within 1e-5 of float64" \
		"$ENGINE" validate "$dir" --tokens "$TOK" --logits "$T/lg.st" --layers-dir "$T/ly" \
		--levels layer,e2e --max-rel 1e-5 --kl-max 1e-6
}
G="--layers 4 --vocab 128 --shards 2"
"$ENGINE" gen-model --arch deepseek_v3 $G --heads 4 --kv-heads 4 --hidden 64 --experts 8 \
	--n-group 4 --topk-group 2 --quant fp8 --block 16 "$T/ds.fp8" >/dev/null
"$ENGINE" gen-model --like "$CONFIGS/kimi-k2-instruct.json" --layers 4 --shards 2 "$T/kimi.fp8" >/dev/null
"$ENGINE" gen-model --like "$CONFIGS/kimi-k2-thinking.json" --layers 4 --shards 2 "$T/kimi.int4" >/dev/null
"$ENGINE" gen-model --arch qwen3 $G --heads 4 --kv-heads 2 --hidden 64 --quant fp8 --block 16 "$T/qwen3.fp8" >/dev/null
"$ENGINE" gen-model --like "$CONFIGS/qwen3-30b-a3b-fp8.json" --layers 4 --shards 2 "$T/q3moe.fp8" >/dev/null
"$ENGINE" gen-model --arch deepseek_v3 $G --heads 4 --kv-heads 4 --hidden 64 --experts 8 \
	--n-group 4 --topk-group 2 --quant int4 --group 16 "$T/ds.int4" >/dev/null
"$ENGINE" gen-model --arch llama $G --heads 4 --kv-heads 2 --hidden 64 --quant int4 --group 16 "$T/llama.int4" >/dev/null
"$ENGINE" gen-model --arch qwen3_moe $G --heads 4 --kv-heads 2 --hidden 64 --experts 4 --quant int4 --group 16 "$T/q3moe.int4" >/dev/null
for m in ds.fp8 kimi.fp8 kimi.int4 qwen3.fp8 q3moe.fp8 ds.int4 llama.int4 q3moe.int4; do
	vcase "$m: the generated checkpoint verifies" 0 "weights.metadata   pass" "$T/$m"
done
contains "kimi-k2-instruct --like: the rehearsal model is FP8 too" '"quant_method": "fp8"' "$T/kimi.fp8/config.json"
contains "kimi-k2-thinking --like: compressed-tensors with the release's ignore list" \
	're:.*shared_experts.*' "$T/kimi.int4/config.json"
check "kimi-k2-thinking --like: routed experts are packed int4, attention stays unquantised" bash -c \
	"'$TOOLS/st_dump' '$T/kimi.int4/model-00002-of-00002.safetensors' | grep -q 'experts.1.down_proj.weight_packed I32' &&
	 ! '$TOOLS/st_dump' '$T/kimi.int4/model-00001-of-00002.safetensors' '$T/kimi.int4/model-00002-of-00002.safetensors' 2>/dev/null | grep -q 'self_attn.*_packed'"
# TP 1/2/4, PP 2 (with TP 2) and EP 2 (with TP 2) for each family
for m in ds.fp8 kimi.fp8 qwen3.fp8 q3moe.fp8 ds.int4 llama.int4; do
	lays="1,1,1 4,1,1 2,2,1"
	case $m in ds.* | kimi.* | q3moe.*) lays="$lays 2,1,2" ;; esac
	for l in $lays; do
		IFS=, read -r tp pp ep <<<"$l"
		layout "$m" "$T/$m" "$tp" "$pp" "$ep"
	done
done
layout kimi.int4 "$T/kimi.int4" 2 1 2
layout q3moe.int4 "$T/q3moe.int4" 1 2 2
"$ENGINE" gen-model --arch qwen3 $G --heads 4 --kv-heads 2 --hidden 64 --quant fp8-e5m2 --block 16 "$T/qwen3.e5m2" >/dev/null
contains "fp8-e5m2: config says fmt e5m2" '"fmt": "e5m2"' "$T/qwen3.e5m2/config.json"
layout qwen3.e5m2 "$T/qwen3.e5m2" 2 1 1

# A decoder that is wrong shows: the same bytes read as e5m2 (the shards'
# dtype and the config's fmt both say so; the reference decodes by the
# tensors' dtype) are not the model.
cp -r "$T/qwen3.fp8" "$T/wrongfmt"
sed -i 's/"fmt": "e4m3"/"fmt": "e5m2"/' "$T/wrongfmt/config.json"
for f in "$T/wrongfmt"/*.safetensors; do sed -i 's/F8_E4M3/F8_E5M2/g' "$f"; done
rm -rf "$T/ly"
mpi 1 run "$T/qwen3.fp8" --tokens "$TOK" --dump-logits "$T/lg.st" >/dev/null 2>&1
expect_rc 1 "logits of the e4m3 model are not within 1e-5 of the model read as e5m2" \
	"$ENGINE" validate "$T/wrongfmt" --tokens "$TOK" --logits "$T/lg.st" --levels e2e --max-rel 1e-5

# ------------------------------------------------------- convert and merge
expect_rc 0 "convert --dtype keep: FP8 kept, tp2 ep2" "$ENGINE" convert "$T/ds.fp8" "$T/keep" --dtype keep --tp 2 --ep 2
contains "layout.json records the format" '"method": "fp8"' "$T/keep/layout.json"
check "kept rank files hold FP8 slices with their scale blocks" bash -c \
	"'$TOOLS/st_dump' '$T/keep/rank-00001-of-00004.safetensors' | grep -q 'q_b_proj.weight F8_E4M3 \[48,32\]' &&
	 '$TOOLS/st_dump' '$T/keep/rank-00001-of-00004.safetensors' | grep -q 'q_b_proj.weight_scale_inv F32 \[3,2\]'"
rm -rf "$T/ly"
mpi 4 run "$T/keep" --tp 2 --ep 2 --tokens "$TOK" --dump-logits "$T/lg.st" >/dev/null 2>&1
expect_rc 0 "run from kept FP8 rank files matches float64 of the source" "$ENGINE" validate "$T/ds.fp8" \
	--tokens "$TOK" --logits "$T/lg.st" --levels e2e --max-rel 1e-5
expect_rc 0 "merge of the kept conversion" "$ENGINE" merge "$T/keep" "$T/merged"
check "merge of an FP8-kept layout is byte-identical to the source" bash -c \
	"cmp '$T/ds.fp8/model-00001-of-00002.safetensors' '$T/merged/model-00001-of-00002.safetensors' &&
	 cmp '$T/ds.fp8/model-00002-of-00002.safetensors' '$T/merged/model-00002-of-00002.safetensors'"
expect_rc 2 "convert --dtype keep refuses a split that cuts a 16-row block" \
	"$ENGINE" convert "$T/ds.fp8" "$T/keep4" --dtype keep --tp 4
contains "… naming the tensor and the nearest part counts" \
	"q_b_proj.weight': axis 0 of 96 rows split 4 ways cuts a scale block 16 wide; the nearest parts that keep them whole are 3 or 6" "$ERR"
check "… and leaves no output" test ! -e "$T/keep4"
expect_rc 2 "convert --dtype keep refuses to split packed int4 (weight_shape would change)" \
	"$ENGINE" convert "$T/llama.int4" "$T/keepi" --dtype keep --tp 2
for m in ds.fp8 llama.int4; do
	expect_rc 0 "$m: convert --dtype f32 dequantises" "$ENGINE" convert "$T/$m" "$T/deq.$m" --dtype f32 --tp 2 --pp 2
	rm -rf "$T/ly"
	mpi 4 run "$T/deq.$m" --tp 2 --pp 2 --tokens "$TOK" --dump-logits "$T/lg.st" --dump-layers "$T/ly" >/dev/null 2>&1
	expect_rc 0 "$m: dequantised f32 rank files match float64 of the quantised source to 1e-5" \
		"$ENGINE" validate "$T/$m" --tokens "$TOK" --logits "$T/lg.st" --layers-dir "$T/ly" \
		--levels layer,e2e --max-rel 1e-5
done
expect_rc 0 "convert FP8 -> bf16" "$ENGINE" convert "$T/q3moe.fp8" "$T/bf" --dtype bf16 --tp 2 --ep 2
check "FP8 -> bf16 rank files hold bf16 weights and no scales" bash -c \
	"'$TOOLS/st_dump' '$T/bf/rank-00000-of-00004.safetensors' | grep -q 'o_proj.weight BF16' &&
	 ! '$TOOLS/st_dump' '$T/bf/rank-00000-of-00004.safetensors' | grep -q scale_inv"

# ------------------------------------------------------- inspect and plan
run "$ENGINE" inspect "$CONFIGS/deepseek-v3.json" --json
check "inspect: DeepSeek-V3 on disk = FP8 values + 128x128 f32 scales (641.2 GiB)" python3 -c "
import json,sys; d=json.load(open('$OUT'))['storage']
sys.exit(0 if abs(d['disk_bytes']/2**30-641.2)<0.05 and 150<d['scale_bytes']/2**20<170 else 1)"
run "$ENGINE" plan "$CONFIGS/kimi-k2-thinking.json" --nodes 1 --cards 8 --card-mem 96G --layout 8,1,1 --json
check "plan: Kimi-K2-Thinking at tp8 sized as stored (int4 experts + scales: ~71 GiB a card, not bf16's ~240)" python3 -c "
import json,sys; d=json.load(open('$OUT')); L=(d['feasible']+d['rejected'])[0]
sys.exit(0 if 65*2**30 < L['weights_bytes'] < 75*2**30 else 1)"
run "$ENGINE" plan "$CONFIGS/kimi-k2-thinking.json" --nodes 1 --cards 8 --card-mem 96G --layout 8,1,1 --json --weights-dtype bf16
check "plan --weights-dtype bf16: the dequantised footprint" python3 -c "
import json,sys; d=json.load(open('$OUT')); L=(d['feasible']+d['rejected'])[0]
sys.exit(0 if L['weights_bytes'] > 200*2**30 else 1)"

# ------------------------------------------------ the quantised corpus
"$ENGINE" gen-model --arch deepseek_v3 --quant fp8 --block 16 "$T/base.fp8" >/dev/null
"$ENGINE" gen-model --arch llama --layers 1 --quant int4 --group 16 "$T/base.int4" >/dev/null
"$ENGINE" gen-model --arch llama --layers 1 "$T/base.plain" >/dev/null
n=0
while IFS=$'\t' read -r name base rc msg edit; do
	case "$name" in '' | '#'*) continue ;; esac
	n=$((n + 1))
	D="$T/q.$name"
	rm -rf "$D"
	cp -r "$T/base.$base" "$D"
	case "$edit" in
	cfgdel\ *) python3 -c "
import json,sys,collections; p=sys.argv[1]; d=json.load(open(p),object_pairs_hook=collections.OrderedDict)
del d[sys.argv[2]]; open(p,'w').write(json.dumps(d,indent=2)+'\n')" "$D/config.json" "${edit#cfgdel }" ;;
	cfgsed\ *) sed -i "${edit#cfgsed }" "$D/config.json" ;;
	*) eval "set -- $edit"; "$TOOLS/st_edit" "$D/model.safetensors" "$@" ;;
	esac
	resum "$D"
	vcase "quant corpus $name: exit $rc, '$msg'" "$rc" "$msg" "$D"
done <"$QUANT/MANIFEST"
if [ "$n" -ge 15 ]; then ok "quant corpus: $n cases"; else fail "quant corpus: at least 15 cases" "only $n"; fi

# ------------------------------------------ Hugging Face cache snapshots
# models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/HASH, as the hub
# client leaves a download: shards by SHA-256, config.json by git SHA-1.
snapshot() { # SRC REPO_DIR: a cache snapshot of SRC's files
	local src=$1 repo=$2 f h
	mkdir -p "$repo/blobs" "$repo/snapshots/0123abcd" "$repo/refs"
	echo 0123abcd >"$repo/refs/main"
	for f in "$src"/*.safetensors "$src"/config.json "$src"/*.index.json; do
		[ -e "$f" ] || continue
		case "$f" in
		*.safetensors) h=$(sha256sum "$f" | cut -c1-64) ;;
		*) h=$(git hash-object "$f" 2>/dev/null || sha1sum "$f" | cut -c1-40) ;;
		esac
		cp "$f" "$repo/blobs/$h"
		ln -s "../../blobs/$h" "$repo/snapshots/0123abcd/$(basename "$f")"
	done
}
HF="$T/hub/models--deepseek-ai--DeepSeek-V3-tiny"
snapshot "$T/ds.fp8" "$HF"
S="$HF/snapshots/0123abcd"
vcase "HF cache snapshot: shards checked against their blob names, no SHA256SUMS needed" 0 \
	"weights.integrity  pass" "$S"
contains "… and the table says so" "Hugging Face cache deepseek-ai/DeepSeek-V3-tiny, revision 0123abcd" "$OUT"
b=$(readlink "$S/model-00002-of-00002.safetensors")
printf 'x' | dd of="$S/$b" bs=1 seek=4000 conv=notrunc status=none
vcase "HF cache snapshot: a blob whose bytes changed is a SHA-256 mismatch" 1 \
	"SHA-256 mismatch: file has" "$S"
contains "… naming the blob" "its Hugging Face cache blob is named ${b##*/}" "$ERR"
rm -rf "$T/hub" && snapshot "$T/ds.fp8" "$HF"
cp "$T/ds.fp8/model-00001-of-00002.safetensors" "$T/outside.safetensors"
ln -sf "$T/outside.safetensors" "$S/model-00001-of-00002.safetensors"
vcase "HF cache snapshot: a link that leaves the repository is refused" 1 \
	"model-00001-of-00002.safetensors: symlink to '$T/outside.safetensors' leaves the snapshot's repository" "$S"
rm -rf "$T/hub" && snapshot "$T/ds.fp8" "$HF"
ln -sf "../../../../outside.safetensors" "$S/model-00001-of-00002.safetensors"
vcase "HF cache snapshot: a relative link climbing out is refused too" 1 "refused, not read" "$S"

# --checksums FILE, and no checksums at all
cp -r "$T/llama.int4" "$T/nosums" && mv "$T/nosums/SHA256SUMS" "$T/sums.txt"
vcase "no SHA256SUMS: integrity warns (exit 0)" 0 \
	"weights.integrity  warn (checksums not compared: no SHA256SUMS, no --checksums FILE, and not a Hugging Face cache snapshot" "$T/nosums"
run "$ENGINE" verify "$T/nosums" --events
check "… and the check event carries the reason" grep -q '"item":"weights.integrity".*"status":"warn".*no --checksums FILE' "$OUT"
vcase "--checksums FILE in sha256sum format" 0 "weights.integrity  pass" "$T/nosums" --checksums "$T/sums.txt"
sed -i '1s/^./0/; 1s/^0/f/' "$T/sums.txt"
vcase "--checksums FILE that disagrees" 1 "SHA-256 mismatch" "$T/nosums" --checksums "$T/sums.txt"
