#!/usr/bin/env bash
# scripts/bench-llm-delay from the user's side, small, on local tiles (BENCH_LAUNCHER=ssh: in two
# network namespaces by the ssh launcher; tests/cluster/llm_delay_netns.sh runs it so): a row per delay in the CSV with the load generator's TTFT and
# TPOT, a PNG, step logs; a step with a delay of D ms on the link between the two tensor-parallel
# tiles takes at least D ms (a lower bound the injected delay guarantees, whatever the load); bad
# options are refused, naming them.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BUILD_DIR="$(dirname "$bin")"

launcher=${BENCH_LAUNCHER:-local}
"$src/scripts/bench-llm-delay" --launcher "$launcher" --delays "0 3" --clients 2 --requests 4 --prompt "U[16,32]" \
  --output "U[4,8]" --out-dir "$tmp/out" >"$tmp/ok.out" 2>"$tmp/ok.err" ||
  { tail -20 "$tmp/ok.err" >&2; fail "bench-llm-delay exited $?"; }
csv=$tmp/out/bench-llm-delay.csv
[ -s "$csv" ] || fail "no CSV"
[ "$(wc -l <"$csv")" = 3 ] || { cat "$csv" >&2; fail "the CSV has not one header and two rows"; }
head -c 8 "$tmp/out/bench-llm-delay.png" | od -An -c | grep -q "P   N   G" || fail "no PNG"
python3 - "$csv" <<'PY' || fail "the CSV's rows are wrong"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [float(r["delay_ms"]) for r in rows] == [0, 3], rows
for r in rows:
    assert int(r["steps"]) > 0, r
    assert int(r["ok"]) == 4 and int(r["errors"]) == 0, r
    for k in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"):
        assert float(r[k]) > 0, (k, r)
# Every step crosses the delayed link at least once each way.
assert float(rows[1]["backend_ms_per_step"]) >= 3, rows[1]
PY
grep -q "TTFT p50" "$tmp/ok.out" || fail "no table printed"
if [ "$launcher" = ssh ]; then
  grep -q "network namespaces" "$tmp/ok.out" || fail "the ssh run does not say it ran in namespaces"
  [ -z "$(ip netns list | grep "^${TS_PREFIX:-tbld}[0-9]")" ] || fail "namespaces left behind"
fi
[ -s "$tmp/out/bench-llm-delay/delay-3.steps.csv" ] || fail "no step log for delay 3"

set +e
"$src/scripts/bench-llm-delay" --delays "0 x" >"$tmp/bad.out" 2>&1; rc=$?
set -e
[ $rc = 2 ] || fail "--delays '0 x' exited $rc, not 2"
grep -q "not 'x'" "$tmp/bad.out" || fail "the bad delay is not named: $(cat "$tmp/bad.out")"
"$src/scripts/bench-llm-delay" --launcher nowhere >"$tmp/bad2.out" 2>&1 && fail "--launcher nowhere accepted"
grep -q "auto|ssh|local" "$tmp/bad2.out" || fail "the launchers are not listed"
echo "bench-llm-delay ($launcher): ok"
