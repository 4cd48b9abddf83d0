# Loopback "nodes" served by a real OpenSSH sshd, for tests and benches.
# Source it after tests/lib.sh (which sets $T, the test's scratch dir):
#
#   . "$(dirname "$0")/../lib.sh"
#   . "$(dirname "$0")/sshd_nodes.sh"
#   sshd_nodes_start 8 || exit 1
#   "$BUILD/day0" hosts --inventory "$SSHD_INV" --known-hosts "$SSHD_KNOWN_HOSTS"
#
# sshd_nodes_start N      sshd listening on 127.0.0.2 .. 127.0.0.(N+1), all
#                         on $SSHD_PORT (one sshd per 16 addresses: OpenSSH's
#                         MAX_LISTEN_SOCKS); returns 1 (after a FAIL line)
#                         when sshd is missing or does not start.
# sshd_other_start        a second sshd on 127.0.0.200:$SSHD_OTHER_PORT with a
#                         different host key (the "reinstalled node"); its
#                         address is not in $SSHD_KNOWN_HOSTS under that port.
# sshd_closed_port        prints a port on 127.0.0.1 nothing listens on.
# sshd_inventory FILE SPEC...   writes an inventory of extra node entries:
#                         each SPEC "NAME HOST PORT" (identity, user, cards
#                         as the main inventory).
#
# Variables set:
#   SSHD_N            number of nodes
#   SSHD_PORT         the port every node listens on
#   SSHD_HOSTS        "127.0.0.2 127.0.0.3 ..." (space separated)
#   SSHD_KEY          client identity (private key; $SSHD_KEY.pub beside it)
#   SSHD_HOST_KEY     the nodes' ed25519 host key (.pub beside it)
#   SSHD_KNOWN_HOSTS  known_hosts with "[127.0.0.X]:PORT KEY" for every node
#   SSHD_INV          inventory: nodes node[1-N] on hosts 127.0.0.[2-(N+1)],
#                     port, user root, identity $SSHD_KEY, cards 2,
#                     card_mem 1GiB
#   SSHD_SSH_CONFIG   an ssh_config (ssh -F) with the port, identity and
#                     known_hosts: `ssh -F "$SSHD_SSH_CONFIG" 127.0.0.2 true`
#   SSHD_OTHER_PORT / SSHD_OTHER_HOST_KEY   after sshd_other_start
#
# SSHD_USER (set before sshd_nodes_start; default root): the account the
# nodes log in as, in the inventory and the ssh_config.  Another account
# must exist (sshd_plain_user NAME makes one); the key files are then made
# readable to it.
# SSHD_EXTRA_CONFIG (set before sshd_nodes_start): lines appended to every
# node sshd's config, e.g. a "Match LocalAddress 127.0.0.4" block with a
# SetEnv that gives one node an environment of its own (test_compat.sh).
# SSHD_NICE (default 0): the sshds run at this niceness, and with them
# everything the nodes run (sessions, shells, agents, engines).  Benches
# set it so the node side, which on a cluster runs on other machines,
# yields the CPU to the console whose figures they measure.
#
# Every node is this machine as root: they share /root and so
# ~/.cache/day0.  The EXIT trap stops the sshd processes and removes $T.

SSHD_PIDFILES=""
SSHD_CGROUP=""

sshd_nodes_cleanup() {
	local f
	# the listeners stopped first (no new session), then their sessions
	# as listed before (a killed test's console may still hold them, an
	# agent each; an agent with stages running ends once they end): a
	# listener stopped alone leaves its sessions behind
	local pids="" kids=""
	for f in $SSHD_PIDFILES; do
		[ -s "$f" ] && pids="$pids $(cat "$f")"
	done
	for f in $pids; do
		kill -STOP "$f" 2>/dev/null
		kids="$kids $(pgrep -P "$f" | tr '\n' ' ')"
		kill "$f" 2>/dev/null
		kill -CONT "$f" 2>/dev/null
	done
	# shellcheck disable=SC2086
	[ -n "${kids// /}" ] && kill -KILL $kids 2>/dev/null
	if [ -n "$SSHD_CGROUP" ]; then
		# its tasks end with their sshd; then the group can go
		for _ in $(seq 50); do
			rmdir "$SSHD_CGROUP" 2>/dev/null && break
			sleep 0.1
		done
	fi
	rm -rf "$T"
}

# sshd_nodes_isolate: move the node sshds (and so every session, shell,
# agent and engine they start) into a CPU cgroup of the lowest weight, so
# that on this one machine the node side yields the CPU to the console as
# it would if the nodes were other machines.  (Nice values do not do it:
# sshd starts every session with setsid, and with autogroup scheduling
# each session is then a group of its own, weighted like the console.)
# Prints what it did; returns 1 (doing nothing) without root or a cgroup
# cpu controller.
sshd_nodes_isolate() {
	local base="" f pid
	if [ "$(id -u)" != 0 ]; then
		echo "not isolated (needs root)"
		return 1
	fi
	if [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then
		base=/sys/fs/cgroup/cpu # cgroup v1
	elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		base=/sys/fs/cgroup # v2
	else
		echo "not isolated (no cgroup cpu controller)"
		return 1
	fi
	SSHD_CGROUP=$base/day0-nodes-$$
	mkdir -p "$SSHD_CGROUP" || { SSHD_CGROUP=""; echo "not isolated (mkdir failed)"; return 1; }
	if [ -f "$SSHD_CGROUP/cpu.shares" ]; then
		echo 2 >"$SSHD_CGROUP/cpu.shares"
	else
		echo 1 >"$SSHD_CGROUP/cpu.weight"
	fi
	for f in $SSHD_PIDFILES; do
		pid=$(cat "$f" 2>/dev/null) || continue
		echo "$pid" >"$SSHD_CGROUP/cgroup.procs" || { echo "not isolated (cannot move sshd $pid)"; return 1; }
	done
	echo "isolated: the node sshds in ${SSHD_CGROUP#/sys/fs/cgroup/} at the lowest CPU weight"
}
trap sshd_nodes_cleanup EXIT

# A free TCP port on 127.0.0.1 (bind test, then released).
sshd_free_port() {
	python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

sshd_closed_port() {
	sshd_free_port
}

# _sshd_run NAME HOSTKEY PORT ADDR... : start one sshd, wait for its pid file.
_sshd_run() {
	local name=$1 hostkey=$2 port=$3 a
	shift 3
	{
		for a in "$@"; do echo "ListenAddress $a"; done
		cat <<CFG
Port $port
HostKey $hostkey
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile $T/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
MaxStartups 200:30:400
MaxSessions 64
PidFile $T/$name.pid
CFG
		# last: Match blocks run to the end of the file
		[ -z "${SSHD_EXTRA_CONFIG:-}" ] || printf '%s\n' "$SSHD_EXTRA_CONFIG"
	} >"$T/$name.config"
	rm -f "$T/$name.pid"
	nice -n "${SSHD_NICE:-0}" /usr/sbin/sshd -f "$T/$name.config" -E "$T/$name.log" || return 1
	SSHD_PIDFILES="$SSHD_PIDFILES $T/$name.pid"
	for _ in $(seq 100); do
		[ -s "$T/$name.pid" ] && return 0
		sleep 0.05
	done
	return 1
}

# All node addresses on $SSHD_PORT, 16 to an sshd.
_sshd_run_all() {
	local chunk=() k=0 a
	for a in $SSHD_HOSTS; do
		chunk+=("$a")
		if [ "${#chunk[@]}" -eq 16 ]; then
			_sshd_run "sshd$k" "$SSHD_HOST_KEY" "$SSHD_PORT" "${chunk[@]}" || return 1
			chunk=()
			k=$((k + 1))
		fi
	done
	[ "${#chunk[@]}" -eq 0 ] || _sshd_run "sshd$k" "$SSHD_HOST_KEY" "$SSHD_PORT" "${chunk[@]}"
}

# Stop the node sshds (not the other one).
sshd_nodes_stop() {
	local f
	for f in "$T"/sshd[0-9]*.pid; do
		[ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
		rm -f "$f"
	done
}

# sshd_plain_user NAME: an account with /bin/sh as its shell, made when
# missing.  Root's login shell here runs ~/.bashrc (pyenv init: ~0.17 s of
# CPU) for every ssh command, more than the tools measured cost; a plain
# account's shell costs ~1 ms, as a cluster's service account does.
sshd_plain_user() {
	id "$1" >/dev/null 2>&1 && return 0
	# '*': no password, yet not locked (sshd refuses a locked account's
	# key login when it runs without PAM, as the test nodes do)
	useradd -m -s /bin/sh -p '*' "$1" || {
		fail "sshd" "useradd $1 failed"
		return 1
	}
}

sshd_nodes_start() {
	local n=$1 i try hosts="" json_hosts
	if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null; then
		fail "sshd" "openssh-server/openssh-client missing (make deps installs them)"
		return 1
	fi
	mkdir -p /run/sshd
	SSHD_N=$n
	SSHD_KEY="$T/client_key"
	SSHD_HOST_KEY="$T/host_key"
	[ -f "$SSHD_HOST_KEY" ] || ssh-keygen -q -t ed25519 -N '' -f "$SSHD_HOST_KEY"
	[ -f "$SSHD_KEY" ] || ssh-keygen -q -t ed25519 -N '' -f "$SSHD_KEY"
	cp "$SSHD_KEY.pub" "$T/authorized_keys"
	chmod 600 "$T/authorized_keys"
	SSHD_USER=${SSHD_USER:-root}
	if [ "$SSHD_USER" != root ]; then
		# sshd reads authorized_keys as the user logging in
		chmod 711 "$T"
		chmod 644 "$T/authorized_keys"
	fi
	for i in $(seq 2 $((n + 1))); do hosts="$hosts 127.0.0.$i"; done
	SSHD_HOSTS=${hosts# }
	# One port for all nodes, as a cluster has; another when it is busy.
	SSHD_PORT=$((20000 + $$ % 20000))
	for try in 1 2 3 4 5; do
		_sshd_run_all && break
		grep -q "Address already in use" "$T"/sshd*.log 2>/dev/null || {
			fail "sshd" "did not start: $(tail -c 400 "$T"/sshd*.log 2>/dev/null)"
			return 1
		}
		sshd_nodes_stop
		[ "$try" = 5 ] && { fail "sshd" "no free port"; return 1; }
		SSHD_PORT=$(sshd_free_port)
	done
	SSHD_KNOWN_HOSTS="$T/known_hosts"
	: >"$SSHD_KNOWN_HOSTS"
	for i in $SSHD_HOSTS; do
		echo "[$i]:$SSHD_PORT $(cut -d' ' -f1-2 "$SSHD_HOST_KEY.pub")" >>"$SSHD_KNOWN_HOSTS"
	done
	SSHD_INV="$T/inv.json"
	cat >"$SSHD_INV" <<JSON
{"name": "loopback",
 "defaults": {"user": "$SSHD_USER", "port": $SSHD_PORT, "identity": "$SSHD_KEY",
              "cards": 2, "card_mem": "1GiB"},
 "nodes": [{"name": "node[1-$n]", "host": "127.0.0.[2-$((n + 1))]"}]}
JSON
	SSHD_SSH_CONFIG="$T/ssh_config"
	cat >"$SSHD_SSH_CONFIG" <<CFG
Host *
  Port $SSHD_PORT
  User $SSHD_USER
  IdentityFile $SSHD_KEY
  IdentitiesOnly yes
  UserKnownHostsFile $SSHD_KNOWN_HOSTS
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
CFG
	export SSHD_N SSHD_USER SSHD_PORT SSHD_HOSTS SSHD_KEY SSHD_HOST_KEY \
		SSHD_KNOWN_HOSTS SSHD_INV SSHD_SSH_CONFIG
	return 0
}

# A second sshd with its own host key, the same client key accepted.
sshd_other_start() {
	SSHD_OTHER_HOST_KEY="$T/other_host_key"
	[ -f "$SSHD_OTHER_HOST_KEY" ] || ssh-keygen -q -t ed25519 -N '' -f "$SSHD_OTHER_HOST_KEY"
	SSHD_OTHER_PORT=$(sshd_free_port)
	_sshd_run sshd_other "$SSHD_OTHER_HOST_KEY" "$SSHD_OTHER_PORT" 127.0.0.200 || {
		fail "sshd (other)" "did not start: $(tail -c 400 "$T/sshd_other.log" 2>/dev/null)"
		return 1
	}
	export SSHD_OTHER_PORT SSHD_OTHER_HOST_KEY
}

# sshd_inventory FILE "NAME HOST PORT"...
sshd_inventory() {
	local file=$1 spec name host port sep=""
	shift
	{
		printf '{"name": "custom", "defaults": {"user": "root", "identity": "%s", "cards": 2, "card_mem": "1GiB"}, "nodes": [' "$SSHD_KEY"
		for spec in "$@"; do
			read -r name host port <<<"$spec"
			printf '%s{"name": "%s", "host": "%s", "port": %d}' "$sep" "$name" "$host" "$port"
			sep=", "
		done
		printf ']}\n'
	} >"$file"
}
