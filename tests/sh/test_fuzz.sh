# A short libFuzzer run of the safetensors header parser (about 10 s),
# seeded with tests/corpus.
#   FUZZ_SECONDS=60 bash tests/sh/test_fuzz.sh    for a longer run
. "$(dirname "$0")/../lib.sh"
. "$DAY0_ROOT/tests/fuzz/run.sh"
fuzz_run fuzz fuzz_safetensors "$DAY0_ROOT/tests/fuzz/safetensors.dict" \
	"$DAY0_ROOT/tests/corpus" "${FUZZ_SECONDS:-10}" st_parse
