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

# The same for every engine step (`day0-engine --help`'s list): every
# option of the usage line is described below it (on its own line, in a
# group such as "--tp/--pp/--ep", or in a sentence), and an example.
steps=$("$ENGINE" --help | awk '/^steps:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{on=0}')
check "day0-engine --help lists the steps" test -n "$steps"
for s in $steps; do
	expect_rc 0 "engine $s --help exits 0" "$ENGINE" "$s" --help
	cp "$OUT" "$T/help"
	contains "engine $s --help: usage line" "usage: day0-engine $s" "$T/help"
	opts=$(head -1 "$T/help" | grep -oE -- '(^|[[ (|])--[a-z][a-z0-9-]*' | tr -d '[ (|' | sort -u)
	missing=""
	for o in $opts; do
		tail -n +2 "$T/help" | grep -qE -- "$o([] ,/:=.)]|$)" || missing="$missing $o"
	done
	check "engine $s --help: every option described (${missing:-all})" test -z "$missing"
	check "engine $s --help: an example" grep -qiE '^ *example' "$T/help"
done
