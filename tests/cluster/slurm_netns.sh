#!/usr/bin/env bash
# A local Slurm cluster started by the test itself (munged, slurmctld here, one slurmd in each of
# 3 network namespaces). BERT-tiny with plan 1,2,3 (pipeline x tensor-parallel, so tensors cross
# namespaces) runs as Slurm tasks, by sbatch and by salloc + the srun launcher, with CurveZMQ;
# --check compares the logits with the single-process reference (exit 1 when they differ).
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
need_bins tessera-host tessera-tile
trap cluster_down EXIT
cluster_down
timeout 60 "$src/scripts/cluster/netns" up 3
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
echo "slurm_netns: 3 passed, 0 failed"
