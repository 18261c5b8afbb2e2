#!/usr/bin/env bash
# tessera-bench-decoders and its peers on the same seeded weights, same threads, one after the
# other: llama.cpp (node-llama-cpp 3.21.1 on the f32 GGUF that tessera-models export-gguf writes;
# installed on demand in bench/peers/llamacpp) and PyTorch eager (Debian python3-torch with
# libopenblas0-pthread, on the HF folder tessera-models generate --save writes).
#
#   bench/peers/run_decoders.sh [BUILD_DIR]
#   env: MODELS=llama-tiny,gpt2 PROMPTS=128,768 BATCHES=1,8,32,64 DECODE=128 THREADS=2 ENGINES=tessera,llamacpp,pytorch
#        WORK=DIR (models, GGUFs and results.txt; default a fresh temporary folder)
#
# Prints each engine's table, then one table of tokens/s per engine (wall, and per CPU-second x
# threads: what dedicated cores would give, pessimistic where threads spin) and the load average.
# ENGINES=none prints the table of WORK's results again without running anything.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$src/build}" && pwd)/bin
MODELS=${MODELS:-llama-tiny,gpt2} PROMPTS=${PROMPTS:-128,768} BATCHES=${BATCHES:-1,8,32,64}
DECODE=${DECODE:-128} THREADS=${THREADS:-2} ENGINES=${ENGINES:-tessera,llamacpp,pytorch}
peer=$src/bench/peers
work=${WORK:-$(mktemp -d)}
log=$work/results.txt
touch "$log"  # appended: runs into the same WORK merge (a later result of the same row wins)
[[ $ENGINES != *llamacpp* || -d $peer/llamacpp/node_modules/node-llama-cpp ]] || (cd "$peer/llamacpp" && npm ci --no-audit --no-fund)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
for m in ${MODELS//,/ }; do
  [ -f "$work/$m.gguf" ] || "$bin/tessera-models" export-gguf --model "$m" --out "$work/$m.gguf" >/dev/null
  [ -d "$work/$m" ] || "$bin/tessera-models" generate --model "$m" --save "$work/$m" >/dev/null
  for p in ${PROMPTS//,/ }; do
    if [[ $ENGINES == *tessera* ]]; then
      OMP_WAIT_POLICY=passive "$bin/tessera-bench-decoders" --models "$m" --threads "$THREADS" --prompt "$p" \
        --decode "$DECODE" --batches "$BATCHES" --sgemm | sed "s/^RESULT bench=decoders /RESULT bench=decoders engine=tessera /" | tee -a "$log"
    fi
    if [[ $ENGINES == *llamacpp* ]]; then
      node "$peer/llamacpp/bench.mjs" --gguf "$work/$m.gguf" --name "$m" --threads "$THREADS" --prompts "$p" \
        --decode "$DECODE" --batches "$BATCHES" | tee -a "$log"
    fi
    if [[ $ENGINES == *pytorch* ]]; then
      OMP_WAIT_POLICY=passive OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 "$peer/torch_decoder.py" --dir "$work/$m" \
        --name "$m" --threads "$THREADS" --prompts "$p" --decode "$DECODE" --batches "$BATCHES" | tee -a "$log"
    fi
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
/usr/bin/python3 - "$log" "$THREADS" <<'PY'
import re, sys
rows, threads = {}, int(sys.argv[2])
for line in open(sys.argv[1]):
    if not line.startswith("RESULT bench=decoders") or "prefill_vs_sgemm" in line:
        continue
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    key = (f["model"], int(f["prompt"]), f["phase"], int(f["seqs"]))
    wall = float(f["tok_per_s_wall"])
    cpu = float(f["tok_per_s_cpu"]) if "tok_per_s_cpu" in f else None
    rows.setdefault(key, {})[f.get("engine", "tessera")] = (wall, cpu)
engines = ["tessera", "llama.cpp", "pytorch"]
print(f"\ntokens/s, {threads} threads: wall (per CPU-second x threads); ratios of the latter")
print("%-11s %6s %-8s %5s" % ("model", "prompt", "phase", "seqs") + "".join("%22s" % e for e in engines)
      + "%12s%12s" % ("vs llama", "vs torch"))
for key in sorted(rows, key=lambda k: (k[0], k[1], k[2] != "prefill", k[3])):
    r = rows[key]
    cells = ""
    for e in engines:
        if e in r:
            w, c = r[e]
            cells += "%22s" % ("%.1f" % w + (" (%.1f)" % c if c else ""))
        else:
            cells += "%22s" % "-"
    # Ratios per CPU-second (steadier than wall time when other jobs share the cores).
    ratio = lambda e: "%12s" % ("%.2fx" % (r["tessera"][1] / r[e][1]) if "tessera" in r and e in r else "-")
    print("%-11s %6d %-8s %5d" % key + cells + ratio("llama.cpp") + ratio("pytorch"))
PY
