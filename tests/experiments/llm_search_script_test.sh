#!/usr/bin/env bash
# scripts/llm-search from the user's side on a tiny grid (seconds): the CSV, markdown and PNG are
# written; the markdown's cheapest IPU-like and GPU-like systems are the CSV's (its cheapest feasible
# point per kind by $/Mtok, found here independently), with the same price and median $/Mtok; the
# speed table has one row per --speed-grid with the grid's point count; the plot script draws a
# PNG of the CSV and refuses a missing file or a CSV that is not the search's; bad options exit 2.
set -uo pipefail
src="${TESSERA_SOURCE_DIR:?}"; bin="${TESSERA_BIN_DIR:?}"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export TESSERA_BUILD_DIR="$(dirname "$bin")"

"$src/scripts/llm-search" --out-dir "$tmp/ok" --speed-grid "--chips 32 --tiles 1472 --sram-kib 624" \
    --speed-grid "--chips 16,32 --tiles 1472 --sram-kib 624,1248" -- \
    --chips 16,32,64 --tiles 1472 --sram-kib 624,1248 --max-seqs-grid 64 --search-requests 150 --seeds 2 \
    >"$tmp/ok.out" 2>"$tmp/ok.err" || { cat "$tmp/ok.err" >&2; fail "llm-search on a tiny grid exited $?"; }
for f in llm-search.csv llm-search.md llm-search.png; do [ -s "$tmp/ok/$f" ] || fail "missing $f"; done
cmp -s "$tmp/ok.out" "$tmp/ok/llm-search.md" || fail "stdout is not the markdown"
python3 - "$tmp/ok" <<'PY' || fail "the markdown does not agree with the CSV"
import csv, re, struct, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(d + "/llm-search.csv")))
md = open(d + "/llm-search.md").read()
assert len(rows) == 3 * 2 + 2, "want 6 IPU-like and 2 GPU-like grid points, got %d" % len(rows)
for kind, label in (("ipu", "IPU-like"), ("gpu", "GPU-like")):
    ok = [r for r in rows if r["kind"] == kind and r["feasible"] == "1" and r["within_budget"] == "1"]
    assert ok, "no feasible " + kind
    best = min(ok, key=lambda r: float(r["usd_per_mtok"]))  # first in grid order on a tie, as min keeps
    m = re.search(r"^\| %s \| ([^|]+) \| [^|]+ \| \$([0-9.]+) \([^|]*\) \| \$([0-9]+) \|" % label, md, re.M)
    assert m, "no cheapest %s row" % label
    words = m.group(1).split()
    conf = dict(w.split("=") for w in words[1:])
    if kind == "ipu":
        assert words[0] == "ipu"
        for key in ("chips", "tiles", "sram_kib", "link_gbps", "hop_us", "max_seqs"):
            assert float(conf[key]) == float(best[key]), (label, key, conf[key], best[key])
        pipe = int(best["pipeline"]) or int(best["chips"])
        assert int(conf["pipeline"]) == pipe, (label, conf["pipeline"], pipe)
    else:
        assert words[0] == best["gpu"], (words[0], best["gpu"])
        assert float(conf["max_seqs"]) == float(best["max_seqs"])
    assert float(conf["budget"]) == float(best["token_budget"])
    assert abs(float(m.group(2)) - float(best["usd_med"])) <= 0.00005 + 1e-9, (label, m.group(2), best["usd_med"])
    assert float(m.group(3)) == round(float(best["price_usd"])), (label, m.group(3), best["price_usd"])
    print("cheapest", label, m.group(1).strip(), "$%s/Mtok" % m.group(2))
speed = re.findall(r"^\| (--chips [^|]+) \| ([0-9]+) \| ([0-9.]+) \| ([0-9.]+) \|$", md, re.M)
# (chips x tiles x SRAM choices) x 2 default max-seqs, plus 2 GPUs x 2 max-seqs
assert [int(s[1]) for s in speed] == [1 * 2 + 4, 4 * 2 + 4], speed
png = open(d + "/llm-search.png", "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", png[16:24])
assert w > 400 and h > 300, (w, h)
PY
grep -q "^### Pareto front" "$tmp/ok/llm-search.md" || fail "no Pareto front"
grep -q "^### Sensitivity around the cheapest IPU-like point" "$tmp/ok/llm-search.md" || fail "no sensitivity table"

# --speed-grid none: no speed table.
"$src/scripts/llm-search" --out-dir "$tmp/nospeed" --speed-grid none -- --chips 32 --tiles 1472 --sram-kib 624 \
    --max-seqs-grid 64 --search-requests 100 --seeds 1 --no-sensitivity >/dev/null 2>&1 || fail "--speed-grid none failed"
grep -q "Speed against grid size" "$tmp/nospeed/llm-search.md" && fail "--speed-grid none still timed grids"

# Mistakes: exit 2 naming the option; a bad search option fails the script.
"$src/scripts/llm-search" --frobnicate >/dev/null 2>"$tmp/bad.err"; [ $? = 2 ] || fail "--frobnicate: want exit 2"
grep -q "frobnicate" "$tmp/bad.err" || fail "--frobnicate: the error does not name it"
"$src/scripts/llm-search" --out-dir >/dev/null 2>"$tmp/bad.err"; [ $? = 2 ] || fail "--out-dir without a folder: want exit 2"
"$src/scripts/llm-search" --out-dir "$tmp/b" --speed-grid none -- --chips lots >/dev/null 2>&1 && fail "--chips lots succeeded"

# The plot script alone (with the python that has matplotlib, as the script picks it): a missing
# file and a CSV that is not the search's are refused by name.
py=""
for candidate in ${TESSERA_PYTHON:-python3 /usr/bin/python3}; do
  if command -v "$candidate" >/dev/null && "$candidate" -c "import matplotlib" 2>/dev/null; then py="$candidate"; break; fi
done
[ -n "$py" ] || fail "no python3 with matplotlib (scripts/setup installs python3-matplotlib)"
"$py" "$src/scripts/llm_search_plot.py" "$tmp/none.csv" "$tmp/x.png" 2>"$tmp/p.err" && fail "plot of a missing file succeeded"
grep -q "cannot read .*none.csv" "$tmp/p.err" || fail "plot: the error does not name the missing file"
printf 'a,b\n1,2\n' >"$tmp/other.csv"
"$py" "$src/scripts/llm_search_plot.py" "$tmp/other.csv" "$tmp/x.png" 2>"$tmp/p.err" && fail "plot of a foreign CSV succeeded"
grep -q "not a search CSV" "$tmp/p.err" || fail "plot: the error does not say what is wrong"
[ -e "$tmp/x.png" ] && fail "plot wrote a PNG from a bad CSV"
echo "llm_search_script_test: ok"
