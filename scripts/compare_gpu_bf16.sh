#!/bin/bash
# compare_gpu_bf16.sh: the GPU baseline process (tessera-gpu) in fp32 and in bf16 (DTYPE=int8: in
# int8) on the same HTTP workload, back to back in one run. For each dtype, tessera-host --serve --dtype D --spawn-gpu 1
# routes every request to its spawned tessera-gpu (started with --dtype D; hybrid routing with
# --long-threshold at the model's longest input, so the tile stays idle) and tessera-loadgen sends
# the same closed-loop requests (mix, seed, count) to it; then 32 fixed inputs (1 to ~480 tokens)
# with "raw_scores": true. Prints req/s per dtype, D / fp32, D's logits against the fp32 ones (max
# and mean |difference|, argmax agreement) and the load average before each step.
#
#   scripts/compare_gpu_bf16.sh                             # bert-base, seed-40, 64 requests, 8 connections
#   MODEL=bert-mini REQUESTS=1024 scripts/compare_gpu_bf16.sh
#   DTYPE=int8 scripts/compare_gpu_bf16.sh                  # fp32 against int8
#
# Results: $OUT (default /tmp/tessera-gpu-$DTYPE)/{fp32,$DTYPE}.json (tessera-loadgen --json),
# {fp32,bf16}-logits.json and the hosts' logs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
model=${MODEL:-bert-base}
requests=${REQUESTS:-64}
connections=${CONNECTIONS:-8}
mix=${MIX:-seed-40}
dtype2=${DTYPE:-bf16}
case "$dtype2" in bf16|int8) ;; *) echo "DTYPE=$dtype2: use bf16 or int8" >&2; exit 2 ;; esac
out=${OUT:-/tmp/tessera-gpu-$dtype2}
for b in tessera-host tessera-gpu tessera-tile tessera-loadgen; do
  [ -x "$build/bin/$b" ] || { echo "missing $build/bin/$b; build it: cmake --build $build --target $b" >&2; exit 2; }
done
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }
host_pid=""
cleanup() { [ -z "$host_pid" ] || { kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; }; }
trap cleanup EXIT
: > "$out/load.txt"
# 32 inputs of 1 to 466 words (up to ~480 wordpieces), as raw logits.
/usr/bin/python3 -c "import json; words = 'the model reads a sentence of some length and scores it'.split(); \
print(json.dumps({'raw_scores': True, 'truncate': True, 'inputs': [[' '.join(words[k % len(words)] for k in range(1 + 15 * i))] \
for i in range(32)]}))" > "$out/inputs.json"
for dtype in fp32 "$dtype2"; do
  echo "$dtype $(load)" >> "$out/load.txt"
  fifo="$out/host-$dtype.out"
  rm -f "$fifo" && mkfifo "$fifo"
  "$build/bin/tessera-host" --model "$model" --tiles 1 --tile-memory 2GiB --spawn-gpu 1 --routing hybrid \
    --long-threshold 512 --timeout-ms 600000 --serve --port 0 --dtype "$dtype" > "$fifo" 2> "$out/host-$dtype.log" &
  host_pid=$!
  port=""
  while read -r line; do
    if [[ $line =~ ^listening\ on\ http://[^:]+:([0-9]+) ]]; then port=${BASH_REMATCH[1]}; break; fi
  done < "$fifo"
  [ -n "$port" ] || { echo "tessera-host --dtype $dtype did not start; see $out/host-$dtype.log" >&2; exit 1; }
  cat "$fifo" > /dev/null &  # keep the host's stdout drained
  echo "== tessera-gpu --dtype $dtype behind tessera-host on port $port (load $(load))"
  # One request first: the spawned process's first forward makes oneDNN's primitives.
  "$build/bin/tessera-loadgen" --port "$port" --mode closed --connections 1 --requests 1 --duration 0 --mix "$mix" \
    --seed 99 --quiet > /dev/null
  "$build/bin/tessera-loadgen" --port "$port" --mode closed --connections "$connections" --requests "$requests" \
    --duration 0 --mix "$mix" --seed 1 --quiet --json "$out/$dtype.json"
  curl -sf -H 'Content-Type: application/json' --data-binary @"$out/inputs.json" "http://127.0.0.1:$port/predict" \
    > "$out/$dtype-logits.json"
  kill "$host_pid"; wait "$host_pid" || true; host_pid=""
  rm -f "$fifo"
done
echo "end $(load)" >> "$out/load.txt"
/usr/bin/python3 - "$out" "$model" "$mix" "$requests" "$connections" "$dtype2" <<'PY'
import json, sys
out, model, mix, n, conns, d2 = sys.argv[1:]
r = {d: json.load(open(f"{out}/{d}.json")) for d in ("fp32", d2)}
rps = {d: float(r[d]["throughput_rps"]) for d in r}
print(f"\n{model}, mix {mix}, {n} requests, {conns} connections, one tessera-gpu (dynamic padded batches)")
for d in ("fp32", d2):
    print(f"  tessera-gpu --dtype {d}: {rps[d]:8.2f} req/s, errors {r[d].get('errors')}")
print(f"  {d2} / fp32: {rps[d2] / rps['fp32']:.2f}x")
logits = {d: [{s["label"]: s["score"] for s in row} for row in json.load(open(f"{out}/{d}-logits.json"))] for d in r}
diffs = [abs(a[k] - b[k]) for a, b in zip(logits[d2], logits["fp32"]) for k in b]
agree = sum(max(a, key=a.get) == max(b, key=b.get) for a, b in zip(logits[d2], logits["fp32"]))
print(f"  {d2} vs fp32 logits over HTTP, {len(logits['fp32'])} inputs: max abs {max(diffs):.5f}, "
      f"mean abs {sum(diffs) / len(diffs):.6f}, argmax agreement {100 * agree / len(logits['fp32']):.1f}%")
print("  load average (1, 5, 15 min) before each step: " + "; ".join(l.strip() for l in open(f"{out}/load.txt")))
PY
