// The Q8_0 weight-only kernel (kernels_q8.hpp): quantisation against its definition (scale as the
// CPU's own F16C rounding of max|x| / 127, every value within half a step), the linear against a
// float64 reference on the dequantised weights at every row-count path (1, 2..48, panels) with
// strides, biases and activations, bit-equality with the fp32 linear on the dequantised matrix where
// both share the blocked kernel, and the refusals of q8_0 where it does not run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <random>
#include <vector>

#include "tessera/models/bf16.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_q8.hpp"
#include "tessera/models/model.hpp"
#include "tessera/models/bf16_weights.hpp"
#include "tessera/models/kv_cache.hpp"

namespace tessera::models {
namespace {

__attribute__((target("f16c"))) float hardware_half(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(g);
  return v;
}

TEST(kernels_q8, quantisation_follows_its_definition) {
  const int64_t out = 7, in = 96;
  auto W = random_values(out * in, 1, 0.3f);
  W[5] = 0.0f;                                          // a zero in a block
  for (int j = 32; j < 64; ++j) W[static_cast<size_t>(j)] = 0.0f;  // a block of zeros: d = 0
  W[70] = 1e-30f;                                       // a tiny value
  const q8_0_weight q = q8_0_weight::quantize(W.data(), out, in);
  ASSERT_EQ(q.out(), out);
  ASSERT_EQ(q.in(), in);
  EXPECT_EQ(q.bytes(), out * in + out * (in / 32) * 4);
  std::vector<float> back(static_cast<size_t>(out * in));
  q.dequantize_rows(0, out, back.data());
  for (int64_t r = 0; r < out; ++r)
    for (int64_t b = 0; b < in / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(W[static_cast<size_t>(r * in + b * 32 + j)]));
      const float d = hardware_half(amax / 127.0f);
      ASSERT_EQ(q.scales()[r * (in / 32) + b], d) << r << " " << b;
      for (int j = 0; j < 32; ++j) {
        const int64_t i = r * in + b * 32 + j;
        const int qv = q.values()[i];
        EXPECT_LE(std::abs(qv), 127);
        EXPECT_EQ(back[static_cast<size_t>(i)], d * static_cast<float>(qv));  // the dequantised value, exactly
        // Within half a step of d (plus the fp16 rounding of d carried by |q| <= 127 steps, and x / d's
        // float rounding at a tie).
        EXPECT_LE(std::fabs(static_cast<double>(W[static_cast<size_t>(i)]) - double(d) * qv),
                  0.5001 * d + 127 * std::fabs(double(d) - amax / 127.0) + 1e-9)
            << i;
      }
    }
  // GGUF bytes of a row: the fp16 scale, then the 32 values, per block; from_blocks reads them back.
  std::vector<std::vector<uint8_t>> rows(static_cast<size_t>(out));
  std::vector<const uint8_t*> at;
  for (int64_t r = 0; r < out; ++r) {
    q.append_gguf_row(r, rows[static_cast<size_t>(r)]);
    ASSERT_EQ(rows[static_cast<size_t>(r)].size(), static_cast<size_t>(in / 32 * 34));
    at.push_back(rows[static_cast<size_t>(r)].data());
  }
  const q8_0_weight again = q8_0_weight::from_blocks(at, in);
  EXPECT_EQ(std::memcmp(again.values(), q.values(), static_cast<size_t>(out * in)), 0);
  EXPECT_EQ(std::memcmp(again.scales(), q.scales(), static_cast<size_t>(out * in / 32) * 4), 0);
  // Stacking keeps every row.
  const q8_0_weight s = q8_0_weight::stack({&q, &again});
  ASSERT_EQ(s.out(), 2 * out);
  EXPECT_EQ(std::memcmp(s.values() + out * in, q.values(), static_cast<size_t>(out * in)), 0);
  EXPECT_EQ(s.scales()[out * (in / 32) + 3], q.scales()[3]);
}

double act_ref(double v, activation a) {
  switch (a) {
    case activation::none: return v;
    case activation::relu: return v > 0 ? v : 0;
    case activation::silu: return v / (1 + std::exp(-v));
    case activation::gelu_tanh: return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case activation::gelu_erf: return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  }
  return v;
}

// Every row-count path (1; 2..48 blocked; 49+ panels through oneDNN) against float64 sums of the
// dequantised weights: |y - ref| <= 2e-6 x (sum |x w| + |b|) + 1e-6 (fp32 sums of up to 2048 terms,
// and the vectorised activations' ~1e-6 relative error).
TEST(kernels_q8, linear_matches_float64_on_the_dequantised_weights) {
  set_num_threads(2);
  struct cse { int64_t T, out, in; activation act; bool bias; int64_t ldx_pad, ldy_pad; };
  const std::vector<cse> cases = {
      {1, 37, 96, activation::none, false, 0, 0},     {1, 64, 2048, activation::silu, true, 0, 0},
      {1, 5000, 64, activation::gelu_tanh, true, 0, 0}, {2, 37, 96, activation::none, true, 3, 5},
      {3, 9, 32, activation::relu, false, 0, 0},      {5, 130, 256, activation::gelu_erf, true, 7, 1},
      {32, 200, 512, activation::silu, true, 0, 0},   {48, 64, 96, activation::gelu_tanh, false, 0, 0},
      {49, 100, 96, activation::none, true, 2, 3},    {130, 600, 2048, activation::silu, true, 0, 0},
      {300, 33, 64, activation::gelu_erf, false, 0, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " out " + std::to_string(c.out) + " in " + std::to_string(c.in));
    const int64_t ldx = c.in + c.ldx_pad, ldy = c.out + c.ldy_pad;
    auto W = random_values(c.out * c.in, 11, 0.1f);
    auto x = random_values(c.T * ldx, 12, 1.0f);
    auto b = random_values(c.out, 13, 0.5f);
    const q8_0_weight q = q8_0_weight::quantize(W.data(), c.out, c.in);
    std::vector<float> dq(W.size());
    q.dequantize_rows(0, c.out, dq.data());
    std::vector<float> y(static_cast<size_t>(c.T * ldy), -7.0f);
    linear(x.data(), c.T, q, c.bias ? b.data() : nullptr, y.data(), c.act, ldx, ldy);
    double worst = 0;
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t o = 0; o < c.out; ++o) {
        double s = c.bias ? b[static_cast<size_t>(o)] : 0.0, mag = std::fabs(s);
        for (int64_t k = 0; k < c.in; ++k) {
          const double p = double(x[static_cast<size_t>(t * ldx + k)]) * dq[static_cast<size_t>(o * c.in + k)];
          s += p;
          mag += std::fabs(p);
        }
        const double want = act_ref(s, c.act), got = y[static_cast<size_t>(t * ldy + o)];
        const double err = std::fabs(got - want), tol = 2e-6 * mag + 1e-6;
        worst = std::max(worst, err / tol);
        ASSERT_LE(err, tol) << "row " << t << " col " << o << ": " << got << " vs " << want;
      }
    for (int64_t t = 0; t < c.T; ++t)  // the padding of y untouched
      for (int64_t o = c.out; o < ldy; ++o) ASSERT_EQ(y[static_cast<size_t>(t * ldy + o)], -7.0f);
    std::printf("T %lld out %lld in %lld: worst error %.2f of the tolerance\n", (long long)c.T, (long long)c.out,
                (long long)c.in, worst);
  }
}

// 4..48 rows run fp32's own blocked kernel over the dequantised rows: the same bits as fp32's
// linear on the dequantised matrix (what a Q8_0 GGUF file loaded in fp32 computes).
TEST(kernels_q8, few_rows_equal_the_fp32_linear_on_the_dequantised_matrix_bit_for_bit) {
  set_num_threads(2);
  for (int64_t T : {4, 7, 32, 48}) {
    const int64_t out = 203, in = 256;
    auto W = random_values(out * in, 21, 0.1f);
    auto x = random_values(T * in, 22, 1.0f);
    auto b = random_values(out, 23, 0.5f);
    const q8_0_weight q = q8_0_weight::quantize(W.data(), out, in);
    std::vector<float> dq(W.size()), a(static_cast<size_t>(T * out)), f(a.size());
    q.dequantize_rows(0, out, dq.data());
    linear(x.data(), T, q, b.data(), a.data(), activation::silu);
    linear(x.data(), T, in, dq.data(), b.data(), out, f.data(), activation::silu);
    EXPECT_EQ(std::memcmp(a.data(), f.data(), a.size() * 4), 0) << "T " << T;
  }
}

TEST(kernels_q8, q8_0_is_refused_where_it_does_not_run) {
  auto d = parse_dtype("q8_0");  // tiles, the GPU baseline, encoders
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("one process only"), std::string::npos) << d.error().message();
  EXPECT_EQ(parse_dtype("q8_0", false, true).value(), dtype::q8_0);
  EXPECT_EQ(dtype_name(dtype::q8_0), "q8_0");
  auto bad = parse_dtype("q4_0", false, true);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("or q8_0"), std::string::npos) << bad.error().message();
  auto bert = load_model("bert-tiny");
  ASSERT_TRUE(bert) << bert.error().to_string();
  const status st = set_dtype(*bert, dtype::q8_0);
  EXPECT_EQ(st.code(), errc::unsupported);
  EXPECT_NE(st.message().find("decoders"), std::string::npos) << st.message();
  kv_layout kv{16, 4, dtype::q8_0};
  EXPECT_FALSE(kv.validate().ok());
}

}  // namespace
}  // namespace tessera::models
