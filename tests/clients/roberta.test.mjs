// RoBERTa / XLM-R through Hugging Face's @huggingface/inference, unmodified, given only the base
// URL: textClassification against tessera-host serving the seeded RobertaForSequenceClassification
// tests/data/models/tiny-roberta-cls on 2 tile processes (text tokenized by its byte-level BPE
// tokenizer.json), featureExtraction and sentenceSimilarity against tessera-serve serving the
// sentence-transformers XLMRobertaModel tiny-xlmr-embed (XLM-R's Unigram tokenizer.json). Answers
// are checked against the float64 numpy goldens of scripts/make_encoder_tokenizers.py (text ->
// tokenizer -> model in numpy) within their 1e-4.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { featureExtraction, sentenceSimilarity, textClassification } from "@huggingface/inference";
import { serverForSuite } from "./lib/tessera.mjs";

const dataDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "data", "models");
const goldens = JSON.parse(readFileSync(path.join(dataDir, "encoder_tokenizer_goldens.json"), "utf8")).http;
const tolerance = 1e-4;
const labels = ["negative", "neutral", "positive"];

function softmax(v) {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

describe("@huggingface/inference textClassification: RoBERTa on tiles (tessera-host)", () => {
  const server = serverForSuite(
    ["--model", path.join(dataDir, "tiny-roberta-cls"), "--tiles", "2", "--tile-memory", "64MiB", "--serve"],
    "tessera-host");

  test("scores are the softmax of the golden logits, per label", async () => {
    for (const g of goldens.classify) {
      const got = await textClassification({ endpointUrl: server.url, inputs: g.text });
      assert.equal(got.length, 3, JSON.stringify(got));
      const want = softmax(g.logits);
      for (const { label, score } of got) {
        const k = labels.indexOf(label);
        assert.ok(k >= 0, label);
        assert.ok(Math.abs(score - want[k]) <= tolerance, `${g.text} ${label}: ${score} vs ${want[k]}`);
      }
    }
  });
});

describe("@huggingface/inference featureExtraction: XLM-R embeddings (tessera-serve)", () => {
  const server = serverForSuite(["--model", path.join(dataDir, "tiny-xlmr-embed")]);

  test("featureExtraction of texts matches the goldens; sentenceSimilarity is their cosine", async () => {
    const texts = goldens.embed.map((g) => g.text);
    const got = await featureExtraction({ endpointUrl: server.url, inputs: texts });
    assert.equal(got.length, texts.length);
    got.forEach((v, i) => {
      const want = goldens.embed[i].normalized;
      assert.equal(v.length, want.length);
      v.forEach((x, j) => assert.ok(Math.abs(x - want[j]) <= tolerance, `${texts[i]}[${j}]: ${x} vs ${want[j]}`));
    });
    const sims = await sentenceSimilarity({
      endpointUrl: server.url, inputs: { source_sentence: texts[0], sentences: texts.slice(1) } });
    sims.forEach((s, i) => {
      const dot = goldens.embed[0].normalized.reduce((a, x, j) => a + x * goldens.embed[i + 1].normalized[j], 0);
      assert.ok(Math.abs(s - dot) <= tolerance, `similarity ${i}: ${s} vs ${dot}`);
    });
  });
});
