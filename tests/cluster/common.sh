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

# Private names so a failed run of one test never collides with another harness.
export TS_DIR=/tmp/tessera-cluster-test TS_PREFIX=tst TS_NET=10.211.0
cluster_down() { "$src/scripts/cluster/netns" down >/dev/null 2>&1 || true; }
# tessera-tile processes whose network namespace is test machine $1 (the pid namespace is shared,
# so pgrep would also count other people's tiles).
tiles_in_ns() {
  local n=0 pid
  for pid in $(ip netns pids "$TS_PREFIX$1" 2>/dev/null); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = tessera-tile ] && n=$((n + 1))
  done
  echo $n
}
# Kills (SIGKILL) the tile with id $2 running in test machine $1.
kill_tile_in_ns() {
  local pid
  for pid in $(ip netns pids "$TS_PREFIX$1" 2>/dev/null); do
    tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q "tessera-tile .*--tile-id $2 " && { kill -9 "$pid"; return 0; }
  done
  return 1
}
