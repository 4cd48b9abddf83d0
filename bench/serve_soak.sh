#!/usr/bin/env bash
# bench/serve_soak.sh - the paged KV cache's randomized soak for SOAK_S
# seconds (default 1800: 30 minutes): tests/sh/test_serve_soak.sh at full
# length (16 clients at ~2x the KV capacity: random lengths, shared
# prefixes, disconnects, cancels, over-long requests).  Prints its checks
# (ok/FAIL lines) and the tallies; the resident-memory figure is the last
# third's peak against the first third's.  Exits 1 when a check fails.
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build} SOAK_S=${SOAK_S:-1800}
export DAY0_ROOT=$PWD
bash tests/sh/test_serve_soak.sh | tee /dev/stderr | grep -q '^FAIL' && exit 1
exit 0
