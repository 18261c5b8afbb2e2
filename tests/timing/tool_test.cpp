// tessera-timing: --help, --validate, an estimate, and a user mistake exiting 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/test/run_tool.hpp"

namespace {

std::string tool() { return tessera::test_support::tool_path("tessera-timing"); }

// Runs the tool with `args`; returns the exit code and fills `out` with stdout.
int run(const std::string& args, std::string& out) { return tessera::test_support::run_tool(tool(), args, out); }

class tool_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tool().empty() || !std::filesystem::exists(tool())) GTEST_FAIL() << "tessera-timing not built (TESSERA_BIN_DIR)";
  }
};

TEST_F(tool_test, help_validate_and_estimate) {
  std::string out;
  EXPECT_EQ(run("--help", out), 0);
  EXPECT_NE(out.find("--preset"), std::string::npos);
  EXPECT_EQ(run("--validate", out), 0);
  EXPECT_NE(out.find("## Calibration rows"), std::string::npos) << out;
  EXPECT_NE(out.find("## Held-out rows"), std::string::npos) << out;
  EXPECT_NE(out.find("a100-trt-bert-base-s128-b32"), std::string::npos) << out;
  EXPECT_EQ(run("--validate-llm", out), 0);
  EXPECT_NE(out.find("all held out"), std::string::npos) << out;
  EXPECT_NE(out.find("a100-trtllm0.5-llama7b-b64-i128-o128"), std::string::npos) << out;
  EXPECT_EQ(run("--validate --format json", out), 0);
  auto j = nlohmann::json::parse(out);
  EXPECT_GE(j["held_out"].size(), 13u);
  EXPECT_EQ(j["calibration"].size(), 5u);
  EXPECT_EQ(j["leave_one_out"].size(), 4u);
  EXPECT_EQ(run("--preset a100-40gb --model-shape bert-base --batch 32 --seq 128 --dtype fp16", out), 0);
  EXPECT_NE(out.find("modelled time:"), std::string::npos) << out;
  EXPECT_EQ(run("--preset ipu-mk2 --batch 4 --seq 64 --emulated-tiles 8 --format json", out), 0);
  EXPECT_NE(out.find("\"physical_per_emulated\": 184.0"), std::string::npos) << out;
}

TEST_F(tool_test, user_mistakes_exit_2) {
  std::string out;
  EXPECT_EQ(run("--preset no-such-chip", out), 2);
  EXPECT_EQ(run("--preset a100-40gb --dtype bf8", out), 2);
  EXPECT_EQ(run("--preset a100-40gb --seq-lens 12,x", out), 2);
  EXPECT_EQ(run("--bogus-flag", out), 2);
}

}  // namespace
