// tessera/models/op_profile.hpp: per-op timers of the BERT forward (the bench's per-op table).
//
//   forward_profile p;
//   set_forward_profile(&p);             // this thread's forwards add to p
//   reference_forward(model, batch);
//   set_forward_profile(nullptr);
//   p.secs[int(forward_op::attention)]   // wall seconds in attention, summed over layers
//
// Off (the default) it costs one thread_local load per op. The ops are the forward's own calls,
// timed on the calling thread around each (each op is internally parallel), so the ops' seconds
// add up to the forward's wall time less what lies between them. Attention's parts are timed
// inside its parallel loop: thread-seconds summed over the threads, for the split of attention's
// wall time between them.
#pragma once

#include <array>
#include <cstdint>

namespace tessera::models {

enum class forward_op : int {
  embed,          ///< embeddings + their LayerNorm (bf16: + the conversion to bf16)
  qkv_gemm,       ///< Q, K, V projections (bias in the GEMM)
  attention,      ///< per (sequence, head): scores, scale, softmax, P V
  attn_out_gemm,  ///< attention output projection (bias in the GEMM)
  attn_add_norm,  ///< residual add + LayerNorm after attention
  ffn_in_gemm,    ///< FFN in (bias and GELU in the GEMM's epilogue)
  ffn_out_gemm,   ///< FFN out (bias in the GEMM)
  ffn_add_norm,   ///< residual add + LayerNorm after the FFN
  head,           ///< pooler + classifier on the [CLS] rows
  count
};

enum class attention_part : int {
  copy_in,       ///< Q, K, V^T of one (sequence, head) into blocks (bf16: padded to 32 rows)
  scores_gemm,   ///< S = Q K^T
  softmax,       ///< scale, mask, softmax (bf16: + P to bf16)
  context_gemm,  ///< O = P V
  copy_out,      ///< O into the context rows (bf16: + the conversion)
  count
};

inline constexpr int kForwardOps = static_cast<int>(forward_op::count);
inline constexpr int kAttentionParts = static_cast<int>(attention_part::count);

struct forward_profile {
  std::array<double, kForwardOps> secs{};    ///< wall seconds per op
  std::array<double, kForwardOps> flops{};   ///< floating-point operations per op (GEMMs, attention)
  std::array<double, kAttentionParts> attention_thread_secs{};  ///< thread-seconds per part
  double forward_secs = 0;                   ///< wall seconds of the whole forwards
  int64_t forwards = 0;
};

const char* op_name(forward_op op);
const char* part_name(attention_part part);

/// Profiles the forwards this thread runs into *p (added to) until set to nullptr.
void set_forward_profile(forward_profile* p);
/// The calling thread's profile, or nullptr.
forward_profile* current_forward_profile();

}  // namespace tessera::models
