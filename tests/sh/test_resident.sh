# Weights resident as stored: a bf16 model is held as bf16 (the accountant
# counts half of the same model in f32, `run`'s peak RSS is <= 0.6x) and its
# logits stay within the bf16 bound of the float64 reference, from a Hugging
# Face checkpoint sliced in memory and from convert's rank files.  perf and
# serve compute the lm_head only where its logits are used: their answers
# are the same as run's, which keeps every position.
. "$(dirname "$0")/../lib.sh"
TOOLS="$BUILD/tests"
TOK=3,17,42,5,99,1,64,23

mpi() { # NP ARGS...
	local np=$1; shift
	timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}

# the same model (same seed) stored in f32 and in bf16
for d in f32 bf16; do
	"$ENGINE" gen-model --arch llama --layers 16 --hidden 512 --heads 8 --kv-heads 8 \
		--ffn 1536 --vocab 8192 --dtype "$d" "$T/m.$d" >/dev/null
done

alloc_peak() { # events file -> the accountant's peak bytes of card 0
	sed -n 's/.*"card":0,"metric":"alloc.peak","value":\([0-9]*\).*/\1/p' "$1" | tail -1
}
for d in f32 bf16; do
	"$TOOLS/maxrss" "$ENGINE" run "$T/m.$d" --tokens "$TOK" --generate 2 --events \
		>"$T/ev.$d" 2>"$T/err.$d"
	echo "$d: exit $?, $(grep maxrss_kib "$T/err.$d"), accountant peak $(alloc_peak "$T/ev.$d") bytes"
done
a32=$(alloc_peak "$T/ev.f32")
a16=$(alloc_peak "$T/ev.bf16")
check "the accountant counts bf16 weights at 2 bytes (0.45..0.55 of f32)" \
	awk -v a="${a16:-0}" -v b="${a32:-0}" 'BEGIN { r = a / b; exit !(b > 0 && r >= 0.45 && r <= 0.55) }'
case "$BUILD" in
*asan*) ;; # ASan's shadow memory makes RSS meaningless; the normal build asserts it
*)
	k32=$(sed -n 's/^maxrss_kib //p' "$T/err.f32")
	k16=$(sed -n 's/^maxrss_kib //p' "$T/err.bf16")
	check "peak RSS of run on bf16 ($k16 KiB) <= 0.6 x f32 ($k32 KiB)" \
		awk -v a="${k16:-0}" -v b="${k32:-0}" 'BEGIN { exit !(b > 0 && a <= 0.6 * b) }'
	;;
esac
# bf16-resident logits against float64 (which reads the same bf16 values)
expect_rc 0 "run on the bf16 checkpoint, tp 2 (slices cut in memory)" \
	mpi 2 run "$T/m.bf16" --tp 2 --tokens "$TOK" --dump-logits "$T/lg.hf.st"
expect_rc 0 "… within the bf16 bound (rel 2e-2, KL 1e-3)" "$ENGINE" validate "$T/m.bf16" \
	--tokens "$TOK" --logits "$T/lg.hf.st" --levels e2e --max-rel 2e-2 --kl-max 1e-3
"$ENGINE" convert "$T/m.bf16" "$T/c16" --dtype bf16 --tp 2 --pp 2 >/dev/null
expect_rc 0 "run from bf16 rank files, tp 2 pp 2" \
	mpi 4 run "$T/c16" --tp 2 --pp 2 --tokens "$TOK" --dump-logits "$T/lg.c.st"
expect_rc 0 "… within the bf16 bound (rel 2e-2, KL 1e-3)" "$ENGINE" validate "$T/m.bf16" \
	--tokens "$TOK" --logits "$T/lg.c.st" --levels e2e --max-rel 2e-2 --kl-max 1e-3
for kern in portable avx2; do
	expect_rc 0 "the $kern kernel gives the same run (DAY0_KERNEL=$kern)" \
		env DAY0_KERNEL=$kern "$ENGINE" run "$T/m.bf16" --tokens "$TOK" --dump-logits "$T/lg.p.st"
	expect_rc 0 "… within the bf16 bound too" "$ENGINE" validate "$T/m.bf16" \
		--tokens "$TOK" --logits "$T/lg.p.st" --levels e2e --max-rel 2e-2 --kl-max 1e-3
done

# FP8 block-scaled weights stay FP8 (engine/ops_fp8.c): the accountant
# counts each quantised weight at one byte plus its blocks' f32 scales
# where dequantising on load (DAY0_FP8=f32) counted four; the logits of
# the fused product stay within 1e-5 of the float64 reference of the codes
# times their scales, for both FP8 dtypes, both kernels, one rank and a
# tp 2 pp 2 layout, from the checkpoint and from kept rank files.
"$ENGINE" gen-model --arch llama --layers 16 --hidden 512 --heads 8 --kv-heads 8 \
	--ffn 1536 --vocab 8192 --quant fp8 --block 128 "$T/m.fp8" >/dev/null
"$ENGINE" gen-model --arch llama --layers 4 --hidden 256 --heads 4 --kv-heads 2 \
	--ffn 640 --vocab 512 --quant fp8-e5m2 --block 64 "$T/m.e5m2" >/dev/null
for e in fp8 f32; do
	DAY0_FP8=$e "$TOOLS/maxrss" "$ENGINE" run "$T/m.fp8" --tokens "$TOK" --generate 4 --events \
		>"$T/ev.fp8.$e" 2>"$T/err.fp8.$e"
	echo "fp8 (DAY0_FP8=$e): $(grep maxrss_kib "$T/err.fp8.$e"), accountant peak $(alloc_peak "$T/ev.fp8.$e") bytes"
done
# 16 layers x (4 x 512^2 + 3 x 512 x 1536) quantised weights, 128x128 blocks
qn=$((16 * (4 * 512 * 512 + 3 * 512 * 1536)))
qs=$((16 * (4 * 4 * 4 + 3 * 4 * 12) * 4))
p8=$(alloc_peak "$T/ev.fp8.fp8")
p32=$(alloc_peak "$T/ev.fp8.f32")
# the default kernel's subnormal lists (dp4 where the CPU has AVX512-BF16
# takes them out at load, below; the others keep the codes in place: 0)
sd=$(sed -n 's/.*"card":0,"metric":"fp8.subnormal_bytes","value":\([0-9]*\).*/\1/p' "$T/ev.fp8.fp8" | tail -1)
if grep -qw avx512_bf16 /proc/cpuinfo && grep -qw gfni /proc/cpuinfo && grep -qw avx512vbmi /proc/cpuinfo; then
	check "the default FP8 kernel (dp4 on this CPU) takes the subnormal codes out: lists of $sd bytes" \
		test "${sd:-0}" -gt 0
else
	check "the default FP8 kernel keeps the subnormal codes in place: no lists ($sd bytes)" \
		test "${sd:--1}" -eq 0
fi
check "the accountant counts FP8 weights at 1 byte + scales (+ the lists): $p8 = $p32 - 3 x $qn + $qs + $sd bytes" \
	test "${p8:-0}" -eq $(( ${p32:-0} - 3 * qn + qs + ${sd:-1000000000} ))
# with DAY0_KERNEL=avx512-gf4 (GFNI + AVX-512 VBMI) e4m3's subnormal
# codes are taken out at load into sparse lists (ops_fp8.c): counted too,
# 4 bytes a row of each weight that has any plus 8 a code
if grep -qw gfni /proc/cpuinfo && grep -qw avx512vbmi /proc/cpuinfo; then
	DAY0_KERNEL=avx512-gf4 "$ENGINE" run "$T/m.fp8" --tokens "$TOK" --generate 4 --events \
		>"$T/ev.fp8.gf4" 2>/dev/null
	pg=$(alloc_peak "$T/ev.fp8.gf4")
	sb=$(sed -n 's/.*"card":0,"metric":"fp8.subnormal_bytes","value":\([0-9]*\).*/\1/p' "$T/ev.fp8.gf4" | tail -1)
	sn=$(sed -n 's/.*"card":0,"metric":"fp8.subnormal_codes","value":\([0-9]*\).*/\1/p' "$T/ev.fp8.gf4" | tail -1)
	echo "fp8 (gf4): $sn subnormal codes of $qn, lists $sb bytes"
	check "gf4: the accountant counts the subnormal lists too: $pg = $p8 - $sd + $sb bytes" \
		test "${pg:-0}" -eq $(( ${p8:-0} - ${sd:-0} + ${sb:--1000000000} ))
	check "… the lists hold every subnormal code ($sn, 8 bytes each) and at most one offset a row" \
		test "${sn:-0}" -gt 0 -a "${sb:-0}" -ge $((8 * ${sn:-0})) -a "${sb:-0}" -le $((8 * ${sn:-0} + 4 * 16 * (4 * 512 + 2 * 1536 + 512 + 7)))
fi
want=$("$ENGINE" run "$T/m.fp8" --tokens "$TOK" --generate 6 | sed -n 's/^generated: //p')
got=$(DAY0_FP8=f32 "$ENGINE" run "$T/m.fp8" --tokens "$TOK" --generate 6 | sed -n 's/^generated: //p')
check "FP8 resident gives dequantise-on-load's greedy tokens [$got] = [$want]" test -n "$want" -a "$want" = "$got"
case "$BUILD" in
*asan*) ;;
*)
	k8=$(sed -n 's/^maxrss_kib //p' "$T/err.fp8.fp8")
	k8f=$(sed -n 's/^maxrss_kib //p' "$T/err.fp8.f32")
	check "peak RSS of run on FP8 held as stored ($k8 KiB) <= 0.5 x dequantised on load ($k8f KiB)" \
		awk -v a="${k8:-0}" -v b="${k8f:-0}" 'BEGIN { exit !(b > 0 && a <= 0.5 * b) }'
	;;
esac
for m in fp8 e5m2; do
	for kern in best avx2 portable; do
		kv=$kern; [ "$kern" = best ] && kv=
		expect_rc 0 "$m ($kern kernel): run, tp 1" env ${kv:+DAY0_KERNEL=$kv} \
			"$ENGINE" run "$T/m.$m" --tokens "$TOK" --dump-logits "$T/lg.$m.st"
		expect_rc 0 "… logits within 1e-5 of float64" "$ENGINE" validate "$T/m.$m" \
			--tokens "$TOK" --logits "$T/lg.$m.st" --levels e2e --max-rel 1e-5 --kl-max 1e-6
	done
	expect_rc 0 "$m: run tp 2 pp 2 (slices cut in memory)" \
		mpi 4 run "$T/m.$m" --tp 2 --pp 2 --tokens "$TOK" --dump-logits "$T/lg.$m.st"
	expect_rc 0 "… logits within 1e-5 of float64" "$ENGINE" validate "$T/m.$m" \
		--tokens "$TOK" --logits "$T/lg.$m.st" --levels e2e --max-rel 1e-5 --kl-max 1e-6
done
"$ENGINE" convert "$T/m.fp8" "$T/c8" --dtype keep --tp 2 --pp 2 >/dev/null
expect_rc 0 "run from kept FP8 rank files, tp 2 pp 2" \
	mpi 4 run "$T/c8" --tp 2 --pp 2 --tokens "$TOK" --dump-logits "$T/lg.c8.st" --events
cp "$OUT" "$T/ev.c8"
expect_rc 0 "… logits within 1e-5 of float64 of the source" "$ENGINE" validate "$T/m.fp8" \
	--tokens "$TOK" --logits "$T/lg.c8.st" --levels e2e --max-rel 1e-5 --kl-max 1e-6
DAY0_FP8=f32 mpi 4 run "$T/c8" --tp 2 --pp 2 --tokens "$TOK" --events >"$T/ev.c8f" 2>/dev/null
c8=$(alloc_peak "$T/ev.c8")
c8f=$(alloc_peak "$T/ev.c8f")
check "… held as FP8 from the rank files too: card 0's accountant $c8 <= 0.4 x dequantised $c8f" \
	awk -v a="${c8:-0}" -v b="${c8f:-0}" 'BEGIN { exit !(a > 0 && b > 0 && a <= 0.4 * b) }'

# With DAY0_KERNEL=avx512-gf4, e4m3's subnormal codes are taken out of
# the resident codes at load and added back from sparse lists by every
# kernel (ops_fp8.c: gf4 reads codes as value x 2^-120, where a subnormal
# would be an f32 denormal); by default they stay in place.  A model with two weights of layer 0 made of subnormals
# and zeros only (their exponent bits cleared in the file, their block
# scales times 2^12 so that they weigh as much as normal codes): were the
# subnormals dropped, q and down would vanish.  Logits against float64 of
# the file's codes under every kernel: one token (the decode kernels),
# eight (the GEMV of 8 rows), 24 (prefill: sgemm panels with gf4's lists,
# or oneDNN's at bf16's bound), tp 2 with gf4 (each rank's own lists);
# greedy tokens with gf4 against the model dequantised on load
# (DAY0_FP8=f32, which keeps the codes as they are).
"$ENGINE" gen-model --arch llama --layers 4 --hidden 256 --heads 4 --kv-heads 2 \
	--ffn 640 --vocab 512 --quant fp8 --block 64 "$T/m.sub" >/dev/null
python3 - "$T/m.sub" <<'PY'
import glob, json, struct, sys
hit = 0
for f in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(f, "r+b") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
        for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight"):
            t, ts = hdr.get(name), hdr.get(name + "_scale_inv")
            if not t or t["dtype"] != "F8_E4M3" or not ts or ts["dtype"] != "F32":
                continue
            a, b = t["data_offsets"]
            fh.seek(8 + n + a)
            codes = fh.read(b - a)
            fh.seek(8 + n + a)
            fh.write(bytes(c & 0x87 for c in codes))
            a, b = ts["data_offsets"]
            fh.seek(8 + n + a)
            sc = struct.unpack("<%df" % ((b - a) // 4), fh.read(b - a))
            fh.seek(8 + n + a)
            fh.write(struct.pack("<%df" % len(sc), *[v * 4096 for v in sc]))
            hit += 1
sys.exit(0 if hit == 2 else 1)
PY
check "planted: layer 0's q_proj and down_proj hold subnormal codes only" test $? = 0
"$ENGINE" run "$T/m.sub" --tokens 7 >"$T/sub.out" 2>&1
# the default kernel: dp4 (VDPBF16PS, which reads a bf16 denormal as
# zero: the codes taken out) where the CPU has AVX512-BF16, else gfx4
# (kept in place) where it has GFNI
if grep -qw avx512_bf16 /proc/cpuinfo && grep -qw gfni /proc/cpuinfo && grep -qw avx512vbmi /proc/cpuinfo; then
	share=$(sed -n 's/^fp8: .* subnormal (\([0-9.e+-]*\)), taken out at load for dp4: [0-9]* bytes.*/\1/p' "$T/sub.out")
	check "run prints the share of subnormal codes, taken out at load for the default dp4 ($share, planted ~0.07)" \
		awk -v s="${share:-0}" 'BEGIN { exit !(s > 0.05 && s < 0.2) }'
	DAY0_KERNEL=avx512-gfx4 "$ENGINE" run "$T/m.sub" --tokens 7 >"$T/sub.out" 2>&1
fi
share=$(sed -n 's/^fp8: .* subnormal (\([0-9.e+-]*\)), kept in place.*/\1/p' "$T/sub.out")
check "run prints the share of subnormal codes, kept in place without dp4/gf4 ($share, planted ~0.07)" \
	awk -v s="${share:-0}" 'BEGIN { exit !(s > 0.05 && s < 0.2) }'
if grep -qw gfni /proc/cpuinfo && grep -qw avx512vbmi /proc/cpuinfo; then
	DAY0_KERNEL=avx512-gf4 "$ENGINE" run "$T/m.sub" --tokens 7 >"$T/sub.out" 2>&1
	contains "… taken out at load for gf4 (DAY0_KERNEL=avx512-gf4)" "taken out at load for gf4: " "$T/sub.out"
fi
TOK24=3,17,42,5,99,1,64,23,7,300,11,250,4,18,77,402,9,3,17,42,5,99,1,64
for kern in best avx512-dp4 avx512-gf4 avx512-gfx4 avx512-vbmi avx2 portable; do
	kv=$kern; [ "$kern" = best ] && kv=
	for tk in 7 "$TOK"; do
		expect_rc 0 "subnormal codes ($kern kernel, tokens $tk): logits within 1e-5 of float64" \
			sh -c "env ${kv:+DAY0_KERNEL=$kv} '$ENGINE' run '$T/m.sub' --tokens $tk --dump-logits '$T/lg.sub.st' >/dev/null &&
			'$ENGINE' validate '$T/m.sub' --tokens $tk --logits '$T/lg.sub.st' --levels e2e --max-rel 1e-5 --kl-max 1e-6"
	done
done
expect_rc 0 "subnormal codes, prefill of 24 by sgemm panels (DAY0_KERNEL=avx512-gf4, else the best): within 1e-5" \
	sh -c "DAY0_KERNEL=avx512-gf4 '$ENGINE' run '$T/m.sub' --tokens $TOK24 --dump-logits '$T/lg.sub.st' >/dev/null &&
	'$ENGINE' validate '$T/m.sub' --tokens $TOK24 --logits '$T/lg.sub.st' --levels e2e --max-rel 1e-5 --kl-max 1e-6"
# (oneDNN's prefill with the lists is test_ops's: a GEMV named by
# DAY0_KERNEL prefills by sgemm)
expect_rc 0 "subnormal codes, prefill of 24 by the default (oneDNN where it runs): within bf16's bound" \
	sh -c "'$ENGINE' run '$T/m.sub' --tokens $TOK24 --dump-logits '$T/lg.sub.st' >/dev/null &&
	'$ENGINE' validate '$T/m.sub' --tokens $TOK24 --logits '$T/lg.sub.st' --levels e2e --max-rel 2e-2 --kl-max 1e-3"
expect_rc 0 "subnormal codes, tp 2 (one token, DAY0_KERNEL=avx512-gf4): within 1e-5" \
	sh -c "timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -x DAY0_KERNEL=avx512-gf4 -np 2 '$ENGINE' run '$T/m.sub' --tp 2 --tokens 7 --dump-logits '$T/lg.sub.st' >/dev/null &&
	'$ENGINE' validate '$T/m.sub' --tokens 7 --logits '$T/lg.sub.st' --levels e2e --max-rel 1e-5 --kl-max 1e-6"
want=$(DAY0_FP8=f32 "$ENGINE" run "$T/m.sub" --tokens "$TOK24" --generate 8 | sed -n 's/^generated: //p')
got=$(DAY0_KERNEL=avx512-gf4 "$ENGINE" run "$T/m.sub" --tokens "$TOK24" --generate 8 | sed -n 's/^generated: //p')
check "subnormal codes (avx512-gf4): greedy tokens [$got] = dequantised on load's [$want]" test -n "$want" -a "$want" = "$got"

# perf prefills as a server does (the lm_head at the last position only):
# its greedy answer is run's, which computes every position
for d in f32 bf16; do
	want=$("$ENGINE" run "$T/m.$d" --tokens "$TOK" --generate 6 | sed -n 's/^generated: //p')
	for lay in "1 --tp 1" "4 --tp 2 --pp 2"; do
		set -- $lay
		np=$1; shift
		mpi "$np" perf "$T/m.$d" "$@" --tokens "$TOK" --gen-tokens 6 --repeat 1 --json \
			>"$T/perf.json" 2>"$T/perf.err"
		got=$(python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['generated'])))" \
			"$T/perf.json" 2>/dev/null)
		check "perf $d ($*): greedy tokens [$got] equal run --generate [$want]" \
			test -n "$want" -a "$want" = "$got"
	done
done
# The weights and the KV cache come from huge-page chunks (runtime.c's
# rt_alloc while rt_open loads): most of what the accountant holds is in
# them (the rest: norms and other blocks under 256 KiB); DAY0_HUGE=0 puts
# nothing there and gives the same answer.
mpi 1 perf "$T/m.bf16" --tp 1 --tokens "$TOK" --gen-tokens 6 --repeat 1 --json >"$T/perf.json" 2>"$T/perf.err"
mem=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['mem']; print(m['huge_chunk_bytes'], m['resident_bytes'], ' '.join(map(str, json.load(open(sys.argv[1]))['generated'])))" "$T/perf.json" 2>/dev/null)
set -- $mem
check "perf: the weights and KV cache in huge-page chunks (${1:-?} of ${2:-?} bytes held, more than 90%)" \
	test -n "$2" -a "${1:-0}" -gt $((${2:-1} * 9 / 10))
env DAY0_HUGE=0 "$ENGINE" perf "$T/m.bf16" --tp 1 --tokens "$TOK" --gen-tokens 6 --repeat 1 --json >"$T/perf0.json" 2>"$T/perf.err"
mem0=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['mem']['huge_chunk_bytes'], ' '.join(map(str, d['generated'])))" "$T/perf0.json" 2>/dev/null)
check "perf with DAY0_HUGE=0: no chunks, the same greedy tokens [${mem0#* }] = [${mem#* * }]" \
	test -n "$mem0" -a "${mem0%% *}" = 0 -a "${mem0#* }" = "${mem#* * }"

# serve: the last row for generation, every row when a request echoes its
# prompt's logprobs; both against run --dump-logits (all positions)
rm -f "$T/s.port"
timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
	"$ENGINE" serve "$T/m.bf16" --tp 2 --max-ctx 64 --port 0 --port-file "$T/s.port" \
	>"$T/s.out" 2>"$T/s.err" &
SPID=$!
trap 'kill -TERM $SPID 2>/dev/null; wait $SPID 2>/dev/null; rm -rf "$T"' EXIT
for _ in $(seq 300); do [ -s "$T/s.port" ] && break; sleep 0.1; done
U=http://127.0.0.1:$(cat "$T/s.port" 2>/dev/null)
curl -s "$U/v1/completions" -d "{\"prompt\":[$TOK],\"max_tokens\":6,\"temperature\":0}" >"$T/g.json"
curl -s "$U/v1/completions" -d "{\"prompt\":[$TOK],\"max_tokens\":1,\"temperature\":0,\"logprobs\":1,\"echo\":true}" >"$T/e.json"
"$ENGINE" run "$T/m.bf16" --tokens "$TOK" --generate 6 --dump-logits "$T/lg.all.st" >"$T/run.out"
want=$(sed -n 's/^generated: //p' "$T/run.out")
got=$(python3 -c "import json,sys; print(' '.join(map(str, json.load(open(sys.argv[1]))['choices'][0]['token_ids'])))" "$T/g.json" 2>/dev/null)
check "serve bf16 tp 2: greedy tokens [$got] equal run --generate [$want]" test -n "$want" -a "$want" = "$got"
python3 - "$T/e.json" "$T/lg.all.st" "$TOK" >"$T/lp.txt" 2>&1 <<'EOF'
import json, math, struct, sys
d = json.load(open(sys.argv[1]))["choices"][0]
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])["logits"]
T, V = h["shape"]
b0, b1 = h["data_offsets"]
x = struct.unpack("<%df" % (T * V), raw[8 + n + b0:8 + n + b1])
tok = [int(t) for t in sys.argv[3].split(",")]
lps = d["logprobs"]["token_logprobs"]
worst = 0.0
for i in range(1, T):  # row i-1 predicts prompt token i
    row = x[(i - 1) * V:i * V]
    m = max(row)
    lz = m + math.log(sum(math.exp(v - m) for v in row))
    worst = max(worst, abs(lps[i] - (row[tok[i]] - lz)))
print("ok" if lps[0] is None and len(lps) >= T and worst < 1e-3 else "bad", worst)
EOF
check "serve's echoed prompt logprobs equal run's logits at every position ($(cat "$T/lp.txt"))" \
	grep -q '^ok' "$T/lp.txt"
