// UTF-8 checks over utf8cpp. See utf8.hpp.
#include "tessera/serving/utf8.hpp"

#include <cstdio>
#include <utf8.h>

namespace tessera::serving {

namespace {

std::string_view reason_of(utf8::internal::utf_error e) {
  switch (e) {
    case utf8::internal::NOT_ENOUGH_ROOM: return "sequence truncated by the end of the text";
    case utf8::internal::INVALID_LEAD: return "not a valid leading byte";
    case utf8::internal::INCOMPLETE_SEQUENCE: return "missing continuation byte";
    case utf8::internal::OVERLONG_SEQUENCE: return "overlong encoding";
    case utf8::internal::INVALID_CODE_POINT:
      return "encodes a UTF-16 surrogate or a code point above U+10FFFF";
    default: return "invalid sequence";
  }
}

}  // namespace

std::string utf8_error::describe(std::string_view where) const {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", byte);
  return "invalid UTF-8 at byte " + std::to_string(offset) + " of " + std::string(where) + " (" +
         hex + "): " + std::string(reason) + "; send UTF-8 text";
}

std::optional<utf8_error> find_invalid_utf8(std::string_view s) {
  const size_t at = utf8::find_invalid(s);
  if (at == std::string_view::npos) return std::nullopt;
  // utf8cpp's public API says where; its validate_next (the same check) says why.
  auto it = s.begin() + static_cast<std::ptrdiff_t>(at);
  const auto err = utf8::internal::validate_next(it, s.end());
  return utf8_error{at, static_cast<unsigned char>(s[at]), reason_of(err)};
}

std::string printable(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return utf8::replace_invalid(s);
  size_t cut = max_bytes;  // back up to a character boundary (at most 3 continuation bytes)
  for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80; ++k) --cut;
  return utf8::replace_invalid(s.substr(0, cut)) + "...";
}

}  // namespace tessera::serving
