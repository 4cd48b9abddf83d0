#!/usr/bin/env bash
# bench/tokenizer.sh - encode throughput of day0's C tokenizer against Hugging
# Face's own JavaScript one (@huggingface/tokenizers under Node), same run,
# same text, same tokenizer.json: for the released DeepSeek-V3, Qwen3,
# Llama-3.1 and Llama-2 tokenizers (npm packages, cached in
# ~/.cache/day0/npm).  The text is the test corpus (tests/tok/corpus:
# English, code, Chinese, Japanese, emoji, Arabic, whitespace, digits,
# invalid bytes) repeated to SIZE_KB (default 2048).  Each side encodes it
# ROUNDS times (default 3) with a fresh cache and keeps its best; the ratio
# is C MB/s over the oracle's.  Target: >= 2x.
# Prints ratios; exits non-zero only when a command fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
. tests/tok/fetch.sh
W=$(mktemp -d /tmp/day0-tok.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
SIZE_KB=${SIZE_KB:-2048}
ROUNDS=${ROUNDS:-3}
tok_real_fetch "$W/real" || exit 1
tok_oracle_install "$W/oracle" || exit 1
cat tests/tok/corpus/* >"$W/one"
: >"$W/text"
while [ "$(stat -c %s "$W/text")" -lt $((SIZE_KB * 1024)) ]; do cat "$W/one" >>"$W/text"; done
printf '%-12s %10s %12s %8s\n' tokenizer "C MB/s" "oracle MB/s" ratio
for name in $TOK_REAL_PKGS; do
	c=$("$BUILD/tests/tok_batch" "$W/real/$name" bench "$W/text" "$ROUNDS")
	o=$(node tests/tok/oracle.mjs "$W/oracle" "$W/real/$name" bench "$W/text" "$ROUNDS")
	awk -v n="$name" -v c="$c" -v o="$o" 'BEGIN {
		printf "%-12s %10.2f %12.2f %7.2fx%s\n", n, c, o, c / o, (c / o >= 2 ? "" : "  (below the 2x target)") }'
done
