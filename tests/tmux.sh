# Shared helpers for the tests that read what a real terminal shows:
# the program under test runs in a detached tmux session named r, on a
# tmux server of the test's own.  Source it after lib.sh, then call
# tmux_server NAME once.
#   tmux_server NAME            this test's server (socket day0-NAME-PID),
#                               killed on exit with $T; fails the test when
#                               tmux is not installed
#   tm ARGS...                  tmux on that server
#   cap [ARGS...]               the pane of session r, as text
#   wait_for NAME NEEDLE [SECS] ok once the pane shows NEEDLE (a fixed
#                               string) within SECS (default 10), else a
#                               failure that shows the pane
#   absent NAME NEEDLE          ok when the pane does not show NEEDLE
#   on_screen NAME REGEX        ok when a line of the pane matches REGEX
#                               (extended)
#   key KEYS...                 tmux send-keys to session r
tmux_server() {
	if ! command -v tmux >/dev/null; then
		fail "tmux" "not installed (make deps)"
		exit 1
	fi
	SOCK="day0-$1-$$"
	trap 'tm kill-server 2>/dev/null; rm -rf "$T"' EXIT
	# A session that outlives the test's own: killing the one under test
	# then never takes the tmux server down while the next one is being
	# started.
	tm new-session -d -s keep "sleep 3600"
}
tm() { tmux -L "$SOCK" "$@"; }
cap() { tm capture-pane -p -t r "$@"; }
wait_for() {
	local i
	for i in $(seq $((${3:-10} * 10))); do
		if cap | grep -qF -- "$2"; then ok "$1"; return 0; fi
		sleep 0.1
	done
	fail "$1" "'$2' not on screen:
$(cap | sed 's/^/    | /')"
	return 1
}
absent() {
	if cap | grep -qF -- "$2"; then fail "$1" "'$2' on screen:
$(cap | sed 's/^/    | /')"; else ok "$1"; fi
}
on_screen() {
	if cap | grep -qE -- "$2"; then ok "$1"; else fail "$1" "/$2/ not on screen:
$(cap | sed 's/^/    | /')"; fi
}
key() { tm send-keys -t r "$@"; }
