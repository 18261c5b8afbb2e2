// tessera/exchange/channel.hpp: one ZeroMQ control socket, owned by one I/O thread.
//
// Every control connection in tessera has the same shape: the host's ROUTER to its tiles, the
// host's DEALER to a GPU-baseline process, the GPU process's ROUTER to its hosts. A channel is
// that shape written once, after libzmq's own io_thread/mailbox design: one thread owns the
// socket and its poller (ZeroMQ sockets are not thread-safe); other threads post to a mailbox
// (an eventfd and a queue) and never touch the socket.
//
// Requests carry an id. The reply with that id from that peer completes the request, on the I/O
// thread, exactly once: with the reply; with `timeout` at its deadline; with the status given to
// fail_peer() when the owner declares the peer failed; with `peer_failed` when the socket cannot
// reach the peer; with `cancelled` when the channel stops. A message that completes no request
// goes to `on_message` (registrations, heartbeats, late replies of a failed incarnation).
// Liveness policy (heartbeat silence, a child's exit) belongs to the owner, in `on_tick`, which
// runs every `tick` and may call fail_peer(); last_heard() tells when a peer last sent anything;
// `on_disconnect` tells when a peer's connection closed (the socket monitor).
//
//   channel::options o{.name = "tiles", .type = zmq::socket_type::router, .bind = "tcp://127.0.0.1:0"};
//   channel::handlers h{.reply_id = [](const envelope& e) { return peek_reply_id(e); },
//                       .on_message = [&](const std::string& peer, envelope&& e) { ... },
//                       .on_tick = [&](channel::clock::time_point now) { ... }};
//   auto ch = channel::open(ctx, o, std::move(h));          // result<std::unique_ptr<channel>>
//   (*ch)->start();
//   (*ch)->request("tile-3-0", 17, encode(m), deadline, [](result<envelope> r) { ... });
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "tessera/common/status.hpp"
#include "tessera/exchange/codec.hpp"

namespace tessera::exchange {

class channel {
 public:
  using clock = std::chrono::steady_clock;
  /// A ROUTER's peer is its routing id; a DEALER has one peer, "".
  using peer = std::string;
  using completion = std::function<void(result<envelope>)>;

  struct handlers {
    /// The request id a message answers, if it is a reply (ack, run_done, infer_result).
    std::function<std::optional<uint64_t>(const envelope&)> reply_id;
    /// Every message that completes no pending request. Runs on the I/O thread.
    std::function<void(const peer&, envelope&&)> on_message;
    /// Every `tick` (and after each burst of messages). Runs on the I/O thread.
    std::function<void(clock::time_point)> on_tick;
    /// A peer's TCP connection closed (ZeroMQ socket monitor, ZMQ_EVENT_DISCONNECTED). ROUTER: the
    /// peer is the routing id last heard on that connection; DEALER: its one peer (""). ZeroMQ may
    /// reconnect it: the owner decides (e.g. a shorter silence deadline). Runs on the I/O thread.
    std::function<void(const peer&)> on_disconnect;
  };

  struct options {
    std::string name = "channel";  ///< for logs and error messages
    zmq::socket_type type = zmq::socket_type::router;
    std::string bind;     ///< bind here (ROUTER servers), or
    std::string connect;  ///< connect here (DEALER clients)
    std::chrono::milliseconds tick{10};
    /// Socket options applied before bind/connect (security, identity, reconnect intervals).
    std::function<void(zmq::socket_t&)> configure;
  };

  /// Creates the socket and binds or connects it. Nothing runs until start(): handlers may use
  /// the channel pointer once the owner has stored it.
  static result<std::unique_ptr<channel>> open(zmq::context_t& ctx, options opts, handlers h);
  /// Starts the I/O thread (once). Work posted before runs first.
  void start();
  ~channel();
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;

  /// The bound endpoint (the real port when bound to port 0).
  const std::string& endpoint() const;
  const std::string& name() const;

  // ---- any thread ----
  /// Sends without expecting a reply. Failures are logged (a request would report them).
  void send(peer to, envelope e);
  /// Sends a request; `done` runs exactly once on the I/O thread (see the file comment). Called
  /// on the I/O thread, it is sent at once (and `done` may run before it returns).
  void request(peer to, uint64_t id, envelope e, clock::time_point deadline, completion done);
  /// Completes every pending request to `p` with `why` (the peer is gone or unusable).
  void fail_peer(peer p, status why);
  /// fail_peer, and every later request to `p` fails at once with `why`: for peers whose identity
  /// is never reused (a tile's routing id carries its incarnation). Closes the window where a
  /// request posted before the failure was seen would wait for its deadline.
  void retire_peer(peer p, status why);
  /// Runs `fn` on the I/O thread; false (and `fn` dropped) once the channel has stopped.
  bool post(std::function<void()> fn);
  /// Completes pending requests with `cancelled`, runs posted work, joins the I/O thread.
  /// `linger` lets replies already sent leave the socket.
  void stop(std::chrono::milliseconds linger = std::chrono::milliseconds(0));
  bool on_io_thread() const;
  /// Times the I/O thread has polled: an idle channel wakes about once a tick.
  uint64_t wakeups() const;

  // ---- I/O thread only (inside handlers and posted functions) ----
  /// Sends now; peer_failed when the peer is unreachable, overloaded when a queue is full.
  status send_now(const peer& to, envelope&& e);
  /// Moves the deadline of a pending request (e.g. shortens it after an abort).
  void set_deadline(const peer& p, uint64_t id, clock::time_point deadline);
  /// When `p` last sent anything (nullopt: never).
  std::optional<clock::time_point> last_heard(const peer& p) const;
  /// Requests pending to `p` (all peers when nullopt).
  size_t pending(const std::optional<peer>& p = std::nullopt) const;

  struct impl;

 private:
  explicit channel(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace tessera::exchange
