# day0-engine serve under real mpirun, driven over loopback HTTP by curl,
# `load` and `probe`: the API as documented, greedy == run --generate,
# streamed == unstreamed, 64 clients against a KV budget of 8 sequences,
# disconnects free their KV, bad requests get 4xx while others are served,
# probe passes on the real weights and fails on a perturbed copy.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
# (oneDNN's own primitive cache, a matmul per batch shape, would grow for
# many rounds and hide a real leak from the flat-RSS check below:
# ops_onednn.c turns it off and keeps the primitives it reuses itself.)
for tool in curl python3; do
	command -v $tool >/dev/null || { fail "$tool is installed" "missing (make deps)"; exit 1; }
done
js() { # python3 expression over the JSON document in file $1 (as d)
	python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
# start serve: NAME NP ARGS...; sets URL_NAME (waits for the port file)
start_serve() {
	local name=$1 np=$2; shift 2
	rm -f "$T/$name.port"
	timeout 900 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
		"$ENGINE" serve "$@" --port 0 --port-file "$T/$name.port" \
		>"$T/$name.out" 2>"$T/$name.err" &
	PIDS="$PIDS $!"
	eval "${name}_PID=$!"
	for _ in $(seq 300); do [ -s "$T/$name.port" ] && break; sleep 0.1; done
	eval "URL_$name=http://127.0.0.1:$(cat "$T/$name.port" 2>/dev/null)"
}
metric() { # URL NAME -> value
	curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}
post() { # URL BODY OUTFILE -> http status on stdout
	curl -s -o "$3" -w '%{http_code}' "$1/v1/completions" -H 'Content-Type: application/json' -d "$2"
}

# --help and usage errors
for step in serve load probe; do
	expect_rc 0 "$step --help" "$ENGINE" $step --help
	contains "$step --help shows usage and an example" "example: " "$OUT"
done
expect_rc 2 "load without --url is a usage error" "$ENGINE" load
expect_rc 2 "probe without --model is a usage error" "$ENGINE" probe --url http://127.0.0.1:1
expect_rc 2 "serve with --kv-seqs and --kv-mem is a usage error" "$ENGINE" serve /x --tp 1 --kv-seqs 2 --kv-mem 1M
expect_rc 1 "load against nothing listening fails service.api" "$ENGINE" load --url http://127.0.0.1:9 --requests 1

"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 --vocab 128 \
	--shards 2 "$T/m" >/dev/null
# The KV budget for exactly 8 sequences of 128 tokens at tp 2: 2 layers x
# 128 positions x 1 kv head x (16 + 16) x 4 bytes = 32 KiB a sequence.
start_serve a 2 "$T/m" --tp 2 --max-ctx 128 --kv-mem 256K --max-queue 256 --events
A=$URL_a
check "serve tp2 listens (port file written)" test -s "$T/a.port"

# --- the API as documented
check "GET /health is 200" test "$(curl -s -o /dev/null -w '%{http_code}' "$A/health")" = 200
curl -s "$A/v1/models" >"$T/models.json"
check "GET /v1/models lists the model with its context" \
	test "$(js "$T/models.json" "d['data'][0]['id'], d['data'][0]['max_model_len']")" = "m 128"
check "the KV budget holds 8 sequences" test "$(metric "$A" day0_kv_sequences_max)" = 8
check "POST /v1/completions is 200" test "$(post "$A" '{"model":"m","prompt":[1,5,9,3,7],"max_tokens":8,"temperature":0}' "$T/c1.json")" = 200
check "… a text_completion with token_ids, finish_reason and usage" test \
	"$(js "$T/c1.json" "d['object'], len(d['choices'][0]['token_ids']), d['choices'][0]['finish_reason'], d['usage']['completion_tokens'], d['usage']['prompt_tokens']")" \
	= "text_completion 8 length 8 5"

# --- greedy == run --generate, for three prompts served at the same time
i=0
for p in 1,5,9,3,7 60,2,11,4 8,8,8,100,3,2,1; do
	i=$((i + 1))
	post "$A" "{\"prompt\":[$p],\"max_tokens\":10,\"temperature\":0}" "$T/g$i.json" >/dev/null &
	gpids="${gpids:-} $!"
done
for p in $gpids; do wait "$p"; done
i=0
for p in 1,5,9,3,7 60,2,11,4 8,8,8,100,3,2,1; do
	i=$((i + 1))
	want=$("$ENGINE" run "$T/m" --tp 1 --tokens "$p" --generate 10 | sed -n 's/^generated: //p')
	got=$(js "$T/g$i.json" "' '.join(map(str, d['choices'][0]['token_ids']))")
	check "greedy tokens for [$p] (batched) equal run --generate" test -n "$want" -a "$want" = "$got"
done

# --- streamed == unstreamed, with logprobs and echo
body='{"prompt":[3,1,4,1,5,9,2,6],"max_tokens":12,"temperature":0,"logprobs":3,"echo":true'
post "$A" "$body}" "$T/u.json" >/dev/null
curl -s -N "$A/v1/completions" -d "$body,\"stream\":true}" >"$T/s.sse"
python3 - "$T/u.json" "$T/s.sse" >"$T/cmp.txt" <<'EOF'
import json, sys
u = json.load(open(sys.argv[1]))
ids, lps, done, n = [], [], False, 0
for line in open(sys.argv[2]):
    if not line.startswith("data: "):
        continue
    if line.strip() == "data: [DONE]":
        done = True; continue
    c = json.loads(line[6:])["choices"][0]; n += 1
    ids += c["token_ids"]
    if c["logprobs"]:
        lps += c["logprobs"]["token_logprobs"]
uc = u["choices"][0]
print("same" if ids == uc["token_ids"] and lps == uc["logprobs"]["token_logprobs"] else "differ",
      "done" if done else "no-done", n > 1,
      len(uc["logprobs"]["token_logprobs"]), uc["logprobs"]["token_logprobs"][0],
      uc["prompt_token_ids"] == [3,1,4,1,5,9,2,6],
      all(len(t) == 3 for t in uc["logprobs"]["top_logprobs"][1:]))
EOF
check "streamed tokens and logprobs equal the unstreamed answer, [DONE] at the end" \
	test "$(cat "$T/cmp.txt")" = "same done True 20 None True True"

# --- malformed requests: 4xx naming the field; the server keeps serving
check "malformed JSON -> 400" test "$(post "$A" '{"prompt": [1, 2' "$T/e1.json")" = 400
check "… an OpenAI error object" test "$(js "$T/e1.json" "d['error']['type']")" = invalid_request_error
check "unknown field -> 400 naming it" test "$(post "$A" '{"prompt":[1],"bogus":1}' "$T/e2.json")" = 400
check "… param bogus" test "$(js "$T/e2.json" "d['error']['param']")" = bogus
check "negative max_tokens -> 400 naming max_tokens" test \
	"$(post "$A" '{"prompt":[1],"max_tokens":-3}' "$T/e3.json") $(js "$T/e3.json" "d['error']['param']")" = "400 max_tokens"
long=$(python3 -c "print(','.join(['1']*200))")
check "a prompt over the context -> 413 naming prompt" test \
	"$(post "$A" "{\"prompt\":[$long]}" "$T/e4.json") $(js "$T/e4.json" "d['error']['param']")" = "413 prompt"
# the same prompt as text and as a chat: the same 413, not a 400 naming
# max_tokens (the text's tokens were counted against max_tokens)
longtext=$(python3 -c "print('hello world ' * 100)")
check "a text prompt over the context -> 413 naming prompt" test \
	"$(post "$A" "{\"prompt\":\"$longtext\",\"max_tokens\":2}" "$T/e4t.json") $(js "$T/e4t.json" "d['error']['param'], 'longer than the context' in d['error']['message']")" = "413 prompt True"
check "… as a chat too" test "$(curl -s -o "$T/e4c.json" -w '%{http_code}' "$A/v1/chat/completions" \
	-d "{\"messages\":[{\"role\":\"user\",\"content\":\"$longtext\"}],\"max_tokens\":2}") $(js "$T/e4c.json" "d['error']['param']")" = "413 prompt"
check "a token outside the vocabulary -> 400" test "$(post "$A" '{"prompt":[1,128]}' "$T/e5.json")" = 400
# A text prompt goes through the model's tokenizer.json: its greedy answer
# is the answer to the ids `tokenize` gives for the same text.
ids=$("$ENGINE" tokenize "$T/m" --text "hello world")
check "a text prompt is answered (200)" test \
	"$(post "$A" '{"prompt":"hello world","max_tokens":4,"temperature":0}' "$T/t1.json")" = 200
post "$A" "{\"prompt\":[$ids],\"max_tokens\":4,\"temperature\":0}" "$T/t2.json" >/dev/null
check "… with the tokens of the same prompt sent as tokenize's ids ($ids)" test \
	"$(js "$T/t1.json" "d['choices'][0]['token_ids']")" = "$(js "$T/t2.json" "d['choices'][0]['token_ids']")"
head -c 100000000 /dev/zero >"$T/big"
check "a 100 MB body -> 413" test "$(curl -s -o /dev/null -w '%{http_code}' "$A/v1/completions" --data-binary @"$T/big")" = 413
rm -f "$T/big"
check "unknown path -> 404, wrong method -> 405" test \
	"$(curl -s -o /dev/null -w '%{http_code}' "$A/v2/x") $(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$A/v1/completions")" = "404 405"
check "… and the server still answers" test "$(post "$A" '{"prompt":[1,2,3],"max_tokens":2}' "$T/after.json")" = 200

# --- 64 concurrent clients against the KV budget of 8 sequences
rss() { for p in $(pgrep -f "day0-engine serve $T/m --tp 2"); do awk '/VmRSS/ {print $2}' /proc/$p/status; done | sort -n | tail -1; }
expect_rc 0 "load: 64 clients, 128 requests, no errors, no stalls" "$ENGINE" load --url "$A" \
	--concurrency 64 --requests 128 --input-len 4:24 --output-len 8:24 --vocab 128 --stall 120 --json
cp "$OUT" "$T/load1.json"
check "… all 128 completed" test "$(js "$T/load1.json" "d['levels'][0]['ok'], d['levels'][0]['errors'], d['levels'][0]['stalls']")" = "128 0 0"
check "… service.api passed on the way" test "$(js "$T/load1.json" "d['service.api']['status']")" = pass
check "… service.kv passed after it (every block back), service.preemption not failed" \
	test "$(js "$T/load1.json" "d['service.kv']['status'], d['service.preemption']['status'] != 'fail'")" = "pass True"
# paged: the budget of 8 whole contexts holds more sequences of these
# lengths at once, never more blocks than it has, and still queues
check "more than 8 sequences held at once in 8 contexts' blocks, never over the 64 blocks, requests queued" \
	test "$(( $(metric "$A" day0_kv_sequences_peak) > 8 )) $(metric "$A" day0_kv_blocks_peak) $(( $(metric "$A" day0_requests_waiting_peak) > 8 ))" = "1 64 1"
r1=$(rss)
expect_rc 0 "load again (64 clients, streaming, events)" "$ENGINE" load --url "$A" \
	--concurrency 64 --requests 128 --input-len 4:24 --output-len 8:24 --vocab 128 --stall 120 --events --no-api-check
check "… load's events are valid protocol lines" "$TOOLS/jsonl_check" "$OUT" \
	type=check,item=service.load,status=pass type=perf
r2=$(rss)
# (AddressSanitizer's allocator settles more slowly: a quarter there)
case $BUILD in *asan*) slack=4 ;; *) slack=10 ;; esac
check "serve's resident memory is flat across the two rounds ($r1 -> $r2 KiB)" \
	test "$r2" -le $((r1 + r1 / slack))
check "after the load: no request holds KV" test "$(metric "$A" day0_kv_sequences)" = 0

# --- clients that disconnect free their KV
# Deterministic: rank 1 is stopped (SIGSTOP) so no step can finish while
# 6 streaming and 6 non-streaming clients send their request (120 tokens
# each) and close their socket; serve looks at each client's socket
# every tick (serve_http.c, peer_gone), so when rank 1 goes on every
# request is already cancelled and at most a step of tokens is made.
c0=$(metric "$A" 'day0_requests_total{status="cancelled"}')
g0=$(metric "$A" day0_generation_tokens_total)
r1pid=$(mpi_rank_pid "day0-engine serve $T/m --tp 2" 1 "$a_PID")
check "serve's rank 1 found (pid ${r1pid:-none})" test -n "$r1pid"
kill -STOP "$r1pid" 2>/dev/null
python3 - "$T/a.port" <<'PY' >"$T/disc.out" 2>&1
import socket, sys, time
port = int(open(sys.argv[1]).read())
socks = []
for i in range(12):
    body = ('{"prompt":[1,2,%d],"max_tokens":120,"stream":%s}'
            % (i + 3, "true" if i < 6 else "false")).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    socks.append(s)
time.sleep(0.5)  # every request read and queued
for s in socks:
    s.close()
time.sleep(0.5)  # (serve's tick is 0.1 s)
print("12 sent and closed")
PY
check "… 12 clients sent a request each and hung up ($(cat "$T/disc.out"))" grep -q '^12 sent and closed' "$T/disc.out"
kill -CONT "$r1pid" 2>/dev/null
for _ in $(seq 200); do [ "$(metric "$A" day0_kv_sequences)" = 0 ] && break; sleep 0.1; done
check "after 12 disconnects the KV gauge returns to 0" test "$(metric "$A" day0_kv_sequences)" = 0
c1=$(metric "$A" 'day0_requests_total{status="cancelled"}')
check "… all 12 counted as cancelled requests ($((c1 - c0)) of 12: 6 streaming, 6 not)" test $((c1 - c0)) -eq 12
g1=$(metric "$A" day0_generation_tokens_total)
check "… that stopped generating at once ($((g1 - g0)) of 1440 tokens, at most 2 a request)" test $((g1 - g0)) -le 24
check "… and serve answers the next request" \
	test "$(post "$A" '{"prompt":[1,5,9],"max_tokens":4,"temperature":0}' "$T/after.json")" = 200

# --- probe: endpoint numerics against float64
expect_rc 0 "probe on serve: passes" "$ENGINE" probe --url "$A" --model "$T/m" --json
cp "$OUT" "$T/probe.json"
check "… top-1 100%, logprob error within the f32 bound" \
	test "$(js "$T/probe.json" "d['top1'] == 1.0 and d['max_abs'] < 1e-4 and d['positions'] == 64")" = True
# a perturbed copy: one tensor of the weights scaled by 1.05
cp -r "$T/m" "$T/p"
python3 - "$T/p" <<'EOF'
import json, struct, sys, os, glob
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.safetensors"))):
    b = bytearray(open(f, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    name = next((k for k in h if k.endswith("mlp.down_proj.weight")), None)
    if not name:
        continue
    s, e = h[name]["data_offsets"]
    vals = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    b[8 + n + s:8 + n + e] = struct.pack("<%df" % len(vals), *[v * 1.05 for v in vals])
    open(f, "wb").write(b)
    break
EOF
rm -f "$T/p/SHA256SUMS" "$T/p/tokenizer.json" "$T/p/tokenizer_config.json"
start_serve b 1 "$T/p" --tp 1 --max-ctx 64 --kv-seqs 2 --served-model-name m
check "a text prompt without a tokenizer -> 400 that says so" test \
	"$(post "$URL_b" '{"prompt":"hello"}' "$T/e6.json") $(js "$T/e6.json" "'tokenizer' in d['error']['message']")" = "400 True"
expect_rc 1 "probe fails when serve runs a perturbed copy of the weights" \
	"$ENGINE" probe --url "$URL_b" --model "$T/m" --events
check "… with a numerics.endpoint fail event" "$TOOLS/jsonl_check" "$OUT" \
	type=check,item=numerics.endpoint,status=fail

# --- SIGTERM with requests running, queued and on their way in: each is
# answered whole before the HTTP daemon goes (MHD_stop_daemon shut every
# socket down at once, racing the handlers abort_all had just woken:
# empty replies, streams cut without their abort chunk, [DONE] or the
# chunked body's end), and the port file is removed.  One client has
# sent its headers and half its body when the SIGTERM comes and the rest
# after it: a server that does not wait for the requests begun closes
# that connection unanswered, whatever the timing; it gets the 503 of a
# stopping server.  Rank 1 is held (SIGSTOP) while 12 streams and 12
# whole requests arrive (--max-seqs 1: one runs, the rest queue), rank 0
# gets the SIGTERM, then rank 1 goes on.
start_serve c 2 "$T/m" --tp 2 --max-ctx 1024 --kv-seqs 2 --max-seqs 1
r1pid=$(mpi_rank_pid "--port-file $T/c.port" 1 "$c_PID")
r0pid=$(mpi_rank_pid "--port-file $T/c.port" 0 "$c_PID")
check "serve c's ranks found (${r0pid:-none}, ${r1pid:-none})" test -n "$r0pid" -a -n "$r1pid"
mkdir -p "$T/stop"
python3 - "$T/c.port" "$T/stop/go" >"$T/stop/slow.txt" 2>&1 <<'PY' &
import json, os, socket, sys, time
port = int(open(sys.argv[1]).read())
s = socket.create_connection(("127.0.0.1", port))
body = b'{"prompt":[1,2,3],"max_tokens":4}'
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10])
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
data = b""
try:
    s.sendall(body[10:])
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
except OSError as e:
    print("error:", e)
head, _, rest = data.partition(b"\r\n\r\n")
print(head.split(b"\r\n")[0].decode() if head else "no answer", rest[:120].decode(errors="replace"))
PY
slow=$!
sleep 0.5 # the slow client's headers are read
kill -STOP "$r1pid" 2>/dev/null
spids=""
for i in $(seq 12); do
	curl -sN "$URL_c/v1/completions" -d '{"prompt":[1,2,3],"max_tokens":120,"stream":true}' \
		-o "$T/stop/s$i.out" -w '%{exitcode}\n' >"$T/stop/s$i.rc" 2>/dev/null &
	spids="$spids $!"
	curl -s "$URL_c/v1/completions" -d '{"prompt":[1,2,3],"max_tokens":120}' \
		-o "$T/stop/n$i.out" -w '%{exitcode} %{http_code}\n' >"$T/stop/n$i.rc" 2>/dev/null &
	spids="$spids $!"
done
sleep 1 # every request read and queued
kill -TERM "$r0pid"
sleep 0.2
kill -CONT "$r1pid" 2>/dev/null
sleep 0.5
touch "$T/stop/go" # the slow client sends the rest of its body
for p in $spids; do wait "$p"; done
wait "$slow"
wait "$c_PID"
check "SIGTERM: a request on its way in is answered 503, the server is stopping ($(head -c 200 "$T/stop/slow.txt"))" \
	grep -q '^HTTP/1.1 503 .*"the server is stopping"' "$T/stop/slow.txt"
python3 - "$T/stop" 12 >"$T/stop.txt" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
bad = []
def read(f):
    return open(os.path.join(d, f)).read() if os.path.exists(os.path.join(d, f)) else ""
for i in range(1, n + 1):
    ev = [l[6:] for l in read(f"s{i}.out").splitlines() if l.startswith("data: ")]
    try:
        fins = [json.loads(e)["choices"][0]["finish_reason"] for e in ev[:-1]]
    except ValueError:  # an event cut short
        fins = ["cut"]
    if read(f"s{i}.rc").split() != ["0"] or not ev or ev[-1] != "[DONE]" or fins[-1:] != ["abort"]:
        bad.append(f"stream {i}: curl exit {read(f's{i}.rc').split()}, {len(ev)} events, "
                   f"last {ev[-1][:12] if ev else None}, finish {fins[-1:]}")
    try:
        fin = json.loads(read(f"n{i}.out"))["choices"][0]["finish_reason"]
    except ValueError:
        fin = None
    if read(f"n{i}.rc").split() != ["0", "200"] or fin != "abort":
        bad.append(f"whole {i}: curl exit and status {read(f'n{i}.rc').split()}, finish {fin}")
print(f"{2 * n - len(bad)} of {2 * n}", "; ".join(bad[:4]))
PY
check "… every stream running or queued ends with finish_reason abort and [DONE], every whole answer is a 200 with abort ($(cat "$T/stop.txt"))" \
	grep -q '^24 of 24' "$T/stop.txt"
check "… and the port file is removed on the way out" test ! -e "$T/c.port"

# --- load's service.kv and service.preemption tell a server gone from
# one that is not day0's: serve killed mid-load fails both, naming the
# error (they said "/metrics has no KV block gauges: not day0's serve");
# a server that answers /metrics without day0's gauges gets the skips
start_serve d 1 "$T/m" --tp 1 --max-ctx 2048
"$ENGINE" load --url "$URL_d" --concurrency 2 --requests 400 --input-len 8 --output-len 1500 \
	--vocab 128 --timeout 30 --json >"$T/kl.json" 2>"$T/kl.err" &
lpid=$!
for _ in $(seq 300); do [ "$(metric "$URL_d" day0_generation_tokens_total)" -gt 100 ] 2>/dev/null && break; sleep 0.1; done
kill -KILL "$(mpi_rank_pid "--port-file $T/d.port" 0 "$d_PID")" 2>/dev/null
wait "$lpid"
check "load against a serve killed mid-load: exit 1" test $? = 1
wait "$d_PID" 2>/dev/null
check "… service.kv and service.preemption fail: the server stopped answering, the error named" \
	test "$(js "$T/kl.json" "d['service.kv']['status'], d['service.preemption']['status'], all('stopped answering after the load' in d[k]['detail'] and 'connect' in d[k]['detail'].lower() for k in ('service.kv', 'service.preemption'))")" = "fail fail True"
python3 - "$T/fake.port" <<'PY' >/dev/null 2>&1 &
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, body, kind="application/json"):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == "/metrics":
            self.reply(200, "# another server\nrequests_total 1\n", "text/plain")
        else:
            self.reply(200, json.dumps({"data": [{"id": "x"}]}))
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.reply(200, json.dumps({"choices": [{"index": 0, "text": "a", "finish_reason": "length"}],
                                    "usage": {"prompt_tokens": 4, "completion_tokens": 1}}))
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
fpid=$!
PIDS="$PIDS $fpid"
for _ in $(seq 100); do [ -s "$T/fake.port" ] && break; sleep 0.1; done
expect_rc 0 "load against a server without day0's metrics passes" "$ENGINE" load \
	--url "http://127.0.0.1:$(cat "$T/fake.port")" --model x --no-api-check --no-stream \
	--requests 4 --concurrency 2 --json
cp "$OUT" "$T/fake.json"
check "… service.kv and service.preemption skip: not day0's serve" \
	test "$(js "$T/fake.json" "d['service.kv']['status'], d['service.preemption']['status'], 'not day0' in d['service.kv']['detail']")" = "skip skip True"
kill "$fpid" 2>/dev/null

# --- stop: SIGTERM (mpirun forwards it) ends every rank
kill -TERM "$a_PID"
wait "$a_PID"
for _ in $(seq 100); do pgrep -f "[d]ay0-engine serve $T/m " >/dev/null || break; sleep 0.1; done
check "no rank is left after SIGTERM" bash -c "! pgrep -f '[d]ay0-engine serve $T/m ' >/dev/null"
# (the stage's end event can be lost in mpirun's own teardown: not checked)
check "serve's events are valid protocol lines" "$TOOLS/jsonl_check" "$T/a.out" \
	type=stage,stage=serve,state=start type=log,msg=serving type=sample,metric=serve.queue
