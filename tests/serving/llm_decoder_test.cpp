// The LLM engine on the reference decoder backend (models::decoder_model::step on a paged KV
// cache): many concurrent greedy requests under chunked prefill, a KV pool small enough to force
// preemption and prompts sharing a prefix (prefix caching) must generate what
// models::greedy_generate generates for each prompt alone. Batched steps may change logits in the
// last bits, so a token may differ only where the reference's top-2 margin is below 1e-4 (the
// sequences are then compared up to there); the test prints how often that happened.
#include <gtest/gtest.h>

#include <future>
#include <iostream>

#include "tessera/backends/decoder_backend.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/toys/toy_llm.hpp"

namespace tessera::serving {
using namespace tessera::toys;
namespace {

struct outcome {
  std::vector<int32_t> tokens;
  std::string finish_reason;
  std::promise<void> done;
};

TEST(LlmDecoder, ConcurrentGreedyRequestsEqualGreedyGenerateAlone) {
  for (const char* preset : {"llama-tiny"}) {  // gpt2-tiny: tests/clients/openai.test.mjs
    auto model = std::make_shared<const models::decoder_model>(models::load_decoder(preset).value());
    // 12 blocks of 8 positions (96): 8 requests of up to 60 positions must take turns.
    auto backend = backends::make_decoder_backend(model, {.kv = {8, 12}});
    ASSERT_TRUE(backend) << backend.error().to_string();
    serving_metrics m;
    llm_engine e({.scheduler = {.token_budget = 24}}, *backend, make_byte_tokenizer(), &m);
    e.start();
    std::vector<int32_t> shared;
    for (int i = 0; i < 20; ++i) shared.push_back(100 + i * 13);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::shared_ptr<outcome>> out;
    for (int r = 0; r < 8; ++r) {
      std::vector<int32_t> p = r % 2 ? shared : std::vector<int32_t>{};
      for (int i = 0; i < 5 + r * 3; ++i) p.push_back(200 + (r * 31 + i * 7) % 900);
      prompts.push_back(p);
      auto o = std::make_shared<outcome>();
      out.push_back(o);
      llm_request req;
      req.prompt = p;
      req.max_tokens = 12 + r;
      req.sampling.temperature = 0;
      req.ignore_eos = true;
      req.on_event = [o](llm_event ev) {
        o->tokens.insert(o->tokens.end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finished) {
          o->finish_reason = ev.finish_reason;
          o->done.set_value();
        }
      };
      ASSERT_TRUE(e.submit(std::move(req)));
    }
    int compared = 0, close_calls = 0;
    for (size_t r = 0; r < out.size(); ++r) {
      ASSERT_EQ(out[r]->done.get_future().wait_for(std::chrono::seconds(120)), std::future_status::ready);
      ASSERT_EQ(out[r]->finish_reason, "length");
      auto want = models::greedy_generate(*model, prompts[r], {.max_tokens = 12 + static_cast<int>(r)}).value();
      ASSERT_EQ(out[r]->tokens.size(), want.tokens.size());
      for (size_t i = 0; i < want.tokens.size(); ++i) {
        if (out[r]->tokens[i] == want.tokens[i]) {
          ++compared;
          continue;
        }
        EXPECT_LT(want.top2_margin[i], 1e-4f) << preset << " request " << r << " token " << i;
        ++close_calls;
        break;  // diverged on a near tie: the rest follows another prefix
      }
    }
    EXPECT_GT(m.llm.preemptions.load(), 0u) << preset;
    EXPECT_GT(m.llm.prefix_hit_tokens.load(), 0u) << preset;
    std::cout << preset << ": " << compared << " tokens equal to greedy_generate, " << close_calls
              << " near ties (top-2 margin < 1e-4), " << m.llm.preemptions.load() << " preemptions, "
              << m.llm.prefix_hit_tokens.load() << " prompt tokens from the prefix cache\n";
    e.stop();
  }
}

}  // namespace
}  // namespace tessera::serving
