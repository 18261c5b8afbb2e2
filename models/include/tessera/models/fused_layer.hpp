// tessera/models/fused_layer.hpp: one encoder layer's four Linear layers in a converted weight
// type (bf16_weight, int8_weight), Q, K and V fused into one [3 * hidden, hidden] weight (one GEMM
// instead of three). The bf16 and int8 encoders' layer weights are this with their weight type.
//
//   auto l = fused_layer<bf16_weight>::convert(w.layer(0), h, f, [](const float* W, int64_t out,
//                                               int64_t in) { return bf16_weight::pack(W, out, in); });
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tessera/models/weights.hpp"

namespace tessera::models {

template <class Weight>
struct fused_layer {
  Weight qkv;                   ///< [3 * hidden, hidden]: query, key, value rows
  std::vector<float> qkv_bias;  ///< [3 * hidden]
  Weight attn_out, ffn_in, ffn_out;

  /// The layer's weights converted by pack(W, out, in) (fp32 [out, in] rows -> Weight); h the
  /// hidden size, f the intermediate size.
  template <class Pack>
  static fused_layer convert(const layer_weights& lw, int64_t h, int64_t f, Pack&& pack) {
    fused_layer out;
    std::vector<float> qkv(static_cast<size_t>(3 * h * h));
    std::copy_n(lw.query_w, h * h, qkv.begin());
    std::copy_n(lw.key_w, h * h, qkv.begin() + h * h);
    std::copy_n(lw.value_w, h * h, qkv.begin() + 2 * h * h);
    out.qkv = pack(qkv.data(), 3 * h, h);
    out.qkv_bias.resize(static_cast<size_t>(3 * h));
    std::copy_n(lw.query_b, h, out.qkv_bias.begin());
    std::copy_n(lw.key_b, h, out.qkv_bias.begin() + h);
    std::copy_n(lw.value_b, h, out.qkv_bias.begin() + 2 * h);
    out.attn_out = pack(lw.attn_out_w, h, h);
    out.ffn_in = pack(lw.ffn_in_w, f, h);
    out.ffn_out = pack(lw.ffn_out_w, h, f);
    return out;
  }
  /// Bytes of the four weights and the fused bias.
  int64_t bytes() const {
    return qkv.bytes() + 4 * static_cast<int64_t>(qkv_bias.size()) + attn_out.bytes() + ffn_in.bytes() + ffn_out.bytes();
  }
};

}  // namespace tessera::models
