// tessera/timing/validation.hpp: the timing model against public figures, split into the rows its
// constants were fitted on (calibration) and the rows no fit has seen (held out).
//
// Every reference number comes from timing/anchors/bert_inference.json (anchors.hpp), which names
// the page each was quoted from. validate_timing_model():
//   1. fits the a100-40gb constants (tensor_core_efficiency, launch_overhead_s) and the ipu-c600
//      amp_efficiency on the calibration rows only, and reports them beside the presets' values;
//   2. models every row with the presets as shipped (which hold the fitted values, rounded) and
//      puts calibration rows in one table and held-out rows in another;
//   3. refits the A100 constants leaving out each calibration row in turn (leave-one-out);
//   4. adds the preset checks (derived peaks vs published peaks), which are consistency checks of
//      the preset files, not validation of the model.
// docs/timing.md prints the same tables and explains each constant and row.
//
// Usage:
//   auto rep = tessera::timing::validate_timing_model();
//   std::cout << tessera::timing::validation_report_markdown(*rep);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/anchors.hpp"

namespace tessera::timing {

/// One comparison of the model with a public figure.
struct validation_row {
  std::string name;       ///< e.g. "a100-40gb bert-base seq 128 batch 32 fp16" or the anchor id
  std::string unit;       ///< e.g. "ms"
  double model = 0;       ///< what the timing model says
  double reference = 0;   ///< the public figure
  double tolerance_percent = 0;  ///< the target: 15 (A100), 25 (IPU), 1-3 (preset checks)
  std::string source;     ///< where the reference comes from

  double error_percent() const { return reference == 0 ? 0 : 100.0 * (model - reference) / reference; }
  bool within_tolerance() const;
};

/// One leave-one-out refit of the A100 constants.
struct loo_row {
  std::string left_out;           ///< the calibration row left out
  gpu_fit fit;                    ///< constants fitted on the other calibration rows
  double left_out_error_percent;  ///< the refit's error on the row it did not see
  double held_out_max_abs_error_percent;  ///< the refit's worst error over the held-out rows
};

struct validation_report {
  gpu_fit a100_fit;                 ///< fitted on the a100-40gb calibration rows
  double a100_preset_efficiency = 0, a100_preset_launch_overhead_s = 0;  ///< what a100-40gb.json holds
  double ipu_amp_fit = 0;           ///< fitted on the ipu-c600 calibration row
  double ipu_preset_amp_efficiency = 0;
  std::vector<validation_row> calibration;  ///< rows the constants were fitted on
  std::vector<validation_row> held_out;     ///< rows no fit read
  std::vector<loo_row> leave_one_out;       ///< A100 only
  std::vector<validation_row> preset_checks;
};

/// The 40 sequence lengths of the ipu-c600 calibration row: mid-quantiles of ByteMLPerf's synthetic
/// SQuAD-like length distribution (int(N(172, 172)) clipped to [1, 384]); mean 177.
std::vector<int64_t> byte_mlperf_ipu_seq_lens();

/// Runs the whole validation (loads the anchors and the presets they name).
result<validation_report> validate_timing_model(const std::vector<anchor_row>& anchors);
result<validation_report> validate_timing_model();

/// One table as GitHub markdown.
std::string validation_markdown(const std::vector<validation_row>& rows);
/// The whole report: fitted constants, calibration table, held-out table (with a summary of which
/// rows miss their target), leave-one-out table, preset checks; each under a heading saying which it is.
std::string validation_report_markdown(const validation_report& r);

}  // namespace tessera::timing
