// tessera/serving/utf8.hpp: checks that text from a client is UTF-8 before anything parses,
// tokenizes or echoes it, and makes user text safe to quote in an error message.
//
// The check itself is utf8cpp's (Debian's libutfcpp-dev): it rejects stray continuation bytes,
// invalid lead bytes, truncated sequences, overlong encodings, UTF-16 surrogates encoded in UTF-8
// and code points above U+10FFFF. NUL is valid UTF-8; JSON decides about it.
//
//   if (auto bad = find_invalid_utf8(body))
//     return error(400, bad->describe("the request body"));  // "... at byte 9 (0xFF): ..."
//   std::string quoted = printable(path, 100);                // invalid bytes -> U+FFFD
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::serving {

/// Where and why a text is not UTF-8.
struct utf8_error {
  size_t offset = 0;        ///< byte offset of the first byte of the bad sequence
  unsigned char byte = 0;   ///< that byte
  std::string_view reason;  ///< "overlong encoding", "truncated sequence", ...

  /// "invalid UTF-8 at byte 9 of <where> (0xFF): not a valid leading byte; send UTF-8 text".
  /// Never contains the invalid bytes themselves.
  std::string describe(std::string_view where) const;
};

/// The first invalid sequence of `s`, or nullopt when all of `s` is UTF-8.
std::optional<utf8_error> find_invalid_utf8(std::string_view s);

/// `s` made safe to quote: invalid sequences become U+FFFD, and when `s` is longer than
/// `max_bytes` it is cut (on a character boundary) and "..." appended.
std::string printable(std::string_view s, size_t max_bytes = 200);

}  // namespace tessera::serving
