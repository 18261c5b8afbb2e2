// Routing rules: least outstanding work, hybrid by length, health, retry once, never dropped.
#include <gtest/gtest.h>

#include "fake_backend.hpp"
#include "tessera/serving/router.hpp"

using namespace tessera;
using namespace tessera::serving;
using namespace tessera::toys;
using namespace std::chrono_literals;
using test_support::fake_backend;

namespace {

struct collected {
  std::vector<sequence_outcome> got;
};

request_ptr make_request(int len, collected& c) {
  auto r = std::make_unique<inference_request>();
  r->input.token_ids.assign(static_cast<size_t>(len), 1000);
  r->input.token_ids.front() = 101;
  r->input.token_ids.back() = 102;
  r->done = [&c](sequence_outcome o) { c.got.push_back(std::move(o)); };
  return r;
}

const batching_config now_cfg{.kind = policy_kind::token_budget, .token_budget = 4096,
                              .max_queue_delay = 0ms};

// A fake backend `name` (of `kind`) added to `r` with now_cfg.
std::shared_ptr<fake_backend> add_fake(router& r, const std::string& name, const std::string& kind = "") {
  auto b = std::make_shared<fake_backend>(backends::backend_info{.name = name, .kind = kind});
  EXPECT_TRUE(r.add_backend(b, now_cfg).ok()) << name;
  return b;
}

void pump(router& r) {
  for (size_t i = 0; i < r.num_backends(); ++i) r.backend_batcher(i).poll();
}

}  // namespace

TEST(Router, ParsesStrategies) {
  EXPECT_EQ(*parse_routing_strategy("hybrid"), routing_strategy::hybrid_length);
  EXPECT_EQ(*parse_routing_strategy("least-outstanding"), routing_strategy::least_outstanding);
  EXPECT_FALSE(parse_routing_strategy("random"));
}

TEST(Router, LeastOutstandingWork) {
  manual_clock clk;
  router r({}, clk);
  auto a = add_fake(r, "a", "gpu"), b = add_fake(r, "b", "gpu");
  a->extra_load = 100;
  EXPECT_EQ(*r.choose(10), 1u);
  b->extra_load = 200;
  EXPECT_EQ(*r.choose(10), 0u);
  // Queued tokens count too: 150 queued on a makes it heavier than b.
  collected c;
  auto req = make_request(150, c);
  ASSERT_TRUE(r.backend_batcher(0).enqueue(req).ok());
  EXPECT_EQ(*r.choose(10), 1u);
  // Spreads a stream of equal requests across both.
  a->extra_load = b->extra_load = 0;
  for (int i = 0; i < 10; ++i) {
    auto x = make_request(20, c);
    ASSERT_TRUE(r.submit(x).ok());
  }
  EXPECT_GE(r.backend_batcher(1).queue_size(), 5u);
  pump(r);
  a->answer_all();
  b->answer_all();
  EXPECT_EQ(c.got.size(), 11u);
}

TEST(Router, HybridSendsLongToTilesAndShortToGpu) {
  manual_clock clk;
  router r({.strategy = routing_strategy::hybrid_length, .long_threshold = 128}, clk);
  auto gpu = add_fake(r, "gpu0", "gpu"), tiles = add_fake(r, "tiles0", "tiles");
  gpu->extra_load = 1'000'000;  // length wins over load
  EXPECT_EQ(*r.choose(128), 0u);
  EXPECT_EQ(*r.choose(129), 1u);
  EXPECT_EQ(*r.choose(12), 0u);
  // The preferred kind unhealthy: the other kind serves.
  tiles->healthy_flag = false;
  EXPECT_EQ(*r.choose(300), 0u);
  gpu->healthy_flag = false;
  EXPECT_FALSE(r.choose(300));
  EXPECT_FALSE(r.healthy());
  collected c;
  auto req = make_request(300, c);
  EXPECT_EQ(r.submit(req).code(), errc::peer_failed);
  ASSERT_NE(req, nullptr);
}

TEST(Router, ThresholdIsConfigurable) {
  manual_clock clk;
  router r({.strategy = routing_strategy::hybrid_length, .long_threshold = 32}, clk);
  ASSERT_TRUE(r.add_backend(
      std::make_shared<fake_backend>(backends::backend_info{.name = "g", .kind = "gpu"}), now_cfg).ok());
  ASSERT_TRUE(r.add_backend(
      std::make_shared<fake_backend>(backends::backend_info{.name = "t", .kind = "tiles"}), now_cfg).ok());
  EXPECT_EQ(*r.choose(32), 0u);
  EXPECT_EQ(*r.choose(33), 1u);
}

TEST(Router, UnhealthyBackendsAreSkipped) {
  manual_clock clk;
  router r({}, clk);
  auto a = add_fake(r, "a"), b = add_fake(r, "b");
  b->extra_load = 1000;
  a->healthy_flag = false;
  EXPECT_EQ(*r.choose(10), 1u);
}

TEST(Router, FailedBatchIsRetriedOnceElsewhere) {
  manual_clock clk;
  serving_metrics m;
  router r({}, clk, &m);
  auto a = add_fake(r, "a"), b = add_fake(r, "b");
  b->extra_load = 1000;  // everything goes to a first
  collected c;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 4; ++i) {
    auto req = make_request(10 + i, c);
    want.push_back(toy_logits(req->input, 2));
    ASSERT_TRUE(r.submit(req).ok());
  }
  EXPECT_EQ(r.backend_batcher(0).queue_size(), 4u);
  pump(r);
  a->answer_all(status::peer_failed("tile group a lost a tile"));
  EXPECT_TRUE(c.got.empty());  // nothing answered yet: moved to b
  EXPECT_EQ(r.backend_batcher(1).queue_size(), 4u);
  EXPECT_EQ(m.retries.load(), 4u);
  pump(r);
  b->answer_all();
  ASSERT_EQ(c.got.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(c.got[i].st.ok());
    EXPECT_EQ(c.got[i].backend, "b");
  }
}

TEST(Router, SecondFailureIsAnsweredWithTheError) {
  manual_clock clk;
  router r({}, clk);
  auto a = add_fake(r, "a"), b = add_fake(r, "b"), c3 = add_fake(r, "c");
  b->extra_load = 1000;
  c3->extra_load = 2000;
  collected c;
  auto req = make_request(10, c);
  ASSERT_TRUE(r.submit(req).ok());
  pump(r);
  a->answer_all(status::internal("boom a"));
  pump(r);
  b->answer_all(status::internal("boom b"));
  ASSERT_EQ(c.got.size(), 1u);  // not tried a third time on c
  EXPECT_EQ(c.got[0].st.code(), errc::internal);
  EXPECT_NE(c.got[0].st.message().find("boom b"), std::string::npos);
  EXPECT_EQ(c3->submitted().size(), 0u);
}

TEST(Router, FailureWithNoOtherHealthyBackendIsAnswered) {
  manual_clock clk;
  router r({}, clk);
  auto a = add_fake(r, "a"), b = add_fake(r, "b");
  b->healthy_flag = false;
  collected c;
  auto req = make_request(10, c);
  ASSERT_TRUE(r.submit(req).ok());
  pump(r);
  a->answer_all(status::peer_failed("gone"));
  ASSERT_EQ(c.got.size(), 1u);
  EXPECT_EQ(c.got[0].st.code(), errc::peer_failed);
  EXPECT_NE(c.got[0].st.message().find("retry impossible"), std::string::npos);
}

TEST(Router, TooLongForEveryBackendIsInvalid) {
  manual_clock clk;
  router r({}, clk);
  ASSERT_TRUE(r.add_backend(std::make_shared<fake_backend>(
                                backends::backend_info{.name = "a", .max_sequence_length = 128}),
                            now_cfg).ok());
  collected c;
  auto req = make_request(129, c);
  EXPECT_EQ(r.submit(req).code(), errc::invalid_argument);
  EXPECT_EQ(r.max_sequence_length(), 128);
}

TEST(Router, FullQueueFallsThroughToTheNextBackendThenOverloaded) {
  manual_clock clk;
  router r({}, clk);
  batching_config tiny = now_cfg;
  tiny.max_queue_requests = 1;
  auto a = std::make_shared<fake_backend>(backends::backend_info{.name = "a"});
  auto b = std::make_shared<fake_backend>(backends::backend_info{.name = "b"});
  ASSERT_TRUE(r.add_backend(a, tiny).ok());
  ASSERT_TRUE(r.add_backend(b, tiny).ok());
  collected c;
  auto r1 = make_request(10, c), r2 = make_request(10, c), r3 = make_request(10, c);
  ASSERT_TRUE(r.submit(r1).ok());
  ASSERT_TRUE(r.submit(r2).ok());
  EXPECT_EQ(r.submit(r3).code(), errc::overloaded);
  pump(r);
  a->answer_all();
  b->answer_all();
  EXPECT_EQ(c.got.size(), 2u);
}
