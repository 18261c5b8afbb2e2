// Sampling (greedy, temperature, top-k, top-p, seeds) and stop strings matched on text; the
// sample tensor the LM-head tile reads (models/token_sampling.hpp): round trip, rows that do not
// fit fall back to their logits, hostile tensors refused naming what is wrong; a sampler's draw
// taken before the row arrives gives the token next() would.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "tessera/serving/sampling.hpp"

namespace tessera::serving {
namespace {

std::vector<float> logits_of(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  sampler s({.temperature = 0});
  EXPECT_EQ(s.next({0.1f, 3.0f, -1.0f, 3.0f}), 1);
  EXPECT_EQ(sampler::argmax({5.0f}), 0);
  EXPECT_FLOAT_EQ(sampler::top2_margin({1.0f, 4.0f, 3.5f}), 0.5f);
  sampler k1({.temperature = 1.0, .top_k = 1, .seed = 3});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(k1.next({0.0f, 0.1f, 0.2f}), 2);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOthers) {
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(static_cast<double>(i)));
  auto draw = [&](uint64_t seed) {
    sampler s({.temperature = 1.0, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.next(l));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  // Unseeded samplers differ from each other.
  sampler a({.temperature = 1.0}), b({.temperature = 1.0});
  std::vector<int32_t> xa, xb;
  for (int i = 0; i < 64; ++i) {
    xa.push_back(a.next(l));
    xb.push_back(b.next(l));
  }
  EXPECT_NE(xa, xb);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<double> p{0.5, 0.3, 0.15, 0.05};
  sampler s({.temperature = 1.0, .seed = 9});
  std::map<int32_t, int> count;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++count[s.next(logits_of(p))];
  for (size_t i = 0; i < p.size(); ++i)
    EXPECT_NEAR(count[static_cast<int32_t>(i)] / double(n), p[i], 0.015) << i;
  // Temperature 2 flattens: p^(1/2) renormalised.
  sampler hot({.temperature = 2.0, .seed = 9});
  count.clear();
  for (int i = 0; i < n; ++i) ++count[hot.next(logits_of(p))];
  double z = 0;
  for (double x : p) z += std::sqrt(x);
  for (size_t i = 0; i < p.size(); ++i)
    EXPECT_NEAR(count[static_cast<int32_t>(i)] / double(n), std::sqrt(p[i]) / z, 0.015) << i;
}

TEST(Sampler, TopKAndTopPKeepOnlyTheBest) {
  const std::vector<double> p{0.05, 0.4, 0.1, 0.3, 0.15};
  sampler k2({.temperature = 1.0, .top_k = 2, .seed = 1});
  std::set<int32_t> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(k2.next(logits_of(p)));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
  // top_p 0.75: 0.4 + 0.3 = 0.7 < 0.75, so 0.15 joins: {1, 3, 4}.
  sampler nucleus({.temperature = 1.0, .top_p = 0.75, .seed = 1});
  seen.clear();
  for (int i = 0; i < 4000; ++i) seen.insert(nucleus.next(logits_of(p)));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 4}));
  sampler tiny({.temperature = 1.0, .top_p = 0.01, .seed = 1});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(tiny.next(logits_of(p)), 1);
}

TEST(SampleTensor, RowsRoundTripAndARowThatDoesNotFitKeepsItsLogits) {
  models::sample_params a{.temperature = 0.7, .top_k = 40, .top_p = 0.9, .u = 0.25, .logprobs = 5,
                          .presence_penalty = 0.5, .frequency_penalty = -0.25, .repetition_penalty = 1.1};
  a.history = {{3, 0}, {9, 2}};
  a.logit_bias = {{4, -1.5f}, {3, 100.0f}};
  models::sample_params big{.temperature = 1.0, .u = 0.5};
  big.logit_bias.assign(200, {1, 0.5f});
  const int64_t room = 1 + 3 * models::kSampleHeader + 8 + 100;
  models::sample_writer w(room);
  EXPECT_TRUE(w.add(a));
  w.add_logits();
  EXPECT_FALSE(w.add(big));  // 400 more int32 than the tensor holds: its logits go to the host
  EXPECT_FALSE(models::sample_writer(1000).add({.logprobs = 21}));
  ASSERT_EQ(w.rows(), 3);
  auto rows = models::parse_sample_tensor(w.data(), 3, 10);
  ASSERT_TRUE(rows) << rows.error().to_string();
  EXPECT_TRUE((*rows)[0].sample);
  const auto& p = (*rows)[0].params;
  EXPECT_EQ(p.temperature, a.temperature);
  EXPECT_EQ(p.top_k, a.top_k);
  EXPECT_EQ(p.top_p, a.top_p);
  EXPECT_EQ(p.u, a.u);
  EXPECT_EQ(p.logprobs, a.logprobs);
  EXPECT_EQ(p.presence_penalty, a.presence_penalty);
  EXPECT_EQ(p.frequency_penalty, a.frequency_penalty);
  EXPECT_EQ(p.repetition_penalty, a.repetition_penalty);
  EXPECT_EQ(p.history, a.history);
  EXPECT_EQ(p.logit_bias, a.logit_bias);
  EXPECT_FALSE((*rows)[1].sample);
  EXPECT_FALSE((*rows)[2].sample);
  // A record round trip.
  models::token_logprob lp{7, -1.25, {{7, -1.25}, {2, -2.5}}};
  std::vector<int32_t> rec(models::kSampleRecord);
  models::write_sample_record(rec.data(), 7, &lp);
  const auto back = models::read_sample_record(rec.data());
  EXPECT_EQ(back.token, 7);
  EXPECT_EQ(back.logprob, -1.25);
  EXPECT_EQ(back.top, lp.top);
}

TEST(SampleTensor, HostileTensorsAreRefusedNamingWhatIsWrong) {
  models::sample_writer w(4096);
  ASSERT_TRUE(w.add({.temperature = 0.5, .u = 0.1, .history = {{1, 1}}}));
  const std::vector<int32_t> good = w.data();
  auto refused = [](std::vector<int32_t> d, int64_t rows, const std::string& names) {
    auto r = models::parse_sample_tensor(d, rows, 10);
    ASSERT_FALSE(r) << names;
    EXPECT_NE(r.error().message().find(names), std::string::npos) << r.error().message();
  };
  refused({}, 1, "empty");
  refused(good, 2, "names 1 rows, the step has 2");
  refused(std::vector<int32_t>(good.begin(), good.begin() + 5), 1, "overruns");
  auto d = good;
  d[1] = 7;
  refused(d, 1, "mode 7");
  d = good;
  d[1 + 3] = 1 << 30;  // history entries far past the tensor
  refused(d, 1, "overrun the tensor");
  d = good;
  d[1 + 3] = -1;
  refused(d, 1, "negative entry counts");
  d = good;
  d[1 + models::kSampleHeader] = 10;  // a history token outside the vocabulary of 10
  refused(d, 1, "history token 10");
  d = good;
  const double nan = std::nan("");
  std::memcpy(&d[1 + 5], &nan, sizeof nan);
  refused(d, 1, "temperature");
}

TEST(Sampler, ADrawTakenBeforeTheRowGivesTheTokenNextWouldDraw) {
  const auto logits = logits_of({0.1, 0.2, 0.3, 0.25, 0.15});
  for (uint64_t seed = 0; seed < 50; ++seed) {
    sampler a({.temperature = 0.9, .top_p = 0.8, .seed = seed}), b({.temperature = 0.9, .top_p = 0.8, .seed = seed});
    for (int i = 0; i < 5; ++i) {
      const double u = b.draw();
      auto p = b.row_params(u, {}, 0, -1, 5);
      models::sample_scratch s;
      EXPECT_EQ(a.next(logits), models::sample_row(logits.data(), 5, p, s));
    }
  }
  // Greedy draws nothing: the generator is untouched.
  sampler g({.temperature = 0, .seed = 3});
  EXPECT_EQ(g.draw(), 0.0);
  EXPECT_EQ(models::history_of(std::vector<int32_t>{4, 2, 4, 4, 9, 2, 11}, 3, 10),
            (std::vector<std::pair<int32_t, int32_t>>{{4, 1}, {2, 1}, {9, 1}}));
}

TEST(StopText, AStopStringSpanningPiecesIsHeldBackAndCut) {
  stop_text t({"END", "\n\n"});
  EXPECT_EQ(t.push("hello E"), "hello ");  // "E" could start END
  EXPECT_EQ(t.push("N"), "");
  EXPECT_EQ(t.push("Dmore"), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.text(), "hello ");
  EXPECT_EQ(t.push("after"), "");
}

TEST(StopText, AFalseStartIsReleased) {
  stop_text t({"END"});
  EXPECT_EQ(t.push("EN"), "");
  EXPECT_EQ(t.push("x"), "ENx");
  EXPECT_EQ(t.push("E"), "");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.flush(), "E");
  EXPECT_EQ(t.text(), "ENxE");
}

TEST(StopText, TheEarliestStopWinsAndMultibyteStopsMatch) {
  stop_text t({"bc", "ab", "é!"});
  EXPECT_EQ(t.push("xabc"), "x");
  EXPECT_TRUE(t.stopped());
  stop_text u({"é!"});
  EXPECT_EQ(u.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(u.push("!"), "");
  EXPECT_TRUE(u.stopped());
  EXPECT_EQ(u.text(), "caf");
  stop_text none({""});  // an empty stop string means nothing
  EXPECT_EQ(none.push("abc"), "abc");
  EXPECT_FALSE(none.stopped());
}

}  // namespace
}  // namespace tessera::serving
