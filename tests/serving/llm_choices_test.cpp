// The engine's OpenAI-parity features against the toy decoder, whose logits after any prefix are
// known without a cache (toy_llm_logits): log-probabilities of sampled and prompt tokens (the
// test's own log-softmax in long double), scoring with max_tokens 0, n choices forked from one
// prefill (equal to separate requests with the derived seeds, prompt computed once, blocks back
// to 0), penalties and logit_bias against a greedy loop written here, and refusals.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <tuple>
#include <set>
#include <thread>

#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/openai_choices.hpp"
#include "tessera/toys/toy_llm.hpp"

namespace tessera::serving {
using namespace tessera::toys;
namespace {

struct choice_out {
  std::vector<int32_t> tokens;
  std::vector<token_logprob> logprobs, prompt_logprobs;
  std::string text, finish_reason;
  int prompt_events = 0;
};

struct collected {
  std::map<int32_t, choice_out> choices;
  int finished = 0, want = 1;
  std::promise<void> done;
};

llm_request request(std::shared_ptr<collected> c, std::vector<int32_t> prompt, int32_t max_tokens, int32_t n = 1) {
  llm_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.n = n;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  c->want = n;
  r.on_event = [c](llm_event ev) {
    auto& ch = c->choices[ev.index];
    ch.tokens.insert(ch.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    ch.logprobs.insert(ch.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (!ev.prompt_logprobs.empty()) {
      ch.prompt_logprobs = ev.prompt_logprobs;
      ++ch.prompt_events;
    }
    ch.text += ev.text;
    if (ev.finished) {
      ch.finish_reason = ev.finish_reason;
      if (++c->finished == c->want) c->done.set_value();
    }
  };
  return r;
}

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11) % 256);
  return p;
}

bool wait(const std::shared_ptr<collected>& c) {
  return c->done.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
}

// log-softmax of the toy's logits after `prefix`, in long double.
std::vector<long double> log_softmax_after(const std::vector<int32_t>& prefix) {
  const auto logits = toy_llm_logits(prefix);
  long double mx = logits[0];
  for (float v : logits) mx = std::max<long double>(mx, v);
  long double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<long double>(v) - mx);
  std::vector<long double> out;
  for (float v : logits) out.push_back(static_cast<long double>(v) - mx - std::log(sum));
  return out;
}

void wait_blocks_free(serving_metrics& m) {
  for (int i = 0; i < 2000 && m.llm.kv_blocks_used.load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(m.llm.kv_blocks_used.load(), 0);
}

constexpr double kTol = 1e-5;  // fp32 logits, log-softmax in double on both sides

TEST(LlmChoices, PromptAndTokenLogprobsEqualTheReference) {
  serving_metrics m;
  llm_engine e({.scheduler = {.token_budget = 64}}, make_toy_llm_backend({.num_blocks = 32, .block_tokens = 8}),
               make_byte_tokenizer(), &m);
  e.start();
  const auto prompt = prompt_of(21, 3);
  // A request sharing the prompt first, so that the prefix cache holds it: scoring must not use it.
  auto warm = std::make_shared<collected>();
  ASSERT_TRUE(e.submit(request(warm, prompt, 2)));
  ASSERT_TRUE(wait(warm));
  for (int32_t max_tokens : {0, 5}) {
    auto c = std::make_shared<collected>();
    auto r = request(c, prompt, max_tokens);
    r.logprobs = 3;
    r.prompt_logprobs = true;
    ASSERT_TRUE(e.submit(std::move(r)));
    ASSERT_TRUE(wait(c));
    const auto& ch = c->choices[0];
    EXPECT_EQ(ch.finish_reason, "length");
    EXPECT_EQ(ch.prompt_events, 1);  // on the first event only
    ASSERT_EQ(ch.prompt_logprobs.size(), prompt.size());
    EXPECT_EQ(ch.prompt_logprobs[0].token, prompt[0]);
    EXPECT_TRUE(std::isnan(ch.prompt_logprobs[0].logprob));  // OpenAI's null
    for (size_t i = 1; i < prompt.size(); ++i) {
      const auto want = log_softmax_after({prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(i)});
      EXPECT_EQ(ch.prompt_logprobs[i].token, prompt[i]);
      EXPECT_NEAR(ch.prompt_logprobs[i].logprob, static_cast<double>(want[static_cast<size_t>(prompt[i])]), kTol) << i;
      ASSERT_EQ(ch.prompt_logprobs[i].top.size(), 3u);
      for (const auto& [t, lp] : ch.prompt_logprobs[i].top) {
        EXPECT_NEAR(lp, static_cast<double>(want[static_cast<size_t>(t)]), kTol);
        EXPECT_LE(lp, ch.prompt_logprobs[i].top[0].second);
      }
      // The first alternative is the most likely token.
      EXPECT_EQ(ch.prompt_logprobs[i].top[0].first,
                static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin()));
    }
    ASSERT_EQ(ch.tokens.size(), static_cast<size_t>(max_tokens));
    ASSERT_EQ(ch.logprobs.size(), ch.tokens.size());
    auto prefix = prompt;
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      const auto want = log_softmax_after(prefix);
      EXPECT_EQ(ch.logprobs[i].token, ch.tokens[i]);
      EXPECT_NEAR(ch.logprobs[i].logprob, static_cast<double>(want[static_cast<size_t>(ch.tokens[i])]), kTol);
      EXPECT_EQ(ch.logprobs[i].top.size(), 3u);
      prefix.push_back(ch.tokens[i]);
    }
    EXPECT_EQ(ch.tokens, toy_llm_generate(prompt, max_tokens));
  }
  wait_blocks_free(m);
  e.stop();
}

TEST(LlmChoices, SeededChoicesEqualSeparateRequestsWithDerivedSeedsAndShareThePrefill) {
  // No prefix cache: the choices share the prompt's blocks by the fork, not by the cache.
  // 37-token prompt over 8-position blocks: 4 shared blocks; each fork computes 5 + 1 tokens.
  const auto prompt = prompt_of(37, 5);
  const int n = 4, max_tokens = 14;
  sampling_params sp{.temperature = 1.0, .top_k = 60, .seed = 77};
  serving_metrics m;
  llm_engine e({.scheduler = {.prefix_caching = false}}, make_toy_llm_backend({.num_blocks = 40, .block_tokens = 8}),
               make_byte_tokenizer(), &m);
  e.start();
  auto c = std::make_shared<collected>();
  auto r = request(c, prompt, max_tokens, n);
  r.sampling = sp;
  r.logprobs = 0;
  ASSERT_TRUE(e.submit(std::move(r)));
  ASSERT_TRUE(wait(c));
  // The prompt was computed once, plus each fork's partial block (5 positions) and its first
  // token in one chunk: 37 + 3 x 6, where 4 separate requests compute 4 x 37.
  EXPECT_EQ(m.llm.prefill_tokens.load(), 37u + 3u * 6u);
  wait_blocks_free(m);
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < n; ++i) {
    auto one = std::make_shared<collected>();
    auto ri = request(one, prompt, max_tokens);
    ri.sampling = sp;
    ri.sampling.seed = *sp.seed + static_cast<uint64_t>(i);
    ASSERT_TRUE(e.submit(std::move(ri)));
    ASSERT_TRUE(wait(one));
    EXPECT_EQ(c->choices[i].tokens, one->choices[0].tokens) << "choice " << i;
    EXPECT_EQ(c->choices[i].text, one->choices[0].text) << "choice " << i;
    EXPECT_EQ(c->choices[i].finish_reason, "length");
    ASSERT_EQ(c->choices[i].logprobs.size(), static_cast<size_t>(max_tokens));
    // Each token's log-probability under the raw logits of its own prefix.
    auto prefix = prompt;
    for (size_t k = 0; k < c->choices[i].tokens.size(); ++k) {
      const int32_t t = c->choices[i].tokens[k];
      EXPECT_NEAR(c->choices[i].logprobs[k].logprob, static_cast<double>(log_softmax_after(prefix)[static_cast<size_t>(t)]), kTol);
      prefix.push_back(t);
    }
    distinct.insert(c->choices[i].tokens);
  }
  EXPECT_GT(distinct.size(), 1u);  // the choices did sample differently
  wait_blocks_free(m);
  e.stop();
}

// Greedy with the penalties and bias as OpenAI and vLLM define them, written out here.
std::vector<int32_t> greedy_with(const std::vector<int32_t>& prompt, int n, const sampling_params& p) {
  auto toks = prompt;
  for (int k = 0; k < n; ++k) {
    auto l = toy_llm_logits(toks);
    std::map<int32_t, int> out_count;
    for (size_t i = prompt.size(); i < toks.size(); ++i) ++out_count[toks[i]];
    std::set<int32_t> seen(toks.begin(), toks.end());
    for (int32_t t : seen) {
      float& v = l[static_cast<size_t>(t)];
      v = v > 0 ? v / static_cast<float>(p.repetition_penalty) : v * static_cast<float>(p.repetition_penalty);
    }
    for (const auto& [t, c] : out_count)
      l[static_cast<size_t>(t)] -= static_cast<float>(c * p.frequency_penalty + p.presence_penalty);
    for (const auto& [t, b] : p.logit_bias) l[static_cast<size_t>(t)] += b;
    toks.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  return {toks.begin() + static_cast<std::ptrdiff_t>(prompt.size()), toks.end()};
}

TEST(LlmChoices, PenaltiesAndLogitBiasChangeSamplingNotLogprobs) {
  serving_metrics m;
  llm_engine e({}, make_toy_llm_backend({.num_blocks = 64}), make_byte_tokenizer(), &m);
  e.start();
  const auto prompt = prompt_of(9, 2);
  const std::vector<sampling_params> cases = {
      {.temperature = 0, .presence_penalty = 1.5},
      {.temperature = 0, .frequency_penalty = 0.9},
      {.temperature = 0, .repetition_penalty = 1.8},
      {.temperature = 0, .presence_penalty = -0.5, .frequency_penalty = 0.4, .repetition_penalty = 1.3,
       .logit_bias = {{65, 3.0f}, {66, -100.0f}}},
      {.temperature = 0, .logit_bias = {{120, 100.0f}}},
  };
  const auto plain = toy_llm_generate(prompt, 24);
  for (size_t k = 0; k < cases.size(); ++k) {
    auto c = std::make_shared<collected>();
    auto r = request(c, prompt, 24);
    r.sampling = cases[k];
    r.logprobs = 0;
    ASSERT_TRUE(e.submit(std::move(r)));
    ASSERT_TRUE(wait(c));
    const auto want = greedy_with(prompt, 24, cases[k]);
    EXPECT_EQ(c->choices[0].tokens, want) << "case " << k;
    EXPECT_NE(want, plain) << "case " << k << " changes nothing: a check that cannot fail";
    // Log-probabilities are the raw logits', before penalty or bias.
    auto prefix = prompt;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(c->choices[0].logprobs[i].logprob, static_cast<double>(log_softmax_after(prefix)[static_cast<size_t>(want[i])]), kTol);
      prefix.push_back(want[i]);
    }
  }
  e.stop();
}

TEST(LlmChoices, RefusalsCancellationAndNothingLeaks) {
  serving_metrics m;
  llm_engine e({}, make_toy_llm_backend({.num_blocks = 16, .block_tokens = 16, .per_step = std::chrono::milliseconds(2)}),
               make_byte_tokenizer(), &m);
  e.start();
  auto x = std::make_shared<collected>();
  // n x max_tokens beyond the 16-block pool: 20 prompt tokens (1 shared block) + 5 x 4 own blocks.
  auto big = e.submit(request(x, prompt_of(20, 1), 60, 5));
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message().find("lower n or max_tokens"), std::string::npos) << big.error().message();
  auto bad_bias = request(x, prompt_of(4, 1), 4);
  bad_bias.sampling.logit_bias = {{258, 1.0f}};
  auto b = e.submit(std::move(bad_bias));
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message().find("logit_bias names token id 258"), std::string::npos);
  auto zero = e.submit(request(x, prompt_of(4, 1), 0));
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.error().message().find("0 only to score the prompt"), std::string::npos);
  EXPECT_FALSE(e.submit(request(x, prompt_of(4, 1), 4, 0)));
  // A one-token prompt scored: one null, nothing computed.
  auto one = std::make_shared<collected>();
  auto r1 = request(one, {65}, 0);
  r1.prompt_logprobs = true;
  ASSERT_TRUE(e.submit(std::move(r1)));
  ASSERT_TRUE(wait(one));
  ASSERT_EQ(one->choices[0].prompt_logprobs.size(), 1u);
  EXPECT_TRUE(std::isnan(one->choices[0].prompt_logprobs[0].logprob));
  // Scoring with n = 3: every choice ends with the prompt's log-probabilities.
  auto sc = std::make_shared<collected>();
  auto r3 = request(sc, prompt_of(10, 2), 0, 3);
  r3.prompt_logprobs = true;
  ASSERT_TRUE(e.submit(std::move(r3)));
  ASSERT_TRUE(wait(sc));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sc->choices[i].prompt_logprobs.size(), 10u);
    EXPECT_EQ(sc->choices[i].finish_reason, "length");
  }
  // Cancelling a request cancels all its choices, forked or not yet.
  for (int wait_for_fork : {0, 1}) {
    auto c = std::make_shared<collected>();
    auto id = e.submit(request(c, prompt_of(30, 1), 40, 3));
    ASSERT_TRUE(id);
    if (wait_for_fork)
      for (int i = 0; i < 2000 && m.llm.running.load() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    e.cancel(*id);
    ASSERT_TRUE(wait(c));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c->choices[i].finish_reason, "cancelled") << i << " " << wait_for_fork;
  }
  wait_blocks_free(m);
  e.stop();
}

// The OpenAI fields: hostile values are refused naming the field; good ones reach the request.
TEST(OpenaiChoices, FieldsAreReadOrRefusedNamingThem) {
  using nlohmann::json;
  auto read = [](const json& j, bool chat, bool stream = false) {
    llm_request r;
    openai_choices x;
    auto e = read_openai_choices(j, chat, toy_llm_vocab, stream, r, x);
    return std::make_tuple(e, r, x);
  };
  const std::vector<std::tuple<json, bool, bool, std::string>> refused = {
      {{{"n", 0}}, false, false, "n"},
      {{{"n", 129}}, false, false, "n"},
      {{{"n", 1e12}}, true, false, "n"},
      {{{"n", "3"}}, false, false, "n"},
      {{{"n", true}}, false, false, "n"},
      {{{"n", 2.5}}, false, false, "n"},
      {{{"best_of", 2}, {"n", 3}}, false, false, "best_of"},
      {{{"best_of", 21}}, false, false, "best_of"},
      {{{"best_of", 3}}, false, true, "best_of"},
      {{{"logprobs", 21}}, false, false, "logprobs"},
      {{{"logprobs", -1}}, false, false, "logprobs"},
      {{{"logprobs", true}}, false, false, "logprobs"},
      {{{"logprobs", 3}}, true, false, "logprobs"},
      {{{"top_logprobs", 3}}, true, false, "top_logprobs"},
      {{{"logprobs", true}, {"top_logprobs", 21}}, true, false, "top_logprobs"},
      {{{"echo", 1}}, false, false, "echo"},
      {{{"presence_penalty", 2.5}}, false, false, "presence_penalty"},
      {{{"frequency_penalty", "x"}}, true, false, "frequency_penalty"},
      {{{"repetition_penalty", 0}}, false, false, "repetition_penalty"},
      {{{"logit_bias", json::array({1, 2})}}, false, false, "logit_bias"},
      {{{"logit_bias", {{"258", 1}}}}, false, false, "logit_bias"},
      {{{"logit_bias", {{"-1", 1}}}}, false, false, "logit_bias"},
      {{{"logit_bias", {{"12a", 1}}}}, false, false, "logit_bias"},
      {{{"logit_bias", {{"12", 101}}}}, false, false, "logit_bias"},
      {{{"logit_bias", {{"12", "big"}}}}, true, false, "logit_bias"},
  };
  for (const auto& [j, chat, stream, param] : refused) {
    auto [e, r, x] = read(j, chat, stream);
    ASSERT_TRUE(e) << j.dump();
    EXPECT_EQ(e->param, param) << j.dump();
    EXPECT_NE(e->message.find(param), std::string::npos) << e->message;
  }
  auto [e, r, x] = read({{"n", 2}, {"best_of", 4}, {"logprobs", 0}, {"echo", true}, {"presence_penalty", 0.5},
                         {"repetition_penalty", 1.2}, {"logit_bias", {{"65", -100}, {"66", 5.5}}}},
                        false);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.n, 4);
  EXPECT_EQ(x.n, 2);
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_TRUE(r.prompt_logprobs);
  EXPECT_EQ(r.sampling.presence_penalty, 0.5);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.2);
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  auto [e2, r2, x2] = read({{"logprobs", true}, {"top_logprobs", 4}}, true);
  ASSERT_FALSE(e2);
  EXPECT_EQ(r2.logprobs, 4);
  EXPECT_FALSE(r2.prompt_logprobs);
  // best_of above n ranks by log-probabilities even when none are shown.
  auto [e3, r3, x3] = read({{"best_of", 3}}, false);
  ASSERT_FALSE(e3);
  EXPECT_EQ(r3.logprobs, 0);
  EXPECT_EQ(x3.logprobs, -1);
}

TEST(OpenaiChoices, LogprobShapesAndBestOf) {
  auto tok = make_byte_tokenizer();
  token_logprob first;
  first.token = 'H';
  token_logprob t{'i', -0.5, {{'i', -0.5}, {'o', -1.25}}};
  token_logprob half{0xC3, -2.0, {}};  // half of a two-byte character
  auto j = completion_logprobs_json(*tok, {first, t, half});
  EXPECT_EQ(j["tokens"], nlohmann::json({"H", "i", "bytes:\\xc3"}));
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_EQ(j["token_logprobs"][1], -0.5);
  EXPECT_EQ(j["top_logprobs"][1]["o"], -1.25);
  EXPECT_EQ(j["text_offset"], nlohmann::json({0, 1, 2}));
  auto c = chat_logprobs_json(*tok, {t, half}, 1);
  EXPECT_EQ(c["content"][0]["token"], "i");
  EXPECT_EQ(c["content"][0]["bytes"], nlohmann::json({105}));
  EXPECT_EQ(c["content"][0]["top_logprobs"].size(), 1u);
  EXPECT_EQ(c["content"][1]["bytes"], nlohmann::json({0xC3}));
  EXPECT_TRUE(c["refusal"].is_null());
  choice_collector col(3);
  const double means[3] = {-2.0, -0.5, -1.0};
  for (int i = 0; i < 3; ++i) {
    llm_event ev;
    ev.index = i;
    ev.tokens = {65, 66};
    ev.logprobs = {{65, means[i] * 2, {}}, {66, 0.0, {}}};  // sum = 2 * means[i]
    ev.finished = true;
    ev.finish_reason = "length";
    ev.completion_tokens = 2;
    EXPECT_EQ(col.add(ev), i == 2);
  }
  EXPECT_EQ(col.best(1), std::vector<size_t>({1}));
  EXPECT_EQ(col.best(2), std::vector<size_t>({1, 2}));
  EXPECT_EQ(col.completion_tokens(), 6);
  EXPECT_EQ(col.failed(), nullptr);
}

}  // namespace
}  // namespace tessera::serving
