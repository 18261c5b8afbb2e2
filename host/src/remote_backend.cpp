// host::remote_backend: a backend process behind a DEALER socket. See remote_backend.hpp.
#include "tessera/host/remote_backend.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "tessera/common/log.hpp"
#include "tessera/exchange/codec.hpp"
#include "tessera/exchange/zmq_transport.hpp"

extern char** environ;

namespace tessera::host {

namespace ex = exchange;
using steady = std::chrono::steady_clock;

namespace {

int64_t tokens_of(const batch_request& r) {
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
  remote_backend_config cfg;
  zmq::context_t ctx{1};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  int wake_fd = -1;
  pid_t child = 0;
  bool child_reaped = false;  // io thread only, read after join
  bool cleaned = false;

  struct job {
    batch_request request;
    std::function<void(batch_result)> done;
    int64_t tokens = 0;
    steady::time_point submitted;
  };
  std::mutex mu;
  std::deque<job> outbox;
  bool stopped = false;  // under mu: no more submits reach the io thread

  std::atomic<bool> stopping{false};
  std::atomic<bool> healthy{false};
  std::atomic<bool> child_gone{false};
  std::atomic<int64_t> outstanding{0};
  std::thread io;

  // io thread only
  struct pending_batch {
    job j;
    size_t sequences = 0;
    steady::time_point deadline;
  };
  std::unordered_map<uint64_t, pending_batch> pending;
  uint64_t next_wire_id = 1;
  steady::time_point last_heard = steady::now();
  steady::time_point next_ping = steady::now();
  std::string down_reason = "has not answered a ping yet";

  void finish(job& j, batch_result r) {
    r.batch_id = j.request.batch_id;
    outstanding.fetch_sub(j.tokens);
    auto done = std::move(j.done);
    j.done = nullptr;
    if (done) done(std::move(r));
  }
  void fail(job& j, status st) {
    batch_result r;
    r.st = std::move(st);
    r.timing.wall_seconds = std::chrono::duration<double>(steady::now() - j.submitted).count();
    finish(j, std::move(r));
  }
  std::string who() const { return cfg.info.name + " (" + cfg.endpoint + ")"; }

  void fail_all_pending(const status& st) {
    auto all = std::move(pending);
    pending.clear();
    for (auto& [id, p] : all) fail(p.j, st);
  }

  void send_batches() {
    uint64_t v = 0;
    [[maybe_unused]] auto n = read(wake_fd, &v, sizeof v);
    std::deque<job> take;
    {
      std::lock_guard lock(mu);
      take.swap(outbox);
    }
    for (auto& j : take) {
      if (!healthy.load()) {
        fail(j, status::peer_failed(who() + " " + down_reason));
        continue;
      }
      ex::infer_batch m;
      m.batch_id = next_wire_id++;
      m.layout = static_cast<uint8_t>(j.request.layout);
      m.padded_length = j.request.padded_length;
      size_t tokens = 0;
      for (const auto& s : j.request.sequences) {
        m.seq_lengths.push_back(static_cast<int32_t>(s.token_ids.size()));
        tokens += s.token_ids.size();
      }
      zmq::message_t ids(tokens * 4), types(tokens * 4);
      auto* pi = ids.data<char>();
      auto* pt = types.data<char>();
      std::memset(pt, 0, tokens * 4);
      size_t off = 0;
      for (const auto& s : j.request.sequences) {
        std::memcpy(pi + off * 4, s.token_ids.data(), s.token_ids.size() * 4);
        if (s.token_type_ids.size() == s.token_ids.size())
          std::memcpy(pt + off * 4, s.token_type_ids.data(), s.token_ids.size() * 4);
        off += s.token_ids.size();
      }
      bool sent = false;
      try {
        sent = ex::send_envelope(dealer, ex::encode(m, std::move(ids), std::move(types)), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& err) {
        fail(j, status::io_error(who() + ": send failed: " + err.what()));
        continue;
      }
      if (!sent) {
        fail(j, status{errc::overloaded, who() + ": send queue is full"});
        continue;
      }
      pending_batch p{std::move(j), m.seq_lengths.size(), steady::now() + cfg.batch_timeout};
      pending.emplace(m.batch_id, std::move(p));
    }
  }

  void on_message(ex::envelope& env) {
    last_heard = steady::now();
    auto type = ex::peek_type(env);
    if (!type) {
      TESSERA_LOG_WARN(who() << ": bad message: " << type.error().message());
      return;
    }
    if (*type == ex::msg_type::heartbeat) {
      if (!child_gone.load() && !healthy.exchange(true)) TESSERA_LOG_INFO(who() << " is up");
      return;
    }
    if (*type != ex::msg_type::infer_result) {
      TESSERA_LOG_WARN(who() << ": unexpected " << ex::msg_type_name(*type));
      return;
    }
    ex::infer_result m;
    status st = ex::decode(env, m);
    if (!st) {
      TESSERA_LOG_WARN(who() << ": bad infer_result: " << st.message());
      return;  // its batch, if any, ends by deadline
    }
    auto it = pending.find(m.batch_id);
    if (it == pending.end()) return;  // answered already (deadline, silence)
    pending_batch p = std::move(it->second);
    pending.erase(it);
    batch_result r;
    r.timing.wall_seconds = std::chrono::duration<double>(steady::now() - p.j.submitted).count();
    r.timing.modelled_seconds = m.modelled_seconds;
    if (m.code != errc::ok) {
      r.st = status{m.code, who() + ": " + m.message};
    } else {
      const auto& frame = env.payloads[0];
      const size_t want = p.sequences * static_cast<size_t>(std::max(0, m.num_labels));
      if (m.num_labels <= 0 || frame.size() != want * 4) {
        r.st = status::bad_message(who() + ": logits frame of " + std::to_string(frame.size()) + " bytes for " +
                                   std::to_string(p.sequences) + " sequences");
      } else {
        r.num_labels = m.num_labels;
        r.logits.resize(want);
        std::memcpy(r.logits.data(), frame.data(), frame.size());
      }
    }
    finish(p.j, std::move(r));
  }

  void check_liveness(steady::time_point now) {
    if (child > 0 && !child_reaped) {
      int ws = 0;
      if (waitpid(child, &ws, WNOHANG) == child) {
        child_reaped = true;
        child_gone.store(true);
        healthy.store(false);
        down_reason = "process " + std::to_string(child) + " " + describe_exit(ws);
        TESSERA_LOG_WARN(who() << ": " << down_reason);
        fail_all_pending(status::peer_failed(who() + " " + down_reason));
      }
    }
    if (now - last_heard > cfg.silence_timeout && (healthy.load() || !pending.empty())) {
      healthy.store(false);
      down_reason = "silent for " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard).count()) +
                    " ms";
      TESSERA_LOG_WARN(who() << ": " << down_reason);
      fail_all_pending(status::peer_failed(who() + " " + down_reason));
    }
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->second.deadline <= now) {
        pending_batch p = std::move(it->second);
        it = pending.erase(it);
        fail(p.j, status::timeout(who() + ": no answer within " + std::to_string(cfg.batch_timeout.count()) + " ms"));
      } else {
        ++it;
      }
    }
    if (now >= next_ping) {
      next_ping = now + cfg.ping_interval;
      try {
        (void)ex::send_envelope(dealer, ex::encode(ex::heartbeat{}), zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
      }
    }
  }

  void loop() {
    while (!stopping.load()) {
      zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds(20));
      } catch (const zmq::error_t& err) {
        if (err.num() != EINTR) TESSERA_LOG_ERROR(who() << ": poll failed: " << err.what());
        continue;
      }
      if (items[0].revents & ZMQ_POLLIN) {
        for (int i = 0; i < 1024; ++i) {
          ex::envelope env;
          result<bool> got = false;
          try {
            got = ex::recv_envelope(dealer, env, nullptr, 0, zmq::recv_flags::dontwait);
          } catch (const zmq::error_t&) {
            break;
          }
          if (!got) {
            last_heard = steady::now();
            continue;
          }
          if (!*got) break;
          on_message(env);
        }
      }
      if (items[1].revents & ZMQ_POLLIN) send_batches();
      check_liveness(steady::now());
    }
    // Shutting down: nothing more will be answered.
    fail_all_pending(status{errc::cancelled, who() + " stopped"});
    std::deque<job> rest;
    {
      std::lock_guard lock(mu);
      stopped = true;
      rest.swap(outbox);
    }
    for (auto& j : rest) fail(j, status{errc::cancelled, who() + " stopped"});
  }
};

remote_backend::remote_backend(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::shared_ptr<remote_backend>> remote_backend::start(remote_backend_config cfg) {
  if (cfg.endpoint.empty()) return status::invalid("remote backend: no endpoint given");
  if (cfg.info.kind.empty()) cfg.info.kind = "gpu";
  if (cfg.info.name.empty()) cfg.info.name = "gpu";
  auto p = std::make_unique<impl>();
  p->cfg = std::move(cfg);
  const auto& c = p->cfg;
  if (!c.spawn_binary.empty()) {
    if (access(c.spawn_binary.c_str(), X_OK) != 0)
      return status::not_found("backend executable " + c.spawn_binary +
                               " is missing or not executable; build it or set TESSERA_BIN_DIR");
    std::vector<std::string> args{c.spawn_binary};
    args.insert(args.end(), c.spawn_args.begin(), c.spawn_args.end());
    args.insert(args.end(), {"--bind", c.endpoint, "--die-with-parent"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&p->child, c.spawn_binary.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return status::io_error("cannot start " + c.spawn_binary + ": " + std::strerror(rc));
  }
  try {
    ex::apply_socket_defaults(p->dealer);
    p->dealer.set(zmq::sockopt::reconnect_ivl, 100);
    p->dealer.set(zmq::sockopt::reconnect_ivl_max, 1000);
    p->dealer.connect(c.endpoint);
  } catch (const zmq::error_t& err) {
    if (p->child > 0) kill(p->child, SIGKILL), waitpid(p->child, nullptr, 0);
    return status::invalid("cannot connect to " + c.endpoint + ": " + err.what());
  }
  p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) {
    const int err = errno;
    if (p->child > 0) kill(p->child, SIGKILL), waitpid(p->child, nullptr, 0);
    return status::io_error(std::string("eventfd: ") + std::strerror(err));
  }
  p->last_heard = steady::now();
  auto self = std::shared_ptr<remote_backend>(new remote_backend(std::move(p)));
  impl* raw = self->impl_.get();
  raw->io = std::thread([raw] { raw->loop(); });
  return self;
}

remote_backend::~remote_backend() { stop(); }

void remote_backend::stop() {
  impl& s = *impl_;
  if (s.io.joinable()) {
    s.stopping.store(true);
    s.io.join();
  }
  if (s.child > 0 && !s.child_reaped) {
    kill(s.child, SIGTERM);
    int ws = 0;
    auto until = steady::now() + std::chrono::seconds(2);
    while (waitpid(s.child, &ws, WNOHANG) == 0) {
      if (steady::now() > until) {
        kill(s.child, SIGKILL);
        waitpid(s.child, &ws, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    s.child_reaped = true;
    s.child_gone.store(true);
  }
  if (s.child > 0 && !s.cleaned) {
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
  if (s.wake_fd >= 0) {
    close(s.wake_fd);
    s.wake_fd = -1;
  }
}

backend_info remote_backend::info() const { return impl_->cfg.info; }
int64_t remote_backend::outstanding_tokens() const { return impl_->outstanding.load(); }
bool remote_backend::healthy() const { return impl_->healthy.load(); }
pid_t remote_backend::child_pid() const { return impl_->child; }

void remote_backend::submit(batch_request request, std::function<void(batch_result)> done) {
  impl& s = *impl_;
  impl::job j{std::move(request), std::move(done), 0, steady::now()};
  j.tokens = tokens_of(j.request);
  s.outstanding.fetch_add(j.tokens);
  {
    std::lock_guard lock(s.mu);
    if (!s.stopped) {
      s.outbox.push_back(std::move(j));
      uint64_t one = 1;
      [[maybe_unused]] auto n = write(s.wake_fd, &one, sizeof one);
      return;
    }
  }
  s.fail(j, status{errc::cancelled, s.who() + " stopped"});
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

result<std::string> make_local_ipc_endpoint(const std::string& name) {
  char tmpl[] = "/tmp/tessera-gpu-XXXXXX";
  if (!mkdtemp(tmpl)) return status::io_error(std::string("mkdtemp: ") + std::strerror(errno));
  return "ipc://" + std::string(tmpl) + "/" + name + ".sock";
}

}  // namespace tessera::host
