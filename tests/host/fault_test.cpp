// Fault injection over real tile processes: each fault kind under a load of 200 requests.
// Every request gets exactly one answer, equal to the fault-free (single-process reference)
// answer within 1e-4; recovery times are printed. Each test also checks that the tiles report
// injecting the fault (so a broken injector fails it), and, where the fault must break batches
// (drop, corrupt, a long stall, a partition), that the host recovered.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "tessera/exchange/fault_plan.hpp"
#include "tessera/host/fault_harness.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace std::chrono_literals;
using exchange::fault_kind;

namespace {

fault_outcome run_with_faults(const std::string& plan_json, plan p, int tiles,
                              const std::function<void(tile_group&)>& during = {},
                              std::chrono::milliseconds heartbeat_timeout = 1500ms) {
  fault_scenario s;
  s.plan_json = plan_json;
  s.layout = p;
  s.tiles = tiles;
  s.during = during;
  s.heartbeat_timeout = heartbeat_timeout;
  auto r = run_fault_scenario(s);
  EXPECT_TRUE(r) << r.error().to_string();
  if (!r) return {};
  std::printf("faults %s: %d/%d answered, %d wrong, %d errors, %lld recoveries (last %.2f s), %lld retries, p99 %.3f s, %.2f s total; "
              "injected: %s\n",
              plan_json.empty() ? "(none)" : plan_json.c_str(), r->answered, r->requests, r->wrong, r->errors,
              (long long)r->recoveries, r->last_recovery_seconds, (long long)r->retries, r->p99_latency_seconds, r->seconds,
              exchange::describe_fault_counts(r->injected).c_str());
  std::printf("  tiles discarded %llu duplicate or late exchange messages\n", (unsigned long long)r->stale_messages);
  return *r;
}

void expect_all_correct(const fault_outcome& o) {
  EXPECT_EQ(o.requests, 200);
  EXPECT_EQ(o.answered, o.requests);
  EXPECT_EQ(o.duplicates, 0);
  EXPECT_EQ(o.wrong, 0);
  EXPECT_EQ(o.errors, 0);
}

// Only `kind` was injected (and at least once).
void expect_injected_only(const fault_outcome& o, fault_kind kind) {
  EXPECT_GT(o.injected_of(kind), 0u) << exchange::fault_kind_name(kind) << " was never injected";
  for (size_t k = 0; k < o.injected.size(); ++k)
    if (k != static_cast<size_t>(kind))
      EXPECT_EQ(o.injected[k], 0u) << exchange::fault_kind_name(static_cast<fault_kind>(k));
}

}  // namespace

TEST(Faults, PlanParsingErrorsAreClear) {
  EXPECT_FALSE(exchange::parse_fault_plan("not json"));
  auto bad_kind = exchange::parse_fault_plan(R"({"faults":[{"kind":"explode"}]})");
  ASSERT_FALSE(bad_kind);
  EXPECT_NE(bad_kind.error().message().find("unknown kind 'explode'"), std::string::npos);
  EXPECT_FALSE(exchange::parse_fault_plan(R"({"faults":[{"kind":"drop","fraction":1.5}]})"));
  EXPECT_FALSE(exchange::parse_fault_plan(R"({"faults":[{"kind":"kill"}]})"));  // needs a tile
  auto ok = exchange::parse_fault_plan(R"({"seed":3,"faults":[{"kind":"delay","from":0,"to":1,"ms":2}]})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->faults[0].tile, 0);
  EXPECT_EQ(ok->for_tile(1).faults.size(), 0u);
  EXPECT_EQ(ok->for_tile(0).faults.size(), 1u);
  auto no_seconds = exchange::parse_fault_plan(R"({"faults":[{"kind":"stall","tile":1,"batch":2}]})");
  ASSERT_FALSE(no_seconds);
  EXPECT_NE(no_seconds.error().message().find("stall needs \"seconds\""), std::string::npos);
  auto gpu_batch = exchange::parse_fault_plan(R"({"faults":[{"kind":"kill_gpu"}]})");
  ASSERT_FALSE(gpu_batch);
  EXPECT_NE(gpu_batch.error().message().find("kill_gpu needs a \"batch\""), std::string::npos);
  // Tiles apply stalls themselves; kill_gpu is tessera-host's and never reaches a tile.
  auto mixed = exchange::parse_fault_plan(
      R"({"faults":[{"kind":"stall","tile":1,"batch":2,"seconds":1},{"kind":"kill_gpu","batch":3,"gpu":1}]})");
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->for_tile(1).faults.size(), 1u);
  EXPECT_EQ(mixed->tile_side().faults.size(), 1u);
  ASSERT_EQ(mixed->host_side().faults.size(), 1u);
  EXPECT_EQ(mixed->host_side().faults[0].gpu, 1);
  EXPECT_TRUE(mixed->check_tiles(2).ok());
  auto outside = mixed->check_tiles(1);  // the stall names tile 1 of a one-tile group: it would never fire
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.message().find("fault 0 (stall) names tile 1"), std::string::npos) << outside.message();
  auto round = exchange::parse_fault_plan(mixed->to_json());
  ASSERT_TRUE(round) << round.error().message();
  EXPECT_EQ(round->faults.size(), 2u);
}

// The harness runs tiles only: a kill_gpu there would do nothing, so it is refused, by name.
TEST(Faults, KillGpuWithoutAGpuProcessIsAnError) {
  fault_scenario s;
  s.plan_json = R"({"faults":[{"kind":"kill_gpu","batch":2}]})";
  auto r = run_fault_scenario(s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("kill_gpu"), std::string::npos) << r.error().message();
}

TEST(Faults, KillATileMidRun) {
  auto o = run_with_faults(R"({"faults":[{"kind":"kill","tile":1,"batch":3,"superstep":2}]})", {1, 1, 2, 1}, 2);
  expect_all_correct(o);
  EXPECT_GE(o.recoveries, 1);
  EXPECT_LT(o.last_recovery_seconds, 10.0);
}

TEST(Faults, StallATileLongerThanTheHeartbeatTimeout) {
  auto o = run_with_faults("", {1, 1, 2, 1}, 2, [](tile_group& g) {
    (void)g.signal_tile(1, SIGSTOP);  // from the first batch on; the restart kills the stopped process
  }, 800ms);
  expect_all_correct(o);
  EXPECT_GE(o.recoveries, 1);
}

TEST(Faults, ShortStallOnlyDelays) {
  auto o = run_with_faults("", {1, 1, 2, 1}, 2, [](tile_group& g) {
    EXPECT_TRUE(g.signal_tile(1, SIGSTOP).ok());
    std::this_thread::sleep_for(400ms);  // well inside the 3 s heartbeat timeout
    EXPECT_TRUE(g.signal_tile(1, SIGCONT).ok());
  }, 3000ms);
  expect_all_correct(o);
  EXPECT_EQ(o.recoveries, 0);
  EXPECT_GE(o.p99_latency_seconds, 0.35);  // the stalled batches waited for the tile
}

// The stall kind: tile 1 itself goes silent (no heartbeats, no answers, no slices) in its own
// process at batch 3, for longer than the heartbeat timeout: the host must notice and recover.
TEST(Faults, StallKindLongerThanTheHeartbeatTimeoutIsRecovered) {
  auto o = run_with_faults(R"({"faults":[{"kind":"stall","tile":1,"batch":3,"seconds":3}]})", {1, 1, 2, 1}, 2, {},
                           800ms);
  expect_all_correct(o);
  expect_injected_only(o, fault_kind::stall);
  EXPECT_EQ(o.injected_of(fault_kind::stall), 1u);  // once: the restarted tile does not stall again
  EXPECT_GE(o.recoveries, 1);
}

TEST(Faults, StallKindShorterThanTheTimeoutsOnlyDelays) {
  auto o = run_with_faults(R"({"faults":[{"kind":"stall","tile":1,"batch":3,"superstep":1,"seconds":0.4}]})",
                           {1, 1, 2, 1}, 2, {}, 3000ms);
  expect_all_correct(o);
  expect_injected_only(o, fault_kind::stall);
  EXPECT_EQ(o.injected_of(fault_kind::stall), 1u);
  EXPECT_EQ(o.recoveries, 0);
  EXPECT_GE(o.p99_latency_seconds, 0.35);  // the stalled batch waited for the tile
}

TEST(Faults, SlowComputeGivesRightAnswers) {
  auto o = run_with_faults(R"({"faults":[{"kind":"slow","tile":0,"factor":3}]})", {1, 1, 2, 1}, 2);
  expect_all_correct(o);
  expect_injected_only(o, fault_kind::slow);
}

// Dropped and corrupted slices must break batches (a timeout, a checksum mismatch) that the
// host recovers from; duplicated and reordered ones are absorbed by the inbox.
TEST(Faults, DropDuplicateReorderCorrupt) {
  const std::pair<const char*, fault_kind> plans[] = {
      {R"({"seed":1,"faults":[{"kind":"drop","fraction":0.03}]})", fault_kind::drop},
      {R"({"seed":2,"faults":[{"kind":"duplicate","fraction":0.3}]})", fault_kind::duplicate},
      {R"({"seed":3,"faults":[{"kind":"reorder","fraction":0.3}]})", fault_kind::reorder},
      {R"({"seed":4,"faults":[{"kind":"corrupt","fraction":0.03}]})", fault_kind::corrupt}};
  for (const auto& [plan, kind] : plans) {
    SCOPED_TRACE(plan);
    auto o = run_with_faults(plan, {1, 1, 2, 1}, 2);
    expect_all_correct(o);
    expect_injected_only(o, kind);
    // A lost or corrupt slice fails its batch, which runs again; no tile has to be restarted.
    if (kind == fault_kind::drop || kind == fault_kind::corrupt) {
      EXPECT_GE(o.retries, 1);
    } else {
      EXPECT_EQ(o.retries, 0);
    }
    EXPECT_EQ(o.recoveries, 0);
    // Each duplicate sent arrives and is discarded by its receiver.
    if (kind == fault_kind::duplicate) EXPECT_GE(o.stale_messages, o.injected_of(kind));
  }
}

TEST(Faults, PartitionHeals) {
  auto o = run_with_faults(R"({"faults":[{"kind":"partition","tiles":[0],"batch":2,"batches":2}]})", {1, 1, 2, 1}, 2);
  expect_all_correct(o);
  expect_injected_only(o, fault_kind::partition);
  EXPECT_GE(o.retries, 1);
}

TEST(Faults, LinkDelaySlowsSuperstepsAsPredicted) {
  auto base = run_with_faults("", {1, 2, 1, 2}, 2);
  expect_all_correct(base);
  // 60 ms on the only link between the two stages (tile 0 -> tile 1).
  constexpr double delay = 0.060;
  auto slow = run_with_faults(R"({"faults":[{"kind":"delay","from":0,"to":1,"ms":60}]})", {1, 2, 1, 2}, 2);
  expect_all_correct(slow);
  expect_injected_only(slow, fault_kind::delay);
  EXPECT_EQ(base.injected, exchange::fault_counts{});
  // Two micro-batches cross the link per batch, each in its own superstep. A delayed superstep
  // lasts at least the sender's compute plus the delay, so each batch should slow by about
  // 2 x 60 ms, less what the receiver's own work in those supersteps hides (it overlaps the
  // sender's wait). Bounds: at least half the delay; at most the full delay plus noise, which on
  // a loaded machine grows with the batch itself (one more batch's time, and 50 ms). A delay
  // applied to every message instead of this link's (4 crossings and more) is still caught.
  const double slowdown = slow.mean_batch_wall_seconds - base.mean_batch_wall_seconds;
  EXPECT_GE(slowdown, 0.5 * 2 * delay) << "base " << base.mean_batch_wall_seconds << " s";
  EXPECT_LE(slowdown, 2 * delay + 0.050 + base.mean_batch_wall_seconds) << "base " << base.mean_batch_wall_seconds << " s";
}
