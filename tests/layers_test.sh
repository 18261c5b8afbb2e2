#!/usr/bin/env bash
# The library floors hold (scripts/check-layers on this tree), and the check fails on a tree where
# a lower library includes a higher one's header (a copy of two folders with one bad include).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
"$src/scripts/check-layers" "$src"
tmp="$(mktemp -d /tmp/tessera-layers-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/host/src" "$tmp/models/src"
printf '#include "tessera/gpu/gpu_server.hpp"\n' > "$tmp/host/src/a.cpp"
printf '#include "tessera/timing/preset.hpp"\n' > "$tmp/models/src/b.cpp"
if out="$("$src/scripts/check-layers" "$tmp" 2>&1)"; then
  echo "check-layers passed a tree with upward includes:"; echo "$out"; exit 1
fi
grep -q 'host/src/a.cpp:1: host/ includes tessera/gpu/gpu_server.hpp' <<<"$out" || { echo "$out"; exit 1; }
grep -q 'models/src/b.cpp:1: models/ includes tessera/timing/preset.hpp' <<<"$out" || { echo "$out"; exit 1; }
echo "layers: ok"
