// A decoder's lanes reducing by one all-reduce superstep (plan::reduce all_reduce: every lane
// sends its whole partial rows to the other lanes and sums the W partials itself in lane order)
// against reduce-scatter + all-gather, on real tile processes, for llama-tiny and gpt2-tiny, fp32
// and bf16, W = 2 and 3:
//  - the mixed schedule of decoder_cases.hpp (prefill chunks beside decodes, sequences joining and
//    leaving) within decoder_logit_bound of the one-process decoder in the same dtype, the tiles'
//    memory high water equal to the plan (the receive slots counted);
//  - greedy generation over several decode steps, all-reduce, reduce-scatter + all-gather and the
//    one-process reference in lock step: tokens equal (but where the reference's top-2 margin is
//    under twice the row's largest difference, which could flip it), logits
//    within the bound; at W = 2 the two collectives add the same two numbers in either order, so
//    their logits are equal bit for bit;
//  - the supersteps each step's run reports: 2 x layers + 1 against 4 x layers + 1;
//  - tessera-host --collective allreduce --check on 2 tiles generates the reference's tokens, and
//    a bad --collective, all-reduce on a plan without lanes and on BERT are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "decoder_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::test_support;

namespace {

bool bf16_cpu() { return models::check_dtype_supported(models::dtype::bf16).ok(); }

struct reduce_case {
  const char* model;
  models::dtype dtype;
  int width;
};

std::string case_name(const reduce_case& c) {
  return model_plan_name(c.model, plan{1, 1, c.width, 1}) + "_" + std::string(models::dtype_name(c.dtype));
}

int32_t argmax(const std::vector<float>& v) { return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); }

// A reference row whose top-2 margin is under twice `noise` (the largest |tile - reference| of
// the row): its token may flip under the reordered sums, and is not compared. (bf16's bound is
// too wide to tell ties by: most rows of the tiny models would count as ties under it.)
bool near_tie(const std::vector<float>& w, double noise) {
  float a = -INFINITY, b = -INFINITY;
  for (float x : w) {
    if (x > a) b = a, a = x;
    else if (x > b) b = x;
  }
  return double(a) - double(b) <= 2 * noise;
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace

class AllReduceOnTiles : public ::testing::TestWithParam<reduce_case> {};

TEST_P(AllReduceOnTiles, TokensEqualReduceScatterAndTheReferenceInHalfTheSupersteps) {
  const auto& pc = GetParam();
  if (pc.dtype == models::dtype::bf16 && !bf16_cpu()) GTEST_SKIP() << "no native bf16 on this CPU";
  auto m = models::make_preset_decoder(pc.model, 5);
  ASSERT_TRUE(m) << m.error().to_string();
  if (pc.dtype == models::dtype::bf16) ASSERT_TRUE(m->set_dtype(pc.dtype).ok());
  auto model = std::make_shared<const models::decoder_model>(std::move(*m));
  const int L = model->shape().num_layers, W = pc.width;
  const double bound = decoder_logit_bound(model->shape(), pc.dtype).bound;
  const plan p{1, 1, W, 1};
  auto ar = deploy_decoder(model, W, p, {.tile_memory = 64ull << 20, .dtype = pc.dtype, .reduce = collective::all_reduce});
  auto rs = deploy_decoder(model, W, p, {.tile_memory = 64ull << 20, .dtype = pc.dtype, .reduce = collective::rs_ag});
  ASSERT_TRUE(ar.dec && rs.dec);
  ASSERT_EQ(ar.dec->compiled().chosen.reduce, collective::all_reduce);
  ASSERT_EQ(rs.dec->compiled().chosen.reduce, collective::rs_ag);

  // The mixed schedule against the one-process decoder (memory high water = plan every step).
  const auto mixed = step_mixed_schedule(*model, *ar.dec, 0, /*skip_blocks=*/3);
  EXPECT_TRUE(mixed.ok);
  EXPECT_GT(mixed.steps, 10);
  EXPECT_LE(mixed.worst_scaled, bound) << "all-reduce, mixed schedule";
  std::printf("%s W=%d all-reduce, mixed schedule: %d steps, worst scaled %.2e (bound %.2e)\n", case_name(pc).c_str(), W,
              mixed.steps, mixed.worst_scaled, bound);

  // Greedy generation in lock step: 3 sequences, prompts of 5, 9 and 13 tokens, then 8 decode steps.
  const auto& c = ar.dec->compiled();
  auto cache = models::paged_kv_cache::make(model->shape(), c.kv);
  ASSERT_TRUE(cache);
  models::splitmix64 rng(7);
  const std::vector<int> prompts{5, 9, 13};
  std::vector<std::vector<int32_t>> tokens(prompts.size());
  std::vector<std::vector<int32_t>> blocks(prompts.size());
  std::vector<int> computed(prompts.size(), 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int k = 0; k < prompts[i]; ++k) tokens[i].push_back(static_cast<int32_t>(rng.uniform(0, model->shape().vocab_size - 1)));
    for (int b = 0; b < 2; ++b) blocks[i].push_back(static_cast<int32_t>(i * 2 + b));
  }
  double worst_ar = 0, worst_rs = 0, worst_between = 0;
  int compared = 0, ties = 0;
  for (int step = 0; step < 9; ++step) {
    models::step_batch b;
    for (size_t i = 0; i < prompts.size(); ++i)
      b.seqs.push_back({i, {tokens[i].begin() + computed[i], tokens[i].end()}, computed[i], blocks[i], true});
    auto want = model->step(b, *cache);
    auto got_ar = ar.dec->step(0, b);
    auto got_rs = rs.dec->step(0, b);
    ASSERT_TRUE(want && got_ar && got_rs);
    // The supersteps the tiles report running: 2 a layer and the last layer's sum (the logits'
    // superstep), against 4 a layer and the logits'.
    EXPECT_EQ(got_ar->supersteps, 2 * L + 1);
    EXPECT_EQ(got_rs->supersteps, 4 * L + 1);
    ASSERT_EQ(got_ar->logits.size(), prompts.size());
    ASSERT_EQ(got_rs->logits.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto& w = (*want)[i];
      const auto &a = got_ar->logits[i], &r = got_rs->logits[i];
      worst_ar = std::max(worst_ar, scaled_logit_difference(a, w));
      worst_rs = std::max(worst_rs, scaled_logit_difference(r, w));
      worst_between = std::max(worst_between, scaled_logit_difference(a, r));
      if (W == 2) EXPECT_EQ(a, r) << "step " << step << " row " << i << ": W = 2 adds the same two partials";
      if (near_tie(w, std::max(max_abs_difference(a, w), max_abs_difference(r, w)))) ++ties;
      else {
        ++compared;
        EXPECT_EQ(argmax(a), argmax(w)) << "step " << step << " row " << i;
        EXPECT_EQ(argmax(a), argmax(r)) << "step " << step << " row " << i;
      }
      computed[i] = static_cast<int>(tokens[i].size());
      tokens[i].push_back(argmax(w));
    }
    for (const auto& [t, high] : got_ar->memory_high_water)
      EXPECT_EQ(high, c.tiles[t].total_bytes()) << "tile " << t << ": the plan and the arena disagree";
  }
  EXPECT_LE(worst_ar, bound);
  EXPECT_LE(worst_rs, bound);
  EXPECT_GT(compared, 20);
  EXPECT_EQ(ar.dec->compiled().barriers(), 2 * L);
  EXPECT_EQ(rs.dec->compiled().barriers(), 4 * L);
  std::printf("%s W=%d greedy, 9 steps: worst scaled all-reduce %.2e, rs-ag %.2e, between them %.2e (bound %.2e); "
              "%d tokens compared, %d near ties\n",
              case_name(pc).c_str(), W, worst_ar, worst_rs, worst_between, bound, compared, ties);
}

INSTANTIATE_TEST_SUITE_P(Models, AllReduceOnTiles,
                         ::testing::Values(reduce_case{"llama-tiny", models::dtype::fp32, 2},
                                           reduce_case{"llama-tiny", models::dtype::fp32, 3},
                                           reduce_case{"llama-tiny", models::dtype::bf16, 2},
                                           reduce_case{"llama-tiny", models::dtype::bf16, 3},
                                           reduce_case{"gpt2-tiny", models::dtype::fp32, 2},
                                           reduce_case{"gpt2-tiny", models::dtype::fp32, 3},
                                           reduce_case{"gpt2-tiny", models::dtype::bf16, 2},
                                           reduce_case{"gpt2-tiny", models::dtype::bf16, 3}),
                         [](const auto& info) { return case_name(info.param); });

TEST(AllReduceHost, CheckGeneratesTheReferenceAndBadChoicesAreRefusedByName) {
  std::string out;
  int rc = run_tessera_host("--model llama-tiny --tiles 2 --plan 1,1,2 --collective allreduce --check 2 "
                            "--step-token-budget 64 --max-running 2 --kv-blocks 32",
                            out, 300);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("plan R=1 S=1 W=2 M=1 all-reduce"), std::string::npos) << out;
  EXPECT_NE(out.find("lanes reduce by all-reduce"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "check sequence "), 2) << out;
  EXPECT_NE(out.find("per generated token"), std::string::npos) << out;
  for (const auto& [args, says] :
       std::vector<std::pair<std::string, std::string>>{
           {"--model llama-tiny --tiles 2 --collective ring --check 1", "--collective 'ring'"},
           {"--model llama-tiny --tiles 2 --plan 1,2,1 --collective allreduce --plan-only", "W=1"},
           {"--model bert-tiny --tiles 2 --plan 1,1,2 --collective allreduce --check 1", "--collective allreduce is for decoders"}}) {
    std::string refused;
    const int refused_rc = run_tessera_host(args, refused, 120);
    EXPECT_NE(refused_rc, 0) << args << "\n" << refused;
    EXPECT_NE(refused_rc, -1) << args << ": killed, not refused\n" << refused;
    EXPECT_NE(refused.find(says), std::string::npos) << args << "\n" << refused;
  }
}
