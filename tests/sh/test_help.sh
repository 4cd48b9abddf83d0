#!/usr/bin/env bash
# `--help` of every console command: exit 0, the usage line, a described
# line for every option the usage line names, and an example.  The list of
# commands is `day0 --help`'s own, so a new command is checked too.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
cmds=$("$DAY0" --help | awk '/^commands:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{on=0}')
check "day0 --help lists the commands" test -n "$cmds"
for c in $cmds; do
	expect_rc 0 "$c --help exits 0" "$DAY0" "$c" --help
	cp "$OUT" "$T/help"
	contains "$c --help: usage line" "usage: day0 $c" "$T/help"
	opts=$(head -1 "$T/help" | grep -oE -- '(^|[[ ])-(-[a-z][a-z-]*|[a-zA-Z])' | tr -d '[ ' | sort -u)
	missing=""
	for o in $opts; do
		grep -qE -- "^ +([^ ]+, )*$o([ ,]|$)" "$T/help" || missing="$missing $o"
	done
	check "$c --help: every option described (${missing:-all})" test -z "$missing"
	check "$c --help: an example" grep -qiE '^example' "$T/help"
done
