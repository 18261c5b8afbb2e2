// tessera-loadgen's options by mode: every option either applies in the mode the command line
// selects or is refused by name (exit 2) before any request is sent. The /predict-style options
// with --openai, and the --openai options without it, were silently ignored before (a 2-row
// --trace with --openai sent the default 64 requests).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/test/child_process.hpp"
#include "tessera/test/refusals.hpp"

using namespace tessera::test_support;

namespace {

struct option_case {
  std::vector<std::string> args;  // the option and its value
  std::string name;               // as the refusal must name it
};

// A valid value for each mode-specific option, so that only the mode can make it wrong.
const std::vector<option_case> encoder_only = {
    {{"--target", "/embed"}, "--target"},   {{"--duration", "2"}, "--duration"}, {{"--mix", "seed-0"}, "--mix"},
    {{"--trace", "t.csv"}, "--trace"},      {{"--no-truncate"}, "--no-truncate"}, {{"--json", "r.json"}, "--json"},
};
const std::vector<option_case> openai_only = {
    {{"--prompt-len", "8"}, "--prompt-len"},       {{"--output-len", "8"}, "--output-len"},
    {{"--shared-prefix", "4"}, "--shared-prefix"}, {{"--prompt-ids"}, "--prompt-ids"},
    {{"--prompt-id-range", "1-5"}, "--prompt-id-range"}, {{"--model", "m"}, "--model"},
    {{"--temperature", "0.5"}, "--temperature"},
};

}  // namespace

TEST(LoadgenOptions, EncoderOptionsWithOpenAIAreRefusedByName) {
  std::vector<refusal> cases;
  for (const auto& o : encoder_only) {
    std::vector<std::string> args{"--openai", "completions", "--port", "1", "--requests", "1"};
    args.insert(args.end(), o.args.begin(), o.args.end());
    cases.push_back({args, o.name + " does not apply with --openai"});
  }
  // The issue's own command line: a trace and a duration with --openai.
  cases.push_back({{"--openai", "completions", "--trace", "t.csv", "--duration", "2"}, "does not apply with --openai"});
  expect_refusals(bin("tessera-loadgen"), cases);
}

TEST(LoadgenOptions, OpenAIOptionsWithoutOpenAIAreRefusedByName) {
  std::vector<refusal> cases;
  for (const auto& o : openai_only) {
    std::vector<std::string> args{"--port", "1", "--requests", "1"};
    args.insert(args.end(), o.args.begin(), o.args.end());
    cases.push_back({args, o.name + " applies only with --openai"});
  }
  expect_refusals(bin("tessera-loadgen"), cases);
}

TEST(LoadgenOptions, OptionsOfTheModeAreTakenNotRefused) {
  // Port 1 has no server: a run that was accepted fails to connect (exit 1), never exit 2.
  for (const auto& o : openai_only) {
    std::vector<std::string> args{bin("tessera-loadgen"), "--openai", "completions", "--port", "1", "--requests", "1",
                                  "--timeout", "2", "--quiet"};
    args.insert(args.end(), o.args.begin(), o.args.end());
    auto r = run_to_end(args, 60);
    EXPECT_NE(r.rc, 2) << o.name << " refused with --openai: " << r.err;
  }
  for (const auto& o : encoder_only) {
    if (o.name == "--trace") continue;  // needs a file; the trace reader has its own tests
    std::vector<std::string> args{bin("tessera-loadgen"), "--port", "1", "--requests", "1", "--timeout", "2", "--quiet"};
    args.insert(args.end(), o.args.begin(), o.args.end());
    auto r = run_to_end(args, 60);
    EXPECT_NE(r.rc, 2) << o.name << " refused without --openai: " << r.err;
  }
}
