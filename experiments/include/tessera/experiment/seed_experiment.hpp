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
// for real (wall-clock req/s, logits checked against the reference forward, and its modelled
// results compared with a timing-only replay of the same trace).
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
  bool timing_only = false;                ///< no computed sample at all
  int32_t batch_size = 32;                 ///< B of the padded policies
  int32_t token_budget = 4096;             ///< packed batches
  int32_t max_sequence_length = 512;
  int32_t hybrid_threshold = 128;
  double max_queue_delay_ms = 2;
  int max_inflight_batches = 1;            ///< per device: the next batch forms when it is free
  uint64_t seed = 0;
  std::vector<std::string> configs;        ///< subset by name; empty: all
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
using compute_provider = std::function<std::shared_ptr<host::backend>(const configuration&, const virtual_backend_spec&)>;

struct experiment_row {
  std::string config;
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
  std::string compute_note;      ///< what computed it
};

using log_fn = std::function<void(const std::string&)>;

result<std::vector<experiment_row>> run_seed_experiment(const experiment_options& o, const compute_provider& compute,
                                                        const std::shared_ptr<const models::bert_model>& check_model,
                                                        const log_fn& log = {});

std::string rows_markdown(const std::vector<experiment_row>& rows, const experiment_options& o,
                          const std::string& compute_note);
status write_rows_csv(const std::vector<experiment_row>& rows, const std::string& path);
/// Per-request records of a run (arrival, dispatch, done, latency, backend) as CSV.
status write_requests_csv(const run_result& r, const std::string& path);

}  // namespace tessera::experiment
