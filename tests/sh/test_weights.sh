# gen-model -> verify -> convert -> merge, for every architecture.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"

gen() { # name arch extra-args...
	local name=$1 arch=$2; shift 2
	"$ENGINE" gen-model --arch "$arch" --layers 4 --hidden 64 --heads 4 \
		--kv-heads 2 --ffn 96 --vocab 128 --shards 3 "$@" "$T/$name" >/dev/null
}

gen llama llama --rope-scaling llama3:8
gen qwen3 qwen3 --head-dim 32 --tie
gen mixtral mixtral --experts 4
gen qwen2_moe qwen2_moe --experts 4 --moe-ffn 32 --shared-ffn 64 --sparse-step 2 --mlp-only-layers 3

for arch in llama qwen3 mixtral qwen2_moe; do
	expect_rc 0 "$arch: verify of a generated checkpoint passes" "$ENGINE" verify "$T/$arch"
	contains "$arch: verify reports weights.metadata pass" "weights.metadata   pass" "$OUT"
	check "$arch: sha256sum agrees with SHA256SUMS" bash -c "cd '$T/$arch' && sha256sum -c --quiet SHA256SUMS"
	for dims in "--tp 2" "--tp 4 --pp 2"; do
		tag=$(echo "$dims" | tr -d ' -')
		expect_rc 0 "$arch $dims: convert f32" "$ENGINE" convert "$T/$arch" "$T/$arch.$tag" --dtype f32 $dims
		expect_rc 0 "$arch $dims: merge" "$ENGINE" merge "$T/$arch.$tag" "$T/$arch.$tag.m"
		check "$arch $dims: merged shards are bit-identical to the source" \
			bash -c "cd '$T/$arch.$tag.m' && sha256sum -c --quiet '$T/$arch/SHA256SUMS'"
		rm -rf "$T/$arch.$tag.m"
	done
done

# Deterministic for a seed, independent of the shard count; a new seed differs.
"$ENGINE" gen-model --arch mixtral --layers 4 --hidden 64 --heads 4 --kv-heads 2 \
	--ffn 96 --vocab 128 --experts 4 --shards 1 "$T/mix1" >/dev/null
"$ENGINE" gen-model --arch mixtral --layers 4 --hidden 64 --heads 4 --kv-heads 2 \
	--ffn 96 --vocab 128 --experts 4 --shards 1 --seed 9 "$T/mix9" >/dev/null
cat_dump() { for f in "$1"/*.safetensors; do "$TOOLS/st_dump" "$f"; done | sort; }
cat_dump "$T/mixtral" >"$T/d3"
cat_dump "$T/mix1" >"$T/d1"
cat_dump "$T/mix9" >"$T/d9"
check "gen-model: same seed, 1 vs 3 shards: identical tensors" cmp -s "$T/d1" "$T/d3"
check "gen-model: another seed gives other values" bash -c "! cmp -s '$T/d1' '$T/d9'"

# Expert parallelism and kv-head replication round-trip too.
expect_rc 0 "mixtral --tp 2 --ep 2: convert" "$ENGINE" convert "$T/mixtral" "$T/mx.ep" --dtype f32 --tp 2 --ep 2
expect_rc 0 "mixtral --tp 2 --ep 2: merge" "$ENGINE" merge "$T/mx.ep" "$T/mx.ep.m"
check "mixtral --tp 2 --ep 2: bit-identical" bash -c "cd '$T/mx.ep.m' && sha256sum -c --quiet '$T/mixtral/SHA256SUMS'"
"$TOOLS/st_dump" "$T/mx.ep/rank-00002-of-00004.safetensors" >"$T/r2"
check "ep rank 1 holds experts 2 and 3 only" bash -c "grep -q 'experts.2.w1' '$T/r2' && grep -q 'experts.3.w1' '$T/r2' && ! grep -q 'experts.0.w1' '$T/r2'"
check "a tp rank holds half of q_proj" grep -q 'model.layers.0.self_attn.q_proj.weight F32 \[32,64\]' "$T/r2"
"$TOOLS/st_dump" "$T/mixtral.tp4pp2/rank-00004-of-00008.safetensors" >"$T/r4"
check "pp stage 1 holds layers 2-3 and lm_head, not the embedding" \
	bash -c "grep -q 'model.layers.2.' '$T/r4' && grep -q '^lm_head.weight F32 \[32,64\]' '$T/r4' && ! grep -q 'layers.0.' '$T/r4' && ! grep -q embed_tokens '$T/r4'"
check "2 kv heads over tp 4: each rank holds one whole kv head" grep -q 'model.layers.2.self_attn.k_proj.weight F32 \[16,64\]' "$T/r4"
check "layout.json records split, parts and source checksums" bash -c "grep -q '\"split\": \"kv_heads\"' '$T/mixtral.tp4pp2/layout.json' && grep -q \"\$(cut -d' ' -f1 '$T/mixtral/SHA256SUMS' | sed -n 2p)\" '$T/mixtral.tp4pp2/layout.json'"

# Slice contents, cut independently of the engine: rank 6 = (pp 1, tp 2).
r6="$T/mixtral.tp4pp2/rank-00006-of-00008.safetensors"
slice_eq() { # tensor axis part parts
	local want got
	want=$("$TOOLS/st_dump" "$T/mixtral/$(grep -o "\"$1\": \"[^\"]*\"" "$T/mixtral/model.safetensors.index.json" | cut -d'"' -f4)" --slice "$1" "$2" "$3" "$4")
	got=$("$TOOLS/st_dump" "$r6" | grep "^$1 " | cut -d' ' -f4)
	[ -n "$want" ] && [ "$want" = "$got" ]
}
check "o_proj is split on its input axis (row-parallel)" slice_eq model.layers.2.self_attn.o_proj.weight 1 2 4
check "q_proj is split on its output axis (column-parallel)" slice_eq model.layers.2.self_attn.q_proj.weight 0 2 4
check "k_proj: tp rank 2 of 4 holds kv head 1 of 2" slice_eq model.layers.3.self_attn.k_proj.weight 0 1 2
check "w2 (down) is row-parallel" slice_eq model.layers.3.block_sparse_moe.experts.1.w2.weight 1 2 4
check "w3 (up) is column-parallel" slice_eq model.layers.3.block_sparse_moe.experts.1.w3.weight 0 2 4
check "lm_head is vocab-parallel" slice_eq lm_head.weight 0 2 4
check "the router is replicated" slice_eq model.layers.2.block_sparse_moe.gate.weight 0 0 1

# bf16: round to nearest even, norms kept f32.
expect_rc 0 "convert to bf16" "$ENGINE" convert "$T/qwen3" "$T/q.bf16" --dtype bf16 --tp 2
expect_rc 0 "merge the bf16 conversion" "$ENGINE" merge "$T/q.bf16" "$T/q.bf16.m"
for f in "$T"/qwen3/*.safetensors; do "$TOOLS/st_dump" "$f" --as bf16 --skip-norms; done | sort >"$T/want"
for f in "$T"/q.bf16.m/*.safetensors; do "$TOOLS/st_dump" "$f"; done | sort >"$T/got"
check "bf16 conversion equals nearest-even rounding of every f32 tensor" cmp -s "$T/want" "$T/got"
check "norms stay F32 in a bf16 conversion" grep -q 'model.layers.0.self_attn.q_norm.weight F32' "$T/got"
check "projections are BF16" grep -q 'model.layers.0.mlp.up_proj.weight BF16' "$T/got"
expect_rc 0 "convert f16 runs" "$ENGINE" convert "$T/llama" "$T/l.f16" --dtype f16 --tp 2 --pp 2

# Refusals say which dimension and why, and leave nothing behind.
expect_rc 2 "convert --tp 3 is refused" "$ENGINE" convert "$T/llama" "$T/bad" --dtype f32 --tp 3
contains "refusal names num_attention_heads" "num_attention_heads 4 is not divisible by tp 3" "$ERR"
check "a refused convert leaves no output directory" bash -c "! ls -d '$T'/bad* 2>/dev/null"
expect_rc 2 "convert --pp 5 of 4 layers is refused" "$ENGINE" convert "$T/llama" "$T/bad" --dtype f32 --tp 1 --pp 5
contains "refusal names the layer count" "pp 5 is more pipeline stages than the 4 layers" "$ERR"
# Uneven but balanced stages (DeepSeek-V3's 61 layers need them): 2+1+1.
expect_rc 0 "convert --tp 2 --pp 3 of 4 layers" "$ENGINE" convert "$T/llama" "$T/l.pp3" --dtype f32 --tp 2 --pp 3
check "stage 0 holds layers 0-1, stage 2 layer 3 and lm_head" bash -c "
	'$TOOLS/st_dump' '$T/l.pp3/rank-00000-of-00006.safetensors' | grep -q 'model.layers.1.mlp' &&
	'$TOOLS/st_dump' '$T/l.pp3/rank-00004-of-00006.safetensors' | grep -q 'model.layers.3.mlp' &&
	'$TOOLS/st_dump' '$T/l.pp3/rank-00004-of-00006.safetensors' | grep -q '^lm_head' &&
	! '$TOOLS/st_dump' '$T/l.pp3/rank-00002-of-00006.safetensors' | grep -q 'model.layers.[013]\.'"
expect_rc 0 "merge of the uneven pipeline" "$ENGINE" merge "$T/l.pp3" "$T/l.pp3.m"
check "uneven pipeline round-trips exactly" bash -c "cd '$T/l.pp3.m' && sha256sum -c --quiet '$T/llama/SHA256SUMS'"
expect_rc 2 "convert --ep 3 is refused" "$ENGINE" convert "$T/mixtral" "$T/bad" --dtype f32 --tp 1 --ep 3
contains "refusal names the expert count" "expert count 4 is not divisible by ep 3" "$ERR"
expect_rc 2 "convert --ep 2 of a dense model is refused" "$ENGINE" convert "$T/llama" "$T/bad" --dtype f32 --tp 1 --ep 2
expect_rc 2 "convert into a non-empty directory needs --force" "$ENGINE" convert "$T/llama" "$T/llama" --dtype f32 --tp 1

# One flipped byte: verify fails and names the shard; convert refuses too.
cp -r "$T/mixtral" "$T/flip"
shard="$T/flip/model-00002-of-00003.safetensors"
size=$(stat -c %s "$shard")
printf '\x5a' | dd of="$shard" bs=1 seek=$((size - 100)) conv=notrunc status=none
expect_rc 1 "verify: one flipped byte fails" "$ENGINE" verify "$T/flip"
contains "the failure names the corrupted shard" "model-00002-of-00003.safetensors: SHA-256 mismatch" "$ERR"
check "only that shard is reported" bash -c "[ \$(grep -c 'SHA-256 mismatch' '$ERR') = 1 ]"
expect_rc 1 "convert --verify-source refuses a corrupted source" "$ENGINE" convert "$T/flip" "$T/flip.c" --dtype bf16 --tp 2 --verify-source
contains "convert names the corrupted shard" "model-00002-of-00003.safetensors: SHA-256 mismatch" "$ERR"
check "a failed convert leaves no output directory" bash -c "! ls -d '$T'/flip.c* 2>/dev/null"

# Source checksums in layout.json: from SHA256SUMS by default (verify has
# checked them), computed while reading when a shard is not listed.
sum2=$(grep 'model-00002-of-00003' "$T/mixtral/SHA256SUMS" | cut -d' ' -f1)
check "layout.json takes source checksums from SHA256SUMS" \
	bash -c "grep -A2 '\"file\": \"model-00002-of-00003.safetensors\"' '$T/mixtral.tp2/layout.json' | grep -q '\"sha256_from\": \"SHA256SUMS\"'"
cp -r "$T/mixtral" "$T/nosums" && rm "$T/nosums/SHA256SUMS"
expect_rc 0 "convert without SHA256SUMS" "$ENGINE" convert "$T/nosums" "$T/nosums.c" --dtype bf16 --tp 2
check "then it computes each source checksum, equal to sha256sum's" \
	bash -c "grep -A2 '\"file\": \"model-00002-of-00003.safetensors\"' '$T/nosums.c/layout.json' | grep -q '\"sha256\": \"$sum2\"' && grep -q '\"sha256_from\": \"computed\"' '$T/nosums.c/layout.json'"
expect_rc 0 "convert --verify-source of an intact checkpoint" "$ENGINE" convert "$T/mixtral" "$T/vs.c" --dtype bf16 --tp 2 --verify-source
check "--verify-source records computed checksums equal to SHA256SUMS" \
	bash -c "grep -q '\"sha256\": \"$sum2\"' '$T/vs.c/layout.json' && ! grep -q '\"sha256_from\": \"SHA256SUMS\"' '$T/vs.c/layout.json'"

# --events and --json
expect_rc 0 "verify --events" "$ENGINE" verify "$T/mixtral" --events --threads 2
check "events are JSON lines with a gapless envelope and both checks pass" \
	"$TOOLS/jsonl_check" "$OUT" "type=stage,stage=verify,state=start" \
	"type=check,item=weights.integrity,status=pass" \
	"type=check,item=weights.metadata,status=pass" "type=stage,state=end,rc=0"
expect_rc 1 "verify --events on a corrupted checkpoint" "$ENGINE" verify "$T/flip" --events
check "the events report weights.integrity fail" "$TOOLS/jsonl_check" "$OUT" \
	"type=check,item=weights.integrity,status=fail" "type=stage,state=end,rc=1"
expect_rc 0 "convert --events" "$ENGINE" convert "$T/llama" "$T/l.ev" --dtype bf16 --tp 2 --events
check "convert events are valid" "$TOOLS/jsonl_check" "$OUT" "type=stage,stage=convert,state=end,rc=0"
expect_rc 0 "gen-model --events" "$ENGINE" gen-model --arch llama --events "$T/g.ev"
check "gen-model events are valid" "$TOOLS/jsonl_check" "$OUT" "type=stage,stage=gen-model,state=end,rc=0"
expect_rc 1 "verify --json on a corrupted checkpoint" "$ENGINE" verify "$T/flip" --json
contains "--json names the problem" '"check": "weights.integrity"' "$OUT"
contains "--json has the per-shard table" '"file": "model-00002-of-00003.safetensors"' "$OUT"

# Both ways of reading the shards (readpath.c: a mapping, or pread into
# a buffer; the default is whichever the probe measures faster here) hash
# the same bytes: the same verdicts, and --json says which one ran.
for m in map read; do
	expect_rc 0 "DAY0_READ=$m: verify --json of an intact checkpoint" \
		env DAY0_READ=$m "$ENGINE" verify "$T/mixtral" --json --threads 2
	want=map; [ "$m" = read ] && want=pread
	contains "DAY0_READ=$m: --json says \"read\": \"$want (DAY0_READ)\"" "\"read\": \"$want (DAY0_READ)\"" "$OUT"
	check "DAY0_READ=$m: every shard's sha256 = sha256sum's" bash -c \
		"cd '$T/mixtral' && for f in *.safetensors; do grep -q \"\$(sha256sum \$f | cut -d' ' -f1)\" '$OUT' || exit 1; done"
	expect_rc 1 "DAY0_READ=$m: one flipped byte fails" env DAY0_READ=$m "$ENGINE" verify "$T/flip" --threads 1
	contains "DAY0_READ=$m: ... naming the shard" "model-00002-of-00003.safetensors: SHA-256 mismatch" "$ERR"
done
expect_rc 0 "verify --json, the read path measured" env -u DAY0_READ "$ENGINE" verify "$T/mixtral" --json
check "--json says which path the probe picked, with both rates" \
	grep -Eq '"read": "(map|pread) \(mapped [0-9.]+ GB/s, pread [0-9.]+ GB/s\)"' "$OUT"
expect_rc 0 "DAY0_READ=mmap (no such value): verify still runs" env DAY0_READ=mmap "$ENGINE" verify "$T/mixtral"
contains "... and says what it expected" "DAY0_READ=mmap: expected map, read or auto" "$ERR"

# A single shard file is checked on its own (format rules only).
expect_rc 0 "verify of a single .safetensors file" "$ENGINE" verify "$T/llama/model-00001-of-00003.safetensors"
expect_rc 2 "verify of a missing path exits 2" "$ENGINE" verify "$T/nope"

# Many problems: the text output is capped per check, --json keeps them all.
"$ENGINE" gen-model --arch llama --layers 16 --hidden 64 --heads 4 --ffn 96 --vocab 128 "$T/wide" >/dev/null
sed -i 's/"intermediate_size": 96/"intermediate_size": 80/' "$T/wide/config.json"
(cd "$T/wide" && sed -i '/config.json/d' SHA256SUMS)
expect_rc 1 "verify: a config that disagrees with every MLP tensor fails" "$ENGINE" verify "$T/wide"
contains "the shape problem names tensor and both shapes" "tensor 'model.layers.0.mlp.gate_proj.weight': shape [96, 64], config.json implies [80, 64]" "$ERR"
check "text output stops after 40 problems per check" bash -c "[ \$(grep -c 'config.json implies' '$ERR') = 40 ]"
contains "and says how many more" "... and 8 more weights.metadata problems (see --json)" "$ERR"
expect_rc 1 "verify --json of the same" "$ENGINE" verify "$T/wide" --json
check "--json lists every mis-shaped tensor (3 per layer x 16 layers)" bash -c "[ \$(grep -c '\"expected\": \"\[80' '$OUT') = 32 ] && [ \$(grep -c '\"expected\": \"\[64, 80\]' '$OUT') = 16 ]"
