# day0-engine load's outputs agree with docs/service.md: errors count
# stalls in every output (samples, perf, --json, the table), the latency
# means, a level where nothing was measured, why requests were refused,
# and a server that never answered.  A stand-in server (python) stalls
# streams on demand; day0's serve gives the real refusals.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
for tool in curl python3 mpirun; do
	command -v $tool >/dev/null || { fail "$tool is installed" "missing (make deps)"; exit 1; }
done
js() { # python3 expression over the JSON document in file $1 (as d)
	python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
evs() { # python3 expression over the events of file $1 (as ev, a list)
	python3 -c "import json,sys; ev=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]; print($2)" "$1"
}

# --- the stand-in: one token, then nothing for 4 s (a stall at --stall 1)
python3 - "$T/fake.port" <<'PY' >/dev/null 2>&1 &
import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, code, body):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, json.dumps({"data": [{"id": "x"}]}))
        else:
            self.reply(404, json.dumps({"error": {"message": "no " + self.path}}))
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        ev = {"choices": [{"index": 0, "text": "a", "token_ids": [5], "finish_reason": None}]}
        self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
        self.wfile.flush()
        time.sleep(4)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
PIDS="$PIDS $!"
for _ in $(seq 100); do [ -s "$T/fake.port" ] && break; sleep 0.1; done
F="http://127.0.0.1:$(cat "$T/fake.port")"

# --- errors count stalls everywhere (the load.errors sample did; perf,
# --json and the table said errors 0, stalls 2)
stall=(--url "$F" --model x --no-api-check --concurrency 2 --requests 2 --output-len 20 --stall 1)
expect_rc 1 "load: two stalled streams fail service.load" "$ENGINE" load "${stall[@]}" --events
cp "$OUT" "$T/stall.ev"
check "… the last load.errors sample, the perf event and its level all say errors 2, stalls 2 ($(evs "$T/stall.ev" "[e['value'] for e in ev if e.get('metric') == 'load.errors'][-1:], [(e['errors'], e['stalls'], e['level']['errors']) for e in ev if e['type'] == 'perf']"))" \
	test "$(evs "$T/stall.ev" "[e['value'] for e in ev if e.get('metric') == 'load.errors'][-1], [(e['errors'], e['stalls'], e['level']['errors'], e['level']['stalls'], e['error_classes']) for e in ev if e['type'] == 'perf']")" \
	= "2.0 [(2, 2, 2, 2, {'stall': 2})]"
check "… service.load's detail: 2 errors, 2 stalls among them" \
	test "$(evs "$T/stall.ev" "[e['detail'].split(';')[0] for e in ev if e.get('item') == 'service.load']")" \
	= "['1 levels, 2 errors, 2 stalls among them (no token within --stall)']"
expect_rc 1 "load --json: the same" "$ENGINE" load "${stall[@]}" --json
check "… --json: errors 2, stalls 2" test "$(js "$OUT" "d['levels'][0]['errors'], d['levels'][0]['stalls']")" = "2 2"
expect_rc 1 "load's table: the same" "$ENGINE" load "${stall[@]}"
check "… the table's err and stall columns: 2 2 ($(awk '$1 == 2 && NF > 10' "$OUT"))" \
	test "$(awk '$1 == 2 && NF > 10 { print $4, $5 }' "$OUT")" = "2 2"

# --- day0's serve (one rank, contexts of 512 tokens)
"$ENGINE" gen-model --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 128 \
	--vocab 256 --max-pos 512 "$T/m" >/dev/null
timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 \
	"$ENGINE" serve "$T/m" --tp 1 --max-ctx 512 --kv-seqs 4 --port 0 --port-file "$T/serve.port" \
	>"$T/serve.out" 2>"$T/serve.err" &
PIDS="$PIDS $!"
for _ in $(seq 300); do [ -s "$T/serve.port" ] && break; sleep 0.1; done
U="http://127.0.0.1:$(cat "$T/serve.port")"
check "serve listens" test -s "$T/serve.port"

# --- the latency means (itl_ms.mean and e2e_ms.mean were always 0.0)
expect_rc 0 "load --json against serve" "$ENGINE" load --url "$U" --concurrency 2 --requests 4 \
	--input-len 8 --output-len 8 --vocab 256 --json --no-api-check
cp "$OUT" "$T/ok.json"
check "… every latency has its mean (> 0, <= its p99) ($(js "$T/ok.json" "[(k, d['levels'][0][k]['mean']) for k in ('ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms')]"))" \
	test "$(js "$T/ok.json" "all(0 < d['levels'][0][k]['mean'] <= d['levels'][0][k]['p99'] for k in ('ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms'))")" = True
expect_rc 0 "load --events against serve" "$ENGINE" load --url "$U" --concurrency 2 --requests 4 \
	--input-len 8 --output-len 8 --vocab 256 --events --no-api-check
check "… the perf event's level has them too" \
	test "$(evs "$OUT" "[all(e['level'][k]['mean'] > 0 for k in ('ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms')) for e in ev if e['type'] == 'perf']")" = "[True]"

# --- a level where every request failed (prompts over the 512-token
# context: all 413) has no latency: null in --json, "-" in the table,
# absent from the perf event (they said 0.0, and prompt_tokens 4800)
over=(--url "$U" --concurrency 2 --requests 8 --input-len 600 --output-len 4 --vocab 256 --no-api-check)
expect_rc 1 "load: every request refused (413)" "$ENGINE" load "${over[@]}" --json
cp "$OUT" "$T/over.json"
check "… --json: 8 errors, the latencies null, no input token counted ($(js "$T/over.json" "d['levels'][0]['errors'], d['levels'][0]['ttft_ms'], d['levels'][0]['input_tokens']"))" \
	test "$(js "$T/over.json" "d['levels'][0]['errors'], set(v for k in ('ttft_ms', 'tpot_ms', 'itl_ms', 'e2e_ms') for v in d['levels'][0][k].values()), d['levels'][0]['input_tokens']")" = "8 {None} 0"
expect_rc 1 "… the table" "$ENGINE" load "${over[@]}"
check "… shows '-' for every latency ($(awk '$1 == 2 && NF > 10' "$OUT"))" \
	test "$(awk '$1 == 2 && NF > 10 { print $8, $9, $10, $11, $12, $13 }' "$OUT")" = "- - - - - -"
expect_rc 1 "… --events" "$ENGINE" load "${over[@]}" --events
check "… the perf event has no ttft_ms, tpot_ms or percentile, prompt_tokens 0 ($(evs "$OUT" "[sorted(k for k in e if k.endswith('_ms')) + [e.get('prompt_tokens')] for e in ev if e['type'] == 'perf']"))" \
	test "$(evs "$OUT" "[sorted(k for k in e if k.endswith('_ms')) + [e.get('prompt_tokens')] for e in ev if e['type'] == 'perf']")" = "[[0]]"
check "… and is a valid protocol line" "$TOOLS/jsonl_check" "$OUT" type=perf

# --- why requests were refused: the server's message, the first of each
# class per level (it said only "8 errors", "http_400 8")
long=(--url "$U" --concurrency 2 --requests 8 --input-len 20 --output-len 500 --vocab 256 --no-api-check)
expect_rc 1 "load: prompt + max_tokens over the context (400)" "$ENGINE" load "${long[@]}"
contains "… the table is followed by the server's message" "c=2 http_400 (8): " "$OUT"
contains "… which says why" "exceed the context (512 tokens)" "$OUT"
contains "… service.load's detail names it" "first error at concurrency 2: http_400: " "$OUT"
expect_rc 1 "… --events" "$ENGINE" load "${long[@]}" --events
check "… the perf event and its level carry it ($(evs "$OUT" "[e.get('error_examples') for e in ev if e['type'] == 'perf']"))" \
	test "$(evs "$OUT" "[('exceed the context (512 tokens)' in e['error_examples']['http_400'], e['error_examples'] == e['level']['error_examples']) for e in ev if e['type'] == 'perf']")" = "[(True, True)]"
check "… and the service.load check" \
	test "$(evs "$OUT" "['exceed the context' in e['detail'] for e in ev if e.get('item') == 'service.load']")" = "[True]"
check "the 413s of prompts over the context say so in --json ($(js "$T/over.json" "d['levels'][0]['error_examples']"))" \
	test "$(js "$T/over.json" "list(d['levels'][0]['error_examples']), 'longer than the context' in d['levels'][0]['error_examples']['http_413']")" = "['http_413'] True"
check "a stall says what it was ($(evs "$T/stall.ev" "[e['error_examples'] for e in ev if e['type'] == 'perf']"))" \
	test "$(evs "$T/stall.ev" "[e['error_examples'] for e in ev if e['type'] == 'perf']")" = "[{'stall': 'no token for 1 s (--stall)'}]"

# --- goodput is the share of the requests sent that met the SLO: a
# refused request does not meet it (2 answered of 4: 0.5, not 1.0)
python3 -c "
import json
for n in (8, 600, 8, 600): print(json.dumps({'prompt': list(range(1, n + 1)), 'max_tokens': 4}))" >"$T/mixed.jsonl"
run "$ENGINE" load --url "$U" --concurrency 1 --requests 4 --dataset "$T/mixed.jsonl" --vocab 256 \
	--slo ttft=100000,tpot=100000 --json --no-api-check
check "goodput of 2 answered (all within the SLO) of 4 sent: 0.5 ($(js "$OUT" "d['levels'][0]['ok'], d['levels'][0]['errors'], d['levels'][0]['goodput']"))" \
	test "$(js "$OUT" "d['levels'][0]['ok'], d['levels'][0]['errors'], d['levels'][0]['goodput']")" = "2 2 0.5"

# --- a server that is not there: the refused connection named, and
# "never answered", not "stopped answering after the load"
expect_rc 1 "load against nothing listening, no --model: exit 1" "$ENGINE" load --url http://127.0.0.1:9 --requests 1
contains "… GET /v1/models's failure named: the refused connection" "GET /v1/models gave no model: http://127.0.0.1:9/v1/models: Couldn't connect to server (Connection refused) (is the server up?); pass --model" "$ERR"
expect_rc 1 "… with --model: exit 1" "$ENGINE" load --url http://127.0.0.1:9 --model x --requests 1 --json
check "… service.kv and service.preemption: the server never answered ($(js "$OUT" "d['service.kv']['detail']"))" \
	test "$(js "$OUT" "[(d[k]['status'], d[k]['detail'].startswith('the server never answered (') and 'Connection refused' in d[k]['detail']) for k in ('service.kv', 'service.preemption')]")" = "[('fail', True), ('fail', True)]"
check "… the level's connect errors say it too" \
	test "$(js "$OUT" "'Connection refused' in d['levels'][0]['error_examples']['connect']")" = True
