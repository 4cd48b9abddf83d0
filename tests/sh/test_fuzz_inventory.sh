# A short libFuzzer run (about 3 s) of the inventory parser
# (tests/fuzz/fuzz_inventory.c), seeded with tests/fuzz/inventory-corpus.
#   FUZZ_SECONDS=60 bash tests/sh/test_fuzz_inventory.sh    for a longer run
. "$(dirname "$0")/../lib.sh"
. "$DAY0_ROOT/tests/fuzz/run.sh"
fuzz_run "fuzz inventory" fuzz_inventory "$DAY0_ROOT/tests/fuzz/inventory.dict" \
	"$DAY0_ROOT/tests/fuzz/inventory-corpus" "${FUZZ_SECONDS:-3}" \
	"inventory files"
