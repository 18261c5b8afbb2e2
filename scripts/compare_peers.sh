#!/bin/bash
# compare_peers.sh: tessera's BERT-base bench and ONNX Runtime (../shared/peers/run.sh ort), back to back
# on the same machine, same workload shape (256 requests, 60% U[8,64] + 40% U[200,512], fp32, 2 threads).
#
#   scripts/compare_peers.sh                 # needs build/bin/tessera-bench-models (BUILD_DIR to override)
#   REPS=1 MODES=a scripts/compare_peers.sh  # quicker: one ORT repetition, tessera's packed mode only
#   DTYPES=fp32,bf16,int8 REPS=1 MODES=ad scripts/compare_peers.sh  # tessera's dtypes in one process
#
# Prints both tables, then the ratio of tessera's packed req/s to ORT's best case (median over reps)
# for each of tessera's dtypes (issue 27's targets: fp32 >= 1.2x, bf16 >= 2.5x ORT's best fp32 mode).
# Results: $OUT (default /tmp/tessera-compare)/{tessera,ort}.txt. Takes ~15 min (ORT ~10 min).
set -euo pipefail
source "$(dirname "$0")/lib/compare_env.sh" /tmp/tessera-compare
[ -x "$peers/run.sh" ] || { echo "missing $peers/run.sh (set PEERS_DIR)" >&2; exit 2; }
mkdir -p "$out"

echo "== ONNX Runtime ($peers/run.sh ort, REPS=${REPS:-3})"
REPS=${REPS:-3} "$peers/run.sh" ort | tee "$out/ort.txt"
echo
# The peers' exact request lengths (numpy seed 0), so both run the same tokens.
work=${PEERS_WORK:-/tmp/tessera-peers}
lengths=()
if [ -f "$work/data/case_b.json" ]; then
  python3 -c "import json,sys; print(' '.join(str(l) for b in json.load(open(sys.argv[1]))['batches'] for l in b['lens']))" \
    "$work/data/case_b.json" > "$out/lengths.txt"
  lengths=(--lengths-file "$out/lengths.txt")
fi
echo "== tessera ($bench --threads $threads ${lengths[*]})"
"$bench" --model bert-base --threads "$threads" --dtype "${DTYPES:-fp32}" --check 0 --modes "${MODES:-abcd}" "${lengths[@]}" | tee "$out/tessera.txt"
echo
python3 - "$out/tessera.txt" "$out/ort.txt" <<'PY'
import collections, statistics, sys
def results(path):
    rows = []
    for line in open(path):
        if line.startswith("RESULT"):
            rows.append(dict(t.split("=", 1) for t in line.split()[1:]))
    return rows
tess = {(r["mode"], r.get("dtype", "fp32")): float(r["req_per_s"]) for r in results(sys.argv[1]) if "mode" in r and "req_per_s" in r}
ort = collections.defaultdict(list)
import os
peer_file = sys.argv[2]
work = os.environ.get("PEERS_WORK", "/tmp/tessera-peers")
if os.path.exists(os.path.join(work, "results", "ort.txt")):
    peer_file = os.path.join(work, "results", "ort.txt")
for r in results(peer_file):
    if "case" in r and "req_per_s" in r:
        ort[r["case"]].append(float(r["req_per_s"]))
best_case, best = max(((c, statistics.median(v)) for c, v in ort.items() if c != "a"), key=lambda x: x[1],
                      default=(None, 0.0))
print("tessera req/s:", ", ".join(f"{m} {d} {v:.2f}" for (m, d), v in tess.items()))
print("ORT median req/s:", ", ".join(f"case {c} {statistics.median(v):.2f}" for c, v in sorted(ort.items())))
targets = {"fp32": 1.2, "bf16": 2.5}
for (m, d), v in tess.items():
    if best and m == "a_packed":
        t = f" (issue 27's target >= {targets[d]}x)" if d in targets else ""
        print(f"tessera packed {d} / ORT best fp32 (case {best_case}) = {v / best:.2f}x{t}")
PY
