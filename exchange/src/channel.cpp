// exchange::channel: one socket, one I/O thread, a mailbox. See channel.hpp.
#include "tessera/exchange/channel.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "tessera/common/log.hpp"
#include "tessera/exchange/zmq_transport.hpp"

namespace tessera::exchange {

struct channel::impl {
  options opts;
  handlers h;
  zmq::socket_t socket;
  zmq::socket_t monitor;  // PAIR reading the socket monitor's events (ROUTER with on_disconnect)
  std::string endpoint;
  int wake_fd = -1;
  std::thread io;
  std::thread::id io_id;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> wakeups{0};

  std::mutex mu;
  std::deque<std::function<void()>> mailbox;  // under mu
  bool closed = false;                        // under mu: the I/O thread has drained for good

  // I/O thread only.
  struct pending_request {
    completion done;
    clock::time_point deadline;
  };
  std::map<std::pair<peer, uint64_t>, pending_request> pending;
  std::map<peer, clock::time_point> heard;
  std::map<peer, status> retired;
  std::map<int, peer> fd_peer;  // connection (file descriptor) -> routing id last heard on it
  clock::time_point next_tick = clock::now();

  impl(zmq::context_t& ctx, options o, handlers hs)
      : opts(std::move(o)), h(std::move(hs)), socket(ctx, opts.type), monitor(ctx, zmq::socket_type::pair) {}

  bool is_router() const { return opts.type == zmq::socket_type::router; }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // Returns false when the channel no longer runs posted work (the caller handles it).
  bool enqueue(std::function<void()> fn) {
    {
      std::lock_guard lk(mu);
      if (closed) return false;
      mailbox.push_back(std::move(fn));
    }
    wake();
    return true;
  }

  void complete(std::map<std::pair<peer, uint64_t>, pending_request>::iterator it, result<envelope> r) {
    completion done = std::move(it->second.done);
    pending.erase(it);
    if (done) done(std::move(r));
  }

  status send_now(const peer& to, envelope&& e) {
    try {
      if (is_router()) {
        zmq::message_t id(to.data(), to.size());
        if (!socket.send(id, zmq::send_flags::sndmore | zmq::send_flags::dontwait))
          return status{errc::overloaded, opts.name + ": send queue to " + to + " is full"};
        send_envelope(socket, std::move(e));
        return ok_status();
      }
      if (!send_envelope(socket, std::move(e), zmq::send_flags::dontwait))
        return status{errc::overloaded, opts.name + ": send queue is full"};
      return ok_status();
    } catch (const zmq::error_t& ex) {
      if (ex.num() == EHOSTUNREACH)
        return status::peer_failed(opts.name + ": " + (to.empty() ? std::string("peer") : to) + " is not connected");
      return status::io_error(opts.name + ": send failed: " + ex.what());
    }
  }

  void run_mailbox() {
    uint64_t v = 0;
    [[maybe_unused]] auto n = ::read(wake_fd, &v, sizeof v);
    std::deque<std::function<void()>> take;
    {
      std::lock_guard lk(mu);
      take.swap(mailbox);
    }
    for (auto& fn : take) fn();
  }

  void read_socket() {
    for (int i = 0; i < 1024; ++i) {  // bounded: the mailbox and deadlines are never starved
      envelope env;
      std::vector<zmq::message_t> prefix;
      result<bool> got = false;
      try {
        got = recv_envelope(socket, env, &prefix, is_router() ? 1 : 0, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& ex) {
        if (ex.num() != EAGAIN && ex.num() != EINTR) TESSERA_LOG_WARN(opts.name << ": receive failed: " << ex.what());
        return;
      }
      if (!got) {
        TESSERA_LOG_WARN(opts.name << ": dropped a malformed message: " << got.error().message());
        continue;
      }
      if (!*got) return;
      peer from = is_router() && !prefix.empty() ? prefix[0].to_string() : peer();
      heard[from] = clock::now();
      if (h.on_disconnect && !prefix.empty()) {
        // ZMQ_SRCFD names the connection a message came on (deprecated in libzmq, still kept):
        // the monitor's DISCONNECTED event names only that descriptor. The data frame carries
        // it; the routing-id frame of a message the poll prefetched does not.
        int fd = zmq_msg_get(env.header.handle(), ZMQ_SRCFD);
        if (fd < 0) fd = zmq_msg_get(prefix[0].handle(), ZMQ_SRCFD);
        if (fd >= 0) fd_peer[fd] = from;
      }
      if (h.reply_id) {
        if (auto id = h.reply_id(env)) {
          auto it = pending.find({from, *id});
          if (it != pending.end()) {
            complete(it, std::move(env));
            continue;
          }
        }
      }
      if (h.on_message) h.on_message(from, std::move(env));
    }
  }

  void read_monitor() {
    for (int i = 0; i < 64; ++i) {
      zmq::message_t ev, addr;
      try {
        if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return;
        if (ev.more()) (void)monitor.recv(addr, zmq::recv_flags::dontwait);
      } catch (const zmq::error_t&) {
        return;
      }
      if (ev.size() < 6) continue;
      uint16_t event = 0;
      uint32_t fd = 0;
      std::memcpy(&event, ev.data(), 2);
      std::memcpy(&fd, static_cast<const char*>(ev.data()) + 2, 4);
      if (event != ZMQ_EVENT_DISCONNECTED) continue;
      if (!is_router()) {  // a DEALER's one connection, to its one peer ("")
        TESSERA_LOG_DEBUG(opts.name << ": connection to " << opts.connect << " closed");
        if (h.on_disconnect) h.on_disconnect(peer());
        continue;
      }
      auto it = fd_peer.find(static_cast<int>(fd));
      if (it == fd_peer.end()) continue;  // a connection that never sent a message
      peer p = std::move(it->second);
      fd_peer.erase(it);
      TESSERA_LOG_DEBUG(opts.name << ": connection of " << p << " closed");
      if (h.on_disconnect) h.on_disconnect(p);
    }
  }

  void expire(clock::time_point now) {
    for (auto it = pending.begin(); it != pending.end();) {
      auto next = std::next(it);
      if (it->second.deadline <= now) {
        const std::string who = it->first.first.empty() ? opts.name : it->first.first;
        complete(it, status::timeout(who + " did not answer request " + std::to_string(it->first.second) +
                                     " before its deadline"));
      }
      it = next;
    }
  }

  void fail_peer(const peer& p, const status& why) {
    for (auto it = pending.lower_bound({p, 0}); it != pending.end() && it->first.first == p;) {
      auto next = std::next(it);
      complete(it, why);
      it = next;
    }
  }

  void loop() {
    io_id = std::this_thread::get_id();
    while (!stopping.load()) {
      wakeups.fetch_add(1, std::memory_order_relaxed);
      zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, wake_fd, ZMQ_POLLIN, 0},
                                 {monitor.handle(), 0, ZMQ_POLLIN, 0}};
      const int nitems = monitor.handle() ? 3 : 2;
      auto now = clock::now();
      // Rounded up: truncated, the last part of a millisecond before each tick polled with a
      // zero timeout over and over (1,300 polls a second; 8% of a core for an idle host).
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_tick - now);
      if (wait.count() < 0) wait = std::chrono::milliseconds(0);
      try {
        zmq::poll(items, nitems, wait);
      } catch (const zmq::error_t& ex) {
        if (ex.num() != EINTR) TESSERA_LOG_ERROR(opts.name << ": poll failed: " << ex.what());
        continue;
      }
      if (items[1].revents & ZMQ_POLLIN) run_mailbox();
      if (items[0].revents & ZMQ_POLLIN) read_socket();
      if (nitems == 3 && (items[2].revents & ZMQ_POLLIN)) read_monitor();
      now = clock::now();
      if (now >= next_tick) {
        next_tick = now + opts.tick;
        expire(now);
        if (h.on_tick) h.on_tick(now);
      }
    }
    // Stopping: work already posted still runs (its requests are then cancelled below).
    for (;;) {
      std::deque<std::function<void()>> take;
      {
        std::lock_guard lk(mu);
        if (mailbox.empty()) {
          closed = true;
          break;
        }
        take.swap(mailbox);
      }
      for (auto& fn : take) fn();
    }
    while (!pending.empty())
      complete(pending.begin(), status{errc::cancelled, opts.name + " stopped"});
  }
};

channel::channel(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<channel>> channel::open(zmq::context_t& ctx, options opts, handlers h) {
  if (opts.bind.empty() == opts.connect.empty())
    return status::invalid(opts.name + ": a channel needs exactly one of bind and connect");
  auto p = std::make_unique<impl>(ctx, std::move(opts), std::move(h));
  auto& o = p->opts;
  try {
    apply_socket_defaults(p->socket);
    if (p->is_router()) {
      p->socket.set(zmq::sockopt::router_mandatory, 1);
      p->socket.set(zmq::sockopt::sndhwm, 0);
    }
    if (o.configure) o.configure(p->socket);
    if (!o.bind.empty()) {
      p->socket.bind(o.bind);
      p->endpoint = p->socket.get(zmq::sockopt::last_endpoint);
    } else {
      p->socket.connect(o.connect);
      p->endpoint = o.connect;
    }
    if (p->h.on_disconnect) {
      static std::atomic<uint64_t> monitors{0};
      const std::string at = "inproc://tessera-channel-monitor-" + std::to_string(getpid()) + "-" +
                             std::to_string(monitors.fetch_add(1));
      if (zmq_socket_monitor(p->socket.handle(), at.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
        return status::io_error(o.name + ": cannot monitor its socket: " + zmq_strerror(zmq_errno()));
      p->monitor.connect(at);
    } else {
      p->monitor.close();
    }
  } catch (const zmq::error_t& ex) {
    return status::io_error(o.name + ": cannot " + (o.bind.empty() ? "connect to " + o.connect : "bind " + o.bind) +
                            ": " + ex.what());
  }
  p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd < 0) return status::io_error(o.name + ": eventfd: " + std::strerror(errno));
  return std::unique_ptr<channel>(new channel(std::move(p)));
}

void channel::start() {
  impl* raw = impl_.get();
  if (raw->io.joinable() || raw->wake_fd < 0) return;
  raw->io = std::thread([raw] { raw->loop(); });
}

channel::~channel() { stop(); }

const std::string& channel::endpoint() const { return impl_->endpoint; }
const std::string& channel::name() const { return impl_->opts.name; }
bool channel::on_io_thread() const { return std::this_thread::get_id() == impl_->io_id; }
uint64_t channel::wakeups() const { return impl_->wakeups.load(std::memory_order_relaxed); }

void channel::send(peer to, envelope e) {
  auto box = std::make_shared<envelope>(std::move(e));
  impl* s = impl_.get();
  s->enqueue([s, to = std::move(to), box] {
    if (auto st = s->send_now(to, std::move(*box)); !st.ok()) TESSERA_LOG_DEBUG(s->opts.name << ": " << st.message());
  });
}

void channel::request(peer to, uint64_t id, envelope e, clock::time_point deadline, completion done) {
  auto box = std::make_shared<envelope>(std::move(e));
  auto cb = std::make_shared<completion>(std::move(done));
  impl* s = impl_.get();
  auto run = [s, to, id, box, deadline, cb] {
    auto key = std::make_pair(to, id);
    if (s->pending.count(key)) {
      (*cb)(status::internal(s->opts.name + ": request " + std::to_string(id) + " to " + to + " is already pending"));
      return;
    }
    if (s->stopping.load()) {
      (*cb)(status{errc::cancelled, s->opts.name + " stopped"});
      return;
    }
    if (auto gone = s->retired.find(to); gone != s->retired.end()) {
      (*cb)(gone->second);
      return;
    }
    if (auto st = s->send_now(to, std::move(*box)); !st.ok()) {
      (*cb)(st);
      return;
    }
    s->pending.emplace(key, impl::pending_request{std::move(*cb), deadline});
  };
  if (on_io_thread()) return run();
  if (!s->enqueue(run)) (*cb)(status{errc::cancelled, s->opts.name + " stopped"});
}

void channel::fail_peer(peer p, status why) {
  impl* s = impl_.get();
  if (on_io_thread()) return s->fail_peer(p, why);
  s->enqueue([s, p = std::move(p), why = std::move(why)] { s->fail_peer(p, why); });
}

void channel::retire_peer(peer p, status why) {
  impl* s = impl_.get();
  auto run = [s, p, why] {
    s->retired[p] = why;
    s->heard.erase(p);
    s->fail_peer(p, why);
  };
  if (on_io_thread()) return run();
  s->enqueue(run);
}

bool channel::post(std::function<void()> fn) {
  if (impl_->enqueue(fn)) return true;
  TESSERA_LOG_DEBUG(impl_->opts.name << ": work posted after stop was dropped");
  return false;
}

void channel::stop(std::chrono::milliseconds linger) {
  impl& s = *impl_;
  if (!s.io.joinable() && s.wake_fd >= 0) {
    // Never started: run what was posted (its requests end `cancelled`) on this thread.
    s.stopping.store(true);
    s.loop();
  }
  if (s.io.joinable()) {
    s.stopping.store(true);
    s.wake();
    s.io.join();
  }
  if (s.wake_fd >= 0) {
    try {
      if (s.monitor.handle()) {
        zmq_socket_monitor(s.socket.handle(), nullptr, 0);
        s.monitor.set(zmq::sockopt::linger, 0);
        s.monitor.close();
      }
      s.socket.set(zmq::sockopt::linger, static_cast<int>(linger.count()));
      s.socket.close();
    } catch (const zmq::error_t&) {
    }
    ::close(s.wake_fd);
    s.wake_fd = -1;
  }
}

status channel::send_now(const peer& to, envelope&& e) { return impl_->send_now(to, std::move(e)); }

void channel::set_deadline(const peer& p, uint64_t id, clock::time_point deadline) {
  auto it = impl_->pending.find({p, id});
  if (it != impl_->pending.end()) it->second.deadline = deadline;
}

std::optional<channel::clock::time_point> channel::last_heard(const peer& p) const {
  auto it = impl_->heard.find(p);
  if (it == impl_->heard.end()) return std::nullopt;
  return it->second;
}

size_t channel::pending(const std::optional<peer>& p) const {
  if (!p) return impl_->pending.size();
  size_t n = 0;
  for (auto it = impl_->pending.lower_bound({*p, 0}); it != impl_->pending.end() && it->first.first == *p; ++it) ++n;
  return n;
}

}  // namespace tessera::exchange
