#!/usr/bin/env bash
# plan --train's budget as the operator reads it: the report's per-card
# budget table (md) and the Plan screen of a replay (tmux) list the
# training step's parts (weights, gradients, optimizer states,
# activations, backward, comm buffers) from the memory.plan check in the
# session file, and they add up to its planned total.  (They once listed
# inference's weights / KV / activations / comm: 20% of the total.)
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions" LANG=C.UTF-8 LC_ALL=C.UTF-8
. "$DAY0_ROOT/tests/tmux.sh"
tmux_server budgettrain

"$ENGINE" gen-model --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 128 "$T/m" >/dev/null ||
	fail "gen-model" "exit $?"
cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "1GiB"}]}
JSON
cat >"$T/pb.json" <<'JSON'
{"name": "plantrain", "stages": [
 {"id": "plan", "step": "plan", "on": "first",
  "args": ["${model}", "--train", "--nodes", "${nodes}", "--cards", "${cards}", "--card-mem", "${card_mem}",
           "--layout", "2,1,1,1", "--ctx", "16", "--micro-batch", "2", "--global-batch", "2"],
  "checks": {"memory.plan": {}}}]}
JSON
expect_rc 0 "a plan --train stage runs to GO" "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" --model "$T/m" \
	--session "$T/p.db" --headless
pl() { sqlite3 "$T/p.db" "SELECT json_extract(body, '\$.plan.$1') FROM events WHERE type = 'check' AND json_extract(body, '\$.item') = 'memory.plan'"; }
w=$(pl train.weights_bytes) g=$(pl train.grads_bytes) o=$(pl train.optimizer_bytes) a=$(pl train.activation_bytes)
b=$(pl train.backward_bytes) c=$(pl comm_buffer_bytes) tot=$(pl total_bytes)
check "the file's parts add up to its planned total ($w+$g+$o+$a+$b+$c = $tot)" \
	test -n "$tot" -a "$((w + g + o + a + b + c + $(pl train.views_bytes) + $(pl train.pp_buffer_bytes) + $(pl train.buffer_bytes)))" = "$tot"

expect_rc 0 "report (md)" "$DAY0" report "$T/p.db"
for row in "weights|$w" "gradients|$g" "optimizer states|$o" "activations|$a" "backward working set|$b" "comm buffers|$c" "planned total|$tot"; do
	contains "report md: | ${row%|*} | ${row#*|} |" "| ${row%|*} | ${row#*|} |" "$OUT"
done

# the Plan screen (6) shows the same parts, in its units
units() { # BYTES -> the screen's K/M form (tui_bytes: 1 decimal under 100)
	python3 -c "
b=float($1); u=0; us=['B','K','M','G','T']
while b >= 1024 and u < 4: b /= 1024; u += 1
print(('%.0f' % b if u == 0 else '%.1f' % b if b < 100 else '%.0f' % b) + us[u])"
}
tm -u new-session -d -s r -x 150 -y 40 "env TERM=screen-256color $DAY0 replay $T/p.db --at 100000; sleep 60"
wait_for "replay: at the end" "PAUSED"
key 6
wait_for "replay: the Plan screen of a training plan" "(training step)"
for row in "weights|$w" "gradients|$g" "optimizer|$o" "activations|$a" "backward|$b" "comm|$c"; do
	on_screen "plan screen: ${row%|*} $(units "${row#*|}")" "^  ${row%|*} +$(units "${row#*|}")\$"
done
exit 0
