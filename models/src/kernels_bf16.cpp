// bf16 linear layers (oneDNN matmul on packed weights), LayerNorm, embeddings and the pooler.
//
// oneDNN 2.6 runs a bf16 matmul on its brgemm kernels (avx512_core_bf16 or AMX) only when the row
// count is fixed at creation: with a runtime row count it takes gemm:jit, measured at 50 GFLOP/s
// against 230-300 for brgemm on 2 threads here. A fixed-M primitive costs 1-5 ms to create, so a
// linear over T rows runs as chunks of kChunk rows, then one chunk of the remainder rounded down
// to a multiple of 32, then the last < 32 rows: at most 1 + 15 + 31 primitives per weight shape,
// whatever T is, all of them reading the weight in the same packed layout.
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
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels_internal.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_bf16.hpp"

namespace tessera::models {
namespace {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

constexpr int64_t kChunk = 512;

// The packed weight layout oneDNN's brgemm picks for [in, out] (the same for every row count:
// checked for M = 3 .. 4096 on BERT-base shapes).
dnnl::memory::desc packed_weight_desc(int64_t in, int64_t out) {
  static std::mutex mu;
  static std::map<std::pair<int64_t, int64_t>, dnnl::memory::desc> descs;
  std::lock_guard<std::mutex> lock(mu);
  auto it = descs.find({in, out});
  if (it != descs.end()) return it->second;
  const auto src = dnnl::memory::desc(dims{kChunk, in}, dt::bf16, dims{in, 1});
  const auto wei = dnnl::memory::desc(dims{in, out}, dt::bf16, dnnl::memory::format_tag::any);
  const auto dst = dnnl::memory::desc(dims{kChunk, out}, dt::bf16, dims{out, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), detail::cpu_engine());
  return descs.emplace(std::make_pair(in, out), pd.weights_desc()).first->second;
}

struct matmul_key {
  int64_t in, out, ldx, ldy, rows;
  bool bias, f32_out;
  activation act;
  bool packed, in_major = false;
  int64_t ldw = 0;  // a view's row stride (0: packed)
  // brgemm fixes its thread count when the primitive is made: one made under 1 OpenMP thread ran
  // on 1 thread after the caller went to 2 (measured: a bf16 forward at 1.07 cores of 2).
  int threads = omp_get_max_threads();
  bool operator==(const matmul_key& o) const {
    return std::tie(in, out, ldx, ldy, rows, bias, f32_out, act, packed, in_major, ldw, threads) ==
           std::tie(o.in, o.out, o.ldx, o.ldy, o.rows, o.bias, o.f32_out, o.act, o.packed, o.in_major, o.ldw, o.threads);
  }
};
struct matmul_key_hash {
  size_t operator()(const matmul_key& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : {k.in, k.out, k.ldx, k.ldy, k.rows, int64_t{k.bias}, int64_t{k.f32_out}, int64_t(k.act),
                      int64_t{k.packed}, int64_t{k.in_major}, k.ldw, int64_t{k.threads}})
      h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

struct matmul_entry {
  dnnl::matmul prim;
  dnnl::memory::desc src, wei, bias, dst, scratchpad;
};

std::mutex cache_mutex;
std::unordered_map<matmul_key, std::shared_ptr<const matmul_entry>, matmul_key_hash> cache;

dnnl::algorithm eltwise_of(activation act) {
  switch (act) {
    case activation::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case activation::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case activation::silu: return dnnl::algorithm::eltwise_swish;
    default: return dnnl::algorithm::eltwise_relu;
  }
}

std::shared_ptr<const matmul_entry> get_matmul(const matmul_key& k) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
  }
  auto e = std::make_shared<matmul_entry>();
  e->src = dnnl::memory::desc(dims{k.rows, k.in}, dt::bf16, dims{k.ldx, 1});
  // W [out, in] row-major (row stride ldw) is W^T [in, out] with strides (1, ldw).
  e->wei = k.packed     ? packed_weight_desc(k.in, k.out)
           : k.in_major ? dnnl::memory::desc(dims{k.in, k.out}, dt::bf16, dims{k.ldw, 1})
                        : dnnl::memory::desc(dims{k.in, k.out}, dt::bf16, dims{1, k.ldw});
  e->dst = dnnl::memory::desc(dims{k.rows, k.out}, k.f32_out ? dt::f32 : dt::bf16, dims{k.ldy, 1});
  if (k.bias) e->bias = dnnl::memory::desc(dims{1, k.out}, dt::f32, dims{k.out, 1});
  dnnl::primitive_attr attr;
  // The caller's scratchpad (run_matmul: one per thread): with the library's, two threads running
  // bf16 matmuls at once (attention's parallel loop, a server's concurrent forwards) corrupted
  // each other's results (measured: logits that varied from run to run).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.act != activation::none) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, eltwise_of(k.act), k.act == activation::silu ? 1.0f : 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  auto desc = k.bias ? dnnl::matmul::desc(e->src, e->wei, e->bias, e->dst) : dnnl::matmul::desc(e->src, e->wei, e->dst);
  const dnnl::matmul::primitive_desc pd(desc, attr, detail::cpu_engine());
  e->scratchpad = pd.scratchpad_desc();
  e->prim = dnnl::matmul(pd);
  std::lock_guard<std::mutex> lock(cache_mutex);
  return cache.emplace(k, std::move(e)).first->second;
}

void run_matmul(const matmul_key& k, const bfloat16* x, const bf16_weight& W, const float* bias, void* y) {
  auto e = get_matmul(k);
  auto& eng = detail::cpu_engine();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(e->src, eng, const_cast<bfloat16*>(x))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(e->wei, eng, const_cast<void*>(W.data()))},
      {DNNL_ARG_DST, dnnl::memory(e->dst, eng, y)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e->bias, eng, const_cast<float*>(bias)));
  thread_local std::vector<char> scratch;
  if (const size_t need = e->scratchpad.get_size(); need > 0) {
    if (scratch.size() < need) scratch.resize(need);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e->scratchpad, eng, scratch.data()));
  }
  auto& s = detail::thread_stream();
  e->prim.execute(s, args);
  s.wait();
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
  int64_t row = 0;
  auto run = [&](int64_t rows) {
    run_matmul({W.in(), W.out(), ldx, ldy, rows, bias != nullptr, f32_out, act, W.packed(), W.in_major(), W.ld()},
               x + row * ldx, W, bias,
               out + row * ldy * y_bytes);
    row += rows;
  };
  while (T - row >= kChunk) run(kChunk);
  if (const int64_t rest32 = (T - row) / 32 * 32; rest32 > 0) run(rest32);
  if (T - row > 0) run(T - row);
}

void free_aligned(const void* p) { std::free(const_cast<void*>(p)); }

}  // namespace

bf16_weight bf16_weight::pack(const float* W, int64_t out, int64_t in, int64_t ldw) {
  if (ldw == 0) ldw = in;
  TESSERA_CHECK(W != nullptr && out > 0 && in > 0 && ldw >= in) << "bf16_weight::pack " << out << " x " << in;
  const dnnl::memory::desc packed = packed_weight_desc(in, out);
  bf16_weight w;
  w.in_ = in;
  w.out_ = out;
  w.bytes_ = static_cast<int64_t>(packed.get_size());
  void* buf = std::aligned_alloc(64, (static_cast<size_t>(w.bytes_) + 63) / 64 * 64);
  TESSERA_CHECK(buf != nullptr) << "out of memory packing a " << out << " x " << in << " bf16 weight";
  w.data_ = std::shared_ptr<const void>(buf, free_aligned);
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
  run_matmul({B.in(), B.out(), B.in(), B.out(), M, false, false, activation::none, B.packed(), B.in_major(), B.ld()},
             A, B, nullptr, C);
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
