// What the bf16 and int8 model tests share (bf16_test.cpp, int8_test.cpp): forwards from several
// threads at once against one alone, and tessera-models run as a process with its printed logits.
// Header-only.
#pragma once

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/models/forward.hpp"
#include "tessera/test/run_tool.hpp"

namespace tessera::models::testing {

/// Forwards of `m` on `b` in 4 threads at once, `rounds` times, each equal bit for bit to one
/// forward alone (a server's workers: every matmul must run on its thread's scratchpad).
inline void expect_concurrent_forwards_equal(const bert_model& m, const packed_batch& b, int rounds) {
  const std::vector<float> alone = reference_forward(m, b);
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<float>> got(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t) threads.emplace_back([&m, &b, &got, t] { got[t] = reference_forward(m, b); });
    for (auto& t : threads) t.join();
    for (size_t t = 0; t < got.size(); ++t) ASSERT_EQ(got[t], alone) << "round " << round << ", thread " << t;
  }
}

/// tessera-models with `args` (stdout and stderr into `out`); `env`: VAR=value settings for its
/// environment ("" for none). Returns its exit code.
inline int run_models_tool(const std::string& env, const std::string& args, std::string& out) {
  return test_support::run_tool(env + " " + test_support::tool_path("tessera-models"), args, out, "2>&1");
}

/// The numbers after every '=' of tessera-models' output (its logits), in order.
inline std::vector<float> printed_logits(const std::string& out) {
  std::vector<float> v;
  const std::regex num("=(-?[0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), num); it != std::sregex_iterator(); ++it)
    v.push_back(std::stof((*it)[1]));
  return v;
}

}  // namespace tessera::models::testing
