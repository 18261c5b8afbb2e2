// The design-space search against a brute-force evaluation of the same grid, and its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "tessera/test/run_tool.hpp"
#include "tessera/timing/llm_search.hpp"

namespace tessera::timing {
namespace {

llm_search_options small_grid() {
  llm_search_options o;
  o.chips = {16, 32};
  o.pipelines = {0, 16};
  o.tiles = {1472, 2944};
  o.sram_kib = {312, 624};
  o.link_gbps = {320};
  o.hop_us = {1, 4};
  o.max_seqs = {16, 256};
  o.token_budget = {2048};
  o.gpus = {"a100-40gb", "h100-sxm"};
  o.requests = 60;
  o.seeds = 2;
  o.sensitivity = false;
  return o;
}

TEST(llm_search, cheapest_and_pareto_match_a_brute_force_evaluation_of_the_grid) {
  auto o = small_grid();
  std::stringstream log;
  auto r = run_llm_search(o, log);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_NE(log.str().find("points"), std::string::npos);  // progress
  auto d = *decoder_dims_of(*models::shape_preset("llama-2-7b"));
  // Brute force: every combination, written out here independently of llm_search_grid.
  std::vector<llm_search_eval> all;
  for (int64_t c : o.chips)
    for (int64_t pl : o.pipelines) {
      if (pl > 0 && (pl >= c || c % pl != 0)) continue;  // pipeline=chips is pipeline 0 (all chips)
      for (int64_t t : o.tiles)
        for (int64_t m : o.sram_kib)
          for (double h : o.hop_us)
            for (int64_t ms : o.max_seqs) {
              llm_search_point p;
              p.kind = "ipu";
              p.chips = c, p.pipeline = pl, p.tiles = t, p.sram_kib = m, p.link_gbps = 320, p.hop_us = h;
              p.max_seqs = ms, p.token_budget = 2048;
              all.push_back(evaluate_search_point(p, d, o, o.seed));
            }
    }
  for (const auto& g : o.gpus)
    for (int64_t ms : o.max_seqs) {
      llm_search_point p;
      p.kind = "gpu", p.gpu = g, p.max_seqs = ms, p.token_budget = 2048;
      all.push_back(evaluate_search_point(p, d, o, o.seed));
    }
  ASSERT_EQ(r->evals.size(), all.size());
  EXPECT_EQ(r->evaluated, int64_t(all.size()));
  // The grid has infeasible points (312 KiB x 1472 tiles x 16 chips cannot hold 13.5 GB) and feasible ones.
  int feasible = 0, infeasible = 0;
  double best_ipu = INFINITY, best_gpu = INFINITY;
  std::string best_ipu_label, best_gpu_label;
  for (const auto& e : all) {
    (e.feasible ? feasible : infeasible)++;
    if (!e.feasible) continue;
    double& best = e.point.kind == "ipu" ? best_ipu : best_gpu;
    if (e.usd_per_mtok < best) {
      best = e.usd_per_mtok;
      (e.point.kind == "ipu" ? best_ipu_label : best_gpu_label) = e.point.label();
    }
  }
  EXPECT_GT(feasible, 4);
  EXPECT_GT(infeasible, 0);
  ASSERT_GE(r->best_ipu, 0);
  ASSERT_GE(r->best_gpu, 0);
  EXPECT_EQ(r->evals[size_t(r->best_ipu)].point.label(), best_ipu_label);
  EXPECT_EQ(r->evals[size_t(r->best_gpu)].point.label(), best_gpu_label);
  EXPECT_DOUBLE_EQ(r->evals[size_t(r->best_ipu)].usd_per_mtok, best_ipu);
  EXPECT_DOUBLE_EQ(r->evals[size_t(r->best_gpu)].usd_per_mtok, best_gpu);
  // Pareto: exactly the feasible points no other feasible point beats on price and tokens/s.
  for (size_t i = 0; i < all.size(); ++i) {
    bool dominated = !all[i].feasible;
    for (size_t j = 0; j < all.size() && !dominated; ++j)
      if (j != i && all[j].feasible &&
          ((all[j].price_usd <= all[i].price_usd && all[j].tokens_per_s > all[i].tokens_per_s) ||
           (all[j].price_usd < all[i].price_usd && all[j].tokens_per_s >= all[i].tokens_per_s)))
        dominated = true;
    EXPECT_EQ(r->evals[i].pareto, !dominated) << all[i].point.label();
  }
  // The seeds: the reported medians lie within their spreads and the break-even prices are ordered.
  EXPECT_LE(r->ipu_seeds.tokens_lo, r->ipu_seeds.tokens_med);
  EXPECT_LE(r->ipu_seeds.tokens_med, r->ipu_seeds.tokens_hi);
  EXPECT_GT(r->ipu_price_20_med, r->ipu_price_30_med);
  EXPECT_LE(r->ipu_price_20_lo, r->ipu_price_20_med);
  EXPECT_GE(r->ipu_price_20_hi, r->ipu_price_20_med);
}

TEST(llm_search, a_budget_excludes_what_costs_more) {
  auto o = small_grid();
  o.chips = {16};
  o.pipelines = {0};
  o.tiles = {2944};
  o.sram_kib = {624};
  o.hop_us = {2};
  o.max_seqs = {256};
  o.seeds = 1;
  o.budget_usd = 100000;  // below 16 chips x $10,000 x 1.5 (twice the tiles, the same SRAM per tile)
  auto r = run_llm_search(o, std::cerr);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_LT(r->best_ipu, 0);
  EXPECT_GE(r->best_gpu, 0);
  for (const auto& e : r->evals)
    if (e.point.kind == "ipu" && e.feasible) EXPECT_FALSE(e.within_budget);
}

std::string tool() { return test_support::tool_path("tessera-llm-timing"); }

TEST(llm_search_tool, writes_the_csv_and_refuses_bad_options_by_name) {
  if (tool().empty() || !std::filesystem::exists(tool())) GTEST_FAIL() << "tessera-llm-timing not built (TESSERA_BIN_DIR)";
  const auto csv = std::filesystem::temp_directory_path() / ("tessera_search_" + std::to_string(::getpid()) + ".csv");
  std::string out;
  ASSERT_EQ(test_support::run_tool(tool(),
                                   "search --chips 32 --tiles 1472 --sram-kib 624 --max-seqs-grid 256 --gpus a100-40gb "
                                   "--search-requests 60 --seeds 2 --no-sensitivity --csv " + csv.string(),
                                   out, "2>/dev/null"),
            0)
      << out;
  EXPECT_NE(out.find("| IPU-like |"), std::string::npos) << out;
  EXPECT_NE(out.find("points/s"), std::string::npos) << out;
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("kind,gpu,chips,", 0), 0u) << header;
  int rows = 0;
  while (std::getline(in, row)) ++rows;
  EXPECT_EQ(rows, 2);
  std::filesystem::remove(csv);
  const std::pair<const char*, const char*> bad[] = {
      {"search --tiles 0", "--tiles"},
      {"search --chips 8,x", "--chips"},
      {"search --weights dram", "--weights"},
      {"search --gpus a100-80gb", "--gpus"},
      {"search --workload azure", "--workload"},
      {"search --seeds 0", "--seeds"},
      {"search --budget-usd -5", "--budget-usd"},
      {"search --system h100-sxm", "--system"},
      {"search --frobnicate 3", "frobnicate"},
  };
  for (auto [args, name] : bad) {
    EXPECT_EQ(test_support::run_tool(tool(), args, out, "2>&1"), 2) << args << "\n" << out;
    EXPECT_NE(out.find(name), std::string::npos) << args << "\n" << out;
  }
}

}  // namespace
}  // namespace tessera::timing
