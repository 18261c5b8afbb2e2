// apps/tessera-host: tessera-host --faults. A plan's tile-side kinds go to the tiles this host launches
// (tessera-tile --faults); kill_gpu is applied here, to a tessera-gpu process this host spawned
// (--spawn-gpu), once that process has answered the plan's number of batches. Whatever this run
// cannot apply is refused at startup, naming the fault.
//
//   auto f = load_host_faults(spec, {.tiles = 4, .launches_tiles = true, .serves = true, .spawned_gpus = 1});
//   if (!f) return fail(f.error());
//   if (!f->tiles.empty()) cfg.extra_tile_args.insert(cfg.extra_tile_args.end(), {"--faults", f->tiles.to_json()});
//   router.add_backend(with_gpu_faults(gpu0, 0, f->host), batching);
#pragma once

#include <memory>
#include <string>

#include "tessera/backends/backend.hpp"
#include "tessera/exchange/fault_plan.hpp"
#include "tessera/host/remote_backend.hpp"
#include "tessera/host/tile_group.hpp"

namespace tessera::host::app {

/// What this tessera-host run offers to apply faults to.
struct fault_targets {
  int tiles = 0;
  bool launches_tiles = true;  ///< false with --external: tiles get their own --faults
  bool serves = false;         ///< --serve: spawned GPU processes exist only then
  int spawned_gpus = 0;        ///< --spawn-gpu
};

struct host_faults {
  exchange::fault_plan tiles;  ///< for the launched tiles (tessera-tile --faults)
  exchange::fault_plan host;   ///< kill_gpu, applied by with_gpu_faults
};

/// Reads the plan (file or inline JSON) and splits it; invalid_argument naming the first fault
/// this run cannot apply.
result<host_faults> load_host_faults(const std::string& spec, const fault_targets& targets);

/// The spawned GPU backend number `index`, killed (SIGKILL to its process) each time the number
/// of batches it answered reaches a kill_gpu fault's batch. `gpu` itself when none applies.
std::shared_ptr<backends::backend> with_gpu_faults(std::shared_ptr<remote_backend> gpu, int index,
                                         const exchange::fault_plan& host_plan);

/// "tile 0: slow 12; tile 1: none" — what the tiles report injecting (this incarnation each).
std::string describe_tile_faults(const tile_group& g);

}  // namespace tessera::host::app
