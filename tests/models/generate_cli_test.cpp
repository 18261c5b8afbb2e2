// tessera-models generate as a user runs it: a real process, its output and exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/test/run_tool.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {

std::string tool() { return test_support::tool_path("tessera-models"); }

int run(const std::string& args, std::string& out) { return test_support::run_tool(tool(), args, out, "2>&1"); }

std::string generated_line(const std::vector<int32_t>& ids) {
  std::string s = "generated ids:";
  for (int32_t t : ids) s += " " + std::to_string(t);
  return s + "\n";
}

class generate_cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tool().empty() || !std::filesystem::exists(tool())) GTEST_FAIL() << "tessera-models not built (TESSERA_BIN_DIR)";
  }
};

TEST_F(generate_cli, prints_the_library_s_greedy_tokens) {
  std::string out;
  ASSERT_EQ(run("generate --model llama-tiny --prompt-ids 1,42,99 --max-tokens 6 --threads 1", out), 0) << out;
  auto m = make_preset_decoder("llama-tiny");
  ASSERT_TRUE(m);
  set_num_threads(1);
  auto g = greedy_generate(*m, {1, 42, 99}, {.max_tokens = 6});
  ASSERT_TRUE(g);
  EXPECT_NE(out.find("prompt ids: 1 42 99\n"), std::string::npos) << out;
  EXPECT_NE(out.find(generated_line(g->tokens)), std::string::npos) << out;
  // Chunked prefill and a small block size give the same tokens.
  ASSERT_EQ(run("generate --model llama-tiny --prompt-ids 1,42,99 --max-tokens 6 --threads 1 --prefill-chunk 2 "
                "--block-tokens 2", out), 0) << out;
  EXPECT_NE(out.find(generated_line(g->tokens)), std::string::npos) << out;
}

// export-gguf --type q8_0, then generate --dtype q8_0 on the file (its blocks kept) and --dtype fp32
// (dequantised): each prints the library's tokens for that load.
TEST_F(generate_cli, runs_a_q8_0_file_on_its_blocks) {
  const std::string file = testing::make_temp_dir("generate-cli") + "/llama-tiny-q8_0.gguf";
  std::string out;
  ASSERT_EQ(run("export-gguf --model llama-tiny --type q8_0 --out " + file, out), 0) << out;
  EXPECT_NE(out.find(", q8_0, "), std::string::npos) << out;
  set_num_threads(1);
  for (const dtype d : {dtype::q8_0, dtype::fp32}) {
    const std::string name(dtype_name(d));
    ASSERT_EQ(run("generate --model " + file + " --dtype " + name + " --prompt-ids 1,42,99 --max-tokens 6 --threads 1", out), 0)
        << out;
    auto m = load_decoder(file, 0, d);
    ASSERT_TRUE(m) << m.error().to_string();
    EXPECT_EQ(m->compute_dtype(), d);
    auto g = greedy_generate(*m, {1, 42, 99}, {.max_tokens = 6});
    ASSERT_TRUE(g);
    EXPECT_NE(out.find(generated_line(g->tokens)), std::string::npos) << name << ": " << out;
  }
  EXPECT_EQ(run("export-gguf --model llama-tiny --type q4_0 --out " + file, out), 2) << out;
  EXPECT_NE(out.find("--type is f32, f16 or q8_0"), std::string::npos) << out;
}

TEST_F(generate_cli, saves_a_folder_that_loads_back) {
  const std::string dir = testing::make_temp_dir("generate-cli");
  std::string out;
  ASSERT_EQ(run("generate --config " + testing::data_dir() + "/decoders/gpt2-odd.config.json --seed 3 --save " + dir,
                out), 0) << out;
  auto loaded = load_decoder(dir);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  ASSERT_EQ(run("generate --model " + dir + " --prompt-ids 5,6,7 --max-tokens 4 --threads 1", out), 0) << out;
  set_num_threads(1);
  auto g = greedy_generate(*loaded, {5, 6, 7}, {.max_tokens = 4});
  ASSERT_TRUE(g);
  EXPECT_NE(out.find(generated_line(g->tokens)), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST_F(generate_cli, user_mistakes_exit_2_with_a_message) {
  const std::pair<const char*, const char*> cases[] = {
      {"generate --model llama-tiny --prompt-ids 1,x", "not a token id"},
      {"generate --model llama-tiny --prompt-ids ''", "empty"},
      {"generate --model llama-tiny --prompt-ids 1,40000", "outside the vocabulary"},
      {"generate --model llama-tiny --prompt-ids 1 --max-tokens 5000", "max_position_embeddings"},
      {"generate --model llama-tiny --prompt-ids 1 --block-tokens 0", "block_tokens"},
      {"generate --model llama-tiny --prompt-ids 1 --threads 0", "threads"},
      {"generate --model no-such-model --prompt-ids 1", "neither a model folder"},
      {"generate --model bert-tiny --prompt-ids 1", "encoder"},
      {"generate --model llama-tiny", "--prompt-ids or --prompt"},
      {"generate --model llama-tiny --prompt-ids 1 --prompt hi", "not both"},
      {"generate --config /nonexistent.json", "cannot read"},
      {"generate --bogus", "unrecognised"},
  };
  for (const auto& [args, needle] : cases) {
    std::string out;
    EXPECT_EQ(run(args, out), 2) << args << "\n" << out;
    EXPECT_NE(out.find(needle), std::string::npos) << args << "\n" << out;
  }
}

}  // namespace
}  // namespace tessera::models
