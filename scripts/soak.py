#!/usr/bin/env python3
"""The soak (docs/soak.md): a tessera-host serving a model on tile processes plus a spawned
tessera-gpu under mixed HTTP load for N minutes, with faults from a seeded plan (--faults: kill,
stall, slow, delay, drop, duplicate, reorder, corrupt, partition, kill_gpu) and SIGKILLs of
random tile and GPU processes from outside at seeded random moments. Every answer is checked
against the answer a fault-free host gave to the same input; requests that get no answer are
lost. RSS (/proc/PID/status VmRSS) and open fds (/proc/PID/fd) of every process are sampled.

Run through scripts/soak (it picks a python3 with matplotlib and builds what is missing).
Writes OUT/soak.json (everything, with the timeline), OUT/soak.csv (one row per process),
OUT/soak.png (RSS and fds over time) and OUT/soak-host.log; prints progress and a table.
Exit status 0 when the targets hold (0 lost, 0 wrong, 0 errors, RSS growth of every long-lived
process under 5%, no fd growth), 1 otherwise, 2 on bad options."""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import soak_report

WORDS = ("tile exchange superstep barrier slice shard replica host batch token budget packed padded "
         "sequence attention layer head weight bias kernel memory process socket message heartbeat "
         "recovery incarnation supervisor router backend queue latency throughput the a of and to in "
         "is on for with fast slow long short quick brown fox jumps over lazy dog while every each "
         "compute phase sync program model vocabulary encoder pooler classifier label score").split()


def parse_args():
    p = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--minutes", type=float, default=10, help="length of the loaded run (default 10)")
    a("--seed", type=int, default=1, help="seed of the fault plan, the kill schedule, texts and clients")
    a("--model", default="bert-mini", help="model preset (default bert-mini; bert-tiny on a busy machine)")
    a("--tiles", type=int, default=4, help="tile processes (default 4)")
    a("--plan", default="2,1,2", help="R,S,W: 2 replicas of 2 tensor-parallel tiles, so the exchange "
                                      "faults have slices to act on (default 2,1,2)")
    a("--clients", type=int, default=8, help="closed-loop HTTP clients (default 8)")
    a("--long-threshold", type=int, default=32, help="hybrid routing: longer sequences go to tiles")
    a("--kill-every", type=float, default=15, help="mean seconds between outside SIGKILLs (0: none)")
    a("--spare-tiles", default="0", help="tile ids never killed (comma list or 'none'): a tile process "
                                          "that lives the whole run, to measure its growth (default 0)")
    a("--no-plan", action="store_true", help="no --faults plan (outside kills only)")
    a("--exchange-timeout-ms", type=int, default=2000, help="tiles' wait for a slice (dropped slices)")
    a("--warmup", type=float, default=60, help="seconds of the run before the baseline sample of growth")
    a("--sample-every", type=float, default=5, help="seconds between RSS/fd samples")
    a("--progress-every", type=float, default=15, help="seconds between progress lines")
    a("--request-timeout", type=float, default=90, help="seconds a client waits for an answer (then lost)")
    a("--bin-dir", default=os.environ.get("TESSERA_BIN_DIR", "build/bin"))
    a("--out-dir", default="results")
    o = p.parse_args()
    if o.minutes <= 0 or o.clients < 1 or o.tiles < 1 or o.sample_every <= 0:
        p.error("--minutes, --clients, --tiles and --sample-every must be positive")
    try:
        o.spare = set() if o.spare_tiles in ("", "none") else {int(x) for x in o.spare_tiles.split(",")}
    except ValueError:
        p.error("--spare-tiles: a comma list of tile ids, or none")
    if any(t < 0 or t >= o.tiles for t in o.spare):
        p.error("--spare-tiles: tile ids are 0..%d" % (o.tiles - 1))
    o.warmup = min(o.warmup, o.minutes * 60 / 2)
    return o


# ---------------------------------------------------------------------------------------------
# The fault plan and the inputs, both from the seed.

def make_fault_plan(o):
    rng = random.Random(o.seed * 1_000_003 + 17)
    victims = [t for t in range(o.tiles) if t not in o.spare] or list(range(o.tiles))
    faults = []
    # Kills and stalls fire in a tile's first incarnation only: early batches, so they happen.
    # Stalls first: a tile killed before its stall's batch never stalls.
    for t in victims:
        faults.append({"kind": "kill", "tile": t, "batch": rng.randint(30, 150), "superstep": rng.randint(0, 8)})
    t = rng.choice(victims)
    faults.append({"kind": "stall", "tile": t, "batch": rng.randint(3, 12), "seconds": round(rng.uniform(0.5, 1.5), 2)})
    t = rng.choice(victims)  # past the heartbeat timeout: declared failed, restarted
    faults.append({"kind": "stall", "tile": t, "batch": rng.randint(13, 25), "seconds": 4.0})
    faults.append({"kind": "slow", "tile": rng.randrange(o.tiles), "factor": 1.5})
    # Tiles are numbered replica by replica: a tile and its even/odd neighbour exchange slices.
    a = rng.randrange(o.tiles - o.tiles % 2) if o.tiles > 1 else 0
    faults.append({"kind": "delay", "from": a, "to": a ^ 1 if o.tiles > 1 else -1, "ms": 0.5, "jitter_ms": 0.5})
    faults += [{"kind": "drop", "fraction": 2e-4}, {"kind": "duplicate", "fraction": 2e-3},
               {"kind": "reorder", "fraction": 2e-3}, {"kind": "corrupt", "fraction": 2e-4}]
    if o.tiles > 1:
        faults.append({"kind": "partition", "tiles": [rng.choice(victims)], "batch": rng.randint(100, 400), "batches": 1})
    for _ in range(3):
        faults.append({"kind": "kill_gpu", "batch": rng.randint(200, 4000), "gpu": 0})
    return {"seed": o.seed, "faults": faults}


def make_inputs(seed):
    rng = random.Random(seed)
    def text(lo, hi):
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
    # About 3 tokens a word: short ones (GPU under hybrid routing) and long ones (tiles, <= 512).
    texts = [text(1, 8) for _ in range(24)] + [text(15, 100) for _ in range(16)]
    pairs = [[text(1, 5), text(3, 25)] for _ in range(12)]
    return texts, pairs


# ---------------------------------------------------------------------------------------------
# HTTP

def post(conn, path, body):
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def get_json(port, path, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        data = r.read()
        return json.loads(data) if r.status == 200 and path != "/metrics" else data.decode()
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def scores_close(got, want, tol=1e-4):
    """A /predict answer for one input against the reference: the same labels, scores within tol."""
    if not isinstance(got, list) or len(got) != len(want):
        return False
    g = {x.get("label"): x.get("score") for x in got if isinstance(x, dict)}
    return all(isinstance(g.get(w["label"]), float) and abs(g[w["label"]] - w["score"]) <= tol for w in want)


# ---------------------------------------------------------------------------------------------
# Processes

class host:
    """A tessera-host this script started (its tiles and tessera-gpu die with it)."""

    def __init__(self, o, log_path, extra):
        self.log_path = log_path
        self.log = open(log_path, "w")
        args = [os.path.join(o.bin_dir, "tessera-host"), "--model", o.model, "--tiles", str(o.tiles),
                "--plan", o.plan, "--serve", "--port", "0", "--spawn-gpu", "1", "--routing", "hybrid",
                "--long-threshold", str(o.long_threshold), "--exchange-timeout-ms", str(o.exchange_timeout_ms)] + extra
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.port = 0
        deadline = time.time() + 600
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://[0-9.]+:(\d+)", open(log_path).read())
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.2)
        tail = open(log_path).read()[-2000:]
        self.stop()
        sys.exit("soak: tessera-host did not start (%s):\n%s" % (" ".join(args), tail))

    def stop(self, grace=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def proc_stat(pid):
    """(comm, state, ppid) of a process, or None when it is gone."""
    try:
        s = open("/proc/%d/stat" % pid).read()
    except OSError:
        return None
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, rest[0], int(rest[1])


def children(parent):
    """{pid: (comm, state)} of the processes whose parent is `parent`."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(int(d))
            if st and st[2] == parent:
                out[int(d)] = (st[0], st[1])
    return out


def rss_and_fds(pid):
    try:
        rss = next(int(line.split()[1]) for line in open("/proc/%d/status" % pid) if line.startswith("VmRSS:"))
        return rss, len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration):
        return None


def tile_identity(pid):
    """(tile id, incarnation) from a tessera-tile's command line."""
    try:
        args = open("/proc/%d/cmdline" % pid).read().split("\0")
        return int(args[args.index("--tile-id") + 1]), int(args[args.index("--incarnation") + 1])
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------
# The soak

class soak:
    def __init__(self, o, srv, texts, pairs, want):
        self.o, self.srv, self.texts, self.pairs, self.want = o, srv, texts, pairs, want
        self.mu = threading.Lock()
        self.stop_clients = threading.Event()
        self.stop_all = threading.Event()
        self.n = dict(sent=0, answered=0, ok=0, errors=0, wrong=0, lost=0, sequences=0)
        self.by_kind = {}
        self.problems = []
        self.kills = []
        self.samples = []
        self.procs = {}  # pid -> {role, tile, incarnation, pid, born, samples}
        self.gpu_seen = 0
        self.conns = {}
        self.t0 = time.time()

    def now(self):
        return time.time() - self.t0

    def problem(self, what):
        with self.mu:
            if len(self.problems) < 50:
                self.problems.append("%.1f s: %s" % (self.now(), what[:400]))

    # -- clients ----------------------------------------------------------------------------
    def text_list(self, kind, ids):
        return kind, "/predict", {"inputs": [self.texts[i] for i in ids]}, \
            lambda a: isinstance(a, list) and len(a) == len(ids) and \
            all(scores_close(x, self.want["text"][i]) for x, i in zip(a, ids))

    def pick(self, rng):
        """(kind, path, body, check) of one request of the mix."""
        r = rng.random()
        if r < 0.5:
            i = rng.randrange(len(self.texts))
            return "single", "/predict", {"inputs": self.texts[i]}, lambda a: scores_close(a, self.want["text"][i])
        if r < 0.7:
            return self.text_list("list", [rng.randrange(len(self.texts)) for _ in range(rng.randint(2, 6))])
        if r < 0.85:
            ids = [rng.randrange(len(self.pairs)) for _ in range(rng.randint(1, 3))]
            return "pair", "/predict", {"inputs": [self.pairs[i] for i in ids]}, \
                lambda a: isinstance(a, list) and len(a) == len(ids) and \
                all(scores_close(x, self.want["pair"][i]) for x, i in zip(a, ids))
        ids = [rng.randrange(len(self.texts)) for _ in range(rng.randint(1, 4))]
        body = {"inputs": [{"name": "text", "shape": [len(ids)], "datatype": "BYTES",
                            "data": [self.texts[i] for i in ids]}]}
        want = [v for i in ids for v in self.want["logits"][i]]
        def check(a):
            try:
                got = a["outputs"][0]["data"]
            except (TypeError, KeyError, IndexError):
                return False
            return len(got) == len(want) and all(abs(g - w) <= 1e-4 for g, w in zip(got, want))
        return "kserve", "/v2/models/%s/infer" % self.o.model, body, check

    def client(self, index):
        rng = random.Random(self.o.seed * 7919 + index)
        conn = None
        self.conns[index] = None
        # First the longest texts, a dozen a request: full token budgets, so that each tile has
        # touched its activations' pages (reserved, resident when first written) before the
        # growth baseline.
        longest = sorted(range(len(self.texts)), key=lambda i: -len(self.texts[i]))[:12]
        first = True
        while not self.stop_clients.is_set():
            kind, path, body, check = self.text_list("prime", longest) if first else self.pick(rng)
            first = False
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=self.o.request_timeout)
            with self.mu:
                self.n["sent"] += 1
                k = self.by_kind.setdefault(kind, dict(sent=0, ok=0, errors=0, wrong=0, lost=0))
                k["sent"] += 1
            try:
                status, data = post(conn, path, body)
            except (OSError, http.client.HTTPException) as e:
                with self.mu:
                    self.n["lost"] += 1
                    k["lost"] += 1
                self.problem("lost (%s %s): %r" % (kind, path, e))
                conn.close()
                conn = None
                continue
            res = "ok"
            if status != 200:
                res = "errors"
                self.problem("HTTP %d (%s): %s" % (status, kind, data[:200].decode(errors="replace")))
            else:
                try:
                    good = check(json.loads(data))
                except ValueError:
                    good = False
                if not good:
                    res = "wrong"
                    self.problem("wrong answer (%s %s): %s" % (kind, json.dumps(body)[:120], data[:300].decode(errors="replace")))
            with self.mu:
                self.n["answered"] += 1
                self.n[res] += 1
                k[res] += 1
        self.conns[index] = conn  # open until the end sample, so that fd counts compare

    # -- processes ---------------------------------------------------------------------------
    def sample(self):
        t = self.now()
        info = get_json(self.srv.port, "/info")
        gpu_inc = {}  # a restarted tessera-gpu's incarnation: the restarts before it
        if isinstance(info, dict):
            for b in info["backends"]:
                if b["kind"] == "gpu":
                    for r in b["replicas"]:
                        gpu_inc.update({p: r["recoveries"] for p in r["pids"] if p > 0})
        rows = [(self.srv.pid, "host", None, None)]
        zombies = 0
        for pid, (comm, state) in sorted(children(self.srv.pid).items()):
            if state == "Z":
                zombies += 1
                continue
            if pid not in self.procs:
                if comm == "tessera-tile":
                    ident = tile_identity(pid)
                    if ident is None:
                        continue
                    rows.append((pid, "tile", ident[0], ident[1]))
                elif comm == "tessera-gpu":
                    rows.append((pid, "gpu", 0, gpu_inc.get(pid, self.gpu_seen)))
                    self.gpu_seen += 1
                else:
                    rows.append((pid, comm, None, None))
            else:
                p = self.procs[pid]
                rows.append((pid, p["role"], p["tile"], p["incarnation"]))
        point = {"t": round(t, 2), "zombies": zombies, "procs": []}
        for pid, role, tile, inc in rows:
            m = rss_and_fds(pid)
            if m is None:
                continue
            p = self.procs.setdefault(pid, {"pid": pid, "role": role, "tile": tile, "incarnation": inc,
                                            "first_seen": round(t, 2), "samples": []})
            p["samples"].append((round(t, 2), m[0], m[1]))
            point["procs"].append({"pid": pid, "rss_kb": m[0], "fds": m[1]})
        if isinstance(info, dict):
            point["replicas_up"] = sum(r["state"] == "up" for b in info["backends"] for r in b["replicas"])
            point["replicas"] = sum(len(b["replicas"]) for b in info["backends"])
        with self.mu:
            self.samples.append(point)
        return point

    def sampler(self):
        while not self.stop_all.wait(self.o.sample_every):
            self.sample()

    def victims(self):
        """Processes the outside may kill, in a stable order: tiles by id (not the spared), then the GPU."""
        out = []
        for pid, (comm, state) in children(self.srv.pid).items():
            if state == "Z":
                continue
            if comm == "tessera-tile":
                ident = tile_identity(pid)
                if ident and ident[0] not in self.o.spare:
                    out.append(("tile %d" % ident[0], pid))
            elif comm == "tessera-gpu":
                out.append(("gpu", pid))
        return sorted(out)

    def kill(self, name, pid, how):
        st = proc_stat(pid)  # still our host's child, not a recycled pid
        if not st or st[2] != self.srv.pid or st[1] == "Z":
            return False
        os.kill(pid, signal.SIGKILL)
        with self.mu:
            self.kills.append({"t": round(self.now(), 2), "victim": name, "pid": pid, "how": how})
        return True

    def all_back(self, killed):
        info = get_json(self.srv.port, "/info")
        if not isinstance(info, dict):
            return False
        for b in info["backends"]:
            for r in b["replicas"]:
                if r["state"] != "up" or any(p <= 0 or p in killed for p in r["pids"]):
                    return False
                if any(proc_stat(p) is None for p in r["pids"]):
                    return False
        return True

    def killer(self, end):
        rng = random.Random(self.o.seed * 104729 + 3)
        self.stop_all.wait(min(20.0, end / 4))  # the plan's stalls and kills come first
        while True:
            if self.stop_all.wait(max(1.0, rng.expovariate(1.0 / self.o.kill_every))):
                return
            if self.now() > end - 20:  # the last 20 s without kills: everything back for the end sample
                return
            v = self.victims()
            if not v:
                continue
            how = rng.choices(["single", "double", "twice"], weights=[6, 2, 2])[0]
            name, pid = v[rng.randrange(len(v))]
            killed = {pid}
            t0 = time.time()
            first = len(self.kills)
            if not self.kill(name, pid, how):
                continue
            if how == "double" and len(v) > 1:  # a second one while the first recovers
                time.sleep(rng.uniform(0.02, 0.2))
                others = [x for x in self.victims() if x[0] != name]
                if others:
                    n2, p2 = others[rng.randrange(len(others))]
                    if self.kill(n2, p2, how):
                        killed.add(p2)
            elif how == "twice":  # its next incarnation as soon as it exists
                until = time.time() + 10
                while time.time() < until:
                    fresh = [p for n, p in self.victims() if n == name and p not in killed]
                    if fresh:
                        if self.kill(name, fresh[0], how):
                            killed.add(fresh[0])
                        break
                    time.sleep(0.005)
            back = None
            until = time.time() + 60
            while time.time() < until and not self.stop_all.is_set():
                if self.all_back(killed):
                    back = time.time() - t0
                    break
                time.sleep(0.02)
            with self.mu:
                for k in self.kills[first:]:
                    k["back_seconds"] = None if back is None else round(back, 3)
            if back is None and not self.stop_all.is_set():
                self.problem("not back within 60 s after killing %s (%s)" % (name, how))

    def progress(self, end):
        last = dict(self.n)
        last_t = self.now()
        while not self.stop_all.wait(self.o.progress_every):
            t = self.now()
            with self.mu:
                n = dict(self.n)
                kills = len(self.kills)
            host_p = self.procs.get(self.srv.pid, {}).get("samples", [(0, 0, 0)])[-1]
            print("soak %5.0f/%.0f s  requests %d (%.0f/s)  ok %d  errors %d  wrong %d  lost %d  kills %d  "
                  "host rss %.1f MiB fds %d" % (t, end, n["sent"], (n["sent"] - last["sent"]) / max(t - last_t, 1e-9),
                                                 n["ok"], n["errors"], n["wrong"], n["lost"], kills,
                                                 host_p[1] / 1024, host_p[2]), flush=True)
            last, last_t = n, t


# ---------------------------------------------------------------------------------------------
# Before the faults: the answers of a fault-free host to every input.

def reference_answers(o, texts, pairs):
    srv = host(o, os.path.join(o.out_dir, "soak-reference-host.log"), [])
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=o.request_timeout)
    want = {"text": [], "pair": [], "logits": []}
    try:
        for t in texts:
            s1, d1 = post(conn, "/predict", {"inputs": t})
            s2, d2 = post(conn, "/v2/models/%s/infer" % o.model,
                          {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [t]}]})
            if s1 != 200 or s2 != 200:
                sys.exit("soak: the fault-free host answered %d/%d: %s %s" % (s1, s2, d1[:200], d2[:200]))
            want["text"].append(json.loads(d1))
            want["logits"].append(json.loads(d2)["outputs"][0]["data"])
        for p in pairs:
            s, d = post(conn, "/predict", {"inputs": [p]})
            if s != 200:
                sys.exit("soak: the fault-free host answered %d: %s" % (s, d[:200]))
            want["pair"].append(json.loads(d)[0])
    finally:
        conn.close()
        srv.stop()
    return want


def main():
    o = parse_args()
    # SIGTERM stops the hosts this script started, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    os.makedirs(o.out_dir, exist_ok=True)
    texts, pairs = make_inputs(o.seed)
    t_ref = time.time()
    print("soak: answers of a fault-free %s host to %d inputs ..." % (o.model, len(texts) + len(pairs)), flush=True)
    want = reference_answers(o, texts, pairs)
    print("soak: references in %.0f s" % (time.time() - t_ref), flush=True)

    extra = []
    plan = None
    if not o.no_plan:
        plan = make_fault_plan(o)
        plan_path = os.path.join(o.out_dir, "soak-faults.json")
        json.dump(plan, open(plan_path, "w"), indent=1)
        extra = ["--faults", plan_path]
    srv = host(o, os.path.join(o.out_dir, "soak-host.log"), extra)
    print("soak: tessera-host pid %d on port %d; %d clients for %.1f min, outside kills every ~%.0f s, seed %d"
          % (srv.pid, srv.port, o.clients, o.minutes, o.kill_every, o.seed), flush=True)
    s = soak(o, srv, texts, pairs, want)
    end = o.minutes * 60
    try:
        s.sample()
        threads = [threading.Thread(target=s.client, args=(i,), daemon=True) for i in range(o.clients)]
        threads.append(threading.Thread(target=s.sampler, daemon=True))
        threads.append(threading.Thread(target=s.progress, args=(end,), daemon=True))
        if o.kill_every > 0:
            threads.append(threading.Thread(target=s.killer, args=(end,), daemon=True))
        for t in threads:
            t.start()
        while s.now() < end:
            time.sleep(0.5)
        s.stop_clients.set()
        for t in threads[:o.clients]:
            t.join()
        run_seconds = s.now()
        # Everything back (the last kills' recoveries), then the end sample.
        until = time.time() + 60
        while time.time() < until and not s.all_back(set()):
            time.sleep(0.1)
        s.stop_all.set()
        for t in threads[o.clients:]:
            t.join()
        time.sleep(o.sample_every)  # let the last batches' buffers go
        final = s.sample()
        info = get_json(srv.port, "/info")
        metrics = get_json(srv.port, "/metrics")
    except KeyboardInterrupt:
        print("soak: interrupted; stopping tessera-host", file=sys.stderr)
        return 130
    finally:
        s.stop_all.set()
        s.stop_clients.set()
        for c in s.conns.values():
            if c:
                c.close()
        rc = srv.stop()

    rows = soak_report.summarize_processes(s.procs, o.warmup, final["t"])
    report = {
        "config": {"model": o.model, "tiles": o.tiles, "plan": o.plan, "minutes": o.minutes, "seed": o.seed,
                   "clients": o.clients, "long_threshold": o.long_threshold, "kill_every_s": o.kill_every,
                   "spare_tiles": sorted(o.spare), "warmup": o.warmup, "exchange_timeout_ms": o.exchange_timeout_ms,
                   "fault_plan": plan, "command": " ".join(["scripts/soak"] + sys.argv[1:])},
        "requests": s.n, "by_kind": s.by_kind, "run_seconds": round(run_seconds, 1),
        "requests_per_second": s.n["sent"] / max(run_seconds, 1e-9),
        "faults": dict(soak_report.count_log(srv.log_path), outside_kills=len(s.kills),
                       outside_tile_kills=sum(k["victim"].startswith("tile") for k in s.kills),
                       outside_gpu_kills=sum(k["victim"] == "gpu" for k in s.kills)),
        "recovery": soak_report.recovery(info, metrics, s.kills),
        "kills": s.kills, "processes": rows, "problems": s.problems,
        "verdict": soak_report.verdict(s.n, rows, final, srv.pid, o.tiles + 1, s.kills, rc),
        "timeline": s.samples,
        "procs": {str(p["pid"]): {k: v for k, v in p.items() if k != "samples"} for p in s.procs.values()},
    }
    soak_report.write(report, o.out_dir)
    soak_report.print_table(report)
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments", "plot_soak.py")
    png = os.path.join(o.out_dir, "soak.png")
    if subprocess.call([sys.executable, plot, os.path.join(o.out_dir, "soak.json"), png]) == 0:
        print("soak: plot in %s" % png)
    print("soak: %s/soak.{json,csv}, host log %s" % (o.out_dir, srv.log_path))
    return 0 if report["verdict"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
