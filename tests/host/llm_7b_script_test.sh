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
assert float(s["max_logit_diff_scaled"]) <= 0.02 and float(s["modelled_us_per_token"]) > 0, s
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
# Refusals name the option.
"$src/scripts/llm-7b" --model llama-tiny --tiles 0 --out-dir "$tmp/bad" >"$tmp/bad.out" 2>&1 && fail "--tiles 0 accepted"
grep -q -- "--tiles" "$tmp/bad.out" || fail "--tiles 0 refused without naming it"
"$src/scripts/llm-7b" --model bert-tiny --tiles 2 --out-dir "$tmp/bad" >"$tmp/bad.out" 2>&1 && fail "an encoder accepted"
grep -q "bert-tiny" "$tmp/bad.out" || { cat "$tmp/bad.out" >&2; fail "an encoder refused without naming it"; }
"$src/scripts/llm-7b" --model llama-tiny --min-available-gb 100000 --out-dir "$tmp/bad" >"$tmp/bad.out" 2>&1 && fail "the memory gate let a run start"
grep -q "MemAvailable" "$tmp/bad.out" || fail "the memory gate's refusal does not say why"
echo "ok"
