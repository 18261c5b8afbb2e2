// tessera/test/ranking_barrier.hpp: a bench's automatic plan ranked with the barrier it measured on
// the tiles it started (its row's ranking_barrier "measured", ranking_barrier_seconds > 0, and its
// plan the compiler's choice at exactly that value), or with the one --barrier-us forces (the plan
// follows: one choice at 1 us, another at 20 ms, on a tile memory found where they differ).
//
//   auto at = [&](uint64_t memory, double barrier_s) -> std::optional<std::string> { ... };
//   expect_ranked_with_barrier(memories, at, [&](uint64_t memory, const std::vector<std::string>& extra) { ... });
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/test/child_process.hpp"

namespace tessera::test_support {

/// The compiler's plan (as the bench's row writes it) on a tile memory at a barrier cost in
/// seconds; nullopt when nothing fits or the plan replicates (replicas pay no barrier).
using plan_at_fn = std::function<std::optional<std::string>(uint64_t memory, double barrier_s)>;
/// Runs the bench on a tile memory with extra arguments; its output and its automatic plan's row.
using bench_row_fn = std::function<std::pair<run_output, nlohmann::json>(uint64_t memory, const std::vector<std::string>& extra)>;

inline void expect_ranked_with_barrier(const std::vector<uint64_t>& memories, const plan_at_fn& plan_at,
                                       const bench_row_fn& run) {
  uint64_t memory = 0;
  std::string cheap, dear;
  for (uint64_t m : memories) {
    auto lo = plan_at(m, 1e-6), hi = plan_at(m, 20e-3);
    if (!lo || !hi || *lo == *hi) continue;
    memory = m, cheap = *lo, dear = *hi;
    break;
  }
  ASSERT_GT(memory, 0u) << "no tile memory where the plan turns on the barrier";
  {
    SCOPED_TRACE("measured, " + std::to_string(memory) + " bytes a tile");
    auto [r, row] = run(memory, {});
    ASSERT_TRUE(row.contains("ranking_barrier")) << row.dump(1) << r.out << r.err;
    EXPECT_EQ(row["ranking_barrier"], "measured");
    const double barrier = row["ranking_barrier_seconds"];
    EXPECT_GT(barrier, 0);
    EXPECT_EQ(row["plan"], plan_at(memory, barrier).value_or("replicas or no fit")) << barrier;
    EXPECT_NE(r.err.find("measured on these 2 tiles"), std::string::npos) << r.err;
  }
  for (const auto& [us, want] : std::vector<std::pair<std::string, std::string>>{{"1", cheap}, {"20000", dear}}) {
    SCOPED_TRACE("--barrier-us " + us);
    auto [r, row] = run(memory, {"--barrier-us", us});
    ASSERT_TRUE(row.contains("ranking_barrier")) << row.dump(1) << r.out << r.err;
    EXPECT_EQ(row["ranking_barrier"], "forced");
    EXPECT_DOUBLE_EQ(row["ranking_barrier_seconds"].get<double>(), std::stod(us) * 1e-6);
    EXPECT_EQ(row["plan"], want);
    EXPECT_NE(r.err.find("forced by --barrier-us"), std::string::npos) << r.err;
  }
}

}  // namespace tessera::test_support
