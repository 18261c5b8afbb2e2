// tessera/timing/llm_validation.hpp: the LLM step model against published LLM serving figures.
//
// The figures are timing/anchors/llm_inference.json (one row per published point, with the page, URL
// and the conditions quoted from it). Every row is held out: no constant of the timing model is
// fitted on an LLM figure (the efficiencies and the launch overhead come from the BERT calibration
// rows of bert_inference.json; the LLM figures of the presets are datasheet values or stated
// assumptions). load_llm_anchors refuses a row whose "split" is not "held_out".
//
// Row kinds and how each is modelled:
//   static_throughput   a fixed batch of `batch` sequences, `input` prompt tokens, `output` tokens
//                       each (TensorRT-LLM's gptSessionBenchmark): one prefill step, output-1 decode
//                       steps; figure = batch x output / total time, output tokens/s
//   first_token_ms      one sequence's prompt of `input` tokens: one prefill step, in ms
//   decode_tokens_per_s one sequence decoding at `context` cached tokens, batch `batch`: 1 / step
//                       time, tokens/s per sequence
//   decode_ms_per_token `batch` sequences decoding at `context` cached tokens: one step, in ms
//
// "precision": "fp8" (optional; default fp16) models FP8 weights and KV cache: 1-byte elements and
// twice the FP16 tensor peak (the H100 datasheet's FP8 dense figure), the fitted efficiencies kept.
//
// Usage:
//   auto rep = tessera::timing::validate_llm_timing();
//   std::cout << tessera::timing::llm_validation_markdown(*rep);
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::timing {

struct llm_anchor {
  std::string id;
  std::string device;     ///< as the source names it, with what is derived about it
  std::string system;     ///< the llm_system spec that models it, e.g. "a100-80gb"
  std::string model;      ///< a models::shape_preset name
  std::string kind;       ///< static_throughput, first_token_ms, decode_tokens_per_s, decode_ms_per_token
  std::string precision = "fp16";  ///< fp16 or fp8 (weights and KV cache)
  int64_t batch = 1, input = 0, output = 0, context = 0;
  double value = 0;
  std::string unit;
  std::string split;      ///< always "held_out"
  std::string conditions; ///< quoted from the source
  std::string source_title, source_url, source_date;
};

/// $TESSERA_LLM_ANCHORS if set, else timing/anchors/llm_inference.json compiled in.
std::filesystem::path llm_anchors_path();
result<std::vector<llm_anchor>> parse_llm_anchors(std::string_view json_text, const std::string& origin);
result<std::vector<llm_anchor>> load_llm_anchors(const std::filesystem::path& path = llm_anchors_path());

/// The model's figure for a row, in the row's unit.
result<double> model_llm_anchor(const llm_anchor& a);

struct llm_validation_row {
  llm_anchor anchor;
  double model = 0;
  double error_percent() const { return anchor.value == 0 ? 0 : 100.0 * (model - anchor.value) / anchor.value; }
};

struct llm_validation_report {
  std::vector<llm_validation_row> rows;
  double mean_abs_error_percent = 0, max_abs_error_percent = 0;
};

result<llm_validation_report> validate_llm_timing(const std::vector<llm_anchor>& anchors);
result<llm_validation_report> validate_llm_timing();
/// The device family a row belongs to, for the per-family summaries: "A100", "H100" or "IPU".
std::string llm_anchor_family(const llm_anchor& a);
/// The table (markdown) with a source column, a summary line per family and overall; every row says
/// it is held out. The errors are computed from the anchors' published values, row by row.
std::string llm_validation_markdown(const llm_validation_report& r);

}  // namespace tessera::timing
