// CurveZMQ across machines: tiles with the cluster keys join and run; a peer without the right
// key pair cannot register, cannot send tensors to a tile, cannot pose as the host to read them,
// and a wire tap between a tile and the host sees only ciphertext. The same for tessera-gpu: the
// host's key pair gets answers, a stranger's pair, the tiles' pair, a wrong server key and a plain
// client get nothing (their batches fail at once with peer_failed, the ZAP refusals are counted),
// a tap sees only ciphertext, tessera-host --keys --spawn-gpu serves through a keyed child, and
// plain sockets off loopback are refused. Runs on loopback with --keys (which forces CURVE); the
// netns scripts show the same across namespaces.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "tessera/test/child_process.hpp"
#include "tessera/test/http_client.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/host/remote_backend.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/models/forward.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace tessera::backends;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using tessera::test_support::slurp;

namespace {

std::string bin_dir() {
  const char* d = std::getenv("TESSERA_BIN_DIR");
  return d ? d : "build/bin";
}

std::string key_dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/tessera-keys-XXXXXX";
    std::string d = mkdtemp(tmpl);
    fs::remove(d);
    auto made = exchange::make_keys(d);
    EXPECT_TRUE(made) << made.error().message();
    static const std::string* to_remove = new std::string(d);  // outlives static destructors
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(*to_remove, ec);  // secrets do not outlive the test
    });
    return d;
  }();
  return dir;
}

tile_group_config secure_group(uint32_t tiles) {
  auto sec = exchange::load_security(key_dir(), exchange::security_role::host);
  EXPECT_TRUE(sec) << sec.error().message();
  exchange::set_process_security(*sec);
  tile_group_config c;
  c.tiles = tiles;
  c.tile_memory = 16 << 20;
  c.local_exchange = "tcp";
  c.register_timeout = 20000ms;
  c.heartbeat_interval = 100ms;
  c.extra_tile_args = {"--keys", key_dir()};
  c.launcher.tile_binary = bin_dir() + "/tessera-tile";
  return c;
}

// Watches a socket's handshake: returns the first of succeeded / failed events within `wait`
// (generous: it returns at the first event, and a loaded machine can take seconds to get there).
enum class handshake { none, succeeded, failed };
handshake watch_handshake(zmq::context_t& ctx, zmq::socket_t& s, const std::string& endpoint,
                          const std::function<void()>& after_connect, std::chrono::milliseconds wait = 15000ms) {
  static std::atomic<int> n{0};
  std::string mon = "inproc://mon-" + std::to_string(n++);
  zmq_socket_monitor(s.handle(), mon.c_str(), ZMQ_EVENT_ALL);
  zmq::socket_t m(ctx, zmq::socket_type::pair);
  m.set(zmq::sockopt::linger, 0);
  m.connect(mon);
  s.connect(endpoint);
  if (after_connect) after_connect();
  auto deadline = std::chrono::steady_clock::now() + wait;
  m.set(zmq::sockopt::rcvtimeo, 100);
  handshake out = handshake::none;
  while (std::chrono::steady_clock::now() < deadline && out == handshake::none) {
    zmq::message_t ev, addr;
    if (!m.recv(ev)) continue;
    (void)m.recv(addr);
    uint16_t id;
    std::memcpy(&id, ev.data(), 2);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) out = handshake::succeeded;
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
        id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
      out = handshake::failed;
  }
  zmq_socket_monitor(s.handle(), nullptr, 0);
  return out;
}

// `data` as tensor `id` ("name", f32) on tile `tile` of the group, and fetched back.
result<std::vector<float>> round_trip(tile_group& g, uint32_t tile, uint32_t id, const std::string& name,
                                      const std::vector<float>& data) {
  exchange::tensor_desc desc{id, name, exchange::dtype::f32, {static_cast<int64_t>(data.size())}};
  TESSERA_RETURN_IF_ERROR(g.alloc(tile, desc, data.data()));
  exchange::slice_ref ref{};
  ref.tensor_id = id;
  ref.count = data.size();
  return g.fetch(tile, ref);
}

// A socket that drops what it has not sent when it closes (linger 0).
zmq::socket_t lingerless(zmq::context_t& ctx, zmq::socket_type type) {
  zmq::socket_t s(ctx, type);
  s.set(zmq::sockopt::linger, 0);
  return s;
}

// A client on dealer `d` (routing id "tile-T-I") that connects to the host's control `endpoint`
// and registers as tile T, incarnation I: how its handshake ended.
handshake try_register(zmq::context_t& ctx, zmq::socket_t& d, const std::string& endpoint, uint32_t tile,
                       uint32_t incarnation) {
  d.set(zmq::sockopt::routing_id, "tile-" + std::to_string(tile) + "-" + std::to_string(incarnation));
  return watch_handshake(ctx, d, endpoint, [&] {
    exchange::register_tile reg{tile, incarnation, 4242, "tcp://127.0.0.1:1", "rogue", 1 << 20};
    exchange::send_envelope(d, exchange::encode(reg), zmq::send_flags::dontwait);
  });
}

void make_rogue_client(zmq::socket_t& s, const std::string& server_public) {
  auto pair = exchange::make_keypair();
  ASSERT_TRUE(pair);
  s.set(zmq::sockopt::curve_serverkey, server_public);
  s.set(zmq::sockopt::curve_publickey, pair->public_key);
  s.set(zmq::sockopt::curve_secretkey, pair->secret_key);
}

// A TCP relay that records every byte between clients and `target_port` (a wire tap).
struct tap {
  int listen_fd = -1;
  uint16_t port = 0;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string seen;
  std::vector<std::thread> threads;
  explicit tap(uint16_t target_port) {
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listen_fd, 8);
    socklen_t len = sizeof a;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    threads.emplace_back([this, target_port] {
      while (!stop) {
        pollfd p{listen_fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        int c = accept(listen_fd, nullptr, nullptr);
        int u = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in t{};
        t.sin_family = AF_INET;
        t.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        t.sin_port = htons(target_port);
        if (connect(u, reinterpret_cast<sockaddr*>(&t), sizeof t) != 0) { close(c); close(u); continue; }
        threads.emplace_back([this, c, u] { relay(c, u); });
      }
    });
  }
  void relay(int a, int b) {
    char buf[65536];
    while (!stop) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 100) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
        ssize_t n = read(p[i].fd, buf, sizeof buf);
        if (n <= 0) { close(a); close(b); return; }
        { std::lock_guard lk(mu); seen.append(buf, n); }
        (void)!write(p[1 - i].fd, buf, n);
      }
    }
    close(a);
    close(b);
  }
  ~tap() {
    stop = true;
    // threads_ may grow while we join the acceptor: join it first
    threads[0].join();
    for (size_t i = 1; i < threads.size(); ++i) threads[i].join();
    close(listen_fd);
  }
};

uint16_t port_of(const std::string& ep) { return static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1))); }

pid_t spawn_tile(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string bin = bin_dir() + "/tessera-tile";
  argv.push_back(bin.data());
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

// A process started by the test: stdout on a pipe, stderr into a file; killed when dropped.
struct process {
  pid_t pid = -1;
  int out_fd = -1;
  fs::path err = fs::temp_directory_path() / ("tessera-sec-" + std::to_string(getpid()) + "-" +
                                              std::to_string(std::rand()) + ".err");
  explicit process(const std::vector<std::string>& args) {
    auto c = tessera::test_support::spawn(args, err.string());
    pid = c.pid;
    out_fd = c.out_fd;
  }
  std::string line() { return tessera::test_support::read_line(out_fd); }
  std::string stderr_text() const { return slurp(err); }
  /// SIGTERM (or `sig`) and the exit code (128 + signal when killed).
  int stop(int sig = SIGTERM) {
    if (pid <= 0) return -1;
    kill(pid, sig);
    int ws = 0;
    waitpid(pid, &ws, 0);
    pid = -1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  }
  ~process() {
    if (pid > 0) stop(SIGKILL);
    if (out_fd >= 0) close(out_fd);
    std::error_code ec;
    fs::remove(err, ec);
  }
};

// Runs a command to its end (bounded by `timeout` s): exit code and stdout + stderr.
std::pair<int, std::string> run_to_end(const std::vector<std::string>& args, int timeout = 60) {
  process p([&] {
    std::vector<std::string> a{"/usr/bin/timeout", "-k", "5", std::to_string(timeout)};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p.out_fd, buf, sizeof buf)) > 0;) out.append(buf, n);
  int ws = 0;
  waitpid(p.pid, &ws, 0);
  p.pid = -1;
  return {WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, out + p.stderr_text()};
}

// tessera-gpu with bert-tiny on a loopback port, and the endpoint it printed.
struct gpu_process : process {
  std::string endpoint;
  explicit gpu_process(const std::vector<std::string>& extra)
      : process([&] {
          std::vector<std::string> a{bin_dir() + "/tessera-gpu", "--model", "bert-tiny", "--bind", "tcp://127.0.0.1:0"};
          a.insert(a.end(), extra.begin(), extra.end());
          return a;
        }()) {
    const std::string l = line(), prefix = "listening on ";
    if (l.rfind(prefix, 0) == 0) endpoint = l.substr(prefix.size());
  }
};

const models::bert_model& tiny() {
  static models::bert_model m = models::load_model("bert-tiny").value();
  return m;
}

// Three sequences of bert-tiny as a backend request, and the reference's logits for them.
std::pair<batch_request, std::vector<float>> tiny_batch(uint64_t seed) {
  auto b = models::synthetic_batch({5, 17, 9}, tiny().config.vocab_size, seed);
  batch_request r;
  r.batch_id = seed;
  for (int i = 0; i < b.num_seqs(); ++i) {
    sequence_input q;
    q.token_ids.assign(b.token_ids.begin() + b.seq_offsets[i], b.token_ids.begin() + b.seq_offsets[i + 1]);
    q.token_type_ids.assign(b.token_type_ids.begin() + b.seq_offsets[i], b.token_type_ids.begin() + b.seq_offsets[i + 1]);
    r.sequences.push_back(std::move(q));
  }
  return {std::move(r), models::reference_forward(tiny(), b)};
}

// A remote_backend to `endpoint` whose DEALER is made under `sec` (the process's security is
// what a socket takes when it is created; later changes do not touch it).
std::shared_ptr<remote_backend> gpu_client(const exchange::security_config& sec, const std::string& endpoint) {
  exchange::set_process_security(sec);
  remote_backend_config c;
  c.endpoint = endpoint;
  c.info = {.name = "gpu0", .kind = "gpu", .max_sequence_length = tiny().config.max_position_embeddings,
            .num_labels = tiny().config.num_labels};
  auto b = remote_backend::start(c);
  EXPECT_TRUE(b) << b.error().to_string();
  return b ? *b : nullptr;
}

// Submits and waits at most `limit`; a batch that never completes is reported as such.
std::pair<batch_result, std::chrono::milliseconds> submit_and_wait(backend& b, batch_request r,
                                                                   std::chrono::milliseconds limit = 30000ms) {
  auto p = std::make_shared<std::promise<batch_result>>();
  auto f = p->get_future();
  const auto t0 = std::chrono::steady_clock::now();
  b.submit(std::move(r), [p](batch_result res) { p->set_value(std::move(res)); });
  if (f.wait_for(limit) != std::future_status::ready) {
    batch_result never;
    never.st = status::internal("test: the batch never completed (hang)");
    return {std::move(never), limit};
  }
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  return {f.get(), took};
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

}  // namespace

TEST(Security, KeysAreMadeOnceAndLoadedPerRole) {
  auto host = exchange::load_security(key_dir(), exchange::security_role::host);
  auto tile = exchange::load_security(key_dir(), exchange::security_role::tile);
  ASSERT_TRUE(host && tile);
  EXPECT_EQ(host->self.public_key, tile->host_public);
  EXPECT_EQ(tile->self.public_key, host->tile.public_key);
  EXPECT_TRUE(host->tile.secret_key.empty());  // the host never needs the tiles' secret
  EXPECT_FALSE(exchange::make_keys(key_dir()));  // never overwrites
  EXPECT_EQ(fs::status(fs::path(key_dir()) / "tile.key").permissions() & fs::perms::others_read, fs::perms::none);
  EXPECT_TRUE(exchange::is_loopback_endpoint("tcp://127.0.0.1:5"));
  EXPECT_FALSE(exchange::is_loopback_endpoint("tcp://10.210.0.1:5"));
  EXPECT_FALSE(exchange::is_loopback_endpoint("tcp://0.0.0.0:5"));
}

TEST(Security, KeyedTilesJoinButStrangersCannotRegisterOrSendTensors) {
  auto g = tile_group::start(secure_group(2));
  ASSERT_TRUE(g) << g.error().to_string();
  auto before = (*g)->tiles();
  uint64_t denied0 = exchange::zap_denied();
  zmq::context_t ctx(1);
  // 1. A client with a key pair of its own (knowing the host's public key) cannot register.
  {
    auto d = lingerless(ctx, zmq::socket_type::dealer);
    make_rogue_client(d, exchange::process_security().host_public);
    EXPECT_EQ(try_register(ctx, d, (*g)->control_endpoint(), 1, 7), handshake::failed);
  }
  // 2. A plain (unencrypted) client cannot either.
  {
    auto d = lingerless(ctx, zmq::socket_type::dealer);
    EXPECT_NE(try_register(ctx, d, (*g)->control_endpoint(), 0, 9), handshake::succeeded);
  }
  // 3. A stranger cannot push tensors into a tile's exchange socket.
  {
    auto p = lingerless(ctx, zmq::socket_type::push);
    make_rogue_client(p, exchange::process_security().tile.public_key);
    auto h = watch_handshake(ctx, p, before[0].exchange_endpoint, [&] {
      exchange::exchange_data m{1, 1, 0, 1, 0, 0, 4};
      zmq::message_t slice(16);
      exchange::send_envelope(p, exchange::encode(m, std::move(slice)), zmq::send_flags::dontwait);
    });
    EXPECT_EQ(h, handshake::failed);
  }
  // 4. The right keys do get through (the checks above are not vacuous).
  {
    auto p = lingerless(ctx, zmq::socket_type::push);
    auto tile = exchange::load_security(key_dir(), exchange::security_role::tile);
    p.set(zmq::sockopt::curve_serverkey, tile->tile.public_key);
    p.set(zmq::sockopt::curve_publickey, tile->self.public_key);
    p.set(zmq::sockopt::curve_secretkey, tile->self.secret_key);
    EXPECT_EQ(watch_handshake(ctx, p, before[0].exchange_endpoint, {}), handshake::succeeded);
  }
  EXPECT_GE(exchange::zap_denied(), denied0 + 1);  // the host's ZAP handler refused case 1
  std::this_thread::sleep_for(300ms);
  auto after = (*g)->tiles();
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(after[i].incarnation, before[i].incarnation) << "a stranger replaced tile " << i;
    EXPECT_EQ(after[i].pid, before[i].pid);
    EXPECT_FALSE(after[i].failed) << after[i].failure;
    EXPECT_EQ(after[i].bad_messages, 0u) << "tile " << i << " received a stranger's message";
  }
  EXPECT_TRUE((*g)->health().ok());
  // The group still works: a tensor goes to a tile and comes back.
  std::vector<float> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(i);
  auto back = round_trip(**g, 1, 1, "x", data);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, data);
  (*g)->shutdown();
}

TEST(Security, AFakeHostCannotReadTiles) {
  // A ROUTER with a key pair of its own waits where a keyed tile dials: the tile refuses it.
  secure_group(1);
  zmq::context_t ctx(1);
  zmq::socket_t r(ctx, zmq::socket_type::router);
  r.set(zmq::sockopt::linger, 0);
  auto pair = exchange::make_keypair();
  r.set(zmq::sockopt::curve_server, 1);
  r.set(zmq::sockopt::curve_secretkey, pair->secret_key);
  r.bind("tcp://127.0.0.1:0");
  std::string ep = r.get(zmq::sockopt::last_endpoint);
  pid_t pid = spawn_tile({"--host", ep, "--tile-id", "0", "--keys", key_dir(), "--exchange-bind", "tcp://127.0.0.1:0",
                          "--host-silence-ms", "4000"});
  r.set(zmq::sockopt::rcvtimeo, 2500);
  zmq::message_t m;
  EXPECT_FALSE(r.recv(m)) << "the fake host received a message from a keyed tile";
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

TEST(Security, AWireTapSeesOnlyCiphertext) {
  // One tile dials the host through a recording relay; a tensor with a recognisable pattern goes
  // to it and comes back. The relay must never see the pattern (it would in plain text).
  auto cfg = secure_group(1);
  cfg.launch_local = false;
  // Reserve a port for the host, then let the group bind it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t host_port = ntohs(a.sin_port);
  close(fd);
  cfg.control_bind = "tcp://127.0.0.1:" + std::to_string(host_port);
  auto started = std::async(std::launch::async, [&] { return tile_group::start(cfg); });
  tap t(host_port);
  pid_t pid = spawn_tile({"--host", "tcp://127.0.0.1:" + std::to_string(t.port), "--tile-id", "0", "--keys", key_dir(),
                          "--exchange-bind", "tcp://127.0.0.1:0", "--heartbeat-ms", "100", "--host-silence-ms", "5000"});
  auto g = started.get();
  ASSERT_TRUE(g) << g.error().to_string();
  std::vector<float> data(256);
  const char pattern[] = "TESSERA-SECRET!";  // 16 bytes incl. NUL = 4 floats, repeated
  for (size_t i = 0; i < data.size(); i += 4) std::memcpy(&data[i], pattern, 16);
  auto back = round_trip(**g, 0, 7, "secret", data);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(0, std::memcmp(back->data(), data.data(), data.size() * 4));
  (*g)->shutdown();
  waitpid(pid, nullptr, 0);
  std::lock_guard lk(t.mu);
  EXPECT_GT(t.seen.size(), 1024u) << "the tap saw no traffic: the test is vacuous";
  EXPECT_EQ(t.seen.find("TESSERA-SECRET"), std::string::npos) << "plain tensor bytes on the wire";
  EXPECT_EQ(t.seen.find("TSRA"), std::string::npos) << "plain protocol headers on the wire";
}

TEST(Security, KeyDirectoriesGetAGpuPairTheGpuRoleAdmitsTheHostAlone) {
  auto gpu = exchange::load_security(key_dir(), exchange::security_role::gpu);
  auto host = exchange::load_security(key_dir(), exchange::security_role::host);
  auto tile = exchange::load_security(key_dir(), exchange::security_role::tile);
  ASSERT_TRUE(gpu && host && tile) << (gpu ? "" : gpu.error().message());
  EXPECT_EQ(host->gpu_public, gpu->self.public_key);  // the host's DEALER authenticates the GPU process
  EXPECT_EQ(gpu->authorized, std::vector<std::string>{host->self.public_key});  // the host alone
  for (const auto& k : host->authorized) EXPECT_NE(k, gpu->self.public_key) << "gpu.pub could register as a tile";
  EXPECT_TRUE(gpu->tile.secret_key.empty());
  EXPECT_EQ(fs::status(fs::path(key_dir()) / "gpu.key").permissions() & fs::perms::others_read, fs::perms::none);
  // A GPU machine needs gpu.* and host.pub only.
  const fs::path only = fs::path(key_dir()).string() + "-gpu-only";
  fs::create_directories(only);
  for (const char* f : {"gpu.pub", "gpu.key", "host.pub"}) fs::copy_file(fs::path(key_dir()) / f, only / f);
  EXPECT_TRUE(exchange::load_security(only.string(), exchange::security_role::gpu));
  // A directory made before the GPU pair: --make-keys adds the pair and changes nothing else.
  const fs::path old = fs::path(key_dir()).string() + "-old";
  fs::create_directories(old);
  for (const char* f : {"host.pub", "host.key", "tile.pub", "tile.key", "authorized_keys"})
    fs::copy_file(fs::path(key_dir()) / f, old / f);
  auto no_gpu = exchange::load_security(old.string(), exchange::security_role::gpu);
  ASSERT_FALSE(no_gpu);
  EXPECT_NE(no_gpu.error().message().find("--make-keys"), std::string::npos) << no_gpu.error().message();
  auto added = run_to_end({bin_dir() + "/tessera-tile", "--make-keys", old.string()});
  EXPECT_EQ(added.first, 0) << added.second;
  EXPECT_NE(added.second.find("gpu.pub gpu.key"), std::string::npos) << added.second;
  EXPECT_EQ(slurp(old / "host.key"), slurp(fs::path(key_dir()) / "host.key"));
  EXPECT_EQ(slurp(old / "authorized_keys"), slurp(fs::path(key_dir()) / "authorized_keys"));
  EXPECT_TRUE(exchange::load_security(old.string(), exchange::security_role::gpu));
  EXPECT_NE(run_to_end({bin_dir() + "/tessera-tile", "--make-keys", old.string()}).first, 0);  // never overwrites
  fs::remove_all(only);
  fs::remove_all(old);
}

// tessera-gpu --keys answers the host's key pair only. Everyone else's batches fail at once with
// peer_failed (the backend never becomes healthy), the process keeps serving the host, and its
// ZAP handler counts and logs the refused keys.
TEST(Security, KeyedGpuProcessServesTheHostAloneAndRefusesTheRestCleanly) {
  gpu_process gpu({"--keys", key_dir()});
  ASSERT_FALSE(gpu.endpoint.empty()) << gpu.stderr_text();
  auto host_keys = exchange::load_security(key_dir(), exchange::security_role::host).value();
  auto tile_keys = exchange::load_security(key_dir(), exchange::security_role::tile).value();

  auto good = gpu_client(host_keys, gpu.endpoint);
  ASSERT_TRUE(good);
  ASSERT_TRUE(good->wait_ready(20s)) << "the keyed host got no pong from the keyed tessera-gpu";
  {
    auto [req, want] = tiny_batch(1);
    auto [r, took] = submit_and_wait(*good, std::move(req));
    ASSERT_TRUE(r.st.ok()) << r.st.to_string();
    EXPECT_LT(max_diff(r.logits, want), 1e-4);
  }

  auto stranger = host_keys;  // a pair of its own, knowing the GPU process's public key
  stranger.self = exchange::make_keypair().value();
  auto as_tile = host_keys;   // the tiles' pair: authorized at the host, not at tessera-gpu
  as_tile.self = tile_keys.self;
  auto wrong_server = host_keys;  // the right host pair, but it expects another server key
  wrong_server.gpu_public = exchange::make_keypair().value().public_key;
  auto plain = exchange::security_config{};  // no CURVE at all
  struct probe {
    const char* who;
    exchange::security_config sec;
  };
  const uint64_t local_denied = exchange::zap_denied();
  for (const auto& p : {probe{"a stranger's key pair", stranger}, probe{"the tiles' key pair", as_tile},
                        probe{"a wrong server key", wrong_server}, probe{"a plain client", plain}}) {
    SCOPED_TRACE(p.who);
    auto b = gpu_client(p.sec, gpu.endpoint);
    ASSERT_TRUE(b);
    EXPECT_FALSE(b->wait_ready(1500ms)) << "tessera-gpu answered " << p.who;
    auto [req, want] = tiny_batch(2);
    auto [r, took] = submit_and_wait(*b, std::move(req), 10000ms);
    EXPECT_EQ(r.st.code(), errc::peer_failed) << r.st.to_string();
    EXPECT_LT(took, 5000ms) << "a refused client's batch took " << took.count() << " ms";
    EXPECT_TRUE(r.logits.empty());
    b->stop();
  }
  EXPECT_EQ(exchange::zap_denied(), local_denied);  // the refusals happened in tessera-gpu, not here

  {  // the host is still served, on the connection it had all along
    auto [req, want] = tiny_batch(3);
    auto [r, took] = submit_and_wait(*good, std::move(req));
    ASSERT_TRUE(r.st.ok()) << r.st.to_string();
    EXPECT_LT(max_diff(r.logits, want), 1e-4);
  }
  good->stop();
  EXPECT_EQ(gpu.stop(), 0);
  const std::string log = gpu.stderr_text();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("refused (\\d+) CURVE peers"))) << log;
  EXPECT_GE(std::stoi(m[1]), 2) << log;  // at least one handshake each of the stranger and the tile pair
  EXPECT_NE(log.find("key " + stranger.self.public_key), std::string::npos) << "the stranger's key is not logged";
  EXPECT_NE(log.find("key " + tile_keys.self.public_key), std::string::npos) << "the tile key is not logged";
  EXPECT_EQ(log.find("key " + host_keys.self.public_key), std::string::npos) << "the host's key was refused";
}

TEST(Security, AWireTapBetweenHostAndGpuProcessSeesOnlyCiphertext) {
  gpu_process gpu({"--keys", key_dir()});
  ASSERT_FALSE(gpu.endpoint.empty()) << gpu.stderr_text();
  tap t(port_of(gpu.endpoint));
  auto b = gpu_client(exchange::load_security(key_dir(), exchange::security_role::host).value(),
                      "tcp://127.0.0.1:" + std::to_string(t.port));
  ASSERT_TRUE(b && b->wait_ready(20s));
  // Token ids whose bytes spell a pattern (0x54535241 > vocab, so a valid id repeated instead).
  batch_request req;
  req.batch_id = 9;
  sequence_input q;
  q.token_ids.assign(64, 0x4242);  // "BB\0\0" repeated, a valid bert-tiny id
  q.token_type_ids.assign(64, 0);
  req.sequences.push_back(q);
  auto [r, took] = submit_and_wait(*b, std::move(req));
  ASSERT_TRUE(r.st.ok()) << r.st.to_string();
  b->stop();
  gpu.stop();
  std::lock_guard lk(t.mu);
  EXPECT_GT(t.seen.size(), 512u) << "the tap saw no traffic: the test is vacuous";
  EXPECT_EQ(t.seen.find("TSRA"), std::string::npos) << "plain protocol headers on the wire";
  EXPECT_EQ(t.seen.find(std::string("BB\0\0BB\0\0BB\0\0", 12)), std::string::npos) << "plain token ids on the wire";
}

// Off loopback without keys: tessera-gpu and tessera-host refuse (exit 2) and say what to add.
// (That --insecure and --keys start off loopback is shown across namespaces: security_netns.sh.)
TEST(Security, PlainGpuSocketsOffLoopbackAreRefused) {
  auto gpu = run_to_end({bin_dir() + "/tessera-gpu", "--model", "bert-tiny", "--bind", "tcp://0.0.0.0:0"});
  EXPECT_EQ(gpu.first, 2) << gpu.second;
  EXPECT_NE(gpu.second.find("pass --keys DIR"), std::string::npos) << gpu.second;
  EXPECT_NE(gpu.second.find("--insecure"), std::string::npos) << gpu.second;
  EXPECT_EQ(gpu.second.find("listening on"), std::string::npos) << gpu.second;

  auto host = run_to_end({bin_dir() + "/tessera-host", "--model", "bert-tiny", "--tiles", "1", "--serve", "--port",
                          "0", "--gpu-endpoint", "tcp://192.0.2.1:7000", "--routing", "hybrid"});
  EXPECT_EQ(host.first, 2) << host.second;
  EXPECT_NE(host.second.find("--gpu-endpoint tcp://192.0.2.1:7000 leaves this machine: pass --keys DIR"),
            std::string::npos) << host.second;
  EXPECT_EQ(host.second.find("streaming weights"), std::string::npos) << "tiles started before the refusal";

  // Keys without the GPU pair: the host says which file is missing instead of a silent failure.
  const fs::path old = fs::path(key_dir()).string() + "-nogpu";
  fs::create_directories(old);
  for (const char* f : {"host.pub", "host.key", "tile.pub", "tile.key", "authorized_keys"})
    fs::copy_file(fs::path(key_dir()) / f, old / f, fs::copy_options::overwrite_existing);
  auto nogpu = run_to_end({bin_dir() + "/tessera-host", "--model", "bert-tiny", "--tiles", "1", "--serve", "--port",
                           "0", "--keys", old.string(), "--spawn-gpu", "1", "--routing", "hybrid"});
  EXPECT_NE(nogpu.first, 0) << nogpu.second;
  EXPECT_NE(nogpu.second.find("has no gpu.pub"), std::string::npos) << nogpu.second;
  auto gpu_nokey = run_to_end({bin_dir() + "/tessera-gpu", "--model", "bert-tiny", "--keys", old.string()});
  EXPECT_EQ(gpu_nokey.first, 2) << gpu_nokey.second;
  EXPECT_NE(gpu_nokey.second.find("gpu.pub"), std::string::npos) << gpu_nokey.second;
  fs::remove_all(old);
}

// tessera-host --keys --spawn-gpu: the child gets --keys, the host's DEALER speaks CURVE to it
// (a plain one would never get the pong the host waits for), and short requests are answered by it.
TEST(Security, HostWithKeysSpawnsAKeyedGpuProcessAndRoutesToIt) {
  process host({bin_dir() + "/tessera-host", "--model", "bert-tiny", "--tiles", "1", "--serve", "--port", "0",
                "--keys", key_dir(), "--spawn-gpu", "1", "--routing", "hybrid"});
  uint16_t port = 0;
  for (int i = 0; i < 100 && port == 0; ++i) {
    const std::string l = host.line();
    std::smatch m;
    if (std::regex_search(l, m, std::regex("^listening on http://[^ ]*:(\\d+) "))) port = std::stoi(m[1]);
    if (l.empty()) break;
  }
  ASSERT_NE(port, 0) << host.stderr_text();
  // The spawned child's command line carries the keys.
  std::string child_cmdline;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream st(e.path() / "stat");
    std::string stat;
    if (!std::getline(st, stat) || stat.find("(tessera-gpu)") == std::string::npos) continue;
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != host.pid) continue;
    child_cmdline = slurp(e.path() / "cmdline");
    std::replace(child_cmdline.begin(), child_cmdline.end(), '\0', ' ');
  }
  EXPECT_NE(child_cmdline.find("--keys " + key_dir()), std::string::npos) << "spawned: '" << child_cmdline << "'";
  tessera::test_support::http_connection c("127.0.0.1", port);
  for (int i = 0; i < 6; ++i) {
    auto r = c.request("POST", "/predict", R"({"inputs": "a short one for the gpu process"})");
    EXPECT_EQ(r.status, 200u) << r.body << r.error;
  }
  auto metrics = c.request("GET", "/metrics").body;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(metrics, m, std::regex("tessera_backend_batches\\{backend=\"gpu0\"\\} (\\d+)"))) << metrics;
  EXPECT_GT(std::stoi(m[1]), 0) << "no batch went to the keyed tessera-gpu";
  EXPECT_EQ(host.stop(), 0) << host.stderr_text();
}
