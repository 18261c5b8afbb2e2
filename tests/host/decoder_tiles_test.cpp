// Integration: decoders on real tile processes. Library level: every step of a mixed schedule
// (prefill chunks beside decodes, sequences joining and leaving, a block table shuffled through
// the pool) gives the logits decoder_model::step gives on its own paged cache (1e-4), on an odd
// GQA shape (6 query heads, 2 kv heads, FFN 200) under width (kv heads split, and replicated with
// query heads that straddle them), pipeline with micro-batches and replicas; the tiles' memory
// reaches what the plan counted; a block outside the KV cache is an error naming the tiles and
// the capacity. Process level: tessera-host --check (greedy generation equal to greedy_generate)
// for gpt2-tiny and llama-tiny on 1, 2, 3, 4 and 8 tiles.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "decoder_cases.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::test_support;
namespace fs = std::filesystem;

namespace {

// The mixed schedule (test_support::step_mixed_schedule): every step's logits within 1e-4.
void expect_steps_equal(const models::decoder_model& m, tile_decoder& dec, int replica) {
  const auto r = step_mixed_schedule(m, dec, replica);
  EXPECT_TRUE(r.ok);
  EXPECT_GT(r.steps, 10);
  EXPECT_LT(r.worst, 1e-4) << "plan " << dec.compiled().chosen.to_string() << " replica " << replica;
}

}  // namespace

class GqaOnTiles : public ::testing::TestWithParam<std::pair<int, plan>> {};

TEST_P(GqaOnTiles, EveryStepEqualsTheReference) {
  auto m = models::make_seeded_decoder(gqa3(), 3);
  ASSERT_TRUE(m) << m.error().to_string();
  auto model = std::make_shared<const models::decoder_model>(std::move(*m));
  auto d = deploy_decoder(model, GetParam().first, GetParam().second);
  ASSERT_TRUE(d.dec);
  for (int r = 0; r < d.dec->compiled().chosen.replicas; ++r) expect_steps_equal(*model, *d.dec, r);
}

INSTANTIATE_TEST_SUITE_P(Plans, GqaOnTiles,
                         ::testing::Values(std::pair{1, plan{1, 1, 1, 1}}, std::pair{2, plan{1, 1, 2, 1}},
                                           std::pair{4, plan{1, 1, 4, 1}}, std::pair{3, plan{1, 3, 1, 3}},
                                           std::pair{4, plan{2, 1, 2, 1}}),
                         [](const auto& info) {
                           const plan& p = info.param.second;
                           return "R" + std::to_string(p.replicas) + "S" + std::to_string(p.stages) + "W" +
                                  std::to_string(p.width) + "M" + std::to_string(p.micro_batches);
                         });

TEST(DecoderOnTiles, BadStepsAreErrorsAndTheTilesGoOn) {
  auto m = models::make_seeded_decoder(gqa3(), 3);
  ASSERT_TRUE(m);
  auto model = std::make_shared<const models::decoder_model>(std::move(*m));
  auto d = deploy_decoder(model, 2, plan{1, 1, 2, 1}, {.kv_blocks = 20});
  ASSERT_TRUE(d.dec);
  models::step_batch outside{{{1, {5, 6}, 0, {20}, true}}};
  auto r = d.dec->step(0, outside);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::out_of_memory);
  EXPECT_NE(r.error().message().find("tiles 0, 1"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("20 blocks of 16 positions"), std::string::npos) << r.error().message();
  for (const models::step_batch& bad :
       {models::step_batch{{{1, {5, 6}, 15, {0}, true}}},    // block table too short
        models::step_batch{{{1, {500}, 0, {0}, true}}},      // token outside the vocabulary
        models::step_batch{{{1, {}, 0, {0}, true}}},         // no tokens
        models::step_batch{{{1, {1}, 256, {0}, true}}}}) {   // beyond max positions
    auto e = d.dec->step(0, bad);
    EXPECT_FALSE(e);
    if (!e) {
      EXPECT_EQ(e.error().code(), errc::invalid_argument) << e.error().message();
    }
  }
  // Nothing was sent for the refused steps: the tiles go on with a good one.
  auto ok = d.dec->step(0, models::step_batch{{{1, {5, 6, 7}, 0, {3}, true}}});
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->logits.size(), 1u);
}

// ---- Qwen2 (q/k/v biases) and Mistral (sliding window 7) on tiles ----
// The seeded checkpoints of tests/data/models/decoders: the mixed schedule against the reference,
// then the float64 numpy goldens (models/scripts/make_arch_goldens.py) straight from the tiles:
// the prompt's last logits within 1e-4 and 32 greedy tokens equal up to the first golden near tie.

namespace {

std::string decoders_dir() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src ? src : TESSERA_TEST_SOURCE_DIR) + "/tests/data/models/decoders";
}

nlohmann::json arch_goldens() {
  std::ifstream f(decoders_dir() + "/arch_goldens.json");
  return nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
}

void expect_goldens_on_tiles(const std::string& name, tile_decoder& dec, int vocab) {
  const auto g = arch_goldens();
  ASSERT_TRUE(g.is_object() && g["models"].contains(name)) << name << " has no goldens";
  const auto& c = dec.compiled();
  for (const auto& p : g["models"][name]["prompts"]) {
    auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto want = p["logits"].back().get<std::vector<float>>();
    const auto greedy = p["greedy"].get<std::vector<int32_t>>();
    const auto margins = p["margins"].get<std::vector<float>>();
    std::vector<int32_t> blocks;
    for (int b = 0; b < c.kv.blocks_for(static_cast<int>(ids.size() + greedy.size())); ++b) blocks.push_back(b);
    auto r = dec.step(0, models::step_batch{{{1, ids, 0, blocks, true}}});
    ASSERT_TRUE(r) << r.error().to_string();
    ASSERT_EQ(r->logits.size(), 1u);
    ASSERT_EQ(static_cast<int>(r->logits[0].size()), vocab);
    double worst = 0;
    for (size_t v = 0; v < want.size(); ++v) worst = std::max(worst, double(std::abs(want[v] - r->logits[0][v])));
    EXPECT_LT(worst, 1e-4) << name << " prompt logits on tiles";
    size_t compared = 0;
    for (size_t k = 0; k < greedy.size(); ++k) {
      const auto& l = r->logits[0];
      const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      if (compared == k && margins[k] >= 1e-3f) {
        EXPECT_EQ(next, greedy[k]) << name << " greedy step " << k << " on tiles";
        ++compared;
      }
      r = dec.step(0, models::step_batch{{{1, {next}, static_cast<int32_t>(ids.size()), blocks, true}}});
      ASSERT_TRUE(r) << r.error().to_string();
      ids.push_back(next);
    }
    EXPECT_GE(compared, 16u) << name;
  }
}

}  // namespace

class ArchOnTiles : public ::testing::TestWithParam<std::pair<const char*, plan>> {};

TEST_P(ArchOnTiles, GoldensAndEveryStepEqualTheReference) {
  const std::string name = GetParam().first;
  auto m = models::make_decoder_from_config(decoders_dir() + "/" + name + ".config.json", 0);
  ASSERT_TRUE(m) << m.error().to_string();
  auto model = std::make_shared<const models::decoder_model>(std::move(*m));
  const plan& p = GetParam().second;
  auto d = deploy_decoder(model, p.tiles(), p);
  ASSERT_TRUE(d.dec);
  expect_steps_equal(*model, *d.dec, 0);
  expect_goldens_on_tiles(name, *d.dec, model->shape().vocab_size);
}

INSTANTIATE_TEST_SUITE_P(Plans, ArchOnTiles,
                         ::testing::Values(std::pair{"qwen2-odd", plan{1, 1, 2, 1}}, std::pair{"qwen2-untied", plan{1, 2, 1, 2}},
                                           std::pair{"mistral-window", plan{1, 1, 2, 1}},
                                           std::pair{"mistral-window", plan{1, 2, 1, 2}},
                                           std::pair{"llama31-rope", plan{1, 1, 2, 1}}, std::pair{"qwen2-yarn", plan{1, 2, 1, 2}}),
                         [](const auto& info) { return model_plan_name(info.param.first, info.param.second); });

// ---- tessera-host --check, as a user runs it ----

namespace {

struct run_output {
  int rc = -1;
  std::string out;
};

run_output run(const std::string& args) {
  run_output r;
  r.rc = run_tessera_host(args, r.out, 180);
  return r;
}

}  // namespace

struct host_case {
  const char* model;
  int tiles;
  const char* plan;
};

class HostCheck : public ::testing::TestWithParam<host_case> {};

TEST_P(HostCheck, GreedyGenerationEqualsTheReference) {
  const auto& c = GetParam();
  // 4 sequences: prompts of 37, 30, 8 and 25 tokens, 32/26/20/14 new tokens, joining at steps
  // 0, 3, 6, 9 and leaving when done.
  auto r = run(std::string("--model ") + c.model + " --tiles " + std::to_string(c.tiles) + " --plan " + c.plan +
               " --check 4 --step-token-budget 128 --max-running 8 --kv-blocks 160 --tile-memory 96MiB");
  ASSERT_EQ(r.rc, 0) << r.out;
  const int equal = count_of(r.out, "equal to the reference"), ties = count_of(r.out, "near tie");
  EXPECT_EQ(equal + ties, 4) << r.out;
  EXPECT_GE(equal, 3) << r.out;
  EXPECT_NE(r.out.find("per generated token"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Plans, HostCheck,
                         ::testing::Values(host_case{"gpt2-tiny", 1, "1,1,1"}, host_case{"llama-tiny", 2, "1,1,2"},
                                           host_case{"gpt2-tiny", 2, "1,2,1"}, host_case{"llama-tiny", 3, "1,1,3"},
                                           host_case{"gpt2-tiny", 3, "3,1,1"}, host_case{"llama-tiny", 4, "1,2,2,2"},
                                           host_case{"gpt2-tiny", 4, "2,1,2"}, host_case{"llama-tiny", 8, "2,2,2"},
                                           host_case{"gpt2-tiny", 8, "1,2,4"}),
                         [](const auto& info) {
                           std::string p = info.param.plan;
                           for (auto& ch : p)
                             if (ch == ',') ch = '_';
                           std::string m = info.param.model;
                           for (auto& ch : m)
                             if (ch == '-') ch = '_';
                           return m + "_N" + std::to_string(info.param.tiles) + "_" + p;
                         });

// Qwen2 and Mistral as Hugging Face folders (config.json + model.safetensors of the seeded
// checkpoints): tessera-host --check on tiles against greedy_generate, Mistral's window (7) well
// inside the 37-token prompts.
TEST(HostCheck, Qwen2AndMistralFoldersGenerateTheReferenceOnTiles) {
  for (const auto& [name, tiles, plan_text] : {std::tuple{"qwen2-odd", 2, "1,1,2"}, std::tuple{"mistral-window", 2, "1,2,1,2"}}) {
    auto m = models::make_decoder_from_config(decoders_dir() + "/" + name + ".config.json", 0);
    ASSERT_TRUE(m) << m.error().to_string();
    const fs::path dir = fs::temp_directory_path() / ("tessera-arch-" + std::string(name) + "-" + std::to_string(getpid()));
    ASSERT_TRUE(models::save_decoder(*m, dir.string()).ok());
    auto r = run("--model " + dir.string() + " --tiles " + std::to_string(tiles) + " --plan " + plan_text +
                 " --check 4 --step-token-budget 128 --max-running 8 --kv-blocks 160 --tile-memory 96MiB");
    fs::remove_all(dir);
    ASSERT_EQ(r.rc, 0) << name << "\n" << r.out;
    const int equal = count_of(r.out, "equal to the reference"), ties = count_of(r.out, "near tie");
    EXPECT_EQ(equal + ties, 4) << name << "\n" << r.out;
    EXPECT_GE(equal, 3) << name << "\n" << r.out;
  }
}

TEST(HostCheck, TraceShowsEveryDecoderStepsMixAndKvBlocksPerTile) {
  const fs::path trace = fs::temp_directory_path() / ("tessera-dectiles-trace-" + std::to_string(getpid()) + ".json");
  auto r = run("--model llama-tiny --tiles 2 --plan 1,1,2 --check 2 --step-token-budget 64 --max-running 4 --kv-blocks 64 "
               "--trace " + trace.string());
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ifstream f(trace);
  auto j = nlohmann::json::parse(f, nullptr, false);
  fs::remove(trace);
  ASSERT_TRUE(j.is_object() && j.contains("traceEvents")) << r.out;
  // One wall-clock "batch" slice per step on the decoder track (and one modelled), in step order;
  // prompts of 37 and 30 tokens go in chunks of 16, then 32 and 26 decodes.
  int steps = 0, prefill_tokens = 0, decodes = 0, last_step = -1, superstep_slices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("cat", "") == "superstep") ++superstep_slices;
    if (e.value("cat", "") != "batch" || e["tid"].get<int>() % 2 == 1) continue;
    const auto& a = e["args"];
    ++steps;
    EXPECT_GT(a["step"].get<int>(), last_step);
    last_step = a["step"].get<int>();
    prefill_tokens += a["prefill_tokens"].get<int>();
    decodes += a["decodes"].get<int>();
    EXPECT_EQ(a["prefill_chunks"].get<int>() + a["decodes"].get<int>(), a["sequences"].get<int>());
    EXPECT_EQ(a["kv_blocks_total"].get<int>(), 64);
    ASSERT_EQ(a["tiles"].size(), 2u) << a.dump();
    for (const auto& [tile, kv] : a["tiles"].items()) {
      EXPECT_EQ(kv["kv_blocks"], a["kv_blocks_used"]);
      EXPECT_GT(kv["kv_bytes"].get<int64_t>(), 0);
    }
  }
  EXPECT_EQ(prefill_tokens, 37 + 30);
  // Every generated token but each sequence's first (from its last prefill chunk) came from a decode.
  EXPECT_NE(r.out.find(" " + std::to_string(decodes + 2) + " tokens generated"), std::string::npos) << decodes << r.out;
  EXPECT_NE(r.out.find("check: " + std::to_string(steps) + " steps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(steps) + " decoder steps"), std::string::npos) << r.out;
  EXPECT_GT(superstep_slices, steps);
  // --check and --serve would both write the trace: refused, not one of them silently lost.
  auto s = run("--model llama-tiny --tiles 1 --check 1 --serve --port 0 --trace " + trace.string());
  EXPECT_EQ(s.rc, 2) << s.out;
  EXPECT_NE(s.out.find("not both"), std::string::npos) << s.out;
  EXPECT_FALSE(fs::exists(trace));
}

TEST(HostCheck, TheCheckFailsLogitsOverItsBoundAndPrintsTheBound) {
  // The derived bound is printed and met; the same run held to a bound below what W = 2 measures
  // exits 1 naming the difference and the bound (the check can fail).
  auto ok = run("--model llama-tiny --tiles 2 --plan 1,1,2 --check 1 --step-token-budget 64 --max-running 2 --kv-blocks 16");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  EXPECT_NE(ok.out.find("check bound: 3 x (16 x sqrt(352) x 2^-24) = 5.37e-05"), std::string::npos) << ok.out;
  auto tight = run("--model llama-tiny --tiles 2 --plan 1,1,2 --check 1 --step-token-budget 64 --max-running 2 --kv-blocks 16 "
                   "--check-bound 1e-9");
  EXPECT_EQ(tight.rc, 1) << tight.out;
  EXPECT_NE(tight.out.find("overridden by --check-bound"), std::string::npos) << tight.out;
  EXPECT_NE(tight.out.find("logits differ from the single-process reference by"), std::string::npos) << tight.out;
  auto bad = run("--model llama-tiny --tiles 2 --check 1 --check-bound -1");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("--check-bound"), std::string::npos) << bad.out;
}

TEST(HostCheck, ThePlanRankingTakesTheBarrierMeasuredOnTheTiles) {
  // The automatic plan: the group's barrier measured on its tiles before the ranking, printed
  // beside the plan list (positive; a barrier, not a constant).
  auto r = run("--model llama-tiny --tiles 2 --check 1 --step-token-budget 64 --max-running 2 --kv-blocks 16");
  ASSERT_EQ(r.rc, 0) << r.out;
  const std::string key = "cost model: barrier ";
  const auto at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  const double us = std::atof(r.out.c_str() + at + key.size());
  EXPECT_GT(us, 0) << r.out;
  EXPECT_NE(r.out.find("measured on these 2 tiles", at), std::string::npos) << r.out;
  EXPECT_LT(r.out.find(key), r.out.find("plans that fit")) << r.out;
}

TEST(HostOptions, PlanOnlyListsA7bModelsPlansWithoutTilesOrWeights) {
  // llama-2-7b's shape alone (no 13.5 GB of weights here, no tile started): every plan that fits
  // with its estimated tokens/s, none printed as 0.
  auto r = run("--model llama-2-7b --dtype bf16 --tiles 8 --tile-memory 2560MiB --kv-blocks 3 --step-token-budget 16 "
               "--max-running 1 --plan-only");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto at = r.out.find("plans that fit (estimated tokens/s):");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find("R=1 S=2 W=4 M=2: 0."), std::string::npos) << line;
  EXPECT_EQ(line.find(": 0 "), std::string::npos) << line;
  EXPECT_EQ(r.out.find("tiles up"), std::string::npos) << r.out;
  auto both = run("--model llama-tiny --tiles 2 --plan-only --check 2");
  EXPECT_EQ(both.rc, 2) << both.out;
  EXPECT_NE(both.out.find("--plan-only"), std::string::npos) << both.out;
}

TEST(HostOptions, LogDirIsMadeWhenMissingAndRefusedByNameWhenItCannotBe) {
  const fs::path root = fs::temp_directory_path() / ("tessera-logdir-" + std::to_string(getpid()));
  fs::remove_all(root);
  // Missing, two levels deep: made, and each tile writes its log there.
  auto r = run("--demo allreduce --tiles 2 --reps 1 --log-dir " + (root / "a" / "b").string());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(root / "a" / "b" / "tile-0.log")) << r.out;
  EXPECT_TRUE(fs::exists(root / "a" / "b" / "tile-1.log")) << r.out;
  // A regular file in the way: refused naming the option and the path, no tile started.
  { std::ofstream(root / "file") << "x"; }
  for (const fs::path& bad : {root / "file", root / "file" / "sub"}) {
    auto e = run("--demo allreduce --tiles 2 --reps 1 --log-dir " + bad.string());
    EXPECT_EQ(e.rc, 2) << e.out;
    EXPECT_NE(e.out.find("--log-dir " + bad.string()), std::string::npos) << e.out;
    EXPECT_EQ(e.out.find("cannot start"), std::string::npos) << e.out;
  }
  fs::remove_all(root);
}

TEST(HostCheck, ADecoderThatDoesNotFitIsRefusedWithTheTable) {
  auto r = run("--model llama-tiny --tiles 2 --tile-memory 8MiB --check 1");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tile-memory"), std::string::npos) << r.out;
}

// ---- The logit bound (decoder_logit_bound): met under width, failed by a wrong shard ----

namespace {

// llama-tiny's widths at llama-1b's depth (22 layers): the bound's depth term at CI's size.
models::model_shape deep_llama_tiny() {
  auto s = models::shape_preset("llama-tiny");
  EXPECT_TRUE(s);
  models::model_shape d = *s;
  d.num_layers = 22;
  d.name = "llama-tiny-22-layers";
  return d;
}

// Two sequences (prompts of 19 and 7 tokens) generated greedily for 12 steps on the tiles beside
// decoder_model::step on its own cache (the next token is the reference's argmax on both sides);
// the worst scaled difference of their logits (scaled_logit_difference).
double worst_scaled_difference(const models::decoder_model& m, tile_decoder& dec) {
  const auto& c = dec.compiled();
  auto cache = models::paged_kv_cache::make(m.shape(), c.kv);
  EXPECT_TRUE(cache);
  if (!cache) return INFINITY;
  models::splitmix64 rng(5);
  std::vector<std::vector<int32_t>> tokens(2);
  std::vector<std::vector<int32_t>> blocks(2);
  std::vector<int> computed(2, 0);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < (i == 0 ? 19 : 7); ++k)
      tokens[i].push_back(static_cast<int32_t>(rng.uniform(0, m.shape().vocab_size - 1)));
  int32_t next_block = 0;
  double worst = 0;
  for (int n = 0; n < 12; ++n) {
    models::step_batch b;
    for (int i = 0; i < 2; ++i) {
      const int end = static_cast<int>(tokens[i].size());
      while (static_cast<int>(blocks[i].size()) < c.kv.blocks_for(end)) blocks[i].push_back(next_block++);
      b.seqs.push_back({static_cast<uint64_t>(i), {tokens[i].begin() + computed[i], tokens[i].end()}, computed[i],
                        blocks[i], true});
    }
    auto want = m.step(b, *cache);
    EXPECT_TRUE(want) << want.error().to_string();
    auto got = dec.step(0, b);
    EXPECT_TRUE(got) << got.error().to_string();
    if (!want || !got || got->logits.size() != 2) return INFINITY;
    for (int i = 0; i < 2; ++i) {
      const auto& w = (*want)[static_cast<size_t>(i)];
      worst = std::max(worst, scaled_logit_difference(got->logits[static_cast<size_t>(i)], w));
      computed[i] = static_cast<int>(tokens[i].size());
      tokens[i].push_back(static_cast<int32_t>(std::max_element(w.begin(), w.end()) - w.begin()));
    }
  }
  return worst;
}

struct bound_run {
  double worst = INFINITY;
  double bound = 0;
};

// Deploys `shape`'s seeded decoder in `dt` on W lanes, its shards cut by `cut` (nullptr: the
// model's own), and measures it against the one-process decoder in the same dtype.
bound_run run_under_bound(const models::model_shape& shape, models::dtype dt, int width,
                          std::function<result<std::vector<float>>(const models::decoder_model&, const weight_shard&)> cut) {
  auto made = models::make_seeded_decoder(shape, 4);
  EXPECT_TRUE(made) << made.error().to_string();
  if (!made) return {};
  if (dt == models::dtype::bf16) {
    EXPECT_TRUE(made->set_dtype(dt).ok());
  }
  auto model = std::make_shared<const models::decoder_model>(std::move(*made));
  placement_request req;
  req.tiles = width;
  req.tile_memory = 64ull << 20;
  req.token_budget = 32;
  req.max_sequences = 2;
  req.forced = plan{1, 1, width, 1};
  req.kv_blocks = 8;
  req.dtype = dt;
  auto c = compile_decoder(shape, req);
  EXPECT_TRUE(c) << c.error().message();
  if (!c) return {};
  tile_group_config g;
  g.tiles = static_cast<uint32_t>(width);
  g.tile_memory = req.tile_memory;
  auto group = tile_group::start(g);
  EXPECT_TRUE(group) << group.error().to_string();
  if (!group) return {};
  const models::decoder_model* mp = model.get();
  shard_cutter cutter = [mp, cut](const weight_shard& sh) { return cut ? cut(*mp, sh) : materialize(*mp, sh); };
  auto dec = tile_decoder::deploy(**group, std::move(*c), shape, cutter);
  EXPECT_TRUE(dec) << dec.error().to_string();
  if (!dec) return {};
  return {worst_scaled_difference(*model, **dec), decoder_logit_bound(shape, dt).bound};
}

}  // namespace

TEST(DecoderLogitBound, GrowsWithDepthWidestSumAndDtype) {
  auto tiny = models::shape_preset("llama-tiny");
  auto b1 = models::shape_preset("llama-1b");
  auto b7 = models::shape_preset("llama-2-7b");
  ASSERT_TRUE(tiny && b1 && b7);
  // (layers + 1) x (16 x sqrt(K) x 2^-24 [+ 6 x 2^-8]), K = max(hidden, ffn, q width).
  EXPECT_DOUBLE_EQ(decoder_logit_bound(*tiny, models::dtype::fp32).bound, 3 * 16 * std::sqrt(352.0) * 0x1p-24);
  EXPECT_DOUBLE_EQ(decoder_logit_bound(*b1, models::dtype::fp32).bound, 23 * 16 * std::sqrt(5632.0) * 0x1p-24);
  EXPECT_DOUBLE_EQ(decoder_logit_bound(*b7, models::dtype::bf16).derived, 33 * (16 * std::sqrt(11008.0) * 0x1p-24 + 6 * 0x1p-8));
  // Capped where a wrong result would pass (AWrongShardFailsIt: ~0.5 at any depth).
  EXPECT_DOUBLE_EQ(decoder_logit_bound(*b7, models::dtype::bf16).bound, 0.4);
  EXPECT_DOUBLE_EQ(decoder_logit_bound(*tiny, models::dtype::bf16).bound, 3 * (16 * std::sqrt(352.0) * 0x1p-24 + 6 * 0x1p-8));
  EXPECT_LT(decoder_logit_bound(*tiny, models::dtype::fp32).bound, decoder_logit_bound(deep_llama_tiny(), models::dtype::fp32).bound);
  EXPECT_LT(decoder_logit_bound(*tiny, models::dtype::fp32).bound, decoder_logit_bound(*tiny, models::dtype::bf16).bound);
  EXPECT_NE(decoder_logit_bound(*b1, models::dtype::fp32).to_string().find("23 x (16 x sqrt(5632) x 2^-24) = 1.65e-03"), std::string::npos)
      << decoder_logit_bound(*b1, models::dtype::fp32).to_string();
  EXPECT_NE(decoder_logit_bound(*b7, models::dtype::bf16).to_string().find(" + 6 x 2^-8) = 7.77e-01, capped at 0.4"), std::string::npos)
      << decoder_logit_bound(*b7, models::dtype::bf16).to_string();
  EXPECT_DOUBLE_EQ(scaled_logit_difference({1, 2, 30}, {1, 2.5f, 40}), 10.0 / 40);
  EXPECT_DOUBLE_EQ(scaled_logit_difference({0.25f, 0.5f}, {0.25f, 0.75f}), 0.25);  // scale at least 1
  EXPECT_EQ(scaled_logit_difference({1, 2}, {1}), INFINITY);
}

TEST(DecoderLogitBound, WidthPlansMeetItOnShallowAndDeepShapes) {
  for (const auto& shape : {*models::shape_preset("llama-tiny"), deep_llama_tiny()})
    for (models::dtype dt : {models::dtype::fp32, models::dtype::bf16})
      for (int width : {2, 4}) {
        const auto r = run_under_bound(shape, dt, width, nullptr);
        std::printf("%s %s W=%d: worst %.3e, bound %.3e (%.1f%% of it)\n", shape.name.c_str(),
                    std::string(models::dtype_name(dt)).c_str(), width, r.worst, r.bound, 100 * r.worst / r.bound);
        EXPECT_LE(r.worst, r.bound) << shape.name << " " << models::dtype_name(dt) << " W=" << width;
      }
}

TEST(DecoderLogitBound, AWrongShardFailsIt) {
  // Lane 1 of one layer's down projection gets lane 0's columns (a shard cut from the wrong
  // range): the kind of wrong result the bound must catch, at both depths and dtypes.
  for (const auto& shape : {*models::shape_preset("llama-tiny"), deep_llama_tiny()})
    for (models::dtype dt : {models::dtype::fp32, models::dtype::bf16}) {
      const std::string victim = "layers." + std::to_string(shape.num_layers / 2) + ".down_w";
      int cut = 0;
      auto wrong = [victim, &cut](const models::decoder_model& m, const weight_shard& sh) -> result<std::vector<float>> {
        if (sh.source != victim || sh.begin == 0) return materialize(m, sh);
        weight_shard moved = sh;
        moved.begin = 0;
        moved.end = sh.end - sh.begin;
        ++cut;
        return materialize(m, moved);
      };
      const auto r = run_under_bound(shape, dt, 2, wrong);
      EXPECT_EQ(cut, 1) << "the victim shard was not cut: " << victim;
      std::printf("%s %s W=2, %s of lane 1 from lane 0's columns: worst %.3e, bound %.3e (%.2fx)\n", shape.name.c_str(),
                  std::string(models::dtype_name(dt)).c_str(), victim.c_str(), r.worst, r.bound, r.worst / r.bound);
      EXPECT_GT(r.worst, r.bound) << shape.name << " " << models::dtype_name(dt);
    }
}
