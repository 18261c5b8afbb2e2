#include "tessera/exchange/security.hpp"

#include <sys/stat.h>
#include <zmq.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "tessera/common/log.hpp"

namespace tessera::exchange {

namespace fs = std::filesystem;

namespace {
std::mutex g_mu;
security_config g_cfg;
std::set<void*> g_zap_contexts;  // contexts whose ZAP handler runs
std::atomic<uint64_t> g_denied{0};

result<std::string> read_key(const fs::path& p) {
  std::ifstream in(p);
  std::string k;
  if (!in || !(in >> k)) return status::invalid("cannot read key " + p.string() + "; make keys with tessera-tile --make-keys DIR");
  if (k.size() != 40) return status::invalid("key " + p.string() + " is not a 40-character Z85 CurveZMQ key");
  return k;
}

status write_file(const fs::path& p, const std::string& text, mode_t mode) {
  std::ofstream out(p);
  out << text;
  out.close();
  if (!out) return status::io_error("cannot write " + p.string());
  chmod(p.c_str(), mode);
  return ok_status();
}

// ZAP (RFC 27) handler for one context: admits CURVE clients whose public key is authorized.
void zap_loop(zmq::socket_t sock, std::set<std::string> allowed, void* ctx_handle) {
  for (;;) {
    std::vector<zmq::message_t> req;
    try {
      for (;;) {
        zmq::message_t m;
        if (!sock.recv(m)) break;
        bool more = m.more();
        req.push_back(std::move(m));
        if (!more) break;
      }
    } catch (const zmq::error_t&) {
      break;  // ETERM: the context is closing
    }
    if (req.size() < 6) continue;
    std::string version = req[0].to_string(), request_id = req[1].to_string(), mechanism = req[5].to_string();
    bool ok = false;
    std::string who = "(no key)";
    if (version == "1.0" && mechanism == "CURVE" && req.size() >= 7 && req[6].size() == 32) {
      char z85[41] = {};
      zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32);
      who = z85;
      ok = allowed.count(who) > 0;
    }
    if (!ok) {
      ++g_denied;
      TESSERA_LOG_WARN("security: refused a " << mechanism << " peer with key " << who << " from "
                                              << req[3].to_string());
    }
    try {
      sock.send(zmq::buffer(std::string("1.0")), zmq::send_flags::sndmore);
      sock.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
      sock.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
      sock.send(zmq::buffer(std::string(ok ? "OK" : "unknown key")), zmq::send_flags::sndmore);
      sock.send(zmq::buffer(std::string(ok ? who : "")), zmq::send_flags::sndmore);
      sock.send(zmq::message_t(), zmq::send_flags::none);
    } catch (const zmq::error_t&) {
      break;
    }
  }
  {
    // Forget the context before closing: zmq_ctx_term waits for this close, so no new context
    // can reuse the address (and find a handler that is gone) before the entry is removed.
    std::lock_guard lk(g_mu);
    g_zap_contexts.erase(ctx_handle);
  }
  sock.close();
}
}  // namespace

result<curve_keypair> make_keypair() {
  if (!zmq_has("curve")) return status::invalid("this libzmq has no CURVE support; install Debian's libzmq5");
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0) return status::io_error(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  return curve_keypair{pub, sec};
}

result<std::vector<std::string>> make_keys(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return status::io_error("cannot create " + dir + ": " + ec.message());
  chmod(dir.c_str(), 0700);
  const fs::path d(dir);
  const bool has_host = fs::exists(d / "host.key"), has_tile = fs::exists(d / "tile.key"),
             has_gpu = fs::exists(d / "gpu.key") || fs::exists(d / "gpu.pub");
  if (has_gpu || has_host != has_tile)
    return status::invalid(dir + " already holds keys; remove them or choose another directory");
  auto write_pair = [&](const std::string& name, const curve_keypair& k) -> status {
    TESSERA_RETURN_IF_ERROR(write_file(d / (name + ".pub"), k.public_key + "\n", 0644));
    return write_file(d / (name + ".key"), k.secret_key + "\n", 0600);
  };
  auto gpu = make_keypair();
  if (!gpu) return gpu.error();
  if (has_host) {  // a directory made before the GPU pair: add it, touch nothing else
    TESSERA_RETURN_IF_ERROR(write_pair("gpu", *gpu));
    return std::vector<std::string>{"gpu.pub", "gpu.key"};
  }
  auto host = make_keypair();
  if (!host) return host.error();
  auto tile = make_keypair();
  if (!tile) return tile.error();
  TESSERA_RETURN_IF_ERROR(write_pair("host", *host));
  TESSERA_RETURN_IF_ERROR(write_pair("tile", *tile));
  TESSERA_RETURN_IF_ERROR(write_pair("gpu", *gpu));
  // gpu.pub stays out: tessera-gpu is only ever a server, and its key must not register as a tile.
  TESSERA_RETURN_IF_ERROR(write_file(d / "authorized_keys", host->public_key + "\n" + tile->public_key + "\n", 0644));
  return std::vector<std::string>{"host.pub", "host.key", "tile.pub", "tile.key", "gpu.pub", "gpu.key", "authorized_keys"};
}

result<security_config> load_security(const std::string& dir, security_role role) {
  if (!zmq_has("curve")) return status::invalid("this libzmq has no CURVE support; install Debian's libzmq5");
  fs::path d(dir);
  security_config c;
  c.curve = true;
  c.dir = dir;
  auto host_pub = read_key(d / "host.pub");
  if (!host_pub) return host_pub.error();
  c.host_public = *host_pub;
  if (role == security_role::gpu) {
    // tessera-gpu serves the host alone: its ZAP handler admits host.pub, whatever else is listed.
    auto pub = read_key(d / "gpu.pub");
    if (!pub) return pub.error().with_context("a GPU process needs gpu.pub and gpu.key (tessera-tile --make-keys DIR adds them to an older directory)");
    auto sec = read_key(d / "gpu.key");
    if (!sec) return sec.error();
    c.self = {*pub, *sec};
    c.gpu_public = *pub;
    c.authorized = {*host_pub};
    return c;
  }
  auto tile_pub = read_key(d / "tile.pub");
  if (!tile_pub) return tile_pub.error();
  c.tile.public_key = *tile_pub;
  if (role == security_role::host) {
    auto sec = read_key(d / "host.key");
    if (!sec) return sec.error();
    c.self = {*host_pub, *sec};
    if (fs::exists(d / "gpu.pub")) {  // only a host with GPU backends needs it (remote_backend checks)
      auto gpu_pub = read_key(d / "gpu.pub");
      if (!gpu_pub) return gpu_pub.error();
      c.gpu_public = *gpu_pub;
    }
  } else {
    auto sec = read_key(d / "tile.key");
    if (!sec) return sec.error();
    c.tile.secret_key = *sec;
    c.self = c.tile;
  }
  std::ifstream in(d / "authorized_keys");
  if (!in) return status::invalid("cannot read " + (d / "authorized_keys").string());
  for (std::string k; in >> k;)
    if (k.size() == 40) c.authorized.push_back(k);
  if (c.authorized.empty()) return status::invalid((d / "authorized_keys").string() + " lists no key");
  return c;
}

void set_process_security(const security_config& cfg) {
  std::lock_guard lk(g_mu);
  g_cfg = cfg;
}

const security_config& process_security() { return g_cfg; }

void secure_server(zmq::context_t& ctx, zmq::socket_t& s) {
  std::lock_guard lk(g_mu);
  if (!g_cfg.curve) return;
  if (!g_zap_contexts.count(ctx.handle())) {
    // The handler must be bound before the first server socket binds, in the same context.
    zmq::socket_t zap(ctx, zmq::socket_type::rep);
    zap.set(zmq::sockopt::linger, 0);
    zap.bind("inproc://zeromq.zap.01");
    g_zap_contexts.insert(ctx.handle());
    std::set<std::string> allowed(g_cfg.authorized.begin(), g_cfg.authorized.end());
    std::thread(zap_loop, std::move(zap), std::move(allowed), ctx.handle()).detach();
  }
  s.set(zmq::sockopt::curve_server, 1);
  s.set(zmq::sockopt::curve_secretkey, g_cfg.self.secret_key);
#ifdef ZMQ_ZAP_ENFORCE_DOMAIN
  {
    int one = 1;  // a draft option in libzmq 4.3; cppzmq exposes it only with draft APIs
    zmq_setsockopt(s.handle(), ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one);
  }
#endif
  s.set(zmq::sockopt::zap_domain, "tessera");
}

void secure_client(zmq::socket_t& s, const std::string& server_public) {
  std::lock_guard lk(g_mu);
  if (!g_cfg.curve) return;
  s.set(zmq::sockopt::curve_serverkey, server_public);
  s.set(zmq::sockopt::curve_publickey, g_cfg.self.public_key);
  s.set(zmq::sockopt::curve_secretkey, g_cfg.self.secret_key);
}

bool is_loopback_endpoint(const std::string& ep) {
  if (ep.rfind("ipc://", 0) == 0 || ep.rfind("inproc://", 0) == 0) return true;
  if (ep.rfind("tcp://", 0) != 0) return false;
  std::string addr = ep.substr(6, ep.rfind(':') == std::string::npos ? std::string::npos : ep.rfind(':') - 6);
  return addr.rfind("127.", 0) == 0 || addr == "localhost" || addr == "[::1]";
}

uint64_t zap_denied() { return g_denied.load(); }

}  // namespace tessera::exchange
