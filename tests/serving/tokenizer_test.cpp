// The serving tokenizer's specials, truncation and offsets (toy tokenizer: one piece per word),
// against the rules of Hugging Face's fast tokenizer, which text-embeddings-inference runs.
#include <gtest/gtest.h>

#include <string>

#include "tessera/toys/toy_model.hpp"

using namespace tessera::serving;
using namespace tessera::toys;

namespace {

std::string words(const std::string& prefix, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += prefix + std::to_string(i) + " ";
  return s;
}

/// The ids of the pieces of `text` (no specials).
std::vector<int32_t> piece_ids(const tokenizer& tok, const std::string& text) {
  const auto pieces = tok.pieces(text).value();
  std::vector<int32_t> ids;
  for (const auto& p : pieces) ids.push_back(p.id);
  return ids;
}

size_t count_type(const tessera::backends::sequence_input& s, int32_t type, int32_t sep) {
  size_t n = 0;
  for (size_t i = 0; i < s.token_ids.size(); ++i) n += s.token_type_ids[i] == type && s.token_ids[i] != sep && i > 0;
  return n;
}

}  // namespace

TEST(ServingTokenizer, SingleTruncationKeepsTheSideAsked) {
  auto tok = make_toy_tokenizer();
  const std::string text = words("w", 10);
  const auto all = piece_ids(*tok, text);
  auto right = tok->encode(text, 6).value();  // budget 4 pieces
  auto left = tok->encode(text, 6, truncation_side::left).value();
  ASSERT_EQ(right.token_ids.size(), 6u);
  ASSERT_EQ(left.token_ids.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(right.token_ids.begin() + 1, right.token_ids.end() - 1),
            std::vector<int32_t>(all.begin(), all.begin() + 4));
  EXPECT_EQ(std::vector<int32_t>(left.token_ids.begin() + 1, left.token_ids.end() - 1),
            std::vector<int32_t>(all.end() - 4, all.end()));
  EXPECT_EQ(left.token_ids.front(), tok->cls_id());
  EXPECT_EQ(left.token_ids.back(), tok->sep_id());
  EXPECT_EQ(tok->encode(text, 0)->token_ids.size(), 12u);  // 0: no truncation
}

// Fast tokenizer's longest first: the shorter input stays whole when the longer can take the
// cut; else each gets half the budget, the second the odd piece. (BertTokenizer's slow
// one-at-a-time rule would give 8 and 7 for the 10/12 case below, not 7 and 8.)
TEST(ServingTokenizer, PairTruncationIsLongestFirstAsTheFastTokenizer) {
  auto tok = make_toy_tokenizer();
  struct row {
    int a, b, max_length, want_a, want_b;
  };
  for (const row& r : {row{6, 2, 8, 3, 2}, row{2, 6, 8, 2, 3}, row{10, 12, 18, 7, 8}, row{12, 10, 18, 8, 7},
                       row{10, 10, 18, 7, 8}, row{3, 3, 18, 3, 3}, row{20, 1, 8, 4, 1}}) {
    auto s = tok->encode_pair(words("a", r.a), words("b", r.b), r.max_length).value();
    EXPECT_EQ(count_type(s, 0, tok->sep_id()), static_cast<size_t>(r.want_a)) << r.a << "/" << r.b << " in " << r.max_length;
    EXPECT_EQ(count_type(s, 1, tok->sep_id()), static_cast<size_t>(r.want_b)) << r.a << "/" << r.b << " in " << r.max_length;
    EXPECT_LE(s.token_ids.size(), static_cast<size_t>(r.max_length));
  }
  // Left keeps each input's end.
  auto s = tok->encode_pair(words("a", 10), words("b", 12), 18, truncation_side::left).value();
  const auto b = piece_ids(*tok, words("b", 12));
  EXPECT_EQ(s.token_ids[s.token_ids.size() - 2], b.back());
}

TEST(ServingTokenizer, TokensCarryByteOffsetsAndSpecials) {
  auto tok = make_toy_tokenizer();
  const std::string text = "Héllo,  world";
  auto with = tok->tokenize(text, true).value();
  ASSERT_EQ(with.size(), 5u);
  EXPECT_TRUE(with.front().special);
  EXPECT_EQ(with.front().text, "[CLS]");
  EXPECT_TRUE(with.back().special);
  EXPECT_EQ(with.back().text, "[SEP]");
  EXPECT_EQ(with[1].text, "Héllo");
  EXPECT_EQ(with[1].start, 0u);
  EXPECT_EQ(with[1].stop, 6u);  // é is two bytes
  EXPECT_EQ(with[2].text, ",");
  EXPECT_EQ(with[3].start, 9u);
  EXPECT_EQ(with[3].text, "world");
  auto without = tok->tokenize(text, false).value();
  ASSERT_EQ(without.size(), 3u);
  for (const auto& t : without) EXPECT_FALSE(t.special);
}
