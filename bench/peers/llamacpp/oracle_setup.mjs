// What the llama.cpp oracles (oracle.mjs, chat_oracle.mjs) share: their command line
// (SPEC.json OUT.json), the spec's threads and max_tokens, node-llama-cpp's version, llama.cpp on
// the CPU, and a GGUF file loaded as the goldens need it (no GPU layers, no mmap, tensors checked).
import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

export async function startOracle(script, defaultMaxTokens) {
  const [specPath, outPath] = process.argv.slice(2);
  if (!specPath || !outPath) {
    console.error(`usage: node ${script} SPEC.json OUT.json`);
    process.exit(2);
  }
  const spec = JSON.parse(readFileSync(specPath, "utf8"));
  const threads = spec.threads ?? 2;
  const maxTokens = spec.max_tokens ?? defaultMaxTokens;
  const version = JSON.parse(readFileSync(new URL("./node_modules/node-llama-cpp/package.json", import.meta.url), "utf8")).version;
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: threads });
  return { spec, outPath, threads, maxTokens, version, llama };
}

export function loadGguf(llama, path) {
  return llama.loadModel({ modelPath: path, gpuLayers: 0, useMmap: false, checkTensors: true });
}

// llama.cpp's greedy tokens after the prompt `ids` (at most maxTokens, an end-of-generation token
// included), in a context of its own with an f32 KV cache.
export async function greedyTokens(model, ids, maxTokens, threads) {
  const context = await model.createContext({
    contextSize: Math.max(64, ids.length + maxTokens + 8), sequences: 1, threads, batchSize: 512,
    // Flash attention (on by default on CPU) casts an f32 K/V cache to f16 first: off, so the
    // attention is f32 as tessera's (with it on, gpt2-odd's step 15, a 0.009 logit margin, flips).
    flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", ignoreMemorySafetyChecks: true,
  });
  const seq = context.getSequence();
  const tokens = [];
  for await (const t of seq.evaluate(ids, { temperature: 0, yieldEogToken: true })) {
    tokens.push(t);
    if (tokens.length >= maxTokens) break;
  }
  await context.dispose();
  return tokens;
}
