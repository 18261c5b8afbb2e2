// The int8 BERT forward (int8_weights.hpp, kernels_int8.hpp) against independent references:
// quantization against a scalar rounding, the int8 linear against a double-precision sum of the
// same integers for every row-count path and epilogue, whole models against the fp32 forward and
// tiny-odd against its float64 goldens (tests/data/models/tiny_odd_logits.json) with the int8
// bound, and `tessera-models --dtype int8` as a user runs it (and refuses it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
#include <thread>

#include "tessera/models/embedding.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/int8_weights.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/kernels_int8.hpp"
#include "tessera/models/model.hpp"
#include "tessera/test/bf16_bounds.hpp"
#include "tessera/test/run_tool.hpp"
#include "dtype_cases.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {

void require_int8() {
  const status st = check_dtype_supported(dtype::int8);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

// Independent: round half to even in double, saturate to [-128, 127].
int8_t reference_quantize(float x, float scale) {
  const double v = double(x) / double(scale);
  double r = std::floor(v);
  const double frac = v - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return static_cast<int8_t>(std::clamp(r, -128.0, 127.0));
}

TEST(int8, parse_and_support) {
  EXPECT_EQ(parse_dtype("int8", true).value(), dtype::int8);
  auto refused = parse_dtype("int8");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().to_string().find("--dtype int8 runs the BERT encoder only ("), std::string::npos)
      << refused.error().to_string();
  auto bad = parse_dtype("fp16", true);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().to_string().find("use fp32 or bf16 or int8"), std::string::npos) << bad.error().to_string();
  EXPECT_EQ(dtype_name(dtype::int8), "int8");
  EXPECT_EQ(dtype_bytes(dtype::int8), 1);
}

TEST(int8, quantize_rounds_half_to_even_and_saturates) {
  std::vector<float> x;
  splitmix64 rng(3);
  for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 127.5f, -128.5f, 126.5f, 1e6f, -1e6f, 0.0f, -0.0f})
    x.push_back(v);
  while (x.size() < 37 * 136) x.push_back(static_cast<float>(rng.unit() * 400.0 - 200.0));
  const int64_t n = 37, T = 136;  // rows of 37: the masked tail too
  std::vector<int8_t> q(static_cast<size_t>(T * n));
  quantize(x.data(), T, n, 1.0f, q.data());
  for (int64_t i = 0; i < T * n; ++i)
    ASSERT_EQ(q[static_cast<size_t>(i)], reference_quantize(x[static_cast<size_t>(i)], 1.0f)) << x[static_cast<size_t>(i)];
  quantize(x.data(), T, n, 0.7f, q.data());
  for (int64_t i = 0; i < T * n; ++i)
    ASSERT_EQ(q[static_cast<size_t>(i)], reference_quantize(x[static_cast<size_t>(i)], 0.7f)) << x[static_cast<size_t>(i)];
  EXPECT_FLOAT_EQ(abs_max(x.data(), T, n), 1e6f);
}

double gelu(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

// W with integer multiples of a per-row scale and a +-127 in every row: pack recovers exactly
// those integers and scales, so the reference sums the same integers in double.
TEST(int8, linear_equals_a_double_sum_of_the_same_integers) {
  require_int8();
  set_num_threads(2);
  const int64_t in = 96, out = 80;
  splitmix64 rng(9);
  std::vector<int> wi(static_cast<size_t>(out * in));
  std::vector<float> W(wi.size()), ws(static_cast<size_t>(out)), bias(static_cast<size_t>(out));
  for (int64_t n = 0; n < out; ++n) {
    ws[static_cast<size_t>(n)] = static_cast<float>(std::ldexp(1.0, -7 - static_cast<int>(n % 5)));
    bias[static_cast<size_t>(n)] = static_cast<float>(rng.unit() - 0.5);
    for (int64_t k = 0; k < in; ++k) {
      int v = static_cast<int>(rng.uniform(0, 254)) - 127;
      if (k == n % in) v = n % 2 ? 127 : -127;
      wi[static_cast<size_t>(n * in + k)] = v;
      W[static_cast<size_t>(n * in + k)] = static_cast<float>(v) * ws[static_cast<size_t>(n)];
    }
  }
  const int8_weight wq = int8_weight::pack(W.data(), out, in);
  for (int64_t n = 0; n < out; ++n) ASSERT_EQ(wq.scales()[static_cast<size_t>(n)], ws[static_cast<size_t>(n)]);
  const float xs = 0.03f, ys = 0.02f;
  for (int64_t T : {1, 7, 31, 32, 33, 64, 100, 512, 513, 600}) {
    const int64_t ldx = in + 5;
    std::vector<int8_t> x(static_cast<size_t>(T * ldx), 99);  // 99: the gap a stride skips
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < in; ++k) x[static_cast<size_t>(t * ldx + k)] = static_cast<int8_t>(rng.uniform(0, 255) - 128);
    std::vector<double> acc(static_cast<size_t>(T * out));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < out; ++n) {
        int64_t s = 0;
        for (int64_t k = 0; k < in; ++k) s += int64_t{x[static_cast<size_t>(t * ldx + k)]} * wi[static_cast<size_t>(n * in + k)];
        acc[static_cast<size_t>(t * out + n)] = double(s) * xs * ws[static_cast<size_t>(n)];
      }
    std::vector<float> y(static_cast<size_t>(T * out)), yb(y.size()), yg(y.size());
    linear(x.data(), T, xs, wq, nullptr, y.data(), activation::none, ldx);
    linear(x.data(), T, xs, wq, bias.data(), yb.data(), activation::none, ldx);
    linear(x.data(), T, xs, wq, bias.data(), yg.data(), activation::gelu_erf, ldx);
    std::vector<int8_t> yq(static_cast<size_t>(T * out));
    linear(x.data(), T, xs, wq, bias.data(), ys, yq.data(), activation::gelu_erf, ldx);
    for (int64_t i = 0; i < T * out; ++i) {
      const size_t u = static_cast<size_t>(i);
      const double a = acc[u], b = a + bias[u % static_cast<size_t>(out)], g = gelu(b);
      ASSERT_NEAR(y[u], a, 1e-5 * (1 + std::fabs(a))) << "T=" << T << " i=" << i;
      ASSERT_NEAR(yb[u], b, 1e-5 * (1 + std::fabs(b))) << "bias T=" << T << " i=" << i;
      ASSERT_NEAR(yg[u], g, 2e-5 * (1 + std::fabs(g))) << "gelu T=" << T << " i=" << i;
      // The requantized GELU: at most one step from the exact rounding (fp32 vs double at a tie).
      ASSERT_LE(std::abs(int{yq[u]} - int{reference_quantize(static_cast<float>(g), ys)}), 1) << "s8 T=" << T << " i=" << i;
    }
  }
}

TEST(int8, weights_quantize_per_output_channel) {
  require_int8();
  auto m = load_model("bert-tiny");
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(set_dtype(*m, dtype::int8).ok());
  ASSERT_TRUE(m->int8);
  const bert_config& c = m->config;
  EXPECT_EQ(static_cast<int>(m->int8->layers.size()), c.num_layers);
  // A quarter of fp32's bytes for the encoder's Linear matrices, plus 8 bytes an output channel
  // (its scale and the s8s8 compensation) and the fused Q/K/V bias.
  const double linear_params = double(c.num_layers) * (4.0 * c.hidden_size * c.hidden_size +
                                                      2.0 * c.hidden_size * c.intermediate_size);
  EXPECT_LT(double(m->int8->bytes()), 1.15 * linear_params);
  EXPECT_GE(double(m->int8->bytes()), linear_params);
  for (const auto& l : m->int8->layers)
    for (float s : l.x_scale) EXPECT_TRUE(s > 0 && std::isfinite(s) && s != 1.0f) << "a site never calibrated";
  EXPECT_EQ(m->int8->calibration_sequences, 32);
  // The calibration set is not the evaluation set of these tests and the bench (seed 0, ids 1).
  const packed_batch cal = int8_calibration_batch(c);
  const packed_batch eval = synthetic_batch(seed_workload(32), c.vocab_size);
  EXPECT_NE(cal.token_ids, eval.token_ids);
  EXPECT_NE(cal.seq_offsets, eval.seq_offsets);
  EXPECT_TRUE(validate_batch(c, cal).ok());
}

using test_support::compare_logits;

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// int8 logits against fp32's on evaluation inputs (seeds other than the calibration's): max
// |diff| <= int8_logit_bound x max(1, max |fp32 logit|), and raw argmax agreement at least
// min_agreement (the random presets' logits nearly coincide between labels, fp32 margins from
// 0.001, so a swap there is a near-tie flipping; tiny-odd's goldens test agreement on decided logits).
void check_model(const std::string& preset, const std::vector<int>& lengths, int padded_batch, double min_agreement) {
  require_int8();
  set_num_threads(2);
  auto fp32 = load_model(preset);
  ASSERT_TRUE(fp32) << fp32.error().to_string();
  bert_model q = *fp32;
  ASSERT_TRUE(set_dtype(q, dtype::int8).ok());
  const bert_config& c = fp32->config;
  const packed_batch b = synthetic_batch(lengths, c.vocab_size, 3);
  const auto want = reference_forward(*fp32, b), got = reference_forward(q, b);
  const double scale = std::max(1.0, max_abs(want)), bound = int8_logit_bound * scale;
  const auto a = compare_logits(got, want, c.num_labels);
  std::printf("[ int8 ] %s, %d sequences: max abs %.5f (%.4f of max(1, max |fp32 logit|) = %.3f), mean abs %.6f, "
              "argmax agreement %.2f%%\n",
              preset.c_str(), b.num_seqs(), a.max_abs, a.max_abs / scale, scale, a.mean_abs, 100 * a.agreement);
  EXPECT_LE(a.max_abs, bound) << preset;
  EXPECT_GE(a.agreement, min_agreement) << preset;
  EXPECT_GT(a.mean_abs, 0.0) << preset << ": int8 logits equal fp32 exactly: the int8 path did not run";
  if (padded_batch > 0) {
    const auto p = compare_logits(padded_forward(q, b, padded_batch), want, c.num_labels);
    std::printf("[ int8 ] %s padded in batches of %d: max abs %.5f, argmax agreement %.2f%%\n", preset.c_str(),
                padded_batch, p.max_abs, 100 * p.agreement);
    EXPECT_LE(p.max_abs, bound) << preset << " padded";
    EXPECT_GE(p.agreement, min_agreement) << preset << " padded";
  }
  // Back to fp32: the fp32 forward bit for bit; int8 again reuses the calibration.
  bert_model back = q;
  ASSERT_TRUE(set_dtype(back, dtype::fp32).ok());
  const packed_batch two = b.slice(0, 2);
  EXPECT_EQ(reference_forward(back, two), reference_forward(*fp32, two));
  ASSERT_TRUE(set_dtype(back, dtype::int8).ok());
  EXPECT_EQ(back.int8, q.int8);
  EXPECT_EQ(reference_forward(back, two), reference_forward(q, two));
}

// Measured: bert-tiny max 0.0002, 100% agreement; bert-base max 0.016, 92.7% (38 of 41).
TEST(int8, bert_tiny_logits_match_fp32) { check_model("bert-tiny", seed_workload(128, 0.4, 5), 16, 0.95); }

TEST(int8, bert_base_logits_match_fp32) {
  std::vector<int> lengths = seed_workload(40, 0.0, 6);
  lengths.push_back(512);
  check_model("bert-base", lengths, 0, 0.9);
}

// Measured: 0.52 on logits up to 7.7 (0.068 of it), 63 of 64 and 5 of 5 decisions kept.
// tiny-odd (odd shapes, logits up to 7.7) against the float64 goldens of
// scripts/make_model_goldens.py: the int8 bound scaled by the goldens' largest |logit|.
TEST(int8, tiny_odd_matches_float64_goldens_within_the_int8_bound) {
  require_int8();
  set_num_threads(2);
  auto m = load_model(testing::data_dir() + "/tiny-odd");
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(set_dtype(*m, dtype::int8).ok());
  const auto j = nlohmann::json::parse(testing::read_file(testing::data_dir() + "/tiny_odd_logits.json"));
  for (const auto& g : j["batches"]) {
    packed_batch b;
    b.token_ids = g["token_ids"].get<std::vector<int32_t>>();
    b.token_type_ids = g["token_type_ids"].get<std::vector<int32_t>>();
    b.seq_offsets = g["seq_offsets"].get<std::vector<int32_t>>();
    const auto golden = g["logits"].get<std::vector<double>>();
    double gmax = 0;
    for (double v : golden) gmax = std::max(gmax, std::fabs(v));
    const double bound = int8_logit_bound * std::max(1.0, gmax);
    for (const bool padded : {false, true}) {
      const auto got = padded ? padded_forward(*m, b, 7) : reference_forward(*m, b);
      ASSERT_EQ(got.size(), golden.size());
      double d = 0;
      int agree = 0;
      const int L = m->config.num_labels, n = b.num_seqs();
      for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::fabs(got[i] - golden[i]));
      for (int s = 0; s < n; ++s)
        agree += std::max_element(got.begin() + s * L, got.begin() + (s + 1) * L) - (got.begin() + s * L) ==
                 std::max_element(golden.begin() + s * L, golden.begin() + (s + 1) * L) - (golden.begin() + s * L);
      std::printf("[ int8 ] tiny-odd %s%s: max abs %.4f against float64 (%.4f of the largest |logit| %.2f; bound "
                  "%.3f), argmax agreement %d/%d\n", g["name"].get<std::string>().c_str(), padded ? " padded by 7" : "",
                  d, d / std::max(1.0, gmax), gmax, bound, agree, n);
      EXPECT_LE(d, bound) << g["name"] << (padded ? " padded" : "");
      EXPECT_GE(agree, n - n / 20) << g["name"] << ": int8 changed more than 5% of the goldens' decisions";
      EXPECT_GT(d, 1e-4) << "int8 equals the goldens to fp32's tolerance: the int8 path did not run";
    }
  }
}

// An embedding model (tiny-embed, no head) pools the int8 encoder's rows: every pooling mode
// against the float64 goldens of scripts/make_embedding_goldens.py, packed and padded, within the
// int8 bound scaled by the largest |golden| and cosine >= 0.995. Measured: max 0.119 on values up
// to 3.1 (0.038 of it), cosine >= 0.9989.
TEST(int8, embedding_model_pools_int8_rows_close_to_the_goldens) {
  require_int8();
  set_num_threads(2);
  auto m = load_encoder(testing::data_dir() + "/tiny-embed");
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(set_dtype(*m, dtype::int8).ok());
  const auto j = nlohmann::json::parse(testing::read_file(testing::data_dir() + "/tiny_embed_goldens.json"));
  const int64_t h = m->config.hidden_size;
  for (const auto& entry : j["embed_batches"]) {
    packed_batch b;
    const auto ids = entry["token_ids"].get<std::vector<int32_t>>();
    const auto types = entry["token_type_ids"].get<std::vector<int32_t>>();
    size_t at = 0;
    for (int len : entry["lengths"].get<std::vector<int>>()) {
      b.append(std::span(ids).subspan(at, static_cast<size_t>(len)), std::span(types).subspan(at, static_cast<size_t>(len)));
      at += static_cast<size_t>(len);
    }
    for (const char* name : {"cls", "mean", "max"}) {
      const auto golden = entry["pooled"][name].get<std::vector<double>>();
      for (const bool padded : {false, true}) {
        const auto got = padded ? padded_embed(*m, b, 7, pooling_from_name(name)) : reference_embed(*m, b, pooling_from_name(name));
        ASSERT_EQ(got.size(), golden.size());
        double d = 0, worst_cos = 1, gmax = 0;
        for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::fabs(got[i] - golden[i])), gmax = std::max(gmax, std::fabs(golden[i]));
        for (size_t r = 0; r * h < golden.size(); ++r) {
          double dot = 0, a = 0, c = 0;
          for (int64_t k = 0; k < h; ++k) {
            const double x = got[r * h + k], y = golden[r * h + k];
            dot += x * y, a += x * x, c += y * y;
          }
          worst_cos = std::min(worst_cos, dot / std::sqrt(a * c));
        }
        std::printf("[ int8 ] tiny-embed %s %s%s: max abs %.4f (largest |golden| %.2f), min cosine %.5f\n",
                    entry["name"].get<std::string>().c_str(), name, padded ? " padded by 7" : "", d, gmax, worst_cos);
        EXPECT_LE(d, int8_logit_bound * std::max(1.0, gmax)) << name << (padded ? " padded" : "");
        EXPECT_GE(worst_cos, 0.995) << name << (padded ? " padded" : "");
      }
    }
  }
}

// RoBERTa (tiny-roberta-cls: padding-offset positions, a pad id inside the calibration's uniform
// ids; its calibration lengths capped at 32, not the 34 positions) against the float64 goldens
// of scripts/make_roberta_goldens.py, with the int8 bound. Measured: 0.076 on logits up to 2.4.
TEST(int8, roberta_classifier_matches_float64_goldens_within_the_int8_bound) {
  require_int8();
  set_num_threads(2);
  auto m = load_model(testing::data_dir() + "/tiny-roberta-cls");
  ASSERT_TRUE(m) << m.error().to_string();
  {
    const status st = set_dtype(*m, dtype::int8);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  const auto j = nlohmann::json::parse(testing::read_file(testing::data_dir() + "/tiny_roberta_goldens.json"));
  for (const auto& entry : j["classifier_batches"]) {
    packed_batch b;
    const auto ids = entry["token_ids"].get<std::vector<int32_t>>();
    size_t at = 0;
    for (int len : entry["lengths"].get<std::vector<int>>()) {
      b.append(std::span(ids).subspan(at, static_cast<size_t>(len)));
      at += static_cast<size_t>(len);
    }
    const auto golden = entry["logits"].get<std::vector<double>>();
    double gmax = 0;
    for (double v : golden) gmax = std::max(gmax, std::fabs(v));
    const auto got = reference_forward(*m, b);
    ASSERT_EQ(got.size(), golden.size());
    double d = 0;
    for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::fabs(got[i] - golden[i]));
    std::printf("[ int8 ] tiny-roberta-cls %s: max abs %.4f against float64 (largest |logit| %.2f)\n",
                entry["name"].get<std::string>().c_str(), d, gmax);
    EXPECT_LE(d, int8_logit_bound * std::max(1.0, gmax)) << entry["name"];
    EXPECT_GT(d, 1e-4) << "int8 equals the goldens to fp32's tolerance: the int8 path did not run";
  }
}

// Forwards in several threads at once (a server's workers) give, bit for bit, what one alone
// gives: every int8 matmul runs on its thread's scratchpad and scale vector.
TEST(int8, concurrent_forwards_equal_a_forward_alone) {
  require_int8();
  set_num_threads(2);
  auto m = load_model("bert-mini");
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(set_dtype(*m, dtype::int8).ok());
  const packed_batch b = synthetic_batch(seed_workload(24, 0.3, 11), m->config.vocab_size, 4);
  testing::expect_concurrent_forwards_equal(*m, b, 2);
}

// ---- tessera-models --dtype int8, a real process ----

using testing::printed_logits;
constexpr auto run = testing::run_models_tool;

TEST(int8_cli, dtype_flag_runs_int8_and_refuses_what_it_cannot_run) {
  const std::string tool = test_support::tool_path("tessera-models");
  if (tool.empty() || !std::filesystem::exists(tool)) GTEST_FAIL() << "tessera-models not built (TESSERA_BIN_DIR)";
  require_int8();
  const std::string args = "--model bert-tiny --threads 2 --text 'the int8 forward' 'a second, longer sentence here'";
  std::string fp32_out, int8_out, out;
  ASSERT_EQ(run("", args + " --dtype fp32", fp32_out), 0) << fp32_out;
  ASSERT_EQ(run("", args + " --dtype int8", int8_out), 0) << int8_out;
  const auto want = printed_logits(fp32_out), got = printed_logits(int8_out);
  ASSERT_EQ(want.size(), 4u) << fp32_out;
  ASSERT_EQ(got.size(), 4u) << int8_out;
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], int8_logit_bound) << int8_out << fp32_out;
  EXPECT_NE(got, want) << "--dtype int8 printed fp32's logits exactly";
  // A CPU without VNNI (oneDNN's ISA lowered to plain AVX-512): a clear error, never fp32.
  EXPECT_EQ(run("ONEDNN_MAX_CPU_ISA=AVX512_CORE", args + " --dtype int8", out), 2) << out;
  EXPECT_NE(out.find("--dtype int8 needs a CPU with avx512_vnni"), std::string::npos) << out;
  EXPECT_EQ(out.find("logits"), std::string::npos) << out;
  EXPECT_EQ(run("", args + " --dtype int4", out), 2);
  EXPECT_NE(out.find("unknown dtype \"int4\": use fp32 or bf16 or int8"), std::string::npos) << out;
  // Decoders have no int8 path: refused by name, not run in fp32.
  EXPECT_EQ(run("", "generate --model gpt2-tiny --prompt-ids 1,2,3 --max-tokens 2 --dtype int8", out), 2) << out;
  EXPECT_NE(out.find("--dtype int8 runs the BERT encoder only ("), std::string::npos) << out;
}

// tessera-bench-models --dtype fp32,bf16,int8: every dtype in one process, every mode, the ratios
// to fp32 and int8's accuracy on the first --check requests within the bound.
TEST(int8_cli, bench_runs_every_dtype_in_one_process) {
  const std::string bench = test_support::tool_path("tessera-bench-models");
  if (bench.empty() || !std::filesystem::exists(bench)) GTEST_FAIL() << "tessera-bench-models not built (TESSERA_BIN_DIR)";
  require_int8();
  if (!check_dtype_supported(dtype::bf16).ok()) GTEST_SKIP() << "no bf16 here";
  std::string out;
  ASSERT_EQ(test_support::run_tool(bench, "--model bert-tiny --dtype fp32,bf16,int8 --modes abcd --requests 8 --check 8 "
                                          "--threads 2", out, "2>&1"), 0) << out;
  for (const char* d : {"fp32", "bf16", "int8"})
    for (const char* mode : {"a_packed", "b_padded_arrival", "c_padded_sorted"})
      EXPECT_NE(out.find(std::string("RESULT impl=tessera mode=") + mode + " dtype=" + d + " "), std::string::npos)
          << mode << " " << d << "\n" << out;
  EXPECT_NE(out.find("RESULT impl=onednn_int8 mode=d dtype=int8"), std::string::npos) << out;
  EXPECT_NE(out.find("int8 / fp32 a_packed: "), std::string::npos) << out;
  EXPECT_NE(out.find("int8 on oneDNN ISA "), std::string::npos) << out;
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(out, r, std::regex("mode=accuracy dtype=int8 requests=8 .*scaled_max_abs_diff=([0-9.]+)"));
    return r;
  }();
  ASSERT_EQ(m.size(), 2u) << out;
  EXPECT_LE(std::stod(m[1]), int8_logit_bound) << out;
  EXPECT_EQ(test_support::run_tool(bench, "--model bert-tiny --dtype int8,int8 --requests 2", out, "2>&1"), 2);
  EXPECT_NE(out.find("--dtype names int8 twice"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::models
