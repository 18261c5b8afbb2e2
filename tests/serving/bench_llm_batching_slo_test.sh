#!/usr/bin/env bash
# scripts/bench-llm-batching --slo-ttft-p99 from the user's side, tiny: llama-tiny on 2 real tile
# processes, 6 Poisson requests at each of 2 rates, short prompts and outputs, both batchings.
# The curve CSV has a row per (rate, batching) with every request answered; the summary and the
# ratio line agree with the curve for a loose SLO (recomputed here from the CSV), and an impossible
# SLO (1 ms) says "no rate met the SLO" with no ratio, never a number. Bad values are refused (exit 2)
# naming the option, before any server starts.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BUILD_DIR="$(dirname "$bin")"
run() { "$src/scripts/bench-llm-batching" "$@"; }

# A loose SLO (a minute: met at every rate whatever the machine's load) and the impossible one, from
# one sweep; --async-scheduling on passes through to tessera-host.
run --slo-ttft-p99 60000,1 --rates 1,3 --requests 6 --prompt 'U[8,32]' --output 'U[4,12]' \
  --async-scheduling on --out-dir "$tmp/ok" >"$tmp/ok.out" 2>"$tmp/ok.err" ||
  { tail -20 "$tmp/ok.err" >&2; fail "the SLO sweep exited non-zero"; }
for f in bench-llm-batching-slo.csv bench-llm-batching-slo-summary.csv; do [ -s "$tmp/ok/$f" ] || fail "missing $f"; done
python3 - "$tmp/ok" <<'PY' || fail "the CSVs are wrong"
import csv, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/bench-llm-batching-slo.csv")))
got = [(r["batching"], r["async"], float(r["rate"])) for r in rows]
want = [(b, "on", r) for r in (1.0, 3.0) for b in ("continuous", "static-16")]
assert got == want, got
for r in rows:
    assert int(r["sent"]) == 6 and int(r["ok"]) == 6 and int(r["errors"]) == 0, r
    assert r["mode"] == "open", r
    assert float(r["output_tok_per_s"]) > 0 and 0 < float(r["ttft_p50_ms"]) <= float(r["ttft_p99_ms"]), r
    assert float(r["serving_cpu_s"]) > 0, r
summary = list(csv.DictReader(open(f"{d}/bench-llm-batching-slo-summary.csv")))
assert [(s["slo_ttft_p99_ms"], s["async"]) for s in summary] == [("60000", "on"), ("1", "on")], summary
loose, tight = summary
best = lambda b: max(float(r["output_tok_per_s"]) for r in rows if r["batching"] == b)
assert abs(float(loose["continuous_out_tok_per_s"]) - best("continuous")) < 0.1, (loose, rows)
assert abs(float(loose["static16_out_tok_per_s"]) - best("static-16")) < 0.1, (loose, rows)
assert abs(float(loose["ratio"]) - best("continuous") / best("static-16")) < 1e-3, loose
for k in ("continuous_out_tok_per_s", "continuous_rate", "static16_out_tok_per_s", "static16_rate", "ratio"):
    assert tight[k] == "", ("an impossible SLO produced a number", k, tight)
PY
out="$tmp/ok.out"
grep -qE "^continuous / static-16 at p99 TTFT <= 60000 ms \(async on\): [0-9.]+x output tok/s" "$out" ||
  fail "no ratio line for the loose SLO: $(cat "$out")"
grep -q "^continuous / static-16 at p99 TTFT <= 1 ms (async on): no ratio, no rate met the SLO for continuous and static-16$" "$out" ||
  fail "no 'no rate met the SLO' line for the 1 ms SLO: $(cat "$out")"
[ "$(grep -c "no rate met the SLO (p99 TTFT <= 1 ms): lowest p99 TTFT" "$out")" = 2 ] || fail "want each batching's miss at 1 ms said"
grep -q "^  continuous .* out tok/s at 3 req/s offered .* -- the highest rate tried" "$out" ||
  fail "the loose SLO's best rate (3 req/s, the highest tried) is not printed and flagged: $(cat "$out")"
grep -q "Load average .* at the start, .* at the end" "$out" || fail "no load average printed"

# --only slo: the SLO mode at its default SLO, 1000 ms (one rate, 3 requests; the server's default async).
run --only slo --rates 4 --requests 3 --prompt 8 --output 4 --out-dir "$tmp/default" >"$tmp/default.out" 2>"$tmp/default.err" ||
  { tail -20 "$tmp/default.err" >&2; fail "--only slo exited non-zero"; }
[ "$(cut -d, -f1,2 "$tmp/default/bench-llm-batching-slo-summary.csv" | tail -n +2)" = "1000,default" ] ||
  fail "--only slo: want one summary row at 1000 ms: $(cat "$tmp/default/bench-llm-batching-slo-summary.csv")"
grep -q "^continuous / static-16 at p99 TTFT <= 1000 ms (async default): " "$tmp/default.out" || fail "--only slo: no ratio line"

# Bad values: exit 2, naming the option, no server started.
bad() {  # expected-text args...
  local want=$1; shift
  run --out-dir "$tmp/bad" "$@" >"$tmp/bad.out" 2>&1; local rc=$?
  [ $rc = 2 ] || fail "$*: want exit 2, got $rc: $(cat "$tmp/bad.out")"
  grep -qF -- "$want" "$tmp/bad.out" || fail "$*: the error does not say '$want': $(cat "$tmp/bad.out")"
}
bad "--slo-ttft-p99 takes numbers > 0" --slo-ttft-p99 fast
bad "--slo-ttft-p99 takes numbers > 0" --slo-ttft-p99 0
bad "--rates takes numbers > 0" --slo-ttft-p99 1000 --rates 2,,4
bad "--rates takes numbers > 0" --slo-ttft-p99 1000 --rates -1
bad "--rates applies only with --slo-ttft-p99" --rates 2,4
bad "--async-scheduling on|off|both, not 'yes'" --async-scheduling yes
bad "--async-scheduling applies to tiles" --reference --async-scheduling on
bad "--clients does not apply with --slo-ttft-p99" --slo-ttft-p99 1000 --clients 8
bad "--requests must be a positive integer" --slo-ttft-p99 1000 --requests 0
bad "--prompt takes N or U[lo,hi]" --slo-ttft-p99 1000 --prompt 'U[8]'
bad "--only prefix does not apply with --slo-ttft-p99" --only prefix --slo-ttft-p99 1000
bad "--only batching|prefix|slo, not 'fast'" --only fast
bad "--slo-ttft-p99 needs a value" --slo-ttft-p99
bad "unknown option --colour" --colour red
[ -e "$tmp/bad" ] && fail "a refused command line still wrote $tmp/bad"
echo "bench_llm_batching_slo_test: ok"
