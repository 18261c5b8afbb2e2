// Recovery from outside: a real tessera-host serving bert-mini on real tile processes, real HTTP
// clients under load, and tiles (or the GPU-baseline process) SIGKILLed at seeded random
// moments: idle, mid-batch, during the recovery of another tile, twice in a row. Every request
// must be answered once, right, with no error, and the killed replica must be back in rotation
// (every tile process alive and routable, as /info shows). The time from kill to back is printed
// per kill; the target (2 s) is judged on a quiet machine from that table, not asserted.
// The seed is printed; TESSERA_KILL_SEED=<n> replays a run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"

using namespace tessera::test_support;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Runs its function when the test ends, however it ends (a failed ASSERT returns early).
struct reaper {
  std::function<void()> fn;
  ~reaper() { fn(); }
};

// A free loopback TCP port (for a control socket the tiles must know before the host starts), or 0.
int free_loopback_port() {
  child p = spawn({"/usr/bin/python3", "-c",
                   "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"});
  char buf[16] = {};
  const auto n = read(p.out_fd, buf, sizeof buf - 1);
  waitpid(p.pid, nullptr, 0);
  close(p.out_fd);
  return n > 0 ? std::atoi(buf) : 0;
}

json get_json(uint16_t port, const std::string& target) {
  http_connection c("127.0.0.1", port);
  auto r = c.request("GET", target);
  if (r.status != 200 || r.body.empty()) return json();
  return json::parse(r.body, nullptr, false);
}

// Every replica of every backend up, with a live process behind each of its tiles, none of them
// one of `gone` (killed: a zombie still answers kill(pid, 0)).
bool all_up(uint16_t port, std::string* why = nullptr, const std::set<int64_t>& gone = {}) {
  json info = get_json(port, "/info");
  if (!info.is_object() || !info.contains("backends")) return false;
  for (const auto& b : info["backends"]) {
    for (const auto& r : b["replicas"]) {
      if (r["state"] != "up") {
        if (why) *why = b["name"].get<std::string>() + " replica " + std::to_string(r["index"].get<int>()) + " " +
                        r["state"].get<std::string>() + ": " + r["detail"].get<std::string>();
        return false;
      }
      for (const auto& pid : r["pids"])
        if (pid.get<int64_t>() <= 0 || gone.count(pid.get<int64_t>()) ||
            kill(static_cast<pid_t>(pid.get<int64_t>()), 0) != 0) {
          if (why) *why = "a process of " + b["name"].get<std::string>() + " is not running";
          return false;
        }
    }
  }
  return true;
}

// How long a killed process's replica may take to be back at all: a bound, not a speed target (on
// a loaded 2-core CI machine two tile restores at once have taken 11 s). The 2 s target is in the
// tables these tests print, from a quiet run.
constexpr auto back_bound = 60s;

// Seconds until all_up without the killed processes, or -1 after `limit`.
double time_until_up(uint16_t port, steady::time_point since, std::chrono::milliseconds limit,
                     const std::set<int64_t>& gone) {
  while (steady::now() - since < limit) {
    if (all_up(port, nullptr, gone)) return std::chrono::duration<double>(steady::now() - since).count();
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

const std::vector<std::string> texts = {
    "tiles are fast",
    "a short one",
    "the quick brown fox jumps over the lazy dog while the tiles exchange their slices in lockstep",
    "bulk synchronous parallel programs alternate compute, exchange and sync phases; every tile knows what it sends",
    "x",
    "mixed lengths of requests make padding expensive on a machine that shares one memory among all cores, "
    "so the packing of many short sequences into one budget matters, and long ones are split across batches",
};

// Closed-loop clients that check every answer against the one given before any fault.
class load {
 public:
  load(uint16_t port, int clients) : port_(port) {
    http_connection c("127.0.0.1", port);
    for (const auto& t : texts) {
      auto r = c.request("POST", "/predict", json{{"inputs", t}}.dump());
      EXPECT_EQ(r.status, 200u) << r.body;
      want_.push_back(json::parse(r.body, nullptr, false));
    }
    for (int i = 0; i < clients; ++i) threads_.emplace_back([this, i] { run(i); });
  }
  ~load() { finish(); }
  void pause(bool p) { paused_ = p; }
  void finish() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }
  int64_t sent() const { return sent_; }
  int64_t answered() const { return answered_; }
  int64_t errors() const { return errors_; }
  int64_t wrong() const { return wrong_; }
  std::string first_problem() {
    std::lock_guard lk(mu_);
    return first_problem_;
  }

 private:
  static bool same(const json& a, const json& b) {
    if (!a.is_array() || !b.is_array() || a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i]["label"] != b[i]["label"]) return false;
      if (std::abs(a[i]["score"].get<double>() - b[i]["score"].get<double>()) > 1e-4) return false;
    }
    return true;
  }
  void problem(const std::string& what) {
    std::lock_guard lk(mu_);
    if (first_problem_.empty()) first_problem_ = what;
  }
  void run(int client) {
    std::mt19937 rng(static_cast<uint32_t>(client));
    auto conn = std::make_unique<http_connection>("127.0.0.1", port_);
    while (!stop_) {
      if (paused_) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      const size_t k = rng() % texts.size();
      ++sent_;
      auto r = conn->request("POST", "/predict", json{{"inputs", texts[k]}}.dump());
      ++answered_;
      if (r.status != 200) {
        ++errors_;
        problem("HTTP " + std::to_string(r.status) + " " + r.body + r.error);
        conn = std::make_unique<http_connection>("127.0.0.1", port_);
        continue;
      }
      if (!same(json::parse(r.body, nullptr, false), want_[k])) {
        ++wrong_;
        problem("wrong answer for text " + std::to_string(k) + ": " + r.body);
      }
    }
  }
  uint16_t port_;
  std::vector<json> want_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false}, paused_{false};
  std::atomic<int64_t> sent_{0}, answered_{0}, errors_{0}, wrong_{0};
  std::mutex mu_;
  std::string first_problem_;
};

uint32_t kill_seed() {
  if (const char* s = std::getenv("TESSERA_KILL_SEED")) return static_cast<uint32_t>(std::stoul(s));
  return static_cast<uint32_t>(std::random_device{}());
}

}  // namespace

TEST(Recovery, TwentyTileKillsAtRandomMomentsUnderLoadLoseNothing) {
  const std::string exe = bin("tessera-host");
  ASSERT_TRUE(std::filesystem::exists(exe)) << exe << " not built";
  const uint32_t seed = kill_seed();
  std::printf("kill seed %u (replay: TESSERA_KILL_SEED=%u)\n", seed, seed);
  child host = spawn({exe, "--model", "bert-mini", "--tiles", "4", "--serve", "--port", "0", "--max-batch-size", "8"});
  child_guard host_guard{host};
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  ASSERT_TRUE(all_up(port));
  json info = get_json(port, "/info");
  ASSERT_EQ(info["backends"][0]["replicas"].size(), 4u) << "bert-mini on 4 tiles should be 4 replicas";

  std::mt19937 rng(seed);
  load traffic(port, 6);
  auto tiles_now = [&] { return children_named(host.pid, "tessera-tile"); };
  std::set<int64_t> killed;
  auto kill_one = [&](pid_t victim) {
    EXPECT_EQ(kill(victim, SIGKILL), 0);
    killed.insert(victim);
    return steady::now();
  };
  auto random_tile = [&] {
    auto t = tiles_now();
    EXPECT_EQ(t.size(), 4u);
    return t.empty() ? pid_t(-1) : t[rng() % t.size()];
  };
  struct row {
    std::string when;
    double back_seconds;
  };
  std::vector<row> rows;
  int kills = 0;
  for (int round = 0; kills < 20; ++round) {
    // A late recovery is reported by its round; the next round waits for it (bounded).
    ASSERT_GE(time_until_up(port, steady::now(), back_bound, killed), 0)
        << "round " << round << ": replicas not back in " << back_bound.count() << " s";
    const int kind = round % 4;
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 400));
    if (kind == 0) {  // idle: no request in flight
      traffic.pause(true);
      std::this_thread::sleep_for(300ms);
      auto t0 = kill_one(random_tile());
      ++kills;
      rows.push_back({"idle", time_until_up(port, t0, back_bound, killed)});
      traffic.pause(false);
    } else if (kind == 1) {  // busy
      auto t0 = kill_one(random_tile());
      ++kills;
      rows.push_back({"busy", time_until_up(port, t0, back_bound, killed)});
    } else if (kind == 2) {  // a second tile while the first one recovers
      pid_t a = random_tile();
      kill_one(a);
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 150));
      pid_t b = -1;
      for (pid_t p : tiles_now())
        if (p != a) b = p;
      auto t0 = kill_one(b);
      kills += 2;
      rows.push_back({"during another's recovery", time_until_up(port, t0, back_bound, killed)});
    } else {  // the same tile twice in a row: its new incarnation dies as soon as it is back
      auto before = tiles_now();
      pid_t a = random_tile();
      kill_one(a);
      pid_t fresh = -1;
      auto until = steady::now() + 5s;
      while (fresh < 0 && steady::now() < until) {
        for (pid_t p : tiles_now())
          if (std::find(before.begin(), before.end(), p) == before.end()) fresh = p;
        std::this_thread::sleep_for(2ms);
      }
      ASSERT_GT(fresh, 0) << "the killed tile was not restarted";
      auto t0 = kill_one(fresh);
      kills += 2;
      rows.push_back({"twice in a row", time_until_up(port, t0, back_bound, killed)});
    }
    std::string why;
    if (rows.back().back_seconds < 0) {
      all_up(port, &why);
      ADD_FAILURE() << "round " << round << " (" << rows.back().when << "): not back within " << back_bound.count() << " s: " << why;
    }
  }
  std::this_thread::sleep_for(300ms);
  traffic.finish();
  std::printf("%-28s %s\n", "kill", "back in rotation (s)");
  double worst = 0;
  for (const auto& r : rows) {
    std::printf("%-28s %.3f\n", r.when.c_str(), r.back_seconds);
    worst = std::max(worst, r.back_seconds);
  }
  std::printf("kills %d, requests %lld, answered %lld, errors %lld, wrong %lld, worst recovery %.3f s\n", kills,
              (long long)traffic.sent(), (long long)traffic.answered(), (long long)traffic.errors(),
              (long long)traffic.wrong(), worst);
  EXPECT_GE(kills, 20);
  EXPECT_EQ(traffic.sent(), traffic.answered());
  EXPECT_EQ(traffic.errors(), 0) << traffic.first_problem();
  EXPECT_EQ(traffic.wrong(), 0) << traffic.first_problem();
  EXPECT_GT(traffic.answered(), 100);
  EXPECT_EQ(tiles_now().size(), 4u);
  json m = get_json(port, "/info");
  int64_t recoveries = 0;
  for (const auto& r : m["backends"][0]["replicas"]) recoveries += r["recoveries"].get<int64_t>();
  EXPECT_GE(recoveries, static_cast<int64_t>(rows.size()));
  stop(host);
}

TEST(Recovery, GpuProcessKilledUnderHybridRoutingIsRestarted) {
  const std::string exe = bin("tessera-host");
  ASSERT_TRUE(std::filesystem::exists(exe)) << exe << " not built";
  const uint32_t seed = kill_seed();
  std::printf("kill seed %u (replay: TESSERA_KILL_SEED=%u)\n", seed, seed);
  child host = spawn({exe, "--model", "bert-mini", "--tiles", "2", "--serve", "--port", "0", "--spawn-gpu", "1",
                        "--routing", "hybrid", "--long-threshold", "12"});
  child_guard host_guard{host};
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  ASSERT_TRUE(all_up(port));
  std::mt19937 rng(seed);
  load traffic(port, 4);
  std::vector<double> back;
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 600));
    auto gpus = children_named(host.pid, "tessera-gpu");
    ASSERT_EQ(gpus.size(), 1u);
    kill(gpus[0], SIGKILL);
    const auto t0 = steady::now();
    back.push_back(time_until_up(port, t0, back_bound, {gpus[0]}));
    EXPECT_GT(back.back(), 0) << "tessera-gpu not back within " << back_bound.count() << " s";
  }
  std::this_thread::sleep_for(300ms);
  traffic.finish();
  for (double s : back) std::printf("gpu back in rotation after %.3f s\n", s);
  std::printf("requests %lld, errors %lld, wrong %lld\n", (long long)traffic.sent(), (long long)traffic.errors(),
              (long long)traffic.wrong());
  EXPECT_EQ(traffic.sent(), traffic.answered());
  EXPECT_EQ(traffic.errors(), 0) << traffic.first_problem();
  EXPECT_EQ(traffic.wrong(), 0) << traffic.first_problem();
  json info = get_json(port, "/info");
  bool found = false;
  for (const auto& b : info["backends"])
    if (b["kind"] == "gpu") {
      found = true;
      EXPECT_EQ(b["replicas"][0]["recoveries"].get<int64_t>(), 5);
    }
  EXPECT_TRUE(found);
  stop(host);
}

// Tiles started elsewhere (as ssh or Slurm would): the host cannot restart them. The other
// replicas keep serving, /health says degraded naming the tile, and starting the tile again
// with a higher --incarnation (docs/cluster.md) puts its replica back: after the host noticed
// its silence, or at once (as the launchers do), before it did: the new incarnation's
// registration then fails the old one, and the replica is restored (shards, program) either way.
void external_tile_relaunch(bool after_silence) {
  const std::string host_exe = bin("tessera-host"), tile_exe = bin("tessera-tile");
  ASSERT_TRUE(std::filesystem::exists(host_exe) && std::filesystem::exists(tile_exe));
  const int control_port = free_loopback_port();
  ASSERT_GT(control_port, 0);
  const std::string control = "tcp://127.0.0.1:" + std::to_string(control_port);
  // The default heartbeat limit (3 s): on a busy 2-core machine (load 20) a deploy held a tile's
  // heartbeats up past 1 s and past 2 s.
  child host = spawn({host_exe, "--model", "bert-mini", "--tiles", "4", "--external", "--control", control,
                        "--serve", "--port", "0"});
  auto tile = [&](int id, int incarnation) {
    return spawn({tile_exe, "--host", control, "--tile-id", std::to_string(id), "--incarnation",
                  std::to_string(incarnation), "--memory", "268435456", "--exchange-bind", "tcp://127.0.0.1:0"}, "",
                 child_stdout::inherit);
  };
  child_guard host_guard{host};
  std::vector<child> tiles;
  reaper reap{[&] {
    stop(host);
    for (auto& t : tiles) stop(t);
  }};
  for (int i = 0; i < 4; ++i) tiles.push_back(tile(i, 0));
  struct tiles_guard {
    std::vector<child>& t;
    ~tiles_guard() {
      for (auto& p : t) stop(p);
    }
  } tiles_stopper{tiles};
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  ASSERT_TRUE(all_up(port));
  load traffic(port, 4);
  std::this_thread::sleep_for(300ms);
  kill(tiles[2].pid, SIGKILL);
  waitpid(tiles[2].pid, nullptr, 0);
  // Silence is the only sign of a remote tile's death: wait past the heartbeat timeout.
  std::string health_body;
  auto until = steady::now() + (after_silence ? 8s : 0s);
  while (steady::now() < until) {
    http_connection c("127.0.0.1", port);
    auto r = c.request("GET", "/health");
    EXPECT_EQ(r.status, 200u) << "the other replicas still serve";
    if (r.body.find("degraded") != std::string::npos) {
      health_body = r.body;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  if (after_silence) {
    EXPECT_NE(health_body.find("tile 2"), std::string::npos) << health_body;
    std::this_thread::sleep_for(500ms);  // serving degraded for a while
  }
  const int64_t dead = tiles[2].pid;
  tiles[2] = tile(2, 1);  // the documented way back: a higher incarnation
  const auto t0 = steady::now();
  const double back = time_until_up(port, t0, back_bound, {dead});
  EXPECT_GT(back, 0) << "the relaunched tile's replica did not come back";
  std::printf("external tile relaunched %s: back in rotation after %.3f s\n",
              after_silence ? "after its silence was noticed" : "at once", back);
  {
    // Its replica went through recovery (shards and program restored), not straight back in.
    json info = get_json(port, "/info");
    int64_t recoveries = 0;
    for (const auto& b : info["backends"])
      for (const auto& r : b["replicas"]) recoveries += r["recoveries"].get<int64_t>();
    EXPECT_EQ(recoveries, 1) << info.dump();
  }
  {
    http_connection c("127.0.0.1", port);
    auto r = c.request("GET", "/health");
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(r.body, "");
  }
  std::this_thread::sleep_for(300ms);
  traffic.finish();
  std::printf("requests %lld, errors %lld, wrong %lld\n", (long long)traffic.sent(), (long long)traffic.errors(),
              (long long)traffic.wrong());
  EXPECT_EQ(traffic.errors(), 0) << traffic.first_problem();
  EXPECT_EQ(traffic.wrong(), 0) << traffic.first_problem();
  stop(host);
  for (auto& t : tiles) stop(t);
}

TEST(Recovery, ExternalTileKilledLeavesOthersServingAndComesBackWhenRelaunched) { external_tile_relaunch(true); }

TEST(Recovery, ExternalTileRelaunchedBeforeItsSilenceIsNoticedIsRestored) { external_tile_relaunch(false); }

// A replica whose remote tile is lost for good (never started again): the other replica serves
// every request meanwhile. The replicas' workers share one queue and one condition variable; a
// new batch used to wake one worker only, often the lost replica's (which ignores it), and the
// batch waited until the lost replica came back or its requests' deadline passed (HTTP 504 after
// 30 s: the 4 errors of chaos seed 2 in docs/cluster.md). The bound below is a hang detector,
// not a speed target.
TEST(Recovery, ExternalReplicaLostForGoodLeavesTheOtherServingEveryRequest) {
  const std::string host_exe = bin("tessera-host"), tile_exe = bin("tessera-tile");
  ASSERT_TRUE(std::filesystem::exists(host_exe) && std::filesystem::exists(tile_exe));
  const int control_port = free_loopback_port();
  ASSERT_GT(control_port, 0);
  const std::string control = "tcp://127.0.0.1:" + std::to_string(control_port);
  child host = spawn({host_exe, "--model", "bert-tiny", "--tiles", "4", "--plan", "2,2,1", "--external", "--control",
                      control, "--serve", "--port", "0"});
  child_guard host_guard{host};
  std::vector<child> tiles;
  for (int i = 0; i < 4; ++i)
    tiles.push_back(spawn({tile_exe, "--host", control, "--tile-id", std::to_string(i), "--incarnation", "0",
                           "--memory", "268435456", "--exchange-bind", "tcp://127.0.0.1:0"},
                          "", child_stdout::inherit));
  struct tiles_guard {
    std::vector<child>& t;
    ~tiles_guard() {
      for (auto& p : t) stop(p);
    }
  } tiles_stopper{tiles};
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  ASSERT_TRUE(all_up(port));
  load traffic(port, 4);
  std::this_thread::sleep_for(300ms);
  kill(tiles[2].pid, SIGKILL);  // its control connection closes: noticed in about 0.3 s
  waitpid(tiles[2].pid, nullptr, 0);
  // Until the host took the replica out (its state in /info, not only the process gone).
  auto out_of_rotation = [&](std::string* why) {
    json info = get_json(port, "/info");
    if (!info.is_object() || !info.contains("backends")) return false;
    for (const auto& b : info["backends"])
      for (const auto& r : b["replicas"])
        if (r["state"] != "up") {
          *why = "replica " + std::to_string(r["index"].get<int>()) + " " + r["state"].get<std::string>() + ": " +
                 r["detail"].get<std::string>();
          return true;
        }
    return false;
  };
  std::string why;
  auto until = steady::now() + 10s;
  while (!out_of_rotation(&why) && steady::now() < until) std::this_thread::sleep_for(20ms);
  ASSERT_FALSE(why.empty()) << "the lost tile's replica never left rotation";
  const int64_t at_loss = traffic.answered();
  const auto t0 = steady::now();
  constexpr int64_t want = 300;
  while (traffic.answered() - at_loss < want && traffic.errors() == 0 && steady::now() - t0 < 25s)
    std::this_thread::sleep_for(20ms);
  const double took = std::chrono::duration<double>(steady::now() - t0).count();
  EXPECT_FALSE(all_up(port, nullptr, {tiles[2].pid})) << "the lost replica is not started again in this test";
  traffic.finish();
  std::printf("replica lost for good: %lld requests answered by the other replica in %.2f s (%s); errors %lld, wrong %lld\n",
              (long long)(traffic.answered() - at_loss), took, why.c_str(), (long long)traffic.errors(),
              (long long)traffic.wrong());
  EXPECT_GE(traffic.answered() - at_loss, want) << "the surviving replica stopped taking batches";
  EXPECT_EQ(traffic.errors(), 0) << traffic.first_problem();
  EXPECT_EQ(traffic.wrong(), 0) << traffic.first_problem();
  stop(host);
}

// Launchers start tiles with --host-silence-ms (they exit, status 1, when the host is gone); the
// host sends them a keepalive every second, so an idle serving host keeps them (they used to
// leave after the limit, taking every replica down).
TEST(Recovery, ExternalTilesStayWhileTheirHostIdles) {
  const std::string host_exe = bin("tessera-host"), tile_exe = bin("tessera-tile");
  const int control_port = free_loopback_port();
  ASSERT_GT(control_port, 0);
  const std::string control = "tcp://127.0.0.1:" + std::to_string(control_port);
  child host = spawn({host_exe, "--model", "bert-tiny", "--tiles", "2", "--external", "--control", control,
                        "--serve", "--port", "0"});
  std::vector<child> tiles;
  reaper reap{[&] {
    stop(host);
    for (auto& t : tiles) stop(t);
  }};
  for (int i = 0; i < 2; ++i)
    tiles.push_back(spawn({tile_exe, "--host", control, "--tile-id", std::to_string(i), "--memory", "268435456",
                           "--exchange-bind", "tcp://127.0.0.1:0", "--host-silence-ms", "2000"}, "",
                          child_stdout::inherit));
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  ASSERT_TRUE(all_up(port));
  std::this_thread::sleep_for(5s);  // idle: no request reaches the tiles
  for (auto& t : tiles) EXPECT_EQ(waitpid(t.pid, nullptr, WNOHANG), 0) << "a tile left an idle host";
  std::string why;
  EXPECT_TRUE(all_up(port, &why)) << why;
  http_connection c("127.0.0.1", port);
  EXPECT_EQ(c.request("POST", "/predict", json{{"inputs", "still here"}}.dump()).status, 200u);
  // The host vanishes (no shutdown message): the tiles give up after the limit, with status 1,
  // which a launcher tells from a clean shutdown (status 0).
  kill(host.pid, SIGKILL);
  waitpid(host.pid, nullptr, 0);
  close(host.out_fd);
  host = {};
  for (auto& t : tiles) {
    int ws = 0;
    auto until = steady::now() + 10s;
    while (waitpid(t.pid, &ws, WNOHANG) == 0 && steady::now() < until) std::this_thread::sleep_for(20ms);
    EXPECT_TRUE(WIFEXITED(ws)) << "tile still running 10 s after its host left";
    if (WIFEXITED(ws)) EXPECT_EQ(WEXITSTATUS(ws), 1);
    t = {};
  }
}
