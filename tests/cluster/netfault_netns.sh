#!/usr/bin/env bash
# scripts/cluster/netfault: the fault kinds refuse what they do not know; a partition really cuts
# a machine off both ways and a half-open one only outwards (a SYN arrives, its answer does
# not); the log holds what was done, in time order; heal removes the nft table; a lost machine
# is gone and comes back; no namespace or table left behind.
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
nf=$src/scripts/cluster/netfault
export TS_DIR=/tmp/tessera-cluster-netfault TS_PREFIX=tsf TS_NET=10.212.0
trap 'for f in "$TS_DIR"/fault.*; do [ -e "$f" ] && "$nf" heal "${f##*.}"; done 2>/dev/null; cluster_down' EXIT
cluster_down; rm -f "$TS_DIR"/fault.* "$TS_DIR/faults.jsonl"
timeout 60 "$src/scripts/cluster/netns" up 2 >/dev/null || fail "netns up failed"

say "1. refusals: an unknown kind, a machine that does not exist, a heal with nothing to heal"
rc=0; out=$("$nf" apply flood 1 2>&1) || rc=$?
[ $rc = 2 ] && [[ "$out" == *"unknown fault kind 'flood'"* ]] || fail "unknown kind: rc $rc, '$out'"
rc=0; out=$("$nf" apply partition 7 2>&1) || rc=$?
[ $rc = 2 ] && [[ "$out" == *"no machine '7'"* ]] || fail "unknown machine: rc $rc, '$out'"
rc=0; out=$("$nf" heal 1 2>&1) || rc=$?
[ $rc = 2 ] && [[ "$out" == *"no fault to heal"* ]] || fail "heal of nothing: rc $rc, '$out'"

say "2. partition: no TCP either way; half-open: this side's packets arrive, the answers vanish"
# a listener in machine 1 that records every connection's first line; one here for the way back
listener() {  # PORT FILE
  python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen()
s.settimeout(60)
while True:
    c, _ = s.accept(); c.settimeout(2)
    try: open(sys.argv[2], "a").write(c.recv(100).decode()); c.sendall(b"ok")
    except Exception: pass
    c.close()' "$@"
}
rm -f "$TS_DIR/got"
"$src/scripts/cluster/netns" exec 1 bash -c "$(declare -f listener); listener 18555 $TS_DIR/got" & lpid=$!
send() {  # text: "ok" if the answer came back
  python3 -c 'import socket,sys
try:
    s=socket.create_connection(("'"$TS_NET"'.1", 18555), timeout=2); s.sendall(sys.argv[1].encode()); print(s.recv(10).decode())
except Exception as e: print("no answer:", type(e).__name__)' "$1"
}
for _ in $(seq 50); do [ "$(send probe)" = ok ] && break; sleep 0.1; done
[ "$(send before)" = ok ] || fail "no answer from machine 1 before any fault"
"$nf" apply partition 1 || fail "apply partition"
r=$(send during-partition); [ "$r" != ok ] || fail "machine 1 answered through a partition"
"$nf" heal 1 || fail "heal"
[ "$(send after-heal)" = ok ] || fail "no answer after the heal"
"$nf" apply half-open 1 || fail "apply half-open"
r=$(send half-open-syn); [ "$r" != ok ] || fail "machine 1 answered through a half-open link"
"$nf" heal 1
sleep 0.5; kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null || true
grep -q before "$TS_DIR/got" && grep -q after-heal "$TS_DIR/got" || fail "the listener missed the healthy connections"
! grep -q during-partition "$TS_DIR/got" || fail "a connection crossed the partition"
# half-open: the SYN arrives but the SYN-ACK vanishes, so no connection is made (nothing recorded)
! grep -q half-open-syn "$TS_DIR/got" || fail "a connection completed over a half-open link"
python3 - "$TS_DIR/faults.jsonl" <<'PY' || fail "the fault log is not what was done"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
got = [(e["event"], e["kind"], e["machine"]) for e in ev]
assert got == [("apply", "partition", 1), ("heal", "partition", 1), ("apply", "half-open", 1), ("heal", "half-open", 1)], got
assert all(b["t"] >= a["t"] for a, b in zip(ev, ev[1:])), "timestamps go backwards"
PY
"$src/scripts/cluster/netns" exec 1 nft list tables | grep -q tessera_fault && fail "a fault table outlived its heal"
"$nf" apply lose-machine 2 || fail "apply lose-machine"
[ -e /var/run/netns/${TS_PREFIX}2 ] && fail "machine 2 still exists after lose-machine"
"$nf" heal 2 || fail "heal of a lost machine"
[ -e /var/run/netns/${TS_PREFIX}2 ] || fail "machine 2 not made again"
say PASS
