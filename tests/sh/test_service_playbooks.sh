# Service stages in playbooks: the vendor recipes under --check, `service`
# and `ready` validated, and serve-day0.json run for real (serve up until the
# playbook ends, probe and load against it): the headless checklist against
# the session file, and no server left behind.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PB="$DAY0_ROOT/playbooks"
command -v sqlite3 >/dev/null || { fail "sqlite3 is installed" "missing (make deps)"; exit 1; }
cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "1GiB"}]}
JSON
cat >"$T/inv8.json" <<'JSON'
{"name": "gpu", "nodes": [{"name": "g1", "transport": "local", "cards": 8, "card_mem": "80GiB"}]}
JSON

# --- the vendor recipes, as --check shows them
expect_rc 0 "serve-vllm.json --check" "$DAY0" run "$PB/serve-vllm.json" --inventory "$T/inv8.json" \
	--model /models/DeepSeek-V3 --check --work /W
contains "… vLLM's launch line for 8 cards" "vllm serve /models/DeepSeek-V3 --tensor-parallel-size 8" "$OUT"
contains "… a service, ready when its URL answers" "service: kept running until the playbook ends, ready when its URL answers" "$OUT"
contains "… the agent polls /health" '"ready":{"url":"http://127.0.0.1:8000/health","timeout":3600.0}' "$OUT"
contains "… probe with vendor bounds" "day0-engine probe --url http://127.0.0.1:8000 --model /models/DeepSeek-V3 --top 5 --max-abs 0.5" "$OUT"
contains "… load with ignore_eos and the SLO" "--ignore-eos --slo ttft=2000,tpot=100" "$OUT"
expect_rc 0 "serve-sglang.json --check" "$DAY0" run "$PB/serve-sglang.json" --inventory "$T/inv8.json" \
	--model /models/DeepSeek-V3 --check --work /W
contains "… SGLang's launch line" "python3 -m sglang.launch_server --model-path /models/DeepSeek-V3 --tp 8" "$OUT"
expect_rc 0 "serve-day0.json --check" "$DAY0" run "$PB/serve-day0.json" --inventory "$T/inv.json" \
	--model /M -e tp=2 -e ep=1 --check --work /W
contains "… serve under mpirun on every card" "-np 2 day0-engine serve /M --tp 2 --pp 1 --ep 1 --port" "$OUT"

# --- service and ready are validated
bad() { # NAME STAGE-JSON WANT
	printf '{"name":"x","stages":[%s]}' "$2" >"$T/bad.json"
	expect_rc 2 "$1" "$DAY0" run "$T/bad.json" --inventory "$T/inv.json" --check
	contains "… $3" "$3" "$ERR"
}
bad "ready without service is refused" \
	'{"id":"s","step":"exec","argv":["x"],"ready":"http://127.0.0.1:1/"}' \
	"stages[0].ready: only a service stage"
bad "a ready URL must be http" \
	'{"id":"s","step":"exec","argv":["x"],"service":true,"ready":{"url":"ftp://x"}}' \
	"stages[0].ready: expected a URL"
bad "service must be a boolean" \
	'{"id":"s","step":"exec","argv":["x"],"service":"yes"}' "stages[0].service: expected true or false"

# --- serve-day0 for real: serve stays up while probe and load run
"$BUILD/day0-engine" gen-model --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
	--vocab 128 "$T/m" >/dev/null
expect_rc 0 "serve-day0.json runs to GO" timeout $RUN_LIMIT "$DAY0" run "$PB/serve-day0.json" \
	--inventory "$T/inv.json" --model "$T/m" -e tp=2 -e ep=1 -e concurrency=1,8 -e requests=16 \
	--headless
cp "$OUT" "$T/headless.txt"
db=$(ls "$T"/sessions/*.db | head -1)
# (8 contexts of KV for at most 8 requests: nothing to preempt, a skip
# that says so; tests/sh/test_serve_paged.sh overloads it)
for iw in numerics.endpoint:pass service.api:pass service.load:pass service.kv:pass \
	service.preemption:skip; do
	item=${iw%:*} want=${iw#*:}
	row=$(awk -v i="$item" '$1 == i { print $2 }' "$T/headless.txt")
	stored=$(sqlite3 "$db" "select status from checks where item = '$item' order by ts desc limit 1")
	check "$item: the headless table ($row) is the session file's ($stored)" \
		test -n "$row" -a "$row" = "$stored" -a "$row" = "$want"
done
# probe's numerics event gives top1 as validate's does, a percentage (the
# Numerics screen and the report print it so: it was a fraction, "1.0%"),
# and no max_rel (probe has no relative figure)
check "probe's numerics row: top1 100.0 (a percentage), max_rel null" test \
	"$(sqlite3 "$db" "select top1, coalesce(max_rel, 'null') from numerics where name = 'endpoint'")" = "100.0|null"
run "$BUILD/day0-engine" simulate probe --scale 1000 --model "$T/m/config.json" -- \
	--url http://127.0.0.1:1 --model "$T/m"
check "simulate probe's numerics event: top1 98.4, the percentage its check's detail says" \
	test "$(python3 -c "import json,sys; print([e['top1'] for e in map(json.loads, open(sys.argv[1])) if e['type'] == 'numerics'])" "$OUT")" = "[98.4]"
check "the serve stage reported ready before probe started" test "$(sqlite3 "$db" \
	"select count(*) from events where type = 'stage' and body like '%\"ready\":true%'")" = 1
check "… and the server was stopped when the playbook ended" \
	bash -c "! pgrep -f '[d]ay0-engine serve $T/m' >/dev/null"
# gracefully: the agent's SIGTERM reaches the ranks at once, serve drains
# and ends, mpirun exits 0 (it ended "rc=137 killed by signal 9" at every
# run: mpirun, signalled, passes SIGTERM on a second late), and serve's
# own stage end and its last samples reach the session
sq() { sqlite3 "$db" "$1"; }
check "serve's stage ends rc 0 at the playbook's end, no SIGKILL ($(sq "select json_extract(body,'\$.rc') || ' ' || json_extract(body,'\$.msg') from events where node='local' and type='stage' and json_extract(body,'\$.stage_id')='serve' and json_extract(body,'\$.state')='end' and json_extract(body,'\$.rank') is null"))" \
	test "$(sq "select json_extract(body,'\$.rc') || ' ' || json_extract(body,'\$.msg') from events where node='local' and type='stage' and json_extract(body,'\$.stage_id')='serve' and json_extract(body,'\$.state')='end' and json_extract(body,'\$.rank') is null")" = "0 exit 0; the agent is exiting"
check "… serve's own stage end (rank 0) is in the session file" test \
	"$(sq "select count(*) from events where node='local' and type='stage' and json_extract(body,'\$.stage_id')='serve' and json_extract(body,'\$.state')='end' and json_extract(body,'\$.rank')=0")" = 1

# --- a service that dies after it was up: its stage turns failed, with the
# cause, in the table, the verdict and the file (it used to stay "done",
# the cause nowhere but the agent's own event)
cat >"$T/die.json" <<'JSON'
{"name": "svcdie", "policy": {"fail_fast": false}, "stages": [
 {"id": "serve", "step": "serve", "on": "cluster", "service": true,
  "args": ["${model}", "--tp", "2", "--port", "${service_port}", "--max-ctx", "128", "--kv-seqs", "2",
           "--card-mem", "${card_mem}"],
  "ready": {"url": "http://127.0.0.1:${service_port}/health", "timeout": 120}},
 {"id": "wait", "step": "exec", "on": "first", "needs": ["serve"], "argv": ["sleep", "4"]}]}
JSON
(timeout $RUN_LIMIT "$DAY0" run "$T/die.json" --inventory "$T/inv.json" --model "$T/m" --session "$T/die.db" \
	--headless >"$T/die.out" 2>&1; echo $? >"$T/die.rc") &
for i in $(seq 600); do grep -q "stage wait .*start" "$T/die.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
pkill -9 -f "[d]ay0-engine serve $T/m"
wait
check "a service killed after it was up: NO-GO, exit 1" test "$(cat "$T/die.rc")" = 1
contains "… the stage line says it stopped" "stage serve              FAILED (the service stopped)" "$T/die.out"
contains "… the stage table says why" "serve              failed   local: the service stopped after it was up: killed by signal 9" "$T/die.out"
contains "… the verdict names it" "failed: stage:serve" "$T/die.out"
check "… the file's last console end of serve is failed, with the cause" test \
	"$(sqlite3 "$T/die.db" "select json_extract(body,'\$.result') || ' ' || json_extract(body,'\$.msg') from events where node='console' and type='stage' and json_extract(body,'\$.stage_id')='serve' and json_extract(body,'\$.state')='end' order by seq desc limit 1")" \
	= "failed local: the service stopped after it was up: killed by signal 9 (Killed)"
"$DAY0" report "$T/die.db" >"$T/die.md" 2>/dev/null
contains "… the report's verdict names it" "failed: stage:serve" "$T/die.md"
# the playbook's own end stops a service that is up: no failure then
check "… while a playbook's end stopping it is no failure (the GO run above)" test \
	"$(sqlite3 "$db" "select count(*) from events where node='console' and type='stage' and json_extract(body,'\$.result')='failed'")" = 0
