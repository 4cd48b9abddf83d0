# Faults on the road engine -> agent -> ingest -> sqlite, with real
# processes and real files: SIGKILL the agent in the middle of a stage and
# restart it on the same spool; SIGKILL the ingesting process in the middle
# of a batch and restart it; fill the filesystem under the session file.
# Afterwards every event must be in the store exactly once (seq 1..max per
# node, audited) and PRAGMA integrity_check ok.
. "$(dirname "$0")/../lib.sh"
AGENT="$BUILD/day0-agent"
DS="$BUILD/tests/day0_store"

audit() { # name, db
	if "$DS" audit "$2" >"$T/audit.out" 2>&1; then
		ok "$1: every event once, integrity ok ($(head -n 1 "$T/audit.out"))"
	else
		fail "$1: audit" "$(cat "$T/audit.out")"
	fi
}
events_of() { # db, sql condition -> count
	sqlite3 "$1" "SELECT count(*) FROM events WHERE $2"
}

# A stage that writes 400 lines over ~2 s.
LOOP='i=0; while [ $i -lt 400 ]; do echo line $i; i=$((i+1)); sleep 0.005; done'

# ---- SIGKILL the agent mid-stage, restart it on the same spool ------------
cat >"$T/s1.txt" <<EOF
{"cmd":"hello"}
{"cmd":"run","stage_id":"s1","step":"exec","argv":["sh","-c","$LOOP"]}
wait type=log,stage_id=s1,msg=line 60
kill
start
wait type=stage,stage_id=s1,state=end,reason=lost
{"cmd":"run","stage_id":"s2","step":"exec","argv":["sh","-c","echo after"]}
wait type=stage,stage_id=s2,state=end,rc=0
{"cmd":"bye"}
EOF
expect_rc 0 "agent killed mid-stage: the console session completes" "$DS" console \
	"$T/f1.db" "$T/s1.txt" --batch 50 -- "$AGENT" --node k1 --spool "$T/sp1" \
	--sample-hz 10 --heartbeat 0 --cards 1
audit "agent killed mid-stage" "$T/f1.db"
n=$(events_of "$T/f1.db" "type = 'log' AND json_extract(body, '$.stage_id') = 's1'")
[ "${n:-0}" -ge 60 ] && ok "agent killed mid-stage: the stage's lines before the kill are stored ($n)" ||
	fail "agent killed mid-stage: lines before the kill" "$n stored"
n=$(events_of "$T/f1.db" "type = 'hello'")
[ "$n" -ge 3 ] && ok "agent killed mid-stage: both agents said hello" || fail "two hellos" "$n"
n=$(sqlite3 "$T/f1.db" "SELECT count(*) FROM stages WHERE stage_id = 's1' AND state = 'end'")
[ "$n" -eq 1 ] && ok "agent killed mid-stage: the lost stage ended exactly once" || fail "lost stage ended once" "$n end rows"
check "agent killed mid-stage: no run record left" bash -c "! ls '$T'/sp1/stage-* 2>/dev/null"

# ---- SIGKILL the ingesting process mid-batch, restart it -------------------
cat >"$T/s2.txt" <<EOF
{"cmd":"run","stage_id":"s3","step":"exec","argv":["sh","-c","$LOOP"]}
wait type=stage,stage_id=s3,state=end
{"cmd":"bye"}
EOF
run "$DS" console "$T/f2.db" "$T/s2.txt" --batch 1000 --crash-after 150 -- \
	"$AGENT" --node k2 --spool "$T/sp2" --sample-hz 10 --heartbeat 0 --cards 1
[ "$RC" -eq 137 ] && ok "ingest killed mid-batch (SIGKILL after 150 events)" || fail "ingest killed" "exit $RC: $(cat "$ERR")"
before=$(events_of "$T/f2.db" "1")
lines_before=$(events_of "$T/f2.db" "type = 'log' AND json_extract(body, '$.stage_id') = 's3'")
[ "${before:-0}" -lt 150 ] && ok "ingest killed mid-batch: the open batch was lost ($before of 150 committed)" ||
	fail "ingest killed: open batch lost" "$before committed"
# The old agent goes on spooling with nobody reading; the new console
# starts an agent with --takeover, as on a reconnect: the old one ends its
# stage (reason shutdown) and exits, the new one resends everything unacked.
cat >"$T/s3.txt" <<EOF
wait type=stage,stage_id=s3,state=end
wait type=bye
{"cmd":"bye"}
EOF
expect_rc 0 "ingest restarted on the same file and spool" "$DS" console "$T/f2.db" "$T/s3.txt" -- \
	"$AGENT" --node k2 --spool "$T/sp2" --sample-hz 10 --heartbeat 0 --cards 1 --takeover
audit "ingest killed mid-batch" "$T/f2.db"
n=$(events_of "$T/f2.db" "type = 'log' AND json_extract(body, '$.stage_id') = 's3'")
[ "$n" -gt "$lines_before" ] && ok "ingest killed mid-batch: the lost batch and what followed arrived ($lines_before lines before, $n after)" || fail "lines after the crash" "$lines_before before, $n after"
n=$(sqlite3 "$T/f2.db" "SELECT count(*) FROM stages WHERE stage_id = 's3' AND state = 'end' AND rank IS NULL")
[ "$n" -eq 1 ] && ok "ingest killed mid-batch: the stage ended exactly once" || fail "stage ended once" "$n"

# ---- the session file on a full filesystem ------------------------------
mnt="$T/full"
mkdir -p "$mnt"
if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=1M tmpfs "$mnt" 2>"$T/mount.err"; then
	ok "full disk: skipped (cannot mount a tmpfs: $(head -c 200 "$T/mount.err"))"
	exit 0
fi
trap 'umount "$mnt" 2>/dev/null; rm -rf "$T"' EXIT
"$DS" gen 50000 --cards 8 >"$T/gen.jsonl"
run "$DS" ingest "$mnt/s.db" --batch 500 <"$T/gen.jsonl"
[ "$RC" -eq 1 ] && ok "full disk: ingest fails with exit 1" || fail "full disk: exit 1" "exit $RC: $(cat "$ERR")"
contains "full disk: the error says so" "database or disk is full" "$ERR"
contains "full disk: the error names the file" "$mnt/s.db" "$ERR"
contains "full disk: the lost batch is stated" "batch of 500 events was rolled back" "$ERR"
committed=$(sed -n 's/.*; \([0-9]*\) events committed before it.*/\1/p' "$ERR")
# Check a copy (the full filesystem has no room for sqlite's bookkeeping).
mkdir -p "$T/copy"
cp "$mnt"/s.db* "$T/copy/"
audit "full disk: the file up to the last committed batch" "$T/copy/s.db"
n=$(events_of "$T/copy/s.db" "1")
[ -n "$committed" ] && [ "$n" -eq "$committed" ] && [ $((n % 500)) -eq 0 ] &&
	ok "full disk: exactly the $n events of the committed batches are there" ||
	fail "full disk: committed batches" "$n stored, error said '$committed'"
mount -o remount,size=64M "$mnt"
expect_rc 0 "full disk: with room again, ingest of the same stream resumes" \
	"$DS" ingest "$mnt/s.db" --batch 500 <"$T/gen.jsonl"
contains "full disk: what was stored is recognised as duplicates" "duplicates $committed" "$ERR"
audit "full disk: after the resume" "$mnt/s.db"
