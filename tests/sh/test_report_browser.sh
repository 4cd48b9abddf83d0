#!/usr/bin/env bash
# The HTML report as a real browser shows it (issue 17): two short real
# playbook runs on a tiny generated model over the local transport (a GO
# run, and a NO-GO run where a flipped byte fails verify and the stage that
# needs it is skipped), each report rendered by headless Chromium
# (--dump-dom: the DOM the browser built from the file; --screenshot: it
# paints). The checklist the browser shows (item, status, and every
# evidence row's stage / node / status) is compared with the session file
# (sqlite3 on the checks table) and with the headless CHECK table; the
# verdict must be the first text of the body, skipped stages never listed
# as failed. Chromium comes from `make deps`; without it this test fails.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions" LANG=C.UTF-8 LC_ALL=C.UTF-8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CHROMIUM=$(command -v chromium || command -v chromium-browser)
if [ -z "$CHROMIUM" ]; then
	fail "chromium" "not on PATH: run make deps (DEB_PKGS installs chromium)"
	exit 1
fi
ok "chromium: $CHROMIUM"

"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
	--vocab 128 --shards 2 --force "$T/m" >/dev/null || fail "gen-model" "exit $?"
cp -r "$T/m" "$T/bad"
shard=$(ls "$T"/bad/*.safetensors | head -1)
printf '\x55' | dd of="$shard" bs=1 seek=2000 conv=notrunc 2>/dev/null
echo '{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "128MiB"}]}' >"$T/inv.json"
# smoke, with comm needing verify: a failed verify skips it.
python3 - "$DAY0_ROOT/playbooks/smoke.json" "$T/pb.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["name"] = "browser"
p["policy"] = {}
for s in p["stages"]:
    if s["id"] == "comm":
        s["needs"] = ["verify"]
json.dump(p, open(sys.argv[2], "w"))
PY

# The browser's view: the body's text in order, and the checklist table's
# rows (item rows carry rowspan'd item and status cells, evidence rows the
# stage, node, status cells), from the DOM Chromium dumps.
browser() { # HTML -> $T/NAME.dom
	timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
		--user-data-dir="$T/chr" --dump-dom "file://$1" >"$2" 2>"$T/chr.err"
}
view() { # DOM -> lines "first|TEXT", "item|ITEM|STATUS", "ev|ITEM|STAGE|NODE|STATUS"
	python3 - "$1" <<'PY'
import sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(s):
        super().__init__(); s.body = False; s.skip = 0; s.first = None
        s.h2 = None; s.intable = False; s.done = False; s.rows = []; s.row = None; s.cell = None
    def handle_starttag(s, t, a):
        if t == "body": s.body = True
        if t in ("style", "title", "script"): s.skip += 1
        if t == "h2": s.h2 = ""
        if t == "table" and s.h2 == "Checklist" and not s.done: s.intable = True
        if s.intable and t == "tr": s.row = []
        if s.intable and t in ("td", "th") and s.row is not None:
            s.cell = [t, dict(a).get("rowspan"), ""]
    def handle_endtag(s, t):
        if t in ("style", "title", "script"): s.skip -= 1
        if s.intable and t in ("td", "th") and s.cell is not None:
            s.row.append(s.cell); s.cell = None
        if s.intable and t == "tr" and s.row is not None:
            s.rows.append(s.row); s.row = None
        if t == "table" and s.intable: s.intable = False; s.done = True
    def handle_data(s, d):
        if s.h2 is not None and s.h2 == "" and d.strip(): s.h2 = d.strip()
        if s.cell is not None: s.cell[2] += d
        if s.body and not s.skip and s.first is None and d.strip(): s.first = d.strip()
p = P(); p.feed(open(sys.argv[1]).read())
print("first|%s" % p.first)
item = None
for r in p.rows:
    if r[0][0] == "th": continue
    c = [x[2].strip() for x in r]
    if r[0][1] is not None:  # an item row: item, status, then its first evidence
        item = c[0]; print("item|%s|%s" % (item, c[1])); c = c[2:]
    if len(c) >= 3 and c[2]:
        print("ev|%s|%s|%s|%s" % (item, c[0] or "-", c[1], c[2]))
PY
}
# The headless CHECK table as "item|status".
table() {
	awk '/^CHECK /{on=1; next} /^$/{on=0} on && !/^ / {
		st=$2; if ($2 == "not" && $3 == "run") st="not run"; print $1 "|" st }' "$1"
}

for run in go bad; do
	model="$T/m"; want=GO; rc=0
	[ $run = bad ] && model="$T/bad" && want=NO-GO && rc=1
	expect_rc $rc "$run: a real playbook run (facts, verify, comm) ends $want" \
		timeout 60 "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" \
		--session "$T/$run.db" --headless --model "$model"
	cp "$OUT" "$T/$run.out"
	expect_rc 0 "$run: report --format html" "$DAY0" report "$T/$run.db" --format html -o "$T/$run.html"
	browser "$T/$run.html" "$T/$run.dom" && [ -s "$T/$run.dom" ] &&
		ok "$run: chromium renders the report's DOM" ||
		fail "$run: chromium --dump-dom" "$(tail -3 "$T/chr.err")"
	view "$T/$run.dom" >"$T/$run.view"
	first=$(sed -n 's/^first|//p' "$T/$run.view")
	[ "$first" = "$want" ] && ok "$run: the verdict ($want) is the first text of the body" ||
		fail "$run: first text" "'$first', want $want"
	# Items and statuses: the browser's against the headless table's.
	grep '^item|' "$T/$run.view" | cut -d'|' -f2,3 | sort >"$T/$run.b.items"
	table "$T/$run.out" | sort >"$T/$run.h.items"
	n=$(wc -l <"$T/$run.b.items")
	[ "$n" -ge 10 ] && cmp -s "$T/$run.b.items" "$T/$run.h.items" &&
		ok "$run: the browser's $n checklist items and statuses equal the headless CHECK table" ||
		fail "$run: browser vs headless" "$(diff "$T/$run.b.items" "$T/$run.h.items" | head -8)"
	# Evidence rows: one per (item, stage, node), each with the status the
	# checks table holds last for it.
	grep '^ev|' "$T/$run.view" | grep -v '|not run$' | cut -d'|' -f2- | sort >"$T/$run.b.ev"
	sqlite3 -separator '|' "$T/$run.db" "SELECT item, coalesce(stage_id, stage, '-'),
		CASE WHEN node = 'console' THEN 'console' ELSE coalesce(subject, node) END, status
		FROM checks c WHERE seq = (SELECT max(seq) FROM checks d WHERE d.item = c.item
		AND d.node = c.node AND d.stage_id IS c.stage_id)" | sort -u >"$T/$run.db.ev"
	n=$(wc -l <"$T/$run.b.ev")
	[ "$n" -ge 4 ] && cmp -s "$T/$run.b.ev" "$T/$run.db.ev" &&
		ok "$run: the browser's $n evidence rows (item, stage, node, status) equal the session file's checks" ||
		fail "$run: browser vs checks table" "$(diff "$T/$run.b.ev" "$T/$run.db.ev" | head -8)"
	# Items the browser shows as not run were never checked.
	bad=""
	while IFS='|' read -r item st; do
		[ "$st" = "not run" ] || continue
		c=$(sqlite3 "$T/$run.db" "SELECT count(*) FROM checks WHERE item = '$item'")
		[ "$c" = 0 ] || bad="$bad $item"
	done <"$T/$run.b.items"
	[ -z "$bad" ] && ok "$run: items shown not run have no check in the file" || fail "$run: not run" "$bad"
	timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$T/chr" \
		--window-size=1200,900 --screenshot="$T/$run.png" "file://$T/$run.html" >/dev/null 2>&1
	python3 -c "import sys; d=open(sys.argv[1],'rb').read(); sys.exit(0 if d[:8]==b'\x89PNG\r\n\x1a\n' and len(d)>10000 else 1)" "$T/$run.png" &&
		ok "$run: chromium paints the report (a PNG screenshot)" || fail "$run: screenshot" "no PNG"
done

# NO-GO: failed and skipped apart, the skipped stage never as failed.
python3 - "$T/bad.dom" "$T/bad.db" >"$T/py.out" 2>&1 <<'PY'
import json, re, sqlite3, sys
dom = open(sys.argv[1]).read()
v = json.loads(sqlite3.connect(sys.argv[2]).execute("SELECT value FROM session WHERE key = 'verdict'").fetchone()[0])
def para(cls):
    m = re.search(r'<p class="%s"><b>%s:</b> (.*?)</p>' % (cls, cls), dom)
    return m.group(1).split(", ") if m else []
bad = []
if para("failed") != v["failed"]: bad.append("failed %r != %r" % (para("failed"), v["failed"]))
if para("skipped") != v.get("skipped", []): bad.append("skipped %r != %r" % (para("skipped"), v.get("skipped")))
if not v["failed"] or any("comm" in x for x in v["failed"]): bad.append("verdict failed list %r" % v["failed"])
tl = re.findall(r'<td class="k-(\w+)">\w+</td><td>([^<]*)</td>', dom)
if ("failed", "verify") not in tl or ("skipped", "comm") not in tl: bad.append("timeline %r" % tl)
if ("failed", "comm") in tl: bad.append("comm listed as failed")
print("\n".join(bad) or "failed %r, skipped %r, timeline %r" % (v["failed"], v.get("skipped"), tl))
sys.exit(1 if bad else 0)
PY
[ $? -eq 0 ] && ok "bad: failed and skipped apart as the verdict has them; the timeline: verify failed, comm skipped ($(cat "$T/py.out"))" ||
	fail "bad: failed / skipped" "$(cat "$T/py.out")"
