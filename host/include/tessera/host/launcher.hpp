// tessera/host/launcher.hpp: starting tile processes on this machine.
//
// The host either launches its tiles itself (local mode, below) or waits for tiles that a
// launcher script started elsewhere (ssh, Slurm) and that register at its control endpoint.
//
//   local_launcher l({.tile_binary = "build/bin/tessera-tile"});
//   auto pid = l.spawn({"--host", ep, "--tile-id", "0"});
//   auto exited = l.poll_exit(*pid);   // std::nullopt while running
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::host {

/// Where tessera's executables are: $TESSERA_BIN_DIR, else the directory of this executable.
std::string default_bin_dir();

/// posix_spawn of one of our child processes (a tile, tessera-gpu) with `file_actions` (may be
/// null); returns posix_spawn's error number. The child starts with no signal blocked and SIGINT
/// and SIGTERM at their default action, whatever the calling thread blocks: a serving host blocks
/// them for its signal thread, a blocked mask survives exec, and a tile that inherited it never
/// took the SIGTERM --die-with-parent sends when the host dies (it lived on as an orphan).
int spawn_child(pid_t* pid, const std::string& path, const void* file_actions, char* const argv[]);

struct local_launcher_config {
  std::string tile_binary;  ///< empty: default_bin_dir() + "/tessera-tile"
  std::string log_dir;      ///< empty: tiles inherit this process's stderr
  bool pin_cores = false;   ///< pin tile i to core i mod cores (taskset semantics)
};

class local_launcher {
 public:
  explicit local_launcher(local_launcher_config cfg);
  /// Starts one tile process with these arguments; it dies with this process.
  result<pid_t> spawn(const std::vector<std::string>& args, uint32_t tile_id);
  /// nullopt while running; else a description ("exited with code 1", "killed by signal 9").
  std::optional<std::string> poll_exit(pid_t pid);
  /// SIGTERM, then SIGKILL after `grace_ms`, then reap.
  void stop(pid_t pid, int grace_ms = 2000);
  const std::string& tile_binary() const { return cfg_.tile_binary; }

 private:
  local_launcher_config cfg_;
};

}  // namespace tessera::host
