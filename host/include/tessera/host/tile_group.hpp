// tessera/host/tile_group.hpp: the host's handle on a group of N tile processes.
//
// A tile group owns the host's control socket (a ZeroMQ ROUTER), launches its tiles locally or
// waits for tiles that register from elsewhere (naming the missing ones on timeout), hands
// every tile the peer directory, and then offers blocking calls: allocate tensors (streaming
// their data), load programs, run a batch, fetch tensors. Liveness is watched all the time
// (heartbeats; exit of local children): a tile that dies is reported within
// heartbeat_timeout, and a run it was part of fails with peer_failed naming it, never hangs.
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
  /// Many allocations, pipelined (all sent, then all acks awaited); progress(done, total bytes).
  struct alloc_request {
    uint32_t tile;
    exchange::tensor_desc desc;
    const void* data;
  };
  status alloc_many(const std::vector<alloc_request>& reqs,
                    const std::function<void(uint64_t, uint64_t)>& progress = {});
  status free(uint32_t tile, const std::vector<uint32_t>& ids);
  /// Loads one program per tile (programs[i] goes to programs[i].tiles' tile i... see below):
  /// `per_tile` maps tile id -> its program.
  status load(const std::map<uint32_t, exchange::program>& per_tile);
  /// Runs one batch; fails with peer_failed if a participant dies, timeout if it takes too long.
  result<run_result> run(const batch_spec& spec);
  result<std::vector<float>> fetch(uint32_t tile, const exchange::slice_ref& slice, int64_t active_tokens = 0);

  /// A snapshot of what the host knows of each tile.
  std::vector<tile_info> tiles() const;
  /// ok, or peer_failed naming the failed tiles.
  status health() const;
  /// Restarts a local tile (a new process, the next incarnation, the same id), waits for it to
  /// register and hands every tile the new peer directory. Its memory starts empty: the caller
  /// reloads its tensors and programs (tile_model::recover does).
  status restart_tile(uint32_t tile);
  /// Tiles restarted so far.
  uint64_t restarts() const { return restarts_; }
  /// Kills a local tile with `signal` (tests and fault injection).
  status signal_tile(uint32_t tile, int signal);
  /// Shuts every tile down cleanly (idempotent).
  void shutdown();

 private:
  explicit tile_group(tile_group_config cfg);
  status bind_and_launch();
  status spawn_tile(uint32_t tile);
  status await_registration();
  /// Receives and dispatches until `done()` or the deadline; false on timeout.
  bool pump_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);
  void pump_once(std::chrono::milliseconds wait);
  void dispatch(std::vector<zmq::message_t>& route, exchange::envelope&& e);
  void check_liveness();
  void mark_failed(uint32_t tile, const std::string& why);
  status send_to(uint32_t tile, exchange::envelope&& e);
  result<exchange::ack> await_ack(uint64_t request_id, uint32_t tile);
  void monitor_loop();
  /// Copies tiles_ into the snapshot that tiles() and health() read without waiting for a run.
  void publish();

  tile_group_config cfg_;
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  std::string control_endpoint_;
  std::string run_dir_;
  std::unique_ptr<local_launcher> launcher_;
  mutable std::mutex mu_;  // guards the socket and everything below
  std::vector<tile_info> tiles_;
  std::vector<std::string> routes_;  // control routing id per tile
  std::map<uint64_t, std::pair<exchange::ack, std::vector<zmq::message_t>>> acks_;
  std::map<std::pair<uint64_t, uint32_t>, std::pair<exchange::run_done, std::vector<zmq::message_t>>> done_;
  uint64_t next_request_ = 1;
  uint64_t next_batch_ = 1;
  uint64_t bad_messages_ = 0;
  std::atomic<uint64_t> restarts_{0};
  bool shut_ = false;
  mutable std::mutex snapshot_mu_;
  std::vector<tile_info> snapshot_;  // guarded by snapshot_mu_
  std::atomic<bool> monitor_stop_{false};
  std::thread monitor_;
};

}  // namespace tessera::host
