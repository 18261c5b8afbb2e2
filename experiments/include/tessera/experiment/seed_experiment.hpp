// tessera/experiment/seed_experiment.hpp: the seed's comparison as one experiment.
//
// BERT (bert-base by default) on the seed's length mix at several long-request shares, in seven
// configurations that separate the architecture's share from the batching's share:
//   tiles-packed   IPU-like chip (whole chip), token-budget packing        (the seed's "IPU")
//   gpu-static     A100, static batches of B padded to the model's max length (the seed's "GPU")
//   gpu-dynamic    A100, dynamic batches of up to B padded to their longest
//   gpu-packed     A100 with token-budget packing (crossed: padding-free GPU)
//   tiles-static   the chip with static padded batches (crossed)
//   tiles-dynamic  the chip with dynamic padded batches (crossed)
//   hybrid         long (> threshold) to the chip packed, short to the A100 dynamic padded
// For each: modelled req/s at saturation (every request queued at 0, timing-only), modelled
// latency percentiles under Poisson arrivals at a stated load, and a smaller sample computed
// for real (wall-clock req/s, logits checked against the in-process fp32 reference forward, one
// sequence at a time, per device: the row's `check` says what computed each device's answers, e.g.
// a tessera-gpu process, and the max difference; its modelled results are compared with a
// timing-only replay of the same trace).
//
//   experiment_options o;                      // defaults: a few minutes on 2 cores
//   auto rows = run_seed_experiment(o, make_compute_provider(...), log);
//   std::cout << rows_markdown(*rows, o);
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/experiment/virtual_run.hpp"

namespace tessera::experiment {

struct experiment_options {
  std::string model_shape = "bert-base";   ///< the modelled network (timing)
  std::string tiles_preset = "ipu-mk2";
  std::string gpu_preset = "a100-40gb";
  std::vector<double> long_shares{0.0, 0.4};
  int saturation_requests = 2000;          ///< timing-only, all queued at 0
  int latency_requests = 2000;             ///< timing-only, Poisson at the stated load
  double load_rps = 0;                     ///< > 0: this load for every mix; 0: load_fraction x gpu-static saturation
  double load_fraction = 0.7;
  int computed_requests = 48;              ///< really computed sample per configuration and mix (0: none)
  models::dtype compute_dtype = models::dtype::fp32;  ///< what the computed sample computes in
  bool timing_only = false;                ///< no computed sample at all
  int32_t batch_size = 32;                 ///< B of the padded policies
  int32_t token_budget = 4096;             ///< packed batches
  int32_t max_sequence_length = 512;
  int32_t hybrid_threshold = 128;
  double max_queue_delay_ms = 2;
  int max_inflight_batches = 1;            ///< per device: the next batch forms when it is free
  uint64_t seed = 0;
  std::vector<std::string> configs;        ///< subset by name; empty: all
  /// Latency-throughput curves: each configuration is run at slo_points offered loads (k / slo_points of
  /// its saturation, k = 1..slo_points; 0: no curves) with latency_requests Poisson arrivals each, and
  /// the highest load whose p99 meets each threshold is reported.
  std::vector<double> slo_p99_ms{10, 25, 50, 100};
  int slo_points = 8;
  /// Cost per million requests = (list price / amortization_years + TDP x energy price) per second of
  /// saturated service; both are stated assumptions, not measurements.
  double amortization_years = 3;
  double energy_usd_per_kwh = 0.10;
};

/// One configuration: its devices (with batching) and routing.
struct configuration {
  std::string name;
  std::string description;
  std::vector<virtual_backend_spec> backends;  ///< compute left null
  serving::routing_config routing;
};

std::vector<configuration> seed_configurations(const experiment_options& o);
std::vector<std::string> configuration_names();

/// Supplies the real backend that computes a configuration's device (null: timing-only).
using compute_provider = std::function<std::shared_ptr<backends::backend>(const configuration&, const virtual_backend_spec&)>;

/// One point of a latency-throughput curve.
struct curve_point {
  double load_rps = 0;        ///< offered (Poisson rate)
  double throughput_rps = 0;  ///< completed / makespan
  double p50_s = 0, p99_s = 0;
};

struct experiment_row {
  std::string config;
  int device_count = 1;          ///< devices the configuration uses (hybrid: 2)
  double tdp_w = 0;              ///< sum of the devices' TDP; 0 when a preset has none
  double price_usd = 0;          ///< sum of the devices' list prices; 0 when a preset has none
  std::string cost_note;         ///< which preset lacks which figure ("" when both are known)
  std::vector<curve_point> curve;
  std::vector<double> slo_rps;   ///< per o.slo_p99_ms: highest offered load on the curve meeting it (0: none)
  std::string devices;           ///< "ipu-mk2", "a100-40gb", "ipu-mk2 + a100-40gb"
  std::string batching;          ///< "token-budget 4096", "static 32x512", ...
  double long_share = 0;
  double saturation_rps = 0;     ///< modelled
  double saturation_padding = 0; ///< padding share of computed tokens at saturation
  double saturation_batch = 0;   ///< mean sequences per batch at saturation
  double load_rps = 0;           ///< stated offered load of the latency run
  double p50_s = 0, p99_s = 0;   ///< modelled latency at that load
  int64_t computed = 0;          ///< requests computed for real
  double wall_rps = 0;           ///< real computation, wall clock
  double max_logit_error = 0;
  bool modelled_match = true;    ///< computed run's modelled results == timing-only replay
  std::string compute_note;      ///< what computed it (backend kinds, "gpu", "tiles + gpu")
  /// What each check compared, per device: "gpu0: tessera-gpu process (pid 123) vs in-process fp32
  /// reference_forward, 48 answers, max abs diff 1.2e-07, tolerance 1e-04" ("; " between devices).
  std::string check;
};


/// What computes a device's batches, for the reader: "tessera-gpu process (pid 123)",
/// "2 tessera-tile processes (pids 1, 2)", or "in-process gpu reference engine".
std::string describe_compute(const backends::backend& b);

/// Saturation req/s per kW of TDP, per $1,000 of list price, and $ per million requests at saturation
/// (amortised price + energy); 0 when the figure needed is unknown.
double rps_per_kw(const experiment_row& r);
double rps_per_kusd(const experiment_row& r);
double usd_per_million(const experiment_row& r, const experiment_options& o);

using log_fn = std::function<void(const std::string&)>;

result<std::vector<experiment_row>> run_seed_experiment(const experiment_options& o, const compute_provider& compute,
                                                        const std::shared_ptr<const models::bert_model>& check_model,
                                                        const log_fn& log = {});

std::string rows_markdown(const std::vector<experiment_row>& rows, const experiment_options& o,
                          const std::string& compute_note);
/// `header_comments` (e.g. provenance lines starting with '#') are written before the column names.
status write_rows_csv(const std::vector<experiment_row>& rows, const std::string& path,
                      const experiment_options& o = {}, const std::string& header_comments = "");
/// Every curve point: long_share, config, load_rps, throughput_rps, p50_s, p99_s.
status write_curves_csv(const std::vector<experiment_row>& rows, const std::string& path,
                        const std::string& header_comments = "");
/// Per-request records of a run (arrival, dispatch, done, latency, backend) as CSV, after `header_comments`.
status write_requests_csv(const run_result& r, const std::string& path, const std::string& header_comments = "");

}  // namespace tessera::experiment
