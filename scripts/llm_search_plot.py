#!/usr/bin/env python3
"""Plots the design-space search's CSV (tessera-llm-timing search --csv): price of one copy against
output tokens/s at the SLO for every feasible point, IPU-like and GPU-like, the Pareto front drawn,
and per-token latency (p50 TPOT) as the colour. Usage: llm_search_plot.py IN.csv OUT.png"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: llm_search_plot.py IN.csv OUT.png")
    try:
        with open(sys.argv[1], newline="") as f:
            reader = csv.DictReader(f)
            want = {"kind", "feasible", "pareto", "price_usd", "tokens_per_s", "tpot_p50_s", "tokens_med", "tokens_lo",
                    "tokens_hi"}
            missing = want - set(reader.fieldnames or [])
            if missing:
                sys.exit("llm_search_plot: %s is not a search CSV (no column %s)" % (sys.argv[1], ", ".join(sorted(missing))))
            rows = [r for r in reader if r["feasible"] == "1"]
    except OSError as e:
        sys.exit("llm_search_plot: cannot read %s: %s" % (sys.argv[1], e.strerror))
    if not rows:
        sys.exit("llm_search_plot: no feasible point in " + sys.argv[1])
    fig, ax = plt.subplots(figsize=(9, 6))
    for kind, marker in (("ipu", "o"), ("gpu", "s")):
        pts = [r for r in rows if r["kind"] == kind]
        if not pts:
            continue
        sc = ax.scatter([float(r["price_usd"]) for r in pts], [float(r["tokens_per_s"]) for r in pts],
                        c=[float(r["tpot_p50_s"]) * 1e3 for r in pts], cmap="viridis", marker=marker, s=22,
                        label=kind.upper() + "-like", norm=matplotlib.colors.LogNorm(vmin=0.1, vmax=100))
    front = sorted((r for r in rows if r["pareto"] == "1"), key=lambda r: float(r["price_usd"]))
    ax.plot([float(r["price_usd"]) for r in front], [float(r["tokens_med"]) for r in front], "r-", lw=1.2,
            label="Pareto front (median of seeds)")
    ax.errorbar([float(r["price_usd"]) for r in front], [float(r["tokens_med"]) for r in front],
                yerr=[[float(r["tokens_med"]) - float(r["tokens_lo"]) for r in front],
                      [float(r["tokens_hi"]) - float(r["tokens_med"]) for r in front]], fmt="none", ecolor="r")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("price of one copy (USD)")
    ax.set_ylabel("output tokens/s at the SLO")
    ax.set_title("Design-space search: llama-2-7b, ShareGPT-like mix (modelled)")
    fig.colorbar(sc, ax=ax, label="p50 TPOT (ms)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
