// Every kernel against a plain loop reference (double accumulation). Tolerances stated per test.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/models/batch.hpp"
#include "tessera/models/kernels.hpp"

namespace tessera::models {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed, float amp = 1.0f) {
  splitmix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = (2.0f * r.unit_float() - 1.0f) * amp;
  return v;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Row counts of every path: a single row, the few-row kernel (4..48 rows, blocks of 4 rows of x by
// 6 of W: whole and partial row blocks at 16, 17, 31, 32, 33, a decode batch's sizes), oneDNN's
// matmul; `in` with and without a tail of 16 lanes, `out` a multiple of 6 and not (53: a last
// block of 5 rows of W).
TEST(kernels, linear_matches_loops_with_bias_activations_and_strides) {
  set_num_threads(2);
  for (int64_t T : {1, 2, 4, 7, 16, 17, 31, 32, 33, 48, 49, 130})
    for (int64_t in : {37, 64})
      for (int64_t out : {53, 54}) {
        const int64_t ldx = in + 4, ldy = 60;
        auto x = random_vec(T * ldx, 1 + in, 3.0f), W = random_vec(out * in, 2 + in), b = random_vec(out, 3 + in);
        for (const bool with_bias : {true, false})
          for (activation act : {activation::none, activation::gelu_erf, activation::gelu_tanh, activation::relu,
                                 activation::silu}) {
            std::vector<float> y(T * ldy, -9.0f), ref(T * ldy, -9.0f);
            linear(x.data(), T, in, W.data(), with_bias ? b.data() : nullptr, out, y.data(), act, ldx, ldy);
            for (int64_t t = 0; t < T; ++t)
              for (int64_t o = 0; o < out; ++o) {
                double s = with_bias ? b[o] : 0.0;
                for (int64_t i = 0; i < in; ++i) s += double(x[t * ldx + i]) * W[o * in + i];
                if (act == activation::gelu_erf) s = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
                if (act == activation::gelu_tanh)
                  s = 0.5 * s * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
                if (act == activation::relu) s = std::max(s, 0.0);
                if (act == activation::silu) s = s / (1 + std::exp(-s));
                ref[t * ldy + o] = float(s);
              }
            // |y| reaches about 20 here: 1e-5 relative
            EXPECT_LT(max_abs_diff(y, ref), 2e-4f) << "T=" << T << " in=" << in << " out=" << out
                                                   << " act=" << int(act) << " bias " << with_bias;
          }
      }
  // No bias.
  auto x = random_vec(5 * 8, 4), W = random_vec(3 * 8, 5);
  std::vector<float> y(15);
  linear(x.data(), 5, 8, W.data(), nullptr, 3, y.data());
  double s = 0;
  for (int i = 0; i < 8; ++i) s += double(x[8 + i]) * W[2 * 8 + i];
  EXPECT_NEAR(y[1 * 3 + 2], s, 1e-5);
}

TEST(kernels, linear_on_a_row_slice_of_the_weights_writes_its_columns) {
  // A tensor-parallel tile holding output rows [o0, o1) of W writes columns [o0, o1) of y.
  const int64_t T = 11, in = 24, out = 30, o0 = 7, o1 = 19;
  auto x = random_vec(T * in, 50), W = random_vec(out * in, 51), b = random_vec(out, 52);
  std::vector<float> full(T * out), part(T * out, 0.0f);
  linear(x.data(), T, in, W.data(), b.data(), out, full.data());
  linear(x.data(), T, in, W.data() + o0 * in, b.data() + o0, o1 - o0, part.data() + o0, activation::none, 0, out);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o)
      EXPECT_FLOAT_EQ(part[t * out + o], (o >= o0 && o < o1) ? full[t * out + o] : 0.0f);
}

TEST(kernels, layer_norm_add_gelu_softmax) {
  const int64_t T = 9, n = 50;
  auto x = random_vec(T * n, 6, 3.0f), r = random_vec(T * n, 7), g = random_vec(n, 8), b = random_vec(n, 9);
  std::vector<float> y(T * n), y2(T * n);
  add_layer_norm(x.data(), r.data(), T, n, g.data(), b.data(), 1e-12f, y.data());
  add(x.data(), r.data(), T * n, y2.data());
  layer_norm(y2.data(), T, n, g.data(), b.data(), 1e-12f, y2.data());  // in place
  for (int64_t t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += double(x[t * n + i]) + r[t * n + i];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) var += std::pow(double(x[t * n + i]) + r[t * n + i] - mean, 2);
    var /= n;
    for (int64_t i = 0; i < n; ++i) {
      const double ref = (double(x[t * n + i]) + r[t * n + i] - mean) / std::sqrt(var + 1e-12) * g[i] + b[i];
      EXPECT_NEAR(y[t * n + i], ref, 1e-5);
      EXPECT_NEAR(y2[t * n + i], ref, 1e-5);
    }
  }
  std::vector<float> ge(T * n);
  gelu_erf(x.data(), T * n, ge.data());
  for (int64_t i = 0; i < T * n; ++i)
    EXPECT_NEAR(ge[i], 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0))), 1e-6);
  std::vector<float> sm = x;
  softmax(sm.data(), T, n);
  for (int64_t t = 0; t < T; ++t) {
    double z = 0;
    for (int64_t i = 0; i < n; ++i) z += std::exp(double(x[t * n + i]));
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(sm[t * n + i], std::exp(double(x[t * n + i])) / z, 1e-6);
  }
}

TEST(kernels, embed_restarts_positions_per_sequence) {
  const int64_t h = 4;
  std::vector<float> word = random_vec(10 * h, 10), pos = random_vec(8 * h, 11), typ = random_vec(2 * h, 12);
  std::vector<int32_t> ids{1, 2, 3, 9, 8}, types{0, 0, 1, 1, 0}, offs{0, 3, 5};
  std::vector<float> out(5 * h);
  embed(ids.data(), types.data(), offs.data(), 2, word.data(), pos.data(), typ.data(), h, out.data());
  const int p_of[] = {0, 1, 2, 0, 1};
  for (int t = 0; t < 5; ++t)
    for (int i = 0; i < h; ++i)
      EXPECT_FLOAT_EQ(out[t * h + i], word[ids[t] * h + i] + pos[p_of[t] * h + i] + typ[types[t] * h + i]);
}

// Plain attention over one sequence and head, double precision.
void reference_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                         int64_t ld, int64_t row0, int64_t len, int64_t col0, int d, std::vector<float>& out,
                         int64_t ldo) {
  for (int64_t i = 0; i < len; ++i) {
    std::vector<double> s(len);
    double mx = -1e300;
    for (int64_t j = 0; j < len; ++j) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += double(q[(row0 + i) * ld + col0 + c]) * k[(row0 + j) * ld + col0 + c];
      s[j] = dot / std::sqrt(double(d));
      mx = std::max(mx, s[j]);
    }
    double z = 0;
    for (auto& x : s) z += (x = std::exp(x - mx));
    for (int c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < len; ++j) acc += s[j] / z * v[(row0 + j) * ld + col0 + c];
      out[(row0 + i) * ldo + col0 + c] = float(acc);
    }
  }
}

TEST(kernels, attention_packed_stays_within_sequences_and_head_subsets) {
  set_num_threads(2);
  const int heads = 6, d = 16;
  const int64_t ld = heads * d;
  const std::vector<int32_t> offs{0, 1, 9, 40, 41, 100};
  const int64_t T = offs.back();
  auto q = random_vec(T * ld, 20, 2.0f), k = random_vec(T * ld, 21, 2.0f), v = random_vec(T * ld, 22);
  std::vector<float> out(T * ld, 0.0f), ref(T * ld, 0.0f);
  attention_packed({q.data(), ld}, {k.data(), ld}, {v.data(), ld}, offs.data(), 5, heads, d, {out.data(), ld});
  for (int s = 0; s < 5; ++s)
    for (int h = 0; h < heads; ++h) reference_attention(q, k, v, ld, offs[s], offs[s + 1] - offs[s], h * d, d, ref, ld);
  EXPECT_LT(max_abs_diff(out, ref), 2e-5f);
  // A tile holding heads [2, 5) of 6 (3 tiles would not divide... any contiguous range works).
  std::vector<float> part(T * 3 * d, 0.0f);
  attention_packed({q.data() + 2 * d, ld}, {k.data() + 2 * d, ld}, {v.data() + 2 * d, ld}, offs.data(), 5, 3, d,
                   {part.data(), 3 * d});
  float m = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int c = 0; c < 3 * d; ++c) m = std::max(m, std::fabs(part[t * 3 * d + c] - ref[t * ld + 2 * d + c]));
  EXPECT_LT(m, 2e-5f);
}

TEST(kernels, attention_padded_equals_packed_on_valid_rows) {
  const int heads = 2, d = 8, max_len = 12;
  const int64_t ld = heads * d;
  const std::vector<int32_t> lengths{12, 3, 7};
  auto q = random_vec(3 * max_len * ld, 30), k = random_vec(3 * max_len * ld, 31), v = random_vec(3 * max_len * ld, 32);
  std::vector<float> out(3 * max_len * ld), ref(3 * max_len * ld);
  attention_padded({q.data(), ld}, {k.data(), ld}, {v.data(), ld}, lengths.data(), 3, max_len, heads, d,
                   {out.data(), ld});
  for (int b = 0; b < 3; ++b)
    for (int h = 0; h < heads; ++h) reference_attention(q, k, v, ld, b * max_len, lengths[b], h * d, d, ref, ld);
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < lengths[b]; ++i)
      for (int c = 0; c < ld; ++c) EXPECT_NEAR(out[(b * max_len + i) * ld + c], ref[(b * max_len + i) * ld + c], 2e-5);
}

// Random shapes, block sizes, block tables and mixes of prefill chunks (the GEMM path) and decode
// rows (the row kernel) against plain causal attention over the positions in order (double).
TEST(kernels, attention_paged_matches_loops_on_random_batches_of_chunks_and_decodes) {
  set_num_threads(2);
  splitmix64 r(77);
  for (int iter = 0; iter < 60; ++iter) {
    const int kvh = static_cast<int>(r.uniform(1, 3)), group = static_cast<int>(r.uniform(1, 4));
    const int heads = kvh * group;
    const int d = std::vector<int>{4, 12, 16, 32, 64, 72}[static_cast<size_t>(r.uniform(0, 5))];
    const int bt = static_cast<int>(r.uniform(1, 20));
    const int nseq = static_cast<int>(r.uniform(1, 4));
    const int64_t ldq = heads * d + r.uniform(0, 3);  // row strides wider than the heads
    std::vector<paged_seq> seqs;
    std::vector<std::vector<int32_t>> tables(static_cast<size_t>(nseq));
    int rows = 0, nblocks = 0;
    for (int s = 0; s < nseq; ++s) {
      const int start = r.uniform(0, 2) == 0 ? 0 : static_cast<int>(r.uniform(0, 90));
      // decode rows, short chunks, and chunks long enough to span several GEMM tasks
      const int n = std::vector<int>{1, 2, 3, 9, 40, 150}[static_cast<size_t>(r.uniform(0, 5))];
      const int blocks = (start + n + bt - 1) / bt;
      for (int b = 0; b < blocks; ++b) tables[static_cast<size_t>(s)].push_back(nblocks + b);
      nblocks += blocks;
      seqs.push_back({rows, n, start, nullptr});
      rows += n;
    }
    // Blocks shuffled across sequences: tables point anywhere in the cache.
    std::vector<int32_t> perm(static_cast<size_t>(nblocks));
    for (int b = 0; b < nblocks; ++b) perm[static_cast<size_t>(b)] = b;
    for (int b = nblocks - 1; b > 0; --b) std::swap(perm[static_cast<size_t>(b)], perm[static_cast<size_t>(r.uniform(0, b))]);
    for (int s = 0; s < nseq; ++s) {
      for (auto& b : tables[static_cast<size_t>(s)]) b = perm[static_cast<size_t>(b)];
      seqs[static_cast<size_t>(s)].block_table = tables[static_cast<size_t>(s)].data();
    }
    const int64_t head_stride = int64_t{bt} * d, block_stride = kvh * head_stride;
    auto kc = random_vec(static_cast<size_t>(nblocks * block_stride), 1000 + iter, 2.0f);
    auto vc = random_vec(static_cast<size_t>(nblocks * block_stride), 2000 + iter);
    auto q = random_vec(static_cast<size_t>(rows * ldq), 3000 + iter, 2.0f);
    const int64_t ldo = heads * d + 1;
    std::vector<float> out(static_cast<size_t>(rows * ldo), -7.0f);
    attention_paged({q.data(), ldq}, {kc.data(), vc.data(), bt, block_stride, head_stride}, seqs.data(), nseq, heads,
                    kvh, d, {out.data(), ldo});
    auto at = [&](const std::vector<float>& c, const paged_seq& s, int pos, int h) {
      return c.data() + s.block_table[pos / bt] * block_stride + h * head_stride + (pos % bt) * d;
    };
    float worst = 0;
    for (const auto& s : seqs)
      for (int i = 0; i < s.rows; ++i)
        for (int h = 0; h < heads; ++h) {
          const int len = s.start_pos + i + 1;
          const float* qr = q.data() + (s.row + i) * ldq + h * d;
          std::vector<double> p(static_cast<size_t>(len));
          double mx = -1e300, z = 0;
          for (int j = 0; j < len; ++j) {
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += double(qr[c]) * at(kc, s, j, h / group)[c];
            p[static_cast<size_t>(j)] = dot / std::sqrt(double(d));
            mx = std::max(mx, p[static_cast<size_t>(j)]);
          }
          for (auto& x : p) z += (x = std::exp(x - mx));
          for (int c = 0; c < d; ++c) {
            double o = 0;
            for (int j = 0; j < len; ++j) o += p[static_cast<size_t>(j)] / z * at(vc, s, j, h / group)[c];
            worst = std::max(worst, std::fabs(float(o) - out[static_cast<size_t>((s.row + i) * ldo + h * d + c)]));
          }
        }
    EXPECT_LT(worst, 2e-5f) << "iteration " << iter << ": " << nseq << " sequences, " << heads << " heads / " << kvh
                            << " kv heads, head_dim " << d << ", block " << bt;
    for (int64_t t = 0; t < rows; ++t)  // the column past the heads is never written
      ASSERT_EQ(out[static_cast<size_t>(t * ldo + heads * d)], -7.0f);
  }
}

TEST(kernels, pooler_classifier_uses_cls_rows) {
  const int64_t h = 6;
  const int labels = 3;
  auto x = random_vec(10 * h, 40), pw = random_vec(h * h, 41), pb = random_vec(h, 42), cw = random_vec(labels * h, 43),
       cb = random_vec(labels, 44);
  const std::vector<int32_t> rows{0, 4, 9};
  std::vector<float> logits(3 * labels);
  pooler_classifier(x.data(), h, rows.data(), 3, h, pw.data(), pb.data(), cw.data(), cb.data(), labels, logits.data());
  for (int s = 0; s < 3; ++s) {
    std::vector<double> pooled(h);
    for (int o = 0; o < h; ++o) {
      double a = pb[o];
      for (int i = 0; i < h; ++i) a += double(x[rows[s] * h + i]) * pw[o * h + i];
      pooled[o] = std::tanh(a);
    }
    for (int l = 0; l < labels; ++l) {
      double a = cb[l];
      for (int i = 0; i < h; ++i) a += pooled[i] * cw[l * h + i];
      EXPECT_NEAR(logits[s * labels + l], a, 1e-5);
    }
  }
}

}  // namespace
}  // namespace tessera::models
