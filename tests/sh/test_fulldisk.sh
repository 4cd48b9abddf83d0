#!/usr/bin/env bash
# A lost write is never GO (docs/store.md, "A full disk"): `day0 run` with
# its session file on a 2 MiB tmpfs.  Before the first stage the console
# warns that the volume is small; when a commit fails it stops acking and
# starting stages, says `STORE: disk full at PATH`, and either goes on when
# room comes back (every event then stored, seq audit) or, after
# --store-wait, ends incomplete (exit 3, no verdict) and `--resume` later
# completes the session.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
STORE="$BUILD/tests/day0_store"
export DAY0_SESSIONS="$T/sessions"
q() { sqlite3 "$1" "$2"; }
mnt="$T/full"
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=2m tmpfs "$mnt" 2>"$T/mount.err"; then
	fail "mount a 2 MiB tmpfs" "$(head -c 300 "$T/mount.err") (the test runs as root)"
	exit 0
fi
trap 'umount "$mnt" 2>/dev/null; rm -rf "$T"' EXIT

cat >"$T/inv.json" <<'JSON'
{"name": "duo", "defaults": {"transport": "local", "cards": 1, "card_mem": "1GiB"},
 "nodes": [{"name": "a"}, {"name": "b"}]}
JSON
# ~1 MiB of log lines per node: more than the volume holds.
cat >"$T/fill.json" <<'JSON'
{"name": "fill", "stages": [
  {"id": "fill", "step": "exec", "on": "all", "timeout": 3600,
   "argv": ["sh", "-c", "i=0; while [ $i -lt 12000 ]; do echo line $i of a long stage that writes a lot of text; i=$((i+1)); done"]},
  {"id": "after", "step": "exec", "on": "all", "needs": ["fill"], "argv": ["echo", "after"], "timeout": 60}]}
JSON
lines() { # db node -> the fill stage's lines stored
	q "$1" "select count(*) from events where node='$2' and type='log' and json_extract(body,'$.stage_id')='fill'"
}

# ---- no room, and none comes: incomplete, then --resume -----------------
expect_rc 3 "a full disk that stays full: the run ends incomplete (exit 3)" timeout 120 \
	"$DAY0" run "$T/fill.json" --inventory "$T/inv.json" --session "$mnt/f.db" --headless --store-wait 3
contains "before the first stage: the volume is too small for the run's samples" "MiB free; this run may store about" "$ERR"
contains "headless: STORE: disk full at the session file" "STORE: disk full at $mnt/f.db" "$OUT"
contains "the verdict is INCOMPLETE, not GO" "verdict: INCOMPLETE" "$OUT"
contains "the checklist line says it counts the file, which holds only part" "checklist in the session file:" "$OUT"
check "... and never GO" bash -c "! grep -q 'verdict: GO' '$OUT'"
contains "it says how to resume" "day0 run --resume $mnt/f.db" "$OUT"
mkdir -p "$T/copy"
cp "$mnt"/f.db* "$T/copy/"
held=$(sed -n 's/.* events the file lacks are kept in \(.*\) (--resume stores them)$/\1/p' "$OUT")
check "the console's events the file lacks are kept in a file it names" test -n "$held" -a -s "$held"
check "... and they are the console's own (the stall alert among them)" \
	grep -q '"node":"console".*"kind":"store","state":"stalled"' "$held"
held_copy="$T/held.copy"
cp "$held" "$held_copy" 2>/dev/null
held_seqs=$(jq -r .seq "$held" 2>/dev/null | paste -sd, -)
check "the session file itself lacks every one of them" test -n "$held_seqs" -a "$(q "$T/copy/f.db" "select count(*) from events where node='console' and seq in ($held_seqs)")" = 0
check "the session file holds no verdict" test "$(q "$T/copy/f.db" "select count(*) from events where node='console' and type='verdict'")" = 0
check "... and no stage after the stalled one started" test "$(q "$T/copy/f.db" "select count(*) from events where node='console' and type='stage' and json_extract(body,'$.stage_id')='after'")" = 0
# The report of the incomplete file: its manifest item is the console's,
# written at the run's end, never "no stage of the playbook produces it".
expect_rc 0 "the incomplete session reports" "$DAY0" report "$T/copy/f.db" --format json
check "... repro.manifest: not run, the console records it when the run ends" test \
	"$(jq -r '.checklist[] | select(.item == "repro.manifest") | .status + ": " + .evidence[0].detail' "$OUT")" = \
	"not run: the console records it when the run ends; this run has not ended"
mount -o remount,size=64m "$mnt"
expect_rc 0 "with room again, --resume completes the session (GO)" timeout 120 \
	"$DAY0" run --resume "$mnt/f.db" --headless
contains "the resumed run's verdict is GO" "verdict: GO" "$OUT"
contains "the resume stored the kept console events first" "console events the stalled run had kept" "$OUT"
check "every kept console event is in the session now" test "$(q "$mnt/f.db" "select count(*) from events where node='console' and seq in ($held_seqs)")" = "$(wc -l <"$held_copy")"
check "... and the file that kept it is gone" test ! -e "$held"
check "the console's seqs have no gap" test "$(q "$mnt/f.db" "select max(seq) - count(*) from events where node='console'")" = 0
expect_rc 0 "after the resume every node's seqs are complete (audit)" "$STORE" audit "$mnt/f.db"
check "every line of node a is stored" test "$(lines "$mnt/f.db" a)" = 12000
check "every line of node b is stored" test "$(lines "$mnt/f.db" b)" = 12000

# ---- room comes back during the run: it goes on --------------------------
umount "$mnt"
mount -t tmpfs -o size=2m tmpfs "$mnt"
"$DAY0" run "$T/fill.json" --inventory "$T/inv.json" --session "$mnt/g.db" --headless \
	--store-wait 60 >"$T/g.out" 2>"$T/g.err" &
pid=$!
for _ in $(seq 1 300); do grep -q 'STORE: disk full' "$T/g.out" && break; sleep 0.1; done
contains "while full: STORE: disk full at the session file" "STORE: disk full at $mnt/g.db" "$T/g.out"
mount -o remount,size=64m "$mnt"
wait "$pid"
rc=$?
[ "$rc" = 0 ] && ok "room back within --store-wait: the run goes on to GO" || fail "room back: exit 0" "exit $rc: $(tail -c 400 "$T/g.out")"
contains "it says the store writes again" "STORE: writing again to $mnt/g.db" "$T/g.out"
expect_rc 0 "every node's seqs are complete (audit)" "$STORE" audit "$mnt/g.db"
check "every line of node a is stored" test "$(lines "$mnt/g.db" a)" = 12000
check "every line of node b is stored" test "$(lines "$mnt/g.db" b)" = 12000
check "the stall is recorded in the session (an alert of the console)" test "$(q "$mnt/g.db" "select count(*) from events where type='alert' and json_extract(body,'$.kind')='store' and json_extract(body,'$.state')='stalled'")" -ge 1
check "the verdict is stored once" test "$(q "$mnt/g.db" "select count(*) from events where node='console' and type='verdict'")" = 1

# ---- on screen (the live TUI in tmux) -------------------------------------
if ! command -v tmux >/dev/null; then
	fail "tmux" "not installed (make deps)"
	exit 0
fi
umount "$mnt"
mount -t tmpfs -o size=2m tmpfs "$mnt"
SOCK="day0-full-$$"
tm() { tmux -L "$SOCK" "$@"; }
trap 'tm kill-server 2>/dev/null; umount "$mnt" 2>/dev/null; rm -rf "$T"' EXIT
tm new-session -d -s r -x 160 -y 40 \
	"env LANG=C.UTF-8 TERM=screen-256color DAY0_SESSIONS=$T/sessions $DAY0 run $T/fill.json --inventory $T/inv.json --session $mnt/t.db --store-wait 30 2>$T/t.err; echo EXIT \$?; sleep 60"
seen=""
for _ in $(seq 600); do
	if tm capture-pane -p -t r | grep -qF "STORE: disk full at $mnt/t.db"; then seen=1; break; fi
	sleep 0.1
done
[ -n "$seen" ] && ok "live screen: STORE: disk full at the session file, on the alerts line" ||
	fail "live screen: STORE: disk full" "$(tm capture-pane -p -t r | tail -5)"
tm kill-server 2>/dev/null
