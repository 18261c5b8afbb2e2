# Sourced by scripts/compare_*.sh (tessera-bench-models beside the peers' benchmarks):
#   source "$(dirname "$0")/lib/compare_env.sh" /tmp/tessera-NAME
# sets root, build, bench, peers, threads and out ($OUT, else the folder given), and stops the
# script with 2 when tessera-bench-models is not built.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build}
bench=$build/bin/tessera-bench-models
peers=${PEERS_DIR:-$root/../shared/peers}
threads=${THREADS:-2}
out=${OUT:-$1}
[ -x "$bench" ] || { echo "missing $bench; build it: cmake --build $build --target tessera-bench-models" >&2; exit 2; }
