#!/usr/bin/env bash
# A local Slurm cluster started by the test itself (munged, slurmctld here, one slurmd in each of
# 3 network namespaces). BERT-tiny with plan 1,2,3 (pipeline x tensor-parallel, so tensors cross
# namespaces) runs as Slurm tasks, by sbatch and by salloc + the srun launcher, with CurveZMQ;
# --check compares the logits with the single-process reference (exit 1 when they differ). Then a
# serving host under load loses a tile (SIGKILL at a random moment): its task starts it again
# and the host takes it back with no failed request; killed past --max-tile-restarts, the job
# stops, naming the tile.
source "$(dirname "$0")/common.sh"
three_machines_up
timeout 90 "$src/scripts/cluster/netns" slurm
export SLURM_CONF=$TS_DIR/slurm/slurm.conf
out=$TS_DIR/out; rm -rf "$out"; mkdir -p "$out"; cd "$out"

say "1. sbatch: 6 tiles as tasks over 3 nodes, host on the first node"
jid=$(sbatch --parsable -N 3 -n 6 --export="ALL,TESSERA_ROOT=$src" "$src/scripts/launch/tessera.sbatch" \
  --model bert-tiny --check 2 --plan 1,2,3)
t0=$SECONDS
while [ -n "$(squeue -h -j "$jid" -o %T 2>/dev/null)" ]; do
  [ $((SECONDS - t0)) -lt 300 ] || { scancel "$jid"; fail "job $jid still running after 300 s"; }
  sleep 1
done
state=$(scontrol show job "$jid" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
cat "tessera-$jid.out" | grep -v streaming
say "   job $jid: $state in $((SECONDS - t0)) s"
[ "$state" = COMPLETED ] || fail "job $jid ended $state"
[ "$(grep -c '^check batch' "tessera-$jid.out")" = 2 ] || fail "the job did not check 2 batches"
nodes=$(grep -o 'tiles on [^,]*' "tessera-$jid.out" | head -1)
echo "$nodes" | grep -q "$TS_PREFIX\\[1-3\\]" || fail "tiles were not spread over 3 nodes ($nodes)"

say "2. salloc + scripts/launch/slurm (host on this machine, tiles as srun tasks)"
timeout -k 5 300 salloc -N 3 -n 3 "$src/scripts/launch/slurm" --timeout 240 -- --model bert-tiny --check 1 --plan 1,1,3 \
  > salloc.txt 2>&1 || { cat salloc.txt; fail "salloc run failed"; }
grep -v streaming salloc.txt
grep -q '^check batch 0' salloc.txt || fail "no checked batch"

say "3. a tile that is never started: the job fails and names it"
set +e
timeout -k 5 200 salloc -N 2 -n 2 "$src/scripts/launch/slurm" --timeout 60 --tiles 3 -- --register-timeout-ms 4000 --model bert-tiny --check 1 > missing.txt 2>&1
rc=$?
set -e
grep -v streaming missing.txt | tail -5
[ $rc != 0 ] && [ $rc != 124 ] || fail "a job missing a tile did not fail promptly (rc $rc)"
grep -q "2" missing.txt && grep -qi "missing\|did not register\|not register" missing.txt || fail "the missing tile is not named"
say "4. salloc, a serving host on 4 tiles over 2 nodes (plan 2,2,1): a tile killed under load is started again by its task"
seed=${TS_SEED:-$RANDOM}; RANDOM=$seed; say "   seed $seed (TS_SEED=$seed replays the kill moment)"
http=18182
set +e
timeout -k 5 400 salloc -N 2 -n 4 "$src/scripts/launch/slurm" --timeout 300 --max-tile-restarts 1 --restart-delay-ms 0 \
  --log-dir "$out/serve" -- --model bert-tiny --plan 2,2,1 --serve --port $http > serve.txt 2>&1 &
job=$!
set -e
for _ in $(seq 300); do [ "$(replicas_state $http 1 0)" = up ] && break; kill -0 $job || break; sleep 0.3; done
[ "$(replicas_state $http 1 0)" = up ] || { tail serve.txt; fail "the serving job did not come up"; }
ns=$(ns_of_tile 1); [ -n "$ns" ] || fail "tile 1 runs in no test namespace"
kill_under_load $http "$ns" 1 1 10
grep "launch: tile 1" "$out/serve/tile-1.log"
grep -q "launch: tile 1 on $TS_PREFIX$ns died (killed by signal 9 (KILL)); starting it again as incarnation 1" "$out/serve/tile-1.log" ||
  fail "the task did not log the restart of tile 1"
# Started again at once, before the host's 3 s heartbeat limit: the new incarnation's
# registration fails the old one, if its dropped connection or its silence did not first.
grep -E "tile 1 failed: (incarnation 1 registered in place of incarnation 0|control connection closed|no heartbeat|tile control: tile-1-0 is not connected)" "$out/serve/host.log" ||
  fail "the host never took tile 1's old incarnation out"

say "5. tile 1 killed again, past --max-tile-restarts 1: the step ends and the job stops, naming the tile"
kill_past_restart_limit $job "$ns" 1 serve.txt \
  "launch: tile 1 on $TS_PREFIX$ns failed (killed by signal 9 (KILL)) after 1 restart; stopping the job"
echo "slurm_netns: 5 passed, 0 failed"
