# day0 diff on real session files: a real day0-agent runs real engine steps
# (verify, comm -np 2, run -np 2 with dumps, validate, perf -np 2) into a
# store through tests/tools/day0_store's console; copies of that session
# get one regression each, ingested as the events a slower or broken
# release day would send.  Exit 0 without regression, 1 with one, 2 for
# unreadable input.
#
# Noise: perf and comm record their spread (perf's repeats, comm's
# fastest and slowest call).  The threshold checks run on a copy with the
# spreads taken out (a session recorded before they existed: threshold
# only); the noise checks on crafted perf events with a known spread; and
# two back-to-back release-day runs of the demo's size must give 0
# regressions, the load levels (service figures) compared too, with
# --baseline auto picking the first for the second.
. "$(dirname "$0")/../lib.sh"
# Two identical runs must compare equal: AddressSanitizer's quarantine
# (freed memory kept resident, a different amount each run) would make the
# sanitizer build's memory peaks differ by 10%+ (as test_soak says).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
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
# The spreads are recorded: perf's 3 repeats, comm's calls.
n=$(q "SELECT count(*) FROM events WHERE type = 'perf' AND json_extract(body, '$.repeat') = 3 AND json_extract(body, '$.tpot_ms_min') <= json_extract(body, '$.tpot_ms') AND json_extract(body, '$.tpot_ms') <= json_extract(body, '$.tpot_ms_max')")
[ "$n" = 1 ] && ok "perf records its repeats' min <= median <= max" || fail "perf spread" "$(q "SELECT body FROM events WHERE type = 'perf'")"
n=$(q "SELECT count(*) FROM events WHERE type = 'comm' AND json_extract(body, '$.busbw_min') > 0 AND json_extract(body, '$.busbw_min') <= json_extract(body, '$.busbw_max')")
[ "$n" -gt 0 ] && ok "comm records busbw_min <= busbw_max per size ($n rows)" || fail "comm spread" "$n rows"
cp "$A" "$T/real.db"
# The threshold checks below: A without the spreads.
sqlite3 "$A" "UPDATE events SET body = json_remove(body, '$.ttft_ms_min', '$.ttft_ms_max', '$.tpot_ms_min', '$.tpot_ms_max', '$.tokens_per_s_min', '$.tokens_per_s_max', '$.busbw_min', '$.busbw_max') WHERE type IN ('perf', 'comm')"

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
# A sustained rise (two samples at 1.5x); a one-sample spike is within
# the sampling's noise.
variant mem "\"type\":\"sample\",\"card\":0,\"metric\":\"mem.used\",\"value\":$(slow "$peak" 1.5)" \
	"\"type\":\"sample\",\"card\":0,\"metric\":\"mem.used\",\"value\":$(slow "$peak" 1.5)"
variant spike "\"type\":\"sample\",\"card\":0,\"metric\":\"mem.used\",\"value\":$(slow "$peak" 1.5)"
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
expect_rc 0 "a one-sample spike of 1.5x is within the sampling's noise" "$D0" diff "$A" "$T/spike.db"
check "… shown with its noise" grep -q '^  n1 0 *peak .*noise .*+50.0%$' "$OUT"
expect_rc 0 "busbw halved at 64 KiB: small messages are not gated by default" "$D0" diff "$A" "$T/bw.db"
check "… listed as not gated" grep -q 'allreduce world 65536 *busbw .*-50.0%  (small message: not gated)' "$OUT"
expect_rc 1 "… --gate-small-busbw: exit 1" "$D0" diff "$A" "$T/bw.db" --gate-small-busbw
check "… that size flagged" grep -q 'allreduce world 65536 *busbw .*-50.0%  REGRESSION' "$OUT"
check "… only that size" bash -c "[ \$(grep -c REGRESSION '$OUT') -eq 1 ]"
expect_rc 1 "… --small-busbw 1024 gates it too" "$D0" diff "$A" "$T/bw.db" --small-busbw 1024
expect_rc 1 "a layer's max_rel 10x: exit 1" "$D0" diff "$A" "$T/num.db"
check "… layer.1 flagged with its ratio" grep -q 'layer layer.1 *max_rel .*x10  REGRESSION' "$OUT"
expect_rc 0 "… within --threshold-numerics 20" "$D0" diff "$A" "$T/num.db" --threshold-numerics 20

# ---- noise: a change must exceed the recorded spread ---------------------------
# perf events with a known spread: +-1% (tight) or +-30% (noisy) around
# the figure.  A 20% TPOT regression is flagged against a tight spread, not
# against a noisy one.
pev() { # tpot, relative half-spread
	python3 - "$ttft" "$1" "$tps" "$2" <<'PY'
import json, sys
ttft, tpot, tps, h = (float(x) for x in sys.argv[1:])
print(json.dumps({"type": "perf", "ttft_ms": ttft, "tpot_ms": tpot, "tokens_per_s": tps,
    "ttft_ms_min": ttft * (1 - h), "ttft_ms_max": ttft * (1 + h),
    "tpot_ms_min": tpot * (1 - h), "tpot_ms_max": tpot * (1 + h),
    "tokens_per_s_min": tps * (1 - h), "tokens_per_s_max": tps * (1 + h), "repeat": 3,
    "prompt_tokens": 8, "gen_tokens": 2, "rank": 0, "stage_id": "perf"})[1:-1])
PY
}
variant tight "$(pev "$tpot" 0.01)"
variant tpot20 "$(pev "$(slow "$tpot" 1.2)" 0.01)"
variant tpot20noisy "$(pev "$(slow "$tpot" 1.2)" 0.3)"
expect_rc 1 "a 20% TPOT regression beyond a 1% spread: exit 1" "$D0" diff "$T/tight.db" "$T/tpot20.db"
check "… tpot flagged with its noise" grep -q 'perf n1 *tpot_ms .*noise .*+20.0%  REGRESSION' "$OUT"
check "… only tpot" bash -c "[ \$(grep -c REGRESSION '$OUT') -eq 1 ]"
expect_rc 0 "the same 20% within a 30% spread: exit 0" "$D0" diff "$T/tight.db" "$T/tpot20noisy.db"
check "… shown, not flagged" bash -c "grep 'perf n1 *tpot_ms' '$OUT' | grep -q '+20.0%' && ! grep -q REGRESSION '$OUT'"
expect_rc 1 "… --json names the noise" "$D0" diff "$T/tight.db" "$T/tpot20.db" --json
python3 - "$OUT" "$tpot" >"$T/py.out" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); t = float(sys.argv[2])
r = [r for r in d["perf"] if r["metric"] == "tpot_ms"][0]
ok = r["regression"] and abs(r["noise"] - (0.02 * t + 0.02 * 1.2 * t)) < 1e-9 * t and d["regressions"] == 1
print("ok" if ok else r); sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] && ok "… noise = the spreads of A and B added" || fail "noise in --json" "$(cat "$T/py.out")"
expect_rc 0 "a real session against itself, spreads and all: exit 0" "$D0" diff "$T/real.db" "$T/real.db"
contains "… 0 regressions" "0 regressions" "$OUT"
check "… the noise column shows" grep -q 'perf n1 *ttft_ms .*noise' "$OUT"

# ---- two identical back-to-back release-day runs --------------------------------
# The release day at the demo's size (test_verdict's model; two cards,
# -e ep=1, so that two ranks do not fight over this machine's cores),
# twice in a row into one session directory.  The second run's
# --baseline auto picks the first and diffs it at the end: 0 regressions,
# exit 0 (GO).  Service figures (the load step's levels) are compared.
# Another tenant of the machine can slow one run for real (that is a
# regression of the machine, which diff rightly reports): then a third run
# against the second must give 0, the first pair's lines noted.
export DAY0_SESSIONS="$T/sessions" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PB="$DAY0_ROOT/playbooks/release-day.json"
"$ENGINE" gen-model --arch qwen3_moe --layers 4 --hidden 128 --heads 4 --kv-heads 2 \
	--head-dim 32 --ffn 256 --moe-ffn 64 --experts 8 --top-k 2 --vocab 512 --shards 3 \
	--force "$T/qm" >/dev/null || fail "gen-model qwen3_moe" "exit $?"
cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "128MiB"}]}
JSON
mkdir -p "$DAY0_SESSIONS"
expect_rc 2 "run --baseline auto with no GO session yet: exit 2 before running" "$D0" run "$PB" \
	--inventory "$T/inv.json" --model "$T/qm" --headless -e soak_seconds=1 -e ep=1 --session "$DAY0_SESSIONS/r0.db" --baseline auto
contains "… says what it looked for" "no GO session of playbook 'release-day' and model family 'qwen3_moe'" "$ERR"
check "… and ran nothing" test ! -e "$DAY0_SESSIONS/r0.db"
expect_rc 2 "run --baseline with a missing file: exit 2 before running" "$D0" run "$PB" \
	--inventory "$T/inv.json" --model "$T/qm" --headless --session "$DAY0_SESSIONS/r0.db" --baseline "$T/nope.db"
contains "… names it" "--baseline: $T/nope.db: No such file or directory" "$ERR"
check "… and ran nothing" test ! -e "$DAY0_SESSIONS/r0.db"
rd() { # session, extra args...
	local sess=$1
	shift
	timeout $RUN_LIMIT "$D0" run "$PB" --inventory "$T/inv.json" --session "$sess" --headless \
		--model "$T/qm" -e soak_seconds=1 -e ep=1 "$@"
}
expect_rc 0 "release day, first run: GO" rd "$DAY0_SESSIONS/r1.db"
run rd "$DAY0_SESSIONS/r2.db" --baseline auto
R1="$DAY0_SESSIONS/r1.db" R2="$DAY0_SESSIONS/r2.db"
# Timing figures on a shared 2-core VM swing past their measured noise now
# and then even with the machine idle (seen: a reducescatter's busbw -41%,
# a c=8 TTFT +225%): up to three more runs, each against the one before,
# until a pair agrees.  The first pairs' regression lines are noted.
k=2
while [ "$RC" = 1 ] && grep -q "^day0 run: GO, but regressions" "$ERR" && [ "$k" -lt 5 ]; do
	echo "# note: r$((k - 1)) -> r$k regressed (a timing swing); r$((k + 1)) against r$k:"
	grep REGRESSION "$OUT" | sed 's/^/#   /'
	cp "$ERR" "$T/r$k.err"
	run rd "$DAY0_SESSIONS/r$((k + 1)).db" --baseline auto
	R1="$DAY0_SESSIONS/r$k.db" R2="$DAY0_SESSIONS/r$((k + 1)).db"
	k=$((k + 1))
done
[ "$RC" = 0 ] && ok "release day, second run with --baseline auto: GO, no regression" ||
	fail "second run with --baseline auto" "exit $RC: $(grep REGRESSION "$OUT" | head -c 1200)"
contains "… says which baseline it picked" "day0 run: baseline: $R1" "$ERR"
contains "… prints the diff" "B $R2" "$OUT"
contains "… 0 regressions" "0 regressions" "$OUT"
expect_rc 0 "diff of the two runs: exit 0" "$D0" diff "$R1" "$R2"
contains "… 0 regressions" "0 regressions" "$OUT"
grep REGRESSION "$OUT" >"$T/reg.txt"
[ -s "$T/reg.txt" ] && fail "… no REGRESSION line" "$(head -c 1500 "$T/reg.txt")" || ok "… no REGRESSION line"
check "… the load levels are compared per concurrency" grep -q 'load local c=8 *tpot_ms.p90 ' "$OUT"
check "… errors and stalls too" grep -q 'load local c=1 *stalls ' "$OUT"
check "… busbw >= 1 MiB is gated, smaller is not" bash -c "grep -q 'allreduce world 4194304 *busbw' '$OUT' && ! grep 'allreduce world 4194304' '$OUT' | grep -q 'not gated' && grep 'allreduce world 1024 ' '$OUT' | grep -q 'not gated'"
# What diff shows is what the session file holds: the load level's p50 TPOT.
expect_rc 0 "diff --json of the two runs" "$D0" diff "$R1" "$R2" --json
python3 - "$OUT" "$R1" "$R2" >"$T/py.out" 2>&1 <<'PY'
import json, sqlite3, sys
d = json.load(open(sys.argv[1]))
def lv(db, c):
    for (b,) in sqlite3.connect(db).execute("SELECT body FROM events WHERE type = 'perf' AND json_extract(body, '$.concurrency') = ?", (c,)):
        return json.loads(b)["level"]
bad = []
for c in (1, 8):
    a, b = lv(sys.argv[2], c), lv(sys.argv[3], c)
    r = [r for r in d["service"] if r["key"] == "load local c=%d" % c and r["metric"] == "tpot_ms.p50"][0]
    if abs(r["a"] - a["tpot_ms"]["p50"]) > 1e-9 or abs(r["b"] - b["tpot_ms"]["p50"]) > 1e-9:
        bad.append(r)
    s = [r for r in d["service"] if r["key"] == "load local c=%d" % c and r["metric"] == "stalls"][0]
    if s["a"] != a["stalls"] or s["b"] != b["stalls"]:
        bad.append(s)
if d["regressions"] != 0 or not any(r["key"] == "perf local" for r in d["perf"]) or any("load" in r["key"] for r in d["perf"]):
    bad.append("regressions %d / perf keys %s" % (d["regressions"], [r["key"] for r in d["perf"]]))
print("ok" if not bad else bad); sys.exit(0 if not bad else 1)
PY
[ $? -eq 0 ] && ok "… service figures as the session files hold them, perf apart" || fail "service in --json" "$(head -c 800 "$T/py.out")"

# A slower service: the second run's c=8 level with TPOT 1.5x (+ 2 ms, past
# the 1 ms service floor) and 2 errors, its spread that of the original
# level.
cp "$R2" "$T/svc.db"
python3 - "$T/svc.db" >"$T/svc.ev" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(body,) = db.execute("SELECT body FROM events WHERE type = 'perf' AND json_extract(body, '$.concurrency') = 8").fetchone()
(seq,) = db.execute("SELECT next_seq FROM nodes WHERE node = 'local'").fetchone()
(ts,) = db.execute("SELECT max(ts) FROM events").fetchone()
e = json.loads(body)
for k in ("v", "seq", "ts", "node", "src_seq"):
    e.pop(k, None)
lv = e["level"]
d = lv["tpot_ms"]["p90"] - lv["tpot_ms"]["p50"]
for p in ("p50", "p90", "p99"):
    # past the threshold, 2x the level's spread and the 1 ms floor
    lv["tpot_ms"][p] = lv["tpot_ms"][p] * 1.5 + 4 * d + 2.0
lv["errors"] = lv["errors"] + 2
out = {"v": 1, "seq": seq, "ts": ts + 1000, "node": "local"}
out.update(e)
print(json.dumps(out))
PY
"$DS" ingest "$T/svc.db" <"$T/svc.ev" >/dev/null 2>"$T/ing.err" || fail "ingest the slower level" "$(cat "$T/ing.err")"
expect_rc 1 "a slower service with errors: exit 1" "$D0" diff "$R2" "$T/svc.db"
check "… c=8 tpot p50 flagged" grep -q 'load local c=8 *tpot_ms.p50 .*REGRESSION' "$OUT"
check "… c=8 errors flagged" grep -q 'load local c=8 *errors .*REGRESSION' "$OUT"
check "… c=1 untouched" bash -c "! grep 'load local c=1' '$OUT' | grep -q REGRESSION"
expect_rc 0 "… B -> A (faster, fewer errors) is no regression" "$D0" diff "$T/svc.db" "$R2"

# Under the service floor: two sessions whose c=1 level differs only in
# TPOT, by 0.9 ms, with a tight spread (0.01 ms) so that the noise does not
# decide: a tiny model's TPOT is microseconds, and run to run its p50 moves
# by about half a millisecond.
for which in a b; do
	cp "$R2" "$T/svcf-$which.db"
	python3 - "$T/svcf-$which.db" "$which" >"$T/svcf-$which.ev" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(body,) = db.execute("SELECT body FROM events WHERE type = 'perf' AND json_extract(body, '$.concurrency') = 1").fetchone()
(seq,) = db.execute("SELECT next_seq FROM nodes WHERE node = 'local'").fetchone()
(ts,) = db.execute("SELECT max(ts) FROM events").fetchone()
e = json.loads(body)
for k in ("v", "seq", "ts", "node", "src_seq"):
    e.pop(k, None)
base = 0.05 + (0.9 if sys.argv[2] == "b" else 0)
e["level"]["tpot_ms"].update({"p50": base, "p90": base + 0.01, "p99": base + 0.02})
out = {"v": 1, "seq": seq, "ts": ts + 1000, "node": "local"}
out.update(e)
print(json.dumps(out))
PY
	"$DS" ingest "$T/svcf-$which.db" <"$T/svcf-$which.ev" >/dev/null 2>"$T/ing.err" || fail "ingest the c=1 level ($which)" "$(cat "$T/ing.err")"
done
expect_rc 0 "a c=1 TPOT 0.9 ms slower (0.05 -> 0.95 ms), under the 1 ms floor: no regression" "$D0" diff "$T/svcf-a.db" "$T/svcf-b.db"
check "… c=1 tpot p50 shown, not flagged" bash -c "grep 'load local c=1 *tpot_ms.p50' '$OUT' | grep -qv REGRESSION"
expect_rc 1 "… with --floor-service-ms 0.1 it is one" "$D0" diff "$T/svcf-a.db" "$T/svcf-b.db" --floor-service-ms 0.1
check "… c=1 tpot p50 flagged then" grep -q 'load local c=1 *tpot_ms.p50 .*REGRESSION' "$OUT"

# --baseline auto for diff and replay; what it passes over.
run "$D0" diff --baseline auto "$R2"
[ "$RC" -le 1 ] && ok "diff --baseline auto r2: picks the run before" || fail "diff --baseline auto r2" "exit $RC: $(cat "$ERR")"
contains "… says so" "day0 diff: baseline: $R1" "$ERR"
contains "… A is r1" "A $R1" "$OUT"
expect_rc 0 "replay --baseline auto --dump: picks the run before" "$D0" replay "$R2" --baseline auto --dump
contains "… says so" "day0 replay: baseline: $R1" "$ERR"
# Newer sessions that do not qualify: a NO-GO one, another model family.
later=$(( $(sqlite3 "$R2" "SELECT value FROM session WHERE key = 'started'") + 1000000000 ))
cp "$DAY0_SESSIONS/r1.db" "$DAY0_SESSIONS/nogo.db"
"$DS" session "$DAY0_SESSIONS/nogo.db" verdict '{"go":false,"failed":["numerics.e2e"],"exit":1}' >/dev/null
"$DS" session "$DAY0_SESSIONS/nogo.db" started "$later" >/dev/null
cp "$DAY0_SESSIONS/r1.db" "$DAY0_SESSIONS/llama.db"
"$DS" session "$DAY0_SESSIONS/llama.db" model_family '"llama"' >/dev/null
"$DS" session "$DAY0_SESSIONS/llama.db" started "$later" >/dev/null
cp "$DAY0_SESSIONS/r1.db" "$T/other.db"
"$DS" session "$T/other.db" name '"smoke"' >/dev/null
expect_rc 2 "… a playbook with no GO session: exit 2" "$D0" diff --baseline auto "$T/other.db"
contains "… names playbook and family" "no GO session of playbook 'smoke' and model family 'qwen3_moe'" "$ERR"
cp "$DAY0_SESSIONS/r1.db" "$T/third.db"
"$DS" session "$T/third.db" name '"release-day"' >/dev/null
run "$D0" diff --baseline auto "$T/third.db"
[ "$RC" -le 1 ] && ok "… the latest GO one of the same playbook and family, past a newer NO-GO and a newer llama: r2" || fail "diff --baseline auto third" "exit $RC: $(cat "$ERR")"
contains "… r2" "day0 diff: baseline: $R2" "$ERR"
expect_rc 2 "diff --baseline with two files" "$D0" diff --baseline auto "$A" "$A"

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
