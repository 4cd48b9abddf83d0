#!/usr/bin/env bash
# A VL release day whose image stage fails before reporting (its --images
# folder does not exist): the four image items are "not run" in the
# verdict, and every place the operator reads them says so, as the
# session file's verdict holds them: the headless table, the report's
# Image channel table (md and json), and the Numerics screen's image
# channel line in a replay (tmux).  validate's own numerics.image pass (a
# text-only prompt) once stood there alone as "numerics.image pass".
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions" LANG=C.UTF-8 LC_ALL=C.UTF-8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$DAY0_ROOT/tests/tmux.sh"
tmux_server notrun
IMG="image.preprocess image.features numerics.image perf.image"

"$ENGINE" gen-model --like "$DAY0_ROOT/assets/configs/vl/qwen2.5-vl-7b-instruct/config.json" --scale tiny \
	--for-layout 2,1,1 --force "$T/q25" >/dev/null || fail "gen-model q25" "exit $?"
cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "128MiB"}]}
JSON
expect_rc 1 "release-day with --images of a folder that does not exist: NO-GO" timeout $RUN_LIMIT \
	"$DAY0" run "$DAY0_ROOT/playbooks/release-day.json" --inventory "$T/inv.json" --session "$T/n.db" --headless \
	--model "$T/q25" -e soak_seconds=1 -e ep=1 -e images="$T/nonexistent"
cp "$OUT" "$T/n.out"
verdict() { sqlite3 "$T/n.db" "SELECT json_extract(body, '\$.items.\"$1\"') FROM events WHERE node = 'console' AND type = 'verdict'"; }
for it in $IMG; do
	check "the verdict in the file: $it not run" test "$(verdict "$it")" = "not run"
	check "... the headless table says $it not run" grep -qE "^$it +not run " "$T/n.out"
done
check "validate's own numerics.image (text-only prompt) is in the file as pass" test \
	"$(sqlite3 "$T/n.db" "SELECT status FROM checks WHERE item = 'numerics.image' AND stage = 'validate'")" = pass

# the report: the Image channel table holds the image stage's rows, "not run"
expect_rc 0 "report (md)" "$DAY0" report "$T/n.db"
for it in $IMG; do
	contains "report md: | $it | not run | image | - | (the checklist's)" "| $it | not run | image | - | stage image failed before reporting it |" "$OUT"
done
expect_rc 0 "report (json)" "$DAY0" report "$T/n.db" --format json
check "report json: .image has a not-run row for each of the four items" test \
	"$(jq -r '[.image[] | select(.stage == "image" and .status == "not run") | .item] | sort | join(" ")' "$OUT")" = \
	"image.features image.preprocess numerics.image perf.image"

# the replay's Numerics screen: the image channel line as the verdict
tm -u new-session -d -s r -x 200 -y 50 "env TERM=screen-256color $DAY0 replay $T/n.db --at 100000; sleep 60"
wait_for "replay: at the end" "PAUSED"
key 5
wait_for "replay: the Numerics screen's image channel line" "image channel"
line=$(cap | grep '^image channel')
for it in $IMG; do
	case "$line" in *"$it not run"*) ok "replay: image channel: $it not run (the verdict's)" ;;
	*) fail "replay: image channel: $it not run" "$line" ;; esac
done
case "$line" in *"numerics.image pass"*) fail "replay: no numerics.image pass" "$line" ;;
*) ok "replay: no 'numerics.image pass' on the line" ;; esac
exit 0
