# day0 report and day0 ls on real session files: a real day0-agent runs
# real engine steps (facts, verify, plan, comm -np 2, run -np 2 with dumps,
# validate, perf -np 2) driven by tests/tools/day0_store's console, which
# ingests into a real store; manifest keys are set as the runner sets them.
# Every number the report must show is taken from the same file with
# sqlite3, never written into this test.
. "$(dirname "$0")/../lib.sh"
AGENT="$BUILD/day0-agent"
DS="$BUILD/tests/day0_store"
D0="$BUILD/day0"

# ---- one real session, built once ------------------------------------------
"$ENGINE" gen-model --arch llama --layers 3 --heads 4 --kv-heads 2 --hidden 64 \
	--vocab 128 --shards 2 "$T/m" >/dev/null || fail "gen-model" "exit $?"
printf '{"defaults":{"cards":2,"card_mem":"1GiB"},"nodes":[{"name":"n1","transport":"local"}]}' >"$T/inv.json"
TOK=1,5,9,3
cat >"$T/script" <<EOF
{"cmd":"hello"}
{"cmd":"facts","dir":"$T"}
wait type=check,item=facts
{"cmd":"run","stage_id":"verify","step":"verify","args":["$T/m"]}
wait type=stage,stage_id=verify,state=end,reason=exit
{"cmd":"run","stage_id":"plan","step":"plan","args":["$T/m","--inventory","$T/inv.json"]}
wait type=stage,stage_id=plan,state=end,reason=exit
{"cmd":"run","stage_id":"comm","step":"comm","np":2,"args":["--ops","allreduce,allgather","--max","64K","--iters","3","--warmup","1"]}
wait type=stage,stage_id=comm,state=end,reason=exit
{"cmd":"run","stage_id":"run","step":"run","np":2,"args":["$T/m","--tp","2","--tokens","$TOK","--generate","2","--card-mem","1073741824","--dump-logits","$T/lg.st","--dump-layers","$T/ly"]}
wait type=stage,stage_id=run,state=end,reason=exit
{"cmd":"run","stage_id":"validate","step":"validate","args":["$T/m","--tokens","$TOK","--logits","$T/lg.st","--layers-dir","$T/ly","--levels","layer,e2e"]}
wait type=stage,stage_id=validate,state=end,reason=exit
{"cmd":"run","stage_id":"perf","step":"perf","np":2,"args":["$T/m","--tp","2","--prompt-tokens","8","--gen-tokens","2"]}
wait type=stage,stage_id=perf,state=end,reason=exit
{"cmd":"bye"}
EOF
mkdir -p "$T/s"
A="$T/s/a.db"
expect_rc 0 "a real session: agent + engine steps ingested" "$DS" console "$A" "$T/script" -- \
	"$AGENT" --node n1 --spool "$T/sp" --sample-hz 20 --heartbeat 0 --cards 2 --card-mem 1G --no-fsync
# The same session before any manifest key: what a console that died leaves.
cp "$A" "$T/s/raw.db"
RAW="$T/s/raw.db"

q() { sqlite3 "$A" "$1"; }
next=$(q "SELECT next_seq FROM nodes WHERE node = 'n1'")
first=$(q "SELECT min(ts) FROM events")
last=$(q "SELECT max(ts) FROM events")
# A check whose detail is markup, and a checksum recorded as a check value,
# from the console's own node (as the runner writes its own events).
printf '%s\n' \
	"{\"v\":1,\"seq\":1,\"ts\":$((last + 1000)),\"node\":\"console\",\"type\":\"check\",\"item\":\"repro.manifest\",\"status\":\"warn\",\"detail\":\"<script>alert('x')</script> & \\\"q\\\"\",\"value\":0,\"threshold\":0}" \
	"{\"v\":1,\"seq\":2,\"ts\":$((last + 2000)),\"node\":\"console\",\"type\":\"check\",\"item\":\"weights.integrity\",\"status\":\"pass\",\"detail\":\"pinned\",\"value\":\"sha256:0f1e2d3c model-00001-of-00002.safetensors\",\"threshold\":0}" |
	"$DS" ingest "$A" >/dev/null 2>"$T/ing.err" || fail "ingest the console's events" "$(cat "$T/ing.err")"
# The operator's marker, a stage cancelled, a rerun asked and a stage
# skipped, as the runner writes them: the report's timeline.
printf '%s\n' \
	"{\"v\":1,\"seq\":3,\"ts\":$((last + 2100)),\"node\":\"console\",\"type\":\"marker\",\"note\":\"fans loud <here>\"}" \
	"{\"v\":1,\"seq\":4,\"ts\":$((last + 2200)),\"node\":\"console\",\"type\":\"log\",\"level\":\"warn\",\"msg\":\"stage soak cancelled by the operator\"}" \
	"{\"v\":1,\"seq\":5,\"ts\":$((last + 2300)),\"node\":\"console\",\"type\":\"log\",\"level\":\"info\",\"msg\":\"stage soak: rerun requested by the operator\"}" \
	"{\"v\":1,\"seq\":6,\"ts\":$((last + 2400)),\"node\":\"console\",\"type\":\"stage\",\"stage_id\":\"serve\",\"stage\":\"serve\",\"state\":\"end\",\"progress\":1.0,\"rc\":1,\"result\":\"skipped\",\"msg\":\"needs soak\",\"nodes\":[\"n1\"]}" \
	"{\"v\":1,\"seq\":7,\"ts\":$((last + 2500)),\"node\":\"console\",\"type\":\"log\",\"level\":\"info\",\"msg\":\"an info line the timeline leaves out\"}" |
	"$DS" ingest "$A" >/dev/null 2>"$T/ing.err" || fail "ingest the console's timeline events" "$(cat "$T/ing.err")"
set_key() { "$DS" session "$A" "$1" "$2" || fail "session key $1" "exit $?"; }
set_key name '"release-day-test"'
set_key model "\"$T/m\""
set_key versions '{"day0":"0.1.0","protocol":1}'
set_key command '["day0","run","playbooks/release-day.json","--model","/models/new"]'
set_key started "$((first - 60000000000))"
set_key finished "$((last + 3000))"
set_key verdict '{"go":false,"failed":["repro.manifest"],"skipped":["stability.soak"],"exit":1}'
set_key playbook_path '"playbooks/release-day.json"'
set_key playbook '{"name":"release-day-test","stages":[{"id":"verify","step":"verify"}]}'
set_key inventory "$(cat "$T/inv.json")"
set_key stages '[{"id":"comm","step":"comm","on":"all","nodes":["n1"],"commands":[["day0-engine","comm","--ops","allreduce,allgather"]],"mpirun":["mpirun","-np","2"]}]'
set_key checks '[{"item":"perf.baseline","required":true,"min":100,"max":null}]'
sum_before=$(md5sum <"$A")

# ---- markdown ---------------------------------------------------------------
expect_rc 0 "report (markdown by default)" "$D0" report "$A"
cp "$OUT" "$T/a.md"
contains "md: session name" "# day0 report: release-day-test" "$T/a.md"
contains "md: verdict" "verdict: **no-go** (failed: repro.manifest) (skipped: stability.soak)" "$T/a.md"
check "md: the verdict first, under the title" bash -c "sed -n 3p '$T/a.md' | grep -qx '## Verdict: NO-GO'"
contains "md: failed apart" "- failed: repro.manifest" "$T/a.md"
contains "md: skipped apart" "- skipped: stability.soak" "$T/a.md"
contains "md: timeline: the marker, escaped" '| marker | - | fans loud \<here\> |' "$T/a.md"
contains "md: timeline: the cancel" "| cancel | - | stage soak cancelled by the operator |" "$T/a.md"
contains "md: timeline: the rerun" "| rerun | - | stage soak: rerun requested by the operator |" "$T/a.md"
contains "md: timeline: the skipped stage" "| skipped | serve | needs soak |" "$T/a.md"
check "md: timeline: info lines left out" bash -c "! grep -q 'an info line the timeline' '$T/a.md'"
# Each item's status as the checks table has it (items with one status over
# every node and stage); items never checked say so.
bad=""
while IFS='|' read -r item statuses; do
	[ "$item" = repro.manifest ] && continue # the injected warn, below
	case "$statuses" in *,*) continue ;; esac
	grep -qF "| $item | $statuses |" "$T/a.md" || bad="$bad $item=$statuses"
done < <(q "SELECT item, group_concat(DISTINCT status) FROM checks GROUP BY item")
[ -z "$bad" ] && ok "md: every checked item with its status from the db" || fail "md: checklist statuses" "missing:$bad"
contains "md: the worst status over nodes (warn over pass)" "| repro.manifest | warn |" "$T/a.md"
contains "md: an item never checked: not run" "| ops.coverage | not run |" "$T/a.md"
n=$(q "SELECT count(DISTINCT item) FROM checks")
[ "$n" -ge 9 ] && ok "md: the session has $n checklist items to show" || fail "session items" "$n"

# Comm, perf, numerics and memory figures, formatted (%.6g) from the db.
python3 - "$T/a.md" "$A" >"$T/py.out" 2>&1 <<'PY'
import subprocess, sys
md = open(sys.argv[1]).read().splitlines()
db = sys.argv[2]
def q(sql):
    out = subprocess.run(["sqlite3", "-separator", "\t", db, sql], capture_output=True, text=True, check=True).stdout
    return [l.split("\t") for l in out.splitlines() if l]
g = lambda s: "%.6g" % float(s)
bad = []
def has(parts, what):
    if not any(all(p in l for p in parts) for l in md):
        bad.append(what + ": " + " ".join(parts))
n = 0
for op, b, busbw, algbw, wrong, grp in q("SELECT op, bytes, printf('%.17g', busbw), printf('%.17g', algbw), wrong, \"group\" FROM comm c JOIN events e USING (node, seq) WHERE json_extract(e.body, '$.calls') IS NULL"):
    has(["| %s | %s | %s |" % (grp, op, b), "| %s | %s | %s |" % (g(algbw), g(busbw), wrong)], "comm"); n += 1
for t, p, s, kern, core in q("SELECT printf('%.17g', ttft_ms), printf('%.17g', tpot_ms), printf('%.17g', tokens_per_s), json_extract(e.body, '$.kernel'), json_extract(e.body, '$.blas_core') FROM perf JOIN events e USING (node, seq)"):
    # the kernels the engine measured with, as its perf event recorded them
    if not kern or not core:
        bad.append("perf event without kernel/blas_core: %r %r" % (kern, core))
    has(["| %s | %s | %s |" % (g(t), g(p), g(s)), "| %s | %s |" % (kern, core)], "perf"); n += 1
for lv, name, mr in q("SELECT level, name, printf('%.17g', max_rel) FROM numerics"):
    has(["| %s | %s |" % (lv, name), "| %s |" % g(mr)], "numerics"); n += 1
for node, card, peak, budget in q("SELECT node, card, max(CASE WHEN metric != 'mem.budget' THEN value END), max(CASE WHEN metric = 'mem.budget' THEN value END) FROM samples WHERE card >= 0 AND metric IN ('mem.used','mem.peak','mem.budget') GROUP BY node, card"):
    has(["| %s | %s | %d |" % (node, card, int(float(peak))), "| %d |" % int(float(budget))], "memory"); n += 1
print("checked", n, "rows")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
[ $? -eq 0 ] && ok "md: comm, perf, numerics and peak memory rows match the db ($(tail -n 1 "$T/py.out"))" ||
	fail "md: figures from the db" "$(head -c 1500 "$T/py.out")"
n=$(q "SELECT count(*) FROM comm WHERE op IN ('allreduce','allgather') AND \"group\" = 'world'")
[ "$n" -ge 28 ] && ok "md: the comm sweep is in the db ($n rows)" || fail "comm rows" "$n"
contains "md: a layer's numerics" "| layer | layer.2 |" "$T/a.md"
contains "md: the plan's per-card budget" "Per-card budget of the chosen layout (tp" "$T/a.md"
w=$(q "SELECT json_extract(e.body, '$.plan.weights_bytes') FROM checks c JOIN events e USING (node, seq) WHERE c.item = 'memory.plan' LIMIT 1")
contains "md: ... with the weights bytes the check carried" "| weights | $w |" "$T/a.md"

contains "md: the plan check" "| n1 | plan | pass |" "$T/a.md"
contains "md: the plan stage" "Plan stage plan on n1 (rc 0)" "$T/a.md"
contains "md: versions" "versions: day0 0.1.0, protocol 1" "$T/a.md"
contains "md: the console's command line" '`day0 run playbooks/release-day.json --model /models/new`' "$T/a.md"
contains "md: the playbook path" "playbook_path: playbooks/release-day.json" "$T/a.md"
contains "md: the planned command lines (stages key)" '"allreduce,allgather"' "$T/a.md"
contains "md: the command lines the agent ran" "day0-engine perf $T/m --tp 2" "$T/a.md"
contains "md: the agent's versions" "| n1 | 0.1.0 | day0-engine 0.1.0 (protocol 1) | cpu | 2 |" "$T/a.md"
contains "md: the host facts (MPI version)" "$(q "SELECT json_extract(value, '\$.mpi_version') FROM session WHERE key = 'facts/n1'")" "$T/a.md"
contains "md: a checksum recorded as a check value" "sha256:0f1e2d3c model-00001-of-00002.safetensors" "$T/a.md"
contains "md: the inventory" '"card_mem": "1GiB"' "$T/a.md"
contains "md: check thresholds" '"min": 100' "$T/a.md"
contains "md: markup in a detail is escaped" "\\<script\\>alert('x')\\</script\\>" "$T/a.md"
check "md: no raw <script> from the store" bash -c "! grep -q '<script>' '$T/a.md'"

# ---- JSON ------------------------------------------------------------------
expect_rc 0 "report --format json" "$D0" report "$A" --format json
cp "$OUT" "$T/a.json"
check "json: the plan's budget rows, weights first" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
b = d["plan"]["budget"]
assert b[0]["part"] == "weights" and b[0]["bytes"] == int(sys.argv[2]), b
assert [r["part"] for r in b][-2:] == ["planned total", "usable (after margin)"], b
' "$T/a.json" "$w"
python3 - "$T/a.json" "$A" >"$T/py.out" 2>&1 <<'PY'
import json, subprocess, sys
d = json.load(open(sys.argv[1]))
db = sys.argv[2]
def q(sql):
    return subprocess.run(["sqlite3", db, sql], capture_output=True, text=True, check=True).stdout.strip()
bad = []
want = ["session", "checklist", "plan", "comm", "numerics", "perf", "memory", "manifest"]
bad += ["no section " + k for k in want if k not in d]
for k in ("ttft_ms", "tpot_ms", "tokens_per_s"):
    v = float(q("SELECT printf('%%.17g', %s) FROM perf" % k))
    if abs(d["perf"][0][k] - v) > 1e-12 * abs(v):
        bad.append("perf %s %r != db %r" % (k, d["perf"][0][k], v))
for k in ("kernel", "blas_core"):
    v = q("SELECT json_extract(e.body, '$.%s') FROM perf JOIN events e USING (node, seq)" % k)
    if not v or d["perf"][0].get(k) != v:
        bad.append("perf %s %r != db %r" % (k, d["perf"][0].get(k), v))
if len(d["comm"]) != int(q("SELECT count(*) FROM comm c JOIN events e USING (node, seq) WHERE json_extract(e.body, '$.calls') IS NULL")):
    bad.append("comm rows %d" % len(d["comm"]))
rt = int(q("SELECT count(*) FROM comm c JOIN events e USING (node, seq) WHERE json_extract(e.body, '$.calls') IS NOT NULL"))
if rt == 0 or len(d.get("comm_runtime") or []) != rt:
    bad.append("comm_runtime rows %d, db %d" % (len(d.get("comm_runtime") or []), rt))
st = {c["item"]: c["status"] for c in d["checklist"]}
for item in ("weights.metadata", "numerics.e2e", "perf.baseline", "memory.plan"):
    if st.get(item) != q("SELECT status FROM checks WHERE item = '%s' ORDER BY seq DESC LIMIT 1" % item):
        bad.append("status of " + item)
if st.get("stability.soak") != "not run":
    bad.append("stability.soak")
peak = float(q("SELECT max(value) FROM samples WHERE node='n1' AND card=1 AND metric IN ('mem.used','mem.peak')"))
cards = {c["card"]: c for c in d["memory"]["cards"]}
if cards[1]["peak"] != peak:
    bad.append("peak card 1 %r != %r" % (cards[1]["peak"], peak))
if d["session"]["verdict"] != "no-go" or d["session"]["nodes"] != ["n1"]:
    bad.append("session %r" % d["session"])
if [r["kind"] for r in d.get("timeline") or []] != ["marker", "cancel", "rerun", "skipped"]:
    bad.append("timeline %r" % d.get("timeline"))
elif d["timeline"][0]["text"] != "fans loud <here>" or d["timeline"][3]["stage_id"] != "serve":
    bad.append("timeline rows %r" % d["timeline"])
if d["manifest"]["versions"] != {"day0": "0.1.0", "protocol": 1}:
    bad.append("versions")
if bad:
    print("\n".join(bad)); sys.exit(1)
PY
[ $? -eq 0 ] && ok "json: parses; perf, comm, statuses, peak memory equal the db's" || fail "json document" "$(head -c 1500 "$T/py.out")"

# ---- HTML ------------------------------------------------------------------
mkdir -p "$T/h"
expect_rc 0 "report --format html -o FILE" "$D0" report "$A" --format html -o "$T/h/a.html"
H="$T/h/a.html"
check "html: exactly one file written, nothing else beside it" bash -c "[ \"\$(ls -A '$T/h')\" = a.html ] && [ ! -s '$OUT' ]"
n=$(grep -c '<svg' "$H")
[ "$n" -eq 3 ] && ok "html: three inline SVG charts" || fail "html: three charts" "$n <svg"
svg() { sed -n "/<svg id=\"$1\"/,/<\/svg>/p" "$H"; }
for op in allreduce allgather; do
	check "html: busbw chart has a line for $op" bash -c "grep -qF 'data-series=\"$op\"' <<<\"\$(sed -n '/<svg id=\"chart-busbw\"/,/<\/svg>/p' '$H')\""
done
n=$(svg chart-busbw | grep -c '<polyline')
[ "$n" -eq 2 ] && ok "html: one polyline per op" || fail "html: polyline per op" "$n"
pts=$(svg chart-busbw | grep -F 'data-series="allreduce"' | grep -o 'points="[^"]*"' | wc -w)
want=$(q "SELECT count(DISTINCT bytes) FROM comm WHERE op = 'allreduce' AND \"group\" = 'world'")
[ "$pts" -eq "$want" ] && ok "html: one point per allreduce size ($want)" || fail "html: allreduce points" "$pts, want $want"
n=$(svg chart-memory | grep -c '<polyline')
want=$(q "SELECT count(*) FROM series WHERE metric = 'mem.used' AND card >= 0")
[ "$n" -eq "$want" ] && ok "html: memory chart: a line per card ($want)" || fail "html: memory lines" "$n, want $want"
pts=$(svg chart-layers | grep -o 'points="[^"]*"' | wc -w)
want=$(q "SELECT count(*) FROM numerics WHERE level = 'layer'")
[ "$pts" -eq "$want" ] && ok "html: error per layer: one point per layer ($want)" || fail "html: layer points" "$pts, want $want"
contains "html: log scale labels" ">1e-" "$H"
n=$(grep -ci 'http' "$H")
[ "$n" -eq 0 ] && ok "html: no http reference" || fail "html: self-contained" "$n lines with http"
check "html: no external resources (src=, href=, url(, @import, <link)" bash -c "! grep -qiE 'src=|href=|url\\(|@import|<link' '$H'"
check "html: no raw <script> from the store" bash -c "! grep -qi '<script' '$H'"
contains "html: the detail escaped" "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;" "$H"
contains "html: the perf figure" "$(python3 -c "print('%.6g' % $(q "SELECT printf('%.17g', tokens_per_s) FROM perf"))")" "$H"
contains "html: the kernels perf measured with" "<td>$(q "SELECT json_extract(e.body, '$.kernel') FROM perf JOIN events e USING (node, seq)")</td>" "$H"
check "html: ends whole" bash -c "tail -n 1 '$H' | grep -q '</html>'"
check "html: the verdict block is the body's first element" bash -c "grep -A1 '^<body>' '$H' | tail -1 | grep -q '^<div id=\"verdict\" class=\"verdict v-no-go\"><div class=\"big\">NO-GO</div>'"
contains "html: failed listed apart" '<p class="failed"><b>failed:</b> repro.manifest</p>' "$H"
contains "html: skipped listed apart, not as failed" '<p class="skipped"><b>skipped:</b> stability.soak</p>' "$H"
order=$(grep -o '<div id="verdict"\|<h1>\|<h2>Checklist\|<h2 id="timeline"\|<h2>Plan\|<svg id="chart-busbw"\|<svg id="chart-memory"\|<h2 id="comm-table"' "$H" | tr '\n' ' ')
[ "$order" = '<div id="verdict" <h1> <h2>Checklist <h2 id="timeline" <h2>Plan <svg id="chart-busbw" <svg id="chart-memory" <h2 id="comm-table" ' ] &&
	ok "html: verdict, metadata, checklist, timeline, plan, charts, then the comm table" || fail "html: section order" "$order"
check "html: the comm table folded" bash -c "grep -A1 'id=\"comm-table\"' '$H' | grep -q '^<details><summary>'"
check "html: no e+ notation anywhere outside the raw JSON blocks" bash -c "! sed '/<pre>/,/<\/pre>/d' '$H' | grep -q 'e+[0-9]'"
pk=$(q "SELECT max(value) FROM samples WHERE node='n1' AND card=1 AND metric IN ('mem.used','mem.peak')")
pkh=$(python3 -c "
b=$pk; u=0; us=['B','KiB','MiB','GiB','TiB']
while abs(b)>=1024 and u<4: b/=1024; u+=1
print(('%.0f %s' if b==int(b) else '%.1f %s') % (b, us[u]))")
contains "html: memory table: card 1 peak in units ($pkh)" "<td class=\"n\">1</td><td class=\"n\">$pkh</td><td class=\"n\">1 GiB</td>" "$H"
fmtb() { python3 -c "
b=$1; u=0; us=['B','KiB','MiB','GiB','TiB']
while abs(b)>=1024 and u<4: b/=1024; u+=1
print('0' if $1 == 0 else ('%.0f %s' if b==int(b) else '%.1f %s') % (b, us[u]))"; }
rph=$(fmtb "$(q "SELECT value FROM checks WHERE item = 'resources.peak' ORDER BY seq DESC LIMIT 1")")
rbh=$(fmtb "$(q "SELECT threshold FROM checks WHERE item = 'resources.peak' ORDER BY seq DESC LIMIT 1")")
contains "html: checklist: resources.peak's value and budget in units ($rph of $rbh)" "<td>every card within its budget</td><td>$rph</td><td>$rbh</td></tr>" "$H"
check "html: checklist: no raw 1073741824 budget" bash -c "! grep -q '>1073741824<' '$H'"
check "html: memory chart: the 1 GiB budget line" bash -c "sed -n '/<svg id=\"chart-memory\"/,/<\/svg>/p' '$H' | grep -q 'class=\"budget\".*budget 1 GiB'"
check "html: memory chart: ticks in MiB/GiB" bash -c "sed -n '/<svg id=\"chart-memory\"/,/<\/svg>/p' '$H' | grep -q 'text-anchor=\"end\">[0-9.]* [MG]iB<'"
contains "html: timeline: the marker, escaped" '<td class="k-marker">marker</td><td>-</td><td>fans loud &lt;here&gt;</td>' "$H"
contains "html: timeline: the skipped stage" '<td class="k-skipped">skipped</td><td>serve</td><td>needs soak</td>' "$H"
contains "html: timeline: the cancel" '<td class="k-cancel">cancel</td>' "$H"
contains "html: timeline: the rerun" '<td class="k-rerun">rerun</td>' "$H"

# ---- read-only, missing keys, bad input ------------------------------------
[ "$(md5sum <"$A")" = "$sum_before" ] && ok "reports leave the session file unchanged" || fail "read-only" "file changed"
expect_rc 0 "a session without manifest keys still reports" "$D0" report "$RAW"
contains "… the model is not recorded" "- model: not recorded" "$OUT"
contains "… the playbook is not recorded" "## Playbook

not recorded" "$OUT"
check "… sections say not recorded" grep -q "^not recorded" "$OUT"
contains "… its end is its last event, never a finish" ", never finished, last event: " "$OUT"
expect_rc 0 "… and as HTML" "$D0" report "$RAW" --format html
contains "… HTML says not recorded" "not recorded" "$OUT"
contains "… HTML: never finished" "<th>never finished, last event</th>" "$OUT"
expect_rc 0 "a finished session says finished" "$D0" report "$A"
contains "… finished" ", finished: " "$OUT"
expect_rc 2 "a missing file" "$D0" report "$T/nope.db"
contains "… named, with the reason" "$T/nope.db: No such file or directory" "$ERR"
echo "not a database at all, just text long enough to be read by sqlite as a header" >"$T/s/junk.db"
expect_rc 2 "a corrupt file" "$D0" report "$T/s/junk.db"
contains "… named" "$T/s/junk.db" "$ERR"
sqlite3 "$T/other.db" "CREATE TABLE t(x)"
expect_rc 2 "a sqlite file that is not a session" "$D0" report "$T/other.db"
contains "… says so" "not a day0 session" "$ERR"
expect_rc 2 "an unknown format" "$D0" report "$A" --format pdf
contains "… names it" "'pdf'" "$ERR"
expect_rc 2 "no session file" "$D0" report
expect_rc 0 "report --help" "$D0" report --help
contains "… usage" "usage: day0 report SESSION.db" "$OUT"
expect_rc 2 "-o into a missing directory" "$D0" report "$A" -o "$T/no/dir/r.md"
check "… leaves nothing behind" bash -c "! ls '$T'/no 2>/dev/null"

# ---- ls --------------------------------------------------------------------
DAY0_SESSIONS="$T/s" expect_rc 0 "ls (session_dir from DAY0_SESSIONS)" "$D0" ls
cp "$OUT" "$T/ls.txt"
contains "ls: the named session" "release-day-test" "$T/ls.txt"
contains "ls: its verdict" "no-go" "$T/ls.txt"
contains "ls: the session without a manifest: unfinished" "raw.db" "$T/ls.txt"
check "ls: raw.db is unfinished" grep -q 'raw.db .*unfinished' "$T/ls.txt"
contains "ls: the corrupt file listed with its error" "junk.db" "$T/ls.txt"
check "ls: … as an error line" grep -q 'junk.db *error: .*junk.db' "$T/ls.txt"
events=$(q "SELECT sum(events) FROM nodes")
check "ls: events count from the db ($events)" grep -q "release-day-test.* n1 .*no-go *$events\$" "$T/ls.txt"
# newest first: a.db's manifest says it started a minute before raw.db's first event
check "ls: newest first" bash -c "grep -n 'raw.db\|a.db ' '$T/ls.txt' | head -n 1 | grep -q raw.db"
expect_rc 0 "ls --json DIR" "$D0" ls --json "$T/s"
python3 - "$OUT" >"$T/py.out" 2>&1 <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
names = [x.get("name") for x in a]
errs = [x for x in a if "error" in x]
ok = len(a) == 3 and "release-day-test" in names and len(errs) == 1 and errs[0]["file"].endswith("junk.db")
s = [x for x in a if x.get("name") == "release-day-test"][0]
ok = ok and s["verdict"] == "no-go" and s["nodes"] == ["n1"] and s["duration_s"] > 60
print(a if not ok else "ok")
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] && ok "ls --json: two sessions and one error, with their fields" || fail "ls --json" "$(head -c 800 "$T/py.out")"
expect_rc 2 "ls of a missing directory" "$D0" ls "$T/nodir"
contains "… named" "$T/nodir" "$ERR"
DAY0_SESSIONS="$T/none-yet" expect_rc 0 "ls with no session directory yet" "$D0" ls
