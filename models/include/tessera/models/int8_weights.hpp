// tessera/models/int8_weights.hpp: a BERT model's encoder Linear layers quantized once for the
// int8 forward, with static activation scales calibrated on a seeded set.
//
// Every encoder Linear (Q/K/V fused into one [3 * hidden, hidden] weight, attention output, FFN
// in and out) is int8 with per-output-channel scales (kernels_int8.hpp). Each of their four inputs
// per layer gets one static per-tensor scale, max |activation| / 127 over a calibration run of the
// fp32 forward (min-max calibration): the input of Q/K/V (the previous LayerNorm's output), the
// attention context, the FFN input (the attention LayerNorm's output) and the GELU output (written
// by the FFN-in GEMM straight as int8). Values beyond the calibrated range saturate.
// Embeddings, attention (softmax included), LayerNorm, the residual stream, the pooler and the
// classifier stay fp32.
//
// The calibration set is int8_calibration_batch(config): 32 synthetic sequences, lengths
// seed_workload(32, 0.4, kInt8CalibrationSeed) capped at max_sequence_length(), ids uniform over
// the whole vocabulary and half of them sentence pairs (type 1 from the middle), all drawn from
// splitmix64(kInt8CalibrationSeed ^ 0x1D5). The benches and tests evaluate on other inputs
// (synthetic_batch: the seed workload's seed 0, ids seed 1 or 3, ids from [1000, vocab); tiny-odd's
// golden batches): calibration never sees the evaluation set.
//
//   auto m = load_model("bert-base");
//   if (auto st = set_dtype(*m, dtype::int8); !st.ok()) ...   // checks the CPU, calibrates, quantizes
//   auto logits = reference_forward(*m, batch);                // the int8 forward
//   // or calibrate on your own text: set_int8(*m, my_batch)
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/models/config.hpp"
#include "tessera/models/fused_layer.hpp"
#include "tessera/models/kernels_int8.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::models {

struct bert_model;

/// The seed of the default calibration set (lengths and ids).
inline constexpr uint64_t kInt8CalibrationSeed = 0x5EED1A7E;

/// Where a layer's GEMM inputs are observed, in order.
enum class int8_site : uint8_t { qkv_in, context, ffn_in, ffn_act };
inline constexpr int kInt8Sites = 4;

/// max |activation| per layer and site, from a calibration run.
struct int8_ranges {
  std::vector<std::array<float, kInt8Sites>> abs_max;  ///< [layer][site]
};

struct int8_layer_weights : fused_layer<int8_weight> {
  /// Static per-tensor input scales (max |x| / 127), indexed by int8_site.
  std::array<float, kInt8Sites> x_scale{};
};

struct int8_bert_weights {
  std::vector<int8_layer_weights> layers;
  int calibration_sequences = 0, calibration_tokens = 0;

  /// Quantizes every encoder Linear of `w` and sets the input scales from `ranges`.
  static int8_bert_weights convert(const bert_config& cfg, const bert_weights& w, const int8_ranges& ranges);
  /// Bytes of the int8 matrices, their scales and the fused biases.
  int64_t bytes() const;
};

/// The default calibration set (see the header comment).
packed_batch int8_calibration_batch(const bert_config& cfg);

/// Runs the fp32 forward of `m` (whatever its dtype) over `calibration` and records the ranges.
/// The batch must pass validate_batch (invalid_argument otherwise).
result<int8_ranges> calibrate_int8(const bert_model& m, const packed_batch& calibration);

/// set_dtype(m, dtype::int8) with your own calibration batch: checks the CPU, calibrates,
/// quantizes (replacing an earlier int8 copy) and sets m.compute.
status set_int8(bert_model& m, const packed_batch& calibration);

}  // namespace tessera::models
