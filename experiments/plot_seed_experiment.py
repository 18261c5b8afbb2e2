#!/usr/bin/env python3
"""Plots results/seed-experiment.csv: modelled req/s at saturation and p99 latency at the stated
load, per configuration and long-request share; with CURVES_CSV and CURVES_PNG also the
latency-throughput curves (p99 against offered load, one panel per long-request share, the SLO
targets as dashed lines). The CSVs' '# key: value' provenance lines become the figures' caption.
Usage: plot_seed_experiment.py CSV PNG [CURVES_CSV CURVES_PNG]"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    """Rows of a CSV whose leading '#' lines are provenance; returns (rows, caption)."""
    lines = open(path).read().splitlines()
    meta = [ln[1:].strip() for ln in lines if ln.startswith("#")]
    rows = list(csv.DictReader([ln for ln in lines if not ln.startswith("#")]))
    keep = [m for m in meta if m.startswith(("commit:", "command:", "preset ", "seeds:", "cores:", "load average"))]
    caption = " | ".join(m if not m.startswith("preset ") else m[: m.find("sha256:") + 19] for m in keep)
    return rows, caption


def caption_figure(fig, caption):
    if caption:
        fig.text(0.01, 0.005, caption, fontsize=6, ha="left", va="bottom", wrap=True)


def plot_curves(src, dst, slo_targets):
    rows, caption = read(src)
    shares = sorted({float(r["long_share"]) for r in rows})
    fig, axes = plt.subplots(1, len(shares), figsize=(6.5 * len(shares), 4.8), squeeze=False)
    for ax, share in zip(axes[0], shares):
        sub = [r for r in rows if float(r["long_share"]) == share]
        for config in dict.fromkeys(r["config"] for r in sub):
            pts = [r for r in sub if r["config"] == config]
            ax.plot([float(r["load_rps"]) for r in pts], [float(r["p99_s"]) * 1e3 for r in pts], marker="o",
                    markersize=3, label=config)
        for t in slo_targets:
            ax.axhline(t, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered load, req/s (log)")
        ax.set_ylabel("modelled p99 latency, ms (log)")
        ax.set_title(f"{share * 100:.0f}% long requests")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("tessera seed experiment: latency-throughput curves (dashed: p99 targets)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption_figure(fig, caption)
    fig.savefig(dst, dpi=120)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    rows, caption = read(src)
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
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    caption_figure(fig, caption)
    fig.savefig(dst, dpi=120)
    if len(sys.argv) >= 5:
        targets = [float(k[len("slo_rps_p99_"):-2]) for k in rows[0] if k.startswith("slo_rps_p99_")] if rows else []
        plot_curves(sys.argv[3], sys.argv[4], targets)


if __name__ == "__main__":
    main()
