// Prometheus text exposition of the serving metrics.
#include "tessera/serving/metrics.hpp"

#include <cmath>
#include <cstdio>

namespace tessera::serving {

namespace {

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void write_header(std::string& out, std::string_view name, std::string_view help,
                  std::string_view type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

/// One metric of one unlabelled sample.
void write_single(std::string& out, std::string_view name, std::string_view help, std::string_view type,
                  uint64_t v) {
  write_header(out, name, help, type);
  out += name;
  out += ' ';
  out += std::to_string(v);
  out += '\n';
}

/// A count named without _total (TEI's naming): "untyped", see metrics.hpp.
void write_count(std::string& out, std::string_view name, std::string_view help, uint64_t v) {
  write_single(out, name, help, "untyped", v);
}

void write_counter(std::string& out, std::string_view name, std::string_view help, uint64_t v) {
  write_single(out, name, help, "counter", v);
}

}  // namespace

histogram::histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

void histogram::write(std::string& out, std::string_view name, std::string_view help,
                      double max_bound) const {
  write_header(out, name, help, "histogram");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    if (i < bounds_.size() && bounds_[i] > max_bound) continue;
    out += name;
    out += "_bucket{le=\"";
    out += i < bounds_.size() ? format_number(bounds_[i]) : "+Inf";
    out += "\"} ";
    out += std::to_string(cumulative);
    out += '\n';
  }
  out += name;
  out += "_sum ";
  out += format_number(sum());
  out += '\n';
  out += name;
  out += "_count ";
  out += std::to_string(cumulative);
  out += '\n';
}

std::vector<double> histogram::seconds_buckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

std::vector<double> histogram::powers_of_two(double max) {
  std::vector<double> b;
  for (double v = 1; v <= max; v *= 2) b.push_back(v);
  return b;
}

std::vector<double> histogram::tei_duration_buckets() {
  std::vector<double> b;
  double v = 0.00001;
  for (int i = 0; i < 35; ++i) b.push_back(v *= 1.5);
  return b;
}

void failure_counts::add(std::string_view kind) {
  std::lock_guard lock(mu_);
  auto it = counts_.find(kind);
  if (it == counts_.end()) it = counts_.emplace(std::string(kind), 0).first;
  ++it->second;
}

uint64_t failure_counts::get(std::string_view kind) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(kind);
  return it == counts_.end() ? 0 : it->second;
}

void failure_counts::write(std::string& out, std::string_view name, std::string_view label) const {
  std::lock_guard lock(mu_);
  for (const auto& [kind, n] : counts_) {
    out += name;
    out += "{" + std::string(label) + "=\"" + kind + "\"} " + std::to_string(n) + "\n";
  }
}

tei_metrics::tei_metrics()
    : request_duration(histogram::tei_duration_buckets()),
      request_tokenization_duration(histogram::tei_duration_buckets()),
      request_queue_duration(histogram::tei_duration_buckets()),
      request_inference_duration(histogram::tei_duration_buckets()),
      request_input_length(histogram::powers_of_two(1 << 19)),
      batch_next_size(histogram::powers_of_two(1 << 12)),
      batch_next_tokens(histogram::powers_of_two(1 << 20)) {}

void tei_metrics::write(std::string& out) const {
  write_header(out, "te_request_count", "Requests to TEI's routes (text-embeddings-inference's metric)",
               "untyped");
  out += "te_request_count{method=\"single\"} " + std::to_string(request_count_single.load()) + "\n";
  out += "te_request_count{method=\"batch\"} " + std::to_string(request_count_batch.load()) + "\n";
  write_header(out, "te_request_success", "Requests to TEI's routes answered successfully", "untyped");
  out += "te_request_success{method=\"single\"} " + std::to_string(request_success_single.load()) + "\n";
  out += "te_request_success{method=\"batch\"} " + std::to_string(request_success_batch.load()) + "\n";
  write_header(out, "te_request_failure", "Failed requests to TEI's routes by kind", "untyped");
  request_failure.write(out, "te_request_failure");
  request_duration.write(out, "te_request_duration", "End-to-end request time (seconds)");
  request_tokenization_duration.write(out, "te_request_tokenization_duration", "Tokenization time (seconds)");
  request_queue_duration.write(out, "te_request_queue_duration", "Queue time (seconds)");
  request_inference_duration.write(out, "te_request_inference_duration", "Inference time (seconds)");
  request_input_length.write(out, "te_request_input_length", "Tokens per input",
                             static_cast<double>(max_input_length.load()));
  batch_next_size.write(out, "te_batch_next_size", "Sequences per batch");
  batch_next_tokens.write(out, "te_batch_next_tokens", "Tokens per batch");
}

llm_metrics::llm_metrics()
    : time_to_first_token(histogram::seconds_buckets()),
      inter_token_latency(histogram::seconds_buckets()),
      e2e_latency(histogram::seconds_buckets()),
      queue_time(histogram::seconds_buckets()),
      step_duration(histogram::seconds_buckets()),
      step_tokens(histogram::powers_of_two(1 << 16)),
      modelled_time_to_first_token(histogram::seconds_buckets()),
      modelled_inter_token_latency(histogram::seconds_buckets()),
      modelled_e2e_latency(histogram::seconds_buckets()),
      modelled_step_duration(histogram::seconds_buckets()) {}

void llm_metrics::write(std::string& out) const {
  if (!enabled.load()) return;
  time_to_first_token.write(out, "tessera_llm_time_to_first_token_seconds",
                            "Arrival to the first generated token (seconds)");
  inter_token_latency.write(out, "tessera_llm_inter_token_latency_seconds",
                            "Time between consecutive tokens of a request (seconds)");
  e2e_latency.write(out, "tessera_llm_e2e_request_latency_seconds",
                    "Arrival to the last token of a request (seconds)");
  queue_time.write(out, "tessera_llm_queue_time_seconds",
                   "Arrival to the first step that ran the request (seconds)");
  step_duration.write(out, "tessera_llm_step_duration_seconds", "Backend time per decoder step (seconds)");
  step_tokens.write(out, "tessera_llm_step_tokens", "Tokens per decoder step (prefill chunks and decodes)");
  if (modelled_seconds_total.load() > 0) {
    modelled_time_to_first_token.write(out, "tessera_llm_modelled_time_to_first_token_seconds",
                                       "Arrival to the first generated token on the modelled device's clock (seconds)");
    modelled_inter_token_latency.write(out, "tessera_llm_modelled_inter_token_latency_seconds",
                                       "Time between consecutive tokens on the modelled device's clock (seconds)");
    modelled_e2e_latency.write(out, "tessera_llm_modelled_e2e_request_latency_seconds",
                               "Arrival to the last token on the modelled device's clock (seconds)");
    modelled_step_duration.write(out, "tessera_llm_modelled_step_duration_seconds",
                                 "Modelled device time per decoder step (seconds)");
    write_header(out, "tessera_llm_modelled_seconds_total", "The modelled device's time spent on steps", "counter");
    out += "tessera_llm_modelled_seconds_total ";
    out += format_number(modelled_seconds_total.load());
    out += '\n';
  }
  write_counter(out, "tessera_llm_prompt_tokens_total", "Prompt tokens of admitted requests", prompt_tokens.load());
  write_counter(out, "tessera_llm_generation_tokens_total", "Tokens generated", generation_tokens.load());
  write_counter(out, "tessera_llm_prefill_tokens_total",
                "Tokens computed as prefill (recomputation after preemption included)", prefill_tokens.load());
  write_counter(out, "tessera_llm_steps_total", "Decoder steps run", steps.load());
  write_counter(out, "tessera_llm_preemptions_total", "Sequences preempted (recomputed later) for KV blocks",
                preemptions.load());
  write_counter(out, "tessera_llm_prefix_cache_hit_tokens_total",
                "Prompt tokens whose KV came from the prefix cache", prefix_hit_tokens.load());
  write_counter(out, "tessera_llm_prefix_cache_query_tokens_total",
                "Prompt tokens looked up in the prefix cache (whole blocks)", prefix_query_tokens.load());
  write_header(out, "tessera_llm_requests_total", "Finished requests by finish_reason", "counter");
  finished.write(out, "tessera_llm_requests_total", "finish_reason");
  auto gauge = [&](std::string_view name, std::string_view help, double v) {
    write_header(out, name, help, "gauge");
    out += name;
    out += ' ';
    out += format_number(v);
    out += '\n';
  };
  gauge("tessera_llm_kv_blocks_used", "KV blocks sequences hold", static_cast<double>(kv_blocks_used.load()));
  gauge("tessera_llm_kv_blocks_free", "KV blocks free or evictable from the prefix cache",
        static_cast<double>(kv_blocks_free.load()));
  gauge("tessera_llm_kv_blocks_cached", "KV blocks in the prefix cache", static_cast<double>(kv_blocks_cached.load()));
  gauge("tessera_llm_requests_running", "Requests holding KV blocks", static_cast<double>(running.load()));
  gauge("tessera_llm_requests_waiting", "Requests waiting for admission", static_cast<double>(waiting.load()));
  gauge("tessera_llm_generation_tokens_per_second", "Tokens generated per second over the last 10 s",
        tokens_per_second.load());
}

serving_metrics::serving_metrics()
    : tokenization_duration(histogram::seconds_buckets()),
      queue_duration(histogram::seconds_buckets()),
      inference_duration(histogram::seconds_buckets()),
      request_duration(histogram::seconds_buckets()),
      batch_size(histogram::powers_of_two(1024)),
      batch_tokens(histogram::powers_of_two(65536)),
      request_input_length(histogram::powers_of_two(1024)),
      batch_wall_duration(histogram::seconds_buckets()),
      batch_modelled_duration(histogram::seconds_buckets()) {}

std::string serving_metrics::to_prometheus(const std::vector<gauge_sample>& gauges) const {
  std::string out;
  out.reserve(8192);
  write_count(out, "tessera_request_count", "Inference requests received", request_count.load());
  write_count(out, "tessera_request_success", "Inference requests answered successfully",
              request_success.load());
  write_header(out, "tessera_request_failure", "Failed inference requests by error_type", "untyped");
  failures_.write(out, "tessera_request_failure");
  write_header(out, "tessera_http_errors", "Error answers to requests that are not inference requests, by error_type",
               "untyped");
  http_errors.write(out, "tessera_http_errors");
  write_count(out, "tessera_sequence_count", "Sequences admitted to the router", sequence_count.load());
  write_count(out, "tessera_batch_count", "Batches sent to backends", batch_count.load());
  write_count(out, "tessera_batch_failures", "Batches a backend answered with an error",
              batch_failures.load());
  write_count(out, "tessera_retries", "Sequences retried on another backend", retries.load());
  write_counter(out, "tessera_batch_tokens_total", "Real tokens sent to backends",
                batch_tokens_total.load());
  write_counter(out, "tessera_padding_tokens_total", "Padding positions sent to backends",
                padding_tokens.load());
  tokenization_duration.write(out, "tessera_request_tokenization_duration",
                              "Tokenization time per request (seconds)");
  queue_duration.write(out, "tessera_request_queue_duration",
                       "Time a sequence waited in the batch queue (seconds)");
  inference_duration.write(out, "tessera_request_inference_duration",
                           "Backend time of the batch a sequence rode in (seconds)");
  request_duration.write(out, "tessera_request_duration", "End-to-end request time (seconds)");
  batch_size.write(out, "tessera_batch_next_size", "Sequences per batch");
  batch_tokens.write(out, "tessera_batch_next_tokens", "Real tokens per batch");
  request_input_length.write(out, "tessera_request_input_length", "Tokens per sequence");
  batch_wall_duration.write(out, "tessera_batch_wall_duration",
                            "Batch time measured by the backend (seconds, wall clock)");
  batch_modelled_duration.write(out, "tessera_batch_modelled_duration",
                                "Batch time of the emulated hardware (seconds, timing model)");
  tei.write(out);
  llm.write(out);
  std::string last_name;
  for (const auto& g : gauges) {
    std::string base = g.name.substr(0, g.name.find('{'));
    if (base != last_name) {
      write_header(out, base, g.help, "gauge");
      last_name = base;
    }
    out += g.name + " " + format_number(g.value) + "\n";
  }
  return out;
}

}  // namespace tessera::serving
