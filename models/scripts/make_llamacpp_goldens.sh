#!/usr/bin/env bash
# The second decoder oracle: llama.cpp (npm node-llama-cpp, pinned in bench/peers/llamacpp) runs the
# GGUF files `tessera-models export-gguf` writes of the golden models: the odd shapes of
# tests/data/models/decoders (prompt ids from goldens.json and arch_goldens.json: Qwen2 with and
# without a tied head, Llama 3.1's rope_scaling as a rope_freqs tensor) and the presets gpt2-tiny and llama-tiny
# (text prompts tokenized by llama.cpp from the GGUF's vocabulary). Writes its prompt ids and 32
# greedy tokens to tests/data/models/decoders/llamacpp_goldens.json, which models_gguf_test checks
# tessera against (CI needs no llama.cpp).
#
#   models/scripts/make_llamacpp_goldens.sh [BUILD_DIR]     (default build/; needs node and npm)
set -euo pipefail
source "$(dirname "$0")/llamacpp_env.sh" "${1:-}"
for c in gpt2-odd llama-odd llama-tied llama31-rope; do
  "$bin/tessera-models" export-gguf --config "$data/$c.config.json" --out "$tmp/$c.gguf"
done
# Qwen2 (q/k/v biases, NeoX rotary, a byte-level vocabulary: GPT-2's first 300 tokens stand in for
# Qwen's, the prompts being ids). Mistral's sliding window is not exported (llama.cpp's llama
# attends to every position), so mistral-window has no llama.cpp golden.
for c in qwen2-odd qwen2-untied; do
  "$bin/tessera-models" export-gguf --config "$data/$c.config.json" --tokenizer gpt2 --out "$tmp/$c.gguf"
done
for p in gpt2-tiny llama-tiny; do
  "$bin/tessera-models" export-gguf --model "$p" --out "$tmp/$p.gguf"
done
python3 - "$data/goldens.json" "$tmp" "$data/arch_goldens.json" > "$tmp/spec.json" <<'PY'
import json, sys
goldens, tmp, arch = json.load(open(sys.argv[1])), sys.argv[2], json.load(open(sys.argv[3]))
texts = ["Hello, world! The quick brown fox", "Once upon a time, in a land far away,",
         "naïve café 東京 🙂 x = 42;", "  leading spaces\nand a newline\tand a tab"]
models = [{"name": n, "gguf": f"{tmp}/{n}.gguf", "source": {"config": f"{n}.config.json", "seed": goldens["seed"]},
           "prompts": [{"ids": p["ids"]} for p in goldens["models"][n]["prompts"]]}
          for n in ("gpt2-odd", "llama-odd", "llama-tied")]
models += [{"name": n, "gguf": f"{tmp}/{n}.gguf",
            "source": {"config": f"{n}.config.json", "seed": arch["seed"], **({"tokenizer": "gpt2"} if n.startswith("qwen2") else {})},
            "prompts": [{"ids": p["ids"]} for p in arch["models"][n]["prompts"]]}
           for n in ("qwen2-odd", "qwen2-untied", "llama31-rope")]
models += [{"name": n, "gguf": f"{tmp}/{n}.gguf", "source": {"preset": n, "tokenizer": t, "seed": 0},
            "prompts": [{"text": s} for s in texts]} for n, t in (("gpt2-tiny", "gpt2"), ("llama-tiny", "llama"))]
print(json.dumps({"threads": 2, "max_tokens": 32, "models": models}))
PY
node "$peer/oracle.mjs" "$tmp/spec.json" "$data/llamacpp_goldens.json"
echo "wrote $data/llamacpp_goldens.json"
