// Embeddings through the official clients, unmodified, against a real tessera-serve serving the
// seeded sentence-transformers folder tests/data/models/tiny-embed: OpenAI's `openai`
// (embeddings.create with a list; float, the client's own base64 default, and base64 asked for)
// and Hugging Face's @huggingface/inference (featureExtraction, sentenceSimilarity) given only the
// base URL. Vectors are checked against the float64 numpy goldens of
// scripts/make_embedding_goldens.py (token-id inputs), within their stated 1e-4.
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { featureExtraction, sentenceSimilarity } from "@huggingface/inference";
import { serverForSuite } from "./lib/tessera.mjs";

const dataDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "data", "models");
const goldens = JSON.parse(readFileSync(path.join(dataDir, "tiny_embed_goldens.json"), "utf8"));
const tolerance = 1e-4;
const width = 40;

/// A golden batch's sequences (token id lists) and its unit-length mean-pooled vectors.
function goldenBatch(i) {
  const b = goldens.embed_batches[i];
  const seqs = [];
  let at = 0;
  for (const len of b.lengths) {
    seqs.push(b.token_ids.slice(at, at + len));
    at += len;
  }
  const want = seqs.map((_, s) => b.mean_normalized.slice(s * width, (s + 1) * width));
  return { seqs, want, tokens: b.token_ids.length };
}

function expectClose(got, want, what, tol = tolerance) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let j = 0; j < want.length; ++j)
    assert.ok(Math.abs(got[j] - want[j]) <= tol, `${what}[${j}]: ${got[j]} vs ${want[j]}`);
}

function fromBase64(text) {
  const bytes = Buffer.from(text, "base64");
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
}

describe("openai client: embeddings against tessera-serve --model tiny-embed", () => {
  const server = serverForSuite(["--model", path.join(dataDir, "tiny-embed")]);
  let client;
  before(() => {
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  });

  test("embeddings.create with a list of token-id lists, float", async () => {
    const { seqs, want, tokens } = goldenBatch(0);
    const res = await client.embeddings.create({ model: "tiny-embed", input: seqs, encoding_format: "float" });
    assert.equal(res.data.length, seqs.length);
    res.data.forEach((d, i) => {
      assert.equal(d.index, i);
      expectClose(d.embedding, want[i], `data[${i}]`);
    });
    assert.equal(res.usage.prompt_tokens, tokens);
    assert.equal(res.model, "tiny-embed");
  });

  test("embeddings.create without encoding_format (the client asks base64 and decodes)", async () => {
    const { seqs, want } = goldenBatch(1);
    const res = await client.embeddings.create({ model: "tiny-embed", input: seqs });
    res.data.forEach((d, i) => expectClose(d.embedding, want[i], `data[${i}]`));
  });

  test("embeddings.create with encoding_format base64: little-endian float32, equal to float", async () => {
    const input = ["a tile emulator", "the host answered", "query: where"];
    const b64 = await client.embeddings.create({ model: "tiny-embed", input, encoding_format: "base64" });
    const flt = await client.embeddings.create({ model: "tiny-embed", input, encoding_format: "float" });
    assert.equal(b64.data.length, 3);
    b64.data.forEach((d, i) => {
      assert.equal(typeof d.embedding, "string");
      expectClose(fromBase64(d.embedding), flt.data[i].embedding, `base64[${i}]`, 1e-6);
      const norm = Math.hypot(...flt.data[i].embedding);
      assert.ok(Math.abs(norm - 1) < 1e-5, `unit length: ${norm}`);
    });
  });

  // TEI's OpenAI errors are {"message", "code", "type"} at the top level (not OpenAI's
  // {"error": {...}}), so the client reports the status without a message, as it does with TEI.
  test("a refused request is an APIError with TEI's status", async () => {
    await assert.rejects(client.embeddings.create({ model: "tiny-embed", input: [] }), (e) => {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.equal(e.status, 400);
      return true;
    });
  });
});

describe("@huggingface/inference: feature extraction and sentence similarity on the base URL", () => {
  const server = serverForSuite(["--model", path.join(dataDir, "tiny-embed")]);

  test("featureExtraction of token-id lists matches the goldens", async () => {
    const { seqs, want } = goldenBatch(1);
    const got = await featureExtraction({ endpointUrl: server.url, inputs: seqs });
    assert.equal(got.length, seqs.length);
    got.forEach((v, i) => expectClose(v, want[i], `vector ${i}`));
  });

  test("featureExtraction of texts and sentenceSimilarity agree (cosine of unit vectors)", async () => {
    const source = "the tile emulator";
    const sentences = ["the tile emulator", "a host process", "tiles and hosts"];
    const vecs = await featureExtraction({ endpointUrl: server.url, inputs: [source, ...sentences] });
    assert.equal(vecs.length, 4);
    const sims = await sentenceSimilarity({ endpointUrl: server.url, inputs: { source_sentence: source, sentences } });
    assert.equal(sims.length, 3);
    sims.forEach((s, i) => {
      const dot = vecs[0].reduce((acc, x, j) => acc + x * vecs[i + 1][j], 0);
      assert.ok(Math.abs(s - dot) < 1e-5, `similarity ${i}: ${s} vs ${dot}`);
    });
    assert.ok(Math.abs(sims[0] - 1) < 1e-5);
  });
});
