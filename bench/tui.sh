#!/usr/bin/env bash
# The console at scale: 1024 cards (NODES x CARDS) sampling at 10 Hz.
#
#   0. the console: `day0 run` of a playbook that holds for SECS seconds on
#      one local node whose agent simulates NODES x CARDS cards
#      (`day0-agent --simulate`), live TUI in a 200x60 tmux;
#   1. live: bench/tui_live drives tui/live.h as the runner does (every
#      event to live_event, live_tick each loop turn) in a 200x60 tmux,
#      fed by bench/tui_feed (a simulated cluster paced on the wall clock;
#      stands in for `day0-agent --simulate N`): once drawing only, once
#      also ingesting into a session file with a commit every 100 ms (the
#      runner's whole path);
#   2. replay --follow of a session file being written by day0_store ingest;
#   3. seek: `day0 replay --dump --at T` on a file of SEEK_EVENTS events.
# Prints the console's CPU share (of one core) and the redraw p50/p99;
# the targets are under 10% and under 16 ms.
#
#   NODES=128 CARDS=8 HZ=10 SECS=20 SEEK_EVENTS=10000000 bash bench/tui.sh
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
NODES=${NODES:-128}
CARDS=${CARDS:-8}
HZ=${HZ:-10}
SECS=${SECS:-20}
SEEK_EVENTS=${SEEK_EVENTS:-10000000}
CC=${CC:-cc}
W=$(mktemp -d /tmp/day0-bench-tui.XXXXXX)
SOCK=day0-bench-$$
# (|| true: no server left is fine; under set -e a failing command in the
# EXIT trap would make the script's status 1 and make bench's 2)
trap 'tmux -L $SOCK kill-server 2>/dev/null || true; rm -rf "$W"' EXIT
die() { echo "bench/tui.sh: $*" >&2; exit 1; }
command -v tmux >/dev/null || die "tmux not found (make deps)"
[ -x "$BUILD/day0" ] || die "$BUILD/day0 missing: make build"

LIBS="$BUILD/libday0tui.a $BUILD/libday0agent.a $BUILD/libday0store.a $BUILD/libday0engine.a"
$CC -O2 -o "$W/feed" bench/tui_feed.c || die "cc bench/tui_feed.c"
$CC -std=c11 -D_GNU_SOURCE -O2 -pthread -Iengine -Istore -Iagent -Itui \
	-o "$W/live" bench/tui_live.c $LIBS -lsqlite3 -lssh2 -lncursesw \
	-ljansson -lcrypto $(mpicc --showme:link 2>/dev/null) -lopenblas -lm -ldl ||
	die "cc bench/tui_live.c"
export LANG=C.UTF-8

echo "# $((NODES * CARDS)) cards ($NODES nodes x $CARDS) at $HZ Hz for $SECS s, 200x60 terminal"
fig() { # label statsfile
	[ -s "$2" ] || die "$1: no figures written"
	awk -v l="$1" '{ v[$1] = $2 }
		END { printf "%-34s cpu %5.1f%% of a core  redraw p50 %6.2f ms  p99 %6.2f ms  (%d frames, %d events)\n",
		      l, v["cpu_share"] * 100, v["redraw_p50_ms"], v["redraw_p99_ms"], v["frames"], v["events"] }' "$2"
}
wait_file() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

live_run() { # label extra-args...
	local label=$1; shift
	rm -f "$W/ev" "$W/live.stats" "$W/live.db"*
	mkfifo "$W/ev"
	tmux -L $SOCK kill-server 2>/dev/null || true
	tmux -L $SOCK -u new-session -d -x 200 -y 60 \
		"env TERM=screen-256color $W/live $W/ev --stats $W/live.stats $*"
	"$W/feed" "$NODES" "$CARDS" "$HZ" "$SECS" >"$W/ev"
	sleep 0.5
	tmux -L $SOCK send-keys q y
	wait_file "$W/live.stats" || die "$label: no stats"
	fig "$label" "$W/live.stats"
}
# The console itself: `day0 run` with a local agent simulating every card
# (day0-agent --simulate, the `values` sample form), the live TUI in tmux.
# Its CPU share is the whole console: links, ingest into the session file,
# acks, the runner, the fold and the drawing.
console_run() {
	local cards=$((NODES * CARDS))
	rm -f "$W/run.stats" "$W/run.db"*
	printf '{"name":"sim","nodes":[{"name":"sim","transport":"local","cards":%d,"card_mem":"80GiB"}],"agent_args":["--simulate","%d","--heartbeat","0"]}\n' \
		"$cards" "$cards" >"$W/inv.json"
	printf '{"name":"scale","stages":[{"id":"hold","step":"exec","on":"all","argv":["sleep","%s"]}]}\n' \
		"$SECS" >"$W/pb.json"
	tmux -L $SOCK kill-server 2>/dev/null || true
	tmux -L $SOCK -u new-session -d -x 200 -y 60 \
		"env TERM=screen-256color DAY0_SESSIONS=$W/sessions $BUILD/day0 run $W/pb.json --inventory $W/inv.json --session $W/run.db --sample-hz $HZ --tui --stats $W/run.stats"
	for _ in $(seq $((SECS * 10 + 300))); do
		tmux -L $SOCK capture-pane -p 2>/dev/null | grep -q " GO" && break
		sleep 0.1
	done
	tmux -L $SOCK send-keys q
	wait_file "$W/run.stats" || die "day0 run: no stats"
	for _ in $(seq 100); do tmux -L $SOCK has-session 2>/dev/null || break; sleep 0.1; done
	fig "day0 run (simulated agent)" "$W/run.stats"
	echo "  (session: $(sqlite3 "$W/run.db" "select count(*) from events") events, $(sqlite3 "$W/run.db" "select count(*) from samples") card samples)"
}
console_run
live_run "live (fold + draw)"
live_run "live + ingest, a line per card sample" --db "$W/live.db"

# replay --follow of a growing file
rm -f "$W/f.db"* "$W/f.stats"
"$W/feed" 1 1 1 0.1 | "$BUILD/tests/day0_store" ingest "$W/f.db" 2>/dev/null
tmux -L $SOCK kill-server 2>/dev/null || true
tmux -L $SOCK -u new-session -d -x 200 -y 60 \
	"env TERM=screen-256color $BUILD/day0 replay $W/f.db --follow --stats $W/f.stats"
"$W/feed" "$NODES" "$CARDS" "$HZ" "$SECS" | sed 's/"node":"n/"node":"m/' |
	"$BUILD/tests/day0_store" ingest "$W/f.db" --batch 2000 2>/dev/null
sleep 0.5
tmux -L $SOCK send-keys q
wait_file "$W/f.stats" || die "replay --follow: no stats"
fig "replay --follow (growing file)" "$W/f.stats"

# seek on a big file
echo "# seek: generating $SEEK_EVENTS events (64 cards, day0_store gen)"
"$BUILD/tests/day0_store" gen "$SEEK_EVENTS" | "$BUILD/tests/day0_store" ingest "$W/big.db" 2>/dev/null
for at in 10 1000 5000 12000; do
	t0=$(date +%s%N)
	"$BUILD/day0" replay "$W/big.db" --dump --at $at 2>"$W/seek.err" >/dev/null
	t1=$(date +%s%N)
	echo "seek --at $at s: $(grep -o 'built in [0-9.]* ms' "$W/seek.err") ($(((t1 - t0) / 1000000)) ms the whole process)"
done
