#!/usr/bin/env bash
# day0 run over real OpenSSH: eight loopback "nodes" (one sshd on
# 127.0.0.2-9, a throwaway host key, a test identity).  The smoke playbook
# passes headless across all of them; a node whose port is closed is
# reported unreachable while the others finish; a node presenting another
# host key is refused; an agent killed mid-stage and a console killed
# mid-run end in a complete session (seq audit).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/sshd_nodes.sh"
DAY0="$BUILD/day0"
STORE="$BUILD/tests/day0_store"
export DAY0_SESSIONS="$T/sessions"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sshd_nodes_start 8 || exit 1
# Every node is this machine: the nodes run this build's agent (through a
# wrapper that gives it the sanitizer settings sshd does not pass on), so a
# sanitizer build tests itself.  Deployment is tested by test_hosts.sh.
cat >"$T/agent.sh" <<SH
#!/bin/sh
export ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}' UBSAN_OPTIONS='${UBSAN_OPTIONS:-}'
exec "$BUILD/day0-agent" "\$@"
SH
chmod +x "$T/agent.sh"
KH=(--known-hosts "$SSHD_KNOWN_HOSTS" --remote-agent "$T/agent.sh")

# Open MPI's own ssh launch (cluster stages) uses the test's ssh config,
# and passes the sanitizer settings to ranks it starts over ssh.
python3 - "$SSHD_INV" "$SSHD_SSH_CONFIG" <<'PY'
import json, sys
inv = json.load(open(sys.argv[1]))
inv["mpirun_args"] = ["--mca", "plm_rsh_args", "-F " + sys.argv[2],
                      "-x", "ASAN_OPTIONS", "-x", "LSAN_OPTIONS", "-x", "UBSAN_OPTIONS"]
json.dump(inv, open(sys.argv[1], "w"))
PY
"$ENGINE" gen-model --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
	--vocab 128 "$T/model" >/dev/null

# 1. The smoke playbook across eight nodes.
expect_rc 0 "smoke.json passes across 8 ssh nodes" timeout $RUN_LIMIT "$DAY0" run \
	"$DAY0_ROOT/playbooks/smoke.json" --inventory "$SSHD_INV" "${KH[@]}" \
	--model "$T/model" --session "$T/smoke.db" --headless
contains "the verdict is go" "verdict: GO" "$OUT"
contains "per-node lines are folded into one node set" "node[1-8]" "$OUT"
expect_rc 0 "every node's events are stored once" "$STORE" audit "$T/smoke.db"
check "all eight agents reported facts" test "$(sqlite3 "$T/smoke.db" "select count(distinct node) from events where type='facts'")" = 8
check "verify ran on every node" test "$(sqlite3 "$T/smoke.db" "select count(distinct node) from checks where item='weights.integrity' and status='pass'")" = 8

# 2. A closed port: unreachable, the others finish.
cat >"$T/quick.json" <<'JSON'
{"name": "quick", "stages": [
  {"id": "facts", "step": "facts", "on": "all", "checks": {"facts": {}}},
  {"id": "hello", "step": "exec", "on": "all", "needs": ["facts"], "argv": ["echo", "${node}"]}]}
JSON
closed=$(sshd_closed_port)
python3 - "$SSHD_INV" "$T/inv9.json" "$closed" <<'PY'
import json, sys
inv = json.load(open(sys.argv[1]))
inv["nodes"].append({"name": "node9", "host": "127.0.0.1", "port": int(sys.argv[3])})
json.dump(inv, open(sys.argv[2], "w"))
PY
expect_rc 1 "an unreachable node makes the run no-go" timeout 120 "$DAY0" run "$T/quick.json" \
	--inventory "$T/inv9.json" "${KH[@]}" --session "$T/u.db" --headless --connect-timeout 5
contains "it is reported unreachable with the reason" "node9: " "$OUT"
contains "the reason is the refused connection" "connection refused" "$OUT"
contains "the other eight finished the stage" "stage hello              done                node[1-8]" "$OUT"
check "the unreachable node's facts check is recorded as failed" \
	test "$(sqlite3 "$T/u.db" "select count(*) from events where node='console' and type='check' and json_extract(body,'$.for')='node9' and json_extract(body,'$.status')='fail'")" = 1

# 3. Another host key on a known address: refused, fingerprint shown.
sshd_other_start || exit 1
sshd_inventory "$T/other.json" "other 127.0.0.200 $SSHD_OTHER_PORT"
cp "$SSHD_KNOWN_HOSTS" "$T/kh-other"
echo "[127.0.0.200]:$SSHD_OTHER_PORT $(cut -d' ' -f1-2 "$SSHD_HOST_KEY.pub")" >>"$T/kh-other"
expect_rc 1 "a node with a changed host key is refused" timeout 60 "$DAY0" run "$T/quick.json" \
	--inventory "$T/other.json" --known-hosts "$T/kh-other" --session "$T/m.db" --headless
contains "the refusal says host key mismatch" "host key mismatch" "$OUT"
other_fp=$(ssh-keygen -lf "$SSHD_OTHER_HOST_KEY.pub" | cut -d' ' -f2)
contains "and shows the presented key's fingerprint" "$other_fp" "$OUT"
check "no stage ran on the refused node" test "$(sqlite3 "$T/m.db" "select count(*) from events where node='other'")" = 0

# 4. An agent killed mid-stage over ssh: reconnect, rerun, nothing lost.
cat >"$T/long.json" <<'JSON'
{"name": "long", "stages": [
  {"id": "long", "step": "exec", "on": "all", "argv": ["sleep", "3"]},
  {"id": "after", "step": "exec", "on": "all", "needs": ["long"], "argv": ["true"]}]}
JSON
("$DAY0" run "$T/long.json" --inventory "$SSHD_INV" "${KH[@]}" --session "$T/k.db" --headless >"$T/k.out" 2>&1; echo $? >"$T/k.rc") &
for i in $(seq 600); do grep -q "stage long .*start" "$T/k.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
pkill -9 -f "day0-agent --node node3 --spool .cache/day0/spool/k-[0-9a-f]*/node3"
wait
check "after a killed agent the run still ends go" test "$(cat "$T/k.rc")" = 0
contains "node3's lost stage ran again" "rerun (lost)" "$T/k.out"
expect_rc 0 "no event lost or doubled (seq audit)" "$STORE" audit "$T/k.db"

# 4b. A dropped connection: the sshd process serving node5's session is
# killed mid-stage; the console reconnects and the run still ends go.
("$DAY0" run "$T/long.json" --inventory "$SSHD_INV" "${KH[@]}" --session "$T/d.db" --headless >"$T/d.out" 2>&1; echo $? >"$T/d.rc") &
for i in $(seq 600); do grep -q "stage long .*start" "$T/d.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
apid=$(pgrep -f "day0-agent --node node5 --spool .cache/day0/spool/d-[0-9a-f]*/node5" | head -n 1)
spid=$apid
while [ -n "$spid" ] && [ "$spid" != 1 ] && [ "$(ps -o comm= -p "$spid")" != sshd ]; do
	spid=$(ps -o ppid= -p "$spid" | tr -d ' ')
done
if [ -n "$spid" ] && [ "$spid" != 1 ]; then
	kill -9 "$spid"
	ok "(node5's sshd session process found and killed)"
else
	fail "node5's sshd session" "not found above agent pid '$apid'"
fi
wait
check "after a dropped connection the run still ends go" test "$(cat "$T/d.rc")" = 0
contains "the console saw the connection go and came back" "node connection lost, reconnecting" "$T/d.out"
expect_rc 0 "no event lost or doubled after the dropped connection" "$STORE" audit "$T/d.db"

# 5. The console killed mid-run: --resume re-attaches over ssh.
("$DAY0" run "$T/long.json" --inventory "$SSHD_INV" "${KH[@]}" --session "$T/r.db" --headless >"$T/r.out" 2>&1) &
cpid=$!
for i in $(seq 600); do grep -q "stage long .*start" "$T/r.out" 2>/dev/null && break; sleep 0.1; done
{ kill -9 $cpid; wait $cpid; } 2>/dev/null
wait $cpid 2>/dev/null
expect_rc 0 "--resume over ssh finishes the session" timeout 120 "$DAY0" run --resume "$T/r.db" \
	"${KH[@]}" --headless
contains "the resumed run reaches go" "verdict: GO" "$OUT"
expect_rc 0 "the resumed session has every event once" "$STORE" audit "$T/r.db"
