# What the llama.cpp goldens scripts (make_llamacpp_goldens.sh, make_chat_template_goldens.sh) share,
# sourced with the build folder as $1: src, bin (the build's bin/), peer (bench/peers/llamacpp with
# its npm packages installed), data (tests/data/models/decoders) and tmp (removed on exit).
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$(cd "${1:-$src/build}" && pwd)/bin
peer=$src/bench/peers/llamacpp
data=$src/tests/data/models/decoders
[ -d "$peer/node_modules/node-llama-cpp" ] || (cd "$peer" && npm ci --no-audit --no-fund)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
