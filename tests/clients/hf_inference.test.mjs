// Hugging Face's own JS client (@huggingface/inference, from npm, unmodified) against a real
// tessera-serve, given nothing but tessera's base URL, as a user switching from a Hugging Face
// endpoint or TEI would point it. Every answer is checked against the reference forward.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { InferenceClient, request, textClassification } from "@huggingface/inference";
import { referenceBatch, referenceLogits, scores, serverForSuite } from "./lib/tessera.mjs";

const model = "bert-tiny";
// Reference logits are printed with 5 decimals; batched forwards differ by up to 2e-4.
const tolerance = 5e-4;

function expectScores(got, want, what) {
  assert.ok(Array.isArray(got), `${what}: not a list: ${JSON.stringify(got)}`);
  assert.equal(got.length, Object.keys(want).length, `${what}: ${JSON.stringify(got)}`);
  for (const { label, score } of got) {
    assert.ok(label in want, `${what}: unknown label ${label}`);
    assert.ok(Math.abs(score - want[label]) <= tolerance, `${what}: ${label} ${score} vs reference ${want[label]}`);
  }
  for (let i = 1; i < got.length; ++i) assert.ok(got[i - 1].score >= got[i].score, `${what}: not sorted`);
}

describe("@huggingface/inference against tessera-serve", () => {
  const server = serverForSuite(["--model", model]);

  test("textClassification given only the base URL", async () => {
    const texts = ["I like you. I love you", "The tile emulator answered.", "Café naïve 中文"];
    const want = referenceBatch(model, texts.map((t) => [t]));
    for (const [i, text] of texts.entries()) {
      const got = await textClassification({ endpointUrl: server.url, inputs: text });
      expectScores(got, scores(want[i]), text);
    }
  });

  test("InferenceClient.endpoint(url).textClassification with parameters", async () => {
    const client = new InferenceClient().endpoint(server.url);
    const text = "a sentence to classify";
    const logits = referenceLogits(model, text);
    const want = scores(logits);
    expectScores(await client.textClassification({ inputs: text }), want, "endpoint");
    const top = await client.textClassification({ inputs: text, parameters: { top_k: 1 } });
    assert.equal(top.length, 1);
    const best = Object.keys(want).reduce((a, b) => (want[a] >= want[b] ? a : b));
    assert.equal(top[0].label, best);
    const raw = await client.textClassification({ inputs: text, parameters: { function_to_apply: "none" } });
    for (const { label, score } of raw) assert.ok(Math.abs(score - logits[label]) <= tolerance, `raw ${label}`);
  });

  test("request-level call: a pair (TEI's [text, text_pair])", async () => {
    const got = await request(
      { endpointUrl: server.url, inputs: ["What is tessera?", "A tile emulator for NLP inference."] },
      { task: "text-classification" },
    );
    assert.equal(got.length, 1, "a single input answers a list holding one list");
    expectScores(got[0], scores(referenceLogits(model, "What is tessera?", "A tile emulator for NLP inference.")), "pair");
  });

  test("request-level call: a batch of singles and pairs", async () => {
    const inputs = [["first text"], ["a question", "an answer"], ["third text"]];
    const got = await request({ endpointUrl: server.url, inputs }, { task: "text-classification" });
    assert.equal(got.length, 3);
    const want = referenceBatch(model, inputs);
    inputs.forEach((_, i) => expectScores(got[i], scores(want[i]), `batch[${i}]`));
  });

  test("a refused request reaches the client as an error, not an answer", async () => {
    await assert.rejects(textClassification({ endpointUrl: server.url, inputs: "" }), (e) => {
      assert.match(String(e.message), /empty/);
      return true;
    });
  });
});

describe("@huggingface/inference with an API key", () => {
  const server = serverForSuite(["--model", model, "--api-key", "client-test-key-0123456789"]);

  test("accessToken is sent as the bearer token tessera checks", async () => {
    const text = "keyed request";
    const got = await textClassification({ endpointUrl: server.url, inputs: text, accessToken: "client-test-key-0123456789" });
    expectScores(got, scores(referenceLogits(model, text)), "with key");
    await assert.rejects(textClassification({ endpointUrl: server.url, inputs: text, accessToken: "wrong-key-0123456789" }));
    await assert.rejects(textClassification({ endpointUrl: server.url, inputs: text }));
  });
});
