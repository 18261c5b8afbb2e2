// tessera/timing/anchors.hpp: the public figures the timing model is calibrated on and validated
// against (timing/anchors/bert_inference.json), the calibration/held-out split rule, and the fits.
//
// The split is a rule, not a choice per row: an a100-40gb row is calibration when seq == 128 and
// its batch is 1 or the largest batch of its model at seq 128; the ipu-c600 row of the ByteMLPerf
// fp16 BS 40 report is the IPU calibration row; every other row is held out. load_anchors checks
// that the file's "split" column says what the rule says, so the two cannot drift apart.
//
// The fits read calibration rows only (they take the whole list and skip held-out rows, so a test
// can change a held-out value and see the fit unchanged):
//   * fit_gpu_constants: calibration.tensor_core_efficiency and launch_overhead_s of a GPU preset,
//     least squares on the relative error of the calibration rows' batch latencies;
//   * fit_ipu_amp_efficiency: calibration.amp_efficiency of an IPU preset, the value that makes the
//     calibration row's modelled throughput equal to the published one.
//
// Usage:
//   auto rows = tessera::timing::load_anchors();                 // anchors_path()
//   auto a100 = *tessera::timing::load_gpu_preset("a100-40gb");
//   auto fit = tessera::timing::fit_gpu_constants(a100, *rows);   // {0.66.., 5.4e-6}
//   double ms = *tessera::timing::model_anchor(a100, (*rows)[3]); // in the row's unit
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/bert_ops.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::timing {

/// One published point, as the anchors file quotes it.
struct anchor_row {
  std::string id;
  std::string device;     ///< e.g. "A100 40GB SXM4"
  std::string preset;     ///< the preset that models it, e.g. "a100-40gb"
  std::string model;      ///< a models::shape_preset name
  std::string precision;  ///< "fp16" or "fp32"
  int64_t batch = 0;
  int64_t seq = 0;
  std::string lengths;    ///< "uniform" or "bytemlperf_packed"
  std::string metric;     ///< "batch_latency_ms" or "throughput_seq_per_s"
  double value = 0;       ///< the published figure, in the metric's unit
  std::string split;      ///< "calibration" or "held_out"
  std::string source_title, source_url, source_date;

  bool calibration() const { return split == "calibration"; }
  std::string unit() const { return metric == "batch_latency_ms" ? "ms" : "seq/s"; }
};

/// The anchors file: $TESSERA_ANCHORS if set, else timing/anchors/bert_inference.json compiled in.
std::filesystem::path anchors_path();

/// Parses anchors JSON text (`origin` names it in errors). Every row needs every field; a row's
/// "split" must be what split_rule says, else invalid_argument naming the row.
result<std::vector<anchor_row>> parse_anchors(std::string_view json_text, const std::string& origin);
/// Reads and parses a file (default: anchors_path()).
result<std::vector<anchor_row>> load_anchors(const std::filesystem::path& path = anchors_path());

/// "calibration" or "held_out" for `row` by the fixed rule (see the header comment); `all` is the
/// whole list (the rule needs each model's largest batch at seq 128).
std::string split_rule(const anchor_row& row, const std::vector<anchor_row>& all);

/// The ByteMLPerf IPU pack benchmark's lengths: the n mid-quantiles of int(N(172, 172)) clipped
/// to [1, max_len] (n = 40 gives the 40 lengths of byte_mlperf_ipu_seq_lens).
std::vector<int64_t> bytemlperf_mid_quantile_lengths(int64_t n, int64_t max_len = 384);

/// The batch a row describes (uniform lengths, or packed ByteMLPerf lengths).
result<bert_batch> anchor_batch(const anchor_row& row);

/// The model's figure for a row, in the row's unit (batch latency in ms, or sequences per second).
result<double> model_anchor(const gpu_preset& p, const anchor_row& row);
result<double> model_anchor(const ipu_preset& p, const anchor_row& row);

/// Constants fitted on a GPU preset's calibration rows.
struct gpu_fit {
  double tensor_core_efficiency = 0;
  double launch_overhead_s = 0;
  int64_t rows_used = 0;  ///< calibration rows of this preset that the fit read
};

/// Fits tensor_core_efficiency (searched over [0.2, 1]) and launch_overhead_s (closed form for each
/// efficiency, >= 0) to minimise the sum of squared relative errors over `rows` that are calibration
/// rows of preset p.name. `skip_id`, if given, leaves that row out (leave-one-out).
result<gpu_fit> fit_gpu_constants(const gpu_preset& p, const std::vector<anchor_row>& rows,
                                  std::string_view skip_id = {});
/// p with the fitted constants in place.
gpu_preset with_fit(gpu_preset p, const gpu_fit& f);

/// Fits amp_efficiency (bisection over [0.1, 1]) so the calibration row of preset p.name is exact.
/// invalid_argument unless exactly one calibration row names the preset.
result<double> fit_ipu_amp_efficiency(const ipu_preset& p, const std::vector<anchor_row>& rows);

}  // namespace tessera::timing
