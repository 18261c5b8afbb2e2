// Private: Unicode properties for the tokenizer, backed by generated tables (unicode_tables.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace tessera::models::unicode {

enum char_class_bits : uint8_t {
  punctuation = 1,     ///< P* or ASCII punctuation (BERT's definition)
  control = 2,         ///< C* except \t \n \r (dropped by the cleaner)
  nonspacing_mark = 4, ///< Mn (dropped when stripping accents)
  whitespace = 8,      ///< White_Space
  cased = 16,          ///< Cased (final-sigma rule)
  case_ignorable = 32, ///< Case_Ignorable, approximately (final-sigma rule)
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

}  // namespace tessera::models::unicode
