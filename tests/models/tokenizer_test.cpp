// WordPiece ids against Hugging Face's tokenizer (goldens from models/scripts/tokenizer_goldens.mjs),
// plus truncation, invalid UTF-8 and the built-in vocab.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/models/model.hpp"
#include "tessera/models/tokenizer.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {
using testing::data_dir;

wordpiece_tokenizer make(bool lower, int max_length = 1 << 20) {
  tokenizer_options o;
  o.lower_case = lower;
  o.max_length = max_length;
  auto t = wordpiece_tokenizer::from_vocab_file(data_dir() + "/tiny-odd/vocab.txt", o);
  EXPECT_TRUE(t) << t.error().to_string();
  return std::move(*t);
}

std::string show(const std::vector<int32_t>& v, const vocabulary& voc) {
  std::string s;
  for (int32_t i : v) s += voc.token(i) + " ";
  return s;
}

TEST(tokenizer, matches_hugging_face_goldens) {
  const auto j = nlohmann::json::parse(testing::read_file(data_dir() + "/tokenizer_goldens.json"));
  const wordpiece_tokenizer uncased = make(true), cased = make(false);
  int checked = 0;
  for (const auto& c : j["cases"]) {
    for (const char* mode : {"uncased", "cased"}) {
      const wordpiece_tokenizer& tok = std::string(mode) == "uncased" ? uncased : cased;
      const auto want_ids = c[mode]["ids"].get<std::vector<int32_t>>();
      const auto want_types = c[mode]["type_ids"].get<std::vector<int32_t>>();
      auto e = c.contains("text") ? tok.encode(c["text"].get<std::string>())
                                  : tok.encode_pair(c["a"].get<std::string>(), c["b"].get<std::string>());
      ASSERT_TRUE(e) << e.error().to_string();
      EXPECT_EQ(e->token_ids, want_ids) << mode << " case " << c.dump() << "\n got:  " << show(e->token_ids, tok.vocab())
                                        << "\n want: " << show(want_ids, tok.vocab());
      EXPECT_EQ(e->token_type_ids, want_types) << mode << " " << c.dump();
      ++checked;
    }
  }
  EXPECT_GE(checked, 90);
}

TEST(tokenizer, word_pieces_and_unknowns) {
  const auto tok = make(true);
  auto p = tok.tokenize("Unaffable tiles, PLAYING!");
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, (std::vector<std::string>{"un", "##a", "##f", "##f", "##able", "tiles", ",", "play", "##ing", "!"}));
  // Over 100 characters: one [UNK]; exactly 100: word pieces.
  EXPECT_EQ(*tok.tokenize(std::string(101, 'a')), std::vector<std::string>{"[UNK]"});
  EXPECT_EQ(tok.tokenize(std::string(100, 'a'))->size(), 100u);
  // A character missing from the vocab makes the whole word [UNK].
  EXPECT_EQ(*tok.tokenize("ab\xe2\x98\x83" "cd"), std::vector<std::string>{"[UNK]"});
  // CJK ideographs outside the BMP are split too (HF's Python and Rust tokenizers do so).
  EXPECT_EQ(tok.tokenize("a\xf0\xa0\x80\x80" "b")->size(), 3u);
}

// Offsets as Hugging Face's fast tokenizer reports them: bytes of the original text, a "##"
// piece only its own characters, an accent-stripped or case-folded piece the characters it came
// from, [UNK] its whole word, a special typed in the text its own bytes.
TEST(tokenizer, offsets_are_bytes_of_the_original_text) {
  const auto tok = make(true);
  const std::string text = "Unaffable  tiles, PLAYING! [SEP] ab\xe2\x98\x83" "cd";
  auto p = tok.tokenize_with_offsets(text);
  ASSERT_TRUE(p) << p.error().to_string();
  std::vector<std::string> slices;
  for (const auto& w : *p) slices.push_back(text.substr(w.start, w.stop - w.start));
  EXPECT_EQ(slices, (std::vector<std::string>{"Un", "a", "f", "f", "able", "tiles", ",", "PLAY", "ING", "!", "[SEP]",
                                              "ab\xe2\x98\x83" "cd"}));
  EXPECT_EQ(p->back().piece, "[UNK]");
  EXPECT_EQ(p->back().id, tok.vocab().id("[UNK]"));
  for (const auto& w : *p) EXPECT_EQ(w.id, tok.vocab().id(w.piece)) << w.piece;
  // The ids are token_ids()'s.
  std::vector<int32_t> ids;
  for (const auto& w : *p) ids.push_back(w.id);
  EXPECT_EQ(ids, tok.token_ids(text).value());
}

TEST(tokenizer, offsets_of_stripped_accents_cover_the_original_character) {
  const auto tok = make(true);
  // "é" (2 bytes) lower-cases and strips to "e": the piece that holds it covers both bytes.
  const std::string text = "caf\xc3\xa9 x";
  auto p = tok.tokenize_with_offsets(text).value();
  ASSERT_FALSE(p.empty());
  size_t covered = 0;
  for (const auto& w : p) {
    EXPECT_LE(w.stop, text.size());
    EXPECT_LT(w.start, w.stop);
    EXPECT_GE(w.start, covered);  // in order, not overlapping
    covered = w.stop;
  }
  EXPECT_EQ(p[p.size() - 2].stop, 5u);  // the last piece of "café" ends after é's second byte
  EXPECT_EQ(p.back().start, 6u);
}

TEST(tokenizer, truncation_single_and_pair_longest_first) {
  const auto tok = make(true, 8);
  auto e = tok.encode("a b c d e f g h i j");
  ASSERT_TRUE(e);
  ASSERT_EQ(e->token_ids.size(), 8u);
  EXPECT_EQ(e->token_ids.front(), tok.vocab().id("[CLS]"));
  EXPECT_EQ(e->token_ids.back(), tok.vocab().id("[SEP]"));
  EXPECT_EQ(e->token_ids[6], tok.vocab().id("f"));
  // Pair, budget 5 content tokens: a has 6, b has 2 -> a cut to 3, b kept.
  auto p = tok.encode_pair("a b c d e f", "x y");
  ASSERT_TRUE(p);
  ASSERT_EQ(p->token_ids.size(), 8u);
  EXPECT_EQ(p->token_type_ids, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(p->token_ids[3], tok.vocab().id("c"));
  EXPECT_EQ(p->token_ids[5], tok.vocab().id("x"));
  // Equal lengths: BertTokenizer removes from the second on ties -> a keeps 3, b 2.
  auto q = tok.encode_pair("a b c d", "w x y z");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->token_ids[3], tok.vocab().id("c"));
  EXPECT_EQ(q->token_ids[4], tok.vocab().id("[SEP]"));
  EXPECT_EQ(q->token_ids[6], tok.vocab().id("x"));
}

TEST(tokenizer, invalid_utf8_is_a_clear_error) {
  const auto tok = make(true);
  for (const char* bad : {"abc\xff", "ab\xc3", "\xc0\xaf", "x\xed\xa0\x80", "\xf4\x90\x80\x80", "a\xe2\x28\xa1"}) {
    auto e = tok.encode(bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_EQ(e.error().code(), errc::invalid_argument);
    EXPECT_NE(e.error().message().find("invalid UTF-8 at byte"), std::string::npos) << e.error().to_string();
  }
  auto p = tok.encode_pair("fine", "bad\xff");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("second text"), std::string::npos);
}

TEST(tokenizer, presets_carry_a_builtin_vocab) {
  auto m = make_preset_model("bert-tiny", 0);
  ASSERT_TRUE(m);
  ASSERT_NE(m->vocab, nullptr);
  EXPECT_EQ(m->vocab->size(), 30522);
  EXPECT_EQ(m->vocab->id("[PAD]"), 0);
  EXPECT_EQ(m->vocab->id("[UNK]"), 100);
  EXPECT_EQ(m->vocab->id("[CLS]"), 101);
  EXPECT_EQ(m->vocab->id("[SEP]"), 102);
  EXPECT_EQ(m->vocab->id("[MASK]"), 103);
  auto tok = m->make_tokenizer();
  ASSERT_TRUE(tok);
  auto e = tok->encode_pair("Hello, World! Café 中文", "the models are running");
  ASSERT_TRUE(e) << e.error().to_string();
  for (int32_t id : e->token_ids) EXPECT_NE(id, 100) << "unexpected [UNK]";
  EXPECT_EQ(tok->options().max_length, 512);
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "word ";
  EXPECT_EQ(tok->encode(long_text)->token_ids.size(), 512u);
  // Deterministic: the same vocab text every time.
  EXPECT_EQ(vocabulary::builtin().to_text(), m->vocab->to_text());
}

}  // namespace
}  // namespace tessera::models
