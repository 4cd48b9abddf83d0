#!/usr/bin/env bash
# A refused run names its stage_id, and the console ends that task and no
# other (docs/protocol.md, "error").  An agent wrapper passes every command
# line through and sends stage s1's run twice: the agent starts s1 and
# refuses the copy ("already running").  s2, sent in the same breath and
# still waiting for its start, must not take that refusal: it runs and
# passes, and so does s1.  (Before the stage_id, the console ended the
# oldest command still waiting for its start: s2, refused.)
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions"
q() { sqlite3 "$1" "$2"; }

cat >"$T/twice.sh" <<SH
#!/bin/bash
export ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}' UBSAN_OPTIONS='${UBSAN_OPTIONS:-}'
while IFS= read -r line; do
	printf '%s\n' "\$line"
	case "\$line" in
	*'"cmd":"run"'*'"stage_id":"s1"'*|*'"stage_id":"s1"'*'"cmd":"run"'*)
		printf '%s\n' "\$line" ;;
	esac
done | exec "$BUILD/day0-agent" "\$@"
SH
chmod +x "$T/twice.sh"
cat >"$T/inv.json" <<'JSON'
{"name": "one", "defaults": {"transport": "local", "cards": 1, "card_mem": "1GiB"},
 "nodes": [{"name": "a"}]}
JSON
cat >"$T/pb.json" <<'JSON'
{"name": "pair", "stages": [
  {"id": "s1", "step": "exec", "on": "all", "timeout": 60, "argv": ["sh", "-c", "sleep 1; echo s1 done"]},
  {"id": "s2", "step": "exec", "on": "all", "timeout": 60, "argv": ["sh", "-c", "sleep 1; echo s2 done"]}]}
JSON
expect_rc 0 "a duplicated run of s1: the playbook still passes" timeout 120 "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv.json" --agent "$T/twice.sh" --session "$T/r.db" --headless
db="$T/r.db"
check "the agent refused the copy, naming s1" \
	test "$(q "$db" "select count(*) from events where type='error' and json_extract(body,'\$.stage_id')='s1' and json_extract(body,'\$.cmd')='run'")" = 1
check "s1 ran once, to its end" \
	test "$(q "$db" "select count(*) from events where node='a' and type='stage' and json_extract(body,'\$.stage_id')='s1' and json_extract(body,'\$.state')='end' and json_extract(body,'\$.rc')=0")" = 1
check "s2 ran to its end (the refusal was not taken for it)" \
	test "$(q "$db" "select count(*) from events where node='a' and type='stage' and json_extract(body,'\$.stage_id')='s2' and json_extract(body,'\$.state')='end' and json_extract(body,'\$.rc')=0")" = 1
cp "$OUT" "$T/headless"
check "the headless stage table: s1 done" grep -Eq '^s1 +done' "$T/headless"
check "the headless stage table: s2 done" grep -Eq '^s2 +done' "$T/headless"
check "... and the console's own stage ends in the session file say the same" \
	test "$(q "$db" "select group_concat(json_extract(body,'\$.stage_id') || '=' || json_extract(body,'\$.result'), ' ') from (select body from events where node='console' and type='stage' and json_extract(body,'\$.state')='end' order by json_extract(body,'\$.stage_id'))")" = "s1=done s2=done"
check "the verdict is GO" grep -q '^verdict: GO' "$T/headless"
