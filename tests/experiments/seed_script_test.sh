#!/usr/bin/env bash
# scripts/seed-experiment from the user's side (--timing-only: seconds): it writes the table, the
# CSV and the plot; without a python3 that has matplotlib it stops before the run, names
# scripts/setup, and installs nothing.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BUILD_DIR="$(dirname "$bin")"

"$src/scripts/seed-experiment" --timing-only --slo-points 3 --out-dir "$tmp/ok" >"$tmp/ok.out" 2>"$tmp/ok.err" ||
  { cat "$tmp/ok.err" >&2; fail "seed-experiment --timing-only exited $?"; }
for f in seed-experiment.csv seed-experiment.md seed-experiment.png seed-experiment-curves.csv seed-experiment-curves.png \
         llm-experiment.csv llm-experiment.md llm-experiment.png; do
  [ -s "$tmp/ok/$f" ] || fail "missing $f"
done
for f in seed-experiment.png seed-experiment-curves.png llm-experiment.png; do
  head -c 8 "$tmp/ok/$f" | od -An -c | grep -q "P   N   G" || fail "$f is not a PNG"
done
# Provenance in every results file: commit, the exact command, preset hashes, seeds, cores, load.
for f in seed-experiment.csv seed-experiment-curves.csv seed-experiment.md; do
  for key in "commit: " "command: .*--timing-only" "preset a100-40gb: sha256:" "seeds: " "cores: " "load average at start: "; do
    grep -q "$key" "$tmp/ok/$f" || fail "$f has no '$key' line"
  done
done
grep -q "SLO req/s p99<=" "$tmp/ok.out" || fail "no SLO columns in the printed table"
# The LLM row group (timing model): its section with an A100 and an IPU row at the SLO.
grep -q "^## LLM row group" "$tmp/ok/seed-experiment.md" || fail "no LLM row group in seed-experiment.md"
grep -q "^| a100-40gb | continuous | [0-9.]* | [0-9]" "$tmp/ok/seed-experiment.md" || fail "no A100 LLM row at the SLO"
grep -q "^| ipu-mk2:chips=64 | continuous |" "$tmp/ok/seed-experiment.md" || fail "no IPU LLM row"
grep -q "^a100-40gb,continuous,1,slo," "$tmp/ok/llm-experiment.csv" || fail "llm-experiment.csv has no A100 SLO row"
"$bin/tessera-experiment" --mode run --timing-only --config gpu-static --requests 20 --seed 5 \
  --requests-csv "$tmp/requests.csv" >/dev/null || fail "--mode run --requests-csv failed"
grep -q "^# seeds: 5$" "$tmp/requests.csv" || fail "requests.csv does not record its seed"
grep -q "^# command: .*--requests-csv" "$tmp/requests.csv" || fail "requests.csv does not record its command"
[ "$(grep -vc '^#' "$tmp/requests.csv")" = 21 ] || fail "requests.csv: want a header and 20 rows"
grep -q "req/s per kW" "$tmp/ok.out" || fail "no per-watt column in the printed table"
grep -q "| 40 |" "$tmp/ok.out" || fail "no 40% row in the printed table"

# No interpreter with matplotlib (TESSERA_PYTHON replaces the ones tried): a clear failure, fast.
dpkg_before="$(ls -l --time-style=+%s /var/lib/dpkg/status 2>/dev/null)"
TESSERA_PYTHON="false" "$src/scripts/seed-experiment" --timing-only --out-dir "$tmp/nopy" \
  >"$tmp/nopy.out" 2>"$tmp/nopy.err"
rc=$?
[ $rc -ne 0 ] || fail "no matplotlib, yet exit 0"
grep -q "scripts/setup" "$tmp/nopy.err" || { cat "$tmp/nopy.err" >&2; fail "the message does not name scripts/setup"; }
grep -qi "apt-get\|installing" "$tmp/nopy.err" && fail "it tried to install something"
[ ! -e "$tmp/nopy/seed-experiment.csv" ] || fail "it ran the experiment before checking for matplotlib"
[ "$dpkg_before" = "$(ls -l --time-style=+%s /var/lib/dpkg/status 2>/dev/null)" ] || fail "dpkg status changed"
echo "PASS: plot written; without matplotlib: exit $rc, names scripts/setup, nothing run or installed"
