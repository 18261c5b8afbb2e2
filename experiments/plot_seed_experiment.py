#!/usr/bin/env python3
"""Plots results/seed-experiment.csv: modelled req/s at saturation and p99 latency at the stated
load, per configuration and long-request share. Usage: plot_seed_experiment.py CSV PNG"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    src, dst = sys.argv[1], sys.argv[2]
    rows = list(csv.DictReader(open(src)))
    shares = sorted({float(r["long_share"]) for r in rows})
    configs = list(dict.fromkeys(r["config"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(shares)
    for k, share in enumerate(shares):
        sub = {r["config"]: r for r in rows if float(r["long_share"]) == share}
        xs = [i + k * width for i in range(len(configs))]
        sat = [float(sub[c]["saturation_rps"]) if c in sub else 0 for c in configs]
        p99 = [float(sub[c]["p99_s"]) * 1e3 if c in sub else 0 for c in configs]
        load = next(iter(sub.values()))["load_rps"] if sub else "?"
        axes[0].bar(xs, sat, width, label=f"{share * 100:.0f}% long")
        axes[1].bar(xs, p99, width, label=f"{share * 100:.0f}% long @ {float(load):.0f} req/s")
    for ax, title, unit in ((axes[0], "modelled throughput at saturation", "req/s"),
                            (axes[1], "modelled p99 latency at the stated load", "ms (log)")):
        ax.set_xticks([i + width * (len(shares) - 1) / 2 for i in range(len(configs))])
        ax.set_xticklabels(configs, rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    axes[1].set_yscale("log")
    fig.suptitle("tessera seed experiment: BERT-base, seed mix (modelled time, virtual clock)")
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main()
