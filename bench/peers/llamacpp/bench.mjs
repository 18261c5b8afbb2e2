// llama.cpp peer of tessera-bench-decoders: prefill and decode tokens/s on a GGUF file that
// `tessera-models export-gguf` wrote (the same seeded f32 weights), CPU only, same threads.
//
//   node bench.mjs --gguf /tmp/gpt2.gguf --name gpt2 --threads 2 --prompts 128,768 --decode 128 --batches 1,8,32,64
//   node bench.mjs --gguf /tmp/gpt2-f16.gguf --name gpt2 --engine llama.cpp-f16 ...   (the label of its RESULT lines)
//
// B sequences share one context (node-llama-cpp's batching: tokens queued by several sequences go
// into the same llama_decode call, so B decoding sequences make one batch of B tokens per step).
// Prefill: every sequence's prompt but its last token, queued at once (evaluateWithoutGeneratingNewTokens),
// in ubatches of --batch-size tokens. Decode: each sequence evaluates its last prompt token and then
// greedy-generates; --decode single-token steps per sequence are timed. Prompt ids are seeded in
// [3, 253), plain tokens of GPT-2's and LLaMA's vocabularies. llama.cpp's defaults otherwise
// (flash attention auto, KV cache f16) unless --kv f32.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { parseArgs } from "node:util";

const { values: a } = parseArgs({ options: {
  gguf: { type: "string" }, name: { type: "string" }, threads: { type: "string", default: "2" },
  prompts: { type: "string", default: "128,768" }, decode: { type: "string", default: "128" },
  batches: { type: "string", default: "1,8,32,64" }, kv: { type: "string", default: "f16" },
  "batch-size": { type: "string", default: "512" }, engine: { type: "string", default: "llama.cpp" },
} });
if (!a.gguf) {
  console.error("usage: node bench.mjs --gguf FILE [--name N] [--threads 2] [--prompts 128,768] [--decode 128] [--batches 1,8,32,64] [--kv f16|f32] [--engine LABEL]");
  process.exit(2);
}
const threads = Number(a.threads), decode = Number(a.decode), name = a.name ?? a.gguf.split("/").pop();
const kvType = a.kv === "f32" ? "F32" : "F16";
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: threads });
const model = await llama.loadModel({ modelPath: a.gguf, gpuLayers: 0, useMmap: false });
let seed = 12345;
const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const row = (phase, P, B, tokens, wall, c) => {
  console.log(`${name.padEnd(12)} ${phase.padEnd(9)} ${String(P).padStart(6)} ${String(B).padStart(6)} ${String(tokens).padStart(8)} ` +
              `${wall.toFixed(3).padStart(10)} ${c.toFixed(3).padStart(10)} ${(tokens / wall).toFixed(1).padStart(12)} ` +
              `${(tokens / (c / threads)).toFixed(1).padStart(12)}`);
  console.log(`RESULT bench=decoders engine=${a.engine} model=${name} phase=${phase} seqs=${B} prompt=${P} threads=${threads} ` +
              `kv=${a.kv} tokens=${tokens} wall_s=${wall.toFixed(4)} tok_per_s_wall=${(tokens / wall).toFixed(2)} tok_per_s_cpu=${(tokens / (c / threads)).toFixed(2)}`);
};

console.log(`${"model".padEnd(12)} ${"phase".padEnd(9)} ${"prompt".padStart(6)} ${"seqs".padStart(6)} ${"tokens".padStart(8)} ` +
            `${"wall s".padStart(10)} ${"cpu s".padStart(10)} ${"tok/s wall".padStart(12)} ${"tok/s cpu".padStart(12)}`);
for (const P of a.prompts.split(",").map(Number)) {
  for (const B of a.batches.split(",").map(Number)) {
    let context;
    try {
      // contextSize is each sequence's (llama.cpp allocates it for every one of the B sequences).
      context = await model.createContext({
        contextSize: P + decode + 8, sequences: B, threads, batchSize: Number(a["batch-size"]),
        experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType, ignoreMemorySafetyChecks: true,
      });
    } catch (e) {
      console.log(`${name}: llama.cpp could not make a context of ${B} sequences of ${P + decode + 8} tokens: ${e.message}`);
      continue;
    }
    const seqs = Array.from({ length: B }, () => context.getSequence());
    const prompts = seqs.map(() => Array.from({ length: P }, () => 3 + rand(250)));
    let t0 = performance.now(), c0 = cpu();
    await Promise.all(seqs.map((s, i) => s.evaluateWithoutGeneratingNewTokens(prompts[i].slice(0, P - 1))));
    row("prefill", P, B, B * (P - 1), (performance.now() - t0) / 1000, cpu() - c0);
    t0 = performance.now();
    c0 = cpu();
    await Promise.all(seqs.map(async (s, i) => {
      let n = 0;
      for await (const t of s.evaluate([prompts[i][P - 1]], { temperature: 0, yieldEogToken: true })) {
        void t;
        if (++n >= decode) break;
      }
    }));
    row("decode", P, B, B * decode, (performance.now() - t0) / 1000, cpu() - c0);
    await context.dispose();
  }
}
await model.dispose();
