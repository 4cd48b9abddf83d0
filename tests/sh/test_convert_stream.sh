# convert's streaming on shards larger than its windows (docs/formats.md,
# "convert: how the bytes move"): the source is read through a mapping
# populated ahead and dropped behind (or pread into each batch's buffer,
# where the probe finds that faster: both are run), kept tensors go from
# there to the rank files as strided writes, and writes are batched.  The other
# convert tests use models of a few KiB, which never leave the first
# window; this one uses a ~200 MB FP8 shard and ~34 MB f32 shards (and
# checks that every FP8 decode kernel writes the same bf16 files).
. "$(dirname "$0")/../lib.sh"
GNU_TIME=/usr/bin/time
[ -x "$GNU_TIME" ] || { fail "GNU time" "$GNU_TIME not found (make deps installs it)"; exit 0; }

# FP8, one shard of ~206 MB: 3 layers, hidden 2048, ffn 8192, 128x128
# blocks; the largest tensor an MLP weight of 16 MiB.
"$ENGINE" gen-model --arch llama --layers 3 --hidden 2048 --heads 16 --kv-heads 4 \
	--ffn 8192 --vocab 4096 --dtype bf16 --quant fp8 --block 128 --shards 1 \
	"$T/fp8" >/dev/null || fail "gen-model fp8" "exit $?"
shard=$(ls "$T"/fp8/*.safetensors)
check "the FP8 shard is larger than 150 MB" test "$(stat -c %s "$shard")" -gt 150000000

rss_kib() { awk -F': ' '/Maximum resident set size/ { print $2 }' "$1"; }
# ASan's shadow memory and quarantine make RSS meaningless (as in
# test_memory.sh): the bound is asserted by the normal build only.
rss_check() { # name kib
	case "$BUILD" in
	*asan*) echo "# $1: ${2} KiB under ASan, not asserted" ;;
	*) check "$1: peak RSS ${2} KiB < largest tensor 16 MiB + 64 MiB" test "${2:-999999}" -lt $((80 * 1024)) ;;
	esac
}
expect_rc 0 "convert --dtype keep --tp 4 of a 200 MB shard" \
	"$GNU_TIME" -v -o "$T/keep.time" "$ENGINE" convert "$T/fp8" "$T/keep" --dtype keep --tp 4
rss=$(rss_kib "$T/keep.time")
# Mapping the whole shard would put its 200 MB in RSS as the pages are
# touched; the windows keep it to the buffers and a few MiB of mapping.
rss_check keep "$rss"
expect_rc 0 "merge of the kept tp 4 files" "$ENGINE" merge "$T/keep" "$T/keep.m"
check "keep tp 4 merged is byte-identical to the source shard" cmp "$shard" "$T/keep.m/$(basename "$shard")"

expect_rc 0 "convert FP8 -> bf16 --tp 4" \
	"$GNU_TIME" -v -o "$T/bf.time" "$ENGINE" convert "$T/fp8" "$T/bf4" --dtype bf16 --tp 4
rss=$(rss_kib "$T/bf.time")
rss_check "FP8 -> bf16" "$rss"
expect_rc 0 "convert FP8 -> bf16 --tp 1 (no split)" "$ENGINE" convert "$T/fp8" "$T/bf1" --dtype bf16 --tp 1
expect_rc 0 "merge of the bf16 tp 4 files" "$ENGINE" merge "$T/bf4" "$T/bf4.m"
expect_rc 0 "merge of the bf16 tp 1 file" "$ENGINE" merge "$T/bf1" "$T/bf1.m"
check "bf16 tp 4 (column slices written strided) merged = tp 1, byte for byte" \
	cmp "$T/bf4.m/$(basename "$shard")" "$T/bf1.m/$(basename "$shard")"
# The decode kernels (the CPU's best: AVX-512 VBMI / BW tables where it
# has them; AVX2 arithmetic; the portable tables) write the same files.
for k in portable avx2; do
	expect_rc 0 "convert FP8 -> bf16 --tp 4 with DAY0_KERNEL=$k" \
		env DAY0_KERNEL=$k "$ENGINE" convert "$T/fp8" "$T/bf4.$k" --dtype bf16 --tp 4
	check "DAY0_KERNEL=$k: every rank file and layout.json = the default kernel's, byte for byte" \
		bash -c "for f in '$T'/bf4/*; do cmp \"\$f\" '$T'/bf4.$k/\$(basename \"\$f\") || exit 1; done"
	rm -rf "$T/bf4.$k"
done
# The writer lanes decode what they write (lane_decode, a piece at a time:
# whole rows, column slices of a chunk of rows through decode16_rect):
# the same bytes as the main thread decoding whole chunks before the
# lanes (DAY0_CONVERT_LANE_DECODE=0), and with pieces of 2 KiB, so that a
# column slice of 2048 elements is larger than a piece, a piece is part of
# a row, and a piece holds two rows of o_proj's 512-element slices.
expect_rc 0 "convert FP8 -> bf16 --tp 4 decoded on the main thread" \
	env DAY0_CONVERT_LANE_DECODE=0 "$ENGINE" convert "$T/fp8" "$T/bf4.one" --dtype bf16 --tp 4
check "decoded by the writer lanes: every rank file and layout.json = the main thread's, byte for byte" \
	bash -c "for f in '$T'/bf4/*; do cmp \"\$f\" '$T'/bf4.one/\$(basename \"\$f\") || exit 1; done"
expect_rc 0 "convert FP8 -> bf16 --tp 4 with pieces of 2 KiB" \
	env DAY0_CONVERT_PIECE=2048 "$ENGINE" convert "$T/fp8" "$T/bf4.small" --dtype bf16 --tp 4
check "pieces of 2 KiB: every rank file and layout.json = the default's, byte for byte" \
	bash -c "for f in '$T'/bf4/*; do cmp \"\$f\" '$T'/bf4.small/\$(basename \"\$f\") || exit 1; done"
expect_rc 0 "convert FP8 -> bf16 --tp 4, pieces of 2 KiB, DAY0_KERNEL=avx2 (decoded row by row)" \
	env DAY0_CONVERT_PIECE=2048 DAY0_KERNEL=avx2 "$ENGINE" convert "$T/fp8" "$T/bf4.small2" --dtype bf16 --tp 4
check "pieces of 2 KiB with AVX2: every rank file and layout.json = the default's, byte for byte" \
	bash -c "for f in '$T'/bf4/*; do cmp \"\$f\" '$T'/bf4.small2/\$(basename \"\$f\") || exit 1; done"
# Both ways of reading the source (readpath.c; the runs above took the
# one measured faster here): through the mapping, or pread into each
# batch's buffer.  The same files byte for byte, in the same bound.
for m in map read; do
	expect_rc 0 "DAY0_READ=$m: convert --dtype keep --tp 4" \
		env DAY0_READ=$m "$GNU_TIME" -v -o "$T/keep.$m.time" "$ENGINE" convert "$T/fp8" "$T/keep.$m" --dtype keep --tp 4
	rss_check "DAY0_READ=$m keep" "$(rss_kib "$T/keep.$m.time")"
	check "DAY0_READ=$m: keep tp 4 = the default's, every rank file and layout.json byte for byte" \
		bash -c "for f in '$T'/keep/*; do cmp \"\$f\" '$T'/keep.$m/\$(basename \"\$f\") || exit 1; done"
	expect_rc 0 "DAY0_READ=$m: convert FP8 -> bf16 --tp 4" \
		env DAY0_READ=$m "$GNU_TIME" -v -o "$T/bf4.$m.time" "$ENGINE" convert "$T/fp8" "$T/bf4.$m" --dtype bf16 --tp 4
	rss_check "DAY0_READ=$m FP8 -> bf16" "$(rss_kib "$T/bf4.$m.time")"
	check "DAY0_READ=$m: FP8 -> bf16 tp 4 = the default's, byte for byte" \
		bash -c "for f in '$T'/bf4/*; do cmp \"\$f\" '$T'/bf4.$m/\$(basename \"\$f\") || exit 1; done"
	expect_rc 0 "DAY0_READ=$m: FP8 -> bf16 decoded on the main thread" \
		env DAY0_READ=$m DAY0_CONVERT_LANE_DECODE=0 "$ENGINE" convert "$T/fp8" "$T/bf4.$m.one" --dtype bf16 --tp 4
	check "DAY0_READ=$m: ... the same bytes" \
		bash -c "for f in '$T'/bf4/*; do cmp \"\$f\" '$T'/bf4.$m.one/\$(basename \"\$f\") || exit 1; done"
	rm -rf "$T/keep.$m" "$T/bf4.$m" "$T/bf4.$m.one"
done
# Reading with pread, the writer threads pread the chunks they write as
# read or decode themselves (lane_read; the summary line says how many
# bytes); DAY0_CONVERT_LANE_READ=0 reads them all on the main thread.
# The same files either way, keep and FP8 -> bf16, tp 4 (column slices
# for every rank: chunks shared by the threads in turn) and tp 2.
for tp in 4 2; do
	for d in keep bf16; do
		expect_rc 0 "DAY0_READ=read: convert --dtype $d --tp $tp, the writer threads reading" \
			env DAY0_READ=read "$ENGINE" convert "$T/fp8" "$T/lr.$d" --dtype $d --tp $tp
		lane=$(sed -n 's/.*read (pread, \(.*\) of it by the writer threads.*/\1/p' "$OUT")
		total=$(sed -n 's/.* tensors, \(.*\) read (.*/\1/p' "$OUT")
		check "tp $tp $d: the summary says the writer threads read every byte ('$lane' of '$total')" \
			test -n "$lane" -a "$lane" = "$total"
		expect_rc 0 "... and with DAY0_CONVERT_LANE_READ=0" \
			env DAY0_READ=read DAY0_CONVERT_LANE_READ=0 "$ENGINE" convert "$T/fp8" "$T/lr.$d.main" --dtype $d --tp $tp
		contains "... whose summary says the main thread read it all" "read (pread) in" "$OUT"
		check "tp $tp $d read by the writer threads = read by the main thread, every rank file and layout.json byte for byte" \
			bash -c "for f in '$T'/lr.$d/*; do cmp \"\$f\" '$T'/lr.$d.main/\$(basename \"\$f\") || exit 1; done"
		rm -rf "$T/lr.$d" "$T/lr.$d.main"
	done
done
rm -rf "$T/keep" "$T/keep.m" "$T/bf4" "$T/bf4.m" "$T/bf1" "$T/bf1.m" "$T/bf4.one" "$T/bf4.small" "$T/bf4.small2"

# --verify-source hashes the bytes it reads in file order (mapped or
# pread: both).
for m in map read; do
	expect_rc 0 "DAY0_READ=$m: convert --dtype keep --verify-source of the intact shard" \
		env DAY0_READ=$m "$ENGINE" convert "$T/fp8" "$T/vs" --dtype keep --tp 2 --verify-source
	check "DAY0_READ=$m: layout.json records the hash it computed = SHA256SUMS" bash -c \
		"grep -q \"\$(cut -d' ' -f1 '$T/fp8/SHA256SUMS')\" '$T/vs/layout.json' && grep -q '\"sha256_from\": \"computed\"' '$T/vs/layout.json'"
	rm -rf "$T/vs"
done

# f32 in 2 shards of ~34 MB: kept as stored and f32 -> bf16.  ffn 512
# under hidden 2048: down_proj's tp 4 part of a chunk is 2048 rows of 128
# elements, more segments than one pwritev takes (IOV_MAX 1024).
"$ENGINE" gen-model --arch llama --layers 1 --hidden 2048 --heads 16 --kv-heads 4 \
	--ffn 512 --vocab 2048 --dtype f32 --shards 2 "$T/f32" >/dev/null || fail "gen-model f32" "exit $?"
expect_rc 0 "convert f32 --tp 4 (kept as stored)" "$ENGINE" convert "$T/f32" "$T/f.tp" --dtype f32 --tp 4
expect_rc 0 "merge of it" "$ENGINE" merge "$T/f.tp" "$T/f.m"
check "f32 tp 4 merged is bit-identical to the source" bash -c "cd '$T/f.m' && sha256sum -c --quiet '$T/f32/SHA256SUMS'"
expect_rc 0 "convert f32 -> bf16 --tp 4" "$ENGINE" convert "$T/f32" "$T/b4" --dtype bf16 --tp 4
expect_rc 0 "convert f32 -> bf16 --tp 1" "$ENGINE" convert "$T/f32" "$T/b1" --dtype bf16 --tp 1
expect_rc 0 "merge of the bf16 tp 4 files" "$ENGINE" merge "$T/b4" "$T/b4.m"
expect_rc 0 "merge of the bf16 tp 1 file" "$ENGINE" merge "$T/b1" "$T/b1.m"
check "f32 -> bf16: tp 4 merged = tp 1, byte for byte" bash -c \
	"for f in '$T'/b1.m/*.safetensors; do cmp \"\$f\" '$T'/b4.m/\$(basename \"\$f\") || exit 1; done"
# The writer lanes convert what they write (f32 -> bf16 with AVX-512 where
# the CPU has it, the source read from the mapping): the same bytes as the
# main thread converting whole chunks, and with pieces of 2 KiB (a piece
# is part of a row, and holds two of down_proj's 128-element slices).
expect_rc 0 "convert f32 -> bf16 --tp 4 converted on the main thread" \
	env DAY0_CONVERT_LANE_DECODE=0 "$ENGINE" convert "$T/f32" "$T/b4.main" --dtype bf16 --tp 4
expect_rc 0 "convert f32 -> bf16 --tp 4 with pieces of 2 KiB" \
	env DAY0_CONVERT_PIECE=2048 "$ENGINE" convert "$T/f32" "$T/b4.small" --dtype bf16 --tp 4
for m in map read; do
	expect_rc 0 "DAY0_READ=$m: convert f32 -> bf16 --tp 4" \
		env DAY0_READ=$m "$ENGINE" convert "$T/f32" "$T/b4.$m" --dtype bf16 --tp 4
	expect_rc 0 "DAY0_READ=$m: convert f32 --tp 4 (kept)" \
		env DAY0_READ=$m "$ENGINE" convert "$T/f32" "$T/f.tp.$m" --dtype f32 --tp 4
	check "DAY0_READ=$m: f32 kept tp 4 = the default's, byte for byte" \
		bash -c "for f in '$T'/f.tp/*; do cmp \"\$f\" '$T'/f.tp.$m/\$(basename \"\$f\") || exit 1; done"
	rm -rf "$T/f.tp.$m"
done
# Reading with pread, a chunk of a dtype conversion is read by its writer
# thread a 512 KiB block at a time into a buffer of its own, each put
# converting and writing its part of the block (lane_blocks: a column
# slice the block's rows of it, a block part of a row); the summary counts
# those bytes.  With pieces of 2 KiB, down_proj's 128-element slices of a
# block's rows take several pieces, and o_proj's 512-element rows are part
# of one; with pieces of 1 KiB (tp 2) o_proj's 1024-element slices are
# larger than a piece, each row in two.  tp 2 splits the same tensors in
# two.
bytes_of() { # "68.0 MiB" (fmt_bytes) -> bytes
	awk -v v="$1" 'BEGIN { split(v, a, " "); m = 1
		if (a[2] == "KiB") m = 1024; else if (a[2] == "MiB") m = 1048576
		else if (a[2] == "GiB") m = 1073741824
		printf "%.0f", a[1] * m }'
}
lane_blocks() { # name: every byte read by the lanes, all but the norms a block at a time
	local lane blk total
	lane=$(sed -n 's/.*read (pread, \(.*\) of it by the writer threads.*/\1/p' "$OUT")
	blk=$(sed -n 's/.*by the writer threads, \(.*\) of that in 512 KiB blocks).*/\1/p' "$OUT")
	total=$(sed -n 's/.* tensors, \(.*\) read (.*/\1/p' "$OUT")
	check "$1: the summary says the writer threads read every byte ('$lane' of '$total')" \
		test -n "$lane" -a "$lane" = "$total"
	# the norms (f32 kept as stored, ~24 KiB) are read as their puts need
	# them; every converted byte a block at a time: >= 99% of the total
	check "$1: ... and 99% or more of them a block at a time ('$blk')" \
		test -n "$blk" -a "$(bytes_of "${blk:-0 B}")" -ge $(($(bytes_of "${total:-0 B}") * 99 / 100))
}
expect_rc 0 "DAY0_READ=read, pieces of 2 KiB: convert f32 -> bf16 --tp 4" \
	env DAY0_READ=read DAY0_CONVERT_PIECE=2048 "$ENGINE" convert "$T/f32" "$T/b4.rsmall" --dtype bf16 --tp 4
lane_blocks "f32 -> bf16, pread, pieces of 2 KiB"
expect_rc 0 "DAY0_READ=read: convert f32 -> bf16 --tp 4 again" \
	env DAY0_READ=read "$ENGINE" convert "$T/f32" "$T/b4.read2" --dtype bf16 --tp 4
lane_blocks "f32 -> bf16, pread"
expect_rc 0 "DAY0_READ=read: convert f32 -> bf16 --tp 2" \
	env DAY0_READ=read "$ENGINE" convert "$T/f32" "$T/b2.read" --dtype bf16 --tp 2
lane_blocks "f32 -> bf16 tp 2, pread"
expect_rc 0 "DAY0_READ=map: convert f32 -> bf16 --tp 2" \
	env DAY0_READ=map "$ENGINE" convert "$T/f32" "$T/b2.map" --dtype bf16 --tp 2
check "f32 -> bf16 tp 2: pread a block at a time = mapped, every rank file and layout.json byte for byte" \
	bash -c "for f in '$T'/b2.map/*; do cmp \"\$f\" '$T'/b2.read/\$(basename \"\$f\") || exit 1; done"
expect_rc 0 "DAY0_READ=read, pieces of 1 KiB: convert f32 -> bf16 --tp 2" \
	env DAY0_READ=read DAY0_CONVERT_PIECE=1024 "$ENGINE" convert "$T/f32" "$T/b2.rtiny" --dtype bf16 --tp 2
lane_blocks "f32 -> bf16 tp 2, pread, pieces of 1 KiB"
check "f32 -> bf16 tp 2, pieces of 1 KiB (o_proj's slices larger than a piece) = mapped, byte for byte" \
	bash -c "for f in '$T'/b2.map/*; do cmp \"\$f\" '$T'/b2.rtiny/\$(basename \"\$f\") || exit 1; done"
expect_rc 0 "merge of the tp 2 files" "$ENGINE" merge "$T/b2.read" "$T/b2.m"
check "f32 -> bf16: tp 2 (pread, a block at a time) merged = tp 1, byte for byte" bash -c \
	"for f in '$T'/b1.m/*.safetensors; do cmp \"\$f\" '$T'/b2.m/\$(basename \"\$f\") || exit 1; done"
for v in main small map read rsmall read2; do
	check "f32 -> bf16 by the lanes = $v, every rank file and layout.json byte for byte" \
		bash -c "for f in '$T'/b4/*; do cmp \"\$f\" '$T'/b4.$v/\$(basename \"\$f\") || exit 1; done"
done
rm -rf "$T/f.tp" "$T/f.m" "$T/b4" "$T/b4.m" "$T/b1" "$T/b1.m" "$T/b4.main" "$T/b4.small" "$T/b4.map" "$T/b4.read" \
	"$T/b4.rsmall" "$T/b4.read2" "$T/b2.read" "$T/b2.map" "$T/b2.m" "$T/b2.rtiny"

# A disk error while reading (tests/shim/pread_eio.c: pread of one shard
# fails with EIO from byte 30 M on, inside q_proj): the writer thread that
# reads a block (or the main thread, DAY0_CONVERT_LANE_READ=0) stops the
# convert with the shard, tensor, bytes and cause, and nothing is left
# that could pass for a conversion.
cc -shared -fPIC -O2 -o "$T/eio.so" "$(dirname "$0")/../shim/pread_eio.c" -ldl 2>"$T/cc.err" ||
	fail "build the EIO shim" "$(head -c 300 "$T/cc.err")"
shard1=$T/f32/model-00001-of-00002.safetensors
shard1_real=$(readlink -f "$shard1") # what /proc/self/fd shows the shim
asan_opts=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
for how in "writer threads" "main thread"; do
	lr=1
	[ "$how" = "main thread" ] && lr=0
	expect_rc 2 "DAY0_READ=read, a shard's reads failing with EIO ($how): convert fails" \
		env ASAN_OPTIONS="$asan_opts" LD_PRELOAD="$T/eio.so" DAY0_EIO_PATH="$shard1_real" DAY0_EIO_AT=30000000 \
		DAY0_READ=read DAY0_CONVERT_LANE_READ=$lr "$ENGINE" convert "$T/f32" "$T/eio" --dtype bf16 --tp 4
	# the first read to fail names its tensor: q_proj's past 30 M, or the
	# next tensor's where the other writer thread got there first
	check "... the error names the shard, a tensor past the fault and the bytes" \
		grep -Eq "^day0-engine: $shard1: tensor 'model\.layers\.0\.[a-z_.]+\.weight': cannot read bytes [0-9]+-[0-9]+: " "$ERR"
	contains "... Input/output error, a disk error or a file cut short" \
		"Input/output error (a disk error, or the file was cut short since it was opened)" "$ERR"
	check "... and no output directory or partial one is left" \
		bash -c "! ls -d '$T'/eio '$T'/eio.partial-* 2>/dev/null"
done
expect_rc 0 "the same convert without the fault succeeds (the shim is not what fails)" \
	env ASAN_OPTIONS="$asan_opts" LD_PRELOAD="$T/eio.so" DAY0_READ=read "$ENGINE" convert "$T/f32" "$T/eio" --dtype bf16 --tp 4
rm -rf "$T/eio"

# A full disk: the write fails, the error names the rank file and says
# so, and nothing is left behind that could pass for a conversion.
mnt="$T/full"
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=24m tmpfs "$mnt" 2>"$T/mount.err"; then
	fail "mount a 24 MiB tmpfs" "$(head -c 300 "$T/mount.err") (the test runs as root)"
	exit 0
fi
trap 'umount "$mnt" 2>/dev/null; rm -rf "$T"' EXIT
expect_rc 2 "convert --dtype keep onto a full disk fails" "$ENGINE" convert "$T/fp8" "$mnt/out" --dtype keep --tp 4
contains "the error names a rank file and the cause" "rank-0000" "$ERR"
contains "... No space left on device" "No space left on device" "$ERR"
check "no output directory is left" test ! -e "$mnt/out"
check "no partial directory is left either" bash -c "! ls -d '$mnt'/out.partial-* 2>/dev/null"
expect_rc 2 "convert FP8 -> bf16 onto a full disk fails" "$ENGINE" convert "$T/fp8" "$mnt/out" --dtype bf16 --tp 2
contains "... saying why" "No space left on device" "$ERR"
check "... and leaves nothing" test -z "$(ls -A "$mnt")"
umount "$mnt"
