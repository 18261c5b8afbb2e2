// program_timing on hand-computed cases; the profiler's trace (valid JSON, well nested, monotonic
// per track), summary and memory report on synthetic runs; one run of bert-tiny on 2 real tiles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "tessera/host/profiler.hpp"
#include "tessera/host/program_timing.hpp"
#include "tessera/host/tile_model.hpp"
#include "tessera/models/model.hpp"
#include "tessera/timing/estimator.hpp"

using namespace tessera;
using namespace tessera::host;
using exchange::slice_kind;

namespace {

timing::ipu_preset mk2() {
  auto p = timing::load_ipu_preset("ipu-mk2");
  EXPECT_TRUE(p) << p.error().message();
  return *p;
}

exchange::tensor_desc f32(uint32_t id, std::vector<int64_t> shape) { return {id, "t" + std::to_string(id), exchange::dtype::f32, shape}; }

// One emulated tile per physical tile (s = 1), so the numbers are the per-tile formulas.
program_timing_options one_to_one() {
  program_timing_options o;
  o.emulated_tiles = 1472;
  o.exchange_element_bytes = 4;
  return o;
}

TEST(ProgramTiming, CopyOnOneTileIsOverheadPlusVectors) {
  // copy of 64 fp16 elements: 200 overhead + ceil(64 / 4 lanes) * 1 cycle = 216 cycles; one tile, no sync.
  exchange::program p;
  p.tiles = {0};
  p.temporaries = {f32(1, {64}), f32(2, {64})};
  p.steps.resize(1);
  p.steps[0].compute.push_back({models::kernel_id::copy, {1}, {2}, {}, {}});
  auto t = time_program({{0, p}}, {{0, {{1, p.temporaries[0]}, {2, p.temporaries[1]}}}}, {8}, mk2(), one_to_one());
  ASSERT_TRUE(t) << t.error().message();
  ASSERT_EQ(t->steps.size(), 1u);
  EXPECT_DOUBLE_EQ(t->steps[0].compute_cycles, 216);
  EXPECT_DOUBLE_EQ(t->steps[0].sync_cycles, 0);
  EXPECT_DOUBLE_EQ(t->total_cycles, 216);
  EXPECT_NEAR(t->total_seconds, 216 / 1.33e9, 1e-15);
}

TEST(ProgramTiming, OneLinearUsesTheMicroBatchRows) {
  // linear on micro-batch 1 of 2 of sequences {5, 3, 4}: the cut gives rows of sequences [1, 3) or
  // [2, 3); whichever it is, tokens = those rows, in = 16, out = 32 from W [32, 16].
  exchange::program p;
  p.tiles = {0};
  p.temporaries = {f32(1, {64, 16}), f32(2, {32, 16}), f32(3, {32}), f32(4, {64, 32})};
  p.steps.resize(1);
  p.steps[0].compute.push_back({models::kernel_id::linear, {1, 2, 3}, {4}, {1, 2, 1}, {}});
  tensor_table tensors;
  for (const auto& d : p.temporaries) tensors[0][d.id] = d;
  const std::vector<int32_t> lens{5, 3, 4};
  auto t = time_program({{0, p}}, tensors, lens, mk2(), one_to_one());
  ASSERT_TRUE(t) << t.error().message();
  auto rows = rows_of(lens).micro_rows(1, 2);
  const int64_t n = rows.end - rows.begin;
  ASSERT_GT(n, 0);
  const auto& q = t->steps[0].tiles[0].queries;
  ASSERT_EQ(q.size(), 2u);  // linear + gelu (params[2] == 1)
  EXPECT_EQ(q[0].kernel, "linear");
  EXPECT_EQ(q[0].params.at("tokens"), n);
  EXPECT_EQ(q[0].params.at("in"), 16);
  EXPECT_EQ(q[0].params.at("out"), 32);
  EXPECT_EQ(q[1].kernel, "gelu");
  EXPECT_EQ(q[1].params.at("elements"), n * 32);
  const double want = *timing::estimate_tile_cycles(q[0], mk2(), 1) + *timing::estimate_tile_cycles(q[1], mk2(), 1);
  EXPECT_DOUBLE_EQ(t->steps[0].compute_cycles, want);
}

TEST(ProgramTiming, AllReduceOfKnownBytes) {
  // Two tiles swap 1000 fp32 elements: each receives 4000 bytes = ceil(4000 / (4 B/cycle * 0.8)) = 1250
  // cycles; plus one sync of 150 cycles; no compute.
  std::map<uint32_t, exchange::program> progs;
  for (uint32_t t : {0u, 1u}) {
    auto& p = progs[t];
    p.tiles = {0, 1};
    p.temporaries = {f32(1, {1000})};
    p.steps.resize(1);
    p.steps[0].sends.push_back({1 - t, 1 + t, {1, slice_kind::fixed, 0, 1000}});
    p.steps[0].recvs.push_back({1 - t, 2 - t, {1, slice_kind::fixed, 0, 1000}, true});
  }
  auto t = time_program(progs, {}, {4}, mk2(), one_to_one());
  ASSERT_TRUE(t) << t.error().message();
  const auto& s = t->steps[0];
  EXPECT_DOUBLE_EQ(s.tiles[0].bytes_received, 4000);
  EXPECT_DOUBLE_EQ(s.tiles[1].bytes_sent, 4000);
  EXPECT_DOUBLE_EQ(s.exchange_cycles, 1250);
  EXPECT_DOUBLE_EQ(s.sync_cycles, 150);
  EXPECT_DOUBLE_EQ(s.total_cycles, 1400);
  // With 2 emulated tiles for the chip, each stands for 736 physical tiles: ceil(4000 / (3.2 * 736)) = 2.
  auto opt = one_to_one();
  opt.emulated_tiles = 0;
  auto half = time_program(progs, {}, {4}, mk2(), opt);
  ASSERT_TRUE(half);
  EXPECT_DOUBLE_EQ(half->steps[0].exchange_cycles, 2);
  EXPECT_NE(half->share.note.find("736"), std::string::npos) << half->share.note;
}

TEST(ProgramTiming, TokenSlicesFollowTheBatch) {
  auto rows = rows_of({5, 3, 4});
  EXPECT_EQ(slice_elements({1, slice_kind::token_rows, 0, 8}, rows), 12u * 8);
  EXPECT_EQ(slice_elements({1, slice_kind::token_part, 0, 8, 1, 2}, rows), 6u * 8);
  EXPECT_EQ(slice_elements({1, slice_kind::fixed, 3, 7}, rows), 7u);
}

TEST(ProgramTiming, UnknownKernelIsListedNotFatal) {
  exchange::program p;
  p.tiles = {0};
  p.steps.resize(1);
  p.steps[0].compute.push_back({models::kernel_id::matmul, {7, 8}, {9}, {0}, {}});
  auto t = time_program({{0, p}}, {}, {4}, mk2(), one_to_one());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->unmodelled.size(), 1u);
  EXPECT_DOUBLE_EQ(t->total_cycles, 0);
}

compiled_model tiny_on_two() {
  auto cfg = models::preset_config("bert-tiny");
  EXPECT_TRUE(cfg);
  placement_request req;
  req.tiles = 2;
  req.tile_memory = 64 << 20;
  req.token_budget = 512;
  req.forced = plan{1, 1, 2, 1};
  auto c = compile_bert(*cfg, req);
  EXPECT_TRUE(c) << c.error().message();
  return *c;
}

// Every X event of one (pid, tid) either follows the previous one or nests in an open one;
// starts are monotonic per track.
void expect_well_formed(const nlohmann::json& trace) {
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> open;  // stack of [ts, end)
  std::map<std::pair<int, int>, double> last;
  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_tids, used;
  constexpr double eps = 1e-6;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name"));
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name") named_pids.insert(e["pid"].get<int>());
      if (e["name"] == "thread_name") named_tids.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      continue;
    }
    ASSERT_EQ(ph, "X");
    const std::pair<int, int> key{e["pid"].get<int>(), e["tid"].get<int>()};
    used.insert(key);
    const double ts = e["ts"], dur = e["dur"];
    ASSERT_GE(dur, 0);
    if (last.count(key)) EXPECT_GE(ts + eps, last[key]) << e.dump();
    last[key] = ts;
    auto& stack = open[key];
    while (!stack.empty() && stack.back().second <= ts + eps) stack.pop_back();
    if (!stack.empty()) EXPECT_LE(ts + dur, stack.back().second + eps) << "overlaps without nesting: " << e.dump();
    stack.push_back({ts, ts + dur});
  }
  for (const auto& k : used) {
    EXPECT_TRUE(named_pids.count(k.first)) << "pid " << k.first << " has no process_name";
    EXPECT_TRUE(named_tids.count(k)) << "track " << k.first << "/" << k.second << " has no thread_name";
  }
}

TEST(Profiler, SyntheticRunNamesTheSlowestSuperstep) {
  auto c = tiny_on_two();
  auto prof = profiler::create(c, {.preset = "ipu-mk2", .tile_memory = 64 << 20});
  ASSERT_TRUE(prof) << prof.error().message();
  const size_t steps = static_cast<size_t>(c.supersteps());
  ASSERT_GT(steps, 4u);
  run_result r;
  r.batch_id = 7;
  r.wall_seconds = 0.02;
  for (uint32_t t : {0u, 1u}) {
    auto& cs = r.counters[t];
    cs.resize(steps);
    for (size_t k = 0; k < steps; ++k) cs[k] = {100000, 20000, 5000, 1000, 1000};
    r.memory_high_water[t] = 1000 + t;
  }
  r.counters[1][3].compute_ns = 5000000;  // step 3 on tile 1: 5 ms
  r.counters[0][3].sync_ns = 4900000;     // tile 0 waits for it
  ASSERT_TRUE((*prof)->record(0, std::vector<int32_t>{100, 20, 7}, r, 0.001).ok());
  auto slow = (*prof)->slowest_wall(5);
  ASSERT_EQ(slow.size(), 5u);
  EXPECT_EQ(slow[0].step, 3u);
  EXPECT_EQ(slow[0].slowest_tile, 1u);
  EXPECT_EQ(slow[0].batch_id, 7u);
  std::vector<std::string> want;
  for (const auto& call : c.programs[0].at(1).steps[3].compute) want.emplace_back(models::kernel_name(call.kernel));
  EXPECT_EQ(slow[0].kernels, want);
  auto li = (*prof)->imbalance();
  EXPECT_GT(li.wall, 1.0);
  ASSERT_FALSE(li.worst_wall.empty());
  EXPECT_EQ(li.worst_wall[0].first.step, 3u);
  auto modelled = (*prof)->slowest_modelled(5);
  ASSERT_FALSE(modelled.empty());
  EXPECT_GT(modelled[0].seconds, 0);
  const auto m0 = (*prof)->modelled(0);
  double most = 0;
  for (const auto& s : m0.steps) most = std::max(most, s.seconds);
  EXPECT_DOUBLE_EQ(modelled[0].seconds, most);
  EXPECT_GT(m0.total_seconds, 0);
  EXPECT_TRUE(m0.unmodelled.empty());
  auto text = (*prof)->summary();
  EXPECT_NE(text.find("batch 7 replica 0 step 3: 5."), std::string::npos) << text;
  EXPECT_NE(text.find("736 physical tiles"), std::string::npos) << text;

  // The trace round-trips through the JSON parser and is well nested.
  auto parsed = nlohmann::json::parse((*prof)->trace().dump());
  expect_well_formed(parsed);
  int wall_compute = 0, modelled_steps = 0, batches = 0;
  for (const auto& e : parsed["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["pid"] == 1 && e["name"] == "compute") ++wall_compute;
    if (e["pid"] == 2 && e["cat"] == "superstep") ++modelled_steps;
    if (e["pid"] == 3) ++batches;
  }
  EXPECT_EQ(wall_compute, static_cast<int>(2 * steps));
  EXPECT_GT(modelled_steps, 0);
  EXPECT_EQ(batches, 2);  // wall and modelled
}

TEST(Profiler, MemoryReportMatchesThePlan) {
  auto c = tiny_on_two();
  auto prof = profiler::create(c, {.preset = "ipu-mk2", .tile_memory = 64 << 20});
  ASSERT_TRUE(prof);
  run_result r;
  r.memory_high_water = {{0, 12345}, {1, 777}};
  r.counters[0], r.counters[1];
  ASSERT_TRUE((*prof)->record(0, std::vector<int32_t>{10}, r, 0).ok());
  auto rows = (*prof)->memory_report();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& m : rows) {
    const auto& t = c.tiles[m.tile];
    uint64_t w = 0, a = 0, x = 0;
    for (const auto& item : t.memory) (item.kind == "weights" ? w : item.kind == "activations" ? a : x) += item.bytes;
    EXPECT_EQ(m.weights, w);
    EXPECT_EQ(m.activations, a);
    EXPECT_EQ(m.exchange, x);
    EXPECT_EQ(m.used, w + a + x);
    EXPECT_EQ(m.used, t.total_bytes());
    EXPECT_EQ(m.free, int64_t{64 << 20} - static_cast<int64_t>(m.used));
  }
  EXPECT_EQ(rows[0].high_water, 12345u);
  EXPECT_EQ(rows[1].high_water, 777u);
  EXPECT_NE((*prof)->memory_text().find("high-water"), std::string::npos);
}

TEST(Profiler, BatchesOfAReplicaDoNotOverlapInModelledTime) {
  auto c = tiny_on_two();
  auto prof = profiler::create(c);
  ASSERT_TRUE(prof);
  run_result r;
  for (int i = 0; i < 3; ++i) {
    r.batch_id = static_cast<uint64_t>(i);
    ASSERT_TRUE((*prof)->record(0, std::vector<int32_t>{512}, r, 1e-9 * i).ok());  // starts closer than the modelled length
  }
  expect_well_formed((*prof)->trace());
}

TEST(ProfilerIntegration, BertTinyOnTwoTilesWritesATrace) {
  auto m = models::make_preset_model("bert-tiny", 5);
  ASSERT_TRUE(m);
  auto c = tiny_on_two();
  tile_group_config g;
  g.tiles = 2;
  g.tile_memory = 64 << 20;
  auto group = tile_group::start(g);
  ASSERT_TRUE(group) << group.error().to_string();
  auto tm = tile_model::deploy(**group, c, *m);
  ASSERT_TRUE(tm) << tm.error().to_string();
  auto prof = profiler::create((*tm)->compiled(), {.preset = "ipu-mk2", .tile_memory = g.tile_memory});
  ASSERT_TRUE(prof);
  for (int i = 0; i < 2; ++i) {
    auto batch = models::synthetic_batch({17, 64, 3, 128}, m->config.vocab_size, 10 + i);
    const double t0 = (*prof)->now();
    auto out = (*tm)->run(0, batch);
    ASSERT_TRUE(out) << out.error().to_string();
    ASSERT_TRUE((*prof)->record(0, batch, *out, t0).ok());
  }
  const std::string path = ::testing::TempDir() + "profiler_test_trace.json";
  ASSERT_TRUE((*prof)->write_trace(path).ok());
  std::ifstream f(path);
  auto parsed = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded());
  expect_well_formed(parsed);
  size_t wall_tiles = 0;
  std::set<int> tids;
  for (const auto& e : parsed["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 1) tids.insert(e["tid"].get<int>());
  wall_tiles = tids.size();
  EXPECT_EQ(wall_tiles, 2u);
  auto rows = (*prof)->memory_report();
  for (const auto& r : rows) EXPECT_GT(r.high_water, 0u) << "tile " << r.tile;
  auto text = (*prof)->summary();
  EXPECT_NE(text.find("slowest supersteps by wall time"), std::string::npos);
  std::printf("%s", text.c_str());
  (*group)->shutdown();
  std::remove(path.c_str());
}

}  // namespace
