// Multi-head attention, packed (per sequence, no padding) and padded (GPU style, masked), in fp32
// and bf16.
// fp32: each (sequence, head) pair is two oneDNN sgemm calls (S = Q K^T, O = P V) around a row softmax;
// pairs run in parallel, longest first, and sgemm runs single-threaded inside the parallel loop.
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels_internal.hpp"
#include "tessera/common/check.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_bf16.hpp"
#include "tessera/models/op_profile.hpp"

namespace tessera::models {
namespace {

// One thread's clock over attention's parts when the forward is profiled: lap(part) adds the time
// since the previous lap to that part; merge() adds the thread's sums to the profile.
struct part_clock {
  forward_profile* p;
  std::array<double, kAttentionParts> secs{};
  double last = 0;
  explicit part_clock(forward_profile* prof) : p(prof) { start(); }
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void start() {
    if (p) last = now();
  }
  void lap(attention_part part) {
    if (!p) return;
    const double t = now();
    secs[static_cast<size_t>(part)] += t - last;
    last = t;
  }
  void merge() {
    if (!p) return;
#pragma omp critical(tessera_attention_profile)
    for (size_t i = 0; i < secs.size(); ++i) p->attention_thread_secs[i] += secs[i];
  }
};

template <class Items>
void add_attention_flops(forward_profile* p, const Items& items, int head_dim) {
  if (!p) return;
  for (const auto& it : items)
    p->flops[static_cast<size_t>(forward_op::attention)] += 4.0 * double(it.len) * double(it.len) * head_dim;
}

// One head of one sequence: rows [row0, row0 + len) of q/k/v/out; keys beyond `valid` masked.
void attend_one(const strided& q, const strided& k, const strided& v, const strided_out& out, int64_t row0,
                int64_t len, int64_t valid, int64_t col0, int head_dim, float scale, std::vector<float>& scores,
                part_clock& clock) {
  scores.resize(static_cast<size_t>(len * len));
  float* s = scores.data();
  const float* qh = q.data + row0 * q.ld + col0;
  const float* kh = k.data + row0 * k.ld + col0;
  const float* vh = v.data + row0 * v.ld + col0;
  float* oh = out.data + row0 * out.ld + col0;
  dnnl_status_t st = dnnl_sgemm('N', 'T', len, len, head_dim, scale, qh, q.ld, kh, k.ld, 0.0f, s, len);
  TESSERA_CHECK(st == dnnl_success) << "attention sgemm QK^T failed";
  clock.lap(attention_part::scores_gemm);
  for (int64_t i = 0; i < len; ++i) {
    float* row = s + i * len;
    for (int64_t j = valid; j < len; ++j) row[j] = -INFINITY;
    detail::softmax_row(row, len);
  }
  clock.lap(attention_part::softmax);
  st = dnnl_sgemm('N', 'N', len, head_dim, len, 1.0f, s, len, vh, v.ld, 0.0f, oh, out.ld);
  TESSERA_CHECK(st == dnnl_success) << "attention sgemm PV failed";
  clock.lap(attention_part::context_gemm);
}

struct work_item {
  int64_t row0, len, valid;
  int head;
};

std::vector<work_item> packed_items(const int32_t* seq_offsets, int num_seqs, int num_heads) {
  std::vector<work_item> items;
  items.reserve(static_cast<size_t>(num_seqs) * num_heads);
  for (int s = 0; s < num_seqs; ++s) {
    const int64_t len = seq_offsets[s + 1] - seq_offsets[s];
    TESSERA_CHECK(len >= 0) << "seq_offsets decrease at sequence " << s;
    if (len == 0) continue;
    for (int h = 0; h < num_heads; ++h) items.push_back({seq_offsets[s], len, len, h});
  }
  // Longest first so the dynamic schedule balances the tail.
  std::stable_sort(items.begin(), items.end(), [](const work_item& a, const work_item& b) { return a.len > b.len; });
  return items;
}

void run_items(std::vector<work_item>& items, const strided& q, const strided& k, const strided& v,
               const strided_out& out, int head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t n = static_cast<int64_t>(items.size());
  forward_profile* prof = current_forward_profile();
  add_attention_flops(prof, items, head_dim);
#pragma omp parallel if (n > 1)
  {
    std::vector<float> scores;
    part_clock clock(prof);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t i = 0; i < n; ++i) {
      const auto& it = items[static_cast<size_t>(i)];
      clock.start();
      attend_one(q, k, v, out, it.row0, it.len, it.valid, int64_t{it.head} * head_dim, head_dim, scale, scores,
                 clock);
    }
    clock.merge();
  }
}

// bf16: both products on oneDNN's bf16 brgemm with fp32 results: S = Q K^T, the softmax in fp32,
// P rounded to bf16, O = P V. brgemm needs the row count fixed when the primitive is made (a
// runtime count falls back to gemm:jit, slower than fp32 sgemm here), so a sequence of L rows runs
// padded to Lp, L rounded up to a multiple of 32: at most 16 shapes up to 512, each primitive made
// once and kept. Keys beyond `valid` are masked (P's columns there are 0) and rows beyond L are
// not read back. Padded (GPU style) items mask the keys beyond `valid` too and compute every row
// of the rectangle, as the fp32 path does.
// Q, K and V are read where they are (strided views of the caller's rows, no copy) when the Lp
// rows from the item's first row lie inside the batch's `rows` rows: the rows past L are the next
// sequences' Q, K and V, finite GEMM outputs, so S's rows and columns past L are finite and never
// read, and V's rows past L meet only P's zeros. An item whose Lp rows would run past the batch's
// end (the last sequences) is copied into blocks whose padding rows of V are zeroed. Only one
// (sequence, head)'s Lp x Lp block lives at a time, per thread.
void run_items_bf16(const std::vector<work_item>& items, int64_t rows, bf16_strided q, bf16_strided k,
                    bf16_strided v, bf16_strided_out out, int head_dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t n = static_cast<int64_t>(items.size()), d = head_dim;
  forward_profile* prof = current_forward_profile();
  add_attention_flops(prof, items, head_dim);
#pragma omp parallel if (n > 1)
  {
    std::vector<bfloat16> qb, kb, vb, pb;
    std::vector<float> s, o;
    part_clock clock(prof);
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t i = 0; i < n; ++i) {
      const auto& it = items[static_cast<size_t>(i)];
      clock.start();
      const int64_t col0 = int64_t{it.head} * d, len = it.len, valid = it.valid, lp = (len + 31) / 32 * 32;
      const size_t need = static_cast<size_t>(lp * d);
      if (pb.size() < static_cast<size_t>(lp * lp)) pb.resize(static_cast<size_t>(lp * lp));
      s.resize(static_cast<size_t>(lp * lp));
      o.resize(need);
      const bfloat16 *qs = q.data + it.row0 * q.ld + col0, *ks = k.data + it.row0 * k.ld + col0,
                     *vs = v.data + it.row0 * v.ld + col0;
      int64_t ldq = q.ld, ldk = k.ld, ldv = v.ld;
      if (it.row0 + lp > rows) {
        // Rows (Q, K) past `len` hold whatever an earlier item left (finite bf16 values); V's
        // padding rows meet P's zeros and are zeroed.
        if (qb.size() < need) qb.resize(need), kb.resize(need), vb.resize(need);
        for (int64_t r = 0; r < len; ++r) {
          std::copy_n(qs + r * q.ld, d, qb.data() + r * d);
          std::copy_n(ks + r * k.ld, d, kb.data() + r * d);
          std::copy_n(vs + r * v.ld, d, vb.data() + r * d);
        }
        std::fill(vb.begin() + len * d, vb.begin() + lp * d, bfloat16{});
        qs = qb.data(), ks = kb.data(), vs = vb.data();
        ldq = ldk = ldv = d;
      }
      clock.lap(attention_part::copy_in);
      // S [lp, lp] = Q K^T: K's rows are the "weight" rows of a linear layer.
      linear(qs, lp, bf16_weight::view(ks, lp, d, ldk), nullptr, s.data(), activation::none, ldq, lp);
      clock.lap(attention_part::scores_gemm);
      for (int64_t r = 0; r < len; ++r) {
        float* row = s.data() + r * lp;
        for (int64_t c = 0; c < valid; ++c) row[c] *= scale;
        detail::softmax_row(row, valid);
        to_bf16(row, valid, pb.data() + r * lp);
        std::fill_n(pb.data() + r * lp + valid, lp - valid, bfloat16{});  // keys from `valid` on: P = 0
      }
      clock.lap(attention_part::softmax);
      // O [lp, d] = P V: V [lp, d] is the weight read in-major.
      linear(pb.data(), lp, bf16_weight::view_in_major(vs, lp, d, ldv), nullptr, o.data());
      clock.lap(attention_part::context_gemm);
      for (int64_t r = 0; r < len; ++r) to_bf16(o.data() + r * d, d, out.data + (it.row0 + r) * out.ld + col0);
      clock.lap(attention_part::copy_out);
    }
    clock.merge();
  }
}

std::vector<work_item> padded_items(const int32_t* lengths, int batch, int max_len, int num_heads) {
  std::vector<work_item> items;
  items.reserve(static_cast<size_t>(batch) * num_heads);
  for (int b = 0; b < batch; ++b) {
    TESSERA_CHECK(lengths[b] >= 1 && lengths[b] <= max_len) << "padded length " << lengths[b] << " of " << max_len;
    for (int h = 0; h < num_heads; ++h) items.push_back({int64_t{b} * max_len, max_len, lengths[b], h});
  }
  return items;
}

}  // namespace

void attention_packed(strided q, strided k, strided v, const int32_t* seq_offsets, int num_seqs, int num_heads,
                      int head_dim, strided_out out) {
  std::vector<work_item> items = packed_items(seq_offsets, num_seqs, num_heads);
  run_items(items, q, k, v, out, head_dim);
}

void attention_packed(bf16_strided q, bf16_strided k, bf16_strided v, const int32_t* seq_offsets, int num_seqs,
                      int num_heads, int head_dim, bf16_strided_out out) {
  run_items_bf16(packed_items(seq_offsets, num_seqs, num_heads), num_seqs > 0 ? seq_offsets[num_seqs] : 0, q, k, v,
                 out, head_dim);
}

void attention_padded(bf16_strided q, bf16_strided k, bf16_strided v, const int32_t* lengths, int batch,
                      int max_len, int num_heads, int head_dim, bf16_strided_out out) {
  run_items_bf16(padded_items(lengths, batch, max_len, num_heads), int64_t{batch} * max_len, q, k, v, out,
                 head_dim);
}

void attention_padded(strided q, strided k, strided v, const int32_t* lengths, int batch, int max_len,
                      int num_heads, int head_dim, strided_out out) {
  std::vector<work_item> items = padded_items(lengths, batch, max_len, num_heads);
  run_items(items, q, k, v, out, head_dim);
}

}  // namespace tessera::models
