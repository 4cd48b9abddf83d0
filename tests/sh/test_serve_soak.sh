# serve's paged KV cache under a randomized soak (tests/tools/serve_soak.py):
# SOAK_S seconds (60; bench/serve_soak.sh runs 30 min) of 16 clients at
# about twice the KV capacity: random prompt lengths, shared system
# prompts, streamed and not, disconnects mid-stream, requests cancelled
# before an answer, requests longer than the context.  No stall (deadlock),
# every request answered in full or refused with a reason, preemptions on
# the way, every block back when idle, resident memory flat.
. "$(dirname "$0")/../lib.sh"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
SOAK_S=${SOAK_S:-60}
PID=""
cleanup() {
	[ -n "$PID" ] && { kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }
	rm -rf "$T"
}
trap cleanup EXIT
command -v python3 >/dev/null || { fail "python3 is installed" "missing (make deps)"; exit 1; }
"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 --vocab 128 \
	"$T/m" >/dev/null
# 56 blocks of 16 tokens; 16 clients want ~110 (prompts 1..95 after half
# of them a 48-token system prompt, 1..63 tokens out)
timeout $((SOAK_S * 3 + 120)) mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 \
	"$ENGINE" serve "$T/m" --tp 1 --max-ctx 256 --kv-blocks 56 --max-batch-tokens 256 \
	--served-model-name m --port 0 --port-file "$T/port" >"$T/out" 2>"$T/err" &
PID=$!
for _ in $(seq 300); do [ -s "$T/port" ] && break; sleep 0.1; done
URL=http://127.0.0.1:$(cat "$T/port")
ranks=$(for p in $(pgrep -f "day0-engine serve $T/m"); do
	[ "$(cat /proc/$p/comm 2>/dev/null)" = day0-engine ] && printf '%s,' "$p"; done)
check "serve is up (ranks $ranks)" test -n "$ranks"
python3 "$DAY0_ROOT/tests/tools/serve_soak.py" "$URL" "$SOAK_S" 16 128 "$ranks" "$T/soak.json"
check "the soak ran" test -s "$T/soak.json"
js() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['tally']; m=d['metrics']; print($1)" "$T/soak.json"; }
echo "# soak: $(js "t")"
echo "# first errors: $(js "d['errors'][:5]")"
check "no stall: every request answered within 60 s (no deadlock)" test "$(js "t['stall'], t['error']")" = "0 0"
check "every answer in full ($(js "t['ok']") completions, streamed or not), none cut short" \
	test "$(js "t['ok'] > 100, t['wrong_length']")" = "True 0"
check "every refusal with a reason ($(js "t['refused']") refused)" \
	test "$(js "t['refused'] > 0, t['refused_without_reason']")" = "True 0"
check "disconnects and cancels on the way ($(js "t['disconnected']") dropped streams, $(js "t['cancelled']") cancelled)" \
	test "$(js "t['disconnected'] > 0 and t['cancelled'] > 0")" = True
check "over the KV capacity: preempted ($(js "int(m['vllm:num_preemptions_total{model_name=\"m\"}'])")), none recomputed differently" \
	test "$(js "m['vllm:num_preemptions_total{model_name=\"m\"}'] > 0, int(m['day0_recompute_checks_total{result=\"different\"}'])")" = "True 0"
check "the prefix cache served the shared system prompts ($(js "int(m['vllm:gpu_prefix_cache_hits_total{model_name=\"m\"}'])") tokens)" \
	test "$(js "m['vllm:gpu_prefix_cache_hits_total{model_name=\"m\"}'] > 0")" = True
check "idle: no block leaked or lost (used 0, refs 0, free + cached = 56)" \
	test "$(js "int(m['day0_kv_blocks{state=\"used\"}']), int(m['day0_kv_block_refs']), int(m['day0_kv_blocks{state=\"free\"}'] + m['day0_kv_blocks{state=\"cached\"}'])")" = "0 0 56"
case $BUILD in *asan*) slack=4 ;; *) slack=10 ;; esac
check "resident memory flat: the last third's peak within 1/$slack of the first's ($(js "d['rss_early'], d['rss_late']") KiB)" \
	test "$(js "d['rss_late'] <= d['rss_early'] + d['rss_early'] // $slack")" = True
kill -TERM "$PID"
wait "$PID"
PID=""
# mpirun (and timeout above it) may return while the rank it signalled is
# still unwinding, reparented to init: give it 10 s, as test_serve does
for _ in $(seq 100); do pgrep -f "[d]ay0-engine serve $T/m" >/dev/null || break; sleep 0.1; done
check "serve stops cleanly after the soak" test -z "$(pgrep -f "[d]ay0-engine serve $T/m")"
