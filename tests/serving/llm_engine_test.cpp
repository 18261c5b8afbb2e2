// The LLM engine (scheduler + sampling + streaming text + metrics on a thread) against the toy
// decoder: greedy outputs equal the cache-free reference under concurrency and preemption, seeds
// give the same tokens whatever shares the batch, stop conditions, cancellation frees blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "tessera/common/random.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/serving/llm_router.hpp"
#include "tessera/toys/toy_llm.hpp"

namespace tessera::serving {
using namespace tessera::toys;
namespace {

struct collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  status error;
  int32_t completion_tokens = 0;
  std::promise<void> done;
};

llm_request request(std::shared_ptr<collected> c, std::vector<int32_t> prompt, int32_t n) {
  llm_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.on_event = [c](llm_event ev) {
    c->tokens.insert(c->tokens.end(), ev.tokens.begin(), ev.tokens.end());
    c->text += ev.text;
    if (ev.finished) {
      c->finish_reason = ev.finish_reason;
      c->error = ev.error;
      c->completion_tokens = ev.completion_tokens;
      c->done.set_value();
    }
  };
  return r;
}

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 31 + salt * 7) % 256);
  return p;
}

bool wait(const std::shared_ptr<collected>& c) {
  return c->done.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
}

TEST(LlmEngine, GreedyOutputsEqualTheReferenceUnderPreemption) {
  serving_metrics m;
  // 12 blocks of 8 positions: 24 concurrent requests of up to 60 positions must take turns.
  llm_engine e({.scheduler = {.token_budget = 48}}, make_toy_llm_backend({.num_blocks = 12, .block_tokens = 8}),
               make_byte_tokenizer(), &m);
  e.start();
  std::vector<std::shared_ptr<collected>> out;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) {
    prompts.push_back(prompt_of(5 + i % 30, i));
    out.push_back(std::make_shared<collected>());
    ASSERT_TRUE(e.submit(request(out.back(), prompts.back(), 3 + i % 25)));
  }
  auto tok = make_byte_tokenizer();
  for (int i = 0; i < 24; ++i) {
    ASSERT_TRUE(wait(out[static_cast<size_t>(i)]));
    auto want = toy_llm_generate(prompts[static_cast<size_t>(i)], 3 + i % 25);
    EXPECT_EQ(out[static_cast<size_t>(i)]->tokens, want) << i;
    EXPECT_EQ(out[static_cast<size_t>(i)]->text, tok->decode(want)) << i;
    EXPECT_EQ(out[static_cast<size_t>(i)]->finish_reason, "length");
    EXPECT_EQ(out[static_cast<size_t>(i)]->completion_tokens, 3 + i % 25);
  }
  EXPECT_GT(m.llm.preemptions.load(), 0u);
  e.stop();
  EXPECT_EQ(m.llm.kv_blocks_used.load(), 0);
  EXPECT_EQ(m.llm.time_to_first_token.count(), 24u);
  const std::string text = m.to_prometheus();
  EXPECT_NE(text.find("tessera_llm_preemptions_total "), std::string::npos);
  EXPECT_NE(text.find("tessera_llm_requests_total{finish_reason=\"length\"} 24"), std::string::npos);
}

TEST(LlmEngine, SameSeedSameTokensWhateverTheLoad) {
  auto run = [](int others) {
    llm_engine e({}, make_toy_llm_backend({.num_blocks = 64}), make_byte_tokenizer(), nullptr);
    e.start();
    std::vector<std::shared_ptr<collected>> noise;
    for (int i = 0; i < others; ++i) {
      noise.push_back(std::make_shared<collected>());
      auto r = request(noise.back(), prompt_of(3 + i, 100 + i), 20);
      r.sampling = {.temperature = 1.0, .seed = static_cast<uint64_t>(i)};
      EXPECT_TRUE(e.submit(std::move(r)));
    }
    auto c = std::make_shared<collected>();
    auto r = request(c, prompt_of(12, 1), 24);
    r.sampling = {.temperature = 0.9, .top_k = 50, .top_p = 0.95, .seed = 1234};
    EXPECT_TRUE(e.submit(std::move(r)));
    EXPECT_TRUE(wait(c));
    for (auto& n : noise) EXPECT_TRUE(wait(n));
    return c->tokens;
  };
  auto alone = run(0);
  EXPECT_EQ(alone.size(), 24u);
  EXPECT_EQ(run(6), alone);
  EXPECT_EQ(run(20), alone);
  EXPECT_NE(alone, toy_llm_generate(prompt_of(12, 1), 24));  // it did sample
}

TEST(LlmEngine, StopsOnStopStringsStopTokensAndEos) {
  llm_engine e({}, make_toy_llm_backend(), make_byte_tokenizer(), nullptr);
  e.start();
  auto p = prompt_of(10, 3);
  auto want = toy_llm_generate(p, 30);
  auto text = make_byte_tokenizer()->decode(want);
  // A stop string from the middle of the greedy text (two bytes: it spans tokens).
  const std::string stop = text.substr(10, 2);
  const size_t at = text.find(stop);
  auto c = std::make_shared<collected>();
  auto r = request(c, p, 30);
  r.stop = {stop};
  ASSERT_TRUE(e.submit(std::move(r)));
  ASSERT_TRUE(wait(c));
  EXPECT_EQ(c->finish_reason, "stop");
  EXPECT_EQ(c->text, text.substr(0, at));
  // A stop token id: the token ends the output and its text is not sent.
  auto d = std::make_shared<collected>();
  r = request(d, p, 30);
  r.stop_token_ids = {want[5]};
  ASSERT_TRUE(e.submit(std::move(r)));
  ASSERT_TRUE(wait(d));
  size_t first = static_cast<size_t>(std::find(want.begin(), want.end(), want[5]) - want.begin());
  EXPECT_EQ(d->finish_reason, "stop");
  EXPECT_EQ(d->tokens.size(), first + 1);
  EXPECT_EQ(d->text, make_byte_tokenizer()->decode({want.begin(), want.begin() + static_cast<long>(first)}));
}

TEST(LlmEngine, StopStringsFoundWhileTheNextStepRunsUnderConcurrencyAndPreemption) {
  // A stop string is matched while the step after its token is already running (the engine sends
  // text while the backend computes): that sequence is dropped from the step's answer. Concurrent
  // requests, a KV pool small enough to preempt, random stop strings from each greedy text: every
  // answer is exactly the text up to its stop, counted tokens equal delivered ones, no block leaks.
  serving_metrics m;
  llm_engine e({.scheduler = {.token_budget = 24}},
               make_toy_llm_backend({.num_blocks = 14, .block_tokens = 8, .max_positions = 200}),
               make_byte_tokenizer(), &m);
  e.start();
  uint64_t rng = 12345;
  auto next = [&](int n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((rng >> 33) % static_cast<uint64_t>(n));
  };
  std::vector<std::shared_ptr<collected>> got;
  std::vector<std::string> want;
  std::vector<bool> stops;
  for (int i = 0; i < 16; ++i) {
    auto p = prompt_of(5 + next(30), i);
    const int n = 8 + next(40);
    const auto text = make_byte_tokenizer()->decode(toy_llm_generate(p, n));
    auto c = std::make_shared<collected>();
    auto r = request(c, p, n);
    std::string expect = text;
    if (i % 4 != 3 && text.size() > 4) {  // three of four stop on text taken from their output
      const size_t from = 1 + static_cast<size_t>(next(static_cast<int>(text.size()) - 3));
      const std::string stop = text.substr(from, 1 + static_cast<size_t>(next(2)));
      r.stop = {stop};
      expect = text.substr(0, text.find(stop));
    }
    stops.push_back(!r.stop.empty());
    ASSERT_TRUE(e.submit(std::move(r)));
    got.push_back(c);
    want.push_back(expect);
  }
  int64_t delivered = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(wait(got[i])) << i;
    EXPECT_EQ(got[i]->text, want[i]) << i;
    EXPECT_EQ(got[i]->finish_reason, stops[i] ? "stop" : "length") << i;
    EXPECT_EQ(got[i]->completion_tokens, static_cast<int32_t>(got[i]->tokens.size())) << i;
    delivered += static_cast<int64_t>(got[i]->tokens.size());
  }
  EXPECT_EQ(static_cast<int64_t>(m.llm.generation_tokens.load()), delivered);
  for (int i = 0; i < 2000 && m.llm.kv_blocks_used.load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(m.llm.kv_blocks_used.load(), 0);
  EXPECT_GT(m.llm.preemptions.load(), 0u);
  e.stop();
}

TEST(LlmEngine, CancellationFreesBlocksAndRefusals) {
  serving_metrics m;
  llm_engine e({}, make_toy_llm_backend({.num_blocks = 16, .block_tokens = 16, .max_positions = 200,
                                          .per_step = std::chrono::milliseconds(2)}),
               make_byte_tokenizer(), &m);
  e.start();
  auto c = std::make_shared<collected>();
  auto id = e.submit(request(c, prompt_of(40, 1), 150));
  ASSERT_TRUE(id);
  for (int i = 0; i < 2000 && m.llm.kv_blocks_used.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GT(m.llm.kv_blocks_used.load(), 0);
  e.cancel(*id);
  ASSERT_TRUE(wait(c));
  EXPECT_EQ(c->finish_reason, "cancelled");
  EXPECT_LT(c->tokens.size(), 150u);
  for (int i = 0; i < 2000 && m.llm.kv_blocks_used.load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(m.llm.kv_blocks_used.load(), 0);
  // Refusals say what to change.
  auto x = std::make_shared<collected>();
  auto too_long = e.submit(request(x, prompt_of(100, 1), 101));
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message().find("maximum context length is 200"), std::string::npos);
  EXPECT_FALSE(e.submit(request(x, {}, 5)));
  EXPECT_FALSE(e.submit(request(x, {1, 300}, 5)));
  e.stop();
  EXPECT_EQ(e.submit(request(x, {1}, 5)).error().code(), errc::cancelled);
}


// The LLM router over engines of three replicas (toy decoders, one of kind "gpu"): random
// requests (seeded lengths, submitted from several threads, some cancelled) all end with the
// reference's tokens or "cancelled"; each replica got work; nothing holds a block afterwards and
// the metrics' KV gauges are the replicas' sums.
// A backend that loses a replica's tile at its `at`-th step, the way tile_llm_backend reports it:
// the tile came back empty (kv_lost: the engine recomputes what was running), or the replica did
// not come back within its recovery limit (a plain failure).
class losing_backend final : public backends::llm_backend {
 public:
  losing_backend(std::shared_ptr<backends::llm_backend> inner, int at, bool back)
      : inner_(std::move(inner)), at_(at), back_(back) {}
  backends::llm_backend_info info() const override { return inner_->info(); }
  void submit(backends::step_batch batch, std::function<void(backends::step_result)> done) override {
    if (++steps_ == at_) {
      backends::step_result r;
      r.kv_lost = back_;
      r.st = back_ ? status::peer_failed("tiles0: a tile failed and was brought back; its KV cache is empty")
                   : status::peer_failed("tiles0: the replica did not come back within 60000 ms: tile 1 did not come back");
      return done(std::move(r));
    }
    inner_->submit(std::move(batch), std::move(done));
  }

 private:
  std::shared_ptr<backends::llm_backend> inner_;
  int at_;
  bool back_;
  std::atomic<int> steps_{0};
};

// The policy for a stream whose replica loses a tile (docs/cluster.md, "LLM streams"): the replica
// comes back and recomputes prompt + generated tokens, and the stream continues with the text it
// would have had; or it does not come back in time, and the stream ends with an error event naming
// why, after a prefix of that text: never a shorter stream that looks complete.
TEST(LlmEngine, AStreamWhoseReplicaLosesATileContinuesUnchangedOrEndsWithAnError) {
  for (bool back : {true, false}) {
    SCOPED_TRACE(back ? "the replica comes back" : "the replica does not come back");
    llm_engine e({}, std::make_shared<losing_backend>(make_toy_llm_backend({.num_blocks = 64}), 6, back),
                 make_byte_tokenizer(), nullptr);
    e.start();
    std::vector<std::shared_ptr<collected>> out;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) {
      prompts.push_back(prompt_of(5 + 3 * i, 40 + i));
      out.push_back(std::make_shared<collected>());
      ASSERT_TRUE(e.submit(request(out.back(), prompts.back(), 20)));
    }
    int errors = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(wait(out[i]));
      const auto want = toy_llm_generate(prompts[i], 20);
      if (back) {
        EXPECT_EQ(out[i]->tokens, want) << i;
        EXPECT_EQ(out[i]->finish_reason, "length") << i;
        continue;
      }
      // Every stream was running at the 6th step: each ends with the error, after a prefix.
      ASSERT_LE(out[i]->tokens.size(), want.size());
      EXPECT_LT(out[i]->tokens.size(), want.size()) << i;
      EXPECT_TRUE(std::equal(out[i]->tokens.begin(), out[i]->tokens.end(), want.begin())) << i;
      EXPECT_EQ(out[i]->finish_reason, "error") << i;
      EXPECT_NE(out[i]->error.message().find("did not come back within"), std::string::npos) << out[i]->error.message();
      errors += out[i]->finish_reason == "error";
    }
    if (!back) EXPECT_EQ(errors, 4);
    e.stop();
  }
}

TEST(LlmRouter, RandomRequestsAcrossReplicasEqualTheReference) {
  serving_metrics m;
  std::vector<std::unique_ptr<llm_engine>> engines;
  for (int i = 0; i < 3; ++i)
    engines.push_back(std::make_unique<llm_engine>(
        llm_engine_config{.scheduler = {.token_budget = 48}},
        make_toy_llm_backend({.name = "toy" + std::to_string(i), .num_blocks = 16 + 8 * i, .block_tokens = 8,
                              .per_step = std::chrono::microseconds(200)}),
        make_byte_tokenizer(), &m));
  auto r = llm_router::make({}, std::move(engines));
  ASSERT_TRUE(r);
  (*r)->start();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  splitmix64 rng(seed);
  constexpr int kRequests = 60;
  std::vector<std::shared_ptr<collected>> out(kRequests);
  std::vector<std::vector<int32_t>> prompts(kRequests);
  std::vector<int32_t> lengths(kRequests);
  std::vector<bool> cancelled(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts[i] = prompt_of(static_cast<int>(rng.uniform(1, 80)), i);
    lengths[i] = static_cast<int32_t>(rng.uniform(1, 40));
    cancelled[i] = rng.uniform(0, 9) == 0;
    out[i] = std::make_shared<collected>();
  }
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t)
    clients.emplace_back([&, t] {
      for (int i = t; i < kRequests; i += 3) {
        auto id = (*r)->submit(request(out[i], prompts[i], lengths[i]));
        ASSERT_TRUE(id) << id.error().message();
        if (cancelled[i]) (*r)->cancel(*id);
      }
    });
  for (auto& c : clients) c.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(wait(out[i])) << i;
    if (out[i]->finish_reason == "cancelled") {
      EXPECT_TRUE(cancelled[i]) << i;
      continue;
    }
    EXPECT_EQ(out[i]->tokens, toy_llm_generate(prompts[i], lengths[i])) << i;
  }
  int64_t routed = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GT((*r)->routed(i), 0) << i;
    routed += (*r)->routed(i);
  }
  EXPECT_EQ(routed, kRequests);
  for (int tries = 0; tries < 1000 && m.llm.kv_blocks_used.load() != 0; ++tries) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(m.llm.kv_blocks_used.load(), 0);
  EXPECT_EQ(m.llm.kv_blocks_free.load(), 16 + 24 + 32);
  auto info = (*r)->describe();
  ASSERT_EQ(info["replicas"].size(), 3u);
  EXPECT_EQ(info["replicas"][2]["kv_blocks_total"], 32);
  (*r)->stop();
}

// A replica whose KV is nearly full is the last choice, and a burst submitted between two steps
// spreads (queued prompts count as taken blocks); hybrid prefers the kind for the length.
TEST(LlmRouter, MostFreeBlocksFirstAndHybridByLength) {
  serving_metrics m;
  std::vector<std::unique_ptr<llm_engine>> engines;
  engines.push_back(std::make_unique<llm_engine>(
      llm_engine_config{}, make_toy_llm_backend({.name = "a", .num_blocks = 32, .block_tokens = 8,
                                                 .per_step = std::chrono::milliseconds(2)}),
      make_byte_tokenizer(), &m));
  engines.push_back(std::make_unique<llm_engine>(
      llm_engine_config{}, make_toy_llm_backend({.name = "b", .num_blocks = 32, .block_tokens = 8,
                                                 .per_step = std::chrono::milliseconds(2)}),
      make_byte_tokenizer(), &m));
  auto r = llm_router::make({}, std::move(engines));
  ASSERT_TRUE(r);
  (*r)->start();
  // Both empty: a tie, the lower index first.
  EXPECT_EQ((*r)->order(10, 20), (std::vector<size_t>{0, 1}));
  // A long request on replica 0 (200 prompt + 40 = 30 of its 32 blocks).
  auto big = std::make_shared<collected>();
  ASSERT_TRUE((*r)->submit(request(big, prompt_of(200, 1), 40)));
  EXPECT_EQ((*r)->routed(0), 1);
  // At once it counts as taken (queued), then as used.
  EXPECT_EQ((*r)->order(10, 20).front(), 1u);
  std::vector<std::shared_ptr<collected>> small;
  for (int i = 0; i < 6; ++i) {
    small.push_back(std::make_shared<collected>());
    ASSERT_TRUE((*r)->submit(request(small.back(), prompt_of(10, i), 4)));
  }
  EXPECT_EQ((*r)->routed(0), 1) << "the nearly full replica got a new request";
  EXPECT_EQ((*r)->routed(1), 6);
  ASSERT_TRUE(wait(big));
  for (auto& s : small) ASSERT_TRUE(wait(s));
  EXPECT_EQ(big->tokens, toy_llm_generate(prompt_of(200, 1), 40));
  // No replica whose context holds the request: the widest one's error.
  auto none = std::make_shared<collected>();
  auto refused = (*r)->submit(request(none, prompt_of(300, 1), 10));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), errc::invalid_argument);
  (*r)->stop();

  // Hybrid: kinds "toy" only, so every candidate is kept (the fallback); prefer_kind_by_length on
  // named kinds picks by length.
  routing_config hybrid{.strategy = routing_strategy::hybrid_length, .long_threshold = 16};
  const std::vector<std::string> kinds = {"tiles", "gpu", "tiles"};
  EXPECT_EQ(prefer_kind_by_length(hybrid, 17, {0, 1, 2}, kinds), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(prefer_kind_by_length(hybrid, 16, {0, 1, 2}, kinds), (std::vector<size_t>{1}));
  EXPECT_EQ(prefer_kind_by_length(hybrid, 16, {0, 2}, kinds), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(prefer_kind_by_length({}, 17, {1, 2}, kinds), (std::vector<size_t>{1, 2}));
}

}  // namespace
}  // namespace tessera::serving
