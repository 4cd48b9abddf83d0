# Text prompts through the engine and the console: --prompt / --prompt-file
# in run (under mpirun, tp 2), perf, soak and validate, the shared layout
# options (tp defaults to 1), validate's text.generation (pass, and fail on
# a continuation that is not the reference's), and a console run whose
# headless table, report and Numerics screen show what the session file
# holds.
. "$(dirname "$0")/../lib.sh"
DAY0="$BUILD/day0"
export DAY0_SESSIONS="$T/sessions"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LANG=C.UTF-8 LC_ALL=C.UTF-8
mpi() { # NP ARGS...
	local np=$1; shift
	timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$ENGINE" "$@"
}
M="$T/m"
"$ENGINE" gen-model --arch qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 \
	--vocab 512 "$M" >/dev/null || fail "gen-model" "exit $?"
PROMPT="The release day begins."
"$ENGINE" tokenize "$M" --text "$PROMPT" >"$T/ids"
IDS=$(cat "$T/ids")

# ------------------------------------------------------------------ run
expect_rc 0 "run --prompt at tp 2" mpi 2 run "$M" --tp 2 --prompt "$PROMPT" --generate 4 \
	--dump-generated "$T/gen.json"
cp "$OUT" "$T/run.prompt"
contains "run --prompt: the prompt's token count" "$(echo "$IDS" | tr ',' '\n' | wc -l) prompt tokens" "$T/run.prompt"
contains "run --prompt: the prompt as text" "prompt text: $PROMPT" "$T/run.prompt"
contains "run --prompt: the generated text" "generated text: " "$T/run.prompt"
check "run --dump-generated: the prompt's ids are tokenize's" python3 -c "
import json, sys; d = json.load(open('$T/gen.json'))
sys.exit(not (','.join(map(str, d['prompt'])) == '$IDS' and len(d['generated']) == 4))"
expect_rc 0 "run --tokens (the same ids) at tp 2" mpi 2 run "$M" --tp 2 --tokens "$IDS" --generate 4
check "run: --prompt and --tokens generate the same" test \
	"$(grep '^generated:' "$OUT")" = "$(grep '^generated:' "$T/run.prompt")"
printf '%s' "$PROMPT" >"$T/prompt.txt"
expect_rc 0 "run --prompt-file, no --tp (tp 1)" mpi 1 run "$M" --prompt-file "$T/prompt.txt" --generate 4
check "run --prompt-file generates the same" test \
	"$(grep '^generated:' "$OUT")" = "$(grep '^generated:' "$T/run.prompt")"
contains "run without --tp is tp 1" "tp 1 pp 1 ep 1" "$OUT"
expect_rc 0 "run --events --prompt" mpi 1 run "$M" --prompt "$PROMPT" --generate 2 --events
check "run --events: the generated log carries the texts" python3 -c "
import json, sys
ev = [json.loads(l) for l in open('$OUT') if l.startswith('{')]
g = [e for e in ev if e.get('msg') == 'generated']
sys.exit(not (g and g[0]['prompt_text'] == '$PROMPT' and 'text' in g[0] and len(g[0]['tokens']) == 2))"
expect_rc 2 "run: --prompt and --tokens together" mpi 1 run "$M" --prompt x --tokens 1
contains "run: says give one" "give exactly one of --tokens, --prompt and --prompt-file" "$ERR"
mkdir -p "$T/notok" && cp "$M"/config.json "$M"/*.safetensors "$T/notok/"
expect_rc 2 "run --prompt on a model without tokenizer.json" mpi 1 run "$T/notok" --prompt x
contains "run --prompt: names the missing tokenizer" "--prompt needs the model's tokenizer.json" "$ERR"
expect_rc 1 "run: --dump-generated that cannot be written fails" mpi 1 run "$M" --tokens 1 --generate 1 \
	--dump-generated "$T/no/such/dir/g.json"
contains "run: names the file" "$T/no/such/dir/g.json" "$ERR"
expect_rc 2 "run: --tp 0 refused by the shared parser" mpi 1 run "$M" --tp 0 --tokens 1
contains "run: --tp message" "--tp: expected an integer >= 1, got '0'" "$ERR"

# ------------------------------------------------------ perf, soak, convert
expect_rc 0 "perf --prompt, no --tp" mpi 1 perf "$M" --prompt "$PROMPT" --gen-tokens 3
contains "perf --prompt: the prompt's tokens" "($(echo "$IDS" | tr ',' '\n' | wc -l) prompt tokens" "$OUT"
expect_rc 2 "perf: --prompt-tokens and --prompt together" mpi 1 perf "$M" --prompt x --prompt-tokens 4 --gen-tokens 2
expect_rc 0 "soak --prompt, no --tp" mpi 1 soak "$M" --prompt "$PROMPT" --iterations 2
contains "soak --prompt: passes" "stability.soak  pass" "$OUT"
expect_rc 0 "convert carries the tokenizer" "$ENGINE" convert "$M" "$T/conv" --dtype f32 --tp 2
check "convert: tokenizer.json beside the rank files" cmp -s "$M/tokenizer.json" "$T/conv/tokenizer.json"
expect_rc 0 "run --prompt on the converted files" mpi 2 run "$T/conv" --tp 2 --prompt "$PROMPT" --generate 4
check "run on converted files generates the same" test \
	"$(grep '^generated:' "$OUT")" = "$(grep '^generated:' "$T/run.prompt")"
expect_rc 2 "convert still requires --tp" "$ENGINE" convert "$M" "$T/conv2" --dtype f32
contains "convert: --tp is required" "--tp is required" "$ERR"

# ------------------------------------------------------ validate: text
expect_rc 0 "validate --levels text: the run's continuation" "$ENGINE" validate "$M" \
	--prompt "$PROMPT" --generated "$T/gen.json" --levels text --events
check "validate: text.generation pass or warn, 4 of 4 equal" python3 -c "
import json, sys
c = [json.loads(l) for l in open('$OUT') if '\"check\"' in l]
c = [x for x in c if x['item'] == 'text.generation'][0]
sys.exit(not (c['status'] in ('pass', 'warn') and c['agree'] == 4 and c['n'] == 4
              and c['prompt_text'] == '$PROMPT' and c['text'] == c['ref_text']))"
python3 - "$T/gen.json" "$T/bad.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["generated"][1] = (d["generated"][1] + 1) % 400
json.dump(d, open(sys.argv[2], "w"))
EOF
expect_rc 1 "validate: a continuation that differs from the reference fails" "$ENGINE" validate "$M" \
	--prompt "$PROMPT" --generated "$T/bad.json" --levels text
contains "validate: says how many tokens agree" "1 of 4 tokens equal" "$OUT"
contains "validate: text.generation fail" "text.generation fail" "$OUT"
expect_rc 0 "validate --text-tokens 1 checks only the first" "$ENGINE" validate "$M" \
	--prompt "$PROMPT" --generated "$T/bad.json" --levels text --text-tokens 1
expect_rc 2 "validate: a generated file for another prompt" "$ENGINE" validate "$M" \
	--prompt "Another prompt" --generated "$T/gen.json" --levels text
contains "validate: names the file" "its prompt is not the one given to validate" "$ERR"

# ---------------------------------------- the console: table, report, screen
cat >"$T/inv.json" <<'JSON'
{"name": "one", "nodes": [{"name": "local", "transport": "local", "cards": 1, "card_mem": "1GiB"}]}
JSON
cat >"$T/pb.json" <<JSON
{"name": "text", "vars": {"prompt": "$PROMPT"},
 "stages": [
  {"id": "run", "step": "run", "on": "cluster",
   "args": ["\${model}", "--prompt", "\${prompt}", "--generate", "4",
            "--dump-generated", "$T/gen-console.json"]},
  {"id": "validate", "step": "validate", "on": "first", "needs": ["run"],
   "args": ["\${model}", "--prompt", "\${prompt}", "--generated", "$T/gen-console.json",
            "--levels", "text", "--text-tokens", "4"],
   "checks": {"text.generation": {}}}]}
JSON
run "$DAY0" run "$T/pb.json" --inventory "$T/inv.json" --model "$M" --headless --session "$T/s.db"
if [ "$RC" -eq 0 ]; then ok "console: a text playbook runs to GO"; else fail "console: text playbook" "exit $RC: $(tail -c 400 "$OUT") $(tail -c 300 "$ERR")"; fi
SQL="select json_extract(e.body, '\$.status'), json_extract(e.body, '\$.prompt_text'),
	json_extract(e.body, '\$.text'), json_extract(e.body, '\$.agree') from checks c join events e
	on e.node = c.node and e.seq = c.seq where c.item = 'text.generation'"
sqlite3 -separator $'\t' "$T/s.db" "$SQL" >"$T/row"
IFS=$'\t' read -r st pr gtext agree <"$T/row"
check "console: the session file holds the check with its texts" test "$pr" = "$PROMPT" -a "$agree" = 4
check "console: the headless table shows the stored status" grep -qE "^text.generation +$st +[^ ]+ +local" "$OUT"
"$DAY0" report "$T/s.db" --format json >"$T/r.json"
check "report json: the texts are the session file's" python3 -c "
import json, sys
t = json.load(open('$T/r.json'))['text'][0]
sys.exit(not (t['prompt'] == '''$pr''' and t['agree'] == 4 and t['generated'] == open('$T/row').read().split('\t')[2]))"
"$DAY0" report "$T/s.db" --format md >"$T/r.md"
contains "report md: the text generation table with the prompt" "| $PROMPT |" "$T/r.md"
SOCK="day0-text-$$"
tmux -L "$SOCK" new-session -d -x 120 -y 30 "env TERM=screen-256color $DAY0 replay $T/s.db; sleep 30"
sleep 1.5
tmux -L "$SOCK" send-keys G
sleep 0.5
tmux -L "$SOCK" send-keys 5
sleep 1
tmux -L "$SOCK" capture-pane -p >"$T/screen"
tmux -L "$SOCK" kill-server 2>/dev/null
contains "Numerics screen: 4 of 4 tokens" "text.generation  4 of 4 greedy tokens equal" "$T/screen"
contains "Numerics screen: the prompt (as stored)" "prompt    $pr" "$T/screen"
