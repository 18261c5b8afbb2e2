// tessera/host/tile_group.hpp: the host's handle on a group of N tile processes.
//
// A tile group owns the host's control channel (a ZeroMQ ROUTER owned by one I/O thread,
// exchange/channel.hpp), launches its tiles locally or waits for tiles that register from
// elsewhere (naming the missing ones on timeout), hands every tile the peer directory, and then
// offers calls: allocate tensors (streaming their data), load programs, run a batch (blocking, or
// submit() and a completion, so replicas overlap), fetch tensors. Liveness is watched on the I/O
// thread (heartbeats; exit of local children): a tile that dies is reported to the listener
// (on_event) within heartbeat_timeout, or at once when its process exits, and a run it was part
// of fails with peer_failed naming it, never hangs.
//
//   tile_group_config cfg{.tiles = 4, .tile_memory = 64 << 20};
//   auto g = tile_group::start(cfg);
//   if (!g) fail(g.error());
//   (*g)->alloc(0, desc, data.data());
//   (*g)->load({prog0, prog1, prog2, prog3});
//   auto r = (*g)->run(batch);   // result<run_result>
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "tessera/common/status.hpp"
#include "tessera/exchange/channel.hpp"
#include "tessera/exchange/codec.hpp"
#include "tessera/host/launcher.hpp"

namespace tessera::host {

struct tile_group_config {
  uint32_t tiles = 1;
  uint64_t tile_memory = 256ull << 20;
  /// The host's control endpoint (ROUTER). tcp port 0 = any free port.
  std::string control_bind = "tcp://127.0.0.1:0";
  /// The address tiles dial when control_bind is a wildcard (e.g. this machine's IP).
  std::string advertise_host;
  /// Launch tiles on this machine (true) or wait for externally launched tiles (false).
  bool launch_local = true;
  /// Local tiles: "ipc" (one socket file per tile under a run directory) or "tcp" (loopback).
  std::string local_exchange = "ipc";
  local_launcher_config launcher;
  std::vector<std::string> extra_tile_args;
  std::chrono::milliseconds register_timeout{20000};
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds heartbeat_timeout{3000};
  /// A tile whose control connection closed (the channel's socket monitor) fails when nothing
  /// more is heard from it within this, instead of heartbeat_timeout: a dead process or a lost
  /// machine whose kernel closed the socket is noticed in well under a second. A silent
  /// partition closes nothing and still takes heartbeat_timeout.
  std::chrono::milliseconds disconnect_grace{300};
  std::chrono::milliseconds request_timeout{120000};  ///< alloc / load / fetch replies
  std::chrono::milliseconds run_timeout{120000};      ///< one batch on every tile
  std::chrono::milliseconds exchange_timeout{30000};  ///< tiles' wait for one slice
};

/// What the host knows of one tile.
struct tile_info {
  uint32_t id = 0;
  uint32_t incarnation = 0;
  bool registered = false;
  bool failed = false;
  std::string failure;
  pid_t pid = 0;          ///< remote tiles: the pid on their machine
  bool local = false;     ///< launched by this host
  std::string hostname;
  std::string exchange_endpoint;
  uint64_t memory_capacity = 0;
  uint64_t memory_used = 0;
  uint64_t memory_high_water = 0;
  uint64_t bad_messages = 0;
  uint64_t stale_messages = 0;        ///< exchange duplicates / late slices it discarded
  exchange::fault_counts injected{};  ///< faults this incarnation injected (its --faults), per kind
  std::chrono::steady_clock::time_point last_heartbeat{};
  /// When its control connection was last seen closing (zero: not since it registered).
  std::chrono::steady_clock::time_point disconnected_at{};
};

/// Data for one tile at the start of a run.
struct run_input {
  uint32_t tile = 0;
  exchange::slice_ref dst;
  const void* data = nullptr;
  size_t bytes = 0;
};
/// A slice to bring back after a run.
struct run_output {
  uint32_t tile = 0;
  exchange::slice_ref src;
  /// The tensor's element type: a bf16 slice travels at 2 bytes an element and comes back widened
  /// to f32 (exactly: a bf16 value is the upper half of a float).
  exchange::dtype type = exchange::dtype::f32;
};

struct batch_spec {
  uint32_t program_id = 0;
  std::vector<uint32_t> tiles;          ///< participants; empty = all
  std::vector<int32_t> seq_lengths;
  int64_t active_tokens = 0;
  std::vector<run_input> inputs;
  std::vector<run_output> outputs;
  bool collect_counters = true;
};

struct run_result {
  uint64_t batch_id = 0;
  std::vector<std::vector<float>> outputs;  ///< in batch_spec::outputs order
  /// counters[tile][superstep]
  std::map<uint32_t, std::vector<exchange::superstep_counters>> counters;
  std::map<uint32_t, uint64_t> memory_high_water;
  double wall_seconds = 0;
};

/// What the group tells its supervisor: a tile failed (child exit, heartbeat silence, an
/// unreachable socket, a batch it did not finish), or a tile registered with a new incarnation
/// (a restarted local tile, or a remote tile relaunched by its launcher).
struct tile_event {
  enum class kind : uint8_t { failed, registered };
  kind what = kind::failed;
  uint32_t tile = 0;
  uint32_t incarnation = 0;
  std::string why;
};

class tile_group {
 public:
  /// Binds the control socket, launches (or awaits) the tiles, sends the peer directory.
  static result<std::unique_ptr<tile_group>> start(tile_group_config cfg);
  ~tile_group();
  tile_group(const tile_group&) = delete;
  tile_group& operator=(const tile_group&) = delete;

  uint32_t size() const { return cfg_.tiles; }
  const tile_group_config& config() const { return cfg_; }
  /// The endpoint tiles dial (for launchers of external tiles).
  std::string control_endpoint() const { return control_endpoint_; }

  /// Allocates a tensor on a tile, streaming `data` (desc.bytes() bytes) if not null.
  status alloc(uint32_t tile, const exchange::tensor_desc& desc, const void* data);
  /// Many allocations, pipelined (a bounded window in flight); progress(done, total bytes).
  struct alloc_request {
    uint32_t tile;
    exchange::tensor_desc desc;
    const void* data;
  };
  status alloc_many(const std::vector<alloc_request>& reqs,
                    const std::function<void(uint64_t, uint64_t)>& progress = {});
  status free(uint32_t tile, const std::vector<uint32_t>& ids);
  /// Loads programs: `per_tile` maps tile id -> its program.
  status load(const std::map<uint32_t, exchange::program>& per_tile);
  /// Runs one batch (submit() and wait); fails with peer_failed if a participant dies, timeout
  /// if it takes too long.
  result<run_result> run(const batch_spec& spec);
  /// Starts one batch and returns at once; `done` runs exactly once, on the control channel's
  /// I/O thread (it must not block). Batches of different replicas overlap. When one participant
  /// fails or reports an error, the others are told to abort and are waited for (briefly), so
  /// the next batch on them starts clean; a participant that does not finish by the run timeout
  /// is marked failed.
  void submit(const batch_spec& spec, std::function<void(result<run_result>)> done);
  result<std::vector<float>> fetch(uint32_t tile, const exchange::slice_ref& slice, int64_t active_tokens = 0);

  /// A snapshot of what the host knows of each tile.
  std::vector<tile_info> tiles() const;
  /// ok, or peer_failed naming the failed tiles.
  status health() const;
  /// Listener for tile events. Runs on the I/O thread; it must not block (queue and return).
  void on_event(std::function<void(const tile_event&)> listener);
  /// True when this host launched the tiles and can restart them.
  bool can_restart() const { return launcher_ != nullptr; }
  /// Restarts a local tile (a new process, the next incarnation, the same id), waits for it to
  /// register and hands every tile the new peer directory. Its memory starts empty: the caller
  /// reloads its tensors and programs (tile_model::restore_tile does).
  status restart_tile(uint32_t tile);
  /// Waits until a failed tile is registered again with a higher incarnation (a remote tile that
  /// its launcher started again), then hands every tile the new peer directory.
  status await_return(uint32_t tile, std::chrono::milliseconds timeout);
  /// Marks a tile failed (e.g. it did not finish a batch); its supervisor will bring it back.
  void mark_failed(uint32_t tile, const std::string& why);
  /// Tiles restarted so far.
  uint64_t restarts() const { return restarts_; }
  /// Replies (acks, run_done) that matched no waiting request and were dropped: a request that
  /// timed out, or an old incarnation's late answers after it was declared failed (fencing: a
  /// reply is matched by its sender's routing id, which carries the incarnation).
  uint64_t late_replies() const { return late_replies_; }
  /// Heartbeats dropped because they came from an incarnation that is not the tile's current one
  /// or from a tile declared failed (they never make a failed tile healthy again).
  uint64_t stale_heartbeats() const { return stale_heartbeats_; }
  /// Shutdowns sent to fenced incarnations that were still alive (their heartbeats arrived): the
  /// tile exits with status 1 (a shutdown whose reason starts "fenced: ") so that its launcher starts the next one.
  uint64_t fenced_shutdowns() const { return fenced_shutdowns_; }
  /// Kills a local tile with `signal` (tests and fault injection).
  status signal_tile(uint32_t tile, int signal);
  /// Shuts every tile down cleanly (idempotent).
  void shutdown();

 private:
  explicit tile_group(tile_group_config cfg);
  status bind_and_launch();
  status spawn_tile(uint32_t tile);  // under mu_
  status await_registration();
  status send_directory();
  /// One request to one tile, waited for (any thread but the I/O thread).
  result<exchange::envelope> call(uint32_t tile, uint64_t id, exchange::envelope e,
                                  std::chrono::milliseconds timeout);
  uint64_t next_id() { return next_id_.fetch_add(1); }
  // I/O thread: the control channel's handlers.
  void on_message(const std::string& peer, exchange::envelope&& e);
  void on_tick(std::chrono::steady_clock::time_point now);
  void emit(const tile_event& ev);

  struct run_op;
  void finish_part(const std::shared_ptr<run_op>& op, uint32_t tile, result<exchange::envelope> r);

  tile_group_config cfg_;
  zmq::context_t ctx_{1};
  std::unique_ptr<exchange::channel> channel_;
  std::string control_endpoint_;
  std::string run_dir_;
  std::unique_ptr<local_launcher> launcher_;
  mutable std::mutex mu_;  // guards everything below; never held while waiting on the channel
  std::condition_variable changed_;  // a tile registered or failed
  std::vector<tile_info> tiles_;
  std::vector<std::string> routes_;  // control routing id per tile ("tile-<id>-<incarnation>")
  std::mutex listener_mu_;  // held while the listener runs (not mu_: the listener may read the group)
  std::function<void(const tile_event&)> listener_;
  std::atomic<uint64_t> next_id_{1};  // request ids and batch ids share one space
  std::atomic<uint64_t> bad_messages_{0};
  std::atomic<uint64_t> restarts_{0};
  std::atomic<uint64_t> late_replies_{0};
  std::atomic<uint64_t> stale_heartbeats_{0};
  std::atomic<uint64_t> fenced_shutdowns_{0};
  std::map<std::string, std::chrono::steady_clock::time_point> fenced_told_;  // I/O thread only
  std::chrono::steady_clock::time_point last_keepalive_{};  // I/O thread only
  bool shut_ = false;
};

/// The barrier this group pays a superstep, measured: a program of `supersteps` empty supersteps
/// (no kernel, no message, a barrier each) loaded on every tile as program kBarrierProbeProgram and
/// run `runs` times; the median over the last run's supersteps of the tiles' mean sync_ns (their
/// run_done counters), in seconds. The decoder plan ranking takes it as machine_model::sync_seconds.
inline constexpr uint32_t kBarrierProbeProgram = 0xBA77;
struct barrier_probe {
  double seconds = 0;  ///< median per superstep
  int supersteps = 0;
  uint32_t tiles = 0;
};
result<barrier_probe> measure_barrier(tile_group& group, int supersteps = 16, int runs = 3);

}  // namespace tessera::host
