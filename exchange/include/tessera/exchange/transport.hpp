// tessera/exchange/transport.hpp: the exchange fabric between the tiles of a group.
//
// A transport moves envelopes point to point: send(peer, e) and recv() of whatever arrives
// next from any peer. Ordering is per link (FIFO from one sender), not global; the superstep
// loop never depends on timing across links, because every message names its program, batch,
// superstep and tag. Two implementations:
//   * zmq_transport (zmq_transport.hpp): one PULL socket bound per tile (ipc:// or tcp://), one
//     PUSH socket per peer; what real tile processes use.
//   * inproc_fabric (inproc_transport.hpp): mailboxes in one process, for unit tests only.
//
//   auto t = make_zmq_transport(ctx, self, "ipc:///tmp/tessera/tile-0.sock");
//   t->connect_peers(directory.endpoints);
//   t->send(1, encode(sync_token{...}));
//   envelope e; auto got = t->recv(e, std::chrono::milliseconds(100));
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/exchange/codec.hpp"

namespace tessera::exchange {

class transport {
 public:
  virtual ~transport() = default;
  /// This tile's id.
  virtual uint32_t self() const = 0;
  /// Queues `e` for `peer`. Fails only if the peer is unknown or the fabric is shut down.
  virtual status send(uint32_t peer, envelope&& e) = 0;
  /// Waits up to `timeout` for the next message. true: `out` holds it; false: timed out.
  virtual result<bool> recv(envelope& out, std::chrono::milliseconds timeout) = 0;
  /// Bytes handed to send() / returned by recv() so far (payload frames only).
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;
};

}  // namespace tessera::exchange
