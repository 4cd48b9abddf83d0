#!/usr/bin/env bash
# A cluster stage over real OpenSSH with the inventory alone: two loopback
# nodes on a non-default port, strict host key checking against the test's
# known_hosts, no hand-written ssh config.  The console generates mpirun's
# ssh settings (tui/cluster.c) and the rank map; what the session file then
# holds is per-node truth: each node's cards 0-1 carry its own ranks' memory
# (no phantom cards 2-3 on the first node), each node's rx/tx moves while
# MPI talks over TCP, and the report's memory section has a peak per card.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/sshd_nodes.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sshd_nodes_start 2 || exit 1
cat >"$T/agent.sh" <<SH
#!/bin/sh
export ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}' UBSAN_OPTIONS='${UBSAN_OPTIONS:-}'
exec "$BUILD/day0-agent" "\$@"
SH
chmod +x "$T/agent.sh"
# Only the sanitizer settings travel by hand: how to reach the nodes comes
# from the inventory (port, user, identity) and --known-hosts.
python3 - "$SSHD_INV" <<'PY'
import json, sys
inv = json.load(open(sys.argv[1]))
inv["mpirun_args"] = ["-x", "ASAN_OPTIONS", "-x", "LSAN_OPTIONS", "-x", "UBSAN_OPTIONS",
                      "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
json.dump(inv, open(sys.argv[1], "w"))
PY
check "the inventory has no ssh settings for mpirun" bash -c "! grep -q plm_rsh '$SSHD_INV'"
check "the nodes listen on a non-default port" test "$SSHD_PORT" != 22
"$ENGINE" gen-model --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
	--vocab 128 "$T/model" >/dev/null
cat >"$T/pb.json" <<'JSON'
{"name": "cluster", "stages": [
  {"id": "facts", "step": "facts", "on": "all", "checks": {"facts": {}}},
  {"id": "soak", "step": "soak", "on": "cluster", "needs": ["facts"], "timeout": 120,
   "args": ["${model}", "--tp", "2", "--pp", "2", "--tokens", "3,1,4,1,5,9,2,6",
            "--duration", "3", "--interval", "0.05"]}]}
JSON
KH=(--known-hosts "$SSHD_KNOWN_HOSTS" --remote-agent "$T/agent.sh")
expect_rc 0 "a cluster stage runs with the inventory's ports, identity and strict known_hosts" \
	timeout 240 "$DAY0" run "$T/pb.json" --inventory "$SSHD_INV" "${KH[@]}" \
	--model "$T/model" --session "$T/s.db" --headless --sample-hz 5
contains "the verdict is go" "verdict: GO" "$OUT"
q() { sqlite3 "$T/s.db" "$1"; }
check "the launching agent ran mpirun with the generated ssh config (-F)" \
	bash -c "sqlite3 '$T/s.db' \"select body from events where node='node1' and type='stage' and json_extract(body,'\$.stage_id')='soak'\" | grep -q 'plm_rsh_args\",\"-F [^\"]*stage-soak.ssh_config'"
for n in node1 node2; do
	for c in 0 1; do
		peak=$(q "select max(value) from samples where node='$n' and card=$c and metric='mem.used'")
		check "$n card $c carries its rank's memory (mem.used max $peak)" \
			awk -v p="${peak:-0}" 'BEGIN{exit !(p > 1048576)}'
	done
	rx=$(q "select max(value) from samples where node='$n' and metric='net.rx_bps'")
	check "$n rx moves while MPI talks over TCP (max $rx B/s)" awk -v p="${rx:-0}" 'BEGIN{exit !(p > 0)}'
done
check "no phantom cards: every card number is below the node's 2 cards" \
	test "$(q "select count(*) from samples where card >= 2")" = 0
expect_rc 0 "the report renders as JSON" "$DAY0" report "$T/s.db" --format json -o "$T/r.json"
check "the report's memory section has a peak for each of the 4 cards" python3 - "$T/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
mem = r.get("memory") or {}
cards = mem.get("cards") if isinstance(mem, dict) else mem
rows = [c for c in (cards or []) if c.get("peak")]
keys = {(c["node"], c["card"]) for c in rows}
sys.exit(0 if keys == {("node1", 0), ("node1", 1), ("node2", 0), ("node2", 1)} else 1)
PY

