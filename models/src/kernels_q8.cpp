// Q8_0 weights (GGUF's 32-value int8 blocks with an fp16 scale) and the weight-only int8 linear:
// blocks dequantised to fp32 inside the kernel, fp32 FMAs, fp32 activations (kernels_q8.hpp).
#include "tessera/models/kernels_q8.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels_internal.hpp"
#include "mapped_file.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::models {
namespace {

void free_aligned(const void* p) { std::free(const_cast<void*>(p)); }

// Rows [r0, r0 + n) of W as fp32: d * float(q), the value a dequantised load holds.
void dequantize_scalar(const int8_t* q, const float* d, int64_t in, int64_t r0, int64_t n, float* out) {
  const int64_t nb = in / q8_0_block_values;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const float s = d[(r0 + r) * nb + b];
      const int8_t* qb = q + (r0 + r) * in + b * q8_0_block_values;
      float* o = out + r * in + b * q8_0_block_values;
      for (int64_t j = 0; j < q8_0_block_values; ++j) o[j] = s * static_cast<float>(qb[j]);
    }
}

__attribute__((target("avx512f"))) inline __m512 widen16(const int8_t* q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
}

__attribute__((target("avx512f"))) void dequantize_avx512(const int8_t* q, const float* d, int64_t in, int64_t r0,
                                                           int64_t n, float* out) {
  const int64_t nb = in / q8_0_block_values;
  for (int64_t r = 0; r < n; ++r) {
    const int8_t* qr = q + (r0 + r) * in;
    const float* dr = d + (r0 + r) * nb;
    float* o = out + r * in;
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 s = _mm512_set1_ps(dr[b]);
      _mm512_storeu_ps(o + b * 32, _mm512_mul_ps(widen16(qr + b * 32), s));
      _mm512_storeu_ps(o + b * 32 + 16, _mm512_mul_ps(widen16(qr + b * 32 + 16), s));
    }
  }
}

void dequantize(const q8_0_weight& W, int64_t r0, int64_t n, float* out) {
  if (detail::has_avx512) dequantize_avx512(W.values(), W.scales(), W.in(), r0, n, out);
  else dequantize_scalar(W.values(), W.scales(), W.in(), r0, n, out);
}

// One row of x against rows [n0, n0 + 4) of W (rows past `out` computed from the last row, not
// stored): each block dequantised in registers (q widened, times d) and multiplied into fp32
// accumulators, one per W row; lanes summed at the end.
__attribute__((target("avx512f"))) void row_x4(const float* x, const q8_0_weight& W, const float* bias, float* y,
                                               activation act, int64_t n0) {
  const int64_t in = W.in(), out = W.out(), nb = in / q8_0_block_values;
  const int64_t nn = std::min<int64_t>(4, out - n0);
  const int8_t* q[4];
  const float* d[4];
  for (int j = 0; j < 4; ++j) {
    const int64_t r = std::min(n0 + j, out - 1);
    q[j] = W.values() + r * in;
    d[j] = W.scales() + r * nb;
  }
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 s = _mm512_set1_ps(d[j][b]);
      acc[j] = _mm512_fmadd_ps(x0, _mm512_mul_ps(widen16(q[j] + b * 32), s), acc[j]);
      acc[j] = _mm512_fmadd_ps(x1, _mm512_mul_ps(widen16(q[j] + b * 32 + 16), s), acc[j]);
    }
  }
  for (int64_t j = 0; j < nn; ++j) {
    const float v = _mm512_reduce_add_ps(acc[j]);
    y[n0 + j] = detail::activate_scalar(bias ? v + bias[n0 + j] : v, act);
  }
}

// 2..kFewRows rows: 4 rows of W dequantised once into this thread's buffer, then fp32's blocked
// kernel over every row of x (the weights of the buffer stay in L1/L2 while x passes).
void few_rows_x4(const float* x, int64_t T, const q8_0_weight& W, const float* bias, float* y, activation act,
                 int64_t ldx, int64_t ldy, int64_t n0) {
  const int64_t in = W.in(), nn = std::min<int64_t>(4, W.out() - n0);
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(4 * in)) buf.resize(static_cast<size_t>(4 * in));
  dequantize(W, n0, nn, buf.data());
  const activation fused = act == activation::gelu_erf ? activation::none : act;  // not vectorised there
  detail::few_rows_block(x, T, in, buf.data(), bias ? bias + n0 : nullptr, nn, y + n0, fused, ldx, ldy, 0);
  if (fused != act)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < nn; ++j) y[t * ldy + n0 + j] = detail::activate_scalar(y[t * ldy + n0 + j], act);
}

constexpr int64_t kFewRows = 48;  // as fp32's linear(): from here oneDNN's matmul is faster

// Many rows (prefill): panels of W dequantised into a buffer (about 4 MB), each through fp32's
// linear (oneDNN's matmul) into its columns of y.
void panels(const float* x, int64_t T, const q8_0_weight& W, const float* bias, float* y, activation act, int64_t ldx,
            int64_t ldy) {
  const int64_t in = W.in(), out = W.out();
  const int64_t P = std::min(out, std::max<int64_t>(16, (int64_t{1} << 20) / in / 16 * 16));
  thread_local std::vector<float> panel;
  if (panel.size() < static_cast<size_t>(P * in)) panel.resize(static_cast<size_t>(P * in));
  float* buf = panel.data();
  for (int64_t r0 = 0; r0 < out; r0 += P) {
    const int64_t rows = std::min(P, out - r0);
    const int64_t chunks = (rows + 15) / 16;
#pragma omp parallel for schedule(static) if (rows * in > 65536)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t a = c * 16, n = std::min<int64_t>(16, rows - a);
      dequantize(W, r0 + a, n, buf + a * in);
    }
    linear(x, T, in, buf, bias ? bias + r0 : nullptr, rows, y + r0, act, ldx, ldy);
  }
}

}  // namespace

void quantize_q8_0(const float* x, int64_t n, uint16_t* scales, int8_t* q) {
  TESSERA_CHECK(n % q8_0_block_values == 0) << "quantize_q8_0 of " << n << " values (not whole blocks of 32)";
  for (int64_t b = 0; b < n / q8_0_block_values; ++b) {
    const float* xb = x + b * q8_0_block_values;
    float amax = 0.0f;
    for (int64_t j = 0; j < q8_0_block_values; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = detail::float_to_half(d);
    for (int64_t j = 0; j < q8_0_block_values; ++j) {
      const float r = std::round(xb[j] * id);  // |r| <= 127 for finite blocks; NaN and inf kept in range
      q[b * q8_0_block_values + j] = static_cast<int8_t>(std::isnan(r) ? 0.0f : std::clamp(r, -127.0f, 127.0f));
    }
  }
}

q8_0_weight q8_0_weight::allocate(int64_t out, int64_t in) {
  TESSERA_CHECK(out > 0 && in > 0 && in % q8_0_block_values == 0) << "q8_0_weight " << out << " x " << in
                                                                    << " (in must be a multiple of 32)";
  const int64_t qbytes = (out * in + 63) / 64 * 64, nscales = out * (in / q8_0_block_values);
  void* buf = std::aligned_alloc(64, static_cast<size_t>((qbytes + nscales * 4 + 63) / 64 * 64));
  TESSERA_CHECK(buf != nullptr) << "out of memory for a " << out << " x " << in << " Q8_0 weight";
  q8_0_weight w;
  w.data_ = std::shared_ptr<const void>(buf, free_aligned);
  w.q_ = static_cast<const int8_t*>(buf);
  w.d_ = reinterpret_cast<const float*>(static_cast<const char*>(buf) + qbytes);
  w.in_ = in;
  w.out_ = out;
  return w;
}

q8_0_weight q8_0_weight::quantize(const float* W, int64_t out, int64_t in, int64_t ldw) {
  if (ldw == 0) ldw = in;
  q8_0_weight w = allocate(out, in);
  auto* q = const_cast<int8_t*>(w.q_);
  auto* d = const_cast<float*>(w.d_);
  const int64_t nb = in / q8_0_block_values;
#pragma omp parallel
  {
    std::vector<uint16_t> h(static_cast<size_t>(nb));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < out; ++r) {
      quantize_q8_0(W + r * ldw, in, h.data(), q + r * in);
      for (int64_t b = 0; b < nb; ++b) d[r * nb + b] = detail::half_to_float(h[static_cast<size_t>(b)]);
    }
  }
  return w;
}

q8_0_weight q8_0_weight::from_blocks(const std::vector<const uint8_t*>& rows, int64_t in) {
  q8_0_weight w = allocate(static_cast<int64_t>(rows.size()), in);
  auto* q = const_cast<int8_t*>(w.q_);
  auto* d = const_cast<float*>(w.d_);
  const int64_t nb = in / q8_0_block_values;
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = rows[r] + b * q8_0_block_bytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);  // unaligned in the file
      d[static_cast<int64_t>(r) * nb + b] = detail::half_to_float(h);
      std::memcpy(q + static_cast<int64_t>(r) * in + b * q8_0_block_values, blk + 2, q8_0_block_values);
    }
  return w;
}

q8_0_weight q8_0_weight::stack(const std::vector<const q8_0_weight*>& parts) {
  TESSERA_CHECK(!parts.empty()) << "q8_0_weight::stack of nothing";
  int64_t out = 0;
  const int64_t in = parts.front()->in();
  for (const auto* p : parts) {
    TESSERA_CHECK(p->in() == in) << "q8_0_weight::stack: in " << p->in() << " vs " << in;
    out += p->out();
  }
  q8_0_weight w = allocate(out, in);
  auto* q = const_cast<int8_t*>(w.q_);
  auto* d = const_cast<float*>(w.d_);
  const int64_t nb = in / q8_0_block_values;
  int64_t row = 0;
  for (const auto* p : parts) {
    std::memcpy(q + row * in, p->values(), static_cast<size_t>(p->out() * in));
    std::memcpy(d + row * nb, p->scales(), static_cast<size_t>(p->out() * nb) * 4);
    row += p->out();
  }
  return w;
}

void q8_0_weight::dequantize_rows(int64_t r0, int64_t n, float* out) const {
  TESSERA_CHECK(r0 >= 0 && n >= 0 && r0 + n <= out_) << "dequantize_rows " << r0 << " + " << n << " of " << out_;
  dequantize(*this, r0, n, out);
}

void q8_0_weight::append_gguf_row(int64_t r, std::vector<uint8_t>& bytes) const {
  const int64_t nb = in_ / q8_0_block_values;
  for (int64_t b = 0; b < nb; ++b) {
    const uint16_t h = detail::float_to_half(d_[r * nb + b]);  // exact: the scale came from an fp16
    bytes.push_back(static_cast<uint8_t>(h & 0xff));
    bytes.push_back(static_cast<uint8_t>(h >> 8));
    const auto* qb = reinterpret_cast<const uint8_t*>(q_ + r * in_ + b * q8_0_block_values);
    bytes.insert(bytes.end(), qb, qb + q8_0_block_values);
  }
}

void linear(const float* x, int64_t T, const q8_0_weight& W, const float* bias, float* y, activation act, int64_t ldx,
            int64_t ldy) {
  if (T == 0) return;
  TESSERA_CHECK(!W.empty()) << "linear on an empty q8_0_weight";
  if (ldx == 0) ldx = W.in();
  if (ldy == 0) ldy = W.out();
  TESSERA_CHECK(T > 0 && ldx >= W.in() && ldy >= W.out())
      << "Q8_0 linear T=" << T << " in=" << W.in() << " out=" << W.out() << " ldx=" << ldx << " ldy=" << ldy;
  if (T > kFewRows || !detail::has_avx512) return panels(x, T, W, bias, y, act, ldx, ldy);
  const int64_t nblocks = (W.out() + 3) / 4;
  if (T == 1) {
#pragma omp parallel for schedule(static) if (W.in() * W.out() > 262144)
    for (int64_t b = 0; b < nblocks; ++b) row_x4(x, W, bias, y, act, b * 4);
    return;
  }
#pragma omp parallel for schedule(static) if (T * W.in() * W.out() > (1 << 20))
  for (int64_t b = 0; b < nblocks; ++b) few_rows_x4(x, T, W, bias, y, act, ldx, ldy, b * 4);
}

}  // namespace tessera::models
