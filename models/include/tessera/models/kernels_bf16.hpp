// tessera/models/kernels_bf16.hpp: the BERT kernels of kernels.hpp with bf16 activations and
// weights, fp32 accumulation.
//
// Linear weights are packed once (bf16_weight::pack) into the blocked layout oneDNN's bf16
// matmul reads, so no forward converts or reorders a weight. GEMMs run on oneDNN (brgemm:
// avx512_core_bf16, or AMX where the CPU has it) with fp32 accumulation, bias and activation
// applied in fp32 before the result is rounded to bf16. LayerNorm, softmax and the embedding sum
// read and write bf16 and compute in fp32. Call check_dtype_supported(dtype::bf16) first: on a
// CPU without bf16 these kernels would run oneDNN's slow emulation.
//
//   auto wq = bf16_weight::pack(w.query_w, 768, 768);            // [out, in] fp32 -> bf16
//   linear(x, T, wq, w.query_b, q);                              // q = x Wq^T + b, bf16
//   attention_packed(bf16_strided{q, 2304}, {k, 2304}, {v, 2304}, offsets, n, 12, 64, {ctx, 768});
//   add_layer_norm(ctx_proj, x, T, 768, gamma, beta, 1e-12f, x);
#pragma once

#include <cstdint>
#include <memory>

#include "tessera/models/bf16.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::models {

/// A Linear weight W [out, in] in bf16: packed (owned, in oneDNN's blocked layout for its bf16
/// matmul) or a view of plain [out, in] rows someone else keeps alive (a tile's memory, where a
/// tensor is exactly 2 bytes an element). Immutable and cheap to copy.
class bf16_weight {
 public:
  bf16_weight() = default;
  /// Converts W (fp32 rows of `in` values, row stride ldw, 0 = in) once.
  static bf16_weight pack(const float* W, int64_t out, int64_t in, int64_t ldw = 0);
  /// Plain row-major [out, in] bf16 with row stride ldw (0 = in), not copied. oneDNN's brgemm
  /// reads it as fast as the packed layout on BERT shapes here (it copies blocks of W as it goes).
  static bf16_weight view(const bfloat16* W, int64_t out, int64_t in, int64_t ldw = 0);
  /// Plain row-major [in, out] bf16 (W^T's rows, e.g. attention's V for P V) with row stride ldw
  /// (0 = out), not copied.
  static bf16_weight view_in_major(const bfloat16* W_t, int64_t in, int64_t out, int64_t ldw = 0);
  bool packed() const { return packed_; }
  bool in_major() const { return in_major_; }
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  /// Row stride of a view in elements (in() for view, out() for view_in_major when dense); 0 if packed.
  int64_t ld() const { return ld_; }
  /// Bytes of the packed weight (2 per element plus the layout's padding, if any).
  int64_t bytes() const { return bytes_; }
  const void* data() const { return data_.get(); }
  bool empty() const { return !data_; }

 private:
  std::shared_ptr<const void> data_;
  int64_t in_ = 0, out_ = 0, bytes_ = 0, ld_ = 0;
  bool packed_ = true;
  bool in_major_ = false;
};

/// y[T, W.out()] = act(x[T, W.in()] W^T + bias) with bf16 x and W, fp32 accumulation, bias [out]
/// (fp32) or nullptr. ldx/ldy are row strides (0 = dense). Thread-safe.
void linear(const bfloat16* x, int64_t T, const bf16_weight& W, const float* bias, bfloat16* y,
            activation act = activation::none, int64_t ldx = 0, int64_t ldy = 0);
/// Same with fp32 output (logits).
void linear(const bfloat16* x, int64_t T, const bf16_weight& W, const float* bias, float* y,
            activation act = activation::none, int64_t ldx = 0, int64_t ldy = 0);

/// y = LayerNorm(x) of fp32 rows, written as bf16 (the embeddings' norm).
void layer_norm(const float* x, int64_t T, int64_t n, const float* gamma, const float* beta, float eps,
                bfloat16* y);
/// y = LayerNorm(x + residual) in fp32 over bf16 rows, written as bf16. y may alias x or residual.
void add_layer_norm(const bfloat16* x, const bfloat16* residual, int64_t T, int64_t n, const float* gamma,
                    const float* beta, float eps, bfloat16* y);
/// The same with fp32 x (a tile's reduced partial sums), plus a bias (n values, or null) added to
/// x in the same pass. y may alias residual.
void add_layer_norm(const float* x, const bfloat16* residual, int64_t T, int64_t n, const float* gamma,
                    const float* beta, float eps, bfloat16* y, const float* bias = nullptr);

/// out[T, hidden] (fp32) = word[token] + position[p] + token_type[type] from bf16 tables; as the
/// fp32 embed, p restarts at every seq_offsets boundary (RoBERTa's with position_pad_id >= 0).
void embed(const int32_t* token_ids, const int32_t* token_type_ids, const int32_t* seq_offsets, int num_seqs,
           const bfloat16* word, const bfloat16* position, const bfloat16* token_type, int64_t hidden, float* out,
           int position_pad_id = -1);

using bf16_strided = strided_rows<bfloat16>;
using bf16_strided_out = strided_rows_out<bfloat16>;

/// attention_packed of kernels.hpp over bf16 q, k, v and out: scores and P V accumulate in fp32,
/// the softmax runs in fp32, the context is rounded to bf16 once. Q, K and V are read in place
/// (strided views) wherever a sequence's block, its length rounded up to 32 rows, ends inside the
/// batch, so every row of q, k and v up to seq_offsets[num_seqs] must hold finite values (the
/// rows past a sequence meet only masked scores and zero probabilities); rows past the batch are
/// never read (the last sequences are copied into zero-padded blocks).
void attention_packed(bf16_strided q, bf16_strided k, bf16_strided v, const int32_t* seq_offsets, int num_seqs,
                      int num_heads, int head_dim, bf16_strided_out out);
/// attention_padded of kernels.hpp in bf16 (GPU style: batch x max_len rows, keys at positions
/// >= lengths[b] masked, padded query rows computed too), with the numerics of attention_packed.
void attention_padded(bf16_strided q, bf16_strided k, bf16_strided v, const int32_t* lengths, int batch,
                      int max_len, int num_heads, int head_dim, bf16_strided_out out);

/// logits = classifier(tanh(pooler(hidden[cls_rows]))) with bf16 hidden rows and weights; the
/// pooled vector is rounded to bf16 before the classifier, logits are fp32.
void pooler_classifier(const bfloat16* hidden, int64_t ld, const int32_t* cls_rows, int num_seqs,
                       const bf16_weight& pooler_w, const float* pooler_b, const bf16_weight& classifier_w,
                       const float* classifier_b, float* logits);

/// oneDNN's bf16 matmul alone, C[M, B.out()] = A[M, B.in()] B^T in one call with M fixed (its
/// fastest form; the primitive is made once per (M, shape) and kept): the bench's roofline.
void gemm_bf16_abt(const bfloat16* A, const bf16_weight& B, bfloat16* C, int64_t M);

}  // namespace tessera::models
