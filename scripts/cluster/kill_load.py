#!/usr/bin/env python3
"""Helper of scripts/cluster/kill-tiles.
  kill_load.py load PORT DIR   4 closed-loop /predict clients that check every answer against the
                               one given before any kill (sending only while DIR/load exists), and
                               a monitor of /info and /health every 50 ms (DIR/monitor.log), until
                               DIR/stop exists; counts in DIR/stats.json
  kill_load.py report DIR      per kill in DIR/kills ("time tile incarnation label"): seconds from
                               the kill to the first /info with a replica down, and to every replica
                               up with the tile at that incarnation; exit 1 if one never came back
Every request's start, end and HTTP status (0: no answer) go to DIR/requests.csv at the end."""
import http.client, json, os, sys, threading, time


def report(d):
    rows, missing = [], 0
    log = [json.loads(l) for l in open(d + "/monitor.log")]
    for k in open(d + "/kills"):
        t0, tile, want, label = k.split()
        t0, want = float(t0), int(want)
        down = back = None
        for r in log:
            if r["t"] < t0 or "error" in r: continue
            up = all(s == "up" for _, s, _ in r["replicas"])
            inc = [m.get(tile) for _, _, m in r["replicas"] if tile in m]
            if not up and down is None: down = r["t"] - t0
            if up and inc == [want]:
                back = r["t"] - t0
                break
        rows.append((label, tile, want, down, back))
    print("%-16s %4s %11s %15s %15s" % ("kill", "tile", "incarnation", "seen down (s)", "back (s)"))
    for label, tile, want, down, back in rows:
        f = lambda x: "-" if x is None else "%.2f" % x
        print("%-16s %4s %11d %15s %15s" % (label, tile, want, f(down), f(back)))
    # A tile killed again before it was back has no time of its own: its second kill's row counts.
    last = {}
    for label, tile, want, down, back in rows: last[tile] = back
    missing = [t for t, b in last.items() if b is None]
    if missing: print("never back:", missing)
    return 1 if missing else 0


if sys.argv[1] == "report": sys.exit(report(sys.argv[2]))
port, out = int(sys.argv[2]), sys.argv[3]
texts = ["the quick brown fox jumps over the lazy dog", "a tile was killed and came back",
         "serving continues while one replica recovers", "short", "every request is answered exactly once " * 4,
         "network namespaces stand in for machines", "ssh and slurm launchers restart dead tiles",
         "the host streams shards to a new incarnation"]
def post(c, t):
    c.request("POST", "/predict", json.dumps({"inputs": t}), {"Content-Type": "application/json"})
    r = c.getresponse(); return r.status, r.read()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
want = []
for t in texts:
    s, b = post(c, t); assert s == 200, (s, b); want.append(json.loads(b))
def same(a, b):
    return len(a) == len(b) and all(x["label"] == y["label"] and abs(x["score"] - y["score"]) < 1e-4 for x, y in zip(a, b))
stats = {"sent": 0, "ok": 0, "errors": 0, "wrong": 0, "problems": []}
timeline = []  # (start, end, HTTP status, right)
lock = threading.Lock()
stop = lambda: os.path.exists(out + "/stop")
def worker(i):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120); k = i
    while not stop():
        if not os.path.exists(out + "/load"): time.sleep(0.01); continue
        k = (k * 7 + 3) % len(texts)
        with lock: stats["sent"] += 1
        t0 = time.time()
        try: s, b = post(c, texts[k])
        except Exception as e:
            s, b = 0, str(e).encode(); c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        with lock:
            if s != 200:
                stats["errors"] += 1; stats["problems"].append(f"{time.time():.3f} HTTP {s} {b[:200]!r}")
            elif not same(json.loads(b), want[k]):
                stats["wrong"] += 1; stats["problems"].append(f"{time.time():.3f} wrong {k} {b[:200]!r}")
            else: stats["ok"] += 1
            timeline.append((t0, time.time(), s, s == 200 and same(json.loads(b), want[k])))
def monitor():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10); last = None
    with open(out + "/monitor.log", "a") as f:
        while not stop():
            try:
                c.request("GET", "/info"); r = c.getresponse(); info = json.loads(r.read())
                c.request("GET", "/health"); h = c.getresponse(); hb = h.read()
                reps = [(r["index"], r["state"], dict(zip(r["tiles"], r["incarnations"]))) for b in info["backends"] for r in b["replicas"]]
                cur = (reps, h.status)
                if cur != last:
                    f.write(json.dumps({"t": time.time(), "replicas": reps, "health": h.status, "body": hb.decode()[:300]}) + "\n"); f.flush()
                    last = cur
            except Exception as e:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                f.write(json.dumps({"t": time.time(), "error": str(e)}) + "\n"); f.flush(); time.sleep(0.2)
            time.sleep(0.05)
ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)] + [threading.Thread(target=monitor)]
for t in ts: t.start()
last_dump = 0
while not stop():
    time.sleep(0.5)
    with lock: json.dump(stats, open(out + "/stats.json", "w"))
with open(out + "/requests.csv", "w") as f:
    f.write("start,end,status,right\n")
    for a, b, s, r in timeline: f.write(f"{a:.4f},{b:.4f},{s},{int(r)}\n")
for t in ts: t.join()
with lock: json.dump(stats, open(out + "/stats.json", "w"))
with open(out + "/requests.csv", "w") as f:
    f.write("start,end,status,right\n")
    for a, b, s, r in timeline: f.write(f"{a:.4f},{b:.4f},{s},{int(r)}\n")
