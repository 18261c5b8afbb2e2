// bf16 linear layers (oneDNN matmul on packed weights or views: onednn_matmul.hpp), LayerNorm,
// embeddings and the pooler.
// Up to 4 rows through a plain view (tiles' weights) run a hand-written AVX512-BF16 kernel instead.
// GCC 12 reports the AVX-512 intrinsics' own undefined merge operands as uninitialized once
// inlined into it (as in kernels.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "kernels_internal.hpp"
#include "onednn_matmul.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_bf16.hpp"

namespace tessera::models {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
using detail::matmul_key;

struct matmul_entry {
  dnnl::matmul prim;
  dnnl::memory::desc src, wei, bias, dst, scratchpad;
};

detail::matmul_cache<matmul_entry> cache;

std::shared_ptr<matmul_entry> make_matmul(const matmul_key& k) {
  auto e = std::make_shared<matmul_entry>();
  e->src = dnnl::memory::desc(dims{k.rows, k.in}, dt::bf16, dims{k.ldx, 1});
  e->wei = detail::weight_desc(k, dt::bf16, dt::bf16);
  e->dst = dnnl::memory::desc(dims{k.rows, k.out}, k.dst, dims{k.ldy, 1});
  if (k.bias) e->bias = dnnl::memory::desc(dims{1, k.out}, dt::f32, dims{k.out, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the caller's, per thread (execute_matmul)
  if (k.act != activation::none) {
    dnnl::post_ops ops;
    detail::append_activation(ops, k.act);
    attr.set_post_ops(ops);
  }
  auto desc = k.bias ? dnnl::matmul::desc(e->src, e->wei, e->bias, e->dst) : dnnl::matmul::desc(e->src, e->wei, e->dst);
  const dnnl::matmul::primitive_desc pd(desc, attr, detail::cpu_engine());
  e->scratchpad = pd.scratchpad_desc();
  e->prim = dnnl::matmul(pd);
  return e;
}

void run_matmul(const matmul_key& k, const bfloat16* x, const bf16_weight& W, const float* bias, void* y) {
  auto e = cache.get(k, [&] { return make_matmul(k); });
  auto& eng = detail::cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e->src, eng, const_cast<bfloat16*>(x))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e->wei, eng, const_cast<void*>(W.data()))},
      {DNNL_ARG_DST, dnnl::memory(e->dst, eng, y)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e->bias, eng, const_cast<float*>(bias)));
  detail::execute_matmul(e->prim, e->scratchpad, args);
}

matmul_key key_of(const bf16_weight& W, int64_t ldx, int64_t ldy, int64_t rows, bool bias, bool f32_out,
                  activation act) {
  return {W.in(), W.out(), ldx, ldy, rows, bias, f32_out ? dt::f32 : dt::bf16, act, W.packed(), W.in_major(), W.ld()};
}

// A few rows through a plain [out, in] weight (a view: what tiles hold; a decode step at batch 1):
// dot products along `in` with AVX512-BF16 (vdpbf16ps: pairs of bf16 products summed into fp32),
// 4 rows of W by up to 4 rows of x, W streamed once. oneDNN on such a view at 1 row read 19-27
// GB/s here against 37-44 for this loop on weights past the cache (2048 x 11264, 32000 x 2048),
// and 50-90 against 25-34 on weights in the cache. The sums run in another order than oneDNN's,
// so results differ from the packed path by fp32 rounding.
constexpr int64_t kFewRows = 4;
const bool has_dpbf16 = __builtin_cpu_supports("avx512bf16");

template <int T>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void few_rows_block(const bfloat16* x, int64_t ldx,
                                                                          const bfloat16* W, int64_t ldw, int64_t in,
                                                                          int64_t nn, float* r) {
  const int64_t full = in / 32 * 32;
  const __mmask32 tail = in > full ? static_cast<__mmask32>((1ull << (in - full)) - 1) : 0;
  const bfloat16* w[4];
  for (int j = 0; j < 4; ++j) w[j] = W + std::min<int64_t>(j, nn - 1) * ldw;  // past the edge: computed, not stored
  __m512 acc[16];
#pragma GCC unroll 16
  for (int k = 0; k < 16; ++k) acc[k] = _mm512_setzero_ps();
  for (int64_t k = 0; k < full; k += 32) {
    __m512bh wv[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) wv[j] = (__m512bh)_mm512_loadu_si512(w[j] + k);
#pragma GCC unroll 4
    for (int i = 0; i < T; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + i * ldx + k);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[i * 4 + j] = _mm512_dpbf16_ps(acc[i * 4 + j], wv[j], xv);
    }
  }
  if (tail) {
    __m512bh wv[4];
    for (int j = 0; j < 4; ++j) wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(tail, w[j] + full);
    for (int i = 0; i < T; ++i) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(tail, x + i * ldx + full);
      for (int j = 0; j < 4; ++j) acc[i * 4 + j] = _mm512_dpbf16_ps(acc[i * 4 + j], wv[j], xv);
    }
  }
  _mm512_store_ps(r, detail::sum_lanes16(acc));  // r[4 i + j]: row i of x against row j of W
}

void linear_few_rows(const bfloat16* x, int64_t T, const bf16_weight& W, const float* bias, void* y, bool f32_out,
                     activation act, int64_t ldx, int64_t ldy) {
  const int64_t in = W.in(), out = W.out(), ldw = W.ld(), nblocks = (out + 3) / 4;
  const auto* w = static_cast<const bfloat16*>(W.data());
  // (The parallel loop stays outside the target-attributed function, as in kernels.cpp.)
#pragma omp parallel for schedule(static) if (in * out > 262144)
  for (int64_t nb = 0; nb < nblocks; ++nb) {
    const int64_t n0 = nb * 4, nn = std::min<int64_t>(4, out - n0);
    alignas(64) float r[16];
    const bfloat16* wb = w + n0 * ldw;
    switch (T) {
      case 1: few_rows_block<1>(x, ldx, wb, ldw, in, nn, r); break;
      case 2: few_rows_block<2>(x, ldx, wb, ldw, in, nn, r); break;
      case 3: few_rows_block<3>(x, ldx, wb, ldw, in, nn, r); break;
      default: few_rows_block<4>(x, ldx, wb, ldw, in, nn, r); break;
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < nn; ++j) {
        const float v = detail::activate(bias ? r[i * 4 + j] + bias[n0 + j] : r[i * 4 + j], act);
        if (f32_out)
          static_cast<float*>(y)[i * ldy + n0 + j] = v;
        else
          static_cast<bfloat16*>(y)[i * ldy + n0 + j] = to_bf16(v);
      }
  }
}

void linear_any(const bfloat16* x, int64_t T, const bf16_weight& W, const float* bias, void* y, bool f32_out,
                activation act, int64_t ldx, int64_t ldy) {
  if (T == 0) return;
  TESSERA_CHECK(!W.empty()) << "linear on an empty bf16_weight";
  if (ldx == 0) ldx = W.in();
  if (ldy == 0) ldy = W.out();
  TESSERA_CHECK(T > 0 && ldx >= W.in() && ldy >= W.out())
      << "bf16 linear T=" << T << " in=" << W.in() << " out=" << W.out() << " ldx=" << ldx << " ldy=" << ldy;
  if (T <= kFewRows && has_dpbf16 && !W.packed() && !W.in_major())
    return linear_few_rows(x, T, W, bias, y, f32_out, act, ldx, ldy);
  const int64_t y_bytes = f32_out ? 4 : 2;
  auto* out = static_cast<char*>(y);
  detail::for_each_row_chunk(T, [&](int64_t row, int64_t rows) {
    run_matmul(key_of(W, ldx, ldy, rows, bias != nullptr, f32_out, act), x + row * ldx, W, bias,
               out + row * ldy * y_bytes);
  });
}

}  // namespace

bf16_weight bf16_weight::pack(const float* W, int64_t out, int64_t in, int64_t ldw) {
  if (ldw == 0) ldw = in;
  TESSERA_CHECK(W != nullptr && out > 0 && in > 0 && ldw >= in) << "bf16_weight::pack " << out << " x " << in;
  const dnnl::memory::desc packed = detail::packed_weight_desc(in, out, dt::bf16, dt::bf16, dt::bf16);
  bf16_weight w;
  w.in_ = in;
  w.out_ = out;
  w.bytes_ = static_cast<int64_t>(packed.get_size());
  auto owned = detail::aligned_buffer(static_cast<size_t>(w.bytes_));
  void* buf = owned.get();
  w.data_ = std::move(owned);
  auto& eng = detail::cpu_engine();
  // W [out, in] row-major is W^T [in, out] with strides (1, ldw): oneDNN's reorder converts and
  // lays it out in one pass.
  dnnl::memory from(dnnl::memory::desc(dims{in, out}, dt::f32, dims{1, ldw}), eng, const_cast<float*>(W));
  dnnl::memory to(packed, eng, buf);
  auto& s = detail::thread_stream();
  dnnl::reorder(from, to).execute(s, from, to);
  s.wait();
  return w;
}

bf16_weight bf16_weight::view(const bfloat16* W, int64_t out, int64_t in, int64_t ldw) {
  if (ldw == 0) ldw = in;
  TESSERA_CHECK(W != nullptr && out > 0 && in > 0 && ldw >= in)
      << "bf16_weight::view " << out << " x " << in << " ldw " << ldw;
  bf16_weight w;
  w.in_ = in;
  w.out_ = out;
  w.ld_ = ldw;
  w.bytes_ = 2 * out * in;
  w.packed_ = false;
  w.data_ = std::shared_ptr<const void>(std::shared_ptr<const void>(), W);  // not owned
  return w;
}

bf16_weight bf16_weight::view_in_major(const bfloat16* W_t, int64_t in, int64_t out, int64_t ldw) {
  if (ldw == 0) ldw = out;
  TESSERA_CHECK(W_t != nullptr && out > 0 && in > 0 && ldw >= out)
      << "bf16_weight::view_in_major " << in << " x " << out << " ldw " << ldw;
  bf16_weight w = view(W_t, out, in);
  w.ld_ = ldw;
  w.in_major_ = true;
  return w;
}

void linear(const bfloat16* x, int64_t T, const bf16_weight& W, const float* bias, bfloat16* y, activation act,
            int64_t ldx, int64_t ldy) {
  linear_any(x, T, W, bias, y, false, act, ldx, ldy);
}

void linear(const bfloat16* x, int64_t T, const bf16_weight& W, const float* bias, float* y, activation act,
            int64_t ldx, int64_t ldy) {
  linear_any(x, T, W, bias, y, true, act, ldx, ldy);
}

void gemm_bf16_abt(const bfloat16* A, const bf16_weight& B, bfloat16* C, int64_t M) {
  run_matmul(key_of(B, B.in(), B.out(), M, false, false, activation::none), A, B, nullptr, C);
}

namespace {

// LayerNorm of one fp32 row s (n values) into bf16 y.
inline void normalize_row(float* s, int64_t n, const float* gamma, const float* beta, float eps, bfloat16* y) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += s[i];
  const float mean = sum / static_cast<float>(n);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < n; ++i) var += (s[i] - mean) * (s[i] - mean);
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) s[i] = (s[i] - mean) * inv * gamma[i] + beta[i];
  to_bf16(s, n, y);
}

}  // namespace

void layer_norm(const float* x, int64_t T, int64_t n, const float* gamma, const float* beta, float eps, bfloat16* y) {
#pragma omp parallel if (T * n > 32768)
  {
    std::vector<float> row(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(row.data(), x + t * n, static_cast<size_t>(n) * 4);
      normalize_row(row.data(), n, gamma, beta, eps, y + t * n);
    }
  }
}

void add_layer_norm(const bfloat16* x, const bfloat16* residual, int64_t T, int64_t n, const float* gamma,
                    const float* beta, float eps, bfloat16* y) {
#pragma omp parallel if (T * n > 32768)
  {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      to_float(x + t * n, n, a.data());
      to_float(residual + t * n, n, b.data());
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) a[i] += b[i];
      normalize_row(a.data(), n, gamma, beta, eps, y + t * n);
    }
  }
}

void add_layer_norm(const float* x, const bfloat16* residual, int64_t T, int64_t n, const float* gamma,
                    const float* beta, float eps, bfloat16* y, const float* bias) {
#pragma omp parallel if (T * n > 32768)
  {
    std::vector<float> a(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      to_float(residual + t * n, n, a.data());
      const float* xt = x + t * n;
      if (bias) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) a[i] += xt[i] + bias[i];  // residual + (x + bias), the unfused order
      } else {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) a[i] += xt[i];
      }
      normalize_row(a.data(), n, gamma, beta, eps, y + t * n);
    }
  }
}

void embed(const int32_t* token_ids, const int32_t* token_type_ids, const int32_t* seq_offsets, int num_seqs,
           const bfloat16* word, const bfloat16* position, const bfloat16* token_type, int64_t hidden, float* out,
           int position_pad_id) {
#pragma omp parallel for schedule(dynamic, 1) if (num_seqs > 1)
  for (int s = 0; s < num_seqs; ++s) {
    std::vector<float> p(static_cast<size_t>(hidden)), ty(static_cast<size_t>(hidden));
    std::vector<int32_t> pos(static_cast<size_t>(seq_offsets[s + 1] - seq_offsets[s]));
    embed_positions(token_ids + seq_offsets[s], static_cast<int64_t>(pos.size()), position_pad_id, pos.data());
    for (int64_t t = seq_offsets[s]; t < seq_offsets[s + 1]; ++t) {
      float* o = out + t * hidden;
      to_float(word + int64_t{token_ids[t]} * hidden, hidden, o);
      to_float(position + int64_t{pos[static_cast<size_t>(t - seq_offsets[s])]} * hidden, hidden, p.data());
      to_float(token_type + int64_t{token_type_ids ? token_type_ids[t] : 0} * hidden, hidden, ty.data());
#pragma omp simd
      for (int64_t i = 0; i < hidden; ++i) o[i] = o[i] + p[i] + ty[i];  // the fp32 embed's order
    }
  }
}

void pooler_classifier(const bfloat16* hidden, int64_t ld, const int32_t* cls_rows, int num_seqs,
                       const bf16_weight& pooler_w, const float* pooler_b, const bf16_weight& classifier_w,
                       const float* classifier_b, float* logits) {
  if (num_seqs == 0) return;
  const int64_t h = pooler_w.in();
  std::vector<bfloat16> cls(static_cast<size_t>(num_seqs * h));
  std::vector<float> pooled(static_cast<size_t>(num_seqs * pooler_w.out()));
  for (int s = 0; s < num_seqs; ++s)
    std::memcpy(cls.data() + s * h, hidden + int64_t{cls_rows[s]} * ld, static_cast<size_t>(h) * 2);
  linear(cls.data(), num_seqs, pooler_w, pooler_b, pooled.data());
  for (float& v : pooled) v = std::tanh(v);
  std::vector<bfloat16> pooled16(pooled.size());
  to_bf16(pooled.data(), static_cast<int64_t>(pooled.size()), pooled16.data());
  linear(pooled16.data(), num_seqs, classifier_w, classifier_b, logits);
}

}  // namespace tessera::models
