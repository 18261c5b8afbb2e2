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
hf=$TS_DIR/hostfile; cfg=$TS_DIR/ssh/ssh_config; out=$TS_DIR/out; rm -rf "$out"; mkdir -p "$out"

say "1. bert-tiny, 6 tiles over 3 namespaces (cyclic), CurveZMQ"
t0=$(date +%s.%N)
timeout -k 5 300 "$src/scripts/launch/ssh" --hostfile "$hf" --ssh-config "$cfg" --tiles 6 --placement cyclic \
  --log-dir "$out/run1" -- --model bert-tiny --check 2 --plan 1,2,3 | tee "$out/run1.txt"
say "   took $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo '?') s"
[ "$(grep -c "^check batch" "$out/run1.txt")" = 2 ] || fail "the job did not check 2 batches"
for t in 0 1 2 3 4 5; do [ -s "$out/run1/tile-$t.log" ] || [ -e "$out/run1/tile-$t.log" ] || fail "no log gathered for tile $t"; done
for i in 1 2 3; do
  left=$(tiles_in_ns "$i")
  [ "${left:-0}" = 0 ] || fail "tiles left running in namespace $i"
done

say "2. the same answers as the single-machine run (local launcher)"
timeout -k 5 300 "$src/scripts/launch/local" --tiles 6 -- --model bert-tiny --check 2 --plan 1,2,3 > "$out/local.txt"
grep '^check batch' "$out/local.txt"
diff <(grep -o 'sequences.*tokens\|max |logit.*' "$out/run1.txt") <(grep -o 'sequences.*tokens\|max |logit.*' "$out/local.txt") ||
  fail "the namespace run and the single-machine run differ"

say "3. an unreachable machine: the launcher fails promptly and leaves nothing running elsewhere"
printf '%s slots=2\n%s slots=2\n' "$TS_NET.1" "$TS_NET.2" > "$out/hosts-bad"
kill "$(cat "$TS_DIR/ssh/sshd-2.pid")"   # machine 2 stops answering ssh
set +e
timeout -k 5 120 "$src/scripts/launch/ssh" --hostfile "$out/hosts-bad" --ssh-config "$cfg" --tiles 4 \
  --register-timeout-ms 8000 --log-dir "$out/run3" -- --model bert-tiny --check 1 > "$out/run3.txt" 2>&1
rc=$?
set -e
grep -v streaming "$out/run3.txt" | tail -5
[ $rc != 0 ] || fail "a job with an unreachable machine succeeded"
[ $rc != 124 ] || fail "the launcher hung instead of failing"
sleep 1
left=$(tiles_in_ns 1)
[ "${left:-0}" = 0 ] || fail "tiles left running on $TS_NET.1 after the failed job"

say "4. a tile killed mid-job: the job fails, naming it, and every other tile is stopped"
set +e
printf '%s slots=2\n%s slots=2\n' "$TS_NET.1" "$TS_NET.3" > "$out/hosts-13"   # machine 2 is down since step 3
timeout -k 5 200 "$src/scripts/launch/ssh" --hostfile "$out/hosts-13" --ssh-config "$cfg" --tiles 3 --placement cyclic \
  --log-dir "$out/run4" -- --model bert-tiny --serve --port 18181 > "$out/run4.txt" 2>&1 &
job=$!
set -e
for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/18181) 2>/dev/null && break; sleep 0.3; done
kill_tile_in_ns 3 1 || fail "no tile 1 running in namespace 3"
rc=0; wait $job || rc=$?
grep -v streaming "$out/run4.txt" | tail -4
grep -q "tile 1 .*failed" "$out/run4.txt" || fail "the failure does not name tile 1"
[ $rc != 0 ] && [ $rc != 124 ] || fail "the job did not fail promptly after losing tile 1 (rc $rc)"
sleep 1
for i in 1 2 3; do
  left=$(tiles_in_ns "$i")
  [ "${left:-0}" = 0 ] || fail "tiles left running in namespace $i after the failure"
done
echo "ssh_netns: 4 passed, 0 failed"
