// tessera-loadgen's options by mode: a walk of its whole option table (as --help prints it) in
// every mode the command line can select. Each option, given a valid value, either applies in the
// mode (the run is accepted: against port 1, where no server listens, it fails to connect, exit 1)
// or is refused by name before any request is sent (exit 2, stderr naming it). Which one is pinned
// per option and mode below; an option the table does not know fails the test, so a new option
// cannot be added without deciding where it applies. Before this, a 2-row --trace with --openai
// was silently ignored and sent the default 64 requests.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tessera/test/child_process.hpp"

using namespace tessera::test_support;

namespace {

// The modes: what selects them (after the binary; --port 1 and --requests 1 in each).
struct mode_case {
  std::string name;
  std::vector<std::string> args;
};

// Per process: ctest runs this file's tests side by side, and one test's rewrite of a shared
// file was read half-written by another (CI: "trace has no requests").
std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "-" + name)).string();
}

std::string text_trace() {
  const std::string path = tmp("tessera-loadgen-options-texts.csv");
  std::ofstream(path) << "arrival_seconds,text_or_length\n0,8\n0.01,hello there\n";
  return path;
}

std::string llm_trace() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src ? src : TESSERA_TEST_SOURCE_DIR) + "/tests/data/traces/tessera.csv";
}

const std::vector<mode_case>& modes() {
  static const std::vector<mode_case> m = {
      {"predict-closed", {}},
      {"predict-open", {"--mode", "open"}},
      {"predict-trace", {"--mode", "open", "--trace", text_trace()}},
      {"openai-closed", {"--openai", "completions"}},
      {"openai-open", {"--openai", "completions", "--mode", "open"}},
      {"openai-trace", {"--openai", "completions", "--mode", "open", "--trace", llm_trace()}},
      {"openai-sweep", {"--openai", "completions", "--mode", "open", "--sweep", "50,100"}},
      {"openai-ids", {"--openai", "completions", "--prompt-ids"}},
  };
  return m;
}

// Per option: a valid value (the /predict modes' --trace is a texts trace, the OpenAI modes' an
// LLM trace) and, per mode in the order above, A (applies) or R (refused by name); '-' where the
// mode itself sets the option.
struct option_case {
  std::vector<std::string> predict_value, openai_value;
  std::string expect;
};

const std::map<std::string, option_case>& table() {
  static const std::map<std::string, option_case> t = {
      {"host", {{"127.0.0.1"}, {"127.0.0.1"}, "AAAAAAAA"}},
      {"target", {{"/embed"}, {"/embed"}, "AAARRRRR"}},
      {"rate", {{"50"}, {"50"}, "RARRARRR"}},
      {"connections", {{"4"}, {"4"}, "AAAARRRA"}},
      {"duration", {{"2"}, {"2"}, "AAAAAAAA"}},
      {"mix", {{"seed-0"}, {"seed-0"}, "AARRRRRR"}},
      {"trace", {{text_trace()}, {llm_trace()}, "AA-AA-RA"}},
      {"time-scale", {{"0.5"}, {"0.5"}, "RRARRARR"}},
      {"seed", {{"3"}, {"3"}, "AAAAAAAA"}},
      {"no-truncate", {{}, {}, "AAARRRRR"}},
      {"timeout", {{"2"}, {"2"}, "AAAAAAAA"}},
      {"csv", {{tmp("tessera-loadgen-options.csv")}, {tmp("tessera-loadgen-options.csv")}, "AAAAAAAA"}},
      {"json", {{tmp("tessera-loadgen-options.json")}, {tmp("tessera-loadgen-options.json")}, "AAAAAAAA"}},
      {"quiet", {{}, {}, "AAAAAAAA"}},
      {"prompt-len", {{"8"}, {"8"}, "RRRAARAA"}},
      {"output-len", {{"8"}, {"8"}, "RRRAARAA"}},  // the LLM trace gives the output lengths
      {"shared-prefix", {{"4"}, {"4"}, "RRRAAAAA"}},
      {"prompt-ids", {{}, {}, "RRRAAAA-"}},
      {"prompt-id-range", {{"1-5"}, {"1-5"}, "RRRRRRRA"}},
      {"model", {{"m"}, {"m"}, "RRRAAAAA"}},
      {"temperature", {{"0.5"}, {"0.5"}, "RRRAAAAA"}},
      {"slo-ttft-ms", {{"500"}, {"500"}, "RRRAAAAA"}},
      {"slo-tpot-ms", {{"50"}, {"50"}, "RRRAAAAA"}},
      {"sweep", {{"5,10"}, {"5,10"}, "RRRRAR-R"}},
      {"write-trace", {{tmp("tessera-loadgen-options-w.csv")}, {tmp("tessera-loadgen-options-w.csv")}, "RRRAAAAA"}},
  };
  return t;
}

// What selects a mode, not walked as an option of one.
const std::set<std::string> selectors = {"help", "port", "requests", "mode", "openai"};

std::vector<std::string> options_in_help() {
  auto r = run_to_end({bin("tessera-loadgen"), "--help"}, 30);
  EXPECT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> out;
  static const std::regex opt(R"(^  --([a-z][a-z0-9-]*))");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (std::smatch m; std::regex_search(line, m, opt)) out.push_back(m[1]);
  return out;
}

std::vector<std::string> base_args(const mode_case& m) {
  std::vector<std::string> a{bin("tessera-loadgen"), "--port", "1", "--requests", "1"};
  a.insert(a.end(), m.args.begin(), m.args.end());
  return a;
}

}  // namespace

TEST(LoadgenOptions, EveryOptionInHelpIsInTheTable) {
  const auto opts = options_in_help();
  ASSERT_GT(opts.size(), 20u);
  for (const auto& o : opts)
    EXPECT_TRUE(table().count(o) || selectors.count(o)) << "--" << o << ": decide in which modes it applies";
  for (const auto& [name, c] : table()) {
    EXPECT_NE(std::find(opts.begin(), opts.end(), name), opts.end()) << "--" << name << " is gone from --help";
    EXPECT_EQ(c.expect.size(), modes().size()) << name;
  }
}

TEST(LoadgenOptions, EveryModeAloneIsAccepted) {
  for (const auto& m : modes()) {
    auto args = base_args(m);
    args.insert(args.end(), {"--timeout", "2", "--quiet"});
    auto r = run_to_end(args, 60);
    EXPECT_EQ(r.rc, 1) << m.name << " (port 1: nothing answers): " << r.err;
  }
}

TEST(LoadgenOptions, EveryOptionAppliesOrIsRefusedByNameInEveryMode) {
  int refused = 0, applied = 0;
  for (const auto& name : options_in_help()) {
    if (selectors.count(name) || !table().count(name)) continue;
    const auto& c = table().at(name);
    for (size_t i = 0; i < modes().size(); ++i) {
      const auto& m = modes()[i];
      if (c.expect[i] == '-') continue;
      auto args = base_args(m);
      args.push_back("--" + name);
      const auto& v = m.args.size() && m.args[0] == "--openai" ? c.openai_value : c.predict_value;
      args.insert(args.end(), v.begin(), v.end());
      if (name != "timeout") args.insert(args.end(), {"--timeout", "2"});
      auto r = run_to_end(args, 60);
      if (c.expect[i] == 'R') {
        ++refused;
        EXPECT_EQ(r.rc, 2) << "--" << name << " in " << m.name << " should be refused: " << r.err;
        EXPECT_NE(r.err.find("--" + name), std::string::npos) << "--" << name << " in " << m.name << ": " << r.err;
      } else {
        ++applied;
        EXPECT_EQ(r.rc, 1) << "--" << name << " in " << m.name << " should apply (port 1: exit 1): " << r.err;
      }
    }
  }
  EXPECT_GT(refused, 50);
  EXPECT_GT(applied, 90);
  for (const char* f : {"tessera-loadgen-options.csv", "tessera-loadgen-options.json", "tessera-loadgen-options-w.csv",
                        "tessera-loadgen-options-texts.csv"})
    std::filesystem::remove(tmp(f));
}

// The issue's command line: a 2-row trace with a duration, with --openai, replays 2 requests.
TEST(LoadgenOptions, AnOpenAITraceIsReplayedNotIgnored) {
  const std::string path = tmp("tessera-loadgen-two-rows.csv");
  std::ofstream(path) << "arrival_seconds,prompt_tokens,output_tokens\n0,4,2\n0.05,6,3\n";
  const std::string written = tmp("tessera-loadgen-two-rows-sent.csv");
  auto r = run_to_end({bin("tessera-loadgen"), "--openai", "completions", "--mode", "open", "--trace", path, "--duration",
                       "2", "--port", "1", "--timeout", "2", "--quiet", "--write-trace", written},
                      60);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.out.find("sent         2\n"), std::string::npos) << r.out;
  std::ifstream in(written);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(all, "arrival_seconds,prompt_tokens,output_tokens\n0,4,2\n0.050000000000000003,6,3\n");
  std::filesystem::remove(path);
  std::filesystem::remove(written);
}
