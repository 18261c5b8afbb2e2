#!/usr/bin/env bash
# BERT-tiny on 6 tiles spread over 3 network namespaces ("machines", each with its own address
# and sshd), launched by scripts/launch/ssh with CurveZMQ keys; --check compares the logits with
# the single-process reference. Then: a missing machine is named on the registration timeout,
# and, with a serving host under load, tiles SIGKILLed at random moments are started again by the
# launcher (the host takes them back, no request fails) until --max-tile-restarts, when the job
# stops, naming the tile, with every remote tile cleaned up.
source "$(dirname "$0")/common.sh"
three_machines_up
timeout 180 "$src/scripts/cluster/netns" sshd   # ssh handshakes are slow on a busy 2-core machine
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
grep -q "cannot prepare $TS_NET.2 over ssh" "$out/run3.txt" || fail "the unreachable machine is not named"
sleep 1
left=$(tiles_in_ns 1)
[ "${left:-0}" = 0 ] || fail "tiles left running on $TS_NET.1 after the failed job"

say "4. a serving host on 4 tiles over 2 machines (plan 2,2,1): tiles killed under load come back"
say "   (the launcher starts a dead tile again after 4 s; the host's heartbeat limit is 3 s)"
printf '%s slots=2\n%s slots=2\n' "$TS_NET.1" "$TS_NET.3" > "$out/hosts-13"   # machine 2 is down since step 3
seed=${TS_SEED:-$RANDOM}; RANDOM=$seed; say "   seed $seed (TS_SEED=$seed replays the kill moments)"
http=18181
set +e
timeout -k 5 400 "$src/scripts/launch/ssh" --hostfile "$out/hosts-13" --ssh-config "$cfg" --tiles 4 --placement cyclic \
  --max-tile-restarts 2 --restart-delay-ms 4000 --log-dir "$out/run4" -- --model bert-tiny --plan 2,2,1 \
  --serve --port $http > "$out/run4.txt" 2>&1 &
job=$!
set -e
for _ in $(seq 300); do [ "$(replicas_state $http 0 0)" = up ] && break; kill -0 $job || break; sleep 0.3; done
[ "$(replicas_state $http 0 0)" = up ] || { tail "$out/run4.txt"; fail "the serving job did not come up"; }
# cyclic placement: tiles 0 and 2 on machine 1, tiles 1 and 3 on machine 3
kill_under_load $http 1 0 1 10
[ "$kill_degraded" -gt 0 ] || fail "/health never said degraded while tile 0 was down"
kill_under_load $http 3 3 1 10
[ "$kill_degraded" -gt 0 ] || fail "/health never said degraded while tile 3 was down"
kill_under_load $http 1 0 2 10
say "   tile 2's ssh session lost (its ssh client killed here): started again, one tile 2 process left there"
sshpid=$(pgrep -f "^ssh .* $TS_NET.1 .*--tile-id 2 " | head -1)
[ -n "$sshpid" ] || fail "no ssh session of tile 2 found"
kill -9 "$sshpid"
for _ in $(seq 300); do [ "$(replicas_state $http 2 1)" = up ] && break; sleep 0.3; done
[ "$(replicas_state $http 2 1)" = up ] || fail "tile 2 did not come back after its ssh session was lost"
n=0
for pid in $(ip netns pids "${TS_PREFIX}1"); do
  tr '\0' ' ' 2>/dev/null < /proc/$pid/cmdline | grep -q "tessera-tile .*--tile-id 2 " && n=$((n + 1))
done
[ $n = 1 ] || fail "$n tile 2 processes on machine 1 after the restart (want 1)"
grep "launch: .*tile" "$out/run4.txt" | grep -v "tile logs"
[ "$(grep -c 'launch: starting tile [0-9]* again' "$out/run4.txt")" = 4 ] || fail "the launcher did not log 4 restarts"
grep -q "launch: starting tile 0 again on $TS_NET.1 as incarnation 2 (restart 2 of 2)" "$out/run4.txt" ||
  fail "the second restart of tile 0 is not logged as such"

say "5. tile 0 killed a third time, past --max-tile-restarts 2: the job stops, naming it, every tile stopped"
kill_past_restart_limit $job 1 0 "$out/run4.txt" "launch: tile 0 on $TS_NET.1 failed (.*) after 2 restarts; stopping the job"

say "6. restart flags on a batch job are refused, not ignored"
set +e
"$src/scripts/launch/ssh" --hostfile "$out/hosts-13" --max-tile-restarts 3 -- --model bert-tiny --check 1 > "$out/run6.txt" 2>&1
rc=$?
set -e
cat "$out/run6.txt"
[ $rc = 2 ] && grep -q "tile restarts are for a serving host" "$out/run6.txt" || fail "restart flags on a batch job were not refused (rc $rc)"
echo "ssh_netns: 6 passed, 0 failed"
