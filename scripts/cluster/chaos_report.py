#!/usr/bin/env python3
"""Helper of scripts/cluster/chaos: chaos_report.py FAULTS.jsonl DIR
Pairs each fault's apply and heal (netfault's log) with the /info monitor (DIR/monitor.log) and
the requests (DIR/requests.csv, DIR/stats.json). Per fault: detected = first /info with a replica
not up, after the apply; back = first /info with every replica up, after the heal; the fault's
window runs from the apply to back. Prints a table per fault kind and writes DIR/chaos.csv (one
row per fault). Exit 1 on a lost request, a wrong answer, an error, or a fault never detected
or never back. With DIR/llm_stats.json (the LLM streams of chaos_llm_load.mjs) their requests count
too; an LLM error is allowed only as the policy in docs/cluster.md says (replica not back within
the recovery limit)."""
import csv, json, os, sys


def p99(xs):
    if not xs: return None
    xs = sorted(xs); return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


log_path, d = sys.argv[1], sys.argv[2]
events = [json.loads(l) for l in open(log_path)]
mon = [json.loads(l) for l in open(d + "/monitor.log")]
mon = [m for m in mon if "error" not in m]
def load_reqs(path):
    return [(float(r["start"]), float(r["end"]), int(r["status"]), r["right"] == "1") for r in csv.DictReader(open(path))]
reqs = load_reqs(d + "/requests.csv")
stats = json.load(open(d + "/stats.json"))
# The LLM streams (chaos_llm_load.mjs), when they ran. Policy (docs/cluster.md): a stream whose
# replica loses a tile waits for it and continues (same greedy text); it ends with an error event
# only when the replica is not back within the recovery limit. Only those errors are allowed.
has_llm = os.path.exists(d + "/llm_stats.json")
lreqs = load_reqs(d + "/llm_requests.csv") if has_llm else []
lstats = json.load(open(d + "/llm_stats.json")) if has_llm else {"sent": 0, "ok": 0, "wrong": 0, "errors": 0, "problems": []}
allowed = [p for p in lstats["problems"] if " error " in p and "did not come back within" in p]
# The machine that runs tessera-gpu (scripts/cluster/chaos writes it): its faults are reported as
# their own kinds, "partition (GPU machine)" and so on: the host cut off a GPU machine.
gpu_machine = int(open(d + "/gpu_machine").read()) if os.path.exists(d + "/gpu_machine") else None
faults, open_ = [], {}
for e in events:
    if e["event"] == "apply": open_[e["machine"]] = e
    elif e["event"] == "heal" and e["machine"] in open_:
        a = open_.pop(e["machine"])
        kind = a["kind"] + (" (GPU machine)" if a["machine"] == gpu_machine else "")
        faults.append({"kind": kind, "machine": a["machine"], "t0": a["t"], "t1": e["t"]})
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
    linside = [r for r in lreqs if r[1] >= f["t0"] and r[0] <= end]
    f["requests"] = len(inside); f["llm"] = len(linside)
    f["errors"] = sum(1 for r in inside + linside if r[2] != 200)
    f["wrong"] = sum(1 for r in inside + linside if r[2] == 200 and not r[3])
    f["end"] = end
    if f["detect"] is None or f["back"] is None: bad += 1
def in_fault(r, fs): return any(r[1] >= f["t0"] and r[0] <= f["end"] for f in fs)
lat = lambda rs: [r[1] - r[0] for r in rs]
outside = lat([r for r in reqs if not in_fault(r, faults)])
loutside = lat([r for r in lreqs if not in_fault(r, faults)])
lost = stats["sent"] - len(reqs)
llost = lstats["sent"] - len(lreqs)
with open(d + "/chaos.csv", "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["kind", "machine", "seconds", "detect_s", "back_after_heal_s", "requests", "llm_streams", "errors", "wrong", "reason"])
    for f in faults:
        w.writerow([f["kind"], f["machine"], "%.2f" % (f["t1"] - f["t0"]), "" if f["detect"] is None else "%.3f" % f["detect"],
                    "" if f["back"] is None else "%.2f" % f["back"], f["requests"], f["llm"], f["errors"], f["wrong"], f["reason"][:160]])
fmt = lambda x: "-" if x is None else "%.2f" % x
rng = lambda xs: "-" if not xs else ("%.2f" % min(xs) if min(xs) == max(xs) else "%.2f-%.2f" % (min(xs), max(xs)))
print("| fault kind | count | requests affected (BERT + LLM streams) | lost | wrong | errors | detected after (s) | back after heal (s) "
      "| p99 BERT during (s) | p99 LLM stream during (s) | how the host noticed |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k in [b + g for g in ("", " (GPU machine)") for b in ("partition", "half-open", "lose-machine")]:
    fs = [f for f in faults if f["kind"] == k]
    if not fs: continue
    how = sorted({("connection closed" if "connection closed" in f["reason"] or "is not connected" in f["reason"]
                   else "heartbeat silence" if "no heartbeat" in f["reason"] or "silent for" in f["reason"]
                   else "other: " + f["reason"][:60]) for f in fs if f["detect"] is not None})
    during = lat([r for r in reqs if in_fault(r, fs)])
    ldur = lat([r for r in lreqs if in_fault(r, fs)])
    # lost requests cannot be placed in a window (no answer, no end): the total is below
    print(f"| {k} | {len(fs)} | {sum(f['requests'] for f in fs)} + {sum(f['llm'] for f in fs)} | {'0' if lost + llost == 0 else '?'} | "
          f"{sum(f['wrong'] for f in fs)} | {sum(f['errors'] for f in fs)} | "
          f"{rng([f['detect'] for f in fs if f['detect'] is not None])} | {rng([f['back'] for f in fs if f['back'] is not None])} | "
          f"{fmt(p99(during))} | {fmt(p99(ldur))} | {', '.join(how)} |")
print(f"outside faults: p99 BERT {fmt(p99(outside))} s ({len(outside)} requests), p99 LLM stream {fmt(p99(loutside))} s ({len(loutside)} streams)")
print(f"BERT requests: {stats['sent']} sent, {stats['ok']} right, lost {lost}, wrong {stats['wrong']}, errors {stats['errors']}")
if has_llm:
    print(f"LLM streams: {lstats['sent']} sent, {lstats['ok']} right, lost {llost}, wrong {lstats['wrong']}, errors {lstats['errors']} "
          f"({len(allowed)} allowed by the policy: replica not back within the recovery limit)")
for p in (stats["problems"] + lstats["problems"])[:8]: print("  ", p)
if bad: print(f"{bad} faults never detected or never back")
ok = (lost == 0 and stats["wrong"] == 0 and stats["errors"] == 0 and llost == 0 and lstats["wrong"] == 0 and
      lstats["errors"] == len(allowed) and not bad and faults)
sys.exit(0 if ok else 1)
