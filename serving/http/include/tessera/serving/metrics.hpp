// tessera/serving/metrics.hpp: the serving counters and histograms, exposed in the Prometheus
// text format at GET /metrics: tessera's own (tessera_*, every API) and, beside them,
// text-embeddings-inference's te_* set with TEI's names, labels and buckets (TEI's routes only),
// so that dashboards built for TEI read tessera unchanged.
//
// Counters named as TEI names them (te_request_count, tessera_request_count: no _total suffix)
// are exposed as "untyped": Prometheus stores and queries them the same (rate() works), and
// promtool's lint, which requires a counter's name to end in _total, accepts them.
//
//   serving_metrics m;
//   m.request_count.fetch_add(1);
//   m.request_duration.observe(0.012);
//   m.count_failure("overloaded");
//   std::string text = m.to_prometheus({{"tessera_queue_size", "Sequences queued", 3}});
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
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
  /// Appends the # HELP/# TYPE lines, buckets, _sum and _count; buckets above `max_bound` are
  /// left out (+Inf still counts everything).
  void write(std::string& out, std::string_view name, std::string_view help,
             double max_bound = std::numeric_limits<double>::infinity()) const;

  /// 50 us .. 60 s, roughly x2.5 per step.
  static std::vector<double> seconds_buckets();
  /// 1, 2, 4, ... up to `max`.
  static std::vector<double> powers_of_two(double max);
  /// TEI's duration buckets: 35 steps of x1.5 from 15 us (1e-5 * 1.5^k, k = 1..35).
  static std::vector<double> tei_duration_buckets();

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

/// Failures by kind, as label values of one counter.
class failure_counts {
 public:
  void add(std::string_view kind);
  uint64_t get(std::string_view kind) const;
  /// One "name{<label>=\"kind\"} n" line per kind.
  void write(std::string& out, std::string_view name, std::string_view label = "err") const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t, std::less<>> counts_;
};

/// text-embeddings-inference's te_* metrics (TEI v1.7.1 router/src/prometheus.rs, lib.rs and
/// http/server.rs): per request of TEI's routes, method "single" or "batch".
struct tei_metrics {
  tei_metrics();
  std::atomic<uint64_t> request_count_single{0}, request_count_batch{0};
  std::atomic<uint64_t> request_success_single{0}, request_success_batch{0};
  failure_counts request_failure;  ///< err: validation, batch_size, tokenization, overloaded, inference, ...
  histogram request_duration, request_tokenization_duration, request_queue_duration,
      request_inference_duration;
  histogram request_input_length;  ///< buckets 2^0 .. 2^19, those above max_input_length left out
  histogram batch_next_size, batch_next_tokens;
  std::atomic<int64_t> max_input_length{512};
  void write(std::string& out) const;
};

/// Decoder serving (llm_engine.hpp): per-request latencies, token counts, the scheduler's
/// work and the KV cache. Written only once an engine has started (`enabled`).
struct llm_metrics {
  llm_metrics();
  std::atomic<bool> enabled{false};
  histogram time_to_first_token;  ///< arrival to the first token's text leaving the engine
  histogram inter_token_latency;  ///< between consecutive tokens of a request
  histogram e2e_latency;          ///< arrival to the last token
  histogram queue_time;           ///< arrival to the first step that ran the request
  histogram step_duration;        ///< backend time per step
  histogram step_tokens;          ///< tokens per step (prefill chunks + decodes)
  // On the backend's modelled clock (a timing model's step times, summed), when it has one.
  histogram modelled_time_to_first_token, modelled_inter_token_latency, modelled_e2e_latency,
      modelled_step_duration;
  std::atomic<double> modelled_seconds_total{0};  ///< the modelled clock: every step's modelled time
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0}, prefill_tokens{0}, steps{0},
      preemptions{0}, prefix_hit_tokens{0}, prefix_query_tokens{0};
  failure_counts finished;  ///< requests by finish_reason (stop, length, cancelled, error)
  // Gauges the engine sets after every step.
  std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_free{0}, kv_blocks_cached{0}, running{0},
      waiting{0};
  std::atomic<double> tokens_per_second{0};  ///< generated tokens over the last ~10 s
  void write(std::string& out) const;
};

struct serving_metrics {
  serving_metrics();
  tei_metrics tei;
  llm_metrics llm;

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

  /// One failed inference request of kind `kind` (its error_type: "Validation", "Overloaded",
  /// "timeout", ...). Only inference requests count, so failures never outnumber requests.
  void count_failure(std::string_view kind) { failures_.add(kind); }
  uint64_t failures(std::string_view kind) const { return failures_.get(kind); }
  /// Error answers to requests that are not inference requests (401, 404, 405, 413, a malformed
  /// request, a 503 probe), by error_type: tessera_http_errors{err}.
  failure_counts http_errors;

  /// The whole exposition text, with `gauges` appended.
  std::string to_prometheus(const std::vector<gauge_sample>& gauges = {}) const;

 private:
  failure_counts failures_;
};

}  // namespace tessera::serving
