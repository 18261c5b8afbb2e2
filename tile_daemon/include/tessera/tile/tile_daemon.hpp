// tessera/tile/tile_daemon.hpp: one emulated tile as an OS process (`tessera-tile`).
//
// The daemon registers with the host (a DEALER socket to the host's ROUTER), binds its exchange
// socket, sends heartbeats from a thread of its own (so a long compute set is not mistaken for a
// dead tile), and serves control messages: allocate/free tensors in its hard-capped memory, load
// programs, run a batch through the superstep loop, fetch a tensor, shut down. Every request is
// answered with a status; a malformed message is counted and dropped, never fatal.
//
//   tile_config cfg{.tile_id = 0, .host_endpoint = "tcp://127.0.0.1:5555", .memory_capacity = 64 << 20};
//   tile_daemon d(cfg);
//   return d.run();   // until shutdown, SIGTERM or the host going away
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "tessera/common/status.hpp"

namespace tessera::tile {

struct tile_config {
  uint32_t tile_id = 0;
  uint32_t incarnation = 0;
  std::string host_endpoint;                    ///< the host's control ROUTER
  uint64_t memory_capacity = 256ull << 20;      ///< the hard cap of tile memory, bytes
  std::string exchange_bind = "tcp://127.0.0.1:0";  ///< where to bind the exchange socket
  std::string advertise_host;                   ///< tcp: the address peers should dial
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds exchange_timeout{30000};
  /// The tile exits when it has heard nothing from the host for this long (0 = never).
  std::chrono::milliseconds host_silence_limit{0};
  int compute_threads = 1;
  std::string faults;  ///< a fault plan (JSON text or file, exchange/fault_plan.hpp); empty = none
};

class tile_daemon {
 public:
  explicit tile_daemon(tile_config cfg);
  ~tile_daemon();
  /// Serves until shutdown; returns the process exit code (0 clean, 1 failure).
  int run();
  /// Asks run() to return soon (signal-safe).
  static void request_stop();

 private:
  struct impl;
  tile_config cfg_;
};

}  // namespace tessera::tile
