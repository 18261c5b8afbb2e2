// The compiler without processes: plans, memory plans, programs' exchange pairing.
#include <gtest/gtest.h>

#include <set>

#include "tessera/host/placement.hpp"
#include "tessera/models/config.hpp"

using namespace tessera;
using namespace tessera::host;

namespace {
models::bert_config cfg_of(const char* preset) { return *models::preset_config(preset); }

placement_request req(int tiles, uint64_t memory, std::optional<plan> p = std::nullopt, int budget = 512) {
  placement_request r;
  r.tiles = tiles;
  r.tile_memory = memory;
  r.token_budget = budget;
  r.forced = p;
  return r;
}
}  // namespace

TEST(Plan, ParsesAndRejects) {
  auto p = parse_plan("2,1,4");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tiles(), 8);
  EXPECT_EQ(p->micro_batches, 1);
  auto q = parse_plan("1,2,2,6");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->micro_batches, 6);
  EXPECT_EQ(parse_plan("1,2,2")->micro_batches, 4);  // pipelines default to 2 micro-batches a stage
  for (const char* bad : {"", "2,1", "a,b,c", "0,1,1", "1,1,1,1,1,1", "1,1,2,1,0", "2,-1,1", "1.5,1,1"}) EXPECT_FALSE(parse_plan(bad)) << bad;
}

TEST(Placement, ForcedPlanMustMatchTiles) {
  auto c = compile_bert(cfg_of("bert-tiny"), req(4, 64 << 20, plan{1, 1, 2, 1}));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("R x S x W must equal"), std::string::npos);
  auto deep = compile_bert(cfg_of("bert-tiny"), req(3, 64 << 20, plan{1, 3, 1, 3}));
  ASSERT_FALSE(deep);  // bert-tiny has 2 layers
  EXPECT_FALSE(compile_bert(cfg_of("bert-tiny"), req(1, 64 << 20, std::nullopt, 100)));  // budget < 512
}

TEST(Placement, UnevenSplitsCoverEveryHeadColumnAndLayer) {
  auto cfg = cfg_of("bert-mini");  // 4 layers, 4 heads, FFN 1024
  for (auto p : {plan{1, 1, 3, 1}, plan{1, 3, 1, 3}, plan{1, 1, 5, 1}, plan{1, 2, 3, 4}, plan{7, 1, 1, 1}}) {
    auto c = compile_bert(cfg, req(p.tiles(), 256 << 20, p));
    if (p.width > cfg.num_heads) {
      continue;
    }
    ASSERT_TRUE(c) << p.to_string() << ": " << c.error().message();
    for (int r = 0; r < p.replicas; ++r) {
      std::set<int> layers;
      for (int s = 0; s < p.stages; ++s) {
        int heads = 0, cols = 0;
        for (uint32_t t : c->stage_tiles(r, s)) {
          const auto& tp = c->tiles[t];
          heads += tp.head_end - tp.head_begin;
          cols += tp.ffn_end - tp.ffn_begin;
          for (int l = tp.layer_begin; l < tp.layer_end; ++l) layers.insert(l);
        }
        EXPECT_EQ(heads, cfg.num_heads) << p.to_string();
        EXPECT_EQ(cols, cfg.intermediate_size) << p.to_string();
      }
      EXPECT_EQ(static_cast<int>(layers.size()), cfg.num_layers) << p.to_string();
    }
  }
}

TEST(Placement, EverySendHasItsReceiveInTheSameSuperstep) {
  auto cfg = cfg_of("bert-mini");
  auto c = compile_bert(cfg, req(6, 256 << 20, plan{1, 2, 3, 4}));
  ASSERT_TRUE(c) << c.error().message();
  const auto& progs = c->programs[0];
  size_t steps = progs.begin()->second.steps.size();
  for (const auto& [t, p] : progs) ASSERT_EQ(p.steps.size(), steps);
  for (size_t i = 0; i < steps; ++i) {
    std::multiset<std::tuple<uint32_t, uint32_t, uint32_t>> sends, recvs;
    bool sync = progs.begin()->second.steps[i].sync;
    for (const auto& [t, p] : progs) {
      EXPECT_EQ(p.steps[i].sync, sync) << "superstep " << i << ": every tile must agree on the barrier";
      for (const auto& s : p.steps[i].sends) sends.insert({t, s.peer, s.tag});
      for (const auto& r : p.steps[i].recvs) recvs.insert({r.peer, t, r.tag});
    }
    EXPECT_EQ(sends, recvs) << "superstep " << i;
  }
}

TEST(Placement, TooSmallMemoryFailsWithTableAndAFix) {
  auto cfg = cfg_of("bert-mini");
  auto roomy = compile_bert(cfg, req(2, 1ull << 30, plan{1, 1, 2, 1}));
  ASSERT_TRUE(roomy);
  uint64_t need2 = 0;
  for (const auto& t : roomy->tiles) need2 = std::max(need2, t.total_bytes());
  // 1 MiB short of what two lanes need; four lanes halve each tile's layer weights again.
  auto c = compile_bert(cfg, req(2, need2 - (1 << 20), plan{1, 1, 2, 1}));
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), errc::out_of_memory);
  const auto& m = c.error().message();
  EXPECT_NE(m.find("--tile-memory " + std::to_string(need2)), std::string::npos) << m;
  EXPECT_NE(m.find("weights"), std::string::npos) << m;  // the table header
  EXPECT_NE(m.find("NO"), std::string::npos) << m;       // a tile that does not fit
  EXPECT_NE(m.find("--tiles 3"), std::string::npos) << m;  // a tile count that would fit
  EXPECT_TRUE(compile_bert(cfg, req(3, need2 - (1 << 20))));
  EXPECT_FALSE(compile_bert(cfg, req(2, need2 - 64, plan{1, 1, 2, 1})));
  // Tiles smaller than the embedding tables: no tile count helps, and the message says why.
  auto hopeless = compile_bert(cfg, req(2, 4 << 20));
  ASSERT_FALSE(hopeless);
  EXPECT_NE(hopeless.error().message().find("no tile count fits"), std::string::npos);
}

TEST(Placement, AutomaticPlanFitsAndPrefersThroughput) {
  auto cfg = cfg_of("bert-base");
  // Tiles too small for a whole replica: the compiler must split the model.
  auto c = compile_bert(cfg, req(8, 160 << 20, std::nullopt, 1024));
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_GT(c->chosen.stages * c->chosen.width, 1);
  for (const auto& t : c->tiles) EXPECT_LE(t.total_bytes(), 160u << 20);
  EXPECT_FALSE(c->candidates.empty());
  double chosen_rate = 0, best_rate = 0;
  for (const auto& [p, rate] : c->candidates) {
    if (p.to_string() == c->chosen.to_string()) chosen_rate = rate;
    best_rate = std::max(best_rate, rate);
  }
  EXPECT_GE(chosen_rate * 1.02, best_rate);  // near-ties may go to the plan with fewer replicas
  EXPECT_NE(c->describe().find("plan R="), std::string::npos);
}

TEST(Placement, CostModelChargesExchangeAndOversubscription) {
  auto cfg = cfg_of("bert-base");
  auto m = machine_model::this_machine();
  m.cores = 2;
  // On two cores, two tiles with no exchange beat two tiles with tensor parallelism.
  EXPECT_LT(estimate_batch_seconds(cfg, {1, 1, 1, 1}, 4096, m) / 2 * 1.0,
            estimate_batch_seconds(cfg, {1, 1, 2, 1}, 4096, m));
  // Eight tiles on two cores: each tile gets a quarter core.
  EXPECT_GT(estimate_batch_seconds(cfg, {8, 1, 1, 1}, 4096, m), 3.9 * estimate_batch_seconds(cfg, {1, 1, 1, 1}, 4096, m));
}

TEST(MicroBatches, BoundsAreBalancedAndDeterministic) {
  std::vector<int32_t> offsets{0};
  for (int len : {10, 500, 20, 30, 40, 300, 5}) offsets.push_back(offsets.back() + len);
  auto b = exchange::micro_batch_bounds(offsets, 3);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 7);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LE(b[i - 1], b[i]);
  EXPECT_EQ(b, exchange::micro_batch_bounds(offsets, 3));
  exchange::batch_rows rows{offsets.back(), offsets};
  int64_t covered = 0;
  for (uint32_t m = 0; m < 3; ++m) {
    auto r = rows.micro_rows(m, 3);
    EXPECT_EQ(r.begin, covered);
    covered = r.end;
  }
  EXPECT_EQ(covered, offsets.back());
  // More micro-batches than sequences: some are empty, none is lost.
  auto many = exchange::micro_batch_bounds({0, 4, 9}, 5);
  EXPECT_EQ(many.back(), 2);
}
