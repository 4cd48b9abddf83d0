#!/usr/bin/env bash
# day0 run on the local transport: --check, headless runs to a verdict,
# retries, failures and skips, thresholds, a killed agent, a killed console
# and --resume, Ctrl-C, bad input.  Every run writes a real session file
# that the store's audit checks (every seq exactly once).
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
STORE="$BUILD/tests/day0_store"
export DAY0_SESSIONS="$T/sessions"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "1GiB"}]}
JSON
cat >"$T/pb.json" <<'JSON'
{"name": "pipeline", "vars": {"m": "${work}/m"},
 "stages": [
  {"id": "facts", "step": "facts", "on": "all", "require": {"cores": 1},
   "checks": {"facts": {}}},
  {"id": "gen", "step": "gen-model", "on": "all", "needs": ["facts"],
   "args": ["--arch", "qwen3", "--layers", "2", "--hidden", "64", "--heads", "4",
            "--kv-heads", "2", "--vocab", "128", "--force", "${m}"]},
  {"id": "verify", "step": "verify", "on": "all", "needs": ["gen"], "args": ["${m}"],
   "checks": {"weights.integrity": {}, "weights.metadata": {}}},
  {"id": "run", "step": "run", "on": "cluster", "needs": ["verify"],
   "args": ["${m}", "--tp", "${world}", "--tokens", "1,2,3", "--card-mem", "${card_mem}",
            "--dump-logits", "${work}/lg.st"],
   "checks": {"resources.peak": {}}},
  {"id": "validate", "step": "validate", "on": "first", "needs": ["run"],
   "args": ["${m}", "--tokens", "1,2,3", "--logits", "${work}/lg.st", "--levels", "e2e"],
   "checks": {"numerics.e2e": {}}}]}
JSON

# --check: the exact lines, nothing run, no session file.
expect_rc 0 "--check exits 0" "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" --check --work /W
contains "--check shows the agent's command line" "day0-agent --node local --spool" "$OUT"
contains "--check shows the mpirun line of the cluster stage" \
	"mpirun --tag-output --allow-run-as-root -x DAY0_NODE -x DAY0_STAGE_ID -x DAY0_RANKS -x DAY0_SESSION -np 2 day0-engine run /W/m --tp 2 --tokens 1,2,3 --card-mem 1073741824 --dump-logits /W/lg.st --events" "$OUT"
contains "--check shows the agent's JSON command" '"cmd":"run","stage_id":"verify","step":"verify","args":["/W/m"]' "$OUT"
contains "--check expands playbook vars holding variables" "day0-engine verify /W/m --events" "$OUT"
check "--check creates no session file" test ! -e "$T/sessions"

# A full headless run.
expect_rc 0 "a passing playbook exits 0 (go)" timeout 120 "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv.json" --session "$T/s1.db" --headless
contains "headless says the verdict" "verdict: GO" "$OUT"
contains "headless prints stage lines" "stage verify             done" "$OUT"
contains "headless prints check lines" "check numerics.e2e       pass" "$OUT"
contains "the checklist table lists the items" "weights.integrity        pass    verify         local" "$OUT"
expect_rc 0 "the session's events are all there, once each" "$STORE" audit "$T/s1.db"
q() { sqlite3 "$T/s1.db" "$1"; }
check "the manifest holds the playbook, inventory, command, versions" \
	test "$(q "select count(*) from session where key in ('playbook','inventory','command','versions','model','stages','verdict')")" = 7
check "the manifest records the mpirun command line" \
	bash -c "sqlite3 '$T/s1.db' \"select value from session where key='stages'\" | grep -q 'mpirun.*--tag-output.*day0-engine.*run'"
check "the verdict is stored" test "$(q "select json_extract(value,'$.go') from session where key='verdict'")" = 1
check "the console recorded each stage's start and end" \
	test "$(q "select count(*) from events where node='console' and type='stage'")" = 10
check "ranks' checks were stored with their stage" \
	test "$(q "select count(*) from checks where item='resources.peak' and stage_id='run'")" -ge 1
check "the session file is private (0600)" test "$(stat -c %a "$T/s1.db")" = 600
# --session naming that file again: refused before anything is written
# (the new run's events would be refused against the old ones and the
# old manifest replaced: a report of the old verdict under the new name)
sum1=$(sha256sum <"$T/s1.db")
expect_rc 2 "--session of an existing session file is refused" timeout 60 "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv.json" --session "$T/s1.db" --headless
contains "... naming the file and the way to continue it" "--session $T/s1.db: the file exists; a run writes a new session file" "$ERR"
contains "... and --resume" "day0 run --resume $T/s1.db" "$ERR"
check "... and the file is untouched" test "$(sha256sum <"$T/s1.db")" = "$sum1"
expect_rc 2 "--session of a directory is refused" "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv.json" --session "$T" --headless
contains "... saying so" "not a regular file" "$ERR"

# Failures: a retry that succeeds, a failure, a skipped dependant, an
# independent stage that still runs, and a threshold.
cat >"$T/fail.json" <<'JSON'
{"name": "failing", "policy": {"max_fail_percentage": 0},
 "stages": [
  {"id": "ok", "step": "exec", "on": "all", "argv": ["true"]},
  {"id": "flaky", "step": "exec", "on": "all", "needs": ["ok"], "retries": 1,
   "argv": ["sh", "-c", "test -e ${work}/flag || { mkdir -p ${work}; touch ${work}/flag; exit 3; }"]},
  {"id": "bad", "step": "exec", "on": "all", "needs": ["flaky"], "argv": ["sh", "-c", "exit 4"]},
  {"id": "after", "step": "exec", "on": "all", "needs": ["bad"], "argv": ["true"]},
  {"id": "indep", "step": "exec", "on": "all", "needs": ["ok"], "argv": ["true"]}]}
JSON
expect_rc 1 "a failing stage makes the run exit 1 (no-go)" timeout 60 "$DAY0" run "$T/fail.json" \
	--inventory "$T/inv.json" --session "$T/s2.db" --work "$T/w2"
contains "the verdict is no-go" "verdict: NO-GO" "$OUT"
contains "the retry is shown" "stage flaky              retry 1/1" "$OUT"
check "the retry ran under its own stage id" test "$(sqlite3 "$T/s2.db" "select count(*) from stages where stage_id='flaky.2' and state='end' and rc=0")" = 1
contains "the failed stage names the node and exit" "bad                failed   local: exit 4" "$OUT"
contains "its dependant is skipped" "after              skipped  a stage it needs did not succeed" "$OUT"
contains "an independent stage still ran" "indep              done" "$OUT"

cat >"$T/thr.json" <<'JSON'
{"name": "threshold", "stages": [
  {"id": "x", "step": "exec", "on": "all", "checks": {"perf.baseline": {"max": 1}},
   "argv": ["sh", "-c", "echo '{\"v\":1,\"seq\":1,\"ts\":1,\"node\":\"x\",\"type\":\"check\",\"item\":\"perf.baseline\",\"status\":\"pass\",\"value\":5}'"]}]}
JSON
expect_rc 1 "a check value outside the playbook's threshold fails the run" timeout 60 "$DAY0" run "$T/thr.json" \
	--inventory "$T/inv.json" --session "$T/s3.db"
contains "the threshold is named" "outside the playbook's threshold" "$OUT"
cat >"$T/miss.json" <<'JSON'
{"name": "missing", "stages": [
  {"id": "x", "step": "exec", "on": "all", "argv": ["true"], "checks": {"perf.baseline": {}}}]}
JSON
expect_rc 1 "a required check that never comes fails the stage" timeout 60 "$DAY0" run "$T/miss.json" \
	--inventory "$T/inv.json" --session "$T/s4.db"
contains "and says which" "required check perf.baseline was not reported" "$OUT"

# A killed agent: the console reconnects, the lost stage runs again,
# nothing is lost or stored twice.
cat >"$T/long.json" <<'JSON'
{"name": "long", "stages": [
  {"id": "long", "step": "exec", "on": "all", "argv": ["sleep", "3"]},
  {"id": "after", "step": "exec", "on": "all", "needs": ["long"], "argv": ["true"]}]}
JSON
("$DAY0" run "$T/long.json" --inventory "$T/inv.json" --session "$T/k.db" --headless >"$T/k.out" 2>&1; echo $? >"$T/k.rc") &
for i in $(seq 600); do grep -q "stage long .*start" "$T/k.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
pkill -9 -f "day0-agent --node local --spool $T/sessions/spool/k-[0-9a-f]*/local"
wait
check "after a killed agent the run still ends go" test "$(cat "$T/k.rc")" = 0
contains "the lost stage is run again" "rerun (lost)" "$T/k.out"
expect_rc 0 "no event lost or doubled after the agent was killed" "$STORE" audit "$T/k.db"
check "the lost stage end is in the store" test "$(sqlite3 "$T/k.db" "select count(*) from stages where stage_id='long' and msg like 'lost%'")" = 1

# The cards' peak outlives a killed agent: the ranks of a cluster stage
# raise it, the agent is killed in the next stage, and the new agent
# carries on from the old one's high-water mark (DIR/peaks in its spool)
# instead of from zero: the screen's peak (the last mem.peak sample) is
# then the file's highest, as the report's is.
cat >"$T/peak.json" <<'JSON'
{"name": "peak", "stages": [
  {"id": "comm", "step": "comm", "on": "cluster", "args": ["--max", "4M", "--iters", "3", "--warmup", "1"]},
  {"id": "long", "step": "exec", "on": "all", "needs": ["comm"], "argv": ["sleep", "3"]},
  {"id": "after", "step": "exec", "on": "all", "needs": ["long"], "argv": ["sleep", "1"]}]}
JSON
("$DAY0" run "$T/peak.json" --inventory "$T/inv.json" --session "$T/p.db" --headless --sample-hz 10 >"$T/p.out" 2>&1; echo $? >"$T/p.rc") &
for i in $(seq 600); do grep -q "stage long .*start" "$T/p.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
pkill -9 -f "day0-agent --node local --spool $T/sessions/spool/p-[0-9a-f]*/local"
wait
check "peak: the run with a killed agent ends go" test "$(cat "$T/p.rc")" = 0
contains "peak: the agent was killed mid-stage" "rerun (lost)" "$T/p.out"
pk() { # CARD ORDER: mem.peak of local/CARD, the highest or the last
	sqlite3 "$T/p.db" "select p.value from sample_points p join series s on s.id = p.series where s.node = 'local' and s.card = $1 and s.metric = 'mem.peak' order by $2 limit 1"
}
for c in 0 1; do
	hi=$(pk $c "p.value desc")
	last=$(pk $c "p.ts desc, p.seq desc")
	check "peak: card $c's last mem.peak is its highest ($last of $hi)" test -n "$hi" -a "$last" = "$hi"
done
"$DAY0" report "$T/p.db" --format json >"$T/p.report.json" 2>/dev/null
"$DAY0" replay "$T/p.db" --dump >"$T/p.dump" 2>/dev/null
check "peak: the replay's end shows the report's peak, card by card" python3 -c '
import json, re, sys
rep = json.load(open(sys.argv[1]))
dump = open(sys.argv[2]).read()
for c in rep["memory"]["cards"]:
    m = re.search(r"^  card %d ts=\d+ used=\S+ peak=(\S+)" % c["card"], dump, re.M)
    assert m, dump[:2000]
    assert abs(float(m.group(1)) - c["peak"]) <= 1e-5 * c["peak"], (c, m.group(1))
' "$T/p.report.json" "$T/p.dump"

# A run command lost with the connection: it left as the connection died
# (the hook swallows it, then the agent is killed), so no agent ever
# started it and no "lost" end will come.  The new agent's hello follows
# everything the old one spooled; a task still without its start then
# never reached the node and is sent again, under the same id.  (Before,
# the stage waited for that start for ever: bench/fleet.sh's mass
# reconnect hung the run so.)
(DAY0_TEST_LOSE_SEND=long timeout 90 "$DAY0" run "$T/long.json" --inventory "$T/inv.json" --session "$T/l.db" --headless >"$T/l.out" 2>&1
	echo $? >"$T/l.rc") &
for i in $(seq 600); do grep -q "stage long .*start" "$T/l.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
check "the swallowed command: the agent has not started the stage" test \
	"$(sqlite3 "$T/l.db" "select count(*) from events where node='local' and type='stage' and json_extract(body,'$.stage_id')='long'")" = 0
pkill -9 -f "day0-agent --node local --spool $T/sessions/spool/l-[0-9a-f]*/local"
wait
check "a command lost with the connection is sent again: the run ends go (rc $(cat "$T/l.rc"))" test "$(cat "$T/l.rc")" = 0
contains "the operator is told" "stage long               resent (lost command)" "$T/l.out"
check "the console's log event says why" test \
	"$(sqlite3 "$T/l.db" "select count(*) from events where node='console' and type='log' and body like '%stage long: its command was lost with the connection%'")" = 1
check "the agent started the stage once, under its own id" test \
	"$(sqlite3 "$T/l.db" "select group_concat(json_extract(body,'$.stage_id')) from events where node='local' and type='stage' and json_extract(body,'$.state')='start' and json_extract(body,'$.stage_id') like 'long%' and json_extract(body,'$.src_seq') is null")" = long
expect_rc 0 "the session with the resent command has every event once" "$STORE" audit "$T/l.db"

# A killed console: --resume re-attaches to the agent's spool and goes on.
("$DAY0" run "$T/long.json" --inventory "$T/inv.json" --session "$T/r.db" --headless >"$T/r.out" 2>&1) &
cpid=$!
for i in $(seq 600); do grep -q "stage long .*start" "$T/r.out" 2>/dev/null && break; sleep 0.1; done
{ kill -9 $cpid; wait $cpid; } 2>/dev/null
wait $cpid 2>/dev/null
expect_rc 0 "--resume finishes the session" timeout 60 "$DAY0" run --resume "$T/r.db" --headless
contains "the resumed run reaches a verdict" "verdict: GO" "$OUT"
expect_rc 0 "the resumed session has every event once" "$STORE" audit "$T/r.db"
check "the resumed session holds one 'after' stage" test "$(sqlite3 "$T/r.db" "select count(*) from events where node='console' and type='stage' and json_extract(body,'$.stage_id')='after'")" = 2

# A console killed right after a run command left (before its loop's
# commit): the stage start it stored is on disk before the send, so the
# resumed console knows the command went out, settles the agent's first
# attempt from the spool and runs the stage again under a new id, never a
# second run into the same one (bench/resume_soak.sh's "160 of 150").
DAY0_TEST_CRASH_AFTER_SEND=long "$DAY0" run "$T/long.json" --inventory "$T/inv.json" --session "$T/w.db" --headless >"$T/w.out" 2>&1
check "the test hook kills the console after the send" test $? = 137
check "the console's stage start was on disk before the send" test "$(sqlite3 "$T/w.db" "select count(*) from events where node='console' and type='stage' and json_extract(body,'$.stage_id')='long' and json_extract(body,'$.state')='start'")" = 1
expect_rc 0 "--resume after a crash right after the send finishes GO" timeout 60 "$DAY0" run --resume "$T/w.db" --headless
check "no stage id was started twice on the agent" test "$(sqlite3 "$T/w.db" "select count(*) from (select json_extract(body,'$.stage_id') s, count(*) c from events where node='local' and type='stage' and json_extract(body,'$.state')='start' group by s having c > 1)")" = 0
expect_rc 0 "the crashed-and-resumed session has every event once" "$STORE" audit "$T/w.db"

# Ctrl-C: once shows what runs, twice cancels.
("$DAY0" run "$T/long.json" --inventory "$T/inv.json" --session "$T/c.db" --headless >"$T/c.out" 2>&1; echo $? >"$T/c.rc") &
for i in $(seq 600); do grep -q "stage long .*start" "$T/c.out" 2>/dev/null && break; sleep 0.1; done
cpid=$(pgrep -f "day0 run $T/long.json --inventory $T/inv.json --session $T/c.db")
kill -INT $cpid; sleep 0.3
contains "^C once lists the running stages" "long               exec       on local" "$T/c.out"
kill -INT $cpid
wait
check "^C twice cancels: exit 1" test "$(cat "$T/c.rc")" = 1
contains "a cancelled run says so" "NO-GO (cancelled)" "$T/c.out"
expect_rc 0 "a cancelled session is complete" "$STORE" audit "$T/c.db"

# Bad input: exit 2, the file and the field named, no session written.
printf '{"name":"x","stages":[{"id":"a","step":"exec","on":"all","argv":["true"],"neds":[]}]}' >"$T/badkey.json"
expect_rc 2 "an unknown playbook key is refused" "$DAY0" run "$T/badkey.json" --inventory "$T/inv.json"
contains "with the JSON path" "stages[0]" "$ERR"
contains "and the key" "neds" "$ERR"
expect_rc 2 "a missing inventory is refused" "$DAY0" run "$T/pb.json" --inventory "$T/nope.json"
contains "naming it" "nope.json" "$ERR"
printf '{"name":"m","stages":[{"id":"v","step":"verify","on":"all","args":["${model}"]}]}' >"$T/model.json"
expect_rc 2 "\${model} without --model is refused" "$DAY0" run "$T/model.json" --inventory "$T/inv.json"
contains "with a hint" "give --model DIR" "$ERR"
expect_rc 2 "a bad -e is refused" "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" -e novalue
expect_rc 2 "-e of a variable the playbook does not have is refused" "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" -e tpp=2 --check
contains "naming it and the playbook's variables" '-e tpp: the playbook has no such variable (the playbook'"'"'s variables: {"m":' "$ERR"
expect_rc 0 "-e of a playbook variable wins over its default" "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" -e 'm=/elsewhere' --check
contains "and is used" "day0-engine verify /elsewhere --events" "$OUT"
check "no session file for refused runs" test "$(ls "$T/sessions"/*.db 2>/dev/null | wc -l)" = 0

# day0 demo --cards: a number of cards its model's layout uses whole (the
# launch starts a rank a card), else a usage error before anything is made
expect_rc 2 "demo --cards 5: no layout of the demo model uses 5 ranks" "$DAY0" demo --dir "$T/demo5" --cards 5 --headless
contains "says which counts it takes" "--cards: expected a number of cards the demo model splits over" "$ERR"
contains "... and names the value" "got '5'" "$ERR"
check "... and made nothing" test ! -e "$T/demo5"
expect_rc 2 "demo --cards 2x" "$DAY0" demo --dir "$T/demo5" --cards 2x --headless
contains "names the value" "got '2x'" "$ERR"

# Another session's rank on this host, under the same node name (two
# consoles on one cluster, or two tests): it is not one of this session's
# cards.  Before --session, its rank 3 of "local:4" became card 3 of this
# 2-card node (rank.rss samples, a third and fourth bar on the screens).
env DAY0_RANKS=local:4 DAY0_STAGE_ID=alien DAY0_SESSION=another-session OMPI_COMM_WORLD_RANK=3 \
	sleep 30 &
alien=$!
expect_rc 0 "a run beside another session's rank ends go" timeout 120 "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv.json" --session "$T/alien.db" --headless --sample-hz 10
kill "$alien" 2>/dev/null
wait "$alien" 2>/dev/null
check "... and its samples name only its own 2 cards" test \
	"$(sqlite3 "$T/alien.db" "select count(*) from series where node = 'local' and card >= 2")" = 0
check "... while its own ranks were sampled (rank.rss of cards 0 and 1)" test \
	"$(sqlite3 "$T/alien.db" "select count(distinct card) from series where node = 'local' and metric = 'rank.rss' and card in (0, 1)")" = 2
check "... and the agents were started with the session's tag" test \
	"$(sqlite3 "$T/alien.db" "select count(*) from session where key = 'tag'")" = 1

# facts failing on every node: facts.compat compares nothing, and says so
# (it passed with "no node (0): one engine build ... met")
cat >"$T/nofacts.json" <<'JSON'
{"name": "nofacts", "stages": [
  {"id": "facts", "step": "facts", "on": "all", "require": {"cores": 100000},
   "checks": {"facts": {}, "facts.compat": {}}}]}
JSON
expect_rc 1 "facts failing everywhere: NO-GO" timeout 60 "$DAY0" run "$T/nofacts.json" \
	--inventory "$T/inv.json" --session "$T/nofacts.db" --headless
check "... facts.compat skips, saying there was nothing to compare" test \
	"$(sqlite3 "$T/nofacts.db" "select status || ': ' || detail from checks where item = 'facts.compat'")" = \
	"skip: no node's facts to compare (facts did not pass on any node)"
