#!/usr/bin/env bash
# Runs every test: C unit tests ($BUILD/tests/test_*) and shell integration
# tests (tests/sh/*.sh).  Each test prints "ok - NAME" or "FAIL - NAME: why"
# lines; a program that exits non-zero without a FAIL line counts as one
# failure.  Ends with the line "N passed, N failed"; exits 1 on any failure.
#
#   BUILD=build bash tests/run.sh [PATTERN]    (PATTERN filters file names)
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
export DAY0_ROOT=$PWD
# Sanitizer reports get exit codes no test expects (a program that must
# exit 1 or 2 cannot pass by crashing), and UBSan stops at the first error.
export ASAN_OPTIONS=${ASAN_OPTIONS:-exitcode=86:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:exitcode=87:print_stacktrace=1}
# Open MPI leaves its allocations to process exit; tests/lsan.supp drops
# leaks with an Open MPI library on the stack (the engine's own still count).
# Those stacks are only whole with slow unwinding (Open MPI has no frame
# pointers): it costs the sanitizer run time on malloc-heavy tests.  A
# suppression that matched would print its table on stderr at exit, which
# the tests that want stderr to hold only the error message would count as
# a stray line: print_suppressions=0.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0}
pattern=${1:-}
passed=0
failed=0
logdir=$(mktemp -d /tmp/day0-tests.XXXXXX)

run_one() { # name, command...
	local name=$1; shift
	local log="$logdir/$(basename "$name").log"
	local t0=$SECONDS
	"$@" >"$log" 2>&1
	local rc=$?
	local p f
	p=$(grep -c '^ok - ' "$log")
	f=$(grep -c '^FAIL - ' "$log")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL - $name: exited $rc without reporting a failure" >>"$log"
		f=1
	fi
	if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
		echo "FAIL - $name: ran no check" >>"$log"
		f=1
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	printf '%-40s %3d passed %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
	if [ "$f" -ne 0 ]; then
		grep -E '^FAIL - ' "$log" | sed 's/^/    /'
		echo "    (log: $log)"
		tail -n 15 "$log" | sed 's/^/    | /'
	fi
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	case "$t" in *"$pattern"*) ;; *) continue ;; esac
	run_one "unit/$(basename "$t")" "$t"
done
for t in tests/sh/test_*.sh; do
	case "$t" in *"$pattern"*) ;; *) continue ;; esac
	run_one "sh/$(basename "$t" .sh)" bash "$t"
done
[ "$failed" -eq 0 ] && rm -rf "$logdir"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
