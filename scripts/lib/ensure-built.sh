# Sourced by scripts that run tessera's binaries (seed-experiment, llm-experiment, soak).
# ensure_built NAME BUILD_DIR TARGET...: configures BUILD_DIR (Release) if it has no CMakeCache,
# then builds the targets, which brings a binary older than its sources up to date (running a
# stale one would report old code's figures). A build with nothing to do costs a few seconds;
# its output is shown only when it fails.
ensure_built() {
  local name=$1 build=$2
  shift 2
  local src
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    echo "$name: configuring $build (Release)" >&2
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release >&2 || return 1
  fi
  local log
  if ! log=$(cmake --build "$build" -j"$(nproc)" --target "$@" 2>&1); then
    printf '%s\n' "$log" >&2
    echo "$name: building $* in $build failed" >&2
    return 1
  fi
}
