// The shared serving flags: names, units, validation.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>

#include "tessera/serving/serve_options.hpp"

using namespace tessera::serving;
namespace po = boost::program_options;

namespace {

tessera::status parse(std::vector<const char*> args, serve_options& so) {
  po::options_description opts;
  add_serve_options(opts, so);
  args.insert(args.begin(), "test");
  po::variables_map vm;
  po::store(po::parse_command_line(static_cast<int>(args.size()), args.data(), opts), vm);
  po::notify(vm);
  return finish_serve_options(so);
}

}  // namespace

TEST(ServeOptions, DefaultsBindLoopback) {
  serve_options so;
  ASSERT_TRUE(parse({}, so).ok());
  EXPECT_EQ(so.server.address, "127.0.0.1");
  EXPECT_EQ(so.server.port, 8080);
  EXPECT_EQ(so.batching.kind, policy_kind::dynamic_padded);
  EXPECT_EQ(so.routing.strategy, routing_strategy::least_outstanding);
}

TEST(ServeOptions, ParsesNamesAndUnits) {
  serve_options so;
  ASSERT_TRUE(parse({"--port", "0", "--batching", "token-budget", "--token-budget", "2048",
                     "--max-queue-delay-ms", "1.5", "--routing", "hybrid", "--long-threshold",
                     "200", "--timeout-ms", "250", "--answer-grace-ms", "10", "--auto-truncate"},
                    so).ok());
  EXPECT_EQ(so.server.port, 0);
  EXPECT_EQ(so.batching.kind, policy_kind::token_budget);
  EXPECT_EQ(so.batching.token_budget, 2048);
  EXPECT_EQ(so.batching.max_queue_delay, std::chrono::microseconds(1500));
  EXPECT_EQ(so.routing.strategy, routing_strategy::hybrid_length);
  EXPECT_EQ(so.routing.long_threshold, 200);
  EXPECT_EQ(so.server.api.request_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(so.server.api.answer_grace, std::chrono::milliseconds(10));
  EXPECT_TRUE(so.server.api.auto_truncate);
}

TEST(ServeOptions, PolicyPerBackendKind) {
  serve_options so;
  ASSERT_TRUE(parse({"--batching", "dynamic", "--gpu-batching", "static", "--tiles-batching",
                     "token-budget", "--max-batch-size", "16"},
                    so).ok());
  EXPECT_EQ(so.batching_for("gpu").kind, policy_kind::static_padded);
  EXPECT_EQ(so.batching_for("tiles").kind, policy_kind::token_budget);
  EXPECT_EQ(so.batching_for("reference").kind, policy_kind::dynamic_padded);
  EXPECT_EQ(so.batching_for("gpu").max_batch_size, 16);
  serve_options bad;
  EXPECT_FALSE(parse({"--tiles-batching", "nope"}, bad).ok());
}

TEST(ServeOptions, MistakesSayWhatToChange) {
  serve_options a;
  auto st = parse({"--batching", "fifo"}, a);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("static, dynamic or token-budget"), std::string::npos);
  serve_options b;
  EXPECT_FALSE(parse({"--port", "70000"}, b).ok());
  serve_options c;
  EXPECT_FALSE(parse({"--max-inflight-batches", "0"}, c).ok());
  serve_options d;
  EXPECT_FALSE(parse({"--routing", "random"}, d).ok());
}

TEST(ServeOptions, AsyncSchedulingIsOnOrOffNamedWhenNeither) {
  auto parse_llm = [](std::vector<const char*> args, llm_serve_options& lo) {
    po::options_description opts;
    add_llm_options(opts, lo);
    args.insert(args.begin(), "test");
    po::variables_map vm;
    po::store(po::parse_command_line(static_cast<int>(args.size()), args.data(), opts), vm);
    po::notify(vm);
    return finish_llm_options(lo);
  };
  llm_serve_options off;
  ASSERT_TRUE(parse_llm({}, off).ok());
  EXPECT_FALSE(off.engine.async_scheduling);  // the default
  llm_serve_options on;
  ASSERT_TRUE(parse_llm({"--async-scheduling", "on"}, on).ok());
  EXPECT_TRUE(on.engine.async_scheduling);
  llm_serve_options bad;
  auto st = parse_llm({"--async-scheduling", "yes"}, bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--async-scheduling must be on or off, not 'yes'"), std::string::npos) << st.message();
}
