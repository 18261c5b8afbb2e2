// A row cut by vocabulary (models/token_sampling.hpp: write_slice_record, merge_slice_records)
// against the unsplit row (adjust_row, sample_row, logprob_of): random rows with planted ties,
// cut into 2, 3 and 7 uneven slices, every kind of row a split LM head samples on its tiles
// (greedy, top-k with and without top-p, penalties, logit_bias, logprobs) at many uniform draws:
// the token is the unsplit one exactly; log-probabilities within 1e-12 (only the log-sum-exp's
// summation order differs). Rows that need the whole row in order are not split-samplable and
// the merge refuses them; so does it records that were never written.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tessera/common/status.hpp"
#include "tessera/models/token_sampling.hpp"

using namespace tessera;
using namespace tessera::models;

namespace {

constexpr double kLogprobTol = 1e-12;

std::vector<float> random_row(int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 3.f);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (auto& v : row) v = n(g);
  // Ties across slice borders: the maximum repeated at a high and a low id, and a run of equals.
  row[static_cast<size_t>(vocab - 2)] = 12.5f;
  row[7] = 12.5f;
  for (int64_t i = vocab / 2 - 3; i < vocab / 2 + 3; ++i) row[static_cast<size_t>(i)] = 4.25f;
  return row;
}

// The slices' records of a row, and the merge.
result<token_logprob> split_and_merge(const std::vector<float>& raw, const sample_params& p, int slices) {
  const auto vocab = static_cast<int64_t>(raw.size());
  std::vector<std::vector<int32_t>> recs(static_cast<size_t>(slices), std::vector<int32_t>(kSliceRecord));
  sample_scratch s;
  for (int j = 0; j < slices; ++j) {
    // Uneven cuts: slice j holds [vocab * j^2 / slices^2, ...), the first ones narrow.
    struct {
      int64_t begin, end;
    } r{vocab * j * j / (slices * slices), vocab * (j + 1) * (j + 1) / (slices * slices)};
    std::vector<float> part(raw.begin() + r.begin, raw.begin() + r.end), adjusted = part;
    adjust_slice(adjusted.data(), r.begin, r.end - r.begin, p);
    write_slice_record(recs[static_cast<size_t>(j)].data(), part.data(), adjusted.data(), r.begin, r.end - r.begin, p, s);
  }
  std::vector<const int32_t*> ptrs;
  for (const auto& r : recs) ptrs.push_back(r.data());
  return merge_slice_records(ptrs, p, vocab, s);
}

std::vector<sample_params> split_rows(int64_t vocab) {
  std::vector<sample_params> rows{
      {.temperature = 0},
      {.temperature = 0, .logprobs = 20},
      {.temperature = 0.9, .top_k = 1, .logprobs = 1},  // top_k 1 is greedy
      {.temperature = 0.8, .top_k = 40, .logprobs = 3},
      {.temperature = 1.7, .top_k = 64, .top_p = 0.6},
      {.temperature = 0.3, .top_k = 2, .logprobs = 0},
  };
  sample_params pen{.temperature = 0.7, .top_k = 50, .top_p = 0.95, .logprobs = 5, .presence_penalty = 0.5,
                    .frequency_penalty = 0.3, .repetition_penalty = 1.2};
  pen.history = {{5, 0}, {7, 2}, {int32_t(vocab - 2), 1}, {int32_t(vocab / 2), 3}};
  pen.logit_bias = {{9, 14.0f}, {7, -100.0f}, {3, 2.0f}, {int32_t(vocab - 1), 1.5f}};
  rows.push_back(pen);
  sample_params greedy_bias{.temperature = 0, .logprobs = 2};
  greedy_bias.logit_bias = {{int32_t(vocab - 1), 30.0f}};  // the argmax moves into the last slice
  rows.push_back(greedy_bias);
  return rows;
}

TEST(SplitSampling, MergedSlicesDrawTheUnsplitTokenWithItsLogprobs) {
  for (int64_t vocab : {int64_t{1000}, int64_t{32000}, int64_t{50257}}) {
    const auto raw = random_row(vocab, static_cast<uint32_t>(vocab));
    for (auto p : split_rows(vocab)) {
      ASSERT_TRUE(split_samplable(p, vocab));
      ASSERT_TRUE(check_sample_params(p, vocab).ok());
      for (int slices : {2, 3, 7}) {
        for (double u : {0.0, 0.013, 0.25, 0.5, 0.77, 0.999999}) {
          SCOPED_TRACE("vocab " + std::to_string(vocab) + " slices " + std::to_string(slices) + " top_k " +
                       std::to_string(p.top_k) + " T " + std::to_string(p.temperature) + " u " + std::to_string(u));
          p.u = u;
          std::vector<float> adjusted = raw;
          adjust_row(adjusted.data(), vocab, p);
          sample_scratch s;
          const int32_t want = sample_row(adjusted.data(), vocab, p, s);
          auto got = split_and_merge(raw, p, slices);
          ASSERT_TRUE(got) << got.error().to_string();
          EXPECT_EQ(got->token, want);
          if (p.logprobs < 0) {
            EXPECT_TRUE(std::isnan(got->logprob));
            continue;
          }
          const auto lp = logprob_of(raw.data(), vocab, want, p.logprobs);
          EXPECT_NEAR(got->logprob, lp.logprob, kLogprobTol);
          ASSERT_EQ(got->top.size(), lp.top.size());
          for (size_t i = 0; i < lp.top.size(); ++i) {
            EXPECT_EQ(got->top[i].first, lp.top[i].first) << "alternative " << i;
            EXPECT_NEAR(got->top[i].second, lp.top[i].second, kLogprobTol);
          }
        }
      }
    }
  }
}

TEST(SplitSampling, GreedyTiesGoToTheLowestIdAcrossSlices) {
  std::vector<float> raw(300, 0.f);
  raw[250] = 5.f;
  raw[120] = 5.f;  // slices of 3: [0, 33), [33, 133), [133, 300): 120 in an earlier slice than 250
  raw[260] = 5.f;
  auto got = split_and_merge(raw, {.temperature = 0}, 3);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->token, 120);
  EXPECT_EQ(argmax_row(raw.data(), 300), 120);
}

TEST(SplitSampling, WholeVocabularyRowsAreNotSplitSamplableAndTheMergeRefusesThem) {
  const int64_t vocab = 500;
  EXPECT_FALSE(split_samplable({.temperature = 1.0}, vocab));                          // every token, in id order
  EXPECT_FALSE(split_samplable({.temperature = 1.0, .top_p = 0.9}, vocab));            // top_p over the sorted row
  EXPECT_FALSE(split_samplable({.temperature = 1.0, .top_k = kMaxSplitTopK + 1}, vocab));
  EXPECT_FALSE(split_samplable({.temperature = 1.0, .top_k = 500}, vocab));            // top_k >= vocab: every token
  EXPECT_TRUE(split_samplable({.temperature = 1.0, .top_k = kMaxSplitTopK}, vocab));
  EXPECT_TRUE(split_samplable({.temperature = 0, .top_p = 0.5}, vocab));               // greedy
  const auto raw = random_row(vocab, 4);
  auto got = split_and_merge(raw, {.temperature = 1.0, .top_p = 0.9, .u = 0.5}, 2);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code(), errc::invalid_argument);
  EXPECT_NE(got.error().message().find("whole vocabulary"), std::string::npos) << got.error().message();
  // A record never written (a slice that sampled nothing for the row) is refused by name.
  std::vector<int32_t> a(kSliceRecord), b(kSliceRecord);
  write_empty_slice_record(a.data());
  write_empty_slice_record(b.data());
  const int32_t* recs[] = {a.data(), b.data()};
  sample_scratch s;
  auto empty = merge_slice_records(recs, {.temperature = 0}, vocab, s);
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message().find("slice record 0 was not written"), std::string::npos) << empty.error().message();
  // Hostile counts and ids in a record are refused, never read past.
  std::vector<float> part(raw.begin(), raw.begin() + 250);
  write_slice_record(a.data(), part.data(), part.data(), 0, 250, {.temperature = 0, .logprobs = 3}, s);
  std::vector<float> part2(raw.begin() + 250, raw.end());
  write_slice_record(b.data(), part2.data(), part2.data(), 250, 250, {.temperature = 0, .logprobs = 3}, s);
  auto bad = a;
  bad[7] = kMaxTopLogprobs + 1;
  const int32_t* bad_recs[] = {bad.data(), b.data()};
  EXPECT_FALSE(merge_slice_records(bad_recs, {.temperature = 0, .logprobs = 3}, vocab, s));
  bad = a;
  bad[1] = static_cast<int32_t>(vocab);
  EXPECT_FALSE(merge_slice_records(bad_recs, {.temperature = 0, .logprobs = 3}, vocab, s));
  EXPECT_TRUE(merge_slice_records(recs, {.temperature = 0, .logprobs = 3}, vocab, s));
}

}  // namespace
