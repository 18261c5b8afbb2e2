#!/usr/bin/env python3
"""Plots llm-experiment.csv (tessera-llm-timing experiment): p99 TTFT and p99 TPOT against output
tokens/s per chip at each load (one line per system and batching; the SLO thresholds dashed), and
the cost and energy per million output tokens at the SLO rate.
Usage: plot_llm_experiment.py CSV PNG [TTFT_SLO_S TPOT_SLO_S]"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    ttft_slo = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    tpot_slo = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
    curves = {}
    for r in rows:
        if r["at_slo"] == "1":
            continue
        curves.setdefault((r["system"], r["batching"]), []).append(r)
    fig, ax = plt.subplots(1, 3, figsize=(17, 5.5))
    for (system, batching), pts in sorted(curves.items()):
        pts = sorted((p for p in pts if float(p["tokens_per_s_per_chip"]) > 0), key=lambda p: float(p["load_fraction"]))
        x = [float(p["tokens_per_s_per_chip"]) for p in pts]
        style = "-" if batching == "continuous" else ":"
        label = f"{system} {batching}"
        ax[0].plot(x, [float(p["ttft_p99_s"]) for p in pts], style, marker="o", label=label)
        ax[1].plot(x, [float(p["tpot_p99_s"]) * 1e3 for p in pts], style, marker="o", label=label)
    ax[0].axhline(ttft_slo, ls="--", c="grey")
    ax[1].axhline(tpot_slo * 1e3, ls="--", c="grey")
    for a, t in ((ax[0], "p99 TTFT (s)"), (ax[1], "p99 TPOT (ms)")):
        a.set_xlabel("output tokens/s per chip (modelled)")
        a.set_ylabel(t)
        a.set_yscale("log")
        a.set_xscale("log")
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=6)
    slo = [r for r in rows if r["at_slo"] == "1" and r["batching"] == "continuous"]
    names = [r["system"] for r in slo]
    kwh = [float(r["kwh_per_mtok"] or 0) for r in slo]
    usd = [float(r["usd_per_mtok"]) if r["usd_per_mtok"] else 0.0 for r in slo]
    pos = range(len(slo))
    ax[2].bar([p - 0.2 for p in pos], usd, 0.4, label="$ per Mtok (0: no price published)")
    ax[2].bar([p + 0.2 for p in pos], kwh, 0.4, label="kWh per Mtok")
    ax[2].set_xticks(list(pos))
    ax[2].set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    ax[2].set_title("continuous batching, at the SLO rate")
    ax[2].legend(fontsize=7)
    fig.suptitle("llama-2-7b, ShareGPT-like chat: modelled (timing model), "
                 f"SLO p99 TTFT <= {ttft_slo} s, p99 TPOT <= {tpot_slo * 1e3:.0f} ms")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
