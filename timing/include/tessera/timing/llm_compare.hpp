// tessera/timing/llm_compare.hpp: one model on several systems at the same SLO, side by side, with
// the held-out error of the multi-GPU rows (tessera-llm-timing compare). The issue-28 question: a 70B
// model on 8 tensor-parallel GPUs against a 64-IPU pod.
//
// For every system: its modelled layout (replicas, KV pool), the decode step of one sequence (the
// floor of TPOT), the highest Poisson rate whose p99 TTFT and p99 TPOT meet the SLO under continuous
// batching (throughput_at_slo) and its output tokens/s (per chip too), cost and energy per million
// tokens at that rate, and, for an IPU system, the price per IPU at which it would cost what the
// first priced GPU system costs per token. A system that cannot be built (the model does not fit)
// is a row saying why. Then the held-out multi-GPU anchors (llm_anchor_family "... multi-GPU"), each
// with its source, prediction and error, and their mean |error|.
//
// Usage:
//   tessera::timing::llm_compare_options o;          // llama-2-70b, h100-sxm:tp=8 vs ipu-mk2:chips=64...
//   auto r = tessera::timing::run_llm_compare(o);
//   std::cout << tessera::timing::llm_compare_markdown(*r, o);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/llm_schedule.hpp"
#include "tessera/timing/llm_system.hpp"
#include "tessera/timing/llm_validation.hpp"

namespace tessera::timing {

struct llm_compare_options {
  std::string model = "llama-2-70b";  ///< a shape preset or a config.json (resolve_decoder_shape)
  std::vector<std::string> systems = {"h100-sxm:tp=8", "a100-80gb:tp=8", "ipu-mk2:chips=64",
                                      "ipu-mk2:chips=64:weights=streaming", "ipu-mk2:chips=256"};
  llm_slo slo;
  cost_assumptions cost;
  chat_traffic traffic;
  schedule_options continuous;  ///< policy forced to continuous
  int64_t requests = 400;       ///< per simulated run of the bisection
  uint64_t seed = 42;
  double ipu_price_usd = 0;     ///< per IPU; 0: none published (break-even price reported)
  bool held_out = true;         ///< append the multi-GPU held-out rows
};

struct llm_compare_row {
  std::string system;
  std::string refused;          ///< why the system cannot serve the model (empty: it can)
  std::string description;
  std::string kind;
  int64_t chips = 0, replicas = 0;
  double kv_capacity_gb = 0;
  double single_decode_ms = 0;  ///< one sequence, 512 cached tokens: the TPOT floor
  slo_point at_slo;
  double tokens_per_s = 0;      ///< at the SLO rate (0: misses the SLO at any load)
  double usd_per_mtok = -1;     ///< -1: no price
  double kwh_per_mtok = 0;
  double ipu_parity_usd = 0;    ///< IPU rows: price per IPU for the reference GPU's $/Mtok (0: no reference)
};

struct llm_compare_report {
  std::string model;            ///< the shape's name
  double parameters = 0;
  std::vector<llm_compare_row> rows;
  std::string reference;        ///< the GPU system the IPU break-even prices are against
  std::optional<llm_validation_report> multi_gpu;  ///< the held-out multi-GPU rows
};

/// Runs the comparison (see the header comment). Errors: an unknown model or system preset, bad
/// options; a model that does not fit a system is a refused row, not an error.
result<llm_compare_report> run_llm_compare(const llm_compare_options& o);
std::string llm_compare_markdown(const llm_compare_report& r, const llm_compare_options& o);

}  // namespace tessera::timing
