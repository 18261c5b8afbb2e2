// Exchange, sync and superstep cycles; the emulated-tile share.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/timing/superstep.hpp"
#include "test_presets.hpp"

namespace tessera::timing {
namespace {

using testing::round_ipu;

TEST(superstep, exchange_cycles_from_bytes_and_link_bandwidth) {
  auto p = round_ipu();  // 4 bytes/cycle, efficiency 1
  EXPECT_DOUBLE_EQ(exchange_cycles(p, 400), 100);
  EXPECT_DOUBLE_EQ(exchange_cycles(p, 401), 101);
  EXPECT_DOUBLE_EQ(exchange_cycles(p, 400, 2), 50);  // an emulated tile with two physical links
  EXPECT_DOUBLE_EQ(exchange_cycles(p, 0), 0);
  p.calibration.exchange_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(exchange_cycles(p, 400), 200);
}

TEST(superstep, cost_is_slowest_compute_plus_sync_plus_slowest_exchange) {
  auto p = round_ipu();
  std::vector<double> compute = {100, 300, 200};
  std::vector<double> bytes = {0, 40, 400};
  auto s = superstep_cycles(p, compute, bytes);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_DOUBLE_EQ(s->compute_cycles, 300);
  EXPECT_DOUBLE_EQ(s->sync_cycles, 100);
  EXPECT_DOUBLE_EQ(s->exchange_cycles, 100);
  EXPECT_DOUBLE_EQ(s->total_cycles, 500);
  EXPECT_DOUBLE_EQ(s->seconds, 500e-9);
  EXPECT_EQ(s->slowest_compute_tile, 1u);
  EXPECT_EQ(s->slowest_exchange_tile, 2u);

  auto shared = superstep_cycles(p, compute, bytes, 4);
  ASSERT_TRUE(shared);
  EXPECT_DOUBLE_EQ(shared->exchange_cycles, 25);

  EXPECT_FALSE(superstep_cycles(p, {}, {}));
  std::vector<double> negative = {-1};
  EXPECT_FALSE(superstep_cycles(p, negative, {}));
}

TEST(superstep, tile_share_says_what_each_emulated_tile_stands_for) {
  ipu_preset mk2 = round_ipu();
  mk2.name = "ipu-mk2";
  mk2.tiles = 1472;
  auto s = make_tile_share(mk2, 8);
  ASSERT_TRUE(s) << s.error().to_string();
  EXPECT_DOUBLE_EQ(s->physical_per_emulated, 184);
  EXPECT_NE(s->note.find("184 physical tiles of ipu-mk2"), std::string::npos) << s->note;
  EXPECT_NE(s->note.find("1472 / 8"), std::string::npos) << s->note;
  auto odd = make_tile_share(mk2, 6);
  ASSERT_TRUE(odd);
  EXPECT_NEAR(odd->physical_per_emulated, 245.333, 1e-3);
  EXPECT_FALSE(make_tile_share(mk2, 2000));
  EXPECT_FALSE(make_tile_share(mk2, 0));
}

}  // namespace
}  // namespace tessera::timing

namespace tessera::timing {
namespace {

TEST(superstep, model_superstep_costs_what_the_tiles_ran) {
  auto p = testing::round_ipu();  // 4 tiles
  auto share = make_tile_share(p, 2);  // each emulated tile stands for 2
  ASSERT_TRUE(share);
  std::vector<tile_step> steps(2);
  steps[0].kernels = {kernel_query("add", {{"elements", 1000}}), kernel_query("scale", {{"elements", 1000}})};
  steps[0].exchange_bytes_received = 80;
  steps[1].kernels = {kernel_query("add", {{"elements", 100}})};
  steps[1].exchange_bytes_received = 800;
  auto s = model_superstep(p, *share, steps);
  ASSERT_TRUE(s) << s.error().to_string();
  // tile 0: 500 elements per physical tile: add 10 + 125 * 2 = 260; scale 10 + 125 = 135.
  // tile 1 receives 800 bytes over 2 links of 4 bytes/cycle.
  EXPECT_DOUBLE_EQ(s->compute_cycles, 260 + 135);
  EXPECT_DOUBLE_EQ(s->exchange_cycles, 100);
  EXPECT_EQ(s->slowest_exchange_tile, 1u);
  EXPECT_DOUBLE_EQ(s->total_cycles, 395 + 100 + 100);
  steps[1].kernels.push_back(kernel_query("fft", {}));
  auto bad = model_superstep(p, *share, steps);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("tile 1"), std::string::npos) << bad.error().message();
}

}  // namespace
}  // namespace tessera::timing
