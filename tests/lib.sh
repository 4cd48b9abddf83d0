# Shared helpers for tests/sh/*.sh.  Source it first thing.
#   ok NAME / fail NAME WHY        report one check
#   check NAME CMD...              ok when CMD succeeds
#   run CMD...                     run, keep exit status in $RC, output in $OUT/$ERR
#   expect_rc WANT NAME CMD...     run CMD, check its exit status
#   contains NAME NEEDLE FILE      check FILE contains NEEDLE (fixed string)
#   mpi_rank_pid PATTERN RANK [TOP] the pid of MPI rank RANK among the
#                                  processes pgrep -f PATTERN finds
#   PIDS="$PIDS $!"                a background process stopped (TERM, wait)
#                                  when the test exits
set -u
DAY0_ROOT=${DAY0_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$DAY0_ROOT/$BUILD" ;; esac
ENGINE="$BUILD/day0-engine"
# A whole playbook run's hang guard (timeout $RUN_LIMIT ...), not a time
# limit: the sanitizer build on a loaded 2-core machine took over 300 s
# for a release day.
case "$BUILD" in *asan*) RUN_LIMIT=1200 ;; *) RUN_LIMIT=300 ;; esac
T=$(mktemp -d /tmp/day0-t.XXXXXX)
# PIDS: background processes a test started (servers): on exit they get
# SIGTERM and are waited for, then $T goes.
PIDS=""
trap 'for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done; for p in $PIDS; do wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
OUT="$T/.out"
ERR="$T/.err"

ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
check() {
	local name=$1; shift
	if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi
}
run() {
	"$@" >"$OUT" 2>"$ERR"
	RC=$?
	# The sanitizer build only: LeakSanitizer's own tracer sometimes
	# crashes on the way out of a program whose threads are ending (an
	# upstream bug, google/sanitizers#1353: "Tracer caught signal 11",
	# no leak found or reported).  That run says nothing about our code:
	# run it once more.  A real leak report never matches this.
	if [ "$RC" = 86 ] && grep -q 'LeakSanitizer has encountered a fatal error' "$ERR" &&
		! grep -q 'ERROR: LeakSanitizer: detected memory leaks' "$ERR"; then
		echo "# LeakSanitizer's tracer crashed (upstream bug); rerun: $*"
		"$@" >"$OUT" 2>"$ERR"
		RC=$?
	fi
}
expect_rc() {
	local want=$1 name=$2; shift 2
	run "$@"
	if [ "$RC" -eq "$want" ]; then
		ok "$name"
	else
		fail "$name" "exit $RC, expected $want: $* :: $(head -c 400 "$ERR")"
	fi
}
contains() {
	if grep -qF -- "$2" "$3"; then ok "$1"; else fail "$1" "'$2' not in $(head -c 400 "$3")"; fi
}
# mpi_rank_pid PATTERN RANK [TOP]: the pid of the process whose command
# line matches PATTERN (pgrep -f) and whose environment says it is MPI
# rank RANK (Open MPI's OMPI_COMM_WORLD_RANK); with TOP, only one that
# descends from process TOP (its mpirun: not a rank of an earlier launch
# still on its way out).  Exits 1 when there is none.
mpi_rank_pid() {
	local p q
	for p in $(pgrep -f -- "$1"); do
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" || continue
		if [ -n "${3:-}" ]; then
			q=$p
			while [ "$q" -gt 1 ] && [ "$q" != "$3" ]; do
				q=$(awk '{ print $4 }' "/proc/$q/stat" 2>/dev/null) || break
			done
			[ "$q" = "$3" ] || continue
		fi
		echo "$p"
		return 0
	done
	return 1
}
