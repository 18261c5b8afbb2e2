// The batcher on a manual clock with a fake backend: batches, answers, limits, deadlines.
#include <gtest/gtest.h>

#include "fake_backend.hpp"
#include "tessera/serving/batcher.hpp"

using namespace tessera;
using namespace tessera::serving;
using namespace tessera::toys;
using namespace std::chrono_literals;
using test_support::fake_backend;

namespace {

struct answers {
  std::vector<sequence_outcome> got;
  std::mutex mu;
};

request_ptr make_request(std::vector<int32_t> ids, answers& a, time_point deadline = time_point::max()) {
  auto r = std::make_unique<inference_request>();
  r->input.token_ids = std::move(ids);
  r->deadline = deadline;
  r->done = [&a](sequence_outcome o) {
    std::lock_guard lock(a.mu);
    a.got.push_back(std::move(o));
  };
  return r;
}

std::vector<int32_t> seq(int n, int32_t base = 1000) {
  std::vector<int32_t> v{101};
  for (int i = 0; i < n - 2; ++i) v.push_back(base + i);
  v.push_back(102);
  return v;
}

// Dynamic batches of up to `max_batch_size`, at most one of them at the backend at a time.
batching_config one_in_flight(int max_batch_size, std::chrono::milliseconds max_queue_delay) {
  return {.kind = policy_kind::dynamic_padded, .max_batch_size = max_batch_size, .max_queue_delay = max_queue_delay,
          .max_inflight_batches = 1};
}

}  // namespace

TEST(Batcher, DynamicBatchAfterDelayAndAnswersRows) {
  manual_clock clk;
  auto be = std::make_shared<fake_backend>(backends::backend_info{.name = "f0", .kind = "gpu"});
  serving_metrics m;
  batcher b(be, {.kind = policy_kind::dynamic_padded, .max_batch_size = 8, .max_queue_delay = 2ms},
            clk, &m);
  answers a;
  auto r1 = make_request(seq(5), a);
  auto r2 = make_request(seq(9, 2000), a);
  auto want1 = toy_logits(r1->input, 2), want2 = toy_logits(r2->input, 2);
  ASSERT_TRUE(b.enqueue(r1).ok());
  ASSERT_TRUE(b.enqueue(r2).ok());
  EXPECT_EQ(r1, nullptr);
  EXPECT_EQ(b.queued_tokens(), 14);
  auto wake = b.poll();
  ASSERT_TRUE(wake);
  EXPECT_EQ(be->pending(), 0u);
  clk.advance(2ms);
  b.poll();
  ASSERT_EQ(be->submitted().size(), 1u);
  auto batch = be->submitted()[0];
  EXPECT_EQ(batch.sequences.size(), 2u);
  EXPECT_EQ(batch.layout, backends::batch_layout::padded);
  EXPECT_EQ(batch.padded_length, 9);
  EXPECT_EQ(b.inflight_batches(), 1);
  clk.advance(1ms);
  be->answer_all();
  ASSERT_EQ(a.got.size(), 2u);
  EXPECT_TRUE(a.got[0].st.ok());
  EXPECT_EQ(a.got[0].logits, want1);
  EXPECT_EQ(a.got[1].logits, want2);
  EXPECT_NEAR(a.got[0].queue_seconds, 0.002, 1e-9);
  EXPECT_NEAR(a.got[0].inference_seconds, 0.001, 1e-9);
  EXPECT_EQ(a.got[0].backend, "f0");
  EXPECT_EQ(b.inflight_batches(), 0);
  EXPECT_EQ(m.batch_count.load(), 1u);
  EXPECT_EQ(m.padding_tokens.load(), 4u);  // 2 x 9 - 14
}

TEST(Batcher, StaticBatchCarriesDummyRowsAndFixedLength) {
  manual_clock clk;
  auto be = std::make_shared<fake_backend>(
      backends::backend_info{.name = "f0", .kind = "gpu", .max_sequence_length = 64});
  batcher b(be, {.kind = policy_kind::static_padded, .max_batch_size = 4, .token_budget = 0,
                 .max_sequence_length = 512, .max_queue_delay = 1ms},
            clk);
  EXPECT_EQ(b.config().max_sequence_length, 64);  // capped by the backend
  answers a;
  auto r = make_request(seq(6), a);
  auto want = toy_logits(r->input, 2);
  ASSERT_TRUE(b.enqueue(r).ok());
  clk.advance(1ms);
  b.poll();
  ASSERT_EQ(be->submitted().size(), 1u);
  EXPECT_EQ(be->submitted()[0].sequences.size(), 4u);
  EXPECT_EQ(be->submitted()[0].padded_length, 64);
  be->answer_all();
  ASSERT_EQ(a.got.size(), 1u);
  EXPECT_EQ(a.got[0].logits, want);
}

TEST(Batcher, QueueLimitRefusesWithOverloaded) {
  manual_clock clk;
  auto be = std::make_shared<fake_backend>(backends::backend_info{.name = "f0"});
  batcher b(be, {.max_queue_requests = 2}, clk);
  answers a;
  auto r1 = make_request(seq(4), a), r2 = make_request(seq(4), a), r3 = make_request(seq(4), a);
  ASSERT_TRUE(b.enqueue(r1).ok());
  ASSERT_TRUE(b.enqueue(r2).ok());
  status st = b.enqueue(r3);
  EXPECT_EQ(st.code(), errc::overloaded);
  ASSERT_NE(r3, nullptr);  // still ours
  clk.advance(10ms);
  b.poll();
  be->answer_all();
  EXPECT_EQ(a.got.size(), 2u);
}

TEST(Batcher, DeadlinePassedInQueueIsATimeout) {
  manual_clock clk;
  auto be = std::make_shared<fake_backend>(backends::backend_info{.name = "f0"});
  batcher b(be, one_in_flight(8, 10ms), clk);
  answers a;
  auto r1 = make_request(seq(4), a, clk.now() + 5ms);
  ASSERT_TRUE(b.enqueue(r1).ok());
  auto wake = b.poll();
  ASSERT_TRUE(wake);
  EXPECT_EQ(*wake, clk.now() + 5ms);  // the deadline comes before the batch delay
  clk.advance(5ms);
  b.poll();
  ASSERT_EQ(a.got.size(), 1u);
  EXPECT_EQ(a.got[0].st.code(), errc::timeout);
  EXPECT_EQ(be->submitted().size(), 0u);
}

TEST(Batcher, InflightLimitHoldsTheQueueUntilAnAnswer) {
  manual_clock clk;
  auto be = std::make_shared<fake_backend>(backends::backend_info{.name = "f0"});
  batcher b(be, one_in_flight(2, 0ms), clk);
  answers a;
  for (int i = 0; i < 5; ++i) {
    auto r = make_request(seq(4), a);
    ASSERT_TRUE(b.enqueue(r).ok());
  }
  b.poll();
  EXPECT_EQ(be->submitted().size(), 1u);
  EXPECT_EQ(b.queue_size(), 3u);
  be->answer_all();
  b.poll();
  EXPECT_EQ(be->submitted().size(), 2u);
  be->answer_all();
  b.poll();
  be->answer_all();
  EXPECT_EQ(a.got.size(), 5u);
  EXPECT_EQ(be->submitted().back().sequences.size(), 1u);
}

TEST(Batcher, FailedBatchWithoutHandlerAnswersEveryRequestWithTheError) {
  manual_clock clk;
  auto be = std::make_shared<fake_backend>(backends::backend_info{.name = "f0"});
  batcher b(be, {.max_queue_delay = 0ms}, clk);
  answers a;
  for (int i = 0; i < 3; ++i) {
    auto r = make_request(seq(4), a);
    ASSERT_TRUE(b.enqueue(r).ok());
  }
  b.poll();
  be->answer_all(status::peer_failed("tile 3 vanished"));
  ASSERT_EQ(a.got.size(), 3u);
  for (auto& o : a.got) {
    EXPECT_EQ(o.st.code(), errc::peer_failed);
    EXPECT_NE(o.st.message().find("tile 3 vanished"), std::string::npos);
  }
}

TEST(Batcher, ThreadedStopAnswersEverythingAccepted) {
  auto be = std::make_shared<fake_backend>(backends::backend_info{.name = "f0"}, /*answer_at_once=*/true);
  answers a;
  {
    batcher b(be, {.kind = policy_kind::dynamic_padded, .max_batch_size = 4,
                   .max_queue_delay = std::chrono::seconds(10)});
    b.start();
    for (int i = 0; i < 10; ++i) {
      auto r = make_request(seq(4 + i), a);
      ASSERT_TRUE(b.enqueue(r).ok());
    }
    b.stop();  // delay of 10 s is not waited for: stop flushes
    auto r = make_request(seq(4), a);
    EXPECT_EQ(b.enqueue(r).code(), errc::cancelled);
  }
  EXPECT_EQ(a.got.size(), 10u);
  for (auto& o : a.got) EXPECT_TRUE(o.st.ok());
}
