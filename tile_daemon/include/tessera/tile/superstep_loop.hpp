// tessera/tile/superstep_loop.hpp: run one batch of a static BSP program on one tile.
//
// Per superstep: the compute set (kernel calls), then the exchange (send this tile's slices,
// wait for every slice it expects), then sync (a combining-tree barrier with the program's
// tiles: 2(n-1) messages, 2 hops when n <= barrier_fan_in). Messages carry program, batch,
// superstep and tag; ones that arrive early wait in the inbox, stale or duplicate ones are
// dropped and counted, so correctness never depends on message timing.
//
// Slices are sent without a copy (exchange::borrow_frame over tile memory). Tile memory must
// not change while ZeroMQ may still read a sent slice, so the runner waits until every such
// frame is released before each compute set and before a successful run() returns, and copies
// a slice (copy_frame) that a receive of the same superstep overwrites.
//
// A received slice that is a whole tensor (not accumulated, at least run_limits::
// in_place_min_bytes, off a socket, aligned for its elements) is received in place: the
// ZeroMQ message becomes the tensor's storage (tile_memory::hold), counted against the tile's
// cap, instead of being copied into the arena; when the cap has no room for it, it is copied.
// Kernels, sends and the daemon reach the tensor through tile_tensor::data as before. A slice
// sent from such a tensor keeps the message alive until ZeroMQ releases it. A failed run returns
// at once: frames queued for a dead peer may never be released; they keep pointing into the
// tile's arena (which must stay mapped until the ZeroMQ context is closed) and carry a batch
// that failed, so a peer drops them or is gone.
//
//   superstep_runner runner(self, transport, memory, registry, {});
//   runner.set_wait(poll_exchange_and_control);  // optional, see wait_fn
//   auto counters = runner.run(program, run_msg, [&] { return abort_requested(); });
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <tuple>

#include "tessera/exchange/transport.hpp"
#include "tessera/tile/fault_injector.hpp"
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
  /// Children per node of the barrier tree; n <= fan-in is a central barrier at rank 0.
  uint32_t barrier_fan_in = 16;
  /// Whole-tensor slices from this size up are received in place (the message is kept as the
  /// tensor's storage) rather than copied into the arena; UINT64_MAX copies every slice.
  uint64_t in_place_min_bytes = 64 << 10;
};

/// A resolved slice: a pointer into tile memory, a length in elements and their type.
struct slice_span {
  std::byte* data = nullptr;
  uint64_t elements = 0;
  exchange::dtype type = exchange::dtype::f32;
  tile_tensor* tensor = nullptr;  ///< the tensor the slice is part of
  bool whole() const { return tensor && data == tensor->data && bytes() == tensor->desc.bytes(); }
  uint64_t bytes() const { return elements * exchange::dtype_size(type); }
};
result<slice_span> resolve_slice(const exchange::slice_ref& s, tile_memory& memory, const exchange::batch_rows& rows);
/// For slices that do not depend on sequences (demo programs, fetches).
result<slice_span> resolve_slice(const exchange::slice_ref& s, tile_memory& memory, int64_t active_tokens);

class superstep_runner {
 public:
  superstep_runner(uint32_t self, exchange::transport& t, tile_memory& memory, const kernel_registry& registry,
                   run_limits limits = {});
  /// Waits briefly for sent slices ZeroMQ still references; if some remain (a failed run to a
  /// dead peer), the counters they decrement are leaked rather than freed under them.
  ~superstep_runner();
  superstep_runner(const superstep_runner&) = delete;
  superstep_runner& operator=(const superstep_runner&) = delete;

  /// Waits up to `timeout` for the next exchange message (like transport::recv) and also for
  /// the caller's own event source, e.g. a control socket in the same zmq::poll; sets `event`
  /// when that one is ready. With a wait_fn, run() calls `interrupted` only after an event or
  /// once per poll_tick; without, it waits on the transport and calls it on every pass.
  using wait_fn = std::function<result<bool>(exchange::envelope& out, std::chrono::milliseconds timeout, bool& event)>;
  void set_wait(wait_fn w) { wait_ = std::move(w); }

  /// Takes an exchange message (exchange_data or sync_token) received outside run(): stores
  /// it if it belongs to a future or the current batch, drops it otherwise.
  void accept(exchange::envelope&& e);

  /// Runs every superstep of `prog` for `run`. `interrupted` is polled while waiting; when it
  /// returns true the run stops with status cancelled. Inputs must already be in memory.
  result<std::vector<exchange::superstep_counters>> run(const exchange::program& prog, const exchange::run_program& run,
                                                        const std::function<bool()>& interrupted);

  /// Faults to inject (tile_daemon --faults); nullptr = none. Not owned.
  void set_faults(fault_injector* f) { faults_ = f; }

  uint64_t bad_messages() const { return bad_; }
  /// Slices sent without a copy in the last run that ZeroMQ has not released (0 after a
  /// successful run; a failed run's are counted in retired_in_flight()).
  uint32_t in_flight() const { return in_flight_->load(std::memory_order_acquire); }
  uint32_t retired_in_flight() const;
  uint64_t dropped_stale() const { return stale_; }
  /// Payload bytes received in place (kept as a tensor's storage, not copied) so far.
  uint64_t received_in_place() const { return in_place_; }
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
  /// A message waiting in the inbox, with what accept() already decoded of its header.
  struct inbox_entry {
    exchange::envelope message;
    uint64_t checksum = 0;  ///< exchange_data: the sender's checksum of the payload
  };
  result<inbox_entry> wait_for(const key& k, const std::function<bool()>& interrupted, const char* what);
  /// Waits until ZeroMQ released every borrowed send frame (before memory may change).
  status wait_sends_released(const std::function<bool()>& interrupted);
  /// Calls `interrupted` when due (every pass without a wait_fn; after an event or a tick with).
  bool check_interrupted(const std::function<bool()>& interrupted);
  void purge_finished();
  exchange::batch_rows rows_;  // of the batch being run
  fault_injector* faults_ = nullptr;

  uint32_t self_;
  exchange::transport& transport_;
  tile_memory& memory_;
  const kernel_registry& registry_;
  run_limits limits_;
  std::map<key, inbox_entry> inbox_;
  uint64_t finished_batch_ = 0;
  bool finished_any_ = false;
  uint64_t bad_ = 0;
  uint64_t stale_ = 0;
  uint64_t in_place_ = 0;
  wait_fn wait_;
  bool event_pending_ = false;
  std::chrono::steady_clock::time_point next_check_{};
  // Borrowed send frames of this run that ZeroMQ has not released. On the heap: a failed run
  // retires its counter (frames may stay queued for a dead peer) and the next run starts a new
  // one, so stale frames never stall it and never decrement freed memory.
  std::atomic<uint32_t>* in_flight_ = new std::atomic<uint32_t>(0);
  std::vector<std::atomic<uint32_t>*> retired_;
  void retire_in_flight();
};

}  // namespace tessera::tile
