#!/usr/bin/env bash
# scripts/profile-http from the user's side, short: every row answered with no error, the CPU
# and batch figures computed from the server's own counters, the table and the ceiling printed;
# a bad option is refused, naming it.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BUILD_DIR="$(dirname "$bin")"

"$src/scripts/profile-http" --seconds 1 --connections 8 --out-dir "$tmp" >"$tmp/ok.out" 2>"$tmp/ok.err" ||
  { tail -20 "$tmp/ok.err" >&2; fail "profile-http exited non-zero"; }
python3 - "$tmp/profile-http.csv" <<'PY' || fail "the CSV's rows are wrong"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["row"] for r in rows] == ["front_door", "dynamic", "token_budget", "token_budget_2replicas",
                                    "token_budget_bf16"], rows
for r in rows:
    assert float(r["req_per_s"]) > 0 and int(r["non_2xx"]) == 0, r
    assert float(r["server_cpu_us_per_req"]) > 0, r
    assert float(r["seqs_per_batch"]) >= 1 and float(r["tokens_per_seq"]) > 2, r
# A model's request costs more CPU than the front door alone (a hash model).
assert all(float(r["server_cpu_us_per_req"]) > float(rows[0]["server_cpu_us_per_req"]) for r in rows[1:]), rows
assert all(float(r["forward_wall_us_per_req"]) > 0 for r in rows[1:]), rows
PY
grep -q "| token_budget_bf16 |" "$tmp/ok.out" || fail "no table printed"
grep -q "ceiling on" "$tmp/ok.out" || fail "no ceiling printed"

"$src/scripts/profile-http" --seconds x >"$tmp/bad.out" 2>&1 && fail "--seconds x accepted"
grep -q "not 'x'" "$tmp/bad.out" || fail "the bad value is not named: $(cat "$tmp/bad.out")"
"$src/scripts/profile-http" --colour red >"$tmp/bad2.out" 2>&1 && fail "--colour accepted"
grep -q "unknown option --colour" "$tmp/bad2.out" || fail "the unknown option is not named"
echo "profile-http: ok"
