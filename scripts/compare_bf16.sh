#!/bin/bash
# compare_bf16.sh: issue 17's bf16 targets in one run, same threads, same request lengths:
#   tessera bf16 packed vs tessera fp32 packed (target >= 3x), vs PyTorch bf16 on the padded,
#   sorted case c, best of --impl eager and --impl nn (target >= 2x), and tessera's bf16 GFLOP/s vs
#   oneDNN's bf16 matmul alone on the same GEMM shapes (target >= 60%).
#
#   scripts/compare_bf16.sh                  # needs build/bin/tessera-bench-models (BUILD_DIR to override)
#   REQUESTS=64 scripts/compare_bf16.sh      # quicker: the first 64 requests (PyTorch still runs 256)
#
# OpenMP waits passively (a shared machine: spinning threads steal the cores other processes need);
# the load average is printed before each step. Results: $OUT (default /tmp/tessera-bf16)/*.txt.
set -euo pipefail
source "$(dirname "$0")/lib/compare_env.sh" /tmp/tessera-bf16
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
[ -f "$peers/bert_bench.py" ] || { echo "missing $peers/bert_bench.py (set PEERS_DIR)" >&2; exit 2; }
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }

# The peers' request lengths (numpy seed 0, arrival order), so tessera runs the same tokens.
/usr/bin/python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import bert_bench; \
print(' '.join(map(str, bert_bench.make_lengths('b')[:int(sys.argv[2])])))" "$peers" "${REQUESTS:-256}" \
  > "$out/lengths.txt"
: > "$out/load.txt"
step() {  # name, command...
  local name=$1; shift
  echo "== $name (load $(load)): $*"
  echo "$name $(load)" >> "$out/load.txt"
  "$@" | tee "$out/$name.txt"
}
step tessera_fp32 "$bench" --model bert-base --threads "$threads" --dtype fp32 --modes a --lengths-file "$out/lengths.txt"
step tessera_bf16 "$bench" --model bert-base --threads "$threads" --dtype bf16 --modes ad --lengths-file "$out/lengths.txt"
for impl in eager nn; do
  step "torch_bf16_$impl" /usr/bin/python3 -W ignore "$peers/bert_bench.py" --impl $impl --case c --dtype bf16 \
    --threads "$threads"
done
echo "end $(load)" >> "$out/load.txt"
echo
/usr/bin/python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
def results(name):
    return [dict(t.split("=", 1) for t in l.split()[1:]) for l in open(f"{out}/{name}.txt") if l.startswith("RESULT")]
fp32 = next(r for r in results("tessera_fp32") if r.get("mode") == "a_packed")
bf = results("tessera_bf16")
bf16 = next(r for r in bf if r.get("mode") == "a_packed")
gemm = next(r for r in bf if r.get("impl") == "onednn_bf16")
acc = next((r for r in bf if r.get("mode") == "accuracy"), None)
torch = {n: results(f"torch_bf16_{n}")[0] for n in ("eager", "nn")}
best = max(torch, key=lambda n: float(torch[n]["req_per_s"]))
loads = [l.split(None, 1) for l in open(f"{out}/load.txt")]
r = lambda d: float(d["req_per_s"])
print(f"{'':44s} {'req/s':>8s} {'GFLOP/s':>8s}")
print(f"{'tessera fp32 packed':44s} {r(fp32):8.2f} {float(fp32['useful_gflops']):8.1f}")
print(f"{'tessera bf16 packed':44s} {r(bf16):8.2f} {float(bf16['useful_gflops']):8.1f}")
for n in ("eager", "nn"):
    print(f"{'PyTorch bf16 case c (padded, sorted), ' + n:44s} {r(torch[n]):8.2f} {float(torch[n]['useful_gflops']):8.1f}")
print(f"{'oneDNN bf16 matmul alone, same shapes':44s} {'-':>8s} {float(gemm['gflops']):8.1f}")
print()
print(f"bf16 / fp32 packed:            {r(bf16) / r(fp32):.2f}x (target >= 3x)")
print(f"bf16 / PyTorch bf16 best ({best}): {r(bf16) / r(torch[best]):.2f}x (target >= 2x)")
print(f"bf16 forward / oneDNN bf16 GEMM: {100 * float(bf16['useful_gflops']) / float(gemm['gflops']):.0f}% (target >= 60%)")
if acc:
    print(f"bf16 vs fp32 logits, first {acc['requests']} requests: max abs {acc['max_abs_diff']}, mean abs "
          f"{acc['mean_abs_diff']}, argmax agreement {100 * float(acc['argmax_agreement']):.1f}%")
print("load average (1, 5, 15 min) before each step: " + "; ".join(f"{n} {v.strip()}" for n, v in loads))
PY
