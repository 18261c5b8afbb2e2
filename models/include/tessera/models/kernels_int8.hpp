// tessera/models/kernels_int8.hpp: int8 Linear layers for the BERT encoder (avx512_vnni through
// oneDNN's s8s8 matmul), with fp32 accumulation and dequantization.
//
// Weights are symmetric int8 with one scale per output channel (row of W [out, in]):
// w_scale[n] = max_k |W[n, k]| / 127, Wq = round(W / w_scale) in [-127, 127], packed once into the
// blocked layout oneDNN's brgemm reads (with its s8s8 compensation). Activations are symmetric
// int8 with one scale per tensor, chosen by the caller (the forward uses static scales calibrated
// on a seeded set: int8_weights.hpp). A linear computes in int32 (vpdpbusd), then in fp32
// y = act(acc * x_scale * w_scale[n] + bias[n]) as oneDNN post-ops (a per-channel multiply, a
// per-channel add, the activation; for int8 output a final multiply by 1 / y_scale, rounded to
// nearest even and saturated to [-128, 127] as oneDNN converts). Call
// check_dtype_supported(dtype::int8) first: without VNNI oneDNN would run a slow path.
//
//   auto wq = int8_weight::pack(w.query_w, 768, 768);          // [out, in] fp32 -> s8 + scales
//   quantize(x, T, 768, x_scale, xq);                          // fp32 -> s8
//   linear(xq, T, x_scale, wq, w.query_b, q);                  // q = x Wq^T + b, fp32
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/models/kernel_params.hpp"  // activation

namespace tessera::models {

/// A Linear weight W [out, in] quantized to int8 per output channel: packed (owned, for oneDNN's
/// s8s8 matmul) or a view of plain int8 rows and their scales someone else keeps alive (a tile's
/// memory, where a tensor is exactly 1 byte an element). Immutable and cheap to copy.
class int8_weight {
 public:
  int8_weight() = default;
  /// Quantizes W (fp32 rows of `in` values, row stride ldw, 0 = in) once. A row of zeros gets
  /// scale 1 (and zeros).
  static int8_weight pack(const float* W, int64_t out, int64_t in, int64_t ldw = 0);
  /// Plain row-major [out, in] int8 (row stride ldw, 0 = in) with its w_scale [out], not copied
  /// (oneDNN copies blocks of W, with the s8s8 compensation, as it goes).
  static int8_weight view(const int8_t* W, const float* scales, int64_t out, int64_t in, int64_t ldw = 0);
  bool packed() const { return packed_; }
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  /// Row stride of a view in elements; 0 if packed.
  int64_t ld() const { return ld_; }
  /// w_scale [out]: W[n, k] ~ scales()[n] * Wq[n, k].
  std::span<const float> scales() const { return {scales_, static_cast<size_t>(out_)}; }
  /// Bytes of the weight (1 per element, plus a packed layout's compensation) and the scales.
  int64_t bytes() const { return bytes_; }
  const void* data() const { return data_.get(); }
  bool empty() const { return !data_; }

 private:
  std::shared_ptr<const void> data_;
  const float* scales_ = nullptr;
  std::shared_ptr<const void> scales_owner_;  ///< packed: the scales' vector
  int64_t in_ = 0, out_ = 0, bytes_ = 0, ld_ = 0;
  bool packed_ = true;
};

/// w_scale of one weight row of `in` values: max |row| / 127, or 1 for a row of zeros (pack's).
float int8_row_scale(const float* row, int64_t in);
/// q[k] = clamp(round_half_even(row[k] / scale), -127, 127) over n values (pack's; a shard of a
/// row quantized with the whole row's scale gets the values pack gives it).
void quantize_weight_row(const float* row, int64_t n, float scale, int8_t* q);

/// q[t, i] = saturate_s8(round_half_even(x[t, i] / scale)) over T rows of n (ldx/ldq row strides,
/// 0 = n). scale > 0.
void quantize(const float* x, int64_t T, int64_t n, float scale, int8_t* q, int64_t ldx = 0, int64_t ldq = 0);
/// The largest |x| over T rows of n (row stride ldx, 0 = n): a calibration's range.
float abs_max(const float* x, int64_t T, int64_t n, int64_t ldx = 0);

/// y[T, W.out()] = act(xq W^T * x_scale * w_scale + bias), fp32 out; xq int8 [T, W.in()] with row
/// stride ldx (0 = dense), bias [out] fp32 or nullptr, ldy y's row stride. Thread-safe.
void linear(const int8_t* xq, int64_t T, float x_scale, const int8_weight& W, const float* bias, float* y,
            activation act = activation::none, int64_t ldx = 0, int64_t ldy = 0);
/// The same requantized: yq = saturate_s8(round(act(...) / y_scale)) (the FFN's GELU output, the
/// next GEMM's input, never stored in fp32).
void linear(const int8_t* xq, int64_t T, float x_scale, const int8_weight& W, const float* bias, float y_scale,
            int8_t* yq, activation act = activation::none, int64_t ldx = 0, int64_t ldy = 0);

/// oneDNN's s8s8 matmul alone, C[M, B.out()] fp32 = A[M, B.in()] B^T dequantized by B's scales,
/// in one call with M fixed (no bias or activation): the bench's int8 roofline.
void gemm_int8_abt(const int8_t* A, const int8_weight& B, float* C, int64_t M);

}  // namespace tessera::models
