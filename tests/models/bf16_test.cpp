// The bf16 forward against the fp32 reference: conversions (against an independent rounding),
// each bf16 kernel against its fp32 twin on bf16-representable inputs (so only accumulation order
// and the final rounding differ), whole models on random weights (bounded logit error and argmax
// agreement), and tessera-models --dtype as a user runs it, on this CPU and on one without bf16
// (ONEDNN_MAX_CPU_ISA lowers oneDNN's ISA).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "tessera/models/bf16_weights.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/kernels_bf16.hpp"
#include "tessera/models/op_profile.hpp"
#include "tessera/test/bf16_bounds.hpp"
#include "tessera/test/run_tool.hpp"
#include "tessera/test/tool_tables.hpp"
#include "dtype_cases.hpp"

namespace tessera::models {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent rounding: the nearer of the two bf16 neighbours of a finite normal float, computed
// in double; a tie goes to the even one. The upper neighbour of the largest finite bf16 is 2^128
// (infinity after rounding).
uint16_t reference_round(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  auto value = [](uint16_t b) {
    const int e = (b >> 7) & 0xff;
    const double m = 1.0 + (b & 0x7f) / 128.0;
    return ((b & 0x8000) ? -1.0 : 1.0) * std::ldexp(m, e - 127);
  };
  const double x = f, dlo = std::fabs(x - value(lo)), dhi = std::fabs(value(hi) - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(bf16, conversion_rounds_to_nearest_even_and_vector_equals_scalar) {
  splitmix64 rng(17);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) xs.push_back(float_of(static_cast<uint32_t>(rng.next())));
  // Ties, both parities; the largest finite float (rounds to inf); specials.
  for (uint32_t base : {0x3f800000u, 0x3f810000u, 0xbf7f0000u})
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u}) xs.push_back(float_of(base | low));
  for (float f : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3.4028235e38f, 1e-40f, -1e-40f, 1.0f, -2.5f}) xs.push_back(f);
  std::vector<bfloat16> vec(xs.size());
  to_bf16(xs.data(), static_cast<int64_t>(xs.size()), vec.data());
  for (size_t i = 0; i < xs.size(); ++i) {
    const float f = xs[i];
    const uint16_t got = to_bf16(f).bits;
    ASSERT_EQ(vec[i].bits, got) << "vector and scalar differ on " << std::hex << bits_of(f);
    const uint32_t exp = bits_of(f) & 0x7f800000u;
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(to_float(bfloat16{got}))) << std::hex << bits_of(f);
    } else if (exp == 0x7f800000u) {
      EXPECT_EQ(got, bits_of(f) >> 16);
    } else if (exp == 0) {
      EXPECT_EQ(got, (bits_of(f) >> 16) & 0x8000u) << "denormals flush to a signed zero";
    } else {
      ASSERT_EQ(got, reference_round(f)) << std::hex << bits_of(f);
    }
  }
  // Widening is exact, vector and scalar alike, and round-trips.
  std::vector<float> back(vec.size());
  to_float(vec.data(), static_cast<int64_t>(vec.size()), back.data());
  for (size_t i = 0; i < vec.size(); ++i) {
    ASSERT_EQ(bits_of(back[i]), uint32_t{vec[i].bits} << 16);
    if (!std::isnan(back[i])) {
      ASSERT_EQ(to_bf16(back[i]).bits, vec[i].bits);
    }
  }
}

TEST(bf16, parse_dtype_names_both_choices) {
  EXPECT_EQ(parse_dtype("fp32").value(), dtype::fp32);
  EXPECT_EQ(parse_dtype("bf16").value(), dtype::bf16);
  for (const char* bad : {"", "fp16", "BF16", "bf16 ", "int8"}) {
    auto d = parse_dtype(bad);
    ASSERT_FALSE(d) << bad;
    EXPECT_NE(d.error().message().find("use fp32 or bf16"), std::string::npos);
  }
  EXPECT_EQ(dtype_bytes(dtype::bf16), 2);
  EXPECT_EQ(dtype_bytes(dtype::fp32), 4);
}

// The bf16 path needs this CPU to run it; the suite runs where it does (see the CLI test for the
// refusal on one that does not).
void require_bf16() {
  const status st = check_dtype_supported(dtype::bf16);
  ASSERT_TRUE(st.code() == tessera::errc::ok) << st.to_string();
}

std::vector<float> random_floats(int64_t n, uint64_t seed, float amp) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_uniform_tensor("bf16_test", n, seed, 0.0f, amp, v.data());
  return v;
}

// Rounds to bf16 values in place; returns the bf16 copy.
std::vector<bfloat16> round_to_bf16(std::vector<float>& v) {
  std::vector<bfloat16> h(v.size());
  to_bf16(v.data(), static_cast<int64_t>(v.size()), h.data());
  to_float(h.data(), static_cast<int64_t>(h.size()), v.data());
  return h;
}

// One rounding to bf16 (half an ulp: 2^-8 of the value) plus fp32 accumulation-order noise.
void expect_bf16_close(const std::vector<float>& want, const bfloat16* got, int64_t rows, int64_t cols, int64_t ld,
                       const std::string& what) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float w = want[static_cast<size_t>(r * cols + c)], g = to_float(got[r * ld + c]);
      ASSERT_LE(std::fabs(g - w), std::fabs(w) / 256.0f + 1e-4f) << what << " row " << r << " col " << c;
    }
}

TEST(bf16, linear_equals_fp32_on_bf16_values_for_every_row_count) {
  require_bf16();
  set_num_threads(2);
  const int64_t in = 96, out = 80, ldx = 100, ldy = 90;
  auto W = random_floats(out * in, 1, 0.2f), bias = random_floats(out, 2, 0.1f);
  round_to_bf16(W);
  const bf16_weight packed = bf16_weight::pack(W.data(), out, in);
  EXPECT_GE(packed.bytes(), out * in * 2);
  for (int64_t T : {1, 2, 7, 31, 32, 33, 100, 511, 512, 513, 1060}) {
    auto x = random_floats(T * ldx, 10 + static_cast<uint64_t>(T), 1.0f);
    const auto x16 = round_to_bf16(x);
    for (activation act : {activation::none, activation::gelu_erf}) {
      std::vector<float> want(static_cast<size_t>(T * out));
      linear(x.data(), T, in, W.data(), bias.data(), out, want.data(), act, ldx, out);
      std::vector<bfloat16> y(static_cast<size_t>(T * ldy), bfloat16{0x7fc0});
      linear(x16.data(), T, packed, bias.data(), y.data(), act, ldx, ldy);
      expect_bf16_close(want, y.data(), T, out, ldy, "T=" + std::to_string(T));
      for (int64_t r = 0; r < T; ++r)  // the stride's gap is not written
        ASSERT_EQ(y[static_cast<size_t>(r * ldy + out)].bits, 0x7fc0) << "row " << r;
      std::vector<float> y32(static_cast<size_t>(T * out));
      linear(x16.data(), T, packed, nullptr, y32.data(), act, ldx);
      std::vector<float> want_nb(static_cast<size_t>(T * out));
      linear(x.data(), T, in, W.data(), nullptr, out, want_nb.data(), act, ldx, out);
      for (size_t i = 0; i < y32.size(); ++i) ASSERT_NEAR(y32[i], want_nb[i], 1e-4f) << "fp32 out T=" << T;
    }
  }
}

// A plain [out, in] weight with a row stride (what tiles hold): up to 4 rows run the hand-written
// AVX512-BF16 kernel, from 5 on oneDNN; both against fp32 on the same bf16 values, for widths with
// and without a tail of 32, row counts of W not a multiple of 4, every activation, bf16 and fp32
// results, and gaps in every stride left unwritten.
TEST(bf16, linear_on_a_view_equals_fp32_on_bf16_values_for_few_rows) {
  require_bf16();
  set_num_threads(2);
  for (int64_t in : {33, 64, 97, 768}) {
    const int64_t out = 81, ldw = in + 5, ldx = in + 3, ldy = out + 2;
    auto Wf = random_floats(out * ldw, 3 + static_cast<uint64_t>(in), 0.2f), bias = random_floats(out, 4, 0.1f);
    const auto W16 = round_to_bf16(Wf);
    std::vector<float> W(static_cast<size_t>(out * in));  // the dense fp32 twin of the view's rows
    for (int64_t o = 0; o < out; ++o)
      std::copy_n(Wf.data() + o * ldw, in, W.data() + o * in);
    const bf16_weight view = bf16_weight::view(W16.data(), out, in, ldw);
    for (int64_t T : {1, 2, 3, 4, 5}) {
      auto x = random_floats(T * ldx, 20 + static_cast<uint64_t>(T), 1.0f);
      const auto x16 = round_to_bf16(x);
      for (activation act : {activation::none, activation::gelu_erf, activation::gelu_tanh, activation::relu,
                             activation::silu}) {
        const std::string what = "in=" + std::to_string(in) + " T=" + std::to_string(T) + " act=" +
                                 std::to_string(static_cast<int>(act));
        std::vector<float> want(static_cast<size_t>(T * out));
        linear(x.data(), T, in, W.data(), bias.data(), out, want.data(), act, ldx, out);
        std::vector<bfloat16> y(static_cast<size_t>(T * ldy), bfloat16{0x7fc0});
        linear(x16.data(), T, view, bias.data(), y.data(), act, ldx, ldy);
        expect_bf16_close(want, y.data(), T, out, ldy, what);
        std::vector<float> y32(static_cast<size_t>(T * ldy), -7.0f);
        linear(x16.data(), T, view, bias.data(), y32.data(), act, ldx, ldy);
        for (int64_t r = 0; r < T; ++r) {
          for (int64_t c = 0; c < out; ++c)
            ASSERT_NEAR(y32[static_cast<size_t>(r * ldy + c)], want[static_cast<size_t>(r * out + c)], 2e-4f)
                << what << " fp32 out row " << r << " col " << c;
          ASSERT_EQ(y[static_cast<size_t>(r * ldy + out)].bits, 0x7fc0) << what << " row " << r;
          ASSERT_EQ(y32[static_cast<size_t>(r * ldy + out)], -7.0f) << what << " row " << r;
        }
      }
    }
  }
}

TEST(bf16, attention_equals_fp32_on_bf16_values) {
  require_bf16();
  set_num_threads(2);
  const int heads = 2, d = 64;
  const int64_t h = heads * d, ld = 3 * h;
  const std::vector<int32_t> offsets{0, 1, 6, 70, 70, 200, 203};
  const int n = static_cast<int>(offsets.size()) - 1;
  const int64_t T = offsets.back();
  auto qkv = random_floats(T * ld, 5, 2.0f);
  const auto qkv16 = round_to_bf16(qkv);
  std::vector<float> want(static_cast<size_t>(T * h));
  attention_packed({qkv.data(), ld}, {qkv.data() + h, ld}, {qkv.data() + 2 * h, ld}, offsets.data(), n, heads, d,
                   {want.data(), h});
  std::vector<bfloat16> got(static_cast<size_t>(T * h));
  attention_packed(bf16_strided{qkv16.data(), ld}, bf16_strided{qkv16.data() + h, ld},
                   bf16_strided{qkv16.data() + 2 * h, ld}, offsets.data(), n, heads, d,
                   bf16_strided_out{got.data(), h});
  // Two roundings: P to bf16 before P V (each probability within 2^-9 of itself, so the context
  // moves by at most 2^-9 sum_j P_j |V_j|), then the context to bf16 (|w| / 256). sum_j P_j |V_j|
  // is the fp32 attention over |V|; 2^-8 leaves room for fp32 accumulation order.
  std::vector<float> qkv_abs = qkv;
  for (int64_t r = 0; r < T; ++r)
    for (int64_t c = 2 * h; c < 3 * h; ++c) qkv_abs[static_cast<size_t>(r * ld + c)] = std::fabs(qkv_abs[static_cast<size_t>(r * ld + c)]);
  std::vector<float> pv_abs(static_cast<size_t>(T * h));
  attention_packed({qkv_abs.data(), ld}, {qkv_abs.data() + h, ld}, {qkv_abs.data() + 2 * h, ld}, offsets.data(), n,
                   heads, d, {pv_abs.data(), h});
  double worst = 0;  // the largest error in units of the bound: a bound that is never approached tests little
  for (int64_t r = 0; r < T; ++r)
    for (int64_t c = 0; c < h; ++c) {
      const size_t i = static_cast<size_t>(r * h + c);
      const float w = want[i], g = to_float(got[i]), bound = std::fabs(w) / 256.0f + pv_abs[i] / 256.0f + 1e-4f;
      ASSERT_LE(std::fabs(g - w), bound) << "attention row " << r << " col " << c << " (sum P|V| " << pv_abs[i] << ")";
      worst = std::max(worst, double(std::fabs(g - w) / bound));
    }
  EXPECT_GT(worst, 0.05) << "bf16 attention equals fp32 within far less than one rounding: did it run in bf16?";
}

// bf16 attention reads Q, K and V in place (strided views) for a sequence whose 32-row padded
// block lies inside the batch, and copies only a sequence whose block would run past the batch's
// last row. Every sequence's context must equal that of the same sequence run alone (always the
// copied path: its block runs past a batch of one), bit for bit, and rows past the batch (NaN
// here) must never be read.
TEST(bf16, attention_reads_q_k_v_in_place_and_nothing_past_the_batch) {
  require_bf16();
  set_num_threads(2);
  const int heads = 3, d = 64;
  const int64_t h = heads * d, ld = 3 * h;
  const std::vector<int32_t> offsets{0, 5, 40, 41, 100, 133, 140};  // lengths 5, 35, 1, 59, 33, 7
  const int n = static_cast<int>(offsets.size()) - 1;
  const int64_t T = offsets.back(), extra = 64;
  auto qkv = random_floats(T * ld, 21, 2.0f);
  const auto qkv16 = round_to_bf16(qkv);
  std::vector<bfloat16> buf(static_cast<size_t>((T + extra) * ld), bfloat16{0x7fc0});  // NaN past the batch
  std::copy(qkv16.begin(), qkv16.end(), buf.begin());
  std::vector<bfloat16> got(static_cast<size_t>(T * h));
  attention_packed(bf16_strided{buf.data(), ld}, bf16_strided{buf.data() + h, ld}, bf16_strided{buf.data() + 2 * h, ld},
                   offsets.data(), n, heads, d, bf16_strided_out{got.data(), h});
  int in_place = 0;
  for (int s = 0; s < n; ++s) {
    const int64_t r0 = offsets[s], len = offsets[s + 1] - r0;
    if (r0 + (len + 31) / 32 * 32 <= T) ++in_place;
    std::vector<bfloat16> one(qkv16.begin() + r0 * ld, qkv16.begin() + (r0 + len) * ld), alone(static_cast<size_t>(len * h));
    const std::vector<int32_t> off1{0, static_cast<int32_t>(len)};
    attention_packed(bf16_strided{one.data(), ld}, bf16_strided{one.data() + h, ld},
                     bf16_strided{one.data() + 2 * h, ld}, off1.data(), 1, heads, d, bf16_strided_out{alone.data(), h});
    for (int64_t i = 0; i < len * h; ++i) {
      const float g = to_float(got[static_cast<size_t>(r0 * h + i)]);
      ASSERT_TRUE(std::isfinite(g)) << "sequence " << s << " row " << i / h << ": a row past the batch was read";
      ASSERT_EQ(got[static_cast<size_t>(r0 * h + i)].bits, alone[static_cast<size_t>(i)].bits)
          << "sequence " << s << " row " << i / h << " col " << i % h;
    }
  }
  EXPECT_GE(in_place, 3) << "the batch should run most sequences on the in-place path";
  EXPECT_LT(in_place, n) << "the batch should run its last sequence on the copied path";
}

TEST(bf16, layer_norm_and_embeddings_compute_in_fp32) {
  require_bf16();
  const int64_t T = 37, n = 200;
  auto x = random_floats(T * n, 7, 3.0f), r = random_floats(T * n, 8, 3.0f);
  auto gamma = random_floats(n, 9, 0.5f), beta = random_floats(n, 10, 0.5f);
  for (float& g : gamma) g += 1.0f;
  auto x16 = round_to_bf16(x);
  const auto r16 = round_to_bf16(r);
  std::vector<float> want(static_cast<size_t>(T * n));
  add_layer_norm(x.data(), r.data(), T, n, gamma.data(), beta.data(), 1e-12f, want.data());
  add_layer_norm(x16.data(), r16.data(), T, n, gamma.data(), beta.data(), 1e-12f, x16.data());  // y aliases x
  expect_bf16_close(want, x16.data(), T, n, n, "add_layer_norm");
  std::vector<bfloat16> y16(static_cast<size_t>(T * n));
  layer_norm(r.data(), T, n, gamma.data(), beta.data(), 1e-12f, want.data());
  layer_norm(r.data(), T, n, gamma.data(), beta.data(), 1e-12f, y16.data());
  expect_bf16_close(want, y16.data(), T, n, n, "layer_norm");

  // Embeddings: the same sum of the same (bf16-valued) rows, bit for bit.
  const int64_t vocab = 50, positions = 20, hidden = 40;
  auto word = random_floats(vocab * hidden, 11, 1.0f), pos = random_floats(positions * hidden, 12, 1.0f),
       type = random_floats(2 * hidden, 13, 1.0f);
  const auto word16 = round_to_bf16(word), pos16 = round_to_bf16(pos), type16 = round_to_bf16(type);
  const std::vector<int32_t> ids{3, 49, 0, 7, 7, 1, 2}, types{0, 1, 1, 0, 0, 1, 0}, offs{0, 3, 3, 7};
  std::vector<float> e32(ids.size() * hidden), e16(ids.size() * hidden);
  embed(ids.data(), types.data(), offs.data(), 3, word.data(), pos.data(), type.data(), hidden, e32.data());
  embed(ids.data(), types.data(), offs.data(), 3, word16.data(), pos16.data(), type16.data(), hidden, e16.data());
  EXPECT_EQ(e32, e16);
}

using test_support::compare_logits;
using test_support::kBf16Agreement;
using test_support::kBf16Decided;
using test_support::kBf16MaxAbs;

// padded_batch > 0: the padded (GPU style) bf16 forward too, in batches of that many sequences,
// held to the same bounds.
void check_model(const std::string& preset, const std::vector<int>& lengths, int padded_batch = 0) {
  require_bf16();
  set_num_threads(2);
  auto fp32 = load_model(preset);
  ASSERT_TRUE(fp32) << fp32.error().to_string();
  bert_model bf16 = *fp32;
  ASSERT_TRUE(set_dtype(bf16, dtype::bf16).code() == tessera::errc::ok);
  ASSERT_TRUE(bf16.bf16);
  const bert_config& c = fp32->config;
  // bf16 matrices take half the bytes of the fp32 ones (the packed layout pads nothing here).
  EXPECT_LT(double(bf16.bf16->bytes()), 0.51 * 4.0 * double(c.parameter_count())) << preset;
  const packed_batch b = synthetic_batch(lengths, c.vocab_size, 3);
  const auto want = reference_forward(*fp32, b), got = reference_forward(bf16, b);
  const auto a = compare_logits(got, want, c.num_labels);
  std::printf("[ bf16 ] %s, %d sequences: max abs %.5f, mean abs %.6f, argmax agreement %.2f%% (%.2f%% of the %d "
              "with an fp32 margin >= %.2f)\n", preset.c_str(), b.num_seqs(), a.max_abs, a.mean_abs,
              100 * a.agreement, 100 * a.decided_agreement, a.decided, kBf16Decided);
  EXPECT_LE(a.max_abs, kBf16MaxAbs) << preset;
  EXPECT_GE(a.decided, b.num_seqs() / 4) << preset << ": too few decided sequences for the agreement to mean much";
  EXPECT_GE(a.decided_agreement, kBf16Agreement) << preset;
  EXPECT_GT(a.mean_abs, 0.0) << preset << ": bf16 logits equal fp32 exactly: the bf16 path did not run";
  if (padded_batch > 0) {
    const auto p = compare_logits(padded_forward(bf16, b, padded_batch), want, c.num_labels);
    std::printf("[ bf16 ] %s padded in batches of %d: max abs %.5f, mean abs %.6f, argmax agreement %.2f%% (%.2f%% of "
                "the %d decided)\n", preset.c_str(), padded_batch, p.max_abs, p.mean_abs, 100 * p.agreement,
                100 * p.decided_agreement, p.decided);
    EXPECT_LE(p.max_abs, kBf16MaxAbs) << preset << " padded";
    EXPECT_GE(p.decided_agreement, kBf16Agreement) << preset << " padded";
    EXPECT_GT(p.mean_abs, 0.0) << preset << ": padded bf16 logits equal fp32 exactly: the bf16 path did not run";
  }
  // Switching back gives fp32 again (bit for bit, same code on the same batch).
  bert_model back = bf16;
  ASSERT_TRUE(set_dtype(back, dtype::fp32).code() == tessera::errc::ok);
  const packed_batch two = b.slice(0, 2);
  EXPECT_EQ(reference_forward(back, two), reference_forward(*fp32, two));
}

TEST(bf16, bert_tiny_logits_match_fp32) {
  std::vector<int> lengths = seed_workload(128, 0.4, 5);
  check_model("bert-tiny", lengths, 16);
}

TEST(bf16, bert_base_logits_match_fp32) {
  // Short sequences and two long ones: seconds on 2 loaded cores.
  std::vector<int> lengths = seed_workload(40, 0.0, 6);
  lengths.push_back(512);
  check_model("bert-base", lengths);
}

// Forwards running at once in several threads (a server's workers, the attention's parallel loop)
// give, bit for bit, what one forward alone gives: oneDNN's shared scratchpad once made them
// corrupt each other (logits that changed from run to run).
TEST(bf16, concurrent_forwards_equal_a_forward_alone) {
  require_bf16();
  set_num_threads(2);
  auto m = load_model("bert-mini");
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(set_dtype(*m, dtype::bf16).code() == tessera::errc::ok);
  const packed_batch b = synthetic_batch(seed_workload(24, 0.3, 11), m->config.vocab_size, 4);
  testing::expect_concurrent_forwards_equal(*m, b, 3);
}

// ---- tessera-models --dtype, a real process ----

std::string tool() { return test_support::tool_path("tessera-models"); }

using testing::printed_logits;
constexpr auto run = testing::run_models_tool;

TEST(bf16_cli, dtype_flag_runs_bf16_and_refuses_what_it_cannot_run) {
  if (tool().empty() || !std::filesystem::exists(tool())) GTEST_FAIL() << "tessera-models not built (TESSERA_BIN_DIR)";
  require_bf16();
  const std::string args = "--model bert-tiny --threads 2 --text 'the bf16 forward' 'a second, longer sentence here'";
  std::string fp32_out, bf16_out, out;
  ASSERT_EQ(run("", args + " --dtype fp32", fp32_out), 0) << fp32_out;
  ASSERT_EQ(run("", args + " --dtype bf16", bf16_out), 0) << bf16_out;
  const auto want = printed_logits(fp32_out), got = printed_logits(bf16_out);
  ASSERT_EQ(want.size(), 4u) << fp32_out;
  ASSERT_EQ(got.size(), 4u) << bf16_out;
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], kBf16MaxAbs) << bf16_out << fp32_out;
  EXPECT_NE(got, want) << "--dtype bf16 printed fp32's logits exactly";

  EXPECT_EQ(run("", args + " --dtype fp16", out), 2);
  EXPECT_NE(out.find("unknown dtype \"fp16\": use fp32 or bf16"), std::string::npos) << out;
  // A CPU without bf16 (oneDNN's ISA lowered to plain AVX-512): a clear error, never fp32.
  EXPECT_EQ(run("ONEDNN_MAX_CPU_ISA=AVX512_CORE", args + " --dtype bf16", out), 2) << out;
  EXPECT_NE(out.find("--dtype bf16 needs a CPU with avx512_bf16 or AMX"), std::string::npos) << out;
  EXPECT_EQ(out.find("logits"), std::string::npos) << out;
  EXPECT_EQ(run("ONEDNN_MAX_CPU_ISA=AVX512_CORE", args + " --dtype fp32", out), 0) << out;
}

// tessera-bench-models --dtype bf16 runs every mode, the padded ones (b, c) through the bf16
// padded forward: RESULT lines say bf16 for each.
TEST(bf16_cli, bench_runs_the_padded_modes_in_bf16) {
  const std::string bench = test_support::tool_path("tessera-bench-models");
  if (bench.empty() || !std::filesystem::exists(bench)) GTEST_FAIL() << "tessera-bench-models not built (TESSERA_BIN_DIR)";
  require_bf16();
  std::string out;
  ASSERT_EQ(test_support::run_tool(bench, "--model bert-tiny --dtype bf16 --modes abc --requests 8 --check 0 --threads 2", out,
                                   "2>&1"), 0) << out;
  for (const char* mode : {"a_packed", "b_padded_arrival", "c_padded_sorted"})
    EXPECT_NE(out.find(std::string("RESULT impl=tessera mode=") + mode + " dtype=bf16"), std::string::npos) << out;
}

// The per-op profile (op_profile.hpp), fp32 and bf16: every op timed, the GEMMs' and attention's
// flops equal to the formulas of forward_flops (counted independently here), the ops inside the
// forward's wall time, the same logits as an unprofiled forward, and nothing recorded once off.
TEST(forward_profile, times_every_op_and_counts_the_flops) {
  for (const dtype d : {dtype::fp32, dtype::bf16}) {
    if (d == dtype::bf16) require_bf16();
    auto model = load_model("bert-mini");
    ASSERT_TRUE(model.has_value());
    ASSERT_EQ(set_dtype(*model, d).code(), tessera::errc::ok);
    const std::vector<int> lens{7, 40, 1, 33};
    const packed_batch b = synthetic_batch(lens, model->config.vocab_size);
    const auto plain = reference_forward(*model, b);
    forward_profile p;
    set_forward_profile(&p);
    const auto profiled = reference_forward(*model, b);
    set_forward_profile(nullptr);
    EXPECT_EQ(plain, profiled);
    EXPECT_EQ(p.forwards, 1);
    const bert_config& c = model->config;
    const double T = b.num_tokens(), h = c.hidden_size, f = c.intermediate_size, L = c.num_layers;
    double attn = 0, sum = 0;
    for (int len : lens) attn += 4.0 * len * len * h * L;
    EXPECT_DOUBLE_EQ(p.flops[size_t(forward_op::qkv_gemm)], 6 * T * h * h * L);
    EXPECT_DOUBLE_EQ(p.flops[size_t(forward_op::attn_out_gemm)], 2 * T * h * h * L);
    EXPECT_DOUBLE_EQ(p.flops[size_t(forward_op::ffn_in_gemm)], 2 * T * h * f * L);
    EXPECT_DOUBLE_EQ(p.flops[size_t(forward_op::ffn_out_gemm)], 2 * T * h * f * L);
    EXPECT_DOUBLE_EQ(p.flops[size_t(forward_op::attention)], attn);
    double all_flops = 0;
    for (int i = 0; i < kForwardOps; ++i) {
      EXPECT_GT(p.secs[size_t(i)], 0) << op_name(forward_op(i));
      sum += p.secs[size_t(i)];
      all_flops += p.flops[size_t(i)];
    }
    EXPECT_NEAR(all_flops, forward_flops(c, lens), 1e-9 * all_flops);
    EXPECT_LE(sum, p.forward_secs);
    for (attention_part part : {attention_part::scores_gemm, attention_part::softmax, attention_part::context_gemm})
      EXPECT_GT(p.attention_thread_secs[size_t(part)], 0) << part_name(part);
    EXPECT_EQ(p.attention_thread_secs[size_t(attention_part::copy_in)] > 0, d == dtype::bf16);
    const forward_profile before = p;
    (void)reference_forward(*model, b);
    EXPECT_EQ(p.forwards, before.forwards);
    EXPECT_EQ(p.secs, before.secs);
  }
}

// tessera-bench-models --profile prints the per-op table and writes it as CSV (one row per op,
// "between ops", attention's parts); --profile without mode a and --profile-csv alone are refused.
TEST(bf16_cli, bench_profile_prints_the_per_op_table_and_csv) {
  const std::string bench = test_support::tool_path("tessera-bench-models");
  if (bench.empty() || !std::filesystem::exists(bench)) GTEST_FAIL() << "tessera-bench-models not built (TESSERA_BIN_DIR)";
  const auto csv = std::filesystem::temp_directory_path() / ("bench_profile_" + std::to_string(getpid()) + ".csv");
  std::string out;
  ASSERT_EQ(test_support::run_tool(bench, "--model bert-tiny --modes a --requests 8 --threads 2 --profile --profile-csv " +
                                              csv.string(), out, "2>&1"), 0) << out;
  EXPECT_NE(out.find("per-op profile of mode a (fp32, 1 forwards"), std::string::npos) << out;
  const auto lines = test_support::csv_lines(csv, size_t(kForwardOps + 1 + kAttentionParts));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "dtype,op,secs,share,gflops");
  for (int i = 0; i < kForwardOps; ++i) {
    const std::string name = op_name(forward_op(i));
    EXPECT_NE(out.find("\n" + name + " "), std::string::npos) << name << "\n" << out;
    EXPECT_EQ(lines[size_t(i) + 1].rfind("fp32," + name + ",", 0), 0u) << lines[size_t(i) + 1];
  }
  std::filesystem::remove(csv);
  EXPECT_EQ(test_support::run_tool(bench, "--model bert-tiny --modes d --requests 8 --profile", out, "2>&1"), 2);
  EXPECT_NE(out.find("--profile times mode a: add a to --modes"), std::string::npos) << out;
  EXPECT_EQ(test_support::run_tool(bench, "--model bert-tiny --requests 8 --profile-csv x.csv", out, "2>&1"), 2);
  EXPECT_NE(out.find("--profile-csv needs --profile"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::models
