#!/usr/bin/env bash
# The console's service level: serve-day0.json run for real (serve, probe,
# load on a tiny generated model) through `day0 run`, live in tmux on the
# Service screen (8), then headless; the Service screen of `day0 replay`
# compared with the session file (sqlite3: load's last samples, serve's,
# kv.used per card, load's per-level perf events); seek == fold; the
# report's service section (md, json, html with its latency chart)
# against the same rows.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export LANG=C.UTF-8 LC_ALL=C.UTF-8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for p in sqlite3 tmux python3; do
	command -v $p >/dev/null || { fail "$p is installed" "missing (make deps)"; exit 1; }
done
. "$DAY0_ROOT/tests/tmux.sh"
tmux_server svc

cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "1GiB"}]}
JSON
"$ENGINE" gen-model --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
	--vocab 128 "$T/m" >/dev/null
RUN=("$DAY0" run "$DAY0_ROOT/playbooks/serve-day0.json" --inventory "$T/inv.json"
	--model "$T/m" -e tp=2 -e ep=1 -e concurrency=1,4 -e requests=12)

f2() { [ -n "$1" ] && printf '%.2f' "$1" || printf -- -; }
# levels DB NAME: the Service screen's table has one row per load level of
# DB, every figure the level's perf event's.
levels() {
	sqlite3 "$1" "select json_extract(e.body, '$.concurrency'), json_extract(e.body, '$.requests'),
	json_extract(e.body, '$.errors'), json_extract(e.body, '$.stalls'),
	json_extract(e.body, '$.requests_per_s'), p.tokens_per_s,
	json_extract(e.body, '$.ttft_p50_ms'), json_extract(e.body, '$.ttft_p99_ms'),
	json_extract(e.body, '$.tpot_p50_ms'), json_extract(e.body, '$.tpot_p99_ms'),
	json_extract(e.body, '$.e2e_p50_ms'), json_extract(e.body, '$.e2e_p99_ms')
	from perf p join events e on e.node = p.node and e.seq = p.seq
	where json_extract(e.body, '$.concurrency') is not null order by p.ts" >"$T/levels"
	check "$2: the session file holds load's two levels" test "$(wc -l <"$T/levels")" = 2
	while IFS='|' read -r c n er st rps tps t50 t99 p50 p99 e50 e99; do
		want=$(printf '%-12.12s %-10.10s %5d %6d %5d %5d %8s %9s %8s %8s %8s %8s %8s %8s' \
			local load "$c" "$n" "$er" "$st" "$(f2 "$rps")" "$(f2 "$tps")" "$(f2 "$t50")" \
			"$(f2 "$t99")" "$(f2 "$p50")" "$(f2 "$p99")" "$(f2 "$e50")" "$(f2 "$e99")")
		wait_for "$2: the level at concurrency $c as its perf event" "$want" 2
	done <"$T/levels"
}

# --- live: the Service screen while the run goes on, then at its verdict
tm -u new-session -d -s r -x 200 -y 50 \
	"env LANG=C.UTF-8 TERM=screen-256color DAY0_SESSIONS=$T/live $(printf '%q ' "${RUN[@]}") 2>$T/live.err; echo EXIT \$?; sleep 60"
wait_for "live: the console is up" "serve-day0" 60
key 8
wait_for "live: the Service screen's tab" "8 Service"
wait_for "live: load's figures appear" "load on local" 120
wait_for "live: the run ends GO" "  GO" 120
wait_for "live: load's second level in the table" "local        load           4" 10
ldb=$(ls "$T"/live/*.db 2>/dev/null | head -1)
if [ -n "$ldb" ]; then
	levels "$ldb" live
else
	fail "live: session file" "none in $T/live"
fi
key q
sleep 0.3
tm kill-session -t r 2>/dev/null

# --- headless, then replay
export DAY0_SESSIONS="$T/sessions"
expect_rc 0 "serve-day0.json runs headless to GO" timeout $RUN_LIMIT "${RUN[@]}" --headless
db=$(ls "$T"/sessions/*.db | head -1)
q() { sqlite3 "$db" "$@"; }
# last(METRIC [CARD]): the last sample of a series on node local.
last() {
	q "select p.value from sample_points p join series s on s.id = p.series where s.node = 'local' and s.metric = '$1' and s.card = ${2:--1} order by p.ts desc, p.seq desc limit 1"
}
f0() { [ -n "$1" ] && printf '%.0f' "$1" || printf -- -; }

tm -u new-session -d -s r -x 200 -y 50 \
	"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $db --at 100000; sleep 60"
wait_for "replay: at the end" "PAUSED"
key 8
wait_for "replay: the Service screen" "load on local"
conc=$(f0 "$(last load.concurrency)")
reqs=$(f0 "$(last load.requests)")
wait_for "replay: concurrency $conc, requests $reqs as the last samples" \
	"load on local  concurrency $conc  in flight $(f0 "$(last load.inflight)")  requests $reqs"
for m in ttft:TTFT tpot:TPOT e2e:e2e; do
	k=${m%%:*} lab=${m#*:}
	want=$(printf '  %-8s %10s %10s %10s' "$lab" "$(f2 "$(last load.${k}_p50_ms)")" \
		"$(f2 "$(last load.${k}_p90_ms)")" "$(f2 "$(last load.${k}_p99_ms)")")
	wait_for "replay: $lab p50/p90/p99 as load's last samples" "$want" 2
done
wait_for "replay: tokens/s and requests/s as the last samples" \
	"tokens/s $(f2 "$(last load.tokens_per_s)")  requests/s $(f2 "$(last load.requests_per_s)")" 2
wait_for "replay: errors and stalls as the last samples" \
	"errors $(f0 "$(last load.errors)")  stalls $(f0 "$(last load.stalls)")" 2
wait_for "replay: serve's queue, running, tokens as its last samples" \
	"serve on local  queue $(f0 "$(last serve.queue)")  running $(f0 "$(last serve.running)")  tokens generated $(f0 "$(last serve.gen_tokens)")" 2
check "serve's last samples: idle after the load, tokens generated" \
	test "$(last serve.running)" = 0.0 -a "$(last serve.queue)" = 0.0 -a \
	"$(f0 "$(last serve.gen_tokens)")" -gt 0 -a "$(last kv.used 0)" = 0.0
kvu=$(f0 "$(last serve.kv_blocks_used)") kvc=$(f0 "$(last serve.kv_blocks_cached)")
kvt=$(f0 "$(last serve.kv_blocks_total)")
wait_for "replay: the KV blocks gauge as serve's last samples (used $kvu, cached $kvc of $kvt)" \
	"KV blocks $kvu used ($(f0 "$(last serve.kv_blocks_shared)") shared)  $kvc cached  $((kvt - kvu - kvc)) free  of $kvt" 2
ncards=$(q "select count(*) from series where node = 'local' and metric = 'kv.used'")
shown=$(cap | grep -cE '^  card [0-9]+ +KV ')
check "replay: a KV line per card with kv.used ($shown of $ncards)" test "$shown" = "$ncards" -a "$ncards" = 2
levels "$db" replay
# The Numerics screen's endpoint row: probe's top-1 in percent, as the
# check says it (the event's fraction read 1.0%), its absolute error
# marked so (it has no relative one).
key 5
wait_for "replay: the Numerics screen" "max_rel"
row=$(q "select printf('%.1e a', max_abs) || '|' || printf('%.1f%%', top1) from numerics where name = 'endpoint' order by ts desc limit 1")
on_screen "replay: the endpoint row: ${row%|*}, top-1 ${row#*|} (the file's)" \
	"^e2e +endpoint .* ${row%|*} .* ${row#*|}"
check "... and the file's top-1 is the check's percentage" \
	bash -c "sqlite3 '$db' \"select detail from checks where item = 'numerics.endpoint'\" | grep -qF 'top-1 ${row#*|}'"
tm kill-session -t r
# --baseline: the live run's levels beside these (tok/s and e2e p99 deltas)
tm -u new-session -d -s r -x 200 -y 50 \
	"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $db --at 100000 --baseline $ldb; sleep 60"
wait_for "baseline: replay at the end" "PAUSED"
key 8
wait_for "baseline: the Service screen" "load on local"
want=$(awk -F'|' '{ print $1 }' "$T/levels" | sort -n | head -1)
on_screen "baseline: a level's tok/s and e2e p99 against the live run's" \
	"^local +load +$want .* tok/s [+-][0-9.]+% e2e99 [+-][0-9.]+%"
# Early on (before load): the screen says there is nothing yet.
tm kill-session -t r
tm -u new-session -d -s r -x 200 -y 50 \
	"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $db --at 0; sleep 60"
wait_for "replay at 0: paused" "PAUSED"
key 8
wait_for "replay at 0: no service figures yet" "no service figures yet"
tm kill-session -t r

# seek == fold at a few times (the view's one fold, replayed)
span=$(q "select (max(ts) - min(ts)) / 1e9 from events")
same=1
for at in 0.5 1 1.5 2 2.5 3 $span; do
	"$DAY0" replay "$db" --dump --at "$at" >"$T/seek" 2>/dev/null
	"$DAY0" replay "$db" --dump --fold --at "$at" >"$T/fold" 2>/dev/null
	cmp -s "$T/seek" "$T/fold" || { same=0; diff "$T/seek" "$T/fold" | head -5; }
done
check "replay: seek == fold over the run (service lines included)" test $same = 1
contains "… the dump has the service figures" "service load.concurrency=$conc" "$T/seek"

# Between the verdict and the service's end (the console's bye stops it)
# the node's state is "stopping serve", not "run serve 0%".
vts=$(q "select min(ts) from events where node='console' and type='verdict'")
ets=$(q "select min(ts) from events where node='local' and type='stage' and json_extract(body,'$.stage_id')='serve' and json_extract(body,'$.state')='end'")
t0=$(q "select min(ts) from events")
check "the service ended after the verdict (the bye stopped it)" test -n "$vts" -a -n "$ets" -a "${ets:-0}" -gt "${vts:-0}"
at=$(python3 -c "print('%.3f' % ((($vts + $ets) / 2 - $t0) / 1e9))")
tm -u new-session -d -s r -x 200 -y 50 \
	"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $db --at $at; sleep 60"
wait_for "replay between the verdict and the service's end ($at s): stopping serve" "stopping serve"
absent "... not 'run serve'" "run serve"
tm kill-session -t r

# --- the report's service section
expect_rc 0 "report --format md" "$DAY0" report "$db" --format md
cp "$OUT" "$T/r.md"
contains "md: the service section" "## Service (load per concurrency level)" "$T/r.md"
g() { printf '%.6g' "$1"; }
q "select json_extract(e.body, '$.concurrency'), json_extract(e.body, '$.requests'),
	json_extract(e.body, '$.errors'), json_extract(e.body, '$.stalls'),
	json_extract(e.body, '$.requests_per_s'), p.tokens_per_s,
	json_extract(e.body, '$.ttft_p50_ms'), json_extract(e.body, '$.ttft_p90_ms'),
	json_extract(e.body, '$.ttft_p99_ms'), json_extract(e.body, '$.tpot_p50_ms'),
	json_extract(e.body, '$.tpot_p90_ms'), json_extract(e.body, '$.tpot_p99_ms'),
	json_extract(e.body, '$.e2e_p50_ms'), json_extract(e.body, '$.e2e_p90_ms'),
	json_extract(e.body, '$.e2e_p99_ms'), json_extract(e.body, '$.goodput')
	from perf p join events e on e.node = p.node and e.seq = p.seq
	where json_extract(e.body, '$.concurrency') is not null order by p.ts" >"$T/full"
while IFS='|' read -r c n er st rps tps a b cc d e f2_ h i j gp; do
	row="| load | local | $c | $n | $er | $st | $(g "$rps") | $(g "$tps") | $(g "$a") | $(g "$b") | $(g "$cc") | $(g "$d") | $(g "$e") | $(g "$f2_") | $(g "$h") | $(g "$i") | $(g "$j") | $(g "$gp") |"
	contains "md: the row at concurrency $c is the perf event's" "$row" "$T/r.md"
	html="<td class=\"n\">$(g "$a")</td><td class=\"n\">$(g "$b")</td><td class=\"n\">$(g "$cc")</td>"
	echo "$html" >>"$T/html_want"
done <"$T/full"
expect_rc 0 "report --format json" "$DAY0" report "$db" --format json
cp "$OUT" "$T/r.json"
python3 - "$T/r.json" "$T/full" >"$T/json_cmp" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[2])]
keys = ["concurrency", "requests", "errors", "stalls", "requests_per_s",
        "tokens_per_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
        "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "e2e_p50_ms",
        "e2e_p90_ms", "e2e_p99_ms", "goodput"]
svc = doc.get("service") or []
bad = [] if len(svc) == len(rows) else ["%d levels, file %d" % (len(svc), len(rows))]
for s, r in zip(svc, rows):
    for k, v in zip(keys, r):
        if abs(float(s[k]) - float(v)) > 1e-9 * max(1.0, abs(float(v))):
            bad.append("%s: %s != %s" % (k, s[k], v))
    if s.get("error_classes") != {} or s.get("errors_by_class") != "":
        bad.append("error classes %r" % s.get("error_classes"))
print("ok" if not bad else "; ".join(bad))
PY
check "json: service levels equal the session file's ($(cat "$T/json_cmp"))" test "$(cat "$T/json_cmp")" = ok
expect_rc 0 "report --format html" "$DAY0" report "$db" --format html
cp "$OUT" "$T/r.html"
contains "html: the service section" '<h2 id="service">Service</h2>' "$T/r.html"
contains "html: the latency-against-concurrency chart" 'id="chart-service-latency"' "$T/r.html"
contains "html: the throughput chart" 'id="chart-service-throughput"' "$T/r.html"
pts=$(grep -o 'data-series="TTFT p99"[^>]*points="[^"]*"' "$T/r.html" | sed 's/.*points="//; s/"$//' | wc -w)
check "html: the TTFT p99 line has a point per level ($pts)" test "$pts" = 2
while read -r want; do
	contains "html: the TTFT cells of a level" "$want" "$T/r.html"
done <"$T/html_want"
# --- errors by class: load against a port nobody listens on
cat >"$T/dead.json" <<'JSON'
{"name": "dead-endpoint", "stages": [
 {"id": "load", "step": "load", "on": "first",
  "args": ["--url", "http://127.0.0.1:1", "--model", "x", "--no-api-check",
           "--concurrency", "2", "--requests", "4"],
  "checks": {"service.load": {}}}]}
JSON
export DAY0_SESSIONS="$T/dead"
run timeout 120 "$DAY0" run "$T/dead.json" --inventory "$T/inv.json" --headless
check "a load with refused connections is NO-GO (exit $RC)" test "$RC" != 0
ddb=$(ls "$T"/dead/*.db | head -1)
nconn=$(sqlite3 "$ddb" "select json_extract(body, '$.error_classes.connect') from events where type = 'perf'")
check "the session file has its connect errors ($nconn)" test "$nconn" = 4
tm -u new-session -d -s r -x 200 -y 50 \
	"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay $ddb --at 100000; sleep 60"
wait_for "dead endpoint: replay at the end" "PAUSED"
key 8
wait_for "dead endpoint: errors and the class from the samples" "errors $nconn  stalls 0  connect $nconn"
on_screen "dead endpoint: no latency measured is shown as -" '^  TTFT +- +- +-$'
on_screen "dead endpoint: the level's row has its class" '^local +load +2 +4 +4 +0 .* connect 4$'
tm kill-session -t r
expect_rc 0 "dead endpoint: report --format md" "$DAY0" report "$ddb" --format md
contains "md: the level's errors by class, latencies absent" "| load | local | 2 | 4 | 4 | 0 | 0 | 0 | - | - | - | - | - | - | - | - | - | 0 | connect 4 |" "$OUT"
check "no server left behind" bash -c "! pgrep -f '[d]ay0-engine serve $T/m' >/dev/null"
