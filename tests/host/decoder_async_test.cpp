// Async scheduling on real tile processes (llm_engine_config::async_scheduling on a decoder compiled
// with placement_request::feed_tokens): step t+1 is formed and sent while step t runs, its decode
// ids taken on the tiles from step t's samples (dec_next_ids on the out tile, dec_feed on the first
// stage). Against the synchronous engine on the same plan:
//  - requests that end at different steps (max_tokens 3 to 20, a stop token id, a stop string on
//    the text), seeded top-k and top-p sampling with logprobs, a penalised request and n = 2 choices
//    (steps formed after their answers, as without), a long prompt prefilled in chunks beside the
//    decodes, and a second wave sent while the first runs: the same tokens, text and finish
//    reasons; log-probabilities within 1e-4 (rows batched by timing: GEMMs of other row counts);
//  - nothing of a step sent after a sequence ended is streamed or counted (the tokens generated
//    equal the tokens streamed) and every KV block is free at the end; steps were formed ahead
//    (async) and never were (sync);
//  - on tensor parallelism W = 2 (the ids go to the other lane) and a pipeline S = 2 (to stage 0).
// Refused by name: ids that name a previous step's row on a decoder not compiled for it, a row that
// was not sampled on the tiles, and a vocab-parallel head with async scheduling.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "decoder_cases.hpp"
#include "tessera/host/tile_llm_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/toys/toy_llm.hpp"

using namespace tessera;
using namespace tessera::host;
using test_support::decoder_deployment;
using test_support::deploy_decoder;

namespace {

constexpr double kBatchedLogprobTol = 1e-4;  // rows batched by timing (as decoder_tile_sampling_test)

std::shared_ptr<const models::decoder_model> preset(const char* name) {
  auto m = models::make_preset_decoder(name, 3);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::make_shared<const models::decoder_model>(std::move(*m));
}

struct outcome {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::vector<serving::token_logprob>> logprobs;
  std::vector<std::string> text, finish;
};

// A request in flight: its outcome once every choice ended, and the tokens streamed so far.
struct pending {
  std::shared_ptr<outcome> out = std::make_shared<outcome>();
  std::shared_ptr<std::atomic<int>> streamed = std::make_shared<std::atomic<int>>(0);
  std::future<void> done;
};

pending send(serving::llm_engine& e, serving::llm_request r) {
  pending p;
  auto done = std::make_shared<std::promise<void>>();
  p.done = done->get_future();
  const auto n = static_cast<size_t>(r.n);
  p.out->tokens.resize(n), p.out->logprobs.resize(n), p.out->text.resize(n), p.out->finish.resize(n);
  auto left = std::make_shared<int>(r.n);
  r.on_event = [done, out = p.out, streamed = p.streamed, left](serving::llm_event ev) {
    const auto i = static_cast<size_t>(ev.index);
    out->tokens[i].insert(out->tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
    out->logprobs[i].insert(out->logprobs[i].end(), ev.logprobs.begin(), ev.logprobs.end());
    out->text[i] += ev.text;
    *streamed += static_cast<int>(ev.tokens.size());
    if (ev.finished) {
      out->finish[i] = ev.finish_reason;
      if (--*left == 0) done->set_value();
    }
  };
  auto id = e.submit(std::move(r));
  EXPECT_TRUE(id) << id.error().to_string();
  if (!id) done->set_value();
  return p;
}

serving::llm_request req(std::vector<int32_t> prompt, int32_t max_tokens, serving::sampling_params s = {.temperature = 0},
                         int32_t logprobs = -1, int32_t n = 1) {
  serving::llm_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = std::move(s);
  r.logprobs = logprobs;
  r.n = n;
  r.ignore_eos = true;
  return r;
}

std::vector<int32_t> ramp(int n, int from) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(100 + (37 * i + 11 * from) % 20000);
  return v;
}

serving::llm_request biased(int32_t max_tokens) {  // greedy over 'a', 'b', 'c': text to stop on
  auto r = req({65, 66, 67, 10}, max_tokens);
  r.sampling.logit_bias = {{97, 40.0f}, {98, 40.0f}, {99, 40.0f}};
  return r;
}

// Wave 1 (sent at once), then wave 2 (sent once request 1 streamed 4 tokens).
std::vector<serving::llm_request> wave1(int32_t stop_token, const std::string& stop_text) {
  std::vector<serving::llm_request> w;
  w.push_back(req(ramp(5, 0), 5));
  w.push_back(req(ramp(9, 1), 17));
  auto stop_id = req(ramp(6, 2), 20);
  stop_id.stop_token_ids = {stop_token};
  w.push_back(stop_id);
  auto stop_str = biased(20);
  stop_str.stop = {stop_text};
  w.push_back(stop_str);
  w.push_back(req(ramp(4, 3), 12, {.temperature = 0.9, .top_k = 30, .seed = 11}, 2));
  w.push_back(req(ramp(7, 4), 9, {.temperature = 1.0, .top_p = 0.8, .seed = 12}));
  w.push_back(req(ramp(5, 5), 6, {.temperature = 0.8, .top_k = 20, .seed = 14, .presence_penalty = 0.6}));
  return w;
}
std::vector<serving::llm_request> wave2() {
  std::vector<serving::llm_request> w;
  w.push_back(req(ramp(3, 6), 8, {.temperature = 1.0, .seed = 13}, 1, 2));  // two choices: seeds 13, 14
  w.push_back(req(ramp(130, 7), 11));                                      // prefilled in 2 chunks
  w.push_back(req(ramp(2, 8), 3));
  return w;
}

struct engine_run {
  std::vector<outcome> outs;
  int64_t ahead = 0, generated = 0, streamed = 0, kv_used = -1;
};

engine_run run_engine(std::shared_ptr<const models::decoder_model> m, plan p, bool async,
                      const std::vector<serving::llm_request>& first, const std::vector<serving::llm_request>& second) {
  engine_run out;
  auto d = deploy_decoder(std::move(m), 2, p, {.tile_memory = 48ull << 20, .kv_blocks = 64, .feed_tokens = async});
  EXPECT_TRUE(d.dec);
  if (!d.dec) return out;
  auto backends = tile_llm_backend::make(std::move(d.dec), "tiles");
  EXPECT_TRUE(backends) << backends.error().to_string();
  if (!backends) return out;
  EXPECT_EQ(backends->front()->info().feeds, async);
  serving::serving_metrics metrics;
  {
    serving::llm_engine e({.scheduler = {.token_budget = 96, .max_running = 8}, .async_scheduling = async},
                          backends->front(), toys::make_byte_tokenizer(), &metrics);
    e.start();
    std::vector<pending> all;
    for (const auto& r : first) all.push_back(send(e, r));
    if (!second.empty()) {
      // The second wave joins while the first runs: once request 1 has streamed 4 tokens.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (*all[1].streamed < 4 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      EXPECT_GE(*all[1].streamed, 4);
      for (const auto& r : second) all.push_back(send(e, r));
    }
    for (auto& p : all) {
      EXPECT_EQ(p.done.wait_for(std::chrono::seconds(120)), std::future_status::ready);
      out.outs.push_back(*p.out);
      out.streamed += *p.streamed;
    }
    out.ahead = e.steps_formed_ahead();
    e.stop();
  }
  out.generated = static_cast<int64_t>(metrics.llm.generation_tokens.load());
  out.kv_used = metrics.llm.kv_blocks_used.load();
  for (auto& b : *backends) b->stop();
  d.group->shutdown();
  return out;
}

void expect_same(const engine_run& sync, const engine_run& async) {
  ASSERT_EQ(sync.outs.size(), async.outs.size());
  for (size_t i = 0; i < sync.outs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const auto &a = sync.outs[i], &b = async.outs[i];
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    for (size_t c = 0; c < a.tokens.size(); ++c) {
      EXPECT_EQ(b.tokens[c], a.tokens[c]) << "choice " << c;
      EXPECT_EQ(b.text[c], a.text[c]) << "choice " << c;
      EXPECT_EQ(b.finish[c], a.finish[c]) << "choice " << c;
      ASSERT_EQ(b.logprobs[c].size(), a.logprobs[c].size());
      for (size_t k = 0; k < a.logprobs[c].size(); ++k) {
        EXPECT_EQ(b.logprobs[c][k].token, a.logprobs[c][k].token);
        EXPECT_NEAR(b.logprobs[c][k].logprob, a.logprobs[c][k].logprob, kBatchedLogprobTol);
      }
    }
  }
}

class AsyncScheduling : public ::testing::TestWithParam<plan> {};

TEST_P(AsyncScheduling, TheEngineGivesTheSameOutputsAsSynchronousSteps) {
  auto m = preset("llama-tiny");
  // What to stop on: request 2's 7th greedy token and 2 characters of the biased request's text.
  auto probe = run_engine(m, GetParam(), false, {req(ramp(6, 2), 20), biased(20)}, {});
  ASSERT_EQ(probe.outs.size(), 2u);
  ASSERT_EQ(probe.outs[0].tokens[0].size(), 20u);
  ASSERT_GE(probe.outs[1].text[0].size(), 12u) << "the biased request makes no text";
  const int32_t stop_token = probe.outs[0].tokens[0][6];
  const std::string stop_text = probe.outs[1].text[0].substr(8, 2);

  auto sync = run_engine(m, GetParam(), false, wave1(stop_token, stop_text), wave2());
  auto async = run_engine(m, GetParam(), true, wave1(stop_token, stop_text), wave2());
  expect_same(sync, async);
  ASSERT_EQ(async.outs.size(), 10u);
  EXPECT_EQ(async.outs[2].finish[0], "stop");  // the stop token
  EXPECT_LE(async.outs[2].tokens[0].size(), 7u);
  EXPECT_EQ(async.outs[3].finish[0], "stop");  // the stop string
  EXPECT_LT(async.outs[3].tokens[0].size(), 20u);
  EXPECT_EQ(async.outs[0].finish[0], "length");
  EXPECT_EQ(async.outs[0].tokens[0].size(), 5u);
  EXPECT_EQ(async.outs[7].tokens.size(), 2u);  // n = 2
  // Only what was streamed was counted; every block came back; steps went ahead only async.
  for (const auto* r : {&sync, &async}) {
    EXPECT_EQ(r->generated, r->streamed);
    EXPECT_EQ(r->kv_used, 0);
  }
  EXPECT_EQ(sync.ahead, 0);
  EXPECT_GT(async.ahead, 5);
}

INSTANTIATE_TEST_SUITE_P(Plans, AsyncScheduling, ::testing::Values(plan{1, 1, 2, 1}, plan{1, 2, 1, 1}),
                         [](const auto& info) { return info.param.width == 2 ? std::string("W2") : std::string("S2"); });

TEST(AsyncSchedulingRefusals, RowsOfAPreviousStepNeedTheFeedAndASampledRow) {
  auto m = preset("llama-tiny");
  // A decoder not compiled for async scheduling refuses an id that names a row, saying why.
  {
    auto d = deploy_decoder(m, 2, plan{1, 1, 2, 1}, {.tile_memory = 48ull << 20, .kv_blocks = 16});
    ASSERT_TRUE(d.dec);
    models::step_batch b{{{.seq_id = 1, .tokens = {-1}, .start_pos = 0, .block_table = {0}}}};
    auto r = d.dec->step(0, b);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find("async scheduling"), std::string::npos) << r.error().message();
    d.group->shutdown();
  }
  // Compiled for it: a row past the step's rows is refused before anything is sent; a row the
  // last step did not sample on the tiles is refused by the backend, naming the row.
  auto d = deploy_decoder(m, 2, plan{1, 1, 2, 1}, {.tile_memory = 48ull << 20, .kv_blocks = 16, .feed_tokens = true});
  ASSERT_TRUE(d.dec);
  {
    models::step_batch b{{{.seq_id = 1, .tokens = {-9}, .start_pos = 0, .block_table = {0}}}};
    auto r = d.dec->step(0, b);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message().find("at most 8 rows"), std::string::npos) << r.error().message();
  }
  auto backends = tile_llm_backend::make(std::move(d.dec), "tiles");
  ASSERT_TRUE(backends);
  auto step = [&](models::step_batch b) {
    std::promise<backends::step_result> p;
    backends->front()->submit(std::move(b), [&](backends::step_result r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  };
  // Logits, not a sample: the next step cannot take its token.
  auto first = step({{{.seq_id = 1, .tokens = {5, 6, 7}, .start_pos = 0, .block_table = {0}}}});
  ASSERT_TRUE(first.st.ok()) << first.st.to_string();
  auto second = step({{{.seq_id = 1, .tokens = {-1}, .start_pos = 3, .block_table = {0}}}});
  ASSERT_FALSE(second.st.ok());
  EXPECT_NE(second.st.message().find("row 0 of the previous step"), std::string::npos) << second.st.message();
  // Sampled on the tiles (greedy): the next step takes it, as if the host had sent it.
  auto third = step({{{.seq_id = 1, .tokens = {5, 6, 7}, .start_pos = 0, .block_table = {0},
                       .sample = models::sample_params{.temperature = 0}}}});
  ASSERT_TRUE(third.st.ok()) << third.st.to_string();
  ASSERT_EQ(third.samples.size(), 1u);
  auto fed = step({{{.seq_id = 1, .tokens = {-1}, .start_pos = 3, .block_table = {0},
                     .sample = models::sample_params{.temperature = 0}}}});
  ASSERT_TRUE(fed.st.ok()) << fed.st.to_string();
  auto sent = step({{{.seq_id = 1, .tokens = {third.samples[0].token}, .start_pos = 3, .block_table = {0},
                      .sample = models::sample_params{.temperature = 0}}}});
  ASSERT_TRUE(sent.st.ok()) << sent.st.to_string();
  ASSERT_EQ(fed.samples.size(), 1u);
  ASSERT_EQ(sent.samples.size(), 1u);
  EXPECT_EQ(fed.samples[0].token, sent.samples[0].token);
  for (auto& b : *backends) b->stop();
  d.group->shutdown();
}

TEST(AsyncSchedulingRefusals, AVocabParallelHeadIsRefusedNamingTheOption) {
  auto m = preset("llama-tiny");
  placement_request req;
  req.tiles = 2;
  req.tile_memory = 48ull << 20;
  req.token_budget = 96;
  req.max_sequences = 8;
  req.forced = plan{1, 1, 2, 1, 2};
  req.feed_tokens = true;
  auto c = compile_decoder(m->shape(), req);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), errc::invalid_argument);
  EXPECT_NE(c.error().message().find("--async-scheduling"), std::string::npos) << c.error().message();
}

}  // namespace
