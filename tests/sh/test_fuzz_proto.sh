# A short libFuzzer run (about 5 s) of the protocol's line parsers and of
# the store's JSON scanner against jansson (tests/fuzz/fuzz_proto.c),
# seeded with tests/fuzz/proto-corpus.
#   FUZZ_SECONDS=60 bash tests/sh/test_fuzz_proto.sh    for a longer run
. "$(dirname "$0")/../lib.sh"
. "$DAY0_ROOT/tests/fuzz/run.sh"
fuzz_run "fuzz proto" fuzz_proto "$DAY0_ROOT/tests/fuzz/proto.dict" \
	"$DAY0_ROOT/tests/fuzz/proto-corpus" "${FUZZ_SECONDS:-5}" \
	"line parsing and scanner-vs-jansson"
