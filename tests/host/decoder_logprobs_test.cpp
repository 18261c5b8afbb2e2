// Log-probabilities for OpenAI's echo + logprobs against an independent reference: the float64
// log-softmax (numpy, models/scripts/make_logprob_goldens.py) of the plain-PyTorch float64 logits
// of the seeded odd-shape checkpoints (goldens.json). The llm_engine scores each prompt with
// max_tokens 0 (lm-evaluation-harness's loglikelihood request: echo, logprobs 5, no token) in
// this process (decoder_model::step) and on a real tile group of 2 tile processes; every prompt
// token's log-probability is within 2e-4 of the golden (the logits are within 1e-4), the top-5
// alternatives are the golden's where the golden separates them, and the continuation's
// log-likelihood (the sum lm-eval takes) within 1e-3. KV blocks are back to 0 after.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <thread>
#include <nlohmann/json.hpp>

#include "../models/util.hpp"
#include "tessera/backends/decoder_backend.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/host/tile_llm_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/toys/toy_llm.hpp"

using namespace tessera;
using namespace tessera::toys;

namespace {

constexpr double kTokenTol = 2e-4;  // per token: logits within 1e-4, and their log-sum-exp
constexpr double kSumTol = 1e-3;    // the continuation's log-likelihood (lm-eval's number)

struct scored {
  std::vector<serving::token_logprob> prompt;
  std::string finish_reason;
  int32_t completion_tokens = -1;
};

scored score(serving::llm_engine& e, const std::vector<int32_t>& ids) {
  auto done = std::make_shared<std::promise<scored>>();
  auto acc = std::make_shared<scored>();
  serving::llm_request r;
  r.prompt = ids;
  r.max_tokens = 0;
  r.prompt_logprobs = true;
  r.logprobs = 5;
  r.on_event = [done, acc](serving::llm_event ev) {
    if (!ev.prompt_logprobs.empty()) acc->prompt = ev.prompt_logprobs;
    if (ev.finished) {
      acc->finish_reason = ev.finish_reason;
      acc->completion_tokens = ev.completion_tokens;
      done->set_value(*acc);
    }
  };
  auto f = done->get_future();
  auto id = e.submit(std::move(r));
  EXPECT_TRUE(id) << id.error().to_string();
  if (!id) return {};
  EXPECT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  return f.get();
}

// Every golden prompt of `model` scored by `e`, checked against the goldens.
void expect_goldens(serving::llm_engine& e, const nlohmann::json& entry, const std::string& where,
                    serving::serving_metrics& m) {
  for (const auto& p : entry["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto got = score(e, ids);
    EXPECT_EQ(got.finish_reason, "length") << where;
    EXPECT_EQ(got.completion_tokens, 0) << where;
    ASSERT_EQ(got.prompt.size(), ids.size()) << where;
    EXPECT_TRUE(std::isnan(got.prompt[0].logprob) && p["prompt_logprobs"][0].is_null()) << where;
    double worst = 0, sum = 0;
    const size_t k = p["context_tokens"].get<size_t>();
    for (size_t i = 1; i < ids.size(); ++i) {
      const double want = p["prompt_logprobs"][i].get<double>();
      EXPECT_EQ(got.prompt[i].token, ids[i]);
      worst = std::max(worst, std::fabs(got.prompt[i].logprob - want));
      if (i >= k) sum += got.prompt[i].logprob;
      const auto& top = p["top5"][i];
      ASSERT_EQ(got.prompt[i].top.size(), 5u) << where << " position " << i;
      for (size_t j = 0; j < 5; ++j) {
        EXPECT_NEAR(got.prompt[i].top[j].second, top[j][1].get<double>(), kTokenTol) << where << " position " << i;
        // The order is only defined where the golden separates neighbours by more than the tolerance.
        const bool separated = (j == 0 || top[j - 1][1].get<double>() - top[j][1].get<double>() > 2 * kTokenTol) &&
                               (j == 4 || top[j][1].get<double>() - top[j + 1][1].get<double>() > 2 * kTokenTol);
        if (separated) EXPECT_EQ(got.prompt[i].top[j].first, top[j][0].get<int32_t>()) << where << " position " << i;
      }
    }
    EXPECT_LT(worst, kTokenTol) << where << ": worst token log-probability error";
    EXPECT_NEAR(sum, p["loglikelihood"].get<double>(), kSumTol) << where << ": continuation log-likelihood";
    std::printf("%s: %zu tokens, worst |logprob - golden| %.2e, loglikelihood %.6f (golden %.6f)\n", where.c_str(),
                ids.size(), worst, sum, p["loglikelihood"].get<double>());
  }
  for (int i = 0; i < 2000 && m.llm.kv_blocks_used.load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(m.llm.kv_blocks_used.load(), 0) << where << ": KV blocks left in use";
}

models::decoder_model odd_model(const std::string& name, uint64_t seed) {
  auto s = models::parse_decoder_config_json(
      models::testing::read_file(models::testing::data_dir() + "/decoders/" + name + ".config.json"));
  EXPECT_TRUE(s) << name;
  s->name = name;
  auto m = models::make_seeded_decoder(*s, seed);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

nlohmann::json goldens() {
  return nlohmann::json::parse(models::testing::read_file(models::testing::data_dir() + "/decoders/logprob_goldens.json"));
}

TEST(DecoderLogprobs, OneProcessMatchesTheFloat64Goldens) {
  const auto g = goldens();
  ASSERT_GE(g["models"].size(), 3u);
  for (const auto& [name, entry] : g["models"].items()) {
    auto model = std::make_shared<const models::decoder_model>(odd_model(name, g["seed"].get<uint64_t>()));
    // 4-position blocks, token budget 5: the scored prompt spans blocks and steps.
    auto b = backends::make_decoder_backend(model, {.kv = {4, 32}, .omp_threads = 2});
    ASSERT_TRUE(b) << b.error().to_string();
    serving::serving_metrics m;
    serving::llm_engine e({.scheduler = {.token_budget = 5}}, *b, toys::make_byte_tokenizer(), &m);
    e.start();
    expect_goldens(e, entry, name + " in one process", m);
    e.stop();
  }
}

TEST(DecoderLogprobs, ARealTileGroupMatchesTheFloat64Goldens) {
  const auto g = goldens();
  for (const auto& [name, entry] : g["models"].items()) {
    auto model = std::make_shared<const models::decoder_model>(odd_model(name, g["seed"].get<uint64_t>()));
    host::placement_request req;
    req.tiles = 2;
    req.tile_memory = 32ull << 20;
    req.token_budget = 32;
    req.max_sequences = 4;
    req.kv_blocks = 32;
    auto c = host::compile_decoder(model->shape(), req);
    ASSERT_TRUE(c) << c.error().message();
    host::tile_group_config gc;
    gc.tiles = 2;
    gc.tile_memory = req.tile_memory;
    auto group = host::tile_group::start(gc);
    ASSERT_TRUE(group) << group.error().to_string();
    auto dec = host::tile_decoder::deploy(**group, std::move(*c), model);
    ASSERT_TRUE(dec) << dec.error().to_string();
    auto backends = host::tile_llm_backend::make(std::move(*dec), "tiles");
    ASSERT_TRUE(backends) << backends.error().to_string();
    serving::serving_metrics m;
    {
      serving::llm_engine e({.scheduler = {.token_budget = 32, .max_running = 4}}, backends->front(),
                            toys::make_byte_tokenizer(), &m);
      e.start();
      expect_goldens(e, entry, name + " on 2 tiles", m);
      e.stop();
    }
    for (auto& b : *backends) b->stop();
  }
}

}  // namespace
