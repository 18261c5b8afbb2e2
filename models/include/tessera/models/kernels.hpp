// tessera/models/kernels.hpp: BERT compute kernels over raw fp32 pointers.
//
// Kernels know nothing of scheduling or placement: a tile process calls them on its slices, the
// reference forward on whole tensors. Matrices are row-major; `ld*` arguments are row strides in
// elements (pass the column count for dense rows). GEMMs go through oneDNN (matmul primitives with
// a runtime row count, one per weight shape, and dnnl_sgemm for the per-sequence attention products). Every kernel runs with
// the oneDNN/OpenMP thread count set by set_num_threads (tiles use 1).
//
//   set_num_threads(1);
//   linear(x, T, 768, w.query_w, w.query_b, 768, q);          // q = x W^T + b
//   attention_packed({q, 768}, {k, 768}, {v, 768}, offsets, num_seqs, 12, 64, {ctx, 768});
//   add_layer_norm(ctx_proj, x, T, 768, gamma, beta, 1e-12f, x);
//
// Tensor-parallel tiles: a tile holding heads [h0, h1) passes q + h0*head_dim (and k, v, out
// likewise) with the full row stride and num_heads = h1 - h0; any contiguous head range works,
// whatever the tile count.
#pragma once

#include <cstdint>

#include "tessera/models/bf16.hpp"
#include "tessera/models/kernel_params.hpp"  // activation

namespace tessera::models {

/// Sets oneDNN/OpenMP threads (tiles 1, the reference 2), n >= 1. OpenMP keeps this per calling
/// thread: a worker std::thread that runs kernels calls it itself.
void set_num_threads(int n);
int num_threads();

/// y[T, out] = act(x[T, in] W^T + bias), W [out, in] row-major (HF Linear), bias [out] or nullptr.
/// ldx/ldy are row strides of x and y (0 = dense). T may vary from call to call at no cost: the
/// primitive is cached per (in, out, ldx, ldy, bias, act) with T bound at execution. T = 1 (a
/// decoder's batch-1 step) is a plain vectorised row of dot products instead, and 4..48 rows (a
/// batched decode step) a blocked AVX-512 kernel that streams W once (gelu_erf excepted). Thread-safe.
void linear(const float* x, int64_t T, int64_t in, const float* W, const float* bias, int64_t out,
            float* y, activation act = activation::none, int64_t ldx = 0, int64_t ldy = 0);

/// y = LayerNorm(x) over rows of n: (x - mean) / sqrt(var + eps) * gamma + beta. y may equal x.
void layer_norm(const float* x, int64_t T, int64_t n, const float* gamma, const float* beta,
                float eps, float* y);
/// y = LayerNorm(x + residual), the post-LN residual step. y may alias x or residual. With a bias
/// (n values), y = LayerNorm((x + bias) + residual) in the same pass (a tile's reduced partial sums).
void add_layer_norm(const float* x, const float* residual, int64_t T, int64_t n,
                    const float* gamma, const float* beta, float eps, float* y, const float* bias = nullptr);

/// y = x * 0.5 * (1 + erf(x / sqrt(2))), elementwise over n values (y may equal x).
void gelu_erf(const float* x, int64_t n, float* y);
/// y = a + b elementwise (y may alias a or b).
void add(const float* a, const float* b, int64_t n, float* y);
/// In-place softmax over each of `rows` rows of n values (row stride ld, 0 = n).
void softmax(float* x, int64_t rows, int64_t n, int64_t ld = 0);

/// out[T, hidden] = word[token] + position[p] + token_type[type], where p restarts at 0 at every
/// seq_offsets boundary. With position_pad_id >= 0 (RoBERTa's padding_idx) p is HF's
/// create_position_ids_from_input_ids instead: a pad token at p = pad, the k-th non-pad token of
/// its sequence (k from 1) at p = pad + k. No LayerNorm (call layer_norm after).
void embed(const int32_t* token_ids, const int32_t* token_type_ids, const int32_t* seq_offsets,
           int num_seqs, const float* word, const float* position, const float* token_type,
           int64_t hidden, float* out, int position_pad_id = -1);

/// The position row embed reads for each token of one sequence (see embed): len values.
void embed_positions(const int32_t* token_ids, int64_t len, int position_pad_id, int32_t* out);

/// A row-major matrix operand: data and row stride.
/// Rows of T with a row stride `ld` (elements), read-only and writable.
template <class T>
struct strided_rows {
  const T* data;
  int64_t ld;
};
template <class T>
struct strided_rows_out {
  T* data;
  int64_t ld;
};
using strided = strided_rows<float>;
using strided_out = strided_rows_out<float>;

/// Multi-head self-attention over a packed batch: for each sequence s and head h,
/// out_h = softmax(q_h k_h^T / sqrt(head_dim)) v_h, using only rows of s (no cross-sequence
/// attention, no padding). Head h occupies columns [h*head_dim, (h+1)*head_dim) of q/k/v/out.
void attention_packed(strided q, strided k, strided v, const int32_t* seq_offsets, int num_seqs,
                      int num_heads, int head_dim, strided_out out);

/// Padded attention, GPU style: q/k/v/out hold batch x max_len rows (row b*max_len + i); keys at
/// positions >= lengths[b] are masked out (additive -inf mask); padded query rows are computed
/// too (as a GPU does) but never read by valid rows.
void attention_padded(strided q, strided k, strided v, const int32_t* lengths, int batch,
                      int max_len, int num_heads, int head_dim, strided_out out);

/// logits[s, num_labels] = classifier(tanh(pooler(hidden[cls_rows[s]]))) for num_seqs sequences.
/// hidden has row stride ld; cls_rows are row indices of each sequence's first token.
void pooler_classifier(const float* hidden, int64_t ld, const int32_t* cls_rows, int num_seqs,
                       int64_t hidden_size, const float* pooler_w, const float* pooler_b,
                       const float* classifier_w, const float* classifier_b, int num_labels,
                       float* logits);

// ---- decoder kernels (GPT-2, LLaMA) ----

/// y = x / sqrt(mean(x^2) + eps) * gamma over rows of n (RMSNorm). y may equal x.
void rms_norm(const float* x, int64_t T, int64_t n, const float* gamma, float eps, float* y);
/// y = a * b elementwise (y may alias a or b).
void multiply(const float* a, const float* b, int64_t n, float* y);

/// The rotary frequencies inv_freq[i], i < head_dim / 2, of `rope` (Hugging Face's
/// _compute_*_parameters for default, linear, llama3 and yarn), in double.
std::vector<double> rope_inv_freq(const rope_params& rope, int head_dim);
/// Rotary tables for T rows: angle(t, i) = positions[t] * inv_freq[i], computed in double; cos and
/// sin [T, head_dim / 2] as float, multiplied by rope.attention_factor for yarn.
void rotary_tables(const int32_t* positions, int64_t T, int head_dim, const rope_params& rope, float* cos_out,
                   float* sin_out);
/// Rotates each of num_heads heads of T rows in place (row stride ld), HF's rotate_half pairing:
/// x'[i] = x[i] cos - x[i + d/2] sin, x'[i + d/2] = x[i + d/2] cos + x[i] sin.
void apply_rotary(float* x, int64_t T, int num_heads, int head_dim, int64_t ld, const float* cos_t,
                  const float* sin_t);

/// One layer of a paged K/V cache: head h of block b starts at k + b*block_stride + h*head_stride,
/// [block_tokens, head_dim] rows. A bf16 cache sets k16/v16 (same strides, in elements) and leaves
/// k/v null: its rows are widened to fp32 as they are read.
struct paged_kv_view {
  const float* k;
  const float* v;
  int block_tokens;
  int64_t block_stride, head_stride;
  const bfloat16* k16 = nullptr;
  const bfloat16* v16 = nullptr;
};
/// A sequence's query rows in a packed batch: rows [row, row + rows) are positions
/// start_pos .. start_pos + rows - 1; its K/V for positions 0 .. start_pos + rows - 1 are in the
/// cache already (block_table covers them).
struct paged_seq {
  int32_t row, rows, start_pos;
  const int32_t* block_table;
};
/// Causal attention of packed query rows over a paged cache: query head h (columns
/// [h*head_dim, (h+1)*head_dim) of q and out) attends kv head h / (num_heads / num_kv_heads) at
/// positions 0 .. its own, scaled by 1/sqrt(head_dim). A prefill chunk (2+ rows, 16+ rows x the
/// group's query heads) runs as GEMMs per kv head: the group's heads stacked as rows, S = Q K^T over
/// K gathered from the blocks, causal mask, fp32 softmax, O = S V (oneDNN sgemm); decode rows run
/// over the blocks in place, hand-vectorised (AVX-512 with q and the output in registers).
/// A bf16 cache (kv.k16) is read into fp32: scores, softmax and the output stay fp32.
/// sliding_window W > 0 (Mistral) leaves position i the keys at positions i - W + 1 .. i; rows
/// whose context exceeds the window run a plain per-row kernel over those keys only.
void attention_paged(strided q, paged_kv_view kv, const paged_seq* seqs, int num_seqs, int num_heads,
                     int num_kv_heads, int head_dim, strided_out out, int sliding_window = 0);

/// oneDNN's sgemm alone (C = A B^T, A [M,K], B [N,K]), for benches: the roofline to compare with.
void sgemm_abt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K);

}  // namespace tessera::models
