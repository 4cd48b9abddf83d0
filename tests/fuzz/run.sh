# Shared by tests/sh/test_fuzz*.sh: build one libFuzzer target through the
# Makefile and run it briefly.  Source after tests/lib.sh, then call
#   fuzz_run LABEL TARGET DICT CORPUS SECONDS WHAT
# (TARGET is the make target under build/fuzz/; WHAT names what is fuzzed in
# the check).  Reports a skip (as ok) when clang or its libFuzzer runtime is
# missing.
fuzz_run() {
	local label=$1 target=$2 dict=$3 corpus=$4 secs=$5 what=$6
	local fuzz="$DAY0_ROOT/build/fuzz/$target" rc runs crash keep
	if ! command -v clang >/dev/null 2>&1; then
		ok "$label: skipped (clang is not installed)"
		return 0
	fi
	# Not the parent make's variables (make asan passes BUILD/SAN down).
	if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -j"$(nproc)" -C "$DAY0_ROOT" \
		"build/fuzz/$target" >"$T/build.log" 2>&1; then
		if grep -qE 'libclang_rt\.fuzzer|fuzzer.*(not found|No such file)' "$T/build.log"; then
			ok "$label: skipped (clang has no libFuzzer runtime: install libclang-rt-dev)"
			return 0
		fi
		fail "$label: build the libFuzzer target" "$(tail -n 20 "$T/build.log")"
		return 0
	fi
	ok "$label: build the libFuzzer target"

	# UBSan findings stop the run (the target is built with recoverable UBSan).
	mkdir -p "$T/new"
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
		"$fuzz" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
		-dict="$dict" -artifact_prefix="$T/" -print_final_stats=1 \
		"$T/new" "$corpus" >"$T/fuzz.log" 2>&1
	rc=$?
	runs=$(grep -m1 -oE 'Done [0-9]+ runs' "$T/fuzz.log")
	crash=$(ls "$T"/crash-* "$T"/leak-* "$T"/timeout-* "$T"/oom-* 2>/dev/null | head -n1)
	if [ "$rc" -eq 0 ] && [ -z "$crash" ] &&
		! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error|deadly signal' "$T/fuzz.log"; then
		ok "$label: ${secs}s of $what, no crash (${runs:-? runs})"
	else
		keep=""
		if [ -n "$crash" ]; then
			keep=$(mktemp /tmp/day0-fuzz-crash.XXXXXX)
			cp "$crash" "$keep"
		fi
		fail "$label: ${secs}s of $what, no crash" \
			"exit $rc${keep:+, input kept in $keep (reproduce: $fuzz $keep)}: $(grep -m3 -E 'ERROR|runtime error|deadly' "$T/fuzz.log")"
		tail -n 40 "$T/fuzz.log"
	fi
}
