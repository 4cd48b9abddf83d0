#!/usr/bin/env bash
# The live console: `day0 demo` (the runner driving tui/live.h) in a
# detached tmux of a fixed size; capture-pane assertions on the node name,
# card bars and checklist states as stages finish, screen keys, resize
# mid-run; then `day0 replay` of its session file jumps to the first
# failure and shows the same checklist.
source "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export LANG=C.UTF-8 LC_ALL=C.UTF-8
source "$DAY0_ROOT/tests/tmux.sh"
tmux_server tui

export DAY0_SESSIONS="$T/sessions"
tm -u new-session -d -s r -x 120 -y 40 \
	"env LANG=C.UTF-8 TERM=screen-256color DAY0_SESSIONS=$T/sessions $DAY0 demo --dir $T/demo --cards 2 2>$T/demo.err; echo EXIT \$?; sleep 120"
wait_for "live: header" "day0 release-day" 120
wait_for "live: the local node" "local "
wait_for "live: a stage running" "run " 60
# Two cards: two bars of 12 columns (used blocks, peak mark, the rest).
if cap | grep -E '^local ' | grep -qE '(·|█|┃){12,} (·|█|┃){12,} '; then ok "live: a bar per card"; else fail "live: a bar per card" "$(cap | grep '^local')"; fi
# checklist states appear as stages finish: facts first.
for i in $(seq 600); do
	n=$(cap | grep -E '^local ' | grep -o '✔' | wc -l)
	[ "$n" -ge 3 ] && break
	cap | grep -q '^EXIT' && break
	sleep 0.2
done
[ "$n" -ge 3 ] && ok "live: checklist row fills as stages pass ($n)" || fail "live: checklist row fills" "$(cap | grep '^local')"
key 4
wait_for "live: checklist screen" "item \\ node" 5
if cap | grep -E '^facts ' | grep -q pass; then ok "live: facts pass on local"; else fail "live: facts pass" "$(cap | grep '^facts')"; fi
# m: the operator's note, recorded as a console marker event.
if ! cap | grep -q '^EXIT'; then
	key m
	sleep 0.3
	tm send-keys -t r -l "rollout-note"
	key Enter
	MARKED=1
fi
key 2
wait_for "live: cards screen" "memory / history" 5
tm resize-window -t r -x 90 -y 30
sleep 0.6
if cap | grep -q '^EXIT'; then ok "live: resize (run already over)"
elif [ "$(cap | wc -l)" -eq 30 ]; then ok "live: resized to 90x30"; else fail "live: resize" "$(cap | wc -l) lines"; fi
key 1
# The verdict (GO or NO-GO in the header) ends the run; q (no question
# asked once the run is over) gives the terminal back, and the runner
# prints where the session is.
# (two cards: the demo lays the day out as tp2 instead of tp2 ep2, so the
# whole day runs; a live run that ended with failures would wait for the
# operator instead)
for i in $(seq 3000); do
	cap | grep -qE '  GO|  NO-GO|ENDED WITH FAILURES' && break
	sleep 0.1
done
shown=$(cap | grep -oE '  GO|  NO-GO|ENDED WITH FAILURES' | head -n 1 | sed 's/^ *//')
if [ -n "$shown" ]; then ok "live: verdict or the hold shown ($shown)"
else fail "live: verdict or the hold shown" "$(cap | head -3)"; fi
cap | grep -q '^EXIT' || key q
sleep 0.5
cap | grep -q 'y/n' && key y
wait_for "demo finished" "EXIT" 60
DB=$(ls "$T"/sessions/*.db 2>/dev/null | head -n 1)
if [ -n "$DB" ]; then ok "session file written"; else fail "session file" "none in $T/sessions"; exit 1; fi

# What the header said is the session file's verdict.
go=$(sqlite3 "$DB" "select json_extract(body,'\$.go') from events where type='verdict'")
case "$shown:$go" in
"GO:1" | "NO-GO:0" | "ENDED WITH FAILURES:0" | "ENDED WITH FAILURES:") ok "live: the verdict shown ($shown) is the file's (go=$go)" ;;
*) fail "live: the verdict shown is the file's" "screen '$shown', file go='$go'" ;;
esac
# Two cards hold the demo's day: its plan fits them and its run is launched.
check "two cards: memory.plan passed (the file)" test \
	"$(sqlite3 "$DB" "select status from checks where item='memory.plan'")" = pass
"$DAY0" replay "$DB" --dump >"$T/dump" 2>/dev/null
contains "replay: facts pass on local" "check facts local pass" "$T/dump"
contains "replay: weights.integrity pass" "check weights.integrity local pass" "$T/dump"
if [ "${MARKED:-}" ]; then
	contains "live: the marker was recorded (m + note)" "rollout-note" "$T/dump"
	check "... as a console marker event in the session file" test \
		"$(sqlite3 "$DB" "select count(*) from events where node='console' and type='marker' and json_extract(body,'$.note')='rollout-note'")" = 1
fi
"$DAY0" replay "$DB" --dump --fold >"$T/fold" 2>/dev/null
if cmp -s "$T/dump" "$T/fold"; then ok "replay: seek == fold at the end"; else fail "replay: seek == fold" "$(diff "$T/dump" "$T/fold" | head -5)"; fi

tm kill-session -t r 2>/dev/null
sleep 0.2
tm -u new-session -d -s r -x 120 -y 40 \
	"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $DB --at 0; sleep 60"
wait_for "replay of the demo: node" "local "
if grep -q '^mark f' "$T/dump"; then
	key ]
	for i in $(seq 30); do
		cap | grep -q 't=0.0s/' || break
		sleep 0.1
	done
	if cap | grep -q 't=0.0s/'; then fail "replay: ] jumps to the first marker/failure" "time did not move"
	else ok "replay: ] jumps to the first marker/failure"; fi
else
	ok "replay: no failure in this run to jump to"
fi
key 4
wait_for "replay: checklist" "item \\ node" 5
# The convert's summary (tensors, bytes, how the source was read, time)
# is its end event's msg: the Log screen shows it as the file has it.
summary=$(sqlite3 "$DB" "select json_extract(body,'\$.msg') from events where node='local' and type='stage' and json_extract(body,'\$.stage_id')='convert' and json_extract(body,'\$.state')='end' and json_extract(body,'\$.src_seq') is not null limit 1")
check "convert: its end event carries the summary ('$summary')" \
	bash -c "grep -qE ' tensors, .* read \((mapped|pread[^)]*)\) in [0-9.]+ s, dtype ' <<<'$summary'"
key G # the replay's end: the convert has ended there, however slow the build
sleep 0.3
key 7
sleep 0.3
key /
tm send-keys -t r -l "tensors,"
key Enter
sleep 0.5
ntens=$(grep -oE '[0-9]+ tensors, [0-9.]+ [KMG]?i?B read' <<<"$summary")
if cap | tr -d '\n' | grep -qF -- "$ntens"; then ok "log: the Log screen shows the convert's summary as stored ($ntens)"
else fail "log: the Log screen shows the convert's summary" "'$ntens' not on screen: $(cap | sed 's/^/    | /')"; fi
key q

# A failed stage held on screen, r reruns it, the run then ends go.
tm kill-session -t r 2>/dev/null
sleep 0.2
printf '{"name": "held", "policy": {"fail_fast": false}, "stages": [
 {"id": "flaky", "step": "exec", "on": "all", "argv": ["sh", "-c", "test -e %s/flag || { touch %s/flag; exit 3; }"]},
 {"id": "after", "step": "exec", "on": "all", "needs": ["flaky"], "argv": ["true"],
  "checks": {"perf.baseline": {"required": false}}}]}\n' "$T" "$T" >"$T/held.json"
printf '{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 1, "card_mem": "1GiB"}]}\n' >"$T/inv1.json"
tm -u new-session -d -s r -x 120 -y 30 \
	"env LANG=C.UTF-8 TERM=screen-256color DAY0_SESSIONS=$T/sessions $DAY0 run $T/held.json --inventory $T/inv1.json --session $T/held.db --tui; echo EXIT \$?; sleep 60"
wait_for "held: a failed run waits for the operator" "ENDED WITH FAILURES" 60
# While held, before any verdict: the item of the stage that was skipped
# reads "not run", as the verdict will say, not "no evidence".
key 1
sleep 0.3
if cap | grep -E '^CHECKLIST' | grep -q ' 1 not run'; then ok "held: the skipped stage's item is counted not run"
else fail "held: the skipped stage's item is counted not run" "$(cap | grep -E '^CHECKLIST')"; fi
key r
sleep 0.5
cap | grep -q 'y/n' && key y
wait_for "held: r reran the failed stage and the run ended go" "  GO" 60
# The run is over and the verdict waits for q: the console must sleep in
# poll, not spin (it once polled its terminal with a zero timeout for as
# long as the screen stayed open, a whole core).  CPU ticks over 2 s of
# waiting: a spinning loop takes ~200 (100 a second), a waiting one ~0.
pid=$(pgrep -f -- "run $T/held.json" | while read -r p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = day0 ] && echo "$p"; done | head -n 1)
sleep 1
if [ -n "$pid" ]; then
	t0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
	sleep 2
	t1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
	check "held: the finished run's console waits idle for q ($((t1 - t0)) CPU ticks in 2 s)" test $((t1 - t0)) -lt 50
else
	fail "held: the finished run's console waits idle for q" "no day0 process for $T/held.json"
fi
key q
wait_for "held: q gives the terminal back, exit 0" "EXIT 0" 20
check "held: the rerun is in the session file" test \
	"$(sqlite3 "$T/held.db" "select count(*) from events where node='console' and type='stage' and json_extract(body,'$.stage_id')='flaky' and json_extract(body,'$.state')='start'")" = 2

# Held again, and this time the operator ends it: q in a held run asks no
# question (nothing is left to stop) and the run ends no-go, exit 1.
tm kill-session -t r 2>/dev/null
sleep 0.2
rm -f "$T/flag"
tm -u new-session -d -s r -x 120 -y 30 \
	"env LANG=C.UTF-8 TERM=screen-256color DAY0_SESSIONS=$T/sessions $DAY0 run $T/held.json --inventory $T/inv1.json --session $T/held2.db --tui; echo EXIT \$?; sleep 60"
wait_for "held2: the failed run waits for the operator" "ENDED WITH FAILURES" 60
key q
sleep 0.5
absent "held2: q in a held run asks no y/n question" "y/n"
wait_for "held2: q ends the held run with its verdict, exit 1" "EXIT 1" 20
check "held2: the session file's verdict is no-go" test \
	"$(sqlite3 "$T/held2.db" "select json_extract(value,'$.go') from session where key='verdict'")" = 0
exit 0
