# Every program and step answers --help, and bad arguments are usage errors.
. "$(dirname "$0")/../lib.sh"

expect_rc 0 "day0-engine --help" "$ENGINE" --help
for step in gen-model verify convert merge; do
	contains "--help lists $step" "$step" "$OUT"
done
expect_rc 0 "day0-engine --version" "$ENGINE" --version
contains "--version names the protocol" "protocol 1" "$OUT"
expect_rc 2 "no step is a usage error" "$ENGINE"
expect_rc 2 "an unknown step is a usage error" "$ENGINE" frobnicate
contains "the unknown step is named" "unknown step 'frobnicate'" "$ERR"
for step in gen-model verify convert merge; do
	expect_rc 0 "$step --help" "$ENGINE" "$step" --help
	contains "$step --help shows usage" "usage: day0-engine $step" "$OUT"
done

expect_rc 2 "gen-model without --arch" "$ENGINE" gen-model "$T/x"
contains "says --arch is required" "--arch is required" "$ERR"
expect_rc 2 "gen-model with an unknown arch" "$ENGINE" gen-model --arch gpt9 "$T/x"
contains "names the arch" "'gpt9'" "$ERR"
expect_rc 2 "gen-model --layers abc" "$ENGINE" gen-model --arch llama --layers abc "$T/x"
contains "says what --layers expects" "--layers: expected an integer" "$ERR"
expect_rc 2 "gen-model --heads 3 --hidden 64" "$ENGINE" gen-model --arch llama --heads 3 "$T/x"
expect_rc 2 "gen-model --kv-heads 3 --heads 4" "$ENGINE" gen-model --arch llama --kv-heads 3 "$T/x"
expect_rc 2 "gen-model --dtype f8" "$ENGINE" gen-model --arch llama --dtype f8 "$T/x"
expect_rc 2 "gen-model --rope-scaling bogus" "$ENGINE" gen-model --arch llama --rope-scaling spiral:2 "$T/x"
expect_rc 2 "gen-model --top-k above --experts" "$ENGINE" gen-model --arch mixtral --experts 2 --top-k 3 "$T/x"
expect_rc 2 "gen-model --experts on a dense arch" "$ENGINE" gen-model --arch llama --experts 4 "$T/x"
expect_rc 2 "gen-model --shards more than tensors" "$ENGINE" gen-model --arch llama --layers 1 --shards 500 "$T/x"
check "failed gen-model runs leave nothing behind" bash -c "! ls -d '$T'/x* 2>/dev/null"
expect_rc 2 "an unknown option" "$ENGINE" verify --frob "$T"
contains "names the option" "'--frob'" "$ERR"
expect_rc 2 "convert without --dtype" "$ENGINE" convert "$T" "$T/y" --tp 2
expect_rc 2 "convert --tp 0" "$ENGINE" convert "$T" "$T/y" --tp 0 --dtype f32
expect_rc 2 "convert of a missing model" "$ENGINE" convert "$T/none" "$T/y" --tp 1 --dtype f32
expect_rc 2 "merge of a directory without layout.json" "$ENGINE" merge "$T" "$T/y"

# Existing output needs --force; --force replaces it whole.
expect_rc 0 "gen-model into a new directory" "$ENGINE" gen-model --arch llama "$T/g"
expect_rc 2 "gen-model into a non-empty directory" "$ENGINE" gen-model --arch llama "$T/g"
contains "suggests --force" "--force" "$ERR"
touch "$T/g/stale-file"
expect_rc 0 "gen-model --force" "$ENGINE" gen-model --arch llama --force "$T/g"
check "--force replaced the directory" test ! -e "$T/g/stale-file"
