// tessera/models/kernels_q8.hpp: Linear layers on weights kept as GGUF Q8_0 blocks (weight-only
// int8): per block of 32 consecutive weights along `in`, 32 int8 values q and one scale d (an fp16
// value, held here as the fp32 it widens to exactly). A weight's value is d * q, computed in fp32
// exactly as a GGUF reader dequantises it.
//
// The kernel dequantises each block inside the GEMM (int8 -> fp32, times d: the same fp32 weight a
// dequantised load holds, bit for bit) and runs fp32 FMAs with fp32 activations: no activation
// quantisation, so a Q8_0 linear equals the fp32 linear on the dequantised matrix up to the order of
// the fp32 sums (bit for bit for 4..48 rows, which share fp32's blocked kernel). The weight streams
// from memory at 1.125 bytes a value instead of 4 (fp32) or 2 (bf16): decode, memory-bound, gains.
//   - 1 row (a batch-1 decode step): blocks dequantised in registers, 4 rows of W at a time;
//   - 2..48 rows: 4 rows of W dequantised once into an L1/L2 buffer, then fp32's blocked kernel;
//   - more rows (prefill): panels of W dequantised into a buffer, then oneDNN's fp32 matmul.
//
//   auto w = q8_0_weight::quantize(W, 2048, 2048);          // or from a GGUF file's blocks
//   linear(x, T, w, bias, y);                                // y = x (d q)^T + bias
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/models/kernel_params.hpp"  // activation

namespace tessera::models {

/// Values per Q8_0 block, and the bytes of one block in a GGUF file (fp16 scale + 32 int8).
inline constexpr int64_t q8_0_block_values = 32, q8_0_block_bytes = 34;

/// GGUF's Q8_0 quantisation of n values (n a multiple of 32), block by block: d = max |x| / 127 in
/// fp32, q = round(x * (1 / d)) (halves away from zero; 0 when d is 0), the scale stored as fp16(d)
/// rounded to nearest even. scales: n / 32 fp16 bit patterns; q: n values.
void quantize_q8_0(const float* x, int64_t n, uint16_t* scales, int8_t* q);

/// A Linear weight W [out, in] (in a multiple of 32) as Q8_0 blocks along `in`: int8 values
/// [out, in] row-major and fp32 scales [out, in / 32]. Immutable and cheap to copy (shared).
class q8_0_weight {
 public:
  q8_0_weight() = default;
  /// quantize_q8_0 of every row of W (fp32, row stride ldw, 0 = in).
  static q8_0_weight quantize(const float* W, int64_t out, int64_t in, int64_t ldw = 0);
  /// Rows given as GGUF Q8_0 bytes: rows[r] points at row r's in / 32 blocks of 34 bytes (scale
  /// first, unaligned); the bytes are copied.
  static q8_0_weight from_blocks(const std::vector<const uint8_t*>& rows, int64_t in);
  /// The rows of `parts` (equal in()) stacked in order: Q, K and V as one matrix.
  static q8_0_weight stack(const std::vector<const q8_0_weight*>& parts);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  bool empty() const { return !data_; }
  const int8_t* values() const { return q_; }  ///< [out, in]
  const float* scales() const { return d_; }   ///< [out, in / 32]
  /// Bytes held: 1 a value plus 4 a block.
  int64_t bytes() const { return out_ * in_ + out_ * (in_ / q8_0_block_values) * 4; }
  /// Rows r0 .. r0 + n - 1 as fp32 (d * q), into out [n, in].
  void dequantize_rows(int64_t r0, int64_t n, float* out) const;
  /// Row r's blocks in GGUF's byte layout (34 bytes a block) appended to `bytes`.
  void append_gguf_row(int64_t r, std::vector<uint8_t>& bytes) const;

 private:
  static q8_0_weight allocate(int64_t out, int64_t in);
  std::shared_ptr<const void> data_;
  const int8_t* q_ = nullptr;
  const float* d_ = nullptr;
  int64_t in_ = 0, out_ = 0;
};

/// y[T, W.out()] = act(x[T, W.in()] W^T + bias) with fp32 x, y and bias ([out] or nullptr), W in
/// Q8_0 (see the header comment for the kernels by row count). ldx/ldy are row strides (0 = dense).
/// Thread-safe; OpenMP threads as set_num_threads.
void linear(const float* x, int64_t T, const q8_0_weight& W, const float* bias, float* y,
            activation act = activation::none, int64_t ldx = 0, int64_t ldy = 0);

}  // namespace tessera::models
