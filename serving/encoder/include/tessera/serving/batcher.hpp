// tessera/serving/batcher.hpp: the queue in front of one backend and the thread that turns it
// into batches with a batching_policy.
//
// enqueue() is called by the router (any thread); a batcher thread asks the policy whether to
// close a batch, submits it to the backend, and answers every sequence from the backend's
// callback. At most max_inflight_batches are at the backend at once, so under load the queue
// fills while the backend is busy and batches grow by themselves. Requests whose deadline
// passes in the queue are answered with a timeout. A failed batch goes to the failure handler
// (the router retries elsewhere); without one its sequences are answered with the error.
//
// Tests drive it without the thread on a manual_clock:
//   manual_clock clk;
//   batcher b(backend, cfg, clk);
//   b.enqueue(r);
//   clk.advance(cfg.max_queue_delay);
//   b.poll();                          // the batch goes to the backend now
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/serving/batching_policy.hpp"
#include "tessera/serving/clock.hpp"
#include "tessera/serving/metrics.hpp"
#include "tessera/serving/request.hpp"

namespace tessera::serving {

class batcher {
 public:
  /// Receives the sequences of a batch the backend failed, with the backend's status.
  using failure_handler = std::function<void(std::vector<request_ptr>, const status&)>;

  /// `cfg` is completed from the backend's info: max_sequence_length and max_batch_size are
  /// capped by the backend's, and a zero token_budget takes the backend's (packing falls back
  /// to max_batch_size x max_sequence_length when both are zero).
  batcher(std::shared_ptr<backends::backend> backend, batching_config cfg,
          const clock& clk = default_clock(), serving_metrics* metrics = nullptr,
          failure_handler on_failure = nullptr);
  ~batcher();
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;

  /// Takes `r` (then r is null) or refuses it, leaving r with the caller: overloaded when the
  /// queue is full, cancelled after stop().
  status enqueue(request_ptr& r);

  /// Starts the batcher thread.
  void start();
  /// Stops taking requests, sends what is queued, waits for every answer, joins the thread.
  void stop();

  /// One scheduling round at clk.now(): answers expired requests, submits every batch the
  /// policy closes. Returns when to run again (none: on the next arrival or answer).
  std::optional<time_point> poll(bool flush = false);

  size_t queue_size() const;
  int64_t queued_tokens() const;
  int inflight_batches() const;
  /// Sequences this batcher answered with logits, and batches it sent.
  int64_t sequences_served() const { return sequences_served_.load(std::memory_order_relaxed); }
  /// Modelled seconds of the batches answered (backends::batch_timing::modelled_seconds, summed).
  double modelled_seconds() const { return modelled_seconds_.load(std::memory_order_relaxed); }
  int64_t batches_sent() const { return batches_sent_.load(std::memory_order_relaxed); }
  backends::backend& backend() { return *backend_; }
  const backends::backend& backend() const { return *backend_; }
  const batching_config& config() const { return cfg_; }

 private:
  struct pending_batch {
    backends::batch_request request;
    std::shared_ptr<std::vector<request_ptr>> sequences;
  };

  void run();
  void on_batch_done(std::shared_ptr<std::vector<request_ptr>> seqs, backends::batch_result r,
                     time_point dispatched);

  std::shared_ptr<backends::backend> backend_;
  batching_config cfg_;
  std::unique_ptr<batching_policy> policy_;
  const clock& clock_;
  serving_metrics* metrics_;
  failure_handler on_failure_;
  std::string backend_name_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<request_ptr> queue_;
  int64_t queued_tokens_ = 0;
  int inflight_ = 0;
  uint64_t next_batch_id_ = 1;
  bool dirty_ = false;     // something changed since the last poll
  bool stopping_ = false;
  std::atomic<int64_t> sequences_served_{0};
  std::atomic<double> modelled_seconds_{0};
  std::atomic<int64_t> batches_sent_{0};
  std::thread thread_;
};

}  // namespace tessera::serving
