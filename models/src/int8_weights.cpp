// Quantizing a BERT model's encoder Linear layers once, calibrating the activation scales.
#include "tessera/models/int8_weights.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "tessera/common/check.hpp"
#include "tessera/common/random.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/model.hpp"
#include "forward_internal.hpp"

namespace tessera::models {

int8_bert_weights int8_bert_weights::convert(const bert_config& c, const bert_weights& w, const int8_ranges& r) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  TESSERA_CHECK(static_cast<int>(r.abs_max.size()) == c.num_layers)
      << "int8 ranges for " << r.abs_max.size() << " layers, the model has " << c.num_layers;
  int8_bert_weights out;
  auto pack = [](const float* W, int64_t rows, int64_t cols) { return int8_weight::pack(W, rows, cols); };
  for (int l = 0; l < c.num_layers; ++l) {
    int8_layer_weights q;
    static_cast<fused_layer<int8_weight>&>(q) = fused_layer<int8_weight>::convert(w.layer(l), h, f, pack);
    for (int s = 0; s < kInt8Sites; ++s) {
      const float m = r.abs_max[static_cast<size_t>(l)][static_cast<size_t>(s)];
      q.x_scale[static_cast<size_t>(s)] = m > 0.0f && std::isfinite(m) ? m / 127.0f : 1.0f;
    }
    out.layers.push_back(std::move(q));
  }
  return out;
}

int64_t int8_bert_weights::bytes() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.bytes();
  return n;
}

packed_batch int8_calibration_batch(const bert_config& c) {
  std::vector<int> lengths = seed_workload(32, 0.4, kInt8CalibrationSeed);
  splitmix64 rng(kInt8CalibrationSeed ^ 0x1D5);
  packed_batch b;
  std::vector<int32_t> ids, types;
  for (int L : lengths) {
    L = std::min(L, c.max_sequence_length());
    ids.assign(static_cast<size_t>(L), 0);
    types.assign(static_cast<size_t>(L), 0);
    // Every id of the vocabulary may appear; every other sequence is a pair (second half type 1).
    const bool pair = c.type_vocab_size > 1 && rng.uniform(0, 1) == 1;
    for (int i = 0; i < L; ++i) {
      ids[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform(0, c.vocab_size - 1));
      if (pair && i >= L / 2) types[static_cast<size_t>(i)] = 1;
    }
    b.append(ids, types);
  }
  return b;
}

result<int8_ranges> calibrate_int8(const bert_model& m, const packed_batch& calibration) {
  if (auto st = validate_batch(m.config, calibration); !st.ok()) return st.with_context("int8 calibration batch");
  if (calibration.num_seqs() == 0) return status::invalid("int8 calibration batch is empty");
  bert_model fp32 = m;
  fp32.compute = dtype::fp32;
  int8_ranges r;
  r.abs_max.assign(static_cast<size_t>(m.config.num_layers), {});
  detail::set_int8_observer(&r);
  (void)reference_encoder(fp32, calibration);
  detail::set_int8_observer(nullptr);
  return r;
}

status set_int8(bert_model& m, const packed_batch& calibration) {
  if (auto st = check_dtype_supported(dtype::int8); !st.ok()) return st;
  auto r = calibrate_int8(m, calibration);
  if (!r) return r.error();
  auto w = std::make_shared<int8_bert_weights>(int8_bert_weights::convert(m.config, m.weights, *r));
  w->calibration_sequences = calibration.num_seqs();
  w->calibration_tokens = static_cast<int>(calibration.num_tokens());
  m.int8 = std::move(w);
  m.compute = dtype::int8;
  return status{};
}

}  // namespace tessera::models
