# day0-engine soak under real mpirun: repeated forward passes, bit-identical
# logits, memory growth, a clean failure when the card budget is too small.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
# AddressSanitizer keeps freed memory in quarantine, which the soak rightly
# sees as resident-set growth: without it, the sanitizer build measures
# what the plain build does.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
TOK=1,5,9,3,7,11,2,60
mpi() { # NP ARGS...: day0-engine under mpirun
	local np=$1; shift
	timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}
"$ENGINE" gen-model --arch qwen3_moe --layers 2 --heads 4 --kv-heads 2 --hidden 64 --vocab 128 \
	--experts 4 --moe-ffn 32 --shards 2 "$T/m" >/dev/null
"$ENGINE" convert "$T/m" "$T/c" --dtype bf16 --tp 2 --ep 2 >/dev/null

# pass: 4 ranks, tp2 x ep2 from bf16 rank files, events on
expect_rc 0 "soak tp2 ep2 for 1.5 s passes" mpi 4 soak "$T/c" --tp 2 --ep 2 --tokens "$TOK" \
	--duration 1.5 --interval 0.5 --card-mem 64M --events
cp "$OUT" "$T/soak.jsonl"
# every rank numbers its own events: split the stream by rank (ranks 1-3
# only emit their own card's samples and, at the end, their collectives'
# totals as comm events with their rank) and check each
grep -vE '"card":[123],|"rank":[123][,}]' "$T/soak.jsonl" >"$T/rank0.jsonl"
check "rank 0's events are valid protocol lines" "$TOOLS/jsonl_check" "$T/rank0.jsonl" \
	type=check,item=stability.soak,status=pass type=stage,state=progress
for rk in 1 2 3; do
	grep -E "\"card\":$rk,|\"rank\":$rk[,}]" "$T/soak.jsonl" >"$T/rank$rk.jsonl"
	check "rank $rk's events are valid protocol lines" "$TOOLS/jsonl_check" "$T/rank$rk.jsonl" \
		type=sample,metric=rank.rss
done
# the collectives: rank 0's per --interval (interval_s), every rank's
# totals at the end (docs/protocol.md "comm")
check "rank 0 sends its collectives per interval" test "$(grep '"type":"comm"' "$T/rank0.jsonl" | grep -c '"interval_s"')" -ge 2
check "every rank sends its collectives' totals at the end" test "$(grep '"type":"comm"' "$T/soak.jsonl" | grep -v interval_s | grep -o '"rank":[0-3]' | sort -u | wc -l)" = 4
check "one stability.soak check, pass" test "$(grep -c '"item":"stability.soak","status":"pass"' "$T/soak.jsonl")" = 1
contains "the detail says the logits are bit-identical" "logits bit-identical (0 differ, max diff 0)" "$T/soak.jsonl"
contains "and the memory growth" "memory growth" "$T/soak.jsonl"
check "stage start, progress and end" bash -c "grep -q '\"stage\":\"soak\",\"state\":\"start\"' '$T/soak.jsonl' &&
	grep -q '\"stage\":\"soak\",\"state\":\"progress\"' '$T/soak.jsonl' &&
	grep -q '\"stage\":\"soak\",\"state\":\"end\",\"progress\":1.0,\"rc\":0' '$T/soak.jsonl'"
for card in 0 1 2 3; do
	check "card $card: alloc.used, mem.budget and rank.rss samples" bash -c \
		"grep -q '\"card\":$card,\"metric\":\"alloc.used\"' '$T/soak.jsonl' &&
		 grep -q '\"card\":$card,\"metric\":\"mem.budget\",\"value\":67108864' '$T/soak.jsonl' &&
		 grep -q '\"card\":$card,\"metric\":\"rank.rss\"' '$T/soak.jsonl'"
done
contains "throughput samples" '"metric":"soak.tokens_per_s"' "$T/soak.jsonl"

# --iterations bounds the count; --json; pp 2 (logits on another rank than 0)
expect_rc 0 "soak tp2 pp2 from the checkpoint, 12 iterations, --json" mpi 4 soak "$T/m" --tp 2 --pp 2 \
	--tokens "$TOK" --iterations 12 --duration 60 --json
contains "12 iterations" '"iterations": 12' "$OUT"
contains "nothing differs" '"mismatched": 0' "$OUT"
contains "pass" '"pass": true' "$OUT"
expect_rc 0 "human output" mpi 2 soak "$T/m" --tp 2 --tokens "$TOK" --iterations 5
contains "prints the check" "stability.soak  pass: 5 iterations" "$OUT"

# failure: the weights do not fit the card budget -> exit 1, stability.soak fail
# (the bf16 rank files hold ~69 KiB a card: weights stay bf16)
expect_rc 1 "--card-mem 40K: exit 1" mpi 4 soak "$T/c" --tp 2 --ep 2 --tokens "$TOK" --duration 5 \
	--card-mem 40K --events
contains "stability.soak fails" '"item":"stability.soak","status":"fail"' "$OUT"
contains "naming the budget" "card memory budget exceeded" "$OUT"
contains "the stage ends with rc 1" '"state":"end","progress":1.0,"rc":1' "$OUT"

# usage and input errors: exit 2
expect_rc 2 "no --tokens" mpi 1 soak "$T/m" --tp 1
contains "names --tokens" "--tokens" "$ERR"
expect_rc 0 "no --tp: one rank is tp 1" mpi 1 soak "$T/m" --tokens "$TOK" --iterations 1
contains "no --tp: tp 1" "tp 1 pp 1 ep 1" "$OUT"
expect_rc 2 "--max-growth -0.1" mpi 1 soak "$T/m" --tp 1 --tokens "$TOK" --max-growth -0.1
contains "names --max-growth" "--max-growth: expected a fraction >= 0" "$ERR"
expect_rc 2 "--duration 0" mpi 1 soak "$T/m" --tp 1 --tokens "$TOK" --duration 0
expect_rc 2 "--interval x" mpi 1 soak "$T/m" --tp 1 --tokens "$TOK" --interval x
expect_rc 2 "a token outside the vocabulary" mpi 1 soak "$T/m" --tp 1 --tokens 1,500
expect_rc 2 "--tp 2 under -np 4: refused" mpi 4 soak "$T/m" --tp 2 --tokens "$TOK"
expect_rc 2 "a missing model" mpi 1 soak "$T/nope" --tp 1 --tokens "$TOK"
expect_rc 0 "--help" "$ENGINE" soak --help
contains "--help prints the usage" "usage: day0-engine soak" "$OUT"
