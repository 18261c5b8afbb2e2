// tessera/timing/llm_experiment.hpp: the seed's LLM claim on the modelled clock: llama-2-7b served
// on modelled IPU systems and on GPUs, ShareGPT-like chat traffic, continuous vs static batching,
// throughput at an SLO, cost and energy per million tokens.
//
// For every system x batching policy: the highest Poisson rate meeting the SLO (p99 TTFT and p99
// TPOT, throughput_at_slo) and its output tokens/s; then a load sweep at fixed fractions of the
// continuous SLO rate (latency curves); then cost and energy per million tokens at the SLO rate.
// IPUs have no public price: with ipu_price_usd = 0 the report gives, per IPU system, the price per
// IPU at which its cost per million tokens would equal the A100's, and would be 25% below it.
//
// Writes <out_dir>/llm-experiment.csv (one row per system x batching x load, the SLO rows marked),
// <out_dir>/llm-experiment.md (the tables, the assumptions and the command) and returns the markdown.
// The continuous rows are then re-run on `seeds` seeds: the markdown's "Over seeds" table and
// <out_dir>/llm-experiment-seeds.csv give the median and the spread (min..max) of tokens/s at the SLO,
// $/Mtok and the IPU break-even prices.
//
// Usage:
//   tessera::timing::llm_experiment_options o;  o.out_dir = "results";
//   auto md = tessera::timing::run_llm_experiment(o, std::cerr);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/llm_schedule.hpp"
#include "tessera/timing/llm_system.hpp"

namespace tessera::timing {

struct llm_experiment_options {
  std::string out_dir = "results";
  std::string model = "llama-2-7b";
  /// System specs; the first GPU with a price is the reference the cost comparison is made against.
  std::vector<std::string> systems = {"a100-40gb", "h100-sxm", "ipu-mk2:chips=64", "ipu-mk2:chips=64:pipeline=32",
                                      "ipu-bow:chips=64", "ipu-mk2:chips=4:weights=streaming"};
  std::vector<double> load_fractions = {0.25, 0.5, 0.75, 1.0, 1.25};
  llm_slo slo;
  cost_assumptions cost;
  double ipu_price_usd = 0;   ///< per IPU; 0: none published, report break-even prices
  chat_traffic traffic;
  schedule_options continuous;  ///< policy forced to continuous
  schedule_options static_batch{batching::static_batch};
  int64_t requests = 1000;
  bool quick = false;          ///< 300 requests per run
  uint64_t seed = 42;
  int64_t seeds = 5;           ///< continuous rows re-run on seeds seed..seed+seeds-1: median and spread
  std::string command;         ///< recorded in the markdown
};

/// One system x batching result at its SLO rate.
struct llm_experiment_row {
  std::string system, batching;
  int64_t chips = 0;
  double slo_rate_per_s = 0, slo_tokens_per_s = 0, max_tokens_per_s = 0;
  schedule_report at_slo;
  double usd_per_mtok = -1;    ///< -1: no price
  double kwh_per_mtok = 0;
  double break_even_parity_usd = 0, break_even_25pct_usd = 0;  ///< per chip, IPU rows
};

/// Runs the experiment (see the header comment); `log` gets one progress line per system.
result<std::string> run_llm_experiment(const llm_experiment_options& o, std::ostream& log);

}  // namespace tessera::timing
