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

#include "decoder_cases.hpp"
#include "tile_cases.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::test_support;

namespace {

constexpr double kBound = 0.02;  // scaled by max(1, max |logit|), as tessera-host --check uses for bf16

bool bf16_cpu() { return models::check_dtype_supported(models::dtype::bf16).ok(); }

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
  auto d = deploy_decoder(model, pc.tiles, pc.p, {.tile_memory = 64ull << 20, .dtype = models::dtype::bf16});
  ASSERT_TRUE(d.dec);
  for (int r = 0; r < d.dec->compiled().chosen.replicas; ++r) {
    // The mixed schedule (test_support::step_mixed_schedule), block ids not handed out in order.
    const auto diff = step_mixed_schedule(*model, *d.dec, r, /*skip_blocks=*/5);
    EXPECT_TRUE(diff.ok);
    const int steps = diff.steps;
    const double worst = diff.worst_scaled;
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
                         [](const auto& info) { return model_plan_name(info.param.model, info.param.p); });

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

int run(const std::string& args, std::string& out, const std::string& env = "") {
  return run_tessera_host(args, out, 300, env);
}

}  // namespace

TEST(Bf16DecoderHost, CheckGeneratesTheBf16ReferenceOnTiles) {
  if (!bf16_cpu()) GTEST_SKIP() << "no native bf16 on this CPU";
  for (const std::string args : {"--model llama-tiny --tiles 2 --plan 1,1,2", "--model gpt2-tiny --tiles 2 --plan 1,2,1"}) {
    std::string out;
    ASSERT_EQ(run(args + " --dtype bf16 --check 4 --step-token-budget 128 --max-running 8 --kv-blocks 160 "
                         "--tile-memory 96MiB", out), 0) << args << "\n" << out;
    const int equal = count_of(out, "equal to the reference"), ties = count_of(out, "near tie");
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
