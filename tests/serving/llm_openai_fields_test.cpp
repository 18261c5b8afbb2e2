// OpenAI's decoder fields over HTTP on a real tessera-serve process (--model toy-llm, whose logits
// toy_llm_logits() computes without a cache): logprobs and echo (completions' legacy shape, chat's
// content[]), max_tokens 0 scoring, n, best_of, seed across n, the penalties, logit_bias, stop,
// include_usage, streamed and not; log-probabilities checked against a float64 log-softmax of the
// cache-free logits (before any penalty); hostile values refused in OpenAI's error shape with
// the KV blocks back to 0. The lm-evaluation-harness sequence on a seeded checkpoint against the
// float64 goldens of models/scripts/make_logprob_goldens.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <nlohmann/json.hpp>
#include <thread>

#include "../models/byte_vocab.hpp"
#include "../models/util.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"
#include "tessera/test/json_post.hpp"
#include "tessera/test/sse_client.hpp"
#include "tessera/toys/toy_llm.hpp"

namespace tessera::serving {
using namespace tessera::toys;
namespace {

using namespace tessera::test_support;
using json = nlohmann::json;

constexpr double kTol = 1e-4;  // float32 logits' log-softmax against float64

std::vector<int32_t> byte_prompt(const std::string& text) {
  std::vector<int32_t> ids{toy_llm_bos};
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

/// float64 log-softmax of the toy decoder's cache-free logits after `prefix`.
std::vector<double> log_softmax(const std::vector<int32_t>& prefix) {
  const auto l = toy_llm_logits(prefix);
  double mx = -1e300;
  for (float x : l) mx = std::max(mx, static_cast<double>(x));
  double s = 0;
  for (float x : l) s += std::exp(static_cast<double>(x) - mx);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = static_cast<double>(l[i]) - mx - std::log(s);
  return out;
}

/// Greedy tokens with the penalties and bias applied to the cache-free logits as OpenAI and vLLM
/// define them (repetition over prompt and output, presence/frequency over the output).
std::vector<int32_t> greedy_penalised(std::vector<int32_t> ids, int n, double presence, double frequency,
                                      double repetition, const std::map<int32_t, float>& bias) {
  const size_t prompt = ids.size();
  std::vector<int32_t> out;
  for (int k = 0; k < n; ++k) {
    auto l = toy_llm_logits(ids);
    std::map<int32_t, int> count;
    for (size_t i = prompt; i < ids.size(); ++i) ++count[ids[i]];
    std::vector<bool> seen(l.size(), false);
    for (int32_t t : ids) seen[static_cast<size_t>(t)] = true;
    for (size_t i = 0; i < l.size(); ++i) {
      double x = l[i];
      if (seen[i] && repetition != 1) x = x > 0 ? x / repetition : x * repetition;
      auto c = count.find(static_cast<int32_t>(i));
      if (c != count.end()) x -= c->second * frequency + presence;
      auto b = bias.find(static_cast<int32_t>(i));
      if (b != bias.end()) x += b->second;
      l[i] = static_cast<float>(x);
    }
    const auto t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(t);
    ids.push_back(t);
  }
  return out;
}

using models::testing::byte_char;  // GPT-2's bytes_to_unicode (tests/models/byte_vocab.hpp)

/// vocab.json + merges.txt of `vocab` tokens: the 256 byte characters, then placeholders (the
/// goldens' prompts are token ids; the server needs a tokenizer to start).
void write_byte_vocab(const std::string& dir, int vocab) {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[byte_char(b)] = b;
  for (int i = 256; i < vocab; ++i) v["<|t" + std::to_string(i) + "|>"] = i;
  std::ofstream(dir + "/vocab.json") << v.dump();
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
}

double metric(const std::string& text, const std::string& name) { return metric_value(text, name); }

struct llm_server {
  served_process p;
  explicit llm_server(std::vector<std::string> args) : p(args) {}
  llm_server() : llm_server({bin("tessera-serve"), "--model", "toy-llm", "--port", "0"}) {}
  uint16_t port() const { return p.port(); }
  json post(const std::string& path, const json& body, unsigned* status = nullptr) {
    return post_json(port(), path, body, status);
  }
  /// tessera_llm_kv_blocks_used once it settles at 0 (bounded: 10 s), else its last value.
  double kv_used_settled() {
    double v = -1;
    for (int i = 0; i < 5000; ++i) {
      http_connection c("127.0.0.1", port());
      v = metric(c.request("GET", "/metrics").body, "tessera_llm_kv_blocks_used");
      if (v == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return v;
  }
};

/// A streamed answer gathered per choice index.
struct streamed {
  std::map<int, std::string> text, finish;
  std::map<int, json> tokens, token_logprobs, content;
  json usage;
  bool done = false;
  int chunks = 0;
};

streamed read_stream(uint16_t port, const std::string& path, const json& body) {
  sse_client sse(port, path, body.dump());
  streamed s;
  for (std::string e = sse.next(); !e.empty(); e = sse.next()) {
    if (e == "[DONE]") {
      s.done = true;
      break;
    }
    json j = json::parse(e);
    ++s.chunks;
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
    for (const auto& c : j["choices"]) {
      const int i = c["index"].get<int>();
      if (c.contains("text")) s.text[i] += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].contains("content")) s.text[i] += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) s.finish[i] = c["finish_reason"];
      if (c["logprobs"].is_object()) {
        if (c["logprobs"].contains("tokens")) {
          for (const auto& t : c["logprobs"]["tokens"]) s.tokens[i].push_back(t);
          for (const auto& t : c["logprobs"]["token_logprobs"]) s.token_logprobs[i].push_back(t);
        }
        if (c["logprobs"].contains("content"))
          for (const auto& t : c["logprobs"]["content"]) s.content[i].push_back(t);
      }
    }
  }
  return s;
}

// echo + logprobs: every token (prompt and generated) against the float64 log-softmax, the
// first prompt token null, alternatives sorted and as many as asked, text_offset in bytes.
TEST(OpenaiFields, CompletionsLogprobsAndEchoMatchTheFloat64LogSoftmax) {
  llm_server s;
  ASSERT_NE(s.port(), 0) << s.p.line();
  const auto prompt = byte_prompt("Once upon");
  const auto gen = toy_llm_generate(prompt, 6);
  unsigned st = 0;
  json r = s.post("/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 6}, {"temperature", 0},
                                      {"echo", true}, {"logprobs", 3}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  const auto tok = make_byte_tokenizer();
  const json c = r["choices"][0];  // copies: r is reused below
  EXPECT_EQ(c["text"], "Once upon" + tok->decode(gen));
  const json lp = c["logprobs"];
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  ASSERT_EQ(lp["tokens"].size(), all.size()) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  double worst = 0;
  size_t offset = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], offset) << i;
    offset += tok->token_bytes(all[i]).size();
    if (i == 0) continue;
    const auto ref = log_softmax({all.begin(), all.begin() + static_cast<long>(i)});
    worst = std::max(worst, std::fabs(lp["token_logprobs"][i].get<double>() - ref[static_cast<size_t>(all[i])]));
    EXPECT_EQ(lp["tokens"][i], tok->decode({all[i]}));
    ASSERT_EQ(lp["top_logprobs"][i].size(), 3u) << i;
    std::vector<double> sorted = ref;
    std::sort(sorted.rbegin(), sorted.rend());
    double best = -1e300;
    for (const auto& [t, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(best, sorted[0], kTol) << i;
  }
  EXPECT_LT(worst, kTol);
  std::printf("echo + logprobs: %zu tokens, worst |logprob - float64| %.2e\n", all.size(), worst);
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
  // Scoring only: max_tokens 0 with echo, no token generated; logprobs 0 has no alternatives.
  r = s.post("/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], "Once upon");
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), prompt.size());
  EXPECT_EQ(r["choices"][0]["logprobs"]["top_logprobs"][1].size(), 0u);
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  // Without echo only the generated tokens, offsets from the completion's start.
  r = s.post("/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 1}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  ASSERT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), 4u);
  EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"][0], 0);
  EXPECT_NEAR(r["choices"][0]["logprobs"]["token_logprobs"][0].get<double>(),
              log_softmax(prompt)[static_cast<size_t>(gen[0])], kTol);
  // Streamed: the same tokens and log-probabilities, piece by piece.
  auto sv = read_stream(s.port(), "/v1/completions",
                        {{"prompt", "Once upon"}, {"max_tokens", 6}, {"temperature", 0}, {"echo", true},
                         {"logprobs", 3}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_TRUE(sv.done);
  EXPECT_EQ(sv.text[0], "Once upon" + tok->decode(gen));
  EXPECT_EQ(sv.tokens[0], lp["tokens"]);
  ASSERT_EQ(sv.token_logprobs[0].size(), all.size());
  for (size_t i = 1; i < all.size(); ++i)
    EXPECT_NEAR(sv.token_logprobs[0][i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-9);
  EXPECT_EQ(sv.usage["completion_tokens"], 6);
  EXPECT_EQ(s.kv_used_settled(), 0);
  EXPECT_EQ(s.p.stop(), 0);
}

// n choices with a seed are n lone requests with seeds seed + i; best_of keeps the n with the
// highest cumulative log-probability; streamed the same; usage counts every choice.
TEST(OpenaiFields, NChoicesAreLoneRequestsWithDerivedSeedsAndBestOfKeepsTheBest) {
  llm_server s;
  ASSERT_NE(s.port(), 0) << s.p.line();
  unsigned st = 0;
  const json base{{"prompt", "The cat"}, {"max_tokens", 8}, {"temperature", 1.0}, {"logprobs", 0}};
  auto lone = [&](int64_t seed) {
    json b = base;
    b["seed"] = seed;
    json r = s.post("/v1/completions", b, &st);
    EXPECT_EQ(st, 200u) << r.dump();
    return r["choices"][0];
  };
  json b = base;
  b["n"] = 3;
  b["seed"] = 41;
  json r = s.post("/v1/completions", b, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u);
  std::vector<double> sums;
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    const json one = lone(41 + i);
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], one["text"]) << "choice " << i;
    EXPECT_EQ(r["choices"][i]["logprobs"]["tokens"], one["logprobs"]["tokens"]);
    distinct.insert(one["text"].get<std::string>());
  }
  EXPECT_GE(distinct.size(), 2u);  // sampled: the seeds differ
  EXPECT_EQ(r["usage"]["completion_tokens"], 24);
  // Streamed n = 3: the same choices by index.
  json sb = b;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  auto sv = read_stream(s.port(), "/v1/completions", sb);
  EXPECT_TRUE(sv.done);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sv.text[i], r["choices"][i]["text"]) << i;
    EXPECT_EQ(sv.finish[i], "length");
  }
  EXPECT_EQ(sv.usage["completion_tokens"], 24);
  // best_of 5, n 2: the two of seeds 7..11 with the highest cumulative log-probability.
  std::vector<std::pair<double, std::string>> ranked;
  for (int i = 0; i < 5; ++i) {
    const json one = lone(7 + i);
    double sum = 0;
    for (const auto& v : one["logprobs"]["token_logprobs"]) sum += v.get<double>();
    ranked.emplace_back(sum, one["text"].get<std::string>());
  }
  std::vector<size_t> order{0, 1, 2, 3, 4};
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return ranked[x].first > ranked[y].first; });
  std::vector<size_t> top{order[0], order[1]};
  std::sort(top.begin(), top.end());
  r = s.post("/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 8}, {"temperature", 1.0}, {"n", 2},
                                 {"best_of", 5}, {"seed", 7}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["text"], ranked[top[0]].second);
  EXPECT_EQ(r["choices"][1]["text"], ranked[top[1]].second);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());  // ranked by them, not asked to show them
  EXPECT_EQ(r["usage"]["completion_tokens"], 40);      // every candidate generated is billed
  // Chat with n.
  r = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 5},
                                      {"n", 2}, {"seed", 3}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(s.kv_used_settled(), 0);
  EXPECT_EQ(s.p.stop(), 0);
}

// Chat: logprobs true + top_logprobs, content[] with token, logprob, bytes and alternatives.
TEST(OpenaiFields, ChatLogprobsStreamedAndNot) {
  llm_server s;
  ASSERT_NE(s.port(), 0) << s.p.line();
  unsigned st = 0;
  const json body{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 5}, {"temperature", 0},
                  {"logprobs", true}, {"top_logprobs", 2}};
  json r = s.post("/v1/chat/completions", body, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  const auto prompt = byte_prompt("User: Hi\nAssistant:");
  const auto gen = toy_llm_generate(prompt, 5);
  const json content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u) << r.dump();
  auto ids = prompt;
  for (size_t i = 0; i < 5; ++i) {
    const auto ref = log_softmax(ids);
    EXPECT_EQ(content[i]["token"], std::string(1, static_cast<char>(gen[i])));
    EXPECT_EQ(content[i]["bytes"], json::array({gen[i]}));
    EXPECT_NEAR(content[i]["logprob"].get<double>(), ref[static_cast<size_t>(gen[i])], kTol);
    ASSERT_EQ(content[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[i]["top_logprobs"][0]["token"], content[i]["token"]);  // greedy: the best
    EXPECT_GE(content[i]["top_logprobs"][0]["logprob"].get<double>(), content[i]["top_logprobs"][1]["logprob"].get<double>());
    ids.push_back(gen[i]);
  }
  json sb = body;
  sb["stream"] = true;
  auto sv = read_stream(s.port(), "/v1/chat/completions", sb);
  EXPECT_TRUE(sv.done);
  EXPECT_EQ(sv.content[0], content);
  EXPECT_EQ(sv.text[0], r["choices"][0]["message"]["content"]);
  // Without logprobs the field is null.
  r = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}}, &st);
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(s.p.stop(), 0);
}

// The penalties and logit_bias change the greedy tokens as the reference applies them; the
// log-probabilities shown are of the logits before them (OpenAI's definition).
TEST(OpenaiFields, PenaltiesAndLogitBiasFollowTheReferenceAndLogprobsPrecedeThem) {
  llm_server s;
  ASSERT_NE(s.port(), 0) << s.p.line();
  unsigned st = 0;
  const auto tok = make_byte_tokenizer();
  const auto prompt = byte_prompt("abcabc");
  struct pcase {
    double presence, frequency, repetition;
    std::map<int32_t, float> bias;
  };
  const std::vector<pcase> cases{{1.5, 0, 1, {}}, {0, 1.0, 1, {}}, {0, 0, 1.8, {}}, {0, 0, 1, {{'z', 100}}},
                                 {0.5, 0.5, 1.3, {{'e', -100}, {'q', 3.5}}}};
  for (const auto& k : cases) {
    json bias = json::object();
    for (const auto& [t, v] : k.bias) bias[std::to_string(t)] = v;
    const auto want = greedy_penalised(prompt, 12, k.presence, k.frequency, k.repetition, k.bias);
    {
      json body{{"max_tokens", 12}, {"temperature", 0}, {"presence_penalty", k.presence},
                {"frequency_penalty", k.frequency}, {"repetition_penalty", k.repetition}, {"logit_bias", bias}};
      body["prompt"] = json::array();
      for (int32_t t : prompt) body["prompt"].push_back(t);
      body["logprobs"] = 0;
      json r = s.post("/v1/completions", body, &st);
      ASSERT_EQ(st, 200u) << r.dump();
      EXPECT_EQ(r["choices"][0]["text"], tok->decode(want)) << body.dump();
      auto ids = prompt;
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(r["choices"][0]["logprobs"]["token_logprobs"][i].get<double>(),
                    log_softmax(ids)[static_cast<size_t>(want[i])], kTol) << body.dump() << " token " << i;
        ids.push_back(want[i]);
      }
      // Streamed: the same text.
      body["stream"] = true;
      auto sv = read_stream(s.port(), "/v1/completions", body);
      EXPECT_EQ(sv.text[0], tok->decode(want)) << body.dump();
    }
  }
  // Chat takes them too: logit_bias +100 on 'z' makes every token 'z'.
  json r = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4},
                                           {"temperature", 0}, {"logit_bias", {{"122", 100}}}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "zzzz");
  EXPECT_EQ(s.p.stop(), 0);
}

// Stop strings (a string or a list) spanning tokens end every choice; include_usage on chat.
TEST(OpenaiFields, StopStringsSpanningTokensAndIncludeUsage) {
  llm_server s;
  ASSERT_NE(s.port(), 0) << s.p.line();
  unsigned st = 0;
  const auto tok = make_byte_tokenizer();
  const std::string full = tok->decode(toy_llm_generate(byte_prompt("Once"), 30));
  const std::string stop = full.substr(10, 4);  // four tokens of the byte tokenizer
  for (const json& stops : {json(stop), json::array({"\x01never", stop})}) {
    json r = s.post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 30}, {"temperature", 0}, {"stop", stops},
                                        {"n", 2}}, &st);
    ASSERT_EQ(st, 200u) << r.dump();
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(r["choices"][i]["text"], full.substr(0, full.find(stop)));
      EXPECT_EQ(r["choices"][i]["finish_reason"], "stop");
    }
    auto sv = read_stream(s.port(), "/v1/completions",
                          {{"prompt", "Once"}, {"max_tokens", 30}, {"temperature", 0}, {"stop", stops}, {"stream", true}});
    EXPECT_EQ(sv.text[0], full.substr(0, full.find(stop)));
    EXPECT_EQ(sv.finish[0], "stop");
  }
  auto sv = read_stream(s.port(), "/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}, {"n", 2},
                         {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_TRUE(sv.done);
  EXPECT_EQ(sv.usage["completion_tokens"], 6);
  EXPECT_EQ(sv.finish.size(), 2u);
  EXPECT_EQ(s.p.stop(), 0);
}

// Hostile values of every new field: 400 in OpenAI's shape naming the field, and no KV block
// left in use after them (a small pool: n x max_tokens beyond it is refused).
TEST(OpenaiFields, HostileValuesAreRefusedAndNothingLeaks) {
  llm_server s({bin("tessera-serve"), "--model", "toy-llm", "--port", "0", "--kv-blocks", "64", "--kv-block-tokens", "16"});
  ASSERT_NE(s.port(), 0) << s.p.line();
  http_connection c("127.0.0.1", s.port());
  const std::vector<std::tuple<std::string, std::string, std::string>> cases{
      {"/v1/completions", R"({"prompt": "a", "n": 0})", "n"},
      {"/v1/completions", R"({"prompt": "a", "n": 1000000})", "n"},
      {"/v1/completions", R"({"prompt": "a", "n": "3"})", "n"},
      {"/v1/completions", R"({"prompt": "a", "n": 2.5})", "n"},
      {"/v1/completions", R"({"prompt": "a", "n": 100, "max_tokens": 500})", "prompt"},
      {"/v1/completions", R"({"prompt": "a", "best_of": 2, "n": 3})", "best_of"},
      {"/v1/completions", R"({"prompt": "a", "best_of": 3, "stream": true})", "best_of"},
      {"/v1/completions", R"({"prompt": "a", "logprobs": 21})", "logprobs"},
      {"/v1/completions", R"({"prompt": "a", "logprobs": true})", "logprobs"},
      {"/v1/completions", R"({"prompt": "a", "logprobs": -1})", "logprobs"},
      {"/v1/completions", R"({"prompt": "a", "echo": "yes"})", "echo"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": -1, "echo": true})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "presence_penalty": 2.5})", "presence_penalty"},
      {"/v1/completions", R"({"prompt": "a", "frequency_penalty": "x"})", "frequency_penalty"},
      {"/v1/completions", R"({"prompt": "a", "repetition_penalty": 0})", "repetition_penalty"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": [1, 2]})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"258": 1}})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"-1": 1}})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"1e3": 1}})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"65": 101}})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "a", "logit_bias": {"65": "big"}})", "logit_bias"},
      {"/v1/completions", R"({"prompt": "a", "seed": "x"})", "seed"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 3})", "logprobs"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "top_logprobs"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 129})", "n"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", "echo"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "best_of": 2})", "best_of"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 60, "max_tokens": 900})", "messages"},
  };
  for (const auto& [path, body, param] : cases) {
    auto r = c.request("POST", path, body);
    EXPECT_EQ(r.status, 400u) << body << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["param"], param) << body << " -> " << r.body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }
  EXPECT_EQ(s.kv_used_settled(), 0);
  // The server still answers n = 4 with echo and logprobs, and frees every block after.
  auto ok = c.request("POST", "/v1/completions", R"({"prompt": "still here", "n": 4, "max_tokens": 20, "echo": true, "logprobs": 2})");
  EXPECT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["choices"].size(), 4u);
  EXPECT_EQ(s.kv_used_settled(), 0);
  EXPECT_EQ(s.p.stop(), 0);
}

// lm-evaluation-harness's loglikelihood request on a seeded checkpoint saved as a Hugging Face
// folder: POST /v1/completions {prompt: context + continuation ids, echo, logprobs 1, max_tokens 0},
// sum token_logprobs over the continuation; equal to the float64 golden within 1e-3.
TEST(OpenaiFields, LmEvalLoglikelihoodMatchesTheFloat64Goldens) {
  const auto g = json::parse(models::testing::read_file(models::testing::data_dir() + "/decoders/logprob_goldens.json"));
  ASSERT_GE(g["models"].size(), 1u);
  const std::string root = "/tmp/tessera-openai-fields-" + std::to_string(getpid());
  for (const auto& [name, entry] : g["models"].items()) {
    auto shape = models::parse_decoder_config_json(
        models::testing::read_file(models::testing::data_dir() + "/decoders/" + name + ".config.json"));
    ASSERT_TRUE(shape) << name;
    shape->name = name;
    auto m = models::make_seeded_decoder(*shape, g["seed"].get<uint64_t>());
    ASSERT_TRUE(m) << m.error().to_string();
    const std::string dir = root + "/" + name;
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(models::save_decoder(*m, dir).ok());
    write_byte_vocab(dir, shape->vocab_size);
    llm_server s({bin("tessera-serve"), "--model", dir, "--port", "0"});
    ASSERT_NE(s.port(), 0) << name << ": " << s.p.line();
    for (const auto& p : entry["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      const size_t k = p["context_tokens"].get<size_t>();
      unsigned st = 0;
      json r = s.post("/v1/completions", {{"prompt", ids}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}}, &st);
      ASSERT_EQ(st, 200u) << r.dump();
      const json& lp = r["choices"][0]["logprobs"]["token_logprobs"];
      ASSERT_EQ(lp.size(), ids.size());
      EXPECT_TRUE(lp[0].is_null());
      double sum = 0, worst = 0;
      for (size_t i = 1; i < ids.size(); ++i) {
        worst = std::max(worst, std::fabs(lp[i].get<double>() - p["prompt_logprobs"][i].get<double>()));
        if (i >= k) sum += lp[i].get<double>();
      }
      const double want = p["loglikelihood"].get<double>();
      EXPECT_NEAR(sum, want, 1e-3) << name;
      std::printf("%s over HTTP: %zu tokens, continuation %zu, loglikelihood %.6f (golden %.6f, |diff| %.2e), worst token %.2e\n",
                  name.c_str(), ids.size(), ids.size() - k, sum, want, std::fabs(sum - want), worst);
      EXPECT_EQ(r["usage"]["completion_tokens"], 0);
    }
    EXPECT_EQ(s.kv_used_settled(), 0);
    EXPECT_EQ(s.p.stop(), 0);
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tessera::serving
