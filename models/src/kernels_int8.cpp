// int8 linear layers (oneDNN s8s8 matmul on packed, per-channel quantized weights, or views of
// plain int8 rows: onednn_matmul.hpp).
//
// oneDNN 2.6 runs an int8 matmul on its brgemm kernels (brg:avx512_core_vnni) only with a row
// count and output scales fixed at creation: runtime output scales or a runtime row count take
// gemm:jit. The scales therefore never enter the primitive: they are runtime operands of binary
// post-ops (multiply by x_scale * w_scale[n], add the bias, the activation, multiply by
// 1 / y_scale), so one primitive serves every layer of a shape. Rows run in the bf16 path's chunks.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "kernels_internal.hpp"
#include "onednn_matmul.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/kernels_int8.hpp"

namespace tessera::models {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using detail::matmul_key;

struct entry {
  dnnl::matmul prim;
  dnnl::memory::desc src, wei, dst, per_oc, scalar, scratchpad;
  int bias_idx = -1, y_scale_idx = -1;  // post-op positions of the runtime operands (scales: 0)
};

detail::matmul_cache<entry> cache;

std::shared_ptr<entry> make_matmul(const matmul_key& k) {
  auto e = std::make_shared<entry>();
  e->src = dnnl::memory::desc(dims{k.rows, k.in}, dt::s8, dims{k.ldx, 1});
  e->wei = detail::weight_desc(k, dt::s8, dt::s8);
  e->dst = dnnl::memory::desc(dims{k.rows, k.out}, k.dst, dims{k.ldy, 1});
  e->per_oc = dnnl::memory::desc(dims{1, k.out}, dt::f32, dims{k.out, 1});
  e->scalar = dnnl::memory::desc(dims{1, 1}, dt::f32, dims{1, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per thread, as the bf16 matmuls
  dnnl::post_ops ops;
  int idx = 0;
  ops.append_binary(dnnl::algorithm::binary_mul, e->per_oc);  // x_scale * w_scale[n]
  ++idx;
  if (k.bias) {
    ops.append_binary(dnnl::algorithm::binary_add, e->per_oc);
    e->bias_idx = idx++;
  }
  if (k.act != activation::none) {
    detail::append_activation(ops, k.act);
    ++idx;
  }
  if (k.dst == dt::s8) {
    ops.append_binary(dnnl::algorithm::binary_mul, e->scalar);  // 1 / y_scale
    e->y_scale_idx = idx++;
  }
  attr.set_post_ops(ops);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->src, e->wei, e->dst), attr, detail::cpu_engine());
  e->scratchpad = pd.scratchpad_desc();
  e->prim = dnnl::matmul(pd);
  return e;
}

void run_matmul(const matmul_key& k, const int8_t* x, const int8_weight& W, const float* scales, const float* bias,
                const float* inv_y_scale, void* y) {
  auto e = cache.get(k, [&] { return make_matmul(k); });
  auto& eng = detail::cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e->src, eng, const_cast<int8_t*>(x))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e->wei, eng, const_cast<void*>(W.data()))},
      {DNNL_ARG_DST, dnnl::memory(e->dst, eng, y)},
      {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, dnnl::memory(e->per_oc, eng, const_cast<float*>(scales))}};
  if (e->bias_idx >= 0)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(e->bias_idx) | DNNL_ARG_SRC_1,
                 dnnl::memory(e->per_oc, eng, const_cast<float*>(bias)));
  if (e->y_scale_idx >= 0)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(e->y_scale_idx) | DNNL_ARG_SRC_1,
                 dnnl::memory(e->scalar, eng, const_cast<float*>(inv_y_scale)));
  detail::execute_matmul(e->prim, e->scratchpad, args);
}

matmul_key key_of(const int8_weight& W, int64_t ldx, int64_t ldy, int64_t rows, bool bias, bool s8_out,
                  activation act) {
  return {W.in(), W.out(), ldx, ldy, rows, bias, s8_out ? dt::s8 : dt::f32, act, W.packed(), false, W.ld()};
}

void linear_any(const int8_t* x, int64_t T, float x_scale, const int8_weight& W, const float* bias,
                const float* inv_y_scale, void* y, activation act, int64_t ldx, int64_t ldy) {
  if (T == 0) return;
  TESSERA_CHECK(!W.empty()) << "int8 linear on an empty int8_weight";
  if (ldx == 0) ldx = W.in();
  if (ldy == 0) ldy = W.out();
  TESSERA_CHECK(T > 0 && ldx >= W.in() && ldy >= W.out() && x_scale > 0 && std::isfinite(x_scale))
      << "int8 linear T=" << T << " in=" << W.in() << " out=" << W.out() << " ldx=" << ldx << " ldy=" << ldy
      << " x_scale=" << x_scale;
  // x_scale * w_scale[n], per call (out floats; the weights' scales are shared by every x_scale).
  thread_local std::vector<float> scales;
  scales.resize(static_cast<size_t>(W.out()));
  const float* ws = W.scales().data();
  for (size_t n = 0; n < scales.size(); ++n) scales[n] = x_scale * ws[n];
  const bool s8_out = inv_y_scale != nullptr;
  const int64_t y_bytes = s8_out ? 1 : 4;
  auto* out = static_cast<char*>(y);
  detail::for_each_row_chunk(T, [&](int64_t row, int64_t rows) {
    run_matmul(key_of(W, ldx, ldy, rows, bias != nullptr, s8_out, act), x + row * ldx, W, scales.data(), bias,
               inv_y_scale, out + row * ldy * y_bytes);
  });
}


__attribute__((target("avx512f"))) void quantize_row_avx512(const float* x, int64_t n, float inv, int8_t* q) {
  const __m512 vi = _mm512_set1_ps(inv);
  const __mmask16 all = 0xFFFF;
  int64_t i = 0;
  // cvtps rounds to nearest even (MXCSR's default); cvtsepi32 saturates to [-128, 127]. (The
  // maskz forms: GCC 12 warns of an uninitialised operand inside the unmasked intrinsics.)
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm512_maskz_cvtsepi32_epi8(all, _mm512_maskz_cvtps_epi32(all, _mm512_mul_ps(_mm512_loadu_ps(x + i), vi))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_cvtsepi32_storeu_epi8(q + i, m,
                                      _mm512_maskz_cvtps_epi32(all, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vi)));
  }
}

void quantize_row(const float* x, int64_t n, float inv, int8_t* q) {
  if (detail::has_avx512) return quantize_row_avx512(x, n, inv, q);
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] * inv);
    q[i] = static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
  }
}

}  // namespace

float int8_row_scale(const float* row, int64_t in) {
  float m = 0.0f;
  for (int64_t k = 0; k < in; ++k) m = std::max(m, std::fabs(row[k]));
  return m > 0.0f ? m / 127.0f : 1.0f;
}

void quantize_weight_row(const float* row, int64_t n, float scale, int8_t* q) {
  for (int64_t k = 0; k < n; ++k) q[k] = static_cast<int8_t>(std::clamp(std::nearbyint(row[k] / scale), -127.0f, 127.0f));
}

int8_weight int8_weight::pack(const float* W, int64_t out, int64_t in, int64_t ldw) {
  if (ldw == 0) ldw = in;
  TESSERA_CHECK(W != nullptr && out > 0 && in > 0 && ldw >= in) << "int8_weight::pack " << out << " x " << in;
  auto scales = std::make_shared<std::vector<float>>(static_cast<size_t>(out));
  std::vector<int8_t> q(static_cast<size_t>(out * in));
  for (int64_t n = 0; n < out; ++n) {
    const float* row = W + n * ldw;
    const float s = int8_row_scale(row, in);
    (*scales)[static_cast<size_t>(n)] = s;
    quantize_weight_row(row, in, s, q.data() + n * in);
  }
  const dnnl::memory::desc packed = detail::packed_weight_desc(in, out, dt::s8, dt::s8, dt::f32);
  int8_weight w;
  w.in_ = in;
  w.out_ = out;
  w.bytes_ = static_cast<int64_t>(packed.get_size()) + 4 * out;
  auto owned = detail::aligned_buffer(packed.get_size());
  void* buf = owned.get();
  w.data_ = std::move(owned);
  w.scales_ = scales->data();
  w.scales_owner_ = std::move(scales);
  auto& eng = detail::cpu_engine();
  // Wq [out, in] row-major is Wq^T [in, out] with strides (1, in): the reorder lays it out and
  // computes the s8s8 compensation the packed format carries.
  dnnl::memory from(dnnl::memory::desc(dims{in, out}, dt::s8, dims{1, in}), eng, q.data());
  dnnl::memory to(packed, eng, buf);
  auto& s = detail::thread_stream();
  dnnl::reorder(from, to).execute(s, from, to);
  s.wait();
  return w;
}

int8_weight int8_weight::view(const int8_t* W, const float* scales, int64_t out, int64_t in, int64_t ldw) {
  if (ldw == 0) ldw = in;
  TESSERA_CHECK(W != nullptr && scales != nullptr && out > 0 && in > 0 && ldw >= in)
      << "int8_weight::view " << out << " x " << in << " ldw " << ldw;
  int8_weight w;
  w.in_ = in;
  w.out_ = out;
  w.ld_ = ldw;
  w.bytes_ = out * in + 4 * out;
  w.packed_ = false;
  w.data_ = std::shared_ptr<const void>(std::shared_ptr<const void>(), W);  // not owned
  w.scales_ = scales;
  return w;
}

void quantize(const float* x, int64_t T, int64_t n, float scale, int8_t* q, int64_t ldx, int64_t ldq) {
  TESSERA_CHECK(scale > 0 && std::isfinite(scale)) << "quantize with scale " << scale;
  if (ldx == 0) ldx = n;
  if (ldq == 0) ldq = n;
  const float inv = 1.0f / scale;
#pragma omp parallel for schedule(static) if (T * n > 65536)
  for (int64_t t = 0; t < T; ++t) quantize_row(x + t * ldx, n, inv, q + t * ldq);
}

float abs_max(const float* x, int64_t T, int64_t n, int64_t ldx) {
  if (ldx == 0) ldx = n;
  float m = 0.0f;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[t * ldx + i]));
  return m;
}

void linear(const int8_t* xq, int64_t T, float x_scale, const int8_weight& W, const float* bias, float* y,
            activation act, int64_t ldx, int64_t ldy) {
  linear_any(xq, T, x_scale, W, bias, nullptr, y, act, ldx, ldy);
}

void linear(const int8_t* xq, int64_t T, float x_scale, const int8_weight& W, const float* bias, float y_scale,
            int8_t* yq, activation act, int64_t ldx, int64_t ldy) {
  TESSERA_CHECK(y_scale > 0 && std::isfinite(y_scale)) << "int8 linear with y_scale " << y_scale;
  const float inv = 1.0f / y_scale;
  linear_any(xq, T, x_scale, W, bias, &inv, yq, act, ldx, ldy);
}

void gemm_int8_abt(const int8_t* A, const int8_weight& B, float* C, int64_t M) {
  thread_local std::vector<float> scales;
  scales.assign(B.scales().begin(), B.scales().end());
  run_matmul(key_of(B, B.in(), B.out(), M, false, false, activation::none), A, B, scales.data(), nullptr, nullptr, C);
}

}  // namespace tessera::models
