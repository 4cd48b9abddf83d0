#!/usr/bin/env bash
# The engine steps by hand, without the console (what `make demo` ran
# before `day0 demo`): the same pipeline, on a generated
# Mixture-of-Experts model on this machine:
#   inspect + plan a real config -> gen-model -> verify -> convert (bf16,
#   tp 2 x ep 2) -> convert (f32, tp 2 x pp 2) -> merge -> bit-exact check
#   -> run under mpirun (4 ranks) -> validate against float64 -> perf.
# `make demo` runs `day0 demo` now; this script stays as a walkthrough.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
DIR=${DAY0_DEMO_DIR:-/tmp/day0-demo}
rm -rf "$DIR"
mkdir -p "$DIR"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "0. What is Mixtral-8x7B made of, and how would it fit 8 nodes x 8 H200?"
"$E" inspect assets/configs/mixtral-8x7b.json | sed -n '1,12p'
"$E" plan assets/configs/mixtral-8x7b.json --inventory assets/inventories/h200-8x8.json \
	--ctx 32768 --concurrency 64 --top 3 | sed -n '1,9p'

step "1. Generate a Mixtral-structured checkpoint (8 layers, 8 experts, 4 shards)"
"$E" gen-model --arch mixtral --layers 8 --hidden 256 --heads 8 --kv-heads 2 \
	--ffn 512 --vocab 4096 --experts 8 --top-k 2 --shards 4 "$DIR/model"
ls -l "$DIR/model"

step "2. Verify: safetensors format, index, SHA-256 of every shard, tensors vs config.json"
"$E" verify "$DIR/model"

step "3. Corrupt one byte of a copy: verify must catch it and name the shard"
cp -r "$DIR/model" "$DIR/corrupt"
shard="$DIR/corrupt/model-00003-of-00004.safetensors"
printf '\x42' | dd of="$shard" bs=1 seek=$(( $(stat -c %s "$shard") / 2 )) conv=notrunc status=none
if "$E" verify "$DIR/corrupt" >/dev/null; then
	echo "demo: verify missed a flipped byte" >&2
	exit 1
else
	echo "(verify exited $? as it should)"
fi

step "4. Convert to bf16 for tp=2 x ep=2 (4 ranks; norms stay f32)"
"$E" convert "$DIR/model" "$DIR/tp2ep2" --dtype bf16 --tp 2 --ep 2
ls -l "$DIR/tp2ep2"

step "5. Convert to f32 for tp=2 x pp=2, merge back, compare bit for bit"
"$E" convert "$DIR/model" "$DIR/tp2pp2" --dtype f32 --tp 2 --pp 2
"$E" merge "$DIR/tp2pp2" "$DIR/merged"
(cd "$DIR/merged" && sha256sum -c "$DIR/model/SHA256SUMS")

step "6. The same verify as JSON-lines events (what the agent will forward)"
"$E" verify "$DIR/model" --events | grep '"type":"check"'

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --oversubscribe --bind-to none"
TOK=1,42,7,311,5,99,1000,23
step "7. Launch tp=2 x pp=2 from the f32 rank files (4 ranks = 4 cards), decode 8 tokens"
$MPI -np 4 "$E" run "$DIR/tp2pp2" --tp 2 --pp 2 --tokens $TOK --generate 8 \
	--dump-logits "$DIR/logits.safetensors" --dump-layers "$DIR/layers"

step "8. Validate: kernels, every layer and the logits against float64"
"$E" validate "$DIR/model" --tokens $TOK --logits "$DIR/logits.safetensors" \
	--layers-dir "$DIR/layers"

step "9. Performance baseline of the same layout"
$MPI -np 4 "$E" perf "$DIR/tp2pp2" --tp 2 --pp 2 --prompt-tokens 64 --gen-tokens 8

printf '\nDemo done. Everything is under %s\n' "$DIR"
