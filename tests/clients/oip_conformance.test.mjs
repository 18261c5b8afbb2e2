// Open Inference Protocol (KServe v2) conformance of a real tessera-serve, from the protocol's own
// REST schemas (oip/rest_predict_v2.schemas.yaml): requests in JSON and in the binary tensor data
// form Triton's clients send by default, every response validated against the schema with ajv,
// logits checked against the reference forward.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import Ajv from "ajv";
import YAML from "yaml";
import { referenceBatch, serverForSuite } from "./lib/tessera.mjs";

const model = "bert-tiny";
const tolerance = 5e-4;

// --- the protocol's schemas -------------------------------------------------------------------
const spec = YAML.parse(readFileSync(new URL("./oip/rest_predict_v2.schemas.yaml", import.meta.url), "utf8"));
// The binary tensor data extension's amendment: an output sent as binary data has
// parameters.binary_data_size and no "data". Applied to a copy; the protocol's file stays as is.
const amended = structuredClone(spec);
const output = amended.components.schemas.response_output;
output.required = output.required.filter((f) => f !== "data");
output.if = { required: ["parameters"], properties: { parameters: { required: ["binary_data_size"] } } };
output.then = { not: { required: ["data"] }, properties: { parameters: { properties: { binary_data_size: { type: "integer", minimum: 0 } } } } };
output.else = { required: ["data"] };

const ajv = new Ajv({ strict: false, allErrors: true });
ajv.addSchema(spec, "oip");
ajv.addSchema(amended, "oip-binary");
const validators = {};
function validate(schemaName, value, what, document = "oip") {
  const key = `${document}#/components/schemas/${schemaName}`;
  validators[key] ??= ajv.getSchema(key);
  assert.ok(validators[key], `no schema ${key}`);
  const ok = validators[key](value);
  assert.ok(ok, `${what}: not a valid ${schemaName}: ${ajv.errorsText(validators[key].errors)}\n${JSON.stringify(value)}`);
}

// --- requests ---------------------------------------------------------------------------------
/// The binary tensor data form: JSON, then the tensors' bytes; BYTES elements each a 4-byte
/// little-endian length and the bytes.
function bytesTensor(strings) {
  const parts = strings.map((s) => {
    const b = Buffer.from(s, "utf8");
    const len = Buffer.alloc(4);
    len.writeUInt32LE(b.length);
    return Buffer.concat([len, b]);
  });
  return Buffer.concat(parts);
}
function int64Tensor(values) {
  const b = Buffer.alloc(8 * values.length);
  values.forEach((v, i) => b.writeBigInt64LE(BigInt(v), 8 * i));
  return b;
}

async function infer(url, body, binary) {
  const headers = { "Content-Type": "application/json" };
  let payload = JSON.stringify(body);
  validate("inference_request", binary ? withDataPlaceholders(body) : body, "the test's own request");
  if (binary) {
    const json = Buffer.from(payload, "utf8");
    headers["Inference-Header-Content-Length"] = String(json.length);
    headers["Content-Type"] = "application/octet-stream";
    payload = Buffer.concat([json, binary]);
  }
  const res = await fetch(`${url}/v2/models/${model}/infer`, { method: "POST", headers, body: payload });
  const raw = Buffer.from(await res.arrayBuffer());
  const headerLength = res.headers.get("inference-header-content-length");
  const jsonLength = headerLength === null ? raw.length : Number(headerLength);
  const answer = JSON.parse(raw.subarray(0, jsonLength).toString("utf8"));
  return { status: res.status, answer, binary: raw.subarray(jsonLength), contentType: res.headers.get("content-type") };
}
/// A binary request's JSON has no "data" for binary inputs; the schema requires it, and the
/// extension replaces it: for validating our own requests, stand an empty list in.
function withDataPlaceholders(body) {
  const copy = structuredClone(body);
  for (const i of copy.inputs) if (i.parameters?.binary_data_size !== undefined) i.data = [];
  return copy;
}

function logitsOf(answer, binary) {
  const out = answer.outputs.find((o) => o.name === "logits");
  assert.ok(out, `no logits output: ${JSON.stringify(answer)}`);
  assert.equal(out.datatype, "FP32");
  if (out.parameters?.binary_data_size !== undefined) {
    assert.equal(out.data, undefined);
    assert.equal(binary.length, out.parameters.binary_data_size);
    const values = [];
    for (let i = 0; i < binary.length; i += 4) values.push(binary.readFloatLE(i));
    return { shape: out.shape, values };
  }
  return { shape: out.shape, values: out.data.flat(Infinity) };
}

function expectReference(got, sequences) {
  assert.deepEqual(got.shape, [sequences.length, 2]);
  const reference = referenceBatch(model, sequences);
  sequences.forEach(([text, pair], i) => {
    const want = reference[i];
    ["LABEL_0", "LABEL_1"].forEach((label, j) => {
      const v = got.values[2 * i + j];
      assert.ok(Math.abs(v - want[label]) <= tolerance, `${text}/${pair ?? ""} ${label}: ${v} vs reference ${want[label]}`);
    });
  });
}

describe("Open Inference Protocol conformance", () => {
  const server = serverForSuite(["--model", model]);

  test("server metadata, health and model metadata", async () => {
    const meta = await (await fetch(`${server.url}/v2`)).json();
    validate("metadata_server_response", meta, "GET /v2");
    assert.ok(meta.extensions.includes("binary_tensor_data"));
    for (const path of ["/v2/health/live", "/v2/health/ready", `/v2/models/${model}/ready`, `/v2/models/${model}/versions/1/ready`])
      assert.equal((await fetch(server.url + path)).status, 200, path);
    const ready = await (await fetch(`${server.url}/v2/models/${model}/ready`)).json();
    assert.equal(ready.name, model);
    for (const path of [`/v2/models/${model}`, `/v2/models/${model}/versions/1`]) {
      const m = await (await fetch(server.url + path)).json();
      validate("metadata_model_response", m, path);
      assert.deepEqual(m.versions, ["1"]);
      assert.deepEqual(m.inputs.map((i) => i.name), ["text", "text_pair", "input_ids", "token_type_ids", "attention_mask"]);
      assert.deepEqual(m.outputs, [{ name: "logits", datatype: "FP32", shape: [-1, 2] }]);
    }
    for (const path of [`/v2/models/${model}/versions/2`, `/v2/models/other`, `/v2/models/${model}/versions/7/infer`]) {
      const res = await fetch(server.url + path);
      assert.equal(res.status, 404, path);
      validate("metadata_model_error_response", await res.json(), path);
    }
  });

  test("JSON: texts, pairs (text + text_pair, and [N, 2]), token ids with a mask", async () => {
    let r = await infer(server.url, {
      id: "json-texts",
      inputs: [{ name: "text", shape: [2], datatype: "BYTES", data: ["alpha beta", "gamma"] }],
    });
    assert.equal(r.status, 200, JSON.stringify(r.answer));
    validate("inference_response", r.answer, "texts");
    assert.equal(r.answer.id, "json-texts");
    assert.equal(r.answer.model_name, model);
    expectReference(logitsOf(r.answer, r.binary), [["alpha beta"], ["gamma"]]);

    r = await infer(server.url, {
      inputs: [
        { name: "text", shape: [1], datatype: "BYTES", data: ["what is it?"] },
        { name: "text_pair", shape: [1], datatype: "BYTES", data: ["a test"] },
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.answer));
    validate("inference_response", r.answer, "text + text_pair");
    expectReference(logitsOf(r.answer, r.binary), [["what is it?", "a test"]]);

    r = await infer(server.url, { inputs: [{ name: "text", shape: [1, 2], datatype: "BYTES", data: [["what is it?", "a test"]] }] });
    assert.equal(r.status, 200);
    validate("inference_response", r.answer, "[N, 2]");
    expectReference(logitsOf(r.answer, r.binary), [["what is it?", "a test"]]);

    r = await infer(server.url, {
      inputs: [
        { name: "input_ids", shape: [1, 4], datatype: "INT64", data: [101, 7592, 102, 0] },
        { name: "attention_mask", shape: [1, 4], datatype: "INT64", data: [1, 1, 1, 0] },
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.answer));
    validate("inference_response", r.answer, "token ids");
  });

  test("binary tensor data: BYTES and INT64 inputs, binary outputs on request", async () => {
    const texts = ["binary one", "binary two, a little longer"];
    // As Triton's client sends by default: binary inputs, binary outputs.
    let r = await infer(
      server.url,
      {
        inputs: [{ name: "text", shape: [2], datatype: "BYTES", parameters: { binary_data_size: bytesTensor(texts).length } }],
        outputs: [{ name: "logits", parameters: { binary_data: true } }],
      },
      bytesTensor(texts),
    );
    assert.equal(r.status, 200, JSON.stringify(r.answer));
    assert.equal(r.contentType, "application/octet-stream");
    validate("inference_response", r.answer, "binary out", "oip-binary");
    expectReference(logitsOf(r.answer, r.binary), texts.map((t) => [t]));

    // Request-wide binary_data_output, text_pair binary too.
    const a = bytesTensor(["question?"]), b = bytesTensor(["an answer."]);
    r = await infer(
      server.url,
      {
        parameters: { binary_data_output: true },
        inputs: [
          { name: "text", shape: [1], datatype: "BYTES", parameters: { binary_data_size: a.length } },
          { name: "text_pair", shape: [1], datatype: "BYTES", parameters: { binary_data_size: b.length } },
        ],
      },
      Buffer.concat([a, b]),
    );
    assert.equal(r.status, 200, JSON.stringify(r.answer));
    validate("inference_response", r.answer, "binary pair", "oip-binary");
    expectReference(logitsOf(r.answer, r.binary), [["question?", "an answer."]]);

    // Binary inputs, JSON output (binary_data false overrides the request-wide setting).
    const ids = int64Tensor([101, 7592, 102]);
    r = await infer(
      server.url,
      {
        parameters: { binary_data_output: true },
        inputs: [{ name: "input_ids", shape: [1, 3], datatype: "INT64", parameters: { binary_data_size: ids.length } }],
        outputs: [{ name: "logits", parameters: { binary_data: false } }],
      },
      ids,
    );
    assert.equal(r.status, 200, JSON.stringify(r.answer));
    assert.equal(r.binary.length, 0);
    validate("inference_response", r.answer, "binary in, JSON out");
    assert.equal(logitsOf(r.answer, r.binary).values.length, 2);
  });

  test("errors are inference_error_response with a 4xx", async () => {
    const cases = [
      { inputs: [{ name: "pixels", shape: [1], datatype: "FP32", data: [1.5] }] },
      { inputs: [{ name: "text", shape: [3], datatype: "BYTES", data: ["a", "b"] }] },
      { inputs: [{ name: "text", shape: [1], datatype: "INT64", data: [1] }] },
      { inputs: [{ name: "input_ids", shape: [2], datatype: "INT64", data: [101, 102] }] },
      { inputs: [{ name: "text", shape: [1], datatype: "BYTES", data: ["x"] }], outputs: [{ name: "probabilities" }] },
      { inputs: [{ name: "text", shape: [1], datatype: "BYTES", data: ["x"] }], parameters: { priority: 1 } },
    ];
    for (const body of cases) {
      const r = await infer(server.url, body);
      assert.ok(r.status >= 400 && r.status < 500, `${JSON.stringify(body)} -> ${r.status}`);
      validate("inference_error_response", r.answer, JSON.stringify(body));
      assert.ok(r.answer.error.length > 0);
    }
    // A binary part that does not add up.
    const res = await fetch(`${server.url}/v2/models/${model}/infer`, {
      method: "POST",
      headers: { "Inference-Header-Content-Length": "10000" },
      body: "{}",
    });
    assert.equal(res.status, 400);
    validate("inference_error_response", await res.json(), "header past the body");
  });
});
