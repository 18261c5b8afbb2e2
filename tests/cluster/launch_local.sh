#!/usr/bin/env bash
# scripts/launch/local: all tiles on this machine, pinned to cores round-robin; bert-tiny checked
# against the single-process reference (tessera-host exits 1 when the logits differ).
source "$(dirname "$0")/common.sh"
need_bins tessera-host tessera-tile
out=$(mktemp -d /tmp/tessera-launch-local-XXXXXX); trap 'rm -rf "$out"' EXIT
timeout -k 5 300 "$src/scripts/launch/local" --tiles 4 --pin -- --model bert-tiny --check 2 --plan 1,2,2 > "$out/run.txt" 2>&1 ||
  { cat "$out/run.txt"; fail "local launch failed"; }
grep '^check batch' "$out/run.txt"
[ "$(grep -c '^check batch' "$out/run.txt")" = 2 ] || fail "expected 2 checked batches"
echo "launch_local: 1 passed, 0 failed"
