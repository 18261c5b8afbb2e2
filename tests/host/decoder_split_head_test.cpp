// A vocab-parallel LM head (plan V > 1: the head's vocabulary rows over V tiles, sampling merged on
// the out tile from the slices' records) on real tile processes, for llama-tiny and gpt2-tiny
// (tied embeddings: each slice holds a copy of its embedding rows), fp32 and bf16, V = 2 and 3
// (slices on the last stage's lanes and on an earlier stage's tile):
//  - one step's rows (greedy, greedy + logprobs, seeded top-k, top-k + top-p, penalties +
//    logit_bias, top_p alone and temperature over every token, a row without sampling) against
//    the same rows' logits gathered from the slices and sampled here: tokens equal, log-
//    probabilities within 1e-12 (the same logits; only the log-sum-exp's order differs); the
//    rows a split head cannot draw exactly on its tiles (top_p alone, every token) come back as
//    logits (token -1);
//  - generation step by step, split against the unsplit head of the same R x S x W plan, every
//    row's uniform the same: tokens equal, log-probabilities within 1e-5 relative;
//  - an all-sampled decode step sends the host one record a row, as the unsplit head;
//  - plans the split cannot take are refused naming V; hostile sampling is refused as unsplit;
//  - the automatic plan splits the head when the whole head does not fit a tile;
//  - llm_engine serving from a split head (V = 2) and from the unsplit head: requests one at a
//    time (greedy + logprobs, seeded top-k, top_p, every token with two choices, penalties +
//    logit_bias) give the same tokens, log-probabilities within 1e-5 relative.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <limits>

#include "decoder_cases.hpp"
#include "tessera/host/tile_decoder.hpp"
#include "tessera/host/tile_llm_backend.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/token_sampling.hpp"
#include "tessera/serving/llm_engine.hpp"
#include "tessera/toys/toy_llm.hpp"

using namespace tessera;
using namespace tessera::host;

namespace {

constexpr double kSameLogitsTol = 1e-12;  // tile merge vs host sampling of the same gathered logits
constexpr double kRelTol = 1e-5;          // split vs unsplit head (relative)

bool bf16_cpu() { return models::check_dtype_supported(models::dtype::bf16).ok(); }

test_support::decoder_deployment deploy(std::shared_ptr<const models::decoder_model> m, plan p, models::dtype dt) {
  return test_support::deploy_decoder(std::move(m), p.tiles(), p,
                                      {.tile_memory = 64ull << 20, .kv_blocks = 64, .dtype = dt, .token_budget = 128, .max_sequences = 10});
}

std::shared_ptr<const models::decoder_model> preset(const std::string& name) {
  auto m = models::make_preset_decoder(name, 5);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::make_shared<const models::decoder_model>(std::move(*m));
}

// Each row's sampling; u is set per step.
std::vector<std::optional<models::sample_params>> row_params(int64_t vocab) {
  std::vector<std::optional<models::sample_params>> rows;
  rows.push_back(models::sample_params{.temperature = 0});
  rows.push_back(models::sample_params{.temperature = 0, .logprobs = 5});
  rows.push_back(models::sample_params{.temperature = 0.8, .top_k = 40, .logprobs = 3});
  rows.push_back(models::sample_params{.temperature = 1.2, .top_k = 64, .top_p = 0.7, .logprobs = 0});
  models::sample_params pen{.temperature = 0.7, .top_k = 50, .top_p = 0.95, .logprobs = 2, .presence_penalty = 0.5,
                            .frequency_penalty = 0.3, .repetition_penalty = 1.2};
  pen.logit_bias = {{9, 4.5f}, {17, -100.0f}, {int32_t(vocab - 1), 6.0f}, {3, 2.0f}};
  rows.push_back(pen);
  models::sample_params greedy_pen{.temperature = 0, .logprobs = 1, .repetition_penalty = 1.5};
  greedy_pen.logit_bias = {{int32_t(vocab - 2), 3.0f}};
  rows.push_back(greedy_pen);
  rows.push_back(models::sample_params{.temperature = 1.0, .top_p = 0.9, .logprobs = 1});  // logits to the host
  rows.push_back(models::sample_params{.temperature = 1.3});                               // every token: the host
  rows.push_back(std::nullopt);                                                              // keeps its logits
  return rows;
}

std::vector<int32_t> prompt_of(size_t r, int64_t vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < 6 + static_cast<int>(r); ++i) p.push_back(static_cast<int32_t>((r * 977 + i * 131 + 7) % vocab));
  return p;
}

double uniform_of(size_t row, int step) { return std::fmod(0.137 + 0.618033988 * double(row * 7 + step * 3), 1.0); }

// A row answered by the tiles or (token -1) by its logits, sampled here as the engine would.
models::token_logprob answer(const tile_step_result& out, size_t i, const std::optional<models::sample_params>& q,
                             int64_t vocab) {
  if (!out.samples.empty() && out.samples[i].token >= 0) return out.samples[i];
  const auto& raw = out.logits.at(i);
  EXPECT_EQ(static_cast<int64_t>(raw.size()), vocab);
  models::sample_params p = q.value_or(models::sample_params{.temperature = 0});
  std::vector<float> adjusted = raw;
  models::adjust_row(adjusted.data(), vocab, p);
  models::sample_scratch s;
  const int32_t t = models::sample_row(adjusted.data(), vocab, p, s);
  if (p.logprobs < 0) return {.token = t};
  return models::logprob_of(raw.data(), vocab, t, p.logprobs);
}

void expect_near_rel(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::max(1.0, std::abs(want))) << what << ": " << got << " vs " << want;
}

struct split_case {
  const char* model;
  models::dtype dtype;
  plan split;  // its V = 1 twin is the reference
};

class SplitHead : public ::testing::TestWithParam<split_case> {};

TEST_P(SplitHead, RowsMergedFromTheSlicesEqualTheUnsplitHead) {
  const auto& pc = GetParam();
  if (pc.dtype == models::dtype::bf16 && !bf16_cpu()) GTEST_SKIP() << "no native bf16 on this CPU";
  auto m = preset(pc.model);
  plan whole = pc.split;
  whole.vocab_slices = 1;
  auto ds = deploy(m, pc.split, pc.dtype);
  ASSERT_TRUE(ds.dec);
  auto du = deploy(m, whole, pc.dtype);
  ASSERT_TRUE(du.dec);
  EXPECT_NE(ds.dec->compiled().describe().find("LM head split by vocabulary over " + std::to_string(pc.split.vocab_slices)),
            std::string::npos)
      << ds.dec->compiled().describe();
  const int64_t vocab = m->shape().vocab_size;
  auto params = row_params(vocab);
  const int bt = ds.dec->compiled().kv.block_tokens;

  // 1. One prefill step: the merged rows against the same rows' gathered logits sampled here.
  models::step_batch with, without;
  int32_t next_block = 0;
  std::vector<std::vector<int32_t>> blocks(params.size());
  for (size_t r = 0; r < params.size(); ++r) {
    if (params[r]) params[r]->u = uniform_of(r, 0);
    for (auto* b : {&with, &without}) {
      models::seq_step s;
      s.seq_id = r;
      s.tokens = prompt_of(r, vocab);
      for (int k = 0; k < (static_cast<int>(s.tokens.size()) + bt - 1) / bt + (b == &with ? 3 : 0); ++k)
        s.block_table.push_back(next_block++);
      if (b == &with) {
        s.sample = params[r];
        blocks[r] = s.block_table;
      }
      b->seqs.push_back(std::move(s));
    }
  }
  auto a = ds.dec->step(0, without);  // the gathered logits first (disjoint blocks)
  ASSERT_TRUE(a) << a.error().to_string();
  auto sa = ds.dec->step(0, with);
  ASSERT_TRUE(sa) << sa.error().to_string();
  ASSERT_EQ(sa->samples.size(), params.size());
  ASSERT_EQ(a->logits.size(), params.size());
  for (size_t r = 0; r < params.size(); ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const auto& raw = a->logits[r];
    ASSERT_EQ(static_cast<int64_t>(raw.size()), vocab);
    const bool on_tiles = params[r] && models::split_samplable(*params[r], vocab);
    if (!on_tiles) {
      EXPECT_EQ(sa->samples[r].token, -1);
      EXPECT_EQ(sa->logits[r], raw);
      continue;
    }
    EXPECT_TRUE(sa->logits[r].empty()) << "a row merged on the tiles sent its logits";
    const auto want = answer(*a, r, params[r], vocab);
    EXPECT_EQ(sa->samples[r].token, want.token);
    if (params[r]->logprobs < 0) continue;
    EXPECT_NEAR(sa->samples[r].logprob, want.logprob, kSameLogitsTol);
    ASSERT_EQ(sa->samples[r].top.size(), want.top.size());
    for (size_t i = 0; i < want.top.size(); ++i) {
      EXPECT_EQ(sa->samples[r].top[i].first, want.top[i].first);
      EXPECT_NEAR(sa->samples[r].top[i].second, want.top[i].second, kSameLogitsTol);
    }
  }
  // The gathered logits are the unsplit head's (the same rows' dot products).
  auto u0 = du.dec->step(0, without);
  ASSERT_TRUE(u0) << u0.error().to_string();
  for (size_t r = 0; r < params.size(); ++r) {
    double mx = 1, diff = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      mx = std::max(mx, std::abs(double(u0->logits[r][i])));
      diff = std::max(diff, std::abs(double(u0->logits[r][i]) - a->logits[r][i]));
    }
    EXPECT_LE(diff, kRelTol * mx) << "row " << r;
  }

  // 2. Generation: the prefill above, then decode steps, split and unsplit, the same uniforms.
  auto su = du.dec->step(0, with);
  ASSERT_TRUE(su) << su.error().to_string();
  std::vector<std::vector<int32_t>> text[2];
  for (auto& t : text) t.resize(params.size());
  for (size_t r = 0; r < params.size(); ++r)
    for (int which = 0; which < 2; ++which) text[which][r] = prompt_of(r, vocab);
  const tile_step_result* last[2] = {&*sa, &*su};
  std::optional<result<tile_step_result>> steps[2];
  const int decode_steps = 6;
  for (int step = 0; step <= decode_steps; ++step) {
    for (size_t r = 0; r < params.size(); ++r) {
      SCOPED_TRACE("step " + std::to_string(step) + " row " + std::to_string(r));
      auto q = params[r];
      if (q) q->u = uniform_of(r, step);
      const auto got = answer(*last[0], r, q, vocab), ref = answer(*last[1], r, q, vocab);
      ASSERT_EQ(got.token, ref.token);
      if (q && q->logprobs >= 0) {
        expect_near_rel(got.logprob, ref.logprob, kRelTol, "logprob");
        ASSERT_EQ(got.top.size(), ref.top.size());
        for (size_t i = 0; i < ref.top.size(); ++i) {
          EXPECT_EQ(got.top[i].first, ref.top[i].first);
          expect_near_rel(got.top[i].second, ref.top[i].second, kRelTol, "top logprob");
        }
      }
      for (auto& t : text) t[r].push_back(got.token);
    }
    if (step == decode_steps) break;
    models::step_batch next;
    for (size_t r = 0; r < params.size(); ++r) {
      models::seq_step s;
      s.seq_id = r;
      s.start_pos = static_cast<int32_t>(text[0][r].size() - 1);
      s.tokens = {text[0][r].back()};
      s.block_table = blocks[r];
      if (params[r]) {
        s.sample = params[r];
        s.sample->u = uniform_of(r, step + 1);
        s.sample->history = models::history_of(text[0][r], prompt_of(r, vocab).size(), vocab);
      }
      next.seqs.push_back(std::move(s));
    }
    for (int which = 0; which < 2; ++which) {
      steps[which] = (which == 0 ? ds : du).dec->step(0, next);
      ASSERT_TRUE(*steps[which]) << steps[which]->error().to_string();
      last[which] = &**steps[which];
    }
  }
  EXPECT_EQ(text[0], text[1]);

  // 3. A decode step whose rows all merge on the tiles sends one record a row, as unsplit.
  models::step_batch merged;
  for (size_t r = 0; r < params.size(); ++r) {
    if (!params[r] || !models::split_samplable(*params[r], vocab)) continue;
    models::seq_step s;
    s.seq_id = r;
    s.start_pos = static_cast<int32_t>(text[0][r].size() - 1);
    s.tokens = {text[0][r].back()};
    s.block_table = blocks[r];
    s.sample = params[r];
    merged.seqs.push_back(std::move(s));
  }
  auto ms = ds.dec->step(0, merged);
  ASSERT_TRUE(ms) << ms.error().to_string();
  auto mu = du.dec->step(0, merged);
  ASSERT_TRUE(mu) << mu.error().to_string();
  EXPECT_EQ(ms->output_bytes, merged.seqs.size() * models::kSampleRecord * 4);
  EXPECT_EQ(ms->output_bytes, mu->output_bytes);
  for (size_t i = 0; i < merged.seqs.size(); ++i) EXPECT_EQ(ms->samples[i].token, mu->samples[i].token) << "row " << i;
  ds.group->shutdown();
  du.group->shutdown();
}

// llama-tiny: 4 query heads, 2 kv heads, vocab 32000; gpt2-tiny: tied, vocab 50257 (uneven slices).
INSTANTIATE_TEST_SUITE_P(
    Plans, SplitHead,
    ::testing::Values(split_case{"llama-tiny", models::dtype::fp32, plan{1, 1, 2, 1, 2}},
                      split_case{"llama-tiny", models::dtype::fp32, plan{1, 2, 2, 2, 3}},  // slice 2 on stage 0
                      split_case{"gpt2-tiny", models::dtype::fp32, plan{1, 2, 1, 2, 2}},   // slice 1 holds the embedding too
                      split_case{"gpt2-tiny", models::dtype::fp32, plan{1, 1, 3, 1, 3}},
                      split_case{"llama-tiny", models::dtype::bf16, plan{1, 1, 3, 1, 3}},
                      split_case{"gpt2-tiny", models::dtype::bf16, plan{1, 1, 2, 1, 2}}),
    [](const ::testing::TestParamInfo<split_case>& i) {
      std::string n = std::string(i.param.model) + "_" + std::string(models::dtype_name(i.param.dtype)) + "_S" +
                      std::to_string(i.param.split.stages) + "W" + std::to_string(i.param.split.width) + "V" +
                      std::to_string(i.param.split.vocab_slices);
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

TEST(SplitHeadPlans, PlansTheSplitCannotTakeAreRefusedNamingV) {
  auto shape = models::shape_preset("llama-tiny");
  ASSERT_TRUE(shape);
  placement_request req;
  req.tiles = 2;
  req.tile_memory = 64ull << 20;
  req.token_budget = 64;
  req.kv_blocks = 64;
  req.forced = plan{1, 1, 2, 1, 3};
  auto c = compile_decoder(*shape, req);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code(), errc::invalid_argument);
  EXPECT_NE(c.error().message().find("V=3 LM-head vocabulary slices"), std::string::npos) << c.error().message();
  req.forced = plan{2, 1, 1, 1, 2};  // two replicas of one tile each
  c = compile_decoder(*shape, req);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("S x W = 1"), std::string::npos) << c.error().message();
  auto bert = models::preset_config("bert-tiny");
  ASSERT_TRUE(bert);
  req.forced = plan{1, 1, 2, 1, 2};
  auto b = compile_bert(*bert, req);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message().find("V (LM-head vocabulary slices) is for decoders"), std::string::npos) << b.error().message();
  for (const char* bad : {"1,1,2,1,0", "1,1,2,1,2,1", "1,1,2,1,x"}) {
    auto p = parse_plan(bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_NE(p.error().message().find("R,S,W,M,V"), std::string::npos) << p.error().message();
  }
  auto p = parse_plan("1,1,2,1,2");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->vocab_slices, 2);
  EXPECT_EQ(p->to_string(), "R=1 S=1 W=2 M=1 V=2");
  EXPECT_EQ(parse_plan("1,1,2")->to_string(), "R=1 S=1 W=2 M=1");
}

TEST(SplitHeadPlans, TheAutomaticPlanSplitsTheHeadWhenItDoesNotFitATile) {
  auto shape = models::shape_preset("llama-tiny");
  ASSERT_TRUE(shape);
  placement_request req;
  req.tiles = 4;
  req.token_budget = 64;
  req.max_sequences = 8;
  req.kv_blocks = 160;
  req.tile_memory = 256ull << 20;
  auto fullest = [&](plan p) -> uint64_t {
    req.forced = p;
    auto c = compile_decoder(*shape, req);
    EXPECT_TRUE(c) << c.error().message();
    uint64_t most = 0;
    if (c)
      for (const auto& t : c->tiles) most = std::max(most, t.total_bytes());
    return most;
  };
  // S=2 W=2: the embedding on stage 0's lanes, the 16 MB head (and its logits) on stage 1's lane 0.
  const uint64_t unsplit = fullest(plan{1, 2, 2, 2}), split = fullest(plan{1, 2, 2, 2, 2});
  ASSERT_LT(split, unsplit);
  req.forced.reset();
  auto roomy = compile_decoder(*shape, req);
  ASSERT_TRUE(roomy) << roomy.error().message();
  EXPECT_EQ(roomy->chosen.vocab_slices, 1) << "the whole head fits: it stays whole";
  // Tiles that hold half the head but not all of it: the automatic plan splits it.
  req.tile_memory = (split + unsplit) / 2;
  auto tight = compile_decoder(*shape, req);
  ASSERT_TRUE(tight) << tight.error().message();
  EXPECT_GT(tight->chosen.vocab_slices, 1) << tight->describe();
  for (const auto& t : tight->tiles) EXPECT_LE(t.total_bytes(), req.tile_memory);
  // Forced unsplit, the same plan does not fit.
  req.forced = plan{1, 2, 2, 2};
  auto refused = compile_decoder(*shape, req);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), errc::out_of_memory);
}

TEST(SplitHeadPlans, HostileSamplingIsRefusedOnASplitHeadAsOnOneTile) {
  auto m = preset("llama-tiny");
  auto d = deploy(m, plan{1, 1, 2, 1, 2}, models::dtype::fp32);
  ASSERT_TRUE(d.dec);
  const int64_t vocab = m->shape().vocab_size;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<models::sample_params, std::string>> cases{
      {{.temperature = nan}, "temperature"},
      {{.top_k = -3}, "top_k"},
      {{.top_p = 1.5}, "top_p"},
      {{.u = 1.0}, "uniform draw"},
      {{.logprobs = 21}, "logprobs"},
      {{.repetition_penalty = 0}, "repetition_penalty"},
      {{.history = {{int32_t(vocab), 1}}}, "history token"},
      {{.logit_bias = {{int32_t(vocab), 1.0f}}}, "logit_bias"},
  };
  for (const auto& [p, names] : cases) {
    models::step_batch b;
    b.seqs.push_back({.seq_id = 4, .tokens = {1, 2, 3}, .start_pos = 0, .block_table = {0}, .sample = p});
    auto r = d.dec->step(0, b);
    ASSERT_FALSE(r) << names;
    EXPECT_EQ(r.error().code(), errc::invalid_argument);
    EXPECT_NE(r.error().message().find(names), std::string::npos) << r.error().message();
  }
  models::step_batch ok;
  ok.seqs.push_back({.seq_id = 1, .tokens = {1, 2, 3}, .start_pos = 0, .block_table = {0},
                     .sample = models::sample_params{.temperature = 0, .logprobs = 2}});
  auto r = d.dec->step(0, ok);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_GE(r->samples.at(0).token, 0);
  EXPECT_EQ(r->samples.at(0).top.size(), 2u);
  d.group->shutdown();
}

// ---- Serving: llm_engine from a split head and from the unsplit head ----

struct outcome {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::vector<serving::token_logprob>> logprobs;
};

outcome run_request(serving::llm_engine& e, serving::llm_request r) {
  auto done = std::make_shared<std::promise<void>>();
  auto out = std::make_shared<outcome>();
  const auto n = static_cast<size_t>(r.n);
  out->tokens.resize(n);
  out->logprobs.resize(n);
  auto left = std::make_shared<int>(r.n);
  r.on_event = [done, out, left](serving::llm_event ev) {
    const auto i = static_cast<size_t>(ev.index);
    out->tokens[i].insert(out->tokens[i].end(), ev.tokens.begin(), ev.tokens.end());
    out->logprobs[i].insert(out->logprobs[i].end(), ev.logprobs.begin(), ev.logprobs.end());
    if (ev.finished && --*left == 0) done->set_value();
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
    r.max_tokens = 10;
    r.sampling = std::move(s);
    r.logprobs = logprobs;
    r.n = n;
    r.ignore_eos = true;
    return r;
  };
  out.push_back(req({72, 101, 108, 108, 111}, {.temperature = 0}, 5));
  out.push_back(req({84, 104, 101, 32}, {.temperature = 0.9, .top_k = 30, .seed = 11}, 2));
  out.push_back(req({65, 66, 67}, {.temperature = 1.0, .top_p = 0.8, .seed = 12}, 1));  // logits to the host
  out.push_back(req({100, 101}, {.temperature = 1.0, .seed = 13}, -1, 2));              // every token, 2 choices
  serving::sampling_params pen{.temperature = 0.8, .top_k = 20, .seed = 14, .presence_penalty = 0.6,
                               .frequency_penalty = 0.4, .repetition_penalty = 1.3};
  pen.logit_bias = {{101, 3.0f}, {32, -50.0f}, {31999, 4.0f}};
  out.push_back(req({101, 32, 101, 32, 101}, pen, 3));
  return out;
}

TEST(SplitHeadServing, TheEngineGivesTheUnsplitHeadsTokensAndLogprobs) {
  auto m = preset("llama-tiny");
  std::vector<outcome> runs[2];
  for (int split = 0; split < 2; ++split) {
    auto d = deploy(m, plan{1, 1, 2, 1, split ? 2 : 1}, models::dtype::fp32);
    ASSERT_TRUE(d.dec);
    auto backends = tile_llm_backend::make(std::move(d.dec), "tiles");
    ASSERT_TRUE(backends) << backends.error().to_string();
    {
      serving::llm_engine e({.scheduler = {.token_budget = 96, .max_running = 8}}, backends->front(),
                            toys::make_byte_tokenizer(), nullptr);
      e.start();
      for (auto r : requests()) runs[split].push_back(run_request(e, std::move(r)));
      e.stop();
    }
    for (auto& b : *backends) b->stop();
    d.group->shutdown();
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const auto &whole = runs[0][i], &split = runs[1][i];
    ASSERT_EQ(whole.tokens.size(), split.tokens.size());
    for (size_t c = 0; c < whole.tokens.size(); ++c) {
      EXPECT_EQ(whole.tokens[c].size(), 10u);
      EXPECT_EQ(split.tokens[c], whole.tokens[c]) << "choice " << c;
      ASSERT_EQ(split.logprobs[c].size(), whole.logprobs[c].size());
      for (size_t k = 0; k < whole.logprobs[c].size(); ++k) {
        EXPECT_EQ(split.logprobs[c][k].token, whole.logprobs[c][k].token);
        expect_near_rel(split.logprobs[c][k].logprob, whole.logprobs[c][k].logprob, kRelTol, "logprob");
        ASSERT_EQ(split.logprobs[c][k].top.size(), whole.logprobs[c][k].top.size());
        for (size_t j = 0; j < whole.logprobs[c][k].top.size(); ++j) {
          EXPECT_EQ(split.logprobs[c][k].top[j].first, whole.logprobs[c][k].top[j].first);
          expect_near_rel(split.logprobs[c][k].top[j].second, whole.logprobs[c][k].top[j].second, kRelTol, "top");
        }
      }
    }
  }
}

}  // namespace
