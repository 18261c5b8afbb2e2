// llama.cpp as tessera's second oracle: loads GGUF files that `tessera-models export-gguf` wrote,
// tokenizes text prompts with llama.cpp's own tokenizer (from the GGUF's tokenizer.ggml.* keys) and
// greedy-decodes with llama.cpp's CPU kernels (f32 weights and f32 KV cache, no GPU, no mmap).
//
//   node oracle.mjs SPEC.json OUT.json
// SPEC: {"threads": 2, "max_tokens": 32, "models": [{"name", "gguf", "source"?, "prompts": [{"text"} | {"ids"}]}]}
// OUT:  {"generated_by", "node_llama_cpp", "models": {name: {...source, "gguf", "prompts": [{"text"?, "ids", "tokens"}]}}}
// (source: how tessera makes the same model, copied through for the test that reads OUT).
import { writeFileSync } from "node:fs";
import { startOracle, loadGguf, greedyTokens } from "./oracle_setup.mjs";

const { spec, outPath, threads, maxTokens, version, llama } = await startOracle("oracle.mjs", 32);
const out = { generated_by: "bench/peers/llamacpp/oracle.mjs (llama.cpp through node-llama-cpp, CPU, f32)",
              node_llama_cpp: version, threads, max_tokens: maxTokens, models: {} };
for (const m of spec.models) {
  const model = await loadGguf(llama, m.gguf);
  const prompts = [];
  for (const p of m.prompts) {
    let ids;
    if (p.text !== undefined) {
      ids = Array.from(model.tokenize(p.text, false));
      // llama.cpp adds BOS when the GGUF says so (tokenizer.ggml.add_bos_token), as tessera's encode does.
      if (model.tokens.shouldPrependBosToken && model.tokens.bos != null) ids.unshift(model.tokens.bos);
    } else {
      ids = p.ids;
    }
    const tokens = await greedyTokens(model, ids, maxTokens, threads);
    prompts.push({ ...(p.text !== undefined ? { text: p.text } : {}), ids, tokens });
    console.error(`${m.name}: ${ids.length} prompt ids -> ${tokens.join(" ")}`);
  }
  out.models[m.name] = { ...(m.source ?? {}), gguf: m.gguf.split("/").pop(), prompts };
  await model.dispose();
}
writeFileSync(outPath, JSON.stringify(out) + "\n");
