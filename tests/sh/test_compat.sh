# facts.compat, the compatibility matrix across nodes (docs/compat.md),
# over real OpenSSH: four loopback nodes, two of them odd in ways that go
# through the real path, agent -> facts event -> store -> console:
#   node3 (127.0.0.4): its sshd gives its sessions another environment
#     (a "Match LocalAddress" block with SetEnv), in which the agent
#     honours DAY0_FACTS_OVERRIDE, the test-only switch of agent/facts.c:
#     it reports Open MPI "v9.9.9";
#   node4 (127.0.0.5): its agent runs a second day0-engine binary whose
#     build id was rewritten (same length, other bytes): the agent reads
#     the build from that binary's `--version`, as it would from another
#     build (the agent wrapper picks it by the address the session came in
#     on, $SSH_CONNECTION).
# Then: `day0 hosts` names node3 and the field (exit 1); a run is NO-GO at
# facts.compat naming node3/mpi_version and node4/engine_build, and the
# headless table, the session file, the report and the Hosts screen in
# tmux say the same; the nodes that agree alone pass (GO).  Last, the
# minimums per family: two local nodes (they inherit the console's
# environment) with a driver too old for DeepSeek-V3's FP8, enough for
# llama's bf16.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/sshd_nodes.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions" LANG=C.UTF-8 LC_ALL=C.UTF-8
SSHD_EXTRA_CONFIG='Match LocalAddress 127.0.0.4
	SetEnv "DAY0_FACTS_OVERRIDE=mpi_version=Open MPI v9.9.9"'
sshd_nodes_start 4 || exit 1
KH=(--known-hosts "$SSHD_KNOWN_HOSTS")

# --- the two odd nodes' means ----------------------------------------------
BID=$("$ENGINE" --version | sed -n 's/^build //p')
check "day0-engine --version names its build id (12 hex digits)" \
	bash -c "[[ '$BID' =~ ^[0-9a-f]{12}$ ]]"
ODD=$(printf '%s' "$BID" | tr '0-9a-f' 'a-f0-9' | cut -c1-12)
python3 - "$ENGINE" "$T/odd-engine" "$BID" "$ODD" <<'PY'
import sys
src, dst, a, b = sys.argv[1:]
data = open(src, "rb").read()
n = data.count(a.encode())
assert n >= 1, "build id not in the binary"
open(dst, "wb").write(data.replace(a.encode(), b.encode()))
PY
chmod +x "$T/odd-engine"
check "the second engine reports the other build" \
	bash -c "'$T/odd-engine' --version | grep -qx 'build $ODD'"
# This build's agent on every node (a sanitizer build tests itself: sshd
# passes no ASAN_OPTIONS); node4's with the second engine.
cat >"$T/agent.sh" <<SH
#!/bin/sh
export ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}' UBSAN_OPTIONS='${UBSAN_OPTIONS:-}'
case "\$SSH_CONNECTION" in
*" 127.0.0.5 "*) exec "$BUILD/day0-agent" --engine "$T/odd-engine" "\$@" ;;
esac
exec "$BUILD/day0-agent" "\$@"
SH
chmod +x "$T/agent.sh"
check "(node3's sessions get the override, node2's do not)" bash -c \
	"[ \"\$(ssh -F '$SSHD_SSH_CONFIG' 127.0.0.4 'echo \$DAY0_FACTS_OVERRIDE')\" = 'mpi_version=Open MPI v9.9.9' ] &&
	 [ -z \"\$(ssh -F '$SSHD_SSH_CONFIG' 127.0.0.3 'echo \$DAY0_FACTS_OVERRIDE')\" ]"

# --- day0 hosts: the matrix and its verdict ---------------------------------
expect_rc 1 "hosts: a node with another Open MPI fails the probe" \
	timeout 120 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
contains "hosts: the matrix has the odd node set as a column" "node3 (1)" "$OUT"
contains "hosts: ... beside the majority's" "node[1-2,4] (3)" "$OUT"
check "hosts: the Open MPI row marks node3's value odd" \
	grep -qE '^Open MPI =  +Open MPI v4[^*]* +Open MPI v9\.9\.9\*' "$OUT"
contains "hosts: facts.compat names the node, the field and both values" \
	"facts.compat: fail: node3: mpi_version Open MPI v9.9.9, not the majority's Open MPI v4" "$OUT"
expect_rc 1 "hosts --json" timeout 120 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}" --json
check "hosts --json: the matrix, columns and the odd cell" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
m = d["compat"]
assert m["status"] == "fail" and m["odd"] == 1, m
assert [c["nodes"] for c in m["columns"]] == ["node[1-2,4]", "node3"], m["columns"]
row = [r for r in m["rows"] if r["field"] == "mpi_version"][0]
assert row["match"] == "equal" and row["odd"] == [False, True], row
for n in d["nodes"]:
    f = n["facts"]
    for k in ("kernel", "glibc", "mpi_version", "blas", "blas_core", "engine_version",
              "engine_build", "gpu_driver", "gpu_runtime", "cpu", "cpu_flags"):
        assert isinstance(f.get(k), str) and f[k], (n["name"], k)
    assert ("overridden" in f) == (n["name"] == "node3"), n
' "$OUT"

# --- a run: NO-GO at facts.compat --------------------------------------------
cat >"$T/pb.json" <<'JSON'
{"name": "compat", "stages": [
  {"id": "facts", "step": "facts", "on": "all", "timeout": 60,
   "checks": {"facts": {}, "facts.compat": {}}}]}
JSON
expect_rc 1 "run: two odd nodes make it NO-GO" timeout "$RUN_LIMIT" "$DAY0" run "$T/pb.json" \
	--inventory "$SSHD_INV" "${KH[@]}" --remote-agent "$T/agent.sh" --session "$T/s1.db" --headless
cp "$OUT" "$T/s1.out"
contains "run: the verdict is NO-GO" "verdict: NO-GO" "$T/s1.out"
row=$(grep -E '^facts\.compat +fail ' "$T/s1.out")
check "run: the headless table's facts.compat row fails" test -n "$row"
case $row in *"node3: mpi_version Open MPI v9.9.9, not the majority's Open MPI v4"*) ok "run: ... naming node3 and mpi_version" ;;
*) fail "run: ... naming node3 and mpi_version" "$row" ;; esac
case $row in *"node4: engine_build $ODD, not the majority's $BID (node[1-3])"*) ok "run: ... and node4 and engine_build" ;;
*) fail "run: ... and node4 and engine_build" "$row" ;; esac
# The session file holds the same: the console's check, and the facts
# events the matrix came from.
python3 - "$T/s1.db" "$T/s1.out" "$ODD" >"$T/db.txt" 2>&1 <<'PY'
import json, re, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT status, detail FROM checks WHERE item = 'facts.compat'").fetchall()
assert len(rows) == 1 and rows[0][0] == "fail", rows
detail = rows[0][1]
out = open(sys.argv[2]).read()
line = [l for l in out.splitlines() if l.startswith("facts.compat ") and " fail " in l][0]
assert detail[:60] in line, (detail, line)
facts = {k[6:]: json.loads(v) for k, v in db.execute(
    "SELECT key, value FROM session WHERE key LIKE 'facts/%'")}
assert sorted(facts) == ["node1", "node2", "node3", "node4"], facts
assert facts["node3"]["mpi_version"] == "Open MPI v9.9.9"
assert facts["node4"]["engine_build"] == sys.argv[3]
assert len({facts[n]["engine_build"] for n in ("node1", "node2", "node3")}) == 1
print("ok")
PY
check "run: the session file's check and facts agree with the table ($(tail -c 300 "$T/db.txt"))" \
	grep -qx ok "$T/db.txt"

# --- the report ----------------------------------------------------------------
expect_rc 0 "report (md) of the NO-GO session" "$DAY0" report "$T/s1.db" --format md -o "$T/r.md"
contains "report: the matrix section" "### Compatibility matrix" "$T/r.md"
check "report: node sets as columns" grep -qE '^\| field \| node\[1-2\] \(2\) \| node3 \(1\) \| node4 \(1\) \|$' "$T/r.md"
check "report: node4's engine build in bold (odd)" \
	grep -qE "^\| engine build \(must match\) \| $BID \| $BID \| \*\*$ODD\*\* \|$" "$T/r.md"
check "report: node3's Open MPI in bold (odd)" \
	grep -qE '^\| Open MPI \(must match\) \| Open MPI v4[^|]* \| \*\*Open MPI v9\.9\.9\*\* \| Open MPI v4[^|]* \|$' "$T/r.md"
expect_rc 0 "report (html)" "$DAY0" report "$T/s1.db" --format html -o "$T/r.html"
check "report html: the odd cells are marked" test "$(grep -o 'class="odd"' "$T/r.html" | wc -l)" = 2

# --- the Hosts screen (replay in tmux) and seek == fold -------------------------
"$DAY0" replay "$T/s1.db" --dump >"$T/seek.txt" 2>&1
"$DAY0" replay "$T/s1.db" --dump --fold >"$T/fold.txt" 2>&1
check "replay: the view's facts by seek equal the fold's" \
	bash -c "grep -q 'facts={' '$T/seek.txt' && diff <(grep -o 'node [^ ]* .*facts={[^ ]*' '$T/seek.txt') <(grep -o 'node [^ ]* .*facts={[^ ]*' '$T/fold.txt') >/dev/null"
if ! command -v tmux >/dev/null; then
	fail "tmux" "not installed (make deps)"
else
	SOCK="day0-compat-$$"
	tm() { tmux -L "$SOCK" "$@"; }
	trap 'tm kill-server 2>/dev/null; sshd_nodes_cleanup' EXIT
	tm new-session -d -s keep "sleep 3600"
	tm -u new-session -d -s r -x 160 -y 40 \
		"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $T/s1.db --at 3600; sleep 60"
	cap() { tm capture-pane -p -t r; }
	screen_has() { # NAME NEEDLE
		local i
		for i in $(seq 50); do
			if cap | grep -qF -- "$2"; then ok "$1"; return 0; fi
			sleep 0.1
		done
		fail "$1" "'$2' not on screen:
$(cap | sed 's/^/    | /')"
	}
	screen_has "tmux: the Hosts tab" "9 Hosts"
	tm send-keys -t r 9
	screen_has "tmux: Hosts shows the runner's facts.compat verdict" "facts.compat fail: node"
	screen_has "tmux: ... the node sets as columns" "node4 (1)"
	screen_has "tmux: ... node4's engine build, marked odd" "$ODD*"
	screen_has "tmux: ... node3's Open MPI, marked odd" "Open MPI v9.9.9*"
	tm capture-pane -e -p -t r >"$T/screen-esc.txt"
	check "tmux: ... in red (a field that must match)" \
		grep -qP '\x1b\[(1;)?31m[^\x1b]*Open MPI v9\.9\.9\*' "$T/screen-esc.txt"
	cap >"$T/screen.txt"
	check "tmux: the screen's verdict is the session file's detail" python3 - "$T/s1.db" "$T/screen.txt" <<'PY'
import sqlite3, sys
d = sqlite3.connect(sys.argv[1]).execute(
    "SELECT detail FROM checks WHERE item = 'facts.compat'").fetchone()[0]
scr = open(sys.argv[2]).read()
line = [l for l in scr.splitlines() if "facts.compat fail:" in l][0]
shown = line.split("facts.compat fail: ", 1)[1].rstrip()
assert d.startswith(shown[:100]), (d, shown)
PY
	tm kill-session -t r 2>/dev/null
fi

# --- the nodes that agree: pass, GO ---------------------------------------------
python3 - "$SSHD_INV" >"$T/inv-even.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["nodes"] = [{"name": "node[1-2]", "host": "127.0.0.[2-3]"}]
print(json.dumps(d))
PY
expect_rc 0 "run: the nodes that agree are GO" timeout "$RUN_LIMIT" "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv-even.json" "${KH[@]}" --remote-agent "$T/agent.sh" --session "$T/s2.db" --headless
check "run: facts.compat passes for node[1-2]" \
	grep -qE '^facts\.compat +pass +facts +console +node\[1-2\] \(2\): one engine build' "$OUT"
contains "run: verdict GO" "verdict: GO" "$OUT"
# one node set fits the screen: the Hosts screen shows whole values
if command -v tmux >/dev/null; then
	tm -u new-session -d -s g -x 160 -y 40 \
		"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $T/s2.db --at 3600; sleep 60"
	for i in $(seq 50); do tm capture-pane -p -t g | grep -q '9 Hosts' && break; sleep 0.1; done
	tm send-keys -t g 9
	for i in $(seq 50); do tm capture-pane -p -t g | grep -q '^CPU flags' && break; sleep 0.1; done
	flags=$(sqlite3 "$T/s2.db" "SELECT json_extract(value, '$.cpu_flags') FROM session WHERE key = 'facts/node1'")
	check "tmux: one node set, the CPU flags whole ($flags)" \
		bash -c "[ -n '$flags' ] && tmux -L '$SOCK' capture-pane -p -t g | grep -qxE 'CPU flags +$flags *'"
	tm kill-session -t g 2>/dev/null
fi
expect_rc 0 "hosts: the agreeing nodes pass the probe" \
	timeout 120 "$DAY0" hosts --inventory "$T/inv-even.json" "${KH[@]}"
contains "hosts: facts.compat passes" "facts.compat: pass: node[1-2] (2)" "$OUT"

# --- minimums per model family (engine/model/compat_min.c) --------------------
# Local nodes inherit the console's environment: both report a driver and
# CUDA that are enough for bf16 (every family) but not for DeepSeek-V3's FP8.
cat >"$T/inv-local.json" <<'JSON'
{"name": "loc", "nodes": [{"name": "l[1-2]", "transport": "local", "cards": 1, "card_mem": "1GiB"}]}
JSON
OLD_GPU="DAY0_FACTS_OVERRIDE=gpu_driver=520.61.05;gpu_runtime=11.8"
expect_rc 1 "minimums: an old driver fails DeepSeek-V3's (FP8) minimums" \
	env "$OLD_GPU" timeout 60 "$DAY0" hosts --inventory "$T/inv-local.json" \
	--model "$DAY0_ROOT/assets/configs/deepseek-v3.json"
contains "minimums: ... naming the nodes, the field and the minimum" \
	"facts.compat: fail: l[1-2]: gpu_runtime 11.8 < 12.0" "$OUT"
contains "minimums: ... and the driver's" "gpu_driver 520.61.05 < 525.60.13" "$OUT"
expect_rc 0 "minimums: the same nodes meet llama's (bf16)" \
	env "$OLD_GPU" timeout 60 "$DAY0" hosts --inventory "$T/inv-local.json" \
	--model "$DAY0_ROOT/assets/configs/llama-3.1-405b.json"
contains "minimums: ... and say which family" "minimums of llama met" "$OUT"
# --model named by hand must be read: a typo would hold the nodes to no
# family's minimums and pass (exit 2 before any node is reached)
echo '{"hidden_size": 8}' >"$T/no-type.json"
expect_rc 2 "minimums: a missing --model is a usage error" \
	"$DAY0" hosts --inventory "$T/inv-local.json" --model "$T/nowhere.json"
contains "minimums: ... naming the file" "--model: $T/nowhere.json: No such file" "$ERR"
expect_rc 2 "minimums: a --model without model_type is refused" \
	"$DAY0" hosts --inventory "$T/inv-local.json" --model "$T/no-type.json"
contains "minimums: ... naming the file and the field" "no-type.json: model_type: expected a string" "$ERR"
