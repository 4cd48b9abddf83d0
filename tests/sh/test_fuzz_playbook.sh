# A short libFuzzer run (about 3 s) of the playbook parser
# (tests/fuzz/fuzz_playbook.c), seeded with tests/fuzz/playbook-corpus.
#   FUZZ_SECONDS=60 bash tests/sh/test_fuzz_playbook.sh    for a longer run
. "$(dirname "$0")/../lib.sh"
. "$DAY0_ROOT/tests/fuzz/run.sh"
fuzz_run "fuzz playbook" fuzz_playbook "$DAY0_ROOT/tests/fuzz/playbook.dict" \
	"$DAY0_ROOT/tests/fuzz/playbook-corpus" "${FUZZ_SECONDS:-3}" \
	"playbook files"
