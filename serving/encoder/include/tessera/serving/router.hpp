// tessera/serving/router.hpp: one host, several backends (tile groups, GPU baselines, in-process
// engines), each behind its own batcher; the router picks one per sequence.
//
// Rules:
//   * least outstanding work: the healthy backend with the fewest tokens queued + in flight;
//   * hybrid by length (strategy hybrid_length): sequences longer than long_threshold tokens go
//     to backends of kind "tiles", the others to kind "gpu"; when the preferred kind has no
//     healthy backend, any healthy backend serves (a fallback, never a refusal);
//   * unhealthy backends are skipped; no healthy backend at all -> peer_failed (HTTP 503);
//   * a failed batch: each of its sequences is retried once on another healthy backend, else
//     answered with the error. Nothing is dropped.
//
//   router r(routing_config{.strategy = routing_strategy::hybrid_length, .long_threshold = 128});
//   r.add_backend(gpu, batching_config{.kind = policy_kind::dynamic_padded});
//   r.add_backend(tiles, batching_config{.kind = policy_kind::token_budget});
//   r.start();
//   status st = r.submit(req);   // not ok: req is still ours, answer it with st
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/backends/backend.hpp"
#include "tessera/serving/batcher.hpp"
#include "tessera/serving/batching_policy.hpp"
#include "tessera/serving/clock.hpp"
#include "tessera/serving/metrics.hpp"
#include "tessera/serving/request.hpp"

namespace tessera::serving {

enum class routing_strategy : uint8_t { least_outstanding, hybrid_length };

/// "least-outstanding" | "hybrid".
result<routing_strategy> parse_routing_strategy(std::string_view name);

struct routing_config {
  routing_strategy strategy = routing_strategy::least_outstanding;
  int32_t long_threshold = 128;  ///< hybrid: length > threshold -> "tiles", else "gpu"
  int max_attempts = 2;          ///< backends a sequence may try (1 = no retry)
};

/// The hybrid rule, for any set of backends (BERT's router, the LLM replicas' llm_router): under
/// hybrid_length, the candidates whose kind is the one preferred for `length` tokens ("tiles" when
/// longer than long_threshold, else "gpu"), or all of them when none is of that kind; under
/// least_outstanding, all of them. Order is kept.
std::vector<size_t> prefer_kind_by_length(const routing_config& cfg, int32_t length, std::vector<size_t> candidates,
                                          const std::vector<std::string>& kinds);

class router {
 public:
  explicit router(routing_config cfg, const clock& clk = default_clock(),
                  serving_metrics* metrics = nullptr);
  ~router();
  router(const router&) = delete;
  router& operator=(const router&) = delete;

  /// Adds a backend and its batching policy. Call before start(); at most 64 backends.
  status add_backend(std::shared_ptr<backends::backend> backend, batching_config cfg);
  /// Starts every batcher thread.
  void start();
  /// Drains: every accepted sequence is answered, then the batcher threads end.
  void stop();

  /// Routes `r` to a batcher (then r is null) or refuses it (r stays with the caller):
  /// peer_failed when no backend is healthy, overloaded when every candidate queue is full,
  /// invalid_argument when longer than every backend's max_sequence_length.
  status submit(request_ptr& r);

  /// The backend index a sequence of `length` tokens would go to now, skipping backends
  /// whose bit is set in `exclude_mask`.
  std::optional<size_t> choose(int32_t length, uint64_t exclude_mask = 0) const;

  /// Some backend is healthy.
  bool healthy() const;
  /// The longest sequence some backend takes.
  int32_t max_sequence_length() const;
  int32_t num_labels() const;
  size_t queue_size() const;
  size_t num_backends() const { return batchers_.size(); }
  batcher& backend_batcher(size_t i) { return *batchers_.at(i); }
  const routing_config& config() const { return cfg_; }
  /// Per-backend gauges for /metrics (health, queue, outstanding tokens).
  std::vector<gauge_sample> gauges() const;

 private:
  void on_batch_failed(size_t backend_index, std::vector<request_ptr> seqs, const status& st);
  status submit_excluding(request_ptr& r, uint64_t exclude_mask);
  std::vector<size_t> candidates(int32_t length, uint64_t exclude_mask) const;

  routing_config cfg_;
  const clock& clock_;
  serving_metrics* metrics_;
  std::vector<std::unique_ptr<batcher>> batchers_;
  std::vector<backends::backend_info> infos_;
  std::vector<std::string> kinds_;  // infos_[i].kind, for prefer_kind_by_length
};

}  // namespace tessera::serving
