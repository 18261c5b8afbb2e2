// tessera/loadgen/workload.hpp: what tessera-loadgen sends: length mixes (presets of
// tessera::length_mix, the seed's short/long mix and others), synthetic texts of a requested token length, Poisson arrivals, trace files;
// and the report (throughput, latency percentiles, errors) as a table, CSV and JSON.
//
//   auto mix = mix_preset("seed-40").value();                 // 40% long (200-512 tokens)
//   auto plan = synthesize(mix, 1000, /*rate=*/200.0, /*seed=*/1);   // Poisson, 200 req/s
//   // plan[i].text has about plan[i].tokens tokens after BERT tokenization ([CLS]/[SEP] included)
//   auto trace = read_trace("trace.csv");                     // tessera/common/trace_csv.hpp
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/random.hpp"
#include "tessera/common/status.hpp"

namespace tessera::loadgen {

/// "seed-0" (all short), "seed-40" (40% long), "seed-<P>" (P% long), "short", "long",
/// "fixed-<N>" (every request N tokens). Unknown -> invalid, listing the known ones.
result<length_mix> mix_preset(std::string_view name);

/// A text of about `tokens` BERT tokens ([CLS] and [SEP] counted): tokens - 2 common English
/// words, each a single WordPiece in BERT's uncased vocab.
std::string make_text(int32_t tokens, splitmix64& rng);

struct planned_request {
  double arrival_seconds = 0;  ///< offset from the start (open loop); ignored in closed loop
  int32_t tokens = 0;          ///< intended length (0 when a trace gives the text)
  std::string text;
};

/// `n` requests of the mix; arrivals Poisson at `rate` req/s (rate <= 0: all at 0, closed loop).
std::vector<planned_request> synthesize(const length_mix& mix, int64_t n, double rate,
                                        uint64_t seed);

/// Reads a trace (tessera/common/trace_csv.hpp), sorted by arrival; a row that gives a length in
/// tokens gets a text of that length (make_text, from splitmix64(seed)). Errors name the line.
result<std::vector<planned_request>> read_trace(const std::string& path, uint64_t seed = 1);
result<std::vector<planned_request>> parse_trace(std::string_view csv, uint64_t seed = 1);

/// What a run measured.
struct run_report {
  std::string mode;            ///< "open" | "closed"
  std::string mix;
  double offered_rate = 0;     ///< open loop: req/s asked for
  int connections = 0;
  double duration_seconds = 0;
  int64_t sent = 0, ok = 0, errors = 0;
  int64_t unsent = 0;          ///< open loop: due but still waiting for a connection at the end
  std::map<std::string, int64_t> errors_by_kind;  ///< "429", "503", "connect", "timeout" ...
  double throughput = 0;       ///< ok answers per second
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, mean_ms = 0, max_ms = 0;
  /// The modelled clock, when the server gives one (tessera's x-modelled-time header: the
  /// modelled time of the batch a request ran in). modelled_answers: ok answers that carried it.
  int64_t modelled_answers = 0;
  double modelled_p50_ms = 0, modelled_p90_ms = 0, modelled_p99_ms = 0, modelled_mean_ms = 0;
  /// Modelled device time the run took: per backend, the growth of its
  /// tessera_backend_modelled_seconds over the run / its replicas up (they run side by side);
  /// the slowest backend's. 0 when the server's /metrics has none.
  double modelled_seconds = 0;
  double modelled_throughput = 0;  ///< ok answers / modelled_seconds
};

/// The q-quantile (0 < q <= 1, nearest rank) of sorted, non-empty values.
double nearest_rank(const std::vector<double>& sorted, double q);

/// Latencies in milliseconds: nearest-rank percentiles, mean and max (all 0 for no values).
struct latency_summary {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0, max = 0;
};
latency_summary summarize_ms(std::vector<double> seconds);

/// Fills throughput and percentiles from per-request latencies (seconds) of the ok answers.
void summarize(run_report& r, std::vector<double> latencies_seconds);

/// The modelled clock's part of a report: per-request modelled latencies (seconds, the answers
/// that carried x-modelled-time) and the server's /metrics text before and after the run.
void summarize_modelled(run_report& r, std::vector<double> modelled_seconds, const std::string& metrics_before,
                        const std::string& metrics_after);

/// A human table; one CSV header + row; a JSON object.
std::string to_table(const run_report& r);
std::string csv_header();
std::string to_csv_row(const run_report& r);
std::string to_json(const run_report& r);

}  // namespace tessera::loadgen
