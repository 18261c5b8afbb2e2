// Decoder kernels: RMSNorm, rotary embeddings, and causal attention over a paged K/V cache: a
// prefill chunk as GEMMs per kv head (oneDNN sgemm over K/V gathered from the blocks), decode
// tokens one query row at a time over the blocks in place (AVX-512 when the CPU has it).
// GCC 12 reports the AVX-512 intrinsics' own undefined merge operands (_mm512_undefined_ps) as
// (maybe-)uninitialized once inlined into the hand-vectorised kernels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "kernels_internal.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::models {

void rms_norm(const float* x, int64_t T, int64_t n, const float* gamma, float eps, float* y) {
#pragma omp parallel for schedule(static) if (T * n > 32768)
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * n;
    float* yr = y + t * n;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * gamma[i];
  }
}

void multiply(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

std::vector<double> rope_inv_freq(const rope_params& rope, int head_dim) {
  const int half = head_dim / 2;
  const double pi = 3.14159265358979323846, factor = rope.factor, theta = rope.theta;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(theta, 2.0 * i / head_dim);
  switch (rope.kind) {
    case rope_kind::none:
      break;
    case rope_kind::linear:
      for (double& f : inv) f /= factor;
      break;
    case rope_kind::llama3: {
      // Wavelengths longer than the original context / low_freq_factor are interpolated (/ factor),
      // shorter than / high_freq_factor kept, and those between blended linearly in 1 / wavelength.
      const double orig = rope.original_max_positions;
      const double low_wavelen = orig / rope.low_freq_factor, high_wavelen = orig / rope.high_freq_factor;
      for (double& f : inv) {
        const double wavelen = 2 * pi / f;
        if (wavelen > low_wavelen) {
          f /= factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (orig / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
          f = (1 - smooth) * f / factor + smooth * f;
        }
      }
      break;
    }
    case rope_kind::yarn: {
      // The dimensions whose rotations over the original context fall between beta_slow and
      // beta_fast turns are blended by a linear ramp: below them kept, above them interpolated.
      const double orig = rope.original_max_positions;
      auto correction_dim = [&](double turns) {
        return head_dim * std::log(orig / (turns * 2 * pi)) / (2 * std::log(theta));
      };
      const double lo = std::max(0.0, std::floor(correction_dim(rope.beta_fast)));
      double hi = std::min(double(head_dim - 1), std::ceil(correction_dim(rope.beta_slow)));
      if (hi == lo) hi += 0.001;
      for (int i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
        const double keep = 1 - ramp;  // weight of the original (extrapolated) frequency
        inv[i] = inv[i] / factor * (1 - keep) + inv[i] * keep;
      }
      break;
    }
  }
  return inv;
}

void rotary_tables(const int32_t* positions, int64_t T, int head_dim, const rope_params& rope, float* cos_out,
                   float* sin_out) {
  const int half = head_dim / 2;
  const std::vector<double> inv_freq = rope_inv_freq(rope, head_dim);
  const double mag = rope.kind == rope_kind::yarn ? rope.attention_factor : 1.0;
  for (int64_t t = 0; t < T; ++t) {
    const double p = positions[t];
    for (int i = 0; i < half; ++i) {
      const double a = p * inv_freq[i];
      cos_out[t * half + i] = static_cast<float>(mag * std::cos(a));
      sin_out[t * half + i] = static_cast<float>(mag * std::sin(a));
    }
  }
}

void apply_rotary(float* x, int64_t T, int num_heads, int head_dim, int64_t ld, const float* cos_t,
                  const float* sin_t) {
  const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (T * num_heads * head_dim > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int h = 0; h < num_heads; ++h) {
      float* a = x + t * ld + int64_t{h} * head_dim;
      float* b = a + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float x1 = a[i], x2 = b[i];
        a[i] = x1 * c[i] - x2 * s[i];
        b[i] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

namespace {

// Rows per task of the row-at-a-time kernel (decode tokens, short chunks).
constexpr int kRowsPerTask = 16;
// From this many stacked query rows (a sequence's rows x the query heads of a kv head) attention
// runs as GEMMs; each GEMM task stacks about kGemmStackedRows.
constexpr int kMinGemmStackedRows = 16;
constexpr int kGemmStackedRows = 64;

}  // namespace

namespace {

// Per-thread scratch, grown as needed and never zeroed (fresh vectors every call cost their
// page faults and memset).
struct scratch_buf {
  std::unique_ptr<float[]> p;
  int64_t n = 0;
  float* get(int64_t need) {
    if (need > n) {
      p.reset(new float[static_cast<size_t>(need)]);
      n = need;
    }
    return p.get();
  }
};
struct attention_scratch {
  scratch_buf q, k, v, s, o;
};

// The cache's element type: fp32 or bf16 rows, read as fp32.
inline float ld(const float* p, int64_t i) { return p[i]; }
inline float ld(const bfloat16* p, int64_t i) { return to_float(p[i]); }
template <class T>
const T* keys_of(const paged_kv_view& kv);
template <>
const float* keys_of<float>(const paged_kv_view& kv) { return kv.k; }
template <>
const bfloat16* keys_of<bfloat16>(const paged_kv_view& kv) { return kv.k16; }
template <class T>
const T* values_of(const paged_kv_view& kv);
template <>
const float* values_of<float>(const paged_kv_view& kv) { return kv.v; }
template <>
const bfloat16* values_of<bfloat16>(const paged_kv_view& kv) { return kv.v16; }
// 16 values from p as fp32 (bf16: the upper half of each lane).
__attribute__((target("avx512f"))) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"))) inline __m512 load16(const bfloat16* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Query rows [r0, r1) of one sequence and the `group` query heads sharing kv head kvh, one key at a
// time (decode: a row or a few). Every query row reads each cached K and V row once for all heads.
// Vectorised across head_dim by the compiler (AVX-512 in the clone the caller picks).
template <int MaxGroup, class T>
__attribute__((always_inline)) inline void attend_rows_body(const float* q, int64_t ldq, const paged_kv_view& kv,
                                                            const paged_seq& s, int r0, int r1, int kvh, int group,
                                                            int d, float scale, float* out, int64_t ldo,
                                                            float* scores) {
  const int bt = kv.block_tokens;
  for (int r = r0; r < r1; ++r) {
    const int len = s.start_pos + r + 1;  // keys 0 .. own position
    for (int g0 = 0; g0 < group; g0 += MaxGroup) {
      const int ng = std::min(MaxGroup, group - g0);
      const float* qr[MaxGroup];
      float* sc[MaxGroup];
      for (int g = 0; g < ng; ++g) {
        qr[g] = q + int64_t{s.row + r} * ldq + int64_t{kvh * group + g0 + g} * d;
        sc[g] = scores + int64_t{g} * len;
      }
      for (int j0 = 0; j0 < len; j0 += bt) {
        const T* kb = keys_of<T>(kv) + int64_t{s.block_table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride;
        const int n = std::min(bt, len - j0);
        for (int j = 0; j < n; ++j) {
          const T* kr = kb + int64_t{j} * d;
          for (int g = 0; g < ng; ++g) {
            const float* qg = qr[g];
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < d; ++i) dot += qg[i] * ld(kr, i);
            sc[g][j0 + j] = dot * scale;
          }
        }
      }
      for (int g = 0; g < ng; ++g) {
        detail::softmax_row(sc[g], len);
        std::fill_n(out + int64_t{s.row + r} * ldo + int64_t{kvh * group + g0 + g} * d, d, 0.0f);
      }
      for (int j0 = 0; j0 < len; j0 += bt) {
        const T* vb = values_of<T>(kv) + int64_t{s.block_table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride;
        const int n = std::min(bt, len - j0);
        for (int j = 0; j < n; ++j) {
          const T* vr = vb + int64_t{j} * d;
          for (int g = 0; g < ng; ++g) {
            float* o = out + int64_t{s.row + r} * ldo + int64_t{kvh * group + g0 + g} * d;
            const float p = sc[g][j0 + j];
#pragma omp simd
            for (int i = 0; i < d; ++i) o[i] += p * ld(vr, i);
          }
        }
      }
    }
  }
}

constexpr int kMaxGroup = 8;

template <class T>
__attribute__((target("avx512f"))) void attend_rows_avx512(const float* q, int64_t ldq, const paged_kv_view& kv,
                                                           const paged_seq& s, int r0, int r1, int kvh, int group,
                                                           int d, float scale, float* out, int64_t ldo, float* scores) {
  attend_rows_body<kMaxGroup, T>(q, ldq, kv, s, r0, r1, kvh, group, d, scale, out, ldo, scores);
}
template <class T>
void attend_rows_default(const float* q, int64_t ldq, const paged_kv_view& kv, const paged_seq& s, int r0, int r1,
                         int kvh, int group, int d, float scale, float* out, int64_t ldo, float* scores) {
  attend_rows_body<kMaxGroup, T>(q, ldq, kv, s, r0, r1, kvh, group, d, scale, out, ldo, scores);
}
// The row kernel for head_dim = 16 * DV: q and the output row held in registers, the scores of 16
// keys of a block at a time from 16 dot products reduced together (sum_lanes16), q pre-scaled.
template <int DV, class T>
__attribute__((target("avx512f"))) void attend_rows_avx512_d(const float* q, int64_t ldq, const paged_kv_view& kv,
                                                             const paged_seq& s, int r0, int r1, int kvh, int group,
                                                             float scale, float* out, int64_t ldo, float* scores) {
  constexpr int d = DV * 16;
  const int bt = kv.block_tokens;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int r = r0; r < r1; ++r) {
    const int len = s.start_pos + r + 1;  // keys 0 .. own position
    for (int g = 0; g < group; ++g) {
      const int64_t col = int64_t{kvh * group + g} * d;
      const float* qr = q + int64_t{s.row + r} * ldq + col;
      __m512 qv[DV];
      for (int c = 0; c < DV; ++c) qv[c] = _mm512_mul_ps(_mm512_loadu_ps(qr + 16 * c), vscale);
      for (int j0 = 0; j0 < len; j0 += bt) {
        const T* kb = keys_of<T>(kv) + int64_t{s.block_table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride;
        const int n = std::min(bt, len - j0);
        for (int j1 = 0; j1 < n; j1 += 16) {
          const int m = std::min(16, n - j1);
          __m512 acc[16];
#pragma GCC unroll 16
          for (int j = 0; j < 16; ++j) {
            if (j < m) {
              const T* kr = kb + int64_t{j1 + j} * d;
              __m512 a = _mm512_mul_ps(qv[0], load16(kr));
              for (int c = 1; c < DV; ++c) a = _mm512_fmadd_ps(qv[c], load16(kr + 16 * c), a);
              acc[j] = a;
            } else {
              acc[j] = _mm512_setzero_ps();
            }
          }
          _mm512_mask_storeu_ps(scores + j0 + j1, static_cast<__mmask16>((1u << m) - 1), detail::sum_lanes16(acc));
        }
      }
      detail::softmax_row(scores, len);
      __m512 o[DV];
      for (int c = 0; c < DV; ++c) o[c] = _mm512_setzero_ps();
      for (int j0 = 0; j0 < len; j0 += bt) {
        const T* vb = values_of<T>(kv) + int64_t{s.block_table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride;
        const int n = std::min(bt, len - j0);
        for (int j = 0; j < n; ++j) {
          const __m512 p = _mm512_set1_ps(scores[j0 + j]);
          const T* vr = vb + int64_t{j} * d;
          for (int c = 0; c < DV; ++c) o[c] = _mm512_fmadd_ps(p, load16(vr + 16 * c), o[c]);
        }
      }
      float* orow = out + int64_t{s.row + r} * ldo + col;
      for (int c = 0; c < DV; ++c) _mm512_storeu_ps(orow + 16 * c, o[c]);
    }
  }
}

using attend_rows_fn = void (*)(const float*, int64_t, const paged_kv_view&, const paged_seq&, int, int, int, int,
                                float, float*, int64_t, float*);

// The row kernel for this head_dim and CPU: a register-resident clone for head_dim 16..128 in
// steps of 16 on AVX-512, else the compiler-vectorised one (head_dim passed at run time).
template <int DV, class T>
void attend_rows_fixed(const float* q, int64_t ldq, const paged_kv_view& kv, const paged_seq& s, int r0, int r1,
                       int kvh, int group, float scale, float* out, int64_t ldo, float* scores) {
  attend_rows_avx512_d<DV, T>(q, ldq, kv, s, r0, r1, kvh, group, scale, out, ldo, scores);
}
template <class T>
attend_rows_fn fixed_row_kernel(int d) {
  if (!detail::has_avx512 || d % 16 != 0) return nullptr;
  switch (d / 16) {
    case 1: return attend_rows_fixed<1, T>;
    case 2: return attend_rows_fixed<2, T>;
    case 3: return attend_rows_fixed<3, T>;
    case 4: return attend_rows_fixed<4, T>;
    case 5: return attend_rows_fixed<5, T>;
    case 6: return attend_rows_fixed<6, T>;
    case 7: return attend_rows_fixed<7, T>;
    case 8: return attend_rows_fixed<8, T>;
    default: return nullptr;
  }
}

// K or V rows of positions [0, len) of kv head kvh, contiguous [len, d].
void gather_rows(const float* base, const paged_kv_view& kv, const int32_t* table, int kvh, int len, int d,
                 float* dst) {
  const int bt = kv.block_tokens;
  for (int j0 = 0; j0 < len; j0 += bt)
    std::copy_n(base + int64_t{table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride,
                int64_t{std::min(bt, len - j0)} * d, dst + int64_t{j0} * d);
}
// The same from a bf16 cache, widened to fp32.
void gather_rows(const bfloat16* base, const paged_kv_view& kv, const int32_t* table, int kvh, int len, int d,
                 float* dst) {
  const int bt = kv.block_tokens;
  for (int j0 = 0; j0 < len; j0 += bt)
    to_float(base + int64_t{table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride,
             int64_t{std::min(bt, len - j0)} * d, dst + int64_t{j0} * d);
}

// Query rows [r0, r1) of one sequence (a prefill chunk) and the `group` query heads of kv head
// kvh as two GEMMs: the heads' rows stacked into Q [group * rows, d], S = Q K^T over the keys
// 0 .. the last row's position (gathered from the blocks), the causal mask and an fp32 softmax per
// row, then O = S V.
void attend_gemm(const float* q, int64_t ldq, const paged_kv_view& kv, const paged_seq& s, int r0, int r1, int kvh,
                 int group, int d, float scale, float* out, int64_t ldo, attention_scratch& w) {
  const int R = r1 - r0, M = R * group, L = s.start_pos + r1;
  float* qs = w.q.get(int64_t{M} * d);
  float* ks = w.k.get(int64_t{L} * d);
  float* vs = w.v.get(int64_t{L} * d);
  float* sc = w.s.get(int64_t{M} * L);
  float* os = w.o.get(int64_t{M} * d);
  for (int g = 0; g < group; ++g)
    for (int i = 0; i < R; ++i)
      std::copy_n(q + int64_t{s.row + r0 + i} * ldq + int64_t{kvh * group + g} * d, d, qs + int64_t{g * R + i} * d);
  if (kv.k16) {
    gather_rows(kv.k16, kv, s.block_table, kvh, L, d, ks);
    gather_rows(kv.v16, kv, s.block_table, kvh, L, d, vs);
  } else {
    gather_rows(kv.k, kv, s.block_table, kvh, L, d, ks);
    gather_rows(kv.v, kv, s.block_table, kvh, L, d, vs);
  }
  dnnl_status_t st = dnnl_sgemm('N', 'T', M, L, d, scale, qs, d, ks, d, 0.0f, sc, L);
  TESSERA_CHECK(st == dnnl_success) << "paged attention sgemm QK^T failed";
  for (int m = 0; m < M; ++m) {
    float* row = sc + int64_t{m} * L;
    const int valid = s.start_pos + r0 + m % R + 1;
    detail::softmax_row(row, valid);
    std::fill(row + valid, row + L, 0.0f);
  }
  st = dnnl_sgemm('N', 'N', M, d, L, 1.0f, sc, L, vs, d, 0.0f, os, d);
  TESSERA_CHECK(st == dnnl_success) << "paged attention sgemm PV failed";
  for (int g = 0; g < group; ++g)
    for (int i = 0; i < R; ++i)
      std::copy_n(os + int64_t{g * R + i} * d, d, out + int64_t{s.row + r0 + i} * ldo + int64_t{kvh * group + g} * d);
}

// Query rows [r0, r1) of one sequence under a sliding window W: row r at position p attends the
// keys p - W + 1 .. p of kv head kvh, read from the blocks in place; plain loops, one row at a time.
template <class T>
void attend_rows_window(const float* q, int64_t ldq, const paged_kv_view& kv, const paged_seq& s, int r0, int r1,
                        int kvh, int group, int d, float scale, int window, float* out, int64_t ldo, float* scores) {
  const int bt = kv.block_tokens;
  for (int r = r0; r < r1; ++r) {
    const int pos = s.start_pos + r, lo = std::max(0, pos - window + 1), n = pos + 1 - lo;
    for (int g = 0; g < group; ++g) {
      const int64_t col = int64_t{kvh * group + g} * d;
      const float* qr = q + int64_t{s.row + r} * ldq + col;
      for (int j = lo; j <= pos; ++j) {
        const T* kr = keys_of<T>(kv) + int64_t{s.block_table[j / bt]} * kv.block_stride +
                      int64_t{kvh} * kv.head_stride + int64_t{j % bt} * d;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int i = 0; i < d; ++i) acc += qr[i] * ld(kr, i);
        scores[j - lo] = acc * scale;
      }
      detail::softmax_row(scores, n);
      float* o = out + int64_t{s.row + r} * ldo + col;
      std::fill(o, o + d, 0.0f);
      for (int j = lo; j <= pos; ++j) {
        const T* vr = values_of<T>(kv) + int64_t{s.block_table[j / bt]} * kv.block_stride +
                      int64_t{kvh} * kv.head_stride + int64_t{j % bt} * d;
        const float p = scores[j - lo];
#pragma omp simd
        for (int i = 0; i < d; ++i) o[i] += p * ld(vr, i);
      }
    }
  }
}

}  // namespace

void attention_paged(strided q, paged_kv_view kv, const paged_seq* seqs, int num_seqs, int num_heads,
                     int num_kv_heads, int head_dim, strided_out out, int sliding_window) {
  const int group = num_heads / num_kv_heads;
  // A chunk of stacked query rows (rows x group) per GEMM task: large enough for the GEMM to run
  // at speed, small enough that the causal mask trims most of the skipped upper triangle.
  const int gemm_rows = std::max(1, kGemmStackedRows / group);
  struct task {
    int seq, r0, r1;
    bool gemm;
    int64_t cost;
  };
  std::vector<task> tasks;
  int64_t work = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const paged_seq& p = seqs[s];
    const bool gemm = p.rows >= 2 && int64_t{p.rows} * group >= kMinGemmStackedRows;
    const int chunk = gemm ? gemm_rows : kRowsPerTask;
    for (int r = 0; r < p.rows; r += chunk) {
      const int r1 = std::min(p.rows, r + chunk);
      tasks.push_back({s, r, r1, gemm, int64_t{r1 - r} * (p.start_pos + r1)});
    }
    work += int64_t{p.rows} * (p.start_pos + p.rows);
  }
  // Longest first, so the dynamic schedule balances the tail.
  std::stable_sort(tasks.begin(), tasks.end(), [](const task& a, const task& b) { return a.cost > b.cost; });
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const bool b16 = kv.k16 != nullptr;
  const attend_rows_fn fixed = b16 ? fixed_row_kernel<bfloat16>(head_dim) : fixed_row_kernel<float>(head_dim);
  const auto window_rows = b16 ? attend_rows_window<bfloat16> : attend_rows_window<float>;
  const auto any_rows = detail::has_avx512 ? (b16 ? attend_rows_avx512<bfloat16> : attend_rows_avx512<float>)
                                           : (b16 ? attend_rows_default<bfloat16> : attend_rows_default<float>);
  const int64_t n_tasks = static_cast<int64_t>(tasks.size()) * num_kv_heads;
#pragma omp parallel if (work * num_heads * head_dim > 32768 && n_tasks > 1)
  {
    thread_local attention_scratch w;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_tasks; ++i) {
      const task& t = tasks[static_cast<size_t>(i / num_kv_heads)];
      const int kvh = static_cast<int>(i % num_kv_heads);
      const paged_seq& s = seqs[t.seq];
      if (sliding_window > 0 && s.start_pos + t.r1 > sliding_window) {  // the window binds: the keys of some row start later
        window_rows(q.data, q.ld, kv, s, t.r0, t.r1, kvh, group, head_dim, scale, sliding_window, out.data, out.ld,
                    w.s.get(sliding_window));
      } else if (t.gemm) {
        attend_gemm(q.data, q.ld, kv, s, t.r0, t.r1, kvh, group, head_dim, scale, out.data, out.ld, w);
      } else if (fixed) {
        fixed(q.data, q.ld, kv, s, t.r0, t.r1, kvh, group, scale, out.data, out.ld, w.s.get(s.start_pos + t.r1));
      } else {
        float* scores = w.s.get(int64_t{std::min(group, kMaxGroup)} * (s.start_pos + t.r1));
        any_rows(q.data, q.ld, kv, s, t.r0, t.r1, kvh, group, head_dim, scale, out.data, out.ld, scores);
      }
    }
  }
}

}  // namespace tessera::models
