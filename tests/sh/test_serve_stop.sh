# serve's stop (docs/service.md): SIGTERM makes /health 503 and new
# requests 503 "the server is stopping" at once, even while a step is in
# flight (rank 1 held with SIGSTOP: the loop cannot look at the signal);
# the running request ends with finish_reason abort, and the last samples
# are the end state (nothing queued or running, the KV blocks back), not
# the busy server of the moment the stop began.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
PIDS=""
cleanup() {
	for p in $PIDS; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
for tool in curl python3 mpirun; do
	command -v $tool >/dev/null || { fail "$tool is installed" "missing (make deps)"; exit 1; }
done
"$ENGINE" gen-model --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 128 \
	--vocab 256 --max-pos 512 "$T/m" >/dev/null
timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
	"$ENGINE" serve "$T/m" --tp 2 --max-ctx 512 --kv-seqs 2 --max-seqs 1 --events \
	--port 0 --port-file "$T/port" >"$T/serve.out" 2>"$T/serve.err" &
mpid=$!
PIDS="$mpid"
for _ in $(seq 300); do [ -s "$T/port" ] && break; sleep 0.1; done
U="http://127.0.0.1:$(cat "$T/port")"
r0=$(mpi_rank_pid "--port-file $T/port" 0 "$mpid")
r1=$(mpi_rank_pid "--port-file $T/port" 1 "$mpid")
check "serve's ranks found (${r0:-none}, ${r1:-none})" test -n "$r0" -a -n "$r1"
PIDS="$r1 $PIDS"

# rank 1 held (SIGSTOP), then three requests: the first's step is in
# flight (rank 0 waits in it for rank 1), two queue (--max-seqs 1)
kill -STOP "$r1"
for i in 1 2 3; do
	curl -s -m 60 "$U/v1/completions" -d "{\"prompt\":[1,2,$i],\"max_tokens\":400}" \
		-o "$T/r$i.json" -w '%{http_code}' >"$T/r$i.code" 2>/dev/null &
done
sleep 1
kill -TERM "$r0"
sleep 0.5
check "SIGTERM with a step in flight: /health is 503 at once" \
	test "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$U/health")" = 503
code=$(curl -s -m 5 -o "$T/late.json" -w '%{http_code}' "$U/v1/completions" -d '{"prompt":[1,2,3],"max_tokens":4}')
check "… a request arriving meanwhile gets 503 'the server is stopping' ($code $(head -c 120 "$T/late.json"))" \
	grep -q 'the server is stopping' "$T/late.json"
kill -CONT "$r1"
wait "$mpid"
check "serve exits 0 after SIGTERM ($?)" test "$?" = 0
wait
check "… the requests running or queued are answered 200 with finish_reason abort ($(cat "$T"/r?.code))" \
	test "$(cat "$T"/r?.code) $(python3 -c "import json,sys; print(*[json.load(open(f))['choices'][0]['finish_reason'] for f in sys.argv[1:]])" "$T"/r?.json)" = "200200200 abort abort abort"
last() { # the last value of host sample METRIC
	python3 -c "import json,sys
v = [e.get('value') for e in map(json.loads, open(sys.argv[1])) if e.get('type') == 'sample' and e.get('metric') == sys.argv[2]]
print(v[-1] if v else None)" "$T/serve.out" "$1"
}
got="$(last serve.queue) $(last serve.running) $(last serve.kv_blocks_used)"
check "serve's last samples are the end state: 0 queued, 0 running, 0 KV blocks used ($got)" \
	test "$got" = "0 0 0"
check "… and they come before serve's stage end" python3 -c "import json,sys
ev = [json.loads(l) for l in open(sys.argv[1])]
end = max(i for i, e in enumerate(ev) if e['type'] == 'stage' and e.get('state') == 'end')
s = max(i for i, e in enumerate(ev) if e['type'] == 'sample' and e.get('metric') == 'serve.running')
sys.exit(0 if s < end else 1)" "$T/serve.out"
check "serve's events are valid protocol lines" "$TOOLS/jsonl_check" "$T/serve.out" \
	type=stage,stage=serve,state=end,rc=0
