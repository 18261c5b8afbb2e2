// Batching policies as pure functions on a fake clock.
#include <gtest/gtest.h>

#include "tessera/serving/batching_policy.hpp"

using namespace tessera::serving;
using namespace std::chrono_literals;

namespace {

const time_point t0 = time_point(std::chrono::hours(1));

std::vector<queued_view> queue_of(std::vector<int32_t> lengths, time_point at = t0) {
  std::vector<queued_view> q;
  for (auto l : lengths) q.push_back({l, at});
  return q;
}

}  // namespace

TEST(BatchingPolicy, ParsesNames) {
  EXPECT_EQ(*parse_policy_kind("static"), policy_kind::static_padded);
  EXPECT_EQ(*parse_policy_kind("dynamic"), policy_kind::dynamic_padded);
  EXPECT_EQ(*parse_policy_kind("token-budget"), policy_kind::token_budget);
  EXPECT_FALSE(parse_policy_kind("fifo"));
}

TEST(BatchingPolicy, EmptyQueueWaitsForArrivals) {
  auto p = make_policy({.kind = policy_kind::dynamic_padded});
  auto d = p->decide({}, t0);
  EXPECT_FALSE(d.batch);
  EXPECT_FALSE(d.wake_at);
}

TEST(StaticPolicy, WaitsForFullBatchThenPadsToMaxLength) {
  auto p = make_policy({.kind = policy_kind::static_padded, .max_batch_size = 4, .token_budget = 0,
                        .max_sequence_length = 128, .max_queue_delay = 5ms});
  auto q = queue_of({10, 20, 30});
  auto d = p->decide(q, t0 + 1ms);
  ASSERT_FALSE(d.batch);
  ASSERT_TRUE(d.wake_at);
  EXPECT_EQ(*d.wake_at, t0 + 5ms);
  // A full batch goes at once.
  q = queue_of({10, 20, 30, 40, 50});
  d = p->decide(q, t0 + 1ms);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(d.batch->layout, tessera::backends::batch_layout::padded);
  EXPECT_EQ(d.batch->padded_length, 128);
  EXPECT_EQ(d.batch->fill_to_sequences, 4);
  // A partial batch goes after the delay, still [B, max_len].
  q = queue_of({10, 20});
  d = p->decide(q, t0 + 5ms);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take.size(), 2u);
  EXPECT_EQ(d.batch->padded_length, 128);
  EXPECT_EQ(d.batch->fill_to_sequences, 4);
}

TEST(DynamicPolicy, PadsToLongestInBatchAndClosesOnSizeOrDelay) {
  auto p = make_policy({.kind = policy_kind::dynamic_padded, .max_batch_size = 3,
                        .token_budget = 0, .max_queue_delay = 2ms});
  auto q = queue_of({10, 40});
  EXPECT_FALSE(p->decide(q, t0 + 1ms).batch);
  auto d = p->decide(q, t0 + 2ms);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->padded_length, 40);
  EXPECT_EQ(d.batch->fill_to_sequences, 0);
  q = queue_of({10, 40, 5, 7});
  d = p->decide(q, t0);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(d.batch->padded_length, 40);
}

TEST(DynamicPolicy, TokenBudgetCapsPaddedRectangle) {
  auto p = make_policy({.kind = policy_kind::dynamic_padded, .max_batch_size = 32,
                        .token_budget = 1000, .max_queue_delay = 2ms});
  // 3 x 300 = 900 fits, a fourth would make 1200: the batch is full at 3.
  auto d = p->decide(queue_of({300, 300, 300, 300}), t0);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take.size(), 3u);
}

TEST(DynamicPolicy, FlushClosesAtOnce) {
  auto p = make_policy({.kind = policy_kind::dynamic_padded, .max_batch_size = 8,
                        .max_queue_delay = 1s});
  EXPECT_TRUE(p->decide(queue_of({5}), t0, /*flush=*/true).batch);
}

TEST(TokenBudgetPolicy, PacksWithoutPaddingUpToBudget) {
  auto p = make_policy({.kind = policy_kind::token_budget, .max_batch_size = 0,
                        .token_budget = 100, .max_queue_delay = 2ms});
  auto q = queue_of({30, 30, 30, 30});
  auto d = p->decide(q, t0);  // 120 queued >= budget: full now
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(d.batch->layout, tessera::backends::batch_layout::packed);
  EXPECT_EQ(d.batch->padded_length, 0);
}

TEST(TokenBudgetPolicy, WaitsUntilDelayWhenUnderBudget) {
  auto p = make_policy({.kind = policy_kind::token_budget, .token_budget = 1000,
                        .max_queue_delay = 3ms});
  auto q = queue_of({30, 30});
  auto d = p->decide(q, t0 + 1ms);
  EXPECT_FALSE(d.batch);
  EXPECT_EQ(*d.wake_at, t0 + 3ms);
  EXPECT_TRUE(p->decide(q, t0 + 3ms).batch);
}

TEST(TokenBudgetPolicy, LengthAwareManyShortOrFewLong) {
  auto p = make_policy({.kind = policy_kind::token_budget, .max_batch_size = 0,
                        .token_budget = 1024, .max_queue_delay = 0ms});
  std::vector<int32_t> shorts(64, 16);
  auto d = p->decide(queue_of(shorts), t0);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take.size(), 64u);  // 64 x 16 = 1024
  d = p->decide(queue_of({500, 500, 500}), t0);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take.size(), 2u);
}

TEST(TokenBudgetPolicy, FirstFitFillsGapsWithShortOnes) {
  auto p = make_policy({.kind = policy_kind::token_budget, .max_batch_size = 0,
                        .token_budget = 600, .max_queue_delay = 0ms});
  auto d = p->decide(queue_of({500, 400, 60, 40}), t0);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take, (std::vector<size_t>{0, 2, 3}));  // 500 + 60 + 40
}

TEST(TokenBudgetPolicy, StarvingRequestGoesFirst) {
  auto p = make_policy({.kind = policy_kind::token_budget, .max_batch_size = 0,
                        .token_budget = 512, .max_queue_delay = 1ms, .max_age = 10ms});
  // A long request that arrived late in queue order but is old (a retry): 400 tokens, age 20 ms;
  // in front of it, fresh short requests that would fill the budget.
  std::vector<queued_view> q;
  for (int i = 0; i < 20; ++i) q.push_back({20, t0 + 19ms});
  q.push_back({400, t0});
  auto d = p->decide(q, t0 + 20ms);
  ASSERT_TRUE(d.batch);
  EXPECT_NE(std::find(d.batch->take.begin(), d.batch->take.end(), 20u), d.batch->take.end());
  int tokens = 0;
  for (auto i : d.batch->take) tokens += q[i].length;
  EXPECT_LE(tokens, 512);
}

TEST(TokenBudgetPolicy, OversizedSequenceGoesAlone) {
  auto p = make_policy({.kind = policy_kind::token_budget, .token_budget = 100,
                        .max_queue_delay = 0ms});
  auto d = p->decide(queue_of({300, 10}), t0);
  ASSERT_TRUE(d.batch);
  EXPECT_EQ(d.batch->take, (std::vector<size_t>{0}));
}

TEST(TokenBudgetPolicy, MaxBatchSizeCapsSequences) {
  auto p = make_policy({.kind = policy_kind::token_budget, .max_batch_size = 4,
                        .token_budget = 10000, .max_queue_delay = 1s});
  auto d = p->decide(queue_of(std::vector<int32_t>(10, 8)), t0);
  ASSERT_TRUE(d.batch);  // 10 >= cap: full
  EXPECT_EQ(d.batch->take.size(), 4u);
}

TEST(BatchingConfig, Validates) {
  EXPECT_TRUE(batching_config{}.validate().ok());
  EXPECT_FALSE((batching_config{.max_inflight_batches = 0}.validate().ok()));
  EXPECT_FALSE((batching_config{.kind = policy_kind::static_padded, .max_batch_size = 0}.validate().ok()));
}
