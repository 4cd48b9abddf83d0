# serve's paged KV cache (docs/serve.md): answers identical to the
# one-at-a-time reference (a slot server holding one sequence, whole
# prompts) and to run --generate, under chunked prefill and preemption in
# a cache smaller than the load; prefix reuse hit and missed; a request
# that can never fit refused with a 400; /metrics under vLLM's names;
# load's service.kv and service.preemption; the same at TP 2, PP 2 (in
# micro-batches, the bubble reported), EP 2 on an MLA + MoE model
# (deepseek_v3), its compressed latent cache hit by a prefix; attention
# through scattered block tables bit-equal to the contiguous layout.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
for tool in curl python3; do
	command -v $tool >/dev/null || { fail "$tool is installed" "missing (make deps)"; exit 1; }
done
# start serve: NAME NP MODEL ARGS...; sets URL_NAME (waits for the port file)
start_serve() {
	local name=$1 np=$2 model=$3; shift 3
	rm -f "$T/$name.port"
	timeout 600 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
		"$ENGINE" serve "$model" "$@" --port 0 --port-file "$T/$name.port" \
		>"$T/$name.out" 2>"$T/$name.err" &
	PIDS="$PIDS $!"
	eval "${name}_PID=$!"
	for _ in $(seq 300); do [ -s "$T/$name.port" ] && break; sleep 0.1; done
	eval "URL_$name=http://127.0.0.1:$(cat "$T/$name.port" 2>/dev/null)"
}
stop_serve() { # NAME
	local pid
	eval "pid=\$${1}_PID"
	kill -TERM "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	return 0
}
metric() { # URL NAME -> value
	curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'
}
# rank0 NAME: the pid of serve NAME's rank 0 (the HTTP front and the
# scheduler): MPI rank 0 among the processes started under this NAME's
# mpirun (not a rank of the one before it, still on its way out)
rank0() {
	local top
	eval "top=\$${1}_PID"
	mpi_rank_pid "--port-file $T/$1.port" 0 "$top"
}
# ask URL PROMPTS_JSON OUT [together NAME]: every prompt greedily (12
# tokens, logprobs 2), one after the other, or all at once with serve
# NAME's rank 0 held (SIGSTOP) until every request sits in its socket's
# queue, so the scheduler sees them together however slowly the clients
# start (without the hold a loaded machine can serve them one by one:
# no preemption to test); OUT gets [[token_ids, token_logprobs, status], ...]
ask() {
	local hold=""
	rm -f "$3"
	[ -n "${5:-}" ] && { hold=$(rank0 "$5") || { echo "ask: serve $5's rank 0 not found" >&2; return 1; }; }
	python3 - "$1" "$2" "$3" "$hold" <<'EOF'
import json, os, signal, sys, threading, time, urllib.request, urllib.error
url, prompts, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
hold = int(sys.argv[4]) if sys.argv[4] else 0
together = hold > 0
port = int(url.rsplit(":", 1)[1])
def queued():  # server-side sockets of PORT established with bytes unread
    n = 0
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            c = l.split()
            if int(c[1].rsplit(":", 1)[1], 16) == port and c[3] == "01" and \
                    int(c[4].split(":")[1], 16) > 0:
                n += 1
    return n
res = [None] * len(prompts)
def one(i):
    body = json.dumps({"prompt": prompts[i], "max_tokens": 12, "temperature": 0,
                       "logprobs": 2}).encode()
    rq = urllib.request.Request(url + "/v1/completions", body,
                                {"Content-Type": "application/json"})
    try:
        c = json.load(urllib.request.urlopen(rq, timeout=300))["choices"][0]
        res[i] = [c["token_ids"], c["logprobs"]["token_logprobs"], 200]
    except urllib.error.HTTPError as e:
        res[i] = [[], [], e.code]
if together:
    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(prompts))]
    os.kill(hold, signal.SIGSTOP)
    try:
        [t.start() for t in ts]
        end = time.time() + 60
        while queued() < len(prompts) and time.time() < end:
            time.sleep(0.05)
        n = queued()
        time.sleep(0.2)  # (a body sent after its headers)
    finally:
        os.kill(hold, signal.SIGCONT)
    if n < len(prompts):  # no answers written: the checks on them fail
        sys.exit("ask: %d of %d requests reached serve while it was held" % (n, len(prompts)))
    [t.join() for t in ts]
else:
    for i in range(len(prompts)):
        one(i)
json.dump(res, open(out, "w"))
EOF
}
# same A B: the token ids equal and the logprobs within 1e-5 (batch
# composition changes a sum's order, nothing more), every answer a 200
same() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ok = len(a) == len(b) and all(x[2] == 200 and y[2] == 200 and x[0] == y[0] and len(x[0]) == 12 and
         max(abs(p - q) for p, q in zip(x[1], y[1])) < 1e-5 for x, y in zip(a, b))
print("same" if ok else "differ: %s | %s" % (a, b))
EOF
}
# run --generate's greedy ids for each prompt of PROMPTS_JSON (layout args)
run_ref() { # MODEL PROMPTS_JSON OUT ARGS...
	local model=$1 prompts=$2 out=$3; shift 3
	: >"$out"
	for p in $(python3 -c "import json,sys; print(' '.join(','.join(map(str, p)) for p in json.loads(sys.argv[1])))" "$prompts"); do
		"$ENGINE" run "$model" --tokens "$p" --generate 12 "$@" | sed -n 's/^generated: //p' >>"$out"
	done
}
ids_of() { # ANSWERS -> one line of ids per prompt
	python3 -c "import json,sys; [print(' '.join(map(str, r[0]))) for r in json.load(open(sys.argv[1]))]" "$1"
}

"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 --vocab 128 \
	"$T/m" >/dev/null
# 8 prompts of 3..30 tokens: with 12 tokens each they need 4..11 blocks of
# 4 tokens, 60 in all, and the cache has 12; a step takes 12 tokens, so
# the longer prompts are prefilled in chunks
PROMPTS=$(python3 -c "
import json, random
r = random.Random(7)
print(json.dumps([[r.randrange(1, 128) for _ in range(n)] for n in (5, 30, 13, 22, 9, 27, 17, 3)]))")
start_serve p 1 "$T/m" --tp 1 --max-ctx 64 --block-tokens 4 --kv-blocks 12 --max-batch-tokens 12 --events
start_serve r 1 "$T/m" --tp 1 --max-ctx 64 --kv-policy slots --kv-seqs 1
check "serve listens with 12 blocks of 4 tokens" test -s "$T/p.port"
check "GET /metrics: 12 blocks of 4 tokens, all free" test \
	"$(metric "$URL_p" day0_kv_blocks_total) $(metric "$URL_p" day0_kv_block_tokens) $(metric "$URL_p" 'day0_kv_blocks{state="free"}')" = "12 4 12"

ask "$URL_p" "$PROMPTS" "$T/paged.json" together p
ask "$URL_r" "$PROMPTS" "$T/ref.json"
run_ref "$T/m" "$PROMPTS" "$T/run.txt" --tp 1
check "8 prompts at once in 12 blocks: the tokens and logprobs of the one-at-a-time reference" \
	test "$(same "$T/paged.json" "$T/ref.json")" = same
check "… and run --generate's greedy tokens" test "$(ids_of "$T/paged.json")" = "$(cat "$T/run.txt")"
pre=$(metric "$URL_p" 'vllm:num_preemptions_total{model_name="m"}')
check "… with preemptions on the way ($pre)" test "${pre:-0}" -ge 1
# A sequence preempted before its first token has nothing to recheck (and
# a prefix hit can cover the row), so how many checks ran depends on the
# moment; none may differ.
same=$(metric "$URL_p" 'day0_recompute_checks_total{result="same"}')
check "… every recomputed sequence picked its last token again (${same:-?} checked)" test \
	"${same:+ok} $(metric "$URL_p" 'day0_recompute_checks_total{result="different"}')" = "ok 0"
check "… each preemption a warn event naming the request" \
	"$TOOLS/jsonl_check" "$T/p.out" "type=log,level=warn,msg=preempted: out of KV blocks"
check "… and all blocks back when idle (used 0, refs 0, free + cached = 12)" test \
	"$(metric "$URL_p" 'day0_kv_blocks{state="used"}') $(metric "$URL_p" day0_kv_block_refs) $(( $(metric "$URL_p" 'day0_kv_blocks{state="free"}') + $(metric "$URL_p" 'day0_kv_blocks{state="cached"}') ))" = "0 0 12"

# --- prefix caching: a system prompt of 24 tokens (6 full blocks)
SYS=$(python3 -c "print(','.join(str(40 + i) for i in range(24)))")
h0=$(metric "$URL_p" 'vllm:gpu_prefix_cache_hits_total{model_name="m"}')
ask "$URL_p" "[[$SYS,1,2,3]]" "$T/x1.json"
h1=$(metric "$URL_p" 'vllm:gpu_prefix_cache_hits_total{model_name="m"}')
ask "$URL_p" "[[$SYS,7,8,9,10]]" "$T/x2.json"
h2=$(metric "$URL_p" 'vllm:gpu_prefix_cache_hits_total{model_name="m"}')
ask "$URL_p" "[[41,${SYS#*,},7,8,9,10]]" "$T/x3.json"
h3=$(metric "$URL_p" 'vllm:gpu_prefix_cache_hits_total{model_name="m"}')
check "a first system prompt misses the prefix cache; the same system prompt again hits its 24 tokens; one token changed at the front misses ($h0 $h1 $h2 $h3)" \
	test "$((h1 - h0)) $((h2 - h1)) $((h3 - h2))" = "0 24 0"
ask "$URL_r" "[[$SYS,1,2,3],[$SYS,7,8,9,10],[41,${SYS#*,},7,8,9,10]]" "$T/xr.json"
python3 -c "import json,sys; print(json.dumps([json.load(open(f))[0] for f in sys.argv[1:]]))" \
	"$T/x1.json" "$T/x2.json" "$T/x3.json" >"$T/xp.json"
check "… the answers of the miss, the hit and the miss equal the reference's" \
	test "$(same "$T/xp.json" "$T/xr.json")" = same

# --- admission: a request that can never fit gets a 400 that says so
long=$(python3 -c "print(','.join(['5'] * 30))")
code=$(curl -s -o "$T/e.json" -w '%{http_code}' "$URL_p/v1/completions" \
	-d "{\"prompt\":[$long],\"max_tokens\":30}")
check "30 + 30 tokens in a cache of 48 -> 400 naming max_tokens, 'can never fit'" test \
	"$code $(python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; print(e['param'], 'never fit' in e['message'])" "$T/e.json")" = "400 max_tokens True"

# --- load: overload, then service.kv and service.preemption from /metrics
expect_rc 0 "load: 16 clients against 12 blocks, no errors" "$ENGINE" load --url "$URL_p" \
	--concurrency 16 --requests 32 --input-len 4:24 --output-len 4:16 --vocab 128 \
	--stall 60 --no-api-check --json
cp "$OUT" "$T/load.json"
check "… service.kv pass (every block back) and service.preemption pass (preempted, all answered, none wrong)" \
	test "$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['service.kv']['status'], d['service.preemption']['status'], d['levels'][0]['ok'])" "$T/load.json")" = "pass pass 32"
expect_rc 0 "load --events against the reference (no overload)" "$ENGINE" load --url "$URL_r" \
	--concurrency 2 --requests 4 --input-len 4:8 --output-len 4 --vocab 128 --no-api-check --events
check "… service.kv pass and service.preemption skip (no preemption) as check events" \
	"$TOOLS/jsonl_check" "$OUT" type=check,item=service.kv,status=pass \
	type=check,item=service.preemption,status=skip
stop_serve p
stop_serve r

# --- TP 2, PP 2, EP 2 on an MLA + MoE model: paged, chunked, preempted
"$ENGINE" gen-model --arch deepseek_v3 --layers 2 "$T/ds" >/dev/null
P4=$(python3 -c "
import json, random
r = random.Random(3)
print(json.dumps([[r.randrange(1, 100) for _ in range(n)] for n in (21, 6, 14, 25, 9, 17, 3, 11)]))")
# a prompt that shares prompt 0's first 12 tokens (3 blocks), asked twice
# after the batch: the second (at least) reuses the cached latent blocks
PX=$(python3 -c "import json,sys; p=json.loads(sys.argv[1]); print(json.dumps([p[0][:12] + [7, 8, 9]]))" "$P4")
run_ref "$T/ds" "$P4" "$T/ds_run.txt" --tp 1
run_ref "$T/ds" "$PX" "$T/dsx_run.txt" --tp 1

# --- attention through the block table, bit for bit: tables scattered
# out of order and interleaved against one block a slot, chunked prefill
# and decode of two sequences a batch (tests/tools/kv_paged_check.c);
# GQA (llama) in blocks of 1 and 4, MLA's latent cache at TP 2, PP 2, EP 2
for a in "1 $T/m 1 1 1 1" "1 $T/m 1 1 1 4" "2 $T/ds 2 1 1 4" "2 $T/ds 1 2 1 4" "2 $T/ds 1 1 2 4"; do
	set -- $a
	np=$1
	shift
	expect_rc 0 "in-place paged attention: $1 tp $2 pp $3 ep $4, blocks of $5: logits bit-equal to the contiguous layout" \
		timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$TOOLS/kv_paged_check" "$@"
	contains "… it says so" "bit-equal to the contiguous layout" "$OUT"
done
# MLA's cache is the compressed latent: a block of 4 tokens at TP 2 costs
# 2 layers x 4 x (kv_lora_rank 16 + rope 8) x 4 bytes = 768 bytes a card
# (not 2 x 4 x 2 heads x (24 + 16) x 4 = 2560 for per-head keys and
# values), so --kv-mem 7680 holds 10 blocks
start_serve k 2 "$T/ds" --tp 2 --max-ctx 64 --block-tokens 4 --kv-mem 7680
check "MLA: --kv-mem 7680 at tp 2 holds 10 latent blocks of 4 tokens ($(metric "$URL_k" day0_kv_blocks_total))" \
	test "$(metric "$URL_k" day0_kv_blocks_total)" = 10
stop_serve k
# PP: 2 micro-batches in flight under the default policy (8 decodes stay
# one batch, prompt chunks are cut), 3 with every decode cut
# (--micro-batch-tokens 1), and TP 2 x PP 2 (the stage's second rank takes
# rank 0's descriptions too) with --max-seqs 3 (each micro-batch 3
# sequences at most, 6 running); prompts of up to 25 tokens in chunks of
# 12: a prompt's next chunk enters the pipeline before the last one is back
for lay in "--tp 2" "--tp 1 --pp 2" "--tp 1 --pp 2 --micro-batches 3 --micro-batch-tokens 1" \
	"--tp 2 --pp 2 --max-seqs 3" "--tp 1 --ep 2"; do
	np=$(set -- $lay; echo $(( $2 * ${4:-1} )))
	start_serve l "$np" "$T/ds" $lay --max-ctx 64 --block-tokens 4 --kv-blocks 14 --max-batch-tokens 12
	ask "$URL_l" "$P4" "$T/l.json" together l
	check "$lay: 8 prompts at once in 14 blocks: run --generate's greedy tokens" \
		test "$(ids_of "$T/l.json")" = "$(cat "$T/ds_run.txt")"
	hits() { metric "$URL_l" 'vllm:gpu_prefix_cache_hits_total{model_name="ds"}'; }
	ask "$URL_l" "$PX" "$T/lx.json"
	h0=$(hits)
	ask "$URL_l" "$PX" "$T/lx.json"
	check "$lay: a shared 12-token prefix asked again hits 12 cached latent tokens ($h0 -> $(hits)), run --generate's tokens" \
		test "$(( $(hits) - ${h0:-0} )) $(ids_of "$T/lx.json")" = "12 $(cat "$T/dsx_run.txt")"
	n=$(metric "$URL_l" 'vllm:num_preemptions_total{model_name="ds"}')
	check "$lay: … preempted and recomputed (${n:-no metrics}), none differently" \
		test "$(( ${n:-0} >= 1 )) $(metric "$URL_l" 'day0_recompute_checks_total{result="different"}')" = "1 0"
	case $lay in *"--pp 2"*)
		M=$(echo "$lay" | sed -n 's/.*--micro-batches \([0-9]*\).*/\1/p')
		M=${M:-2}
		mb=$(metric "$URL_l" day0_pp_micro_batches_mean)
		bub=$(metric "$URL_l" day0_pp_bubble_fraction) exp=$(metric "$URL_l" day0_pp_bubble_expected)
		check "$lay: more than one micro-batch in flight, at most $M (mean $mb), the bubble measured ($bub) beside (p-1)/(m+p-1) ($exp)" \
			python3 -c "import sys; M, m, b, e = map(float, sys.argv[1:]); sys.exit(not (1 < m <= M and 0 < b < 1 and abs(e - 1 / (m + 1)) < 1e-3))" "$M" "$mb" "$bub" "$exp"
		case $lay in *"--max-seqs 3"*)
			pk=$(metric "$URL_l" day0_kv_sequences_peak)
			check "$lay: at most 3 x 2 sequences running at once (peak ${pk:-no metric}) though 8 were asked" \
				test "${pk:-99}" -ge 3 -a "${pk:-99}" -le 6
		esac
	esac
	stop_serve l
done
