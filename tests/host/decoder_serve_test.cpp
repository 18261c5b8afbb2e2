// tessera-host --serve for a decoder on tiles, from the user's side: the OpenAI API of a real
// tessera-host (llama-tiny on 2 tile processes, tensor-parallel) answers greedy completions, streamed
// and not, with the text tessera-serve's single-process reference backend gives; a tile SIGKILLed
// at a seeded random moment while streams are generating is restarted by the host, the running
// sequences' KV is recomputed (preempt-and-recompute in the scheduler), and every stream completes
// with the reference's text.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"

using namespace tessera::test_support;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

struct server {
  served_process p;
  explicit server(std::vector<std::string> a) : p(a) {}
  uint16_t port() const { return p.port(); }
  json post(const std::string& path, const json& body, unsigned* status = nullptr) {
    http_connection c("127.0.0.1", port());
    auto r = c.request("POST", path, body.dump());
    if (status) *status = r.status;
    return json::parse(r.body, nullptr, false);
  }
  std::string get(const std::string& path) {
    http_connection c("127.0.0.1", port());
    return c.request("GET", path).body;
  }
};

// A streamed completion read to its end over a raw socket: the concatenated text, and whether
// the stream ended with [DONE] after a finish_reason.
struct stream_result {
  std::string text;
  std::string finish_reason;
  bool done = false;
};

stream_result stream_completion(uint16_t port, const json& body) {
  stream_result out;
  int fd = connect_loopback(port);
  if (fd < 0) return out;
  const std::string b = body.dump();
  std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return out;
  }
  std::string buf;
  size_t scan = 0;
  char tmp[4096];
  for (;;) {
    auto at = buf.find("data: ", scan);
    if (at != std::string::npos) {
      auto end = buf.find("\n\n", at);
      if (end != std::string::npos) {
        scan = end + 2;
        const std::string ev = buf.substr(at + 6, end - at - 6);
        if (ev == "[DONE]") {
          out.done = true;
          break;
        }
        auto j = json::parse(ev, nullptr, false);
        if (j.is_object() && j.contains("choices") && !j["choices"].empty()) {
          out.text += j["choices"][0].value("text", "");
          if (j["choices"][0].contains("finish_reason") && j["choices"][0]["finish_reason"].is_string())
            out.finish_reason = j["choices"][0]["finish_reason"];
        }
        continue;
      }
    }
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::vector<std::string> host_args() {
  return {bin("tessera-host"), "--model", "llama-tiny", "--tiles", "2", "--plan", "1,1,2", "--serve", "--port", "0",
          "--tile-memory", "128MiB", "--step-token-budget", "64", "--max-running", "16", "--kv-blocks", "256"};
}

json request(int i, int max_tokens) {
  // Prompts as token ids of different lengths (no tokenizer needed to form them).
  json prompt = json::array();
  for (int k = 0; k < 5 + 9 * i; ++k) prompt.push_back(100 + (37 * k + 11 * i) % 20000);
  return {{"model", "llama-tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"ignore_eos", true}};
}

}  // namespace

TEST(DecoderServeOnTiles, CompletionsEqualTheReferenceAndSurviveATileKill) {
  server tiles(host_args());
  ASSERT_NE(tiles.port(), 0) << tiles.p.line();
  server ref({bin("tessera-serve"), "--model", "llama-tiny", "--port", "0", "--kv-blocks", "256"});
  ASSERT_NE(ref.port(), 0) << ref.p.line();
  constexpr int kStreams = 6, kTokens = 40;
  std::vector<std::string> want;
  for (int i = 0; i < kStreams; ++i) {
    unsigned st = 0;
    json r = ref.post("/v1/completions", request(i, kTokens), &st);
    ASSERT_EQ(st, 200u) << r.dump();
    want.push_back(r["choices"][0]["text"]);
  }
  // Not streamed, nothing killed: the same text.
  {
    unsigned st = 0;
    json r = tiles.post("/v1/completions", request(0, kTokens), &st);
    ASSERT_EQ(st, 200u) << r.dump();
    EXPECT_EQ(r["choices"][0]["text"], want[0]);
    EXPECT_EQ(r["usage"]["completion_tokens"], kTokens);
  }
  // Streams running, then a tile killed at a seeded random moment.
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  const unsigned seed = rng();
  std::mt19937 pick(seed);
  std::vector<std::future<stream_result>> streams;
  for (int i = 0; i < kStreams; ++i)
    streams.push_back(std::async(std::launch::async, [&, i] {
      json body = request(i, kTokens);
      body["stream"] = true;
      return stream_completion(tiles.port(), body);
    }));
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 600)(pick)));
  auto tile_pids = children_named(tiles.p.pid(), "tessera-tile");
  ASSERT_EQ(tile_pids.size(), 2u);
  const pid_t victim = tile_pids[std::uniform_int_distribution<size_t>(0, 1)(pick)];
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  for (int i = 0; i < kStreams; ++i) {
    auto r = streams[static_cast<size_t>(i)].get();
    EXPECT_TRUE(r.done) << "stream " << i << " (seed " << seed << ")";
    EXPECT_EQ(r.finish_reason, "length") << "stream " << i << " (seed " << seed << ")";
    EXPECT_EQ(r.text, want[static_cast<size_t>(i)]) << "stream " << i << " (seed " << seed << ")";
  }
  // The tile came back (a new process), and the engine recomputed what was running.
  auto after = children_named(tiles.p.pid(), "tessera-tile");
  EXPECT_EQ(after.size(), 2u);
  EXPECT_EQ(std::count(after.begin(), after.end(), victim), 0);
  // Afterwards the replica serves as before.
  unsigned st = 0;
  json r = tiles.post("/v1/completions", request(3, kTokens), &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], want[3]);
  EXPECT_EQ(tiles.p.stop(), 0);
}
