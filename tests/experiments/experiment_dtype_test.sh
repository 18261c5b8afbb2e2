#!/usr/bin/env bash
# tessera-experiment --dtype from the user's side: the computed sample in bf16 on real tile
# processes and a real tessera-gpu process, every answer checked against the fp32 reference
# within bf16's bound (and the check says so); the modelled clock does not depend on the dtype;
# a dtype it cannot compute in is refused, naming it.
set -uo pipefail
bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_TOKENIZER_DIR="${TESSERA_TOKENIZER_DIR:-$(dirname "$bin")/share/tokenizers}"

run() {  # dtype config -> $tmp/<dtype>-<config>.out
  "$bin/tessera-experiment" --mode run --config "$2" --requests 8 --rate 0 --seed 3 --dtype "$1" \
    --tile-processes 2 >"$tmp/$1-$2.out" 2>&1 || { tail -20 "$tmp/$1-$2.out" >&2; fail "--dtype $1 --config $2 exited $?"; }
}
for config in tiles-packed gpu-static; do
  run bf16 "$config"
  run fp32 "$config"
  out=$tmp/bf16-$config.out
  grep -q "computed: .* 8 answers checked" "$out" || { cat "$out" >&2; fail "$config: not every answer was checked"; }
  # The device computed in bf16 and was checked with bf16's bound.
  grep -q "^check .* in bf16 vs in-process fp32 reference_forward, 8 answers, max abs diff / max(1, max |fp32 logit|) .*, tolerance 5e-02$" "$out" ||
    { cat "$out" >&2; fail "$config: no bf16 check line"; }
  case $config in
    gpu-*) grep -q "^check gpu0: tessera-gpu process" "$out" || fail "$config: not computed by a tessera-gpu process" ;;
    tiles-*) grep -q "^check tiles0: 2 tessera-tile processes" "$out" || fail "$config: not computed by tile processes" ;;
  esac
  # bf16 is not fp32: the error is above zero, and within the bound (exit 0 says within).
  python3 - "$out" <<'PY' || fail "$config: bf16 errors are zero (did it compute in fp32?)"
import re, sys
errs = [float(m) for m in re.findall(r"max abs diff / max\(1, max \|fp32 logit\|\) ([0-9.e+-]+)", open(sys.argv[1]).read())]
assert len(errs) == 1 and all(0 < e <= 0.05 for e in errs), errs
PY
  grep -q "^check .* in fp32 .* max abs diff .*, tolerance 1e-04$" "$tmp/fp32-$config.out" || fail "$config: no fp32 check line"
  # The modelled clock is the emulated hardware's (fp16), whatever the functional dtype.
  [ "$(grep '^modelled:' "$tmp/bf16-$config.out")" = "$(grep '^modelled:' "$tmp/fp32-$config.out")" ] ||
    fail "$config: the modelled times differ between bf16 and fp32"
done

"$bin/tessera-experiment" --mode run --config gpu-static --requests 4 --dtype fp16 >"$tmp/bad.out" 2>&1 && fail "--dtype fp16 accepted"
grep -q 'unknown dtype "fp16": use fp32 or bf16' "$tmp/bad.out" || fail "the bad dtype is not named: $(cat "$tmp/bad.out")"
echo "tessera-experiment --dtype: ok"
