// tessera-loadgen's workloads and reports (no sockets).
#include <gtest/gtest.h>

#include <sstream>

#include "tessera/common/trace_csv.hpp"
#include "tessera/loadgen/workload.hpp"

using namespace tessera::loadgen;

TEST(LoadgenMix, Presets) {
  EXPECT_EQ(mix_preset("seed-0")->long_share, 0.0);
  EXPECT_DOUBLE_EQ(mix_preset("seed-40")->long_share, 0.4);
  EXPECT_DOUBLE_EQ(mix_preset("seed-25")->long_share, 0.25);
  EXPECT_EQ(mix_preset("long")->long_share, 1.0);
  auto f = mix_preset("fixed-128");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->short_min, 128);
  EXPECT_EQ(f->short_max, 128);
  EXPECT_FALSE(mix_preset("seed-101"));
  EXPECT_FALSE(mix_preset("bogus"));
}

TEST(LoadgenMix, SeedFortyHasFortyPercentLongInRange) {
  auto plan = synthesize(*mix_preset("seed-40"), 5000, 0, 3);
  ASSERT_EQ(plan.size(), 5000u);
  int longs = 0;
  for (const auto& p : plan) {
    bool is_long = p.tokens >= 200;
    longs += is_long;
    if (is_long) {
      EXPECT_LE(p.tokens, 512);
    } else {
      EXPECT_GE(p.tokens, 8);
      EXPECT_LE(p.tokens, 64);
    }
    EXPECT_EQ(p.arrival_seconds, 0.0);
  }
  EXPECT_NEAR(longs / 5000.0, 0.4, 0.03);
  // Deterministic for a seed.
  EXPECT_EQ(synthesize(*mix_preset("seed-40"), 10, 0, 3)[7].text, plan[7].text);
}

TEST(LoadgenMix, PoissonArrivalsHaveTheRate) {
  auto plan = synthesize(*mix_preset("seed-0"), 20000, 250.0, 9);
  double span = plan.back().arrival_seconds;
  EXPECT_NEAR(20000 / span, 250.0, 10.0);
  for (size_t i = 1; i < plan.size(); ++i) EXPECT_GE(plan[i].arrival_seconds, plan[i - 1].arrival_seconds);
}

TEST(LoadgenText, WordCountIsTokensMinusSpecials) {
  tessera::splitmix64 rng(1);
  for (int tokens : {3, 8, 64, 512}) {
    std::string t = make_text(tokens, rng);
    std::istringstream in(t);
    int words = 0;
    for (std::string w; in >> w;) ++words;
    EXPECT_EQ(words, tokens - 2);
  }
}

TEST(LoadgenTrace, ParsesHeaderTextsQuotesAndLengths) {
  auto t = parse_trace(
      "arrival_seconds,text_or_length\n"
      "0.5,\"hello, \"\"world\"\"\"\n"
      "0.1,32\n"
      "# a comment\n"
      "1.25,plain text here\r\n");
  ASSERT_TRUE(t) << t.error().to_string();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_DOUBLE_EQ((*t)[0].arrival_seconds, 0.1);  // sorted by arrival
  EXPECT_EQ((*t)[0].tokens, 32);
  EXPECT_EQ((*t)[1].text, "hello, \"world\"");
  EXPECT_EQ((*t)[2].text, "plain text here");
}

// What tessera-experiment writes (tessera::write_trace_csv), tessera-loadgen replays: texts with
// commas and quotes, lengths, arrivals to the last bit.
TEST(LoadgenTrace, ReadsWhatTheTraceWriterWrites) {
  const std::vector<tessera::trace_row> rows = {
      {.arrival_seconds = 0.1 + 0.2, .length = 17},
      {.arrival_seconds = 1.0 / 3.0, .text = "a \"quoted\", text"},
      {.arrival_seconds = 2.5, .length = 512}};
  auto t = parse_trace(tessera::format_trace_csv(rows));
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].arrival_seconds, 0.1 + 0.2);
  EXPECT_EQ((*t)[0].tokens, 17);
  EXPECT_EQ((*t)[1].arrival_seconds, 1.0 / 3.0);
  EXPECT_EQ((*t)[1].text, "a \"quoted\", text");
  EXPECT_EQ((*t)[2].tokens, 512);
  EXPECT_FALSE(parse_trace("0.5,1\n").ok()) << "a length below [CLS] + [SEP]";
  EXPECT_FALSE(parse_trace("nan,12\n0.5,12\n").ok()) << "an arrival that is not finite";
}

TEST(LoadgenTrace, ErrorsNameTheLine) {
  auto t = parse_trace("0.1,hi\nabc,hi\n");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(parse_trace("0.1\n"));
  EXPECT_FALSE(parse_trace("0.1,\"open\n"));
  EXPECT_FALSE(parse_trace(""));
  EXPECT_FALSE(read_trace("/no/such/trace.csv"));
}

TEST(LoadgenReport, PercentilesAndFormats) {
  run_report r;
  r.mode = "closed";
  r.mix = "seed-0";
  r.connections = 4;
  r.duration_seconds = 2.0;
  r.sent = 101;
  r.errors = 1;
  r.errors_by_kind["429"] = 1;
  std::vector<double> lat;
  for (int i = 1; i <= 100; ++i) lat.push_back(i / 1000.0);  // 1..100 ms
  summarize(r, lat);
  EXPECT_EQ(r.ok, 100);
  EXPECT_DOUBLE_EQ(r.throughput, 50.0);
  EXPECT_NEAR(r.p50_ms, 50.0, 1e-9);
  EXPECT_NEAR(r.p90_ms, 90.0, 1e-9);
  EXPECT_NEAR(r.p99_ms, 99.0, 1e-9);
  EXPECT_NEAR(r.max_ms, 100.0, 1e-9);
  EXPECT_NE(to_table(r).find("p99 99.00"), std::string::npos);
  EXPECT_EQ(csv_header().substr(0, 9), "mode,mix,");
  EXPECT_EQ(to_csv_row(r).substr(0, 15), "closed,seed-0,0");
  std::string j = to_json(r);
  EXPECT_NE(j.find("\"errors_by_kind\":{\"429\":1}"), std::string::npos);
  EXPECT_NE(j.find("\"p99\":99.000"), std::string::npos);
}
