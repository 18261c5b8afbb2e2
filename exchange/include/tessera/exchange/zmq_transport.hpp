// tessera/exchange/zmq_transport.hpp: the exchange fabric over ZeroMQ (ipc:// and tcp://).
//
// Each tile binds one PULL socket; it connects one PUSH socket per peer once the host sends the
// peer directory. Multipart frames go out with sndmore and zero re-encoding; payload frames are
// moved into ZeroMQ, never copied again by tessera (a borrow_frame payload is not copied at all).
// A message to the tile itself stays in the process (loopback queue), without a socket.
#pragma once

#include <deque>
#include <zmq.hpp>

#include "tessera/exchange/transport.hpp"

namespace tessera::exchange {

class zmq_transport final : public transport {
 public:
  /// Binds the inbound socket at `bind_endpoint` ("ipc:///path", "tcp://0.0.0.0:0" for any port).
  static result<std::unique_ptr<zmq_transport>> bind(zmq::context_t& ctx, uint32_t self, const std::string& bind_endpoint);

  /// The endpoint peers should connect to. For tcp with a wildcard address, `advertise_host`
  /// replaces the address (e.g. this machine's name or IP).
  std::string endpoint(const std::string& advertise_host = "") const;
  /// Connects to every peer (index = tile id; own entry ignored: messages to self loop back). May be called again after a
  /// peer restarts: links whose endpoint changed are reconnected.
  status connect_peers(const std::vector<std::string>& endpoints);

  uint32_t self() const override { return self_; }
  status send(uint32_t peer, envelope&& e) override;
  result<bool> recv(envelope& out, std::chrono::milliseconds timeout) override;
  uint64_t bytes_sent() const override { return bytes_sent_; }
  uint64_t bytes_received() const override { return bytes_received_; }

  /// The inbound socket, for a poller that also waits on other sockets. Call recv(out, 0ms)
  /// before polling: messages to self are queued in the process, not on this socket.
  zmq::socket_t& inbound() { return inbound_; }
  /// Receives one message that is ready (loopback first), without waiting.
  result<bool> recv_ready(envelope& out) { return recv(out, std::chrono::milliseconds(0)); }

 private:
  zmq_transport(zmq::context_t& ctx, uint32_t self);
  zmq::context_t& ctx_;
  uint32_t self_;
  zmq::socket_t inbound_;
  std::string bound_;
  std::vector<std::string> peer_endpoints_;
  std::vector<std::unique_ptr<zmq::socket_t>> outbound_;
  std::deque<envelope> loopback_;  // sent to self, not yet received
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
};

/// Sends a multipart envelope on any socket (DEALER, PUSH, ...). false if it would block.
bool send_envelope(zmq::socket_t& s, envelope&& e, zmq::send_flags flags = zmq::send_flags::none);
/// Receives a multipart envelope; `prefix` receives routing frames before the header
/// (one for a ROUTER socket, zero otherwise). Returns false when nothing was ready (dontwait).
/// Fails with bad_message when more frames arrive than the protocol allows (the rest is drained).
result<bool> recv_envelope(zmq::socket_t& s, envelope& out, std::vector<zmq::message_t>* prefix = nullptr,
                           size_t prefix_frames = 0, zmq::recv_flags flags = zmq::recv_flags::none);

/// Socket options every tessera socket uses: no linger on close, bounded queues.
void apply_socket_defaults(zmq::socket_t& s);

}  // namespace tessera::exchange
