// tessera-bench-embedding from the user's side, on bert-tiny in seconds: the classifier and the
// embedding model (mean pooling on the head tile) on the same 2 tiles and plan both match the
// single process within 1e-4, the host receives hidden_size floats a sequence for the embedding
// model and num_labels for the classifier, the printed ratio is the printed rates' ratio, the
// verdict is "met" exactly when the median round ratio reaches the target, and the load average
// is printed. No speed is asserted (benches measure, tests check). Bad options: exit 2, named.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>

#include "tessera/test/child_process.hpp"
#include "tessera/test/refusals.hpp"
#include "tessera/test/tool_tables.hpp"

using namespace tessera::test_support;

TEST(EmbeddingBench, BothTasksMatchTheSingleProcessAndTheTableAgrees) {
  auto r = run_to_end({bin("tessera-bench-embedding"), "--model", "bert-tiny", "--requests", "16", "--tiles", "2",
                       "--rounds", "2", "--token-budget", "512", "--tile-memory", "256MiB"},
                      300);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("load average"), std::string::npos) << r.out;
  std::map<std::string, std::string> f;
  std::map<std::string, std::vector<std::string>> table;  // task -> cells
  for (const auto& l : lines_of(r.out)) {
    if (l.rfind("RESULT ", 0) == 0) f = result_fields(l);
    if (l.rfind("| classifier |", 0) == 0 || l.rfind("| embedding |", 0) == 0) {
      std::vector<std::string> cells;
      std::istringstream in(l);
      for (std::string c; std::getline(in, c, '|');)
        if (!c.empty() && c != " ") cells.push_back(c.substr(1, c.size() - 2));
      table[cells[0]] = cells;
    }
  }
  ASSERT_FALSE(f.empty()) << r.out;
  ASSERT_EQ(table.size(), 2u) << r.out;
  EXPECT_EQ(f["pooling"], "mean");
  EXPECT_LT(std::stod(f["classifier_max_diff"]), 1e-4);
  EXPECT_LT(std::stod(f["embedding_max_diff"]), 1e-4);
  // Host bytes a request: bert-tiny's hidden size 128 floats pooled, 2 logits.
  EXPECT_EQ(table["embedding"][7], "512") << r.out;
  EXPECT_EQ(table["classifier"][7], "8") << r.out;
  const double cls = std::stod(f["classifier_req_per_s"]), emb = std::stod(f["embedding_req_per_s"]);
  ASSERT_GT(cls, 0);
  ASSERT_GT(emb, 0);
  EXPECT_NEAR(std::stod(f["ratio"]), emb / cls, 2e-3 * emb / cls + 1e-3);
  EXPECT_EQ(f["verdict"], std::stod(f["median_round_ratio"]) >= 0.95 ? "met" : "missed");
}

TEST(EmbeddingBench, BadOptionsAreRefusedByName) {
  expect_refusals(bin("tessera-bench-embedding"),
                  {{{"--pooling", "weightedmean"}, "--pooling weightedmean"},
                   {{"--rounds", "0"}, "--rounds"},
                   {{"--model", std::string(TESSERA_TEST_SOURCE_DIR) + "/tests/data/models/tiny-embed"}, "is an embedding model"}});
}
