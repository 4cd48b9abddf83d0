#!/usr/bin/env bash
# The war room's Overview against the session file: a run over a local
# node and one whose port is closed.  What the screen shows (tmux at
# 160x48 and 80x24, `day0 replay --dump`) is compared with the events:
# the unreachable node stays in the grid with its reason; the node that
# said bye is done, not silent, and nothing is silent after the verdict;
# the clock stops at the verdict; the stage timeline shows a running
# stage's progress (the agents' own) and ETA, pending stages, durations;
# the checklist by name carries its evidence line; the last alerts.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export LANG=C.UTF-8 LC_ALL=C.UTF-8 DAY0_SESSIONS="$T/sessions"
SOCK="day0-wr-$$"
tm() { tmux -L "$SOCK" "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$T"' EXIT
if ! command -v tmux >/dev/null || ! command -v sqlite3 >/dev/null; then
	fail "tools" "tmux and sqlite3 are needed (make deps)"
	exit 1
fi
closed=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat >"$T/inv.json" <<JSON
{"name": "mix", "nodes": [
  {"name": "local", "transport": "local", "cards": 2, "card_mem": "1GiB", "labels": ["rack1", "gpu-a"]},
  {"name": "gone", "host": "127.0.0.1", "port": $closed, "cards": 2, "card_mem": "1GiB"}]}
JSON
cat >"$T/pb.json" <<'JSON'
{"name": "quick", "stages": [
  {"id": "facts", "step": "facts", "on": "all", "checks": {"facts": {}}},
  {"id": "gen", "step": "gen-model", "on": "all", "needs": ["facts"],
   "args": ["--arch", "qwen3", "--layers", "24", "--hidden", "512", "--heads", "8",
            "--kv-heads", "4", "--vocab", "4096", "${work}/m", "--force"]},
  {"id": "hello", "step": "exec", "on": "all", "needs": ["gen"], "argv": ["echo", "${node}"]}]}
JSON
expect_rc 1 "the run ends NO-GO (one node unreachable)" timeout 120 "$DAY0" run \
	"$T/pb.json" --inventory "$T/inv.json" --session "$T/s.db" --headless
S="$T/s.db"
q() { sqlite3 "$S" "$1"; }
"$DAY0" replay "$S" --dump >"$T/dump" 2>/dev/null
why=$(q "select json_extract(body,'$.msg') from events where node='console' and type='node' and json_extract(body,'$.name')='gone'")
check "the session says why gone is unreachable ($why)" bash -c "[[ '$why' == *'connection refused'* ]]"
contains "the view keeps gone as unreachable with its reason" "state=unreachable why=$why" "$T/dump"
contains "the view has local done after its bye" "state=done" "$T/dump"
check "no node is silent at the end" bash -c "! grep -q '^node .*stale=1' '$T/dump'"
vts=$(q "select ts from events where node='console' and type='verdict'")
t0=$(q "select min(ts) from events")
contains "elapsed stops at the verdict (verdict ts - first event)" "ts=$vts elapsed=$((vts - t0))" "$T/dump"
"$DAY0" replay "$S" --dump --fold >"$T/fold" 2>/dev/null
check "seek and fold agree on node states and the verdict" diff <(grep -E '^(node|verdict)' "$T/dump") <(grep -E '^(node|verdict)' "$T/fold")

cap() { tm capture-pane -p -t r; }
show() { # COLS ROWS ARGS...: the screen of `day0 replay ARGS`
	local c=$1 r=$2 i
	shift 2
	tm kill-session -t r 2>/dev/null
	tm -u new-session -d -s r -x "$c" -y "$r" \
		"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $*; sleep 60"
	for i in $(seq 100); do cap | grep -q "PAUSED" && break; sleep 0.1; done
	sleep 0.3
	cap >"$T/screen"
}
tm new-session -d -s keep "sleep 600"
for size in "160 48" "80 24"; do
	set -- $size
	show "$1" "$2" "$S"
	check "$1x$2: gone stays in the grid as unreachable" grep -qE '^gone +unreachable' "$T/screen"
	if [ "$1" -ge 120 ]; then
		check "$1x$2: local's inventory labels beside its name" grep -qE '^local +\[rack1,gpu-a\] +done' "$T/screen"
	else
		check "$1x$2: local is done" grep -qE '^local +done' "$T/screen"
	fi
	check "$1x$2: no silent alarm after the verdict" bash -c "! grep -q silent '$T/screen'"
	check "$1x$2: the checklist names facts with gone's reason" \
		grep -qE "facts +fail +.*gone.*connection refused" "$T/screen"
	check "$1x$2: the timeline lists every stage as done" \
		bash -c "grep -qE '^  facts +done' '$T/screen' && grep -qE '^  gen +done' '$T/screen' && grep -qE '^  hello +done' '$T/screen'"
	check "$1x$2: the last alerts name gone's failure" grep -qE '\] gone +facts failed' "$T/screen"
done
# Mid-stage: the agent's progress of gen at some time, as the session has it.
read -r at p <<<"$(q "select (ts - $t0) / 1e9 + 0.0005, json_extract(body,'$.progress') from events where node='local' and type='stage' and json_extract(body,'$.stage_id')='gen' and json_extract(body,'$.state')='progress' and json_extract(body,'$.progress') between 0.3 and 0.7 order by ts limit 1" | tr '|' ' ')"
if [ -z "${at:-}" ]; then
	fail "gen reports progress" "no progress event between 0.3 and 0.7 in the session"
else
	pct=$(python3 -c "print('%3.0f%%' % ($p * 100))")
	show 160 48 "$S" --at "$at"
	check "mid-run: gen runs at the agent's progress ($pct) with an ETA" \
		grep -qE "^  gen +running .*$pct .*ETA" "$T/screen"
	check "mid-run: hello is pending" grep -qE '^  hello +pending' "$T/screen"
	check "mid-run: the header shows gen's progress" grep -qE "stage gen +$(echo $pct | tr -d ' ')" "$T/screen"
	# Bars widen with the terminal: the card bar is wider at 160 than at 80.
	w160=$(grep -E '^local ' "$T/screen" | grep -oE '[·█┃]+' | head -1 | wc -m)
	show 80 24 "$S" --at "$at"
	w80=$(grep -E '^local ' "$T/screen" | grep -oE '[·█┃]+' | head -1 | wc -m)
	check "card bars widen with the terminal ($w80 at 80 cols, $w160 at 160)" test "$w160" -gt "$w80"
fi

# Numerics: op, layer and e2e rows of a real validate, as ingested events.
"$ENGINE" gen-model --arch qwen3 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
	--vocab 128 "$T/m" >/dev/null
"$ENGINE" run "$T/m" --tp 1 --tokens 3,1,4,1,5 --dump-logits "$T/lg.st" \
	--dump-layers "$T/ld" >/dev/null 2>&1
DAY0_NODE=n1 "$ENGINE" validate "$T/m" --tokens 3,1,4,1,5 --logits "$T/lg.st" \
	--layers-dir "$T/ld" --events >"$T/ev.jsonl" 2>/dev/null
"$BUILD/tests/day0_store" ingest "$T/num.db" <"$T/ev.jsonl" >/dev/null
N="$T/num.db"
for size in "120 40" "80 30"; do
	set -- $size
	show "$1" "$2" "$N"
	tm send-keys -t r 5
	sleep 0.5
	cap >"$T/screen"
	check "$1x$2 numerics: no nan" bash -c "! grep -qi nan '$T/screen'"
	names=$(sqlite3 "$N" "select distinct name from numerics")
	missing=$(while IFS= read -r nm; do grep -qF -- "$nm" "$T/screen" || echo "$nm"; done <<<"$names")
	check "$1x$2 numerics: every name whole (${missing:-all there})" test -z "$missing"
	read -r kl top1 <<<"$(sqlite3 "$N" "select printf('%.2e', kl), printf('%.1f%%', top1) from numerics where level='e2e'" | tr '|' ' ')"
	check "$1x$2 numerics: the e2e row has KL $kl and top-1 $top1" \
		bash -c "grep -E '^e2e ' '$T/screen' | grep -qF -- '$kl' && grep -E '^e2e ' '$T/screen' | grep -qF -- '$top1'"
done

# Log: time, node, kind and a readable message; the selected line wraps
# whole; j shows the raw JSON.
show 100 30 "$S"
tm send-keys -t r 7
sleep 0.5
cap >"$T/screen"
check "log: no raw JSON by default" bash -c "! grep -q '{\"v\":1' '$T/screen'"
last=$(q "select body from events order by ts desc, node desc, seq desc limit 1")
tail_of_last=$(python3 -c 'import json,sys; o=json.loads(sys.argv[1]); print(str(list(o.values())[-1])[-12:])' "$last")
check "log: the selected (newest) line is shown whole, wrapped ('$tail_of_last')" grep -qF -- "$tail_of_last" "$T/screen"
tm send-keys -t r / && tm send-keys -t r -l '"fail"' && tm send-keys -t r Enter
sleep 0.4
cap >"$T/screen"
check "log: the console's check reads as item, status, node and detail" \
	grep -qE "console +check +facts fail \(gone\): gone \(127.0.0.1:$closed\): connection" "$T/screen"
tm send-keys -t r j
sleep 0.4
cap >"$T/screen"
check "log: j shows the raw JSON" grep -qF '{"v":1,"seq":' "$T/screen"
