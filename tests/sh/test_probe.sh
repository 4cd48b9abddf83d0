# day0-engine probe pointed at the wrong checkpoint: the server serves a
# model with a bigger vocabulary than --model's; a well-formed
# token_id:N key outside --model's vocabulary says so (it said the key
# "is not token_id:N", blaming return_tokens_as_token_ids).
. "$(dirname "$0")/../lib.sh"
command -v mpirun >/dev/null || { fail "mpirun is installed" "missing (make deps)"; exit 1; }
gen() { # DIR VOCAB
	"$ENGINE" gen-model --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 128 \
		--vocab "$2" --max-pos 512 "$1" >/dev/null
}
gen "$T/small" 256
gen "$T/big" 2048
timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 \
	"$ENGINE" serve "$T/big" --tp 1 --max-ctx 512 --kv-seqs 2 --port 0 --port-file "$T/port" \
	>"$T/serve.out" 2>"$T/serve.err" &
PIDS="$!"
for _ in $(seq 300); do [ -s "$T/port" ] && break; sleep 0.1; done
U="http://127.0.0.1:$(cat "$T/port")"
check "serve (2048-token vocabulary) listens" test -s "$T/port"
expect_rc 0 "probe with the served checkpoint passes" "$ENGINE" probe --url "$U" --model "$T/big" --n 2
expect_rc 1 "probe with another checkpoint (256 tokens): numerics.endpoint fails, exit 1" \
	"$ENGINE" probe --url "$U" --model "$T/small" --n 2
contains "… saying the id is outside --model's vocabulary: the server serves another model" \
	"is outside the 256-token vocabulary of --model: the server serves another model" "$OUT"
check "… not that the key is malformed" bash -c "! grep -q 'is not token_id:N' '$OUT' '$ERR'"
# --image on a text model is a usage error before any request, as run and
# validate say it (it sent the image and failed numerics.endpoint, exit 1)
printf '\x89PNG\r\n' >"$T/any.png"
expect_rc 2 "probe --image with a text model's --model: exit 2" "$ENGINE" probe --url "$U" --model "$T/small" --image "$T/any.png"
contains "… naming the model and why" "$T/small: a text model (no vision_config): --image needs a vision-language checkpoint" "$ERR"
