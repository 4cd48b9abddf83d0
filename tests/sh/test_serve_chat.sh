# POST /v1/chat/completions (issue #30, serve_chat.c): on a tiny
# same-structure Qwen2.5-VL, a chat with a PNG data URL answers the same
# greedy tokens as `run --image` with the same image and templated prompt
# (non-streamed and streamed, with prompt chunks of 16 tokens slicing the
# M-RoPE positions, and a second image of the same size right after: the
# prefix cache must not serve the first image's blocks); a JPEG; text-only
# chat on a text model; load --images; probe --image against the float64
# reference (and failing against other weights); the refusals (http URL, corrupt image, bad base64,
# images to a text model) as 400s that say why.
. "$(dirname "$0")/../lib.sh"
VL="$DAY0_ROOT/assets/configs/vl"
PY=/usr/bin/python3 # Debian's, with python3-pil (make deps)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
PIDS=""
cleanup() {
	for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap cleanup EXIT
start_serve() { # NAME MODEL ARGS...
	local name=$1; shift
	rm -f "$T/$name.port"
	timeout 300 "$ENGINE" serve "$@" --tp 1 --port 0 --port-file "$T/$name.port" \
		>"$T/$name.out" 2>"$T/$name.err" &
	PIDS="$PIDS $!"
	for _ in $(seq 300); do [ -s "$T/$name.port" ] && break; sleep 0.1; done
	eval "URL_$name=http://127.0.0.1:$(cat "$T/$name.port" 2>/dev/null)"
}
chat() { # URL BODYFILE OUTFILE -> http status
	curl -s -o "$3" -w '%{http_code}' "$1/v1/chat/completions" \
		-H 'Content-Type: application/json' --data-binary @"$2"
}
js() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

"$ENGINE" gen-model --like "$VL/qwen2.5-vl-7b-instruct/config.json" "$T/q25" >/dev/null 2>&1
"$ENGINE" gen-model --arch llama --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
	--vocab 300 "$T/txt" >/dev/null 2>&1
check "gen-model: a tiny qwen2.5-vl" test -s "$T/q25/model.safetensors"
$PY - "$T" <<'PY'
from PIL import Image
import random, sys
random.seed(30)
def mk(w, h, path, k):
    im = Image.new("RGB", (w, h))
    im.putdata([(random.randrange(256), (x * k) % 256, (y * 5) % 256) for y in range(h) for x in range(w)])
    im.save(path)
d = sys.argv[1]
mk(252, 140, d + "/a.png", 7)
mk(252, 140, d + "/a2.png", 3)   # a's size (the same placeholder ids), other pixels
mk(90, 60, d + "/b.jpg", 5)
PY

# the request body: $1 image file, $2 text, $3 extra fields
body() {
	local mime=png
	case "$1" in *.jpg) mime=jpeg ;; esac
	printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/%s;base64,%s"}},{"type":"text","text":"%s"}]}],"max_tokens":6,"temperature":0%s}' \
		"$mime" "$(base64 -w0 "$1")" "$2" "$3"
}
# the same prompt as the documented Qwen template renders it
qwen_prompt() {
	printf '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>%s<|im_end|>\n<|im_start|>assistant\n' "$1"
}
ref() { # IMAGE TEXT -> the greedy ids of run --image
	qwen_prompt "$2" >"$T/prompt.txt" # a file: keeps the last newline
	"$ENGINE" run "$T/q25" --tp 1 --prompt-file "$T/prompt.txt" --image "$1" \
		--generate 6 --dump-generated "$T/gen.json" >/dev/null 2>"$T/run.err" ||
		echo "run failed: $(head -c 200 "$T/run.err")"
	js "$T/gen.json" "d['generated']"
}

start_serve v "$T/q25" --max-ctx 256 --block-tokens 16 --max-batch-tokens 16
for case in "a.png|What is this?" "a2.png|What is this?" "b.jpg|Describe it"; do
	img=${case%%|*}; txt=${case#*|}
	want=$(ref "$T/$img" "$txt")
	case $img in a.png) want_a=$want ;; a2.png) want_a2=$want ;; esac
	body "$T/$img" "$txt" "" >"$T/req.json"
	st=$(chat "$URL_v" "$T/req.json" "$T/ans.json")
	check "chat $img: 200" test "$st" = 200
	got=$(js "$T/ans.json" "d['choices'][0]['token_ids']" 2>/dev/null)
	check "chat $img: the greedy tokens of run --image ($want)" test "$got" = "$want"
	check "chat $img: a chat.completion with the assistant's text" test \
		"$(js "$T/ans.json" "d['object'], d['choices'][0]['message']['role'], type(d['choices'][0]['message']['content']).__name__")" = \
		"chat.completion assistant str"
	body "$T/$img" "$txt" ',"stream":true' >"$T/req.json"
	curl -sN "$URL_v/v1/chat/completions" --data-binary @"$T/req.json" >"$T/sse.txt"
	got=$($PY - "$T/sse.txt" <<'PY'
import json, sys
ids, kinds = [], set()
for line in open(sys.argv[1]):
    if line.startswith("data: {"):
        d = json.loads(line[6:]); kinds.add(d["object"]); ids += d["choices"][0]["token_ids"]
print(ids, sorted(kinds))
PY
)
	check "chat $img streamed: chat.completion.chunk events, the same tokens" \
		test "$got" = "$want ['chat.completion.chunk']"
	cat_text=$($PY - "$T/sse.txt" <<'PY'
import json, sys
print(repr("".join(json.loads(l[6:])["choices"][0]["delta"].get("content", "")
                   for l in open(sys.argv[1]) if l.startswith("data: {"))))
PY
)
	check "chat $img streamed: the deltas add up to the whole answer's text" \
		test "$cat_text" = "$(js "$T/ans.json" "repr(d['choices'][0]['message']['content'])")"
done
# two images in one message, text between them (M-RoPE over both)
printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"and"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,%s"}},{"type":"text","text":"compare"}]}],"max_tokens":5,"temperature":0}' \
	"$(base64 -w0 "$T/a.png")" "$(base64 -w0 "$T/b.jpg")" >"$T/req.json"
chat "$URL_v" "$T/req.json" "$T/ans.json" >/dev/null
printf '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>and<|vision_start|><|image_pad|><|vision_end|>compare<|im_end|>\n<|im_start|>assistant\n' >"$T/prompt2.txt"
"$ENGINE" run "$T/q25" --tp 1 --prompt-file "$T/prompt2.txt" --image "$T/a.png" --image "$T/b.jpg" \
	--generate 5 --dump-generated "$T/gen2.json" >/dev/null 2>&1
check "chat with two images: the greedy tokens of run --image a --image b" test \
	"$(js "$T/ans.json" "d['choices'][0]['token_ids']")" = "$(js "$T/gen2.json" "d['generated']" 2>&1)"

# a2 has a's placeholder ids and was asked right after it: had the prefix
# cache keyed blocks by ids alone, a2 would have answered a's tokens
check "a.png and a2.png answer differently (the prefix cache keeps images apart)" \
	test "$want_a" != "$want_a2" -a -n "$want_a"

# load --images: chat requests with the folder's images, in turn
mkdir -p "$T/imgs"
cp "$T/a.png" "$T/b.jpg" "$T/imgs/"
ptok() { curl -s "$URL_v/metrics" | awk '$1 == "day0_prompt_tokens_total" { print $2 }'; }
printf '{"messages":[{"role":"user","content":"Describe the image."}],"max_tokens":1,"temperature":0}' >"$T/req.json"
chat "$URL_v" "$T/req.json" "$T/ans.json" >/dev/null
t0=$(js "$T/ans.json" "d['usage']['prompt_tokens']")
p0=$(ptok)
run "$ENGINE" load --url "$URL_v" --images "$T/imgs" --requests 4 --concurrency 2 \
	--output-len 3 --json --no-api-check
check "load --images: exit 0" test "$RC" = 0
check "load --images: 4 requests, all ok" test \
	"$(js "$OUT" "d['levels'][0]['ok'], d['levels'][0]['errors']")" = "4 0"
check "load --images: the server prefilled the images' tokens (> 4 x (text $t0 + 3))" \
	test $(( $(ptok) - p0 )) -gt $(( 4 * (t0 + 3) ))
mkdir -p "$T/none"
expect_rc 2 "load --images on a folder without images: exit 2" "$ENGINE" load \
	--url "$URL_v" --images "$T/none"
contains "load --images: the empty folder named" "no .png, .jpg or .jpeg" "$ERR"

# probe --image: the endpoint's logprobs on image prompts against the
# float64 reference (tower, features, M-RoPE) of the same checkpoint; a
# checkpoint with other weights (another seed) must fail it
run "$ENGINE" probe --url "$URL_v" --model "$T/q25" --image "$T/a.png" \
	--image "$T/b.jpg" --top 3 --gen 3 --json
check "probe --image: exit 0" test "$RC" = 0
check "probe --image: 2 image prompts, 6 positions, top-1 100%, pass" test \
	"$(js "$OUT" "d['prompts'], d['positions'], d['top1'], d['status']")" = "2 6 1.0 pass"
check "probe --image: max |dlogprob| <= 1e-5 (f32 serving)" \
	$PY -c "import json,sys; sys.exit(not json.load(open('$OUT'))['max_abs'] <= 1e-5)"
# a bad local image is a usage error naming the file, found before any
# request (it was numerics.endpoint FAIL, exit 1, the endpoint blamed:
# "HTTP 400" for a truncated PNG)
mkdir -p "$T/adir.png"
head -c 3000 "$T/a.png" >"$T/trunc.png"
echo hello >"$T/text.png"
reqs() { curl -s "$URL_v/metrics" | awk '$1 ~ /^day0_requests_total/ { n += $2 } END { print n }'; }
n0=$(reqs)
for bad in "adir.png|not a regular file" "trunc.png|truncated" "text.png|not a PNG or JPEG" \
	"none.png|cannot open"; do
	f=${bad%%|*} why=${bad#*|}
	expect_rc 2 "probe --image $f: exit 2" "$ENGINE" probe --url "$URL_v" --model "$T/q25" \
		--image "$T/a.png" --image "$T/$f" --gen 2
	contains "… naming the file and what is wrong" "probe --image $T/$f: " "$ERR"
	contains "… ($why)" "$why" "$ERR"
done
check "… and no request was sent for any of them ($n0 -> $(reqs))" test "$(reqs)" = "$n0"
"$ENGINE" gen-model --like "$VL/qwen2.5-vl-7b-instruct/config.json" --seed 7 "$T/q25b" >/dev/null 2>&1
run "$ENGINE" probe --url "$URL_v" --model "$T/q25b" --image "$T/a.png" --top 3 --gen 2 --json
check "probe --image against other weights: exit 1, fail" test \
	"$RC $(js "$OUT" "d['status']" 2>/dev/null)" = "1 fail"

# TP 2: rank 0 encodes, every rank gets the features and positions
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
start_mpi() { # NAME ARGS...
	local name=$1; shift
	rm -f "$T/$name.port"
	timeout 300 $MPI -np 2 "$ENGINE" serve "$T/q25" "$@" --port 0 --port-file "$T/$name.port" \
		>"$T/$name.out" 2>"$T/$name.err" &
	PIDS="$PIDS $!"
	for _ in $(seq 300); do [ -s "$T/$name.port" ] && break; sleep 0.1; done
	eval "URL_$name=http://127.0.0.1:$(cat "$T/$name.port" 2>/dev/null)"
}
start_mpi tp --tp 2 --max-ctx 256 --block-tokens 16 --max-batch-tokens 16
body "$T/a.png" "What is this?" "" >"$T/req.json"
chat "$URL_tp" "$T/req.json" "$T/ans.json" >/dev/null
check "TP 2: chat a.png = run --image's greedy tokens" test \
	"$(js "$T/ans.json" "d['choices'][0]['token_ids']" 2>&1)" = "$want_a"
start_mpi pp --tp 1 --pp 2 --max-ctx 256
st=$(chat "$URL_pp" "$T/req.json" "$T/ans.json")
check "PP 2: an image is a 400 (not served with pipeline stages yet)" test "$st" = 400
contains "PP 2: the 400 says why" "pipeline stages" "$T/ans.json"

# refusals
printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}' >"$T/req.json"
st=$(chat "$URL_v" "$T/req.json" "$T/ans.json")
check "an http URL: 400" test "$st" = 400
contains "an http URL: the message says the server fetches nothing" "fetches nothing" "$T/ans.json"
head -c 200 "$T/a.png" >"$T/cut.png"
body "$T/cut.png" "x" "" >"$T/req.json"
st=$(chat "$URL_v" "$T/req.json" "$T/ans.json")
check "a truncated PNG: 400" test "$st" = 400
contains "a truncated PNG: named" "messages[0].content[0]: PNG" "$T/ans.json"
printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@@"}}]}]}' >"$T/req.json"
st=$(chat "$URL_v" "$T/req.json" "$T/ans.json")
check "bad base64: 400 naming it" test "$st" = 400
contains "bad base64: the message says base64" "base64" "$T/ans.json"
printf '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abcd"}}]}]}' >"$T/req.json"
st=$(chat "$URL_v" "$T/req.json" "$T/ans.json")
check "a data URL without ;base64: 400" test "$st" = 400
contains "a data URL without ;base64: malformed" "malformed data URL" "$T/ans.json"
curl -s "$URL_v/health" -o /dev/null -w '%{http_code}' >"$T/h"
check "the server is still up after the refusals" test "$(cat "$T/h")" = 200

# a text model: text chat works, an image is refused
start_serve t "$T/txt" --max-ctx 128
printf '{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}],"max_tokens":4,"temperature":0}' >"$T/req.json"
st=$(chat "$URL_t" "$T/req.json" "$T/ans.json")
check "text chat on a text model: 200" test "$st" = 200
check "text chat: 4 tokens, finish length" test \
	"$(js "$T/ans.json" "len(d['choices'][0]['token_ids']), d['choices'][0]['finish_reason']")" = "4 length"
# the same prompt by /v1/completions (the plain template) gives the same tokens
printf '{"prompt":"system: be brief\\nuser: hello there\\nassistant:","max_tokens":4,"temperature":0}' >"$T/req2.json"
curl -s "$URL_t/v1/completions" --data-binary @"$T/req2.json" >"$T/ans2.json"
check "text chat: the tokens of the templated prompt on /v1/completions" test \
	"$(js "$T/ans.json" "d['choices'][0]['token_ids']")" = "$(js "$T/ans2.json" "d['choices'][0]['token_ids']")"
body "$T/a.png" "x" "" >"$T/req.json"
st=$(chat "$URL_t" "$T/req.json" "$T/ans.json")
check "an image to a text model: 400" test "$st" = 400
contains "an image to a text model: says so" "text model" "$T/ans.json"

# the servers stop cleanly on SIGTERM (under ASan: no leak, no error)
for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
for p in $PIDS; do wait "$p" 2>/dev/null; done
PIDS=""
for n in v t tp pp; do
	check "server $n: no sanitizer report" sh -c "! grep -q Sanitizer '$T/$n.err'"
done
