// tessera/models/bf16_weights.hpp: a BERT model's weights converted once for the bf16 forward.
//
// Every matrix (Linear weights, embedding tables) is bf16: Linear weights packed for oneDNN's bf16
// matmul, Q, K and V fused into one [3 * hidden, hidden] weight (one GEMM instead of three).
// Biases and LayerNorm gains stay fp32 (vectors, under 0.1% of the bytes) and are read from the
// fp32 weights, which the model keeps.
//
//   auto m = load_model("bert-base");
//   if (auto st = set_dtype(*m, dtype::bf16); st.code() != tessera::errc::ok) ...   // converts once, checks the CPU
//   auto logits = reference_forward(*m, batch);                   // now the bf16 forward
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/models/config.hpp"
#include "tessera/models/fused_layer.hpp"
#include "tessera/models/kernels_bf16.hpp"
#include "tessera/models/weights.hpp"

namespace tessera::models {

using bf16_layer_weights = fused_layer<bf16_weight>;

struct bf16_bert_weights {
  std::vector<bfloat16> word, position, token_type;  ///< embedding tables, row-major
  std::vector<bf16_layer_weights> layers;
  bf16_weight pooler, classifier;

  /// Converts every matrix of `w` (fp32) to bf16.
  static bf16_bert_weights convert(const bert_config& cfg, const bert_weights& w);
  /// Bytes of the bf16 matrices and fused biases (the fp32 vectors read from the model excluded).
  int64_t bytes() const;
};

}  // namespace tessera::models
