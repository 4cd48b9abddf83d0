# The README's own examples run as written: every ```sh block of README.md
# is run with bash -e in a scratch directory holding build/, assets/ and
# playbooks/ (links to this tree), its /tmp/ paths moved into the scratch
# directory.  A block is skipped only when the line before it says
# `<!-- readme-test: skip (WHY) -->`: the cluster commands (SSH nodes) and
# `make demo` / `make test`, which are the suite itself (make test runs
# this test; make demo installs packages).  The "afterwards" block reads
# SESSION.db and LAST.db: a real release-day run on two local cards makes
# them.
. "$(dirname "$0")/../lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 DAY0_SESSIONS="$T/sessions"
S="$T/s"
mkdir -p "$S/tmp" "$DAY0_SESSIONS"
ln -s "$BUILD" "$S/build"
ln -s "$DAY0_ROOT/assets" "$S/assets"
ln -s "$DAY0_ROOT/playbooks" "$S/playbooks"

python3 - "$DAY0_ROOT/README.md" "$T/blocks" "$S/tmp/" >"$T/list" <<'PY'
import os, re, sys
readme, out, tmp = sys.argv[1:]
os.makedirs(out)
lines = open(readme).read().split("\n")
i, n, prev = 0, 0, ""
while i < len(lines):
    l = lines[i]
    if l.strip() == "```sh":
        j = i + 1
        while lines[j].strip() != "```":
            j += 1
        body = "\n".join(lines[i + 1:j]) + "\n"
        n += 1
        m = re.match(r"<!-- readme-test: skip \((.+)\) -->", prev.strip())
        if m:
            print("skip %d %s" % (n, m.group(1)))
        else:
            open(os.path.join(out, "%d.sh" % n), "w").write(body.replace("/tmp/", tmp))
            print("run %d line %d" % (n, i + 1))
        i = j
    if l.strip():
        prev = l
    i += 1
PY
[ $? -eq 0 ] && ok "README's sh blocks extracted: $(grep -c '^run' "$T/list") to run, $(grep -c '^skip' "$T/list") marked skip" ||
	fail "extract README blocks" "$(cat "$T/list")"
nskip=$(grep -c '^skip' "$T/list")
[ "$nskip" = 2 ] && ok "… exactly two skipped: the suite itself and the cluster" || fail "skipped blocks" "$(cat "$T/list")"
grep -q '^skip .*cluster' "$T/list" && ok "… the cluster block says why" || fail "cluster skip reason" "$(cat "$T/list")"
# Nothing but these two may be skipped: every other block runs.
[ "$(grep -c '^run' "$T/list")" -ge 2 ] && ok "… the others run" || fail "blocks to run" "$(cat "$T/list")"

# SESSION.db and LAST.db for the "afterwards" block: one real run, twice.
"$ENGINE" gen-model --arch qwen3_moe --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
	--head-dim 16 --ffn 128 --moe-ffn 32 --experts 4 --top-k 2 --vocab 256 --shards 2 \
	--force "$T/qm" >/dev/null || fail "gen-model for the sessions" "exit $?"
cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 2, "card_mem": "128MiB"}]}
JSON
expect_rc 0 "a release-day session for the afterwards block (GO)" timeout $RUN_LIMIT "$BUILD/day0" run \
	"$DAY0_ROOT/playbooks/release-day.json" --inventory "$T/inv.json" --model "$T/qm" --headless \
	-e soak_seconds=1 -e ep=1 --session "$DAY0_SESSIONS/last.db"
cp "$DAY0_SESSIONS/last.db" "$S/LAST.db"
cp "$DAY0_SESSIONS/last.db" "$S/SESSION.db"

while read -r what n rest; do
	[ "$what" = run ] || continue
	(cd "$S" && bash -e -o pipefail "$T/blocks/$n.sh") >"$T/b$n.out" 2>&1
	rc=$?
	[ "$rc" = 0 ] && ok "README block $n ($rest) runs as written" ||
		fail "README block $n ($rest)" "exit $rc: $(tail -c 600 "$T/b$n.out")"
done <"$T/list"
# What the blocks promise, checked in their products.
check "the run's token ids are inside the generated vocabulary" python3 -c "import json,sys; sys.exit(0 if json.load(open('$S/tmp/m/config.json'))['vocab_size'] > 211 else 1)"
check "the merge round trip left /tmp/m.back" test -d "$S/tmp/m.back"
check "report.html written by the afterwards block" grep -q '<html' "$S/report.html"
