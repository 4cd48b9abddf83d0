#!/usr/bin/env bash
# Store and agent benchmark: the session store's ingest against sqlite3's
# own CSV import of the same rows, state-at-time-t latency on a big file
# against a full-scan answer, and the agent's CPU use while it samples 64
# cards at 10 Hz.  Ratios against references measured in the same run.
#
#   make bench                 (builds first)
#   BUILD=build bash bench/store.sh
#
# 1. Ingest: N events (default 3,000,000) as an agent with 64 CPU cards
#    sampling at 10 Hz sends them (day0_store gen: samples, stage progress,
#    checks).  day0 ingests the JSON lines through the store API (parse,
#    events + derived tables, batches of 8192) into a fresh session file;
#    the reference is `sqlite3 .import` of the same rows as CSV
#    (node,seq,ts,type,body) into an equivalent table - the events table
#    with the same definition and index, WAL, synchronous=NORMAL, one
#    transaction.  Also shown: .import into the bare table (no ts index).
#    REPS rounds, interleaved; ratio = best reference time / best day0
#    time (>= 1.0: day0 ingests at least as fast).  Target >= 1.0x.
# 2. State at t: a BIG-event file (default 10,000,000) built with the store
#    API; the mean latency of store_state_at at 20 times spread over the
#    session against the same answer (last sample of every series) by a
#    scan of the samples up to t.  The answers are compared.
# 3. Agent CPU: day0-agent --cards 64 --sample-hz 10 for SECS (default 20)
#    seconds with its output read and discarded; CPU time (user + system)
#    over wall time.  Target <= 2% of a core.
# It is a benchmark: missed targets are reported, not failed; the exit
# status is non-zero only when a command fails.
#
# Environment: BUILD, N, BIG, REPS (default 3), SECS.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
N=${N:-3000000}
BIG=${BIG:-10000000}
REPS=${REPS:-3}
SECS=${SECS:-20}
DS=$BUILD/tests/day0_store
AGENT=$BUILD/day0-agent
GNU_TIME=/usr/bin/time

die() {
	echo "bench: $*" >&2
	exit 1
}
for v in N BIG REPS SECS; do
	case ${!v} in '' | *[!0-9]* | 0) die "$v: expected an integer >= 1, got '${!v}'" ;; esac
done
[ -x "$DS" ] || die "$DS not found (run make build)"
[ -x "$AGENT" ] || die "$AGENT not found (run make build)"
command -v sqlite3 >/dev/null || die "sqlite3 not found (make deps installs it)"
[ -x "$GNU_TIME" ] || die "$GNU_TIME not found (GNU time; make deps installs it)"
need_mb=$(((N + BIG) * 450 / 1000000 + 500))
avail_mb=$(($(df -Pk /tmp | awk 'NR == 2 { print $4 }') / 1024))
[ "$avail_mb" -ge "$need_mb" ] || die "/tmp needs ~$need_mb MB free, has $avail_mb MB"

TMP=$(mktemp -d /tmp/day0-bench-store.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { date +%s.%N; }
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", a - b }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }

declare -A TIMES
best() { tr ' ' '\n' <<<"${TIMES[$1]}" | grep . | sort -g | head -1; }
median() {
	tr ' ' '\n' <<<"${TIMES[$1]}" | grep . | sort -g |
		awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# timed KEY CMD...: wall time of CMD (stdin/stdout as given by the caller).
timed() {
	local key=$1 t0 t1
	shift
	t0=$(now)
	"$@" || die "command failed (exit $?): $*"
	t1=$(now)
	TIMES[$key]="${TIMES[$key]:-} $(fsub "$t1" "$t0")"
}

echo "== day0 store benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ)) =="
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM," \
	"/tmp on $(findmnt -no FSTYPE -T /tmp 2>/dev/null || echo '?'), sqlite3 $(sqlite3 --version | cut -d' ' -f1)"

# ------------------------------------------------------------------ ingest
t0=$(now)
"$DS" gen "$N" --cards 64 >"$TMP/events.jsonl"
"$DS" gen "$N" --cards 64 --csv >"$TMP/events.csv"
echo "generated $N events in $(awk -v s="$(fsub "$(now)" "$t0")" 'BEGIN { printf "%.1f", s }') s:" \
	"$(($(stat -c %s "$TMP/events.jsonl") / 1000000)) MB of JSON lines, same rows as CSV"
cat "$TMP/events.jsonl" "$TMP/events.csv" >/dev/null # page cache

EVENTS_DDL="CREATE TABLE events(node TEXT NOT NULL, seq INTEGER NOT NULL,
  ts INTEGER NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL,
  PRIMARY KEY(node, seq)) WITHOUT ROWID;"
import_sql() { # with-index?
	echo "PRAGMA journal_mode = WAL;"
	echo "PRAGMA synchronous = NORMAL;"
	echo "$EVENTS_DDL"
	[ "$1" = 1 ] && echo "CREATE INDEX events_ts ON events(ts);"
	echo ".mode csv"
	echo ".import $TMP/events.csv events"
}
import_sql 1 >"$TMP/import.sql"
import_sql 0 >"$TMP/import-bare.sql"

echo
echo "ingest: $N events, $REPS rounds (interleaved), fresh files each run"
for ((r = 1; r <= REPS; r++)); do
	rm -f "$TMP"/ref.db* "$TMP"/day0.db* "$TMP"/bare.db*
	sync
	timed import sqlite3 "$TMP/ref.db" <"$TMP/import.sql" >/dev/null
	timed day0 "$DS" ingest "$TMP/day0.db" <"$TMP/events.jsonl" 2>"$TMP/ingest.err"
	timed bare sqlite3 "$TMP/bare.db" <"$TMP/import-bare.sql" >/dev/null
done
rows=$(sqlite3 "$TMP/ref.db" "SELECT count(*) FROM events")
"$DS" audit "$TMP/day0.db" >"$TMP/audit.out" || die "audit of the ingested file failed: $(cat "$TMP/audit.out")"
[ "$rows" -eq "$N" ] || die ".import stored $rows rows, expected $N"
printf '  %-40s %9s %9s %12s  %s\n' "" best median events/s runs
for k in import bare day0; do
	case $k in
	import) label=".import into events + ts index" ;;
	bare) label=".import into events (no index)" ;;
	day0) label="day0 store_ingest (all tables)" ;;
	esac
	runs=$(tr ' ' '\n' <<<"${TIMES[$k]}" | grep . | awk '{ printf " %.2f", $1 }')
	printf '  %-40s %8.2fs %8.2fs %12s %s\n' "$label" "$(best $k)" "$(median $k)" \
		"$(rate "$N" "$(best $k)")" "$runs"
done
R_INGEST=$(ratio "$(best import)" "$(best day0)")
R_BARE=$(ratio "$(best bare)" "$(best day0)")
echo "  day0 also wrote: $(sqlite3 "$TMP/day0.db" "SELECT (SELECT count(*) FROM sample_points) || ' samples, ' || (SELECT count(*) FROM stages) || ' stage rows, ' || (SELECT count(*) FROM checks) || ' check rows'")"
rm -f "$TMP"/events.jsonl "$TMP"/events.csv "$TMP"/ref.db* "$TMP"/bare.db* "$TMP"/day0.db*

# -------------------------------------------------------------- state at t
echo
t0=$(now)
"$DS" gen "$BIG" --cards 64 | "$DS" ingest "$TMP/big.db" 2>"$TMP/big.err" ||
	die "building the $BIG-event file failed: $(cat "$TMP/big.err")"
echo "state at t: $BIG-event file built through the store API in" \
	"$(awk -v s="$(fsub "$(now)" "$t0")" 'BEGIN { printf "%.1f", s }') s ($(($(stat -c %s "$TMP/big.db") / 1000000)) MB)"
read -r Q_OURS Q_REF < <("$DS" querybench "$TMP/big.db" 20) ||
	die "querybench failed (answers differ?)"
R_QUERY=$(ratio "$Q_REF" "$Q_OURS")
printf '  store_state_at (series index)      %10.1f ms mean of 20\n' "$(awk -v u="$Q_OURS" 'BEGIN { print u / 1000 }')"
printf '  full scan of samples up to t       %10.1f ms mean of 20 (same answers)\n' "$(awk -v u="$Q_REF" 'BEGIN { print u / 1000 }')"
rm -f "$TMP"/big.db*

# ------------------------------------------------------------- agent CPU
echo
echo "agent: --cards 64 --sample-hz 10 for $SECS s, output read by cat"
(sleep "$SECS") | "$GNU_TIME" -f "%U %S %e" -o "$TMP/agent.time" \
	"$AGENT" --node bench --spool "$TMP/spool" --cards 64 --card-mem 16G \
	--sample-hz 10 --heartbeat 0 | cat >"$TMP/agent.out"
read -r AU AS AE <"$TMP/agent.time"
AGENT_EVENTS=$(wc -l <"$TMP/agent.out")
AGENT_PCT=$(awk -v u="$AU" -v s="$AS" -v e="$AE" 'BEGIN { printf "%.2f", (u + s) / e * 100 }')
echo "  $AGENT_EVENTS events in ${AE} s ($(rate "$AGENT_EVENTS" "$AE")/s), CPU ${AU} s user + ${AS} s system = ${AGENT_PCT}% of a core"

# ------------------------------------------------------------------ summary
verdict() { if "$1" "$2" "$3"; then echo "met"; else echo "NOT MET"; fi; }
echo
printf '%-52s %10s %10s %s\n' "measurement" "value" "target" "verdict"
printf '%-52s %9sx %10s %s\n' "ingest vs .import (events + ts index), time ratio" "$R_INGEST" ">= 1.00x" "$(verdict ge "$R_INGEST" 1.0)"
printf '%-52s %9sx %10s %s\n' "ingest vs .import (bare table), time ratio" "$R_BARE" "(info)" ""
printf '%-52s %9sx %10s %s\n' "state at t: full scan / store_state_at latency" "$R_QUERY" "(info)" ""
printf '%-52s %9s%% %10s %s\n' "agent CPU, 64 cards at 10 Hz" "$AGENT_PCT" "<= 2%" "$(verdict le "$AGENT_PCT" 2)"
