// Integration: BERT compiled onto real tile processes equals the single-process reference.
// Tolerance 1e-4 max |logit difference|: the tile path sums the same products in a different
// order (partial sums per tile, reduce-scatter), so fp32 rounding differs by ~1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "tessera/host/tile_model.hpp"
#include "tessera/models/forward.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using test_support::case_name;
using test_support::case_t;
using test_support::odd_checkpoint;
using namespace std::chrono_literals;

namespace {

constexpr double tolerance = 1e-4;

// Lengths 1..max, mixed, that fit the budget.
models::packed_batch mixed_batch(const models::bert_config& cfg, int budget, uint64_t seed) {
  std::vector<int> lengths{1, cfg.max_position_embeddings, 2, 17, 3};
  models::splitmix64 rng(seed);
  int total = 0;
  for (int l : lengths) total += l;
  while (true) {
    int l = static_cast<int>(rng.uniform(1, cfg.max_position_embeddings));
    if (total + l > budget || lengths.size() >= 40) break;
    lengths.push_back(l);
    total += l;
  }
  auto b = models::synthetic_batch(lengths, cfg.vocab_size, seed);
  // Use token type 1 on the second half of some sequences, as sentence pairs do.
  for (int s = 0; s < b.num_seqs(); s += 2)
    for (int i = b.seq_offsets[s] + b.seq_len(s) / 2; i < b.seq_offsets[s + 1]; ++i) b.token_type_ids[i] = 1;
  return b;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

tile_deployment deploy(const models::bert_model& m, int tiles, std::optional<plan> p, int budget,
                       uint64_t memory = 128 << 20) {
  placement_request req;
  req.tiles = tiles;
  req.tile_memory = memory;
  req.token_budget = budget;
  req.forced = p;
  auto d = deploy_bert(m, req);
  EXPECT_TRUE(d.ok()) << d.error().to_string();
  if (!d.ok()) return {};
  return std::move(*d);
}

void expect_equal_reference(const models::bert_model& m, int tiles, std::optional<plan> p, int budget) {
  auto d = deploy(m, tiles, p, budget);
  ASSERT_TRUE(d.model);
  for (uint64_t seed : {1u, 2u}) {
    auto batch = mixed_batch(m.config, budget, seed);
    auto want = models::reference_forward(m, batch);
    for (int r = 0; r < d.model->compiled().chosen.replicas; ++r) {
      auto got = d.model->run(r, batch);
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_LT(max_diff(got->logits, want), tolerance)
          << "plan " << d.model->compiled().chosen.to_string() << " replica " << r;
    }
  }
  // The memory the compiler planned is what the tiles' arenas reached.
  auto run = d.model->run(0, mixed_batch(m.config, budget, 3));
  ASSERT_TRUE(run);
  for (const auto& [t, high] : run->memory_high_water)
    EXPECT_EQ(high, d.model->compiled().tiles[t].total_bytes()) << "tile " << t;
}

}  // namespace

// A random BERT preset (its weights' seed) with a token budget, on one plan.
struct preset_case {
  const char* model;
  uint64_t seed;
  int budget;
  case_t c;
};

std::vector<preset_case> on_plans(const char* model, uint64_t seed, int budget, std::initializer_list<case_t> cs) {
  std::vector<preset_case> v;
  for (const case_t& c : cs) v.push_back({model, seed, budget, c});
  return v;
}

class PresetOnTiles : public ::testing::TestWithParam<preset_case> {};

TEST_P(PresetOnTiles, LogitsEqualReference) {
  auto m = models::make_preset_model(GetParam().model, GetParam().seed);
  ASSERT_TRUE(m);
  expect_equal_reference(*m, GetParam().c.tiles, GetParam().c.p, GetParam().budget);
}

std::string preset_case_name(const ::testing::TestParamInfo<preset_case>& info) {
  return test_support::plan_name(info.param.c);
}

INSTANTIATE_TEST_SUITE_P(TinyPlans, PresetOnTiles,
                         ::testing::ValuesIn(on_plans("bert-tiny", 5, 1024,
                                                      {{1, {1, 1, 1, 1}}, {2, {1, 1, 2, 1}}, {2, {1, 2, 1, 2}},
                                                       {2, {2, 1, 1, 1}}, {3, {3, 1, 1, 1}}, {4, {1, 2, 2, 4}},
                                                       {4, {2, 1, 2, 1}}, {8, {4, 1, 2, 1}}, {8, {2, 2, 2, 3}},
                                                       {16, {8, 1, 2, 1}}})),
                         preset_case_name);

INSTANTIATE_TEST_SUITE_P(MiniPlans, PresetOnTiles,
                         ::testing::ValuesIn(on_plans("bert-mini", 7, 1536,
                                                      {{3, {1, 1, 3, 1}}, {3, {1, 3, 1, 5}}, {4, {1, 1, 4, 1}},
                                                       {8, {1, 2, 4, 4}}, {16, {1, 4, 4, 8}}, {16, {4, 1, 4, 1}}})),
                         preset_case_name);

class OddCheckpointOnTiles : public ::testing::TestWithParam<case_t> {};

// The Hugging Face checkpoint with 6 heads of 16, FFN 200, 3 labels, 3 layers. W = 7 leaves a
// lane with no heads at all.
TEST_P(OddCheckpointOnTiles, LogitsEqualReference) {
  auto m = models::load_model(odd_checkpoint());
  ASSERT_TRUE(m) << m.error().to_string();
  expect_equal_reference(*m, GetParam().tiles, GetParam().p, 256);
}

INSTANTIATE_TEST_SUITE_P(Plans, OddCheckpointOnTiles,
                         ::testing::Values(case_t{1, {1, 1, 1, 1}}, case_t{4, {1, 1, 4, 1}}, case_t{5, {1, 1, 5, 1}},
                                           case_t{6, {1, 3, 2, 3}}, case_t{7, {1, 1, 7, 1}}, case_t{8, {1, 2, 4, 2}}),
                         case_name);

TEST(TileModel, AutomaticPlanOnFiveTiles) {
  auto m = models::make_preset_model("bert-tiny", 1);
  ASSERT_TRUE(m);
  expect_equal_reference(*m, 5, std::nullopt, 1024);
}

TEST(TileModel, BatchOverBudgetIsRefusedAndGroupKeepsServing) {
  auto m = models::make_preset_model("bert-tiny", 1);
  ASSERT_TRUE(m);
  auto d = deploy(*m, 2, plan{1, 1, 2, 1}, 600);
  ASSERT_TRUE(d.model);
  auto big = models::synthetic_batch({300, 301}, m->config.vocab_size, 1);
  auto r = d.model->run(0, big);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("token budget"), std::string::npos);
  models::packed_batch empty;
  EXPECT_FALSE(d.model->run(0, empty).ok());
  auto ok = models::synthetic_batch({5, 9}, m->config.vocab_size, 1);
  auto good = d.model->run(0, ok);
  ASSERT_TRUE(good) << good.error().to_string();
  EXPECT_LT(max_diff(good->logits, models::reference_forward(*m, ok)), tolerance);
}

TEST(TileModel, ReplicasRunConcurrently) {
  auto m = models::make_preset_model("bert-tiny", 1);
  ASSERT_TRUE(m);
  auto d = deploy(*m, 4, plan{2, 1, 2, 1}, 1024);
  ASSERT_TRUE(d.model);
  auto b0 = mixed_batch(m->config, 1024, 11), b1 = mixed_batch(m->config, 1024, 12);
  result<tile_batch_result> r0 = status::internal("not run"), r1 = status::internal("not run");
  std::thread t0([&] { for (int i = 0; i < 5; ++i) r0 = d.model->run(0, b0); });
  std::thread t1([&] { for (int i = 0; i < 5; ++i) r1 = d.model->run(1, b1); });
  t0.join();
  t1.join();
  ASSERT_TRUE(r0 && r1);
  EXPECT_LT(max_diff(r0->logits, models::reference_forward(*m, b0)), tolerance);
  EXPECT_LT(max_diff(r1->logits, models::reference_forward(*m, b1)), tolerance);
}
