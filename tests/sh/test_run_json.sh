#!/usr/bin/env bash
# day0 run --json (the verdict and every item for CI on stdout) and
# --notify CMD (each alert as JSON on CMD's stdin), compared with the
# session file: a local node and one whose port is closed.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions"
closed=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat >"$T/inv.json" <<JSON
{"name": "mix", "nodes": [
  {"name": "local", "transport": "local", "cards": 1, "card_mem": "1GiB"},
  {"name": "gone", "host": "127.0.0.1", "port": $closed, "cards": 1, "card_mem": "1GiB"}]}
JSON
cat >"$T/pb.json" <<'JSON'
{"name": "quick", "policy": {"fail_fast": false}, "stages": [
  {"id": "facts", "step": "facts", "on": "all", "checks": {"facts": {}}},
  {"id": "boom", "step": "exec", "on": "all", "needs": ["facts"], "argv": ["sh", "-c", "exit 3"]}]}
JSON
expect_rc 1 "run --json --notify: NO-GO exits 1" timeout 120 "$DAY0" run "$T/pb.json" \
	--inventory "$T/inv.json" --session "$T/s.db" --json --notify "cat >>$T/alerts.jsonl"
cp "$OUT" "$T/out.json"
check "stdout is one JSON document" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/out.json"
check "the headless lines went to stderr" grep -q "verdict: NO-GO" "$ERR"
check "the JSON's verdict, failed and skipped are the session's" python3 - "$T/out.json" "$T/s.db" <<'PY'
import json, sqlite3, sys
j = json.load(open(sys.argv[1]))
db = sqlite3.connect(sys.argv[2])
v = json.loads(db.execute("select value from session where key='verdict'").fetchone()[0])
assert j["verdict"] == "NO-GO" and j["go"] is False, j["verdict"]
assert sorted(j["failed"]) == sorted(v.get("failed", [])), (j["failed"], v)
assert sorted(j["skipped"]) == sorted(v.get("skipped", [])), (j["skipped"], v)
ids = [it["item"] for it in j["items"]]
assert "facts" in ids and "repro.manifest" in ids, ids
facts = [it for it in j["items"] if it["item"] == "facts"][0]
assert facts["status"] == "fail", facts
PY
# The alerts arrive from detached commands: give them a moment.
for i in $(seq 50); do [ "$(wc -l <"$T/alerts.jsonl" 2>/dev/null || echo 0)" -ge 3 ] && break; sleep 0.1; done
check "every alert line is JSON" python3 -c '
import json, sys
for l in open(sys.argv[1]): json.loads(l)' "$T/alerts.jsonl"
check "an alert says gone is unreachable, with the reason" python3 - "$T/alerts.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
assert any(x["kind"] == "node" and x["node"] == "gone" and "connection refused" in x["why"] for x in a), a
PY
check "an alert names the failed stage" python3 - "$T/alerts.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
assert any(x["kind"] == "stage" and x["what"] == "boom" for x in a), a
PY
check "an alert names the failed check facts@gone" python3 - "$T/alerts.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
assert any(x["kind"] == "check" and x["what"] == "facts" and x["node"] == "gone" for x in a), a
PY
