#!/usr/bin/env bash
# llama.cpp's side of GGUF chat templates: `tessera-models export-gguf --chat-template-file` writes
# gpt2-tiny with ChatML's template and llama-tiny with Llama-3's, Llama-2-chat's and Zephyr's
# (tests/data/models/decoders/chat_templates/*.jinja, as those models' tokenizer_config.json carry
# them); bench/peers/llamacpp/chat_oracle.mjs renders each file's template with Jinja, tokenizes the
# text with llama.cpp and greedy-decodes 12 tokens. Writes
# tests/data/models/decoders/chat_template_goldens.json, which gguf_serve_test checks tessera's
# rendering, prompt ids and served answers against (CI needs no llama.cpp).
#
#   models/scripts/make_chat_template_goldens.sh [BUILD_DIR]     (default build/; needs node and npm)
set -euo pipefail
source "$(dirname "$0")/llamacpp_env.sh" "${1:-}"
cases="gpt2-tiny:chatml llama-tiny:llama3 llama-tiny:llama2 llama-tiny:zephyr"
for c in $cases; do
  "$bin/tessera-models" export-gguf --model "${c%%:*}" --chat-template-file "$data/chat_templates/${c##*:}.jinja" \
    --out "$tmp/${c/:/-}.gguf" >/dev/null
done
python3 - "$tmp" $cases > "$tmp/spec.json" <<'PY'
import json, sys
tmp, cases = sys.argv[1], sys.argv[2:]
conversations = [
    [{"role": "user", "content": "Hello, who are you?"}],
    [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": "Name a colour."},
     {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another one, naïve café?"}],
]
models = [{"name": c.replace(":", "-"), "gguf": f"{tmp}/{c.replace(':', '-')}.gguf",
           "source": {"preset": c.split(":")[0], "seed": 0, "template_file": c.split(":")[1] + ".jinja"}}
          for c in cases]
print(json.dumps({"threads": 2, "max_tokens": 12, "conversations": conversations, "models": models}))
PY
node "$peer/chat_oracle.mjs" "$tmp/spec.json" "$data/chat_template_goldens.json"
echo "wrote $data/chat_template_goldens.json"
