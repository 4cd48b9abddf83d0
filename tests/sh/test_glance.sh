#!/usr/bin/env bash
# The Overview read at a glance (issue #35, docs/screens.md): one real
# release day (`day0 demo --headless` on this machine), then its session
# file replayed in tmux at 80x24, 120x40 and 160x48, during the comm stage
# and at the end.  Every number on the screen is compared with the session
# file (sqlite3): each card's used/budget, peak and headroom, the comm
# stage's bus bandwidth and the NIC rx/tx, the checklist's counts; the
# data-moved sparkline is not flat while the collectives run; no number is
# cut; the headless table and the report show the same memory numbers.
source "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export LANG=C.UTF-8 LC_ALL=C.UTF-8
for t in tmux sqlite3; do
	command -v $t >/dev/null || { fail "$t" "not installed (make deps)"; exit 1; }
done
SOCK="day0-glance-$$"
tm() { tmux -L "$SOCK" "$@"; }
trap 'tm kill-server 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
tm new-session -d -s keep "sleep 600"

# ------------------------------------------------------------ the session
export DAY0_SESSIONS="$T/sessions"
COLUMNS=100 timeout $RUN_LIMIT "$DAY0" demo --dir "$T/demo" --headless >"$T/headless.txt" 2>"$T/demo.err"
DB=$(sed -n 's/^session: //p' "$T/headless.txt")
if [ -z "$DB" ] || [ ! -f "$DB" ]; then
	fail "demo session" "no session file: $(tail -5 "$T/headless.txt") $(tail -5 "$T/demo.err")"
	exit 1
fi
ok "demo session written"
q() { sqlite3 -batch -noheader "$DB" "$@"; }

# The screen's number formats (tui/fit.c) in awk.
FMT='
function unit(b,  u) { u = 0; while ((b >= 1024 || b <= -1024) && u < 5) { b /= 1024; u++ } return u }
function num(b, u,  i) { for (i = 0; i < u; i++) b /= 1024; return b == int(b) ? sprintf("%.0f", b) : sprintf("%.1f", b) }
function bytes(b,  u) { split("B KiB MiB GiB TiB PiB", U, " "); u = unit(b); return num(b, u) " " U[u + 1] }
function ub(used, budget) {
	split("B KiB MiB GiB TiB PiB", U, " ")
	if (unit(used) == unit(budget)) return num(used, unit(used)) "/" num(budget, unit(budget)) " " U[unit(budget) + 1]
	return bytes(used) "/" bytes(budget)
}
function hr(peak, budget) { return sprintf("%.0f%%", (budget - peak) / budget * 100) }
'

# Each card's numbers at time $1 (ns): "CARD|used/budget|peak|headroom";
# the peak the highest mem.used or mem.peak sample up to then.
card_numbers() {
	local at=$1
	q "SELECT s.card,
	     (SELECT value FROM samples WHERE node=s.node AND card=s.card AND metric='mem.used' AND ts<=$at ORDER BY ts DESC LIMIT 1),
	     (SELECT max(value) FROM samples WHERE node=s.node AND card=s.card AND metric IN ('mem.peak', 'mem.used') AND ts<=$at),
	     (SELECT value FROM samples WHERE node=s.node AND card=s.card AND metric='mem.budget' AND ts<=$at ORDER BY ts DESC LIMIT 1)
	   FROM series s WHERE s.node='local' AND s.metric='mem.used' AND s.card>=0 ORDER BY s.card" |
		awk -F'|' "$FMT"'{ peak = $3 > $2 ? $3 : $2; print $1 "|" ub($2, $4) "|" bytes(peak) "|" hr(peak, $4) }'
}

# The checklist line at time $1: counts of the registry's items (the
# verdict's statuses when there is one, else the worst evidence), then the
# first of the worst of fail / not run / warn.
ITEMS=$(q "SELECT j.key FROM events e, json_each(json_extract(e.body,'\$.items')) j WHERE e.type='verdict' AND j.key NOT LIKE 'rehearsal.%'")
[ "$(echo "$ITEMS" | wc -l)" -ge 18 ] && ok "registry items from the verdict" || fail "registry items" "$ITEMS"
checklist_line() {
	local at=$1 item st line first="" fs=""
	local -A n=()
	local verdict
	verdict=$(q "SELECT body FROM events WHERE type='verdict' AND ts<=$at LIMIT 1")
	for item in $ITEMS; do
		if [ -n "$verdict" ]; then
			st=$(q "SELECT json_extract(body,'\$.items.\"$item\"') FROM events WHERE type='verdict'")
		else
			st=$(q "SELECT status FROM checks WHERE item='$item' AND ts<=$at ORDER BY
			  CASE status WHEN 'fail' THEN 6 WHEN 'not run' THEN 5 WHEN 'warn' THEN 4 WHEN 'running' THEN 3
			  WHEN 'pending' THEN 2 WHEN 'skip' THEN 1 ELSE 0 END DESC LIMIT 1")
		fi
		[ -z "$st" ] && st="no evidence"
		n[$st]=$(( ${n[$st]:-0} + 1 ))
	done
	line="CHECKLIST"
	for st in pass warn fail "not run" running pending skip "no evidence"; do
		if [ "${n[$st]:-0}" -gt 0 ] || [ "$st" = pass ] || [ "$st" = fail ]; then
			line="$line ${n[$st]:-0} $st"
		fi
	done
	for fs in fail "not run" warn; do
		[ "${n[$fs]:-0}" -gt 0 ] || continue
		for item in $ITEMS; do
			if [ -n "$verdict" ]; then
				st=$(q "SELECT json_extract(body,'\$.items.\"$item\"') FROM events WHERE type='verdict'")
			else
				st=$(q "SELECT status FROM checks WHERE item='$item' AND ts<=$at ORDER BY
				  CASE status WHEN 'fail' THEN 6 WHEN 'not run' THEN 5 WHEN 'warn' THEN 4 ELSE 0 END DESC LIMIT 1")
			fi
			# not run because the playbook does not require it (the
			# verdict's "optional": a release day's training.*) is
			# not a failing item
			if [ "$st" = "not run" ] && [ -n "$verdict" ] &&
				[ "$(q "SELECT count(*) FROM events, json_each(json_extract(body,'\$.optional')) WHERE type='verdict' AND value='$item'")" != 0 ]; then
				continue
			fi
			if [ "$st" = "$fs" ]; then first="  first $fs: $item"; break 2; fi
		done
	done
	echo "$line$first"
}

# Every text a screen or the table may shorten, whole (one per line).
# (the checks' details, the stages' notes, and the verdict's own evidence
# lines as the report has them whole: "no stage of the playbook produces it")
q "SELECT replace(detail, char(10), ' ') FROM checks UNION ALL SELECT replace(msg, char(10), ' ') FROM stages WHERE msg != ''" >"$T/full.txt"
"$DAY0" report "$DB" --format json -o "$T/report.json" 2>/dev/null
sqlite3 -batch -noheader :memory: "SELECT replace(value, char(10), ' ') FROM json_tree(readfile('$T/report.json')) WHERE key='detail' AND type='text'" >>"$T/full.txt"
# The same as curses draws them (a control character as ^X).
perl -pe 's/([\x00-\x08\x0b-\x1f\x7f])/"^".chr((ord($1)+64)%128)/ge' "$T/full.txt" >"$T/full_tty.txt"
# cut_ok FILE [WHOLE]: each "…" in FILE ends a piece of some whole text
# (WHOLE: $T/full.txt) at a word or number boundary: the 12 characters
# before it are in a whole text and the whole text goes on there with a
# space or punctuation, never with a digit or a number's point (so "+0.…"
# or "40…" of "400" fail).  And no text is cut without one: a line
# COLS wide (the screen's edge) that ends inside a whole text (one that
# starts on it: its first 16 characters) is a hard cut.
cut_ok() { # FILE [WHOLE [COLS]]
	LC_ALL=C awk -v ell="…" -v cols="${3:-0}" '
	NR == FNR { full[NR] = $0; nf = NR; next }
	{
		line = $0
		while ((k = index(line, ell)) > 0) {
			before = substr(line, 1, k - 1)
			line = substr(line, k + length(ell))
			# A name'"'"'s leading "…" (fit_name: "…node-0017") starts
			# a word; a shortened text'"'"'s ends one.
			if ((before == "" || before ~ / $/) && line ~ /^[^ ]/) continue
			# The alerts line is the screen'"'"'s own list (entries
			# "mem NODE/C P%", "fail ITEM@NODE" apart by two
			# spaces), no stored text: shortened at a word, never
			# after a digit or a number'"'"'s point.
			if ($0 ~ /^ALERTS:/) {
				if (before ~ /[0-9.]$/) { print "cut inside an alert: " substr(before, length(before) > 12 ? length(before) - 11 : 1) ell; bad = 1 }
				continue
			}
			tail = substr(before, length(before) > 12 ? length(before) - 11 : 1)
			sub(/^ +/, "", tail)
			if (tail == "") continue
			good = 0; seen = 0
			for (i = 1; i <= nf; i++) {
				p = index(full[i], tail)
				if (!p) continue
				seen = 1
				c = substr(full[i], p + length(tail), 1)
				if (c == "" || c ~ /[ ,;:()=>-]/) good = 1
			}
			if (!good) { print (seen ? "cut inside: " : "not a whole text: ") tail ell; bad = 1 }
		}
		t = $0
		w = length($0) - gsub(/[\200-\277]/, "", t) # columns
		if (!cols || w < cols) next
		split("", at_ok); split("", at_seen)
		for (i = 1; i <= nf; i++) {
			f = full[i]
			if (length(f) < 24) continue
			p = index($0, substr(f, 1, 16))
			if (!p) continue
			rest = substr($0, p)
			for (j = 0; j < length(f) && substr(rest, j + 1, 1) == substr(f, j + 1, 1); j++);
			at_seen[p] = substr(rest, 1, 60)
			if (j < length(rest) || j == length(f) || substr(f, j + 1) ~ /^ *$/)
				at_ok[p] = 1
		}
		for (p in at_seen)
			if (!(p in at_ok)) { print "cut at the edge without an ellipsis: " at_seen[p]; bad = 1 }
	}
	END { exit bad }' "${2:-$T/full.txt}" "$1"
}

# ------------------------------------------------------ the screens, replayed
shot() { # AT WxH [DB [KEY]] -> $T/screen.txt (KEY: pressed, then captured)
	local x=${2%x*} y=${2#*x}
	tm kill-session -t r 2>/dev/null
	tm new-session -d -s r -x "$x" -y "$y" \
		"env LANG=C.UTF-8 TERM=screen-256color $DAY0 replay ${3:-$DB} --at $1"
	local i
	for i in $(seq 100); do
		tm capture-pane -p -t r >"$T/screen.txt"
		grep -q '^CHECKLIST [0-9]' "$T/screen.txt" && grep -q 'PAUSED\|PAU' "$T/screen.txt" && break
		sleep 0.1
	done
	sleep 0.3
	if [ -n "${4:-}" ]; then
		tm send-keys -t r "$4"
		sleep 0.5
	fi
	tm capture-pane -p -t r >"$T/screen.txt"
}
show() { sed 's/^/    | /' "$T/screen.txt"; }

# During comm: the first NIC sample tick after the comm stage's first
# collective (its comm events are in (previous tick, tick]).
COMM0=$(q "SELECT min(ts) FROM comm WHERE stage_id='comm'")
AT_COMM=$(q "SELECT min(ts) FROM samples WHERE node='local' AND metric='net.rx_bps' AND ts > $COMM0")
END=$(q "SELECT max(ts) FROM events")
[ -n "$COMM0" ] && [ -n "$AT_COMM" ] && ok "comm stage in the session" || fail "comm stage" "no comm events"
BUS=$(q "SELECT op, busbw FROM comm WHERE node='local' AND ts<=$AT_COMM ORDER BY ts DESC LIMIT 1" |
	awk -F'|' '{ printf "%s busbw %.3g GB/s", $1, $2 }')
NIC=$(q "SELECT (SELECT value FROM samples WHERE node='local' AND metric='net.rx_bps' AND ts<=$AT_COMM ORDER BY ts DESC LIMIT 1),
	        (SELECT value FROM samples WHERE node='local' AND metric='net.tx_bps' AND ts<=$AT_COMM ORDER BY ts DESC LIMIT 1)" |
	awk -F'|' "$FMT"'{ print "rx " bytes($1) "/s  tx " bytes($2) "/s" }')

for size in 80x24 120x40 160x48; do
	for when in comm end; do
		at=$AT_COMM
		[ $when = end ] && at=$END
		shot "$at" "$size"
		what="$size $when"
		# Every card's numbers.
		while IFS='|' read -r c u p h; do
			line=$(grep -E "^  local/$c " "$T/screen.txt")
			if [ -n "$line" ] && echo "$line" | grep -qF -- "$u" &&
				echo "$line" | grep -qE -- "(peak|pk) +$p +(headroom|free) +$h"; then
				ok "$what: card $c $u peak $p headroom $h"
			else
				fail "$what: card $c" "want '$u' peak '$p' headroom '$h':
$(show)"
			fi
		done < <(card_numbers "$at")
		# The checklist's counts and its first failing item.
		want=$(checklist_line "$at")
		# When "first STATUS: ITEM" does not fit beside the counts (80
		# columns, a long item id) the line holds the counts alone and
		# the next line names the item: "  ! ITEM STATUS".
		counts=${want%%  first *}
		fitem=""
		[ "$counts" != "$want" ] && fitem=${want##*: } && fst=${want#*  first } && fst=${fst%%: *}
		if grep -qF -- "$want" "$T/screen.txt"; then ok "$what: $want"
		elif [ -n "$fitem" ] && grep -qxF -- "$counts" <(sed 's/ *$//' "$T/screen.txt") &&
			grep -qE -- "^  . $fitem $fst( |\$)" "$T/screen.txt"; then
			ok "$what: $counts, then $fitem $fst on the next line"
		else fail "$what: checklist counts" "want '$want':
$(show)"; fi
		# The header: the clock and the stage (or the verdict) whole,
		# the model's path shortened to leave them room.
		if [ $when = comm ]; then hw='elapsed [0-9.:]+[a-z]*  stage [a-z0-9.-]+ [0-9]+%'
		else hw='elapsed [0-9.:]+[a-z]*  (GO|NO-GO)$'; fi
		head -1 "$T/screen.txt" | grep -qE -- "$hw" && ok "$what: header" ||
			fail "$what: header" "want /$hw/: $(head -1 "$T/screen.txt")"
		grep -qE '^VERDICT (GO|NO-GO|pending|held)' "$T/screen.txt" &&
			ok "$what: verdict line" || fail "$what: verdict line" "$(show)"
		grep -qE '^local +' "$T/screen.txt" && ok "$what: node state row" ||
			fail "$what: node state row" "$(show)"
		# No number cut: an ellipsis never follows a digit or a
		# number's point.
		if why=$(cut_ok "$T/screen.txt" "$T/full_tty.txt" "${size%x*}"); then ok "$what: shortened at words, no number cut"
		else fail "$what: no number cut" "$why"; fi
		if [ $when = comm ]; then
			line=$(grep -E '^  local +rx ' "$T/screen.txt")
			if echo "$line" | grep -qF -- "$NIC  $BUS"; then ok "$what: $NIC  $BUS"
			else fail "$what: bandwidth during comm" "want '$NIC  $BUS':
$(show)"; fi
			# The sparkline shows the collectives: not flat.
			spark=$(echo "$line" | grep -oE '[▁▂▃▄▅▆▇█]+$')
			if echo "$spark" | grep -q '[▂▃▄▅▆▇█]'; then ok "$what: sparkline moves ($spark)"
			else fail "$what: sparkline moves" "'$spark' in '$line'"; fi
		fi
		[ $when = end ] && cp "$T/screen.txt" "$T/end$size.txt"
		if [ $size = 160x48 ] && [ $when = end ]; then
			# The checklist panel's glyph says the item's status.
			bad=$(awk '/^CHECKLIST [0-9]+\/[0-9]+ with evidence/ { on = 1; next }
				on && /^  \.\.\. / { exit }
				on && /^  / { g = $1; st = $3; if ($3 == "not") st = "not run"
					want = st == "pass" ? "✔" : st == "fail" ? "✖" : st == "skip" ? "-" :
					       (st == "warn" || st == "not run") ? "!" : "~"
					if (g != want) print }
				on && !/^  / { exit }' "$T/screen.txt")
			[ -z "$bad" ] && ok "$what: checklist panel glyphs match the statuses" ||
				fail "$what: checklist panel glyphs" "$bad"
		fi
	done
done

# During the soak: no comm sweep runs, but the soak's own collectives
# (rank 0's comm rows over each --interval, "interval_s") are the running
# collective on the NET line and move the sparkline; the Comm screen and
# the report's in-run table leave them out (they are not a sweep).
SOAK0=$(q "SELECT min(c.ts) FROM comm c JOIN events e ON e.node=c.node AND e.seq=c.seq WHERE json_extract(e.body,'\$.interval_s') IS NOT NULL")
AT_SOAK=$(q "SELECT min(ts) FROM samples WHERE node='local' AND metric='net.rx_bps' AND ts > ${SOAK0:-0} + 2000000000")
if [ -n "$SOAK0" ] && [ -n "$AT_SOAK" ]; then
	ok "the soak's interval collectives are in the session"
	SBUS=$(q "SELECT c.op, c.busbw FROM comm c JOIN events e ON e.node=c.node AND e.seq=c.seq
		WHERE c.node='local' AND c.ts<=$AT_SOAK AND (json_extract(e.body,'\$.calls') IS NULL OR
		json_extract(e.body,'\$.interval_s') IS NOT NULL) ORDER BY c.ts DESC LIMIT 1" |
		awk -F'|' '{ printf "%s busbw %.3g GB/s", $1, $2 }')
	for size in 80x24 160x48; do
		shot "$AT_SOAK" "$size"
		grep -qE '^day0 .*stage soak [0-9]+%' "$T/screen.txt" || fail "$size soak: the moment is in the soak" "$(show)"
		line=$(grep -E '^  local +rx ' "$T/screen.txt")
		if echo "$line" | grep -qF -- "$SBUS"; then ok "$size soak: $SBUS on the NET line"
		else fail "$size soak: the soak's bus bandwidth" "want '$SBUS':
$(show)"; fi
		spark=$(echo "$line" | grep -oE '[▁▂▃▄▅▆▇█]+$')
		# the ticks since the soak began: its collectives lift them
		if echo "$spark" | tail -c 16 | grep -q '[▂▃▄▅▆▇█]'; then ok "$size soak: sparkline moves ($spark)"
		else fail "$size soak: sparkline moves" "'$spark' in '$line'"; fi
	done
	# The Comm screen before the soak's first interval and during the
	# soak: the same bars (the header lines and the replay timeline aside).
	shot "$((SOAK0 - 1))" 160x48 "$DB" 3
	sed '1,2d' "$T/screen.txt" | grep -v '^\[[─◆✖]' >"$T/comm_before.txt"
	shot "$AT_SOAK" 160x48 "$DB" 3
	sed '1,2d' "$T/screen.txt" | grep -v '^\[[─◆✖]' >"$T/comm_soak.txt"
	if grep -q 'busbw GB/s' "$T/comm_soak.txt" && cmp -s "$T/comm_before.txt" "$T/comm_soak.txt"; then
		ok "Comm screen: the soak's interval rows are not among the sweep's bars"
	else fail "Comm screen during the soak" "$(diff "$T/comm_before.txt" "$T/comm_soak.txt" | head -20)"; fi
	"$DAY0" report "$DB" --format json -o "$T/soak_report.json" >/dev/null 2>&1
	n=$(python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
def walk(x):
    if isinstance(x, dict):
        if x.get("interval_s") is not None: yield x
        for v in x.values(): yield from walk(v)
    elif isinstance(x, list):
        for v in x: yield from walk(v)
print(sum(1 for _ in walk(d)))' "$T/soak_report.json")
	rows=$(python3 -c 'import json,sys; s=json.dumps(json.load(open(sys.argv[1]))); print(s.count("\"soak\""))' "$T/soak_report.json")
	[ "$n" = 0 ] && [ "${rows:-0}" -gt 0 ] && ok "report: the soak's totals, not its interval rows ($rows mentions)" ||
		fail "report: soak comm rows" "interval rows $n, soak mentions $rows"
else
	fail "soak interval collectives" "none in the session"
fi

# The Overview's perf line at the end: the perf step's baseline, not the
# load level that came last (load's rows are the Service screen's).
shot "$END" 120x40
want=$(q "SELECT printf('perf: ttft %.1f ms  tpot %.1f ms  %.1f tok/s', ttft_ms, tpot_ms, tokens_per_s) FROM perf WHERE node='local' AND stage_id='perf' ORDER BY ts DESC LIMIT 1")
if [ -n "$want" ] && grep -qF -- "$want" "$T/screen.txt"; then ok "end: the perf line is perf.baseline's row ($want)"
else fail "end: the perf line" "want '$want':
$(show)"; fi

# docs/screens.md's captures at the end still have the screen's shape:
# line by line the same first two words (digits, bars and sparklines aside).
shape() {
	sed 's/[0-9]/9/g; s/[─◆✖┃█▇▆▅▄▃▂▁·]\+/#/g; s/^ALERTS:.*/alerts:/; s/^alerts: none/alerts:/' |
		awk '{ print $1, $2 }'
}
# The captures are of a GO day: a run that ends otherwise (the sanitizer
# build's soak can fail its memory growth) has another shape, said so.
go=$(q "SELECT json_extract(body, '\$.go') FROM events WHERE type='verdict'")
for size in 80x24 160x48; do
	if [ "$go" != 1 ]; then
		ok "docs/screens.md: $size capture not compared: this run's verdict is not GO (go=$go), the captures' is"
		continue
	fi
	awk -v h="### ${size/x/x}, at the end" '$0 == h { on = 1; next }
		on && /^```/ { if (in_) exit; in_ = 1; next } in_ { print }' \
		"$DAY0_ROOT/docs/screens.md" | shape >"$T/doc.shape"
	shape <"$T/end$size.txt" >"$T/screen.shape"
	if [ -s "$T/doc.shape" ] && diff "$T/doc.shape" "$T/screen.shape" >"$T/shape.diff"; then
		ok "docs/screens.md: the $size capture at the end has today's layout"
	else fail "docs/screens.md: $size capture at the end is stale" "$(cat "$T/shape.diff")"; fi
done

# ------------------------------- the whole text one key away ('e' on the Overview)
# The first item to warn or fail (before the verdict: its evidence is a
# check's detail): at 80x24 its evidence line is shortened with "…" and
# says [e]; e opens the Checklist screen at that item and node, its detail
# whole in the evidence pane.
AT_E=$(q "SELECT min(ts) FROM checks WHERE status IN ('warn','fail') AND item NOT LIKE 'rehearsal.%'")
want=$(checklist_line "$AT_E")
fitem=${want##*: } fst=${want#*  first } fst=${fst%%: *}
IFS='|' read -r enode edetail < <(q "SELECT node, replace(detail, char(10), ' ') FROM checks WHERE item='$fitem' AND ts<=$AT_E
	ORDER BY CASE status WHEN 'fail' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END DESC, ts DESC LIMIT 1")
if [ -z "$AT_E" ] || [ -z "$edetail" ] || [ ${#edetail} -lt 70 ]; then
	fail "evidence one key away" "no warn or fail with a long detail in the session ($fitem: '$edetail')"
else
	shot "$AT_E" 80x24
	row=$(grep -E "^  . $fitem $fst  " "$T/screen.txt")
	if echo "$row" | grep -qE '…  \[e\]$' && why=$(cut_ok "$T/screen.txt" "$T/full_tty.txt" 80); then
		ok "80x24: $fitem's evidence shortened at a word, [e] for the whole text"
	else fail "80x24: $fitem's evidence shortened" "'$row' ${why:-}:
$(show)"; fi
	shot "$AT_E" 80x24 "$DB" e
	# The pane: "ITEM: STATUS   on NODE:", then each stage's evidence
	# wrapped at words (joined here with single spaces).
	pane=$(awk -v h="$fitem: $fst   on $enode:" 'index($0, h) == 1 { on = 1; next }
		on && /^\[/ { exit } on { print }' "$T/screen.txt" | tr -s ' \n' '  ')
	whole=$(printf '%s' "$edetail" | perl -pe 's/([\x00-\x08\x0b-\x1f\x7f])/"^".chr((ord($1)+64)%128)/ge' | tr -s ' ' ' ')
	if [ -n "$pane" ] && [[ "$pane" == *"$whole"* ]]; then
		ok "e: the Checklist screen at $fitem on $enode, its evidence whole"
	else fail "e: $fitem's whole evidence" "want '$whole' in '$pane':
$(show)"; fi
fi

# ----------------------------------------- headless table and report agree
while IFS='|' read -r c u p h; do
	if grep -qE "^local/$c +$u +$p +$h\$" "$T/headless.txt"; then ok "headless: card $c $u $p $h"
	else fail "headless: card $c" "want '$u $p $h': $(sed -n '/^MEMORY/,/^$/p' "$T/headless.txt")"; fi
done < <(card_numbers "$END")
want=$(checklist_line "$END" | sed 's/^CHECKLIST/checklist:/')
contains "headless: $want" "$want" "$T/headless.txt"
# The DETAIL column (COLUMNS=100): shortened at a word, never in a number.
if why=$(cut_ok "$T/headless.txt" "$T/full.txt" 100); then ok "headless: shortened at words, no number cut"
else fail "headless: no number cut" "$why"; fi
grep -q '…$' "$T/headless.txt" && ok "headless: long details shortened with …" ||
	fail "headless: long details shortened" "$(sed -n '/^CHECK /,/^$/p' "$T/headless.txt")"
"$DAY0" report "$DB" --format md -o "$T/report.md" 2>"$T/report.err"
"$DAY0" report "$DB" --format html -o "$T/report.html" 2>>"$T/report.err"
while IFS='|' read -r c u p h; do
	if grep -qE "^\| local \| $c \| [0-9]+ \| $p \| .* \| $u \| $h \|\$" "$T/report.md"; then ok "report md: card $c"
	else fail "report md: card $c" "want '$p' '$u' '$h': $(grep -A6 'Peak memory' "$T/report.md")"; fi
	if grep -qF -- "<td>$u</td><td>$h</td>" "$T/report.html"; then ok "report html: card $c"
	else fail "report html: card $c" "want '<td>$u</td><td>$h</td>'"; fi
done < <(card_numbers "$END")
# The report's checklist: the same counts and first item as the screen.
rline=$(sqlite3 -batch -noheader :memory: "SELECT json_extract(value,'\$.item'), json_extract(value,'\$.status'),
	json_extract(value,'\$.required') FROM json_each(readfile('$T/report.json'), '\$.checklist') WHERE json_extract(value,'\$.rehearsal') = 0" |
	awk -F'|' '{ n[$2]++; if (!first[$2] && ($2 != "not run" || $3 == 1)) first[$2] = $1 }
	END { line = "checklist:"
		split("pass|warn|fail|not run|running|pending|skip|no evidence", S, "|")
		for (i = 1; i <= 8; i++) if (n[S[i]] || S[i] == "pass" || S[i] == "fail") line = line " " (n[S[i]] + 0) " " S[i]
		split("fail|not run|warn", B, "|")
		for (i = 1; i <= 3; i++) if (first[B[i]]) { line = line "  first " B[i] ": " first[B[i]]; break }
		print line }')
[ "$rline" = "$want" ] && ok "report: $rline" || fail "report: checklist counts" "report '$rline', screen '$want'"
# The full evidence text the screens shorten is in the report.
full=$(q "SELECT detail FROM checks WHERE item='stability.soak' ORDER BY ts DESC LIMIT 1")
sed 's/&gt;/>/g; s/&lt;/</g; s/&quot;/"/g; s/&#39;/'"'"'/g; s/&amp;/\&/g' "$T/report.html" >"$T/report.txt"
contains "report: the whole soak evidence" "$full" "$T/report.txt"

# ------------------------------------- folded: more cards than rows (node sets)
# Ten local nodes of eight simulated cards (day0-agent --simulate: the
# agents' memory patterns, no engine work): 80 cards, so the 80x24 screen
# folds memory per node set (each line its set's worst card) and the
# headless table gives a line per node.
mkdir -p "$T/fleet/model"
cp "$T/demo/model/config.json" "$T/fleet/model/"
cat >"$T/fleet/inv.json" <<JSON
{"name": "fold", "defaults": {"transport": "local", "cards": 8, "card_mem": "80GiB"},
 "nodes": [{"name": "n[01-10]"}],
 "agent_args": ["--simulate", "8", "--sim-model", "$T/fleet/model", "--sim-scale", "20"]}
JSON
FDB="$T/fleet/s.db"
timeout $RUN_LIMIT "$DAY0" run "$DAY0_ROOT/playbooks/release-day.json" --inventory "$T/fleet/inv.json" \
	--session "$FDB" --headless --model "$T/fleet/model" -e tp=8 -e pp=1 -e ep=10 >"$T/fleet.out" 2>&1
FEND=$(sqlite3 "$FDB" "SELECT max(ts) FROM events")
# node|card|used|peak|budget at the end; the peak the highest mem.used or
# mem.peak sample of the whole session (the report's; the screen's last
# high-water mark must be that).
sqlite3 -batch -noheader "$FDB" "SELECT s.node, s.card,
     (SELECT value FROM samples WHERE node=s.node AND card=s.card AND metric='mem.used' ORDER BY ts DESC LIMIT 1),
     (SELECT max(value) FROM samples WHERE node=s.node AND card=s.card AND metric IN ('mem.peak', 'mem.used')),
     (SELECT value FROM samples WHERE node=s.node AND card=s.card AND metric='mem.budget' ORDER BY ts DESC LIMIT 1)
   FROM series s WHERE s.metric='mem.used' AND s.card>=0 ORDER BY s.node, s.card" >"$T/fleet.cards"
[ "$(wc -l <"$T/fleet.cards")" -eq 80 ] && ok "fold: 80 cards in the session" ||
	fail "fold: 80 cards" "$(wc -l <"$T/fleet.cards") ($(tail -3 "$T/fleet.out"))"
# The worst card (least headroom, then most used) of nodes FIRST..LAST.
worst() {
	awk -F'|' -v a="$1" -v b="$2" "$FMT"'
	$1 >= a && $1 <= b {
		peak = $4 > $3 ? $4 : $3; h = ($5 - peak) / $5
		if (!n++ || h < bh || (h == bh && $3 > bu)) { bh = h; bu = $3; bp = peak; bb = $5 }
	}
	END { print ub(bu, bb) "|" bytes(bp) "|" hr(bp, bb) "|" n }' "$T/fleet.cards"
}
shot "$FEND" 80x24 "$FDB"
nsets=0
while read -r label rest; do
	case $label in *\[*-*\]) ;; *) continue ;; esac
	pre=${label%%[*}; range=${label#*[}; range=${range%]}
	IFS='|' read -r u p h n <<<"$(worst "$pre${range%-*}" "$pre${range#*-}")"
	line="$label $rest"
	if echo "$line" | grep -qF -- "$u" && echo "$line" | grep -qE -- "(peak|pk) +$p +(headroom|free) +$h"; then
		ok "fold 80x24: $label's worst of $n cards: $u peak $p headroom $h"
	else fail "fold 80x24: $label" "want '$u' '$p' '$h': $(show)"; fi
	nsets=$((nsets + 1))
done < <(grep -E '^  n\[' "$T/screen.txt" | grep -v ' rx \| no NIC')
# A set's network line: rx/tx the sums of its nodes' last samples.
nnet=0
while read -r label rest; do
	pre=${label%%[*}; range=${label#*[}; range=${range%]}
	want=$(sqlite3 -batch -noheader "$FDB" "SELECT sum(rx), sum(tx) FROM (SELECT
		(SELECT value FROM samples s WHERE s.node=n.node AND metric='net.rx_bps' ORDER BY ts DESC LIMIT 1) rx,
		(SELECT value FROM samples s WHERE s.node=n.node AND metric='net.tx_bps' ORDER BY ts DESC LIMIT 1) tx
		FROM (SELECT DISTINCT node FROM samples WHERE node BETWEEN '$pre${range%-*}' AND '$pre${range#*-}') n)" |
		awk -F'|' "$FMT"'{ print "rx " bytes($1) "/s  tx " bytes($2) "/s" }')
	case "$rest" in
	"$want"*) ok "fold 80x24: $label $want" ;;
	*) fail "fold 80x24: $label's network" "want '$want': $(show)" ;;
	esac
	nnet=$((nnet + 1))
done < <(grep -E '^  n\[[0-9]+-[0-9]+\] +rx ' "$T/screen.txt")
[ "$nnet" -ge 1 ] || fail "fold 80x24: a node set's network line" "$(show)"
[ "$nsets" -ge 2 ] && ok "fold 80x24: memory folded into $nsets node sets" ||
	fail "fold 80x24: node sets" "$(show)"
# Every node's state: the grid's node set rows ("n[01-02] done x2") cover
# the ten nodes, each set's name whole.
covered=$(grep -oE '^n\[[0-9]+-[0-9]+\] +done x[0-9]+' "$T/screen.txt" | awk '{ s += substr($NF, 2) } END { print s + 0 }')
[ "$covered" = 10 ] && ok "fold 80x24: node set rows cover every node's state" ||
	fail "fold 80x24: node states" "$covered of 10: $(show)"
for n in n01 n05 n10; do
	IFS='|' read -r u p h c <<<"$(worst "$n" "$n")"
	if grep -qE "^$n +$u +$p +$h +$n/[0-9]+ of 8 cards\$" "$T/fleet.out"; then ok "fold headless: $n $u $p $h"
	else fail "fold headless: $n" "want '$u $p $h': $(sed -n '/^MEMORY/,/^$/p' "$T/fleet.out")"; fi
done
# The report's peak and headroom per card: the same numbers.
"$DAY0" report "$FDB" --format md -o "$T/fleet.md" 2>/dev/null
nbad=0
while IFS='|' read -r node c used peak budget; do
	want=$(echo "$used|$peak|$budget" | awk -F'|' "$FMT"'{ print bytes($2) " .* " ub($1, $3) " \\| " hr($2, $3) }')
	grep -qE "^\| $node \| $c \| [0-9]+ \| $want \|\$" "$T/fleet.md" || { nbad=$((nbad + 1)); [ $nbad = 1 ] && echo "# $node/$c: want '$want'"; }
done <"$T/fleet.cards"
[ "$nbad" = 0 ] && ok "fold report: 80 cards' peak, used/budget, headroom as the screen's" ||
	fail "fold report" "$nbad cards differ: $(grep -m3 '^| n01 |' "$T/fleet.md")"

# ------------------------------------------ names wider than their column
# Two nodes named like a big cluster's (25 characters, 16 for the grid's
# name at 80 columns): each row keeps the end that tells them apart
# ("…node-0017"), never a cut inside the number ("gpu-h200-rack07-n").
mkdir -p "$T/long"
cat >"$T/long/inv.json" <<JSON
{"name": "long", "defaults": {"transport": "local", "cards": 2, "card_mem": "80GiB"},
 "nodes": [{"name": "gpu-h200-rack07-node-[0017-0018]"}],
 "agent_args": ["--simulate", "2", "--sim-model", "$T/fleet/model", "--sim-scale", "20"]}
JSON
timeout $RUN_LIMIT "$DAY0" run "$DAY0_ROOT/playbooks/release-day.json" --inventory "$T/long/inv.json" \
	--session "$T/long/s.db" --headless --model "$T/fleet/model" -e tp=2 -e pp=1 -e ep=2 >"$T/long.out" 2>&1
shot "$(sqlite3 "$T/long/s.db" "SELECT max(ts) FROM events")" 80x24 "$T/long/s.db"
for n in 0017 0018; do
	if grep -qE "^…node-$n +done " "$T/screen.txt" &&
		[ "$(grep -cE "^  …[a-z0-9-]*node-$n/[01] .* peak " "$T/screen.txt")" = 2 ] &&
		grep -qE "^  …[a-z0-9-]*node-$n +rx " "$T/screen.txt"; then
		ok "80x24: node $n named by its end in the grid, memory and net lines"
	else fail "80x24: long node name $n" "$(show)"; fi
done
