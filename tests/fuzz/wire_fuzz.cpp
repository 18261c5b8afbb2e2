// libFuzzer target over the wire-protocol decoder: every message type's decode() on every input
// (see wire_frames.hpp for the input format). Invariants beyond "no crash, no sanitizer report":
//  - at most one type decodes a message, the type peek_type() names;
//  - a rejection is a bad_message status, never another code or an exception;
//  - a decoded message re-encodes to a message that decodes, and encoding is then a fixpoint
//    (encode(decode(encode(m))) has the same bytes as encode(m)).
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <string>

#include "tessera/exchange/codec.hpp"
#include "wire_frames.hpp"

using namespace tessera;
using namespace tessera::exchange;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "wire_fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

std::vector<zmq::message_t> copies(const envelope& e, size_t from = 0) {
  std::vector<zmq::message_t> out;
  for (size_t i = from; i < e.payloads.size(); ++i) out.push_back(copy_frame(e.payloads[i].data(), e.payloads[i].size()));
  return out;
}
zmq::message_t copy_of(const envelope& e, size_t i) {
  return i < e.payloads.size() ? copy_frame(e.payloads[i].data(), e.payloads[i].size()) : zmq::message_t();
}

// Re-encoding with the payload frames the decoded message came with.
template <class T>
envelope reencode(const T& m, const envelope&) { return encode(m); }
envelope reencode(const alloc_tensor& m, const envelope& e) { return encode(m, copy_of(e, 0)); }
envelope reencode(const run_program& m, const envelope& e) { return encode(m, copies(e)); }
envelope reencode(const exchange_data& m, const envelope& e) { return encode(m, copy_of(e, 0)); }
envelope reencode(const run_done& m, const envelope& e) { return encode(m, copies(e)); }
envelope reencode(const ack& m, const envelope& e) { return encode(m, copies(e)); }
envelope reencode(const infer_batch& m, const envelope& e) { return encode(m, copy_of(e, 0), copy_of(e, 1)); }
envelope reencode(const infer_result& m, const envelope& e) {
  return m.code == errc::ok ? encode(m, copy_of(e, 0)) : encode(m);
}

bool same_bytes(const zmq::message_t& a, const zmq::message_t& b) {
  return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size()) == 0);
}
bool same_envelope(const envelope& a, const envelope& b) {
  if (!same_bytes(a.header, b.header) || a.payloads.size() != b.payloads.size()) return false;
  for (size_t i = 0; i < a.payloads.size(); ++i)
    if (!same_bytes(a.payloads[i], b.payloads[i])) return false;
  return true;
}

template <class T>
int try_decode(const envelope& e, msg_type type, const result<msg_type>& peeked) {
  T m;
  status st = decode(e, m);
  if (!st.ok()) {
    if (st.code() != errc::bad_message)
      fail(std::string(msg_type_name(type)) + ": rejected with a code other than bad_message: " + st.to_string());
    return 0;
  }
  if (!peeked || *peeked != type)
    fail(std::string(msg_type_name(type)) + " decoded a message that peek_type() does not call one");
  envelope once = reencode(m, e);
  T again;
  if (status st2 = decode(once, again); !st2.ok())
    fail(std::string(msg_type_name(type)) + ": its own encoding does not decode: " + st2.to_string());
  envelope twice = reencode(again, once);
  if (!same_envelope(once, twice)) fail(std::string(msg_type_name(type)) + ": encoding is not a fixpoint");
  return 1;
}

}  // namespace

using decoder = int (*)(const envelope&, msg_type, const result<msg_type>&);
struct decoder_entry {
  msg_type type;
  decoder run;
};
constexpr decoder_entry decoders[] = {
    {msg_type::register_tile, try_decode<register_tile>},
    {msg_type::peer_directory, try_decode<peer_directory>},
    {msg_type::alloc_tensor, try_decode<alloc_tensor>},
    {msg_type::free_tensors, try_decode<free_tensors>},
    {msg_type::load_program, try_decode<load_program>},
    {msg_type::run_program, try_decode<run_program>},
    {msg_type::exchange_data, try_decode<exchange_data>},
    {msg_type::sync_token, try_decode<sync_token>},
    {msg_type::run_done, try_decode<run_done>},
    {msg_type::heartbeat, try_decode<heartbeat>},
    {msg_type::shutdown, try_decode<shutdown>},
    {msg_type::ack, try_decode<ack>},
    {msg_type::abort_run, try_decode<abort_run>},
    {msg_type::fetch_tensor, try_decode<fetch_tensor>},
    {msg_type::infer_batch, try_decode<infer_batch>},
    {msg_type::infer_result, try_decode<infer_result>},
};
constexpr size_t num_decoders = sizeof(decoders) / sizeof(decoders[0]);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Every input meets the decoder of the type its header names (the one that parses the body)
  // and one other decoder chosen by its last byte (which must refuse it); over a run every
  // decoder meets every type. Parsing 16 times per input would cost most of the run's speed.
  try {
    envelope e = fuzz::split_frames(std::string_view(reinterpret_cast<const char*>(data), size));
    result<msg_type> peeked = peek_type(e);
    if (!peeked && peeked.error().code() != errc::bad_message) fail("peek_type: " + peeked.error().to_string());
    const size_t other = size > 0 ? data[size - 1] % num_decoders : 0;
    int decoded = 0;
    for (size_t i = 0; i < num_decoders; ++i)
      if ((peeked && decoders[i].type == *peeked) || i == other)
        decoded += decoders[i].run(e, decoders[i].type, peeked);
    if (decoded > 1) fail("one message decoded as " + std::to_string(decoded) + " types");
  } catch (const std::exception& ex) {
    fail(std::string("an exception left the decoder: ") + ex.what());
  }
  return 0;
}
