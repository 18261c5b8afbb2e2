// tessera/common/proc_status.hpp: a process's memory figures from /proc/<pid>/status (Linux), as
// the 7B run reports them: VmHWM (peak resident set) and VmRSS, in bytes.
//
//   int64_t peak = tessera::self_vm_hwm_bytes();              // this process
//   int64_t rss = tessera::proc_status_bytes(pid, "VmRSS");   // another (-1 when unreadable)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace tessera {

/// The "<key>: N kB" line of /proc/<pid>/status in bytes (pid 0: this process), or -1 when the
/// file or the key is missing (a process that has exited, another OS).
inline int64_t proc_status_bytes(pid_t pid, const std::string& key) {
  std::ifstream f(pid == 0 ? std::string("/proc/self/status") : "/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string want = key + ":";
  while (std::getline(f, line))
    if (line.compare(0, want.size(), want) == 0) return std::stoll(line.substr(want.size())) * 1024;
  return -1;
}

inline int64_t self_vm_hwm_bytes() { return proc_status_bytes(0, "VmHWM"); }

}  // namespace tessera
