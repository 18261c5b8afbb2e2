// The bf16 paged KV cache: attention over bf16 K/V blocks (every kernel path: decode rows with the
// register-resident and the generic kernel, prefill GEMMs, sliding window) against a float64
// attention over the same bf16-rounded K/V written here, loop by loop; a bf16 block's bytes and
// the positions a memory budget holds (twice fp32's); decoders with a bf16 cache against the fp32
// reference: fp32 weights within bf16_decoder_logit_bound, bf16 weights within
// bf16_kv_decoder_logit_bound, greedy tokens equal up to the first near tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kv_cache.hpp"
#include "util.hpp"

using namespace tessera::models;

namespace {

struct attn_case {
  const char* what;
  int heads, kv_heads, head_dim, block_tokens, window;
  std::vector<std::pair<int, int>> seqs;  // (start_pos, rows)
};

// float64 causal attention of one query row over keys [lo, pos] of the given rows.
void reference_row(const std::vector<double>& q, const std::vector<std::vector<double>>& K,
                   const std::vector<std::vector<double>>& V, int lo, int pos, std::vector<double>& out) {
  const size_t d = q.size();
  std::vector<double> s(static_cast<size_t>(pos - lo + 1));
  double mx = -INFINITY;
  for (int j = lo; j <= pos; ++j) {
    double dot = 0;
    for (size_t i = 0; i < d; ++i) dot += q[i] * K[static_cast<size_t>(j)][i];
    s[static_cast<size_t>(j - lo)] = dot / std::sqrt(double(d));
    mx = std::max(mx, s[static_cast<size_t>(j - lo)]);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  out.assign(d, 0.0);
  for (int j = lo; j <= pos; ++j)
    for (size_t i = 0; i < d; ++i) out[i] += s[static_cast<size_t>(j - lo)] / sum * V[static_cast<size_t>(j)][i];
}

// Fills a bf16 and an fp32 cache with the same bf16-rounded K/V, runs attention_paged on both and
// returns the worst |difference| from the float64 reference (bf16 cache) and between the two caches.
std::pair<double, double> run_case(const attn_case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int d = c.head_dim, bt = c.block_tokens, group = c.heads / c.kv_heads;
  int blocks = 0;
  std::vector<std::vector<int32_t>> tables;
  int rows = 0;
  for (auto [start, n] : c.seqs) {
    const int need = (start + n + bt - 1) / bt;
    std::vector<int32_t> t;
    for (int b = 0; b < need; ++b) t.push_back(blocks + need - 1 - b);  // blocks out of order
    blocks += need;
    tables.push_back(t);
    rows += n;
  }
  paged_kv_cache c16(1, c.kv_heads, d, {bt, blocks, dtype::bf16});
  paged_kv_cache c32(1, c.kv_heads, d, {bt, blocks, dtype::fp32});
  EXPECT_EQ(c16.bytes() * 2, c32.bytes());
  const int64_t head_stride = int64_t{bt} * d, block_stride = int64_t{c.kv_heads} * head_stride;
  // K/V of every position of every sequence, rounded to bf16 (kept in double for the reference).
  std::vector<std::vector<std::vector<std::vector<double>>>> K(c.seqs.size()), V(c.seqs.size());  // [seq][kvh][pos][i]
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int len = c.seqs[s].first + c.seqs[s].second;
    K[s].assign(static_cast<size_t>(c.kv_heads), {});
    V[s].assign(static_cast<size_t>(c.kv_heads), {});
    for (int h = 0; h < c.kv_heads; ++h)
      for (int p = 0; p < len; ++p) {
        std::vector<double> kr(static_cast<size_t>(d)), vr(static_cast<size_t>(d));
        for (int i = 0; i < d; ++i) {
          const bfloat16 kb = to_bf16(nd(rng) * 2.0f), vb = to_bf16(nd(rng));
          const int64_t off = int64_t{tables[s][static_cast<size_t>(p / bt)]} * block_stride + h * head_stride +
                              int64_t{p % bt} * d + i;
          c16.key16(0, 0, 0)[off] = kb;
          c16.value16(0, 0, 0)[off] = vb;
          c32.key(0, 0, 0)[off] = to_float(kb);
          c32.value(0, 0, 0)[off] = to_float(vb);
          kr[static_cast<size_t>(i)] = to_float(kb);
          vr[static_cast<size_t>(i)] = to_float(vb);
        }
        K[s][static_cast<size_t>(h)].push_back(kr);
        V[s][static_cast<size_t>(h)].push_back(vr);
      }
  }
  const int64_t ld = int64_t{c.heads} * d;
  std::vector<float> q(static_cast<size_t>(rows * ld));
  for (float& x : q) x = nd(rng);
  std::vector<paged_seq> seqs;
  int row = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    seqs.push_back({row, c.seqs[s].second, c.seqs[s].first, tables[s].data()});
    row += c.seqs[s].second;
  }
  std::vector<float> out16(q.size(), NAN), out32(q.size(), NAN);
  attention_paged({q.data(), ld}, {nullptr, nullptr, bt, block_stride, head_stride, c16.key16(0, 0, 0), c16.value16(0, 0, 0)},
                  seqs.data(), static_cast<int>(seqs.size()), c.heads, c.kv_heads, d, {out16.data(), ld}, c.window);
  attention_paged({q.data(), ld}, {c32.key(0, 0, 0), c32.value(0, 0, 0), bt, block_stride, head_stride}, seqs.data(),
                  static_cast<int>(seqs.size()), c.heads, c.kv_heads, d, {out32.data(), ld}, c.window);
  double worst_ref = 0, worst_pair = 0;
  std::vector<double> want;
  for (size_t s = 0; s < c.seqs.size(); ++s)
    for (int r = 0; r < seqs[s].rows; ++r) {
      const int pos = seqs[s].start_pos + r, lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int h = 0; h < c.heads; ++h) {
        const int64_t at = int64_t{seqs[s].row + r} * ld + int64_t{h} * d;
        std::vector<double> qr(q.begin() + at, q.begin() + at + d);
        reference_row(qr, K[s][static_cast<size_t>(h / group)], V[s][static_cast<size_t>(h / group)], lo, pos, want);
        for (int i = 0; i < d; ++i) {
          worst_ref = std::max(worst_ref, std::fabs(want[static_cast<size_t>(i)] - out16[static_cast<size_t>(at + i)]));
          worst_pair = std::max(worst_pair, std::fabs(double{out32[static_cast<size_t>(at + i)]} -
                                                      out16[static_cast<size_t>(at + i)]));
        }
      }
    }
  return {worst_ref, worst_pair};
}

}  // namespace

// Values are O(1): fp32 accumulation over a few hundred keys stays within 1e-4 of float64.
TEST(KvCacheBf16, AttentionOverBf16BlocksEqualsAFloat64ReferenceOnEveryPath) {
  const std::vector<attn_case> cases{
      {"decode rows, head_dim 64 (register kernel), GQA 4:2", 4, 2, 64, 16, 0, {{37, 1}, {0, 1}, {130, 1}}},
      {"decode rows, head_dim 24 (generic kernel), MHA", 3, 3, 24, 8, 0, {{21, 1}, {70, 2}}},
      {"prefill chunks (GEMMs), GQA 8:2", 8, 2, 32, 16, 0, {{0, 40}, {17, 23}}},
      {"sliding window 12, decode and prefill", 4, 1, 16, 4, 12, {{30, 1}, {5, 20}}},
  };
  for (const auto& c : cases) {
    auto [ref, pair] = run_case(c, 7);
    std::printf("%-55s max |bf16 cache - float64| %.2e, |bf16 cache - fp32 cache of the same values| %.2e\n", c.what,
                ref, pair);
    EXPECT_LE(ref, 1e-4) << c.what;
    EXPECT_LE(pair, 1e-5) << c.what;
  }
}

TEST(KvCacheBf16, ABf16BlockHoldsTwiceThePositionsInTheSameBytes) {
  const auto shape = make_preset_decoder("llama-tiny", 0).value().shape();
  const int L = shape.num_layers, H = shape.num_kv_heads, D = shape.head_dim();
  EXPECT_EQ(kv_layout::bytes_per_block(16, L, H, D, dtype::fp32), 2 * kv_layout::bytes_per_block(16, L, H, D, dtype::bf16));
  EXPECT_EQ(kv_layout::bytes_per_block(16, L, H, D), kv_layout::bytes_per_block(16, L, H, D, dtype::fp32));
  const int64_t budget = int64_t{64} << 20;
  const int32_t b32 = kv_layout::blocks_in(budget, 16, L, H, D, dtype::fp32);
  const int32_t b16 = kv_layout::blocks_in(budget, 16, L, H, D, dtype::bf16);
  ASSERT_GT(b32, 0);
  EXPECT_EQ(b16, 2 * b32);
  EXPECT_EQ(kv_layout::blocks_in(budget, 32, L, H, D, dtype::bf16), b32);  // a block of 32 bf16 positions = 16 fp32
  EXPECT_EQ(kv_layout::blocks_in(0, 16, L, H, D, dtype::bf16), 0);
  auto c32 = paged_kv_cache::make(shape, {16, b32, dtype::fp32});
  auto c16 = paged_kv_cache::make(shape, {16, b16, dtype::bf16});
  ASSERT_TRUE(c32 && c16);
  EXPECT_EQ(c16->positions(), 2 * c32->positions());
  EXPECT_EQ(c16->bytes(), c32->bytes());
  EXPECT_LE(c32->bytes(), budget);
  EXPECT_EQ(c16->kv_dtype(), dtype::bf16);
  EXPECT_EQ(c16->key(0, 0, 0), nullptr);  // an fp32 view of a bf16 cache is refused, not reinterpreted
  EXPECT_EQ(c32->key16(0, 0, 0), nullptr);
  std::printf("llama-tiny, 64 MiB: %d fp32 blocks (%lld positions), %d bf16 blocks (%lld positions)\n", b32,
              static_cast<long long>(c32->positions()), b16, static_cast<long long>(c16->positions()));
}

namespace {

// The logits after every position from the prompt's last on, of `seq` (prompt then generated
// tokens) run through step(): the prompt in chunks of 3, then one token a step, on a cache of
// `kv` in blocks of 8 handed out in reverse (teacher-forced: the same tokens whatever this model
// would pick, so every step stays comparable with the reference's).
std::vector<std::vector<float>> forced_logits(const decoder_model& m, const std::vector<int32_t>& seq, size_t prompt,
                                              dtype kv) {
  const int bt = 8, blocks = static_cast<int>((seq.size() + bt - 1) / bt);
  auto cache = paged_kv_cache::make(m.shape(), {bt, blocks, kv});
  EXPECT_TRUE(cache);
  std::vector<int32_t> table;
  for (int b = blocks - 1; b >= 0; --b) table.push_back(b);
  std::vector<std::vector<float>> out;
  for (size_t pos = 0; pos < seq.size();) {
    const size_t end = pos < prompt ? std::min(prompt, pos + 3) : pos + 1;
    step_batch b;
    b.seqs.push_back({0, {seq.begin() + static_cast<long>(pos), seq.begin() + static_cast<long>(end)},
                      static_cast<int32_t>(pos), table, end >= prompt});
    auto l = m.step(b, *cache);
    EXPECT_TRUE(l) << l.error().to_string();
    if (!l) return out;
    if (end >= prompt) out.push_back((*l)[0]);
    pos = end;
  }
  return out;
}

}  // namespace

// A bf16 cache under fp32 weights (bound bf16_decoder_logit_bound) and under bf16 weights
// (bf16_kv_decoder_logit_bound) against the fp32 reference (fp32 weights, fp32 cache): the logits
// at every step of the reference's sequence (teacher-forced, so steps after a near tie count too)
// within the bound, the argmax equal to the reference's token wherever its top-2 gap is not a near
// tie, and greedy_generate's tokens equal to the reference's up to the first near tie.
TEST(KvCacheBf16, DecodersWithABf16CacheStayWithinTheBound) {
  if (check_dtype_supported(dtype::bf16).code() != tessera::errc::ok) GTEST_FAIL() << "no native bf16";
  double worst[2] = {0, 0};
  int steps = 0, argmax_checked = 0, greedy_agreed = 0;
  for (const char* p : {"gpt2-tiny", "llama-tiny"}) {
    auto m = make_preset_decoder(p, 0).value();
    for (const std::vector<int32_t>& prompt : {std::vector<int32_t>{1, 42, 99, 7}, std::vector<int32_t>{5, 3, 17, 2, 60, 11, 8, 90, 33}}) {
      const generate_options base{.max_tokens = 24, .block_tokens = 8, .prefill_chunk = 3, .keep_logits = true};
      auto ref = greedy_generate(m, prompt, base).value();
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), ref.tokens.begin(), ref.tokens.end() - 1);
      generate_options kv16 = base;
      kv16.kv_dtype = dtype::bf16;
      generation greedy[2];
      std::vector<std::vector<float>> forced[2];
      greedy[0] = greedy_generate(m, prompt, kv16).value();  // fp32 weights, bf16 cache
      forced[0] = forced_logits(m, seq, prompt.size(), dtype::bf16);
      ASSERT_TRUE(m.set_dtype(dtype::bf16).ok());
      greedy[1] = greedy_generate(m, prompt, base).value();  // bf16 weights, bf16 cache (the model's dtype)
      forced[1] = forced_logits(m, seq, prompt.size(), dtype::bf16);
      ASSERT_TRUE(m.set_dtype(dtype::fp32).ok());
      for (int w = 0; w < 2; ++w) {
        const double bound = w == 0 ? bf16_decoder_logit_bound : bf16_kv_decoder_logit_bound;
        ASSERT_EQ(forced[w].size(), ref.logits.size());
        for (size_t i = 0; i < ref.logits.size(); ++i) {
          double mx = 1, diff = 0;
          for (size_t v = 0; v < ref.logits[i].size(); ++v) {
            mx = std::max(mx, std::fabs(double{ref.logits[i][v]}));
            diff = std::max(diff, std::fabs(double{ref.logits[i][v]} - forced[w][i][v]));
          }
          EXPECT_GT(diff, 0.0) << p << " step " << i << ": the bf16 cache changed nothing";
          worst[w] = std::max(worst[w], diff / mx);
          EXPECT_LE(diff / mx, bound) << p << " step " << i << (w ? " (bf16 weights)" : " (fp32 weights)");
          ++steps;
          if (ref.top2_margin[i] < bf16_decoder_near_tie(mx, bound)) continue;
          EXPECT_EQ(std::max_element(forced[w][i].begin(), forced[w][i].end()) - forced[w][i].begin(), ref.tokens[i]);
          ++argmax_checked;
        }
        for (size_t i = 0; i < ref.tokens.size() && i < greedy[w].tokens.size(); ++i) {
          double mx = 1;
          for (float x : ref.logits[i]) mx = std::max(mx, std::fabs(double{x}));
          if (ref.top2_margin[i] < bf16_decoder_near_tie(mx, bound)) break;
          ASSERT_EQ(greedy[w].tokens[i], ref.tokens[i]) << p << " step " << i;
          ++greedy_agreed;
        }
      }
    }
  }
  EXPECT_EQ(steps, 2 * 2 * 2 * 24);
  std::printf("bf16 cache: worst scaled logit diff %.4f with fp32 weights (bound %.2f), %.4f with bf16 weights (bound "
              "%.2f) over %d teacher-forced steps; argmax checked at %d steps off a near tie, %d greedy tokens equal "
              "before the first near tie\n",
              worst[0], bf16_decoder_logit_bound, worst[1], bf16_kv_decoder_logit_bound, steps, argmax_checked,
              greedy_agreed);
}
