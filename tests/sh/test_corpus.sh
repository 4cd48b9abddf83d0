# Bad inputs for `day0-engine verify`: every file in tests/corpus/MANIFEST
# (exact exit code, message substring), then directory cases built here by
# mutating a small gen-model checkpoint with sed/dd/printf only.  Under
# BUILD=build-asan any sanitizer report fails the case.
. "$(dirname "$0")/../lib.sh"
export LC_ALL=C
CORPUS="$DAY0_ROOT/tests/corpus"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

sanitizer_report() { grep -qE 'AddressSanitizer|LeakSanitizer|runtime error' "$ERR"; }

# vcase NAME WANT_RC NEEDLE PATH [VERIFY ARGS...]
# Runs verify PATH; ok when the exit status is WANT_RC, NEEDLE is in stderr
# (stdout when WANT_RC is 0), every stderr line is a "day0-engine: " message,
# and no sanitizer spoke.  Extra conditions: NOT_IN (a string stderr must not
# hold).
NOT_IN=
vcase() {
	local name=$1 want=$2 needle=$3 path=$4; shift 4
	local where=$ERR not_in=$NOT_IN
	NOT_IN=
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
	elif [ -n "$not_in" ] && grep -qF -- "$not_in" "$ERR"; then
		fail "$name" "stderr should not mention '$not_in': $(head -c 600 "$ERR")"
	else
		ok "$name"
	fi
}

# ------------------------------------------------------------ file corpus

# The committed files are exactly what make.sh writes.
bash "$CORPUS/make.sh" "$T/regen" >/dev/null 2>&1
stale=
for f in "$T/regen"/*; do
	cmp -s "$f" "$CORPUS/$(basename "$f")" || stale="$stale $(basename "$f")"
done
for f in "$CORPUS"/*.safetensors; do
	[ -e "$T/regen/$(basename "$f")" ] || stale="$stale $(basename "$f")(extra)"
done
if [ -z "$stale" ]; then
	ok "corpus: committed files match tests/corpus/make.sh"
else
	fail "corpus: committed files match tests/corpus/make.sh" \
		"rerun bash tests/corpus/make.sh; differs:$stale"
fi

nbad=0
while IFS=$'\t' read -r file rc msg; do
	case "$file" in '' | '#'*) continue ;; esac
	[ "$rc" -ne 0 ] && nbad=$((nbad + 1))
	# A rejected file's message starts with its path.
	prefix="day0-engine: $CORPUS/$file: "
	vcase "corpus $file: exit $rc, '$msg'" "$rc" "$msg" "$CORPUS/$file"
	if [ "$rc" -ne 0 ] && ! grep -qF -- "$prefix$msg" "$ERR"; then
		fail "corpus $file: message names the file" \
			"expected '$prefix$msg' in: $(head -c 400 "$ERR")"
	fi
done <"$CORPUS/MANIFEST"
if [ "$nbad" -ge 30 ]; then
	ok "corpus: $nbad malformed files in MANIFEST"
else
	fail "corpus: at least 30 malformed files" "only $nbad"
fi

vcase "file: no such file: exit 2" 2 "$T/nope.safetensors: no such file" \
	"$T/nope.safetensors"
mkfifo "$T/fifo"
vcase "file: a FIFO is refused without waiting for a writer" 2 \
	"$T/fifo: not a regular file" "$T/fifo"

# -------------------------------------------------------- directory cases

S1=model-00001-of-00002.safetensors
S2=model-00002-of-00002.safetensors
IDX=model.safetensors.index.json

# A 2-shard llama: hidden 16, ffn 32, vocab 32, one layer, 12 tensors.
"$ENGINE" gen-model --arch llama --layers 1 --hidden 16 --heads 2 \
	--kv-heads 1 --ffn 32 --vocab 32 --shards 2 "$T/base" >/dev/null
"$ENGINE" gen-model --arch llama --layers 1 --hidden 16 --heads 2 \
	--kv-heads 1 --ffn 32 --vocab 32 --shards 1 "$T/single" >/dev/null
"$ENGINE" gen-model --arch mixtral --layers 1 --hidden 16 --heads 2 \
	--kv-heads 1 --ffn 16 --vocab 32 --experts 2 --top-k 1 --shards 2 \
	"$T/moe" >/dev/null

# fresh NAME [FROM]: a copy of a generated model to mutate; sets D.
fresh() {
	D="$T/$1"
	rm -rf "$D"
	cp -r "$T/${2:-base}" "$D"
}
# Rewrite SHA256SUMS for the files it lists that still exist, so a case
# shows only the problem it plants.
resum() {
	local names n
	names=$(sed 's/^.\{66\}//' "$D/SHA256SUMS")
	(cd "$D" && for n in $names; do [ -e "$n" ] && sha256sum "$n"; done) \
		>"$D/SHA256SUMS.new"
	mv "$D/SHA256SUMS.new" "$D/SHA256SUMS"
}
# patch FILE OLD NEW: overwrite the first OLD in FILE (binary-safe) with
# NEW, which must be as long.
patch() {
	local off
	[ "${#2}" -eq "${#3}" ] || { echo "patch: length differs" >&2; return 1; }
	off=$(grep -obaF -- "$2" "$1" | head -n1 | cut -d: -f1)
	[ -n "$off" ] || { echo "patch: '$2' not in $1" >&2; return 1; }
	printf '%s' "$3" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}
# flip FILE OFFSET: invert the low bit of one byte.
flip() {
	local b
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	printf "\\x$(printf %02x $((b ^ 1)))" |
		dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

vcase "dir: generated 2-shard checkpoint passes" 0 "weights.metadata   pass" "$T/base"
vcase "dir: generated single-file checkpoint passes" 0 "weights.integrity  pass" "$T/single"
vcase "dir: generated mixtral checkpoint passes" 0 "weights.metadata   pass" "$T/moe"

# Index and shards.
fresh missing-shard
rm "$D/$S2"
resum
vcase "dir: index names a missing shard" 1 \
	"$D/$S2: shard named by the index does not exist" "$D"

fresh index-extra-tensor
sed -i "s/\"weight_map\": {/&\n    \"model.extra.weight\": \"$S1\",/" "$D/$IDX"
resum
vcase "dir: index names a tensor its shard lacks" 1 \
	"$D/$IDX: tensor 'model.extra.weight': weight_map names $S1, which has no such tensor" "$D"

fresh index-wrong-shard
sed -i "s/\(\"lm_head.weight\": \"\)$S2/\1$S1/" "$D/$IDX"
resum
vcase "dir: index maps a tensor to the wrong shard" 1 \
	"$D/$S2: tensor 'lm_head.weight': weight_map says this tensor is in $S1" "$D"

fresh index-missing-entry
sed -i '/"model.layers.0.mlp.up_proj.weight"/d' "$D/$IDX"
resum
vcase "dir: shard tensor absent from the index" 1 \
	"$D/$S2: tensor 'model.layers.0.mlp.up_proj.weight': tensor is not in $IDX's weight_map" "$D"

fresh index-total-size
sed -i 's/\("total_size": \)[0-9]*/\11/' "$D/$IDX"
resum
vcase "dir: wrong metadata.total_size" 1 \
	"$D/$IDX: metadata.total_size is 1 but the shards hold 13504 tensor bytes" "$D"

fresh index-no-total-size
sed -i '/"total_size"/d' "$D/$IDX"
resum
vcase "dir: index without metadata.total_size" 1 \
	"$D/$IDX: missing integer metadata.total_size" "$D"

fresh index-not-json
printf '{"weight_map": {' >"$D/$IDX"
vcase "dir: index that is not JSON" 1 "$D/$IDX: invalid JSON" "$D"

fresh index-value-not-string
sed -i 's/\("lm_head.weight": \)"[^"]*"/\17/' "$D/$IDX"
vcase "dir: weight_map value that is not a string" 1 \
	"$D/$IDX: weight_map['lm_head.weight'] is not a string" "$D"

fresh no-weights
rm "$D/$IDX" "$D/$S1" "$D/$S2"
vcase "dir: no index and no model.safetensors" 1 \
	"$D: no $IDX and no model.safetensors" "$D"

fresh tensor-in-two-shards
patch "$D/$S2" '"model.layers.0.mlp.down_proj.weight"' \
	'"model.layers.0.mlp.gate_proj.weight"'
resum
vcase "dir: one tensor stored in two shards" 1 \
	"$D/$S2: tensor 'model.layers.0.mlp.gate_proj.weight': tensor also stored in $S1" "$D"

fresh bad-shard-header
cp "$CORPUS/overlap.safetensors" "$D/$S2"
resum
vcase "dir: a shard with a bad header is named with the tensor" 1 \
	"$D/$S2: tensor 'b': bytes 4..12 overlap tensor 'a'" "$D"

# Shard names that are paths: refused, and never opened.
cp "$T/single/model.safetensors" "$T/x" # a valid file to be tempted by
for bad in ../x /etc/x; do
	fresh "path-shard-$(echo "$bad" | tr -c 'a-z\n' _)"
	sed -i "s|\(\"lm_head.weight\": \"\)$S2|\1$bad|" "$D/$IDX"
	resum
	vcase "dir: index shard name '$bad' is refused" 1 \
		"$D/$IDX: tensor 'lm_head.weight': shard '$bad' is not a plain file name in the model directory (refused, not opened)" "$D"
	if ! command -v strace >/dev/null 2>&1; then
		ok "dir: index shard name '$bad' is never opened (skipped: no strace)"
		continue
	fi
	# Every file syscall (open, stat, access...) where strace knows the
	# class, else openat alone: /etc/x does not exist, so a careless engine
	# would only stat it.
	trace=%file
	strace -qq -e trace=%file -o /dev/null true 2>/dev/null || trace=openat
	strace -f -qq -e trace=$trace -o "$T/strace.log" "$ENGINE" verify "$D" \
		>/dev/null 2>&1
	if ! grep -q 'openat(' "$T/strace.log" 2>/dev/null; then
		ok "dir: index shard name '$bad' is never opened (skipped: strace cannot trace here)"
	elif grep -qF -- "$bad\"" "$T/strace.log"; then
		fail "dir: index shard name '$bad' is never opened (strace $trace)" \
			"$(grep -m2 -F -- "$bad\"" "$T/strace.log")"
	else
		ok "dir: index shard name '$bad' is never opened (strace $trace)"
	fi
done

# SHA256SUMS.
fresh flipped-byte
flip "$D/$S2" $(($(wc -c <"$D/$S2") - 3))
NOT_IN="$S1: SHA-256" vcase "dir: one flipped byte: checksum mismatch names that shard (only)" 1 \
	"$D/$S2: SHA-256 mismatch: file has " "$D"

fresh sums-garbage-line
echo "this is not a checksum line" >>"$D/SHA256SUMS"
vcase "dir: SHA256SUMS line that is not a checksum" 1 \
	"$D/SHA256SUMS: line $(wc -l <"$D/SHA256SUMS"): expected '<64 hex digits>  <file name>'" "$D"

fresh sums-short-hash
sed -i "s/^[0-9a-f]\([0-9a-f]*  $S1\)$/\1/" "$D/SHA256SUMS"
vcase "dir: SHA256SUMS line with 63 hex digits" 1 \
	"$D/SHA256SUMS: line 2: expected '<64 hex digits>  <file name>'" "$D"

fresh sums-path
printf '%064d  ../x\n' 0 >>"$D/SHA256SUMS"
vcase "dir: SHA256SUMS naming a path is refused" 1 \
	"$D/SHA256SUMS: line $(wc -l <"$D/SHA256SUMS"): '../x' is not a plain file name in the model directory" "$D"

fresh sums-twice
line=$(grep -F "  $S1" "$D/SHA256SUMS")
echo "$line" >>"$D/SHA256SUMS"
vcase "dir: SHA256SUMS naming a file twice" 1 \
	"$D/SHA256SUMS: line $(wc -l <"$D/SHA256SUMS"): '$S1' listed twice" "$D"

fresh sums-nul
printf 'abc\0def\n' >>"$D/SHA256SUMS"
vcase "dir: SHA256SUMS with a NUL byte" 1 \
	"$D/SHA256SUMS: contains NUL bytes, not a sha256sum file" "$D"

fresh sums-no-shard
sed -i "/  $S1\$/d" "$D/SHA256SUMS"
vcase "dir: SHA256SUMS without a shard's checksum" 1 \
	"$D/$S1: no checksum for this shard in $D/SHA256SUMS" "$D"

fresh sums-missing-file
printf '%064d  vocab.txt\n' 0 >>"$D/SHA256SUMS"
vcase "dir: SHA256SUMS lists a missing file" 1 \
	"$D/vocab.txt: listed in $D/SHA256SUMS but missing" "$D"

# config.json against the tensors.
fresh config-missing
rm "$D/config.json"
resum
vcase "dir: config.json missing" 1 "$D/config.json: missing" "$D"

fresh config-not-json
printf '{"model_type": "llama",\n' >"$D/config.json"
resum
vcase "dir: config.json that is not JSON" 1 "$D/config.json: invalid JSON" "$D"

fresh config-no-hidden
sed -i '/"hidden_size"/d' "$D/config.json"
resum
vcase "dir: config.json without hidden_size" 1 \
	"$D/config.json: missing required key 'hidden_size'" "$D"

fresh config-heads-kv
sed -i 's/\("num_key_value_heads": \)1/\13/' "$D/config.json"
resum
vcase "dir: config.json heads not divisible by kv heads" 1 \
	"$D/config.json: num_attention_heads 2 is not a multiple of num_key_value_heads 3" "$D"

fresh config-unknown-arch
sed -i 's/\("model_type": \)"llama"/\1"gpt9"/' "$D/config.json"
resum
vcase "dir: config.json with an unknown model_type" 1 \
	"$D/config.json: model_type 'gpt9' is not supported" "$D"

fresh wrong-shape
patch "$D/$S1" '"model.layers.0.mlp.gate_proj.weight":{"dtype":"F32","shape":[32,16]' \
	'"model.layers.0.mlp.gate_proj.weight":{"dtype":"F32","shape":[16,32]'
resum
vcase "dir: tensor shape differs from config.json" 1 \
	"$D/$S1: tensor 'model.layers.0.mlp.gate_proj.weight': shape [16, 32], config.json implies [32, 16]" "$D"

fresh renamed-tensor single
patch "$D/model.safetensors" '"model.norm.weight"' '"model.norm.weighT"'
resum
vcase "dir: renamed tensor: the expected one is missing" 1 \
	"$D/config.json: tensor 'model.norm.weight': expected by config.json (llama) but in no shard" "$D"
vcase "dir: renamed tensor: the new name is unexpected" 1 \
	"$D/model.safetensors: tensor 'model.norm.weighT': unexpected tensor: config.json (llama) implies no such tensor" "$D"

fresh config-more-layers
sed -i 's/\("num_hidden_layers": \)1/\12/' "$D/config.json"
resum
vcase "dir: config.json implies a layer the shards lack" 1 \
	"tensor 'model.layers.1.input_layernorm.weight': expected by config.json (llama) but in no shard" "$D"

fresh config-tied
sed -i 's/\("tie_word_embeddings": \)false/\1true/' "$D/config.json"
resum
vcase "dir: extra tensor config.json does not imply" 1 \
	"$D/$S2: tensor 'lm_head.weight': unexpected tensor: config.json (llama) implies no such tensor" "$D"

fresh moe-more-experts moe
sed -i 's/\("num_local_experts": \)2/\13/' "$D/config.json"
resum
vcase "dir: mixtral config.json with an expert the shards lack" 1 \
	"tensor 'model.layers.0.block_sparse_moe.experts.2.w1.weight': expected by config.json (mixtral) but in no shard" "$D"
