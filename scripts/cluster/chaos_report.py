#!/usr/bin/env python3
"""Helper of scripts/cluster/chaos: chaos_report.py FAULTS.jsonl DIR
Pairs each fault's apply and heal (netfault's log) with the /info monitor (DIR/monitor.log) and
the requests (DIR/requests.csv, DIR/stats.json). Per fault: detected = first /info with a replica
not up, after the apply; back = first /info with every replica up, after the heal; the fault's
window runs from the apply to back. Prints a table per fault kind and writes DIR/chaos.csv (one
row per fault). Exit 1 on a lost request, a wrong answer, an error, or a fault never detected
or never back."""
import csv, json, sys


def p99(xs):
    if not xs: return None
    xs = sorted(xs); return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


log_path, d = sys.argv[1], sys.argv[2]
events = [json.loads(l) for l in open(log_path)]
mon = [json.loads(l) for l in open(d + "/monitor.log")]
mon = [m for m in mon if "error" not in m]
reqs = [(float(r["start"]), float(r["end"]), int(r["status"]), r["right"] == "1") for r in csv.DictReader(open(d + "/requests.csv"))]
stats = json.load(open(d + "/stats.json"))
faults, open_ = [], {}
for e in events:
    if e["event"] == "apply": open_[e["machine"]] = e
    elif e["event"] == "heal" and e["machine"] in open_:
        a = open_.pop(e["machine"]); faults.append({"kind": a["kind"], "machine": a["machine"], "t0": a["t"], "t1": e["t"]})
bad = 0
for f in faults:
    f["detect"] = f["back"] = None; f["reason"] = ""
    for m in mon:
        up = all(s == "up" for _, s, _ in m["replicas"])
        if f["detect"] is None and m["t"] >= f["t0"] and not up:
            f["detect"] = m["t"] - f["t0"]; f["reason"] = m.get("body", "")
        if f["detect"] is not None and m["t"] >= f["t1"] and up:
            f["back"] = m["t"] - f["t1"]; break
    end = f["t1"] + (f["back"] if f["back"] is not None else 0)
    inside = [r for r in reqs if r[1] >= f["t0"] and r[0] <= end]
    f["requests"] = len(inside); f["errors"] = sum(1 for r in inside if r[2] != 200)
    f["wrong"] = sum(1 for r in inside if r[2] == 200 and not r[3])
    f["end"] = end
    if f["detect"] is None or f["back"] is None: bad += 1
def in_fault(r): return any(r[1] >= f["t0"] and r[0] <= f["end"] for f in faults)
during = [r[1] - r[0] for r in reqs if in_fault(r)]
outside = [r[1] - r[0] for r in reqs if not in_fault(r)]
lost = stats["sent"] - len(reqs)
with open(d + "/chaos.csv", "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["kind", "machine", "seconds", "detect_s", "back_after_heal_s", "requests", "errors", "wrong", "reason"])
    for f in faults:
        w.writerow([f["kind"], f["machine"], "%.2f" % (f["t1"] - f["t0"]), "" if f["detect"] is None else "%.3f" % f["detect"],
                    "" if f["back"] is None else "%.2f" % f["back"], f["requests"], f["errors"], f["wrong"], f["reason"][:160]])
fmt = lambda x: "-" if x is None else "%.2f" % x
rng = lambda xs: "-" if not xs else ("%.2f" % min(xs) if min(xs) == max(xs) else "%.2f-%.2f" % (min(xs), max(xs)))
print("| fault kind | count | requests during | lost | wrong | errors | detected after (s) | back after heal (s) | how the host noticed |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k in ["partition", "half-open", "lose-machine"]:
    fs = [f for f in faults if f["kind"] == k]
    if not fs: continue
    how = sorted({("connection closed" if "connection closed" in f["reason"] else "heartbeat silence" if "no heartbeat" in f["reason"]
                   else "other: " + f["reason"][:60]) for f in fs if f["detect"] is not None})
    print(f"| {k} | {len(fs)} | {sum(f['requests'] for f in fs)} | - | {sum(f['wrong'] for f in fs)} | {sum(f['errors'] for f in fs)} | "
          f"{rng([f['detect'] for f in fs if f['detect'] is not None])} | {rng([f['back'] for f in fs if f['back'] is not None])} | {', '.join(how)} |")
print(f"all requests: {stats['sent']} sent, {stats['ok']} right, lost {lost}, wrong {stats['wrong']}, errors {stats['errors']}; "
      f"p99 latency during faults {fmt(p99(during))} s ({len(during)} requests), outside {fmt(p99(outside))} s ({len(outside)})")
for p in stats["problems"][:5]: print("  ", p)
if bad: print(f"{bad} faults never detected or never back")
sys.exit(0 if lost == 0 and stats["wrong"] == 0 and stats["errors"] == 0 and not bad and faults else 1)
