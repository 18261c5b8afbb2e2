// tessera/serving/metrics.hpp: the serving counters and histograms, exposed in the Prometheus
// text format at GET /metrics (names follow text-embeddings-inference's te_* set, prefixed
// tessera_).
//
//   serving_metrics m;
//   m.request_count.fetch_add(1);
//   m.request_duration.observe(0.012);
//   m.count_failure("overloaded");
//   std::string text = m.to_prometheus({{"tessera_queue_size", "Sequences queued", 3}});
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::serving {

/// A Prometheus histogram with fixed bucket upper bounds; observe() is lock-free.
class histogram {
 public:
  explicit histogram(std::vector<double> upper_bounds);
  void observe(double v);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  /// Appends the # HELP/# TYPE lines, buckets, _sum and _count.
  void write(std::string& out, std::string_view name, std::string_view help) const;

  /// 50 us .. 60 s, roughly x2.5 per step.
  static std::vector<double> seconds_buckets();
  /// 1, 2, 4, ... up to `max`.
  static std::vector<double> powers_of_two(double max);

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

/// A gauge sampled when /metrics is scraped.
struct gauge_sample {
  std::string name;    ///< may carry labels: tessera_backend_healthy{backend="gpu0"}
  std::string help;
  double value = 0;
};

struct serving_metrics {
  serving_metrics();

  std::atomic<uint64_t> request_count{0};    ///< inference HTTP requests received
  std::atomic<uint64_t> request_success{0};  ///< answered 200
  std::atomic<uint64_t> sequence_count{0};   ///< sequences admitted to the router
  std::atomic<uint64_t> batch_count{0};      ///< batches sent to backends
  std::atomic<uint64_t> batch_failures{0};   ///< batches a backend failed
  std::atomic<uint64_t> retries{0};          ///< sequences retried on another backend
  std::atomic<uint64_t> padding_tokens{0};   ///< padded positions computed for nothing
  std::atomic<uint64_t> batch_tokens_total{0};

  histogram tokenization_duration;
  histogram queue_duration;
  histogram inference_duration;
  histogram request_duration;
  histogram batch_size;
  histogram batch_tokens;
  histogram request_input_length;
  histogram batch_wall_duration;      ///< backend-measured wall time per batch
  histogram batch_modelled_duration;  ///< emulated hardware time per batch (timing model on)

  /// One failed request of kind `kind` ("validation", "overloaded", "timeout", ...).
  void count_failure(std::string_view kind);
  uint64_t failures(std::string_view kind) const;

  /// The whole exposition text, with `gauges` appended.
  std::string to_prometheus(const std::vector<gauge_sample>& gauges = {}) const;

 private:
  mutable std::mutex failures_mu_;
  std::map<std::string, uint64_t, std::less<>> failures_;
};

}  // namespace tessera::serving
