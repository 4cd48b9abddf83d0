# The kill/resume soak over ssh (bench/resume_soak.sh) in its short form:
# 3 random SIGKILLs of the console, each resumed; seq audit after each,
# spool-vs-file at the end, GO.  CYCLES=20 for the soak itself.
. "$(dirname "$0")/../lib.sh"
REFERENCE=0 CYCLES=${CYCLES:-3} NODES=2 BUILD="$BUILD" bash "$DAY0_ROOT/bench/resume_soak.sh"
