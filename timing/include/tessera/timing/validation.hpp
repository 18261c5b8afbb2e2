// tessera/timing/validation.hpp: the timing model against public figures, as one table.
//
// Rows: (1) IPU preset peaks (FLOP/s = tiles x flops/cycle x clock, memory = tiles x bytes/tile,
// exchange = tiles x bytes/cycle x clock) against the vendors' published peaks; (2) a100-40gb
// on BERT-base fp16 against NVIDIA's TensorRT figures; (3) ipu-c600 on BERT-base fp16, 40 packed
// sequences of up to 384 tokens, against ByteMLPerf's IPU report (3,134 sequences/s). docs/timing.md prints the same table and explains
// each reference. The unit tests assert every row is within its tolerance.
//
// Usage:
//   auto rows = tessera::timing::validation_table();        // loads presets from presets_dir()
//   for (const auto& r : *rows) std::cout << r.name << " " << r.error_percent() << "%\n";
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"

namespace tessera::timing {

/// One comparison of the model with a public figure.
struct validation_row {
  std::string name;       ///< e.g. "a100-40gb BERT-base seq 128 batch 32 fp16"
  std::string unit;       ///< e.g. "ms"
  double model = 0;       ///< what the timing model says
  double reference = 0;   ///< the public figure
  double tolerance_percent = 0;
  std::string source;     ///< where the reference comes from

  double error_percent() const { return reference == 0 ? 0 : 100.0 * (model - reference) / reference; }
  bool within_tolerance() const;
};

/// The 40 sequence lengths the ipu-c600 row uses: mid-quantiles of ByteMLPerf's synthetic
/// SQuAD-like length distribution (int(N(172, 172)) clipped to [1, 384]); mean 177.
std::vector<int64_t> byte_mlperf_ipu_seq_lens();

/// Computes every row (loads the presets it needs by name).
result<std::vector<validation_row>> validation_table();

/// The table as GitHub markdown (the form docs/timing.md shows).
std::string validation_markdown(const std::vector<validation_row>& rows);

}  // namespace tessera::timing
