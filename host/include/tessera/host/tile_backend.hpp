// tessera/host/tile_backend.hpp: a deployed tile model as a serving backend.
//
// One worker thread per replica takes batches from a shared queue (so a free replica always
// takes the next batch) and runs them on its tiles. Packed batches run as they are; padded
// batches (GPU-style policies, for crossed experiments) are emulated by adding, for every
// sequence shorter than the padded length, a filler sequence of the missing length: the tiles
// then compute as many token rows as the padded batch has, and the real sequences' logits stay
// exact because a filler never shares attention with them.
//
//   auto b = std::make_shared<tile_backend>(std::move(deployed), "tiles0");
//   router.add_backend(b, policy);
#pragma once

#include <condition_variable>
#include <deque>
#include <thread>

#include "tessera/host/backend.hpp"
#include "tessera/host/tile_model.hpp"

namespace tessera::host {

class tile_backend final : public backend {
 public:
  /// `max_attempts`: how often a batch runs before its failure is answered; between attempts
  /// failed tiles are restarted and reloaded (tile_model::recover).
  tile_backend(std::unique_ptr<tile_model> model, std::string name, int max_attempts = 3);
  ~tile_backend() override;

  backend_info info() const override { return info_; }
  void submit(batch_request request, std::function<void(batch_result)> done) override;
  int64_t outstanding_tokens() const override { return outstanding_.load(); }
  bool healthy() const override;
  /// Answers queued batches with `cancelled` and stops the workers.
  void stop();
  tile_model& model() { return *model_; }
  /// Recoveries done, and the wall time the last one took (seconds).
  int64_t recoveries() const { return recoveries_.load(); }
  double last_recovery_seconds() const { return last_recovery_seconds_.load(); }

 private:
  struct job {
    batch_request request;
    std::function<void(batch_result)> done;
    int64_t tokens = 0;
  };
  void work(int replica);
  batch_result run(int replica, const batch_request& req);
  batch_result run_once(int replica, const batch_request& req);

  std::unique_ptr<tile_model> model_;
  backend_info info_;
  int max_attempts_;
  std::atomic<int64_t> recoveries_{0};
  std::atomic<double> last_recovery_seconds_{0};
  std::atomic<int> recovering_{0};
  std::atomic<int64_t> outstanding_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

/// The packed batch a request describes; padded layouts get filler sequences (see above).
/// `real` receives the number of real sequences (their logits come first).
models::packed_batch to_packed(const batch_request& req, int* real);

}  // namespace tessera::host
