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
  std::vector<float> qkv(static_cast<size_t>(3 * h * h));
  for (int l = 0; l < c.num_layers; ++l) {
    const layer_weights& lw = w.layer(l);
    bf16_layer_weights b;
    std::copy_n(lw.query_w, h * h, qkv.begin());
    std::copy_n(lw.key_w, h * h, qkv.begin() + h * h);
    std::copy_n(lw.value_w, h * h, qkv.begin() + 2 * h * h);
    b.qkv = bf16_weight::pack(qkv.data(), 3 * h, h);
    b.qkv_bias.resize(static_cast<size_t>(3 * h));
    std::copy_n(lw.query_b, h, b.qkv_bias.begin());
    std::copy_n(lw.key_b, h, b.qkv_bias.begin() + h);
    std::copy_n(lw.value_b, h, b.qkv_bias.begin() + 2 * h);
    b.attn_out = bf16_weight::pack(lw.attn_out_w, h, h);
    b.ffn_in = bf16_weight::pack(lw.ffn_in_w, f, h);
    b.ffn_out = bf16_weight::pack(lw.ffn_out_w, h, f);
    out.layers.push_back(std::move(b));
  }
  if (c.num_labels > 0) {  // an embedding model has no head
    out.pooler = bf16_weight::pack(w.head().pooler_w, h, h);
    out.classifier = bf16_weight::pack(w.head().classifier_w, c.num_labels, h);
  }
  return out;
}

int64_t bf16_bert_weights::bytes() const {
  int64_t n = 2 * static_cast<int64_t>(word.size() + position.size() + token_type.size());
  for (const auto& l : layers)
    n += l.qkv.bytes() + 4 * static_cast<int64_t>(l.qkv_bias.size()) + l.attn_out.bytes() + l.ffn_in.bytes() +
         l.ffn_out.bytes();
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
