#!/usr/bin/env bash
# Kill/resume soak over real OpenSSH: `day0 run` across loopback ssh nodes
# (tests/sh/sshd_nodes.sh) is SIGKILLed at a random moment, CYCLES times,
# each time resumed with `day0 run --resume`; then it runs to its verdict.
# After every kill: the session file passes the seq audit (every node's
# seqs 1..max once), and a copy of every agent's spool is kept.  At the
# end: every event any of those spools held is in the session file with
# the same body (spool-vs-file), the audit passes again, every node's
# last stage attempt has all its lines, and the verdict is GO.
#
#   CYCLES=20 NODES=3 bash bench/resume_soak.sh       (the soak, ~2 min)
#   tests/sh/test_resume_soak.sh runs CYCLES=3 as part of `make test`.
#
# Prints ok/FAIL lines (tests/lib.sh) and, as a benchmark, the soak's wall
# time against one uninterrupted run of the same playbook measured first
# in the same session (the ratio is the price of the kills: reconnects and
# reruns of interrupted stages).  SEED fixes the kill times.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
CYCLES=${CYCLES:-20}
NODES=${NODES:-3}
SEED=${SEED:-$$}
export BUILD
. tests/lib.sh
. tests/sh/sshd_nodes.sh
DAY0="$BUILD/day0"
STORE="$BUILD/tests/day0_store"
export DAY0_SESSIONS="$T/sessions"
RANDOM=$SEED
echo "# resume soak: $CYCLES kill/resume cycles over ssh, $NODES nodes, seed $SEED"
sshd_nodes_start "$NODES" || exit 1
cat >"$T/agent.sh" <<SH
#!/bin/sh
export ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}' UBSAN_OPTIONS='${UBSAN_OPTIONS:-}'
exec "$BUILD/day0-agent" "\$@"
SH
chmod +x "$T/agent.sh"
KH=(--known-hosts "$SSHD_KNOWN_HOSTS" --remote-agent "$T/agent.sh" --sample-hz 10)
# Two stages of ~3 s of output each: kills land in both, and between them.
cat >"$T/soak.json" <<'JSON'
{"name": "soak", "stages": [
  {"id": "one", "step": "exec", "on": "all", "timeout": 120,
   "argv": ["sh", "-c", "i=0; while [ $i -lt 150 ]; do echo one $i of ${node}; i=$((i+1)); sleep 0.02; done"]},
  {"id": "two", "step": "exec", "on": "all", "needs": ["one"], "timeout": 120,
   "argv": ["sh", "-c", "i=0; while [ $i -lt 150 ]; do echo two $i of ${node}; i=$((i+1)); sleep 0.02; done"]}]}
JSON
now() { date +%s.%N; }

# The reference: one run, no kills (REFERENCE=0 skips it: the test form).
t0=$(now)
if [ "${REFERENCE:-1}" = 1 ]; then
	"$DAY0" run "$T/soak.json" --inventory "$SSHD_INV" "${KH[@]}" --session "$T/ref.db" --headless >"$T/ref.out" 2>&1
	rc=$?
	[ "$rc" = 0 ] && ok "reference run without kills: GO" || fail "reference run" "exit $rc: $(tail -c 300 "$T/ref.out")"
fi
t1=$(now)

db="$T/soak.db"
tag=""
snap=0
t2=$(now)
for c in $(seq 1 "$CYCLES"); do
	if [ "$c" = 1 ]; then
		"$DAY0" run "$T/soak.json" --inventory "$SSHD_INV" "${KH[@]}" --session "$db" --headless >"$T/c$c.out" 2>&1 &
	else
		"$DAY0" run --resume "$db" "${KH[@]}" --headless >"$T/c$c.out" 2>&1 &
	fi
	pid=$!
	# Once this console stores the agents' events (its links are up),
	# 0.1 .. 2.6 s more: mid-stage, between stages, mid-resend.
	before=$(sqlite3 "$db" "select count(*) from events where node != 'console'" 2>/dev/null || echo 0)
	for _ in $(seq 1 300); do
		now_n=$(sqlite3 "$db" "select count(*) from events where node != 'console'" 2>/dev/null || echo 0)
		[ "${now_n:-0}" -gt "${before:-0}" ] && break
		sleep 0.1
	done
	sleep "$((RANDOM % 26 + 1))e-1"
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	[ -n "$tag" ] || tag=$(sqlite3 "$db" "select json_extract(value, '$') from session where key='tag'")
	if ! "$STORE" audit "$db" >"$T/audit.out" 2>&1; then
		fail "cycle $c: audit after the kill" "$(cat "$T/audit.out")"
	fi
	for sp in /root/.cache/day0/spool/"$tag"/*/spool.jsonl; do
		[ -f "$sp" ] || continue
		snap=$((snap + 1))
		cp "$sp" "$T/spool.$snap.$(basename "$(dirname "$sp")")"
	done
done
ok "$CYCLES kills, the session file audited after each"
"$DAY0" run --resume "$db" "${KH[@]}" --headless >"$T/final.out" 2>&1
rc=$?
t3=$(now)
[ "$rc" = 0 ] && ok "after $CYCLES kills the resumed run ends GO" || fail "final resume" "exit $rc: $(tail -c 400 "$T/final.out")"
expect_rc 0 "the seq audit passes at the end" "$STORE" audit "$db"

# Spool-vs-file: every event a spool held is stored, byte for byte.
python3 - "$db" "$T" <<'PY' >"$T/cmp.out"
import glob, json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
held = missing = differ = 0
for f in glob.glob(sys.argv[2] + "/spool.*"):
    for line in open(f, encoding="utf-8", errors="surrogateescape").read().split("\n")[1:]:
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a torn last line: never sent
        held += 1
        row = db.execute("select body from events where node=? and seq=?",
                         (ev["node"], ev["seq"])).fetchone()
        if row is None:
            missing += 1
        elif row[0] != line:
            differ += 1
print(held, missing, differ)
PY
read -r held missing differ <"$T/cmp.out"
[ "${held:-0}" -gt 0 ] && [ "$missing" = 0 ] && [ "$differ" = 0 ] &&
	ok "spool-vs-file: all $held events the spools held are stored with the same body" ||
	fail "spool-vs-file" "$held held, $missing missing, $differ differ"
for n in $(seq 1 "$NODES"); do
	got=$(sqlite3 "$db" "select max(c) from (select count(*) c from events where node='node$n' and type='log' and json_extract(body,'$.stage_id') like 'two%' group by json_extract(body,'$.stage_id'))")
	[ "$got" = 150 ] && ok "node$n: an attempt of the last stage has all its 150 lines" || fail "node$n: last stage lines" "$got of 150"
done
if [ "${REFERENCE:-1}" = 1 ]; then
	python3 -c 'import sys; r, s = float(sys.argv[2]) - float(sys.argv[1]), float(sys.argv[4]) - float(sys.argv[3]); print("# reference run %.1f s; %s kills + resumes %.1f s; ratio %.2fx" % (r, sys.argv[5], s, s / r))' "$t0" "$t1" "$t2" "$t3" "$CYCLES"
fi
