// Embedding models and rerankers over real HTTP (an in-process http_server on a socket, the
// reference backend behind the router and its dynamic batcher): TEI's /embed, /embed_all,
// /similarity, POST /, OpenAI's /v1/embeddings (float and base64) and KServe v2 infer, checked
// against the float64 numpy goldens of scripts/make_embedding_goldens.py (an implementation that
// shares no code with tessera) within 1e-4 absolute (the goldens' stated tolerance); the reranker
// through KServe (its raw logits) and /rerank. Hostile bodies get a clear 4xx and the server goes
// on answering right.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <map>
#include <thread>
#include <unistd.h>
#include <tuple>

#include "tessera/test/child_process.hpp"
#include "test_server.hpp"

namespace tessera::serving {
namespace {
using nlohmann::json;
using tessera::test_support::http_connection;
using test_support::test_server;
using test_support::test_server_options;

/// The goldens' tolerance (absolute), for every value compared here.
constexpr double tolerance = 1e-4;

std::string models_dir() {
  if (const char* src = std::getenv("TESSERA_SOURCE_DIR")) return std::string(src) + "/tests/data/models";
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "models").string();
}

const json& goldens() {
  static const json j = [] {
    std::ifstream f(models_dir() + "/tiny_embed_goldens.json");
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
  }();
  return j;
}

/// A golden batch's sequences as lists of token ids (and type ids).
std::vector<std::vector<int32_t>> sequences(const json& entry, const char* key = "token_ids") {
  std::vector<std::vector<int32_t>> out;
  const auto ids = entry[key].get<std::vector<int32_t>>();
  size_t at = 0;
  for (int len : entry["lengths"].get<std::vector<int>>()) {
    out.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += static_cast<size_t>(len);
  }
  return out;
}

/// Row i of a golden [rows, width] list.
std::vector<double> row(const json& flat, size_t i, size_t width) {
  std::vector<double> out(width);
  for (size_t j = 0; j < width; ++j) out[j] = flat[i * width + j].get<double>();
  return out;
}

/// The largest |got - want|; fails when a length differs.
double max_error(const json& got, const std::vector<double>& want) {
  EXPECT_TRUE(got.is_array() && got.size() == want.size()) << got.dump().substr(0, 200);
  if (!got.is_array() || got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t j = 0; j < want.size(); ++j) worst = std::max(worst, std::abs(got[j].get<double>() - want[j]));
  return worst;
}

/// Two answers' vectors (computed in different batches: equal to float rounding).
void expect_close(const json& got, const json& want, const char* what) {
  ASSERT_TRUE(want.is_array()) << what;
  EXPECT_LE(max_error(got, want.get<std::vector<double>>()), 1e-6) << what;
}

std::vector<double> unit(std::vector<double> v) {
  double ss = 0;
  for (double x : v) ss += x * x;
  for (double& x : v) x /= std::sqrt(ss);
  return v;
}

std::vector<float> from_base64(const std::string& text) {
  std::string bytes(text.size(), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(bytes.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  EXPECT_GE(n, 0);
  size_t len = static_cast<size_t>(std::max(n, 0));
  len -= text.size() >= 1 && text.back() == '=' ? (text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1) : 0;
  EXPECT_EQ(len % 4, 0u);
  std::vector<float> out(len / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i * 4 + b])) << (8 * b);
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

json post(http_connection& c, const std::string& path, const json& body, unsigned want = 200) {
  auto r = c.request("POST", path, body.dump());
  EXPECT_EQ(r.status, want) << path << " " << body.dump().substr(0, 200) << " -> " << r.body.substr(0, 400);
  return json::parse(r.body, nullptr, false);
}

test_server_options embed_options() {
  test_server_options o;
  o.model = models_dir() + "/tiny-embed";
  return o;
}

class EmbedHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new test_server(embed_options()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static test_server* server_;
  const json& batch(size_t i = 0) const { return goldens()["embed_batches"][i]; }
  size_t width() const { return static_cast<size_t>(server_->info().hidden_size); }
};
test_server* EmbedHttp::server_ = nullptr;

TEST_F(EmbedHttp, InfoSaysTheTaskAndPooling) {
  http_connection c("127.0.0.1", server_->port());
  auto r = c.request("GET", "/info");
  ASSERT_EQ(r.status, 200u);
  const json info = json::parse(r.body);
  EXPECT_EQ(info["model_type"], json({{"embedding", {{"pooling", "mean"}}}})) << r.body;
  EXPECT_EQ(server_->info().hidden_size, 40);
}

// /embed with token ids (a batch of 32 mixed lengths: dynamic batches of the router), default
// normalize: the golden mean-pooled vectors scaled to unit length.
TEST_F(EmbedHttp, EmbedMatchesGoldensNormalizedAndRaw) {
  http_connection c("127.0.0.1", server_->port());
  for (size_t b = 0; b < goldens()["embed_batches"].size(); ++b) {
    const auto seqs = sequences(batch(b));
    const json got = post(c, "/embed", {{"inputs", seqs}});
    ASSERT_TRUE(got.is_array() && got.size() == seqs.size()) << got.dump().substr(0, 300);
    const json raw = post(c, "/embed", {{"inputs", seqs}, {"normalize", false}});
    double worst = 0, worst_raw = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      worst = std::max(worst, max_error(got[i], row(batch(b)["mean_normalized"], i, width())));
      worst_raw = std::max(worst_raw, max_error(raw[i], row(batch(b)["pooled"]["mean"], i, width())));
    }
    EXPECT_LE(worst, tolerance) << batch(b)["name"];
    EXPECT_LE(worst_raw, tolerance) << batch(b)["name"];
    std::cout << "[ embed ] " << batch(b)["name"].get<std::string>() << ": " << seqs.size()
              << " sequences, max |error| normalized " << worst << ", raw " << worst_raw << "\n";
  }
  // One list of ids is one input; the answer is still a list of vectors, as TEI's.
  const auto one = sequences(batch(1))[3];
  const json single = post(c, "/embed", {{"inputs", one}});
  ASSERT_EQ(single.size(), 1u);
  EXPECT_LE(max_error(single[0], row(batch(1)["mean_normalized"], 3, width())), tolerance);
}

// Matryoshka: the first `dimensions` values, renormalized (TEI cuts, then normalizes).
TEST_F(EmbedHttp, DimensionsCutThenRenormalize) {
  http_connection c("127.0.0.1", server_->port());
  const auto seqs = sequences(batch(1));
  for (int d : {1, 8, 40}) {
    const json got = post(c, "/embed", {{"inputs", seqs}, {"dimensions", d}});
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto full = row(batch(1)["pooled"]["mean"], i, width());
      full.resize(static_cast<size_t>(d));
      EXPECT_LE(max_error(got[i], unit(full)), tolerance) << "dimensions " << d << " sequence " << i;
    }
    const json raw = post(c, "/embed", {{"inputs", seqs}, {"dimensions", d}, {"normalize", false}});
    auto full = row(batch(1)["pooled"]["mean"], 2, width());
    full.resize(static_cast<size_t>(d));
    EXPECT_LE(max_error(raw[2], full), tolerance);
  }
  post(c, "/embed", {{"inputs", seqs}, {"dimensions", 41}}, 422);
  post(c, "/embed", {{"inputs", seqs}, {"dimensions", 0}}, 422);
}

// /embed_all: every token's final hidden state, per sequence.
TEST_F(EmbedHttp, EmbedAllMatchesTokenGoldens) {
  http_connection c("127.0.0.1", server_->port());
  for (size_t b = 0; b < goldens()["embed_batches"].size(); ++b) {
    const auto seqs = sequences(batch(b));
    const json got = post(c, "/embed_all", {{"inputs", seqs}});
    ASSERT_EQ(got.size(), seqs.size());
    size_t token = 0;
    double worst = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ(got[i].size(), seqs[i].size()) << "sequence " << i;
      for (size_t t = 0; t < seqs[i].size(); ++t, ++token)
        worst = std::max(worst, max_error(got[i][t], row(batch(b)["tokens"], token, width())));
    }
    EXPECT_LE(worst, tolerance);
    std::cout << "[ embed_all ] " << batch(b)["name"].get<std::string>() << ": " << token
              << " token vectors, max |error| " << worst << "\n";
  }
  // /embed and /embed_all in flight together: each sequence gets its own rows back.
  const auto seqs = sequences(batch(1));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      http_connection cc("127.0.0.1", server_->port());
      const bool all = k % 2 == 0;
      auto r = cc.request("POST", all ? "/embed_all" : "/embed", json{{"inputs", seqs}}.dump());
      const json j = json::parse(r.body, nullptr, false);
      if (r.status != 200 || j.size() != seqs.size()) return void(++wrong);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const double e = all ? max_error(j[i].back(), row(batch(1)["tokens"], [&] {
                                 size_t at = 0;
                                 for (size_t s = 0; s <= i; ++s) at += seqs[s].size();
                                 return at - 1;
                               }(), width()))
                             : max_error(j[i], row(batch(1)["mean_normalized"], i, width()));
        if (e > tolerance) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// One request's inputs go through the router's dynamic batcher together: 32 sequences take
// fewer forwards than sequences.
TEST_F(EmbedHttp, ARequestsInputsAreBatchedTogether) {
  http_connection c("127.0.0.1", server_->port());
  const auto seqs = sequences(batch(0));
  const int64_t before = server_->backend().batches_run();
  post(c, "/embed", {{"inputs", seqs}});
  const int64_t forwards = server_->backend().batches_run() - before;
  EXPECT_GE(forwards, 1);
  EXPECT_LT(forwards, static_cast<int64_t>(seqs.size()));
  std::cout << "[ batching ] " << seqs.size() << " sequences of one /embed request: " << forwards << " forward(s)\n";
}

// tessera-loadgen's /predict-style driver on /embed (--target /embed): the seed's length mix,
// texts truncated to the model's 32 tokens; every request answered 200.
TEST_F(EmbedHttp, LoadgenDrivesEmbed) {
  const char* bin = std::getenv("TESSERA_BIN_DIR");
  ASSERT_NE(bin, nullptr) << "run through ctest (TESSERA_BIN_DIR)";
  const std::string out = (std::filesystem::temp_directory_path() / ("tessera-embed-loadgen-" + std::to_string(::getpid()) + ".json")).string();
  const std::string cmd = std::string(bin) + "/tessera-loadgen --port " + std::to_string(server_->port()) +
                          " --target /embed --mode closed --connections 4 --requests 200 --mix seed-40 --json " + out +
                          " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  const json report = json::parse(f, nullptr, false);
  std::filesystem::remove(out);
  EXPECT_EQ(report["ok"], 200) << report.dump();
  EXPECT_EQ(report["errors"], 0) << report.dump();
  EXPECT_GT(report["throughput_rps"].get<double>(), 0);
  EXPECT_GT(report["latency_ms"]["p99"].get<double>(), 0);
  EXPECT_EQ(report["modelled"]["answers"], 0) << "the reference backend models no time";
}

// OpenAI's /v1/embeddings: a list of id lists, float and base64 (little-endian float32), usage.
TEST_F(EmbedHttp, OpenAIEmbeddingsFloatAndBase64) {
  http_connection c("127.0.0.1", server_->port());
  const auto seqs = sequences(batch(0));
  size_t tokens = 0;
  for (const auto& s : seqs) tokens += s.size();
  const json f = post(c, "/v1/embeddings", {{"input", seqs}, {"model", "tiny-embed"}});
  const json b = post(c, "/v1/embeddings", {{"input", seqs}, {"model", "tiny-embed"}, {"encoding_format", "base64"}});
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["model"], "tiny-embed");
  EXPECT_EQ(f["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(f["usage"]["total_tokens"], tokens);
  ASSERT_EQ(f["data"].size(), seqs.size());
  ASSERT_EQ(b["data"].size(), seqs.size());
  double worst = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(f["data"][i]["object"], "embedding");
    EXPECT_EQ(f["data"][i]["index"], i);
    worst = std::max(worst, max_error(f["data"][i]["embedding"], row(batch(0)["mean_normalized"], i, width())));
    const auto decoded = from_base64(b["data"][i]["embedding"].get<std::string>());
    ASSERT_EQ(decoded.size(), width());
    for (size_t j = 0; j < width(); ++j) EXPECT_EQ(decoded[j], f["data"][i]["embedding"][j].get<float>()) << i << "," << j;
  }
  EXPECT_LE(worst, tolerance);
  // One list of ids, dimensions, a string.
  const json one = post(c, "/v1/embeddings", {{"input", seqs[5]}, {"dimensions", 8}});
  ASSERT_EQ(one["data"].size(), 1u);
  auto want = row(batch(0)["pooled"]["mean"], 5, width());
  want.resize(8);
  EXPECT_LE(max_error(one["data"][0]["embedding"], unit(want)), tolerance);
  const json text = post(c, "/v1/embeddings", {{"input", "hello world"}});
  const json tei = post(c, "/embed", {{"inputs", "hello world"}});
  expect_close(text["data"][0]["embedding"], tei[0], "openai text");
  EXPECT_EQ(text["usage"]["prompt_tokens"].get<size_t>(), server_->tok().encode("hello world", 0, truncation_side::right)->token_ids.size());
}

// Text inputs: prompt_name prepends the model's prompt; a batch of strings; truncation.
TEST_F(EmbedHttp, TextPromptsAndTruncation) {
  http_connection c("127.0.0.1", server_->port());
  const json with_prompt = post(c, "/embed", {{"inputs", "where is it"}, {"prompt_name", "query"}});
  const json spelled = post(c, "/embed", {{"inputs", "query: where is it"}});
  expect_close(with_prompt[0], spelled[0], "prompt");
  const json passage = post(c, "/embed", {{"inputs", "where is it"}, {"prompt_name", "passage"}});
  EXPECT_NE(passage, spelled);
  const json batch_texts = post(c, "/embed", {{"inputs", {"one text", "query: where is it"}}});
  ASSERT_EQ(batch_texts.size(), 2u);
  expect_close(batch_texts[1], spelled[0], "in a batch");
  // Unit length by default.
  double ss = 0;
  for (const auto& v : spelled[0]) ss += v.get<double>() * v.get<double>();
  EXPECT_NEAR(ss, 1.0, 1e-5);
  // 40 tokens > max_input_length 32: refused unless truncated; truncated = the first 31 + [SEP]... as the tokenizer cuts.
  std::string longer;
  for (int i = 0; i < 40; ++i) longer += "a ";
  post(c, "/embed", {{"inputs", longer}}, 413);
  const json cut = post(c, "/embed", {{"inputs", longer}, {"truncate", true}});
  const auto enc = server_->tok().encode(longer, 32, truncation_side::right);
  ASSERT_TRUE(enc.ok());
  expect_close(cut[0], post(c, "/embed", {{"inputs", enc->token_ids}})[0], "truncated");
  const json left = post(c, "/embed", {{"inputs", longer}, {"truncate", true}, {"truncation_direction", "Left"}});
  const auto enc_left = server_->tok().encode(longer, 32, truncation_side::left);
  ASSERT_TRUE(enc_left.ok());
  expect_close(left[0], post(c, "/embed", {{"inputs", enc_left->token_ids}})[0], "truncated left");
  expect_close(post(c, "/embed", {{"inputs", longer}, {"truncate", true}, {"truncation_direction", "left"}})[0], left[0],
               "TEI's lower-case alias");
}

// KServe v2 infer on an embedding model: an FP32 tensor [batch, hidden] named "embeddings", unit
// length as the folder's Normalize module says; token ids padded with an attention mask, and text.
TEST_F(EmbedHttp, KServeInferAnswersTheVectorsAsATensor) {
  http_connection c("127.0.0.1", server_->port());
  const json meta = json::parse(c.request("GET", "/v2/models/tiny-embed").body);
  EXPECT_EQ(meta["outputs"][0], json({{"name", "embeddings"}, {"datatype", "FP32"}, {"shape", {-1, 40}}})) << meta.dump();
  const auto seqs = sequences(batch(1));
  size_t longest = 0;
  for (const auto& s : seqs) longest = std::max(longest, s.size());
  std::vector<int32_t> ids, mask;
  for (const auto& s : seqs)
    for (size_t t = 0; t < longest; ++t) {
      ids.push_back(t < s.size() ? s[t] : 0);
      mask.push_back(t < s.size() ? 1 : 0);
    }
  const auto n = static_cast<int64_t>(seqs.size()), l = static_cast<int64_t>(longest);
  const json got = post(c, "/v2/models/tiny-embed/infer",
                        {{"inputs",
                          {{{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", {n, l}}, {"data", ids}},
                           {{"name", "attention_mask"}, {"datatype", "INT64"}, {"shape", {n, l}}, {"data", mask}}}}});
  ASSERT_TRUE(got.contains("outputs")) << got.dump();
  const json& out = got["outputs"][0];
  EXPECT_EQ(out["name"], "embeddings");
  EXPECT_EQ(out["datatype"], "FP32");
  EXPECT_EQ(out["shape"], json({n, 40}));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const json v(std::vector<float>(out["data"].begin() + static_cast<std::ptrdiff_t>(i * width()),
                                    out["data"].begin() + static_cast<std::ptrdiff_t>((i + 1) * width())));
    EXPECT_LE(max_error(v, row(batch(1)["mean_normalized"], i, width())), tolerance) << "sequence " << i;
  }
  const json text = post(c, "/v2/models/tiny-embed/infer",
                         {{"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a b c"}}}}}});
  const json v(std::vector<float>(text["outputs"][0]["data"].begin(), text["outputs"][0]["data"].end()));
  expect_close(v, post(c, "/embed", {{"inputs", "a b c"}})[0], "KServe text");
  post(c, "/v2/models/tiny-embed/infer",
       {{"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"a"}}}}},
        {"outputs", {{{"name", "logits"}}}}},
       400);
}

// Hugging Face's POST /: feature extraction, and sentence similarity (cosine of unit vectors).
TEST_F(EmbedHttp, RootRouteFeatureExtractionAndSimilarity) {
  http_connection c("127.0.0.1", server_->port());
  const json want = post(c, "/embed", {{"inputs", "a b c"}});
  expect_close(post(c, "/", {{"inputs", "a b c"}})[0], want[0], "POST /");
  expect_close(post(c, "/invocations", {{"inputs", "a b c"}})[0], want[0], "/invocations");
  const std::vector<std::string> sentences = {"a b c", "x y z", "a b"};
  const json sim = post(c, "/", {{"inputs", {{"source_sentence", "a b c"}, {"sentences", sentences}}}});
  const json same = post(c, "/similarity", {{"inputs", {{"source_sentence", "a b c"}, {"sentences", sentences}}}});
  expect_close(sim, same, "similarity");
  const json vecs = post(c, "/embed", {{"inputs", {"a b c", "x y z", "a b"}}});
  ASSERT_EQ(sim.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    double dot = 0;
    for (size_t j = 0; j < width(); ++j) dot += vecs[0][j].get<double>() * vecs[i][j].get<double>();
    EXPECT_NEAR(sim[i].get<double>(), dot, 1e-6);
  }
  EXPECT_NEAR(sim[0].get<double>(), 1.0, 1e-6);
}

// The routes that do not fit an embedding model answer TEI's 424; /embed_sparse is refused by name.
TEST_F(EmbedHttp, RoutesThatDoNotFitAnEmbeddingModel) {
  http_connection c("127.0.0.1", server_->port());
  EXPECT_EQ(post(c, "/predict", {{"inputs", "hi"}}, 424)["error"], "Model is not a classifier model");
  EXPECT_EQ(post(c, "/rerank", {{"query", "a"}, {"texts", {"b"}}}, 424)["error"], "model is not a re-ranker model");
  const json sparse = post(c, "/embed_sparse", {{"inputs", "hi"}}, 424);
  EXPECT_NE(sparse["error"].get<std::string>().find("SPLADE"), std::string::npos) << sparse.dump();
}

// Hostile bodies: each a clear 4xx naming the problem; the server then still answers right.
TEST_F(EmbedHttp, HostileInputsGetAClear4xxAndServingGoesOn) {
  http_connection c("127.0.0.1", server_->port());
  std::vector<std::vector<int32_t>> too_many(33, std::vector<int32_t>{12, 50});
  const std::vector<std::tuple<std::string, std::string, unsigned, std::string>> cases = {
      {"/embed", R"({"inputs": 5})", 422, "inputs"},
      {"/embed", R"({"inputs": []})", 400, "cannot be empty"},
      {"/embed", R"({"inputs": [""]})", 413, "empty"},
      {"/embed", R"({"inputs": [[]]})", 422, "cannot be empty"},
      {"/embed", R"({"inputs": ["a", 3]})", 422, "list of strings"},
      {"/embed", R"({"inputs": [[1, "a"]]})", 422, "integers"},
      {"/embed", R"({"inputs": [1.5]})", 422, "integers"},
      {"/embed", R"({"inputs": [99999999999]})", 422, "integers"},
      {"/embed", R"({"inputs": [5000]})", 422, "vocabulary"},
      {"/embed", R"({"inputs": [-1]})", 422, "vocabulary"},
      {"/embed", R"({"inputs": "a", "normalize": "yes"})", 422, "normalize"},
      {"/embed", R"({"inputs": "a", "dimensions": -3})", 422, "dimensions"},
      {"/embed", R"({"inputs": "a", "dimensions": "8"})", 422, "dimensions"},
      {"/embed", R"({"inputs": "a", "prompt_name": 7})", 422, "prompt_name"},
      {"/embed", R"({"inputs": [12, 50], "prompt_name": "query"})", 422, "token ids"},
      {"/embed", R"({"inputs": "a", "truncation_direction": "up"})", 422, "truncation_direction"},
      {"/embed", R"({"inputs": "a", "pooling": "cls"})", 422, "unknown field"},
      {"/embed", R"({"texts": ["a"]})", 422, "unknown field"},
      {"/embed", R"([1, 2])", 422, "object"},
      {"/embed", R"({"inputs": "a")", 400, "malformed"},
      {"/embed", json{{"inputs", too_many}}.dump(), 413, "batch size 33"},
      {"/embed_all", R"({"inputs": "a", "normalize": true})", 422, "unknown field"},
      {"/similarity", R"({"inputs": {"source_sentence": "a", "sentences": []}})", 400, "cannot be empty"},
      {"/similarity", R"({"inputs": {"source_sentence": 1, "sentences": ["a"]}})", 422, "source_sentence"},
      {"/v1/embeddings", R"({"input": "a", "encoding_format": "int8"})", 422, "encoding_format"},
      {"/v1/embeddings", R"({"input": {"text": "a"}})", 422, "input"},
      {"/v1/embeddings", R"({"input": []})", 400, "cannot be empty"},
      {"/v1/embeddings", R"({"input": "a", "model": 3})", 422, "model"},
      {"/v1/embeddings", R"({"input": "a", "dimensions": 1000})", 422, "dimensions"},
      {"/v1/embeddings", R"({"inputs": "a"})", 422, "unknown field"},
      {"/v1/embeddings", json{{"input", too_many}}.dump(), 413, "batch size 33"},
      {"/embeddings", R"({"input": "a"})", 404, "no route"},
  };
  for (const auto& [path, body, status, words] : cases) {
    auto r = c.request("POST", path, body);
    EXPECT_EQ(r.status, status) << path << " " << body.substr(0, 120) << " -> " << r.body;
    EXPECT_NE(r.body.find(words), std::string::npos) << path << " " << body.substr(0, 120) << " -> " << r.body;
    const json j = json::parse(r.body, nullptr, false);
    if (path == "/v1/embeddings") {  // TEI's OpenAI error shape
      EXPECT_TRUE(j.contains("message") && j.contains("type") && j["code"] == status) << r.body;
    } else {
      EXPECT_TRUE(j.contains("error") && j.contains("error_type")) << r.body;
    }
  }
  const auto seqs = sequences(batch(1));
  const json got = post(c, "/embed", {{"inputs", seqs}});
  for (size_t i = 0; i < seqs.size(); ++i)
    EXPECT_LE(max_error(got[i], row(batch(1)["mean_normalized"], i, width())), tolerance);
}

// Packed batches (the token-budget policy: no padding) give the goldens too; the suite above
// runs padded batches (dynamic_padded).
TEST(EmbedHttpPacked, TokenBudgetBatchesMatchTheGoldens) {
  test_server_options o = embed_options();
  o.batching = batching_config{.kind = policy_kind::token_budget, .max_batch_size = 32, .token_budget = 256,
                               .max_queue_delay = std::chrono::milliseconds(1)};
  test_server srv(o);
  http_connection c("127.0.0.1", srv.port());
  const json& entry = goldens()["embed_batches"][0];
  const auto seqs = sequences(entry);
  const json got = post(c, "/embed", {{"inputs", seqs}});
  ASSERT_EQ(got.size(), seqs.size());
  double worst = 0;
  for (size_t i = 0; i < seqs.size(); ++i) worst = std::max(worst, max_error(got[i], row(entry["mean_normalized"], i, 40)));
  EXPECT_LE(worst, tolerance);
  std::cout << "[ packed ] /embed: max |error| " << worst << "\n";
}

// bf16 (tessera-serve --dtype bf16): the same routes, within the models tests' bf16 bounds
// (0.03 absolute, cosine >= 0.999 with the float64 golden).
TEST(EmbedHttpBf16, EmbedAndEmbedAllWithinBf16Bounds) {
  test_server_options o = embed_options();
  o.dtype = models::dtype::bf16;
  test_server srv(o);
  http_connection c("127.0.0.1", srv.port());
  EXPECT_EQ(json::parse(c.request("GET", "/info").body)["model_dtype"], "bfloat16");
  const json& entry = goldens()["embed_batches"][0];
  const auto seqs = sequences(entry);
  const json got = post(c, "/embed", {{"inputs", seqs}});
  const json all = post(c, "/embed_all", {{"inputs", seqs}});
  ASSERT_EQ(got.size(), seqs.size());
  ASSERT_EQ(all.size(), seqs.size());
  double worst = 0, worst_cos = 1;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto want = row(entry["mean_normalized"], i, 40);
    worst = std::max(worst, max_error(got[i], want));
    double dot = 0;
    for (size_t j = 0; j < 40; ++j) dot += got[i][j].get<double>() * want[j];
    worst_cos = std::min(worst_cos, dot);
    EXPECT_EQ(all[i].size(), seqs[i].size());
  }
  EXPECT_LE(worst, 0.03);
  EXPECT_GE(worst_cos, 0.999);
  std::cout << "[ bf16 ] /embed: max |error| " << worst << ", min cosine " << worst_cos << "\n";
}

// A model whose sentence-transformers config names a default prompt: it applies when the
// request names none.
TEST(EmbedHttpDefaultPrompt, AppliesWithoutPromptName) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessera-embed-default-prompt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(models_dir() + "/tiny-embed", dir, fs::copy_options::recursive);
  std::ofstream(dir / "config_sentence_transformers.json")
      << R"({"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"})";
  {
    test_server_options o;
    o.model = dir.string();
    test_server srv(o);
    http_connection c("127.0.0.1", srv.port());
    const json plain = post(c, "/embed", {{"inputs", "where is it"}});
    const json passage = post(c, "/embed", {{"inputs", "where is it"}, {"prompt_name", "passage"}});
    expect_close(plain[0], post(c, "/embed", {{"inputs", "where is it"}, {"prompt_name", "query"}})[0], "default");
    expect_close(post(c, "/v1/embeddings", {{"input", "where is it"}})["data"][0]["embedding"], plain[0],
                 "OpenAI: the default prompt applies too");
    EXPECT_GT(max_error(plain[0], passage[0].get<std::vector<double>>()), 1e-3);
  }
  fs::remove_all(dir);
}

/// The value of a gauge in Prometheus text (-1 when absent).
double gauge(const std::string& metrics, const std::string& name) {
  const auto at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(metrics.c_str() + at + name.size() + 2);
}

// tessera-host serves an embedding folder from its tiles (the head tile pools the last layer's
// rows: only pooled vectors reach the host for /embed) and from a spawned tessera-gpu (pooled in
// that process), over real HTTP: /embed and /v1/embeddings equal the float64 goldens within 1e-4
// (fp32; bf16 tiles within the bf16 bound 0.03, as EmbedHttpBf16). /embed_all: the head tile (or
// the GPU process) sends every token's last-layer row, packed; each equals the goldens' token rows
// within the same bounds, also in one batch with /embed requests (each sequence its own rows).
TEST(EmbedProcesses, TileHostServesEmbeddingsFromTilesAndTheGpuProcess) {
  using tessera::test_support::bin;
  const std::string model = models_dir() + "/tiny-embed";
  struct setup {
    const char* name;
    std::vector<std::string> extra;
    const char* backend;  // the one that must have answered
    double bound;
    // /embed_all's rows are not averaged over tokens: in bf16 each carries its own rounding (the
    // final row stored in bf16: 2^-9 of values up to 3.4), so they are held to the bf16 bound for
    // unaveraged outputs (bf16_bounds.hpp's 0.05) rather than the pooled vectors' 0.03.
    double token_bound;
  };
  const std::vector<setup> setups{
      {"tiles", {"--tiles", "2", "--check", "1"}, "tiles0", tolerance, tolerance},
      {"tiles bf16", {"--tiles", "2", "--dtype", "bf16"}, "tiles0", 0.03, 0.05},
      // Padded batches (filler sequences computed on the tiles, their rows never sent).
      {"tiles padded", {"--tiles", "2", "--batching", "dynamic"}, "tiles0", tolerance, tolerance},
      // Hybrid routing with a threshold no request reaches: every sequence to the GPU process.
      {"gpu process", {"--tiles", "1", "--spawn-gpu", "1", "--routing", "hybrid", "--long-threshold", "100000"}, "gpu0",
       tolerance, tolerance},
      {"gpu process bf16", {"--tiles", "1", "--dtype", "bf16", "--spawn-gpu", "1", "--routing", "hybrid", "--long-threshold", "100000"},
       "gpu0", 0.03, 0.05}};
  for (const auto& su : setups) {
    std::vector<std::string> args{bin("tessera-host"), "--model", model, "--tile-memory", "64MiB", "--serve", "--port", "0"};
    args.insert(args.end(), su.extra.begin(), su.extra.end());
    tessera::test_support::served_process p(args);
    ASSERT_NE(p.port(), 0) << su.name << ": " << p.line();
    http_connection c("127.0.0.1", p.port());
    EXPECT_EQ(json::parse(c.request("GET", "/info").body)["model_type"], json({{"embedding", {{"pooling", "mean"}}}}));
    double worst = 0, worst_raw = 0, worst_openai = 0;
    for (const auto& entry : goldens()["embed_batches"]) {
      const auto seqs = sequences(entry);
      const json got = post(c, "/embed", {{"inputs", seqs}});
      const json raw = post(c, "/embed", {{"inputs", seqs}, {"normalize", false}});
      const json oa = post(c, "/v1/embeddings", {{"input", seqs}, {"model", "tiny-embed"}});
      ASSERT_EQ(got.size(), seqs.size()) << su.name;
      ASSERT_EQ(raw.size(), seqs.size()) << su.name;
      ASSERT_EQ(oa["data"].size(), seqs.size()) << su.name;
      for (size_t i = 0; i < seqs.size(); ++i) {
        worst = std::max(worst, max_error(got[i], row(entry["mean_normalized"], i, 40)));
        worst_raw = std::max(worst_raw, max_error(raw[i], row(entry["pooled"]["mean"], i, 40)));
        worst_openai = std::max(worst_openai, max_error(oa["data"][i]["embedding"], row(entry["mean_normalized"], i, 40)));
      }
    }
    EXPECT_LE(worst, su.bound) << su.name;
    EXPECT_LE(worst_raw, su.bound) << su.name;
    EXPECT_LE(worst_openai, su.bound) << su.name;
    std::cout << "[ tessera-host " << su.name << " ] /embed max |error| normalized " << worst << ", raw " << worst_raw
              << ", /v1/embeddings " << worst_openai << "\n";
    double worst_token = 0;
    size_t vectors = 0;
    for (const auto& entry : goldens()["embed_batches"]) {
      const auto seqs = sequences(entry);
      const json all = post(c, "/embed_all", {{"inputs", seqs}});
      ASSERT_EQ(all.size(), seqs.size()) << su.name;
      size_t token = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        ASSERT_EQ(all[i].size(), seqs[i].size()) << su.name << " sequence " << i;
        for (size_t t = 0; t < seqs[i].size(); ++t, ++token, ++vectors)
          worst_token = std::max(worst_token, max_error(all[i][t], row(entry["tokens"], token, 40)));
      }
    }
    EXPECT_LE(worst_token, su.token_bound) << su.name;
    std::cout << "[ tessera-host " << su.name << " ] /embed_all: " << vectors << " token vectors, max |error| "
              << worst_token << "\n";
    // /embed and /embed_all at once (they may share a batch): each sequence gets its own rows.
    {
      const json& entry = goldens()["embed_batches"][1];
      const auto seqs = sequences(entry);
      std::atomic<int> wrong{0};
      std::vector<std::thread> threads;
      for (int k = 0; k < 6; ++k)
        threads.emplace_back([&, k] {
          http_connection cc("127.0.0.1", p.port());
          const bool all = k % 2 == 0;
          auto r = cc.request("POST", all ? "/embed_all" : "/embed", json{{"inputs", seqs}}.dump());
          const json j = json::parse(r.body, nullptr, false);
          if (r.status != 200 || j.size() != seqs.size()) return void(++wrong);
          size_t token = 0;
          for (size_t i = 0; i < seqs.size(); ++i) {
            token += seqs[i].size();
            const double e = all ? (j[i].size() == seqs[i].size() ? max_error(j[i].back(), row(entry["tokens"], token - 1, 40)) : INFINITY)
                                 : max_error(j[i], row(entry["mean_normalized"], i, 40));
            if (!(e <= (all ? su.token_bound : su.bound))) ++wrong;
          }
        });
      for (auto& t : threads) t.join();
      EXPECT_EQ(wrong.load(), 0) << su.name;
    }
    const std::string metrics = c.request("GET", "/metrics").body;
    EXPECT_GE(gauge(metrics, std::string("tessera_backend_sequences{backend=\"") + su.backend + "\"}"), 64) << su.name;
    post(c, "/embed", {{"inputs", "still serving"}});
    EXPECT_EQ(p.stop(), 0) << su.name;
  }
}

// The modelled clock from tiles to tessera-loadgen: each answer's x-modelled-time is its batch on
// the modelled IPU (tessera-host --preset, ipu-mk2), the same figure /metrics adds to
// tessera_batch_modelled_duration and tessera_backend_modelled_seconds; tessera-loadgen --target
// /embed reports it beside the wall clock (percentiles, and req/s over the modelled device time:
// the backend's modelled seconds over the run / its replicas up). The reference backend models no
// time: no header, no modelled figures (EmbedHttp.LoadgenDrivesEmbed's report has 0 answers).
TEST(EmbedProcesses, LoadgenReportsTheModelledClockBesideTheWallClock) {
  using tessera::test_support::bin;
  using tessera::test_support::metric_value;
  tessera::test_support::served_process p({bin("tessera-host"), "--model", models_dir() + "/tiny-embed", "--tile-memory",
                                           "64MiB", "--tiles", "2", "--serve", "--port", "0"});
  ASSERT_NE(p.port(), 0) << p.line();
  http_connection c("127.0.0.1", p.port());
  const auto before = c.request("GET", "/metrics").body;
  auto r = c.request("POST", "/embed", json{{"inputs", "one request, one batch"}}.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  const double header_ms = std::atof(r.header("x-modelled-time").c_str());
  const auto after = c.request("GET", "/metrics").body;
  const double sum = metric_value(after, "tessera_batch_modelled_duration_sum") -
                     std::max(0.0, metric_value(before, "tessera_batch_modelled_duration_sum"));
  const double backend = metric_value(after, "tessera_backend_modelled_seconds{backend=\"tiles0\"}") -
                         metric_value(before, "tessera_backend_modelled_seconds{backend=\"tiles0\"}");
  EXPECT_GT(header_ms, 0) << r.header("x-modelled-time");
  EXPECT_NEAR(header_ms, sum * 1e3, 1e-6 * header_ms);
  EXPECT_NEAR(header_ms, backend * 1e3, 1e-6 * header_ms);
  std::cout << "[ modelled ] one /embed on tiles: " << header_ms << " ms modelled (ipu-mk2)\n";

  const std::string out =
      (std::filesystem::temp_directory_path() / ("tessera-embed-clocks-" + std::to_string(::getpid()) + ".json")).string();
  const std::string table = out + ".txt";
  const std::string cmd = bin("tessera-loadgen") + " --port " + std::to_string(p.port()) +
                          " --target /embed --mode closed --connections 4 --requests 64 --mix seed-40 --quiet --json " +
                          out + " > " + table + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  const json report = json::parse(f, nullptr, false);
  std::ifstream t(table);
  const std::string text((std::istreambuf_iterator<char>(t)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  std::filesystem::remove(table);
  ASSERT_TRUE(report.is_object()) << text;
  EXPECT_EQ(report["ok"], 64) << report.dump();
  const json& m = report["modelled"];
  EXPECT_EQ(m["answers"], 64) << report.dump();
  EXPECT_GT(m["latency_ms"]["p50"].get<double>(), 0) << report.dump();
  EXPECT_GE(m["latency_ms"]["p99"].get<double>(), m["latency_ms"]["p50"].get<double>()) << report.dump();
  EXPECT_GT(m["seconds"].get<double>(), 0) << report.dump();
  EXPECT_NEAR(m["throughput_rps"].get<double>(), 64 / m["seconds"].get<double>(), 1e-3 * m["throughput_rps"].get<double>() + 2e-3);
  EXPECT_NE(text.find("modelled ms  p50"), std::string::npos) << text;
  EXPECT_NE(text.find("s of modelled device time"), std::string::npos) << text;
  std::cout << text;
  EXPECT_EQ(p.stop(), 0);
}

// A classifier (bert-tiny) answers the embedding routes with TEI's 424, base64 included.
TEST(EmbedHttpOnAClassifier, EmbeddingRoutesAnswerTeis424) {
  test_server srv;
  http_connection c("127.0.0.1", srv.port());
  for (const char* path : {"/embed", "/embed_all", "/embed_sparse"})
    EXPECT_EQ(post(c, path, {{"inputs", "hi"}}, 424)["error"], "Model is not an embedding model") << path;
  const json oa = post(c, "/v1/embeddings", {{"input", {"hi"}}, {"encoding_format", "base64"}}, 424);
  EXPECT_EQ(oa["message"], "Model is not an embedding model");
  EXPECT_EQ(oa["type"], "Backend");
  EXPECT_EQ(oa["code"], 424);
  EXPECT_EQ(json::parse(c.request("GET", "/info").body)["model_type"].begin().key(), "classifier");
  EXPECT_EQ(post(c, "/predict", {{"inputs", "hi"}}).size(), 2u);  // still a classifier
}

// The reranker (a one-label cross-encoder): /info says so; its raw logits over KServe v2 match
// the goldens; /rerank scores are the sigmoid of the raw scores, sorted, as TEI's.
TEST(RerankHttp, GoldensOverKServeAndRerankScores) {
  test_server_options o;
  o.model = models_dir() + "/tiny-rerank";
  test_server srv(o);
  http_connection c("127.0.0.1", srv.port());
  EXPECT_EQ(json::parse(c.request("GET", "/info").body)["model_type"].begin().key(), "reranker");
  double worst = 0;
  for (const auto& entry : goldens()["rerank_batches"]) {
    const auto ids = sequences(entry);
    const auto types = sequences(entry, "token_type_ids");
    const auto want = entry["scores"].get<std::vector<double>>();
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto n = static_cast<int64_t>(ids[i].size());
      json req{{"inputs",
                {{{"name", "input_ids"}, {"datatype", "INT64"}, {"shape", {1, n}}, {"data", ids[i]}},
                 {{"name", "token_type_ids"}, {"datatype", "INT64"}, {"shape", {1, n}}, {"data", types[i]}}}}};
      const json got = post(c, "/v2/models/tiny-rerank/infer", req);
      ASSERT_TRUE(got.contains("outputs")) << got.dump();
      worst = std::max(worst, std::abs(got["outputs"][0]["data"][0].get<double>() - want[i]));
    }
  }
  EXPECT_LE(worst, tolerance);
  std::cout << "[ rerank ] raw logits over KServe: max |error| " << worst << "\n";
  const std::vector<std::string> texts = {"a tile", "an emulator", "the host", "a b c"};
  const json raw = post(c, "/rerank", {{"query", "what is it"}, {"texts", texts}, {"raw_scores", true}});
  const json sig = post(c, "/rerank", {{"query", "what is it"}, {"texts", texts}, {"return_text", true}});
  ASSERT_EQ(raw.size(), texts.size());
  ASSERT_EQ(sig.size(), texts.size());
  std::map<size_t, double> raw_by_index;
  for (const auto& r : raw) raw_by_index[r["index"].get<size_t>()] = r["score"].get<double>();
  for (size_t i = 0; i < sig.size(); ++i) {
    const size_t k = sig[i]["index"].get<size_t>();
    EXPECT_NEAR(sig[i]["score"].get<double>(), 1.0 / (1.0 + std::exp(-raw_by_index[k])), 1e-6);
    EXPECT_EQ(sig[i]["text"], texts[k]);
    if (i > 0) EXPECT_GE(sig[i - 1]["score"].get<double>(), sig[i]["score"].get<double>());
  }
  post(c, "/embed", {{"inputs", "hi"}}, 424);
}

}  // namespace
}  // namespace tessera::serving
