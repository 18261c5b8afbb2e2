"""The soak's report (scripts/soak.py): per-process growth, the verdict against the targets,
results/soak.{json,csv} and the printed table."""
import csv
import json
import os
import re


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def half_growth(smp, t0, t1, window=30):
    """RSS growth (%) over the second half of [t0, t1] (from the median of the samples in the
    `window` seconds after the middle): a plateau shows ~0, a steady leak half the total."""
    mid = (t0 + t1) / 2
    win = [x[1] for x in smp if mid <= x[0] <= mid + window]
    if not win or smp[-1][0] <= mid + window:
        return None
    start = median(win)
    return round(100.0 * (smp[-1][1] - start) / start, 2) if start else None


def summarize_processes(procs, warmup, end_t, window=30):
    """One row per process (a restarted tile is a new process). Long-lived: alive at the end of the
    warm-up and at the end. Growth runs from the base (the median of the samples in the `window`
    seconds after the warm-up: a sample may catch a recovery's transient buffers) to the last
    sample, taken after every replica is back and the load has stopped."""
    rows = []
    for p in procs.values():
        smp = p["samples"]
        if p["first_seen"] < warmup:
            win = [x for x in smp if warmup <= x[0] <= warmup + window] or [smp[-1]]
        else:
            win = [smp[0]]
        base = (win[0][0], median([x[1] for x in win]), median([x[2] for x in win]))
        last = smp[-1]
        rows.append({
            "process": p["role"], "tile": p["tile"], "incarnation": p["incarnation"], "pid": p["pid"],
            "first_s": smp[0][0], "last_s": last[0], "long_lived": p["first_seen"] < warmup and last[0] >= end_t - 1e-6,
            "rss_first_kb": smp[0][1], "rss_base_kb": base[1], "rss_end_kb": last[1],
            "rss_peak_kb": max(x[1] for x in smp),
            "rss_growth_pct": round(100.0 * (last[1] - base[1]) / base[1], 2) if base[1] else 0.0,
            "rss_second_half_growth_pct": half_growth(smp, base[0], last[0]),
            "fds_first": smp[0][2], "fds_base": base[2], "fds_end": last[2], "fds_growth": last[2] - base[2],
        })
    order = {"host": 0, "tile": 1, "gpu": 2}
    rows.sort(key=lambda r: (order.get(r["process"], 3), r["tile"] or 0, r["incarnation"] or 0, r["first_s"]))
    return rows


def name_of(r):
    if r["process"] == "tile":
        return "tile %d inc %d" % (r["tile"], r["incarnation"])
    if r["process"] == "gpu":
        return "tessera-gpu inc %d" % r["incarnation"]
    return r["process"]


def count_log(path):
    """What the host's log (with its tiles' stderr) says the plan did."""
    text = open(path, errors="replace").read()
    injected = re.findall(r"faults injected by the tiles: (.*)", text)
    return {"plan_tile_kills": len(re.findall(r"fault plan: killing tile", text)),
            "plan_stalls": len(re.findall(r"fault plan: tile \d+ stalls", text)),
            "plan_gpu_kills": len(re.findall(r"fault plan: killing gpu", text)),
            "injected_by_tiles": injected[-1].strip() if injected else ""}


def metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text or "", re.M)
    return float(m.group(1)) if m else None


def verdict(n, rows, final, host_pid, expected_children, kills, host_rc):
    failures = ["%d %s" % (n[k], k) for k in ("lost", "wrong", "errors") if n[k]]
    for r in rows:
        if r["long_lived"] and r["rss_growth_pct"] >= 5:
            failures.append("%s RSS grew %.1f%%" % (name_of(r), r["rss_growth_pct"]))
        if r["long_lived"] and r["fds_growth"] > 0:
            failures.append("%s fds grew by %d" % (name_of(r), r["fds_growth"]))
    if final["zombies"]:
        failures.append("%d zombie children of the host" % final["zombies"])
    alive = [p for p in final["procs"] if p["pid"] != host_pid]
    if len(alive) != expected_children:
        failures.append("%d child processes at the end, %d expected" % (len(alive), expected_children))
    if any(k.get("back_seconds") is None for k in kills):
        failures.append("a killed process was not back in rotation within 60 s")
    if host_rc != 0:
        failures.append("tessera-host exited with %s on SIGTERM" % host_rc)
    return {"pass": not failures, "failures": failures}


def recovery(info, metrics, kills):
    backs = sorted(k["back_seconds"] for k in kills if k.get("back_seconds") is not None)
    out = {"tile_replica_recoveries": None, "gpu_restarts": None, "retries": metric(metrics, "tessera_retries"),
           "back_median_s": backs[len(backs) // 2] if backs else None, "back_max_s": backs[-1] if backs else None}
    if isinstance(info, dict):
        out["tile_replica_recoveries"] = sum(r["recoveries"] for b in info["backends"] if b["kind"] == "tiles"
                                             for r in b["replicas"])
        out["gpu_restarts"] = sum(r["recoveries"] for b in info["backends"] if b["kind"] == "gpu" for r in b["replicas"])
    return out


def write(report, out_dir):
    json.dump(report, open(os.path.join(out_dir, "soak.json"), "w"), indent=1)
    rows = report["processes"]
    with open(os.path.join(out_dir, "soak.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def pct(x):
    return "-" if x is None else "%+.2f%%" % x


def print_table(report):
    n, c = report["requests"], report["config"]
    print("\nsoak: %s, %d tiles (plan %s) + 1 tessera-gpu (hybrid, long > %d tokens), %.1f min, seed %d, %d clients"
          % (c["model"], c["tiles"], c["plan"], c["long_threshold"], c["minutes"], c["seed"], c["clients"]))
    print("| requests | answered | ok | errors | wrong | lost | req/s |\n|---|---|---|---|---|---|---|")
    print("| %d | %d | %d | %d | %d | %d | %.1f |" % (n["sent"], n["answered"], n["ok"], n["errors"], n["wrong"],
                                                     n["lost"], report["requests_per_second"]))
    f = report["faults"]
    print("\nfaults: outside SIGKILLs %d (tiles %d, tessera-gpu %d); plan: tile kills %d, stalls %d, kill_gpu %d; "
          "injected by the tiles running at the end: %s" % (
              f["outside_kills"], f["outside_tile_kills"], f["outside_gpu_kills"], f["plan_tile_kills"],
              f["plan_stalls"], f["plan_gpu_kills"], f["injected_by_tiles"] or "?"))
    rc = report["recovery"]
    print("recoveries: tile replicas %s, tessera-gpu restarts %s, batches run again %s; back in rotation after an "
          "outside kill: median %s s, max %s s" % (rc["tile_replica_recoveries"], rc["gpu_restarts"], rc["retries"],
                                                    rc["back_median_s"], rc["back_max_s"]))
    print("\n| process | pid | alive (s) | RSS start MiB | RSS base MiB | RSS end MiB | growth | 2nd half | fds start "
          "| fds base | fds end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in report["processes"]:
        if r["long_lived"]:
            print("| %s | %d | %.0f-%.0f | %.1f | %.1f | %.1f | %+.2f%% | %s | %d | %d | %d |" % (
                name_of(r), r["pid"], r["first_s"], r["last_s"], r["rss_first_kb"] / 1024, r["rss_base_kb"] / 1024,
                r["rss_end_kb"] / 1024, r["rss_growth_pct"], pct(r["rss_second_half_growth_pct"]), r["fds_first"],
                r["fds_base"], r["fds_end"]))
    short = [r for r in report["processes"] if not r["long_lived"]]
    for key in sorted({(r["process"], r["tile"] or 0) for r in short}):
        g = [r for r in short if (r["process"], r["tile"] or 0) == key]
        life = [r["last_s"] - r["first_s"] for r in g]
        print("| %s: %d other incarnations | - | %.0f-%.0f s each | - | - | %.1f-%.1f | - | - | - | - | %d-%d |" % (
            "tile %d" % key[1] if key[0] == "tile" else "tessera-gpu", len(g), min(life), max(life),
            min(r["rss_end_kb"] for r in g) / 1024, max(r["rss_end_kb"] for r in g) / 1024,
            min(r["fds_end"] for r in g), max(r["fds_end"] for r in g)))
    print("\ngrowth: from the median of the samples in the 30 s after %.0f s of warm-up to the last (quiet) one; a restarted tile or tessera-gpu is a "
          "new process (its last sample above; every row in soak.csv)" % c["warmup"])
    v = report["verdict"]
    print("verdict: %s%s" % ("PASS" if v["pass"] else "FAIL", "" if v["pass"] else ": " + "; ".join(v["failures"])))
    for p in report["problems"][:10]:
        print("  " + p)
