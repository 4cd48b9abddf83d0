#!/usr/bin/env bash
# bench/serve.sh - the service level, measured in the same run:
#   batching: `serve` decode throughput (output tokens/s from `load`) at
#             concurrency 16 against concurrency 1, same model and layout
#                                                             target >= 4x
#   load's own overhead: `load --get /health` requests/s against `ab -k`
#             (apache2-utils) on the same trivial endpoint, same connection
#             count; and load's absolute requests/s on one core
#                                                             target >= 5000/s
# Prints ratios; exits non-zero only when a command fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
E="$BUILD/day0-engine"
W=$(mktemp -d /tmp/day0-serve.XXXXXX)
MP=""
trap '[ -n "$MP" ] && kill -TERM $MP 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v ab >/dev/null || { echo "bench/serve.sh: ab missing (make deps: apache2-utils)" >&2; exit 2; }

# ~25M parameters: decode is weight-bandwidth bound, so batching pays
TP=${TP:-1} C=${CONC:-16} N=${REQS:-64} OUTLEN=${OUTLEN:-32}
"$E" gen-model --arch llama --layers 8 --hidden 512 --heads 8 --ffn 1408 --vocab 4096 \
	--shards 1 "$W/m" >/dev/null
mpirun --oversubscribe --bind-to none -np "$TP" "$E" serve "$W/m" --tp "$TP" --port 0 \
	--port-file "$W/port" --kv-seqs "$C" --max-ctx 256 >"$W/serve.out" 2>&1 &
MP=$!
for _ in $(seq 300); do [ -s "$W/port" ] && break; sleep 0.1; done
URL="http://127.0.0.1:$(cat "$W/port")"
tps() { # CONCURRENCY -> output tokens/s
	"$E" load --url "$URL" --concurrency "$1" --requests "$2" --input-len 16 \
		--output-len "$OUTLEN" --vocab 4096 --no-api-check --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["output_tokens_per_s"])'
}
tps 1 4 >/dev/null # warm-up
t1=$(tps 1 $((N / 4)))
tc=$(tps "$C" "$N")
rps_load=$("$E" load --url "$URL" --get /health --concurrency "$C" --requests 20000 --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["levels"][0]["requests_per_s"])')
rps_ab=$(ab -q -k -c "$C" -n 20000 "$URL/health" | awk '/Requests per second/ {print $4}')
cpu_load=$( { /usr/bin/time -f '%U %S' "$E" load --url "$URL" --get /health \
	--concurrency "$C" --requests 20000 >/dev/null; } 2>&1 | tail -1)
awk -v t1="$t1" -v tc="$tc" -v C="$C" -v rl="$rps_load" -v ra="$rps_ab" -v cpu="$cpu_load" 'BEGIN {
	split(cpu, c, " "); core = c[1] + c[2]
	printf "serve decode, 1 stream:        %8.1f tokens/s\n", t1
	printf "serve decode, %2d streams:      %8.1f tokens/s\n", C, tc
	printf "batched / single-stream:       %8.2fx   (target >= 4x)\n", tc / t1
	printf "load --get /health:            %8.0f req/s\n", rl
	printf "ab -k, same endpoint:          %8.0f req/s\n", ra
	printf "load / ab:                     %8.2f\n", rl / ra
	printf "load on one core (20000 req in %.2f s of CPU): %.0f req/s of its own CPU (target >= 5000)\n",
		core, (core > 0 ? 20000 / core : 0)
}'
