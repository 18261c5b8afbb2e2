// Private: Unicode properties for the tokenizers, backed by generated tables (unicode_tables.cpp),
// and UTF-8 decoding (unicode.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/status.hpp"

namespace tessera::models::unicode {

enum char_class_bits : uint8_t {
  punctuation = 1,     ///< P* or ASCII punctuation (BERT's definition)
  control = 2,         ///< C* except \t \n \r (dropped by the cleaner)
  nonspacing_mark = 4, ///< Mn (dropped when stripping accents)
  whitespace = 8,      ///< White_Space
  cased = 16,          ///< Cased (final-sigma rule)
  case_ignorable = 32, ///< Case_Ignorable, approximately (final-sigma rule)
  letter = 64,         ///< L* (\p{L} in GPT-2's pre-tokenizer)
  number = 128,        ///< N* (\p{N})
};

namespace tables {
struct class_run { char32_t first; uint8_t bits; };
struct code_pair { char32_t from, to; };
struct decomposition { char32_t cp; uint32_t offset; uint8_t length; };
extern const class_run class_runs[];
extern const int class_runs_size;
extern const code_pair lower_map[];
extern const int lower_map_size;
extern const decomposition nfd_map[];
extern const int nfd_map_size;
extern const char32_t nfd_pool[];
extern const int nfd_pool_size;
}  // namespace tables

/// Bitmask of char_class_bits.
uint8_t char_class(char32_t cp);
/// Simple lower-case mapping (cp itself when none).
char32_t to_lower(char32_t cp);
/// Appends the canonical decomposition (NFD) of cp.
void append_nfd(char32_t cp, std::u32string& out);
/// BERT's "Chinese character" ranges (CJK Unified Ideographs and extensions, compatibility).
bool is_cjk(char32_t cp);

/// Code points of well-formed UTF-8, or an error naming the byte offset and what is wrong.
result<std::u32string> decode_utf8(std::string_view s);
void append_utf8(char32_t cp, std::string& out);

/// One step of UTF-8 decoding at s[i]: a character (`length` bytes, code point `cp`), a maximal
/// ill-formed subpart (`length` >= 1 bytes to replace by one U+FFFD), or the start of a character
/// cut off by the end of s (`length` bytes so far, all of them still possible).
struct utf8_unit {
  enum kind_t : uint8_t { valid, invalid, incomplete } kind;
  size_t length;
  char32_t cp;
};
utf8_unit next_utf8(std::string_view s, size_t i);
inline constexpr std::string_view replacement_utf8 = "\xEF\xBF\xBD";  // U+FFFD
/// s with each maximal ill-formed subpart (and a cut-off tail) replaced by U+FFFD.
void append_utf8_lossy(std::string_view s, std::string& out);
bool is_valid_utf8(std::string_view s);
/// Unicode Normalization Form C of well-formed UTF-8 (utf8proc); ill-formed input is returned as is.
std::string nfc(std::string_view s);

}  // namespace tessera::models::unicode
