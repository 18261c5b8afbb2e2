// tessera/timing/llm_search.hpp: a design-space search over IPU-like and GPU-like serving systems on
// the modelled clock: the cheapest configuration that meets a latency SLO, the Pareto front of
// system price against tokens/s at the SLO, and each hardware parameter's sensitivity.
//
// IPU-like candidates are built from the ipu-mk2 preset's per-tile figures, scaled:
//   tiles per chip T and SRAM per tile M: flops and SRAM bandwidth scale with T (per-tile rates of
//   the preset), usable SRAM = usable fraction x T x M; chip-to-chip link bandwidth and hop (sync)
//   latency are set directly; chips C with a pipeline of S chips (C / S copies of the weights,
//   llm_system.hpp), or weights in Streaming Memory (tensor parallel over C chips).
//   Price and TDP per chip are inputs for the Mk2 tile and SRAM (ipu_chip_usd, ipu_chip_watts) and
//   scale with the die: x (T / 1472) x (0.5 + 0.5 x M / 624 KiB), an assumption (about half of a
//   Mk2 die is SRAM), stated in docs/timing.md.
// GPU-like candidates: the priced GPU presets (a100-40gb, h100-sxm), one model copy per GPU.
// Serving parameters for both: max running sequences and the token budget of continuous batching.
// Replicas: enough copies of a candidate to deliver target_tokens_per_s (1 if the target is 0);
// price = copies x one copy's price, refused above the budget. Cost per token does not depend on
// the copy count (each copy serves its share of the load at the same rate).
//
// Each candidate is evaluated with throughput_at_slo (requests per run, one seed); the Pareto
// front, the cheapest IPU-like and GPU-like candidates and the sensitivity rows are then re-run on
// `seeds` seeds and reported as median and spread (min..max).
//
// Usage:
//   tessera::timing::llm_search_options o;  o.chips = {16, 32, 64};
//   auto r = tessera::timing::run_llm_search(o, std::cerr);
//   std::cout << tessera::timing::llm_search_markdown(*r, o);
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/llm_schedule.hpp"
#include "tessera/timing/llm_system.hpp"

namespace tessera::timing {

/// One point of the design space.
struct llm_search_point {
  std::string kind;            ///< "ipu" or "gpu"
  std::string gpu;             ///< gpu: the preset
  int64_t chips = 1;           ///< ipu: chips of one copy; gpu: 1
  int64_t pipeline = 0;        ///< ipu, weights in SRAM: chips per pipeline (0: all chips)
  bool streaming = false;      ///< ipu: weights in Streaming Memory
  int64_t tiles = 1472;        ///< ipu: tiles per chip
  int64_t sram_kib = 624;      ///< ipu: SRAM per tile, KiB
  double link_gbps = 320;      ///< ipu: chip-to-chip bandwidth, GB/s
  double hop_us = 2;           ///< ipu: chip-to-chip hop / sync latency, us
  int64_t max_seqs = 256, token_budget = 2048;
  std::string label() const;   ///< one line naming every parameter
};

struct llm_search_options {
  std::string model = "llama-2-7b";
  std::string workload = "sharegpt";   ///< the built-in ShareGPT-like mix (the only built-in)
  llm_slo slo;
  double budget_usd = 0;               ///< 0: none
  double target_tokens_per_s = 0;      ///< 0: one copy
  cost_assumptions cost;
  double ipu_chip_usd = 10000;         ///< per Mk2-sized chip (no public price; an input)
  double ipu_chip_watts = 185;         ///< per Mk2-sized chip (ipu-mk2 preset)
  std::vector<int64_t> chips = {16, 32, 64}, pipelines = {0}, tiles = {1472, 2944}, sram_kib = {624, 1248};
  std::vector<double> link_gbps = {320}, hop_us = {2};
  std::vector<std::string> weights = {"sram"};
  std::vector<std::string> gpus = {"a100-40gb", "h100-sxm"};
  std::vector<int64_t> max_seqs = {64, 256}, token_budget = {2048};
  int64_t requests = 200;              ///< per simulated run
  int64_t seeds = 5;                   ///< for the reported rows (>= 5 for the docs' figures)
  uint64_t seed = 42;
  bool sensitivity = true;
  std::string csv_path;                ///< every evaluated point (empty: not written)
};

/// One evaluated point (one seed) or its re-run over seeds.
struct llm_search_eval {
  llm_search_point point;
  bool feasible = false;       ///< builds (weights fit) and meets the SLO at some load
  std::string why;             ///< when not feasible
  double tokens_per_s = 0;     ///< one copy, at the SLO
  double ttft_p99_s = 0, tpot_p50_s = 0, tpot_p99_s = 0;
  double copy_price_usd = 0, copy_watts = 0;
  int64_t copies = 1;
  double price_usd = 0;        ///< copies x copy price
  double usd_per_mtok = 0;
  bool within_budget = true;
  bool pareto = false;
  // Over seeds (median, min, max) when re-run; else all equal to the one-seed figures.
  double tokens_med = 0, tokens_lo = 0, tokens_hi = 0;
  double usd_med = 0, usd_lo = 0, usd_hi = 0;
};

struct llm_sensitivity_row {
  std::string parameter;       ///< e.g. "tiles per chip"
  double factor = 1;           ///< 2 or 0.5
  std::string value;           ///< the changed value
  double usd_per_mtok_med = 0, usd_lo = 0, usd_hi = 0;
  double change_percent = 0;   ///< vs the base point's median (nan when the changed point is infeasible)
  std::string note;
};

struct llm_search_result {
  std::vector<llm_search_eval> evals;      ///< every grid point, one seed
  std::vector<size_t> pareto;              ///< indices into evals, by price
  long best_ipu = -1, best_gpu = -1;       ///< indices into evals (cheapest $/Mtok, feasible, in budget)
  llm_search_eval ipu_seeds, gpu_seeds;    ///< the two best re-run over seeds
  std::vector<llm_sensitivity_row> sensitivity;  ///< around the best IPU-like point
  /// Per-chip IPU price at which the best IPU-like point costs 20% / 30% less per token than the best
  /// GPU-like one (medians over seeds, and the spread from the seeds' extremes).
  double ipu_price_20_med = 0, ipu_price_20_lo = 0, ipu_price_20_hi = 0;
  double ipu_price_30_med = 0, ipu_price_30_lo = 0, ipu_price_30_hi = 0;
  int64_t evaluated = 0;                   ///< grid points evaluated (one seed each)
  int64_t simulations = 0;                 ///< throughput_at_slo calls in all
  double grid_seconds = 0, total_seconds = 0;
};

/// The grid's points, in evaluation order (IPU-like first), after refusing bad values by name.
result<std::vector<llm_search_point>> llm_search_grid(const llm_search_options& o);
/// The system a point describes (IPU-like: scaled from ipu-mk2, see the header comment).
result<llm_system> make_search_system(const llm_search_point& p, const decoder_dims& d);
/// One point on one seed: throughput at the SLO, price, cost per million tokens.
llm_search_eval evaluate_search_point(const llm_search_point& p, const decoder_dims& d, const llm_search_options& o,
                                      uint64_t seed);
/// The search; `log` gets progress lines.
result<llm_search_result> run_llm_search(const llm_search_options& o, std::ostream& log);
/// Markdown: the two cheapest systems, the IPU price for the seed's saving, the Pareto front, the
/// sensitivity table and the search's speed.
std::string llm_search_markdown(const llm_search_result& r, const llm_search_options& o);

}  // namespace tessera::timing
