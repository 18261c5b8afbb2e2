// tessera-bench-placement from the user's side, on bert-tiny in seconds: per dtype (fp32 and bf16)
// the single process on 1 and min(N, cores) threads, N = 2 and 8 tiles under the automatic plan and
// W = 2 forced tensor-parallel, each with sane rates; every ratio is the printed rate over its
// baseline's printed rate, targets marked met exactly when the ratio reaches them; bf16 sends half
// fp32's hidden-row bytes and the same partial-sum bytes; the table, RESULT lines, CSV and JSON
// agree. The automatic plan is ranked with the barrier measured on the bench's tiles (or the one
// --barrier-us forces): its row's plan is compile_bert's choice at that value. Bad options are
// refused with exit code 2 and a message naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/host/placement.hpp"
#include "tessera/models/config.hpp"
#include "tessera/test/child_process.hpp"
#include "tessera/test/ranking_barrier.hpp"
#include "tessera/test/refusals.hpp"
#include "tessera/test/tool_tables.hpp"

using namespace tessera::test_support;
namespace fs = std::filesystem;
using nlohmann::json;

TEST(PlacementBench, Bf16AndFp32RowsAreSaneAndAgree) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-pbench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string csv = (dir / "rows.csv").string(), js = (dir / "rows.json").string();
  const int requests = 24;
  auto r = run_to_end({bin("tessera-bench-placement"), "--model", "bert-tiny", "--dtype", "fp32,bf16", "--requests",
                       std::to_string(requests), "--tiles", "2,8", "--tp", "2", "--token-budget", "512",
                       "--tile-memory", "256MiB", "--csv", csv, "--json", js},
                      300);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream jf(js);
  const auto rows = json::parse(jf);
  ASSERT_FALSE(rows.empty());
  const int cores = rows[0]["cores"];
  ASSERT_GE(cores, 1);
  EXPECT_NE(r.out.find(std::to_string(cores) + " cores"), std::string::npos) << "the core count is printed: " << r.out;
  EXPECT_NE(r.out.find("load average"), std::string::npos) << r.out;
  const std::set<int> all_threads{1, std::min(2, cores), std::min(8, cores)};

  // (dtype, mode, tiles) -> row; singles by (dtype, threads).
  std::map<std::tuple<std::string, std::string, int>, json> tiles;
  std::map<std::pair<std::string, int>, json> singles;
  for (const auto& row : rows) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["model"], "bert-tiny");
    EXPECT_EQ(row["cores"], cores);
    const double secs = row["seconds"], rate = row["req_per_s"], cpu_rate = row["req_per_cpu_s"];
    ASSERT_GT(secs, 0);
    EXPECT_NEAR(rate, requests / secs, 1e-6 * rate);
    EXPECT_GT(cpu_rate, 0);
    EXPECT_NEAR(cpu_rate, requests / row["cpu_seconds"].get<double>(), 1e-6 * cpu_rate);
    const std::string dt = row["dtype"], mode = row["mode"];
    ASSERT_TRUE(dt == "fp32" || dt == "bf16");
    // Against the single process of the same dtype: fp32 reorders sums only; bf16 rounds the same.
    EXPECT_LE(row["max_abs_diff"].get<double>(), dt == "fp32" ? 1e-4 : 0.01);
    if (mode == "single") {
      EXPECT_EQ(row["tiles"], 0);
      EXPECT_EQ(row["bytes_per_request"], 0);
      EXPECT_EQ(row["ratio"], 1.0);
      singles[{dt, row["threads"].get<int>()}] = row;
      continue;
    }
    ASSERT_TRUE(mode == "auto" || mode == "tp");
    const int n = row["tiles"];
    EXPECT_EQ(row["threads"], n) << "one compute thread a tile";
    EXPECT_EQ(row["baseline_threads"], std::min(n, cores));
    EXPECT_GT(row["supersteps_per_batch"].get<int>(), 0);
    EXPECT_GT(row["compute_ms_per_request"].get<double>(), 0);
    EXPECT_GE(row["host_cpu_ms_per_request"].get<double>(), 0);
    tiles[{dt, mode, n}] = row;
  }
  for (const std::string dt : {"fp32", "bf16"}) {
    SCOPED_TRACE(dt);
    for (int t : all_threads) EXPECT_TRUE(singles.count({dt, t})) << "single process on " << t << " threads";
    for (const auto& [mode, n] : std::vector<std::pair<std::string, int>>{{"auto", 2}, {"auto", 8}, {"tp", 2}}) {
      SCOPED_TRACE(mode + " " + std::to_string(n));
      ASSERT_TRUE(tiles.count({dt, mode, n}));
      const json& row = tiles[{dt, mode, n}];
      const json& base = singles[{dt, std::min(n, cores)}];
      // The ratios are the printed rates over the baseline's printed rates.
      EXPECT_NEAR(row["ratio"].get<double>(), row["req_per_s"].get<double>() / base["req_per_s"].get<double>(),
                  1e-9 * row["ratio"].get<double>());
      EXPECT_NEAR(row["cpu_ratio"].get<double>(),
                  row["req_per_cpu_s"].get<double>() / base["req_per_cpu_s"].get<double>(),
                  1e-9 * row["cpu_ratio"].get<double>());
      if (mode == "auto") {
        const double target = n == 2 ? (dt == "bf16" ? 0.9 : 0.85) : (dt == "bf16" ? 0.7 : 0.6);
        EXPECT_DOUBLE_EQ(row["target"].get<double>(), target);
        EXPECT_EQ(row["verdict"], row["ratio"].get<double>() >= target ? "met" : "missed");
        EXPECT_EQ(row["cpu_verdict"], row["cpu_ratio"].get<double>() >= target ? "met" : "missed");
      } else {
        EXPECT_EQ(row["plan"], "1,1,2,1");
        EXPECT_EQ(row["target"], 0.0);
        EXPECT_EQ(row["verdict"], "");
        EXPECT_GT(row["hidden_bytes_per_request"].get<double>(), 0);
        EXPECT_GT(row["partial_bytes_per_request"].get<double>(), 0);
        EXPECT_GT(row["barrier_ms_per_request"].get<double>(), 0);
        EXPECT_LE(row["hidden_bytes_per_request"].get<double>() + row["partial_bytes_per_request"].get<double>(),
                  row["bytes_per_request"].get<double>());
      }
    }
  }
  // bf16 sends hidden rows in half the bytes, partial sums as fp32 does, so less in all.
  const json &tp32 = tiles[{"fp32", "tp", 2}], &tp16 = tiles[{"bf16", "tp", 2}];
  EXPECT_DOUBLE_EQ(tp16["hidden_bytes_per_request"].get<double>() * 2, tp32["hidden_bytes_per_request"].get<double>());
  EXPECT_DOUBLE_EQ(tp16["partial_bytes_per_request"].get<double>(), tp32["partial_bytes_per_request"].get<double>());
  EXPECT_LT(tp16["bytes_per_request"].get<double>(), tp32["bytes_per_request"].get<double>());

  // RESULT lines: one per row, the same numbers (as printed, 3 decimals).
  int results = 0;
  for (const auto& l : lines_of(r.out)) {
    if (l.rfind("RESULT ", 0) != 0) continue;
    const auto f = result_fields(l);
    ASSERT_LT(results, static_cast<int>(rows.size())) << l;
    const json& row = rows[results++];
    EXPECT_EQ(f.at("bench"), "placement");
    EXPECT_EQ(f.at("dtype"), row["dtype"]);
    EXPECT_EQ(f.at("mode"), row["mode"]);
    EXPECT_EQ(std::stoi(f.at("tiles")), row["tiles"].get<int>());
    EXPECT_NEAR(std::stod(f.at("req_per_s")), row["req_per_s"].get<double>(), 1e-3);
    EXPECT_NEAR(std::stod(f.at("ratio")), row["ratio"].get<double>(), 1e-3);
    EXPECT_EQ(f.at("verdict"), row["verdict"] == "" ? "-" : row["verdict"].get<std::string>());
  }
  EXPECT_EQ(results, static_cast<int>(rows.size()));
  // The CSV holds the same rows under a header, the table one line per row.
  const auto lines = csv_lines(csv, rows.size());
  ASSERT_EQ(lines.size(), rows.size() + 1);
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(lines[i + 1].rfind(rows[i]["dtype"].get<std::string>() + "," + rows[i]["mode"].get<std::string>() + ",", 0), 0u)
        << lines[i + 1];
  int table_rows = 0;
  for (const auto& l : lines_of(r.out)) table_rows += l.rfind("| fp32 |", 0) == 0 || l.rfind("| bf16 |", 0) == 0;
  EXPECT_EQ(table_rows, static_cast<int>(rows.size())) << r.out;
  fs::remove_all(dir);
}

TEST(PlacementBench, TheAutomaticPlanIsRankedWithTheBarrierMeasuredOnItsTiles) {
  // bert-tiny on 2 tiles that cannot each hold a replica: lanes or a pipeline, ranked by the
  // barrier. The bench's row says the barrier it measured on its tiles (also on its RESULT line),
  // and its plan is compile_bert's choice at exactly that value; --barrier-us forces it.
  auto cfg = tessera::models::preset_config("bert-tiny");
  ASSERT_TRUE(cfg);
  const int budget = 512, seqs = 64;
  std::vector<uint64_t> memories;
  for (uint64_t mib = 2; mib <= 256; ++mib) memories.push_back(mib << 20);
  auto plan_at = [&](uint64_t memory, double barrier_s) -> std::optional<std::string> {
    tessera::host::placement_request req;
    req.tiles = 2;
    req.tile_memory = memory;
    req.token_budget = budget;
    req.max_sequences = seqs;
    req.machine.sync_seconds = barrier_s;
    auto c = tessera::host::compile_bert(*cfg, req);
    if (!c || c->chosen.replicas > 1) return std::nullopt;
    const auto& p = c->chosen;
    return std::to_string(p.replicas) + "," + std::to_string(p.stages) + "," + std::to_string(p.width) + "," +
           std::to_string(p.micro_batches);
  };
  const fs::path dir = fs::temp_directory_path() / ("tessera-pbench-b-" + std::to_string(getpid()));
  fs::create_directories(dir);
  expect_ranked_with_barrier(memories, plan_at, [&](uint64_t memory, const std::vector<std::string>& extra) {
    const std::string js = (dir / "rows.json").string();
    std::vector<std::string> args{bin("tessera-bench-placement"), "--model", "bert-tiny", "--dtype", "fp32", "--requests",
                                  "4", "--tiles", "2", "--tp", "none", "--token-budget", std::to_string(budget),
                                  "--max-seqs", std::to_string(seqs), "--tile-memory",
                                  std::to_string(memory >> 20) + "MiB", "--json", js};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_to_end(args, 300);
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    std::ifstream jf(js);
    const auto rows = r.rc == 0 ? json::parse(jf) : json::array();
    json tiles = json::object();
    for (const auto& row : rows)
      if (row["mode"] == "auto") tiles = row;
    if (tiles.contains("ranking_barrier"))
      EXPECT_NE(r.out.find("ranking_barrier=" + tiles["ranking_barrier"].get<std::string>()), std::string::npos) << r.out;
    return std::make_pair(r, tiles);
  });
  fs::remove_all(dir);
}

TEST(PlacementBench, RefusesBadOptionsNamingThem) {
  expect_refusals(bin("tessera-bench-placement"), {
      {{"--dtype", "fp16"}, "--dtype fp16"},
      {{"--dtype", "bf16,"}, "--dtype bf16,"},
      {{"--tiles", "0"}, "--tiles"},
      {{"--tiles", "2,x"}, "--tiles"},
      {{"--tp", "1"}, "--tp"},
      {{"--tile-memory", "lots"}, "--tile-memory"},
      {{"--barrier-us", "0"}, "--barrier-us"},
      {{"--barrier-us=-5"}, "--barrier-us"},
      {{"--barrier-us", "fast"}, "barrier-us"},
      {{"--requests", "0"}, "--requests"},
      {{"--model", "no-such-model"}, "no-such-model"},
      // bert-tiny's embedding alone is over 1 MiB a tile.
      {{"--model", "bert-tiny", "--requests", "2", "--dtype", "bf16", "--tiles", "none", "--tp", "2", "--tile-memory",
        "1MiB"},
       "fit"},
  });
}
