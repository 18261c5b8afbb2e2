#include "tessera/exchange/zmq_transport.hpp"

#include "tessera/common/log.hpp"
#include "tessera/exchange/security.hpp"

namespace tessera::exchange {

namespace {
// A header plus at most this many payload frames; anything longer is not a tessera message.
constexpr size_t max_frames = 1 + 1024;
}  // namespace

void apply_socket_defaults(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 10000);
  s.set(zmq::sockopt::rcvhwm, 10000);
  // No single frame above the protocol's largest tensor plus header.
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_tensor_bytes));
}

bool send_envelope(zmq::socket_t& s, envelope&& e, zmq::send_flags flags) {
  const bool more = !e.payloads.empty();
  auto r = s.send(e.header, more ? (flags | zmq::send_flags::sndmore) : flags);
  if (!r) return false;
  for (size_t i = 0; i < e.payloads.size(); ++i) {
    const bool last = i + 1 == e.payloads.size();
    // Once the first frame is queued the rest of a multipart message is atomic in ZeroMQ.
    s.send(e.payloads[i], last ? zmq::send_flags::none : zmq::send_flags::sndmore);
  }
  return true;
}

result<bool> recv_envelope(zmq::socket_t& s, envelope& out, std::vector<zmq::message_t>* prefix, size_t prefix_frames,
                           zmq::recv_flags flags) {
  out.payloads.clear();
  if (prefix) prefix->clear();
  zmq::message_t first;
  if (!s.recv(first, flags)) return false;
  size_t index = 0;
  bool more = first.more();
  auto place = [&](zmq::message_t&& m) {
    if (index < prefix_frames) {
      if (prefix) prefix->push_back(std::move(m));
    } else if (index == prefix_frames) {
      out.header = std::move(m);
    } else {
      out.payloads.push_back(std::move(m));
    }
    ++index;
  };
  place(std::move(first));
  bool too_many = false;
  while (more) {
    zmq::message_t m;
    (void)s.recv(m, zmq::recv_flags::none);  // the rest of a multipart message is already here
    more = m.more();
    if (index >= prefix_frames + max_frames) {
      too_many = true;  // drain and drop
      continue;
    }
    place(std::move(m));
  }
  if (too_many) return status::bad_message("message has more than " + std::to_string(max_frames) + " frames");
  if (index <= prefix_frames) return status::bad_message("message has no header frame");
  return true;
}

zmq_transport::zmq_transport(zmq::context_t& ctx, uint32_t self)
    : ctx_(ctx), self_(self), inbound_(ctx, zmq::socket_type::pull) {}

result<std::unique_ptr<zmq_transport>> zmq_transport::bind(zmq::context_t& ctx, uint32_t self,
                                                           const std::string& bind_endpoint) {
  std::unique_ptr<zmq_transport> t(new zmq_transport(ctx, self));
  apply_socket_defaults(t->inbound_);
  t->inbound_.set(zmq::sockopt::rcvhwm, 0);  // the program bounds what is in flight
  secure_server(ctx, t->inbound_);            // CurveZMQ + ZAP when keys are loaded
  try {
    t->inbound_.bind(bind_endpoint);
    t->bound_ = t->inbound_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& ex) {
    return status::io_error("cannot bind the exchange socket at " + bind_endpoint + ": " + ex.what());
  }
  return t;
}

std::string zmq_transport::endpoint(const std::string& advertise_host) const {
  if (advertise_host.empty() || bound_.rfind("tcp://", 0) != 0) return bound_;
  auto colon = bound_.rfind(':');
  return "tcp://" + advertise_host + bound_.substr(colon);
}

status zmq_transport::connect_peers(const std::vector<std::string>& endpoints) {
  if (outbound_.size() < endpoints.size()) outbound_.resize(endpoints.size());
  if (peer_endpoints_.size() < endpoints.size()) peer_endpoints_.resize(endpoints.size());
  for (uint32_t i = 0; i < endpoints.size(); ++i) {
    if (i == self_) continue;  // no PUSH to this tile's own PULL: send() loops back in process
    if (endpoints[i] == peer_endpoints_[i] && outbound_[i]) continue;
    try {
      auto s = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::push);
      apply_socket_defaults(*s);
      s->set(zmq::sockopt::sndhwm, 0);  // never drop or block on a bounded program
      secure_exchange_client(*s);
      s->connect(endpoints[i]);
      outbound_[i] = std::move(s);
      peer_endpoints_[i] = endpoints[i];
    } catch (const zmq::error_t& ex) {
      return status::io_error("cannot connect to tile " + std::to_string(i) + " at " + endpoints[i] + ": " + ex.what());
    }
  }
  return ok_status();
}

status zmq_transport::send(uint32_t peer, envelope&& e) {
  if (peer == self_) {  // a program may send to its own tile: no socket round trip
    bytes_sent_ += e.payload_bytes();
    loopback_.push_back(std::move(e));
    return ok_status();
  }
  if (peer >= outbound_.size() || !outbound_[peer])
    return status::invalid("tile " + std::to_string(self_) + " has no link to tile " + std::to_string(peer));
  bytes_sent_ += e.payload_bytes();
  try {
    send_envelope(*outbound_[peer], std::move(e));
  } catch (const zmq::error_t& ex) {
    return status::io_error(std::string("send failed: ") + ex.what());
  }
  return ok_status();
}

result<bool> zmq_transport::recv(envelope& out, std::chrono::milliseconds timeout) {
  if (!loopback_.empty()) {
    out = std::move(loopback_.front());
    loopback_.pop_front();
    out.private_payloads = false;  // may borrow this tile's own memory
    bytes_received_ += out.payload_bytes();
    return true;
  }
  try {
    // Take what is queued first: zmq_poll costs a poll(2) even when a message is ready.
    auto got = recv_envelope(inbound_, out, nullptr, 0, zmq::recv_flags::dontwait);
    if (got && !*got && timeout.count() > 0) {
      zmq::pollitem_t item{inbound_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, timeout) == 0) return false;
      got = recv_envelope(inbound_, out, nullptr, 0, zmq::recv_flags::dontwait);
    }
    if (got && *got) {
      bytes_received_ += out.payload_bytes();
      // Off an ipc/tcp socket, the bytes are ZeroMQ's own allocation; inproc passes the
      // sender's frames through (borrowed memory of another tile in this process).
      out.private_payloads = bound_.rfind("inproc://", 0) != 0;
    }
    return got;
  } catch (const zmq::error_t& ex) {
    if (ex.num() == ETERM) return status{errc::cancelled, "exchange context terminated"};
    return status::io_error(std::string("receive failed: ") + ex.what());
  }
}

}  // namespace tessera::exchange
