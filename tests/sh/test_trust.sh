#!/usr/bin/env bash
# A node speaks only for itself (docs/protocol.md, "Trust"): an agent
# wrapper on node b writes events as node a and as the console, and every
# other kind of bad line, before exec-ing the real agent; on local links,
# then over real OpenSSH with a console killed and resumed (the resent
# spools go through the same door).  Afterwards: nothing forged is stored,
# every real event of the victim is (seq audit), the refusals are alerts of
# the console for the sending node, on the headless screen and in the
# report.  A node that floods is rate-limited while the others go on, and
# what it sent beyond the limit arrives later (its agent resends).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/sshd_nodes.sh"
DAY0="$BUILD/day0"
STORE="$BUILD/tests/day0_store"
export DAY0_SESSIONS="$T/sessions"
q() { sqlite3 "$1" "$2"; }

# The forger: on node b (or node2 over ssh) it claims to be the victim
# (a / node1) and the console, writes an over-long line, invalid UTF-8, an
# unknown protocol version and no event at all; on node c it takes its own
# seqs 1 and 2 with bodies its agent will not send, then 1 again with
# another body (a seq going backwards); the agent's own seq 2 then is a
# duplicate with a different body.  Then the real agent.
cat >"$T/forger.sh" <<SH
#!/bin/sh
export ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}' UBSAN_OPTIONS='${UBSAN_OPTIONS:-}'
case " \$* " in
*" --node b "*|*" --node node2 "*)
	victim=a; case " \$* " in *" node2 "*) victim=node1 ;; esac
	printf '{"v":1,"seq":5,"ts":1,"node":"%s","type":"log","level":"info","msg":"FORGED by b"}\n' "\$victim"
	printf '{"v":1,"seq":900,"ts":1,"node":"console","type":"check","item":"weights.integrity","status":"fail","detail":"FORGED by b"}\n'
	head -c 70000 /dev/zero | tr '\0' x; echo
	printf '{"v":1,"seq":1,"ts":1,"node":"b","type":"log","level":"info","msg":"\377\376"}\n'
	printf '{"v":2,"seq":1,"ts":1,"node":"b","type":"log","level":"info","msg":"from the future"}\n'
	echo 'not an event'
	;;
*" --node c "*)
	printf '{"v":1,"seq":1,"ts":1,"node":"c","type":"log","level":"info","msg":"c takes its own seq 1"}\n'
	printf '{"v":1,"seq":2,"ts":1,"node":"c","type":"log","level":"info","msg":"and 2"}\n'
	printf '{"v":1,"seq":1,"ts":1,"node":"c","type":"log","level":"info","msg":"then 1 again, otherwise"}\n'
	;;
esac
exec "$BUILD/day0-agent" "\$@"
SH
chmod +x "$T/forger.sh"

cat >"$T/inv.json" <<'JSON'
{"name": "trio", "defaults": {"transport": "local", "cards": 1, "card_mem": "1GiB"},
 "nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}
JSON
cat >"$T/lines.json" <<'JSON'
{"name": "lines", "stages": [
  {"id": "lines", "step": "exec", "on": "all", "timeout": 60,
   "argv": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line $i of ${node}; done"]}]}
JSON

# ---- local links ---------------------------------------------------------
expect_rc 0 "a forging node b: the run still passes" timeout 120 "$DAY0" run "$T/lines.json" \
	--inventory "$T/inv.json" --agent "$T/forger.sh" --session "$T/l.db" --headless
db="$T/l.db"
contains "headless: the refusal is on b's line" "refused: forged node (1)" "$OUT"
check "headless: ... for node b" grep -q 'refused: forged node (1) *b$' "$OUT"
check "no forged line is stored" test "$(q "$db" "select count(*) from events where type != 'alert' and body like '%FORGED%'")" = 0
check "the victim's stage lines are all stored" test "$(q "$db" "select count(*) from events where node='a' and type='log' and body like '%line _ of a%'")" = 8
expect_rc 0 "every node's seqs are complete (audit)" "$STORE" audit "$db"
check "the console's seqs are its own (none at 900)" test "$(q "$db" "select max(seq) < 900 from events where node='console'")" = 1
check "the checklist shows no forged console check" bash -c "! grep -q 'FORGED' '$OUT'"
alert() { # db node reason -> count in its last alert
	q "$1" "select json_extract(body,'$.count') from events where node='console' and type='alert' and json_extract(body,'$.for')='$2' and json_extract(body,'$.reason')='$3' order by seq desc limit 1"
}
for reason in "forged node" "reserved node name" "over-long line" "invalid UTF-8" \
	"unknown protocol version" "not an event"; do
	check "b: '$reason' counted once, as an alert for b" test "$(alert "$db" b "$reason")" = 1
done
check "c: a seq below one its link sent, with another body: going backwards" test "$(alert "$db" c "seq going backwards")" -ge 1
check "c: its agent's seq 2 over the stored one: a duplicate with a different body" test "$(alert "$db" c "duplicate seq with a different body")" -ge 1
check "no alert is charged to the victim" test "$(q "$db" "select count(*) from events where type='alert' and json_extract(body,'$.for')='a'")" = 0
check "the alert keeps the first example" test "$(q "$db" "select count(*) from events where type='alert' and json_extract(body,'$.reason')='forged node' and json_extract(body,'$.example') like '%FORGED by b%'")" = 1
run "$DAY0" report "$db" --format md
contains "the report lists refused input" "Refused input" "$OUT"
check "the report names b, the reason and the count" grep -q '| b *| forged node *| 1 ' "$OUT"

# ---- on screen: the refusals on the forging node's row --------------------
if command -v tmux >/dev/null; then
	SOCK="day0-trust-$$"
	tm() { tmux -L "$SOCK" "$@"; }
	cat >"$T/slow_local.json" <<'JSON'
{"name": "slowl", "stages": [{"id": "s", "step": "exec", "on": "all", "timeout": 60,
   "argv": ["sh", "-c", "sleep 20"]}]}
JSON
	tm new-session -d -s r -x 160 -y 40 \
		"env LANG=C.UTF-8 TERM=screen-256color DAY0_SESSIONS=$T/sessions $DAY0 run $T/slow_local.json --inventory $T/inv.json --agent $T/forger.sh --session $T/tui.db 2>$T/tui.err; sleep 30"
	seen=""
	for _ in $(seq 600); do
		tm capture-pane -p -t r >"$T/screen"
		if grep -E '^b ' "$T/screen" | grep -qE ', [0-9]+ ref' &&
			grep -q 'refused b forged node' "$T/screen"; then seen=1; break; fi
		sleep 0.1
	done
	[ -n "$seen" ] && ok "live screen: node b's row counts what was refused" ||
		fail "live screen: b's row" "$(head -12 "$T/screen")"
	[ -n "$seen" ] && ok "live screen: the alerts line names b and the reason" ||
		fail "live screen: alerts line" "$(tail -3 "$T/screen")"
	grep -E '^a ' "$T/screen" | grep -qE ', [0-9]+ ref' && fail "live screen: a's row" "the victim shows refusals" ||
		ok "live screen: the victim's row shows none"
	# c's refusals (its own seqs replayed) share the line with b's, one
	# entry per node, and never crowd b's forgery out.
	grep -q 'refused c ' "$T/screen" && ok "live screen: the alerts line names c too" ||
		fail "live screen: c on the alerts line" "$(tail -3 "$T/screen")"
	# c's events carry ts 1 (1970): the run's elapsed time is the
	# console's clock, not the oldest timestamp a node sent.
	el=$(head -1 "$T/screen" | grep -oE 'elapsed [^ ]+' | cut -d' ' -f2)
	case "$el" in *:*:*|"") fail "live screen: elapsed is the console's" "'$el' (a node's ts 1 taken as the start)" ;;
	*) ok "live screen: elapsed is the console's clock ($el)" ;; esac
	tm kill-server 2>/dev/null
else
	fail "tmux" "not installed (make deps)"
fi

# ---- a flooding node -----------------------------------------------------
cat >"$T/inv2.json" <<'JSON'
{"name": "duo", "defaults": {"transport": "local", "cards": 1, "card_mem": "1GiB"},
 "nodes": [{"name": "a"}, {"name": "f"}]}
JSON
cat >"$T/flood.json" <<'JSON'
{"name": "flood", "stages": [
  {"id": "quiet", "step": "exec", "on": "a", "argv": ["sh", "-c", "sleep 1; echo quiet"], "timeout": 60},
  {"id": "flood", "step": "exec", "on": "f", "argv": ["seq", "1", "2000"], "timeout": 120}]}
JSON
expect_rc 0 "a node over --node-rate: the run passes" timeout $RUN_LIMIT "$DAY0" run "$T/flood.json" \
	--inventory "$T/inv2.json" --session "$T/f.db" --headless --node-rate 200
db="$T/f.db"
check "the flooding node is rate-limited, with an alert" test "$(q "$db" "select count(*) from events where type='alert' and json_extract(body,'$.kind')='rate' and json_extract(body,'$.for')='f'")" -ge 1
contains "headless: rate-limited f" "rate-limited: over the event rate" "$OUT"
# Held to 200 events/s (burst 400), f's 2000 lines take 8 s to get in
# (a rate any build reads faster than); the quiet node's one-second stage
# ends while they do.
cend() { q "$db" "select seq from events where node='console' and type='stage' and json_extract(body,'$.stage_id')='$1' and json_extract(body,'$.state')='end'"; }
check "the quiet node's stage ended while f was still held back" test "$(cend quiet)" -lt "$(cend flood)"
check "every line f sent arrived once (resent after the limit)" test "$(q "$db" "select count(*) from events where node='f' and type='log' and json_extract(body,'$.stage_id')='flood'")" = 2000
expect_rc 0 "audit after the flood" "$STORE" audit "$db"

# ---- ssh links, with the console killed and resumed -------------------
sshd_nodes_start 2 || exit 1
cat >"$T/slow.json" <<'JSON'
{"name": "slow", "stages": [
  {"id": "slow", "step": "exec", "on": "all", "timeout": 60,
   "argv": ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line $i of ${node}; sleep 0.3; done"]}]}
JSON
KH=(--known-hosts "$SSHD_KNOWN_HOSTS" --remote-agent "$T/forger.sh")
db="$T/s.db"
"$DAY0" run "$T/slow.json" --inventory "$SSHD_INV" "${KH[@]}" --session "$db" --headless >"$T/s1.out" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q 'line 3 of node1' <(q "$db" "select body from events where node='node1'" 2>/dev/null) && break; sleep 0.1; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
expect_rc 0 "ssh: the killed run resumes to GO (the forger starts again)" timeout 120 \
	"$DAY0" run --resume "$db" "${KH[@]}" --headless
check "ssh: no forged line is stored" test "$(q "$db" "select count(*) from events where type != 'alert' and body like '%FORGED%'")" = 0
check "ssh: the victim's lines are all stored" test "$(q "$db" "select count(*) from events where node='node1' and type='log' and body like '%line _ of node1%'")" -ge 8
expect_rc 0 "ssh: every node's seqs are complete (audit)" "$STORE" audit "$db"
check "ssh: both consoles charged the forgery to node2" test "$(q "$db" "select count(*) from events where type='alert' and json_extract(body,'$.for')='node2' and json_extract(body,'$.reason')='forged node'")" -ge 2
check "ssh: nothing charged to node1" test "$(q "$db" "select count(*) from events where type='alert' and json_extract(body,'$.for')='node1'")" = 0
