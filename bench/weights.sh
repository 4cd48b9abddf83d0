#!/usr/bin/env bash
# Weights benchmark: day0-engine verify and convert against the tools an
# operator would otherwise use, measured in the same run on the same files.
#
#   make bench                 (builds first)
#   BUILD=build bash bench/weights.sh
#
# Generates a ~2 GB f32 llama checkpoint in 4 shards under /tmp, warms the
# page cache, then measures (each REPS times, default 3; the best time
# gives the ratio, the median is shown beside it):
#   hashing   sha256sum over the 4 shards (one process, sequential)
#             vs day0-engine verify --threads 1 and --threads 2;
#   convert   day0-engine convert --dtype bf16 --tp 4 vs cp -r of the 4
#             shards into a fresh directory on the same filesystem;
#   memory    peak RSS (GNU time -v) of verify and convert against
#             "largest tensor + 64 MiB";
#   the write floor: dd writing as many bytes as each convert mode's
#             output, in the same rounds (after the same warm-up), and
#             each convert's time against it (target >= 0.85: a convert
#             cannot write its output faster than this disk takes it).
#   read || write (reference only): cat of the source beside dd of the
#             output's bytes, both at once: what a convert that reads more
#             than it writes must move (f32 -> bf16 reads 2 bytes a byte).
# Throughput is MB/s (10^6 bytes) of source shard bytes, the same byte count
# for both sides.  It is a benchmark: missed targets are reported, not
# failed; the exit status is non-zero only when a command fails.
#
# FP8 (docs/formats.md), after the f32 model is deleted: a ~2.1 GB FP8
# checkpoint (llama, e4m3 weights with 128x128 float32 block scales, bf16
# embeddings and norms) measured the same way:
#   hashing   openssl dgst -sha256 vs day0-engine verify --threads 1 / 2
#             (verify also checks every FP8 byte for NaN codes and every
#             scale on the way);
#   convert   --dtype keep --tp 4 (FP8 slices with their scale blocks) and
#             --dtype bf16 --tp 4 (dequantised) vs cp -r, and each against
#             the write floor of its output's bytes;
#   memory    peak RSS against the largest tensor + 64 MiB.
#
# Environment: BUILD (build dir, default build), REPS (default 3),
# WARMUP=0 to skip the warm-up run (not in the ratio) before each cp and
# convert run, PLAIN=0 to skip the f32 part, FP8=0 to skip the FP8 part,
# BASE=PATH/day0-engine (an older build) to time its converts (and its FP8
# verifies) too, in the same rounds right after the current build's (an A/B
# on the same floor; a script that runs the build with DAY0_READ=map is the
# read paths' A/B).  DAY0_READ=map|read forces verify and convert's way of
# reading (default: measured; the header's "read:" line says which).  Each FP8 round prints the load average at its start;
# each FP8 figure lists its runs' wall times and CPU seconds (user + system).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REPS=${REPS:-3}
ENGINE=$PWD/$BUILD/day0-engine
case $BUILD in /*) ENGINE=$BUILD/day0-engine ;; esac
BASE=${BASE:-}
GNU_TIME=/usr/bin/time

die() {
	echo "bench: $*" >&2
	exit 1
}

[ -x "$ENGINE" ] || die "$ENGINE not found (run make build)"
[ -z "$BASE" ] || [ -x "$BASE" ] || die "BASE: $BASE is not an executable"
[ -x "$GNU_TIME" ] || die "$GNU_TIME not found (GNU time; make deps installs it)"
command -v sha256sum >/dev/null || die "sha256sum not found"
case $REPS in '' | *[!0-9]* | 0) die "REPS: expected an integer >= 1, got '$REPS'" ;; esac

# Model: llama, 9 layers, hidden 2048 (16 heads x 128), ffn 5632, vocab 8192
# -> 84 tensors, 1.98 GB in f32; largest tensors are embed_tokens and
# lm_head at 8192 x 2048 x 4 B = 64 MiB, the MLP weights 44 MiB.
ARCH=(--arch llama --layers 9 --hidden 2048 --heads 16 --kv-heads 16
	--ffn 5632 --vocab 8192)
TP=4
THREADS_N=$(nproc 2>/dev/null || echo 2)

avail_kb=$(df -Pk /tmp | awk 'NR == 2 { print $4 }')
[ "${avail_kb:-0}" -ge $((6 * 1024 * 1024)) ] ||
	die "/tmp needs ~6 GB free (model, cp copy, converted copy); has $((avail_kb / 1024)) MiB"

TMP=$(mktemp -d /tmp/day0-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
MODEL=$TMP/model
LOG=$TMP/commands.log

now() { date +%s.%N; }
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", a - b }'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0 ? b / s / 1e6 : 0) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
declare -A OUT # convert mode -> its output's bytes (the write floor's size)
out_bytes() { find "$TMP/out" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }'; }

# Result store: per key, the list of times and the max RSS (KiB).
declare -A TIMES RSS CPU
best() { tr ' ' '\n' <<<"${TIMES[$1]}" | grep . | sort -g | head -1; }
median() {
	tr ' ' '\n' <<<"${TIMES[$1]}" | grep . | sort -g |
		awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

runs_of() { # KEY: " t1 t2 ..." in run order
	local runs
	read -ra runs <<<"${TIMES[$1]}"
	printf ' %.2f' "${runs[@]}"
}

# The guest's free page reporting (virtio-balloon): freed pages are
# handed to the host, and the next write into them faults them back in, on
# the Zen 5 PVM guests at several times the cost of a warm page (a 4.5 GB
# dd 0.57 s right after a free, 1.8 s a second later with 640 MiB
# reported meanwhile, 2.7 s after two).  REPORTED: the kernel's running
# count (KiB), where it has one; each FP8 run lists how much the host took
# back from the end of the previous run to the end of this one.
REPORTED=/sys/module/page_reporting/parameters/reported_kib
declare -A BACK # key -> " MiB MiB ..." taken back around each run
reported_kib() { if [ -r "$REPORTED" ]; then cat "$REPORTED"; else echo 0; fi; }
LAST_REPORTED=$(reported_kib)

# timed KEY CMD...: run CMD once under GNU time -v, record wall time and RSS.
timed() {
	local key=$1 t0 t1 rss rc=0 rk
	shift
	t0=$(now)
	"$GNU_TIME" -v -o "$TMP/time.out" "$@" >"$TMP/cmd.out" 2>&1 || rc=$?
	t1=$(now)
	if [ "$rc" -ne 0 ]; then
		echo "bench: command failed (exit $rc): $*" >&2
		tail -n 20 "$TMP/cmd.out" >&2
		exit 1
	fi
	TIMES[$key]="${TIMES[$key]:-} $(fsub "$t1" "$t0")"
	rk=$(reported_kib)
	BACK[$key]="${BACK[$key]:-} $(((rk - LAST_REPORTED) / 1024))"
	LAST_REPORTED=$rk
	# CPU seconds of the run (user + system, all its threads)
	CPU[$key]="${CPU[$key]:-} $(awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$TMP/time.out")"
	rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$TMP/time.out")
	[ -n "$rss" ] || die "no RSS in GNU time output for: $*"
	if [ -z "${RSS[$key]:-}" ] || [ "$rss" -gt "${RSS[$key]}" ]; then
		RSS[$key]=$rss
	fi
}

# Largest tensor in bytes, from the safetensors headers: 8-byte
# little-endian header length, then JSON with "data_offsets":[begin,end].
largest_tensor() {
	local f n max=0 m
	for f in "$@"; do
		n=$(od -An -v --endian=little -t u8 -N 8 "$f" | tr -d ' ')
		m=$(head -c $((8 + n)) "$f" | tail -c "$n" |
			grep -oE '"data_offsets" *: *\[ *[0-9]+ *, *[0-9]+ *\]' |
			tr -c '0-9,\n' ' ' | tr -d ' ' | awk -F, '
				{ d = $2 - $1; if (d > m) m = d } END { print m + 0 }')
		if [ "$m" -gt "$max" ]; then max=$m; fi
	done
	echo "$max"
}

echo "== day0 weights benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ)) =="
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM," \
	"/tmp on $(findmnt -no FSTYPE -T /tmp 2>/dev/null || echo '?')"
echo "engine:  $ENGINE"
[ -z "$BASE" ] || echo "base:    $BASE (its converts timed in the same rounds)"
echo "cpu:     $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
echo "isa:     $(grep -m1 -o -w -E 'avx2|avx512bw|avx512vbmi|sha_ni' /proc/cpuinfo | sort -u | tr '\n' ' ')(FP8 decode: AVX-512 VBMI, else AVX-512 BW, else AVX2; SHA-256: OpenSSL's)"
echo "load:    $(uptime | sed 's/.*load average/load average/') (at the start; the machine is shared)"

PLAIN=${PLAIN:-1}
FP8=${FP8:-1}
if [ "$PLAIN" = 0 ]; then ARCH=(--arch llama --layers 1 --hidden 256 --heads 4 --kv-heads 4 --ffn 512 --vocab 512); REPS_PLAIN=1; else REPS_PLAIN=$REPS; fi
t0=$(now)
"$ENGINE" gen-model "${ARCH[@]}" --shards 4 --dtype f32 "$MODEL" >>"$LOG" 2>&1 ||
	{ tail -n 20 "$LOG" >&2; die "gen-model failed"; }
echo "generated in $(awk -v s="$(fsub "$(now)" "$t0")" 'BEGIN { printf "%.1f", s }') s: ${ARCH[*]} --dtype f32 --shards 4"

SHARDS=("$MODEL"/model-*-of-00004.safetensors)
[ "${#SHARDS[@]}" -eq 4 ] || die "expected 4 shards in $MODEL, found ${#SHARDS[@]}"
BYTES=0
for f in "${SHARDS[@]}"; do BYTES=$((BYTES + $(stat -c %s "$f"))); done
LARGEST=$(largest_tensor "${SHARDS[@]}")
[ "$LARGEST" -gt 0 ] || die "could not read tensor sizes from the shard headers"
BOUND=$((LARGEST + 64 * 1024 * 1024))
echo "model:   4 shards, $BYTES bytes ($(awk -v b="$BYTES" 'BEGIN { printf "%.1f MB", b / 1e6 }')), largest tensor $(mib "$LARGEST") MiB"

# Flush gen-model's dirty pages, then pull everything into the page cache.
sync
cat "$MODEL"/* >/dev/null
cat "$MODEL"/* >/dev/null
# How verify and convert read the shards here (readpath.c measures a
# mapping against pread once per process; DAY0_READ in the environment
# forces one): verify --json says which, with both rates.
echo "read:    $("$ENGINE" verify "$MODEL" --json --threads 1 2>/dev/null |
	sed -n 's/^ *"read": "\(.*\)",\{0,1\}$/\1/p')${DAY0_READ:+ (DAY0_READ=$DAY0_READ)}"

# CPU seconds: busy time of the whole machine, and of this script's children.
busy_cpu_s() {
	awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { print ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat
}
# `times` must run in this shell (a $(...) subshell has no children yet);
# its second line is the children's user and system time.
own_cpu_s() {
	awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } print t }' "$1"
}
MEASURE_T0=$(now)
BUSY0=$(busy_cpu_s)
times >"$TMP/times.0"

# ---------------------------------------------------------------- hashing
declare -A LABEL=(
	[sha256sum]="sha256sum (1 process)"
	[openssl]="openssl dgst -sha256"
	[verify_t1]="day0 verify --threads 1"
	[verify_t2]="day0 verify --threads 2"
	[verify_tn]="day0 verify --threads $THREADS_N"
	[cp]="cp -r (4 shards)"
	[cp_warmup]="cp -r (warm-up)"
	[convert_warmup]="day0 convert (warm-up)"
	[convert]="day0 convert bf16 tp$TP"
	[dd]="dd of the bf16 output's size"
	[rw]="cat of the source || dd"
	[convert_base]="BASE convert bf16 tp$TP"
)
HAVE_OPENSSL=0
if command -v openssl >/dev/null; then
	HAVE_OPENSSL=1
fi

echo
echo "hashing: page cache warm, $REPS_PLAIN rounds (interleaved)"
for ((r = 1; r <= REPS_PLAIN; r++)); do
	timed sha256sum sha256sum "${SHARDS[@]}"
	timed verify_t1 "$ENGINE" verify "$MODEL" --threads 1
	timed verify_t2 "$ENGINE" verify "$MODEL" --threads 2
	if [ "$THREADS_N" -gt 2 ]; then
		timed verify_tn "$ENGINE" verify "$MODEL" --threads "$THREADS_N"
	fi
	if [ "$HAVE_OPENSSL" = 1 ]; then
		timed openssl openssl dgst -sha256 "${SHARDS[@]}"
	fi
done

# ---------------------------------------------------------------- convert
# Outputs are removed and dirty pages flushed (untimed) before every run, so
# no run pays for the previous one's writeback.  Writing into page-cache
# pages the kernel has not used for a while can cost several times more
# (on a VM, first touch of guest memory faults on the host: a cold cp of
# 2 GB measured 7 s against 0.7 s warm, all of it in the kernel's memcpy),
# so each timed run follows an identical warm-up run whose output is
# deleted: both sides then write into recently freed pages.  WARMUP=0 skips
# the warm-up runs.
WARMUP=${WARMUP:-1}
cp_run() { # key
	rm -rf "$TMP/cp"
	mkdir "$TMP/cp"
	sync
	timed "$1" cp -r "${SHARDS[@]}" "$TMP/cp/"
	rm -rf "$TMP/cp"
	sync
}
convert_run() { # key [engine]
	timed "$1" "${2:-$ENGINE}" convert "$MODEL" "$TMP/out" --dtype bf16 --tp "$TP"
	OUT[convert]=$(out_bytes)
	rm -rf "$TMP/out"
	sync
}
# The write floor: dd writing BYTES (a convert's output size) into a fresh
# file on the same filesystem, after the same flush as every run.  On this
# VM, writing into page-cache pages the host has taken back costs several
# times more than into warm ones (see above), so a 4.6 GB write is not
# twice a 2.3 GB one: each mode gets the floor of its own byte count.
dd_run() { # key bytes
	mkdir -p "$TMP/dd" && sync
	timed "$1" dd if=/dev/zero of="$TMP/dd/out" bs=1M \
		count=$((($2 + 1048575) / 1048576)) status=none
	rm -rf "$TMP/dd" && sync
}
# The read and write floor (reference only): cat of the source shards to
# /dev/null beside dd of the output's bytes, both at once on the two
# cores, the bytes a convert that reads more than it writes (f32 -> bf16
# reads two for each written) must move.  Where the page cache is read
# about as fast as it is written, this, not dd alone, bounds the convert.
rw_run() { # key bytes
	mkdir -p "$TMP/dd" && sync
	timed "$1" bash -c 'cat "$1"/*.safetensors >/dev/null & dd if=/dev/zero of="$2" bs=1M count="$3" status=none; wait' \
		rw "$MODEL" "$TMP/dd/out" $((($2 + 1048575) / 1048576))
	rm -rf "$TMP/dd" && sync
}
echo "convert: bf16, tp $TP, vs cp to the same filesystem, $REPS_PLAIN rounds (interleaved)"
rm -rf "$TMP/out"
sync
for ((r = 1; r <= REPS_PLAIN; r++)); do
	if [ "$WARMUP" != 0 ]; then cp_run cp_warmup; fi
	cp_run cp
	if [ "$WARMUP" != 0 ]; then convert_run convert_warmup; fi
	convert_run convert
	if [ -n "$BASE" ]; then
		if [ "$WARMUP" != 0 ]; then convert_run convert_base_warmup "$BASE"; fi
		convert_run convert_base "$BASE"
	fi
	if [ "$WARMUP" != 0 ]; then dd_run dd_warmup "${OUT[convert]}"; fi
	dd_run dd "${OUT[convert]}"
	rw_run rw "${OUT[convert]}"
done

# ------------------------------------------------------------------- FP8
# llama, 10 layers, hidden 4096 (32 heads x 128, 8 kv heads), ffn 14336,
# vocab 8192: 2.0 G FP8 weights + 0.5 M f32 scales + 134 MB bf16
# embeddings; largest tensor an MLP weight, 14336 x 4096 x 1 B = 56 MiB.
FP8_ARCH=(--arch llama --layers 10 --hidden 4096 --heads 32 --kv-heads 8
	--ffn 14336 --vocab 8192 --dtype bf16 --quant fp8 --block 128)
if [ "$FP8" != 0 ]; then
	rm -rf "$MODEL"
	FMODEL=$TMP/fp8
	t0=$(now)
	"$ENGINE" gen-model "${FP8_ARCH[@]}" --shards 4 "$FMODEL" >>"$LOG" 2>&1 ||
		{ tail -n 20 "$LOG" >&2; die "gen-model (fp8) failed"; }
	FSHARDS=("$FMODEL"/model-*-of-00004.safetensors)
	FBYTES=0
	for f in "${FSHARDS[@]}"; do FBYTES=$((FBYTES + $(stat -c %s "$f"))); done
	FLARGEST=$(largest_tensor "${FSHARDS[@]}")
	FBOUND=$((FLARGEST + 64 * 1024 * 1024))
	echo
	echo "fp8 model: generated in $(awk -v s="$(fsub "$(now)" "$t0")" 'BEGIN { printf "%.1f", s }') s, ${FP8_ARCH[*]}"
	echo "           4 shards, $FBYTES bytes ($(awk -v b="$FBYTES" 'BEGIN { printf "%.1f MB", b / 1e6 }')), largest tensor $(mib "$FLARGEST") MiB"
	sync
	cat "$FMODEL"/* >/dev/null
	cat "$FMODEL"/* >/dev/null
	LABEL[f_openssl]="openssl dgst -sha256"
	LABEL[f_verify_t1]="day0 verify --threads 1"
	LABEL[f_verify_t2]="day0 verify --threads 2"
	LABEL[f_cp]="cp -r (4 shards)"
	LABEL[f_keep]="day0 convert keep tp$TP"
	LABEL[f_bf16]="day0 convert fp8->bf16 tp$TP"
	LABEL[f_dd]="dd of the bf16 output's size"
	LABEL[f_dd_keep]="dd of the keep output's size"
	LABEL[f_keep_base]="BASE convert keep tp$TP"
	LABEL[f_verify_t1_base]="BASE verify --threads 1"
	LABEL[f_verify_t2_base]="BASE verify --threads 2"
	LABEL[f_bf16_base]="BASE convert fp8->bf16 tp$TP"
	command -v openssl >/dev/null || die "openssl not found (the FP8 hashing reference)"
	echo "fp8 hashing and converting: $REPS rounds (interleaved)"
	f_cp_run() {
		rm -rf "$TMP/cp" && mkdir "$TMP/cp" && sync
		timed "$1" cp -r "${FSHARDS[@]}" "$TMP/cp/"
		rm -rf "$TMP/cp" && sync
	}
	f_conv_run() { # key dtype [engine]
		timed "$1" "${3:-$ENGINE}" convert "$FMODEL" "$TMP/out" --dtype "$2" --tp "$TP"
		OUT[$2]=$(out_bytes)
		rm -rf "$TMP/out" && sync
	}
	for ((r = 1; r <= REPS; r++)); do
		echo "  round $r: $(cut -d' ' -f1-3 /proc/loadavg) (load average 1/5/15 min at its start)"
		timed f_openssl openssl dgst -sha256 "${FSHARDS[@]}"
		timed f_verify_t1 "$ENGINE" verify "$FMODEL" --threads 1
		timed f_verify_t2 "$ENGINE" verify "$FMODEL" --threads 2
		if [ -n "$BASE" ]; then
			timed f_verify_t1_base "$BASE" verify "$FMODEL" --threads 1
			timed f_verify_t2_base "$BASE" verify "$FMODEL" --threads 2
		fi
		if [ "$WARMUP" != 0 ]; then f_cp_run f_cp_warmup; fi
		f_cp_run f_cp
		if [ "$WARMUP" != 0 ]; then f_conv_run f_keep_warmup keep; fi
		f_conv_run f_keep keep
		if [ -n "$BASE" ]; then
			if [ "$WARMUP" != 0 ]; then f_conv_run f_keep_base_warmup keep "$BASE"; fi
			f_conv_run f_keep_base keep "$BASE"
		fi
		if [ "$WARMUP" != 0 ]; then dd_run f_dd_keep_warmup "${OUT[keep]}"; fi
		dd_run f_dd_keep "${OUT[keep]}"
		if [ "$WARMUP" != 0 ]; then f_conv_run f_bf16_warmup bf16; fi
		f_conv_run f_bf16 bf16
		if [ -n "$BASE" ]; then
			if [ "$WARMUP" != 0 ]; then f_conv_run f_bf16_base_warmup bf16 "$BASE"; fi
			f_conv_run f_bf16_base bf16 "$BASE"
		fi
		if [ "$WARMUP" != 0 ]; then dd_run f_dd_warmup "${OUT[bf16]}"; fi
		dd_run f_dd "${OUT[bf16]}"
	done
fi

# ---------------------------------------------------------------- report
line() { # key [reference key]
	local k=$1 ref=${2:-} b m extra=""
	b=$(best "$k")
	m=$(median "$k")
	if [ -n "$ref" ]; then
		extra="  ratio $(ratio "$(best "$ref")" "$b")x vs ${LABEL[$ref]}"
	fi
	printf '  %-26s %7.2f s %8s MB/s  (median %.2f s, %s MB/s; runs%s)%s\n' \
		"${LABEL[$k]}" "$b" "$(mbps "$BYTES" "$b")" "$m" "$(mbps "$BYTES" "$m")" \
		"$(runs_of "$k")" "$extra"
}

echo
echo "results: best of $REPS (ratio = reference time / day0 time, from the best runs)"
if [ "$PLAIN" != 0 ]; then
echo "hashing $BYTES shard bytes:"
line sha256sum
if [ "$HAVE_OPENSSL" = 1 ]; then line openssl; fi
line verify_t1 sha256sum
line verify_t2 sha256sum
if [ "$THREADS_N" -gt 2 ]; then line verify_tn sha256sum; fi
if [ "$HAVE_OPENSSL" = 1 ]; then
	printf '  (reference only) verify --threads 1 / openssl %sx, verify --threads 2 / openssl %sx\n' \
		"$(ratio "$(best openssl)" "$(best verify_t1)")" \
		"$(ratio "$(best openssl)" "$(best verify_t2)")"
fi
echo "converting $BYTES source bytes:"
line cp
line convert cp
echo "the write floor, ${OUT[convert]} bytes (the bf16 output):"
line dd
printf '  %-26s %7s    ratio %sx vs %s\n' "day0 convert bf16" "" \
	"$(ratio "$(best dd)" "$(best convert)")" "${LABEL[dd]}"
echo "  reference only: reading the source while writing the output, both at once:"
line rw
printf '  %-26s %7s    ratio %sx vs %s (its read and write floor)\n' "day0 convert bf16" "" \
	"$(ratio "$(best rw)" "$(best convert)")" "${LABEL[rw]}"
if [ -n "$BASE" ]; then
	line convert_base cp
	printf '  %-26s %7s    ratio %sx vs %s\n' "BASE convert bf16" "" \
		"$(ratio "$(best dd)" "$(best convert_base)")" "${LABEL[dd]}"
fi
if [ "$WARMUP" != 0 ]; then
	printf '  warm-up runs (not in the ratio): cp -r%s s; convert%s s\n' \
		"$(runs_of cp_warmup)" "$(runs_of convert_warmup)"
fi
fi

if [ "$FP8" != 0 ]; then
	fline() { # key [reference key]: like line, over the FP8 bytes
		local k=$1 ref=${2:-} b extra=""
		b=$(best "$k")
		[ -n "$ref" ] && extra="  ratio $(ratio "$(best "$ref")" "$b")x vs ${LABEL[$ref]}"
		local back=""
		[ -r "$REPORTED" ] && back="; host took back MiB${BACK[$k]:-}"
		printf '  %-28s %7.2f s %8s MB/s  (runs%s; CPU s%s%s)%s\n' "${LABEL[$k]}" "$b" \
			"$(mbps "$FBYTES" "$b")" "$(runs_of "$k")" "${CPU[$k]:-}" "$back" "$extra"
	}
	echo "fp8: hashing $FBYTES shard bytes:"
	fline f_openssl
	fline f_verify_t1 f_openssl
	fline f_verify_t2 f_openssl
	if [ -n "$BASE" ]; then
		fline f_verify_t1_base f_openssl
		fline f_verify_t2_base f_openssl
	fi
	echo "fp8: converting $FBYTES source bytes:"
	fline f_cp
	fline f_keep f_cp
	fline f_bf16 f_cp
	echo "fp8: the write floor, ${OUT[keep]} bytes (the keep output) and ${OUT[bf16]} (the FP8 -> bf16 output):"
	fline f_dd_keep
	fline f_dd
	printf '  %-26s %7s    ratio %sx vs %s\n' "day0 convert keep" "" \
		"$(ratio "$(best f_dd_keep)" "$(best f_keep)")" "${LABEL[f_dd_keep]}"
	printf '  %-26s %7s    ratio %sx vs %s\n' "day0 convert fp8->bf16" "" \
		"$(ratio "$(best f_dd)" "$(best f_bf16)")" "${LABEL[f_dd]}"
	if [ -n "$BASE" ]; then
		fline f_keep_base f_cp
		fline f_bf16_base f_cp
		printf '  %-26s %7s    ratio %sx vs %s\n' "BASE convert keep" "" \
			"$(ratio "$(best f_dd_keep)" "$(best f_keep_base)")" "${LABEL[f_dd_keep]}"
		printf '  %-26s %7s    ratio %sx vs %s\n' "BASE convert fp8->bf16" "" \
			"$(ratio "$(best f_dd)" "$(best f_bf16_base)")" "${LABEL[f_dd]}"
	fi
	echo "fp8: peak RSS, bound = largest tensor $(mib "$FLARGEST") MiB + 64 MiB = $(mib "$FBOUND") MiB:"
	for k in f_verify_t1 f_verify_t2 f_keep f_bf16 f_openssl f_cp; do
		kb=${RSS[$k]}
		note=""
		case $k in f_openssl | f_cp) note="(reference)" ;; esac
		if [ -z "$note" ]; then
			if [ $((kb * 1024)) -le "$FBOUND" ]; then note=PASS; else note=MISS; fi
		fi
		printf '  %-28s %8s MiB  %s\n' "${LABEL[$k]}" "$(mib $((kb * 1024)))" "$note"
	done
fi
[ "$PLAIN" != 0 ] && echo "peak RSS (max over runs), bound = largest tensor $(mib "$LARGEST") MiB + 64 MiB = $(mib "$BOUND") MiB:"
for k in verify_t1 verify_t2 convert sha256sum cp; do
	[ "$PLAIN" != 0 ] || break
	kb=${RSS[$k]}
	note=""
	case $k in sha256sum | cp) note="(reference)" ;; esac
	if [ -z "$note" ]; then
		if [ $((kb * 1024)) -le "$BOUND" ]; then note=PASS; else note=MISS; fi
	fi
	printf '  %-26s %8s MiB  %s\n' "${LABEL[$k]}" "$(mib $((kb * 1024)))" "$note"
done

# name, value, target, unit, met?
ROWS=()
row() { ROWS+=("$1|$2|$3|$4"); }
mark() { if ge "$1" "$2"; then echo met; else echo "NOT MET"; fi; }
r1=$(ratio "$(best sha256sum)" "$(best verify_t1)")
r2=$(ratio "$(best sha256sum)" "$(best verify_t2)")
rc=$(ratio "$(best cp)" "$(best convert)")
if [ "$PLAIN" != 0 ]; then
row "verify --threads 1 / sha256sum" "${r1}x" ">= 0.95x" "$(mark "$r1" 0.95)"
row "verify --threads 2 / sha256sum" "${r2}x" ">= 1.70x" "$(mark "$r2" 1.7)"
row "convert bf16 tp4 / cp" "${rc}x" ">= 0.50x" "$(mark "$rc" 0.5)"
rd=$(ratio "$(best dd)" "$(best convert)")
row "convert bf16 tp4 / its write floor" "${rd}x" ">= 0.85x" "$(mark "$rd" 0.85)"
row "  (reference: / read+write floor)" "$(ratio "$(best rw)" "$(best convert)")x" "" ""
if [ -n "$BASE" ]; then
	row "  (BASE: convert bf16 / floor)" "$(ratio "$(best dd)" "$(best convert_base)")x" "" ""
fi
if [ "$HAVE_OPENSSL" = 1 ]; then
	o1=$(ratio "$(best openssl)" "$(best verify_t1)")
	o2=$(ratio "$(best openssl)" "$(best verify_t2)")
	row "verify --threads 1 / openssl" "${o1}x" ">= 0.95x" "$(mark "$o1" 0.95)"
	row "verify --threads 2 / openssl" "${o2}x" ">= 1.90x" "$(mark "$o2" 1.9)"
fi
fi
for k in verify_t1 verify_t2 convert; do
	[ "$PLAIN" != 0 ] || break
	kb=${RSS[$k]}
	if [ $((kb * 1024)) -le "$BOUND" ]; then m=met; else m="NOT MET"; fi
	row "peak RSS ${LABEL[$k]#day0 }" "$(mib $((kb * 1024))) MiB" "<= $(mib "$BOUND") MiB" "$m"
done

if [ "$FP8" != 0 ]; then
	f1=$(ratio "$(best f_openssl)" "$(best f_verify_t1)")
	f2=$(ratio "$(best f_openssl)" "$(best f_verify_t2)")
	fk=$(ratio "$(best f_cp)" "$(best f_keep)")
	fb=$(ratio "$(best f_cp)" "$(best f_bf16)")
	row "fp8 verify --threads 1 / openssl" "${f1}x" ">= 0.95x" "$(mark "$f1" 0.95)"
	row "fp8 verify --threads 2 / openssl" "${f2}x" ">= 1.90x" "$(mark "$f2" 1.9)"
	row "fp8 convert keep tp4 / cp" "${fk}x" ">= 0.50x" "$(mark "$fk" 0.5)"
	row "fp8 convert fp8->bf16 tp4 / cp" "${fb}x" ">= 0.30x" "$(mark "$fb" 0.3)"
	fd=$(ratio "$(best f_dd)" "$(best f_bf16)")
	fdk=$(ratio "$(best f_dd_keep)" "$(best f_keep)")
	row "  (its write floor: dd / cp)" "$(ratio "$(best f_cp)" "$(best f_dd)")x" "" ""
	row "fp8 convert keep / its write floor" "${fdk}x" ">= 0.85x" "$(mark "$fdk" 0.85)"
	row "fp8 convert fp8->bf16 / its write floor" "${fd}x" ">= 0.85x" "$(mark "$fd" 0.85)"
	if [ -n "$BASE" ]; then
		row "  (BASE: verify 1 / 2 threads / openssl)" "$(ratio "$(best f_openssl)" "$(best f_verify_t1_base)")x $(ratio "$(best f_openssl)" "$(best f_verify_t2_base)")x" "" ""
		row "  (BASE: keep / floor)" "$(ratio "$(best f_dd_keep)" "$(best f_keep_base)")x" "" ""
		row "  (BASE: fp8->bf16 / floor)" "$(ratio "$(best f_dd)" "$(best f_bf16_base)")x" "" ""
	fi
	for k in f_verify_t1 f_keep f_bf16; do
		kb=${RSS[$k]}
		if [ $((kb * 1024)) -le "$FBOUND" ]; then m=met; else m="NOT MET"; fi
		row "fp8 peak RSS ${LABEL[$k]#day0 }" "$(mib $((kb * 1024))) MiB" "<= $(mib "$FBOUND") MiB" "$m"
	done
fi
times >"$TMP/times.1"
wall=$(fsub "$(now)" "$MEASURE_T0")
other=$(awk -v b0="$BUSY0" -v b1="$(busy_cpu_s)" -v o0="$(own_cpu_s "$TMP/times.0")" \
	-v o1="$(own_cpu_s "$TMP/times.1")" 'BEGIN { o = (b1 - b0) - (o1 - o0); printf "%.1f", (o > 0 ? o : 0) }')
share=$(awk -v o="$other" -v w="$wall" -v n="$(nproc)" 'BEGIN { printf "%.0f", (w > 0 ? 100 * o / (w * n) : 0) }')
printf 'CPU time used by others during the measurements (other processes, kernel threads incl. writeback): %.1f s = %s%% of %s CPUs over %.0f s\n' \
	"$other" "$share" "$(nproc)" "$wall"
if [ "$share" -gt 10 ]; then
	echo "warning: other work competed for the CPUs; figures are noisy (rerun on an idle machine)"
fi

echo "load at the end: $(uptime | sed 's/.*load average/load average/')"
echo
echo "summary:"
printf '  %-36s %12s  %-16s %s\n' target value bound status
for x in "${ROWS[@]}"; do
	IFS='|' read -r a b c d <<<"$x"
	printf '  %-36s %12s  %-16s %s\n' "$a" "$b" "$c" "$d"
done
exit 0
