// tessera-loadgen's driver against a real server: every request answered and counted, open and
// closed loop; synthetic texts tokenize to about the requested length.
#include <gtest/gtest.h>

#include "tessera/loadgen/http_driver.hpp"
#include "test_server.hpp"

using namespace tessera;
using namespace tessera::loadgen;
using namespace tessera::serving::test_support;

TEST(LoadgenHttp, ClosedLoopEveryRequestAnswered) {
  test_server s(test_server_options{.toy = true});
  driver_config cfg{.port = s.port(), .mode = loop_mode::closed, .connections = 8,
                    .max_requests = 400, .progress = false};
  auto plan = synthesize(*mix_preset("seed-40"), 100, 0, 1);
  auto r = run_load(cfg, plan);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->sent, 400);
  EXPECT_EQ(r->ok, 400);
  EXPECT_EQ(r->errors, 0);
  EXPECT_GT(r->throughput, 0);
  EXPECT_GT(r->p99_ms, 0);
  EXPECT_EQ(s.metrics().request_success.load(), 400u);
}

TEST(LoadgenHttp, OpenLoopSendsThePlanAtItsTimes) {
  test_server s(test_server_options{.toy = true});
  auto plan = synthesize(*mix_preset("seed-0"), 200, 400.0, 2);  // ~0.5 s
  driver_config cfg{.port = s.port(), .mode = loop_mode::open, .connections = 16,
                    .progress = false};
  auto r = run_load(cfg, plan);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->sent, 200);
  EXPECT_EQ(r->ok, 200);
  EXPECT_GE(r->duration_seconds, plan.back().arrival_seconds);
  EXPECT_LT(r->duration_seconds, plan.back().arrival_seconds + 2.0);
}

TEST(LoadgenHttp, ErrorsAreCountedByKind) {
  test_server s(test_server_options{.toy = true});
  std::vector<planned_request> plan{{0, 0, "fine"}, {0, 0, std::string(600 * 2, 'a') + " b"}};
  plan[1].text.clear();
  for (int i = 0; i < 600; ++i) plan[1].text += "word ";
  driver_config cfg{.port = s.port(), .mode = loop_mode::closed, .connections = 1,
                    .truncate = false, .progress = false};
  auto r = run_load(cfg, plan);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->ok, 1);
  EXPECT_EQ(r->errors, 1);
  EXPECT_EQ(r->errors_by_kind["413"], 1);  // TEI answers an input over the length limit 413
  // Nobody listening: connect errors, not a hang.
  uint16_t dead = s.port();
  s.stop();
  driver_config none{.port = dead, .mode = loop_mode::closed, .connections = 2,
                     .max_requests = 4, .progress = false};
  auto r2 = run_load(none, plan);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->ok, 0);
  EXPECT_EQ(r2->errors, 4);
}

TEST(LoadgenHttp, SyntheticTextsTokenizeToTheRequestedLength) {
  test_server s;  // bert-tiny and its WordPiece tokenizer
  auto plan = synthesize(*mix_preset("seed-40"), 200, 0, 4);
  for (const auto& p : plan) {
    auto seq = s.tok().encode(p.text, 0);
    ASSERT_TRUE(seq);
    EXPECT_EQ(static_cast<int32_t>(seq->token_ids.size()), p.tokens) << p.text;
  }
}

TEST(LoadgenHttp, ManyConcurrentConnections) {
  test_server s(test_server_options{.toy = true});
  driver_config cfg{.port = s.port(), .mode = loop_mode::closed, .connections = 256,
                    .max_requests = 3000, .progress = false};
  auto r = run_load(cfg, synthesize(*mix_preset("seed-0"), 500, 0, 5));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->ok, 3000);
  EXPECT_EQ(r->errors, 0);
}
