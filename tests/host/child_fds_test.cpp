// The processes a serving tessera-host starts hold none of its sockets. A tile or tessera-gpu
// restarted while clients are connected used to inherit the HTTP listening socket and every
// client connection open at that moment, and kept them for its whole life (found by
// scripts/soak: restarted tiles had 9 more fds than the first ones). Real processes: the host,
// its tiles, its tessera-gpu, HTTP clients, SIGKILLs from outside.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"

using namespace tessera::test_support;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

namespace {

// The inodes of the sockets a process has open ("socket:[N]" in /proc/PID/fd).
std::set<std::string> sockets_of(pid_t pid) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    auto target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) out.insert(target.string());
  }
  return out;
}

std::string shared_sockets(pid_t host, pid_t child) {
  const auto mine = sockets_of(host);
  std::string out;
  for (const auto& s : sockets_of(child))
    if (mine.count(s)) out += s + " ";
  return out;
}

// Every replica up, with a live process behind it that is none of `gone`.
bool all_up(uint16_t port, const std::set<pid_t>& gone) {
  http_connection c("127.0.0.1", port);
  auto r = c.request("GET", "/info");
  auto info = nlohmann::json::parse(r.body, nullptr, false);
  if (r.status != 200 || !info.is_object()) return false;
  for (const auto& b : info["backends"])
    for (const auto& rep : b["replicas"]) {
      if (rep["state"] != "up") return false;
      for (const auto& p : rep["pids"])
        if (p.get<int64_t>() <= 0 || gone.count(static_cast<pid_t>(p.get<int64_t>()))) return false;
    }
  return true;
}

}  // namespace

TEST(ChildFds, RestartedTilesAndGpuHoldNoneOfTheHostsSockets) {
  child host = spawn({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "2", "--serve", "--port", "0",
                      "--spawn-gpu", "1", "--routing", "hybrid", "--long-threshold", "8"});
  ASSERT_GT(host.pid, 0);
  child_guard stop_host{host};  // SIGTERM and reap the host however the test ends
  const uint16_t port = await_port(host.out_fd);
  ASSERT_NE(port, 0) << "tessera-host did not start";
  // Clients connected while the processes are restarted: short texts go to tessera-gpu, long ones
  // to the tiles.
  std::vector<std::unique_ptr<http_connection>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<http_connection>("127.0.0.1", port));
    auto r = clients.back()->request("POST", "/predict",
                                     i % 2 ? R"({"inputs":"short"})"
                                           : R"({"inputs":"a longer text that the hybrid router sends to the tiles"})");
    ASSERT_EQ(r.status, 200u) << r.body;
  }
  auto tiles = children_named(host.pid, "tessera-tile");
  auto gpus = children_named(host.pid, "tessera-gpu");
  ASSERT_EQ(tiles.size(), 2u);
  ASSERT_EQ(gpus.size(), 1u);
  for (pid_t p : tiles) EXPECT_EQ(shared_sockets(host.pid, p), "") << "first tile " << p;
  EXPECT_EQ(shared_sockets(host.pid, gpus[0]), "") << "first tessera-gpu";

  ASSERT_EQ(kill(tiles[0], SIGKILL), 0);
  ASSERT_EQ(kill(gpus[0], SIGKILL), 0);
  const std::set<pid_t> gone{tiles[0], gpus[0]};
  const auto until = steady::now() + 60s;
  while (steady::now() < until && !all_up(port, gone)) std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(all_up(port, gone)) << "the killed tile and tessera-gpu did not come back within 60 s";

  auto new_tiles = children_named(host.pid, "tessera-tile");
  auto new_gpus = children_named(host.pid, "tessera-gpu");
  ASSERT_EQ(new_tiles.size(), 2u);
  ASSERT_EQ(new_gpus.size(), 1u);
  int restarted = 0;
  for (pid_t p : new_tiles) {
    if (p == tiles[1]) continue;
    ++restarted;
    EXPECT_EQ(shared_sockets(host.pid, p), "") << "restarted tile " << p << " holds the host's sockets";
  }
  EXPECT_EQ(restarted, 1);
  EXPECT_NE(new_gpus[0], gpus[0]);
  EXPECT_EQ(shared_sockets(host.pid, new_gpus[0]), "") << "restarted tessera-gpu holds the host's sockets";
  // The clients connected across the restart are still served.
  for (auto& c : clients) EXPECT_EQ(c->request("POST", "/predict", R"({"inputs":"still here"})").status, 200u);
}
