#!/usr/bin/env bash
# scripts/cluster/chaos in CI: first a run interrupted (SIGINT) while a fault is applied leaves no
# namespace, bridge, nft table or process of its own behind; then 2 minutes of seeded network
# faults (partition, half-open, lose-machine) under checked BERT and LLM load: 0 lost, 0 wrong,
# errors only as the LLM policy of docs/cluster.md allows (chaos exits 1 otherwise). Own names
# (TS_DIR, TS_PREFIX, TS_NET, ports), bounded by timeout, cleaned up on any exit.
export TS_DIR=/tmp/tessera-cluster-chaos-ci TS_PREFIX=tscc TS_NET=10.217.0 CHAOS_PORT=18395
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
need_bins tessera-host tessera-tile
trap cluster_down EXIT
chaos=$src/scripts/cluster/chaos
seed=${CHAOS_SEED:-7}

leftovers() {  # what a run of ours could leave: namespaces, our bridge, tiles or hosts of its ports
  local left=""
  ip netns list 2>/dev/null | grep -q "^$TS_PREFIX[0-9]" && left+=" namespaces($(ip netns list | grep "^$TS_PREFIX" | tr '\n' ' '))"
  ip link show "${TS_PREFIX}br0" >/dev/null 2>&1 && left+=" bridge"
  ip -o link 2>/dev/null | grep -q " ${TS_PREFIX}v[0-9]" && left+=" veth"
  ls "$TS_DIR"/fault.* >/dev/null 2>&1 && left+=" fault-files"
  pgrep -f -- "--port $CHAOS_PORT( |$)" >/dev/null && left+=" bert-host"
  pgrep -f -- "--port $((CHAOS_PORT + 1))( |$)" >/dev/null && left+=" llm-host"
  echo "$left"
}

say "step 1: chaos interrupted during a fault cleans up"
rm -f "$TS_DIR/faults.jsonl"
timeout -k 10 400 "$chaos" --seed "$seed" --faults 4 > "$TS_DIR.interrupted.txt" 2>&1 &
pid=$!
applied=""
for _ in $(seq 3000); do
  grep -q '"event": "apply"' "$TS_DIR/faults.jsonl" 2>/dev/null && { applied=1; break; }
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$applied" ] || { tail -20 "$TS_DIR.interrupted.txt"; fail "no fault was applied within 300 s"; }
grep '"event": "apply"' "$TS_DIR/faults.jsonl" | head -1
kill -INT $pid
rc=0; wait $pid || rc=$?
say "interrupted chaos exited $rc"
[ "$rc" != 0 ] || fail "an interrupted chaos run exited 0"
sleep 2
left=$(leftovers)
[ -z "$left" ] || fail "the interrupted chaos run left:$left"
say "nothing left behind"

say "step 2: chaos --minutes 2 --seed $seed"
timeout -k 10 600 "$chaos" --seed "$seed" --minutes 2 || fail "chaos failed (see above; $TS_DIR/out)"
cp "$TS_DIR/out/chaos.csv" "$TS_DIR.chaos.csv" 2>/dev/null || true
n=$(grep -c '"event": "apply"' "$TS_DIR/faults.jsonl")
[ "$n" -ge 3 ] || fail "only $n faults in 2 minutes"
sleep 1
left=$(leftovers)
[ -z "$left" ] || fail "chaos left:$left"
say "PASS: $n faults in 2 minutes, nothing lost, wrong or failed beyond the policy, nothing left behind"
