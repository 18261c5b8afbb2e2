// tessera/backends/thread_pool_backend.hpp: a backend in this process: a queue of batches and a
// few worker threads, each running a forward function on whole batches. The reference backend
// (reference_backend.hpp) and the toy backend of the tests are this class with different
// forward functions; the GPU baseline process serves one over its wire protocol.
//
//   auto b = std::make_shared<thread_pool_backend>(
//       backends::backend_info{.name = "ref0", .kind = "reference"}, /*threads=*/2,
//       [](const backends::batch_request& req) -> result<std::vector<float>> { ... });
//   b->submit(std::move(req), [](backends::batch_result r) { ... });
//   b->set_healthy(false);                 // fault injection for tests
//   b->fail_next_batches(1, status::peer_failed("injected"));
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/common/job_queue.hpp"

namespace tessera::backends {

/// Runs a whole batch: returns [num_sequences, num_labels] logits, row-major.
using forward_fn = std::function<result<std::vector<float>>(const batch_request&)>;

class thread_pool_backend : public backend {
 public:
  thread_pool_backend(backend_info info, int threads, forward_fn forward);
  ~thread_pool_backend() override;

  backend_info info() const override { return info_; }
  void submit(batch_request request, std::function<void(batch_result)> done) override;
  int64_t outstanding_tokens() const override { return outstanding_.load(); }
  bool healthy() const override { return healthy_.load(); }

  /// Stops the workers; queued batches are answered with `cancelled`.
  void stop();
  void set_healthy(bool h) { healthy_.store(h); }
  /// The next `n` batches fail with `st` without running (fault injection).
  void fail_next_batches(int n, status st);
  /// Batches run so far (successful or not).
  int64_t batches_run() const { return batches_run_.load(); }

 private:
  struct job {
    batch_request request;
    std::function<void(batch_result)> done;
    int64_t tokens = 0;
  };
  void work();

  backend_info info_;
  forward_fn forward_;
  std::atomic<int64_t> outstanding_{0};
  std::atomic<bool> healthy_{true};
  std::atomic<int64_t> batches_run_{0};
  job_queue<job> jobs_;
  std::mutex fail_mu_;  // the injected failures
  int fail_next_ = 0;
  status fail_status_;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::backends
