#!/usr/bin/env bash
# bench/validate_unchunked.sh - validate's chunked float64 reference
# (--mem, issue #34) against the unchunked one it replaced, the binary
# built from the commit before the chunk (OLD, default 55cf4f3^: the whole
# matrix, the [T][vocab] logits in memory).  On small generated models of
# several families and storages, this tree's engine makes the run and its
# dumps; both validates read the same files, in both modes:
#   bit for bit: layer figures, logits max abs/rel, top-1, routing flips;
#   within 1e-12: KL and perplexity (the chunk computes KL as two sums of
#   small terms, more accurate than the old two-pass form: they differ by
#   ~1e-15, which is the old form's rounding).
# Prints one line a case and exits 1 if any differs.  Builds OLD from
# `git archive` under /tmp (no worktree, nothing in this tree changes);
# about a minute of build on 2 cores.  The suite's form, with no second
# binary, is tests/sh/test_validate_chunk.sh (--mem 4K against --mem 1G).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OLD=${OLD:-55cf4f3^}
N=$PWD/$BUILD/day0-engine
W=$(mktemp -d /tmp/day0-unchunked.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
git archive "$OLD" | tar -x -C "$W" --one-top-level=old
make -s -C "$W/old" BUILD=b -j"$(nproc)" b/day0-engine >"$W/build.log" 2>&1 ||
	{ tail -20 "$W/build.log"; exit 2; }
O=$W/old/b/day0-engine
TOK=1,42,7,31,5,99,11,23
bad=0
cd "$W"
for spec in "llama:--arch llama --layers 2 --dtype bf16" "mixtral:--arch mixtral --layers 2" \
	"deepseek_v3-fp8:--arch deepseek_v3 --layers 2 --quant fp8 --block 16" \
	"qwen3-int4:--arch qwen3 --layers 2 --quant int4" \
	"qwen2-bias:--arch qwen2 --layers 2 --attention-bias --dtype bf16" \
	"qwen3_moe:--arch qwen3_moe --layers 2" \
	"vocab-40000:--arch llama --layers 1 --hidden 256 --heads 2 --ffn 512 --vocab 40000 --dtype bf16"; do
	n=${spec%%:*}
	# shellcheck disable=SC2086
	"$N" gen-model ${spec#*:} "$n" >/dev/null
	"$N" run "$n" --tp 1 --tokens "$TOK" --dump-logits "$n.st" --dump-layers "$n.l" >/dev/null
	for mode in --local "--levels layer,e2e"; do
		# shellcheck disable=SC2086
		"$O" validate "$n" $mode --tokens "$TOK" --layers-dir "$n.l" --logits "$n.st" --json >old.json || true
		# shellcheck disable=SC2086
		"$N" validate "$n" $mode --tokens "$TOK" --layers-dir "$n.l" --logits "$n.st" --json --mem 4K >new.json || true
		if jq -n --slurpfile a old.json --slurpfile b new.json '
			def exact(x): [x.layer, x.e2e.max_abs, x.e2e.max_rel, x.e2e.top1_pct, x.routing_flips, x.flips, x.ok];
			def close(x): [x.e2e.kl_max, x.e2e.kl.mean, x.e2e.kl.max, x.e2e.ppl, x.e2e.ppl_ref] | map(. // 0);
			exact($a[0]) == exact($b[0]) and (($a[0].layer | length) > 0) and
			([close($a[0]), close($b[0])] | transpose | all((.[0] - .[1] | fabs) <= 1e-12 * ([1, (.[1] | fabs)] | max)))' |
			grep -qx true; then
			r="the same (bit for bit; KL, ppl within 1e-12)"
		else
			r="DIFFERENT"
			bad=1
		fi
		printf '%-16s %-12s --mem 4K against unchunked %s: %s; KL %s vs %s\n' "$n" \
			"$([ "$mode" = --local ] && echo --local || echo whole-model)" "$OLD" "$r" \
			"$(jq -r '.e2e.kl_max // .e2e.kl.mean' new.json)" "$(jq -r '.e2e.kl_max // .e2e.kl.mean' old.json)"
	done
	rm -rf "$n" "$n.l" "$n.st"
done
exit $bad
