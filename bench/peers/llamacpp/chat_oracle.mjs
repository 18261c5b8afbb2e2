// llama.cpp's side of a GGUF file's chat template: for each file, its tokenizer.chat_template (read
// by node-llama-cpp's GGUF parser) rendered by @huggingface/jinja (the Jinja engine node-llama-cpp
// itself renders templates with; trim_blocks and lstrip_blocks as transformers' apply_chat_template)
// with add_generation_prompt and the file's bos/eos token texts; the prompt ids llama.cpp's tokenizer
// makes of that text (special tokens parsed, BOS added when the file says so and the text does not
// already start with it, as llama-server does); and llama.cpp's greedy tokens after it (CPU, f32).
//
//   node chat_oracle.mjs SPEC.json OUT.json
// SPEC: {"threads": 2, "max_tokens": 12, "conversations": [[{"role", "content"}, ...], ...],
//        "models": [{"name", "gguf", "source"}]}            (source: copied through for the test)
// OUT:  {"generated_by", "node_llama_cpp", "models": {name: {...source, "template", "bos_text",
//        "conversations": [{"messages", "rendered", "ids", "tokens"}]}}}
import { writeFileSync } from "node:fs";
import { startOracle, loadGguf, greedyTokens } from "./oracle_setup.mjs";
import { Template } from "@huggingface/jinja";

const { spec, outPath, threads, maxTokens, version, llama } = await startOracle("chat_oracle.mjs", 12);
const out = { generated_by: "bench/peers/llamacpp/chat_oracle.mjs (GGUF chat template by @huggingface/jinja, " +
              "llama.cpp's tokenizer and greedy decoding through node-llama-cpp, CPU, f32)",
              node_llama_cpp: version, threads, max_tokens: maxTokens, models: {} };
for (const m of spec.models) {
  const model = await loadGguf(llama, m.gguf);
  const template = model.fileInfo.metadata?.tokenizer?.chat_template;
  if (typeof template !== "string") throw new Error(`${m.gguf}: no tokenizer.chat_template`);
  const bos = model.tokens.bosString ?? "", eos = model.tokens.eosString ?? "";
  const conversations = [];
  for (const messages of spec.conversations) {
    const rendered = new Template(template).render({ messages, bos_token: bos, eos_token: eos, add_generation_prompt: true });
    const ids = Array.from(model.tokenize(rendered, true));
    if (model.tokens.shouldPrependBosToken && model.tokens.bos != null && ids[0] !== model.tokens.bos)
      ids.unshift(model.tokens.bos);
    const tokens = await greedyTokens(model, ids, maxTokens, threads);
    conversations.push({ messages, rendered, ids, tokens });
    console.error(`${m.name}: ${JSON.stringify(rendered)} -> ${ids.length} ids -> ${tokens.join(" ")}`);
  }
  out.models[m.name] = { ...(m.source ?? {}), template, bos_text: bos, conversations };
  await model.dispose();
}
writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
