// tessera/common/cpu_time.hpp: CPU time of this process and of other local processes (tiles), and
// the cores this process may run on. Benches divide work by CPU seconds to estimate what dedicated
// cores would give on a shared machine.
//
//   const double c0 = self_cpu_seconds() + cpu_seconds_of(tile_pids);
#pragma once

#include <sys/types.h>

#include <vector>

namespace tessera {

/// Seconds on the steady clock (for intervals; the epoch is arbitrary).
double wall_seconds();
/// User + system CPU seconds of this process (all its threads), nanosecond resolution.
double self_cpu_seconds();
/// User + system CPU seconds of a local process from /proc/PID/stat (clock-tick resolution);
/// 0 for a process that is gone or not visible.
double cpu_seconds_of(pid_t pid);
/// The sum over `pids` (pids <= 0 are skipped).
double cpu_seconds_of(const std::vector<pid_t>& pids);
/// CPUs in this process's affinity mask (what `nproc` prints), at least 1.
int usable_cores();

}  // namespace tessera
