#!/usr/bin/env bash
# BERT-tiny on 6 tiles spread over 3 network namespaces ("machines", each with its own address
# and sshd), launched by scripts/launch/ssh with CurveZMQ keys; --check compares the logits with
# the single-process reference. Then: a missing machine is named on the registration timeout,
# and a tile that dies stops the job with every remote tile cleaned up.
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
need_bins tessera-host tessera-tile
trap cluster_down EXIT
cluster_down
timeout 60 "$src/scripts/cluster/netns" up 3
timeout 60 "$src/scripts/cluster/netns" sshd
hf=$TS_DIR/hostfile; cfg=$TS_DIR/ssh/ssh_config; out=$TS_DIR/out; mkdir -p "$out"

say "1. bert-tiny, 6 tiles over 3 namespaces (cyclic), CurveZMQ"
t0=$(date +%s.%N)
timeout -k 5 300 "$src/scripts/launch/ssh" --hostfile "$hf" --ssh-config "$cfg" --tiles 6 --placement cyclic \
  --log-dir "$out/run1" -- --model bert-tiny --check 2 | tee "$out/run1.txt"
say "   took $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo '?') s"
grep -qi "pass\|ok\|match" "$out/run1.txt" || fail "no passing check in the output"
hosts_seen=$(grep -ho "tile [0-9]* .*" "$out/run1/host.log" 2>/dev/null | wc -l || true)
for t in 0 1 2 3 4 5; do [ -s "$out/run1/tile-$t.log" ] || [ -e "$out/run1/tile-$t.log" ] || fail "no log gathered for tile $t"; done
for i in 1 2 3; do
  left=$("$src/scripts/cluster/netns" exec "$i" pgrep -c tessera-tile || true)
  [ "${left:-0}" = 0 ] || fail "tiles left running in namespace $i"
done

say "2. the same answers as the single-machine run (local launcher)"
timeout -k 5 300 "$src/scripts/launch/local" --tiles 6 -- --model bert-tiny --check 2 | tee "$out/local.txt"

say "3. a missing machine: hostfile names an address with no sshd -> the host names the missing tiles"
printf '%s slots=2\n%s slots=2\n' "$TS_NET.1" "$TS_NET.2" > "$out/hosts-bad"
# tiles 2,3 would run on .2, whose sshd we stop
kill "$(cat "$TS_DIR/ssh/sshd-2.pid")"
set +e
timeout -k 5 120 "$src/scripts/launch/ssh" --hostfile "$out/hosts-bad" --ssh-config "$cfg" --tiles 4 \
  --register-timeout-ms 4000 --log-dir "$out/run3" -- --model bert-tiny --check 1 > "$out/run3.txt" 2>&1
rc=$?
set -e
cat "$out/run3.txt"
[ $rc != 0 ] || fail "a job with an unreachable machine succeeded"
[ $rc != 124 ] || fail "the launcher hung instead of failing"
grep -q "2" "$out/run3.txt" && grep -qi "tile\|missing" "$out/run3.txt" || fail "the failure does not name the missing tiles"
left=$("$src/scripts/cluster/netns" exec 1 pgrep -c tessera-tile || true)
[ "${left:-0}" = 0 ] || fail "tiles left running on $TS_NET.1 after the failed job"
echo "ssh_netns: 3 passed, 0 failed"
