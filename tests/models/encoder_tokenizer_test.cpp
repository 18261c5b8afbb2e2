// RoBERTa's byte-level BPE and XLM-R's SentencePiece Unigram from generated tokenizer.json files
// (scripts/make_encoder_tokenizers.py) against that script's independent Python segmentation: ids
// equal for every text, the Unigram's byte offsets too; what the Unigram loader does not run
// (Precompiled charsmap, byte_fallback, another pre-tokenizer) is refused by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/unigram_tokenizer.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {
using nlohmann::json;
using testing::data_dir;

const json& goldens() {
  static const json j = json::parse(testing::read_file(data_dir() + "/encoder_tokenizer_goldens.json"));
  return j;
}

TEST(unigram_tokenizer, viterbi_ids_and_offsets_match_the_python_goldens) {
  auto tok = unigram_tokenizer::from_file(data_dir() + "/" + goldens()["unigram"].get<std::string>());
  ASSERT_TRUE(tok) << tok.error().to_string();
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 3);
  EXPECT_EQ(tok->vocab_size(), 260);
  int unknowns = 0;
  for (const auto& c : goldens()["cases"]) {
    const auto text = c["text"].get<std::string>();
    SCOPED_TRACE(text);
    auto p = tok->tokenize_with_offsets(text);
    ASSERT_TRUE(p) << p.error().to_string();
    std::vector<int32_t> ids;
    std::vector<std::vector<size_t>> offsets;
    for (const auto& w : *p) {
      ids.push_back(w.id);
      offsets.push_back({w.start, w.stop});
      unknowns += w.id == 3;
    }
    EXPECT_EQ(ids, c["unigram_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(offsets, c["unigram_offsets"].get<std::vector<std::vector<size_t>>>());
    auto with = tok->encode(text);
    ASSERT_TRUE(with);
    ASSERT_EQ(with->size(), ids.size() + 2);
    EXPECT_EQ(with->front(), 0);
    EXPECT_EQ(with->back(), 2);
  }
  EXPECT_GT(unknowns, 3);  // the goldens exercise unknown (fused) characters
  EXPECT_FALSE(tok->tokenize_with_offsets("bad \xff utf-8"));
  EXPECT_EQ(*tok->token_text(259), "<mask>");
  EXPECT_FALSE(tok->token_text(260));
}

TEST(bpe_tokenizer, roberta_byte_level_tokenizer_json_matches_the_python_goldens) {
  auto tok = bpe_tokenizer::from_tokenizer_json(testing::read_file(data_dir() + "/" + goldens()["bpe"].get<std::string>()));
  ASSERT_TRUE(tok) << tok.error().to_string();
  EXPECT_EQ(tok->kind(), bpe_kind::byte_level);
  EXPECT_EQ(tok->bos_id(), 0);
  EXPECT_EQ(tok->eos_id(), 2);
  for (const auto& c : goldens()["cases"]) {
    const auto text = c["text"].get<std::string>();
    SCOPED_TRACE(text);
    auto ids = tok->encode(text, /*add_special=*/false);
    ASSERT_TRUE(ids) << ids.error().to_string();
    EXPECT_EQ(*ids, c["bpe_ids"].get<std::vector<int32_t>>());
    auto with = tok->encode(text, true);  // RobertaProcessing: <s> ... </s>
    ASSERT_TRUE(with);
    ASSERT_EQ(with->size(), ids->size() + 2);
    EXPECT_EQ(with->front(), 0);
    EXPECT_EQ(with->back(), 2);
  }
}

TEST(unigram_tokenizer, what_it_does_not_run_is_refused_by_name) {
  const std::string base = testing::read_file(data_dir() + "/" + goldens()["unigram"].get<std::string>());
  auto with = [&](const char* key, json value) {
    json j = json::parse(base);
    if (std::string(key) == "byte_fallback") j["model"]["byte_fallback"] = value;
    else j[key] = value;
    return unigram_tokenizer::from_tokenizer_json(j.dump());
  };
  auto pre = with("normalizer", json{{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}});
  ASSERT_FALSE(pre);
  EXPECT_NE(pre.error().to_string().find("Precompiled"), std::string::npos);
  auto bf = with("byte_fallback", true);
  ASSERT_FALSE(bf);
  EXPECT_NE(bf.error().to_string().find("byte_fallback"), std::string::npos);
  auto bl = with("pre_tokenizer", json{{"type", "ByteLevel"}});
  ASSERT_FALSE(bl);
  EXPECT_NE(bl.error().to_string().find("ByteLevel"), std::string::npos);
  auto wp = unigram_tokenizer::from_tokenizer_json(R"({"model": {"type": "WordPiece", "vocab": {}}})");
  ASSERT_FALSE(wp);
  EXPECT_NE(wp.error().to_string().find("WordPiece"), std::string::npos);
  EXPECT_FALSE(unigram_tokenizer::from_tokenizer_json("{"));
}

}  // namespace
}  // namespace tessera::models
