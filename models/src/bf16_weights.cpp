// Converting a BERT model's weights to bf16 once, and set_dtype.
#include "tessera/models/bf16_weights.hpp"

#include <algorithm>

#include "tessera/models/int8_weights.hpp"
#include "tessera/models/model.hpp"

namespace tessera::models {
namespace {

std::vector<bfloat16> convert_table(const float* data, int64_t n) {
  std::vector<bfloat16> out(static_cast<size_t>(n));
  to_bf16(data, n, out.data());
  return out;
}

}  // namespace

bf16_bert_weights bf16_bert_weights::convert(const bert_config& c, const bert_weights& w) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  bf16_bert_weights out;
  const auto& e = w.embeddings();
  out.word = convert_table(e.word, int64_t{c.vocab_size} * h);
  out.position = convert_table(e.position, int64_t{c.max_position_embeddings} * h);
  out.token_type = convert_table(e.token_type, int64_t{c.type_vocab_size} * h);
  auto pack = [](const float* W, int64_t rows, int64_t cols) { return bf16_weight::pack(W, rows, cols); };
  for (int l = 0; l < c.num_layers; ++l) out.layers.push_back(bf16_layer_weights::convert(w.layer(l), h, f, pack));
  if (c.num_labels > 0) {  // an embedding model has no head
    out.pooler = bf16_weight::pack(w.head().pooler_w, h, h);
    out.classifier = bf16_weight::pack(w.head().classifier_w, c.num_labels, h);
  }
  return out;
}

int64_t bf16_bert_weights::bytes() const {
  int64_t n = 2 * static_cast<int64_t>(word.size() + position.size() + token_type.size());
  for (const auto& l : layers) n += l.bytes();
  return n + pooler.bytes() + classifier.bytes();
}

status set_dtype(bert_model& m, dtype d) {
  if (d == dtype::q8_0)
    return status::unsupported("--dtype q8_0 is for decoders (GGUF Q8_0 blocks); the encoder runs fp32, bf16 or int8");
  if (d == dtype::bf16) {
    const status st = check_dtype_supported(d);
    if (st.code() != tessera::errc::ok) return st;
    if (!m.bf16) m.bf16 = std::make_shared<const bf16_bert_weights>(bf16_bert_weights::convert(m.config, m.weights));
  }
  if (d == dtype::int8) {
    if (m.int8) {  // calibrated and quantized before: switch back to it
      if (auto st = check_dtype_supported(d); !st.ok()) return st;
    } else {
      return set_int8(m, int8_calibration_batch(m.config));
    }
  }
  m.compute = d;
  return status{};
}

}  // namespace tessera::models
