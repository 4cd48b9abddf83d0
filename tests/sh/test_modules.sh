#!/usr/bin/env bash
# The module arrows (docs/architecture.md): engine/ is the ground and sees
# nothing above it; store/ sees engine/; agent/ sees engine/; tui/ sees
# engine/ and store/; nothing outside agent/ includes an agent/ header.
# Checked two ways: every #include "X" of a module's sources resolves inside
# the folders it may see, and the Makefile compiles each module with only
# those folders on its include path (so a stray include fails the build).
. "$(dirname "$0")/../lib.sh"
cd "$DAY0_ROOT"

# engine/ is one module in sub-folders (formats/, kernels/, runtime/, ...):
# any of them may include any other; they are all "engine".
engine_dirs=$(find engine -type d | sort | tr '\n' ' ')
allowed() { # module -> folders it may include from
	case $1 in
	engine) echo "$engine_dirs" ;;
	store) echo "$engine_dirs store" ;;
	agent) echo "$engine_dirs agent" ;;
	tui) echo "$engine_dirs store tui" ;;
	esac
}

for m in engine store agent tui; do
	bad=""
	for f in $(find "$m" -name '*.[ch]' | sort); do
		[ -e "$f" ] || continue
		for inc in $(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
			found=""
			for d in $(allowed "$m"); do
				[ -e "$d/$inc" ] && found=$d
			done
			[ -n "$found" ] || bad="$bad $f:$inc"
		done
	done
	if [ -z "$bad" ]; then
		ok "$m/ includes only from: $(allowed "$m" | sed "s|engine/[^ ]* ||g")"
	else
		fail "$m/ includes only from: $(allowed "$m")" "outside its arrows:$bad"
	fi
done

# The checker itself must catch a stray include: a store/ source that names
# an agent/ header is refused (by the scan above, and by the compiler).
mkdir -p "$T/store"
printf '#include "agent.h"\n' >"$T/store/probe.c"
if ! [ -e "engine/agent.h" ] && ! [ -e "store/agent.h" ]; then
	ok "agent.h is not visible from store/ (scan would flag it)"
else
	fail "agent.h visibility" "agent.h found in engine/ or store/"
fi
inc=$(make -s --no-print-directory -f Makefile -pn 2>/dev/null | sed -n 's/^INC_store := //p' | head -1)
if [ -n "$inc" ] && ! cc -fsyntax-only $inc "$T/store/probe.c" 2>/dev/null; then
	ok "the Makefile's store/ include path refuses an agent/ header"
else
	fail "store/ include path" "'$inc' compiles an #include \"agent.h\""
fi
if [ -n "$inc" ] && printf '#include "util.h"\n#include "proto.h"\n' >"$T/store/probe2.c" &&
	cc -fsyntax-only $inc $(pkg-config --cflags jansson 2>/dev/null) "$T/store/probe2.c" 2>"$ERR"; then
	ok "the Makefile's store/ include path reaches the protocol in engine/"
else
	fail "store/ include path reaches engine/" "$(head -c 300 "$ERR")"
fi

# The store owns every SQL statement: tui/ holds none and never includes
# sqlite (the view asks store/reader.c, the report store/report_queries.c).
sql=$(grep -lE '#include <sqlite3.h>|"(SELECT|INSERT|UPDATE|DELETE) ' tui/*.c tui/*.h 2>/dev/null | tr '\n' ' ')
if [ -z "$sql" ]; then
	ok "tui/ holds no SQL and does not include sqlite3.h"
else
	fail "tui/ holds no SQL" "SQL or sqlite3.h in: $sql"
fi
