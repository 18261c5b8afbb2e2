// The OpenAI-compatible API of a real tessera-serve process serving the toy decoder
// (--model toy-llm, whose greedy outputs toy_llm_generate() computes without a cache), over real
// sockets: completions and chat, streamed and not, errors in OpenAI's shape, continuous batching
// seen from clients (a short request is answered during a long generation, a tiny KV pool
// preempts and every answer stays right, a client that goes away frees its KV blocks, a seed
// gives the same tokens whatever the load), and the metrics through promtool.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/common/llm_trace.hpp"
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

std::vector<int32_t> byte_prompt(const std::string& text) {
  std::vector<int32_t> ids{toy_llm_bos};
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string greedy_text(const std::string& prompt, int n) {
  return make_byte_tokenizer()->decode(toy_llm_generate(byte_prompt(prompt), n));
}

double metric(const std::string& text, const std::string& name) { return metric_value(text, name); }

struct llm_server {
  served_process p;
  explicit llm_server(std::vector<std::string> extra = {})
      : p([&] {
          std::vector<std::string> a{bin("tessera-serve"), "--model", "toy-llm", "--port", "0"};
          a.insert(a.end(), extra.begin(), extra.end());
          return a;
        }()) {}
  uint16_t port() const { return p.port(); }
  json post(const std::string& path, const json& body, unsigned* status = nullptr) {
    return post_json(port(), path, body, status);
  }
  std::string metrics() {
    http_connection c("127.0.0.1", port());
    return c.request("GET", "/metrics").body;
  }
};

TEST(LlmHttp, CompletionsAndChatStreamedAndNotEqualTheReference) {
  llm_server s;
  ASSERT_NE(s.port(), 0) << s.p.line();
  unsigned st = 0;
  json r = s.post("/v1/completions", {{"model", "toy-llm"}, {"prompt", "Once upon"}, {"max_tokens", 24}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], greedy_text("Once upon", 24));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(r["usage"]["completion_tokens"], 24);
  EXPECT_EQ(r["usage"]["total_tokens"], 34);
  // Streamed: the same text, piece by piece, then [DONE].
  sse_client sse(s.port(), "/v1/completions",
                 json{{"prompt", "Once upon"}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true},
                      {"stream_options", {{"include_usage", true}}}}.dump());
  std::string text, finish;
  json usage;
  int events = 0;
  for (std::string e = sse.next(); !e.empty(); e = sse.next()) {
    if (e == "[DONE]") break;
    json j = json::parse(e);
    ++events;
    if (j.contains("usage") && !j["usage"].is_null()) usage = j["usage"];
    if (j["choices"].empty()) continue;
    text += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_NE(sse.raw().find("Content-Type: text/event-stream"), std::string::npos) << sse.raw().substr(0, 300);
  EXPECT_NE(sse.raw().find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_EQ(text, greedy_text("Once upon", 24));
  EXPECT_EQ(finish, "length");
  EXPECT_GE(events, 5);
  EXPECT_EQ(usage["completion_tokens"], 24);
  // Chat: the plain default template.
  r = s.post("/v1/chat/completions",
             {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
              {"max_tokens", 12}, {"temperature", 0}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], greedy_text("Be brief.\n\nUser: Hi\nAssistant:", 12));
  // Token-id prompts and stop strings.
  // Token ids go in as they are (no BOS added).
  const std::string ids_text = make_byte_tokenizer()->decode(toy_llm_generate({97, 98, 99}, 30));
  const std::string stop = ids_text.substr(12, 3);
  r = s.post("/v1/completions", {{"prompt", json::array({97, 98, 99})}, {"max_tokens", 30}, {"temperature", 0},
                                 {"stop", stop}}, &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], ids_text.substr(0, ids_text.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  http_connection c("127.0.0.1", s.port());
  auto models = json::parse(c.request("GET", "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "toy-llm");
  EXPECT_EQ(s.p.stop(), 0);
}

TEST(LlmHttp, ErrorsInOpenAIsShape) {
  llm_server s;
  ASSERT_NE(s.port(), 0);
  http_connection c("127.0.0.1", s.port());
  struct bad_case {
    std::string method, path, body;
    unsigned status;
    std::string param, code;
  };
  const std::vector<bad_case> cases{
      {"POST", "/v1/completions", "{not json", 400, "", ""},
      {"POST", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, "", ""},
      {"POST", "/v1/completions", "[1, 2]", 400, "", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "bogus": 1})", 400, "bogus", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "model": "gpt-4"})", 404, "model", "model_not_found"},
      {"POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 5000})", 400, "prompt", "context_length_exceeded"},
      {"POST", "/v1/completions", R"({"prompt": "a", "n": 0})", 400, "n", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "temperature": 3})", 400, "temperature", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "temperature": "hot"})", 400, "temperature", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "logprobs": 21})", 400, "logprobs", ""},
      {"POST", "/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt", ""},
      {"POST", "/v1/completions", R"({"prompt": [1, 99999]})", 400, "prompt", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "stop": ["1","2","3","4","5"]})", 400, "stop", ""},
      {"POST", "/v1/completions", R"({"prompt": "a", "stream_options": {"include_usage": true}})", 400, "stream_options", ""},
      {"POST", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt", ""},
      {"POST", "/v1/chat/completions", R"({"messages": []})", 400, "messages", ""},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages[0].role", ""},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400, "messages[0].content", ""},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", 400, "tools", ""},
      {"POST", "/v1/chat/completions", std::string(100, '[') + std::string(100, ']'), 400, "", ""},
      {"GET", "/v1/completions", "", 405, "", "method_not_allowed"},
      {"GET", "/v1/nothing", "", 404, "", "not_found"},
      {"GET", "/v1/models/other", "", 404, "model", "model_not_found"},
  };
  for (const auto& k : cases) {
    auto r = c.request(k.method, k.path, k.body);
    EXPECT_EQ(r.status, k.status) << k.body << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
    EXPECT_TRUE(e["type"].is_string()) << r.body;
    EXPECT_EQ(e["param"], k.param.empty() ? json(nullptr) : json(k.param)) << k.body << " -> " << r.body;
    if (!k.code.empty()) {
      EXPECT_EQ(e["code"], k.code) << r.body;
    }
  }
  // The server is still serving.
  auto ok = c.request("POST", "/v1/completions", R"({"prompt": "still here", "max_tokens": 2})");
  EXPECT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(s.p.stop(), 0);
}

// A decoder server has no encoder model: TEI's and KServe's inference routes answer 404 saying
// so (never a made-up tokenization), and the OpenAI routes keep serving.
TEST(LlmHttp, EncoderRoutesSayADecoderIsServed) {
  llm_server s;
  ASSERT_NE(s.port(), 0);
  http_connection c("127.0.0.1", s.port());
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/predict", R"({"inputs": "hello"})"},
           {"/tokenize", R"({"inputs": "hello"})"},
           {"/v2/models/toy-llm/infer",
            R"({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hello"]}]})"}}) {
    auto r = c.request("POST", path, body);
    EXPECT_EQ(r.status, 404u) << path << " -> " << r.body;
    EXPECT_NE(r.body.find("is a decoder"), std::string::npos) << path << " -> " << r.body;
  }
  auto ok = c.request("POST", "/v1/completions", R"({"prompt": "still here", "max_tokens": 2})");
  EXPECT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(s.p.stop(), 0);
}

TEST(LlmHttp, AShortRequestIsAnsweredDuringALongGeneration) {
  // 1 ms a step: the long generation takes at least 0.6 s.
  llm_server s({"--toy-llm-step-us", "1000"});
  ASSERT_NE(s.port(), 0);
  sse_client longer(s.port(), "/v1/completions",
                    json{{"prompt", "long"}, {"max_tokens", 600}, {"stream", true}, {"ignore_eos", true}}.dump());
  ASSERT_FALSE(longer.next().empty());  // the long one generates
  unsigned st = 0;
  json r = s.post("/v1/completions", {{"prompt", "short"}, {"max_tokens", 3}, {"ignore_eos", true}}, &st);
  ASSERT_EQ(st, 200u);
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
  // The short answer is complete; the long stream has not ended yet.
  EXPECT_EQ(longer.raw().find("[DONE]"), std::string::npos);
  int rest = 0;
  for (std::string e = longer.next(); !e.empty() && e != "[DONE]"; e = longer.next()) ++rest;
  EXPECT_GT(rest, 100);  // tokens still to come when the short one was done
  EXPECT_EQ(s.p.stop(), 0);
}

TEST(LlmHttp, ATinyKvPoolPreemptsAndEveryAnswerIsRight) {
  // 12 blocks of 8 positions: 12 concurrent requests of up to 73 positions must take turns. The
  // step log (--llm-step-log) records every step: it must agree with the metrics and the limits.
  const std::string step_log = testing::TempDir() + "/llm_http_steps_" + std::to_string(getpid()) + ".csv";
  const std::string request_log = testing::TempDir() + "/llm_http_requests_" + std::to_string(getpid()) + ".csv";
  llm_server s({"--kv-blocks", "12", "--kv-block-tokens", "8", "--step-token-budget", "32", "--llm-step-log", step_log,
                "--llm-request-log", request_log});
  ASSERT_NE(s.port(), 0);
  std::vector<std::future<std::pair<std::string, std::string>>> answers;
  for (int i = 0; i < 12; ++i) {
    const std::string prompt = "request number " + std::to_string(i) + std::string(static_cast<size_t>(i * 2), 'x');
    const int n = 10 + i * 2;
    answers.push_back(std::async(std::launch::async, [&s, prompt, n] {
      json r = s.post("/v1/completions", {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}});
      return std::make_pair(r.dump(), greedy_text(prompt, n));
    }));
  }
  for (auto& a : answers) {
    auto [got, want] = a.get();
    json j = json::parse(got, nullptr, false);
    ASSERT_TRUE(j.contains("choices")) << got;
    EXPECT_EQ(j["choices"][0]["text"], want);
  }
  std::string m = s.metrics();
  EXPECT_GT(metric(m, "tessera_llm_preemptions_total"), 0) << m;
  EXPECT_EQ(metric(m, "tessera_llm_kv_blocks_used"), 0);
  EXPECT_EQ(s.p.stop(), 0);

  std::ifstream f(step_log);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  std::vector<std::string> names;
  for (std::stringstream ss(line); std::getline(ss, line, ',');) names.push_back(line);
  auto col = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  for (const char* n : {"step", "prefill_tokens", "decode_tokens", "seqs", "preempted", "kv_used", "kv_free", "backend_ms"})
    ASSERT_LT(col(n), static_cast<long>(names.size())) << n;
  double steps = 0, prefill = 0, decode = 0, preempted = 0, last_step = 0;
  while (std::getline(f, line)) {
    std::vector<double> v;
    for (std::stringstream ss(line); std::getline(ss, line, ',');) v.push_back(std::stod(line));
    ASSERT_EQ(v.size(), names.size());
    ++steps;
    EXPECT_EQ(v[col("step")], last_step + 1);  // every step, in order
    last_step = v[col("step")];
    prefill += v[col("prefill_tokens")];
    decode += v[col("decode_tokens")];
    preempted += v[col("preempted")];
    EXPECT_LE(v[col("prefill_tokens")] + v[col("decode_tokens")], 32);  // the token budget
    EXPECT_GE(v[col("seqs")], 1);
    EXPECT_EQ(v[col("kv_used")] + v[col("kv_free")], 12);
    EXPECT_GE(v[col("backend_ms")], 0);
  }
  EXPECT_EQ(steps, metric(m, "tessera_llm_steps_total"));
  EXPECT_EQ(prefill, metric(m, "tessera_llm_prefill_tokens_total"));
  EXPECT_EQ(preempted, metric(m, "tessera_llm_preemptions_total"));
  double generated = 0;
  for (int i = 0; i < 12; ++i) generated += 10 + i * 2;
  // Each request's first token, and the first after each recompute, came from a prefill step.
  EXPECT_LE(decode + 12, generated);
  EXPECT_GE(decode + 12 + preempted, generated);
  std::filesystem::remove(step_log);

  // The request log: one line per request, its tokens, TTFT <= e2e; no timing model here, so the
  // modelled clock never moved.
  std::ifstream rf(request_log);
  ASSERT_TRUE(std::getline(rf, line));
  EXPECT_EQ(line, "id,prompt_tokens,completion_tokens,finish_reason,ttft_s,e2e_s,modelled_ttft_s,modelled_e2e_s");
  double completions = 0;
  int requests = 0;
  while (std::getline(rf, line)) {
    std::vector<std::string> f;
    for (std::stringstream ss(line); std::getline(ss, line, ',');) f.push_back(line);
    ASSERT_EQ(f.size(), 8u);
    ++requests;
    completions += std::stod(f[2]);
    EXPECT_EQ(f[3], "length");
    EXPECT_GT(std::stod(f[4]), 0);
    EXPECT_LE(std::stod(f[4]), std::stod(f[5]));
    EXPECT_EQ(std::stod(f[6]), 0);
    EXPECT_EQ(std::stod(f[7]), 0);
  }
  EXPECT_EQ(requests, 12);
  EXPECT_EQ(completions, generated);
  std::filesystem::remove(request_log);
}

TEST(LlmHttp, AStepLogThatCannotBeWrittenIsRefused) {
  llm_server s({"--llm-step-log", "/nonexistent-dir/steps.csv"});
  EXPECT_EQ(s.port(), 0);
  EXPECT_EQ(s.p.stop(), 2);
}

TEST(LlmHttp, AClientThatGoesAwayFreesItsBlocks) {
  llm_server s({"--toy-llm-step-us", "2000"});
  ASSERT_NE(s.port(), 0);
  for (bool stream : {true, false}) {
    sse_client gone(s.port(), "/v1/completions",
                    json{{"prompt", std::string(100, 'p')}, {"max_tokens", 3000}, {"stream", stream}, {"ignore_eos", true}}.dump());
    ASSERT_TRUE(gone.connected());
    double used = 0;
    for (int i = 0; i < 5000 && used <= 0; ++i) {
      used = metric(s.metrics(), "tessera_llm_kv_blocks_used");
      if (used <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_GT(used, 0);
    gone.close();
    std::string m;
    for (int i = 0; i < 5000; ++i) {  // bounded: 10 s
      m = s.metrics();
      if (metric(m, "tessera_llm_kv_blocks_used") == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(metric(m, "tessera_llm_kv_blocks_used"), 0) << (stream ? "stream" : "not streamed");
    EXPECT_LT(metric(m, "tessera_llm_generation_tokens_total"), 2 * 3000);  // it stopped early
  }
  std::string m = s.metrics();
  EXPECT_NE(m.find("tessera_llm_requests_total{finish_reason=\"cancelled\"} 2"), std::string::npos) << m;
  EXPECT_EQ(s.p.stop(), 0);
}

TEST(LlmHttp, SameSeedSameTokensWhateverTheLoad) {
  llm_server s;
  ASSERT_NE(s.port(), 0);
  const json req{{"prompt", "seeded"}, {"max_tokens", 40}, {"temperature", 0.9}, {"top_p", 0.9}, {"seed", 77}, {"ignore_eos", true}};
  const json alone = s.post("/v1/completions", req)["choices"][0]["text"];
  std::vector<std::future<json>> load;
  for (int i = 0; i < 8; ++i)
    load.push_back(std::async(std::launch::async, [&s, i] {
      return s.post("/v1/completions", {{"prompt", "noise " + std::to_string(i)}, {"max_tokens", 60}, {"seed", i}});
    }));
  const json busy = s.post("/v1/completions", req)["choices"][0]["text"];
  for (auto& l : load) l.get();
  EXPECT_EQ(busy, alone);
  json req78 = req;
  req78["seed"] = 78;
  const json other = s.post("/v1/completions", req78)["choices"][0]["text"];
  EXPECT_NE(other, alone);
  EXPECT_EQ(s.p.stop(), 0);
}

TEST(LlmHttp, PromtoolAcceptsTheLlmMetrics) {
  ASSERT_EQ(std::system("command -v promtool > /dev/null"), 0) << "promtool is not installed";
  llm_server s;
  ASSERT_NE(s.port(), 0);
  s.post("/v1/completions", {{"prompt", "metrics"}, {"max_tokens", 5}});
  s.post("/v1/completions", {{"prompt", "metrics"}, {"max_tokens", 5000}});
  const std::string m = s.metrics();
  const std::string path = ::testing::TempDir() + "/tessera_llm_metrics.prom";
  std::ofstream(path) << m;
  EXPECT_EQ(std::system(("promtool check metrics < " + path).c_str()), 0) << m;
  for (const char* name : {"tessera_llm_time_to_first_token_seconds_count 1", "tessera_llm_kv_blocks_free ",
                           "tessera_llm_prefix_cache_hit_tokens_total ", "tessera_llm_generation_tokens_per_second ",
                           "tessera_llm_inter_token_latency_seconds_bucket", "tessera_llm_queue_time_seconds_count 1"})
    EXPECT_NE(m.find(name), std::string::npos) << name;
  std::filesystem::remove(path);
  EXPECT_EQ(s.p.stop(), 0);
}

TEST(LlmHttp, AStopSignalLetsStreamsFinish) {
  llm_server s({"--toy-llm-step-us", "1000"});
  ASSERT_NE(s.port(), 0);
  sse_client sse(s.port(), "/v1/completions", json{{"prompt", "x"}, {"max_tokens", 200}, {"stream", true}, {"ignore_eos", true}}.dump());
  ASSERT_FALSE(sse.next().empty());
  auto stopped = std::async(std::launch::async, [&] { return s.p.stop(); });
  int events = 1;
  std::string e;
  for (e = sse.next(); !e.empty() && e != "[DONE]"; e = sse.next()) ++events;
  EXPECT_EQ(e, "[DONE]");
  EXPECT_GE(events, 100);
  EXPECT_EQ(stopped.get(), 0);
}

// tessera-loadgen's OpenAI mode against a live server: every request streamed to [DONE], output
// lengths exact (max_tokens with ignore_eos), the CSV row's counts agree.
TEST(LlmHttp, LoadgenSpeaksTheStreamingApi) {
  llm_server s({"--toy-llm-step-us", "200"});
  ASSERT_NE(s.port(), 0);
  const std::string csv = ::testing::TempDir() + "/tessera_llm_loadgen.csv";
  std::filesystem::remove(csv);
  for (const std::string& args :
       {std::string("--openai chat --mode closed --connections 8 --requests 24 --prompt-len U[8,40] --output-len 12"),
        std::string("--openai completions --prompt-ids --prompt-id-range 0-250 --mode open --rate 200 --requests 20 "
                    "--prompt-len 16 --output-len U[4,8] --shared-prefix 32 --model toy-llm")}) {
    const std::string cmd = bin("tessera-loadgen") + " --quiet --port " + std::to_string(s.port()) + " " + args +
                            " --csv " + csv + " > " + csv + ".out 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream out(csv + ".out");
      ADD_FAILURE() << cmd << "\n" << std::string(std::istreambuf_iterator<char>(out), {});
    }
  }
  std::ifstream in(csv);
  std::string header, chat, comp;
  std::getline(in, header);
  std::getline(in, chat);
  std::getline(in, comp);
  auto field = [&](const std::string& row, const std::string& name) {
    std::vector<std::string> h, v;
    std::stringstream hs(header), vs(row);
    for (std::string x; std::getline(hs, x, ',');) h.push_back(x);
    for (std::string x; std::getline(vs, x, ',');) v.push_back(x);
    for (size_t i = 0; i < h.size() && i < v.size(); ++i)
      if (h[i] == name) return std::stod(v[i]);
    return -1.0;
  };
  EXPECT_EQ(field(chat, "ok"), 24);
  EXPECT_EQ(field(chat, "errors"), 0);
  EXPECT_EQ(field(chat, "output_tokens"), 24 * 12);
  EXPECT_GT(field(chat, "ttft_p99_ms"), 0);
  EXPECT_GT(field(chat, "tpot_p50_ms"), 0);
  EXPECT_EQ(field(comp, "ok"), 20);
  EXPECT_EQ(field(comp, "prompt_tokens"), 20 * (32 + 16));
  EXPECT_GE(field(comp, "output_tokens"), 20 * 4);
  EXPECT_LE(field(comp, "output_tokens"), 20 * 8);
  std::filesystem::remove(csv);
  EXPECT_EQ(s.p.stop(), 0);
}

// A CSV file's rows as name -> value maps.
std::vector<std::map<std::string, std::string>> csv_rows(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> h;
  std::vector<std::map<std::string, std::string>> out;
  if (std::getline(in, line)) {
    std::stringstream hs(line);
    for (std::string x; std::getline(hs, x, ',');) h.push_back(x);
  }
  while (std::getline(in, line)) {
    std::stringstream vs(line);
    std::map<std::string, std::string> row;
    size_t i = 0;
    for (std::string x; std::getline(vs, x, ',') && i < h.size(); ++i) row[h[i]] = x;
    out.push_back(row);
  }
  return out;
}

std::string run_loadgen(uint16_t port, const std::string& args) {
  const std::string out = ::testing::TempDir() + "/tessera_llm_loadgen_trace.out";
  const std::string cmd = bin("tessera-loadgen") + " --quiet --port " + std::to_string(port) + " " + args + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(rc, 0) << cmd << "\n" << text;
  return text;
}

// tessera-loadgen --openai --trace replays every trace format against a live server: as many
// requests as the trace has rows (BurstGPT's failed row skipped), the prompt and output tokens the
// server counted equal the trace's sums (python3's csv module: tests/data/traces/make_samples.py
// wrote them), the requests written back (--write-trace) arrive at the trace's times scaled by
// --time-scale (relative to its first row for the public formats), and --duration cuts the rows
// arriving after it.
TEST(LlmHttp, LoadgenReplaysEveryTraceFormat) {
  llm_server s({"--toy-llm-step-us", "200"});
  ASSERT_NE(s.port(), 0);
  const std::string dir = std::string(std::getenv("TESSERA_SOURCE_DIR") ? std::getenv("TESSERA_SOURCE_DIR")
                                                                        : TESSERA_TEST_SOURCE_DIR) + "/tests/data/traces/";
  struct golden {
    const char* file;
    int rows;
    int64_t prompt, output;
  };
  const golden goldens[] = {{"tessera.csv", 24, 1459, 308},
                            {"azure_2023.csv", 24, 1849, 312},
                            {"azure_2024.csv", 24, 1464, 323},
                            {"burstgpt.csv", 23, 1564, 261}};
  const std::string csv = ::testing::TempDir() + "/tessera_llm_loadgen_trace.csv";
  const std::string sent = ::testing::TempDir() + "/tessera_llm_loadgen_sent.csv";
  for (const auto& g : goldens) {
    std::filesystem::remove(csv);
    // BurstGPT's sample spans 27 s at whole seconds: replayed 20x faster.
    const double scale = std::string(g.file) == "burstgpt.csv" ? 0.05 : 0.5;
    const std::string out =
        run_loadgen(s.port(), "--openai completions --prompt-ids --prompt-id-range 0-250 --mode open --trace " + dir + g.file +
                                  " --time-scale " + std::to_string(scale) + " --slo-ttft-ms 100000 --slo-tpot-ms 100000 --csv " +
                                  csv + " --write-trace " + sent);
    auto rows = csv_rows(csv);
    ASSERT_EQ(rows.size(), 1u) << out;
    EXPECT_EQ(std::stoi(rows[0]["ok"]), g.rows) << g.file << "\n" << out;
    EXPECT_EQ(std::stoi(rows[0]["errors"]), 0) << g.file;
    EXPECT_EQ(std::stoll(rows[0]["prompt_tokens"]), g.prompt) << g.file;
    EXPECT_EQ(std::stoll(rows[0]["output_tokens"]), g.output) << g.file;
    EXPECT_EQ(std::stoi(rows[0]["good"]), g.rows) << "bounds no request misses: every one is good";
    EXPECT_NE(rows[0]["workload"].find(g.file), std::string::npos);
    auto want = read_llm_trace(dir + g.file);
    auto got = read_llm_trace(sent);
    ASSERT_TRUE(want.has_value() && got.has_value());
    ASSERT_EQ(got->rows.size(), want->rows.size());
    for (size_t i = 0; i < got->rows.size(); ++i) {
      // Planned arrivals (latency counts from them): the scaled trace, to the timer's nanosecond.
      EXPECT_NEAR(got->rows[i].arrival_seconds, want->rows[i].arrival_seconds * scale, 1e-6) << g.file << " row " << i;
      EXPECT_EQ(got->rows[i].prompt_tokens, want->rows[i].prompt_tokens) << g.file << " row " << i;
      EXPECT_EQ(got->rows[i].output_tokens, want->rows[i].output_tokens) << g.file << " row " << i;
    }
  }
  // --duration: only the rows arriving within it (tessera.csv at x0.5: 0.009 .. 1.20 s).
  std::filesystem::remove(csv);
  auto full = read_llm_trace(dir + "tessera.csv");
  ASSERT_TRUE(full.has_value());
  int within = 0;
  for (const auto& r : full->rows) within += r.arrival_seconds * 0.5 <= 0.5;
  run_loadgen(s.port(), "--openai completions --prompt-ids --prompt-id-range 0-250 --mode open --trace " + dir +
                            "tessera.csv --time-scale 0.5 --duration 0.5 --csv " + csv);
  auto rows = csv_rows(csv);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(within, 3);
  EXPECT_LT(within, 24);
  EXPECT_EQ(std::stoi(rows[0]["sent"]), within);
  // An SLO no request can meet: goodput 0, every request still ok.
  std::filesystem::remove(csv);
  run_loadgen(s.port(), "--openai completions --prompt-ids --prompt-id-range 0-250 --mode open --trace " + dir +
                            "azure_2023.csv --slo-ttft-ms 0.000001 --csv " + csv);
  rows = csv_rows(csv);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(std::stoi(rows[0]["ok"]), 24);
  EXPECT_EQ(std::stoi(rows[0]["good"]), 0);
  EXPECT_EQ(std::stod(rows[0]["goodput_rps"]), 0);
  std::filesystem::remove(csv);
  std::filesystem::remove(sent);
  EXPECT_EQ(s.p.stop(), 0);
}

// --sweep: one run per rate, a CSV row and a written trace each; goodput within the offered rate.
TEST(LlmHttp, LoadgenSweepsRequestRates) {
  llm_server s({"--toy-llm-step-us", "200"});
  ASSERT_NE(s.port(), 0);
  const std::string csv = ::testing::TempDir() + "/tessera_llm_sweep.csv";
  const std::string sent = ::testing::TempDir() + "/tessera_llm_sweep_sent.csv";
  std::filesystem::remove(csv);
  run_loadgen(s.port(), "--openai completions --prompt-ids --prompt-id-range 0-250 --mode open --sweep 20,40 --requests 12 "
                        "--prompt-len U[8,32] --output-len 4 --slo-ttft-ms 100000 --slo-tpot-ms 100000 --csv " + csv +
                        " --write-trace " + sent);
  auto rows = csv_rows(csv);
  ASSERT_EQ(rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(std::stod(rows[i]["rate"]), i ? 40 : 20);
    EXPECT_EQ(std::stoi(rows[i]["ok"]), 12);
    EXPECT_EQ(std::stoi(rows[i]["good"]), 12);
    EXPECT_NEAR(std::stod(rows[i]["goodput_rps"]), 12 / std::stod(rows[i]["duration_s"]), 0.05 * 12 / std::stod(rows[i]["duration_s"]));
    const std::string per_rate = ::testing::TempDir() + "/tessera_llm_sweep_sent-rate" + (i ? "40" : "20") + ".csv";
    auto t = read_llm_trace(per_rate);
    ASSERT_TRUE(t.has_value()) << per_rate;
    EXPECT_EQ(t->rows.size(), 12u);
    std::filesystem::remove(per_rate);
  }
  std::filesystem::remove(csv);
  EXPECT_EQ(s.p.stop(), 0);
}

}  // namespace
}  // namespace tessera::serving
