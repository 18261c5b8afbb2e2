// Kernel estimators against hand-computed cycle counts on a round-number preset.
#include <gtest/gtest.h>

#include "tessera/timing/estimator.hpp"
#include "test_presets.hpp"

namespace tessera::timing {
namespace {

using testing::round_ipu;

double cycles(const kernel_query& q, double tiles = 1) {
  auto c = estimate_tile_cycles(q, round_ipu(), tiles);
  EXPECT_TRUE(c) << c.error().to_string();
  return c ? *c : -1;
}

// Preset: overhead 10 cycles, 8 vector bytes/cycle (4 fp16 or 2 fp32 lanes), AMP 128 fp16 /
// 32 fp32 FLOP/cycle at 50% efficiency, 20 cycles per row for row reductions.
TEST(estimator, elementwise_kernels) {
  EXPECT_DOUBLE_EQ(cycles(kernel_query("add", {{"elements", 1000}})), 10 + 250 * 2);
  EXPECT_DOUBLE_EQ(cycles(kernel_query("add", {{"elements", 1000}}), 4), 10 + 63 * 2);  // 250 per tile
  EXPECT_DOUBLE_EQ(cycles(kernel_query("copy", {{"elements", 1000}}, dtype::fp32)), 10 + 500);
  EXPECT_DOUBLE_EQ(cycles(kernel_query("scale", {{"elements", 7}})), 10 + 2);
  EXPECT_DOUBLE_EQ(cycles(kernel_query("reduce_sum", {{"elements", 16}, {"outputs", 2}})), 10 + 4 + 2);
  EXPECT_DOUBLE_EQ(cycles(kernel_query("gelu", {{"elements", 100}})), 10 + 50 * 3);  // 2-lane tanh
}

TEST(estimator, matmul_and_linear) {
  // 16^3 MACs = 8192 FLOPs / 128 per cycle = 64 cycles, at 50% -> 128.
  EXPECT_DOUBLE_EQ(cycles(kernel_query("matmul", {{"m", 16}, {"n", 16}, {"k", 16}})), 10 + 128);
  EXPECT_DOUBLE_EQ(cycles(kernel_query("matmul", {{"m", 16}, {"n", 16}, {"k", 16}}, dtype::fp32)), 10 + 512);
  // linear adds the bias: 256 outputs / 4 lanes.
  EXPECT_DOUBLE_EQ(cycles(kernel_query("linear", {{"tokens", 16}, {"in", 16}, {"out", 16}})), 10 + 128 + 64);
  // split over 4 tiles: a quarter of the MACs and of the bias per tile.
  EXPECT_DOUBLE_EQ(cycles(kernel_query("linear", {{"tokens", 16}, {"in", 16}, {"out", 16}}), 4), 10 + 32 + 16);
}

TEST(estimator, layer_norm_softmax_embed_classifier) {
  // 16 elements / 4 lanes * 4 cycles + 2 rows * 20.
  EXPECT_DOUBLE_EQ(cycles(kernel_query("layer_norm", {{"tokens", 2}, {"hidden", 8}})), 10 + 16 + 40);
  // 16 elements: 4 vectors * 3 + 8 two-lane vectors * 2 (exp) + 2 rows * 20.
  EXPECT_DOUBLE_EQ(cycles(kernel_query("softmax", {{"rows", 2}, {"cols", 8}})), 10 + 12 + 16 + 40);
  EXPECT_DOUBLE_EQ(cycles(kernel_query("embed", {{"tokens", 2}, {"hidden", 8}})), 10 + 4 * 5);
  // pooler 2x8x8 + dense 2x8x3 MACs = 176 -> 352 FLOPs / 128 = 3 cycles / 0.5 = 6; tanh 16 / 2 lanes * 3.
  EXPECT_DOUBLE_EQ(cycles(kernel_query("classifier", {{"seqs", 2}, {"hidden", 8}, {"labels", 3}})), 20 + 6 + 24);
}

TEST(estimator, attention_sums_over_sequences_without_cross_terms) {
  // seq_lens {4, 2}: sum L^2 = 20; QK^T + PV = 2 * 20 * 8 = 320 MACs = 640 FLOPs -> 5 cycles / 0.5 = 10.
  // softmax over 20 scores in 6 rows: 5 vectors * 3 + 10 two-lane vectors * 2 + 6 rows * 20 = 155.
  auto q = kernel_query("attention", {{"heads", 1}, {"head_dim", 8}}).with_seq_lens({4, 2});
  EXPECT_DOUBLE_EQ(cycles(q), 10 + 10 + 155);
  // Packed lengths cost sum L^2, less than one padded sequence of the same tokens (36).
  auto packed = estimate_gpu_work(q, true);
  auto one = estimate_gpu_work(kernel_query("attention", {{"heads", 1}, {"head_dim", 8}}).with_seq_lens({6}), true);
  ASSERT_TRUE(packed && one);
  EXPECT_DOUBLE_EQ((*packed)[0].tensor_flops, 4.0 * 20 * 8);
  EXPECT_DOUBLE_EQ((*one)[0].tensor_flops, 4.0 * 36 * 8);
  // Unfused: QK^T, softmax, PV as three launches, the score matrix through memory.
  auto unfused = estimate_gpu_work(q, false);
  ASSERT_TRUE(unfused);
  ASSERT_EQ(unfused->size(), 3u);
  EXPECT_DOUBLE_EQ((*unfused)[1].hbm_bytes, 2.0 * 20 * 2);
}

TEST(estimator, emulated_tile_share_divides_compute) {
  auto q = kernel_query("linear", {{"tokens", 128}, {"in", 768}, {"out", 768}});
  double one = cycles(q, 1), share = cycles(q, 184);
  EXPECT_LT(share, one / 150);
  EXPECT_GT(share, one / 184);  // the fixed overhead is not divided
}

TEST(estimator, unknown_kernel_and_bad_params_are_statuses) {
  auto u = estimate_tile_cycles(kernel_query("conv2d", {}), round_ipu());
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().code(), errc::not_found);
  EXPECT_NE(u.error().message().find("linear"), std::string::npos) << u.error().message();
  auto m = estimate_tile_cycles(kernel_query("linear", {{"tokens", 4}, {"in", 8}}), round_ipu());
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message().find("'out'"), std::string::npos) << m.error().message();
  EXPECT_FALSE(estimate_tile_cycles(kernel_query("add", {{"elements", -1}}), round_ipu()));
  EXPECT_FALSE(estimate_tile_cycles(kernel_query("attention", {{"heads", 1}, {"head_dim", 8}}), round_ipu()));
  EXPECT_FALSE(estimate_tile_cycles(kernel_query("add", {{"elements", 8}}), round_ipu(), 0.5));
}

// Typed shapes: a query built from one reads back the same, the estimate matches the query
// spelled by name, and a missing or non-positive parameter is an error naming it.
TEST(estimator, typed_shapes_round_trip_and_price_like_named_parameters) {
  using models::kernel_id;
  const auto q = make_query(kernel_id::linear, linear_shape{.tokens = 16, .in = 16, .out = 16});
  EXPECT_EQ(q.kernel, "linear");
  auto s = read_shape<linear_shape>(q);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->tokens, 16);
  EXPECT_EQ(s->out, 16);
  EXPECT_DOUBLE_EQ(cycles(q), cycles(kernel_query("linear", {{"tokens", 16}, {"in", 16}, {"out", 16}})));
  const auto a = make_query(kernel_id::attention, attention_shape{.heads = 1, .head_dim = 8, .seq_lens = {4, 2}});
  EXPECT_DOUBLE_EQ(cycles(a), cycles(kernel_query("attention", {{"heads", 1}, {"head_dim", 8}}).with_seq_lens({4, 2})));
  auto r = read_shape<reduce_shape>(kernel_query("reduce_sum", {{"elements", 16}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outputs, 1) << "outputs is optional, default 1";
  auto bad = read_shape<matmul_shape>(kernel_query("matmul", {{"m", 4}, {"n", 0}, {"k", 2}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("'n'"), std::string::npos) << bad.error().message();
  EXPECT_EQ(shape_param_names<reduce_shape>(), "elements, outputs (optional)");
  EXPECT_EQ(shape_param_names<attention_shape>(), "heads, head_dim; seq_lens");
}

TEST(estimator, registry_holds_every_named_kernel_and_accepts_new_ones) {
  auto names = estimator_registry::builtin().names();
  for (const char* k : {"copy", "add", "scale", "reduce_sum", "matmul", "linear", "layer_norm", "gelu", "softmax",
                        "attention", "embed", "classifier"})
    EXPECT_NE(std::find(names.begin(), names.end(), k), names.end()) << k;

  auto r = estimator_registry::with_builtins();
  kernel_estimator relu;
  relu.name = "relu";
  relu.params = "elements";
  relu.ipu_cycles = [](const kernel_query& q, const ipu_preset& p, double tiles) -> result<double> {
    auto n = q.get("elements");
    if (!n) return n.error();
    return vector_cycles(p.calibration.compute_set_overhead_cycles, double(*n), tiles, 4, 1);
  };
  relu.gpu_work = [](const kernel_query&, bool) -> result<std::vector<gpu_kernel_work>> {
    return std::vector<gpu_kernel_work>{{"relu", 0, 1, 1}};
  };
  EXPECT_TRUE(r.add(relu).ok());
  EXPECT_FALSE(r.add(relu).ok());  // duplicate
  auto c = estimate_tile_cycles(kernel_query("relu", {{"elements", 40}}), round_ipu(), 1, r);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(*c, 10 + 10);
  EXPECT_FALSE(estimator_registry::builtin().find("relu"));
}

TEST(estimator, spread_linear_plans_a_split_and_counts_exchange) {
  auto p = round_ipu();
  auto s = estimate_spread(kernel_query("linear", {{"tokens", 64}, {"in", 64}, {"out", 64}}), p, 4);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_GT(s->exchange_bytes, 0);
  // No plan can beat a perfect 4-way split of the MACs.
  EXPECT_GE(s->compute_cycles, 2.0 * 64 * 64 * 64 / 4 / 128 / 0.5);
  // Elementwise add keeps its producer's layout: no exchange.
  auto a = estimate_spread(kernel_query("add", {{"elements", 4096}}), p, 4);
  ASSERT_TRUE(a);
  EXPECT_DOUBLE_EQ(a->exchange_bytes, 0);
  EXPECT_DOUBLE_EQ(a->compute_cycles, 10 + 256 * 2);
}

}  // namespace
}  // namespace tessera::timing
