#!/usr/bin/env bash
# Bad input caught at the door, before a session file or a node is touched:
# playbook variables that refer to each other in a cycle or expand without
# bound, a timeout beyond a week, an `on` naming a node the inventory does
# not have, -e of a variable the playbook lacks (docs/playbooks.md says it
# is refused); inventory keys nobody reads (with the nearest valid key),
# two names on one host:port, node-set errors naming the file and the
# entry; the default ${work} per user and private (0700).
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
AGENT="$BUILD/day0-agent"
export DAY0_SESSIONS="$T/sessions"

cat >"$T/inv.json" <<'JSON'
{"name": "duo", "defaults": {"transport": "local", "cards": 1, "card_mem": "1GiB"},
 "nodes": [{"name": "a"}, {"name": "b"}]}
JSON
pb() { # file vars-json stage-extra-json
	printf '{"name": "p", "vars": %s, "stages": [{"id": "s", "step": "exec", "argv": ["echo", "${a}"]%s}]}\n' "$2" "$3" >"$1"
}
nothing_written() {
	check "$1: no session file was written" bash -c "! ls '$DAY0_SESSIONS'/*.db 2>/dev/null | grep -q ."
}

# ---- playbooks -----------------------------------------------------------
pb "$T/cycle.json" '{"a": "${b}", "b": "${a}"}' ''
expect_rc 2 "vars a=\${b}, b=\${a}: refused" "$DAY0" run "$T/cycle.json" --inventory "$T/inv.json" --headless
contains "... naming the cycle" "refer to each other in a cycle" "$ERR"
contains "... and the variable" "cycle.json: vars.a" "$ERR"
nothing_written "a variable cycle"
pb "$T/self.json" '{"a": "x${a}"}' ''
expect_rc 2 "a variable that holds itself: refused" "$DAY0" run "$T/self.json" --inventory "$T/inv.json" --check
b8='${b}${b}${b}${b}${b}${b}${b}${b}'
c8='${c}${c}${c}${c}${c}${c}${c}${c}'
d8='${d}${d}${d}${d}${d}${d}${d}${d}'
e8='${e}${e}${e}${e}${e}${e}${e}${e}'
pb "$T/runaway.json" "{\"a\": \"$b8\", \"b\": \"$c8\", \"c\": \"$d8\", \"d\": \"$e8\", \"e\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}" ''
expect_rc 2 "a runaway expansion (8^4 x 40 bytes): refused" "$DAY0" run "$T/runaway.json" --inventory "$T/inv.json" --check
contains "... saying how long it would get" "longer than 65535 bytes" "$ERR"
pb "$T/deep.json" '{"a": "${b}/x", "b": "${work}/y"}' ''
expect_rc 0 "variables over variables (and built-ins) still expand" "$DAY0" run "$T/deep.json" --inventory "$T/inv.json" --check --work /W
contains "... to the built-in's value" "echo /W/y/x" "$OUT"
expect_rc 2 "-e a cycle through a variable's value: refused when expanded" "$DAY0" run "$T/deep.json" \
	--inventory "$T/inv.json" --check -e 'b=${a}'
contains "... naming the cycle" "cycle" "$ERR"
pb "$T/long.json" '{"a": "x"}' ', "timeout": 1e9'
expect_rc 2 "a timeout of 1e9 s: refused" "$DAY0" run "$T/long.json" --inventory "$T/inv.json" --check
contains "... with the bound" "stages[0].timeout: expected seconds 0..604800" "$ERR"
pb "$T/on.json" '{"a": "x"}' ', "on": "n[1-2]"'
expect_rc 2 "on: a node set the inventory does not have: refused" "$DAY0" run "$T/on.json" --inventory "$T/inv.json" --headless
contains "... naming the node and the inventory's nodes" "stages[0].on: node 'n1' is not in the inventory duo (its nodes: a,b)" "$ERR"
nothing_written "an on: naming no node"
# A cluster stage's layout must use every card: the engine refuses
# tp x pp x ep != the ranks mpirun starts, hours in; the door says it now.
printf '{"name": "lay", "vars": {"tp": "2", "pp": "1", "ep": "2"}, "stages": [
 {"id": "launch", "step": "run", "on": "cluster", "args": ["M", "--tp", "${tp}", "--pp", "${pp}", "--ep", "${ep}", "--tokens", "1"]}]}\n' >"$T/lay.json"
printf '{"name": "eight", "nodes": [{"name": "a", "transport": "local", "cards": 8, "card_mem": "1GiB"}]}\n' >"$T/inv8.json"
expect_rc 2 "a cluster stage whose layout uses 4 of 8 cards: refused" "$DAY0" run "$T/lay.json" --inventory "$T/inv8.json" --headless
contains "... naming the stage, the layout and the cards" "stage 'launch' (run) runs one rank a card on the cluster's 8 cards, but its layout is tp2 x pp1 x ep2 = 4 ranks" "$ERR"
nothing_written "a layout of the wrong size"
expect_rc 0 "... -e ep=4 makes it 8: accepted" "$DAY0" run "$T/lay.json" --inventory "$T/inv8.json" --check -e ep=4
expect_rc 0 "... and the shipped release day at tp1 ep2 on 2 cards: accepted" "$DAY0" run "$DAY0_ROOT/playbooks/release-day.json" --check \
	--inventory "$T/inv.json" -e 'tp=1' -e 'ep=2' --model /nonexistent-is-fine-for-check
pb "$T/e.json" '{"a": "x"}' ''
expect_rc 2 "-e of a key the playbook's vars lack: refused" "$DAY0" run "$T/e.json" --inventory "$T/inv.json" --check -e nosuch=1
contains "... as docs/playbooks.md says" "refused" "$DAY0_ROOT/docs/playbooks.md"
check "docs/playbooks.md states -e is for the playbook's vars" grep -q -- '-e KEY=VALUE` sets one of the playbook' "$DAY0_ROOT/docs/playbooks.md"

# ---- inventories ---------------------------------------------------------
inv_bad() { # name needle json
	printf '%s\n' "$3" >"$T/bad.json"
	expect_rc 2 "inventory: $1" "$DAY0" hosts --inventory "$T/bad.json"
	contains "... says $2" "$2" "$ERR"
}
inv_bad "a misspelled key is refused with the nearest one" \
	"bad.json: nodes[0]: unknown key 'identitiy' (did you mean 'identity'?)" \
	'{"nodes": [{"name": "n1", "identitiy": "~/.ssh/k", "card_mem": "1G"}]}'
inv_bad "a misspelled top-level key" "bad.json: top level: unknown key 'node' (did you mean 'nodes'?)" \
	'{"node": [], "nodes": [{"name": "n1", "card_mem": "1G"}]}'
inv_bad "a misspelled defaults key" "bad.json: defaults: unknown key 'card_men' (did you mean 'card_mem'?)" \
	'{"defaults": {"card_men": "1G"}, "nodes": [{"name": "n1", "card_mem": "1G"}]}'
inv_bad "a misspelled links key" "bad.json: nodes[0].links: unknown key 'intra_gbps'" \
	'{"nodes": [{"name": "n1", "card_mem": "1G", "links": {"intra_gbps": 1}}]}'
inv_bad "two names on one host:port" "nodes 'n1' and 'n2' are both h:22" \
	'{"nodes": [{"name": "n[1-2]", "host": "h", "card_mem": "1G"}]}'
inv_bad "two entries on one host:port" "nodes 'x' and 'y' are both 10.0.0.1:2222" \
	'{"defaults": {"card_mem": "1G", "port": 2222}, "nodes": [{"name": "x", "host": "10.0.0.1"}, {"name": "y", "host": "10.0.0.1"}]}'
inv_bad "a bad node set names the file, the entry and the key" "bad.json: nodes[1].name: unbalanced '['" \
	'{"nodes": [{"name": "ok", "card_mem": "1G"}, {"name": "n[1-", "card_mem": "1G"}]}'
inv_bad "a bad host set too" "bad.json: nodes[0].host: " \
	'{"nodes": [{"name": "n[1-2]", "host": "h[2-1]", "card_mem": "1G"}]}'
printf '%s\n' '{"nodes": [{"name": "n1", "identitiy": "k", "card_mem": "1G"}]}' >"$T/two.json"
"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 --vocab 128 "$T/m" >/dev/null
expect_rc 2 "the planner reads the same inventory rules" "$ENGINE" plan "$T/m" --inventory "$T/two.json"
contains "... with the same message" "unknown key 'identitiy' (did you mean 'identity'?)" "$ERR"
printf '%s\n' '{"name": "ok", "description": "fine", "agent_args": [], "mpirun_args": [], "cards": 2, "card_mem": "1G", "nodes": [{"name": "n[1-2]", "host": "h[1-2]", "labels": ["x"], "links": {"intra_node_gbps": 1, "inter_node_gbps": 1}}]}' >"$T/good.json"
expect_rc 0 "every documented key is still accepted" "$DAY0" run "$T/e.json" --inventory "$T/good.json" --check

# ---- ${work}: per user, private --------------------------------------------
expect_rc 0 "--check shows the default \${work}" "$DAY0" run "$T/deep.json" --inventory "$T/inv.json" --check
contains "local nodes: /tmp/day0-work-USER/SESSION" "/tmp/day0-work-$(id -un)/SESSION" "$OUT"
contains "... which the agent makes private" "--work /tmp/day0-work-$(id -un)/SESSION" "$OUT"
printf '%s\n' '{"defaults": {"card_mem": "1G"}, "nodes": [{"name": "r1", "host": "10.9.9.1", "user": "alice"}]}' >"$T/alice.json"
expect_rc 0 "an ssh node as alice" "$DAY0" run "$T/deep.json" --inventory "$T/alice.json" --check
contains "... gets alice's \${work}" "/tmp/day0-work-alice/SESSION/y/x" "$OUT"
mkdir -p "$T/tmp"
w="$T/tmp/day0-work-u/s1"
echo '{"cmd":"bye"}' | "$AGENT" --node t --spool "$T/sp" --heartbeat 0 --sample-hz 0 --work "$w" >/dev/null 2>"$T/agent.err"
check "agent --work: the session's directory is 0700" test "$(stat -c %a "$w")" = 700
check "... and the per-user parent too" test "$(stat -c %a "$(dirname "$w")")" = 700
mkdir -p "$T/tmp/day0-work-other" && chmod 755 "$T/tmp/day0-work-other" && chown nobody "$T/tmp/day0-work-other"
echo '{"cmd":"bye"}' | "$AGENT" --node t --spool "$T/sp2" --heartbeat 0 --sample-hz 0 --work "$T/tmp/day0-work-other/s1" >/dev/null 2>"$T/agent2.err"
check "a parent another user owns is refused" grep -q "is not a directory of this user" "$T/agent2.err"
mkdir -p "$T/tmp/day0-work-open" && chmod 755 "$T/tmp/day0-work-open"
echo '{"cmd":"bye"}' | "$AGENT" --node t --spool "$T/sp3" --heartbeat 0 --sample-hz 0 --work "$T/tmp/day0-work-open/s1" >/dev/null 2>&1
check "one of ours left 0755 (an older day0) is made 0700" test "$(stat -c %a "$T/tmp/day0-work-open")" = 700
