// Sampling (greedy, temperature, top-k, top-p, seeds) and stop strings matched on text.
#include <gtest/gtest.h>

#include <cmath>
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
