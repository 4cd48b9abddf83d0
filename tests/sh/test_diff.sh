# day0 diff on real session files: a real day0-agent runs real engine steps
# (verify, comm -np 2, run -np 2 with dumps, validate, perf -np 2) into a
# store through tests/tools/day0_store's console; copies of that session
# get one regression each, ingested as the events a slower or broken
# release day would send.  Exit 0 without regression, 1 with one, 2 for
# unreadable input.
. "$(dirname "$0")/../lib.sh"
AGENT="$BUILD/day0-agent"
DS="$BUILD/tests/day0_store"
D0="$BUILD/day0"

"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
	--vocab 128 --shards 2 "$T/m" >/dev/null || fail "gen-model" "exit $?"
TOK=1,5,9,3
cat >"$T/script" <<EOF
{"cmd":"run","stage_id":"verify","step":"verify","args":["$T/m"]}
wait type=stage,stage_id=verify,state=end,reason=exit
{"cmd":"run","stage_id":"comm","step":"comm","np":2,"args":["--ops","allreduce","--min","1K","--max","64K","--iters","3","--warmup","1"]}
wait type=stage,stage_id=comm,state=end,reason=exit
{"cmd":"run","stage_id":"run","step":"run","np":2,"args":["$T/m","--tp","2","--tokens","$TOK","--dump-logits","$T/lg.st","--dump-layers","$T/ly"]}
wait type=stage,stage_id=run,state=end,reason=exit
{"cmd":"run","stage_id":"validate","step":"validate","args":["$T/m","--tokens","$TOK","--logits","$T/lg.st","--layers-dir","$T/ly","--levels","layer,e2e"]}
wait type=stage,stage_id=validate,state=end,reason=exit
{"cmd":"run","stage_id":"perf","step":"perf","np":2,"args":["$T/m","--tp","2","--prompt-tokens","8","--gen-tokens","2"]}
wait type=stage,stage_id=perf,state=end,reason=exit
{"cmd":"bye"}
EOF
A="$T/a.db"
expect_rc 0 "a real session: agent + engine steps ingested" "$DS" console "$A" "$T/script" -- \
	"$AGENT" --node n1 --spool "$T/sp" --sample-hz 20 --heartbeat 0 --cards 2 --card-mem 1G --no-fsync
q() { sqlite3 "$A" "$1"; }
for item in numerics.e2e perf.baseline weights.integrity; do
	s=$(q "SELECT status FROM checks WHERE item = '$item'")
	[ "$s" = pass ] && ok "the session's $item passed" || fail "$item passed" "status '$s'"
done

# A copy of A with extra events from n1 after its last one (next seq, later ts).
variant() { # name, event bodies (fields after the envelope)...
	local db="$T/$1.db" seq ts body
	shift
	cp "$A" "$db"
	seq=$(sqlite3 "$db" "SELECT next_seq FROM nodes WHERE node = 'n1'")
	ts=$(sqlite3 "$db" "SELECT max(ts) FROM events")
	for body in "$@"; do
		ts=$((ts + 1000))
		printf '{"v":1,"seq":%d,"ts":%d,"node":"n1",%s}\n' "$seq" "$ts" "$body"
		seq=$((seq + 1))
	done | "$DS" ingest "$db" >/dev/null 2>"$T/ing.err" || fail "ingest into $db" "$(cat "$T/ing.err")"
}
perf=$(q "SELECT printf('%.17g %.17g %.17g', ttft_ms, tpot_ms, tokens_per_s) FROM perf")
read -r ttft tpot tps <<<"$perf"
slow() { python3 -c "print(repr($1 * $2))"; }
variant slow "\"type\":\"perf\",\"ttft_ms\":$(slow "$ttft" 2),\"tpot_ms\":$tpot,\"tokens_per_s\":$(slow "$tps" 0.5),\"prompt_tokens\":8,\"gen_tokens\":2,\"rank\":0,\"stage_id\":\"perf\""
variant fails '"type":"check","item":"numerics.e2e","status":"fail","detail":"max rel 0.5","value":0.5,"threshold":1e-05,"rank":0,"stage_id":"validate"'
peak=$(q "SELECT max(value) FROM samples WHERE node = 'n1' AND card = 0 AND metric IN ('mem.used','mem.peak')")
variant mem "\"type\":\"sample\",\"card\":0,\"metric\":\"mem.used\",\"value\":$(slow "$peak" 1.5)"
bw=$(q "SELECT printf('%.17g', busbw) FROM comm WHERE op = 'allreduce' AND bytes = 65536 AND \"group\" = 'world'")
# One more rank's row at 64 KiB with no bandwidth: the mean halves.
variant bw "\"type\":\"comm\",\"op\":\"allreduce\",\"bytes\":65536,\"ranks\":2,\"time_us\":1e9,\"algbw\":0,\"busbw\":0,\"wrong\":0,\"group\":\"world\",\"rank\":1,\"stage_id\":\"comm\""
mr=$(q "SELECT printf('%.17g', max_rel) FROM numerics WHERE level = 'layer' AND name = 'layer.1'")
variant num "\"type\":\"numerics\",\"level\":\"layer\",\"name\":\"layer.1\",\"max_abs\":1,\"max_rel\":$(slow "$mr" 10),\"rank\":0,\"stage_id\":\"validate\""
variant fast "\"type\":\"perf\",\"ttft_ms\":$(slow "$ttft" 0.5),\"tpot_ms\":$(slow "$tpot" 0.5),\"tokens_per_s\":$(slow "$tps" 2),\"prompt_tokens\":8,\"gen_tokens\":2,\"rank\":0,\"stage_id\":\"perf\""

# ---- no regression ------------------------------------------------------------
cp "$A" "$T/same.db"
expect_rc 0 "a session against itself: exit 0" "$D0" diff "$A" "$T/same.db"
check "… no REGRESSION" bash -c "! grep -q REGRESSION '$OUT'"
contains "… says 0 regressions" "0 regressions" "$OUT"
contains "… lists the perf figures" "ttft_ms" "$OUT"
contains "… lists busbw per size" "allreduce world 65536" "$OUT"
expect_rc 0 "faster perf is no regression" "$D0" diff "$A" "$T/fast.db"
contains "… the change is shown" "-50.0%" "$OUT"

# ---- perf ------------------------------------------------------------------------
expect_rc 1 "2x ttft, half the tokens/s: exit 1" "$D0" diff "$A" "$T/slow.db"
check "… ttft flagged" grep -q 'perf n1 *ttft_ms .*+100.0%  REGRESSION' "$OUT"
check "… tokens_per_s flagged" grep -q 'perf n1 *tokens_per_s .*-50.0%  REGRESSION' "$OUT"
check "… tpot unchanged, not flagged" bash -c "grep 'tpot_ms' '$OUT' | grep -qv REGRESSION"
contains "… counted" "2 regressions" "$OUT"
check "… only perf is flagged" bash -c "[ \$(grep -c REGRESSION '$OUT') -eq 2 ]"
expect_rc 0 "… within --threshold-perf 1.5 it passes" "$D0" diff "$A" "$T/slow.db" --threshold-perf 1.5
expect_rc 0 "B -> A (got faster) is no regression" "$D0" diff "$T/slow.db" "$A"
expect_rc 1 "diff --json" "$D0" diff "$A" "$T/slow.db" --json
python3 - "$OUT" >"$T/py.out" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = [r["metric"] for r in d["perf"] if r["regression"]]
ok = d["regressions"] == 2 and sorted(bad) == ["tokens_per_s", "ttft_ms"] and d["thresholds"]["perf"] == 0.05
ok = ok and all(abs(r["change"] - 1.0) < 1e-9 for r in d["perf"] if r["metric"] == "ttft_ms")
print("ok" if ok else d)
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] && ok "… parses, names the two perf regressions, change +1.0" || fail "diff --json" "$(head -c 800 "$T/py.out")"

# ---- checklist, memory, busbw, numerics ---------------------------------------
expect_rc 1 "a check that passed and now fails: exit 1" "$D0" diff "$A" "$T/fails.db"
check "… named with both statuses" grep -q 'numerics.e2e *pass -> fail  REGRESSION' "$OUT"
expect_rc 0 "… fail -> pass is no regression" "$D0" diff "$T/fails.db" "$A"
contains "… but is listed" "fail -> pass" "$OUT"
expect_rc 1 "peak memory 1.5x on card 0: exit 1" "$D0" diff "$A" "$T/mem.db"
check "… card 0 flagged" grep -q '^  n1 0 *peak .*+50.0%  REGRESSION' "$OUT"
check "… card 1 not" bash -c "grep '^  n1 1 *peak' '$OUT' | grep -qv REGRESSION"
expect_rc 0 "… within --threshold-mem 0.6" "$D0" diff "$A" "$T/mem.db" --threshold-mem 0.6
expect_rc 1 "busbw halved at 64 KiB: exit 1" "$D0" diff "$A" "$T/bw.db"
check "… that size flagged" grep -q 'allreduce world 65536 *busbw .*-50.0%  REGRESSION' "$OUT"
check "… only that size" bash -c "[ \$(grep -c REGRESSION '$OUT') -eq 1 ]"
expect_rc 1 "a layer's max_rel 10x: exit 1" "$D0" diff "$A" "$T/num.db"
check "… layer.1 flagged with its ratio" grep -q 'layer layer.1 *max_rel .*x10  REGRESSION' "$OUT"
expect_rc 0 "… within --threshold-numerics 20" "$D0" diff "$A" "$T/num.db" --threshold-numerics 20

# ---- bad input: exit 2 naming the file ----------------------------------------
expect_rc 2 "a missing file" "$D0" diff "$A" "$T/nope.db"
contains "… named" "$T/nope.db: No such file or directory" "$ERR"
head -c 3000 /dev/urandom >"$T/corrupt.db"
expect_rc 2 "a corrupt file" "$D0" diff "$T/corrupt.db" "$A"
contains "… named" "$T/corrupt.db" "$ERR"
expect_rc 2 "one file only" "$D0" diff "$A"
expect_rc 2 "a bad threshold" "$D0" diff "$A" "$A" --threshold-perf -1
contains "… names the option" "--threshold-perf" "$ERR"
expect_rc 2 "an unknown option" "$D0" diff "$A" "$A" --frob
expect_rc 0 "diff --help" "$D0" diff --help
contains "… usage" "usage: day0 diff A.db B.db" "$OUT"
