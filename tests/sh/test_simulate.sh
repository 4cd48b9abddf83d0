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
n=$(grep -c '"type":"sample"' "$T/e.jsonl")
# ~1.5 s at 10 Hz is ~15 ticks of 64 x 2 samples; 10 ticks is the floor
check "plausible count: >= 64 x 10 samples ($n)" test "$n" -ge 640
missing=""
for c in $(seq 0 63); do
	grep -q "\"card\":$c,\"metric\":\"mem.used\"" "$T/e.jsonl" || missing="$missing $c"
done
check "every card 0..63 has mem.used samples${missing:+ (missing:$missing)}" test -z "$missing"
check "and rank.rss, mem.budget" bash -c "grep -q '\"card\":63,\"metric\":\"rank.rss\"' '$T/e.jsonl' &&
	grep -q '\"card\":63,\"metric\":\"mem.budget\",\"value\":85899345920' '$T/e.jsonl'"
check "no card 64" bash -c "! grep -q '\"card\":64,' '$T/e.jsonl'"
contains "host NIC rates" '"card":-1,"metric":"net.rx_bps"' "$T/e.jsonl"
contains "host NIC rates (tx)" '"card":-1,"metric":"net.tx_bps"' "$T/e.jsonl"
check "facts lists the 64 simulated cards" bash -c "grep '\"type\":\"facts\"' '$T/e.jsonl' | grep -q '\"card\":63,'"
# used never exceeds the budget; card 33 (64/2 + 1) is the leaking one
check "mem.used stays within [0, budget]" bash -c "grep '\"metric\":\"mem.used\"' '$T/e.jsonl' |
	grep -o '\"value\":[0-9.e+-]*' | cut -d: -f2 | awk '\$1 < 0 || \$1 > 85899345920 { bad = 1 } END { exit bad }'"
check "cards differ (card 1 and card 2 not equal)" bash -c "
	a=\$(grep -m1 '\"card\":1,\"metric\":\"mem.used\"' '$T/e.jsonl' | grep -o '\"value\":[0-9.e+]*')
	b=\$(grep -m1 '\"card\":2,\"metric\":\"mem.used\"' '$T/e.jsonl' | grep -o '\"value\":[0-9.e+]*')
	test \"\$a\" != \"\$b\""

expect_rc 2 "--simulate 0 is a usage error" "$AGENT" --simulate 0
contains "naming the option" "--simulate: expected 1..4096" "$ERR"
expect_rc 2 "--simulate x" "$AGENT" --simulate x
expect_rc 0 "--help mentions --simulate" "$AGENT" --help
contains "in the help" "--simulate N" "$OUT"
