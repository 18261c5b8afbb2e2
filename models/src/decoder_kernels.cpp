// Decoder kernels: RMSNorm, rotary embeddings, and causal attention over a paged K/V cache.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels_internal.hpp"
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

void rotary_tables(const int32_t* positions, int64_t T, int head_dim, double theta, double position_scale,
                   float* cos_out, float* sin_out) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(theta, 2.0 * i / head_dim);
  for (int64_t t = 0; t < T; ++t) {
    const double p = positions[t] / position_scale;
    for (int i = 0; i < half; ++i) {
      const double a = p * inv_freq[i];
      cos_out[t * half + i] = static_cast<float>(std::cos(a));
      sin_out[t * half + i] = static_cast<float>(std::sin(a));
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

constexpr int kRowsPerTask = 16;

// Query rows [r0, r1) of one sequence, one query head: scores over the cache, softmax, weighted V.
void attend_rows(const float* q, int64_t ldq, const paged_kv_view& kv, const paged_seq& s, int r0, int r1, int kvh,
                 int d, float scale, float* out, int64_t ldo, std::vector<float>& scores) {
  const int bt = kv.block_tokens;
  for (int r = r0; r < r1; ++r) {
    const float* qr = q + int64_t{s.row + r} * ldq;
    float* o = out + int64_t{s.row + r} * ldo;
    const int len = s.start_pos + r + 1;  // keys 0 .. own position
    if (static_cast<int>(scores.size()) < len) scores.resize(static_cast<size_t>(len));
    for (int j0 = 0; j0 < len; j0 += bt) {
      const int64_t base = int64_t{s.block_table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride;
      const float* kb = kv.k + base;
      const int n = std::min(bt, len - j0);
      for (int j = 0; j < n; ++j) {
        const float* kr = kb + int64_t{j} * d;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < d; ++i) dot += qr[i] * kr[i];
        scores[j0 + j] = dot * scale;
      }
    }
    detail::softmax_row(scores.data(), len);
    std::fill_n(o, d, 0.0f);
    for (int j0 = 0; j0 < len; j0 += bt) {
      const int64_t base = int64_t{s.block_table[j0 / bt]} * kv.block_stride + int64_t{kvh} * kv.head_stride;
      const float* vb = kv.v + base;
      const int n = std::min(bt, len - j0);
      for (int j = 0; j < n; ++j) {
        const float p = scores[j0 + j];
        const float* vr = vb + int64_t{j} * d;
#pragma omp simd
        for (int i = 0; i < d; ++i) o[i] += p * vr[i];
      }
    }
  }
}

}  // namespace

void attention_paged(strided q, paged_kv_view kv, const paged_seq* seqs, int num_seqs, int num_heads,
                     int num_kv_heads, int head_dim, strided_out out) {
  struct task {
    int seq, r0, r1;
  };
  std::vector<task> tasks;
  int64_t work = 0;
  for (int s = 0; s < num_seqs; ++s) {
    for (int r = 0; r < seqs[s].rows; r += kRowsPerTask) tasks.push_back({s, r, std::min(seqs[s].rows, r + kRowsPerTask)});
    work += int64_t{seqs[s].rows} * (seqs[s].start_pos + seqs[s].rows);
  }
  const int group = num_heads / num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t n_tasks = static_cast<int64_t>(tasks.size()) * num_heads;
#pragma omp parallel if (work * num_heads * head_dim > 32768)
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_tasks; ++i) {
      const task& t = tasks[static_cast<size_t>(i / num_heads)];
      const int h = static_cast<int>(i % num_heads);
      attend_rows(q.data + int64_t{h} * head_dim, q.ld, kv, seqs[t.seq], t.r0, t.r1, h / group, head_dim, scale,
                  out.data + int64_t{h} * head_dim, out.ld, scores);
    }
  }
}

}  // namespace tessera::models
