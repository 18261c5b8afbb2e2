// The seed experiment: every configuration in the CSV, sane orderings, and a computed sample.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tessera/experiment/seed_experiment.hpp"
#include "tessera/serving/reference_backend.hpp"

using namespace tessera;
using namespace tessera::experiment;

namespace {

experiment_options small() {
  experiment_options o;
  o.saturation_requests = 200;
  o.latency_requests = 200;
  o.computed_requests = 0;
  o.timing_only = true;
  return o;
}

}  // namespace

TEST(seed_experiment, csv_has_every_configuration_for_every_mix) {
  auto o = small();
  auto rows = run_seed_experiment(o, {}, nullptr);
  ASSERT_TRUE(rows) << rows.error().to_string();
  auto path = (std::filesystem::temp_directory_path() / "tessera-seed-experiment-test.csv").string();
  ASSERT_TRUE(write_rows_csv(*rows, path));
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line.rfind("long_share,config,", 0), 0u);
  std::set<std::pair<std::string, std::string>> seen;
  while (std::getline(f, line)) {
    auto c1 = line.find(','), c2 = line.find(',', c1 + 1);
    seen.insert({line.substr(0, c1), line.substr(c1 + 1, c2 - c1 - 1)});
  }
  std::filesystem::remove(path);
  for (std::string share : {"0.000", "0.400"})
    for (const auto& name : configuration_names()) EXPECT_TRUE(seen.count({share, name})) << share << " " << name;
  EXPECT_EQ(seen.size(), 2 * configuration_names().size());
  for (const auto& r : *rows) {
    EXPECT_GT(r.saturation_rps, 0) << r.config;
    EXPECT_GT(r.p99_s, 0) << r.config;
    EXPECT_GE(r.p99_s, r.p50_s) << r.config;
  }
  std::string md = rows_markdown(*rows, o, "");
  for (const auto& name : configuration_names()) EXPECT_NE(md.find("| " + name + " |"), std::string::npos);
}

TEST(seed_experiment, padding_free_batching_never_computes_padding) {
  auto rows = run_seed_experiment(small(), {}, nullptr);
  ASSERT_TRUE(rows);
  for (const auto& r : *rows) {
    if (r.config == "tiles-packed" || r.config == "gpu-packed") EXPECT_EQ(r.saturation_padding, 0) << r.config;
    if (r.config == "gpu-static") EXPECT_GT(r.saturation_padding, 0.5) << r.config;  // short ones padded to 512
  }
}

TEST(seed_experiment, computed_sample_is_checked_and_matches_its_replay) {
  auto o = small();
  o.timing_only = false;
  o.computed_requests = 12;
  o.long_shares = {0.4};
  o.configs = {"gpu-static", "tiles-packed", "hybrid"};
  auto model = std::make_shared<const models::bert_model>(models::load_model("bert-tiny").value());
  auto gpu = serving::make_reference_backend(model, {.name = "gpu0", .kind = "gpu", .omp_threads = 2});
  auto tiles = serving::make_reference_backend(model, {.name = "tiles0", .kind = "tiles", .omp_threads = 2});
  compute_provider p = [&](const configuration&, const virtual_backend_spec& s) -> std::shared_ptr<host::backend> {
    return s.kind == "tiles" ? tiles : gpu;
  };
  auto rows = run_seed_experiment(o, p, model);
  ASSERT_TRUE(rows) << rows.error().to_string();
  ASSERT_EQ(rows->size(), 3u);
  for (const auto& r : *rows) {
    EXPECT_EQ(r.computed, 12) << r.config;
    EXPECT_TRUE(r.modelled_match) << r.config;
    EXPECT_LE(r.max_logit_error, 1e-4) << r.config;
    EXPECT_GT(r.wall_rps, 0) << r.config;
  }
}
