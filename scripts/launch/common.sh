# Shared helpers of scripts/launch/{ssh,slurm}; sourced, not run.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${TESSERA_BIN_DIR:-$root/build/bin}

log() { echo "launch: $*" >&2; }
die() { echo "launch: $*" >&2; exit 2; }

# A free TCP port on this machine (best effort: nothing holds it between here and the bind).
free_port() {
  local p
  for _ in $(seq 50); do
    p=$(( 20000 + RANDOM % 20000 ))
    ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
  done
  die "no free port found"
}

# The address of this machine that reaches $1 (route source address).
route_src() { ip -o route get "$1" 2>/dev/null | sed -n 's/.* src \([^ ]*\).*/\1/p' | head -1; }

# Makes a key directory with tessera-tile --make-keys unless $1 exists with keys.
ensure_keys() {
  [ -s "$1/tile.key" ] && return 0
  "$bin/tessera-tile" --make-keys "$1" >/dev/null
}
