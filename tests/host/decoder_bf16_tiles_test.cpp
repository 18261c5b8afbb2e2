// Integration: bf16 decoders on real tile processes. The tiles hold the Linear matrices, the LM
// head and the paged KV cache in bf16 (compile_decoder with dtype bf16); every step of a mixed
// schedule (prefill chunks beside decodes, sequences joining and leaving, blocks out of order)
// gives the logits of decoder_model::step in bf16 on its own bf16 cache in one process, within
// 0.02 x max(1, max |logit|) (the same roundings, fp32 sums taken in other orders under width and
// reduced on the exchange), on an odd GQA shape (6 query heads over 2 kv heads) with kv heads
// split, replicated with query heads straddling them, a pipeline with micro-batches, and gpt2-tiny
// (tied embeddings: the LM head a bf16 copy). The plan's KV: a bf16 block takes half the bytes
// of an fp32 one, and the same tile memory holds at least twice the blocks. Process level:
// tessera-host --dtype bf16 --check (greedy tokens equal to the bf16 single-process decoder up to
// its near ties, logits within the same bound).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/host/tile_decoder.hpp"
#include "tessera/models/batch.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using test_support::gqa3;
namespace fs = std::filesystem;

namespace {

constexpr double kBound = 0.02;  // scaled by max(1, max |logit|), as tessera-host --check uses for bf16

bool bf16_cpu() { return models::check_dtype_supported(models::dtype::bf16).ok(); }

struct deployment {
  std::unique_ptr<tile_group> group;
  std::unique_ptr<tile_decoder> dec;
};

deployment deploy(std::shared_ptr<const models::decoder_model> m, int tiles, plan p) {
  placement_request req;
  req.tiles = tiles;
  req.tile_memory = 64ull << 20;
  req.token_budget = 96;
  req.max_sequences = 8;
  req.forced = p;
  req.kv_blocks = 48;
  req.dtype = models::dtype::bf16;
  auto c = compile_decoder(m->shape(), req);
  EXPECT_TRUE(c) << c.error().message();
  if (!c) return {};
  EXPECT_EQ(c->kv.kv_dtype, models::dtype::bf16);
  tile_group_config g;
  g.tiles = static_cast<uint32_t>(tiles);
  g.tile_memory = req.tile_memory;
  auto group = tile_group::start(g);
  EXPECT_TRUE(group) << group.error().to_string();
  if (!group) return {};
  auto d = tile_decoder::deploy(**group, std::move(*c), m);
  EXPECT_TRUE(d) << d.error().to_string();
  if (!d) return {};
  return {std::move(*group), std::move(*d)};
}

// Sequence i: a prompt of lengths[i] prefilled in chunks of 11 beside the others' decodes, joining
// at step 2i, leaving after outputs[i] tokens; the next token is the reference's argmax (the same
// for both sides), block ids from one pool handed out in reverse.
double worst_scaled_step_diff(const models::decoder_model& m, tile_decoder& dec, int replica, int& steps) {
  const auto& c = dec.compiled();
  auto cache = models::paged_kv_cache::make(m.shape(), c.kv);
  EXPECT_TRUE(cache);
  if (!cache) return INFINITY;
  EXPECT_EQ(cache->kv_dtype(), models::dtype::bf16);
  models::block_pool pool(c.kv.num_blocks);
  for (int i = 0; i < 5; ++i) (void)pool.allocate();  // not 0, 1, 2, ... in order
  const std::vector<int> lengths{23, 1, 40, 7, 16}, outputs{6, 9, 3, 5, 4};
  struct seq {
    std::vector<int32_t> tokens, blocks;
    int prompt = 0, computed = 0, generated = 0;
    bool done = false;
  };
  models::splitmix64 rng(11);
  std::vector<seq> seqs(lengths.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].prompt = lengths[i];
    for (int k = 0; k < lengths[i]; ++k)
      seqs[i].tokens.push_back(static_cast<int32_t>(rng.uniform(0, m.shape().vocab_size - 1)));
  }
  double worst = 0;
  for (int n = 0; n < 200; ++n) {
    models::step_batch b;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto& s = seqs[i];
      if (s.done || static_cast<int>(2 * i) > n) continue;
      const int end = s.computed < s.prompt ? std::min(s.prompt, s.computed + 11) : s.computed + 1;
      while (static_cast<int>(s.blocks.size()) < c.kv.blocks_for(end)) {
        auto id = pool.allocate();
        EXPECT_TRUE(id) << "the test's pool ran dry";
        if (!id) return INFINITY;
        s.blocks.push_back(*id);
      }
      b.seqs.push_back({i, {s.tokens.begin() + s.computed, s.tokens.begin() + end}, s.computed, s.blocks, end >= s.prompt});
      who.push_back(i);
    }
    if (b.seqs.empty()) break;
    auto want = m.step(b, *cache);
    EXPECT_TRUE(want) << want.error().to_string();
    auto got = dec.step(replica, b);
    EXPECT_TRUE(got) << got.error().to_string();
    if (!want || !got) return INFINITY;
    EXPECT_EQ(got->logits.size(), want->size());
    ++steps;
    size_t li = 0;
    for (size_t k = 0; k < b.seqs.size(); ++k) {
      auto& s = seqs[who[k]];
      s.computed += static_cast<int>(b.seqs[k].tokens.size());
      if (!b.seqs[k].want_logits) continue;
      const auto& w = (*want)[li];
      const auto& g = got->logits[li++];
      double diff = 0, scale = 1;
      for (size_t v = 0; v < w.size(); ++v) {
        diff = std::max(diff, double(std::abs(w[v] - g[v])));
        scale = std::max(scale, double(std::abs(w[v])));
      }
      worst = std::max(worst, diff / scale);
      s.tokens.push_back(static_cast<int32_t>(std::max_element(w.begin(), w.end()) - w.begin()));
      if (++s.generated == outputs[who[k]]) {
        s.done = true;
        for (int32_t id : s.blocks) EXPECT_TRUE(pool.release(id).ok());
      }
    }
    for (const auto& [t, high] : got->memory_high_water)
      EXPECT_EQ(high, c.tiles[t].total_bytes()) << "tile " << t << ": the plan and the arena disagree";
  }
  for (const auto& s : seqs) EXPECT_TRUE(s.done);
  return worst;
}

struct bf16_case {
  const char* model;  // "gqa3" or a preset
  int tiles;
  plan p;
};

}  // namespace

class Bf16DecoderOnTiles : public ::testing::TestWithParam<bf16_case> {};

TEST_P(Bf16DecoderOnTiles, EveryStepIsTheOneProcessBf16DecodersWithinTheBound) {
  if (!bf16_cpu()) GTEST_SKIP() << "no native bf16 on this CPU";
  const auto& pc = GetParam();
  auto m = std::string(pc.model) == "gqa3" ? models::make_seeded_decoder(gqa3(), 3) : models::make_preset_decoder(pc.model, 3);
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(m->set_dtype(models::dtype::bf16).ok());
  auto model = std::make_shared<const models::decoder_model>(std::move(*m));
  auto d = deploy(model, pc.tiles, pc.p);
  ASSERT_TRUE(d.dec);
  for (int r = 0; r < d.dec->compiled().chosen.replicas; ++r) {
    int steps = 0;
    const double worst = worst_scaled_step_diff(*model, *d.dec, r, steps);
    std::printf("%s plan %s replica %d: %d steps, max |tile logit - one-process bf16| / max(1, max |logit|) = %.2e\n",
                pc.model, d.dec->compiled().chosen.to_string().c_str(), r, steps, worst);
    EXPECT_GT(steps, 10);
    EXPECT_LE(worst, kBound);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, Bf16DecoderOnTiles,
                         ::testing::Values(bf16_case{"gqa3", 1, plan{1, 1, 1, 1}}, bf16_case{"gqa3", 2, plan{1, 1, 2, 1}},
                                           bf16_case{"gqa3", 4, plan{1, 1, 4, 1}}, bf16_case{"gqa3", 2, plan{1, 2, 1, 2}},
                                           bf16_case{"gpt2-tiny", 2, plan{1, 1, 2, 1}}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           const plan& p = info.param.p;
                           return n + "_S" + std::to_string(p.stages) + "W" + std::to_string(p.width);
                         });

// The plan's KV cache: bf16 blocks are half the bytes, so the same tiles hold at least twice the
// blocks (the matrices shrink too); the memory table and describe() say bf16.
TEST(Bf16DecoderPlan, ABf16KvBlockTakesHalfTheTileMemory) {
  auto shape = models::shape_preset("llama-tiny");
  ASSERT_TRUE(shape);
  placement_request req;
  req.tiles = 2;
  req.tile_memory = 48ull << 20;
  req.token_budget = 64;
  req.forced = plan{1, 1, 2, 1};
  req.kv_blocks = 64;
  auto f = compile_decoder(*shape, req);
  req.dtype = models::dtype::bf16;
  auto b = compile_decoder(*shape, req);
  ASSERT_TRUE(f && b) << (f ? b.error().message() : f.error().message());
  for (size_t t = 0; t < f->tiles.size(); ++t) {
    EXPECT_EQ(f->tiles[t].bytes_of("kv"), 2 * b->tiles[t].bytes_of("kv")) << "tile " << t;
    EXPECT_LT(b->tiles[t].bytes_of("weights"), f->tiles[t].bytes_of("weights")) << "tile " << t;
  }
  EXPECT_NE(b->describe().find("positions per replica (1024 tokens in flight) in bf16"), std::string::npos) << b->describe();
  // As many blocks as fit: at least twice fp32's in the same memory.
  req.kv_blocks = 0;
  req.tile_memory = 48ull << 20;
  req.dtype = models::dtype::fp32;
  auto f0 = compile_decoder(*shape, req);
  req.dtype = models::dtype::bf16;
  auto b0 = compile_decoder(*shape, req);
  ASSERT_TRUE(f0 && b0) << (f0 ? b0.error().message() : f0.error().message());
  EXPECT_GE(b0->kv.num_blocks, 2 * f0->kv.num_blocks) << f0->kv.num_blocks << " fp32 blocks";
  std::printf("llama-tiny on 2 tiles of 48 MiB: %d fp32 KV blocks, %d bf16 KV blocks of 16 positions\n",
              f0->kv.num_blocks, b0->kv.num_blocks);
}

// ---- tessera-host --dtype bf16 --check, as a user runs it ----

namespace {

std::string bin(const char* name) {
  const char* dir = std::getenv("TESSERA_BIN_DIR");
  return std::string(dir ? dir : ".") + "/" + name;
}

int run(const std::string& args, std::string& out, const std::string& env = "") {
  const fs::path path = fs::temp_directory_path() / ("tessera-dec16-" + std::to_string(getpid()));
  const int ws = std::system((env + " timeout -k 5 300 " + bin("tessera-host") + " " + args + " < /dev/null > " +
                              path.string() + " 2>&1").c_str());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  fs::remove(path);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(Bf16DecoderHost, CheckGeneratesTheBf16ReferenceOnTiles) {
  if (!bf16_cpu()) GTEST_SKIP() << "no native bf16 on this CPU";
  for (const std::string args : {"--model llama-tiny --tiles 2 --plan 1,1,2", "--model gpt2-tiny --tiles 2 --plan 1,2,1"}) {
    std::string out;
    ASSERT_EQ(run(args + " --dtype bf16 --check 4 --step-token-budget 128 --max-running 8 --kv-blocks 160 "
                         "--tile-memory 96MiB", out), 0) << args << "\n" << out;
    const int equal = count(out, "equal to the reference"), ties = count(out, "near tie");
    EXPECT_EQ(equal + ties, 4) << out;
    EXPECT_GE(equal, 3) << out;
    EXPECT_NE(out.find("tiles), bf16, token budget"), std::string::npos) << out;
    EXPECT_NE(out.find("tokens in flight) in bf16"), std::string::npos) << out;
    EXPECT_NE(out.find("max |logit - bf16 reference| / max(1, max |reference logit|)"), std::string::npos) << out;
  }
  // A CPU without bf16 (oneDNN's ISA lowered): refused at start, never fp32 in its place.
  std::string out;
  EXPECT_NE(run("--model llama-tiny --tiles 1 --dtype bf16 --check 1", out, "ONEDNN_MAX_CPU_ISA=AVX512_CORE"), 0) << out;
  EXPECT_NE(out.find("--dtype bf16 needs a CPU with avx512_bf16 or AMX"), std::string::npos) << out;
}
