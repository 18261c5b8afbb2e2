// The seed experiment: every configuration in the CSV, sane orderings, and a computed sample.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tessera/backends/reference_backend.hpp"
#include "tessera/experiment/provenance.hpp"
#include "tessera/experiment/seed_experiment.hpp"
#include "tessera/timing/preset.hpp"

using namespace tessera;
using namespace tessera::experiment;

namespace {

experiment_options small() {
  return {.saturation_requests = 200, .latency_requests = 200, .computed_requests = 0, .timing_only = true};
}

}  // namespace

TEST(seed_experiment, csv_has_every_configuration_for_every_mix) {
  auto o = small();
  auto rows = run_seed_experiment(o, {}, nullptr);
  ASSERT_TRUE(rows) << rows.error().to_string();
  auto path = (std::filesystem::temp_directory_path() / "tessera-seed-experiment-test.csv").string();
  ASSERT_TRUE(write_rows_csv(*rows, path).ok());
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
  auto gpu = backends::make_reference_backend(model, {.name = "gpu0", .kind = "gpu", .omp_threads = 2});
  auto tiles = backends::make_reference_backend(model, {.name = "tiles0", .kind = "tiles", .omp_threads = 2});
  compute_provider p = [&](const configuration&, const virtual_backend_spec& s) -> std::shared_ptr<backends::backend> {
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

TEST(seed_experiment, service_view_has_slo_curves_and_cost_columns) {
  auto o = small();
  o.slo_points = 4;
  o.slo_p99_ms = {5, 50, 1000};
  auto rows = run_seed_experiment(o, {}, nullptr);
  ASSERT_TRUE(rows) << rows.error().to_string();
  for (const auto& r : *rows) {
    ASSERT_EQ(r.curve.size(), 4u) << r.config;
    for (size_t i = 0; i < r.curve.size(); ++i)
      EXPECT_NEAR(r.curve[i].load_rps, r.saturation_rps * double(i + 1) / 4, 1e-9 * r.saturation_rps) << r.config;
    ASSERT_EQ(r.slo_rps.size(), 3u);
    EXPECT_LE(r.slo_rps[0], r.slo_rps[1]) << r.config;  // a looser target never allows less load
    EXPECT_LE(r.slo_rps[1], r.slo_rps[2]) << r.config;
    for (size_t i = 0; i < 3; ++i) {  // the SLO load is a curve point whose p99 (and every lower one's) meets the target
      if (r.slo_rps[i] == 0) continue;
      for (const auto& pt : r.curve)
        if (pt.load_rps <= r.slo_rps[i]) EXPECT_LE(pt.p99_s * 1e3, o.slo_p99_ms[i]) << r.config;
    }
    EXPECT_EQ(r.device_count, r.config == "hybrid" ? 2 : 1) << r.config;
    if (r.devices == "a100-40gb") {
      EXPECT_EQ(r.tdp_w, 400);
      EXPECT_EQ(r.price_usd, 25000);
      EXPECT_NEAR(rps_per_kw(r), r.saturation_rps / 0.4, 1e-9 * r.saturation_rps);
      const double usd_per_s = 25000 / (3 * 365.25 * 86400) + 0.4 * 0.10 / 3600;  // price over 3 years + 400 W at $0.10/kWh
      EXPECT_NEAR(usd_per_million(r, o), usd_per_s / r.saturation_rps * 1e6, 1e-12);
    } else if (r.config != "hybrid") {  // ipu-mk2: a derived TDP, no public price: no cost column is made up
      EXPECT_EQ(r.tdp_w, 185) << r.config;
      EXPECT_EQ(usd_per_million(r, o), 0) << r.config;
      EXPECT_NE(r.cost_note.find("ipu-mk2: no list price"), std::string::npos) << r.config;
    } else {  // the hybrid row sums both devices' power, and has no price because the IPU has none
      EXPECT_EQ(r.tdp_w, 185 + 400) << r.config;
      EXPECT_EQ(usd_per_million(r, o), 0) << r.config;
      EXPECT_NE(r.cost_note.find("ipu-mk2: no list price"), std::string::npos) << r.config;
    }
  }
  std::string md = rows_markdown(*rows, o, "");
  EXPECT_NE(md.find("SLO req/s p99<=50 ms"), std::string::npos);
  EXPECT_NE(md.find("hybrid / gpu-static per device"), std::string::npos);
  EXPECT_NE(md.find("Missing public figures: ipu-mk2: no list price"), std::string::npos);

  auto dir = std::filesystem::temp_directory_path() / "tessera-seed-service-test";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_rows_csv(*rows, (dir / "rows.csv").string(), o, "# commit: x\n").ok());
  ASSERT_TRUE(write_curves_csv(*rows, (dir / "curves.csv").string(), "# commit: x\n").ok());
  std::ifstream f(dir / "rows.csv");
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, "# commit: x");
  std::getline(f, line);
  EXPECT_NE(line.find(",usd_per_million,slo_rps_p99_5ms,slo_rps_p99_50ms,slo_rps_p99_1000ms"), std::string::npos) << line;
  std::ifstream c(dir / "curves.csv");
  size_t n = 0;
  while (std::getline(c, line)) ++n;
  EXPECT_EQ(n, 2 + rows->size() * 4);  // comment, header, 4 points per row
  std::filesystem::remove_all(dir);
}

TEST(provenance, hashes_commit_command_and_machine) {
  auto dir = std::filesystem::temp_directory_path() / "tessera-provenance-test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "abc.txt") << "abc";
  EXPECT_EQ(file_sha256((dir / "abc.txt").string()),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2 example
  EXPECT_EQ(file_sha256((dir / "missing.txt").string()), "unreadable");
  std::filesystem::remove_all(dir);

  std::string a0 = "tessera-experiment", a1 = "--out-dir", a2 = "my results";
  char* argv[] = {a0.data(), a1.data(), a2.data()};
  auto p = collect_provenance(3, argv, {"a100-40gb", "no-such-preset"}, {7, 8});
  EXPECT_EQ(p.command, "tessera-experiment --out-dir 'my results'");
  EXPECT_FALSE(p.commit.empty());
  ASSERT_EQ(p.presets.size(), 2u);
  EXPECT_EQ(p.presets[0].second, file_sha256((timing::presets_dir() / "a100-40gb.json").string()));
  EXPECT_EQ(p.presets[1].second, "unreadable");
  EXPECT_GE(p.cores, 1u);
  EXPECT_EQ(p.seeds, (std::vector<uint64_t>{7, 8}));
  const std::string lines = p.comment_lines("# ");
  for (const char* key : {"# commit: ", "# command: ", "# preset a100-40gb: sha256:", "# seeds: 7 8", "# cores: ",
                          "# load average at start: "})
    EXPECT_NE(lines.find(key), std::string::npos) << key;
  EXPECT_NE(p.markdown().find("## Provenance"), std::string::npos);
}
