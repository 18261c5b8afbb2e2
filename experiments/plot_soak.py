#!/usr/bin/env python3
"""Plots a soak's timeline (results/soak.json from scripts/soak): RSS and open file descriptors
over time of every process, the host in black, each tile id in its own colour (one line per
incarnation: a restarted tile is a new process), the tessera-gpu processes dashed, and the
outside SIGKILLs as ticks. Usage: plot_soak.py SOAK_JSON PNG"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    report = json.load(open(sys.argv[1]))
    procs = report["procs"]
    lines = {}  # pid -> [(t, rss MiB, fds)]
    for point in report["timeline"]:
        for p in point["procs"]:
            lines.setdefault(str(p["pid"]), []).append((point["t"], p["rss_kb"] / 1024, p["fds"]))
    fig, axes = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled = set()
    for pid, pts in sorted(lines.items(), key=lambda kv: kv[1][0][0]):
        p = procs[pid]
        if p["role"] == "host":
            style, label = dict(color="black", linewidth=2), "tessera-host"
        elif p["role"] == "tile":
            style, label = dict(color=colours[p["tile"] % len(colours)]), "tile %d" % p["tile"]
        else:
            style, label = dict(color="grey", linestyle="--"), "tessera-gpu"
        ts = [x[0] for x in pts]
        for ax, k in ((axes[0], 1), (axes[1], 2)):
            ax.plot(ts, [x[k] for x in pts], marker="." if len(pts) < 3 else None,
                    label=None if label in labelled else label, **style)
        labelled.add(label)
    for k in report["kills"]:
        for ax in axes:
            ax.axvline(k["t"], color="red", alpha=0.15, linewidth=1)
    warm = report["config"]["warmup"]
    for ax in axes:
        ax.axvline(warm, color="green", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("RSS (MiB)")
    axes[1].set_ylabel("open fds")
    axes[1].set_xlabel("seconds (red: outside SIGKILLs; green: end of warm-up, the growth baseline)")
    axes[0].legend(loc="upper left", ncol=3, fontsize=8)
    c, n = report["config"], report["requests"]
    fig.suptitle("tessera soak: %s, %d tiles + tessera-gpu, %.0f min, seed %d: %d requests, %d errors, %d wrong, "
                 "%d lost, %d outside kills" % (c["model"], c["tiles"], c["minutes"], c["seed"], n["sent"], n["errors"],
                                                n["wrong"], n["lost"], len(report["kills"])))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
