// tessera/host/tile_backend.hpp: a deployed tile model as a serving backend, with its supervisor.
//
// One worker thread per replica takes batches from a shared queue, so a free replica that is up
// always takes the next batch. Each replica is routable on its own: when one of its tiles fails
// (the tile group reports a child exit, heartbeat silence or a batch it did not finish), the
// replica leaves rotation, the batch it was running goes back to the front of the queue for the
// others, and that replica's recovery thread brings it back: it restarts the failed tiles (a
// new incarnation; or, for tiles launched elsewhere, waits for their launcher to start them
// again), streams their shards, reloads their programs and puts the replica back in rotation.
// Every batch is answered exactly once.
//
// Packed batches run as they are; padded batches (GPU-style policies, for crossed experiments)
// are emulated by adding, for every sequence shorter than the padded length, a filler sequence
// of the missing length: the tiles compute as many token rows as the padded batch has, and the
// real sequences' logits stay exact because a filler never shares attention with them.
//
//   auto b = std::make_shared<tile_backend>(std::move(deployed), "tiles0");
//   router.add_backend(b, policy);
#pragma once

#include <condition_variable>
#include <deque>
#include <optional>
#include <thread>

#include "tessera/backends/backend.hpp"
#include "tessera/host/program_timing.hpp"
#include "tessera/host/tile_model.hpp"

namespace tessera::host {

struct tile_backend_config {
  /// How often one batch runs before its failure is answered (each attempt may be on another
  /// replica).
  int max_attempts = 3;
  /// Batches queued while no replica is up wait this long for one to come back, then fail
  /// (peer_failed), so the router can answer them elsewhere.
  std::chrono::milliseconds max_wait_for_replica{15000};
  /// The modelled clock: each batch's time on this IPU preset (program_timing.hpp: the plan's
  /// tiles stand for the chip, every replica for its share), in batch_result.timing.modelled_seconds.
  /// Unset: 0 (not modelled).
  std::optional<timing::ipu_preset> preset;
};

class tile_backend final : public backends::backend {
 public:
  tile_backend(std::unique_ptr<tile_model> model, std::string name, tile_backend_config cfg = {});
  ~tile_backend() override;

  backends::backend_info info() const override { return info_; }
  void submit(backends::batch_request request, std::function<void(backends::batch_result)> done) override;
  int64_t outstanding_tokens() const override { return outstanding_.load(); }
  /// True while at least one replica is up.
  bool healthy() const override;
  std::vector<backends::replica_status> replicas() const override;
  /// Answers queued batches with `cancelled` and stops the workers and the supervisor.
  void stop();
  tile_model& model() { return *model_; }
  /// Replica recoveries done, and the wall time the last one took (seconds, detection to back).
  int64_t recoveries() const { return recoveries_.load(); }
  /// Batches run again after a failed attempt (a lost or corrupt slice, a failed tile).
  int64_t retries() const { return retries_.load(); }
  double last_recovery_seconds() const { return last_recovery_seconds_.load(); }

 private:
  struct job {
    backends::batch_request request;
    std::function<void(backends::batch_result)> done;
    int64_t tokens = 0;
    int attempts = 0;
    std::chrono::steady_clock::time_point queued;
  };
  enum class state : uint8_t { up, down, recovering };
  struct replica {
    state st = state::up;
    std::string why;
    std::vector<uint32_t> tiles;
    std::vector<uint32_t> lost;  // tiles that failed since their shards were last restored
    int64_t recoveries = 0;
    double last_recovery_seconds = 0;
    std::chrono::steady_clock::time_point down_since;
  };
  void work(int r);
  void supervise();
  void recover_loop(int r);
  /// Brings replica r back; false if it must be tried again later.
  bool recover(int r);
  void on_tile_event(const tile_event& ev);
  void mark_down(int r, const std::string& why);  // under mu_
  void answer(job& j, backends::batch_result r);
  backends::batch_result run_once(int replica, const backends::batch_request& req);
  int replica_of(uint32_t tile) const;

  std::unique_ptr<tile_model> model_;
  backends::backend_info info_;
  tile_backend_config cfg_;
  tensor_table tensors_;  ///< the plan's tensors per tile, for the modelled clock (with cfg_.preset)
  std::atomic<int64_t> recoveries_{0};
  std::atomic<int64_t> retries_{0};
  std::atomic<double> last_recovery_seconds_{0};
  std::atomic<int64_t> outstanding_{0};
  mutable std::mutex mu_;
  std::condition_variable work_cv_;        // a job arrived or a replica came up
  std::condition_variable supervisor_cv_;  // a replica went down, a tile registered, stop
  std::deque<job> jobs_;
  std::vector<replica> replicas_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::vector<std::thread> recoverers_;  // one per replica
  std::thread supervisor_;
};

/// Brings one failed tile back: restarts it (a new incarnation) when the group launched it, else
/// waits briefly for its launcher to start it again (timeout: try later), then `restore` streams
/// its shards and programs. The supervisors of tile_backend and tile_llm_backend share it.
status bring_back_tile(tile_group& group, uint32_t tile, const std::function<status(uint32_t)>& restore,
                       const std::string& name);

/// The packed batch a request describes; padded layouts get filler sequences (see above).
/// `real` receives the number of real sequences (their logits come first).
models::packed_batch to_packed(const backends::batch_request& req, int* real);

}  // namespace tessera::host
