// text-embeddings-inference compatibility, over real sockets against a real server:
// TEI v1.7.1's reading of "inputs" (single, pair, batch of singles, batch of pairs, and what it
// refuses), raw_scores (softmax, sigmoid for one label), truncate and truncation_direction, the
// routes TEI serves for a classifier (POST / and /invocations, GET / and /ping) and a re-ranker
// (/rerank), the answer shape
// Hugging Face's clients read from POST /, /tokenize's token objects, /info, timing headers, and
// failures counted only for inference requests.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/test/http_client.hpp"
#include "test_server.hpp"

using namespace tessera;
using namespace tessera::serving;
using namespace tessera::test_support;
using namespace tessera::serving::test_support;
using json = nlohmann::json;

namespace {

class Tei : public server_suite {
 protected:
  static void SetUpTestSuite() {
    start_server({.api = {.max_client_batch_size = 8}});
  }

  /// The raw logits in a predict answer for one input, by label index.
  static std::vector<float> by_label(const json& predictions) {
    std::vector<float> out(predictions.size());
    for (const auto& p : predictions) {
      const std::string label = p["label"];
      out.at(std::stoul(label.substr(label.rfind('_') + 1))) = p["score"].get<float>();
    }
    return out;
  }
  static void expect_logits(const json& predictions, const backends::sequence_input& seq, const std::string& what) {
    auto want = server_->expected_logits(seq);
    auto got = by_label(predictions);
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], logits_tolerance) << what << " label " << i;
  }
  static backends::sequence_input single(const std::string& t) { return server_->tok().encode(t, 0).value(); }
  static backends::sequence_input pair(const std::string& a, const std::string& b) {
    return server_->tok().encode_pair(a, b, 0).value();
  }
};

std::string words(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "w" + std::to_string(i % 50) + " ";
  return s;
}

}  // namespace

// The four accepted forms, each answered as TEI answers it, each equal to the reference forward
// of the sequences TEI would build.
TEST_F(Tei, InputFormsAreReadAsTeiReadsThem) {
  struct form {
    std::string inputs;
    bool batch;
    std::vector<backends::sequence_input> seqs;
  };
  const std::vector<form> forms = {
      {R"("one text")", false, {single("one text")}},
      {R"(["one text"])", false, {single("one text")}},                           // a list of one string: one input
      {R"(["question", "answer"])", false, {pair("question", "answer")}},         // two strings: ONE pair
      {R"([["first"], ["second"]])", true, {single("first"), single("second")}},  // a batch of singles
      {R"([["q1", "a1"], ["q2", "a2"]])", true, {pair("q1", "a1"), pair("q2", "a2")}},
      {R"([["alone"], ["q", "a"]])", true, {single("alone"), pair("q", "a")}},    // mixed
      {R"([["", "x"]])", true, {pair("", "x")}},                                 // half-empty pair is fine
  };
  for (const auto& f : forms) {
    auto r = post("/predict", R"({"raw_scores": true, "inputs": )" + f.inputs + "}");
    ASSERT_EQ(r.status, 200u) << f.inputs << " " << r.body;
    auto j = json::parse(r.body);
    ASSERT_TRUE(j.is_array()) << f.inputs;
    if (!f.batch) {
      ASSERT_TRUE(j[0].is_object()) << f.inputs << ": a single input answers a flat list " << r.body;
      expect_logits(j, f.seqs[0], f.inputs);
    } else {
      ASSERT_EQ(j.size(), f.seqs.size()) << f.inputs;
      for (size_t i = 0; i < f.seqs.size(); ++i) expect_logits(j[i], f.seqs[i], f.inputs + " #" + std::to_string(i));
    }
  }
}

TEST_F(Tei, RefusesWhatTeiRefuses) {
  struct refusal {
    std::string body;
    unsigned status;
  };
  const std::vector<refusal> refusals = {
      {R"({"inputs": []})", 422},
      {R"({"inputs": ["a", "b", "c"]})", 422},          // more than a pair
      {R"({"inputs": [["a", "b", "c"]]})", 422},
      {R"({"inputs": [[]]})", 422},
      {R"({"inputs": [["a"], "b"]})", 422},             // a batch mixing lists and strings
      {R"({"inputs": ["a", ["b"]]})", 422},
      {R"({"inputs": [1]})", 422},
      {R"({"inputs": [[1]]})", 422},
      {R"({"inputs": 7})", 422},
      {R"({"inputs": null})", 422},
      {R"({"inputs": {"text": "a"}})", 422},
      {R"({"text": "a"})", 422},                        // no inputs
      {R"(["a"])", 422},                                // not an object
      {R"({"inputs": "a", "truncate": "yes"})", 422},
      {R"({"inputs": "a", "raw_scores": null})", 422},  // TEI's raw_scores is a bool, not an option
      {R"({"inputs": "a", "truncation_direction": "left"})", 422},  // TEI spells it Left
      {R"({"inputs": "a", "truncation_direction": null})", 422},
      {R"({"inputs": "a", "parameters": {}})", 422},   // /predict is TEI's: no Hugging Face parameters
      {R"({"inputs": "a", "normalize": true})", 422},  // a field tessera does not act on
      {R"({"inputs": ""})", 413},                       // TEI: "`inputs` cannot be empty" (Validation)
      {R"({"inputs": [["", ""]]})", 413},
  };
  for (const auto& x : refusals) {
    auto r = post("/predict", x.body);
    EXPECT_EQ(r.status, x.status) << x.body << " -> " << r.body;
    auto j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["error_type"], "Validation") << x.body;
    EXPECT_FALSE(j["error"].get<std::string>().empty());
  }
  // A batch over max_client_batch_size: TEI's 413 Validation, before any tokenization.
  json many = json::array();
  for (int i = 0; i < 9; ++i) many.push_back({"t"});
  auto r = post("/predict", json{{"inputs", many}}.dump());
  EXPECT_EQ(r.status, 413u);
  EXPECT_NE(r.body.find("batch size 9 > maximum allowed batch size 8"), std::string::npos) << r.body;
}

TEST_F(Tei, ScoresAreSoftmaxSortedDescendingUnlessRaw) {
  auto r = post("/predict", R"({"inputs": "a plain text"})");
  ASSERT_EQ(r.status, 200u);
  auto j = json::parse(r.body);
  auto logits = server_->expected_logits(single("a plain text"));
  const double m = std::max(logits[0], logits[1]);
  const double e0 = std::exp(logits[0] - m), e1 = std::exp(logits[1] - m);
  auto got = by_label(j);
  EXPECT_NEAR(got[0], e0 / (e0 + e1), 1e-4);
  EXPECT_NEAR(got[1], e1 / (e0 + e1), 1e-4);
  EXPECT_GE(j[0]["score"].get<float>(), j[1]["score"].get<float>());
}

TEST_F(Tei, TruncationDirectionCutsTheSideAsked) {
  const std::string text = words(700);
  const int32_t max_len = server_->info().max_input_length;
  auto right = post("/predict", json{{"inputs", text}, {"truncate", true}, {"raw_scores", true}}.dump());
  auto left = post("/predict", json{{"inputs", text}, {"truncate", true}, {"raw_scores", true},
                                    {"truncation_direction", "Left"}}.dump());
  ASSERT_EQ(right.status, 200u) << right.body;
  ASSERT_EQ(left.status, 200u) << left.body;
  auto want_right = server_->tok().encode(text, max_len, truncation_side::right).value();
  auto want_left = server_->tok().encode(text, max_len, truncation_side::left).value();
  ASSERT_EQ(want_left.token_ids.size(), static_cast<size_t>(max_len));
  EXPECT_NE(want_left.token_ids, want_right.token_ids);
  expect_logits(json::parse(right.body), want_right, "Right");
  expect_logits(json::parse(left.body), want_left, "Left");
  // Left keeps the end of the text: its last word piece before [SEP] is the text's last word's.
  auto all = server_->tok().encode(text, 0).value();
  EXPECT_EQ(want_left.token_ids[max_len - 2], all.token_ids[all.token_ids.size() - 2]);
  // "truncate": null means the server's default (auto_truncate off here): too long is 413.
  EXPECT_EQ(post("/predict", json{{"inputs", text}, {"truncate", nullptr}}.dump()).status, 413u);
  // A pair is cut longest first: the long text gives way, the short one stays whole.
  auto p = post("/predict", json{{"inputs", {"short question", text}}, {"truncate", true}, {"raw_scores", true}}.dump());
  ASSERT_EQ(p.status, 200u) << p.body;
  auto want_pair = server_->tok().encode_pair("short question", text, max_len).value();
  expect_logits(json::parse(p.body), want_pair, "pair");
}

// TEI serves a classifier at POST / and POST /invocations (SageMaker) as well, and health at
// GET / and GET /ping. POST / answers a single input in the Inference API's shape (a list holding
// one list), which Hugging Face's clients read; /predict and /invocations stay flat.
TEST_F(Tei, RootAndInvocationsRoutes) {
  const std::string body = R"({"inputs": "route me", "raw_scores": true})";
  auto flat = json::parse(post("/predict", body).body);
  auto inv = post("/invocations", body);
  ASSERT_EQ(inv.status, 200u);
  EXPECT_EQ(json::parse(inv.body), flat);
  auto root = post("/", body);
  ASSERT_EQ(root.status, 200u) << root.body;
  EXPECT_EQ(json::parse(root.body), json::array({flat}));
  // A batch has the same shape everywhere.
  const std::string batch = R"({"inputs": [["a"], ["b"]]})";
  EXPECT_EQ(json::parse(post("/", batch).body), json::parse(post("/predict", batch).body));
  for (const char* path : {"/", "/ping", "/health"}) EXPECT_EQ(get(path).status, 200u) << path;
  EXPECT_EQ(conn_.request("PUT", "/").status, 405u);
  // TEI's routes for embedding models answer a classifier with TEI's 424 (embed_http_test.cpp
  // serves an embedding model); its helpers are not served: an error, never another answer.
  for (const char* path : {"/embed", "/embed_all", "/embed_sparse", "/similarity", "/v1/embeddings"}) {
    auto r = post(path, R"({"inputs": "x", "ids": [1]})");
    EXPECT_EQ(r.status, 424u) << path;
    EXPECT_NE(r.body.find("Model is not an embedding model"), std::string::npos) << path << ": " << r.body;
  }
  for (const char* path : {"/embeddings", "/decode", "/vertex"}) {
    auto r = post(path, R"({"inputs": "x", "ids": [1]})");
    EXPECT_EQ(r.status, 404u) << path;
    EXPECT_EQ(json::parse(r.body)["error_type"], "not_found") << path;
  }
  // /rerank is a re-ranker's (one label): a classifier answers TEI's 424, counted as TEI counts it.
  const uint64_t model_type_failures = server_->metrics().tei.request_failure.get("model_type");
  auto rr = post("/rerank", R"({"query": "q", "texts": ["a", "b"]})");
  EXPECT_EQ(rr.status, 424u) << rr.body;
  EXPECT_EQ(json::parse(rr.body)["error_type"], "Backend");
  EXPECT_EQ(json::parse(rr.body)["error"], "model is not a re-ranker model");
  EXPECT_EQ(server_->metrics().tei.request_failure.get("model_type"), model_type_failures + 1);
}

// Hugging Face's text-classification parameters are honoured on POST /: top_k and
// function_to_apply; anything else is refused rather than ignored.
TEST_F(Tei, HuggingFaceParametersOnRoot) {
  auto top1 = post("/", R"({"inputs": "pick one", "parameters": {"top_k": 1}})");
  ASSERT_EQ(top1.status, 200u) << top1.body;
  auto j = json::parse(top1.body);
  ASSERT_EQ(j[0].size(), 1u);
  auto all = json::parse(post("/", R"({"inputs": "pick one"})").body);
  EXPECT_EQ(j[0][0], all[0][0]);
  auto none = post("/", R"({"inputs": "pick one", "parameters": {"function_to_apply": "none"}})");
  ASSERT_EQ(none.status, 200u);
  expect_logits(json::parse(none.body)[0], single("pick one"), "function_to_apply none");
  auto sig = json::parse(post("/", R"({"inputs": "pick one", "parameters": {"function_to_apply": "sigmoid"}})").body);
  auto logits = server_->expected_logits(single("pick one"));
  auto got = by_label(sig[0]);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got[i], 1.0 / (1.0 + std::exp(-logits[i])), 1e-4);
  for (const char* bad : {R"({"inputs": "x", "parameters": {"top_k": 0}})",
                          R"({"inputs": "x", "parameters": {"function_to_apply": "relu"}})",
                          R"({"inputs": "x", "parameters": {"temperature": 1}})",
                          R"({"inputs": "x", "parameters": 3})",
                          R"({"inputs": "x", "raw_scores": true, "parameters": {"function_to_apply": "softmax"}})"})
    EXPECT_EQ(post("/", bad).status, 422u) << bad;
}

TEST_F(Tei, TimingHeaders) {
  const std::string text = "héllo wörld";  // 11 characters, 13 bytes
  auto r = post("/predict", json{{"inputs", text}}.dump());
  ASSERT_EQ(r.status, 200u);
  for (const char* h : {"x-compute-time", "x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time"}) {
    const std::string v = r.header(h);
    ASSERT_FALSE(v.empty()) << h;
    EXPECT_GE(std::stoll(v), 0) << h;
  }
  EXPECT_EQ(r.header("x-compute-characters"), "11");
  EXPECT_EQ(r.header("x-compute-tokens"), std::to_string(single(text).token_ids.size()));
  auto p = post("/predict", R"({"inputs": ["ab", "cde"]})");
  EXPECT_EQ(p.header("x-compute-characters"), "5");
}

TEST_F(Tei, TokenizeOffsetsAreBytesOfTheInput) {
  const std::string text = "Café [SEP] naïve!";
  auto r = post("/tokenize", json{{"inputs", text}}.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  auto toks = json::parse(r.body).at(0);
  ASSERT_GE(toks.size(), 4u);
  EXPECT_EQ(toks.front(), json({{"id", server_->tok().cls_id()}, {"text", "[CLS]"}, {"special", true},
                                {"start", nullptr}, {"stop", nullptr}}));
  EXPECT_EQ(toks.back()["text"], "[SEP]");
  EXPECT_EQ(toks.back()["special"], true);
  size_t covered_sep = 0;
  for (size_t i = 1; i + 1 < toks.size(); ++i) {
    const auto& t = toks[i];
    ASSERT_EQ(t["special"], false) << t;
    const size_t start = t["start"], stop = t["stop"];
    ASSERT_LE(stop, text.size());
    EXPECT_EQ(t["text"], text.substr(start, stop - start)) << t;
    if (t["text"] == "[SEP]") covered_sep++;  // typed in the text: a token of it, not added
  }
  EXPECT_EQ(covered_sep, 1u);
  // The ids are the ones /predict feeds the model.
  std::vector<int32_t> ids;
  for (auto& t : toks) ids.push_back(t["id"]);
  EXPECT_EQ(ids, single(text).token_ids);
  // Refusals: TEI's tokenize takes no pairs and no truncation.
  EXPECT_EQ(post("/tokenize", R"({"inputs": [["a", "b"]]})").status, 422u);
  EXPECT_EQ(post("/tokenize", R"({"inputs": "a", "truncate": true})").status, 422u);
  EXPECT_EQ(post("/tokenize", R"({"inputs": ""})").status, 413u);
}

TEST_F(Tei, FailuresCountOnlyInferenceRequests) {
  auto& m = server_->metrics();
  for (int i = 0; i < 5; ++i) {
    get("/nowhere");
    conn_.request("DELETE", "/predict");
    get("/v2/models/nope");
  }
  post("/predict", R"({"inputs": ""})");
  uint64_t failures = 0;
  for (const char* kind : {"Validation", "Tokenizer", "Backend", "Overloaded", "Unhealthy", "timeout",
                           "bad_request", "not_found", "method_not_allowed", "internal"})
    failures += m.failures(kind);
  EXPECT_EQ(m.failures("not_found"), 0u);
  EXPECT_GE(m.http_errors.get("not_found"), 10u);  // counted apart
  EXPECT_GE(m.http_errors.get("method_not_allowed"), 5u);
  EXPECT_EQ(m.failures("method_not_allowed"), 0u);
  EXPECT_LE(failures + m.request_success.load(), m.request_count.load());
}

// A one-label model: TEI calls it a reranker in /info, and scores it with a sigmoid (a softmax
// over one label would always be 1.0).
TEST(TeiOneLabel, SigmoidAndReranker) {
  test_server_options o;
  o.toy = true;
  o.toy_labels = 1;
  test_server s(o);
  http_connection conn("127.0.0.1", s.port());
  auto info = json::parse(conn.request("GET", "/info").body);
  ASSERT_TRUE(info["model_type"].contains("reranker")) << info;
  for (const char* text : {"first text", "another one", "a third"}) {
    auto logit = s.expected_logits(s.tok().encode(text, 0).value())[0];
    auto r = conn.request("POST", "/predict", json{{"inputs", text}}.dump());
    ASSERT_EQ(r.status, 200u) << r.body;
    auto j = json::parse(r.body);
    ASSERT_EQ(j.size(), 1u);
    EXPECT_NEAR(j[0]["score"].get<double>(), 1.0 / (1.0 + std::exp(-logit)), 1e-5) << text;
    EXPECT_LT(j[0]["score"].get<double>(), 1.0);
    auto raw = json::parse(conn.request("POST", "/predict", json{{"inputs", text}, {"raw_scores", true}}.dump()).body);
    EXPECT_NEAR(raw[0]["score"].get<double>(), logit, 1e-5);
  }
}

// A one-label model reranks as TEI's re-ranker: /rerank, and POST / and /invocations (TEI's
// default routes for a re-ranker) take {"query", "texts"}; each text is scored as the pair
// (query, text), sorted highest first; POST / with "inputs" still answers Hugging Face's clients.
TEST(TeiOneLabel, RerankAsTei) {
  test_server_options o;
  o.toy = true;
  o.toy_labels = 1;
  o.api.max_client_batch_size = 4;
  test_server s(o);
  http_connection conn("127.0.0.1", s.port());
  const std::string query = "which tile?";
  const std::vector<std::string> texts = {"the first tile", "tile two answers", "a third text", "tile"};
  std::vector<double> logits;
  for (const auto& t : texts) logits.push_back(s.expected_logits(s.tok().encode_pair(query, t, 0).value())[0]);
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const json body{{"query", query}, {"texts", texts}};
  auto r = conn.request("POST", "/rerank", body.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  auto ranks = json::parse(r.body);
  ASSERT_EQ(ranks.size(), texts.size()) << r.body;
  std::vector<bool> seen(texts.size());
  for (size_t k = 0; k < ranks.size(); ++k) {
    const size_t i = ranks[k]["index"];
    ASSERT_LT(i, texts.size());
    seen[i] = true;
    EXPECT_NEAR(ranks[k]["score"].get<double>(), sigmoid(logits[i]), 1e-5) << texts[i];
    EXPECT_FALSE(ranks[k].contains("text"));
    if (k > 0) {
      EXPECT_GE(ranks[k - 1]["score"].get<double>(), ranks[k]["score"].get<double>());
    }
  }
  EXPECT_EQ(seen, std::vector<bool>(texts.size(), true));
  // TEI's timing headers: the query's characters count once per text.
  size_t chars = texts.size() * query.size();
  for (const auto& t : texts) chars += t.size();
  EXPECT_EQ(r.header("x-compute-characters"), std::to_string(chars));
  EXPECT_FALSE(r.header("x-inference-time").empty());
  // return_text, raw_scores.
  auto with_text = json::parse(
      conn.request("POST", "/rerank", json{{"query", query}, {"texts", texts}, {"return_text", true}, {"raw_scores", true}}.dump())
          .body);
  ASSERT_EQ(with_text.size(), texts.size());
  for (const auto& rank : with_text) {
    const size_t i = rank["index"];
    EXPECT_EQ(rank["text"], texts[i]);
    EXPECT_NEAR(rank["score"].get<double>(), logits[i], 1e-5);
  }
  // TEI's default routes for a re-ranker answer the same; POST / with "inputs" predicts.
  for (const char* path : {"/", "/invocations"}) {
    auto again = conn.request("POST", path, body.dump());
    ASSERT_EQ(again.status, 200u) << path << ": " << again.body;
    EXPECT_EQ(json::parse(again.body), ranks) << path;
  }
  auto hf = conn.request("POST", "/", json{{"inputs", texts[0]}}.dump());
  ASSERT_EQ(hf.status, 200u) << hf.body;
  ASSERT_EQ(json::parse(hf.body).size(), 1u);
  EXPECT_EQ(json::parse(hf.body)[0].size(), 1u);
  EXPECT_EQ(conn.request("POST", "/predict", json{{"inputs", texts[0]}}.dump()).status, 200u);
  // What TEI refuses: no texts (400 Empty), more texts than --max-client-batch-size (413), and
  // what tessera refuses rather than ignore (422).
  struct refused {
    json body;
    unsigned status;
    const char* type;
  };
  for (const auto& c : {refused{{{"query", "q"}, {"texts", json::array()}}, 400, "Empty"},
                        refused{{{"query", "q"}, {"texts", {"a", "b", "c", "d", "e"}}}, 413, "Validation"},
                        refused{{{"query", "q"}, {"texts", {"a", ""}}}, 200, ""},  // a pair with one empty text is a pair
                        refused{{{"query", ""}, {"texts", {""}}}, 413, "Validation"},
                        refused{{{"texts", {"a"}}}, 422, "Validation"},
                        refused{{{"query", "q"}, {"texts", "a"}}, 422, "Validation"},
                        refused{{{"query", "q"}, {"texts", {"a", 1}}}, 422, "Validation"},
                        refused{{{"query", "q"}, {"texts", {"a"}}, {"top_n", 1}}, 422, "Validation"},
                        refused{{{"query", "q"}, {"texts", {"a"}}, {"truncation_direction", "left"}}, 422, "Validation"},
                        refused{{{"query", "q"}, {"texts", {"a"}}, {"return_text", "yes"}}, 422, "Validation"}}) {
    auto e = conn.request("POST", "/rerank", c.body.dump());
    EXPECT_EQ(e.status, c.status) << c.body << " -> " << e.body;
    if (c.status != 200) {
      EXPECT_EQ(json::parse(e.body)["error_type"], c.type) << c.body;
    }
  }
  EXPECT_EQ(conn.request("GET", "/rerank").status, 405u);
  EXPECT_EQ(conn.request("POST", "/rerank", "{not json").status, 400u);
}
