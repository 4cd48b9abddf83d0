# day0-agent against real processes: commands piped in, events checked
# (envelope, seq from 1 without gaps: tests/tools/jsonl_check), a real
# day0-engine verify alone and under mpirun, exec stages, timeouts,
# cancel, samplers, the spool across restarts, and malformed input.
. "$(dirname "$0")/../lib.sh"
AGENT="$BUILD/day0-agent"
JC="$BUILD/tests/jsonl_check"
DS="$BUILD/tests/day0_store"
export DAY0_NODE=ignored # the agent's --node wins over the engine's

agent() { # spool-name, agent options... (stdin: commands)
	local sp=$1
	shift
	"$AGENT" --node t1 --spool "$T/$sp" --sample-hz 0 --heartbeat 0 "$@"
}
has() { # name, file, pattern...: jsonl_check patterns (all must match)
	local name=$1 file=$2
	shift 2
	if "$JC" "$file" "$@" 2>"$T/jc.err"; then ok "$name"; else fail "$name" "$(cat "$T/jc.err")"; fi
}
count() { # type=... field pattern (fixed string) in file
	grep -cF -- "$1" "$2"
}

expect_rc 0 "day0-agent --version" "$AGENT" --version
contains "--version names the protocol" "(protocol 1)" "$OUT"
expect_rc 0 "day0-agent --help" "$AGENT" --help
contains "--help shows usage" "usage: day0-agent" "$OUT"
expect_rc 2 "an unknown option is a usage error" "$AGENT" --frob
contains "names the option" "'--frob'" "$ERR"
expect_rc 2 "--sample-hz abc" "$AGENT" --sample-hz abc
contains "says what --sample-hz expects" "--sample-hz: expected" "$ERR"
expect_rc 2 "--card-mem 0" "$AGENT" --card-mem 0
if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1'; then
	expect_rc 2 "--vendor nvml without the driver" "$AGENT" --vendor nvml --spool "$T/nv" </dev/null
	contains "says why NVML is unusable" "libnvidia-ml.so.1" "$ERR"
fi

"$ENGINE" gen-model --arch llama "$T/m" >/dev/null || fail "gen-model" "exit $?"

# ---- every command and its events; a real verify forwarded --------------
printf '%s\n' '{"cmd":"hello"}' "{\"cmd\":\"facts\",\"dir\":\"$T\"}" \
	'{"cmd":"facts","require":{"cores":100000,"cards":1}}' \
	"{\"cmd\":\"run\",\"stage_id\":\"v1\",\"step\":\"verify\",\"args\":[\"$T/m\"]}" |
	agent sp1 --cards 2 --card-mem 1G >"$T/e1.jsonl" 2>"$T/e1.err"
RC=$?
[ $RC -eq 0 ] && ok "piped commands: exit 0 at end of input" || fail "piped commands: exit 0" "exit $RC: $(cat "$T/e1.err")"
has "envelope on every line, seq from 1 without gaps" "$T/e1.jsonl" \
	type=hello,node=t1,agent_version=0.1.0 \
	type=facts,disk_path="$T" type=check,item=facts,status=pass \
	type=check,item=facts,status=fail \
	type=stage,stage_id=v1,state=start,stage=verify \
	type=check,item=weights.integrity,status=pass,rank=0,stage_id=v1,src_seq=3 \
	type=check,item=weights.metadata,status=pass,rank=0,stage_id=v1,src_seq=4 \
	type=stage,stage_id=v1,state=end,rc=0,reason=exit \
	type=sample,metric=mem.budget,card=1,value=1073741824 \
	type=bye,reason=eof
has "verify's own events forwarded with src_seq 1..5" "$T/e1.jsonl" \
	src_seq=1,stage_id=v1 src_seq=2,stage_id=v1 src_seq=5,stage_id=v1,state=end
contains "the failed requirement is named" "cores needed" "$T/e1.jsonl"
contains "facts report the cards" '"accelerators":[{"card":0,"name":"cpu rank 0","mem_bytes":1073741824}' "$T/e1.jsonl"
check "no event node is the engine's" bash -c "! grep -q '\"node\":\"ignored\"' '$T/e1.jsonl'"
check "the run record is gone after the end" bash -c "! ls '$T'/sp1/stage-* 2>/dev/null"

# ---- malformed input: an error event each, never a crash -----------------
{
	echo 'garbage'
	echo '[1,2]'
	echo '{"cmd":1}'
	echo '{"nocmd":true}'
	echo '{"cmd":"frob"}'
	echo '{"cmd":"run"}'
	echo '{"cmd":"run","stage_id":5,"step":"verify"}'
	echo '{"cmd":"run","stage_id":"../x","step":"verify"}'
	echo '{"cmd":"run","stage_id":"e1","step":"exec"}'
	echo '{"cmd":"run","stage_id":"e2","step":"verify","argv":["x"]}'
	echo '{"cmd":"run","stage_id":"e3","step":"verify","np":0}'
	echo '{"cmd":"ack","seq":"x"}'
	echo '{"cmd":"ack","seq":99999}'
	echo '{"cmd":"hello","bogus":1}'
	echo '{"cmd":"hello","cmd":"bye"}'
	echo '{"cmd":"cancel","stage_id":"nope"}'
	echo '{"cmd":"facts","require":{"gpus":1}}'
	printf '{"cmd":"hel\xfflo"}\n'
	printf '{"cmd":"hello"\x00}\n'
	head -c 70000 /dev/zero | tr '\0' ' '
	echo
	echo '{"cmd":"hello"}'
	echo ''
	echo '{"cmd":"hello"} trailing'
	echo '{"cmd":"ack","seq":1e400}'
	echo '{"cmd":"hello"}'
} | agent sp2 >"$T/e2.jsonl" 2>"$T/e2.err"
RC=$?
[ $RC -eq 0 ] && ok "malformed input: still exits 0" || fail "malformed input: exit 0" "exit $RC: $(cat "$T/e2.err")"
has "malformed input: events still well-formed and gapless" "$T/e2.jsonl" type=bye
n=$(count '"type":"error"' "$T/e2.jsonl")
[ "$n" -eq 22 ] && ok "malformed input: 22 error events for 22 bad lines" || fail "malformed input: 22 error events" "got $n: $(grep -F '"type":"error"' "$T/e2.jsonl" | head -c 3000)"
n=$(count '"type":"hello"' "$T/e2.jsonl")
[ "$n" -eq 3 ] && ok "malformed input: good commands between them answered" || fail "good commands answered" "$n hello events, expected 3"
for want in "invalid JSON" "expected a JSON object" "field 'cmd': expected a string" \
	"missing field 'cmd'" "unknown command 'frob'" "missing field 'stage_id'" \
	"field 'stage_id': expected a string" "stage_id '../x'" "exec needs a non-empty argv" \
	"expected an engine step name" "np 0" "field 'seq': expected an integer" \
	"beyond the last event" "unknown field 'bogus'" "duplicate object key" \
	"no running stage 'nope'" "require: 'gpus'" "invalid UTF-8 at byte 11" \
	"over the 65536-byte limit" "end of file expected" "real number overflow"; do
	contains "error says: $want" "$want" "$T/e2.jsonl"
done

# ---- mpirun: every rank's events whole, re-stamped, in one gapless stream -
if command -v mpirun >/dev/null 2>&1; then
	printf '%s\n' "{\"cmd\":\"run\",\"stage_id\":\"v3\",\"step\":\"verify\",\"np\":3,\"args\":[\"$T/m\"]}" |
		agent sp3 >"$T/e3.jsonl" 2>"$T/e3.err"
	pats=()
	for r in 0 1 2; do for s in 1 2 3 4 5; do pats+=("rank=$r,src_seq=$s,stage_id=v3"); done; done
	has "mpirun -np 3: all 15 engine events, each rank's seq 1..5" "$T/e3.jsonl" "${pats[@]}" \
		type=stage,stage_id=v3,state=end,rc=0,reason=exit
	contains "mpirun is asked to tag its output" '"--tag-output"' "$T/e3.jsonl"

	# Long lines: a stand-in engine writes 20 KB events from 3 ranks at
	# once, plus an overlong line, a non-event and a stderr line.
	cat >"$T/fake-engine" <<'EOF'
#!/bin/sh
[ "$1" = --version ] && { echo "fake-engine 1"; exit 0; }
r=${OMPI_COMM_WORLD_RANK:-0}
pad=$(head -c 20000 /dev/zero | tr '\0' x)
i=1
while [ $i -le 5 ]; do
	printf '{"v":1,"seq":%d,"ts":1,"node":"x","type":"log","level":"info","msg":"r%s-%s"}\n' $i $r $pad
	i=$((i + 1))
done
[ "$r" = 0 ] && { head -c 70000 /dev/zero | tr '\0' y; echo; echo "not an event [1,2]<x"; echo "to stderr" >&2; }
sleep "${FAKE_SLEEP:-0}"
exit 0
EOF
	chmod +x "$T/fake-engine"
	printf '%s\n' '{"cmd":"run","stage_id":"f1","step":"fake","np":3}' |
		agent sp4 --engine "$T/fake-engine" >"$T/e4.jsonl" 2>"$T/e4.err"
	pats=()
	for r in 0 1 2; do for s in 1 2 3 4 5; do pats+=("type=log,rank=$r,src_seq=$s,stage_id=f1"); done; done
	has "20 KB lines from 3 ranks: all 15 arrive, attributed to their rank" "$T/e4.jsonl" "${pats[@]}"
	n=$(grep -c '"msg":"r[0-2]-x\{20000\}"' "$T/e4.jsonl")
	[ "$n" -eq 15 ] && ok "20 KB lines arrive whole (no tag or other rank inside)" || fail "20 KB lines whole" "$n of 15 intact"
	contains "an overlong line is reported" "a line of 70000 bytes is over the 65536-byte limit" "$T/e4.jsonl"
	contains "a non-event line is reported" "not an event" "$T/e4.jsonl"
	has "a stderr line becomes a log event of its rank" "$T/e4.jsonl" type=log,stream=stderr,msg="to stderr",rank=0

	# Stopping an mpirun stage: the ranks get SIGTERM straight and at
	# once (mpirun, signalled, sends them SIGTERM a second late, SIGKILL
	# a second after that, and exits 1: a serve stage ended rc 137 at
	# every playbook's end).  Ranks that end on it let mpirun exit 0;
	# ranks that ignore it are SIGKILLed last, and the end says so.
	cat >"$T/term-engine" <<'EOF'
#!/bin/sh
[ "$1" = --version ] && { echo "fake-engine 1"; exit 0; }
r=$OMPI_COMM_WORLD_RANK
ev() { printf '{"v":1,"seq":%d,"ts":1,"node":"x","type":"log","level":"info","msg":"%s"}\n' "$1" "$2"; }
if [ "${IGNORE_TERM:-}" ]; then trap '' TERM; else trap 'ev 2 term-r$r; exit 0' TERM; fi
ev 1 "up-r$r"
while :; do sleep 0.1; done
EOF
	chmod +x "$T/term-engine"
	for mode in graceful stuck; do
		cat >"$T/s7.txt" <<EOF
{"cmd":"run","stage_id":"g1","step":"fake","np":2}
wait type=log,stage_id=g1,msg=up-r0
wait type=log,stage_id=g1,msg=up-r1
{"cmd":"cancel","stage_id":"g1"}
wait type=stage,stage_id=g1,state=end
{"cmd":"bye"}
EOF
		rm -f "$T/g-$mode.db"
		if [ $mode = stuck ]; then export IGNORE_TERM=1; else unset IGNORE_TERM; fi
		run "$DS" console "$T/g-$mode.db" "$T/s7.txt" -- "$AGENT" --node t1 \
			--spool "$T/sp7$mode" --sample-hz 0 --heartbeat 0 --engine "$T/term-engine"
		sqlite3 -separator ' ' "$T/g-$mode.db" "SELECT json_extract(body, '$.rc'), json_extract(body, '$.duration_s') < 2.5, json_extract(body, '$.msg') FROM events WHERE type = 'stage' AND json_extract(body, '$.state') = 'end' AND json_extract(body, '$.stage_id') = 'g1' AND json_extract(body, '$.rank') IS NULL" >"$T/g-$mode.txt"
		grep -c '"msg":"term-r[01]"' <(sqlite3 "$T/g-$mode.db" "SELECT body FROM events WHERE type = 'log'") >"$T/g-$mode.n"
	done
	unset IGNORE_TERM
	check "cancel of an mpirun stage: its ranks get SIGTERM and end, mpirun exits 0: rc 0 within 2.5 s ($(cat "$T/g-graceful.txt"))" \
		test "$(cat "$T/g-graceful.txt")" = "0 1 exit 0; cancelled"
	check "… both ranks saw the SIGTERM ($(cat "$T/g-graceful.n") of 2)" test "$(cat "$T/g-graceful.n")" = 2
	check "ranks that ignore SIGTERM: SIGKILL as the last resort, the end says so ($(cat "$T/g-stuck.txt"))" \
		grep -q ' 0 .*cancelled; SIGKILL to [0-9]* process.* still running 4\.[0-9] s after SIGTERM$' "$T/g-stuck.txt"
else
	ok "mpirun tests: skipped (no mpirun)"
fi

# ---- the engine's version, cached per engine binary ----------------------
# `ENGINE --version` runs once per binary, not once per agent start; a new
# binary (size or mtime changed) is asked again; without a cache it runs.
cat >"$T/count-engine" <<EOF
#!/bin/sh
[ "\$1" = --version ] && { echo run >>"$T/version-runs"; echo "count-engine 1"; exit 0; }
exit 0
EOF
chmod +x "$T/count-engine"
vhello() { # spool-name: the hello's engine_version
	HOME="$T/vhome" agent "$1" --engine "$T/count-engine" </dev/null 2>/dev/null |
		head -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin).get("engine_version", "-"))'
}
rm -f "$T/version-runs"; mkdir -p "$T/vhome"
v1=$(vhello vs1)
v2=$(vhello vs2)
check "the hello says the engine's version, first start ($v1)" test "$v1" = "count-engine 1"
check "and on the second start, from the cache ($v2)" test "$v2" = "count-engine 1"
check "the engine ran --version once for two agent starts" test "$(wc -l <"$T/version-runs")" = 1
contains "the cache names the binary and its version" "count-engine 1" "$T/vhome/.cache/day0/engine-version"
sed -i 's/count-engine 1/count-engine 22/' "$T/count-engine"
touch -d '2020-01-01' "$T/count-engine"
v3=$(vhello vs3)
check "a changed engine binary is asked again ($v3)" test "$v3" = "count-engine 22"
check "so --version ran twice in all" test "$(wc -l <"$T/version-runs")" = 2
rm -f "$T/vhome/.cache/day0/engine-version"
mkdir "$T/vhome/.cache/day0/engine-version" # unreadable and unwritable, even for root
v4=$(vhello vs4)
check "a cache it cannot read or write costs only the run ($v4)" test "$v4" = "count-engine 22"
check "and leaves no temp file behind" test "$(ls "$T/vhome/.cache/day0" | wc -l)" = 1
# An engine slow to answer is waited for (a sanitizer build started by a
# niced test at load 18 took 12-20 s): 6 s is past the bound it once had.
cat >"$T/slow-engine" <<'EOF'
#!/bin/sh
[ "$1" = --version ] && { sleep 6; echo "slow-engine 3"; exit 0; }
exit 0
EOF
chmod +x "$T/slow-engine"
mkdir -p "$T/vhome5"
v5=$(HOME="$T/vhome5" agent vs5 --engine "$T/slow-engine" </dev/null 2>/dev/null |
	head -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin).get("engine_version", "-"))')
check "an engine 6 s slow to answer --version is waited for ($v5)" test "$v5" = "slow-engine 3"

# ---- exec stages ----------------------------------------------------------
printf '%s\n' \
	'{"cmd":"run","stage_id":"x1","step":"exec","argv":["sh","-c","echo hello; echo oops >&2; exit 3"]}' \
	'{"cmd":"run","stage_id":"x2","step":"exec","argv":["/nonexistent/prog"]}' \
	'{"cmd":"run","stage_id":"x3","step":"exec","argv":["true"],"cwd":"/nonexistent"}' \
	'{"cmd":"run","stage_id":"x4","step":"exec","argv":["sleep","30"],"timeout":0.3}' \
	'{"cmd":"run","stage_id":"x4","step":"exec","argv":["true"]}' \
	"{\"cmd\":\"run\",\"stage_id\":\"x5\",\"step\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"$T\"}" |
	agent sp5 >"$T/e5.jsonl" 2>"$T/e5.err"
has "exec: stdout, stderr and the exit code" "$T/e5.jsonl" \
	type=log,stage_id=x1,stream=stdout,msg=hello,level=info \
	type=log,stage_id=x1,stream=stderr,msg=oops \
	type=stage,stage_id=x1,state=end,rc=3,reason=exit
has "exec: a missing program ends the stage with rc 127" "$T/e5.jsonl" \
	type=stage,stage_id=x2,state=start type=stage,stage_id=x2,state=end,rc=127,reason=spawn
contains "exec: the missing program is named" "/nonexistent/prog: No such file or directory" "$T/e5.jsonl"
has "exec: a bad cwd ends the stage with rc 127" "$T/e5.jsonl" type=stage,stage_id=x3,state=end,rc=127,reason=spawn
contains "exec: the bad cwd is named" "cwd /nonexistent" "$T/e5.jsonl"
has "exec: timeout kills the stage" "$T/e5.jsonl" type=stage,stage_id=x4,state=end,reason=timeout,rc=143
contains "exec: a running stage id cannot be reused" "stage 'x4' is already running" "$T/e5.jsonl"
has "exec: the refusal names the refused command's stage_id" "$T/e5.jsonl" \
	type=error,cmd=run,stage_id=x4
has "exec: cwd is honoured" "$T/e5.jsonl" type=log,stage_id=x5,msg="$T"

# ---- cancel kills the whole session, samplers see the ranks ----------------
cat >"$T/s6.txt" <<EOF
{"cmd":"run","stage_id":"c1","step":"exec","argv":["sh","-c","sleep 30 & sleep 30 & wait"]}
wait type=stage,stage_id=c1,state=start
wait type=sample,metric=rank.rss,stage_id=c1,card=0
sleep 300
{"cmd":"cancel","stage_id":"c1"}
wait type=stage,stage_id=c1,state=end,reason=cancel
{"cmd":"bye"}
EOF
expect_rc 0 "cancel: console session runs" "$DS" console "$T/c6.db" "$T/s6.txt" -- \
	"$AGENT" --node t1 --spool "$T/sp6" --sample-hz 20 --heartbeat 0 --cards 1 --card-mem 1G
pid=$(sqlite3 "$T/c6.db" "SELECT json_extract(body, '$.pid') FROM events WHERE type = 'stage' AND json_extract(body, '$.state') = 'start' AND json_extract(body, '$.stage_id') = 'c1'")
left=$(ps -o stat= -s "${pid:-0}" 2>/dev/null | grep -vc '^Z')
[ -n "$pid" ] && [ "$left" -eq 0 ] && ok "cancel: no process of the stage's session is left" || fail "cancel: session emptied" "pid '$pid', $left left"
n=$(sqlite3 "$T/c6.db" "SELECT count(*) FROM samples WHERE metric = 'mem.used' AND card = 0 AND value > 0")
[ "${n:-0}" -gt 0 ] && ok "samplers: a CPU card's memory follows its rank" || fail "samplers: card memory" "no mem.used > 0 for card 0"
for m in host.mem.used net.rx_bps net.tx_bps mem.peak; do
	n=$(sqlite3 "$T/c6.db" "SELECT count(*) FROM samples WHERE metric = '$m'")
	[ "${n:-0}" -gt 0 ] && ok "samplers: $m sampled" || fail "samplers: $m" "none"
done

# ---- heartbeats when idle --------------------------------------------------
(sleep 0.8) | "$AGENT" --node t1 --spool "$T/sp7" --sample-hz 0 --heartbeat 0.2 >"$T/e7.jsonl"
has "idle: heartbeats" "$T/e7.jsonl" type=heartbeat,running=0

# ---- the spool across restarts ----------------------------------------------
printf '%s\n' '{"cmd":"hello"}' | agent sp8 >"$T/e8a.jsonl"
has "spool: first run, events 1..3" "$T/e8a.jsonl" seq=3,type=bye
printf '%s\n' '{"cmd":"ack","seq":2}' | agent sp8 >"$T/e8b.jsonl"
has "spool: a restart resends everything unacked first (1..3), then goes on" "$T/e8b.jsonl" \
	seq=1,type=hello seq=3,type=bye seq=4,type=hello seq=5,type=bye
n=$(wc -l <"$T/sp8/spool.jsonl")
[ "$n" -eq 4 ] && ok "spool: acked events are dropped at exit (header + 3 left)" || fail "spool: compaction" "$n lines: $(cat "$T/sp8/spool.jsonl")"
agent sp8 </dev/null >"$T/e8c.jsonl"
head -n 1 "$T/e8c.jsonl" | grep -q '"seq":3,' && ok "spool: resend starts after the last ack" || fail "spool: resend after ack" "$(head -n 1 "$T/e8c.jsonl")"
printf '%s\n' '{"cmd":"hello","acked":5}' | agent sp8 >"$T/e8d.jsonl"
n=$(grep -c '"seq":6,' "$T/e8d.jsonl")
[ "$n" -eq 2 ] && ok "spool: hello with acked resends what follows it" || fail "spool: hello acked" "seq 6 sent $n times"
printf '{"v":1,"seq":99,"ts":1,"no' >>"$T/sp8/spool.jsonl"
agent sp8 </dev/null >"$T/e8e.jsonl" 2>"$T/e8e.err"
contains "spool: a torn last line is dropped" "dropped a torn last line" "$T/e8e.err"
contains "spool: and the stream goes on" '"type":"bye"' "$T/e8e.jsonl"
expect_rc 2 "spool: another node's spool is refused" "$AGENT" --node other --spool "$T/sp8" </dev/null
contains "spool: says whose it is" "spool of node 't1'" "$ERR"
(sleep 4) | agent sp8 >/dev/null &
bg=$!
sleep 0.5
expect_rc 2 "spool: a second agent on the same spool is refused" "$AGENT" --node t1 --spool "$T/sp8" </dev/null
contains "spool: says it is in use" "in use by another day0-agent" "$ERR"
kill "$bg" 2>/dev/null
wait "$bg" 2>/dev/null
sed -i '2s/"seq":[0-9]*/"seq":777/' "$T/sp8/spool.jsonl"
expect_rc 2 "spool: a corrupt spool is refused" "$AGENT" --node t1 --spool "$T/sp8" </dev/null
contains "spool: the bad line is named" "line 2" "$ERR"
