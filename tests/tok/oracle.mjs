// oracle.mjs - Hugging Face's own JavaScript tokenizer (@huggingface/tokenizers)
// as the reference day0's C tokenizer is held to.
//
//   node oracle.mjs MODULE_DIR TOKENIZER_DIR check FILE...    what `tok_batch DIR check` prints:
//        per file "E ids-with-template" and "E ids-without"; then for each
//        ids-without sequence (whole, first half, all but the first id)
//        "D " + the decoded text as JSON
//   node oracle.mjs MODULE_DIR TOKENIZER_DIR encode FILE...   one line of ids per file
//   node oracle.mjs MODULE_DIR TOKENIZER_DIR decode IDS_FILE  one line of JSON text per ids line
//   node oracle.mjs MODULE_DIR TOKENIZER_DIR bench FILE ROUNDS   prints MB/s of encode
//
// Files are read as bytes and decoded as TextDecoder does (invalid UTF-8 ->
// U+FFFD, BOM kept), which is what the C side does with its input.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modDir, tokDir, mode, ...rest] = process.argv.slice(2);
const { Tokenizer } = await import(
  pathToFileURL(join(modDir, "node_modules/@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const tj = JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8"));
let tc = {};
try { tc = JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8")); } catch {}
const tok = new Tokenizer(tj, tc);
const td = new TextDecoder("utf-8", { ignoreBOM: true });
const text = (f) => td.decode(readFileSync(f));

const cuts = (ids) => {
  const h = Math.floor(ids.length / 2);
  const out = [ids, ids.slice(0, h)];
  if (ids.length > 1) out.push(ids.slice(1));
  return out.filter((x) => x.length > 0);
};

if (mode === "check") {
  const all = [];
  for (const f of rest) {
    const t = text(f);
    const b = tok.encode(t, { add_special_tokens: false }).ids;
    process.stdout.write("E " + tok.encode(t).ids.join(",") + "\n");
    process.stdout.write("E " + b.join(",") + "\n");
    all.push(b);
  }
  for (const ids of all)
    for (const c of cuts(ids))
      process.stdout.write("D " + JSON.stringify(tok.decode(c)) + "\n");
} else if (mode === "encode") {
  for (const f of rest) {
    const t = text(f);
    const a = tok.encode(t).ids.join(",");
    const b = tok.encode(t, { add_special_tokens: false }).ids.join(",");
    process.stdout.write(a + "\n" + b + "\n");
  }
} else if (mode === "decode") {
  for (const line of readFileSync(rest[0], "utf8").split("\n")) {
    if (!line) continue;
    process.stdout.write(JSON.stringify(tok.decode(line.split(",").map(Number))) + "\n");
  }
} else if (mode === "bench") {
  const t = text(rest[0]);
  const rounds = Number(rest[1] || 3);
  const bytes = Buffer.byteLength(t, "utf8");
  tok.encode(t.slice(0, 1000));
  let best = Infinity;
  for (let r = 0; r < rounds; r++) {
    // a fresh tokenizer each round: its word cache must not carry over
    const fresh = new Tokenizer(tj, tc);
    const t0 = process.hrtime.bigint();
    fresh.encode(t);
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    if (dt < best) best = dt;
  }
  process.stdout.write((bytes / best / 1e6).toFixed(3) + "\n");
} else {
  console.error("usage: oracle.mjs MODULE_DIR TOKENIZER_DIR encode|decode|bench ...");
  process.exit(2);
}
