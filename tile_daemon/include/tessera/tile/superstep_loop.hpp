// tessera/tile/superstep_loop.hpp: run one batch of a static BSP program on one tile.
//
// Per superstep: the compute set (kernel calls), then the exchange (send this tile's slices,
// wait for every slice it expects), then sync (a dissemination barrier with the program's
// tiles: ceil(log2 n) rounds of one message each way). Messages carry program, batch,
// superstep and tag; ones that arrive early wait in the inbox, stale or duplicate ones are
// dropped and counted, so correctness never depends on message timing.
//
//   superstep_runner runner(self, transport, memory, registry, {});
//   auto counters = runner.run(program, run_msg, [&] { return abort_requested(); });
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <tuple>

#include "tessera/exchange/transport.hpp"
#include "tessera/tile/kernel_registry.hpp"
#include "tessera/tile/tile_memory.hpp"

namespace tessera::tile {

struct run_limits {
  /// A tile waiting this long for one superstep's slices or barrier fails the run (timeout).
  std::chrono::milliseconds exchange_timeout{30000};
  /// How often a waiting tile checks whether it should stop.
  std::chrono::milliseconds poll_tick{50};
  /// Inbox bound: early messages beyond it are dropped and counted as bad.
  size_t max_inbox = 1u << 16;
};

/// A resolved slice: a pointer into tile memory and a length in elements.
struct slice_span {
  float* data = nullptr;
  uint64_t elements = 0;
};
result<slice_span> resolve_slice(const exchange::slice_ref& s, tile_memory& memory, const exchange::batch_rows& rows);
/// For slices that do not depend on sequences (demo programs, fetches).
result<slice_span> resolve_slice(const exchange::slice_ref& s, tile_memory& memory, int64_t active_tokens);

class superstep_runner {
 public:
  superstep_runner(uint32_t self, exchange::transport& t, tile_memory& memory, const kernel_registry& registry,
                   run_limits limits = {});

  /// Takes an exchange message (exchange_data or sync_token) received outside run(): stores
  /// it if it belongs to a future or the current batch, drops it otherwise.
  void accept(exchange::envelope&& e);

  /// Runs every superstep of `prog` for `run`. `interrupted` is polled while waiting; when it
  /// returns true the run stops with status cancelled. Inputs must already be in memory.
  result<std::vector<exchange::superstep_counters>> run(const exchange::program& prog, const exchange::run_program& run,
                                                        const std::function<bool()>& interrupted);

  uint64_t bad_messages() const { return bad_; }
  uint64_t dropped_stale() const { return stale_; }
  /// Every batch with an id up to this one is over on this tile.
  uint64_t finished_batch() const { return finished_batch_; }
  bool has_finished_any() const { return finished_any_; }

 private:
  // (batch, superstep, kind, src, tag): kind 0 = data (tag), 1 = sync (tag = round).
  using key = std::tuple<uint64_t, uint32_t, uint8_t, uint32_t, uint32_t>;

  status exchange_phase(const exchange::program& prog, const exchange::run_program& run, uint32_t step,
                        exchange::superstep_counters& c, const std::function<bool()>& interrupted);
  status sync_phase(const exchange::program& prog, const exchange::run_program& run, uint32_t step,
                    const std::function<bool()>& interrupted);
  /// Waits until `k` is in the inbox; returns it.
  result<exchange::envelope> wait_for(const key& k, const std::function<bool()>& interrupted, const char* what);
  void purge_finished();
  exchange::batch_rows rows_;  // of the batch being run

  uint32_t self_;
  exchange::transport& transport_;
  tile_memory& memory_;
  const kernel_registry& registry_;
  run_limits limits_;
  std::map<key, exchange::envelope> inbox_;
  uint64_t finished_batch_ = 0;
  bool finished_any_ = false;
  uint64_t bad_ = 0;
  uint64_t stale_ = 0;
};

}  // namespace tessera::tile
