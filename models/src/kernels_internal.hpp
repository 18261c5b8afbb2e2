// Private helpers shared by the kernel sources.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

#include "tessera/models/kernel_params.hpp"  // activation

namespace tessera::models::detail {

dnnl::engine& cpu_engine();
/// One oneDNN stream per thread (primitives may run from several threads at once).
dnnl::stream& thread_stream();


/// True when the CPU has AVX-512F (the kernels' hand-vectorised clones).
extern const bool has_avx512;

/// act(v), one value (the scalar epilogue of the hand-written linear kernels).
inline float activate(float v, activation act) {
  switch (act) {
    case activation::none: return v;
    case activation::gelu_erf: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    case activation::gelu_tanh:
      return 0.5f * v * (1.0f + std::tanh(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    case activation::relu: return v > 0.0f ? v : 0.0f;
    case activation::silu: return v / (1.0f + std::exp(-v));
  }
  return v;
}

// exp(v) for v <= 0: Cephes' expf polynomial (rel. error ~2e-7), 2^n applied by vscalefps;
// below -87.3 (incl. -inf) the result is exactly 0.
__attribute__((target("avx512f"))) inline __m512 exp_nonpositive(__m512 v) {
  const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  v = _mm512_max_ps(v, _mm512_set1_ps(-87.3f));
  const __m512 fn = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(0.693359375f), v);
  r = _mm512_fnmadd_ps(fn, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, fn));
}

// Lane 4i + j of the result = the sum of the 16 lanes of v[4i + j] (16 dot products' partial sums
// reduced at once: 31 shuffles and adds instead of 16 horizontal sums).
__attribute__((target("avx512f"))) inline __m512 sum_lanes16(const __m512* v) {
  __m512 t[8], u[4];
  for (int k = 0; k < 8; ++k)
    t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 4; ++k)
    u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44), _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
  const __m512 p = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(p, q, 0x88), _mm512_shuffle_f32x4(p, q, 0xDD));
}

/// act(v) in scalar fp32 (linear()'s one-row path).
float activate_scalar(float v, activation act);
/// linear()'s blocked few-rows kernel (AVX-512; call only when has_avx512): rows [n0, n0 + 4) of
/// W (those below `out`) against every row of x, y = act(x W^T + bias) for them. gelu_erf is not
/// vectorised (pass none and apply it after). Each output is one row of x against one row of W,
/// accumulated in the same order whatever the other rows are.
void few_rows_block(const float* x, int64_t T, int64_t in, const float* W, const float* bias, int64_t out, float* y,
                    activation act, int64_t ldx, int64_t ldy, int64_t n0);

/// Numerically stable softmax of one row, in place (AVX-512 when the CPU has it: the exp of
/// attention scores is a large share of attention time). -inf entries become exactly 0.
void softmax_row(float* x, int64_t n);

}  // namespace tessera::models::detail
