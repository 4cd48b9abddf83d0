# A short libFuzzer run (about 5 s) of the protocol's line parsers and of
# the store's JSON scanner against jansson (tests/fuzz/fuzz_proto.c),
# seeded with tests/fuzz/proto-corpus.  Builds build/fuzz/fuzz_proto
# through the Makefile when clang is installed; reports a skip otherwise.
#   FUZZ_SECONDS=60 bash tests/sh/test_fuzz_proto.sh    for a longer run
. "$(dirname "$0")/../lib.sh"
FUZZ="$DAY0_ROOT/build/fuzz/fuzz_proto"
secs=${FUZZ_SECONDS:-5}

if ! command -v clang >/dev/null 2>&1; then
	ok "fuzz proto: skipped (clang is not installed)"
	exit 0
fi
# Not the parent make's variables (make asan passes BUILD/SAN down).
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$DAY0_ROOT" \
	build/fuzz/fuzz_proto >"$T/build.log" 2>&1; then
	if grep -qE 'libclang_rt\.fuzzer|fuzzer.*(not found|No such file)' "$T/build.log"; then
		ok "fuzz proto: skipped (clang has no libFuzzer runtime)"
		exit 0
	fi
	fail "fuzz proto: build the libFuzzer target" "$(tail -n 20 "$T/build.log")"
	exit 0
fi
ok "fuzz proto: build the libFuzzer target"

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
mkdir -p "$T/new"
"$FUZZ" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
	-dict="$DAY0_ROOT/tests/fuzz/proto.dict" -artifact_prefix="$T/" \
	-print_final_stats=1 "$T/new" "$DAY0_ROOT/tests/fuzz/proto-corpus" \
	>"$T/fuzz.log" 2>&1
rc=$?
runs=$(grep -m1 -oE 'Done [0-9]+ runs' "$T/fuzz.log")
crash=$(ls "$T"/crash-* "$T"/leak-* "$T"/timeout-* "$T"/oom-* 2>/dev/null | head -n1)
if [ "$rc" -eq 0 ] && [ -z "$crash" ] &&
	! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error|deadly signal' "$T/fuzz.log"; then
	ok "fuzz proto: ${secs}s of line parsing and scanner-vs-jansson, no crash (${runs:-? runs})"
else
	keep=""
	if [ -n "$crash" ]; then
		keep=$(mktemp /tmp/day0-fuzz-crash.XXXXXX)
		cp "$crash" "$keep"
	fi
	fail "fuzz proto: ${secs}s, no crash" \
		"exit $rc${keep:+, input kept in $keep (reproduce: $FUZZ $keep)}: $(grep -m3 -E 'ERROR|runtime error|deadly' "$T/fuzz.log")"
	tail -n 40 "$T/fuzz.log"
fi
