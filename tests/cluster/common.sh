# Shared by the cluster test scripts (sourced). Bounded in time, cleans up on exit (trap EXIT),
# fails with a clear message when privileges are missing, and skips (exit 77) only when network
# namespaces cannot be made at all, saying why.
set -euo pipefail
src=${TESSERA_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
export TESSERA_BIN_DIR=${TESSERA_BIN_DIR:-$src/build/bin}
bin=$TESSERA_BIN_DIR
say() { echo "[$(date +%T)] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

require_root_and_netns() {
  [ "$(id -u)" = 0 ] || fail "cluster tests need root (network namespaces, sshd, slurmd); run as root"
  command -v ip >/dev/null || "$src/scripts/cluster/setup-deps"
  local probe=tsprobe$$
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "SKIP: cannot create a network namespace here ('ip netns add' said: $err)"
    exit 77
  fi
  ip netns del "$probe"
}

need_bins() {
  for b in "$@"; do [ -x "$bin/$b" ] || fail "no $bin/$b; build it first"; done
}

# Private names so a failed run of one test never collides with another harness (override all of
# them, and TS_SLURMCTLD_PORT, to run beside another checkout's cluster tests).
export TS_DIR=${TS_DIR:-/tmp/tessera-cluster-test} TS_PREFIX=${TS_PREFIX:-tst} TS_NET=${TS_NET:-10.211.0}
cluster_down() { "$src/scripts/cluster/netns" down >/dev/null 2>&1 || true; }
# What every namespace test starts with: root, the packages, the binaries, and 3 fresh "machines"
# (network namespaces) that go away when the test exits.
three_machines_up() {
  require_root_and_netns
  timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
  need_bins tessera-host tessera-tile tessera-loadgen
  trap cluster_down EXIT
  cluster_down
  timeout 60 "$src/scripts/cluster/netns" up 3
}
# tessera-tile processes whose network namespace is test machine $1 (the pid namespace is shared,
# so pgrep would also count other people's tiles).
tiles_in_ns() {
  local n=0 pid
  for pid in $(ip netns pids "$TS_PREFIX$1" 2>/dev/null); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = tessera-tile ] && n=$((n + 1))
  done
  echo $n
}
# The test machine (1..N) whose namespace runs the tile with id $1, or nothing.
ns_of_tile() {
  local i pid
  for i in $(seq "$(cat "$TS_DIR/nodes" 2>/dev/null || echo 0)"); do
    for pid in $(ip netns pids "$TS_PREFIX$i" 2>/dev/null); do
      tr '\0' ' ' 2>/dev/null < /proc/$pid/cmdline | grep -q "tessera-tile .*--tile-id $1 " && { echo "$i"; return 0; }
    done
  done
}
# Kills (SIGKILL) the tile with id $2 running in test machine $1.
kill_tile_in_ns() {
  local pid
  for pid in $(ip netns pids "$TS_PREFIX$1" 2>/dev/null); do
    tr '\0' ' ' 2>/dev/null < /proc/$pid/cmdline | grep -q "tessera-tile .*--tile-id $2 " && { kill -9 "$pid"; return 0; }
  done
  return 1
}

# ---- a serving host under load while a tile is killed (ssh_netns, slurm_netns)
ms_now() { echo $(( $(date +%s%N) / 1000000 )); }
# "up" when every replica in /info of the host at 127.0.0.1:$1 is up, tile $2 runs as incarnation
# $3 and every tile process named there is alive (one pid namespace); otherwise what is missing.
replicas_state() {
  local info; info=$(curl -s -m 2 "http://127.0.0.1:$1/info") || true
  python3 - "$2" "$3" "$info" <<'PY'
import json, os, sys
tile, want = int(sys.argv[1]), int(sys.argv[2])
try: reps = [r for b in json.loads(sys.argv[3])["backends"] for r in b["replicas"]]
except Exception as e: print("no /info:", e); sys.exit()
def alive(p):
    try: os.kill(p, 0); return p > 0
    except OSError: return False
down = ["replica %d %s" % (r["index"], r["state"]) for r in reps if r["state"] != "up"]
inc = [r["incarnations"][r["tiles"].index(tile)] for r in reps if tile in r["tiles"]]
dead = [p for r in reps for p in r["pids"] if not alive(p)]
print("up" if not down and inc == [want] and not dead else f"{down} tile {tile} incarnation {inc} dead pids {dead}")
PY
}
# Loads the serving host at 127.0.0.1:$1 with tessera-loadgen for $5 s (4 closed-loop clients,
# real HTTP), SIGKILLs tile $3 in test machine $2 at a random moment 0.5-3 s in, then watches:
# /health answers 200 throughout (its "degraded" answers, naming the tile, are counted), and
# /info until every replica is up with tile $3 at incarnation $4 (bound: 60 s). Fails on any
# request error. Sets kill_degraded (answers seen degraded) and kill_back_s.
kill_under_load() {
  local port=$1 ns=$2 tile=$3 want=$4 secs=$5 lg=$TS_DIR/out/loadgen-$3-$4.json
  local lg_pid t0 st code body
  timeout -k 5 $((secs + 120)) "$bin/tessera-loadgen" --port "$port" --duration "$secs" --connections 4 \
    --timeout 60 --json "$lg" --quiet > /dev/null &
  lg_pid=$!
  sleep "$(( (500 + RANDOM % 2500) / 1000 )).$(printf %03d $(( RANDOM % 1000 )))"
  kill_tile_in_ns "$ns" "$tile" || fail "no tile $tile running in namespace $ns"
  t0=$(ms_now); kill_degraded=0; kill_back_s=""
  while [ $(( $(ms_now) - t0 )) -lt 60000 ]; do
    body=$(curl -s -m 2 -w ' %{http_code}' "http://127.0.0.1:$port/health") || true
    code=${body##* }; body=${body% *}
    [ "$code" = 200 ] || fail "/health answered '$code' ($body) while tile $tile was down: the other replicas serve"
    if [[ "$body" == *degraded* ]]; then
      [[ "$body" == *"tile $tile"* ]] || fail "/health is degraded without naming tile $tile: $body"
      [ "$kill_degraded" = 0 ] && say "   /health after $(( $(ms_now) - t0 )) ms: $body"
      kill_degraded=$((kill_degraded + 1))
    fi
    st=$(replicas_state "$port" "$tile" "$want")
    [ "$st" = up ] && [ -z "$body" ] && { t0=$(( $(ms_now) - t0 )); kill_back_s=$(printf %d.%02d $((t0 / 1000)) $((t0 % 1000 / 10))); break; }
    sleep 0.1
  done
  [ -n "$kill_back_s" ] || fail "tile $tile was not back as incarnation $want within 60 s: $st"
  wait "$lg_pid" || fail "tessera-loadgen failed (exit $?)"
  python3 - "$lg" <<'PY' || fail "requests failed while tile $tile was killed and brought back"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"   load: {r['sent']} requests, {r['ok']} ok, {r['errors']} errors {r.get('errors_by_kind', {})}, {r['throughput_rps']:.1f} req/s")
sys.exit(0 if r["errors"] == 0 and r["ok"] == r["sent"] and r["sent"] > 0 else 1)
PY
  local host_s
  host_s=$(curl -s -m 5 "http://127.0.0.1:$port/info" | python3 -c 'import json, sys
t = int(sys.argv[1])
print(["%.2f" % r["last_recovery_seconds"] for b in json.load(sys.stdin)["backends"] for r in b["replicas"] if t in r["tiles"]][0])' "$tile" 2>/dev/null) || host_s="?"
  say "   tile $tile killed: back in rotation as incarnation $want after $kill_back_s s as this test saw it (polling), the replica down for $host_s s as the host counts it; $kill_degraded /health answers degraded"
}

# Kills tile $3 in test machine $2 once more, past the launcher's --max-tile-restarts: the job
# (pid $1, output in $4) must stop promptly, print the line matching $5, and leave no tile
# running in any test machine.
kill_past_restart_limit() {
  local job=$1 ns=$2 tile=$3 log=$4 want=$5 rc=0 i left
  kill_tile_in_ns "$ns" "$tile" || fail "no tile $tile running in namespace $ns"
  wait "$job" || rc=$?
  grep -v streaming "$log" | tail -4
  grep -q "$want" "$log" || fail "the launcher does not name tile $tile and its restarts ('$want')"
  [ $rc != 0 ] && [ $rc != 124 ] || fail "the job did not fail promptly after losing tile $tile for good (rc $rc)"
  sleep 1
  for i in 1 2 3; do
    left=$(tiles_in_ns "$i")
    [ "${left:-0}" = 0 ] || fail "tiles left running in namespace $i after the failure"
  done
}
