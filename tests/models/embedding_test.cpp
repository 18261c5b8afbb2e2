// Embedding models and rerankers: a sentence-transformers folder and a one-label cross-encoder
// load with their task, and their pooled vectors and scores match float64 numpy goldens
// (scripts/make_embedding_goldens.py: an implementation independent of the C++ forward) within
// the goldens' stated tolerance (1e-4 absolute) for fp32, packed and padded; bf16 within 0.03
// absolute with cosine >= 0.999. Broken sentence-transformers folders get errors naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/models/batch.hpp"
#include "tessera/models/embedding.hpp"
#include "tessera/models/forward.hpp"
#include "tessera/models/model.hpp"
#include "encoder_goldens.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::data_dir;

const json& goldens() { return test_support::goldens_file("tiny_embed_goldens.json"); }

double min_cosine(const std::vector<float>& got, const std::vector<double>& want, int64_t h) {
  double worst = 1;
  for (size_t r = 0; r * h < want.size(); ++r) {
    double dot = 0, a = 0, b = 0;
    for (int64_t j = 0; j < h; ++j) {
      const double x = got[r * h + j], y = want[r * h + j];
      dot += x * y, a += x * x, b += y * y;
    }
    worst = std::min(worst, dot / std::sqrt(a * b));
  }
  return worst;
}

bert_model embed_model() {
  auto m = load_encoder(data_dir() + "/tiny-embed");
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

TEST(embedding, folder_says_embedding_with_mean_pooling_normalize_and_prompts) {
  const bert_model m = embed_model();
  EXPECT_EQ(m.task, encoder_task::embedding);
  EXPECT_EQ(task_name(m.task), "embedding");
  EXPECT_EQ(m.embedding.pooling, pooling_mode::mean);
  EXPECT_TRUE(m.embedding.normalize);
  EXPECT_EQ(m.config.num_labels, 0);
  EXPECT_EQ(m.embedding.prompts.at("query"), "query: ");
  EXPECT_EQ(m.embedding.prompts.at("passage"), "passage: ");
  EXPECT_EQ(m.embedding.default_prompt_name, "");
  EXPECT_EQ(m.weights.head().classifier_w, nullptr);
  ASSERT_NE(m.vocab, nullptr);
  // The classifier-only loader refuses it by what it is, not by a missing tensor.
  auto c = load_model(data_dir() + "/tiny-embed");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("is an embedding model"), std::string::npos) << c.error().to_string();
}

TEST(embedding, every_pooling_mode_matches_float64_goldens_packed_and_padded) {
  const bert_model m = embed_model();
  const double tol = goldens()["tolerance"].get<double>();
  const int64_t h = m.config.hidden_size;
  for (const auto& entry : goldens()["embed_batches"]) {
    const packed_batch b = test_support::golden_batch(entry);
    ASSERT_TRUE(validate_batch(m.config, b).ok());
    SCOPED_TRACE(entry["name"].get<std::string>());
    const auto tokens = entry["tokens"].get<std::vector<double>>();
    EXPECT_LE(test_support::max_abs_diff(reference_encoder(m, b), tokens), tol) << "every token's vector (/embed_all)";
    for (const auto& [name, want] : entry["pooled"].items()) {
      const auto mode = pooling_from_name(name);
      ASSERT_TRUE(mode) << name;
      EXPECT_EQ(pooling_name(*mode), name);
      const auto golden = want.get<std::vector<double>>();
      EXPECT_LE(test_support::max_abs_diff(reference_embed(m, b, mode), golden), tol) << name << " packed";
      EXPECT_LE(test_support::max_abs_diff(padded_embed(m, b, 5, mode), golden), tol) << name << " padded by 5";
      EXPECT_LE(test_support::max_abs_diff(padded_embed(m, b, 0, mode), golden), tol) << name << " padded at once";
    }
    // The model's own pooling (mean), then 2_Normalize.
    std::vector<float> v = reference_embed(m, b);
    l2_normalize(v.data(), b.num_seqs(), h);
    EXPECT_LE(test_support::max_abs_diff(v, entry["mean_normalized"].get<std::vector<double>>()), tol);
  }
  EXPECT_FALSE(pooling_from_name("weightedmean"));
  EXPECT_FALSE(pooling_from_name(""));
}

TEST(embedding, bf16_pooled_vectors_stay_close_to_the_goldens) {
  ASSERT_TRUE(check_dtype_supported(dtype::bf16).ok()) << check_dtype_supported(dtype::bf16).to_string();
  bert_model m = embed_model();
  ASSERT_TRUE(set_dtype(m, dtype::bf16).ok());
  for (const auto& entry : goldens()["embed_batches"]) {
    const packed_batch b = test_support::golden_batch(entry);
    SCOPED_TRACE(entry["name"].get<std::string>());
    for (const char* name : {"cls", "mean", "max"}) {
      const auto golden = entry["pooled"][name].get<std::vector<double>>();
      const auto packed = reference_embed(m, b, pooling_from_name(name));
      EXPECT_LE(test_support::max_abs_diff(packed, golden), 0.03) << name;
      EXPECT_GE(min_cosine(packed, golden, m.config.hidden_size), 0.999) << name;
      EXPECT_LE(test_support::max_abs_diff(padded_embed(m, b, 7, pooling_from_name(name)), golden), 0.03) << name << " padded";
    }
  }
}

TEST(embedding, l2_normalize_leaves_zero_vectors_and_makes_unit_norms) {
  std::vector<float> v{3, 4, 0, 0, 0, 0, -1, 0, 0};
  l2_normalize(v.data(), 3, 3);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_EQ(v[5], 0.0f);
  EXPECT_FLOAT_EQ(v[6], -1.0f);
}

TEST(reranker, one_label_cross_encoder_scores_match_goldens) {
  auto m = load_model(data_dir() + "/tiny-rerank");
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_EQ(m->task, encoder_task::reranker);
  EXPECT_EQ(m->config.num_labels, 1);
  const double tol = goldens()["tolerance"].get<double>();
  for (const auto& entry : goldens()["rerank_batches"]) {
    const packed_batch b = test_support::golden_batch(entry);
    const auto want = entry["scores"].get<std::vector<double>>();
    EXPECT_LE(test_support::max_abs_diff(reference_forward(*m, b), want), tol) << entry["name"];
    EXPECT_LE(test_support::max_abs_diff(padded_forward(*m, b, 4), want), tol) << entry["name"] << " padded";
  }
  auto tiny = load_encoder(data_dir() + "/tiny-odd");
  ASSERT_TRUE(tiny);
  EXPECT_EQ(tiny->task, encoder_task::classifier);
}

TEST(embedding, save_model_round_trips_the_sentence_transformers_files) {
  bert_model m = embed_model();
  m.embedding.pooling = pooling_mode::lasttoken;
  m.embedding.normalize = false;
  m.embedding.default_prompt_name = "query";
  const std::string dir = testing::make_temp_dir("embed_save");
  ASSERT_TRUE(save_model(m, dir).ok());
  auto back = load_encoder(dir);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(back->task, encoder_task::embedding);
  EXPECT_EQ(back->embedding.pooling, pooling_mode::lasttoken);
  EXPECT_FALSE(back->embedding.normalize);
  EXPECT_EQ(back->embedding.prompts, m.embedding.prompts);
  EXPECT_EQ(back->embedding.default_prompt_name, "query");
  const packed_batch b = test_support::golden_batch(goldens()["embed_batches"][1]);
  EXPECT_EQ(reference_embed(*back, b), reference_embed(m, b));
  fs::remove_all(dir);
}

// Broken sentence-transformers folders: each error names the file and what is wrong.
class embedding_folder_errors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("embed_ckpt");
    fs::copy(data_dir() + "/tiny-embed", dir_, fs::copy_options::recursive);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void edit(const std::string& file, const std::function<void(json&)>& f) {
    auto j = json::parse(testing::read_file(dir_ + "/" + file));
    f(j);
    testing::write_file(dir_ + "/" + file, j.dump());
  }
  void expect_error(std::initializer_list<const char*> words) {
    auto m = load_encoder(dir_);
    ASSERT_FALSE(m) << "loaded although broken";
    for (const char* w : words)
      EXPECT_NE(m.error().message().find(w), std::string::npos) << "'" << w << "' not in: " << m.error().to_string();
  }
  std::string dir_;
};

TEST_F(embedding_folder_errors, intact_copy_loads) { ASSERT_TRUE(load_encoder(dir_)); }

TEST_F(embedding_folder_errors, pooling_config) {
  const std::string pool = "1_Pooling/config.json";
  edit(pool, [](json& j) { j["pooling_mode_cls_token"] = true; });
  expect_error({"1_Pooling/config.json", "exactly one pooling mode", "pooling_mode_cls_token", "pooling_mode_mean_tokens"});
  edit(pool, [](json& j) { j["pooling_mode_cls_token"] = false; j["pooling_mode_mean_tokens"] = false; });
  expect_error({"exactly one pooling mode", "none"});
  edit(pool, [](json& j) { j["pooling_mode_mean_tokens"] = "yes"; });
  expect_error({"pooling_mode_mean_tokens", "true or false"});
  edit(pool, [](json& j) { j["pooling_mode_mean_tokens"] = true; j["pooling_mode_weightedmean_tokens"] = true; });
  expect_error({"pooling_mode_weightedmean_tokens is not supported"});
  edit(pool, [](json& j) { j["pooling_mode_weightedmean_tokens"] = false; j["include_prompt"] = false; });
  expect_error({"include_prompt false is not supported"});
  edit(pool, [](json& j) { j["include_prompt"] = true; j["word_embedding_dimension"] = 768; });
  expect_error({"word_embedding_dimension 768", "hidden_size 40"});
  testing::write_file(dir_ + "/" + pool, "{\"pooling_mode_mean_tokens\": tru");
  expect_error({"1_Pooling/config.json", "not valid JSON"});
  fs::remove(dir_ + "/" + pool);
  expect_error({"1_Pooling/config.json"});
}

TEST_F(embedding_folder_errors, modules) {
  edit("modules.json", [](json& j) {
    j.push_back({{"idx", 3}, {"name", "3"}, {"path", "3_Dense"}, {"type", "sentence_transformers.models.Dense"}});
  });
  expect_error({"modules.json", "sentence_transformers.models.Dense", "3_Dense", "not supported"});
  edit("modules.json", [](json& j) { j.erase(3); j[1]["path"] = "../../etc"; });
  expect_error({"leaves the model folder"});
  edit("modules.json", [](json& j) { j.erase(1); });
  expect_error({"modules.json", "is not supported here"});  // Normalize before any Pooling
  edit("modules.json", [](json& j) { j.erase(1); });
  expect_error({"modules.json", "no Pooling module"});
  testing::write_file(dir_ + "/modules.json", "{\"idx\": 0}");
  expect_error({"modules.json", "JSON array"});
  testing::write_file(dir_ + "/modules.json", "[{\"idx\": 0}]");
  expect_error({"modules.json", "\"type\""});
}

TEST_F(embedding_folder_errors, prompts) {
  edit("config_sentence_transformers.json", [](json& j) { j["default_prompt_name"] = "search"; });
  expect_error({"config_sentence_transformers.json", "default_prompt_name \"search\""});
  edit("config_sentence_transformers.json", [](json& j) { j["default_prompt_name"] = nullptr; j["prompts"]["q"] = 3; });
  expect_error({"prompt \"q\" is not a string"});
  edit("config_sentence_transformers.json", [](json& j) { j["prompts"] = json::array(); });
  expect_error({"\"prompts\" must be an object"});
  fs::remove(dir_ + "/config_sentence_transformers.json");
  auto m = load_encoder(dir_);
  ASSERT_TRUE(m) << m.error().to_string();  // optional: no prompts
  EXPECT_TRUE(m->embedding.prompts.empty());
}

TEST_F(embedding_folder_errors, bert_model_without_modules_names_the_missing_file) {
  fs::remove(dir_ + "/modules.json");
  expect_error({"config.json", "BertModel", "modules.json", "1_Pooling/config.json"});
}

}  // namespace
}  // namespace tessera::models
