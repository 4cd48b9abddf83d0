# day0-agent --simulate N: N simulated cards' samples at --sample-hz,
# valid events, every card present, the cards reported by hello and facts.
. "$(dirname "$0")/../lib.sh"
AGENT="$BUILD/day0-agent"
TOOLS="$BUILD/tests"

(echo '{"cmd":"hello"}'; echo '{"cmd":"facts"}'; sleep 1.5) |
	timeout 20 "$AGENT" --node sim --spool "$T/sp" --sample-hz 10 --heartbeat 0 --no-fsync \
		--simulate 64 >"$T/e.jsonl" 2>"$T/e.err"
check "the agent exits 0 when stdin closes" test $? = 0
check "the envelope is valid (seq from 1, no gaps)" "$TOOLS/jsonl_check" "$T/e.jsonl" \
	type=hello,cards=64 type=check,item=facts,status=pass
# Samples come in the `values` form (cards card, card+1, ...): expand them.
python3 - "$T/e.jsonl" >"$T/flat" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["type"] != "sample":
        continue
    vals = e["values"] if "values" in e else [e["value"]]
    for i, v in enumerate(vals):
        print(e["card"] + i, e["metric"], repr(v), e["seq"])
PY
n=$(grep -c ' mem.used \| rank.rss ' "$T/flat")
lines=$(grep -c '"type":"sample"' "$T/e.jsonl")
# ~1.5 s at 10 Hz is ~15 ticks of 64 x 2 samples; 10 ticks is the floor
check "plausible count: >= 64 x 10 x 2 card samples ($n)" test "$n" -ge 1280
check "in few lines: one per metric and tick, not per card ($lines lines)" test "$lines" -lt $((n / 8))
missing=""
for c in $(seq 0 63); do
	grep -q "^$c mem.used " "$T/flat" || missing="$missing $c"
done
check "every card 0..63 has mem.used samples${missing:+ (missing:$missing)}" test -z "$missing"
check "and rank.rss, mem.budget" bash -c "grep -q '^63 rank.rss ' '$T/flat' && grep -q '^63 mem.budget 85899345920 ' '$T/flat'"
check "no card 64" bash -c "! grep -q '^64 ' '$T/flat'"
contains "host NIC rates" '"card":-1,"metric":"net.rx_bps"' "$T/e.jsonl"
contains "host NIC rates (tx)" '"card":-1,"metric":"net.tx_bps"' "$T/e.jsonl"
check "facts lists the 64 simulated cards" bash -c "grep '\"type\":\"facts\"' '$T/e.jsonl' | grep -q '\"card\":63,'"
# used never exceeds the budget; card 33 (64/2 + 1) is the leaking one
check "mem.used stays within [0, budget]" bash -c "grep ' mem.used ' '$T/flat' |
	awk '\$3 < 0 || \$3 > 85899345920 { bad = 1 } END { exit bad }'"
check "cards differ (card 1 and card 2 not equal)" bash -c "
	a=\$(grep -m1 '^1 mem.used ' '$T/flat' | cut -d' ' -f3)
	b=\$(grep -m1 '^2 mem.used ' '$T/flat' | cut -d' ' -f3)
	test \"\$a\" != \"\$b\""
# The store expands the form into one row per card.
"$TOOLS/day0_store" ingest "$T/s.db" <"$T/e.jsonl" >/dev/null 2>&1
check "the store has a mem.used row per card and tick" test \
	"$(sqlite3 "$T/s.db" "select count(*) from samples where metric='mem.used'")" = "$(grep -c ' mem.used ' "$T/flat")"
check "with the card's value" test \
	"$(sqlite3 "$T/s.db" "select cast(value as integer) from samples where metric='mem.used' and card=37 order by ts limit 1")" = \
	"$(grep -m1 '^37 mem.used ' "$T/flat" | cut -d' ' -f3)"

expect_rc 2 "--simulate 0 is a usage error" "$AGENT" --simulate 0
contains "naming the option" "--simulate: expected 1..4096" "$ERR"
expect_rc 2 "--simulate x" "$AGENT" --simulate x
expect_rc 0 "--help mentions --simulate" "$AGENT" --help
contains "in the help" "--simulate N" "$OUT"
# The console folds the form as the store derives it: the view built by
# seeking the store's tables equals the fold of the event lines.
"$BUILD/day0" replay "$T/s.db" --dump 2>/dev/null | grep -v "seek took" >"$T/seek.txt"
"$BUILD/day0" replay "$T/s.db" --dump --fold 2>/dev/null | grep -v "seek took" >"$T/fold.txt"
check "the view of the values form: seek == fold" cmp -s "$T/seek.txt" "$T/fold.txt"
check "and it holds card 63's memory" grep -q "^  card 63 ts=[0-9]* used=[0-9]" "$T/seek.txt"
