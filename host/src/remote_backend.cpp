// host::remote_backend: a backend process behind a DEALER socket. See remote_backend.hpp.
#include "tessera/host/remote_backend.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "tessera/common/log.hpp"
#include "tessera/host/launcher.hpp"
#include "tessera/exchange/channel.hpp"
#include "tessera/exchange/codec.hpp"
#include "tessera/exchange/security.hpp"
#include "tessera/exchange/zmq_transport.hpp"

extern char** environ;

namespace tessera::host {

namespace ex = exchange;
using steady = std::chrono::steady_clock;

namespace {

// infer_batch.compute for a forward in `d`.
ex::dtype wire_compute(models::dtype d) {
  return d == models::dtype::bf16 ? ex::dtype::bf16 : d == models::dtype::int8 ? ex::dtype::i8 : ex::dtype::f32;
}

int64_t tokens_of(const backends::batch_request& r) {
  int64_t n = 0;
  for (const auto& s : r.sequences) n += static_cast<int64_t>(s.token_ids.size());
  return n;
}

std::string describe_exit(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with code " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) return "killed by signal " + std::to_string(WTERMSIG(wstatus));
  return "stopped";
}

}  // namespace

struct remote_backend::impl {
  struct job_info {
    uint64_t batch_id = 0;
    size_t sequences = 0;  ///< rows expected back: one per sequence, a token's each for every_token ones
    int64_t tokens = 0;
    steady::time_point submitted;
  };
  remote_backend_config cfg;
  zmq::context_t ctx{1};
  std::unique_ptr<ex::channel> ch;
  std::atomic<pid_t> child{0};
  std::atomic<bool> healthy{false};
  std::atomic<bool> child_gone{false};  // a spawned child exited and will not be restarted
  steady::time_point disconnected_at{};  // I/O thread: when the connection last closed
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> outstanding{0};
  std::atomic<uint64_t> next_wire_id{1};
  std::atomic<int64_t> restarts{0};
  std::atomic<double> last_restart_seconds{0};
  bool cleaned = false;

  std::mutex mu;                     // guards the strings below
  std::string down_reason = "has not answered a ping yet";
  // I/O thread only.
  steady::time_point next_ping = steady::now();
  steady::time_point started = steady::now();     // the current connection or child
  steady::time_point down_since = steady::now();
  bool waiting_restart = false;   // restarted, no pong yet
  bool restart_pending = false;   // the child died; start it again at restart_at
  steady::time_point restart_at;
  int failed_starts = 0;          // deaths in a row before a first pong

  std::string who() const { return cfg.info.name + " (" + cfg.endpoint + ")"; }
  std::string reason() {
    std::lock_guard lk(mu);
    return down_reason;
  }
  void set_down(const std::string& why) {
    {
      std::lock_guard lk(mu);
      down_reason = why;
    }
    if (healthy.exchange(false)) down_since = steady::now();
    TESSERA_LOG_WARN(who() << ": " << why);
  }

  result<pid_t> spawn() {
    const auto& c = cfg;
    std::vector<std::string> args{c.spawn_binary};
    args.insert(args.end(), c.spawn_args.begin(), c.spawn_args.end());
    args.insert(args.end(), {"--bind", c.endpoint, "--die-with-parent"});
    if (const auto& sec = ex::process_security(); sec.curve) args.insert(args.end(), {"--keys", sec.dir});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // the HTTP port and client sockets stay ours
    pid_t pid = 0;
    int rc = spawn_child(&pid, c.spawn_binary, &fa, argv.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return status::io_error("cannot start " + c.spawn_binary + ": " + std::strerror(rc));
    return pid;
  }

  // I/O thread: a message that answers no pending batch.
  void on_message(ex::envelope&& env) {
    auto type = ex::peek_type(env);
    if (!type) {
      TESSERA_LOG_WARN(who() << ": bad message: " << type.error().message());
      return;
    }
    if (*type == ex::msg_type::heartbeat) {
      if (!child_gone.load() && !healthy.exchange(true)) {
        if (waiting_restart) {
          waiting_restart = false;
          last_restart_seconds = std::chrono::duration<double>(steady::now() - down_since).count();
          TESSERA_LOG_WARN(who() << " is back after a restart (" << static_cast<int>(last_restart_seconds * 1e3) << " ms)");
        } else {
          TESSERA_LOG_INFO(who() << " is up");
        }
      }
      return;
    }
    if (*type != ex::msg_type::infer_result) TESSERA_LOG_WARN(who() << ": unexpected " << ex::msg_type_name(*type));
    // else: a late answer to a batch already failed by deadline or silence
  }

  // I/O thread: liveness of the process, pings, restarts.
  void on_tick(steady::time_point now) {
    const pid_t pid = child.load();
    if (pid > 0 && !child_gone.load()) {
      int ws = 0;
      if (waitpid(pid, &ws, WNOHANG) == pid) {
        const std::string why = "process " + std::to_string(pid) + " " + describe_exit(ws);
        set_down(why);
        ch->fail_peer("", status::peer_failed(who() + " " + why));
        if (cfg.restart && !stopping.load()) {
          // A child that dies before it ever answered a ping is crash-looping: back off, then stop.
          failed_starts = waiting_restart ? failed_starts + 1 : 0;
          if (failed_starts >= 8) {
            child = 0;
            child_gone.store(true);
            set_down(why + "; it died " + std::to_string(failed_starts) +
                     " times in a row before answering a ping: not restarted again");
          } else {
            child = 0;
            restart_at = now + (failed_starts == 0 ? std::chrono::milliseconds(0)
                                                   : std::chrono::milliseconds(100 << (failed_starts - 1)));
            restart_pending = true;
          }
        } else {
          child = 0;
          child_gone.store(true);
        }
      }
    }
    if (restart_pending && now >= restart_at && !stopping.load()) {
      restart_pending = false;
      auto again = spawn();
      if (again) {
        child = *again;
        restarts.fetch_add(1);
        waiting_restart = true;
        started = now;
        TESSERA_LOG_WARN(who() << ": restarted as process " << *again);
      } else {
        child_gone.store(true);
        set_down("restart failed: " + again.error().message());
      }
    }
    auto heard = ch->last_heard("");
    const auto last = heard ? std::max(*heard, started) : started;
    if (disconnected_at > last && now - disconnected_at > cfg.disconnect_grace && (healthy.load() || ch->pending() > 0)) {
      const std::string why =
          "connection closed, nothing heard for " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - disconnected_at).count()) + " ms";
      disconnected_at = {};
      set_down(why);
      ch->fail_peer("", status::peer_failed(who() + " " + why));
    }
    if (now - last > cfg.silence_timeout && (healthy.load() || ch->pending() > 0)) {
      const std::string why =
          "silent for " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last).count()) + " ms";
      set_down(why);
      ch->fail_peer("", status::peer_failed(who() + " " + why));
    }
    if (now >= next_ping) {
      next_ping = now + cfg.ping_interval;
      // A ping that cannot leave shows as the peer's silence, which the check above acts on.
      (void)ch->send_now("", ex::encode(ex::heartbeat{}));
    }
  }

  backends::batch_result read_reply(const job_info& j, result<ex::envelope> r) {
    backends::batch_result out;
    out.batch_id = j.batch_id;
    out.timing.wall_seconds = std::chrono::duration<double>(steady::now() - j.submitted).count();
    if (!r) {
      out.st = r.error();
      if (out.st.code() == errc::timeout)
        out.st = status::timeout(who() + ": no answer within " + std::to_string(cfg.batch_timeout.count()) + " ms");
      return out;
    }
    ex::infer_result m;
    if (auto st = ex::decode(*r, m); !st.ok()) {
      out.st = st.with_context(who() + ": bad infer_result");
      return out;
    }
    out.timing.modelled_seconds = m.modelled_seconds;
    if (m.code != errc::ok) {
      out.st = status{m.code, who() + ": " + m.message};
      return out;
    }
    const auto& frame = r->payloads[0];
    const size_t want = j.sequences * static_cast<size_t>(std::max(0, m.num_labels));
    if (m.num_labels <= 0 || frame.size() != want * 4) {
      out.st = status::bad_message(who() + ": logits frame of " + std::to_string(frame.size()) + " bytes for " +
                                   std::to_string(j.sequences) + " rows");
      return out;
    }
    if (cfg.info.num_labels > 0 && m.num_labels != cfg.info.num_labels) {
      out.st = status::invalid(who() + " answers " + std::to_string(m.num_labels) + " values a sequence and this "
                               "host's model " + std::to_string(cfg.info.num_labels) + ": is it serving another model?");
      return out;
    }
    out.num_labels = m.num_labels;
    out.logits.resize(want);
    // A ping (no sequences) answers an empty frame: memcpy from a null pointer is undefined even
    // for 0 bytes (UBSan halted a host on it).
    if (want > 0) std::memcpy(out.logits.data(), frame.data(), frame.size());
    return out;
  }
};

remote_backend::remote_backend(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::shared_ptr<remote_backend>> remote_backend::start(remote_backend_config cfg) {
  if (cfg.endpoint.empty()) return status::invalid("remote backend: no endpoint given");
  if (cfg.info.kind.empty()) cfg.info.kind = "gpu";
  if (cfg.info.name.empty()) cfg.info.name = "gpu";
  if (const auto& sec = ex::process_security(); sec.curve && sec.gpu_public.empty())
    return status::invalid("remote backend " + cfg.endpoint + ": the key directory " + sec.dir +
                           " has no gpu.pub (the GPU process's public key); add the GPU pair with "
                           "tessera-tile --make-keys " + sec.dir + " and give tessera-gpu gpu.pub, gpu.key and host.pub");
  if (const auto& sec = ex::process_security();
      sec.curve && !cfg.spawn_binary.empty() && !std::filesystem::exists(std::filesystem::path(sec.dir) / "gpu.key"))
    return status::invalid("cannot spawn " + cfg.spawn_binary + " with --keys " + sec.dir +
                           ": the directory has no gpu.key (the GPU process's secret key)");
  auto p = std::make_unique<impl>();
  p->cfg = std::move(cfg);
  const auto& c = p->cfg;
  if (!c.spawn_binary.empty()) {
    if (access(c.spawn_binary.c_str(), X_OK) != 0)
      return status::not_found("backend executable " + c.spawn_binary +
                               " is missing or not executable; build it or set TESSERA_BIN_DIR");
    auto pid = p->spawn();
    if (!pid) return pid.error();
    p->child = *pid;
  }
  impl* raw = p.get();
  ex::channel::options o;
  o.name = c.info.name;
  o.type = zmq::socket_type::dealer;
  o.connect = c.endpoint;
  o.tick = std::chrono::milliseconds(10);
  o.configure = [](zmq::socket_t& s) {
    s.set(zmq::sockopt::reconnect_ivl, 100);
    s.set(zmq::sockopt::reconnect_ivl_max, 1000);
    ex::secure_gpu_client(s);  // CurveZMQ, server key gpu.pub, when keys are loaded
  };
  ex::channel::handlers h;
  h.reply_id = [](const ex::envelope& e) { return ex::peek_request_id(e); };
  h.on_message = [raw](const std::string&, ex::envelope&& e) { raw->on_message(std::move(e)); };
  h.on_tick = [raw](steady::time_point now) { raw->on_tick(now); };
  h.on_disconnect = [raw](const std::string&) { raw->disconnected_at = steady::now(); };
  p->started = steady::now();
  auto ch = ex::channel::open(p->ctx, std::move(o), std::move(h));
  if (!ch) {
    if (p->child > 0) kill(p->child, SIGKILL), waitpid(p->child, nullptr, 0);
    return status::invalid("cannot connect to " + c.endpoint + ": " + ch.error().message());
  }
  p->ch = std::move(*ch);
  p->ch->start();
  return std::shared_ptr<remote_backend>(new remote_backend(std::move(p)));
}

remote_backend::~remote_backend() { stop(); }

void remote_backend::stop() {
  impl& s = *impl_;
  s.stopping.store(true);
  if (s.ch) s.ch->stop();  // pending batches end `cancelled`
  const pid_t pid = s.child.load();
  if (pid > 0 && !s.child_gone.load()) {
    kill(pid, SIGTERM);
    int ws = 0;
    auto until = steady::now() + std::chrono::seconds(2);
    while (waitpid(pid, &ws, WNOHANG) == 0) {
      if (steady::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, &ws, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    s.child_gone.store(true);
  }
  if (!s.cfg.spawn_binary.empty() && !s.cleaned) {
    s.cleaned = true;
    // A private ipc directory made by make_local_ipc_endpoint.
    if (s.cfg.endpoint.rfind("ipc://", 0) == 0) {
      std::filesystem::path sock = s.cfg.endpoint.substr(6);
      std::error_code ec;
      std::filesystem::remove(sock, ec);
      if (sock.parent_path().filename().string().rfind("tessera-gpu-", 0) == 0)
        std::filesystem::remove(sock.parent_path(), ec);
    }
  }
  s.healthy.store(false);
}

backends::backend_info remote_backend::info() const { return impl_->cfg.info; }
int64_t remote_backend::outstanding_tokens() const { return impl_->outstanding.load(); }
bool remote_backend::healthy() const { return impl_->healthy.load(); }
pid_t remote_backend::child_pid() const { return impl_->child.load(); }
int64_t remote_backend::restarts() const { return impl_->restarts.load(); }
double remote_backend::last_restart_seconds() const { return impl_->last_restart_seconds.load(); }

std::vector<backends::replica_status> remote_backend::replicas() const {
  const impl& s = *impl_;
  backends::replica_status r;
  const bool up = s.healthy.load();
  r.state = up ? "up" : (s.cfg.restart && !s.child_gone.load()) ? "recovering" : "down";
  if (!up) r.detail = const_cast<impl&>(s).reason();
  r.pids.push_back(s.child_gone.load() ? 0 : s.child.load());
  r.recoveries = s.restarts.load();
  r.last_recovery_seconds = s.last_restart_seconds.load();
  return {r};
}

void remote_backend::submit(backends::batch_request request, std::function<void(backends::batch_result)> done) {
  impl& s = *impl_;
  size_t rows = 0;
  for (const auto& q : request.sequences) rows += q.every_token ? q.token_ids.size() : 1;
  impl::job_info j{request.batch_id, rows, tokens_of(request), steady::now()};
  auto fail_now = [&](status st) {
    backends::batch_result r;
    r.batch_id = j.batch_id;
    r.st = std::move(st);
    done(std::move(r));
  };
  if (s.stopping.load()) return fail_now(status{errc::cancelled, s.who() + " stopped"});
  if (!s.healthy.load()) return fail_now(status::peer_failed(s.who() + " " + s.reason()));
  ex::infer_batch m;
  m.batch_id = s.next_wire_id.fetch_add(1);
  m.layout = static_cast<uint8_t>(request.layout);
  m.padded_length = request.padded_length;
  m.compute = wire_compute(s.cfg.compute);
  size_t tokens = 0;
  for (const auto& q : request.sequences) {
    if (q.every_token) m.every_token.push_back(static_cast<uint32_t>(m.seq_lengths.size()));
    m.seq_lengths.push_back(static_cast<int32_t>(q.token_ids.size()));
    tokens += q.token_ids.size();
  }
  zmq::message_t ids(tokens * 4), types(tokens * 4);
  auto* pi = ids.data<char>();
  auto* pt = types.data<char>();
  std::memset(pt, 0, tokens * 4);
  size_t off = 0;
  for (const auto& q : request.sequences) {
    std::memcpy(pi + off * 4, q.token_ids.data(), q.token_ids.size() * 4);
    if (q.token_type_ids.size() == q.token_ids.size())
      std::memcpy(pt + off * 4, q.token_type_ids.data(), q.token_ids.size() * 4);
    off += q.token_ids.size();
  }
  s.outstanding.fetch_add(j.tokens);
  impl* raw = &s;
  s.ch->request("", m.batch_id, ex::encode(m, std::move(ids), std::move(types)), steady::now() + s.cfg.batch_timeout,
                [raw, j, done = std::move(done)](result<ex::envelope> r) {
                  raw->outstanding.fetch_sub(j.tokens);
                  done(raw->read_reply(j, std::move(r)));
                });
}

bool remote_backend::wait_ready(std::chrono::milliseconds timeout) {
  auto until = steady::now() + timeout;
  while (steady::now() < until) {
    if (impl_->healthy.load()) return true;
    if (impl_->child_gone.load()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return impl_->healthy.load();
}

status remote_backend::check_compute(std::chrono::milliseconds timeout) {
  auto answer = std::make_shared<std::promise<status>>();
  auto got = answer->get_future();
  submit({}, [answer](backends::batch_result r) { answer->set_value(std::move(r.st)); });
  if (got.wait_for(timeout) != std::future_status::ready)
    return status::timeout(impl_->who() + " did not answer a ping within " + std::to_string(timeout.count()) + " ms");
  return got.get();
}

result<std::string> make_local_ipc_endpoint(const std::string& name) {
  char tmpl[] = "/tmp/tessera-gpu-XXXXXX";
  if (!mkdtemp(tmpl)) return status::io_error(std::string("mkdtemp: ") + std::strerror(errno));
  return "ipc://" + std::string(tmpl) + "/" + name + ".sock";
}

}  // namespace tessera::host
