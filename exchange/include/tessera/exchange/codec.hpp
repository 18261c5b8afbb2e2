// tessera/exchange/codec.hpp: messages to and from ZeroMQ multipart envelopes.
//
// Encoding never fails. Decoding checks everything a peer could get wrong or forge: magic,
// protocol version, message type, field types and counts, tensor ranks and sizes against
// max_tensor_bytes, payload frame count and each frame's length against the shape it claims,
// tile ids against the group size when the caller knows it. The msgpack parser runs with
// limits (array, map, string, bin sizes, depth) so no header can make a process allocate
// without bound. A bad message is a status with code bad_message, never a crash.
//
//   envelope e = encode(exchange_data{...}, std::move(frame));
//   auto t = peek_type(e);                      // result<msg_type>
//   exchange_data d;
//   if (auto st = decode(e, d); !st.ok()) count_bad_message(st);
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "tessera/common/status.hpp"
#include "tessera/exchange/protocol.hpp"

namespace tessera::exchange {

/// One multipart message: a msgpack header frame and raw payload frames.
struct envelope {
  zmq::message_t header;
  std::vector<zmq::message_t> payloads;
  /// The payload frames came off an ipc/tcp socket (zmq_transport::recv): ZeroMQ allocated
  /// their bytes for this envelope alone, so the receiver may keep and write them (a tile
  /// receives a slice in place). False for anything built or looped back in this process,
  /// whose frames may borrow another tile's memory (borrow_frame).
  bool private_payloads = false;
  uint64_t payload_bytes() const;
};

/// Reads frame 0 only as far as needed to dispatch: magic, version and type.
result<msg_type> peek_type(const envelope& e);
/// The id a request or reply carries (ack: request_id; run_done, infer_batch, infer_result:
/// batch_id), read from a well-formed header without decoding the rest; nullopt otherwise.
std::optional<uint64_t> peek_request_id(const envelope& e);

envelope encode(const register_tile& m);
envelope encode(const peer_directory& m);
envelope encode(const alloc_tensor& m, zmq::message_t data = {});
envelope encode(const free_tensors& m);
envelope encode(const load_program& m);
envelope encode(const run_program& m, std::vector<zmq::message_t> inputs);
envelope encode(const exchange_data& m, zmq::message_t slice);
envelope encode(const sync_token& m);
envelope encode(const run_done& m, std::vector<zmq::message_t> outputs);
envelope encode(const heartbeat& m);
envelope encode(const shutdown& m);
envelope encode(const ack& m, std::vector<zmq::message_t> payloads = {});
envelope encode(const abort_run& m);
envelope encode(const fetch_tensor& m);
envelope encode(const infer_batch& m, zmq::message_t token_ids, zmq::message_t token_types);
envelope encode(const infer_result& m, zmq::message_t logits = {});

// Each decode checks the header's type matches and validates the payload frames.
status decode(const envelope& e, register_tile& out);
status decode(const envelope& e, peer_directory& out);
status decode(const envelope& e, alloc_tensor& out);
status decode(const envelope& e, free_tensors& out);
status decode(const envelope& e, load_program& out);
status decode(const envelope& e, run_program& out);
status decode(const envelope& e, exchange_data& out);
status decode(const envelope& e, sync_token& out);
status decode(const envelope& e, run_done& out);
status decode(const envelope& e, heartbeat& out);
status decode(const envelope& e, shutdown& out);
status decode(const envelope& e, ack& out);
status decode(const envelope& e, abort_run& out);
status decode(const envelope& e, fetch_tensor& out);
status decode(const envelope& e, infer_batch& out);
status decode(const envelope& e, infer_result& out);

/// Checks ids in a decoded message against a group of `group_size` tiles.
status check_tile_id(uint32_t tile_id, uint32_t group_size, const char* field);

/// A zmq frame holding a copy of `bytes` bytes (the one copy a send needs: the source is tile
/// memory that the next superstep may overwrite).
zmq::message_t copy_frame(const void* data, size_t bytes);

/// A zmq frame that references `bytes` bytes at `data` without copying them (zmq_msg_init_data).
/// Increments `*in_flight` now; ZeroMQ decrements it (release order) once it no longer reads
/// the bytes: for ipc/tcp when its I/O thread has written them to the kernel or dropped them
/// (socket closed, linger 0), for a frame that never left the process when the last copy of
/// the message is destroyed. Until then the caller must neither modify nor unmap the bytes,
/// and `*in_flight` must outlive the frame (and every socket and context it may sit in).
/// Use copy_frame when the source may change before the frame is gone. 0 bytes: an empty frame,
/// `*in_flight` untouched.
///
///   std::atomic<uint32_t> in_flight{0};
///   t.send(peer, encode(exchange_data{...}, borrow_frame(slice, n * 4, &in_flight)));
///   ... before writing the slice again: wait until in_flight.load(std::memory_order_acquire) == 0
zmq::message_t borrow_frame(const void* data, size_t bytes, std::atomic<uint32_t>* in_flight);
/// As above, and the frame also holds a reference to `owner` (the storage of the bytes, e.g. a
/// received message a tile keeps as a slice) until ZeroMQ releases it, so the bytes outlive
/// the frame even when their holder drops them first.
zmq::message_t borrow_frame(const void* data, size_t bytes, std::atomic<uint32_t>* in_flight,
                            std::shared_ptr<void> owner);

}  // namespace tessera::exchange
