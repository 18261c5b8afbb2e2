// tessera-host --seeded-shards as a user runs it, on real tile processes, for every decoder family:
// the shards generated from the seed alone (no model in the host) give the tokens of the normal
// path, which cuts the same seeded weights from a model in the host. GPT-2 (Conv1D weights read
// transposed, learned positions, biases, a tied head), LLaMA, and Qwen2 from a config.json (Q/K/V
// biases, tied head; its normal path loads the folder tessera-models generate --config --save wrote).
#include <gtest/gtest.h>

#include <string>

#include "decoder_cases.hpp"
#include "tessera/test/run_tool.hpp"

namespace tessera::test_support {
namespace {

// The "generated ids: ..." line of a --prompt-ids run ("" when absent).
std::string generated_line(const std::string& out) {
  const size_t at = out.find("generated ids:");
  if (at == std::string::npos) return {};
  return out.substr(at, out.find('\n', at) - at);
}

TEST(SeededShards, EveryFamilyGeneratesTheTokensOfTheNormalPath) {
  const std::string src = std::getenv("TESSERA_SOURCE_DIR") ? std::getenv("TESSERA_SOURCE_DIR") : TESSERA_TEST_SOURCE_DIR;
  const std::string qwen2 = src + "/tests/data/models/decoders/qwen2-odd.config.json";
  const std::string dir = ::testing::TempDir() + "seeded-shards-qwen2";
  std::string out;
  ASSERT_EQ(run_tool(tool_path("tessera-models"), "generate --config " + qwen2 + " --seed 3 --save " + dir, out, "2>&1"), 0)
      << out;
  struct cse { std::string seeded, normal; };
  for (const cse& c : {cse{"gpt2-tiny", "gpt2-tiny"}, cse{"llama-tiny", "llama-tiny"}, cse{qwen2, dir}}) {
    SCOPED_TRACE(c.seeded);
    const std::string common = " --tiles 2 --plan 1,1,2 --tile-memory 256MiB --seed 3 --prompt-ids 1,5,9,13,17 --generate 6";
    std::string normal, seeded;
    ASSERT_EQ(run_tessera_host("--model " + c.normal + common, normal, 240), 0) << normal;
    ASSERT_EQ(run_tessera_host("--model " + c.seeded + common + " --seeded-shards", seeded, 240), 0) << seeded;
    const std::string want = generated_line(normal);
    ASSERT_GT(want.size(), std::string("generated ids:").size()) << normal;
    EXPECT_EQ(generated_line(seeded), want) << seeded;
  }
}

}  // namespace
}  // namespace tessera::test_support
