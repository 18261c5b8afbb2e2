// tessera-bench-decoder-tiles from the user's side, at sizes that take seconds: the single
// process and real tile processes (automatic plan and tensor-parallel W = 2) each give a row per
// batch with nonzero prefill and decode rates, every token of the workload counted, supersteps on
// tiles, bytes exchanged and barriers under tensor parallelism (none between replicas), a modelled
// time; the table, CSV and JSON agree. Greedy tokens chosen on the LM-head tile (--sample tile)
// equal those taken from the logits rows sent back (--sample host), and async scheduling's (the ids
// of step t+1 taken on the tiles from step t's samples) those of the synchronous path. The automatic
// plan is ranked with the barrier measured on the bench's tiles (or the one --barrier-us forces):
// its row's plan is compile_decoder's choice at that value. Bad options and a plan that does not
// fit are refused with exit code 2 and a message naming them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/host/placement.hpp"
#include "tessera/models/shape.hpp"
#include "tessera/test/child_process.hpp"
#include "tessera/test/ranking_barrier.hpp"
#include "tessera/test/refusals.hpp"
#include "tessera/test/tool_tables.hpp"

using namespace tessera::test_support;
namespace fs = std::filesystem;
namespace host = tessera::host;

namespace {

// The bench's first request for --plan auto on `tiles` tiles (collective auto, KV as many blocks
// as fit), ranked with a barrier of `barrier_s` a superstep.
host::placement_request bench_request(int tiles, uint64_t memory, int token_budget, int max_batch, double barrier_s) {
  host::placement_request req;
  req.tiles = tiles;
  req.tile_memory = memory;
  req.token_budget = token_budget;
  req.max_sequences = max_batch;
  req.machine.sync_seconds = barrier_s;
  return req;
}

}  // namespace

TEST(DecoderTilesBench, RowsForOneProcessAndTilesAreSane) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-dtbench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string csv = (dir / "rows.csv").string(), json = (dir / "rows.json").string();
  const int prompt = 20, decode = 3;
  auto r = run_to_end({bin("tessera-bench-decoder-tiles"), "--model", "llama-tiny", "--tiles", "0", "2", "--plan", "auto",
                       "tp", "--prompt", std::to_string(prompt), "--batch", "1", "3", "--decode", std::to_string(decode),
                       "--token-budget", "32", "--tile-memory", "64MiB", "--csv", csv, "--json", json},
                      300);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream jf(json);
  auto rows = nlohmann::json::parse(jf);
  // One process, then N = 2 under the automatic plan and under W = 2, for batches 1 and 3.
  ASSERT_EQ(rows.size(), 6u) << rows.dump(1);
  int single = 0, tp = 0, automatic = 0;
  for (const auto& row : rows) {
    SCOPED_TRACE(row.dump());
    const int B = row["batch"];
    EXPECT_EQ(row["model"], "llama-tiny");
    EXPECT_EQ(row["prompt"], prompt);
    // Every prompt token prefilled (20 tokens in chunks of at most 32 a step), every token decoded.
    EXPECT_EQ(row["prefill_tokens"], B * prompt);
    EXPECT_GE(row["prefill_steps"], (B * prompt + 31) / 32);
    EXPECT_EQ(row["decode_tokens"], B * decode);
    EXPECT_EQ(row["decode_steps"], decode);
    EXPECT_GT(row["prefill_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(row["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(row["prefill_cpu_seconds"].get<double>(), 0);
    EXPECT_GT(row["decode_cpu_seconds"].get<double>(), 0);
    EXPECT_GT(row["modelled_us_per_token"].get<double>(), 0);
    EXPECT_GT(row["modelled_prefill_tokens_per_s"].get<double>(), 0);
    if (row["tiles"] == 0) {
      ++single;
      EXPECT_EQ(row["supersteps_per_token"].get<double>(), 0);
      continue;
    }
    ASSERT_EQ(row["tiles"], 2);
    EXPECT_GT(row["supersteps_per_token"].get<double>(), 0);
    EXPECT_GT(row["compute_ms_per_step"].get<double>(), 0);
    if (row["mode"] == "tp") {
      ++tp;
      EXPECT_EQ(row["plan"], "R=1 S=1 W=2 M=1 all-reduce");  // at W = 2 the all-reduce ranks first at any barrier
      EXPECT_GT(row["bytes_exchanged_per_token"].get<double>(), 0);
      EXPECT_GT(row["barriers_per_step"].get<double>(), 0);
      EXPECT_GT(row["prefill_bytes_exchanged"].get<double>(), 0);
    } else {
      ++automatic;
      EXPECT_EQ(row["mode"], "auto");
      // Plenty of memory for two copies of llama-tiny: the automatic plan replicates, and
      // replicas exchange nothing.
      if (row["plan"] == "R=2 S=1 W=1 M=1") {
        EXPECT_EQ(row["bytes_exchanged_per_token"].get<double>(), 0);
        EXPECT_EQ(row["barriers_per_step"].get<double>(), 0);
      }
    }
  }
  EXPECT_EQ(single, 2);
  EXPECT_EQ(tp, 2);
  EXPECT_EQ(automatic, 2);
  // The CSV holds the same rows under a header; the table one line per row.
  csv_lines(csv, 6);
  int table_rows = 0;
  for (const auto& l : lines_of(r.out)) table_rows += l.rfind("| llama-tiny |", 0) == 0 ? 1 : 0;
  EXPECT_EQ(table_rows, 6) << r.out;
  fs::remove_all(dir);
}

TEST(DecoderTilesBench, TileAndHostSamplingChooseTheSameTokens) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-dtbench-s-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string json = (dir / "rows.json").string();
  const int B = 3;
  auto r = run_to_end({bin("tessera-bench-decoder-tiles"), "--model", "llama-tiny", "--tiles", "2", "--plan", "tp", "--prompt",
                       "20", "--batch", std::to_string(B), "--decode", "3", "--token-budget", "32", "--tile-memory", "64MiB",
                       "--sample", "tile", "host", "--json", json},
                      300);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream jf(json);
  auto rows = nlohmann::json::parse(jf);
  ASSERT_EQ(rows.size(), 2u) << rows.dump(1);
  EXPECT_EQ(rows[0]["sample"], "tile");
  EXPECT_EQ(rows[1]["sample"], "host");
  // The same greedy tokens; the tile's ids (a 256-byte record a row) in place of 32000 floats a row.
  EXPECT_EQ(rows[0]["token_hash"], rows[1]["token_hash"]);
  EXPECT_EQ(rows[0]["host_bytes_per_step"].get<double>(), B * 256.0);
  EXPECT_EQ(rows[1]["host_bytes_per_step"].get<double>(), B * 32000 * 4.0);
  fs::remove_all(dir);
}

TEST(DecoderTilesBench, AllReduceAndReduceScatterChooseTheSameTokensInFewerSupersteps) {
  // W = 2 lanes under each --collective in one run: the same greedy tokens, 2 supersteps a layer
  // and the logits' (llama-tiny: 2 layers, 5 a step) against 4 a layer (9), half the barriers, and
  // the same bytes exchanged (at W = 2 each lane sends its whole rows once either way).
  const fs::path dir = fs::temp_directory_path() / ("tessera-dtbench-c-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string json = (dir / "rows.json").string();
  const int B = 3;
  auto r = run_to_end({bin("tessera-bench-decoder-tiles"), "--model", "llama-tiny", "--tiles", "2", "--plan", "tp", "--collective",
                       "rs-ag", "allreduce", "--prompt", "20", "--batch", std::to_string(B), "--decode", "3", "--token-budget",
                       "32", "--tile-memory", "64MiB", "--json", json},
                      300);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream jf(json);
  auto rows = nlohmann::json::parse(jf);
  ASSERT_EQ(rows.size(), 2u) << rows.dump(1);
  EXPECT_EQ(rows[0]["collective"], "rs-ag");
  EXPECT_EQ(rows[0]["plan"], "R=1 S=1 W=2 M=1");
  EXPECT_EQ(rows[1]["collective"], "allreduce");
  EXPECT_EQ(rows[1]["plan"], "R=1 S=1 W=2 M=1 all-reduce");
  EXPECT_EQ(rows[0]["token_hash"], rows[1]["token_hash"]);
  EXPECT_DOUBLE_EQ(rows[0]["supersteps_per_token"].get<double>(), 9.0 / B);
  EXPECT_DOUBLE_EQ(rows[1]["supersteps_per_token"].get<double>(), 5.0 / B);
  EXPECT_DOUBLE_EQ(rows[0]["barriers_per_step"].get<double>(), 8);
  EXPECT_DOUBLE_EQ(rows[1]["barriers_per_step"].get<double>(), 4);
  EXPECT_DOUBLE_EQ(rows[0]["bytes_exchanged_per_token"].get<double>(), rows[1]["bytes_exchanged_per_token"].get<double>());
  EXPECT_GE(rows[1]["load_1min"].get<double>(), 0);
  fs::remove_all(dir);
}

// --async-scheduling on: decode step t+1 sent before step t's ids are back, its ids taken on the
// tiles from step t's samples. The same greedy tokens as the synchronous path, at B = 1 and 3, on
// tensor-parallel W = 2 (the first stage's other lane receives the ids) and a pipeline S = 2.
TEST(DecoderTilesBench, AsyncSchedulingChoosesTheSameTokens) {
  const fs::path dir = fs::temp_directory_path() / ("tessera-dtbench-a-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string json = (dir / "rows.json").string();
  auto r = run_to_end({bin("tessera-bench-decoder-tiles"), "--model", "llama-tiny", "--tiles", "2", "--plan", "tp", "1,2,1",
                       "--prompt", "20", "--batch", "1", "3", "--decode", "9", "--token-budget", "32", "--tile-memory",
                       "64MiB", "--async-scheduling", "off", "on", "--json", json},
                      300);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("| sched |"), std::string::npos) << r.out;
  std::ifstream jf(json);
  auto rows = nlohmann::json::parse(jf);
  ASSERT_EQ(rows.size(), 8u) << rows.dump(1);  // 2 plans x (off, on) x 2 batches
  for (size_t i = 0; i < rows.size(); i += 4) {
    SCOPED_TRACE("plan " + rows[i]["plan"].get<std::string>());
    for (size_t b = 0; b < 2; ++b) {
      const auto &sync = rows[i + b], &async = rows[i + 2 + b];
      EXPECT_EQ(sync["sched"], "sync");
      EXPECT_EQ(async["sched"], "async");
      EXPECT_EQ(async["batch"], sync["batch"]);
      EXPECT_EQ(async["decode_tokens"], sync["decode_tokens"]);
      EXPECT_EQ(async["token_hash"], sync["token_hash"]) << "batch " << sync["batch"];
      EXPECT_GT(async["decode_tokens_per_s"].get<double>(), 0);
    }
  }
  fs::remove_all(dir);
}

TEST(DecoderTilesBench, TheAutomaticPlanIsRankedWithTheBarrierMeasuredOnItsTiles) {
  // llama-tiny on 2 tiles too small for a whole replica each: lanes (W = 2) or a pipeline (S = 2),
  // ranked by the barrier. The bench measures the barrier on the tiles it started, logs it and puts
  // it in its row and table, and the row's plan is compile_decoder's choice at exactly that value
  // (the bench's request: collective auto, KV as many blocks as fit); --barrier-us forces it.
  auto shape = tessera::models::shape_preset("llama-tiny");
  ASSERT_TRUE(shape);
  const int budget = 32, batch = 2;
  std::vector<uint64_t> memories;
  for (uint64_t kib = 1024; kib <= 64 * 1024; kib += 256) memories.push_back(kib << 10);
  auto plan_at = [&](uint64_t memory, double barrier_s) -> std::optional<std::string> {
    auto c = host::compile_decoder(*shape, bench_request(2, memory, budget, batch, barrier_s));
    if (!c || c->chosen.replicas > 1) return std::nullopt;
    return c->chosen.to_string();
  };
  const fs::path dir = fs::temp_directory_path() / ("tessera-dtbench-b-" + std::to_string(getpid()));
  fs::create_directories(dir);
  expect_ranked_with_barrier(memories, plan_at, [&](uint64_t memory, const std::vector<std::string>& extra) {
    const std::string json = (dir / "rows.json").string();
    std::vector<std::string> args{bin("tessera-bench-decoder-tiles"), "--model", "llama-tiny", "--tiles", "2", "--plan", "auto",
                                  "--prompt", "20", "--batch", std::to_string(batch), "--decode", "2", "--token-budget",
                                  std::to_string(budget), "--tile-memory", std::to_string(memory >> 10) + "KiB", "--json", json};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_to_end(args, 300);
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    std::ifstream jf(json);
    auto rows = r.rc == 0 ? nlohmann::json::parse(jf) : nlohmann::json::array();
    EXPECT_EQ(rows.size(), 1u) << rows.dump(1);
    EXPECT_NE(r.out.find("| ranking barrier us |"), std::string::npos) << r.out;
    return std::make_pair(r, rows.empty() ? nlohmann::json::object() : rows[0]);
  });
  fs::remove_all(dir);
}

TEST(DecoderTilesBench, RefusesBadOptionsNamingThem) {
  expect_refusals(bin("tessera-bench-decoder-tiles"), {
      {{"--plan", "wide"}, "--plan wide"},
      {{"--tiles", "-1"}, "--tiles -1"},
      {{"--batch", "0"}, "--batch"},
      {{"--decode", "0"}, "--decode"},
      {{"--sample", "gpu"}, "--sample gpu"},
      {{"--collective", "ring"}, "--collective 'ring'"},
      {{"--async-scheduling", "maybe"}, "--async-scheduling maybe"},
      {{"--async-scheduling", "on", "--sample", "host"}, "--sample tile"},
      {{"--tile-memory", "lots"}, "--tile-memory"},
      {{"--barrier-us", "0"}, "--barrier-us"},
      {{"--barrier-us=-5"}, "--barrier-us"},
      {{"--barrier-us", "nan"}, "--barrier-us"},
      {{"--barrier-us", "fast"}, "barrier-us"},
      {{"--model", "no-such-model", "--tiles", "0"}, "no-such-model"},
      // 768 prompt tokens + 1024 generated are beyond GPT-2's 1024 positions.
      {{"--model", "gpt2-tiny", "--tiles", "0", "--prompt", "768", "--decode", "1024", "--batch", "1"}, "positions"},
      // gpt2-tiny's embedding alone is over 4 MiB a tile.
      {{"--model", "gpt2-tiny", "--tiles", "2", "--plan", "tp", "--tile-memory", "4MiB", "--batch", "1"}, "does not fit"},
  });
}
