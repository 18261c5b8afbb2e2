// tessera/tile/fault_injector.hpp: a tile's side of a fault plan, applied in its own process and
// exchange layer: kill itself at a superstep, slow its compute, and delay, drop, duplicate,
// reorder, corrupt or partition the slices it sends. Deterministic: one PRNG per tile seeded
// from the plan's seed, the tile id and its incarnation.
//
//   fault_injector faults(plan.for_tile(3), /*tile=*/3, /*incarnation=*/0);
//   runner.set_faults(&faults);
#pragma once

#include <chrono>

#include "tessera/exchange/fault_plan.hpp"

namespace tessera::tile {

/// What to do with one outgoing exchange message.
struct send_decision {
  bool drop = false;
  bool duplicate = false;
  bool corrupt = false;        ///< flip bits in the payload (after the checksum was computed)
  bool hold = false;           ///< reorder: send it after the next message to the same peer
  std::chrono::microseconds delay{0};
};

class fault_injector {
 public:
  fault_injector(exchange::fault_plan plan, int tile, uint32_t incarnation);
  bool active() const { return !plan_.empty(); }
  /// A new batch begins on this tile (counts batches per incarnation).
  void begin_batch();
  /// At the start of a superstep: dies here if the plan says so (SIGKILL to itself).
  void at_superstep(int64_t superstep);
  /// After a compute set that took `elapsed`: sleeps to make it `factor` times as long.
  void after_compute(std::chrono::nanoseconds elapsed);
  /// For each message this tile sends to `peer`.
  send_decision on_send(int peer);
  int64_t batch() const { return batch_; }
  uint64_t injected() const { return injected_; }

 private:
  bool partitioned(int peer) const;
  double uniform();
  exchange::fault_plan plan_;
  int tile_;
  uint32_t incarnation_;
  int64_t batch_ = 0;
  uint64_t rng_;
  uint64_t injected_ = 0;
};

}  // namespace tessera::tile
