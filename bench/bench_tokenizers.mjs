// BPE encode throughput, tessera vs the npm implementations, on the same seeded mixed text (a few
// MB of documents: tests/clients/lib/texts.mjs, the texts of the exactness test), one thread
// each, vocabularies loaded beforehand. Checks that both gave the same ids (count and hash) and
// prints a table.
//
// usage: node bench/bench_tokenizers.mjs [--mb 4] [--repeat 3] [--bin build/bin]
//   needs tests/clients/node_modules (scripts/setup) and build/bin/tessera-bench-tokenizers.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const clients = path.join(here, "../tests/clients");
const arg = (name, dflt) => {
  const i = process.argv.indexOf("--" + name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const mb = Number(arg("mb", 4));
const repeat = Number(arg("repeat", 3));
const bin = arg("bin", path.join(here, "../build/bin"));

const { rng, mixedText } = await import(pathToFileURL(path.join(clients, "lib/texts.mjs")).href);
const gpt2 = createRequire(path.join(clients, "package.json"))("gpt-3-encoder");
const { default: llama } = await import(pathToFileURL(path.join(clients, "node_modules/llama-tokenizer-js/llama-tokenizer.js")).href);

// Documents of about 2 KB (prompt-sized), `mb` MB in all.
const r = rng(7);
const docs = [];
let bytes = 0;
while (bytes < mb * 1e6) {
  let d = "";
  while (Buffer.byteLength(d) < 2000) d += mixedText(r, 40) + (r() < 0.3 ? "\n\n" : " ");
  docs.push(d);
  bytes += Buffer.byteLength(d);
}
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tessera-bench-bpe-"));
process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));  // also when a step fails
const input = path.join(dir, "docs.jsonl");
fs.writeFileSync(input, docs.map(text => JSON.stringify({ text })).join("\n") + "\n");
const presets = path.join(dir, "presets");
const conv = spawnSync("node", [path.join(here, "../models/scripts/tokenizer_presets.mjs"), presets, path.join(clients, "node_modules")], { encoding: "utf8" });
if (conv.status !== 0) throw new Error(conv.stderr);

function npm(encode) {
  let best = Infinity, first = 0, tokens = 0, hash = 0;
  for (let k = 0; k < repeat; ++k) {
    let h = 2166136261 >>> 0, n = 0;
    const t0 = process.hrtime.bigint();
    for (const d of docs) {
      const ids = encode(d);
      for (const id of ids) h = Math.imul(h ^ id, 16777619) >>> 0;
      n += ids.length;
    }
    const took = Number(process.hrtime.bigint() - t0) / 1e9;
    if (k === 0) first = took;
    best = Math.min(best, took);
    tokens = n;
    hash = h;
  }
  return { seconds: best, mb_per_s: bytes / best / 1e6, first_mb_per_s: bytes / first / 1e6, tokens, hash };
}

function tessera(name) {
  const p = spawnSync(path.join(bin, "tessera-bench-tokenizers"), ["--tokenizer", path.join(presets, name), "--input", input, "--repeat", String(repeat)],
                      { encoding: "utf8" });
  if (p.status !== 0) throw new Error(`tessera-bench-tokenizers: ${p.stderr}`);
  return JSON.parse(p.stdout);
}

const rows = [
  ["GPT-2", "tessera", tessera("gpt2")],
  ["GPT-2", "gpt-3-encoder 1.1.4", npm(t => gpt2.encode(t))],
  ["LLaMA", "tessera", tessera("llama")],
  ["LLaMA", "llama-tokenizer-js 1.2.2", npm(t => llama.encode(t, false, true))],
];
console.log(`BPE encode throughput: ${docs.length} documents, ${(bytes / 1e6).toFixed(2)} MB of seeded mixed text, one thread, best of ${repeat}; node ${process.version}, ${os.cpus()[0].model}`);
// Both sides cache words (tessera: GPT-2's, bounded; gpt-3-encoder: all, unbounded): the first pass
// runs with cold caches, the best of the passes with warm ones.
console.log("| tokenizer | implementation | MB/s first pass | MB/s best | tokens | ids equal |");
console.log("|---|---|---:|---:|---:|---|");
let ok = true;
for (let i = 0; i < rows.length; ++i) {
  const [tok, impl, m] = rows[i];
  const ref = rows[i - (i % 2)][2];
  const same = m.tokens === ref.tokens && Number(m.hash) === Number(ref.hash);
  ok &&= same;
  console.log(`| ${tok} | ${impl} | ${m.first_mb_per_s.toFixed(2)} | ${m.mb_per_s.toFixed(2)} | ${m.tokens} | ${i % 2 ? (same ? "yes" : "NO") : "-"} |`);
}
for (const t of ["GPT-2", "LLaMA"]) {
  const [a, b] = rows.filter(r => r[0] === t).map(r => r[2]);
  console.log(`${t}: tessera ${(a.first_mb_per_s / b.first_mb_per_s).toFixed(1)}x the npm implementation (first pass), ${(a.mb_per_s / b.mb_per_s).toFixed(1)}x (best)`);
}
if (!ok) {
  console.error("bench_tokenizers: the implementations gave different ids");
  process.exit(1);
}
