// Integration: real tile processes, real sockets. Demo programs against single-process
// references; memory caps; malformed and foreign messages; a tile killed mid-run.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>

#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/toys/demo_programs.hpp"
#include "tessera/host/launcher.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/test/child_process.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::toys;
using namespace std::chrono_literals;

namespace {

tile_group_config small_group(uint32_t tiles, uint64_t memory = 16 << 20) {
  tile_group_config c;
  c.tiles = tiles;
  c.tile_memory = memory;
  c.register_timeout = 30000ms;
  c.heartbeat_interval = 100ms;
  c.heartbeat_timeout = 3000ms;
  c.run_timeout = 60000ms;
  return c;
}


}  // namespace

class TileGroupN : public ::testing::TestWithParam<uint32_t> {};

// For N in {1,2,3,4,8}: the three matmul splits and the all-reduce equal the single-process
// reference. Tolerance 1e-4: K = 96 fp32 products of values in [-1,1) round to ~1e-6.
TEST_P(TileGroupN, DistributedMatmulAndAllReduceEqualReference) {
  const uint32_t n = GetParam();
  auto g = tile_group::start(small_group(n));
  ASSERT_TRUE(g) << g.error().to_string();
  uint32_t program = 0;
  for (auto split : {matmul_split::rows, matmul_split::columns, matmul_split::inner}) {
    auto d = make_matmul_demo(split, n, 61, 96, 45, 11);
    // Each demo gets its own program id and fresh tensor ids on the tiles: free the previous ones.
    ++program;
    for (auto& [t, p] : d.programs) p.id = 100 + program;
    d.batch.program_id = 100 + program;
    ASSERT_TRUE((*g)->alloc_many(d.allocations).ok());
    ASSERT_TRUE((*g)->load(d.programs).ok());
    for (int rep = 0; rep < 2; ++rep) {
      auto r = (*g)->run(d.batch);
      ASSERT_TRUE(r) << r.error().to_string();
      EXPECT_LT(matmul_reference_error(d, assemble_matmul(d, r->outputs)), 1e-4) << "split " << int(split);
      EXPECT_EQ(r->counters.size(), n);
    }
    for (uint32_t t = 0; t < n; ++t) ASSERT_TRUE((*g)->free(t, {1, 2, 3}).ok());
  }
  auto d = make_allreduce_demo(n, 1000, 5);
  ASSERT_TRUE((*g)->load(d.programs).ok());
  auto r = (*g)->run(d.batch);
  ASSERT_TRUE(r) << r.error().to_string();
  auto xs = allreduce_inputs(d);
  for (size_t i = 0; i < 1000; ++i) {
    double s = 0;
    for (auto& x : xs) s += x[i];
    for (uint32_t t = 0; t < n; ++t) ASSERT_NEAR(r->outputs[t][i], s, 1e-5);
  }
  // Bytes: reduce-scatter + all-gather move 2 (N-1)/N of the vector per tile.
  if (n > 1) {
    uint64_t sent = 0;
    for (auto& c : r->counters[0]) sent += c.bytes_sent;
    EXPECT_NEAR(double(sent), 2.0 * (n - 1) / n * 4000, 8.0 * n);
  }
  EXPECT_TRUE((*g)->health().ok());
}

INSTANTIATE_TEST_SUITE_P(Sizes, TileGroupN, ::testing::Values(1u, 2u, 3u, 4u, 8u));

TEST(TileGroup, TcpExchangeWorksToo) {
  auto cfg = small_group(3);
  cfg.local_exchange = "tcp";
  auto g = tile_group::start(cfg);
  ASSERT_TRUE(g) << g.error().to_string();
  auto d = make_matmul_demo(matmul_split::inner, 3, 20, 30, 10, 1);
  ASSERT_TRUE((*g)->alloc_many(d.allocations).ok());
  ASSERT_TRUE((*g)->load(d.programs).ok());
  auto r = (*g)->run(d.batch);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_LT(matmul_reference_error(d, assemble_matmul(d, r->outputs)), 1e-4);
}

TEST(TileGroup, ProgramOverMemoryIsRefusedNamingTheTile) {
  auto g = tile_group::start(small_group(2, 64 << 10));  // 64 KiB tiles
  ASSERT_TRUE(g) << g.error().to_string();
  // C of 200 x 100 floats = 78 KiB does not fit on tile 1's 64 KiB.
  auto d = make_matmul_demo(matmul_split::columns, 2, 200, 8, 200, 1);
  ASSERT_TRUE((*g)->alloc_many(d.allocations).ok());
  auto st = (*g)->load(d.programs);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), errc::out_of_memory);
  EXPECT_NE(st.message().find("tile 0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("64.0 KiB capacity"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'C'"), std::string::npos) << st.message();
  // A too-large tensor upload is refused the same way, and the tile keeps serving.
  auto big = (*g)->alloc(1, {50, "too_big", exchange::dtype::f32, {100000}}, nullptr);
  EXPECT_EQ(big.code(), errc::out_of_memory);
  EXPECT_TRUE((*g)->health().ok());
  auto small = make_matmul_demo(matmul_split::rows, 2, 4, 4, 4, 2);
  for (auto& [t, p] : small.programs) p.id = 9;
  small.batch.program_id = 9;
  for (uint32_t t = 0; t < 2; ++t) ASSERT_TRUE((*g)->free(t, {1, 2}).ok());
  ASSERT_TRUE((*g)->alloc_many(small.allocations).ok());
  ASSERT_TRUE((*g)->load(small.programs).ok());
  EXPECT_TRUE((*g)->run(small.batch).ok());
}

TEST(TileGroup, MalformedAndForeignMessagesAreRejectedAndTileKeepsWorking) {
  auto g = tile_group::start(small_group(2));
  ASSERT_TRUE(g) << g.error().to_string();
  auto d = make_allreduce_demo(2, 64, 3);
  ASSERT_TRUE((*g)->load(d.programs).ok());
  ASSERT_TRUE((*g)->run(d.batch).ok());
  // Throw junk at tile 1's exchange socket: garbage bytes, a wrong protocol version, a message
  // of the wrong kind, a slice for another tile, an exchange_data with a short payload.
  zmq::context_t ctx;
  zmq::socket_t intruder(ctx, zmq::socket_type::push);
  intruder.set(zmq::sockopt::linger, 1000);
  intruder.connect((*g)->tiles()[1].exchange_endpoint);
  intruder.send(zmq::str_buffer("garbage"), zmq::send_flags::none);
  exchange::envelope wrong_kind = exchange::encode(exchange::shutdown{"hijack"});
  exchange::send_envelope(intruder, std::move(wrong_kind));
  std::vector<float> v(4, 1.f);
  exchange::send_envelope(intruder, exchange::encode(exchange::exchange_data{2, 999, 0, 0, 0, 1, 4},
                                                     exchange::copy_frame(v.data(), 16)));
  // 8 elements in 12 bytes: neither 4 (f32) nor 2 (bf16) bytes an element.
  auto short_payload = exchange::encode(exchange::exchange_data{2, 999, 0, 0, 1, 1, 8}, exchange::copy_frame(v.data(), 12));
  exchange::send_envelope(intruder, std::move(short_payload));
  // The tile reports them in its heartbeat and still computes correctly.
  bool counted = false;
  for (int i = 0; i < 100 && !counted; ++i) {
    std::this_thread::sleep_for(50ms);
    counted = (*g)->tiles()[1].bad_messages >= 4;
  }
  EXPECT_TRUE(counted) << "bad messages counted: " << (*g)->tiles()[1].bad_messages;
  auto r = (*g)->run(d.batch);
  ASSERT_TRUE(r) << r.error().to_string();
  auto xs = allreduce_inputs(d);
  EXPECT_NEAR(r->outputs[1][10], xs[0][10] + xs[1][10], 1e-6);
  EXPECT_TRUE((*g)->health().ok());
}

TEST(TileGroup, TileKilledMidRunIsReportedWithinBoundedTime) {
  auto g = tile_group::start(small_group(3, 512 << 20));
  ASSERT_TRUE(g) << g.error().to_string();
  // A run long enough to be interrupted: 40 matmuls of 800^3 on each tile (about a second on
  // one core each), then an all-reduce of C.
  auto d = make_matmul_demo(matmul_split::inner, 3, 800, 2400, 800, 1);
  for (auto& [t, p] : d.programs) {
    auto call = p.steps[0].compute[0];
    for (int i = 0; i < 40; ++i) p.steps[0].compute.push_back(call);
  }
  ASSERT_TRUE((*g)->alloc_many(d.allocations).ok());
  ASSERT_TRUE((*g)->load(d.programs).ok());
  auto fut = std::async(std::launch::async, [&] { return (*g)->run(d.batch); });
  std::this_thread::sleep_for(150ms);
  const pid_t victim = (*g)->tiles()[2].pid;
  ASSERT_GT(victim, 0);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(fut.wait_for(20s), std::future_status::ready) << "the run hung after a tile died";
  auto r = fut.get();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r) << "the run succeeded although tile 2 was killed";
  EXPECT_EQ(r.error().code(), errc::peer_failed);
  EXPECT_NE(r.error().message().find("tile 2"), std::string::npos) << r.error().message();
  // Bounded: detected through the child's exit (or at worst the heartbeat timeout of 3 s),
  // plus the matmul the survivors were finishing.
  EXPECT_LT(seconds, 15.0);
  auto h = (*g)->health();
  EXPECT_EQ(h.code(), errc::peer_failed);
  // The group refuses new runs clearly instead of hanging.
  auto again = (*g)->run(d.batch);
  EXPECT_EQ(again.error().code(), errc::peer_failed);
}

// An external tile (ssh, Slurm) killed between batches: the host hears of it when it sends the
// next batch there ("not connected"). The batch ends at once; its other parts are never sent (sent,
// they would wait for the dead tile's slices until the tiles' exchange timeout: 30 s by default).
// Two tiles started as a launcher would (not children of the group), on loopback: `cfg` plus
// the control endpoint; the tiles are SIGKILLed and reaped when this goes away.
struct external_pair {
  std::future<result<std::unique_ptr<tile_group>>> started;
  std::vector<pid_t> tiles;
  explicit external_pair(tile_group_config cfg) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    const std::string control = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    cfg.launch_local = false;
    cfg.control_bind = control;
    started = std::async(std::launch::async, [cfg] { return tile_group::start(cfg); });
    for (uint32_t i = 0; i < cfg.tiles; ++i) {
      const std::string tile = default_bin_dir() + "/tessera-tile";
      std::vector<std::string> args = {tile, "--host", control, "--tile-id", std::to_string(i), "--memory", "33554432",
                                       "--exchange-bind", "tcp://127.0.0.1:0", "--exchange-timeout-ms", "100000"};
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      pid_t pid = 0;
      EXPECT_EQ(posix_spawn(&pid, tile.c_str(), nullptr, nullptr, argv.data(), environ), 0) << tile;
      if (pid > 0) tiles.push_back(pid);
    }
  }
  ~external_pair() {
    for (pid_t x : tiles) kill(x, SIGKILL), waitpid(x, nullptr, 0);
  }
};

TEST(TileGroup, BatchWhoseFirstTileIsGoneEndsAtOnceWithoutWaitingForTheExchange) {
  auto cfg = small_group(2);
  cfg.heartbeat_timeout = 100000ms;  // only the failed send (or the closed connection) can tell
  cfg.run_timeout = 100000ms;
  external_pair ext(cfg);
  auto& tiles = ext.tiles;
  auto& started = ext.started;
  auto g = started.get();
  ASSERT_TRUE(g) << g.error().to_string();
  auto d = make_matmul_demo(matmul_split::inner, 2, 20, 30, 10, 1);  // the tiles all-reduce C
  ASSERT_TRUE((*g)->alloc_many(d.allocations).ok());
  ASSERT_TRUE((*g)->load(d.programs).ok());
  auto first = (*g)->run(d.batch);
  ASSERT_TRUE(first) << first.error().to_string();
  ASSERT_EQ(kill(tiles[0], SIGKILL), 0);
  waitpid(tiles[0], nullptr, 0);
  std::this_thread::sleep_for(500ms);  // ZeroMQ drops the dead tile's route
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*g)->run(d.batch);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r) << "the run succeeded although tile 0 was killed";
  EXPECT_EQ(r.error().code(), errc::peer_failed) << r.error().to_string();
  EXPECT_NE(r.error().message().find("tile 0"), std::string::npos) << r.error().message();
  EXPECT_LT(seconds, 30.0) << "the batch waited for the exchange timeout (100 s here)";
  EXPECT_EQ((*g)->health().code(), errc::peer_failed);
  std::printf("batch ended %.3f s after it was submitted, with: %s\n", seconds, r.error().message().c_str());
}

// A remote tile whose process dies (or whose machine's kernel closes its sockets): the host's
// socket monitor sees the control connection close and the tile fails after disconnect_grace
// (300 ms), not after heartbeat_timeout (100 s here). A stopped tile (below) closes nothing and
// is still found by its silence.
TEST(TileGroup, ClosedConnectionOfAnExternalTileIsNoticedWellUnderASecond) {
  auto cfg = small_group(2);
  cfg.heartbeat_timeout = 100000ms;
  external_pair ext(cfg);
  auto g = ext.started.get();
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_EQ(ext.tiles.size(), 2u);
  std::this_thread::sleep_for(300ms);  // heartbeats flowing
  ASSERT_TRUE((*g)->health().ok());
  ASSERT_EQ(kill(ext.tiles[1], SIGKILL), 0);
  const auto t0 = std::chrono::steady_clock::now();
  waitpid(ext.tiles[1], nullptr, 0);
  ext.tiles.pop_back();
  while ((*g)->health().ok() && std::chrono::steady_clock::now() - t0 < 10s) std::this_thread::sleep_for(5ms);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto h = (*g)->health();
  ASSERT_EQ(h.code(), errc::peer_failed) << "tile 1 not failed after " << seconds << " s";
  EXPECT_NE(h.message().find("tile 1"), std::string::npos) << h.message();
  EXPECT_NE(h.message().find("connection closed"), std::string::npos) << h.message();
  EXPECT_LT(seconds, 1.0) << h.message();
  std::printf("tile 1 killed: failed after %.3f s with: %s\n", seconds, h.message().c_str());
}

TEST(TileGroup, StoppedTileIsDetectedByHeartbeat) {
  auto cfg = small_group(2);
  cfg.heartbeat_timeout = 600ms;
  auto g = tile_group::start(cfg);
  ASSERT_TRUE(g) << g.error().to_string();
  ASSERT_TRUE((*g)->signal_tile(1, SIGSTOP).ok());
  auto t0 = std::chrono::steady_clock::now();
  while ((*g)->health().ok() && std::chrono::steady_clock::now() - t0 < 10s) std::this_thread::sleep_for(20ms);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto h = (*g)->health();
  EXPECT_EQ(h.code(), errc::peer_failed);
  EXPECT_NE(h.message().find("no heartbeat"), std::string::npos) << h.message();
  EXPECT_LT(seconds, 3.0);
  EXPECT_TRUE((*g)->signal_tile(1, SIGKILL).ok());  // the stopped tile does not outlive the test
}

TEST(TileGroup, MissingExternalTilesAreNamed) {
  auto cfg = small_group(3);
  cfg.launch_local = false;
  cfg.register_timeout = 300ms;
  auto g = tile_group::start(cfg);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code(), errc::timeout);
  EXPECT_NE(g.error().message().find("tiles 0, 1, 2 did not register"), std::string::npos) << g.error().message();
}

TEST(TileGroup, MissingTileBinaryIsAClearError) {
  auto cfg = small_group(1);
  cfg.launcher.tile_binary = "/nonexistent/tessera-tile";
  auto g = tile_group::start(cfg);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message().find("/nonexistent/tessera-tile"), std::string::npos);
}

// Fencing: a tile cut off silently (SIGSTOP: no packet, no FIN, as a partition) is declared failed
// by its silence; its launcher starts incarnation 1 with new state. When the cut-off incarnation 0
// comes back (SIGCONT: the partition healed) with a request it had queued, its answer (the old
// state) is dropped by its routing id (tile-1-0), counted as a late reply, and never reaches a
// caller; its heartbeats do not touch the tile's record, and make the host tell it to exit (status
// 1, so that a launcher would start the next incarnation); every fetch after it returns
// incarnation 1's state.
TEST(TileGroup, AStaleIncarnationThatComesBackAfterAPartitionIsFenced) {
  auto cfg = small_group(2);
  cfg.heartbeat_timeout = 600ms;
  external_pair ext(cfg);
  auto g = ext.started.get();
  ASSERT_TRUE(g) << g.error().to_string();
  exchange::tensor_desc desc{7, "state", exchange::dtype::f32, {64}};
  std::vector<float> old_state(64, 1.5f), new_state(64, -2.25f);
  ASSERT_TRUE((*g)->alloc(1, desc, old_state.data()).ok());
  const exchange::slice_ref all{7, exchange::slice_kind::fixed, 0, 64};
  auto before = (*g)->fetch(1, all);
  ASSERT_TRUE(before) << before.error().to_string();
  ASSERT_EQ(*before, old_state);

  const pid_t stale = ext.tiles[1];
  ASSERT_TRUE(tessera::test_support::stop_process(stale));
  // A request the cut-off incarnation receives but cannot answer in time.
  auto pending = std::async(std::launch::async, [&] { return (*g)->fetch(1, all); });
  auto cut = pending.get();  // ends when the silence is noticed, not at the request's deadline
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().code(), errc::peer_failed) << cut.error().to_string();
  EXPECT_NE(cut.error().message().find("no heartbeat"), std::string::npos) << cut.error().message();

  // Its launcher starts the next incarnation, which registers and gets new state.
  const std::string tile = default_bin_dir() + "/tessera-tile";
  const std::string control = (*g)->control_endpoint();
  std::vector<std::string> args = {tile, "--host", control, "--tile-id", "1", "--incarnation", "1", "--memory", "33554432",
                                   "--exchange-bind", "tcp://127.0.0.1:0", "--exchange-timeout-ms", "100000"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t fresh = 0;
  ASSERT_EQ(posix_spawn(&fresh, tile.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  ext.tiles.push_back(fresh);
  ASSERT_TRUE((*g)->await_return(1, 10000ms).ok());
  ASSERT_TRUE((*g)->alloc(1, desc, new_state.data()).ok());
  const uint64_t late0 = (*g)->late_replies(), stale_hb0 = (*g)->stale_heartbeats();

  // The partition heals: incarnation 0 runs again and answers the fetch it had queued.
  ASSERT_EQ(kill(stale, SIGCONT), 0);
  const auto t0 = std::chrono::steady_clock::now();
  int fetched = 0;
  while (((*g)->late_replies() == late0 || (*g)->stale_heartbeats() == stale_hb0) &&
         std::chrono::steady_clock::now() - t0 < 10s) {
    auto now = (*g)->fetch(1, all);  // meanwhile, every answer is incarnation 1's
    ASSERT_TRUE(now) << now.error().to_string();
    ASSERT_EQ(*now, new_state) << "an answer carried the stale incarnation's state";
    ++fetched;
  }
  EXPECT_GT((*g)->late_replies(), late0) << "the stale incarnation's answer never arrived";
  EXPECT_GT((*g)->stale_heartbeats(), stale_hb0) << "the stale incarnation's heartbeats never arrived";
  // Its heartbeat told the host it is alive: the host tells it to go, and it exits with status 1
  // (a failure: a launcher would start the next incarnation; ssh and Slurm launchers restart on
  // a non-zero exit only), instead of waiting out --host-silence-ms.
  int wstatus = 0;
  pid_t reaped = 0;
  for (auto until = std::chrono::steady_clock::now() + 10s; reaped == 0 && std::chrono::steady_clock::now() < until;) {
    reaped = waitpid(stale, &wstatus, WNOHANG);
    if (reaped == 0) std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(reaped, stale) << "the fenced incarnation did not exit";
  ext.tiles.erase(std::find(ext.tiles.begin(), ext.tiles.end(), stale));
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 1) << "wait status " << wstatus;
  EXPECT_GE((*g)->fenced_shutdowns(), 1u);
  auto info = (*g)->tiles()[1];
  EXPECT_EQ(info.incarnation, 1u);
  EXPECT_EQ(info.pid, fresh);
  EXPECT_FALSE(info.failed);
  EXPECT_TRUE((*g)->health().ok()) << (*g)->health().to_string();
  auto after = (*g)->fetch(1, all);
  ASSERT_TRUE(after) << after.error().to_string();
  EXPECT_EQ(*after, new_state);
  std::printf("stale incarnation fenced: %llu late replies and %llu heartbeats dropped, told to exit (status %d), %d fetches "
              "meanwhile all from incarnation 1\n",
              (unsigned long long)((*g)->late_replies() - late0), (unsigned long long)((*g)->stale_heartbeats() - stale_hb0),
              WEXITSTATUS(wstatus), fetched);
}
