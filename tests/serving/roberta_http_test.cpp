// RoBERTa / XLM-R over real HTTP from real processes, against float64 numpy goldens
// (scripts/make_roberta_goldens.py, scripts/make_encoder_tokenizers.py) within 1e-4 absolute:
// - tiny-roberta-cls (RobertaForSequenceClassification) on tessera-host with 2 tile processes and a
//   tessera-gpu process (hybrid routing: short sequences to the GPU, long ones to the tiles; both
//   must have served): TEI /predict of text (RoBERTa's byte-level BPE from tokenizer.json) with
//   raw_scores, and KServe v2 infer of the goldens' token ids (lengths 1..32, pad tokens inside);
// - tiny-xlmr-embed (sentence-transformers XLMRobertaModel) on tessera-serve and on 2 tiles: TEI /embed of text
//   (XLM-R's Unigram), /tokenize, OpenAI /v1/embeddings;
// - tiny-xlmr-rerank on tessera-serve: TEI /rerank (pairs <s> q </s></s> t </s>) raw scores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"

namespace {
using nlohmann::json;
using namespace tessera::test_support;

constexpr double tolerance = 1e-4;

std::string models_dir() {
  if (const char* src = std::getenv("TESSERA_SOURCE_DIR")) return std::string(src) + "/tests/data/models";
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "models").string();
}

json read_json(const std::string& name) {
  std::ifstream f(models_dir() + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

json post(http_connection& c, const std::string& target, const json& body, unsigned want = 200) {
  auto r = c.request("POST", target, body.dump());
  EXPECT_EQ(r.status, want) << target << ": " << r.body.substr(0, 400);
  return r.body.empty() ? json() : json::parse(r.body, nullptr, false);
}

double metric(http_connection& c, const std::string& name) {
  const auto body = c.request("GET", "/metrics").body;
  const auto at = body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(body.c_str() + at + name.size() + 2);
}

TEST(RobertaHttp, ClassifierOnTilesAndTesseraGpuGivesTheGoldenLogits) {
  const std::string dir = models_dir() + "/tiny-roberta-cls";
  served_process host({bin("tessera-host"), "--model", dir, "--tiles", "2", "--tile-memory", "64MiB", "--spawn-gpu", "1",
                       "--routing", "hybrid", "--long-threshold", "12", "--serve", "--port", "0"});
  ASSERT_NE(host.port(), 0) << host.line();
  http_connection c("127.0.0.1", host.port());
  const json info = json::parse(c.request("GET", "/info").body);
  EXPECT_EQ(info["max_input_length"], 32) << info.dump();  // 34 positions - (pad_token_id + 1)

  double worst = 0;
  const json tok = read_json("encoder_tokenizer_goldens.json");
  for (const auto& g : tok["http"]["classify"]) {
    const json got = post(c, "/predict", {{"inputs", g["text"]}, {"raw_scores", true}});
    ASSERT_TRUE(got.is_array() && got.size() == 3) << got.dump();
    const std::vector<std::string> labels{"negative", "neutral", "positive"};
    for (const auto& s : got) {
      const size_t k = static_cast<size_t>(std::find(labels.begin(), labels.end(), s["label"].get<std::string>()) - labels.begin());
      ASSERT_LT(k, 3u) << s.dump();
      worst = std::max(worst, std::abs(s["score"].get<double>() - g["logits"][k].get<double>()));
    }
    const json t = post(c, "/tokenize", {{"inputs", g["text"]}});
    std::vector<int32_t> ids;
    for (const auto& x : t[0]) ids.push_back(x["id"].get<int32_t>());
    EXPECT_EQ(ids, g["ids"].get<std::vector<int32_t>>()) << g["text"];
  }
  const json gold = read_json("tiny_roberta_goldens.json");
  for (const auto& entry : gold["classifier_batches"]) {
    const auto ids = entry["token_ids"].get<std::vector<int64_t>>();
    const auto want = entry["logits"].get<std::vector<double>>();
    size_t at = 0, i = 0;
    for (int len : entry["lengths"].get<std::vector<int>>()) {
      std::vector<int64_t> seq(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at + len));
      json req{{"inputs", {{{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", {1, len}}, {"data", seq}}}}};
      const json got = post(c, "/v2/models/tiny-roberta-cls/infer", req);
      ASSERT_TRUE(got.contains("outputs")) << got.dump();
      for (size_t k = 0; k < 3; ++k)
        worst = std::max(worst, std::abs(got["outputs"][0]["data"][k].get<double>() - want[i * 3 + k]));
      at += static_cast<size_t>(len);
      ++i;
    }
  }
  EXPECT_LE(worst, tolerance);
  const double tiles = metric(c, "tessera_backend_sequences{backend=\"tiles0\"}");
  const double gpu = metric(c, "tessera_backend_sequences{backend=\"gpu0\"}");
  EXPECT_GT(tiles, 0);
  EXPECT_GT(gpu, 0);
  std::printf("[ roberta ] tiles + tessera-gpu over TEI /predict and KServe: max |logit - float64| %.2e "
              "(tiles %.0f sequences, gpu %.0f)\n", worst, tiles, gpu);
  EXPECT_EQ(host.stop(), 0);
}

// /embed, /v1/embeddings and /tokenize of the XLM-R embedding model served by `cmd`.
void expect_xlmr_embeddings(const std::vector<std::string>& cmd, const char* where) {
  served_process srv(cmd);
  ASSERT_NE(srv.port(), 0) << srv.line();
  http_connection c("127.0.0.1", srv.port());
  const json g = read_json("encoder_tokenizer_goldens.json")["http"]["embed"];
  std::vector<std::string> texts;
  for (const auto& e : g) texts.push_back(e["text"].get<std::string>());
  const json got = post(c, "/embed", {{"inputs", texts}});
  ASSERT_TRUE(got.is_array() && got.size() == g.size()) << got.dump().substr(0, 300);
  const json oa = post(c, "/v1/embeddings", {{"input", texts}, {"model", "tiny-xlmr-embed"}});
  ASSERT_TRUE(oa.contains("data")) << oa.dump().substr(0, 300);
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const auto want = g[i]["normalized"].get<std::vector<double>>();
    ASSERT_EQ(got[i].size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) {
      worst = std::max(worst, std::abs(got[i][j].get<double>() - want[j]));
      worst = std::max(worst, std::abs(oa["data"][i]["embedding"][j].get<double>() - want[j]));
    }
    const json t = post(c, "/tokenize", {{"inputs", texts[i]}});
    std::vector<int32_t> ids;
    for (const auto& x : t[0]) ids.push_back(x["id"].get<int32_t>());
    EXPECT_EQ(ids, g[i]["ids"].get<std::vector<int32_t>>()) << texts[i];
  }
  EXPECT_LE(worst, tolerance);
  std::printf("[ xlm-r ] %s: /embed and /v1/embeddings: max |value - float64| %.2e\n", where, worst);
  EXPECT_EQ(srv.stop(), 0);
}

TEST(RobertaHttp, XlmrEmbeddingModelOnTesseraServeGivesTheGoldenVectors) {
  expect_xlmr_embeddings({bin("tessera-serve"), "--model", models_dir() + "/tiny-xlmr-embed", "--port", "0"}, "tessera-serve");
}

// tessera-host pools on the head tile (embedding models on tiles): the same goldens from 2 tiles.
TEST(RobertaHttp, XlmrEmbeddingModelOnTilesGivesTheGoldenVectors) {
  expect_xlmr_embeddings({bin("tessera-host"), "--model", models_dir() + "/tiny-xlmr-embed", "--tiles", "2", "--tile-memory",
                          "64MiB", "--serve", "--port", "0"},
                         "tiles");
}

TEST(RobertaHttp, XlmrRerankerScoresPairsInRobertasLayout) {
  served_process srv({bin("tessera-serve"), "--model", models_dir() + "/tiny-xlmr-rerank", "--port", "0"});
  ASSERT_NE(srv.port(), 0) << srv.line();
  http_connection c("127.0.0.1", srv.port());
  const json g = read_json("encoder_tokenizer_goldens.json")["http"]["rerank"];
  const json got = post(c, "/rerank", {{"query", g["query"]}, {"texts", g["texts"]}, {"raw_scores", true}});
  ASSERT_TRUE(got.is_array() && got.size() == g["texts"].size()) << got.dump();
  double worst = 0;
  for (const auto& r : got)
    worst = std::max(worst, std::abs(r["score"].get<double>() - g["scores"][r["index"].get<size_t>()].get<double>()));
  EXPECT_LE(worst, tolerance);
  std::printf("[ xlm-r ] /rerank raw scores: max |score - float64| %.2e\n", worst);
  EXPECT_EQ(srv.stop(), 0);
}

}  // namespace
