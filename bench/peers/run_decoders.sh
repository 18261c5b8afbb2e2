#!/usr/bin/env bash
# tessera-bench-decoders and its peers on the same seeded weights, same threads, one after the
# other: llama.cpp (node-llama-cpp 3.21.1 on the GGUF files that tessera-models export-gguf writes,
# f32, f16 and/or Q8_0 matrices; installed on demand in bench/peers/llamacpp) and PyTorch eager (Debian
# python3-torch with libopenblas0-pthread, on the HF folder tessera-models generate --save writes).
#
#   bench/peers/run_decoders.sh [BUILD_DIR]
#   env: MODELS=llama-tiny,gpt2 PROMPTS=128,768 BATCHES=1,8,32,64 DECODE=128 THREADS=2 ENGINES=tessera,llamacpp,pytorch
#        DTYPES=fp32 (tessera's, comma-separated: fp32,bf16,q8_0) GGUF=f32 (llama.cpp's files: f32,f16,q8_0;
#        with q8_0 in both, tessera's q8_0 runs the same Q8_0 file, its blocks kept)
#        WORK=DIR (models, GGUFs and results.txt; default a fresh temporary folder)
#   e.g. the bf16 vs llama.cpp comparison of issue 24:
#   MODELS=gpt2,llama-1b PROMPTS=128 BATCHES=1 DTYPES=fp32,bf16 GGUF=f32,f16 ENGINES=tessera,llamacpp bench/peers/run_decoders.sh
#
# Prints each engine's table, then one table of tokens/s per engine (wall, and per CPU-second x
# threads: what dedicated cores would give, pessimistic where threads spin), the ratios of every
# tessera dtype to every llama.cpp file and to PyTorch (per CPU-second), and the load average.
# ENGINES=none prints the table of WORK's results again without running anything.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:-$src/build}" && pwd)/bin
MODELS=${MODELS:-llama-tiny,gpt2} PROMPTS=${PROMPTS:-128,768} BATCHES=${BATCHES:-1,8,32,64}
DECODE=${DECODE:-128} THREADS=${THREADS:-2} ENGINES=${ENGINES:-tessera,llamacpp,pytorch}
DTYPES=${DTYPES:-fp32} GGUF=${GGUF:-f32}
peer=$src/bench/peers
work=${WORK:-$(mktemp -d)}
log=$work/results.txt
touch "$log"  # appended: runs into the same WORK merge (a later result of the same row wins)
[[ $ENGINES != *llamacpp* || -d $peer/llamacpp/node_modules/node-llama-cpp ]] || (cd "$peer/llamacpp" && npm ci --no-audit --no-fund)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
for m in ${MODELS//,/ }; do
  if [[ $ENGINES == *llamacpp* ]]; then
    for t in ${GGUF//,/ }; do
      f=$work/$m.gguf; [ "$t" = f32 ] || f=$work/$m-$t.gguf
      [ -f "$f" ] || "$bin/tessera-models" export-gguf --model "$m" --type "$t" --out "$f" >/dev/null
    done
  fi
  [[ $ENGINES != *pytorch* || -d $work/$m ]] || "$bin/tessera-models" generate --model "$m" --save "$work/$m" >/dev/null
  for p in ${PROMPTS//,/ }; do
    if [[ $ENGINES == *tessera* ]]; then
      # q8_0 with GGUF=q8_0: tessera runs the very Q8_0 file llama.cpp reads (its blocks kept), not a preset
      # quantised in memory; the other dtypes run the preset.
      dts=$DTYPES
      if [[ ,$DTYPES, == *,q8_0,* && ,$GGUF, == *,q8_0,* ]]; then
        dts=$(echo ",$DTYPES," | sed 's/,q8_0,/,/; s/^,//; s/,$//')
      fi
      if [ -n "$dts" ]; then
        OMP_WAIT_POLICY=passive "$bin/tessera-bench-decoders" --models "$m" --threads "$THREADS" --prompt "$p" \
          --decode "$DECODE" --batches "$BATCHES" --dtypes "$dts" --sgemm | sed "s/^RESULT bench=decoders /RESULT bench=decoders engine=tessera /" | tee -a "$log"
      fi
      if [ "$dts" != "$DTYPES" ]; then
        f=$work/$m-q8_0.gguf
        [ -f "$f" ] || "$bin/tessera-models" export-gguf --model "$m" --type q8_0 --out "$f" >/dev/null
        OMP_WAIT_POLICY=passive "$bin/tessera-bench-decoders" --models "$f" --threads "$THREADS" --prompt "$p" \
          --decode "$DECODE" --batches "$BATCHES" --dtypes q8_0 \
          | sed "s|^RESULT bench=decoders model=[^ ]* |RESULT bench=decoders engine=tessera model=$m |" | tee -a "$log"
      fi
    fi
    if [[ $ENGINES == *llamacpp* ]]; then
      for t in ${GGUF//,/ }; do
        f=$work/$m.gguf; [ "$t" = f32 ] || f=$work/$m-$t.gguf
        node "$peer/llamacpp/bench.mjs" --gguf "$f" --name "$m" --engine "llama.cpp-$t" --threads "$THREADS" --prompts "$p" \
          --decode "$DECODE" --batches "$BATCHES" | tee -a "$log"
      done
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
    if not line.startswith("RESULT bench=decoders") or "prefill_vs_sgemm" in line or "phase=attention" in line or "phase=linear" in line:
        continue
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    key = (f["model"], int(f["prompt"]), f["phase"], int(f["seqs"]))
    e = f.get("engine", "tessera")
    if e == "tessera":
        e = "tessera-" + f.get("dtype", "fp32")
    elif e == "llama.cpp":
        e = "llama.cpp-f32"  # results of the f32 file from before the label
    wall = float(f["tok_per_s_wall"])
    cpu = float(f["tok_per_s_cpu"]) if "tok_per_s_cpu" in f else None
    rows.setdefault(key, {})[e] = (wall, cpu)
seen = {}  # engine -> first appearance (tessera's dtypes and llama.cpp's files in the order run)
for r in rows.values():
    for e in r:
        seen.setdefault(e, len(seen))
order = lambda e: ({"tessera": 0, "llama.cpp": 1, "pytorch": 2}[e.split("-")[0]], seen[e])
engines = sorted(seen, key=order)
ours = [e for e in engines if e.startswith("tessera")]
peers = [e for e in engines if not e.startswith("tessera")]
pairs = [(t, p) for t in ours for p in peers]
print(f"\ntokens/s, {threads} threads: wall (per CPU-second x threads); ratios of the latter")
print("%-11s %6s %-8s %5s" % ("model", "prompt", "phase", "seqs") + "".join("%20s" % e for e in engines)
      + "".join("%16s" % (t.replace("tessera-", "") + "/" + p.replace("llama.cpp", "llama")) for t, p in pairs))
for key in sorted(rows, key=lambda k: (k[0], k[1], k[2] != "prefill", k[3])):
    r = rows[key]
    cells = ""
    for e in engines:
        if e in r:
            w, c = r[e]
            cells += "%20s" % ("%.1f" % w + (" (%.1f)" % c if c else ""))
        else:
            cells += "%20s" % "-"
    # Ratios per CPU-second (steadier than wall time when other jobs share the cores).
    ratio = lambda t, p: "%16s" % ("%.2fx" % (r[t][1] / r[p][1]) if t in r and p in r and r[t][1] and r[p][1] else "-")
    print("%-11s %6d %-8s %5d" % key + cells + "".join(ratio(t, p) for t, p in pairs))
PY
