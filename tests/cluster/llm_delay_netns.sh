#!/usr/bin/env bash
# scripts/bench-llm-delay with the ssh launcher: llama-tiny's two tiles in two network namespaces,
# the link delay copied to them by scripts/launch/ssh --tile-faults; the checks of
# tests/host/bench_llm_delay_test.sh, and no namespace left behind.
source "$(dirname "$0")/common.sh"
require_root_and_netns
timeout 600 "$src/scripts/cluster/setup-deps" || fail "setup-deps failed"
need_bins tessera-host tessera-tile tessera-loadgen
BENCH_LAUNCHER=ssh timeout -k 5 600 bash "$src/tests/host/bench_llm_delay_test.sh"
