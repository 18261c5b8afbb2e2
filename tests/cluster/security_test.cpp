// CurveZMQ across machines: tiles with the cluster keys join and run; a peer without the right
// key pair cannot register, cannot send tensors to a tile, cannot pose as the host to read them,
// and a wire tap between a tile and the host sees only ciphertext. Runs on loopback with --keys
// (which forces CURVE); the netns scripts show the same across namespaces.
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
#include <future>
#include <mutex>
#include <thread>

#include "tessera/exchange/security.hpp"
#include "tessera/exchange/zmq_transport.hpp"
#include "tessera/host/tile_group.hpp"

using namespace tessera;
using namespace tessera::host;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

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
    auto st = exchange::make_keys(d);
    EXPECT_TRUE(st) << st.message();
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

// Watches a socket's handshake: returns the first of succeeded / failed events within `wait`.
enum class handshake { none, succeeded, failed };
handshake watch_handshake(zmq::context_t& ctx, zmq::socket_t& s, const std::string& endpoint,
                          const std::function<void()>& after_connect, std::chrono::milliseconds wait = 3000ms) {
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
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    d.set(zmq::sockopt::routing_id, "tile-1-7");
    make_rogue_client(d, exchange::process_security().host_public);
    auto h = watch_handshake(ctx, d, (*g)->control_endpoint(), [&] {
      exchange::register_tile reg{1, 7, 4242, "tcp://127.0.0.1:1", "rogue", 1 << 20};
      exchange::send_envelope(d, exchange::encode(reg), zmq::send_flags::dontwait);
    });
    EXPECT_EQ(h, handshake::failed);
  }
  // 2. A plain (unencrypted) client cannot either.
  {
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    d.set(zmq::sockopt::routing_id, "tile-0-9");
    auto h = watch_handshake(ctx, d, (*g)->control_endpoint(), [&] {
      exchange::register_tile reg{0, 9, 4243, "tcp://127.0.0.1:1", "rogue", 1 << 20};
      exchange::send_envelope(d, exchange::encode(reg), zmq::send_flags::dontwait);
    });
    EXPECT_NE(h, handshake::succeeded);
  }
  // 3. A stranger cannot push tensors into a tile's exchange socket.
  {
    zmq::socket_t p(ctx, zmq::socket_type::push);
    p.set(zmq::sockopt::linger, 0);
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
    zmq::socket_t p(ctx, zmq::socket_type::push);
    p.set(zmq::sockopt::linger, 0);
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
  EXPECT_TRUE((*g)->health());
  // The group still works: a tensor goes to a tile and comes back.
  std::vector<float> data(64);
  for (size_t i = 0; i < data.size(); ++i) data[i] = float(i);
  exchange::tensor_desc desc{1, "x", exchange::dtype::f32, {64}};
  ASSERT_TRUE((*g)->alloc(1, desc, data.data()));
  exchange::slice_ref ref{};
  ref.tensor_id = 1;
  ref.count = 64;
  auto back = (*g)->fetch(1, ref);
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
  exchange::tensor_desc desc{7, "secret", exchange::dtype::f32, {256}};
  ASSERT_TRUE((*g)->alloc(0, desc, data.data()));
  exchange::slice_ref ref{};
  ref.tensor_id = 7;
  ref.count = 256;
  auto back = (*g)->fetch(0, ref);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(0, std::memcmp(back->data(), data.data(), data.size() * 4));
  (*g)->shutdown();
  waitpid(pid, nullptr, 0);
  std::lock_guard lk(t.mu);
  EXPECT_GT(t.seen.size(), 1024u) << "the tap saw no traffic: the test is vacuous";
  EXPECT_EQ(t.seen.find("TESSERA-SECRET"), std::string::npos) << "plain tensor bytes on the wire";
  EXPECT_EQ(t.seen.find("TSRA"), std::string::npos) << "plain protocol headers on the wire";
}
