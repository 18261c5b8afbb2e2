// tessera-host --faults from the user's side, with real processes: kill_gpu kills the tessera-gpu
// process the host spawned once it has answered the plan's batch, while serving goes on with
// right answers; tile kinds reach the tiles the host launches and the host prints what they
// injected; every plan the run cannot apply is refused at startup naming the fault, and a tile
// given a kind it cannot apply refuses it too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"

using namespace tessera::test_support;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string quoted(const std::vector<std::string>& args) {
  std::string cmd;
  for (const auto& a : args) cmd += "'" + a + "' ";
  return cmd;
}

// Gone, or a zombie its parent has not reaped yet.
bool process_gone(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// The score of LABEL_1 in a /predict answer (-1 when the body is not one).
double label1_score(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_array()) return -1;
  for (const auto& x : j)
    if (x.is_object() && x.value("label", "") == "LABEL_1" && x.contains("score") && x["score"].is_number())
      return x["score"].get<double>();
  return -1;
}

}  // namespace

// Short requests go to the GPU process under hybrid routing; the plan kills it once it has
// answered its third batch. Requests one at a time make each its own batch, so the process must
// be alive after two answers and gone right after the third; the load that follows is answered
// (by the tiles, or a restarted GPU process) with the same scores.
TEST(HostFaults, KillGpuKillsTheSpawnedProcessOnceItAnsweredTheBatch) {
  const std::string text = "a short request for the gpu process";
  child host = spawn({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "2", "--serve", "--port", "0",
                      "--spawn-gpu", "1", "--routing", "hybrid", "--faults",
                      R"({"faults":[{"kind":"kill_gpu","batch":3}]})"});
  ASSERT_GT(host.pid, 0);
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  auto gpus = children_named(host.pid, "tessera-gpu");
  ASSERT_EQ(gpus.size(), 1u) << "expected one spawned tessera-gpu";
  const pid_t gpu = gpus[0];
  auto tiles = children_named(host.pid, "tessera-tile");
  EXPECT_EQ(tiles.size(), 2u);

  http_connection conn("127.0.0.1", port);
  const std::string body = R"({"inputs": ")" + text + R"("})";
  std::vector<double> scores;
  for (int i = 1; i <= 3; ++i) {
    auto r = conn.request("POST", "/predict", body);
    ASSERT_EQ(r.status, 200u) << r.body;
    scores.push_back(label1_score(r.body));
    if (i < 3) {
      std::this_thread::sleep_for(200ms);  // time for a wrong early kill to show
      EXPECT_FALSE(process_gone(gpu)) << "tessera-gpu died after only " << i << " batches";
    }
  }
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = process_gone(gpu);
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "tessera-gpu (pid " << gpu << ") is still running 2 s after answering batch 3";

  // Load after the kill, from 8 clients: every request answered, with the same score.
  std::atomic<int> ok{0}, wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&] {
      http_connection cc("127.0.0.1", port);
      for (int k = 0; k < 8; ++k) {
        auto r = cc.request("POST", "/predict", body);
        if (r.status != 200) continue;
        ++ok;
        if (std::abs(label1_score(r.body) - scores[0]) > 1e-4) ++wrong;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 64);
  EXPECT_EQ(wrong.load(), 0);
  for (double s : scores) EXPECT_NEAR(s, scores[0], 1e-4);
  for (pid_t t : tiles) EXPECT_FALSE(process_gone(t)) << "tile process " << t << " died";

  kill(host.pid, SIGTERM);
  int ws = 0;
  ASSERT_EQ(waitpid(host.pid, &ws, 0), host.pid);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  close(host.out_fd);
}

// Tile kinds pass through tessera-host to the tiles it launches; --check prints what each tile
// reports injecting, and the answers still match the reference (tessera-host exits 1 otherwise).
TEST(HostFaults, TileKindsReachTheLaunchedTilesAndAreReported) {
  auto r = run_to_end({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "2", "--plan", "1,1,2", "--check", "3",
                "--faults",
                R"({"seed":5,"faults":[{"kind":"slow","tile":0,"factor":2},)"
                R"({"kind":"stall","tile":1,"batch":2,"seconds":0.3},{"kind":"duplicate","fraction":0.3}]})"},
               120);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto at = r.out.find("faults injected by the tiles: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  unsigned slow = 0, stall = 0;
  ASSERT_EQ(std::sscanf(line.c_str(), "faults injected by the tiles: tile 0: slow %u", &slow), 1) << line;
  EXPECT_GT(slow, 0u) << line;
  auto t1 = line.find("tile 1: stall ");
  ASSERT_NE(t1, std::string::npos) << line;
  EXPECT_EQ(std::sscanf(line.c_str() + t1, "tile 1: stall %u", &stall), 1);
  EXPECT_EQ(stall, 1u) << line;
  EXPECT_NE(line.find("duplicate"), std::string::npos) << line;
}

// What the run cannot apply is an error before any tile starts (exit 2), naming the fault.
TEST(HostFaults, PlansTheRunCannotApplyAreRefusedNamingTheFault) {
  const std::string host = bin("tessera-host");
  const std::string kill_gpu = R"({"faults":[{"kind":"kill_gpu","batch":2}]})";
  struct refusal {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<refusal> cases = {
      {{"--model", "bert-tiny", "--tiles", "2", "--serve", "--port", "0", "--faults", kill_gpu},
       "fault 0 (kill_gpu, gpu 0) needs a tessera-gpu process spawned by this host"},
      {{"--model", "bert-tiny", "--tiles", "2", "--check", "1", "--spawn-gpu", "1", "--faults", kill_gpu},
       "(kill_gpu, gpu 0) needs a tessera-gpu"},
      {{"--model", "bert-tiny", "--tiles", "2", "--serve", "--port", "0", "--spawn-gpu", "1", "--faults",
        R"({"faults":[{"kind":"kill_gpu","batch":2,"gpu":1}]})"},
       "--spawn-gpu 2 or more"},
      {{"--model", "bert-tiny", "--tiles", "2", "--serve", "--port", "0", "--gpu-endpoint", "tcp://127.0.0.1:1",
        "--faults", kill_gpu},
       "(kill_gpu, gpu 0) needs a tessera-gpu"},
      {{"--demo", "matmul", "--tiles", "2", "--faults", kill_gpu}, "kill_gpu"},
      {{"--model", "bert-tiny", "--tiles", "2", "--external", "--register-timeout-ms", "1000", "--check", "1",
        "--faults", R"({"faults":[{"kind":"stall","tile":1,"batch":2,"seconds":1}]})"},
       "stall is applied by the tiles, and with --external this host does not launch them"},
      {{"--model", "bert-tiny", "--tiles", "2", "--check", "1", "--faults",
        R"({"faults":[{"kind":"slow","tile":2,"factor":2}]})"},
       "fault 0 (slow) names tile 2, but the group has 2 tiles"},
      {{"--demo", "matmul", "--tiles", "2", "--faults", R"({"faults":[{"kind":"delay","from":0,"to":5,"ms":1}]})"},
       "fault 0 (delay) names tile 5"},
      {{"--demo", "matmul", "--tiles", "2", "--faults", R"({"faults":[{"kind":"explode"}]})"},
       "unknown kind 'explode'"},
      {{"--demo", "matmul", "--tiles", "2", "--faults", "/nonexistent/plan.json"}, "cannot read fault plan file"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{host};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_to_end(args, 30);
    SCOPED_TRACE(quoted(args));
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("waiting for"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("streaming weights"), std::string::npos) << "tiles were started: " << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  }
}

// A tile started by hand with a kind only tessera-host applies refuses it at startup.
TEST(HostFaults, ATileRefusesAKindItCannotApply) {
  auto r = run_to_end({bin("tessera-tile"), "--host", "tcp://127.0.0.1:9", "--tile-id", "0", "--faults",
                R"({"faults":[{"kind":"kill_gpu","batch":1}]})"},
               20);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("(kill_gpu) cannot be applied by a tile"), std::string::npos) << r.err;
}

// --exchange-timeout-ms reaches the tiles the host launches: a tile cut off from its peer for
// the first batch gives up on the missing slice after 700 ms, not the tiles' default 30 s (a
// dropped slice costs a served batch this long before it runs again elsewhere).
TEST(HostFaults, ExchangeTimeoutReachesTheLaunchedTiles) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_to_end({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "2", "--plan", "1,1,2", "--check", "1",
                "--exchange-timeout-ms", "700", "--faults",
                R"({"faults":[{"kind":"partition","tiles":[0],"batch":1,"batches":1}]})"},
               60);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("waited 700 ms"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 25s);
  auto bad = run_to_end({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "2", "--check", "1",
                  "--exchange-timeout-ms", "0"},
                 20);
  EXPECT_EQ(bad.rc, 2) << bad.err;
  EXPECT_NE(bad.err.find("--exchange-timeout-ms must be positive"), std::string::npos) << bad.err;
}
