#!/usr/bin/env bash
# bench/llamacpp.sh - day0-engine side by side with llama.cpp on the same
# model: the ~171M llama of bench/forward.sh (12 layers, hidden 1024, ffn
# 2816, 16 heads, vocab 8192) from `day0-engine gen-model`, stored in f32,
# in bf16 and in block-scaled FP8 (e4m3, 128x128 blocks, embedding and
# lm_head f32), run by both engines at 1 and 2 threads (THREADS="1 2"):
#   prefill: tok/s of a 128-token prompt (llama-bench -p 128; day0-engine
#            perf --prompt-tokens 128: prompt tokens / TTFT)
#   decode:  tok/s generating 32 tokens (llama-bench -n 32; day0-engine perf
#            --gen-tokens 32: 1 / TPOT)
# and the ratio day0 / llama.cpp per case (target >= 1.0, reported, not
# asserted).  The runs alternate, llama.cpp then day0 per case, ROUNDS
# times (default 3); each run is itself 3 repetitions (llama-bench -r 3,
# perf --repeat 3) and each figure is the best sample of all, so that a busy
# moment on a shared machine does not decide a ratio.
#
# llama.cpp comes from npm's node-llama-cpp package, which ships it as a git
# bundle (llama/gitRelease.bundle): `npm pack` into the cache directory
# (LLAMACPP_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/day0/llamacpp), a
# clone of the bundle, a CPU-only Release build of llama-bench and libllama
# (cmake, GGML_NATIVE; 11-15 min on 2 shared cores, cached after).  The model is
# written as GGUF by bench/llamacpp_gguf.py with the bundle's own gguf-py
# (its tensor names, its Q/K permutation for llama, a dummy vocabulary), and
# before any timing both engines must produce the same greedy tokens for a
# fixed prompt of ids (bench/llamacpp_greedy.c against libllama, f32 KV
# cache as day0's): a conversion error would make the comparison
# meaningless.  GGUF has no block-scaled FP8: llama.cpp gets the FP8
# model's weights dequantised, as f32 for the greedy check (the weights day0
# multiplies) and rounded to bf16 for the timings (llama.cpp's fastest type
# that runs here: its Q8_0 kernels died of SIGILL on this VM), so the fp8
# rows are day0 on FP8 against llama.cpp on bf16 (twice the bytes a
# decode step reads).  `uptime`'s load is printed with every round: the
# machine is shared.  day0 runs as bench/forward.sh runs it: one rank under
# mpirun --bind-to none, OPENBLAS_NUM_THREADS=T.  llama-bench keeps its own
# defaults otherwise (f16 KV cache, flash attention auto, warm-up run).
# Where the environment forces OpenBLAS's kernel set (OPENBLAS_CORETYPE,
# OPENBLAS_L2_SIZE: some shared machines set them for older OpenBLAS
# builds), day0 is measured a second time with both unset for its own
# commands (OpenBLAS's own choice for the CPU, greedy tokens checked too),
# in a second column.
# A last column (XSPLIT=0 leaves it out): day0 with DAY0_PREFILL_X=split, x
# carried as bf16 hi + lo for prefill's bf16 and FP8 products (twice the
# bf16 FLOPs: on a CPU without AMX, f32's rate) where day0's default rounds
# x once to bf16 (llama.cpp's own arithmetic on its AVX512-BF16 path), or,
# where the CPU's bf16 matmul is no faster than f32 (Intel without AMX),
# widens W to f32 (kernel ".../w-f32": the split column is then slower);
# decode does not change (the GEMV reads x in f32), so its rows show only
# prefill.
#
# BENCH_LOCK=/tmp/day0-bench.lock: every CPU-heavy step (the build, the
# conversion, each measured run) under `flock` on that file, so that other
# benchmarks sharing the machine never run at the same time; no lock unless
# asked.  A benchmark, not a test: exits non-zero only when a step fails or
# the greedy tokens differ.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
E="$ROOT/$BUILD/day0-engine"
[ "${BUILD#/}" != "$BUILD" ] && E="$BUILD/day0-engine"
CACHE=${LLAMACPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/day0/llamacpp}
NLC_VERSION=${NLC_VERSION:-3.22.1}   # node-llama-cpp, pinned: its bundle is the llama.cpp measured
PYTHON=${PYTHON:-/usr/bin/python3}   # Debian's, where python3-numpy installs
THREADS=${THREADS:-1 2}
DTYPES=${DTYPES:-f32 bf16 fp8}
ROUNDS=${ROUNDS:-3}
P=${PROMPT:-128} G=${GEN:-32}
L=${LAYERS:-12} H=1024 F=2816 V=8192 NH=16
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

die() { echo "llamacpp: $*" >&2; exit 1; }
heavy() { # CMD...: a CPU-heavy step, under BENCH_LOCK when it is set
	if [ -n "${BENCH_LOCK:-}" ]; then flock "$BENCH_LOCK" "$@"; else "$@"; fi
}

# --- what this needs -------------------------------------------------------
missing=""
for c in cmake:cmake g++:g++ cc:build-essential git:git npm:npm tar:tar jq:jq \
	mpirun:openmpi-bin flock:util-linux; do
	command -v "${c%%:*}" >/dev/null || missing="$missing ${c%%:*} (package ${c#*:})"
done
[ -x "$PYTHON" ] || missing="$missing $PYTHON (package python3)"
[ -x "$PYTHON" ] && for m in numpy:python3-numpy yaml:python3-yaml; do
	"$PYTHON" -c "import ${m%%:*}" 2>/dev/null || missing="$missing python module ${m%%:*} (package ${m#*:})"
done
[ -x "$E" ] || missing="$missing $E (make)"
[ -z "$missing" ] || die "missing:$missing - 'make deps' installs the packages, 'make' builds day0"

# --- llama.cpp: npm pack, clone the bundle, build (cached) -----------------
mkdir -p "$CACHE"
TGZ="$CACHE/node-llama-cpp-$NLC_VERSION.tgz"
if [ ! -s "$TGZ" ]; then
	echo "llamacpp: npm pack node-llama-cpp@$NLC_VERSION into $CACHE"
	(cd "$CACHE" && npm pack "node-llama-cpp@$NLC_VERSION" --silent >/dev/null) ||
		die "npm pack node-llama-cpp@$NLC_VERSION failed (is the npm registry reachable?)"
	[ -s "$TGZ" ] || die "npm pack did not write $TGZ"
fi
SRC="$CACHE/src"
if [ "$(cat "$SRC/.day0-from" 2>/dev/null)" != "$NLC_VERSION" ]; then
	echo "llamacpp: cloning the llama.cpp bundle of node-llama-cpp $NLC_VERSION"
	rm -rf "$SRC" "$CACHE/package" "$CACHE/build"
	tar -xzf "$TGZ" -C "$CACHE" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json ||
		die "$TGZ has no llama/gitRelease.bundle"
	git clone -q "$CACHE/package/llama/gitRelease.bundle" "$SRC" 2>/dev/null ||
		die "git clone of $CACHE/package/llama/gitRelease.bundle failed"
	echo "$NLC_VERSION" >"$SRC/.day0-from"
fi
LB="$CACHE/build"
CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF"
if [ ! -x "$LB/bin/llama-bench" ] || [ "$(cat "$LB/.day0-flags" 2>/dev/null)" != "$CMAKE_FLAGS" ]; then
	echo "llamacpp: building llama-bench (CPU only; 11-15 min on 2 cores, once): $LB"
	t0=$(date +%s)
	# shellcheck disable=SC2086
	heavy cmake -S "$SRC" -B "$LB" $CMAKE_FLAGS >"$CACHE/cmake.log" 2>&1 ||
		die "cmake configure failed: $CACHE/cmake.log"
	heavy cmake --build "$LB" -j"$(nproc)" --target llama-bench llama >"$CACHE/build.log" 2>&1 ||
		die "cmake build failed: tail $CACHE/build.log"
	echo "$CMAKE_FLAGS" >"$LB/.day0-flags"
	echo "llamacpp: built in $(($(date +%s) - t0)) s"
fi
LIBDIR="$LB/bin"
GREEDY="$LB/llamacpp_greedy"
if [ ! -x "$GREEDY" ] || [ bench/llamacpp_greedy.c -nt "$GREEDY" ]; then
	cc -O2 -o "$GREEDY" bench/llamacpp_greedy.c -I"$SRC/include" -I"$SRC/ggml/include" \
		-L"$LIBDIR" -lllama -Wl,-rpath,"$LIBDIR" ||
		die "building bench/llamacpp_greedy.c against $LIBDIR/libllama.so failed"
fi
commit=$(jq -r .tag "$CACHE/package/llama/llama.cpp.info.json" 2>/dev/null || echo "?")

# --- the model, both engines' formats --------------------------------------
W=$(mktemp -d /tmp/day0-llamacpp.XXXXXX)
trap 'rm -rf "$W"' EXIT INT TERM
declare -A TGGUF # the GGUF llama-bench times (FP8: its weights in bf16)
for d in $DTYPES; do
	q="--dtype $d"
	[ "$d" = fp8 ] && q="--quant fp8 --block 128"
	# shellcheck disable=SC2086
	"$E" gen-model --arch llama --layers "$L" --hidden $H --heads $NH --ffn $F --vocab $V \
		$q --shards 2 "$W/m.$d" >/dev/null || die "gen-model $q failed"
	PYTHONPATH="$SRC/gguf-py" heavy "$PYTHON" bench/llamacpp_gguf.py "$W/m.$d" "$W/m.$d.gguf" ||
		die "GGUF conversion of the $d model failed"
	TGGUF[$d]="$W/m.$d.gguf"
	if [ "$d" = fp8 ]; then
		PYTHONPATH="$SRC/gguf-py" heavy "$PYTHON" bench/llamacpp_gguf.py "$W/m.$d" "$W/m.$d.bf16.gguf" bf16 ||
			die "GGUF conversion (bf16) of the fp8 model failed"
		TGGUF[$d]="$W/m.$d.bf16.gguf"
	fi
done
params=$("$E" inspect --json "$W/m.${DTYPES%% *}" | grep -o '"total": [0-9]*' | head -1 | awk '{print $2}')
echo "model: $(awk -v p="$params" 'BEGIN { printf "%.0fM", p / 1e6 }') parameters ($L layers, hidden $H, ffn $F, vocab $V), $DTYPES"
echo "llama.cpp: node-llama-cpp $NLC_VERSION's bundle (release $commit), $LB"
echo "cpu: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores; day0's kernels: $(OPENBLAS_NUM_THREADS=1 "$E" perf "$W/m.${DTYPES%% *}" --prompt-tokens 16 --gen-tokens 2 --repeat 1 --json 2>/dev/null | jq -r .kernel)"

# --- which OpenBLAS kernels day0 runs on ------------------------------------
# Where this machine's environment forces OpenBLAS's kernel set
# (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE: some shared machines set them for
# older OpenBLAS builds), day0 is also measured with both unset for its own
# commands alone ("own"): the kernels OpenBLAS picks for this CPU, as on a
# cluster node without them.  Its greedy tokens are checked like the rest.
CC=${CC:-cc}
$CC -O2 -o "$W/peak" bench/sgemm_peak.c $(pkg-config --cflags --libs openblas 2>/dev/null || echo -lopenblas) -ldnnl -lgomp -ldl ||
	die "building bench/sgemm_peak.c failed"
BLAS_MODES="env"
core_env=$("$W/peak" --core)
if [ -n "${OPENBLAS_CORETYPE:-}${OPENBLAS_L2_SIZE:-}" ]; then
	core_own=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$W/peak" --core)
	BLAS_MODES="env own"
	echo "OpenBLAS kernels: $core_env as this environment sets them (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}), $core_own as OpenBLAS picks them itself (day0 measured both ways)"
else
	echo "OpenBLAS kernels: $core_env"
fi
blas() { # MODE: the env(1) words that run a command with OpenBLAS's kernels as MODE says
	# (xs: the environment's, and x as bf16 hi + lo for prefill)
	case $1 in
	own) echo env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ;;
	xs) echo env DAY0_PREFILL_X=split ;;
	*) echo env ;;
	esac
}
XS=""
if [ "${XSPLIT:-1}" != 0 ]; then
	XS=xs
	echo "day0 x as bf16 hi + lo (DAY0_PREFILL_X=split): $(OPENBLAS_NUM_THREADS=1 DAY0_PREFILL_X=split "$E" perf "$W/m.${DTYPES%% *}" --prompt-tokens 16 --gen-tokens 2 --repeat 1 --json 2>/dev/null | jq -r .kernel), measured for bf16 and fp8 in the last column"
fi
modes() { # DTYPE: the day0 modes measured for it
	echo "$BLAS_MODES"
	if [ -n "$XS" ] && [ "$1" != f32 ]; then echo xs; fi
}

# --- same greedy tokens? ---------------------------------------------------
PROMPT_IDS=1,42,7,211,5,900,33,4000,17,256,8191,3,64,1000,77,12
K=${CHECK_TOKENS:-16}
for d in $DTYPES; do
	llcpp=$(heavy "$GREEDY" "$W/m.$d.gguf" $PROMPT_IDS "$K" 2>"$W/greedy.$d.log") ||
		die "llamacpp_greedy ($d) failed: $(tail -3 "$W/greedy.$d.log")"
	for bm in $(modes "$d"); do
	OPENBLAS_NUM_THREADS=1 heavy $(blas $bm) mpirun --bind-to none -np 1 "$E" run "$W/m.$d" \
		--tokens $PROMPT_IDS --generate "$K" --dump-generated "$W/gen.$d.json" >"$W/run.$d.log" 2>&1 ||
		die "day0-engine run ($d, OpenBLAS $bm) failed: $(tail -3 "$W/run.$d.log")"
	day0=$(jq -r '.generated | map(tostring) | join(",")' "$W/gen.$d.json")
	if [ "$day0" = "$llcpp" ]; then
		echo "greedy $d (day0 $([ "$bm" = xs ] && echo "x split" || echo "OpenBLAS $bm")): the same $K tokens from both engines ($day0)"
	else
		echo "greedy $d: DIFFERENT" >&2
		echo "  day0:      $day0" >&2
		echo "  llama.cpp: $llcpp" >&2
		echo "  llama.cpp's top-1 margins:" >&2
		sed 's/^/    /' "$W/greedy.$d.log" >&2
		exit 1
	fi
	done
done

# --- alternating runs ------------------------------------------------------
declare -A BEST
best() { # KEY VALUE: keep the larger
	BEST[$1]=$(awk -v a="${BEST[$1]:-0}" -v b="$2" 'BEGIN { print (b > a ? b : a) }')
}
for r in $(seq "$ROUNDS"); do
	for d in $DTYPES; do
		for t in $THREADS; do
			j=$(heavy "$LB/bin/llama-bench" -m "${TGGUF[$d]}" -p "$P" -n "$G" -t "$t" -r 3 -o json 2>"$W/lb.log") ||
				die "llama-bench ($d, $t threads) failed: $(tail -3 "$W/lb.log")"
			best "lc pp $d $t" "$(echo "$j" | jq "[.[] | select(.n_prompt == $P and .n_gen == 0) | .samples_ts | max] | max")"
			best "lc tg $d $t" "$(echo "$j" | jq "[.[] | select(.n_prompt == 0 and .n_gen == $G) | .samples_ts | max] | max")"
			for bm in $(modes "$d"); do
			j=$(OPENBLAS_NUM_THREADS=$t heavy $(blas $bm) mpirun --bind-to none -x OPENBLAS_NUM_THREADS -np 1 \
				"$E" perf "$W/m.$d" --prompt-tokens "$P" --gen-tokens "$G" --repeat 3 --json 2>"$W/perf.log") ||
				{ cp "$W/perf.log" "${TMPDIR:-/tmp}/day0-llamacpp-perf.log"
				  die "day0-engine perf ($d, $t threads, OpenBLAS $bm) failed: $(grep -m2 -i 'signal\|error\|day0-engine' "$W/perf.log" | tr '\n' ' ')(whole log: ${TMPDIR:-/tmp}/day0-llamacpp-perf.log)"; }
			best "d0$bm pp $d $t" "$(echo "$j" | jq ".prompt_tokens * 1000 / .ttft_ms_min")"
			best "d0$bm tg $d $t" "$(echo "$j" | jq "1000 / .tpot_ms_min")"
			done
		done
	done
	echo "round $r of $ROUNDS done ($(uptime | sed 's/.*load average/load average/'))"
done

echo
own=$([ "$BLAS_MODES" = "env own" ] && echo yes || true)
head=$(printf '%-8s %-5s %-7s %14s %14s %8s' phase dtype threads "day0 tok/s" "llama.cpp" ratio)
[ -z "$own" ] || head="$head$(printf ' %16s %8s' "day0 $core_own" ratio)"
[ -z "$XS" ] || head="$head$(printf ' %16s %8s' "day0 x split" ratio)"
echo "$head"
last="llamacpp:"
last_own="llamacpp (OpenBLAS $([ -n "$own" ] && echo "$core_own" || true)):"
last_xs="llamacpp (prefill, x as bf16 hi + lo):"
sep="" sep_xs=""
for ph in pp tg; do
	name=$([ $ph = pp ] && echo prefill || echo decode)
	for d in $DTYPES; do
		for t in $THREADS; do
			a=${BEST["d0env $ph $d $t"]} b=${BEST["lc $ph $d $t"]}
			ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
			row=$(printf '%-8s %-5s %-7s %14.1f %14.1f %7sx' "$name" "$d" "$t" "$a" "$b" "$ratio")
			if [ -n "$own" ]; then
				o=${BEST["d0own $ph $d $t"]}
				ro=$(awk -v a="$o" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
				row="$row$(printf ' %16.1f %7sx' "$o" "$ro")"
				last_own="$last_own$sep $name $d t$t $ro"
			fi
			if [ -n "$XS" ] && [ "$d" != f32 ] && [ $ph = pp ]; then
				o=${BEST["d0xs $ph $d $t"]}
				ro=$(awk -v a="$o" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
				row="$row$(printf ' %16.1f %7sx' "$o" "$ro")"
				last_xs="$last_xs$sep_xs $name $d t$t $ro"
				sep_xs=","
			fi
			echo "$row"
			last="$last$sep $name $d t$t $ratio"
			sep=","
		done
	done
done
echo "(best of $ROUNDS rounds x 3 repetitions each; prefill $P tokens, decode $G; target day0 / llama.cpp >= 1.0;"
echo " fp8: day0 on the FP8 weights, llama.cpp on them dequantised to bf16;"
echo " day0 with OpenBLAS $core_env$([ -n "$own" ] && echo " as this environment forces it, and with $core_own, OpenBLAS's own choice for this CPU" || true)$([ -z "$XS" ] || echo "; x split: DAY0_PREFILL_X=split, prefill's x as bf16 hi + lo (day0's default: x rounded once, as llama.cpp rounds it)"))"
echo "$last"
[ -z "$own" ] || echo "$last_own"
[ -z "$XS" ] || echo "$last_xs"
