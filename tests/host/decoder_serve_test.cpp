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
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"
#include "tessera/test/json_post.hpp"
#include "tessera/test/sse_client.hpp"

using namespace tessera::test_support;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

struct server {
  served_process p;
  explicit server(std::vector<std::string> a) : p(a) {}
  uint16_t port() const { return p.port(); }
  json post(const std::string& path, const json& body, unsigned* status = nullptr) {
    return post_json(port(), path, body, status);
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
  sse_client sse(port, "/v1/completions", body.dump());
  for (std::string ev = sse.next(); !ev.empty(); ev = sse.next()) {
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
  }
  return out;
}

// `n` completions streamed at once to `port`, request i with body_of(i) (made a stream here).
std::vector<std::future<stream_result>> start_streams(uint16_t port, int n, const std::function<json(int)>& body_of) {
  std::vector<std::future<stream_result>> streams;
  for (int i = 0; i < n; ++i)
    streams.push_back(std::async(std::launch::async, [port, body_of, i] {
      json body = body_of(i);
      body["stream"] = true;
      return stream_completion(port, body);
    }));
  return streams;
}

// SIGKILLs one of the two tessera-tile children of `host`, picked by `pick`: its pid (-1 when
// `host` has not two tiles, or the kill failed).
pid_t kill_a_tile(pid_t host, std::mt19937& pick) {
  auto tile_pids = children_named(host, "tessera-tile");
  if (tile_pids.size() != 2) return -1;
  const pid_t victim = tile_pids[std::uniform_int_distribution<size_t>(0, 1)(pick)];
  return kill(victim, SIGKILL) == 0 ? victim : -1;
}

// Every stream ended with [DONE] after finish_reason "length", with the text want[i].
void expect_streams_complete(std::vector<std::future<stream_result>>& streams, const std::vector<std::string>& want,
                             unsigned seed) {
  for (size_t i = 0; i < streams.size(); ++i) {
    auto r = streams[i].get();
    EXPECT_TRUE(r.done) << "stream " << i << " (seed " << seed << ")";
    EXPECT_EQ(r.finish_reason, "length") << "stream " << i << " (seed " << seed << ")";
    EXPECT_EQ(r.text, want[i]) << "stream " << i << " (seed " << seed << ")";
  }
}

// The texts of `n` completions by the reference server, request i with body_of(i) ("" for an
// answer that is not a 200, which fails the test here and every comparison with it).
std::vector<std::string> reference_texts(server& ref, int n, const std::function<json(int)>& body_of) {
  std::vector<std::string> want;
  for (int i = 0; i < n; ++i) {
    unsigned st = 0;
    json r = ref.post("/v1/completions", body_of(i), &st);
    EXPECT_EQ(st, 200u) << r.dump();
    want.push_back(st == 200u ? r["choices"][0]["text"].get<std::string>() : std::string());
  }
  return want;
}

// The reference: llama-tiny in one tessera-serve process.
std::vector<std::string> reference_args() {
  return {bin("tessera-serve"), "--model", "llama-tiny", "--port", "0", "--kv-blocks", "256"};
}

// The host's tile processes once the killed one is gone and its replacement runs (the host reaps
// and restarts it on its own; a minute at most).
std::vector<pid_t> tiles_after_kill(pid_t host, pid_t victim) {
  std::vector<pid_t> now;
  for (int tries = 0; tries < 1200; ++tries) {
    now = children_named(host, "tessera-tile");
    if (now.size() == 2 && std::count(now.begin(), now.end(), victim) == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  return now;
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

// `extra`: more tessera-host options (--async-scheduling on: a step formed ahead is in flight
// when the tile dies).
static void completions_survive_a_tile_kill(const std::vector<std::string>& extra) {
  auto args = host_args();
  args.insert(args.end(), extra.begin(), extra.end());
  server tiles(args);
  ASSERT_NE(tiles.port(), 0) << tiles.p.line();
  server ref(reference_args());
  ASSERT_NE(ref.port(), 0) << ref.p.line();
  constexpr int kStreams = 6, kTokens = 40;
  const auto want = reference_texts(ref, kStreams, [](int i) { return request(i, kTokens); });
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
  auto streams = start_streams(tiles.port(), kStreams, [](int i) { return request(i, kTokens); });
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 600)(pick)));
  const pid_t victim = kill_a_tile(tiles.p.pid(), pick);
  ASSERT_GT(victim, 0) << "no tile to kill";
  expect_streams_complete(streams, want, seed);
  // The tile came back (a new process), and the engine recomputed what was running.
  auto after = tiles_after_kill(tiles.p.pid(), victim);
  EXPECT_EQ(after.size(), 2u);
  EXPECT_EQ(std::count(after.begin(), after.end(), victim), 0);
  // Afterwards the replica serves as before.
  unsigned st = 0;
  json r = tiles.post("/v1/completions", request(3, kTokens), &st);
  ASSERT_EQ(st, 200u) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], want[3]);
  EXPECT_EQ(tiles.p.stop(), 0);
}

TEST(DecoderServeOnTiles, CompletionsEqualTheReferenceAndSurviveATileKill) { completions_survive_a_tile_kill({}); }

TEST(DecoderServeOnTiles, AsyncSchedulingCompletionsEqualTheReferenceAndSurviveATileKill) {
  completions_survive_a_tile_kill({"--async-scheduling", "on"});
}

// --- Two replicas (--plan 2,1,1: each tile holds a whole llama-tiny), one engine each, the LLM
// router between them.

namespace {

std::vector<std::string> two_replica_args() {
  return {bin("tessera-host"), "--model", "llama-tiny", "--tiles", "2", "--plan", "2,1,1", "--serve", "--port", "0",
          "--tile-memory", "128MiB", "--step-token-budget", "64", "--max-running", "16", "--kv-blocks", "64"};
}

json request_of(int prompt_tokens, int max_tokens, int salt) {
  json prompt = json::array();
  for (int k = 0; k < prompt_tokens; ++k) prompt.push_back(100 + (37 * k + 11 * salt) % 20000);
  return {{"model", "llama-tiny"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
          {"ignore_eos", true}};
}

double gauge(const std::string& text, const std::string& name) { return metric_value(text, name); }

std::string replica_label(int r) { return "{replica=\"tiles" + std::to_string(r) + "\",kind=\"tiles\"}"; }

}  // namespace

TEST(DecoderServeOnTiles, TwoReplicasShareMixedLengthsAndAFullReplicaGetsNoNewRequest) {
  server tiles(two_replica_args());
  ASSERT_NE(tiles.port(), 0) << tiles.p.line();
  server ref(reference_args());
  ASSERT_NE(ref.port(), 0) << ref.p.line();
  // /info names both replicas and their KV blocks.
  {
    json info = json::parse(tiles.get("/info"), nullptr, false);
    ASSERT_TRUE(info.contains("llm_replicas")) << info.dump();
    ASSERT_EQ(info["llm_replicas"]["replicas"].size(), 2u) << info.dump();
    for (const auto& r : info["llm_replicas"]["replicas"]) {
      EXPECT_EQ(r["kind"], "tiles");
      EXPECT_EQ(r["kv_blocks_total"], 64);
      EXPECT_EQ(r["kv_blocks_free"], 64);
    }
  }
  // Mixed lengths at once: both replicas get work, every answer is the single-replica reference's.
  const std::vector<int> lengths = {7, 180, 33, 95, 12, 240, 60, 21};
  const auto want = reference_texts(ref, static_cast<int>(lengths.size()),
                                    [&](int i) { return request_of(lengths[static_cast<size_t>(i)], 16, i); });
  {
    auto streams = start_streams(tiles.port(), static_cast<int>(lengths.size()),
                                 [&](int i) { return request_of(lengths[static_cast<size_t>(i)], 16, i); });
    for (size_t i = 0; i < lengths.size(); ++i) {
      auto r = streams[i].get();
      EXPECT_TRUE(r.done) << "request " << i;
      EXPECT_EQ(r.text, want[i]) << "request " << i << " (" << lengths[i] << " prompt tokens)";
    }
  }
  const std::string m0 = tiles.get("/metrics");
  const double routed0 = gauge(m0, "tessera_llm_replica_routed_requests" + replica_label(0));
  const double routed1 = gauge(m0, "tessera_llm_replica_routed_requests" + replica_label(1));
  EXPECT_GT(routed0, 0) << m0;
  EXPECT_GT(routed1, 0) << m0;
  EXPECT_EQ(routed0 + routed1, static_cast<double>(lengths.size()));
  EXPECT_EQ(gauge(m0, "tessera_llm_replica_kv_blocks_total" + replica_label(0)), 64);

  // One long request fills most of a replica's 64 blocks (600 + 300 positions: 57 blocks);
  // while it runs, short requests all go to the other replica.
  // Every reference first: at CI's load the reference server is slow, and the long request
  // must still be running when the short ones arrive.
  unsigned st = 0;
  json long_ref = ref.post("/v1/completions", request_of(600, 300, 99), &st);
  ASSERT_EQ(st, 200u) << long_ref.dump();
  constexpr int kShort = 6;
  const auto short_want = reference_texts(ref, kShort, [](int i) { return request_of(20 + i, 8, 200 + i); });
  auto long_stream = std::async(std::launch::async, [&] {
    json body = request_of(600, 300, 99);
    body["stream"] = true;
    return stream_completion(tiles.port(), body);
  });
  int full = -1;
  std::string m;
  for (int tries = 0; tries < 3000 && full < 0; ++tries) {
    m = tiles.get("/metrics");
    for (int r = 0; r < 2; ++r)
      if (gauge(m, "tessera_llm_replica_kv_blocks_used" + replica_label(r)) >= 38) full = r;
    if (full < 0) std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(full, 0) << "no replica reached 38 of 64 KV blocks used\n" << m;
  const double full_routed = gauge(m, "tessera_llm_replica_routed_requests" + replica_label(full));
  const double other_routed = gauge(m, "tessera_llm_replica_routed_requests" + replica_label(1 - full));
  std::vector<std::future<json>> shorts;
  for (int i = 0; i < kShort; ++i)
    shorts.push_back(std::async(std::launch::async, [&, i] {
      unsigned s = 0;
      return tiles.post("/v1/completions", request_of(20 + i, 8, 200 + i), &s);
    }));
  // Read the routing once all six are routed (the long request is 300 decode steps from its end:
  // had it ended first, the full replica would rightly be chosen again).
  for (int tries = 0; tries < 3000; ++tries) {
    m = tiles.get("/metrics");
    if (gauge(m, "tessera_llm_replica_routed_requests" + replica_label(0)) +
            gauge(m, "tessera_llm_replica_routed_requests" + replica_label(1)) >=
        full_routed + other_routed + kShort)
      break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(gauge(m, "tessera_llm_replica_routed_requests" + replica_label(full)), full_routed)
      << "the nearly full replica got a new request\n" << m;
  EXPECT_EQ(gauge(m, "tessera_llm_replica_routed_requests" + replica_label(1 - full)), other_routed + kShort) << m;
  for (int i = 0; i < kShort; ++i) {
    json r = shorts[static_cast<size_t>(i)].get();
    ASSERT_TRUE(r.contains("choices")) << r.dump();
    EXPECT_EQ(r["choices"][0]["text"], short_want[static_cast<size_t>(i)]) << "short request " << i;
  }
  auto lr = long_stream.get();
  EXPECT_TRUE(lr.done);
  EXPECT_EQ(lr.text, long_ref["choices"][0]["text"]);
  // Nothing left holding blocks.
  m = tiles.get("/metrics");
  EXPECT_EQ(gauge(m, "tessera_llm_replica_kv_blocks_used" + replica_label(0)), 0) << m;
  EXPECT_EQ(gauge(m, "tessera_llm_replica_kv_blocks_used" + replica_label(1)), 0) << m;
  EXPECT_EQ(gauge(m, "tessera_llm_kv_blocks_free"), 128) << m;  // the sum over the replicas
  EXPECT_EQ(tiles.p.stop(), 0);
}

static void two_replicas_survive_a_tile_kill(const std::vector<std::string>& extra) {
  auto args = two_replica_args();
  args.insert(args.end(), extra.begin(), extra.end());
  server tiles(args);
  ASSERT_NE(tiles.port(), 0) << tiles.p.line();
  server ref(reference_args());
  ASSERT_NE(ref.port(), 0) << ref.p.line();
  constexpr int kStreams = 8, kTokens = 64;
  const auto want = reference_texts(ref, kStreams, [](int i) { return request_of(5 + 23 * i, kTokens, i); });
  const unsigned seed = std::random_device{}();
  std::mt19937 pick(seed);
  auto streams = start_streams(tiles.port(), kStreams, [](int i) { return request_of(5 + 23 * i, kTokens, i); });
  // Mid-generation: once both replicas run requests, a seeded random moment later.
  std::string m;
  for (int tries = 0; tries < 3000; ++tries) {
    m = tiles.get("/metrics");
    if (gauge(m, "tessera_llm_replica_requests_running" + replica_label(0)) > 0 &&
        gauge(m, "tessera_llm_replica_requests_running" + replica_label(1)) > 0)
      break;
    std::this_thread::sleep_for(5ms);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 150)(pick)));
  const pid_t victim = kill_a_tile(tiles.p.pid(), pick);
  ASSERT_GT(victim, 0) << "no tile to kill";
  expect_streams_complete(streams, want, seed);
  // The tile comes back without waiting for a step of its replica (a new process).
  auto back = tiles_after_kill(tiles.p.pid(), victim);
  EXPECT_EQ(back.size(), 2u);
  EXPECT_EQ(std::count(back.begin(), back.end(), victim), 0);
  // Afterwards both replicas serve as before (two at once: one each), from an empty KV cache on
  // the restored tile (its prefix cache forgotten).
  {
    auto a = std::async(std::launch::async, [&] { return tiles.post("/v1/completions", request_of(5, kTokens, 0)); });
    auto b = std::async(std::launch::async, [&] { return tiles.post("/v1/completions", request_of(28, kTokens, 1)); });
    json ra = a.get(), rb = b.get();
    ASSERT_TRUE(ra.contains("choices") && rb.contains("choices")) << ra.dump() << rb.dump();
    EXPECT_EQ(ra["choices"][0]["text"], want[0]);
    EXPECT_EQ(rb["choices"][0]["text"], want[1]);
  }
  m = tiles.get("/metrics");
  EXPECT_GT(gauge(m, "tessera_llm_replica_routed_requests" + replica_label(0)), 0) << m;
  EXPECT_GT(gauge(m, "tessera_llm_replica_routed_requests" + replica_label(1)), 0) << m;
  auto after = children_named(tiles.p.pid(), "tessera-tile");
  EXPECT_EQ(after.size(), 2u);
  EXPECT_EQ(std::count(after.begin(), after.end(), victim), 0);
  EXPECT_EQ(tiles.p.stop(), 0);
}

TEST(DecoderServeOnTiles, TwoReplicasSurviveATileKill) { two_replicas_survive_a_tile_kill({}); }

TEST(DecoderServeOnTiles, AsyncSchedulingTwoReplicasSurviveATileKill) {
  two_replicas_survive_a_tile_kill({"--async-scheduling", "on"});
}

TEST(DecoderServeOnTiles, HybridRoutingSendsShortPromptsToTheGpuReplica) {
  auto args = host_args();
  args.insert(args.end(), {"--gpu-replicas", "1", "--routing", "hybrid", "--long-threshold", "32"});
  server host(args);
  ASSERT_NE(host.port(), 0) << host.p.line();
  server ref(reference_args());
  ASSERT_NE(ref.port(), 0) << ref.p.line();
  json info = json::parse(host.get("/info"), nullptr, false);
  ASSERT_EQ(info["llm_replicas"]["routing"], "hybrid") << info.dump();
  ASSERT_EQ(info["llm_replicas"]["replicas"].size(), 2u) << info.dump();
  const std::vector<int> lengths = {8, 100, 20, 64, 33, 5};
  int longer = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    unsigned a = 0, b = 0;
    json want = ref.post("/v1/completions", request_of(lengths[i], 12, static_cast<int>(i)), &a);
    json got = host.post("/v1/completions", request_of(lengths[i], 12, static_cast<int>(i)), &b);
    ASSERT_EQ(a, 200u) << want.dump();
    ASSERT_EQ(b, 200u) << got.dump();
    EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]) << lengths[i] << " prompt tokens";
    longer += lengths[i] > 32 ? 1 : 0;
  }
  const std::string m = host.get("/metrics");
  EXPECT_EQ(gauge(m, "tessera_llm_replica_routed_requests{replica=\"tiles0\",kind=\"tiles\"}"), longer) << m;
  EXPECT_EQ(gauge(m, "tessera_llm_replica_routed_requests{replica=\"gpu0\",kind=\"gpu\"}"),
            static_cast<double>(lengths.size()) - longer)
      << m;
  EXPECT_EQ(host.p.stop(), 0);
}

TEST(DecoderServeOnTiles, GpuProcessesForDecodersAreRefused) {
  auto args = host_args();
  args.insert(args.end(), {"--spawn-gpu", "1"});
  served_process p(args);
  EXPECT_EQ(p.port(), 0);
  EXPECT_NE(p.stop(), 0);
}

// --serve --trace: every step both replicas ran is a batch slice of the trace, with its mix and
// KV blocks per tile; the tokens of the slices add up to the prompts plus the decodes asked for,
// and the slices are the engine's steps (tessera_llm_steps_total).
TEST(DecoderServeOnTiles, TraceRecordsEveryServedStepOfBothReplicas) {
  const std::string trace = "/tmp/tessera-serve-trace-" + std::to_string(getpid()) + ".json";
  auto args = two_replica_args();
  args.insert(args.end(), {"--trace", trace});
  server tiles(args);
  ASSERT_NE(tiles.port(), 0) << tiles.p.line();
  const std::vector<int> lengths = {9, 70, 33, 130, 17, 48};
  constexpr int kTokens = 12;
  auto streams = start_streams(tiles.port(), static_cast<int>(lengths.size()), [&](int i) {
    return request_of(lengths[static_cast<size_t>(i)], kTokens, 300 + i);
  });
  for (auto& f : streams) EXPECT_TRUE(f.get().done);
  const std::string m = tiles.get("/metrics");
  const double steps_total = gauge(m, "tessera_llm_steps_total");
  ASSERT_EQ(tiles.p.stop(), 0);
  std::ifstream f(trace);
  auto j = json::parse(f, nullptr, false);
  std::remove(trace.c_str());
  ASSERT_TRUE(j.is_object() && j.contains("traceEvents"));
  int slices = 0;
  int64_t tokens = 0;
  std::set<int> replicas;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("cat", "") != "batch" || e["tid"].get<int>() % 2 == 1) continue;  // odd: the modelled track
    const auto& a = e["args"];
    ++slices;
    replicas.insert(a["replica"].get<int>());
    EXPECT_EQ(a["prefill_chunks"].get<int>() + a["decodes"].get<int>(), a["sequences"].get<int>()) << a.dump();
    tokens += a["prefill_tokens"].get<int64_t>() + a["decodes"].get<int64_t>();
    EXPECT_GT(a["kv_blocks_used"].get<int>(), 0);
    EXPECT_LE(a["kv_blocks_used"].get<int>(), 64);
    EXPECT_EQ(a["kv_blocks_total"].get<int>(), 64);
    ASSERT_EQ(a["tiles"].size(), 1u) << a.dump();  // plan 2,1,1: one tile per replica
  }
  int64_t want = 0;
  for (int n : lengths) want += n + kTokens - 1;  // the first token comes from the prompt's last chunk
  EXPECT_EQ(tokens, want);
  EXPECT_EQ(replicas, (std::set<int>{0, 1}));
  EXPECT_EQ(slices, static_cast<int>(steps_total)) << m;
}

// --trace on a BERT model records --check's batches; a served BERT model with no --check would
// record nothing, so it is refused by name (it was silently ignored) before any tile starts.
TEST(HostTraceOption, BertServeTraceWithoutCheckIsRefusedNamingCheck) {
  const std::string trace = "/tmp/tessera-untraced-" + std::to_string(getpid()) + ".json";
  std::remove(trace.c_str());
  auto r = run_to_end({bin("tessera-host"), "--model", "bert-tiny", "--tiles", "1", "--serve", "--port", "0", "--trace", trace},
                      120);
  EXPECT_EQ(r.rc, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--trace records the batches of --check"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(trace).good());
}
