// tessera/tile/fault_injector.hpp: a tile's side of a fault plan, applied in its own process and
// exchange layer: kill itself at a superstep, stall (no heartbeats, no answers) for a while,
// slow its compute, and delay, drop, duplicate, reorder, corrupt or partition the slices it
// sends. Deterministic: one PRNG per tile seeded from the plan's seed, the tile id and its
// incarnation. Counts what it injected per kind; the tile reports the counts to the host.
//
//   fault_injector faults(plan.for_tile(3), /*tile=*/3, /*incarnation=*/0);
//   runner.set_faults(&faults);
//   heartbeat.injected = faults.counts();   // from any thread
#pragma once

#include <array>
#include <atomic>
#include <chrono>

#include "tessera/common/status.hpp"
#include "tessera/exchange/fault_plan.hpp"

namespace tessera::tile {

/// What to do with one outgoing exchange message. At most one of drop and the rest: a dropped
/// message is not also duplicated, held or corrupted.
struct send_decision {
  bool drop = false;
  bool duplicate = false;
  bool corrupt = false;        ///< flip bits in the payload (after the checksum was computed)
  bool hold = false;           ///< reorder: send it after the next message to the same peer
  std::chrono::microseconds delay{0};
};

class fault_injector {
 public:
  /// `plan` is what this tile applies (fault_plan::for_tile). Kinds a tile cannot apply
  /// (kill_gpu) make check() fail; the injector itself ignores them.
  fault_injector(exchange::fault_plan plan, int tile, uint32_t incarnation);
  /// invalid_argument naming the first fault a tile cannot apply, ok otherwise.
  static status check(const exchange::fault_plan& plan);
  bool active() const { return !plan_.empty(); }
  /// A new batch begins on this tile (counts batches per incarnation).
  void begin_batch();
  /// At the start of a superstep: dies here (SIGKILL to itself) or stalls here (sleeps with
  /// heartbeats paused) if the plan says so.
  void at_superstep(int64_t superstep);
  /// After a compute set that took `elapsed`: sleeps to make it `factor` times as long.
  void after_compute(std::chrono::nanoseconds elapsed);
  /// For each message of `bytes` payload bytes this tile sends to `peer`.
  send_decision on_send(int peer, size_t bytes);
  int64_t batch() const { return batch_; }
  /// True while a stall fault holds the tile (the heartbeat thread stays silent). Any thread.
  bool stalled() const { return stalled_.load(std::memory_order_acquire); }
  /// Faults injected so far in this incarnation, per kind. Any thread.
  exchange::fault_counts counts() const;

 private:
  bool partitioned(int peer) const;
  double uniform();
  void count(exchange::fault_kind k) { counts_[static_cast<size_t>(k)].fetch_add(1, std::memory_order_relaxed); }
  exchange::fault_plan plan_;
  int tile_;
  uint32_t incarnation_;
  int64_t batch_ = 0;
  uint64_t rng_;
  std::array<std::atomic<uint64_t>, exchange::fault_kind_count> counts_{};
  std::atomic<bool> stalled_{false};
};

}  // namespace tessera::tile
