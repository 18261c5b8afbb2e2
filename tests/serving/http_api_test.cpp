// Every endpoint and every error code over a real socket, against a real server (reference
// backend on bert-tiny when tessera_models is built, else the toy model).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/test/http_client.hpp"
#include "test_server.hpp"

using namespace tessera;
using namespace tessera::serving;
using namespace tessera::toys;
using namespace tessera::test_support;
using namespace tessera::serving::test_support;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

class HttpApi : public server_suite {
 protected:
  static void SetUpTestSuite() {
    start_server({.api = {.max_client_batch_size = 8, .max_body_bytes = 64 << 10}});
    std::cout << "[ serving ] model under test: " << server_->info().model_id << "\n";
  }
  void expect_error(const http_response& r, unsigned status, const std::string& type) {
    EXPECT_EQ(r.status, status) << r.body << r.error;
    auto j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j.value("error_type", ""), type) << r.body;
    EXPECT_FALSE(j.value("error", "").empty());
  }
};

std::string long_text(int words) {
  std::string s;
  for (int i = 0; i < words; ++i) s += "word ";
  return s;
}

}  // namespace

TEST_F(HttpApi, Health) {
  auto r = get("/health");
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(r.keep_alive);
  r = get("/v2/health/ready");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(json::parse(r.body)["ready"], true);
  EXPECT_EQ(get("/v2/health/live").status, 200u);
}

TEST_F(HttpApi, Info) {
  auto r = get("/info");
  ASSERT_EQ(r.status, 200u);
  auto j = json::parse(r.body);
  EXPECT_EQ(j["model_id"], server_->info().model_id);
  EXPECT_EQ(j["max_input_length"], 512);
  EXPECT_EQ(j["max_client_batch_size"], 8);
  EXPECT_EQ(j["model_type"]["classifier"]["id2label"]["0"], "LABEL_0");
  EXPECT_EQ(j["model_type"]["classifier"]["label2id"]["LABEL_1"], 1);
  EXPECT_EQ(j["backends"].size(), 1u);
  // TEI's Info fields, typed as TEI types them.
  for (const char* f : {"model_id", "model_dtype", "version"}) EXPECT_TRUE(j[f].is_string()) << f;
  for (const char* f : {"max_concurrent_requests", "max_input_length", "max_batch_tokens",
                        "max_client_batch_size", "tokenization_workers"})
    EXPECT_TRUE(j[f].is_number_unsigned()) << f;
  EXPECT_TRUE(j["auto_truncate"].is_boolean());
  for (const char* f : {"model_sha", "sha", "docker_label"}) EXPECT_TRUE(j.contains(f)) << f;
  EXPECT_TRUE(j["max_batch_requests"].is_null() || j["max_batch_requests"].is_number_unsigned());
}

TEST_F(HttpApi, PredictSingleIsSoftmaxSortedDescending) {
  auto r = post("/predict", R"({"inputs": "I like you. I love you"})");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  double sum = 0;
  for (auto& p : j) sum += p["score"].get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_GE(j[0]["score"].get<double>(), j[1]["score"].get<double>());
  // The winning label is the reference's argmax.
  auto seq = server_->tok().encode("I like you. I love you", 0).value();
  auto want = server_->expected_logits(seq);
  std::string top = want[1] > want[0] ? "LABEL_1" : "LABEL_0";
  EXPECT_EQ(j[0]["label"], top);
}

TEST_F(HttpApi, PredictBatchAndPairsAndRawScores) {
  auto r = post("/predict", R"({"inputs": [["first text"], ["second one"]], "raw_scores": true})");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  ASSERT_EQ(j.size(), 2u);
  const char* texts[] = {"first text", "second one"};
  for (int i = 0; i < 2; ++i) {
    auto want = server_->expected_logits(server_->tok().encode(texts[i], 0).value());
    ASSERT_EQ(j[i].size(), 2u);
    for (auto& p : j[i]) {
      int label = p["label"] == "LABEL_0" ? 0 : 1;
      EXPECT_NEAR(p["score"].get<float>(), want[label], logits_tolerance);
    }
  }
  r = post("/predict", R"({"inputs": [["what is it?", "it is a test"]], "raw_scores": true})");
  ASSERT_EQ(r.status, 200u) << r.body;
  j = json::parse(r.body);
  ASSERT_EQ(j.size(), 1u);
  auto want = server_->expected_logits(server_->tok().encode_pair("what is it?", "it is a test", 0).value());
  for (auto& p : j[0]) {
    int label = p["label"] == "LABEL_0" ? 0 : 1;
    EXPECT_NEAR(p["score"].get<float>(), want[label], logits_tolerance);
  }
}

TEST_F(HttpApi, TokenizeGivesTokenObjectsWithByteOffsets) {
  auto r = post("/tokenize", R"({"inputs": ["hello world", "a question"]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  ASSERT_EQ(j.size(), 2u);
  const char* texts[] = {"hello world", "a question"};
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> ids;
    for (auto& t : j[i]) ids.push_back(t["id"]);
    EXPECT_EQ(ids, server_->tok().encode(texts[i], 0)->token_ids);
    EXPECT_EQ(j[i].front()["special"], true);
    EXPECT_TRUE(j[i].front()["start"].is_null());
    for (size_t k = 1; k + 1 < j[i].size(); ++k) {
      const auto& t = j[i][k];
      EXPECT_EQ(t["special"], false);
      const size_t start = t["start"], stop = t["stop"];
      EXPECT_EQ(t["text"], std::string(texts[i]).substr(start, stop - start));
    }
  }
  EXPECT_EQ(j[0][1]["text"], "hello");
  EXPECT_EQ(j[0][1]["start"], 0);
  EXPECT_EQ(j[0][1]["stop"], 5);
  // add_special_tokens: false drops [CLS] and [SEP].
  r = post("/tokenize", R"({"inputs": "hello world", "add_special_tokens": false})");
  ASSERT_EQ(r.status, 200u) << r.body;
  j = json::parse(r.body);
  ASSERT_EQ(j.size(), 1u);
  ASSERT_EQ(j[0].size(), server_->tok().encode("hello world", 0)->token_ids.size() - 2);
  for (auto& t : j[0]) EXPECT_EQ(t["special"], false);
}

TEST_F(HttpApi, Metrics) {
  post("/predict", R"({"inputs": "count me"})");
  auto r = get("/metrics");
  ASSERT_EQ(r.status, 200u);
  EXPECT_NE(r.content_type.find("text/plain"), std::string::npos);
  for (const char* name :
       {"tessera_request_count ", "tessera_request_success ", "tessera_queue_size ",
        "tessera_batch_next_size_bucket{le=", "tessera_batch_next_tokens_count ",
        "tessera_request_queue_duration_bucket", "tessera_request_inference_duration_sum",
        "tessera_request_duration_count", "# TYPE tessera_request_duration histogram",
        "tessera_backend_healthy{backend="})
    EXPECT_NE(r.body.find(name), std::string::npos) << name;
  post("/predict", R"({"inputs": ""})");
  r = get("/metrics");
  EXPECT_NE(r.body.find("tessera_request_failure{err=\"Validation\"}"), std::string::npos);
}

TEST_F(HttpApi, KServeModelMetadataAndReady) {
  std::string name = server_->info().model_id;
  auto r = get("/v2/models/" + name);
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["name"], name);
  EXPECT_EQ(j["outputs"][0]["name"], "logits");
  EXPECT_EQ(get("/v2/models/" + name + "/ready").status, 200u);
  expect_error(get("/v2/models/no-such-model"), 404, "not_found");
  expect_error(post("/v2/models/no-such-model/infer", "{}"), 404, "not_found");
}

TEST_F(HttpApi, KServeInferText) {
  std::string name = server_->info().model_id;
  json req = {{"id", "req-7"},
              {"inputs", {{{"name", "text"}, {"shape", {2}}, {"datatype", "BYTES"},
                           {"data", {"alpha beta", "gamma"}}}}}};
  auto r = post("/v2/models/" + name + "/infer", req.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["id"], "req-7");
  EXPECT_EQ(j["model_name"], name);
  auto& out = j["outputs"][0];
  EXPECT_EQ(out["datatype"], "FP32");
  EXPECT_EQ(out["shape"], json({2, 2}));
  auto data = out["data"].get<std::vector<float>>();
  auto want0 = server_->expected_logits(server_->tok().encode("alpha beta", 0).value());
  auto want1 = server_->expected_logits(server_->tok().encode("gamma", 0).value());
  EXPECT_NEAR(data[0], want0[0], logits_tolerance);
  EXPECT_NEAR(data[1], want0[1], logits_tolerance);
  EXPECT_NEAR(data[2], want1[0], logits_tolerance);
  EXPECT_NEAR(data[3], want1[1], logits_tolerance);
}

TEST_F(HttpApi, KServeInferTokenIds) {
  std::string name = server_->info().model_id;
  // Two sequences padded to 5 with an attention mask; INT64 and nested data.
  json req = {{"inputs",
               {{{"name", "input_ids"}, {"shape", {2, 5}}, {"datatype", "INT64"},
                 {"data", {{101, 2023, 2003, 1037, 102}, {101, 7592, 102, 0, 0}}}},
                {{"name", "attention_mask"}, {"shape", {2, 5}}, {"datatype", "INT64"},
                 {"data", {1, 1, 1, 1, 1, 1, 1, 1, 0, 0}}}}}};
  auto r = post("/v2/models/" + name + "/infer", req.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  auto data = json::parse(r.body)["outputs"][0]["data"].get<std::vector<float>>();
  auto want0 = server_->expected_logits({{101, 2023, 2003, 1037, 102}, {}});
  auto want1 = server_->expected_logits({{101, 7592, 102}, {}});
  ASSERT_EQ(data.size(), 4u);
  EXPECT_NEAR(data[0], want0[0], logits_tolerance);
  EXPECT_NEAR(data[3], want1[1], logits_tolerance);
  // INT32 works too; bad shapes and ids are 400 (the protocol's code for a bad request).
  req["inputs"][0]["datatype"] = "INT32";
  req["inputs"][1]["datatype"] = "INT32";
  EXPECT_EQ(post("/v2/models/" + name + "/infer", req.dump()).status, 200u);
  req["inputs"][0]["shape"] = {3, 5};
  expect_error(post("/v2/models/" + name + "/infer", req.dump()), 400, "Validation");
  json bad = {{"inputs", {{{"name", "input_ids"}, {"shape", {1, 3}}, {"datatype", "INT64"},
                           {"data", {101, 99999999, 102}}}}}};
  if (!server_->is_toy())
    expect_error(post("/v2/models/" + name + "/infer", bad.dump()), 400, "Validation");
  expect_error(post("/v2/models/" + name + "/infer", R"({"inputs": []})"), 400, "Validation");
}

// TEI: an empty text is a validation error (413), an empty list does not have the shape of
// "inputs" (422), and a pair is empty only when both texts are.
TEST_F(HttpApi, EmptyInputsAsTei) {
  expect_error(post("/predict", R"({"inputs": ""})"), 413, "Validation");
  expect_error(post("/predict", R"({"inputs": [["", ""]]})"), 413, "Validation");
  expect_error(post("/predict", R"({"inputs": []})"), 422, "Validation");
  EXPECT_EQ(post("/predict", R"({"inputs": [["", "x"]]})").status, 200u);
}

TEST_F(HttpApi, MalformedJsonIs400AndWrongShapeIs422) {
  expect_error(post("/predict", R"({"inputs": "unterminated)"), 400, "bad_request");
  expect_error(post("/predict", "not json at all"), 400, "bad_request");
  expect_error(post("/predict", R"({"text": "no inputs field"})"), 422, "Validation");
  expect_error(post("/predict", R"({"inputs": 42})"), 422, "Validation");
  expect_error(post("/predict", R"({"inputs": [["a", "b", "c"]]})"), 422, "Validation");
  expect_error(post("/predict", R"({"inputs": "x", "truncate": "yes"})"), 422, "Validation");
  expect_error(post("/predict", R"({"inputs": "x", "raw_scores": 1})"), 422, "Validation");
}

// Each of these bodies once aborted the process (an exception from a JSON dump).
TEST_F(HttpApi, InvalidUtf8Is400NamingTheByteAndTheServerLives) {
  const std::string before = post("/predict", R"({"inputs": "hello world"})").body;
  const std::pair<std::string, size_t> bodies[] = {
      {"{\"inputs\": \"\xff\xfe text\"}", 12},
      {"{\"inputs\": \"\xc0\xaf overlong\"}", 12},
      {"{\"inputs\": [\"ok\", \"\xed\xa0\x80 surrogate\"]}", 19},
      {"{\"inputs\": [[\"q\", \"cut \xe2\x82\"]]}", 23},
      {"\xc3", 0},
  };
  for (const auto& [body, offset] : bodies) {
    for (const char* target : {"/predict", "/tokenize"}) {
      auto r = post(target, body);
      expect_error(r, 400, "bad_request");
      EXPECT_NE(r.body.find("at byte " + std::to_string(offset)), std::string::npos) << r.body;
    }
  }
  const std::string kserve = "{\"inputs\": [{\"name\": \"text\", \"datatype\": \"BYTES\", "
                             "\"shape\": [1], \"data\": [\"\xf8\x88\x80\x80\x80\"]}]}";
  expect_error(post("/v2/models/" + server_->info().model_id + "/infer", kserve), 400, "bad_request");
  // A parse error quoting the first byte of a character must not echo it raw.
  auto r = post("/predict", "\xc3\xa9");
  expect_error(r, 400, "bad_request");
  EXPECT_EQ(post("/predict", R"({"inputs": "hello world"})").body, before);
}

TEST_F(HttpApi, TooLongWithoutTruncationIs413AndTruncationServesIt) {
  std::string body = json{{"inputs", long_text(600)}}.dump();
  auto r = post("/predict", body);
  expect_error(r, 413, "Validation");
  EXPECT_NE(r.body.find("truncate"), std::string::npos);
  r = post("/predict", json{{"inputs", long_text(600)}, {"truncate", true}}.dump());
  EXPECT_EQ(r.status, 200u) << r.body;
}

TEST_F(HttpApi, TooManyInputsIs413) {
  json many = json::array();
  for (int i = 0; i < 9; ++i) many.push_back({"text " + std::to_string(i)});
  auto r = post("/predict", json{{"inputs", many}}.dump());
  expect_error(r, 413, "Validation");
  EXPECT_NE(r.body.find("batch size 9"), std::string::npos);
}

TEST_F(HttpApi, BodyTooLargeIs413) {
  std::string big = json{{"inputs", std::string(100 << 10, 'a')}}.dump();
  auto r = post("/predict", big);
  expect_error(r, 413, "payload_too_large");
  EXPECT_FALSE(r.keep_alive);
  // The server still serves new connections afterwards.
  EXPECT_EQ(get("/health").status, 200u);
}

TEST_F(HttpApi, UnknownRouteIs404AndWrongMethodIs405) {
  expect_error(get("/nope"), 404, "not_found");
  expect_error(post("/v1/moderations", "{}"), 404, "not_found");
  auto r = get("/predict");
  expect_error(r, 405, "method_not_allowed");
  EXPECT_EQ(r.allow, "POST");
  expect_error(post("/health", ""), 405, "method_not_allowed");
  expect_error(conn_.request("DELETE", "/info"), 405, "method_not_allowed");
}

TEST_F(HttpApi, MalformedHttpIs400) {
  http_connection raw("127.0.0.1", server_->port());
  auto r = raw.raw("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(r.status, 400u) << r.error;
}

TEST_F(HttpApi, KeepAliveServesManyRequestsOnOneConnection) {
  for (int i = 0; i < 50; ++i) {
    auto r = post("/predict", json{{"inputs", "request number " + std::to_string(i)}}.dump());
    ASSERT_EQ(r.status, 200u);
    ASSERT_TRUE(r.keep_alive);
  }
}

// 1,000 requests over 16 connections, each answered exactly once and equal to the reference
// forward of its sequence alone.
TEST_F(HttpApi, ThousandRequestsEachAnsweredOnceEqualToReference) {
  constexpr int total = 1000, conns = 16;
  const uint64_t success_before = server_->metrics().request_success.load();
  const uint64_t sequences_before = server_->metrics().sequence_count.load();
  std::atomic<int> next{0}, ok{0}, bad{0};
  std::mutex report_mu;
  std::vector<std::thread> threads;
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&] {
      http_connection conn("127.0.0.1", server_->port());
      for (int i = next++; i < total; i = next++) {
        std::string text = "request " + std::to_string(i) + " " + long_text(i % 60);
        auto r = conn.request("POST", "/predict",
                              json{{"inputs", text}, {"raw_scores", true}}.dump());
        bool good = r.status == 200;
        if (good) {
          auto j = json::parse(r.body);
          auto want = server_->expected_logits(server_->tok().encode(text, 0).value());
          for (auto& p : j) {
            int label = p["label"] == "LABEL_0" ? 0 : 1;
            float diff = std::fabs(p["score"].get<float>() - want[label]);
            if (diff > logits_tolerance) {
              std::lock_guard lock(report_mu);
              ADD_FAILURE() << "request " << i << " label " << label << " differs by " << diff;
              good = false;
            }
          }
        } else {
          std::lock_guard lock(report_mu);
          ADD_FAILURE() << "request " << i << ": " << r.status << " " << r.body << r.error;
        }
        (good ? ok : bad)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), total);
  EXPECT_EQ(bad.load(), 0);
  // Server side: exactly one success per request, one admitted sequence each, no retries.
  EXPECT_EQ(server_->metrics().request_success.load() - success_before, uint64_t{total});
  EXPECT_EQ(server_->metrics().sequence_count.load() - sequences_before, uint64_t{total});
  EXPECT_EQ(server_->metrics().retries.load(), 0u);
}

// --- Servers with special settings ---------------------------------------------------------

namespace {

struct tally {
  int ok = 0;       ///< 200
  int refused = 0;  ///< the status and error_type expected
  int other = 0;    ///< anything else
};

// `clients` connections at once, each POSTing /predict `text` `per_client` times in a row.
tally predict_at_once(uint16_t port, int clients, int per_client, const std::string& text, unsigned status,
                      const std::string& error_type) {
  std::atomic<int> ok{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      http_connection conn("127.0.0.1", port);
      for (int i = 0; i < per_client; ++i) {
        auto r = conn.request("POST", "/predict", json{{"inputs", text}}.dump());
        if (r.status == 200) ok++;
        else if (r.status == status && json::parse(r.body)["error_type"] == error_type) refused++;
        else other++;
      }
    });
  for (auto& t : threads) t.join();
  return {ok.load(), refused.load(), other.load()};
}

}  // namespace

TEST(HttpServer, OverloadedQueueIs429) {
  test_server_options o;
  o.toy = true;
  o.toy_per_token = std::chrono::microseconds(200);  // slow backend
  o.batching = {.kind = policy_kind::dynamic_padded, .max_batch_size = 1,
                .max_queue_delay = 0ms, .max_queue_requests = 1, .max_inflight_batches = 1};
  test_server s(o);
  const auto t = predict_at_once(s.port(), 8, 5, long_text(40), 429, "Overloaded");
  EXPECT_GT(t.ok, 0);
  EXPECT_GT(t.refused, 0);
  EXPECT_EQ(t.other, 0);
  EXPECT_EQ(s.metrics().failures("Overloaded"), static_cast<uint64_t>(t.refused));
}

TEST(HttpServer, UnhealthyBackendIs503) {
  test_server_options o;
  o.toy = true;
  test_server s(o);
  http_connection conn("127.0.0.1", s.port());
  EXPECT_EQ(conn.request("GET", "/health").status, 200u);
  s.backend().set_healthy(false);
  EXPECT_EQ(conn.request("GET", "/health").status, 503u);
  EXPECT_EQ(conn.request("GET", "/v2/health/ready").status, 503u);
  auto r = conn.request("POST", "/predict", R"({"inputs": "hi"})");
  EXPECT_EQ(r.status, 503u);
  EXPECT_EQ(json::parse(r.body)["error_type"], "Unhealthy");
  s.backend().set_healthy(true);
  EXPECT_EQ(conn.request("POST", "/predict", R"({"inputs": "hi"})").status, 200u);
}

TEST(HttpServer, DeadlineInQueueIs504Timeout) {
  test_server_options o;
  o.toy = true;
  o.toy_per_token = std::chrono::microseconds(2000);  // ~100 ms a batch of 50 tokens
  o.batching = {.kind = policy_kind::dynamic_padded, .max_batch_size = 1,
                .max_queue_delay = 0ms, .max_inflight_batches = 1};
  o.api.request_timeout = 20ms;
  test_server s(o);
  const auto t = predict_at_once(s.port(), 4, 1, long_text(48), 504, "timeout");
  EXPECT_GE(t.ok, 1);
  EXPECT_GE(t.refused, 1);
  EXPECT_EQ(t.other, 0);
}

TEST(HttpServer, FailedBatchIsRetriedOnAnotherReplica) {
  test_server_options o;
  o.toy = true;
  o.replicas = 2;
  test_server s(o);
  s.backend(0).fail_next_batches(1000, status::peer_failed("injected"));
  http_connection conn("127.0.0.1", s.port());
  for (int i = 0; i < 20; ++i) {
    auto r = conn.request("POST", "/predict", json{{"inputs", "retry me " + std::to_string(i)}}.dump());
    EXPECT_EQ(r.status, 200u) << r.body;
  }
  // Both replicas failing: the error reaches the client as TEI's backend failure (424), never
  // silence and never a 500.
  s.backend(1).fail_next_batches(1000, status::internal("injected too"));
  auto r = conn.request("POST", "/predict", R"({"inputs": "doomed"})");
  EXPECT_EQ(r.status, 424u) << r.body;
  EXPECT_EQ(json::parse(r.body)["error_type"], "Backend");
}

TEST(HttpServer, StopAnswersEveryAcceptedRequest) {
  test_server_options o;
  o.toy = true;
  o.toy_per_token = std::chrono::microseconds(300);
  o.batching = {.kind = policy_kind::dynamic_padded, .max_batch_size = 4,
                .max_queue_delay = 0ms, .max_inflight_batches = 1};
  test_server s(o);
  std::atomic<int> answered{0}, refused{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < 12; ++c)
    threads.emplace_back([&] {
      http_connection conn("127.0.0.1", s.port());
      auto r = conn.request("POST", "/predict", json{{"inputs", long_text(30)}}.dump());
      if (r.status == 200) answered++;
      else refused++;
    });
  std::this_thread::sleep_for(20ms);  // requests read, most still queued
  s.stop();
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load() + refused.load(), 12);
  EXPECT_GE(answered.load(), 1);
  EXPECT_EQ(s.metrics().request_count.load(),
            s.metrics().request_success.load() + s.metrics().failures("Unhealthy"));
}

// A wrk run: many connections, keep-alive, no errors.
TEST(HttpServer, WrkDrivenRunHasNoErrors) {
  const char* wrk = "/usr/bin/wrk";
  if (!std::filesystem::exists(wrk)) {
    GTEST_FAIL() << "wrk is not installed (" << wrk << "); scripts/setup installs it (apt-get install wrk)";
  }
  test_server s;
  auto dir = std::filesystem::temp_directory_path() /
             ("tessera-wrk-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream lua(dir / "predict.lua");
    lua << "wrk.method = \"POST\"\n"
           "wrk.body = '{\"inputs\":\"the quick brown fox jumps over the lazy dog\"}'\n"
           "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
           "done = function(summary, latency, requests)\n"
           "  io.write(string.format(\"WRK requests=%d non2xx=%d errors=%d\\n\", summary.requests,\n"
           "    summary.errors.status, summary.errors.connect + summary.errors.read +\n"
           "    summary.errors.write + summary.errors.timeout))\n"
           "end\n";
  }
  std::string out = (dir / "wrk.out").string();
  std::string cmd = std::string(wrk) + " -t2 -c32 -d2s -s " + (dir / "predict.lua").string() +
                    " http://127.0.0.1:" + std::to_string(s.port()) + "/predict > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::cout << text;
  auto at = text.find("WRK requests=");
  ASSERT_NE(at, std::string::npos) << text;
  long requests = 0, non2xx = -1, errors = -1;
  std::sscanf(text.c_str() + at, "WRK requests=%ld non2xx=%ld errors=%ld", &requests, &non2xx, &errors);
  EXPECT_GT(requests, 100);
  EXPECT_EQ(non2xx, 0);
  EXPECT_EQ(errors, 0);
  // wrk counts only the answers that arrived within its window.
  EXPECT_GE(s.metrics().request_success.load(), static_cast<uint64_t>(requests));
  std::filesystem::remove_all(dir);
}

// Every batching policy end to end: answers equal the reference of each sequence alone
// (static batches carry dummy rows and pad to the model's 512; token-budget packs).
class HttpPolicies : public ::testing::TestWithParam<policy_kind> {};

TEST_P(HttpPolicies, AnswersEqualTheReference) {
  test_server_options o;
  o.batching = {.kind = GetParam(), .max_batch_size = 4, .token_budget = 0,
                .max_queue_delay = 2ms};
  test_server s(o);
  std::atomic<int> next{0}, ok{0};
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int c = 0; c < 6; ++c)
    threads.emplace_back([&] {
      http_connection conn("127.0.0.1", s.port());
      for (int i = next++; i < 60; i = next++) {
        std::string text = "policy check " + std::to_string(i) + " " + long_text(i * 3);
        auto r = conn.request("POST", "/predict", json{{"inputs", text}, {"raw_scores", true}}.dump());
        std::lock_guard lock(mu);
        ASSERT_EQ(r.status, 200u) << r.body;
        auto want = s.expected_logits(s.tok().encode(text, 0).value());
        for (auto& p : json::parse(r.body)) {
          int label = p["label"] == "LABEL_0" ? 0 : 1;
          EXPECT_NEAR(p["score"].get<float>(), want[label], logits_tolerance) << i;
        }
        ok++;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 60);
  if (GetParam() == policy_kind::static_padded) {
    EXPECT_GT(s.metrics().padding_tokens.load(), 0u);
  }
  if (GetParam() == policy_kind::token_budget) {
    EXPECT_EQ(s.metrics().padding_tokens.load(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, HttpPolicies,
                         ::testing::Values(policy_kind::static_padded, policy_kind::dynamic_padded,
                                           policy_kind::token_budget),
                         [](const auto& info) {
                           std::string n(policy_kind_name(info.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

namespace {

// A backend that holds every batch until released: a stalled tile group.
class stalled_backend : public backends::backend {
 public:
  backends::backend_info info() const override { return {.name = "stalled", .kind = "tiles"}; }
  void submit(backends::batch_request req, std::function<void(backends::batch_result)> done) override {
    std::lock_guard lock(mu_);
    held_.emplace_back(std::move(req), std::move(done));
  }
  int64_t outstanding_tokens() const override { return 0; }
  bool healthy() const override { return true; }
  void release() {
    std::vector<std::pair<backends::batch_request, std::function<void(backends::batch_result)>>> h;
    {
      std::lock_guard lock(mu_);
      h.swap(held_);
    }
    for (auto& [req, done] : h) {
      backends::batch_result r;
      r.batch_id = req.batch_id;
      r.num_labels = 2;
      r.logits.assign(req.sequences.size() * 2, 0.0f);
      done(std::move(r));
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<backends::batch_request, std::function<void(backends::batch_result)>>> held_;
};

}  // namespace

TEST(HttpServer, StalledBackendIsAnswered504AfterDeadlineAndGrace) {
  serving_metrics metrics;
  router r(routing_config{}, default_clock(), &metrics);
  auto stalled = std::make_shared<stalled_backend>();
  ASSERT_TRUE(r.add_backend(stalled, {.kind = policy_kind::dynamic_padded, .max_queue_delay = 0ms}).ok());
  r.start();
  server_config sc;
  sc.port = 0;
  sc.api.request_timeout = 50ms;
  sc.api.answer_grace = 50ms;
  http_server server(sc, r, make_toy_tokenizer(), model_info{.model_id = "toy"}, metrics);
  ASSERT_TRUE(server.start().ok());
  http_connection conn("127.0.0.1", server.port());
  auto t0 = steady::now();
  auto resp = conn.request("POST", "/predict", R"({"inputs": "anyone there?"})");
  double waited = to_seconds(steady::now() - t0);
  EXPECT_EQ(resp.status, 504u) << resp.body;
  EXPECT_EQ(json::parse(resp.body)["error_type"], "timeout");
  EXPECT_GE(waited, 0.09);
  EXPECT_LT(waited, 5.0);
  // The late answer is dropped; the connection keeps serving.
  stalled->release();
  EXPECT_EQ(conn.request("GET", "/health").status, 200u);
  server.stop();
  r.stop();
}
