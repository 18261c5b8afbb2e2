# Shared helpers of scripts/launch/{ssh,slurm}; sourced, not run.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${TESSERA_BIN_DIR:-$root/build/bin}

log() { echo "launch: $*" >&2; }
die() { echo "launch: $*" >&2; exit 2; }

# A free TCP port on this machine, below the kernel's ephemeral range (outgoing connections take
# their local ports from that range, and one of them on the port makes the host's bind fail), and
# used by no socket now. Best effort: nothing holds it between here and the host's bind.
free_port() {
  local p low=32768
  read -r low _ < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  [ "$low" -gt 11000 ] || die "the ephemeral port range starts at $low: pass --port"
  for _ in $(seq 50); do
    p=$(( 10000 + RANDOM % (low - 10000) ))
    ss -Htan "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
  done
  die "no free port found below $low: pass --port"
}

# The address of this machine that reaches $1 (route source address).
route_src() { ip -o route get "$1" 2>/dev/null | sed -n 's/.* src \([^ ]*\).*/\1/p' | head -1; }

# Makes a key directory with tessera-tile --make-keys unless $1 exists with keys.
ensure_keys() {
  [ -s "$1/tile.key" ] && return 0
  "$bin/tessera-tile" --make-keys "$1" >/dev/null
}

# ---- restarts of a serving job's tiles (ssh, slurm)
# The host restarts only tiles it spawned; for a serving host (--serve among its arguments) the
# launchers start a dead tile again on its machine, with the next --incarnation (the host takes a
# higher incarnation back: shards, program, rotation), at most --max-tile-restarts times a tile,
# each after --restart-delay-ms. Batch jobs (--check, --demo) stop on the first dead tile.
max_restarts=5; restart_delay_ms=1000; restart_flags_given=""
# Reads a restart option ($1 name, $2 value) into the variables above; false if $1 is not one.
restart_option() {
  case "$1" in
    --max-tile-restarts) [[ "$2" =~ ^[0-9]+$ ]] || die "--max-tile-restarts takes a whole number >= 0, not '$2'"
      max_restarts=$2;;
    --restart-delay-ms) [[ "$2" =~ ^[0-9]+$ ]] || die "--restart-delay-ms takes a whole number >= 0, not '$2'"
      restart_delay_ms=$2;;
    *) return 1;;
  esac
  restart_flags_given="$restart_flags_given $1"
}
# True if the host arguments ask for a serving host.
serving() { local a; for a in "$@"; do [ "$a" = --serve ] && return 0; done; return 1; }
# Restarts apply to serving hosts only; asked for a batch job, they are an error, not ignored.
check_restart_flags() {
  serving "$@" && return 0
  [ -z "$restart_flags_given" ] && { max_restarts=0; return 0; }
  die "$restart_flags_given: tile restarts are for a serving host (--serve among the host arguments); a batch job stops on its first dead tile"
}
# A process's exit status in words.
exit_words() {
  if [ "$1" -gt 128 ] && [ "$1" -lt 160 ]; then echo "killed by signal $(( $1 - 128 )) ($(kill -l $(( $1 - 128 )) 2>/dev/null))"
  else echo "exit $1"; fi
}
# Sleeps $1 milliseconds in the background, so that a trapped signal is handled at once.
sleep_ms() { sleep "$(( $1 / 1000 )).$(printf %03d $(( $1 % 1000 )))" & wait $!; }
# Milliseconds of a monotonic-enough clock (bash 5's EPOCHREALTIME).
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( t / 1000 )); }
