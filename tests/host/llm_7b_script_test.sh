#!/usr/bin/env bash
# scripts/llm-7b from the user's side at a small shape (CI keeps llama-1b-shaped or smaller): the
# single-process bf16 reference, then llama-tiny on 2 tile processes with every shard generated
# from the seed as it is streamed; the tokens equal the reference's, the logits within the bound,
# and the summary, per-tile memory and report tables carry their columns; bad options are refused.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BIN_DIR="$bin"

"$src/scripts/llm-7b" --model llama-tiny --tiles 2 --prompt-len 8 --generate 4 --min-available-gb 0 \
  --timeout 240 --out-dir "$tmp/out" >"$tmp/ok.out" 2>"$tmp/ok.err" ||
  { tail -30 "$tmp/ok.err" >&2; fail "llm-7b exited $?"; }
grep -q "llm-7b: reference: " "$tmp/ok.err" || fail "no progress line for the reference"
grep -q "streamed .* GiB" "$tmp/ok.err" || fail "no streaming progress"
python3 - "$tmp/out" <<'PY' || fail "the results are wrong"
import csv, json, os, sys
d = sys.argv[1]
s = list(csv.DictReader(open(os.path.join(d, "summary.csv"))))
assert len(s) == 1, s
s = s[0]
for k in ("model", "tiles", "plan", "load_seconds", "decode_tokens_per_s", "host_vm_hwm_gib", "tiles_vm_hwm_sum_gib",
          "tiles_planned_sum_gib", "reference_vm_hwm_gib", "modelled_us_per_token", "tokens_equal",
          "max_logit_diff_scaled", "load_before_tiles"):
    assert k in s and s[k] != "", (k, s)
assert s["tokens_equal"] == "True" and s["model"] == "llama-tiny" and s["tiles"] == "2", s
assert float(s["max_logit_diff_scaled"]) <= float(s["bound"]) and float(s["modelled_us_per_token"]) > 0, s
# The bound is tessera-host --check's for llama-tiny in bf16: 3 x (16 x sqrt(352) x 2^-24 + 6 x 2^-8).
assert abs(float(s["bound"]) - 3 * (16 * 352 ** 0.5 * 2 ** -24 + 6 * 2 ** -8)) < 1e-9, s
r = json.load(open(os.path.join(d, "results.json")))
assert r["reference_tokens"] == r["tile_tokens"] and len(r["tile_tokens"]) == 4, r
assert r["tiles"]["seeded_shards"] is True, r["tiles"]
rows = list(csv.DictReader(open(os.path.join(d, "tile-memory.csv"))))
assert [int(x["tile"]) for x in rows] == [0, 1], rows
for x in rows:
    assert float(x["planned_mib"]) > 0 and float(x["vm_hwm_mib"]) > 0 and float(x["cap_mib"]) >= float(x["planned_mib"]), x
md = open(os.path.join(d, "report.md")).read()
for h in ("| tile | planned MiB | VmHWM MiB | VmRSS MiB | cap MiB |", "host peak RSS", "decode on tiles", "modelled, ipu-mk2"):
    assert h in md, h
PY
# A wrong result fails: the same tiles against a reference whose logits of the second token are
# moved by 0.2 x max(1, max |logit|) (over the bound, under a flip of its token), then against
# a reference whose third token is another id with a wide margin.
python3 - "$tmp/out" "$tmp/wrong" <<'PY' || fail "could not make the wrong references"
import array, json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
ref = json.load(open(os.path.join(src, "reference.json")))
vals = array.array("f")
vals.frombytes(open(os.path.join(src, "reference.f32"), "rb").read())
vocab = len(vals) // len(ref["tokens"])
row = vals[vocab:2 * vocab]
scale = max(1.0, max(abs(v) for v in row))
low = min(range(vocab), key=lambda i: row[i])
vals[vocab + low] += 0.2 * scale
for d, (j, f) in (("logits", (ref, vals)), ("token", (dict(ref, tokens=ref["tokens"][:2] + [(ref["tokens"][2] + 1) % vocab] + ref["tokens"][3:],
                                                              top2_margin=ref["top2_margin"][:2] + [1e9] + ref["top2_margin"][3:]), None))):
    os.makedirs(os.path.join(dst, d))
    json.dump(j, open(os.path.join(dst, d, "reference.json"), "w"))
    if f is None:
        shutil.copy(os.path.join(src, "reference.f32"), os.path.join(dst, d, "reference.f32"))
    else:
        open(os.path.join(dst, d, "reference.f32"), "wb").write(f.tobytes())
PY
for d in logits token; do
  "$src/scripts/llm-7b" --model llama-tiny --tiles 2 --prompt-len 8 --generate 4 --min-available-gb 0 --timeout 240 \
    --skip-reference --out-dir "$tmp/wrong/$d" >"$tmp/wrong.out" 2>&1 && fail "a wrong reference ($d) passed the check"
  grep -q "the tiles differ from the reference" "$tmp/wrong.out" || { tail -20 "$tmp/wrong.out" >&2; fail "the wrong $d was not named"; }
done
grep -q "token 2: tiles" "$tmp/wrong.out" || { tail -5 "$tmp/wrong.out" >&2; fail "the differing token is not named"; }
# Refusals name the option.
"$src/scripts/llm-7b" --model llama-tiny --tiles 0 --out-dir "$tmp/bad" >"$tmp/bad.out" 2>&1 && fail "--tiles 0 accepted"
grep -q -- "--tiles" "$tmp/bad.out" || fail "--tiles 0 refused without naming it"
"$src/scripts/llm-7b" --model bert-tiny --tiles 2 --out-dir "$tmp/bad" >"$tmp/bad.out" 2>&1 && fail "an encoder accepted"
grep -q "bert-tiny" "$tmp/bad.out" || { cat "$tmp/bad.out" >&2; fail "an encoder refused without naming it"; }
"$src/scripts/llm-7b" --model llama-tiny --min-available-gb 100000 --out-dir "$tmp/bad" >"$tmp/bad.out" 2>&1 && fail "the memory gate let a run start"
grep -q "MemAvailable" "$tmp/bad.out" || fail "the memory gate's refusal does not say why"
echo "ok"
