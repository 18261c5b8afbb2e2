#include "wire_reader.hpp"

#include <algorithm>

namespace tessera::exchange {

status parse_header(const char* data, size_t size, parsed_header& out) {
  if (size == 0) return status::bad_message("empty header frame");
  if (size > max_header_bytes)
    return status::bad_message("header of " + std::to_string(size) + " bytes exceeds the limit of " +
                               std::to_string(max_header_bytes));
  try {
    // Limits: arrays/maps/strings/bins no larger than this header could hold (an element takes at
    // least a byte: msgpack allocates a declared array before reading it, so a limit of the
    // maximum header size let a 6-byte frame claiming 2^32 elements allocate 64 MiB); depth 8.
    msgpack::unpack_limit limit(size, std::min<size_t>(64, size / 2), size, size, 0, 8);
    size_t off = 0;
    out.handle = msgpack::unpack(data, size, off, nullptr, nullptr, limit);
    if (off != size) return status::bad_message("header has " + std::to_string(size - off) + " trailing bytes");
  } catch (const std::exception& ex) {
    return status::bad_message(std::string("header is not valid msgpack: ") + ex.what());
  }
  const msgpack::object& root = out.handle.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size != 4)
    return status::bad_message("header is not a 4-element array [magic, version, type, body]");
  const msgpack::object* f = root.via.array.ptr;
  if (f[0].type != msgpack::type::POSITIVE_INTEGER || f[0].via.u64 != protocol_magic)
    return status::bad_message("bad magic: not a tessera message");
  if (f[1].type != msgpack::type::POSITIVE_INTEGER || f[1].via.u64 != protocol_version)
    return status::bad_message("protocol version " +
                               (f[1].type == msgpack::type::POSITIVE_INTEGER ? std::to_string(f[1].via.u64)
                                                                             : std::string("?")) +
                               " is not this build's version " + std::to_string(protocol_version) +
                               "; run the same tessera build on every host");
  if (f[2].type != msgpack::type::POSITIVE_INTEGER || msg_type_name(static_cast<msg_type>(f[2].via.u64)) == "unknown" ||
      f[2].via.u64 > 255)
    return status::bad_message("unknown message type");
  if (f[3].type != msgpack::type::ARRAY) return status::bad_message("message body is not an array");
  out.type = static_cast<msg_type>(f[2].via.u64);
  out.body_obj = &f[3];
  return ok_status();
}

}  // namespace tessera::exchange
