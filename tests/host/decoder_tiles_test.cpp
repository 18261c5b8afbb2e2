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

TEST(HostCheck, ADecoderThatDoesNotFitIsRefusedWithTheTable) {
  auto r = run("--model llama-tiny --tiles 2 --tile-memory 8MiB --check 1");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("does not fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tile-memory"), std::string::npos) << r.out;
}
