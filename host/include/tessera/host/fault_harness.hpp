// tessera/host/fault_harness.hpp: run a load through a tile group while faults are injected,
// and count what came back. Shared by the fault tests and the fault experiment.
//
//   fault_scenario s{.name = "kill", .plan_json = R"({"faults":[{"kind":"kill","tile":1,"batch":3}]})"};
//   auto r = run_fault_scenario(s);   // r->answered == s.requests, r->wrong == 0, ...
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "tessera/exchange/fault_plan.hpp"
#include "tessera/host/placement.hpp"
#include "tessera/host/tile_group.hpp"

namespace tessera::host {

struct fault_scenario {
  std::string name;
  std::string plan_json;            ///< tile-side faults (tessera-tile --faults); empty = none; kill_gpu: an error
  std::string model = "bert-tiny";
  int tiles = 2;
  plan layout{1, 1, 2, 1};
  int requests = 200;
  int per_batch = 8;
  int max_attempts = 6;
  std::chrono::milliseconds heartbeat_timeout{1500};
  std::chrono::milliseconds exchange_timeout{800};
  /// Host-side faults (stall, kill): runs on its own thread while the load is on.
  std::function<void(tile_group&)> during;
};

struct fault_outcome {
  int requests = 0, answered = 0, wrong = 0, errors = 0, duplicates = 0;
  int64_t recoveries = 0;            ///< replicas brought back (a tile restarted and reloaded)
  int64_t retries = 0;               ///< batches run again after a failed attempt
  double last_recovery_seconds = 0;
  double seconds = 0;               ///< the whole load
  double mean_batch_wall_seconds = 0;
  double p99_latency_seconds = 0;   ///< submit to answer, per request
  /// Faults the tiles reported injecting (heartbeats and run replies), summed over tiles and
  /// incarnations; what a tile did after its last report before it died is not in here.
  exchange::fault_counts injected{};
  /// Exchange messages the tiles discarded as duplicates or late (same sum): where injected
  /// duplicates end up.
  uint64_t stale_messages = 0;
  uint64_t injected_of(exchange::fault_kind k) const { return injected[static_cast<size_t>(k)]; }
};

/// Deploys the model on a fresh local tile group whose tiles apply the plan, sends the load as
/// batches through a tile_backend (which restarts failed tiles and retries), and compares each
/// answer with the single-process reference (tolerance 1e-4). A plan with a kind the tiles
/// cannot apply (kill_gpu: there is no GPU process here) is invalid_argument naming it.
result<fault_outcome> run_fault_scenario(const fault_scenario& s);

}  // namespace tessera::host
