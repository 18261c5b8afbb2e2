#!/usr/bin/env bash
# scripts/llm-experiment from the user's side: the modelled table and plot, and the sample computed
# for real on llama-tiny tiles, checked against the reference, in llm-experiment.md.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BUILD_DIR="$(dirname "$bin")"

"$src/scripts/llm-experiment" --quick --tile-sample 2 --out-dir "$tmp/ok" >"$tmp/ok.out" 2>"$tmp/ok.err" ||
  { cat "$tmp/ok.err" >&2; fail "llm-experiment --quick --tile-sample 2 exited $?"; }
for f in llm-experiment.csv llm-experiment.md llm-experiment.png; do [ -s "$tmp/ok/$f" ] || fail "missing $f"; done
md="$tmp/ok/llm-experiment.md"
grep -q "^## A sample computed for real on tiles" "$md" || fail "no computed sample section"
grep -q "^Command: .tessera-host --model llama-tiny --tiles 2 --plan 1,1,2 --check 2.$" "$md" || fail "no sample command"
[ "$(grep -c '^check sequence [01]: .* equal to the reference' "$md")" = 2 ] || fail "want 2 sequences equal to the reference"
grep -q "^check: .* KiB exchanged between tiles" "$md" || fail "no summary line of the sample"
grep -q "^plan R=1 S=1 W=2" "$md" || fail "the sample is not tensor-parallel on 2 tiles"

# --tile-sample 0 skips it; a bad count is refused with exit 2 before any work.
"$src/scripts/llm-experiment" --quick --tile-sample 0 --out-dir "$tmp/none" >/dev/null 2>&1 || fail "--tile-sample 0 failed"
grep -q "computed for real" "$tmp/none/llm-experiment.md" && fail "--tile-sample 0 still computed a sample"
"$src/scripts/llm-experiment" --tile-sample many --out-dir "$tmp/bad" >/dev/null 2>"$tmp/bad.err"
[ $? = 2 ] || fail "--tile-sample many: want exit 2"
grep -q "tile-sample" "$tmp/bad.err" || fail "--tile-sample many: the error does not name the option"
echo "llm_script_test: ok"
