#!/usr/bin/python3
"""Throughput at a p99-TTFT SLO: achieved output tok/s and p99 TTFT against the offered request rate,
one line per batching (and async scheduling value), from scripts/bench-llm-batching --slo-ttft-p99's
curve CSV; the SLOs as horizontal lines on the TTFT panel.
   python3 scripts/llm_slo_plot.py bench-llm-batching-slo.csv out.png --slo 1000[,2000] [--title T]"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("curve")
    ap.add_argument("out")
    ap.add_argument("--slo", required=True, help="p99 TTFT bounds in ms, comma-separated")
    ap.add_argument("--title", default="throughput at a p99-TTFT SLO")
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.curve)))
    if not rows:
        raise SystemExit(f"llm_slo_plot: no rows in {a.curve}")
    keys = list(dict.fromkeys((r["batching"], r["async"]) for r in rows))
    fig, (t, l) = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, asy in keys:
        mine = sorted((r for r in rows if (r["batching"], r["async"]) == (name, asy)), key=lambda r: float(r["rate"]))
        rate = [float(r["rate"]) for r in mine]
        label = name if asy == "default" else f"{name}, async {asy}"
        style = "o-" if name == "continuous" else "s--"
        t.plot(rate, [float(r["output_tok_per_s"]) for r in mine], style, label=label)
        l.plot(rate, [float(r["ttft_p99_ms"]) for r in mine], style, label=f"{label} p99 TTFT")
    for s in a.slo.split(","):
        l.axhline(float(s), color="grey", ls=":", lw=1)
        l.annotate(f"SLO {float(s):g} ms", (0.01, float(s)), xycoords=("axes fraction", "data"), fontsize=8,
                   va="bottom", color="grey")
    t.set_xlabel("offered request rate (req/s, Poisson)")
    t.set_ylabel("achieved output tokens/s")
    t.legend(fontsize=8)
    t.grid(alpha=0.3)
    l.set_yscale("log")
    l.set_xlabel("offered request rate (req/s, Poisson)")
    l.set_ylabel("p99 time to first token (ms, log)")
    l.legend(fontsize=8)
    l.grid(alpha=0.3, which="both")
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
