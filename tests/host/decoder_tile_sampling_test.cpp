// Sampling on the LM-head tile (the dec_sample kernel, models/token_sampling.hpp) against the host
// path, on real tile processes:
//  - library level: one step whose rows mix greedy, seeded top-k / top-p / temperature, penalties
//    and logit_bias, logprobs, and a row that keeps its logits, against the same prompts stepped
//    with every row's logits sent back and sampled here by the same rules with the same draws:
//    tokens equal, log-probabilities within 1e-12 (the same logits, the same double arithmetic);
//    sampled rows send no logits (the host fetched kSampleRecord int32 a row, not vocab floats);
//  - serving level: llm_engine over a 2-tile backend with sample_on_backend on and off (every
//    logits row to the host, the path before): greedy, seeded sampling (n = 2 choices, penalties,
//    logit_bias, logprobs 5) give the same tokens and log-probabilities, within 1e-12 for requests
//    sent one at a time; sent at once, the rows' batches differ by timing (so do the GEMMs' row
//    counts and the logits, within 1e-5): tokens equal, log-probabilities within 1e-4;
//  - hostile sampling parameters are refused before anything is sent, naming the field, and the
//    engine refuses them at submit.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <limits>

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

constexpr double kLogprobTol = 1e-12;  // the same logits: the same double arithmetic
// Requests sent at once are batched as the engine's thread happens to take them in: a row's logits
// come from GEMMs of other row counts (other summation orders), within 1e-5 of each other.
constexpr double kBatchedLogprobTol = 1e-4;

decoder_deployment deploy(std::shared_ptr<const models::decoder_model> m, int tiles, plan p) {
  return deploy_decoder(std::move(m), tiles, p, {.tile_memory = 48ull << 20, .kv_blocks = 64});
}

std::shared_ptr<const models::decoder_model> preset(const char* name) {
  auto m = models::make_preset_decoder(name, 3);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::make_shared<const models::decoder_model>(std::move(*m));
}

// The rows of one step: what each asks of the sampler.
std::vector<std::optional<models::sample_params>> row_params(int64_t vocab) {
  std::vector<std::optional<models::sample_params>> rows;
  rows.push_back(models::sample_params{.temperature = 0});                                   // greedy
  rows.push_back(models::sample_params{.temperature = 0, .logprobs = 5});                   // greedy + logprobs
  rows.push_back(models::sample_params{.temperature = 0.8, .top_k = 40, .u = 0.37, .logprobs = 3});
  rows.push_back(models::sample_params{.temperature = 1.0, .top_p = 0.9, .u = 0.91});
  rows.push_back(models::sample_params{.temperature = 1.3, .u = 0.5, .logprobs = 0});       // every token
  models::sample_params pen{.temperature = 0.7, .top_k = 50, .top_p = 0.95, .u = 0.12, .logprobs = 2,
                            .presence_penalty = 0.5, .frequency_penalty = 0.3, .repetition_penalty = 1.2};
  pen.history = {{5, 0}, {17, 2}, {int32_t(vocab - 1), 1}};
  pen.logit_bias = {{9, 4.5f}, {17, -100.0f}, {3, 2.0f}};
  rows.push_back(pen);
  rows.push_back(std::nullopt);  // this row keeps its logits
  return rows;
}

// Row r's prompt (distinct per row; the rows together within the token budget).
std::vector<int32_t> prompt_of(size_t r, int64_t vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < 8 + static_cast<int>(r); ++i) p.push_back(static_cast<int32_t>((r * 977 + i * 131 + 7) % vocab));
  return p;
}

void expect_tile_rows_equal_host_rows(const char* model, int tiles, plan p) {
  SCOPED_TRACE(std::string(model) + " on " + std::to_string(tiles) + " tiles, plan " + p.to_string());
  auto m = preset(model);
  auto d = deploy(m, tiles, p);
  ASSERT_TRUE(d.dec);
  const int64_t vocab = m->shape().vocab_size;
  const auto params = row_params(vocab);
  const int bt = d.dec->compiled().kv.block_tokens;
  // The same prompts twice, on disjoint blocks: once with the rows' sample parameters, once
  // with every row's logits sent back.
  models::step_batch with, without;
  int32_t next_block = 0;
  for (size_t r = 0; r < params.size(); ++r)
    for (auto* b : {&with, &without}) {
      models::seq_step s;
      s.seq_id = r;
      s.tokens = prompt_of(r, vocab);
      for (int k = 0; k < (static_cast<int>(s.tokens.size()) + bt - 1) / bt; ++k) s.block_table.push_back(next_block++);
      if (b == &with) s.sample = params[r];
      b->seqs.push_back(std::move(s));
    }
  auto a = d.dec->step(0, with);
  ASSERT_TRUE(a) << a.error().to_string();
  auto h = d.dec->step(0, without);
  ASSERT_TRUE(h) << h.error().to_string();
  ASSERT_EQ(a->samples.size(), params.size());
  ASSERT_EQ(a->logits.size(), params.size());
  ASSERT_EQ(h->logits.size(), params.size());
  EXPECT_TRUE(h->samples.empty());
  models::sample_scratch scratch;
  for (size_t r = 0; r < params.size(); ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const auto& raw = h->logits[r];
    ASSERT_EQ(static_cast<int64_t>(raw.size()), vocab);
    if (!params[r]) {  // the logits row, as without sampling
      EXPECT_EQ(a->samples[r].token, -1);
      EXPECT_EQ(a->logits[r], raw);
      continue;
    }
    EXPECT_TRUE(a->logits[r].empty()) << "a sampled row sent its logits";
    const auto& q = *params[r];
    std::vector<float> adjusted = raw;
    models::adjust_row(adjusted.data(), vocab, q);
    const int32_t want = models::sample_row(adjusted.data(), vocab, q, scratch);
    EXPECT_EQ(a->samples[r].token, want);
    if (q.logprobs < 0) continue;
    const auto lp = models::logprob_of(raw.data(), vocab, want, q.logprobs);
    EXPECT_NEAR(a->samples[r].logprob, lp.logprob, kLogprobTol);
    ASSERT_EQ(a->samples[r].top.size(), lp.top.size());
    for (size_t i = 0; i < lp.top.size(); ++i) {
      EXPECT_EQ(a->samples[r].top[i].first, lp.top[i].first);
      EXPECT_NEAR(a->samples[r].top[i].second, lp.top[i].second, kLogprobTol);
    }
  }
  // A decode step whose rows are all sampled sends back one record a row and no logits.
  models::step_batch next;
  for (size_t r = 0; r + 1 < params.size(); ++r) {
    models::seq_step s = with.seqs[r];
    s.start_pos = static_cast<int32_t>(s.tokens.size());
    s.tokens = {a->samples[r].token};
    s.block_table.push_back(next_block++);
    next.seqs.push_back(std::move(s));
  }
  auto dn = d.dec->step(0, next);
  ASSERT_TRUE(dn) << dn.error().to_string();
  ASSERT_EQ(dn->samples.size(), next.seqs.size());
  for (const auto& l : dn->logits) EXPECT_TRUE(l.empty());
  EXPECT_EQ(dn->output_bytes, next.seqs.size() * models::kSampleRecord * 4);
  EXPECT_EQ(h->output_bytes, params.size() * static_cast<uint64_t>(vocab) * 4);
  for (const auto& t : dn->samples) EXPECT_GE(t.token, 0);
  d.group->shutdown();
}

TEST(TileSampling, RowsSampledOnTheLmHeadTileEqualTheHostPathLlamaWidth2) {
  expect_tile_rows_equal_host_rows("llama-tiny", 2, plan{1, 1, 2, 1});
}

TEST(TileSampling, RowsSampledOnTheLmHeadTileEqualTheHostPathGpt2Pipeline) {
  expect_tile_rows_equal_host_rows("gpt2-tiny", 2, plan{1, 2, 1, 2});
}

TEST(TileSampling, HostileSamplingParametersAreRefusedNamingTheField) {
  auto m = preset("llama-tiny");
  auto d = deploy(m, 1, plan{1, 1, 1, 1});
  ASSERT_TRUE(d.dec);
  const int64_t vocab = m->shape().vocab_size;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct bad_case {
    models::sample_params p;
    bool want_logits;
    std::string names;
  };
  std::vector<bad_case> cases{
      {{.temperature = nan}, true, "temperature"},
      {{.temperature = -1}, true, "temperature"},
      {{.top_k = -3}, true, "top_k"},
      {{.top_p = 0}, true, "top_p"},
      {{.top_p = 1.5}, true, "top_p"},
      {{.u = 1.0}, true, "uniform draw"},
      {{.logprobs = 21}, true, "logprobs"},
      {{.repetition_penalty = 0}, true, "repetition_penalty"},
      {{.presence_penalty = std::numeric_limits<double>::infinity()}, true, "presence_penalty"},
      {{.history = {{int32_t(vocab), 1}}}, true, "history token"},
      {{.history = {{4, -1}}}, true, "negative count"},
      {{.logit_bias = {{-1, 1.0f}}}, true, "logit_bias"},
      {{.logit_bias = {{2, std::numeric_limits<float>::quiet_NaN()}}}, true, "logit_bias"},
      {{}, false, "wants no logits"},
  };
  for (const auto& c : cases) {
    models::step_batch b;
    b.seqs.push_back({.seq_id = 4, .tokens = {1, 2, 3}, .start_pos = 0, .block_table = {0}, .want_logits = c.want_logits,
                      .sample = c.p});
    auto r = d.dec->step(0, b);
    ASSERT_FALSE(r) << c.names;
    EXPECT_EQ(r.error().code(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(c.names), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find("sequence 4"), std::string::npos) << r.error().message();
  }
  // Nothing was run: the group still steps.
  models::step_batch ok;
  ok.seqs.push_back({.seq_id = 1, .tokens = {1, 2, 3}, .start_pos = 0, .block_table = {0}, .sample = models::sample_params{.temperature = 0}});
  auto r = d.dec->step(0, ok);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_GE(r->samples.at(0).token, 0);
  d.group->shutdown();
}

// ---- Serving: llm_engine on tiles with and without tile sampling ----

struct outcome {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::vector<serving::token_logprob>> logprobs;
  std::vector<std::string> finish;
};

outcome run_request(serving::llm_engine& e, serving::llm_request r) {
  auto done = std::make_shared<std::promise<void>>();
  auto out = std::make_shared<outcome>();
  const int n = r.n;
  out->tokens.resize(static_cast<size_t>(n));
  out->logprobs.resize(static_cast<size_t>(n));
  out->finish.resize(static_cast<size_t>(n));
  auto left = std::make_shared<int>(n);
  r.on_event = [done, out, left](serving::llm_event ev) {
    const auto i = static_cast<size_t>(ev.index);
    out->tokens[i].insert(out->tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
    out->logprobs[i].insert(out->logprobs[i].end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finished) {
      out->finish[i] = ev.finish_reason;
      if (--*left == 0) done->set_value();
    }
  };
  auto f = done->get_future();
  auto id = e.submit(std::move(r));
  EXPECT_TRUE(id) << id.error().to_string();
  if (!id) return {};
  EXPECT_EQ(f.wait_for(std::chrono::seconds(120)), std::future_status::ready);
  return *out;
}

std::vector<serving::llm_request> requests() {
  std::vector<serving::llm_request> out;
  auto req = [](std::vector<int32_t> prompt, serving::sampling_params s, int32_t logprobs = -1, int32_t n = 1) {
    serving::llm_request r;
    r.prompt = std::move(prompt);
    r.max_tokens = 12;
    r.sampling = std::move(s);
    r.logprobs = logprobs;
    r.n = n;
    r.ignore_eos = true;
    return r;
  };
  out.push_back(req({72, 101, 108, 108, 111}, {.temperature = 0}, 5));
  out.push_back(req({84, 104, 101, 32}, {.temperature = 0.9, .top_k = 30, .seed = 11}, 2));
  out.push_back(req({65, 66, 67}, {.temperature = 1.0, .top_p = 0.8, .seed = 12}));
  out.push_back(req({100, 101}, {.temperature = 1.0, .seed = 13}, 1, 2));  // two choices: seeds 13, 14
  serving::sampling_params pen{.temperature = 0.8, .top_k = 20, .seed = 14, .presence_penalty = 0.6,
                               .frequency_penalty = 0.4, .repetition_penalty = 1.3};
  pen.logit_bias = {{101, 3.0f}, {32, -50.0f}};
  out.push_back(req({101, 32, 101, 32, 101}, pen, 3));
  return out;
}

TEST(TileSampling, TheEngineOnTilesGivesTheSameTokensAndLogprobsWithAndWithoutTileSampling) {
  auto m = preset("llama-tiny");
  std::vector<outcome> runs[2];
  for (int on = 0; on < 2; ++on) {
    auto d = deploy(m, 2, plan{1, 1, 2, 1});
    ASSERT_TRUE(d.dec);
    auto backends = tile_llm_backend::make(std::move(d.dec), "tiles");
    ASSERT_TRUE(backends) << backends.error().to_string();
    EXPECT_TRUE(backends->front()->info().samples);
    {
      serving::llm_engine e({.scheduler = {.token_budget = 96, .max_running = 8}, .sample_on_backend = on == 1},
                            backends->front(), toys::make_byte_tokenizer(), nullptr);
      e.start();
      // Two rounds: the requests one at a time, then all at once (rows sampled side by side).
      for (auto r : requests()) runs[on].push_back(run_request(e, std::move(r)));
      std::vector<std::future<outcome>> all;
      for (auto r : requests()) all.push_back(std::async(std::launch::async, [&e, r]() mutable { return run_request(e, std::move(r)); }));
      for (auto& f : all) runs[on].push_back(f.get());
      e.stop();
    }
    for (auto& b : *backends) b->stop();
    d.group->shutdown();
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const auto &host = runs[0][i], &tile = runs[1][i];
    const double tol = i < runs[0].size() / 2 ? kLogprobTol : kBatchedLogprobTol;
    ASSERT_EQ(host.tokens.size(), tile.tokens.size());
    for (size_t c = 0; c < host.tokens.size(); ++c) {
      EXPECT_EQ(host.finish[c], "length");
      EXPECT_EQ(tile.finish[c], "length");
      EXPECT_EQ(host.tokens[c].size(), 12u);
      EXPECT_EQ(tile.tokens[c], host.tokens[c]) << "choice " << c;
      ASSERT_EQ(tile.logprobs[c].size(), host.logprobs[c].size());
      for (size_t k = 0; k < host.logprobs[c].size(); ++k) {
        EXPECT_EQ(tile.logprobs[c][k].token, host.logprobs[c][k].token);
        EXPECT_NEAR(tile.logprobs[c][k].logprob, host.logprobs[c][k].logprob, tol);
        ASSERT_EQ(tile.logprobs[c][k].top.size(), host.logprobs[c][k].top.size());
        for (size_t j = 0; j < host.logprobs[c][k].top.size(); ++j) {
          EXPECT_EQ(tile.logprobs[c][k].top[j].first, host.logprobs[c][k].top[j].first);
          EXPECT_NEAR(tile.logprobs[c][k].top[j].second, host.logprobs[c][k].top[j].second, tol);
        }
      }
    }
  }
  // Seeded requests repeat: the same request alone and beside others drew the same tokens.
  const size_t k = runs[1].size() / 2;
  for (size_t i = 0; i < k; ++i) EXPECT_EQ(runs[1][i].tokens, runs[1][k + i].tokens) << "request " << i;
}

TEST(TileSampling, TheEngineRefusesHostileSamplingAtSubmit) {
  auto m = preset("llama-tiny");
  auto d = deploy(m, 1, plan{1, 1, 1, 1});
  ASSERT_TRUE(d.dec);
  auto backends = tile_llm_backend::make(std::move(d.dec), "tiles");
  ASSERT_TRUE(backends);
  serving::llm_engine e({}, backends->front(), toys::make_byte_tokenizer(), nullptr);
  e.start();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<serving::sampling_params, std::string>> cases{
      {{.temperature = nan}, "temperature"}, {{.top_k = -1}, "top_k"}, {{.top_p = nan}, "top_p"},
      {{.repetition_penalty = -2}, "repetition_penalty"}, {{.frequency_penalty = nan}, "frequency_penalty"}};
  for (const auto& [s, names] : cases) {
    serving::llm_request r;
    r.prompt = {1, 2, 3};
    r.sampling = s;
    auto id = e.submit(std::move(r));
    ASSERT_FALSE(id) << names;
    EXPECT_EQ(id.error().code(), errc::invalid_argument);
    EXPECT_NE(id.error().message().find(names), std::string::npos) << id.error().message();
  }
  e.stop();
  for (auto& b : *backends) b->stop();
  d.group->shutdown();
}

}  // namespace
