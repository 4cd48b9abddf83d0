#!/usr/bin/env bash
# day0 replay: a session file built from known event lines (so every
# expectation is exact), shown in a detached tmux of a fixed size;
# capture-pane assertions at --at T, then seek/speed keys, resize,
# NO_COLOR, --ascii, 80x24, and seek == fold through --dump.
source "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
STORE="$BUILD/tests/day0_store"
DB="$T/s.db"
export LANG=C.UTF-8 LC_ALL=C.UTF-8
source "$DAY0_ROOT/tests/tmux.sh"
tmux_server replay

T0=1795940000000000000
S=1000000000
G=1073741824
declare -A SEQ
ev() { # node ts type fields
	SEQ[$1]=$((${SEQ[$1]:-0} + 1))
	printf '{"v":1,"seq":%d,"ts":%d,"node":"%s","type":"%s",%s}\n' \
		"${SEQ[$1]}" "$2" "$1" "$3" "$4"
}
# Two nodes, two cards of 16 GiB, samples at 1 Hz for 60 s.
#   n01 card 0: used = (k+1) GiB at second k, peak the same; card 1: 2 GiB
#   n02 card 0: 4 GiB; card 1: 15 GiB (over 90%: an alert); silent from 40 s
# Checks: facts at 5 s (n01 pass, n02 warn), weights.integrity n01 pass at
# 20 s, marker "before comm" at 25 s, comm.bandwidth n02 fail at 30 s,
# stage comm-1 on n02 ends rc 1 at 31 s; the console's stage comm starts
# at 26 s.
gen() {
	for k in $(seq 0 59); do
		ts=$((T0 + k * S))
		for n in n01 n02; do
			[ $n = n02 ] && [ $k -ge 40 ] && continue
			if [ $k = 0 ]; then
				for c in 0 1; do
					ev $n $ts sample "\"card\":$c,\"metric\":\"mem.budget\",\"value\":$((16 * G))"
				done
			fi
			if [ $n = n01 ]; then u0=$(((k + 1) * G)); u1=$((2 * G)); else u0=$((4 * G)); u1=$((15 * G)); fi
			ev $n $ts sample "\"card\":0,\"metric\":\"mem.used\",\"value\":$u0"
			ev $n $ts sample "\"card\":0,\"metric\":\"mem.peak\",\"value\":$u0"
			ev $n $ts sample "\"card\":1,\"metric\":\"mem.used\",\"value\":$u1"
			ev $n $ts sample "\"card\":1,\"metric\":\"mem.peak\",\"value\":$u1"
			ev $n $ts sample "\"card\":-1,\"metric\":\"net.rx_bps\",\"value\":$((k * 1000))"
		done
		case $k in
		5)
			ev n01 $((ts + 1)) check '"item":"facts","status":"pass","detail":"2 cores ok","value":0,"threshold":0'
			ev n02 $((ts + 1)) check '"item":"facts","status":"warn","detail":"mpi version unknown","value":0,"threshold":0' ;;
		20)
			ev n01 $((ts + 1)) check '"item":"weights.integrity","status":"pass","detail":"1 shard, sha256 ok","value":0,"threshold":0' ;;
		25)
			ev console $((ts)) marker '"note":"before comm"' ;;
		26)
			ev console $((ts + 1)) stage '"stage_id":"comm","stage":"comm","state":"start","nodes":["n01","n02"]' ;;
		30)
			ev n02 $((ts)) check '"item":"comm.bandwidth","status":"fail","detail":"busbw 1.5 GB/s < 10","value":1.5,"threshold":10' ;;
		31)
			ev n02 $((ts)) stage '"stage":"comm","stage_id":"comm-1","state":"end","progress":1.0,"rc":1,"msg":"exit 1"' ;;
		esac
	done
}
gen >"$T/events.jsonl"
check "ingest the events" "$STORE" ingest "$DB" <"$T/events.jsonl"

# --------------------------------------------------------------- no tmux
expect_rc 2 "no file: usage error" "$DAY0" replay
expect_rc 2 "missing file: exit 2" "$DAY0" replay "$T/nope.db"
contains "missing file named" "nope.db" "$ERR"
echo "not sqlite" >"$T/bad.db"
expect_rc 2 "not a session: exit 2" "$DAY0" replay "$T/bad.db" --dump
contains "bad file named" "bad.db" "$ERR"
expect_rc 2 "bad --at: exit 2" "$DAY0" replay "$DB" --at x --dump
expect_rc 0 "--help" "$DAY0" replay --help
contains "--help shows --baseline" "--baseline" "$OUT"

# seek == fold from zero (the screen is a function of the log up to t)
for at in 0 3.5 12.5 25 30.000000001 31 45 59 100; do
	"$DAY0" replay "$DB" --dump --at $at >"$T/seek" 2>"$T/seek.err"
	"$DAY0" replay "$DB" --dump --fold --at $at >"$T/fold" 2>"$T/fold.err"
	if cmp -s "$T/seek" "$T/fold" && [ -s "$T/seek" ]; then ok "dump seek == fold at $at"
	else fail "dump seek == fold at $at" "$(diff "$T/seek" "$T/fold" | head -5)"; fi
done
"$DAY0" replay "$DB" --dump --at 12.5 >"$T/d"
contains "dump at 12.5: n01 card 0 used 13 GiB" "card 0 ts=$((T0 + 12 * S)) used=1.39586e+10" "$T/d"
contains "dump at 12.5: facts warn on n02" "check facts n02 warn" "$T/d"
"$DAY0" replay "$DB" --dump --at $((T0 + 12 * S)) >"$T/d2"
contains "--at in unix ns" "card 0 ts=$((T0 + 12 * S)) used=1.39586e+10" "$T/d2"

if ! command -v tmux >/dev/null; then
	fail "tmux" "not installed (make deps)"
	exit 1
fi

# ------------------------------------------------------------------ tmux
start() { # W H ARGS...
	local w=$1 h=$2; shift 2
	tm kill-session -t r 2>/dev/null
	tm -u new-session -d -s r -x "$w" -y "$h" \
		"env LANG=C.UTF-8 TERM=screen-256color $*; sleep 60"
	sleep 0.3
}

start 120 40 "$DAY0" replay "$DB" --at 12.5
wait_for "at 12.5: time shown" "t=12.5s/59.0s"
wait_for "paused at --at" "PAUSED"
wait_for "node n01 listed" "n01"
wait_for "node n02 listed" "n02"
wait_for "n01 fullest card 81%" "81%"
wait_for "n02 fullest card 94%" "94%"
wait_for "alert: n02 card 1 over 90%" "mem n02/1 94%"
if cap | grep -E '^n01 ' | grep -q "█"; then ok "memory bars drawn"; else fail "memory bars drawn" "$(cap | grep '^n01')"; fi
key 2
wait_for "cards: n01 card 0 used 13.0G" "13.0G"
wait_for "cards: budget 16.0G" "16.0G"
wait_for "cards: card 0 at 81%" "81%"
key 4
wait_for "checklist screen" "item \\ node"
if cap | grep -E '^facts ' | grep -q "pass.*warn"; then ok "checklist: facts pass on n01, warn on n02"
else fail "checklist: facts pass/warn" "$(cap | grep '^facts')"; fi
if cap | grep -E '^weights.integrity' | grep -q pass; then fail "no weights.integrity yet at 12.5" "$(cap | grep '^weights.integrity')"
else ok "no weights.integrity yet at 12.5"; fi
key .
wait_for "'.' seeks 10 s" "t=22.5s/"
if cap | grep -E '^weights.integrity' | grep -q pass; then ok "checklist at 22.5: weights.integrity pass"
else fail "checklist at 22.5" "$(cap | grep '^weights.integrity')"; fi
key Right
wait_for "-> seeks 1 s" "t=23.5s/"
key Left Left
wait_for "<- seeks back 1 s" "t=21.5s/"
key ,
wait_for "',' seeks back 10 s" "t=11.5s/"
key ]
wait_for "] jumps to the marker" "t=25.0s/"
key ]
wait_for "] jumps to the failure" "t=30.0s/"
if cap | grep -E '^comm.bandwidth' | grep -q FAIL; then ok "checklist at 30: comm.bandwidth FAIL on n02"
else fail "checklist at 30" "$(cap | grep '^comm.bandwidth')"; fi
key [
wait_for "[ jumps back to the marker" "t=25.0s/"
key g
wait_for "g: start" "t=0.0s/"
key G
wait_for "G: end" "t=59.0s/"
key 1
wait_for "n02 silent at the end" "silent n02 20.0s"
key +
wait_for "+ doubles the speed" "x2 "
key - -
wait_for "- halves the speed" "x0.5 "
key 7
wait_for "log screen shows events" "mem.used"
key /
tm send-keys -t r -l "before"
key Enter
wait_for "log filter: the marker" "before comm"
absent "log filter hides samples" "mem.used"
key 1
tm resize-window -t r -x 100 -y 30
sleep 0.5
w=$(cap | awk '{ if (length($0) > m) m = length($0) } END { print m }')
n=$(cap | wc -l)
if [ "$n" -eq 30 ] && cap | tail -n 2 | head -n 1 | grep -qE '^\[.*\]$'; then ok "resize: redrawn at 100x30"
else fail "resize: redrawn at 100x30" "lines $n, widest $w"; fi
wait_for "resize: nodes still shown" "n02"
key space
wait_for "space plays (at the end: pauses again)" "PAUSED"
key q
sleep 0.3
if tm list-panes -t r -F '#{pane_current_command}' | grep -q sleep; then ok "q quits"; else fail "q quits" "still running"; fi

# colours: on by default, off under NO_COLOR and --no-color
start 120 40 "$DAY0" replay "$DB" --at 12.5
wait_for "colour run drawn" "n02"
if cap -e | grep -qE $'\e\\[(3[1-7]|38;5;[0-9]+)m'; then ok "colours by default"; else fail "colours by default" "no colour codes"; fi
start 120 40 env NO_COLOR=1 "$DAY0" replay "$DB" --at 12.5
wait_for "NO_COLOR run drawn" "n02"
if cap -e | grep -qE $'\e\\[(3[1-7]|38;5;[0-9]+)m'; then fail "NO_COLOR: no colours" "colour codes found"; else ok "NO_COLOR: no colours"; fi
wait_for "NO_COLOR: alert still shown" "mem n02/1 94%"

# --ascii: nothing but ASCII on screen (no box-drawing, no blocks)
start 120 40 "$DAY0" replay "$DB" --at 12.5 --ascii
wait_for "ascii run drawn" "mem n02/1 94%"
if cap | LC_ALL=C grep -q '[^ -~]'; then fail "--ascii: only ASCII" "$(cap | LC_ALL=C grep -n '[^ -~]' | head -3)"
else ok "--ascii: only ASCII"; fi
if cap | grep -E '^n01 ' | grep -q '#'; then ok "--ascii: bars of #"; else fail "--ascii: bars of #" "$(cap | grep '^n01')"; fi
start 120 40 "$DAY0" replay "$DB" --at 12.5
wait_for "utf-8 run drawn" "mem n02/1 94%"
if cap | LC_ALL=C grep -q '[^ -~]'; then ok "UTF-8 by default"; else fail "UTF-8 by default" "only ASCII"; fi

# 80x24, the minimum
start 80 24 "$DAY0" replay "$DB" --at 12.5
wait_for "80x24: time" "t=12.5s/59.0s"
wait_for "80x24: nodes" "n02"
wait_for "80x24: alert" "mem n02/1"
key 2
wait_for "80x24: cards" "13.0G"
n=$(cap | wc -l)
[ "$n" -eq 24 ] && ok "80x24: 24 lines" || fail "80x24: 24 lines" "$n"
# smaller than the minimum: degrades, does not crash
tm resize-window -t r -x 40 -y 10
sleep 0.4
wait_for "40x10: still drawing" "day0"
key q
sleep 0.3
if tm list-panes -t r -F '#{pane_current_command}' | grep -q sleep; then ok "quits after a tiny window"; else fail "quits after a tiny window" "still running"; fi

# --baseline: deltas against another session
sed 's/"mem.peak","value":16106127360/"mem.peak","value":8589934592/' "$T/events.jsonl" |
	"$STORE" ingest "$T/base.db" 2>/dev/null
start 120 40 "$DAY0" replay "$DB" --at 50 --baseline "$T/base.db"
key 2 l
wait_for "baseline: peak delta of n02 card 1 (+87.5%)" "+87.5%"
exit 0
