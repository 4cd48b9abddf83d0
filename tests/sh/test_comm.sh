# day0-engine comm under real mpirun: every op at np 2, 3 and 4 with zero
# wrong elements and nccl-tests' columns, a corrupted result caught (#wrong
# rises, exit 1), algbw/busbw relations from the printed figures, --json,
# --events, --pairs, node and cross groups (DAY0_HOSTNAME_FROM_RANK fakes
# the hosts), and bad arguments (exit 2).  Sizes stay small: it runs in
# seconds.
. "$(dirname "$0")/../lib.sh"

if ! command -v mpirun >/dev/null; then
	fail "mpirun" "not installed (make deps installs openmpi-bin)"
	exit 1
fi
# Open MPI leaks at exit by design; with full stacks (slow unwinding: Open
# MPI has no frame pointers) each such leak shows libmpi and
# tests/lsan.supp drops it (tests/run.sh sets the same).  Only the
# sanitizer build reads this.
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$DAY0_ROOT/tests/lsan.supp:fast_unwind_on_malloc=0}"
unset DAY0_HOSTNAME_FROM_RANK DAY0_NODE
JSONL="$BUILD/tests/jsonl_check"
CHECK="$BUILD/tests/comm_check"
ALL_OPS=(allreduce allgather reducescatter alltoall broadcast sendrecv)
SMALL=(--min 8 --max 1M --iters 3 --warmup 1)

mpi() { # NP ARGS...: day0-engine comm under mpirun
	local np=$1
	shift
	mpirun --allow-run-as-root --oversubscribe -np "$np" "$ENGINE" comm "$@"
}

# Rows of the text output: "op size count type redop root t alg bus wrong
# t alg bus wrong", the op taken from the section header above the rows.
rows() {
	awk '/^# [a-z]+: group / { op = substr($2, 1, length($2) - 1); next }
		/^#/ { next }
		NF == 13 { print op, $0 }' "$1"
}

# relations FILE N: every row's algbw = size / time and busbw = algbw x
# the op's factor for N ranks, within the rounding of the printed figures
# (time to 0.01/0.1/1 us by magnitude, bandwidths to 0.01 GB/s); count =
# size / 4; split ops' sizes a multiple of N x 4 B.  Prints the problems.
relations() {
	rows "$1" | awk -v n="$2" '
		function factor(op) {
			if (op == "allreduce") return 2 * (n - 1) / n
			if (op == "allgather" || op == "reducescatter" || op == "alltoall") return (n - 1) / n
			return 1
		}
		function tprec(t) { return t >= 10000 ? 1 : t >= 100 ? 0.1 : 0.01 }
		function chk(op, size, t, alg, bus, what,   hi, lo, p) {
			p = tprec(t) / 2
			hi = (t - p > 0) ? size / ((t - p) * 1e3) + 0.0051 : 1e30
			lo = size / ((t + p) * 1e3) - 0.0051
			if (alg > hi || alg < lo) {
				printf "%s %s %s: algbw %s, size/time gives %.4f..%.4f\n", op, size, what, alg, lo, hi
				bad++
			}
			if (bus - alg * factor(op) > 0.0051 * (1 + factor(op)) || alg * factor(op) - bus > 0.0051 * (1 + factor(op))) {
				printf "%s %s %s: busbw %s != algbw %s x %.4f\n", op, size, what, bus, alg, factor(op)
				bad++
			}
		}
		{
			op = $1; size = $2
			if ($3 * 4 != size) { printf "%s %s: count %s\n", op, size, $3; bad++ }
			if ((op == "allgather" || op == "reducescatter" || op == "alltoall") && size % (4 * n)) {
				printf "%s %s: not %d equal blocks\n", op, size, n; bad++
			}
			chk(op, size, $7, $8, $9, "out-of-place")
			chk(op, size, $11, $12, $13, "in-place")
			nrows++
		}
		END { if (!nrows) { print "no rows"; bad++ } exit bad > 0 }'
}

# --------------------------------------------------------- every op, np 2/4
for np in 2 4; do
	expect_rc 0 "np $np: every op runs" mpi "$np" "${SMALL[@]}"
	cp "$OUT" "$T/text.$np"
	contains "np $np: rank map heading" "# rank map" "$OUT"
	check "np $np: rank map lists every rank with host, card and pid" \
		test "$(grep -cE '^# +[0-9]+ +[^ ]+ +[0-9]+ +[0-9]+ +[0-9]+$' "$OUT")" -eq "$np"
	for op in "${ALL_OPS[@]}"; do
		contains "np $np: $op section" "# $op: group world, 1 group of $np ranks" "$OUT"
	done
	check "np $np: the column headings, once per op" \
		test "$(grep -cE '^# +size +count +type +redop +root +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong$' "$OUT")" -eq 6
	check "np $np: units line, once per op" \
		test "$(grep -cE '^# +\(B\) +\(elements\) +\(us\) +\(GB/s\) +\(GB/s\) +\(us\) +\(GB/s\) +\(GB/s\)$' "$OUT")" -eq 6
	check "np $np: out-of-place / in-place heading" \
		test "$(grep -cE '^# +out-of-place +in-place$' "$OUT")" -eq 6
	rows "$OUT" >"$T/rows.$np"
	# 8 B .. 1 MiB is 18 sizes; split ops lose those below N elements.
	for op in allreduce broadcast sendrecv; do
		check "np $np: $op has 18 sizes" test "$(grep -c "^$op " "$T/rows.$np")" -eq 18
	done
	want=$((np == 2 ? 18 : 17))
	for op in allgather reducescatter alltoall; do
		check "np $np: $op has $want sizes (each rank gets >= 1 element)" \
			test "$(grep -c "^$op " "$T/rows.$np")" -eq "$want"
	done
	check "np $np: every row has 0 wrong, out-of-place and in-place" \
		awk '$10 != 0 || $14 != 0 { exit 1 }' "$T/rows.$np"
	check "np $np: redop sum for reductions, none otherwise" \
		awk '($1 ~ /allreduce|reducescatter/) != ($5 == "sum") { exit 1 } $5 != "sum" && $5 != "none" { exit 1 }' "$T/rows.$np"
	check "np $np: root 0 for broadcast, -1 otherwise" \
		awk '($1 == "broadcast") != ($6 == 0) { exit 1 } $6 != 0 && $6 != -1 { exit 1 }' "$T/rows.$np"
	check "np $np: type float" awk '$4 != "float" { exit 1 }' "$T/rows.$np"
	check "np $np: times and bandwidths positive" \
		awk '$7 <= 0 || $11 <= 0 || $8 < 0 || $9 < 0 { exit 1 }' "$T/rows.$np"
	check "np $np: footer 'Out of bounds values : 0 OK' per op" \
		test "$(grep -c '^# Out of bounds values : 0 OK$' "$OUT")" -eq 6
	check "np $np: footer 'Avg bus bandwidth' per op" \
		test "$(grep -cE '^# Avg bus bandwidth    : [0-9.e+-]+$' "$OUT")" -eq 6
	contains "np $np: ends OK" "# OK: 0 wrong elements" "$OUT"
	if relations "$T/text.$np" "$np" >"$T/rel.$np"; then
		ok "np $np: algbw = size/time and busbw = algbw x factor for every op (printed figures)"
	else
		fail "np $np: algbw/busbw relations" "$(head -5 "$T/rel.$np")"
	fi
done

# Odd rank counts: split ops round sizes down to N equal blocks.
expect_rc 0 "np 3: every op, f64" mpi 3 --min 8 --max 64K --iters 2 --warmup 0 --dtype f64 --json
cp "$OUT" "$T/np3.json"
check "np 3 f64: --json rows hold every relation, 0 wrong" "$CHECK" "$T/np3.json" 0
expect_rc 0 "np 3: every op, i32, text" mpi 3 --min 8 --max 64K --iters 2 --warmup 0 --dtype i32
check "np 3 i32: every row 0 wrong" bash -c "[ -n \"\$(awk '!/^#/ && NF == 13' '$OUT')\" ] && awk '!/^#/ && NF == 13 && (\$9 != 0 || \$13 != 0) { exit 1 }' '$OUT'"
check "np 3 i32: type int32" grep -qE '^ +12 +3 +int32 ' "$OUT"
check "np 3 i32: allgather sizes are multiples of 3 elements" \
	bash -c "awk '/^# allgather:/ { s = 1; next } /^# [a-z]+:/ { s = 0 } s && !/^#/ && NF == 13 && \$1 % 12 { exit 1 }' '$OUT'"

# --------------------------------------------------------- corrupted results
expect_rc 1 "--corrupt 1: a corrupted result exits 1" mpi 4 --corrupt 1 --min 1K --max 16K --iters 2 --ops allreduce,alltoall,broadcast
rows "$OUT" >"$T/rows.bad"
check "--corrupt: #wrong is 1 in every out-of-place and in-place column" \
	awk '$10 != 1 || $14 != 1 { exit 1 } END { exit NR != 15 }' "$T/rows.bad"
check "--corrupt: footer says FAILED per op" test "$(grep -c '^# Out of bounds values : 10 FAILED$' "$OUT")" -eq 3
contains "--corrupt: ends FAILED with the count" "# FAILED: 30 wrong elements" "$OUT"
contains "--corrupt: stderr names the op, size, mode and rank" \
	"day0-engine comm: allreduce 1024 B out-of-place: 1 wrong element on rank 1 (" "$ERR"
check "--corrupt: no other rank is blamed" bash -c "! grep -q 'on rank [023] ' '$ERR'"
expect_rc 1 "--corrupt 0 with --json" mpi 2 --min 1K --max 4K --iters 1 --json --corrupt 0 --ops reducescatter,sendrecv,allgather
check "--corrupt --json: every result has 1 wrong" "$CHECK" "$OUT" 1
contains "--corrupt --json: ok false" '"ok": false' "$OUT"
expect_rc 1 "--corrupt with --events" mpi 2 --min 1K --max 2K --iters 1 --events --corrupt 1 --ops allreduce
cp "$OUT" "$T/bad.jsonl"
check "--corrupt --events: comm events count wrong results, check fails, stage rc 1" "$JSONL" "$T/bad.jsonl" \
	"type=comm,op=allreduce,bytes=1024,wrong=2" "type=check,item=comm.bandwidth,status=fail" \
	"type=stage,stage=comm,state=end,rc=1" "type=log,level=error"

# ------------------------------------------------------------------ --json
expect_rc 0 "--json, np 4, every op" mpi 4 --min 64 --max 256K --iters 2 --warmup 1 --json
cp "$OUT" "$T/np4.json"
check "--json: relations, totals and rank map hold" "$CHECK" "$T/np4.json" 0
for key in '"ranks": 4' '"group": "world"' '"dtype": "f32"' '"type": "float"' '"rank_map"' \
	'"out_of_place"' '"in_place"' '"busbw"' '"algbw"' '"time_us"' '"avg_busbw"' '"ok": true'; do
	contains "--json has $key" "$key" "$T/np4.json"
done
check "--json: six ops" test "$(grep -c '"op": ' "$T/np4.json")" -eq 6
check "--json: no text mixed in" bash -c "! grep -q '^#' '$T/np4.json'"

# ---------------------------------------------------------------- --events
expect_rc 0 "--events, np 4" mpi 4 --min 1K --max 64K --iters 2 --warmup 0 --events --expect-gbps 0.000001
cp "$OUT" "$T/ev.jsonl"
check "--events: envelope, one comm event per op and size" "$JSONL" "$T/ev.jsonl" \
	"type=stage,stage=comm,state=start" "type=check,item=comm.groups,status=pass" \
	"type=comm,op=allreduce,bytes=1024,ranks=4,wrong=0,group=world" \
	"type=comm,op=allgather,bytes=65536,ranks=4,wrong=0,group=world,dtype=f32" \
	"type=comm,op=reducescatter,ranks=4,wrong=0" "type=comm,op=alltoall,ranks=4,wrong=0" \
	"type=comm,op=broadcast,ranks=4,wrong=0" "type=comm,op=sendrecv,ranks=4,wrong=0" \
	"type=check,item=comm.bandwidth,status=pass" "type=stage,stage=comm,state=end,rc=0"
check "--events: 7 sizes x 6 ops = 42 comm events" test "$(grep -c '"type":"comm"' "$T/ev.jsonl")" -eq 42
check "--events: comm events carry time_us, algbw, busbw" \
	bash -c "grep '\"type\":\"comm\"' '$T/ev.jsonl' | grep '\"time_us\":' | grep '\"algbw\":' | grep -c '\"busbw\":' | grep -qx 42"
check "--events: only JSON lines" bash -c "! grep -v '^{' '$T/ev.jsonl'"
expect_rc 0 "--events with an unreachable --expect-gbps" mpi 2 --min 1K --max 4K --iters 1 --events --ops allreduce --expect-gbps 1000000
check "--events: comm.bandwidth warns below the fraction (exit stays 0)" "$JSONL" "$OUT" \
	"type=check,item=comm.bandwidth,status=warn"
expect_rc 0 "--events without --expect-gbps" mpi 2 --min 1K --max 4K --iters 1 --events --ops broadcast
check "--events: comm.bandwidth skipped without a link bandwidth" "$JSONL" "$OUT" \
	"type=check,item=comm.bandwidth,status=skip" "type=comm,op=broadcast,ranks=2,wrong=0"
expect_rc 0 "text with --expect-gbps" mpi 2 --min 1K --max 4K --iters 1 --ops allreduce --expect-gbps 1000000 --expect-fraction 0.5
contains "text: comm.bandwidth line names the op and the fraction" "# comm.bandwidth: warn: lowest: allreduce busbw" "$OUT"
contains "text: comm.bandwidth line states what it needs, of which link" "needs 500000 GB/s (0.50 of the 1e+06 GB/s link)" "$OUT"

# ----------------------------------------------------------------- --pairs
expect_rc 0 "--pairs, np 4" mpi 4 --pairs --pairs-size 64K --iters 2 --warmup 1
contains "--pairs: matrix heading" "# send/recv bandwidth of every ordered pair (GB/s), 65536 B x 2 iters" "$OUT"
check "--pairs: a 4 x 4 matrix with an empty diagonal" \
	bash -c "awk '!/^#/ && NF == 5 { n++; if (\$(\$1 + 2) != \"-\") bad = 1; for (i = 2; i <= 5; i++) if (i != \$1 + 2 && \$i <= 0) bad = 1 } END { exit bad || n != 4 }' '$OUT'"
contains "--pairs: slowest pairs named" "# slowest pairs (median" "$OUT"
check "--pairs: three slowest named with host and card" \
	test "$(grep -cE '^#   [0-3] -> [0-3]  \([^ ]+ card [0-9] -> [^ ]+ card [0-9]\)  [0-9.]+ GB/s' "$OUT")" -eq 3
check "--pairs alone runs no op sweep" bash -c "! grep -q '# allreduce:' '$OUT'"
contains "--pairs: data checked" "# Out of bounds values : 0 OK" "$OUT"
expect_rc 0 "--pairs --json with one op" mpi 3 --pairs --pairs-size 16K --ops sendrecv --max 16K --min 16K --iters 2 --json
check "--pairs --json: 3 x 3 matrix, slowest consistent" "$CHECK" "$OUT" 0
contains "--pairs --json has the slowest list" '"slowest"' "$OUT"
expect_rc 1 "--pairs --corrupt: a wrong pair message fails" mpi 2 --pairs --pairs-size 4K --iters 1 --corrupt 1
contains "--pairs --corrupt: counted" "# Out of bounds values : 1 FAILED" "$OUT"
contains "--pairs --corrupt: the pair is named" "day0-engine comm: pair 0 -> 1 (" "$ERR"

# ------------------------------------------------------------------ groups
export DAY0_HOSTNAME_FROM_RANK=2
expect_rc 0 "--group node with 2 fake hosts of 2 ranks" mpi 4 --group node --min 1K --max 16K --iters 2 --ops allreduce,allgather
check "rank map: host0 cards 0,1 then host1 cards 0,1, groups 0 0 1 1" \
	bash -c "grep -E '^# +[0-9]+ +host' '$OUT' | awk '{ s = s \$3 \$4 \$6 \" \" } END { exit s != \"host000 host010 host101 host111 \" }'"
contains "--group node: 2 groups of 2 ranks" "# allreduce: group node, 2 groups of 2 ranks" "$OUT"
contains "--group node: heading" "4 ranks on 2 hosts, group node (2 groups of 2)" "$OUT"
if relations "$OUT" 2 >"$T/rel.node"; then
	ok "--group node: busbw uses the group's rank count (2)"
else
	fail "--group node: relations with n=2" "$(head -3 "$T/rel.node")"
fi
check "--group node: every row 0 wrong" bash -c "awk '!/^#/ && NF == 13 && (\$9 != 0 || \$13 != 0) { exit 1 }' '$OUT'"
expect_rc 0 "--group cross --events" mpi 4 --group cross --min 1K --max 4K --iters 1 --ops allreduce,sendrecv --events
check "--group cross: events name the group and its 2 ranks" "$JSONL" "$OUT" \
	"type=comm,op=allreduce,ranks=2,group=cross,wrong=0" "type=comm,op=sendrecv,ranks=2,group=cross,wrong=0" \
	"type=check,item=comm.groups,status=pass,value=2"
expect_rc 0 "--group cross --json" mpi 4 --group cross --min 1K --max 4K --iters 1 --ops alltoall --json
check "--group cross: one rank per host in each group" bash -c "tr -d ' \n' <'$OUT' | grep -qF '\"group_members\":[[0,2],[1,3]]'"
check "--group cross --json: relations hold for n=2" "$CHECK" "$OUT" 0
DAY0_HOSTNAME_FROM_RANK=1 expect_rc 0 "--group cross with one rank per host: one group of 4" mpi 4 --group cross --min 1K --max 4K --iters 1 --ops allreduce
contains "one rank per host: cross is the world" "group cross (1 group of 4)" "$OUT"
DAY0_HOSTNAME_FROM_RANK=3 expect_rc 2 "--group node with uneven hosts" mpi 4 --group node --max 4K
contains "uneven hosts: says which" "--group node needs the same number of ranks on every host: host0 has 3, host1 has 1" "$ERR"
DAY0_HOSTNAME_FROM_RANK=zero expect_rc 2 "a bad DAY0_HOSTNAME_FROM_RANK" mpi 2 --max 4K
contains "names the variable" "DAY0_HOSTNAME_FROM_RANK: expected ranks per host" "$ERR"
unset DAY0_HOSTNAME_FROM_RANK
expect_rc 0 "--group node on one real host: one group of all ranks" mpi 2 --group node --min 1K --max 4K --iters 1 --ops allreduce
contains "one host: node is the world" "group node (1 group of 2)" "$OUT"

# ------------------------------------------------------------ bad arguments
# Argument errors are found before MPI starts: under mpirun only the rank
# numbered 0 prints them; a lone process the same.
bad_arg() { # NAME MESSAGE ARGS...
	local name=$1 msg=$2
	shift 2
	expect_rc 2 "$name" "$ENGINE" comm "$@"
	contains "$name: says so" "$msg" "$ERR"
}
bad_mpi() { # NAME MESSAGE ARGS...: the same under mpirun -np 2
	local name=$1 msg=$2
	shift 2
	expect_rc 2 "$name (mpirun)" mpi 2 "$@"
	contains "$name: says so" "$msg" "$ERR"
	check "$name: printed once" test "$(grep -cF -- "$msg" "$ERR")" -eq 1
}
bad_mpi "unknown op" "--ops: unknown op 'allscatter'" --ops allreduce,allscatter
bad_arg "size not a multiple of the element size" "--min: 6 B is not a multiple of the f32 element size (4 B)" --min 6
bad_arg "--max not a multiple of f64" "--max: 1020 B is not a multiple of the f64 element size (8 B)" --max 1020 --dtype f64
bad_mpi "more ranks than the op allows" "alltoall: 2 ranks per group need at least 8 B per size" --ops alltoall --min 4 --max 4
bad_arg "unknown dtype" "--dtype: expected f32, f64 or i32, got 'bf16'" --dtype bf16
bad_arg "unknown group" "--group: expected world, node or cross, got 'rack'" --group rack
bad_arg "--min above --max" "--min (1048576 B) is larger than --max (1024 B)" --min 1M --max 1K
bad_arg "a bad size" "--max: expected a size > 0 such as 256M, got 'lots'" --max lots
bad_arg "--factor 1" "--factor: expected an integer >= 2, got '1'" --factor 1
bad_arg "--iters 0" "--iters: expected an integer 1..1000000, got '0'" --iters 0
bad_mpi "--corrupt past the world" "--corrupt: rank 5, but the world has 2 ranks" --corrupt 5
bad_arg "--expect-gbps 0" "--expect-gbps: expected a link bandwidth in GB/s > 0, got '0'" --expect-gbps 0
bad_arg "an unknown option" "unknown or incomplete option '--frob'" --frob
bad_arg "a stray argument" "unexpected argument 'now'" now
bad_arg "counts beyond MPI's int" "MPI counts stop at 2147483647" --max 16G
expect_rc 2 "--pairs with one rank" "$ENGINE" comm --pairs --max 4K
contains "--pairs needs 2 ranks: says so" "--pairs needs at least 2 ranks" "$ERR"

# ----------------------------------------------------- without mpirun, help
expect_rc 0 "comm --help" "$ENGINE" comm --help
contains "comm --help shows usage" "usage: day0-engine comm" "$OUT"
expect_rc 0 "day0-engine --help lists comm" "$ENGINE" --help
contains "--help lists comm" "comm" "$OUT"
expect_rc 0 "a lone process is a world of one" "$ENGINE" comm --min 1K --max 4K --iters 1 --ops allreduce,sendrecv
contains "world of one: 1 rank" "# day0 comm: 1 rank on 1 host" "$OUT"
contains "world of one: 0 wrong" "# OK: 0 wrong elements" "$OUT"
