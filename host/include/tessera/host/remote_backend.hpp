// tessera/host/remote_backend.hpp: a backend in another process (the GPU baseline,
// `tessera-gpu`), reached over a DEALER socket with infer_batch / infer_result
// (exchange/protocol.hpp; the process side is gpu_baseline/include/tessera/gpu/gpu_server.hpp).
//
// The socket is an exchange::channel (one I/O thread owns it; submit() posts to its mailbox).
// Every batch is answered exactly once: with the reply, or with
//   * peer_failed when the process is gone: a spawned child exited (waitpid), or no message at
//     all (pongs included) came back for `silence_timeout` while pings go out every
//     `ping_interval` (the process answers pings from its io thread, also while busy);
//   * timeout when the batch's own deadline (`batch_timeout`) passes;
//   * cancelled when the backend is destroyed.
// healthy() is false until the first pong and after a silence or an exit; a later pong (the
// process restarted at the same endpoint) makes it healthy again. A child this backend spawned
// is started again when it exits (`restart`), at the same endpoint. Batches submitted while
// unhealthy fail at once with peer_failed, so the router retries them elsewhere.
//
//   remote_backend_config c;
//   c.endpoint = "tcp://gpuhost:7000";
//   c.info = {.name = "gpu0", .kind = "gpu", .max_sequence_length = 512, .num_labels = 2};
//   auto b = remote_backend::start(c).value();     // or c.spawn_binary = ".../tessera-gpu"
//   b->wait_ready(std::chrono::seconds(10));
//   router.add_backend(b, batching);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/models/bf16.hpp"

namespace tessera::host {

struct remote_backend_config {
  std::string endpoint;   ///< where the process's ROUTER listens (tcp://host:port, ipc:///path)
  backends::backend_info info;  ///< what the router sees (kind "gpu"; num_labels must match the model)
  std::chrono::milliseconds batch_timeout{30000};   ///< per-batch deadline -> timeout
  std::chrono::milliseconds ping_interval{200};
  std::chrono::milliseconds silence_timeout{2000};  ///< no message for this long -> peer_failed
  /// The TCP connection closed and nothing heard since for this long -> peer_failed (a process
  /// that died, a machine lost: well before the silence timeout; a reconnect answers a ping first).
  std::chrono::milliseconds disconnect_grace{300};
  /// Non-empty: launch this executable with spawn_args + "--bind <endpoint> --die-with-parent"
  /// (stdout to /dev/null) and stop it (SIGTERM, then SIGKILL) on destruction.
  std::string spawn_binary;
  std::vector<std::string> spawn_args;
  /// A spawned child that exits is started again (the backend is healthy again at its first pong).
  bool restart = true;
  /// The dtype every batch asks the process to compute in (infer_batch.compute); a process
  /// computing in another answers invalid_argument (see check_compute).
  models::dtype compute = models::dtype::fp32;
};

class remote_backend final : public backends::backend {
 public:
  static result<std::shared_ptr<remote_backend>> start(remote_backend_config cfg);
  ~remote_backend() override;

  backends::backend_info info() const override;
  void submit(backends::batch_request request, std::function<void(backends::batch_result)> done) override;
  int64_t outstanding_tokens() const override;
  bool healthy() const override;

  /// Waits until the process answered a ping (true) or `timeout` passed / the child exited.
  bool wait_ready(std::chrono::milliseconds timeout);
  /// Sends a batch without sequences (a ping the process answers like a batch) and returns its
  /// answer: ok, or the process's refusal when it computes in another dtype than `compute`.
  status check_compute(std::chrono::milliseconds timeout);
  std::vector<backends::replica_status> replicas() const override;
  /// The spawned child's pid (0 when not spawned); changes when the child is restarted.
  pid_t child_pid() const;
  /// Restarts of the spawned child, and the time the last took (exit to first pong, seconds).
  int64_t restarts() const;
  double last_restart_seconds() const;
  /// Stops the io thread and the child; pending batches are answered `cancelled`.
  void stop();

  struct impl;

 private:
  explicit remote_backend(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// An ipc endpoint in a fresh private directory, for a local backend process
/// (e.g. "ipc:///tmp/tessera-gpu-XXXXXX/gpu0.sock").
result<std::string> make_local_ipc_endpoint(const std::string& name);

}  // namespace tessera::host
