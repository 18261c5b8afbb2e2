// Elementwise, normalisation and linear kernels. GEMMs go through oneDNN matmul primitives with a
// runtime row count: one primitive per (in, out, strides, bias, activation), whatever T is, so a
// batch of a new size builds nothing (oneDNN picks its jit sgemm-based matmul, as fast as brgemm
// here on BERT shapes); a single row and 4-48 rows (decode steps) run hand-vectorised kernels.
// GCC 12 reports the AVX-512 intrinsics' own undefined merge operands (_mm512_undefined_ps) as
// (maybe-)uninitialized once inlined into the hand-vectorised kernels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "tessera/models/kernels.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tessera/common/check.hpp"
#include "kernels_internal.hpp"

namespace tessera::models {

void set_num_threads(int n) {
  TESSERA_CHECK(n >= 1) << "set_num_threads(" << n << ")";
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

namespace detail {

namespace {

void softmax_row_scalar(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

__attribute__((target("avx512f"))) void softmax_row_avx512(float* x, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, x + i));
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mx));
    _mm512_mask_storeu_ps(x + i, m, e);
    vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

}  // namespace

const bool has_avx512 = __builtin_cpu_supports("avx512f");

void softmax_row(float* x, int64_t n) {
  if (has_avx512) softmax_row_avx512(x, n);
  else softmax_row_scalar(x, n);
}

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

}  // namespace detail

namespace {

struct linear_key {
  int64_t in, out, ldx, ldy;
  bool bias;
  activation act;
  bool operator==(const linear_key& o) const {
    return std::tie(in, out, ldx, ldy, bias, act) == std::tie(o.in, o.out, o.ldx, o.ldy, o.bias, o.act);
  }
};
struct linear_key_hash {
  size_t operator()(const linear_key& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : {k.in, k.out, k.ldx, k.ldy, int64_t{k.bias}, static_cast<int64_t>(k.act)})
      h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

struct linear_primitive {
  dnnl::matmul prim;
  dnnl::memory::desc wei, bias;
};

std::mutex cache_mutex;
std::unordered_map<linear_key, std::shared_ptr<linear_primitive>, linear_key_hash> cache;

std::shared_ptr<linear_primitive> get_linear(const linear_key& k) {
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
  }
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  auto p = std::make_shared<linear_primitive>();
  const auto src = dnnl::memory::desc(dims{DNNL_RUNTIME_DIM_VAL, k.in}, dt::f32, dims{k.ldx, 1});
  p->wei = dnnl::memory::desc(dims{k.in, k.out}, dt::f32, dims{1, k.in});  // W^T of HF's [out, in]
  const auto dst = dnnl::memory::desc(dims{DNNL_RUNTIME_DIM_VAL, k.out}, dt::f32, dims{k.ldy, 1});
  if (k.bias) p->bias = dnnl::memory::desc(dims{1, k.out}, dt::f32, dims{k.out, 1});
  dnnl::primitive_attr attr;
  if (k.act != activation::none) {
    dnnl::post_ops ops;
    const auto alg = k.act == activation::gelu_erf    ? dnnl::algorithm::eltwise_gelu_erf
                     : k.act == activation::gelu_tanh ? dnnl::algorithm::eltwise_gelu_tanh
                     : k.act == activation::silu      ? dnnl::algorithm::eltwise_swish
                                                      : dnnl::algorithm::eltwise_relu;
    ops.append_eltwise(1.0f, alg, k.act == activation::silu ? 1.0f : 0.0f, 0.0f);  // swish alpha 1 = silu
    attr.set_post_ops(ops);
  }
  auto desc = k.bias ? dnnl::matmul::desc(src, p->wei, p->bias, dst) : dnnl::matmul::desc(src, p->wei, dst);
  p->prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, detail::cpu_engine()));
  std::lock_guard<std::mutex> lock(cache_mutex);
  cache.emplace(k, p);
  return p;
}

}  // namespace

namespace {

using detail::activate;

// One row: y = act(x W^T + b) as `out` dot products streaming W once. A decoder's batch-1 step is
// this shape; oneDNN's matmul takes 4x longer on a large [out, in] (GPT-2's 50257-row LM head:
// 26 ms vs 6.7 ms on one core here) and the same on the layers' shapes.
void linear_row(const float* x, int64_t in, const float* W, const float* bias, int64_t out, float* y, activation act) {
#pragma omp parallel for schedule(static) if (in * out > 262144)
  for (int64_t o = 0; o < out; ++o) {
    const float* w = W + o * in;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < in; ++i) s += w[i] * x[i];
    y[o] = activate(bias ? s + bias[o] : s, act);
  }
}

// A few rows (a decoder's batched decode step): y = act(x W^T + b) as blocks of 4 rows of x by 6
// rows of W, 24 accumulators vectorised along `in` (both operands are contiguous there), summed
// across lanes into vectors of the block's 24 results. Each block of W (18 KB at in = 768)
// stays in L1 while every row block of x passes it, so W streams from memory once. oneDNN's
// matmul repacks the transposed weights on each call; on one core here, 32 rows through GPT-2's
// LM head (50257 x 768, weights not in cache) took 30 ms this way against 33-55 ms in oneDNN, and a
// whole gpt2 decode step at batch 32 (context 128) 100-105 ms against 118-145 ms.
__attribute__((target("avx512f"))) inline __m512 sigmoid16(__m512 t) {
  // e = exp(-|t|) <= 1; sigmoid(t) = 1 / (1 + e) for t >= 0, e / (1 + e) below.
  const __m512 e = detail::exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(t)));
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 neg = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(inv, neg, inv, e);
}

__attribute__((target("avx512f"))) inline __m512 activate16(__m512 v, activation act) {
  switch (act) {
    case activation::none: return v;
    case activation::relu: return _mm512_max_ps(v, _mm512_setzero_ps());
    case activation::silu: return _mm512_mul_ps(v, sigmoid16(v));
    case activation::gelu_tanh: {
      // 0.5 v (1 + tanh(z)) = v sigmoid(2z), z = sqrt(2/pi) (v + 0.044715 v^3)
      const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
      const __m512 z = _mm512_mul_ps(_mm512_set1_ps(2.0f * 0.79788456080286536f),
                                     _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), v3, v));
      return _mm512_mul_ps(v, sigmoid16(z));
    }
    case activation::gelu_erf: break;  // not taken: linear() leaves gelu_erf to oneDNN
  }
  return v;
}

// Lane j of the low 8 = the sum of the 16 lanes of v[j], summed in sum_lanes16's order (so a
// result is the same bits whichever of the two reduced it); the high 8 lanes are 0.
__attribute__((target("avx512f"))) inline __m512 sum_lanes8(const __m512* v) {
  __m512 t[4], u[2];
  for (int k = 0; k < 4; ++k)
    t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 2; ++k)
    u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44), _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
  const __m512 p = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(p, p, 0x88), _mm512_shuffle_f32x4(p, p, 0xDD));
  return _mm512_maskz_mov_ps(0x00FF, q);
}

// Rows [n0, n0 + NR) of W (those below `out`) against every row of x, 4 rows of x at a time: 4 x NR
// dot products vectorised along `in`, reduced across lanes together. NR = 6 for linear() (24
// accumulators: 10 loads a k-step for 24 FMAs against 8 for 16 at NR = 4; gpt2's shapes at 32
// rows, one core, cold weights: 87-92 -> 91-105 GFLOP/s), 4 for few_rows_block's callers.
template <int NR>
__attribute__((target("avx512f"))) void linear_few_rows_block(const float* x, int64_t T, int64_t in, const float* W,
                                                              const float* bias, int64_t out, float* y,
                                                              activation act, int64_t ldx, int64_t ldy, int64_t n0) {
  static_assert(NR == 4 || NR == 6);
  constexpr int NA = 4 * NR;  // accumulators: row i of x, row j of W at i * NR + j
  const int64_t full = in / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (in - full)) - 1);
  const int64_t nn = std::min<int64_t>(NR, out - n0);
  const float* w[NR];
  for (int j = 0; j < NR; ++j) w[j] = W + std::min(n0 + j, out - 1) * in;  // past the edge: a row computed, not stored
  alignas(64) float bl[32] = {};  // the bias of each result lane
  for (int c = 0; bias && c < NA; ++c)
    if (c % NR < nn) bl[c] = bias[n0 + c % NR];
  // The next block's rows of W (contiguous after this block's) are prefetched into L2, one cache
  // line a k-step of the first row blocks: W streams from memory (a decode step's weights do not
  // stay in cache) and the hardware prefetcher alone left the kernel waiting at each new block
  // (gpt2's shapes at 32 rows, one core: 70-73 -> 83-91 GFLOP/s with cold weights).
  const char* pf = reinterpret_cast<const char*>(W + std::min(n0 + NR, out) * in);
  const char* const pf_end = reinterpret_cast<const char*>(W + std::min(n0 + 2 * NR, out) * in);
  for (int64_t m0 = 0; m0 < T; m0 += 4) {
    const float* xr[4];
    for (int i = 0; i < 4; ++i) xr[i] = x + std::min(m0 + i, T - 1) * ldx;
    __m512 acc[NA];
#pragma GCC unroll 24
    for (int k = 0; k < NA; ++k) acc[k] = _mm512_setzero_ps();
    for (int64_t k = 0; k < full; k += 16) {
      if (pf < pf_end) {
        _mm_prefetch(pf, _MM_HINT_T1);
        pf += 64;
      }
      __m512 wv[NR];
#pragma GCC unroll 6
      for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_ps(w[j] + k);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512 xv = _mm512_loadu_ps(xr[i] + k);
#pragma GCC unroll 6
        for (int j = 0; j < NR; ++j) acc[i * NR + j] = _mm512_fmadd_ps(xv, wv[j], acc[i * NR + j]);
      }
    }
    if (tail) {
      __m512 wv[NR];
      for (int j = 0; j < NR; ++j) wv[j] = _mm512_maskz_loadu_ps(tail, w[j] + full);
      for (int i = 0; i < 4; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(tail, xr[i] + full);
        for (int j = 0; j < NR; ++j) acc[i * NR + j] = _mm512_fmadd_ps(xv, wv[j], acc[i * NR + j]);
      }
    }
    alignas(64) float r[32];
    _mm512_store_ps(r, activate16(_mm512_add_ps(detail::sum_lanes16(acc), _mm512_load_ps(bl)), act));
    if constexpr (NA > 16)
      _mm512_store_ps(r + 16, activate16(_mm512_add_ps(sum_lanes8(acc + 16), _mm512_load_ps(bl + 16)), act));
    for (int64_t i = 0; i < std::min<int64_t>(4, T - m0); ++i)
      for (int64_t j = 0; j < nn; ++j) y[(m0 + i) * ldy + n0 + j] = r[i * NR + j];
  }
}

// (The parallel loop stays outside the AVX-512 function: clang outlines an OpenMP region's body
// without the enclosing function's target attribute.)
void linear_few_rows(const float* x, int64_t T, int64_t in, const float* W, const float* bias, int64_t out, float* y,
                     activation act, int64_t ldx, int64_t ldy) {
  const int64_t nblocks = (out + 5) / 6;
#pragma omp parallel for schedule(static) if (T * in * out > 1 << 20)
  for (int64_t nb = 0; nb < nblocks; ++nb) linear_few_rows_block<6>(x, T, in, W, bias, out, y, act, ldx, ldy, nb * 6);
}

// From 4 (below, half a block would be wasted) up to this many rows linear() runs linear_few_rows;
// from 48 to 64 rows oneDNN's matmul caught up on the layers' shapes.
constexpr int64_t kFewRows = 48;

}  // namespace

namespace detail {

float activate_scalar(float v, activation act) { return activate(v, act); }

void few_rows_block(const float* x, int64_t T, int64_t in, const float* W, const float* bias, int64_t out, float* y,
                    activation act, int64_t ldx, int64_t ldy, int64_t n0) {
  linear_few_rows_block<4>(x, T, in, W, bias, out, y, act, ldx, ldy, n0);
}

}  // namespace detail

void linear(const float* x, int64_t T, int64_t in, const float* W, const float* bias, int64_t out, float* y,
            activation act, int64_t ldx, int64_t ldy) {
  if (T == 0) return;
  if (ldx == 0) ldx = in;
  if (ldy == 0) ldy = out;
  TESSERA_CHECK(T > 0 && in > 0 && out > 0 && ldx >= in && ldy >= out)
      << "linear T=" << T << " in=" << in << " out=" << out << " ldx=" << ldx << " ldy=" << ldy;
  if (T == 1) return linear_row(x, in, W, bias, out, y, act);
  if (T >= 4 && T <= kFewRows && detail::has_avx512 && act != activation::gelu_erf)
    return linear_few_rows(x, T, in, W, bias, out, y, act, ldx, ldy);
  auto p = get_linear({in, out, ldx, ldy, bias != nullptr, act});
  auto& eng = detail::cpu_engine();
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  dnnl::memory src(dnnl::memory::desc(dims{T, in}, dt::f32, dims{ldx, 1}), eng, const_cast<float*>(x));
  dnnl::memory wei(p->wei, eng, const_cast<float*>(W));
  dnnl::memory dst(dnnl::memory::desc(dims{T, out}, dt::f32, dims{ldy, 1}), eng, y);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias, eng, const_cast<float*>(bias)));
  auto& s = detail::thread_stream();
  p->prim.execute(s, args);
  s.wait();
}

namespace {

// One row of LayerNorm((x + bias) + r); bias and r may be null. The sum is formed in that order,
// as the unfused bias pass then residual pass did, so fusing changes no bit.
inline float ln_in(const float* x, const float* b, const float* r, int64_t i) {
  float v = x[i];
  if (b) v += b[i];
  if (r) v += r[i];
  return v;
}

inline void layer_norm_row(const float* x, const float* b, const float* r, int64_t n, const float* gamma,
                           const float* beta, float eps, float* y) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += ln_in(x, b, r, i);
  const float mean = sum / static_cast<float>(n);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < n; ++i) {
    const float d = ln_in(x, b, r, i) - mean;
    var += d * d;
  }
  const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = (ln_in(x, b, r, i) - mean) * inv * gamma[i] + beta[i];
}

}  // namespace

void layer_norm(const float* x, int64_t T, int64_t n, const float* gamma, const float* beta, float eps, float* y) {
#pragma omp parallel for schedule(static) if (T * n > 32768)
  for (int64_t t = 0; t < T; ++t) layer_norm_row(x + t * n, nullptr, nullptr, n, gamma, beta, eps, y + t * n);
}

void add_layer_norm(const float* x, const float* residual, int64_t T, int64_t n, const float* gamma,
                    const float* beta, float eps, float* y, const float* bias) {
#pragma omp parallel for schedule(static) if (T * n > 32768)
  for (int64_t t = 0; t < T; ++t) layer_norm_row(x + t * n, bias, residual + t * n, n, gamma, beta, eps, y + t * n);
}

void gelu_erf(const float* x, int64_t n, float* y) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void add(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void softmax(float* x, int64_t rows, int64_t n, int64_t ld) {
  if (ld == 0) ld = n;
#pragma omp parallel for schedule(static) if (rows * n > 65536)
  for (int64_t r = 0; r < rows; ++r) detail::softmax_row(x + r * ld, n);
}

void embed_positions(const int32_t* token_ids, int64_t len, int position_pad_id, int32_t* out) {
  if (position_pad_id < 0) {
    for (int64_t i = 0; i < len; ++i) out[i] = static_cast<int32_t>(i);
    return;
  }
  int32_t k = 0;
  for (int64_t i = 0; i < len; ++i)
    out[i] = token_ids[i] == position_pad_id ? position_pad_id : position_pad_id + ++k;
}

void embed(const int32_t* token_ids, const int32_t* token_type_ids, const int32_t* seq_offsets, int num_seqs,
           const float* word, const float* position, const float* token_type, int64_t hidden, float* out,
           int position_pad_id) {
#pragma omp parallel for schedule(dynamic, 1) if (num_seqs > 1)
  for (int s = 0; s < num_seqs; ++s) {
    int32_t k = 0;  // non-pad tokens so far (RoBERTa)
    for (int64_t t = seq_offsets[s]; t < seq_offsets[s + 1]; ++t) {
      const float* w = word + int64_t{token_ids[t]} * hidden;
      const int64_t pos = position_pad_id < 0             ? t - seq_offsets[s]
                          : token_ids[t] == position_pad_id ? position_pad_id
                                                            : position_pad_id + ++k;
      const float* p = position + pos * hidden;
      const float* ty = token_type + int64_t{token_type_ids ? token_type_ids[t] : 0} * hidden;
      float* o = out + t * hidden;
#pragma omp simd
      for (int64_t i = 0; i < hidden; ++i) o[i] = w[i] + p[i] + ty[i];
    }
  }
}

void pooler_classifier(const float* hidden, int64_t ld, const int32_t* cls_rows, int num_seqs, int64_t hidden_size,
                       const float* pooler_w, const float* pooler_b, const float* classifier_w,
                       const float* classifier_b, int num_labels, float* logits) {
  if (num_seqs == 0) return;
  std::vector<float> cls(static_cast<size_t>(num_seqs * hidden_size)), pooled(cls.size());
  for (int s = 0; s < num_seqs; ++s)
    std::copy_n(hidden + int64_t{cls_rows[s]} * ld, hidden_size, cls.data() + s * hidden_size);
  linear(cls.data(), num_seqs, hidden_size, pooler_w, pooler_b, hidden_size, pooled.data());
  for (float& v : pooled) v = std::tanh(v);
  linear(pooled.data(), num_seqs, hidden_size, classifier_w, classifier_b, num_labels, logits);
}

void sgemm_abt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K) {
  const auto st = dnnl_sgemm('N', 'T', M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
  TESSERA_CHECK(st == dnnl_success) << "dnnl_sgemm failed: " << static_cast<int>(st);
}

}  // namespace tessera::models
