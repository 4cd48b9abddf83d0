# A short libFuzzer run (about 5 s) of the image loading wrapper and the
# resampler (tests/fuzz/fuzz_image.c), seeded with tests/fuzz/image-corpus.
#   FUZZ_SECONDS=60 bash tests/sh/test_fuzz_image.sh    for a longer run
. "$(dirname "$0")/../lib.sh"
. "$DAY0_ROOT/tests/fuzz/run.sh"
fuzz_run "fuzz image" fuzz_image "$DAY0_ROOT/tests/fuzz/image.dict" \
	"$DAY0_ROOT/tests/fuzz/image-corpus" "${FUZZ_SECONDS:-5}" \
	"PNG/JPEG decoding and resizing"
