// GPU roofline on hand-computed cases; fusion folds epilogues and attention.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/timing/gpu_roofline.hpp"
#include "test_presets.hpp"

namespace tessera::timing {
namespace {

using testing::round_gpu;

TEST(gpu_roofline, compute_bound_linear) {
  // 2e9 tensor FLOPs at 100 TFLOP/s = 20 us; 1e6 bias FLOPs at 10 TFLOP/s = 0.1 us;
  // (1e6 + 1e6 + 1e3 + 1e6) * 2 bytes at 1 TB/s = 6.002 us; + 1 us launch.
  std::vector<kernel_query> ops = {kernel_query("linear", {{"tokens", 1000}, {"in", 1000}, {"out", 1000}})};
  auto e = estimate_gpu_ops(round_gpu(false), ops);
  ASSERT_TRUE(e) << e.error().to_string();
  EXPECT_EQ(e->launches, 1);
  EXPECT_NEAR(e->seconds, 21.1e-6, 1e-12);
  EXPECT_FALSE(e->kernels[0].memory_bound);
}

TEST(gpu_roofline, memory_bound_add) {
  // 3 * 1e6 * 2 bytes = 6 us at 1 TB/s; 1e6 FLOPs = 0.1 us; + 1 us.
  std::vector<kernel_query> ops = {kernel_query("add", {{"elements", 1000000}})};
  auto e = estimate_gpu_ops(round_gpu(false), ops);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->seconds, 7e-6, 1e-12);
  EXPECT_TRUE(e->kernels[0].memory_bound);
}

TEST(gpu_roofline, fusion_folds_epilogues_only_when_asked) {
  std::vector<kernel_query> ops = {
      kernel_query("linear", {{"tokens", 100}, {"in", 100}, {"out", 400}}),
      kernel_query("gelu", {{"elements", 40000}}),
      kernel_query("linear", {{"tokens", 100}, {"in", 400}, {"out", 100}}),
      kernel_query("add", {{"elements", 10000}}),
      kernel_query("layer_norm", {{"tokens", 100}, {"hidden", 100}}),
      kernel_query("attention", {{"heads", 2}, {"head_dim", 50}}).with_seq_lens({100}),
  };
  auto unfused = estimate_gpu_ops(round_gpu(false), ops);
  auto fused = estimate_gpu_ops(round_gpu(true), ops);
  auto forced = estimate_gpu_ops(round_gpu(true), ops, false);
  ASSERT_TRUE(unfused && fused && forced);
  EXPECT_EQ(unfused->launches, 8);  // attention is three launches unfused
  EXPECT_EQ(fused->launches, 4);    // linear+gelu, linear+add, layer_norm, attention
  EXPECT_EQ(forced->launches, 8);
  EXPECT_EQ(fused->kernels[0].name, "linear+gelu");
  EXPECT_EQ(fused->kernels[1].name, "linear+add");
  EXPECT_LT(fused->seconds, unfused->seconds);
  EXPECT_NEAR(fused->flops, unfused->flops, unfused->flops * 0.01);  // same arithmetic, fewer trips to HBM
}

TEST(gpu_roofline, unknown_kernel_is_reported_with_the_query) {
  std::vector<kernel_query> ops = {kernel_query("conv2d", {{"x", 1}})};
  auto e = estimate_gpu_ops(round_gpu(false), ops);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("conv2d"), std::string::npos);
}

// The fused attention kernel runs one block per (sequence, head): with fewer blocks than SMs only
// that many SMs compute (docs/timing.md, Validation). On 100 SMs with 10 heads: 1 sequence (10
// blocks) takes as long to compute as 10 sequences (100 blocks, the GPU full), 20 sequences twice that.
TEST(gpu_roofline, fused_attention_with_fewer_blocks_than_sms_computes_on_that_many) {
  auto compute_of = [](int seqs) {
    const auto q = make_query(models::kernel_id::attention,
                              attention_shape{.heads = 10, .head_dim = 64, .seq_lens = std::vector<int64_t>(size_t(seqs), 512)});
    std::vector<kernel_query> ops = {q};
    auto e = estimate_gpu_ops(round_gpu(true), ops);
    EXPECT_TRUE(e) << e.error().to_string();
    EXPECT_EQ(e->kernels.size(), 1u);
    return e->kernels[0].compute_s;
  };
  const double one = compute_of(1), ten = compute_of(10), twenty = compute_of(20);
  EXPECT_GT(one, 0);
  EXPECT_NEAR(one, ten, 1e-12 * ten);
  EXPECT_NEAR(twenty, 2 * ten, 1e-12 * ten);
  // Without the term, one sequence would be a tenth of ten: 4 L^2 d h FLOPs at 100 TFLOP/s x efficiency.
  gpu_preset no_sms = round_gpu(true);
  no_sms.sms = 0;
  const auto q = make_query(models::kernel_id::attention, attention_shape{.heads = 10, .head_dim = 64, .seq_lens = {512}});
  std::vector<kernel_query> ops = {q};
  auto e = estimate_gpu_ops(no_sms, ops);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->kernels[0].compute_s * 10, one, 1e-12 * one);
}

}  // namespace
}  // namespace tessera::timing
