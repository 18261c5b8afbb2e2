#!/usr/bin/python3
"""Goodput and p99 latencies against the request rate: a live sweep (tessera-loadgen --sweep --csv)
beside its modelled twin (tessera-llm-timing simulate --trace --csv, one row per rate, same order).
   /usr/bin/python3 scripts/llm_goodput_plot.py live.csv modelled.csv out.png [--title T]
Prints the table it plots."""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("live")
    ap.add_argument("modelled")
    ap.add_argument("out")
    ap.add_argument("--title", default="goodput against request rate")
    a = ap.parse_args()
    live = list(csv.DictReader(open(a.live)))
    model = list(csv.DictReader(open(a.modelled)))
    if len(live) != len(model):
        raise SystemExit(f"llm_goodput_plot: {len(live)} live rows but {len(model)} modelled ones")
    f = lambda rows, k: [float(r[k]) for r in rows]
    rate = f(live, "rate")
    print(f"{'rate':>6} {'live goodput':>12} {'model goodput':>13} {'live TTFT p99':>13} {'model TTFT p99':>14} "
          f"{'live TPOT p99':>13} {'model TPOT p99':>14}   (req/s, ms)")
    for i, r in enumerate(rate):
        print(f"{r:6g} {float(live[i]['goodput_rps']):12.2f} {float(model[i]['goodput_rps']):13.2f} "
              f"{float(live[i]['ttft_p99_ms']):13.1f} {float(model[i]['ttft_p99_ms']):14.3f} "
              f"{float(live[i]['tpot_p99_ms']):13.1f} {float(model[i]['tpot_p99_ms']):14.3f}")
    fig, (g, p) = plt.subplots(1, 2, figsize=(12, 4.8))
    g.plot(rate, rate, ":", color="grey", label="offered")
    g.plot(rate, f(live, "goodput_rps"), "o-", label="live goodput")
    g.plot(rate, f(model, "goodput_rps"), "s--", label="modelled goodput")
    g.set_xlabel("offered request rate (req/s)")
    g.set_ylabel("goodput (req/s within the SLO)")
    g.legend()
    g.grid(alpha=0.3)
    p.plot(rate, f(live, "ttft_p99_ms"), "o-", label="live p99 TTFT")
    p.plot(rate, f(model, "ttft_p99_ms"), "s--", label="modelled p99 TTFT")
    p.plot(rate, f(live, "tpot_p99_ms"), "^-", label="live p99 TPOT")
    p.plot(rate, f(model, "tpot_p99_ms"), "v--", label="modelled p99 TPOT")
    p.set_yscale("log")
    p.set_xlabel("offered request rate (req/s)")
    p.set_ylabel("ms (log)")
    p.legend(fontsize=8)
    p.grid(alpha=0.3, which="both")
    fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
