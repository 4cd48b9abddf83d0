# A two-node launch: two loopback "nodes" (127.0.0.2, 127.0.0.3) served by
# a real OpenSSH sshd with throwaway keys; mpirun reaches them over SSH with
# a hostfile built by `day0-engine hostfile`, runs a pipeline across them,
# and validate checks the logits.
. "$(dirname "$0")/../lib.sh"
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null; then
	fail "sshd" "openssh-server/openssh-client missing (make deps installs them)"
	exit 1
fi
PORT=$((20000 + $$ % 20000))
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$T/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$T/client_key"
cp "$T/client_key.pub" "$T/authorized_keys"
chmod 600 "$T/authorized_keys"
cat >"$T/sshd_config" <<CFG
ListenAddress 127.0.0.2
ListenAddress 127.0.0.3
Port $PORT
HostKey $T/host_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile $T/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile $T/sshd.pid
CFG
/usr/sbin/sshd -f "$T/sshd_config" -E "$T/sshd.log"
trap 'kill $(cat "$T/sshd.pid" 2>/dev/null) 2>/dev/null; rm -rf "$T"' EXIT
for i in $(seq 50); do [ -s "$T/sshd.pid" ] && break; sleep 0.1; done
check "sshd listens on the loopback nodes" test -s "$T/sshd.pid"

printf '{"defaults":{"cards":1,"card_mem":"1GiB","port":%d},"nodes":[{"name":"node[2-3]","host":"127.0.0.[2-3]"}]}' "$PORT" >"$T/inv.json"
"$ENGINE" hostfile --inventory "$T/inv.json" >"$T/hosts"
check "the hostfile names both nodes" bash -c "grep -q '127.0.0.2 slots=1' '$T/hosts' && grep -q '127.0.0.3 slots=1' '$T/hosts'"
"$ENGINE" gen-model --arch qwen3 --layers 4 --heads 4 --kv-heads 2 --hidden 64 --vocab 128 "$T/m" >/dev/null
SSH_ARGS="-p $PORT -i $T/client_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
run timeout 120 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	mpirun --hostfile "$T/hosts" -np 2 --display-map --mca plm_rsh_agent ssh \
	--mca plm_rsh_args "$SSH_ARGS" -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
	-x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS \
	"$ENGINE" run "$T/m" --tp 1 --pp 2 --tokens 3,1,4,1,5,9,2,6 --dump-logits "$T/lg.st"
if [ "$RC" -eq 0 ]; then ok "mpirun over ssh to two nodes, pp 2"; else fail "mpirun over ssh" "exit $RC: $(tail -c 400 "$ERR") $(tail -c 300 "$OUT")"; fi
check "Open MPI mapped one rank to each node" bash -c "grep -q 'Data for node: 127.0.0.2' '$OUT' && grep -q 'Data for node: 127.0.0.3' '$OUT'"
expect_rc 0 "the two-node logits match float64" "$ENGINE" validate "$T/m" --tokens 3,1,4,1,5,9,2,6 --logits "$T/lg.st" --levels e2e
