#!/usr/bin/env bash
# No silent hang at start-up: a bad rank file on one rank of four (truncated,
# missing, another rank's) ends every rank within seconds with the file
# named, because the runtime's collective start-up steps (layout check,
# load) agree on success across ranks first.  The 60 s timeout only
# detects a hang; the time each took is printed, not asserted.
. "$(dirname "$0")/../lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$ENGINE" gen-model --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 --vocab 128 \
	--force "$T/m" >/dev/null || fail "gen-model" "exit $?"
"$ENGINE" convert "$T/m" "$T/good" --tp 4 --dtype f32 >/dev/null 2>"$ERR" || fail "convert --tp 4" "$(cat "$ERR")"
R1=rank-00001-of-00004.safetensors
case_run() { # NAME FILE-NEEDLE: run at np 4 on $T/c, expect a refusal naming the file
	local name=$1 needle=$2 t0 t1
	t0=$(date +%s.%N)
	timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
		"$ENGINE" run "$T/c" --tp 4 --tokens 1,2,3 >"$OUT" 2>"$ERR"
	RC=$?
	t1=$(date +%s.%N)
	echo "# $name: exit $RC after $(python3 -c "print('%.1f' % ($t1 - $t0))") s"
	if [ "$RC" -eq 124 ]; then
		fail "$name: every rank ends" "still running after 60 s (a rank waits in a collective)"
		return
	fi
	[ "$RC" -ne 0 ] && ok "$name: every rank ends, exit $RC" || fail "$name: refused" "exit 0"
	contains "$name: the file is named" "$needle" "$ERR"
}
rm -rf "$T/c"; cp -r "$T/good" "$T/c"
truncate -s -100 "$T/c/$R1"
case_run "truncated rank file" "$R1"
rm -rf "$T/c"; cp -r "$T/good" "$T/c"
rm "$T/c/$R1"
case_run "missing rank file" "$R1"
rm -rf "$T/c"; cp -r "$T/good" "$T/c"
cp "$T/c/rank-00000-of-00004.safetensors" "$T/c/$R1"
case_run "another rank's file (wrong layout)" "$R1"
# The good files still run: the agreement costs nothing when all is well.
rm -rf "$T/c"; cp -r "$T/good" "$T/c"
expect_rc 0 "the good rank files run" timeout 60 mpirun --allow-run-as-root --oversubscribe \
	--bind-to none -np 4 "$ENGINE" run "$T/c" --tp 4 --tokens 1,2,3
