# `day0 hosts` against real OpenSSH: eight loopback nodes served by one sshd
# (tests/sh/sshd_nodes.sh), agent deployment over SCP, a closed port, a
# changed host key, trust on first use, bad inventories, --json.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/sshd_nodes.sh"
DAY0="$BUILD/day0"
AGENT="$BUILD/day0-agent"
sshd_nodes_start 8 || exit 1
KH=(--known-hosts "$SSHD_KNOWN_HOSTS")
BIN=$HOME/.cache/day0/bin
fp() { ssh-keygen -lf "$1" | awk '{print $2}'; }
# The ok groups of `day0 hosts` output, expanded: prints the node names
# (every node answered ok when they are node1..node8).  Facts that move
# while the probe runs (free disk, when other jobs write) may split the
# fold, so tests count nodes rather than groups.
ok_nodes() {
	python3 - "$1" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n")
out = []
for i, l in enumerate(lines):
    m = re.match(r"^(\S+) \((\d+)\)$", l)
    if m and i + 2 < len(lines) and lines[i + 2].startswith("ok "):
        name = m.group(1)
        g = re.match(r"^(.*)\[([^\]]+)\]$", name)
        if not g:
            out.append(name)
            continue
        for part in g.group(2).split(","):
            a, _, b = part.partition("-")
            for k in range(int(a), int(b or a) + 1):
                out.append(g.group(1) + str(k).zfill(len(a)))
print(" ".join(sorted(out, key=lambda x: (len(x), x))))
PY
}

# --- deployment: the remote copy removed, then uploaded once ---------------
# Every node is this machine, so they share ~/.cache/day0/bin; the next ssh
# connection of any other test redeploys it anyway.
rm -f "$BIN/day0-agent" "$BIN/day0-engine"
touch "$T/deploy.start"
expect_rc 0 "hosts: eight nodes answer (first run deploys)" \
	timeout 120 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
check "hosts: the eight nodes fold into node sets" grep -q '^node\[' "$OUT"
contains "hosts: the summary line" "ok  cores " "$OUT"
check "hosts: every node answered ok" \
	test "$(ok_nodes "$OUT")" = "node1 node2 node3 node4 node5 node6 node7 node8"
check "hosts: identical facts fold into node sets (one group, or a few when free disk moved)" \
	test "$(grep -c '^---------------$' "$OUT")" -le 4
check "hosts: the agent was deployed to ~/.cache/day0/bin" test -x "$BIN/day0-agent"
check "hosts: the engine was deployed next to it" test -x "$BIN/day0-engine"
check "hosts: the deployed agent is the local version" \
	test "$("$BIN/day0-agent" --version)" = "$("$AGENT" --version)"
check "hosts: the deployed engine is byte-identical" cmp -s "$BIN/day0-engine" "$BUILD/day0-engine"
# (this run's: the home is this machine's, which another killed run may
# have left one in; deployment sweeps those after a day)
check "hosts: no temporaries left" bash -c "[ -z \"\$(find '$BIN' -name '*.tmp-*' -newer '$T/deploy.start')\" ]"
m1=$(stat -c %y "$BIN/day0-agent" "$BIN/day0-engine")
expect_rc 0 "hosts: second run" timeout 60 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
check "hosts: second run does not upload again (mtimes unchanged)" \
	test "$m1" = "$(stat -c %y "$BIN/day0-agent" "$BIN/day0-engine")"
# The start notes the copies' hash beside the directory and trusts the note
# (no hashing) while neither copy nor the directory is newer than it.
check "hosts: the start noted the copies' hash in ~/.cache/day0/bin.stamp" \
	grep -qxE '[0-9a-f]{64}' "$BIN.stamp"
echo 0000000000000000000000000000000000000000000000000000000000000000 >"$BIN.stamp"
expect_rc 0 "hosts: a note of another hash" timeout 60 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
check "hosts: ... has the copies hashed again: they are right, nothing uploaded" \
	test "$m1" = "$(stat -c %y "$BIN/day0-agent" "$BIN/day0-engine")"
check "hosts: ... and the note is theirs again" \
	test "$(cat "$BIN/day0-agent" "$BIN/day0-engine" | sha256sum | cut -c1-64)" = "$(cat "$BIN.stamp")"
sleep 0.05
printf 'x' >>"$BIN/day0-engine" # changed in place: no rename, the note stays
check "hosts: (the engine changed in place after the note)" bash -c "! cmp -s '$BIN/day0-engine' '$BUILD/day0-engine'"
expect_rc 0 "hosts: a copy newer than the note" timeout 120 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
check "hosts: ... is hashed, found different and replaced" cmp -s "$BIN/day0-engine" "$BUILD/day0-engine"
m1=$(stat -c %y "$BIN/day0-agent" "$BIN/day0-engine")
# A stale remote copy of another version is replaced.
# (renamed into place: an agent may still be running from the old file)
printf '#!/bin/sh\necho day0-agent 0.0.0-old\n' >"$BIN/old.$$"
chmod 755 "$BIN/old.$$"
mv -f "$BIN/old.$$" "$BIN/day0-agent"
check "hosts: (an old agent is in place)" test "$("$BIN/day0-agent" --version)" = "day0-agent 0.0.0-old"
expect_rc 0 "hosts: an older remote agent is replaced" \
	timeout 120 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
check "hosts: ... by the local one" cmp -s "$BIN/day0-agent" "$AGENT"
# Another build of the same version (a sanitizer build, say) is replaced
# too: the bytes decide, not the version string.
cp "$BIN/day0-engine" "$BIN/eng.$$" && printf 'x' >>"$BIN/eng.$$" && mv -f "$BIN/eng.$$" "$BIN/day0-engine"
check "hosts: (a different engine build is in place)" bash -c "! cmp -s '$BIN/day0-engine' '$BUILD/day0-engine'"
expect_rc 0 "hosts: a same-version, different build is replaced" \
	timeout 120 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}"
check "hosts: ... by the local bytes" cmp -s "$BIN/day0-engine" "$BUILD/day0-engine"

# --- --json -------------------------------------------------------------------
expect_rc 0 "hosts --json" timeout 60 "$DAY0" hosts --inventory "$SSHD_INV" "${KH[@]}" --json
check "hosts --json: one document, eight nodes ok with facts" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] == 8 and d["failed"] == 0, d
names = sorted(n["name"] for n in d["nodes"])
assert names == ["node%d" % i for i in range(1, 9)], names
for n in d["nodes"]:
    assert n["ok"] is True and n["facts"]["cores"] >= 1, n
    assert n["hello"]["agent_version"] and n["fingerprint"].startswith("SHA256:"), n
    assert len(n["facts"]["accelerators"]) == 2, n
' "$OUT"

# --- a closed port: refused, the others finish --------------------------------
CLOSED=$(sshd_closed_port)
python3 - "$SSHD_INV" "$CLOSED" >"$T/inv_closed.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["nodes"].append({"name": "dead", "host": "127.0.0.1", "port": int(sys.argv[2])})
print(json.dumps(d))
PY
expect_rc 1 "hosts: a closed port fails the run" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_closed.json" "${KH[@]}"
contains "hosts: the closed port is 'connection refused'" "dead (1): connection refused" "$OUT"
check "hosts: the other nodes still answered" \
	test "$(ok_nodes "$OUT")" = "node1 node2 node3 node4 node5 node6 node7 node8"

# --- a node presenting a different host key -----------------------------------
sshd_other_start || exit 1
MAIN_FP=$(fp "$SSHD_HOST_KEY.pub")
OTHER_FP=$(fp "$SSHD_OTHER_HOST_KEY.pub")
cp "$SSHD_KNOWN_HOSTS" "$T/kh_mismatch"
echo "[127.0.0.200]:$SSHD_OTHER_PORT $(cut -d' ' -f1-2 "$SSHD_HOST_KEY.pub")" >>"$T/kh_mismatch"
sshd_inventory "$T/inv_other.json" "moved 127.0.0.200 $SSHD_OTHER_PORT"
expect_rc 1 "hosts: a changed host key is refused" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_other.json" --known-hosts "$T/kh_mismatch"
contains "hosts: ... as 'host key mismatch'" "moved (1): host key mismatch" "$OUT"
contains "hosts: ... with the key seen" "got $OTHER_FP" "$OUT"
contains "hosts: ... and the key expected" "expected $MAIN_FP" "$OUT"
n_before=$(wc -l <"$T/kh_mismatch")
expect_rc 1 "hosts: --accept-new-host-keys does not accept a changed key" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_other.json" --known-hosts "$T/kh_mismatch" --accept-new-host-keys
contains "hosts: ... still 'host key mismatch'" "host key mismatch" "$OUT"
check "hosts: ... and known_hosts is unchanged" test "$(wc -l <"$T/kh_mismatch")" -eq "$n_before"

# --- an unknown host: refused, then trusted on first use ----------------------
: >"$T/kh_new"
expect_rc 1 "hosts: an unknown host key is refused" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_other.json" --known-hosts "$T/kh_new"
contains "hosts: ... as 'host key unknown' with its fingerprint" "host key unknown: $OTHER_FP" "$OUT"
check "hosts: ... and nothing is written" test ! -s "$T/kh_new"
expect_rc 0 "hosts: --accept-new-host-keys accepts it" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_other.json" --known-hosts "$T/kh_new" --accept-new-host-keys
check "hosts: ... and records it as OpenSSH does ([host]:port)" \
	bash -c "ssh-keygen -F '[127.0.0.200]:$SSHD_OTHER_PORT' -f '$T/kh_new' >/dev/null"
check "hosts: ... OpenSSH accepts the recorded line" \
	ssh -F "$SSHD_SSH_CONFIG" -o UserKnownHostsFile="$T/kh_new" -p "$SSHD_OTHER_PORT" 127.0.0.200 true
expect_rc 0 "hosts: the accepted key is known afterwards" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_other.json" --known-hosts "$T/kh_new"
# The same known_hosts now claims the other key for a main node: a later
# change is refused even with --accept-new-host-keys.
echo "[127.0.0.2]:$SSHD_PORT $(cut -d' ' -f1-2 "$SSHD_OTHER_HOST_KEY.pub")" >>"$T/kh_new"
sshd_inventory "$T/inv_n1.json" "node1 127.0.0.2 $SSHD_PORT"
n_before=$(wc -l <"$T/kh_new")
expect_rc 1 "hosts: a later mismatch is still refused after TOFU" \
	timeout 60 "$DAY0" hosts --inventory "$T/inv_n1.json" --known-hosts "$T/kh_new" --accept-new-host-keys
contains "hosts: ... 'host key mismatch'" "node1 (1): host key mismatch" "$OUT"
check "hosts: ... known_hosts unchanged" test "$(wc -l <"$T/kh_new")" -eq "$n_before"

# --- authentication -----------------------------------------------------------
ssh-keygen -q -t ed25519 -N '' -f "$T/stranger_key"
python3 - "$SSHD_INV" "$T/stranger_key" >"$T/inv_stranger.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["defaults"]["identity"] = sys.argv[2]
print(json.dumps(d))
PY
expect_rc 1 "hosts: an identity the nodes do not accept" \
	env -u SSH_AUTH_SOCK timeout 60 "$DAY0" hosts --inventory "$T/inv_stranger.json" "${KH[@]}"
contains "hosts: ... 'auth failed' naming the key tried, folded" "node[1-8] (8): auth failed for user root; tried $T/stranger_key" "$OUT"
# ssh-agent: the inventory's key is refused, the agent holds the right one.
if command -v ssh-agent >/dev/null && command -v ssh-add >/dev/null; then
	eval "$(ssh-agent -s -a "$T/agent.sock")" >/dev/null
	ssh-add -q "$SSHD_KEY" 2>/dev/null
	expect_rc 0 "hosts: public-key auth through ssh-agent (the file's key refused)" \
		timeout 60 "$DAY0" hosts --inventory "$T/inv_stranger.json" "${KH[@]}"
	check "hosts: ... every node answered" \
		test "$(ok_nodes "$OUT")" = "node1 node2 node3 node4 node5 node6 node7 node8"
	ssh-add -q -D 2>/dev/null
	expect_rc 1 "hosts: an ssh-agent without the key does not help" \
		timeout 60 "$DAY0" hosts --inventory "$T/inv_stranger.json" "${KH[@]}"
	contains "hosts: ... auth failed, naming the agent as tried" "auth failed for user root" "$OUT"
	kill "$SSH_AGENT_PID" 2>/dev/null
	unset SSH_AUTH_SOCK SSH_AGENT_PID
else
	fail "hosts: ssh-agent" "openssh-client's ssh-agent/ssh-add missing"
fi

# --- a local node next to ssh ones --------------------------------------------
python3 - "$SSHD_INV" >"$T/inv_local.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["nodes"].append({"name": "here", "transport": "local"})
print(json.dumps(d))
PY
expect_rc 0 "hosts: local and ssh nodes together" \
	env XDG_STATE_HOME="$T/state" timeout 60 "$DAY0" hosts --inventory "$T/inv_local.json" "${KH[@]}"
contains "hosts: ... the local node answers" "here" "$OUT"
check "hosts: ... the local probe spool is under XDG_STATE_HOME" test -d "$T/state/day0/spool-hosts/here"

# --- usage and inventory errors -----------------------------------------------
echo '{"nodes": [{"name": "n1", "port": "x"}]}' >"$T/bad.json"
expect_rc 2 "hosts: a bad inventory field is a usage error" "$DAY0" hosts --inventory "$T/bad.json"
contains "hosts: ... naming the file" "$T/bad.json" "$ERR"
contains "hosts: ... and the field" "port" "$ERR"
expect_rc 2 "hosts: a missing inventory file" "$DAY0" hosts --inventory "$T/nope.json"
contains "hosts: ... named" "$T/nope.json" "$ERR"
expect_rc 2 "hosts: --inventory is required" "$DAY0" hosts
expect_rc 2 "hosts: --timeout checked" "$DAY0" hosts --inventory "$SSHD_INV" --timeout 0
expect_rc 2 "hosts: unknown option" "$DAY0" hosts --inventory "$SSHD_INV" --bogus
expect_rc 2 "hosts: a missing --agent" "$DAY0" hosts --inventory "$SSHD_INV" --agent "$T/no-agent"
expect_rc 0 "hosts --help" "$DAY0" hosts --help
contains "hosts --help: the options" "--accept-new-host-keys" "$OUT"
